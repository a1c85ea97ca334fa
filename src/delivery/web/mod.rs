//! The approval page: `/ui` on the daemon's ingest listener, where a person sees the pending
//! confirms (rule, channel, an excerpt of the message, the prompt, the tool whitelist, the
//! time left) and answers them, and watches messages and actions arrive.
//!
//! It owns nothing of the inbox: every read and every answer is an operation on the daemon's
//! [`Local`], as for any front end, and an answer is recorded with `via: web`. The page is
//! plain HTML, CSS and JS compiled into the binary (no build step, no CDN); it refetches its
//! state when the server-sent event stream (`/ui/api/events`) says something changed.
//!
//! Access ([`access`]): nothing under `/ui` but the static files and the login answers
//! without the session cookie that a one-time link of `switchboard ui` sets; a state-changing
//! request also needs the session's CSRF token in `X-CSRF-Token`, a JSON body,
//! `Sec-Fetch-Site: same-origin` (which every current browser sends) and no cross-site
//! `Origin`, all checked from the headers before the body is read. `X-Forwarded-Host` and `X-Forwarded-Proto` count only from a proxy listed in
//! `http.trustedProxies`; reached over https that way, the cookie is `Secure`. Served beyond
//! this machine with no such proxy, the page is plain HTTP: `switchboard ui` then gives a link
//! only with `--public`. `switchboard ui --revoke` ends every session and unused link.
//!
//! | route | needs | answers |
//! | --- | --- | --- |
//! | `GET /ui/login?code=` | a one-time code | the cookie, and a redirect to `/ui` |
//! | `GET /ui` | cookie | the page |
//! | `GET /ui/app.js`, `/ui/app.css` | none | the static script and style |
//! | `GET /ui/api/state` | cookie | pending and recently closed confirms, recent messages, the CSRF token |
//! | `GET /ui/api/events` | cookie | server-sent events: `action`, `message` |
//! | `POST /ui/api/confirm` | cookie + CSRF | `{"id", "decision": "approve" or "deny"}` |

pub mod access;

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use crate::actions::By;
use crate::actions::Via;
use crate::auth::{Origin, same_secret};
use crate::control::ops::{Closed, Confirm, Decision, List, Pending};
use crate::control::{ItemView, Local};
use crate::message::MessageView;
pub use access::WebAccess;
use access::{COOKIE, SESSION_TTL, WebSession};

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");

/// What the page shows without a session: how to get one (the command names the home), and
/// nothing of the inbox.
fn signed_out_page() -> String {
    format!(
        "<!doctype html><meta charset=utf-8><meta name=viewport content=\"width=device-width\">\
         <title>switchboard</title><p>This page needs a session: run <code>{}</code> and open \
         the link it prints (it works once, for two minutes).",
        ui_command()
    )
}

/// `switchboard ui` on this home, escaped for HTML.
fn ui_command() -> String {
    crate::home::command("ui")
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// How many recent messages and closed confirms the page shows.
const RECENT: usize = 20;

struct Web {
    api: Local,
    access: Arc<WebAccess>,
    /// Where each page's event stream runs (it ends with the page or the shutdown).
    tasks: tokio_util::task::TaskTracker,
}

/// The `/ui` routes, answering through `api`, letting in whom `access` knows; the event
/// streams run on `tasks`.
pub fn router(api: Local, access: Arc<WebAccess>, tasks: tokio_util::task::TaskTracker) -> Router {
    Router::new()
        .route("/ui", get(page))
        .route("/ui/", get(page))
        .route("/ui/login", get(login))
        .route("/ui/app.js", get(script))
        .route("/ui/app.css", get(style))
        .route("/ui/api/state", get(state))
        .route("/ui/api/events", get(events))
        .route("/ui/api/confirm", post(confirm))
        .with_state(Arc::new(Web { api, access, tasks }))
}

/// The headers every `/ui` answer carries: nothing cached, not framed, no referrer, only our
/// own script.
fn guarded(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; frame-ancestors 'none'; form-action 'none'; base-uri 'none'",
        ),
    );
    response
}

fn refusal(status: StatusCode, code: &str, message: &str) -> Response {
    guarded((status, Json(json!({"error": code, "message": message}))).into_response())
}

/// The session the request's cookie names; a request that has one is authenticated
/// ([`crate::listener::Standing`]).
fn session(web: &Web, headers: &HeaderMap, extensions: &Extensions) -> Option<WebSession> {
    let session = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE)
        .find_map(|(_, id)| web.access.session(id))?;
    crate::listener::authenticated(extensions);
    Some(session)
}

/// The first value of the `X-Forwarded-*` header `name`, when the request came from a trusted
/// proxy (`http.trustedProxies`); none from anyone else, whatever they send.
fn forwarded<'a>(
    web: &Web,
    headers: &'a HeaderMap,
    extensions: &Extensions,
    name: &str,
) -> Option<&'a str> {
    let peer = crate::listener::Standing::of(extensions)?.peer()?;
    if !web.access.trusts(peer.ip()) {
        return None;
    }
    let value = headers.get(name)?.to_str().ok()?;
    value.split(',').next().map(str::trim)
}

fn signed_out() -> Response {
    refusal(
        StatusCode::UNAUTHORIZED,
        "no_session",
        &format!(
            "no session: run `{}` and open the link it prints",
            crate::home::command("ui")
        ),
    )
}

async fn page(State(web): State<Arc<Web>>, headers: HeaderMap, ext: Extensions) -> Response {
    if session(&web, &headers, &ext).is_none() {
        return guarded(
            (
                StatusCode::UNAUTHORIZED,
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                signed_out_page(),
            )
                .into_response(),
        );
    }
    guarded(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response())
}

async fn script() -> Response {
    guarded(
        (
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
            SCRIPT,
        )
            .into_response(),
    )
}

async fn style() -> Response {
    guarded(([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response())
}

#[derive(Deserialize)]
struct LoginQuery {
    #[serde(default)]
    code: String,
}

async fn login(
    State(web): State<Arc<Web>>,
    Query(q): Query<LoginQuery>,
    headers: HeaderMap,
    ext: Extensions,
) -> Response {
    let Some((id, _)) = web.access.redeem(&q.code) else {
        return guarded(
            (
                StatusCode::FORBIDDEN,
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                format!(
                    "<!doctype html><meta charset=utf-8><title>switchboard</title><p>This link \
                     was used already or has expired: run <code>{}</code> for a new one.",
                    ui_command()
                ),
            )
                .into_response(),
        );
    };
    crate::listener::authenticated(&ext);
    // Reached over https (through a trusted TLS proxy): the browser sends it over https only.
    let https = forwarded(&web, &headers, &ext, "x-forwarded-proto")
        .is_some_and(|proto| proto.eq_ignore_ascii_case("https"));
    let cookie = format!(
        "{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{}",
        SESSION_TTL.as_secs(),
        if https { "; Secure" } else { "" }
    );
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/ui")]).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    guarded(response)
}

async fn state(State(web): State<Arc<Web>>, headers: HeaderMap, ext: Extensions) -> Response {
    let Some(session) = session(&web, &headers, &ext) else {
        return signed_out();
    };
    let pending = web.api.call(Pending {}).await.unwrap_or_default();
    let closed = web
        .api
        .call(Closed { limit: RECENT })
        .await
        .unwrap_or_default();
    let messages: Vec<MessageView> = web
        .api
        .call(List {
            channel: None,
            limit: RECENT,
        })
        .await
        .map(|r| r.messages.iter().map(MessageView::from).collect())
        .unwrap_or_default();
    guarded(
        Json(json!({
            "csrf": session.csrf,
            "now": crate::message::format_timestamp(chrono::Utc::now()),
            "pending": pending,
            "closed": closed,
            "messages": messages,
        }))
        .into_response(),
    )
}

async fn events(State(web): State<Arc<Web>>, headers: HeaderMap, ext: Extensions) -> Response {
    if session(&web, &headers, &ext).is_none() {
        return signed_out();
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(64);
    let api = web.api.clone();
    web.tasks.spawn(async move {
        let mut feed = api.subscribe();
        let mut last = feed.committed.borrow_and_update();
        let shutdown = api.shutdown().clone();
        loop {
            let sent = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tx.closed() => return,
                got = feed.events.recv() => match got {
                    Ok(e) => {
                        let mut v = serde_json::to_value(&e).unwrap_or_default();
                        if let crate::actions::Event::Queued { item } = &e {
                            v["item"] = serde_json::to_value(ItemView::from(item)).unwrap_or_default();
                        }
                        tx.send(SseEvent::default().event("action").data(v.to_string())).await
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        tx.send(SseEvent::default().event("action").data("{}")).await
                    }
                    Err(_) => return,
                },
                changed = feed.committed.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let now = feed.committed.borrow_and_update();
                    let fresh = api
                        .call(List { channel: None, limit: RECENT })
                        .await
                        .map(|r| r.messages)
                        .unwrap_or_default();
                    let mut result = Ok(());
                    for m in fresh.iter().filter(|m| m.seq > last) {
                        let v = serde_json::to_string(&MessageView::from(m)).unwrap_or_default();
                        result = tx.send(SseEvent::default().event("message").data(v)).await;
                    }
                    last = now;
                    result
                }
            };
            if sent.is_err() {
                return;
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    guarded(
        Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response(),
    )
}

#[derive(Deserialize)]
struct ConfirmBody {
    id: u64,
    decision: String,
}

/// The largest body `POST /ui/api/confirm` reads: an id and a word.
const CONFIRM_BODY_LIMIT: usize = 4096;

/// `POST /ui/api/confirm`: the session, the site and the CSRF token are checked from the
/// headers before the body is read.
async fn confirm(State(web): State<Arc<Web>>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    let session = match confirm_refusal(&web, &parts.headers, &parts.extensions) {
        Ok(session) => session,
        Err(refused) => return refused,
    };
    let Ok(body) = axum::body::to_bytes(body, CONFIRM_BODY_LIMIT).await else {
        return refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_body",
            "the body did not arrive whole, or is larger than an answer can be",
        );
    };
    let Ok(answer) = serde_json::from_slice::<ConfirmBody>(&body) else {
        return refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
            "expected {\"id\": N, \"decision\": \"approve\" or \"deny\"}",
        );
    };
    answer_confirm(&web, answer, session.by).await
}

/// The session of a request that may answer a confirm, or the refusal of one that may not,
/// from its headers alone: it must carry a session, no other site's origin, the session's CSRF
/// token, a JSON body.
#[allow(clippy::result_large_err)] // once per request, and the refusal is its response
fn confirm_refusal(
    web: &Web,
    headers: &HeaderMap,
    extensions: &Extensions,
) -> Result<WebSession, Response> {
    let Some(session) = session(web, headers, extensions) else {
        return Err(signed_out());
    };
    // Every browser the page runs in says where a request comes from; one that does not say
    // it comes from the page itself answers nothing (issue 47: with neither this nor `Origin`
    // a request was accepted).
    match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        Some("same-origin") => {}
        Some(_) => {
            return Err(refusal(
                StatusCode::FORBIDDEN,
                "cross_site",
                "a request from another site cannot answer a confirm",
            ));
        }
        None => {
            return Err(refusal(
                StatusCode::FORBIDDEN,
                "cross_site",
                "an answer must come from the approval page: the request has no \
                 `Sec-Fetch-Site: same-origin`, which browsers send",
            ));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        let header_of = |name| {
            headers
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        // Behind a trusted reverse proxy, `X-Forwarded-Host` names the host the browser used.
        let forwarded = forwarded(web, headers, extensions, "x-forwarded-host");
        let hosts = [header_of(header::HOST.as_str()), forwarded];
        let origin = Origin::parse(origin);
        let same_site = hosts
            .into_iter()
            .flatten()
            .any(|host| origin.as_ref().is_some_and(|o| o.is_host(host)));
        if !same_site {
            return Err(refusal(
                StatusCode::FORBIDDEN,
                "cross_site",
                "a request from another site cannot answer a confirm",
            ));
        }
    }
    let token = headers
        .get("x-csrf-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !same_secret(token, &session.csrf) {
        return Err(refusal(
            StatusCode::FORBIDDEN,
            "csrf",
            "missing or wrong `X-CSRF-Token`; reload the page",
        ));
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return Err(refusal(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send `Content-Type: application/json`",
        ));
    }
    Ok(session)
}

/// Records the answer of a confirm that [`confirm_refusal`] let through, given by the browser
/// signed in as `by`.
async fn answer_confirm(web: &Web, answer: ConfirmBody, by: By) -> Response {
    let Some(decision) = Decision::parse(&answer.decision) else {
        return refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
            "`decision` is \"approve\" or \"deny\"",
        );
    };
    let answered = web
        .api
        .call(Confirm {
            id: answer.id,
            decision,
            by,
            claim_for: None,
            via: Some(Via::Web),
        })
        .await;
    match answered {
        Ok(item) => {
            guarded(Json(json!({"id": answer.id, "approved": item.is_some()})).into_response())
        }
        // The one HTTP mapping: unknown 404, expired 410, already answered 409, not allowed 403.
        Err(e) => refusal(e.http_status(), e.code(), &e.to_string()),
    }
}
