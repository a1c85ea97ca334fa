//! The on-call engineer's side against a running daemon: `watch` under a pseudo-terminal and
//! through a pipe, two shells answering one confirm at once, and the Copilot hooks.

use std::io::{BufRead, BufReader, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::util::*;

const RULES: &str = r#"{"rules": [
  {"name": "ask", "channel": "alerts/*", "mode": "confirm", "prompt": "Look at {{content}}"},
  {"name": "brief", "channel": "brief", "mode": "confirm", "prompt": "Now: {{content}}",
   "confirmTimeout": "1s"},
  {"name": "quiet", "channel": "ci/*", "dedupWindow": "1h"}
]}"#;

/// The width the pseudo-terminal reports: wide enough for a confirm's answer hint, which names
/// the test's temporary home (`switchboard --home /tmp/.tmpXXXXXX confirm 1 yes|no`).
const COLS: usize = 140;

/// A `switchboard watch` on a pseudo-terminal of [`COLS`] columns, its output collected.
struct PtyWatch {
    child: Child,
    output: Arc<Mutex<String>>,
}

impl PtyWatch {
    fn start(home: &std::path::Path) -> PtyWatch {
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize {
            ws_row: 40,
            ws_col: COLS as u16,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty fills two descriptors we then own; the pointers are valid.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned here alone.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let child = Command::new(bin())
            .arg("--home")
            .arg(home)
            .arg("watch")
            .env_remove("NO_COLOR")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .spawn()
            .expect("spawn watch");
        let output = Arc::new(Mutex::new(String::new()));
        let sink = output.clone();
        std::thread::spawn(move || {
            let mut master = std::fs::File::from(master);
            let mut buf = [0u8; 4096];
            // Ends with EIO once the child and every copy of the slave are gone.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        PtyWatch { child, output }
    }

    /// The lines so far, colour codes removed.
    fn lines(&self) -> Vec<String> {
        strip_colour(&self.output.lock().unwrap())
            .split("\r\n")
            .map(str::to_string)
            .collect()
    }

    fn raw(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Waits (at most `limit`) for a line containing `needle`; returns it and the time taken.
    fn line(&self, needle: &str, limit: Duration) -> (String, Duration) {
        let started = Instant::now();
        loop {
            if let Some(l) = self.lines().into_iter().find(|l| l.contains(needle)) {
                return (l, started.elapsed());
            }
            assert!(
                started.elapsed() < limit,
                "no line with {needle:?} within {limit:?}; watch printed:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for PtyWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `text` without SGR colour sequences (`ESC [ digits m`).
fn strip_colour(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("\x1b[") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        match after.find('m') {
            Some(j) if after[..j].bytes().all(|b| b.is_ascii_digit() || b == b';') => {
                rest = &after[j + 1..];
            }
            _ => {
                out.push_str("\x1b[");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn send(sb: &Switchboard, channel: &str, text: &str) {
    let out = sb.cli(&["send", "--channel", channel, text]);
    assert!(out.status.success(), "send: {}", stderr(&out));
}

#[test]
fn watch_on_a_terminal_shows_a_confirm_its_answer_and_an_expiry_within_a_second_each() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULES);
    sb.spawn();
    let watch = PtyWatch::start(sb.home.path());
    watch.line("watching ", Duration::from_secs(10));
    assert!(
        watch.raw().contains("\x1b[2m"),
        "colour on a terminal: {:?}",
        watch.raw()
    );

    // Hostile content: escaped, and a long line cut to the terminal's width.
    let hostile = format!("\x1b[2Jboom\nforged {}", "x".repeat(5000));
    send(&sb, "alerts/critical", &hostile);
    let (message, _) = watch.line("alerts/critical: ", Duration::from_secs(5));
    assert!(message.contains("\\x1b[2Jboom\\nforged"), "{message:?}");
    assert!(message.ends_with('…'), "{message:?}");
    let (asked, took) = watch.line("confirm? #1 [ask]", Duration::from_secs(5));
    assert!(took < Duration::from_secs(1), "the request took {took:?}");
    for line in watch.lines() {
        assert!(
            line.chars().count() <= COLS,
            "{} columns: {line:?}",
            line.chars().count()
        );
        assert!(!line.contains('\x1b'), "an escape got through: {line:?}");
    }
    assert!(asked.contains("confirm 1 yes|no"), "{asked}");

    // Its answer, from another shell.
    let answered = Instant::now();
    let out = sb.cli(&["confirm", "1", "yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    watch.line(
        &format!("approved #1 [ask] via cli by {}", os_user().1),
        Duration::from_secs(5),
    );
    assert!(
        answered.elapsed() < Duration::from_secs(1),
        "{:?}",
        answered.elapsed()
    );

    // An unanswered one expires after its 1 s, and watch says so within a second.
    send(&sb, "brief", "disk full");
    watch.line("confirm? #2 [brief]", Duration::from_secs(5));
    let asked = Instant::now();
    watch.line("expired #2 [brief] unanswered", Duration::from_secs(5));
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );

    // A suppression has its line too.
    send(&sb, "ci/main", "build failed");
    send(&sb, "ci/main", "build failed");
    watch.line("suppressed [quiet]: dedup", Duration::from_secs(5));

    // The daemon restarts: watch reconnects and goes on.
    let status = sb.terminate();
    assert!(status.success(), "{}", sb.log());

    sb.spawn();
    watch.line("reconnected: the daemon restarted", Duration::from_secs(10));
    send(&sb, "ci/other", "after the restart");
    watch.line("after the restart", Duration::from_secs(5));

    // The server goes away for good: watch says so and exits non-zero.
    let status = sb.terminate();
    assert!(status.success(), "{}", sb.log());
    let mut watch = watch;
    let exited = wait_exit(&mut watch.child, Duration::from_secs(20));
    assert_eq!(exited.code(), Some(1), "{}", watch.lines().join("\n"));
    watch.line("did not come back", Duration::from_secs(5));
}

/// Lines of a piped child's stdout, as they come.
fn line_reader(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn next_matching(rx: &mpsc::Receiver<String>, what: &str, f: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if f(&l) => return l,
            Ok(_) => {}
            Err(e) => panic!("no line {what}: {e}"),
        }
    }
}

#[test]
fn watch_through_a_pipe_prints_plain_whole_lines_json_uses_server_and_toast_warns() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULES);
    sb.spawn();
    // A confirm that waits before watch starts is shown at start.
    let out = sb.cli(&["send", "--channel", "alerts/x", "early"]);
    assert!(out.status.success());
    eventually(Duration::from_secs(5), "the early confirm", || {
        stdout(&sb.cli(&["pending"]))
            .contains("#1 [ask]")
            .then_some(())
    });
    let empty_path = tempfile::tempdir().unwrap();
    let spawn = |args: &[&str]| {
        Command::new(bin())
            .arg("--home")
            .arg(sb.home.path())
            .arg("watch")
            .args(args)
            .env("PATH", empty_path.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut text = spawn(&["--toast"]);
    let mut json = spawn(&["--json"]);
    let text_lines = line_reader(&mut text);
    let json_lines = line_reader(&mut json);
    let pending = next_matching(&text_lines, "pending at start", |l| {
        l.contains("pending #1")
    });
    assert!(pending.contains("[ask] cli/alerts/x"), "{pending}");
    next_matching(&text_lines, "header", |l| l.starts_with("watching "));
    let first = next_matching(&json_lines, "pending at start", |_| true);
    let first: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(
        (first["type"].as_str(), first["id"].as_u64()),
        (Some("pending"), Some(1))
    );

    let long = format!("tab\there {}", "y".repeat(3000));
    send(&sb, "alerts/y", &long);
    let line = next_matching(&text_lines, "the message", |l| l.contains("cli/alerts/y"));
    assert!(!line.contains('\x1b'), "no colour through a pipe: {line:?}");
    assert!(line.ends_with(&"y".repeat(3000)), "not cut through a pipe");
    assert!(line.contains("tab\\there"), "{line}");
    let msg = next_matching(&json_lines, "the message", |l| {
        l.contains(r#""type":"message""#)
    });
    let msg: Value = serde_json::from_str(&msg).unwrap();
    assert_eq!(msg["server"], "cli");
    assert!(msg.get("serverName").is_none(), "{msg}");
    let queued = next_matching(&json_lines, "the confirm", |l| {
        l.contains(r#""event":"queued""#)
    });
    let queued: Value = serde_json::from_str(&queued).unwrap();
    assert_eq!(queued["item"]["message"]["server"], "cli");
    assert!(!queued.to_string().contains("serverName"), "{queued}");

    let _ = text.kill();
    let _ = json.kill();
    let _ = text.wait();
    let _ = json.wait();
    let mut err = String::new();
    text.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("`--toast` shows nothing: `notify-send` is not on PATH"),
        "{err}"
    );
}

#[test]
fn two_shells_answering_one_confirm_at_once_one_wins_the_other_is_told() {
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "ask", "mode": "confirm", "prompt": "p {{content}}"}]}"#,
    );
    sb.spawn();
    for round in 1..=5u64 {
        send(&sb, "alerts/x", &format!("alert {round}"));
        eventually(Duration::from_secs(5), "the confirm", || {
            stdout(&sb.cli(&["pending"]))
                .contains(&format!("#{round} [ask]"))
                .then_some(())
        });
        let id = round.to_string();
        let shell = |answer: &str| {
            Command::new(bin())
                .arg("--home")
                .arg(sb.home.path())
                .args(["confirm", &id, answer])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (yes, no) = (shell("yes"), shell("no"));
        let outs = [
            yes.wait_with_output().unwrap(),
            no.wait_with_output().unwrap(),
        ];
        let won: Vec<_> = outs.iter().filter(|o| o.status.success()).collect();
        assert_eq!(
            won.len(),
            1,
            "round {round}: exactly one answer wins: {:?}",
            outs.iter().map(stderr).collect::<Vec<_>>()
        );
        let lost = outs.iter().find(|o| !o.status.success()).unwrap();
        assert_eq!(lost.status.code(), Some(5));
        assert!(
            stderr(lost).contains(&format!("confirm {id} was already answered: ")),
            "{}",
            stderr(lost)
        );
    }
    let answers = action_records(sb.home.path())
        .iter()
        .filter(|r| matches!(r["state"].as_str(), Some("approved" | "denied")))
        .count();
    assert_eq!(answers, 5, "one answer journalled per confirm");
}

#[test]
fn copilot_hooks_inject_what_waits_and_never_break_the_session() {
    // No daemon: `{}` and exit 0, the reason on stderr.
    let home = tempfile::tempdir().unwrap();
    let out = cli_in(home.path(), &["pending", "--hook"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "{}");
    assert!(
        stderr(&out).contains("no switchboard is running"),
        "{}",
        stderr(&out)
    );

    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "ask", "mode": "confirm", "prompt": "p {{content}}"}]}"#,
    );
    sb.spawn();
    let out = sb.cli(&["pending", "--hook"]);
    assert_eq!(stdout(&out).trim(), "{}", "nothing waits: nothing injected");
    send(&sb, "alerts/x", "db down");
    let context = eventually(Duration::from_secs(5), "the hook's context", || {
        let out = sb.cli(&["pending", "--hook"]);
        let v: Value = serde_json::from_str(stdout(&out).trim()).ok()?;
        v["additionalContext"].as_str().map(str::to_string)
    });
    assert!(context.contains("#1 [ask] cli/alerts/x"), "{context}");
    assert!(context.contains("channel_confirm"), "{context}");
    assert!(context.contains("wait_for_inbound_message"), "{context}");

    // `install copilot --hooks` writes the hook file beside the MCP config.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcp-config.json");
    let out = cli_in(
        home.path(),
        &[
            "install",
            "copilot",
            "--config",
            config.to_str().unwrap(),
            "--hooks",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let hooks: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("hooks/switchboard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(hooks["version"], 1);
    for event in ["sessionStart", "userPromptSubmitted"] {
        let command = hooks["hooks"][event][0]["bash"].as_str().unwrap();
        assert!(command.ends_with(" pending --hook"), "{command}");
        assert_eq!(hooks["hooks"][event][0]["type"], "command");
    }
    // Claude Code gets its stop hook beside the `.mcp.json` (see tests/integration/hooks.rs).
    let claude = dir.path().join(".mcp.json");
    let out = cli_in(
        home.path(),
        &[
            "install",
            "claude",
            "--config",
            claude.to_str().unwrap(),
            "--hooks",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let settings = std::fs::read_to_string(dir.path().join(".claude/settings.json")).unwrap();
    assert!(settings.contains(" hook stop --host claude"), "{settings}");
}

/// `POST /v1/messages` of one message with the bearer token; the status.
fn ingest_one(sb: &Switchboard) -> u16 {
    let auth = format!("Bearer {}", sb.token());
    http_request(
        sb.ingest.as_deref().unwrap(),
        "POST",
        "/v1/messages",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        br#"{"server": "probe", "channel": "x", "content": "hi"}"#,
    )
    .status
}

#[test]
fn a_changed_switchboard_json_applies_what_it_can_live_and_names_what_needs_a_restart() {
    let sb = Switchboard::start();
    let stats =
        || -> Value { serde_json::from_slice(&sb.cli(&["stats", "--json"]).stdout).unwrap() };
    assert_eq!(stats()["delivery"]["capacity"], 64);
    assert!(stats().get("config_reload").is_none());
    assert_eq!(ingest_one(&sb), 202);
    assert_eq!(ingest_one(&sb), 202, "the default limit is far away");
    sb.write(
        "switchboard.json",
        r#"{"actions": {"queueCapacity": 3}, "http": {"rateLimit": "1/1h", "listen": "127.0.0.1:1"}}"#,
    );
    let reload = eventually(Duration::from_secs(10), "the config reload", || {
        let s = stats();
        (s["delivery"]["capacity"] == 3 && !s["config_reload"].is_null())
            .then(|| s["config_reload"].clone())
    });
    assert_eq!(
        reload["applied"],
        serde_json::json!(["actions.queueCapacity", "http.rateLimit"])
    );
    assert_eq!(reload["restart_needed"], serde_json::json!(["http.listen"]));
    // The new rate limit holds at once: one request an hour.
    assert_eq!(ingest_one(&sb), 202);
    assert_eq!(ingest_one(&sb), 429);
    let text = stdout(&sb.cli(&["stats"]));
    assert!(
        text.contains("restart needed for http.listen: they are read only at start"),
        "{text}"
    );
    assert!(
        sb.log().contains("restart needed for http.listen"),
        "{}",
        sb.log()
    );

    // An invalid file changes nothing and says why.
    sb.write("switchboard.json", r#"{"http": {"rateLimit": "lots"}}"#);
    let reload = eventually(Duration::from_secs(10), "the refused reload", || {
        let s = stats();
        (s["config_reload"]["ok"] == false).then(|| s["config_reload"].clone())
    });
    let message = reload["message"].as_str().unwrap();
    assert!(
        message.starts_with("switchboard.json not reloaded: ")
            && message.contains("switchboard.json:1:24: invalid `http.rateLimit` \"lots\""),
        "the reload names the key, line and column: {reload}"
    );
    assert_eq!(stats()["delivery"]["capacity"], 3);
    assert_eq!(ingest_one(&sb), 429, "the running limit stays");
}

#[test]
fn a_confirm_closes_itself_when_its_resolve_arrives_and_a_late_answer_is_refused() {
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "crit", "channel": "alerts/*", "contentRegex": "^\\[FIRING\\]",
            "mode": "confirm", "prompt": "look {{content}}",
            "resolveRegex": "^\\[RESOLVED\\]", "resolveKey": "{{meta.fingerprint}}"}]}"#,
    );
    sb.spawn();
    let send_meta = |text: &str, fingerprint: &str| {
        let meta = format!("fingerprint={fingerprint}");
        let out = sb.cli(&[
            "send",
            "--channel",
            "alerts/critical",
            "--meta",
            &meta,
            text,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    send_meta("[FIRING] disk", "aaa");
    send_meta("[FIRING] cpu", "bbb");
    eventually(Duration::from_secs(5), "two confirms", || {
        let p = stdout(&sb.cli(&["pending"]));
        (p.contains("#1 [crit]") && p.contains("#2 [crit]")).then_some(())
    });
    send_meta("[RESOLVED] disk", "aaa");
    let resolved = eventually(Duration::from_secs(5), "the disk confirm resolved", || {
        action_records(sb.home.path())
            .into_iter()
            .find(|r| r["id"] == 1 && r["state"] == "resolved")
    });
    assert_eq!(resolved["reason"], "resolved by message 3");
    let pending = stdout(&sb.cli(&["pending"]));
    assert!(
        !pending.contains("#1 [crit]") && pending.contains("#2 [crit]"),
        "{pending}"
    );
    let out = sb.cli(&["confirm", "1", "no"]);
    assert_eq!(out.status.code(), Some(5), "closed: too late");
    assert!(
        stderr(&out).contains("confirm 1 was already answered: resolved"),
        "{}",
        stderr(&out)
    );

    // Closed for good: a restart does not bring it back.
    sb.terminate();
    sb.spawn();
    let pending = stdout(&sb.cli(&["pending"]));
    assert!(
        !pending.contains("#1 [crit]") && pending.contains("#2 [crit]"),
        "{pending}"
    );
}
