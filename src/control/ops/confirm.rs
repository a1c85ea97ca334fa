//! `confirm`: `channel_confirm` and `switchboard confirm ID yes|no` — a person's answer.
//!
//! Yes returns the approved item: claimed by the answering session when it names one (the
//! tool runs it now), else queued as approved work for the next session (the CLI, the page,
//! a form). The answer is on disk before the reply, with the path it came by (`via`). Unknown,
//! expired or already-answered ids, and a path the rule's `approveVia` does not list, are
//! refusals that say which. An answer the actions journal cannot take is refused as
//! [`ApiError::NotRecorded`] (code `not_recorded`): nothing changed, the confirm stays pending.

use serde::{Deserialize, Serialize};

use crate::actions::{ActionId, ConfirmError, Item, Via};
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
    /// The path the answer came by. Absent (a front end older than the field): `tool` when
    /// it claims for a session, else `cli`.
    #[serde(default)]
    pub via: Option<Via>,
}

impl Op for Confirm {
    /// The approved item; `None` when denied.
    type Reply = Option<Item>;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Option<Item>, ApiError> {
        let claim_for = match self.claim_for {
            Some(handle) => Some(cx.session(handle)?),
            None => None,
        };
        let via = self.via.unwrap_or(if claim_for.is_some() {
            Via::Tool
        } else {
            Via::Cli
        });
        cx.local
            .core()
            .confirm(self.id, self.approve, &self.by, via, claim_for)
            .await
            .map_err(|e| match e {
                ConfirmError::NotRecorded { .. } => ApiError::NotRecorded {
                    message: e.to_string(),
                },
                e => ApiError::refused(e),
            })
    }
}
