//! `work_held`: where taken-in work is now (`queued`, `claimed`, or `gone`: delivered), for
//! the shared queue's component when it may have missed the lifecycle's events. The daemon's
//! own call: never served over the socket.

use serde::{Deserialize, Serialize};

use crate::actions::ActionId;
use crate::actions::lifecycle::Held;
use crate::control::{ApiError, Ctx, Op};

/// Where taken-in work is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkHeld {
    /// The local action id.
    pub id: ActionId,
}

impl Op for WorkHeld {
    type Reply = Held;
    const REMOTE: bool = false;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Held, ApiError> {
        Ok(cx.lifecycle().held(self.id))
    }
}
