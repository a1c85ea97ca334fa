//! HTTP ingest: the webhook endpoint.
//!
//! [`router`] owns everything between a request and the inbox: authentication (the bearer
//! token, or GitHub's `X-Hub-Signature-256`), limits (body size, a per-source rate limit),
//! decoding, and the status a sender sees. A `202` is sent only once the inbox has the
//! messages in the journal under the fsync policy; a sender that gets anything else may retry.
//!
//! | route | auth | source |
//! | --- | --- | --- |
//! | `POST /v1/messages` | bearer | `http` |
//! | `POST /v1/alertmanager` | bearer | `alertmanager` ([`super::alertmanager`]) |
//! | `POST /v1/github` | `X-Hub-Signature-256` | `github` ([`super::github`]) |
//! | `GET /metrics` | bearer | Prometheus text |
//! | `GET /healthz` | none | `ok` |
//!
//! Every refusal is JSON `{"error": "<code>", "message": "<sentence>"}` with a stable code.
//! The checks run in this order, so a request gets the first that applies: route (404),
//! bearer token (401), method (405), rate limit (429), body size (413), content type (415),
//! JSON syntax (400), shape (422), then the inbox (202, or 503 when it cannot promise
//! durability). A body that has not arrived [`crate::listener::BODY_READ_TIMEOUT`] after its
//! header gets 408 `body_timeout`. Every route authenticates from the headers before it reads
//! a body, and a refusal closes the connection ([`crate::listener`]). `/v1/github`, whose
//! signature is over the body, checks from the headers that a secret is set (403), that the
//! delivery is signed (401) and names its event and delivery (400), and that requests without
//! credentials have room left (503, [`crate::listener::AUTHENTICATED_RESERVE`]); then it reads
//! the body (413) and checks the signature (401), then the rest. Only authenticated requests
//! spend the quota.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{DateTime, Utc};
use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{PayloadError, SourceContext, alertmanager, github};
use crate::auth::Bearer;
use crate::control::{self, StoreError};
use crate::duration;
use crate::inbox::Appended;
use crate::message::{Metadata, NewMessage};

/// Every route, for the 404 message.
const ROUTES: &str =
    "POST /v1/messages, POST /v1/alertmanager, POST /v1/github, GET /metrics, GET /healthz";

/// `Retry-After` when the journal could not take a write: it retries in the background.
const NOT_DURABLE_RETRY_S: u64 = 2;

/// `Retry-After` while shutting down.
const SHUTDOWN_RETRY_S: u64 = 5;

/// HTTP ingest settings (`http` in `switchboard.json`).
#[derive(Clone, Debug, serde::Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpSettings {
    /// Listen address; `--listen` overrides it.
    pub listen: String,
    /// The bearer token; default: the `token` file, generated at first start.
    pub token: Option<String>,
    /// Accept requests without a token (only honoured on a loopback address).
    pub disable_auth: bool,
    /// Shared secret for GitHub's `X-Hub-Signature-256`.
    pub github_secret: Option<String>,
    /// Largest accepted request body in bytes (also `/mcp`'s).
    pub body_limit: usize,
    /// Per-source rate limit, e.g. `"100/1s"`; `"0"` = none.
    pub rate_limit: String,
    /// The reverse proxies whose `X-Forwarded-Host` and `X-Forwarded-Proto` are believed
    /// (addresses, or networks as `ADDR/BITS`); none by default.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<String>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            listen: "127.0.0.1:8787".to_string(),
            token: None,
            disable_auth: false,
            github_secret: None,
            body_limit: 1024 * 1024,
            rate_limit: "200/1s".to_string(),
            trusted_proxies: Vec::new(),
        }
    }
}

impl HttpSettings {
    /// The bearer check these settings ask for.
    pub fn bearer(&self) -> Bearer {
        Bearer::new(self.token.as_deref(), self.disable_auth)
    }
}

/// The HTTP ingest settings a `switchboard.json` change applies while ingest runs
/// (`http.rateLimit`, `http.githubSecret`), with a generation so ingest notices a change with
/// one atomic read.
#[derive(Debug, Default)]
pub struct LiveHttp {
    settings: std::sync::RwLock<HttpSettings>,
    generation: std::sync::atomic::AtomicU64,
}

impl LiveHttp {
    /// Starts from the settings the process started with.
    pub fn new(settings: HttpSettings) -> LiveHttp {
        LiveHttp {
            settings: std::sync::RwLock::new(settings),
            generation: Default::default(),
        }
    }

    /// The current generation (bumped by every change).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The generation and the settings.
    pub fn get(&self) -> (u64, HttpSettings) {
        let s = self.settings.read().unwrap();
        (self.generation(), s.clone())
    }

    /// Replaces the settings when `change` alters them; returns whether it did.
    pub fn update(&self, change: impl FnOnce(&mut HttpSettings)) -> bool {
        let mut s = self.settings.write().unwrap();
        let before = serde_json::to_value(&*s).unwrap_or_default();
        change(&mut s);
        let changed = serde_json::to_value(&*s).unwrap_or_default() != before;
        if changed {
            self.generation
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        changed
    }
}

/// The ingest router (`/v1/...`, `/healthz`, `/metrics`): appends through `cx`, with the
/// settings of `live` (the token and body limit as they were at start).
pub fn router(cx: SourceContext, live: Arc<LiveHttp>) -> Router {
    let ingest = Arc::new(Ingest::new(cx, live));
    let body_limit = ingest.body_limit;
    let bearer = Router::new()
        .route("/v1/messages", post(post_messages))
        .route("/v1/alertmanager", post(post_alertmanager))
        .route("/metrics", get(get_metrics))
        .route_layer(middleware::from_fn_with_state(
            ingest.clone(),
            require_bearer,
        ));
    let github = Router::new()
        .route("/v1/github", post(post_github))
        .route_layer(middleware::from_fn_with_state(ingest.clone(), github_gate));
    Router::new()
        .merge(github)
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(bearer)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(ingest.clone(), finish))
        .with_state(ingest)
}

/// Checks the settings before the ingest listener serves on `bound`: `disableAuth` only on a
/// loopback address (`rateLimit` is checked with the rest of the file, by
/// [`crate::config::check`]). The error is one line for the operator.
pub fn check(settings: &HttpSettings, bound: SocketAddr) -> Result<(), String> {
    if settings.disable_auth && !bound.ip().is_loopback() {
        return Err(format!(
            "switchboard.json: `http.disableAuth` is only honoured on a loopback address, but ingest \
             listens on {bound}; remove `disableAuth` or listen on 127.0.0.1"
        ));
    }
    Ok(())
}

/// `"N/period"` (`"200/1s"`, `"10/1m"`, `"10/m"`): at most N requests per period, in bursts of
/// up to N; `"0"`: no limit.
pub fn parse_rate_limit(text: &str) -> Result<Option<Quota>, String> {
    let s = text.trim();
    if s == "0" {
        return Ok(None);
    }
    let Some((count, period)) = s.split_once('/') else {
        return Err("expected \"N/period\" (e.g. \"200/1s\") or \"0\" for none".into());
    };
    let (count, period) = duration::parse_quota(count, period)?;
    Quota::with_period(period / count.get())
        .map(|q| Some(q.allow_burst(count)))
        .ok_or_else(|| "the period after `/` must be longer than zero".into())
}

/// Which quota a request spends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Source {
    Http,
    Alertmanager,
    Github,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Http => "http",
            Source::Alertmanager => alertmanager::SERVER,
            Source::Github => github::SERVER,
        }
    }
}

/// The router's state.
struct Ingest {
    /// Where the messages go: the daemon's operations, as for every other source.
    cx: SourceContext,
    auth: Bearer,
    body_limit: usize,
    /// The settings a `switchboard.json` change applies live.
    settings: Arc<LiveHttp>,
    /// What the live settings were built into.
    live: std::sync::RwLock<LiveIngest>,
    /// The generation of `settings` that `live` was built from.
    built: std::sync::atomic::AtomicU64,
    /// Refusals by code and status, for `/metrics`.
    rejected: std::sync::Mutex<BTreeMap<(&'static str, u16), u64>>,
    /// The journal outage under way, if any: logged at its start and end only.
    outage: super::Outage,
}

/// The rate limit and GitHub secret, rebuilt when a config reload changes them.
struct LiveIngest {
    rate_limit: String,
    github_secret: Option<Vec<u8>>,
    limiter: Option<DefaultKeyedRateLimiter<Source>>,
}

impl LiveIngest {
    fn new(http: &HttpSettings) -> LiveIngest {
        let limiter = match parse_rate_limit(&http.rate_limit) {
            Ok(quota) => quota.map(RateLimiter::keyed),
            Err(e) => {
                tracing::error!(
                    rate_limit = %http.rate_limit,
                    "invalid `http.rateLimit`: {e}; ingest runs without a rate limit"
                );
                None
            }
        };
        let github_secret = http
            .github_secret
            .as_ref()
            .filter(|s| !s.is_empty())
            .map(|s| s.as_bytes().to_vec());
        LiveIngest {
            rate_limit: http.rate_limit.trim().to_string(),
            github_secret,
            limiter,
        }
    }
}

impl Ingest {
    fn new(cx: SourceContext, settings: Arc<LiveHttp>) -> Ingest {
        let (generation, http) = settings.get();
        Ingest {
            cx,
            auth: http.bearer(),
            body_limit: http.body_limit,
            live: std::sync::RwLock::new(LiveIngest::new(&http)),
            built: std::sync::atomic::AtomicU64::new(generation),
            settings,
            rejected: Default::default(),
            outage: Default::default(),
        }
    }

    /// `/metrics`: the daemon's families, then this listener's refusals, as OpenMetrics text.
    async fn metrics(&self) -> String {
        let mut out = self.cx.metrics().await;
        let c = out.counter(
            "switchboard_http_rejections_total",
            "HTTP ingest requests refused, by error code and status.",
        );
        for ((code, status), n) in self.rejected.lock().unwrap().iter() {
            c.with(
                &[("code", code), ("status", &status.to_string())],
                crate::metrics::count(*n),
            );
        }
        out.encode()
    }

    /// The live settings; rebuilt first when a config reload changed them (one atomic read
    /// otherwise). A rebuilt rate limiter starts with full quotas.
    fn live(&self) -> std::sync::RwLockReadGuard<'_, LiveIngest> {
        use std::sync::atomic::Ordering;
        if self.settings.generation() != self.built.load(Ordering::Acquire) {
            let mut live = self.live.write().unwrap();
            let (generation, http) = self.settings.get();
            if generation != self.built.load(Ordering::Acquire) {
                *live = LiveIngest::new(&http);
                self.built.store(generation, Ordering::Release);
            }
        }
        self.live.read().unwrap()
    }

    fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        self.auth
            .check(headers)
            .map_err(|r| ApiError::unauthorized(r.code, r.message))
    }

    /// Spends one request of `source`'s quota, or says when to come back.
    fn admit(&self, source: Source) -> Result<(), ApiError> {
        let live = self.live();
        let Some(limiter) = &live.limiter else {
            return Ok(());
        };
        limiter.check_key(&source).map_err(|not_until| {
            let wait = not_until.wait_time_from(limiter.clock().now());
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "too many requests for source `{}` (limit \"{}\"); retry in {secs}s",
                    source.as_str(),
                    live.rate_limit
                ),
            )
            .retry_after(secs)
        })
    }

    /// Appends `batch` and answers 202 once it is durable.
    ///
    /// A 503 because the inbox cannot store (a journal outage) is logged once when the
    /// outage starts and once when it ends; the 503s in between are only counted
    /// (`switchboard_http_rejections_total`).
    async fn store(&self, source: Source, batch: Vec<NewMessage>) -> Result<Response, ApiError> {
        let failed = match self.cx.append(batch, source.as_str()).await {
            Ok(accepted) => {
                if let Some(ended) = self.outage.succeed() {
                    tracing::info!(
                        source = source.as_str(),
                        refused = ended.failures,
                        "ingest stores messages again, after {} answered 503 over {:.1}s",
                        ended.failures,
                        ended.lasted.as_secs_f64()
                    );
                }
                return Ok(
                    (StatusCode::ACCEPTED, axum::Json(Accepted { accepted })).into_response()
                );
            }
            Err(e) => e,
        };
        // The status and code are the one HTTP mapping's; the sentences are ingest's own, and
        // a 5xx says nothing of the daemon's detail (the log has it).
        let (status, code) = (failed.http_status(), failed.code());
        Err(match failed {
            control::ApiError::Store(StoreError::NotDurable { appended, cause }) => {
                self.outage_began(source, "messages kept in memory, not on disk", &cause);
                ApiError::new(
                    status,
                    code,
                    "the messages are kept in memory but not yet on disk; retry later (a retry \
                     with the same ids is acknowledged as a duplicate once they are on disk)"
                        .into(),
                )
                .retry_after(NOT_DURABLE_RETRY_S)
                .accepted(appended)
            }
            control::ApiError::Store(StoreError::TooLarge {
                index,
                batch,
                detail,
                ..
            }) => {
                let at = if batch {
                    format!("[{index}]: ")
                } else {
                    String::new()
                };
                ApiError::new(status, code, format!("{at}{detail}; nothing was stored"))
            }
            control::ApiError::Store(StoreError::Unavailable { cause }) => {
                self.outage_began(source, "the journal cannot take messages", &cause);
                ApiError::new(
                    status,
                    code,
                    "the journal cannot take messages now; retry later (a retry with the same \
                     ids is acknowledged once they are on disk)"
                        .into(),
                )
                .retry_after(NOT_DURABLE_RETRY_S)
            }
            control::ApiError::Store(StoreError::Closed) => ApiError::new(
                status,
                code,
                "switchboard is shutting down; retry later".into(),
            )
            .retry_after(SHUTDOWN_RETRY_S),
            other if status.is_server_error() => {
                self.outage_began(source, "the inbox cannot take messages", &other);
                ApiError::new(
                    status,
                    code,
                    "the inbox cannot take messages now; retry later".into(),
                )
                .retry_after(NOT_DURABLE_RETRY_S)
            }
            other => ApiError::new(status, code, other.to_string()),
        })
    }

    /// Counts a 503 of an append; the first of an outage is logged.
    fn outage_began(&self, source: Source, what: &str, cause: &dyn std::fmt::Display) {
        if self.outage.fail() {
            tracing::warn!(
                source = source.as_str(),
                %cause,
                "ingest answers 503: {what}; until messages are stored again, further 503s \
                 are counted in switchboard_http_rejections_total, not logged"
            );
        }
    }

    /// The body, or 413 past `http.bodyLimit`.
    fn body(&self, body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
        body.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                self.too_large()
            } else if crate::listener::BodyDeadline::is_cause_of(&rejection) {
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "body_timeout",
                    format!(
                        "{}; send the whole body at once",
                        crate::listener::BodyDeadline
                    ),
                )
                .header(header::CONNECTION, "close")
            } else {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "unreadable_body",
                    format!(
                        "cannot read the request body: {}",
                        rejection.body_text().to_lowercase()
                    ),
                )
            }
        })
    }

    fn too_large(&self) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!(
                "request body is larger than the limit of {} bytes (`http.bodyLimit`)",
                self.body_limit
            ),
        )
    }
}

async fn require_bearer(
    State(ingest): State<Arc<Ingest>>,
    request: Request,
    next: Next,
) -> Response {
    match ingest.authorize(request.headers()) {
        Ok(()) => {
            crate::listener::authenticated(request.extensions());
            next.run(request).await
        }
        Err(err) => err.into_response(),
    }
}

/// `POST /v1/messages`: one message object or an array of them.
async fn post_messages(
    State(ingest): State<Arc<Ingest>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    ingest.admit(Source::Http)?;
    let body = ingest.body(body)?;
    json_content_type(&headers)?;
    let batch = match read_messages(&body) {
        Some(batch) => batch,
        // What the direct read refused gets the slow path's exact answer.
        None => generic_messages(parse_json(&body)?)?,
    };
    ingest.store(Source::Http, batch).await
}

/// `POST /v1/alertmanager`: an Alertmanager webhook, version 4.
async fn post_alertmanager(
    State(ingest): State<Arc<Ingest>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    ingest.admit(Source::Alertmanager)?;
    let body = ingest.body(body)?;
    json_content_type(&headers)?;
    let payload = parse_json(&body)?;
    if let Some(n) = payload.get("truncatedAlerts").and_then(Value::as_u64)
        && n > 0
    {
        tracing::warn!(
            truncated = n,
            "alertmanager truncated the group; raise the receiver's `max_alerts`"
        );
    }
    let batch = alertmanager::messages(payload)?;
    ingest.store(Source::Alertmanager, batch).await
}

/// What `/v1/github` checks before it reads a body, from the headers alone: a secret is set
/// (403), the delivery is signed (`X-Hub-Signature-256: sha256=` and 64 hex digits, 401), it
/// names its event and delivery (400), and requests without credentials have room left
/// (503): the body is read, within the anonymous share of the connections, only for a
/// delivery that can be authentic. The signature itself is checked once the body is read.
async fn github_gate(State(ingest): State<Arc<Ingest>>, request: Request, next: Next) -> Response {
    match github_headers(&ingest, request.headers()) {
        Ok(()) => {}
        Err(err) => return err.into_response(),
    }
    if let Some(standing) = crate::listener::Standing::of(request.extensions())
        && standing.may_read_anonymously().is_err()
    {
        return crate::listener::anonymous_share_full();
    }
    next.run(request).await
}

/// The header checks of [`github_gate`].
fn github_headers(ingest: &Ingest, headers: &HeaderMap) -> Result<(), ApiError> {
    if ingest.live().github_secret.is_none() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "github_secret_missing",
            "github deliveries are refused: no `http.githubSecret` is set in switchboard.json, \
             and unsigned deliveries are never accepted"
                .into(),
        ));
    }
    let Some(signature) = header_text(headers, "x-hub-signature-256") else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing_signature",
            "missing `X-Hub-Signature-256` header; set the webhook's secret to `http.githubSecret`"
                .into(),
        ));
    };
    if !github::signature_shaped(signature) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_signature",
            "`X-Hub-Signature-256` is not `sha256=` and 64 hex digits".into(),
        ));
    }
    let event = required_header(headers, "X-GitHub-Event")?;
    if !event
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_header",
            format!("`X-GitHub-Event` \"{event}\" is not an event name"),
        ));
    }
    required_header(headers, "X-GitHub-Delivery")?;
    Ok(())
}

/// `POST /v1/github`: a GitHub webhook delivery, authenticated by its signature (the headers
/// were checked by [`github_gate`]).
async fn post_github(
    State(ingest): State<Arc<Ingest>>,
    headers: HeaderMap,
    extensions: http::Extensions,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let secret = ingest.live().github_secret.clone();
    let body = ingest.body(body)?;
    let signature = header_text(&headers, "x-hub-signature-256").unwrap_or_default();
    let signed = secret
        .as_deref()
        .is_some_and(|secret| github::signature_matches(secret, &body, signature));
    if !signed {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_signature",
            "`X-Hub-Signature-256` does not match the body; check that the webhook's secret is \
             `http.githubSecret`"
                .into(),
        ));
    }
    crate::listener::authenticated(&extensions);
    ingest.admit(Source::Github)?;
    json_content_type(&headers)?;
    let event = required_header(&headers, "X-GitHub-Event")?;
    let delivery = required_header(&headers, "X-GitHub-Delivery")?;
    let payload = parse_json(&body)?;
    let batch = github::messages(event, delivery, &payload)?;
    if event == "ping" {
        return Ok((
            StatusCode::OK,
            axum::Json(json!({
                "accepted": [],
                "message": "pong: the signature is valid; ping deliveries are not stored",
            })),
        )
            .into_response());
    }
    ingest.store(Source::Github, batch).await
}

/// The content type of the OpenMetrics text exposition (Prometheus asks for it first).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `GET /metrics`: the counters, and gauges read now.
async fn get_metrics(State(ingest): State<Arc<Ingest>>) -> Response {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS))],
        ingest.metrics().await,
    )
        .into_response()
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no route for {method} {}; routes: {ROUTES}", uri.path()),
    )
}

/// Outermost layer: gives axum's own refusals (405 with its `Allow` header, 413, ...) the JSON
/// error body, and counts every refusal by code and status.
async fn finish(State(ingest): State<Arc<Ingest>>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (code, response) = match response.extensions().get::<ErrorCode>() {
        Some(ErrorCode(code)) => (*code, response),
        None => {
            let err = match status {
                // axum adds the `Allow` header further out.
                StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
                    status,
                    "method_not_allowed",
                    format!(
                        "method {method} is not allowed on {path}; use {}",
                        allowed_methods(&path)
                    ),
                ),
                StatusCode::PAYLOAD_TOO_LARGE => ingest.too_large(),
                StatusCode::NOT_FOUND => not_found(method, path.parse().unwrap_or_default()).await,
                s if s.is_server_error() => ApiError::new(
                    s,
                    "internal",
                    "internal error; see the switchboard log".into(),
                ),
                s => ApiError::new(
                    s,
                    "bad_request",
                    s.canonical_reason().unwrap_or("bad request").to_lowercase(),
                ),
            };
            (err.code, err.into_response())
        }
    };
    *ingest
        .rejected
        .lock()
        .unwrap()
        .entry((code, status.as_u16()))
        .or_default() += 1;
    response
}

/// The methods of a route, for the 405 message (the `Allow` header comes from the router).
fn allowed_methods(path: &str) -> &'static str {
    match path {
        "/metrics" | "/healthz" => "GET or HEAD",
        _ => "POST",
    }
}

/// The body of a 202: each message's seq and whether it was a duplicate, in request order.
/// Written straight from this type, not through a `Value`.
#[derive(serde::Serialize)]
struct Accepted {
    accepted: Vec<Appended>,
}

/// A generic message as `POST /v1/messages` takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Incoming {
    server: String,
    channel: String,
    content: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    timestamp: Option<DateTime<Utc>>,
}

impl From<Incoming> for NewMessage {
    fn from(m: Incoming) -> NewMessage {
        NewMessage {
            id: m.id,
            server: m.server,
            channel: m.channel,
            content: m.content,
            metadata: m.metadata,
            timestamp: m.timestamp,
        }
    }
}

/// One message object, or an array of them, in order.
pub(crate) fn generic_messages(value: Value) -> Result<Vec<NewMessage>, PayloadError> {
    fn one(value: Value) -> Result<NewMessage, String> {
        if !value.is_object() {
            return Err(format!(
                "expected a message object, got {}",
                crate::json_kind(&value)
            ));
        }
        serde_json::from_value::<Incoming>(value)
            .map(NewMessage::from)
            .map_err(|e| e.to_string())
    }
    match value {
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| one(v).map_err(|e| PayloadError::Shape(format!("[{i}]: {e}"))))
            .collect(),
        value => one(value).map(|m| vec![m]).map_err(PayloadError::Shape),
    }
}

/// One message object, or an array of them, read straight from the body; `None` when the body
/// is anything else (invalid JSON, a wrong shape), which [`generic_messages`] then reads again
/// to say exactly what is wrong.
///
/// The same result as `generic_messages(parse_json(body))` for every body it accepts, without
/// building a `Value` of it first: at thousands of messages a second that tree of maps and
/// strings was a large part of what a request cost.
pub(crate) fn read_messages(body: &[u8]) -> Option<Vec<NewMessage>> {
    use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

    /// One message, from an object only (a derived struct would also take an array).
    struct Object(Incoming);
    struct ObjectVisitor;
    impl<'de> Visitor<'de> for ObjectVisitor {
        type Value = Object;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a message object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object, A::Error> {
            Incoming::deserialize(de::value::MapAccessDeserializer::new(map)).map(Object)
        }
    }
    impl<'de> Deserialize<'de> for Object {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Object, D::Error> {
            d.deserialize_map(ObjectVisitor)
        }
    }

    struct Body;
    impl<'de> Visitor<'de> for Body {
        type Value = Vec<NewMessage>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a message object or an array of them")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Vec<NewMessage>, A::Error> {
            ObjectVisitor.visit_map(map).map(|Object(m)| vec![m.into()])
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<NewMessage>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
            while let Some(Object(m)) = seq.next_element()? {
                out.push(m.into());
            }
            Ok(out)
        }
    }

    let mut de = serde_json::Deserializer::from_slice(body);
    let messages = de.deserialize_any(Body).ok()?;
    de.end().ok()?;
    Some(messages)
}

/// JSON or nothing: a missing `Content-Type` is taken as JSON (curl without `-H`), anything
/// else must be `application/json` or `application/*+json`.
fn json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or_default();
    let essence = text
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let json = essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    if json {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "content type \"{text}\" is not JSON; send `Content-Type: application/json` \
                 (with curl: -H 'Content-Type: application/json'; `curl -d` alone sends a form)"
            ),
        ))
    }
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("request body is not valid JSON: {e}"),
        )
    })
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

fn required_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<&'a str, ApiError> {
    header_text(headers, name).ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing_header",
            format!("missing `{name}` header"),
        )
    })
}

/// The stable code of a refusal, carried on the response for [`finish`] to count.
#[derive(Clone, Copy, Debug)]
struct ErrorCode(&'static str);

/// A refusal: status, stable code, one lowercase sentence, and the headers that go with it.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The seqs assigned before a 503 `not_durable`.
    accepted: Option<Vec<Appended>>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: String) -> ApiError {
        ApiError {
            status,
            code,
            message,
            headers: Vec::new(),
            accepted: None,
        }
    }

    fn unauthorized(code: &'static str, message: String) -> ApiError {
        let challenge = if code == "invalid_token" {
            r#"Bearer realm="switchboard", error="invalid_token""#
        } else {
            r#"Bearer realm="switchboard""#
        };
        ApiError::new(StatusCode::UNAUTHORIZED, code, message)
            .header(header::WWW_AUTHENTICATE, challenge)
    }

    fn header(mut self, name: HeaderName, value: &str) -> ApiError {
        if let Ok(value) = HeaderValue::from_str(value) {
            self.headers.push((name, value));
        }
        self
    }

    fn retry_after(self, secs: u64) -> ApiError {
        self.header(header::RETRY_AFTER, &secs.to_string())
    }

    fn accepted(mut self, accepted: Vec<Appended>) -> ApiError {
        self.accepted = Some(accepted);
        self
    }
}

impl From<PayloadError> for ApiError {
    fn from(err: PayloadError) -> ApiError {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            err.code(),
            err.to_string(),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.code, "message": self.message });
        if let Some(accepted) = self.accepted {
            body["accepted"] = json!(accepted);
        }
        let mut response = (self.status, axum::Json(body)).into_response();
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response.extensions_mut().insert(ErrorCode(self.code));
        response
    }
}

#[cfg(test)]
mod tests;
