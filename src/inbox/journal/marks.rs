//! The journal's progress as seqs: what is assigned, written, synced and reserved, and the
//! watch of what is visible.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::{RESERVE_BLOCK, Reservation};
use crate::inbox::seq_watch::SeqWatch;
use crate::message::Seq;
use crate::message::journal::Status;

/// The journal's progress, shared by its handle, the engine's threads and the [`super::Reserver`]:
/// what is assigned and reserved, what the engine has written and synced ([`Marks::disk`], its
/// positions being seqs), and the `committed` watch that readers follow.
///
/// A seq becomes visible (published on `committed`) only when it can never be handed out
/// again: it is synced in the journal, or at most the seq reserved in `channels.seq`.
#[derive(Debug)]
pub struct Marks {
    /// The highest seq assigned (set by each append, under the inbox's append lock).
    pub assigned: AtomicU64,
    /// The highest seq reserved in `channels.seq`: a seq up to it may be shown once written.
    pub reserved: AtomicU64,
    /// The highest seq that may be shown before it is written: the reservation when
    /// `channels.seq` says so (mode `u`, see [`Reservation`]), else 0.
    pub reserved_unwritten: AtomicU64,
    /// An append asked for a reservation ahead; cleared when the writer has made it.
    pub reserve_asked: AtomicBool,
    /// How far ahead of the assigned seqs a reservation reaches: [`RESERVE_BLOCK`], doubled
    /// (up to [`super::MAX_RESERVE_BLOCK`]) each time an append had to wait for one, so that a
    /// sustained burst stops waiting for `channels.seq`'s sync.
    pub block: AtomicU64,
    /// The highest visible seq.
    pub committed: SeqWatch,
    /// What the journal engine reports: written, synced, backlog, size, errors, the outage.
    pub disk: Arc<Status>,
    /// Appenders waiting for a reservation before they show their seqs.
    asks: Mutex<Asks>,
}

/// Appenders waiting for a reservation ([`Marks::ask_reservation`]).
#[derive(Debug, Default)]
pub struct Asks {
    /// Told once it is made (or failed).
    pub acks: Vec<oneshot::Sender<()>>,
    /// One of them shows seqs before they are written (`never`, or the journal failed to take
    /// them): the reservation is of mode `u` from now on.
    pub unwritten: bool,
}

impl Marks {
    /// Marks for a journal whose newest record is `on_disk`, handing out seqs above `start`,
    /// with `reserved` in `channels.seq` (see [`Reservation::start_after`]); `disk` is the
    /// engine's report.
    pub fn new(disk: Arc<Status>, on_disk: Seq, start: Seq, reserved: &Reservation) -> Marks {
        Marks {
            assigned: AtomicU64::new(start.max(on_disk)),
            reserved: AtomicU64::new(reserved.upto),
            reserved_unwritten: AtomicU64::new(if reserved.written_first {
                0
            } else {
                reserved.upto
            }),
            reserve_asked: AtomicBool::new(false),
            block: AtomicU64::new(RESERVE_BLOCK),
            // Readers start at the last message that exists; the first new one jumps the gap.
            committed: SeqWatch::new(on_disk),
            disk,
            asks: Mutex::default(),
        }
    }

    /// The highest seq that can never be handed out again: synced, or written and reserved,
    /// or reserved in mode `u`.
    pub fn safe(&self) -> Seq {
        let written = self.disk.written.load(Ordering::Acquire);
        let reserved = self.reserved.load(Ordering::Acquire);
        self.disk
            .synced
            .load(Ordering::Acquire)
            .max(written.min(reserved))
            .max(self.reserved_unwritten.load(Ordering::Acquire))
    }

    /// Makes seqs up to `upto` visible, as far as they are safe.
    pub fn publish(&self, upto: Seq) {
        self.committed.advance(upto.min(self.safe()));
    }

    /// Asks the writer thread for a reservation beyond everything assigned; `ack` is told once
    /// it is made (or failed). `unwritten`: the seqs are shown before they are written.
    pub fn ask_reservation(&self, unwritten: bool, ack: oneshot::Sender<()>) {
        let mut asks = self.asks.lock().unwrap();
        asks.unwritten |= unwritten;
        asks.acks.push(ack);
    }

    /// The appenders waiting for a reservation, taken.
    pub fn take_asks(&self) -> Asks {
        std::mem::take(&mut *self.asks.lock().unwrap())
    }
}
