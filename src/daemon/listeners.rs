//! The daemon's HTTP listeners: ingest (webhooks, the approval page, and `/mcp` when MCP
//! shares its address) and MCP over streamable HTTP on an address of its own.
//!
//! Both are bound (and checked) by [`Listeners::bind`] before anything starts, so a refused
//! setting leaves nothing behind. A port that is taken is not fatal where the start allows it:
//! the daemon still serves its front ends and says so in `status` and `inbox_stats` (the
//! `listeners` part). Of their settings, `http.rateLimit` and `http.githubSecret` change live.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use super::DaemonOptions;
use super::component::{Component, Context};
use crate::config::{Config, HttpSettings, LiveHttp, McpSettings};
use crate::control::local::BoxFuture;
use crate::control::{DaemonListeners, Parts};
use crate::delivery::web::WebAccess;

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

impl ListenerState {
    fn listening(what: &str, address: &str, bound: SocketAddr) -> ListenerState {
        ListenerState {
            what: what.into(),
            address: address.into(),
            bound: Some(bound.to_string()),
            error: None,
        }
    }

    fn failed(what: &str, address: &str, err: &anyhow::Error) -> ListenerState {
        ListenerState {
            what: what.into(),
            address: address.into(),
            bound: None,
            error: Some(format!("{err:#}")),
        }
    }
}

/// An address asked for, and its socket until the listener starts serving it.
struct Bound {
    address: String,
    socket: Mutex<Option<TcpListener>>,
}

/// The HTTP listeners, bound; [`Component::start`] serves them.
pub struct Listeners {
    ingest: Option<Bound>,
    mcp: Option<Bound>,
    /// MCP is served on the ingest listener.
    shared: bool,
    asked: DaemonListeners,
    /// What the ingest and the MCP listener do, in that order, for the `listeners` part;
    /// complete once started.
    states: Arc<Mutex<[Option<ListenerState>; 2]>>,
    /// The approval page's one-time links, served on the ingest listener.
    web: Arc<WebAccess>,
    /// The ingest settings that change live.
    live: Arc<LiveHttp>,
    /// What `endpoint.json` says of them, once started.
    endpoint: Mutex<serde_json::Value>,
    /// What sources add to the ingest listener (Teams' change notifications).
    routes: Vec<axum::Router>,
}

impl Listeners {
    /// Binds the listeners `opts` asks for, with `config`'s settings (its token resolved).
    pub async fn bind(config: &Config, opts: &DaemonOptions) -> anyhow::Result<Listeners> {
        let ingest_addr = (!opts.no_listen).then(|| {
            opts.listen
                .clone()
                .unwrap_or_else(|| config.http.listen.clone())
        });
        let mut states = [None, None];
        let ingest = match &ingest_addr {
            Some(addr) => {
                bind_ingest(addr, &config.http, opts.listen_optional, &mut states[0]).await?
            }
            None => None,
        };
        let shared = ingest.is_some() && ingest_addr.is_some() && ingest_addr == opts.mcp_http;
        let mcp = match (&opts.mcp_http, shared) {
            (Some(addr), false) => bind_mcp(addr, &config.http, &mut states[1]).await?,
            _ => None,
        };
        Ok(Listeners {
            ingest,
            mcp,
            shared,
            asked: DaemonListeners {
                ingest: ingest_addr,
                mcp_http: opts.mcp_http.clone(),
            },
            states: Arc::new(Mutex::new(states)),
            web: Arc::new(WebAccess::default()),
            live: Arc::new(LiveHttp::new(config.http.clone())),
            endpoint: Mutex::new(serde_json::json!({ "pid": std::process::id() })),
            routes: Vec::new(),
        })
    }

    /// The ingest listener serves `router` too, when there is one.
    pub fn ingest_routes(mut self, router: Option<axum::Router>) -> Listeners {
        self.routes.extend(router);
        self
    }

    /// The listeners the daemon was asked for.
    pub fn asked(&self) -> &DaemonListeners {
        &self.asked
    }

    /// What `endpoint.json` says: the daemon's pid and where it listens.
    pub fn endpoint(&self) -> serde_json::Value {
        self.endpoint.lock().unwrap().clone()
    }
}

/// Binds and checks the ingest address. A port that cannot be listened on fails the start,
/// unless `optional`: then it is a warning and a state saying why.
async fn bind_ingest(
    addr: &str,
    http: &HttpSettings,
    optional: bool,
    state: &mut Option<ListenerState>,
) -> anyhow::Result<Option<Bound>> {
    match bind(addr, "ingest").await {
        Ok(listener) => checked(addr, http, listener).map(Some),
        Err(err) if !optional => {
            let cause = err
                .chain()
                .find_map(|c| c.downcast_ref::<std::io::Error>())
                .map(|e| super::port_taken(addr, e))
                .unwrap_or_else(|| format!("{err:#}"));
            anyhow::bail!("{cause}");
        }
        Err(err) => {
            tracing::warn!("{err:#}; HTTP ingest is off until the daemon restarts");
            *state = Some(ListenerState::failed("ingest", addr, &err));
            Ok(None)
        }
    }
}

/// Binds and checks MCP's own address. A port that cannot be listened on is a warning and a
/// state saying why.
async fn bind_mcp(
    addr: &str,
    http: &HttpSettings,
    state: &mut Option<ListenerState>,
) -> anyhow::Result<Option<Bound>> {
    match bind(addr, "mcp").await {
        Ok(listener) => checked(addr, http, listener).map(Some),
        Err(err) => {
            tracing::warn!("{err:#}; MCP over HTTP is off until the daemon restarts");
            *state = Some(ListenerState::failed("mcp", addr, &err));
            Ok(None)
        }
    }
}

/// A listener bound at `addr`, once its address passes the checks of `http`
/// (`disableAuth` only on loopback).
fn checked(addr: &str, http: &HttpSettings, listener: TcpListener) -> anyhow::Result<Bound> {
    crate::sources::http::check(http, listener.local_addr()?).map_err(anyhow::Error::msg)?;
    Ok(Bound {
        address: addr.to_string(),
        socket: Mutex::new(Some(listener)),
    })
}

async fn bind(addr: &str, what: &'static str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({what})"))
}

impl Component for Arc<Listeners> {
    type Settings = (HttpSettings, McpSettings);
    const KEYS: &'static [&'static str] = &["http", "mcp"];

    fn settings(config: &Config) -> Self::Settings {
        (config.http.clone(), config.mcp.clone())
    }

    fn report(&self, parts: Parts) -> Parts {
        let states = self.states.clone();
        parts.web(self.web.clone()).status("listeners", move |_| {
            let states: Vec<ListenerState> =
                states.lock().unwrap().iter().flatten().cloned().collect();
            serde_json::to_value(states).unwrap_or_default()
        })
    }

    fn start(&self, cx: &Context, (http, mcp): Self::Settings) -> anyhow::Result<()> {
        let access = |loopback: bool| crate::delivery::mcp::http::Access {
            bearer: http.bearer(),
            origins: mcp.allowed_origins.clone(),
            loopback,
            body_limit: http.body_limit,
            session_idle: mcp.session_idle_timeout,
            max_sessions: mcp.max_sessions,
        };
        let mut states = self.states.lock().unwrap();
        let mut endpoint = self.endpoint.lock().unwrap();
        if let Some((address, listener)) = take(&self.ingest) {
            let mut router = crate::sources::http::router(cx.source(), self.live.clone()).merge(
                crate::delivery::web::router(cx.api.clone(), self.web.clone(), cx.tasks.clone()),
            );
            for routes in &self.routes {
                router = router.merge(routes.clone());
            }
            if self.shared {
                let loopback = listener.local_addr()?.ip().is_loopback();
                router = router.merge(crate::delivery::mcp::http::router(
                    cx.api.clone(),
                    access(loopback),
                    cx.tasks.clone(),
                ));
            }
            let bound = serve(cx, listener, router, "ingest")?;
            self.web.serve_at(bound, &http.trusted_proxies)?;
            states[0] = Some(ListenerState::listening("ingest", address, bound));
            endpoint["ingest"] = bound.to_string().into();
            if self.shared {
                endpoint["mcp"] = format!("http://{bound}/mcp").into();
            }
        }
        if let Some((address, listener)) = take(&self.mcp) {
            let loopback = listener.local_addr()?.ip().is_loopback();
            let router = crate::delivery::mcp::http::router(
                cx.api.clone(),
                access(loopback),
                cx.tasks.clone(),
            );
            let bound = serve(cx, listener, router, "mcp")?;
            states[1] = Some(ListenerState::listening("mcp", address, bound));
            endpoint["mcp"] = format!("http://{bound}/mcp").into();
        }
        Ok(())
    }

    fn reload<'a>(&'a self, _: &'a Context, (http, _): Self::Settings) -> BoxFuture<'a, ()> {
        // `SWITCHBOARD_GITHUB_SECRET` wins over the file, as at start.
        let secret_from_env =
            std::env::var(crate::config::GITHUB_SECRET_ENV).is_ok_and(|v| !v.trim().is_empty());
        self.live.update(|live| {
            live.rate_limit = http.rate_limit.clone();
            if !secret_from_env {
                live.github_secret = http.github_secret.clone();
            }
        });
        Box::pin(async {})
    }
}

/// The address and the socket of a bound listener, the first time it is asked for.
fn take(bound: &Option<Bound>) -> Option<(&str, TcpListener)> {
    let bound = bound.as_ref()?;
    let socket = bound.socket.lock().unwrap().take()?;
    Some((&bound.address, socket))
}

/// Serves `router` on `listener` with the connection cap and the read timeouts of
/// [`crate::listener`].
fn serve(
    cx: &Context,
    listener: TcpListener,
    router: axum::Router,
    what: &'static str,
) -> anyhow::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    cx.tasks.spawn(crate::listener::serve(
        listener,
        router,
        cx.shutdown().clone(),
        cx.tasks.clone(),
        what,
    ));
    tracing::info!(%bound, what, "listening");
    Ok(bound)
}
