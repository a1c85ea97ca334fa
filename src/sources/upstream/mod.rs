//! Upstream MCP servers as sources: switchboard is their client.
//!
//! Each upstream in `switchboard.json` (see [`config`]) gets
//! - a **supervisor** task that connects (a child process on stdio, or streamable HTTP),
//!   pinned to protocol 2025-11-25, and reconnects with full-jitter backoff (500 ms → 30 s)
//!   whenever the connection fails or ends; one upstream failing never touches another;
//! - an **ingest** task: the only writer of that upstream's messages into the inbox. The
//!   transport wrapper ([`ordered`]) feeds it notifications in wire order through one bounded
//!   channel, so a flooding upstream is slowed down (its reader blocks), never buffered
//!   without bound, and nothing is dropped;
//! - its tools, re-exported as `<upstream>__<tool>` ([`names`]). A forwarded call waits at
//!   most the upstream's `callTimeout` for its answer; past it the call is cancelled, the
//!   caller gets a clear error, and the upstream is shown as `degraded` (in `stats`,
//!   `status` and `/metrics`) until it answers a call again. An upstream that stops
//!   answering never holds a session's call for longer than that.
//!
//! [`Upstreams`] is the one narrow handle the rest of the process uses: `tools()`, `call()`,
//! `states()`, `tools_changed()`. MCP sessions see nothing else, so the connections can later
//! move into a daemon behind the control socket without touching them.

pub mod config;
pub mod events;
pub(crate) mod locate;
pub mod mapping;
pub mod names;
pub mod ordered;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientRequest,
    ContentBlock, ErrorData, Implementation, InitializeRequestParams, ProtocolVersion, Tool,
};
use rmcp::service::{Peer, RoleClient, ServiceError};
use rmcp::{ClientHandler, ServiceExt};
use serde::Serialize;
use tokio::io::AsyncBufReadExt;
use tokio::sync::{Notify, mpsc, watch};

pub use config::{Transport, UpstreamConfig};

use super::SourceContext;
use crate::control::{ApiError, StoreError};
use crate::duration::Backoff;
use crate::message::NewMessage;

/// Messages one upstream may have in flight between its reader and the inbox. When full,
/// the reader waits (backpressure), so memory stays bounded whatever the upstream sends.
pub const QUEUE_CAPACITY: usize = 1024;
/// The most messages appended to the inbox in one batch (one journal write).
const INGEST_BATCH: usize = 512;
/// Backoff before a reconnect: full jitter, the ceiling doubling from the first to the last.
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A connection that stayed up this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(10);
/// The longest the MCP handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// HTTP upstreams are pinged this often; a failed ping reconnects.
const PING_EVERY: Duration = Duration::from_secs(10);

/// Counters shared by an upstream's reader and ingest task.
#[derive(Debug, Default)]
pub struct Counters {
    /// Notifications that mapped to a message.
    pub received: AtomicU64,
    /// Messages stored in the inbox.
    pub stored: AtomicU64,
    /// Messages dropped by the `channels` allow-list.
    pub filtered: AtomicU64,
    /// Messages refused by the inbox's limits (too large, too many metadata keys).
    pub refused: AtomicU64,
    /// Times the reader waited because the ingest queue was full.
    pub reader_waits: AtomicU64,
    /// Tool calls not answered within `callTimeout`.
    pub call_timeouts: AtomicU64,
}

/// The connection state of one upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// `enabled: false`.
    Disabled,
    /// Starting the process or the handshake.
    Connecting,
    /// The handshake succeeded; notifications flow and tools can be called.
    Connected,
    /// Connected, but the last tool call forwarded to it was not answered within its
    /// `callTimeout`; the next call that is answered makes it `connected` again.
    Degraded,
    /// The last attempt failed or the connection ended; a reconnect is scheduled.
    Failed,
}

/// What `inbox_stats`, `switchboard stats` and `/metrics` show of one upstream.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct UpstreamState {
    /// The upstream's name.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// Connection state.
    pub state: Phase,
    /// Why the last connection failed or ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Reconnects and restarts since start.
    pub restarts: u64,
    /// When the current connection was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connected_since: Option<String>,
    /// The child's pid (stdio).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// `serverInfo` name and version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Tools it offers (re-exported).
    pub tools: usize,
    /// Notifications that mapped to a message.
    pub received: u64,
    /// Messages stored.
    pub stored: u64,
    /// Messages dropped by the `channels` allow-list.
    pub filtered: u64,
    /// Notifications refused by the inbox's limits (too large); the rest of their batch was
    /// stored.
    #[serde(default)]
    pub refused: u64,
    /// Times its reader was paused because the ingest queue was full.
    pub reader_waits: u64,
    /// Tool calls it did not answer within `callTimeout`.
    #[serde(default)]
    pub call_timeouts: u64,
}

#[derive(Debug)]
struct Status {
    phase: Phase,
    last_error: Option<String>,
    restarts: u64,
    connected_since: Option<DateTime<Utc>>,
    pid: Option<u32>,
    server: Option<String>,
}

/// One configured upstream.
struct Entry {
    config: Arc<UpstreamConfig>,
    status: Mutex<Status>,
    counters: Arc<Counters>,
    /// The live connection, for tool calls.
    peer: Mutex<Option<Peer<RoleClient>>>,
    /// Its own tools, as it lists them (kept while it is down).
    tools: Mutex<Vec<Tool>>,
    /// Signalled by the reader on `notifications/tools/list_changed`.
    list_changed: Arc<Notify>,
    /// A journal outage under way: its start and end are logged, not every batch.
    outage: super::Outage,
}

impl Entry {
    fn set(&self, phase: Phase, error: Option<String>) {
        let mut s = self.status.lock().unwrap();
        s.phase = phase;
        if error.is_some() {
            s.last_error = error;
        }
        if phase != Phase::Connected {
            s.connected_since = None;
            s.pid = None;
        }
    }

    fn state(&self) -> UpstreamState {
        let s = self.status.lock().unwrap();
        let c = &self.counters;
        UpstreamState {
            name: self.config.name.clone(),
            transport: self.config.transport.kind().to_string(),
            state: s.phase,
            last_error: s.last_error.clone(),
            restarts: s.restarts,
            connected_since: s.connected_since.map(crate::message::format_timestamp),
            pid: s.pid,
            server: s.server.clone(),
            tools: self.tools.lock().unwrap().len(),
            received: c.received.load(Ordering::Relaxed),
            stored: c.stored.load(Ordering::Relaxed),
            filtered: c.filtered.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            reader_waits: c.reader_waits.load(Ordering::Relaxed),
            call_timeouts: c.call_timeouts.load(Ordering::Relaxed),
        }
    }

    /// A forwarded call was answered: a degraded upstream answers again.
    fn answered(&self) {
        let mut s = self.status.lock().unwrap();
        if s.phase == Phase::Degraded {
            s.phase = Phase::Connected;
            s.last_error = None;
            drop(s);
            tracing::info!(upstream = %self.config.name, "upstream answers tool calls again");
        }
    }

    /// A forwarded call was not answered within `callTimeout`: a connected upstream is
    /// degraded (one that is reconnecting already says so).
    fn unanswered(&self, why: &str) {
        self.counters.call_timeouts.fetch_add(1, Ordering::Relaxed);
        let mut s = self.status.lock().unwrap();
        if matches!(s.phase, Phase::Connected | Phase::Degraded) {
            let first = s.phase == Phase::Connected;
            s.phase = Phase::Degraded;
            s.last_error = Some(why.to_string());
            drop(s);
            if first {
                tracing::warn!(upstream = %self.config.name, "upstream degraded: {why}");
            }
        }
    }
}

/// One `/metrics` family of upstream state: name, kind, help, and the value of one upstream.
type Family = (
    &'static str,
    crate::metrics::Kind,
    &'static str,
    fn(&UpstreamState) -> f64,
);

/// The exported tool table: host-facing name → (entry index, the upstream's own name).
#[derive(Default)]
struct Exported {
    tools: Vec<Tool>,
    routes: HashMap<String, (usize, String)>,
}

#[derive(Default)]
struct Inner {
    entries: RwLock<Vec<Arc<Entry>>>,
    exported: RwLock<Exported>,
    changed: watch::Sender<u64>,
    /// Where the MCP Events cursors of every upstream are kept.
    cursors: Arc<events::Cursors>,
}

/// The handle on every upstream. Cheap to clone; empty until [`start`] runs.
#[derive(Clone, Default)]
pub struct Upstreams {
    inner: Arc<Inner>,
}

impl Upstreams {
    /// The upstreams of the daemon on `home`: their MCP Events cursors are kept there.
    pub fn in_home(home: &std::path::Path) -> Upstreams {
        let inner = Inner {
            cursors: Arc::new(events::Cursors::open(home.join(events::FILE))),
            ..Inner::default()
        };
        Upstreams {
            inner: Arc::new(inner),
        }
    }

    fn cursors(&self) -> Arc<events::Cursors> {
        self.inner.cursors.clone()
    }

    /// Every upstream tool, named `<upstream>__<tool>`, in config order.
    pub fn tools(&self) -> Vec<Tool> {
        self.inner.exported.read().unwrap().tools.clone()
    }

    /// Whether `name` is a re-exported upstream tool.
    pub fn has_tool(&self, name: &str) -> bool {
        self.inner
            .exported
            .read()
            .unwrap()
            .routes
            .contains_key(name)
    }

    /// Forwards a call of the re-exported tool `request.name`. `None` when no upstream tool
    /// has that name. The upstream's own tool errors and protocol errors come back as they
    /// were; an upstream that is down, a connection lost mid-call, or no answer within the
    /// upstream's `callTimeout` (which also marks it degraded) is an `isError` result.
    pub async fn call(
        &self,
        mut request: CallToolRequestParams,
    ) -> Option<Result<CallToolResponse, ErrorData>> {
        let (entry, tool) = {
            let exported = self.inner.exported.read().unwrap();
            let (index, tool) = exported.routes.get(request.name.as_ref())?.clone();
            (self.inner.entries.read().unwrap()[index].clone(), tool)
        };
        let exported_name = request.name.to_string();
        let name = entry.config.name.clone();
        let peer = entry.peer.lock().unwrap().clone();
        let Some(peer) = peer else {
            let s = entry.state();
            let why = match (&s.state, &s.last_error) {
                (Phase::Failed, Some(e)) => format!("failed: {e}"),
                (phase, _) => format!("{phase:?}").to_lowercase(),
            };
            return Some(Ok(tool_error(format!(
                "upstream `{name}` is not connected ({why}); `{exported_name}` was not called; \
                 switchboard reconnects on its own, try again shortly"
            ))));
        };
        request.name = tool.into();
        let limit = entry.config.call_timeout;
        // Dropping the call at the deadline sends the upstream `notifications/cancelled`.
        let answer = match tokio::time::timeout(limit, peer.call_tool_once(request)).await {
            Ok(answer) => answer,
            Err(_) => {
                let limit = humantime::format_duration(limit);
                entry.unanswered(&format!(
                    "`{exported_name}` was not answered within {limit} (`callTimeout`)"
                ));
                return Some(Ok(tool_error(format!(
                    "upstream `{name}` did not answer `{exported_name}` within {limit} \
                     (`callTimeout`); the call was cancelled, though the upstream may still \
                     carry it out; `{name}` shows as degraded until it answers a call again"
                ))));
            }
        };
        Some(match answer {
            Ok(response) => {
                entry.answered();
                Ok(response)
            }
            Err(ServiceError::McpError(e)) => {
                entry.answered();
                Err(e)
            }
            Err(e) => Ok(tool_error(format!(
                "upstream `{name}`: `{exported_name}` failed: {e}; the upstream may not have \
                 run it"
            ))),
        })
    }

    /// The state of every configured upstream, in config order.
    pub fn states(&self) -> Vec<UpstreamState> {
        self.inner
            .entries
            .read()
            .unwrap()
            .iter()
            .map(|e| e.state())
            .collect()
    }

    /// A watch that changes whenever the set of re-exported tools changes.
    pub fn tools_changed(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// Every upstream's families of `/metrics`.
    pub fn metrics(&self, out: &mut crate::metrics::Scrape) {
        use crate::metrics::Kind;
        let states = self.states();
        if states.is_empty() {
            return;
        }
        let families: [Family; 9] = [
            (
                "switchboard_upstream_up",
                Kind::Gauge,
                "1 while the upstream is connected (degraded included), else 0.",
                |s| {
                    f64::from(u8::from(matches!(
                        s.state,
                        Phase::Connected | Phase::Degraded
                    )))
                },
            ),
            (
                "switchboard_upstream_degraded",
                Kind::Gauge,
                "1 while the upstream is connected but its last tool call was not answered within callTimeout.",
                |s| f64::from(u8::from(s.state == Phase::Degraded)),
            ),
            (
                "switchboard_upstream_call_timeouts_total",
                Kind::Counter,
                "Tool calls forwarded to the upstream and not answered within callTimeout.",
                |s| s.call_timeouts as f64,
            ),
            (
                "switchboard_upstream_restarts_total",
                Kind::Counter,
                "Reconnects and restarts of the upstream since start.",
                |s| s.restarts as f64,
            ),
            (
                "switchboard_upstream_tools",
                Kind::Gauge,
                "Tools the upstream offers, re-exported.",
                |s| s.tools as f64,
            ),
            (
                "switchboard_upstream_notifications_stored_total",
                Kind::Counter,
                "Upstream notifications stored as messages.",
                |s| s.stored as f64,
            ),
            (
                "switchboard_upstream_notifications_filtered_total",
                Kind::Counter,
                "Upstream notifications dropped by the channels allow-list.",
                |s| s.filtered as f64,
            ),
            (
                "switchboard_upstream_notifications_refused_total",
                Kind::Counter,
                "Upstream notifications refused by the inbox's limits (the rest of their batch stored).",
                |s| s.refused as f64,
            ),
            (
                "switchboard_upstream_reader_waits_total",
                Kind::Counter,
                "Times the upstream's reader waited for a full ingest queue (backpressure).",
                |s| s.reader_waits as f64,
            ),
        ];
        for (name, kind, help, value) in families {
            let family = out.family(name, help, kind);
            for s in &states {
                family.with(&[("upstream", &s.name)], value(s));
            }
        }
    }

    /// Rebuilds the exported table from every entry's tools; tells sessions when it changed.
    fn rebuild(&self) {
        let entries = self.inner.entries.read().unwrap().clone();
        let mut table = Exported::default();
        for (index, entry) in entries.iter().enumerate() {
            for tool in entry.tools.lock().unwrap().iter() {
                let exported = names::export(&entry.config.name, &tool.name, |n| {
                    table.routes.contains_key(n)
                });
                table
                    .routes
                    .insert(exported.clone(), (index, tool.name.to_string()));
                let mut t = tool.clone();
                t.name = exported.into();
                let via = format!("(upstream `{}`)", entry.config.name);
                t.description = Some(match &tool.description {
                    Some(d) if !d.is_empty() => format!("{d} {via}").into(),
                    _ => via.into(),
                });
                table.tools.push(t);
            }
        }
        let mut exported = self.inner.exported.write().unwrap();
        if exported.tools != table.tools {
            *exported = table;
            drop(exported);
            self.inner.changed.send_modify(|n| *n += 1);
        }
    }
}

impl crate::control::ToolHub for Upstreams {
    fn tools(&self) -> Vec<Tool> {
        Upstreams::tools(self)
    }

    fn has_tool(&self, name: &str) -> bool {
        Upstreams::has_tool(self, name)
    }

    fn call(
        &self,
        request: CallToolRequestParams,
    ) -> crate::control::local::BoxFuture<'_, Result<CallToolResult, ErrorData>> {
        Box::pin(async move {
            match Upstreams::call(self, request).await {
                None => Err(ErrorData::invalid_params("no upstream has this tool", None)),
                Some(Ok(CallToolResponse::Complete(result))) => Ok(result),
                Some(Ok(_)) => Err(ErrorData::internal_error(
                    "the upstream answered with a task or an input request, which switchboard \
                     does not forward",
                    None,
                )),
                Some(Err(e)) => Err(e),
            }
        })
    }

    fn changed(&self) -> watch::Receiver<u64> {
        self.tools_changed()
    }
}

fn tool_error(text: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text)]).into()
}

/// Starts a supervisor and an ingest task for every enabled upstream in `configs`.
pub fn start(cx: &SourceContext, ups: &Upstreams, configs: Vec<UpstreamConfig>) {
    let entries: Vec<Arc<Entry>> = configs
        .into_iter()
        .map(|config| {
            let enabled = config.enabled;
            Arc::new(Entry {
                config: Arc::new(config),
                status: Mutex::new(Status {
                    phase: if enabled {
                        Phase::Connecting
                    } else {
                        Phase::Disabled
                    },
                    last_error: None,
                    restarts: 0,
                    connected_since: None,
                    pid: None,
                    server: None,
                }),
                counters: Arc::default(),
                peer: Mutex::new(None),
                tools: Mutex::new(Vec::new()),
                list_changed: Arc::new(Notify::new()),
                outage: super::Outage::default(),
            })
        })
        .collect();
    *ups.inner.entries.write().unwrap() = entries.clone();
    for entry in entries.into_iter().filter(|e| e.config.enabled) {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        tracing::info!(
            upstream = %entry.config.name,
            transport = entry.config.transport.kind(),
            "starting upstream"
        );
        cx.tasks().spawn(ingest(cx.clone(), entry.clone(), rx));
        cx.tasks()
            .spawn(supervise(cx.clone(), ups.clone(), entry, tx));
    }
}

/// Appends an upstream's messages to the inbox in the order the reader queued them. On
/// shutdown, what is still queued is appended before the task ends.
async fn ingest(cx: SourceContext, entry: Arc<Entry>, mut rx: mpsc::Receiver<NewMessage>) {
    let name = entry.config.name.clone();
    let mut buf = Vec::with_capacity(INGEST_BATCH);
    loop {
        let n = tokio::select! {
            n = rx.recv_many(&mut buf, INGEST_BATCH) => n,
            _ = cx.shutdown().cancelled() => {
                rx.close();
                while let Ok(m) = rx.try_recv() {
                    buf.push(m);
                }
                if !buf.is_empty() {
                    store(&cx, &entry, &name, std::mem::take(&mut buf)).await;
                }
                return;
            }
        };
        if n == 0 {
            return;
        }
        let batch = std::mem::replace(&mut buf, Vec::with_capacity(INGEST_BATCH));
        if !store(&cx, &entry, &name, batch).await {
            return;
        }
    }
}

/// Appends one batch (counted for `/metrics`); false when the inbox is closed.
///
/// A message over the inbox's limits (a 300 kB notification, a channel longer than the limit)
/// is refused alone: counted as `refused`, logged once per batch with what was over, and the
/// rest of the batch is stored.
async fn store(cx: &SourceContext, entry: &Entry, name: &str, batch: Vec<NewMessage>) -> bool {
    let done = match cx.append_each(batch, name).await {
        Ok(done) => {
            if let Some(ended) = entry.outage.succeed() {
                tracing::info!(
                    upstream = %name,
                    "upstream messages are stored on disk again ({} batches were not, over \
                     {:.1}s)",
                    ended.failures,
                    ended.lasted.as_secs_f64()
                );
            }
            done
        }
        Err(ApiError::Store(StoreError::NotDurable { appended, cause })) => {
            if entry.outage.fail() {
                tracing::warn!(
                    upstream = %name,
                    %cause,
                    "upstream messages kept in memory only; logged once until they are stored \
                     on disk again"
                );
            }
            crate::control::ops::EachAppended {
                appended,
                refused: Vec::new(),
            }
        }
        Err(ApiError::Store(StoreError::Closed)) => return false,
        Err(err) => {
            if entry.outage.fail() {
                tracing::error!(
                    upstream = %name,
                    cause = %err,
                    "cannot store upstream messages; logged once until they are stored again"
                );
            }
            return true;
        }
    };
    if let Some(first) = done.refused.first() {
        entry
            .counters
            .refused
            .fetch_add(done.refused.len() as u64, Ordering::Relaxed);
        tracing::warn!(
            upstream = %name,
            refused = done.refused.len(),
            "upstream notification refused: {}; the rest of its batch was stored",
            first.reason
        );
    }
    let stored = done.appended.iter().filter(|a| !a.duplicate).count() as u64;
    entry.counters.stored.fetch_add(stored, Ordering::Relaxed);
    true
}

/// Connects, serves, and reconnects with backoff until shutdown.
async fn supervise(
    cx: SourceContext,
    ups: Upstreams,
    entry: Arc<Entry>,
    tx: mpsc::Sender<NewMessage>,
) {
    let name = entry.config.name.clone();
    let mut backoff = Backoff::new(BACKOFF_FIRST, BACKOFF_MAX).full_jitter();
    loop {
        entry.set(Phase::Connecting, None);
        let started = Instant::now();
        let ended = connection(&cx, &ups, &entry, tx.clone()).await;
        *entry.peer.lock().unwrap() = None;
        let Some(reason) = ended else {
            return; // shutdown
        };
        if started.elapsed() >= STABLE_AFTER {
            backoff.reset();
        }
        let delay = backoff.next();
        tracing::warn!(
            upstream = %name,
            cause = %reason,
            retry_in_ms = delay.as_millis() as u64,
            "upstream failed; reconnecting"
        );
        entry.set(Phase::Failed, Some(reason));
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = cx.shutdown().cancelled() => return,
        }
        entry.status.lock().unwrap().restarts += 1;
    }
}

/// The client side of one connection: our identity, protocol pinned to 2025-11-25.
#[derive(Clone)]
struct Client;

impl ClientHandler for Client {
    fn get_info(&self) -> InitializeRequestParams {
        let mut info = Implementation::new("switchboard", env!("CARGO_PKG_VERSION"));
        info.title = Some("switchboard".into());
        InitializeRequestParams::new(ClientCapabilities::default(), info)
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

/// One connection, from spawn or connect to its end. `None` on shutdown, else why it ended.
async fn connection(
    cx: &SourceContext,
    ups: &Upstreams,
    entry: &Arc<Entry>,
    tx: mpsc::Sender<NewMessage>,
) -> Option<String> {
    let up = entry.config.clone();
    let (notes, notes_rx) = mpsc::channel(events::NOTES_CAPACITY);
    fn wrap<T>(
        inner: T,
        entry: &Entry,
        (tx, notes): (mpsc::Sender<NewMessage>, mpsc::Sender<events::Note>),
    ) -> ordered::Ordered<T> {
        ordered::Ordered::new(
            inner,
            entry.config.clone(),
            tx,
            entry.counters.clone(),
            entry.list_changed.clone(),
            notes,
        )
    }
    let tx = (tx, notes);
    let handshake = async {
        match &up.transport {
            Transport::Stdio { command, args, env } => {
                let (child, pid) = spawn_child(cx, &up.name, command, args, env)?;
                let running = Client
                    .serve(wrap(child, entry, tx))
                    .await
                    .map_err(|e| format!("handshake failed: {}", init_error(&e)))?;
                Ok((running, pid))
            }
            Transport::Http { url, headers } => {
                let transport = http_transport(url, headers);
                let running = Client
                    .serve(wrap(transport, entry, tx))
                    .await
                    .map_err(|e| format!("cannot connect to {url}: {}", init_error(&e)))?;
                Ok((running, None))
            }
        }
    };
    let (running, pid) = tokio::select! {
        r = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake) => match r {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => return Some(e),
            Err(_) => return Some(format!("no answer to initialize within {HANDSHAKE_TIMEOUT:?}")),
        },
        _ = cx.shutdown().cancelled() => return None,
    };
    let peer = running.peer().clone();
    let server = peer.peer_info().map(|i| match &i.server_info {
        Some(s) => format!("{} {} (protocol {})", s.name, s.version, i.protocol_version),
        None => format!("(protocol {})", i.protocol_version),
    });
    {
        let mut s = entry.status.lock().unwrap();
        s.phase = Phase::Connected;
        s.last_error = None;
        s.connected_since = Some(Utc::now());
        s.pid = pid;
        s.server = server.clone();
    }
    *entry.peer.lock().unwrap() = Some(peer.clone());
    tracing::info!(upstream = %up.name, server = server.as_deref().unwrap_or("?"), "upstream connected");
    if let Err(e) = refresh_tools(ups, entry, &peer).await {
        tracing::warn!(upstream = %up.name, cause = %e, "cannot list the upstream's tools");
    }

    let ct = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let consuming = events::consume(
        cx.clone(),
        up.clone(),
        peer.clone(),
        notes_rx,
        ups.cursors(),
    );
    tokio::pin!(consuming);
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    let is_http = matches!(up.transport, Transport::Http { .. });
    loop {
        tokio::select! {
            quit = &mut waiting => {
                return Some(match quit {
                    Ok(reason) => format!("connection ended ({})", quit_text(&reason)),
                    Err(e) => format!("connection task failed: {e}"),
                });
            }
            _ = &mut consuming => {}
            _ = entry.list_changed.notified() => {
                if let Err(e) = refresh_tools(ups, entry, &peer).await {
                    tracing::warn!(upstream = %up.name, cause = %e, "cannot refresh the upstream's tools");
                }
            }
            _ = ping.tick(), if is_http => {
                let ping = peer.send_request(ClientRequest::PingRequest(Default::default()));
                let failure = match tokio::time::timeout(PING_EVERY, ping).await {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some(format!("no answer within {PING_EVERY:?}")),
                };
                if let Some(why) = failure {
                    ct.cancel();
                    let _ = tokio::time::timeout(Duration::from_secs(5), &mut waiting).await;
                    return Some(format!("ping failed: {why}"));
                }
            }
            _ = cx.shutdown().cancelled() => {
                ct.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(4), &mut waiting).await;
                entry.set(Phase::Disabled, None);
                return None;
            }
        }
    }
}

/// The streamable HTTP client transport to `url`, sending `headers`.
fn http_transport(
    url: &str,
    headers: &std::collections::BTreeMap<String, String>,
) -> rmcp::transport::StreamableHttpClientTransport<reqwest::Client> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut map = HashMap::new();
    for (k, v) in headers {
        // Validated by `config check` and at load.
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            http::HeaderValue::from_str(v),
        ) {
            map.insert(k, v);
        }
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(map)
        .reinit_on_expired_session(true);
    StreamableHttpClientTransport::from_config(config)
}

fn quit_text(reason: &rmcp::service::QuitReason) -> String {
    match reason {
        rmcp::service::QuitReason::Closed => "the upstream closed it".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Lists the upstream's tools and re-exports them.
async fn refresh_tools(
    ups: &Upstreams,
    entry: &Entry,
    peer: &Peer<RoleClient>,
) -> Result<(), String> {
    let supports_tools = peer
        .peer_info()
        .is_some_and(|i| i.capabilities.tools.is_some());
    let tools = if supports_tools {
        peer.list_all_tools().await.map_err(|e| e.to_string())?
    } else {
        Vec::new()
    };
    tracing::info!(upstream = %entry.config.name, tools = tools.len(), "upstream tools listed");
    *entry.tools.lock().unwrap() = tools;
    ups.rebuild();
    Ok(())
}

/// Spawns the child in its own process group (so a restart kills everything it started),
/// stdin/stdout as the MCP pipes, stderr into our log line by line (on the source's tasks,
/// until the pipe closes or the daemon shuts down).
fn spawn_child(
    cx: &SourceContext,
    name: &str,
    command: &str,
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
) -> Result<(rmcp::transport::TokioChildProcess, Option<u32>), String> {
    use process_wrap::tokio::{CommandWrap, ProcessGroup};
    let mut cmd = tokio::process::Command::new(command);
    // The upstream inherits the daemon's environment (its own credentials are usually there),
    // but not switchboard's secrets, unless its `env` names them.
    for secret in crate::home::SECRET_ENV {
        cmd.env_remove(secret);
    }
    cmd.args(args).envs(env).kill_on_drop(true);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec. The child
    // gets SIGTERM if switchboard dies without a shutdown (SIGKILL), so it is never orphaned.
    // (The signal follows the spawning thread: a tokio worker, alive as long as the runtime.)
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut wrap = CommandWrap::from(cmd);
    wrap.wrap(ProcessGroup::leader());
    let (child, stderr) = rmcp::transport::TokioChildProcess::builder(wrap)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start `{command}`: {e}"))?;
    let pid = child.id();
    if let Some(stderr) = stderr {
        let name = name.to_string();
        let shutdown = cx.shutdown().clone();
        cx.tasks().spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            loop {
                let line = tokio::select! {
                    line = lines.next_line() => line,
                    _ = shutdown.cancelled() => break,
                };
                let Ok(Some(line)) = line else { break };
                tracing::info!(upstream = %name, "stderr: {line}");
            }
        });
    }
    Ok((child, pid))
}

/// An upstream's failed handshake for people: rmcp's transport errors start with the transport's
/// Rust type name (`Ordered<rmcp::transport::worker::WorkerTransport<…>>`), which says nothing to
/// the person reading `status`; this keeps the error itself, each cause it wraps, and when it
/// happened.
fn init_error(e: &rmcp::service::ClientInitializeError) -> String {
    use rmcp::service::ClientInitializeError;
    match e {
        ClientInitializeError::TransportError { error, context } => {
            let mut text = error.error.to_string();
            let mut source = error.error.source();
            while let Some(cause) = source {
                let cause_text = cause.to_string();
                if !text.contains(&cause_text) {
                    text.push_str(": ");
                    text.push_str(&cause_text);
                }
                source = cause.source();
            }
            format!("{text} (while {context})")
        }
        other => other.to_string(),
    }
}
