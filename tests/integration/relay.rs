//! Claude Code's permission relay (`mcp.permissionRelay`), against a stand-in host: an rmcp
//! client that declares itself as Claude Code, sends
//! `notifications/claude/channel/permission_request` and records the
//! `notifications/claude/channel/permission` verdicts it gets back. Over stdio (a `serve`
//! front end, as Claude Code starts switchboard) and over streamable HTTP (the daemon's own
//! sessions).

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ClientConfig, ClientNotification, CustomNotification};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};

use super::util::*;

const VERDICT: &str = "notifications/claude/channel/permission";

/// A stand-in for Claude Code: records the verdicts it is sent, and the channel pushes.
#[derive(Clone, Default)]
struct Host {
    verdicts: Arc<Mutex<Vec<Value>>>,
    pushes: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for Host {
    fn get_info(&self) -> ClientConfig {
        pinned_client("claude-code", "2.1.81")
    }

    async fn on_custom_notification(
        &self,
        n: CustomNotification,
        _cx: NotificationContext<RoleClient>,
    ) {
        let params = n.params.unwrap_or(Value::Null);
        match n.method.as_str() {
            VERDICT => self.verdicts.lock().unwrap().push(params),
            "notifications/claude/channel" => self.pushes.lock().unwrap().push(params),
            _ => {}
        }
    }
}

type HostClient = RunningService<RoleClient, Host>;

/// A home whose `switchboard.json` sets `mcp.permissionRelay` to `on`.
fn home(on: bool) -> Switchboard {
    let sb = Switchboard::new();
    sb.write(
        "switchboard.json",
        &json!({"mcp": {"permissionRelay": on}}).to_string(),
    );
    sb
}

/// The stand-in host on a `serve` front end over stdio, started by this process (as Claude
/// Code starts it: this process is the host, and the hooks it runs are its children too).
async fn stdio_host(sb: &Switchboard) -> (HostClient, Host) {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("--home")
        .arg(sb.home.path())
        .args(["serve", "--no-listen"]);
    host_on(sb, cmd).await
}

/// The stand-in host on a `serve` front end over stdio that another process started: a shell
/// that stays its parent, as another host window would be.
async fn stdio_host_elsewhere(sb: &Switchboard) -> (HostClient, Host) {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(r#""$0" --home "$1" serve --no-listen; exit $?"#)
        .arg(bin())
        .arg(sb.home.path());
    host_on(sb, cmd).await
}

async fn host_on(sb: &Switchboard, mut cmd: tokio::process::Command) -> (HostClient, Host) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(sb.home.path().join("test-server.log"))
        .unwrap();
    cmd.env("RUST_LOG", "switchboard=debug,info");
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn stdio server");
    let host = Host::default();
    let client = host.clone().serve(transport).await.expect("host connects");
    (client, host)
}

/// A daemon with the relay on, and the stand-in host on one of its HTTP sessions.
async fn http_host() -> (Switchboard, HostClient, Host) {
    let mut sb = home(true);
    sb.spawn();
    let host = Host::default();
    let client = host
        .clone()
        .serve(http_transport(&sb))
        .await
        .expect("host connects over HTTP");
    (sb, client, host)
}

/// Whether the server declared the permission capability.
fn declares_permission(client: &HostClient) -> bool {
    let info = client.peer_info().expect("initialized");
    let experimental = info.capabilities.experimental.clone().unwrap_or_default();
    assert!(experimental.contains_key("claude/channel"));
    experimental.contains_key("claude/channel/permission")
}

async fn ask(client: &HostClient, request_id: &str, tool: &str) {
    ask_with(client, request_id, tool, "{\"command\":\"rm -rf build\"}").await;
}

async fn ask_with(client: &HostClient, request_id: &str, tool: &str, input_preview: &str) {
    let params = json!({
        "request_id": request_id,
        "tool_name": tool,
        "description": format!("Run {tool} in the repository"),
        "input_preview": input_preview,
    });
    client
        .send_notification(ClientNotification::CustomNotification(
            CustomNotification::new(
                "notifications/claude/channel/permission_request",
                Some(params),
            ),
        ))
        .await
        .expect("notification sent");
}

/// `switchboard pending --json`, as a user runs it.
fn pending(sb: &Switchboard) -> Vec<Value> {
    let out = sb.cli(&["pending", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str::<Value>(&stdout(&out))
        .unwrap_or_else(|e| panic!("pending --json: {e}: {}", stdout(&out)))
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The pending permission request for `request_id`, once it shows.
async fn pending_request(sb: &Switchboard, request_id: &str) -> Value {
    eventually_async(Duration::from_secs(10), "the request in pending", || {
        pending(sb)
            .into_iter()
            .find(|p| p.to_string().contains(request_id))
    })
    .await
}

async fn verdict_for(host: &Host, request_id: &str) -> Value {
    eventually_async(Duration::from_secs(10), "the verdict", || {
        host.verdicts
            .lock()
            .unwrap()
            .iter()
            .find(|v| v["request_id"] == request_id)
            .cloned()
    })
    .await
}

fn id_of(p: &Value) -> u64 {
    p["id"]
        .as_u64()
        .or_else(|| p["action_id"].as_u64())
        .unwrap_or_else(|| panic!("no id in {p}"))
}

/// What the relay shows and sends, on one host connected as `client`.
async fn relay_end_to_end(sb: &Switchboard, client: &HostClient, host: &Host) {
    assert!(declares_permission(client));

    // A request shows in `pending`, from this session, for people.
    ask(client, "abcde", "Bash").await;
    let p = pending_request(sb, "abcde").await;
    let text = p.to_string();
    assert!(text.contains("permission:Bash"), "{p}");
    assert!(text.contains("rm -rf build"), "{p}");
    assert!(
        text.contains("claude-code#"),
        "the session it came from: {p}"
    );
    let id = id_of(&p);

    // The agent's own `channel_confirm` is refused, and the request stays pending.
    let mut params = rmcp::model::CallToolRequestParams::new("channel_confirm");
    params.arguments = json!({"id": id, "decision": "yes"}).as_object().cloned();
    let result = client.call_tool(params).await.expect("tool answered");
    assert_eq!(result.is_error, Some(true));
    let refusal = serde_json::to_string(&result).unwrap();
    assert!(refusal.contains("an agent may not answer it"), "{refusal}");
    assert!(pending(sb).iter().any(|p| id_of(p) == id));
    assert!(host.verdicts.lock().unwrap().is_empty());

    // `switchboard confirm ID yes` allows it: the host hears `allow` for the same request_id.
    let out = sb.cli(&["confirm", &id.to_string(), "yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("allowed"), "{}", stdout(&out));
    assert_eq!(
        verdict_for(host, "abcde").await,
        json!({"request_id": "abcde", "behavior": "allow"})
    );
    assert!(!pending(sb).iter().any(|p| id_of(p) == id));
    // Sent before the verdict, had it been: the agent's channel was not told of the prompt.
    let pushes = host.pushes.lock().unwrap().clone();
    assert!(
        !pushes.iter().any(|p| p.to_string().contains("permission:")),
        "{pushes:?}"
    );

    // A second request, denied.
    ask(client, "fghij", "Write").await;
    let id = id_of(&pending_request(sb, "fghij").await);
    let out = sb.cli(&["confirm", &id.to_string(), "no"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        verdict_for(host, "fghij").await,
        json!({"request_id": "fghij", "behavior": "deny"})
    );

    // Both answers are in actions.jsonl with the path they came by.
    let records = action_records(sb.home.path());
    for state in ["approved", "denied"] {
        assert!(
            records
                .iter()
                .any(|r| r["state"] == state && r["via"] == "cli"),
            "{state} via cli in {records:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_requests_are_confirms_answered_back_to_the_host() {
    let sb = home(true);
    let (client, host) = stdio_host(&sb).await;
    relay_end_to_end(&sb, &client, &host).await;

    // A request left open ends with its session: shown as ended, no longer answerable.
    let mut watch = Watch::start(sb.home.path());
    ask(&client, "kmnop", "Edit").await;
    let id = id_of(&pending_request(&sb, "kmnop").await);
    let asked = watch.line_with(&format!("confirm? #{id} "));
    assert!(asked.contains("[permission:Edit] seq 0"), "{asked}");
    client.cancel().await.expect("host closes");
    let ended = watch.line_with(&format!("closed #{id} "));
    assert!(
        ended.ends_with(&format!(
            "closed #{id} [permission:Edit]: ended with the session that asked"
        )),
        "{ended}"
    );
    eventually_async(Duration::from_secs(10), "the request ended", || {
        (!pending(&sb).iter().any(|p| id_of(p) == id)).then_some(())
    })
    .await;
    let closed = sb.cli(&["pending", "--closed"]);
    let closed = stdout(&closed);
    assert!(
        closed.contains("ended with the session that asked before anyone answered"),
        "{closed}"
    );
    let late = sb.cli(&["confirm", &id.to_string(), "yes"]);
    assert!(!late.status.success());
    assert!(
        stderr(&late).contains("already answered"),
        "{}",
        stderr(&late)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn http_requests_are_confirms_answered_back_to_the_host() {
    let (sb, client, host) = http_host().await;
    relay_end_to_end(&sb, &client, &host).await;

    // The approval page shows it and answers it (`via: web`), and the host hears `allow`.
    ask(&client, "qrstu", "Bash").await;
    let id = id_of(&pending_request(&sb, "qrstu").await);
    let ingest = sb.ingest.clone().unwrap();
    let (login, _) = super::approvals::ui_link(&sb);
    let r = http_request(&ingest, "GET", &login, &[], b"");
    assert_eq!(r.status, 303, "{}", r.body);
    let cookie = r.header("set-cookie").unwrap();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let state = http_request(&ingest, "GET", "/ui/api/state", &[("Cookie", &cookie)], b"").json();
    let shown = state["pending"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| id_of(p) == id)
        .cloned()
        .unwrap_or_else(|| panic!("#{id} on the page: {state}"));
    assert_eq!(shown["rule"], "permission:Bash");
    let csrf = state["csrf"].as_str().unwrap().to_string();
    let r = http_request(
        &ingest,
        "POST",
        "/ui/api/confirm",
        &[
            ("Cookie", &cookie),
            ("Content-Type", "application/json"),
            ("X-CSRF-Token", &csrf),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        json!({"id": id, "decision": "approve"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        verdict_for(&host, "qrstu").await,
        json!({"request_id": "qrstu", "behavior": "allow"})
    );
    let closed = stdout(&sb.cli(&["pending", "--closed"]));
    assert!(
        closed.contains(&format!(
            "#{id} [permission:Bash] approved via web by page link "
        )),
        "{closed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_setting_off_nothing_is_declared_and_requests_are_ignored() {
    let sb = home(false);
    let (client, host) = stdio_host(&sb).await;
    assert!(!declares_permission(&client));
    ask(&client, "abcde", "Bash").await;
    ask(&client, "fghij", "Bash").await;
    // A request after them that the session answers in order: both were handled by then.
    client.list_tools(None).await.expect("tools listed");
    eventually(
        Duration::from_secs(10),
        "the ignored request logged",
        || sb.log().contains("permissionRelay` is off").then_some(()),
    );
    assert_eq!(
        sb.log().matches("permissionRelay` is off").count(),
        1,
        "logged once"
    );
    assert!(pending(&sb).is_empty());
    assert!(host.verdicts.lock().unwrap().is_empty());
}

/// `switchboard hook post-tool-use`, as Claude Code's `PostToolUse` hook runs it after `tool`
/// ran with `input`: nothing on stdout, exit 0.
fn post_tool_use(sb: &Switchboard, tool: &str, input: &Value) {
    use std::io::Write;
    let event = json!({
        "session_id": "0b6f-host-session",
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": sb.home.path(),
        "hook_event_name": "PostToolUse",
        "tool_name": tool,
        "tool_input": input,
        "tool_response": {"stdout": "", "stderr": "", "interrupted": false},
        "tool_use_id": "toolu_01",
    });
    let mut child = std::process::Command::new(bin())
        .arg("--home")
        .arg(sb.home.path())
        .args(["hook", "post-tool-use"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the hook");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(event.to_string().as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "the hook prints nothing");
    assert_eq!(stderr(&out), "", "nothing went wrong");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_allowed_in_the_hosts_own_dialog_is_shown_answered_there() {
    let mut sb = home(true);
    sb.spawn();
    let (client, host) = stdio_host(&sb).await;
    let mut watch = Watch::start(sb.home.path());

    // Claude Code's preview: the input as compact JSON (cut to 200 characters, then `…`).
    let input = json!({"command": "rm -rf build", "description": "Remove the build directory"});
    let preview = serde_json::to_string(&input).unwrap();
    ask_with(&client, "abcde", "Bash", &preview).await;
    let id = id_of(&pending_request(&sb, "abcde").await);
    let asked = watch.line_with(&format!("confirm? #{id} "));
    assert!(
        asked.contains("[permission:Bash] seq 0") && asked.contains("claude-code#"),
        "{asked}"
    );

    // Another tool, or the same tool with other input, ran: nothing closes.
    post_tool_use(&sb, "Write", &input);
    post_tool_use(&sb, "Bash", &json!({"command": "ls"}));
    assert!(pending(&sb).iter().any(|p| id_of(p) == id), "still open");

    // The call ran: the person allowed it in the terminal dialog.
    post_tool_use(&sb, "Bash", &input);
    assert!(
        !pending(&sb).iter().any(|p| id_of(p) == id),
        "no longer open"
    );
    let closed = stdout(&sb.cli(&["pending", "--closed"]));
    assert!(
        closed.lines().any(|l| l.starts_with(&format!(
            "#{id} [permission:Bash] approved via relay by claude-code#"
        )) && l.contains("(allowed in the host's own dialog) at ")),
        "{closed}"
    );
    let answered = watch.line_with(&format!("approved #{id} "));
    assert!(
        answered.contains("[permission:Bash] via relay by claude-code#"),
        "{answered}"
    );
    let late = sb.cli(&["confirm", &id.to_string(), "no"]);
    assert!(!late.status.success());
    assert!(
        stderr(&late).contains("already answered: approved via relay"),
        "{}",
        stderr(&late)
    );
    let records = action_records(sb.home.path());
    assert!(
        records.iter().any(|r| r["id"] == id
            && r["state"] == "approved"
            && r["via"] == "relay"
            && r["reason"] == "allowed in the host's own dialog"),
        "{records:?}"
    );

    // The host is sent no verdict for it: the next request's verdict comes, and only that one.
    ask(&client, "fghij", "Edit").await;
    let next = id_of(&pending_request(&sb, "fghij").await);
    let out = sb.cli(&["confirm", &next.to_string(), "yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    verdict_for(&host, "fghij").await;
    let verdicts = host.verdicts.lock().unwrap().clone();
    assert_eq!(
        verdicts,
        [json!({"request_id": "fghij", "behavior": "allow"})]
    );
    client.cancel().await.ok();
}

/// Issue 46.5: one window's `hook post-tool-use` closed another window's permission request
/// (the oldest with the same tool), and a request with an empty or cut preview was closed by
/// any input that began the same way. A hook closes only a request of the host it runs under,
/// for the same tool and the whole input.
#[tokio::test(flavor = "multi_thread")]
async fn a_hook_closes_only_its_own_windows_request_for_the_whole_input() {
    let mut sb = home(true);
    sb.spawn();
    let (here, _) = stdio_host(&sb).await;
    let (elsewhere, _) = stdio_host_elsewhere(&sb).await;
    let ls = json!({"command": "ls"});
    let ls_preview = serde_json::to_string(&ls).unwrap();

    // The other window asks for `ls`; this window's agent runs `ls`: not the other's answer.
    ask_with(&elsewhere, "aaaaa", "Bash", &ls_preview).await;
    let theirs = id_of(&pending_request(&sb, "aaaaa").await);
    post_tool_use(&sb, "Bash", &ls);
    // Nothing to say what a non-answer looks like but time: the next request here is closed
    // by the next hook, in order, and the other window's is still open then.
    ask_with(&here, "bbbbb", "Bash", "").await;
    let empty = id_of(&pending_request(&sb, "bbbbb").await);
    ask_with(&here, "ccccc", "Bash", "{\"command\":\"rm -rf bu…").await;
    let cut = id_of(&pending_request(&sb, "ccccc").await);
    post_tool_use(&sb, "Bash", &json!({"command": "rm -rf build"}));
    ask_with(&here, "ddddd", "Bash", &ls_preview).await;
    let ours = id_of(&pending_request(&sb, "ddddd").await);
    post_tool_use(&sb, "Bash", &ls);

    let open: Vec<u64> = pending(&sb).iter().map(id_of).collect();
    assert_eq!(
        open,
        [theirs, empty, cut],
        "only this window's request for the whole input was closed"
    );
    let closed = stdout(&sb.cli(&["pending", "--closed"]));
    assert!(
        closed
            .lines()
            .any(|l| l.starts_with(&format!("#{ours} [permission:Bash] approved via relay"))),
        "{closed}"
    );
    here.cancel().await.ok();
    elsewhere.cancel().await.ok();
}
