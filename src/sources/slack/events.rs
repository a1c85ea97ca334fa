//! The Events API (`slack.mode: events`): Slack posts events to `POST /v1/slack/events` and
//! button clicks to `POST /v1/slack/interactivity` on the ingest listener.
//!
//! - **Every request**, `url_verification` included, is checked before anything is read of
//!   it: Slack's v0 signature (`X-Slack-Signature: v0=` and the hex HMAC-SHA256 of
//!   `v0:{X-Slack-Request-Timestamp}:{body}` under the signing secret, compared in constant
//!   time) and a timestamp within [`MAX_SKEW`] of now; a signature seen before within that
//!   window is a replay. Any of these → `401`, nothing stored, counted.
//! - **`url_verification`** answers `{"challenge": ...}`.
//! - **`event_callback`** answers `200` once the message is durable in the inbox (or at once,
//!   when the event is skipped); a retry (`X-Slack-Retry-Num`) of a stored event carries the
//!   same `event_id`, and the inbox stores it once. An event that could not be stored answers
//!   `503`, and Slack tries again.
//! - **Interactivity**: the form's `payload=` (JSON), answered `200` once the decision is in
//!   the actions journal.
//!
//! The routes have no bearer token (Slack sends none): the signature is the authentication.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::{Inner, approvals};

/// Where Slack posts events.
pub const EVENTS_PATH: &str = "/v1/slack/events";

/// Where Slack posts button clicks.
pub const INTERACTIVITY_PATH: &str = "/v1/slack/interactivity";

/// The largest body read: Slack's event payloads are a few KiB.
pub const BODY_LIMIT: usize = 512 * 1024;

/// How far a request's timestamp may be from now, in seconds (Slack's own advice: 5 minutes).
pub const MAX_SKEW: i64 = 5 * 60;

/// The signatures of the last [`MAX_SKEW`], to refuse a replay.
#[derive(Default)]
pub struct Replays(Mutex<Seen>);

/// The signatures seen, oldest first, and as a set.
#[derive(Default)]
struct Seen {
    order: VecDeque<(i64, String)>,
    set: HashSet<String>,
}

impl Replays {
    /// Remembers `signature` of a request stamped `at`; false when it was seen before.
    fn first(&self, signature: &str, at: i64, now: i64) -> bool {
        let mut seen = self.0.lock().unwrap();
        while let Some((old, _)) = seen.order.front() {
            if *old >= now - MAX_SKEW {
                break;
            }
            let (_, sig) = seen.order.pop_front().expect("a front");
            seen.set.remove(&sig);
        }
        if !seen.set.insert(signature.to_string()) {
            return false;
        }
        seen.order.push_back((at, signature.to_string()));
        true
    }
}

/// The two routes.
pub fn router(inner: Arc<Inner>) -> Router {
    Router::new()
        .route(EVENTS_PATH, post(events))
        .route(INTERACTIVITY_PATH, post(interactivity))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(inner)
}

async fn events(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(why) = check(&inner, &headers, &body) {
        return refuse(StatusCode::UNAUTHORIZED, "invalid_signature", why);
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "invalid_payload",
            "the body is not JSON",
        );
    };
    match payload.get("type").and_then(Value::as_str) {
        Some("url_verification") => {
            let challenge = payload.get("challenge").cloned().unwrap_or_default();
            axum::Json(json!({ "challenge": challenge })).into_response()
        }
        Some("event_callback") => match inner.on_event(&payload).await {
            Ok(_) => StatusCode::OK.into_response(),
            Err(e) => refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_stored",
                &format!("the event was not stored: {e}; Slack delivers it again"),
            ),
        },
        _ => StatusCode::OK.into_response(),
    }
}

async fn interactivity(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(why) = check(&inner, &headers, &body) {
        return refuse(StatusCode::UNAUTHORIZED, "invalid_signature", why);
    }
    let payload = form_urlencoded::parse(&body)
        .find(|(k, _)| k == "payload")
        .and_then(|(_, v)| serde_json::from_str::<Value>(&v).ok());
    let Some(payload) = payload else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "invalid_payload",
            "the body has no `payload` of JSON",
        );
    };
    let Some(cx) = inner.source.get() else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "starting",
            "the source is starting",
        );
    };
    match approvals::on_click(&inner, cx, &payload).await {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, "not_recorded", &e),
    }
}

/// The signature and timestamp checks (a failure counted); why one fails.
fn check(inner: &Inner, headers: &HeaderMap, body: &[u8]) -> Result<(), &'static str> {
    let secret = inner.tokens.signing_secret.as_deref().unwrap_or_default();
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let now = chrono::Utc::now().timestamp();
    let verdict = verify(
        secret,
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
        body,
        now,
    )
    .and_then(|at| {
        let signature = header("x-slack-signature").unwrap_or_default();
        if inner.replays.first(signature, at, now) {
            Ok(())
        } else {
            Err("a replay: this signature was seen before")
        }
    });
    verdict.inspect_err(|why| {
        inner
            .counts
            .signature_failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(why, "slack: a request refused for its signature");
    })
}

/// Checks Slack's v0 signature of `body` stamped `timestamp` at `now`: the timestamp, or why
/// it is refused.
pub fn verify(
    secret: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<i64, &'static str> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err("missing `X-Slack-Request-Timestamp` or `X-Slack-Signature`");
    };
    let at: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| "`X-Slack-Request-Timestamp` is not a number")?;
    if (now - at).abs() > MAX_SKEW {
        return Err("`X-Slack-Request-Timestamp` is more than 5 minutes from now");
    }
    let expected = signature
        .strip_prefix("v0=")
        .and_then(crate::auth::decode_hex)
        .ok_or("`X-Slack-Signature` is not `v0=` and hex digits")?;
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|_| "no signing secret")?;
    mac.update(format!("v0:{}:", timestamp.trim()).as_bytes());
    mac.update(body);
    mac.verify_slice(&expected).map_err(
        |_| "`X-Slack-Signature` does not match the body; check SWITCHBOARD_SLACK_SIGNING_SECRET",
    )?;
    Ok(at)
}

fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": code, "message": message})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slack's example in "Verifying requests from Slack" (api.slack.com/authentication/verifying-requests-from-slack).
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    #[test]
    fn slacks_documented_example_verifies() {
        let at = 1531420618;
        assert_eq!(
            verify(
                SECRET,
                Some("1531420618"),
                Some(SIGNATURE),
                BODY.as_bytes(),
                at + 10
            ),
            Ok(at)
        );
        assert!(
            verify(
                SECRET,
                Some("1531420618"),
                Some(SIGNATURE),
                b"token=changed",
                at
            )
            .is_err()
        );
        assert!(
            verify(
                "another",
                Some("1531420618"),
                Some(SIGNATURE),
                BODY.as_bytes(),
                at
            )
            .is_err()
        );
        assert!(
            verify(
                SECRET,
                Some("1531420619"),
                Some(SIGNATURE),
                BODY.as_bytes(),
                at
            )
            .is_err()
        );
        assert!(verify(SECRET, None, Some(SIGNATURE), BODY.as_bytes(), at).is_err());
        assert!(verify(SECRET, Some("1531420618"), None, BODY.as_bytes(), at).is_err());
        let stale = verify(
            SECRET,
            Some("1531420618"),
            Some(SIGNATURE),
            BODY.as_bytes(),
            at + 301,
        );
        assert_eq!(
            stale,
            Err("`X-Slack-Request-Timestamp` is more than 5 minutes from now")
        );
    }

    #[test]
    fn a_signature_seen_before_is_a_replay() {
        let r = Replays::default();
        assert!(r.first("v0=aa", 100, 100));
        assert!(!r.first("v0=aa", 100, 200));
        assert!(r.first("v0=bb", 100, 200));
        assert!(
            r.first("v0=aa", 500, 500),
            "forgotten once out of the window"
        );
    }
}
