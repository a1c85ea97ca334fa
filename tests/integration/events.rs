//! The MCP Events extension end to end against the real binary, with a client written from the
//! draft (modelcontextprotocol/experimental-ext-triggers-events, `docs/design-sketch-proposal.md`):
//! `events/list`, `events/poll` with its cursor across a daemon restart (no gap, no repeat),
//! `events/stream` with heartbeats and cancellation (closing the HTTP request; stdio's
//! `notifications/cancelled`), webhook deliveries verified by the `standardwebhooks` PyPI
//! package (tests/python/webhook_receiver.py), TTL expiry, refused addresses, and each of the
//! draft's error codes with its typed `data`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::util::*;

/// The `standardwebhooks` release the receiver verifies with.
const STANDARDWEBHOOKS: &str = "1.1.0";

/// A 2025-11-25 session over HTTP, spoken by hand as the draft writes its messages.
struct Session {
    http: reqwest::Client,
    url: String,
    token: String,
    id: String,
}

impl Session {
    async fn open(sb: &Switchboard) -> Session {
        let http = reqwest::Client::new();
        let url = sb.mcp_url.clone().expect("mcp url");
        let token = sb.token();
        let init = http
            .post(&url)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .json(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "events-client", "version": "1"}}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(init.status(), 200);
        let id = init.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_string();
        let body = init.text().await.unwrap();
        let result = frames(&body).into_iter().find(|v| v["id"] == 0).unwrap();
        // The capability, as the draft shows it (`events: {listChanged: true}`).
        assert_eq!(
            result["result"]["capabilities"]["experimental"]["events"],
            json!({"listChanged": true}),
            "{result}"
        );
        let s = Session {
            http,
            url,
            token,
            id,
        };
        let r = s
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        s
    }

    fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-11-25")
            .json(body)
    }

    /// One request; its JSON-RPC response.
    async fn rpc(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
        let text = self.post(&body).send().await.unwrap().text().await.unwrap();
        frames(&text)
            .into_iter()
            .find(|v| v["id"] == 9)
            .unwrap_or_else(|| panic!("no response to {method}: {text}"))
    }

    async fn ok(&self, method: &str, params: Value) -> Value {
        let r = self.rpc(method, params).await;
        assert!(r.get("error").is_none(), "{method}: {r}");
        r["result"].clone()
    }

    /// The error of a refused request: (code, data).
    async fn refused(&self, method: &str, params: Value) -> (i64, Value) {
        let r = self.rpc(method, params).await;
        let e = &r["error"];
        assert!(e.is_object(), "{method} was not refused: {r}");
        (e["code"].as_i64().unwrap(), e["data"].clone())
    }
}

/// The JSON-RPC messages of a body: plain JSON or SSE `data:` frames.
fn frames(body: &str) -> Vec<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return vec![v];
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

/// An open `events/stream` over HTTP: its SSE frames as they come.
struct Stream {
    response: reqwest::Response,
    buffer: String,
}

impl Stream {
    async fn open(s: &Session, id: u64, params: Value) -> Stream {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "events/stream", "params": params});
        let response = s.post(&body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let kind = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        Stream {
            response,
            buffer: String::new(),
        }
    }

    /// The next notification, within `limit`.
    async fn next(&mut self, limit: Duration) -> Value {
        let until = tokio::time::Instant::now() + limit;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                if let Some(v) = frames(&frame).pop() {
                    return v;
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(until, self.response.chunk())
                .await
                .expect("no notification in time")
                .unwrap()
                .expect("the stream ended");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

const FAST: &str = r#"{"mcp": {"events": {"heartbeat": "300ms"}}}"#;

fn start(config: &str) -> Switchboard {
    let mut sb = Switchboard::new();
    sb.write("switchboard.json", config);
    sb.spawn();
    sb
}

fn append(sb: &Switchboard, messages: Value) {
    let r = control(
        sb.home.path(),
        json!({"op": "append", "messages": messages, "source": "cli"}),
    );
    assert_eq!(r["ok"], true, "{r}");
}

fn contents(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"]["content"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn list_and_poll_resume_exactly_across_a_daemon_restart() {
    let mut sb = start(FAST);
    let s = Session::open(&sb).await;
    // events/list: the one event type, every delivery mode, the arguments of a rule's filter.
    let list = s.ok("events/list", json!({})).await;
    let ty = &list["events"][0];
    assert_eq!(ty["name"], "switchboard.message");
    assert_eq!(ty["delivery"], json!(["poll", "push", "webhook"]));
    let props = ty["inputSchema"]["properties"].as_object().unwrap();
    for key in ["server", "channel", "contentRegex", "matchers"] {
        assert!(props.contains_key(key), "{key} in {ty}");
    }
    // cursor null = from now: nothing before it comes back.
    append(
        &sb,
        json!([{"server": "test", "channel": "alerts/db", "content": "before"}]),
    );
    let args = json!({"channel": "alerts/*", "matchers": ["severity=\"critical\""]});
    let first = s
        .ok(
            "events/poll",
            json!({"name": "switchboard.message", "arguments": args, "cursor": null}),
        )
        .await;
    assert_eq!(first["events"], json!([]));
    assert_eq!(first["truncated"], false);
    let mut cursor = first["cursor"].clone();
    assert!(cursor.is_string());
    let crit = |c: &str, content: &str, id: Option<&str>| {
        let mut m = json!({"server": "test", "channel": c, "content": content,
                           "metadata": {"severity": "critical"}});
        if let Some(id) = id {
            m["id"] = json!(id);
        }
        m
    };
    append(
        &sb,
        json!([
            crit("alerts/db", "one", Some("am-fp-1")),
            crit("ci", "not on the channel", None),
            {"server": "test", "channel": "alerts/db", "content": "not critical"},
            crit("alerts/web", "two", None),
            crit("alerts/db/replica", "three", None),
        ]),
    );
    // maxEvents 2: a partial batch, hasMore, an intermediate cursor.
    let page = s
        .ok(
            "events/poll",
            json!({"name": "switchboard.message", "arguments": args,
                                  "cursor": cursor, "maxEvents": 2}),
        )
        .await;
    assert_eq!(contents(&page["events"]), ["one", "two"]);
    assert_eq!(page["hasMore"], true);
    // eventId: the source id where the message has one, else switchboard's.
    assert_eq!(page["events"][0]["eventId"], "am-fp-1");
    assert!(
        page["events"][1]["eventId"]
            .as_str()
            .unwrap()
            .starts_with("sb-")
    );
    assert_eq!(page["events"][0]["name"], "switchboard.message");
    assert!(page["events"][0]["timestamp"].is_string());
    assert!(page["nextPollMs"].as_u64().unwrap() >= 1000);
    cursor = page["cursor"].clone();
    let page = s
        .ok(
            "events/poll",
            json!({"name": "switchboard.message", "arguments": args, "cursor": cursor}),
        )
        .await;
    assert_eq!(contents(&page["events"]), ["three"]);
    assert_eq!(page["hasMore"], false);
    cursor = page["cursor"].clone();

    // The daemon restarts; messages arrive before and after; the kept cursor resumes exactly.
    append(&sb, json!([crit("alerts/db", "four", None)]));
    assert!(sb.terminate().success());
    sb.spawn();
    append(&sb, json!([crit("alerts/db", "five", None)]));
    let s = Session::open(&sb).await;
    let page = s
        .ok(
            "events/poll",
            json!({"name": "switchboard.message", "arguments": args, "cursor": cursor}),
        )
        .await;
    assert_eq!(
        contents(&page["events"]),
        ["four", "five"],
        "no gap, no repeat"
    );
    let again = s
        .ok(
            "events/poll",
            json!({"name": "switchboard.message", "arguments": args,
                                  "cursor": page["cursor"]}),
        )
        .await;
    assert_eq!(again["events"], json!([]));
    assert_eq!(again["cursor"], page["cursor"]);
    // maxAgeMs: older occurrences are left out, and the page says so.
    let aged = s
        .ok(
            "events/poll",
            json!({"name": "switchboard.message", "arguments": args,
                                  "cursor": cursor, "maxAgeMs": 0}),
        )
        .await;
    assert_eq!(aged["events"], json!([]));
    assert_eq!(aged["truncated"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn each_drafted_error_code_with_its_typed_data() {
    let sb = start(FAST);
    let s = Session::open(&sb).await;
    let poll =
        |args: Value| json!({"name": "switchboard.message", "arguments": args, "cursor": null});
    // -32011 NotFound, data.kind "event".
    let (code, data) = s
        .refused(
            "events/poll",
            json!({"name": "email.received", "cursor": null}),
        )
        .await;
    assert_eq!((code, data), (-32011, json!({"kind": "event"})));
    // -32602: arguments that do not fit the inputSchema, a cursor switchboard did not give.
    assert_eq!(
        s.refused("events/poll", poll(json!({"chanel": "x"})))
            .await
            .0,
        -32602
    );
    assert_eq!(
        s.refused("events/poll", poll(json!({"contentRegex": "("})))
            .await
            .0,
        -32602
    );
    let foreign = json!({"name": "switchboard.message", "cursor": "historyId_99842"});
    assert_eq!(s.refused("events/poll", foreign).await.0, -32602);
    // An invalid stream is refused at once, and no stream opens.
    let r = s
        .rpc("events/stream", json!({"name": "nope", "cursor": null}))
        .await;
    assert_eq!(r["error"]["code"], -32011, "{r}");
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let sub = |url: &str, secret: &str| {
        json!({"name": "switchboard.message", "arguments": {},
        "delivery": {"mode": "webhook", "url": url, "secret": secret}, "cursor": null})
    };
    // -32014 Unsupported: a delivery mode events/subscribe does not take.
    let mut push = sub("https://hooks.example.com/x", secret);
    push["delivery"]["mode"] = json!("push");
    let (code, data) = s.refused("events/subscribe", push).await;
    assert_eq!(
        (code, data),
        (-32014, json!({"feature": "deliveryMode", "value": "push"}))
    );
    // -32602: not https, plain http to loopback without allowHttpLoopback, a private,
    // link-local, CGNAT or documentation literal, a secret that is not whsec_ + 24-64 bytes.
    for url in [
        "http://hooks.example.com/x",
        "http://127.0.0.1:9/x",
        "https://10.1.2.3/x",
        "https://169.254.169.254/x",
        "https://100.64.0.1/x",
        "https://192.0.2.7/x",
        "https://[fd00::1]/x",
    ] {
        assert_eq!(
            s.refused("events/subscribe", sub(url, secret)).await.0,
            -32602,
            "{url}"
        );
    }
    let short = sub("https://hooks.example.com/x", "whsec_c2hvcnQ=");
    assert_eq!(s.refused("events/subscribe", short).await.0, -32602);
    // -32015: a name that resolves to a refused address (checked on what it resolves to).
    let (code, data) = s
        .refused("events/subscribe", sub("https://localhost:9/x", secret))
        .await;
    assert_eq!(
        (code, data),
        (-32015, json!({"reason": "connection_refused"}))
    );
    // -32011 NotFound, data.kind "subscription".
    let unsub = json!({"name": "switchboard.message", "arguments": {},
                       "delivery": {"url": "https://hooks.example.com/x"}});
    let (code, data) = s.refused("events/unsubscribe", unsub).await;
    assert_eq!((code, data), (-32011, json!({"kind": "subscription"})));
    // -32013 ResourceExhausted: see the webhook test (it needs a subscription in place).
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_are_forbidden_without_an_authenticated_principal() {
    let sb = start(r#"{"http": {"disableAuth": true}}"#);
    let s = Session::open(&sb).await;
    let sub = json!({"name": "switchboard.message", "delivery": {"mode": "webhook",
        "url": "https://hooks.example.com/x", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}});
    assert_eq!(s.refused("events/subscribe", sub).await.0, -32012);
    // Poll and push still work.
    let page = s
        .ok(
            "events/poll",
            json!({"name": "switchboard.message", "cursor": null}),
        )
        .await;
    assert!(page["cursor"].is_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_over_http_sends_active_events_and_heartbeats_and_ends_when_closed() {
    let sb = start(FAST);
    let s = Session::open(&sb).await;
    let mut stream = Stream::open(
        &s,
        41,
        json!({"name": "switchboard.message",
        "arguments": {"server": "test", "channel": "deploys"}, "cursor": null}),
    )
    .await;
    let active = stream.next(Duration::from_secs(10)).await;
    assert_eq!(active["method"], "notifications/events/active");
    assert_eq!(active["params"]["truncated"], false);
    assert_eq!(
        active["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    append(
        &sb,
        json!([{"server": "test", "channel": "other", "content": "skip"},
                       {"server": "test", "channel": "deploys", "content": "v2 out", "id": "gh-77"}]),
    );
    let event = stream.next(Duration::from_secs(10)).await;
    assert_eq!(event["method"], "notifications/events/event", "{event}");
    assert_eq!(event["params"]["eventId"], "gh-77");
    assert_eq!(event["params"]["data"]["content"], "v2 out");
    assert_eq!(
        event["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    let after_event = event["params"]["cursor"].clone();
    // Quiet: a heartbeat within the interval (300 ms here), carrying the cursor.
    let beat = stream.next(Duration::from_secs(5)).await;
    assert_eq!(beat["method"], "notifications/events/heartbeat", "{beat}");
    assert!(beat["params"]["cursor"].is_string());
    // A stream resumed at the event's cursor starts after it.
    let page = s
        .ok(
            "events/poll",
            json!({"name": "switchboard.message",
            "arguments": {"channel": "deploys"}, "cursor": after_event}),
        )
        .await;
    assert_eq!(page["events"], json!([]));
    // Closing the request ends the stream: the daemon stops reading for it.
    drop(stream);
    eventually_async(Duration::from_secs(10), "the stream's pump ended", || {
        let stats = control(sb.home.path(), json!({"op": "stats"}));
        (stats["result"]["events"]["streams"] == 0).then_some(())
    })
    .await;
}

#[test]
fn a_stream_over_stdio_routes_by_subscription_id_and_ends_on_cancelled() {
    let sb = start(FAST);
    let mut serve = Command::new(bin())
        .arg("--home")
        .arg(sb.home.path())
        .args(["serve", "--no-listen"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = serve.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let stdout = serve.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line)
                && tx.send(v).is_err()
            {
                return;
            }
        }
    });
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    let next = |what: &str| {
        rx.recv_timeout(Duration::from_secs(15))
            .unwrap_or_else(|_| panic!("{what}"))
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "events-stdio", "version": "1"}}}),
    );
    let init = next("initialize");
    assert_eq!(
        init["result"]["capabilities"]["experimental"]["events"],
        json!({"listChanged": true})
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for id in [7, 8] {
        let channel = if id == 7 { "a" } else { "b" };
        send(
            json!({"jsonrpc": "2.0", "id": id, "method": "events/stream", "params": {
            "name": "switchboard.message", "arguments": {"channel": channel}, "cursor": null}}),
        );
    }
    let sub = |v: &Value| v["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone();
    let mut active = Vec::new();
    while active.len() < 2 {
        let v = next("active");
        if v["method"] == "notifications/events/active" {
            active.push(sub(&v));
        }
    }
    active.sort_by_key(|v| v.as_i64());
    assert_eq!(active, [json!(7), json!(8)]);
    append(
        &sb,
        json!([{"server": "test", "channel": "b", "content": "for eight"}]),
    );
    let event = loop {
        let v = next("event");
        if v["method"] == "notifications/events/event" {
            break v;
        }
    };
    assert_eq!(sub(&event), 8, "{event}");
    assert_eq!(event["params"]["data"]["content"], "for eight");
    // Cancel stream 8: its heartbeats stop; stream 7's go on.
    send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 8}}),
    );
    let quiet_from = Instant::now() + Duration::from_secs(1);
    let mut sevens = 0;
    while sevens < 8 {
        let v = next("heartbeats of 7");
        if v["method"] == "notifications/events/heartbeat" {
            match sub(&v).as_i64() {
                Some(7) => sevens += 1,
                Some(8) => assert!(Instant::now() < quiet_from, "stream 8 still beats: {v}"),
                _ => {}
            }
        }
    }
    let _ = serve.kill();
    let _ = serve.wait();
}

/// The venv's python with `standardwebhooks`; `None` to skip (no python3 outside CI).
fn python() -> Option<PathBuf> {
    static VENV: OnceLock<Option<PathBuf>> = OnceLock::new();
    VENV.get_or_init(|| {
        if on_path("python3").is_none() {
            assert!(
                !ci(),
                "python3 is needed for the webhook receiver, and CI=true"
            );
            skip("the MCP Events webhook tests need python3");
            return None;
        }
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(tmp).unwrap();
        let lock = std::fs::File::create(tmp.join("py-standardwebhooks.lock")).unwrap();
        fs4::fs_std::FileExt::lock_exclusive(&lock).unwrap();
        let venv = tmp.join(format!("py-standardwebhooks-{STANDARDWEBHOOKS}"));
        let python = venv.join("bin").join("python");
        let stamp = venv.join("switchboard-stamp");
        if stamp.exists() {
            return Some(python);
        }
        let _ = std::fs::remove_dir_all(&venv);
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(ok.success(), "python3 -m venv failed");
        let pip = run_limited(
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                ])
                .arg(format!("standardwebhooks=={STANDARDWEBHOOKS}")),
            Duration::from_secs(600),
        );
        assert!(
            pip.status.is_some_and(|s| s.success()),
            "pip install: {}",
            pip.describe()
        );
        std::fs::write(&stamp, "ok").unwrap();
        Some(python)
    })
    .clone()
}

/// The receiver, running; stopped (killed and reaped) when dropped.
struct Receiver {
    child: Child,
    dir: tempfile::TempDir,
    url: String,
}

impl Receiver {
    fn start(python: &Path, secret: &str) -> Receiver {
        let dir = tempfile::tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/webhook_receiver.py");
        let port_file = dir.path().join("port");
        let child = Command::new(python)
            .arg(script)
            .arg(&port_file)
            .arg(dir.path().join("log.jsonl"))
            .arg(secret)
            .arg(dir.path().join("mode"))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let port = eventually(Duration::from_secs(30), "the receiver's port", || {
            std::fs::read_to_string(&port_file).ok()
        });
        let url = format!("http://127.0.0.1:{}/hook", port.trim());
        Receiver { child, dir, url }
    }

    fn mode(&self, mode: &str) {
        std::fs::write(self.dir.path().join("mode"), mode).unwrap();
    }

    fn posts(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("log.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The contents of the event deliveries the endpoint took (each verified by
    /// `standardwebhooks`; not control bodies).
    fn delivered(&self) -> Vec<String> {
        self.posts()
            .iter()
            .filter(|p| p["body"].get("type").is_none())
            .inspect(|p| assert_eq!(p["verified"], true, "a delivery failed verification: {p}"))
            .filter(|p| p["status"] == 200)
            .map(|p| p["body"]["data"]["content"].as_str().unwrap().to_string())
            .collect()
    }

    /// How many times an occurrence was POSTed.
    fn tries(&self, content: &str) -> usize {
        self.posts()
            .iter()
            .filter(|p| p["body"]["data"]["content"] == content)
            .count()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn subscribe(url: &str, ttl: Value) -> Value {
    json!({"name": "switchboard.message", "arguments": {"channel": "hooks/*"},
           "delivery": {"mode": "webhook", "url": url, "secret": SECRET},
           "cursor": null, "ttlMs": ttl})
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_deliveries_are_signed_verified_kept_across_a_restart_and_retried() {
    let Some(python) = python() else { return };
    let hook = Receiver::start(&python, SECRET);
    let mut sb = start(
        r#"{"mcp": {"events": {"allowHttpLoopback": true, "heartbeat": "300ms",
        "retryFirst": "20ms", "retryMax": "100ms", "maxAttempts": 3, "maxSubscriptions": 1}}}"#,
    );
    let s = Session::open(&sb).await;
    // The endpoint must echo the challenge first.
    hook.mode("noecho");
    let (code, data) = s
        .refused("events/subscribe", subscribe(&hook.url, json!(600_000)))
        .await;
    assert_eq!(
        (code, data),
        (-32015, json!({"reason": "challenge_failed"}))
    );
    hook.mode("echo");
    let granted = s
        .ok("events/subscribe", subscribe(&hook.url, json!(600_000)))
        .await;
    let id = granted["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("sub_"));
    assert!(granted["refreshBefore"].is_string() && granted["cursor"].is_string());
    let verification = &hook.posts()[1];
    assert_eq!(verification["body"]["type"], "verification");
    assert_eq!(verification["verified"], true);
    assert!(
        verification["headers"]["webhook-id"]
            .as_str()
            .unwrap()
            .starts_with("msg_verification_")
    );
    // -32013 ResourceExhausted (maxSubscriptions 1), data.limit and data.max.
    let mut other = subscribe(&hook.url, json!(600_000));
    other["arguments"] = json!({"channel": "elsewhere"});
    let (code, data) = s.refused("events/subscribe", other).await;
    assert_eq!(
        (code, data),
        (-32013, json!({"limit": "subscriptions", "max": 1}))
    );

    append(
        &sb,
        json!([{"server": "test", "channel": "hooks/a", "content": "h1", "id": "src-1"},
                       {"server": "test", "channel": "elsewhere", "content": "no"},
                       {"server": "test", "channel": "hooks/b", "content": "h2"}]),
    );
    eventually(Duration::from_secs(10), "two deliveries", || {
        (hook.delivered().len() == 2).then_some(())
    });
    assert_eq!(hook.delivered(), ["h1", "h2"]);
    let first = hook
        .posts()
        .into_iter()
        .find(|p| p["body"]["eventId"] == "src-1")
        .unwrap();
    assert_eq!(
        first["headers"]["webhook-id"], "src-1",
        "webhook-id = eventId"
    );
    assert_eq!(first["headers"]["x-mcp-subscription-id"], id.as_str());
    assert!(
        first["headers"]["webhook-signature"]
            .as_str()
            .unwrap()
            .starts_with("v1,")
    );

    // A restart neither loses nor repeats a delivery.
    assert!(sb.terminate().success());
    sb.spawn();
    append(
        &sb,
        json!([{"server": "test", "channel": "hooks/c", "content": "h3"}]),
    );
    eventually(
        Duration::from_secs(10),
        "the delivery after the restart",
        || (hook.delivered().len() == 3).then_some(()),
    );
    assert_eq!(hook.delivered(), ["h1", "h2", "h3"]);

    // A failing endpoint: retried with backoff, then suspended with a lastError category;
    // the refresh reactivates it and the pending occurrence is delivered, once.
    hook.mode("fail");
    append(
        &sb,
        json!([{"server": "test", "channel": "hooks/d", "content": "h4"}]),
    );
    let s = Session::open(&sb).await;
    eventually(Duration::from_secs(10), "suspended", || {
        let stats = control(sb.home.path(), json!({"op": "stats"}));
        (stats["result"]["events"]["suspended"] == 1).then_some(())
    });
    hook.mode("echo");
    let refreshed = s
        .ok("events/subscribe", subscribe(&hook.url, json!(600_000)))
        .await;
    assert_eq!(refreshed["id"], id.as_str(), "same key, same id");
    assert_eq!(refreshed["deliveryStatus"]["active"], false);
    assert_eq!(refreshed["deliveryStatus"]["lastError"], "http_5xx");
    eventually(Duration::from_secs(10), "the retried delivery", || {
        (hook.delivered().contains(&"h4".to_string())).then_some(())
    });
    assert_eq!(hook.delivered(), ["h1", "h2", "h3", "h4"]);
    assert_eq!(
        hook.tries("h4"),
        4,
        "three failed tries, then the one taken"
    );

    // Unsubscribe: nothing more is delivered.
    let unsub = json!({"name": "switchboard.message", "arguments": {"channel": "hooks/*"},
                       "delivery": {"url": hook.url}});
    s.ok("events/unsubscribe", unsub).await;
    let stats = control(sb.home.path(), json!({"op": "stats"}));
    assert_eq!(
        stats["result"]["events"]["subscriptions"]["webhook"], 0,
        "{stats}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_subscription_lapses_at_its_granted_ttl() {
    let Some(python) = python() else { return };
    let hook = Receiver::start(&python, SECRET);
    let sb = start(
        r#"{"mcp": {"events": {"allowHttpLoopback": true, "heartbeat": "200ms",
        "minTtl": "1s"}}}"#,
    );
    let s = Session::open(&sb).await;
    let before = chrono::Utc::now();
    // A suggestion below the floor is raised to it; the grant is authoritative.
    let granted = s
        .ok("events/subscribe", subscribe(&hook.url, json!(10)))
        .await;
    let refresh: chrono::DateTime<chrono::Utc> =
        granted["refreshBefore"].as_str().unwrap().parse().unwrap();
    assert!(
        refresh >= before + chrono::Duration::milliseconds(900),
        "{granted}"
    );
    append(
        &sb,
        json!([{"server": "test", "channel": "hooks/x", "content": "in time"}]),
    );
    eventually(Duration::from_secs(10), "delivered", || {
        (hook.delivered().len() == 1).then_some(())
    });
    eventually(Duration::from_secs(10), "expired", || {
        let stats = control(sb.home.path(), json!({"op": "stats"}));
        (stats["result"]["events"]["expired"] == 1).then_some(())
    });
    append(
        &sb,
        json!([{"server": "test", "channel": "hooks/x", "content": "too late"}]),
    );
    // A poll that sees the message shows it is in; the lapsed subscription did not deliver it.
    let page = s
        .ok(
            "events/poll",
            json!({"name": "switchboard.message", "arguments": {"channel": "hooks/*"},
                                  "cursor": granted["cursor"]}),
        )
        .await;
    assert_eq!(contents(&page["events"]), ["in time", "too late"]);
    assert_eq!(hook.delivered(), ["in time"]);
}

/// The messages on `channel`, oldest first: (source id, content, metadata title).
fn on_channel(sb: &Switchboard, channel: &str) -> Vec<(String, String)> {
    let r = control(
        sb.home.path(),
        json!({"op": "list", "channel": channel, "limit": 100}),
    );
    r["result"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap_or("").to_string(),
                m["metadata"]["title"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn an_upstream_events_server_feeds_the_inbox_across_a_restart() {
    if on_path("python3").is_none() {
        skip("the upstream events server is Python");
        return;
    }
    let feed_dir = tempfile::tempdir().unwrap();
    let feed = feed_dir.path().join("tickets.txt");
    std::fs::write(&feed, "").unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/events_upstream.py");
    let config = json!({"upstreams": {"tickets": {
        "command": "python3", "args": [script, feed],
        "events": [{"name": "ticket.created", "arguments": {}, "channel": "tickets/new"}]}}});
    let mut sb = start(&config.to_string());
    let add = |title: &str| {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&feed)
            .unwrap();
        writeln!(f, "{title}").unwrap();
    };
    // The stream is open once the upstream logged where it starts (a stream without a cursor
    // starts at the feed's end: a ticket added before that is not news).
    let streamed = || {
        std::fs::read_to_string(feed.with_extension("txt.requests"))
            .unwrap_or_default()
            .matches(r#"{"active": "#)
            .count()
    };
    eventually(Duration::from_secs(20), "the stream opened", || {
        (streamed() == 1).then_some(())
    });
    add("disk full");
    eventually(Duration::from_secs(10), "the first ticket", || {
        (on_channel(&sb, "tickets/new").len() == 1).then_some(())
    });
    assert_eq!(
        on_channel(&sb, "tickets/new"),
        [("tkt-1".into(), "disk full".into())]
    );
    // The cursor is kept (after the message is stored), then the daemon restarts; a ticket
    // opened while it was down comes in after it, and the first is not repeated.
    eventually(Duration::from_secs(10), "the cursor kept", || {
        std::fs::read_to_string(sb.home.path().join("upstream-events.json"))
            .ok()
            .filter(|t| t.contains("\"1\""))
    });
    assert!(sb.terminate().success());
    add("cpu hot");
    sb.spawn();
    eventually(
        Duration::from_secs(20),
        "the ticket from the outage",
        || (on_channel(&sb, "tickets/new").len() >= 2).then_some(()),
    );
    add("net down");
    eventually(Duration::from_secs(10), "the third ticket", || {
        (on_channel(&sb, "tickets/new").len() >= 3).then_some(())
    });
    let resumed = std::fs::read_to_string(feed.with_extension("txt.requests")).unwrap();
    assert!(
        resumed.contains(r#""cursor": "1""#),
        "resumed from the kept cursor: {resumed}"
    );
    assert_eq!(
        on_channel(&sb, "tickets/new"),
        [
            ("tkt-1".into(), "disk full".into()),
            ("tkt-2".into(), "cpu hot".into()),
            ("tkt-3".into(), "net down".into())
        ]
    );
}
