//! The inbox journal: `channels.jsonl` (+ one backup, `channels.jsonl.1`).
//!
//! Owns the files. With `fsync = always`, writes go through one writer thread
//! that does *group commit*: it takes every batch queued since its last write,
//! writes them in one go, fsyncs once, and only then acknowledges them all.
//! With `interval` or `never` there is no fsync to share, so the appending task
//! writes its batch itself under the writer's lock (no thread hand-off), and the
//! thread only syncs on the interval and retries after failures. A
//! failed write is truncated away, logged once, reported in the stats and
//! retried with backoff; the caller is told the batch is not durable, and the
//! bytes are kept (bounded) until a retry lands them.
//!
//! Reading is always backwards from the end, in blocks, so boot replay costs
//! the same whatever the file size: a truncated or corrupt line is skipped and
//! counted, never fatal.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::sync::mpsc;

use tokio::sync::oneshot;

use super::FsyncPolicy;
use crate::message::{Message, Seq};

/// How many bytes one backwards read takes.
const BLOCK: usize = 64 * 1024;
/// The most unwritten bytes kept in memory while the disk fails.
const MAX_BACKLOG: usize = 64 * 1024 * 1024;
/// With `interval`, the longest a write stays unsynced.
const SYNC_INTERVAL: Duration = Duration::from_secs(1);

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
}

impl Files {
    /// The journal files for `active`.
    pub fn new(active: PathBuf) -> Files {
        let mut backup = active.clone().into_os_string();
        backup.push(".1");
        Files {
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

    /// Records with seq > `after`, oldest first, at most `limit` of them.
    pub fn after(&self, after: Seq, limit: usize) -> std::io::Result<Vec<Message>> {
        let mut records = Vec::new();
        self.scan_back(|m| {
            if m.seq <= after {
                return false;
            }
            records.push(m);
            true
        })?;
        records.reverse();
        records.truncate(limit);
        Ok(records)
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

/// What the writer reports about the files.
#[derive(Debug, Default)]
pub struct JournalStats {
    /// Failed writes since start.
    pub errors: AtomicU64,
    /// Bytes in the active file.
    pub bytes: AtomicU64,
    /// The cause of the current failure, if the journal is failing.
    pub failing: std::sync::Mutex<Option<String>>,
}

/// A batch of encoded records for the writer.
pub struct Batch {
    /// JSON lines, each ending in `\n`.
    pub bytes: Vec<u8>,
    /// Told once the batch is written (and synced, per policy), or why not.
    pub ack: oneshot::Sender<Result<(), String>>,
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
    /// A direct write failed: retry the backlog with backoff.
    Wake,
}

/// The writer: group commit, rotation, failure and retry. Shared between the
/// writer thread and (for `interval`/`never`) appending tasks.
pub struct Writer {
    files: Files,
    file: Option<File>,
    policy: FsyncPolicy,
    rotate_bytes: u64,
    size: u64,
    last_sync: Instant,
    dirty: bool,
    backlog: Vec<u8>,
    stats: Arc<JournalStats>,
}

impl Writer {
    /// A writer appending to `file` (already opened by [`open_for_append`]).
    pub fn new(
        files: Files,
        file: File,
        policy: FsyncPolicy,
        rotate_bytes: u64,
        stats: Arc<JournalStats>,
    ) -> Writer {
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        stats.bytes.store(size, Ordering::Relaxed);
        Writer {
            files,
            file: Some(file),
            policy,
            rotate_bytes: rotate_bytes.max(1),
            size,
            last_sync: Instant::now(),
            dirty: false,
            backlog: Vec::new(),
            stats,
        }
    }

    /// Writes `bytes` now, from the appending task (policies without a shared fsync).
    pub fn append_now(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.backlog.extend_from_slice(bytes);
        self.commit()
    }

    /// Runs on its own thread until every sender is gone, then syncs and returns.
    pub fn run(shared: Arc<std::sync::Mutex<Writer>>, rx: mpsc::Receiver<Job>) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let wait = {
                let w = shared.lock().unwrap();
                if !w.backlog.is_empty() {
                    Some(backoff)
                } else if w.dirty && w.policy == FsyncPolicy::Interval {
                    Some(SYNC_INTERVAL)
                } else {
                    None
                }
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
            let mut take = |job: Job, w: &mut Writer| {
                if let Job::Commit(b) = job {
                    w.backlog.extend_from_slice(&b.bytes);
                    acks.push(b.ack);
                }
            };
            if let Some(job) = first {
                take(job, &mut w);
                while let Ok(job) = rx.try_recv() {
                    take(job, &mut w);
                }
            }
            let result = w.commit();
            drop(w);
            backoff = match result {
                Ok(()) => Duration::from_millis(100),
                Err(_) => (backoff * 2).min(Duration::from_secs(30)),
            };
            for ack in acks {
                let _ = ack.send(result.clone());
            }
        }
        let mut w = shared.lock().unwrap();
        if let Err(cause) = w
            .commit()
            .and_then(|()| w.sync().map_err(|e| e.to_string()))
        {
            tracing::error!("journal not flushed at shutdown: {cause}");
        }
    }

    /// Writes the backlog, syncs per policy, rotates when due.
    fn commit(&mut self) -> Result<(), String> {
        if self.backlog.is_empty() {
            if self.dirty
                && self.policy == FsyncPolicy::Interval
                && self.last_sync.elapsed() >= SYNC_INTERVAL
            {
                self.sync().map_err(|e| self.failed(e))?;
            }
            return Ok(());
        }
        let outcome = self.write_backlog();
        match outcome {
            Ok(()) => {
                let mut failing = self.stats.failing.lock().unwrap();
                if let Some(cause) = failing.take() {
                    tracing::info!(previous = %cause, "journal writes recovered");
                }
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    fn write_backlog(&mut self) -> std::io::Result<()> {
        if self.file.is_none() {
            let (file, _) = open_for_append(&self.files.active)?;
            self.size = file.metadata()?.len();
            self.file = Some(file);
        }
        let file = self.file.as_mut().expect("opened above");
        if let Err(e) = file.write_all(&self.backlog) {
            // Cut what part of the batch did land, so a retry cannot duplicate it.
            let _ = file.set_len(self.size);
            return Err(e);
        }
        self.size += self.backlog.len() as u64;
        self.backlog.clear();
        self.dirty = true;
        match self.policy {
            FsyncPolicy::Always => self.sync()?,
            FsyncPolicy::Interval if self.last_sync.elapsed() >= SYNC_INTERVAL => self.sync()?,
            _ => {}
        }
        self.stats.bytes.store(self.size, Ordering::Relaxed);
        if self.size >= self.rotate_bytes {
            self.rotate()?;
        }
        Ok(())
    }

    fn sync(&mut self) -> std::io::Result<()> {
        if let Some(file) = &self.file
            && self.dirty
        {
            file.sync_data()?;
        }
        self.dirty = false;
        self.last_sync = Instant::now();
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(file) = &self.file {
            file.sync_all()?;
        }
        self.file = None;
        std::fs::rename(&self.files.active, &self.files.backup)?;
        let (file, _) = open_for_append(&self.files.active)?;
        if let Some(Ok(dir)) = self.files.active.parent().map(File::open) {
            let _ = dir.sync_all();
        }
        self.file = Some(file);
        self.size = 0;
        self.stats.bytes.store(0, Ordering::Relaxed);
        tracing::info!(backup = %self.files.backup.display(), "journal rotated");
        Ok(())
    }

    /// Records a failure: logged once per outage, counted, reported.
    fn failed(&mut self, e: std::io::Error) -> String {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        let cause = e.to_string();
        let mut failing = self.stats.failing.lock().unwrap();
        if failing.is_none() {
            tracing::error!(
                journal = %self.files.active.display(),
                "journal write failed: {cause}; retrying with backoff, messages kept in memory"
            );
        }
        *failing = Some(cause.clone());
        if self.backlog.len() > MAX_BACKLOG {
            let cut = self.backlog.len() - MAX_BACKLOG;
            let cut = self.backlog[cut..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(self.backlog.len(), |i| cut + i + 1);
            self.backlog.drain(..cut);
            tracing::warn!(
                bytes = cut,
                "journal backlog over its bound; oldest unwritten records dropped"
            );
        }
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
        let got: Vec<_> = files.after(40, 20).unwrap().iter().map(|m| m.seq).collect();
        assert_eq!(got, (41..=60).collect::<Vec<_>>());
    }
}
