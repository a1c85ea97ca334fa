//! [`LocalBackend`]: the [`Backend`] calls run against the [`App`] of this process.
//!
//! This is the daemon's side of every front end: HTTP MCP sessions call it directly, and the
//! control socket's attached front ends reach it through [`crate::control`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::Utc;
use rmcp::model::{CallToolRequestParams, CallToolResponse, ErrorData, Tool};
use tokio_util::sync::CancellationToken;

use super::{
    Backend, BackendError, BoxFut, ConfirmRequest, ConsumerView, Feed, ListReply, MessageReply,
    PullReply, PullRequest, Result, SessionInfo, SessionSpec, Settings, StatsReply, WaitReply,
    WaitRequest,
};
use crate::actions::{ActionId, Item};
use crate::app::{App, ReloadReport};
use crate::inbox::{Appended, InboxError};
use crate::message::{NewMessage, Seq};

/// The backend over this process's [`App`].
#[derive(Clone)]
pub struct LocalBackend {
    app: Arc<App>,
}

impl LocalBackend {
    /// A backend over `app`.
    pub fn new(app: Arc<App>) -> LocalBackend {
        LocalBackend { app }
    }

    /// The app it runs on.
    pub fn app(&self) -> &Arc<App> {
        &self.app
    }

    /// Opens a session now (no await), for callers that must not yield.
    pub fn open_now(&self, spec: &SessionSpec) -> SessionInfo {
        let app = &self.app;
        if let Some(name) = spec.named.as_deref().filter(|n| !n.trim().is_empty()) {
            let cursor = app.state.cursor(name);
            let id = app.lifecycle.open_session(name, true, cursor);
            return SessionInfo {
                id,
                consumer: name.to_string(),
            };
        }
        // A front end re-attaching after a daemon restart keeps its consumer name, unless a
        // live session took it meanwhile.
        if let Some(old) = spec.resume.as_deref()
            && !app.lifecycle.consumer_in_use(old)
        {
            let cursor = app.state.cursor(old).unwrap_or(app.inbox.last_seq());
            let id = app.lifecycle.open_session(old, false, Some(cursor));
            app.state.set_cursor(old, cursor);
            return SessionInfo {
                id,
                consumer: old.to_string(),
            };
        }
        let prefix = spec.client.trim();
        let prefix = if prefix.is_empty() { "mcp" } else { prefix };
        let id = app.lifecycle.open_session_numbered(prefix);
        let name = format!("{prefix}#{id}");
        // Its cursor starts at its start: what came before is not unread for it.
        app.state.set_cursor(&name, app.inbox.last_seq());
        SessionInfo { id, consumer: name }
    }

    fn consumer_view(&self, name: &str) -> ConsumerView {
        let app = &self.app;
        let last_seq = app.inbox.last_seq();
        ConsumerView {
            name: name.to_string(),
            cursor: app.state.cursor_or_boot(name),
            unread: app.state.unread(name, last_seq),
            queued: app.lifecycle.queued_for(name),
        }
    }

    /// The reply of a wait that took `items` for `consumer`: moves the cursor past them.
    fn wait_reply(&self, consumer: &str, items: Vec<Item>) -> WaitReply {
        let app = &self.app;
        if let Some(seq) = items.iter().map(|i| i.message.seq).max() {
            app.state.set_cursor(consumer, seq);
        }
        let last_seq = app.inbox.last_seq();
        WaitReply {
            items,
            cursor: app.state.cursor_or_boot(consumer),
            unread: app.state.unread(consumer, last_seq),
        }
    }
}

impl Backend for LocalBackend {
    fn settings(&self) -> Settings {
        Settings {
            max_wait_s: self.app.config.mcp.max_wait_s,
            claude_channel: self.app.config.mcp.claude_channel,
        }
    }

    fn open(&self, spec: SessionSpec) -> BoxFut<'_, Result<SessionInfo>> {
        let opened = self.open_now(&spec);
        Box::pin(async move { Ok(opened) })
    }

    fn close(&self, session: u64) {
        if let Some(own) = self.app.lifecycle.close_session(session, Utc::now()) {
            self.app.state.remove_cursor(&own);
        }
    }

    fn ensure_consumer(&self, name: String) -> BoxFut<'_, Result<()>> {
        let cursor = self.app.state.cursor(&name);
        self.app.lifecycle.ensure_consumer(&name, cursor);
        Box::pin(async { Ok(()) })
    }

    fn wait(
        &self,
        request: WaitRequest,
        cancel: CancellationToken,
    ) -> BoxFut<'_, Result<WaitReply>> {
        Box::pin(async move {
            let app = &self.app;
            let cap = Duration::from_secs(app.config.mcp.max_wait_s);
            let timeout = Duration::from_millis(request.timeout_ms).min(cap);
            let max = request.max.clamp(1, 100);
            struct InFlight<'a>(&'a std::sync::atomic::AtomicU64);
            impl Drop for InFlight<'_> {
                fn drop(&mut self) {
                    self.0.fetch_sub(1, Ordering::Relaxed);
                }
            }
            app.metrics
                .wait_calls_in_flight
                .fetch_add(1, Ordering::Relaxed);
            let _in_flight = InFlight(&app.metrics.wait_calls_in_flight);
            let items = app
                .lifecycle
                .wait(request.session, &request.consumer, max, timeout, &cancel)
                .await;
            Ok(self.wait_reply(&request.consumer, items))
        })
    }

    fn settle(&self, claims: Vec<ActionId>, delivered: bool, why: String) {
        self.app.lifecycle.settle(&claims, delivered, &why);
    }

    fn pull(&self, request: PullRequest) -> BoxFut<'_, Result<PullReply>> {
        Box::pin(async move {
            let app = &self.app;
            let consumer = &request.consumer;
            let after = request
                .since_seq
                .unwrap_or_else(|| app.state.cursor_or_boot(consumer));
            let limit = request.limit.clamp(1, 1000);
            let out = app
                .inbox
                .read_after_matching(after, limit, request.channel.as_deref())
                .await;
            if request.mark_read
                && let Some(last) = out.last()
            {
                app.state.set_cursor(consumer, last.seq);
            }
            let last_seq = app.inbox.last_seq();
            Ok(PullReply {
                messages: out.iter().map(|m| (**m).clone()).collect(),
                cursor: app.state.cursor_or_boot(consumer),
                unread: app.state.unread(consumer, last_seq),
                last_seq,
            })
        })
    }

    fn list(&self, channel: Option<String>, limit: usize) -> BoxFut<'_, Result<ListReply>> {
        let messages = self
            .app
            .inbox
            .recent(channel.as_deref(), limit.clamp(1, 1000));
        let reply = ListReply {
            messages: messages.iter().map(|m| (**m).clone()).collect(),
            last_seq: self.app.inbox.last_seq(),
        };
        Box::pin(async move { Ok(reply) })
    }

    fn ack(&self, consumer: String) -> BoxFut<'_, Result<ConsumerView>> {
        self.app
            .state
            .set_cursor(&consumer, self.app.inbox.last_seq());
        let view = self.consumer_view(&consumer);
        Box::pin(async move { Ok(view) })
    }

    fn confirm(&self, request: ConfirmRequest) -> BoxFut<'_, Result<Option<Item>>> {
        Box::pin(async move {
            let answered = self.app.lifecycle.confirm(
                request.id,
                request.approve,
                &request.by,
                request.claim_for,
                Utc::now(),
            );
            match answered {
                Ok(item) => {
                    // The answer is on disk before whoever answered is told it took.
                    self.app.lifecycle.flush().await;
                    Ok(item)
                }
                Err(e) => Err(BackendError::Refused(e.to_string())),
            }
        })
    }

    fn message(&self, seq: Seq) -> BoxFut<'_, Result<MessageReply>> {
        Box::pin(async move {
            let app = &self.app;
            let found = match app.inbox.get(seq) {
                Some(m) => Some(m),
                None => app
                    .inbox
                    .read_after(seq.saturating_sub(1), 1)
                    .await
                    .into_iter()
                    .find(|m| m.seq == seq),
            };
            Ok(MessageReply {
                message: found.map(|m| (*m).clone()),
                last_seq: app.inbox.last_seq(),
            })
        })
    }

    fn pause(&self, paused: bool) -> BoxFut<'_, Result<bool>> {
        self.app.set_paused(paused);
        Box::pin(async move { Ok(paused) })
    }

    fn reload(&self) -> BoxFut<'_, Result<ReloadReport>> {
        Box::pin(async move { Ok(self.app.reload_rules().await) })
    }

    fn rules(&self) -> BoxFut<'_, Result<Vec<serde_json::Value>>> {
        let rules = crate::rules::summaries(&self.app.rules());
        Box::pin(async move { Ok(rules) })
    }

    fn stats(&self, consumer: Option<String>) -> BoxFut<'_, Result<StatsReply>> {
        let reply = StatsReply {
            stats: self.app.stats(),
            consumer: consumer.map(|c| self.consumer_view(&c)),
        };
        Box::pin(async move { Ok(reply) })
    }

    fn append(
        &self,
        messages: Vec<NewMessage>,
        source: String,
    ) -> BoxFut<'_, Result<Vec<Appended>>> {
        Box::pin(async move {
            let result = self.app.inbox.append_batch(messages).await;
            // Messages kept in memory only are in the inbox all the same: counted. A repeat of
            // a recent id is acknowledged but not stored: not counted.
            if let Ok(appended) | Err(InboxError::NotDurable { appended, .. }) = &result {
                let stored = appended.iter().filter(|a| !a.duplicate).count() as u64;
                if stored > 0 {
                    self.app.metrics.ingested(&source, stored);
                }
            }
            result.map_err(BackendError::Store)
        })
    }

    fn subscribe(&self) -> Feed {
        Feed {
            events: self.app.lifecycle.subscribe(),
            committed: self.app.inbox.committed(),
            tools: self.app.upstreams.tools_changed(),
        }
    }

    fn upstream_tools(&self) -> BoxFut<'_, Result<Vec<Tool>>> {
        let tools = self.app.upstreams.tools();
        Box::pin(async move { Ok(tools) })
    }

    fn call_upstream(
        &self,
        request: CallToolRequestParams,
    ) -> BoxFut<'_, Option<std::result::Result<CallToolResponse, ErrorData>>> {
        Box::pin(async move {
            if !self.app.upstreams.has_tool(&request.name) {
                return None;
            }
            self.app.upstreams.call(request).await
        })
    }
}
