//! `pull`: `inbox_pull` — messages after a consumer's cursor (or a seq), oldest first.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};
use crate::message::{Message, Seq};

/// Messages after a cursor.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Pull {
    /// The consumer whose cursor is read and moved.
    pub consumer: String,
    /// After this seq instead of the cursor.
    #[serde(default)]
    pub since_seq: Option<Seq>,
    /// The most messages.
    pub limit: usize,
    /// Only this channel (`alerts/*` = the prefix and below).
    #[serde(default)]
    pub channel: Option<String>,
    /// Move the cursor past what is returned.
    pub mark_read: bool,
}

/// Messages read for a consumer, with its position after the read.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Read {
    /// Oldest first.
    pub messages: Vec<Message>,
    /// The consumer's cursor after the read.
    pub cursor: Seq,
    /// Messages after the cursor.
    pub unread: u64,
    /// The newest committed seq.
    pub last_seq: Seq,
}

impl Op for Pull {
    type Reply = Read;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Read, ApiError> {
        let (state, inbox) = (cx.state(), cx.inbox());
        let consumer = &self.consumer;
        let after = self
            .since_seq
            .unwrap_or_else(|| state.cursor_or_boot(consumer));
        let limit = self.limit.clamp(1, 1000);
        let out = inbox
            .read_after_matching(after, limit, self.channel.as_deref())
            .await;
        if self.mark_read
            && let Some(last) = out.last()
        {
            state.set_cursor(consumer, last.seq);
        }
        let last_seq = inbox.last_seq();
        Ok(Read {
            messages: out.iter().map(|m| (**m).clone()).collect(),
            cursor: state.cursor_or_boot(consumer),
            unread: state.unread(consumer, last_seq),
            last_seq,
        })
    }
}
