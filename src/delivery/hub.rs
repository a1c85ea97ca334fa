//! The delivery hub: deliverable actions, per consumer.
//!
//! CONTRACT: the dispatcher `offer`s every action with its message; consumers
//! `take` or `wait` for items. Nudges and confirm requests are per consumer
//! (each consumer sees each once); auto prompts and approved confirms are
//! consumed by the first consumer that takes them. `subscribe` yields every
//! new deliverable item for push channels (best effort). Queues are bounded.
//!
//! STUB: memory only, unbounded, no journal, no expiry timer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, broadcast};

use crate::actions::{Action, ActionId, Mode};
use crate::message::Message;

/// What a delivered item asks of the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// Run this prompt now, with these tools.
    Auto,
    /// The user approved a confirm: run this prompt now, with these tools.
    Approved,
    /// Ask the user, then answer with `channel_confirm`.
    ConfirmRequest,
    /// Tell the user; nothing to run.
    Nudge,
}

/// One deliverable item.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Item {
    /// What to do with it.
    pub kind: ItemKind,
    /// The action id (`channel_confirm` takes it).
    pub action_id: ActionId,
    /// The rule that fired.
    pub rule: String,
    /// The rendered prompt.
    pub prompt: String,
    /// Tools the prompt may use.
    pub tools: Vec<String>,
    /// When a confirm request expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The source message, as its own field: untrusted data, grants no permission.
    pub message: Arc<Message>,
}

/// Why a confirm answer was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfirmError {
    /// No action has that id, or it is not a confirm.
    #[error("no confirm request with id {0}")]
    Unknown(ActionId),
    /// The confirm expired before it was answered.
    #[error("confirm {id} expired at {expired}; it can no longer be approved")]
    Expired {
        /// The action id.
        id: ActionId,
        /// When it expired (RFC 3339).
        expired: String,
    },
    /// Already approved or denied.
    #[error("confirm {id} was already answered: {state}")]
    AlreadyAnswered {
        /// The action id.
        id: ActionId,
        /// `approved` or `denied`.
        state: String,
    },
}

#[derive(Default)]
struct Queues {
    /// Per-consumer items (nudges, confirm requests), in id order.
    shared: Vec<Item>,
    /// Consumed-once items (auto, approved).
    work: Vec<Item>,
    /// Highest shared item id each consumer has seen.
    seen: HashMap<String, ActionId>,
    /// Pending confirms by id.
    pending: HashMap<ActionId, Item>,
}

/// The hub.
#[derive(Clone)]
pub struct Hub {
    queues: Arc<Mutex<Queues>>,
    notify: Arc<Notify>,
    events: broadcast::Sender<Item>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub::new(64)
    }
}

impl Hub {
    /// A hub whose queues hold `capacity` items per kind.
    pub fn new(_capacity: usize) -> Hub {
        Hub {
            queues: Arc::default(),
            notify: Arc::new(Notify::new()),
            events: broadcast::channel(256).0,
        }
    }

    /// Offers a new action; returns the item if it was queued.
    pub fn offer(&self, action: Action, message: Arc<Message>) -> Option<Item> {
        let kind = match action.mode {
            Mode::Notify => ItemKind::Nudge,
            Mode::Confirm => ItemKind::ConfirmRequest,
            Mode::Auto => ItemKind::Auto,
        };
        let item = Item {
            kind,
            action_id: action.id,
            rule: action.rule,
            prompt: action.prompt,
            tools: action.tools,
            expires_at: action.expires,
            message,
        };
        {
            let mut q = self.queues.lock().unwrap();
            match kind {
                ItemKind::Auto | ItemKind::Approved => q.work.push(item.clone()),
                ItemKind::ConfirmRequest => {
                    q.pending.insert(item.action_id, item.clone());
                    q.shared.push(item.clone());
                }
                ItemKind::Nudge => q.shared.push(item.clone()),
            }
        }
        let _ = self.events.send(item.clone());
        self.notify.notify_waiters();
        Some(item)
    }

    /// Takes up to `max` items for `consumer` without waiting.
    pub fn take(&self, consumer: &str, max: usize) -> Vec<Item> {
        let mut q = self.queues.lock().unwrap();
        let n = max.min(q.work.len());
        let mut out: Vec<Item> = q.work.drain(..n).collect();
        let seen = q.seen.get(consumer).copied().unwrap_or(0);
        let mut last = seen;
        for item in q.shared.iter().filter(|i| i.action_id > seen) {
            if out.len() >= max {
                break;
            }
            last = item.action_id;
            out.push(item.clone());
        }
        q.seen.insert(consumer.to_string(), last);
        out
    }

    /// Takes items for `consumer`, waiting up to `timeout` for the first one.
    pub async fn wait(&self, consumer: &str, max: usize, timeout: Duration) -> Vec<Item> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            let items = self.take(consumer, max);
            if !items.is_empty() {
                return items;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Vec::new();
            }
        }
    }

    /// Answers a confirm. Yes with `taker = Some(consumer)` (the `channel_confirm`
    /// tool) hands the approved item straight to that consumer, recorded as
    /// delivered; yes with `taker = None` (the operator CLI) queues it as
    /// `approved` work for the next consumer. No returns `Ok(None)`.
    pub fn confirm(
        &self,
        id: ActionId,
        approve: bool,
        taker: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<Option<Item>, ConfirmError> {
        let _ = taker;
        let mut q = self.queues.lock().unwrap();
        let item = q.pending.remove(&id).ok_or(ConfirmError::Unknown(id))?;
        if item.expires_at.is_some_and(|e| e <= now) {
            return Err(ConfirmError::Expired {
                id,
                expired: item
                    .expires_at
                    .map(crate::message::format_timestamp)
                    .unwrap_or_default(),
            });
        }
        Ok(approve.then_some(Item {
            kind: ItemKind::Approved,
            ..item
        }))
    }

    /// New deliverable items as they are queued (for push).
    pub fn subscribe(&self) -> broadcast::Receiver<Item> {
        self.events.subscribe()
    }

    /// Counters for stats.
    pub fn stats(&self) -> serde_json::Value {
        let q = self.queues.lock().unwrap();
        serde_json::json!({ "pending_confirms": q.pending.len(), "queued_work": q.work.len() })
    }
}
