//! The actions journal's writer: one dedicated thread that owns every write to `actions.jsonl`.
//!
//! The lifecycle decides transitions under its lock and hands their records here with a
//! non-blocking channel send, so the order of the file is the order of the decisions. The
//! thread takes everything queued since its last write, writes it in one go and syncs once
//! (group commit), then acknowledges whoever asked to be told. No fsync ever runs under a lock
//! that a wait or an ingest request needs, nor on the async runtime's threads.
//!
//! A failed write (disk full, an unwritable file) loses nothing: the records stay here, in
//! order, and newer ones queue behind them; the thread tries again after 100 ms, doubling the
//! wait up to 2 s, until they land. Only then is anyone told they are written, so a confirm
//! request is not shown and the evaluation mark does not move past them meanwhile. The log
//! says `failing: CAUSE` (for `stats`) and logs one line when the outage starts and one when
//! it ends.
//!
//! The sync policy follows the home's `inbox.fsync`: `always` syncs every group before it is
//! acknowledged; `interval` syncs at most once a second and within a second of the last write;
//! `never` leaves it to the kernel.
//!
//! An answer to a confirm is not kept in memory when it cannot be written: it goes as a
//! [`JournalWriter::commit`], written at once with everything before it and taken back out
//! when the write fails, so the caller can refuse the answer and nothing of it lands later.
//!
//! An evaluation mark that comes alone (messages evaluated, no action made) is not a job: it
//! is kept in an atomic that the thread reads when it writes, at the latest [`MARK_DELAY`]
//! after the first mark it was told of. Under load that is one write (and, under `always`, one
//! fsync) for many messages instead of one each, and no thread wake-up per message. A crash
//! in the meantime loses only marks: their messages made nothing and are evaluated again at
//! the next start, like any message evaluated after the last mark on disk.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::journal::{ActionLog, Record, encode};
use crate::home::FsyncPolicy;
use crate::message::Seq;

/// How long an `interval` journal may hold written records unsynced.
const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// The first wait before a failed write is tried again; it doubles up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(100);

/// The longest wait between two tries of a failed write.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// The most buffer capacity kept between writes.
const KEEP_CAPACITY: usize = 1024 * 1024;

/// How long an evaluation mark that comes alone may wait to be written.
const MARK_DELAY: Duration = Duration::from_millis(5);

/// What runs once a write's records are written.
type Then = Box<dyn FnOnce() + Send>;

/// What runs with the newest mark once it is written (built once by its owner, cloned only
/// when a mark wakes the thread).
pub type OnMark = Arc<dyn Fn(Seq) + Send + Sync>;

enum Job {
    Write(Vec<Record>, Option<Then>),
    Flush(oneshot::Sender<bool>),
    /// Written at once with what is held, or taken back out if the write fails: the caller is
    /// told which.
    Commit(Vec<Record>, oneshot::Sender<Result<(), String>>),
    /// A mark is waiting in [`Marks`]: write it within [`MARK_DELAY`].
    Mark(OnMark),
}

/// The newest evaluation mark that came alone, shared by the handles and the thread.
#[derive(Default)]
struct Marks {
    /// The newest mark submitted (0: none yet).
    seq: AtomicU64,
    /// Whether the thread knows a mark is waiting (a [`Job::Mark`] is sent and not yet
    /// written): only the mark that finds it false wakes the thread.
    told: AtomicBool,
}

/// A handle on the writer thread (none in memory: writes are dropped, acks immediate).
#[derive(Clone)]
pub struct JournalWriter {
    tx: Option<mpsc::Sender<Job>>,
    log: Option<Arc<ActionLog>>,
    marks: Arc<Marks>,
    /// Records submitted and not written yet (held through an outage, or on their way).
    unwritten: Arc<AtomicU64>,
}

impl JournalWriter {
    /// A writer that writes nothing (in-memory switchboards, tests).
    pub fn memory() -> JournalWriter {
        JournalWriter {
            tx: None,
            log: None,
            marks: Arc::default(),
            unwritten: Arc::default(),
        }
    }

    /// Starts the writer thread for `log`. The thread ends when the last handle is dropped,
    /// after writing what was queued.
    pub fn start(log: ActionLog, policy: FsyncPolicy) -> std::io::Result<JournalWriter> {
        let log = Arc::new(log);
        let marks = Arc::<Marks>::default();
        let unwritten = Arc::<AtomicU64>::default();
        let (tx, rx) = mpsc::channel();
        let thread = Thread {
            log: log.clone(),
            marks: marks.clone(),
            unwritten: unwritten.clone(),
            policy,
        };
        std::thread::Builder::new()
            .name("actions-journal".into())
            .spawn(move || run(&thread, &rx))?;
        Ok(JournalWriter {
            tx: Some(tx),
            log: Some(log),
            marks,
            unwritten,
        })
    }

    /// Queues `records` (in this order, after everything queued before). Never blocks.
    pub fn submit(&self, records: Vec<Record>) {
        if let (Some(tx), false) = (&self.tx, records.is_empty()) {
            self.count(&records);
            let _ = tx.send(Job::Write(records, None));
        }
    }

    fn count(&self, records: &[Record]) {
        self.unwritten
            .fetch_add(records.len() as u64, Ordering::Relaxed);
    }

    /// Writes `records` now, after everything submitted before them, and syncs them; when the
    /// write fails they are taken back out (nothing of them is written later) and the cause is
    /// returned. What was submitted before stays held and is tried again as usual. For
    /// decisions that must be refused rather than kept in memory: a person's answer.
    pub async fn commit(&self, records: Vec<Record>) -> Result<(), String> {
        let Some(tx) = &self.tx else {
            return Ok(());
        };
        let (ack, done) = oneshot::channel();
        if tx.send(Job::Commit(records, ack)).is_err() {
            return Err("the journal's writer has stopped".into());
        }
        done.await
            .unwrap_or_else(|_| Err("the journal's writer has stopped".into()))
    }

    /// Records submitted and not written yet: what a stop now would lose.
    pub fn unwritten(&self) -> u64 {
        self.unwritten.load(Ordering::Relaxed)
    }

    /// Queues `records`; `then` runs once they are written (and synced under `always`), in
    /// the order of submission, on the writer's thread, or at once in memory. A failed write
    /// keeps them and tries again until they land, so `then` may run much later: it must be
    /// quick and must not take a lock its caller holds. Never blocks.
    pub fn submit_then(&self, records: Vec<Record>, then: impl FnOnce() + Send + 'static) {
        match &self.tx {
            Some(tx) => {
                self.count(&records);
                if let Err(mpsc::SendError(Job::Write(_, Some(then)))) =
                    tx.send(Job::Write(records, Some(Box::new(then))))
                {
                    // The thread is gone: nothing will be written.
                    drop(then);
                }
            }
            None => then(),
        }
    }

    /// Marks every message up to `seq` evaluated, when that is all a batch changed (it made no
    /// action). Written after everything submitted before it, within 5 ms, together
    /// with the marks that come meanwhile; `on_written` then runs with the newest of them
    /// (on the writer's thread, or at once in memory). Never blocks, and wakes the thread
    /// only for the first mark of a delay.
    pub fn submit_mark(&self, seq: Seq, on_written: &OnMark) {
        let Some(tx) = &self.tx else {
            on_written(seq);
            return;
        };
        self.marks.seq.fetch_max(seq, Ordering::SeqCst);
        if !self.marks.told.swap(true, Ordering::SeqCst) {
            let _ = tx.send(Job::Mark(on_written.clone()));
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
        let (ack, done) = oneshot::channel();
        match &self.tx {
            Some(tx) => {
                if tx.send(Job::Flush(ack)).is_err() {
                    return false;
                }
            }
            None => return true,
        }
        done.await.unwrap_or(false)
    }

    /// `ok`, `failing: CAUSE`, or `memory`.
    pub fn status(&self) -> String {
        self.log
            .as_ref()
            .map_or_else(|| "memory".to_string(), |l| l.status())
    }

    /// Whether writes fail now (records wait in memory for the next try).
    pub fn is_failing(&self) -> bool {
        self.log.as_ref().is_some_and(|l| l.is_failing())
    }

    /// Failed writes so far (each try counts).
    pub fn errors(&self) -> u64 {
        self.log
            .as_ref()
            .map_or(0, |l| l.errors.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// Records taken from the queue and not written yet, in order, with what runs once they are.
#[derive(Default)]
struct Held {
    lines: Vec<u8>,
    then: Vec<Then>,
    /// How many of the records in `lines` were counted in [`JournalWriter::unwritten`].
    counted: u64,
}

impl Held {
    fn is_empty(&self) -> bool {
        self.lines.is_empty() && self.then.is_empty()
    }

    /// Writes what is held; on success runs the `then`s in order and empties it. A failure
    /// (logged and counted by the log) keeps everything for the next try.
    fn write(&mut self, t: &Thread, sync: bool) -> Result<(), String> {
        t.log.write(&self.lines, sync)?;
        self.lines.clear();
        if self.lines.capacity() > KEEP_CAPACITY {
            // A burst (or an outage) grew it: give the memory back.
            self.lines = Vec::new();
        }
        t.unwritten.fetch_sub(self.counted, Ordering::Relaxed);
        self.counted = 0;
        for then in self.then.drain(..) {
            then();
        }
        Ok(())
    }
}

/// A commit taken into [`Held`]: its lines start at `from`, the last ones held.
struct Commit {
    from: usize,
    ack: oneshot::Sender<Result<(), String>>,
}

/// What the writer thread owns besides its queue.
struct Thread {
    log: Arc<ActionLog>,
    marks: Arc<Marks>,
    unwritten: Arc<AtomicU64>,
    policy: FsyncPolicy,
}

/// The marks that came alone, as the writer thread holds them.
#[derive(Default)]
struct MarkState {
    /// When the waiting mark must be written (`None`: none waits).
    due: Option<Instant>,
    /// What runs once it is.
    on_written: Option<OnMark>,
    /// The newest mark taken into [`Held`].
    taken: Seq,
}

impl MarkState {
    fn told(&mut self, on_written: OnMark) {
        self.on_written = Some(on_written);
        self.due.get_or_insert_with(|| Instant::now() + MARK_DELAY);
    }

    /// Takes the waiting mark into `held`, after every record submitted before it: the records
    /// of decisions made before the mark was stored were sent before it, so they are in the
    /// queue by now and are taken first. A commit met on the way is taken instead, last, and
    /// the mark waits for the next round (it must not be cut away with the commit).
    fn take(
        &mut self,
        marks: &Marks,
        rx: &mpsc::Receiver<Job>,
        held: &mut Held,
    ) -> (Vec<Flush>, Option<Commit>) {
        let due = self.due.take();
        marks.told.store(false, Ordering::SeqCst);
        let seq = marks.seq.load(Ordering::SeqCst);
        let (flushes, commit) = take_queued(None, rx, held, self);
        if commit.is_some() {
            self.due = self.due.or(due);
            return (flushes, commit);
        }
        if seq > self.taken {
            self.taken = seq;
            let mark = Record {
                at: Some(chrono::Utc::now()),
                evaluated: Some(seq),
                ..Record::default()
            };
            encode(&[mark], &mut held.lines);
            if let Some(on_written) = self.on_written.clone() {
                held.then.push(Box::new(move || on_written(seq)));
            }
        }
        (flushes, None)
    }
}

type Flush = oneshot::Sender<bool>;

/// Moves `first` and everything queued after it into `held` (marks into `marks`), up to and
/// including a commit, which ends the round; returns the flushes asked for, and the commit.
fn take_queued(
    first: Option<Job>,
    rx: &mpsc::Receiver<Job>,
    held: &mut Held,
    marks: &mut MarkState,
) -> (Vec<Flush>, Option<Commit>) {
    let mut flushes = Vec::new();
    for job in first
        .into_iter()
        .chain(std::iter::from_fn(|| rx.try_recv().ok()))
    {
        match job {
            Job::Write(records, then) => {
                encode(&records, &mut held.lines);
                held.counted += records.len() as u64;
                held.then.extend(then);
            }
            Job::Flush(ack) => flushes.push(ack),
            Job::Mark(on_written) => marks.told(on_written),
            Job::Commit(records, ack) => {
                let from = held.lines.len();
                encode(&records, &mut held.lines);
                return (flushes, Some(Commit { from, ack }));
            }
        }
    }
    (flushes, None)
}

fn run(t: &Thread, rx: &mpsc::Receiver<Job>) {
    let mut held = Held::default();
    let mut mark = MarkState::default();
    // After a failed write: when to try again, and the wait after that one.
    let mut retry: Option<Instant> = None;
    let mut backoff = RETRY_MIN;
    // Under `interval`: when the oldest unsynced write happened.
    let mut unsynced: Option<Instant> = None;
    loop {
        let wake_at = [retry, unsynced.map(|t| t + SYNC_INTERVAL), mark.due]
            .into_iter()
            .flatten()
            .min();
        let first = match wake_at {
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => break,
            },
        };
        let (mut flushes, mut commit) = take_queued(first, rx, &mut held, &mut mark);
        let now = Instant::now();
        let flush = !flushes.is_empty();
        // A waiting mark goes with a flush, with records written anyway, or when it is due.
        if commit.is_none()
            && mark
                .due
                .is_some_and(|due| flush || !held.is_empty() || now >= due)
        {
            let (more, met) = mark.take(&t.marks, rx, &mut held);
            flushes.extend(more);
            commit = met;
        }
        let flush = !flushes.is_empty() || commit.is_some();
        // While a failed write waits for its next try, new records wait with it; a flush or a
        // commit tries at once.
        let mut synced = false;
        let mut failed = None;
        if !held.is_empty() && (retry.is_none_or(|at| now >= at) || flush) {
            let sync = match t.policy {
                FsyncPolicy::Always => true,
                FsyncPolicy::Never => flush,
                FsyncPolicy::Interval => {
                    flush || unsynced.is_some_and(|t| now >= t + SYNC_INTERVAL)
                }
            };
            match held.write(t, sync) {
                Ok(()) => {
                    retry = None;
                    backoff = RETRY_MIN;
                    synced = sync;
                    if !sync && t.policy == FsyncPolicy::Interval {
                        unsynced.get_or_insert(now);
                    }
                }
                Err(cause) => {
                    retry = Some(now + backoff);
                    backoff = (backoff * 2).min(RETRY_MAX);
                    failed = Some(cause);
                }
            }
        }
        if let Some(commit) = commit {
            // A commit that did not land is taken back out: it never lands later.
            if failed.is_some() {
                held.lines.truncate(commit.from);
            }
            let _ = commit.ack.send(failed.map_or(Ok(()), Err));
        }
        if synced {
            unsynced = None;
        }
        // What was written before: synced once the interval is up, or for a flush.
        let sync_due = unsynced.is_some_and(|t| now >= t + SYNC_INTERVAL);
        if sync_due || (flush && !synced && held.is_empty() && t.policy != FsyncPolicy::Always) {
            let _ = t.log.sync();
            unsynced = None;
        }
        for ack in flushes {
            let _ = ack.send(held.is_empty());
        }
    }
    // Every handle is gone: one last try for what is held, with the last mark.
    if mark.due.is_some() {
        mark.take(&t.marks, rx, &mut held);
    }
    if held.is_empty() {
        if unsynced.is_some() {
            let _ = t.log.sync();
        }
    } else if held.write(t, true).is_err() {
        tracing::error!(
            bytes = held.lines.len(),
            "actions journal: records not written before the stop: {}; actions created among \
             them are made again at the next start, later changes of state are lost",
            t.log.status()
        );
    }
}

#[cfg(test)]
mod tests {
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
        // No mark is on disk before a record submitted before it.
        for (at, r) in written.iter().enumerate() {
            if let Some(mark) = r.evaluated {
                let before = written[..at].iter().filter_map(|r| r.id).count() as u64;
                assert_eq!(before, mark / 100, "records before mark {mark}");
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
