//! Upstream MCP servers, against real servers the tests start: a test server written with the
//! official Python SDK (`tests/python/upstream_server.py`, in the venv the Python SDK test
//! builds) and `@modelcontextprotocol/server-everything` (npm, installed into the target dir)
//! over stdio and streamable HTTP. switchboard runs as the real binary; the tests look at it
//! the way a user would: its journal, `switchboard stats` over the control socket, and an MCP
//! session (rmcp's client over HTTP) that lists and calls the re-exported tools.
//!
//! Without `python3` or `npm` the tests that need them skip, except under CI (`CI=true`),
//! where they fail.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};

use super::util::*;

/// server-everything, exactly.
const EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The venv's python with `mcp` installed, or `None` to skip.
fn python() -> Option<PathBuf> {
    match super::python_sdk::python() {
        Ok(p) => p,
        Err(e) => panic!("Python SDK setup failed: {e}"),
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/upstream_server.py")
}

/// `dist/index.js` of server-everything, installed once into the target dir; `None` to skip.
fn everything() -> Option<PathBuf> {
    static DIR: OnceLock<Result<Option<PathBuf>, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        if Command::new("npm").arg("--version").output().is_err() {
            skip("server-everything tests need node and npm, which are not installed");
            return Ok(None);
        }
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
        let lock =
            std::fs::File::create(tmp.join("node-everything.lock")).map_err(|e| e.to_string())?;
        fs4::fs_std::FileExt::lock_exclusive(&lock).map_err(|e| e.to_string())?;
        let prefix = tmp.join("node-everything");
        let index =
            prefix.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let stamp = prefix.join("switchboard-stamp");
        if index.exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == EVERYTHING) {
            return Ok(Some(index));
        }
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&prefix)
            .arg(EVERYTHING)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("npm install: {e}"))?;
        if !out.status.success() || !index.exists() {
            return Err(format!(
                "npm install {EVERYTHING} failed ({}):\n{}\n{}",
                out.status,
                stdout(&out),
                stderr(&out)
            ));
        }
        std::fs::write(&stamp, EVERYTHING).map_err(|e| e.to_string())?;
        Ok(Some(index))
    })
    .clone()
    .unwrap_or_else(|e| panic!("server-everything setup failed: {e}"))
}

/// A session that counts `notifications/tools/list_changed`.
#[derive(Clone, Default)]
struct Session {
    list_changed: Arc<AtomicUsize>,
}

impl ClientHandler for Session {
    fn get_info(&self) -> ClientConfig {
        pinned_client("upstream-test", "1.0.0")
    }

    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        self.list_changed.fetch_add(1, Ordering::SeqCst);
    }
}

type Client = RunningService<RoleClient, Session>;

/// switchboard with `upstreams` (and optional rules), started.
fn start(upstreams: Value, triggers: Option<&str>) -> Switchboard {
    let mut sb = Switchboard::new();
    sb.write(
        "switchboard.json",
        &json!({ "upstreams": upstreams }).to_string(),
    );
    if let Some(t) = triggers {
        sb.write("triggers.json", t);
    }
    sb.spawn();
    sb
}

async fn session(sb: &Switchboard) -> (Client, Session) {
    let s = Session::default();
    let client = s
        .clone()
        .serve(http_transport(sb))
        .await
        .expect("session connects");
    (client, s)
}

/// How long a test waits for one answer over MCP: a lost answer fails the test with its name
/// (and stops its daemon) instead of hanging the run. Generous: `bridge__flood` answers only
/// once its 50,000 notifications went through the backpressure, which takes a minute or more
/// on a loaded machine.
const ANSWER: Duration = Duration::from_secs(300);

async fn tool_names(client: &Client) -> Vec<String> {
    tokio::time::timeout(ANSWER, client.list_all_tools())
        .await
        .expect("tools/list answered within 5 minutes")
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = args.as_object().cloned();
    tokio::time::timeout(ANSWER, client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("`{tool}` not answered within 5 minutes"))
        .expect("tool call answered")
}

fn text(result: &CallToolResult) -> String {
    serde_json::to_value(&result.content[0]).unwrap()["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The state of upstream `name` from `switchboard stats` (control socket).
fn state(sb: &Switchboard, name: &str) -> Value {
    let r = control(sb.home.path(), json!({"op": "stats"}));
    assert_eq!(r["ok"], true, "{r}");
    r["result"]["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no upstream {name} in {r}"))
}

async fn connected(sb: &Switchboard, name: &str) -> Value {
    eventually_async(
        Duration::from_secs(60),
        &format!("{name} connected"),
        || {
            let s = state(sb, name);
            (s["state"] == "connected" && s["tools"].as_u64() > Some(0)).then_some(s)
        },
    )
    .await
}

/// The journal's records from server `name`, in journal order.
/// The text of `GET /metrics`.
async fn metrics(sb: &Switchboard) -> String {
    reqwest::Client::new()
        .get(format!("http://{}/metrics", sb.ingest.as_deref().unwrap()))
        .bearer_auth(sb.token())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn journal(sb: &Switchboard, server: &str) -> Vec<Value> {
    std::fs::read_to_string(sb.home.path().join("channels.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["serverName"] == server)
        .collect()
}

fn python_upstream(python: &Path) -> Value {
    json!({
        "command": python,
        "args": [script()],
        "env": {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        "channel": "dm/{{meta.chat_id}}",
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_burst_is_stored_in_wire_order_and_tools_work_end_to_end() {
    let Some(python) = python() else { return };
    let mut sb = start(json!({ "bridge": python_upstream(&python) }), None);
    let up = connected(&sb, "bridge").await;
    assert!(
        up["server"]
            .as_str()
            .unwrap()
            .contains("switchboard-test-upstream")
            && up["server"].as_str().unwrap().contains("2025-11-25"),
        "{up}"
    );
    // People read the documented state, in both summaries (issue 27, defect 9).
    for command in ["stats", "status"] {
        let text = stdout(&sb.cli(&[command]));
        assert!(
            text.contains("upstream")
                && text.contains("bridge (stdio): connected; connected since"),
            "{command}: {text}"
        );
    }
    let (client, session) = session(&sb).await;
    let names = tool_names(&client).await;
    for t in [
        "wait_for_inbound_message",
        "bridge__burst",
        "bridge__echo",
        "bridge__fail",
    ] {
        assert!(names.contains(&t.to_string()), "{t} missing from {names:?}");
    }

    // A burst of 1,000 notifications of three kinds, stored in exactly wire order.
    let r = call(&client, "bridge__burst", json!({"n": 1000})).await;
    assert_eq!(text(&r), "sent 1000");
    let records = eventually_async(Duration::from_secs(30), "1000 records", || {
        let r = journal(&sb, "bridge");
        (r.len() >= 1000).then_some(r)
    })
    .await;
    assert_eq!(records.len(), 1000);
    let mut last_seq = 0;
    for (i, r) in records.iter().enumerate() {
        let seq = r["seq"].as_u64().unwrap();
        assert!(seq > last_seq, "seq order at {i}: {r}");
        last_seq = seq;
        match i % 3 {
            0 => {
                assert_eq!(r["channel"], format!("dm/chat{}", i % 4), "{r}");
                assert_eq!(r["content"], format!("dm {i}"), "{r}");
                assert_eq!(r["metadata"]["i"], i.to_string(), "{r}");
                assert_eq!(r["metadata"]["sender"], "Ada", "{r}");
            }
            1 => {
                assert_eq!(r["channel"], "message", "{r}");
                assert_eq!(r["content"], format!("log {i}"), "{r}");
                assert_eq!(r["metadata"]["level"], "info", "{r}");
                assert_eq!(r["metadata"]["logger"], "bridge", "{r}");
            }
            _ => {
                assert_eq!(r["channel"], "x", "{r}");
                let params: Value = serde_json::from_str(r["content"].as_str().unwrap()).unwrap();
                assert_eq!(params["i"], i, "{r}");
                assert_eq!(r["metadata"]["i"], i.to_string(), "{r}");
            }
        }
    }
    // A record is in the journal once written; the upstream counts it `stored` once its append
    // is acknowledged (durable, under `fsync = always` a sync later), so the count follows.
    eventually_async(Duration::from_secs(10), "1000 counted stored", || {
        (state(&sb, "bridge")["stored"] == 1000).then_some(())
    })
    .await;
    // Stored through the backend, which counts them under the upstream's name.
    let metrics = metrics(&sb).await;
    assert!(
        metrics.contains("switchboard_messages_ingested_total{source=\"bridge\"} 1000\n"),
        "{metrics}"
    );

    // Calls are forwarded with their results and their errors.
    let echo = call(&client, "bridge__echo", json!({"text": "hi"})).await;
    assert_eq!(
        (text(&echo), echo.is_error),
        ("echo: hi".into(), Some(false))
    );
    let fail = call(&client, "bridge__fail", json!({"reason": "no such chat"})).await;
    assert_eq!(fail.is_error, Some(true), "a tool error stays a tool error");
    assert!(text(&fail).contains("no such chat"), "{}", text(&fail));
    let mut bad = CallToolRequestParams::new("bridge__echo");
    bad.arguments = json!({"wrong": 1}).as_object().cloned();
    let refused = client.call_tool(bad).await;
    assert!(
        refused.is_err() || refused.as_ref().unwrap().is_error == Some(true),
        "bad arguments are refused by the upstream: {refused:?}"
    );

    // tools/list_changed is followed and passed on to the session.
    assert!(!names.contains(&"bridge__extra".to_string()));
    let before = session.list_changed.load(Ordering::SeqCst);
    call(&client, "bridge__add_tool", json!({})).await;
    eventually_async(
        Duration::from_secs(10),
        "tools/list_changed reaches the session",
        || (session.list_changed.load(Ordering::SeqCst) > before).then_some(()),
    )
    .await;
    assert!(
        tool_names(&client)
            .await
            .contains(&"bridge__extra".to_string())
    );
    let extra = call(&client, "bridge__extra", json!({})).await;
    assert_eq!(text(&extra), "extra");

    client.cancel().await.ok();
    assert!(sb.terminate().success(), "{}", sb.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_upstream_is_restarted_and_answers_clearly_while_down() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let down = dir.path().join("down");
    // Refuses to start while `down` exists, so the test can hold it down.
    let wrapper = format!(
        "if [ -e '{}' ]; then echo 'held down by the test' >&2; exit 3; fi; exec '{}' '{}'",
        down.display(),
        python.display(),
        script().display()
    );
    let mut sb = start(
        json!({"bridge": {"command": "sh", "args": ["-c", wrapper]}, "other": python_upstream(&python)}),
        None,
    );
    let first = connected(&sb, "bridge").await;
    connected(&sb, "other").await;
    let pid = first["pid"].as_u64().unwrap() as i32;
    assert_eq!(first["restarts"], 0);
    let (client, _) = session(&sb).await;

    std::fs::write(&down, "").unwrap();
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let failed = eventually_async(Duration::from_secs(30), "bridge failed and retried", || {
        let s = state(&sb, "bridge");
        (s["state"] == "failed" && s["restarts"].as_u64() >= Some(1)).then_some(s)
    })
    .await;
    assert!(failed["last_error"].as_str().is_some(), "{failed}");
    // Its tools are still listed, and answer with a clear error while it is down.
    let r = call(&client, "bridge__echo", json!({"text": "hi"})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        text(&r).contains("upstream `bridge` is not connected"),
        "{}",
        text(&r)
    );
    // One bad upstream never affects the others.
    assert_eq!(state(&sb, "other")["state"], "connected");
    let other = call(&client, "other__echo", json!({"text": "still here"})).await;
    assert_eq!(text(&other), "echo: still here");

    std::fs::remove_file(&down).unwrap();
    let back = eventually_async(Duration::from_secs(60), "bridge back", || {
        let s = state(&sb, "bridge");
        (s["state"] == "connected").then_some(s)
    })
    .await;
    assert_ne!(back["pid"].as_u64().unwrap() as i32, pid, "a new process");
    assert!(back["restarts"].as_u64().unwrap() >= 1, "{back}");
    let r = call(&client, "bridge__echo", json!({"text": "again"})).await;
    assert_eq!(text(&r), "echo: again");

    let metrics = metrics(&sb).await;
    assert!(
        metrics.contains("switchboard_upstream_up{upstream=\"bridge\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchboard_upstream_restarts_total{upstream=\"bridge\"}"),
        "{metrics}"
    );

    client.cancel().await.ok();
    let child = back["pid"].as_u64().unwrap() as i32;
    assert!(sb.terminate().success(), "{}", sb.log());
    // The upstream's process (group) goes with switchboard.
    eventually_async(Duration::from_secs(10), "upstream child gone", || {
        (unsafe { libc::kill(child, 0) } != 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_upstream_leaves_unanswered_ends_at_call_timeout_and_shows_degraded() {
    let Some(python) = python() else { return };
    let mut up = python_upstream(&python);
    up["callTimeout"] = json!("2s");
    let mut sb = start(json!({ "bridge": up }), None);
    connected(&sb, "bridge").await;
    let (client, _) = session(&sb).await;

    let started = Instant::now();
    let r = call(&client, "bridge__hang", json!({"seconds": 300})).await;
    let took = started.elapsed();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(
        text(&r)
            .contains("upstream `bridge` did not answer `bridge__hang` within 2s (`callTimeout`)"),
        "{}",
        text(&r)
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "answered after {took:?}"
    );
    // Shown as degraded: stats, status and /metrics.
    let s = state(&sb, "bridge");
    assert_eq!(s["state"], "degraded", "{s}");
    assert!(
        s["last_error"]
            .as_str()
            .unwrap()
            .contains("`bridge__hang` was not answered within 2s"),
        "{s}"
    );
    assert_eq!(s["call_timeouts"], 1, "{s}");
    let status = sb.cli(&["status"]);
    assert!(
        stdout(&status).contains("upstream bridge (stdio): degraded: `bridge__hang` was not"),
        "{}",
        stdout(&status)
    );
    let m = metrics(&sb).await;
    for line in [
        "switchboard_upstream_degraded{upstream=\"bridge\"} 1\n",
        "switchboard_upstream_call_timeouts_total{upstream=\"bridge\"} 1\n",
        "switchboard_upstream_up{upstream=\"bridge\"} 1\n",
    ] {
        assert!(m.contains(line), "{line}{m}");
    }
    // The upstream was told: the stuck call was cancelled there.
    eventually_async(
        Duration::from_secs(10),
        "the upstream saw the cancel",
        || sb.log().contains("stderr: hang cancelled").then_some(()),
    )
    .await;

    // A call it answers makes it connected again.
    let echo = call(&client, "bridge__echo", json!({"text": "back"})).await;
    assert_eq!(text(&echo), "echo: back");
    assert_eq!(state(&sb, "bridge")["state"], "connected");
    assert!(
        metrics(&sb)
            .await
            .contains("switchboard_upstream_degraded{upstream=\"bridge\"} 0\n")
    );
    client.cancel().await.ok();
    assert!(sb.terminate().success(), "{}", sb.log());
}

const PROBE_RULES: &str = r#"{"rules": [{"name": "probe", "channel": "probe", "mode": "notify"}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_upstream_leaves_ingest_and_waits_responsive_and_memory_bounded() {
    let Some(python) = python() else { return };
    const FLOOD: u64 = 50_000;
    // The flood is one tool call that returns when all is sent: over a minute on a loaded
    // machine, so its `callTimeout` is the longest.
    let mut bridge = python_upstream(&python);
    bridge["callTimeout"] = json!("10m");
    let mut sb = start(json!({ "bridge": bridge }), Some(PROBE_RULES));
    connected(&sb, "bridge").await;
    let (client, _) = session(&sb).await;
    let client = Arc::new(client);
    let pid = sb.pid();
    let baseline = rss_kib(pid);
    let http = reqwest::Client::new();
    let ingest = sb.ingest.clone().unwrap();

    let flooder = {
        let client = client.clone();
        tokio::spawn(
            async move { text(&call(&client, "bridge__flood", json!({"n": FLOOD})).await) },
        )
    };
    eventually_async(Duration::from_secs(30), "flood under way", || {
        (state(&sb, "bridge")["stored"].as_u64() > Some(1000)).then_some(())
    })
    .await;

    // While it floods: health checks, an ingest POST and a wait stay prompt.
    let mut worst_health = Duration::ZERO;
    let mut worst_wake = Duration::ZERO;
    let mut peak = baseline;
    let mut probes = 0;
    while state(&sb, "bridge")["stored"].as_u64() < Some(FLOOD * 9 / 10) {
        let t = Instant::now();
        let health = http
            .get(format!("http://{ingest}/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        worst_health = worst_health.max(t.elapsed());

        let waiter = {
            let client = client.clone();
            tokio::spawn(async move {
                let r = call(
                    &client,
                    "wait_for_inbound_message",
                    json!({"timeout_s": 20}),
                )
                .await;
                (Instant::now(), r.structured_content.unwrap())
            })
        };
        eventually_async(Duration::from_secs(10), "wait in flight", || {
            let r = control(sb.home.path(), json!({"op": "stats"}));
            (r["result"]["wait_calls_in_flight"].as_u64() >= Some(1)).then_some(())
        })
        .await;
        let posted = Instant::now();
        let reply = http
            .post(format!("http://{ingest}/v1/messages"))
            .bearer_auth(sb.token())
            .json(&json!({"server": "http", "channel": "probe", "content": format!("probe {probes}")}))
            .send()
            .await
            .unwrap();
        let status = reply.status();
        assert_eq!(status, 202, "{}", reply.text().await.unwrap_or_default());
        let (woke, got) = waiter.await.unwrap();
        assert_eq!(
            got["items"][0]["message"]["content"],
            format!("probe {probes}"),
            "{got}"
        );
        worst_wake = worst_wake.max(woke - posted);
        peak = peak.max(rss_kib(pid));
        probes += 1;
        if flooder.is_finished() {
            break;
        }
    }
    assert_eq!(flooder.await.unwrap(), format!("flooded {FLOOD}"));
    eventually_async(
        Duration::from_secs(60),
        "every flood message stored",
        || (state(&sb, "bridge")["stored"].as_u64() == Some(FLOOD)).then_some(()),
    )
    .await;
    peak = peak.max(rss_kib(pid));
    let s = state(&sb, "bridge");
    let _ = writeln!(
        std::io::stderr(),
        "flood: {probes} probes, worst /healthz {worst_health:?}, worst POST→wait {worst_wake:?}, \
         RSS {baseline} KiB → peak {peak} KiB, reader waits {}",
        s["reader_waits"]
    );
    assert!(probes >= 1, "the flood ended before a probe ran");
    assert!(worst_health < Duration::from_secs(2), "{worst_health:?}");
    assert!(worst_wake < Duration::from_secs(3), "{worst_wake:?}");
    assert!(
        peak < baseline + 100 * 1024,
        "RSS grew from {baseline} KiB to {peak} KiB"
    );
    drop(client);
    assert!(sb.terminate().success(), "{}", sb.log());
}

/// A child in its own process group, killed (group and all) on drop.
struct Group(std::process::Child);

impl Drop for Group {
    fn drop(&mut self) {
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio_and_http_end_to_end() {
    let Some(index) = everything() else { return };
    let port = free_port();
    let _http_server = {
        use std::os::unix::process::CommandExt;
        Group(
            Command::new("node")
                .arg(&index)
                .arg("streamableHttp")
                .env("PORT", port.to_string())
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start server-everything over HTTP"),
        )
    };
    eventually_async(
        Duration::from_secs(30),
        "server-everything listening",
        || std::net::TcpStream::connect(("127.0.0.1", port)).ok(),
    )
    .await;
    let mut sb = start(
        json!({
            "ev": {"command": "node", "args": [index, "stdio"]},
            "evh": {"url": format!("http://127.0.0.1:{port}/mcp")},
        }),
        None,
    );
    for name in ["ev", "evh"] {
        let s = connected(&sb, name).await;
        assert!(s["server"].as_str().unwrap().contains("2025-11-25"), "{s}");
    }
    let (client, _) = session(&sb).await;
    let names = tool_names(&client).await;
    for name in ["ev", "evh"] {
        for tool in ["echo", "get-sum", "toggle-simulated-logging"] {
            let t = format!("{name}__{tool}");
            assert!(names.contains(&t), "{t} missing from {names:?}");
        }
        let echo = call(&client, &format!("{name}__echo"), json!({"message": "hi"})).await;
        assert_eq!(text(&echo), "Echo: hi");
        let sum = call(
            &client,
            &format!("{name}__get-sum"),
            json!({"a": 2, "b": 3}),
        )
        .await;
        assert!(text(&sum).contains('5'), "{}", text(&sum));
        // Its logging notifications land in the inbox as messages from the upstream.
        call(
            &client,
            &format!("{name}__toggle-simulated-logging"),
            json!({}),
        )
        .await;
        let logged = eventually_async(
            Duration::from_secs(20),
            &format!("{name} log message stored"),
            || {
                journal(&sb, name)
                    .into_iter()
                    .find(|r| r["channel"] == "message")
            },
        )
        .await;
        assert!(logged["metadata"]["level"].as_str().is_some(), "{logged}");
        assert!(
            logged["content"].as_str().unwrap().contains("message"),
            "{logged}"
        );
    }
    client.cancel().await.ok();
    assert!(sb.terminate().success(), "{}", sb.log());
}

#[test]
fn config_check_reports_every_upstream_error_located() {
    let sb = Switchboard::new();
    sb.write(
        "switchboard.json",
        "{\n  \"upstreams\": {\n    \"teams\": {\"comand\": \"bridge\"},\n    \"ci\": {\"url\": \"ftp://x\"}\n  }\n}\n",
    );
    let out = sb.cli(&["config", "check"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let shown = sb
        .home
        .path()
        .join("switchboard.json")
        .display()
        .to_string();
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "{shown}:3:15: upstream `teams`: unknown key `comand`; did you mean `command`?"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("{shown}:4:19: upstream `ci`: invalid `url`")),
        "{text}"
    );
    let json_out = sb.cli(&["config", "check", "--format", "json"]);
    let errors: Value = serde_json::from_str(&stdout(&json_out)).unwrap();
    let codes: Vec<_> = errors
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["invalid_transport", "unknown_key", "invalid_url"],
        "{errors}"
    );

    // serve refuses the same file with the same lines, and starts nothing.
    let serve = sb.cli(&["serve", "--no-stdio", "--listen", "127.0.0.1:0"]);
    assert!(!serve.status.success());
    assert!(
        stderr(&serve).contains("unknown key `comand`"),
        "{}",
        stderr(&serve)
    );

    // The ingest rate limit is checked with the rest of the file, located too.
    sb.write("switchboard.json", r#"{"http": {"rateLimit": "lots"}}"#);
    let out = sb.cli(&["config", "check"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let want = format!("{shown}:1:24: invalid `http.rateLimit` \"lots\": ");
    assert!(stdout(&out).contains(&want), "{}", stdout(&out));
    let serve = sb.cli(&["serve", "--no-stdio", "--listen", "127.0.0.1:0"]);
    assert!(!serve.status.success());
    assert!(stderr(&serve).contains(&want), "{}", stderr(&serve));

    sb.write(
        "switchboard.json",
        r#"{"upstreams": {"teams": {"command": "bridge", "channel": "dm/{{meta.chat_id}}"}}}"#,
    );
    let ok = sb.cli(&["config", "check"]);
    assert!(ok.status.success(), "{}", stdout(&ok));
    assert!(
        stdout(&ok).contains("ok, 1 upstream: teams"),
        "{}",
        stdout(&ok)
    );
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn summary(samples: &mut [Duration]) -> String {
    samples.sort();
    format!(
        "p50 {:.2?}, p99 {:.2?}, max {:.2?} ({} samples)",
        percentile(samples, 0.5),
        percentile(samples, 0.99),
        samples[samples.len() - 1],
        samples.len()
    )
}

fn unix_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Collects `n` `lat` nudges through waits; the delay of each from its `sent_ns` metadata.
async fn collect_latencies(client: &Client, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let r = call(
            client,
            "wait_for_inbound_message",
            json!({"timeout_s": 20, "max_items": 100}),
        )
        .await;
        let now = unix_ns();
        let v = r.structured_content.unwrap();
        let items = v["items"].as_array().unwrap();
        assert!(
            !items.is_empty(),
            "a wait timed out with {} of {n} samples",
            out.len()
        );
        for item in items {
            let sent: u128 = item["message"]["metadata"]["sent_ns"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            out.push(Duration::from_nanos((now - sent) as u64));
        }
    }
    out
}

/// BENCHMARKS.md, "Upstream MCP sources". Run in release:
/// `cargo test --release --test integration upstream::bench -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; prints figures"]
async fn bench_upstream_latency_and_throughput() {
    let Some(python) = python() else { return };
    const SAMPLES: usize = 300;
    const FLOOD: u64 = 50_000;
    let rules = r#"{"rules": [{"name": "lat", "channel": "lat", "mode": "notify"}]}"#;
    let raw = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/raw_flood_upstream.py");
    // Its flood is one long tool call.
    let mut bridge = python_upstream(&python);
    bridge["callTimeout"] = json!("10m");
    let mut sb = start(
        json!({
            "bridge": bridge,
            "raw": {"command": python, "args": [raw, FLOOD.to_string()], "enabled": false},
        }),
        Some(rules),
    );
    connected(&sb, "bridge").await;
    let (client, _) = session(&sb).await;

    // Upstream notification → stored → wait returns: 300 notifications 20 ms apart.
    let timed = {
        let peer = client.peer().clone();
        tokio::spawn(async move {
            let mut p = CallToolRequestParams::new("bridge__timed");
            p.arguments = json!({"n": SAMPLES, "gap_ms": 20}).as_object().cloned();
            peer.call_tool_once(p).await.is_ok()
        })
    };
    let mut upstream = collect_latencies(&client, SAMPLES).await;
    assert!(timed.await.unwrap());

    // Baseline, same run: HTTP ingest POST → stored → wait returns, the wait already pending
    // as it is for the upstream samples.
    let http = reqwest::Client::new();
    let ingest = sb.ingest.clone().unwrap();
    let client = Arc::new(client);
    let mut baseline = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let waiter = {
            let client = client.clone();
            tokio::spawn(async move { collect_latencies(&client, 1).await })
        };
        eventually_async(Duration::from_secs(10), "wait in flight", || {
            let r = control(sb.home.path(), json!({"op": "stats"}));
            (r["result"]["wait_calls_in_flight"].as_u64() >= Some(1)).then_some(())
        })
        .await;
        let body = json!({"server": "http", "channel": "lat", "content": format!("b {i}"),
                          "metadata": {"sent_ns": unix_ns().to_string()}});
        let reply = http
            .post(format!("http://{ingest}/v1/messages"))
            .bearer_auth(sb.token())
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 202);
        baseline.extend(waiter.await.unwrap());
    }

    // Sustained notifications/s from the SDK server (its own send rate bounds it).
    let t = Instant::now();
    let r = call(&client, "bridge__flood", json!({"n": FLOOD})).await;
    assert_eq!(text(&r), format!("flooded {FLOOD}"));
    eventually_async(Duration::from_secs(300), "sdk flood stored", || {
        (state(&sb, "bridge")["stored"].as_u64() == Some(FLOOD + SAMPLES as u64)).then_some(())
    })
    .await;
    let sdk_rate = FLOOD as f64 / t.elapsed().as_secs_f64();
    drop(client);
    assert!(sb.terminate().success());

    // Sustained notifications/s from a raw writer (the pipe as fast as it goes).
    sb.write(
        "switchboard.json",
        &json!({"upstreams": {"raw": {"command": python, "args": [raw, FLOOD.to_string()]}}})
            .to_string(),
    );
    sb.spawn();
    let (t0, first) = eventually_async(Duration::from_secs(60), "raw flood started", || {
        let n = state(&sb, "raw")["stored"].as_u64().unwrap_or(0);
        (n > 0).then_some((Instant::now(), n))
    })
    .await;
    eventually_async(Duration::from_secs(300), "raw flood stored", || {
        (state(&sb, "raw")["stored"].as_u64() == Some(FLOOD)).then_some(())
    })
    .await;
    let raw_rate = (FLOOD - first) as f64 / t0.elapsed().as_secs_f64();
    let waits = state(&sb, "raw")["reader_waits"].clone();
    assert!(sb.terminate().success());

    // Baseline, same run: the same number of messages POSTed to HTTP ingest, 500 a request.
    sb.write("switchboard.json", "{}");
    sb.spawn();
    let ingest = sb.ingest.clone().unwrap();
    let t = Instant::now();
    for chunk in 0..FLOOD / 500 {
        let batch: Vec<Value> = (0..500)
            .map(|i| json!({"server": "http", "channel": "flood", "content": format!("{{\"i\":{}}}", chunk * 500 + i)}))
            .collect();
        let reply = http
            .post(format!("http://{ingest}/v1/messages"))
            .bearer_auth(sb.token())
            .json(&batch)
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 202);
    }
    let http_rate = FLOOD as f64 / t.elapsed().as_secs_f64();
    assert!(sb.terminate().success());

    let _ = writeln!(
        std::io::stderr(),
        "\nupstream notification → wait return: {}\nHTTP POST → wait return (baseline): {}\n\
         sustained, SDK server: {sdk_rate:.0} notifications/s\nsustained, raw writer: \
         {raw_rate:.0} notifications/s (reader waits {waits})\nHTTP ingest, 500 a request \
         (baseline): {http_rate:.0} messages/s\n",
        summary(&mut upstream),
        summary(&mut baseline),
    );
}

/// Issue 27.9: an HTTP upstream that cannot be reached was shown with rmcp's transport type
/// (`Ordered<rmcp::transport::worker::WorkerTransport<…>>`). `status` says what failed, why,
/// and in the documented lowercase state.
#[test]
fn an_unreachable_http_upstream_says_why_without_rust_type_names() {
    let port = free_port();
    let mut sb = start(
        json!({"down": {"url": format!("http://127.0.0.1:{port}/mcp")}}),
        None,
    );
    let s = eventually(Duration::from_secs(30), "down has failed", || {
        let s = state(&sb, "down");
        s["last_error"].as_str().is_some().then_some(s)
    });
    let error = s["last_error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("cannot connect to http://127.0.0.1:{port}/mcp: ")),
        "{error}"
    );
    assert!(
        !error.contains("rmcp::") && !error.contains("Ordered<"),
        "no Rust type names: {error}"
    );
    let status = stdout(&sb.cli(&["status"]));
    let line = status
        .lines()
        .find(|l| l.contains("down (http)"))
        .unwrap_or_else(|| panic!("no line for `down` in\n{status}"));
    assert!(!line.contains("rmcp::"), "{line}");
    assert!(
        line.contains(": failed: ") || line.contains(": connecting") || line.contains(": retrying"),
        "{line}"
    );
    assert!(sb.terminate().success(), "{}", sb.log());
}

/// An upstream server inherits the daemon's environment (its own credentials are usually
/// there), but never switchboard's secrets, unless its `env` names them.
#[test]
fn an_upstream_gets_the_environment_without_switchboards_secrets() {
    let mut sb = Switchboard::new()
        .env("SWITCHBOARD_TOKEN", "ingest-secret")
        .env("SWITCHBOARD_GITHUB_SECRET", "hmac-secret")
        .env("BRIDGE_API_KEY", "the-bridges-own");
    let dump = sb.home.path().join("upstream.env");
    sb.write(
        "switchboard.json",
        &json!({"upstreams": {"bridge": {
            "command": "sh",
            "args": ["-c", format!("env > '{}'; exec sleep 30", dump.display())],
            "env": {"BRIDGE_MODE": "test"},
        }}})
        .to_string(),
    );
    sb.spawn();
    let env = eventually(
        Duration::from_secs(20),
        "the upstream wrote its env",
        || {
            std::fs::read_to_string(&dump)
                .ok()
                .filter(|t| t.contains("BRIDGE_MODE"))
        },
    );
    assert!(env.contains("BRIDGE_API_KEY=the-bridges-own"), "{env}");
    assert!(env.contains("BRIDGE_MODE=test"), "{env}");
    assert!(env.contains("PATH="), "{env}");
    assert!(!env.contains("ingest-secret"), "{env}");
    assert!(!env.contains("hmac-secret"), "{env}");
    assert!(sb.terminate().success(), "{}", sb.log());
}
