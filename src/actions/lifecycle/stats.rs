//! What the lifecycle reports: counters since start, queue depths, the pending confirms in
//! short, and the rate-limited log line for drops.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::actions::{ActionId, ExecFailure, Mode};
use crate::message::Seq;

/// How often a burst of drops is logged.
const DROP_LOG_EVERY: Duration = Duration::from_secs(5);

/// Counters since start, by transition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Actions dropped by a full queue, by mode.
    pub dropped: BTreeMap<Mode, u64>,
    /// Work claimed by a wait.
    pub claimed: u64,
    /// Items delivered (first delivery of a nudge; work whose result was sent).
    pub delivered: u64,
    /// Claims given back.
    pub released: u64,
    /// Confirms approved.
    pub approved: u64,
    /// Confirms denied.
    pub denied: u64,
    /// Confirms expired.
    pub expired: u64,
    /// Confirms resolved by a later message.
    #[serde(default)]
    pub resolved: u64,
    /// Exec runs started.
    #[serde(default)]
    pub running: u64,
    /// Exec runs that succeeded.
    #[serde(default)]
    pub succeeded: u64,
    /// Exec runs that failed (any kind but `cancelled`).
    #[serde(default)]
    pub failed: u64,
    /// Exec runs cancelled.
    #[serde(default)]
    pub cancelled: u64,
    /// Exec runs that did not succeed, by kind (`cancelled` included).
    #[serde(default)]
    pub exec_failures: BTreeMap<ExecFailure, u64>,
}

/// Queue depths and counters, for `inbox_stats`, `stats` and `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleStats {
    /// Each queue's capacity.
    pub capacity: usize,
    /// Nudges no consumer has seen yet, wherever they stand: waiting for a live session,
    /// held for the next session to open, or left behind (more than `heldNudges`, older than
    /// `heldNudgeMaxAge`), which only a named consumer resuming an older cursor still reads.
    /// `nudges_waiting` and `nudges_held` say which; this total stays for scripts.
    pub nudges_undelivered: usize,
    /// Nudges no consumer has seen yet that a live session's next wait returns.
    #[serde(default)]
    pub nudges_waiting: usize,
    /// While no session is open: the nudges held for the first session that opens (the newest
    /// `heldNudges` no consumer has seen, none older than `heldNudgeMaxAge`).
    #[serde(default)]
    pub nudges_held: usize,
    /// Confirms waiting for an answer.
    pub pending_confirms: usize,
    /// Work waiting for a session.
    pub queued_work: usize,
    /// Work claimed by a wait, not yet delivered.
    pub claimed_work: usize,
    /// Live sessions.
    pub sessions: usize,
    /// Auto work waiting for an exec slot.
    #[serde(default)]
    pub exec_queued: usize,
    /// Exec runs in flight.
    #[serde(default)]
    pub exec_running: usize,
    /// Counters since start.
    pub counters: Counters,
    /// Work on its way to the queue instances share (`jetstream`), not yet published.
    #[serde(default)]
    pub work_outgoing: usize,
    /// `ok`, `failing: CAUSE`, or `memory`.
    pub actions_journal: String,
}

/// A pending confirm, for `pending` and `inbox_stats`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingConfirm {
    /// The action id.
    pub id: ActionId,
    /// The rule.
    pub rule: std::sync::Arc<str>,
    /// The source message's seq.
    pub seq: Seq,
    /// When it expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

/// Drops not logged yet: a burst of them is one warning every [`DROP_LOG_EVERY`], not one
/// line per action (each is in `actions.jsonl` and the counters all the same).
#[derive(Default)]
pub(super) struct DropLog {
    unlogged: u64,
    logged_at: Option<Instant>,
}

impl DropLog {
    /// Counts one drop.
    pub(super) fn count(&mut self) {
        self.unlogged += 1;
    }

    /// Logs the drops counted since the last warning, unless one was logged lately.
    pub(super) fn log(&mut self, capacity: usize) {
        if self.unlogged > 0 && self.logged_at.is_none_or(|t| t.elapsed() >= DROP_LOG_EVERY) {
            tracing::warn!(
                dropped = self.unlogged,
                capacity,
                "actions dropped: their delivery queue is full; recorded as dropped in actions.jsonl"
            );
            self.unlogged = 0;
            self.logged_at = Some(Instant::now());
        }
    }
}
