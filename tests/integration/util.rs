//! Test harness: runs the real binary on a temporary home.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_switchboard"))
}

/// A running `switchboard serve --no-stdio` on a temporary home, ports chosen by the OS.
pub struct Switchboard {
    /// The home directory (kept after a `kill9` so the same home can restart).
    pub home: tempfile::TempDir,
    child: Option<Child>,
    _stdin: Option<ChildStdin>,
    /// The ingest address, `127.0.0.1:PORT`.
    pub ingest: Option<String>,
    /// The MCP URL, `http://127.0.0.1:PORT/mcp`.
    pub mcp_url: Option<String>,
    extra_args: Vec<String>,
    extra_env: Vec<(String, String)>,
    removed_env: Vec<String>,
}

impl Switchboard {
    /// A fresh home; nothing started yet.
    pub fn new() -> Switchboard {
        Switchboard {
            home: tempfile::tempdir().expect("tempdir"),
            child: None,
            _stdin: None,
            ingest: None,
            mcp_url: None,
            extra_args: Vec::new(),
            extra_env: Vec::new(),
            removed_env: Vec::new(),
        }
    }

    /// Writes a file into the home before (or while) it runs.
    pub fn write(&self, name: &str, text: &str) -> &Switchboard {
        std::fs::write(self.home.path().join(name), text).expect("write home file");
        self
    }

    /// Extra `serve` arguments.
    pub fn args(mut self, args: &[&str]) -> Switchboard {
        self.extra_args = args.iter().map(|s| s.to_string()).collect();
        self
    }

    /// An environment variable for the server.
    pub fn env(mut self, key: &str, value: &str) -> Switchboard {
        self.extra_env.push((key.to_string(), value.to_string()));
        self
    }

    /// Environment variables the server does not inherit from the test.
    pub fn without_env(mut self, keys: &[&str]) -> Switchboard {
        self.removed_env.extend(keys.iter().map(|k| k.to_string()));
        self
    }

    /// Starts a fresh home with default settings and waits until it is ready.
    pub fn start() -> Switchboard {
        let mut sb = Switchboard::new();
        sb.spawn();
        sb
    }

    /// Starts (or restarts) the server on this home and waits for `endpoint.json`.
    pub fn spawn(&mut self) {
        self.spawn_with(&[
            "serve",
            "--no-stdio",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ]);
    }

    /// Starts the server with these arguments (after `--home`), plus [`Switchboard::args`].
    pub fn spawn_with(&mut self, serve_args: &[&str]) {
        let endpoint = self.home.path().join("endpoint.json");
        let _ = std::fs::remove_file(&endpoint);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.home.path().join("test-server.log"))
            .expect("log file");
        let mut cmd = Command::new(bin());
        cmd.arg("--home")
            .arg(self.home.path())
            .args(serve_args)
            .args(&self.extra_args)
            .env("RUST_LOG", "switchboard=debug,info")
            .envs(self.extra_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log);
        for key in &self.removed_env {
            cmd.env_remove(key);
        }
        let mut child = cmd.spawn().expect("spawn switchboard");
        self._stdin = child.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(&endpoint)
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
            {
                self.ingest = v["ingest"].as_str().map(String::from);
                self.mcp_url = v["mcp"].as_str().map(String::from);
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "switchboard exited before it was ready ({status}):\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "switchboard not ready in 30 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some(child);
    }

    /// The server's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("test-server.log")).unwrap_or_default()
    }

    /// The pid of the running server.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self._stdin = None;
    }

    /// SIGTERM, then wait for a clean exit (panics after 10 s).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        wait_exit(&mut child, Duration::from_secs(10))
    }

    /// Runs `switchboard --home HOME ARGS...` to completion.
    pub fn cli(&self, args: &[&str]) -> Output {
        cli_in(self.home.path(), args)
    }

    /// The ingest bearer token.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.home.path().join("token"))
            .map(|t| t.trim().to_string())
            .unwrap_or_default()
    }
}

impl Drop for Switchboard {
    fn drop(&mut self) {
        self.kill9();
        // Front ends (`serve` on stdio) start a daemon of their own in the background.
        stop_daemon(self.home.path());
    }
}

/// Stops every daemon of `home`: the one whose pid is in its lock file, and any process started
/// as `daemon` on it, which finds one still starting, before it holds the lock. Front ends on
/// `home` go first, since one that is exiting may still start a daemon. SIGTERM, then SIGKILL
/// after 5 s. For tests whose front ends started a daemon in the background.
pub fn stop_daemon(home: &Path) {
    terminate(processes_of(home, "serve"));
    let mut daemons = daemons_of(home);
    daemons.extend(daemon_pid(home));
    daemons.sort_unstable();
    daemons.dedup();
    terminate(daemons);
}

/// SIGTERM to each of `pids`, then SIGKILL to those still alive after 5 s; returns once all
/// are gone.
fn terminate(pids: Vec<u32>) {
    for &pid in &pids {
        unsafe {
            libc::kill(pid as i32, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for pid in pids {
        while alive(pid) {
            if Instant::now() > deadline {
                unsafe {
                    libc::kill(pid as i32, libc::SIGKILL);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The pid of the daemon that holds `home`'s lock, if one is alive.
pub fn daemon_pid(home: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(home.join("lock"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    alive(pid).then_some(pid)
}

/// Whether process `pid` exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The pids of every `switchboard ... daemon` process whose command line names `home`.
pub fn daemons_of(home: &Path) -> Vec<u32> {
    processes_of(home, "daemon")
}

/// The pids of every live process whose command line names `home` and has `word` as an
/// argument (`serve`, `daemon`).
pub fn processes_of(home: &Path, word: &str) -> Vec<u32> {
    let home = home.to_string_lossy().into_owned();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == &home) && args.iter().any(|a| a == word) && alive(pid) {
            out.push(pid);
        }
    }
    out
}

/// The uid and gid of `nobody`: the other local user of the tests that need one.
pub const NOBODY: u32 = 65534;

/// Whether this test runs as root, which the tests that act as another user need (to switch to
/// `nobody`, or to give a file away); they say they are skipped otherwise.
pub fn running_as_root(test: &str) -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("*** SKIPPED {test}: acting as another user needs root ***");
    }
    root
}

/// Runs `sh -c script` with `args` as `$1`... as `nobody` (with no supplementary groups), as
/// another local user of the machine would; panics when it fails.
pub fn as_nobody(script: &str, args: &[&Path]) {
    let out = Command::new("setpriv")
        .arg(format!("--reuid={NOBODY}"))
        .arg(format!("--regid={NOBODY}"))
        .args(["--clear-groups", "sh", "-c", script, "sh"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run setpriv");
    assert!(
        out.status.success(),
        "as nobody: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stops the daemon of a home when dropped (tests whose front ends start one).
pub struct DaemonGuard(pub PathBuf);

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        stop_daemon(&self.0);
    }
}

/// Runs the binary with `--home home` and `args`.
pub fn cli_in(home: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("--home")
        .arg(home)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run switchboard")
}

/// Waits for a child to exit, killing it after `limit`.
pub fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("process did not exit within {limit:?}; stderr: {err}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The hello of an operator connection, as the control protocol's first line.
pub fn hello_line() -> String {
    serde_json::json!({"hello": {
        "protocol": 3,
        "version": "test",
        "pid": std::process::id(),
        "role": "operator",
    }})
    .to_string()
}

/// One call (`{"op": "stats"}`) over the control socket of `home`, after the hello: `{"ok":
/// true, "result": REPLY}` or `{"ok": false, "error": ERROR}`; `None` when the daemon is not
/// there or hangs up.
pub fn try_control(home: &Path, call: &serde_json::Value) -> Option<serde_json::Value> {
    use std::io::{BufRead, BufReader, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(home.join("control.sock")).ok()?;
    writeln!(stream, "{}", hello_line()).ok()?;
    writeln!(stream, "{}", serde_json::json!({"id": 1, "call": call})).ok()?;
    let mut lines = BufReader::new(stream).lines();
    let welcome: serde_json::Value = serde_json::from_str(&lines.next()?.ok()?).ok()?;
    if welcome.get("welcome").is_none() {
        return Some(serde_json::json!({"ok": false, "error": welcome}));
    }
    for line in lines {
        let down: serde_json::Value = serde_json::from_str(&line.ok()?).ok()?;
        let Some(reply) = down.get("reply") else {
            continue;
        };
        return Some(match reply.get("error") {
            Some(e) => serde_json::json!({"ok": false, "error": e}),
            None => serde_json::json!({"ok": true, "result": reply["ok"]}),
        });
    }
    None
}

/// [`try_control`], which must be answered.
pub fn control(home: &Path, call: serde_json::Value) -> serde_json::Value {
    try_control(home, &call).unwrap_or_else(|| panic!("no answer to {call}"))
}

/// Sends messages `(channel, content)` through the control socket; their seqs.
pub fn send_messages(home: &Path, messages: &[(&str, &str)]) -> Vec<u64> {
    let messages: Vec<_> = messages
        .iter()
        .map(|(c, t)| serde_json::json!({"server": "test", "channel": c, "content": t}))
        .collect();
    let r = control(
        home,
        serde_json::json!({"op": "append", "messages": messages, "source": "cli"}),
    );
    assert_eq!(r["ok"], true, "send failed: {r}");
    r["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["seq"].as_u64().unwrap())
        .collect()
}

/// The records of `actions.jsonl`.
pub fn action_records(home: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(home.join("actions.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Polls `f` every 10 ms, without blocking the runtime, until it returns `Some`, or panics with
/// `what` after `limit`.
pub async fn eventually_async<T>(
    limit: Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An rmcp client session, as the tests hold one.
pub type Client =
    rmcp::service::RunningService<rmcp::service::RoleClient, rmcp::model::ClientConfig>;

/// Calls tool `name` with `args` and returns its `structuredContent` (panics when the call
/// fails or has none).
pub async fn tool(client: &Client, name: &str, args: serde_json::Value) -> serde_json::Value {
    let mut params = rmcp::model::CallToolRequestParams::new(name.to_string());
    params.arguments = args.as_object().cloned();
    client
        .call_tool(params)
        .await
        .expect("tool call answered")
        .structured_content
        .expect("structured")
}

/// Polls `f` every 10 ms until it returns `Some`, or panics with `what` after `limit`.
pub fn eventually<T>(limit: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    eventually_explained(limit, what, String::new, f)
}

/// [`eventually`], whose panic also carries `explain()`, taken when it times out (the
/// daemon's log, the records it wrote).
pub fn eventually_explained<T>(
    limit: Duration,
    what: &str,
    explain: impl FnOnce() -> String,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {limit:?}: {what}\n{}", explain());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An rmcp client transport to `sb`'s `/mcp`, with its bearer token.
pub fn http_transport(
    sb: &Switchboard,
) -> rmcp::transport::StreamableHttpClientTransport<reqwest::Client> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let url = sb.mcp_url.clone().expect("mcp url");
    rmcp::transport::StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(sb.token()),
    )
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What a process run under a time limit did.
pub struct Run {
    /// `None` when it was killed at the limit.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
    /// Processes of its group still running after it exited (killed by now).
    pub leftovers: bool,
}

impl Run {
    pub fn describe(&self) -> String {
        match self.status {
            Some(s) => format!("{s} after {:.1?}", self.took),
            None => format!("killed after {:.1?}", self.took),
        }
    }
}

/// Runs `cmd` in a process group of its own, output captured; kills the whole group at `limit`
/// or when something of it outlives the command.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Run {
    use std::os::unix::process::CommandExt;
    let started = Instant::now();
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let group = child.id() as i32;
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            text(&buf)
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break Some(status);
        }
        if started.elapsed() > limit {
            unsafe { libc::kill(-group, libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    // Whatever it started should be gone with it; give stragglers a moment, then kill them.
    let mut leftovers = false;
    let grace = Instant::now();
    while unsafe { libc::kill(-group, 0) } == 0 {
        if grace.elapsed() > Duration::from_secs(5) {
            leftovers = true;
            unsafe { libc::kill(-group, libc::SIGKILL) };
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Run {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
        took,
        leftovers,
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `cmd` (killed after 20 s: a daemon that does not refuse runs until killed) and asserts
/// that it exits with status 1, as a command that fails does (2 is for a wrong command line);
/// its stderr.
#[track_caller]
pub fn exits_1(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let run = run_limited(cmd, Duration::from_secs(20));
    assert_eq!(
        run.status.and_then(|s| s.code()),
        Some(1),
        "{shown} ({}): {}",
        run.describe(),
        run.stderr
    );
    run.stderr
}

/// An HTTP response as a client sees it.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    /// The status and the stable `error` code of a refusal.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(self.json()["error"], code, "{}", self.body);
    }

    pub fn seqs(&self) -> Vec<(u64, bool)> {
        self.json()["accepted"]
            .as_array()
            .unwrap_or_else(|| panic!("no `accepted`: {}", self.body))
            .iter()
            .map(|a| {
                (
                    a["seq"].as_u64().unwrap(),
                    a["duplicate"].as_bool().unwrap(),
                )
            })
            .collect()
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`), read to the end.
pub fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect to ingest");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // The server may answer (413) before it reads the whole body.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        data = &data[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Installs Debian `packages` with apt-get (`update`, then `install --no-install-recommends`), as
/// the tests that need a real Alertmanager, Chromium or nats-server do; fails the test when
/// apt-get does. The tests of this binary call it one at a time; beside another apt-get on the
/// machine it waits for dpkg's lock instead of failing.
pub fn apt_install(packages: &[&str]) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let install = [
        &[
            "-o",
            "DPkg::Lock::Timeout=300",
            "install",
            "-y",
            "--no-install-recommends",
        ][..],
        packages,
    ]
    .concat();
    for args in [
        &["-o", "DPkg::Lock::Timeout=300", "update"][..],
        &install[..],
    ] {
        let out = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .expect("run apt-get");
        assert!(
            out.status.success(),
            "apt-get {args:?} failed:\n{}\n{}",
            stdout(&out),
            stderr(&out)
        );
    }
}

/// Whether the tests run under CI (`CI=true`), where no test may pass by skipping.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A test that cannot run here (a tool it cannot install, a privilege it lacks) says so on
/// stderr and returns; under `CI=true` it fails instead, so that a green CI never hides a
/// test that did not run.
pub fn skip(why: &str) {
    assert!(
        !ci(),
        "{why}; under CI=true a test cannot be skipped: install what it needs or run as root"
    );
    // Not through eprintln!: the harness would hide it for a passing test.
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: {why} (under CI=true this fails) ***\n"
    );
}

/// `name` on `PATH`, installed from Debian's `package` with apt-get when missing; `None`
/// (after [`skip`], which fails under `CI=true`) only where there is no apt-get.
pub fn installed(name: &str, package: &str) -> Option<PathBuf> {
    if let Some(found) = on_path(name) {
        return Some(found);
    }
    if on_path("apt-get").is_none() {
        skip(&format!(
            "`{name}` is not installed and there is no apt-get to install {package}"
        ));
        return None;
    }
    apt_install(&[package]);
    Some(on_path(name).unwrap_or_else(|| panic!("`{name}` after apt-get install {package}")))
}

/// `name` in a directory of `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// Speaks MCP by hand over a `switchboard serve` child's stdin and stdout, as a host does:
/// `initialize` (as `copilot-cli`, read its answer), `notifications/initialized`, then a
/// `wait_for_inbound_message` call (timeout 50 s) whose answer is left unread. Returns the
/// pipes, for the test to keep open or drop.
pub fn start_raw_wait(child: &mut Child) -> (ChildStdin, BufReader<ChildStdout>) {
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    writeln!(
        stdin,
        "{}",
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "copilot-cli", "version": "1.0.102"}}})
    )
    .unwrap();
    stdout.read_line(&mut String::new()).unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    writeln!(
        stdin,
        "{}",
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "wait_for_inbound_message", "arguments": {"timeout_s": 50}}})
    )
    .unwrap();
    (stdin, stdout)
}

/// VmRSS of `pid` in KiB (0 once it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:")
}

/// RssAnon of `pid` in KiB: its resident heap and stacks, without the binary's code pages
/// (which a debug build touches by the megabyte the first time a path runs).
pub fn anon_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "RssAnon:")
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A test client's `get_info`: no capabilities, named `name` `version`, pinned to protocol
/// 2025-11-25 (the lifecycle with server push).
pub fn pinned_client(name: &str, version: &str) -> rmcp::model::ClientConfig {
    let mut config = rmcp::model::ClientConfig::new(
        rmcp::model::ClientCapabilities::default(),
        rmcp::model::Implementation::new(name, version),
    );
    config.protocol_version = rmcp::model::ProtocolVersion::V_2025_11_25;
    config
}

/// `switchboard watch` on a home, its lines read by a thread; killed (and reaped) when dropped,
/// also on a failed assertion.
pub struct Watch {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Watch {
    /// Starts `watch` and returns once it streams: messages on channel `sync` are sent until
    /// one shows up (a message sent before it subscribed would never be shown). Their lines
    /// are passed over by [`Watch::line_with`] like any other.
    pub fn start(home: &Path) -> Watch {
        let mut child = Command::new(bin())
            .arg("--home")
            .arg(home)
            .arg("watch")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn watch");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let watch = Watch {
            child,
            lines,
            seen: Vec::new(),
        };
        eventually(Duration::from_secs(20), "watch streams", || {
            send_messages(home, &[("sync", "sync")]);
            watch.lines.recv_timeout(Duration::from_millis(200)).ok()
        });
        watch
    }

    /// Every line from here on up to the first that contains `needle`, that one included.
    pub fn lines_up_to(&mut self, needle: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(at) = self.seen.iter().position(|l| l.contains(needle)) {
                return self.seen.drain(..=at).collect();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("watch printed no line with {needle:?}: {:#?}", self.seen),
            }
        }
    }

    /// The first line from here on that contains `needle` (the lines before it are passed
    /// over).
    pub fn line_with(&mut self, needle: &str) -> String {
        self.lines_up_to(needle).pop().unwrap()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `sb`'s `GET /metrics`, answered 200.
pub fn metrics(sb: &Switchboard) -> String {
    let auth = format!("Bearer {}", sb.token());
    let reply = http_request(
        sb.ingest.as_deref().expect("ingest address"),
        "GET",
        "/metrics",
        &[("Authorization", auth.as_str())],
        b"",
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body
}

/// The value of the sample `name` (with its labels, as printed) in `sb`'s `GET /metrics`, if it
/// has one.
pub fn metric(sb: &Switchboard, name: &str) -> Option<f64> {
    metrics(sb).lines().find_map(|line| {
        let (sample, value) = line.rsplit_once(' ')?;
        (sample == name).then(|| value.parse().unwrap())
    })
}

/// The user the tests run as, as `switchboard` records a terminal's answers: (uid, login).
pub fn os_user() -> (String, String) {
    let id = |arg| {
        let out = Command::new("id").arg(arg).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    (id("-u"), id("-un"))
}
