//! `list`: `channel_list` and `switchboard list` — the newest messages, newest last.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};
use crate::message::{Message, Seq};

/// The newest messages.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct List {
    /// Only this channel (`alerts/*` = the prefix and below).
    #[serde(default)]
    pub channel: Option<String>,
    /// How many.
    pub limit: usize,
}

/// The newest messages.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ListReply {
    /// Newest last.
    pub messages: Vec<Message>,
    /// The newest seq.
    pub last_seq: Seq,
}

impl Op for List {
    type Reply = ListReply;

    async fn apply(self, cx: &Ctx<'_>) -> Result<ListReply, ApiError> {
        let inbox = cx.inbox();
        let messages = inbox.recent(self.channel.as_deref(), self.limit.clamp(1, 1000));
        Ok(ListReply {
            messages: messages.iter().map(|m| (**m).clone()).collect(),
            last_seq: inbox.last_seq(),
        })
    }
}
