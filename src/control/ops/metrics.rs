//! `metrics`: `GET /metrics` — every counter and gauge, read now.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};
use crate::metrics::Scrape;

/// Every family of `/metrics`, as data: the listener that serves it adds its own and encodes
/// the text.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RenderMetrics {}

impl Op for RenderMetrics {
    type Reply = Scrape;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Scrape, ApiError> {
        Ok(cx.local.scrape())
    }
}
