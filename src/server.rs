//! `serve`: wires the parts together and runs them until shutdown.
//!
//! One [`App`] is shared by every front end: MCP over stdio and streamable
//! HTTP, HTTP ingest, and the control socket. Every task is spawned on the
//! app's `TaskTracker` and watches its `CancellationToken`; shutdown cancels,
//! waits (with a deadline), then flushes the journal.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::config::{Home, write_atomic};

/// How long shutdown waits for tasks before it gives up on them.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// What `serve` runs.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// MCP over streamable HTTP at this address (`/mcp`).
    pub mcp_http: Option<String>,
    /// HTTP ingest address; `None` = the configured one.
    pub listen: Option<String>,
    /// No HTTP ingest.
    pub no_listen: bool,
    /// MCP over stdio; the server stops when stdin closes.
    pub stdio: bool,
    /// The ingest bearer token from `SWITCHBOARD_TOKEN`; wins over `http.token` and the
    /// `token` file.
    pub token: Option<String>,
    /// The consumer the stdio session reads as (`--consumer`); default: its own.
    pub consumer: Option<String>,
    /// The GitHub webhook secret from `SWITCHBOARD_GITHUB_SECRET`; wins over
    /// `http.githubSecret`.
    pub github_secret: Option<String>,
}

/// Runs switchboard on `home_dir` until `shutdown` completes (or stdin closes in stdio mode).
pub async fn run(
    home_dir: PathBuf,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let home = Home::open(home_dir)?;
    let _lock = home.lock()?;
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
    // Bound (and checked) before anything starts, so a refused setting leaves nothing behind.
    let ingest = match &ingest_addr {
        Some(addr) => {
            let listener = bind(addr, "ingest").await?;
            crate::sources::http::check(&config.http, listener.local_addr()?)
                .map_err(anyhow::Error::msg)?;
            Some(listener)
        }
        None => None,
    };
    let token = CancellationToken::new();
    let upstreams = crate::sources::upstream::config::parse("", &config.upstreams)
        .map_err(|e| anyhow::anyhow!("{}", e[0]))?;
    let app = App::start(home.clone(), config, token.clone()).await?;
    crate::sources::upstream::start(&app, upstreams);

    let control = crate::control::bind(&home.control_socket())
        .with_context(|| format!("cannot bind {}", home.control_socket().display()))?;
    app.tasks.spawn(crate::control::serve(app.clone(), control));

    let mut endpoint = serde_json::json!({ "pid": std::process::id() });
    let shared = ingest_addr.is_some() && ingest_addr == opts.mcp_http;
    if let Some(listener) = ingest {
        let mut router = crate::sources::http::router(app.clone());
        if shared {
            let loopback = listener.local_addr()?.ip().is_loopback();
            router = router.merge(crate::delivery::mcp::http::router(
                app.clone(),
                token.clone(),
                loopback,
            ));
        }
        let bound = serve_http(&app, listener, router, "ingest")?;
        endpoint["ingest"] = bound.to_string().into();
        if shared {
            endpoint["mcp"] = format!("http://{bound}/mcp").into();
        }
    }
    if let (Some(addr), false) = (&opts.mcp_http, shared) {
        let listener = bind(addr, "mcp").await?;
        let local = listener.local_addr()?;
        crate::sources::http::check(&app.config.http, local).map_err(anyhow::Error::msg)?;
        let router = crate::delivery::mcp::http::router(
            app.clone(),
            token.clone(),
            local.ip().is_loopback(),
        );
        let bound = serve_http(&app, listener, router, "mcp")?;
        endpoint["mcp"] = format!("http://{bound}/mcp").into();
    }
    spawn_reload_on_sighup(&app)?;
    if let Err(err) = crate::watch::spawn(&app) {
        tracing::warn!(cause = %err, "cannot watch the home for rule changes; use `switchboard rules reload` or SIGHUP");
    }
    write_atomic(&home.endpoint(), endpoint.to_string().as_bytes())?;
    tracing::info!(home = %home.dir().display(), %endpoint, "switchboard ready");

    if opts.stdio {
        tokio::select! {
            result = crate::delivery::mcp::serve_stdio(crate::delivery::mcp::McpServer::new(app.clone(), opts.consumer.clone()), token.clone()) => {
                if let Err(err) = result {
                    tracing::warn!(cause = %err, "stdio MCP session ended with an error");
                }
            }
            _ = shutdown => {}
        }
    } else {
        shutdown.await;
    }
    stop(&app, &home).await;
    Ok(())
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
    app: &Arc<App>,
    listener: TcpListener,
    router: axum::Router,
    what: &'static str,
) -> anyhow::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    app.tasks.spawn(crate::listener::serve(
        listener,
        router,
        app.shutdown.clone(),
        app.tasks.clone(),
        what,
    ));
    tracing::info!(%bound, what, "listening");
    Ok(bound)
}

fn spawn_reload_on_sighup(app: &Arc<App>) -> anyhow::Result<()> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let app2 = app.clone();
    app.tasks.spawn(async move {
        loop {
            tokio::select! {
                _ = app2.shutdown.cancelled() => break,
                got = hup.recv() => {
                    if got.is_none() { break; }
                    app2.reload_rules().await;
                }
            }
        }
    });
    Ok(())
}

async fn stop(app: &Arc<App>, home: &Home) {
    tracing::info!("shutting down");
    app.shutdown.cancel();
    app.tasks.close();
    if tokio::time::timeout(SHUTDOWN_DEADLINE, app.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            tasks = app.tasks.len(),
            "tasks still running after {SHUTDOWN_DEADLINE:?}; stopping anyway"
        );
    }
    app.lifecycle.flush().await;
    app.inbox.close().await;
    app.state.flush();
    let _ = std::fs::remove_file(home.endpoint());
    let _ = std::fs::remove_file(home.control_socket());
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
