//! `pending`: `switchboard pending` — the open confirm requests, oldest first.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op, PendingView};

/// Open confirm requests.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Pending {}

impl Op for Pending {
    type Reply = Vec<PendingView>;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Vec<PendingView>, ApiError> {
        Ok(cx.lifecycle().pending_confirms().iter().map(PendingView::of).collect())
    }
}
