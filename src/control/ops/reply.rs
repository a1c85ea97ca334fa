//! `reply`: `channel_reply`, `switchboard reply` — answer a stored message in the conversation it
//! came from, through the [`Replier`](crate::control::Replier) its source registered.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::GetMessage;
use crate::control::{ApiError, Ctx, Op, RefusalCode};
use crate::message::{Message, Seq};

/// The chat sources switchboard can answer when they are configured; named in the refusal of a
/// message from any other source.
pub const CHAT_SOURCES: &[&str] = &["teams", "slack"];

/// How long a remote caller waits for the source's service: its own retries (a throttled
/// request waits for `Retry-After`) end well before.
pub const REPLY_DEADLINE: Duration = Duration::from_secs(90);

/// The longest answer taken, in bytes (Teams refuses messages over about 28 KB).
pub const MAX_TEXT: usize = 28 * 1024;

/// Answer message `seq` with `text`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    /// The message answered.
    pub seq: Seq,
    /// The answer, as plain text.
    pub text: String,
}

/// What a source sent: the id its service gave the new message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    /// The sent message's id (a Graph chat message id, a Slack `ts`).
    pub id: String,
}

/// The answer, sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replied {
    /// The message answered.
    pub seq: Seq,
    /// Its source.
    pub server: String,
    /// Its channel.
    pub channel: String,
    /// The sent message's id in the source's service.
    pub id: String,
}

impl Op for Reply {
    type Reply = Replied;

    fn deadline(&self) -> Duration {
        REPLY_DEADLINE
    }

    async fn apply(self, cx: &Ctx<'_>) -> Result<Replied, ApiError> {
        let invalid = |why: String| ApiError::refused(RefusalCode::Invalid, why);
        if self.text.trim().is_empty() {
            return Err(invalid(format!(
                "reply to message {}: `text` is empty; nothing was sent",
                self.seq
            )));
        }
        if self.text.len() > MAX_TEXT {
            return Err(invalid(format!(
                "reply to message {}: `text` is {} bytes, over the {MAX_TEXT}-byte limit; nothing was sent",
                self.seq,
                self.text.len()
            )));
        }
        let found = GetMessage { seq: self.seq }.apply(cx).await?;
        let Some(message) = found.message else {
            return Err(ApiError::refused(
                RefusalCode::NotFound,
                format!(
                    "no message with seq {}; the inbox holds seqs up to {}",
                    self.seq, found.last_seq
                ),
            ));
        };
        let Some(replier) = cx.parts().replier_of(&message.server) else {
            return Err(invalid(cannot_answer(&message, &cx.parts().answerable())));
        };
        let sent = replier.reply(&message, &self.text).await?;
        tracing::info!(seq = message.seq, server = %message.server, sent = %sent.id, "reply sent");
        Ok(Replied {
            seq: message.seq,
            server: message.server,
            channel: message.channel,
            id: sent.id,
        })
    }
}

/// Why `message` cannot be answered: its source is not a chat source, or is one this daemon does
/// not run; `answerable` are the servers it can answer now.
pub fn cannot_answer(message: &Message, answerable: &[&str]) -> String {
    let (seq, server) = (message.seq, message.server.as_str());
    if CHAT_SOURCES.contains(&server) {
        return format!(
            "message {seq} came from `{server}`, which this daemon does not run; add a \
             `{server}` section to switchboard.json and restart the daemon"
        );
    }
    let can = if answerable.is_empty() {
        CHAT_SOURCES.join(" and ")
    } else {
        answerable.join(" and ")
    };
    format!(
        "message {seq} came from `{server}`, which cannot be answered; `channel_reply` answers \
         {can} messages"
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::control::local::BoxFuture;
    use crate::control::ops::Append;
    use crate::control::{FrontendSettings, Local, Parts, PushPolicy, Replier};
    use crate::message::NewMessage;

    /// Answers with the chat and the text it was given, as the sent id.
    struct Echo;

    impl Replier for Echo {
        fn reply<'a>(
            &'a self,
            message: &'a Message,
            text: &'a str,
        ) -> BoxFuture<'a, Result<Sent, ApiError>> {
            Box::pin(async move {
                let chat = message.metadata.get("chat_id").unwrap_or("?");
                Ok(Sent {
                    id: format!("{chat}:{text}"),
                })
            })
        }
    }

    #[tokio::test]
    async fn a_reply_goes_to_the_replier_of_the_message_source_and_nowhere_else() {
        let core = crate::app::Core::memory(
            crate::daemon::core_settings(&crate::config::Config::default()),
            crate::rules::RuleSet::builtin(),
        );
        let parts = Parts::new(FrontendSettings {
            max_wait_s: 1,
            claude_channel: PushPolicy::Auto,
            elicitation: false,
            permission_relay: false,
            delivery_grace_ms: 2000,
            events_heartbeat_ms: crate::control::wire::events_heartbeat_ms(),
        })
        .replier("teams", Arc::new(Echo));
        let local = Local::new(core, parts);
        let mut dm = NewMessage::new("teams", "teams/dm", "lunch?");
        dm.metadata.insert("chat_id", "19:ada");
        let alert = NewMessage::new("alertmanager", "alerts/critical", "disk full");
        let seqs: Vec<Seq> = local
            .call(Append {
                messages: vec![dm, alert],
                source: "test".into(),
            })
            .await
            .unwrap()
            .iter()
            .map(|a| a.seq)
            .collect();
        let reply = |seq: Seq, text: &str| {
            local.call(Reply {
                seq,
                text: text.into(),
            })
        };
        let sent = reply(seqs[0], "yes, at noon").await.unwrap();
        assert_eq!(sent.id, "19:ada:yes, at noon");
        assert_eq!((sent.server.as_str(), sent.channel.as_str()), ("teams", "teams/dm"));
        let refused = reply(seqs[1], "ack").await.unwrap_err().to_string();
        assert!(
            refused.contains("came from `alertmanager`, which cannot be answered"),
            "{refused}"
        );
        let empty = reply(seqs[0], "  ").await.unwrap_err().to_string();
        assert!(empty.contains("`text` is empty"), "{empty}");
        let gone = reply(99, "hello").await.unwrap_err().to_string();
        assert!(gone.contains("no message with seq 99"), "{gone}");
    }

    fn from(server: &str) -> Message {
        let new = crate::message::NewMessage::new(server, "alerts/critical", "disk full");
        Message::from_new(new, 42, chrono::Utc::now())
    }

    #[test]
    fn a_message_that_cannot_be_answered_names_its_source_and_what_can_be() {
        assert_eq!(
            cannot_answer(&from("alertmanager"), &["teams"]),
            "message 42 came from `alertmanager`, which cannot be answered; `channel_reply` \
             answers teams messages"
        );
        assert_eq!(
            cannot_answer(&from("github"), &[]),
            "message 42 came from `github`, which cannot be answered; `channel_reply` answers \
             teams and slack messages"
        );
        assert!(
            cannot_answer(&from("teams"), &[]).contains("which this daemon does not run"),
            "a chat source that is not configured says how to configure it"
        );
    }
}
