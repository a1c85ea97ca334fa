//! `push_by`: whether this session is the one to push a piece of queued work to its host.
//!
//! Every session's push task sees every queued item, but work runs once: only the first
//! session to ask while the work is queued pushes it (as `notifications/claude/channel`), and
//! none does once a wait took it. Nudges and confirm requests go to every session and never ask.

use serde::{Deserialize, Serialize};

use crate::actions::ActionId;
use crate::control::{ApiError, Ctx, Op};

/// Asks to push queued work.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PushBy {
    /// The session that would push it.
    pub session: u64,
    /// The work's action id.
    pub id: ActionId,
}

impl Op for PushBy {
    type Reply = bool;

    async fn apply(self, cx: &Ctx<'_>) -> Result<bool, ApiError> {
        let session = cx.session(self.session)?;
        Ok(cx.lifecycle().push_by(self.id, session))
    }
}
