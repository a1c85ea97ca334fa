//! Hostile input and hostile clients against the real binary: what an attacker or a broken
//! sender can do to the rules watcher, HTTP ingest, the control socket and the terminal. Each
//! test asserts the documented answer, that the server stays up, and that nothing it
//! acknowledged is lost.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::util::*;

/// One request to ingest on a fresh connection, with the bearer token.
fn request(sb: &Switchboard, method: &str, path: &str, body: &[u8]) -> Reply {
    let token = format!("Bearer {}", sb.token());
    http_request(
        sb.ingest.as_deref().expect("ingest address"),
        method,
        path,
        &[
            ("Authorization", token.as_str()),
            ("Content-Type", "application/json"),
        ],
        body,
    )
}

fn post(sb: &Switchboard, body: &[u8]) -> Reply {
    request(sb, "POST", "/v1/messages", body)
}

fn reloads(sb: &Switchboard, result: &str) -> f64 {
    metric(
        sb,
        &format!("switchboard_rule_reloads_total{{result=\"{result}\"}}"),
    )
    .unwrap_or_else(|| panic!("no reload counter for {result}"))
}

/// Every seq in the inbox journal.
fn journal_seqs(home: &Path) -> Vec<u64> {
    std::fs::read_to_string(home.join("channels.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["seq"].as_u64())
        .collect()
}

/// The seqs of a 202 answer.
fn accepted(reply: &Reply) -> Vec<u64> {
    assert_eq!(reply.status, 202, "{}", reply.body);
    reply.json()["accepted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["seq"].as_u64().unwrap())
        .collect()
}

/// Writes `text` to the home's triggers.json the way editors do (temporary file + rename).
fn save_rules(sb: &Switchboard, text: &str) {
    let tmp = sb.home.path().join(".triggers.json.swp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, sb.home.path().join("triggers.json")).unwrap();
}

const RULES_A: &str =
    r#"{"rules":[{"name":"a","channel":"alerts/*","mode":"confirm","prompt":"A {{content}}"}]}"#;
const RULES_B: &str =
    r#"{"rules":[{"name":"b","channel":"ci/*","mode":"confirm","prompt":"B {{content}}"}]}"#;

/// Waits until the rules watcher has handled every event made before the call: saves a change
/// of `switchboard.json` (`actions.queueCapacity` = `mark`, a value of its own) and waits for
/// the daemon to apply it. The watcher takes the events of the home in order and, in one batch,
/// reloads the rules before the settings, so once the mark is applied whatever `triggers.json`
/// did before has been looked at: what did not reload by then never will.
fn watcher_caught_up(sb: &Switchboard, mark: u64) {
    let path = sb.home.path().join("switchboard.json");
    let mut config: Value = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({}));
    config["actions"]["queueCapacity"] = json!(mark);
    std::fs::write(&path, config.to_string()).unwrap();
    eventually(
        Duration::from_secs(10),
        "the watcher applies the mark",
        || {
            let stats = control(sb.home.path(), json!({"op": "stats"}));
            (stats["result"]["delivery"]["capacity"] == mark).then_some(())
        },
    );
}

#[test]
fn one_save_is_one_reload_and_reading_the_file_reloads_nothing() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULES_A);
    sb.spawn();
    assert_eq!(reloads(&sb, "ok"), 0.0, "the boot load is not a reload");

    save_rules(&sb, RULES_B);
    eventually(Duration::from_secs(10), "the save is reloaded", || {
        (reloads(&sb, "ok") >= 1.0).then_some(())
    });
    // Reading the file (as the reload itself and `rules check` do) and rewriting the same
    // bytes change nothing.
    for _ in 0..3 {
        std::fs::read_to_string(sb.home.path().join("triggers.json")).unwrap();
    }
    let check = sb.cli(&["rules", "check"]);
    assert!(check.status.success(), "{}", stderr(&check));
    std::fs::write(sb.home.path().join("triggers.json"), RULES_B).unwrap();
    watcher_caught_up(&sb, 101);
    assert_eq!(
        reloads(&sb, "ok"),
        1.0,
        "one save, one reload:\n{}",
        sb.log()
    );
    let logged = sb.log().matches("rules loaded from").count();
    assert_eq!(logged, 2, "boot + one reload in the log:\n{}", sb.log());

    // An explicit reload always reloads, and counts.
    let out = sb.cli(&["rules", "reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(reloads(&sb, "ok"), 2.0);

    // An invalid save is counted as such, once.
    save_rules(&sb, r#"{"rules":[{"name":"x","mode":"loud"}]}"#);
    eventually(Duration::from_secs(10), "the invalid save is seen", || {
        (reloads(&sb, "invalid") >= 1.0).then_some(())
    });
    std::fs::remove_file(sb.home.path().join("triggers.json")).unwrap();
    eventually(Duration::from_secs(10), "the removal is seen", || {
        (reloads(&sb, "missing") >= 1.0).then_some(())
    });
    watcher_caught_up(&sb, 102);
    assert_eq!(reloads(&sb, "invalid"), 1.0);
    assert_eq!(reloads(&sb, "missing"), 1.0);
    assert_eq!(reloads(&sb, "ok"), 2.0);
    sb.terminate();
}

/// The names of the live rules.
fn live_rules(sb: &Switchboard) -> Vec<String> {
    let r = control(sb.home.path(), json!({"op": "rules"}));
    r["result"]
        .as_array()
        .unwrap_or_else(|| panic!("no rules in {r}"))
        .iter()
        .map(|rule| rule["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn edits_to_the_target_of_a_symlinked_triggers_json_are_reloaded() {
    // The rules live in a checkout outside the home; the home links to them.
    let checkout = tempfile::tempdir().unwrap();
    let target = checkout.path().join("oncall-rules.json");
    std::fs::write(&target, RULES_A).unwrap();
    let mut sb = Switchboard::new();
    let link = sb.home.path().join("triggers.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    sb.spawn();
    assert_eq!(live_rules(&sb), ["a"]);

    // Written in place at the target.
    std::fs::write(&target, RULES_B).unwrap();
    eventually(
        Duration::from_secs(10),
        "the in-place edit is reloaded",
        || (live_rules(&sb) == ["b"]).then_some(()),
    );
    // Saved the way editors do, beside the target (temporary file + rename).
    let swap = checkout.path().join(".oncall-rules.json.swp");
    std::fs::write(&swap, RULES_A).unwrap();
    std::fs::rename(&swap, &target).unwrap();
    eventually(
        Duration::from_secs(10),
        "the editor's save is reloaded",
        || (live_rules(&sb) == ["a"]).then_some(()),
    );

    // The link pointed at another file elsewhere: that file is followed from then on.
    let elsewhere = tempfile::tempdir().unwrap();
    let other = elsewhere.path().join("rules.json");
    std::fs::write(&other, RULES_B).unwrap();
    let new_link = sb.home.path().join(".triggers.json.new");
    std::os::unix::fs::symlink(&other, &new_link).unwrap();
    std::fs::rename(&new_link, &link).unwrap();
    eventually(
        Duration::from_secs(10),
        "the re-pointed link is reloaded",
        || (live_rules(&sb) == ["b"]).then_some(()),
    );
    let c = r#"{"rules":[{"name":"c","channel":"x/*","mode":"notify"}]}"#;
    std::fs::write(&other, c).unwrap();
    eventually(
        Duration::from_secs(10),
        "the new target's edit is reloaded",
        || (live_rules(&sb) == ["c"]).then_some(()),
    );
    // The old target is no longer the rules: editing it changes nothing.
    std::fs::write(&target, RULES_B).unwrap();
    watcher_caught_up(&sb, 101);
    assert_eq!(live_rules(&sb), ["c"]);
    sb.terminate();
}

/// Issue 46, finding 1: the rules and the settings are links into a directory that becomes
/// writable by others (a shared checkout, a careless `chmod`); another local user replaces
/// both by rename, the rules with an `auto` rule that runs `bash`. Today the live reload loaded
/// it at once (the start check looked only at the target file, and a reload checked nothing).
#[test]
fn a_rules_or_settings_file_another_user_can_replace_is_never_reloaded() {
    if !running_as_root("a_rules_or_settings_file_another_user_can_replace_is_never_reloaded") {
        return;
    }
    let shared = tempfile::tempdir().unwrap();
    chmod(shared.path(), 0o755);
    let rules = shared.path().join("rules.json");
    let settings = shared.path().join("settings.json");
    std::fs::write(&rules, RULES_A).unwrap();
    std::fs::write(&settings, r#"{"http": {"rateLimit": "100/1s"}}"#).unwrap();
    let mut sb = Switchboard::new();
    std::os::unix::fs::symlink(&rules, sb.home.path().join("triggers.json")).unwrap();
    std::os::unix::fs::symlink(&settings, sb.home.path().join("switchboard.json")).unwrap();
    sb.spawn();
    assert_eq!(live_rules(&sb), ["a"]);

    chmod(shared.path(), 0o777);
    let evil =
        r#"{"rules":[{"name":"evil","channel":"*","mode":"auto","prompt":"x","tools":["bash"]}]}"#;
    as_nobody(
        r#"printf %s "$1" > "$3/.r" && mv "$3/.r" "$3/rules.json" &&
           printf %s "$2" > "$3/.s" && mv "$3/.s" "$3/settings.json""#,
        &[
            Path::new(evil),
            Path::new(r#"{"http": {"rateLimit": "0"}}"#),
            shared.path(),
        ],
    );
    eventually(Duration::from_secs(10), "the reload is refused", || {
        (reloads(&sb, "unsafe") >= 1.0).then_some(())
    });
    assert_eq!(live_rules(&sb), ["a"], "the live rules stay");
    let dir = std::fs::canonicalize(shared.path()).unwrap();
    let why = format!(
        "{}, the directory `triggers.json` leads to, is writable by its group and others (mode 0777)",
        dir.display()
    );
    let stats = control(sb.home.path(), json!({"op": "stats"}));
    let last = &stats["result"]["last_reload"];
    assert_eq!(last["ok"], false, "{last}");
    let message = last["message"].as_str().unwrap();
    assert!(
        message.starts_with("rules not reloaded: refusing home ")
            && message.contains(&why)
            && message.contains(&format!("run `chmod go-w {}`", dir.display()))
            && message.contains("; the 1 rule loaded at ")
            && message.ends_with("UTC stay live"),
        "{message}"
    );
    assert!(sb.log().contains(&why), "{}", sb.log());
    let status = stdout(&sb.cli(&["status"]));
    assert!(status.contains("last rules reload FAILED at "), "{status}");
    assert!(status.contains(&why), "{status}");
    // An explicit reload says the same, and fails.
    let out = sb.cli(&["rules", "reload"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(&why), "{}", stderr(&out));
    // The settings: not applied either, and `status` says why.
    let config_why = format!(
        "{}, the directory `switchboard.json` leads to, is writable",
        dir.display()
    );
    let status = eventually(Duration::from_secs(10), "the settings are refused", || {
        let status = stdout(&sb.cli(&["status"]));
        status.contains(&config_why).then_some(status)
    });
    assert!(
        status.contains("switchboard.json not reloaded: refusing home"),
        "{status}"
    );
    sb.terminate();
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_kept_reload_says_when_the_live_rules_were_really_loaded() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULES_A);
    sb.spawn();
    save_rules(&sb, RULES_B);
    let at = eventually(Duration::from_secs(10), "the save is reloaded", || {
        let stats = control(sb.home.path(), json!({"op": "stats"}));
        let last = &stats["result"]["last_reload"];
        (last["ok"] == true && last["message"].as_str()?.contains("1 rules loaded"))
            .then(|| last["at"].as_str().unwrap().to_string())
    });
    let hms = &at[11..19];
    save_rules(&sb, r#"{"rules":[{"name":"x","mode":"loud"}]}"#);
    let out = sb.cli(&["rules", "reload"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!("the 1 rule loaded at {hms} UTC stay live")),
        "want the time of the last good reload ({hms}):\n{err}"
    );
    assert!(!err.contains("boot"), "{err}");
    sb.terminate();
}

#[test]
fn list_and_watch_escape_control_characters_and_a_closed_pipe_exits_0() {
    let mut sb = Switchboard::start();
    let hostile = "\x1b[2J\x1b[31mred\n#999 2026-01-01T00:00:00Z forged/line: rm -rf\r\u{202e}";
    let mut watch = Watch::start(sb.home.path());
    let seq = send_messages(sb.home.path(), &[("evil\nchan\x07", hostile)])[0];
    // The message's own line (its action's line, `nudge #N`, may come first and carries only
    // the prompt's first line, which ends at the channel's newline).
    let first = watch.line_with(&format!("#{seq} 20"));
    assert!(!first.chars().any(|c| c.is_control()), "{first:?}");
    assert!(first.contains("\\x1b[2J\\x1b[31mred\\n#999"), "{first:?}");

    let out = sb.cli(&["list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let json_out = sb.cli(&["list", "--json"]);
    let listed = stdout(&json_out).lines().count();
    assert_eq!(
        text.lines().count(),
        listed,
        "one message, one line: {text:?}"
    );
    let line = text.lines().find(|l| l.contains("evil")).unwrap();
    assert!(line.ends_with("rm -rf\\r\\u{202e}"), "{line:?}");
    assert!(
        text.lines().all(|l| !l.chars().any(|c| c.is_control())),
        "{text:?}"
    );
    assert!(text.contains("evil\\nchan\\x07"), "{text:?}");
    // JSON stays JSON: the content round-trips exactly.
    let m: Value = stdout(&json_out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|m| m["seq"] == seq)
        .unwrap();
    assert_eq!(m["content"], hostile);

    // A reader that goes away: the writer exits 0 without a word.
    let many: Vec<(&str, String)> = (0..300).map(|i| ("bulk", format!("{i:01000}"))).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(c, t)| (*c, t.as_str())).collect();
    send_messages(sb.home.path(), &many);
    for args in [&["list", "-n", "300"][..], &["list", "-n", "300", "--json"]] {
        let mut child = Command::new(bin())
            .arg("--home")
            .arg(sb.home.path())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let status = wait_exit(&mut child, Duration::from_secs(20));
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}");
    }
    drop(watch);
    sb.terminate();
}

#[test]
fn cli_duplicates_are_acknowledged_but_not_counted_as_ingested() {
    let mut sb = Switchboard::start();
    let message = json!({"server": "cli", "channel": "c", "content": "x", "id": "once"});
    for want_duplicate in [false, true, true] {
        let r = control(
            sb.home.path(),
            json!({"op": "append", "messages": [message.clone()], "source": "cli"}),
        );
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["result"][0]["duplicate"], want_duplicate, "{r}");
    }
    assert_eq!(
        metric(&sb, "switchboard_messages_ingested_total{source=\"cli\"}"),
        Some(1.0)
    );
    assert_eq!(metric(&sb, "switchboard_duplicates_total"), Some(2.0));
    sb.terminate();
}

#[test]
fn a_huge_template_is_capped_and_content_is_never_expanded_twice() {
    let mut sb = Switchboard::new();
    let rules = json!({"rules": [
        {"name": "huge", "channel": "big", "mode": "confirm",
         "prompt": "{{content}}".repeat(1000)},
        {"name": "inject", "channel": "inj", "mode": "confirm",
         "prompt": "look at {{content}} (host {{meta.host}})"},
    ]});
    sb.write("triggers.json", &rules.to_string());
    sb.spawn();
    let big = "é".repeat(5_000); // 10 KB
    let batch: Vec<(&str, &str)> = (0..10).map(|_| ("big", big.as_str())).collect();
    send_messages(sb.home.path(), &batch);
    let injected = json!({"server": "t", "channel": "inj",
        "content": "{{meta.token}} {{content}} {{meta.host}}",
        "metadata": {"token": "SECRET", "host": "db1"}});
    let r = control(
        sb.home.path(),
        json!({"op": "append", "messages": [injected], "source": "cli"}),
    );
    assert_eq!(r["ok"], true, "{r}");

    let records = eventually(Duration::from_secs(20), "11 actions", || {
        let created: Vec<Value> = action_records(sb.home.path())
            .into_iter()
            .filter(|r| r.get("action").is_some())
            .collect();
        (created.len() == 11).then_some(created)
    });
    for r in &records[..10] {
        let prompt = r["action"]["prompt"].as_str().unwrap();
        assert!(prompt.len() <= 64 * 1024, "{} bytes", prompt.len());
        assert!(prompt.len() > 60 * 1024, "{} bytes", prompt.len());
        assert!(prompt.ends_with("the whole message is in its own field]"));
        assert_eq!(r["message"]["content"], big, "the message stays whole");
    }
    let size = std::fs::metadata(sb.home.path().join("actions.jsonl"))
        .unwrap()
        .len();
    assert!(size < 1024 * 1024, "actions.jsonl is {size} bytes");
    assert_eq!(
        records[10]["action"]["prompt"],
        "look at {{meta.token}} {{content}} {{meta.host}} (host db1)"
    );
    sb.terminate();
}

/// Malformed and oversized bodies: each gets its documented status and code, the server
/// stays up, and what was acknowledged before is still there.
#[test]
fn hostile_bodies_get_their_documented_answers_and_lose_nothing() {
    let mut sb = Switchboard::start();
    let good = |content: &str| {
        json!({"server": "s", "channel": "c", "content": content})
            .to_string()
            .into_bytes()
    };
    let mut acked = accepted(&post(&sb, &good("before")));

    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_obj = "{\"a\":".repeat(10_000) + "1" + &"}".repeat(10_000);
    let mut invalid_utf8 = good("x");
    let at = invalid_utf8.len() - 3;
    invalid_utf8.splice(at..at, [0xff, 0xfe, 0xc3]);
    let huge_map: serde_json::Map<String, Value> = (0..200_000)
        .map(|i| (format!("k{i}"), json!("v")))
        .collect();
    let huge_map = json!({"server": "s", "channel": "c", "content": "x", "metadata": huge_map});
    let table: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "oversize",
            vec![b' '; 2 * 1024 * 1024],
            413,
            "body_too_large",
        ),
        ("deep array", deep.into_bytes(), 400, "invalid_json"),
        ("deep object", deep_obj.into_bytes(), 400, "invalid_json"),
        ("invalid utf-8", invalid_utf8, 400, "invalid_json"),
        ("not json", b"\0\0\0\0".to_vec(), 400, "invalid_json"),
        (
            "huge map",
            huge_map.to_string().into_bytes(),
            413,
            "body_too_large",
        ),
        ("empty", Vec::new(), 400, "invalid_json"),
        ("wrong shape", b"[1,2]".to_vec(), 422, "invalid_payload"),
    ];
    for (what, body, status, code) in &table {
        let reply = post(&sb, body);
        assert_eq!(reply.status, *status, "{what}: {}", reply.body);
        assert_eq!(
            reply.json()["error"].as_str(),
            Some(*code),
            "{what}: {}",
            reply.body
        );
    }
    // NULs and control characters inside strings are data: stored as sent.
    let nul = "a\0b\x1b[31m\u{7f}";
    acked.extend(accepted(&post(&sb, &good(nul))));
    let listed = sb.cli(&["list", "--json", "-c", "c"]);
    let stored: Vec<Value> = stdout(&listed)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        stored.iter().any(|m| m["content"] == nul),
        "{}",
        stdout(&listed)
    );
    acked.extend(accepted(&post(&sb, &good("after"))));
    assert_eq!(request(&sb, "GET", "/healthz", b"").status, 200);
    sb.terminate();
    let on_disk = journal_seqs(sb.home.path());
    for seq in acked {
        assert!(on_disk.contains(&seq), "acknowledged seq {seq} is lost");
    }
}

/// Lowers the open-file limit of the running server to `n`, as on a default Linux box.
fn limit_fds(sb: &Switchboard, n: u64) {
    let limit = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    let rc = unsafe {
        libc::prlimit(
            sb.pid() as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// Reads until the server closes the connection; what it sent, and how long that took.
fn until_closed(stream: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let started = Instant::now();
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the server kept the connection open for {:?}: {e}",
                started.elapsed()
            ),
        }
    }
    (
        String::from_utf8_lossy(&got).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn slow_headers_and_slow_bodies_are_cut_off() {
    let mut sb = Switchboard::start();
    let addr = sb.ingest.clone().unwrap();
    let mut acked = accepted(&post(
        &sb,
        br#"{"server":"s","channel":"c","content":"before"}"#,
    ));

    // A header that never ends.
    let mut slow_head = TcpStream::connect(&addr).unwrap();
    slow_head
        .write_all(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Slow: 1")
        .unwrap();
    // A body that stops short of its Content-Length.
    let mut slow_body = TcpStream::connect(&addr).unwrap();
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"server\":",
        sb.token()
    );
    slow_body.write_all(head.as_bytes()).unwrap();
    // A kept-alive connection that goes quiet after one request.
    let mut idle = TcpStream::connect(&addr).unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();

    let (answer, took) = until_closed(&mut slow_head, Duration::from_secs(20));
    assert!(took < Duration::from_secs(15), "header cut after {took:?}");
    assert!(
        !answer.contains(" 2"),
        "no success for half a header: {answer:?}"
    );
    let (answer, took) = until_closed(&mut idle, Duration::from_secs(20));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert!(took < Duration::from_secs(15), "idle cut after {took:?}");
    let (answer, took) = until_closed(&mut slow_body, Duration::from_secs(45));
    assert!(took < Duration::from_secs(40), "body cut after {took:?}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains(r#""error":"body_timeout""#), "{answer:?}");

    acked.extend(accepted(&post(
        &sb,
        br#"{"server":"s","channel":"c","content":"after"}"#,
    )));
    sb.terminate();
    let on_disk = journal_seqs(sb.home.path());
    assert!(
        acked.iter().all(|s| on_disk.contains(s)),
        "{acked:?} vs {on_disk:?}"
    );
}

#[test]
fn a_thousand_idle_sockets_with_1024_fds_do_not_stop_ingest_or_the_cli() {
    let mut sb = Switchboard::start();
    limit_fds(&sb, 1024);
    let addr = sb.ingest.clone().unwrap();
    let mut idle = Vec::new();
    for i in 0..1000 {
        let mut s = TcpStream::connect(&addr).expect("connect");
        if i % 2 == 0 {
            // Half of them start a header and stall.
            s.write_all(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
        }
        idle.push(s);
    }
    // A real sender still gets through: the oldest idle sockets make room.
    let mut acked = Vec::new();
    for i in 0..20 {
        let body = json!({"server": "s", "channel": "c", "content": format!("m{i}")});
        acked.extend(accepted(&post(&sb, body.to_string().as_bytes())));
    }
    let out = sb.cli(&["stats"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let open = std::fs::read_dir(format!("/proc/{}/fd", sb.pid()))
        .unwrap()
        .count();
    assert!(open < 400, "the server holds {open} descriptors");
    assert!(!sb.log().contains("Too many open files"), "{}", sb.log());
    drop(idle);
    sb.terminate();
    let on_disk = journal_seqs(sb.home.path());
    assert!(acked.iter().all(|s| on_disk.contains(s)));
}

#[test]
fn every_busy_connection_gets_a_clear_503() {
    // Fill every slot with a request in flight (a body that is still arriving), then one more.
    let mut sb = Switchboard::start();
    let addr = sb.ingest.clone().unwrap();
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n",
        sb.token()
    );
    let mut busy = Vec::new();
    for _ in 0..256 {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        // `100 Continue` comes once the handler reads the body: the request is in flight.
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = [0u8; 25];
        s.read_exact(&mut got).expect("100 continue");
        assert!(
            got.starts_with(b"HTTP/1.1 100"),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
        busy.push(s);
    }
    request(&sb, "GET", "/healthz", b"").assert_error(503, "too_many_connections");
    drop(busy);
    eventually(Duration::from_secs(10), "served again", || {
        (request(&sb, "GET", "/healthz", b"").status == 200).then_some(())
    });
    sb.terminate();
}

/// Issue 46, finding 2: clients without credentials, however many and however slow, never take
/// the connections a sender with the token needs. Today's answer to the page (`POST
/// /ui/api/confirm`, always served) and to `/v1/github` (with a secret set) read the whole body
/// before any credential is checked, so 256 slow senders held every connection for 30 s and the
/// sender with the token got 503.
#[test]
fn slow_senders_without_credentials_do_not_lock_out_a_sender_with_the_token() {
    let mut sb = Switchboard::new();
    sb.write(
        "switchboard.json",
        r#"{"http": {"githubSecret": "hook-secret"}}"#,
    );
    sb.spawn();
    let addr = sb.ingest.clone().unwrap();
    let signature = format!("sha256={}", "0".repeat(64));
    // 256 GitHub deliveries whose bodies trickle (they look signed: the signature is over the
    // body, so only reading it tells).
    let mut github = Vec::new();
    for i in 0..256 {
        let mut s = TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "POST /v1/github HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: {signature}\r\n\
             X-GitHub-Event: push\r\nX-GitHub-Delivery: d-{i}\r\n\
             Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
        )
        .unwrap();
        github.push(s);
    }
    // Requests without credentials hold at most 256 - 64 connections: the other deliveries
    // are told so at once, and closed.
    let mut answers = vec![String::new(); github.len()];
    let refused = eventually(Duration::from_secs(10), "64 deliveries refused", || {
        for (s, got) in github.iter_mut().zip(answers.iter_mut()) {
            s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            let mut buf = [0u8; 4096];
            if let Ok(n) = s.read(&mut buf) {
                got.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
        let refused = answers.iter().filter(|a| !a.is_empty()).count();
        (refused >= 64).then_some(refused)
    });
    assert_eq!(refused, 64, "{answers:?}");
    for answer in answers.iter().filter(|a| !a.is_empty()) {
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
        assert!(
            answer.contains(r#""error":"too_many_connections""#),
            "{answer:?}"
        );
    }
    // Answers to the page with no session: each refused at once, from its headers, and closed.
    for _ in 0..64 {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(
            b"POST /ui/api/confirm HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              X-CSRF-Token: guess\r\nContent-Length: 100000\r\n\r\n{",
        )
        .unwrap();
        let (answer, took) = until_closed(&mut s, Duration::from_secs(10));
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer:?}");
        assert!(answer.contains(r#""error":"no_session""#), "{answer:?}");
        assert!(took < Duration::from_secs(5), "closed after {took:?}");
    }
    // With 192 slow deliveries still being read, the sender with the token gets through.
    let acked = accepted(&post(
        &sb,
        br#"{"server":"s","channel":"c","content":"with the token"}"#,
    ));
    assert_eq!(acked.len(), 1);
    drop(github);
    sb.terminate();
}

/// A connection that sent one request (`GET /healthz`, or `GET /mcp` with the token and no
/// session, for a 4xx: a refusal without a credential would close it), read its whole answer,
/// and stays open, as an HTTP client's keep-alive pool leaves it.
fn kept_alive(addr: &str, path: &str, token: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).expect("the answer");
        assert!(
            n > 0,
            "closed before answering: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or_else(|| panic!("no content-length: {head}"));
        if body.len() >= length {
            assert!(head.starts_with("HTTP/1.1 "), "{head}");
            return s;
        }
    }
}

/// Whether the server has closed `s` (without waiting for it to).
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
    match s.read(&mut [0u8; 1]) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

#[test]
fn kept_alive_connections_between_requests_make_room_for_real_senders() {
    let mut sb = Switchboard::start();
    let ingest = sb.ingest.clone().unwrap();
    let mcp = sb.mcp_url.clone().expect("/mcp listens");
    let mcp_addr = mcp
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    // Every slot of the listeners (one, when `/mcp` is served beside ingest): a connection
    // that was answered and is kept alive.
    let shared = mcp_addr == ingest;
    let started = Instant::now();
    let mut held = Vec::new();
    let secret = sb.token();
    for i in 0..256 {
        if shared {
            held.push(kept_alive(&ingest, ["/healthz", "/mcp"][i % 2], &secret));
        } else {
            held.push(kept_alive(&ingest, "/healthz", &secret));
            held.push(kept_alive(&mcp_addr, "/mcp", &secret));
        }
    }
    // A sender with the token gets through at once: an idle connection makes room.
    let mut acked = Vec::new();
    for i in 0..3 {
        let body = json!({"server": "s", "channel": "c", "content": format!("m{i}")});
        acked.extend(accepted(&post(&sb, body.to_string().as_bytes())));
    }
    // So does an MCP client.
    let token = format!("Bearer {}", sb.token());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "keep-alive-test", "version": "1"}}});
    let reply = http_request(
        &mcp_addr,
        "POST",
        "/mcp",
        &[
            ("Authorization", token.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        init.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.contains("serverInfo"), "{}", reply.body);
    // Before the 10 s idle timeout could have freed a slot on its own.
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "too slow to tell room made from the idle timeout: {:?}",
        started.elapsed()
    );
    // Room was made by closing kept-alive connections, one per new connection at most.
    let closed = held.iter_mut().map(closed_by_server).filter(|c| *c).count();
    assert!(
        (1..=4).contains(&closed),
        "{closed} kept-alive connections closed"
    );
    drop(held);
    sb.terminate();
    let on_disk = journal_seqs(sb.home.path());
    assert!(acked.iter().all(|s| on_disk.contains(s)));
}

#[test]
fn the_control_socket_drops_silent_clients_and_says_when_it_is_full() {
    let mut sb = Switchboard::start();
    let sock = sb.home.path().join("control.sock");
    let mut watch = Watch::start(sb.home.path());

    // 64 silent clients fill the room for connections that have not said hello: the CLI is told
    // why.
    let silent: Vec<std::os::unix::net::UnixStream> = (0..64)
        .map(|_| std::os::unix::net::UnixStream::connect(&sock).unwrap())
        .collect();
    let out = sb.cli(&["stats"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("the control socket is busy"),
        "{}",
        stderr(&out)
    );

    // Each silent client is told and dropped after the request timeout.
    let started = Instant::now();
    for s in silent {
        let mut line = String::new();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        BufReader::new(s).read_line(&mut line).unwrap();
        assert!(line.contains("no hello within 5s"), "{line:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(12));
    let out = sb.cli(&["stats"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The watch stream is exempt: it still gets messages.
    send_messages(sb.home.path(), &[("c", "second")]);
    watch.line_with("second");

    // An endless request line is refused, not buffered forever.
    let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    let chunk = vec![b'x'; 1024 * 1024];
    for _ in 0..5 {
        if s.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    assert!(line.contains("longer than"), "{line:?}");
    drop(watch);
    sb.terminate();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_poll_outlives_the_header_timeout_and_an_idle_client_reconnects() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;

    let mut sb = Switchboard::start();
    let client = ().serve(http_transport(&sb)).await.unwrap();
    let wait = |timeout_s: u64| {
        let mut params = CallToolRequestParams::new("wait_for_inbound_message");
        params.arguments = json!({"timeout_s": timeout_s}).as_object().cloned();
        params
    };
    // Longer than the 10 s header/idle timeout: a response in progress is never cut.
    let started = Instant::now();
    let result = client
        .call_tool(wait(13))
        .await
        .expect("the long poll answers");
    assert!(
        started.elapsed() >= Duration::from_secs(12),
        "{:?}",
        started.elapsed()
    );
    assert_ne!(result.is_error, Some(true));
    // Idle past the keep-alive timeout: a kept-alive connection that answered a request is
    // closed by the daemon once it has sat idle for the header timeout (10 s), and the client,
    // idle as long, still gets its next call through.
    let mut idle = TcpStream::connect(sb.ingest.as_deref().unwrap()).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.ends_with(b"\r\n\r\nok\n") {
        let n = idle.read(&mut buf).expect("the answer to /healthz");
        assert!(
            n > 0,
            "closed before answering: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buf[..n]);
    }
    let idle_since = Instant::now();
    let n = idle
        .read(&mut buf)
        .expect("the daemon closes the idle connection");
    assert_eq!(n, 0, "sent more than its answer");
    assert!(
        idle_since.elapsed() >= Duration::from_secs(9),
        "closed after {:?} idle, before the keep-alive timeout",
        idle_since.elapsed()
    );
    let seq = send_messages(sb.home.path(), &[("c", "wake")])[0];
    let result = client
        .call_tool(wait(5))
        .await
        .expect("answered after idling");
    let v = result.structured_content.unwrap();
    assert_eq!(v["items"][0]["message"]["seq"], seq, "{v}");
    client.cancel().await.unwrap();
    sb.terminate();
}

/// Issue 26.6: `[\s\S]{1,5000}ZZZ` passes `rules check` and took 13-18 s per 200 kB message
/// that contains `ZZZ`; five such messages held an unrelated auto item back 97 s. The regex now
/// stops at its budget: the other rule's work is recorded at once, and the stopped searches
/// are counted for the slow rule.
#[test]
fn a_slow_regex_does_not_hold_up_another_rules_work() {
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        r#"{"rules": [
  {"name": "slow", "channel": "big", "contentRegex": "[\\s\\S]{1,5000}ZZZ", "mode": "auto",
   "prompt": "slow {{content}}", "tools": ["shell"]},
  {"name": "quick", "channel": "ops", "mode": "auto", "prompt": "deploy {{content}}",
   "tools": ["shell"]}
]}"#,
    );
    sb.spawn();
    let check = sb.cli(&["rules", "check"]);
    assert!(
        check.status.success(),
        "{}{}",
        stdout(&check),
        stderr(&check)
    );

    let mut big = "a".repeat(200_000);
    big.push_str("ZZZ");
    let batch: Vec<(&str, &str)> = (0..5).map(|_| ("big", big.as_str())).collect();
    send_messages(sb.home.path(), &batch);
    let started = Instant::now();
    let seq = send_messages(sb.home.path(), &[("ops", "v2")])[0];
    eventually(
        Duration::from_secs(30),
        "the quick rule's work is recorded",
        || {
            action_records(sb.home.path())
                .iter()
                .any(|r| r["action"]["seq"] == seq && r["action"]["rule"] == "quick")
                .then_some(())
        },
    );
    let waited = started.elapsed();
    assert_eq!(
        metric(&sb, "switchboard_regex_budget_total{rule=\"slow\"}"),
        Some(5.0),
        "each stopped search is counted for its rule"
    );
    assert!(
        sb.log().contains("content regex over its budget"),
        "the log says which regex and why:\n{}",
        sb.log()
    );
    eprintln!("the quick rule's work was recorded {waited:?} after it was sent");
}

/// Issue 46.3: a guard (`confirm`, `stop`) whose regex gave up on a 260 kB message with one
/// non-ASCII character counted as not matching, so the auto rule after it ran with `bash` and
/// no confirm; `rules test --explain` said `no_match`. That message is now decided (the guard
/// asks). A message the guard still cannot decide within its budget (it holds a `ſ`, which
/// `(?i)s` matches) counts as a match for the guard, whose confirm says why, and as no match
/// for a notify rule; `rules test --explain` and `/metrics` say `regex_budget`.
#[test]
fn a_guard_that_cannot_decide_its_regex_fails_closed() {
    const GUARD: &str =
        r"(?i)\\b(?:rm\\s+-rf|drop\\s+(?:table|database)|truncate\\s+table|chmod\\s+-R\\s+777)\\b";
    let rules = format!(
        r#"{{"rules": [
  {{"name": "audit", "contentRegex": "{GUARD}", "prompt": "note it"}},
  {{"name": "guard", "contentRegex": "{GUARD}", "mode": "confirm", "prompt": "dangerous: ask first",
   "stop": true}},
  {{"name": "run", "mode": "auto", "prompt": "handle it", "tools": ["bash"]}}
]}}"#
    );
    let mut sb = Switchboard::new();
    sb.write("triggers.json", &rules);
    sb.spawn();
    let filler = "routine log line, nothing to see\n".repeat(7_900);
    let accented = format!("{filler}café closed; now DROP TABLE users;");
    let undecidable = format!("{filler}ſ; now DROP TABLE users;");
    assert!(accented.len() > 260_000);
    let seqs = send_messages(
        sb.home.path(),
        &[
            ("db", accented.as_str()),
            ("db", undecidable.as_str()),
            ("db", "all quiet"),
        ],
    );
    let records = eventually(Duration::from_secs(30), "the quiet message's work", || {
        let records = action_records(sb.home.path());
        records
            .iter()
            .any(|r| r["action"]["seq"] == seqs[2] && r["action"]["rule"] == "run")
            .then_some(records)
    });
    let fired = |seq: u64| -> Vec<(String, String, String)> {
        records
            .iter()
            .filter(|r| r["action"]["seq"] == seq)
            .map(|r| {
                let a = &r["action"];
                (
                    a["rule"].as_str().unwrap().to_string(),
                    a["mode"].as_str().unwrap().to_string(),
                    a["prompt"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let accented_fired = fired(seqs[0]);
    let rules_modes: Vec<_> = accented_fired
        .iter()
        .map(|(r, m, _)| (r.as_str(), m.as_str()))
        .collect();
    assert_eq!(
        rules_modes,
        [("audit", "notify"), ("guard", "confirm")],
        "decided: the guard asks, nothing runs"
    );
    assert_eq!(accented_fired[1].2, "dangerous: ask first");
    let undecided = fired(seqs[1]);
    let rules_modes: Vec<_> = undecided
        .iter()
        .map(|(r, m, _)| (r.as_str(), m.as_str()))
        .collect();
    assert_eq!(
        rules_modes,
        [("guard", "confirm")],
        "undecided: the guard asks"
    );
    assert!(
        undecided[0].2.contains("regex budget (regex_budget)")
            && undecided[0].2.ends_with("\n\ndangerous: ask first"),
        "the confirm says why: {}",
        undecided[0].2
    );
    assert_eq!(
        metric(&sb, "switchboard_regex_budget_total{rule=\"guard\"}"),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &sb,
            "switchboard_suppressed_total{rule=\"audit\",reason=\"regex_budget\"}"
        ),
        Some(1.0)
    );

    // `rules test --explain` says the same.
    let dir = sb.home.path();
    std::fs::write(dir.join("guard-rules.json"), &rules).unwrap();
    let lines: Vec<String> = [&accented, &undecidable]
        .iter()
        .map(|c| {
            json!({"server": "test", "channel": "db", "content": c, "timestamp": "2026-11-22T10:00:00Z"})
                .to_string()
        })
        .collect();
    std::fs::write(dir.join("guard-messages.jsonl"), lines.join("\n")).unwrap();
    let out = sb.cli(&[
        "rules",
        "test",
        "--rules",
        dir.join("guard-rules.json").to_str().unwrap(),
        "--messages",
        dir.join("guard-messages.jsonl").to_str().unwrap(),
        "--explain",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let explained: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary: Vec<_> = explained
        .iter()
        .map(|l| {
            (
                l["msg"].as_u64().unwrap(),
                l["rule"].as_str().unwrap(),
                l["mode"]
                    .as_str()
                    .or(l["reason"].as_str())
                    .unwrap_or_default(),
                l["undecided"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (0, "audit", "notify", ""),
            (0, "guard", "confirm", ""),
            (0, "run", "stopped", ""),
            (1, "audit", "regex_budget", ""),
            (1, "guard", "confirm", "regex_budget"),
            (1, "run", "stopped", ""),
        ]
    );
    assert!(
        explained[3]["detail"]
            .as_str()
            .unwrap()
            .contains("could not be decided within the regex budget"),
        "{}",
        explained[3]
    );
}
