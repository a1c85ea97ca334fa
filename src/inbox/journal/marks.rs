//! The journal's progress: what is assigned, written, synced and reserved, and the watch of
//! what is visible.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(test)]
use std::sync::mpsc;

use super::Reservation;
use crate::inbox::seq_watch::SeqWatch;
use crate::message::Seq;

/// The journal's progress, shared by its writer, its sync thread and its [`super::Journal`]
/// handle: what is assigned, written, synced and reserved, and the `committed` watch that
/// readers follow. What each fsync policy's answer promises is read from here
/// ([`super::policy::Policy::durable`]).
///
/// A seq becomes visible (published on `committed`) only when it can never be handed out
/// again: it is synced in the journal, or at most the seq reserved in `channels.seq`.
#[derive(Debug)]
pub struct Marks {
    /// The highest seq assigned (set by each append, under the inbox's append lock).
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

    /// The cause of the current failure.
    pub fn failure(&self) -> Option<String> {
        self.failing.lock().unwrap().clone()
    }
}
