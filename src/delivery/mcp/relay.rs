//! Claude Code's permission relay, for one session (opt-in: `mcp.permissionRelay: true`).
//!
//! The wire, as Claude Code's channels reference documents it
//! (<https://code.claude.com/docs/en/channels-reference#relay-permission-prompts>, Claude Code
//! 2.1.81 and later):
//! - the server declares `capabilities.experimental["claude/channel/permission"]` (beside
//!   `claude/channel`) in its `initialize` result;
//! - when a tool call needs the user's approval, the host sends the notification
//!   `notifications/claude/channel/permission_request` with params `request_id` (five
//!   lowercase letters, a–z without `l`), `tool_name` (`Bash`, `Write`), `description` (a
//!   summary of the call) and `input_preview` (its arguments as JSON, cut to 200 characters);
//! - the server answers with the notification `notifications/claude/channel/permission`,
//!   params `request_id` and `behavior`: `"allow"` or `"deny"`;
//! - the terminal dialog stays open meanwhile: the host applies whichever answer comes first
//!   and drops the other. It never tells the server that its terminal answered (an open
//!   request upstream: anthropics/claude-code#54597). Its `PostToolUse` hook
//!   (`switchboard hook post-tool-use`) tells the daemon that a call ran, which closes the
//!   request allowed in the terminal (`via: relay`, no verdict sent); one denied there stays
//!   pending here until the session ends (it is then ended, and shown so) or its timeout.
//!
//! Each request becomes a confirm request of the daemon (operation `relay_permission`; see
//! `actions::lifecycle::relay` for how it lives there). This session remembers which of its
//! requests are open, follows the daemon's answers, and sends the verdict of each answered one
//! to its host. With the setting off the capability is not declared, and a request that comes
//! anyway is ignored (logged once per session).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{CustomNotification, ServerNotification};
use rmcp::service::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::actions::lifecycle::PermissionRequest;
use crate::actions::{ActionId, ActionState, Event, Via};
use crate::backend::Api;

/// The experimental capability a server declares to receive permission prompts.
pub const CAPABILITY: &str = "claude/channel/permission";

/// The host's notification: a permission prompt opened.
pub const REQUEST: &str = "notifications/claude/channel/permission_request";

/// The server's notification: the verdict on a prompt.
pub const VERDICT: &str = "notifications/claude/channel/permission";

/// How many answers to requests this session has not heard back about yet are kept (an answer
/// that beat the reply of `relay_permission`).
const EARLY: usize = 64;

/// One session's relay state.
#[derive(Default)]
pub(super) struct Relay {
    /// A request came while the setting is off: logged once.
    warned: AtomicBool,
    /// The follow task was started.
    following: AtomicBool,
    /// The state, behind one lock.
    state: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    /// This session's open requests: action id → the host's `request_id`.
    asked: HashMap<ActionId, String>,
    /// Answers to ids not (yet) among `asked`, newest last.
    early: VecDeque<(ActionId, bool)>,
}

/// The params of a verdict.
pub fn verdict(request_id: &str, allow: bool) -> Value {
    json!({"request_id": request_id, "behavior": if allow { "allow" } else { "deny" }})
}

/// The request in `params`, when it is one: `request_id` and `tool_name` non-empty strings.
pub fn parse(params: Option<Value>) -> Result<PermissionRequest, String> {
    let params = params.ok_or("no params")?;
    let request: PermissionRequest =
        serde_json::from_value(params).map_err(|e| format!("params do not fit: {e}"))?;
    if request.request_id.trim().is_empty() || request.tool_name.trim().is_empty() {
        return Err("`request_id` and `tool_name` must not be empty".into());
    }
    Ok(request)
}

impl Relay {
    /// Whether to log that a request was ignored (the first time only).
    pub(super) fn first_ignored(&self) -> bool {
        !self.warned.swap(true, Ordering::Relaxed)
    }

    /// Remembers that confirm `id` is the host's `request_id`; the verdict at once when the
    /// answer came first.
    pub(super) fn asked(&self, id: ActionId, request_id: String) -> Option<Value> {
        let mut s = self.state.lock().unwrap();
        if let Some(at) = s.early.iter().position(|(early, _)| *early == id) {
            let (_, allow) = s.early.remove(at).expect("found above");
            return Some(verdict(&request_id, allow));
        }
        s.asked.insert(id, request_id);
        None
    }

    /// The verdict to send for an answer to confirm `id`, when it is one of this session's.
    fn answered(&self, id: ActionId, allow: bool, rule: &str) -> Option<Value> {
        let mut s = self.state.lock().unwrap();
        match s.asked.remove(&id) {
            Some(request_id) => Some(verdict(&request_id, allow)),
            None => {
                if rule.starts_with(crate::actions::lifecycle::RULE_PREFIX) {
                    s.early.push_back((id, allow));
                    if s.early.len() > EARLY {
                        s.early.pop_front();
                    }
                }
                None
            }
        }
    }

    /// Forgets confirm `id` (expired or ended here).
    fn forget(&self, id: ActionId) {
        self.state.lock().unwrap().asked.remove(&id);
    }

    /// Starts, once, the task that sends this session's verdicts to `peer` until `ended`.
    pub(super) fn follow(
        self: &std::sync::Arc<Self>,
        tasks: &TaskTracker,
        api: &Api,
        peer: Peer<RoleServer>,
        ended: CancellationToken,
    ) {
        if self.following.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut events = api.subscribe().events;
        let relay = self.clone();
        tasks.spawn(async move {
            loop {
                let event = tokio::select! {
                    _ = ended.cancelled() => break,
                    got = events.recv() => match got {
                        Ok(event) => event,
                        Err(RecvError::Lagged(n)) => {
                            tracing::warn!(skipped = n, "permission relay lagged behind the daemon's events; a verdict may be lost (the terminal dialog still works)");
                            continue;
                        }
                        Err(RecvError::Closed) => break,
                    },
                };
                let params = match event {
                    // Answered in the host's own dialog: it needs no verdict.
                    Event::Answered {
                        id,
                        via: Some(Via::Relay),
                        ..
                    } => {
                        relay.forget(id);
                        None
                    }
                    Event::Answered {
                        id, state, rule, ..
                    } => relay.answered(id, state == ActionState::Approved, &rule),
                    Event::Expired { id, .. }
                    | Event::Ended { id, .. }
                    | Event::Resolved { id, .. } => {
                        relay.forget(id);
                        None
                    }
                    _ => None,
                };
                if let Some(params) = params
                    && !send(&peer, params).await
                {
                    break;
                }
            }
        });
    }
}

/// Sends a verdict to the host; false when it is gone.
pub(super) async fn send(peer: &Peer<RoleServer>, params: Value) -> bool {
    tracing::info!(verdict = %params, "permission verdict sent to the host");
    let note =
        ServerNotification::CustomNotification(CustomNotification::new(VERDICT, Some(params)));
    peer.send_notification(note).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_from_the_documented_params() {
        let r = parse(Some(json!({
            "request_id": "abcde", "tool_name": "Bash",
            "description": "List files", "input_preview": "{\"command\":\"ls\"}",
        })))
        .unwrap();
        assert_eq!(
            (
                r.request_id.as_str(),
                r.tool_name.as_str(),
                r.input_preview.as_str()
            ),
            ("abcde", "Bash", "{\"command\":\"ls\"}")
        );
        assert!(parse(None).is_err());
        assert!(parse(Some(json!({"request_id": "", "tool_name": "Bash"}))).is_err());
        assert!(parse(Some(json!({"request_id": "abcde"}))).is_err());
        assert!(parse(Some(json!({"request_id": 5, "tool_name": "Bash"}))).is_err());
    }

    #[test]
    fn the_setting_is_off_unless_asked_for() {
        let off: super::super::McpSettings = serde_json::from_value(json!({})).unwrap();
        assert!(!off.permission_relay);
        let on: super::super::McpSettings =
            serde_json::from_value(json!({"permissionRelay": true})).unwrap();
        assert!(on.permission_relay);
    }

    #[test]
    fn verdicts_use_allow_and_deny() {
        assert_eq!(
            verdict("abcde", true),
            json!({"request_id": "abcde", "behavior": "allow"})
        );
        assert_eq!(verdict("abcde", false)["behavior"], "deny");
    }

    #[test]
    fn an_answer_before_the_id_is_known_is_kept_for_it() {
        let relay = Relay::default();
        assert_eq!(relay.answered(7, false, "permission:Bash"), None);
        assert_eq!(relay.answered(8, true, "deploy"), None, "not a relay rule");
        assert_eq!(
            relay.asked(7, "abcde".into()),
            Some(verdict("abcde", false))
        );
        assert_eq!(relay.asked(8, "fghij".into()), None);
        assert_eq!(
            relay.answered(8, true, "permission:Write"),
            Some(verdict("fghij", true))
        );
        assert_eq!(relay.answered(8, true, "permission:Write"), None, "once");
    }
}
