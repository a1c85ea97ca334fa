//! The inbox: every message that arrives, numbered and kept.
//!
//! An [`Inbox`] is a cheap, cloneable handle. It owns
//! - the **ring**: the newest messages in memory, for readers, bounded by count
//!   (`inbox.ringSize`) and bytes (`inbox.ringBytes`). A message leaves it only once the log
//!   holds it, so a reader never finds a hole;
//! - the **seq counter**, advanced under the same lock as the ring append (the append
//!   lock), so seqs are strictly increasing in ring and log order alike;
//! - the **id window**: recent source ids, so a retried delivery is
//!   acknowledged without a second record (and only once the original is durable);
//! - the **limits** on one message ([`MessageLimits`]), checked before a seq is given;
//! - its **settings** ([`InboxSettings`], `inbox` in `switchboard.json`);
//! - the **log** ([`log::Log`]), the durable part behind a small trait: the journal
//!   ([`journal`]: `channels.jsonl`, written under the fsync policy, and the seq reservation
//!   in `channels.seq`), or nothing durable for [`Inbox::memory`].
//!
//! An append checks the limits, then under the append lock has the log admit the batch,
//! gives seqs, fills the ring and hands the records to the log, in seq order. Outside the lock
//! it waits for the log's answer, has the log show the seqs, and answers.
//!
//! `append`/`append_batch` return once the batch is durable under the fsync policy.
//! `committed()` is a watch of the highest visible seq: readers and waiters are woken the
//! moment a record is written, which under `always` is before the sync its appender waits for
//! (a crash of the process cannot lose a written record; only the machine's can). A seq is
//! never shown (answered, read, delivered) unless it can never be handed out again: it is
//! synced in the journal or covered by the reservation in `channels.seq`, which boot starts
//! above. If the disk fails, messages still reach the ring and readers as long as their seqs
//! are reserved, the writer is told `NotDurable`, and the journal retries in the background;
//! when not even the reservation can be written, the writer is told `Unavailable` and nothing
//! about the messages is shown until the journal takes them.

mod clock;
pub mod cursor;
pub mod journal;
pub mod log;
pub mod seq_watch;
mod settings;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::home::Home;
use crate::message::{LimitError, Message, MessageLimits, NewMessage, Seq};

pub use crate::home::FsyncPolicy;
pub use cursor::StateStore;
use log::{Batch, Landing, Log, Opened};
pub use seq_watch::{SeqReceiver, SeqWatch};
pub use settings::InboxSettings;

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
    /// A message is over a limit; nothing of the batch was stored.
    #[error("{}{error}", if *batch { format!("message {index}: ") } else { String::new() })]
    TooLarge {
        /// The message's position in the batch.
        index: usize,
        /// More than one message was sent.
        batch: bool,
        /// The limit.
        error: LimitError,
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
    /// The journal can take nothing now (it fails and not even a seq reservation can be
    /// written, or its backlog is full); no seq is shown. A message may still be stored once
    /// the journal recovers.
    #[error("not stored: the journal cannot take messages now: {cause}")]
    Unavailable {
        /// Why.
        cause: String,
    },
}

impl From<crate::message::journal::Closed> for InboxError {
    fn from(_: crate::message::journal::Closed) -> InboxError {
        InboxError::Closed
    }
}

/// Counters and gauges for `inbox_stats` and `/metrics`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct InboxStats {
    /// Messages in the ring.
    pub ring_depth: usize,
    /// Ring capacity.
    pub ring_capacity: usize,
    /// What the ring's messages cost in memory, about.
    pub ring_bytes: usize,
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
    /// Encoded records not yet written.
    pub journal_backlog_bytes: usize,
}

/// Everything under the append lock.
struct Ring {
    messages: VecDeque<Arc<Message>>,
    /// What `messages` cost, by [`Message::mem_bytes`].
    bytes: usize,
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

/// What one batch did under the append lock.
struct Assigned {
    /// New messages: the ring's last `new`.
    new: usize,
    /// The highest new seq (0: none).
    last: Seq,
    /// The highest seq the answer depends on: its own, or a duplicate's original not durable
    /// yet (0: none).
    need: Seq,
    /// The highest seq the answer reveals.
    shown: Seq,
}

impl Ring {
    /// Gives the batch's new messages their seqs and puts them in the ring; a source id seen
    /// recently is answered as a duplicate of its original, which the answer then waits for
    /// unless it is `durable` already.
    fn assign<A: Answers>(
        &mut self,
        batch: impl Iterator<Item = NewMessage>,
        now: DateTime<Utc>,
        durable: Seq,
        out: &mut A,
        duplicates: &AtomicU64,
    ) -> Assigned {
        let mut a = Assigned {
            new: 0,
            last: 0,
            need: 0,
            shown: 0,
        };
        for new in batch {
            if let Some(id) = new.id.as_deref().filter(|id| !id.is_empty())
                && let Some(seq) = self.ids.get(id)
            {
                duplicates.fetch_add(1, Ordering::Relaxed);
                if seq > durable {
                    a.need = a.need.max(seq);
                }
                a.shown = a.shown.max(seq);
                out.push(Appended {
                    seq,
                    duplicate: true,
                });
                continue;
            }
            self.last_seq += 1;
            let seq = self.last_seq;
            let msg = Message::from_new(new, seq, now);
            if let Some(id) = &msg.id {
                self.ids.insert(id.clone(), seq);
            }
            self.bytes += msg.mem_bytes();
            self.messages.push_back(Arc::new(msg));
            out.push(Appended {
                seq,
                duplicate: false,
            });
            a.new += 1;
            a.last = seq;
            a.need = seq;
            a.shown = seq;
        }
        a
    }

    /// The records [`Ring::assign`] has just put in the ring, for the log.
    fn batch(&self, a: &Assigned) -> Batch<'_> {
        Batch::new(self.messages.range(self.messages.len() - a.new..), a.last)
    }

    /// Drops the oldest messages while the ring is over its count or its bytes, but only those
    /// the log holds (`held`): a reader must find every message in one or the other.
    fn evict(&mut self, capacity: usize, max_bytes: usize, held: Seq) {
        while self.messages.len() > capacity || (self.bytes > max_bytes && self.messages.len() > 1)
        {
            match self.messages.front() {
                Some(m) if m.seq <= held => {
                    self.bytes -= m.mem_bytes();
                    self.messages.pop_front();
                }
                _ => break,
            }
        }
    }
}

/// Where [`Inbox::commit`] puts its answers: a `Vec` for a batch, one slot for a single
/// append (no allocation).
trait Answers: Send {
    fn with_capacity(n: usize) -> Self;
    fn push(&mut self, appended: Appended);
    fn into_vec(self) -> Vec<Appended>;
}

impl Answers for Vec<Appended> {
    fn with_capacity(n: usize) -> Self {
        Vec::with_capacity(n)
    }
    fn push(&mut self, appended: Appended) {
        Vec::push(self, appended);
    }
    fn into_vec(self) -> Vec<Appended> {
        self
    }
}

/// The answer of a single append.
struct One(Option<Appended>);

impl Answers for One {
    fn with_capacity(_: usize) -> Self {
        One(None)
    }
    fn push(&mut self, appended: Appended) {
        self.0 = Some(appended);
    }
    fn into_vec(self) -> Vec<Appended> {
        self.0.into_iter().collect()
    }
}

/// What the handles share.
struct Inner {
    /// The append lock: the ring, the seq counter and the id window.
    ring: Mutex<Ring>,
    capacity: usize,
    ring_bytes: usize,
    limits: MessageLimits,
    log: Box<dyn Log>,
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
        let opened = Opened {
            log: Box::new(log::Memory::new()),
            replayed: Vec::new(),
            start: 0,
            skipped: 0,
        };
        Inbox::build(settings, opened)
    }

    /// Opens the journal in `home`, replays its tail into the ring and starts the writer.
    /// New seqs start above the journal's last record, and above the reservation in
    /// `channels.seq` unless that says every seq shown was written first and the machine has
    /// not rebooted since: a seq shown before a crash is never handed out again.
    pub async fn open(home: &Home, settings: &InboxSettings) -> Result<Inbox, InboxError> {
        let opened = journal::open(home.journal(), settings)?;
        Ok(Inbox::build(settings, opened))
    }

    /// An inbox on the log `opened`, with the records it replayed in the ring.
    fn build(settings: &InboxSettings, opened: Opened) -> Inbox {
        let capacity = settings.ring_size.max(1);
        let mut ids = IdWindow {
            capacity: settings.dedup_ids,
            ..IdWindow::default()
        };
        let mut messages = VecDeque::with_capacity(capacity + 1);
        let mut bytes = 0;
        for m in opened.replayed {
            if let Some(id) = &m.id {
                ids.insert(id.clone(), m.seq);
            }
            bytes += m.mem_bytes();
            messages.push_back(Arc::new(m));
        }
        let mut ring = Ring {
            messages,
            bytes,
            last_seq: opened.start,
            ids,
        };
        ring.evict(capacity, settings.ring_bytes, Seq::MAX);
        Inbox {
            inner: Arc::new(Inner {
                ring: Mutex::new(ring),
                capacity,
                ring_bytes: settings.ring_bytes,
                limits: settings.limits.clone(),
                log: opened.log,
                duplicates: AtomicU64::new(0),
                replay_skipped: opened.skipped,
            }),
        }
    }

    /// Appends one message; returns when it is committed.
    pub async fn append(&self, new: NewMessage) -> Result<Appended, InboxError> {
        self.inner
            .limits
            .check(&new)
            .map_err(|error| InboxError::TooLarge {
                index: 0,
                batch: false,
                error,
            })?;
        let one: One = self.commit(std::iter::once(new), 1).await?;
        Ok(one.0.expect("one message, one answer"))
    }

    /// Appends messages in order, all or nothing; returns when all are committed.
    ///
    /// A duplicate whose original is not durable yet is not acknowledged as stored: the
    /// journal is retried for it, and the answer is `NotDurable` while the retry fails.
    pub async fn append_batch(&self, batch: Vec<NewMessage>) -> Result<Vec<Appended>, InboxError> {
        self.check_limits(&batch)?;
        let n = batch.len();
        self.commit(batch.into_iter(), n).await
    }

    /// Checks `batch` against the limits as [`Inbox::append_batch`] does, storing nothing: the
    /// first message over a limit, as the append would refuse it.
    pub fn check_limits(&self, batch: &[NewMessage]) -> Result<(), InboxError> {
        let many = batch.len() > 1;
        for (index, new) in batch.iter().enumerate() {
            self.inner
                .limits
                .check(new)
                .map_err(|error| InboxError::TooLarge {
                    index,
                    batch: many,
                    error,
                })?;
        }
        Ok(())
    }

    /// Splits `batch` into the messages within the limits and, by position, why each of the
    /// others is over one.
    pub fn split_by_limits(
        &self,
        batch: Vec<NewMessage>,
    ) -> (Vec<NewMessage>, Vec<(usize, String)>) {
        let mut fit = Vec::with_capacity(batch.len());
        let mut refused = Vec::new();
        for (index, new) in batch.into_iter().enumerate() {
            match self.inner.limits.check(&new) {
                Ok(()) => fit.push(new),
                Err(e) => refused.push((index, e.to_string())),
            }
        }
        (fit, refused)
    }

    /// Stores `n` messages that passed the limits, in order; returns once all are committed.
    async fn commit<A: Answers>(
        &self,
        batch: impl Iterator<Item = NewMessage>,
        n: usize,
    ) -> Result<A, InboxError> {
        let inner = &*self.inner;
        let log = &*inner.log;
        let now = clock::now();
        let mut out = A::with_capacity(n);
        // Under the append lock: admission, seqs, the ring, and the hand-off to the log, so
        // that the log takes batches in seq order.
        let (assigned, landing) = {
            let mut ring = inner.ring.lock().unwrap();
            log.admit()?;
            let assigned = ring.assign(batch, now, log.durable(), &mut out, &inner.duplicates);
            let landing = match assigned.need {
                0 => Landing::Now(Ok(())),
                _ => log.append(ring.batch(&assigned)),
            };
            ring.evict(inner.capacity, inner.ring_bytes, log.held());
            (assigned, landing)
        };
        let landed = landing.outcome().await?;
        if let Some(showing) = log.show(assigned.last, assigned.shown, &landed) {
            showing.await;
        }
        self.answer(out, &assigned, landed)
    }

    /// The answer to a batch that has landed and shown: stored, or why not. Shown but not
    /// durable, it is `NotDurable` (readers have it, the log retries it); not even shown, it is
    /// `Unavailable`.
    fn answer<A: Answers>(
        &self,
        out: A,
        assigned: &Assigned,
        landed: Result<(), String>,
    ) -> Result<A, InboxError> {
        let log = &*self.inner.log;
        if assigned.need == 0 || log.durable() >= assigned.need {
            return Ok(out);
        }
        let cause = landed
            .err()
            .or_else(|| log.stats().failing)
            .unwrap_or_else(|| "not written yet".into());
        if assigned.shown <= self.last_seq() {
            Err(InboxError::NotDurable {
                appended: out.into_vec(),
                cause,
            })
        } else {
            Err(InboxError::Unavailable { cause })
        }
    }

    /// A watch of the highest committed seq; changes the moment a commit lands.
    pub fn committed(&self) -> SeqReceiver {
        self.inner.log.committed().subscribe()
    }

    /// The highest committed seq (0 when empty).
    pub fn last_seq(&self) -> Seq {
        self.inner.log.committed().get()
    }

    /// The highest seq durable as the log promises it (under its fsync policy).
    pub fn durable(&self) -> Seq {
        self.inner.log.durable()
    }

    /// The message `seq`, if the ring still holds it and it is committed.
    pub fn get(&self, seq: Seq) -> Option<Arc<Message>> {
        if seq > self.last_seq() {
            return None;
        }
        let ring = self.inner.ring.lock().unwrap();
        // Seqs have gaps after a crash (see `channels.seq`): search, do not index.
        let i = ring.messages.binary_search_by_key(&seq, |m| m.seq).ok()?;
        ring.messages.get(i).cloned()
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
        self.read_after_matching(after, limit, None).await
    }

    /// Like [`Inbox::read_after`], but only messages on channels matching `channel` (see
    /// [`channel_filter`]). The journal is scanned once, however few messages match.
    pub async fn read_after_matching(
        &self,
        after: Seq,
        limit: usize,
        channel: Option<&str>,
    ) -> Vec<Arc<Message>> {
        let committed = self.last_seq();
        if after >= committed || limit == 0 {
            return Vec::new();
        }
        let matches = |m: &Message| channel.is_none_or(|c| channel_filter(c, &m.channel));
        let from_ring = |after: Seq, limit: usize| -> Vec<Arc<Message>> {
            let ring = self.inner.ring.lock().unwrap();
            ring.messages
                .iter()
                .filter(|m| m.seq > after && m.seq <= committed && matches(m))
                .take(limit)
                .cloned()
                .collect()
        };
        {
            let ring = self.inner.ring.lock().unwrap();
            let first = ring.messages.front().map_or(Seq::MAX, |m| m.seq);
            if first <= after + 1 {
                drop(ring);
                return from_ring(after, limit);
            }
        }
        let read = self.inner.log.read_after(after, limit, channel).await;
        match read {
            Ok((records, newest)) => {
                let mut out: Vec<_> = records
                    .into_iter()
                    .filter(|m| m.seq <= committed)
                    .map(Arc::new)
                    .collect();
                // What the log does not hold yet is in the ring.
                if out.len() < limit {
                    let more = from_ring(newest.max(after), limit - out.len());
                    out.extend(more);
                }
                out
            }
            Err(err) => {
                tracing::warn!(cause = %err, after, "cannot read the log behind the ring");
                Vec::new()
            }
        }
    }

    /// Whether every committed message after `after` is still readable: the ring holds the
    /// one after it, or the journal's oldest record is not later than it. A reader whose cursor
    /// is older than what is kept (the journal rotated past it) missed messages.
    pub async fn holds_after(&self, after: Seq) -> bool {
        {
            let ring = self.inner.ring.lock().unwrap();
            let first = ring.messages.front().map_or(Seq::MAX, |m| m.seq);
            if first <= after + 1 {
                return true;
            }
        }
        match self.inner.log.read_after(0, 1, None).await {
            Ok((oldest, _)) => oldest.first().is_none_or(|m| m.seq <= after + 1),
            Err(_) => true,
        }
    }

    /// Current counters.
    pub fn stats(&self) -> InboxStats {
        let (ring_depth, ring_bytes) = {
            let ring = self.inner.ring.lock().unwrap();
            (ring.messages.len(), ring.bytes)
        };
        let log = self.inner.log.stats();
        InboxStats {
            ring_depth,
            ring_capacity: self.inner.capacity,
            ring_bytes,
            last_seq: self.last_seq(),
            duplicates: self.inner.duplicates.load(Ordering::Relaxed),
            replay_skipped: self.inner.replay_skipped,
            journal_status: log.status,
            journal_errors: log.errors,
            journal_bytes: log.bytes,
            journal_backlog_bytes: log.backlog_bytes,
        }
    }

    /// Flushes and stops the log; later appends fail with [`InboxError::Closed`].
    pub async fn close(&self) {
        // Under the append lock: no append is between its admission and its hand-off.
        let closing = {
            let _appends = self.inner.ring.lock().unwrap();
            self.inner.log.close()
        };
        closing.await;
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
