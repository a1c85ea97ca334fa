//! `confirm`: `channel_confirm` and `switchboard confirm ID yes|no` — a person's answer.
//!
//! Yes returns the approved item: claimed by the answering session when it names one (the
//! tool runs it now), else queued as approved work for the next session (the CLI). The answer
//! is on disk before the reply. Unknown, expired or already-answered ids are refusals that say
//! which.

use serde::{Deserialize, Serialize};

use crate::actions::{ActionId, Item};
use crate::control::{ApiError, Ctx, Op};

/// Answers a confirm.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Confirm {
    /// The action id.
    pub id: ActionId,
    /// Yes or no.
    pub approve: bool,
    /// Who answers (the consumer, or `cli`).
    pub by: String,
    /// The session that gets the approved work as its claim; none = queued for any session.
    #[serde(default)]
    pub claim_for: Option<u64>,
}

impl Op for Confirm {
    /// The approved item; `None` when denied.
    type Reply = Option<Item>;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Option<Item>, ApiError> {
        let claim_for = match self.claim_for {
            Some(handle) => Some(cx.session(handle)?),
            None => None,
        };
        cx.local
            .core()
            .confirm(self.id, self.approve, &self.by, claim_for)
            .await
            .map_err(ApiError::refused)
    }
}
