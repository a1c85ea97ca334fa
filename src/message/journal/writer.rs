//! The journal's writer: the active file, the records handed over and not written yet, who
//! waits for them, and what failed. Shared, behind one lock, by the appending tasks, the writer
//! thread and the sync thread of `always` ([`super::thread`]).
//!
//! Records are either encoded into the backlog by an appender that writes them itself
//! ([`Writer::take`], then [`Writer::write_now`] or [`Writer::write_then_sync`]), or queued as
//! they are ([`Writer::queue`]) for the writer thread, which encodes and writes them outside
//! the lock ([`Writer::write_unlocked`]). The backlog always comes before the queue in the file.
//! Syncs run outside the lock ([`Writer::sync_unlocked`]), except in fallbacks: the writer
//! thread's last sync, its syncs when the sync thread could not be spawned, and an appender's
//! when the sync thread has died (rather than never answer).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Instant;

use tokio::sync::oneshot;

use super::{Record, SYNC_INTERVAL, Settings, Status, SyncJob, Waiter, open_for_append};
use crate::home::FsyncPolicy;

/// The largest emptied buffer the writer keeps for the next backlog (a millisecond of a busy
/// stream is far less).
const SPARE_MAX: usize = 1024 * 1024;

/// What runs when more is written or synced.
pub(super) type Progressed = Arc<dyn Fn() + Send + Sync>;

/// The writer (see the module docs).
pub(super) struct Writer<R> {
    path: PathBuf,
    pub(super) settings: Settings,
    pub(super) file: Option<Arc<File>>,
    /// The active file's length as this process last wrote it: where a failed write is cut.
    pub(super) size: u64,
    /// Written since the last sync.
    unsynced: bool,
    /// `interval`: when the oldest unsynced write was made; the thread syncs a second later.
    pub(super) dirty_since: Option<Instant>,
    /// Encoded and not written yet: kept whole while writes fail.
    backlog: Vec<u8>,
    /// Handed over as they are, after the backlog; the writer thread encodes them.
    queue: Vec<R>,
    /// Emptied buffers kept for the next round, so that they do not grow from nothing again.
    spare: Vec<u8>,
    spare_queue: Vec<R>,
    /// The highest position handed over.
    upto: u64,
    /// Records handed over and not written yet (held through an outage, or on their way).
    unwritten: usize,
    /// Who waits for what is in the backlog and the queue, in order.
    pub(super) waiters: Vec<Waiter>,
    /// The writer thread will look at the queue within [`super::FLUSH_INTERVAL`] (or is waiting
    /// to retry a failed write): an appender that queues need not wake it.
    pub(super) armed: bool,
    /// When the writer thread looks next on its own (None: not until it is woken).
    pub(super) next_look: Option<Instant>,
    /// The writer thread writes what it took, outside the lock.
    in_flight: bool,
    /// The file a rotation renamed to the backup, until a sync of it succeeds: every sync
    /// syncs it first, so nothing it holds counts as synced before it is.
    retiring: Option<Arc<File>>,
    /// The writer thread has been asked to rotate: appenders need not wake it again for that.
    rotate_asked: bool,
    /// After a failed rotation, the time of the next attempt.
    pub(super) rotate_retry: Option<Instant>,
    /// `always`: the sync thread's queue, for appenders that write their records themselves.
    /// None before it starts, after it stops, and when it could not be spawned.
    pub(super) sync_tx: Option<mpsc::Sender<SyncJob>>,
    pub(super) status: Arc<Status>,
    pub(super) progressed: Progressed,
}

impl<R: Record> Writer<R> {
    /// A writer appending to `file`, the active file at `path`.
    pub(super) fn new(
        path: PathBuf,
        file: File,
        settings: Settings,
        status: Arc<Status>,
        progressed: Progressed,
    ) -> Writer<R> {
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        status.bytes.store(size, Ordering::Relaxed);
        Writer {
            path,
            settings,
            file: Some(Arc::new(file)),
            size,
            unsynced: false,
            dirty_since: None,
            backlog: Vec::new(),
            queue: Vec::new(),
            spare: Vec::new(),
            spare_queue: Vec::new(),
            upto: 0,
            unwritten: 0,
            waiters: Vec::new(),
            armed: false,
            next_look: None,
            in_flight: false,
            retiring: None,
            rotate_asked: false,
            rotate_retry: None,
            sync_tx: None,
            status,
            progressed,
        }
    }

    /// Whether anything waits to be written, or anyone for a write.
    pub(super) fn has_work(&self) -> bool {
        !self.backlog.is_empty() || !self.queue.is_empty() || !self.waiters.is_empty()
    }

    /// Encodes `records` (the last at position `upto`) into the backlog, after everything handed
    /// over before, for the caller to write.
    pub(super) fn take<'a>(&mut self, records: impl Iterator<Item = &'a R>, upto: u64)
    where
        R: 'a,
    {
        self.encode_queue();
        for r in records {
            r.encode(&mut self.backlog);
            self.unwritten += 1;
        }
        self.upto = self.upto.max(upto);
        self.status
            .backlog_bytes
            .store(self.backlog.len(), Ordering::Relaxed);
    }

    /// Queues `records` (the last at position `upto`) for the writer thread, `waiter` told once
    /// they land. True when the caller must wake the thread.
    pub(super) fn queue(
        &mut self,
        records: impl Iterator<Item = R>,
        upto: u64,
        waiter: Option<Waiter>,
    ) -> bool {
        let before = self.queue.len();
        self.queue.extend(records);
        self.unwritten += self.queue.len() - before;
        self.upto = self.upto.max(upto);
        self.waiters.extend(waiter);
        !std::mem::replace(&mut self.armed, true)
    }

    /// Adds a record at the end, with who waits for it (a keeper's trailer).
    pub(super) fn push(&mut self, record: R, waiter: Waiter) {
        self.queue.push(record);
        self.unwritten += 1;
        self.waiters.push(waiter);
    }

    /// Records handed over and not written yet.
    pub(super) fn unwritten(&self) -> usize {
        self.unwritten
    }

    fn encode_queue(&mut self) {
        for r in self.queue.drain(..) {
            r.encode(&mut self.backlog);
        }
    }

    /// `interval` (and `never` while the journal fails): writes the backlog now, from the
    /// appending task. Returns the outcome, the waiters whose records landed (to be told once
    /// the lock is released), and whether the caller must wake the writer thread: to arm its
    /// sync timer, to retry after the failure this write started, or to rotate the file it
    /// filled.
    pub(super) fn write_now(&mut self) -> (Result<(), String>, Vec<Waiter>, bool) {
        let was_failing = self.status.is_failing();
        let was_dirty = self.dirty_since.is_some();
        let (result, landed) = match self.commit() {
            Ok(waiters) => (Ok(()), waiters),
            Err(cause) => (Err(cause), Vec::new()),
        };
        let failed = result.is_err() && !was_failing;
        let dirty = !was_dirty
            && self
                .dirty_since
                .is_some_and(|t| self.next_look.is_none_or(|at| at > t + SYNC_INTERVAL));
        let rotate = self.ask_rotation();
        (result, landed, failed || dirty || rotate)
    }

    /// `always`: writes the backlog now, from the appending task, and hands the sync to the sync
    /// thread, which answers `ack` once it is synced, with one fsync for everything written
    /// since its last (group commit).
    ///
    /// `Ok(wake)`: whether the caller must wake the writer thread, to rotate the file this write
    /// filled or, after the failure this write started, to retry it. A failed write answers
    /// `ack` with the cause at once and keeps the bytes for the retries. `Err(ack)` when there
    /// is no sync thread: the caller leaves the backlog to the writer thread instead.
    pub(super) fn write_then_sync(
        &mut self,
        ack: oneshot::Sender<Result<(), String>>,
    ) -> Result<bool, oneshot::Sender<Result<(), String>>> {
        let Some(sync_tx) = self.sync_tx.clone() else {
            return Err(ack);
        };
        let was_failing = self.status.is_failing();
        let mut waiters = match self.commit() {
            Ok(waiters) => waiters,
            Err(cause) => {
                let _ = ack.send(Err(cause));
                return Ok(!was_failing);
            }
        };
        waiters.push(Waiter::Answer(ack));
        let job = SyncJob {
            file: self.file.clone(),
            upto: self.status.written.load(Ordering::Acquire),
            waiters,
        };
        if let Err(mpsc::SendError(job)) = sync_tx.send(job) {
            // The sync thread is gone: sync here rather than never answer.
            self.sync_tx = None;
            let result = self.sync().map_err(|e| self.failed(e));
            self.tell(job.waiters, &result);
        }
        Ok(self.ask_rotation())
    }

    /// Tells `waiters` the outcome `result` of the sync of their records; those that wait for
    /// a try that lands go back to the front of the line.
    pub(super) fn tell(&mut self, waiters: Vec<Waiter>, result: &Result<(), String>) {
        match result {
            Ok(()) => waiters.into_iter().for_each(Waiter::landed),
            Err(cause) => {
                let mut kept: Vec<Waiter> = waiters
                    .into_iter()
                    .filter_map(|w| w.failed(cause))
                    .collect();
                kept.append(&mut self.waiters);
                self.waiters = kept;
            }
        }
    }

    /// After an appender's write: true, once, when the file has reached its size, for the
    /// caller to wake the writer thread, which rotates it.
    fn ask_rotation(&mut self) -> bool {
        self.is_full() && !std::mem::replace(&mut self.rotate_asked, true)
    }

    /// Whether the active file has reached its rotation size.
    pub(super) fn is_full(&self) -> bool {
        self.settings
            .rotation
            .as_ref()
            .is_some_and(|r| self.size >= r.bytes.max(1))
    }

    /// Writes the backlog (queued records encoded first) under the lock. `Ok`: the waiters whose
    /// records are written, for the caller to tell (`always`: once synced). A failure tells the
    /// waiters that want to know and keeps the others, with the bytes, for the next try. While
    /// the journal fails, the file is opened again even with nothing to write, so that a sync
    /// can show it works.
    pub(super) fn commit(&mut self) -> Result<Vec<Waiter>, String> {
        debug_assert!(
            !self.in_flight,
            "an appender writes while the writer thread does"
        );
        self.encode_queue();
        if self.backlog.is_empty() {
            if self.status.is_failing()
                && let Err(e) = self.open()
            {
                return Err(self.fail_waiters(e));
            }
            return Ok(std::mem::take(&mut self.waiters));
        }
        match self.write_backlog() {
            Ok(()) => {
                self.status.recover(self.settings.name);
                (self.progressed)();
                Ok(std::mem::take(&mut self.waiters))
            }
            Err(e) => Err(self.fail_waiters(e)),
        }
    }

    /// Records the failure `e` and tells the waiters that want to know.
    fn fail_waiters(&mut self, e: std::io::Error) -> String {
        let cause = self.failed(e);
        let waiters = std::mem::take(&mut self.waiters);
        self.tell(waiters, &Err(cause.clone()));
        cause
    }

    /// The open active file, opened again after a failure: cut back to what this process
    /// wrote, should a failed write have left more that could not be cut then.
    fn open(&mut self) -> std::io::Result<Arc<File>> {
        if let Some(file) = &self.file {
            return Ok(file.clone());
        }
        let (file, _) = open_for_append(&self.path)?;
        let len = file.metadata()?.len();
        if len > self.size {
            file.set_len(self.size)?;
        } else {
            self.size = len;
        }
        let file = Arc::new(file);
        self.file = Some(file.clone());
        Ok(file)
    }

    fn write_backlog(&mut self) -> std::io::Result<()> {
        let file = self.open()?;
        if let Err(e) = (&*file).write_all(&self.backlog) {
            // Cut what part of it did land, so a retry cannot duplicate it.
            let _ = file.set_len(self.size);
            return Err(e);
        }
        self.wrote(self.backlog.len(), self.upto);
        // The queue is encoded into the backlog before it is written, and nothing is in flight.
        self.unwritten = 0;
        self.backlog.clear();
        self.status.backlog_bytes.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// `len` bytes, up to position `upto`, are written.
    fn wrote(&mut self, len: usize, upto: u64) {
        self.size += len as u64;
        self.unsynced = true;
        if self.settings.fsync == FsyncPolicy::Interval {
            self.dirty_since.get_or_insert_with(Instant::now);
        }
        self.status.written.fetch_max(upto, Ordering::AcqRel);
        self.status.bytes.store(self.size, Ordering::Relaxed);
    }

    /// The writer thread's write: what is queued is taken under the lock, then encoded and
    /// written outside it, so appenders queueing meanwhile never wait for the disk. Falls back
    /// to [`Writer::commit`] when nothing is queued, the file must be opened again or the
    /// journal fails. `Ok`: the waiters whose records are written, and whether queued records
    /// were among them.
    pub(super) fn write_unlocked(shared: &Mutex<Writer<R>>) -> Result<(Vec<Waiter>, bool), String> {
        let (mut bytes, mut queue, waiters, upto, file, size, taken) = {
            let mut w = shared.lock().unwrap();
            let file = match w.file.clone() {
                Some(file) if !w.queue.is_empty() && !w.status.is_failing() => file,
                _ => return w.commit().map(|waiters| (waiters, false)),
            };
            let spare = std::mem::take(&mut w.spare);
            let spare_queue = std::mem::take(&mut w.spare_queue);
            w.in_flight = true;
            w.status.backlog_bytes.store(0, Ordering::Relaxed);
            (
                std::mem::replace(&mut w.backlog, spare),
                std::mem::replace(&mut w.queue, spare_queue),
                std::mem::take(&mut w.waiters),
                w.upto,
                file,
                w.size,
                w.unwritten,
            )
        };
        for r in queue.drain(..) {
            r.encode(&mut bytes);
        }
        let outcome = (&*file).write_all(&bytes);
        let mut w = shared.lock().unwrap();
        w.in_flight = false;
        w.spare_queue = queue;
        match outcome {
            Ok(()) => {
                w.wrote(bytes.len(), upto);
                w.unwritten -= taken;
                (w.progressed)();
                if bytes.capacity() <= SPARE_MAX {
                    bytes.clear();
                    w.spare = bytes;
                }
                Ok((waiters, true))
            }
            Err(e) => {
                // Cut what part did land, and put the bytes back in front of what came since.
                let _ = file.set_len(size);
                bytes.extend_from_slice(&w.backlog);
                w.backlog = bytes;
                let len = w.backlog.len();
                w.status.backlog_bytes.store(len, Ordering::Relaxed);
                let cause = w.failed(e);
                w.tell(waiters, &Err(cause.clone()));
                Err(cause)
            }
        }
    }

    /// On the writer thread: writes `records` at once, after everything handed over before
    /// them (written with them), then syncs, whatever the fsync policy. When the write or the
    /// sync fails, the records are taken back out, so that nothing of them lands later, and the
    /// cause is returned; what came before them is kept and tried again as after any failure.
    /// The write runs under the lock (as an appender's does), the sync outside it.
    pub(super) fn commit_records(shared: &Mutex<Writer<R>>, records: Vec<R>) -> Result<(), String> {
        let (start, end, file, waiters, always) = {
            let mut w = shared.lock().unwrap();
            w.encode_queue();
            let from = w.backlog.len();
            for r in &records {
                r.encode(&mut w.backlog);
            }
            w.unwritten += records.len();
            let before = w.size;
            match w.commit() {
                Ok(waiters) => (
                    before + from as u64,
                    w.size,
                    w.file.clone(),
                    waiters,
                    w.settings.fsync == FsyncPolicy::Always,
                ),
                Err(cause) => {
                    w.backlog.truncate(from);
                    w.unwritten -= records.len();
                    let len = w.backlog.len();
                    w.status.backlog_bytes.store(len, Ordering::Relaxed);
                    return Err(cause);
                }
            }
        };
        // Under `never` and `interval`, what came before is told once written; under `always`,
        // once synced, as ever.
        let waiters = if always {
            waiters
        } else {
            waiters.into_iter().for_each(Waiter::landed);
            Vec::new()
        };
        let synced = Writer::sync_unlocked(shared);
        let mut w = shared.lock().unwrap();
        if synced.is_err() && w.size == end {
            // Nothing written since: cut the records away now, or at the next open.
            if let Some(file) = file {
                let _ = file.set_len(start);
            }
            w.size = start;
            w.status.bytes.store(start, Ordering::Relaxed);
        }
        w.tell(waiters, &synced);
        synced
    }

    /// Syncs what is written, under the lock (the writer thread's fallbacks and its last
    /// sync): the retiring file first, then the active one.
    pub(super) fn sync(&mut self) -> std::io::Result<()> {
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
        self.status.synced.fetch_max(
            self.status.written.load(Ordering::Acquire),
            Ordering::AcqRel,
        );
        (self.progressed)();
        Ok(())
    }

    /// Syncs everything written so far with the lock released during the syncs (the retiring
    /// file first, then the active one), so appenders go on writing meanwhile; then marks it
    /// synced. Nothing is synced while the file is closed after a failure.
    pub(super) fn sync_unlocked(shared: &Mutex<Writer<R>>) -> Result<(), String> {
        let (retiring, file, upto) = {
            let w = shared.lock().unwrap();
            if w.unsynced && w.file.is_none() {
                return Ok(());
            }
            let file = w.file.clone().filter(|_| w.unsynced);
            (
                w.retiring.clone(),
                file,
                w.status.written.load(Ordering::Acquire),
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
                w.status.synced.fetch_max(upto, Ordering::AcqRel);
                let more = w.status.written.load(Ordering::Acquire) > upto;
                w.unsynced = more;
                w.dirty_since =
                    (more && w.settings.fsync == FsyncPolicy::Interval).then(Instant::now);
                (w.progressed)();
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
    pub(super) fn rotate_if_due(shared: &Mutex<Writer<R>>) {
        let file = {
            let w = shared.lock().unwrap();
            let due = w.is_full() && w.rotate_retry.is_none_or(|t| Instant::now() >= t);
            match &w.file {
                Some(file) if due => file.clone(),
                _ => return,
            }
        };
        let _ = file.sync_data();
        let switched = {
            let mut w = shared.lock().unwrap();
            let switched = w.switch_files();
            // The next appender to write asks again; after a failure the thread waits for
            // the retry's time.
            w.rotate_asked = false;
            w.rotate_retry = switched.is_err().then(|| Instant::now() + SYNC_INTERVAL);
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
    fn switch_files(&mut self) -> std::io::Result<Option<PathBuf>> {
        let Some(rotation) = self.settings.rotation.clone() else {
            return Ok(None);
        };
        let Some(old) = self.file.clone().filter(|_| self.is_full()) else {
            return Ok(None);
        };
        std::fs::rename(&self.path, &rotation.backup)?;
        // The old handle now writes into the backup: nothing goes through it again.
        self.file = None;
        self.retiring = Some(old);
        let (file, _) = open_for_append(&self.path)?;
        self.file = Some(Arc::new(file));
        self.size = 0;
        self.status.bytes.store(0, Ordering::Relaxed);
        tracing::info!(backup = %rotation.backup.display(), "{} rotated", self.settings.name);
        Ok(Some(
            self.path
                .parent()
                .map_or_else(|| Path::new(".").to_owned(), Path::to_owned),
        ))
    }

    /// Records a failure: logged once per outage, counted, reported. What is held is kept whole,
    /// and the file is opened again at the next try (its handle may be bad: replaced, say).
    pub(super) fn failed(&mut self, e: std::io::Error) -> String {
        let cause = e.to_string();
        self.status
            .fail(self.settings.name, &self.path, self.settings.kept, &cause);
        self.file = None;
        cause
    }
}
