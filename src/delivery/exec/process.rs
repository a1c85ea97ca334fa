//! One headless host process: spawn, read, time out, stop.
//!
//! The child gets the prompt on its stdin, which is then closed (never on its command line, which
//! other local users can read in `/proc/PID/cmdline`), only the environment it is given
//! ([`Launch::env`], nothing inherited), and never switchboard's stdout (the MCP channel in stdio
//! mode). Its stdout is read line by line (a line may be up to [`MAX_LINE`] bytes; a longer one, or
//! one that is not JSON, is counted as malformed and skipped, never fatal) and its stderr is
//! drained on its own task, keeping the tail for the failure reason. It runs in its own process
//! group, so a stop reaches whatever it started (Copilot CLI's npm loader starts a native binary).
//! A run ends when the child exits, or is stopped — SIGTERM to the group, then SIGKILL after
//! [`KILL_GRACE`] — on `turnTimeout` (`timeout`), `stallTimeout` without a line (`stalled`) or
//! cancellation (`cancelled`).

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Normaliser;
use super::event::{ExecEvent, ExecFailure, ExecReport, ToolCall, cut};

/// The longest stdout line read; a longer one is skipped as malformed.
pub const MAX_LINE: usize = 10 * 1024 * 1024;

/// How long a stopped child has between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(5);

/// How much of stderr is kept for the failure reason.
const STDERR_TAIL: usize = 8 * 1024;

/// What to start.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The binary (a name looked up on `PATH`, or a path).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its whole environment: nothing of the daemon's is inherited beyond it.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// Written to its stdin, which is then closed; `None`: no stdin.
    pub stdin: Option<String>,
}

/// When to stop it.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The whole run.
    pub turn_timeout: Duration,
    /// Without a line on stdout.
    pub stall_timeout: Duration,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
}

/// How a run ended: `None` = succeeded, else the kind and the reason; with the report.
pub struct Ended {
    /// The failure, if any.
    pub failure: Option<(ExecFailure, String)>,
    /// Duration, exit code, turns, tool calls, usage, malformed lines, result.
    pub report: ExecReport,
}

/// A stop of the run: the failure kind and the reason.
type Stop = (ExecFailure, String);

/// Runs `launch` to its end, feeding each stdout line through `normaliser` and each event to
/// `on_event`. The tasks that drain its stderr and feed its stdin run on `tasks`.
pub async fn run(
    tasks: &TaskTracker,
    launch: &Launch,
    normaliser: &mut dyn Normaliser,
    limits: Limits,
    cancel: &CancellationToken,
    mut on_event: impl FnMut(&ExecEvent),
) -> Ended {
    let started = Instant::now();
    let mut child = match spawn(launch) {
        Ok(child) => child,
        Err(failure) => {
            let report = ExecReport {
                duration_ms: ms(started.elapsed()),
                ..ExecReport::default()
            };
            return Ended {
                failure: Some(failure),
                report,
            };
        }
    };
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let stderr_tail = tasks.spawn(drain_tail(stderr));
    // Fed on its own task: a prompt larger than the pipe waits for the host to read it while
    // its output is read here. Aborted when the run ends (a host that never read it).
    let feeding = match (child.stdin.take(), &launch.stdin) {
        (Some(pipe), Some(text)) => Some(AbortOnDrop(tasks.spawn(feed(pipe, text.clone())))),
        _ => None,
    };
    let clock = Clock {
        limits,
        deadline: tokio::time::Instant::now() + limits.turn_timeout,
        cancel,
    };
    let mut transcript = Transcript::default();
    let mut stopped = clock
        .read(stdout, &mut transcript, normaliser, &mut on_event)
        .await;
    // Stopped, or stdout closed: wait for the exit within what is left of the run.
    let status = match stopped {
        Some(_) => {
            terminate(&mut child, limits.kill_grace).await;
            None
        }
        None => clock.exit(&mut child, &mut stopped).await,
    };
    drop(feeding);
    let tail = stderr_tail.await.unwrap_or_default();
    transcript.report.duration_ms = ms(started.elapsed());
    match stopped {
        Some(stopped) => Ended {
            failure: Some(stopped),
            report: transcript.report,
        },
        None => transcript.ended(&launch.program, status, &tail),
    }
}

/// Starts the host: its own process group, only the environment it is given, stdout and
/// stderr piped; stdin piped when there is a prompt to feed.
fn spawn(launch: &Launch) -> Result<Child, Stop> {
    let mut cmd = Command::new(&launch.program);
    cmd.args(&launch.args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(if launch.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &launch.cwd {
        cmd.current_dir(cwd);
    }
    cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            (
                ExecFailure::AgentNotFound,
                format!(
                    "exec: `{}` not found: {e}; install it or set `exec.command`",
                    launch.program
                ),
            )
        } else {
            (
                ExecFailure::Failed,
                format!("exec: cannot start `{}`: {e}", launch.program),
            )
        }
    })
}

/// What bounds a run: its limits, the end of its `turnTimeout`, and its cancellation.
struct Clock<'a> {
    limits: Limits,
    deadline: tokio::time::Instant,
    cancel: &'a CancellationToken,
}

impl Clock<'_> {
    /// The stop for a run past its `turnTimeout`.
    fn timed_out(&self) -> Stop {
        (
            ExecFailure::Timeout,
            format!(
                "the run took longer than `turnTimeout` ({})",
                show(self.limits.turn_timeout)
            ),
        )
    }

    /// Reads the host's stdout line by line into `transcript` until it closes; or the stop
    /// that ended the reading first (cancelled, `turnTimeout`, `stallTimeout`, an auth error).
    async fn read(
        &self,
        stdout: tokio::process::ChildStdout,
        transcript: &mut Transcript,
        normaliser: &mut dyn Normaliser,
        on_event: &mut impl FnMut(&ExecEvent),
    ) -> Option<Stop> {
        let mut reader = BufReader::with_capacity(64 * 1024, stdout);
        let mut line = Vec::new();
        let mut overflow = false;
        loop {
            let next = tokio::time::timeout(
                self.limits.stall_timeout,
                next_line(&mut reader, &mut line, &mut overflow),
            );
            let got = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    return Some((ExecFailure::Cancelled, "cancelled".into()));
                }
                _ = tokio::time::sleep_until(self.deadline) => return Some(self.timed_out()),
                got = next => got,
            };
            let Ok(got) = got else {
                return Some((
                    ExecFailure::Stalled,
                    format!(
                        "the host printed nothing for `stallTimeout` ({})",
                        show(self.limits.stall_timeout)
                    ),
                ));
            };
            let bytes = match got {
                Ok(Some(Some(bytes))) => bytes,
                Ok(Some(None)) => {
                    transcript.report.malformed_lines += 1;
                    tracing::warn!(max = MAX_LINE, "exec: host output line too long; skipped");
                    continue;
                }
                Ok(None) => return None,
                Err(e) => {
                    tracing::warn!(cause = %e, "exec: reading the host's output failed");
                    return None;
                }
            };
            if let Some(stop) = transcript.line(&bytes, normaliser, on_event) {
                return Some(stop);
            }
        }
    }

    /// Waits for the host's exit within what is left of the run; on cancellation or past
    /// `turnTimeout` stops it instead, says why in `stopped` and has no status.
    async fn exit(&self, child: &mut Child, stopped: &mut Option<Stop>) -> Option<ExitStatus> {
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => {
                *stopped = Some((ExecFailure::Cancelled, "cancelled".into()));
                terminate(child, self.limits.kill_grace).await;
                None
            }
            _ = tokio::time::sleep_until(self.deadline) => {
                *stopped = Some(self.timed_out());
                terminate(child, self.limits.kill_grace).await;
                None
            }
            status = child.wait() => status.ok(),
        }
    }
}

/// What the host said in a run, gathered as its events come: the report, the tool calls not
/// yet completed, its last error and its result.
#[derive(Default)]
struct Transcript {
    report: ExecReport,
    open_tools: HashMap<String, (usize, Instant)>,
    host_error: Option<String>,
    /// Whether the result is an error, and its text.
    result: Option<(bool, Option<String>)>,
}

impl Transcript {
    /// One line of the host's stdout: skipped when blank, counted as malformed when not JSON,
    /// else each event it stands for recorded and passed to `on_event`. The stop it asks for
    /// (an auth error), once the whole line is read.
    fn line(
        &mut self,
        bytes: &[u8],
        normaliser: &mut dyn Normaliser,
        on_event: &mut impl FnMut(&ExecEvent),
    ) -> Option<Stop> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
            self.report.malformed_lines += 1;
            tracing::debug!(
                line = %cut(&String::from_utf8_lossy(bytes), 200),
                "exec: host output line is not JSON; skipped"
            );
            return None;
        };
        let mut stopped = None;
        for event in normaliser.line(&value) {
            if let Some(stop) = self.record(&event) {
                stopped = Some(stop);
            }
            on_event(&event);
        }
        stopped
    }

    /// Records one event in the report; an auth error stops the run.
    fn record(&mut self, event: &ExecEvent) -> Option<Stop> {
        let report = &mut self.report;
        match event {
            ExecEvent::TurnStart => report.turns += 1,
            ExecEvent::ToolStart { id, name } => {
                self.open_tools
                    .insert(id.clone(), (report.tool_calls.len(), Instant::now()));
                report.tool_calls.push(ToolCall {
                    name: name.clone(),
                    duration_ms: 0,
                    success: false,
                });
            }
            ExecEvent::ToolComplete { id, success, .. } => {
                if let Some((i, at)) = self.open_tools.remove(id) {
                    report.tool_calls[i].duration_ms = ms(at.elapsed());
                    report.tool_calls[i].success = *success;
                }
            }
            ExecEvent::Message { text } => report.result = Some(cut(text, 4096)),
            ExecEvent::Error { text, auth } => {
                self.host_error = Some(cut(text, 1024));
                if *auth {
                    return Some((ExecFailure::AuthMissing, cut(text, 1024)));
                }
            }
            ExecEvent::Result {
                is_error,
                exit_code,
                usage,
                text,
            } => {
                if usage.is_some() {
                    report.usage = usage.clone();
                }
                if let Some(code) = exit_code {
                    report.exit_code = Some(*code);
                }
                if let Some(t) = text {
                    report.result = Some(cut(t, 4096));
                }
                self.result = Some((*is_error, text.clone()));
            }
            ExecEvent::TurnEnd => {}
        }
        None
    }

    /// How a run that was not stopped ended, from the exit `status` of `program`, what the
    /// host said and the `tail` of its stderr.
    fn ended(mut self, program: &str, status: Option<ExitStatus>, tail: &str) -> Ended {
        let code = status.and_then(|s| s.code());
        if code.is_some() {
            self.report.exit_code = code;
        }
        let last_stderr = tail
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| cut(l.trim(), 512));
        let result = &self.result;
        let said = self
            .host_error
            .clone()
            .or_else(|| {
                result
                    .as_ref()
                    .and_then(|(e, t)| e.then(|| t.clone()).flatten())
            })
            .or(last_stderr)
            .unwrap_or_default();
        let failure = match (status, code) {
            (_, Some(127)) => Some((
                ExecFailure::AgentNotFound,
                format!(
                    "exec: `{program}` exited 127 (command not found){}",
                    colon(&said)
                ),
            )),
            (Some(s), None) => {
                use std::os::unix::process::ExitStatusExt;
                Some((
                    ExecFailure::Failed,
                    format!(
                        "the host was killed by signal {}{}",
                        s.signal().unwrap_or(0),
                        colon(&said)
                    ),
                ))
            }
            (None, _) => Some((
                ExecFailure::Failed,
                "the host's exit status was lost".into(),
            )),
            (_, Some(0)) if !result.as_ref().is_some_and(|(e, _)| *e) => None,
            (_, Some(c)) => {
                let kind = if looks_like_auth(&said) || looks_like_auth(tail) {
                    ExecFailure::AuthMissing
                } else {
                    ExecFailure::Failed
                };
                let how = if c == 0 {
                    "the host reported an error".to_string()
                } else {
                    format!("the host exited with {c}")
                };
                Some((kind, format!("{how}{}", colon(&said))))
            }
        };
        Ended {
            failure,
            report: self.report,
        }
    }
}

/// Writes `text` to the host's stdin and closes it (end of input: the host reads its prompt
/// to the end). A host that exits or closes its stdin first is no error here: its output and
/// exit status tell how the run went.
async fn feed(mut pipe: tokio::process::ChildStdin, text: String) {
    use tokio::io::AsyncWriteExt;
    if let Err(e) = pipe.write_all(text.as_bytes()).await {
        tracing::debug!(cause = %e, "exec: the host did not read its whole prompt");
        return;
    }
    let _ = pipe.shutdown().await;
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `": TEXT"`, or nothing for an empty text.
fn colon(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

/// Whether a host's words say it has no usable credentials.
pub fn looks_like_auth(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "not logged in",
        "please log in",
        "please login",
        "/login",
        "unauthorized",
        "authentication",
        "invalid api key",
        "invalid x-api-key",
        "no authentication",
        "api key",
        "401",
    ]
    .iter()
    .any(|p| t.contains(p))
}

/// The next line: `Ok(Some(Some(bytes)))`, `Ok(Some(None))` for a line over [`MAX_LINE`]
/// (skipped to its end), `Ok(None)` at the end of the stream. Keeps a partial line in `line`
/// across calls, so a timed-out call loses nothing.
async fn next_line(
    reader: &mut (impl AsyncBufReadExt + Unpin),
    line: &mut Vec<u8>,
    overflow: &mut bool,
) -> std::io::Result<Option<Option<Vec<u8>>>> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            if *overflow {
                *overflow = false;
                return Ok(Some(None));
            }
            if line.is_empty() {
                return Ok(None);
            }
            return Ok(Some(Some(std::mem::take(line))));
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !*overflow {
            if line.len() + chunk.len() > MAX_LINE {
                *overflow = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            if *overflow {
                *overflow = false;
                return Ok(Some(None));
            }
            return Ok(Some(Some(std::mem::take(line))));
        }
    }
}

/// Reads `stream` to its end, keeping the last [`STDERR_TAIL`] bytes as text.
async fn drain_tail(stream: impl AsyncRead + Unpin) -> String {
    let mut reader = BufReader::new(stream);
    let mut tail: VecDeque<u8> = VecDeque::new();
    loop {
        let n = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buf) => {
                tail.extend(buf.iter().copied());
                buf.len()
            }
        };
        reader.consume(n);
        while tail.len() > STDERR_TAIL {
            tail.pop_front();
        }
    }
    String::from_utf8_lossy(&tail.into_iter().collect::<Vec<u8>>()).into_owned()
}

/// SIGTERM to the child's process group, then SIGKILL after `grace`; reaps the child.
async fn terminate(child: &mut Child, grace: Duration) {
    let Some(pid) = child.id() else { return };
    let group = -(pid as i32);
    // SAFETY: kill(2) with a negative pid signals the process group the child leads
    // (`process_group(0)` at spawn); it touches no memory.
    unsafe {
        libc::kill(group, libc::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        tracing::warn!(pid, "exec: host ignored SIGTERM; sending SIGKILL");
        // SAFETY: as above.
        unsafe {
            libc::kill(group, libc::SIGKILL);
        }
        let _ = child.wait().await;
    } else {
        // The leader is gone; anything it left in its group goes too.
        // SAFETY: as above.
        unsafe {
            libc::kill(group, libc::SIGKILL);
        }
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

/// `"90s"`, `"10m"` for people.
fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_split_and_an_overlong_one_is_skipped_not_fatal() {
        let mut input = Vec::new();
        input.extend_from_slice(b"{\"a\":1}\n");
        input.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        input.extend_from_slice(b"\nlast");
        let mut reader = BufReader::new(&input[..]);
        let (mut line, mut overflow) = (Vec::new(), false);
        let mut got = Vec::new();
        while let Some(l) = next_line(&mut reader, &mut line, &mut overflow)
            .await
            .unwrap()
        {
            got.push(l.map(|b| String::from_utf8(b).unwrap()));
        }
        assert_eq!(
            got,
            vec![
                Some("{\"a\":1}".to_string()),
                None,
                Some("last".to_string())
            ]
        );
    }

    #[test]
    fn auth_failures_are_recognised() {
        assert!(looks_like_auth(
            "Error: Invalid API key · Please run /login"
        ));
        assert!(looks_like_auth("401 Unauthorized"));
        assert!(!looks_like_auth("tool view failed: no such file"));
    }
}
