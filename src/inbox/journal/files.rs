//! The journal's files: their names, and the backwards reading of records.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::message::{Message, Seq};

/// How many bytes one backwards read takes.
const BLOCK: usize = 64 * 1024;

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
        match parse(line) {
            Some(m) => keep(m),
            None => {
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
        while let Some(i) = memchr::memrchr(b'\n', &chunk[..end]) {
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

/// One line as a record, or `None` when it is not one. The line is checked as UTF-8 once,
/// whole, and parsed as text: `serde_json` then does not check each string again, as it does
/// when it parses bytes. A line that is not UTF-8 is not a record either way.
fn parse(line: &[u8]) -> Option<Message> {
    let text = std::str::from_utf8(line).ok()?;
    serde_json::from_str(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbox::journal::record;
    use crate::message::NewMessage;

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
    fn a_line_that_is_not_utf8_is_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::new(dir.path().join("channels.jsonl"));
        let mut bytes = record(1).into_bytes();
        let mut bad = record(2).into_bytes();
        let at = bad.len() - 20;
        bad[at] = 0xff;
        bytes.extend_from_slice(&bad);
        bytes.extend_from_slice(record(3).as_bytes());
        std::fs::write(&files.active, bytes).unwrap();
        let tail = files.tail(10).unwrap();
        let seqs: Vec<_> = tail.records.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, vec![1, 3]);
        assert_eq!(tail.skipped, 1);
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
