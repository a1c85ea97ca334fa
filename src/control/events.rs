//! The MCP Events extension's shapes as the operations use them, written from the draft
//! (modelcontextprotocol/experimental-ext-triggers-events, `docs/design-sketch-proposal.md`):
//! the event types switchboard offers (`events/list`), an occurrence (`EventOccurrence`), the
//! opaque cursor (a seq of the inbox under the hood), and the draft's refusals with their typed
//! `data`. The methods themselves are operations (`events_poll`, `events_subscribe`,
//! `events_unsubscribe`); the MCP front end maps refusals to the draft's error codes
//! ([`mcp_code`]).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{ApiError, RefusalCode, Refused};
use crate::message::{Message, MessageView, Seq};

/// `events_poll` calls answered (each turn of a stream or webhook included), for `stats`.
pub static POLLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The event type of every message that lands in the inbox.
pub const MESSAGE_EVENT: &str = "switchboard.message";

/// The `_meta` key that carries a push stream's subscription id on each notification.
pub const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";

/// Delivery modes, as `events/list` names them.
pub const DELIVERY_MODES: [&str; 3] = ["poll", "push", "webhook"];

/// The `events/list` result: the event types switchboard offers.
pub fn event_types() -> Value {
    let pattern = |what: &str| {
        json!({"type": "string", "description": format!(
            "{what} pattern, as a rule's: `*`, a literal, `name/*` (the name and below), or a glob")})
    };
    json!({"events": [{
        "name": MESSAGE_EVENT,
        "description": "Fires when a message lands in switchboard's inbox (an alert, a CI event, \
                        a chat message, a webhook); filtered as a rule's `server`, `channel`, \
                        `contentRegex` and `matchers` filter.",
        "delivery": DELIVERY_MODES,
        "inputSchema": {
            "type": "object",
            "properties": {
                "server": pattern("Server"),
                "channel": pattern("Channel"),
                "contentRegex": {"type": "string",
                    "description": "Regex searched unanchored in the content"},
                "matchers": {"type": "array", "items": {"type": "string"},
                    "description": "Metadata matchers (`KEY=\"v\"`, `KEY!=\"v\"`, `KEY=~\"re\"`, \
                                    `KEY!~\"re\"`); all must hold"},
            },
            "additionalProperties": false,
        },
        "payloadSchema": schemars::schema_for!(MessageView),
    }]})
}

/// One occurrence of an event (`EventOccurrence`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Occurrence {
    /// The message's own source id where it has one, else switchboard's (`sb-<seq>`).
    pub event_id: String,
    /// The event type.
    pub name: String,
    /// When it occurred (RFC 3339).
    pub timestamp: String,
    /// The message as every tool shows it.
    pub data: Value,
    /// The position after this event (push and webhook; a poll carries it on the page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl Occurrence {
    /// `msg` as a `switchboard.message` occurrence.
    pub fn of(msg: &Message) -> Occurrence {
        let view = MessageView::from(msg);
        Occurrence {
            event_id: event_id(msg),
            name: MESSAGE_EVENT.to_string(),
            timestamp: view.timestamp.clone(),
            data: serde_json::to_value(&view).unwrap_or(Value::Null),
            cursor: Some(cursor_of(msg.seq)),
        }
    }

    /// The seq under the occurrence's cursor.
    pub fn seq(&self) -> Option<Seq> {
        self.cursor.as_deref().and_then(|c| seq_of(c).ok())
    }
}

/// The message's source id where it has one, else switchboard's own.
pub fn event_id(msg: &Message) -> String {
    match &msg.id {
        Some(id) if !id.is_empty() => id.clone(),
        _ => format!("sb-{}", msg.seq),
    }
}

/// The opaque cursor at `seq`: every message up to it has been seen.
pub fn cursor_of(seq: Seq) -> String {
    format!("sb1.{seq}")
}

/// The seq of a cursor `cursor_of` made, or why it is not one.
pub fn seq_of(cursor: &str) -> Result<Seq, ApiError> {
    cursor
        .strip_prefix("sb1.")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            invalid(format!(
                "events: cursor \"{cursor}\" is not one switchboard gave; pass the last cursor \
                 a poll, stream or delivery returned, or null to start from now"
            ))
        })
}

/// `-32602 InvalidParams`.
pub fn invalid(message: impl std::fmt::Display) -> ApiError {
    ApiError::refused(RefusalCode::Invalid, message)
}

/// `-32011 NotFound`: `kind` is `event` or `subscription`.
pub fn not_found(kind: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::Refused(Refused::new(RefusalCode::NotFound, message).with_data(json!({"kind": kind})))
}

/// `-32012 Forbidden`.
pub fn forbidden(message: impl std::fmt::Display) -> ApiError {
    ApiError::refused(RefusalCode::NotAllowed, message)
}

/// `-32013 ResourceExhausted`: `limit` named, `max` given.
pub fn exhausted(limit: &str, max: usize, message: impl std::fmt::Display) -> ApiError {
    ApiError::Refused(
        Refused::new(RefusalCode::Full, message).with_data(json!({"limit": limit, "max": max})),
    )
}

/// `-32014 Unsupported`: `feature` with `value` is not offered here.
pub fn unsupported(feature: &str, value: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::Refused(
        Refused::new(RefusalCode::Unavailable, message)
            .with_data(json!({"feature": feature, "value": value})),
    )
}

/// `-32015 CallbackEndpointError`: `reason` is a `lastError` category.
pub fn endpoint_error(reason: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::Refused(
        Refused::new(RefusalCode::Failed, message).with_data(json!({"reason": reason})),
    )
}

/// The draft's JSON-RPC error code for a refusal of an events method (-32602, -32011 ...
/// -32015); `None` for what is not a refusal of the request (the daemon is unreachable).
pub fn mcp_code(refused: &Refused) -> Option<i32> {
    let has = |key: &str| refused.data.as_ref().is_some_and(|d| d.get(key).is_some());
    Some(match refused.code {
        RefusalCode::Invalid => -32602,
        RefusalCode::NotFound | RefusalCode::Unknown => -32011,
        RefusalCode::NotAllowed => -32012,
        RefusalCode::Full => -32013,
        RefusalCode::Unavailable if has("feature") => -32014,
        RefusalCode::Failed if has("reason") => -32015,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_a_foreign_one_is_invalid_params() {
        assert_eq!(seq_of(&cursor_of(42)).unwrap(), 42);
        let err = seq_of("historyId_99842").unwrap_err();
        let ApiError::Refused(r) = err else { panic!() };
        assert_eq!(mcp_code(&r), Some(-32602));
    }

    #[test]
    fn each_refusal_maps_to_the_drafts_code() {
        let code = |e: ApiError| match e {
            ApiError::Refused(r) => mcp_code(&r),
            _ => None,
        };
        assert_eq!(code(not_found("event", "x")), Some(-32011));
        assert_eq!(code(forbidden("x")), Some(-32012));
        assert_eq!(code(exhausted("subscriptions", 3, "x")), Some(-32013));
        assert_eq!(code(unsupported("deliveryMode", "push", "x")), Some(-32014));
        assert_eq!(code(endpoint_error("timeout", "x")), Some(-32015));
    }
}
