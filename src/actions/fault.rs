//! Test help: makes a journal refuse writes, as a full or read-only disk would.

use std::path::{Path, PathBuf};

/// `actions.jsonl` made immutable (`chattr +i`), so that every write to it fails, even
/// through a descriptor opened before; writable again when dropped.
pub(crate) struct Immutable(PathBuf);

impl Immutable {
    /// Makes `path` immutable; `None` (after a notice on stderr) where the file system or the
    /// user cannot, and the calling test should return.
    pub(crate) fn set(path: &Path) -> Option<Immutable> {
        if chattr(path, "+i") {
            Some(Immutable(path.to_path_buf()))
        } else {
            eprintln!("NOTICE: fault test skipped: `chattr +i` is refused here");
            None
        }
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        chattr(&self.0, "-i");
    }
}

fn chattr(path: &Path, flag: &str) -> bool {
    std::process::Command::new("chattr")
        .arg(flag)
        .arg(path)
        .output()
        .is_ok_and(|o| o.status.success())
}
