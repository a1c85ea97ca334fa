//! The journal's writer: group commit, the sync thread of `always`, rotation, failure and
//! retry, and the seq reservation ahead.
//!
//! The [`Writer`] is shared, behind one lock, by the appending tasks and two threads. Appenders
//! encode into its backlog and write it (`always`, `interval`) or leave it queued (`never`).
//! The writer thread ([`Writer::run`]) writes what is queued, retries after a failure, keeps
//! `channels.seq` ahead of the assigned seqs, syncs on `interval`'s timer and rotates. The
//! sync thread of `always` syncs once for everything written since its last sync.
//!
//! Rotation is the writer thread's alone: an appender that fills the file only asks for it.
//! The lock is held for the rename and the open, not for the syncs around them. Syncs run
//! outside the lock and off the appending tasks, except in fallbacks: the writer thread's last
//! sync at shutdown, its syncs when the sync thread could not be spawned, and an appender's
//! when the sync thread has died (rather than never answer).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{FLUSH_INTERVAL, Files, Marks, RESERVE_BLOCK, Reservation, open_for_append};
use crate::inbox::FsyncPolicy;
use crate::inbox::log::Batch;
use crate::message::Seq;

/// With `interval`, the longest a write stays unsynced; after a failed rotation, the wait
/// before the next attempt.
const SYNC_INTERVAL: Duration = Duration::from_secs(1);
/// The largest emptied buffer the writer keeps for the next backlog (a millisecond of a busy
/// stream is far less).
const SPARE_MAX: usize = 1024 * 1024;
/// The first wait before a retry after a failure; it doubles with every failure in a row.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between two retries.
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// What has been written under `always`, for the sync thread.
struct SyncJob {
    /// The file it was written to: the old one until a rotation has switched files, so the
    /// sync thread syncs every file its jobs name.
    file: Option<Arc<File>>,
    /// The highest seq written.
    upto: Seq,
    /// The appenders to answer once it is synced.
    acks: Vec<oneshot::Sender<Result<(), String>>>,
}

/// The sync thread of `always`: syncs once for everything written since its last sync (group
/// commit, while appenders go on writing), then answers the appenders.
fn sync_loop(shared: &Mutex<Writer>, marks: &Marks, rx: mpsc::Receiver<SyncJob>) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        jobs.extend(rx.try_iter());
        #[cfg(test)]
        if let Some(gate) = marks.sync_gate.lock().unwrap().as_ref() {
            let _ = gate.recv();
        }
        let upto = jobs.iter().map(|j| j.upto).max().unwrap_or(0);
        // Jobs come in write order, so the files they name change at most once per rotation.
        let mut result = Ok(());
        let mut last: Option<&Arc<File>> = None;
        for file in jobs.iter().filter_map(|j| j.file.as_ref()) {
            if last.is_some_and(|l| Arc::ptr_eq(l, file)) {
                continue;
            }
            last = Some(file);
            if let Err(e) = file.sync_data() {
                result = Err(shared.lock().unwrap().failed(e));
                break;
            }
        }
        if result.is_ok() {
            marks.synced.fetch_max(upto, Ordering::AcqRel);
            marks.publish(upto);
        }
        for ack in jobs.into_iter().flat_map(|j| j.acks) {
            let _ = ack.send(result.clone());
        }
    }
}

/// `always`'s sync thread (see [`Writer::start_syncer`]): its queue and its handle.
pub struct Syncer {
    tx: mpsc::Sender<SyncJob>,
    thread: std::thread::JoinHandle<()>,
}

/// What the writer thread is asked to do.
pub enum Job {
    /// Write (and sync) the backlog, then answer here.
    Commit(oneshot::Sender<Result<(), String>>),
    /// Look at the backlog, the sync timer, the reservation and the file's size now.
    Wake,
    /// Reserve seqs beyond everything assigned, then acknowledge.
    Reserve {
        /// For seqs shown before they are written (the journal failed to take them): the
        /// reservation is of mode `u` from now on.
        unwritten: bool,
        /// Told once done (or failed).
        ack: oneshot::Sender<()>,
    },
}

/// The writer: the backlog, the active file, failure and retry. Shared, behind one lock, by
/// the appending tasks (which encode into the backlog and write or queue it), the writer
/// thread and the sync thread.
pub struct Writer {
    files: Files,
    file: Option<Arc<File>>,
    policy: FsyncPolicy,
    rotate_bytes: u64,
    size: u64,
    /// Written since the last sync.
    unsynced: bool,
    /// `interval`: when the oldest unsynced write was made; the thread syncs a second later.
    dirty_since: Option<Instant>,
    backlog: Vec<u8>,
    /// `never`: the buffer the thread wrote last, emptied, so that the next backlog does not
    /// grow from nothing again.
    spare: Vec<u8>,
    backlog_last: Seq,
    /// The thread waits with a timeout, so an appender need not wake it.
    armed: bool,
    /// The file a rotation renamed to the backup, until a sync of it succeeds: every sync
    /// syncs it first, so no seq it holds counts as synced before it is.
    retiring: Option<Arc<File>>,
    /// The writer thread has been asked to rotate: appenders need not wake it again for that.
    rotate_asked: bool,
    /// After a failed rotation, the time of the next attempt.
    rotate_retry: Option<Instant>,
    /// `always`: the sync thread's queue, for appenders that write their batch themselves
    /// ([`Writer::write_then_sync`]). None before the writer thread starts it, after it
    /// stops, and when it could not be spawned.
    sync_tx: Option<mpsc::Sender<SyncJob>>,
    marks: Arc<Marks>,
}

impl Writer {
    /// A writer appending to `file` (already opened by [`open_for_append`]).
    pub fn new(
        files: Files,
        file: File,
        policy: FsyncPolicy,
        rotate_bytes: u64,
        marks: Arc<Marks>,
    ) -> Writer {
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        marks.bytes.store(size, Ordering::Relaxed);
        Writer {
            files,
            file: Some(Arc::new(file)),
            policy,
            rotate_bytes: rotate_bytes.max(1),
            size,
            unsynced: false,
            dirty_since: None,
            backlog: Vec::new(),
            spare: Vec::new(),
            backlog_last: 0,
            armed: false,
            retiring: None,
            rotate_asked: false,
            rotate_retry: None,
            sync_tx: None,
            marks,
        }
    }

    /// Encodes `batch` straight into the backlog, after what is there already (an appender
    /// then writes or queues it).
    pub fn take(&mut self, batch: &Batch<'_>) {
        batch.encode(&mut self.backlog);
        self.backlog_last = self.backlog_last.max(batch.last());
        self.marks
            .backlog_bytes
            .store(self.backlog.len(), Ordering::Relaxed);
    }

    /// Adds encoded records to the backlog, which then holds the records up to `last`.
    #[cfg(test)]
    fn enqueue(&mut self, bytes: &[u8], last: Seq) {
        self.backlog.extend_from_slice(bytes);
        self.backlog_last = self.backlog_last.max(last);
        self.marks
            .backlog_bytes
            .store(self.backlog.len(), Ordering::Relaxed);
    }

    /// `interval` (and `never` while the journal fails): writes the backlog now, from the
    /// appending task. Also says whether the caller must wake the thread: for its sync timer,
    /// to retry after a failure, or to rotate the file this write filled.
    pub fn write_now(&mut self) -> (Result<(), String>, bool) {
        let result = self.commit();
        let arm = (result.is_err() || self.dirty_since.is_some())
            && !std::mem::replace(&mut self.armed, true);
        let rotate = self.ask_rotation();
        (result, arm || rotate)
    }

    /// `always`: writes the backlog now, from the appending task, and shows it (as far as the
    /// reservation covers it); the sync thread answers `ack` once they are synced, with one
    /// fsync for everything written since its last (group commit). So the message a wait is
    /// woken for never waits for another thread to be scheduled first.
    ///
    /// `Ok(wake)`: whether the caller must wake the writer thread, to rotate the file this
    /// write filled or, after a failed write, to retry it. A failed write answers `ack` with
    /// the cause at once and keeps the bytes for the writer thread's retries. `Err(ack)` when
    /// there is no sync thread: the caller leaves the backlog to the writer thread instead
    /// ([`Job::Commit`]).
    pub fn write_then_sync(
        &mut self,
        ack: oneshot::Sender<Result<(), String>>,
    ) -> Result<bool, oneshot::Sender<Result<(), String>>> {
        if self.sync_tx.is_none() {
            return Err(ack);
        }
        if let Err(cause) = self.commit() {
            let _ = ack.send(Err(cause));
            return Ok(!std::mem::replace(&mut self.armed, true));
        }
        let job = SyncJob {
            file: self.file.clone(),
            upto: self.marks.written.load(Ordering::Acquire),
            acks: vec![ack],
        };
        let sent = self.sync_tx.as_ref().map(|tx| tx.send(job));
        if let Some(Err(mpsc::SendError(job))) = sent {
            // The sync thread is gone: sync here rather than never answer.
            self.sync_tx = None;
            let result = self.sync().map_err(|e| self.failed(e));
            if result.is_ok() {
                self.marks
                    .publish(self.marks.synced.load(Ordering::Acquire));
            }
            for ack in job.acks {
                let _ = ack.send(result.clone());
            }
        }
        Ok(self.ask_rotation())
    }

    /// `never`: leaves the backlog to the thread, which writes it within [`FLUSH_INTERVAL`].
    /// True when the caller must wake the thread.
    pub fn queued(&mut self) -> bool {
        !std::mem::replace(&mut self.armed, true)
    }

    /// After an appender's write: true, once, when the file has reached its size, for the
    /// caller to wake the writer thread, which rotates it.
    fn ask_rotation(&mut self) -> bool {
        self.size >= self.rotate_bytes && !std::mem::replace(&mut self.rotate_asked, true)
    }

    /// `always`: starts the sync thread and hands its queue to appenders. Called before the
    /// first append: every append of the run then takes the same path, so the journal stays
    /// in seq order (a batch queued for the writer thread could land after one written by an
    /// appender that came later). None for the other policies, and when the thread cannot be
    /// spawned: then the writer thread writes and syncs every batch.
    pub fn start_syncer(shared: &Arc<Mutex<Writer>>) -> Option<Syncer> {
        let mut w = shared.lock().unwrap();
        if w.policy != FsyncPolicy::Always {
            return None;
        }
        let (tx, rx) = mpsc::channel::<SyncJob>();
        let (thread_shared, marks) = (Arc::clone(shared), Arc::clone(&w.marks));
        let thread = std::thread::Builder::new()
            .name("journal-sync".into())
            .spawn(move || sync_loop(&thread_shared, &marks, rx))
            .ok()?;
        w.sync_tx = Some(tx.clone());
        Some(Syncer { tx, thread })
    }

    /// Runs on its own thread until every sender is gone, then writes, syncs and returns.
    /// `syncer` is [`Writer::start_syncer`]'s: the writer thread's own syncs go there too,
    /// and it is stopped (every appender answered) before the last sync.
    pub fn run(
        shared: Arc<Mutex<Writer>>,
        rx: mpsc::Receiver<Job>,
        reservation: File,
        syncer: Option<Syncer>,
    ) {
        let (marks, policy) = {
            let w = shared.lock().unwrap();
            (w.marks.clone(), w.policy)
        };
        let mut thread = WriterThread {
            reserver: Reserver {
                file: reservation,
                failing: false,
                acks: Vec::new(),
                unwritten: policy == FsyncPolicy::Never,
            },
            shared,
            marks,
            policy,
            syncer,
            backoff: BACKOFF_MIN,
            streaming: false,
        };
        loop {
            thread.reserver.step(&thread.marks);
            let first = match thread.wait() {
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
            let due = thread.round(first.into_iter().chain(rx.try_iter()));
            if due.rotation {
                Writer::rotate_if_due(&thread.shared);
            }
            if due.sync {
                // `interval`'s timer: appenders keep writing meanwhile.
                let _ = Writer::sync_unlocked(&thread.shared);
            }
        }
        thread.finish();
    }

    /// `never`: writes the backlog with the lock released during the `write(2)`, so appenders
    /// queueing meanwhile never wait for the disk. Falls back to [`Writer::commit`] when the
    /// file must be (re)opened or the journal is failing.
    fn flush_unlocked(shared: &Mutex<Writer>) -> Result<(), String> {
        let (bytes, last, file, size) = {
            let mut w = shared.lock().unwrap();
            if w.backlog.is_empty() {
                return Ok(());
            }
            match w.file.clone() {
                Some(file) if !w.marks.is_failing.load(Ordering::Acquire) => {
                    let spare = std::mem::take(&mut w.spare);
                    let bytes = std::mem::replace(&mut w.backlog, spare);
                    w.marks.backlog_bytes.store(0, Ordering::Relaxed);
                    (bytes, w.backlog_last, file, w.size)
                }
                _ => return w.commit(),
            }
        };
        let outcome = (&*file).write_all(&bytes);
        let mut w = shared.lock().unwrap();
        match outcome {
            Ok(()) => {
                w.size += bytes.len() as u64;
                w.unsynced = true;
                w.marks.written.fetch_max(last, Ordering::AcqRel);
                w.marks.bytes.store(w.size, Ordering::Relaxed);
                w.marks.publish(last);
                if bytes.capacity() <= SPARE_MAX {
                    let mut bytes = bytes;
                    bytes.clear();
                    w.spare = bytes;
                }
                Ok(())
            }
            Err(e) => {
                // Cut what part did land, and put the bytes back in front of what came since.
                let _ = file.set_len(size);
                let mut back = bytes;
                back.extend_from_slice(&w.backlog);
                w.backlog = back;
                let len = w.backlog.len();
                w.marks.backlog_bytes.store(len, Ordering::Relaxed);
                Err(w.failed(e))
            }
        }
    }

    /// Writes the backlog; on success the journal is no longer failing.
    fn commit(&mut self) -> Result<(), String> {
        if self.backlog.is_empty() {
            return Ok(());
        }
        match self.write_backlog() {
            Ok(()) => {
                if self.marks.is_failing.swap(false, Ordering::AcqRel) {
                    let cause = self.marks.failing.lock().unwrap().take();
                    tracing::info!(
                        previous = cause.unwrap_or_default(),
                        "journal writes recovered"
                    );
                }
                self.marks
                    .publish(self.marks.written.load(Ordering::Acquire));
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    fn write_backlog(&mut self) -> std::io::Result<()> {
        if self.file.is_none() {
            let (file, _) = open_for_append(&self.files.active)?;
            self.size = file.metadata()?.len();
            self.file = Some(Arc::new(file));
        }
        let mut file: &File = self.file.as_deref().expect("opened above");
        if let Err(e) = file.write_all(&self.backlog) {
            // Cut what part of the batch did land, so a retry cannot duplicate it.
            let _ = file.set_len(self.size);
            return Err(e);
        }
        self.size += self.backlog.len() as u64;
        self.backlog.clear();
        self.marks.backlog_bytes.store(0, Ordering::Relaxed);
        self.marks
            .written
            .fetch_max(self.backlog_last, Ordering::AcqRel);
        self.unsynced = true;
        match self.policy {
            // Shown once written, as far as the reservation covers it: a crash of this process
            // can no longer lose it, and a wait need not sit behind the sync, which the sync
            // thread makes (`sync_loop`) while this one writes what comes next.
            FsyncPolicy::Always => self.marks.publish(self.backlog_last),
            FsyncPolicy::Interval => {
                self.dirty_since.get_or_insert_with(Instant::now);
            }
            FsyncPolicy::Never => {}
        }
        self.marks.bytes.store(self.size, Ordering::Relaxed);
        Ok(())
    }

    /// Syncs what is written, under the lock (the writer thread's fallbacks and its last
    /// sync): the retiring file first, then the active one.
    fn sync(&mut self) -> std::io::Result<()> {
        if let Some(old) = &self.retiring {
            old.sync_all()?;
            self.retiring = None;
        }
        if let Some(file) = &self.file
            && self.unsynced
        {
            file.sync_data()?;
        }
        self.unsynced = false;
        self.dirty_since = None;
        self.marks
            .synced
            .fetch_max(self.marks.written.load(Ordering::Acquire), Ordering::AcqRel);
        Ok(())
    }

    /// Syncs everything written so far with the lock released during the syncs (the retiring
    /// file first, then the active one), so appenders go on writing meanwhile; then marks it
    /// synced and shows it. Nothing is synced while the file is closed after a failure.
    fn sync_unlocked(shared: &Mutex<Writer>) -> Result<(), String> {
        let (retiring, file, upto) = {
            let w = shared.lock().unwrap();
            if w.unsynced && w.file.is_none() {
                return Ok(());
            }
            let file = w.file.clone().filter(|_| w.unsynced);
            (
                w.retiring.clone(),
                file,
                w.marks.written.load(Ordering::Acquire),
            )
        };
        let synced = retiring
            .as_deref()
            .map_or(Ok(()), File::sync_all)
            .and_then(|()| file.as_deref().map_or(Ok(()), File::sync_data));
        let mut w = shared.lock().unwrap();
        match synced {
            Ok(()) => {
                if let (Some(synced), Some(old)) = (&retiring, &w.retiring)
                    && Arc::ptr_eq(synced, old)
                {
                    w.retiring = None;
                }
                w.marks.synced.fetch_max(upto, Ordering::AcqRel);
                let more = w.marks.written.load(Ordering::Acquire) > upto;
                w.unsynced = more;
                w.dirty_since = (more && w.policy == FsyncPolicy::Interval).then(Instant::now);
                w.marks.publish(upto);
                Ok(())
            }
            Err(e) => Err(w.failed(e)),
        }
    }

    /// On the writer thread: rotates the active file to the backup once it has reached its
    /// size. The writer's lock is held only for the rename and the open; the old file is
    /// synced before (most of it, while appenders still write to it) and after (the rest,
    /// while they write to the new one), outside the lock. A failed rotation is reported like
    /// a failed write and tried again [`SYNC_INTERVAL`] later.
    pub(super) fn rotate_if_due(shared: &Mutex<Writer>) {
        let file = {
            let w = shared.lock().unwrap();
            let due =
                w.size >= w.rotate_bytes && w.rotate_retry.is_none_or(|t| Instant::now() >= t);
            match &w.file {
                Some(file) if due => file.clone(),
                _ => return,
            }
        };
        let _ = file.sync_data();
        let switched = {
            let mut w = shared.lock().unwrap();
            let switched = w.switch_files();
            match &switched {
                Ok(_) => {
                    w.rotate_asked = false;
                    w.rotate_retry = None;
                }
                Err(_) => {
                    // The next appender to write asks again, and the thread waits for the
                    // retry's time.
                    w.rotate_asked = false;
                    w.rotate_retry = Some(Instant::now() + SYNC_INTERVAL);
                }
            }
            switched.map_err(|e| w.failed(e))
        };
        if let Ok(Some(dir)) = switched {
            let _ = Writer::sync_unlocked(shared);
            if let Ok(dir) = File::open(&dir) {
                let _ = dir.sync_all();
            }
        }
    }

    /// Renames the active file to the backup and opens a new active file; no sync. The old
    /// file becomes `retiring`. Returns the directory to sync, or None when there is nothing
    /// to rotate (the file is closed, or not full).
    fn switch_files(&mut self) -> std::io::Result<Option<std::path::PathBuf>> {
        let Some(old) = self.file.clone().filter(|_| self.size >= self.rotate_bytes) else {
            return Ok(None);
        };
        std::fs::rename(&self.files.active, &self.files.backup)?;
        // The old handle now writes into the backup: nothing goes through it again.
        self.file = None;
        self.retiring = Some(old);
        let (file, _) = open_for_append(&self.files.active)?;
        self.file = Some(Arc::new(file));
        self.size = 0;
        self.marks.bytes.store(0, Ordering::Relaxed);
        tracing::info!(backup = %self.files.backup.display(), "journal rotated");
        Ok(Some(
            self.files
                .active
                .parent()
                .map_or_else(|| Path::new(".").to_owned(), Path::to_owned),
        ))
    }

    /// Records a failure: logged once per outage, counted, reported. The backlog is kept
    /// whole (the inbox refuses new messages while it is over [`super::MAX_BACKLOG`]).
    fn failed(&mut self, e: std::io::Error) -> String {
        self.marks.errors.fetch_add(1, Ordering::Relaxed);
        let cause = e.to_string();
        let mut failing = self.marks.failing.lock().unwrap();
        if !self.marks.is_failing.swap(true, Ordering::AcqRel) {
            tracing::error!(
                journal = %self.files.active.display(),
                "journal write failed: {cause}; retrying with backoff, messages kept in memory"
            );
        }
        *failing = Some(cause.clone());
        // The file handle may be bad (e.g. it was replaced); reopen on retry.
        self.file = None;
        cause
    }
}

/// The writer thread's own state ([`Writer::run`]).
struct WriterThread {
    shared: Arc<Mutex<Writer>>,
    marks: Arc<Marks>,
    policy: FsyncPolicy,
    syncer: Option<Syncer>,
    reserver: Reserver,
    /// The wait before the next retry of a failed write.
    backoff: Duration,
    /// `never`: the last round wrote something, so more is likely coming; stay on the
    /// flush timer one more round rather than have the next appender wake the thread.
    streaming: bool,
}

impl WriterThread {
    /// How long to wait for a job before looking again; None: until one comes. Appenders
    /// need not wake a thread that waits with a timeout (`armed`).
    fn wait(&self) -> Option<Duration> {
        let mut w = self.shared.lock().unwrap();
        let failing = self.marks.is_failing.load(Ordering::Acquire);
        let wait = if !w.backlog.is_empty() && failing {
            Some(self.backoff)
        } else if !w.backlog.is_empty() || self.streaming {
            Some(FLUSH_INTERVAL)
        } else if self.reserver.failing {
            Some(self.backoff)
        } else {
            w.dirty_since
                .map(|t| SYNC_INTERVAL.saturating_sub(t.elapsed()))
        };
        // A failed rotation is tried again on time, as long as there is a full file to rotate.
        let retry = w
            .rotate_retry
            .filter(|_| w.file.is_some() && w.size >= w.rotate_bytes)
            .map(|t| t.saturating_duration_since(Instant::now()));
        let wait = match (wait, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        w.armed = wait.is_some();
        wait
    }

    /// Takes `jobs`, writes the backlog, and answers or hands to the sync thread whoever
    /// waits for it. Says what else is due, as seen under the lock it holds anyway.
    fn round(&mut self, jobs: impl Iterator<Item = Job>) -> Due {
        let mut w = self.shared.lock().unwrap();
        let mut acks = Vec::new();
        for job in jobs {
            match job {
                Job::Commit(ack) => acks.push(ack),
                Job::Wake => {}
                Job::Reserve { unwritten, ack } => {
                    self.reserver.unwritten |= unwritten;
                    self.reserver.acks.push(ack);
                }
            }
        }
        let marks = &self.marks;
        let written_before = marks.written.load(Ordering::Acquire);
        let result = if self.policy == FsyncPolicy::Never {
            // Appenders queue under this lock: write without holding it.
            drop(w);
            let result = Writer::flush_unlocked(&self.shared);
            w = self.shared.lock().unwrap();
            result
        } else {
            w.commit()
        };
        let wrote = marks.written.load(Ordering::Acquire) > written_before;
        // `always`: what was written, and the appenders waiting for it, go to the sync
        // thread; they are acknowledged once it has synced.
        let to_sync =
            (self.policy == FsyncPolicy::Always && result.is_ok() && (wrote || !acks.is_empty()))
                .then(|| SyncJob {
                    file: w.file.clone(),
                    upto: marks.written.load(Ordering::Acquire),
                    acks: std::mem::take(&mut acks),
                });
        self.streaming = self.policy == FsyncPolicy::Never && wrote;
        let due = Due {
            rotation: w.size >= w.rotate_bytes && w.file.is_some(),
            sync: w.dirty_since.is_some_and(|t| t.elapsed() >= SYNC_INTERVAL),
        };
        drop(w);
        self.backoff = match result {
            Ok(()) => BACKOFF_MIN,
            Err(_) => (self.backoff * 2).min(BACKOFF_MAX),
        };
        for ack in acks {
            let _ = ack.send(result.clone());
        }
        let unsent = to_sync.and_then(|job| match &self.syncer {
            Some(syncer) => syncer.tx.send(job).err().map(|mpsc::SendError(job)| job),
            None => Some(job),
        });
        if let Some(job) = unsent {
            // No sync thread (it could not be spawned, or it is gone): sync here.
            let mut w = self.shared.lock().unwrap();
            let result = w.sync().map_err(|e| w.failed(e));
            drop(w);
            for ack in job.acks {
                let _ = ack.send(result.clone());
            }
        }
        due
    }

    /// Stops the sync thread, then writes and syncs what is left, and shrinks the reservation
    /// back when everything handed out is synced.
    fn finish(self) {
        let WriterThread {
            shared,
            marks,
            syncer,
            reserver,
            ..
        } = self;
        if let Some(Syncer { tx, thread }) = syncer {
            // Every appender gets its answer before the last sync below. No appender is left
            // to send (every sender of `rx` is gone), so the appenders' handle goes too.
            shared.lock().unwrap().sync_tx = None;
            drop(tx);
            let _ = thread.join();
        }
        let mut w = shared.lock().unwrap();
        match w
            .commit()
            .and_then(|()| w.sync().map_err(|e| e.to_string()))
        {
            Ok(()) => {
                // Everything handed out is synced: no seq needs reserving past it, so a clean
                // restart continues without a gap.
                let synced = marks.synced.load(Ordering::Acquire);
                if synced >= marks.assigned.load(Ordering::Acquire)
                    && Reservation::now(synced, synced, true)
                        .write(&reserver.file)
                        .is_ok()
                {
                    marks.reserved.store(synced, Ordering::Release);
                }
            }
            Err(cause) => tracing::error!("journal not flushed at shutdown: {cause}"),
        }
    }
}

/// What is due after a round of the writer thread.
struct Due {
    /// The active file is full: rotate it (unless a failed rotation waits for its retry).
    rotation: bool,
    /// `interval`: the oldest unsynced write is a second old.
    sync: bool,
}

/// The writer thread's hold on `channels.seq`: it reserves ahead of the assigned seqs, and on
/// demand before an append shows seqs past the reservation.
struct Reserver {
    file: File,
    /// The last write of the reservation failed.
    failing: bool,
    /// Appenders waiting for a reservation.
    acks: Vec<oneshot::Sender<()>>,
    /// Seqs may be shown before they are written: always with `never`, and from the first
    /// reservation asked for a message the journal failed to take (for the rest of the run).
    unwritten: bool,
}

impl Reserver {
    /// Reserves ahead (every policy: `always` shows a record once written, before its sync)
    /// or on demand, outside the writer's lock; then answers whoever asked.
    fn step(&mut self, marks: &Marks) {
        let assigned = marks.assigned.load(Ordering::Acquire);
        let reserved = marks.reserved.load(Ordering::Acquire);
        let ahead = assigned + RESERVE_BLOCK / 2 > reserved;
        let asked = !self.acks.is_empty()
            && (assigned > reserved
                || (self.unwritten && assigned > marks.reserved_unwritten.load(Ordering::Acquire)));
        // A failed write or sync may leave shown records out of the page cache too: from
        // now on, a restart must not count on it.
        let degraded = !self.unwritten && marks.is_failing.load(Ordering::Acquire);
        self.unwritten |= degraded;
        if ahead || asked || degraded {
            let upto = assigned + RESERVE_BLOCK;
            let floor = marks.written.load(Ordering::Acquire);
            match Reservation::now(upto, floor, !self.unwritten).write(&self.file) {
                Ok(()) => {
                    marks.reserved.fetch_max(upto, Ordering::AcqRel);
                    if self.unwritten {
                        marks.reserved_unwritten.fetch_max(upto, Ordering::AcqRel);
                    }
                    // `always`: what an appender wrote past the old reservation may show
                    // now, before its sync.
                    marks.publish(marks.written.load(Ordering::Acquire));
                    if std::mem::take(&mut self.failing) {
                        tracing::info!("seq reservation written again");
                    }
                }
                Err(e) if !std::mem::replace(&mut self.failing, true) => {
                    tracing::error!(
                        cause = %e,
                        "cannot reserve seqs in channels.seq; messages not on disk are held back"
                    );
                }
                Err(_) => {}
            }
            marks.reserve_asked.store(false, Ordering::Release);
        }
        for ack in self.acks.drain(..) {
            let _ = ack.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::message::Message;

    impl Writer {
        /// What an `interval` appender does with the record of `seq`.
        fn appended(&mut self, seq: Seq) -> (Result<(), String>, bool) {
            self.enqueue(record(seq).as_bytes(), seq);
            self.write_now()
        }

        /// What an `always` appender does with the record of `seq`.
        fn appended_always(
            &mut self,
            seq: Seq,
            ack: oneshot::Sender<Result<(), String>>,
        ) -> Result<bool, oneshot::Sender<Result<(), String>>> {
            self.enqueue(record(seq).as_bytes(), seq);
            self.write_then_sync(ack)
        }
    }
    use crate::inbox::journal::record;

    #[test]
    fn a_queue_call_without_new_records_keeps_the_backlog_s_last_seq() {
        // `never`: a record encoded straight into the backlog, then an append whose only
        // message repeats an id still queued (no record, no new seq). Writing the backlog must
        // still mark seq 1 written.
        let dir = tempfile::tempdir().unwrap();
        let files = Files::new(dir.path().join("channels.jsonl"));
        let (file, _) = open_for_append(&files.active).unwrap();
        let marks = Arc::new(Marks::new(0, 0, &Reservation::default()));
        let mut w = Writer::new(files, file, FsyncPolicy::Never, 1 << 20, marks.clone());
        let queued: VecDeque<Arc<Message>> =
            VecDeque::from([Arc::new(serde_json::from_str(&record(1)).unwrap())]);
        w.take(&Batch::new(queued.range(..), 1));
        assert!(w.queued(), "the first queue wakes the thread");
        w.take(&Batch::new(queued.range(1..), 0));
        assert!(!w.queued(), "armed already");
        w.commit().unwrap();
        assert_eq!(marks.written.load(Ordering::Acquire), 1);
    }

    /// A writer for `always` on a fresh journal, seqs up to 10 reserved (so a written record
    /// may show before its sync), with `file` as its handle; and the sync thread's queue.
    fn always_writer(
        dir: &Path,
        file: impl FnOnce(&Path) -> File,
    ) -> (Writer, Arc<Marks>, PathBuf, mpsc::Receiver<SyncJob>) {
        let files = Files::new(dir.join("channels.jsonl"));
        let active = files.active.clone();
        drop(open_for_append(&active).unwrap());
        let marks = Arc::new(Marks::new(0, 0, &Reservation::now(10, 0, true)));
        let mut w = Writer::new(
            files,
            file(&active),
            FsyncPolicy::Always,
            1 << 20,
            marks.clone(),
        );
        let (sync_tx, sync_rx) = mpsc::channel();
        w.sync_tx = Some(sync_tx);
        (w, marks, active, sync_rx)
    }

    #[test]
    fn always_writes_from_the_appending_task_and_leaves_the_ack_to_the_sync_thread() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, marks, active, sync_rx) =
            always_writer(dir.path(), |p| open_for_append(p).unwrap().0);
        let (ack, mut acked) = oneshot::channel();
        assert!(matches!(w.appended_always(1, ack), Ok(false)));
        // Written and shown by the time the call returns, on the caller's thread...
        assert_eq!(std::fs::read_to_string(&active).unwrap(), record(1));
        assert_eq!(marks.committed.get(), 1);
        assert_eq!(marks.synced.load(Ordering::Acquire), 0);
        // ...but acknowledged only by the sync thread, which has the job.
        assert!(acked.try_recv().is_err(), "acknowledged before any sync");
        let job = sync_rx
            .try_recv()
            .expect("the sync thread is handed the sync");
        assert_eq!(job.upto, 1);
        for ack in job.acks {
            ack.send(Ok(())).unwrap();
        }
        assert_eq!(acked.try_recv().unwrap(), Ok(()));

        // Without a sync thread the batch is handed back, untouched, for the writer thread.
        w.sync_tx = None;
        let (ack, _acked) = oneshot::channel();
        assert!(w.appended_always(2, ack).is_err());
        assert_eq!(std::fs::read_to_string(&active).unwrap(), record(1));
    }

    #[test]
    fn the_sync_thread_s_queue_is_in_place_when_start_syncer_returns() {
        // Before the first append: had it come later, an append queued for the writer thread
        // could land after one written by an appender that came after it.
        let dir = tempfile::tempdir().unwrap();
        for policy in [
            FsyncPolicy::Always,
            FsyncPolicy::Interval,
            FsyncPolicy::Never,
        ] {
            let files = Files::new(dir.path().join(format!("{policy:?}.jsonl")));
            let (file, _) = open_for_append(&files.active).unwrap();
            let marks = Arc::new(Marks::new(0, 0, &Reservation::default()));
            let shared = Arc::new(Mutex::new(Writer::new(files, file, policy, 1 << 20, marks)));
            let syncer = Writer::start_syncer(&shared);
            let always = policy == FsyncPolicy::Always;
            assert_eq!(syncer.is_some(), always, "{policy:?}");
            assert_eq!(
                shared.lock().unwrap().sync_tx.is_some(),
                always,
                "{policy:?}"
            );
            if let Some(Syncer { tx, thread }) = syncer {
                shared.lock().unwrap().sync_tx = None;
                drop(tx);
                thread.join().unwrap();
            }
        }
    }

    #[test]
    fn a_failed_always_write_answers_at_once_and_the_next_append_lands_it() {
        let dir = tempfile::tempdir().unwrap();
        // A read-only handle: the write fails.
        let (mut w, marks, active, sync_rx) = always_writer(dir.path(), |p| File::open(p).unwrap());
        let (ack, mut acked) = oneshot::channel();
        assert!(
            matches!(w.appended_always(1, ack), Ok(true)),
            "a failure wakes the writer thread, to retry with backoff"
        );
        assert!(matches!(acked.try_recv(), Ok(Err(_))), "told at once");
        assert!(marks.is_failing.load(Ordering::Acquire));
        assert_eq!(marks.committed.get(), 0, "an unwritten record is not shown");
        assert!(sync_rx.try_recv().is_err(), "nothing to sync");
        // The next append writes the kept record first, through a handle opened again.
        let (ack, _acked) = oneshot::channel();
        assert!(matches!(w.appended_always(2, ack), Ok(false)));
        assert_eq!(
            std::fs::read_to_string(&active).unwrap(),
            record(1) + &record(2)
        );
        assert!(!marks.is_failing.load(Ordering::Acquire));
        assert_eq!(marks.committed.get(), 2);
        assert_eq!(sync_rx.try_recv().unwrap().upto, 2);
    }

    #[test]
    fn an_appender_that_fills_the_file_only_asks_the_writer_thread_to_rotate() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::new(dir.path().join("channels.jsonl"));
        let (file, _) = open_for_append(&files.active).unwrap();
        let marks = Arc::new(Marks::new(0, 0, &Reservation::now(10, 0, true)));
        // The second record fills the file.
        let rotate_bytes = record(1).len() as u64 + 1;
        let shared = Arc::new(Mutex::new(Writer::new(
            files.clone(),
            file,
            FsyncPolicy::Interval,
            rotate_bytes,
            marks.clone(),
        )));
        let append = |seq| shared.lock().unwrap().appended(seq);
        assert!(matches!(append(1), (Ok(()), true)), "arms the sync timer");
        assert!(matches!(append(2), (Ok(()), true)), "asks for the rotation");
        assert!(matches!(append(3), (Ok(()), false)), "asked already");
        // Nothing was synced or renamed on the appending side.
        assert!(!files.backup.exists());
        assert_eq!(
            std::fs::read_to_string(&files.active).unwrap(),
            record(1) + &record(2) + &record(3)
        );
        assert_eq!(marks.synced.load(Ordering::Acquire), 0);

        // The writer thread rotates: the old file, synced, becomes the backup.
        Writer::rotate_if_due(&shared);
        assert_eq!(
            std::fs::read_to_string(&files.backup).unwrap(),
            record(1) + &record(2) + &record(3)
        );
        assert_eq!(std::fs::read_to_string(&files.active).unwrap(), "");
        assert_eq!(marks.synced.load(Ordering::Acquire), 3);
        assert!(shared.lock().unwrap().retiring.is_none());
        assert!(matches!(append(4), (Ok(()), false)), "armed, and not full");
        assert!(
            matches!(append(5), (Ok(()), true)),
            "asks for the next rotation"
        );
        assert_eq!(
            std::fs::read_to_string(&files.active).unwrap(),
            record(4) + &record(5)
        );
    }
}
