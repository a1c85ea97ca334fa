//! `append`: every source's way in (HTTP ingest, upstream servers, `switchboard send`) —
//! messages appended in order, all or nothing, durable under the fsync policy before the reply.
//! With a shared stream (the daemon's [`crate::control::Relay`]) they go to the stream instead,
//! within the inbox's limits, and the reply waits for the stream's acknowledgement.

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
        if let Some(relay) = cx.parts().shared_stream() {
            cx.inbox().check_limits(&self.messages)?;
            return relay.append(self.messages, &self.source).await;
        }
        Ok(cx.core().append(self.messages, &self.source).await?)
    }
}
