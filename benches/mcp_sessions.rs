//! Ingest → wait return with many MCP sessions over streamable HTTP.
//!
//! `cargo bench --bench mcp_sessions`
//!
//! One switchboard (a home on disk, defaults: fsync=always, the built-in catch-all notify
//! rule) serves HTTP ingest and `/mcp` on loopback. N rmcp clients, each its own session and
//! so its own consumer, hold a `wait_for_inbound_message` in flight; one `POST /v1/messages`
//! then wakes all of them, because every session gets every nudge. Each sample times, per
//! session, from the moment the POST is sent to the moment that session's client holds the
//! result. Criterion's figure is the time until the *last* session has it; the p50/p99 over
//! every session of every sample are printed at the end for BENCHMARKS.md. N = 1 is the
//! baseline of the same run.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use switchboard::app::Core;
use switchboard::config::{Config, Home, LiveHttp};
use switchboard::control::Local;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "bench-token";

type Client = rmcp::service::RunningService<rmcp::service::RoleClient, ()>;

fn sessions(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (app, base) = rt.block_on(async {
        let home = Home::open(dir.path()).unwrap();
        let mut config = Config::default();
        config.http.token = Some(TOKEN.into());
        config.http.rate_limit = "0".into();
        let shutdown = CancellationToken::new();
        let tasks = tokio_util::task::TaskTracker::new();
        let app = Core::start(
            home,
            switchboard::daemon::core_settings(&config),
            shutdown.clone(),
            tasks.clone(),
        )
        .await
        .unwrap();
        let local = Local::bare(app.clone());
        let sources = switchboard::sources::SourceContext::new(local.clone(), tasks.clone());
        let access = switchboard::delivery::mcp::http::Access {
            bearer: config.http.bearer(),
            origins: Vec::new(),
            loopback: true,
            body_limit: config.http.body_limit,
            session_idle: config.mcp.session_idle_timeout,
            max_sessions: 1024,
        };
        let router = switchboard::sources::http::router(
            sources,
            Arc::new(LiveHttp::new(config.http.clone())),
        )
        .merge(switchboard::delivery::mcp::http::router(
            local, access, tasks,
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        (app, base)
    });
    let http = reqwest::Client::new();
    let mut group = c.benchmark_group("mcp_sessions");
    group.sample_size(30);
    for n in [1usize, 50] {
        let clients: Vec<Arc<Client>> = rt.block_on(async {
            let mut v = Vec::new();
            for _ in 0..n {
                let config = StreamableHttpClientTransportConfig::with_uri(format!("{base}/mcp"))
                    .auth_header(TOKEN);
                let client = ().serve(StreamableHttpClientTransport::from_config(config)).await;
                v.push(Arc::new(client.expect("client connects")));
            }
            v
        });
        let samples = Arc::new(Mutex::new(Vec::<Duration>::new()));
        group.bench_function(format!("ingest_to_wait_return/{n}_sessions"), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (app, clients, samples, http, base) = (
                    app.clone(),
                    clients.clone(),
                    samples.clone(),
                    http.clone(),
                    base.clone(),
                );
                async move {
                    let mut total = Duration::ZERO;
                    for i in 0..iters {
                        let waits: Vec<_> = clients
                            .iter()
                            .map(|c| {
                                let c = c.clone();
                                tokio::spawn(async move {
                                    let mut args = serde_json::Map::new();
                                    args.insert("timeout_s".into(), 20.0.into());
                                    let r = c
                                        .call_tool(
                                            CallToolRequestParams::new("wait_for_inbound_message")
                                                .with_arguments(args),
                                        )
                                        .await
                                        .expect("wait call");
                                    (r, Instant::now())
                                })
                            })
                            .collect();
                        while app
                            .components()
                            .metrics
                            .wait_calls_in_flight
                            .load(Ordering::Relaxed)
                            < n as u64
                        {
                            tokio::time::sleep(Duration::from_micros(200)).await;
                        }
                        let sent = Instant::now();
                        let posted = http
                            .post(format!("{base}/v1/messages"))
                            .bearer_auth(TOKEN)
                            .json(&serde_json::json!({"server": "bench", "channel": "ci/main",
                                                      "content": format!("build {i} failed")}))
                            .send()
                            .await
                            .expect("post");
                        assert_eq!(posted.status(), 202);
                        let mut last = Duration::ZERO;
                        for w in waits {
                            let (r, got) = w.await.unwrap();
                            assert!(r.structured_content.is_some_and(|v| {
                                v["items"].as_array().is_some_and(|a| a.len() == 1)
                            }));
                            let took = got - sent;
                            samples.lock().unwrap().push(took);
                            last = last.max(took);
                        }
                        total += last;
                        while app
                            .components()
                            .metrics
                            .wait_calls_in_flight
                            .load(Ordering::Relaxed)
                            != 0
                        {
                            tokio::task::yield_now().await;
                        }
                    }
                    total
                }
            })
        });
        let mut all = samples.lock().unwrap().clone();
        all.sort();
        if !all.is_empty() {
            let at = |p: f64| all[((all.len() - 1) as f64 * p).round() as usize];
            eprintln!(
                "mcp_sessions/{n}_sessions: {} session-samples, p50 {:?}, p99 {:?}, max {:?}",
                all.len(),
                at(0.50),
                at(0.99),
                all[all.len() - 1]
            );
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    targets = sessions
}
criterion_main!(benches);
