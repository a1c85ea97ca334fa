//! `closed`: `switchboard pending --closed` — how the recently closed confirms ended
//! (approved or denied, via which path and by whom; expired; resolved by which message).

use serde::{Deserialize, Serialize};

use crate::actions::lifecycle::ClosedConfirm;
use crate::control::{ApiError, Ctx, Op};

/// The last confirms closed, oldest first.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Closed {
    /// How many, at most.
    pub limit: usize,
}

impl Op for Closed {
    type Reply = Vec<ClosedConfirm>;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Vec<ClosedConfirm>, ApiError> {
        Ok(cx.lifecycle().closed_confirms(self.limit))
    }
}
