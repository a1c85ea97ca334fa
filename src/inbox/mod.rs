//! The inbox: every message that arrives, numbered and kept.
//!
//! CONTRACT (the rest of the crate relies on these signatures): `Inbox` is a
//! cheap, cloneable handle. `append`/`append_batch` assign seqs and return once
//! the message is durable under the fsync policy; `committed()` is a watch of
//! the highest committed seq, woken at commit; reads never block writers.
//!
//! STUB: memory only; the ring + group-commit journal replaces this body.

pub mod cursor;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use chrono::Utc;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::config::{Home, InboxSettings};
use crate::message::{Message, NewMessage, Seq};

pub use cursor::StateStore;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Appended {
    /// The seq assigned (for a duplicate: the seq of the stored original, if still known, else 0).
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

struct Inner {
    ring: Mutex<VecDeque<Arc<Message>>>,
    capacity: usize,
    committed_tx: watch::Sender<Seq>,
}

/// A handle on the inbox.
#[derive(Clone)]
pub struct Inbox {
    inner: Arc<Inner>,
}

impl Inbox {
    /// An inbox with no journal (tests, benches, `rules test`).
    pub fn memory(settings: &InboxSettings) -> Inbox {
        let (committed_tx, _) = watch::channel(0);
        Inbox {
            inner: Arc::new(Inner {
                ring: Mutex::new(VecDeque::new()),
                capacity: settings.ring_size.max(1),
                committed_tx,
            }),
        }
    }

    /// Opens the journal in `home`, replays its tail into the ring and starts the writer.
    pub async fn open(_home: &Home, settings: &InboxSettings) -> Result<Inbox, InboxError> {
        Ok(Inbox::memory(settings))
    }

    /// Appends one message; returns when it is committed.
    pub async fn append(&self, new: NewMessage) -> Result<Appended, InboxError> {
        Ok(self.append_batch(vec![new]).await?[0])
    }

    /// Appends messages in order; returns when all are committed.
    pub async fn append_batch(&self, batch: Vec<NewMessage>) -> Result<Vec<Appended>, InboxError> {
        let now = Utc::now();
        let mut ring = self.inner.ring.lock().unwrap();
        let mut out = Vec::with_capacity(batch.len());
        let mut seq = *self.inner.committed_tx.borrow();
        for new in batch {
            seq += 1;
            ring.push_back(Arc::new(Message::from_new(new, seq, now)));
            if ring.len() > self.inner.capacity {
                ring.pop_front();
            }
            out.push(Appended {
                seq,
                duplicate: false,
            });
        }
        self.inner.committed_tx.send_replace(seq);
        Ok(out)
    }

    /// A watch of the highest committed seq; changes the moment a commit lands.
    pub fn committed(&self) -> watch::Receiver<Seq> {
        self.inner.committed_tx.subscribe()
    }

    /// The highest committed seq (0 when empty).
    pub fn last_seq(&self) -> Seq {
        *self.inner.committed_tx.borrow()
    }

    /// The message `seq`, if the ring still holds it.
    pub fn get(&self, seq: Seq) -> Option<Arc<Message>> {
        let ring = self.inner.ring.lock().unwrap();
        let first = ring.front()?.seq;
        ring.get(seq.checked_sub(first)? as usize).cloned()
    }

    /// Up to `limit` most recent messages, optionally on channels matching
    /// `channel` (exact, or a prefix with `/*`), newest last.
    pub fn recent(&self, channel: Option<&str>, limit: usize) -> Vec<Arc<Message>> {
        let ring = self.inner.ring.lock().unwrap();
        let mut out: Vec<_> = ring
            .iter()
            .rev()
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
        let ring = self.inner.ring.lock().unwrap();
        ring.iter()
            .filter(|m| m.seq > after)
            .take(limit)
            .cloned()
            .collect()
    }

    /// Current counters.
    pub fn stats(&self) -> InboxStats {
        let ring = self.inner.ring.lock().unwrap();
        InboxStats {
            ring_depth: ring.len(),
            ring_capacity: self.inner.capacity,
            last_seq: self.last_seq(),
            journal_status: "memory".into(),
            ..InboxStats::default()
        }
    }

    /// Flushes and stops the writer; later appends fail with [`InboxError::Closed`].
    pub async fn close(&self) {}
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
