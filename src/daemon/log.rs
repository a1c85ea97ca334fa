//! Where the process logs. [`init_tracing`] sends tracing to stderr (never stdout, the MCP
//! channel in stdio mode), or, for a daemon started in the background, to `daemon.log` in the
//! home, rotated by size to `daemon.log.1` so that a daemon that runs for months does not fill
//! the disk.
//!
//! The daemon's stderr goes to the same file (a panic message lands there); after a rotation
//! it keeps writing to the rotated file until the daemon restarts.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A log file is rotated when a write would take it past this size.
pub const MAX_BYTES: u64 = 10 * 1024 * 1024;

static CURRENT: OnceLock<PathBuf> = OnceLock::new();

/// The log file this process writes, when it writes one.
pub fn current() -> Option<&'static Path> {
    CURRENT.get().map(PathBuf::as_path)
}

/// A file that moves itself to `NAME.1` when it grows past [`MAX_BYTES`].
pub struct Rotating {
    path: PathBuf,
    file: File,
    written: u64,
}

/// Opens `path` for appending (0600).
pub fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl Rotating {
    /// Opens (rotating first when it is already full) the log at `path`, and records it as
    /// this process's log file.
    pub fn open(path: &Path) -> io::Result<Rotating> {
        let _ = CURRENT.set(path.to_path_buf());
        let written = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let mut log = Rotating {
            path: path.to_path_buf(),
            file: append(path)?,
            written,
        };
        if written >= MAX_BYTES {
            log.rotate()?;
        }
        Ok(log)
    }

    fn rotate(&mut self) -> io::Result<()> {
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        std::fs::rename(&self.path, &old)?;
        self.file = append(&self.path)?;
        self.written = 0;
        Ok(())
    }
}

impl Write for Rotating {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written > 0 && self.written + buf.len() as u64 > MAX_BYTES {
            // A failed rotation (a read-only home) keeps writing where it was.
            let _ = self.rotate();
        }
        let n = self.file.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Logs to stderr (stdout is the MCP channel in stdio mode), or to `log_file` (rotated by
/// size) for a daemon started in the background. `RUST_LOG` sets the level.
///
/// `quiet`: a command that prints for people logs warnings and errors only, unless `RUST_LOG`
/// says otherwise.
pub fn init_tracing(log_file: Option<&std::path::Path>, quiet: bool) {
    // rmcp logs every request it handles at INFO (the whole `initialize` params among them):
    // into a host's MCP log that is noise, so it speaks at WARN unless RUST_LOG says more.
    let default = if quiet { "warn" } else { "info,rmcp=warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    if let Some(path) = log_file {
        match Rotating::open(path) {
            Ok(file) => {
                let _ = builder.with_writer(std::sync::Mutex::new(file)).try_init();
                return;
            }
            Err(e) => eprintln!("error: cannot open the log file {}: {e}", path.display()),
        }
    }
    let _ = builder.with_writer(std::io::stderr).try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_log_moves_to_dot_one_and_starts_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        std::fs::write(&path, vec![b'x'; MAX_BYTES as usize - 10]).unwrap();
        let mut log = Rotating::open(&path).unwrap();
        log.write_all(b"short\n").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), MAX_BYTES - 4);
        log.write_all(b"this line does not fit\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "this line does not fit\n"
        );
        let old = dir.path().join("daemon.log.1");
        assert_eq!(std::fs::metadata(old).unwrap().len(), MAX_BYTES - 4);
    }
}
