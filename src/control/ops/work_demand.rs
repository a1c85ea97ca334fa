//! `work_demand`: returns once a session of this instance waits for work it does not have
//! (the shared queue's component then pulls one item); false once cancelled. The daemon's
//! own call: never served over the socket.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};

/// Waits for a session that waits for work.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkDemand {}

impl Op for WorkDemand {
    type Reply = bool;
    const REMOTE: bool = false;

    fn deadline(&self) -> std::time::Duration {
        std::time::Duration::MAX
    }

    async fn apply(self, cx: &Ctx<'_>) -> Result<bool, ApiError> {
        Ok(cx.lifecycle().work_demand(&cx.cancel).await)
    }
}
