//! `elicit`: whether a session puts a pending confirm to its user in an MCP elicitation form,
//! and that it stopped.
//!
//! A confirm is asked of one session at a time: the first session to ask gets it until its
//! form ends (answered, declined, cancelled, dropped) or the session ends; the others do not
//! show it in a form meanwhile. A rule whose `approveVia` leaves out `elicitation` is never
//! put in a form.

use serde::{Deserialize, Serialize};

use crate::actions::ActionId;
use crate::control::{ApiError, Ctx, Op};

/// Asks to show a confirm in a form (`ask`), or says the form ended (`!ask`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Elicit {
    /// The session whose user would be asked.
    pub session: u64,
    /// The confirm's action id.
    pub id: ActionId,
    /// True to ask, false when the form ended.
    pub ask: bool,
}

impl Op for Elicit {
    /// Whether the session may show the form (always true when `ask` is false).
    type Reply = bool;

    async fn apply(self, cx: &Ctx<'_>) -> Result<bool, ApiError> {
        let session = cx.session(self.session)?;
        Ok(cx.lifecycle().elicit(self.id, session, self.ask))
    }
}
