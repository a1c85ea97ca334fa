//! Both MCP eras (docs/mcp.md#protocol): a client of 2026-07-28 on stdio and on `/mcp`
//! without a session, Claude Code kept on 2025-11-25, and confirms put as `input_required`
//! results with a signed `requestState`, in raw JSON-RPC as the spec writes it.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use super::util::*;

/// The `_meta` a 2026-07-28 client sends on every request.
fn meta(client: &str, capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1.0.0"},
    })
}

/// A request of the 2026-07-28 era: `params` with its `_meta`.
fn request(id: u64, method: &str, mut params: Value, meta: &Value) -> Value {
    params["_meta"] = meta.clone();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

#[test]
fn a_stdio_client_of_2026_07_28_gets_it_and_claude_code_is_kept_on_2025_11_25() {
    let home = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(bin())
        .arg("--home")
        .arg(home.path())
        .args(["serve", "--no-listen"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn switchboard serve");
    let stdin = std::cell::RefCell::new(child.stdin.take().unwrap());
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut exchange = |request: Value| -> Value {
        writeln!(stdin.borrow_mut(), "{request}").unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON on stdout {line:?}: {e}"))
    };
    // Claude Code's probe carries its clientInfo: refused, so it falls back to initialize.
    let claude = meta("claude-code", json!({}));
    let refused = exchange(request(1, "server/discover", json!({}), &claude));
    assert_eq!(refused["error"]["code"], -32601, "{refused}");
    // A client of 2026-07-28 is answered.
    let new = meta("sdk-v2", json!({}));
    let discover = exchange(request(2, "server/discover", json!({}), &new));
    let versions = &discover["result"]["supportedVersions"];
    assert!(
        versions.as_array().unwrap().contains(&json!("2026-07-28")),
        "{discover}"
    );
    assert!(
        versions.as_array().unwrap().contains(&json!("2025-11-25")),
        "{discover}"
    );
    assert_eq!(discover["result"]["resultType"], "complete", "{discover}");
    assert!(
        discover["result"]["capabilities"]["tools"].is_object(),
        "{discover}"
    );
    // Then requests inline, without `initialize`, with results of that era.
    let tools = exchange(request(3, "tools/list", json!({}), &new));
    assert_eq!(tools["result"]["resultType"], "complete", "{tools}");
    assert!(tools["result"]["ttlMs"].is_number(), "{tools}");
    assert!(
        tools["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "wait_for_inbound_message"),
        "{tools}"
    );
    let wait = exchange(request(
        4,
        "tools/call",
        json!({"name": "wait_for_inbound_message", "arguments": {"timeout_s": 0}}),
        &new,
    ));
    assert_eq!(
        wait["result"]["structuredContent"]["items"],
        json!([]),
        "{wait}"
    );
    // A version switchboard does not speak: the supported ones in the error.
    let mut future = new.clone();
    future["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let unsupported = exchange(request(5, "tools/list", json!({}), &future));
    assert_eq!(unsupported["error"]["code"], -32022, "{unsupported}");
    assert!(
        unsupported["error"]["data"]["supported"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28")),
        "{unsupported}"
    );
    drop(stdin.into_inner());
    let status = wait_exit(&mut child, Duration::from_secs(5));
    assert!(status.success(), "exits cleanly on EOF: {status}");
}

const CONFIRM: &str = r#"{"rules": [
  {"name": "deploy", "channel": "deploy/*", "mode": "confirm", "prompt": "Deploy {{content}}", "tools": ["view"], "approveVia": ["elicitation", "cli"]},
  {"name": "nudge", "channel": "alerts/*"}
]}"#;

/// A POST of JSON-RPC request `body` to `/mcp` without a session, with the headers of
/// 2026-07-28.
fn post_of(client: &reqwest::Client, sb: &Switchboard, body: &Value) -> reqwest::RequestBuilder {
    let method = body["method"].as_str().unwrap_or_default().to_string();
    let mut builder = client
        .post(sb.mcp_url.as_deref().unwrap())
        .bearer_auth(sb.token())
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = body["params"]["name"].as_str() {
        builder = builder.header("mcp-name", name);
    }
    builder.json(body)
}

/// POSTs a JSON-RPC request to `/mcp` without a session; the response's HTTP status and
/// JSON-RPC message.
async fn post(sb: &Switchboard, body: &Value) -> (u16, Value) {
    let response = post_of(&reqwest::Client::new(), sb, body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, last_message(&text))
}

/// The last JSON-RPC message of a response body (plain JSON or SSE).
fn last_message(text: &str) -> Value {
    if let Ok(v) = serde_json::from_str(text) {
        return v;
    }
    text.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC response in {text:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn http_without_a_session_a_confirm_is_an_input_required_result_with_a_signed_state() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", CONFIRM);
    sb.spawn();
    let forms = meta("mrtr-client", json!({"elicitation": {"form": {}}}));
    // GET and DELETE have no place without sessions.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = reqwest::Client::new()
            .request(method.clone(), sb.mcp_url.as_deref().unwrap())
            .bearer_auth(sb.token())
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 405, "{method}");
    }
    // A wait before the confirm exists, so the consumer (the client's name) has its cursor.
    let wait = |id: u64| {
        request(
            id,
            "tools/call",
            json!({"name": "wait_for_inbound_message", "arguments": {"timeout_s": 10}}),
            &forms,
        )
    };
    let (_, first) = post(
        &sb,
        &request(
            1,
            "tools/call",
            json!({"name": "wait_for_inbound_message", "arguments": {"timeout_s": 0}}),
            &forms,
        ),
    )
    .await;
    assert_eq!(
        first["result"]["structuredContent"]["items"],
        json!([]),
        "{first}"
    );
    send_messages(sb.home.path(), &[("deploy/prod", "v2.4.1")]);
    let (status, asked) = post(&sb, &wait(2)).await;
    assert_eq!(status, 200, "{asked}");
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    let (key, form) = result["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    assert!(key.starts_with("confirm-"), "{key}");
    assert_eq!(form["method"], "elicitation/create", "{form}");
    assert!(
        form["params"]["message"]
            .as_str()
            .unwrap()
            .contains("v2.4.1"),
        "{form}"
    );
    let state = result["requestState"].as_str().unwrap().to_string();
    let retry = |id: u64, state: &str| {
        request(
            id,
            "tools/call",
            json!({"name": "wait_for_inbound_message", "arguments": {"timeout_s": 10},
                   "requestState": state,
                   "inputResponses": {key.clone(): {"action": "accept", "content": {"decision": "approve"}}}}),
            &forms,
        )
    };
    // Tampered: refused, and nothing is answered.
    let mut tampered = state.clone().into_bytes();
    let at = tampered.len() - 5;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let (_, refused) = post(&sb, &retry(3, std::str::from_utf8(&tampered).unwrap())).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        action_records(sb.home.path())
            .iter()
            .all(|r| r["state"] != "approved"),
        "a tampered state answered nothing"
    );
    // Another consumer's: refused too (the state is bound to the consumer).
    let other = meta("someone-else", json!({"elicitation": {"form": {}}}));
    let mut foreign = retry(4, &state);
    foreign["params"]["_meta"] = other;
    let (_, refused) = post(&sb, &foreign).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    // The real one: approved, and the wait's result comes back saying so.
    let (_, answered) = post(&sb, &retry(5, &state)).await;
    let note = answered["result"]["structuredContent"]["note"]
        .as_str()
        .unwrap_or_default();
    assert!(note.contains("approved in the form"), "{answered}");
    // Replayed: refused.
    let (_, replayed) = post(&sb, &retry(6, &state)).await;
    assert_eq!(replayed["error"]["code"], -32602, "{replayed}");
    assert!(
        replayed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("answered already"),
        "{replayed}"
    );
    // The approved work comes with the next wait, answered `via: elicitation`.
    let (_, work) = post(&sb, &wait(7)).await;
    let items = &work["result"]["structuredContent"]["items"];
    assert_eq!(items[0]["kind"], "approved", "{work}");
    assert!(
        items[0]["prompt"]
            .as_str()
            .unwrap()
            .contains("Deploy v2.4.1"),
        "{work}"
    );
    let records = action_records(sb.home.path());
    assert!(
        records
            .iter()
            .any(|r| r["state"] == "approved" && r["via"] == "elicitation"),
        "{records:?}"
    );
    // Sent on its POST: delivered to the client's consumer.
    eventually(Duration::from_secs(5), "the work is delivered", || {
        action_records(sb.home.path())
            .iter()
            .any(|r| r["state"] == "delivered" && r["consumer"] == "mrtr-client")
            .then_some(())
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn http_without_a_session_a_dropped_wait_gives_its_work_to_the_next() {
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "triage", "channel": "work/*", "mode": "auto", "prompt": "Triage {{content}}", "tools": ["view"]}]}"#,
    );
    sb.spawn();
    let m = meta("dropper", json!({}));
    let wait = request(
        1,
        "tools/call",
        json!({"name": "wait_for_inbound_message", "arguments": {"timeout_s": 30}}),
        &m,
    );
    // A wait in flight whose client goes away before anything comes.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let dropped = post_of(&client, &sb, &wait)
        .send()
        .await
        .map(|r| r.status());
    if let Ok(status) = &dropped {
        // The stream opened; reading its body times out and drops it.
        assert_eq!(status.as_u16(), 200);
    }
    drop(client);
    // The daemon has seen the wait go before the work comes.
    eventually(
        Duration::from_secs(10),
        "the dropped wait has ended",
        || (metric(&sb, "switchboard_wait_calls_in_flight") == Some(0.0)).then_some(()),
    );
    send_messages(sb.home.path(), &[("work/a", "job-1")]);
    let (_, got) = post(&sb, &wait).await;
    let items = &got["result"]["structuredContent"]["items"];
    assert_eq!(items[0]["kind"], "auto", "{got}\n{}", sb.log());
    assert!(
        items[0]["prompt"].as_str().unwrap().contains("job-1"),
        "{got}"
    );
    eventually(Duration::from_secs(5), "delivered once sent", || {
        action_records(sb.home.path())
            .iter()
            .any(|r| r["state"] == "delivered")
            .then_some(())
    });
}
