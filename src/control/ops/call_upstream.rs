//! `call_upstream`: a session's call to an upstream tool, forwarded to its server.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorData};
use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op, WAIT_MARGIN};

/// The longest a forwarded call may take before the front end stops waiting for the daemon;
/// each upstream's own call timeout is shorter and answers first.
pub const FORWARD_DEADLINE: Duration = Duration::from_secs(600);

/// Forwards a call to an upstream tool.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CallUpstream {
    /// The call, with the re-exported name (`teams__send_message`).
    pub request: CallToolRequestParams,
}

/// What became of a forwarded call.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Forwarded {
    /// No upstream has a tool of that name.
    NotUpstream,
    /// The upstream's result.
    Result(CallToolResult),
    /// The upstream's error, or why the call did not reach it.
    Error(ErrorData),
}

impl Op for CallUpstream {
    type Reply = Forwarded;

    fn deadline(&self) -> Duration {
        FORWARD_DEADLINE + WAIT_MARGIN
    }

    async fn apply(self, cx: &Ctx<'_>) -> Result<Forwarded, ApiError> {
        let Some(hub) = cx.parts().tool_hub().filter(|h| h.has_tool(&self.request.name)) else {
            return Ok(Forwarded::NotUpstream);
        };
        Ok(match hub.call(self.request).await {
            Ok(result) => Forwarded::Result(result),
            Err(error) => Forwarded::Error(error),
        })
    }
}
