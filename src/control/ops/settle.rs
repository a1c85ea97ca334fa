//! `settle`: what became of the work a result carried — delivered once its client had the
//! result, else released to the front of the queue for the next session; marked `redelivered`
//! when the result may have reached the client (it left, and was not acknowledged).

use serde::{Deserialize, Serialize};

use crate::actions::ActionId;
use crate::control::{ApiError, Ctx, Op};

/// Settles claims.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Settle {
    /// The action ids.
    pub claims: Vec<ActionId>,
    /// Sent (true) or released.
    pub delivered: bool,
    /// Why released.
    pub why: String,
    /// Released work whose result left and may have reached the client: handed out again, it
    /// is marked `redelivered`. (Absent from a front end older than the field: false.)
    #[serde(default)]
    pub maybe_seen: bool,
}

impl Op for Settle {
    type Reply = ();
    const ORDERED: bool = true;

    async fn apply(self, cx: &Ctx<'_>) -> Result<(), ApiError> {
        cx.lifecycle()
            .settle(&self.claims, self.delivered, self.maybe_seen, &self.why);
        Ok(())
    }
}
