//! The actions journal's writer: one dedicated thread that owns every write to `actions.jsonl`.
//!
//! The lifecycle decides transitions under its lock and hands their records here with a
//! non-blocking channel send, so the order of the file is the order of the decisions. The
//! thread takes everything queued since its last write, writes it in one go and syncs once
//! (group commit), then acknowledges whoever asked to be told. No fsync ever runs under a lock
//! that a wait or an ingest request needs, nor on the async runtime's threads.
//!
//! The sync policy follows the home's `inbox.fsync`: `always` syncs every group before it is
//! acknowledged; `interval` syncs at most once a second and within a second of the last write;
//! `never` leaves it to the kernel.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::journal::{ActionLog, Record};
use crate::home::FsyncPolicy;

/// How long an `interval` journal may hold written records unsynced.
const SYNC_INTERVAL: Duration = Duration::from_secs(1);

enum Job {
    Write(Vec<Record>, Option<oneshot::Sender<()>>),
    Flush(oneshot::Sender<()>),
}

/// A handle on the writer thread (none in memory: writes are dropped, acks immediate).
#[derive(Clone)]
pub struct JournalWriter {
    tx: Option<mpsc::Sender<Job>>,
    log: Option<Arc<ActionLog>>,
}

impl JournalWriter {
    /// A writer that writes nothing (in-memory switchboards, tests).
    pub fn memory() -> JournalWriter {
        JournalWriter {
            tx: None,
            log: None,
        }
    }

    /// Starts the writer thread for `log`. The thread ends when the last handle is dropped,
    /// after writing what was queued.
    pub fn start(log: ActionLog, policy: FsyncPolicy) -> std::io::Result<JournalWriter> {
        let log = Arc::new(log);
        let (tx, rx) = mpsc::channel();
        let thread_log = log.clone();
        std::thread::Builder::new()
            .name("actions-journal".into())
            .spawn(move || run(&thread_log, policy, &rx))?;
        Ok(JournalWriter {
            tx: Some(tx),
            log: Some(log),
        })
    }

    /// Queues `records` (in this order, after everything queued before). Never blocks.
    pub fn submit(&self, records: Vec<Record>) {
        if let (Some(tx), false) = (&self.tx, records.is_empty()) {
            let _ = tx.send(Job::Write(records, None));
        }
    }

    /// Queues `records` and returns a receiver that fires once they are written (and synced
    /// under `always`). A failed write still fires: the failure is logged and counted.
    pub fn submit_acked(&self, records: Vec<Record>) -> oneshot::Receiver<()> {
        let (ack, done) = oneshot::channel();
        match &self.tx {
            Some(tx) => {
                let _ = tx.send(Job::Write(records, Some(ack)));
            }
            None => {
                let _ = ack.send(());
            }
        }
        done
    }

    /// Completes once everything queued before the call is written and synced.
    pub async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        match &self.tx {
            Some(tx) => {
                if tx.send(Job::Flush(ack)).is_err() {
                    return;
                }
            }
            None => return,
        }
        let _ = done.await;
    }

    /// `ok`, `failing: CAUSE`, or `memory`.
    pub fn status(&self) -> String {
        self.log
            .as_ref()
            .map_or_else(|| "memory".to_string(), |l| l.status())
    }

    /// Failed writes so far.
    pub fn errors(&self) -> u64 {
        self.log
            .as_ref()
            .map_or(0, |l| l.errors.load(std::sync::atomic::Ordering::Relaxed))
    }
}

fn run(log: &ActionLog, policy: FsyncPolicy, rx: &mpsc::Receiver<Job>) {
    // Under `interval`: when the oldest unsynced write happened.
    let mut unsynced: Option<Instant> = None;
    loop {
        let first = match unsynced {
            Some(since) => {
                let left = SYNC_INTERVAL.saturating_sub(since.elapsed());
                match rx.recv_timeout(left) {
                    Ok(job) => job,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        let _ = log.sync();
                        unsynced = None;
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            None => match rx.recv() {
                Ok(job) => job,
                Err(_) => break,
            },
        };
        let mut records = Vec::new();
        let mut acks = Vec::new();
        let mut flush = false;
        let mut take = |job: Job| match job {
            Job::Write(r, ack) => {
                records.extend(r);
                acks.extend(ack);
            }
            Job::Flush(ack) => {
                flush = true;
                acks.push(ack);
            }
        };
        take(first);
        while let Ok(job) = rx.try_recv() {
            take(job);
        }
        let sync = match policy {
            FsyncPolicy::Always => true,
            FsyncPolicy::Never => flush,
            FsyncPolicy::Interval => {
                flush || unsynced.is_some_and(|since| since.elapsed() >= SYNC_INTERVAL)
            }
        };
        // A failure is logged and counted by the log; the lifecycle carries on in memory.
        let _ = log.append(&records, sync);
        if sync {
            if records.is_empty() {
                let _ = log.sync();
            }
            unsynced = None;
        } else if policy == FsyncPolicy::Interval && !records.is_empty() && unsynced.is_none() {
            unsynced = Some(Instant::now());
        }
        for ack in acks {
            let _ = ack.send(());
        }
    }
    if unsynced.is_some() {
        let _ = log.sync();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::ActionState;

    #[tokio::test]
    async fn records_land_in_submission_order_and_flush_waits_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("actions.jsonl");
        let (log, _) = ActionLog::open(&path).unwrap();
        let writer = JournalWriter::start(log, FsyncPolicy::Never).unwrap();
        let now = chrono::Utc::now();
        for id in 1..=500 {
            writer.submit(vec![Record::transition(id, ActionState::Delivered, now)]);
        }
        writer.flush().await;
        let ids: Vec<u64> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Record>(l).unwrap().id.unwrap())
            .collect();
        assert_eq!(ids, (1..=500).collect::<Vec<_>>());
        let acked = writer.submit_acked(vec![Record::transition(501, ActionState::Queued, now)]);
        acked.await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 501);
    }
}
