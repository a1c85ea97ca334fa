//! Routing to a window: a rule's `consumers` and `send --to` limit which front ends (`serve
//! --consumer NAME`) get its nudges, confirm requests and work; work for a consumer with no
//! window open waits for one.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::daemon::front_end;
use super::util::*;

const RULES: &str = r#"{"rules": [
  {"name": "pay", "channel": "work/pay", "mode": "auto", "prompt": "Pay: {{content}}", "tools": ["view"], "consumers": ["payments-*"]},
  {"name": "infra", "channel": "work/infra", "mode": "auto", "prompt": "Infra: {{content}}", "tools": ["view"], "consumers": ["infra"]},
  {"name": "ask", "channel": "ask/*", "mode": "confirm", "prompt": "Restart {{content}}?", "tools": ["bash"], "consumers": ["oncall"]},
  {"name": "news", "channel": "news/*", "consumers": ["payments-*"]}
]}"#;

/// What `client`'s waits return until `n` items came, or `limit` passed: (kind, rule,
/// content) of each.
async fn items(client: &Client, n: usize, limit: Duration) -> Vec<(String, String, String)> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    while got.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let r = tool(
            client,
            "wait_for_inbound_message",
            json!({"timeout_s": left.as_secs_f64()}),
        )
        .await;
        for i in r["items"].as_array().cloned().unwrap_or_default() {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            got.push((s(&i["kind"]), s(&i["rule"]), s(&i["message"]["content"])));
        }
    }
    got.sort();
    got
}

/// A Copilot CLI window on `home` whose front end reads as consumer `name`.
async fn window(home: &std::path::Path, name: &str) -> Client {
    front_end(home, "copilot-cli", &["--no-listen", "--consumer", name]).await
}

fn item(kind: &str, rule: &str, content: &str) -> (String, String, String) {
    (kind.into(), rule.into(), content.into())
}

#[tokio::test(flavor = "multi_thread")]
async fn each_window_gets_only_its_rules_work_and_absent_consumers_work_waits() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("triggers.json"), RULES).unwrap();
    let _guard = DaemonGuard(home.path().to_path_buf());
    let home = home.path();
    let pay = window(home, "payments-eu").await;
    let infra = window(home, "infra").await;
    let listed = stdout(&cli_in(home, &["rules", "list"]));
    let line = |name: &str| {
        listed
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line("pay").ends_with("channel work/pay; for payments-*"),
        "{listed}"
    );
    assert!(
        line("ask").ends_with("; confirm within 30m, for oncall"),
        "{listed}"
    );

    send_messages(
        home,
        &[
            ("work/pay", "refund 42"),
            ("work/infra", "disk full"),
            ("news/pay", "new PSP"),
            ("ask/db", "db-1"),
        ],
    );
    assert_eq!(
        items(&pay, 2, Duration::from_secs(10)).await,
        [
            item("auto", "pay", "refund 42"),
            item("nudge", "news", "new PSP")
        ]
    );
    assert_eq!(
        items(&infra, 1, Duration::from_secs(10)).await,
        [item("auto", "infra", "disk full")]
    );
    // The confirm is for `oncall`, which has no window: neither sees it.
    assert!(items(&pay, 1, Duration::from_millis(500)).await.is_empty());
    assert!(
        items(&infra, 1, Duration::from_millis(500))
            .await
            .is_empty()
    );
    let pending = cli_in(home, &["pending", "--json"]);
    let asked: Value = serde_json::from_str(stdout(&pending).trim()).unwrap();
    let ask_id = asked[0]["id"].as_u64().expect("the confirm is pending");
    // Nor may a window left out answer it by id.
    let refused = pay
        .call_tool({
            let mut p = rmcp::model::CallToolRequestParams::new("channel_confirm");
            p.arguments = json!({"id": ask_id, "decision": "yes"})
                .as_object()
                .cloned();
            p
        })
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let text = format!("{:?}", refused.content);
    assert!(
        text.contains("is for consumers `oncall`, not `payments-eu`"),
        "{text}"
    );

    // `send --to` sends one message's work to one consumer, over the rule's `consumers`.
    let out = cli_in(
        home,
        &[
            "send",
            "--channel",
            "work/infra",
            "--to",
            "oncall",
            "rotate the certs",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        items(&infra, 1, Duration::from_millis(500))
            .await
            .is_empty()
    );
    let stats = control(home, json!({"op": "stats"}))["result"]["delivery"].clone();
    assert_eq!(stats["queued_work"], 1, "the work waits: {stats}");

    // The oncall window opens: the confirm and the work that waited reach it.
    let oncall = front_end(
        home,
        "claude-code",
        &["--no-listen", "--consumer", "oncall"],
    )
    .await;
    assert_eq!(
        items(&oncall, 2, Duration::from_secs(10)).await,
        [
            item("auto", "infra", "rotate the certs"),
            item("confirm_request", "ask", "db-1"),
        ]
    );
    assert!(items(&pay, 1, Duration::from_millis(200)).await.is_empty());
    for client in [pay, infra, oncall] {
        client.cancel().await.unwrap();
    }
}

/// A tool call that the server refuses: its text.
async fn refused(client: &Client, name: &str, args: Value) -> String {
    let mut p = rmcp::model::CallToolRequestParams::new(name.to_string());
    p.arguments = args.as_object().cloned();
    let r = client.call_tool(p).await.expect("tool call answered");
    assert_eq!(r.is_error, Some(true), "{name} {args}: {r:?}");
    format!("{:?}", r.content)
}

/// Issue 46.4: `wait_for_inbound_message` with `consumer: "infra"` from the payments window
/// took infra's routed work, `send --to infra` included. A session is its consumer: every tool
/// refuses a `consumer` argument naming another, accepts its own, and shows none in its schema.
#[tokio::test(flavor = "multi_thread")]
async fn a_window_cannot_read_as_another_windows_consumer() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("triggers.json"), RULES).unwrap();
    let _guard = DaemonGuard(home.path().to_path_buf());
    let home = home.path();
    let pay = window(home, "payments-eu").await;
    let out = cli_in(
        home,
        &[
            "send",
            "--channel",
            "work/pay",
            "--to",
            "infra",
            "rotate the certs",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    send_messages(home, &[("work/infra", "disk full"), ("ask/db", "db-1")]);
    let pending = cli_in(home, &["pending", "--json"]);
    let asked: Value = serde_json::from_str(stdout(&pending).trim()).unwrap();
    let ask_id = asked[0]["id"].as_u64().expect("the confirm is pending");

    for (name, args) in [
        (
            "wait_for_inbound_message",
            json!({"timeout_s": 2, "consumer": "infra"}),
        ),
        ("inbox_pull", json!({"consumer": "infra"})),
        ("channel_ack", json!({"consumer": "infra"})),
        ("inbox_stats", json!({"consumer": "infra"})),
        (
            "channel_confirm",
            json!({"id": ask_id, "decision": "yes", "consumer": "oncall"}),
        ),
    ] {
        let text = refused(&pay, name, args).await;
        assert!(
            text.contains("reads only as its own consumer")
                && text.contains("payments-eu")
                && text.contains("--consumer"),
            "{name}: {text}"
        );
    }
    // Its own name is its own.
    let own = tool(&pay, "inbox_stats", json!({"consumer": "payments-eu"})).await;
    assert_eq!(own["consumer"]["name"], "payments-eu");
    let listed = pay.list_all_tools().await.unwrap();
    for t in &listed {
        let properties = t
            .input_schema
            .get("properties")
            .cloned()
            .unwrap_or_default();
        assert!(
            properties.get("consumer").is_none(),
            "{}: {properties}",
            t.name
        );
    }

    // Infra's window gets its work, none of it taken.
    let infra = window(home, "infra").await;
    assert_eq!(
        items(&infra, 2, Duration::from_secs(10)).await,
        [
            item("auto", "infra", "disk full"),
            item("auto", "pay", "rotate the certs"),
        ]
    );
    let stats = control(home, json!({"op": "stats"}))["result"]["delivery"].clone();
    assert_eq!(stats["queued_work"], 0, "{stats}");
    for client in [pay, infra] {
        client.cancel().await.unwrap();
    }
}
