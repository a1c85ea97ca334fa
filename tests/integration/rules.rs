//! `switchboard rules check | test | schema` through the real binary.

use std::path::PathBuf;

use super::util::{cli_in, stderr, stdout};

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn shipped_examples_and_rule_packs_pass_check() {
    let home = tempfile::tempdir().unwrap();
    let mut files = vec![repo("examples/triggers.json")];
    for entry in std::fs::read_dir(repo("rules")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            files.push(path);
        }
    }
    assert!(
        files.len() >= 4,
        "examples/triggers.json and three packs: {files:?}"
    );
    for file in files {
        let out = cli_in(home.path(), &["rules", "check", file.to_str().unwrap()]);
        assert!(out.status.success(), "{}: {}", file.display(), stdout(&out));
        assert!(stdout(&out).contains(": ok, "), "{}", stdout(&out));
        assert!(
            !stderr(&out).contains("warning"),
            "{}: {}",
            file.display(),
            stderr(&out)
        );
    }
}

/// Issue 27.8: `{{meta.KEY}}` of a key a message lacks renders empty, so a typo in a dedup key
/// made every key the same without a word. `rules check` warns (and still passes) when a rule
/// on a built-in source reads a key that source never sets, and says the closest one.
#[test]
fn check_warns_about_placeholders_no_source_sets() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("typo.json");
    std::fs::write(
        &file,
        r#"{"rules": [
  {"name": "am", "server": "alertmanager", "mode": "confirm",
   "prompt": "{{meta.alertname}} on {{meta.labels.instance}} ({{meta.fingerprnt}})",
   "dedupWindow": "1h", "dedupKey": "{{meta.fingerprint}}", "matchers": ["lables.team=\"db\""]},
  {"name": "mine", "server": "my-bridge", "mode": "notify", "prompt": "{{meta.anything}}"}
]}"#,
    )
    .unwrap();
    let out = cli_in(home.path(), &["rules", "check", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "warnings do not fail: {}{}",
        stdout(&out),
        stderr(&out)
    );
    let warnings: Vec<_> = stderr(&out)
        .lines()
        .filter(|l| l.contains(": warning: "))
        .map(str::to_string)
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[0].ends_with(
            "rule 0 `am`: `{{meta.fingerprnt}}` in `prompt` is set by no `alertmanager` message, \
             so it renders empty; did you mean `fingerprint`?"
        ),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[1].contains("matcher key `lables.team` is set by no `alertmanager` message"),
        "{}",
        warnings[1]
    );
}

#[test]
fn check_reports_every_error_with_code_and_position() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("bad.json");
    std::fs::write(
        &file,
        "{\n  \"rules\": [\n    {\"name\": \"crit\", \"contentRgex\": \"x\"},\n    {\"name\": \"dm\", \"mode\": \"auto\", \"prompt\": \"p\", \"rateLimit\": \"30\"}\n  ]\n}\n",
    )
    .unwrap();
    let out = cli_in(
        home.path(),
        &["rules", "check", "--format", "json", file.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "invalid → exit 1");
    let errors: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let got: Vec<_> = errors
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["code"].as_str().unwrap().to_string(),
                e["rule_index"].as_u64(),
                e["rule"].as_str().map(str::to_string),
                e["key"].as_str().map(str::to_string),
                e["line"].as_u64(),
                e["column"].as_u64(),
            )
        })
        .collect();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        got,
        vec![
            (
                "unknown_key".into(),
                Some(0),
                s("crit"),
                s("contentRgex"),
                Some(3),
                Some(22)
            ),
            (
                "auto_requires_tools".into(),
                Some(1),
                s("dm"),
                s("tools"),
                Some(4),
                Some(20)
            ),
            (
                "invalid_rate_limit".into(),
                Some(1),
                s("dm"),
                s("rateLimit"),
                Some(4),
                Some(64)
            ),
        ]
    );
    let text = cli_in(home.path(), &["rules", "check", file.to_str().unwrap()]);
    assert_eq!(text.status.code(), Some(1));
    let first = stdout(&text).lines().next().unwrap().to_string();
    assert!(
        first.ends_with(
            "bad.json:3:22: rule 0 `crit`: unknown key `contentRgex`; did you mean `contentRegex`?"
        ),
        "{first}"
    );
}

#[test]
fn check_without_a_file_uses_the_home_and_accepts_its_absence() {
    let home = tempfile::tempdir().unwrap();
    let out = cli_in(home.path(), &["rules", "check"]);
    assert!(out.status.success());
    assert!(
        stdout(&out).contains("built-in catch-all"),
        "{}",
        stdout(&out)
    );
    std::fs::write(home.path().join("triggers.json"), "[]").unwrap();
    let out = cli_in(home.path(), &["rules", "check"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("triggers.json:1:1: parse error"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn test_replays_messages_and_explains() {
    let home = tempfile::tempdir().unwrap();
    let messages = home.path().join("messages.jsonl");
    std::fs::write(
        &messages,
        [
            r#"{"server": "alertmanager", "channel": "alerts/critical", "content": "[FIRING] DiskFull: disk 95% full", "metadata": {"status": "firing", "labels.severity": "critical", "alertname": "DiskFull", "labels.instance": "db1", "fingerprint": "abc"}, "timestamp": "2026-11-22T10:00:00Z"}"#,
            r#"{"server": "alertmanager", "channel": "alerts/critical", "content": "[FIRING] DiskFull: disk 96% full", "metadata": {"status": "firing", "labels.severity": "critical", "alertname": "DiskFull", "labels.instance": "db1", "fingerprint": "abc"}, "timestamp": "2026-11-22T10:05:00Z"}"#,
            r#"{"server": "teams", "channel": "teams/dm", "content": "can you look at the release?", "metadata": {"sender": "Ana"}, "timestamp": "2026-11-22T10:06:00Z"}"#,
            r#"{"server": "github", "channel": "ci/workflow_run", "content": "acme/api: CI on main: failure", "timestamp": "2026-11-22T10:07:00Z"}"#,
            r#"{"server": "cli", "channel": "misc", "content": "hello", "timestamp": "2026-11-22T10:08:00Z"}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let rules = repo("examples/triggers.json");
    let args = [
        "rules",
        "test",
        "--rules",
        rules.to_str().unwrap(),
        "--messages",
        messages.to_str().unwrap(),
    ];
    let out = cli_in(home.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary: Vec<_> = lines
        .iter()
        .map(|l| {
            (
                l["msg"].as_u64().unwrap(),
                l["rule"].as_str().unwrap(),
                l["id"].as_u64().unwrap(),
            )
        })
        .collect();
    // Message 1 repeats fingerprint abc inside the 30m dedup window; message 4 matches nothing.
    assert_eq!(
        summary,
        [
            (0, "oncall-critical", 1),
            (2, "teams-dm-triage", 2),
            (3, "ci-failure", 3)
        ]
    );
    assert_eq!(lines[0]["mode"], "confirm");
    assert_eq!(lines[0]["expires_at"], "2026-11-22T10:15:00Z");
    assert!(
        lines[0]["prompt"]
            .as_str()
            .unwrap()
            .starts_with("A critical alert is firing: DiskFull (db1).")
    );
    assert_eq!(
        lines[1]["tools"],
        serde_json::json!(["teams__get_*", "teams__list_*"])
    );
    assert!(lines[1].get("expires_at").is_none(), "only confirms expire");

    let mut explain = args.to_vec();
    explain.push("--explain");
    let out = cli_in(home.path(), &explain);
    let reasons: Vec<(u64, String, String)> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l.get("reason").is_some())
        .map(|l| {
            (
                l["msg"].as_u64().unwrap(),
                l["rule"].as_str().unwrap().into(),
                l["reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(
        reasons.contains(&(1, "oncall-critical".into(), "dedup".into())),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&(4, "ci-failure".into(), "no_match".into())),
        "{reasons:?}"
    );
    assert_eq!(reasons.len(), 3 * 5 - 3);
}

/// `stop` in the shipped CI pack: a failure on main asks once, and the catch-all below it
/// neither nudges about it nor about its repeat held back by the dedup window; a failure
/// elsewhere still reaches the catch-all.
#[test]
fn stop_in_the_ci_pack_keeps_the_catch_all_quiet() {
    let home = tempfile::tempdir().unwrap();
    let messages = home.path().join("messages.jsonl");
    let line = |content: &str, at: &str| {
        serde_json::json!({"server": "github", "channel": "ci/workflow_run", "content": content,
            "metadata": {"repo": "acme/api", "workflow": "Build"}, "timestamp": at})
        .to_string()
    };
    std::fs::write(
        &messages,
        [
            line(
                "acme/api: Build on main completed: failure",
                "2026-11-22T10:00:00Z",
            ),
            line(
                "acme/api: Build on main completed: failure",
                "2026-11-22T10:10:00Z",
            ),
            line(
                "acme/api: Build on dev completed: failure",
                "2026-11-22T10:20:00Z",
            ),
        ]
        .join("\n"),
    )
    .unwrap();
    let rules = repo("rules/ci.json");
    let out = cli_in(
        home.path(),
        &[
            "rules",
            "test",
            "--rules",
            rules.to_str().unwrap(),
            "--messages",
            messages.to_str().unwrap(),
            "--explain",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let decided: Vec<(u64, String, String)> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["reason"] != "no_match")
        .map(|l| {
            (
                l["msg"].as_u64().unwrap(),
                l["rule"].as_str().unwrap().to_string(),
                l["mode"]
                    .as_str()
                    .or(l["reason"].as_str())
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let want: Vec<(u64, String, String)> = [
        (0, "ci-main-failed", "confirm"),
        (0, "ci-failed", "stopped"),
        (0, "ci-recovered", "stopped"),
        (1, "ci-main-failed", "dedup"),
        (1, "ci-failed", "stopped"),
        (1, "ci-recovered", "stopped"),
        (2, "ci-failed", "notify"),
    ]
    .into_iter()
    .map(|(m, r, d)| (m, r.to_string(), d.to_string()))
    .collect();
    assert_eq!(decided, want);
}

#[test]
fn schema_is_json_schema_for_the_file() {
    let home = tempfile::tempdir().unwrap();
    let out = cli_in(home.path(), &["rules", "schema"]);
    assert!(out.status.success());
    let schema: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        schema["$schema"]
            .as_str()
            .unwrap()
            .contains("json-schema.org")
    );
    let text = schema.to_string();
    for key in [
        "contentRegex",
        "rateLimit",
        "dedupWindow",
        "confirmTimeout",
        "tools",
        "matchers",
        "activeTimeIntervals",
        "muteTimeIntervals",
        "timeIntervals",
        "startTime",
        "daysOfMonth",
        "location",
    ] {
        assert!(text.contains(key), "{key}");
    }
    let top = &schema["properties"];
    assert!(top["timeIntervals"].is_object(), "{top}");
    assert!(
        top["timeIntervals"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("time_intervals")),
        "{top}"
    );
}

/// The `rules test` example of docs/rules.md: the shipped messages file against the shipped rules.
#[test]
fn the_example_messages_replay_as_the_readme_shows() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let home = tempfile::tempdir().unwrap();
    let out = cli_in(
        home.path(),
        &[
            "rules",
            "test",
            "--rules",
            root.join("examples/triggers.json").to_str().unwrap(),
            "--messages",
            root.join("examples/messages.jsonl").to_str().unwrap(),
            "--explain",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let decided: Vec<(u64, &str, &str)> = lines
        .iter()
        .filter(|l| l["reason"] != "no_match")
        .map(|l| {
            (
                l["msg"].as_u64().unwrap(),
                l["rule"].as_str().unwrap(),
                l["mode"].as_str().or(l["reason"].as_str()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        decided,
        [
            (0, "oncall-critical", "confirm"),
            (1, "oncall-critical", "dedup"),
            (2, "teams-dm-triage", "auto"),
            (3, "ci-failure", "notify"),
            (4, "ci-failure", "rate_limited"),
        ]
    );
    assert_eq!(lines[0]["expires_at"], "2026-11-22T10:15:00Z");
}

#[test]
fn rules_test_reports_every_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    let messages = dir.path().join("m.jsonl");
    std::fs::write(
        &messages,
        "{\"channel\": \"a\", \"timestamp\": \"2026-11-22T10:00:00Z\"}\n{\"chanel\": \"a\", \"content\": \"x\"}\n",
    )
    .unwrap();
    let rules = dir.path().join("r.json");
    std::fs::write(&rules, r#"{"rules": [{"name": "all"}]}"#).unwrap();
    let out = cli_in(
        dir.path(),
        &[
            "rules",
            "test",
            "--rules",
            rules.to_str().unwrap(),
            "--messages",
            messages.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let shown = messages.display().to_string();
    assert!(
        err.contains(&format!("{shown}:1: missing field `content`")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{shown}:2: unknown field `chanel`")),
        "{err}"
    );
    assert!(err.contains("2 bad lines; nothing replayed"), "{err}");
    assert!(stdout(&out).is_empty());
}

/// The worked on-call example of docs/rules.md: Alertmanager alerts routed by their labels, a
/// maintenance window and Berlin business hours, checked by its `rules test` file.
#[test]
fn the_oncall_team_example_passes_its_rules_test() {
    let home = tempfile::tempdir().unwrap();
    let out = cli_in(
        home.path(),
        &[
            "rules",
            "test",
            repo("examples/oncall-team.test.json").to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("passed: ")).count(),
        3,
        "{text}"
    );
    assert!(text.ends_with("3 tests: 3 passed, 0 failed\n"), "{text}");
}

/// A failed expectation says what was expected and what happened, down to the matcher or
/// the interval that held the rule back; any failure exits 1. Rule files are found relative
/// to the test file, and several are read as one.
#[test]
fn a_failed_rules_test_says_what_happened() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("rules")).unwrap();
    std::fs::write(
        dir.path().join("rules/hours.json"),
        r#"{"timeIntervals": {"office": [{"weekdays": ["monday:friday"], "times": [{"startTime": "09:00", "endTime": "17:00"}], "location": "America/New_York"}]}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("rules/db.json"),
        r#"{"rules": [{"name": "db", "matchers": ["labels.team=\"db\""], "activeTimeIntervals": ["office"],
                       "mode": "confirm", "prompt": "look: {{content}}"},
                      {"name": "all", "rateLimit": "1h"}]}"#,
    )
    .unwrap();
    let message = |team: &str, at: &str| {
        serde_json::json!({"server": "alertmanager", "channel": "alerts/critical", "content": "[FIRING] x",
                           "metadata": {"labels.team": team}, "timestamp": at})
    };
    let tests = serde_json::json!({
        "ruleFiles": ["rules/hours.json", "rules/db.json"],
        "tests": [
            {"name": "holds", "messages": [message("db", "2026-11-23T15:00:00Z")],
             "expect": [{"msg": 0, "rule": "db", "mode": "confirm"}, {"msg": 0, "rule": "all"}]},
            {"name": "wrong", "messages": [message("api", "2026-11-23T15:00:00Z"),
                                           message("db", "2026-11-23T23:00:00Z"),
                                           message("db", "2026-11-23T23:30:00Z")],
             "expect": [{"msg": 0, "rule": "db", "mode": "confirm"},
                        {"msg": 1, "rule": "db", "mode": "confirm"},
                        {"msg": 2, "rule": "all", "reason": "dedup"},
                        {"msg": 2, "rule": "nope", "reason": "no_match"}]}
        ]
    });
    let file = dir.path().join("db.test.json");
    std::fs::write(&file, tests.to_string()).unwrap();
    let out = cli_in(dir.path(), &["rules", "test", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let want = [
        "passed: holds",
        "failed: wrong",
        r#"  msg 0, rule `db`: expected to fire (confirm), got no_match: matcher `labels.team="db"` does not hold: `labels.team` is "api""#,
        r#"  msg 1, rule `db`: expected to fire (confirm), got inactive: 2026-11-23T23:00:00Z, a Monday, is outside `activeTimeIntervals` "office""#,
        "  msg 2, rule `all`: expected reason dedup, got rate_limited",
        "  msg 2, rule `nope`: no such rule in the rule files (db, all)",
        "2 tests: 1 passed, 1 failed",
    ];
    assert_eq!(text.lines().collect::<Vec<_>>(), want, "{text}");

    // The replay mode explains the same: which matcher, which interval.
    let messages = dir.path().join("m.jsonl");
    std::fs::write(
        &messages,
        format!(
            "{}\n{}\n",
            message("api", "2026-11-23T15:00:00Z"),
            message("db", "2026-11-23T23:00:00Z")
        ),
    )
    .unwrap();
    let merged = dir.path().join("merged.json");
    std::fs::write(
        &merged,
        r#"{"timeIntervals": {"office": [{"weekdays": ["monday:friday"], "times": [{"startTime": "09:00", "endTime": "17:00"}], "location": "America/New_York"}]},
            "rules": [{"name": "db", "matchers": ["labels.team=\"db\""], "activeTimeIntervals": ["office"]}]}"#,
    )
    .unwrap();
    let out = cli_in(
        dir.path(),
        &[
            "rules",
            "test",
            "--rules",
            merged.to_str().unwrap(),
            "--messages",
            messages.to_str().unwrap(),
            "--explain",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["failed"], "matchers");
    assert_eq!(lines[1]["reason"], "inactive");
    assert!(
        lines[1]["detail"]
            .as_str()
            .unwrap()
            .contains("outside `activeTimeIntervals` \"office\""),
        "{lines:?}"
    );

    // A bad test file: a reason that does not exist, a message without a time.
    let bad = dir.path().join("bad.test.json");
    std::fs::write(
        &bad,
        r#"{"ruleFiles": ["rules/db.json", "rules/hours.json"], "tests": [{"name": "t",
            "messages": [{"channel": "a", "content": "x"}], "expect": [{"msg": 0, "rule": "db", "reason": "asleep"}]}]}"#,
    )
    .unwrap();
    let out = cli_in(dir.path(), &["rules", "test", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("unknown reason \"asleep\""), "{err}");
    assert!(
        err.contains("message 0: a message needs `timestamp` or `at`"),
        "{err}"
    );
    assert!(err.ends_with("2 problems; no test ran\n"), "{err}");
    assert!(stdout(&out).is_empty());
}

#[test]
fn check_locates_bad_matchers_and_intervals() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("bad.json");
    std::fs::write(
        &file,
        "{\"timeIntervals\": {\"bh\": [{\"weekdays\": [\"mon:fri\"]}]},\n \"rules\": [\n  {\"name\": \"db\", \"matchers\": [\"labels.team=db\", \"labels.sev=~\\\"(crit\\\"\"],\n   \"activeTimeIntervals\": [\"bh\", \"weekend\"]}\n ]}\n",
    )
    .unwrap();
    let out = cli_in(
        home.path(),
        &["rules", "check", "--format", "json", file.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    let errors: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let got: Vec<_> = errors
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["code"].as_str().unwrap().to_string(),
                e["rule"].as_str().map(str::to_string),
                e["key"].as_str().unwrap().to_string(),
                e["line"].as_u64().unwrap(),
                e["column"].as_u64().unwrap(),
            )
        })
        .collect();
    let s = |v: &str| v.to_string();
    assert_eq!(
        got,
        [
            (s("invalid_time_interval"), None, s("weekdays"), 1, 40),
            (s("invalid_matcher"), Some(s("db")), s("matchers"), 3, 62),
            (
                s("unknown_time_interval"),
                Some(s("db")),
                s("activeTimeIntervals"),
                4,
                34
            ),
        ],
        "{errors:#}"
    );
}

/// `rules list`: one line per rule for people (name, mode, what it matches, its limits),
/// `--json` for scripts.
#[test]
fn rules_list_for_people_and_for_scripts() {
    use super::util::Switchboard;
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        &std::fs::read_to_string(repo("rules/oncall-team.json")).unwrap(),
    );
    sb.spawn();
    let out = sb.cli(&["rules", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            r#"db-critical              confirm  server alertmanager, status="firing", labels.team="db", labels.severity=~"critical|page", muted in db-maintenance; dedup 30m by {{meta.fingerprint}}, confirm within 15m, stop"#,
            r#"db-warning-office-hours  confirm  server alertmanager, status="firing", labels.team="db", labels.severity="warning", active in business-hours; dedup 4h by {{meta.fingerprint}}, confirm within 1h, stop"#,
            r#"team-other               notify   server alertmanager, status="firing", labels.team!="", labels.env!~"test|staging"; rateLimit 10m"#,
        ],
        "{text}"
    );
    let out = sb.cli(&["rules", "list", "--json"]);
    let rules: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(rules[0]["name"], "db-critical");
    assert_eq!(
        rules[0]["muteTimeIntervals"],
        serde_json::json!(["db-maintenance"])
    );
    assert_eq!(rules[2]["matchers"][1], "labels.team!=\"\"");
    assert!(sb.terminate().success());
}

/// Issue 46: `rules test` reads regular files only, and within a size cap. Today it hung on a
/// FIFO that nobody writes, and read `/dev/zero` without end.
#[test]
fn test_refuses_a_fifo_or_a_device_at_once() {
    use super::util::exits_1;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{"rules":[{"name":"a","channel":"*","mode":"notify"}]}"#,
    )
    .unwrap();
    let messages = dir.path().join("messages.jsonl");
    std::fs::write(
        &messages,
        r#"{"server":"s","channel":"c","content":"x","timestamp":"2026-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (rules, messages, fifo) = (
        rules.to_str().unwrap(),
        messages.to_str().unwrap(),
        fifo.to_str().unwrap(),
    );
    for (args, what) in [
        (vec!["--rules", rules, "--messages", fifo], fifo),
        (
            vec!["--rules", "/dev/zero", "--messages", messages],
            "/dev/zero",
        ),
        (vec!["--rules", fifo, "--messages", messages], fifo),
        (vec![fifo], fifo),
        (
            vec!["--rules", rules, "--messages", "/dev/zero"],
            "/dev/zero",
        ),
    ] {
        let err = exits_1(
            std::process::Command::new(super::util::bin())
                .arg("--home")
                .arg(dir.path())
                .args(["rules", "test"])
                .args(&args),
        );
        assert!(
            err.contains(&format!("cannot read {what}")) && err.contains("not a regular file"),
            "{args:?}: {err}"
        );
    }
    // The replay itself still works.
    let out = cli_in(
        dir.path(),
        &["rules", "test", "--rules", rules, "--messages", messages],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(r#""rule":"a""#), "{}", stdout(&out));
}
