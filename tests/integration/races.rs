//! The races of delivery (issue 45), run many times through the official TypeScript SDK
//! (npm `@modelcontextprotocol/sdk`) over stdio and streamable HTTP against the real binary;
//! the script is `tests/node/races.mjs`, which prints a tally of what every client received.
//!
//! - a client that disconnects 0–5 ms after the POST that woke its wait;
//! - a wait cancelled (`notifications/cancelled`) 0–8 ms after that POST began;
//! - four sessions waiting while 40 auto items come: each gets its share.
//!
//! No item is lost; an item received twice is marked `redelivered` every time after the first
//! (what `docs/delivery.md` says can happen: a client that had a result and vanished within
//! the grace, or cancelled a request it had the answer of).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::npm;
use super::util::*;

const SDK: &str = "@modelcontextprotocol/sdk@1.32.2";

const RULES: &str = r#"{"rules": [
  {"name": "race", "channel": "work/*", "mode": "auto", "prompt": "Do {{content}}", "tools": ["view"]}
]}"#;

/// Short grace and idle expiry, so that work a vanished HTTP client held comes back within
/// the test; room for every item.
const SETTINGS: &str = r#"{
  "mcp": {"deliveryGrace": "300ms", "sessionIdleTimeout": "1s"},
  "actions": {"queueCapacity": 1000}
}"#;

/// Runs `race` over `transport` with `n` items; the tally, or `None` to skip (no npm).
fn run_race(race: &str, transport: &str, n: usize) -> Option<Value> {
    let sdk = npm::prefix("ts-sdk-1.32.2", &[SDK]).unwrap()?;
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULES);
    sb.write("switchboard.json", SETTINGS);
    sb.spawn();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/races.mjs");
    let run = run_limited(
        Command::new(npm::node())
            .arg(&script)
            .arg("--sdk")
            .arg(&sdk)
            .args(["--url", sb.mcp_url.as_deref().unwrap()])
            .args(["--ingest", sb.ingest.as_deref().unwrap()])
            .args(["--token", &sb.token()])
            .arg("--home")
            .arg(sb.home.path())
            .arg("--bin")
            .arg(bin())
            .args(["--race", race, "--transport", transport])
            .args(["--n", &n.to_string()]),
        Duration::from_secs(900),
    );
    let report = format!(
        "{}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        script.display(),
        run.describe(),
        run.stdout,
        run.stderr,
    );
    assert!(run.status.is_some_and(|s| s.success()), "{report}");
    assert!(!run.leftovers, "processes outlived the script\n{report}");
    let tally: Value = serde_json::from_str(run.stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no tally ({e})\n{report}"));
    eprintln!("tally: {tally}");
    // Every item is still accounted for in the journal: none stuck claimed.
    let log = sb.log();
    assert!(!log.contains("panicked"), "{log}");
    Some(tally)
}

/// No item lost; every duplicate marked.
fn assert_nothing_lost(tally: &Value, n: usize) {
    assert_eq!(tally["sent"], n, "{tally}");
    assert_eq!(tally["lost"], 0, "items lost: {tally}");
    assert_eq!(
        tally["unmarked_duplicates"], 0,
        "an item received twice without `redelivered`: {tally}"
    );
}

#[test]
fn a_client_that_disconnects_as_its_wait_wakes_loses_nothing_over_stdio() {
    if let Some(tally) = run_race("disconnect", "stdio", 200) {
        assert_nothing_lost(&tally, 200);
    }
}

#[test]
fn a_client_that_disconnects_as_its_wait_wakes_loses_nothing_over_http() {
    if let Some(tally) = run_race("disconnect", "http", 200) {
        assert_nothing_lost(&tally, 200);
    }
}

#[test]
fn a_wait_cancelled_as_it_wakes_gives_its_work_back_over_stdio() {
    if let Some(tally) = run_race("cancel", "stdio", 200) {
        assert_nothing_lost(&tally, 200);
    }
}

#[test]
fn a_wait_cancelled_as_it_wakes_gives_its_work_back_over_http() {
    if let Some(tally) = run_race("cancel", "http", 200) {
        assert_nothing_lost(&tally, 200);
    }
}

#[test]
fn forty_items_are_shared_by_four_waiting_sessions() {
    let Some(tally) = run_race("fair", "http", 40) else {
        return;
    };
    assert_nothing_lost(&tally, 40);
    assert_eq!(tally["duplicates"], 0, "{tally}");
    let per: Vec<u64> = tally["per_session"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert_eq!(per.iter().sum::<u64>(), 40, "{tally}");
    assert!(
        per.iter().all(|n| (5..=15).contains(n)),
        "each session gets between 5 and 15: {per:?}"
    );
}
