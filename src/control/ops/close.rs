//! `close`: a session ends; the work it claimed and did not settle goes back to the queue.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};

/// Closes a session.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Close {
    /// Its handle.
    pub session: u64,
}

impl Op for Close {
    type Reply = ();
    const ORDERED: bool = true;

    async fn apply(self, cx: &Ctx<'_>) -> Result<(), ApiError> {
        let id = match cx.sessions {
            Some(sessions) => match sessions.remove(self.session) {
                Some(id) => id,
                None => return Ok(()),
            },
            None => self.session,
        };
        end(cx, id);
        Ok(())
    }
}

/// Ends the core's session `id`: its claims go back to the queue, its own consumer (and that
/// consumer's cursor) is forgotten.
pub(super) fn end(cx: &Ctx<'_>, id: u64) {
    if let Some(own) = cx.lifecycle().close_session(id, chrono::Utc::now()) {
        cx.state().remove_cursor(&own);
    }
}
