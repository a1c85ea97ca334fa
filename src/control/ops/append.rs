//! `append`: every source's way in (HTTP ingest, upstream servers, `switchboard send`) —
//! messages appended in order, all or nothing, durable under the fsync policy before the reply.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};
use crate::inbox::Appended;
use crate::message::NewMessage;

/// Appends messages.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Append {
    /// The messages, in order.
    pub messages: Vec<NewMessage>,
    /// Counted as from this source (`alertmanager`, `github`, `http`, `cli`, an upstream name).
    pub source: String,
}

impl Op for Append {
    /// The seq of each message (a duplicate: its original's).
    type Reply = Vec<Appended>;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Vec<Appended>, ApiError> {
        Ok(cx
            .local
            .core()
            .append(self.messages, &self.source)
            .await?)
    }
}
