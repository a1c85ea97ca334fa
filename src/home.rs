//! The home directory and how switchboard writes files in it: the ground floor that every
//! part which keeps something on disk stands on.
//!
//! [`Home`] owns the paths of everything switchboard keeps (the journals, `state.json`, the
//! rules, the token, the control socket) and the exclusive lock that makes one process the
//! only writer of a home ([`HomeLock`]). [`write_atomic`] replaces a file so that a crash
//! leaves the old or the new content, never a torn one; [`FsyncPolicy`] says when a journal
//! syncs. Nothing here knows what the files hold.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The environment variable that overrides the default home.
pub const HOME_ENV: &str = "SWITCHBOARD_HOME";

/// Errors from opening a home.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    /// Another live process holds the lock.
    #[error("another switchboard (pid {pid}) owns {home}; stop it or pass --home")]
    Locked {
        /// The owner's pid, as it wrote it into the lock file (0 if unreadable).
        pid: u32,
        /// The home directory.
        home: String,
    },
    /// The directory or a file in it could not be created or opened.
    #[error("cannot use home {home}: {source}")]
    Io {
        /// The home directory.
        home: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The home directory: where switchboard keeps its files.
///
/// Creating a `Home` creates the directory (0700) but takes no lock; a
/// process that writes takes the lock with [`Home::lock`].
#[derive(Clone, Debug)]
pub struct Home {
    dir: PathBuf,
}

/// The exclusive lock on a home; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct HomeLock {
    file: File,
    path: PathBuf,
}

impl HomeLock {
    /// Whether the lock file is still the one this lock holds: false once it was deleted or
    /// replaced (or the home was removed), after which another process could take a new lock
    /// on the same path and become a second writer.
    pub fn intact(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(held) = self.file.metadata() else {
            return false;
        };
        match fs::metadata(&self.path) {
            Ok(now) => now.dev() == held.dev() && now.ino() == held.ino(),
            Err(_) => false,
        }
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Home {
    /// Resolves the home: an explicit path, else `SWITCHBOARD_HOME`, else `~/.switchboard`.
    pub fn resolve(explicit: Option<PathBuf>) -> PathBuf {
        if let Some(dir) = explicit {
            return dir;
        }
        if let Some(dir) = std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
            return PathBuf::from(dir);
        }
        let base = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        base.join(".switchboard")
    }

    /// Opens the home at `dir`, which must exist: a home deleted while a daemon was being
    /// started in the background stays deleted.
    pub fn existing(dir: impl Into<PathBuf>) -> Result<Home, HomeError> {
        let dir = dir.into();
        if !dir.is_dir() {
            return Err(HomeError::Io {
                home: dir.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "it does not exist (deleted?); not creating it again",
                ),
            });
        }
        Ok(Home { dir })
    }

    /// Opens (creating with mode 0700 if needed) the home at `dir`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Home, HomeError> {
        let dir = dir.into();
        let io = |source| HomeError::Io {
            home: dir.display().to_string(),
            source,
        };
        if !dir.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(io)?;
        }
        Ok(Home { dir })
    }

    /// Takes the exclusive lock, or fails at once naming the owner's pid.
    pub fn lock(&self) -> Result<HomeLock, HomeError> {
        use fs4::fs_std::FileExt;
        let path = self.dir.join("lock");
        let io = |source| HomeError::Io {
            home: self.dir.display().to_string(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        match file.try_lock_exclusive() {
            Ok(true) => {}
            Ok(false) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(HomeError::Locked {
                    pid: text.trim().parse().unwrap_or(0),
                    home: self.dir.display().to_string(),
                });
            }
            Err(e) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(HomeLock { file, path })
    }

    /// The directory itself.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// `triggers.json`: the rules.
    pub fn triggers(&self) -> PathBuf {
        self.dir.join("triggers.json")
    }
    /// `switchboard.json`: the optional process configuration.
    pub fn config_file(&self) -> PathBuf {
        self.dir.join("switchboard.json")
    }
    /// `channels.jsonl`: the inbox journal.
    pub fn journal(&self) -> PathBuf {
        self.dir.join("channels.jsonl")
    }
    /// `actions.jsonl`: the actions journal.
    pub fn actions(&self) -> PathBuf {
        self.dir.join("actions.jsonl")
    }
    /// `state.json`: consumer cursors, pause, evaluation progress.
    pub fn state(&self) -> PathBuf {
        self.dir.join("state.json")
    }
    /// `token`: the ingest bearer token.
    pub fn token(&self) -> PathBuf {
        self.dir.join("token")
    }
    /// `control.sock`: the operator CLI's socket to the running server.
    pub fn control_socket(&self) -> PathBuf {
        self.dir.join("control.sock")
    }
    /// `daemon.log`: the log of a daemon started in the background.
    pub fn daemon_log(&self) -> PathBuf {
        self.dir.join("daemon.log")
    }
    /// `endpoint.json`: where the running server listens (written once it is ready).
    pub fn endpoint(&self) -> PathBuf {
        self.dir.join("endpoint.json")
    }
}

/// When the journal writer calls fsync.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// After every group commit, before acknowledging it.
    #[default]
    Always,
    /// Within about a second of a write (a timer); acknowledged after the write.
    Interval,
    /// Never; acknowledged once queued for the writer thread, which writes within a
    /// millisecond or so.
    Never,
}

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename) with mode 0600.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(Ok(dir)) = path.parent().map(File::open) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Makes an existing file 0600.
pub fn restrict(path: &Path) -> std::io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
}
