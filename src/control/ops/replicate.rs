//! `replicate`: a shared stream's consumer stores what it delivers in this instance's inbox —
//! what fits of a batch, in stream order, like `append_each`, but never relayed back to the
//! stream (it came from there). The daemon's own call: never served over the socket.

use serde::{Deserialize, Serialize};

use super::append_each::EachAppended;
use crate::control::{ApiError, Ctx, Op};
use crate::message::NewMessage;

/// Stores messages delivered by a shared stream.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Replicate {
    /// The messages, in stream order.
    pub messages: Vec<NewMessage>,
    /// Counted as from this source.
    pub source: String,
}

impl Op for Replicate {
    type Reply = EachAppended;
    const REMOTE: bool = false;

    async fn apply(self, cx: &Ctx<'_>) -> Result<EachAppended, ApiError> {
        // Never relayed: it came from the stream.
        super::append_each::each(cx, self.messages, &self.source, None).await
    }
}
