//! `exec_next`: the exec runner takes the next `"delivery": "exec"` work and marks it
//! `running`; it waits until there is some, or the call is cancelled. The daemon's own call:
//! never served over the socket.

use serde::{Deserialize, Serialize};

use crate::actions::Item;
use crate::control::{ApiError, Ctx, Op};

/// The exec runner takes work.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ExecNext {}

impl Op for ExecNext {
    /// The work, now `running`; `None` once cancelled.
    type Reply = Option<Item>;
    const REMOTE: bool = false;

    fn deadline(&self) -> std::time::Duration {
        std::time::Duration::MAX
    }

    async fn apply(self, cx: &Ctx<'_>) -> Result<Option<Item>, ApiError> {
        Ok(cx.lifecycle().next_exec(&cx.cancel, |_| {}).await)
    }
}
