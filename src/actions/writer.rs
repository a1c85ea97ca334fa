//! The actions journal's writer: `actions.jsonl` on the journal engine
//! ([`crate::message::journal`]), whose one writer thread owns every write to it.
//!
//! The lifecycle decides transitions under its lock and queues their records here, which
//! never blocks on the disk, so the order of the file is the order of the decisions. The
//! engine's thread takes everything queued since its last write, writes it in one go and syncs
//! as the home's `inbox.fsync` says (`always`: every group, on the sync thread, before anyone is
//! told; `interval`: within a second; `never`: left to the kernel), then tells whoever asked.
//! No fsync ever runs under a lock that a wait or an ingest request needs, nor on the async
//! runtime's threads.
//!
//! A failed write (disk full, an unwritable file) loses nothing: the records stay with the
//! engine, in order, and newer ones queue behind them; it tries again after 100 ms, doubling the
//! wait up to 2 s, until they land. Only then is anyone told they are written, so a confirm
//! request is not shown and the evaluation mark does not move past them meanwhile. The status
//! says `failing: CAUSE` (for `stats`), and the log has one line when the outage starts and one
//! when it ends.
//!
//! An answer to a confirm is not kept in memory when it cannot be written: it goes as a
//! [`JournalWriter::commit`], written at once with everything before it and taken back out
//! when the write fails, so the caller can refuse the answer and nothing of it lands later.
//!
//! An evaluation mark that comes alone (messages evaluated, no action made) is not queued: it
//! is kept in an atomic that the engine's thread reads ([`MarkKeeper`]) when it writes, at the
//! latest [`MARK_DELAY`] after the first mark it was told of. Under load that is one write
//! (and, under `always`, one fsync) for many messages instead of one each, and no thread
//! wake-up per message. A crash in the meantime loses only marks: their messages made nothing
//! and are evaluated again at the next start, like any message evaluated after the last mark on
//! disk.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::journal::{ActionLog, Record};
use crate::duration::Backoff;
use crate::home::FsyncPolicy;
use crate::message::Seq;
use crate::message::journal::{self as engine, Keeper, Waiter};

/// The first wait before a failed write is tried again; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two tries of a failed write.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// How long an evaluation mark that comes alone may wait to be written.
const MARK_DELAY: Duration = Duration::from_millis(5);

/// What runs with the newest mark once it is written (built once by its owner, cloned only
/// when a mark wakes the thread).
pub type OnMark = Arc<dyn Fn(Seq) + Send + Sync>;

/// The newest evaluation mark that came alone, shared by the handles and the [`MarkKeeper`].
#[derive(Default)]
struct Marks {
    /// The newest mark submitted (0: none yet).
    seq: AtomicU64,
    /// Whether the thread knows a mark is waiting (woken for it and not yet written): only the
    /// mark that finds it false wakes the thread.
    told: AtomicBool,
    /// What runs once the waiting mark is written; set before `told`.
    on_written: Mutex<Option<OnMark>>,
}

/// A handle on the actions journal (none in memory: writes are dropped, acks immediate).
#[derive(Clone)]
pub struct JournalWriter {
    journal: Option<engine::Journal<Record>>,
    marks: Arc<Marks>,
}

impl JournalWriter {
    /// A writer that writes nothing (in-memory switchboards, tests).
    pub fn memory() -> JournalWriter {
        JournalWriter {
            journal: None,
            marks: Arc::default(),
        }
    }

    /// Starts the engine's writer thread for `log`. The thread ends at [`JournalWriter::close`]
    /// or when the last handle is dropped, after writing what was queued.
    pub fn start(log: ActionLog, policy: FsyncPolicy) -> std::io::Result<JournalWriter> {
        let marks = Arc::<Marks>::default();
        let settings = engine::Settings {
            name: "actions journal",
            kept: "actions",
            fsync: policy,
            rotation: None,
            retry: Backoff::new(RETRY_FIRST, RETRY_MAX),
        };
        let keeper = MarkKeeper {
            marks: marks.clone(),
            due: None,
            taken: 0,
        };
        let (path, file) = log.into_parts();
        let journal = engine::Journal::start(
            path,
            file,
            settings,
            Arc::new(engine::Status::default()),
            keeper,
            || {},
        )?;
        Ok(JournalWriter {
            journal: Some(journal),
            marks,
        })
    }

    /// Queues `records` (in this order, after everything queued before). Never blocks.
    pub fn submit(&self, records: Vec<Record>) {
        if let (Some(journal), false) = (&self.journal, records.is_empty()) {
            journal.queue(records, None);
        }
    }

    /// Queues `records`; `then` runs once they are written (and synced under `always`), in
    /// the order of submission, on the writer's thread, or at once in memory. A failed write
    /// keeps them and tries again until they land, so `then` may run much later: it must be
    /// quick and must not take a lock its caller holds. Never blocks.
    pub fn submit_then(&self, records: Vec<Record>, then: impl FnOnce() + Send + 'static) {
        match &self.journal {
            Some(journal) => journal.queue(records, Some(Waiter::Then(Box::new(then)))),
            None => then(),
        }
    }

    /// Writes `records` now, after everything submitted before them, and syncs them; when the
    /// write fails they are taken back out (nothing of them is written later) and the cause is
    /// returned. What was submitted before stays held and is tried again as usual. For
    /// decisions that must be refused rather than kept in memory: a person's answer.
    pub async fn commit(&self, records: Vec<Record>) -> Result<(), String> {
        match &self.journal {
            Some(journal) => journal.commit(records).await,
            None => Ok(()),
        }
    }

    /// Records submitted and not written yet: what a stop now would lose.
    pub fn unwritten(&self) -> u64 {
        self.journal.as_ref().map_or(0, |j| j.unwritten() as u64)
    }

    /// Marks every message up to `seq` evaluated, when that is all a batch changed (it made no
    /// action). Written after everything submitted before it, within 5 ms, together
    /// with the marks that come meanwhile; `on_written` then runs with the newest of them
    /// (on the writer's thread, or at once in memory). Never blocks, and wakes the thread
    /// only for the first mark of a delay.
    pub fn submit_mark(&self, seq: Seq, on_written: &OnMark) {
        let Some(journal) = &self.journal else {
            on_written(seq);
            return;
        };
        let marks = &self.marks;
        marks.seq.fetch_max(seq, Ordering::SeqCst);
        if !marks.told.load(Ordering::SeqCst) {
            *marks.on_written.lock().unwrap() = Some(on_written.clone());
            if !marks.told.swap(true, Ordering::SeqCst) {
                journal.wake();
            }
        }
    }

    /// Queues `records` and returns a receiver that fires once they are written (and synced
    /// under `always`). A failed write keeps them and tries again: it fires when they land.
    pub fn submit_acked(&self, records: Vec<Record>) -> oneshot::Receiver<()> {
        let (ack, done) = oneshot::channel();
        self.submit_then(records, move || {
            let _ = ack.send(());
        });
        done
    }

    /// Writes and syncs everything queued before the call, at once even while a failed write
    /// waits for its next try. True once it is on disk; false when the write failed (the
    /// records stay queued and are tried again).
    pub async fn flush(&self) -> bool {
        match &self.journal {
            Some(journal) => journal.flush().await.is_ok(),
            None => true,
        }
    }

    /// Writes and syncs what is queued, then ends the writer thread; the future ends when it
    /// has. Nothing submitted afterwards is written.
    pub async fn close(&self) {
        if let Some(journal) = &self.journal {
            journal.close().await;
        }
    }

    /// `ok`, `failing: CAUSE`, or `memory`.
    pub fn status(&self) -> String {
        self.journal
            .as_ref()
            .map_or_else(|| "memory".to_string(), |j| j.status().describe())
    }

    /// Whether writes fail now (records wait in memory for the next try).
    pub fn is_failing(&self) -> bool {
        self.journal
            .as_ref()
            .is_some_and(|j| j.status().is_failing())
    }

    /// Failed writes so far (each try counts).
    pub fn errors(&self) -> u64 {
        self.journal
            .as_ref()
            .map_or(0, |j| j.status().errors.load(Ordering::Relaxed))
    }
}

/// The evaluation marks that came alone, on the engine's writer thread: the newest is written
/// after everything queued before it, with a write that happens anyway or [`MARK_DELAY`] after
/// the thread was told of the first.
struct MarkKeeper {
    marks: Arc<Marks>,
    /// When the waiting mark must be written (`None`: none waits, or the thread has not seen it).
    due: Option<Instant>,
    /// The newest mark written.
    taken: Seq,
}

impl Keeper<Record> for MarkKeeper {
    fn upkeep(&mut self) -> Option<Instant> {
        if self.due.is_none() && self.marks.told.load(Ordering::SeqCst) {
            self.due = Some(Instant::now() + MARK_DELAY);
        }
        self.due
    }

    /// The records of decisions made before the mark was stored were queued before it, so the
    /// writer holds them by now and they go first.
    fn trailer(&mut self, busy: bool, now: Instant) -> Option<(Record, Waiter)> {
        let marks = &self.marks;
        if !marks.told.load(Ordering::SeqCst) || !(busy || self.due.is_some_and(|t| now >= t)) {
            return None;
        }
        self.due = None;
        marks.told.store(false, Ordering::SeqCst);
        let seq = marks.seq.load(Ordering::SeqCst);
        if seq <= self.taken {
            return None;
        }
        self.taken = seq;
        let mark = Record {
            at: Some(chrono::Utc::now()),
            evaluated: Some(seq),
            ..Record::default()
        };
        let on_written = marks.on_written.lock().unwrap().clone();
        let then = Waiter::Then(Box::new(move || {
            if let Some(on_written) = on_written {
                on_written(seq);
            }
        }));
        Some((mark, then))
    }

    fn finish(&mut self, flushed: bool) {
        if !flushed {
            tracing::error!(
                "actions journal: records not written before the stop; actions created among \
                 them are made again at the next start, later changes of state are lost"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::actions::ActionState;

    /// A writer with `policy` on `actions.jsonl` in a new directory (kept while the test runs).
    fn started(policy: FsyncPolicy) -> (tempfile::TempDir, std::path::PathBuf, JournalWriter) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("actions.jsonl");
        let (log, _) = ActionLog::open(&path).unwrap();
        let writer = JournalWriter::start(log, policy).unwrap();
        (dir, path, writer)
    }

    /// The records of `path`, in file order.
    fn records(path: &std::path::Path) -> Vec<Record> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The action ids of `path`'s records, in file order.
    fn ids(path: &std::path::Path) -> Vec<u64> {
        records(path).iter().map(|r| r.id.unwrap()).collect()
    }

    #[tokio::test]
    async fn records_land_in_submission_order_and_flush_waits_for_them() {
        let (_dir, path, writer) = started(FsyncPolicy::Never);
        let now = chrono::Utc::now();
        for id in 1..=500 {
            writer.submit(vec![Record::transition(id, ActionState::Delivered, now)]);
        }
        writer.flush().await;
        assert_eq!(ids(&path), (1..=500).collect::<Vec<_>>());
        let acked = writer.submit_acked(vec![Record::transition(501, ActionState::Queued, now)]);
        acked.await.unwrap();
        assert_eq!(records(&path).len(), 501);
    }

    #[tokio::test]
    async fn marks_that_come_alone_are_written_together_after_the_records_before_them() {
        let (_dir, path, writer) = started(FsyncPolicy::Never);
        let now = chrono::Utc::now();
        let (tx, told) = mpsc::channel();
        let on_written: OnMark = Arc::new(move |seq| {
            let _ = tx.send(seq);
        });
        for seq in 1..=1000 {
            if seq % 100 == 0 {
                writer.submit(vec![Record::transition(seq, ActionState::Delivered, now)]);
            }
            writer.submit_mark(seq, &on_written);
        }
        // Written by the delay, unasked: told with each mark written, the last one 1000.
        loop {
            match told.recv_timeout(Duration::from_secs(10)) {
                Ok(1000) => break,
                Ok(_) => {}
                Err(e) => panic!("the last mark was never written: {e}"),
            }
        }
        let written = records(&path);
        let marks: Vec<Seq> = written.iter().filter_map(|r| r.evaluated).collect();
        assert_eq!(
            marks.last(),
            Some(&1000),
            "the newest mark, once told it is written"
        );
        assert!(marks.windows(2).all(|w| w[0] < w[1]), "{marks:?}");
        // No mark is on disk before a record submitted before it. A record submitted after it
        // may go first only when the thread took it before the next mark was stored (the mark
        // is read under the queue's lock, the record queued after the mark): so mark 99 may
        // follow record 100, but no mark follows a record submitted after a later mark.
        for (at, r) in written.iter().enumerate() {
            if let Some(mark) = r.evaluated {
                let before = written[..at].iter().filter_map(|r| r.id).count() as u64;
                assert!(
                    (mark / 100..=(mark + 1) / 100).contains(&before),
                    "{before} records before mark {mark}"
                );
            }
        }
        // A flush writes a waiting mark at once.
        writer.submit_mark(1001, &on_written);
        assert!(writer.flush().await);
        let last = records(&path).pop().unwrap();
        assert_eq!(last.evaluated, Some(1001));

        // Marks that trickle in, slower than the thread writes, still wait for each other:
        // one write per delay, not one per mark.
        let lines = records(&path).len();
        let started = Instant::now();
        for seq in 1002..=1021 {
            writer.submit_mark(seq, &on_written);
            std::thread::sleep(Duration::from_micros(200));
        }
        let trickling = started.elapsed();
        assert!(writer.flush().await);
        let written = records(&path).len() - lines;
        let delays = (trickling.as_micros() / MARK_DELAY.as_micros()) as usize;
        assert!(
            written <= delays + 2,
            "{written} lines for 20 marks over {trickling:?}"
        );
    }

    #[tokio::test]
    async fn a_failed_write_keeps_its_records_in_order_until_the_file_takes_them() {
        let (_dir, path, writer) = started(FsyncPolicy::Always);
        let now = chrono::Utc::now();
        let record = |id| vec![Record::transition(id, ActionState::Delivered, now)];
        writer.submit(record(1));
        assert!(writer.flush().await);
        let Some(guard) = crate::actions::fault::Immutable::set(&path) else {
            return;
        };
        let mut acked = writer.submit_acked(record(2));
        writer.submit(record(3));
        assert!(
            !writer.flush().await,
            "not on disk while the file refuses it"
        );
        assert!(
            writer.status().starts_with("failing: "),
            "{}",
            writer.status()
        );
        assert!(writer.is_failing());
        assert!(
            acked.try_recv().is_err(),
            "not acknowledged before it is written"
        );
        writer.submit(record(4));

        drop(guard);
        tokio::time::timeout(Duration::from_secs(10), &mut acked)
            .await
            .expect("written by a retry once the file takes writes again")
            .unwrap();
        assert!(writer.flush().await);
        assert_eq!(writer.status(), "ok");
        assert_eq!(ids(&path), [1, 2, 3, 4], "each once, in order");
    }

    #[tokio::test]
    async fn a_commit_lands_at_once_or_is_taken_back_and_never_lands() {
        let (_dir, path, writer) = started(FsyncPolicy::Never);
        let now = chrono::Utc::now();
        let record = |id| vec![Record::transition(id, ActionState::Denied, now)];
        writer.submit(record(1));
        writer.commit(record(2)).await.unwrap();
        assert_eq!(ids(&path), [1, 2], "written with what came before it");
        assert_eq!(writer.unwritten(), 0);
        let Some(guard) = crate::actions::fault::Immutable::set(&path) else {
            return;
        };
        writer.submit(record(3));
        let refused = writer.commit(record(4)).await;
        assert!(refused.is_err(), "{refused:?}");
        assert_eq!(
            writer.unwritten(),
            1,
            "the record before it is held, the commit is not"
        );
        writer.submit(record(5));
        drop(guard);
        assert!(writer.flush().await);
        assert_eq!(ids(&path), [1, 2, 3, 5], "the refused commit never lands");
        assert_eq!(writer.unwritten(), 0);
    }
}
