//! Teams: `switchboard login teams`, polling, change notifications and `channel_reply`, run by
//! the real binary against a stand-in of Microsoft Graph and the Microsoft identity platform,
//! reached through `teams.graphUrl` and `teams.authorityUrl`.
//!
//! The stand-in answers with the request and response shapes Microsoft publishes; each handler
//! names its page:
//! - device code flow: https://learn.microsoft.com/entra/identity-platform/v2-oauth2-device-code
//! - refresh: https://learn.microsoft.com/entra/identity-platform/v2-oauth2-auth-code-flow#refresh-the-access-token
//! - errors of the token endpoint: https://learn.microsoft.com/entra/identity-platform/reference-error-codes
//! - `GET /me`: https://learn.microsoft.com/graph/api/user-get
//! - `GET /me/chats?$expand=lastMessagePreview`: https://learn.microsoft.com/graph/api/chat-list
//! - `GET /chats/{id}/messages`: https://learn.microsoft.com/graph/api/chat-list-messages
//! - `GET /chats/{id}/messages/{id}`: https://learn.microsoft.com/graph/api/chatmessage-get
//! - `POST /chats/{id}/messages`: https://learn.microsoft.com/graph/api/chat-post-messages
//! - paging: https://learn.microsoft.com/graph/paging
//! - throttling (429, `Retry-After`): https://learn.microsoft.com/graph/throttling
//! - Graph's error body: https://learn.microsoft.com/graph/errors
//! - subscriptions: https://learn.microsoft.com/graph/api/subscription-post-subscriptions,
//!   https://learn.microsoft.com/graph/api/subscription-update
//! - notifications and the validation handshake:
//!   https://learn.microsoft.com/graph/change-notifications-delivery-webhooks
//! - lifecycle notifications: https://learn.microsoft.com/graph/change-notifications-lifecycle-events

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{SecondsFormat, TimeDelta, Utc};
use rmcp::ServiceExt;
use serde_json::{Value, json};

use super::util::*;

const TENANT: &str = "2432b57b-0abd-43db-aa7b-16eadd115d34";
const CLIENT_ID: &str = "6731de76-14a6-49ae-97bc-6eba6914391e";
const ME_ID: &str = "48d31887-5fad-4d73-a9f5-3c356e68a038";
const ADA_ID: &str = "8ea0e38b-efb3-4757-924a-5f94061cf8c2";
const DM: &str =
    "19:48d31887-5fad-4d73-a9f5-3c356e68a038_8ea0e38b-efb3-4757-924a-5f94061cf8c2@unq.gbl.spaces";
const GROUP: &str = "19:2da4c29f6d7041eca70b638b43d45437@thread.v2";
const MEETING: &str = "19:meeting_MjdhNjM4YzUtYzExZi00OTFkLTkzZTAtNTVlNmZmMDhkNGU2@thread.v2";

/// One chat of the stand-in.
struct Chat {
    id: String,
    chat_type: &'static str,
    /// Any order; served newest first.
    messages: Vec<Value>,
}

/// What the stand-in holds and what it saw.
#[derive(Default)]
struct World {
    base: String,
    /// How the device code polls are answered, in order (`ok` signs in).
    device: Vec<&'static str>,
    device_polls: Vec<Instant>,
    access: String,
    refresh: String,
    /// Refresh grants asked for, and whether the refresh token is revoked.
    refresh_grants: usize,
    refresh_revoked: bool,
    chats: Vec<Chat>,
    /// The next chat list requests answered 429.
    throttle: usize,
    /// Every Graph request: method, path and query.
    requests: Vec<String>,
    /// `POST /chats/{id}/messages`: the chat and the body.
    sent: Vec<(String, Value)>,
    /// The subscription's `clientState`, once made, and every PATCH.
    client_state: Option<String>,
    subscriptions: usize,
    renewals: usize,
    next_id: i64,
}

type Shared = Arc<Mutex<World>>;

/// The stand-in, served on its own runtime until dropped.
struct StandIn {
    world: Shared,
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StandIn {
    fn start() -> StandIn {
        let world: Shared = Arc::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let w = world.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                ready_tx.send(listener.local_addr().unwrap()).unwrap();
                axum::serve(listener, routes(w))
                    .with_graceful_shutdown(async {
                        let _ = rx.await;
                    })
                    .await
                    .unwrap();
            });
        });
        let addr = ready_rx.recv().unwrap();
        let url = format!("http://{addr}");
        {
            let mut w = world.lock().unwrap();
            w.base = url.clone();
            w.access = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.access-1".into();
            w.refresh = "AwABAAAAvPM1KaPlrEqdFSBzjqfTGAMxZGUTdM0t4B4.refresh-1".into();
            w.device = vec!["ok"];
            w.next_id = Utc::now().timestamp_millis() - 3_600_000;
        }
        StandIn {
            world,
            url,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut World) -> T) -> T {
        f(&mut self.world.lock().unwrap())
    }

    /// Adds a chat with one message `age` old (a chat with history before the first start).
    fn chat(&self, id: &str, chat_type: &'static str, from: (&str, &str), text: &str) {
        self.with(|w| {
            let old = message(w, id, from, &format!("<p>{text}</p>"));
            w.chats.push(Chat {
                id: id.into(),
                chat_type,
                messages: vec![old],
            })
        });
    }

    /// Adds `msg` (made by `make`) to chat `id`; its id.
    fn post(&self, id: &str, make: impl FnOnce(&mut World) -> Value) -> String {
        self.with(|w| {
            let m = make(w);
            let mid = m["id"].as_str().unwrap().to_string();
            w.chats
                .iter_mut()
                .find(|c| c.id == id)
                .unwrap()
                .messages
                .push(m);
            mid
        })
    }

    /// Graph requests so far that start with `prefix`.
    fn seen(&self, prefix: &str) -> usize {
        self.with(|w| w.requests.iter().filter(|r| r.starts_with(prefix)).count())
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn now_text(at: chrono::DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A `chatMessage` as chat-list-messages shows one: the id is its creation time in
/// milliseconds, unique within the chat.
fn message(w: &mut World, chat: &str, (from_id, from_name): (&str, &str), html: &str) -> Value {
    w.next_id = w.next_id.max(Utc::now().timestamp_millis()) + 1;
    let id = w.next_id;
    let at = now_text(chrono::DateTime::from_timestamp_millis(id).unwrap());
    json!({
        "id": id.to_string(), "replyToId": null, "etag": id.to_string(), "messageType": "message",
        "createdDateTime": at, "lastModifiedDateTime": at, "lastEditedDateTime": null,
        "deletedDateTime": null, "subject": null, "summary": null, "chatId": chat,
        "importance": "normal", "locale": "en-us", "webUrl": null, "channelIdentity": null,
        "policyViolation": null, "eventDetail": null,
        "from": {"application": null, "device": null, "user": {
            "@odata.type": "#microsoft.graph.teamworkUserIdentity", "id": from_id,
            "displayName": from_name, "userIdentityType": "aadUser", "tenantId": TENANT}},
        "body": {"contentType": "html", "content": html},
        "attachments": [], "mentions": [], "reactions": []
    })
}

/// A system event (chat-list-messages' `systemEventMessage`, members added).
fn system_event(w: &mut World, chat: &str) -> Value {
    let mut m = message(w, chat, ("", ""), "<systemEventMessage/>");
    m["messageType"] = "systemEventMessage".into();
    m["from"] = Value::Null;
    m["eventDetail"] = json!({
        "@odata.type": "#microsoft.graph.membersAddedEventMessageDetail",
        "visibleHistoryStartDateTime": "0001-01-01T00:00:00Z",
        "members": [{"id": ADA_ID, "displayName": null, "userIdentityType": "aadUser"}],
        "initiator": {"user": {"id": ME_ID, "displayName": null, "userIdentityType": "aadUser"}}
    });
    m
}

/// A deleted message: `deletedDateTime` set, the body emptied.
fn deleted(w: &mut World, chat: &str) -> Value {
    let mut m = message(w, chat, (ADA_ID, "Ada Lovelace"), "");
    m["deletedDateTime"] = m["createdDateTime"].clone();
    m
}

fn graph_error(status: StatusCode, code: &str, text: &str) -> Response {
    // https://learn.microsoft.com/graph/errors
    (
        status,
        Json(
            json!({"error": {"code": code, "message": text, "innerError": {
            "date": now_text(Utc::now()), "request-id": "94fb3b52-452a-4535-a601-69e0a90e3aa2",
            "client-request-id": "94fb3b52-452a-4535-a601-69e0a90e3aa2"}}}),
        ),
    )
        .into_response()
}

fn routes(world: Shared) -> Router {
    Router::new()
        .route("/{tenant}/oauth2/v2.0/devicecode", post(devicecode))
        .route("/{tenant}/oauth2/v2.0/token", post(token))
        .route("/v1.0/me", get(me))
        .route("/v1.0/me/chats", get(chats))
        .route("/v1.0/chats/{id}", get(one_chat))
        .route("/v1.0/chats/{id}/messages", get(messages).post(send))
        .route("/v1.0/chats/{id}/messages/{mid}", get(one_message))
        .route("/v1.0/subscriptions", post(subscribe))
        .route(
            "/v1.0/subscriptions/{id}",
            axum::routing::patch(renew).delete(unsubscribe),
        )
        .with_state(world)
}

/// v2-oauth2-device-code: the device authorization response.
async fn devicecode(
    Path(tenant): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    assert_eq!(tenant, TENANT);
    assert_eq!(form.get("client_id").map(String::as_str), Some(CLIENT_ID));
    let scope = form.get("scope").cloned().unwrap_or_default();
    // Outside the global cloud the scopes name Graph's resource (`{graphUrl}/Chat.Read`).
    for s in [
        "Chat.Read",
        "ChatMessage.Send",
        "User.Read",
        "offline_access",
    ] {
        assert!(
            scope.split(' ').any(|x| x.rsplit('/').next() == Some(s)),
            "scope {scope:?} lacks {s}"
        );
    }
    Json(json!({
        "user_code": "GTHK7PQ2R", "device_code": "GAQABAAEAAAD--DLA3VO7QrddgJg7WevrHq",
        "verification_uri": "https://microsoft.com/devicelogin", "expires_in": 900,
        "interval": 1,
        "message": "To sign in, use a web browser to open the page https://microsoft.com/devicelogin and enter the code GTHK7PQ2R to authenticate."
    }))
    .into_response()
}

/// The token endpoint's success and error responses (v2-oauth2-device-code, "Successful
/// authentication response" and "Expected errors"; v2-oauth2-auth-code-flow, "Refresh the
/// access token").
async fn token(State(world): State<Shared>, Form(form): Form<HashMap<String, String>>) -> Response {
    let mut w = world.lock().unwrap();
    let grant = form.get("grant_type").cloned().unwrap_or_default();
    let error = |code: &str, description: &str| {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({
                "error": code, "error_description": format!("{description}\r\nTrace ID: 0000\r\nCorrelation ID: 0000\r\nTimestamp: 2026-11-28 10:00:00Z"),
                "error_codes": [70016], "timestamp": "2026-11-28 10:00:00Z",
                "trace_id": "0000", "correlation_id": "0000"
            })),
        )
            .into_response()
    };
    match grant.as_str() {
        "urn:ietf:params:oauth:grant-type:device_code" => {
            w.device_polls.push(Instant::now());
            let next = if w.device.is_empty() {
                "authorization_pending"
            } else {
                w.device.remove(0)
            };
            match next {
                "ok" => {}
                "authorization_pending" => {
                    return error(
                        next,
                        "AADSTS70016: OAuth 2.0 device flow error. Authorization is pending.",
                    );
                }
                "slow_down" => return error(next, "AADSTS70016: slow down."),
                "expired_token" => {
                    return error(
                        next,
                        "AADSTS70020: The provided value for the input parameter 'device_code' is not valid. This device code has expired.",
                    );
                }
                "access_denied" => return error(next, "AADSTS70000: The user denied the request."),
                other => panic!("script: {other}"),
            }
        }
        "refresh_token" => {
            w.refresh_grants += 1;
            if w.refresh_revoked || form.get("refresh_token") != Some(&w.refresh) {
                return error(
                    "invalid_grant",
                    "AADSTS700082: The refresh token has expired due to inactivity.",
                );
            }
            let n = w.refresh_grants + 1;
            w.access = format!("eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.access-{n}");
            w.refresh = format!("AwABAAAAvPM1KaPlrEqdFSBzjqfTGAMxZGUTdM0t4B4.refresh-{n}");
        }
        other => panic!("grant {other}"),
    }
    Json(json!({
        "token_type": "Bearer", "scope": "Chat.Read ChatMessage.Send User.Read",
        "expires_in": 3599, "ext_expires_in": 3599,
        "access_token": w.access, "refresh_token": w.refresh
    }))
    .into_response()
}

/// Records the request and checks its bearer token: the 401 Graph answers when it is not the
/// one issued last.
fn graph(world: &Shared, headers: &HeaderMap, what: String) -> Option<Response> {
    let mut w = world.lock().unwrap();
    w.requests.push(what);
    let bearer = format!("Bearer {}", w.access);
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(bearer.as_str()) {
        return Some(graph_error(
            StatusCode::UNAUTHORIZED,
            "InvalidAuthenticationToken",
            "Access token has expired or is not yet valid.",
        ));
    }
    None
}

fn query_text(q: &HashMap<String, String>) -> String {
    let mut pairs: Vec<_> = q.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.sort();
    pairs.join("&")
}

/// user-get: the signed-in user.
async fn me(State(world): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(r) = graph(&world, &headers, "GET /v1.0/me".into()) {
        return r;
    }
    Json(json!({
        "@odata.context": "https://graph.microsoft.com/v1.0/$metadata#users/$entity",
        "businessPhones": [], "displayName": "Jane Smith", "givenName": "Jane", "jobTitle": null,
        "mail": "jane@contoso.com", "mobilePhone": null, "officeLocation": null,
        "preferredLanguage": "en-US", "surname": "Smith",
        "userPrincipalName": "jane@contoso.com", "id": ME_ID
    }))
    .into_response()
}

fn chat_json(c: &Chat) -> Value {
    let newest = c
        .messages
        .iter()
        .max_by_key(|m| m["id"].as_str().unwrap().parse::<i64>().unwrap());
    let preview = newest.map_or(Value::Null, |m| {
        json!({
            "id": m["id"], "createdDateTime": m["createdDateTime"], "isDeleted": !m["deletedDateTime"].is_null(),
            "messageType": m["messageType"], "eventDetail": m["eventDetail"],
            "body": {"contentType": "text", "content": "…"}, "from": m["from"]
        })
    });
    json!({
        "id": c.id, "topic": null, "createdDateTime": "2020-12-04T23:10:28.51Z",
        "lastUpdatedDateTime": "2020-12-04T23:10:36.925Z", "chatType": c.chat_type,
        "webUrl": format!("https://teams.microsoft.com/l/chat/{}/0", c.id), "tenantId": TENANT,
        "isHiddenForAllMembers": false, "lastMessagePreview": preview
    })
}

/// chat-list with `$expand=lastMessagePreview`: one chat a page, so that every pass follows
/// `@odata.nextLink` (paging); the first `throttle` requests are answered 429 (throttling).
async fn chats(
    State(world): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = graph(
        &world,
        &headers,
        format!("GET /v1.0/me/chats?{}", query_text(&q)),
    ) {
        return r;
    }
    let mut w = world.lock().unwrap();
    assert_eq!(
        q.get("$expand").map(String::as_str),
        Some("lastMessagePreview")
    );
    if w.throttle > 0 {
        w.throttle -= 1;
        let mut r = graph_error(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "Too many requests.",
        );
        r.headers_mut().insert("retry-after", "1".parse().unwrap());
        return r;
    }
    let skip: usize = q
        .get("$skiptoken")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let page: Vec<Value> = w.chats.iter().skip(skip).take(1).map(chat_json).collect();
    let mut body = json!({
        "@odata.context": "https://graph.microsoft.com/v1.0/$metadata#chats(lastMessagePreview())",
        "@odata.count": w.chats.len(), "value": page
    });
    if skip + 1 < w.chats.len() {
        body["@odata.nextLink"] = format!(
            "{}/v1.0/me/chats?$expand=lastMessagePreview&$skiptoken={}",
            w.base,
            skip + 1
        )
        .into();
    }
    Json(body).into_response()
}

async fn one_chat(
    State(world): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Some(r) = graph(&world, &headers, format!("GET /v1.0/chats/{id}")) {
        return r;
    }
    let w = world.lock().unwrap();
    match w.chats.iter().find(|c| c.id == id) {
        Some(c) => Json(chat_json(c)).into_response(),
        None => graph_error(StatusCode::NOT_FOUND, "NotFound", "Resource not found."),
    }
}

/// chat-list-messages with `$orderby=createdDateTime desc`: two a page (fewer than `$top`, as
/// Graph may answer), `@odata.nextLink` to the rest.
async fn messages(
    State(world): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = graph(
        &world,
        &headers,
        format!("GET /v1.0/chats/{id}/messages?{}", query_text(&q)),
    ) {
        return r;
    }
    assert_eq!(
        q.get("$orderby").map(String::as_str),
        Some("createdDateTime desc")
    );
    let w = world.lock().unwrap();
    let Some(c) = w.chats.iter().find(|c| c.id == id) else {
        return graph_error(StatusCode::NOT_FOUND, "NotFound", "Resource not found.");
    };
    let mut all = c.messages.clone();
    all.sort_by_key(|m| std::cmp::Reverse(m["createdDateTime"].as_str().unwrap().to_string()));
    let skip: usize = q
        .get("$skiptoken")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let page: Vec<Value> = all.iter().skip(skip).take(2).cloned().collect();
    let mut body = json!({
        "@odata.context": format!("https://graph.microsoft.com/v1.0/$metadata#chats('{id}')/messages"),
        "@odata.count": page.len(), "value": page
    });
    if skip + 2 < all.len() {
        body["@odata.nextLink"] = format!(
            "{}/v1.0/chats/{}/messages?$orderby=createdDateTime%20desc&$top=50&$skiptoken={}",
            w.base,
            id,
            skip + 2
        )
        .into();
    }
    Json(body).into_response()
}

/// chatmessage-get.
async fn one_message(
    State(world): State<Shared>,
    headers: HeaderMap,
    Path((id, mid)): Path<(String, String)>,
) -> Response {
    if let Some(r) = graph(
        &world,
        &headers,
        format!("GET /v1.0/chats/{id}/messages/{mid}"),
    ) {
        return r;
    }
    let w = world.lock().unwrap();
    let found = w
        .chats
        .iter()
        .find(|c| c.id == id)
        .and_then(|c| c.messages.iter().find(|m| m["id"] == mid.as_str()));
    match found {
        Some(m) => Json(m.clone()).into_response(),
        None => graph_error(StatusCode::NOT_FOUND, "NotFound", "Resource not found."),
    }
}

/// chat-post-messages: `201 Created` with the new chatMessage, which joins the chat as the
/// signed-in user's own.
async fn send(
    State(world): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    if let Some(r) = graph(&world, &headers, format!("POST /v1.0/chats/{id}/messages")) {
        return r;
    }
    let mut w = world.lock().unwrap();
    w.sent.push((id.clone(), body.clone()));
    let html = body["body"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let m = message(&mut w, &id, (ME_ID, "Jane Smith"), &html);
    if let Some(c) = w.chats.iter_mut().find(|c| c.id == id) {
        c.messages.push(m.clone());
    }
    (StatusCode::CREATED, Json(m)).into_response()
}

/// subscription-post-subscriptions: Graph validates `notificationUrl` (and
/// `lifecycleNotificationUrl`) with the `validationToken` handshake before it answers
/// (change-notifications-delivery-webhooks, "Notification endpoint validation").
async fn subscribe(
    State(world): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(r) = graph(&world, &headers, "POST /v1.0/subscriptions".into()) {
        return r;
    }
    assert_eq!(body["changeType"], "created");
    assert_eq!(
        body["resource"],
        format!("/users/{ME_ID}/chats/getAllMessages")
    );
    let token = "Validation: Testing client application reachability for subscription Request-Id: 8a1e2f0c-0000";
    let url = body["notificationUrl"].as_str().unwrap().to_string();
    let echoed = reqwest::Client::new()
        .post(format!("{url}?validationToken={}", encode(token)))
        .header("content-type", "text/plain")
        .send()
        .await;
    let ok = match echoed {
        Ok(r) => {
            let plain = r
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/plain"));
            r.status() == 200 && plain && r.text().await.ok().as_deref() == Some(token)
        }
        Err(_) => false,
    };
    if !ok {
        return graph_error(
            StatusCode::BAD_REQUEST,
            "InvalidRequest",
            "Subscription validation request failed. Response must exactly match validationToken query parameter.",
        );
    }
    let mut w = world.lock().unwrap();
    w.subscriptions += 1;
    w.client_state = body["clientState"].as_str().map(String::from);
    let id = format!("7f105c7d-2dc5-4530-97cd-4e7ae6534c0{}", w.subscriptions);
    (
        StatusCode::CREATED,
        Json(json!({
            "@odata.context": "https://graph.microsoft.com/v1.0/$metadata#subscriptions/$entity",
            "id": id, "resource": body["resource"], "applicationId": CLIENT_ID,
            "changeType": "created", "clientState": body["clientState"],
            "notificationUrl": url, "lifecycleNotificationUrl": body["lifecycleNotificationUrl"],
            "expirationDateTime": body["expirationDateTime"], "creatorId": ME_ID,
            "includeResourceData": false, "latestSupportedTlsVersion": "v1_2"
        })),
    )
        .into_response()
}

/// `text` percent-encoded for a query string, as Graph sends the `validationToken`.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// subscription-update.
async fn renew(
    State(world): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    if let Some(r) = graph(&world, &headers, format!("PATCH /v1.0/subscriptions/{id}")) {
        return r;
    }
    world.lock().unwrap().renewals += 1;
    Json(
        json!({"id": id, "resource": format!("/users/{ME_ID}/chats/getAllMessages"),
        "changeType": "created", "expirationDateTime": body["expirationDateTime"]}),
    )
    .into_response()
}

async fn unsubscribe(
    State(world): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Some(r) = graph(&world, &headers, format!("DELETE /v1.0/subscriptions/{id}")) {
        return r;
    }
    StatusCode::NO_CONTENT.into_response()
}

/// `switchboard.json` with a `teams` section pointing at `graph`.
fn settings(graph: &StandIn, extra: Value) -> String {
    let mut teams = json!({
        "tenant": TENANT, "clientId": CLIENT_ID, "poll": "1s",
        "chatTypes": ["oneOnOne", "group"],
        "graphUrl": graph.url, "authorityUrl": graph.url
    });
    for (k, v) in extra.as_object().unwrap() {
        teams[k] = v.clone();
    }
    json!({ "teams": teams }).to_string()
}

/// Signs in with `switchboard login teams` as the stand-in's script says; the output.
fn login(sb: &Switchboard) -> std::process::Output {
    sb.cli(&["login", "teams"])
}

fn status_line(sb: &Switchboard) -> String {
    let out = sb.cli(&["status"]);
    stdout(&out)
        .lines()
        .find(|l| l.trim_start().starts_with("teams:"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn teams_messages(sb: &Switchboard) -> Vec<Value> {
    let r = control(
        sb.home.path(),
        json!({"op": "list", "channel": "teams/*", "limit": 100}),
    );
    r["result"]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn contents(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn login_teams_waits_through_pending_and_slow_down_and_says_expired_and_declined() {
    let graph = StandIn::start();
    let sb = Switchboard::new();
    sb.write("switchboard.json", &settings(&graph, json!({})));

    // Pending, then slow_down (the interval grows by 5 s, RFC 8628 3.5), then signed in.
    graph.with(|w| w.device = vec!["authorization_pending", "slow_down", "ok"]);
    let out = login(&sb);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let said = stdout(&out);
    assert!(
        said.contains("open https://microsoft.com/devicelogin and enter the code GTHK7PQ2R"),
        "{said}"
    );
    assert!(
        said.contains("signed in to Microsoft Teams as Jane Smith"),
        "{said}"
    );
    assert!(
        stderr(&out).contains("asked to poll more slowly: every 6 s now"),
        "{}",
        stderr(&out)
    );
    let polls = graph.with(|w| w.device_polls.clone());
    assert_eq!(polls.len(), 3, "pending, slow_down, ok");
    let (first, second) = (polls[1] - polls[0], polls[2] - polls[1]);
    assert!(
        first >= Duration::from_millis(900),
        "interval 1 s kept: {first:?}"
    );
    assert!(
        second >= Duration::from_millis(5900),
        "slow_down honoured: {second:?}"
    );
    let file = sb.home.path().join("teams-token.json");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains("refresh-1"), "{saved}");

    // The code expired; the person declined: each says so, nothing saved.
    std::fs::remove_file(&file).unwrap();
    graph.with(|w| w.device = vec!["expired_token"]);
    let out = login(&sb);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "the code expired before the sign-in was finished; run `switchboard login teams` again"
        ),
        "{}",
        stderr(&out)
    );
    graph.with(|w| w.device = vec!["access_denied"]);
    let out = login(&sb);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("the sign-in was declined in the browser; nothing was saved"),
        "{}",
        stderr(&out)
    );
    assert!(!file.exists());

    // Sign in again, then out.
    graph.with(|w| w.device = vec!["ok"]);
    assert!(login(&sb).status.success());
    let out = sb.cli(&["logout", "teams"]);
    assert!(
        stdout(&out).contains("signed out of Microsoft Teams"),
        "{}",
        stdout(&out)
    );
    assert!(!file.exists());
    let out = sb.cli(&["logout", "teams"]);
    assert!(stdout(&out).contains("not signed in"), "{}", stdout(&out));
}

const RULES: &str = r#"{"rules": [
  {"name": "teams-dm", "server": "teams", "channel": "teams/dm", "mode": "auto",
   "prompt": "Triage this Teams DM from {{meta.sender}}: {{content}}",
   "tools": ["channel_reply"]}
]}"#;

/// The must-show: a DM Graph has reaches the agent's wait within one poll interval plus 1 s,
/// as an auto rule's work whose prompt carries the sender and the text; own, system and
/// deleted messages are skipped; `channel_reply` posts the answer as HTML to the same chat.
#[tokio::test(flavor = "multi_thread")]
async fn a_teams_dm_reaches_the_wait_within_a_poll_and_channel_reply_answers_in_the_chat() {
    let graph = StandIn::start();
    graph.chat(
        DM,
        "oneOnOne",
        (ADA_ID, "Ada Lovelace"),
        "an old message, before the start",
    );
    graph.chat(GROUP, "group", (ADA_ID, "Ada Lovelace"), "old group talk");
    let mut sb = Switchboard::new();
    sb.write("switchboard.json", &settings(&graph, json!({"poll": "2s"})));
    sb.write("triggers.json", RULES);
    assert!(login(&sb).status.success());
    sb.spawn();
    let line = eventually(Duration::from_secs(20), "teams polls", || {
        let l = status_line(&sb);
        l.starts_with("teams: polling 2 chats").then_some(l)
    });
    assert!(line.contains("last poll"), "{line}");
    let client = rmcp::model::ClientConfig::default()
        .serve(http_transport(&sb))
        .await
        .expect("client connects");

    // Graph has the DM (and, around it, what is not a message for us) from now.
    let waiting = {
        let mut params = rmcp::model::CallToolRequestParams::new("wait_for_inbound_message");
        params.arguments = json!({"timeout_s": 20}).as_object().cloned();
        let peer = client.peer().clone();
        tokio::spawn(async move { peer.call_tool(params).await })
    };
    graph.post(DM, |w| system_event(w, DM));
    graph.post(DM, |w| {
        message(w, DM, (ME_ID, "Jane Smith"), "<p>my own words</p>")
    });
    graph.post(DM, |w| deleted(w, DM));
    let had = Instant::now();
    let dm_id = graph.post(DM, |w| {
        message(
            w,
            DM,
            (ADA_ID, "Ada Lovelace"),
            "<p>Is the <b>deploy</b> done?</p><p>Need it&nbsp;today &amp; now</p>",
        )
    });
    let result = waiting.await.unwrap().expect("the wait answers");
    let took = had.elapsed();
    eprintln!("the DM reached the wait {took:?} after Graph had it (poll 2 s)");
    let items = result.structured_content.expect("structured")["items"].clone();
    assert!(
        took <= Duration::from_secs(3),
        "the DM took {took:?}, over one poll (2 s) + 1 s"
    );
    let auto: Vec<&Value> = items
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "auto")
        .collect();
    assert_eq!(auto.len(), 1, "{items:#}");
    assert_eq!(
        auto[0]["prompt"],
        "Triage this Teams DM from Ada Lovelace: Is the deploy done?\nNeed it today & now"
    );

    // One message only: the own, system and deleted ones are not; the metadata says where.
    let got = teams_messages(&sb);
    assert_eq!(got.len(), 1, "{got:#?}");
    let m = &auto[0]["message"];
    assert_eq!(
        (m["server"].as_str(), m["channel"].as_str()),
        (Some("teams"), Some("teams/dm"))
    );
    assert_eq!(
        m["id"],
        format!("{DM}/{dm_id}"),
        "the Graph message id is the source id"
    );
    let meta = &m["metadata"];
    assert_eq!(meta["chat_id"], DM);
    assert_eq!(meta["message_id"], dm_id.as_str());
    assert_eq!(meta["sender"], "Ada Lovelace");
    assert_eq!(meta["sender_id"], ADA_ID);
    assert_eq!(meta["chat_type"], "oneOnOne");
    assert_eq!(meta["mentions_me"], "false");

    // The answer goes to the same chat, as HTML with the text escaped and its lines kept.
    let seq = m["seq"].as_u64().unwrap();
    let reply = tool(
        &client,
        "channel_reply",
        json!({"seq": seq, "text": "On it: <deploy> & DNS\nback in 5'"}),
    )
    .await;
    let sent = graph.with(|w| w.sent.clone());
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, DM);
    assert_eq!(
        sent[0].1,
        json!({"body": {"contentType": "html", "content": "On it: &lt;deploy&gt; &amp; DNS<br>back in 5&#39;"}})
    );
    assert_eq!(reply["channel"], "teams/dm", "{reply}");
    let posted = graph.with(|w| {
        let c = w.chats.iter().find(|c| c.id == DM).unwrap();
        c.messages.last().unwrap()["id"].clone()
    });
    assert_eq!(reply["id"], posted, "the id Graph gave the sent message");
    let out = sb.cli(&["reply", &seq.to_string(), "and from the terminal"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(graph.with(|w| w.sent.len()), 2);

    // Our own answers come back from Graph at the next polls, and are skipped.
    let polled = graph.seen(&format!("GET /v1.0/chats/{DM}/messages"));
    eventually(Duration::from_secs(10), "two more reads of the DM", || {
        (graph.seen(&format!("GET /v1.0/chats/{DM}/messages")) >= polled + 2).then_some(())
    });
    assert_eq!(teams_messages(&sb).len(), 1);
    let metrics = metrics(&sb);
    assert!(
        metrics.contains("switchboard_teams_messages_total 1"),
        "{metrics}"
    );
    client.cancel().await.unwrap();
}

/// Chats and messages over several pages, a 429 waited out by its `Retry-After`, a 401
/// answered by one refresh (the refresh token rotated in the file), a restart that neither
/// replays nor skips, and a dead refresh token that stops the source with `status` saying so.
#[test]
fn polling_pages_throttling_refresh_restart_and_a_dead_sign_in() {
    let graph = StandIn::start();
    graph.chat(DM, "oneOnOne", (ADA_ID, "Ada Lovelace"), "before the start");
    graph.chat(GROUP, "group", (ADA_ID, "Ada Lovelace"), "before the start");
    graph.chat(
        MEETING,
        "meeting",
        (ADA_ID, "Ada Lovelace"),
        "not read: meetings are not in chatTypes",
    );
    graph.with(|w| w.throttle = 1);
    let mut sb = Switchboard::new();
    sb.write("switchboard.json", &settings(&graph, json!({})));
    assert!(login(&sb).status.success());
    sb.spawn();
    eventually(Duration::from_secs(20), "teams polls", || {
        status_line(&sb)
            .starts_with("teams: polling 2 chats")
            .then_some(())
    });
    assert_eq!(metric(&sb, "switchboard_teams_throttled_total"), Some(1.0));
    assert!(graph.seen("GET /v1.0/me/chats?$expand=lastMessagePreview&$skiptoken=2") >= 1);

    // Five new DMs: three pages of messages, appended oldest first.
    for i in 1..=5 {
        graph.post(DM, |w| {
            message(w, DM, (ADA_ID, "Ada Lovelace"), &format!("dm {i}"))
        });
    }
    let got = eventually(Duration::from_secs(10), "five DMs", || {
        let m = teams_messages(&sb);
        (m.len() >= 5).then_some(m)
    });
    assert_eq!(contents(&got), ["dm 1", "dm 2", "dm 3", "dm 4", "dm 5"]);
    assert!(
        graph.seen(&format!(
            "GET /v1.0/chats/{DM}/messages?$orderby=createdDateTime desc&$skiptoken=4&$top=50"
        )) >= 1
    );

    // The access token stops working: one refresh, the rotated refresh token saved.
    graph.with(|w| w.access = "revoked".into());
    graph.post(GROUP, |w| {
        message(w, GROUP, (ADA_ID, "Ada Lovelace"), "after a refresh")
    });
    eventually(
        Duration::from_secs(10),
        "the message after the refresh",
        || (teams_messages(&sb).len() == 6).then_some(()),
    );
    assert_eq!(graph.with(|w| w.refresh_grants), 1);
    let saved = std::fs::read_to_string(sb.home.path().join("teams-token.json")).unwrap();
    assert!(
        saved.contains("refresh-2") && !saved.contains("refresh-1"),
        "{saved}"
    );
    assert_eq!(
        metric(
            &sb,
            "switchboard_teams_token_refreshes_total{result=\"ok\"}"
        ),
        Some(1.0)
    );

    // Stopped, Graph gets two messages; restarted, exactly those come, then what follows.
    sb.terminate();
    graph.post(DM, |w| {
        message(w, DM, (ADA_ID, "Ada Lovelace"), "while stopped 1")
    });
    graph.post(GROUP, |w| {
        message(w, GROUP, (ADA_ID, "Ada Lovelace"), "while stopped 2")
    });
    sb.spawn();
    let got = eventually(
        Duration::from_secs(15),
        "the two sent while stopped",
        || {
            let m = teams_messages(&sb);
            (m.len() >= 8).then_some(m)
        },
    );
    let mut after: Vec<String> = contents(&got).split_off(6);
    after.sort();
    assert_eq!(after, ["while stopped 1", "while stopped 2"]);
    graph.post(DM, |w| {
        message(w, DM, (ADA_ID, "Ada Lovelace"), "after the restart")
    });
    let got = eventually(Duration::from_secs(10), "one more", || {
        let m = teams_messages(&sb);
        (m.len() >= 9).then_some(m)
    });
    assert_eq!(got.len(), 9, "nothing replayed: {:#?}", contents(&got));

    // The refresh token is revoked: the source stops and says so, and does not loop.
    graph.with(|w| {
        w.refresh_revoked = true;
        w.access = "revoked again".into();
    });
    let line = eventually(Duration::from_secs(10), "sign-in needed", || {
        let l = status_line(&sb);
        l.contains("sign-in needed").then_some(l)
    });
    assert_eq!(line, "teams: sign-in needed: switchboard login teams");
    let grants = graph.with(|w| w.refresh_grants);
    let requests = graph.seen("");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(graph.with(|w| w.refresh_grants), grants, "no refresh loop");
    assert_eq!(graph.seen(""), requests, "no Graph calls while signed out");

    // Signing in again resumes it, from the cursors.
    graph.with(|w| {
        w.refresh_revoked = false;
        w.access = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.access-again".into();
        w.device = vec!["ok"];
    });
    graph.post(DM, |w| {
        message(w, DM, (ADA_ID, "Ada Lovelace"), "after signing in again")
    });
    assert!(login(&sb).status.success());
    let got = eventually(
        Duration::from_secs(10),
        "the message after signing in",
        || {
            let m = teams_messages(&sb);
            (m.len() >= 10).then_some(m)
        },
    );
    assert_eq!(contents(&got)[9], "after signing in again");
}

/// `POST` to the daemon's notification route, as Graph does.
fn notify(sb: &Switchboard, query: &str, body: &Value) -> Reply {
    http_request(
        sb.ingest.as_deref().unwrap(),
        "POST",
        &format!("/v1/teams/notifications{query}"),
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

/// A change notification for message `mid` of `chat` (change-notifications-delivery-webhooks,
/// "Change notification example"), without resource data.
fn created(client_state: &str, chat: &str, mid: &str) -> Value {
    json!({"value": [{
        "subscriptionId": "7f105c7d-2dc5-4530-97cd-4e7ae6534c01", "changeType": "created",
        "clientState": client_state, "subscriptionExpirationDateTime": now_text(Utc::now() + TimeDelta::minutes(50)),
        "resource": format!("chats('{chat}')/messages('{mid}')"),
        "resourceData": {"id": mid, "@odata.type": "#Microsoft.Graph.chatMessage",
            "@odata.id": format!("chats('{chat}')/messages('{mid}')")},
        "tenantId": TENANT
    }]})
}

/// A lifecycle notification (change-notifications-lifecycle-events).
fn lifecycle(client_state: &str, event: &str) -> Value {
    json!({"value": [{
        "subscriptionId": "7f105c7d-2dc5-4530-97cd-4e7ae6534c01",
        "subscriptionExpirationDateTime": now_text(Utc::now() + TimeDelta::minutes(50)),
        "tenantId": TENANT, "clientState": client_state, "lifecycleEvent": event
    }]})
}

#[test]
fn change_notifications_validate_check_the_client_state_and_follow_lifecycle_events() {
    let graph = StandIn::start();
    graph.chat(DM, "oneOnOne", (ADA_ID, "Ada Lovelace"), "before the start");
    graph.chat(GROUP, "group", (ADA_ID, "Ada Lovelace"), "before the start");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/v1/teams/notifications");
    let mut sb = Switchboard::new();
    sb.write(
        "switchboard.json",
        &settings(&graph, json!({"poll": "1h", "notificationUrl": url})),
    );
    assert!(login(&sb).status.success());
    sb.spawn_with(&[
        "serve",
        "--no-stdio",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]);
    let line = eventually(Duration::from_secs(20), "subscribed", || {
        let l = status_line(&sb);
        l.starts_with("teams: subscribed to change notifications until")
            .then_some(l)
    });
    assert_eq!(
        graph.with(|w| w.subscriptions),
        1,
        "validated and made: {line}"
    );
    let state = graph.with(|w| w.client_state.clone()).unwrap();
    assert!(state.len() >= 32, "a random clientState: {state:?}");

    // A handshake nobody asked for is refused.
    let r = notify(&sb, "?validationToken=hello", &json!({}));
    assert_eq!(r.status, 400, "{}", r.body);

    // A notification with a wrong clientState is ignored and counted; the right one is fetched.
    let mid = graph.post(DM, |w| {
        message(w, DM, (ADA_ID, "Ada Lovelace"), "<p>notified</p>")
    });
    let last = if state.ends_with('x') { "y" } else { "x" };
    let wrong = format!("{}{last}", &state[..state.len() - 1]);
    assert_eq!(notify(&sb, "", &created(&wrong, DM, &mid)).status, 202);
    eventually(
        Duration::from_secs(10),
        "the wrong clientState counted",
        || {
            (metric(
                &sb,
                "switchboard_teams_notification_failures_total{reason=\"client_state\"}",
            ) == Some(1.0))
            .then_some(())
        },
    );
    assert_eq!(
        graph.seen(&format!("GET /v1.0/chats/{DM}/messages/{mid}")),
        0
    );
    assert_eq!(notify(&sb, "", &created(&state, DM, &mid)).status, 202);
    let got = eventually(Duration::from_secs(10), "the notified message", || {
        let m = teams_messages(&sb);
        (!m.is_empty()).then_some(m)
    });
    assert_eq!(contents(&got), ["notified"]);
    // Notified twice (Graph may): appended once.
    assert_eq!(notify(&sb, "", &created(&state, DM, &mid)).status, 202);

    // reauthorizationRequired: the subscription is renewed.
    assert_eq!(
        notify(&sb, "", &lifecycle(&state, "reauthorizationRequired")).status,
        202
    );
    eventually(Duration::from_secs(10), "a renewal", || {
        (graph.with(|w| w.renewals) == 1).then_some(())
    });

    // missed: a catch-up by polling from the cursors brings what was not notified.
    graph.post(GROUP, |w| {
        message(w, GROUP, (ADA_ID, "Ada Lovelace"), "never notified")
    });
    assert_eq!(notify(&sb, "", &lifecycle(&state, "missed")).status, 202);
    let got = eventually(Duration::from_secs(10), "the caught-up message", || {
        let m = teams_messages(&sb);
        (m.len() >= 2).then_some(m)
    });
    assert_eq!(contents(&got), ["notified", "never notified"]);

    // subscriptionRemoved: a new subscription, validated again.
    assert_eq!(
        notify(&sb, "", &lifecycle(&state, "subscriptionRemoved")).status,
        202
    );
    eventually(Duration::from_secs(10), "a new subscription", || {
        (graph.with(|w| w.subscriptions) == 2).then_some(())
    });
    assert_eq!(teams_messages(&sb).len(), 2, "{:#?}", teams_messages(&sb));
    sb.terminate();
    assert!(
        graph.seen("DELETE /v1.0/subscriptions/") >= 1,
        "unsubscribed at stop"
    );
}
