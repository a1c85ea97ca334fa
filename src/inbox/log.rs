//! The Log boundary: the durable part of the inbox, behind one small trait.
//!
//! The inbox keeps the ring, the id window, the seq counter and the limits in memory, and the
//! cursors in `state.json` ([`super::StateStore`]); the engine reads through the inbox. What
//! must outlive the process is a [`Log`]: it takes each batch's records in seq order, gives
//! back committed records after a seq when the ring no longer holds them, and owns the
//! `committed` watch that readers and waiters follow. Two implement it today:
//! - [`super::journal::Journal`], the local journal (`channels.jsonl`), one type per fsync
//!   policy deciding how a batch reaches the file and when its appender is answered;
//! - [`Memory`], for [`super::Inbox::memory`]: nothing is durable, everything shows at once.
//!
//! # The contract
//!
//! - **Order.** [`Log::append`] is called under the inbox's append lock, right after the
//!   batch got its seqs: the log sees batches in seq order and must keep that order.
//! - **Answers.** The [`Landing`] says when the batch is durable as this log promises (the
//!   inbox answers 202 then), or why not (`NotDurable`: kept in memory, retried by the log).
//!   [`Log::durable`] is that promise as a seq; a retried duplicate above it is not
//!   acknowledged until its original lands.
//! - **Visibility.** A seq is shown (published on [`Log::committed`]) only once it can never
//!   be handed out again after a crash; [`Log::show`] lets the log make it so first (the
//!   journal's reservation in `channels.seq`).
//! - **The ring.** The ring forgets a message only once [`Log::held`] covers it, so a reader
//!   finds every committed message in one or the other.
//! - **Refusal.** [`Log::admit`] runs before seqs are given: a log that cannot take more
//!   (`Unavailable`) or is closed refuses there, so a refused batch spends no seq.
//!
//! # A second log beside the journal
//!
//! A shared log such as NATS JetStream plugs in here, without touching the ring, the cursors
//! or the engine, in one of two shapes:
//! - **The journal kept, the stream fed from it.** A type wrapping the journal forwards
//!   [`Log::append`] to it and, from a task of its own, publishes what the journal has
//!   written, the seq as the message id (so a republish after a restart is deduplicated by
//!   the stream). Acknowledgement stays the journal's (fsync policy), or waits for the
//!   stream's ack too when replication must be synchronous: then its `durable` is the lower
//!   of the two. Reads behind the ring stay local.
//! - **The log remote.** A JetStream log publishes each record (one JSON line, as the journal
//!   writes it) with the seq as its id, in order, and answers the [`Landing`] on the
//!   stream's ack (`Later`); `durable` and `committed` follow the acks. The seq counter
//!   stays in the inbox; at boot the stream's last seq plays the part of the journal's
//!   tail and reservation. [`Log::read_after`] becomes a fetch by seq, the channel filter a
//!   subject filter; it is asynchronous for that reason.
//!
//! Either way the fsync policy is the journal's business, not the inbox's: a remote log has
//! its own acknowledgement settings.

use std::collections::vec_deque;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::InboxError;
use super::seq_watch::SeqWatch;
use crate::message::{Message, Seq};

/// How an appender learns that its batch is durable as the log promises, or why not: decided
/// at once, or answered by a thread of the log (after a sync, or a write it retries).
pub use crate::message::journal::Landing;

/// The durable part of the inbox (see the module docs for the contract).
pub trait Log: Send + Sync {
    /// Whether a batch may get seqs now: `Unavailable` while the log cannot take more,
    /// `Closed` once it is closed. Asked under the append lock, before any seq is given.
    fn admit(&self) -> Result<(), InboxError>;

    /// Takes the records of one batch, in seq order. Called under the append lock, so calls
    /// come in seq order too; `batch` may hold no record (a retried duplicate whose original
    /// has not landed): the landing then answers for what came before.
    fn append(&self, batch: Batch<'_>) -> Landing;

    /// After the landing: shows seqs up to `upto` on [`Log::committed`], as far as none of
    /// them can be handed out again after a crash. `shown` is the highest seq the answer
    /// reveals (the batch's own, or a duplicate's original), `landed` the landing's outcome.
    /// When the log must first make more seqs safe, it returns that work to await; the seqs
    /// are shown at its end.
    fn show(
        &self,
        upto: Seq,
        shown: Seq,
        landed: &Result<(), String>,
    ) -> Option<BoxFuture<'static, ()>>;

    /// The highest seq readers may see: a watch that rises the moment a seq shows.
    fn committed(&self) -> &SeqWatch;

    /// The highest seq durable as this log promises it.
    fn durable(&self) -> Seq;

    /// The highest seq the log can give back by [`Log::read_after`].
    fn held(&self) -> Seq;

    /// Up to `limit` records with seq > `after` on channels matching `channel` (see
    /// [`super::channel_filter`]), oldest first, and the newest seq the log holds; the inbox
    /// shows only those up to its committed seq. For reads behind the ring.
    fn read_after(
        &self,
        after: Seq,
        limit: usize,
        channel: Option<&str>,
    ) -> BoxFuture<'static, std::io::Result<(Vec<Message>, Seq)>>;

    /// Counters for `inbox_stats`.
    fn stats(&self) -> LogStats;

    /// Refuses new batches from now on; the future ends once everything taken is flushed.
    fn close(&self) -> BoxFuture<'static, ()>;

    /// The journal's progress marks, for the inbox's tests.
    #[cfg(test)]
    fn marks(&self) -> Option<&super::journal::Marks> {
        None
    }
}

/// One batch's new records, in seq order, as [`Log::append`] takes them.
pub struct Batch<'a> {
    messages: vec_deque::Iter<'a, Arc<Message>>,
    last: Seq,
}

impl<'a> Batch<'a> {
    /// The records `messages` (seq order), the last of them `last` (0: none).
    pub fn new(messages: vec_deque::Iter<'a, Arc<Message>>, last: Seq) -> Batch<'a> {
        Batch { messages, last }
    }

    /// The highest seq of the batch; 0 when it holds no record.
    pub fn last(&self) -> Seq {
        self.last
    }

    /// The messages, oldest first.
    pub fn messages(&self) -> impl Iterator<Item = &Message> {
        self.messages.clone().map(|m| &**m)
    }

    /// The records, oldest first, as the inbox shares them with the ring.
    pub fn records(&self) -> vec_deque::Iter<'a, Arc<Message>> {
        self.messages.clone()
    }
}

/// A log's counters, for `inbox_stats`.
#[derive(Clone, Debug, Default)]
pub struct LogStats {
    /// `ok`, `memory` (nothing durable) or `failing: <cause>`.
    pub status: String,
    /// The cause of the current failure, if the log is failing.
    pub failing: Option<String>,
    /// Failed writes since start.
    pub errors: u64,
    /// Bytes in the active file.
    pub bytes: u64,
    /// Encoded records not yet written.
    pub backlog_bytes: usize,
}

/// What a log's boot found: the log, its newest records for the ring, and where seqs go on.
pub struct Opened {
    /// The log.
    pub log: Box<dyn Log>,
    /// The newest records, oldest first, for the ring (they count as read).
    pub replayed: Vec<Message>,
    /// New seqs start above this one.
    pub start: Seq,
    /// Records that could not be read back (truncated or corrupt).
    pub skipped: u64,
}

/// The log of an inbox that keeps nothing: every batch lands at once and shows at once.
pub struct Memory {
    committed: SeqWatch,
}

impl Memory {
    /// An empty log.
    pub fn new() -> Memory {
        Memory {
            committed: SeqWatch::new(0),
        }
    }
}

impl Default for Memory {
    fn default() -> Self {
        Memory::new()
    }
}

impl Log for Memory {
    fn admit(&self) -> Result<(), InboxError> {
        Ok(())
    }

    fn append(&self, _: Batch<'_>) -> Landing {
        Landing::Now(Ok(()))
    }

    fn show(&self, upto: Seq, _: Seq, _: &Result<(), String>) -> Option<BoxFuture<'static, ()>> {
        self.committed.advance(upto);
        None
    }

    fn committed(&self) -> &SeqWatch {
        &self.committed
    }

    /// Everything is as durable as it will ever be.
    fn durable(&self) -> Seq {
        Seq::MAX
    }

    /// Nothing to read back: the ring may forget anything.
    fn held(&self) -> Seq {
        Seq::MAX
    }

    fn read_after(
        &self,
        _: Seq,
        _: usize,
        _: Option<&str>,
    ) -> BoxFuture<'static, std::io::Result<(Vec<Message>, Seq)>> {
        Box::pin(std::future::ready(Ok((Vec::new(), 0))))
    }

    fn stats(&self) -> LogStats {
        LogStats {
            status: "memory".into(),
            ..LogStats::default()
        }
    }

    fn close(&self) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}
