//! `pull`: `inbox_pull` — messages after a consumer's cursor (or a seq), oldest first.

use serde::{Deserialize, Serialize};

use crate::app::Read;
use crate::control::{ApiError, Ctx, Op};
use crate::message::Seq;

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

impl Op for Pull {
    type Reply = Read;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Read, ApiError> {
        Ok(cx
            .local
            .core()
            .pull(
                &self.consumer,
                self.since_seq,
                self.limit,
                self.channel.as_deref(),
                self.mark_read,
            )
            .await)
    }
}
