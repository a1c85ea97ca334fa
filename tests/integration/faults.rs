//! Disk faults through the real binary: an unwritable journal and a full disk. Each asserts
//! what a sender sees (202 only when on disk, else 503), that a retry is not acknowledged
//! before its original is durable, that nothing acknowledged is lost after a `kill -9` during
//! the outage, and that no seq shown during the outage is handed out again.
//!
//! Making a file unwritable to an open descriptor needs `chattr +i` (root), and a small disk
//! needs `mount -t tmpfs` (root). Where either is refused the test says so on stderr and
//! returns; under `CI=true` it fails instead.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use super::util::*;

/// `POST /v1/messages` with the token; the status and the JSON body.
fn post(sb: &Switchboard, body: &Value) -> (u16, Value) {
    let addr = sb.ingest.as_deref().expect("ingest is listening");
    let body = body.to_string();
    let mut stream = TcpStream::connect(addr).expect("connect to ingest");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST /v1/messages HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Authorization: Bearer {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        sb.token(),
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read response");
    let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
    let (_, body) = raw.split_once("\r\n\r\n").expect("end of headers");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn message(content: &str, id: Option<&str>) -> Value {
    let mut m = json!({"server": "fault", "channel": "faults", "content": content});
    if let Some(id) = id {
        m["id"] = json!(id);
    }
    m
}

/// The `accepted` entries of an answer: `(seq, duplicate)`.
fn accepted(body: &Value) -> Vec<(u64, bool)> {
    body["accepted"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| (x["seq"].as_u64().unwrap(), x["duplicate"] == true))
                .collect()
        })
        .unwrap_or_default()
}

/// The journal's records, backup first.
fn journal(home: &Path) -> Vec<Value> {
    ["channels.jsonl.1", "channels.jsonl"]
        .iter()
        .flat_map(|name| {
            std::fs::read_to_string(home.join(name))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect::<Vec<Value>>()
        })
        .collect()
}

/// Sets or clears the immutable flag; false when the file system or the user cannot.
pub(super) fn immutable(path: &Path, on: bool) -> bool {
    Command::new("chattr")
        .arg(if on { "+i" } else { "-i" })
        .arg(path)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Clears the immutable flag however the test ends, so the temporary home can be removed.
pub(super) struct Immutable<'a>(pub(super) &'a Path);

impl Drop for Immutable<'_> {
    fn drop(&mut self) {
        immutable(self.0, false);
    }
}

#[test]
fn an_unwritable_journal_is_503_until_it_recovers_and_a_retry_then_lands_once() {
    let sb = Switchboard::start();
    let home = sb.home.path().to_path_buf();
    let jsonl = home.join("channels.jsonl");
    let (status, body) = post(&sb, &message("before", Some("a")));
    assert_eq!((status, accepted(&body)), (202, vec![(1, false)]), "{body}");
    if !immutable(&jsonl, true) {
        return skip("`chattr +i` is refused here");
    }
    let guard = Immutable(&jsonl);

    let (status, body) = post(&sb, &message("during", Some("b")));
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "not_durable");
    assert_eq!(accepted(&body), vec![(2, false)]);
    for _ in 0..2 {
        let (status, body) = post(&sb, &message("during", Some("b")));
        assert_eq!(
            (status, accepted(&body)),
            (503, vec![(2, true)]),
            "a retry is not a 202 while the original is not on disk: {body}"
        );
    }
    let (status, _) = post(&sb, &message("no id", None));
    assert_eq!(status, 503, "an id-less message is durable-or-503 too");
    let stats = control(&home, json!({"op": "stats"}));
    assert!(
        stats["result"]["inbox"]["journal_status"]
            .as_str()
            .is_some_and(|s| s.starts_with("failing: ")),
        "{stats}"
    );

    drop(guard);
    let (status, body) = post(&sb, &message("during", Some("b")));
    assert_eq!(
        (status, accepted(&body)),
        (202, vec![(2, true)]),
        "the retry lands the original: {body}"
    );
    let seqs: Vec<u64> = journal(&home)
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        vec![1, 2, 3],
        "kept in memory, then written once, in order"
    );
    let log = sb.log();
    assert_eq!(
        log.matches("journal write failed").count(),
        1,
        "logged once per outage:\n{log}"
    );
    assert!(log.contains("journal writes recovered"), "{log}");
}

#[test]
fn an_outage_of_503s_is_logged_at_its_start_and_its_end_and_the_rest_is_counted() {
    let sb = Switchboard::start();
    let jsonl = sb.home.path().join("channels.jsonl");
    let (status, body) = post(&sb, &message("before", None));
    assert_eq!(status, 202, "{body}");
    if !immutable(&jsonl, true) {
        return skip("`chattr +i` is refused here");
    }
    let guard = Immutable(&jsonl);
    let mut refused = 0;
    for i in 0..50 {
        let (status, body) = post(&sb, &message(&format!("during {i}"), None));
        assert_eq!(status, 503, "{body}");
        refused += 1;
    }
    drop(guard);
    // The journal retries on its own schedule: a 503 until then is part of the outage.
    eventually(Duration::from_secs(20), "stored again", || {
        let (status, _) = post(&sb, &message("after", None));
        if status == 503 {
            refused += 1;
        }
        (status == 202).then_some(())
    });
    let log = sb.log();
    assert_eq!(
        log.matches("ingest answers 503").count(),
        1,
        "one line for the start of the outage:\n{log}"
    );
    let ended = format!("ingest stores messages again, after {refused} answered 503");
    assert_eq!(log.matches(&ended).count(), 1, "{ended:?} once:\n{log}");
    let counted: f64 = ["not_durable", "not_stored"]
        .iter()
        .filter_map(|code| {
            metric(
                &sb,
                &format!("switchboard_http_rejections_total{{code=\"{code}\",status=\"503\"}}"),
            )
        })
        .sum();
    assert_eq!(counted, refused as f64, "every 503 counted");
}

#[test]
fn a_crash_during_a_journal_outage_loses_nothing_acknowledged_and_reuses_no_seq() {
    let mut sb = Switchboard::start();
    let home = sb.home.path().to_path_buf();
    let jsonl = home.join("channels.jsonl");
    let mut acked = Vec::new();
    for i in 0..5 {
        let content = format!("acked {i}");
        let (status, body) = post(&sb, &message(&content, None));
        assert_eq!(status, 202, "{body}");
        acked.push((accepted(&body)[0].0, content));
    }
    if !immutable(&jsonl, true) {
        return skip("`chattr +i` is refused here");
    }
    let guard = Immutable(&jsonl);
    let mut shown = Vec::new();
    for i in 0..3 {
        let (status, body) = post(&sb, &message(&format!("lost {i}"), None));
        assert_eq!(status, 503, "{body}");
        shown.extend(accepted(&body).into_iter().map(|(seq, _)| seq));
    }
    assert_eq!(shown, vec![6, 7, 8]);
    sb.kill9();
    drop(guard);

    sb.spawn();
    let records = journal(&home);
    for (seq, content) in &acked {
        let found: Vec<_> = records
            .iter()
            .filter(|r| r["content"] == content.as_str())
            .collect();
        assert_eq!(found.len(), 1, "acknowledged {content:?} kept exactly once");
        assert_eq!(found[0]["seq"].as_u64(), Some(*seq));
    }
    let (status, body) = post(&sb, &message("after the crash", None));
    assert_eq!(status, 202, "{body}");
    let seq = accepted(&body)[0].0;
    assert!(
        seq > *shown.iter().max().unwrap(),
        "seq {seq} was already shown in a 503 before the crash"
    );
    assert!(
        sb.log()
            .contains("may have been shown before the last stop"),
        "{}",
        sb.log()
    );
}

/// CPU seconds (user + system) the process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

#[test]
fn messages_that_outgrow_the_ring_during_an_outage_do_not_spin_a_core() {
    let sb = Switchboard::start();
    let jsonl = sb.home.path().join("channels.jsonl");
    if !immutable(&jsonl, true) {
        return skip("`chattr +i` is refused here");
    }
    let _guard = Immutable(&jsonl);
    // More than the ring's 200, none of them on disk.
    let batch: Vec<Value> = (0..300).map(|i| message(&format!("m{i}"), None)).collect();
    let (status, body) = post(&sb, &json!(batch));
    assert_eq!(status, 503, "{body}");
    let home = sb.home.path().to_path_buf();
    // The dispatcher evaluates all 300 (the built-in rule nudges each once)...
    eventually(Duration::from_secs(10), "all 300 evaluated", || {
        let stats = control(&home, json!({"op": "stats"}));
        (stats["result"]["evaluated"] == 300).then_some(())
    });
    // ...and then idles: a second of wall time costs next to no CPU.
    let before = cpu_seconds(sb.pid());
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_seconds(sb.pid()) - before;
    assert!(
        used < 0.3,
        "{used:.2} s of CPU in 1 s while idle during the outage"
    );
}

/// A 1 MiB tmpfs mounted on a directory, unmounted (lazily) on drop.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &Path) -> Option<SmallDisk> {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs"])
            .arg(dir)
            .output()
            .is_ok_and(|o| o.status.success());
        ok.then(|| SmallDisk(dir.to_path_buf()))
    }

    /// Fills the disk with a file; returns its path.
    fn fill(&self) -> std::path::PathBuf {
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 4096];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.sync_all();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

#[test]
fn a_full_disk_is_503_and_nothing_acknowledged_is_lost_after_a_crash() {
    let mut sb = Switchboard::new();
    let Some(disk) = SmallDisk::mount(sb.home.path()) else {
        return skip("`mount -t tmpfs` is refused here");
    };
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    let mut acked = Vec::new();
    for i in 0..5 {
        let content = format!("acked {i}");
        let (status, body) = post(&sb, &message(&content, Some(&format!("id-{i}"))));
        assert_eq!(status, 202, "{body}");
        acked.push((accepted(&body)[0].0, content));
    }
    let filler = disk.fill();
    let mut shown = Vec::new();
    let mut refused = Vec::new();
    // Small messages can still fit in the journal's last page: post until one is refused.
    for i in 0..200 {
        let (status, body) = post(&sb, &message(&"x".repeat(2000), Some(&format!("full-{i}"))));
        match status {
            202 => acked.push((accepted(&body)[0].0, "x".repeat(2000))),
            503 => {
                assert!(
                    ["not_durable", "not_stored"].contains(&body["error"].as_str().unwrap()),
                    "{body}"
                );
                shown.extend(accepted(&body).into_iter().map(|(seq, _)| seq));
                refused.push(format!("full-{i}"));
                if refused.len() == 3 {
                    break;
                }
            }
            _ => panic!("unexpected answer {status}: {body}"),
        }
    }
    assert_eq!(refused.len(), 3, "a full disk must be refused");
    let (status, _) = post(&sb, &message("retry", Some(&refused[0])));
    assert_ne!(
        status, 202,
        "not acknowledged while the original is not on disk"
    );

    sb.kill9();
    std::fs::remove_file(filler).unwrap();
    sb.spawn();
    let records = journal(&home);
    for (seq, content) in &acked {
        assert!(
            records
                .iter()
                .any(|r| r["seq"].as_u64() == Some(*seq) && r["content"] == content.as_str()),
            "acknowledged seq {seq} lost after the crash"
        );
    }
    let (status, body) = post(&sb, &message("after", None));
    assert_eq!(status, 202, "{body}");
    let seq = accepted(&body)[0].0;
    let highest = shown
        .iter()
        .chain(acked.iter().map(|(s, _)| s))
        .max()
        .unwrap();
    assert!(seq > *highest, "seq {seq} reused (shown up to {highest})");
    sb.kill9();
    drop(disk);
}

#[test]
fn under_fsync_never_a_crash_hands_out_no_seq_twice() {
    let mut sb = Switchboard::new();
    sb.write("switchboard.json", r#"{"inbox": {"fsync": "never"}}"#);
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    let mut shown = 0;
    for i in 0..20 {
        let batch: Vec<(&str, String)> = (0..50).map(|j| ("faults", format!("{i}-{j}"))).collect();
        let batch: Vec<(&str, &str)> = batch.iter().map(|(c, t)| (*c, t.as_str())).collect();
        shown = shown.max(*send_messages(&home, &batch).iter().max().unwrap());
    }
    assert_eq!(shown, 1000);
    sb.kill9();
    sb.spawn();
    let seq = send_messages(&home, &[("faults", "after the crash")])[0];
    assert!(seq > shown, "seq {seq} was acknowledged before the crash");
}

/// `switchboard pending --json`: the open confirm requests as the operator sees them.
fn pending(sb: &Switchboard) -> Vec<Value> {
    let out = sb.cli(&["pending", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str::<Value>(&stdout(&out))
        .unwrap()
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The `result` of `stats` over the control socket.
fn stats(home: &Path) -> Value {
    control(home, json!({"op": "stats"}))["result"].clone()
}

/// How many creation records `actions.jsonl` holds for message `seq`.
fn created_for(home: &Path, seq: u64) -> usize {
    action_records(home)
        .iter()
        .filter(|r| r["action"]["seq"] == seq)
        .count()
}

const CONFIRM_AND_AUTO: &str = r#"{"rules": [
  {"name": "ask", "channel": "alerts/*", "mode": "confirm", "prompt": "look at {{content}}",
   "confirmTimeout": "1h"},
  {"name": "triage", "channel": "work/*", "mode": "auto", "prompt": "triage {{content}}",
   "tools": ["view"]}
]}"#;

/// An outage of `actions.jsonl` with actions decided during it.
struct ActionsOutage<'a> {
    /// Ends the outage when dropped.
    guard: Immutable<'a>,
    /// A message whose work was on disk before the outage.
    before: u64,
    /// An alert (a confirm) and work, sent during the outage.
    seqs: Vec<u64>,
    /// `stats` once it says the journal fails.
    failing: Value,
}

/// Starts `sb` with [`CONFIRM_AND_AUTO`], lands one piece of work, makes `actions` (its
/// `actions.jsonl`) refuse writes, sends an alert and work, and waits for `stats` to say the
/// journal fails. `None` (after the notice) where `chattr +i` is refused.
fn actions_outage<'a>(sb: &mut Switchboard, actions: &'a Path) -> Option<ActionsOutage<'a>> {
    sb.write("triggers.json", CONFIRM_AND_AUTO);
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    let before = send_messages(&home, &[("work/a", "before the outage")])[0];
    eventually(Duration::from_secs(5), "the first work is on disk", || {
        (created_for(&home, before) == 1).then_some(())
    });
    if !immutable(actions, true) {
        skip("`chattr +i` is refused here");
        return None;
    }
    let guard = Immutable(actions);
    let seqs = send_messages(
        &home,
        &[("alerts/db", "db down"), ("work/b", "during the outage")],
    );
    let failing = eventually(Duration::from_secs(5), "stats says failing", || {
        let s = stats(&home);
        s["delivery"]["actions_journal"]
            .as_str()
            .unwrap()
            .starts_with("failing: ")
            .then_some(s)
    });
    Some(ActionsOutage {
        guard,
        before,
        seqs,
        failing,
    })
}

/// Actions decided while `actions.jsonl` cannot be written are held and written once it
/// recovers: a confirm request is shown only then, the evaluation mark waits for them, and a
/// restart finds the confirm and the work, each evaluated once.
#[test]
fn actions_decided_while_the_actions_journal_is_unwritable_land_when_it_recovers() {
    let mut sb = Switchboard::new();
    let home = sb.home.path().to_path_buf();
    let actions = home.join("actions.jsonl");
    let Some(outage) = actions_outage(&mut sb, &actions) else {
        return;
    };
    let (before, seqs, failing) = (outage.before, outage.seqs, outage.failing);
    assert!(
        pending(&sb).is_empty(),
        "a confirm request is shown only once its record is on disk"
    );
    assert!(
        failing["evaluated"].as_u64() < Some(seqs[1]),
        "the evaluation mark does not pass records that are not on disk: {failing}"
    );

    drop(outage.guard);
    let shown = eventually(Duration::from_secs(10), "the confirm is shown", || {
        let p = pending(&sb);
        (p.len() == 1).then_some(p)
    });
    assert_eq!(shown[0]["seq"], seqs[0]);
    for seq in &seqs {
        assert_eq!(created_for(&home, *seq), 1, "seq {seq} written once");
    }
    let after = eventually(Duration::from_secs(5), "stats says ok again", || {
        let s = stats(&home);
        (s["delivery"]["actions_journal"] == "ok" && s["evaluated"] == seqs[1]).then_some(s)
    });
    assert_eq!(after["delivery"]["queued_work"], 2, "{after}");
    let log = sb.log();
    assert_eq!(
        log.matches("actions journal write failed").count(),
        1,
        "one line when the outage starts:\n{log}"
    );
    assert_eq!(
        log.matches("actions journal writes recovered").count(),
        1,
        "one line when it ends:\n{log}"
    );

    assert!(sb.terminate().success());
    sb.spawn();
    assert_eq!(pending(&sb), shown, "the confirm survives the restart");
    let s = stats(&home);
    assert_eq!(s["delivery"]["queued_work"], 2, "both pieces of work: {s}");
    let next = send_messages(&home, &[("work/c", "after the restart")])[0];
    eventually(
        Duration::from_secs(5),
        "the next message is evaluated",
        || (created_for(&home, next) == 1).then_some(()),
    );
    for seq in [before, seqs[0], seqs[1]] {
        assert_eq!(created_for(&home, seq), 1, "seq {seq} evaluated once");
    }
}

/// A crash while actions wait for an unwritable `actions.jsonl` loses none of them: the
/// messages that made them are evaluated again at the next start, once, and nothing that was
/// on disk before is made twice.
#[test]
fn a_crash_while_actions_wait_for_the_journal_evaluates_their_messages_again_once() {
    let mut sb = Switchboard::new();
    let home = sb.home.path().to_path_buf();
    let actions = home.join("actions.jsonl");
    let Some(outage) = actions_outage(&mut sb, &actions) else {
        return;
    };
    let (before, seqs) = (outage.before, outage.seqs);
    sb.kill9();
    drop(outage.guard);

    sb.spawn();
    let shown = eventually(Duration::from_secs(5), "the confirm is made again", || {
        let p = pending(&sb);
        (p.len() == 1).then_some(p)
    });
    assert_eq!(shown[0]["seq"], seqs[0]);
    let s = eventually(Duration::from_secs(5), "both messages evaluated", || {
        let s = stats(&home);
        (s["evaluated"] == seqs[1]).then_some(s)
    });
    assert_eq!(s["delivery"]["queued_work"], 2, "{s}");
    for seq in [before, seqs[0], seqs[1]] {
        assert_eq!(created_for(&home, seq), 1, "seq {seq} made once");
    }
}
