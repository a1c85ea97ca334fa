//! HTTP ingest through the real binary and real sockets: the token file, webhook payloads
//! reaching their channels and rules, every refusal as a sender sees it, and a real
//! Alertmanager delivering to switchboard.

use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::util::*;

const GITHUB_SECRET: &str = "It's a Secret to Everybody";

fn ingest(sb: &Switchboard) -> &str {
    sb.ingest.as_deref().expect("ingest is listening")
}

/// `POST path` with the bearer token and a JSON body.
fn post(sb: &Switchboard, path: &str, body: &[u8]) -> Reply {
    let auth = format!("Bearer {}", sb.token());
    http_request(
        ingest(sb),
        "POST",
        path,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body,
    )
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

/// A GitHub delivery as GitHub sends it: the fixture's body and headers.
fn github_delivery(sb: &Switchboard, event: &str, body: &[u8]) -> Reply {
    let text = String::from_utf8(fixture(&format!("github-{event}.headers"))).unwrap();
    let headers: Vec<(&str, &str)> = text.lines().filter_map(|l| l.split_once(": ")).collect();
    http_request(ingest(sb), "POST", "/v1/github", &headers, body)
}

/// `switchboard list --json [--channel C]`: the stored messages, oldest first.
fn list(sb: &Switchboard, channel: Option<&str>) -> Vec<Value> {
    let mut args = vec!["list", "--json", "-n", "100"];
    if let Some(c) = channel {
        args.extend(["--channel", c]);
    }
    let out = sb.cli(&args);
    assert!(out.status.success(), "list failed: {}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn journal_seqs(home: &Path) -> Vec<u64> {
    std::fs::read_to_string(home.join("channels.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["seq"].as_u64())
        .collect()
}

#[test]
fn a_fresh_home_gets_a_private_token_that_ingest_requires_and_a_202_is_on_disk() {
    let mut sb = Switchboard::start();
    let token = sb.token();
    assert_eq!(token.len(), 64, "{token:?}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    let mode = std::fs::metadata(sb.home.path().join("token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let msg = br#"{"server": "deploy-bot", "channel": "ci/deploys", "content": "api v42 is live"}"#;
    let r = http_request(ingest(&sb), "POST", "/v1/messages", &[], msg);
    r.assert_error(401, "missing_token");
    assert_eq!(
        r.header("www-authenticate"),
        Some(r#"Bearer realm="switchboard""#)
    );
    let r = http_request(
        ingest(&sb),
        "POST",
        "/v1/messages",
        &[("Authorization", "Bearer 0000")],
        msg,
    );
    r.assert_error(401, "invalid_token");

    let r = post(&sb, "/v1/messages", msg);
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(
        r.json(),
        json!({"accepted": [{"seq": 1, "duplicate": false}]})
    );
    let listed = list(&sb, None);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["server"], "deploy-bot");
    assert_eq!(listed[0]["channel"], "ci/deploys");
    assert_eq!(listed[0]["content"], "api v42 is live");

    // 202 means on disk: a kill -9 right after it loses nothing.
    sb.kill9();
    assert_eq!(journal_seqs(sb.home.path()), [1]);
    // The token is generated once, not at every start.
    sb.spawn();
    assert_eq!(sb.token(), token);
    assert_eq!(post(&sb, "/v1/messages", msg).seqs(), [(2, false)]);
}

#[test]
fn a_token_in_switchboard_json_is_used_and_no_token_file_is_written() {
    let mut sb = Switchboard::new();
    sb.write(
        "switchboard.json",
        r#"{"http": {"token": "configured-token"}}"#,
    );
    sb.spawn();
    assert!(!sb.home.path().join("token").exists());
    let msg = br#"{"server": "s", "channel": "c", "content": "x"}"#;
    let r = http_request(
        ingest(&sb),
        "POST",
        "/v1/messages",
        &[("Authorization", "Bearer configured-token")],
        msg,
    );
    assert_eq!(r.status, 202, "{}", r.body);
}

const RULES: &str = r#"{"rules": [
  {"name": "oncall", "channel": "alerts/*", "mode": "confirm",
   "prompt": "Investigate {{channel}}: {{content}}"},
  {"name": "ci-failures", "channel": "ci/*", "contentRegex": "failure"}
]}"#;

/// The rules that fired for `seq`, with their modes, from `actions.jsonl`.
fn fired_for(home: &Path, seq: u64) -> Vec<(String, String)> {
    action_records(home)
        .iter()
        .filter(|r| r["action"]["seq"] == seq)
        .map(|r| {
            (
                r["action"]["rule"].as_str().unwrap().to_string(),
                r["action"]["mode"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn webhooks_over_a_real_socket_land_on_their_channels_and_fire_rules() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULES);
    sb.write(
        "switchboard.json",
        &json!({"http": {"githubSecret": GITHUB_SECRET}}).to_string(),
    );
    sb.spawn();
    let home = sb.home.path().to_path_buf();

    let firing = fixture("alertmanager-firing.json");
    assert_eq!(
        post(&sb, "/v1/alertmanager", &firing).seqs(),
        [(1, false), (2, false), (3, false)]
    );
    assert_eq!(
        post(&sb, "/v1/alertmanager", &firing).seqs(),
        [(1, true), (2, true), (3, true)],
        "a repeated group stores nothing"
    );
    let r = post(
        &sb,
        "/v1/alertmanager",
        &fixture("alertmanager-resolved.json"),
    );
    assert_eq!(r.seqs(), [(4, false), (5, false)]);

    let run = fixture("github-workflow_run.json");
    let r = github_delivery(&sb, "workflow_run", &run);
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.seqs(), [(6, false)]);
    let r = github_delivery(&sb, "check_run", &fixture("github-check_run.json"));
    assert_eq!(r.seqs(), [(7, false)]);
    let mut tampered = run.clone();
    let at = tampered.len() / 2;
    tampered[at] ^= 1;
    github_delivery(&sb, "workflow_run", &tampered).assert_error(401, "invalid_signature");

    let alerts: Vec<_> = list(&sb, Some("alerts/*"))
        .iter()
        .map(|m| {
            format!(
                "{} {}",
                m["channel"].as_str().unwrap(),
                m["content"].as_str().unwrap().split(':').next().unwrap()
            )
        })
        .collect();
    assert_eq!(
        alerts,
        [
            "alerts/critical [FIRING] HighLatency",
            "alerts/warning [FIRING] HighLatency",
            "alerts/none [FIRING] HighLatency",
            "alerts/critical [RESOLVED] HighLatency",
            "alerts/warning [RESOLVED] HighLatency",
        ]
    );
    let ci = list(&sb, Some("ci/*"));
    assert_eq!(ci.len(), 2);
    assert_eq!(ci[0]["channel"], "ci/workflow_run");
    assert_eq!(ci[0]["server"], "github");
    assert_eq!(ci[0]["id"], "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    assert_eq!(ci[1]["channel"], "ci/check_run");

    // Every alert asks first; only the failed workflow run matches the CI rule.
    eventually(Duration::from_secs(10), "actions for seqs 1..=7", || {
        (fired_for(&home, 7).is_empty() && !fired_for(&home, 6).is_empty()).then_some(())
    });
    for seq in 1..=5 {
        assert_eq!(fired_for(&home, seq), [("oncall".into(), "confirm".into())]);
    }
    assert_eq!(
        fired_for(&home, 6),
        [("ci-failures".into(), "notify".into())]
    );

    let metrics = http_request(
        ingest(&sb),
        "GET",
        "/metrics",
        &[("Authorization", &format!("Bearer {}", sb.token()))],
        b"",
    );
    assert_eq!(metrics.status, 200);
    for line in [
        "switchboard_messages_ingested_total{source=\"alertmanager\"} 5",
        "switchboard_messages_ingested_total{source=\"github\"} 2",
        "switchboard_actions_total{rule=\"oncall\",mode=\"confirm\"} 5",
        "switchboard_http_rejections_total{code=\"invalid_signature\",status=\"401\"} 1",
        "switchboard_duplicates_total 3",
    ] {
        assert!(
            metrics.body.contains(line),
            "no {line:?} in:\n{}",
            metrics.body
        );
    }
}

#[test]
fn every_refusal_over_a_real_socket_has_its_status_and_json_code() {
    let mut sb = Switchboard::new();
    sb.write(
        "switchboard.json",
        r#"{"http": {"bodyLimit": 1024, "rateLimit": "5/1h"}}"#,
    );
    sb.spawn();
    let addr = ingest(&sb).to_string();
    let auth = format!("Bearer {}", sb.token());

    let r = http_request(&addr, "GET", "/nope", &[], b"");
    r.assert_error(404, "not_found");
    let r = http_request(&addr, "DELETE", "/healthz", &[], b"");
    r.assert_error(405, "method_not_allowed");
    assert_eq!(r.header("allow"), Some("GET,HEAD"));
    let r = http_request(&addr, "POST", "/v1/github", &[], b"{}");
    r.assert_error(403, "github_secret_missing");

    // Five authenticated requests spend the quota of five, whatever their outcome.
    let big = format!(
        r#"{{"server":"s","channel":"c","content":"{}"}}"#,
        "x".repeat(4000)
    );
    post(&sb, "/v1/messages", big.as_bytes()).assert_error(413, "body_too_large");
    let r = http_request(
        &addr,
        "POST",
        "/v1/messages",
        &[("Authorization", &auth), ("Content-Type", "text/plain")],
        b"hello",
    );
    r.assert_error(415, "unsupported_media_type");
    let r = post(&sb, "/v1/messages", b"{not json");
    r.assert_error(400, "invalid_json");
    assert_eq!(
        r.json()["message"],
        "request body is not valid JSON: key must be a string at line 1 column 2"
    );
    let r = post(&sb, "/v1/messages", br#"{"server": "s", "content": "x"}"#);
    r.assert_error(422, "invalid_payload");
    assert_eq!(
        r.json()["message"],
        "request body has the wrong shape: missing field `channel`"
    );
    let ok = br#"{"server": "s", "channel": "c", "content": "x"}"#;
    assert_eq!(post(&sb, "/v1/messages", ok).status, 202);
    let r = post(&sb, "/v1/messages", ok);
    r.assert_error(429, "rate_limited");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1, "{retry}");

    // Alertmanager has its own quota.
    let r = post(
        &sb,
        "/v1/alertmanager",
        br#"{"version": "3", "alerts": []}"#,
    );
    r.assert_error(422, "unsupported_version");
    let r = http_request(&addr, "GET", "/healthz", &[], b"");
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
}

#[test]
fn disable_auth_off_loopback_refuses_to_start() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("switchboard.json"),
        r#"{"http": {"disableAuth": true}}"#,
    )
    .unwrap();
    let mut child = Command::new(bin())
        .arg("--home")
        .arg(home.path())
        .args(["serve", "--no-stdio", "--listen", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(20));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("`http.disableAuth` is only honoured on a loopback address, but ingest listens on 0.0.0.0:"),
        "{err}"
    );
    assert!(!home.path().join("endpoint.json").exists());

    // On loopback it starts, and takes requests without a token.
    let mut sb = Switchboard::new();
    sb.write("switchboard.json", r#"{"http": {"disableAuth": true}}"#);
    sb.spawn();
    let r = http_request(
        ingest(&sb),
        "POST",
        "/v1/messages",
        &[],
        br#"{"server": "s", "channel": "c", "content": "x"}"#,
    );
    assert_eq!(r.status, 202, "{}", r.body);
}

// ---- Alertmanager, for real -------------------------------------------------------------

/// Kills and reaps a child when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Alertmanager and amtool binaries, installed with apt when missing; `None` (the test is
/// skipped; under `CI=true` it fails) only where there is no apt-get.
fn alertmanager_binaries() -> Option<(PathBuf, PathBuf)> {
    let find = || {
        let server = on_path("prometheus-alertmanager").or_else(|| on_path("alertmanager"))?;
        Some((server, on_path("amtool")?))
    };
    if let Some(found) = find() {
        return Some(found);
    }
    if on_path("apt-get").is_none() {
        skip("prometheus-alertmanager is not installed and there is no apt-get to install it");
        return None;
    }
    apt_install(&["prometheus-alertmanager"]);
    Some(find().expect("prometheus-alertmanager and amtool after apt-get install"))
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The confirm rule of the end-to-end test closes itself when its alert resolves.
const AM_RULES: &str = r#"{"rules": [
  {"name": "oncall", "channel": "alerts/*", "contentRegex": "^\\[FIRING\\]", "mode": "confirm",
   "prompt": "Investigate {{channel}}: {{content}}",
   "resolveRegex": "^\\[RESOLVED\\]", "resolveKey": "{{meta.fingerprint}}"}
]}"#;

#[test]
fn alertmanager_delivers_firing_and_resolved_alerts_end_to_end() {
    let Some((alertmanager, amtool)) = alertmanager_binaries() else {
        return;
    };
    let mut sb = Switchboard::new();
    sb.write("triggers.json", AM_RULES);
    sb.spawn();
    let home = sb.home.path().to_path_buf();

    let am_dir = tempfile::tempdir().unwrap();
    let config = am_dir.path().join("alertmanager.yml");
    std::fs::write(
        &config,
        format!(
            "route:\n  receiver: switchboard\n  group_by: ['alertname']\n  group_wait: 1s\n  \
             group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: switchboard\n    \
             webhook_configs:\n      - url: http://{}/v1/alertmanager\n        \
             send_resolved: true\n        http_config:\n          authorization:\n            \
             credentials: {}\n",
            ingest(&sb),
            sb.token()
        ),
    )
    .unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let log = am_dir.path().join("alertmanager.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let _am = KillOnDrop(
        Command::new(&alertmanager)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.path={}",
                am_dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("start alertmanager"),
    );
    let am_log = || std::fs::read_to_string(&log).unwrap_or_default();
    eventually(Duration::from_secs(30), "alertmanager ready", || {
        let addr = format!("127.0.0.1:{port}");
        TcpStream::connect(&addr).ok()?;
        (http_request(&addr, "GET", "/-/ready", &[], b"").status == 200).then_some(())
    });

    let started = chrono::Utc::now() - chrono::Duration::seconds(30);
    let amtool_add = |extra: &[String]| {
        let out = Command::new(&amtool)
            .args([
                "alert",
                "add",
                "alertname=SwitchboardE2E",
                "severity=critical",
                "instance=test-1",
                "--annotation=summary=disk almost full on test-1",
            ])
            .arg(format!("--start={}", rfc3339(started)))
            .args(extra)
            .arg(format!("--alertmanager.url={url}"))
            .stdin(Stdio::null())
            .output()
            .expect("run amtool");
        assert!(
            out.status.success(),
            "amtool failed: {}{}",
            stdout(&out),
            stderr(&out)
        );
    };
    let e2e = |status: &str| {
        list(&sb, Some("alerts/critical"))
            .into_iter()
            .filter(|m| m["metadata"]["alertname"] == "SwitchboardE2E")
            .filter(|m| m["metadata"]["status"] == status)
            .collect::<Vec<_>>()
    };

    amtool_add(&[]);
    let firing = eventually(
        Duration::from_secs(60),
        "the firing alert in alerts/critical",
        || e2e("firing").into_iter().next(),
    );
    assert_eq!(firing["server"], "alertmanager");
    assert_eq!(
        firing["content"],
        "[FIRING] SwitchboardE2E: disk almost full on test-1"
    );
    assert_eq!(firing["metadata"]["labels.instance"], "test-1");
    assert_eq!(firing["metadata"]["receiver"], "switchboard");
    let fingerprint = firing["metadata"]["fingerprint"].as_str().unwrap();
    let starts_at = firing["metadata"]["startsAt"].as_str().unwrap();
    assert_eq!(
        firing["id"],
        format!("{fingerprint}:firing:{starts_at}"),
        "alertmanager log:\n{}",
        am_log()
    );
    let firing_seq = firing["seq"].as_u64().unwrap();
    eventually(
        Duration::from_secs(10),
        "the confirm action for the alert",
        || {
            (fired_for(&home, firing_seq) == [("oncall".to_string(), "confirm".to_string())])
                .then_some(())
        },
    );

    // Resolve it: the same alert with an end in the past.
    let ended = chrono::Utc::now() - chrono::Duration::seconds(1);
    amtool_add(&[format!("--end={}", rfc3339(ended))]);
    let resolved = eventually(Duration::from_secs(60), "the resolved alert", || {
        e2e("resolved").into_iter().next()
    });
    assert_eq!(
        resolved["content"],
        "[RESOLVED] SwitchboardE2E: disk almost full on test-1"
    );
    assert!(resolved["seq"].as_u64().unwrap() > firing_seq);
    assert_eq!(resolved["metadata"]["fingerprint"], fingerprint);
    assert_eq!(resolved["timestamp"], rfc3339(ended));
    assert_eq!(e2e("firing").len(), 1, "the firing alert is stored once");
    assert_eq!(e2e("resolved").len(), 1);

    // The alert's confirm was never answered: the resolve closed it, on disk and for people.
    let confirm_id = action_records(&home)
        .iter()
        .find(|r| r["action"]["seq"] == firing_seq)
        .and_then(|r| r["id"].as_u64())
        .expect("the confirm's creation record");
    let closed = eventually(Duration::from_secs(10), "the confirm ends resolved", || {
        action_records(&home)
            .into_iter()
            .find(|r| r["id"] == confirm_id && r["state"] == "resolved")
    });
    assert_eq!(
        closed["reason"],
        format!("resolved by message {}", resolved["seq"])
    );
    let out = sb.cli(&["pending"]);
    assert_eq!(
        stdout(&out).trim(),
        "no pending confirms",
        "{}",
        stderr(&out)
    );
    let out = sb.cli(&["confirm", &confirm_id.to_string(), "yes"]);
    assert_eq!(out.status.code(), Some(5), "closed: too late");
    assert!(
        stderr(&out).contains(&format!(
            "confirm {confirm_id} was already answered: resolved"
        )),
        "{}",
        stderr(&out)
    );
    let stats: Value = serde_json::from_slice(&sb.cli(&["stats", "--json"]).stdout).unwrap();
    assert_eq!(stats["delivery"]["counters"]["resolved"], 1);
}

/// Debian's Python, where apt-get installs `python3-prometheus-client`.
const DEBIAN_PYTHON: &str = "/usr/bin/python3";

/// `/metrics` parsed by a real OpenMetrics parser (the Prometheus project's Python client, from
/// Debian): every family is valid, and a rule whose name has a quote, a backslash and a line
/// feed comes back as that name, so one odd rule name cannot make a scrape unparseable.
#[test]
fn metrics_parse_as_openmetrics_even_with_a_quote_in_a_rule_name() {
    if !python_module("prometheus_client") {
        if on_path("apt-get").is_none() {
            return skip("python3-prometheus-client is missing and there is no apt-get");
        }
        apt_install(&["python3-prometheus-client"]);
    }
    let mut sb = Switchboard::new();
    let rule = "crit \"alerts\" \\ x";
    sb.write(
        "triggers.json",
        &json!({"rules": [{"name": rule, "channel": "*", "mode": "notify"}]}).to_string(),
    );
    sb.spawn();
    let r = post(
        &sb,
        "/v1/messages",
        br#"{"server":"s","channel":"c","content":"x"}"#,
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let scrape = || {
        http_request(
            ingest(&sb),
            "GET",
            "/metrics",
            &[("Authorization", &format!("Bearer {}", sb.token()))],
            b"",
        )
    };
    let body = eventually(Duration::from_secs(10), "the rule fired", || {
        let reply = scrape();
        reply
            .body
            .contains("switchboard_actions_total{rule=")
            .then_some(reply.body)
    });
    let parsed = Command::new(DEBIAN_PYTHON)
        .args([
            "-c",
            "import json, sys\n\
             from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
             out = {}\n\
             for f in text_string_to_metric_families(sys.stdin.read()):\n\
             \x20   for s in f.samples:\n\
             \x20       out.setdefault(f.name + ' ' + f.type, []).append([s.name, s.labels, s.value])\n\
             print(json.dumps(out))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(body.as_bytes())?;
            child.wait_with_output()
        })
        .expect("run python3");
    assert!(
        parsed.status.success(),
        "the OpenMetrics parser refused /metrics: {}\n{body}",
        stderr(&parsed)
    );
    let families: Value = serde_json::from_slice(&parsed.stdout).unwrap();
    assert_eq!(
        families["switchboard_actions counter"],
        json!([["switchboard_actions_total", {"rule": rule, "mode": "notify"}, 1]]),
        "{families:#}"
    );
    assert_eq!(
        families["switchboard_messages_ingested counter"],
        json!([["switchboard_messages_ingested_total", {"source": "http"}, 1]])
    );
    assert_eq!(
        families["switchboard_ring_depth gauge"],
        json!([["switchboard_ring_depth", {}, 1]])
    );
}

/// Whether Debian's Python can import `module`.
fn python_module(module: &str) -> bool {
    Command::new(DEBIAN_PYTHON)
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
