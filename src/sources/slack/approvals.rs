//! Approvals in Slack: for each confirm whose rule's `approveVia` names `slack`, a Block Kit
//! message in `slack.approvals.channel` with Approve / Deny buttons, answered by a click.
//!
//! - **The message** shows the rule, the message that triggered it (as plain text: it is
//!   untrusted, so Slack renders no mention or link of it), the prompt the agent would get, the
//!   expiry, and the buttons, whose `value` is `confirm:{id}`.
//! - **A click** (Socket Mode's `interactive` envelope, or `POST /v1/slack/interactivity`) from
//!   an approver (anyone in the channel when `approvers` is empty) answers the confirm `via:
//!   slack`, through the same operation as the page and the CLI; it is acknowledged once the
//!   answer is in the actions journal. A click from anyone else gets an ephemeral "you are not
//!   an approver" and changes nothing; a click on a closed confirm gets "already answered by …".
//! - **The update**: once the confirm is closed, whichever way (the buttons, the page, the CLI,
//!   the tool, a form, the relay; or it expired or was resolved), the message is updated
//!   (`chat.update`) to say how, and its buttons are gone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::Inner;
use crate::actions::lifecycle::Event;
use crate::actions::{ActionId, ActionState, By, ByKind, Item, ItemKind, Via};
use crate::control::RefusalCode;
use crate::control::ops::{Confirm, Decision};
use crate::sources::SourceContext;

/// How many approval messages are remembered (open and closed).
const REMEMBERED: usize = 4096;

/// The longest text of one Block Kit text object (Slack's limit is 3,000 characters).
const MAX_TEXT: usize = 2900;

/// The approval messages posted: where each is and how its confirm ended.
#[derive(Default)]
pub struct Board(Mutex<BTreeMap<ActionId, Posted>>);

/// One approval message.
#[derive(Clone, Debug)]
struct Posted {
    channel: String,
    ts: String,
    rule: String,
    /// The blocks without the buttons: what stays when it is updated.
    blocks: Vec<Value>,
    /// How it ended, once it has (`approved by @ada via slack`).
    closed: Option<String>,
}

impl Board {
    fn get(&self, id: ActionId) -> Option<Posted> {
        self.0.lock().unwrap().get(&id).cloned()
    }

    fn forget(&self, id: ActionId) {
        self.0.lock().unwrap().remove(&id);
    }

    fn put(&self, id: ActionId, posted: Posted) {
        let mut all = self.0.lock().unwrap();
        all.insert(id, posted);
        while all.len() > REMEMBERED {
            all.pop_first();
        }
    }
}

/// Posts and updates the approval messages as confirms come and go, until the daemon stops.
pub async fn run(inner: Arc<Inner>, cx: SourceContext, mut events: broadcast::Receiver<Event>) {
    loop {
        let event = tokio::select! {
            _ = cx.shutdown().cancelled() => return,
            event = events.recv() => event,
        };
        match event {
            Ok(event) => on_transition(&inner, event).await,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(
                    missed = n,
                    "slack: approvals missed transitions; some messages may not be posted or updated"
                );
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

async fn on_transition(inner: &Inner, event: Event) {
    let (id, line) = match event {
        Event::Queued { item }
            if item.kind == ItemKind::ConfirmRequest
                && item.approve_via.contains(&Via::Slack)
                && inner.approvals.get(item.action_id).is_none() =>
        {
            return post(inner, &item).await;
        }
        Event::Answered {
            id, state, by, via, ..
        } => {
            let how = if state == ActionState::Approved {
                "Approved"
            } else {
                "Denied"
            };
            let via = via
                .filter(|v| *v != Via::Slack)
                .map(|v| format!(" (via {v})"))
                .unwrap_or_default();
            (id, format!("{how} by {by}{via} at {}", when(Utc::now())))
        }
        Event::Expired { id, .. } => (id, format!("Expired unanswered at {}", when(Utc::now()))),
        Event::Resolved { id, by_seq, .. } => (
            id,
            format!("Closed by message {by_seq} before anyone answered"),
        ),
        Event::Ended { id, reason, .. } => (id, format!("Closed: {reason}")),
        _ => return,
    };
    close(inner, id, line).await;
}

/// Posts the approval message of `item`.
async fn post(inner: &Inner, item: &Item) {
    let Some(settings) = &inner.settings.approvals else {
        return;
    };
    let blocks = request_blocks(item);
    let mut with_buttons = blocks.clone();
    with_buttons.push(buttons(item.action_id));
    let body = json!({
        "channel": settings.channel,
        "text": format!("Approval needed: rule `{}` (confirm {})", item.rule, item.action_id),
        "blocks": with_buttons,
    });
    // On the board before it is posted: a click that comes before Slack's answer (someone
    // quick, a slow answer) already finds the rule it answers.
    let mut posted = Posted {
        channel: settings.channel.clone(),
        ts: String::new(),
        rule: item.rule.to_string(),
        blocks,
        closed: None,
    };
    inner.approvals.put(item.action_id, posted.clone());
    match inner.post("chat.postMessage", &body).await {
        Ok(sent) => {
            if let Some(ts) = sent.get("ts").and_then(Value::as_str) {
                posted.ts = ts.to_string();
            }
            if let Some(channel) = sent.get("channel").and_then(Value::as_str) {
                posted.channel = channel.to_string();
            }
            inner
                .counts
                .approvals_posted
                .fetch_add(1, Ordering::Relaxed);
            inner.approvals.put(item.action_id, posted);
        }
        Err(e) => {
            inner.approvals.forget(item.action_id);
            tracing::warn!(cause = %e, action_id = item.action_id, "slack: the approval message was not posted")
        }
    }
}

/// Updates the message of confirm `id`, closed as `line` says.
async fn close(inner: &Inner, id: ActionId, line: String) {
    let Some(mut posted) = inner.approvals.get(id) else {
        return;
    };
    if posted.closed.is_some() || posted.ts.is_empty() {
        return;
    }
    posted.closed = Some(line.clone());
    inner.approvals.put(id, posted.clone());
    let mut blocks = posted.blocks.clone();
    blocks
        .push(json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("*{line}*")}}));
    let body = json!({
        "channel": posted.channel,
        "ts": posted.ts,
        "text": format!("Rule `{}` (confirm {id}): {line}", posted.rule),
        "blocks": blocks,
    });
    if let Err(e) = inner.post("chat.update", &body).await {
        tracing::warn!(cause = %e, action_id = id, "slack: the approval message was not updated");
    }
}

/// The blocks of a request, without its buttons.
fn request_blocks(item: &Item) -> Vec<Value> {
    let m = &item.message;
    let expires = item
        .expires_at
        .map(|t| format!("; expires {}", when(t)))
        .unwrap_or_default();
    vec![
        json!({"type": "header", "text": {"type": "plain_text",
            "text": cut(&format!("Approval needed: {}", item.rule), 150)}}),
        json!({"type": "section", "text": {"type": "mrkdwn",
            "text": format!("Rule `{}` fired on message {} from `{}` `{}`{expires}. The message (untrusted):",
                item.rule, m.seq, m.server, m.channel)}}),
        json!({"type": "section", "text": {"type": "plain_text", "text": cut(&m.content, MAX_TEXT), "emoji": false}}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": "The prompt the agent would get:"}}),
        json!({"type": "section", "text": {"type": "plain_text", "text": cut(&item.prompt, MAX_TEXT), "emoji": false}}),
    ]
}

/// The Approve / Deny buttons of confirm `id`.
fn buttons(id: ActionId) -> Value {
    let value = format!("confirm:{id}");
    json!({"type": "actions", "block_id": value, "elements": [
        {"type": "button", "action_id": "approve", "style": "primary", "value": value,
         "text": {"type": "plain_text", "text": "Approve"}},
        {"type": "button", "action_id": "deny", "style": "danger", "value": value,
         "text": {"type": "plain_text", "text": "Deny"}},
    ]})
}

/// A time as Slack shows it in each reader's time zone, `14:02 UTC` where it cannot.
fn when(t: DateTime<Utc>) -> String {
    format!(
        "<!date^{}^{{time}}|{} UTC>",
        t.timestamp(),
        t.format("%H:%M")
    )
}

/// `text`, at most `max` characters (an ellipsis at the cut).
fn cut(text: &str, max: usize) -> String {
    let text = if text.trim().is_empty() {
        "(empty)"
    } else {
        text
    };
    match text.char_indices().nth(max.saturating_sub(1)) {
        Some((at, _)) if text.chars().count() > max => format!("{}…", &text[..at]),
        _ => text.to_string(),
    }
}

/// A click (`block_actions`) on an approval message's buttons: the answer is in the actions
/// journal (or refused, and the person told why) when this returns `Ok`; `Err` when it could
/// not be recorded, and the click should be tried again.
pub async fn on_click(inner: &Inner, cx: &SourceContext, payload: &Value) -> Result<(), String> {
    let Some(click) = Click::read(payload) else {
        return Ok(());
    };
    let rule = inner.approvals.get(click.id).map(|p| p.rule);
    if let Some(settings) = &inner.settings.approvals
        && !settings.approvers.is_empty()
        && !settings.approvers.contains(&click.user)
    {
        let rule = rule.as_deref().unwrap_or("this request");
        ephemeral(
            inner,
            &click,
            &format!("you are not an approver of `{rule}`; nothing changed"),
        )
        .await;
        return Ok(());
    }
    let name = match inner.user_name(&click.user).await {
        Some(name) => name,
        None => click.user_name.clone(),
    };
    // Who answered, beside `via`: the Slack user (id and name).
    let by = By::new(ByKind::Slack, click.user.clone(), Some(name));
    tracing::info!(action_id = click.id, user = %click.user, by = %by, decision = %click.decision, "slack: a confirm answered with a button");
    let answer = Confirm {
        id: click.id,
        decision: click.decision,
        by,
        claim_for: None,
        via: Some(Via::Slack),
    };
    match cx.confirm(answer).await {
        Ok(_) => {
            inner
                .counts
                .approvals_answered
                .fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => match e.refusal() {
            Some(RefusalCode::AlreadyAnswered | RefusalCode::Expired | RefusalCode::Unknown) => {
                let said = match inner.approvals.get(click.id).and_then(|p| p.closed) {
                    Some(how) => format!("already answered: {}", lowercase_first(&how)),
                    None => e.to_string(),
                };
                ephemeral(inner, &click, &said).await;
                Ok(())
            }
            Some(RefusalCode::NotAllowed | RefusalCode::Invalid) => {
                ephemeral(inner, &click, &e.to_string()).await;
                Ok(())
            }
            _ => {
                ephemeral(inner, &click, &format!("not recorded: {e}")).await;
                Err(e.to_string())
            }
        },
    }
}

/// One button click, read from Slack's `block_actions` payload.
struct Click {
    id: ActionId,
    decision: Decision,
    user: String,
    user_name: String,
    channel: String,
}

impl Click {
    fn read(payload: &Value) -> Option<Click> {
        if payload.get("type").and_then(Value::as_str) != Some("block_actions") {
            return None;
        }
        let action = payload.get("actions")?.get(0)?;
        let id = action
            .get("value")?
            .as_str()?
            .strip_prefix("confirm:")?
            .parse()
            .ok()?;
        let decision = match action.get("action_id")?.as_str()? {
            "approve" => Decision::Yes,
            "deny" => Decision::No,
            _ => return None,
        };
        let user = payload.get("user")?;
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        let user_id = s(user, "id")?;
        let channel = payload
            .get("channel")
            .and_then(|c| s(c, "id"))
            .or_else(|| payload.get("container").and_then(|c| s(c, "channel_id")))
            .unwrap_or_default();
        Some(Click {
            id,
            decision,
            user_name: s(user, "username")
                .or_else(|| s(user, "name"))
                .unwrap_or_else(|| user_id.clone()),
            user: user_id,
            channel,
        })
    }
}

/// Tells the person who clicked, and only them.
async fn ephemeral(inner: &Inner, click: &Click, text: &str) {
    let body = json!({"channel": click.channel, "user": click.user, "text": text});
    if let Err(e) = inner.post("chat.postEphemeral", &body).await {
        tracing::warn!(cause = %e, "slack: could not tell the person who clicked");
    }
}

fn lowercase_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_click_reads_the_confirm_the_decision_and_the_person() {
        let payload = json!({"type": "block_actions", "user": {"id": "U2", "username": "ada"},
            "channel": {"id": "C7"}, "actions": [{"action_id": "deny", "value": "confirm:42"}]});
        let c = Click::read(&payload).unwrap();
        assert_eq!(
            (
                c.id,
                c.decision,
                c.user.as_str(),
                c.user_name.as_str(),
                c.channel.as_str()
            ),
            (42, Decision::No, "U2", "ada", "C7")
        );
        let mut other = payload.clone();
        other["actions"][0]["value"] = json!("something:1");
        assert!(Click::read(&other).is_none());
        assert!(Click::read(&json!({"type": "view_submission"})).is_none());
    }

    #[test]
    fn long_text_is_cut_for_block_kit() {
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
        assert_eq!(cut("  ", 10), "(empty)");
        assert_eq!(
            when(DateTime::from_timestamp(1_700_000_000, 0).unwrap()),
            "<!date^1700000000^{time}|22:13 UTC>"
        );
    }
}
