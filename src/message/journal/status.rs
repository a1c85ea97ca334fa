//! What a journal reports: how far it has written and synced, its size and backlog, and
//! whether its writes fail (an outage, logged once when it starts and once when it ends).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(test)]
use std::sync::mpsc;

/// A journal's progress and health, shared by its handle, its writer and its threads (and,
/// through an `Arc`, by the log built on it). Positions are the log's own numbers for its
/// records (the inbox's seqs), in the order they are handed over; 0 is "none".
#[derive(Debug, Default)]
pub struct Status {
    /// The highest position written to the file.
    pub written: AtomicU64,
    /// The highest position synced to disk.
    pub synced: AtomicU64,
    /// Bytes encoded but not yet written (kept whole while writes fail).
    pub backlog_bytes: AtomicUsize,
    /// Bytes in the active file.
    pub bytes: AtomicU64,
    /// Failed writes and syncs so far (each try counts).
    pub errors: AtomicU64,
    is_failing: AtomicBool,
    /// The cause of the current outage.
    failing: Mutex<Option<String>>,
    /// Tests hold the sync thread of `always` here until they send on the other end (or drop
    /// it).
    #[cfg(test)]
    pub sync_gate: Mutex<Option<mpsc::Receiver<()>>>,
}

impl Status {
    /// A journal whose last record on disk has position `on_disk` (written and synced).
    pub fn new(on_disk: u64) -> Status {
        Status {
            written: AtomicU64::new(on_disk),
            synced: AtomicU64::new(on_disk),
            ..Status::default()
        }
    }

    /// Whether writes fail now (what is kept waits in memory for the next try).
    pub fn is_failing(&self) -> bool {
        self.is_failing.load(Ordering::Acquire)
    }

    /// The cause of the current outage.
    pub fn failure(&self) -> Option<String> {
        self.failing.lock().unwrap().clone()
    }

    /// `ok`, or `failing: CAUSE`.
    pub fn describe(&self) -> String {
        match self.failure() {
            None => "ok".into(),
            Some(cause) => format!("failing: {cause}"),
        }
    }

    /// Counts a failed write or sync of `journal` (the file `path`); the first of an outage is
    /// logged, with what is kept meanwhile (`kept`: "messages", "actions").
    pub(super) fn fail(&self, journal: &str, path: &std::path::Path, kept: &str, cause: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut failing = self.failing.lock().unwrap();
        if !self.is_failing.swap(true, Ordering::AcqRel) {
            tracing::error!(
                journal = %path.display(),
                "{journal} write failed: {cause}; retrying with backoff, {kept} kept in memory"
            );
        }
        *failing = Some(cause.to_owned());
    }

    /// Ends an outage, if there is one: logged once.
    pub(super) fn recover(&self, journal: &str) {
        if self.is_failing.swap(false, Ordering::AcqRel) {
            let cause = self.failing.lock().unwrap().take();
            tracing::info!(
                previous = cause.unwrap_or_default(),
                "{journal} writes recovered"
            );
        }
    }
}
