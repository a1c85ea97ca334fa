//! The inbox journal: `channels.jsonl` (+ one backup, `channels.jsonl.1`) and the seq
//! reservation `channels.seq`.
//!
//! Owns the files. With `fsync = always`, the appending task writes its batch
//! itself under the writer's lock and shows it (no thread hand-off before a wait
//! can see it); a sync thread does *group commit*: it fsyncs once for everything
//! written since its last sync and only then acknowledges those appenders, while
//! others go on writing. With `interval` the appending task writes the same way
//! and the writer thread syncs within a second of the first unsynced write,
//! outside that lock. Under both, a rotation (due once the file passes its size)
//! syncs and renames from the appending task too. With `never` the appending task
//! only queues its bytes; the thread writes them within [`FLUSH_INTERVAL`] and
//! syncs only at rotation and shutdown.
//! A failed write is truncated away, logged once, reported and retried with
//! backoff; the caller is told the batch is not durable, and the bytes are kept
//! (up to [`MAX_BACKLOG`]) until a retry lands them.
//!
//! `channels.seq` holds the highest seq that may have been shown without being
//! synced in the journal ([`Marks`] says what is visible), whether every such seq
//! was written first, and the boot it was written in ([`Reservation`]). The thread
//! reserves [`RESERVE_BLOCK`] seqs ahead. Boot starts above the reservation, so no
//! seq is handed out twice, unless the last stop was a crash of the process alone
//! (same boot) and every seq shown was written: then boot continues right after
//! the journal, without a gap. A clean stop with everything synced shrinks the
//! reservation back.
//!
//! Reading is always backwards from the end, in blocks, so boot replay costs
//! the same whatever the file size: a truncated or corrupt line is skipped and
//! counted, never fatal.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::FsyncPolicy;
use super::seq_watch::SeqWatch;
use crate::message::{Message, Seq};

/// How many bytes one backwards read takes.
const BLOCK: usize = 64 * 1024;
/// The most unwritten bytes kept in memory while the disk fails; past it, new messages are
/// refused (503) rather than old ones dropped.
pub const MAX_BACKLOG: usize = 64 * 1024 * 1024;
/// With `interval` (and `never`, at rotation only), the longest a write stays unsynced.
const SYNC_INTERVAL: Duration = Duration::from_secs(1);
/// With `never`, the longest a queued record waits for its write.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(1);
/// The largest emptied buffer the writer keeps for the next backlog (a millisecond of a busy
/// stream is far less).
const SPARE_MAX: usize = 1024 * 1024;
/// Seqs reserved in `channels.seq` at a time.
pub const RESERVE_BLOCK: Seq = 8192;

/// One record read back from the journal, or the count of lines that were not.
#[derive(Debug, Default)]
pub struct Tail {
    /// Records, oldest first.
    pub records: Vec<Message>,
    /// Lines skipped because they were truncated or not a record.
    pub skipped: u64,
    /// Bytes read from disk to find them.
    pub bytes_read: u64,
}

/// The two files of a journal.
#[derive(Clone, Debug)]
pub struct Files {
    /// `channels.jsonl`.
    pub active: PathBuf,
    /// `channels.jsonl.1`.
    pub backup: PathBuf,
    /// `channels.seq`: the seq reservation (see [`open_reservation`]).
    pub reserved: PathBuf,
}

impl Files {
    /// The journal files for `active`.
    pub fn new(active: PathBuf) -> Files {
        let mut backup = active.clone().into_os_string();
        backup.push(".1");
        Files {
            reserved: active.with_extension("seq"),
            active,
            backup: PathBuf::from(backup),
        }
    }

    /// Reads records backwards (newest first) across the active file then the
    /// backup, calling `keep` on each; stops when `keep` returns false.
    pub fn scan_back(&self, mut keep: impl FnMut(Message) -> bool) -> std::io::Result<(u64, u64)> {
        let mut skipped = 0;
        let mut bytes = 0;
        for path in [&self.active, &self.backup] {
            let (go_on, s, b) = scan_file_back(path, &mut keep)?;
            skipped += s;
            bytes += b;
            if !go_on {
                break;
            }
        }
        Ok((skipped, bytes))
    }

    /// The newest `n` records across both files, oldest first.
    pub fn tail(&self, n: usize) -> std::io::Result<Tail> {
        let mut records = Vec::with_capacity(n.min(4096));
        if n == 0 {
            return Ok(Tail::default());
        }
        let (skipped, bytes_read) = self.scan_back(|m| {
            records.push(m);
            records.len() < n
        })?;
        records.reverse();
        Ok(Tail {
            records,
            skipped,
            bytes_read,
        })
    }

    /// The oldest `limit` records with seq > `after` that `keep` accepts, oldest first, in one
    /// backwards scan that holds at most `limit` records; and the newest seq in the files.
    pub fn after(
        &self,
        after: Seq,
        limit: usize,
        keep: impl Fn(&Message) -> bool,
    ) -> std::io::Result<(Vec<Message>, Seq)> {
        let mut records = std::collections::VecDeque::new();
        let mut newest = 0;
        self.scan_back(|m| {
            if m.seq <= after {
                return false;
            }
            newest = newest.max(m.seq);
            if keep(&m) {
                // Newest first: past `limit`, the newest kept goes.
                records.push_back(m);
                if records.len() > limit {
                    records.pop_front();
                }
            }
            true
        })?;
        Ok((records.into_iter().rev().collect(), newest))
    }
}

/// Scans one file backwards. Returns (continue into the next file, skipped, bytes read).
///
/// A last line without its newline is a torn write (the process died in it):
/// it was never acknowledged, so it is skipped and counted like a corrupt line.
fn scan_file_back(
    path: &Path,
    keep: &mut impl FnMut(Message) -> bool,
) -> std::io::Result<(bool, u64, u64)> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((true, 0, 0)),
        Err(e) => return Err(e),
    };
    let mut pos = file.metadata()?.len();
    let (mut skipped, mut bytes_read) = (0u64, 0u64);
    // The bytes after `pos` whose line starts before `pos`.
    let mut pending: Vec<u8> = Vec::new();
    let mut at_end = true;
    let mut visit = |line: &[u8], at_end: &mut bool, skipped: &mut u64| -> bool {
        if std::mem::take(at_end) {
            *skipped += u64::from(!line.is_empty());
            return true;
        }
        if line.is_empty() {
            return true;
        }
        match serde_json::from_slice::<Message>(line) {
            Ok(m) => keep(m),
            Err(_) => {
                *skipped += 1;
                true
            }
        }
    };
    while pos > 0 {
        let len = (pos as usize).min(BLOCK);
        pos -= len as u64;
        let mut chunk = vec![0u8; len];
        file.seek(SeekFrom::Start(pos))?;
        file.read_exact(&mut chunk)?;
        bytes_read += len as u64;
        chunk.extend_from_slice(&pending);
        let mut end = chunk.len();
        while let Some(i) = chunk[..end].iter().rposition(|&b| b == b'\n') {
            if !visit(&chunk[i + 1..end], &mut at_end, &mut skipped) {
                return Ok((false, skipped, bytes_read));
            }
            end = i;
        }
        chunk.truncate(end);
        pending = chunk;
    }
    if !visit(&pending, &mut at_end, &mut skipped) {
        return Ok((false, skipped, bytes_read));
    }
    Ok((true, skipped, bytes_read))
}

/// The journal's progress, shared by the writer and the inbox: what is assigned, written,
/// synced and reserved, and the `committed` watch that readers follow.
///
/// A seq becomes visible (published on `committed`) only when it can never be handed out
/// again: it is synced in the journal, or at most the seq reserved in `channels.seq`.
#[derive(Debug)]
pub struct Marks {
    /// The highest seq assigned (set by the inbox under its ring lock).
    pub assigned: AtomicU64,
    /// The highest seq written to the journal file (records are written in seq order).
    pub written: AtomicU64,
    /// The highest seq synced to disk.
    pub synced: AtomicU64,
    /// The highest seq reserved in `channels.seq`: a seq up to it may be shown once written.
    pub reserved: AtomicU64,
    /// The highest seq that may be shown before it is written: the reservation when
    /// `channels.seq` says so (mode `u`, see [`Reservation`]), else 0.
    pub reserved_unwritten: AtomicU64,
    /// An append asked for a reservation ahead; cleared when the writer has made it.
    pub reserve_asked: AtomicBool,
    /// Bytes encoded but not yet written.
    pub backlog_bytes: AtomicUsize,
    /// The highest visible seq.
    pub committed: SeqWatch,
    /// Failed writes since start.
    pub errors: AtomicU64,
    /// Bytes in the active file.
    pub bytes: AtomicU64,
    /// True while writes fail.
    pub is_failing: AtomicBool,
    /// The cause of the current failure, if the journal is failing.
    pub failing: Mutex<Option<String>>,
    /// Tests hold `always`'s sync here until they send on the other end (or drop it).
    #[cfg(test)]
    pub sync_gate: Mutex<Option<mpsc::Receiver<()>>>,
}

impl Marks {
    /// Marks for a journal whose newest record is `on_disk`, handing out seqs above `start`,
    /// with `reserved` in `channels.seq` (see [`Reservation::start_after`]).
    pub fn new(on_disk: Seq, start: Seq, reserved: &Reservation) -> Marks {
        Marks {
            assigned: AtomicU64::new(start.max(on_disk)),
            written: AtomicU64::new(on_disk),
            synced: AtomicU64::new(on_disk),
            reserved: AtomicU64::new(reserved.upto),
            reserved_unwritten: AtomicU64::new(if reserved.written_first {
                0
            } else {
                reserved.upto
            }),
            reserve_asked: AtomicBool::new(false),
            backlog_bytes: AtomicUsize::new(0),
            // Readers start at the last message that exists; the first new one jumps the gap.
            committed: SeqWatch::new(on_disk),
            errors: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            is_failing: AtomicBool::new(false),
            failing: Mutex::new(None),
            #[cfg(test)]
            sync_gate: Mutex::new(None),
        }
    }

    /// Marks with no journal: everything is as durable as it will ever be.
    pub fn memory() -> Marks {
        let marks = Marks::new(Seq::MAX, Seq::MAX, &Reservation::default());
        marks.assigned.store(0, Ordering::Relaxed);
        marks.committed.replace(0);
        marks
    }

    /// The highest seq that can never be handed out again: synced, or written and reserved,
    /// or reserved in mode `u`.
    pub fn safe(&self) -> Seq {
        let written = self.written.load(Ordering::Acquire);
        let reserved = self.reserved.load(Ordering::Acquire);
        self.synced
            .load(Ordering::Acquire)
            .max(written.min(reserved))
            .max(self.reserved_unwritten.load(Ordering::Acquire))
    }

    /// Makes seqs up to `upto` visible, as far as they are safe.
    pub fn publish(&self, upto: Seq) {
        self.committed.advance(upto.min(self.safe()));
    }

    /// The highest seq on disk as `policy` promises it: synced for `always`, written otherwise.
    pub fn durable(&self, policy: FsyncPolicy) -> Seq {
        match policy {
            FsyncPolicy::Always => self.synced.load(Ordering::Acquire),
            FsyncPolicy::Interval | FsyncPolicy::Never => self.written.load(Ordering::Acquire),
        }
    }

    /// The cause of the current failure.
    pub fn failure(&self) -> Option<String> {
        self.failing.lock().unwrap().clone()
    }
}

/// What the writer thread has written under `always`, for the sync thread.
struct SyncJob {
    /// The file it was written to (after a rotation the new one: the rotation synced the old).
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
        let file = jobs.iter().rev().find_map(|j| j.file.clone());
        let result = match file.map(|f| f.sync_data()) {
            Some(Err(e)) => Err(shared.lock().unwrap().failed(e)),
            _ => {
                marks.synced.fetch_max(upto, Ordering::AcqRel);
                marks.publish(upto);
                Ok(())
            }
        };
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

/// A batch of encoded records for the writer.
pub struct Batch {
    /// JSON lines, each ending in `\n`; may be empty (then the writer only retries its backlog).
    pub bytes: Vec<u8>,
    /// The highest seq in `bytes`.
    pub last: Seq,
    /// Told once the batch is written (and synced, per policy), or why not.
    pub ack: oneshot::Sender<Result<(), String>>,
}

/// `channels.seq`: how far seqs may have been shown without being synced in the journal.
///
/// One line, rewritten in place (so a full disk can still take it) and synced before any seq it
/// covers is shown: `<upto> <floor> <mode> <boot id>`, the seqs as twenty digits, e.g.
/// `00000000000000008292 00000000000000000100 w 6f1c…`. A line of only digits (the format
/// before the mode and boot id) reads as a reservation of mode `u` from an unknown boot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reservation {
    /// The highest seq that may have been shown without being synced in the journal: after a
    /// crash of the machine, boot starts above it.
    pub upto: Seq,
    /// The highest seq written to the journal when the line was written.
    pub floor: Seq,
    /// Mode `w`: every seq shown above the synced journal was written to it first. The page
    /// cache then holds it for as long as the kernel runs, so a restart in the same boot (a
    /// crash of the process only) continues right after the journal's last record, without a
    /// gap. Mode `u` (`never`, or once a seq was shown while the journal failed): seqs up to
    /// `upto` may have been shown unwritten, so every restart starts above `upto`.
    pub written_first: bool,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`) when the line was written.
    pub boot: Option<String>,
}

/// The width of a `channels.seq` line, newline included.
const RESERVATION_LEN: usize = 20 + 1 + 20 + 1 + 1 + 1 + BOOT_ID_LEN + 1;
/// The length of a boot id: a UUID in its text form.
const BOOT_ID_LEN: usize = 36;

impl Reservation {
    /// A reservation of `upto` written now, `floor` being the highest seq written.
    pub fn now(upto: Seq, floor: Seq, written_first: bool) -> Reservation {
        Reservation {
            upto,
            floor,
            written_first,
            boot: boot_id().map(str::to_owned),
        }
    }

    /// The first seq a restart may hand out after `on_disk`, the journal's last record, so
    /// that no seq shown before the last stop is handed out again.
    pub fn start_after(&self, on_disk: Seq) -> Seq {
        let same_boot = self.boot.is_some() && self.boot.as_deref() == boot_id();
        if self.written_first && same_boot && on_disk >= self.floor {
            on_disk
        } else {
            on_disk.max(self.upto)
        }
    }

    fn line(&self) -> String {
        let boot = self.boot.as_deref().unwrap_or("-");
        let mode = if self.written_first { 'w' } else { 'u' };
        format!(
            "{:020} {:020} {mode} {boot:<BOOT_ID_LEN$}\n",
            self.upto, self.floor
        )
    }

    /// Reads a line; `None` when it is not a reservation.
    fn parse(text: &str) -> Option<Reservation> {
        let mut fields = text.split_whitespace();
        let upto = fields.next()?.parse().ok()?;
        let Some(floor) = fields.next() else {
            return Some(Reservation {
                upto,
                ..Reservation::default()
            });
        };
        let floor = floor.parse().ok()?;
        let written_first = match fields.next()? {
            "w" => true,
            "u" => false,
            _ => return None,
        };
        let boot = fields.next().filter(|b| *b != "-").map(str::to_owned);
        Some(Reservation {
            upto,
            floor,
            written_first,
            boot,
        })
    }

    /// Rewrites `file` with this line and syncs it.
    pub fn write(&self, file: &File) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let line = self.line();
        debug_assert_eq!(line.len(), RESERVATION_LEN);
        file.write_all_at(line.as_bytes(), 0)?;
        file.sync_data()
    }
}

/// The kernel's boot id, which changes with every boot; `None` where the kernel has none.
pub fn boot_id() -> Option<&'static str> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = text.trim();
        let well_formed =
            id.len() == BOOT_ID_LEN && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        well_formed.then(|| id.to_owned())
    })
    .as_deref()
}

/// Opens `channels.seq` and reads it (an empty or new file reads as no reservation).
pub fn open_reservation(path: &Path) -> std::io::Result<(File, Reservation)> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let reservation = if text.trim().is_empty() {
        // New: make its name durable; the caller writes and syncs its line.
        if let Some(Ok(dir)) = path.parent().map(File::open) {
            let _ = dir.sync_all();
        }
        Reservation::default()
    } else {
        Reservation::parse(&text).unwrap_or_else(|| {
            tracing::warn!(
                path = %path.display(),
                "not a seq reservation; ignored (seqs continue after the journal's last record)"
            );
            Reservation::default()
        })
    };
    Ok((file, reservation))
}

/// Opens the active file for appending, cutting a torn last line left by a crash.
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

/// What the writer thread is asked to do.
pub enum Job {
    /// Write (and sync) a batch, then acknowledge it.
    Commit(Batch),
    /// Look at the backlog, the sync timer and the reservation now.
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

/// The writer: group commit, rotation, failure and retry. Shared between the
/// writer thread and (for `interval`/`never`) appending tasks.
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
    /// `always`: the sync thread's queue, for appenders that write their batch themselves
    /// ([`Writer::append_then_sync`]). None before the writer thread starts it, after it
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
            sync_tx: None,
            marks,
        }
    }

    /// Adds `bytes` to the backlog, which then holds the records up to `last` (0: none new, as
    /// for an append that only repeats ids; records encoded through [`Writer::backlog`] count).
    fn enqueue(&mut self, bytes: &[u8], last: Seq) {
        self.backlog.extend_from_slice(bytes);
        self.backlog_last = self.backlog_last.max(last);
        self.marks
            .backlog_bytes
            .store(self.backlog.len(), Ordering::Relaxed);
    }

    /// `interval`: writes `bytes` now, from the appending task, after any backlog. Also says
    /// whether the caller must wake the thread: for its sync timer, or to retry after a failure.
    pub fn append_now(&mut self, bytes: &[u8], last: Seq) -> (Result<(), String>, bool) {
        self.enqueue(bytes, last);
        let result = self.commit();
        let wake = (result.is_err() || self.dirty_since.is_some())
            && !std::mem::replace(&mut self.armed, true);
        (result, wake)
    }

    /// `always`: writes `bytes` now, from the appending task, and shows them (as far as the
    /// reservation covers them); the sync thread answers `ack` once they are synced, with one
    /// fsync for everything written since its last (group commit). So the message a wait is
    /// woken for never waits for another thread to be scheduled first.
    ///
    /// A failed write answers `ack` with the cause at once and keeps the bytes for the writer
    /// thread's retries; the result then says whether the caller must wake that thread.
    /// `Err(ack)` when there is no sync thread: the caller hands the batch to the writer
    /// thread instead ([`Job::Commit`]).
    pub fn append_then_sync(
        &mut self,
        bytes: &[u8],
        last: Seq,
        ack: oneshot::Sender<Result<(), String>>,
    ) -> Result<bool, oneshot::Sender<Result<(), String>>> {
        if self.sync_tx.is_none() {
            return Err(ack);
        }
        self.enqueue(bytes, last);
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
        Ok(false)
    }

    /// `never`: the backlog, for an appender to encode its records into straight away (then
    /// [`Writer::queued`]).
    pub fn backlog(&mut self) -> &mut Vec<u8> {
        &mut self.backlog
    }

    /// `never`: queues `bytes` for the thread, which writes within [`FLUSH_INTERVAL`], after
    /// whatever was encoded into [`Writer::backlog`]; the records up to `last` are queued now.
    /// True when the caller must wake the thread.
    pub fn queued(&mut self, bytes: &[u8], last: Seq) -> bool {
        self.enqueue(bytes, last);
        !std::mem::replace(&mut self.armed, true)
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
        let syncer = syncer.map(|s| (s.tx, s.thread));
        let mut backoff = Duration::from_millis(100);
        let mut reserve_failing = false;
        let mut reserve_acks: Vec<oneshot::Sender<()>> = Vec::new();
        // Seqs may be shown before they are written: always with `never`, and from the first
        // reservation asked for a message the journal failed to take (for the rest of the run).
        let mut unwritten = policy == FsyncPolicy::Never;
        // `never`: the last round wrote something, so more is likely coming; stay on the
        // flush timer one more round rather than have the next appender wake the thread.
        let mut streaming = false;
        loop {
            // Reserve ahead (every policy: `always` shows a record once written, before its
            // sync) or on demand, outside the writer's lock.
            let assigned = marks.assigned.load(Ordering::Acquire);
            let reserved = marks.reserved.load(Ordering::Acquire);
            let ahead = assigned + RESERVE_BLOCK / 2 > reserved;
            let asked = !reserve_acks.is_empty()
                && (assigned > reserved
                    || (unwritten && assigned > marks.reserved_unwritten.load(Ordering::Acquire)));
            // A failed write or sync may leave shown records out of the page cache too: from
            // now on, a restart must not count on it.
            let degraded = !unwritten && marks.is_failing.load(Ordering::Acquire);
            unwritten |= degraded;
            if ahead || asked || degraded {
                let upto = assigned + RESERVE_BLOCK;
                let floor = marks.written.load(Ordering::Acquire);
                match Reservation::now(upto, floor, !unwritten).write(&reservation) {
                    Ok(()) => {
                        marks.reserved.fetch_max(upto, Ordering::AcqRel);
                        if unwritten {
                            marks.reserved_unwritten.fetch_max(upto, Ordering::AcqRel);
                        }
                        // `always`: what an appender wrote past the old reservation may show
                        // now, before its sync.
                        marks.publish(marks.written.load(Ordering::Acquire));
                        if std::mem::take(&mut reserve_failing) {
                            tracing::info!("seq reservation written again");
                        }
                    }
                    Err(e) if !std::mem::replace(&mut reserve_failing, true) => {
                        tracing::error!(
                            cause = %e,
                            "cannot reserve seqs in channels.seq; messages not on disk are held back"
                        );
                    }
                    Err(_) => {}
                }
                marks.reserve_asked.store(false, Ordering::Release);
            }
            for ack in reserve_acks.drain(..) {
                let _ = ack.send(());
            }
            let wait = {
                let mut w = shared.lock().unwrap();
                let wait = if !w.backlog.is_empty() && marks.is_failing.load(Ordering::Acquire) {
                    Some(backoff)
                } else if !w.backlog.is_empty() || streaming {
                    Some(FLUSH_INTERVAL)
                } else if reserve_failing {
                    Some(backoff)
                } else {
                    w.dirty_since
                        .map(|t| SYNC_INTERVAL.saturating_sub(t.elapsed()))
                };
                w.armed = wait.is_some();
                wait
            };
            let first = match wait {
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
            let mut w = shared.lock().unwrap();
            let mut acks = Vec::new();
            let mut take = |job: Job, w: &mut Writer| match job {
                Job::Commit(b) => {
                    w.enqueue(&b.bytes, b.last);
                    acks.push(b.ack);
                }
                Job::Wake => {}
                Job::Reserve { unwritten: u, ack } => {
                    unwritten |= u;
                    reserve_acks.push(ack);
                }
            };
            if let Some(job) = first {
                take(job, &mut w);
                while let Ok(job) = rx.try_recv() {
                    take(job, &mut w);
                }
            }
            let written_before = marks.written.load(Ordering::Acquire);
            let result = if policy == FsyncPolicy::Never {
                // Appenders queue under this lock: write without holding it.
                drop(w);
                let result = Writer::flush_unlocked(&shared);
                w = shared.lock().unwrap();
                result
            } else {
                w.commit()
            };
            let wrote = marks.written.load(Ordering::Acquire) > written_before;
            // `always`: what was written, and the appenders waiting for it, go to the sync
            // thread; they are acknowledged once it has synced.
            let to_sync =
                (policy == FsyncPolicy::Always && result.is_ok() && (wrote || !acks.is_empty()))
                    .then(|| SyncJob {
                        file: w.file.clone(),
                        upto: marks.written.load(Ordering::Acquire),
                        acks: std::mem::take(&mut acks),
                    });
            streaming = policy == FsyncPolicy::Never && wrote;
            let sync = w
                .dirty_since
                .filter(|t| t.elapsed() >= SYNC_INTERVAL)
                .and_then(|_| w.file.clone())
                .map(|file| (file, marks.written.load(Ordering::Acquire)));
            drop(w);
            backoff = match result {
                Ok(()) => Duration::from_millis(100),
                Err(_) => (backoff * 2).min(Duration::from_secs(30)),
            };
            for ack in acks {
                let _ = ack.send(result.clone());
            }
            let unsent = to_sync.and_then(|job| match &syncer {
                Some((tx, _)) => tx.send(job).err().map(|mpsc::SendError(job)| job),
                None => Some(job),
            });
            if let Some(job) = unsent {
                // No sync thread (it could not be spawned, or it is gone): sync here.
                let mut w = shared.lock().unwrap();
                let result = w.sync().map_err(|e| w.failed(e));
                drop(w);
                for ack in job.acks {
                    let _ = ack.send(result.clone());
                }
            }
            if let Some((file, upto)) = sync {
                // The timer's sync runs outside the lock: appenders keep writing meanwhile.
                let synced = file.sync_data();
                let mut w = shared.lock().unwrap();
                match synced {
                    Ok(()) => {
                        marks.synced.fetch_max(upto, Ordering::AcqRel);
                        let more = marks.written.load(Ordering::Acquire) > upto;
                        w.unsynced = more;
                        w.dirty_since = more.then(Instant::now);
                        marks.publish(upto);
                    }
                    Err(e) => {
                        w.failed(e);
                    }
                }
            }
        }
        if let Some((tx, thread)) = syncer {
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
                        .write(&reservation)
                        .is_ok()
                {
                    marks.reserved.store(synced, Ordering::Release);
                }
            }
            Err(cause) => tracing::error!("journal not flushed at shutdown: {cause}"),
        }
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
                if w.size >= w.rotate_bytes
                    && let Err(e) = w.rotate()
                {
                    return Err(w.failed(e));
                }
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

    /// Writes the backlog (syncing for `always`), rotates when due.
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
        if self.size >= self.rotate_bytes {
            self.rotate()?;
        }
        Ok(())
    }

    fn sync(&mut self) -> std::io::Result<()> {
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

    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(file) = &self.file {
            file.sync_all()?;
        }
        self.unsynced = false;
        self.sync()?;
        self.file = None;
        std::fs::rename(&self.files.active, &self.files.backup)?;
        let (file, _) = open_for_append(&self.files.active)?;
        if let Some(Ok(dir)) = self.files.active.parent().map(File::open) {
            let _ = dir.sync_all();
        }
        self.file = Some(Arc::new(file));
        self.size = 0;
        self.marks.bytes.store(0, Ordering::Relaxed);
        tracing::info!(backup = %self.files.backup.display(), "journal rotated");
        Ok(())
    }

    /// Records a failure: logged once per outage, counted, reported. The backlog is kept
    /// whole (the inbox refuses new messages while it is over [`MAX_BACKLOG`]).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::NewMessage;

    fn record(seq: Seq) -> String {
        let t = "2026-11-22T10:00:00Z".parse().unwrap();
        let m = Message::from_new(
            NewMessage::new("cli", "c", format!("message {seq}")),
            seq,
            t,
        );
        serde_json::to_string(&m).unwrap() + "\n"
    }

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

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
        w.backlog().extend_from_slice(record(1).as_bytes());
        assert!(w.queued(&[], 1), "the first queue wakes the thread");
        assert!(!w.queued(&[], 0), "armed already");
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
        assert!(matches!(
            w.append_then_sync(record(1).as_bytes(), 1, ack),
            Ok(false)
        ));
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
        assert!(w.append_then_sync(record(2).as_bytes(), 2, ack).is_err());
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
            matches!(w.append_then_sync(record(1).as_bytes(), 1, ack), Ok(true)),
            "a failure wakes the writer thread, to retry with backoff"
        );
        assert!(matches!(acked.try_recv(), Ok(Err(_))), "told at once");
        assert!(marks.is_failing.load(Ordering::Acquire));
        assert_eq!(marks.committed.get(), 0, "an unwritten record is not shown");
        assert!(sync_rx.try_recv().is_err(), "nothing to sync");
        // The next append writes the kept record first, through a handle opened again.
        let (ack, _acked) = oneshot::channel();
        assert!(matches!(
            w.append_then_sync(record(2).as_bytes(), 2, ack),
            Ok(false)
        ));
        assert_eq!(
            std::fs::read_to_string(&active).unwrap(),
            record(1) + &record(2)
        );
        assert!(!marks.is_failing.load(Ordering::Acquire));
        assert_eq!(marks.committed.get(), 2);
        assert_eq!(sync_rx.try_recv().unwrap().upto, 2);
    }

    #[test]
    fn tail_reads_across_backup_and_active_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::new(dir.path().join("channels.jsonl"));
        write(&files.backup, &(1..=5).map(record).collect::<String>());
        write(&files.active, &(6..=8).map(record).collect::<String>());
        let tail = files.tail(4).unwrap();
        let seqs: Vec<_> = tail.records.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, vec![5, 6, 7, 8]);
        assert_eq!(tail.skipped, 0);
    }

    #[test]
    fn a_reservation_line_is_fixed_width_and_reads_back() {
        let boots = [
            Some("0b6f2cfa-5d7e-4c1e-9a57-3f0e8e1b2c44".to_string()),
            None,
        ];
        for (boot, written_first) in boots.into_iter().zip([true, false]) {
            let r = Reservation {
                upto: 8292,
                floor: 100,
                written_first,
                boot,
            };
            let line = r.line();
            assert_eq!(line.len(), RESERVATION_LEN, "{line:?}");
            assert_eq!(Reservation::parse(&line), Some(r));
        }
        // The format before the mode and boot id: a reservation from an unknown boot.
        let old = Reservation::parse("00000000000000008192\n").unwrap();
        assert_eq!((old.upto, old.written_first, old.boot), (8192, false, None));
        assert_eq!(Reservation::parse("8192 100 x -"), None);
        assert_eq!(Reservation::parse("many"), None);
    }

    #[test]
    fn a_restart_continues_after_the_journal_only_in_the_same_boot_with_mode_w() {
        let here = boot_id().map(str::to_owned);
        assert!(here.is_some(), "no /proc/sys/kernel/random/boot_id here");
        let r = |written_first, boot: Option<String>| Reservation {
            upto: 8292,
            floor: 100,
            written_first,
            boot,
        };
        let other = Some("00000000-0000-0000-0000-000000000000".to_string());
        // A crash of the process: the page cache kept every written record.
        assert_eq!(r(true, here.clone()).start_after(150), 150);
        assert_eq!(r(true, here.clone()).start_after(100), 100);
        // The journal holds less than when the line was written (it was cut or replaced).
        assert_eq!(r(true, here.clone()).start_after(99), 8292);
        // Seqs may have been shown unwritten; or the machine rebooted; or no boot id.
        assert_eq!(r(false, here.clone()).start_after(150), 8292);
        assert_eq!(r(true, other).start_after(150), 8292);
        assert_eq!(r(true, None).start_after(150), 8292);
        // A journal beyond the reservation continues after itself either way.
        assert_eq!(r(false, None).start_after(9000), 9000);
    }

    #[test]
    fn reservation_rewrites_in_place_and_opens_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("channels.seq");
        write(&path, "00000000000000004096\n");
        let (file, old) = open_reservation(&path).unwrap();
        assert_eq!(old.upto, 4096);
        let new = Reservation::now(8192, 10, true);
        new.write(&file).unwrap();
        Reservation::now(16384, 20, false).write(&file).unwrap();
        new.write(&file).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), new.line());
        assert_eq!(open_reservation(&path).unwrap().1, new);
    }

    #[test]
    fn torn_last_line_and_garbage_middle_line_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::new(dir.path().join("channels.jsonl"));
        let mut text = record(1) + &record(2) + "not json at all\n" + &record(3);
        text.push_str(&record(4)[..30]);
        write(&files.active, &text);
        let tail = files.tail(10).unwrap();
        let seqs: Vec<_> = tail.records.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        assert_eq!(tail.skipped, 2);
    }

    #[test]
    fn open_for_append_cuts_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("channels.jsonl");
        let full = record(1);
        write(&path, &(full.clone() + "{\"seq\":2,\"serv"));
        let (_file, cut) = open_for_append(&path).unwrap();
        assert_eq!(cut, 14);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), full);
    }

    #[test]
    fn tail_cost_does_not_grow_with_file_size() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::new(dir.path().join("channels.jsonl"));
        let small: String = (1..=300).map(record).collect();
        write(&files.active, &small);
        let small_read = files.tail(200).unwrap().bytes_read;
        let big: String = (1..=100_000).map(record).collect();
        write(&files.active, &big);
        let tail = files.tail(200).unwrap();
        assert_eq!(tail.records.first().unwrap().seq, 99_801);
        assert_eq!(tail.records.last().unwrap().seq, 100_000);
        assert!(
            big.len() > 10 * 1024 * 1024,
            "the big file is {} bytes",
            big.len()
        );
        // Reading 200 records takes at most a block more than in the small file.
        assert!(
            tail.bytes_read <= small_read + BLOCK as u64,
            "read {} bytes of a {}-byte file (small file: {})",
            tail.bytes_read,
            big.len(),
            small_read
        );
    }

    #[test]
    fn lines_longer_than_a_block_are_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::new(dir.path().join("channels.jsonl"));
        let t = "2026-11-22T10:00:00Z".parse().unwrap();
        let long = Message::from_new(NewMessage::new("cli", "c", "x".repeat(3 * BLOCK)), 2, t);
        let text = record(1) + &serde_json::to_string(&long).unwrap() + "\n" + &record(3);
        write(&files.active, &text);
        let tail = files.tail(10).unwrap();
        let seqs: Vec<_> = tail.records.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        assert_eq!(tail.records[1].content.len(), 3 * BLOCK);
    }

    #[test]
    fn after_returns_the_gap_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::new(dir.path().join("channels.jsonl"));
        write(&files.backup, &(1..=50).map(record).collect::<String>());
        write(&files.active, &(51..=100).map(record).collect::<String>());
        let (records, newest) = files.after(40, 20, |_| true).unwrap();
        let got: Vec<_> = records.iter().map(|m| m.seq).collect();
        assert_eq!(got, (41..=60).collect::<Vec<_>>());
        assert_eq!(newest, 100);
        let (records, _) = files.after(40, 3, |m| m.seq % 10 == 0).unwrap();
        let got: Vec<_> = records.iter().map(|m| m.seq).collect();
        assert_eq!(got, vec![50, 60, 70]);
        let (records, newest) = files.after(0, 20, |_| false).unwrap();
        assert!(records.is_empty());
        assert_eq!(newest, 100);
    }
}
