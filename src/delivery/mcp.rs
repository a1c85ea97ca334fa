//! The MCP server: tools, push and transports.
//!
//! STUB: filled in by the MCP work.

use std::sync::Arc;

use crate::app::App;

/// Serves MCP over stdio until the client closes stdin or `shutdown` fires.
pub async fn serve_stdio(
    _app: Arc<App>,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    shutdown.cancelled().await;
    Ok(())
}

/// The streamable HTTP MCP service, to be mounted at `/mcp`.
pub fn http_router(_app: Arc<App>, _shutdown: tokio_util::sync::CancellationToken) -> axum::Router {
    axum::Router::new()
}
