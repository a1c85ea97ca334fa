//! Starting the home's daemon in the background: what `serve` (a front end) and
//! `switchboard start` do when no daemon answers on the control socket.
//!
//! The daemon is this same binary run as `switchboard --home HOME daemon ...`, detached: in
//! its own session (`setsid`, so that a host's terminal or process group going away does not
//! take it along), stdin and stdout on `/dev/null` (it never inherits a host's MCP channel),
//! stderr and its log in `daemon.log` in the home. When two front ends start one at the same
//! instant, both daemons race for the home's lock and the loser exits at once; both front ends
//! then attach to the winner.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::net::UnixStream;

use crate::duration::Backoff;
use crate::home::Home;

/// How long a front end waits for a daemon it started to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);

/// How to start the daemon of a home.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The binary (this one).
    pub exe: PathBuf,
    /// The home.
    pub home: PathBuf,
    /// The daemon's flags (`--listen`, `--no-listen`, `--http`).
    pub args: Vec<OsString>,
}

impl Launch {
    /// Starts the daemon with this process's binary. Creates the home now, when it is asked
    /// for: [`Launch::spawn`] never does, so a home deleted later stays deleted. A home
    /// another user could change is refused ([`Home::check_private`]).
    pub fn current(home: PathBuf, args: Vec<OsString>) -> anyhow::Result<Launch> {
        // Refused here too, before the daemon's log is opened in it.
        Home::open(&home)?.check_private()?;
        Ok(Launch {
            exe: std::env::current_exe()?,
            home,
            args,
        })
    }

    /// Spawns the daemon, detached, on the existing home (the daemon is told not to create it
    /// either). The returned child is only for noticing an early exit.
    pub fn spawn(&self) -> anyhow::Result<tokio::process::Child> {
        let home = Home::existing(&self.home)?;
        let log = home.daemon_log();
        let stderr = super::log::append(&log)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", log.display()))?;
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg("--home")
            .arg(&self.home)
            .arg("daemon")
            .arg("--existing-home")
            .args(&self.args)
            .arg("--log-file")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(false);
        // SAFETY: setsid is async-signal-safe and touches no memory of this process.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", self.exe.display()))?;
        tracing::info!(
            pid = child.id(),
            home = %self.home.display(),
            log = %log.display(),
            "started the switchboard daemon"
        );
        Ok(child)
    }
}

/// Connects to the control socket of `home`, starting the daemon with `launch` when none
/// answers, and waiting up to [`START_TIMEOUT`] for it. `Ok(None)` only without `launch`.
pub async fn connect_or_start(
    home: &Path,
    launch: Option<&Launch>,
) -> anyhow::Result<Option<UnixStream>> {
    let socket = home.join("control.sock");
    if let Ok(stream) = UnixStream::connect(&socket).await {
        return Ok(Some(stream));
    }
    let Some(launch) = launch else {
        return Ok(None);
    };
    let mut child = launch.spawn()?;
    let child_pid = child.id();
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    // Ask often while the daemon is likely to be almost up, then less.
    let mut pause = Backoff::new(Duration::from_millis(5), Duration::from_millis(100));
    loop {
        if let Ok(stream) = UnixStream::connect(&socket).await {
            return Ok(Some(stream));
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Lost the race for the lock to another daemon (which will answer soon), or
            // failed to start: its log says which.
            if !status.success() && !lost_the_race(home, child_pid) {
                anyhow::bail!(
                    "the switchboard daemon did not start ({status}); from {}:\n{}",
                    home.join("daemon.log").display(),
                    log_tail(home, 8)
                );
            }
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "the switchboard daemon did not answer on {} within {}s; from {}:\n{}",
                socket.display(),
                START_TIMEOUT.as_secs(),
                home.join("daemon.log").display(),
                log_tail(home, 8)
            );
        }
        tokio::time::sleep(pause.next()).await;
    }
}

/// Whether our daemon failed only because another daemon holds the lock (it started at the
/// same instant, and will answer soon).
fn lost_the_race(home: &Path, ours: Option<u32>) -> bool {
    let owner: Option<u32> = std::fs::read_to_string(home.join("lock"))
        .ok()
        .and_then(|t| t.trim().parse().ok());
    match owner {
        Some(pid) if Some(pid) != ours => alive(pid),
        // The winner locked but has not written its pid yet: its log line says so.
        _ => log_tail(home, 20).contains("another switchboard"),
    }
}

/// Whether process `pid` exists and has not exited (a zombie waiting for its parent to reap it
/// has exited).
pub fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 checks for existence and delivers nothing.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    let exists = r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    // `/proc/PID/stat`: `PID (COMM) STATE ...`; the command may hold spaces and parentheses.
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, after) = stat.rsplit_once(')')?;
            after.split_whitespace().next().map(|state| state == "Z")
        })
        .unwrap_or(false);
    exists && !zombie
}

/// The last `n` lines of the home's daemon log.
pub fn log_tail(home: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(home.join("daemon.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
