//! The daemon: one per home, the only writer of its files. It wires the parts together and
//! runs them until shutdown.
//!
//! It starts the [`Core`] and wires the parts around it, each with what it needs and nothing
//! else: the operations ([`Local`]) with what the parts report; the control socket for front
//! ends and the CLI; HTTP ingest and the upstream servers as sources ([`SourceContext`]); MCP
//! over streamable HTTP and the exec runner as delivery; the file watcher. Every task is
//! spawned on one `TaskTracker` and watches one `CancellationToken`; shutdown cancels, waits
//! (with a deadline, naming what is left), then flushes the journals.
//!
//! - [`launch`]: starting the daemon in the background (what `serve` and `start` do).
//! - [`log`]: its log file in the home, rotated by size.
//! - [`start`]: its start settings, kept in the home so that any restart keeps them.
//!
//! The home's lock means one writer: the daemon checks twice a second that its lock file is
//! still the one it locked, and stops with a clear log line when the file (or the whole home)
//! was deleted or replaced, since another daemon could then lock a new file and write beside
//! it. On exit it removes the control socket and `endpoint.json` only when they are its own.

pub mod launch;
pub mod log;
pub mod start;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use std::sync::Mutex;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::{Core, CoreSettings};
use crate::config::{Config, ConfigReload, Home, HomeLock, LiveHttp, write_atomic};
use crate::control::local::DaemonInfo;
use crate::control::{DaemonListeners, FrontendSettings, Local, Parts};
use crate::sources::SourceContext;

/// One HTTP listener of the daemon, for `status` and `inbox_stats`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerState {
    /// `ingest` or `mcp`.
    pub what: String,
    /// The address asked for.
    pub address: String,
    /// The address bound, when listening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<String>,
    /// Why it is not listening (the port is taken, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

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
}

/// Runs the daemon on `home_dir` until `shutdown` completes, a `stop` request comes, or its
/// lock is lost.
pub async fn run(
    home_dir: PathBuf,
    opts: DaemonOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let home = if opts.existing_home {
        Home::existing(home_dir)?
    } else {
        Home::open(home_dir)?
    };
    // Before anything is written there or read from it.
    home.check_private()?;
    let lock = Arc::new(home.lock()?);
    // What this start leaves out comes from the last one; what it gives is kept for the next.
    let saved = start::StartSettings::load(&home);
    let opts = saved.merge(opts);
    let now = start::StartSettings::of(&opts);
    if now != saved
        && let Err(e) = now.save(&home)
    {
        tracing::warn!(cause = %e, "cannot save the start settings; a restart may not keep them");
    }
    let mut config = home.load_config()?;
    resolve_token(&home, &mut config.http, opts.token.clone())?;
    if let Some(secret) = opts
        .github_secret
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        config.http.github_secret = Some(secret.to_string());
    }
    let ingest_addr = (!opts.no_listen).then(|| {
        opts.listen
            .clone()
            .unwrap_or_else(|| config.http.listen.clone())
    });
    let mut listeners = Vec::new();
    // Bound (and checked) before anything starts, so a refused setting leaves nothing behind.
    // A port that is taken is not fatal: the daemon still serves its front ends and says so
    // in `status` and `inbox_stats`.
    let ingest = match &ingest_addr {
        Some(addr) => match bind(addr, "ingest").await {
            Ok(listener) => {
                crate::sources::http::check(&config.http, listener.local_addr()?)
                    .map_err(anyhow::Error::msg)?;
                Some(listener)
            }
            Err(err) if !opts.listen_optional => {
                let cause = err
                    .chain()
                    .find_map(|c| c.downcast_ref::<std::io::Error>())
                    .map(|e| port_taken(addr, e))
                    .unwrap_or_else(|| format!("{err:#}"));
                anyhow::bail!("{cause}");
            }
            Err(err) => {
                tracing::warn!("{err:#}; HTTP ingest is off until the daemon restarts");
                listeners.push(ListenerState {
                    what: "ingest".into(),
                    address: addr.clone(),
                    bound: None,
                    error: Some(format!("{:#}", err)),
                });
                None
            }
        },
        None => None,
    };
    let token = CancellationToken::new();
    let tasks = TaskTracker::new();
    let upstream_configs = crate::sources::upstream::config::parse("", &config.upstreams)
        .map_err(|e| anyhow::anyhow!("{}", e[0]))?;
    let core = Core::start(
        home.clone(),
        core_settings(&config),
        token.clone(),
        tasks.clone(),
    )
    .await?;

    // The parts beside the core, and what each reports.
    let listener_states: Arc<Mutex<Vec<ListenerState>>> = Arc::default();
    let config_reload: Arc<Mutex<Option<ConfigReload>>> = Arc::default();
    let exec = Arc::new(crate::delivery::exec::Exec::new(config.exec.clone()));
    let upstreams = crate::sources::upstream::Upstreams::default();
    let asked = DaemonListeners {
        ingest: ingest_addr.clone(),
        mcp_http: opts.mcp_http.clone(),
    };
    let web = Arc::new(crate::delivery::web::WebAccess::default());
    let parts = Parts::new(FrontendSettings {
        max_wait_s: config.mcp.max_wait_s,
        claude_channel: config.mcp.claude_channel,
        elicitation: config.mcp.elicitation,
        permission_relay: config.mcp.permission_relay,
    })
    .daemon(DaemonInfo {
        started: chrono::Utc::now(),
        log: log::current().map(|p| p.display().to_string()),
        listeners: asked.clone(),
    })
    .tools(Arc::new(upstreams.clone()))
    .web(web.clone())
    .status("exec", {
        let exec = exec.clone();
        move |core| serde_json::to_value(exec.stats(&core.delivery)).unwrap_or_default()
    })
    .status("upstreams", {
        let ups = upstreams.clone();
        move |_| serde_json::to_value(ups.states()).unwrap_or_default()
    })
    .status("listeners", {
        let states = listener_states.clone();
        move |_| serde_json::to_value(&*states.lock().unwrap()).unwrap_or_default()
    })
    .status("config_reload", {
        let report = config_reload.clone();
        move |_| serde_json::to_value(&*report.lock().unwrap()).unwrap_or_default()
    })
    .metrics({
        let ups = upstreams.clone();
        move |_, out| ups.metrics(out)
    });
    // A shared stream (the `jetstream` section): appends go there, its consumer stores here.
    let jetstream = match config.jetstream.clone() {
        Some(settings) => {
            Some(crate::sources::jetstream::JetStream::connect(settings, home.dir()).await?)
        }
        None => None,
    };
    let parts = match &jetstream {
        Some(js) => parts
            .relay(Arc::new(js.clone()))
            .status("jetstream", {
                let js = js.clone();
                move |_| serde_json::to_value(js.state()).unwrap_or_default()
            })
            .metrics({
                let js = js.clone();
                move |_, out| js.metrics(out)
            }),
        None => parts,
    };
    let local = Local::new(core.clone(), parts);
    if let Some(js) = &jetstream {
        // Work that must run once goes to the shared work queue, not to local sessions.
        core.share_work(crate::sources::jetstream::shareable);
        js.run(local.clone(), &tasks);
    }
    exec.spawn(local.clone(), tasks.clone());
    let sources = SourceContext::new(local.clone(), tasks.clone());
    crate::sources::upstream::start(&sources, &upstreams, upstream_configs);
    crate::sources::schedule::start(
        &sources,
        &config.schedules,
        &crate::sources::schedule::state_path(&home),
    );

    let control_path = home.control_socket();
    let control = crate::control::bind(&control_path)
        .with_context(|| format!("cannot bind {}", control_path.display()))?;
    tasks.spawn(crate::control::server::serve(
        local.clone(),
        control_path,
        control,
        lock.clone(),
        asked,
        tasks.clone(),
    ));

    let live_http = Arc::new(LiveHttp::new(config.http.clone()));
    let access = |loopback: bool| crate::delivery::mcp::http::Access {
        bearer: config.http.bearer(),
        origins: config.mcp.allowed_origins.clone(),
        loopback,
        body_limit: config.http.body_limit,
        session_idle: config.mcp.session_idle_timeout,
        max_sessions: config.mcp.max_sessions,
    };
    let mut endpoint = serde_json::json!({ "pid": std::process::id() });
    let shared = ingest.is_some() && ingest_addr.is_some() && ingest_addr == opts.mcp_http;
    if let Some(listener) = ingest {
        let mut router = crate::sources::http::router(sources.clone(), live_http.clone())
            .merge(crate::delivery::web::router(local.clone(), web.clone()));
        if shared {
            let loopback = listener.local_addr()?.ip().is_loopback();
            router = router.merge(crate::delivery::mcp::http::router(
                local.clone(),
                access(loopback),
                tasks.clone(),
            ));
        }
        let bound = serve_http(&token, &tasks, listener, router, "ingest")?;
        web.serve_at(bound, &config.http.trusted_proxies)?;
        listeners.push(ListenerState {
            what: "ingest".into(),
            address: ingest_addr.clone().unwrap_or_default(),
            bound: Some(bound.to_string()),
            error: None,
        });
        endpoint["ingest"] = bound.to_string().into();
        if shared {
            endpoint["mcp"] = format!("http://{bound}/mcp").into();
        }
    }
    if let (Some(addr), false) = (&opts.mcp_http, shared) {
        match bind(addr, "mcp").await {
            Ok(listener) => {
                let local_addr = listener.local_addr()?;
                crate::sources::http::check(&config.http, local_addr)
                    .map_err(anyhow::Error::msg)?;
                let router = crate::delivery::mcp::http::router(
                    local.clone(),
                    access(local_addr.ip().is_loopback()),
                    tasks.clone(),
                );
                let bound = serve_http(&token, &tasks, listener, router, "mcp")?;
                listeners.push(ListenerState {
                    what: "mcp".into(),
                    address: addr.clone(),
                    bound: Some(bound.to_string()),
                    error: None,
                });
                endpoint["mcp"] = format!("http://{bound}/mcp").into();
            }
            Err(err) => {
                tracing::warn!("{err:#}; MCP over HTTP is off until the daemon restarts");
                listeners.push(ListenerState {
                    what: "mcp".into(),
                    address: addr.clone(),
                    bound: None,
                    error: Some(format!("{err:#}")),
                });
            }
        }
    }
    *listener_states.lock().unwrap() = listeners;
    spawn_reload_on_sighup(&local, &tasks)?;
    let watched = crate::watch::Watched {
        api: local.clone(),
        home: home.clone(),
        http: live_http,
        config_reload,
        tasks: tasks.clone(),
    };
    if let Err(err) = crate::watch::spawn(watched) {
        tracing::warn!(cause = %err, "cannot watch the home for rule changes; use `switchboard rules reload` or SIGHUP");
    }
    write_atomic(&home.endpoint(), endpoint.to_string().as_bytes())?;
    tracing::info!(home = %home.dir().display(), %endpoint, pid = std::process::id(), "switchboard daemon ready");

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

async fn bind(addr: &str, what: &'static str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({what})"))
}

/// Serves `router` on `listener` with the connection cap and the read timeouts of
/// [`crate::listener`].
fn serve_http(
    token: &CancellationToken,
    tasks: &TaskTracker,
    listener: TcpListener,
    router: axum::Router,
    what: &'static str,
) -> anyhow::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    tasks.spawn(crate::listener::serve(
        listener,
        router,
        token.clone(),
        tasks.clone(),
        what,
    ));
    tracing::info!(%bound, what, "listening");
    Ok(bound)
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
                    let _ = local.call(crate::control::ops::Reload {}).await;
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
