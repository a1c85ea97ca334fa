//! Many instances on one NATS JetStream stream, beside bare JetStream on the same machine.
//!
//! Not a criterion bench: what is measured is a set of processes (a `nats-server -js` and 1, 3
//! or 5 switchboard daemons, each with its own home), so each figure is one timed run, and the
//! script-like `main` prints a Markdown table. Run it with `cargo bench --bench jetstream_load`
//! (it needs `nats-server` on PATH; without it, it says so and measures nothing).
//!
//! - **messages/s**: `MESSAGES` messages posted over `CONCURRENCY` HTTP connections, spread
//!   over the instances, until every instance has stored every one (each instance's consumer
//!   stores all of them: with 3 instances that is 3 × `MESSAGES` stores).
//! - **ingest → remote wait**: one message at a time posted to the first instance while a
//!   session on the last instance waits (`wait`); from the request's start to the wait's
//!   return, p50 and p99 over `SAMPLES` messages. With one instance, the same instance.
//! - **bare JetStream**: the floor switchboard adds to — async-nats publishes the same
//!   payloads with the same concurrency, each awaiting its ack, and one durable pull consumer
//!   per "instance" acknowledges them; latency is publish start → consumer receipt. Each
//!   publish carries a `Nats-Msg-Id`, as each of switchboard's does (issue 31 asks for it, so
//!   that JetStream's duplicate window drops a sender's retries): the server's duplicate
//!   tracking is JetStream's work on both sides. `MSGID=0` publishes without, the loop this
//!   bench had before (BENCHMARKS.md: the header costs bare JetStream 2–18% of its msg/s here).
//! - **bare, own consumer**: the same, except that each publisher, after its ack, also waits
//!   until the consumer of the "instance" it posted to has received the message — the round
//!   trip switchboard's ingest makes before its 202 (whose seqs are the ingesting inbox's own:
//!   its consumer stored the message). It stores nothing: what switchboard adds beyond it is
//!   its own journal (under `inbox.fsync`), HTTP, and its per-message work.
//! - **bare + HTTP relay**: the same consumers, the load posted by the same HTTP client as
//!   switchboard's to the least an HTTP front end to JetStream can do (`start_relay`: read the
//!   body, publish each message with a `Nats-Msg-Id`, await the acks, answer 202 with their seqs;
//!   no inbox, journal, rules or consumer of its own), one per "instance", the posts spread over
//!   them as over switchboard's instances. Its overhead column is switchboard's msg/s against
//!   it: what switchboard adds to an HTTP ingest into JetStream. Not measured with
//!   `INGEST=stream`.
//!
//! - **`BATCH`** (default 1): messages per request. With `BATCH=10` each POST carries an array
//!   of ten (as an Alertmanager webhook carries its group's alerts), and each bare publisher
//!   publishes ten and then awaits their ten acks, as the daemon does with a request's
//!   messages: both sides do the same JetStream work, and what is left between them is
//!   switchboard's own per-message work without most of its per-request HTTP cost.
//!
//! - **`CLIENT=raw`**: the load's HTTP requests from a minimal keep-alive client of this file's
//!   own instead of reqwest, whose CPU per request rivals the daemon's on the same cores.
//!
//! - **`INGEST=stream`**: no HTTP: the load (and the latency's message) is published with
//!   async-nats straight to the instances' stream (`sbN.msg.load.x`), as a sender that speaks
//!   NATS does (README, "Publishing straight to the stream"), by the same publishers as bare
//!   JetStream's, and the instances store it. What is left between the two is what the
//!   instances' consumers do per message: decode, journal, evaluate, ack.
//!
//! Settings from the environment: `MESSAGES` (2000), `CONCURRENCY` (16), `SAMPLES` (200),
//! `BATCH` (1), `MSGID` (1), `INSTANCES` ("1 3 5"), `FSYNC` (the instances' `inbox.fsync`:
//! "always", the default, or "interval" or "never"), `SWITCHBOARD_BIN` (the daemon to measure;
//! default the one cargo built with this bench, so that two builds can be compared with one
//! bench binary).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use switchboard::backend::Client;
use switchboard::control::ops::SessionSpec;
use switchboard::control::ops::{Open, Wait};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The instances' `inbox.fsync` (`FSYNC`, default "always").
fn fsync() -> String {
    std::env::var("FSYNC").unwrap_or_else(|_| "always".into())
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child killed (and reaped) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        let _ = self.0.wait();
    }
}

/// One daemon on its own home.
struct Instance {
    _proc: Proc,
    home: tempfile::TempDir,
    ingest: String,
    token: String,
}

fn start_instance(url: &str, stream: &str, prefix: &str, name: &str) -> Instance {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("switchboard.json"),
        serde_json::json!({
            "http": {"rateLimit": "0"},
            "inbox": {"fsync": fsync()},
            "jetstream": {"servers": [url], "stream": stream, "subjectPrefix": prefix,
                          "instance": name},
        })
        .to_string(),
    )
    .unwrap();
    // Latency messages nudge; load messages match no rule (evaluated, no queue fills).
    std::fs::write(
        home.path().join("triggers.json"),
        r#"{"rules": [{"name": "lat", "channel": "lat/*", "mode": "notify"}]}"#,
    )
    .unwrap();
    let bin = std::env::var_os("SWITCHBOARD_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_switchboard").into());
    let child = Command::new(bin)
        .arg("--home")
        .arg(home.path())
        .args(["daemon", "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn switchboard");
    let proc = Proc(child);
    let endpoint = home.path().join("endpoint.json");
    let deadline = Instant::now() + Duration::from_secs(30);
    let ingest = loop {
        if let Ok(text) = std::fs::read_to_string(&endpoint)
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
            && let Some(i) = v["ingest"].as_str()
        {
            break i.to_string();
        }
        assert!(Instant::now() < deadline, "daemon not ready");
        std::thread::sleep(Duration::from_millis(20));
    };
    let token = std::fs::read_to_string(home.path().join("token"))
        .unwrap()
        .trim()
        .to_string();
    Instance {
        _proc: proc,
        home,
        ingest,
        token,
    }
}

/// The `jetstream` part of an instance's stats.
async fn js_state(home: &Path) -> serde_json::Value {
    let Ok(mut c) = Client::connect(home).await else {
        return serde_json::Value::Null;
    };
    match c
        .call(switchboard::control::ops::GetStats { consumer: None })
        .await
    {
        Ok(s) => serde_json::to_value(&s.stats).unwrap_or_default()["jetstream"].clone(),
        Err(_) => serde_json::Value::Null,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// The body of one request: message `range.start` alone as an object when `batch` is 1 (as
/// before there was a `BATCH`), else the range's messages as an array.
fn body(range: std::ops::Range<usize>, batch: usize) -> String {
    if batch == 1 {
        return payload(range.start, "load/x");
    }
    let items: Vec<String> = range.map(|i| payload(i, "load/x")).collect();
    format!("[{}]", items.join(","))
}

/// Whether the load goes through [`RawClient`] (`CLIENT=raw`) rather than reqwest.
fn raw_client() -> bool {
    std::env::var("CLIENT").is_ok_and(|c| c == "raw")
}

/// The least an HTTP/1.1 client can do: one keep-alive connection, a request written in one
/// `write`, the response read up to its `Content-Length`. reqwest's client costs about as much
/// CPU per request as the daemon's whole server side (BENCHMARKS.md), on the same two cores; this
/// one leaves them to what is measured. Loopback only, and only the 202 path of `/v1/messages`.
struct RawClient {
    stream: tokio::io::BufReader<tokio::net::TcpStream>,
    host: String,
}

impl RawClient {
    async fn connect(url: &str) -> RawClient {
        let host = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
        stream.set_nodelay(true).unwrap();
        RawClient {
            stream: tokio::io::BufReader::new(stream),
            host,
        }
    }

    /// Posts `body` to `/v1/messages`; the response's status.
    async fn post(&mut self, token: &str, body: &str) -> u16 {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let request = format!(
            "POST /v1/messages HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {token}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        self.stream
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .unwrap();
        let mut line = String::new();
        self.stream.read_line(&mut line).await.unwrap();
        let status: u16 = line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
        let mut length = 0;
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut rest = vec![0; length];
        self.stream.read_exact(&mut rest).await.unwrap();
        status
    }
}

/// Posts the load's messages `0..messages` from `concurrency` HTTP posters, request `k`
/// carrying messages `k * BATCH..` to `targets[k % targets.len()]` (a URL and its token), each
/// answered 202 before the poster sends its next.
async fn post_load(
    http: &reqwest::Client,
    targets: &Arc<Vec<(String, String)>>,
    messages: usize,
    concurrency: usize,
) {
    let (batch, raw_client) = (batch(), raw_client());
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let (http, targets) = (http.clone(), targets.clone());
        tasks.push(tokio::spawn(async move {
            // Task t posts requests k = t, t+c, ...
            let mut raw: Vec<Option<RawClient>> = (0..targets.len()).map(|_| None).collect();
            let mut k = t;
            while k * batch < messages {
                let (url, token) = &targets[k % targets.len()];
                let body = body(k * batch..(k * batch + batch).min(messages), batch);
                let status = if raw_client {
                    let conn = match &mut raw[k % targets.len()] {
                        Some(conn) => conn,
                        empty => empty.insert(RawClient::connect(url).await),
                    };
                    conn.post(token, &body).await
                } else {
                    let r = http
                        .post(url)
                        .bearer_auth(token)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                        .unwrap();
                    r.status().as_u16()
                };
                assert_eq!(status, 202);
                k += concurrency;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// The least an HTTP front end to JetStream can do, as the floor under switchboard's HTTP ingest:
/// `POST /v1/messages` with a message or an array of them (bearer token `relay`) publishes each,
/// as it came, to `{subjects}.{its channel, '/' as '.'}` with a `Nats-Msg-Id` (`{name}-N`),
/// awaits their acks and answers `202 {"accepted":[{"seq":N},...]}`. No inbox, journal, rules or
/// consumer of its own. It runs on a runtime of its own with two workers and its own NATS
/// connection, as a daemon would; the returned runtime must be shut down with
/// `shutdown_background` (it is dropped inside the bench's own).
async fn start_relay(
    url: &str,
    subjects: String,
    name: String,
) -> (String, tokio::runtime::Runtime) {
    use axum::http::{HeaderMap, StatusCode};
    use serde_json::value::RawValue;
    struct Relay {
        js: jetstream::Context,
        subjects: String,
        name: String,
        next: std::sync::atomic::AtomicU64,
    }
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        channel: std::borrow::Cow<'a, str>,
    }
    async fn post(
        axum::extract::State(r): axum::extract::State<Arc<Relay>>,
        headers: HeaderMap,
        body: axum::body::Bytes,
    ) -> (StatusCode, String) {
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer relay") {
            return (StatusCode::UNAUTHORIZED, String::new());
        }
        let one: Result<&RawValue, _> = serde_json::from_slice(&body);
        let messages: Vec<&RawValue> = match one {
            Ok(m) if m.get().starts_with('[') => match serde_json::from_str(m.get()) {
                Ok(all) => all,
                Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()),
            },
            Ok(m) => vec![m],
            Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()),
        };
        let mut acks = Vec::with_capacity(messages.len());
        for m in messages {
            let channel = match serde_json::from_str::<Head>(m.get()) {
                Ok(head) => head.channel.replace('/', "."),
                Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()),
            };
            let id = r.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(
                async_nats::header::NATS_MESSAGE_ID,
                format!("{}-{id}", r.name).as_str(),
            );
            let subject = format!("{}.{channel}", r.subjects);
            let body = m.get().as_bytes().to_vec().into();
            match r.js.publish_with_headers(subject, headers, body).await {
                Ok(ack) => acks.push(ack),
                Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            }
        }
        let mut accepted = Vec::with_capacity(acks.len());
        for ack in acks {
            match ack.await {
                Ok(ack) => accepted.push(serde_json::json!({"seq": ack.sequence})),
                Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            }
        }
        let answer = serde_json::json!({ "accepted": accepted });
        (StatusCode::ACCEPTED, answer.to_string())
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = url.to_string();
    let addr = rt
        .spawn(async move {
            let js = jetstream::ContextBuilder::new()
                .max_ack_inflight(65536)
                .backpressure_on_inflight(true)
                .build(async_nats::connect(url).await.unwrap());
            let relay = Arc::new(Relay {
                js,
                subjects,
                name,
                next: Default::default(),
            });
            let app = axum::Router::new()
                .route("/v1/messages", axum::routing::post(post))
                .with_state(relay);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
            addr
        })
        .await
        .unwrap();
    (format!("http://{addr}/v1/messages"), rt)
}

/// Whether bare JetStream's publishes (and `INGEST=stream`'s) carry a `Nats-Msg-Id`, as every
/// publish of switchboard's does (`MSGID`, default 1; `MSGID=0` publishes without).
/// Read once: it is asked for every publish, and the bare loop must not pay for reading the
/// environment each time.
fn msg_id() -> bool {
    static ON: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::env::var("MSGID").map_or(true, |v| v != "0"));
    *ON
}

/// Publishes `payload(i, channel)` to `subject` with async-nats, with a `Nats-Msg-Id` unique in
/// the run unless `MSGID=0`; returns the future of its ack.
async fn publish(
    js: &jetstream::Context,
    subject: String,
    i: usize,
    channel: &str,
) -> jetstream::context::PublishAckFuture {
    let body = payload(i, channel).into();
    if msg_id() {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            format!("{subject}-{i}").as_str(),
        );
        js.publish_with_headers(subject, headers, body).await
    } else {
        js.publish(subject, body).await
    }
    .unwrap()
}

/// Whether the load is published straight to the stream (`INGEST=stream`) rather than posted.
fn stream_ingest() -> bool {
    std::env::var("INGEST").is_ok_and(|i| i == "stream")
}

/// Publishes the load's messages `0..messages` (each `payload(i, "load/x")`) to `subject` from
/// `concurrency` publishers, each publishing a batch (`BATCH`) and then awaiting its acks; with
/// `own`, each publisher then also waits until the consumer of the "instance" it published to
/// (`k % n`) has received the batch.
async fn publish_load(
    js: &jetstream::Context,
    subject: &str,
    messages: usize,
    concurrency: usize,
    own: Option<(usize, Arc<Vec<tokio::sync::watch::Sender<u64>>>)>,
) {
    let batch = batch();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let (js, own, subject) = (js.clone(), own.clone(), subject.to_string());
        tasks.push(tokio::spawn(async move {
            let mut k = t;
            while k * batch < messages {
                // Publish the batch, then await its acks: as the daemon does with a request's.
                let mut acks = Vec::with_capacity(batch);
                for i in k * batch..(k * batch + batch).min(messages) {
                    let ack = publish(&js, subject.clone(), i, "load/x").await;
                    acks.push(ack);
                }
                let mut seq = 0;
                for ack in acks {
                    seq = seq.max(ack.await.unwrap().sequence);
                }
                if let Some((n, received)) = &own {
                    let mut r = received[k % n].subscribe();
                    r.wait_for(|r| *r >= seq).await.unwrap();
                }
                k += concurrency;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Messages per request (`BATCH`, default 1).
fn batch() -> usize {
    env_or("BATCH", 1).max(1)
}

fn payload(i: usize, channel: &str) -> String {
    serde_json::json!({"server": "bench", "channel": channel,
        "content": format!("load {i}: a message the size of a small alert"),
        "metadata": {"n": i.to_string()}})
    .to_string()
}

async fn switchboard_run(
    url: &str,
    n: usize,
    messages: usize,
    concurrency: usize,
    samples: usize,
) -> (f64, Duration, Duration) {
    let (stream, prefix) = (format!("SB{n}"), format!("sb{n}"));
    let instances: Vec<Instance> = (0..n)
        .map(|i| start_instance(url, &stream, &prefix, &format!("i{i}")))
        .collect();
    for inst in &instances {
        let deadline = Instant::now() + Duration::from_secs(30);
        while js_state(inst.home.path()).await["ready"] != true {
            assert!(Instant::now() < deadline, "consumer not ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let http = reqwest::Client::new();
    let targets: Arc<Vec<(String, String)>> = Arc::new(
        instances
            .iter()
            .map(|i| (format!("http://{}/v1/messages", i.ingest), i.token.clone()))
            .collect(),
    );
    // Throughput.
    let js = jetstream::ContextBuilder::new()
        .max_ack_inflight(65536)
        .backpressure_on_inflight(true)
        .build(async_nats::connect(url).await.unwrap());
    let start = Instant::now();
    if stream_ingest() {
        publish_load(
            &js,
            &format!("{prefix}.msg.load.x"),
            messages,
            concurrency,
            None,
        )
        .await;
    } else {
        post_load(&http, &targets, messages, concurrency).await;
    }
    for inst in &instances {
        while js_state(inst.home.path()).await["stored"]
            .as_u64()
            .unwrap_or(0)
            < messages as u64
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let rate = messages as f64 / start.elapsed().as_secs_f64();
    // Latency: ingest on the first instance, a wait on the last.
    let far = instances.last().unwrap();
    let mut client = Client::connect(far.home.path()).await.unwrap();
    let session = client
        .call(Open {
            spec: SessionSpec {
                client: "bench".into(),
                named: None,
                resume: None,
            },
            handle: None,
        })
        .await
        .unwrap();
    let mut lat = Vec::with_capacity(samples);
    for i in 0..samples {
        let (url, token) = &targets[0];
        let t0 = Instant::now();
        let post = async {
            if stream_ingest() {
                let ack = publish(&js, format!("{prefix}.msg.lat.x"), i, "lat/x").await;
                ack.await.unwrap();
                return 202;
            }
            let r = http
                .post(url)
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body(payload(i, "lat/x"))
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        };
        let wait = async {
            loop {
                let got = client
                    .call(Wait {
                        session: session.id,
                        consumer: session.consumer.clone(),
                        max: 10,
                        timeout_ms: 5000,
                    })
                    .await
                    .unwrap();
                if got.items.iter().any(|it| it.message.channel == "lat/x") {
                    return t0.elapsed();
                }
            }
        };
        let (status, d) = tokio::join!(post, wait);
        assert_eq!(status, 202);
        lat.push(d);
    }
    lat.sort();
    (rate, percentile(&lat, 0.5), percentile(&lat, 0.99))
}

/// What carries the load in a bare run.
#[derive(Clone, Copy, PartialEq)]
enum Floor {
    /// async-nats publishers (`publish_load`).
    Bare,
    /// The same, each also waiting for the consumer of the "instance" it published to.
    OwnConsumer,
    /// HTTP posters (`post_load`, the client switchboard's load has) through `start_relay`.
    HttpRelay,
}

async fn bare_run(
    url: &str,
    n: usize,
    messages: usize,
    concurrency: usize,
    samples: usize,
    floor: Floor,
) -> (f64, Duration, Duration) {
    let client = async_nats::connect(url).await.unwrap();
    let js = jetstream::ContextBuilder::new()
        .max_ack_inflight(65536)
        .backpressure_on_inflight(true)
        .build(client.clone());
    let tag = match floor {
        Floor::Bare => "",
        Floor::OwnConsumer => "O",
        Floor::HttpRelay => "H",
    };
    let name = format!("BARE{tag}{n}");
    let subjects = format!("bare{tag}{n}");
    let st = js
        .get_or_create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("{subjects}.>")],
            ..Default::default()
        })
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, String)>();
    // The newest stream seq each consumer received (it receives in stream order).
    let received: Arc<Vec<tokio::sync::watch::Sender<u64>>> =
        Arc::new((0..n).map(|_| tokio::sync::watch::channel(0).0).collect());
    for c in 0..n {
        let consumer = st
            .get_or_create_consumer(
                &format!("c{c}"),
                pull::Config {
                    durable_name: Some(format!("c{c}")),
                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let (tx, received) = (tx.clone(), received.clone());
        tokio::spawn(async move {
            let mut msgs = consumer.messages().await.unwrap();
            while let Some(m) = msgs.next().await {
                // A missed heartbeat or a pull's status on a loaded host: the stream pulls
                // again. Ending here (as this loop once did) left the run waiting forever.
                let m = match m {
                    Ok(m) => m,
                    Err(e) => {
                        eprintln!("jetstream_load: bare consumer c{c}: {e}");
                        continue;
                    }
                };
                if let Ok(info) = m.info() {
                    let seq = info.stream_sequence;
                    received[c].send_if_modified(|r| (seq > *r).then(|| *r = seq).is_some());
                }
                let _ = m.ack().await;
                let _ = tx.send((c, m.subject.to_string()));
            }
        });
    }
    let http = reqwest::Client::new();
    // One relay per "instance", as each switchboard instance takes its share of the posts.
    let mut relays = Vec::new();
    if floor == Floor::HttpRelay {
        for r in 0..n {
            relays.push(start_relay(url, subjects.clone(), format!("relay{r}")).await);
        }
    }
    let start = Instant::now();
    match floor {
        // A relay publishes a message of channel `load/x` to `{subjects}.load.x`.
        Floor::HttpRelay => {
            let targets = relays.iter().map(|(url, _)| (url.clone(), "relay".into()));
            let targets = Arc::new(targets.collect());
            post_load(&http, &targets, messages, concurrency).await;
        }
        _ => {
            let own = (floor == Floor::OwnConsumer).then(|| (n, received.clone()));
            publish_load(&js, &format!("{subjects}.load"), messages, concurrency, own).await;
        }
    }
    let mut got = 0;
    while got < messages * n {
        rx.recv().await.unwrap();
        got += 1;
    }
    let rate = messages as f64 / start.elapsed().as_secs_f64();
    let mut lat = Vec::with_capacity(samples);
    for i in 0..samples {
        let t0 = Instant::now();
        match relays.first() {
            Some((relay, _)) => {
                let r = http
                    .post(relay)
                    .bearer_auth("relay")
                    .body(payload(i, "lat/x"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status().as_u16(), 202);
            }
            None => {
                publish(&js, format!("{subjects}.lat"), i, "lat/x")
                    .await
                    .await
                    .unwrap();
            }
        }
        loop {
            let (c, subject) = rx.recv().await.unwrap();
            // `{subjects}.lat`, or `{subjects}.lat.x` from the relay.
            if c == n - 1 && subject.contains(".lat") {
                break;
            }
        }
        lat.push(t0.elapsed());
    }
    lat.sort();
    for (_, rt) in relays {
        rt.shutdown_background();
    }
    (rate, percentile(&lat, 0.5), percentile(&lat, 0.99))
}

fn main() {
    let Some(nats) = on_path("nats-server") else {
        eprintln!(
            "jetstream_load: nats-server is not on PATH (apt-get install nats-server); nothing measured"
        );
        return;
    };
    let messages = env_or("MESSAGES", 2000);
    let concurrency = env_or("CONCURRENCY", 16);
    let samples = env_or("SAMPLES", 200);
    let counts: Vec<usize> = std::env::var("INSTANCES")
        .unwrap_or_else(|_| "1 3 5".into())
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    let store = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = Proc(
        Command::new(nats)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nats-server"),
    );
    let addr = format!("127.0.0.1:{port}");
    while std::net::TcpStream::connect(&addr).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("nats://{addr}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    println!(
        "{messages} messages over {concurrency} connections ({}), {} per request; latency over {samples} \
         messages, one at a time; switchboard's inbox.fsync {}\n",
        if stream_ingest() {
            "published straight to the stream, no HTTP"
        } else if raw_client() {
            "a minimal client"
        } else {
            "reqwest"
        },
        batch(),
        fsync()
    );
    println!(
        "| instances | switchboard msg/s | bare JetStream msg/s | overhead | bare, own consumer msg/s | overhead | bare + HTTP relay msg/s | overhead | switchboard ingest→remote wait p50 / p99 ms | bare publish→consume p50 / p99 ms |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for n in counts {
        let (bare_rate, bare_p50, bare_p99) = rt.block_on(bare_run(
            &url,
            n,
            messages,
            concurrency,
            samples,
            Floor::Bare,
        ));
        let own = Floor::OwnConsumer;
        let (own_rate, _, _) = rt.block_on(bare_run(&url, n, messages, concurrency, 1, own));
        // Without HTTP in switchboard's load, the relay has nothing to stand for.
        let relay_rate = (!stream_ingest()).then(|| {
            let relay = Floor::HttpRelay;
            rt.block_on(bare_run(&url, n, messages, concurrency, 1, relay))
                .0
        });
        let (rate, p50, p99) =
            rt.block_on(switchboard_run(&url, n, messages, concurrency, samples));
        println!(
            "| {n} | {rate:.0} | {bare_rate:.0} | {:.2}× | {own_rate:.0} | {:.2}× | {} | {} | {} / {} | {} / {} |",
            bare_rate / rate,
            own_rate / rate,
            relay_rate.map_or("-".into(), |r| format!("{r:.0}")),
            relay_rate.map_or("-".into(), |r| format!("{:.2}×", r / rate)),
            ms(p50),
            ms(p99),
            ms(bare_p50),
            ms(bare_p99)
        );
    }
}
