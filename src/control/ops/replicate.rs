//! `replicate`: a shared stream's consumer stores what it delivers in this instance's inbox —
//! what fits of a batch, in stream order, like `append_each`, but never relayed back to the
//! stream (it came from there). The daemon's own call: never served over the socket.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::append_each::EachAppended;
use crate::control::{ApiError, Ctx, Op, StoreError};
use crate::duration::Backoff;
use crate::inbox::InboxError;
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

    /// Never relayed: it came from the stream. Answers once what it stored is durable: a
    /// journal that cannot write keeps the messages in the inbox (shown to readers) and
    /// retries them itself, so the caller must not send them again — a message without an id
    /// would be stored once more each time — and must not acknowledge them to the stream
    /// before they are on disk. So the wait for the disk is here, until shutdown.
    async fn apply(self, cx: &Ctx<'_>) -> Result<EachAppended, ApiError> {
        let (fit, refused) = super::append_each::split(cx, self.messages);
        if fit.is_empty() {
            return Ok(EachAppended {
                appended: Vec::new(),
                refused,
            });
        }
        let appended = match cx.core().append(fit, &self.source).await {
            Ok(appended) => appended,
            Err(InboxError::NotDurable { appended, .. }) => {
                let need = appended.iter().map(|a| a.seq).max().unwrap_or(0);
                let shutdown = cx.core().shutdown();
                let mut wait = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
                while cx.inbox().durable() < need {
                    if !wait.sleep(shutdown).await {
                        return Err(ApiError::Store(StoreError::Closed));
                    }
                }
                appended
            }
            Err(e) => return Err(e.into()),
        };
        Ok(EachAppended { appended, refused })
    }
}
