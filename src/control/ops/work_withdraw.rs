//! `work_withdraw`: takes back taken-in work no session claimed, to give it back to the
//! shared queue; says where the work was (`queued`: taken back now; `claimed`; `gone`:
//! delivered). The daemon's own call: never served over the socket.

use serde::{Deserialize, Serialize};

use crate::actions::ActionId;
use crate::actions::lifecycle::Held;
use crate::control::{ApiError, Ctx, Op};

/// Takes back unclaimed taken-in work.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkWithdraw {
    /// The local action id.
    pub id: ActionId,
}

impl Op for WorkWithdraw {
    type Reply = Held;
    const REMOTE: bool = false;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Held, ApiError> {
        Ok(cx.lifecycle().withdraw(self.id))
    }
}
