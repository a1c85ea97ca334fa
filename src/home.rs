//! The home directory and how switchboard writes files in it: the ground floor that every
//! part which keeps something on disk stands on.
//!
//! [`Home`] owns the paths of everything switchboard keeps (the journals, `state.json`, the
//! rules, the token, the control socket) and the exclusive lock that makes one process the
//! only writer of a home ([`HomeLock`]). [`write_atomic`] replaces a file so that a crash
//! leaves the old or the new content, never a torn one; [`FsyncPolicy`] says when a journal
//! syncs. Nothing here knows what the files hold.
//!
//! A home that another user can change is refused ([`Home::check_private`]), as ssh's
//! `StrictModes` refuses such a `~/.ssh`: whoever can write `switchboard.json` chooses the
//! commands switchboard runs, and whoever can write `triggers.json` the prompts and tools of
//! its auto rules, all as the user who runs it. Those two are checked again every time they
//! are read ([`Home::check_file`]: at start and at every reload), through every symlink to
//! the directory of the real file, so that a file swapped later is never obeyed; and the
//! `token` must be 0600 ([`Home::check_token`]). [`read_regular`] reads a file switchboard is
//! given without waiting on a FIFO or reading a device without end.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The environment variable that overrides the default home.
pub const HOME_ENV: &str = "SWITCHBOARD_HOME";

/// The environment variable that sets the ingest bearer token (over `http.token`).
pub const TOKEN_ENV: &str = "SWITCHBOARD_TOKEN";

/// The environment variable that sets the GitHub webhook secret (over `http.githubSecret`).
pub const GITHUB_SECRET_ENV: &str = "SWITCHBOARD_GITHUB_SECRET";

/// The environment variable that holds the Teams app's client secret (app-only sign-in).
pub const TEAMS_SECRET_ENV: &str = "SWITCHBOARD_TEAMS_CLIENT_SECRET";

/// The Slack app's app-level token (`xapp-`), for Socket Mode.
pub const SLACK_APP_TOKEN_ENV: &str = "SWITCHBOARD_SLACK_APP_TOKEN";

/// The Slack app's bot token (`xoxb-`), for the Web API.
pub const SLACK_BOT_TOKEN_ENV: &str = "SWITCHBOARD_SLACK_BOT_TOKEN";

/// The Slack app's signing secret, for the Events API.
pub const SLACK_SIGNING_SECRET_ENV: &str = "SWITCHBOARD_SLACK_SIGNING_SECRET";

/// switchboard's own secrets in its environment: never passed on to a process it starts
/// (upstream MCP servers, the exec host) unless its configuration names them on purpose.
pub const SECRET_ENV: &[&str] = &[
    TOKEN_ENV,
    GITHUB_SECRET_ENV,
    TEAMS_SECRET_ENV,
    SLACK_APP_TOKEN_ENV,
    SLACK_BOT_TOKEN_ENV,
    SLACK_SIGNING_SECRET_ENV,
];

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
    /// The home, or a file in it that says what switchboard runs, can be changed by a user
    /// other than the one running switchboard.
    #[error(
        "refusing home {home}: {problem}: whoever can change it can make switchboard run \
         commands as {runner}; {fix} (switchboard checks its home as ssh's StrictModes does)"
    )]
    Unsafe {
        /// The home directory.
        home: String,
        /// What is wrong, naming the file and its owner or mode.
        problem: String,
        /// The user running switchboard.
        runner: String,
        /// The command that fixes it.
        fix: String,
    },
    /// The `token` file can be read (or written) by a user other than the one running
    /// switchboard.
    #[error(
        "refusing home {home}: `token` can be read by other users (mode {mode:04o}): whoever \
         reads it can post messages and act as an agent; run `chmod 600 {path}`"
    )]
    Exposed {
        /// The home directory.
        home: String,
        /// The token file's mode.
        mode: u32,
        /// The token file.
        path: String,
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
        Home::resolve_default()
    }

    /// The default home: `~/.switchboard`.
    pub fn resolve_default() -> PathBuf {
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
            // 0700 whatever the umask or a default ACL made of it.
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(io)?;
        }
        Ok(Home { dir })
    }

    /// The files whose content decides what switchboard runs or who may talk to it: they,
    /// and the directory, must be the running user's alone.
    fn guarded_files(&self) -> [PathBuf; 4] {
        [
            self.config_file(),
            self.triggers(),
            self.token(),
            self.actions(),
        ]
    }

    /// Refuses a home that a user other than the one running switchboard could change, or whose
    /// token others can read: the directory, and each of `switchboard.json`, `triggers.json`,
    /// `token` and `actions.jsonl` that exists, as [`Home::check_file`] checks one; and `token`
    /// must be 0600 (or narrower). The error says which and the command that fixes it.
    pub fn check_private(&self) -> Result<(), HomeError> {
        let judge = Judge::new();
        let dir = fs::metadata(&self.dir).map_err(|source| self.io(source))?;
        judge
            .judge(&self.dir, "it", &dir)
            .map_err(|p| self.unsafe_home(&judge, p))?;
        for path in self.guarded_files() {
            judge
                .chain(&path)
                .map_err(|p| self.unsafe_home(&judge, p))?;
        }
        self.check_token()
    }

    /// Refuses a `token` file that users other than its owner can read or write: it must be
    /// 0600 (or narrower). A missing one passes.
    pub fn check_token(&self) -> Result<(), HomeError> {
        use std::os::unix::fs::MetadataExt;
        let token = self.token();
        let Ok(meta) = fs::metadata(&token) else {
            return Ok(());
        };
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 == 0 {
            return Ok(());
        }
        Err(HomeError::Exposed {
            home: self.dir.display().to_string(),
            mode,
            path: token.display().to_string(),
        })
    }

    /// Refuses to read `path` (a file in the home: `triggers.json`, `switchboard.json`) when a
    /// user other than the one running switchboard could have changed what it reads: the home
    /// directory, the file, every symlink on the way to the real file and the directory of
    /// each must be owned by the running user (or root) and not writable by group or others.
    /// Checked at start and before every reload, so a file swapped in a shared directory is
    /// never loaded. A missing file passes (reading it finds nothing).
    pub fn check_file(&self, path: &Path) -> Result<(), HomeError> {
        let judge = Judge::new();
        let dir = fs::metadata(&self.dir).map_err(|source| self.io(source))?;
        judge
            .judge(&self.dir, "it", &dir)
            .and_then(|()| judge.chain(path))
            .map_err(|p| self.unsafe_home(&judge, p))
    }

    fn io(&self, source: std::io::Error) -> HomeError {
        HomeError::Io {
            home: self.dir.display().to_string(),
            source,
        }
    }

    fn unsafe_home(&self, judge: &Judge, problem: Problem) -> HomeError {
        HomeError::Unsafe {
            home: self.dir.display().to_string(),
            problem: problem.problem,
            runner: judge.runner.clone(),
            fix: problem.fix,
        }
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
    /// `duty.json`: on-duty mode for the stop hooks.
    pub fn duty(&self) -> PathBuf {
        self.dir.join("duty.json")
    }
    /// `endpoint.json`: where the running server listens (written once it is ready).
    pub fn endpoint(&self) -> PathBuf {
        self.dir.join("endpoint.json")
    }
}

/// The name of user `uid`, from the password database.
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: `pwd` and `buf` outlive the call; getpwuid_r writes only into them and sets
    // `found` to `pwd` or null.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        );
        if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        Some(
            std::ffi::CStr::from_ptr(pwd.pw_name)
                .to_string_lossy()
                .into_owned(),
        )
    }
}

/// `` `name` (uid N) ``, or `uid N` when the user has no name.
fn user_label(uid: u32) -> String {
    match user_name(uid) {
        Some(name) => format!("`{name}` (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// The most symlinks followed from a file in the home to the real file (as the kernel's 40).
const MAX_LINKS: usize = 40;

/// What is wrong with one path of the home, and the command that fixes it.
#[derive(Debug)]
struct Problem {
    problem: String,
    fix: String,
}

/// Who may change what switchboard reads: the user running it, and root.
struct Judge {
    me: u32,
    /// The running user, as the errors name them.
    runner: String,
}

impl Judge {
    fn new() -> Judge {
        // SAFETY: geteuid cannot fail and touches no memory.
        let me = unsafe { libc::geteuid() };
        Judge {
            me,
            runner: user_label(me),
        }
    }

    /// `path` (shown as `what`) is owned by the running user or root.
    fn owner(&self, path: &Path, what: &str, meta: &fs::Metadata) -> Result<(), Problem> {
        use std::os::unix::fs::MetadataExt;
        if meta.uid() == self.me || meta.uid() == 0 {
            return Ok(());
        }
        Err(Problem {
            problem: format!(
                "{what} is owned by {}, not by {}",
                user_label(meta.uid()),
                self.runner
            ),
            fix: format!(
                "run `chown {} {}` if it is yours, or pass `--home` with a directory of your own",
                user_name(self.me).unwrap_or_else(|| self.me.to_string()),
                path.display()
            ),
        })
    }

    /// `path` is owned by the running user or root, and not writable by its group or others.
    fn judge(&self, path: &Path, what: &str, meta: &fs::Metadata) -> Result<(), Problem> {
        use std::os::unix::fs::MetadataExt;
        self.owner(path, what, meta)?;
        let mode = meta.mode() & 0o7777;
        if mode & 0o022 == 0 {
            return Ok(());
        }
        let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => "its group and others",
            (true, false) => "its group",
            _ => "others",
        };
        let shown = path.display();
        let fix = if what == "it" {
            format!("run `chmod 700 {shown}`")
        } else {
            format!("run `chmod go-w {shown}`")
        };
        Err(Problem {
            problem: format!("{what} is writable by {who} (mode {mode:04o})"),
            fix,
        })
    }

    /// The file at `first` (in the home), every symlink on the way to the real file, and the
    /// directory each of those is in, beyond the home (checked on its own). A missing file or
    /// a dangling link passes: there is nothing to read.
    fn chain(&self, first: &Path) -> Result<(), Problem> {
        let name = first
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut path = first.to_path_buf();
        for hop in 0..MAX_LINKS {
            let what = if hop == 0 {
                format!("`{name}`")
            } else {
                format!("{}, where `{name}` leads,", path.display())
            };
            // Whoever can write the directory an entry is in can replace the entry.
            let dir = match path.parent().map(fs::canonicalize) {
                Some(Ok(dir)) => dir,
                _ => return Ok(()),
            };
            if hop > 0 {
                let Ok(meta) = fs::metadata(&dir) else {
                    return Ok(());
                };
                let of = format!("{}, the directory `{name}` leads to,", dir.display());
                self.judge(&dir, &of, &meta)?;
            }
            let Ok(meta) = fs::symlink_metadata(&path) else {
                return Ok(());
            };
            if !meta.file_type().is_symlink() {
                return self.judge(&path, &what, &meta);
            }
            // A link's own mode means nothing; its owner can point it elsewhere.
            self.owner(&path, &what, &meta)?;
            let Ok(target) = fs::read_link(&path) else {
                return Ok(());
            };
            path = dir.join(target);
        }
        Err(Problem {
            problem: format!("`{name}` leads through more than {MAX_LINKS} symlinks"),
            fix: format!("point `{name}` at the real file"),
        })
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

/// How this process was told which home to use, so that a command it suggests in a hint names
/// the same home (`switchboard --home /srv/sb start`, not a bare `switchboard start` that would
/// go to `~/.switchboard`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum HomeNamed {
    /// The default home: hints need not name it.
    #[default]
    Default,
    /// `--home DIR`.
    Flag(PathBuf),
    /// `SWITCHBOARD_HOME=DIR`.
    Env(PathBuf),
}

static HOME_NAMED: std::sync::OnceLock<HomeNamed> = std::sync::OnceLock::new();

/// Records how this process was told its home (once, at start; later calls change nothing).
pub fn set_home_named(named: HomeNamed) {
    let _ = HOME_NAMED.set(named);
}

/// The command line that runs `switchboard ARGS` on this process's home, for hints:
/// `switchboard start`, `switchboard --home /srv/sb start` or `SWITCHBOARD_HOME=/srv/sb
/// switchboard start`, the home quoted for a shell where it needs it.
pub fn command(args: &str) -> String {
    HOME_NAMED
        .get()
        .unwrap_or(&HomeNamed::Default)
        .command(args)
}

impl HomeNamed {
    /// `switchboard ARGS` on this home (see [`command`]).
    pub fn command(&self, args: &str) -> String {
        match self {
            HomeNamed::Default => format!("switchboard {args}"),
            HomeNamed::Flag(dir) => format!("switchboard --home {} {args}", shell_word(dir)),
            HomeNamed::Env(dir) => format!("{HOME_ENV}={} switchboard {args}", shell_word(dir)),
        }
    }
}

/// `path` as one shell word: as it is when it has nothing a shell reads, else single-quoted.
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%~".contains(c);
    if !text.is_empty() && text.chars().all(plain) && !text.starts_with('~') {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
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

/// The most bytes switchboard reads from a file it is given to read whole: the rules, the
/// settings, a rules test and its messages.
pub const MAX_READ: u64 = 64 << 20;

/// Reads the regular file at `path` as text, at most `limit` bytes. Anything else is refused
/// at once, without waiting on it or reading it: a FIFO (opened without blocking), a device
/// such as `/dev/zero`, a directory.
pub fn read_regular(path: &Path, limit: u64) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind};
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a FIFO, a socket or a device)"
        };
        return Err(Error::new(ErrorKind::InvalidInput, format!("it is {kind}")));
    }
    let too_large = || {
        Error::new(
            ErrorKind::InvalidData,
            format!("it is larger than the limit of {limit} bytes"),
        )
    };
    if meta.len() > limit {
        return Err(too_large());
    }
    let mut text = String::new();
    file.take(limit + 1).read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(text)
}

/// Makes an existing file 0600.
pub fn restrict(path: &Path) -> std::io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chmod(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_home_others_can_write_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path()).unwrap();
        chmod(dir.path(), 0o700);
        home.check_private().unwrap();
        chmod(dir.path(), 0o777);
        let err = home.check_private().unwrap_err().to_string();
        assert!(
            err.contains("it is writable by its group and others (mode 0777)"),
            "{err}"
        );
        assert!(
            err.contains(&format!("run `chmod 700 {}`", dir.path().display())),
            "{err}"
        );
        chmod(dir.path(), 0o750);
        home.check_private().unwrap();

        // A file that says what switchboard runs: the same, with its own fix.
        let config = home.config_file();
        fs::write(&config, "{}").unwrap();
        chmod(&config, 0o646);
        let err = home.check_private().unwrap_err().to_string();
        assert!(
            err.contains("`switchboard.json` is writable by others (mode 0646)"),
            "{err}"
        );
        assert!(
            err.contains(&format!("run `chmod go-w {}`", config.display())),
            "{err}"
        );
        chmod(&config, 0o644);
        home.check_private().unwrap();
        // Other files are not switchboard's business.
        let notes = dir.path().join("notes.txt");
        fs::write(&notes, "").unwrap();
        chmod(&notes, 0o666);
        home.check_private().unwrap();
    }

    #[test]
    fn a_file_is_checked_through_every_link_to_the_directory_of_the_real_file() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path().join("home")).unwrap();
        let shared = dir.path().join("shared");
        fs::create_dir(&shared).unwrap();
        chmod(&shared, 0o755);
        let rules = home.triggers();
        // Missing, or a link to nothing: nothing to read, nothing to refuse.
        home.check_file(&rules).unwrap();
        std::os::unix::fs::symlink(shared.join("hop.json"), &rules).unwrap();
        home.check_file(&rules).unwrap();
        // Through a second link to the real file, all in a directory only we can write.
        std::os::unix::fs::symlink("real.json", shared.join("hop.json")).unwrap();
        fs::write(shared.join("real.json"), "{}").unwrap();
        home.check_file(&rules).unwrap();
        // The real file writable by others; then its directory.
        chmod(&shared.join("real.json"), 0o666);
        let err = home.check_file(&rules).unwrap_err().to_string();
        let real = fs::canonicalize(&shared).unwrap().join("real.json");
        assert!(
            err.contains(&format!(
                "{}, where `triggers.json` leads, is writable by its group and others (mode 0666)",
                real.display()
            )),
            "{err}"
        );
        chmod(&shared.join("real.json"), 0o644);
        chmod(&shared, 0o757);
        let err = home.check_file(&rules).unwrap_err().to_string();
        assert!(
            err.contains(
                "the directory `triggers.json` leads to, is writable by others (mode 0757)"
            ),
            "{err}"
        );
        chmod(&shared, 0o755);
        // A loop of links.
        fs::remove_file(shared.join("real.json")).unwrap();
        std::os::unix::fs::symlink("hop.json", shared.join("real.json")).unwrap();
        let err = home.check_file(&rules).unwrap_err().to_string();
        assert!(
            err.contains("`triggers.json` leads through more than 40 symlinks"),
            "{err}"
        );
    }

    #[test]
    fn only_a_regular_file_within_the_limit_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rules.json");
        fs::write(&file, "0123456789").unwrap();
        assert_eq!(read_regular(&file, 10).unwrap(), "0123456789");
        let err = read_regular(&file, 9).unwrap_err().to_string();
        assert_eq!(err, "it is larger than the limit of 9 bytes");
        let err = read_regular(Path::new("/dev/zero"), 9)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("it is not a regular file"), "{err}");
        let err = read_regular(dir.path(), 9).unwrap_err().to_string();
        assert_eq!(err, "it is a directory");
        // A FIFO nobody writes to: refused at once, not waited on.
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid C string that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_regular(&fifo, 9).unwrap_err().to_string();
        assert!(err.starts_with("it is not a regular file"), "{err}");
    }

    #[test]
    fn a_link_of_another_user_on_the_way_is_refused_as_root() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("*** SKIPPED: changing a link's owner needs root ***");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path().join("home")).unwrap();
        let shared = dir.path().join("shared");
        fs::create_dir(&shared).unwrap();
        chmod(&shared, 0o755);
        fs::write(shared.join("real.json"), "{}").unwrap();
        let hop = shared.join("hop.json");
        std::os::unix::fs::symlink("real.json", &hop).unwrap();
        std::os::unix::fs::lchown(&hop, Some(65534), None).unwrap();
        std::os::unix::fs::symlink(&hop, home.config_file()).unwrap();
        let err = home
            .check_file(&home.config_file())
            .unwrap_err()
            .to_string();
        let shown = fs::canonicalize(&shared).unwrap().join("hop.json");
        assert!(
            err.contains(&format!(
                "{}, where `switchboard.json` leads, is owned by ",
                shown.display()
            )) && err.contains("(uid 65534)"),
            "{err}"
        );
        assert!(home.check_private().is_err(), "and at start");
    }

    #[test]
    fn a_home_or_file_of_another_user_is_refused_as_root() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("*** SKIPPED: changing a file's owner needs root ***");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path()).unwrap();
        let rules = home.triggers();
        fs::write(&rules, "{}").unwrap();
        std::os::unix::fs::chown(&rules, Some(65534), None).unwrap();
        let err = home.check_private().unwrap_err().to_string();
        assert!(err.contains("`triggers.json` is owned by "), "{err}");
        assert!(err.contains("uid 65534"), "{err}");
        assert!(err.contains("run `chown root "), "{err}");
        fs::remove_file(&rules).unwrap();
        std::os::unix::fs::chown(dir.path(), Some(65534), None).unwrap();
        let err = home.check_private().unwrap_err().to_string();
        assert!(err.contains("it is owned by "), "{err}");
    }

    #[test]
    fn a_hint_names_the_home_as_it_was_given() {
        let start = |named: HomeNamed| named.command("start");
        assert_eq!(start(HomeNamed::Default), "switchboard start");
        assert_eq!(
            start(HomeNamed::Flag("/srv/sb".into())),
            "switchboard --home /srv/sb start"
        );
        assert_eq!(
            start(HomeNamed::Env("/srv/sb".into())),
            "SWITCHBOARD_HOME=/srv/sb switchboard start"
        );
        assert_eq!(
            start(HomeNamed::Flag("/tmp/it's here".into())),
            r"switchboard --home '/tmp/it'\''s here' start"
        );
    }
}
