//! The inbox through the real binary: durability across `kill -9` and restart.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::util::*;

/// Sends one message over the control socket; `Some(seq)` once it is acknowledged.
fn send_raw(home: &std::path::Path, content: &str) -> Option<u64> {
    let call = serde_json::json!({
        "op": "append",
        "source": "cli",
        "messages": [{"server": "crash", "channel": "test", "content": content}],
    });
    let response = try_control(home, &call)?;
    response["result"][0]["seq"].as_u64()
}

fn journal(home: &std::path::Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for name in ["channels.jsonl.1", "channels.jsonl"] {
        let text = std::fs::read_to_string(home.join(name)).unwrap_or_default();
        out.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
    }
    out
}

#[test]
fn every_acknowledged_message_survives_kill_9_exactly_once() {
    let mut sb = Switchboard::start();
    let home = sb.home.path().to_path_buf();
    let acked: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let home = home.clone();
            let acked = acked.clone();
            std::thread::spawn(move || {
                for i in 0.. {
                    let content = format!("writer {w} message {i}");
                    match send_raw(&home, &content) {
                        Some(seq) => acked.lock().unwrap().push((seq, content)),
                        None => break,
                    }
                }
            })
        })
        .collect();
    // Kill mid-stream, once a good number of messages are acknowledged.
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.lock().unwrap().len() < 300 {
        assert!(
            Instant::now() < deadline,
            "only {} acknowledged in 30 s",
            acked.lock().unwrap().len()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    sb.kill9();
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();

    sb.spawn();
    let records = journal(&home);
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    let unique: HashSet<u64> = seqs.iter().copied().collect();
    assert_eq!(unique.len(), seqs.len(), "no seq stored twice");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "journal in seq order");
    for (seq, content) in &acked {
        let found: Vec<_> = records
            .iter()
            .filter(|r| r["content"] == content.as_str())
            .collect();
        assert_eq!(
            found.len(),
            1,
            "acknowledged {content:?} stored exactly once"
        );
        assert_eq!(found[0]["seq"].as_u64(), Some(*seq));
    }
    // The restarted server continues after the highest seq on disk.
    let out = sb.cli(&["send", "--channel", "test", "after the crash"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        format!("seq {}", seqs.last().unwrap() + 1)
    );
}

#[test]
fn home_directory_and_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Switchboard::start();
    assert!(sb.cli(&["send", "-c", "x", "hello"]).status.success());
    let mode = |name: &str| {
        std::fs::metadata(sb.home.path().join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    for file in ["channels.jsonl", "lock", "control.sock", "endpoint.json"] {
        assert_eq!(mode(file), 0o600, "{file}");
    }
    let fresh = tempfile::tempdir().unwrap();
    let home = fresh.path().join("new-home");
    let mut child = std::process::Command::new(bin())
        .arg("--home")
        .arg(&home)
        .args(["serve", "--no-stdio", "--no-listen"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !home.join("endpoint.json").exists() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir_mode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o777;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(dir_mode, 0o700);
}
