//! The worked on-call example of `docs/rules.md`, end to end: the Alertmanager payload printed
//! there is posted to a real daemon running `rules/oncall-team.json`, and the message it
//! stored is replayed by `rules test` at a Monday morning in Berlin (a confirm) and a Monday
//! evening (held back as `inactive`).

use std::path::PathBuf;

use serde_json::{Value, json};

use super::util::*;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The first ```json block after `heading` in `docs/rules.md`.
fn rules_doc_json_after(heading: &str) -> Value {
    let page = std::fs::read_to_string(repo("docs/rules.md")).unwrap();
    let (_, after) = page
        .split_once(heading)
        .unwrap_or_else(|| panic!("docs/rules.md has no {heading:?}"));
    let (_, block) = after.split_once("```json\n").expect("a json block");
    let (block, _) = block.split_once("```").expect("the block ends");
    serde_json::from_str(block).unwrap_or_else(|e| panic!("{e}: {block}"))
}

#[test]
fn the_documented_alertmanager_payload_asks_in_business_hours_only() {
    let payload = rules_doc_json_after("### Worked example: an on-call team");
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        &std::fs::read_to_string(repo("rules/oncall-team.json")).unwrap(),
    );
    sb.spawn();
    let reply = http_request(
        sb.ingest.as_deref().unwrap(),
        "POST",
        "/v1/alertmanager",
        &[
            ("Authorization", &format!("Bearer {}", sb.token())),
            ("Content-Type", "application/json"),
        ],
        payload.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert!(sb.terminate().success());

    // The message as the page describes it.
    let stored: Value = std::fs::read_to_string(sb.home.path().join("channels.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .next_back()
        .expect("the alert is stored");
    assert_eq!(stored["serverName"], "alertmanager");
    assert_eq!(stored["channel"], "alerts/warning");
    assert_eq!(
        stored["content"],
        "[FIRING] PostgresSlowQueries: p95 query time above 500 ms"
    );
    for (key, value) in [
        ("status", "firing"),
        ("labels.team", "db"),
        ("labels.severity", "warning"),
        ("labels.instance", "db-1:5432"),
        ("fingerprint", "c4d2"),
    ] {
        assert_eq!(stored["metadata"][key], value, "{key}: {stored}");
    }

    // Replayed through the rules at 09:30 and 18:30 Berlin time on a Monday in November.
    let message = |at: &str| {
        json!({"server": stored["serverName"], "channel": stored["channel"],
               "content": stored["content"], "metadata": stored["metadata"],
               "timestamp": stored["timestamp"], "at": at})
    };
    let dir = tempfile::tempdir().unwrap();
    let test = json!({
        "ruleFiles": [repo("rules/oncall-team.json")],
        "tests": [{
            "name": "the documented alert",
            "messages": [message("2026-11-23T08:30:00Z"), message("2026-11-23T17:30:00Z")],
            "expect": [
                {"msg": 0, "rule": "db-warning-office-hours", "mode": "confirm"},
                {"msg": 0, "rule": "db-critical", "reason": "no_match"},
                {"msg": 1, "rule": "db-warning-office-hours", "reason": "inactive"}
            ]
        }]
    });
    let file = dir.path().join("readme.test.json");
    std::fs::write(&file, test.to_string()).unwrap();
    let out = cli_in(dir.path(), &["rules", "test", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        stdout(&out),
        "passed: the documented alert\n1 test: 1 passed, 0 failed\n"
    );
}
