//! A Microsoft Graph chat message, as Graph documents it (`chatMessage`), turned into our
//! message. Pure: no I/O, unit-tested with the samples of Microsoft's docs.
//!
//! - server `teams`; channel `teams/dm` (Graph's `oneOnOne`), `teams/group`, `teams/meeting`;
//! - content: the body as plain text ([`super::html`]), mentions as `@Name`, attachments as
//!   `[attachment: name]`;
//! - metadata: `chat_id`, `message_id`, `sender`, `sender_id`, `chat_type` (Graph's value),
//!   `mentions_me` (`true` or `false`), `reply_to_id` when it has one;
//! - id: the chat's id and the Graph message id (`19:…@thread.v2/1616964509832`): Graph numbers
//!   messages by their time in milliseconds, unique within a chat, not across chats;
//! - skipped: the signed-in user's own messages, system events (every `messageType` but
//!   `message`), deleted messages. An edit keeps its `createdDateTime`, so the cursors never
//!   take it for a new message.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::html::{self, Refs};
use crate::message::NewMessage;

/// The server name of every Teams message.
pub const SERVER: &str = "teams";

/// Every metadata key a Teams message can carry.
pub const META_KEYS: &[&str] = &[
    "chat_id",
    "message_id",
    "sender",
    "sender_id",
    "chat_type",
    "mentions_me",
    "reply_to_id",
];

/// Who is signed in (`GET /v1.0/me`): their own messages are skipped, mentions of them marked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Me {
    /// Their Entra object id.
    pub id: String,
    /// Their display name.
    pub name: String,
}

impl Me {
    /// From a Graph `user` object.
    pub fn from_user(user: &Value) -> Option<Me> {
        Some(Me {
            id: user.get("id")?.as_str()?.to_string(),
            name: str_at(user, &["displayName"])
                .or_else(|| str_at(user, &["userPrincipalName"]))
                .unwrap_or_default()
                .to_string(),
        })
    }
}

/// Why a chat message is not a message of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The signed-in user wrote it.
    Own,
    /// A system event (a member added, the chat renamed) or a type Graph adds later.
    System,
    /// It was deleted.
    Deleted,
    /// It lacks an id or a body.
    Shape,
}

/// The channel of a chat of Graph's `chat_type`.
pub fn channel_of(chat_type: &str) -> &'static str {
    match chat_type {
        "oneOnOne" => "teams/dm",
        "group" => "teams/group",
        "meeting" => "teams/meeting",
        _ => "teams/chat",
    }
}

/// The message's Graph id.
pub fn message_id(msg: &Value) -> Option<&str> {
    msg.get("id")?.as_str()
}

/// When the message was created (not edited).
pub fn created(msg: &Value) -> Option<DateTime<Utc>> {
    str_at(msg, &["createdDateTime"])?
        .parse::<DateTime<Utc>>()
        .ok()
}

/// Chat message `msg` of chat `chat_id` (of Graph's `chat_type`) as our message, or why not.
pub fn to_message(
    msg: &Value,
    chat_id: &str,
    chat_type: &str,
    me: &Me,
) -> Result<NewMessage, Skip> {
    let id = message_id(msg).ok_or(Skip::Shape)?;
    if str_at(msg, &["messageType"]) != Some("message") {
        return Err(Skip::System);
    }
    if msg.get("deletedDateTime").is_some_and(|d| !d.is_null()) {
        return Err(Skip::Deleted);
    }
    let from = msg.get("from").filter(|f| !f.is_null());
    let user = from.and_then(|f| f.get("user")).filter(|u| !u.is_null());
    let sender = user
        .or_else(|| {
            from.and_then(|f| f.get("application"))
                .filter(|a| !a.is_null())
        })
        .ok_or(Skip::System)?;
    let sender_id = str_at(sender, &["id"]).unwrap_or_default();
    if user.is_some() && !me.id.is_empty() && sender_id == me.id {
        return Err(Skip::Own);
    }
    let chat_id = str_at(msg, &["chatId"]).unwrap_or(chat_id);
    let mut out = NewMessage::new(SERVER, channel_of(chat_type), content(msg)?);
    out.id = Some(format!("{chat_id}/{id}"));
    out.timestamp = created(msg);
    let mentions_me = mentions(msg).any(|(_, _, user)| !me.id.is_empty() && user == me.id);
    let meta = &mut out.metadata;
    meta.insert("chat_id", chat_id);
    meta.insert("message_id", id);
    meta.insert(
        "sender",
        str_at(sender, &["displayName"]).unwrap_or(sender_id),
    );
    meta.insert("sender_id", sender_id);
    meta.insert("chat_type", chat_type);
    meta.insert("mentions_me", if mentions_me { "true" } else { "false" });
    if let Some(reply_to) = str_at(msg, &["replyToId"]) {
        meta.insert("reply_to_id", reply_to);
    }
    Ok(out)
}

/// The body as text, with every attachment the body does not show listed after it.
fn content(msg: &Value) -> Result<String, Skip> {
    let body = msg.get("body").ok_or(Skip::Shape)?;
    let raw = str_at(body, &["content"]).unwrap_or_default();
    let refs = Refs {
        mentions: mentions(msg)
            .map(|(id, text, _)| (id, text.to_string()))
            .collect(),
        attachments: attachments(msg).collect(),
    };
    let is_html = str_at(body, &["contentType"]).is_some_and(|t| t.eq_ignore_ascii_case("html"));
    let (mut text, shown) = if is_html {
        html::to_text(raw, &refs)
    } else {
        (raw.trim().to_string(), Vec::new())
    };
    for (id, name) in &refs.attachments {
        if !shown.contains(id) {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&format!("[attachment: {name}]"));
        }
    }
    Ok(text)
}

/// Each mention: its id in the body (`<at id="0">`), its text, the mentioned user's id.
fn mentions(msg: &Value) -> impl Iterator<Item = (String, &str, &str)> {
    msg.get("mentions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|m| {
            let id = match m.get("id") {
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::String(s)) => s.clone(),
                _ => String::new(),
            };
            let text = str_at(m, &["mentionText"]).unwrap_or_default();
            let user = str_at(m, &["mentioned", "user", "id"]).unwrap_or_default();
            (id, text, user)
        })
}

/// Each attachment's id and name (a card without a name is named by its type).
fn attachments(msg: &Value) -> impl Iterator<Item = (String, String)> {
    msg.get("attachments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|a| {
            let id = str_at(a, &["id"]).unwrap_or_default().to_string();
            let name = str_at(a, &["name"])
                .or_else(|| str_at(a, &["contentType"]))
                .unwrap_or("file")
                .to_string();
            (id, name)
        })
}

/// The chat and message a change notification's `resource` names:
/// `chats('19:…@thread.v2')/messages('1612289765949')` (or `chats/ID/messages/ID`).
pub fn notified(resource: &str) -> Option<(String, String)> {
    let resource = resource.trim_start_matches('/');
    if let Some(rest) = resource.strip_prefix("chats('") {
        let (chat, rest) = rest.split_once("')/messages('")?;
        let message = rest.strip_suffix("')")?;
        return Some((chat.to_string(), message.to_string()));
    }
    let rest = resource.strip_prefix("chats/")?;
    let (chat, message) = rest.split_once("/messages/")?;
    (!chat.is_empty() && !message.is_empty() && !message.contains('/'))
        .then(|| (chat.to_string(), message.to_string()))
}

/// The string at `path` in `v`, if there is one.
pub fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn me() -> Me {
        Me {
            id: "ef1c916a-3135-4417-ba27-8eb7bd084193".into(),
            name: "Jane Smith".into(),
        }
    }

    /// The first message of `chat-list-messages`' example response
    /// (learn.microsoft.com/graph/api/chat-list-messages).
    fn hello_world() -> Value {
        json!({
            "id": "1616964509832",
            "replyToId": null,
            "etag": "1616964509832",
            "messageType": "message",
            "createdDateTime": "2021-03-28T20:48:29.832Z",
            "lastModifiedDateTime": "2021-03-28T20:48:29.832Z",
            "lastEditedDateTime": null,
            "deletedDateTime": null,
            "subject": null,
            "summary": null,
            "chatId": "19:2da4c29f6d7041eca70b638b43d45437@thread.v2",
            "importance": "normal",
            "locale": "en-us",
            "webUrl": null,
            "channelIdentity": null,
            "policyViolation": null,
            "eventDetail": null,
            "from": {
                "application": null,
                "device": null,
                "user": {
                    "id": "8ea0e38b-efb3-4757-924a-5f94061cf8c2",
                    "displayName": "Robin Kline",
                    "userIdentityType": "aadUser"
                }
            },
            "body": {"contentType": "text", "content": "Hello world"},
            "attachments": [],
            "mentions": [],
            "reactions": [],
            "messageHistory": []
        })
    }

    #[test]
    fn a_direct_message_from_the_docs() {
        let chat = "19:2da4c29f6d7041eca70b638b43d45437@thread.v2";
        let m = to_message(&hello_world(), chat, "oneOnOne", &me()).unwrap();
        assert_eq!(
            (m.server.as_str(), m.channel.as_str()),
            ("teams", "teams/dm")
        );
        assert_eq!(m.content, "Hello world");
        assert_eq!(m.id.as_deref(), Some(&*format!("{chat}/1616964509832")));
        assert_eq!(
            m.timestamp.unwrap().to_rfc3339(),
            "2021-03-28T20:48:29.832+00:00"
        );
        let meta: Vec<(&str, &str)> = META_KEYS
            .iter()
            .filter_map(|k| m.metadata.get(k).map(|v| (*k, v)))
            .collect();
        assert_eq!(
            meta,
            [
                ("chat_id", chat),
                ("message_id", "1616964509832"),
                ("sender", "Robin Kline"),
                ("sender_id", "8ea0e38b-efb3-4757-924a-5f94061cf8c2"),
                ("chat_type", "oneOnOne"),
                ("mentions_me", "false"),
            ]
        );
        assert_eq!(channel_of("group"), "teams/group");
        assert_eq!(channel_of("meeting"), "teams/meeting");
    }

    #[test]
    fn a_mention_of_me_with_an_attachment_and_a_reply() {
        // The body and mention of `chatmessage-post`'s "@mentions" example, the attachment of
        // the chatMessage resource's JSON representation
        // (learn.microsoft.com/graph/api/resources/chatmessage).
        let mut msg = hello_world();
        msg["body"] = json!({"contentType": "html", "content": "<p>Hello World <at id=\"0\">Jane Smith</at></p><p>see&nbsp;below</p>"});
        msg["mentions"] = json!([{
            "id": 0,
            "mentionText": "Jane Smith",
            "mentioned": {"user": {"displayName": "Jane Smith", "id": "ef1c916a-3135-4417-ba27-8eb7bd084193", "userIdentityType": "aadUser"}}
        }]);
        msg["attachments"] = json!([{
            "id": "5e32f195-168a-474f-a273-12312312312",
            "contentType": "reference",
            "contentUrl": "https://test.sharepoint.com/sites/TestSite/Shared%20Documents/General/Test.txt",
            "content": null,
            "name": "Test.txt",
            "thumbnailUrl": null
        }]);
        msg["replyToId"] = json!("1616964500000");
        let m = to_message(&msg, "19:x", "group", &me()).unwrap();
        assert_eq!(
            m.content,
            "Hello World @Jane Smith\nsee below\n[attachment: Test.txt]"
        );
        assert_eq!(m.metadata.get("mentions_me"), Some("true"));
        assert_eq!(m.metadata.get("reply_to_id"), Some("1616964500000"));
        assert_eq!(m.channel, "teams/group");
    }

    #[test]
    fn own_system_and_deleted_messages_are_skipped() {
        let mut own = hello_world();
        own["from"]["user"]["id"] = json!(me().id);
        assert_eq!(to_message(&own, "c", "oneOnOne", &me()), Err(Skip::Own));
        // The third message of `chat-list-messages`' example: a chat renamed.
        let system = json!({
            "id": "1615943825123",
            "messageType": "unknownFutureValue",
            "createdDateTime": "2021-03-1706:47:05.123Z",
            "deletedDateTime": null,
            "chatId": "19:2da4c29f6d7041eca70b638b43d45437@thread.v2",
            "from": null,
            "body": {"contentType": "html", "content": "<systemEventMessage/>"},
            "eventDetail": {"@odata.type": "#microsoft.graph.chatRenamedEventMessageDetail", "chatDisplayName": "Graph Members"}
        });
        assert_eq!(to_message(&system, "c", "group", &me()), Err(Skip::System));
        let mut event = system.clone();
        event["messageType"] = json!("systemEventMessage");
        assert_eq!(to_message(&event, "c", "group", &me()), Err(Skip::System));
        let mut deleted = hello_world();
        deleted["deletedDateTime"] = json!("2021-03-28T21:00:00Z");
        assert_eq!(
            to_message(&deleted, "c", "oneOnOne", &me()),
            Err(Skip::Deleted)
        );
        assert_eq!(
            to_message(&json!({}), "c", "oneOnOne", &me()),
            Err(Skip::Shape)
        );
    }

    #[test]
    fn a_bot_is_a_sender_by_its_application_name() {
        // The bot's preview in `chat-list`'s `$expand=lastMessagePreview` example.
        let mut msg = hello_world();
        msg["from"] = json!({"device": null, "user": null, "application": {
            "id": "da7d471b-de7d-4152-8556-1cdf7a564f6c", "displayName": "talla", "applicationIdentityType": "bot"}});
        let m = to_message(&msg, "c", "oneOnOne", &me()).unwrap();
        assert_eq!(m.metadata.get("sender"), Some("talla"));
        assert_eq!(
            m.metadata.get("sender_id"),
            Some("da7d471b-de7d-4152-8556-1cdf7a564f6c")
        );
    }

    #[test]
    fn a_notification_resource_names_its_chat_and_message() {
        // The chat message notification of `teams-changenotifications-chatmessage`.
        assert_eq!(
            notified("chats('19:8ea0e38b-efb3-4757-924a-5f94061cf8c2_97f62344-57dc-409c-88ad-c4af14158ff5@unq.gbl.spaces')/messages('1612289765949')"),
            Some((
                "19:8ea0e38b-efb3-4757-924a-5f94061cf8c2_97f62344-57dc-409c-88ad-c4af14158ff5@unq.gbl.spaces".into(),
                "1612289765949".into()
            ))
        );
        assert_eq!(
            notified("chats/19:a@thread.v2/messages/1"),
            Some(("19:a@thread.v2".into(), "1".into()))
        );
        assert_eq!(notified("teams('x')/channels('y')/messages('1')"), None);
        assert_eq!(notified("chats('x')/messages("), None);
    }

    #[test]
    fn me_from_the_user_object() {
        let me =
            Me::from_user(&json!({"id": "u1", "displayName": "Ada", "userPrincipalName": "ada@x"}))
                .unwrap();
        assert_eq!((me.id.as_str(), me.name.as_str()), ("u1", "Ada"));
        assert_eq!(Me::from_user(&json!({})), None);
    }
}
