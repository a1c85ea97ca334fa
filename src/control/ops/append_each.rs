//! `append_each`: the upstream servers' way in — what fits of a batch is appended, in order; a
//! message over the inbox's limits is refused alone, so that one oversized notification does
//! not cost the valid ones sent with it. (HTTP ingest keeps `append`'s all or nothing: its
//! sender hears the refusal and can resend.)

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};
use crate::inbox::Appended;
use crate::message::NewMessage;

/// Appends what fits of a batch.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AppendEach {
    /// The messages, in order.
    pub messages: Vec<NewMessage>,
    /// Counted as from this source.
    pub source: String,
}

/// A message of the batch that was not stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    /// Its position in the batch.
    pub index: usize,
    /// Which limit, for people.
    pub reason: String,
}

/// What became of a batch.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EachAppended {
    /// The stored ones, in order.
    pub appended: Vec<Appended>,
    /// The refused ones.
    pub refused: Vec<Refused>,
}

impl Op for AppendEach {
    type Reply = EachAppended;

    async fn apply(self, cx: &Ctx<'_>) -> Result<EachAppended, ApiError> {
        let relay = cx.parts().shared_stream().cloned();
        each(cx, self.messages, &self.source, relay).await
    }
}

/// `messages` split into those within the inbox's limits and, by position, the refused.
pub(super) fn split(cx: &Ctx<'_>, messages: Vec<NewMessage>) -> (Vec<NewMessage>, Vec<Refused>) {
    let (fit, refused) = cx.inbox().split_by_limits(messages);
    let refused = refused
        .into_iter()
        .map(|(index, reason)| Refused { index, reason })
        .collect();
    (fit, refused)
}

/// Stores what fits of `messages`, in order, through `relay` when there is one (a shared
/// stream), else in the local inbox.
pub(super) async fn each(
    cx: &Ctx<'_>,
    messages: Vec<NewMessage>,
    source: &str,
    relay: Option<std::sync::Arc<dyn crate::control::Relay>>,
) -> Result<EachAppended, ApiError> {
    let (fit, refused) = split(cx, messages);
    let appended = if fit.is_empty() {
        Vec::new()
    } else if let Some(relay) = relay {
        relay.append(fit, source).await?
    } else {
        cx.core().append(fit, source).await?
    };
    Ok(EachAppended { appended, refused })
}
