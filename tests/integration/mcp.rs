//! The MCP server through rmcp's own client, over stdio (a child process) and streamable HTTP,
//! plus raw JSON-RPC regression tests of what real hosts send.

#![allow(deprecated)] // MCP logging (SEP-2577), which the server still sends

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, ClientConfig, CustomNotification, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};

use super::util::*;

/// What a client saw: `(method, params)` of each notification, in arrival order.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// A client that records its notifications.
#[derive(Clone)]
struct Recorder {
    name: String,
    seen: Seen,
}

impl Recorder {
    fn new(name: &str) -> Recorder {
        Recorder {
            name: name.into(),
            seen: Seen::default(),
        }
    }

    fn methods(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(m, _)| m.clone())
            .collect()
    }
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        pinned_client(&self.name, "1.0.0")
    }

    async fn on_custom_notification(
        &self,
        n: CustomNotification,
        _cx: NotificationContext<RoleClient>,
    ) {
        let params = n.params.clone().unwrap_or(Value::Null);
        self.seen.lock().unwrap().push((n.method.clone(), params));
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        p: LoggingMessageNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        let v = serde_json::to_value(&p).unwrap();
        self.seen
            .lock()
            .unwrap()
            .push(("notifications/message".into(), v));
    }

    async fn on_progress(
        &self,
        p: ProgressNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        let v = serde_json::to_value(&p).unwrap();
        self.seen
            .lock()
            .unwrap()
            .push(("notifications/progress".into(), v));
    }
}

type Client = RunningService<RoleClient, Recorder>;

/// A switchboard home plus a way to connect clients to it.
struct Harness {
    sb: Switchboard,
    http: bool,
}

impl Harness {
    /// HTTP: a running server; stdio: a home only (each client spawns its own server).
    fn new(http: bool, triggers: Option<&str>) -> Harness {
        let mut sb = Switchboard::new();
        if let Some(t) = triggers {
            sb.write("triggers.json", t);
        }
        if http {
            sb.spawn();
        }
        Harness { sb, http }
    }

    async fn connect(&self, name: &str) -> (Client, Recorder) {
        let recorder = Recorder::new(name);
        let client = if self.http {
            recorder
                .clone()
                .serve(http_transport(&self.sb))
                .await
                .expect("http client connects")
        } else {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.sb.home.path().join("test-server.log"))
                .unwrap();
            let mut cmd = tokio::process::Command::new(bin());
            cmd.arg("--home")
                .arg(self.sb.home.path())
                .args(["serve", "--no-listen"]);
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::from(log))
                .spawn()
                .expect("spawn stdio server");
            recorder
                .clone()
                .serve(transport)
                .await
                .expect("stdio client connects")
        };
        (client, recorder)
    }

    fn send(&self, channel: &str, content: &str) -> u64 {
        send_messages(self.sb.home.path(), &[(channel, content)])[0]
    }
}

async fn call(client: &Client, tool: &str, args: Value) -> (Value, bool) {
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = args.as_object().cloned();
    let result = client.call_tool(params).await.expect("tool call answered");
    let v = result
        .structured_content
        .clone()
        .expect("structured content");
    // The text content says the same as the structured content.
    let text = serde_json::to_value(&result.content[0]).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
    (v, result.is_error == Some(true))
}

async fn wait(client: &Client, timeout_s: f64) -> Value {
    call(
        client,
        "wait_for_inbound_message",
        json!({"timeout_s": timeout_s}),
    )
    .await
    .0
}

/// Items from repeated waits (with `args`) until `n` have come or 10 s passed: the actions of
/// messages sent back to back are queued one evaluation at a time, so one wait may return
/// before the last of them.
async fn wait_for(client: &Client, args: Value, n: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut items = Vec::new();
    while items.len() < n && Instant::now() < deadline {
        let (v, _) = call(client, "wait_for_inbound_message", args.clone()).await;
        items.extend(v["items"].as_array().unwrap().iter().cloned());
    }
    json!({ "items": items })
}

fn kinds(v: &Value) -> Vec<(String, String)> {
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["kind"].as_str().unwrap().to_string(),
                i["message"]["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn tools_are_listed_with_schemas(http: bool) {
    let h = Harness::new(http, None);
    let (client, _) = h.connect("copilot").await;
    let info = client.peer_info().expect("server info");
    let server = info.server_info.clone().expect("serverInfo");
    assert_eq!(server.name, "switchboard");
    assert_eq!(server.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
    assert!(
        info.instructions
            .as_deref()
            .unwrap()
            .contains("wait_for_inbound_message")
    );
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    for want in [
        "wait_for_inbound_message",
        "inbox_pull",
        "channel_list",
        "channel_ack",
        "channel_confirm",
        "channel_run",
        "channel_reply",
        "channel_pause",
        "channel_resume",
        "rules_list",
        "rules_reload",
        "inbox_stats",
    ] {
        assert!(
            names.contains(&want.to_string()),
            "missing {want}: {names:?}"
        );
    }
    for t in &tools {
        assert_eq!(t.input_schema["type"], "object", "{}", t.name);
        assert!(
            t.description
                .as_deref()
                .unwrap()
                .contains("wait_for_inbound_message"),
            "{}",
            t.name
        );
        assert!(t.annotations.is_some(), "{}", t.name);
        assert!(format!("switchboard-{}", t.name).len() <= 64);
    }
    let wait = tools
        .iter()
        .find(|t| t.name == "wait_for_inbound_message")
        .unwrap();
    assert_eq!(
        wait.input_schema["properties"]["timeout_s"]["type"],
        "number"
    );
    let confirm = tools.iter().find(|t| t.name == "channel_confirm").unwrap();
    assert_eq!(confirm.input_schema["required"], json!(["id", "decision"]));
    let list = tools.iter().find(|t| t.name == "channel_list").unwrap();
    assert_eq!(
        list.annotations.as_ref().unwrap().read_only_hint,
        Some(true)
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_tools_are_listed_with_schemas() {
    tools_are_listed_with_schemas(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn http_tools_are_listed_with_schemas() {
    tools_are_listed_with_schemas(true).await;
}

async fn wait_times_out_empty_and_wakes_on_commit(http: bool) -> Vec<Duration> {
    let h = Harness::new(http, None);
    let (client, recorder) = h.connect("copilot").await;
    let start = Instant::now();
    let v = wait(&client, 2.5).await;
    let waited = start.elapsed();
    assert!(v["items"].as_array().unwrap().is_empty());
    assert!(
        waited >= Duration::from_millis(2450),
        "returned early: {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(
        v["note"]
            .as_str()
            .unwrap()
            .contains("wait_for_inbound_message again"),
        "{v}"
    );
    assert!(
        recorder
            .methods()
            .iter()
            .any(|m| m == "notifications/progress"),
        "progress while waiting: {:?}",
        recorder.methods()
    );

    // A message committed while a wait is pending comes back within milliseconds.
    let client = Arc::new(client);
    let mut latencies = Vec::new();
    for i in 0..20 {
        let c = client.clone();
        let pending = tokio::spawn(async move { wait(&c, 10.0).await });
        let home = h.sb.home.path().to_path_buf();
        let stats = home.clone();
        eventually_async(Duration::from_secs(5), "the wait is in flight", || {
            let s = control(&stats, json!({"op": "stats"}));
            (s["result"]["wait_calls_in_flight"] == 1).then_some(())
        })
        .await;
        let sent = tokio::task::spawn_blocking(move || {
            let seq = send_messages(&home, &[("ci/main", &format!("build {i} failed"))])[0];
            (seq, Instant::now())
        })
        .await
        .unwrap();
        let v = pending.await.unwrap();
        latencies.push(sent.1.elapsed());
        let items = v["items"].as_array().unwrap();
        assert_eq!(items.len(), 1, "{v}");
        assert_eq!(items[0]["kind"], "nudge");
        assert_eq!(items[0]["message"]["seq"], sent.0);
        assert_eq!(items[0]["message"]["server"], "test");
        assert_eq!(items[0]["message"]["channel"], "ci/main");
        assert_eq!(v["cursor"], sent.0);
        assert_eq!(v["unread"], 0);
    }
    latencies.sort();
    let p50 = latencies[latencies.len() / 2];
    assert!(
        p50 < Duration::from_millis(250),
        "median wake-up {p50:?}: {latencies:?}"
    );
    latencies
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_wait_times_out_empty_and_wakes_on_commit() {
    let l = wait_times_out_empty_and_wakes_on_commit(false).await;
    eprintln!("stdio wake-up latencies (send acked → wait returned): {l:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn http_wait_times_out_empty_and_wakes_on_commit() {
    let l = wait_times_out_empty_and_wakes_on_commit(true).await;
    eprintln!("http wake-up latencies (send acked → wait returned): {l:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pending_wait_does_not_block_other_requests() {
    let h = Harness::new(true, None);
    let (client, _) = h.connect("copilot").await;
    let client = Arc::new(client);
    let c = client.clone();
    let pending = tokio::spawn(async move { wait(&c, 3.0).await });
    let home = h.sb.home.path().to_path_buf();
    eventually_async(Duration::from_secs(5), "the wait is in flight", || {
        let s = control(&home, json!({"op": "stats"}));
        (s["result"]["wait_calls_in_flight"] == 1).then_some(())
    })
    .await;
    let start = Instant::now();
    let (stats, _) = call(&client, "inbox_stats", json!({})).await;
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "stats answered during the wait"
    );
    assert_eq!(
        stats["consumer"]["name"], "copilot#1",
        "the session's own consumer: client name and session number"
    );
    assert!(!pending.is_finished());
    pending.await.unwrap();
}

async fn two_sessions_named_alike_each_get_every_nudge(http: bool) {
    // Over stdio each window starts its own server; one home serving several stdio windows
    // needs the daemon. Over HTTP, sessions share one server.
    let h = Harness::new(http, None);
    // Two windows of the same host: same clientInfo.name, two sessions, two consumers.
    let (alpha, _) = h.connect("copilot-cli").await;
    let (beta, _) = h.connect("copilot-cli").await;
    h.send("alerts/x", "one");
    h.send("alerts/x", "two");
    let a = wait_for(&alpha, json!({"timeout_s": 2}), 2).await;
    assert_eq!(
        kinds(&a),
        [
            ("nudge".into(), "one".into()),
            ("nudge".into(), "two".into())
        ]
    );
    assert!(
        wait(&alpha, 0.2).await["items"]
            .as_array()
            .unwrap()
            .is_empty(),
        "once per session"
    );
    let b = wait_for(&beta, json!({"timeout_s": 2}), 2).await;
    assert_eq!(kinds(&b).len(), 2, "beta still gets them: {b}");
    let (_, name_a) = consumer_of(&alpha).await;
    let (_, name_b) = consumer_of(&beta).await;
    assert!(name_a.starts_with("copilot-cli#") && name_b.starts_with("copilot-cli#"));
    assert_ne!(name_a, name_b);
    // No tool argument reads as another consumer (issue 46.4): a session is its consumer.
    let c = wait(&alpha, 0.2).await;
    assert!(c["items"].as_array().unwrap().is_empty());
    let (refusal, is_error) = call(
        &alpha,
        "wait_for_inbound_message",
        json!({"timeout_s": 0.2, "consumer": "gamma"}),
    )
    .await;
    assert!(is_error, "{refusal}");
    assert!(
        refusal["error"]
            .as_str()
            .unwrap()
            .contains("reads only as its own consumer"),
        "{refusal}"
    );
    h.send("alerts/x", "three");
    let c = wait_for(&alpha, json!({"timeout_s": 2, "consumer": name_a}), 1).await;
    assert_eq!(kinds(&c), [("nudge".into(), "three".into())]);
}

/// The consumer a client reads as, from `inbox_stats`: (stats, name).
async fn consumer_of(client: &Client) -> (Value, String) {
    let (stats, _) = call(client, "inbox_stats", json!({})).await;
    let name = stats["consumer"]["name"].as_str().unwrap().to_string();
    (stats, name)
}

#[tokio::test(flavor = "multi_thread")]
async fn http_two_sessions_named_alike_each_get_every_nudge() {
    two_sessions_named_alike_each_get_every_nudge(true).await;
}

const CONFIRM: &str = r#"{"rules": [
  {"name": "ask", "channel": "alerts/*", "mode": "confirm", "prompt": "Investigate: {{content}}",
   "tools": ["view"], "confirmTimeout": "TIMEOUT"},
  {"name": "auto-ci", "channel": "ci/*", "mode": "auto", "prompt": "Fix {{content}}", "tools": ["github__*"]}
]}"#;

async fn confirm_answers(http: bool) {
    let h = Harness::new(http, Some(&CONFIRM.replace("TIMEOUT", "30m")));
    let (client, _) = h.connect("copilot").await;
    h.send("alerts/critical", "db down");
    h.send("alerts/critical", "disk full");
    let v = wait_for(&client, json!({"timeout_s": 2}), 2).await;
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{v}");
    assert_eq!(items[0]["kind"], "confirm_request");
    assert!(items[0]["expires_at"].as_str().unwrap().ends_with('Z'));
    let (first, second) = (
        items[0]["action_id"].as_u64().unwrap(),
        items[1]["action_id"].as_u64().unwrap(),
    );

    // Leaving the decision out answers nothing: an error that says so (issue 27, defect 1).
    let (missing, err) = call(&client, "channel_confirm", json!({"id": first})).await;
    assert!(err, "{missing}");
    assert!(
        missing["error"]
            .as_str()
            .unwrap()
            .contains("`decision` is required"),
        "{missing}"
    );
    let pending = control(h.sb.home.path(), json!({"op": "pending"}));
    assert_eq!(
        pending["result"].as_array().map(Vec::len),
        Some(2),
        "still open: {pending}"
    );
    let (yes, err) = call(
        &client,
        "channel_confirm",
        json!({"id": first, "decision": "yes"}),
    )
    .await;
    assert!(!err);
    assert_eq!(yes["approved"], true);
    assert_eq!(yes["prompt"], "Investigate: db down");
    assert_eq!(yes["tools"], json!(["view"]));
    assert_eq!(yes["message"]["content"], "db down");
    let (no, err) = call(
        &client,
        "channel_confirm",
        json!({"id": second, "decision": "no"}),
    )
    .await;
    assert!(!err);
    assert_eq!(no["approved"], false);
    let (again, err) = call(
        &client,
        "channel_confirm",
        json!({"id": first, "decision": "no"}),
    )
    .await;
    assert!(err);
    assert!(
        again["error"]
            .as_str()
            .unwrap()
            .contains("already answered"),
        "{again}"
    );
    let (unknown, err) = call(
        &client,
        "channel_confirm",
        json!({"id": 999, "decision": "yes"}),
    )
    .await;
    assert!(err);
    assert!(
        unknown["error"]
            .as_str()
            .unwrap()
            .contains("no confirm request with id 999")
    );
    // An auto rule's prompt is work to run now.
    h.send("ci/main", "the build");
    let v = wait(&client, 2.0).await;
    assert_eq!(v["items"][0]["kind"], "auto", "{v}");
    assert_eq!(v["items"][0]["prompt"], "Fix the build");
    assert_eq!(v["items"][0]["tools"], json!(["github__*"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_confirm_yes_no_unknown() {
    confirm_answers(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn http_confirm_yes_no_unknown() {
    confirm_answers(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_confirm_is_refused() {
    let h = Harness::new(true, Some(&CONFIRM.replace("TIMEOUT", "1s")));
    let (client, _) = h.connect("copilot").await;
    h.send("alerts/critical", "db down");
    let v = wait(&client, 2.0).await;
    let id = v["items"][0]["action_id"].as_u64().unwrap();
    // The expiry timer, not a read, expires it.
    let home = h.sb.home.path().to_path_buf();
    eventually_async(
        Duration::from_secs(5),
        "the confirm expired by the timer",
        || {
            let s = control(&home, json!({"op": "stats"}));
            s["result"]["pending_confirms"]
                .as_array()
                .is_some_and(|p| p.is_empty())
                .then_some(())
        },
    )
    .await;
    let (r, err) = call(
        &client,
        "channel_confirm",
        json!({"id": id, "decision": "yes"}),
    )
    .await;
    assert!(err);
    assert!(r["error"].as_str().unwrap().contains("expired"), "{r}");
    assert_eq!(r["code"], "expired", "{r}");
    assert_eq!(r["action_id"], id, "{r}");
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_stops_actions_and_resume_restarts_them() {
    let h = Harness::new(true, None);
    let (client, _) = h.connect("copilot").await;
    let (p, _) = call(&client, "channel_pause", json!({})).await;
    assert_eq!(p["paused"], true);
    h.send("alerts/x", "while paused");
    assert!(
        wait(&client, 0.5).await["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let (list, _) = call(&client, "channel_list", json!({})).await;
    assert_eq!(
        list["messages"][0]["content"], "while paused",
        "messages keep landing"
    );
    call(&client, "channel_resume", json!({})).await;
    h.send("alerts/x", "after resume");
    assert_eq!(
        kinds(&wait(&client, 2.0).await),
        [("nudge".into(), "after resume".into())]
    );
    let (stats, _) = call(&client, "inbox_stats", json!({})).await;
    assert_eq!(stats["paused"], false);
}

#[tokio::test(flavor = "multi_thread")]
async fn rules_reload_reports_an_invalid_file() {
    let h = Harness::new(true, Some(r#"{"rules": [{"name": "a"}]}"#));
    let (client, _) = h.connect("copilot").await;
    h.sb.write(
        "triggers.json",
        "{\"rules\": [{\"name\": \"a\", \"mode\": \"auto\"}]}",
    );
    let (r, err) = call(&client, "rules_reload", json!({})).await;
    assert!(err, "an invalid file is an error result");
    assert_eq!(r["ok"], false);
    assert_eq!(r["source"], "kept");
    let codes: Vec<_> = r["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["auto_requires_tools", "prompt_required"],
        "chatcli's order"
    );
    assert_eq!(r["errors"][0]["line"], 1);
    let (rules, _) = call(&client, "rules_list", json!({})).await;
    assert_eq!(rules["rules"][0]["name"], "a");
    assert_eq!(rules["rules"][0]["mode"], "notify", "old rules live");
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_list_ack_and_run() {
    let h = Harness::new(true, None);
    let (client, _) = h.connect("copilot").await;
    for (c, t) in [("alerts/a", "1"), ("ci/main", "2"), ("alerts/b/c", "3")] {
        h.send(c, t);
    }
    let (pull, _) = call(
        &client,
        "inbox_pull",
        json!({"channel": "alerts/*", "mark_read": false}),
    )
    .await;
    let contents: Vec<_> = pull["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["1", "3"]);
    assert_eq!(pull["unread"], 3);
    let (pull, _) = call(&client, "inbox_pull", json!({"limit": 2})).await;
    assert_eq!(pull["messages"].as_array().unwrap().len(), 2);
    assert_eq!(pull["unread"], 1);
    let (ack, _) = call(&client, "channel_ack", json!({})).await;
    assert_eq!(ack["unread"], 0);
    let (run, _) = call(&client, "channel_run", json!({"seq": 2})).await;
    assert_eq!(run["prompt"], "Investigate this test/ci/main event:\n\n2");
    let (gone, err) = call(&client, "channel_run", json!({"seq": 99})).await;
    assert!(
        err && gone["error"]
            .as_str()
            .unwrap()
            .contains("no message with seq 99")
    );
}

async fn claude_channel_push_only_for_claude(http: bool) {
    // One stdio server per home: over stdio the other client gets a home of its own.
    let h = Harness::new(http, None);
    let other = if http {
        None
    } else {
        Some(Harness::new(false, None))
    };
    let (claude, claude_seen) = h.connect("claude-code").await;
    let (copilot, copilot_seen) = other
        .as_ref()
        .unwrap_or(&h)
        .connect("github-copilot-cli")
        .await;
    if let Some(o) = &other {
        o.send("alerts/critical", "db down");
    }
    h.send("alerts/critical", "db down");
    let params = eventually_async(
        Duration::from_secs(5),
        "claude-code got the channel push",
        || {
            claude_seen
                .seen
                .lock()
                .unwrap()
                .iter()
                .find(|(m, _)| m == "notifications/claude/channel")
                .map(|(_, p)| p.clone())
        },
    )
    .await;
    assert_eq!(
        params["content"],
        "Investigate this test/alerts/critical event:\n\ndb down"
    );
    let meta = params["meta"].as_object().unwrap();
    for (k, v) in meta {
        assert!(v.is_string(), "meta {k} is a string");
        assert!(
            k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "identifier key {k}"
        );
    }
    assert_eq!(meta["channel"], "alerts/critical");
    assert_eq!(meta["mode"], "notify");
    assert_eq!(meta["seq"], "1");
    // Both get notifications/message; only Claude gets the channel push.
    eventually_async(
        Duration::from_secs(5),
        "copilot-cli got notifications/message",
        || {
            copilot_seen
                .methods()
                .iter()
                .any(|m| m == "notifications/message")
                .then_some(())
        },
    )
    .await;
    assert!(
        !copilot_seen
            .methods()
            .iter()
            .any(|m| m == "notifications/claude/channel")
    );
    let logged = copilot_seen
        .seen
        .lock()
        .unwrap()
        .iter()
        .find(|(m, _)| m == "notifications/message")
        .unwrap()
        .1
        .clone();
    assert_eq!(logged["logger"], "switchboard.inbox");
    // The wait path still has the item for both.
    assert_eq!(kinds(&wait(&claude, 1.0).await).len(), 1);
    assert_eq!(kinds(&wait(&copilot, 1.0).await).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_claude_code_gets_the_channel_push_others_do_not() {
    claude_channel_push_only_for_claude(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn http_claude_code_gets_the_channel_push_others_do_not() {
    claude_channel_push_only_for_claude(true).await;
}

/// Asks the server for nothing below `level` (`logging/setLevel`).
async fn set_level(client: &Client, level: rmcp::model::LoggingLevel) {
    let params = rmcp::model::SetLevelRequestParams::new(level);
    client
        .peer()
        .set_level(params)
        .await
        .expect("logging/setLevel");
}

/// A client that asked (`logging/setLevel`) for nothing below warning gets no
/// `notifications/message` per item, and gets them again at info; one that did not ask gets
/// them all; the channel push and the wait are the same for both.
async fn set_level_warning_leaves_out_the_item_log(http: bool) {
    use rmcp::model::LoggingLevel;
    let h = Harness::new(http, None);
    let other = (!http).then(|| Harness::new(false, None));
    // Named as Claude Code: the channel push, which every level gets, shows its items arrive.
    let (quiet, quiet_seen) = h.connect("claude-code").await;
    let (loud, loud_seen) = other.as_ref().unwrap_or(&h).connect("claude-code").await;
    set_level(&quiet, LoggingLevel::Warning).await;
    for home in [Some(&h), other.as_ref()].into_iter().flatten() {
        home.send("alerts/critical", "db down");
        home.send("alerts/critical", "db still down");
    }
    let count = |seen: &Recorder, method: &str| {
        let methods = seen.methods();
        methods.iter().filter(|m| *m == method).count()
    };
    for (seen, who) in [(&quiet_seen, "quiet"), (&loud_seen, "loud")] {
        eventually_async(
            Duration::from_secs(5),
            &format!("{who}: two channel pushes"),
            || (count(seen, "notifications/claude/channel") == 2).then_some(()),
        )
        .await;
    }
    eventually_async(Duration::from_secs(5), "loud: two log lines", || {
        (count(&loud_seen, "notifications/message") == 2).then_some(())
    })
    .await;
    // Back at info, a third item's log line comes after where the first two's would have
    // (one push task per session, in order): once it is in, none of theirs is.
    set_level(&quiet, LoggingLevel::Info).await;
    for home in [Some(&h), other.as_ref()].into_iter().flatten() {
        home.send("alerts/critical", "db back up");
    }
    let logged = || {
        let seen = quiet_seen.seen.lock().unwrap();
        let lines = seen.iter().filter(|(m, _)| m == "notifications/message");
        lines
            .map(|(_, p)| p["data"]["prompt"].to_string())
            .collect::<Vec<_>>()
    };
    eventually_async(
        Duration::from_secs(5),
        "quiet: the third item's log line",
        || {
            logged()
                .iter()
                .any(|p| p.contains("db back up"))
                .then_some(())
        },
    )
    .await;
    assert_eq!(logged().len(), 1, "{:?}", logged());
    assert_eq!(
        kinds(&wait_for(&quiet, json!({"timeout_s": 2}), 3).await).len(),
        3
    );
    assert_eq!(
        kinds(&wait_for(&loud, json!({"timeout_s": 2}), 3).await).len(),
        3
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_set_level_warning_leaves_out_the_item_log() {
    set_level_warning_leaves_out_the_item_log(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn http_set_level_warning_leaves_out_the_item_log() {
    set_level_warning_leaves_out_the_item_log(true).await;
}

/// `switchboard serve` on `home` with stdin and stdout piped, for raw JSON-RPC.
fn raw_stdio_server(home: &std::path::Path) -> std::process::Child {
    std::process::Command::new(bin())
        .arg("--home")
        .arg(home)
        .args(["serve", "--no-listen"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn switchboard serve")
}

/// Regression: hosts probe `server/discover` first (Claude Code with this id and its
/// `clientInfo`, Copilot CLI with id 0 and no params). Answering it would move them to the
/// lifecycle without push (a client of 2026-07-28 gets an answer: `mcp_era`).
#[test]
fn server_discover_gets_32601_and_initialize_still_works() {
    let home = tempfile::tempdir().unwrap();
    let mut child = raw_stdio_server(home.path());
    let stdin = std::cell::RefCell::new(child.stdin.take().unwrap());
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut exchange = |request: Value| -> Value {
        writeln!(stdin.borrow_mut(), "{request}").unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON on stdout {line:?}: {e}"))
    };
    let claude = exchange(
        json!({"jsonrpc": "2.0", "id": "server-discover-probe-1", "method": "server/discover",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities": {},
                             "io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "2.1.330"}}}}),
    );
    assert_eq!(claude["id"], "server-discover-probe-1");
    assert_eq!(claude["error"]["code"], -32601);
    let copilot = exchange(json!({"jsonrpc": "2.0", "id": 0, "method": "server/discover"}));
    assert_eq!(copilot["id"], 0);
    assert_eq!(copilot["error"]["code"], -32601);
    let init = exchange(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "claude-code", "version": "2.1.330"}}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(init["result"]["serverInfo"]["name"], "switchboard");
    assert_eq!(
        init["result"]["capabilities"]["experimental"]["claude/channel"],
        json!({})
    );
    writeln!(
        stdin.borrow_mut(),
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    // Claude also asks for prompts and resources: answered, never an error.
    let prompts = exchange(json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/list"}));
    assert_eq!(prompts["result"]["prompts"], json!([]));
    let resources = exchange(json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}));
    assert_eq!(
        resources["result"]["resources"][0]["uri"],
        "switchboard://inbox"
    );
    drop(stdin.into_inner());
    let status = wait_exit(&mut child, Duration::from_secs(5));
    assert!(status.success(), "exits cleanly on EOF: {status}");
}

/// Regression: the push subscribed only when `notifications/initialized` was handled, so an
/// item that came between the initialize result and that notification was never pushed. The
/// Python SDK returns from connect before its `initialized` is handled (over HTTP it is a POST of
/// its own), so a message sent right after connecting lost its push now and then.
#[test]
fn an_item_between_initialize_and_initialized_is_still_pushed() {
    let home = tempfile::tempdir().unwrap();
    let mut child = raw_stdio_server(home.path());
    let mut stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, lines) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                break;
            }
        }
    });
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "claude-code", "version": "2.1.330"}}})
    )
    .unwrap();
    let init = lines.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(init["id"], 1, "{init}");
    // The message is committed and its nudge offered before the client says `initialized`.
    send_messages(home.path(), &[("alerts/critical", "db down")]);
    eventually(Duration::from_secs(5), "the nudge is offered", || {
        (!action_records(home.path()).is_empty()).then_some(())
    });
    std::thread::sleep(Duration::from_millis(200));
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let push = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(m) if m["method"] == "notifications/claude/channel" => break m,
            Ok(_) => continue,
            Err(_) => {
                panic!("no notifications/claude/channel for a message sent before initialized")
            }
        }
    };
    assert_eq!(push["params"]["meta"]["seq"], "1");
    drop(stdin);
    let status = wait_exit(&mut child, Duration::from_secs(5));
    assert!(status.success(), "{status}");
}

#[test]
fn http_server_discover_gets_32601() {
    let sb = Switchboard::start();
    let url = sb.mcp_url.clone().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let body: Value = rt.block_on(async {
        reqwest::Client::new()
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .bearer_auth(sb.token())
            .json(&json!({"jsonrpc": "2.0", "id": "server-discover-probe-1", "method": "server/discover"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    assert_eq!(body["error"]["code"], -32601);
    assert_eq!(body["id"], "server-discover-probe-1");
}

/// Claude Code stops its server with SIGINT: the front end exits at once and cleanly, its
/// session closes in the daemon, and the daemon keeps running for the other windows.
#[tokio::test(flavor = "multi_thread")]
async fn sigint_stops_a_stdio_front_end_cleanly() {
    let h = Harness::new(false, None);
    let (client, _) = h.connect("claude-code").await;
    h.send("a", "x");
    let home = h.sb.home.path();
    let front = processes_of(home, "serve");
    assert_eq!(front.len(), 1, "{front:?}");
    let daemon = daemon_pid(home).expect("the front end started a daemon");
    unsafe { libc::kill(front[0] as i32, libc::SIGINT) };
    let quit = tokio::time::timeout(Duration::from_secs(5), client.waiting()).await;
    assert!(quit.is_ok(), "the session ends promptly after SIGINT");
    eventually(Duration::from_secs(5), "the front end to exit", || {
        (!alive(front[0])).then_some(())
    });
    let status: Value = serde_json::from_str(&stdout(&h.sb.cli(&["status", "--json"]))).unwrap();
    assert_eq!(status["pid"].as_u64(), Some(u64::from(daemon)));
    eventually(Duration::from_secs(5), "the session to close", || {
        let status: Value =
            serde_json::from_str(&stdout(&h.sb.cli(&["status", "--json"]))).unwrap();
        (status["stats"]["delivery"]["sessions"] == 0).then_some(())
    });
}

/// Issue 27: an auto item was pushed to every Claude Code window though only one can take it.
/// Work is pushed to one session; a nudge still goes to all.
#[tokio::test(flavor = "multi_thread")]
async fn work_is_pushed_to_one_window_and_nudges_to_all() {
    let h = Harness::new(
        true,
        Some(
            r#"{"rules": [
  {"name": "fix", "channel": "ci/*", "mode": "auto", "prompt": "fix {{content}}", "tools": ["shell"]},
  {"name": "look", "channel": "alerts/*", "mode": "notify"}
]}"#,
        ),
    );
    let (a, a_seen) = h.connect("claude-code").await;
    let (b, b_seen) = h.connect("claude-code").await;
    let pushed = |seen: &Recorder, mode: &str| -> usize {
        seen.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, p)| m == "notifications/claude/channel" && p["meta"]["mode"] == mode)
            .count()
    };
    h.send("alerts/disk", "disk 91%");
    eventually_async(
        Duration::from_secs(10),
        "both windows get the nudge",
        || (pushed(&a_seen, "notify") == 1 && pushed(&b_seen, "notify") == 1).then_some(()),
    )
    .await;
    h.send("ci/main", "build 7 failed");
    eventually_async(Duration::from_secs(10), "one window gets the work", || {
        (pushed(&a_seen, "auto") + pushed(&b_seen, "auto") == 1).then_some(())
    })
    .await;
    // Every notification sent after the work's has arrived in both windows by the time a
    // later nudge has: the other window got no late push of the work.
    h.send("alerts/cpu", "cpu 99%");
    eventually_async(
        Duration::from_secs(10),
        "both windows get the second nudge",
        || (pushed(&a_seen, "notify") == 2 && pushed(&b_seen, "notify") == 2).then_some(()),
    )
    .await;
    assert_eq!(pushed(&a_seen, "auto") + pushed(&b_seen, "auto"), 1);
    // The work itself is still taken by one wait.
    let taken = kinds(&wait(&a, 1.0).await)
        .into_iter()
        .chain(kinds(&wait(&b, 1.0).await))
        .filter(|(kind, _)| kind == "auto")
        .count();
    assert_eq!(taken, 1);
}
