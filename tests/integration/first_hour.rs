//! Issue 47, "a newcomer's first hour": what a new user met in the first hour with only the
//! README, each as a test that failed before the fix. (The quick start pasted as one block and
//! the Markdown fences are in `cli.rs`, beside the other README tests; the approval page's
//! `Sec-Fetch-Site` in `approvals.rs`.)

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use super::util::*;

/// A confirm rule named `name` on `ci/*`.
fn confirm_rule(name: &str) -> String {
    format!(
        r#"{{"rules": [{{"name": "{name}", "channel": "ci/*", "mode": "confirm",
            "prompt": "look at {{{{content}}}}", "tools": ["Read"]}}]}}"#
    )
}

/// `switchboard ARGS` with `env` set (and `SWITCHBOARD_HOME` unset unless given).
fn cli_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("SWITCHBOARD_HOME")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run switchboard")
}

/// A save followed at once by `rules check` (or `rules reload`) and a `send`: the send meets
/// the saved rules, every time. Before, the daemon applied the save about 150 ms later and
/// the send was caught by the rules of before.
#[test]
fn rules_check_and_reload_return_once_the_daemon_runs_the_saved_file() {
    let sb = Switchboard::start();
    for round in 0..6 {
        let name = format!("rule-{round}");
        sb.write("triggers.json", &confirm_rule(&name));
        let how = if round % 2 == 0 { "check" } else { "reload" };
        let out = sb.cli(&["rules", how]);
        assert!(out.status.success(), "{how}: {}", stderr(&out));
        let said = stdout(&out);
        assert!(
            said.contains("running: 1 rule from triggers.json, saved ")
                && said.trim_end().ends_with(" s ago"),
            "{how}: {said}"
        );
        let out = sb.cli(&["send", "--channel", "ci/main", &format!("build {round}")]);
        assert!(out.status.success(), "{}", stderr(&out));
        let open: Value = serde_json::from_slice(&sb.cli(&["pending", "--json"]).stdout).unwrap();
        let rules: Vec<&str> = open
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["rule"].as_str())
            .collect();
        assert!(
            rules.contains(&name.as_str()),
            "round {round} ({how}): the send met the saved rule: {open}"
        );
    }
    // An invalid save: its errors, then what runs instead (not the first error again).
    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "x", "mode": "confirm"}]}"#,
    );
    let out = sb.cli(&["rules", "check"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = stdout(&out);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 3, "{said}");
    assert!(
        lines[0].ends_with("triggers.json:1:26: rule 0 `x`: mode `confirm` requires a `prompt`"),
        "{said}"
    );
    assert!(
        lines[1].ends_with("triggers.json: invalid, 1 error"),
        "{said}"
    );
    assert_eq!(
        lines[2],
        "not running it: the daemon keeps running the previous 1 rule"
    );
}

/// An invalid `triggers.json` at start: `start` warns, `status` says it in a line of its own
/// (bold red on a terminal or with `CLICOLOR_FORCE`, plain with `NO_COLOR` or in a pipe), and
/// `status --json` carries the same, with the first error. Before, `status` said "rules: 1
/// loaded" while every confirm rule had become the catch-all nudge.
#[test]
fn an_invalid_rules_file_is_loud_in_start_and_status() {
    let home = tempfile::tempdir().unwrap();
    let _daemon = DaemonGuard(home.path().to_path_buf());
    std::fs::write(
        home.path().join("triggers.json"),
        r#"{"rules": [{"name": "x", "mode": "confirm"}]}"#,
    )
    .unwrap();
    let out = cli_in(home.path(), &["start", "--listen", "127.0.0.1:0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first_error = "triggers.json:1:26: rule 0 `x`: mode `confirm` requires a `prompt`";
    let line = format!(
        "the rules on disk are not the rules running: {first_error}; still running the \
         built-in catch-all notify rule"
    );
    let warned = stderr(&out);
    assert!(
        warned.contains(&format!("warning: {line}")),
        "start warns:\n{warned}"
    );

    let status = |env: &[(&str, &str)]| {
        let home = home.path().to_str().unwrap();
        stdout(&cli_env(&["--home", home, "status"], env))
    };
    let plain = status(&[]);
    assert!(plain.contains(&format!("\n  rules: {line}\n")), "{plain}");
    assert!(!plain.contains('\x1b'), "no colour in a pipe: {plain:?}");
    let forced = status(&[("CLICOLOR_FORCE", "1")]);
    assert!(
        forced.contains(&format!("\x1b[1;31m  rules: {line}\x1b[0m")),
        "bold red: {forced:?}"
    );
    let no_color = status(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]);
    assert!(!no_color.contains('\x1b'), "NO_COLOR wins: {no_color:?}");

    let json: Value =
        serde_json::from_slice(&cli_in(home.path(), &["status", "--json"]).stdout).unwrap();
    let rules = &json["rules"];
    assert_eq!(rules["in_sync"], false, "{json}");
    assert_eq!(rules["error"], first_error, "{json}");
    assert_eq!(rules["errors"], 1);
    assert_eq!(rules["from"], "builtin");
    assert_eq!(rules["line"], line.as_str());

    // Mended: `rules check` has it run, and everything says so.
    std::fs::write(home.path().join("triggers.json"), confirm_rule("x")).unwrap();
    let out = cli_in(home.path(), &["rules", "check"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let plain = status(&[("CLICOLOR_FORCE", "1")]);
    assert!(
        plain.contains("\n  rules: 1 rule from triggers.json\n"),
        "{plain}"
    );
    let json: Value =
        serde_json::from_slice(&cli_in(home.path(), &["status", "--json"]).stdout).unwrap();
    assert_eq!(json["rules"]["in_sync"], true, "{json}");
    let out = cli_in(home.path(), &["stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `watch` prints one line per reload of `triggers.json` or `switchboard.json`, good or not;
/// a save that `rules check` had the daemon read is one reload, not two; and a
/// `switchboard.json` saved again with nothing changed applies nothing (it said "applied
/// http.githubSecret" again).
#[test]
fn watch_prints_one_line_per_reload_of_either_file() {
    let sb = Switchboard::start();
    let mut watch = Watch::start(sb.home.path());
    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "a"}, {"name": "b"}]}"#,
    );
    assert_eq!(watch.line_with("rules: "), "rules: reloaded, 2 rules");

    sb.write("triggers.json", &confirm_rule("c"));
    let out = sb.cli(&["rules", "check"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The watcher looks at that save before it looks at a later save of switchboard.json
    // (the same batch of events or an earlier one): past the config's line, it has seen it.
    sb.write("switchboard.json", "{}");
    let lines = watch.lines_up_to("config: ");
    let reloads: Vec<_> = lines.iter().filter(|l| l.starts_with("rules: ")).collect();
    assert_eq!(
        reloads,
        ["rules: reloaded, 1 rule"],
        "one save, one reload: {lines:#?}"
    );
    assert_eq!(
        lines.last().unwrap(),
        "config: reloaded: nothing differs from the running settings"
    );

    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "x", "chanel": "ci/*"}]}"#,
    );
    assert_eq!(
        watch.line_with("rules: "),
        "rules: triggers.json:1:26: rule 0 `x`: unknown key `chanel`; did you mean `channel`?; \
         still running the previous 1 rule"
    );

    sb.write("switchboard.json", r#"{"http": {"githubSecret": "s3"}}"#);
    assert_eq!(
        watch.line_with("config: "),
        "config: reloaded: applied http.githubSecret"
    );
    sb.write(
        "switchboard.json",
        r#"{"http": {"githubSecret": "s3"}, "mcp": {}}"#,
    );
    assert_eq!(
        watch.line_with("config: "),
        "config: reloaded: nothing differs from the running settings"
    );
    sb.write("switchboard.json", r#"{"http": {"rateLimt": "5/1s"}}"#);
    assert_eq!(
        watch.line_with("config: "),
        "config: switchboard.json:1:11: unknown key `http.rateLimt`; did you mean \
         `http.rateLimit`?; still running the previous settings"
    );
}

/// `config check` lists every error at once, each located, each with what was meant (before,
/// a bad cron hid the `http` errors and the bad time zone beside it).
#[test]
fn config_check_reports_every_error_at_once_with_a_suggestion() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("switchboard.json"),
        r#"{
  "http": {"rateLimit": "30", "listn": "127.0.0.1:1"},
  "schedules": [
    {"name": "a", "cron": "61 * * * *", "timezone": "America/New_york", "channel": "x", "content": "y"}
  ],
  "actions": {"queueCapacty": 5}
}"#,
    )
    .unwrap();
    let out = cli_in(home.path(), &["config", "check"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let path = home.path().join("switchboard.json").display().to_string();
    for want in [
        format!("{path}:2:25: invalid `http.rateLimit` \"30\""),
        format!("{path}:2:31: unknown key `http.listn`; did you mean `http.listen`?"),
        format!("{path}:4:27: schedule 0 `a`: invalid `cron` \"61 * * * *\""),
        format!(
            "{path}:4:53: schedule 0 `a`: invalid `timezone` \"America/New_york\": not an IANA \
             time zone; did you mean \"America/New_York\"?"
        ),
        format!(
            "{path}:6:15: unknown key `actions.queueCapacty`; did you mean \
             `actions.queueCapacity`?"
        ),
        format!("{path}: 5 errors"),
    ] {
        assert!(text.contains(&want), "want {want:?} in:\n{text}");
    }
    for args in [["--json"], ["--format=json"]] {
        let out = cli_in(home.path(), &[&["config", "check"][..], &args[..]].concat());
        let errors: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(errors.as_array().unwrap().len(), 5, "{errors}");
    }
}

/// A bare label in a matcher of an Alertmanager rule (`team="db"`) is pointed to `labels.team`,
/// located; a time zone in the wrong case to the right one.
#[test]
fn rules_check_points_a_bare_label_and_a_time_zone_to_what_was_meant() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("am.json");
    std::fs::write(
        &file,
        "{\"rules\": [{\"name\": \"db\", \"server\": \"alertmanager\",\n  \
         \"matchers\": [\"team=\\\"db\\\"\"]}]}",
    )
    .unwrap();
    let shown = file.display().to_string();
    let out = cli_in(home.path(), &["rules", "check", &shown]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{shown}:2:16: warning: rule 0 `db`: matcher key `team` is set by no `alertmanager` \
             message, so it always sees \"\"; did you mean `labels.team` or `annotations.team`?"
        )),
        "{}",
        stderr(&out)
    );
    std::fs::write(
        &file,
        r#"{"timeIntervals": {"office": [{"location": "America/New_york"}]},
  "rules": [{"name": "r", "activeTimeIntervals": ["office"]}]}"#,
    )
    .unwrap();
    let out = cli_in(home.path(), &["rules", "check", &shown]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("did you mean \"America/New_York\"?"),
        "{}",
        stdout(&out)
    );
}

/// Every command that prints takes `--json` and prints JSON (JSON lines for the streams); the
/// rules and config checks keep `--format json` beside it. Before, `send` and `duty` had none
/// and `rules check` only `--format json`.
#[test]
fn every_command_that_prints_takes_json() {
    let sb = Switchboard::start();
    let home = sb.home.path();
    let dir = tempfile::tempdir().unwrap();
    sb.write("triggers.json", &confirm_rule("ask"));
    let tests = dir.path().join("tests.json");
    std::fs::write(
        &tests,
        format!(
            r#"{{"ruleFiles": ["{}"], "tests": [{{"name": "fires", "messages":
              [{{"channel": "ci/main", "content": "x", "timestamp": "2026-01-01T00:00:00Z"}}],
              "expect": [{{"msg": 0, "rule": "ask", "mode": "confirm"}}]}}]}}"#,
            home.join("triggers.json").display()
        ),
    )
    .unwrap();
    let mcp = dir.path().join("mcp.json");
    let (tests, mcp) = (tests.display().to_string(), mcp.display().to_string());
    let one = |args: &[&str]| -> Value {
        let out = sb.cli(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", stdout(&out)))
    };
    assert_eq!(one(&["rules", "check", "--json"]), serde_json::json!([]));
    assert_eq!(
        one(&["rules", "check", "--format", "json"]),
        serde_json::json!([])
    );
    assert_eq!(one(&["rules", "reload", "--json"])["ok"], true);
    assert_eq!(one(&["rules", "list", "--json"])[0]["name"], "ask");
    assert_eq!(one(&["rules", "test", &tests, "--json"])["passed"], 1);
    assert_eq!(one(&["config", "check", "--json"]), serde_json::json!([]));
    let sent = one(&["send", "--channel", "ci/main", "--json", "build 7 failed"]);
    assert_eq!(sent["accepted"][0]["duplicate"], false, "{sent}");
    let id = one(&["pending", "--json"])[0]["id"]
        .as_u64()
        .unwrap()
        .to_string();
    assert_eq!(one(&["confirm", &id, "yes", "--json"])["rule"], "ask");
    assert_eq!(
        one(&["pause", "--json"]),
        serde_json::json!({"paused": true})
    );
    assert_eq!(
        one(&["resume", "--json"]),
        serde_json::json!({"paused": false})
    );
    assert_eq!(one(&["duty", "--json"])["on"], false);
    assert!(one(&["stats", "--json"])["inbox"].is_object());
    assert_eq!(one(&["status", "--json"])["running"], true);
    assert_eq!(one(&["start", "--json"])["started"], false);
    assert!(
        one(&["ui", "--json"])["url"]
            .as_str()
            .unwrap()
            .contains("/ui/login?code=")
    );
    let installed = one(&["install", "claude", "--config", &mcp, "--dry-run", "--json"]);
    assert_eq!(installed["files"][0]["change"], "added", "{installed}");
    let man_dir = dir.path().join("man1");
    let man = one(&["man", "--dir", man_dir.to_str().unwrap(), "--json"]);
    assert!(
        man["pages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "switchboard-rules-check.1"),
        "{man}"
    );
    let out = sb.cli(&["list", "--json"]);
    for line in stdout(&out).lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    assert_eq!(one(&["stop", "--json"])["stopped"], true);
}

/// Exit statuses, one meaning each (`--help` and the man page list them): 2 for a wrong
/// command line only, 3 when no daemon runs, 4 for an unknown confirm (5 to 7 for the other
/// kinds of refusal), 1 for the other failures.
/// Before, a usage error and a runtime error both exited 2.
#[test]
fn exit_statuses_tell_usage_not_running_refused_and_failure_apart() {
    let home = tempfile::tempdir().unwrap();
    let code = |args: &[&str]| cli_in(home.path(), args).status.code();
    assert_eq!(code(&["stats", "--bogus"]), Some(2), "an unknown flag");
    assert_eq!(code(&["confirm", "1"]), Some(2), "an answer left out");
    assert_eq!(code(&["stats"]), Some(3), "no daemon");
    assert_eq!(code(&["pending"]), Some(3), "no daemon");
    assert_eq!(code(&["status"]), Some(3), "no daemon");
    std::fs::write(home.path().join("triggers.json"), "[]").unwrap();
    assert_eq!(code(&["rules", "check"]), Some(1), "an invalid file");
    let sb = Switchboard::start();
    let out = sb.cli(&["confirm", "99", "yes"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    for args in [&["--help"][..], &["start", "--help"]] {
        let help = stdout(&cli_in(home.path(), args));
        assert!(
            help.contains("Exit status:\n  0  done\n  1  failed")
                && help.contains("  3  no switchboard daemon runs on the home"),
            "{help}"
        );
    }
    assert!(
        stdout(&cli_in(home.path(), &["start", "--help"]))
            .contains("Examples:\n  switchboard start\n")
    );
}

/// A hint names the home the command was given (before, `switchboard --home X pending`
/// suggested `switchboard start`, which starts another home's daemon).
#[test]
fn every_hint_names_the_home_it_was_given() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().to_str().unwrap();
    let out = cli_env(&["--home", dir, "pending"], &[]);
    assert!(
        stderr(&out).contains(&format!("start one with `switchboard --home {dir} start`")),
        "{}",
        stderr(&out)
    );
    let out = cli_env(&["pending"], &[("SWITCHBOARD_HOME", dir)]);
    assert!(
        stderr(&out).contains(&format!(
            "start one with `SWITCHBOARD_HOME={dir} switchboard start`"
        )),
        "{}",
        stderr(&out)
    );
    let out = cli_env(&["--home", dir, "confirm", "3"], &[]);
    assert!(
        stderr(&out).contains(&format!("`switchboard --home {dir} confirm 3 yes`")),
        "{}",
        stderr(&out)
    );

    // What the daemon tells an agent about to stop names the home too (it said `switchboard
    // confirm ID yes|no`, which answers on the default home).
    let sb = Switchboard::start();
    let dir = sb.home.path().to_str().unwrap();
    sb.write("triggers.json", &confirm_rule("ask"));
    assert!(sb.cli(&["rules", "check"]).status.success());
    assert!(
        sb.cli(&["send", "--channel", "ci/main", "build 3 failed"])
            .status
            .success()
    );
    // `pending` returns once the send is evaluated: the confirm is open.
    assert!(stdout(&sb.cli(&["pending"])).contains("[ask]"));
    let mut hook = Command::new(bin())
        .args(["--home", dir, "hook", "stop"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    hook.stdin
        .take()
        .unwrap()
        .write_all(br#"{"sessionId": "s1", "stop_hook_active": false}"#)
        .unwrap();
    let out = hook.wait_with_output().unwrap();
    let decision: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&out), stderr(&out)));
    let reason = decision["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "the command `switchboard --home {dir} confirm ID yes|no`"
        )),
        "{decision}"
    );
}

/// `switchboard man --dir DIR` writes a page per command, each with EXAMPLES, FILES and EXIT
/// STATUS (before, the top page pointed to subcommand pages nothing could generate).
#[test]
fn man_writes_a_page_per_command_with_examples_files_and_exit_status() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("man1");
    let out = cli_in(home.path(), &["man", "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = |name: &str| std::fs::read_to_string(dir.join(format!("{name}.1")));
    let top = page("switchboard").unwrap();
    assert!(top.contains("switchboard\\-rules(1)"), "SEE ALSO: {top}");
    for name in [
        "switchboard",
        "switchboard-start",
        "switchboard-status",
        "switchboard-send",
        "switchboard-rules-check",
        "switchboard-rules-reload",
        "switchboard-config-check",
        "switchboard-install",
        "switchboard-hook-stop",
        "switchboard-duty",
    ] {
        let text = page(name).unwrap_or_else(|e| panic!("{name}.1: {e}"));
        for section in [".SH EXAMPLES", ".SH FILES", ".SH \"EXIT STATUS\""] {
            assert!(text.contains(section), "{name}.1 has no {section}:\n{text}");
        }
    }
    assert!(
        page("switchboard-help").is_err(),
        "no page for clap's `help`"
    );
    let pages = std::fs::read_dir(&dir).unwrap().count();
    assert!(
        stdout(&out).contains(&format!("wrote {pages} man pages")),
        "{}",
        stdout(&out)
    );
}

/// `watch` shows an approval once: `approved #N … via cli`, then the work it queued, without
/// a second "approved" line that still asked for an answer.
#[test]
fn watch_shows_an_approval_once() {
    let sb = Switchboard::start();
    sb.write("triggers.json", &confirm_rule("ask"));
    assert!(sb.cli(&["rules", "check"]).status.success());
    let mut watch = Watch::start(sb.home.path());
    send_messages(sb.home.path(), &[("ci/main", "build 9 failed")]);
    let asked = watch.line_with("confirm? #");
    assert!(asked.contains("(answer within "), "{asked}");
    let id = asked
        .split('#')
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    assert!(sb.cli(&["confirm", &id, "yes"]).status.success());
    send_messages(sb.home.path(), &[("mark", "after the answer")]);
    let lines = watch.lines_up_to("after the answer");
    let approved: Vec<_> = lines.iter().filter(|l| l.contains("approved")).collect();
    assert_eq!(
        approved,
        [&format!(
            "  approved #{id} [ask] via cli by {}",
            os_user().1
        )],
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("  work #{id} [ask] seq "))
                && l.contains(", queued for the agent: look at build 9 failed")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("answer within")),
        "{lines:#?}"
    );
}

/// `start` says what it did once: no INFO log line repeating it on stderr.
#[test]
fn start_says_what_it_did_once() {
    let home = tempfile::tempdir().unwrap();
    let _daemon = DaemonGuard(home.path().to_path_buf());
    let out = Command::new(bin())
        .args([
            "--home",
            home.path().to_str().unwrap(),
            "start",
            "--no-listen",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("switchboard daemon started (pid "),
        "{}",
        stdout(&out)
    );
    assert_eq!(stderr(&out), "", "nothing on stderr");
    assert!(cli_in(home.path(), &["stop"]).status.success());
}

/// `install copilot --hooks` prints its lines without a run of spaces in them.
#[test]
fn install_copilot_hooks_prints_no_run_of_spaces() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcp-config.json");
    let out = cli_in(
        &dir.path().join("home"),
        &[
            "install",
            "copilot",
            "--hooks",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("agentStop → `hook stop`"), "{text}");
    for line in text.lines() {
        assert!(!line.contains("  "), "a run of spaces: {line:?}");
    }
}

/// `hook stop` given something that is not JSON says so (it said "the event has no session
/// id"), and lets the stop through.
#[test]
fn hook_stop_says_when_its_input_is_not_json() {
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin())
        .args(["--home", home.path().to_str().unwrap(), "hook", "stop"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"not json\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(stdout(&out), "", "the stop goes through");
    let err = stderr(&out);
    assert!(
        err.starts_with("switchboard hook stop: the host's event is not JSON: ")
            && err.trim_end().ends_with("; the stop goes through"),
        "{err}"
    );
}
