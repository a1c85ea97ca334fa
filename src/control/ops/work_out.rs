//! `work_out`: the shared queue's component takes the next piece of work to publish (work
//! that must run once across instances); it waits until there is some, or the call is
//! cancelled. The daemon's own call: never served over the socket.

use serde::{Deserialize, Serialize};

use crate::actions::Item;
use crate::control::{ApiError, Ctx, Op};

/// Takes work to publish to the shared queue.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkOut {}

impl Op for WorkOut {
    /// The work, still `queued` until `work_shared`; `None` once cancelled.
    type Reply = Option<Item>;
    const REMOTE: bool = false;

    fn deadline(&self) -> std::time::Duration {
        std::time::Duration::MAX
    }

    async fn apply(self, cx: &Ctx<'_>) -> Result<Option<Item>, ApiError> {
        Ok(cx.lifecycle().next_shared(&cx.cancel).await)
    }
}
