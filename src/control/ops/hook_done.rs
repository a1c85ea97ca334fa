//! `hook_done`: a stop hook wrote its decision (the work it claimed is delivered) or could not
//! (released to the front of the queue); either way its session ends.

use serde::{Deserialize, Serialize};

use crate::actions::ActionId;
use crate::control::{ApiError, Ctx, Op};

/// Settles a stop hook's claim and ends its session.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HookDone {
    /// The host (for the counters).
    pub host: String,
    /// The session holding the claim (as `hook_stop` gave it).
    pub session: u64,
    /// The claimed action.
    pub action_id: ActionId,
    /// The decision was written (true), or not.
    pub delivered: bool,
}

impl Op for HookDone {
    type Reply = ();
    const ORDERED: bool = true;

    async fn apply(self, cx: &Ctx<'_>) -> Result<(), ApiError> {
        cx.session(self.session)?;
        cx.lifecycle().settle(
            &[self.action_id],
            self.delivered,
            false,
            "the stop hook could not hand it to the agent",
        );
        cx.duty().count(
            &self.host,
            if self.delivered { "delivered" } else { "released" },
        );
        super::Close {
            session: self.session,
        }
        .apply(cx)
        .await?;
        Ok(())
    }
}
