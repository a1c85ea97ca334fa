//! Upstream tools in MCP sessions: listed after switchboard's own, calls forwarded, and
//! `notifications/tools/list_changed` sent to the session whenever an upstream's list changes.
//!
//! Sessions reach upstreams only through [`Upstreams`]' narrow interface (`tools`, `call`,
//! `tools_changed`), so the connections can move elsewhere without touching this file's callers.

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResponse, ErrorData, Tool};
use rmcp::service::{Peer, RoleServer};
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::sources::upstream::Upstreams;

/// Switchboard's tools followed by every upstream tool.
pub fn list(app: &App, mut own: Vec<Tool>) -> Vec<Tool> {
    own.extend(app.upstreams.tools());
    own
}

/// Forwards `request` when it names an upstream tool; `None` otherwise.
pub async fn call(
    upstreams: &Upstreams,
    request: &CallToolRequestParams,
) -> Option<Result<CallToolResponse, ErrorData>> {
    if !upstreams.has_tool(&request.name) {
        return None;
    }
    upstreams.call(request.clone()).await
}

/// Tells this session's client each time the upstream tools change, until `stop`.
pub fn follow(app: Arc<App>, peer: Peer<RoleServer>, stop: CancellationToken) {
    let mut changed = app.upstreams.tools_changed();
    changed.mark_unchanged();
    app.tasks.spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                r = changed.changed() => if r.is_err() { return },
            }
            if peer.notify_tool_list_changed().await.is_err() {
                return;
            }
        }
    });
}
