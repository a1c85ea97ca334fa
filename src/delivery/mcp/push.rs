//! Push to one MCP session, best effort and never the only path: the wait tool delivers
//! everything pushed here too, so a failed or refused push changes nothing else.
//!
//! - `notifications/claude/channel` for each new item, when the client is Claude Code
//!   (`clientInfo.name` contains `claude`) or the config says `always`: `content` is the
//!   prompt, `meta` a flat map of identifier keys to strings. Work (auto, approved) runs once,
//!   so only one session pushes it: the first to ask (`push_by`) while no wait has taken it.
//!   Nudges and confirm requests go to every session.
//! - `notifications/message` (logger `switchboard.inbox`) for each new item.
//! - `notifications/resources/updated` for `switchboard://inbox` on each commit, when the
//!   client subscribed to it.
//!
//! In the 2026-07-28 era there is no session to push to: a client opens `subscriptions/listen`
//! and gets `notifications/tools/list_changed` and the inbox's `notifications/resources/updated`
//! on that request's stream ([`listen`]).
//!
//! MCP logging is deprecated by SEP-2577 (hence the `allow`), but the 2025-11-25 lifecycle
//! we speak still has it, and hosts show these messages.

#![allow(deprecated)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CustomNotification, LoggingLevel, LoggingMessageNotificationParam,
    ResourceUpdatedNotificationParam, ServerNotification,
};
use rmcp::service::{Peer, RoleServer};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{INBOX_URI, Session};
use crate::actions::Event;
use crate::backend::Api;
use crate::control::Feed;
use crate::control::PushPolicy;
use crate::control::ops::{PushBy, SessionInfo};
use crate::delivery::{Item, ItemKind};

/// The method of Claude Code's channel notification.
pub const CLAUDE_CHANNEL: &str = "notifications/claude/channel";

/// Whether `client` gets `notifications/claude/channel` under `policy`.
pub fn wants_claude_channel(policy: PushPolicy, client: &str) -> bool {
    match policy {
        PushPolicy::Always => true,
        PushPolicy::Never => false,
        PushPolicy::Auto => client.to_ascii_lowercase().contains("claude"),
    }
}

/// The flat, string-only meta of a channel notification.
pub fn channel_meta(item: &Item) -> BTreeMap<&'static str, String> {
    let mode = match item.kind {
        ItemKind::Nudge => "notify",
        ItemKind::ConfirmRequest => "confirm",
        ItemKind::Auto | ItemKind::Approved => "auto",
    };
    let kind = serde_json::to_value(item.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut meta = BTreeMap::from([
        ("seq", item.message.seq.to_string()),
        ("action_id", item.action_id.to_string()),
        ("rule", item.rule.to_string()),
        ("mode", mode.to_string()),
        ("kind", kind),
        ("channel", item.message.channel.clone()),
        ("server", item.message.server.clone()),
    ]);
    if let Some(expires) = item.expires_at {
        meta.insert("expires_at", crate::message::format_timestamp(expires));
    }
    meta
}

/// Starts the push task of one session; it ends with `token` or when the client is gone.
pub(super) fn spawn(
    tasks: &TaskTracker,
    session: Arc<Mutex<Session>>,
    client: String,
    peer: Peer<RoleServer>,
    token: CancellationToken,
    feed: Feed,
    pusher: Pusher,
) {
    let claude = wants_claude_channel(pusher.policy, &client);
    let Feed {
        mut events,
        mut committed,
        ..
    } = feed;
    tasks.spawn(async move {
        loop {
            tokio::select! {
                _ = token.cancelled() => break,
                got = events.recv() => {
                    let event = match got {
                        Ok(event) => event,
                        Err(RecvError::Lagged(n)) => {
                            tracing::debug!(client = %client, skipped = n, "push lagged; the wait tool still has every item");
                            continue;
                        }
                        Err(RecvError::Closed) => break,
                    };
                    // Only these are pushed: the rest (every session's `delivered`, ...) is
                    // passed over before the session's lock and its consumer's copy.
                    if !matches!(
                        event,
                        Event::Queued { .. } | Event::Resolved { .. } | Event::Expired { .. }
                    ) {
                        continue;
                    }
                    let (quiet, consumer) = {
                        let s = session.lock().unwrap();
                        (s.quiet, s.consumer.clone())
                    };
                    let sent = match event {
                        // A host's permission prompt is for people, not agents (see `relay`).
                        Event::Queued { item } if item.is_permission_request() => true,
                        Event::Expired { rule, .. }
                            if rule.starts_with(crate::actions::lifecycle::RULE_PREFIX) =>
                        {
                            true
                        }
                        // Not for this window: a rule's `consumers` leave it out.
                        Event::Queued { item }
                            if consumer.as_deref().is_some_and(|c| !item.consumers.admits(c)) =>
                        {
                            true
                        }
                        Event::Queued { item } if pusher.is_mine(&item).await => {
                            push_item(&peer, &item, claude, quiet).await
                        }
                        Event::Resolved { id, rule, by_seq } => {
                            let text = format!(
                                "Confirm #{id} ({rule}) was resolved by message #{by_seq} before \
                                 anyone answered: do not ask the user about it any more."
                            );
                            push_notice(&peer, id, &rule, "resolved", text, claude, quiet).await
                        }
                        Event::Expired { id, rule } => {
                            let text = format!(
                                "Confirm #{id} ({rule}) expired unanswered: do not ask the user \
                                 about it any more."
                            );
                            push_notice(&peer, id, &rule, "expired", text, claude, quiet).await
                        }
                        _ => true,
                    };
                    if !sent {
                        break;
                    }
                }
                changed = committed.changed() => {
                    if changed.is_err() { break }
                    let subscribed = session.lock().unwrap().subscribed;
                    if subscribed
                        && peer
                            .notify_resource_updated(ResourceUpdatedNotificationParam::new(INBOX_URI))
                            .await
                            .is_err()
                    {
                        break;
                    }
                }
            }
        }
        tracing::debug!(client = %client, "push task ended");
    });
}

/// One `subscriptions/listen` request (2026-07-28): `notifications/tools/list_changed` when the
/// upstream tools change and `notifications/resources/updated` for the inbox on each commit,
/// as far as the client asked for them (the accepted filter), until the request is cancelled
/// or closed, the session ends, or the client is gone.
pub(super) async fn listen(
    feed: Feed,
    ended: CancellationToken,
    subscription: rmcp::service::SubscriptionContext,
) {
    let Feed {
        mut committed,
        mut tools,
        ..
    } = feed;
    tools.mark_unchanged();
    let sink = subscription.sink().clone();
    let accepted = subscription.accepted();
    let wants_tools = accepted.tools_list_changed == Some(true);
    let wants_inbox = accepted
        .resource_subscriptions
        .as_ref()
        .is_some_and(|uris| uris.iter().any(|u| u == INBOX_URI));
    loop {
        let sent = tokio::select! {
            _ = subscription.cancelled() => return,
            _ = ended.cancelled() => return,
            changed = tools.changed() => {
                if changed.is_err() { return }
                !wants_tools || sink.notify_tool_list_changed().await.is_ok()
            }
            changed = committed.changed() => {
                if changed.is_err() { return }
                !wants_inbox || sink.notify_resource_updated(INBOX_URI).await.is_ok()
            }
        };
        if !sent {
            return;
        }
    }
}

/// What this session pushes: the channel notification by `policy`, and work only when the
/// daemon says this session is the one (`push_by`).
pub(super) struct Pusher {
    pub(super) policy: PushPolicy,
    pub(super) api: Api,
    pub(super) own: Arc<tokio::sync::OnceCell<SessionInfo>>,
}

impl Pusher {
    /// Whether this session pushes `item`: always for nudges and confirm requests; for work,
    /// when the daemon says this session is the one (see the module doc).
    async fn is_mine(&self, item: &Item) -> bool {
        if !matches!(item.kind, ItemKind::Auto | ItemKind::Approved) {
            return true;
        }
        let Some(own) = self.own.get() else {
            return false;
        };
        self.api
            .call(PushBy {
                session: own.id,
                id: item.action_id,
            })
            .await
            .unwrap_or(false)
    }
}

/// Tells the session that confirm `id` closed without it (resolved by a later message, or
/// expired), so that the agent stops asking the user about it; false when the client is gone.
async fn push_notice(
    peer: &Peer<RoleServer>,
    id: crate::actions::ActionId,
    rule: &str,
    state: &str,
    text: String,
    claude: bool,
    quiet: bool,
) -> bool {
    let channel = claude.then(|| {
        serde_json::json!({
            "content": text,
            "meta": {"action_id": id.to_string(), "rule": rule, "state": state, "kind": "confirm_closed"},
        })
    });
    let log = (!quiet).then(|| {
        serde_json::json!({
            "kind": "confirm_closed",
            "action_id": id,
            "rule": rule,
            "state": state,
            "text": text,
        })
    });
    send(peer, channel, log).await
}

/// Pushes one item; false when the client is gone.
async fn push_item(peer: &Peer<RoleServer>, item: &Item, claude: bool, quiet: bool) -> bool {
    let channel = claude.then(|| {
        serde_json::json!({
            "content": item.prompt,
            "meta": channel_meta(item),
        })
    });
    let log = (!quiet).then(|| {
        serde_json::json!({
            "kind": item.kind,
            "action_id": item.action_id,
            "rule": item.rule,
            "seq": item.message.seq,
            "channel": item.message.channel,
            "server": item.message.server,
            "prompt": item.prompt,
        })
    });
    send(peer, channel, log).await
}

/// Sends `notifications/claude/channel` with `channel` as its params, then
/// `notifications/message` (logger `switchboard.inbox`) with `log` as its data, each when
/// given; false when the client is gone.
async fn send(
    peer: &Peer<RoleServer>,
    channel: Option<serde_json::Value>,
    log: Option<serde_json::Value>,
) -> bool {
    if let Some(params) = channel {
        let note = ServerNotification::CustomNotification(CustomNotification::new(
            CLAUDE_CHANNEL,
            Some(params),
        ));
        if peer.send_notification(note).await.is_err() {
            return false;
        }
    }
    match log {
        Some(data) => peer
            .notify_logging_message(
                LoggingMessageNotificationParam::new(LoggingLevel::Info, data)
                    .with_logger("switchboard.inbox"),
            )
            .await
            .is_ok(),
        None => true,
    }
}
