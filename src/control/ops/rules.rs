//! `rules`: `rules_list`, `switchboard rules list` — the live rules, one summary each.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};

/// The live rules.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Rules {}

impl Op for Rules {
    /// One summary per rule, as written in triggers.json with its defaults filled in.
    type Reply = Vec<serde_json::Value>;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Vec<serde_json::Value>, ApiError> {
        Ok(crate::rules::summaries(&cx.core().rules()))
    }
}
