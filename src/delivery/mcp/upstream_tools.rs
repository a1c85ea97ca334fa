//! Upstream tools in MCP sessions: `notifications/tools/list_changed` sent to the session
//! whenever an upstream's list changes. Listing and forwarding go through the
//! operations (`upstream_tools`, `call_upstream`), so the upstream connections live in the
//! daemon.

use rmcp::service::{Peer, RoleServer};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Tells this session's client each time the upstream tools change, until `stop`.
pub fn follow(
    tasks: &TaskTracker,
    mut changed: watch::Receiver<u64>,
    peer: Peer<RoleServer>,
    stop: CancellationToken,
) {
    changed.mark_unchanged();
    tasks.spawn(async move {
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
