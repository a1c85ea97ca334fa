//! `pending`: `switchboard pending` — the open confirm requests, oldest first.
//!
//! The answer counts every message stored before it was asked: it waits (a moment at most)
//! until the rules have run over them, so that `switchboard send …; switchboard pending`,
//! pasted as one, shows the confirm the send made.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op, PendingView};

/// The longest `pending` waits for the rules to catch up with the messages already stored.
const CATCH_UP: Duration = Duration::from_secs(2);

/// Open confirm requests.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Pending {}

impl Op for Pending {
    type Reply = Vec<PendingView>;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Vec<PendingView>, ApiError> {
        let stored = cx.inbox().last_seq();
        let mut evaluated = cx.lifecycle().evaluated();
        // Past the deadline (an actions journal that cannot be written holds the mark back)
        // the confirms open now are the answer.
        let _ = tokio::time::timeout(CATCH_UP, evaluated.wait_for(|seq| *seq >= stored)).await;
        Ok(cx.lifecycle().pending_confirms().iter().map(PendingView::of).collect())
    }
}
