//! `metrics`: `GET /metrics` — every counter and gauge as Prometheus text.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};

/// `/metrics` as Prometheus text.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RenderMetrics {}

impl Op for RenderMetrics {
    type Reply = String;

    async fn apply(self, cx: &Ctx<'_>) -> Result<String, ApiError> {
        Ok(cx.local.render_metrics())
    }
}
