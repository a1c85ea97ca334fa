//! Wake-up latency of `wait_for_inbound_message`: a message committed while a wait is
//! pending, until the MCP client holds the result.
//!
//! `cargo bench --bench mcp_wait`
//!
//! One rmcp client talks to switchboard's MCP server over an in-process duplex pipe (the
//! same JSON-RPC framing as stdio, without a process boundary), with the built-in catch-all
//! notify rule: `memory` = in-memory inbox and no actions journal (the code path alone);
//! `disk_fsync_always` = a home on disk with the defaults (`fsync = always`: the message is
//! visible once written, its append answered once synced; the actions journal is written
//! off the wait's path); `relay_disk_fsync_always`
//! = the same, with the MCP session in a front end that reaches the app through the control
//! socket (a `Remote` attached to the daemon's control socket, as `switchboard serve`
//! does), so the difference to `disk_fsync_always` is what the relay adds. Each sample: start a wait, see it in flight, append one
//! message, and time from the append until the tool result arrives (commit → dispatcher →
//! engine → lifecycle → wait → JSON-RPC → client). Criterion reports the median; the p50/p99 of
//! every sample taken are printed at the end for BENCHMARKS.md.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use switchboard::app::Core;
use switchboard::backend::{Api, Remote};
use switchboard::config::Home;
use switchboard::control::Local;
use switchboard::delivery::mcp::McpServer;
use switchboard::message::NewMessage;
use switchboard::rules::RuleSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

fn wake_up(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("mcp_wait");

    let memory = rt.block_on(async { Core::memory(Default::default(), RuleSet::builtin()) });
    let api = Api::Local(Local::bare(memory.clone()));
    measure(&rt, &mut group, "wake_up_after_commit/memory", memory, api);

    // The real thing: a home on disk, fsync=always for the inbox and the actions journal.
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    let disk = rt
        .block_on(Core::start(
            home,
            Default::default(),
            CancellationToken::new(),
            TaskTracker::new(),
        ))
        .unwrap();
    let local = Api::Local(Local::bare(disk.clone()));
    measure(
        &rt,
        &mut group,
        "wake_up_after_commit/disk_fsync_always",
        disk,
        local,
    );

    // The same through a front end: the daemon's control socket, a `Remote` attached to it.
    let dir2 = tempfile::tempdir().unwrap();
    let home2 = Home::open(dir2.path()).unwrap();
    let tasks = TaskTracker::new();
    let daemon = rt
        .block_on(Core::start(
            home2.clone(),
            Default::default(),
            CancellationToken::new(),
            tasks.clone(),
        ))
        .unwrap();
    let remote = rt.block_on(async {
        let socket = home2.control_socket();
        let listener = switchboard::control::bind(&socket).unwrap();
        let lock = Arc::new(home2.lock().unwrap());
        tokio::spawn(switchboard::control::server::serve(
            Local::bare(daemon.clone()),
            socket,
            listener,
            lock,
            Default::default(),
            tasks.clone(),
        ));
        let connector = switchboard::frontend::connector(dir2.path().to_path_buf(), None);
        Api::Remote(
            Remote::attach(
                dir2.path().to_path_buf(),
                connector,
                CancellationToken::new(),
                &TaskTracker::new(),
            )
            .await
            .expect("attach"),
        )
    });
    measure(
        &rt,
        &mut group,
        "wake_up_after_commit/relay_disk_fsync_always",
        daemon,
        remote,
    );
    group.finish();
}

fn measure(
    rt: &tokio::runtime::Runtime,
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    app: Arc<Core>,
    api: Api,
) {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let client = rt.block_on(async {
        let server = McpServer::with_api(
            api,
            tokio_util::task::TaskTracker::new(),
            &CancellationToken::new(),
            None,
        );
        tokio::spawn(async move {
            let running = server.serve(server_io).await.expect("server handshake");
            let _ = running.waiting().await;
        });
        Arc::new(().serve(client_io).await.expect("client handshake"))
    });
    let samples = Arc::new(Mutex::new(Vec::<Duration>::new()));

    group.bench_function(name, |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (app, client, samples) = (app.clone(), client.clone(), samples.clone());
            async move {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    let c = client.clone();
                    let pending = tokio::spawn(async move {
                        let mut args = serde_json::Map::new();
                        args.insert("timeout_s".into(), 10.0.into());
                        let result = c
                            .call_tool(
                                CallToolRequestParams::new("wait_for_inbound_message")
                                    .with_arguments(args),
                            )
                            .await
                            .expect("wait call");
                        (result, Instant::now())
                    });
                    while app
                        .components()
                        .metrics
                        .wait_calls_in_flight
                        .load(Ordering::Relaxed)
                        == 0
                    {
                        tokio::task::yield_now().await;
                    }
                    let sent = Instant::now();
                    app.append(
                        vec![NewMessage::new(
                            "bench",
                            "ci/main",
                            format!("build {i} failed"),
                        )],
                        "bench",
                    )
                    .await
                    .expect("append");
                    let (result, got) = pending.await.unwrap();
                    assert!(
                        result
                            .structured_content
                            .is_some_and(|v| v["items"].as_array().is_some_and(|a| a.len() == 1))
                    );
                    let took = got - sent;
                    samples.lock().unwrap().push(took);
                    total += took;
                    // The wait has returned; let its in-flight guard drop before the next one.
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
            "mcp_wait/{name}: {} samples, p50 {:?}, p99 {:?}, max {:?}",
            all.len(),
            at(0.50),
            at(0.99),
            all[all.len() - 1]
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = wake_up
}
criterion_main!(benches);
