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
        let stats = cx.core().stats();
        let mut out = Scrape::default();
        cx.metrics()
            .scrape(&mut out, &stats.inbox, &stats.delivery);
        crate::metrics::scrape_regex_budget(&mut out, &cx.core().rules());
        crate::metrics::scrape_hooks(&mut out, &stats.hooks);
        cx.parts().scrape(&stats, &mut out);
        Ok(out)
    }
}
