//! The serde shape of `triggers.json` (raw strings, nothing compiled) and a locator that finds
//! where each key of each rule sits in the text, so that every error can name a line and column.
//!
//! serde_json's `Value` forgets positions, and failing at the first bad field would hide the
//! others, so the compiler checks each key of each rule on its own and asks the [`Locator`]
//! where it was written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::actions::Mode;

/// The whole file: `{"rules": [...]}`. `{}` and `{"rules": null}` mean zero rules.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "switchboard triggers.json")]
pub struct RawFile {
    /// Optional editor hint; ignored.
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Named lists of time intervals, as Alertmanager's `time_intervals`, for the rules'
    /// `activeTimeIntervals` and `muteTimeIntervals`.
    #[serde(
        rename = "timeIntervals",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub time_intervals: Option<std::collections::BTreeMap<String, Vec<RawTimeInterval>>>,
    /// The rules, in the order they are evaluated. Every matching rule fires.
    #[serde(default)]
    pub rules: Option<Vec<RawRule>>,
}

/// One time interval as written; every field it has must hold (absent = always). Read on
/// the wall clock of `location`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawTimeInterval {
    /// Times of day, any of them: `startTime` (inclusive) to `endTime` (exclusive), `HH:MM`,
    /// `endTime` up to `24:00`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<Vec<RawTimeRange>>,
    /// Days of the week or ranges, Sunday first: `"monday:friday"`, `"saturday"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weekdays: Option<Vec<String>>,
    /// Days of the month or ranges; negative from the end (`"-1"` = the last day): `"1:5"`,
    /// `"-3:-1"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days_of_month: Option<Vec<String>>,
    /// Months by name or number, or ranges: `"january:march"`, `"12"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub months: Option<Vec<String>>,
    /// Years or ranges: `"2026"`, `"2026:2027"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub years: Option<Vec<String>>,
    /// IANA time zone of the wall clock the other fields are read on (`"Europe/Berlin"`);
    /// default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// A time of day range of an interval's `times`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawTimeRange {
    /// `HH:MM`, inclusive.
    #[serde(default)]
    pub start_time: Option<String>,
    /// `HH:MM`, exclusive; up to `24:00`.
    #[serde(default)]
    pub end_time: Option<String>,
}

/// One rule as written. Keys are case-sensitive; unknown keys are errors.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRule {
    /// Required, unique. Identity of the rule's rate-limit and dedup state across reloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Empty or `*` = any server; otherwise a glob on the server name (a plain name is exact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Empty or `*` = any channel; otherwise a glob. A trailing `/*` matches the prefix itself
    /// and everything below it (`alerts/*` matches `alerts`, `alerts/x/y`, not `alertsx`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Rust regex searched in the content (unanchored); case-sensitive unless `(?i)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_regex: Option<String>,
    /// Alertmanager-style matchers over the message's metadata, all of which must hold:
    /// `KEY="v"`, `KEY!="v"`, `KEY=~"regex"`, `KEY!~"regex"` (regexes anchored at both ends;
    /// a missing key is the empty string), e.g. `labels.team="db"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matchers: Option<Vec<String>>,
    /// Names from the top-level `timeIntervals`: the rule fires only inside one of them
    /// (otherwise it is held back as `inactive`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_time_intervals: Option<Vec<String>>,
    /// Names from the top-level `timeIntervals`: the rule does not fire inside any of them
    /// (held back as `muted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mute_time_intervals: Option<Vec<String>>,
    /// `notify` (default): nudge; `confirm`: ask the user first; `auto`: queue the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Mode>")]
    pub mode: Option<String>,
    /// Template with {{content}} {{channel}} {{server}} {{seq}} {{timestamp}} {{meta.KEY}};
    /// required for confirm and auto.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Tool whitelist (names or globs); required and non-empty for auto.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// `"5m"`: at most one fire per 5 minutes; `"10/1h"`: at most 10 fires in any hour;
    /// `"0"`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<String>,
    /// Suppress a repeat of the same dedup key within this window (e.g. `"30m"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_window: Option<String>,
    /// Template for the dedup key; default: the first 256 bytes of the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
    /// How long a confirm waits for an answer (default `"30m"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_timeout: Option<String>,
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `true`: when this rule matches a message, later rules are not tried for it, whether
    /// this rule fired or its dedup window or rate limit held it back. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<bool>,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `wait` (default; `session` is accepted as an alias): an auto prompt waits for the
    /// in-session agent's wait tool. `exec`: it runs in a fresh headless host (the `exec`
    /// section of `switchboard.json`); auto rules only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::actions::Delivery>")]
    pub delivery: Option<String>,
    /// Confirm rules: a later message matching the rule's `server` and `channel` and this
    /// regex closes the rule's pending confirms whose source message renders the same
    /// `resolveKey` (e.g. `"^\\[RESOLVED\\]"`). Needs `resolveKey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve_regex: Option<String>,
    /// Confirm rules: the template both messages must render alike for one to close the
    /// other's confirm (e.g. `"{{meta.fingerprint}}"`). Needs `resolveRegex`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve_key: Option<String>,
    /// Confirm rules: the paths that may answer (`cli`, `tool`, `web`, `elicitation`,
    /// `relay`, `slack`); absent = any. `["cli", "web", "elicitation"]`: the agent itself cannot approve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<crate::actions::Via>>")]
    pub approve_via: Option<Vec<String>>,
    /// Globs on consumer (session) names that may receive the rule's nudges, confirm requests
    /// and work (`serve --consumer NAME`); default: every session. Work for a consumer with no
    /// session open waits for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumers: Option<Vec<String>>,
}

/// The keys a rule may have, in the order the documentation lists them.
pub const RULE_KEYS: &[&str] = &[
    "name",
    "server",
    "channel",
    "contentRegex",
    "matchers",
    "activeTimeIntervals",
    "muteTimeIntervals",
    "mode",
    "prompt",
    "tools",
    "rateLimit",
    "dedupWindow",
    "dedupKey",
    "confirmTimeout",
    "enabled",
    "stop",
    "description",
    "delivery",
    "resolveRegex",
    "resolveKey",
    "approveVia",
    "consumers",
];

/// The keys the top level may have.
pub const TOP_KEYS: &[&str] = &["rules", "timeIntervals", "$schema"];

/// The keys a time interval may have.
pub const INTERVAL_KEYS: &[&str] = &[
    "times",
    "weekdays",
    "daysOfMonth",
    "months",
    "years",
    "location",
];

/// A 1-based line and column (columns count characters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    /// Line.
    pub line: usize,
    /// Column.
    pub column: usize,
}

/// Where a key and its value were written.
#[derive(Clone, Debug)]
pub struct KeyPos {
    /// The key, decoded.
    pub key: String,
    /// The opening quote of the key.
    pub at: Pos,
    /// The first character of the value.
    pub value: Pos,
    /// When the value is an array: where each element starts.
    pub items: Vec<Pos>,
}

impl KeyPos {
    /// Where element `i` of the value starts, else the value.
    pub fn item(&self, i: usize) -> Pos {
        self.items.get(i).copied().unwrap_or(self.value)
    }
}

/// An element of an array of objects: where it starts, and its keys if it is an object.
pub type Located = (Pos, Vec<KeyPos>);

/// Positions in a syntactically valid file.
#[derive(Clone, Debug, Default)]
pub struct Locator {
    /// Where the top-level value starts.
    pub top: Pos,
    /// The top-level object's keys.
    pub top_keys: Vec<KeyPos>,
    /// Each element of `rules`: where it starts, and its keys if it is an object.
    pub rules: Vec<(Pos, Vec<KeyPos>)>,
    /// Each name of `timeIntervals`, and each interval of its list: where it starts and its
    /// keys.
    pub intervals: Vec<(KeyPos, Vec<Located>)>,
}

impl Locator {
    /// Indexes `text`, which must already have parsed as JSON.
    pub fn new(text: &str) -> Locator {
        let mut s = Scanner {
            b: text.as_bytes(),
            i: 0,
            pos: Pos { line: 1, column: 1 },
        };
        let mut loc = Locator::default();
        s.ws();
        loc.top = s.pos;
        if s.peek() != Some(b'{') {
            return loc;
        }
        s.object(|s, key| {
            let kp = KeyPos {
                key: key.0,
                at: key.1,
                value: s.pos,
                items: Vec::new(),
            };
            match kp.key.as_str() {
                "rules" if s.peek() == Some(b'[') => {
                    loc.rules = s.objects();
                }
                "timeIntervals" if s.peek() == Some(b'{') => s.object(|s, name| {
                    let name = KeyPos {
                        key: name.0,
                        at: name.1,
                        value: s.pos,
                        items: Vec::new(),
                    };
                    let list = if s.peek() == Some(b'[') {
                        s.objects()
                    } else {
                        s.skip_value();
                        Vec::new()
                    };
                    loc.intervals.push((name, list));
                }),
                _ => s.skip_value(),
            }
            loc.top_keys.push(kp);
        });
        loc
    }

    /// Where the value of `key` of the top-level object starts.
    pub fn top_value(&self, key: &str) -> Pos {
        self.top_keys
            .iter()
            .rev()
            .find(|k| k.key == key)
            .map_or(self.top, |k| k.value)
    }
}

/// A forward-only scanner over valid JSON that tracks line and column.
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    pos: Pos,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn bump(&mut self) {
        let Some(c) = self.peek() else { return };
        self.i += 1;
        if c == b'\n' {
            self.pos.line += 1;
            self.pos.column = 1;
        } else if c & 0xC0 != 0x80 {
            self.pos.column += 1;
        }
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.bump();
        }
    }

    /// Reads a string token; returns it decoded (best effort) and where it started.
    fn string(&mut self) -> (String, Pos) {
        let start = self.pos;
        let from = self.i;
        self.bump(); // opening quote
        while let Some(c) = self.peek() {
            self.bump();
            match c {
                b'\\' => self.bump(),
                b'"' => break,
                _ => {}
            }
        }
        let raw = std::str::from_utf8(&self.b[from..self.i]).unwrap_or("\"\"");
        (serde_json::from_str(raw).unwrap_or_default(), start)
    }

    /// Walks an object, calling `each` with the scanner positioned at each value.
    fn object(&mut self, mut each: impl FnMut(&mut Self, (String, Pos))) {
        self.bump(); // {
        loop {
            self.ws();
            match self.peek() {
                Some(b'"') => {
                    let key = self.string();
                    self.ws();
                    self.bump(); // :
                    self.ws();
                    each(self, key);
                    self.ws();
                    if self.peek() == Some(b',') {
                        self.bump();
                    }
                }
                Some(b'}') => {
                    self.bump();
                    return;
                }
                None => return,
                Some(_) => self.bump(),
            }
        }
    }

    /// An array of objects: where each element starts, and the keys of those that are
    /// objects (with where each element of an array value starts).
    fn objects(&mut self) -> Vec<(Pos, Vec<KeyPos>)> {
        let mut out = Vec::new();
        self.array(|s| {
            let start = s.pos;
            let mut keys = Vec::new();
            if s.peek() == Some(b'{') {
                s.object(|s, key| {
                    let mut kp = KeyPos {
                        key: key.0,
                        at: key.1,
                        value: s.pos,
                        items: Vec::new(),
                    };
                    if s.peek() == Some(b'[') {
                        s.array(|s| {
                            kp.items.push(s.pos);
                            s.skip_value();
                        });
                    } else {
                        s.skip_value();
                    }
                    keys.push(kp);
                });
            } else {
                s.skip_value();
            }
            out.push((start, keys));
        });
        out
    }

    /// Walks an array, calling `each` with the scanner at each element.
    fn array(&mut self, mut each: impl FnMut(&mut Self)) {
        self.bump(); // [
        loop {
            self.ws();
            match self.peek() {
                Some(b']') => {
                    self.bump();
                    return;
                }
                None => return,
                Some(_) => {
                    each(self);
                    self.ws();
                    if self.peek() == Some(b',') {
                        self.bump();
                    }
                }
            }
        }
    }

    fn skip_value(&mut self) {
        match self.peek() {
            Some(b'"') => {
                self.string();
            }
            Some(b'{') => self.object(|s, _| s.skip_value()),
            Some(b'[') => self.array(|s| s.skip_value()),
            _ => {
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n') {
                        break;
                    }
                    self.bump();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_rule_keys() {
        let text = "{\n  \"rules\": [\n    {\"name\": \"a\",\n     \"chännel\": \"x\"},\n    7,\n    { \"mode\" : [1, {\"x\": \"}\"}] , \"name\":\"b\"}\n  ]\n}\n";
        serde_json::from_str::<serde_json::Value>(text).unwrap();
        let loc = Locator::new(text);
        assert_eq!(loc.top, Pos { line: 1, column: 1 });
        assert_eq!(
            loc.top_value("rules"),
            Pos {
                line: 2,
                column: 12
            }
        );
        assert_eq!(loc.rules.len(), 3);
        let (start, keys) = &loc.rules[0];
        assert_eq!(*start, Pos { line: 3, column: 5 });
        assert_eq!(keys[0].key, "name");
        assert_eq!(keys[0].at, Pos { line: 3, column: 6 });
        assert_eq!(
            keys[0].value,
            Pos {
                line: 3,
                column: 14
            }
        );
        assert_eq!(keys[1].key, "chännel");
        assert_eq!(
            keys[1].value,
            Pos {
                line: 4,
                column: 17
            }
        );
        assert!(loc.rules[1].1.is_empty());
        let keys = &loc.rules[2].1;
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[1].key, "name");
        assert_eq!(
            keys[1].at,
            Pos {
                line: 6,
                column: 34
            }
        );
    }
}
