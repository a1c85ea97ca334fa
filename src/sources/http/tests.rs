//! The ingest router without a socket (`oneshot`), on an in-memory app unless a test needs a
//! journal on disk.

use std::time::{Duration, Instant};

use axum::body::Body;
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::*;
use crate::app::Core;
use crate::config::{Config, Home};
use crate::control::Local;
use crate::message::Message;
use crate::rules::RuleSet;
use sha2::Sha256;

const TOKEN: &str = "test-token-0123456789";
const SECRET: &str = "It's a Secret to Everybody";

fn config(edit: impl FnOnce(&mut HttpSettings)) -> Config {
    let mut config = Config::default();
    config.http.token = Some(TOKEN.into());
    config.http.github_secret = Some(SECRET.into());
    edit(&mut config.http);
    config
}

/// The ingest router's world: a core, the operations on it, the live settings.
#[derive(Clone)]
struct Fixture {
    core: Arc<Core>,
    local: Local,
    http: Arc<LiveHttp>,
    tasks: tokio_util::task::TaskTracker,
}

impl Fixture {
    fn of(core: Arc<Core>, config: &Config, tasks: tokio_util::task::TaskTracker) -> Fixture {
        Fixture {
            local: Local::bare(core.clone()),
            core,
            http: Arc::new(LiveHttp::new(config.http.clone())),
            tasks,
        }
    }

    /// On disk in `home`.
    async fn start(home: Home, config: Config) -> Fixture {
        let tasks = tokio_util::task::TaskTracker::new();
        let core = Core::start(
            home,
            crate::daemon::core_settings(&config),
            CancellationToken::new(),
            tasks.clone(),
        )
        .await
        .unwrap();
        Fixture::of(core, &config, tasks)
    }

    fn router(&self) -> Router {
        router(
            crate::sources::SourceContext::new(self.local.clone(), self.tasks.clone()),
            self.http.clone(),
        )
    }

    /// Message `seq`, when committed and still in the ring.
    fn get(&self, seq: u64) -> Option<Message> {
        let inbox = &self.core.components().inbox;
        inbox.get(seq).map(|m| (*m).clone())
    }

    fn last_seq(&self) -> u64 {
        self.core.components().inbox.last_seq()
    }

    async fn metrics(&self) -> String {
        self.router()
            .oneshot(authed("GET", "/metrics", Body::empty()))
            .await
            .map(|r| r.into_body())
            .unwrap()
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
            .unwrap()
    }

    async fn stop(&self) {
        self.core.shutdown().cancel();
        self.core.close().await;
    }
}

fn app(edit: impl FnOnce(&mut HttpSettings)) -> Fixture {
    let config = config(edit);
    let core = Core::memory(crate::daemon::core_settings(&config), RuleSet::builtin());
    Fixture::of(core, &config, tokio_util::task::TaskTracker::new())
}

#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
    json: Value,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A refusal as users see it: the status, the stable code, and a lowercase sentence.
    #[track_caller]
    fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "{}", self.text);
        assert_eq!(self.json["error"], code, "{}", self.text);
        let message = self.json["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(|c: char| !c.is_uppercase()) && !message.is_empty(),
            "message should be one lowercase sentence: {message:?}"
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{}",
            self.text
        );
    }

    fn seqs(&self) -> Vec<(u64, bool)> {
        self.json["accepted"]
            .as_array()
            .unwrap_or_else(|| panic!("no `accepted` in {}", self.text))
            .iter()
            .map(|a| {
                (
                    a["seq"].as_u64().unwrap(),
                    a["duplicate"].as_bool().unwrap(),
                )
            })
            .collect()
    }
}

async fn send(router: &Router, request: http::Request<Body>) -> Reply {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        text,
        json,
    }
}

/// A JSON request with the bearer token.
fn authed(method: &str, path: &str, body: impl Into<Body>) -> http::Request<Body> {
    http::Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap()
}

/// A request with no headers at all.
fn bare(method: &str, path: &str, body: impl Into<Body>) -> http::Request<Body> {
    http::Request::builder()
        .method(method)
        .uri(path)
        .body(body.into())
        .unwrap()
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A GitHub delivery as GitHub sends it: the fixture body with the fixture's headers.
fn github_delivery(event: &str) -> http::request::Builder {
    let headers = String::from_utf8(fixture(&format!("github-{event}.headers"))).unwrap();
    headers.lines().fold(
        http::Request::builder().method("POST").uri("/v1/github"),
        |b, line| {
            let (k, v) = line.split_once(": ").unwrap();
            b.header(k, v)
        },
    )
}

fn github_signature(body: &[u8]) -> String {
    use hmac::{Hmac, KeyInit, Mac};
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    let sig: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={sig}")
}

// ---- generic messages -------------------------------------------------------------------

#[tokio::test]
async fn a_single_message_is_stored_and_acknowledged_with_its_seq() {
    let app = app(|_| {});
    let router = app.router();
    let body = r#"{"server": "deploy-bot", "channel": "ci/deploys", "content": "api v42 is live",
                   "metadata": {"env": "prod"}, "timestamp": "2026-03-02T10:00:00Z"}"#;
    let r = send(&router, authed("POST", "/v1/messages", body)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(
        r.json,
        json!({"accepted": [{"seq": 1, "duplicate": false}]})
    );
    let msg = app.get(1).expect("committed");
    assert_eq!(msg.server, "deploy-bot");
    assert_eq!(msg.channel, "ci/deploys");
    assert_eq!(msg.content, "api v42 is live");
    assert_eq!(&msg.metadata["env"], "prod");
    assert_eq!(msg.timestamp_rfc3339(), "2026-03-02T10:00:00Z");
}

/// The direct read of a body gives what the read through a `Value` gives, and leaves every body
/// it does not take to that read (whose errors name what is wrong).
#[test]
fn the_direct_read_of_a_body_agrees_with_the_read_through_a_value() {
    let taken = [
        r#"{"server": "s", "channel": "c/d", "content": "x"}"#,
        r#"[{"server": "s", "channel": "c", "content": "x", "id": "a", "metadata": {"k": "v",
            "b": "1", "k": "w"}, "timestamp": "2026-03-02T10:00:00+02:00"}, {"server": "t",
            "channel": "c", "content": "caf\u00e9 \"q\"", "id": null}]"#,
        "[]",
        " {\"server\": \"s\", \"channel\": \"c\", \"content\": \"\"}\n",
    ];
    for body in taken {
        let direct = read_messages(body.as_bytes()).expect(body);
        let slow = generic_messages(serde_json::from_str(body).unwrap()).unwrap();
        assert_eq!(direct, slow, "{body}");
    }
    let left = [
        // Not JSON, or more after it.
        "{",
        r#"{"server": "s", "channel": "c", "content": "x"} {}"#,
        // The wrong shape: each is the slow read's to explain.
        r#"["s", "c", "x"]"#,
        r#"[["s", "c", "x"]]"#,
        r#"{"server": "s", "channel": "c"}"#,
        r#"{"server": "s", "channel": "c", "content": "x", "extra": 1}"#,
        r#"{"server": "s", "channel": "c", "content": "x", "metadata": {"n": 1}}"#,
        r#""text""#,
        // A key given twice: the `Value` keeps the last, so only the slow read takes it.
        r#"{"server": "s", "server": "t", "channel": "c", "content": "x"}"#,
    ];
    for body in left {
        assert_eq!(read_messages(body.as_bytes()), None, "{body}");
    }
    let twice = r#"{"server": "s", "server": "t", "channel": "c", "content": "x"}"#;
    let slow = generic_messages(serde_json::from_str(twice).unwrap()).unwrap();
    assert_eq!(slow[0].server, "t");
}

#[tokio::test]
async fn a_batch_keeps_request_order_and_repeats_answer_duplicate_with_the_original_seq() {
    let app = app(|_| {});
    let router = app.router();
    let body = r#"[
        {"server": "s", "channel": "a", "content": "one", "id": "x-1"},
        {"server": "s", "channel": "b", "content": "two"},
        {"server": "s", "channel": "a", "content": "one again", "id": "x-1"}
    ]"#;
    let r = send(&router, authed("POST", "/v1/messages", body)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(r.seqs(), [(1, false), (2, false), (1, true)]);
    let r = send(&router, authed("POST", "/v1/messages", body)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(
        r.seqs(),
        [(1, true), (3, false), (1, true)],
        "ids are remembered; a message without an id is new every time"
    );
    assert_eq!(app.last_seq(), 3);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("switchboard_messages_ingested_total{source=\"http\"} 3\n"),
        "duplicates are not counted as ingested:\n{metrics}"
    );
}

#[tokio::test]
async fn an_empty_batch_is_accepted_and_stores_nothing() {
    let app = app(|_| {});
    let r = send(&app.router(), authed("POST", "/v1/messages", "[]")).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    assert_eq!(r.json, json!({"accepted": []}));
    assert_eq!(app.last_seq(), 0);
}

#[tokio::test]
async fn a_missing_content_type_is_taken_as_json() {
    let app = app(|_| {});
    let request = http::Request::builder()
        .method("POST")
        .uri("/v1/messages")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::from(r#"{"server":"s","channel":"c","content":"x"}"#))
        .unwrap();
    let r = send(&app.router(), request).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
}

// ---- auth -------------------------------------------------------------------------------

#[tokio::test]
async fn no_token_or_a_wrong_token_is_401_with_a_bearer_challenge() {
    let app = app(|_| {});
    let router = app.router();
    let msg = r#"{"server":"s","channel":"c","content":"x"}"#;
    let with_auth = |value: &str| {
        http::Request::builder()
            .method("POST")
            .uri("/v1/messages")
            .header("authorization", value)
            .body(Body::from(msg))
            .unwrap()
    };

    let r = send(&router, bare("POST", "/v1/messages", msg)).await;
    r.assert_error(401, "missing_token");
    assert_eq!(
        r.header("www-authenticate"),
        Some(r#"Bearer realm="switchboard""#)
    );

    let r = send(&router, with_auth("Bearer not-the-token")).await;
    r.assert_error(401, "invalid_token");
    assert_eq!(
        r.header("www-authenticate"),
        Some(r#"Bearer realm="switchboard", error="invalid_token""#)
    );
    assert_eq!(r.json["message"], "wrong bearer token");

    // A prefix of the right token, and the right token under another scheme.
    let r = send(&router, with_auth(&format!("Bearer {}", &TOKEN[..10]))).await;
    r.assert_error(401, "invalid_token");
    let r = send(&router, with_auth(&format!("Basic {TOKEN}"))).await;
    r.assert_error(401, "missing_token");

    for path in ["/v1/alertmanager", "/metrics"] {
        let method = if path == "/metrics" { "GET" } else { "POST" };
        let r = send(&router, bare(method, path, "")).await;
        r.assert_error(401, "missing_token");
    }
    assert_eq!(app.last_seq(), 0, "nothing stored");

    // The scheme is case-insensitive.
    let r = send(&router, with_auth(&format!("bearer {TOKEN}"))).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
}

#[tokio::test]
async fn with_no_token_configured_nothing_is_accepted() {
    let app = app(|h| h.token = None);
    let r = send(&app.router(), authed("POST", "/v1/messages", "{}")).await;
    r.assert_error(401, "invalid_token");
}

#[tokio::test]
async fn disable_auth_accepts_requests_without_a_token() {
    let app = app(|h| {
        h.token = None;
        h.disable_auth = true;
    });
    let r = send(
        &app.router(),
        bare(
            "POST",
            "/v1/messages",
            r#"{"server":"s","channel":"c","content":"x"}"#,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
}

#[test]
fn disable_auth_is_refused_off_loopback() {
    let loopback: SocketAddr = "127.0.0.1:8787".parse().unwrap();
    let v6_loopback: SocketAddr = "[::1]:8787".parse().unwrap();
    let open: SocketAddr = "0.0.0.0:8787".parse().unwrap();
    let off = config(|_| {}).http;
    let disabled = config(|h| h.disable_auth = true).http;
    assert_eq!(check(&off, open), Ok(()));
    assert_eq!(check(&disabled, loopback), Ok(()));
    assert_eq!(check(&disabled, v6_loopback), Ok(()));
    let err = check(&disabled, open).unwrap_err();
    assert!(
        err.contains("`http.disableAuth` is only honoured on a loopback address")
            && err.contains("0.0.0.0:8787"),
        "{err}"
    );
}

// ---- limits -----------------------------------------------------------------------------

#[test]
fn rate_limits_parse_as_count_per_period() {
    let q = parse_rate_limit("200/1s").unwrap().unwrap();
    assert_eq!(q.burst_size().get(), 200);
    assert_eq!(q.replenish_interval(), std::time::Duration::from_millis(5));
    let q = parse_rate_limit("10/m").unwrap().unwrap();
    assert_eq!(q.burst_size().get(), 10);
    assert_eq!(q.replenish_interval(), std::time::Duration::from_secs(6));
    assert_eq!(parse_rate_limit(" 0 ").unwrap(), None);
    for bad in [
        "",
        "5m",
        "0/1s",
        "-1/1s",
        "x/1s",
        "10/0",
        "10/parsec",
        "10/30",
    ] {
        assert!(parse_rate_limit(bad).is_err(), "{bad:?} should be refused");
    }
}

#[tokio::test]
async fn each_source_has_its_own_quota_and_a_429_says_when_to_retry() {
    let app = app(|h| h.rate_limit = "2/1h".into());
    let router = app.router();
    let msg = r#"{"server":"s","channel":"c","content":"x"}"#;
    for _ in 0..2 {
        let r = send(&router, authed("POST", "/v1/messages", msg)).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    }
    let r = send(&router, authed("POST", "/v1/messages", msg)).await;
    r.assert_error(429, "rate_limited");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(
        (1..=1800).contains(&retry),
        "one request back per 30 min: {retry}"
    );
    assert_eq!(app.last_seq(), 2, "the refused request stored nothing");

    // Unauthenticated requests do not spend the quota of the real sender...
    let r = send(&router, bare("POST", "/v1/alertmanager", "{}")).await;
    r.assert_error(401, "missing_token");
    // ...and Alertmanager's quota is its own.
    let hook = fixture("alertmanager-firing.json");
    for _ in 0..2 {
        let r = send(&router, authed("POST", "/v1/alertmanager", hook.clone())).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    }
    let r = send(&router, authed("POST", "/v1/alertmanager", hook)).await;
    r.assert_error(429, "rate_limited");
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let app = app(|h| h.body_limit = 64);
    let router = app.router();
    let big = format!(
        r#"{{"server":"s","channel":"c","content":"{}"}}"#,
        "x".repeat(100)
    );
    let r = send(&router, authed("POST", "/v1/messages", big)).await;
    r.assert_error(413, "body_too_large");
    assert_eq!(
        r.json["message"],
        "request body is larger than the limit of 64 bytes (`http.bodyLimit`)"
    );
    // Also when the size is only learnt while reading (no Content-Length).
    let chunks = futures::stream::iter(
        (0..10).map(|_| Ok::<_, std::io::Error>(Bytes::from_static(&[b' '; 20]))),
    );
    let r = send(
        &router,
        authed("POST", "/v1/messages", Body::from_stream(chunks)),
    )
    .await;
    r.assert_error(413, "body_too_large");
    let ok = r#"{"server":"s","channel":"c","content":"x"}"#;
    let r = send(&router, authed("POST", "/v1/messages", ok)).await;
    assert_eq!(
        r.status,
        StatusCode::ACCEPTED,
        "a body under the limit passes"
    );
}

#[tokio::test]
async fn a_content_type_that_is_not_json_is_415() {
    let app = app(|_| {});
    let router = app.router();
    for (path, ctype) in [
        ("/v1/messages", "text/plain"),
        ("/v1/alertmanager", "application/x-www-form-urlencoded"),
    ] {
        let request = http::Request::builder()
            .method("POST")
            .uri(path)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", ctype)
            .body(Body::from("{}"))
            .unwrap();
        let r = send(&router, request).await;
        r.assert_error(415, "unsupported_media_type");
        // `curl -d` sends a form: the message names the header to add.
        assert!(
            r.json["message"]
                .as_str()
                .unwrap()
                .contains("with curl: -H 'Content-Type: application/json'"),
            "{}",
            r.text
        );
    }
    let request = http::Request::builder()
        .method("POST")
        .uri("/v1/messages")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/vnd.api+json; charset=utf-8")
        .body(Body::from(r#"{"server":"s","channel":"c","content":"x"}"#))
        .unwrap();
    assert_eq!(send(&router, request).await.status, StatusCode::ACCEPTED);
}

// ---- bad bodies -------------------------------------------------------------------------

#[tokio::test]
async fn invalid_json_is_400_with_the_parsers_reason() {
    let router = app(|_| {}).router();
    let r = send(&router, authed("POST", "/v1/messages", "")).await;
    r.assert_error(400, "invalid_json");
    assert_eq!(
        r.json["message"],
        "request body is not valid JSON: EOF while parsing a value at line 1 column 0"
    );
    let r = send(&router, authed("POST", "/v1/messages", r#"{"server": }"#)).await;
    r.assert_error(400, "invalid_json");
    assert_eq!(
        r.json["message"],
        "request body is not valid JSON: expected value at line 1 column 12"
    );
    let r = send(&router, authed("POST", "/v1/alertmanager", "{\"version\":")).await;
    r.assert_error(400, "invalid_json");
}

#[tokio::test]
async fn valid_json_of_the_wrong_shape_is_422_naming_what_is_wrong() {
    let app = app(|_| {});
    let router = app.router();
    let cases = [
        (
            r#"{"server": "s", "content": "x"}"#,
            "request body has the wrong shape: missing field `channel`",
        ),
        (
            r#"[{"server": "s", "channel": "c", "content": "x"}, {"server": "s", "channel": "c"}]"#,
            "request body has the wrong shape: [1]: missing field `content`",
        ),
        (
            r#"{"server": "s", "chanel": "c", "content": "x"}"#,
            "request body has the wrong shape: unknown field `chanel`, expected one of \
             `server`, `channel`, `content`, `id`, `metadata`, `timestamp`",
        ),
        (
            r#"{"server": "s", "channel": "c", "content": "x", "metadata": {"n": 1}}"#,
            "request body has the wrong shape: invalid type: integer `1`, expected a string",
        ),
        (
            r#""just text""#,
            "request body has the wrong shape: expected a message object, got a string",
        ),
    ];
    for (body, message) in cases {
        let r = send(&router, authed("POST", "/v1/messages", body)).await;
        r.assert_error(422, "invalid_payload");
        assert_eq!(r.json["message"], message, "{body}");
    }
    let r = send(
        &router,
        authed(
            "POST",
            "/v1/messages",
            r#"{"server": "s", "channel": "c", "content": "x", "timestamp": "noon"}"#,
        ),
    )
    .await;
    r.assert_error(422, "invalid_payload");
    assert_eq!(app.last_seq(), 0, "a bad batch stores nothing");
}

// ---- routes -----------------------------------------------------------------------------

#[tokio::test]
async fn an_unknown_route_is_404_naming_the_routes() {
    let router = app(|_| {}).router();
    let r = send(&router, bare("GET", "/v2/messages", "")).await;
    r.assert_error(404, "not_found");
    assert_eq!(
        r.json["message"],
        "no route for GET /v2/messages; routes: POST /v1/messages, POST /v1/alertmanager, \
         POST /v1/github, GET /metrics, GET /healthz"
    );
}

#[tokio::test]
async fn a_wrong_method_is_405_with_allow() {
    let router = app(|_| {}).router();
    let r = send(&router, authed("GET", "/v1/messages", "")).await;
    r.assert_error(405, "method_not_allowed");
    assert_eq!(r.header("allow"), Some("POST"));
    assert_eq!(
        r.json["message"],
        "method GET is not allowed on /v1/messages; use POST"
    );
    let r = send(&router, bare("DELETE", "/healthz", "")).await;
    r.assert_error(405, "method_not_allowed");
    assert_eq!(r.header("allow"), Some("GET,HEAD"));
    assert_eq!(
        r.json["message"],
        "method DELETE is not allowed on /healthz; use GET or HEAD"
    );
    // On a bearer route the credentials come first.
    let r = send(&router, bare("PUT", "/v1/alertmanager", "")).await;
    r.assert_error(401, "missing_token");
    let r = send(&router, authed("PUT", "/v1/alertmanager", "")).await;
    r.assert_error(405, "method_not_allowed");
}

#[tokio::test]
async fn healthz_needs_no_token() {
    let r = send(&app(|_| {}).router(), bare("GET", "/healthz", "")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text, "ok\n");
}

// ---- Alertmanager -----------------------------------------------------------------------

#[tokio::test]
async fn alertmanager_groups_store_each_alert_once_and_the_resolve_again() {
    let app = app(|_| {});
    let router = app.router();
    let firing = fixture("alertmanager-firing.json");
    let r = send(&router, authed("POST", "/v1/alertmanager", firing.clone())).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(r.seqs(), [(1, false), (2, false), (3, false)]);
    let channels: Vec<_> = (1..=3)
        .map(|s| app.get(s).unwrap().channel.clone())
        .collect();
    assert_eq!(
        channels,
        ["alerts/critical", "alerts/warning", "alerts/none"]
    );
    assert_eq!(app.get(1).unwrap().server, "alertmanager");

    // Alertmanager repeats the group (retry, repeat_interval): nothing new is stored.
    let r = send(&router, authed("POST", "/v1/alertmanager", firing)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    assert_eq!(r.seqs(), [(1, true), (2, true), (3, true)]);

    // The resolve is new.
    let resolved = fixture("alertmanager-resolved.json");
    let r = send(&router, authed("POST", "/v1/alertmanager", resolved)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(r.seqs(), [(4, false), (5, false)]);
    let m = app.get(4).unwrap();
    assert!(
        m.content.starts_with("[RESOLVED] HighLatency"),
        "{}",
        m.content
    );
    assert_eq!(m.channel, "alerts/critical");
    assert!(
        app.metrics()
            .await
            .contains("switchboard_messages_ingested_total{source=\"alertmanager\"} 5\n")
    );
}

#[tokio::test]
async fn an_alertmanager_webhook_of_another_version_is_422() {
    let router = app(|_| {}).router();
    let r = send(
        &router,
        authed(
            "POST",
            "/v1/alertmanager",
            r#"{"version": "3", "alerts": []}"#,
        ),
    )
    .await;
    r.assert_error(422, "unsupported_version");
    assert_eq!(
        r.json["message"],
        "unsupported alertmanager webhook version \"3\"; expected \"4\""
    );
    let r = send(
        &router,
        authed("POST", "/v1/alertmanager", r#"{"version": "4"}"#),
    )
    .await;
    r.assert_error(422, "invalid_payload");
    assert_eq!(
        r.json["message"],
        "request body has the wrong shape: missing field `alerts`"
    );
}

// ---- GitHub -----------------------------------------------------------------------------

#[tokio::test]
async fn signed_github_deliveries_are_stored_once_per_delivery_id() {
    let app = app(|_| {});
    let router = app.router();
    for (event, seq) in [("workflow_run", 1), ("check_run", 2)] {
        let body = fixture(&format!("github-{event}.json"));
        let request = github_delivery(event).body(Body::from(body)).unwrap();
        let r = send(&router, request).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{event}: {}", r.text);
        assert_eq!(r.seqs(), [(seq, false)]);
        let m = app.get(seq).unwrap();
        assert_eq!(m.server, "github");
        assert_eq!(m.channel, format!("ci/{event}"));
    }
    assert!(
        app.get(1)
            .unwrap()
            .content
            .starts_with("octo-org/octo-repo: workflow \"Build\" #562 on main completed: failure")
    );
    // GitHub's "Redeliver" sends the same delivery id again.
    let body = fixture("github-workflow_run.json");
    let request = github_delivery("workflow_run")
        .body(Body::from(body))
        .unwrap();
    assert_eq!(send(&router, request).await.seqs(), [(1, true)]);
}

#[tokio::test]
async fn a_bad_or_missing_signature_is_401_and_stores_nothing() {
    let app = app(|_| {});
    let router = app.router();
    let mut body = fixture("github-workflow_run.json");
    body[20] ^= 1; // one bit changed after signing
    let r = send(
        &router,
        github_delivery("workflow_run")
            .body(Body::from(body))
            .unwrap(),
    )
    .await;
    r.assert_error(401, "invalid_signature");

    let body = fixture("github-check_run.json");
    let r = send(
        &router,
        http::Request::builder()
            .method("POST")
            .uri("/v1/github")
            .header("x-github-event", "check_run")
            .header("x-github-delivery", "d-1")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap(),
    )
    .await;
    r.assert_error(401, "missing_signature");

    // A bearer token is no substitute for the signature.
    let r = send(
        &router,
        authed("POST", "/v1/github", fixture("github-check_run.json")),
    )
    .await;
    r.assert_error(401, "missing_signature");
    assert_eq!(app.last_seq(), 0);
}

#[tokio::test]
async fn github_without_a_configured_secret_is_403() {
    let app = app(|h| h.github_secret = None);
    let body = fixture("github-workflow_run.json");
    let r = send(
        &app.router(),
        github_delivery("workflow_run")
            .body(Body::from(body))
            .unwrap(),
    )
    .await;
    r.assert_error(403, "github_secret_missing");
    assert_eq!(app.last_seq(), 0);
}

#[tokio::test]
async fn a_signed_ping_is_answered_without_storing() {
    let app = app(|_| {});
    let body = br#"{"zen": "Keep it logically awesome.", "hook_id": 12345678}"#;
    let request = http::Request::builder()
        .method("POST")
        .uri("/v1/github")
        .header("x-github-event", "ping")
        .header("x-github-delivery", "ping-1")
        .header("x-hub-signature-256", github_signature(body))
        .header("content-type", "application/json")
        .body(Body::from(&body[..]))
        .unwrap();
    let r = send(&app.router(), request).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["accepted"], json!([]));
    assert_eq!(app.last_seq(), 0);
}

#[tokio::test]
async fn a_signed_delivery_without_event_headers_is_400() {
    let router = app(|_| {}).router();
    let body = br#"{"action": "completed"}"#;
    let request = |event: Option<&str>, delivery: Option<&str>| {
        let mut b = http::Request::builder()
            .method("POST")
            .uri("/v1/github")
            .header("x-hub-signature-256", github_signature(body));
        if let Some(e) = event {
            b = b.header("x-github-event", e);
        }
        if let Some(d) = delivery {
            b = b.header("x-github-delivery", d);
        }
        b.body(Body::from(&body[..])).unwrap()
    };
    let r = send(&router, request(None, Some("d"))).await;
    r.assert_error(400, "missing_header");
    assert_eq!(r.json["message"], "missing `X-GitHub-Event` header");
    let r = send(&router, request(Some("check_run"), None)).await;
    r.assert_error(400, "missing_header");
    let r = send(&router, request(Some("../etc"), Some("d"))).await;
    r.assert_error(400, "invalid_header");
    let r = send(&router, request(Some("check_run"), Some("d"))).await;
    r.assert_error(422, "invalid_payload");
}

// ---- durability -------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_journal_write_failure_is_503_with_the_seqs_never_202() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    // Every write to /dev/full fails with "no space left on device".
    std::os::unix::fs::symlink("/dev/full", home.journal()).unwrap();
    let app = Fixture::start(home.clone(), config(|_| {})).await;
    let router = app.router();
    let body = r#"[{"server":"s","channel":"c","content":"a"},{"server":"s","channel":"c","content":"b"}]"#;
    let r = send(&router, authed("POST", "/v1/messages", body)).await;
    r.assert_error(503, "not_durable");
    assert_eq!(r.seqs(), [(1, false), (2, false)]);
    assert_eq!(r.header("retry-after"), Some("2"));
    let message = r.json["message"].as_str().unwrap();
    assert!(
        !message.contains("space") && !message.contains("/dev"),
        "no internal detail in a 5xx: {message}"
    );
    // Free the disk so the writer can finish, then stop.
    std::fs::remove_file(home.journal()).unwrap();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_of_a_503_is_503_again_until_the_original_is_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    std::os::unix::fs::symlink("/dev/full", home.journal()).unwrap();
    let app = Fixture::start(home.clone(), config(|_| {})).await;
    let router = app.router();
    let body = r#"{"server":"s","channel":"c","content":"disk full","id":"alert-1"}"#;
    let r = send(&router, authed("POST", "/v1/messages", body)).await;
    r.assert_error(503, "not_durable");
    assert_eq!(r.seqs(), [(1, false)]);
    let r = send(&router, authed("POST", "/v1/messages", body)).await;
    r.assert_error(503, "not_durable");
    assert_eq!(r.seqs(), [(1, true)], "the retry is not a 202 duplicate");
    let plain = r#"{"server":"s","channel":"c","content":"no id"}"#;
    send(&router, authed("POST", "/v1/messages", plain))
        .await
        .assert_error(503, "not_durable");

    std::fs::remove_file(home.journal()).unwrap();
    let r = send(&router, authed("POST", "/v1/messages", body)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(r.seqs(), [(1, true)]);
    let on_disk = std::fs::read_to_string(home.journal()).unwrap();
    assert!(
        on_disk.lines().next().unwrap().contains("alert-1"),
        "{on_disk}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_message_over_a_limit_is_413_or_422_naming_the_field_and_setting() {
    let router = app(|_| {}).router();
    let big = "x".repeat(256 * 1024 + 1);
    let body = json!({"server": "s", "channel": "c", "content": big}).to_string();
    let r = send(&router, authed("POST", "/v1/messages", body)).await;
    r.assert_error(413, "message_too_large");
    assert_eq!(
        r.json["message"],
        "`content` is 262145 bytes, over the limit of 262144 (`inbox.limits.contentBytes`); \
         nothing was stored"
    );
    let body = json!([
        {"server": "s", "channel": "c", "content": "fine"},
        {"server": "s", "channel": "c", "content": "x", "id": "i".repeat(2000)},
    ])
    .to_string();
    let r = send(&router, authed("POST", "/v1/messages", body)).await;
    r.assert_error(413, "message_too_large");
    assert!(
        r.json["message"]
            .as_str()
            .unwrap()
            .starts_with("[1]: `id` is 2000 bytes"),
        "{}",
        r.text
    );
    let metadata: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
    let body = json!({"server": "s", "channel": "c", "content": "x", "metadata": metadata});
    let r = send(&router, authed("POST", "/v1/messages", body.to_string())).await;
    r.assert_error(422, "too_many_metadata_keys");
    let ok = json!({"server": "s", "channel": "c", "content": "after"}).to_string();
    let r = send(&router, authed("POST", "/v1/messages", ok)).await;
    assert_eq!(r.seqs(), [(1, false)], "refused messages spend no seq");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_inbox_is_503_shutting_down() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    let app = Fixture::start(home, config(|_| {})).await;
    app.stop().await;
    let r = send(
        &app.router(),
        authed(
            "POST",
            "/v1/messages",
            r#"{"server":"s","channel":"c","content":"late"}"#,
        ),
    )
    .await;
    r.assert_error(503, "shutting_down");
    assert_eq!(r.header("retry-after"), Some("5"));
}

// ---- metrics ----------------------------------------------------------------------------

#[tokio::test]
async fn metrics_show_ingest_actions_rejections_and_queue_depths() {
    let app = app(|_| {});
    let router = app.router();
    let msg = r#"{"server":"s","channel":"c","content":"x"}"#;
    let r = send(&router, authed("POST", "/v1/messages", msg)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    send(&router, bare("POST", "/v1/messages", msg))
        .await
        .assert_error(401, "missing_token");

    // The built-in rule nudges for the message once the dispatcher has seen it.
    let deadline = Instant::now() + Duration::from_secs(5);
    let text = loop {
        let r = send(&router, authed("GET", "/metrics", "")).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(
            r.header("content-type"),
            Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
        );
        if r.text
            .contains("switchboard_actions_total{rule=\"default\",mode=\"notify\"} 1\n")
        {
            break r.text;
        }
        assert!(Instant::now() < deadline, "no action counted:\n{}", r.text);
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    for line in [
        "switchboard_messages_ingested_total{source=\"http\"} 1\n",
        "switchboard_http_rejections_total{code=\"missing_token\",status=\"401\"} 1\n",
        "switchboard_ring_depth 1\n",
        "switchboard_last_seq 1\n",
        "switchboard_queue_nudges 1\n",
        "switchboard_queue_pending_confirms 0\n",
        "switchboard_queue_work 0\n",
        "switchboard_journal_write_errors_total 0\n",
        "switchboard_journal_failing 0\n",
        "switchboard_wait_calls_in_flight 0\n",
        "# TYPE switchboard_actions_dropped counter\n",
        "# TYPE switchboard_suppressed counter\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(text.ends_with("# EOF\n"), "{text}");
}
