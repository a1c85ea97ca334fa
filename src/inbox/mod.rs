//! The inbox: every message that arrives, numbered and kept.
//!
//! An [`Inbox`] is a cheap, cloneable handle. It owns
//! - the **ring**: the newest messages in memory, for readers, bounded by count
//!   (`inbox.ringSize`) and bytes (`inbox.ringBytes`). A message leaves it only once it is in
//!   the journal, so a reader never finds a hole;
//! - the **seq counter**, advanced under the same lock as the ring append, so
//!   seqs are strictly increasing in ring and journal order alike;
//! - the **id window**: recent source ids, so a retried delivery is
//!   acknowledged without a second record (and only once the original is durable);
//! - the **limits** on one message ([`MessageLimits`]), checked before a seq is given;
//! - the **journal** ([`journal`]), written by one group-commit task, and the seq
//!   reservation in `channels.seq`.
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

pub mod cursor;
pub mod journal;
pub mod seq_watch;
mod settings;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::Utc;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::home::Home;
use crate::message::{LimitError, Message, MessageLimits, NewMessage, Seq};

pub use crate::home::FsyncPolicy;
pub use cursor::StateStore;
use journal::{Batch, Files, Job, MAX_BACKLOG, Marks, Writer};
pub use seq_watch::{SeqReceiver, SeqWatch};
pub use settings::InboxSettings;

/// Bytes reserved per message for its journal record (a 120-byte message encodes to ~220).
const RECORD_BYTES_HINT: usize = 320;

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

/// The journal's writer: its queue, its thread, and the writer itself, which appending tasks
/// use directly for `interval` (write) and `never` (queue).
struct Journal {
    files: Files,
    tx: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
    done: Mutex<Option<std::thread::JoinHandle<()>>>,
    writer: Arc<Mutex<Writer>>,
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

/// How an append learns that its batch is in the journal.
enum Pending {
    /// Decided already (direct write or queue), with this outcome.
    Done(Result<(), String>),
    /// Queued for group commit; the writer answers here.
    Ack(oneshot::Receiver<Result<(), String>>),
}

struct Inner {
    ring: Mutex<Ring>,
    capacity: usize,
    ring_bytes: usize,
    limits: MessageLimits,
    policy: FsyncPolicy,
    marks: Arc<Marks>,
    journal: Option<Journal>,
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
        Inbox::build(settings, Vec::new(), None, Arc::new(Marks::memory()), 0)
    }

    /// Opens the journal in `home`, replays its tail into the ring and starts the writer.
    /// New seqs start above the journal's last record, and above the reservation in
    /// `channels.seq` unless that says every seq shown was written first and the machine has
    /// not rebooted since: a seq shown before a crash is never handed out again.
    pub async fn open(home: &Home, settings: &InboxSettings) -> Result<Inbox, InboxError> {
        let files = Files::new(home.journal());
        let err = |path: &std::path::Path| {
            let path = path.display().to_string();
            move |source| InboxError::Journal { path, source }
        };
        let (file, cut) = journal::open_for_append(&files.active).map_err(err(&files.active))?;
        let tail = files
            .tail(settings.ring_size.max(1))
            .map_err(err(&files.active))?;
        let (reservation, old) =
            journal::open_reservation(&files.reserved).map_err(err(&files.reserved))?;
        let skipped = tail.skipped + u64::from(cut > 0);
        if skipped > 0 {
            tracing::warn!(skipped, "journal replay skipped truncated or corrupt lines");
        }
        let on_disk = tail.records.last().map_or(0, |m| m.seq);
        let mut start = old.start_after(on_disk);
        if start == on_disk && on_disk > 0 {
            // Continuing right after the journal (see `journal::Reservation`): what a crashed
            // process wrote is in the page cache; make it as durable as `synced` says below.
            if let Err(e) = file.sync_data() {
                tracing::warn!(cause = %e, "cannot sync the journal at boot");
                start = on_disk.max(old.upto);
            }
        }
        if start > on_disk {
            tracing::warn!(
                last_on_disk = on_disk,
                reserved = old.upto,
                "seqs up to {} may have been shown before the last stop without reaching the \
                 journal; new seqs start at {}",
                old.upto,
                start + 1
            );
        }
        // This run's own line, before any seq it covers is shown: its mode follows the policy.
        let written_first = settings.fsync != FsyncPolicy::Never;
        let mine = journal::Reservation::now(old.upto.max(start), on_disk, written_first);
        let reserved = match mine.write(&reservation) {
            Ok(()) => mine,
            Err(e) => {
                // Nothing is shown unsynced until the writer thread manages to write one.
                tracing::error!(
                    cause = %e,
                    "cannot write the seq reservation in channels.seq; messages not on disk are held back"
                );
                journal::Reservation::default()
            }
        };
        tracing::info!(
            replayed = tail.records.len(),
            bytes_read = tail.bytes_read,
            last_seq = start,
            "inbox replayed"
        );
        let marks = Arc::new(Marks::new(on_disk, start, &reserved));
        let writer = Arc::new(Mutex::new(Writer::new(
            files.clone(),
            file,
            settings.fsync,
            settings.rotate_bytes,
            marks.clone(),
        )));
        let (tx, rx) = std::sync::mpsc::channel();
        let thread_writer = writer.clone();
        let syncer = Writer::start_syncer(&writer);
        let done = std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || Writer::run(thread_writer, rx, reservation, syncer))
            .map_err(err(&files.active))?;
        let journal = Journal {
            files,
            tx: Mutex::new(Some(tx)),
            done: Mutex::new(Some(done)),
            writer,
        };
        Ok(Inbox::build(
            settings,
            tail.records,
            Some(journal),
            marks,
            skipped,
        ))
    }

    fn build(
        settings: &InboxSettings,
        replayed: Vec<Message>,
        journal: Option<Journal>,
        marks: Arc<Marks>,
        replay_skipped: u64,
    ) -> Inbox {
        let capacity = settings.ring_size.max(1);
        let mut ids = IdWindow {
            capacity: settings.dedup_ids,
            ..IdWindow::default()
        };
        let mut messages = VecDeque::with_capacity(capacity + 1);
        let mut bytes = 0;
        for m in replayed {
            if let Some(id) = &m.id {
                ids.insert(id.clone(), m.seq);
            }
            bytes += m.mem_bytes();
            messages.push_back(Arc::new(m));
        }
        let mut ring = Ring {
            messages,
            bytes,
            last_seq: marks.assigned.load(Ordering::Acquire),
            ids,
        };
        evict(&mut ring, capacity, settings.ring_bytes, Seq::MAX);
        Inbox {
            inner: Arc::new(Inner {
                ring: Mutex::new(ring),
                capacity,
                ring_bytes: settings.ring_bytes,
                limits: settings.limits.clone(),
                policy: settings.fsync,
                marks,
                journal,
                duplicates: AtomicU64::new(0),
                replay_skipped,
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
        let n = batch.len();
        self.commit(batch.into_iter(), n).await
    }

    /// Stores `n` messages that passed the limits, in order; returns once all are committed.
    async fn commit<A: Answers>(
        &self,
        batch: impl Iterator<Item = NewMessage>,
        n: usize,
    ) -> Result<A, InboxError> {
        let inner = &*self.inner;
        let marks = &*inner.marks;
        let policy = inner.policy;
        let now = Utc::now();
        let mut out = A::with_capacity(n);
        // `never`, while the journal is fine: records are encoded straight into the writer's
        // backlog, under its lock. Otherwise into `bytes`, with room for a typical record per
        // message so that encoding does not grow it.
        let direct = policy == FsyncPolicy::Never && !marks.is_failing.load(Ordering::Acquire);
        let mut bytes = Vec::with_capacity(match &inner.journal {
            Some(_) if !direct => RECORD_BYTES_HINT * n,
            _ => 0,
        });
        let mut shown = 0;
        // The highest seq this answer depends on: its own, or a duplicate's original.
        let mut need = 0;
        let mut last_new = 0;
        let pending = {
            let mut ring = inner.ring.lock().unwrap();
            let backlog = marks.backlog_bytes.load(Ordering::Relaxed);
            if inner.journal.is_some() && backlog >= MAX_BACKLOG {
                return Err(InboxError::Unavailable {
                    cause: format!(
                        "{backlog} bytes wait for the journal already; retry once it recovers"
                    ),
                });
            }
            let durable = marks.durable(policy);
            // Appends hold the ring lock, then the writer's queue, then the writer.
            let tx = inner.journal.as_ref().map(|j| j.tx.lock().unwrap());
            if tx.as_ref().is_some_and(|tx| tx.is_none()) {
                return Err(InboxError::Closed);
            }
            let mut backlog = match &inner.journal {
                Some(journal) if direct => Some(journal.writer.lock().unwrap()),
                _ => None,
            };
            for new in batch {
                if let Some(id) = new.id.as_deref().filter(|id| !id.is_empty())
                    && let Some(seq) = ring.ids.get(id)
                {
                    inner.duplicates.fetch_add(1, Ordering::Relaxed);
                    if seq > durable {
                        need = need.max(seq);
                    }
                    shown = shown.max(seq);
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
                if let Some(writer) = backlog.as_mut() {
                    let buf = writer.backlog();
                    msg.write_json(buf);
                    buf.push(b'\n');
                } else if inner.journal.is_some() {
                    msg.write_json(&mut bytes);
                    bytes.push(b'\n');
                }
                ring.bytes += msg.mem_bytes();
                ring.messages.push_back(Arc::new(msg));
                out.push(Appended {
                    seq,
                    duplicate: false,
                });
                last_new = seq;
                need = seq;
                shown = seq;
            }
            evict(
                &mut ring,
                inner.capacity,
                inner.ring_bytes,
                marks.written.load(Ordering::Acquire),
            );
            marks.assigned.store(ring.last_seq, Ordering::Release);
            // Writing or queueing under the ring lock keeps journal order = seq order.
            match &inner.journal {
                None => Pending::Done(Ok(())),
                Some(_) if need == 0 => Pending::Done(Ok(())),
                Some(journal) => {
                    let tx = tx
                        .as_ref()
                        .and_then(|tx| tx.as_ref())
                        .expect("checked above");
                    if ring.last_seq + journal::RESERVE_BLOCK / 2
                        > marks.reserved.load(Ordering::Acquire)
                        && !marks.reserve_asked.swap(true, Ordering::AcqRel)
                    {
                        let _ = tx.send(Job::Wake);
                    }
                    // While the journal fails, `never` writes inline like `interval`: the
                    // answer must say whether this very retry landed.
                    let inline = policy == FsyncPolicy::Interval
                        || (!direct && marks.is_failing.load(Ordering::Acquire));
                    match policy {
                        FsyncPolicy::Always => {
                            let (ack, rx) = oneshot::channel();
                            let written = journal
                                .writer
                                .lock()
                                .unwrap()
                                .append_then_sync(&bytes, last_new, ack);
                            match written {
                                // Retries the kept backlog with backoff.
                                Ok(true) => {
                                    let _ = tx.send(Job::Wake);
                                }
                                Ok(false) => {}
                                // No sync thread: the writer thread writes and syncs.
                                Err(ack) => tx
                                    .send(Job::Commit(Batch {
                                        bytes,
                                        last: last_new,
                                        ack,
                                    }))
                                    .map_err(|_| InboxError::Closed)?,
                            }
                            Pending::Ack(rx)
                        }
                        FsyncPolicy::Interval | FsyncPolicy::Never if inline => {
                            let (result, wake) =
                                journal.writer.lock().unwrap().append_now(&bytes, last_new);
                            if wake {
                                // Arms the sync timer, or retries the kept backlog with backoff.
                                let _ = tx.send(Job::Wake);
                            }
                            Pending::Done(result)
                        }
                        FsyncPolicy::Interval | FsyncPolicy::Never => {
                            let mut writer = match backlog.take() {
                                Some(writer) => writer,
                                None => journal.writer.lock().unwrap(),
                            };
                            if writer.queued(&bytes, last_new) {
                                let _ = tx.send(Job::Wake);
                            }
                            Pending::Done(Ok(()))
                        }
                    }
                }
            }
        };
        let result = match pending {
            Pending::Ack(rx) => rx.await.map_err(|_| InboxError::Closed)?,
            Pending::Done(result) => result,
        };
        let Some(journal) = &inner.journal else {
            marks.publish(last_new);
            return Ok(out);
        };
        // Show nothing that could be handed out again after a crash: past the reservation
        // (used up, or an outage under `always`), have the writer reserve more first.
        if shown > marks.safe() && (policy != FsyncPolicy::Always || result.is_err()) {
            let (ack, rx) = oneshot::channel();
            let sent = journal.tx.lock().unwrap().as_ref().is_some_and(|tx| {
                tx.send(Job::Reserve {
                    unwritten: policy == FsyncPolicy::Never || result.is_err(),
                    ack,
                })
                .is_ok()
            });
            if sent {
                let _ = rx.await;
            }
        }
        marks.publish(last_new);
        let failing = marks.is_failing.load(Ordering::Acquire);
        let durable = need == 0
            || marks.durable(policy) >= need
            || (policy == FsyncPolicy::Never && !failing && result.is_ok());
        if durable {
            return Ok(out);
        }
        let cause = result
            .err()
            .or_else(|| marks.failure())
            .unwrap_or_else(|| "not written yet".into());
        if shown <= self.last_seq() {
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
        self.inner.marks.committed.subscribe()
    }

    /// The highest committed seq (0 when empty).
    pub fn last_seq(&self) -> Seq {
        self.inner.marks.committed.get()
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
        let Some(journal) = &self.inner.journal else {
            return from_ring(after, limit);
        };
        {
            let ring = self.inner.ring.lock().unwrap();
            let first = ring.messages.front().map_or(Seq::MAX, |m| m.seq);
            if first <= after + 1 {
                drop(ring);
                return from_ring(after, limit);
            }
        }
        let files = journal.files.clone();
        let filter = channel.map(str::to_owned);
        let read = tokio::task::spawn_blocking(move || {
            files.after(after, limit, |m| {
                filter
                    .as_deref()
                    .is_none_or(|c| channel_filter(c, &m.channel))
            })
        })
        .await;
        match read {
            Ok(Ok((records, newest))) => {
                let mut out: Vec<_> = records
                    .into_iter()
                    .filter(|m| m.seq <= committed)
                    .map(Arc::new)
                    .collect();
                // What the journal does not hold yet is in the ring.
                if out.len() < limit {
                    let more = from_ring(newest.max(after), limit - out.len());
                    out.extend(more);
                }
                out
            }
            Ok(Err(err)) => {
                tracing::warn!(cause = %err, after, "cannot read the journal behind the ring");
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    }

    /// Current counters.
    pub fn stats(&self) -> InboxStats {
        let (ring_depth, ring_bytes) = {
            let ring = self.inner.ring.lock().unwrap();
            (ring.messages.len(), ring.bytes)
        };
        let marks = &self.inner.marks;
        let journal_status = match (&self.inner.journal, marks.failure()) {
            (None, _) => "memory".to_string(),
            (Some(_), None) => "ok".to_string(),
            (Some(_), Some(cause)) => format!("failing: {cause}"),
        };
        InboxStats {
            ring_depth,
            ring_capacity: self.inner.capacity,
            ring_bytes,
            last_seq: self.last_seq(),
            duplicates: self.inner.duplicates.load(Ordering::Relaxed),
            replay_skipped: self.inner.replay_skipped,
            journal_status,
            journal_errors: marks.errors.load(Ordering::Relaxed),
            journal_bytes: marks.bytes.load(Ordering::Relaxed),
            journal_backlog_bytes: marks.backlog_bytes.load(Ordering::Relaxed),
        }
    }

    /// Flushes and stops the writer; later appends fail with [`InboxError::Closed`].
    pub async fn close(&self) {
        let Some(journal) = &self.inner.journal else {
            return;
        };
        journal.tx.lock().unwrap().take();
        let done = journal.done.lock().unwrap().take();
        if let Some(done) = done {
            let _ = tokio::task::spawn_blocking(move || done.join()).await;
        }
    }
}

/// Drops the oldest messages while the ring is over its count or its bytes, but only those
/// the journal holds (`written`): a reader must find every message in one or the other.
fn evict(ring: &mut Ring, capacity: usize, max_bytes: usize, written: Seq) {
    while ring.messages.len() > capacity || (ring.bytes > max_bytes && ring.messages.len() > 1) {
        match ring.messages.front() {
            Some(m) if m.seq <= written => {
                ring.bytes -= m.mem_bytes();
                ring.messages.pop_front();
            }
            _ => break,
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
