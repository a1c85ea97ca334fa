//! Ingest → wait return through the real binary, with a Rust client.
//!
//! ```sh
//! cargo build --release --bin switchboard && cargo bench --bench wake_latency
//! ```
//!
//! Environment: `BIN` (default `target/release/switchboard`), `SAMPLES` (400), `RATE` (300),
//! `GAP_MS` (40), `FSYNC` (`always`).
//!
//! The same measurement as `benches/wake_latency.sh`, with the clients in Rust instead of
//! python, so that the client's own interpreter and thread switches stay out of the tail. One
//! `switchboard daemon` on a temporary home (`{"http": {"rateLimit": "0"}}`, `fsync`
//! from `FSYNC`), one notify rule on channel `wake/probe`. One rmcp client session over
//! streamable HTTP; each sample calls `wait_for_inbound_message` on a task, lets `GAP_MS` pass
//! so the wait is pending in the server, reads the clock, POSTs one ~120-byte message on
//! `wake/probe` over a keep-alive connection, and reads the clock again when the wait's result
//! holding that message is in hand. `POST → 202` is the POST's own round trip (with `always`,
//! its 202 means the message is fsynced) and is the same-run baseline; after another idle gap,
//! a `GET /healthz` round trip on the same connection shows what any HTTP exchange costs on
//! the machine at that moment (waking idle cores included). The phases: no other
//! traffic, then `RATE` messages/s of other traffic on `wake/other` (no rule matches), sent by a
//! thread of its own over a keep-alive connection and paced by the clock. Clients and server
//! share the machine's cores. Prints a Markdown table on stdout.

mod common;

use common::{Client, Daemon, env_or, loadavg, nanos, row, start_daemon, wait_call};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

fn load(ingest: String, token: String, rate: f64, stop: Arc<AtomicBool>) -> (u64, u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let http = reqwest::Client::new();
        let url = format!("http://{ingest}/v1/messages");
        let start = tokio::time::Instant::now();
        let (mut sent, mut refused) = (0u64, 0u64);
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep_until(start + Duration::from_secs_f64(sent as f64 / rate)).await;
            let body = serde_json::json!({"server": "load", "channel": "wake/other",
                "content": format!("other traffic {sent}: {}", "y".repeat(90))});
            let ok = http
                .post(&url)
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await
                .is_ok_and(|r| r.status() == 202);
            refused += u64::from(!ok);
            sent += 1;
        }
        (sent, refused)
    })
}

/// What one phase measured.
#[derive(Default)]
struct Phase {
    /// POST sent → the wait's result in hand.
    wakes: Vec<Duration>,
    /// POST sent → its 202 in hand.
    posts: Vec<Duration>,
    /// `GET /healthz` sent → its answer in hand, after the same idle gap.
    health: Vec<Duration>,
}

/// One phase: `samples` wake-ups.
async fn phase(
    client: &Arc<Client>,
    http: &reqwest::Client,
    ingest: &str,
    token: &str,
    samples: usize,
    gap: Duration,
) -> Phase {
    let mut out = Phase::default();
    for n in 0..samples {
        let marker = format!("wake-{n}-{}", nanos());
        let waiter = tokio::spawn({
            let (client, marker) = (client.clone(), marker.clone());
            async move {
                let deadline = Instant::now() + Duration::from_secs(30);
                while Instant::now() < deadline {
                    let items = wait_call(&client).await;
                    let at = Instant::now();
                    if items.iter().any(|i| i.to_string().contains(&marker)) {
                        return Some(at);
                    }
                }
                None
            }
        });
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
        let woke = waiter.await.unwrap();
        match woke {
            Some(woke) if status == 202 => {
                out.wakes.push(woke - sent);
                out.posts.push(acked - sent);
            }
            _ => eprintln!("sample {n} missed (status {status})"),
        }
        tokio::time::sleep(gap).await;
        let sent = Instant::now();
        let health = http.get(format!("http://{ingest}/healthz")).send().await;
        if health.is_ok_and(|r| r.status() == 200) {
            out.health.push(sent.elapsed());
        }
    }
    out
}

fn rows_of(name: &str, p: Phase) -> [String; 3] {
    [
        row(name, "POST → wait returns", p.wakes),
        row(name, "POST → 202 (baseline)", p.posts),
        row(name, "GET /healthz (HTTP floor)", p.health),
    ]
}

/// The daemon with `fsync` as its inbox policy and no ingest rate limit.
fn start_daemon_with_fsync(
    bin: &Path,
    home: &Path,
    fsync: &str,
) -> (Daemon, String, String, String) {
    start_daemon(
        bin,
        home,
        &format!(r#"{{"http": {{"rateLimit": "0"}}, "inbox": {{"fsync": "{fsync}"}}}}"#),
    )
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
    let samples: usize = env_or("SAMPLES", 400);
    let rate: f64 = env_or("RATE", 300.0);
    let gap = Duration::from_millis(env_or("GAP_MS", 40));
    let fsync: String = env_or("FSYNC", "always".to_string());
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let start_load = loadavg();
    let (server, ingest, mcp, token) = start_daemon_with_fsync(&bin, &home, &fsync);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    rt.block_on(async {
        let config = StreamableHttpClientTransportConfig::with_uri(mcp).auth_header(&token);
        let client = ().serve(StreamableHttpClientTransport::from_config(config)).await;
        let client = Arc::new(client.expect("the MCP session starts"));
        let http = reqwest::Client::new();
        let quiet = "no other traffic (baseline)";
        let quiet_phase = phase(&client, &http, &ingest, &token, samples, gap).await;
        rows.extend(rows_of(quiet, quiet_phase));

        let stop = Arc::new(AtomicBool::new(false));
        let other = std::thread::spawn({
            let (ingest, token, stop) = (ingest.clone(), token.clone(), stop.clone());
            move || load(ingest, token, rate, stop)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = Instant::now();
        let loaded_phase = phase(&client, &http, &ingest, &token, samples, gap).await;
        stop.store(true, Ordering::Relaxed);
        let (sent, refused) = other.join().unwrap();
        rows.extend(rows_of(
            &format!("{rate} msg/s other traffic"),
            loaded_phase,
        ));
        eprintln!(
            "other traffic: sent {sent}, refused {refused}, in {:.1} s",
            started.elapsed().as_secs_f64() + 0.5
        );
    });
    drop(server);
    println!(
        "fsync={fsync}, one rmcp session over streamable HTTP, Rust clients; ms; load average \
         {start_load} at the start, {} at the end\n",
        loadavg()
    );
    println!("| phase | measure | p50 | p90 | p99 | max | samples |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        println!("{r}");
    }
}
