//! `work_shared`: work taken with `work_out` is in the shared queue (published, or already
//! there: another instance made the same work); it is recorded as `shared`. The daemon's own
//! call: never served over the socket.

use serde::{Deserialize, Serialize};

use crate::actions::ActionId;
use crate::control::{ApiError, Ctx, Op};

/// Records that work left for the shared queue.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkShared {
    /// The action id.
    pub id: ActionId,
    /// How it left, for the record.
    pub reason: String,
}

impl Op for WorkShared {
    type Reply = ();
    const REMOTE: bool = false;

    async fn apply(self, cx: &Ctx<'_>) -> Result<(), ApiError> {
        cx.lifecycle().shared(self.id, &self.reason);
        Ok(())
    }
}
