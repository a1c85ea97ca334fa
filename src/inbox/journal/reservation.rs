//! `channels.seq`, the seq reservation, the boot id it is tied to, and the [`Reserver`] that
//! keeps it ahead on the journal's writer thread.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{MAX_RESERVE_BLOCK, Marks};
use crate::duration::Backoff;
use crate::home::FsyncPolicy;
use crate::message::journal::Keeper;
use crate::message::{Message, Seq};

/// `channels.seq`: how far seqs may have been shown without being synced in the journal.
///
/// One line, rewritten in place (so a full disk can still take it) and synced before any seq it
/// covers is shown: `<upto> <floor> <mode> <boot id>`, the seqs as twenty digits, e.g.
/// `00000000000000008292 00000000000000000100 w 6f1c…`. A line of only digits (the format
/// before the mode and boot id) reads as a reservation of mode `u` from an unknown boot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reservation {
    /// The highest seq that may have been shown without being synced in the journal: after a
    /// crash of the machine, boot starts above it.
    pub upto: Seq,
    /// The highest seq written to the journal when the line was written.
    pub floor: Seq,
    /// Mode `w`: every seq shown above the synced journal was written to it first. The page
    /// cache then holds it for as long as the kernel runs, so a restart in the same boot (a
    /// crash of the process only) continues right after the journal's last record, without a
    /// gap. Mode `u` (`never`, or once a seq was shown while the journal failed): seqs up to
    /// `upto` may have been shown unwritten, so every restart starts above `upto`.
    pub written_first: bool,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`) when the line was written.
    pub boot: Option<String>,
}

/// The width of a `channels.seq` line, newline included.
const RESERVATION_LEN: usize = 20 + 1 + 20 + 1 + 1 + 1 + BOOT_ID_LEN + 1;
/// The length of a boot id: a UUID in its text form.
const BOOT_ID_LEN: usize = 36;

impl Reservation {
    /// A reservation of `upto` written now, `floor` being the highest seq written.
    pub fn now(upto: Seq, floor: Seq, written_first: bool) -> Reservation {
        Reservation {
            upto,
            floor,
            written_first,
            boot: boot_id().map(str::to_owned),
        }
    }

    /// The first seq a restart may hand out after `on_disk`, the journal's last record, so
    /// that no seq shown before the last stop is handed out again.
    pub fn start_after(&self, on_disk: Seq) -> Seq {
        let same_boot = self.boot.is_some() && self.boot.as_deref() == boot_id();
        if self.written_first && same_boot && on_disk >= self.floor {
            on_disk
        } else {
            on_disk.max(self.upto)
        }
    }

    fn line(&self) -> String {
        let boot = self.boot.as_deref().unwrap_or("-");
        let mode = if self.written_first { 'w' } else { 'u' };
        format!(
            "{:020} {:020} {mode} {boot:<BOOT_ID_LEN$}\n",
            self.upto, self.floor
        )
    }

    /// Reads a line; `None` when it is not a reservation.
    fn parse(text: &str) -> Option<Reservation> {
        let mut fields = text.split_whitespace();
        let upto = fields.next()?.parse().ok()?;
        let Some(floor) = fields.next() else {
            return Some(Reservation {
                upto,
                ..Reservation::default()
            });
        };
        let floor = floor.parse().ok()?;
        let written_first = match fields.next()? {
            "w" => true,
            "u" => false,
            _ => return None,
        };
        let boot = fields.next().filter(|b| *b != "-").map(str::to_owned);
        Some(Reservation {
            upto,
            floor,
            written_first,
            boot,
        })
    }

    /// Rewrites `file` with this line and syncs it.
    pub fn write(&self, file: &File) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let line = self.line();
        debug_assert_eq!(line.len(), RESERVATION_LEN);
        file.write_all_at(line.as_bytes(), 0)?;
        file.sync_data()
    }
}

/// The journal's hold on `channels.seq`, on the engine's writer thread (a [`Keeper`]): it
/// reserves ahead of the assigned seqs, and on demand before an append shows seqs past the
/// reservation ([`Marks::ask_reservation`]). A failed reservation is logged once and tried
/// again with backoff (at once for an appender that waits).
pub struct Reserver {
    file: File,
    marks: Arc<Marks>,
    /// The last write of the reservation failed.
    failing: bool,
    /// Seqs may be shown before they are written: always with `never`, and from the first
    /// reservation asked for a message the journal failed to take (for the rest of the run).
    unwritten: bool,
    retry: Backoff,
    /// After a failure: when to try again unasked.
    retry_at: Option<Instant>,
    /// A reservation of this run is written.
    made: bool,
}

impl Reserver {
    /// Keeps `file` (`channels.seq`, opened by [`open_reservation`]) ahead of `marks`.
    pub fn new(file: File, marks: Arc<Marks>, fsync: FsyncPolicy, retry: Backoff) -> Reserver {
        Reserver {
            file,
            marks,
            failing: false,
            unwritten: fsync == FsyncPolicy::Never,
            retry,
            retry_at: None,
            made: false,
        }
    }

    /// Reserves ahead (every policy: `always` shows a record once written, before its sync)
    /// or on demand, outside the writer's lock; then answers whoever asked.
    fn step(&mut self) {
        let marks = &*self.marks;
        let asks = marks.take_asks();
        self.unwritten |= asks.unwritten;
        let assigned = marks.assigned.load(Ordering::Acquire);
        let reserved = marks.reserved.load(Ordering::Acquire);
        let mut block = marks.block.load(Ordering::Relaxed);
        let ahead = assigned + block / 2 > reserved;
        let asked = !asks.acks.is_empty()
            && (assigned > reserved
                || (self.unwritten && assigned > marks.reserved_unwritten.load(Ordering::Acquire)));
        if asked && self.made && block < MAX_RESERVE_BLOCK {
            // Appends outran the reservation this run made and waited for its sync (the first
            // append after a start always waits, for the first one): reach further ahead.
            block = (block * 2).min(MAX_RESERVE_BLOCK);
            marks.block.store(block, Ordering::Relaxed);
        }
        // A failed write or sync may leave shown records out of the page cache too: from
        // now on, a restart must not count on it.
        let degraded = !self.unwritten && marks.disk.is_failing();
        self.unwritten |= degraded;
        let now = Instant::now();
        let due = asked || self.retry_at.is_none_or(|t| now >= t);
        if (ahead || asked || degraded) && due {
            let upto = assigned + block;
            let floor = marks.disk.written.load(Ordering::Acquire);
            match Reservation::now(upto, floor, !self.unwritten).write(&self.file) {
                Ok(()) => {
                    self.made = true;
                    marks.reserved.fetch_max(upto, Ordering::AcqRel);
                    if self.unwritten {
                        marks.reserved_unwritten.fetch_max(upto, Ordering::AcqRel);
                    }
                    // `always`: what an appender wrote past the old reservation may show
                    // now, before its sync.
                    marks.publish(marks.disk.written.load(Ordering::Acquire));
                    if std::mem::take(&mut self.failing) {
                        tracing::info!("seq reservation written again");
                    }
                    self.retry.reset();
                    self.retry_at = None;
                }
                Err(e) => {
                    if !std::mem::replace(&mut self.failing, true) {
                        tracing::error!(
                            cause = %e,
                            "cannot reserve seqs in channels.seq; messages not on disk are held back"
                        );
                    }
                    self.retry_at = Some(now + self.retry.next());
                }
            }
            marks.reserve_asked.store(false, Ordering::Release);
        }
        for ack in asks.acks {
            let _ = ack.send(());
        }
    }
}

impl Keeper<Arc<Message>> for Reserver {
    fn upkeep(&mut self) -> Option<Instant> {
        self.step();
        self.retry_at.filter(|_| self.failing)
    }

    /// Everything handed out is synced: no seq needs reserving past it, so a clean restart
    /// continues without a gap.
    fn finish(&mut self, flushed: bool) {
        let marks = &*self.marks;
        let synced = marks.disk.synced.load(Ordering::Acquire);
        if flushed
            && synced >= marks.assigned.load(Ordering::Acquire)
            && Reservation::now(synced, synced, true)
                .write(&self.file)
                .is_ok()
        {
            marks.reserved.store(synced, Ordering::Release);
        }
    }
}

/// The kernel's boot id, which changes with every boot; `None` where the kernel has none.
pub fn boot_id() -> Option<&'static str> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = text.trim();
        let well_formed =
            id.len() == BOOT_ID_LEN && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        well_formed.then(|| id.to_owned())
    })
    .as_deref()
}

/// Opens `channels.seq` and reads it (an empty or new file reads as no reservation).
pub fn open_reservation(path: &Path) -> std::io::Result<(File, Reservation)> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let reservation = if text.trim().is_empty() {
        // New: make its name durable; the caller writes and syncs its line.
        if let Some(Ok(dir)) = path.parent().map(File::open) {
            let _ = dir.sync_all();
        }
        Reservation::default()
    } else {
        Reservation::parse(&text).unwrap_or_else(|| {
            tracing::warn!(
                path = %path.display(),
                "not a seq reservation; ignored (seqs continue after the journal's last record)"
            );
            Reservation::default()
        })
    };
    Ok((file, reservation))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_reservation_line_is_fixed_width_and_reads_back() {
        let boots = [
            Some("0b6f2cfa-5d7e-4c1e-9a57-3f0e8e1b2c44".to_string()),
            None,
        ];
        for (boot, written_first) in boots.into_iter().zip([true, false]) {
            let r = Reservation {
                upto: 8292,
                floor: 100,
                written_first,
                boot,
            };
            let line = r.line();
            assert_eq!(line.len(), RESERVATION_LEN, "{line:?}");
            assert_eq!(Reservation::parse(&line), Some(r));
        }
        // The format before the mode and boot id: a reservation from an unknown boot.
        let old = Reservation::parse("00000000000000008192\n").unwrap();
        assert_eq!((old.upto, old.written_first, old.boot), (8192, false, None));
        assert_eq!(Reservation::parse("8192 100 x -"), None);
        assert_eq!(Reservation::parse("many"), None);
    }

    #[test]
    fn a_restart_continues_after_the_journal_only_in_the_same_boot_with_mode_w() {
        let here = boot_id().map(str::to_owned);
        assert!(here.is_some(), "no /proc/sys/kernel/random/boot_id here");
        let r = |written_first, boot: Option<String>| Reservation {
            upto: 8292,
            floor: 100,
            written_first,
            boot,
        };
        let other = Some("00000000-0000-0000-0000-000000000000".to_string());
        // A crash of the process: the page cache kept every written record.
        assert_eq!(r(true, here.clone()).start_after(150), 150);
        assert_eq!(r(true, here.clone()).start_after(100), 100);
        // The journal holds less than when the line was written (it was cut or replaced).
        assert_eq!(r(true, here.clone()).start_after(99), 8292);
        // Seqs may have been shown unwritten; or the machine rebooted; or no boot id.
        assert_eq!(r(false, here.clone()).start_after(150), 8292);
        assert_eq!(r(true, other).start_after(150), 8292);
        assert_eq!(r(true, None).start_after(150), 8292);
        // A journal beyond the reservation continues after itself either way.
        assert_eq!(r(false, None).start_after(9000), 9000);
    }

    #[test]
    fn appends_that_wait_for_the_reservation_make_it_reach_further_ahead() {
        use super::super::RESERVE_BLOCK;
        let dir = tempfile::tempdir().unwrap();
        let (file, reserved) = open_reservation(&dir.path().join("channels.seq")).unwrap();
        let disk = Arc::new(crate::message::journal::Status::new(0));
        let marks = Arc::new(Marks::new(disk, 0, 0, &reserved));
        let mut reserver = Reserver::new(
            file,
            marks.clone(),
            FsyncPolicy::Interval,
            Backoff::new(
                std::time::Duration::from_millis(1),
                std::time::Duration::from_millis(1),
            ),
        );
        let reserved = || marks.reserved.load(Ordering::Acquire);
        // Ahead of the appends: one block, nobody waited.
        marks.assigned.store(10, Ordering::Release);
        reserver.step();
        assert_eq!(reserved(), 10 + RESERVE_BLOCK);
        // Appends outran it and one waits: the next reservation reaches twice as far.
        let mut assigned = reserved() + 5;
        for block in [2 * RESERVE_BLOCK, 4 * RESERVE_BLOCK] {
            marks.assigned.store(assigned, Ordering::Release);
            let (ack, mut told) = tokio::sync::oneshot::channel();
            marks.ask_reservation(false, ack);
            reserver.step();
            assert_eq!(told.try_recv(), Ok(()), "the waiting append is told");
            assert_eq!(reserved(), assigned + block);
            assigned = reserved() + 1;
        }
        // Never past the most: a machine crash skips at most that many seqs.
        for _ in 0..20 {
            marks.assigned.store(assigned, Ordering::Release);
            let (ack, _told) = tokio::sync::oneshot::channel();
            marks.ask_reservation(false, ack);
            reserver.step();
            assigned = reserved() + 1;
        }
        assert_eq!(marks.block.load(Ordering::Relaxed), MAX_RESERVE_BLOCK);
        // Kept ahead without a wait, the block stays as it is.
        let before = reserved();
        marks
            .assigned
            .store(before - MAX_RESERVE_BLOCK / 2, Ordering::Release);
        reserver.step();
        assert_eq!(reserved(), before, "still half a block ahead");
        marks
            .assigned
            .store(before - MAX_RESERVE_BLOCK / 2 + 1, Ordering::Release);
        reserver.step();
        assert_eq!(reserved(), before + MAX_RESERVE_BLOCK / 2 + 1);
        assert_eq!(marks.block.load(Ordering::Relaxed), MAX_RESERVE_BLOCK);
    }

    #[test]
    fn reservation_rewrites_in_place_and_opens_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("channels.seq");
        write(&path, "00000000000000004096\n");
        let (file, old) = open_reservation(&path).unwrap();
        assert_eq!(old.upto, 4096);
        let new = Reservation::now(8192, 10, true);
        new.write(&file).unwrap();
        Reservation::now(16384, 20, false).write(&file).unwrap();
        new.write(&file).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), new.line());
        assert_eq!(open_reservation(&path).unwrap().1, new);
    }
}
