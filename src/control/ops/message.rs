//! `message`: `channel_run` — one stored message by seq, from the ring or the journal.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};
use crate::message::{Message, Seq};

/// One stored message.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GetMessage {
    /// Its seq.
    pub seq: Seq,
}

/// A stored message, or the newest seq when there is none.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MessageReply {
    /// The message.
    pub message: Option<Message>,
    /// The newest seq.
    pub last_seq: Seq,
}

impl Op for GetMessage {
    type Reply = MessageReply;

    async fn apply(self, cx: &Ctx<'_>) -> Result<MessageReply, ApiError> {
        let inbox = cx.inbox();
        // From the ring, or the journal behind it.
        let found = match inbox.get(self.seq) {
            Some(m) => Some(m),
            None => inbox
                .read_after(self.seq.saturating_sub(1), 1)
                .await
                .into_iter()
                .find(|m| m.seq == self.seq),
        };
        Ok(MessageReply {
            message: found.map(|m| (*m).clone()),
            last_seq: inbox.last_seq(),
        })
    }
}
