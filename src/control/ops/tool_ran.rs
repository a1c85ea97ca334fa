//! `tool_ran`: a host's tool call ran (`switchboard hook post-tool-use`, run by Claude Code's
//! `PostToolUse` hook), so its permission was granted. When a relayed permission request of
//! that host for that call (the same tool, the whole input) is still open here, the person
//! allowed it in the host's own dialog: it is closed as approved `via: relay` (see
//! `actions::lifecycle::relay`), and `pending`, `watch` and the approval page show it
//! answered. The host is the nearest ancestor of the calling process (read from the control
//! socket's credentials, see `control::peer`) whose front end relayed a request: another
//! window's request is never closed. A call that needed no permission, or whose request a
//! person answered here first, closes nothing; nor does a local call.

use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::actions::lifecycle::ClosedConfirm;
use crate::control::{ApiError, Ctx, Op, RefusalCode};

/// A host's tool call ran.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ToolRan {
    /// The tool, as the host names it in its permission requests (`Bash`, `mcp__s__t`).
    pub tool_name: String,
    /// The call's input, as the host ran it.
    #[serde(default)]
    pub tool_input: Value,
}

impl Op for ToolRan {
    /// How the request it closed ended; `None` when it closed none.
    type Reply = Option<ClosedConfirm>;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Option<ClosedConfirm>, ApiError> {
        if self.tool_name.trim().is_empty() {
            return Err(ApiError::refused(
                RefusalCode::Invalid,
                "`tool_ran`: the host gave no tool name",
            ));
        }
        let Some(hook) = cx.peer else {
            return Ok(None);
        };
        let ran_under = crate::control::peer::ancestors(hook);
        let lifecycle = cx.lifecycle();
        let closed =
            lifecycle.allowed_in_host(&self.tool_name, &self.tool_input, &ran_under, Utc::now());
        if closed.is_some() {
            // Once on disk.
            lifecycle.flush().await;
        }
        Ok(closed)
    }
}
