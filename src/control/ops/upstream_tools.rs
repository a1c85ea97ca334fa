//! `upstream_tools`: the tools of the upstream MCP servers, re-exported to sessions as
//! `<upstream>__<tool>`.

use rmcp::model::Tool;
use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};

/// The upstream tools.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct UpstreamTools {}

impl Op for UpstreamTools {
    type Reply = Vec<Tool>;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Vec<Tool>, ApiError> {
        Ok(cx.parts().tool_hub().map(|hub| hub.tools()).unwrap_or_default())
    }
}
