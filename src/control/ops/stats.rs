//! `stats`: `inbox_stats`, `switchboard stats` — what the core counts, what each part of the
//! daemon reports (exec, upstreams, listeners, the last config change), and, when named, one
//! consumer's position.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::app::CoreStats;
use crate::control::{ApiError, ConsumerView, Ctx, Op};

/// Stats, with a consumer's position.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GetStats {
    /// The consumer.
    #[serde(default)]
    pub consumer: Option<String>,
}

/// Everything `inbox_stats` and `switchboard stats` show.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stats {
    /// The core: inbox, rules, delivery.
    #[serde(flatten)]
    pub core: CoreStats,
    /// Each part of the daemon by name (`exec`, `upstreams`, `listeners`, `config_reload`).
    #[serde(flatten)]
    pub parts: BTreeMap<String, serde_json::Value>,
}

impl Stats {
    /// The core's stats and every part's report, now.
    pub(super) fn of(cx: &Ctx<'_>) -> Stats {
        let core = cx.core().stats();
        let parts = cx.parts().reports(&core);
        Stats { core, parts }
    }

    /// What part `name` reports, read as `T`; `None` when it reports nothing (or not as `T`).
    pub fn part<T: DeserializeOwned>(&self, name: &str) -> Option<T> {
        serde_json::from_value(self.parts.get(name)?.clone()).ok()
    }
}

/// The stats, and the asking consumer's position.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatsReply {
    /// Everything the daemon counts.
    #[serde(flatten)]
    pub stats: Stats,
    /// The asking consumer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<ConsumerView>,
}

impl Op for GetStats {
    type Reply = StatsReply;

    async fn apply(self, cx: &Ctx<'_>) -> Result<StatsReply, ApiError> {
        Ok(StatsReply {
            stats: Stats::of(cx),
            consumer: self.consumer.map(|c| ConsumerView::of(cx, &c)),
        })
    }
}
