//! The fsync policies, one type each: how a batch reaches the journal and when its appender
//! is answered.
//!
//! [`Policy::hand_off`] runs under the inbox's append lock (so batches reach the writer in
//! seq order) and takes the writer's lock only to encode the batch into the writer's backlog
//! and write or queue it; the syncs and the rotation are the sync thread's and the writer
//! thread's (see [`super::writer`] for the one fallback). [`Policy::durable`] is what the
//! policy's answer promises, as a seq.

use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::{Job, Marks, Shared};
use crate::inbox::log::{Batch, Landing};
use crate::message::Seq;

/// An fsync policy of the journal.
pub trait Policy: Send + Sync + 'static {
    /// Seqs may be shown before they are written, so `channels.seq` must cover them in mode
    /// `u` (see [`super::Reservation`]).
    const SHOWS_UNWRITTEN: bool;

    /// Hands `batch` to the writer and says how its appender learns the outcome.
    fn hand_off(journal: &Shared, batch: Batch<'_>) -> Landing;

    /// The highest seq on disk as the policy promises it.
    fn durable(marks: &Marks) -> Seq;
}

/// `always`: the appender writes its batch itself and shows it; the sync thread answers once
/// it has synced it (group commit). The answer means synced.
pub struct Always;

impl Policy for Always {
    const SHOWS_UNWRITTEN: bool = false;

    fn hand_off(journal: &Shared, batch: Batch<'_>) -> Landing {
        let (ack, rx) = oneshot::channel();
        let written = {
            let mut w = journal.writer.lock().unwrap();
            w.take(&batch);
            w.write_then_sync(ack)
        };
        match written {
            // Rotates the file it filled, or retries the kept backlog with backoff.
            Ok(true) => {
                journal.send(Job::Wake);
            }
            Ok(false) => {}
            // No sync thread: the writer thread writes and syncs the backlog. Should it be
            // gone too, the dropped `ack` answers `Closed`.
            Err(ack) => {
                journal.send(Job::Commit(ack));
            }
        }
        Landing::Later(rx)
    }

    fn durable(marks: &Marks) -> Seq {
        marks.synced.load(Ordering::Acquire)
    }
}

/// `interval`: the appender writes its batch itself and is answered once it is written; the
/// writer thread syncs within a second. The answer means written.
pub struct Interval;

impl Policy for Interval {
    const SHOWS_UNWRITTEN: bool = false;

    fn hand_off(journal: &Shared, batch: Batch<'_>) -> Landing {
        let (result, wake) = {
            let mut w = journal.writer.lock().unwrap();
            w.take(&batch);
            w.write_now()
        };
        if wake {
            // Arms the sync timer, rotates the file it filled, or retries the kept backlog
            // with backoff.
            journal.send(Job::Wake);
        }
        Landing::Now(result)
    }

    fn durable(marks: &Marks) -> Seq {
        marks.written.load(Ordering::Acquire)
    }
}

/// `never`: the appender queues its batch and is answered at once; the writer thread writes
/// within [`super::FLUSH_INTERVAL`]. While the journal fails, the appender writes like
/// `interval`, so that its answer says whether this very retry landed. The answer means
/// queued (written, while the journal fails).
pub struct Never;

impl Policy for Never {
    const SHOWS_UNWRITTEN: bool = true;

    fn hand_off(journal: &Shared, batch: Batch<'_>) -> Landing {
        let (result, wake) = {
            let mut w = journal.writer.lock().unwrap();
            w.take(&batch);
            if journal.marks.is_failing.load(Ordering::Acquire) {
                w.write_now()
            } else {
                (Ok(()), w.queued())
            }
        };
        if wake {
            journal.send(Job::Wake);
        }
        Landing::Now(result)
    }

    /// Everything assigned is queued (under the append lock); while the journal fails, only
    /// what is written counts.
    fn durable(marks: &Marks) -> Seq {
        if marks.is_failing.load(Ordering::Acquire) {
            marks.written.load(Ordering::Acquire)
        } else {
            marks.assigned.load(Ordering::Acquire)
        }
    }
}
