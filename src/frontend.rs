//! `switchboard serve`: an MCP front end on stdio, attached to the home's daemon.
//!
//! What a host launches. It holds no state of its own: every tool call goes to the daemon
//! through a [`Remote`], which starts the daemon when none runs and re-attaches when it
//! restarts. Every task it starts runs on one tracker and is stopped before it exits.
//! Each front end is its own MCP session, so N host windows are N consumers of one
//! inbox. The front end ends when the host closes stdin (or on SIGINT/SIGTERM); the daemon
//! keeps running, so webhooks keep landing.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::{Api, Connector, Remote};
use crate::control::DaemonListeners;
use crate::daemon::launch::{Launch, connect_or_start};
use crate::delivery::mcp::McpServer;

/// What a front end asks of the daemon it starts, and how its session reads.
#[derive(Clone, Debug, Default)]
pub struct FrontendOptions {
    /// `--http`: MCP over HTTP in the daemon.
    pub mcp_http: Option<String>,
    /// `--listen`.
    pub listen: Option<String>,
    /// `--no-listen`.
    pub no_listen: bool,
    /// `--consumer`.
    pub consumer: Option<String>,
    /// Start the daemon so that a taken ingest port is a warning, not a failed start (a
    /// host's window must come up).
    pub listen_optional: bool,
}

impl FrontendOptions {
    /// The daemon flags these options stand for.
    pub fn daemon_args(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        if let Some(addr) = &self.listen {
            args.extend(["--listen".into(), addr.into()]);
        }
        if self.no_listen {
            args.push("--no-listen".into());
        }
        if let Some(addr) = &self.mcp_http {
            args.extend(["--http".into(), addr.into()]);
        }
        if self.listen_optional {
            args.push("--listen-optional".into());
        }
        args
    }

    /// How the running daemon's listeners differ from what these options ask, in words.
    pub fn differences(&self, daemon: &DaemonListeners) -> Vec<String> {
        let mut out = Vec::new();
        let shown = |a: &Option<String>| a.clone().unwrap_or_else(|| "off".into());
        if self.no_listen && daemon.ingest.is_some() {
            out.push(format!(
                "ingest: asked off, the daemon listens on {}",
                shown(&daemon.ingest)
            ));
        }
        if let Some(addr) = &self.listen
            && daemon.ingest.as_ref() != Some(addr)
        {
            out.push(format!(
                "ingest: asked {addr}, the daemon has {}",
                shown(&daemon.ingest)
            ));
        }
        if let Some(addr) = &self.mcp_http
            && daemon.mcp_http.as_ref() != Some(addr)
        {
            out.push(format!(
                "--http: asked {addr}, the daemon has {}",
                shown(&daemon.mcp_http)
            ));
        }
        out
    }
}

/// Serves one MCP session on stdio against the daemon of `home` until stdin closes or
/// `shutdown` completes.
pub async fn run(
    home: PathBuf,
    opts: FrontendOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let tasks = TaskTracker::new();
    let launch = Launch::current(home.clone(), opts.daemon_args())?;
    // The daemon this front end may start gets its environment: never another token.
    crate::daemon::start::check_token_env(
        &crate::home::Home::existing(&home)?,
        std::env::var(crate::home::TOKEN_ENV).ok().as_deref(),
    )?;
    let remote = Remote::attach(
        home.clone(),
        connector(home, Some(launch)),
        stop.clone(),
        &tasks,
    )
    .await?;
    if let Some(attached) = remote.welcome() {
        let differs = opts.differences(&attached.listeners);
        if !differs.is_empty() {
            tracing::warn!(
                daemon = attached.pid,
                "the running daemon was started with other flags ({}); it keeps them. \
                 Run `{}` and start again to change them",
                differs.join("; "),
                crate::home::command("stop")
            );
        }
        if attached.version != env!("CARGO_PKG_VERSION") {
            tracing::warn!(
                daemon = attached.pid,
                daemon_version = %attached.version,
                "the running daemon is another version; `{}` makes the next front end start \
                 this one",
                crate::home::command("stop")
            );
        }
    }
    let server = McpServer::with_api(
        Api::Remote(remote),
        tasks.clone(),
        &stop,
        opts.consumer.clone(),
    );
    let link = server.link();
    tokio::select! {
        result = crate::delivery::mcp::serve_stdio(server, stop.clone()) => {
            if let Err(err) = result {
                tracing::warn!(cause = %err, "stdio MCP session ended with an error");
            }
        }
        _ = shutdown => {}
    }
    // The session ends. Its close is sent if the writer gets to it; either way the daemon
    // closes every session of this connection when the process exits and the socket closes.
    link.end();
    stop.cancel();
    tasks.close();
    if tokio::time::timeout(std::time::Duration::from_secs(2), tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            tasks = tasks.len(),
            "front-end tasks still running after 2s; exiting anyway"
        );
    }
    Ok(())
}

/// How a front end reaches the daemon of `home`: the control socket, starting the daemon with
/// `launch` when none answers (without `launch`, `None` when none runs).
pub fn connector(home: PathBuf, launch: Option<Launch>) -> Connector {
    let (home, launch) = (Arc::new(home), Arc::new(launch));
    Arc::new(move || {
        let (home, launch) = (home.clone(), launch.clone());
        Box::pin(async move { connect_or_start(&home, (*launch).as_ref()).await })
    })
}
