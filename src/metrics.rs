//! Process counters, rendered as Prometheus text for `GET /metrics`.
//!
//! STUB: the HTTP ingest work fills this in.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters shared by every part of the process.
#[derive(Debug, Default)]
pub struct Metrics {
    /// `wait_for_inbound_message` calls in flight.
    pub wait_calls_in_flight: AtomicU64,
}

impl Metrics {
    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        format!(
            "# TYPE switchboard_wait_calls_in_flight gauge\nswitchboard_wait_calls_in_flight {}\n",
            self.wait_calls_in_flight.load(Ordering::Relaxed)
        )
    }
}
