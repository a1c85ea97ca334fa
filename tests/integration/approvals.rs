//! Approvals that come from a person: who answered (`via`) and each rule's `approveVia`, the
//! approval page (`/ui`), elicitation forms and Claude Code's permission relay.

use std::time::Duration;

use rmcp::ServiceExt;
use serde_json::{Value, json};

use super::util::*;

const ASK: &str = r#"{"rules": [
  {"name": "ask", "channel": "alerts/*", "mode": "confirm", "prompt": "Investigate: {{content}}",
   "tools": ["view"], "approveVia": ["cli", "web"]},
  {"name": "ask-any", "channel": "ci/*", "mode": "confirm", "prompt": "Fix: {{content}}",
   "tools": ["edit"]}
]}"#;

/// `channel_confirm` with `args`: (structured content, is_error).
async fn confirm_tool(client: &Client, args: Value) -> (Value, bool) {
    let mut params = rmcp::model::CallToolRequestParams::new("channel_confirm");
    params.arguments = args.as_object().cloned();
    let result = client.call_tool(params).await.expect("tool call answered");
    (
        result.structured_content.expect("structured"),
        result.is_error == Some(true),
    )
}

fn pending_ids(home: &std::path::Path) -> Vec<u64> {
    control(home, json!({"op": "pending"}))["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn approve_via_keeps_the_agent_from_approving_and_every_answer_records_its_path() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", ASK);
    sb.spawn();
    let client = rmcp::model::ClientConfig::default()
        .serve(http_transport(&sb))
        .await
        .expect("client connects");
    send_messages(
        sb.home.path(),
        &[("alerts/db", "db down"), ("ci/main", "build broke")],
    );
    eventually_async(Duration::from_secs(5), "two pending confirms", || {
        (pending_ids(sb.home.path()) == [1, 2]).then_some(())
    })
    .await;

    // The agent's own tool is not a path `ask` takes: refused, still pending.
    let (refused, is_error) = confirm_tool(&client, json!({"id": 1, "decision": "yes"})).await;
    assert!(is_error, "{refused}");
    assert_eq!(
        refused["error"],
        "confirm 1 cannot be answered via `tool`: rule `ask` takes answers only via cli, web; \
         ask a person to answer it there"
    );
    assert_eq!(pending_ids(sb.home.path()), [1, 2]);

    // A person at the terminal may; a rule without `approveVia` takes the tool.
    let out = sb.cli(&["confirm", "1", "yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (denied, is_error) = confirm_tool(&client, json!({"id": 2, "decision": "no"})).await;
    assert!(!is_error, "{denied}");

    let records = action_records(sb.home.path());
    let answer = |id: u64| {
        records
            .iter()
            .find(|r| r["id"] == id && r["via"].is_string())
            .cloned()
            .unwrap_or_else(|| panic!("no answer of {id} with `via`: {records:?}"))
    };
    assert_eq!(
        (answer(1)["state"].clone(), answer(1)["via"].clone()),
        (json!("approved"), json!("cli"))
    );
    assert_eq!(
        (answer(2)["state"].clone(), answer(2)["via"].clone()),
        (json!("denied"), json!("tool"))
    );

    let out = sb.cli(&["pending", "--closed"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("#1 [ask] approved via cli by cli at "),
        "{text}"
    );
    assert!(
        lines[1].starts_with("#2 [ask-any] denied via tool by "),
        "{text}"
    );
    assert_eq!(lines[2], "no pending confirms", "{text}");
    client.cancel().await.ok();
}
