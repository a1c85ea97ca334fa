//! [`Local`]: operations applied in the daemon, with its [`Core`]'s components and the
//! [`Parts`] the daemon wired beside it (each op gets them through its [`Ctx`]).
//!
//! The core knows nothing of the sources or of delivery. What those add to the daemon's
//! answers is registered here by the daemon as it wires them: the upstream servers' tools
//! ([`ToolHub`]), the chat sources that can answer a message ([`Replier`], by server name),
//! what each part reports in `stats` and `status` (exec, upstreams, listeners,
//! the last config change) and what it adds to `/metrics`. A new capability registers its
//! part; the core does not grow a field.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorData, Tool};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::ops::reply::Sent;
use super::{ApiError, Ctx, DaemonListeners, Feed, FrontendSettings, Op, PushPolicy};
use crate::app::{Core, CoreStats};
use crate::metrics::Scrape;

/// A boxed future, for the object-safe traits of parts.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The upstream servers' tools, as the daemon re-exports them to sessions.
pub trait ToolHub: Send + Sync + 'static {
    /// Every re-exported tool (`<upstream>__<tool>`).
    fn tools(&self) -> Vec<Tool>;
    /// Whether `name` is one of them.
    fn has_tool(&self, name: &str) -> bool;
    /// Forwards a call to the upstream that has the tool.
    fn call(
        &self,
        request: CallToolRequestParams,
    ) -> BoxFuture<'_, Result<CallToolResult, ErrorData>>;
    /// Bumped whenever the tools change.
    fn changed(&self) -> watch::Receiver<u64>;
}

/// A chat source that can answer a message in the conversation it came from (a Teams chat, a
/// Slack thread): what `channel_reply` and `switchboard reply` reach, by the message's server.
pub trait Replier: Send + Sync + 'static {
    /// Posts `text` where `message` came from; the sent message's id in the source's service.
    fn reply<'a>(
        &'a self,
        message: &'a crate::message::Message,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Sent, ApiError>>;
}

/// The MCP Events webhook subscriptions: what `events/subscribe` and `events/unsubscribe`
/// reach (the daemon's webhook part checks endpoints, keeps subscriptions and delivers).
pub trait EventHooks: Send + Sync + 'static {
    /// Makes or refreshes a subscription (its start already found by the operation).
    fn subscribe(
        &self,
        request: super::ops::EventsSubscribe,
    ) -> BoxFuture<'_, Result<super::ops::Subscribed, ApiError>>;
    /// Ends a subscription.
    fn unsubscribe(
        &self,
        request: super::ops::EventsUnsubscribe,
    ) -> BoxFuture<'_, Result<(), ApiError>>;
}

/// The approval page's one-time links (`switchboard ui`).
pub trait WebLinks: Send + Sync + 'static {
    /// A fresh one-time link to the page, or why there is none: the page is not served, or
    /// is served beyond this machine over plain HTTP and `public` does not accept that. The
    /// browser it signs in answers as `label` (`switchboard ui --label phone`).
    fn link(&self, public: bool, label: Option<String>) -> Result<WebLink, String>;
    /// Ends every page session and forgets every unused link: how many of each.
    fn revoke(&self) -> (usize, usize);
}

/// A one-time link to the approval page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebLink {
    /// `http://HOST:PORT/ui/login?code=...`.
    pub url: String,
    /// What the person opening it should know (how to reach it from another machine, that it
    /// travels over plain HTTP).
    pub note: Option<String>,
}

/// Where appends go instead of the local inbox when the daemon shares a stream with other
/// instances: the stream, whose consumer stores them here (with the `replicate` op) as it
/// stores everyone's. Messages come within the inbox's limits; the reply comes once the stream
/// has them, with this inbox's seqs as far as its consumer stored them by then.
pub trait Relay: Send + Sync + 'static {
    /// Publishes `messages`, in order, counted as from `source`.
    fn append(
        &self,
        messages: Vec<crate::message::NewMessage>,
        source: &str,
    ) -> BoxFuture<'_, Result<Vec<crate::inbox::Appended>, ApiError>>;
}

/// What a part reports in `stats`, read when asked: the core's stats come in, so that a part
/// can say what the lifecycle holds for it (exec's queue).
pub type StatusFn = Box<dyn Fn(&CoreStats) -> serde_json::Value + Send + Sync>;

/// What a part adds to `/metrics`: its families, read when scraped.
pub type MetricsFn = Box<dyn Fn(&CoreStats, &mut Scrape) + Send + Sync>;

/// Who the daemon is, for `status`.
#[derive(Clone, Debug)]
pub struct DaemonInfo {
    /// When it started.
    pub started: DateTime<Utc>,
    /// Its log file, when it logs to one.
    pub log: Option<String>,
    /// The listeners it was asked for.
    pub listeners: DaemonListeners,
}

impl Default for DaemonInfo {
    fn default() -> Self {
        DaemonInfo {
            started: Utc::now(),
            log: None,
            listeners: DaemonListeners::default(),
        }
    }
}

/// The parts the daemon wires beside the core.
pub struct Parts {
    daemon: DaemonInfo,
    frontend: FrontendSettings,
    tools: Option<Arc<dyn ToolHub>>,
    relay: Option<Arc<dyn Relay>>,
    statuses: Vec<(String, StatusFn)>,
    metrics: Vec<MetricsFn>,
    web: Option<Arc<dyn WebLinks>>,
    /// Reloads of the home's files, for `watch`.
    reloads: tokio::sync::broadcast::Sender<super::ops::Reloaded>,
    repliers: BTreeMap<String, Arc<dyn Replier>>,
    hooks: Option<Arc<dyn EventHooks>>,
}

impl Parts {
    /// No parts yet; front ends follow `frontend`.
    pub fn new(frontend: FrontendSettings) -> Parts {
        Parts {
            daemon: DaemonInfo::default(),
            frontend,
            tools: None,
            relay: None,
            statuses: Vec::new(),
            metrics: Vec::new(),
            web: None,
            reloads: tokio::sync::broadcast::channel(16).0,
            repliers: BTreeMap::new(),
            hooks: None,
        }
    }

    /// Messages from server `server` are answered by `replier`.
    pub fn replier(mut self, server: &str, replier: Arc<dyn Replier>) -> Parts {
        self.repliers.insert(server.to_string(), replier);
        self
    }

    /// The MCP Events webhook subscriptions.
    pub fn event_hooks_by(mut self, hooks: Arc<dyn EventHooks>) -> Parts {
        self.hooks = Some(hooks);
        self
    }

    /// The approval page's links.
    pub fn web(mut self, links: Arc<dyn WebLinks>) -> Parts {
        self.web = Some(links);
        self
    }

    /// Who the daemon is.
    pub fn daemon(mut self, info: DaemonInfo) -> Parts {
        self.daemon = info;
        self
    }

    /// The upstream tools.
    pub fn tools(mut self, hub: Arc<dyn ToolHub>) -> Parts {
        self.tools = Some(hub);
        self
    }

    /// Appends go to a shared stream.
    pub fn relay(mut self, relay: Arc<dyn Relay>) -> Parts {
        self.relay = Some(relay);
        self
    }

    /// What part `name` reports in `stats`.
    pub fn status(
        mut self,
        name: &str,
        report: impl Fn(&CoreStats) -> serde_json::Value + Send + Sync + 'static,
    ) -> Parts {
        self.statuses.push((name.to_string(), Box::new(report)));
        self
    }

    /// What a part adds to `/metrics`.
    pub fn metrics(
        mut self,
        render: impl Fn(&CoreStats, &mut Scrape) + Send + Sync + 'static,
    ) -> Parts {
        self.metrics.push(Box::new(render));
        self
    }

    /// Who the daemon is.
    pub(in crate::control) fn daemon_info(&self) -> &DaemonInfo {
        &self.daemon
    }

    /// The approval page's links, when the daemon serves it.
    pub(in crate::control) fn web_links(&self) -> Option<&Arc<dyn WebLinks>> {
        self.web.as_ref()
    }

    /// The MCP Events webhook subscriptions, when the daemon delivers webhooks.
    pub(in crate::control) fn event_hooks(&self) -> Option<&Arc<dyn EventHooks>> {
        self.hooks.as_ref()
    }

    /// The upstream tools, when the daemon has any.
    pub(in crate::control) fn tool_hub(&self) -> Option<&Arc<dyn ToolHub>> {
        self.tools.as_ref()
    }

    /// What answers the messages of `server`, when a source of the daemon can.
    pub(in crate::control) fn replier_of(&self, server: &str) -> Option<&Arc<dyn Replier>> {
        self.repliers.get(server)
    }

    /// The servers whose messages can be answered, sorted.
    pub(in crate::control) fn answerable(&self) -> Vec<&str> {
        self.repliers.keys().map(String::as_str).collect()
    }

    /// The shared stream appends go to, when the daemon has one.
    pub(in crate::control) fn shared_stream(&self) -> Option<&Arc<dyn Relay>> {
        self.relay.as_ref()
    }

    /// What each part reports in `stats`, given the core's stats.
    pub(in crate::control) fn reports(
        &self,
        core: &CoreStats,
    ) -> BTreeMap<String, serde_json::Value> {
        self.statuses
            .iter()
            .map(|(name, report)| (name.clone(), report(core)))
            .filter(|(_, v)| !v.is_null())
            .collect()
    }

    /// What each part adds to `/metrics`.
    pub(in crate::control) fn scrape(&self, core: &CoreStats, out: &mut Scrape) {
        for part in &self.metrics {
            part(core, out);
        }
    }
}

/// The operations applied in this process.
#[derive(Clone)]
pub struct Local {
    core: Arc<Core>,
    parts: Arc<Parts>,
}

impl Local {
    /// Operations on `core`, with `parts`.
    pub fn new(core: Arc<Core>, parts: Parts) -> Local {
        Local {
            core,
            parts: Arc::new(parts),
        }
    }

    /// A daemon-less local on `core` (tests, benches): no parts, default front-end settings.
    pub fn bare(core: Arc<Core>) -> Local {
        let max_wait_s = core.components().settings.max_wait.as_secs();
        Local::new(
            core,
            Parts::new(FrontendSettings {
                max_wait_s,
                claude_channel: PushPolicy::Auto,
                elicitation: true,
                permission_relay: false,
                delivery_grace_ms: 2000,
                events_heartbeat_ms: crate::control::wire::events_heartbeat_ms(),
            }),
        )
    }

    /// The core, for the operations.
    pub(in crate::control) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The daemon's parts, for the operations.
    pub(in crate::control) fn parts(&self) -> &Parts {
        &self.parts
    }

    /// Fires when the daemon shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        self.core.shutdown()
    }

    /// Applies `op` here.
    pub async fn call<O: Op>(&self, op: O) -> Result<O::Reply, ApiError> {
        self.call_until(op, CancellationToken::new()).await
    }

    /// Applies `op` here; `cancel` ends a wait early.
    pub async fn call_until<O: Op>(
        &self,
        op: O,
        cancel: CancellationToken,
    ) -> Result<O::Reply, ApiError> {
        let cx = Ctx {
            local: self,
            cancel,
            sessions: None,
            peer: None,
        };
        op.apply(&cx).await
    }

    /// Applies an ordered op now, in the caller's order (it completes without waiting).
    pub fn apply_now<O: Op>(&self, op: O) -> Result<O::Reply, ApiError> {
        debug_assert!(O::ORDERED, "only ordered ops complete without waiting");
        let cx = Ctx {
            local: self,
            cancel: CancellationToken::new(),
            sessions: None,
            peer: None,
        };
        use futures::FutureExt;
        op.apply(&cx).now_or_never().unwrap_or_else(|| {
            Err(ApiError::refused(
                super::RefusalCode::Failed,
                "an ordered call did not complete at once (a bug in switchboard)",
            ))
        })
    }

    /// Transitions, commits and tool changes from now on.
    pub fn subscribe(&self) -> Feed {
        let components = self.core.components();
        let (events, committed) = (
            components.lifecycle.subscribe(),
            components.inbox.committed(),
        );
        let tools = match &self.parts.tools {
            Some(hub) => hub.changed(),
            None => watch::channel(0).1,
        };
        Feed {
            events,
            committed,
            tools,
        }
    }

    /// The settings front ends follow.
    pub fn settings(&self) -> FrontendSettings {
        self.parts.frontend.clone()
    }

    /// Tells whoever watches that a file of the home was reloaded (or could not be).
    pub fn announce(&self, reloaded: super::ops::Reloaded) {
        let _ = self.parts.reloads.send(reloaded);
    }

    /// Reloads as they happen (`watch`).
    pub(in crate::control) fn reloads(
        &self,
    ) -> tokio::sync::broadcast::Receiver<super::ops::Reloaded> {
        self.parts.reloads.subscribe()
    }
}
