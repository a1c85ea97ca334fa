//! MCP over streamable HTTP at `/mcp`: rmcp's service behind a guard that owns
//!
//! - **who may call**: the ingest bearer token (401 without it; `http.disableAuth` drops it,
//!   loopback only), and `Origin`: absent is fine, present must be a loopback origin or one in
//!   `mcp.allowedOrigins` (else 403), against DNS rebinding from a browser;
//! - **the era** (see [`super::era`]): `server/discover` refused with -32601 for the clients
//!   kept on the 2025-11-25 session (Claude Code), else answered by rmcp; a request without a
//!   session is told to `initialize` unless its `_meta` is of 2026-07-28, which rmcp serves
//!   without a session (and then GET and DELETE are 405);
//! - **`events/stream`** (MCP Events), answered here with its own SSE response, so that its
//!   notifications ride the request and closing the request ends the stream;
//! - **session ends**: `DELETE` of a known session ends it (its waits return empty at once, its
//!   claims go back to the queue) and answers 200; an unknown session answers 404;
//! - **abandoned sessions**: a session with no request in progress and no open stream for
//!   `mcp.sessionIdleTimeout` ends as if deleted (a wait in flight is not idle), and at most
//!   `mcp.maxSessions` are open at once (one more `initialize` is 503, saying so);
//! - **dropped connections**: the response body of each request is watched; when the client
//!   goes away before the response was sent, or the body ends without it (the request was
//!   cancelled), the request's wait is cancelled and any work it had claimed is released; once
//!   hyper took the frame carrying the response (a client may close as soon as it has read
//!   it) the result is reported sent, and its claims are delivered once the session shows it
//!   is there: a call since, or a stream or request in progress at the end of
//!   `mcp.deliveryGrace`, or its next call after that (see [`SessionLink`]). A session that
//!   ends first (DELETE, idle) gives them back, marked `redelivered`.
//!
//! SSE priming events (an empty `data:` that clients before 2025-11-25 try to parse as JSON)
//! are not sent: switchboard does not offer stream resumption.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{McpServer, SessionLink, era, not_initialized};
use crate::auth::{Bearer, origin_allowed};
use crate::control::Local;

/// The session header of streamable HTTP.
const SESSION_HEADER: &str = "mcp-session-id";

/// The header that names the consumer an HTTP session reads as, at its `initialize` (the
/// `consumer` query parameter of the `/mcp` URL does the same, for hosts that take a URL only).
pub const CONSUMER_HEADER: &str = "X-Switchboard-Consumer";

/// One HTTP session as the guard knows it.
pub struct HttpSession {
    /// Cancelled to end the session (DELETE, idle).
    ended: CancellationToken,
    /// Sessions that ended and whose server is not dropped yet (the guard's count): they
    /// still hold their memory, so they count against `mcp.maxSessions`.
    ending: Arc<AtomicUsize>,
    /// Cancelled once the MCP session itself is over (its server dropped or ended).
    closed: CancellationToken,
    attached: AtomicBool,
    /// The session's link, once attached: told of each call.
    link: std::sync::OnceLock<std::sync::Weak<SessionLink>>,
    /// Responses in progress (a request's body, an open stream).
    busy: AtomicUsize,
    /// When it was last busy.
    last: Mutex<Instant>,
}

impl HttpSession {
    fn new(ending: Arc<AtomicUsize>) -> Arc<HttpSession> {
        Arc::new(HttpSession {
            ended: CancellationToken::new(),
            ending,
            closed: CancellationToken::new(),
            attached: AtomicBool::new(false),
            link: std::sync::OnceLock::new(),
            busy: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        })
    }

    /// Ends `link`'s session when this HTTP session is deleted, and tells it of the
    /// session's calls and whether a stream or a request is in progress (linked once).
    pub fn attach(self: &Arc<Self>, link: &Arc<SessionLink>) {
        if self.attached.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = self.link.set(Arc::downgrade(link));
        link.reports_sends();
        let session = Arc::downgrade(self);
        link.alive_when(Arc::new(move || {
            session
                .upgrade()
                .is_some_and(|s| s.busy.load(Ordering::Acquire) > 0)
        }));
        let ended = self.ended.clone();
        let closed = self.closed.clone();
        let ending = self.ending.clone();
        let tasks = link.tasks().clone();
        let link = link.clone();
        // Ends with the session or the shutdown (`ended` is the shutdown's child), then waits
        // at most `RELEASE_GRACE`.
        tasks.spawn(async move {
            tokio::select! {
                _ = ended.cancelled() => link.end(),
                _ = link.ended().cancelled() => {}
            }
            let released = link.released();
            drop(link);
            // Until its server is dropped the session still holds its buffers: a new one
            // admitted in its place meanwhile would double the memory that
            // `mcp.maxSessions` bounds (the soak's churn refilled 256 slots at once). At most
            // `RELEASE_GRACE`, so that a reference held somewhere never locks anyone out.
            ending.fetch_add(1, Ordering::AcqRel);
            closed.cancel();
            let since = Instant::now();
            let on_time = tokio::time::timeout(RELEASE_GRACE, released.cancelled()).await;
            ending.fetch_sub(1, Ordering::AcqRel);
            match on_time {
                Ok(()) => tracing::debug!(after = ?since.elapsed(), "MCP session released"),
                Err(_) => tracing::warn!(
                    "an ended MCP session was not released within {RELEASE_GRACE:?}; it no \
                     longer counts against `mcp.maxSessions`"
                ),
            }
        });
    }

    /// A request came on this session: a sign its client is there.
    fn called(&self) {
        if let Some(link) = self.link.get().and_then(std::sync::Weak::upgrade) {
            link.called();
        }
    }

    /// Counts a response in progress until the returned guard is dropped.
    fn busy(self: &Arc<HttpSession>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// Whether nothing is in progress and nothing was for `idle`.
    fn is_idle(&self, idle: Duration) -> bool {
        self.busy.load(Ordering::Acquire) == 0 && self.last.lock().unwrap().elapsed() >= idle
    }
}

/// A response of a session in progress.
struct Busy(Arc<HttpSession>);

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap() = Instant::now();
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its session busy until it ends or is dropped.
struct Counted {
    inner: axum::body::BodyDataStream,
    _busy: Busy,
}

impl Stream for Counted {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.inner).poll_next(cx)
    }
}

/// `response`, its body keeping `session` busy.
fn counted(response: Response, session: Option<&Arc<HttpSession>>) -> Response {
    let Some(session) = session else {
        return response;
    };
    let busy = session.busy();
    let (parts, body) = response.into_parts();
    let body = Body::from_stream(Counted {
        inner: body.into_data_stream(),
        _busy: busy,
    });
    Response::from_parts(parts, body)
}

/// Where a request's response is: in progress, with the results that wait for its outcome
/// (the session link and the JSON-RPC id), or over.
enum Phase {
    Open(Vec<(std::sync::Weak<SessionLink>, rmcp::model::RequestId)>),
    /// The response went out (`true`), or never will (`false`).
    Over(bool),
}

/// One request in flight: cancelled when its client goes away; tells the session link what
/// became of the response that carries its result.
pub struct RequestGuard {
    cancel: CancellationToken,
    phase: Mutex<Phase>,
    /// How many elicitation forms the request's stream has carried (see [`super::elicit`]).
    forms: tokio::sync::watch::Sender<usize>,
    /// A stateless request's session: ended once the response is settled.
    owns: Mutex<Option<super::link::EndOnDrop>>,
}

/// Why a result that did not go out comes back.
const GONE: &str = "the client went away before the result was sent";

impl RequestGuard {
    fn new() -> Arc<RequestGuard> {
        Arc::new(RequestGuard {
            cancel: CancellationToken::new(),
            phase: Mutex::new(Phase::Open(Vec::new())),
            forms: tokio::sync::watch::Sender::new(0),
            owns: Mutex::new(None),
        })
    }

    /// Waits (at most `limit`) until the request's stream has carried `count` forms, so that
    /// a form sent in relation to this request goes out on its stream before its result.
    pub async fn forms_sent(&self, count: usize, limit: std::time::Duration) -> bool {
        let mut seen = self.forms.subscribe();
        tokio::time::timeout(limit, seen.wait_for(|n| *n >= count))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// How many forms the request's stream has carried.
    pub fn forms_carried(&self) -> usize {
        *self.forms.borrow()
    }

    /// Fires when the client dropped the connection before the response was sent.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Tells `link` what becomes of the response, which carries the result of request `id`.
    pub fn report_to(&self, link: &Arc<SessionLink>, id: rmcp::model::RequestId) {
        let mut phase = self.phase.lock().unwrap();
        match &mut *phase {
            Phase::Open(waiting) => waiting.push((Arc::downgrade(link), id)),
            Phase::Over(true) => link.written(&id),
            Phase::Over(false) => link.unwritten(&id, GONE),
        }
    }

    /// Keeps a stateless request's session until the response is settled, then ends it (`end`
    /// dropped): its claims are settled by this response before the session closes.
    pub fn ends(&self, end: super::link::EndOnDrop) {
        *self.owns.lock().unwrap() = Some(end);
    }

    /// The frame carrying the response is being handed to hyper: from now on the client may
    /// have the result ([`SessionLink::handing`]).
    fn handing(&self) {
        if let Phase::Open(waiting) = &*self.phase.lock().unwrap() {
            for (link, id) in waiting {
                if let Some(link) = link.upgrade() {
                    link.handing(id);
                }
            }
        }
    }

    fn finish(&self, sent: bool) {
        self.settle(sent);
        // The session of a stateless request ends once its response is settled.
        drop(self.owns.lock().unwrap().take());
    }

    fn settle(&self, sent: bool) {
        let waiting = match std::mem::replace(&mut *self.phase.lock().unwrap(), Phase::Over(sent)) {
            Phase::Open(waiting) => waiting,
            done @ Phase::Over(_) => {
                *self.phase.lock().unwrap() = done;
                return;
            }
        };
        if !sent {
            self.cancel.cancel();
        }
        for (link, id) in waiting {
            let Some(link) = link.upgrade() else {
                continue;
            };
            if sent {
                link.written(&id);
            } else {
                link.unwritten(&id, GONE);
            }
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        // A request that never produced a body (refused before its handler ran, or whose
        // handler is still running when everything else is gone) gives its claims back.
        if let Phase::Open(waiting) = &*self.phase.lock().unwrap() {
            for (link, id) in waiting {
                if let Some(link) = link.upgrade() {
                    link.unwritten(id, "the request ended without a response");
                }
            }
        }
    }
}

/// The consumer an HTTP request names for its session ([`CONSUMER_HEADER`], or the
/// `consumer` query parameter); `None` over stdio or when it names none.
pub fn named_consumer(extensions: &rmcp::model::Extensions) -> Option<String> {
    let parts = extensions.get::<axum::http::request::Parts>()?;
    let header = parts
        .headers
        .get(CONSUMER_HEADER)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let query = || {
        axum::extract::Query::<std::collections::HashMap<String, String>>::try_from_uri(&parts.uri)
            .ok()?
            .0
            .remove("consumer")
    };
    header.or_else(query).filter(|n| !n.trim().is_empty())
}

/// Whether an rmcp request context is of an HTTP session (2025-11-25); false for a stateless
/// request (2026-07-28) and over stdio.
pub fn has_session(extensions: &rmcp::model::Extensions) -> bool {
    extensions
        .get::<axum::http::request::Parts>()
        .is_some_and(|parts| parts.extensions.get::<Arc<HttpSession>>().is_some())
}

/// The request guard of an rmcp request context, on HTTP.
pub fn request_guard(extensions: &rmcp::model::Extensions) -> Option<Arc<RequestGuard>> {
    extensions
        .get::<axum::http::request::Parts>()?
        .extensions
        .get::<Arc<RequestGuard>>()
        .cloned()
}

/// A response body that tells its request guard whether the request's response was sent.
///
/// Sent means hyper took the frame carrying the JSON-RPC response (it came back for the next
/// one): clients may close the stream as soon as they have the response (rmcp's waits 50 ms
/// for the end, then drops it). A body that ends, or is dropped, before that was not sent: a
/// cancelled request's stream ends without its response.
struct Guarded {
    inner: axum::body::BodyDataStream,
    guard: Arc<RequestGuard>,
    done: bool,
    /// Whether the last frame handed to hyper carries the response, until hyper asks for the
    /// next.
    handed: Option<bool>,
    /// Hyper took a frame carrying the response.
    responded: bool,
}

impl Guarded {
    fn new(inner: axum::body::BodyDataStream, guard: Arc<RequestGuard>) -> Guarded {
        Guarded {
            inner,
            guard,
            done: false,
            handed: None,
            responded: false,
        }
    }
}

impl Stream for Guarded {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(response) = self.handed.take() {
            self.responded |= response;
        }
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        match &polled {
            Poll::Ready(None) => {
                self.done = true;
                let responded = self.responded;
                self.guard.finish(responded);
            }
            Poll::Ready(Some(Ok(frame))) => {
                if memchr_form(frame) {
                    self.guard.forms.send_modify(|n| *n += 1);
                }
                let response = !self.responded && carries_response(frame);
                if response {
                    self.guard.handing();
                }
                self.handed = Some(response)
            }
            _ => {}
        }
        polled
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if !self.done {
            self.guard.finish(self.responded);
        }
    }
}

/// Whether `frame` carries an elicitation form (`elicitation/create`).
fn memchr_form(frame: &[u8]) -> bool {
    const METHOD: &[u8] = b"\"elicitation/create\"";
    frame.windows(METHOD.len()).any(|w| w == METHOD)
}

/// Whether `frame` (one SSE event, or a plain JSON body) is a JSON-RPC response: an `id`, a
/// `result` or an `error`, and no `method` (a request from the server has one).
fn carries_response(frame: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Envelope {
        id: Option<serde::de::IgnoredAny>,
        method: Option<serde::de::IgnoredAny>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    let Ok(text) = std::str::from_utf8(frame) else {
        return false;
    };
    let json = if text.trim_start().starts_with('{') {
        text.to_string()
    } else {
        // SSE: the event's `data:` lines, joined by newlines.
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect::<Vec<_>>()
            .join("\n")
    };
    serde_json::from_str::<Envelope>(&json).is_ok_and(|e| {
        e.id.is_some() && e.method.is_none() && (e.result.is_some() || e.error.is_some())
    })
}

/// What the guard checks and remembers.
struct Guard {
    /// `events/stream`, answered here.
    streams: super::events::HttpStreams,
    body_limit: usize,
    bearer: Bearer,
    origins: Vec<String>,
    max_sessions: usize,
    sessions: Mutex<HashMap<String, Arc<HttpSession>>>,
    /// Sessions ended but not yet released (see [`HttpSession::attach`]).
    ending: Arc<AtomicUsize>,
    /// `initialize`s refused since the sessions reached `mcp.maxSessions` (0: not full). The
    /// first refusal of a run is logged, and the run's end with its count, not each one.
    refused: AtomicUsize,
}

/// How long an ended session may count against `mcp.maxSessions` while its server drops.
const RELEASE_GRACE: Duration = Duration::from_secs(10);

impl Guard {
    /// Forgets the sessions that are over, and ends (and forgets) those idle for `idle`;
    /// returns the ids it ended, for rmcp's session manager.
    fn sweep(&self, idle: Duration) -> Vec<String> {
        let mut ended = Vec::new();
        self.sessions.lock().unwrap().retain(|id, s| {
            if s.closed.is_cancelled() {
                return false;
            }
            if s.is_idle(idle) {
                s.ended.cancel();
                ended.push(id.clone());
                return false;
            }
            true
        });
        ended
    }
}

/// Who may use `/mcp`.
#[derive(Clone)]
pub struct Access {
    /// The bearer token check (the ingest token).
    pub bearer: Bearer,
    /// Browser origins allowed besides loopback ones (`mcp.allowedOrigins`).
    pub origins: Vec<String>,
    /// The listener is on a loopback address (else the `Host` check is left to the token).
    pub loopback: bool,
    /// The largest request body (`http.bodyLimit`, as for ingest).
    pub body_limit: usize,
    /// A session with nothing in progress for this long ends (`mcp.sessionIdleTimeout`).
    pub session_idle: Duration,
    /// The most sessions open at once (`mcp.maxSessions`).
    pub max_sessions: usize,
}

/// The `/mcp` router: one session (and consumer) per client, behind the guard; sessions run
/// their tasks on `tasks`.
pub fn router(local: Local, access: Access, tasks: tokio_util::task::TaskTracker) -> axum::Router {
    let shutdown = local.shutdown().clone();
    let loopback = access.loopback;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let body_limit = access.body_limit;
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(body_limit)
        .with_sse_retry(None)
        .with_cancellation_token(shutdown.child_token());
    if !loopback {
        // Reachable beyond loopback only with the bearer token (checked at start).
        config = config.disable_allowed_hosts();
    }
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.sse_retry = None;
    // Idle sessions are ended by the guard, which knows a wait in flight is not idle.
    sessions.session_config.keep_alive = None;
    let sessions = Arc::new(sessions);
    let guard = Arc::new(Guard {
        streams: super::events::HttpStreams {
            api: crate::backend::Api::Local(local.clone()),
            tasks: tasks.clone(),
            shutdown: shutdown.clone(),
        },
        body_limit,
        bearer: access.bearer,
        origins: access.origins,
        max_sessions: access.max_sessions.max(1),
        sessions: Mutex::default(),
        ending: Arc::default(),
        refused: AtomicUsize::new(0),
    });
    {
        let (guard, sessions) = (guard.clone(), sessions.clone());
        let idle = access.session_idle;
        let every = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
        tasks.spawn(async move {
            use rmcp::transport::streamable_http_server::session::SessionManager;
            let mut trim_due = false;
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                if trim_due {
                    // The sessions ended one tick ago; their tasks have dropped their buffers.
                    give_back_freed_memory();
                }
                let ended = guard.sweep(idle);
                trim_due = !ended.is_empty();
                for id in ended {
                    tracing::info!(session = %id, idle = ?idle, "MCP session idle; ended it");
                    let _ = sessions.close_session(&id.into()).await;
                }
            }
        });
    }
    let service_tasks = tasks.clone();
    let service = StreamableHttpService::new(
        move || Ok(McpServer::local(local.clone(), service_tasks.clone(), None)),
        sessions,
        config,
    );
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(guard, guard_mcp))
}

/// Returns the heap's free pages to the system. Each session holds about 160 kB of transport
/// buffers; when abandoned sessions expire by the hundred and new ones take their place,
/// glibc's allocator keeps the freed pages and cannot always reuse them, so the daemon's RSS
/// rose in steps under session churn although nothing was held (issue 26's soak: +13 MiB in
/// 10 minutes with the live heap flat). Called one sweep after a sweep that ended sessions,
/// so at most once per sweep interval; it costs a walk of the heap's free lists.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only releases free memory; it takes the allocator's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// 400 with a JSON-RPC error body.
fn jsonrpc_error(id: Value, code: i64, message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        ),
    )
        .into_response()
}

fn refuse(status: StatusCode, code: &str, message: String) -> Response {
    (
        status,
        axum::Json(json!({"error": code, "message": message})),
    )
        .into_response()
}

async fn guard_mcp(State(g): State<Arc<Guard>>, request: Request<Body>, next: Next) -> Response {
    if !request.uri().path().starts_with("/mcp") {
        return next.run(request).await;
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let shown = String::from_utf8_lossy(origin.as_bytes()).into_owned();
        if !origin_allowed(&shown, &g.origins) {
            return refuse(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                format!(
                    "origin \"{shown}\" may not use /mcp; only loopback origins and those in \
                     `mcp.allowedOrigins` may"
                ),
            );
        }
    }
    if let Err(r) = g.bearer.check(request.headers()) {
        let mut response = refuse(StatusCode::UNAUTHORIZED, r.code, r.message);
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(r#"Bearer realm="switchboard""#),
        );
        return response;
    }
    crate::listener::authenticated(request.extensions());
    let session_id = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let known = session_id
        .as_ref()
        .and_then(|id| g.sessions.lock().unwrap().get(id).cloned());
    if session_id.is_none()
        && matches!(*request.method(), Method::GET | Method::DELETE)
        && new_era_header(request.headers())
    {
        // No session, no stream and nothing to delete in 2026-07-28.
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST")],
            "Method Not Allowed: MCP 2026-07-28 has no sessions; POST each request",
        )
            .into_response();
    }
    match *request.method() {
        Method::DELETE => {
            let Some(id) = session_id else {
                return next.run(request).await;
            };
            let Some(session) = g.sessions.lock().unwrap().remove(&id) else {
                return refuse(
                    StatusCode::NOT_FOUND,
                    "session_not_found",
                    format!("no MCP session \"{id}\"; it ended or never existed"),
                );
            };
            session.ended.cancel();
            let response = next.run(request).await;
            if response.status().is_success() {
                StatusCode::OK.into_response()
            } else {
                response
            }
        }
        Method::POST => post(&g, request, next, session_id, known).await,
        _ => {
            let mut request = request;
            if let Some(session) = &known {
                request.extensions_mut().insert(session.clone());
            }
            // An open stream (GET) keeps its session from being idle.
            counted(next.run(request).await, known.as_ref())
        }
    }
}

/// A POST to `/mcp`: read and checked here (size, JSON-RPC shape, `server/discover`, a request
/// before `initialize`, the session cap), then handed to rmcp with its request guard, and its
/// response body watched.
async fn post(
    g: &Guard,
    request: Request<Body>,
    next: Next,
    session_id: Option<String>,
    known: Option<Arc<HttpSession>>,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let bytes = match read_body(g, body).await {
        Ok(bytes) => bytes,
        Err(refused) => return *refused,
    };
    let (message, parsed) = match parse_message(&bytes) {
        Ok(m) => m,
        Err(refused) => return *refused,
    };
    if let Some(answer) = answer_early(&message, &parsed, session_id.is_some()) {
        return answer;
    }
    let method = message.get("method").and_then(Value::as_str);
    let is_request = method.is_some() && message.get("id").is_some_and(|id| !id.is_null());
    let created = match (&session_id, known.clone()) {
        (_, Some(session)) => {
            if is_request {
                session.called();
            }
            parts.extensions.insert(session);
            None
        }
        (None, None) if method == Some("initialize") => {
            let session = match g.admit(&message) {
                Ok(session) => session,
                Err(refused) => return *refused,
            };
            parts.extensions.insert(session.clone());
            Some(session)
        }
        _ => None,
    };
    if method == Some("events/stream") && is_request && known.is_some() {
        // Answered here, on this request's own stream (see `super::events`).
        return g.streams.answer(&message).await;
    }
    let guard = is_request.then(RequestGuard::new);
    if let Some(guard) = &guard {
        parts.extensions.insert(guard.clone());
    }
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    if let Some(session) = &created
        && let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        g.sessions
            .lock()
            .unwrap()
            .insert(id.to_string(), session.clone());
    }
    let response = counted(response, known.as_ref().or(created.as_ref()));
    if response.status() == StatusCode::NOT_FOUND
        && let Some(id) = &session_id
        && let Some(gone) = g.sessions.lock().unwrap().remove(id)
    {
        gone.ended.cancel();
    }
    match guard {
        Some(guard) => {
            let (parts, body) = response.into_parts();
            let body = Body::from_stream(Guarded::new(body.into_data_stream(), guard));
            Response::from_parts(parts, body)
        }
        None => response,
    }
}

/// Whether the request's `MCP-Protocol-Version` header names 2026-07-28 or later.
fn new_era_header(headers: &axum::http::HeaderMap) -> bool {
    let version = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| serde_json::from_value(Value::String(v.to_string())).ok());
    era::is_new(version.as_ref())
}

/// The whole body of a POST, within `http.bodyLimit` and the body deadline.
async fn read_body(g: &Guard, body: Body) -> Result<Bytes, Box<Response>> {
    axum::body::to_bytes(body, g.body_limit).await.map_err(|e| {
        Box::new(if crate::listener::BodyDeadline::is_cause_of(&e) {
            refuse(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "{}; send the whole body at once",
                    crate::listener::BodyDeadline
                ),
            )
        } else if e.to_string().contains("length limit exceeded") {
            // http-body-util's `LengthLimitError`, which axum wraps.
            refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!(
                    "request body is larger than the limit of {} bytes (`http.bodyLimit`)",
                    g.body_limit
                ),
            )
        } else {
            refuse(
                StatusCode::BAD_REQUEST,
                "unreadable_body",
                format!("cannot read the request body: {e}"),
            )
        })
    })
}

/// The body as JSON and as a JSON-RPC message. Malformed JSON-RPC gets the error the spec
/// names, as on stdio: -32700 for a body that is not JSON, -32600 for JSON that is not one
/// request (a batch, which 2025-11-25 dropped, or an object that is not a JSON-RPC message).
fn parse_message(
    bytes: &[u8],
) -> Result<(Value, rmcp::model::ClientJsonRpcMessage), Box<Response>> {
    let message: Value = serde_json::from_slice(bytes).map_err(|e| {
        Box::new(jsonrpc_error(
            Value::Null,
            -32700,
            format!("Parse error: {e}"),
        ))
    })?;
    if message.is_array() {
        return Err(Box::new(jsonrpc_error(
            Value::Null,
            -32600,
            "Invalid Request: JSON-RPC batches are not supported (protocol 2025-11-25); send one \
             message per request"
                .into(),
        )));
    }
    match serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(message.clone()) {
        Ok(parsed) => Ok((message, parsed)),
        Err(_) => {
            let id = message.get("id").cloned().unwrap_or(Value::Null);
            Err(Box::new(jsonrpc_error(
                id,
                -32600,
                "Invalid Request: not a JSON-RPC 2.0 request, notification or response".into(),
            )))
        }
    }
}

/// The answer given here rather than by rmcp, if any: `server/discover` refused to a client
/// kept on 2025-11-25, a request of that era before `initialize` (no session yet) told to
/// initialize first, a known method with params that do not fit it.
fn answer_early(
    message: &Value,
    parsed: &rmcp::model::ClientJsonRpcMessage,
    has_session: bool,
) -> Option<Response> {
    let json = |status: StatusCode, body: String| {
        (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    };
    if era::is_removed(message) {
        return Some(json(
            StatusCode::NOT_FOUND,
            era::removed_answer(message).to_string(),
        ));
    }
    let discover = message.get("method").and_then(Value::as_str) == Some("server/discover");
    if discover && era::refuses_discover(message) {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        return Some(json(StatusCode::OK, era::discover_refusal(id).to_string()));
    }
    if !has_session
        && !discover
        && !era::is_inline(message)
        && let rmcp::model::JsonRpcMessage::Request(req) = parsed
        && !matches!(
            req.request,
            rmcp::model::ClientRequest::InitializeRequest(_)
                | rmcp::model::ClientRequest::PingRequest(_)
        )
    {
        let body = not_initialized(json!(req.id)).to_string();
        return Some(json(StatusCode::BAD_REQUEST, body));
    }
    super::invalid_params(parsed, message).map(|answer| json(StatusCode::OK, answer.to_string()))
}

impl Guard {
    /// A new session for `initialize`, or 503 while `mcp.maxSessions` are open.
    fn admit(&self, initialize: &Value) -> Result<Arc<HttpSession>, Box<Response>> {
        let open = {
            let mut all = self.sessions.lock().unwrap();
            all.retain(|_, s| !s.closed.is_cancelled());
            all.len() + self.ending.load(Ordering::Acquire)
        };
        if open >= self.max_sessions {
            if self.refused.fetch_add(1, Ordering::AcqRel) == 0 {
                tracing::warn!(
                    open,
                    "MCP over HTTP is refusing new sessions: `mcp.maxSessions` are open; \
                     the end of this is logged with the number refused"
                );
            }
            let id = initialize.get("id").cloned().unwrap_or(Value::Null);
            let body = json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": -32000,
                "message": format!(
                    "too many MCP sessions: {open} are open (`mcp.maxSessions`); end \
                     sessions you do not use (HTTP DELETE), or wait for idle ones to expire"
                ),
            }});
            let mut response = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            return Err(Box::new(response));
        }
        let refused = self.refused.swap(0, Ordering::AcqRel);
        if refused > 0 {
            tracing::warn!(refused, "MCP over HTTP takes new sessions again");
        }
        Ok(HttpSession::new(self.ending.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::Core;
    use crate::control::ops::{Append, Open, Wait};
    use crate::message::NewMessage;
    use futures::StreamExt;

    const RESPONSE: &str = "data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"items\":[]}}\n\n";
    const PROGRESS: &str = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\
                            \"params\":{\"progressToken\":1,\"progress\":1}}\n\n";

    /// A core with one auto item claimed by a session, the session's link holding it for
    /// request 3, and that request's guard reporting to the link.
    async fn claimed() -> (Arc<Core>, Arc<SessionLink>, Arc<RequestGuard>) {
        let rules = crate::rules::RuleSet::parse(
            r#"{"rules":[{"name":"r","mode":"auto","prompt":"p","tools":["view"]}]}"#,
        )
        .unwrap();
        let core = Core::memory(Default::default(), rules);
        let local = Local::bare(core.clone());
        local
            .call(Append {
                messages: vec![NewMessage::new("s", "c", "m")],
                source: "test".into(),
            })
            .await
            .unwrap();
        let session = local
            .apply_now(Open {
                spec: Default::default(),
                handle: None,
            })
            .unwrap();
        let took = local
            .call(Wait {
                session: session.id,
                consumer: session.consumer,
                max: 10,
                timeout_ms: 5_000,
            })
            .await
            .unwrap();
        assert_eq!(took.items.len(), 1);
        let link = SessionLink::new(
            crate::backend::Api::Local(local),
            &CancellationToken::new(),
            tokio_util::task::TaskTracker::new(),
        );
        link.reports_sends();
        let id = rmcp::model::RequestId::Number(3);
        link.hold(id.clone(), vec![took.items[0].action_id]);
        let guard = RequestGuard::new();
        guard.report_to(&link, id);
        (core, link, guard)
    }

    /// A body of `frames` that then stays open (the server has not ended the stream yet).
    fn body(frames: &[&'static str], guard: Arc<RequestGuard>) -> Guarded {
        let frames: Vec<_> = frames
            .iter()
            .map(|f| Ok::<_, std::io::Error>(Bytes::from(*f)))
            .collect();
        let stream = futures::stream::iter(frames).chain(futures::stream::pending());
        Guarded::new(Body::from_stream(stream).into_data_stream(), guard)
    }

    /// Polls `body` as hyper would, `n` times, without blocking.
    fn poll(body: &mut Guarded, n: usize) {
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        for _ in 0..n {
            let _ = Pin::new(&mut *body).poll_next(&mut cx);
        }
    }

    /// (delivered, released) so far.
    fn settled(core: &Core) -> (u64, u64) {
        let c = core.stats().delivery.counters;
        (c.delivered, c.released)
    }

    /// Lets the grace of a result that left run out (the clock is paused).
    async fn after_grace() {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }

    /// (delivered, released) once a body of `frames` that stays open was polled `n` times and
    /// then dropped (the client went away), and the grace ran out.
    async fn settled_after(frames: &[&'static str], n: usize) -> (u64, u64) {
        let (core, _link, guard) = claimed().await;
        let mut b = body(frames, guard);
        poll(&mut b, n);
        drop(b);
        after_grace().await;
        settled(&core)
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_closing_once_it_has_the_response_gets_its_claims_delivered_after_the_grace() {
        // hyper took the response frame and came back for more; then the client closed. The
        // session is still there at the end of the grace (no HTTP session says otherwise).
        assert_eq!(settled_after(&[PROGRESS, RESPONSE], 3).await, (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_gone_before_the_response_was_taken_gets_its_claims_released() {
        // Only a progress notification went out.
        assert_eq!(settled_after(&[PROGRESS], 2).await, (0, 1));
        // The response frame was handed over but hyper never came back for more.
        assert_eq!(settled_after(&[RESPONSE], 1).await, (0, 1));
    }

    /// (delivered, released) when the session calls once, after its response body (which
    /// ends after the response) was polled `polls_before` times, and then ends: before the
    /// body is done when `ends_first`, else after.
    async fn settled_when_a_call_comes_after(polls_before: usize, ends_first: bool) -> (u64, u64) {
        let (core, link, guard) = claimed().await;
        let stream = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(RESPONSE))]);
        let mut b = Guarded::new(Body::from_stream(stream).into_data_stream(), guard);
        poll(&mut b, polls_before);
        link.called();
        if ends_first {
            link.end();
        }
        poll(&mut b, 2 - polls_before);
        drop(b);
        link.end();
        settled(&core)
    }

    #[tokio::test(start_paused = true)]
    async fn an_ack_that_overtakes_the_report_of_the_write_still_shows_the_client_had_it() {
        // The response frame is handed to hyper; the client reads it and calls again (say
        // `channel_ack`) on another connection before hyper came back for more and the body
        // ended; then the client ends its session. Its call came after the result could reach
        // it, so the claims are delivered, not given back as maybe seen.
        assert_eq!(settled_when_a_call_comes_after(1, false).await, (1, 0));
        // The same when the session's DELETE, too, comes before the body is done (the client
        // left the response's stream open behind it).
        assert_eq!(settled_when_a_call_comes_after(1, true).await, (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_before_the_response_was_handed_over_does_not_count_as_its_ack() {
        // A call that came while the result was still being made (a concurrent tool call)
        // says nothing about the result: a session that ends then gives the claims back.
        assert_eq!(settled_when_a_call_comes_after(0, false).await, (0, 1));
        assert_eq!(settled_when_a_call_comes_after(0, true).await, (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_whose_server_rmcp_dropped_settles_its_results_as_an_ended_one() {
        // rmcp can be done with a session (its input ended) before the HTTP session's DELETE
        // ends the link: dropping the server's last handle ends the session the same way, so
        // a result the client answered is delivered rather than released by the close.
        let (core, link, guard) = claimed().await;
        let mut b = body(&[RESPONSE], guard);
        poll(&mut b, 1);
        link.called();
        drop(link.end_on_drop());
        assert_eq!(settled(&core), (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_ends_without_its_response_releases() {
        // A cancelled request's stream: rmcp closes it without the response.
        let (core, _link, guard) = claimed().await;
        let stream = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(PROGRESS))]);
        let mut b = Guarded::new(Body::from_stream(stream).into_data_stream(), guard);
        poll(&mut b, 2);
        assert_eq!(settled(&core), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_sent_to_its_end_delivers_once_the_grace_is_over() {
        let (core, _link, guard) = claimed().await;
        let stream = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(RESPONSE))]);
        let mut b = Guarded::new(Body::from_stream(stream).into_data_stream(), guard);
        poll(&mut b, 2);
        drop(b);
        assert_eq!(settled(&core), (0, 0), "claimed until the grace is over");
        after_grace().await;
        assert_eq!(settled(&core), (1, 0));
    }

    /// A claimed item whose result left on an HTTP session with no stream open and no call
    /// since, once the grace ran out.
    async fn quiet() -> (Arc<Core>, Arc<SessionLink>, Arc<HttpSession>) {
        let session = HttpSession::new(Arc::default());
        let (core, link, guard) = claimed().await;
        session.attach(&link);
        let mut b = body(&[RESPONSE], guard);
        poll(&mut b, 2);
        drop(b);
        after_grace().await;
        (core, link, session)
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_http_session_keeps_its_claims_until_it_calls_or_ends() {
        let (core, _link, session) = quiet().await;
        assert_eq!(
            settled(&core),
            (0, 0),
            "quiet: neither delivered nor released"
        );
        session.called();
        assert_eq!(settled(&core), (1, 0), "its next call says it had it");

        // Another session that ends quiet: its claims come back, marked.
        let (core, link, _session) = quiet().await;
        link.end();
        assert_eq!(settled(&core), (0, 1));
        let local = Local::bare(core.clone());
        let again = local
            .apply_now(Open {
                spec: Default::default(),
                handle: None,
            })
            .unwrap();
        let took = local
            .call(Wait {
                session: again.id,
                consumer: again.consumer,
                max: 10,
                timeout_ms: 0,
            })
            .await
            .unwrap();
        assert!(took.items[0].redelivered, "{:?}", took.items);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_after_the_result_left_gives_the_claims_back() {
        let (core, link, guard) = claimed().await;
        let mut b = body(&[RESPONSE], guard);
        poll(&mut b, 2);
        link.cancelled(&rmcp::model::RequestId::Number(3));
        after_grace().await;
        assert_eq!(settled(&core), (0, 1));
    }

    #[test]
    fn only_a_response_counts_as_the_response() {
        assert!(carries_response(RESPONSE.as_bytes()));
        assert!(carries_response(
            b"id: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"x\",\"error\":{\"code\":-1,\"message\":\"m\"}}\n\n"
        ));
        assert!(carries_response(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
        assert!(!carries_response(PROGRESS.as_bytes()));
        assert!(!carries_response(
            b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sampling/createMessage\",\"result\":{}}\n\n"
        ));
        assert!(!carries_response(b"data: \n\n"), "a priming event");
        assert!(!carries_response(
            b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"res"
        ));
    }
}
