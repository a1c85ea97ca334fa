//! Table-driven tests of parsing and validation: each case asserts codes, rule indexes, keys
//! and positions, not the prose.

use super::*;

/// (code, rule_index, key, line, column)
type Want = (ErrorCode, Option<usize>, Option<&'static str>, usize, usize);

fn errors(text: &str) -> Vec<RuleError> {
    match RuleSet::parse(text) {
        Ok(set) => panic!("expected errors, got {} rules for {text}", set.len()),
        Err(e) => e,
    }
}

fn check(text: &str, want: &[Want]) {
    type Got = (ErrorCode, Option<usize>, Option<String>, usize, usize);
    let got: Vec<Got> = errors(text)
        .into_iter()
        .map(|e| {
            (
                e.code,
                e.rule_index,
                e.key,
                e.line.unwrap(),
                e.column.unwrap(),
            )
        })
        .collect();
    let want: Vec<Got> = want
        .iter()
        .map(|(c, i, k, l, col)| (*c, *i, k.map(str::to_string), *l, *col))
        .collect();
    assert_eq!(got, want, "for {text}");
}

#[test]
fn empty_shapes_mean_zero_rules() {
    for text in ["{}", "{\"rules\": null}", "{\"rules\": []}", " {\n} "] {
        let set = RuleSet::parse(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        assert!(set.is_empty(), "{text}");
        assert!(!set.is_builtin());
    }
}

#[test]
fn syntax_errors_have_line_and_column() {
    use ErrorCode::*;
    check("[]", &[(ParseError, None, None, 1, 1)]);
    check(
        "  \n  [{\"name\": \"a\"}]",
        &[(ParseError, None, None, 2, 3)],
    );
    let e = errors("{\n  // a comment\n  \"rules\": []\n}");
    assert_eq!(
        (e[0].code, e[0].line, e[0].column),
        (ParseError, Some(2), Some(3))
    );
    assert!(e[0].message.contains("comments"), "{}", e[0].message);
    let e = errors("{\"rules\": [\n  {\"name\": \"a\"}\n  {\"name\": \"b\"}\n]}");
    assert_eq!((e[0].code, e[0].line), (ParseError, Some(3)));
    check(
        "{\"rules\": {}}",
        &[(ParseError, None, Some("rules"), 1, 11)],
    );
    check("{\"rules\": [3]}", &[(ParseError, Some(0), None, 1, 12)]);
    check("", &[(ParseError, None, None, 1, 1)]);
}

#[test]
fn validation_codes_table() {
    use ErrorCode::*;
    let cases: &[(&str, &[Want])] = &[
        (
            r#"{"rules":[{"name":"a","contentRgex":"x"}]}"#,
            &[(UnknownKey, Some(0), Some("contentRgex"), 1, 23)],
        ),
        (
            r#"{"rules":[{"name":"a","Channel":"x"}]}"#,
            &[(UnknownKey, Some(0), Some("Channel"), 1, 23)],
        ),
        (r#"{"rule":[]}"#, &[(UnknownKey, None, Some("rule"), 1, 2)]),
        (
            r#"{"rules":[{"mode":"notify"}]}"#,
            &[(MissingName, Some(0), Some("name"), 1, 11)],
        ),
        (
            r#"{"rules":[{"name":"  "}]}"#,
            &[(MissingName, Some(0), Some("name"), 1, 12)],
        ),
        (
            r#"{"rules":[{"name":"a"},{"name":"a"}]}"#,
            &[(DuplicateName, Some(1), Some("name"), 1, 32)],
        ),
        (
            r#"{"rules":[{"name":"a","mode":"Auto"}]}"#,
            &[(InvalidMode, Some(0), Some("mode"), 1, 30)],
        ),
        (
            r#"{"rules":[{"name":"a","mode":3}]}"#,
            &[(InvalidMode, Some(0), Some("mode"), 1, 30)],
        ),
        (
            r#"{"rules":[{"name":"a","mode":"auto","prompt":"p"}]}"#,
            &[(AutoRequiresTools, Some(0), Some("tools"), 1, 23)],
        ),
        (
            r#"{"rules":[{"name":"a","mode":"auto","prompt":"p","tools":[]}]}"#,
            &[(AutoRequiresTools, Some(0), Some("tools"), 1, 50)],
        ),
        (
            r#"{"rules":[{"name":"a","mode":"confirm"}]}"#,
            &[(PromptRequired, Some(0), Some("prompt"), 1, 23)],
        ),
        (
            // Neither tools nor prompt: chatcli's order, tools first.
            r#"{"rules":[{"name":"a","mode":"auto"}]}"#,
            &[
                (AutoRequiresTools, Some(0), Some("tools"), 1, 23),
                (PromptRequired, Some(0), Some("prompt"), 1, 23),
            ],
        ),
        (
            r#"{"rules":[{"name":"a","mode":"confirm","prompt":" "}]}"#,
            &[(PromptRequired, Some(0), Some("prompt"), 1, 40)],
        ),
        (
            r#"{"rules":[{"name":"a","contentRegex":"(?i)sev[12"}]}"#,
            &[(InvalidRegex, Some(0), Some("contentRegex"), 1, 38)],
        ),
        (
            r#"{"rules":[{"name":"a","channel":"ci/{main"}]}"#,
            &[(InvalidGlob, Some(0), Some("channel"), 1, 33)],
        ),
        (
            r#"{"rules":[{"name":"a","server":"[x"}]}"#,
            &[(InvalidGlob, Some(0), Some("server"), 1, 32)],
        ),
        (
            r#"{"rules":[{"name":"a","tools":["ok","{bad"]}]}"#,
            &[(InvalidGlob, Some(0), Some("tools"), 1, 31)],
        ),
        (
            r#"{"rules":[{"name":"a","rateLimit":"30"}]}"#,
            &[(InvalidRateLimit, Some(0), Some("rateLimit"), 1, 35)],
        ),
        (
            r#"{"rules":[{"name":"a","rateLimit":30}]}"#,
            &[(InvalidRateLimit, Some(0), Some("rateLimit"), 1, 35)],
        ),
        (
            r#"{"rules":[{"name":"a","rateLimit":"0/1h"}]}"#,
            &[(InvalidRateLimit, Some(0), Some("rateLimit"), 1, 35)],
        ),
        (
            r#"{"rules":[{"name":"a","rateLimit":"5/0"}]}"#,
            &[(InvalidRateLimit, Some(0), Some("rateLimit"), 1, 35)],
        ),
        (
            r#"{"rules":[{"name":"a","dedupWindow":"soon"}]}"#,
            &[(InvalidDedupWindow, Some(0), Some("dedupWindow"), 1, 37)],
        ),
        (
            r#"{"rules":[{"name":"a","prompt":"{{content"}]}"#,
            &[(InvalidTemplate, Some(0), Some("prompt"), 1, 32)],
        ),
        (
            r#"{"rules":[{"name":"a","dedupKey":"{{meta.}}"}]}"#,
            &[(InvalidTemplate, Some(0), Some("dedupKey"), 1, 34)],
        ),
        (
            r#"{"rules":[{"name":"a","confirmTimeout":"1 fortnight"}]}"#,
            &[(InvalidDuration, Some(0), Some("confirmTimeout"), 1, 40)],
        ),
        (
            r#"{"rules":[{"name":"a","confirmTimeout":"0"}]}"#,
            &[(InvalidDuration, Some(0), Some("confirmTimeout"), 1, 40)],
        ),
        (
            r#"{"rules":[{"name":"a","enabled":"yes"}]}"#,
            &[(ParseError, Some(0), Some("enabled"), 1, 33)],
        ),
        (
            r#"{"rules":[{"name":"a","stop":"yes"}]}"#,
            &[(ParseError, Some(0), Some("stop"), 1, 30)],
        ),
        (
            r#"{"rules":[{"name":"a","tools":"x"}]}"#,
            &[(ParseError, Some(0), Some("tools"), 1, 31)],
        ),
        (
            r#"{"rules":[{"name":"a","delivery":"exec"}]}"#,
            &[(ParseError, Some(0), Some("delivery"), 1, 34)],
        ),
        (
            r#"{"rules":[{"name":"a","delivery":"later"}]}"#,
            &[(ParseError, Some(0), Some("delivery"), 1, 34)],
        ),
        (
            r#"{"rules":[{"name":"a","mode":"auto","prompt":"p","delivery":"exec","tools":["{a,b}"]}]}"#,
            &[(InvalidGlob, Some(0), Some("tools"), 1, 76)],
        ),
    ];
    for (text, want) in cases {
        check(text, want);
    }
}

#[test]
fn every_error_is_reported_in_file_order() {
    use ErrorCode::*;
    let text = r#"{
  "rules": [
    { "name": "ok", "channel": "ci/*" },
    { "name": "crit", "contentRgex": "x", "mode": "auto", "prompt": "p" },
    { "name": "ok", "rateLimit": "30", "channel": "a/{b" }
  ]
}"#;
    check(
        text,
        &[
            (UnknownKey, Some(1), Some("contentRgex"), 4, 23),
            (AutoRequiresTools, Some(1), Some("tools"), 4, 43),
            (DuplicateName, Some(2), Some("name"), 5, 15),
            (InvalidRateLimit, Some(2), Some("rateLimit"), 5, 34),
            (InvalidGlob, Some(2), Some("channel"), 5, 51),
        ],
    );
    let e = errors(text);
    assert_eq!(e[0].rule.as_deref(), Some("crit"));
    assert!(
        e[0].message.contains("did you mean `contentRegex`"),
        "{}",
        e[0].message
    );
    assert_eq!(
        e[0].render("triggers.json"),
        "triggers.json:4:23: rule 1 `crit`: unknown key `contentRgex`; did you mean `contentRegex`?"
    );
}

#[test]
fn a_valid_file_compiles_every_key() {
    let text = r#"{
  "$schema": "./triggers.schema.json",
  "rules": [
    { "name": "crit", "server": "alertmanager", "channel": "alerts/*",
      "contentRegex": "(?i)sev[12]", "mode": "confirm",
      "prompt": "Investigate {{channel}}: {{content}}", "rateLimit": "5m",
      "dedupWindow": "30m", "dedupKey": "{{meta.fingerprint}}", "confirmTimeout": "1h30m",
      "description": "critical alerts", "delivery": "session", "stop": true },
    { "name": "dm", "channel": "teams/dm", "mode": "auto", "prompt": "{{content}}",
      "tools": ["teams__reply", "github-*"], "rateLimit": "10/1h", "enabled": false },
    { "name": "ci", "channel": "ci/*", "rateLimit": "0" }
  ]
}"#;
    let set = RuleSet::parse(text).unwrap();
    let r = &set.rules()[0];
    assert_eq!(r.mode, Mode::Confirm);
    assert_eq!(r.rate_limit, RateLimit::Cooldown(Duration::from_secs(300)));
    assert_eq!(r.dedup_window, Some(Duration::from_secs(1800)));
    assert_eq!(r.confirm_timeout, Duration::from_secs(5400));
    assert!(r.stop);
    let dm = &set.rules()[1];
    assert!(!dm.enabled);
    assert!(!dm.stop, "`stop` defaults to false");
    assert_eq!(
        dm.rate_limit,
        RateLimit::Quota {
            count: 10,
            period: Duration::from_secs(3600)
        }
    );
    assert_eq!(dm.tools, vec!["teams__reply", "github-*"]);
    assert_eq!(set.rules()[2].rate_limit, RateLimit::None);
    assert_eq!(set.rules()[2].confirm_timeout, DEFAULT_CONFIRM_TIMEOUT);
    let listed = summaries(&set);
    assert_eq!(listed[0]["contentRegex"], "(?i)sev[12]");
    assert_eq!(listed[2]["mode"], "notify");
    assert_eq!(listed[0]["stop"], true);
}

#[test]
fn builtin_is_one_catch_all_notify_rule() {
    let set = RuleSet::builtin();
    assert!(set.is_builtin());
    assert_eq!(set.len(), 1);
    let r = &set.rules()[0];
    assert_eq!(
        (&*r.name, r.mode, r.enabled),
        ("default", Mode::Notify, true)
    );
    assert!(matches!(r.channel, NamePattern::Any));
}

#[test]
fn schema_names_every_rule_key() {
    let schema = schema().to_string();
    for key in file::RULE_KEYS {
        assert!(schema.contains(&format!("\"{key}\"")), "schema lacks {key}");
    }
    assert!(schema.contains("confirm"), "modes are enumerated");
}

#[test]
fn load_reports_missing_and_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("triggers.json");
    assert!(RuleSet::load(&path).unwrap().is_none());
    std::fs::write(&path, "{\"rules\": [{}]}").unwrap();
    match RuleSet::load(&path) {
        Err(LoadError::Invalid { errors, .. }) => {
            assert_eq!(errors[0].code, ErrorCode::MissingName)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn resolve_keys_come_in_pairs_on_confirm_rules() {
    use ErrorCode::*;
    const C: &str = r#""name":"a","mode":"confirm","prompt":"p""#;
    let ok = format!(
        r#"{{"rules":[{{{C},"resolveRegex":"^\\[RESOLVED\\]","resolveKey":"{{{{meta.fingerprint}}}}"}}]}}"#
    );
    let set = RuleSet::parse(&ok).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
    assert!(set.rules()[0].resolve.is_some());
    assert!(RuleSet::builtin().rules()[0].resolve.is_none());
    let cases: &[(String, &[Want])] = &[
        (
            format!(r#"{{"rules":[{{{C},"resolveRegex":"x"}}]}}"#),
            &[(InvalidResolve, Some(0), Some("resolveKey"), 1, 53)],
        ),
        (
            format!(r#"{{"rules":[{{{C},"resolveKey":"{{{{seq}}}}"}}]}}"#),
            &[(InvalidResolve, Some(0), Some("resolveRegex"), 1, 53)],
        ),
        (
            r#"{"rules":[{"name":"a","resolveRegex":"x","resolveKey":"k"}]}"#.into(),
            &[(InvalidResolve, Some(0), Some("resolveRegex"), 1, 23)],
        ),
        (
            format!(r#"{{"rules":[{{{C},"resolveRegex":"(","resolveKey":"k"}}]}}"#),
            &[(InvalidRegex, Some(0), Some("resolveRegex"), 1, 68)],
        ),
        (
            format!(r#"{{"rules":[{{{C},"resolveRegex":"x","resolveKey":"{{{{meta."}}]}}"#),
            &[(InvalidTemplate, Some(0), Some("resolveKey"), 1, 85)],
        ),
    ];
    for (text, want) in cases {
        check(text, want);
    }
}

#[test]
fn matcher_and_interval_errors_are_located() {
    use ErrorCode::*;
    let cases: &[(&str, &[Want])] = &[
        // The matcher's element; the column of the problem when the string has no escapes
        // before it (here: the missing operator after `team`).
        (
            r#"{"rules":[{"name":"a","matchers":["x=\"1\"", "team"]}]}"#,
            &[(InvalidMatcher, Some(0), Some("matchers"), 1, 51)],
        ),
        (
            r#"{"rules":[{"name":"a","matchers":["team=~\"(db\""]}]}"#,
            &[(InvalidMatcher, Some(0), Some("matchers"), 1, 42)],
        ),
        (
            r#"{"rules":[{"name":"a","matchers":"team=\"db\""}]}"#,
            &[(InvalidMatcher, Some(0), Some("matchers"), 1, 34)],
        ),
        (
            r#"{"rules":[{"name":"a","activeTimeIntervals":["nope"]}]}"#,
            &[(
                UnknownTimeInterval,
                Some(0),
                Some("activeTimeIntervals"),
                1,
                46,
            )],
        ),
        (
            r#"{"timeIntervals":{"nights":[{}]},"rules":[{"name":"a","muteTimeIntervals":["nights","night"]}]}"#,
            &[(
                UnknownTimeInterval,
                Some(0),
                Some("muteTimeIntervals"),
                1,
                85,
            )],
        ),
        (
            r#"{"timeIntervals":{"bh":[{"weekdays":["monday:friday"]},{"weekdays":["funday"]}]}}"#,
            &[(InvalidTimeInterval, None, Some("weekdays"), 1, 68)],
        ),
        (
            r#"{"timeIntervals":{"bh":[{"times":[{"startTime":"9:00","endTime":"17:00"}]}]}}"#,
            &[(InvalidTimeInterval, None, Some("times"), 1, 34)],
        ),
        (
            r#"{"timeIntervals":{"bh":[{"location":"Mars/Base"}]}}"#,
            &[(InvalidTimeInterval, None, Some("location"), 1, 37)],
        ),
        (
            r#"{"timeIntervals":{"bh":[{"weekday":["monday"]}]}}"#,
            &[(UnknownKey, None, Some("weekday"), 1, 26)],
        ),
        (
            r#"{"timeIntervals":{"bh":[{"weekdays":"monday"}]}}"#,
            &[(InvalidTimeInterval, None, Some("weekdays"), 1, 37)],
        ),
        (
            r#"{"timeIntervals":{"bh":{}}}"#,
            &[(InvalidTimeInterval, None, Some("bh"), 1, 24)],
        ),
        (
            r#"{"timeIntervals":[]}"#,
            &[(InvalidTimeInterval, None, Some("timeIntervals"), 1, 18)],
        ),
    ];
    for (text, want) in cases {
        check(text, want);
    }
    // A bad interval is reported once, not again at each rule that names it.
    check(
        r#"{"timeIntervals":{"bh":[{"months":["smarch"]}]},"rules":[{"name":"a","activeTimeIntervals":["bh"]}]}"#,
        &[(ErrorCode::InvalidTimeInterval, None, Some("months"), 1, 35)],
    );
    let e = errors(r#"{"rules":[{"name":"a","muteTimeIntervals":["nigths"]}]}"#);
    assert!(
        e[0].message
            .contains("define it in the top-level `timeIntervals`"),
        "{}",
        e[0].message
    );
    let e = errors(
        r#"{"timeIntervals":{"nights":[{}]},"rules":[{"name":"a","muteTimeIntervals":["nigths"]}]}"#,
    );
    assert!(
        e[0].message.contains("did you mean \"nights\"?"),
        "{}",
        e[0].message
    );
    let e = errors(r#"{"rules":[{"name":"a","matchers":["team"]}]}"#);
    assert_eq!(
        e[0].render("t.json"),
        "t.json:1:40: rule 0 `a`: invalid matcher `team`: expected an operator (`=`, `!=`, `=~` or `!~`) after the key `team`, got the end"
    );
}

#[test]
fn matchers_and_intervals_compile() {
    let set = RuleSet::parse(
        r#"{"timeIntervals": {
              "business-hours": [{"times": [{"startTime": "09:00", "endTime": "17:00"}],
                                  "weekdays": ["monday:friday"], "location": "Europe/Berlin"}],
              "month-end": [{"daysOfMonth": [-1, "1"], "months": [12], "years": [2026]}]},
            "rules": [{"name": "db", "matchers": ["labels.team=\"db\"", "labels.severity=~\"critical|page\""],
                       "activeTimeIntervals": ["business-hours"], "muteTimeIntervals": ["month-end"]}]}"#,
    )
    .unwrap_or_else(|e| panic!("{e:?}"));
    let rule = &set.rules()[0];
    assert_eq!(rule.matchers.len(), 2);
    assert_eq!(
        rule.matchers[1].to_string(),
        r#"labels.severity=~"critical|page""#
    );
    assert_eq!(rule.active_intervals[0].name, "business-hours");
    assert_eq!(rule.mute_intervals[0].name, "month-end");
    let at = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap().to_utc();
    assert!(
        rule.is_active(at("2026-11-23T08:00:00Z")),
        "Monday 09:00 in Berlin"
    );
    assert!(!rule.is_active(at("2026-11-22T08:00:00Z")), "Sunday");
    assert!(rule.muted_by(at("2026-12-31T12:00:00Z")).is_some());
    assert!(rule.muted_by(at("2026-12-30T12:00:00Z")).is_none());
}

/// A chatcli triggers file (no matchers, no intervals) loads unchanged.
#[test]
fn a_chatcli_file_loads_unchanged() {
    let set = RuleSet::parse(
        r#"{"rules": [{"name": "crit", "server": "*", "channel": "alerts/*", "contentRegex": "(?i)sev[12]",
                       "mode": "confirm", "prompt": "Investigate {{channel}}: {{content}}",
                       "rateLimit": "5m", "dedupWindow": "1h30m", "enabled": true, "description": "x"}]}"#,
    )
    .unwrap_or_else(|e| panic!("{e:?}"));
    let rule = &set.rules()[0];
    assert!(
        rule.matchers.is_empty()
            && rule.active_intervals.is_empty()
            && rule.mute_intervals.is_empty()
    );
}

#[test]
fn approve_via_names_known_paths_on_confirm_rules() {
    use ErrorCode::*;
    const C: &str = r#""name":"a","mode":"confirm","prompt":"p""#;
    let ok = format!(r#"{{"rules":[{{{C},"approveVia":["cli","web","elicitation","web"]}}]}}"#);
    let set = RuleSet::parse(&ok).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
    use crate::actions::Via;
    assert_eq!(
        set.rules()[0].approve_via,
        [Via::Cli, Via::Web, Via::Elicitation],
        "in order, a repeat once"
    );
    assert!(RuleSet::builtin().rules()[0].approve_via.is_empty());
    let cases: &[(String, &[Want])] = &[
        (
            format!(r#"{{"rules":[{{{C},"approveVia":["cli","browser"]}}]}}"#),
            &[(InvalidApproveVia, Some(0), Some("approveVia"), 1, 66)],
        ),
        (
            format!(r#"{{"rules":[{{{C},"approveVia":[]}}]}}"#),
            &[(InvalidApproveVia, Some(0), Some("approveVia"), 1, 66)],
        ),
        (
            r#"{"rules":[{"name":"a","approveVia":["cli"]}]}"#.into(),
            &[(InvalidApproveVia, Some(0), Some("approveVia"), 1, 23)],
        ),
        (
            format!(r#"{{"rules":[{{{C},"approveVia":"cli"}}]}}"#),
            &[(ParseError, Some(0), Some("approveVia"), 1, 66)],
        ),
    ];
    for (text, want) in cases {
        check(text, want);
    }
    let e = &errors(&format!(r#"{{"rules":[{{{C},"approveVia":["Web"]}}]}}"#))[0];
    assert_eq!(
        e.message,
        "unknown `approveVia` path \"Web\"; use `cli`, `tool`, `web`, `elicitation`, `relay` or `slack`"
    );
}

#[test]
fn consumers_are_globs_on_consumer_names() {
    use ErrorCode::*;
    let set = RuleSet::parse(
        r#"{"rules": [{"name": "pay", "consumers": ["oncall", "payments-*"]}, {"name": "all"}]}"#,
    )
    .unwrap();
    let pay = &set.rules()[0];
    assert!(pay.consumers.admits("payments-eu") && pay.consumers.admits("oncall"));
    assert!(!pay.consumers.admits("infra"));
    assert!(set.rules()[1].consumers.is_everyone());
    check(
        r#"{"rules": [{"name": "a", "consumers": ["ok", "pay-{eu"]}]}"#,
        &[(InvalidGlob, Some(0), Some("consumers"), 1, 39)],
    );
    check(
        r#"{"rules": [{"name": "a", "consumers": [""]}]}"#,
        &[(InvalidGlob, Some(0), Some("consumers"), 1, 39)],
    );
    check(
        r#"{"rules": [{"name": "a", "consumers": "oncall"}]}"#,
        &[(ParseError, Some(0), Some("consumers"), 1, 39)],
    );
}
