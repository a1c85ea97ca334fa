//! Schedules as a source, on the real binary: a bad schedule is refused with its name and key,
//! and firings across restarts are stored once, missed ones caught up only when asked, once.

use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use serde_json::Value;

use super::util::*;

/// The messages of schedule `name` in the home's journal: their `scheduled_at` times.
fn firings(sb: &Switchboard, name: &str) -> Vec<DateTime<Utc>> {
    std::fs::read_to_string(sb.home.path().join("channels.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["serverName"] == "schedule" && m["metadata"]["schedule"] == name)
        .map(|m| {
            m["metadata"]["scheduled_at"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

fn config(tick: &str, once: &str) -> String {
    serde_json::json!({"schedules": [
        {"name": "tick", "cron": tick, "catchUp": true, "channel": "schedule/tick"},
        {"name": "caught", "cron": once, "catchUp": true, "content": "triage the night"},
        {"name": "skipped", "cron": once},
    ]})
    .to_string()
}

/// Waits until the wall clock is past `t`.
fn until_past(t: DateTime<Utc>) {
    while Utc::now() <= t {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_bad_schedule_is_refused_by_config_check_and_at_start_with_its_name_and_key() {
    let sb = Switchboard::new();
    sb.write(
        "switchboard.json",
        "{\"schedules\": [\n  {\"name\": \"triage\", \"cron\": \"0 9 * *\", \"timezone\": \"Europe/Berlin\"}\n]}",
    );
    let shown = sb
        .home
        .path()
        .join("switchboard.json")
        .display()
        .to_string();
    let want = format!(
        "{shown}:2:30: schedule 0 `triage`: invalid `cron` \"0 9 * *\": expected 5 fields \
         (minute hour day-of-month month day-of-week) or 6 with seconds first, got 4"
    );
    let out = sb.cli(&["config", "check"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains(&want), "{}", stdout(&out));
    let json = sb.cli(&["config", "check", "--format", "json"]);
    let errors: Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(errors[0]["code"], "invalid_cron", "{errors}");
    assert_eq!(errors[0]["key"], "schedules[0].cron", "{errors}");

    let daemon = sb.cli(&["daemon", "--no-listen"]);
    assert!(!daemon.status.success());
    assert!(stderr(&daemon).contains(&want), "{}", stderr(&daemon));

    sb.write(
        "switchboard.json",
        r#"{"schedules": [{"name": "triage", "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"}]}"#,
    );
    let ok = sb.cli(&["config", "check"]);
    assert!(ok.status.success(), "{}", stdout(&ok));
    assert!(
        stdout(&ok).contains("ok, 0 upstreams; 1 schedule: triage"),
        "{}",
        stdout(&ok)
    );
}

#[test]
fn a_schedule_across_restarts_fires_once_and_catches_up_only_when_asked() {
    let mut sb = Switchboard::new();
    // Start 1: a tick every second; `caught` and `skipped` far in the future, so that the
    // daemon records that it has seen them.
    sb.write("switchboard.json", &config("* * * * * *", "0 0 1 1 *"));
    sb.spawn();
    let seen = eventually(Duration::from_secs(10), "two ticks", || {
        let t = firings(&sb, "tick");
        (t.len() >= 2).then_some(t)
    });
    sb.terminate();
    let last_tick = *seen.last().unwrap();

    // While it is down, `caught` and `skipped` fall due, as do some ticks.
    let due = (Utc::now() + chrono::Duration::seconds(2))
        .with_nanosecond(0)
        .unwrap();
    let once = format!("{} {} {} * * *", due.second(), due.minute(), due.hour());
    sb.write("switchboard.json", &config("* * * * * *", &once));
    until_past(due + chrono::Duration::seconds(1));

    // Start 2: `caught` fires its missed firing once; `skipped` does not.
    let second_start = Utc::now();
    sb.spawn();
    eventually(Duration::from_secs(10), "the caught-up firing", || {
        (!firings(&sb, "caught").is_empty()).then_some(())
    });
    eventually(Duration::from_secs(10), "a tick after the restart", || {
        firings(&sb, "tick")
            .iter()
            .any(|t| *t > second_start)
            .then_some(())
    });
    sb.terminate();

    // Start 3, at once: nothing is caught up twice.
    let third_start = Utc::now();
    sb.spawn();
    eventually(
        Duration::from_secs(10),
        "a tick after the second restart",
        || {
            firings(&sb, "tick")
                .iter()
                .any(|t| *t > third_start + chrono::Duration::seconds(1))
                .then_some(())
        },
    );
    sb.terminate();

    assert_eq!(
        firings(&sb, "caught"),
        [due],
        "caught up once: {}",
        sb.log()
    );
    assert!(firings(&sb, "skipped").is_empty(), "{}", sb.log());
    let ticks = firings(&sb, "tick");
    let mut unique = ticks.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ticks.len(), "a tick stored twice: {ticks:?}");
    let missed: Vec<_> = ticks
        .iter()
        .filter(|t| **t > last_tick && **t < second_start)
        .collect();
    assert!(
        missed.len() <= 1,
        "the downtime's ticks are caught up once, the latest: {missed:?}"
    );
    let journal = std::fs::read_to_string(sb.home.path().join("channels.jsonl")).unwrap();
    let caught: Value = journal
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|m| m["metadata"]["schedule"] == "caught")
        .unwrap();
    assert_eq!(caught["channel"], "schedule/caught");
    assert_eq!(caught["content"], "triage the night");
    assert_eq!(
        caught["id"],
        format!("schedule/caught/{}", due.format("%Y-%m-%dT%H:%M:%SZ"))
    );
}

/// The threads of process `pid`.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Issue 46: 3,000 schedules started 518 threads (each its own task, each writing the whole
/// state on a blocking thread of its own at start). They run on one timer task, and the
/// state is written once per wake-up: the daemon's thread count stays small while they start
/// and fire, and each of those that tick fires.
#[test]
fn three_thousand_schedules_run_on_one_timer_task() {
    let mut sb = Switchboard::new();
    let mut schedules: Vec<Value> = (0..2990)
        .map(|i| serde_json::json!({"name": format!("yearly-{i}"), "cron": "0 0 1 1 *"}))
        .collect();
    schedules.extend(
        (0..10).map(|i| serde_json::json!({"name": format!("tick-{i}"), "cron": "* * * * * *"})),
    );
    sb.write(
        "switchboard.json",
        &serde_json::json!({ "schedules": schedules }).to_string(),
    );
    sb.spawn();
    let pid = sb.pid();
    // The most threads seen while they start and until each tick fired twice.
    let ticked = || (0..10).all(|i| firings(&sb, &format!("tick-{i}")).len() >= 2);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut most = threads(pid);
    let mut fired = false;
    while !fired && std::time::Instant::now() < deadline {
        most = most.max(threads(pid));
        fired = ticked();
        std::thread::sleep(Duration::from_millis(50));
    }
    most = most.max(threads(pid));
    // The runtime's workers (one per core) and a few more, not hundreds.
    let cores = std::thread::available_parallelism().map_or(8, |n| n.get());
    assert!(most < cores + 32, "{most} threads for 3,000 schedules");
    assert!(fired, "every tick fired twice within 20 s");
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(sb.home.path().join("schedules.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state.as_object().unwrap().len(), 3000);
    for i in 0..10 {
        let t = firings(&sb, &format!("tick-{i}"));
        let mut unique = t.clone();
        unique.dedup();
        assert_eq!(unique, t, "tick-{i} fired once a second, each once");
    }
    sb.terminate();
}
