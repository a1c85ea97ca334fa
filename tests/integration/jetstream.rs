//! Many instances on one NATS JetStream stream: a real `nats-server -js` on loopback (installed
//! with apt-get when missing) and switchboard daemons as separate processes with separate
//! homes, each stopped at the end (their `Drop`), like the server.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::util::{Switchboard, apt_install, eventually, free_port, http_request, on_path, stdout};

/// A `nats-server -js` on a loopback port with its store in a temporary directory; killed
/// when dropped.
struct Nats {
    binary: PathBuf,
    port: u16,
    store: tempfile::TempDir,
    child: Option<Child>,
}

impl Nats {
    /// Starts one, or `None` (the test is skipped) where there is no apt-get to install it.
    fn start() -> Option<Nats> {
        let binary = nats_binary()?;
        let mut nats = Nats {
            binary,
            port: free_port(),
            store: tempfile::tempdir().unwrap(),
            child: None,
        };
        nats.spawn();
        Some(nats)
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the server on the same port and store; returns once it accepts connections.
    fn spawn(&mut self) {
        let child = Command::new(&self.binary)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.store.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nats-server");
        self.child = Some(child);
        let addr = format!("127.0.0.1:{}", self.port);
        eventually(Duration::from_secs(10), "nats-server listens", || {
            std::net::TcpStream::connect(&addr).ok()
        });
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Debian's `nats-server`, installed with apt when missing; `None` only where there is no
/// apt-get.
fn nats_binary() -> Option<PathBuf> {
    if let Some(found) = on_path("nats-server") {
        return Some(found);
    }
    if on_path("apt-get").is_none() {
        eprintln!("SKIPPED: nats-server is not installed and there is no apt-get to install it");
        return None;
    }
    apt_install(&["nats-server"]);
    Some(on_path("nats-server").expect("nats-server after apt-get install"))
}

/// A daemon on a fresh home named `name` on the stream of `nats`, ingest on a free port.
fn instance(nats: &Nats, name: &str) -> Switchboard {
    let mut sb = Switchboard::new();
    sb.write(
        "switchboard.json",
        &serde_json::json!({
            "jetstream": {
                "servers": [nats.url()],
                "instance": name,
                "publishTimeout": "2s",
                "heartbeat": "200ms",
            }
        })
        .to_string(),
    );
    start(&mut sb);
    sb
}

/// (Re)starts the daemon of `sb` and waits until its consumer is ready.
fn start(sb: &mut Switchboard) {
    sb.spawn_with(&["daemon", "--listen", "127.0.0.1:0"]);
    eventually(Duration::from_secs(20), "the consumer is ready", || {
        (jetstream_state(sb)["ready"] == true).then_some(())
    });
}

/// The `jetstream` part of `status --json`.
fn jetstream_state(sb: &Switchboard) -> serde_json::Value {
    let out = sb.cli(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap_or_default();
    v["stats"]["jetstream"].clone()
}

/// Posts one message to `sb`'s ingest; the status and the body.
fn post(sb: &Switchboard, body: serde_json::Value) -> super::util::Reply {
    let auth = format!("Bearer {}", sb.token());
    http_request(
        sb.ingest.as_deref().expect("ingest"),
        "POST",
        "/v1/messages",
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

/// Every message in `sb`'s inbox, oldest first.
fn messages(sb: &Switchboard) -> Vec<serde_json::Value> {
    let out = sb.cli(&["list", "--json", "--limit", "100000"]);
    stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn contents(sb: &Switchboard) -> Vec<String> {
    messages(sb)
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_message_posted_to_one_instance_reaches_every_instance_once() {
    let Some(nats) = Nats::start() else { return };
    let all = [
        instance(&nats, "oncall-a"),
        instance(&nats, "oncall-b"),
        instance(&nats, "oncall-c"),
    ];
    let msg = serde_json::json!({"server": "alertmanager", "channel": "alerts/critical",
        "content": "HighLatency on api-1", "id": "fp-1"});
    let r = post(&all[0], msg.clone());
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(
        r.seqs(),
        [(1, false)],
        "the sender hears its own inbox's seq"
    );
    // A retry of the same source id is dropped by JetStream's duplicate window.
    let again = post(&all[1], msg);
    assert_eq!(again.status, 202, "{}", again.body);
    assert_eq!(again.seqs(), [(1, true)]);
    for sb in &all {
        let got = eventually(Duration::from_secs(10), "the message everywhere", || {
            let m = messages(sb);
            (!m.is_empty()).then_some(m)
        });
        assert_eq!(got.len(), 1, "stored once: {got:?}");
        assert_eq!(got[0]["content"], "HighLatency on api-1");
        assert_eq!(got[0]["channel"], "alerts/critical");
        assert_eq!(got[0]["metadata"]["jetstream.instance"], "oncall-a");
        assert_eq!(got[0]["metadata"]["jetstream.seq"], "1");
    }
    // Each instance lists the two others, heard on the heartbeat subject.
    let heard = eventually(Duration::from_secs(10), "the others are heard", || {
        let st = jetstream_state(&all[2]);
        let mut names: Vec<String> = st["instances"]
            .as_array()?
            .iter()
            .filter_map(|i| i["instance"].as_str().map(String::from))
            .collect();
        names.sort();
        (names.len() == 2).then_some(names)
    });
    assert_eq!(heard, ["oncall-a", "oncall-b"]);
    let status = stdout(&all[2].cli(&["status"]));
    assert!(
        status.contains("jetstream: connected as `oncall-c`, stream SWITCHBOARD ready"),
        "{status}"
    );
    assert!(status.contains("oncall-a ("), "{status}");
    let auth = format!("Bearer {}", all[2].token());
    let metrics = http_request(
        all[2].ingest.as_deref().unwrap(),
        "GET",
        "/metrics",
        &[("Authorization", auth.as_str())],
        b"",
    );
    for line in [
        "switchboard_jetstream_connected 1",
        "switchboard_jetstream_instances 2",
        "switchboard_jetstream_stored_total 1",
        "switchboard_jetstream_applied_seq 1",
    ] {
        assert!(metrics.body.contains(line), "{line}: {}", metrics.body);
    }
}

#[test]
fn an_instance_down_for_a_while_catches_up_on_restart() {
    let Some(nats) = Nats::start() else { return };
    let a = instance(&nats, "a");
    let mut b = instance(&nats, "b");
    assert_eq!(
        post(
            &a,
            serde_json::json!({"server": "http", "channel": "x", "content": "m0"})
        )
        .status,
        202
    );
    eventually(Duration::from_secs(10), "b has m0", || {
        (contents(&b) == ["m0"]).then_some(())
    });
    b.kill9();
    let sent: Vec<String> = (1..=20).map(|i| format!("m{i}")).collect();
    for c in &sent {
        let r = post(
            &a,
            serde_json::json!({"server": "http", "channel": "ci/main", "content": c}),
        );
        assert_eq!(r.status, 202, "{}", r.body);
    }
    start(&mut b);
    let mut want = vec!["m0".to_string()];
    want.extend(sent);
    let got = eventually(Duration::from_secs(20), "b caught up", || {
        let got = contents(&b);
        (got.len() >= want.len()).then_some(got)
    });
    assert_eq!(got, want, "every message once, in stream order");
    assert_eq!(
        contents(&a),
        want,
        "the same order on the ingesting instance"
    );
}

#[test]
fn nats_killed_mid_ingest_loses_no_acknowledged_message_and_ingest_answers_503_meanwhile() {
    let Some(mut nats) = Nats::start() else {
        return;
    };
    let a = Arc::new(instance(&nats, "a"));
    let b = instance(&nats, "b");
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let poster = {
        let (a, acked, refused, stop) = (a.clone(), acked.clone(), refused.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let content = format!("n{i}");
                let r = post(
                    &a,
                    serde_json::json!({"server": "http", "channel": "x", "content": content, "id": content}),
                );
                match r.status {
                    202 => acked.lock().unwrap().push(content),
                    503 => {
                        r.assert_error(503, "unavailable");
                        refused.lock().unwrap().push(content);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    other => panic!("{other}: {}", r.body),
                }
            }
        })
    };
    eventually(
        Duration::from_secs(10),
        "some messages acknowledged",
        || (acked.lock().unwrap().len() >= 20).then_some(()),
    );
    nats.kill9();
    eventually(Duration::from_secs(10), "ingest answers 503", || {
        (!refused.lock().unwrap().is_empty()).then_some(())
    });
    let during = jetstream_state(&a);
    assert_ne!(during["connection"], "connected", "{during}");
    // Sessions keep working on what is local: the inbox still reads.
    assert!(contents(&b).len() >= 20);
    let before = acked.lock().unwrap().len();
    nats.spawn();
    eventually(
        Duration::from_secs(20),
        "acknowledged again after the restart",
        || (acked.lock().unwrap().len() >= before + 20).then_some(()),
    );
    stop.store(true, Ordering::Relaxed);
    poster.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    for sb in [&*a, &b] {
        let got = eventually(
            Duration::from_secs(20),
            "every acknowledged message",
            || {
                let got = contents(sb);
                acked.iter().all(|c| got.contains(c)).then_some(got)
            },
        );
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), got.len(), "none stored twice: {got:?}");
    }
    let text = stdout(&a.cli(&["stats"]));
    assert!(text.contains("jetstream connected as `a`"), "{text}");
}
