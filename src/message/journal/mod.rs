//! The journal engine under both of switchboard's logs: the inbox's `channels.jsonl` and the
//! actions' `actions.jsonl`. An append-only file of JSON lines, the record type a parameter
//! ([`Record`]), written by one design:
//!
//! - **Hand-off.** A log either queues its records for the writer thread ([`Journal::queue`]:
//!   never blocks, answered through a [`Waiter`]), or appends them as its fsync policy says
//!   ([`Journal::append`], answered by a [`Landing`]): under `always` and `interval` the
//!   appending task writes them itself, under the writer's lock, so the record a wait is woken
//!   for never waits for another thread to be scheduled; under `never` it queues them and is
//!   answered at once. Queued records are encoded and written by the writer thread outside
//!   the lock, so a queuing task never waits for the disk.
//! - **Group commit.** The writer thread writes everything queued since its last write in one
//!   `write(2)`. Under `always` a sync thread syncs once for everything written since its last
//!   sync, then answers those appenders, while others go on writing; `interval` syncs within a
//!   second of the first unsynced write; `never` syncs at rotation, at a flush and at the end.
//! - **Rotation** (where a log rotates, [`Rotation`]): once the active file passes its size the
//!   writer thread renames it to the one backup, the syncs around the rename outside the lock.
//! - **Failure.** A failed write is cut away from the file, the bytes are kept, in order, and
//!   the file is opened again at the next try; tries follow a [`Backoff`] (a flush tries at
//!   once). The outage is counted, logged when it starts and when it ends, and reported
//!   ([`Status`]). An appender waiting for an answer is told the cause at once; a waiter that
//!   runs "once written" waits for the try that lands.
//! - **Commit** ([`Journal::commit`]): records written and synced at once, after everything
//!   handed over before them, or taken back out of what is held when that fails, so the caller
//!   can refuse what they stand for.
//! - **Upkeep.** A log's own work on the writer thread (the inbox's seq reservation, the actions'
//!   evaluation marks) is a [`Keeper`].
//!
//! Reading, replay and what the records mean are each log's own business.

mod status;
#[cfg(test)]
mod tests;
mod thread;
mod writer;

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::duration::Backoff;
use crate::home::FsyncPolicy;

pub use status::Status;
use thread::Job;
use writer::Writer;

/// With `never` (and for queued records), the longest a queued record waits for its write.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(1);

/// With `interval`, the longest a write stays unsynced; after a failed rotation, the wait
/// before the next attempt.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// One record of a journal.
pub trait Record: Send + 'static {
    /// Appends the record to `out` as one JSON line, its newline included.
    fn encode(&self, out: &mut Vec<u8>);
}

/// How a journal is kept.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How it names itself in the log: `journal`, `actions journal`.
    pub name: &'static str,
    /// What waits in memory while writes fail: `messages`, `actions`.
    pub kept: &'static str,
    /// When it syncs, and when an appender is answered.
    pub fsync: FsyncPolicy,
    /// Whether its active file rotates, and where to.
    pub rotation: Option<Rotation>,
    /// The waits between the tries of a failed write.
    pub retry: Backoff,
}

/// The active file's one backup, and the size at which the active file becomes it.
#[derive(Clone, Debug)]
pub struct Rotation {
    /// `channels.jsonl.1`.
    pub backup: PathBuf,
    /// The size at which the active file is rotated.
    pub bytes: u64,
}

/// Who waits for queued records.
pub enum Waiter {
    /// Told the outcome of the try that takes the records: once they are written (`always`:
    /// synced), or the cause of the failure at once (the records stay kept for the retries).
    Answer(oneshot::Sender<Result<(), String>>),
    /// Runs once the records are written (`always`: synced), however many tries that takes, in
    /// the order of the hand-offs, on the journal's thread: it must be quick and must not take a
    /// lock its caller holds.
    Then(Box<dyn FnOnce() + Send>),
}

impl Waiter {
    /// The records landed.
    fn landed(self) {
        match self {
            Waiter::Answer(ack) => {
                let _ = ack.send(Ok(()));
            }
            Waiter::Then(then) => then(),
        }
    }

    /// The try failed with `cause`: an answer is told; a `Then` is handed back to wait for the
    /// next try.
    fn failed(self, cause: &str) -> Option<Waiter> {
        match self {
            Waiter::Answer(ack) => {
                let _ = ack.send(Err(cause.to_owned()));
                None
            }
            then @ Waiter::Then(_) => Some(then),
        }
    }
}

/// What has been written under `always`, for the sync thread.
struct SyncJob {
    /// The file it was written to: the old one until a rotation has switched files, so the
    /// sync thread syncs every file its jobs name.
    file: Option<Arc<File>>,
    /// The highest position written.
    upto: u64,
    /// Who to tell once it is synced.
    waiters: Vec<Waiter>,
}

/// How an appender learns that its records are as durable as the fsync policy promises, or why
/// not.
pub enum Landing {
    /// Decided at once.
    Now(Result<(), String>),
    /// A thread of the journal answers (after a sync, or a write it retries).
    Later(oneshot::Receiver<Result<(), String>>),
}

/// The journal went away without answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

impl Landing {
    /// The outcome; [`Closed`] when the journal went away without answering.
    pub async fn outcome(self) -> Result<Result<(), String>, Closed> {
        match self {
            Landing::Now(result) => Ok(result),
            Landing::Later(rx) => rx.await.map_err(|_| Closed),
        }
    }
}

/// A log's own work on the journal's writer thread. Every method runs there; the defaults do
/// nothing.
pub trait Keeper<R>: Send + 'static {
    /// Before each round, outside every lock. Returns the latest time of the next round.
    fn upkeep(&mut self) -> Option<Instant> {
        None
    }

    /// At each round, under the writer's lock, after everything handed over before: a record to
    /// write after them (and who waits for it). `busy`: the round writes or flushes anyway.
    fn trailer(&mut self, busy: bool, now: Instant) -> Option<(R, Waiter)> {
        let _ = (busy, now);
        None
    }

    /// At the end, after the last write and sync; `flushed`: everything is on disk.
    fn finish(&mut self, flushed: bool) {
        let _ = flushed;
    }
}

impl<R> Keeper<R> for () {}

/// A handle on a journal: its writer, its thread and its status. Clones share them; the writer
/// thread ends, after writing and syncing what it holds, at [`Journal::close`] or when the last
/// handle is dropped.
pub struct Journal<R: Record> {
    shared: Arc<Shared<R>>,
}

impl<R: Record> Clone for Journal<R> {
    fn clone(&self) -> Self {
        Journal {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<R: Record> {
    writer: Arc<Mutex<Writer<R>>>,
    status: Arc<Status>,
    fsync: FsyncPolicy,
    /// The writer thread's queue; taken at close, which ends the thread.
    tx: Mutex<Option<mpsc::Sender<Job<R>>>>,
    done: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl<R: Record> Drop for Shared<R> {
    /// The last handle is gone: the writer thread writes and syncs what it holds, then ends.
    fn drop(&mut self) {
        if let Some(tx) = self.tx.get_mut().unwrap().take() {
            let _ = tx.send(Job::Stop);
        }
    }
}

impl<R: Record> Journal<R> {
    /// Starts the journal on `file`, the active file at `path` opened by [`open_for_append`],
    /// reporting to `status` (whose positions start at the last record on disk). `keeper` runs
    /// on the writer thread; `progressed` runs whenever more is written or synced (under the
    /// writer's lock: it must be quick).
    pub fn start(
        path: PathBuf,
        file: File,
        settings: Settings,
        status: Arc<Status>,
        keeper: impl Keeper<R>,
        progressed: impl Fn() + Send + Sync + 'static,
    ) -> std::io::Result<Journal<R>> {
        let fsync = settings.fsync;
        let name = settings.name;
        let progressed: writer::Progressed = Arc::new(progressed);
        let writer = Arc::new(Mutex::new(Writer::new(
            path,
            file,
            settings,
            status.clone(),
            progressed,
        )));
        let (tx, rx) = mpsc::channel();
        let syncer = thread::start_syncer(&writer, tx.clone());
        let thread_writer = writer.clone();
        let done = std::thread::Builder::new()
            .name(format!("{}-writer", name.replace(' ', "-")))
            .spawn(move || thread::run(thread_writer, rx, keeper, syncer))?;
        Ok(Journal {
            shared: Arc::new(Shared {
                writer,
                status,
                fsync,
                tx: Mutex::new(Some(tx)),
                done: Mutex::new(Some(done)),
            }),
        })
    }

    /// What the journal reports.
    pub fn status(&self) -> &Arc<Status> {
        &self.shared.status
    }

    /// Its fsync policy.
    pub fn fsync(&self) -> FsyncPolicy {
        self.shared.fsync
    }

    /// Asks the writer thread to look at its work now (its keeper's too); false once it is gone.
    pub fn wake(&self) -> bool {
        self.send(Job::Wake)
    }

    fn send(&self, job: Job<R>) -> bool {
        self.shared
            .tx
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|tx| tx.send(job).is_ok())
    }

    /// Appends `records` (the last of them at position `upto`, 0 for none) as the fsync policy
    /// says, after everything handed over before:
    /// - `always`: written now, by the caller; answered once synced (group commit);
    /// - `interval`: written now; answered with the write's outcome (synced within a second);
    /// - `never`: queued and answered at once; while the journal fails, written now like
    ///   `interval`, so that the answer says whether this very retry landed.
    ///
    /// The caller hands over in position order (it holds its own lock around the call).
    pub fn append<'a>(&self, records: impl Iterator<Item = &'a R>, upto: u64) -> Landing
    where
        R: Clone,
    {
        let fsync = self.shared.fsync;
        let mut w = self.shared.writer.lock().unwrap();
        match fsync {
            FsyncPolicy::Always => {
                let (ack, rx) = oneshot::channel();
                w.take(records, upto);
                let written = w.write_then_sync(ack);
                drop(w);
                match written {
                    Ok(true) => {
                        self.wake();
                    }
                    Ok(false) => {}
                    // No sync thread: the writer thread writes and syncs. Should it be gone too,
                    // the dropped `ack` answers `Closed`.
                    Err(ack) => {
                        self.send(Job::Flush(ack));
                    }
                }
                Landing::Later(rx)
            }
            FsyncPolicy::Interval | FsyncPolicy::Never => {
                let (result, landed, wake) =
                    if fsync == FsyncPolicy::Never && !self.shared.status.is_failing() {
                        (Ok(()), Vec::new(), w.queue(records.cloned(), upto, None))
                    } else {
                        w.take(records, upto);
                        w.write_now()
                    };
                drop(w);
                landed.into_iter().for_each(Waiter::landed);
                if wake {
                    self.wake();
                }
                Landing::Now(result)
            }
        }
    }

    /// Queues `records` for the writer thread, after everything handed over before; `waiter`
    /// is told once they are written (`always`: synced). Never blocks on the disk.
    pub fn queue(&self, records: Vec<R>, waiter: Option<Waiter>) {
        let wake = self
            .shared
            .writer
            .lock()
            .unwrap()
            .queue(records.into_iter(), 0, waiter);
        if wake {
            self.wake();
        }
    }

    /// Writes `records` at once, after everything handed over before the call, and syncs them,
    /// whatever the fsync policy; when the write or the sync fails they are taken back out
    /// (nothing of them lands later) and the cause is returned. What was handed over before is
    /// written with them, or kept and tried again as after any failure. For what must be refused
    /// rather than kept in memory: a person's answer. Runs on the writer thread.
    pub async fn commit(&self, records: Vec<R>) -> Result<(), String> {
        let (ack, done) = oneshot::channel();
        if !self.send(Job::Commit(records, ack)) {
            return Err("the journal is closed".into());
        }
        done.await
            .unwrap_or_else(|_| Err("the journal is closed".into()))
    }

    /// Records handed over and not written yet: what a stop now would lose.
    pub fn unwritten(&self) -> usize {
        self.shared.writer.lock().unwrap().unwritten()
    }

    /// Writes and syncs everything handed over before the call, at once even while a failed
    /// write waits for its next try. `Ok` once it is on disk, else the cause (what is held stays
    /// held and is tried again).
    pub async fn flush(&self) -> Result<(), String> {
        let (ack, done) = oneshot::channel();
        if !self.send(Job::Flush(ack)) {
            return Err("the journal is closed".into());
        }
        done.await
            .unwrap_or_else(|_| Err("the journal is closed".into()))
    }

    /// Ends the writer thread once it has written and synced what it holds; the future ends when
    /// it has. Nothing handed over afterwards is written.
    pub fn close(&self) -> impl Future<Output = ()> + Send + 'static {
        if let Some(tx) = self.shared.tx.lock().unwrap().take() {
            let _ = tx.send(Job::Stop);
        }
        let done = self.shared.done.lock().unwrap().take();
        async move {
            if let Some(done) = done {
                let _ = tokio::task::spawn_blocking(move || done.join()).await;
            }
        }
    }
}

/// Opens the active file for appending (mode 0600), cutting a torn last line left by a crash.
/// Returns the file and the number of bytes cut.
pub fn open_for_append(path: &Path) -> std::io::Result<(File, u64)> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok((file, 0));
    }
    // Find the last newline.
    let mut pos = len;
    let mut buf = vec![0u8; 4096];
    while pos > 0 {
        let n = (pos as usize).min(buf.len());
        pos -= n as u64;
        file.seek(SeekFrom::Start(pos))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            let keep = pos + i as u64 + 1;
            if keep < len {
                file.set_len(keep)?;
                file.sync_all()?;
            }
            return Ok((file, len - keep));
        }
    }
    file.set_len(0)?;
    file.sync_all()?;
    Ok((file, len))
}
