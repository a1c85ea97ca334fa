//! Change notifications, when `teams.notificationUrl` is set (a daemon behind a public https
//! endpoint): Graph posts each new chat message's id to `POST /v1/teams/notifications` on the
//! ingest listener instead of being polled.
//!
//! - **The subscription**: to `/users/{id}/chats/getAllMessages`, `created` only, without
//!   resource data, with a `clientState` drawn at random at each start and the same URL for
//!   lifecycle notifications. Created at start, renewed (`PATCH /subscriptions/{id}`) well
//!   before it expires, made again when Graph removed it, deleted when the daemon stops.
//! - **The route** has no bearer token: Graph sends none. A request is authenticated by its
//!   content instead: the `validationToken` handshake is answered (the token, URL-decoded, as
//!   `text/plain`) only while this daemon is creating a subscription, and a notification counts
//!   only when its `clientState` is this daemon's (compared in constant time; a wrong one is
//!   ignored and counted). The body is bounded ([`BODY_LIMIT`]); the answer is `202` at once,
//!   and the work is done after it.
//! - **Each notified message** is fetched (`GET /chats/{id}/messages/{id}`) and appended unless
//!   it was already (polling and notifications append a message once).
//! - **Lifecycle notifications**: `reauthorizationRequired` renews the subscription,
//!   `subscriptionRemoved` makes a new one, `missed` — and every (re)subscription and renewal —
//!   catches up by polling from the cursors. While there is no subscription, the poller polls at
//!   its interval.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::client::{GraphError, segment};
use super::mapping::{self, str_at};
use super::{Inner, SERVER};
use crate::duration::Backoff;
use crate::sources::SourceContext;

/// The route Graph posts to.
pub const PATH: &str = "/v1/teams/notifications";

/// The largest notification body read: Graph batches notifications, each well under 2 KiB
/// without resource data.
pub const BODY_LIMIT: usize = 256 * 1024;

/// The longest `validationToken` echoed.
const MAX_VALIDATION_TOKEN: usize = 4096;

/// How long a subscription is asked for: Graph keeps a chat message subscription at most an
/// hour.
const LIFETIME: chrono::TimeDelta = chrono::TimeDelta::minutes(55);

/// A subscription is renewed this long before it expires.
const RENEW_BEFORE: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// Notifications queued for the fetcher; more at once are dropped (and caught up by polling).
const QUEUE: usize = 1024;

/// Why a notification was not followed, as `/metrics` labels it.
pub const FAILURES: [&str; 4] = ["client_state", "invalid", "queue", "fetch"];

/// What the route hands the subscription task.
#[derive(Debug)]
pub enum Event {
    /// A message was created in a chat.
    Created {
        /// The chat's id.
        chat: String,
        /// The message's id.
        message: String,
    },
    /// A lifecycle notification (`reauthorizationRequired`, `subscriptionRemoved`, `missed`).
    Lifecycle(String),
}

/// The notification side's shared state: the URL, the secret, the handshake window, the queue.
pub struct Hub {
    url: String,
    client_state: String,
    /// Subscriptions being created: the handshake is answered only meanwhile.
    validating: AtomicUsize,
    events: mpsc::Sender<Event>,
    receiver: std::sync::Mutex<Option<mpsc::Receiver<Event>>>,
    /// The subscription's expiry while there is one.
    expires: std::sync::Mutex<Option<DateTime<Utc>>>,
}

impl Hub {
    /// The hub for notifications to `url`, with a fresh `clientState`.
    pub fn new(url: String) -> Hub {
        let mut raw = [0u8; 32];
        let _ = getrandom::fill(&mut raw);
        let (events, receiver) = mpsc::channel(QUEUE);
        Hub {
            url,
            client_state: raw.iter().map(|b| format!("{b:02x}")).collect(),
            validating: AtomicUsize::new(0),
            events,
            receiver: std::sync::Mutex::new(Some(receiver)),
            expires: std::sync::Mutex::new(None),
        }
    }

    /// The queue's receiving end, once.
    pub fn take_events(&self) -> Option<mpsc::Receiver<Event>> {
        self.receiver.lock().unwrap().take()
    }

    /// Whether `state` is this daemon's `clientState`, in constant time.
    fn is_ours(&self, state: &str) -> bool {
        crate::auth::same_secret(&self.client_state, state)
    }
}

impl Inner {
    /// Whether change notifications are subscribed (the poller then only catches up).
    pub(super) fn subscribed(&self) -> bool {
        self.hub
            .as_ref()
            .is_some_and(|h| h.expires.lock().unwrap().is_some_and(|e| e > Utc::now()))
    }
}

/// `POST /v1/teams/notifications`, bounded.
pub fn router(inner: Arc<Inner>) -> Router {
    Router::new()
        .route(PATH, post(notified))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(inner)
}

async fn notified(
    State(inner): State<Arc<Inner>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let Some(hub) = inner.hub.as_ref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if let Some(token) = query.get("validationToken") {
        // Graph's handshake: only while this daemon is creating a subscription.
        if hub.validating.load(Ordering::Acquire) == 0 || token.len() > MAX_VALIDATION_TOKEN {
            return refuse(
                StatusCode::BAD_REQUEST,
                "not_validating",
                "no Teams subscription is being created",
            );
        }
        return (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            token.clone(),
        )
            .into_response();
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        inner.notification_failed("invalid");
        return refuse(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "request body is not a change notification collection",
        );
    };
    let items = payload.get("value").and_then(Value::as_array);
    for n in items.into_iter().flatten() {
        if !str_at(n, &["clientState"]).is_some_and(|s| hub.is_ours(s)) {
            inner.notification_failed("client_state");
            continue;
        }
        let event = match str_at(n, &["lifecycleEvent"]) {
            Some(kind) => Event::Lifecycle(kind.to_string()),
            None => {
                let Some((chat, message)) = str_at(n, &["resource"]).and_then(mapping::notified)
                else {
                    inner.notification_failed("invalid");
                    continue;
                };
                Event::Created { chat, message }
            }
        };
        if hub.events.try_send(event).is_err() {
            inner.notification_failed("queue");
            inner.catch_up.notify_one();
        }
    }
    StatusCode::ACCEPTED.into_response()
}

fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": code, "message": message})),
    )
        .into_response()
}

/// The subscription: made, renewed, made again; the notified messages fetched. Until the daemon
/// stops, when the subscription is deleted.
pub async fn run(inner: Arc<Inner>, sources: SourceContext, mut events: mpsc::Receiver<Event>) {
    let Some(hub) = inner.hub.as_ref() else {
        return;
    };
    let mut subscription: Option<(String, DateTime<Utc>)> = None;
    // Subscribing again after a failure: from 30 s, up to 10 min.
    let mut retry = Backoff::new(Duration::from_secs(30), Duration::from_secs(600));
    loop {
        let next = match &subscription {
            Some((_, expires)) => {
                let renew_at = *expires - RENEW_BEFORE.min((*expires - Utc::now()) / 2);
                (renew_at - Utc::now()).to_std().unwrap_or_default()
            }
            None => match subscribe(&inner, hub).await {
                Ok(made) => {
                    subscription = Some(made);
                    retry.reset();
                    continue;
                }
                Err(e) => {
                    inner.failed(&e);
                    retry.next()
                }
            },
        };
        tokio::select! {
            _ = sources.shutdown().cancelled() => break,
            _ = tokio::time::sleep(next) => {
                if let Some((id, _)) = subscription.take() {
                    subscription = renew(&inner, hub, id).await;
                }
            }
            event = events.recv() => match event {
                Some(Event::Created { chat, message }) => fetch(&inner, &sources, &chat, &message).await,
                Some(Event::Lifecycle(kind)) => {
                    subscription = lifecycle(&inner, hub, &kind, subscription).await;
                }
                None => break,
            },
        }
    }
    if let Some((id, _)) = subscription {
        // So that Graph stops posting to a daemon that is gone; best effort, briefly.
        let path = format!("/subscriptions/{}", segment(&id));
        let _ = tokio::time::timeout(Duration::from_secs(3), inner.graph.delete(&path)).await;
    }
}

/// What a lifecycle notification asks for; the subscription after it.
async fn lifecycle(
    inner: &Inner,
    hub: &Hub,
    kind: &str,
    subscription: Option<(String, DateTime<Utc>)>,
) -> Option<(String, DateTime<Utc>)> {
    tracing::info!(event = %kind, "teams: lifecycle notification");
    match kind {
        "reauthorizationRequired" => match subscription {
            Some((id, _)) => renew(inner, hub, id).await,
            None => None,
        },
        "subscriptionRemoved" => {
            set_expiry(inner, hub, None);
            inner.catch_up.notify_one();
            None
        }
        "missed" => {
            inner.catch_up.notify_one();
            subscription
        }
        _ => subscription,
    }
}

/// Creates the subscription; Graph validates the URL before it answers.
async fn subscribe(inner: &Inner, hub: &Hub) -> Result<(String, DateTime<Utc>), GraphError> {
    let me = inner.me().await?;
    let body = json!({
        "changeType": "created",
        "notificationUrl": hub.url,
        "lifecycleNotificationUrl": hub.url,
        "resource": format!("/users/{}/chats/getAllMessages", me.id),
        "expirationDateTime": crate::message::format_timestamp(Utc::now() + LIFETIME),
        "clientState": hub.client_state,
        "includeResourceData": false,
        "latestSupportedTlsVersion": "v1_2",
    });
    hub.validating.fetch_add(1, Ordering::AcqRel);
    let made = inner.graph.post("/subscriptions", &body).await;
    hub.validating.fetch_sub(1, Ordering::AcqRel);
    let made = made?;
    let id = str_at(&made, &["id"]).unwrap_or_default().to_string();
    let expires = expiry(&made);
    tracing::info!(subscription = %id, %expires, "teams: subscribed to change notifications");
    set_expiry(inner, hub, Some(expires));
    // Notifications cover what comes from now: what came before is read from the cursors.
    inner.catch_up.notify_one();
    Ok((id, expires))
}

/// Renews subscription `id`; `None` when it is gone (the next round makes a new one).
async fn renew(inner: &Inner, hub: &Hub, id: String) -> Option<(String, DateTime<Utc>)> {
    let body =
        json!({"expirationDateTime": crate::message::format_timestamp(Utc::now() + LIFETIME)});
    match inner
        .graph
        .patch(&format!("/subscriptions/{}", segment(&id)), &body)
        .await
    {
        Ok(renewed) => {
            let expires = expiry(&renewed);
            set_expiry(inner, hub, Some(expires));
            inner.catch_up.notify_one();
            Some((id, expires))
        }
        Err(e) => {
            inner.failed(&e);
            set_expiry(inner, hub, None);
            inner.catch_up.notify_one();
            None
        }
    }
}

fn set_expiry(inner: &Inner, hub: &Hub, expires: Option<DateTime<Utc>>) {
    *hub.expires.lock().unwrap() = expires;
    inner.set_state(|s| {
        s.subscription_expires = expires.map(crate::message::format_timestamp);
        if expires.is_some() {
            s.state = "subscribed".into();
        }
    });
}

/// The `expirationDateTime` Graph answered (at worst, the one asked for).
fn expiry(subscription: &Value) -> DateTime<Utc> {
    str_at(subscription, &["expirationDateTime"])
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| Utc::now() + LIFETIME)
}

/// Fetches notified message `message` of `chat` and appends it, unless it was already; a
/// failure is counted and caught up by polling.
async fn fetch(inner: &Inner, sources: &SourceContext, chat: &str, message: &str) {
    if inner.seen(&format!("{chat}/{message}")) {
        return;
    }
    let got = async {
        let chat_type = inner.chat_type(chat).await?;
        if !inner.settings.wants(&chat_type) {
            return Ok(None);
        }
        let me = inner.me().await?;
        let m = inner
            .graph
            .get(&format!(
                "/chats/{}/messages/{}",
                segment(chat),
                segment(message)
            ))
            .await?;
        Ok::<_, GraphError>(mapping::to_message(&m, chat, &chat_type, &me).ok())
    };
    match got.await {
        Ok(Some(m)) => {
            if let Err(e) = inner.append(sources, vec![m]).await {
                tracing::warn!(cause = %e, "teams: a notified message was not stored; catching up by polling");
                inner.notification_failed("fetch");
                inner.catch_up.notify_one();
            }
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(cause = %e, source = SERVER, "teams: a notified message could not be fetched; catching up by polling");
            inner.notification_failed("fetch");
            inner.catch_up.notify_one();
        }
    }
}
