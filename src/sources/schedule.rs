//! Schedules: a source that appends a message when a cron expression fires.
//!
//! ```json
//! {"schedules": [{"name": "morning-triage", "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin",
//!                 "channel": "schedule/triage", "content": "triage the overnight alerts",
//!                 "metadata": {"team": "payments"}, "catchUp": false}]}
//! ```
//!
//! A firing is a message from server `schedule`, on the schedule's channel (default
//! `schedule/NAME`), stamped with the time it was due. Its id is the schedule's name and that
//! time, so a firing appended twice (a crash between the append and the state write below) is
//! stored once by the inbox's id window, which the journal replays at boot.
//!
//! The state this module owns is `schedules.json` in the home: for each schedule, the time up
//! to which its firings were handled (fired, or skipped on purpose). At start, a schedule whose
//! firings fell while the daemon was down skips them, unless it says `"catchUp": true`: then
//! the latest of them fires, once. A schedule seen for the first time has nothing to catch up.
//!
//! Cron expressions are parsed and evaluated by `croner`: 5 fields (minute first), or 6 with
//! seconds first, and the `@daily`-style nicknames. Times are computed in the schedule's IANA
//! time zone (chrono-tz): a wall-clock time that a DST change skips fires at the first instant
//! after the gap, and one that it repeats fires once.
//!
//! Every schedule runs on one timer task (a queue of wake-up times, one sleep for the
//! earliest), and the state is written once per wake-up, however many schedules fired: 3,000
//! schedules are one task and at most one blocking write at a time, not thousands.
//!
//! The wait for the next firing re-reads the wall clock at least every
//! [`RECHECK_EVERY`], so a clock step or a suspended machine delays a firing by at most that
//! much; firings that fell inside a suspend collapse into one, the latest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::SourceContext;
use super::upstream::config::{ConfigError, ErrorCode};
use super::upstream::locate::Locator;
use crate::home::{Home, write_atomic};
use crate::message::{NewMessage, format_timestamp};

/// The server name of every message a schedule appends.
pub const SERVER: &str = "schedule";

/// The longest sleep between two looks at the wall clock.
pub const RECHECK_EVERY: Duration = Duration::from_secs(30);

/// How long a firing whose append failed waits before it tries again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The keys a schedule may have.
pub const SCHEDULE_KEYS: &[&str] = &[
    "name", "cron", "timezone", "channel", "content", "metadata", "catchUp",
];

/// One entry of `schedules` in `switchboard.json`, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScheduleSettings {
    /// Unique; part of each firing's id and the key of its state.
    pub name: String,
    /// 5 fields (`minute hour day-of-month month day-of-week`), or 6 with seconds first.
    pub cron: String,
    /// IANA time zone the expression is read in; default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Channel of the message; default `schedule/NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Content of the message; default `scheduled: NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Metadata of the message, beside `schedule` and `scheduled_at`, which it always has.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Fire once, at start, for the latest firing missed while the daemon was down.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub catch_up: bool,
}

/// A schedule ready to run: the expression parsed, the zone resolved.
#[derive(Clone, Debug)]
pub struct Schedule {
    settings: ScheduleSettings,
    cron: croner::Cron,
    tz: chrono_tz::Tz,
}

/// Why a schedule does not compile: the code, the key at fault and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleError {
    /// Stable code.
    pub code: ErrorCode,
    /// `cron` or `timezone`.
    pub key: &'static str,
    /// Lowercase, no trailing period.
    pub message: String,
}

impl Schedule {
    /// Parses the expression and the time zone; the first problem.
    pub fn compile(settings: &ScheduleSettings) -> Result<Schedule, ScheduleError> {
        Schedule::build(settings).map_err(|mut problems| problems.remove(0))
    }

    /// Parses the expression and the time zone, each on its own: every problem, for
    /// `config check`.
    pub fn build(settings: &ScheduleSettings) -> Result<Schedule, Vec<ScheduleError>> {
        let cron = parse_cron(&settings.cron).map_err(|cause| ScheduleError {
            code: ErrorCode::InvalidCron,
            key: "cron",
            message: format!("invalid `cron` \"{}\": {cause}", settings.cron),
        });
        let zone = settings.timezone.as_deref().unwrap_or("UTC");
        let tz = crate::rules::time_zone(zone).map_err(|hint| ScheduleError {
            code: ErrorCode::InvalidTimezone,
            key: "timezone",
            message: format!("invalid `timezone` \"{zone}\": not an IANA time zone; {hint}"),
        });
        match (cron, tz) {
            (Ok(cron), Ok(tz)) => Ok(Schedule {
                settings: settings.clone(),
                cron,
                tz,
            }),
            (cron, tz) => Err(cron.err().into_iter().chain(tz.err()).collect()),
        }
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// The first firing strictly after `t`; `None` when it never fires again.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&t.with_timezone(&self.tz), false)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }

    /// The latest firing in `(after, now]`, if any.
    pub fn latest_due(&self, after: DateTime<Utc>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let at = self
            .cron
            .find_previous_occurrence(&now.with_timezone(&self.tz), true)
            .ok()?
            .with_timezone(&Utc);
        (at > after).then_some(at)
    }

    /// The message of the firing due at `at`.
    pub fn message(&self, at: DateTime<Utc>) -> NewMessage {
        let name = &self.settings.name;
        let when = format_timestamp(at);
        let settings = self.settings.metadata.iter();
        let metadata = (settings.map(|(k, v)| (k.as_str(), v.as_str())))
            .chain([("schedule", name.as_str()), ("scheduled_at", when.as_str())])
            .collect();
        NewMessage {
            id: Some(format!("schedule/{name}/{when}")),
            server: SERVER.into(),
            channel: self
                .settings
                .channel
                .clone()
                .filter(|c| !c.trim().is_empty())
                .unwrap_or_else(|| format!("schedule/{name}")),
            content: self
                .settings
                .content
                .clone()
                .unwrap_or_else(|| format!("scheduled: {name}")),
            metadata,
            timestamp: Some(at),
        }
    }
}

/// Parses a cron expression of 5 fields, or 6 with seconds first (or a nickname).
fn parse_cron(text: &str) -> Result<croner::Cron, String> {
    let fields = text.split_whitespace().count();
    let nickname = text.trim_start().starts_with('@');
    if !nickname && !(5..=6).contains(&fields) {
        return Err(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds \
             first, got {fields}"
        ));
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(text)
        .map_err(|e| {
            // croner's sentences start with a capital and end with a period; ours do not.
            let text = e.to_string();
            let text = text.trim_end_matches('.');
            let mut chars = text.chars();
            match chars.next() {
                Some(c) => c.to_lowercase().chain(chars).collect(),
                None => String::new(),
            }
        })
}

/// Whether `name` may name a schedule: 1 to 64 letters, digits, `_`, `-` or `.`.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Validates the `schedules` value of `switchboard.json`, whose text is `text` (for
/// positions). Returns every error, in file order; none when it is valid.
pub fn check(text: &str, raw: &Value) -> Vec<ConfigError> {
    let loc = Locator::new(text);
    let mut errors = Vec::new();
    let error = |code, index: Option<usize>, key: Option<&str>, message: String| {
        let index = index.map(|i| i.to_string());
        let mut path = vec!["schedules"];
        path.extend(index.as_deref());
        path.extend(key);
        let pos = loc.value(&path);
        let key = match (&index, key) {
            (Some(i), Some(k)) => format!("schedules[{i}].{k}"),
            (Some(i), None) => format!("schedules[{i}]"),
            _ => "schedules".into(),
        };
        ConfigError {
            code,
            upstream: None,
            key: Some(key),
            line: pos.map(|p| p.line),
            column: pos.map(|p| p.column),
            message,
        }
    };
    let Some(list) = raw.as_array() else {
        errors.push(error(
            ErrorCode::WrongType,
            None,
            None,
            format!(
                "`schedules` must be a list of schedules, got {}",
                crate::json_kind(raw)
            ),
        ));
        return errors;
    };
    let mut seen = std::collections::HashSet::new();
    for (i, value) in list.iter().enumerate() {
        let label = value.get("name").and_then(Value::as_str).map_or_else(
            || format!("schedule {i}"),
            |n| format!("schedule {i} `{n}`"),
        );
        if let Some(obj) = value.as_object() {
            for key in obj.keys().filter(|k| !SCHEDULE_KEYS.contains(&k.as_str())) {
                let pos = loc.key(&["schedules", &i.to_string(), key]);
                errors.push(ConfigError {
                    code: ErrorCode::UnknownKey,
                    upstream: None,
                    key: Some(format!("schedules[{i}].{key}")),
                    line: pos.map(|p| p.line),
                    column: pos.map(|p| p.column),
                    message: match crate::rules::suggest(key, SCHEDULE_KEYS) {
                        Some(close) => {
                            format!("{label}: unknown key `{key}`; did you mean `{close}`?")
                        }
                        None => format!(
                            "{label}: unknown key `{key}`; the keys are {}",
                            SCHEDULE_KEYS.join(", ")
                        ),
                    },
                });
            }
        }
        let settings = match serde_json::from_value::<ScheduleSettings>(value.clone()) {
            Ok(s) => s,
            Err(e) if e.to_string().starts_with("unknown field") => continue,
            Err(e) => {
                errors.push(error(
                    ErrorCode::WrongType,
                    Some(i),
                    None,
                    format!("{label}: {e}"),
                ));
                continue;
            }
        };
        if !valid_name(&settings.name) {
            errors.push(error(
                ErrorCode::InvalidName,
                Some(i),
                Some("name"),
                format!(
                    "{label}: invalid `name` \"{}\": use 1 to 64 letters, digits, `_`, `-` or `.`",
                    settings.name
                ),
            ));
        } else if !seen.insert(settings.name.clone()) {
            errors.push(error(
                ErrorCode::DuplicateName,
                Some(i),
                Some("name"),
                format!(
                    "{label}: duplicate name; another schedule is already called `{}`",
                    settings.name
                ),
            ));
        }
        for e in Schedule::build(&settings).err().into_iter().flatten() {
            errors.push(error(
                e.code,
                Some(i),
                Some(e.key),
                format!("{label}: {}", e.message),
            ));
        }
    }
    errors
}

/// `schedules.json` in the home: how far each schedule's firings were handled.
pub fn state_path(home: &Home) -> PathBuf {
    home.dir().join("schedules.json")
}

/// One schedule's entry in `schedules.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Mark {
    /// Every firing up to this time was fired or skipped on purpose.
    through: DateTime<Utc>,
}

/// `schedules.json`, read once at start and written (atomically, off the async workers)
/// after each firing.
#[derive(Debug)]
struct State {
    path: PathBuf,
    marks: Mutex<BTreeMap<String, Mark>>,
}

impl State {
    fn load(path: PathBuf) -> State {
        let marks = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), cause = %e,
                    "cannot read the schedules' state; no missed firing is caught up");
                BTreeMap::new()
            }),
            Err(_) => BTreeMap::new(),
        };
        State {
            path,
            marks: Mutex::new(marks),
        }
    }

    fn through(&self, name: &str) -> Option<DateTime<Utc>> {
        self.marks.lock().unwrap().get(name).map(|m| m.through)
    }

    /// Records how far schedules' firings were handled, all in one write (off the async
    /// workers): one blocking thread however many schedules moved.
    async fn set(self: &Arc<State>, moved: Vec<(String, DateTime<Utc>)>) {
        if moved.is_empty() {
            return;
        }
        let state = self.clone();
        let written = tokio::task::spawn_blocking(move || {
            // The lock is held across the write so that two writes land in order.
            let mut marks = state.marks.lock().unwrap();
            for (name, through) in moved {
                marks.insert(name, Mark { through });
            }
            let text = serde_json::to_vec_pretty(&*marks).unwrap_or_default();
            write_atomic(&state.path, &text)
        })
        .await;
        if let Ok(Err(e)) = written {
            tracing::warn!(path = %self.path.display(), cause = %e,
                "cannot write the schedules' state; a restart may catch up a firing again");
        }
    }
}

/// Starts the schedules on the context's tasks, all on one timer task however many there are;
/// `state` is `schedules.json`.
pub fn start(cx: &SourceContext, schedules: &[ScheduleSettings], state: &Path) {
    if schedules.is_empty() {
        return;
    }
    let state = Arc::new(State::load(state.to_path_buf()));
    let mut compiled = Vec::with_capacity(schedules.len());
    for settings in schedules {
        match Schedule::compile(settings) {
            Ok(schedule) => {
                tracing::info!(schedule = %schedule.name(), cron = %settings.cron, "schedule started");
                compiled.push(schedule);
            }
            // `config check` and the start refuse such a file; this is a second line of defence.
            Err(e) => {
                tracing::error!(schedule = %settings.name, "{}", e.message);
            }
        }
    }
    cx.tasks().spawn(run(cx.clone(), compiled, state));
}

/// One schedule as the timer runs it: up to when its firings were handled, and its next one.
struct Timed {
    schedule: Schedule,
    through: DateTime<Utc>,
    next: DateTime<Utc>,
}

/// Fires every schedule until shutdown, from one task: a queue of wake-up times (each
/// schedule's next firing, or its retry), one sleep for the earliest.
async fn run(cx: SourceContext, schedules: Vec<Schedule>, state: Arc<State>) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    let now = Utc::now();
    let mut timed = Vec::with_capacity(schedules.len());
    let mut moved = Vec::new();
    let mut queue = BinaryHeap::new();
    for schedule in schedules {
        let name = schedule.name().to_string();
        let through = match state.through(&name) {
            Some(last) if schedule.settings.catch_up && last < now => last,
            _ => {
                moved.push((name.clone(), now));
                now
            }
        };
        let Some(next) = schedule.next_after(through) else {
            tracing::info!(schedule = %name, "schedule never fires again");
            continue;
        };
        queue.push(Reverse((next, timed.len())));
        timed.push(Timed {
            schedule,
            through,
            next,
        });
    }
    state.set(moved).await;
    while let Some(&Reverse((wake, _))) = queue.peek() {
        // The wall clock is read again at least every `RECHECK_EVERY`.
        let now = Utc::now();
        if now < wake {
            let wait = (wake - now).to_std().unwrap_or_default().min(RECHECK_EVERY);
            tokio::select! {
                _ = cx.shutdown().cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            continue;
        }
        let mut moved = Vec::new();
        while let Some(&Reverse((wake, i))) = queue.peek() {
            if wake > now {
                break;
            }
            queue.pop();
            let t = &mut timed[i];
            match fire(&cx, t).await {
                Some(at) => {
                    moved.push((t.schedule.name().to_string(), at));
                    match t.schedule.next_after(at) {
                        Some(next) => {
                            t.next = next;
                            queue.push(Reverse((next, i)));
                        }
                        None => {
                            tracing::info!(schedule = %t.schedule.name(), "schedule never fires again");
                        }
                    }
                }
                None => {
                    let retry = chrono::Duration::from_std(RETRY_AFTER).unwrap_or_default();
                    queue.push(Reverse((Utc::now() + retry, i)));
                }
            }
            if cx.shutdown().is_cancelled() {
                break;
            }
        }
        state.set(moved).await;
    }
}

/// Appends the latest firing of `t` that is due: its `next`, unless the wait overslept (a
/// suspend) or this is a catch-up, which fires the latest missed one only. The firing's
/// time once stored; `None` when the append failed (it is tried again).
async fn fire(cx: &SourceContext, t: &mut Timed) -> Option<DateTime<Utc>> {
    let name = t.schedule.name();
    let at = t
        .schedule
        .latest_due(t.through, Utc::now())
        .unwrap_or(t.next);
    match cx.append(vec![t.schedule.message(at)], SERVER).await {
        Ok(appended) => {
            let duplicate = appended.first().is_some_and(|a| a.duplicate);
            tracing::info!(schedule = %name, at = %format_timestamp(at), duplicate, "schedule fired");
            t.through = at;
            Some(at)
        }
        Err(e) => {
            tracing::warn!(schedule = %name, cause = %e, "schedule firing not stored; retrying");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn schedule(cron: &str, tz: &str) -> Schedule {
        Schedule::compile(&ScheduleSettings {
            name: "s".into(),
            cron: cron.into(),
            timezone: Some(tz.into()),
            ..Default::default()
        })
        .unwrap()
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    /// Code, key, line and column of each error.
    type Found = (&'static str, Option<String>, Option<usize>, Option<usize>);

    fn codes(text: &str) -> Vec<Found> {
        let value: Value = serde_json::from_str(text).unwrap();
        check(text, &value["schedules"])
            .into_iter()
            .map(|e| (e.code.as_str(), e.key, e.line, e.column))
            .collect()
    }

    #[test]
    fn five_fields_or_six_with_seconds_first() {
        let five = schedule("30 9 * * 1-5", "UTC");
        // Friday 2026-11-27 10:00 → Monday 09:30.
        assert_eq!(
            five.next_after(utc(2026, 11, 27, 10, 0, 0)),
            Some(utc(2026, 11, 30, 9, 30, 0))
        );
        let six = schedule("15 30 9 * * *", "UTC");
        assert_eq!(
            six.next_after(utc(2026, 11, 27, 9, 30, 0)),
            Some(utc(2026, 11, 27, 9, 30, 15)),
            "the first of six fields is seconds"
        );
        let nickname = schedule("@daily", "UTC");
        assert_eq!(
            nickname.next_after(utc(2026, 11, 27, 9, 0, 0)),
            Some(utc(2026, 11, 28, 0, 0, 0))
        );
    }

    #[test]
    fn bad_cron_expressions_are_refused_with_the_key() {
        for (cron, says) in [
            ("* * * *", "expected 5 fields"),
            ("0 0 * * * * 2026", "got 7"),
            ("", "got 0"),
            ("61 * * * *", "invalid `cron` \"61 * * * *\": "),
            ("* * * * mon-xyz", "invalid `cron`"),
            ("*/0 * * * *", "invalid `cron`"),
        ] {
            let err = Schedule::compile(&ScheduleSettings {
                name: "s".into(),
                cron: cron.into(),
                ..Default::default()
            })
            .unwrap_err();
            assert_eq!(
                (err.code, err.key),
                (ErrorCode::InvalidCron, "cron"),
                "{cron}"
            );
            assert!(err.message.contains(says), "{cron}: {}", err.message);
            assert!(!err.message.ends_with('.'), "{}", err.message);
        }
        let err = Schedule::compile(&ScheduleSettings {
            name: "s".into(),
            cron: "* * * * *".into(),
            timezone: Some("Europe/Berlín".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(
            (err.code, err.key),
            (ErrorCode::InvalidTimezone, "timezone")
        );
    }

    #[test]
    fn config_errors_name_the_schedule_the_key_and_the_position() {
        let text = r#"{"schedules": [
  {"name": "ok", "cron": "0 9 * * *"},
  {"name": "bad", "cron": "0 9 * *"},
  {"name": "ok", "cron": "0 9 * * *", "timezone": "Mars/Base"},
  {"name": "typo", "cron": "* * * * *", "catchup": true},
  {"name": "", "cron": "* * * * *"},
  {"cron": "* * * * *"}
]}"#;
        assert_eq!(
            codes(text),
            [
                (
                    "invalid_cron",
                    Some("schedules[1].cron".into()),
                    Some(3),
                    Some(27)
                ),
                (
                    "duplicate_name",
                    Some("schedules[2].name".into()),
                    Some(4),
                    Some(12)
                ),
                (
                    "invalid_timezone",
                    Some("schedules[2].timezone".into()),
                    Some(4),
                    Some(51)
                ),
                (
                    "unknown_key",
                    Some("schedules[3].catchup".into()),
                    Some(5),
                    Some(41)
                ),
                (
                    "invalid_name",
                    Some("schedules[4].name".into()),
                    Some(6),
                    Some(12)
                ),
                ("wrong_type", Some("schedules[5]".into()), Some(7), Some(3)),
            ]
        );
        let value: Value = serde_json::from_str(text).unwrap();
        let messages: Vec<_> = check(text, &value["schedules"])
            .into_iter()
            .map(|e| e.message)
            .collect();
        assert!(
            messages[0].starts_with("schedule 1 `bad`: invalid `cron` \"0 9 * *\": expected 5"),
            "{messages:?}"
        );
        assert!(messages[5].contains("missing field `name`"), "{messages:?}");
        assert_eq!(
            codes(r#"{"schedules": {"a": 1}}"#),
            [("wrong_type", Some("schedules".into()), Some(1), Some(15))]
        );
    }

    #[test]
    fn a_time_zone_holds_its_wall_clock_across_dst_changes() {
        // 09:00 in Berlin on weekdays: 08:00 UTC in winter (CET), 07:00 UTC in summer (CEST).
        let berlin = schedule("0 9 * * 1-5", "Europe/Berlin");
        // Friday 2026-03-27, then the change (Sunday 03-29 02:00 → 03:00), then Monday 03-30.
        assert_eq!(
            berlin.next_after(utc(2026, 3, 26, 9, 0, 0)),
            Some(utc(2026, 3, 27, 8, 0, 0))
        );
        assert_eq!(
            berlin.next_after(utc(2026, 3, 27, 8, 0, 0)),
            Some(utc(2026, 3, 30, 7, 0, 0))
        );
        // Back to winter time on Sunday 2026-10-25.
        assert_eq!(
            berlin.next_after(utc(2026, 10, 23, 7, 0, 0)),
            Some(utc(2026, 10, 26, 8, 0, 0))
        );
    }

    #[test]
    fn a_time_skipped_by_dst_fires_after_the_gap_and_a_repeated_one_fires_once() {
        let nightly = schedule("30 2 * * *", "Europe/Berlin");
        // 2026-03-29 02:30 does not exist in Berlin: the firing is the first instant after the
        // gap, 03:00 CEST = 01:00 UTC.
        assert_eq!(
            nightly.next_after(utc(2026, 3, 28, 12, 0, 0)),
            Some(utc(2026, 3, 29, 1, 0, 0))
        );
        // 2026-10-25 02:30 happens twice (CEST, then CET): it fires once, then the next day.
        let first = nightly.next_after(utc(2026, 10, 24, 12, 0, 0)).unwrap();
        assert_eq!(first, utc(2026, 10, 25, 0, 30, 0));
        assert_eq!(nightly.next_after(first), Some(utc(2026, 10, 26, 1, 30, 0)));
    }

    #[test]
    fn the_latest_due_firing_is_the_one_caught_up() {
        let hourly = schedule("0 * * * *", "UTC");
        let after = utc(2026, 11, 25, 6, 30, 0);
        assert_eq!(
            hourly.latest_due(after, utc(2026, 11, 25, 9, 10, 0)),
            Some(utc(2026, 11, 25, 9, 0, 0)),
            "three were missed; only the latest is due"
        );
        assert_eq!(
            hourly.latest_due(after, utc(2026, 11, 25, 6, 59, 59)),
            None,
            "none was missed"
        );
        assert_eq!(
            hourly.latest_due(after, utc(2026, 11, 25, 7, 0, 0)),
            Some(utc(2026, 11, 25, 7, 0, 0)),
            "a firing due right now is due"
        );
    }

    #[test]
    fn a_firing_is_a_message_whose_id_is_the_name_and_the_due_time() {
        let s = Schedule::compile(&ScheduleSettings {
            name: "triage".into(),
            cron: "0 9 * * *".into(),
            metadata: BTreeMap::from([("team".into(), "payments".into())]),
            ..Default::default()
        })
        .unwrap();
        let at = utc(2026, 11, 25, 9, 0, 0);
        let m = s.message(at);
        assert_eq!(
            m.id.as_deref(),
            Some("schedule/triage/2026-11-25T09:00:00Z")
        );
        assert_eq!(
            (m.server.as_str(), m.channel.as_str(), m.content.as_str()),
            ("schedule", "schedule/triage", "scheduled: triage")
        );
        assert_eq!(m.timestamp, Some(at));
        assert_eq!(&m.metadata["team"], "payments");
        assert_eq!(&m.metadata["schedule"], "triage");
        assert_eq!(&m.metadata["scheduled_at"], "2026-11-25T09:00:00Z");
        assert_eq!(s.message(at).id, m.id, "the same firing, the same id");
    }
}
