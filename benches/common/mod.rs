//! What the wake-up benches share: starting the daemon on a home, the wait call, the table
//! rows. Included by `wake_latency.rs` and `wake_sessions.rs` as `mod common`.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;

pub type Client = rmcp::service::RunningService<rmcp::service::RoleClient, ()>;

/// `name` from the environment, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The daemon process; killed and reaped when dropped.
pub struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `switchboard daemon` on `home` with `config` as its `switchboard.json` and one notify
/// rule on `wake/probe`; the guard, the ingest address, the `/mcp` URL and the token.
pub fn start_daemon(bin: &Path, home: &Path, config: &str) -> (Daemon, String, String, String) {
    std::fs::write(home.join("switchboard.json"), config).unwrap();
    std::fs::write(
        home.join("triggers.json"),
        r#"{"rules": [{"name": "wake-probe", "channel": "wake/probe"}]}"#,
    )
    .unwrap();
    let log = std::fs::File::create(home.with_extension("log")).unwrap();
    let child = Command::new(bin)
        .arg("--home")
        .arg(home)
        .args(["daemon", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (build it: cargo build --release)", bin.display()));
    let daemon = Daemon(child);
    let endpoint = home.join("endpoint.json");
    let deadline = Instant::now() + Duration::from_secs(10);
    let endpoint: serde_json::Value = loop {
        if let Ok(text) = std::fs::read_to_string(&endpoint)
            && let Ok(v) = serde_json::from_str(&text)
        {
            break v;
        }
        assert!(Instant::now() < deadline, "switchboard did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let token = std::fs::read_to_string(home.join("token")).unwrap();
    let field = |k: &str| endpoint[k].as_str().unwrap().to_string();
    (
        daemon,
        field("ingest"),
        field("mcp"),
        token.trim().to_string(),
    )
}

/// One `wait_for_inbound_message` (up to 20 s, 50 items); the items it returned.
pub async fn wait_call(client: &Client) -> Vec<serde_json::Value> {
    let mut args = serde_json::Map::new();
    args.insert("timeout_s".into(), 20.0.into());
    args.insert("max_items".into(), 50.into());
    let result = client
        .call_tool(CallToolRequestParams::new("wait_for_inbound_message").with_arguments(args))
        .await
        .expect("wait call");
    result
        .structured_content
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

/// Nanoseconds since the epoch: a marker that differs between runs.
pub fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

/// One Markdown row: p50, p90, p99, max (ms) and the count.
pub fn row(first: &str, measure: &str, mut v: Vec<Duration>) -> String {
    v.sort();
    let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1000.0);
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    format!(
        "| {first} | {measure} | {} | {} | {} | {} | {} |",
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(0.99)),
        ms(v[v.len() - 1]),
        v.len()
    )
}

/// The load average, for the table's heading.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
