//! `exec_finish`: the exec runner reports how a run ended (`succeeded`, `failed`,
//! `cancelled`, with its report). The daemon's own call: never served over the socket.

use serde::{Deserialize, Serialize};

use crate::actions::{ActionId, ActionState, ExecReport};
use crate::control::{ApiError, Ctx, Op};

/// The exec runner reports a run's end.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExecFinish {
    /// The action.
    pub id: ActionId,
    /// `succeeded`, `failed` or `cancelled`.
    pub state: ActionState,
    /// Why it failed or was cancelled.
    pub reason: Option<String>,
    /// Kind, duration, tool calls, usage.
    pub report: ExecReport,
}

impl Op for ExecFinish {
    type Reply = ();
    const REMOTE: bool = false;

    async fn apply(self, cx: &Ctx<'_>) -> Result<(), ApiError> {
        cx.lifecycle()
            .finish_exec(self.id, self.state, self.reason, self.report);
        Ok(())
    }
}
