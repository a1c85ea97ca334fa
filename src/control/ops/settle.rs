//! `settle`: what became of the work a result carried — delivered once the result was sent,
//! else released to the front of the queue for the next session.

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
}

impl Op for Settle {
    type Reply = ();
    const ORDERED: bool = true;

    async fn apply(self, cx: &Ctx<'_>) -> Result<(), ApiError> {
        cx.lifecycle()
            .settle(&self.claims, self.delivered, &self.why);
        Ok(())
    }
}
