//! The operator CLI against a running server.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::util::*;

#[test]
fn a_second_server_on_the_same_home_names_the_owner() {
    let sb = Switchboard::start();
    let out = cli_in(sb.home.path(), &["serve", "--no-stdio", "--no-listen"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("another switchboard (pid {})", sb.pid())),
        "stderr: {err}"
    );
}

#[test]
fn sigterm_exits_cleanly_and_removes_the_endpoint() {
    let mut sb = Switchboard::start();
    let status = sb.terminate();
    assert!(status.success(), "exit status {status}\n{}", sb.log());
    assert!(!sb.home.path().join("endpoint.json").exists());
}

#[test]
fn control_commands_without_a_server_explain_how_to_start_one() {
    let home = tempfile::tempdir().unwrap();
    let out = cli_in(home.path(), &["stats"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("no switchboard is running"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn pause_and_resume_through_the_control_socket() {
    let sb = Switchboard::start();
    let out = sb.cli(&["pause"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stats: serde_json::Value =
        serde_json::from_slice(&sb.cli(&["stats", "--json"]).stdout).unwrap();
    assert_eq!(stats["paused"], true);
    assert!(sb.cli(&["resume"]).status.success());
    let stats: serde_json::Value =
        serde_json::from_slice(&sb.cli(&["stats", "--json"]).stdout).unwrap();
    assert_eq!(stats["paused"], false);
}

/// Issue 46: `duty on --for 99999999999h` panicked a daemon task. Every duration is bounded
/// (100 years): the CLI refuses a longer one with a clear error, the daemon refuses one sent
/// straight to its control socket, and it still answers.
#[test]
fn a_duration_too_long_is_a_clear_error_not_a_panic() {
    let sb = Switchboard::start();
    let out = sb.cli(&["duty", "on", "--for", "99999999999h"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("\"99999999999h\" is longer than the longest duration, 100 years"),
        "{}",
        stderr(&out)
    );
    let r = control(
        sb.home.path(),
        serde_json::json!({"op": "duty", "on": true, "for_ms": u64::MAX}),
    );
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        r["error"]
            .to_string()
            .contains("longer than the longest duration"),
        "{r}"
    );
    let on = sb.cli(&["duty", "on", "--for", "8h"]);
    assert!(on.status.success(), "{}", stderr(&on));
    assert!(stdout(&on).starts_with("on duty until"), "{}", stdout(&on));
    assert!(!sb.log().contains("panicked"), "{}", sb.log());
}

#[test]
fn install_copilot_keeps_existing_servers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp-config.json");
    std::fs::write(
        &file,
        r#"{"mcpServers":{"other":{"type":"local","command":"x"}}}"#,
    )
    .unwrap();
    let out = cli_in(
        dir.path(),
        &["install", "copilot", "--config", file.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("added `switchboard` to"),
        "{}",
        stdout(&out)
    );
    // The test binary lives in target/: install says what that means.
    assert!(
        stderr(&out).contains("is a cargo build output")
            && stderr(&out).contains("cargo install --locked --path ."),
        "{}",
        stderr(&out)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(doc["mcpServers"]["other"]["command"], "x");
    let entry = &doc["mcpServers"]["switchboard"];
    // --home was given, so the host's front ends use the same home.
    assert_eq!(
        entry["args"],
        serde_json::json!(["--home", dir.path().to_str().unwrap(), "serve"])
    );
    assert_eq!(entry["tools"][0], "*");
    assert_eq!(entry["timeout"], 85_000, "above the 55 s wait cap: {entry}");

    // Again: nothing changes, and it says so; a changed wait cap updates the entry.
    let again = cli_in(
        dir.path(),
        &["install", "copilot", "--config", file.to_str().unwrap()],
    );
    assert!(
        stdout(&again).contains("already up to date"),
        "{}",
        stdout(&again)
    );
    std::fs::write(
        dir.path().join("switchboard.json"),
        r#"{"mcp": {"maxWaitS": 100}}"#,
    )
    .unwrap();
    let before = std::fs::read_to_string(&file).unwrap();
    let dry = cli_in(
        dir.path(),
        &[
            "install",
            "copilot",
            "--config",
            file.to_str().unwrap(),
            "--dry-run",
        ],
    );
    assert!(
        stdout(&dry).contains("dry run, nothing written"),
        "{}",
        stdout(&dry)
    );
    assert!(stdout(&dry).contains("130000"), "{}", stdout(&dry));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        before,
        "a dry run writes nothing"
    );
    let updated = cli_in(
        dir.path(),
        &["install", "copilot", "--config", file.to_str().unwrap()],
    );
    assert!(
        stdout(&updated).starts_with("updated `switchboard` in"),
        "{}",
        stdout(&updated)
    );
}

#[test]
fn send_then_list_shows_the_message() {
    let sb = Switchboard::start();
    let out = sb.cli(&[
        "send",
        "--channel",
        "ci/main",
        "--meta",
        "run=42",
        "build failed",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "seq 1");
    let out = sb.cli(&["list", "--json"]);
    let line = stdout(&out);
    let msg: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(msg["channel"], "ci/main");
    assert_eq!(msg["server"], "cli");
    assert!(
        msg.get("serverName").is_none(),
        "one shape everywhere: {msg}"
    );
    assert_eq!(msg["metadata"]["run"], "42");
    assert_eq!(msg["content"], "build failed");
}

#[test]
fn send_rejects_metadata_without_equals() {
    let home = tempfile::tempdir().unwrap();
    let out = cli_in(home.path(), &["send", "-c", "x", "--meta", "novalue", "hi"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("expected KEY=VALUE"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn pending_lists_open_confirms_and_confirm_needs_an_explicit_answer() {
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "ask", "channel": "alerts/*", "mode": "confirm",
            "prompt": "Investigate {{content}}", "tools": ["view"], "confirmTimeout": "30m"}]}"#,
    );
    sb.spawn();
    let out = sb.cli(&["pending"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "no pending confirms");
    send_messages(
        sb.home.path(),
        &[("alerts/disk", "[FIRING] DiskFull: /var is at 97%")],
    );
    let listed = eventually(
        std::time::Duration::from_secs(5),
        "the confirm is pending",
        || {
            let out = sb.cli(&["pending"]);
            let text = stdout(&out);
            text.starts_with("#1 ").then_some(text)
        },
    );
    let first = listed.lines().next().unwrap();
    assert!(
        first.starts_with("#1 [ask] test/alerts/disk seq 1, 29m"),
        "{first}"
    );
    assert!(
        first.ends_with("left: [FIRING] DiskFull: /var is at 97%"),
        "{first}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&sb.cli(&["pending", "--json"]))).unwrap();
    assert_eq!(json[0]["id"], 1);
    assert_eq!(json[0]["channel"], "alerts/disk");

    // No decision: refused, nothing answered.
    let out = sb.cli(&["confirm", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    // The hints name the home the command was given.
    let cmd = format!("switchboard --home {}", sb.home.path().display());
    assert!(
        err.contains(&format!("confirm 1 needs an answer: `{cmd} confirm 1 yes`"))
            && err.contains(&format!("`{cmd} pending` lists the open requests")),
        "{err}"
    );
    assert!(
        stdout(&sb.cli(&["pending"])).starts_with("#1 "),
        "still open"
    );

    let out = sb.cli(&["confirm", "1", "no"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "denied #1: nothing will run");
    assert_eq!(stdout(&sb.cli(&["pending"])).trim(), "no pending confirms");
    // Refusals exit with their kind's code: 5 too late, 4 no such confirm.
    let out = sb.cli(&["confirm", "1", "yes"]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("already answered: denied"),
        "{}",
        stderr(&out)
    );
    let out = sb.cli(&["confirm", "99", "yes"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_eq!(stderr(&out).trim(), "error: no confirm request with id 99");

    // Yes: one line for people (issue 27: it printed ~50 lines of JSON), JSON with --json.
    send_messages(
        sb.home.path(),
        &[("alerts/a", "[FIRING] A"), ("alerts/b", "[FIRING] B")],
    );
    eventually(std::time::Duration::from_secs(5), "two pending", || {
        stdout(&sb.cli(&["pending"])).contains("#3 ").then_some(())
    });
    let out = sb.cli(&["confirm", "2", "yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "approved #2 [ask]: queued for the next agent wait: Investigate [FIRING] A\n"
    );
    let out = sb.cli(&["confirm", "3", "yes", "--json"]);
    let item: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(item["kind"], "approved");
    assert_eq!(item["message"]["server"], "test");
}

#[test]
fn stats_is_a_summary_for_people_and_json_for_scripts() {
    let sb = Switchboard::start();
    send_messages(sb.home.path(), &[("ci/main", "build 1 failed")]);
    let out = sb.cli(&["stats"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("inbox     last seq 1, 1 in memory, journal ok"),
        "{text}"
    );
    assert!(text.contains("rules     1 live"), "{text}");
    assert!(
        text.contains(
            "delivery  0 nudges waiting, 1 held for the next session, 0 confirms pending"
        ),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&sb.cli(&["stats", "--json"]))).unwrap();
    assert_eq!(json["inbox"]["last_seq"], 1);
}

/// `serve` started by hand in a terminal says what it is for before it waits on stdin. Runs
/// under `script`, which gives it a terminal (installed with apt-get when missing).
#[test]
fn serve_on_a_terminal_says_it_speaks_mcp_on_stdin() {
    // util-linux's `script`, in Debian's essential bsdutils.
    if installed("script", "bsdutils").is_none() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let _daemon = DaemonGuard(home.path().to_path_buf());
    let command = format!(
        "{} --home {} serve --no-listen",
        bin().display(),
        home.path().display()
    );
    let run = run_limited(
        std::process::Command::new("script").args(["-qec", &command, "/dev/null"]),
        std::time::Duration::from_secs(20),
    );
    let first: Vec<&str> = run.stdout.lines().take(2).collect();
    assert!(
        first[0].starts_with("switchboard serve speaks MCP (JSON-RPC) on stdin and stdout"),
        "{}",
        run.stdout
    );
    let start = format!("switchboard --home {} start", home.path().display());
    assert!(first[1].contains(&start), "{}", run.stdout);
    // Not on a terminal (as a host starts it): nothing of the kind.
    let sb = Switchboard::start();
    assert!(!sb.log().contains("speaks MCP"));
}

/// Issue 27: a second home's `start` on a port that is taken fails with one line that names
/// the port and how to pick another, instead of exiting 0 with a daemon that does not listen;
/// `--no-listen` starts without ingest.
#[test]
fn start_on_a_taken_port_fails_with_one_line_unless_no_listen() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let home = tempfile::tempdir().unwrap();
    let _guard = DaemonGuard(home.path().to_path_buf());
    let out = cli_in(home.path(), &["start", "--listen", &addr]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("cannot listen on {addr} for ingest"))
            && err.contains("pick another port with `--listen 127.0.0.1:PORT`")
            && err.contains("`--no-listen`"),
        "{err}"
    );
    assert!(daemon_pid(home.path()).is_none(), "nothing started");

    // In switchboard.json too.
    std::fs::write(
        home.path().join("switchboard.json"),
        format!(r#"{{"http": {{"listen": "{addr}"}}}}"#),
    )
    .unwrap();
    let out = cli_in(home.path(), &["start"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&format!("cannot listen on {addr}")));

    let out = cli_in(home.path(), &["start", "--no-listen"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("ingest: off"), "{}", stdout(&out));
}

/// Issue 27: shell completions and a man page, from the same command line definition.
#[test]
fn completions_and_the_man_page_cover_every_command() {
    let home = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let out = cli_in(home.path(), &["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let text = stdout(&out);
        for command in ["serve", "confirm", "pending", "watch", "install", "rules"] {
            assert!(text.contains(command), "{shell} lacks {command}");
        }
    }
    let out = cli_in(home.path(), &["man"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(".TH switchboard 1"),
        "{}",
        &text[..200.min(text.len())]
    );
    assert!(
        text.contains("completions"),
        "the man page lists the commands"
    );
    let out = cli_in(home.path(), &["completions", "powershell"]);
    assert!(out.status.success(), "clap_complete's shells");
    let out = cli_in(home.path(), &["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "an unknown shell is refused");
}

/// The README's quick start, pasted as one block (issue 47): one `bash` runs every line
/// after `cargo install` (which the test build replaces), with no wait between them, in a
/// fresh `HOME` (so `~/.switchboard` is a new home) with the binary under test on `PATH`; the
/// only change is the ingest port, a free one. It must end as the reader expects: the confirm
/// pending, with the tools of its rule; `rules check` said the daemon runs the file; the
/// hooks were installed; `watch` shows the confirm.
#[test]
fn the_readme_quick_start_pasted_as_one_block_ends_with_the_confirm_pending() {
    use std::os::unix::process::CommandExt;
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let marker = "<!-- quick start:";
    let block = readme[readme.find(marker).expect("the quick start marker")..]
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the quick start block");
    assert!(
        block.contains("install claude --hooks"),
        "the quick start installs the hooks:\n{block}"
    );
    let port = free_port();
    let script: Vec<String> = block
        .lines()
        .filter(|l| !l.starts_with("cargo install"))
        .map(|l| {
            l.replace("8787", &port.to_string()).replacen(
                "switchboard start",
                &format!("switchboard start --listen 127.0.0.1:{port}"),
                1,
            )
        })
        .collect();

    let root = tempfile::tempdir().unwrap();
    let bin_dir = root.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    std::os::unix::fs::symlink(bin(), bin_dir.join("switchboard")).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let home = root.path().join(".switchboard");
    let _daemon = DaemonGuard(home.clone());
    let out_file = root.path().join("out.txt");
    let shown = || std::fs::read_to_string(&out_file).unwrap_or_default();
    // As a paste: one shell reads every line, none waits for the one before to be seen.
    let out = std::fs::File::create(&out_file).unwrap();
    let mut child = Command::new("bash")
        .args(["-c", &script.join("\n")])
        .current_dir(root.path())
        .env("HOME", root.path())
        .env("PATH", &path)
        .env_remove("SWITCHBOARD_HOME")
        .env_remove("SWITCHBOARD_TOKEN")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        // Its own process group, so that `watch &` stops with it.
        .process_group(0)
        .spawn()
        .unwrap();
    struct Group(i32);
    impl Drop for Group {
        fn drop(&mut self) {
            unsafe { libc::kill(-self.0, libc::SIGKILL) };
        }
    }
    let _group = Group(child.id() as i32);
    let status = wait_exit(&mut child, Duration::from_secs(60));
    let text = shown();
    assert!(status.success(), "{status}:\n{text}");
    // `watch &` writes to the same terminal: its lines come in between.
    assert!(
        text.contains(": ok, 1 rule: ci-failed\n")
            && text.contains("\nrunning: 1 rule from triggers.json, saved "),
        "rules check says the daemon runs the file:\n{text}"
    );
    // The last line's output, `pending`: the confirm, not the built-in rule's nudge.
    assert!(
        text.lines().any(|l| l.starts_with('#')
            && l.contains(" [ci-failed] cli/ci/main seq 2, 29m")
            && l.ends_with(" left: build 42 failed")),
        "the confirm is pending at the end:\n{text}"
    );
    assert!(!text.contains("no pending confirms"), "{text}");
    let open = stdout(&cli_in(&home, &["pending", "--json"]));
    let open: serde_json::Value = serde_json::from_str(&open).unwrap();
    assert_eq!(open[0]["rule"], "ci-failed", "{open}");
    assert!(
        !open[0]["tools"].as_array().unwrap().is_empty(),
        "its rule has tools: {open}"
    );
    assert!(
        root.path().join(".mcp.json").exists()
            && root.path().join(".claude/settings.json").exists(),
        "install claude --hooks wrote .mcp.json and the hooks:\n{text}"
    );
    // `watch &` shows the confirm: live, or among the pending when it started after it.
    eventually(Duration::from_secs(10), "watch shows the confirm", || {
        let text = shown();
        text.lines()
            .any(|l| {
                (l.starts_with("  confirm? #") || l.starts_with("  pending #"))
                    && l.contains(" [ci-failed] ")
            })
            .then_some(())
    });
}

/// Every code fence of the Markdown pages (README.md, docs/*.md) is a line of its own and
/// closed (issue 47: one glued to a paragraph rendered the duration syntax and "Checking
/// rules" as one code block).
#[test]
fn every_markdown_fence_is_a_line_of_its_own_and_is_closed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    if let Ok(docs) = std::fs::read_dir(root.join("docs")) {
        pages.extend(
            docs.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md")),
        );
    }
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        let shown = page.strip_prefix(root).unwrap().display().to_string();
        // The backticks of the open fence and its line.
        let mut open: Option<(usize, usize)> = None;
        for (n, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            let ticks = trimmed.chars().take_while(|c| *c == '`').count();
            match open {
                Some((width, _)) if ticks >= width && trimmed.trim_end().len() == ticks => {
                    open = None;
                }
                // A closing fence with text after it closes nothing: the text that follows
                // renders as code.
                Some((width, _)) => assert!(
                    ticks < width,
                    "{shown}:{}: a fence with text after it: {line}",
                    n + 1
                ),
                None if ticks >= 3 => open = Some((ticks, n + 1)),
                None => assert!(
                    !line.contains("```"),
                    "{shown}:{}: a fence inside a line of text: {line}",
                    n + 1
                ),
            }
        }
        assert!(
            open.is_none(),
            "{shown}:{}: a fence that is never closed",
            open.unwrap().1
        );
    }
}

/// A pipe whose reader is already gone: what `switchboard status | true` writes into.
fn closed_pipe() -> Stdio {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: pipe() just made both descriptors, and nothing else owns them.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

/// Issue 46: every command whose reader goes away exits quietly, as a pipe ends; today
/// `switchboard status | true` panicked on the broken pipe.
#[test]
fn every_command_exits_quietly_when_its_reader_is_gone() {
    let mut sb = Switchboard::start();
    send_messages(sb.home.path(), &[("news/a", "one")]);
    let commands: &[&[&str]] = &[
        &["status"],
        &["status", "--json"],
        &["start", "--no-listen"],
        &["stats"],
        &["list"],
        &["list", "--json"],
        &["pending"],
        &["rules", "list"],
        &["rules", "check"],
        &["rules", "schema"],
        &["config", "check"],
        &["ui", "--no-open"],
        &["completions", "bash"],
        &["man"],
        &["--version"],
        &["--help"],
    ];
    for args in commands {
        let out = Command::new(bin())
            .arg("--home")
            .arg(sb.home.path())
            .args(*args)
            .stdin(Stdio::null())
            .stdout(closed_pipe())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}");
    }
    sb.terminate();
}
