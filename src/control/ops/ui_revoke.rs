//! `ui_revoke`: `switchboard ui --revoke` — ends every session of the approval page and
//! forgets every link not opened yet, so that a browser left signed in (or a link sent to the
//! wrong person) answers nothing more.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};

/// Revoke the approval page's sessions and links.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct UiRevoke {}

/// What was revoked.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct UiRevokeReply {
    /// Browser sessions ended.
    pub sessions: usize,
    /// Links not opened yet, forgotten.
    pub links: usize,
}

impl Op for UiRevoke {
    type Reply = UiRevokeReply;

    async fn apply(self, cx: &Ctx<'_>) -> Result<UiRevokeReply, ApiError> {
        let Some(web) = cx.parts().web_links() else {
            return Ok(UiRevokeReply::default());
        };
        let (sessions, links) = web.revoke();
        tracing::info!(sessions, links, "approval page sessions and links revoked");
        Ok(UiRevokeReply { sessions, links })
    }
}
