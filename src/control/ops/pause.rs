//! `pause`: `channel_pause`/`channel_resume` and `switchboard pause|resume` — rule evaluation
//! stops or restarts (persisted); messages keep landing either way.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};

/// Pauses or resumes evaluation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Pause {
    /// true = pause.
    pub paused: bool,
}

/// Whether evaluation is paused now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Paused {
    /// Whether evaluation is paused now.
    pub paused: bool,
}

impl Op for Pause {
    type Reply = Paused;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Paused, ApiError> {
        cx.core().set_paused(self.paused);
        Ok(Paused {
            paused: self.paused,
        })
    }
}
