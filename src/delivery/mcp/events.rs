//! The MCP Events extension's methods on an MCP session, written from the draft
//! (modelcontextprotocol/experimental-ext-triggers-events, `docs/design-sketch-proposal.md`):
//! `events/list`, `events/poll`, `events/stream`, `events/subscribe`, `events/unsubscribe`,
//! reached from rmcp's custom requests ([`handle`]) and, for a stream over HTTP, from the
//! guard at `/mcp` ([`super::http`]), which answers it with its own SSE response so that the
//! notifications ride the request's stream and closing the request ends it.
//!
//! Each method is an operation (`events_poll`, `events_subscribe`, `events_unsubscribe`), so
//! it works alike in the daemon and in a `switchboard serve` front end; a stream is a run of
//! polls that wait ([`pump`]): it pulls from the inbox at its own pace, so a stuck or slow
//! consumer holds nothing of ingest, only its own place in the journal. Refusals carry the
//! draft's codes (-32602, -32011 ... -32015) and typed `data` ([`error`]).

use std::time::Duration;

use rmcp::model::{CustomNotification, CustomRequest, CustomResult, ErrorCode, ErrorData};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::backend::Api;
use crate::control::ApiError;
use crate::control::events::{SUBSCRIPTION_ID_META, cursor_of, event_types, mcp_code};
use crate::control::ops::{EventsPage, EventsPoll, EventsSubscribe, EventsUnsubscribe};

/// The `events` capability, as the draft shows it.
pub fn capability() -> rmcp::model::JsonObject {
    json!({"listChanged": true})
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// `mcp.events`: the MCP Events extension.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EventsSettings {
    /// The longest an `events/stream` stays silent before a heartbeat carrying its cursor
    /// (`heartbeat`, default `"25s"`; the draft asks for at least one every 30 s).
    #[serde(with = "crate::duration::text")]
    pub heartbeat: Duration,
    /// Let `events/subscribe` deliver over plain `http://` to a loopback address
    /// (`allowHttpLoopback`, default false: `https://` only, to public addresses only).
    pub allow_http_loopback: bool,
    /// The most webhook subscriptions at once (`maxSubscriptions`, default 100).
    pub max_subscriptions: usize,
    /// The TTL granted when the client suggests none (`defaultTtl`, default `"1h"`).
    #[serde(with = "crate::duration::text")]
    pub default_ttl: Duration,
    /// The longest TTL granted (`maxTtl`, default `"7d"`); a suggestion of no expiry is
    /// granted this too.
    #[serde(with = "crate::duration::text")]
    pub max_ttl: Duration,
    /// The shortest TTL granted (`minTtl`, default `"1s"`): shorter suggestions are raised.
    #[serde(with = "crate::duration::text")]
    pub min_ttl: Duration,
    /// The first wait before a failed webhook delivery is tried again (`retryFirst`, default
    /// `"1s"`); it doubles up to `retryMax` (default `"5m"`), with full jitter.
    #[serde(with = "crate::duration::text")]
    pub retry_first: Duration,
    /// The longest wait between tries (`retryMax`).
    #[serde(with = "crate::duration::text")]
    pub retry_max: Duration,
    /// Tries of one occurrence before delivery is suspended until the next refresh
    /// (`maxAttempts`, default 8).
    pub max_attempts: u32,
}

impl Default for EventsSettings {
    fn default() -> Self {
        EventsSettings {
            heartbeat: Duration::from_secs(25),
            allow_http_loopback: false,
            max_subscriptions: 100,
            default_ttl: Duration::from_secs(3600),
            max_ttl: Duration::from_secs(7 * 86_400),
            min_ttl: Duration::from_secs(1),
            retry_first: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            max_attempts: 8,
        }
    }
}

/// The methods of the extension.
pub const METHODS: [&str; 5] = [
    "events/list",
    "events/poll",
    "events/stream",
    "events/subscribe",
    "events/unsubscribe",
];

/// A refusal as the draft's JSON-RPC error: its code and typed `data`.
pub fn error(e: ApiError) -> ErrorData {
    match &e {
        ApiError::Refused(r) => match mcp_code(r) {
            Some(code) => ErrorData::new(ErrorCode(code), r.message.clone(), r.data.clone()),
            None => ErrorData::internal_error(r.message.clone(), r.data.clone()),
        },
        _ => ErrorData::internal_error(e.to_string(), Some(json!({"code": e.code()}))),
    }
}

fn params<T: serde::de::DeserializeOwned>(request: &CustomRequest) -> Result<T, ErrorData> {
    let raw = request.params.clone().unwrap_or(Value::Null);
    let raw = if raw.is_null() { json!({}) } else { raw };
    serde_json::from_value(raw).map_err(|e| {
        ErrorData::invalid_params(format!("events: `{}` params: {e}", request.method), None)
    })
}

fn to_result(value: impl serde::Serialize) -> Result<CustomResult, ErrorData> {
    serde_json::to_value(value)
        .map(CustomResult)
        .map_err(|e| ErrorData::internal_error(format!("events: result: {e}"), None))
}

/// An `events/*` request over an rmcp session (stdio, and HTTP for all but a stream).
pub async fn handle(
    api: &Api,
    request: CustomRequest,
    context: RequestContext<RoleServer>,
) -> Result<CustomResult, ErrorData> {
    match request.method.as_str() {
        "events/list" => Ok(CustomResult(event_types())),
        "events/poll" => {
            let poll = EventsPoll {
                wait_ms: 0,
                ..params(&request)?
            };
            to_result(poll_result(api.call(poll).await.map_err(error)?))
        }
        "events/stream" => {
            let poll: EventsPoll = params(&request)?;
            let heartbeat = Duration::from_millis(api.settings().events_heartbeat_ms);
            let first = open(api, &poll).await.map_err(error)?;
            let (tx, mut rx) = mpsc::channel::<(String, Value)>(STREAM_BUFFER);
            let sub = serde_json::to_value(&context.id).unwrap_or(Value::Null);
            let pumping = pump(api.clone(), poll, first, sub, heartbeat, tx);
            let forward = async {
                while let Some((method, params)) = rx.recv().await {
                    let n = CustomNotification::new(method, Some(params));
                    if context.peer.send_notification(n.into()).await.is_err() {
                        return;
                    }
                }
            };
            tokio::select! {
                _ = pumping => {}
                _ = forward => {}
                _ = context.ct.cancelled() => {}
            }
            Ok(CustomResult(json!({"_meta": {}})))
        }
        "events/subscribe" => {
            let sub: EventsSubscribe = params(&request)?;
            to_result(api.call(sub).await.map_err(error)?)
        }
        "events/unsubscribe" => {
            let unsub: EventsUnsubscribe = params(&request)?;
            to_result(api.call(unsub).await.map_err(error)?)
        }
        other => Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            other.to_string(),
            None,
        )),
    }
}

/// `events/poll`'s result: the cursor on the page, not on each occurrence.
fn poll_result(mut page: EventsPage) -> EventsPage {
    for e in &mut page.events {
        e.cursor = None;
    }
    page
}

/// Notifications a stream holds for a slow client before it waits for it (the stream waits;
/// the inbox does not).
pub const STREAM_BUFFER: usize = 64;

/// A stream's first page: checks the subscription (an invalid one is refused before anything
/// is sent) and finds where it starts.
pub async fn open(api: &Api, poll: &EventsPoll) -> Result<EventsPage, ApiError> {
    api.call(EventsPoll {
        wait_ms: 0,
        ..poll.clone()
    })
    .await
}

fn meta(mut params: Value, sub: &Value) -> Value {
    if let Some(o) = params.as_object_mut() {
        o.insert("_meta".into(), json!({ SUBSCRIPTION_ID_META: sub }));
    }
    params
}

/// Push streams open in this process (in the daemon: its HTTP streams), for `stats`.
pub static OPEN_STREAMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts one open stream while it lives.
struct Open;

impl Open {
    fn new() -> Open {
        OPEN_STREAMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Open
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        OPEN_STREAMS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Runs a stream until its client goes (`out` closed): `notifications/events/active`, then
/// each occurrence as `notifications/events/event` and, after `heartbeat` of silence,
/// `notifications/events/heartbeat` with the cursor; a failed turn is reported as
/// `notifications/events/error` and retried.
pub async fn pump(
    api: Api,
    mut poll: EventsPoll,
    first: EventsPage,
    sub: Value,
    heartbeat: Duration,
    out: mpsc::Sender<(String, Value)>,
) {
    let _open = Open::new();
    let send = |method: &str, params: Value| {
        let out = out.clone();
        let msg = (format!("notifications/events/{method}"), meta(params, &sub));
        async move { out.send(msg).await.is_ok() }
    };
    // Where delivery starts: before the first occurrence, or the page's end.
    let start = match first.events.first().and_then(|e| e.seq()) {
        Some(seq) => cursor_of(seq.saturating_sub(1)),
        None => first.cursor.clone().unwrap_or_default(),
    };
    let active = json!({"cursor": start, "truncated": first.truncated});
    if !send("active", active).await || !deliver(&send, &first).await {
        return;
    }
    poll.cursor = first.cursor;
    poll.wait_ms = heartbeat.as_millis() as u64;
    let mut retry =
        crate::duration::Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        let turn = tokio::select! {
            r = api.call(poll.clone()) => r,
            _ = out.closed() => return,
        };
        let page = match turn {
            Ok(page) => page,
            Err(e) => {
                let err = json!({"error": {"code": -32603, "message": "UpstreamError",
                                           "data": {"reason": e.to_string()}}});
                if !send("error", err).await {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(retry.next()) => {}
                    _ = out.closed() => return,
                }
                continue;
            }
        };
        retry.reset();
        if page.truncated {
            let active = json!({"cursor": page.cursor, "truncated": true});
            if !send("active", active).await {
                return;
            }
        }
        let ok = if page.events.is_empty() {
            send("heartbeat", json!({"cursor": page.cursor})).await
        } else {
            deliver(&send, &page).await
        };
        if !ok {
            return;
        }
        poll.cursor = page.cursor;
    }
}

async fn deliver<F, Fut>(send: &F, page: &EventsPage) -> bool
where
    F: Fn(&str, Value) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for e in &page.events {
        if !send("event", serde_json::to_value(e).unwrap_or_default()).await {
            return false;
        }
    }
    true
}

/// What the HTTP guard needs to answer `events/stream` itself.
#[derive(Clone)]
pub struct HttpStreams {
    /// The operations.
    pub api: Api,
    /// Where the streams' pumps run.
    pub tasks: tokio_util::task::TaskTracker,
    /// Ends every stream (the daemon stops).
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl HttpStreams {
    /// `events/stream` over streamable HTTP: an SSE response on the POST that carries the
    /// stream's notifications and ends when the client closes it (the pump sees its channel
    /// close and stops); when the daemon ends the stream, the empty `StreamEventsResult` is the
    /// last frame. A refused subscription is a JSON-RPC error, and no stream opens.
    pub async fn answer(&self, message: &Value) -> axum::response::Response {
        use axum::response::IntoResponse;
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let json = |body: Value| {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response()
        };
        let refuse = |e: ErrorData| {
            json(json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": e.code.0, "message": e.message, "data": e.data}}))
        };
        let raw = match message.get("params") {
            None | Some(Value::Null) => json!({}),
            Some(p) => p.clone(),
        };
        let poll: EventsPoll = match serde_json::from_value(raw) {
            Ok(p) => p,
            Err(e) => {
                return refuse(ErrorData::invalid_params(
                    format!("events: `events/stream` params: {e}"),
                    None,
                ));
            }
        };
        let first = match open(&self.api, &poll).await {
            Ok(first) => first,
            Err(e) => return refuse(error(e)),
        };
        let heartbeat = Duration::from_millis(self.api.settings().events_heartbeat_ms);
        let (tx, rx) = mpsc::channel::<(String, Value)>(STREAM_BUFFER);
        let (api, shutdown, sub) = (self.api.clone(), self.shutdown.clone(), id.clone());
        self.tasks.spawn(async move {
            tokio::select! {
                _ = pump(api, poll, first, sub, heartbeat, tx) => {}
                _ = shutdown.cancelled() => {}
            }
        });
        let frame = |v: Value| -> Result<axum::body::Bytes, std::convert::Infallible> {
            Ok(format!("event: message\ndata: {v}\n\n").into())
        };
        let events = futures::stream::unfold(rx, |mut rx| async move {
            let (method, params) = rx.recv().await?;
            Some((
                json!({"jsonrpc": "2.0", "method": method, "params": params}),
                rx,
            ))
        });
        let last = json!({"jsonrpc": "2.0", "id": id, "result": {"_meta": {}}});
        use futures::StreamExt;
        let body = events
            .chain(futures::stream::once(async move { last }))
            .map(frame);
        (
            [
                (axum::http::header::CONTENT_TYPE, "text/event-stream"),
                (axum::http::header::CACHE_CONTROL, "no-cache"),
            ],
            axum::body::Body::from_stream(body),
        )
            .into_response()
    }
}
