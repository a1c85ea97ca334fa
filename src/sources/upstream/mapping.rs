//! One upstream notification → one message (chatcli's mapping). Pure.
//!
//! | method | channel | content | metadata |
//! | --- | --- | --- | --- |
//! | `notifications/claude/channel` | the upstream's `channel` template | `params.content` | `params.meta` |
//! | `notifications/message` | `message` | `params.data` | `level`, `logger` |
//! | `channel/message`, `message` with `params.channel` | that channel | `content`, `text` or `message` | `params.meta` |
//! | any other `notifications/X` (or method `X`) | `X` | the params as JSON | `params.meta` |
//!
//! Protocol notifications (progress, cancellation, list changes, resource updates, task
//! status) are not messages: they are left to the MCP client.

use serde_json::Value;

use super::config::UpstreamConfig;
use crate::message::{Message, Metadata, NewMessage};

/// Notifications that belong to the protocol, not to the inbox.
const PROTOCOL: &[&str] = &[
    "notifications/cancelled",
    "notifications/progress",
    "notifications/initialized",
    "notifications/resources/updated",
    "notifications/resources/list_changed",
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/roots/list_changed",
    "notifications/tasks/status",
    "notifications/elicitation/complete",
    "notifications/subscriptions/acknowledged",
];

/// Whether `method` is protocol plumbing rather than a message.
pub fn is_protocol(method: &str) -> bool {
    PROTOCOL.contains(&method)
}

/// The message for one notification from `up`, or `None` for a protocol notification.
pub fn to_message(up: &UpstreamConfig, method: &str, params: Option<&Value>) -> Option<NewMessage> {
    if is_protocol(method) {
        return None;
    }
    let empty = serde_json::Map::new();
    let p = params.and_then(Value::as_object).unwrap_or(&empty);
    let mut metadata = meta(p.get("meta"));
    let (channel, content) = match method {
        "notifications/claude/channel" => {
            let content = p.get("content").map(text).unwrap_or_default();
            // Render the channel template against the message as it will be stored.
            let draft = Message::from_new(
                NewMessage {
                    server: up.name.clone(),
                    content: content.clone(),
                    metadata: metadata.clone(),
                    ..NewMessage::default()
                },
                0,
                chrono::Utc::now(),
            );
            (up.channel.render(&draft), content)
        }
        "notifications/message" => {
            for key in ["level", "logger"] {
                if let Some(v) = p.get(key).filter(|v| !v.is_null()) {
                    metadata.insert(key, &text(v));
                }
            }
            (
                "message".to_string(),
                p.get("data").map(text).unwrap_or_default(),
            )
        }
        "channel/message" | "message" | "notifications/channel/message"
            if p.get("channel").is_some_and(Value::is_string) =>
        {
            let content = ["content", "text", "message"]
                .iter()
                .find_map(|k| p.get(*k))
                .map(text)
                .unwrap_or_default();
            (text(&p["channel"]), content)
        }
        other => {
            let channel = other.strip_prefix("notifications/").unwrap_or(other);
            let content = params.map(Value::to_string).unwrap_or_default();
            (channel.to_string(), content)
        }
    };
    Some(NewMessage {
        id: None,
        server: up.name.clone(),
        channel,
        content,
        metadata,
        timestamp: None,
    })
}

/// A JSON value as message text: a string as itself, anything else as compact JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `params.meta` flattened to strings (nested values as JSON text).
fn meta(v: Option<&Value>) -> Metadata {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), text(v)))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn upstream(channel: Option<&str>) -> UpstreamConfig {
        let mut entry = json!({"command": "x"});
        if let Some(c) = channel {
            entry["channel"] = c.into();
        }
        let doc = json!({"upstreams": {"teams": entry}});
        let text = doc.to_string();
        super::super::config::parse(&text, doc["upstreams"].as_object().unwrap())
            .unwrap()
            .remove(0)
    }

    #[test]
    fn claude_channel_push_uses_the_template_and_keeps_meta() {
        let up = upstream(Some("dm/{{meta.chat_id}}"));
        let m = to_message(
            &up,
            "notifications/claude/channel",
            Some(&json!({"content": "hi there", "meta": {"chat_id": "19:abc", "sender": "Ada", "n": 3}})),
        )
        .unwrap();
        assert_eq!(
            (m.server.as_str(), m.channel.as_str(), m.content.as_str()),
            ("teams", "dm/19:abc", "hi there")
        );
        assert_eq!(&m.metadata["sender"], "Ada");
        assert_eq!(&m.metadata["n"], "3");
        let default = to_message(
            &upstream(None),
            "notifications/claude/channel",
            Some(&json!({"content": "x"})),
        )
        .unwrap();
        assert_eq!(default.channel, "claude/channel");
    }

    #[test]
    fn logging_message_custom_and_protocol_notifications() {
        let up = upstream(None);
        let log = to_message(
            &up,
            "notifications/message",
            Some(&json!({"level": "error", "logger": "db", "data": {"code": 7}})),
        )
        .unwrap();
        assert_eq!(log.channel, "message");
        assert_eq!(log.content, r#"{"code":7}"#);
        assert_eq!(&log.metadata["level"], "error");
        assert_eq!(&log.metadata["logger"], "db");

        let custom = to_message(
            &up,
            "notifications/ci/pipeline",
            Some(&json!({"id": 4, "meta": {"k": "v"}})),
        )
        .unwrap();
        assert_eq!(custom.channel, "ci/pipeline");
        assert_eq!(custom.content, r#"{"id":4,"meta":{"k":"v"}}"#);
        assert_eq!(&custom.metadata["k"], "v");

        let routed = to_message(
            &up,
            "channel/message",
            Some(&json!({"channel": "teams/dm", "text": "yo"})),
        )
        .unwrap();
        assert_eq!(
            (routed.channel.as_str(), routed.content.as_str()),
            ("teams/dm", "yo")
        );

        assert!(to_message(&up, "notifications/progress", Some(&json!({}))).is_none());
        assert!(to_message(&up, "notifications/tools/list_changed", None).is_none());
    }
}
