//! The journal's threads: the writer thread, which writes what is queued, retries after a
//! failure with backoff, syncs on `interval`'s timer, rotates, and runs the log's [`Keeper`];
//! and the sync thread of `always`, which syncs once for everything written since its last sync
//! (group commit) and only then tells whoever waits for it.

use std::fs::File;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::writer::Writer;
use super::{FLUSH_INTERVAL, Keeper, Record, SYNC_INTERVAL, SyncJob, Waiter};
use crate::duration::Backoff;
use crate::home::FsyncPolicy;

/// What the writer thread is asked to do.
pub(super) enum Job<R> {
    /// Look at the queue, the timers and the keeper now.
    Wake,
    /// Write and sync everything handed over so far, then answer here.
    Flush(oneshot::Sender<Result<(), String>>),
    /// Write these records at once after everything handed over so far, and sync them; or take
    /// them back out when that fails ([`Writer::commit_records`]). Answered here either way.
    Commit(Vec<R>, oneshot::Sender<Result<(), String>>),
    /// Write and sync what is held, then end.
    Stop,
}

/// `always`'s sync thread: its queue and its handle.
pub(super) struct Syncer {
    tx: mpsc::Sender<SyncJob>,
    thread: std::thread::JoinHandle<()>,
}

/// `always`: starts the sync thread and hands its queue to appenders, before the first append,
/// so that every append of the run takes the same path and the file stays in order. None for
/// the other policies, and when the thread cannot be spawned: then the writer thread writes and
/// syncs every batch. `wake` reaches the writer thread (a failed sync hands its waiters back).
pub(super) fn start_syncer<R: Record>(
    shared: &Arc<Mutex<Writer<R>>>,
    wake: mpsc::Sender<Job<R>>,
) -> Option<Syncer> {
    let mut w = shared.lock().unwrap();
    if w.settings.fsync != FsyncPolicy::Always {
        return None;
    }
    let (tx, rx) = mpsc::channel::<SyncJob>();
    let thread_shared = Arc::clone(shared);
    let thread = std::thread::Builder::new()
        .name(format!("{}-sync", w.settings.name.replace(' ', "-")))
        .spawn(move || sync_loop(&thread_shared, &rx, &wake))
        .ok()?;
    w.sync_tx = Some(tx.clone());
    Some(Syncer { tx, thread })
}

/// The sync thread: syncs once for everything written since its last sync (group commit, while
/// appenders go on writing), then tells the waiters. After a failed sync, a waiter that runs
/// once its records land goes back to the writer, which opens the file again and tries anew.
fn sync_loop<R: Record>(
    shared: &Mutex<Writer<R>>,
    rx: &mpsc::Receiver<SyncJob>,
    wake: &mpsc::Sender<Job<R>>,
) {
    let status = shared.lock().unwrap().status.clone();
    let progressed = shared.lock().unwrap().progressed.clone();
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        jobs.extend(rx.try_iter());
        #[cfg(test)]
        if let Some(gate) = status.sync_gate.lock().unwrap().as_ref() {
            let _ = gate.recv();
        }
        let upto = jobs.iter().map(|j| j.upto).max().unwrap_or(0);
        // Jobs come in write order, so the files they name change at most once per rotation.
        let mut synced = Ok(());
        let mut last: Option<&Arc<File>> = None;
        for file in jobs.iter().filter_map(|j| j.file.as_ref()) {
            if last.is_some_and(|l| Arc::ptr_eq(l, file)) {
                continue;
            }
            last = Some(file);
            if let Err(e) = file.sync_data() {
                synced = Err(e);
                break;
            }
        }
        let waiters: Vec<Waiter> = jobs.into_iter().flat_map(|j| j.waiters).collect();
        match synced {
            Ok(()) => {
                status
                    .synced
                    .fetch_max(upto, std::sync::atomic::Ordering::AcqRel);
                if status.is_failing() {
                    let w = shared.lock().unwrap();
                    if !w.has_work() {
                        // A failed sync is over once one succeeds with nothing left unwritten.
                        status.recover(w.settings.name);
                    }
                }
                progressed();
                waiters.into_iter().for_each(Waiter::landed);
            }
            Err(e) => {
                let mut w = shared.lock().unwrap();
                let cause = w.failed(e);
                w.tell(waiters, &Err(cause));
                drop(w);
                let _ = wake.send(Job::Wake);
            }
        }
    }
}

/// Runs on its own thread until [`Job::Stop`] (or every sender is gone), then writes, syncs
/// and returns. `syncer` is [`start_syncer`]'s: the writer thread's own syncs go there too, and
/// it is stopped (every appender answered) before the last sync.
pub(super) fn run<R: Record>(
    shared: Arc<Mutex<Writer<R>>>,
    rx: mpsc::Receiver<Job<R>>,
    mut keeper: impl Keeper<R>,
    syncer: Option<Syncer>,
) {
    let (fsync, retry) = {
        let w = shared.lock().unwrap();
        (w.settings.fsync, w.settings.retry.clone())
    };
    let mut thread = WriterThread {
        shared,
        fsync,
        syncer,
        retry,
        retry_at: None,
        streaming: false,
    };
    loop {
        let deadline = keeper.upkeep();
        let first = match thread.wait(deadline) {
            Some(wait) => match rx.recv_timeout(wait) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => break,
            },
        };
        let mut stop = false;
        let jobs = first.into_iter().chain(rx.try_iter()).filter(|job| {
            stop |= matches!(job, Job::Stop);
            !matches!(job, Job::Stop)
        });
        let due = thread.round(jobs, &mut keeper);
        if stop {
            break;
        }
        if due.rotation {
            Writer::rotate_if_due(&thread.shared);
        }
        if due.sync {
            // `interval`'s timer: appenders keep writing meanwhile.
            let _ = Writer::sync_unlocked(&thread.shared);
        }
    }
    thread.finish(keeper);
}

/// The writer thread's own state ([`run`]).
struct WriterThread<R: Record> {
    shared: Arc<Mutex<Writer<R>>>,
    fsync: FsyncPolicy,
    syncer: Option<Syncer>,
    /// The waits between tries of a failed write.
    retry: Backoff,
    /// After a failed write: the time of the next try (a flush tries at once).
    retry_at: Option<Instant>,
    /// The last round wrote queued records, so more are likely coming: stay on the flush timer
    /// one more round rather than have the next appender wake the thread.
    streaming: bool,
}

/// What is due after a round of the writer thread.
struct Due {
    /// The active file is full: rotate it (unless a failed rotation waits for its retry).
    rotation: bool,
    /// `interval`: the oldest unsynced write is a second old.
    sync: bool,
}

/// The earlier of two times, either optional.
fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<R: Record> WriterThread<R> {
    /// How long to wait for a job before looking again (`keeper`: the keeper's own time);
    /// None: until one comes.
    fn wait(&self, keeper: Option<Instant>) -> Option<Duration> {
        let mut w = self.shared.lock().unwrap();
        let now = Instant::now();
        let pending = w.has_work();
        let failing = w.status.is_failing();
        let mut at = keeper;
        if pending && failing {
            at = earlier(at, Some(self.retry_at.unwrap_or(now)));
        } else if pending || self.streaming {
            at = earlier(at, Some(now + FLUSH_INTERVAL));
        }
        at = earlier(at, w.dirty_since.map(|t| t + SYNC_INTERVAL));
        // A failed rotation is tried again on time, as long as there is a full file to rotate.
        let rotate = w.rotate_retry.filter(|_| w.file.is_some() && w.is_full());
        at = earlier(at, rotate);
        w.armed = (pending && failing) || at.is_some_and(|t| t <= now + FLUSH_INTERVAL);
        w.next_look = at;
        at.map(|t| t.saturating_duration_since(now))
    }

    /// Takes `jobs`, writes what is held (unless a failed write waits for its next try), and
    /// tells or hands to the sync thread whoever waits for it. Says what else is due.
    fn round(&mut self, jobs: impl Iterator<Item = Job<R>>, keeper: &mut impl Keeper<R>) -> Due {
        let mut commits = Vec::new();
        let flushes: Vec<Waiter> = jobs
            .filter_map(|job| match job {
                Job::Flush(ack) => Some(Waiter::Answer(ack)),
                Job::Commit(records, ack) => {
                    commits.push((records, ack));
                    None
                }
                Job::Wake | Job::Stop => None,
            })
            .collect();
        let flush = !flushes.is_empty();
        let now = Instant::now();
        let write = {
            let mut w = self.shared.lock().unwrap();
            if let Some((record, waiter)) = keeper.trailer(flush || w.has_work(), now) {
                w.push(record, waiter);
            }
            let retry_due = self.retry_at.is_none_or(|at| now >= at);
            w.has_work() && (flush || retry_due || !w.status.is_failing())
        };
        let outcome = if write {
            Writer::write_unlocked(&self.shared)
        } else {
            Ok((Vec::new(), false))
        };
        self.streaming = matches!(outcome, Ok((_, true)));
        match outcome {
            Ok((waiters, _)) => {
                if write {
                    self.retry.reset();
                    self.retry_at = None;
                }
                self.landed(waiters, flushes, write);
            }
            Err(cause) => {
                self.retry_at = Some(now + self.retry.next());
                for flush in flushes {
                    flush.failed(&cause);
                }
            }
        }
        for (records, ack) in commits {
            // Tried at once, like a flush, even while a failed write waits for its next try.
            let committed = Writer::commit_records(&self.shared, records);
            match &committed {
                Ok(()) => {
                    self.retry.reset();
                    self.retry_at = None;
                }
                Err(_) => self.retry_at = Some(Instant::now() + self.retry.next()),
            }
            let _ = ack.send(committed);
        }
        let w = self.shared.lock().unwrap();
        Due {
            rotation: w.is_full() && w.file.is_some(),
            sync: w.dirty_since.is_some_and(|t| t.elapsed() >= SYNC_INTERVAL),
        }
    }

    /// Tells `waiters`, whose records are written, once they are as durable as the policy
    /// promises, and answers `flushes` once everything is synced: under `always` through the
    /// sync thread (or here, without one), else at once and after a sync here. Under `always`,
    /// records written with nobody waiting (a retry after a failed write, whose appenders were
    /// already told "kept in memory") are synced too (`wrote`), so that what is durable moves
    /// past them without waiting for the next append.
    fn landed(&mut self, waiters: Vec<Waiter>, flushes: Vec<Waiter>, wrote: bool) {
        if self.fsync != FsyncPolicy::Always {
            waiters.into_iter().for_each(Waiter::landed);
            if !flushes.is_empty() {
                let synced = Writer::sync_unlocked(&self.shared);
                for flush in flushes {
                    match &synced {
                        Ok(()) => flush.landed(),
                        Err(cause) => {
                            flush.failed(cause);
                        }
                    }
                }
            }
            return;
        }
        let mut waiters = waiters;
        waiters.extend(flushes);
        if waiters.is_empty() && !wrote {
            return;
        }
        let job = {
            let w = self.shared.lock().unwrap();
            SyncJob {
                file: w.file.clone(),
                upto: w.status.written.load(std::sync::atomic::Ordering::Acquire),
                waiters,
            }
        };
        let unsent = match &self.syncer {
            Some(syncer) => syncer.tx.send(job).err().map(|mpsc::SendError(job)| job),
            None => Some(job),
        };
        if let Some(job) = unsent {
            // No sync thread (it could not be spawned, or it is gone): sync here.
            let mut w = self.shared.lock().unwrap();
            let result = w.sync().map_err(|e| w.failed(e));
            w.tell(job.waiters, &result);
        }
    }

    /// Stops the sync thread, then writes and syncs what is left (the keeper's trailer last),
    /// and tells the keeper whether everything is on disk.
    fn finish(self, mut keeper: impl Keeper<R>) {
        let WriterThread { shared, syncer, .. } = self;
        if let Some(Syncer { tx, thread }) = syncer {
            // Every appender gets its answer before the last sync below.
            shared.lock().unwrap().sync_tx = None;
            drop(tx);
            let _ = thread.join();
        }
        let mut w = shared.lock().unwrap();
        if let Some((record, waiter)) = keeper.trailer(true, Instant::now()) {
            w.push(record, waiter);
        }
        let flushed = w.commit().and_then(|waiters| match w.sync() {
            Ok(()) => Ok(waiters),
            Err(e) => Err(w.failed(e)),
        });
        let name = w.settings.name;
        let left = w.has_work();
        drop(w);
        match flushed {
            Ok(waiters) => {
                waiters.into_iter().for_each(Waiter::landed);
                keeper.finish(!left);
            }
            Err(cause) => {
                tracing::error!("{name} not flushed at shutdown: {cause}");
                keeper.finish(false);
            }
        }
    }
}
