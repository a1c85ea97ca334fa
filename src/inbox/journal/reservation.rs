//! `channels.seq`, the seq reservation, and the boot id it is tied to.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::message::Seq;

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
