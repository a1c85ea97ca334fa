//! Permission requests relayed by an MCP host (Claude Code's permission relay): confirms that
//! come from no rule and no message, but from a session's host asking whether one of its own
//! tool calls may run.
//!
//! Each is an ordinary confirm request in the `confirms` queue, so that `pending`, `watch`, the
//! approval page, expiry and `switchboard confirm` treat it like any other, with these
//! differences, all decided here:
//! - its rule is `permission:<tool_name>` and its message is synthetic (seq 0, channel
//!   [`CHANNEL`], from the asking session's consumer, the tool, description and input preview
//!   as its text: the host's words about its agent's call, untrusted);
//! - the session that asked is remembered (`relays`, by action id): its end ends the request
//!   (closed as `resolved`, with the reason, and [`Event::Ended`]), since the host's dialog went
//!   with it; a restart ends the ones it finds pending, for the same reason;
//! - no agent sees it (waits and stop hooks skip it, push too) and no agent may answer it: the
//!   `channel_confirm` tool is refused with [`ConfirmError::OwnPermission`]; a person's paths
//!   (`cli`, `web`, `relay`) may ([`ANSWERED_VIA`]);
//! - an answer queues no work: the verdict goes back to the host, which runs the tool itself.
//!   The answer is recorded as usual (`approved`/`denied`, with `by` and `via`); an approval is
//!   then recorded `delivered` to the asking session, so that the journal leaves it finished.
//!
//! The host never says when its own terminal dialog was answered first (see
//! `delivery::mcp::relay`). Its `PostToolUse` hook does say that a tool ran, so that its
//! permission was granted: [`Lifecycle::allowed_in_host`] closes the open request of that host
//! for that tool whose input preview is the call's whole input (see [`preview_fits`]) as
//! approved `via: relay`, by the session that asked, "allowed in the host's own dialog". The
//! host is known by its process: the parent of the front end that relayed the request, which
//! is an ancestor of every hook the host runs (see `control::peer`); a request whose host is
//! not known (an HTTP session), a preview cut short or empty, is never closed so. A denial
//! there runs no tool and so leaves no trace: such a request stays pending until the session
//! ends or the confirm times out, and a late answer's verdict is dropped by the host.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Changes, ConfirmError, Event, Item, Lifecycle, SessionId, State};
use crate::actions::journal::Record;
use crate::actions::{Action, ActionId, ActionState, Audience, Delivery, Mode, Via};
use crate::message::Message;

/// The prefix of a relayed permission request's rule name.
pub const RULE_PREFIX: &str = "permission:";

/// The channel of a relayed permission request's synthetic message.
pub const CHANNEL: &str = "claude/permission";

/// The metadata key of the host's `request_id` on the synthetic message.
pub const REQUEST_ID_KEY: &str = "request_id";

/// The paths that may answer a relayed permission request: a person's, at a terminal, on the
/// page, or in the host's own dialog. Not the agent's own tool, and not an elicitation form:
/// forms are put to a session for the confirms its wait returns, and no wait returns a relayed
/// request.
pub const ANSWERED_VIA: [Via; 3] = [Via::Cli, Via::Web, Via::Relay];

/// One `notifications/claude/channel/permission_request`, as the host sent it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PermissionRequest {
    /// The host's id of the prompt (Claude Code: five lowercase letters).
    pub request_id: String,
    /// The tool the agent wants to use (`Bash`, `Write`).
    pub tool_name: String,
    /// The host's summary of the call.
    #[serde(default)]
    pub description: String,
    /// The call's arguments, as the host previews them (truncated JSON).
    #[serde(default)]
    pub input_preview: String,
}

/// What the host answers in its own dialog is said so: [`Lifecycle::allowed_in_host`].
pub const ALLOWED_IN_HOST: &str = "allowed in the host's own dialog";

/// One open relayed request: who asked, and what, to know it again when the tool runs.
struct Asked {
    session: SessionId,
    /// The host process whose front end relayed it, when known.
    host: Option<u32>,
    tool: String,
    input_preview: String,
}

/// The relayed requests still open, by action id: the session that asked.
#[derive(Default)]
pub(super) struct Relays {
    asked_by: HashMap<ActionId, Asked>,
}

impl Relays {
    /// Whether confirm `id` is a relayed permission request still open.
    pub(super) fn contains(&self, id: ActionId) -> bool {
        self.asked_by.contains_key(&id)
    }

    /// The session that asked open request `id`.
    pub(super) fn asker(&self, id: ActionId) -> Option<SessionId> {
        self.asked_by.get(&id).map(|a| a.session)
    }

    /// Forgets `id`; the session that asked, if it was one.
    pub(super) fn remove(&mut self, id: ActionId) -> Option<SessionId> {
        self.asked_by.remove(&id).map(|a| a.session)
    }

    /// The open request for `tool` whose preview is `input`, asked by the host nearest above
    /// the process that ran it (`ran_under`: its ancestors, nearest first), the oldest of that
    /// host's; and who asked it.
    fn asked_for(
        &self,
        tool: &str,
        input: &serde_json::Value,
        ran_under: &[u32],
    ) -> Option<(ActionId, SessionId)> {
        self.asked_by
            .iter()
            .filter(|(_, a)| a.tool == tool && preview_fits(&a.input_preview, input))
            .filter_map(|(id, a)| {
                let depth = ran_under.iter().position(|&p| Some(p) == a.host)?;
                Some((depth, *id, a.session))
            })
            .min()
            .map(|(_, id, session)| (id, session))
    }

    /// Forgets every request of `session`; their ids.
    fn take_session(&mut self, session: SessionId) -> Vec<ActionId> {
        let mut ids: Vec<_> = self
            .asked_by
            .iter()
            .filter(|(_, a)| a.session == session)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        for id in &ids {
            self.asked_by.remove(id);
        }
        ids
    }
}

impl Item {
    /// Whether this is a permission request relayed by a host (see the module doc).
    pub fn is_permission_request(&self) -> bool {
        self.rule.starts_with(RULE_PREFIX)
            && self.message.seq == 0
            && self.message.channel == CHANNEL
            && self.message.metadata.contains_key(REQUEST_ID_KEY)
    }
}

/// The action and synthetic message of permission request `request` from consumer `from`,
/// with id `id`, expiring after `timeout`.
pub fn permission_action(
    id: ActionId,
    from: &str,
    request: &PermissionRequest,
    timeout: Duration,
    now: DateTime<Utc>,
) -> (Action, Message) {
    let tool = request.tool_name.trim();
    let mut prompt = format!("{from} asks permission to use `{tool}`");
    if !request.description.trim().is_empty() {
        prompt.push_str(": ");
        prompt.push_str(request.description.trim());
    }
    prompt.push_str(
        ". Approve to let that tool call run, deny to refuse it; its terminal dialog may also be \
         answered there, and the first answer wins.",
    );
    let mut content = format!("{tool}: {}", request.description.trim());
    if !request.input_preview.is_empty() {
        content.push_str("\n\n");
        content.push_str(&request.input_preview);
    }
    let action = Action {
        id,
        rule: format!("{RULE_PREFIX}{tool}").into(),
        mode: Mode::Confirm,
        seq: 0,
        prompt,
        tools: vec![tool.to_string()],
        created: now,
        expires: chrono::Duration::from_std(timeout)
            .ok()
            .and_then(|d| now.checked_add_signed(d)),
        delivery: Delivery::Wait,
        approve_via: ANSWERED_VIA.to_vec(),
        consumers: Audience::everyone(),
    };
    let message = Message {
        seq: 0,
        id: Some(request.request_id.clone()),
        server: from.to_string(),
        channel: CHANNEL.to_string(),
        content,
        metadata: [
            (REQUEST_ID_KEY.to_string(), request.request_id.clone()),
            ("tool_name".to_string(), tool.to_string()),
            ("session".to_string(), from.to_string()),
        ]
        .into(),
        timestamp: now,
    };
    (action, message)
}

/// Why a permission request could not be queued.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// The asking session is not open.
    #[error("no open session {0}")]
    NoSession(SessionId),
    /// The confirm queue is full.
    #[error("the confirm queue is full ({0}); the request was refused, answer it in the terminal")]
    Full(usize),
}

impl Lifecycle {
    /// Queues `request`, asked by the host of `session` (its process `host`, when known), as
    /// confirm `id` shown to people only (see the module doc), expiring after `timeout`;
    /// returns it once visible (its creation record is written first, as for any confirm).
    pub async fn relay_permission(
        &self,
        (session, host): (SessionId, Option<u32>),
        id: ActionId,
        request: &PermissionRequest,
        timeout: Duration,
        now: DateTime<Utc>,
    ) -> Result<Item, RelayError> {
        let (action, message) = {
            let mut s = self.lock();
            let Some(from) = s.sessions.consumer_of(session) else {
                return Err(RelayError::NoSession(session));
            };
            let made = permission_action(id, from, request, timeout, now);
            s.relays.asked_by.insert(
                id,
                Asked {
                    session,
                    host,
                    tool: request.tool_name.trim().to_string(),
                    input_preview: request.input_preview.clone(),
                },
            );
            made
        };
        let offered = self
            .offer(vec![(action, Arc::new(message))], None, now)
            .await;
        match offered.queued.into_iter().find(|i| i.action_id == id) {
            Some(item) => Ok(item),
            None => {
                self.lock().relays.remove(id);
                Err(RelayError::Full(self.capacity()))
            }
        }
    }
}

impl Lifecycle {
    /// A host ran `tool` with `input` (its `PostToolUse` hook, a process below `ran_under`:
    /// its ancestors, nearest first): the open relayed request of that host for that call was
    /// allowed in the host's own dialog. Closes it as approved `via: relay`, by the session that
    /// asked, with the reason [`ALLOWED_IN_HOST`]; no verdict is owed to the host. Returns how
    /// it was closed; `None` when no open request of that host fits (the call needed no
    /// permission, a person answered it here first, or another window asked).
    pub fn allowed_in_host(
        &self,
        tool: &str,
        input: &serde_json::Value,
        ran_under: &[u32],
        now: DateTime<Utc>,
    ) -> Option<super::ClosedConfirm> {
        let mut s = self.lock();
        let (id, session) = s.relays.asked_for(tool.trim(), input, ran_under)?;
        let host = s.sessions.consumer_of(session).unwrap_or("host");
        let by = crate::actions::By::new(crate::actions::ByKind::Host, host, None);
        let item = s.confirms.close(id, ActionState::Approved, now, |c| {
            c.by = Some(by.clone());
            c.via = Some(Via::Relay);
            c.reason = Some(ALLOWED_IN_HOST.to_string());
        })?;
        let mut changes = Changes::default();
        s.answer(
            item,
            ActionState::Approved,
            (&by, Via::Relay),
            None,
            now,
            &mut changes,
        );
        if let Some(answer) = changes
            .records
            .iter_mut()
            .find(|r| r.id == Some(id) && r.state == Some(ActionState::Approved))
        {
            answer.reason = Some(ALLOWED_IN_HOST.to_string());
        }
        let closed = s.confirms.closed(id).cloned();
        tracing::info!(
            action_id = id,
            tool,
            by = %by,
            "permission request allowed in the host's own dialog"
        );
        self.commit(s, changes);
        closed
    }
}

/// Whether `preview`, a host's `input_preview` of a call, is the call's whole `input`. Claude
/// Code previews the input as compact JSON (`JSON.stringify`, keys in the call's order) cut to
/// 200 UTF-16 units with `…` after the cut: only a preview that is whole JSON, equal to the
/// input (in any key order), says which call was asked about. A cut preview could be the start
/// of another call (`rm -rf build` of `rm -rf build /`), and an empty or `(unserializable)`
/// one says nothing: they fit no input.
pub fn preview_fits(preview: &str, input: &serde_json::Value) -> bool {
    serde_json::from_str::<serde_json::Value>(preview).is_ok_and(|p| p == *input)
}

impl State {
    /// The refusal of an answer to relayed request `item` by the agent's own tool.
    pub(super) fn refuse_own_permission(&self, item: &Item, via: Via) -> Option<ConfirmError> {
        (via == Via::Tool && self.relays.contains(item.action_id)).then(|| {
            ConfirmError::OwnPermission {
                id: item.action_id,
                tool: item.tools.first().cloned().unwrap_or_default(),
            }
        })
    }

    /// The consumer of the session that asked relayed request `id` (empty when it is gone):
    /// who its approved verdict is delivered to.
    pub(super) fn relay_consumer(&self, id: ActionId) -> String {
        self.relays
            .asker(id)
            .and_then(|s| self.sessions.consumer_of(s).map(str::to_string))
            .unwrap_or_default()
    }

    /// The verdict of relayed request `id`, approved, goes to the session that asked: nothing
    /// is queued, the host runs the call itself. (Its `delivered` record is among the
    /// answer's records.)
    pub(super) fn relayed_verdict(&mut self, id: ActionId, changes: &mut Changes) {
        let consumer = self.relay_consumer(id);
        self.relays.remove(id);
        self.counters.delivered += 1;
        changes.event(Event::Delivered { id, consumer });
    }

    /// Ends the open requests `session` asked: it ended, and its host's dialog with it.
    pub(super) fn end_relays(
        &mut self,
        session: SessionId,
        now: DateTime<Utc>,
        changes: &mut Changes,
    ) {
        for id in self.relays.take_session(session) {
            self.end_relayed(id, "ended with the session that asked", now, changes);
        }
    }

    /// Closes pending relayed request `id` as `resolved` for `reason`, unanswered here.
    pub(super) fn end_relayed(
        &mut self,
        id: ActionId,
        reason: &str,
        now: DateTime<Utc>,
        changes: &mut Changes,
    ) {
        let Some(item) = self.confirms.close(id, ActionState::Resolved, now, |c| {
            c.reason = Some(reason.to_string())
        }) else {
            return;
        };
        self.counters.resolved += 1;
        changes.record(Record {
            reason: Some(reason.to_string()),
            ..Record::transition(id, ActionState::Resolved, now)
        });
        tracing::info!(action_id = id, rule = %item.rule, reason, "permission request ended");
        changes.event(Event::Ended {
            id,
            rule: item.rule,
            reason: reason.to_string(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::lifecycle::ItemKind;

    fn request(id: &str) -> PermissionRequest {
        PermissionRequest {
            request_id: id.into(),
            tool_name: "Bash".into(),
            description: "List the files".into(),
            input_preview: r#"{"command":"ls"}"#.into(),
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);
    /// The host process of the sessions below, and the ancestors of a hook it runs.
    const HOST: u32 = 4242;
    const UNDER_HOST: &[u32] = &[4300, HOST, 1000];

    #[tokio::test]
    async fn a_request_is_a_confirm_for_people_that_queues_no_work() {
        let lc = Lifecycle::default();
        let asker = lc.open_session_numbered("claude-code");
        let other = lc.open_session_numbered("copilot");
        let now = Utc::now();
        let item = lc
            .relay_permission((asker, Some(HOST)), 5, &request("abcde"), HOUR, now)
            .await
            .unwrap();
        assert_eq!(
            (item.kind, &*item.rule, item.message.server.as_str()),
            (ItemKind::ConfirmRequest, "permission:Bash", "claude-code#1")
        );
        assert!(item.is_permission_request());
        assert!(item.message.content.contains(r#"{"command":"ls"}"#));
        assert_eq!(item.approve_via, [Via::Cli, Via::Web, Via::Relay]);
        assert_eq!(lc.pending_confirms().len(), 1);
        // No agent is shown it, and the agent's own tool may not answer it.
        assert!(lc.take(other, "copilot#2", 10).is_empty());
        assert!(lc.take(asker, "claude-code#1", 10).is_empty());
        let refused = lc
            .confirm(
                5,
                true,
                &crate::actions::by::by("claude-code#1"),
                Via::Tool,
                Some(asker),
                now,
            )
            .await;
        assert!(
            matches!(refused, Err(ConfirmError::OwnPermission { id: 5, ref tool }) if tool == "Bash"),
            "{refused:?}"
        );
        assert!(
            refused
                .unwrap_err()
                .to_string()
                .contains("an agent may not answer it")
        );
        // No form is ever put for it, and an answer claiming one is refused.
        let form = lc
            .confirm(
                5,
                true,
                &crate::actions::by::by("claude-code#1"),
                Via::Elicitation,
                None,
                now,
            )
            .await;
        assert!(
            matches!(
                form,
                Err(ConfirmError::ViaRefused {
                    via: Via::Elicitation,
                    ..
                })
            ),
            "{form:?}"
        );
        // A person's answer closes it and queues nothing.
        let approved = lc
            .confirm(5, true, &crate::actions::by::by("cli"), Via::Cli, None, now)
            .await
            .unwrap();
        assert_eq!(approved.map(|i| i.kind), Some(ItemKind::Approved));
        assert!(lc.take(other, "copilot#2", 10).is_empty(), "no work queued");
        assert_eq!(lc.stats().queued_work, 0);
        let closed = lc.closed_confirm(5).unwrap();
        assert_eq!(
            (closed.state, closed.via),
            (ActionState::Approved, Some(Via::Cli))
        );
    }

    #[tokio::test]
    async fn the_end_of_the_session_that_asked_ends_its_requests() {
        let lc = Lifecycle::default();
        let asker = lc.open_session_numbered("claude-code");
        let other = lc.open_session_numbered("claude-code");
        let now = Utc::now();
        lc.relay_permission((asker, Some(HOST)), 1, &request("aaaaa"), HOUR, now)
            .await
            .unwrap();
        lc.relay_permission((other, Some(HOST)), 2, &request("bbbbb"), HOUR, now)
            .await
            .unwrap();
        let mut rx = lc.subscribe();
        lc.close_session(asker, now);
        let ended: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert!(
            matches!(&ended[..], [Event::Ended { id: 1, reason, .. }] if reason == "ended with the session that asked"),
            "{ended:?}"
        );
        assert_eq!(
            lc.pending_confirms()
                .iter()
                .map(|i| i.action_id)
                .collect::<Vec<_>>(),
            [2]
        );
        let closed = lc.closed_confirm(1).unwrap();
        assert_eq!(closed.state, ActionState::Resolved);
        assert!(matches!(
            lc.confirm(1, true, &crate::actions::by::by("cli"), Via::Cli, None, now)
                .await,
            Err(ConfirmError::AlreadyAnswered { .. })
        ));
        assert!(matches!(
            lc.relay_permission((asker, Some(HOST)), 3, &request("ccccc"), HOUR, now)
                .await,
            Err(RelayError::NoSession(_))
        ));
    }

    #[tokio::test]
    async fn a_rule_confirm_is_still_shown_past_a_newer_request() {
        let lc = Lifecycle::default();
        let asker = lc.open_session_numbered("claude-code");
        let now = Utc::now();
        lc.relay_permission((asker, Some(HOST)), 9, &request("abcde"), HOUR, now)
            .await
            .unwrap();
        assert!(lc.take(asker, "claude-code#1", 10).is_empty());
        let (a, m) = crate::actions::lifecycle::tests::action(8, Mode::Confirm, now);
        lc.offer(vec![(a, m)], None, now).await;
        let shown = lc.take(asker, "claude-code#1", 10);
        assert_eq!(shown.iter().map(|i| i.action_id).collect::<Vec<_>>(), [8]);
    }

    /// Claude Code's preview of `input`: compact JSON cut to 200 UTF-16 units, then `…`.
    fn host_preview(input: &serde_json::Value) -> String {
        let s = serde_json::to_string(input).unwrap();
        let units: Vec<u16> = s.encode_utf16().collect();
        if units.len() <= 200 {
            return s;
        }
        format!("{}…", String::from_utf16_lossy(&units[..200]))
    }

    #[test]
    fn a_preview_fits_only_the_whole_input_it_shows() {
        use serde_json::json;
        let short = json!({"command": "ls -la", "description": "List files"});
        assert!(preview_fits(&host_preview(&short), &short));
        assert!(!preview_fits(
            &host_preview(&short),
            &json!({"command": "ls"})
        ));
        // Whole JSON in another key order is the same call.
        let reordered = json!({"description": "List files", "command": "ls -la"});
        assert!(preview_fits(&host_preview(&short), &reordered));

        // Issue 46.5: a preview cut short is the start of many calls; it fits none of them.
        let long = json!({"file_path": "/w/src/main.rs", "content": "fn main() {}\n".repeat(40)});
        let preview = host_preview(&long);
        assert!(preview.ends_with('…') && preview.chars().count() == 201);
        assert!(!preview_fits(&preview, &long));
        let rm = json!({"command": "rm -rf build"});
        assert!(!preview_fits("{\"command\":\"rm -rf bu…", &rm));
        assert!(!preview_fits("{\"command\":\"rm", &short));

        // Nothing to compare: no input fits.
        assert!(!preview_fits("", &short));
        assert!(!preview_fits("", &json!({})));
        assert!(!preview_fits("(unserializable)", &short));
        assert!(!preview_fits("…", &short));
    }

    #[tokio::test]
    async fn a_call_the_host_ran_closes_its_oldest_open_request_as_allowed_there() {
        use serde_json::json;
        let lc = Lifecycle::default();
        let asker = lc.open_session_numbered("claude-code");
        let now = Utc::now();
        for (id, request_id) in [(1, "aaaaa"), (2, "bbbbb")] {
            lc.relay_permission((asker, Some(HOST)), id, &request(request_id), HOUR, now)
                .await
                .unwrap();
        }
        let mut write = request("ccccc");
        write.tool_name = "Write".into();
        lc.relay_permission((asker, Some(HOST)), 3, &write, HOUR, now)
            .await
            .unwrap();
        let mut rx = lc.subscribe();

        // Another tool, or the same tool with other input, closes nothing.
        assert!(
            lc.allowed_in_host("Edit", &json!({"command": "ls"}), UNDER_HOST, now)
                .is_none()
        );
        assert!(
            lc.allowed_in_host("Bash", &json!({"command": "rm -rf /"}), UNDER_HOST, now)
                .is_none()
        );
        assert_eq!(lc.pending_confirms().len(), 3);

        let closed = lc
            .allowed_in_host("Bash", &json!({"command": "ls"}), UNDER_HOST, now)
            .unwrap();
        assert_eq!(
            (
                closed.id,
                closed.state,
                closed.via,
                closed.by.as_ref().map(|b| b.id.as_str()),
                closed.reason.as_deref()
            ),
            (
                1,
                ActionState::Approved,
                Some(Via::Relay),
                Some("claude-code#1"),
                Some(ALLOWED_IN_HOST)
            )
        );
        let events: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert!(
            matches!(
                &events[..],
                [
                    Event::Answered {
                        id: 1,
                        via: Some(Via::Relay),
                        ..
                    },
                    Event::Delivered { id: 1, .. }
                ]
            ),
            "{events:?}"
        );
        assert_eq!(
            lc.pending_confirms()
                .iter()
                .map(|i| i.action_id)
                .collect::<Vec<_>>(),
            [2, 3]
        );
        assert_eq!(lc.stats().queued_work, 0, "no work queued");
        let late = lc
            .confirm(
                1,
                false,
                &crate::actions::by::by("cli"),
                Via::Cli,
                None,
                now,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(late, ConfirmError::AlreadyAnswered { .. }),
            "{late:?}"
        );
        // A person's answer first leaves nothing for the host's call to close.
        lc.confirm(2, true, &crate::actions::by::by("cli"), Via::Cli, None, now)
            .await
            .unwrap();
        assert!(
            lc.allowed_in_host("Bash", &json!({"command": "ls"}), UNDER_HOST, now)
                .is_none()
        );
        assert_eq!(lc.closed_confirm(2).unwrap().via, Some(Via::Cli));
    }

    /// Issue 46.5: one window's hook closed another window's request (the oldest with the
    /// same tool). A hook closes only a request of the host it runs under, the nearest one
    /// when hosts nest; a request whose host is not known is closed by none.
    #[tokio::test]
    async fn a_hook_closes_only_a_request_of_its_own_host() {
        use serde_json::json;
        let lc = Lifecycle::default();
        let (payments, infra, web) = (
            lc.open_session_numbered("claude-code"),
            lc.open_session_numbered("claude-code"),
            lc.open_session_numbered("claude-code"),
        );
        let now = Utc::now();
        let other_host = 5151;
        lc.relay_permission((infra, Some(other_host)), 1, &request("aaaaa"), HOUR, now)
            .await
            .unwrap();
        lc.relay_permission((web, None), 2, &request("bbbbb"), HOUR, now)
            .await
            .unwrap();
        let ls = json!({"command": "ls"});
        assert!(lc.allowed_in_host("Bash", &ls, UNDER_HOST, now).is_none());
        assert!(lc.allowed_in_host("Bash", &ls, &[], now).is_none());
        assert_eq!(lc.pending_confirms().len(), 2, "neither was this host's");

        lc.relay_permission((payments, Some(HOST)), 3, &request("ccccc"), HOUR, now)
            .await
            .unwrap();
        // A host nested below another: its own request is the nearer.
        let nested = [HOST, 9, other_host];
        let closed = lc.allowed_in_host("Bash", &ls, &nested, now).unwrap();
        assert_eq!(
            (closed.id, closed.by.as_ref().map(|b| b.id.as_str())),
            (3, Some("claude-code#1"))
        );
        let closed = lc.allowed_in_host("Bash", &ls, &nested, now).unwrap();
        assert_eq!(closed.id, 1);
        assert!(lc.allowed_in_host("Bash", &ls, &nested, now).is_none());
        assert_eq!(
            lc.pending_confirms()
                .iter()
                .map(|i| i.action_id)
                .collect::<Vec<_>>(),
            [2]
        );
    }

    #[test]
    fn a_restart_ends_the_requests_it_finds_open() {
        use crate::actions::journal::LiveAction;
        let lc = Lifecycle::default();
        let now = Utc::now();
        let (action, message) = permission_action(3, "claude-code#1", &request("abcde"), HOUR, now);
        let (rule_action, rule_message) =
            crate::actions::lifecycle::tests::action(4, Mode::Confirm, now);
        let mut rx = lc.subscribe();
        lc.restore([
            LiveAction {
                action,
                message,
                state: ActionState::Pending,
                redelivered: false,
            },
            LiveAction {
                action: rule_action,
                message: (*rule_message).clone(),
                state: ActionState::Pending,
                redelivered: false,
            },
        ]);
        assert_eq!(
            lc.pending_confirms()
                .iter()
                .map(|i| i.action_id)
                .collect::<Vec<_>>(),
            [4],
            "a rule's confirm survives a restart, a relayed request does not"
        );
        assert_eq!(lc.closed_confirm(3).unwrap().state, ActionState::Resolved);
        assert!(matches!(rx.try_recv(), Ok(Event::Ended { id: 3, .. })));
    }
}
