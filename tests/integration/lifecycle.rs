//! Actions and live rules through the real binary: hot reload by rename and in-place write,
//! invalid saves, confirms across restart and past expiry, and bounded queues under a burst.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::util::*;

fn rule_names(sb: &Switchboard) -> Vec<String> {
    let r = control(sb.home.path(), json!({"op": "rules"}));
    r["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

fn stats(sb: &Switchboard) -> Value {
    control(sb.home.path(), json!({"op": "stats"}))["result"].clone()
}

/// The rules that fired for `seq`, from `actions.jsonl`.
fn fired_for(sb: &Switchboard, seq: u64) -> Vec<String> {
    action_records(sb.home.path())
        .iter()
        .filter(|r| r["action"]["seq"] == seq)
        .map(|r| r["action"]["rule"].as_str().unwrap().to_string())
        .collect()
}

const RULE_A: &str = r#"{"rules": [{"name": "rule-a", "channel": "a"}]}"#;
const RULE_B: &str = r#"{"rules": [{"name": "rule-b", "channel": "b"}]}"#;

fn saves_apply_within_a_second(in_place: bool) {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULE_A);
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    assert_eq!(rule_names(&sb), ["rule-a"]);
    let seq = send_messages(&home, &[("b", "before")])[0];
    eventually(Duration::from_secs(10), "the message is evaluated", || {
        (stats(&sb)["evaluated"].as_u64() >= Some(seq)).then_some(())
    });
    assert!(fired_for(&sb, seq).is_empty(), "rule-b does not exist yet");

    let saved = Instant::now();
    if in_place {
        std::fs::write(home.join("triggers.json"), RULE_B).unwrap();
    } else {
        // What editors do: write a temporary file, rename it over the old one.
        let tmp = home.join(".triggers.json.swp");
        std::fs::write(&tmp, RULE_B).unwrap();
        std::fs::rename(&tmp, home.join("triggers.json")).unwrap();
    }
    eventually(
        Duration::from_secs(1),
        "rule-b live within 1 s of the save",
        || (rule_names(&sb) == ["rule-b"]).then_some(()),
    );
    let seq = send_messages(&home, &[("b", "after")])[0];
    eventually(
        Duration::from_secs(1),
        "rule-b fires for the next message",
        || (fired_for(&sb, seq) == ["rule-b"]).then_some(()),
    );
    assert!(saved.elapsed() < Duration::from_secs(2));
    let report = &stats(&sb)["last_reload"];
    assert_eq!(report["ok"], true);
    assert_eq!(report["source"], "file");
}

#[test]
fn a_save_by_rename_applies_to_the_next_message_within_a_second() {
    saves_apply_within_a_second(false);
}

#[test]
fn a_save_in_place_applies_to_the_next_message_within_a_second() {
    saves_apply_within_a_second(true);
}

#[test]
fn an_invalid_save_keeps_the_old_rules_and_shows_the_error() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULE_A);
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    std::fs::write(
        home.join("triggers.json"),
        "{\"rules\": [\n  {\"name\": \"rule-b\", \"chanel\": \"b\"}\n]}",
    )
    .unwrap();
    let report = eventually(
        Duration::from_secs(2),
        "the failed reload is reported",
        || {
            let r = stats(&sb)["last_reload"].clone();
            (r["ok"] == false).then_some(r)
        },
    );
    assert_eq!(report["source"], "kept");
    assert_eq!(report["errors"][0]["code"], "unknown_key");
    assert_eq!(report["errors"][0]["line"], 2);
    assert_eq!(report["errors"][0]["column"], 22);
    assert!(
        report["message"].as_str().unwrap().contains("stay live"),
        "{report}"
    );
    assert_eq!(rule_names(&sb), ["rule-a"], "old rules still live");
    let seq = send_messages(&home, &[("a", "still works")])[0];
    eventually(Duration::from_secs(1), "rule-a still fires", || {
        (fired_for(&sb, seq) == ["rule-a"]).then_some(())
    });
    assert!(
        sb.log().contains("did you mean `channel`"),
        "logged:\n{}",
        sb.log()
    );
    // The explicit reload says the same, and exits non-zero.
    let out = sb.cli(&["rules", "reload"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown key `chanel`"),
        "{}",
        stderr(&out)
    );
    // Deleting the file keeps the rules too.
    std::fs::remove_file(home.join("triggers.json")).unwrap();
    eventually(Duration::from_secs(2), "the deletion is reported", || {
        let r = stats(&sb)["last_reload"].clone();
        r["message"]
            .as_str()
            .unwrap()
            .contains("does not exist (deleted or moved?); the 1 rule loaded at")
            .then_some(())
    });
    assert_eq!(rule_names(&sb), ["rule-a"]);
}

const CONFIRM: &str = r#"{"rules": [{"name": "ask", "channel": "alerts/*", "mode": "confirm",
    "prompt": "look at {{content}}", "confirmTimeout": "CT"}]}"#;

#[test]
fn pending_confirms_survive_a_restart_with_their_expiry() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", &CONFIRM.replace("CT", "1h"));
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    send_messages(
        &home,
        &[("alerts/critical", "db down"), ("alerts/warn", "disk")],
    );
    let before = eventually(Duration::from_secs(2), "two pending confirms", || {
        let p = stats(&sb)["pending_confirms"].clone();
        (p.as_array().unwrap().len() == 2).then_some(p)
    });
    sb.kill9();
    sb.spawn();
    let after = stats(&sb)["pending_confirms"].clone();
    assert_eq!(
        after, before,
        "same ids, rules and original expiry after kill -9"
    );
    // And they can still be answered; ids continue.
    let id = before[0]["id"].as_u64().unwrap();
    let out = sb.cli(&["confirm", &id.to_string(), "yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let seq = send_messages(&home, &[("alerts/critical", "again")])[0];
    let new_id = eventually(Duration::from_secs(2), "a new confirm", || {
        action_records(&home)
            .iter()
            .find(|r| r["action"]["seq"] == seq)
            .and_then(|r| r["id"].as_u64())
    });
    assert_eq!(new_id, 3, "action ids continue after a restart");
    assert!(sb.terminate().success());
}

#[test]
fn a_confirm_past_its_expiry_cannot_be_approved() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", &CONFIRM.replace("CT", "1s"));
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    send_messages(&home, &[("alerts/critical", "db down")]);
    let id = eventually(Duration::from_secs(2), "a pending confirm", || {
        stats(&sb)["pending_confirms"][0]["id"].as_u64()
    });
    // The timer expires it without anyone asking.
    eventually(
        Duration::from_secs(3),
        "expired record written by the timer",
        || {
            action_records(&home)
                .iter()
                .any(|r| r["id"] == id && r["state"] == "expired")
                .then_some(())
        },
    );
    let out = sb.cli(&["confirm", &id.to_string(), "yes"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("expired"), "{}", stderr(&out));
    assert!(
        stats(&sb)["pending_confirms"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Also after a restart.
    sb.kill9();
    sb.spawn();
    let out = sb.cli(&["confirm", &id.to_string(), "yes"]);
    assert!(!out.status.success());
}

#[test]
fn a_burst_into_a_full_queue_is_recorded_as_dropped_with_memory_bounded() {
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "nudge", "channel": "burst"}]}"#,
    );
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    let body: Vec<(&str, String)> = (0..1000)
        .map(|i| ("burst", format!("message {i}")))
        .collect();
    for _ in 0..10 {
        let batch: Vec<(&str, &str)> = body.iter().map(|(c, t)| (*c, t.as_str())).collect();
        send_messages(&home, &batch);
    }
    let delivery = eventually(Duration::from_secs(30), "10,000 evaluated", || {
        let s = stats(&sb);
        (s["evaluated"] == 10_000).then(|| s["delivery"].clone())
    });
    assert_eq!(delivery["nudges_undelivered"], 64);
    assert_eq!(delivery["counters"]["dropped"]["notify"], 10_000 - 64);
    // Every nudge was queued; the oldest were dropped to make room: the newest 64 survive.
    let records = eventually(Duration::from_secs(10), "every drop journaled", || {
        let records = action_records(&home);
        let dropped = records.iter().filter(|r| r["state"] == "dropped").count();
        (dropped == 10_000 - 64).then_some(records)
    });
    let ids = |state: &str| -> std::collections::BTreeSet<u64> {
        records
            .iter()
            .filter(|r| r["state"] == state)
            .map(|r| r["id"].as_u64().unwrap())
            .collect()
    };
    let queued = ids("queued");
    assert_eq!(queued.len(), 10_000);
    let survivors: Vec<u64> = queued.difference(&ids("dropped")).copied().collect();
    let newest: Vec<u64> = queued.iter().rev().take(64).rev().copied().collect();
    assert_eq!(survivors, newest);
    let rss_kib = rss_kib(sb.pid());
    assert!(
        rss_kib < 64 * 1024,
        "resident memory {rss_kib} KiB after the burst"
    );
    assert!(sb.log().contains("actions dropped"), "the drop is logged");
}

#[test]
fn sighup_reloads_the_rules() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULE_A);
    sb.spawn();
    let before = stats(&sb)["last_reload"]["at"].clone();
    // Without the watcher's help: the file is unchanged, so only the signal can reload it.
    unsafe {
        libc::kill(sb.pid() as i32, libc::SIGHUP);
    }
    let after = eventually(Duration::from_secs(2), "a reload after SIGHUP", || {
        let r = stats(&sb)["last_reload"].clone();
        (r["at"] != before).then_some(r)
    });
    assert_eq!(after["ok"], true, "{after}");
    assert_eq!(after["source"], "file");
    assert_eq!(rule_names(&sb), ["rule-a"]);
    assert!(sb.terminate().success(), "SIGHUP did not stop the server");
}

/// Messages committed while nothing evaluated them (a crash between the journal write and the
/// dispatcher) are evaluated at the next start, once: a second restart fires nothing again.
#[test]
fn messages_nobody_evaluated_are_evaluated_once_after_a_restart() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULE_A);
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    let seq = send_messages(&home, &[("a", "evaluated live")])[0];
    eventually(Duration::from_secs(2), "the live message fires", || {
        (fired_for(&sb, seq) == ["rule-a"]).then_some(())
    });
    sb.kill9();

    // Two records land in the journal behind the dispatcher's back.
    let mut journal = std::fs::OpenOptions::new()
        .append(true)
        .open(home.join("channels.jsonl"))
        .unwrap();
    for (i, content) in ["landed while down", "also while down"].iter().enumerate() {
        let record = json!({"seq": seq + 1 + i as u64, "serverName": "test", "channel": "a",
                            "content": content, "timestamp": "2026-11-22T10:00:00Z"});
        use std::io::Write;
        writeln!(journal, "{record}").unwrap();
    }
    drop(journal);

    sb.spawn();
    for s in [seq + 1, seq + 2] {
        eventually(
            Duration::from_secs(2),
            "evaluated after the restart",
            || (fired_for(&sb, s) == ["rule-a"]).then_some(()),
        );
    }
    assert!(sb.terminate().success());
    let actions_before = action_records(&home)
        .iter()
        .filter(|r| r["action"].is_object())
        .count();
    sb.spawn();
    let next = send_messages(&home, &[("a", "after the second restart")])[0];
    assert_eq!(next, seq + 3, "seq continues from the journal");
    eventually(Duration::from_secs(2), "the new message fires", || {
        (fired_for(&sb, next) == ["rule-a"]).then_some(())
    });
    let created: Vec<u64> = action_records(&home)
        .iter()
        .filter_map(|r| r["action"]["seq"].as_u64())
        .collect();
    assert_eq!(
        created.len(),
        actions_before + 1,
        "only the new message made an action: {created:?}"
    );
    for s in [seq, seq + 1, seq + 2, next] {
        assert_eq!(
            created.iter().filter(|&&c| c == s).count(),
            1,
            "seq {s} evaluated exactly once: {created:?}"
        );
    }
}

#[test]
fn pause_survives_a_restart() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULE_A);
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    assert!(sb.cli(&["pause"]).status.success());
    assert!(sb.terminate().success());
    sb.spawn();
    assert_eq!(stats(&sb)["paused"], true, "still paused after a restart");
    let paused_seq = send_messages(&home, &[("a", "while paused")])[0];
    eventually(Duration::from_secs(2), "the message is evaluated", || {
        (stats(&sb)["evaluated"].as_u64() >= Some(paused_seq)).then_some(())
    });
    assert!(
        fired_for(&sb, paused_seq).is_empty(),
        "no action while paused"
    );
    assert!(sb.cli(&["resume"]).status.success());
    let seq = send_messages(&home, &[("a", "after resume")])[0];
    eventually(Duration::from_secs(2), "fires after resume", || {
        (fired_for(&sb, seq) == ["rule-a"]).then_some(())
    });
}

/// A rate limit and a dedup window outlast a restart (a `rateLimit: "1h"` rule fired again
/// 21 s after a daemon restart): across a stop/start, and across a kill -9 once the memory
/// has been saved.
#[test]
fn rate_limits_and_dedup_windows_survive_a_restart() {
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        r#"{"rules": [
            {"name": "hourly", "channel": "a", "rateLimit": "1h"},
            {"name": "once", "channel": "b", "mode": "confirm", "prompt": "look: {{content}}",
             "dedupWindow": "30m"}]}"#,
    );
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    let evaluated = |sb: &Switchboard, seq: u64| {
        eventually(Duration::from_secs(5), "the messages are evaluated", || {
            (stats(sb)["evaluated"].as_u64() >= Some(seq)).then_some(())
        })
    };
    let first = send_messages(&home, &[("a", "disk full"), ("b", "db down")]);
    evaluated(&sb, first[1]);
    assert_eq!(fired_for(&sb, first[0]), ["hourly"]);
    assert_eq!(fired_for(&sb, first[1]), ["once"]);

    assert!(sb.terminate().success());
    sb.spawn();
    let again = send_messages(
        &home,
        &[
            ("a", "disk full again"),
            ("b", "db down"),
            ("b", "cache down"),
        ],
    );
    evaluated(&sb, again[2]);
    assert!(
        fired_for(&sb, again[0]).is_empty(),
        "the hour's rate limit held across a stop/start"
    );
    assert!(
        fired_for(&sb, again[1]).is_empty(),
        "the dedup window held across a stop/start: no second confirm"
    );
    assert_eq!(
        fired_for(&sb, again[2]),
        ["once"],
        "another dedup key still opens a confirm"
    );

    // Saved within a second or two, so a crash after that loses nothing.
    eventually(
        Duration::from_secs(5),
        "the new dedup key in state.json",
        || {
            let state: Value =
                serde_json::from_str(&std::fs::read_to_string(home.join("state.json")).ok()?)
                    .ok()?;
            state["limits"]["once"]["dedup"]["cache down"]
                .is_string()
                .then_some(())
        },
    );
    sb.kill9();
    sb.spawn();
    let third = send_messages(&home, &[("b", "cache down"), ("a", "disk still full")]);
    evaluated(&sb, third[1]);
    assert!(
        fired_for(&sb, third[0]).is_empty(),
        "the dedup window held across a kill -9"
    );
    assert!(
        fired_for(&sb, third[1]).is_empty(),
        "the rate limit held across a kill -9"
    );
    assert!(sb.terminate().success());
}
