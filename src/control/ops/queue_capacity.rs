//! `queue_capacity`: a `switchboard.json` change of `actions.queueCapacity`, applied live.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};

/// Changes each action queue's capacity.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QueueCapacity {
    /// The new capacity.
    pub capacity: usize,
}

impl Op for QueueCapacity {
    /// Whether it differed.
    type Reply = bool;

    async fn apply(self, cx: &Ctx<'_>) -> Result<bool, ApiError> {
        let lifecycle = cx.lifecycle();
        if lifecycle.capacity() == self.capacity {
            return Ok(false);
        }
        lifecycle.set_capacity(self.capacity);
        Ok(true)
    }
}
