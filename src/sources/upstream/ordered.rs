//! A client transport that hands notifications to the inbox in wire order.
//!
//! rmcp's client runs each notification handler in a task of its own, so handlers see
//! notifications in any order. [`Ordered`] sits under rmcp instead: its `receive` sees every
//! message in the order it came off the wire, maps each notification that is a message, and
//! puts it on one bounded channel that a single task appends to the inbox from. Protocol
//! traffic (responses, requests, progress, list changes) goes on to rmcp untouched.
//!
//! Backpressure: when the channel is full, `receive` waits for room, so rmcp stops reading
//! and the upstream blocks on its own writes (a pipe or a TCP window). Nothing is dropped.
//! rmcp polls `receive` inside a `select!` and may drop the future, so the one message that
//! did not fit is kept in `pending` and sent first on the next call: no message is lost to a
//! cancelled `receive`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::{Notify, mpsc};

use super::Counters;
use super::config::UpstreamConfig;
use super::mapping;
use crate::message::NewMessage;

/// The wrapper. See the module docs.
pub struct Ordered<T> {
    inner: T,
    up: Arc<UpstreamConfig>,
    tx: mpsc::Sender<NewMessage>,
    pending: Option<NewMessage>,
    counters: Arc<Counters>,
    list_changed: Arc<Notify>,
    /// MCP Events notifications (`notifications/events/*`), in wire order, for the upstream's
    /// events consumer ([`super::events`]); bounded like the messages.
    events: mpsc::Sender<super::events::Note>,
    pending_event: Option<super::events::Note>,
}

impl<T> Ordered<T> {
    /// Wraps `inner` for upstream `up`; messages go to `tx`, tool list changes to `list_changed`.
    pub fn new(
        inner: T,
        up: Arc<UpstreamConfig>,
        tx: mpsc::Sender<NewMessage>,
        counters: Arc<Counters>,
        list_changed: Arc<Notify>,
        events: mpsc::Sender<super::events::Note>,
    ) -> Ordered<T> {
        Ordered {
            inner,
            up,
            tx,
            pending: None,
            counters,
            list_changed,
            events,
            pending_event: None,
        }
    }

    /// An MCP Events notification, taken for the events consumer.
    fn take_event(msg: &ServerJsonRpcMessage) -> Option<super::events::Note> {
        let JsonRpcMessage::Notification(n) = msg else {
            return None;
        };
        let value = serde_json::to_value(&n.notification).ok()?;
        let method = value.get("method")?.as_str()?;
        method.starts_with("notifications/events/").then(|| {
            let params = value.get("params").cloned().unwrap_or_default();
            (method.to_string(), params)
        })
    }

    /// Maps a notification; `true` when it was taken as a message (or dropped by the allow-list).
    fn take(&mut self, msg: &ServerJsonRpcMessage) -> Option<Option<NewMessage>> {
        let JsonRpcMessage::Notification(n) = msg else {
            return None;
        };
        let value = serde_json::to_value(&n.notification).ok()?;
        let method = value.get("method")?.as_str()?;
        if method == "notifications/tools/list_changed" {
            self.list_changed.notify_one();
            return None;
        }
        let new = mapping::to_message(&self.up, method, value.get("params"))?;
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        if !self
            .up
            .allows(&crate::message::normalize_channel(&new.channel))
        {
            self.counters.filtered.fetch_add(1, Ordering::Relaxed);
            return Some(None);
        }
        Some(Some(new))
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Ordered<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            if self.pending.is_some() {
                // Cancel-safe: the message stays in `pending` until a permit is in hand.
                if let Ok(permit) = self.tx.reserve().await
                    && let Some(m) = self.pending.take()
                {
                    permit.send(m);
                } else {
                    self.pending = None;
                }
            }
            if self.pending_event.is_some() {
                // Cancel-safe as above.
                if let Ok(permit) = self.events.reserve().await
                    && let Some(e) = self.pending_event.take()
                {
                    permit.send(e);
                } else {
                    self.pending_event = None;
                }
            }
            let msg = self.inner.receive().await?;
            if let Some(note) = Self::take_event(&msg) {
                if let Err(mpsc::error::TrySendError::Full(note)) = self.events.try_send(note) {
                    self.pending_event = Some(note);
                }
                continue;
            }
            match self.take(&msg) {
                None => return Some(msg),
                Some(None) => continue,
                Some(Some(new)) => match self.tx.try_send(new) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(new)) => {
                        self.counters.reader_waits.fetch_add(1, Ordering::Relaxed);
                        self.pending = Some(new);
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => {}
                },
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
