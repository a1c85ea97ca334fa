//! `relay_permission`: a session's host asks whether its agent's tool call may run (Claude
//! Code's `notifications/claude/channel/permission_request`, see `delivery::mcp::relay`).
//!
//! The request becomes a confirm request for people: shown in `pending`, `watch` and the
//! approval page, answered with `confirm` by any path but the agent's own tool, ended when the
//! session that asked ends. The reply is its action id, which the session keeps to send the
//! verdict back to its host.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::actions::ActionId;
use crate::actions::lifecycle::PermissionRequest;
use crate::control::{ApiError, Ctx, Op};

/// How long a relayed permission request stays open when the host never answers it here:
/// the default `confirmTimeout` of a rule.
pub const PERMISSION_TIMEOUT: Duration = crate::rules::DEFAULT_CONFIRM_TIMEOUT;

/// Relays one permission request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RelayPermission {
    /// The handle of the session whose host asks.
    pub session: u64,
    /// The request, as the host sent it.
    pub request: PermissionRequest,
}

impl Op for RelayPermission {
    /// The confirm's action id.
    type Reply = ActionId;

    async fn apply(self, cx: &Ctx<'_>) -> Result<ActionId, ApiError> {
        let session = cx.session(self.session)?;
        // The host is the parent of the front end that relays its request (`control::peer`).
        let host = cx.peer.and_then(crate::control::peer::parent);
        // Its id is the next action id: one id space with the rules' actions.
        let id = cx.core().next_action_id();
        let request = &self.request;
        let item = cx
            .lifecycle()
            .relay_permission(
                (session, host),
                id,
                request,
                PERMISSION_TIMEOUT,
                chrono::Utc::now(),
            )
            .await
            .map_err(ApiError::from)?;
        tracing::info!(
            action_id = id,
            rule = %item.rule,
            from = %item.message.server,
            request_id = %request.request_id,
            "permission request relayed by the host"
        );
        Ok(item.action_id)
    }
}
