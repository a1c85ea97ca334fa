//! Engine tests: matching, order, dedup before rateLimit, ids, expiry, pause, state across a
//! swap, and the index agreeing with the rule-by-rule path.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};

use super::*;
use crate::message::NewMessage;

fn t(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 9, 0, 0).unwrap() + TimeDelta::seconds(secs)
}

fn rules(json: &str) -> Arc<RuleSet> {
    Arc::new(RuleSet::parse(json).unwrap_or_else(|e| panic!("{e:?}")))
}

fn msg(seq: u64, server: &str, channel: &str, content: &str) -> Message {
    Message::from_new(NewMessage::new(server, channel, content), seq, t(0))
}

fn fired(engine: &mut Engine, m: &Message, now: DateTime<Utc>) -> Vec<String> {
    engine
        .evaluate(m, now)
        .actions
        .into_iter()
        .map(|a| a.rule.to_string())
        .collect()
}

#[test]
fn matching_table_every_rule_fires_in_file_order() {
    let set = rules(
        r#"{"rules": [
        {"name": "all"},
        {"name": "alerts", "channel": "alerts/*"},
        {"name": "crit", "channel": "alerts/critical"},
        {"name": "sev", "contentRegex": "(?i)\\bsev[12]\\b"},
        {"name": "prom", "server": "prom*", "channel": "alerts/*/db"},
        {"name": "off", "enabled": false},
        {"name": "cs", "contentRegex": "Disk"}
    ]}"#,
    );
    let table: &[(&str, &str, &str, &[&str])] = &[
        ("x", "alerts", "hi", &["all", "alerts"]),
        (
            "x",
            "alerts/critical",
            "SEV1 down",
            &["all", "alerts", "crit", "sev"],
        ),
        ("x", "alertsx", "sev12", &["all"]),
        (
            "prometheus",
            "alerts/eu/db",
            "Disk full",
            &["all", "alerts", "prom", "cs"],
        ),
        (
            "alertmanager",
            "alerts/eu/db",
            "disk full",
            &["all", "alerts"],
        ),
        ("x", "ci/main", "sev2", &["all", "sev"]),
    ];
    for (server, channel, content, want) in table {
        let mut e = Engine::new(set.clone());
        let m = msg(1, server, channel, content);
        assert_eq!(
            fired(&mut e, &m, t(0)),
            *want,
            "{server} {channel} {content:?}"
        );
        let mut slow = Engine::new(set.clone());
        let (eval, decisions) = slow.evaluate_explained(&m, t(0));
        let names: Vec<_> = eval.actions.iter().map(|a| a.rule.as_ref()).collect();
        assert_eq!(names, *want, "explain path agrees");
        assert_eq!(decisions[5], ("off".to_string(), Decision::Disabled));
    }
}

#[test]
fn ids_are_global_and_increasing_from_one() {
    let set = rules(r#"{"rules": [{"name": "a"}, {"name": "b"}]}"#);
    let mut e = Engine::new(set);
    let ids: Vec<_> = (1..=3)
        .flat_map(|i| e.evaluate(&msg(i, "s", "c", "x"), t(i as i64)).actions)
        .map(|a| (a.id, a.seq))
        .collect();
    assert_eq!(ids, vec![(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (6, 3)]);
    e.set_next_action_id(100);
    e.set_next_action_id(50);
    assert_eq!(e.evaluate(&msg(4, "s", "c", "x"), t(9)).actions[0].id, 100);
}

#[test]
fn dedup_runs_before_rate_limit_and_does_not_spend_it() {
    let set = rules(r#"{"rules": [{"name": "r", "dedupWindow": "10m", "rateLimit": "2/1h"}]}"#);
    let mut e = Engine::new(set);
    // (at, content, expected outcome)
    let steps: &[(i64, &str, Option<SuppressReason>)] = &[
        (0, "disk full", None),
        (60, "disk full", Some(SuppressReason::Dedup)),
        (120, "disk full", Some(SuppressReason::Dedup)),
        (180, "cpu hot", None), // the dedup repeats did not spend the 2/1h quota
        (240, "mem low", Some(SuppressReason::RateLimited)),
        (600, "disk full", Some(SuppressReason::RateLimited)), // window (from 0) over; quota full
        (3600, "disk full", None),                             // quota frees at 0 + 1h
    ];
    for (at, content, want) in steps {
        let eval = e.evaluate(&msg(1, "s", "c", content), t(*at));
        let got = eval.suppressed.first().map(|s| s.reason);
        assert_eq!(got, *want, "at {at}s {content:?}");
        assert_eq!(eval.actions.len(), usize::from(want.is_none()));
    }
}

#[test]
fn suppressed_repeats_do_not_extend_the_dedup_window() {
    let set = rules(r#"{"rules": [{"name": "r", "dedupWindow": "10m"}]}"#);
    let mut e = Engine::new(set);
    let m = msg(1, "s", "c", "same");
    assert_eq!(fired(&mut e, &m, t(0)).len(), 1);
    assert_eq!(fired(&mut e, &m, t(300)).len(), 0);
    assert_eq!(fired(&mut e, &m, t(599)).len(), 0);
    assert_eq!(
        fired(&mut e, &m, t(600)).len(),
        1,
        "10m after the first, not after a repeat"
    );
}

#[test]
fn dedup_key_template_and_default_cut() {
    let set = rules(
        r#"{"rules": [{"name": "fp", "dedupWindow": "1h", "dedupKey": "{{meta.fp}}"},
                      {"name": "cut", "dedupWindow": "1h"}]}"#,
    );
    let mut e = Engine::new(set);
    let with_fp = |seq, fp: &str, content: &str| {
        Message::from_new(
            NewMessage::new("s", "c", content).with_meta("fp", fp),
            seq,
            t(0),
        )
    };
    assert_eq!(fired(&mut e, &with_fp(1, "a", "one"), t(0)), ["fp", "cut"]);
    assert_eq!(fired(&mut e, &with_fp(2, "a", "two"), t(1)), ["cut"]);
    assert_eq!(fired(&mut e, &with_fp(3, "b", "two"), t(2)), ["fp"]);
    // Contents equal in their first 256 bytes (cut inside a 3-byte character) are repeats.
    let base = format!("{}€", "x".repeat(255));
    assert_eq!(
        fired(&mut e, &with_fp(4, "c", &format!("{base} first")), t(3)),
        ["fp", "cut"]
    );
    assert_eq!(
        fired(&mut e, &with_fp(5, "d", &format!("{base} second")), t(4)),
        ["fp"]
    );
}

#[test]
fn cooldown_boundary_exactly_the_window_later_is_allowed() {
    let set = rules(r#"{"rules": [{"name": "r", "rateLimit": "5m"}]}"#);
    let mut e = Engine::new(set);
    let m = msg(1, "s", "c", "x");
    let table: &[(i64, bool)] = &[
        (0, true),
        (1, false),
        (299, false),
        (300, true),
        (599, false),
        (600, true),
    ];
    for (at, fires) in table {
        assert_eq!(!fired(&mut e, &m, t(*at)).is_empty(), *fires, "at {at}s");
    }
}

#[test]
fn quota_limits() {
    let set = rules(r#"{"rules": [{"name": "r", "rateLimit": "3/1m"}]}"#);
    let mut e = Engine::new(set);
    let m = msg(1, "s", "c", "x");
    let table: &[(i64, bool)] = &[
        (0, true),
        (1, true),
        (2, true),
        (3, false),
        (59, false),
        (60, true),
        (61, true),
        (62, true),
        (63, false),
    ];
    for (at, fires) in table {
        assert_eq!(!fired(&mut e, &m, t(*at)).is_empty(), *fires, "at {at}s");
    }
}

#[test]
fn confirm_expires_after_confirm_timeout() {
    let set = rules(
        r#"{"rules": [{"name": "d", "mode": "confirm", "prompt": "p"},
                      {"name": "h", "mode": "confirm", "prompt": "p", "confirmTimeout": "1h30m"},
                      {"name": "n"}]}"#,
    );
    let mut e = Engine::new(set);
    let actions = e.evaluate(&msg(1, "s", "c", "x"), t(10)).actions;
    assert_eq!(actions[0].expires, Some(t(10 + 30 * 60)));
    assert_eq!(actions[1].expires, Some(t(10 + 90 * 60)));
    assert_eq!(actions[2].expires, None);
    assert_eq!(actions[0].created, t(10));
}

#[test]
fn prompts_render_templates_and_the_default() {
    let set = rules(
        r#"{"rules": [{"name": "a", "mode": "auto", "tools": ["t"],
                       "prompt": "{{server}}/{{channel}} #{{seq}} {{meta.host}} {{nope}}: {{content}}"},
                      {"name": "n"}]}"#,
    );
    let mut e = Engine::new(set);
    let m = Message::from_new(
        NewMessage::new("am", "alerts/x", "{{channel}} down").with_meta("host", "db1"),
        7,
        t(0),
    );
    let actions = e.evaluate(&m, t(0)).actions;
    assert_eq!(
        actions[0].prompt,
        "am/alerts/x #7 db1 {{nope}}: {{channel}} down"
    );
    assert_eq!(actions[0].tools, vec!["t"]);
    assert_eq!(
        actions[1].prompt,
        "Investigate this am/alerts/x event:\n\n{{channel}} down"
    );
}

#[test]
fn pause_fires_nothing_and_changes_nothing() {
    let set = rules(r#"{"rules": [{"name": "r", "rateLimit": "1h", "dedupWindow": "1h"}]}"#);
    let mut e = Engine::new(set);
    e.set_paused(true);
    let m = msg(1, "s", "c", "x");
    let eval = e.evaluate(&m, t(0));
    assert!(eval.actions.is_empty() && eval.suppressed.is_empty());
    let (eval, decisions) = e.evaluate_explained(&m, t(0));
    assert!(eval.actions.is_empty());
    assert_eq!(decisions[0].1, Decision::Paused);
    e.set_paused(false);
    let actions = e.evaluate(&m, t(1)).actions;
    assert_eq!(actions.len(), 1, "nothing was spent while paused");
    assert_eq!(actions[0].id, 1, "no id was used while paused");
}

#[test]
fn state_survives_a_swap_for_unchanged_names() {
    let mut e = Engine::new(rules(
        r#"{"rules": [{"name": "keep", "rateLimit": "1h"}, {"name": "drop", "rateLimit": "1h"}]}"#,
    ));
    let m = msg(1, "s", "c", "x");
    assert_eq!(fired(&mut e, &m, t(0)), ["keep", "drop"]);
    // New file: `keep` changed its channel but not its name; `drop` was renamed to `fresh`.
    e.swap_rules(rules(
        r#"{"rules": [{"name": "fresh", "rateLimit": "1h"}, {"name": "keep", "channel": "c", "rateLimit": "1h"}]}"#,
    ));
    assert_eq!(
        fired(&mut e, &m, t(60)),
        ["fresh"],
        "keep is still cooling down"
    );
    // Removing a rule and bringing it back forgets its state.
    e.swap_rules(rules(r#"{"rules": [{"name": "other"}]}"#));
    e.swap_rules(rules(r#"{"rules": [{"name": "keep", "rateLimit": "1h"}]}"#));
    assert_eq!(fired(&mut e, &m, t(120)), ["keep"]);
    assert_eq!(e.next_action_id(), 5, "ids continue across swaps");
}

/// What a restart keeps: a snapshot taken before and restored after holds the cooldown, the
/// quota and the dedup windows; what has expired by the restore is dropped.
#[test]
fn limits_survive_a_snapshot_and_restore() {
    let json = r#"{"rules": [
        {"name": "cool", "channel": "c", "rateLimit": "1h"},
        {"name": "quota", "channel": "c", "rateLimit": "2/10m"},
        {"name": "dd", "channel": "c", "dedupWindow": "30m"},
        {"name": "plain", "channel": "c"}
    ]}"#;
    let mut before = Engine::new(rules(json));
    let (a, b) = (msg(1, "s", "c", "alpha"), msg(2, "s", "c", "beta"));
    assert_eq!(
        fired(&mut before, &a, t(0)),
        ["cool", "quota", "dd", "plain"]
    );
    assert_eq!(fired(&mut before, &b, t(60)), ["quota", "dd", "plain"]);
    let version = before.limits_version();
    let snap = before.limits_snapshot(t(61));
    assert_eq!(
        before.limits_version(),
        version,
        "a snapshot changes nothing"
    );
    assert!(!snap.0.contains_key("plain"), "nothing in force: {snap:?}");
    // Through JSON, as state.json keeps it.
    let text = serde_json::to_string(&snap).unwrap();
    let snap: LimitsSnapshot = serde_json::from_str(&text).unwrap();

    let mut after = Engine::new(rules(json));
    assert_eq!(after.restore_limits(snap.clone(), t(120)), 3);
    assert_ne!(after.limits_version(), 0);
    assert_eq!(
        fired(&mut after, &a, t(120)),
        ["plain"],
        "cooling down, quota spent, alpha deduplicated"
    );
    assert_eq!(
        fired(&mut after, &msg(3, "s", "c", "gamma"), t(601)),
        ["quota", "dd", "plain"]
    );

    // Restored later: what expired in between is gone (quota's fires, dd's keys), the hour's
    // cooldown is not.
    let mut late = Engine::new(rules(json));
    late.restore_limits(snap.clone(), t(1900));
    assert_eq!(fired(&mut late, &a, t(1900)), ["quota", "dd", "plain"]);
    let mut later = Engine::new(rules(json));
    later.restore_limits(snap.clone(), t(1900));
    assert_eq!(
        later.limits_snapshot(t(1900)).0.keys().collect::<Vec<_>>(),
        ["cool"],
        "pruned at restore"
    );

    // Windows judged by the rules as they are now; unknown names are dropped.
    let mut changed = Engine::new(rules(
        r#"{"rules": [{"name": "cool", "channel": "c", "rateLimit": "1m"},
                      {"name": "dd", "channel": "c"}, {"name": "new", "channel": "c", "rateLimit": "1h"}]}"#,
    ));
    assert_eq!(changed.restore_limits(snap, t(120)), 2);
    assert_eq!(fired(&mut changed, &a, t(120)), ["cool", "dd", "new"]);
}

fn with_meta(m: Message, pairs: &[(&str, &str)]) -> Message {
    let mut m = m;
    for (k, v) in pairs {
        m.metadata.insert(k, v);
    }
    m
}

/// Matchers decide with server, channel and content, through the index (by value) and
/// without it; a missing key is the empty string.
#[test]
fn matchers_select_by_metadata() {
    let set = rules(
        r#"{"rules": [
        {"name": "db", "channel": "alerts/*", "matchers": ["labels.team=\"db\""]},
        {"name": "page", "matchers": ["labels.severity=~\"critical|page\"", "labels.team!=\"test\""]},
        {"name": "no-team", "matchers": ["labels.team=\"\""]},
        {"name": "not-bot", "matchers": ["sender!~\"bot-.*\""], "contentRegex": "deploy"},
        {"name": "db-sev1", "matchers": ["labels.team=\"db\""], "contentRegex": "(?i)sev1"}
    ]}"#,
    );
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str, &'a [&'a str]);
    let table: &[Case] = &[
        ("alerts/x", &[("labels.team", "db")], "x", &["db"]),
        ("other", &[("labels.team", "db")], "SEV1", &["db-sev1"]),
        (
            "alerts/x",
            &[("labels.team", "db"), ("labels.severity", "page")],
            "x",
            &["db", "page"],
        ),
        (
            "alerts/x",
            &[("labels.team", "test"), ("labels.severity", "page")],
            "x",
            &[],
        ),
        (
            "alerts/x",
            &[("labels.severity", "critical")],
            "x",
            &["page", "no-team"],
        ),
        (
            "alerts/x",
            &[("labels.severity", "criticalx")],
            "x",
            &["no-team"],
        ),
        ("c", &[("sender", "bot-ci")], "deploy", &["no-team"]),
        ("c", &[("sender", "ada")], "deploy", &["no-team", "not-bot"]),
        ("c", &[], "deploy", &["no-team", "not-bot"]),
    ];
    for (i, (channel, meta, content, want)) in table.iter().enumerate() {
        let m = with_meta(msg(i as u64 + 1, "s", channel, content), meta);
        let mut fast = Engine::new(set.clone());
        let mut naive = Engine::new(set.clone());
        assert_eq!(fired(&mut fast, &m, t(0)), *want, "{channel} {meta:?}");
        let slow: Vec<String> = naive
            .evaluate_naive(&m, t(0))
            .actions
            .iter()
            .map(|a| a.rule.to_string())
            .collect();
        assert_eq!(slow, *want, "naive: {channel} {meta:?}");
    }
}

/// A rule found through its `=` matcher's value (the index's metadata path, any channel) or
/// by its channel and confirmed by its matchers does not fire for another value, nor for a key
/// that differs in one byte, in a small and a large metadata map; `=""` fires for a missing
/// key. The naive path agrees on every message.
#[test]
fn eq_matchers_exclude_other_values() {
    let set = rules(
        r#"{"rules": [
        {"name": "by-value", "matchers": ["labels.team=\"db\""]},
        {"name": "by-channel", "channel": "svc1/events", "matchers": ["labels.service=\"svc1\""]},
        {"name": "two", "matchers": ["labels.team=\"db\"", "labels.instance=\"host1\""]},
        {"name": "no-team", "channel": "svc1/events", "matchers": ["labels.team=\"\""]}
    ]}"#,
    );
    let filler: Vec<(String, String)> = (0..20)
        .map(|n| (format!("labels.k{n:02}"), format!("v{n}")))
        .collect();
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
    let table: &[Case] = &[
        ("x", &[("labels.team", "db")], &["by-value"]),
        ("x", &[("labels.team", "dba")], &[]),
        ("x", &[("labels.tean", "db")], &[]),
        (
            "x",
            &[("labels.team", "db"), ("labels.instance", "host1")],
            &["by-value", "two"],
        ),
        (
            "x",
            &[("labels.team", "db"), ("labels.instance", "host10")],
            &["by-value"],
        ),
        (
            "svc1/events",
            &[("labels.service", "svc1")],
            &["by-channel", "no-team"],
        ),
        ("svc1/events", &[("labels.service", "svc2")], &["no-team"]),
        ("svc1/events", &[("labels.servicf", "svc1")], &["no-team"]),
        ("svc1/events", &[("labels.team", "")], &["no-team"]),
        ("svc1/events", &[("labels.team", "web")], &[]),
        ("svc2/events", &[("labels.service", "svc1")], &[]),
    ];
    for (i, (channel, meta, want)) in table.iter().enumerate() {
        for padded in [false, true] {
            let mut m = with_meta(msg(i as u64 + 1, "s", channel, "c"), meta);
            if padded {
                m.metadata.extend(filler.iter().cloned());
            }
            let mut fast = Engine::new(set.clone());
            assert_eq!(
                fired(&mut fast, &m, t(0)),
                *want,
                "{channel} {meta:?} {padded}"
            );
            let slow: Vec<String> = Engine::new(set.clone())
                .evaluate_naive(&m, t(0))
                .actions
                .iter()
                .map(|a| a.rule.to_string())
                .collect();
            assert_eq!(slow, *want, "naive: {channel} {meta:?} {padded}");
        }
    }
}

/// `to_consumer` gives every action of its message that one consumer; missing or empty, the
/// rule's `consumers` hold, whatever other keys of the same length the message carries.
#[test]
fn to_consumer_overrides_the_rules_consumers() {
    let set = rules(r#"{"rules": [{"name": "r", "consumers": ["pay-*"]}]}"#);
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, bool);
    let cases: &[Case] = &[
        (&[], "pay-eu", true),
        (&[], "oncall", false),
        (&[("fingerprint", "oncall")], "oncall", false),
        (&[("to_consumer", "")], "oncall", false),
        (
            &[("to_consumer", "oncall"), ("fingerprint", "x")],
            "oncall",
            true,
        ),
        (&[("to_consumer", "oncall")], "pay-eu", false),
    ];
    for (meta, consumer, admitted) in cases {
        let m = with_meta(msg(1, "s", "c", "x"), meta);
        let eval = Engine::new(set.clone()).evaluate(&m, t(0));
        assert_eq!(eval.actions.len(), 1, "{meta:?}");
        assert_eq!(
            eval.actions[0].consumers.admits(consumer),
            *admitted,
            "{meta:?} {consumer}"
        );
    }
}

/// Held back by the clock: `muted` inside a mute interval, `inactive` outside every active
/// one; either way nothing is spent, and `stop` still stops.
#[test]
fn time_intervals_hold_rules_back() {
    let set = rules(
        r#"{"timeIntervals": {
            "business-hours": [{"times": [{"startTime": "09:00", "endTime": "17:00"}], "weekdays": ["monday:friday"]}],
            "lunch": [{"times": [{"startTime": "12:00", "endTime": "13:00"}]}]},
           "rules": [
            {"name": "office", "activeTimeIntervals": ["business-hours"], "muteTimeIntervals": ["lunch"],
             "rateLimit": "1h", "dedupWindow": "1h", "stop": true},
            {"name": "after", "channel": "c"}
        ]}"#,
    );
    let m = msg(1, "s", "c", "x");
    // 2026-11-22 is a Sunday; t(0) is 09:00 UTC.
    let monday = |h: i64| t(86_400 + h * 3600);
    let mut e = Engine::new(set);
    let eval = e.evaluate(&m, t(0));
    assert!(eval.actions.is_empty(), "stop holds while inactive");
    assert_eq!(eval.suppressed[0].reason, SuppressReason::Inactive);
    let eval = e.evaluate(&m, monday(3));
    assert!(eval.actions.is_empty());
    assert_eq!(
        eval.suppressed[0].reason,
        SuppressReason::Muted,
        "12:00 is lunch"
    );
    assert_eq!(SuppressReason::Muted.as_str(), "muted");
    assert_eq!(SuppressReason::Inactive.as_str(), "inactive");
    assert_eq!(
        fired(&mut e, &m, monday(4)),
        ["office"],
        "nothing was spent while held back"
    );
    let (_, d) = e.evaluate_explained(&m, monday(4) + TimeDelta::minutes(1));
    assert_eq!(d[0].1.reason(), Some("dedup"));
    let (_, d) = e.evaluate_explained(&m, monday(12));
    assert_eq!(
        d.iter().map(|(_, d)| d.reason()).collect::<Vec<_>>(),
        [Some("inactive"), Some("stopped")]
    );
}

#[test]
fn explain_reasons() {
    let set = rules(
        r#"{"rules": [{"name": "nm", "channel": "other"}, {"name": "off", "enabled": false},
                      {"name": "dd", "dedupWindow": "1h"}, {"name": "rl", "rateLimit": "1h"}]}"#,
    );
    let mut e = Engine::new(set);
    let m = msg(1, "s", "c", "x");
    e.evaluate_explained(&m, t(0));
    let (_, d) = e.evaluate_explained(&m, t(1));
    let reasons: Vec<_> = d.iter().map(|(_, d)| d.reason()).collect();
    assert_eq!(
        reasons,
        [
            Some("no_match"),
            Some("disabled"),
            Some("dedup"),
            Some("rate_limited")
        ]
    );
}

/// A matching rule with `stop` ends the message's evaluation, fired or suppressed; a `stop`
/// rule that does not match, or is disabled, stops nothing.
#[test]
fn stop_ends_evaluation_once_its_rule_matches() {
    let set = rules(
        r#"{"rules": [
        {"name": "before"},
        {"name": "off", "channel": "alerts/*", "enabled": false, "stop": true},
        {"name": "crit", "channel": "alerts/*", "contentRegex": "FIRING", "mode": "confirm",
         "prompt": "look: {{content}}", "dedupWindow": "1h", "stop": true},
        {"name": "other-stop", "contentRegex": "nomatch", "stop": true},
        {"name": "catch-all"}
    ]}"#,
    );
    let mut e = Engine::new(set.clone());
    let firing = msg(1, "am", "alerts/critical", "[FIRING] disk");
    assert_eq!(fired(&mut e, &firing, t(0)), ["before", "crit"]);
    // The repeat is held back by the dedup window, and still stops the catch-all.
    let eval = e.evaluate(&firing, t(1));
    let names: Vec<_> = eval.actions.iter().map(|a| a.rule.as_ref()).collect();
    assert_eq!(names, ["before"]);
    assert_eq!(
        eval.suppressed,
        [Suppressed {
            rule: "crit".into(),
            reason: SuppressReason::Dedup
        }]
    );
    // Not matching `crit`: everything after it is tried.
    let other = msg(2, "am", "alerts/critical", "[RESOLVED] disk");
    assert_eq!(fired(&mut e, &other, t(2)), ["before", "catch-all"]);

    // The naive loop and the explain path agree, and explain says why.
    let mut naive = Engine::new(set.clone());
    let names: Vec<_> = naive
        .evaluate_naive(&firing, t(0))
        .actions
        .into_iter()
        .map(|a| a.rule.to_string())
        .collect();
    assert_eq!(names, ["before", "crit"]);
    let mut slow = Engine::new(set);
    let (_, d) = slow.evaluate_explained(&firing, t(0));
    let reasons: Vec<_> = d.iter().map(|(n, d)| (n.as_str(), d.reason())).collect();
    assert_eq!(
        reasons,
        [
            ("before", None),
            ("off", Some("disabled")),
            ("crit", None),
            ("other-stop", Some("stopped")),
            ("catch-all", Some("stopped")),
        ]
    );
}

/// The index must give exactly what trying every rule gives, on a mixed rule set.
#[test]
fn index_agrees_with_rule_by_rule_matching() {
    let mut json = Vec::new();
    let channels = [
        "alerts/critical",
        "alerts/warn",
        "ci/main",
        "teams/dm",
        "teams/chat/x",
    ];
    for i in 0..60 {
        let rule = match i % 6 {
            0 => format!(r#"{{"name": "r{i}", "channel": "{}"}}"#, channels[i % 5]),
            1 => format!(
                r#"{{"name": "r{i}", "channel": "{}/*"}}"#,
                channels[i % 5].split('/').next().unwrap()
            ),
            2 => format!(
                r#"{{"name": "r{i}", "contentRegex": "(?i)\\bword{}\\b"}}"#,
                i % 7
            ),
            3 => format!(
                r#"{{"name": "r{i}", "server": "srv{}*", "channel": "*/{{main,dm}}", "contentRegex": "word{}"}}"#,
                i % 3,
                i % 4
            ),
            4 => format!(r#"{{"name": "r{i}", "channel": "teams/*/x"}}"#),
            _ => format!(
                r#"{{"name": "r{i}", "channel": "*", "enabled": {}}}"#,
                i % 4 == 0
            ),
        };
        json.push(rule);
    }
    let set = rules(&format!(r#"{{"rules": [{}]}}"#, json.join(",")));
    let mut fast = Engine::new(set.clone());
    let mut slow = Engine::new(set);
    let mut seq = 0;
    for server in ["srv0", "srv12", "other"] {
        for channel in channels
            .iter()
            .chain(&["alerts", "alertsx", "x/main", "teams/a/x"])
        {
            for content in ["nothing", "WORD3 here", "word1 word2", "sword3"] {
                seq += 1;
                let m = msg(seq, server, channel, content);
                let a = fast.evaluate(&m, t(seq as i64));
                let (b, _) = slow.evaluate_explained(&m, t(seq as i64));
                assert_eq!(a.actions, b.actions, "{server} {channel} {content}");
            }
        }
    }
    assert!(seq > 100);
}

/// A seeded generator for the property test (the same cases every run, no dependency).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

/// Words that rules look for and messages contain, with the Unicode letters that `(?i)` folds
/// onto ASCII ones (`K` Kelvin sign, `ſ` long s) and non-ASCII text.
const WORDS: &[&str] = &[
    "error", "ERROR", "code", "E1", "E12", "e7", "host3", "host31", "sev1", "sev2", "SEV3", "disk",
    "timeout", "TimeOut", "kelvin", "Kelvin", "ſev1", "straße", "STRASSE", "été", "ÉTÉ",
    "[FIRING]", "foo", "barbaz", "x", "123", "4567", "abc9",
];

/// A random content regex: one of a few shapes (shared ones included, so many rules share a
/// literal or a regex), or words joined by the things that split literals.
fn random_regex(g: &mut Gen, many: bool) -> String {
    if many && g.chance(50) {
        // In a large file, popular literals: shared by more rules than the index lets find
        // a rule by content.
        return g
            .pick(&[r"timeout", r"(?i)\[FIRING\]", r"host3\d*", r"(?i)timeout"])
            .to_string();
    }
    let fixed = [
        r"(?i)error code E1\b",
        r"sev[12].*host3\b",
        r"timeout",
        r"(?i)timeout",
        r"(foo|barbaz)x",
        r"(?i)kelvin",
        r"(?i)\bsev[12]\b",
        r"(?i)straße",
        r"été",
        r"(?i)ÉTÉ",
        r"ERROR|warn",
        r"^error",
        r"disk$",
        r"x*",
        r"[[:upper:]]{3}",
        r"(?:timeout)?",
        r"\[FIRING\].*host31",
    ];
    if g.chance(40) {
        return g.pick(&fixed).to_string();
    }
    if g.chance(15) {
        // Regexes without literals, several distinct ones (they go to the regex set).
        return format!(r"\d{{{}}}", 1 + g.below(5));
    }
    let joins = [" ", ".*", r"\b", r"\s+", "[12]", "", " ?"];
    let mut re = String::new();
    if g.chance(40) {
        re.push_str("(?i)");
    }
    for n in 0..1 + g.below(3) {
        if n > 0 {
            re.push_str(g.pick(&joins));
        }
        let word = regex::escape(g.pick(WORDS));
        match g.below(6) {
            0 => re.push_str(&format!("(?:{word}|{})", regex::escape(g.pick(WORDS)))),
            1 => re.push_str(&format!("(?:{word})?")),
            2 => re.push_str(&format!("(?:{word})+")),
            _ => re.push_str(&word),
        }
    }
    if g.chance(40) {
        // Assertions around the whole: a bare literal between them is decided by the scan
        // alone (`scan::Exact`), so every kind it checks is drawn.
        let before = [
            r"\b",
            r"\B",
            "^",
            r"(?-u:\b)",
            r"\b{start}",
            r"\b{start-half}",
            r"(?m)^",
        ];
        let after = [
            r"\b",
            r"\B",
            "$",
            r"(?-u:\B)",
            r"\b{end}",
            r"(?-u:\b{end-half})",
            r"(?m)$",
        ];
        re = format!("{}{re}{}", g.pick(&before), g.pick(&after));
    }
    re
}

fn random_rules(g: &mut Gen, names: usize) -> Arc<RuleSet> {
    let servers = ["", "*", "prom", "prom*", "am", "http", "{am,http}"];
    let channels = [
        "",
        "*",
        "alerts/critical",
        "alerts/*",
        "team1/*",
        "team1/ci/*",
        "*/main",
        "ci/{main,dev}",
        "alerts/*/db",
        "teams/dm-?",
        "a/b/c",
        "**/x",
        "svc1/events",
    ];
    let mut rules = Vec::new();
    // Sometimes many rules: past the thresholds where literals count as shared.
    let many = g.chance(20);
    let n = if many { 40 + g.below(60) } else { g.below(14) };
    let mut used = std::collections::HashSet::new();
    for _ in 0..n {
        let name = format!("r{}", g.below(names));
        if !used.insert(name.clone()) {
            continue;
        }
        let mut rule = serde_json::json!({ "name": name });
        if g.chance(60) {
            rule["server"] = g.pick(&servers).into();
        }
        if g.chance(70) {
            rule["channel"] = g.pick(&channels).into();
        }
        if g.chance(75) {
            rule["contentRegex"] = random_regex(g, many).into();
        }
        if g.chance(40) {
            let matchers: Vec<String> = (0..1 + g.below(2))
                .map(|_| {
                    let key = g.pick(&["labels.team", "labels.severity", "sender", "k"]);
                    let op = g.pick(&["=", "=", "=~", "!=", "!~"]);
                    let value = g.pick(&[
                        "db", "web", "db|web", "page", "", "a", "(a|b)", "c.*", "[ab]",
                    ]);
                    format!("{key}{op}\"{value}\"")
                })
                .collect();
            rule["matchers"] = matchers.into();
        }
        match g.below(6) {
            0 => {
                rule["mode"] = "confirm".into();
                rule["prompt"] = "check {{channel}}: {{content}} ({{meta.k}})".into();
                if g.chance(50) {
                    rule["confirmTimeout"] = "1m".into();
                }
            }
            1 => {
                rule["mode"] = "auto".into();
                rule["prompt"] = "run {{seq}} {{server}}".into();
                rule["tools"] = serde_json::json!(["shell", "gh*"]);
            }
            _ => {}
        }
        if g.chance(30) {
            rule["dedupWindow"] = g.pick(&["1m", "10s", "2s"]).into();
            if g.chance(30) {
                rule["dedupKey"] = "{{meta.k}}".into();
            }
        }
        if g.chance(30) {
            rule["rateLimit"] = g.pick(&["1ms", "5s", "2/10s", "0", "1m"]).into();
        }
        if g.chance(10) {
            rule["enabled"] = false.into();
        }
        if g.chance(if many { 3 } else { 12 }) {
            rule["stop"] = true.into();
        }
        rules.push(rule);
    }
    let text = serde_json::json!({ "rules": rules }).to_string();
    Arc::new(RuleSet::parse(&text).unwrap_or_else(|e| panic!("{text}: {e:?}")))
}

fn random_message(g: &mut Gen, seq: u64) -> Message {
    let servers = ["prom", "prometheus", "am", "http", "cli", "x"];
    let channels = [
        "alerts",
        "alerts/critical",
        "alerts/critical/x",
        "alerts/eu/db",
        "alertsx",
        "team1",
        "team1/ci/deploys",
        "team12/x",
        "ci/main",
        "ci/dev",
        "x/main",
        "teams/dm-1",
        "teams/dm-12",
        "a/b/c",
        "q/x",
        "svc1/events",
        "default",
    ];
    let mut content = String::new();
    for n in 0..g.below(12) {
        if n > 0 {
            content.push_str(g.pick(&[" ", " ", "", "/", "-", "\n", "_", "é"]));
        }
        content.push_str(g.pick(WORDS));
    }
    let mut new = NewMessage::new(g.pick(&servers), g.pick(&channels), content)
        .with_meta("k", g.pick(&["a", "b"]));
    for key in ["labels.team", "labels.severity", "sender"] {
        if g.chance(60) {
            new = new.with_meta(key, g.pick(&["db", "web", "page", "", "a", "cx", "dbweb"]));
        }
    }
    Message::from_new(new, seq, t(0))
}

/// The property: on random rule files and messages, the indexed engine decides exactly what
/// the plain loop decides — the same actions (ids, rules, prompts, tools, expiry) and the same
/// suppressions with their reasons, message after message, across reloads. Seeded, so a
/// failure repeats; `SWITCHBOARD_ENGINE_CASES` runs more rule files.
#[test]
fn property_index_decides_what_the_naive_loop_decides() {
    let cases: u64 = std::env::var("SWITCHBOARD_ENGINE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let (mut fired, mut suppressed, mut stops) = (0usize, 0usize, 0usize);
    for case in 0..cases {
        let mut g = Gen(0x9E37_79B9_7F4A_7C15 ^ (case + 1));
        let names = 1 + g.below(120);
        let set = random_rules(&mut g, names);
        let mut fast = Engine::new(set.clone());
        let mut naive = Engine::new(set);
        let mut now = t(0);
        for seq in 1..=120u64 {
            if g.chance(3) {
                // A reload: names that stay keep their state in both engines.
                let next = random_rules(&mut g, names);
                fast.swap_rules(next.clone());
                naive.swap_rules(next);
            }
            let step = if g.chance(5) { 90_000 } else { 3_000 };
            now += TimeDelta::milliseconds(g.below(step) as i64);
            let m = random_message(&mut g, seq);
            let a = fast.evaluate(&m, now);
            let b = naive.evaluate_naive(&m, now);
            assert_eq!(
                a.actions,
                b.actions,
                "case {case}, message {seq}: {m:?}\nrules: {:#?}",
                fast.rules()
                    .rules()
                    .iter()
                    .map(|r| &r.raw)
                    .collect::<Vec<_>>()
            );
            assert_eq!(
                a.suppressed, b.suppressed,
                "case {case}, message {seq}: {m:?}"
            );
            fired += a.actions.len();
            suppressed += a.suppressed.len();
            // Count the messages where a `stop` rule held back a later matching rule.
            let all = fast.rules().rules();
            let position = |name: &str| all.iter().position(|r| &*r.name == name);
            let last = a
                .actions
                .iter()
                .map(|x| x.rule.as_ref())
                .chain(a.suppressed.iter().map(|x| x.rule.as_ref()))
                .filter_map(position)
                .max();
            if let Some(last) = last
                && all[last].stop
                && all[last + 1..].iter().any(|r| r.enabled && r.is_match(&m))
            {
                stops += 1;
            }
        }
    }
    // The generator must reach both outcomes, or the property says little.
    assert!(
        fired > 500 && suppressed > 50 && stops > 20,
        "fired {fired}, suppressed {suppressed}, stops {stops}"
    );
}

/// Issue 46.3: a rule whose content regex cannot be decided within its budget fails closed. A
/// confirm or `stop` rule counts the message as matching (its confirm says why, and an auto
/// `stop` rule's work becomes a confirm: a person decides); an auto or notify rule without
/// `stop` does not fire, and is suppressed with `regex_budget`. The index, the naive loop and
/// the explained loop agree.
#[test]
fn an_undecided_regex_fails_closed() {
    let thrash = r#"[\\s\\S]{1,5000}ZZZ"#;
    let set = rules(&format!(
        r#"{{"rules": [
        {{"name": "notify", "contentRegex": "{thrash}"}},
        {{"name": "guard", "contentRegex": "{thrash}", "mode": "confirm", "prompt": "check",
          "stop": true}},
        {{"name": "run", "mode": "auto", "prompt": "run", "tools": ["bash"]}}
    ]}}"#
    ));
    let mut big = "a".repeat(200_000);
    big.push_str("ZZZ");
    let m = msg(1, "s", "c", &big);
    let naive = Engine::new(set.clone()).evaluate_naive(&m, t(0));
    let (explained, decisions) = Engine::new(set.clone()).evaluate_explained(&m, t(0));
    let indexed = Engine::new(set.clone()).evaluate(&m, t(0));
    for eval in [&indexed, &naive, &explained] {
        let fired: Vec<_> = eval.actions.iter().map(|a| (&*a.rule, a.mode)).collect();
        assert_eq!(fired, [("guard", Mode::Confirm)]);
        assert!(eval.actions[0].prompt.starts_with(UNDECIDED_NOTE));
        assert!(eval.actions[0].prompt.ends_with("\n\ncheck"));
        assert_eq!(
            eval.suppressed,
            [Suppressed {
                rule: "notify".into(),
                reason: SuppressReason::RegexBudget
            }]
        );
    }
    let reasons: Vec<_> = decisions.iter().map(|(n, d)| (&**n, *d)).collect();
    assert_eq!(
        reasons,
        [
            ("notify", Decision::RegexBudget),
            ("guard", Decision::Undecided(1)),
            ("run", Decision::Stopped)
        ]
    );
    assert_eq!(decisions[0].1.reason(), Some("regex_budget"));

    // Work of a `stop` rule that cannot decide is put to a person first.
    let set = rules(&format!(
        r#"{{"rules": [{{"name": "deploy", "contentRegex": "{thrash}", "mode": "auto",
            "prompt": "deploy", "tools": ["bash"], "stop": true}}, {{"name": "after"}}]}}"#
    ));
    for eval in [
        Engine::new(set.clone()).evaluate(&m, t(0)),
        Engine::new(set.clone()).evaluate_naive(&m, t(0)),
    ] {
        let fired: Vec<_> = eval.actions.iter().map(|a| (&*a.rule, a.mode)).collect();
        assert_eq!(fired, [("deploy", Mode::Confirm)]);
        assert!(eval.actions[0].expires.is_some());
    }
    // The same rules decide a short message as usual.
    let short = msg(2, "s", "c", "abcZZZ");
    assert_eq!(fired(&mut Engine::new(set), &short, t(0)), ["deploy"]);
}
