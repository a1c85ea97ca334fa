//! Stop hooks: `switchboard hook stop` run by the real hosts (npm `@github/copilot` 1.0.102 and
//! `@anthropic-ai/claude-code` 2.1.330), offline against the scripted model double, with only
//! what `install --hooks` wrote: the model's side says what the agent saw, turn by turn, and
//! `actions.jsonl` says what became of the work.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use super::exec::{claude_env, copilot_env, hosts};
use super::model_double::{ModelDouble, Script};
use super::util::*;

const RULES: &str = r#"{"rules": [
  {"name": "later", "channel": "work/*", "mode": "auto", "prompt": "Do the task {{content}}", "tools": ["view"]}
]}"#;

/// How long one host run may take.
const HOST_LIMIT: Duration = Duration::from_secs(180);

/// Which host.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Host {
    Copilot,
    Claude,
}

impl Host {
    fn name(self) -> &'static str {
        match self {
            Host::Copilot => "copilot",
            Host::Claude => "claude",
        }
    }

    fn binary(self, modules: &Path) -> PathBuf {
        modules.join(".bin").join(self.name())
    }

    /// The model route the host posts its turns to.
    fn route(self) -> &'static str {
        match self {
            Host::Copilot => "/chat/completions",
            Host::Claude => "/messages",
        }
    }
}

/// A daemon on a fresh home with `RULES`.
fn daemon() -> Switchboard {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULES);
    sb.spawn();
    sb
}

/// One host with its own HOME, project directory and model double, on a switchboard home.
struct Rig {
    host: Host,
    modules: PathBuf,
    user_home: tempfile::TempDir,
    project: tempfile::TempDir,
    double: ModelDouble,
    env: Value,
    home: PathBuf,
}

impl Rig {
    fn new(host: Host, modules: &Path, script: Script, home: &Path) -> Rig {
        let user_home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let double = ModelDouble::start(script);
        let env = match host {
            Host::Copilot => copilot_env(modules, user_home.path(), &double),
            Host::Claude => claude_env(modules, user_home.path(), &double),
        };
        let rig = Rig {
            host,
            modules: modules.to_path_buf(),
            user_home,
            project,
            double,
            env,
            home: home.to_path_buf(),
        };
        rig.warm();
        rig
    }

    /// Copilot CLI unpacks itself on its first start in a fresh HOME: once, without a limit.
    fn warm(&self) {
        let mut warm = Command::new(self.host.binary(&self.modules));
        warm.arg("--version").env_clear();
        for (k, v) in self.env.as_object().unwrap() {
            warm.env(k, v.as_str().unwrap());
        }
        let run = run_limited(&mut warm, Duration::from_secs(120));
        assert!(
            run.status.is_some_and(|s| s.success()),
            "{} --version: {}\n{}",
            self.host.name(),
            run.describe(),
            run.stderr
        );
    }

    fn home(&self) -> &Path {
        &self.home
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.home.join("test-server.log")).unwrap_or_default()
    }

    /// Where `install` writes the MCP entry: Copilot's user config, Claude Code's project
    /// `.mcp.json`.
    fn mcp_config(&self) -> PathBuf {
        match self.host {
            Host::Copilot => self.user_home.path().join(".copilot/mcp-config.json"),
            Host::Claude => self.project.path().join(".mcp.json"),
        }
    }

    /// `switchboard install HOST --hooks`; without `mcp`, the MCP entry it also wrote is
    /// removed again, so that the host has the hooks and no switchboard server.
    fn install(&self, mcp: bool) {
        let config = self.mcp_config();
        let out = cli_in(
            &self.home,
            &[
                "install",
                self.host.name(),
                "--hooks",
                "--config",
                config.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        if !mcp {
            std::fs::remove_file(&config).unwrap();
        }
    }

    /// Runs the host in print mode on `prompt` to its end.
    fn run(&self, prompt: &str, extra: &[&str]) -> Run {
        let mut cmd = Command::new(self.host.binary(&self.modules));
        match self.host {
            Host::Copilot => cmd.args([
                "-p",
                prompt,
                "-s",
                "--no-ask-user",
                "--output-format",
                "json",
            ]),
            Host::Claude => cmd.args(["-p", prompt, "--output-format", "stream-json", "--verbose"]),
        };
        cmd.args(extra).current_dir(self.project.path()).env_clear();
        for (k, v) in self.env.as_object().unwrap() {
            cmd.env(k, v.as_str().unwrap());
        }
        let run = run_limited(&mut cmd, HOST_LIMIT);
        assert!(
            run.status.is_some_and(|s| s.success()),
            "{} -p: {}\n{}\n{}\n--- model double saw ---\n{}\n--- switchboard log ---\n{}",
            self.host.name(),
            run.describe(),
            run.stdout,
            run.stderr,
            self.double.describe(),
            self.log()
        );
        run
    }

    /// The model turns the host asked for, in order: the conversation each one carried, as
    /// JSON text.
    fn turns(&self) -> Vec<String> {
        self.double
            .posts()
            .into_iter()
            .filter(|p| {
                p.path
                    .split('?')
                    .next()
                    .unwrap_or_default()
                    .ends_with(self.host.route())
            })
            .map(|p| p.body["messages"].to_string())
            .collect()
    }

    fn report(&self, run: &Run) -> String {
        format!(
            "--- turns ---\n{}\n--- host stdout ---\n{}\n--- host stderr ---\n{}\n--- switchboard log ---\n{}",
            self.turns().join("\n"),
            run.stdout,
            run.stderr,
            self.log()
        )
    }
}

fn script() -> Script {
    Script {
        model: "double-model".into(),
        tool: None,
        tool_when: None,
        answer: "All done here.".into(),
        reject: false,
    }
}

/// The id of the action the message with seq `seq` caused.
fn action_of(home: &Path, seq: u64) -> u64 {
    eventually(Duration::from_secs(10), "the action is created", || {
        action_records(home)
            .into_iter()
            .find(|r| r["action"]["seq"] == seq)
            .and_then(|r| r["id"].as_u64())
    })
}

/// An auto item queued before the host starts reaches the model as the turn after its first
/// answer, once; the action ends `delivered` to the hook's consumer.
fn queued_work_is_the_next_turn(host: Host) {
    let Some(modules) = hosts() else { return };
    let sb = daemon();
    let rig = Rig::new(host, &modules, script(), sb.home.path());
    rig.install(false);
    let seqs = send_messages(rig.home(), &[("work/a", "task-7f3a")]);
    let id = action_of(rig.home(), seqs[0]);
    let run = rig.run("Say hello.", &[]);
    let report = rig.report(&run);
    let turns = rig.turns();
    assert_eq!(turns.len(), 2, "one turn, then the work\n{report}");
    assert!(turns[0].contains("Say hello."), "{report}");
    assert!(!turns[0].contains("task-7f3a"), "{report}");
    assert!(turns[1].contains("Do the task task-7f3a"), "{report}");
    assert!(turns[1].contains("untrusted-message"), "{report}");
    assert!(turns[1].contains("`view`"), "{report}");
    let records: Vec<Value> = action_records(rig.home())
        .into_iter()
        .filter(|r| r["id"] == id && r["state"].is_string())
        .collect();
    let states: Vec<&str> = records.iter().filter_map(|r| r["state"].as_str()).collect();
    assert_eq!(
        states,
        ["queued", "claimed", "delivered"],
        "{records:?}\n{report}"
    );
    let consumer = records[2]["consumer"].as_str().unwrap();
    assert!(
        consumer.starts_with(&format!("{}-hook:", host.name())),
        "{consumer}"
    );
    let stats = control(rig.home(), json!({"op": "stats"}));
    assert_eq!(
        stats["result"]["hooks"]["stops"][host.name()]["delivered"],
        1,
        "{stats}"
    );
    // The `metrics` operation answers the families as data; `/metrics` encodes them.
    let metrics = control(rig.home(), json!({"op": "metrics"}));
    let stops = metrics["result"]["families"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "switchboard_hook_stops_total")
        .unwrap_or_else(|| panic!("no hook stops family: {metrics}"));
    assert!(
        stops["samples"].as_array().unwrap().contains(&json!({
            "labels": [["host", host.name()], ["outcome", "delivered"]],
            "value": 1.0
        })),
        "{metrics}"
    );
}

/// With nothing queued and off duty, the host stops after its one turn.
fn nothing_queued_stops_after_one_turn(host: Host) {
    let Some(modules) = hosts() else { return };
    let sb = daemon();
    let rig = Rig::new(host, &modules, script(), sb.home.path());
    rig.install(false);
    let run = rig.run("Say hello.", &[]);
    let report = rig.report(&run);
    assert_eq!(rig.turns().len(), 1, "{report}");
    let stats = control(rig.home(), json!({"op": "stats"}));
    assert_eq!(
        stats["result"]["hooks"]["stops"][host.name()]["through"],
        1,
        "the hook ran and let the stop through: {stats}\n{report}"
    );
}

#[test]
fn copilot_cli_stop_hook_hands_queued_work_as_the_next_turn() {
    queued_work_is_the_next_turn(Host::Copilot);
}

#[test]
fn claude_code_stop_hook_hands_queued_work_as_the_next_turn() {
    queued_work_is_the_next_turn(Host::Claude);
}

#[test]
fn copilot_cli_with_nothing_queued_stops_after_one_turn() {
    nothing_queued_stops_after_one_turn(Host::Copilot);
}

#[test]
fn claude_code_with_nothing_queued_stops_after_one_turn() {
    nothing_queued_stops_after_one_turn(Host::Claude);
}

/// Whether a model request carries a tool's result (OpenAI `role: tool`, Anthropic
/// `tool_result`): the agent called the tool, and it answered.
fn carries_tool_result(body: &Value) -> bool {
    body["messages"].as_array().into_iter().flatten().any(|m| {
        m["role"] == "tool"
            || m["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
    })
}

/// The wait tool as each host names a switchboard tool.
fn wait_tool(host: Host) -> &'static str {
    match host {
        Host::Copilot => "switchboard-wait_for_inbound_message",
        Host::Claude => "mcp__switchboard__wait_for_inbound_message",
    }
}

/// On duty, with the MCP server loaded too: a stop with nothing queued is told to wait, and
/// the agent calls the wait tool instead of stopping; once duty is off, the next stop goes
/// through, below the hosts' cap of 8 blocks.
fn on_duty_the_agent_waits_then_stops_once_off(host: Host) {
    let Some(modules) = hosts() else { return };
    let sb = daemon();
    let script = Script {
        tool: Some((wait_tool(host).into(), json!({"timeout_s": 1}))),
        tool_when: Some("you are on duty".into()),
        ..script()
    };
    let rig = Rig::new(host, &modules, script, sb.home.path());
    rig.install(true);
    let on = sb.cli(&["duty", "on", "--for", "1h"]);
    assert!(on.status.success(), "{}", stderr(&on));
    assert!(stdout(&on).starts_with("on duty until"), "{}", stdout(&on));
    // Duty goes off once the agent has called the wait tool: its result is in a turn.
    let watcher = {
        let home = sb.home.path().to_path_buf();
        let posts = rig.double.seen_handle();
        std::thread::spawn(move || {
            eventually(HOST_LIMIT, "the agent calls the wait tool", || {
                posts
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|p| carries_tool_result(&p.body))
                    .then_some(())
            });
            let off = cli_in(&home, &["duty", "off"]);
            assert!(off.status.success(), "{}", stderr(&off));
        })
    };
    let extra: Vec<String> = match host {
        Host::Copilot => vec!["--allow-all-tools".into()],
        Host::Claude => vec![
            "--mcp-config".into(),
            rig.mcp_config().display().to_string(),
            format!("--allowedTools={}", wait_tool(host)),
        ],
    };
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let run = rig.run("Say hello.", &extra);
    watcher.join().unwrap();
    let report = rig.report(&run);
    let turns = rig.turns();
    assert!(
        turns.iter().any(|t| t.contains("you are on duty")),
        "the agent was told to wait\n{report}"
    );
    let waited = rig
        .double
        .posts()
        .iter()
        .any(|p| carries_tool_result(&p.body));
    assert!(waited, "the agent called the wait tool\n{report}");
    let r = control(rig.home(), json!({"op": "stats"}));
    let stops = &r["result"]["hooks"]["stops"][host.name()];
    let duty = stops["duty"].as_u64().unwrap_or(0);
    assert!((1..8).contains(&duty), "{stops}\n{report}");
    assert_eq!(
        stops["through"], 1,
        "off duty, the stop went through: {stops}\n{report}"
    );
    assert!(stops["capped"].is_null(), "{stops}\n{report}");
    assert!(
        r["result"]["delivery"]["counters"]["claimed"] == 0,
        "nothing was queued: {r}"
    );
}

#[test]
fn copilot_cli_on_duty_calls_the_wait_tool_and_stops_once_off_duty() {
    on_duty_the_agent_waits_then_stops_once_off(Host::Copilot);
}

#[test]
fn claude_code_on_duty_calls_the_wait_tool_and_stops_once_off_duty() {
    on_duty_the_agent_waits_then_stops_once_off(Host::Claude);
}

/// On duty with an agent that never waits: the hook blocks 7 stops in a row and lets the 8th
/// through, so the host's own cap of 8 never cuts in; the host's `stop_hook_active` is read in
/// its own spelling (were it not, every stop would start a fresh count and never be let through).
fn on_duty_blocks_stop_below_the_hosts_cap(host: Host) {
    let Some(modules) = hosts() else { return };
    let sb = daemon();
    let rig = Rig::new(host, &modules, script(), sb.home.path());
    rig.install(false);
    let on = sb.cli(&["duty", "on"]);
    assert!(on.status.success(), "{}", stderr(&on));
    let run = rig.run("Say hello.", &[]);
    let report = rig.report(&run);
    let r = control(rig.home(), json!({"op": "stats"}));
    let stops = &r["result"]["hooks"]["stops"][host.name()];
    assert_eq!(stops["duty"], 7, "{stops}\n{report}");
    assert_eq!(stops["capped"], 1, "{stops}\n{report}");
    assert_eq!(rig.turns().len(), 8, "the first turn and 7 more\n{report}");
}

#[test]
fn copilot_cli_on_duty_is_let_through_below_the_cap() {
    on_duty_blocks_stop_below_the_hosts_cap(Host::Copilot);
}

#[test]
fn claude_code_on_duty_is_let_through_below_the_cap() {
    on_duty_blocks_stop_below_the_hosts_cap(Host::Claude);
}

/// Two hosts' windows on one home, both with the stop hook: each queued item is handed to
/// exactly one of them.
#[test]
fn two_hosts_on_one_home_each_item_reaches_exactly_one() {
    let Some(modules) = hosts() else { return };
    let sb = daemon();
    let copilot = Rig::new(Host::Copilot, &modules, script(), sb.home.path());
    let claude = Rig::new(Host::Claude, &modules, script(), sb.home.path());
    copilot.install(false);
    claude.install(false);
    let tasks = ["task-a1", "task-b2", "task-c3"];
    let seqs = send_messages(sb.home.path(), &tasks.map(|t| ("work/x", t)));
    let ids: Vec<u64> = seqs.iter().map(|&s| action_of(sb.home.path(), s)).collect();
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| copilot.run("Say hello.", &[]));
        let b = scope.spawn(|| claude.run("Say hello.", &[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    let report = format!("{}\n{}", copilot.report(&a), claude.report(&b));
    // From the models' side: each task was asked for in exactly one host's conversation.
    for task in tasks {
        let prompt = format!("Do the task {task}");
        let holders: Vec<&str> = [(&copilot, "copilot"), (&claude, "claude")]
            .iter()
            .filter(|(rig, _)| rig.turns().iter().any(|t| t.contains(&prompt)))
            .map(|(_, name)| *name)
            .collect();
        assert_eq!(holders.len(), 1, "{task}: {holders:?}\n{report}");
    }
    // From the journal's side: each claimed once, delivered once.
    let records = action_records(sb.home.path());
    for id in ids {
        let states: Vec<&str> = records
            .iter()
            .filter(|r| r["id"] == id)
            .filter_map(|r| r["state"].as_str())
            .collect();
        assert_eq!(
            states,
            ["queued", "claimed", "delivered"],
            "#{id}\n{report}"
        );
    }
}

/// A hook that dies after its claim and before writing its decision: the claim is released
/// with its connection, and the work is queued again for the next one.
#[test]
fn a_hook_gone_before_its_decision_releases_the_claim() {
    let sb = daemon();
    let home = sb.home.path();
    let seqs = send_messages(home, &[("work/a", "task-9z")]);
    let id = action_of(home, seqs[0]);
    // The call, and then the connection drops, as a killed hook's would.
    let r = control(
        home,
        json!({"op": "hook_stop", "host": "copilot", "session_id": "gone", "continued": false}),
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["result"]["decision"], "block", "{r}");
    assert_eq!(r["result"]["claim"]["action_id"], id, "{r}");
    let released = eventually(Duration::from_secs(10), "the claim is released", || {
        action_records(home)
            .into_iter()
            .find(|r| r["id"] == id && r["state"] == "released")
    });
    assert_eq!(released["consumer"], "copilot-hook:gone");
    // The next stop gets it, and says it was delivered.
    let out = run_hook(
        home,
        &[],
        r#"{"sessionId": "next", "stop_hook_active": false}"#,
    );
    assert!(out.status.success());
    let decision: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(decision["decision"], "block");
    assert!(
        decision["reason"]
            .as_str()
            .unwrap()
            .contains("Do the task task-9z"),
        "{decision}"
    );
    let delivered = eventually(Duration::from_secs(10), "delivered", || {
        action_records(home)
            .into_iter()
            .find(|r| r["id"] == id && r["state"] == "delivered")
    });
    assert_eq!(delivered["consumer"], "copilot-hook:next");
}

/// Without a daemon the hook prints nothing and exits 0 at once: a stop is never blocked
/// because switchboard is down.
#[test]
fn without_a_daemon_the_hook_lets_the_stop_through_silently() {
    let home = tempfile::tempdir().unwrap();
    let out = run_hook(
        home.path(),
        &["--host", "claude"],
        r#"{"session_id": "s", "hook_event_name": "Stop", "stop_hook_active": false}"#,
    );
    assert!(out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !home.path().join("control.sock").exists(),
        "the hook starts no daemon"
    );
}

/// Runs `switchboard --home HOME hook stop ARGS` with `event` on its stdin, to its end (5 s at
/// most).
fn run_hook(home: &Path, args: &[&str], event: &str) -> std::process::Output {
    use std::io::Write;
    let mut hook = Command::new(bin())
        .args(["--home", home.to_str().unwrap(), "hook", "stop"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    hook.stdin
        .take()
        .unwrap()
        .write_all(event.as_bytes())
        .unwrap();
    wait_exit(&mut hook, Duration::from_secs(5));
    hook.wait_with_output().unwrap()
}

/// `install copilot|claude --hooks`: the stop hook with `--home`, shown by `--dry-run` (which
/// writes nothing), and a second run that changes nothing says so.
#[test]
fn install_hooks_writes_the_stop_hook_with_the_home_and_is_idempotent() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home_arg = home.path().to_str().unwrap();
    let copilot_config = dir.path().join("copilot/mcp-config.json");
    let claude_config = dir.path().join("project/.mcp.json");
    let install = |host: &str, config: &Path, extra: &[&str]| {
        let mut args = vec![
            "--home",
            home_arg,
            "install",
            host,
            "--hooks",
            "--config",
            config.to_str().unwrap(),
        ];
        args.extend(extra);
        let out = Command::new(bin()).args(&args).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    // A dry run shows the hooks file and writes nothing.
    let dry = install("copilot", &copilot_config, &["--dry-run"]);
    assert!(
        dry.contains("hooks/switchboard.json (dry run, nothing written"),
        "{dry}"
    );
    assert!(dry.contains("agentStop"), "{dry}");
    assert!(!dir.path().join("copilot").exists(), "{dry}");

    let first = install("copilot", &copilot_config, &[]);
    assert!(first.contains("added Copilot hooks"), "{first}");
    let hooks: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("copilot/hooks/switchboard.json")).unwrap(),
    )
    .unwrap();
    let stop = hooks["hooks"]["agentStop"][0]["bash"].as_str().unwrap();
    assert!(
        stop.ends_with(&format!("--home {home_arg} hook stop --host copilot")),
        "{stop}"
    );
    let again = install("copilot", &copilot_config, &[]);
    assert!(
        again.contains("already up to date: Copilot hooks"),
        "{again}"
    );

    // Claude Code: the Stop hook beside what the settings already hold.
    let settings = dir.path().join("project/.claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(&settings, r#"{"permissions": {"allow": ["Read"]}}"#).unwrap();
    let dry = install("claude", &claude_config, &["--dry-run"]);
    for shown in [
        "settings.json (dry run, nothing written",
        "\"Stop\"",
        "\"PostToolUse\"",
        "hook post-tool-use",
    ] {
        assert!(dry.contains(shown), "{shown}: {dry}");
    }
    assert_eq!(
        std::fs::read_to_string(&settings).unwrap(),
        r#"{"permissions": {"allow": ["Read"]}}"#
    );
    let first = install("claude", &claude_config, &[]);
    assert!(first.contains("added `switchboard` to"), "{first}");
    assert!(first.contains("added the Claude Code hooks"), "{first}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(doc["permissions"]["allow"][0], "Read");
    let command = doc["hooks"]["Stop"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap();
    assert!(
        command.ends_with(&format!("--home {home_arg} hook stop --host claude")),
        "{command}"
    );
    // The permission relay's post-tool-use hook, for every tool.
    assert!(doc["hooks"].get("PostToolUseFailure").is_none(), "{doc}");
    let group = &doc["hooks"]["PostToolUse"][0];
    assert_eq!(group["matcher"], "*", "{doc}");
    let command = group["hooks"][0]["command"].as_str().unwrap();
    assert!(
        command.ends_with(&format!("--home {home_arg} hook post-tool-use")),
        "{command}"
    );
    let before = std::fs::read_to_string(&settings).unwrap();
    let again = install("claude", &claude_config, &[]);
    assert!(
        again.contains("already up to date: the Claude Code hooks"),
        "{again}"
    );
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), before);
    // `--settings` names another file.
    let other = dir.path().join("elsewhere.json");
    install(
        "claude",
        &claude_config,
        &["--settings", other.to_str().unwrap()],
    );
    assert!(
        std::fs::read_to_string(&other)
            .unwrap()
            .contains("hook stop --host claude")
    );
}

/// Claude Code 2.1.330 probes `server/discover` first (it speaks 2026-07-28 too); switchboard
/// keeps it on 2025-11-25, the era in which Claude Code takes `notifications/claude/channel`
/// (on a 2026-07-28 connection its channel gate skips a server: "no unsolicited notification
/// path"). Its own debug log says which era it negotiated, and a nudge that comes while the
/// agent waits reaches it on that session.
#[test]
fn claude_code_falls_back_to_2025_11_25_where_its_channel_push_lives() {
    let Some(modules) = hosts() else { return };
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "nudge", "channel": "alerts/*"}]}"#,
    );
    sb.spawn();
    let script = Script {
        tool: Some((wait_tool(Host::Claude).into(), json!({"timeout_s": 20}))),
        ..script()
    };
    let rig = Rig::new(Host::Claude, &modules, script, sb.home.path());
    rig.install(true);
    // The nudge comes while the agent's wait is in flight.
    let sender = {
        let home = sb.home.path().to_path_buf();
        std::thread::spawn(move || {
            eventually(HOST_LIMIT, "the agent's wait is in flight", || {
                let metrics = control(&home, json!({"op": "metrics"}));
                let families = metrics["result"]["families"].as_array()?.clone();
                families
                    .iter()
                    .filter(|f| {
                        f["name"]
                            .as_str()
                            .is_some_and(|n| n.contains("wait_calls_in_flight"))
                    })
                    .any(|f| f["samples"][0]["value"].as_f64() >= Some(1.0))
                    .then_some(())
            });
            send_messages(&home, &[("alerts/db", "db down 7c1e")]);
        })
    };
    let debug = rig.project.path().join("claude-debug.txt");
    let run = rig.run(
        "Say hello.",
        &[
            "--mcp-config",
            &rig.mcp_config().display().to_string(),
            &format!("--allowedTools={}", wait_tool(Host::Claude)),
            "--dangerously-load-development-channels",
            "server:switchboard",
            "--debug-file",
            &debug.display().to_string(),
        ],
    );
    sender.join().unwrap();
    let report = rig.report(&run);
    let debug = std::fs::read_to_string(&debug).unwrap_or_default();
    let established = debug
        .lines()
        .find(|l| l.contains(r#"MCP server "switchboard": Connection established"#))
        .unwrap_or_else(|| panic!("switchboard never connected\n{debug}\n{report}"));
    assert!(
        established.contains(r#""protocolEra":"legacy""#)
            && established.contains(r#""negotiatedProtocolVersion":"2025-11-25""#),
        "{established}\n{report}"
    );
    // switchboard's side of the same session (its stderr, which Claude Code logs).
    assert!(
        debug
            .lines()
            .any(|l| l.contains("client=claude-code") && l.contains("protocol=2025-11-25")),
        "{debug}"
    );
    assert!(
        rig.turns().iter().any(|t| t.contains("db down 7c1e")),
        "{report}"
    );
}
