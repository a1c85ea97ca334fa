//! The daemon: one per home, the only writer of its files. It starts the parts and runs them
//! until shutdown.
//!
//! It starts the [`Core`], then the components beside it, each built from its own settings
//! ([`component`]): the action queues, exec, the upstream servers, the schedules, Teams, the
//! shared stream, the control socket for front ends and the CLI ([`components`]), and the HTTP
//! listeners ([`listeners`]). They report to the operations ([`Local`]), which they then use
//! through a [`Context`]. SIGHUP and the file watcher reach them: a rules change is the
//! `reload` operation, a `switchboard.json` change reaches the components it concerns. Every
//! task is spawned on one `TaskTracker` and watches one `CancellationToken`; shutdown cancels,
//! waits (with a deadline, naming what is left), then flushes the journals.
//!
//! - [`launch`]: starting the daemon in the background (what `serve` and `start` do).
//! - [`log`]: its log file in the home, rotated by size.
//! - [`start`]: its start settings, kept in the home so that any restart keeps them.
//!
//! The home's lock means one writer: the daemon checks twice a second that its lock file is
//! still the one it locked, and stops with a clear log line when the file (or the whole home)
//! was deleted or replaced, since another daemon could then lock a new file and write beside
//! it. On exit it removes the control socket and `endpoint.json` only when they are its own.

pub mod component;
pub mod components;
pub mod launch;
pub mod listeners;
pub mod log;
pub mod start;

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::{Core, CoreSettings};
use crate::config::{Config, ConfigReload, Home, HomeLock, write_atomic};
use crate::control::local::DaemonInfo;
use crate::control::{DaemonListeners, FrontendSettings, Local, Parts};
use crate::delivery::exec::Exec;
use crate::sources::upstream::Upstreams;
use component::{Components, Context, Running};
use components::{
    ControlSocket, EventWebhooks, Queues, Schedules, SharedStream, SlackSource, TeamsSource,
};
pub use listeners::{ListenerState, Listeners};

/// How long shutdown waits for tasks before it gives up on them.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// How often the daemon checks that its lock file is still its own.
const LOCK_CHECK_EVERY: Duration = Duration::from_millis(500);

/// What the daemon runs.
#[derive(Clone, Debug, Default)]
pub struct DaemonOptions {
    /// MCP over streamable HTTP at this address (`/mcp`).
    pub mcp_http: Option<String>,
    /// HTTP ingest address; `None` = the configured one.
    pub listen: Option<String>,
    /// No HTTP ingest.
    pub no_listen: bool,
    /// Refuse to create a missing home (a daemon started in the background).
    pub existing_home: bool,
    /// A taken ingest port is a warning (a daemon a front end starts), not a failed start.
    pub listen_optional: bool,
    /// The ingest bearer token from `SWITCHBOARD_TOKEN`; wins over `http.token` and the
    /// `token` file.
    pub token: Option<String>,
    /// The GitHub webhook secret from `SWITCHBOARD_GITHUB_SECRET`; wins over
    /// `http.githubSecret`.
    pub github_secret: Option<String>,
    /// The Teams app's client secret from `SWITCHBOARD_TEAMS_CLIENT_SECRET` (app-only sign-in).
    pub teams_secret: Option<String>,
    /// The Slack app's tokens from `SWITCHBOARD_SLACK_*`.
    pub slack_tokens: crate::sources::slack::settings::SlackTokens,
}

/// Runs the daemon on `home_dir` until `shutdown` completes, a `stop` request comes, or its
/// lock is lost.
pub async fn run(
    home_dir: PathBuf,
    opts: DaemonOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let (home, lock) = open_home(home_dir, opts.existing_home)?;
    let opts = remembered(&home, opts);
    let config = load_config(&home, &opts)?;
    // Bound (and checked) before anything starts, so a refused setting leaves nothing behind.
    // Teams answers Graph's change notifications on the ingest listener, when it subscribes.
    let teams = TeamsSource::new(config.teams.clone(), &home, opts.teams_secret.clone());
    // Slack posts events and clicks there, in events mode; a token it needs and lacks stops here.
    let slack = SlackSource::new(config.slack.clone(), opts.slack_tokens.clone())?;
    let listeners = Arc::new(
        Listeners::bind(&config, &opts)
            .await?
            .ingest_routes(teams.notifications())
            .ingest_routes(slack.routes()),
    );
    let token = CancellationToken::new();
    let tasks = TaskTracker::new();
    let settings = core_settings(&config);
    let core = Core::start(home.clone(), settings, token.clone(), tasks.clone()).await?;
    let started = async {
        // The parts beside the core, in the order they start.
        let components = Components::default()
            .with(Queues)
            .with(Arc::new(Exec::new(config.exec.clone())))
            .with(Upstreams::in_home(home.dir()))
            .with(Schedules)
            .with(teams)
            .with(slack)
            .with(EventWebhooks(crate::delivery::webhook::Webhooks::new(
                config.mcp.events.clone(),
                config.http.disable_auth,
                Some(&home),
            )))
            .with(SharedStream::connect(config.jetstream.clone(), &home, &core).await?)
            .with(ControlSocket {
                lock: lock.clone(),
                asked: listeners.asked().clone(),
            })
            .with(listeners.clone());
        let config_reload: Arc<Mutex<Option<ConfigReload>>> = Arc::default();
        let parts = components.report(own_parts(&config, listeners.asked(), &config_reload));
        let cx = Context {
            api: Local::new(core.clone(), parts),
            tasks: tasks.clone(),
            home: home.clone(),
        };
        let running = Arc::new(components.start(cx, &config)?);
        reload_on_signals(running, config_reload)?;
        let endpoint = listeners.endpoint();
        write_atomic(&home.endpoint(), endpoint.to_string().as_bytes())?;
        tracing::info!(home = %home.dir().display(), %endpoint, pid = std::process::id(), "switchboard daemon ready");
        anyhow::Ok(())
    };
    if let Err(err) = started.await {
        stop(&core, &token, &tasks, &home).await;
        return Err(err);
    }

    tokio::select! {
        _ = shutdown => {}
        _ = token.cancelled() => {}
        _ = lock_lost(&lock) => {
            tracing::error!(
                lock = %lock.path().display(),
                "the home's lock file was deleted or replaced (or the home was removed); \
                 stopping now, so that no second daemon writes this home beside this one"
            );
        }
    }
    stop(&core, &token, &tasks, &home).await;
    drop(lock);
    Ok(())
}

/// Opens the home (an existing one only, when `existing`), checks that it is private before
/// anything is written there or read from it, and locks it.
fn open_home(dir: PathBuf, existing: bool) -> anyhow::Result<(Home, Arc<HomeLock>)> {
    let home = if existing {
        Home::existing(dir)?
    } else {
        Home::open(dir)?
    };
    home.check_private()?;
    let lock = Arc::new(home.lock()?);
    Ok((home, lock))
}

/// The options of this start: what it leaves out comes from the last one; what it gives is
/// kept for the next.
fn remembered(home: &Home, opts: DaemonOptions) -> DaemonOptions {
    let saved = start::StartSettings::load(home);
    let opts = saved.merge(opts);
    let now = start::StartSettings::of(&opts);
    if now != saved
        && let Err(e) = now.save(home)
    {
        tracing::warn!(cause = %e, "cannot save the start settings; a restart may not keep them");
    }
    opts
}

/// `switchboard.json`, with the ingest token decided and the GitHub secret of the
/// environment, which wins over the file's.
fn load_config(home: &Home, opts: &DaemonOptions) -> anyhow::Result<Config> {
    let mut config = home.load_config()?;
    resolve_token(home, &mut config.http, opts.token.clone())?;
    if let Some(secret) = opts
        .github_secret
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        config.http.github_secret = Some(secret.to_string());
    }
    Ok(config)
}

/// What the daemon itself reports to the operations: the front ends' settings, who it is,
/// and the last change of `switchboard.json` (`config_reload`).
fn own_parts(
    config: &Config,
    asked: &DaemonListeners,
    config_reload: &Arc<Mutex<Option<ConfigReload>>>,
) -> Parts {
    let report = config_reload.clone();
    Parts::new(FrontendSettings {
        max_wait_s: config.mcp.max_wait_s,
        claude_channel: config.mcp.claude_channel,
        elicitation: config.mcp.elicitation,
        permission_relay: config.mcp.permission_relay,
        delivery_grace_ms: config.mcp.delivery_grace.as_millis() as u64,
        events_heartbeat_ms: config.mcp.events.heartbeat.as_millis() as u64,
    })
    .daemon(DaemonInfo {
        started: chrono::Utc::now(),
        log: log::current().map(|p| p.display().to_string()),
        listeners: asked.clone(),
    })
    .status("config_reload", move |_| {
        serde_json::to_value(&*report.lock().unwrap()).unwrap_or_default()
    })
}

/// Reloads on SIGHUP (the rules) and on a change the file watcher sees (the rules, or
/// `switchboard.json` for the components it concerns, reported in `config_reload`).
fn reload_on_signals(
    running: Arc<Running>,
    config_reload: Arc<Mutex<Option<ConfigReload>>>,
) -> anyhow::Result<()> {
    let cx = running.context().clone();
    spawn_reload_on_sighup(&cx.api, &cx.tasks)?;
    let watched = crate::watch::Watched {
        api: cx.api,
        home: cx.home,
        components: running,
        config_reload,
        tasks: cx.tasks,
    };
    if let Err(err) = crate::watch::spawn(watched) {
        tracing::warn!(
            cause = %err,
            "cannot watch the home for rule changes; use `{}` or SIGHUP",
            crate::home::command("rules reload")
        );
    }
    Ok(())
}

/// The one line for an ingest address that cannot be listened on: which, why, and how to pick
/// another.
pub fn port_taken(addr: &str, e: &std::io::Error) -> String {
    let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
        "another program (or another switchboard home) listens there; pick another port with \
         `--listen 127.0.0.1:PORT` or `http.listen` in switchboard.json, or start without ingest \
         with `--no-listen`"
    } else {
        "pick another address with `--listen` or `http.listen` in switchboard.json, or start \
         without ingest with `--no-listen`"
    };
    format!("cannot listen on {addr} for ingest: {e}; {hint}")
}

/// The core's settings, as `switchboard.json` gives them.
pub fn core_settings(config: &Config) -> CoreSettings {
    CoreSettings {
        inbox: config.inbox.clone(),
        actions: config.actions.clone(),
        max_wait: config.mcp.max_wait(),
    }
}

/// Completes when the lock file is no longer the one `lock` holds.
async fn lock_lost(lock: &HomeLock) {
    loop {
        tokio::time::sleep(LOCK_CHECK_EVERY).await;
        if !lock.intact() {
            return;
        }
    }
}

/// Decides the ingest bearer token, in this order: `SWITCHBOARD_TOKEN`, `http.token` in
/// switchboard.json, the `token` file in the home (generated at first start).
fn resolve_token(
    home: &Home,
    http: &mut crate::config::HttpSettings,
    env: Option<String>,
) -> anyhow::Result<()> {
    let trimmed = |t: String| Some(t.trim().to_string()).filter(|t| !t.is_empty());
    let env = env.and_then(trimmed);
    let configured = http.token.take().and_then(trimmed);
    http.token = Some(match (env, configured) {
        (Some(token), _) => token,
        (None, Some(token)) => token,
        (None, None) => home.ensure_token()?,
    });
    Ok(())
}

fn spawn_reload_on_sighup(local: &Local, tasks: &TaskTracker) -> anyhow::Result<()> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let local = local.clone();
    tasks.spawn(async move {
        loop {
            tokio::select! {
                _ = local.shutdown().cancelled() => break,
                got = hup.recv() => {
                    if got.is_none() { break; }
                    let _ = local.call(crate::control::ops::Reload::default()).await;
                }
            }
        }
    });
    Ok(())
}

async fn stop(core: &Core, token: &CancellationToken, tasks: &TaskTracker, home: &Home) {
    tracing::info!("shutting down");
    token.cancel();
    tasks.close();
    if tokio::time::timeout(SHUTDOWN_DEADLINE, tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            tasks = tasks.len(),
            "tasks still running after {SHUTDOWN_DEADLINE:?}; stopping anyway"
        );
    }
    core.close().await;
    // Only our own: a daemon that started after us (our lock was lost) owns what is there now.
    let endpoint_pid = std::fs::read_to_string(home.endpoint())
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["pid"].as_u64());
    if endpoint_pid == Some(u64::from(std::process::id())) {
        let _ = std::fs::remove_file(home.endpoint());
    }
    tracing::info!("stopped");
}

/// Completes on SIGINT or SIGTERM. The handlers are installed when this is called, not when
/// it is first polled, so a signal that arrives while the server starts is not fatal.
pub fn shutdown_signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate()).ok();
    let int = signal(SignalKind::interrupt()).ok();
    async move {
        let wait = |s: Option<tokio::signal::unix::Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = wait(term) => {}
            _ = wait(int) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HttpSettings;

    fn resolved(home: &Home, configured: Option<&str>, env: Option<&str>) -> String {
        let mut http = HttpSettings {
            token: configured.map(String::from),
            ..HttpSettings::default()
        };
        resolve_token(home, &mut http, env.map(String::from)).unwrap();
        http.token.unwrap()
    }

    #[test]
    fn token_comes_from_env_then_config_then_the_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path()).unwrap();
        assert_eq!(
            resolved(&home, Some("from-config"), Some("from-env")),
            "from-env"
        );
        assert_eq!(resolved(&home, Some(" from-config\n"), None), "from-config");
        assert!(
            !home.token().exists(),
            "no file is written while a token is configured"
        );
        assert_eq!(
            resolved(&home, Some(""), Some(" ")),
            home.ensure_token().unwrap()
        );
        let generated = std::fs::read_to_string(home.token()).unwrap();
        assert_eq!(resolved(&home, None, None), generated.trim());
    }
}
