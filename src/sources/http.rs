//! HTTP ingest.
//!
//! STUB: filled in by the webhook ingest work.

use std::sync::Arc;

use crate::app::App;

/// The ingest router (`/v1/...`, `/healthz`, `/metrics`).
pub fn router(_app: Arc<App>) -> axum::Router {
    axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok\n" }))
}
