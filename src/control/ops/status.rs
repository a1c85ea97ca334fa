//! `status`: `switchboard status` — the daemon's identity, how it was started, its stats.

use serde::{Deserialize, Serialize};

use super::stats::Stats;
use crate::control::{ApiError, Ctx, DaemonListeners, Op};

/// The daemon's identity, listeners and stats.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GetStatus {}

/// What `switchboard status` shows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    /// The daemon's pid.
    pub pid: u32,
    /// Its version.
    pub version: String,
    /// The control protocol it speaks.
    #[serde(default)]
    pub protocol: u32,
    /// Its home.
    pub home: String,
    /// When it started (RFC 3339).
    pub started: String,
    /// Its log file, when it logs to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// The listeners asked for.
    pub asked: DaemonListeners,
    /// The stats, which include the listeners' state.
    pub stats: Stats,
}

impl Op for GetStatus {
    type Reply = Status;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Status, ApiError> {
        let daemon = cx.parts().daemon_info();
        Ok(Status {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: crate::control::PROTOCOL,
            home: cx
                .home()
                .map(|h| h.dir().display().to_string())
                .unwrap_or_default(),
            started: crate::message::format_timestamp(daemon.started),
            log: daemon.log.clone(),
            asked: daemon.listeners.clone(),
            stats: Stats::of(cx),
        })
    }
}
