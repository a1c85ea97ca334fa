//! The inbox journal: `channels.jsonl` (+ one backup, `channels.jsonl.1`) and the seq
//! reservation `channels.seq`; the inbox's [`Log`] on disk ([`Journal`]).
//!
//! The file is kept by the journal engine ([`crate::message::journal`]), which the actions
//! journal runs on too: group commit, the fsync policy (who writes a batch, and when its
//! appender is answered), rotation at `inbox.rotateBytes`, and a failed write cut away, logged
//! once, reported and retried with backoff while the bytes are kept (up to [`MAX_BACKLOG`]) and
//! the caller is told the batch is not durable. What is the inbox's own:
//!
//! - the record: a [`Message`], as one JSON line ([`Message::write_json`]);
//! - `channels.seq`, which holds the highest seq that may have been shown without being synced
//!   in the journal ([`Marks`] says what is visible), whether every such seq was written first,
//!   and the boot it was written in ([`Reservation`]). The engine's writer thread keeps it
//!   [`RESERVE_BLOCK`] seqs ahead, further (up to [`MAX_RESERVE_BLOCK`]) once appends had to
//!   wait for it ([`Reserver`]). Boot starts above the reservation, so no seq is
//!   handed out twice, unless the last stop was a crash of the process alone (same boot) and
//!   every seq shown was written: then boot continues right after the journal, without a gap.
//!   A clean stop with everything synced shrinks the reservation back;
//! - reading, always backwards from the end, in blocks, so boot replay costs the same whatever
//!   the file size: a truncated or corrupt line is skipped and counted, never fatal ([`Files`]).

mod files;
mod marks;
mod reservation;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::log::{Batch, Landing, Log, LogStats, Opened};
use super::seq_watch::SeqWatch;
use super::{FsyncPolicy, InboxError, InboxSettings, channel_filter};
use crate::duration::Backoff;
use crate::message::journal as engine;
use crate::message::{Message, Seq};

pub use files::{Files, Tail};
pub use marks::Marks;
pub use reservation::{Reservation, Reserver, boot_id, open_reservation};

/// The most unwritten bytes kept in memory while the disk fails; past it, new messages are
/// refused (503) rather than old ones dropped.
pub const MAX_BACKLOG: usize = 64 * 1024 * 1024;
/// Seqs reserved in `channels.seq` at a time, at first ([`Marks::block`]).
pub const RESERVE_BLOCK: Seq = 8192;
/// The most seqs reserved at a time: the largest gap a machine crash leaves in the seqs.
pub const MAX_RESERVE_BLOCK: Seq = 1 << 20;
/// The first wait before a failed write (or reservation) is tried again; it doubles with every
/// failure in a row, up to [`RETRY_MAX`]. An appender's own write tries at once meanwhile.
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two tries.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The inbox's waits between tries of a failed write or reservation.
fn retry() -> Backoff {
    Backoff::new(RETRY_FIRST, RETRY_MAX)
}

impl engine::Record for Arc<Message> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.write_json(out);
        out.push(b'\n');
    }
}

/// The journal as the inbox's [`Log`].
pub struct Journal {
    journal: engine::Journal<Arc<Message>>,
    files: Files,
    marks: Arc<Marks>,
    closed: AtomicBool,
}

/// Opens the journal whose active file is `active`, replays its tail (the ring's worth) and
/// starts the writer. New seqs start above the journal's last record, and above the
/// reservation in `channels.seq` unless that says every seq shown was written first and the
/// machine has not rebooted since: a seq shown before a crash is never handed out again.
pub fn open(active: std::path::PathBuf, settings: &InboxSettings) -> Result<Opened, InboxError> {
    let files = Files::new(active);
    let err = |path: &Path| {
        let path = path.display().to_string();
        move |source| InboxError::Journal { path, source }
    };
    let (file, cut) = engine::open_for_append(&files.active).map_err(err(&files.active))?;
    let tail = files
        .tail(settings.ring_size.max(1))
        .map_err(err(&files.active))?;
    let (reservation, old) = open_reservation(&files.reserved).map_err(err(&files.reserved))?;
    let skipped = tail.skipped + u64::from(cut > 0);
    if skipped > 0 {
        tracing::warn!(skipped, "journal replay skipped truncated or corrupt lines");
    }
    let on_disk = tail.records.last().map_or(0, |m| m.seq);
    let mut start = old.start_after(on_disk);
    if start == on_disk && on_disk > 0 {
        // Continuing right after the journal (see `Reservation`): what a crashed process
        // wrote is in the page cache; make it as durable as `synced` says below.
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
    let mine = Reservation::now(old.upto.max(start), on_disk, written_first);
    let reserved = match mine.write(&reservation) {
        Ok(()) => mine,
        Err(e) => {
            // Nothing is shown unsynced until the writer thread manages to write one.
            tracing::error!(
                cause = %e,
                "cannot write the seq reservation in channels.seq; messages not on disk are held back"
            );
            Reservation::default()
        }
    };
    tracing::info!(
        replayed = tail.records.len(),
        bytes_read = tail.bytes_read,
        last_seq = start,
        "inbox replayed"
    );
    let disk = Arc::new(engine::Status::new(on_disk));
    let marks = Arc::new(Marks::new(disk.clone(), on_disk, start, &reserved));
    let keeper = Reserver::new(reservation, marks.clone(), settings.fsync, retry());
    let journal_settings = engine::Settings {
        name: "journal",
        kept: "messages",
        fsync: settings.fsync,
        rotation: Some(engine::Rotation {
            backup: files.backup.clone(),
            bytes: settings.rotate_bytes,
        }),
        retry: retry(),
    };
    let shown = marks.clone();
    let journal = engine::Journal::start(
        files.active.clone(),
        file,
        journal_settings,
        disk,
        keeper,
        move || shown.publish(shown.disk.written.load(Ordering::Acquire)),
    )
    .map_err(err(&files.active))?;
    let start = marks.assigned.load(Ordering::Acquire);
    Ok(Opened {
        log: Box::new(Journal {
            journal,
            files,
            marks,
            closed: AtomicBool::new(false),
        }),
        replayed: tail.records,
        start,
        skipped,
    })
}

impl Log for Journal {
    fn admit(&self) -> Result<(), InboxError> {
        let backlog = self.marks.disk.backlog_bytes.load(Ordering::Relaxed);
        if backlog >= MAX_BACKLOG {
            return Err(InboxError::Unavailable {
                cause: format!(
                    "{backlog} bytes wait for the journal already; retry once it recovers"
                ),
            });
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(InboxError::Closed);
        }
        Ok(())
    }

    fn append(&self, batch: Batch<'_>) -> Landing {
        let marks = &*self.marks;
        let assigned = match batch.last() {
            0 => marks.assigned.load(Ordering::Acquire),
            last => {
                marks.assigned.store(last, Ordering::Release);
                last
            }
        };
        if assigned + marks.block.load(Ordering::Relaxed) / 2
            > marks.reserved.load(Ordering::Acquire)
            && !marks.reserve_asked.swap(true, Ordering::AcqRel)
        {
            self.journal.wake();
        }
        self.journal.append(batch.records(), batch.last())
    }

    /// Shows nothing that could be handed out again after a crash: past the reservation (used
    /// up, or shown unwritten, or an outage), the writer thread reserves more first.
    fn show(
        &self,
        upto: Seq,
        shown: Seq,
        landed: &Result<(), String>,
    ) -> Option<BoxFuture<'static, ()>> {
        let marks = &self.marks;
        if shown <= marks.safe() {
            marks.publish(upto);
            return None;
        }
        let unwritten = self.journal.fsync() == FsyncPolicy::Never || landed.is_err();
        let (ack, rx) = oneshot::channel();
        marks.ask_reservation(unwritten, ack);
        let asked = self.journal.wake();
        let marks = self.marks.clone();
        Some(Box::pin(async move {
            if asked {
                let _ = rx.await;
            }
            marks.publish(upto);
        }))
    }

    fn committed(&self) -> &SeqWatch {
        &self.marks.committed
    }

    /// What the fsync policy's answer promises, as a seq: `always` synced, `interval`
    /// written, `never` queued (everything assigned is queued, under the append lock) but
    /// only what is written while the journal fails.
    fn durable(&self) -> Seq {
        let disk = &self.marks.disk;
        match self.journal.fsync() {
            FsyncPolicy::Always => disk.synced.load(Ordering::Acquire),
            FsyncPolicy::Never if !disk.is_failing() => self.marks.assigned.load(Ordering::Acquire),
            FsyncPolicy::Interval | FsyncPolicy::Never => disk.written.load(Ordering::Acquire),
        }
    }

    fn held(&self) -> Seq {
        self.marks.disk.written.load(Ordering::Acquire)
    }

    fn read_after(
        &self,
        after: Seq,
        limit: usize,
        channel: Option<&str>,
    ) -> BoxFuture<'static, std::io::Result<(Vec<Message>, Seq)>> {
        let files = self.files.clone();
        let channel = channel.map(str::to_owned);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                files.after(after, limit, |m| {
                    channel
                        .as_deref()
                        .is_none_or(|c| channel_filter(c, &m.channel))
                })
            })
            .await
            .map_err(std::io::Error::other)?
        })
    }

    fn stats(&self) -> LogStats {
        let disk = &self.marks.disk;
        let failing = disk.failure();
        LogStats {
            status: match &failing {
                None => "ok".into(),
                Some(cause) => format!("failing: {cause}"),
            },
            failing,
            errors: disk.errors.load(Ordering::Relaxed),
            bytes: disk.bytes.load(Ordering::Relaxed),
            backlog_bytes: disk.backlog_bytes.load(Ordering::Relaxed),
        }
    }

    fn close(&self) -> BoxFuture<'static, ()> {
        self.closed.store(true, Ordering::Release);
        Box::pin(self.journal.close())
    }

    #[cfg(test)]
    fn marks(&self) -> Option<&Marks> {
        Some(&self.marks)
    }
}

/// A journal line for a message of seq `seq`, as the tests write them.
#[cfg(test)]
fn record(seq: Seq) -> String {
    use crate::message::NewMessage;
    let t = "2026-11-22T10:00:00Z".parse().unwrap();
    let m = Message::from_new(
        NewMessage::new("cli", "c", format!("message {seq}")),
        seq,
        t,
    );
    serde_json::to_string(&m).unwrap() + "\n"
}
