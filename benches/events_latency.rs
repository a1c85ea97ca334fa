//! MCP Events: ingest → occurrence, for a push stream subscriber and a loopback webhook.
//!
//! ```sh
//! cargo bench --bench events_latency
//! ```
//!
//! In process, on a home on disk (default fsync policy): the clock starts when the `append`
//! operation is called with one message, and stops when the occurrence is in hand: for
//! `stream`, the `notifications/events/event` a stream's pump hands to its channel (what the
//! HTTP SSE body or stdio then writes); for `webhook`, the signed POST read by a loopback
//! endpoint (axum on 127.0.0.1, the daemon's real delivery path: resolve and check, pinned
//! reqwest client, Standard Webhooks signature). Criterion reports the mean; the median and
//! p99 of every sample are printed after each group.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use switchboard::app::Core;
use switchboard::backend::Api;
use switchboard::config::Home;
use switchboard::control::ops::{Append, EventsPoll, EventsSubscribe, WebhookDelivery};
use switchboard::control::{Local, Parts};
use switchboard::delivery::mcp::events::{EventsSettings, open, pump};
use switchboard::delivery::webhook::Webhooks;
use switchboard::message::NewMessage;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

fn report(name: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!(
        "{name}: n={} median={:.3?} p99={:.3?} max={:.3?}",
        samples.len(),
        at(0.5),
        at(0.99),
        samples[samples.len() - 1]
    );
}

async fn append(api: &Api, i: u64) {
    let m = NewMessage::new(
        "bench",
        "events/probe",
        format!("probe {i}: {}", "x".repeat(100)),
    );
    api.call(Append {
        messages: vec![m],
        source: "bench".into(),
    })
    .await
    .unwrap();
}

fn events(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    let (shutdown, tasks) = (CancellationToken::new(), TaskTracker::new());
    let core = rt
        .block_on(Core::start(
            home.clone(),
            Default::default(),
            shutdown.clone(),
            tasks.clone(),
        ))
        .unwrap();
    let settings = EventsSettings {
        allow_http_loopback: true,
        ..EventsSettings::default()
    };
    let hooks = Webhooks::new(settings, false, None);
    let local = Local::new(core, hooks.parts(Parts::new(Default::default())));
    let api = Api::Local(local);
    hooks.start(api.clone(), tasks.clone(), shutdown.clone());
    let mut group = c.benchmark_group("events_latency");
    group
        .sample_size(200)
        .measurement_time(Duration::from_secs(10));

    // A push stream subscriber.
    let poll = EventsPoll {
        name: "switchboard.message".into(),
        arguments: Some(json!({"channel": "events/*"})),
        ..EventsPoll::default()
    };
    let (tx, rx) = mpsc::channel(64);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    rt.block_on(async {
        let first = open(&api, &poll).await.unwrap();
        tokio::spawn(pump(
            api.clone(),
            poll,
            first,
            json!(1),
            Duration::from_secs(25),
            tx,
        ));
        let active = rx.lock().await.recv().await.unwrap();
        assert_eq!(active.0, "notifications/events/active");
    });
    let mut samples = Vec::new();
    let mut n = 0u64;
    group.bench_function("ingest_to_stream_subscriber", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    let start = Instant::now();
                    let (api, rx) = (api.clone(), rx.clone());
                    let got = tokio::spawn(async move {
                        loop {
                            let (method, _) = rx.lock().await.recv().await.unwrap();
                            if method == "notifications/events/event" {
                                return Instant::now();
                            }
                        }
                    });
                    append(&api, n).await;
                    let took = got.await.unwrap() - start;
                    samples.push(took);
                    total += took;
                }
                total
            })
        })
    });
    report("ingest_to_stream_subscriber", &mut samples);

    // A loopback webhook endpoint that echoes the challenge and reports each event's arrival.
    let (hit_tx, hit_rx) = mpsc::unbounded_channel::<Instant>();
    let hit_rx = Arc::new(tokio::sync::Mutex::new(hit_rx));
    let url = rt.block_on(async {
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: axum::Json<serde_json::Value>| {
                let hit_tx = hit_tx.clone();
                async move {
                    if body.get("type").is_some() {
                        return axum::Json(json!({"challenge": body["challenge"]}));
                    }
                    let _ = hit_tx.send(Instant::now());
                    axum::Json(json!({}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        api.call(EventsSubscribe {
            name: "switchboard.message".into(),
            arguments: Some(json!({"channel": "events/*"})),
            delivery: WebhookDelivery {
                mode: Some("webhook".into()),
                url: url.clone(),
                secret: Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            },
            ..EventsSubscribe::default()
        })
        .await
        .unwrap();
        url
    });
    let _ = url;
    let mut samples = Vec::new();
    group.bench_function("ingest_to_loopback_webhook", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    // The stream above keeps reading too; drain it so it never waits.
                    while rx.lock().await.try_recv().is_ok() {}
                    let start = Instant::now();
                    append(&api, n).await;
                    let at = hit_rx.lock().await.recv().await.unwrap();
                    let took = at - start;
                    samples.push(took);
                    total += took;
                }
                total
            })
        })
    });
    report("ingest_to_loopback_webhook", &mut samples);
    group.finish();
    shutdown.cancel();
}

criterion_group!(benches, events);
criterion_main!(benches);
