//! One daemon per home, any number of front ends: `serve` on stdio attaches to the home's
//! daemon (starting it when none runs), several windows share it, and it survives and
//! recovers from what real use does to it (kill -9, two starts at once, a deleted lock or
//! home, a taken port). Front ends are driven by rmcp's client over stdio, as a host would.

use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{ClientConfig, Implementation};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use super::util::*;

const RULES: &str = r#"{"rules": [
  {"name": "triage", "channel": "work/*", "mode": "auto", "prompt": "Triage {{content}}", "tools": ["view"]},
  {"name": "ask", "channel": "ask/*", "mode": "confirm", "prompt": "Restart {{content}}?", "tools": ["bash"], "confirmTimeout": "1h"},
  {"name": "tell", "channel": "news/*", "mode": "notify"}
]}"#;

/// A front end: `switchboard serve` on stdio with rmcp's client, as a host starts it.
pub async fn front_end(home: &std::path::Path, name: &str, extra: &[&str]) -> Client {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.join("test-frontends.log"))
        .unwrap();
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("--home")
        .arg(home)
        .arg("serve")
        .args(extra)
        .env("RUST_LOG", "switchboard=debug,info");
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn front end");
    let mut info = ClientConfig::default();
    info.client_info = Implementation::new(name, "1.0.0");
    info.serve(transport).await.expect("front end answers")
}

async fn wait_items(client: &Client, timeout_s: f64) -> Vec<Value> {
    let r = tool(
        client,
        "wait_for_inbound_message",
        json!({"timeout_s": timeout_s}),
    )
    .await;
    r["items"].as_array().cloned().unwrap_or_default()
}

fn send_one(home: &std::path::Path, channel: &str, content: &str) -> u64 {
    send_messages(home, &[(channel, content)])[0]
}

/// POSTs one message to ingest; the status, or `None` when no daemon answers.
fn try_post(addr: &str, token: &str, body: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {token}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

fn status_json(home: &std::path::Path) -> Value {
    let out = cli_in(home, &["status", "--json"]);
    serde_json::from_str(stdout(&out).trim()).unwrap_or(Value::Null)
}

fn home_with_rules() -> (tempfile::TempDir, DaemonGuard) {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("triggers.json"), RULES).unwrap();
    let guard = DaemonGuard(home.path().to_path_buf());
    (home, guard)
}

#[tokio::test(flavor = "multi_thread")]
async fn three_front_ends_share_one_daemon_each_its_own_consumer() {
    let (home, _guard) = home_with_rules();
    let home = home.path();
    let a = front_end(home, "copilot-cli", &["--no-listen"]).await;
    let b = front_end(home, "copilot-cli", &["--no-listen"]).await;
    let c = front_end(home, "claude-code", &["--no-listen"]).await;

    // One daemon, three sessions.
    assert_eq!(daemons_of(home).len(), 1, "{:?}", daemons_of(home));
    let status = status_json(home);
    assert_eq!(status["running"], true);
    assert_eq!(status["stats"]["delivery"]["sessions"], 3, "{status}");

    // Each is its own consumer.
    let mut names = Vec::new();
    for client in [&a, &b, &c] {
        let s = tool(client, "inbox_stats", json!({})).await;
        names.push(s["consumer"]["name"].as_str().unwrap().to_string());
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("claude-code#")),
        "{names:?}"
    );

    // A nudge reaches every window; work reaches exactly one.
    send_one(home, "news/release", "v2 is out");
    for client in [&a, &b, &c] {
        let items = wait_items(client, 10.0).await;
        assert_eq!(items.len(), 1, "{items:?}");
        assert_eq!(items[0]["kind"], "nudge");
        assert_eq!(items[0]["message"]["content"], "v2 is out");
    }
    send_one(home, "work/ci", "build 7 failed");
    let (ra, rb, rc) = tokio::join!(
        wait_items(&a, 3.0),
        wait_items(&b, 3.0),
        wait_items(&c, 3.0)
    );
    let auto: Vec<&Value> = ra
        .iter()
        .chain(&rb)
        .chain(&rc)
        .filter(|i| i["kind"] == "auto")
        .collect();
    assert_eq!(auto.len(), 1, "{ra:?} {rb:?} {rc:?}");
    assert_eq!(auto[0]["prompt"], "Triage build 7 failed");

    // Closing the windows leaves the daemon running: webhooks keep landing.
    for client in [a, b, c] {
        client.cancel().await.unwrap();
    }
    eventually(Duration::from_secs(10), "sessions to close", || {
        (status_json(home)["stats"]["delivery"]["sessions"] == 0).then_some(())
    });
    assert_eq!(daemons_of(home).len(), 1);
    let seq = send_one(home, "news/later", "still listening");
    assert!(seq > 0);

    // `stop` stops it, and removes its socket and endpoint.
    let out = cli_in(home, &["stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("stopped"), "{}", stdout(&out));
    assert!(daemons_of(home).is_empty());
    assert!(!home.join("control.sock").exists());
    assert!(!home.join("endpoint.json").exists());
    let out = cli_in(home, &["status"]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_of_the_daemon_under_load_loses_nothing_and_a_front_end_restarts_it() {
    let (home, _guard) = home_with_rules();
    let home = home.path().to_path_buf();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let a = front_end(&home, "copilot-cli", &["--listen", &listen]).await;
    let b = front_end(&home, "copilot-cli", &["--listen", &listen]).await;
    let first = daemon_pid(&home).expect("a daemon runs");

    // A confirm pending before the crash.
    send_one(&home, "ask/db", "db-1");
    let asked = wait_items(&a, 10.0).await;
    assert_eq!(asked[0]["kind"], "confirm_request", "{asked:?}");
    let confirm_id = asked[0]["action_id"].as_u64().unwrap();
    let _ = wait_items(&b, 10.0).await;

    // Load: a sender that retries every message until it is acknowledged (202).
    let token = std::fs::read_to_string(home.join("token"))
        .unwrap()
        .trim()
        .to_string();
    let stop_load = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let stop_load = stop_load.clone();
        let listen = listen.clone();
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut n = 0;
            while !stop_load.load(std::sync::atomic::Ordering::Relaxed) {
                let body = json!({"server": "load", "channel": "load/x", "content": format!("m{n}"), "id": format!("load-{n}")});
                match try_post(&listen, &token, &body.to_string()) {
                    Some(202) => {
                        acked.push(format!("m{n}"));
                        n += 1;
                    }
                    _ => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            acked
        })
    };

    // A wait in flight when the daemon dies returns normally.
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        let items = wait_items(&b, 4.0).await;
        (items, started.elapsed(), b)
    });
    eventually_async(Duration::from_secs(10), "the wait to be in flight", || {
        (status_json(&home)["stats"]["wait_calls_in_flight"] == 1).then_some(())
    })
    .await;
    unsafe {
        libc::kill(first as i32, libc::SIGKILL);
    }
    let (items, took, b) = waiting.await.unwrap();
    assert!(took < Duration::from_secs(8), "the wait took {took:?}");
    assert!(
        items.iter().all(|i| i["kind"] != "auto"),
        "nothing but load and nudges: {items:?}"
    );

    // A front end started a new daemon and re-attached within a second or so.
    let second = eventually(Duration::from_secs(10), "a new daemon", || {
        daemon_pid(&home).filter(|p| *p != first)
    });
    assert_eq!(daemons_of(&home), vec![second]);
    let s = tool(&a, "inbox_stats", json!({})).await;
    assert_eq!(
        s["delivery"]["sessions"], 2,
        "both front ends re-attached: {s}"
    );

    // Keep loading until the new daemon has acknowledged some messages, then stop and count.
    let load_stored = || {
        std::fs::read_to_string(home.join("channels.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"load/x\""))
            .count()
    };
    let at_restart = load_stored();
    eventually(Duration::from_secs(10), "load on the new daemon", || {
        (load_stored() >= at_restart + 5).then_some(())
    });
    stop_load.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = sender.join().unwrap();
    assert!(acked.len() > 5, "the load ran: {}", acked.len());
    let stored: std::collections::BTreeSet<String> =
        std::fs::read_to_string(home.join("channels.jsonl"))
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["channel"] == "load/x")
            .map(|v| v["content"].as_str().unwrap().to_string())
            .collect();
    for m in &acked {
        assert!(
            stored.contains(m),
            "acknowledged {m} is not in channels.jsonl"
        );
    }
    let seqs: Vec<u64> = std::fs::read_to_string(home.join("channels.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["seq"].as_u64().unwrap())
        .collect();
    let mut sorted = seqs.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), seqs.len(), "no seq written twice");

    // The pending confirm survived and can be answered from the other window.
    let out = cli_in(&home, &["pending", "--json"]);
    let pending: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert!(
        pending
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["id"].as_u64() == Some(confirm_id)),
        "{pending}"
    );
    let answer = tool(
        &b,
        "channel_confirm",
        json!({"id": confirm_id, "decision": "yes"}),
    )
    .await;
    assert_eq!(answer["approved"], true, "{answer}");
    assert_eq!(answer["prompt"], "Restart db-1?");
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn front_ends_started_at_the_same_instant_make_one_daemon() {
    let (home, _guard) = home_with_rules();
    let home = home.path().to_path_buf();
    let clients = futures::future::join_all((0..4).map(|i| {
        let home = home.clone();
        async move { front_end(&home, &format!("w{i}"), &["--no-listen"]).await }
    }))
    .await;
    // Each front end started a daemon; one took the home's lock, and the others exit on their
    // own once they find it taken. A front end connects to the winner without waiting for its
    // own loser to get that far (on a loaded host one was still starting), so the losers are
    // given a few seconds; two daemons that both stay up fail.
    let deadline = Instant::now() + Duration::from_secs(10);
    while daemons_of(&home).len() > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(daemons_of(&home).len(), 1, "{:?}", daemons_of(&home));
    for c in &clients {
        let s = tool(c, "inbox_stats", json!({})).await;
        assert_eq!(s["delivery"]["sessions"], 4, "{s}");
    }
    for c in clients {
        c.cancel().await.unwrap();
    }
}

#[test]
fn a_deleted_lock_file_stops_the_daemon_before_a_second_one_can_write() {
    let mut sb = Switchboard::new();
    sb.spawn_with(&["daemon", "--no-listen"]);
    let pid = sb.pid();
    std::fs::remove_file(sb.home.path().join("lock")).unwrap();
    eventually(Duration::from_secs(3), "the daemon to stop", || {
        (!alive(pid)).then_some(())
    });
    assert!(
        sb.log().contains("lock file was deleted or replaced"),
        "{}",
        sb.log()
    );
    // A new daemon takes the home cleanly.
    sb.spawn_with(&["daemon", "--no-listen"]);
    let seq = send_one(sb.home.path(), "x/y", "after");
    assert_eq!(seq, 1);
}

#[test]
fn a_deleted_control_socket_is_bound_again_and_the_cli_reaches_the_daemon() {
    let mut sb = Switchboard::new();
    sb.spawn_with(&["daemon", "--no-listen"]);
    let pid = sb.pid();
    assert_eq!(send_one(sb.home.path(), "x/y", "before"), 1);
    let socket = sb.home.path().join("control.sock");
    std::fs::remove_file(&socket).unwrap();
    // The file appears at bind(), before listen(): wait for a connection, not the file
    // (issue 27, defect 7).
    eventually(Duration::from_secs(5), "the socket bound again", || {
        std::os::unix::net::UnixStream::connect(&socket)
            .ok()
            .map(drop)
    });
    // The same daemon answers: no second one was started, nothing was lost.
    assert_eq!(send_one(sb.home.path(), "x/y", "after"), 2);
    assert_eq!(status_json(sb.home.path())["pid"], pid);
    assert!(
        sb.log()
            .contains("the control socket was deleted; bound it again"),
        "{}",
        sb.log()
    );
    assert!(sb.terminate().success(), "{}", sb.log());
    assert!(
        !socket.exists(),
        "the daemon removes its socket when it stops"
    );
}

#[test]
fn a_deleted_home_stops_the_daemon() {
    let mut sb = Switchboard::new();
    sb.spawn_with(&["daemon", "--no-listen"]);
    let pid = sb.pid();
    // The daemon's stderr: kept open, so that it can be read once the home is gone.
    let mut log = std::fs::File::open(sb.home.path().join("test-server.log")).unwrap();
    // The daemon may write a file while the directory is being emptied, and the last rmdir then
    // finds it not empty (so does `rm -rf`): removed again, as a person would.
    eventually(
        Duration::from_secs(5),
        "the home to be removed",
        || match std::fs::remove_dir_all(sb.home.path()) {
            Ok(()) => Some(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(()),
            Err(_) => None,
        },
    );
    eventually(Duration::from_secs(3), "the daemon to stop", || {
        (!alive(pid)).then_some(())
    });
    let mut text = String::new();
    std::io::Read::read_to_string(&mut log, &mut text).unwrap();
    assert!(text.contains("(or the home was removed)"), "{text}");
    std::fs::create_dir_all(sb.home.path()).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_taken_ingest_port_is_a_warning_not_a_dead_session() {
    let (home, _guard) = home_with_rules();
    let home = home.path();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let client = front_end(home, "copilot-cli", &["--listen", &addr]).await;
    let stats = tool(&client, "inbox_stats", json!({})).await;
    let ingest = &stats["listeners"][0];
    assert_eq!(ingest["what"], "ingest", "{stats}");
    assert!(ingest["error"].as_str().unwrap().contains(&addr), "{stats}");
    let out = cli_in(home, &["status"]);
    assert!(
        stdout(&out).contains("ingest: WARNING not listening"),
        "{}",
        stdout(&out)
    );
    // The session works: the CLI's messages still arrive.
    send_one(home, "news/a", "hello");
    let items = wait_items(&client, 10.0).await;
    assert_eq!(items[0]["message"]["content"], "hello");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_front_end_with_other_flags_says_so_once_and_works() {
    let (home, _guard) = home_with_rules();
    let home = home.path();
    let first = front_end(home, "one", &["--no-listen"]).await;
    let second = front_end(home, "two", &["--no-listen", "--http", "127.0.0.1:0"]).await;
    let s = tool(&second, "inbox_stats", json!({})).await;
    assert_eq!(s["delivery"]["sessions"], 2);
    let log = std::fs::read_to_string(home.join("test-frontends.log")).unwrap();
    assert_eq!(
        log.matches("the running daemon was started with other flags")
            .count(),
        1,
        "{log}"
    );
    assert!(
        log.contains("--http: asked 127.0.0.1:0, the daemon has off"),
        "{log}"
    );
    first.cancel().await.unwrap();
    second.cancel().await.unwrap();
}

/// `start --listen 127.0.0.1:PORT` on `home` with `SWITCHBOARD_TOKEN=from-the-operator`, as an
/// operator starts the daemon; the ingest address.
fn started_by_the_operator(home: &std::path::Path) -> String {
    let addr = format!("127.0.0.1:{}", free_port());
    let started = std::process::Command::new(bin())
        .arg("--home")
        .arg(home)
        .args(["start", "--listen", &addr])
        .env("SWITCHBOARD_TOKEN", "from-the-operator")
        .output()
        .unwrap();
    assert!(started.status.success(), "{}", stderr(&started));
    addr
}

/// Issue 26, item 12: a daemon an operator started with `--listen` and `SWITCHBOARD_TOKEN`
/// keeps both when a front end (without that variable) restarts it after a crash; and
/// `start` with other flags says the running daemon keeps its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_by_a_front_end_keeps_the_daemons_start_settings() {
    let (home, _guard) = home_with_rules();
    let home = home.path();
    let addr = started_by_the_operator(home);
    let body = r#"{"server":"s","channel":"news/a","content":"one"}"#;
    assert_eq!(try_post(&addr, "from-the-operator", body), Some(202));

    // The daemon dies; a front end without the variable brings it back.
    let first = daemon_pid(home).expect("a daemon");
    unsafe { libc::kill(first as i32, libc::SIGKILL) };
    eventually(Duration::from_secs(5), "the daemon is gone", || {
        (!alive(first)).then_some(())
    });
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("--home")
        .arg(home)
        .arg("serve")
        .env_remove("SWITCHBOARD_TOKEN");
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let second = daemon_pid(home).expect("restarted");
    assert_ne!(first, second);
    assert_eq!(
        try_post(&addr, "from-the-operator", body),
        Some(202),
        "same address, same token"
    );

    let out = std::process::Command::new(bin())
        .arg("--home")
        .arg(home)
        .args(["start", "--no-listen"])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.contains("it keeps the settings it was started with")
            && text.contains(&format!("ingest: asked off, the daemon listens on {addr}")),
        "{text}"
    );
    client.cancel().await.unwrap();
}

fn chmod(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(path: &std::path::Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
}

/// `daemon` and `start` both refuse the home with exit 1 (a failure, not a wrong command
/// line); their error, once.
fn refused(home: &std::path::Path) -> String {
    let mut said = Vec::new();
    for args in [&["daemon", "--no-listen"][..], &["start", "--no-listen"]] {
        said.push(exits_1(
            std::process::Command::new(bin())
                .arg("--home")
                .arg(home)
                .args(args),
        ));
    }
    assert_eq!(said[0], said[1], "the same refusal");
    said.remove(0)
}

/// `daemon` and `start` refuse `home` saying `problem`, and `run` the command `fix`.
fn refused_saying(home: &std::path::Path, problem: &str, fix: &str) {
    let err = refused(home);
    assert!(err.contains(problem), "{err}");
    assert!(err.contains(&format!("run `{fix}`")), "{err}");
}

#[test]
fn a_home_another_user_can_write_is_refused_with_how_to_fix_it() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return skip("making a home another user's needs root");
    }
    const NOBODY: u32 = 65534;
    let base = tempfile::tempdir().unwrap();
    let home = base.path().join("shared");
    let _guard = DaemonGuard(home.clone());
    let shown = home.display().to_string();
    // The issue's case: a 0777 directory of `nobody`, who wrote an upstream command into it.
    std::fs::create_dir(&home).unwrap();
    let marker = base.path().join("ran-as-root");
    let config = home.join("switchboard.json");
    std::fs::write(
        &config,
        json!({"upstreams": {"x": {"command": "touch", "args": [&marker]}}}).to_string(),
    )
    .unwrap();
    chown(&config, NOBODY);
    chown(&home, NOBODY);
    chmod(&home, 0o777);
    let err = refused(&home);
    assert!(
        err.starts_with(&format!("error: refusing home {shown}: it is owned by ")),
        "{err}"
    );
    assert!(err.contains("(uid 65534), not by `root` (uid 0)"), "{err}");
    assert!(
        err.contains("whoever can change it can make switchboard run commands as `root` (uid 0)"),
        "{err}"
    );
    assert!(
        err.contains(&format!("run `chown root {shown}` if it is yours")),
        "{err}"
    );
    assert!(err.contains("ssh's StrictModes"), "{err}");
    assert!(!marker.exists(), "the upstream command ran");

    // Ours again, but writable by others.
    chown(&home, 0);
    let err = refused(&home);
    assert!(
        err.contains(&format!(
            "refusing home {shown}: it is writable by its group and others (mode 0777)"
        )),
        "{err}"
    );
    assert!(err.contains(&format!("run `chmod 700 {shown}`")), "{err}");
    chmod(&home, 0o700);
    // The file that names the commands, still `nobody`'s.
    let err = refused(&home);
    assert!(err.contains("`switchboard.json` is owned by "), "{err}");
    assert!(
        err.contains(&format!("run `chown root {}`", config.display())),
        "{err}"
    );
    chown(&config, 0);
    chmod(&config, 0o664);
    refused_saying(
        &home,
        "`switchboard.json` is writable by its group (mode 0664)",
        &format!("chmod go-w {}", config.display()),
    );
    assert!(!marker.exists(), "the upstream command ran");
    let names: Vec<_> = std::fs::read_dir(&home)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["switchboard.json"],
        "nothing written in a refused home"
    );

    // Fixed as told: it starts.
    chmod(&config, 0o644);
    let out = cli_in(&home, &["start", "--no-listen"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stop_daemon(&home);
}

/// Issue 46, finding 1: `triggers.json` links to a file in a directory that others can write;
/// today the start looked only at the file and started.
#[test]
fn a_rules_link_into_a_directory_others_can_write_is_refused_at_start() {
    let base = tempfile::tempdir().unwrap();
    let (home, _guard) = private_home(base.path());
    let shared = base.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o777);
    std::fs::write(shared.join("rules.json"), RULES).unwrap();
    std::os::unix::fs::symlink(shared.join("rules.json"), home.join("triggers.json")).unwrap();
    let real = std::fs::canonicalize(&shared).unwrap();
    refused_saying(
        &home,
        &format!(
            "{}, the directory `triggers.json` leads to, is writable by its group and others \
             (mode 0777)",
            real.display()
        ),
        &format!("chmod go-w {}", real.display()),
    );
    chmod(&shared, 0o755);
    starts(&home);
}

/// A new home `home` in `base`, 0700; its daemon is stopped when the guard goes.
fn private_home(base: &std::path::Path) -> (std::path::PathBuf, DaemonGuard) {
    let home = base.join("home");
    std::fs::create_dir(&home).unwrap();
    chmod(&home, 0o700);
    (home.clone(), DaemonGuard(home))
}

/// `start` succeeds on `home` (fixed as it was told); then its daemon is stopped.
fn starts(home: &std::path::Path) {
    let out = cli_in(home, &["start", "--no-listen"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stop_daemon(home);
}

/// Issue 46: a `token` file that other users can read is refused at start, with the command
/// that fixes it; today it was accepted at 0644.
#[test]
fn a_token_file_others_can_read_is_refused_at_start() {
    let base = tempfile::tempdir().unwrap();
    let (home, _guard) = private_home(base.path());
    let token = home.join("token");
    std::fs::write(&token, "a-token-everyone-can-read\n").unwrap();
    chmod(&token, 0o644);
    refused_saying(
        &home,
        "`token` can be read by other users (mode 0644)",
        &format!("chmod 600 {}", token.display()),
    );
    chmod(&token, 0o600);
    starts(&home);
}

/// Issue 46: a front end whose environment has another `SWITCHBOARD_TOKEN` is refused with the
/// reason, whether the daemon runs or the front end would start it; today it attached, and once
/// it started the daemon (after a crash) its token won: senders using the old one got 401.
#[test]
fn a_front_end_with_another_token_is_refused_and_the_daemons_token_stays() {
    let (home, _guard) = home_with_rules();
    let home = home.path();
    let addr = started_by_the_operator(home);
    let body = r#"{"server":"s","channel":"news/a","content":"one"}"#;
    // stdin is empty: a front end that is let through ends at once.
    let front_end = |token: Option<&str>| {
        let mut cmd = std::process::Command::new(bin());
        cmd.arg("--home").arg(home).arg("serve");
        match token {
            Some(t) => cmd.env("SWITCHBOARD_TOKEN", t),
            None => cmd.env_remove("SWITCHBOARD_TOKEN"),
        };
        cmd
    };
    let refused_front_end = || {
        let err = exits_1(&mut front_end(Some("from-the-front-end")));
        assert!(
            err.contains(
                "`SWITCHBOARD_TOKEN` in this front end's environment is not the ingest token"
            ) && err.contains(&format!(
                "`switchboard --home {home} stop`, then `SWITCHBOARD_TOKEN=... switchboard \
                 --home {home} start`",
                home = home.display()
            )),
            "{err}"
        );
    };
    refused_front_end();
    assert_eq!(try_post(&addr, "from-the-operator", body), Some(202));

    // The daemon dies: the front end with the other token does not start one.
    let first = daemon_pid(home).expect("a daemon");
    unsafe { libc::kill(first as i32, libc::SIGKILL) };
    eventually(Duration::from_secs(5), "the daemon is gone", || {
        (!alive(first)).then_some(())
    });
    refused_front_end();
    assert_eq!(
        try_post(&addr, "from-the-front-end", body),
        None,
        "no daemon"
    );
    // One without the variable (or with the same token) brings it back with its own token.
    let run = run_limited(
        &mut front_end(Some("from-the-operator")),
        Duration::from_secs(30),
    );
    assert!(run.status.is_some_and(|s| s.success()), "{}", run.stderr);
    assert_eq!(try_post(&addr, "from-the-operator", body), Some(202));
    assert_eq!(try_post(&addr, "from-the-front-end", body), Some(401));
}

#[test]
fn a_home_switchboard_creates_is_0700_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    let home = base.path().join("new/home");
    let _guard = DaemonGuard(home.clone());
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$0\" --home \"$1\" start --no-listen")
        .arg(bin())
        .arg(&home)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{mode:o}");
    stop_daemon(&home);
}
