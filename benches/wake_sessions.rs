//! Ingest → wait return with many sessions on one daemon, over stdio and over HTTP.
//!
//! ```sh
//! cargo build --release --bin switchboard && cargo bench --bench wake_sessions
//! ```
//!
//! Environment: `BIN` (default `target/release/switchboard`), `SESSIONS` (20), `SAMPLES`
//! (200), `GAP_MS` (40), `POOL` (1; 0 gives each HTTP session rmcp's default client, which
//! keeps no idle connection and so opens a new TCP connection for every call), `TRANSPORTS`
//! (`http,stdio`: which phases run), `QUIET` (set: each client asks `logging/setLevel`
//! warning, as a host that hides info logs does, so that no session gets the
//! `notifications/message` line that each item otherwise also pushes).
//!
//! One daemon (`switchboard daemon`, fsync=always, `{"http": {"rateLimit": "0"}}`) on a
//! temporary home, one notify rule on `wake/probe`: every session gets every message. Over
//! HTTP, `SESSIONS` rmcp clients each open a session on the daemon's `/mcp`, each with
//! its own reqwest client that keeps its connection between calls, as hosts' SDKs do
//! (TypeScript's `fetch`, Python's `httpx`). Over stdio,
//! `SESSIONS` front ends (`switchboard serve`, as hosts start them) attach to the same daemon
//! through the control socket, each with an rmcp client on its stdin and stdout. Each sample:
//! every session calls `wait_for_inbound_message`, `GAP_MS` passes so that all are pending,
//! one ~120-byte message is POSTed, and each session's time from the POST being sent to its
//! result being in hand is one figure. `POST → 202` (its 202 means the message is fsynced) is
//! the same-run baseline. Prints a Markdown table (p50, p90, p99, max over every session of
//! every sample).

mod common;

use common::{Client, env_or, loadavg, nanos, row, start_daemon, wait_call};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};

async fn phase(
    clients: &[Arc<Client>],
    http: &reqwest::Client,
    ingest: &str,
    token: &str,
    samples: usize,
    gap: Duration,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut wakes, mut posts) = (Vec::new(), Vec::new());
    for n in 0..samples {
        let marker = format!("wake-{n}-{}", nanos());
        let waiters: Vec<_> = clients
            .iter()
            .map(|client| {
                let (client, marker) = (client.clone(), marker.clone());
                tokio::spawn(async move {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while Instant::now() < deadline {
                        let items = wait_call(&client).await;
                        let at = Instant::now();
                        if items.iter().any(|i| i.to_string().contains(&marker)) {
                            return Some(at);
                        }
                    }
                    None
                })
            })
            .collect();
        tokio::time::sleep(gap).await;
        let body = serde_json::json!({"server": "probe", "channel": "wake/probe",
            "content": format!("probe {marker}: {}", "z".repeat(80))});
        let sent = Instant::now();
        let status = http
            .post(format!("http://{ingest}/v1/messages"))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        let acked = Instant::now();
        if status == 202 {
            posts.push(acked - sent);
        }
        for waiter in waiters {
            match waiter.await.unwrap() {
                Some(at) => wakes.push(at - sent),
                None => eprintln!("sample {n}: a session missed the message"),
            }
        }
        tokio::time::sleep(gap).await;
    }
    (wakes, posts)
}

/// Asks the server for nothing below warning (`logging/setLevel`): no item's log line.
#[allow(deprecated)] // MCP logging is deprecated by SEP-2577; the 2025-11-25 lifecycle has it.
async fn quieten(client: &Client) {
    let level = rmcp::model::SetLevelRequestParams::new(rmcp::model::LoggingLevel::Warning);
    client
        .peer()
        .set_level(level)
        .await
        .expect("logging/setLevel");
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing to run quickly.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let bin: PathBuf = std::env::var_os("BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/switchboard"),
        PathBuf::from,
    );
    let sessions: usize = env_or("SESSIONS", 20);
    let samples: usize = env_or("SAMPLES", 200);
    let gap = Duration::from_millis(env_or("GAP_MS", 40));
    let pool = env_or("POOL", 1) != 0;
    let quiet = std::env::var_os("QUIET").is_some();
    let transports = std::env::var("TRANSPORTS").unwrap_or_else(|_| "http,stdio".into());
    let (run_http, run_stdio) = (transports.contains("http"), transports.contains("stdio"));
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let start_load = loadavg();
    let (daemon, ingest, mcp, token) = start_daemon(
        &bin,
        &home,
        r#"{"http": {"rateLimit": "0"}, "mcp": {"maxSessions": 1024}}"#,
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    rt.block_on(async {
        let http = reqwest::Client::new();

        let mut over_http = Vec::new();
        for _ in 0..if run_http { sessions } else { 0 } {
            let config = StreamableHttpClientTransportConfig::with_uri(mcp.clone())
                .auth_header(token.clone());
            // rmcp's default client sets `pool_max_idle_per_host(0)` (against a delayed-ACK
            // stall with servers that leave a response stream open): every call would then pay
            // a TCP connect, on both sides. switchboard ends a call's stream with its result.
            let transport = if pool {
                StreamableHttpClientTransport::with_client(reqwest::Client::new(), config)
            } else {
                StreamableHttpClientTransport::from_config(config)
            };
            let client = ().serve(transport).await.expect("an HTTP session starts");
            if quiet {
                quieten(&client).await;
            }
            over_http.push(Arc::new(client));
        }
        if run_http {
            let (wakes, posts) = phase(&over_http, &http, &ingest, &token, samples, gap).await;
            let name = if pool {
                format!("HTTP, {sessions} sessions")
            } else {
                format!("HTTP, {sessions} sessions, a connection per call")
            };
            rows.push(row(&name, "POST → each wait returns", wakes));
            rows.push(row(&name, "POST → 202 (baseline)", posts));
        }
        for c in over_http {
            if let Ok(c) = Arc::try_unwrap(c) {
                let _ = c.cancel().await;
            }
        }

        let mut over_stdio = Vec::new();
        for _ in 0..if run_stdio { sessions } else { 0 } {
            let mut cmd = tokio::process::Command::new(&bin);
            cmd.arg("--home")
                .arg(&home)
                .args(["serve", "--no-listen"])
                .env("RUST_LOG", "warn");
            let transport = TokioChildProcess::builder(cmd)
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn a front end")
                .0;
            let client = ().serve(transport).await.expect("a stdio front end starts");
            if quiet {
                quieten(&client).await;
            }
            over_stdio.push(Arc::new(client));
        }
        if run_stdio {
            let (wakes, posts) = phase(&over_stdio, &http, &ingest, &token, samples, gap).await;
            let name = format!("stdio front ends, {sessions} sessions");
            rows.push(row(&name, "POST → each wait returns", wakes));
            rows.push(row(&name, "POST → 202 (baseline)", posts));
        }
        for c in over_stdio {
            if let Ok(c) = Arc::try_unwrap(c) {
                let _ = c.cancel().await;
            }
        }
    });
    drop(daemon);
    println!(
        "fsync=always, one daemon, every session gets every message; Rust clients{}; ms; load \
         average {start_load} at the start, {} at the end\n",
        if quiet {
            " at logging level warning (no log line per item)"
        } else {
            ""
        },
        loadavg()
    );
    println!("| transport | measure | p50 | p90 | p99 | max | samples |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        println!("{r}");
    }
}
