//! The inbox journal: `channels.jsonl` (+ one backup, `channels.jsonl.1`) and the seq
//! reservation `channels.seq`.
//!
//! Owns the files. With `fsync = always`, the appending task writes its batch
//! itself under the writer's lock and shows it (no thread hand-off before a wait
//! can see it); a sync thread does *group commit*: it fsyncs once for everything
//! written since its last sync and only then acknowledges those appenders, while
//! others go on writing. With `interval` the appending task writes the same way
//! and the writer thread syncs within a second of the first unsynced write,
//! outside that lock. Under both, a rotation (due once the file passes its size)
//! syncs and renames from the appending task too. With `never` the appending task
//! only queues its bytes; the thread writes them within [`FLUSH_INTERVAL`] and
//! syncs only at rotation and shutdown.
//! A failed write is truncated away, logged once, reported and retried with
//! backoff; the caller is told the batch is not durable, and the bytes are kept
//! (up to [`MAX_BACKLOG`]) until a retry lands them.
//!
//! `channels.seq` holds the highest seq that may have been shown without being
//! synced in the journal ([`Marks`] says what is visible), whether every such seq
//! was written first, and the boot it was written in ([`Reservation`]). The thread
//! reserves [`RESERVE_BLOCK`] seqs ahead. Boot starts above the reservation, so no
//! seq is handed out twice, unless the last stop was a crash of the process alone
//! (same boot) and every seq shown was written: then boot continues right after
//! the journal, without a gap. A clean stop with everything synced shrinks the
//! reservation back.
//!
//! Reading is always backwards from the end, in blocks, so boot replay costs
//! the same whatever the file size: a truncated or corrupt line is skipped and
//! counted, never fatal.

mod files;
mod marks;
mod reservation;
mod writer;

use std::time::Duration;

use crate::message::Seq;

pub use files::{Files, Tail, open_for_append};
pub use marks::Marks;
pub use reservation::{Reservation, boot_id, open_reservation};
pub use writer::{Batch, Job, Syncer, Writer};

/// The most unwritten bytes kept in memory while the disk fails; past it, new messages are
/// refused (503) rather than old ones dropped.
pub const MAX_BACKLOG: usize = 64 * 1024 * 1024;
/// With `never`, the longest a queued record waits for its write.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(1);
/// Seqs reserved in `channels.seq` at a time.
pub const RESERVE_BLOCK: Seq = 8192;

/// A journal line for a message of seq `seq`, as the tests write them.
#[cfg(test)]
fn record(seq: Seq) -> String {
    use crate::message::{Message, NewMessage};
    let t = "2026-11-22T10:00:00Z".parse().unwrap();
    let m = Message::from_new(
        NewMessage::new("cli", "c", format!("message {seq}")),
        seq,
        t,
    );
    serde_json::to_string(&m).unwrap() + "\n"
}
