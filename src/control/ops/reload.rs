//! `reload`: `rules_reload`, `switchboard rules reload` — triggers.json read again. An invalid
//! or missing file keeps the live rules; the report says why (it is the reply either way:
//! `ok: false` is not a failed call).

use serde::{Deserialize, Serialize};

use crate::app::ReloadReport;
use crate::control::{ApiError, Ctx, Op};

/// Reloads triggers.json.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Reload {}

impl Op for Reload {
    type Reply = ReloadReport;

    async fn apply(self, cx: &Ctx<'_>) -> Result<ReloadReport, ApiError> {
        Ok(cx.core().reload_rules().await)
    }
}
