//! The inbox: every message that arrives, numbered and kept.
//!
//! An [`Inbox`] is a cheap, cloneable handle. It owns
//! - the **ring**: the newest N messages in memory, for readers;
//! - the **seq counter**, advanced under the same lock as the ring append, so
//!   seqs are strictly increasing in ring and journal order alike;
//! - the **id window**: recent source ids, so a retried delivery is
//!   acknowledged without a second record;
//! - the **journal** ([`journal`]), written by one group-commit task.
//!
//! `append`/`append_batch` return once the batch is durable under the fsync
//! policy. `committed()` is a watch of the highest committed seq: readers and
//! waiters are woken the moment a commit lands, and never see a message before
//! it is committed. If the disk fails, messages still reach the ring and
//! readers (delivery keeps working), the writer is told `NotDurable`, and the
//! journal retries in the background.

pub mod cursor;
pub mod journal;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::Utc;
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, watch};

use crate::config::{Home, InboxSettings};
use crate::message::{Message, NewMessage, Seq};

pub use cursor::StateStore;
use journal::{Batch, Files, Job, JournalStats, Writer};

/// Bytes reserved per message for its journal record (a 120-byte message encodes to ~220).
const RECORD_BYTES_HINT: usize = 320;

/// When the journal writer calls fsync.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// After every group commit, before acknowledging it.
    #[default]
    Always,
    /// At most once a second; acknowledged after the write.
    Interval,
    /// Never; acknowledged after the write.
    Never,
}

/// The outcome of one append.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appended {
    /// The seq assigned; for a duplicate, the seq of the stored original.
    pub seq: Seq,
    /// The source id was seen recently; nothing new was stored.
    pub duplicate: bool,
}

/// Errors the inbox reports to a writer.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The inbox is shutting down.
    #[error("inbox closed")]
    Closed,
    /// Opening or replaying the journal failed.
    #[error("journal {path}: {source}")]
    Journal {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The messages are in memory and readable, but the journal write failed;
    /// it is retried in the background.
    #[error("kept in memory, not on disk: journal write failed: {cause}")]
    NotDurable {
        /// The seqs assigned.
        appended: Vec<Appended>,
        /// The I/O error.
        cause: String,
    },
}

/// Counters and gauges for `inbox_stats` and `/metrics`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct InboxStats {
    /// Messages in the ring.
    pub ring_depth: usize,
    /// Ring capacity.
    pub ring_capacity: usize,
    /// Highest committed seq.
    pub last_seq: Seq,
    /// Duplicate source ids acknowledged without a record.
    pub duplicates: u64,
    /// Lines skipped at boot replay (truncated or corrupt).
    pub replay_skipped: u64,
    /// `ok`, `memory` (no journal) or `failing: <cause>`.
    pub journal_status: String,
    /// Failed journal writes since start.
    pub journal_errors: u64,
    /// Bytes in the active journal file.
    pub journal_bytes: u64,
}

/// Everything under the append lock.
struct Ring {
    messages: VecDeque<Arc<Message>>,
    last_seq: Seq,
    ids: IdWindow,
}

/// Recently seen source ids, bounded, oldest forgotten first.
#[derive(Default)]
struct IdWindow {
    seqs: HashMap<String, Seq>,
    order: VecDeque<String>,
    capacity: usize,
}

impl IdWindow {
    fn get(&self, id: &str) -> Option<Seq> {
        self.seqs.get(id).copied()
    }

    fn insert(&mut self, id: String, seq: Seq) {
        if self.capacity == 0 {
            return;
        }
        if self.order.len() >= self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.seqs.remove(&old);
        }
        self.seqs.insert(id.clone(), seq);
        self.order.push_back(id);
    }
}

/// The journal writer's handles: its queue, its thread, and (for `interval`/`never`) the
/// writer itself for direct writes.
type WriterParts = (
    std::sync::mpsc::Sender<Job>,
    std::thread::JoinHandle<()>,
    Option<Arc<Mutex<Writer>>>,
);

/// How an append learns that its batch is in the journal.
enum Pending {
    /// Written already (direct write), with this outcome.
    Done(Result<(), String>),
    /// Queued for group commit; the writer answers here.
    Ack(oneshot::Receiver<Result<(), String>>),
}

struct Inner {
    ring: Mutex<Ring>,
    capacity: usize,
    committed_tx: watch::Sender<Seq>,
    writer: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
    /// For `interval`/`never`: the writer, written to by the appending task itself.
    direct: Option<Arc<Mutex<Writer>>>,
    writer_done: Mutex<Option<std::thread::JoinHandle<()>>>,
    files: Option<Files>,
    journal: Arc<JournalStats>,
    duplicates: AtomicU64,
    replay_skipped: u64,
}

/// A handle on the inbox.
#[derive(Clone)]
pub struct Inbox {
    inner: Arc<Inner>,
}

impl Inbox {
    /// An inbox with no journal (tests, benches, `rules test`).
    pub fn memory(settings: &InboxSettings) -> Inbox {
        Inbox::build(settings, Vec::new(), None, None, Arc::default(), 0)
    }

    /// Opens the journal in `home`, replays its tail into the ring and starts the writer.
    pub async fn open(home: &Home, settings: &InboxSettings) -> Result<Inbox, InboxError> {
        let files = Files::new(home.journal());
        let err = |source| InboxError::Journal {
            path: files.active.display().to_string(),
            source,
        };
        let (file, cut) = journal::open_for_append(&files.active).map_err(err)?;
        let tail = files.tail(settings.ring_size.max(1)).map_err(err)?;
        let skipped = tail.skipped + u64::from(cut > 0);
        if skipped > 0 {
            tracing::warn!(skipped, "journal replay skipped truncated or corrupt lines");
        }
        tracing::info!(
            replayed = tail.records.len(),
            bytes_read = tail.bytes_read,
            last_seq = tail.records.last().map_or(0, |m| m.seq),
            "inbox replayed"
        );
        let stats = Arc::new(JournalStats::default());
        let writer = Writer::new(
            files.clone(),
            file,
            settings.fsync,
            settings.rotate_bytes,
            stats.clone(),
        );
        let shared = Arc::new(Mutex::new(writer));
        let (tx, rx) = std::sync::mpsc::channel();
        let thread_writer = shared.clone();
        let handle = std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || Writer::run(thread_writer, rx))
            .map_err(err)?;
        let direct = (settings.fsync != FsyncPolicy::Always).then_some(shared);
        Ok(Inbox::build(
            settings,
            tail.records,
            Some(files),
            Some((tx, handle, direct)),
            stats,
            skipped,
        ))
    }

    fn build(
        settings: &InboxSettings,
        replayed: Vec<Message>,
        files: Option<Files>,
        writer: Option<WriterParts>,
        journal: Arc<JournalStats>,
        replay_skipped: u64,
    ) -> Inbox {
        let capacity = settings.ring_size.max(1);
        let mut ids = IdWindow {
            capacity: settings.dedup_ids,
            ..IdWindow::default()
        };
        let last_seq = replayed.last().map_or(0, |m| m.seq);
        let mut messages = VecDeque::with_capacity(capacity + 1);
        for m in replayed {
            if let Some(id) = &m.id {
                ids.insert(id.clone(), m.seq);
            }
            messages.push_back(Arc::new(m));
        }
        let (committed_tx, _) = watch::channel(last_seq);
        let (writer, done, direct) =
            writer.map_or((None, None, None), |(tx, h, d)| (Some(tx), Some(h), d));
        Inbox {
            inner: Arc::new(Inner {
                ring: Mutex::new(Ring {
                    messages,
                    last_seq,
                    ids,
                }),
                capacity,
                committed_tx,
                writer: Mutex::new(writer),
                direct,
                writer_done: Mutex::new(done),
                files,
                journal,
                duplicates: AtomicU64::new(0),
                replay_skipped,
            }),
        }
    }

    /// Appends one message; returns when it is committed.
    pub async fn append(&self, new: NewMessage) -> Result<Appended, InboxError> {
        Ok(self.append_batch(vec![new]).await?[0])
    }

    /// Appends messages in order; returns when all are committed.
    pub async fn append_batch(&self, batch: Vec<NewMessage>) -> Result<Vec<Appended>, InboxError> {
        let now = Utc::now();
        let mut out = Vec::with_capacity(batch.len());
        // Room for a typical record per message, so encoding does not grow the buffer.
        let mut bytes = Vec::with_capacity(if self.inner.files.is_some() {
            RECORD_BYTES_HINT * batch.len()
        } else {
            0
        });
        let (pending, last) = {
            let mut ring = self.inner.ring.lock().unwrap();
            for new in batch {
                if let Some(id) = new.id.as_deref().filter(|id| !id.is_empty())
                    && let Some(seq) = ring.ids.get(id)
                {
                    self.inner.duplicates.fetch_add(1, Ordering::Relaxed);
                    out.push(Appended {
                        seq,
                        duplicate: true,
                    });
                    continue;
                }
                ring.last_seq += 1;
                let seq = ring.last_seq;
                let msg = Message::from_new(new, seq, now);
                if let Some(id) = &msg.id {
                    ring.ids.insert(id.clone(), seq);
                }
                if self.inner.files.is_some() {
                    serde_json::to_writer(&mut bytes, &msg).expect("a message always serializes");
                    bytes.push(b'\n');
                }
                ring.messages.push_back(Arc::new(msg));
                if ring.messages.len() > self.inner.capacity {
                    ring.messages.pop_front();
                }
                out.push(Appended {
                    seq,
                    duplicate: false,
                });
            }
            // Writing or sending under the ring lock keeps journal order = seq order.
            let pending = if bytes.is_empty() {
                Pending::Done(Ok(()))
            } else {
                let writer = self.inner.writer.lock().unwrap();
                let tx = writer.as_ref().ok_or(InboxError::Closed)?;
                match &self.inner.direct {
                    Some(direct) => {
                        let result = direct.lock().unwrap().append_now(&bytes);
                        if result.is_err() {
                            // The thread retries the kept backlog with backoff.
                            let _ = tx.send(Job::Wake);
                        }
                        Pending::Done(result)
                    }
                    None => {
                        let (ack, rx) = oneshot::channel();
                        tx.send(Job::Commit(Batch { bytes, ack }))
                            .map_err(|_| InboxError::Closed)?;
                        Pending::Ack(rx)
                    }
                }
            };
            (pending, ring.last_seq)
        };
        let result = match pending {
            Pending::Ack(rx) => rx.await.map_err(|_| InboxError::Closed)?,
            Pending::Done(result) => result,
        };
        // Commits land in seq order (one writer), so the max is the committed seq.
        self.inner.committed_tx.send_if_modified(|c| {
            let moved = last > *c;
            *c = (*c).max(last);
            moved
        });
        match result {
            Ok(()) => Ok(out),
            Err(cause) => Err(InboxError::NotDurable {
                appended: out,
                cause,
            }),
        }
    }

    /// A watch of the highest committed seq; changes the moment a commit lands.
    pub fn committed(&self) -> watch::Receiver<Seq> {
        self.inner.committed_tx.subscribe()
    }

    /// The highest committed seq (0 when empty).
    pub fn last_seq(&self) -> Seq {
        *self.inner.committed_tx.borrow()
    }

    /// The message `seq`, if the ring still holds it and it is committed.
    pub fn get(&self, seq: Seq) -> Option<Arc<Message>> {
        if seq > self.last_seq() {
            return None;
        }
        let ring = self.inner.ring.lock().unwrap();
        let first = ring.messages.front()?.seq;
        ring.messages.get(seq.checked_sub(first)? as usize).cloned()
    }

    /// Up to `limit` most recent committed messages, optionally on channels
    /// matching `channel` (see [`channel_filter`]), newest last.
    pub fn recent(&self, channel: Option<&str>, limit: usize) -> Vec<Arc<Message>> {
        let committed = self.last_seq();
        let ring = self.inner.ring.lock().unwrap();
        let mut out: Vec<_> = ring
            .messages
            .iter()
            .rev()
            .filter(|m| m.seq <= committed)
            .filter(|m| channel.is_none_or(|c| channel_filter(c, &m.channel)))
            .take(limit)
            .cloned()
            .collect();
        out.reverse();
        out
    }

    /// Up to `limit` committed messages with seq > `after`, oldest first: from
    /// the ring, or from the journal when the ring no longer holds them.
    pub async fn read_after(&self, after: Seq, limit: usize) -> Vec<Arc<Message>> {
        let committed = self.last_seq();
        if after >= committed || limit == 0 {
            return Vec::new();
        }
        {
            let ring = self.inner.ring.lock().unwrap();
            let first = ring.messages.front().map_or(Seq::MAX, |m| m.seq);
            if first <= after + 1 || self.inner.files.is_none() {
                return ring
                    .messages
                    .iter()
                    .filter(|m| m.seq > after && m.seq <= committed)
                    .take(limit)
                    .cloned()
                    .collect();
            }
        }
        let Some(files) = self.inner.files.clone() else {
            return Vec::new();
        };
        let read = tokio::task::spawn_blocking(move || files.after(after, limit)).await;
        match read {
            Ok(Ok(records)) => records
                .into_iter()
                .filter(|m| m.seq <= committed)
                .map(Arc::new)
                .collect(),
            Ok(Err(err)) => {
                tracing::warn!(cause = %err, after, "cannot read the journal behind the ring");
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    }

    /// Current counters.
    pub fn stats(&self) -> InboxStats {
        let ring_depth = self.inner.ring.lock().unwrap().messages.len();
        let journal_status = match (
            &self.inner.files,
            &*self.inner.journal.failing.lock().unwrap(),
        ) {
            (None, _) => "memory".to_string(),
            (Some(_), None) => "ok".to_string(),
            (Some(_), Some(cause)) => format!("failing: {cause}"),
        };
        InboxStats {
            ring_depth,
            ring_capacity: self.inner.capacity,
            last_seq: self.last_seq(),
            duplicates: self.inner.duplicates.load(Ordering::Relaxed),
            replay_skipped: self.inner.replay_skipped,
            journal_status,
            journal_errors: self.inner.journal.errors.load(Ordering::Relaxed),
            journal_bytes: self.inner.journal.bytes.load(Ordering::Relaxed),
        }
    }

    /// Flushes and stops the writer; later appends fail with [`InboxError::Closed`].
    pub async fn close(&self) {
        self.inner.writer.lock().unwrap().take();
        let done = self.inner.writer_done.lock().unwrap().take();
        if let Some(done) = done {
            let _ = tokio::task::spawn_blocking(move || done.join()).await;
        }
    }
}

/// The channel filter of the read tools: exact, `*`, or `prefix/*` (prefix and below).
pub fn channel_filter(filter: &str, channel: &str) -> bool {
    if filter.is_empty() || filter == "*" {
        return true;
    }
    match filter.strip_suffix("/*") {
        Some(prefix) => {
            channel == prefix
                || (channel.starts_with(prefix)
                    && channel.as_bytes().get(prefix.len()) == Some(&b'/'))
        }
        None => channel == filter,
    }
}

#[cfg(test)]
mod tests;
