//! Exec delivery: auto prompts of `"delivery": "exec"` rules run in a fresh headless host
//! (Copilot CLI or Claude Code) in the daemon, with the rule's tool whitelist enforced by the
//! host itself.
//!
//! [`Exec`] is the supervisor. It owns the concurrency limit (`exec.maxConcurrent` slots), the
//! host's readiness (a `--version` canary with a 5 s limit and an auth preflight, run before the
//! first run and again after a failure) and the cancel handles of the runs in flight. The
//! lifecycle owns the queue and every transition (`queued` → `running` → `succeeded | failed
//! | cancelled`, journalled); [`Exec::spawn`] takes work from it one slot at a time.
//!
//! - [`process`]: one host process — spawn, the prompt on its stdin, line reading, timeouts,
//!   SIGTERM → SIGKILL.
//! - [`copilot`], [`claude`]: each host's command line and its output normaliser.
//! - [`env`]: the host's environment, an allow-list that never holds switchboard's secrets.
//! - [`event`]: the normalised events and the run report kept in `actions.jsonl`.
//!
//! The prompt carries message text from outside, so it never goes on the host's command line,
//! which every local user can read in `/proc/PID/cmdline`: both hosts read it from stdin.

pub mod claude;
pub mod copilot;
pub mod env;
pub mod event;
pub mod process;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::event::{ExecEvent, ExecFailure, ExecReport};
use self::process::{Launch, Limits};
use crate::actions::{ActionId, ActionState, Item};
use crate::control::Local;
use crate::control::ops::{ExecFinish, ExecNext};

/// Which headless host runs exec delivery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecKind {
    /// GitHub Copilot CLI (`copilot`).
    #[default]
    CopilotCli,
    /// Claude Code (`claude`).
    ClaudeCode,
}

impl ExecKind {
    /// The name used in `switchboard.json`, records and stats.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecKind::CopilotCli => "copilot-cli",
            ExecKind::ClaudeCode => "claude-code",
        }
    }

    /// The command looked up on `PATH` when `exec.command` is not set.
    pub fn default_command(self) -> &'static str {
        match self {
            ExecKind::CopilotCli => "copilot",
            ExecKind::ClaudeCode => "claude",
        }
    }
}

/// Exec delivery settings (`exec`).
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ExecSettings {
    /// `copilot-cli` (default) or `claude-code`.
    pub kind: ExecKind,
    /// The host binary; default `copilot` / `claude` on `PATH`.
    pub command: Option<String>,
    /// The model to ask the host for; default: the host's own choice.
    pub model: Option<String>,
    /// Working directory of runs; default: the daemon's.
    pub cwd: Option<PathBuf>,
    /// Runs at once (default 2); more exec work waits in its queue.
    pub max_concurrent: usize,
    /// The longest one run may take (default `"10m"`); then it is stopped as `timeout`.
    #[serde(with = "crate::duration::text")]
    pub turn_timeout: Duration,
    /// The longest a run may print nothing (default `"2m"`); then it is stopped as `stalled`.
    #[serde(with = "crate::duration::text")]
    pub stall_timeout: Duration,
    /// Extra arguments for the host, after switchboard's own.
    pub args: Vec<String>,
    /// Environment for the host (e.g. a provider setting), over the variables it gets from
    /// the daemon's environment ([`env`]).
    pub env: std::collections::BTreeMap<String, String>,
}

impl Default for ExecSettings {
    fn default() -> Self {
        ExecSettings {
            kind: ExecKind::CopilotCli,
            command: None,
            model: None,
            cwd: None,
            max_concurrent: 2,
            turn_timeout: Duration::from_secs(600),
            stall_timeout: Duration::from_secs(120),
            args: Vec::new(),
            env: Default::default(),
        }
    }
}

/// How long the `--version` canary may take.
const CANARY_TIMEOUT: Duration = Duration::from_secs(5);

/// Turns one JSON line of a host's output into normalised events.
pub trait Normaliser: Send {
    /// The events in `line` (often none: most lines are bookkeeping).
    fn line(&mut self, line: &serde_json::Value) -> Vec<ExecEvent>;
}

/// The host as configured: what the command-line builders need.
#[derive(Clone, Debug, Default)]
pub struct HostSpec {
    /// `--model`, when set.
    pub model: Option<String>,
    /// Extra arguments, after switchboard's own.
    pub args: Vec<String>,
}

/// What `status`, `stats` and `inbox_stats` show of exec delivery.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ExecStats {
    /// `copilot-cli` or `claude-code`.
    pub host: String,
    /// The command run.
    pub command: String,
    /// The host's `--version`, once the canary has run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `not run yet` (no exec work so far), `ok`, or `KIND: REASON` of the last failed check.
    pub preflight: String,
    /// Runs allowed at once.
    pub max_concurrent: usize,
    /// Runs in flight now.
    pub running: usize,
    /// Exec work waiting for a slot.
    pub queued: usize,
    /// Runs that succeeded since start.
    pub succeeded: u64,
    /// Runs that did not succeed since start, by kind.
    pub failed: BTreeMap<ExecFailure, u64>,
}

#[derive(Default)]
struct Readiness {
    version: Option<String>,
    /// `None` before the first check; then the last check's result.
    checked: Option<Result<(), (ExecFailure, String)>>,
}

/// The exec supervisor (one per daemon).
pub struct Exec {
    settings: ExecSettings,
    slots: Arc<Semaphore>,
    ready: tokio::sync::Mutex<()>,
    readiness: Mutex<Readiness>,
    runs: Mutex<HashMap<ActionId, CancellationToken>>,
}

impl Exec {
    /// A supervisor for `settings`; nothing runs until [`Exec::spawn`].
    pub fn new(settings: ExecSettings) -> Exec {
        let slots = Arc::new(Semaphore::new(settings.max_concurrent.max(1)));
        Exec {
            settings,
            slots,
            ready: tokio::sync::Mutex::new(()),
            readiness: Mutex::default(),
            runs: Mutex::default(),
        }
    }

    /// The command run: `exec.command`, else the host's default name on `PATH`.
    pub fn command(&self) -> String {
        self.settings
            .command
            .clone()
            .unwrap_or_else(|| self.settings.kind.default_command().to_string())
    }

    /// Takes exec work through `api` whenever a slot is free and runs it on `tasks`, until the
    /// daemon shuts down; runs in flight are then cancelled (recorded as `cancelled`).
    pub fn spawn(self: &Arc<Self>, api: Local, tasks: TaskTracker) {
        let shutdown = api.shutdown().clone();
        let exec = self.clone();
        let runs = tasks.clone();
        tasks.spawn(async move {
            loop {
                let permit = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    permit = exec.slots.clone().acquire_owned() => match permit {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                };
                let cancel = shutdown.child_token();
                let next = api.call_until(ExecNext {}, shutdown.clone()).await;
                let Ok(Some(item)) = next else {
                    break;
                };
                exec.runs
                    .lock()
                    .unwrap()
                    .insert(item.action_id, cancel.clone());
                let exec = exec.clone();
                let api = api.clone();
                let shutdown = shutdown.clone();
                let tasks = runs.clone();
                runs.spawn(async move {
                    let id = item.action_id;
                    let (state, reason, report) =
                        exec.run_one(&tasks, &item, &cancel, &shutdown).await;
                    exec.runs.lock().unwrap().remove(&id);
                    let _ = api
                        .call(ExecFinish {
                            id,
                            state,
                            reason,
                            report,
                        })
                        .await;
                    drop(permit);
                });
            }
        });
    }

    /// Cancels the run of action `id`; false when it is not running.
    pub fn cancel(&self, id: ActionId) -> bool {
        match self.runs.lock().unwrap().get(&id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// The numbers `stats` shows, with the lifecycle's queue and counters.
    pub fn stats(&self, lifecycle: &crate::actions::lifecycle::LifecycleStats) -> ExecStats {
        let r = self.readiness.lock().unwrap();
        let c = &lifecycle.counters;
        ExecStats {
            host: self.settings.kind.as_str().to_string(),
            command: self.command(),
            version: r.version.clone(),
            preflight: match &r.checked {
                None => "not run yet".into(),
                Some(Ok(())) => "ok".into(),
                Some(Err((kind, reason))) => format!("{kind}: {reason}"),
            },
            max_concurrent: self.settings.max_concurrent.max(1),
            running: lifecycle.exec_running,
            queued: lifecycle.exec_queued,
            succeeded: c.succeeded,
            failed: c.exec_failures.clone(),
        }
    }

    /// Runs one item: readiness, then the host (its helper tasks on `tasks`); the final state,
    /// reason and report.
    async fn run_one(
        &self,
        tasks: &TaskTracker,
        item: &Item,
        cancel: &CancellationToken,
        shutdown: &CancellationToken,
    ) -> (ActionState, Option<String>, ExecReport) {
        let host = self.settings.kind.as_str().to_string();
        // A missing directory would fail the spawn with "not found", as a missing binary does.
        let ready = match &self.settings.cwd {
            Some(cwd) if !cwd.is_dir() => Err((
                ExecFailure::Failed,
                format!(
                    "exec: `exec.cwd` \"{}\" is not a directory; create it or change `exec.cwd`",
                    cwd.display()
                ),
            )),
            _ => self.ensure_ready().await,
        };
        if let Err((kind, reason)) = ready {
            tracing::warn!(action_id = item.action_id, kind = %kind, "{reason}");
            let report = ExecReport {
                host,
                kind: Some(kind),
                ..ExecReport::default()
            };
            return (ActionState::Failed, Some(reason), report);
        }
        let spec = HostSpec {
            model: self.settings.model.clone(),
            args: self.settings.args.clone(),
        };
        let (args, mut normaliser): (Vec<String>, Box<dyn Normaliser>) = match self.settings.kind {
            ExecKind::CopilotCli => (
                copilot::command(&spec, &item.tools),
                Box::new(copilot::CopilotEvents),
            ),
            ExecKind::ClaudeCode => (
                claude::command(&spec, &item.tools),
                Box::<claude::ClaudeEvents>::default(),
            ),
        };
        let mut launch = self.launch(args);
        launch.stdin = Some(item.prompt.clone());
        let limits = Limits {
            turn_timeout: self.settings.turn_timeout,
            stall_timeout: self.settings.stall_timeout,
            kill_grace: process::KILL_GRACE,
        };
        let id = item.action_id;
        tracing::info!(action_id = id, rule = %item.rule, host = %host, "exec: run started");
        let ended = process::run(tasks, &launch, normaliser.as_mut(), limits, cancel, |e| {
            tracing::debug!(action_id = id, event = ?e, "exec: host event");
        })
        .await;
        let mut report = ended.report;
        report.host = host;
        match ended.failure {
            None => {
                tracing::info!(
                    action_id = id,
                    duration_ms = report.duration_ms,
                    tool_calls = report.tool_calls.len(),
                    "exec: run succeeded"
                );
                (ActionState::Succeeded, None, report)
            }
            Some((kind, reason)) => {
                let reason = if kind == ExecFailure::Cancelled && shutdown.is_cancelled() {
                    "switchboard stopped while it ran".to_string()
                } else {
                    reason
                };
                report.kind = Some(kind);
                tracing::warn!(action_id = id, kind = %kind, "exec: run did not succeed: {reason}");
                if kind == ExecFailure::AgentNotFound || kind == ExecFailure::AuthMissing {
                    // Check again before the next run: the host may have gone or logged out.
                    self.readiness.lock().unwrap().checked = Some(Err((kind, reason.clone())));
                }
                let state = if kind == ExecFailure::Cancelled {
                    ActionState::Cancelled
                } else {
                    ActionState::Failed
                };
                (state, Some(reason), report)
            }
        }
    }

    /// The host with `args`, its environment allow-listed ([`env::for_host`]), no stdin.
    fn launch(&self, args: Vec<String>) -> Launch {
        let mut extra: Vec<(String, String)> = Vec::new();
        if self.settings.kind == ExecKind::ClaudeCode {
            // Without it Claude Code also offers a tool-search placeholder next to `--tools`.
            extra.push(("ENABLE_TOOL_SEARCH".into(), "false".into()));
        }
        extra.extend(
            self.settings
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        Launch {
            program: self.command(),
            args,
            env: env::for_host(self.settings.kind, std::env::vars_os(), &extra),
            cwd: self.settings.cwd.clone(),
            stdin: None,
        }
    }

    /// The canary (`--version`, 5 s) and the auth preflight, once until one fails.
    async fn ensure_ready(&self) -> Result<(), (ExecFailure, String)> {
        let _one_at_a_time = self.ready.lock().await;
        if let Some(Ok(())) = self.readiness.lock().unwrap().checked {
            return Ok(());
        }
        let launch = self.launch(vec!["--version".into()]);
        let result = match canary(&launch).await {
            Ok(version) => {
                self.readiness.lock().unwrap().version = Some(version.clone());
                tracing::info!(host = self.settings.kind.as_str(), %version, "exec: host found");
                preflight(self.settings.kind, &launch.env)
            }
            Err(e) => Err(e),
        };
        self.readiness.lock().unwrap().checked = Some(result.clone());
        result
    }
}

/// Runs `COMMAND --version` with a 5 s limit; the first line it prints.
async fn canary(launch: &Launch) -> Result<String, (ExecFailure, String)> {
    let mut cmd = tokio::process::Command::new(&launch.program);
    cmd.args(&launch.args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    if let Some(cwd) = &launch.cwd {
        cmd.current_dir(cwd);
    }
    let program = &launch.program;
    let out = match tokio::time::timeout(CANARY_TIMEOUT, cmd.output()).await {
        Err(_) => {
            return Err((
                ExecFailure::Failed,
                format!("exec: `{program} --version` did not answer within 5s"),
            ));
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err((
                ExecFailure::AgentNotFound,
                format!("exec: `{program}` not found: {e}; install it or set `exec.command`"),
            ));
        }
        Ok(Err(e)) => {
            return Err((
                ExecFailure::Failed,
                format!("exec: cannot start `{program}`: {e}"),
            ));
        }
        Ok(Ok(out)) => out,
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    match out.status.code() {
        Some(0) => Ok(first.trim().to_string()),
        Some(127) => Err((
            ExecFailure::AgentNotFound,
            format!("exec: `{program} --version` exited 127 (command not found)"),
        )),
        _ => Err((
            ExecFailure::Failed,
            format!(
                "exec: `{program} --version` failed ({}): {}",
                out.status,
                event::cut(String::from_utf8_lossy(&out.stderr).trim(), 512)
            ),
        )),
    }
}

/// Whether the host has credentials it can use without a person: environment first, then the
/// files its login writes. `host_env` is the environment the host gets ([`env::for_host`]).
fn preflight(
    kind: ExecKind,
    host_env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> Result<(), (ExecFailure, String)> {
    let var = |name: &str| env::get(host_env, name).map(|v| v.to_string_lossy().into_owned());
    let home = var("HOME").map(PathBuf::from).unwrap_or_default();
    let (vars, files, hint): (&[&str], Vec<PathBuf>, &str) = match kind {
        ExecKind::CopilotCli => {
            let dir = var("COPILOT_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".copilot"));
            (
                &[
                    "COPILOT_PROVIDER_API_KEY",
                    "COPILOT_GITHUB_TOKEN",
                    "GH_TOKEN",
                    "GITHUB_TOKEN",
                ],
                vec![dir.join("config.json")],
                "run `copilot` and `/login` as the daemon's user, or set `COPILOT_GITHUB_TOKEN` \
                 (or a provider with `COPILOT_PROVIDER_API_KEY`) in `exec.env` or the daemon's \
                 environment",
            )
        }
        ExecKind::ClaudeCode => {
            let dir = var("CLAUDE_CONFIG_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".claude"));
            (
                &[
                    "ANTHROPIC_API_KEY",
                    "ANTHROPIC_AUTH_TOKEN",
                    "CLAUDE_CODE_OAUTH_TOKEN",
                    "CLAUDE_CODE_USE_BEDROCK",
                    "CLAUDE_CODE_USE_VERTEX",
                ],
                vec![dir.join(".credentials.json")],
                "run `claude` and `/login` as the daemon's user, or set `ANTHROPIC_API_KEY` in \
                 `exec.env` or the daemon's environment",
            )
        }
    };
    if vars.iter().any(|v| var(v).is_some()) {
        return Ok(());
    }
    if files.iter().any(|f| logged_in(kind, f)) {
        return Ok(());
    }
    Err((
        ExecFailure::AuthMissing,
        format!(
            "exec: {} has no credentials (none of {} is set, no login in {}); {hint}",
            kind.as_str(),
            vars.iter()
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(", "),
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// Whether a host's login file says someone logged in.
fn logged_in(kind: ExecKind, file: &std::path::Path) -> bool {
    let Ok(text) = std::fs::read_to_string(file) else {
        return false;
    };
    match kind {
        // Copilot CLI keeps `logged_in_users` (and `last_logged_in_user`) in config.json.
        ExecKind::CopilotCli => text.contains("logged_in_user"),
        ExecKind::ClaudeCode => !text.trim().is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::Event;
    use crate::app::Core;
    use crate::config::Config;
    use crate::control::ops::Append;
    use crate::message::NewMessage;
    use crate::rules::RuleSet;
    use std::os::unix::fs::PermissionsExt;

    /// In process: a stand-in host that never ends is cancelled by id, gets SIGTERM, and the
    /// run ends `cancelled`; the next one gets the freed slot.
    #[tokio::test]
    async fn standin_run_cancelled_by_id_frees_its_slot() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host");
        std::fs::write(
            &host,
            "#!/bin/sh\n[ \"$1\" = --version ] && { echo standin; exit 0; }\nexec sleep 30\n",
        )
        .unwrap();
        std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut config = Config::default();
        config.exec.command = Some(host.display().to_string());
        config.exec.max_concurrent = 1;
        config
            .exec
            .env
            .insert("COPILOT_PROVIDER_API_KEY".into(), "k".into());
        let rules = RuleSet::parse(
            r#"{"rules":[{"name":"x","mode":"auto","delivery":"exec","prompt":"p","tools":["view"]}]}"#,
        )
        .unwrap();
        let core = Core::memory(crate::daemon::core_settings(&config), rules);
        let local = Local::bare(core.clone());
        let exec = Arc::new(Exec::new(config.exec.clone()));
        exec.spawn(local.clone(), TaskTracker::new());
        let mut events = local.subscribe().events;
        let two = ["one", "two"].map(|t| NewMessage::new("s", "c", t));
        local
            .call(Append {
                messages: two.to_vec(),
                source: "test".into(),
            })
            .await
            .unwrap();
        let running_now = || exec.stats(&core.stats().delivery).running;
        let mut running = Vec::new();
        let mut ended = Vec::new();
        tokio::time::timeout(Duration::from_secs(20), async {
            while ended.len() < 2 {
                match events.recv().await.unwrap() {
                    Event::Running { id, .. } => {
                        assert_eq!(running_now(), 1, "max_concurrent is 1");
                        running.push(id);
                        // The host may not have started yet: cancelling must still stop it.
                        // The runner registers the run as it takes it, an instant after the
                        // event.
                        while !exec.cancel(id) {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                    Event::Finished {
                        id, state, kind, ..
                    } => {
                        assert_eq!(state, ActionState::Cancelled);
                        assert_eq!(kind, Some(ExecFailure::Cancelled));
                        ended.push(id);
                    }
                    _ => {}
                }
            }
        })
        .await
        .expect("both runs end");
        assert_eq!(running, ended, "each run ends before the next starts");
        assert!(!exec.cancel(running[0]), "not running any more");
        let stats = exec.stats(&core.stats().delivery);
        assert_eq!(stats.failed.get(&ExecFailure::Cancelled), Some(&2));
        assert_eq!((stats.running, stats.queued), (0, 0));
        core.shutdown().cancel();
    }

    #[test]
    fn preflight_finds_credentials_in_the_hosts_environment_or_refuses_with_a_hint() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path().display().to_string();
        let bare = env::for_host(ExecKind::CopilotCli, [], &[("HOME".to_string(), h.clone())]);
        let (kind, reason) = preflight(ExecKind::CopilotCli, &bare).unwrap_err();
        assert_eq!(kind, ExecFailure::AuthMissing);
        assert!(reason.contains("COPILOT_GITHUB_TOKEN"), "{reason}");
        let with_key = env::for_host(
            ExecKind::ClaudeCode,
            [("ANTHROPIC_API_KEY".into(), "sk".into())],
            &[("HOME".to_string(), h.clone())],
        );
        assert!(preflight(ExecKind::ClaudeCode, &with_key).is_ok());
        // From the daemon's environment, as the host gets it.
        let inherited = env::for_host(
            ExecKind::CopilotCli,
            [("GH_TOKEN".into(), "gho_x".into())],
            &[("HOME".to_string(), h.clone())],
        );
        assert!(preflight(ExecKind::CopilotCli, &inherited).is_ok());
        std::fs::create_dir_all(home.path().join(".copilot")).unwrap();
        std::fs::write(
            home.path().join(".copilot/config.json"),
            r#"{"logged_in_users":[{"login":"me"}]}"#,
        )
        .unwrap();
        assert!(preflight(ExecKind::CopilotCli, &bare).is_ok());
    }
}
