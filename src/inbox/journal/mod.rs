//! The inbox journal: `channels.jsonl` (+ one backup, `channels.jsonl.1`) and the seq
//! reservation `channels.seq`; the inbox's [`Log`] on disk ([`Journal`]).
//!
//! Owns the files and their writer. How a batch reaches the file and when its appender is
//! answered is the fsync policy's, one type each ([`policy`]):
//! - `always`: the appending task writes its batch itself under the writer's lock and shows
//!   it (no thread hand-off before a wait can see it); a sync thread does *group commit*: it
//!   fsyncs once for everything written since its last sync and only then acknowledges those
//!   appenders, while others go on writing.
//! - `interval`: the appending task writes the same way and is answered after the write; the
//!   writer thread syncs within a second of the first unsynced write, outside that lock.
//! - `never`: the appending task only queues its records and is answered at once; the writer
//!   thread writes them within [`FLUSH_INTERVAL`] and syncs only at rotation and shutdown.
//!   While the journal fails, it writes them itself like `interval`, so that its answer says
//!   whether this very retry landed.
//!
//! Rotation (due once the active file passes its size) is the writer thread's: an appender
//! that fills the file only asks for it, and the syncs around the rename run outside the
//! writer's lock (see [`writer`]). A failed write is truncated away, logged once, reported and retried with
//! backoff; the caller is told the batch is not durable, and the bytes are kept (up to
//! [`MAX_BACKLOG`]) until a retry lands them.
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
pub mod policy;
mod reservation;
pub mod writer;

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::log::{Batch, Landing, Log, LogStats, Opened};
use super::seq_watch::SeqWatch;
use super::{FsyncPolicy, InboxError, InboxSettings, channel_filter};
use crate::message::{Message, Seq};

pub use files::{Files, Tail, open_for_append};
pub use marks::Marks;
use policy::{Always, Interval, Never, Policy};
pub use reservation::{Reservation, boot_id, open_reservation};
pub use writer::{Job, Syncer, Writer};

/// The most unwritten bytes kept in memory while the disk fails; past it, new messages are
/// refused (503) rather than old ones dropped.
pub const MAX_BACKLOG: usize = 64 * 1024 * 1024;
/// With `never`, the longest a queued record waits for its write.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(1);
/// Seqs reserved in `channels.seq` at a time.
pub const RESERVE_BLOCK: Seq = 8192;

/// The journal as the inbox's [`Log`], `P` being its fsync policy.
pub struct Journal<P> {
    shared: Arc<Shared>,
    policy: PhantomData<P>,
}

/// What the journal's handle shares with the futures it hands out.
pub struct Shared {
    files: Files,
    marks: Arc<Marks>,
    writer: Arc<Mutex<Writer>>,
    /// The writer thread's queue; taken at close, which ends the thread.
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    done: Mutex<Option<std::thread::JoinHandle<()>>>,
    closed: AtomicBool,
}

impl Shared {
    /// Hands `job` to the writer thread; false once it is gone.
    fn send(&self, job: Job) -> bool {
        self.tx
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|tx| tx.send(job).is_ok())
    }
}

/// Opens the journal whose active file is `active`, replays its tail (the ring's worth) and
/// starts the writer. New seqs start above the journal's last record, and above the
/// reservation in `channels.seq` unless that says every seq shown was written first and the
/// machine has not rebooted since: a seq shown before a crash is never handed out again.
pub fn open(active: PathBuf, settings: &InboxSettings) -> Result<Opened, InboxError> {
    let files = Files::new(active);
    let err = |path: &Path| {
        let path = path.display().to_string();
        move |source| InboxError::Journal { path, source }
    };
    let (file, cut) = open_for_append(&files.active).map_err(err(&files.active))?;
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
    let marks = Arc::new(Marks::new(on_disk, start, &reserved));
    let writer = Arc::new(Mutex::new(Writer::new(
        files.clone(),
        file,
        settings.fsync,
        settings.rotate_bytes,
        marks.clone(),
    )));
    let (tx, rx) = mpsc::channel();
    let thread_writer = writer.clone();
    let syncer = Writer::start_syncer(&writer);
    let done = std::thread::Builder::new()
        .name("journal-writer".into())
        .spawn(move || Writer::run(thread_writer, rx, reservation, syncer))
        .map_err(err(&files.active))?;
    let start = marks.assigned.load(Ordering::Acquire);
    let shared = Arc::new(Shared {
        files,
        marks,
        writer,
        tx: Mutex::new(Some(tx)),
        done: Mutex::new(Some(done)),
        closed: AtomicBool::new(false),
    });
    let log: Box<dyn Log> = match settings.fsync {
        FsyncPolicy::Always => Box::new(Journal::<Always>::new(shared)),
        FsyncPolicy::Interval => Box::new(Journal::<Interval>::new(shared)),
        FsyncPolicy::Never => Box::new(Journal::<Never>::new(shared)),
    };
    Ok(Opened {
        log,
        replayed: tail.records,
        start,
        skipped,
    })
}

impl<P: Policy> Journal<P> {
    fn new(shared: Arc<Shared>) -> Journal<P> {
        Journal {
            shared,
            policy: PhantomData,
        }
    }
}

impl<P: Policy> Log for Journal<P> {
    fn admit(&self) -> Result<(), InboxError> {
        let backlog = self.shared.marks.backlog_bytes.load(Ordering::Relaxed);
        if backlog >= MAX_BACKLOG {
            return Err(InboxError::Unavailable {
                cause: format!(
                    "{backlog} bytes wait for the journal already; retry once it recovers"
                ),
            });
        }
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(InboxError::Closed);
        }
        Ok(())
    }

    fn append(&self, batch: Batch<'_>) -> Landing {
        let marks = &self.shared.marks;
        let assigned = match batch.last() {
            0 => marks.assigned.load(Ordering::Acquire),
            last => {
                marks.assigned.store(last, Ordering::Release);
                last
            }
        };
        if assigned + RESERVE_BLOCK / 2 > marks.reserved.load(Ordering::Acquire)
            && !marks.reserve_asked.swap(true, Ordering::AcqRel)
        {
            self.shared.send(Job::Wake);
        }
        P::hand_off(&self.shared, batch)
    }

    /// Shows nothing that could be handed out again after a crash: past the reservation (used
    /// up, or shown unwritten, or an outage), the writer thread reserves more first.
    fn show(
        &self,
        upto: Seq,
        shown: Seq,
        landed: &Result<(), String>,
    ) -> Option<BoxFuture<'static, ()>> {
        let marks = &self.shared.marks;
        if shown <= marks.safe() {
            marks.publish(upto);
            return None;
        }
        let shared = self.shared.clone();
        let unwritten = P::SHOWS_UNWRITTEN || landed.is_err();
        Some(Box::pin(async move {
            let (ack, rx) = oneshot::channel();
            if shared.send(Job::Reserve { unwritten, ack }) {
                let _ = rx.await;
            }
            shared.marks.publish(upto);
        }))
    }

    fn committed(&self) -> &SeqWatch {
        &self.shared.marks.committed
    }

    fn durable(&self) -> Seq {
        P::durable(&self.shared.marks)
    }

    fn held(&self) -> Seq {
        self.shared.marks.written.load(Ordering::Acquire)
    }

    fn read_after(
        &self,
        after: Seq,
        limit: usize,
        channel: Option<&str>,
    ) -> BoxFuture<'static, std::io::Result<(Vec<Message>, Seq)>> {
        let files = self.shared.files.clone();
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
        let marks = &self.shared.marks;
        let failing = marks.failure();
        LogStats {
            status: match &failing {
                None => "ok".into(),
                Some(cause) => format!("failing: {cause}"),
            },
            failing,
            errors: marks.errors.load(Ordering::Relaxed),
            bytes: marks.bytes.load(Ordering::Relaxed),
            backlog_bytes: marks.backlog_bytes.load(Ordering::Relaxed),
        }
    }

    fn close(&self) -> BoxFuture<'static, ()> {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.tx.lock().unwrap().take();
        let done = self.shared.done.lock().unwrap().take();
        Box::pin(async move {
            if let Some(done) = done {
                let _ = tokio::task::spawn_blocking(move || done.join()).await;
            }
        })
    }

    #[cfg(test)]
    fn marks(&self) -> Option<&Marks> {
        Some(&self.shared.marks)
    }
}

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
