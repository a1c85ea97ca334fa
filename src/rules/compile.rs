//! From text to a [`RuleSet`]: JSON syntax, then each key of each rule, then each rule's
//! meaning. Every error is collected (nothing stops at the first), located, and the list is
//! returned in file order. Nothing is compiled into the set unless the whole file is valid.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::error::{ErrorCode, RuleError, regex_reason, suggest};
use super::file::{
    INTERVAL_KEYS, KeyPos, Locator, Pos, RULE_KEYS, RawRule, RawTimeInterval, TOP_KEYS,
};
use super::interval::{NamedIntervals, TimeInterval};
use super::matcher::Matcher;
use super::pattern::{NamePattern, compile_glob};
use super::template::Template;
use super::{ContentRegex, DEFAULT_CONFIRM_TIMEOUT, RateLimit, Resolve, Rule, RuleSet};
use crate::actions::{Delivery, Mode, Via};
use crate::duration;

/// Compiles the text of a rules file.
pub fn compile(text: &str) -> Result<RuleSet, Vec<RuleError>> {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Err(vec![syntax_error(text, &e)]),
    };
    let loc = Locator::new(text);
    let mut errors = Vec::new();
    let top = match value {
        Value::Object(map) => map,
        other => {
            return Err(vec![RuleError {
                code: ErrorCode::ParseError,
                rule_index: None,
                rule: None,
                key: None,
                line: Some(loc.top.line),
                column: Some(loc.top.column),
                message: format!(
                    "parse error: expected an object `{{\"rules\": [...]}}` at the top level, got {}",
                    crate::json_kind(&other)
                ),
            }]);
        }
    };
    for kp in &loc.top_keys {
        if !TOP_KEYS.contains(&kp.key.as_str()) {
            errors.push(unknown_key(None, None, kp, TOP_KEYS));
        }
    }
    let raw_rules = match top.get("rules") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(other) => {
            let at = loc.top_value("rules");
            errors.push(RuleError {
                code: ErrorCode::ParseError,
                rule_index: None,
                rule: None,
                key: Some("rules".into()),
                line: Some(at.line),
                column: Some(at.column),
                message: format!(
                    "parse error: `rules` must be an array of rules, got {}",
                    crate::json_kind(other)
                ),
            });
            Vec::new()
        }
    };

    let intervals = time_intervals(top.get("timeIntervals"), &loc, &mut errors);

    let mut rules = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    for (index, item) in raw_rules.into_iter().enumerate() {
        let (start, keys) = loc.rules.get(index).cloned().unwrap_or_default();
        let mut cx = RuleCx {
            index,
            name: None,
            start,
            keys,
            errors: &mut errors,
            intervals: &intervals,
        };
        let Value::Object(map) = item else {
            cx.error(
                ErrorCode::ParseError,
                None,
                start,
                format!(
                    "parse error: a rule must be an object, got {}",
                    crate::json_kind(&item)
                ),
            );
            continue;
        };
        let Some(raw) = cx.typed(map) else { continue };
        if let Some(rule) = cx.rule(raw, &mut names) {
            rules.push(rule);
        }
    }

    if errors.is_empty() {
        share_regexes(&mut rules);
        Ok(RuleSet::new(rules, false))
    } else {
        errors.sort_by_key(|e| (e.line, e.column));
        Err(errors)
    }
}

/// Rules with the same `contentRegex` share one compiled regex: it is built once, and its
/// searches stopped by the budget are counted for each rule that shares it (the engine runs
/// it once per message for all of them).
fn share_regexes(rules: &mut [Rule]) {
    let mut first: HashMap<String, ContentRegex> = HashMap::new();
    for re in rules.iter_mut().filter_map(|r| r.content_regex.as_mut()) {
        match first.get(re.as_str()) {
            Some(shared) => *re = shared.clone(),
            None => {
                first.insert(re.as_str().to_string(), re.clone());
            }
        }
    }
}

/// The top-level `timeIntervals`: name → its intervals, each checked; errors are collected
/// (a bad interval is left out, so a rule naming it is not reported twice).
fn time_intervals(
    value: Option<&Value>,
    loc: &Locator,
    errors: &mut Vec<RuleError>,
) -> BTreeMap<String, Option<Arc<NamedIntervals>>> {
    let mut out = BTreeMap::new();
    let map = match value {
        None | Some(Value::Null) => return out,
        Some(Value::Object(map)) => map,
        Some(other) => {
            let at = loc.top_value("timeIntervals");
            interval_error(
                errors,
                at,
                Some("timeIntervals".into()),
                format!(
                    "`timeIntervals` must be an object of named lists of intervals, got {}",
                    crate::json_kind(other)
                ),
            );
            return out;
        }
    };
    for (name, list) in map {
        let named = named_intervals(name, list, loc, errors);
        out.insert(name.clone(), named);
    }
    out
}

/// An error in `timeIntervals` (outside any rule).
fn interval_error(errors: &mut Vec<RuleError>, at: Pos, key: Option<String>, message: String) {
    errors.push(RuleError {
        code: ErrorCode::InvalidTimeInterval,
        rule_index: None,
        rule: None,
        key,
        line: Some(at.line),
        column: Some(at.column),
        message,
    })
}

/// The list of intervals named `name`, each checked; `None` when one of them is wrong
/// (reported).
fn named_intervals(
    name: &String,
    list: &Value,
    loc: &Locator,
    errors: &mut Vec<RuleError>,
) -> Option<Arc<NamedIntervals>> {
    let (name_pos, located) = loc
        .intervals
        .iter()
        .rev()
        .find(|(k, _)| k.key == *name)
        .map(|(k, l)| (k.clone(), l.clone()))
        .unwrap_or_else(|| {
            let at = loc.top_value("timeIntervals");
            (
                KeyPos {
                    key: name.clone(),
                    at,
                    value: at,
                    items: Vec::new(),
                },
                Vec::new(),
            )
        });
    let Value::Array(items) = list else {
        interval_error(
            errors,
            name_pos.value,
            Some(name.clone()),
            format!(
                "time interval `{name}` must be a list of intervals, got {}",
                crate::json_kind(list)
            ),
        );
        return None;
    };
    let mut ok = true;
    let mut intervals = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let (start, keys) = located
            .get(i)
            .cloned()
            .unwrap_or((name_pos.value, Vec::new()));
        match interval(name, i, item, (start, &keys), errors) {
            Some(interval) => intervals.push(interval),
            None => ok = false,
        }
    }
    ok.then(|| {
        Arc::new(NamedIntervals {
            name: name.clone(),
            intervals,
        })
    })
}

/// Entry `i` of the list named `name`, written at `start` with `keys`: each key checked, then
/// the interval's meaning; `None` when it is wrong (reported).
fn interval(
    name: &String,
    i: usize,
    item: &Value,
    (start, keys): (Pos, &[KeyPos]),
    errors: &mut Vec<RuleError>,
) -> Option<TimeInterval> {
    let at_key = |key: &str| {
        keys.iter()
            .rev()
            .find(|k| k.key == key)
            .map_or(start, |k| k.value)
    };
    let Value::Object(fields) = item else {
        interval_error(
            errors,
            start,
            Some(name.clone()),
            format!(
                "time interval `{name}` entry {i} must be an object, got {}",
                crate::json_kind(item)
            ),
        );
        return None;
    };
    let before = errors.len();
    for kp in keys {
        if !INTERVAL_KEYS.contains(&kp.key.as_str()) {
            let mut e = unknown_key(None, None, kp, INTERVAL_KEYS);
            e.message = format!("time interval `{name}`: {}", e.message);
            errors.push(e);
        }
    }
    let mut clean = Map::new();
    for (key, value) in fields {
        if !INTERVAL_KEYS.contains(&key.as_str()) {
            continue;
        }
        let value = numbers_as_strings(key, value);
        match interval_key_type(key, &value) {
            Ok(()) => {
                clean.insert(key.clone(), value);
            }
            Err(reason) if !value.is_null() => {
                interval_error(
                    errors,
                    at_key(key),
                    Some(key.clone()),
                    format!("time interval `{name}`: {reason}"),
                );
            }
            Err(_) => {}
        }
    }
    if errors.len() != before {
        return None;
    }
    let raw: RawTimeInterval = match serde_json::from_value(Value::Object(clean)) {
        Ok(raw) => raw,
        Err(e) => {
            interval_error(
                errors,
                start,
                Some(name.clone()),
                format!("time interval `{name}`: {e}"),
            );
            return None;
        }
    };
    match TimeInterval::new(&raw) {
        Ok(interval) => Some(interval),
        Err(e) => {
            interval_error(
                errors,
                at_key(e.field),
                Some(e.field.to_string()),
                format!(
                    "time interval `{name}`: invalid `{}`: {}",
                    e.field, e.reason
                ),
            );
            None
        }
    }
}

/// The value of interval key `key`, with numbers welcome where the values are numbers
/// (`"daysOfMonth": [1, -1]`).
fn numbers_as_strings(key: &str, value: &Value) -> Value {
    match value {
        Value::Array(vs) if matches!(key, "daysOfMonth" | "months" | "years") => Value::Array(
            vs.iter()
                .map(|v| match v {
                    Value::Number(n) => Value::String(n.to_string()),
                    other => other.clone(),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Whether `value` has the type interval key `key` takes; else why not.
fn interval_key_type(key: &str, value: &Value) -> Result<(), String> {
    match key {
        "times" => serde_json::from_value::<Vec<super::file::RawTimeRange>>(value.clone())
            .map(drop)
            .map_err(|e| format!("`times` must be a list of {{\"startTime\": \"HH:MM\", \"endTime\": \"HH:MM\"}}: {e}")),
        "location" => serde_json::from_value::<String>(value.clone())
            .map(drop)
            .map_err(|_| format!("`location` must be a string, got {}", crate::json_kind(value))),
        _ => serde_json::from_value::<Vec<String>>(value.clone())
            .map(drop)
            .map_err(|_| format!("`{key}` must be a list of strings, got {}", crate::json_kind(value))),
    }
}

/// A JSON syntax error: serde's reason without its "at line" suffix, plus the position.
fn syntax_error(text: &str, e: &serde_json::Error) -> RuleError {
    let full = e.to_string();
    let mut message = match full.rfind(" at line ") {
        Some(i) => full[..i].to_string(),
        None => full,
    };
    // Point at comments, the most common non-JSON in config files.
    let line_text = text.lines().nth(e.line().saturating_sub(1)).unwrap_or("");
    let col0 = line_text
        .char_indices()
        .nth(e.column().saturating_sub(1))
        .map_or(line_text.len(), |(i, _)| i);
    if line_text[col0.min(line_text.len())..].starts_with("//")
        || line_text[col0.min(line_text.len())..].starts_with("/*")
    {
        message = "comments are not allowed in JSON".into();
    }
    RuleError {
        code: ErrorCode::ParseError,
        rule_index: None,
        rule: None,
        key: None,
        line: Some(e.line().max(1)),
        column: Some(e.column().max(1)),
        message: format!("parse error: {message}"),
    }
}

fn unknown_key(
    rule_index: Option<usize>,
    rule: Option<String>,
    kp: &KeyPos,
    known: &[&str],
) -> RuleError {
    let mut message = format!("unknown key `{}`", kp.key);
    match suggest(&kp.key, known) {
        Some(s) => message.push_str(&format!("; did you mean `{s}`?")),
        None => message.push_str(&format!("; known keys: {}", known.join(", "))),
    }
    RuleError {
        code: ErrorCode::UnknownKey,
        rule_index,
        rule,
        key: Some(kp.key.clone()),
        line: Some(kp.at.line),
        column: Some(kp.at.column),
        message,
    }
}

/// What one rule's checks need: where it is, where errors go, the file's time intervals
/// (`None`: named but invalid, already reported).
struct RuleCx<'a> {
    index: usize,
    name: Option<String>,
    start: Pos,
    keys: Vec<KeyPos>,
    errors: &'a mut Vec<RuleError>,
    intervals: &'a BTreeMap<String, Option<Arc<NamedIntervals>>>,
}

impl RuleCx<'_> {
    fn error(&mut self, code: ErrorCode, key: Option<&str>, at: Pos, message: String) {
        self.errors.push(RuleError {
            code,
            rule_index: Some(self.index),
            rule: self.name.clone(),
            key: key.map(str::to_string),
            line: Some(at.line),
            column: Some(at.column),
            message,
        });
    }

    /// Where the value of `key` is, else the key `fallback`'s, else the rule's start.
    fn value_pos(&self, key: &str) -> Pos {
        self.keys
            .iter()
            .rev()
            .find(|k| k.key == key)
            .map_or(self.start, |k| k.value)
    }

    fn key_pos(&self, key: &str) -> Option<Pos> {
        self.keys.iter().rev().find(|k| k.key == key).map(|k| k.at)
    }

    /// Where element `i` of the array value of `key` starts.
    fn item_pos(&self, key: &str, i: usize) -> Pos {
        self.keys
            .iter()
            .rev()
            .find(|k| k.key == key)
            .map_or(self.start, |k| k.item(i))
    }

    /// `matchers`: each parsed; a bad one is reported at its element, the column where the
    /// problem shows when the JSON string has no escapes before it.
    fn matchers(&mut self, list: Option<&[String]>) -> Vec<Matcher> {
        let mut out = Vec::new();
        for (i, text) in list.unwrap_or_default().iter().enumerate() {
            match Matcher::parse(text) {
                Ok(m) => out.push(m),
                Err(e) => {
                    let mut at = self.item_pos("matchers", i);
                    let raw_prefix: String = text.chars().take(e.at).collect();
                    if !raw_prefix.contains(['"', '\\', '\n', '\t'])
                        && !raw_prefix.chars().any(char::is_control)
                    {
                        at.column += 1 + e.at;
                    }
                    self.error(
                        ErrorCode::InvalidMatcher,
                        Some("matchers"),
                        at,
                        format!("invalid matcher `{text}`: {}", e.reason),
                    );
                }
            }
        }
        out
    }

    /// `activeTimeIntervals` or `muteTimeIntervals`: each name must be in `timeIntervals`.
    fn interval_names(&mut self, key: &str, list: Option<&[String]>) -> Vec<Arc<NamedIntervals>> {
        let mut out = Vec::new();
        for (i, name) in list.unwrap_or_default().iter().enumerate() {
            match self.intervals.get(name) {
                Some(Some(named)) => out.push(named.clone()),
                Some(None) => {}
                None => {
                    let known: Vec<&str> = self.intervals.keys().map(String::as_str).collect();
                    let mut message =
                        format!("`{key}` names \"{name}\", which is not in `timeIntervals`");
                    match suggest(name, &known) {
                        Some(s) => message.push_str(&format!("; did you mean \"{s}\"?")),
                        None if known.is_empty() => {
                            message.push_str("; define it in the top-level `timeIntervals` object")
                        }
                        None => message.push_str(&format!("; defined: {}", known.join(", "))),
                    }
                    let at = self.item_pos(key, i);
                    self.error(ErrorCode::UnknownTimeInterval, Some(key), at, message);
                }
            }
        }
        out
    }

    /// Checks every key's name and type; returns the typed rule when all are right.
    fn typed(&mut self, map: Map<String, Value>) -> Option<RawRule> {
        if let Some(Value::String(n)) = map.get("name")
            && !n.trim().is_empty()
        {
            self.name = Some(n.clone());
        }
        for kp in self.keys.clone() {
            if !RULE_KEYS.contains(&kp.key.as_str()) {
                let e = unknown_key(Some(self.index), self.name.clone(), &kp, RULE_KEYS);
                self.errors.push(e);
            }
        }
        // Unknown keys are reported above and left out; the rule's meaning is still checked.
        // A known key of the wrong type stops the rule here, so nothing is reported twice.
        let before = self.errors.len();
        let mut clean = Map::new();
        for (key, value) in map {
            if !RULE_KEYS.contains(&key.as_str()) {
                continue;
            }
            let ok = match key.as_str() {
                "tools"
                | "matchers"
                | "activeTimeIntervals"
                | "muteTimeIntervals"
                | "approveVia"
                | "consumers" => self.check::<Vec<String>>(&key, &value, "an array of strings"),
                "enabled" | "stop" => self.check::<bool>(&key, &value, "true or false"),
                _ => self.check::<String>(&key, &value, "a string"),
            };
            if ok {
                clean.insert(key, value);
            }
        }
        if self.errors.len() != before {
            return None;
        }
        match serde_json::from_value::<RawRule>(Value::Object(clean)) {
            Ok(raw) => Some(raw),
            Err(e) => {
                let at = self.start;
                self.error(ErrorCode::ParseError, None, at, e.to_string());
                None
            }
        }
    }

    fn check<T: DeserializeOwned>(&mut self, key: &str, value: &Value, want: &str) -> bool {
        if value.is_null() || serde_json::from_value::<T>(value.clone()).is_ok() {
            return true;
        }
        let code = match key {
            "mode" => ErrorCode::InvalidMode,
            "rateLimit" => ErrorCode::InvalidRateLimit,
            "dedupWindow" => ErrorCode::InvalidDedupWindow,
            "confirmTimeout" => ErrorCode::InvalidDuration,
            "name" => ErrorCode::MissingName,
            "matchers" => ErrorCode::InvalidMatcher,
            "activeTimeIntervals" | "muteTimeIntervals" => ErrorCode::UnknownTimeInterval,
            _ => ErrorCode::ParseError,
        };
        let mut message = format!("`{key}` must be {want}, got {}", crate::json_kind(value));
        if value.is_number() && matches!(key, "rateLimit" | "dedupWindow" | "confirmTimeout") {
            message.push_str(&format!("; write a string with a unit, e.g. \"{value}s\""));
        }
        let at = self.value_pos(key);
        self.error(code, Some(key), at, message);
        false
    }

    /// Checks the meaning of a well-typed rule and compiles it. Each key is checked in the
    /// order below, which is the order errors at one place are reported in.
    fn rule(&mut self, raw: RawRule, names: &mut HashMap<String, usize>) -> Option<Rule> {
        let before = self.errors.len();
        let name = self.unique_name(raw.name.as_deref(), names);
        let mode = self.mode(raw.mode.as_deref());
        let server = self.pattern("server", raw.server.as_deref());
        let channel = self.pattern("channel", raw.channel.as_deref());
        let content_regex = self.content_regex(raw.content_regex.as_deref());
        let matchers = self.matchers(raw.matchers.as_deref());
        let active_intervals =
            self.interval_names("activeTimeIntervals", raw.active_time_intervals.as_deref());
        let mute_intervals =
            self.interval_names("muteTimeIntervals", raw.mute_time_intervals.as_deref());
        let tools = raw.tools.clone().unwrap_or_default();
        self.auto_needs_tools(mode, &tools);
        let prompt = self.prompt(raw.prompt.as_deref(), mode);
        self.tool_globs(&tools);
        let consumers = self.consumers(raw.consumers.as_deref());
        let rate_limit = self.rate_limit(raw.rate_limit.as_deref());
        let dedup_window = self.dedup_window(raw.dedup_window.as_deref());
        let dedup_key = match raw.dedup_key.as_deref() {
            Some(k) if !k.is_empty() => self.template("dedupKey", k),
            _ => None,
        };
        let confirm_timeout = self.confirm_timeout(raw.confirm_timeout.as_deref());
        let delivery = self.delivery(raw.delivery.as_deref(), mode, &tools);
        let resolve = self.resolve(&raw, mode);
        let approve_via = self.approve_via(raw.approve_via.as_deref(), mode);

        if self.errors.len() != before {
            return None;
        }
        Some(Rule {
            name: name.into(),
            mode,
            server,
            channel,
            content_regex,
            matchers,
            active_intervals,
            mute_intervals,
            prompt,
            tools: tools.into_iter().map(|t| t.trim().to_string()).collect(),
            delivery,
            rate_limit,
            dedup_window,
            dedup_key,
            confirm_timeout,
            enabled: raw.enabled.unwrap_or(true),
            stop: raw.stop.unwrap_or(false),
            description: raw.description.clone().unwrap_or_default(),
            resolve,
            approve_via,
            consumers,
            raw,
        })
    }

    /// `name`: present, not blank, and not used by an earlier rule (`names`, which it joins).
    fn unique_name(&mut self, given: Option<&str>, names: &mut HashMap<String, usize>) -> String {
        let name = given.unwrap_or_default().trim().to_string();
        if name.is_empty() {
            let at = self.key_pos("name").unwrap_or(self.start);
            self.error(
                ErrorCode::MissingName,
                Some("name"),
                at,
                "every rule needs a non-empty `name`; it identifies its rate-limit and dedup state"
                    .into(),
            );
        } else if let Some(first) = names.get(&name) {
            let at = self.value_pos("name");
            self.error(
                ErrorCode::DuplicateName,
                Some("name"),
                at,
                format!("name \"{name}\" is already used by rule {first}; names must be unique"),
            );
        } else {
            names.insert(name.clone(), self.index);
        }
        name
    }

    /// `mode`: `notify` (the default), `confirm` or `auto`.
    fn mode(&mut self, given: Option<&str>) -> Mode {
        match given.map(str::trim) {
            None | Some("") | Some("notify") => Mode::Notify,
            Some("confirm") => Mode::Confirm,
            Some("auto") => Mode::Auto,
            Some(other) => {
                let mut message =
                    format!("invalid `mode` \"{other}\"; expected `notify`, `confirm` or `auto`");
                if matches!(
                    other.to_ascii_lowercase().as_str(),
                    "notify" | "confirm" | "auto"
                ) {
                    message.push_str(" (modes are lowercase)");
                }
                let at = self.value_pos("mode");
                self.error(ErrorCode::InvalidMode, Some("mode"), at, message);
                Mode::Notify
            }
        }
    }

    /// `contentRegex`, compiled; none when absent or empty.
    fn content_regex(&mut self, src: Option<&str>) -> Option<ContentRegex> {
        match src {
            None | Some("") => None,
            Some(src) => match ContentRegex::new(src) {
                Ok(re) => Some(re),
                Err(e) => {
                    let at = self.value_pos("contentRegex");
                    self.error(
                        ErrorCode::InvalidRegex,
                        Some("contentRegex"),
                        at,
                        format!("invalid `contentRegex` \"{src}\": {}", regex_reason(&e)),
                    );
                    None
                }
            },
        }
    }

    /// Mode `auto` needs a `tools` list that names something.
    fn auto_needs_tools(&mut self, mode: Mode, tools: &[String]) {
        if mode == Mode::Auto && tools.iter().all(|t| t.trim().is_empty()) {
            let at = self
                .key_pos("tools")
                .or_else(|| self.key_pos("mode"))
                .unwrap_or(self.start);
            self.error(
                ErrorCode::AutoRequiresTools,
                Some("tools"),
                at,
                "mode `auto` requires a non-empty `tools` list".into(),
            );
        }
    }

    /// `prompt`, as a template; required by every mode but `notify`.
    fn prompt(&mut self, given: Option<&str>, mode: Mode) -> Option<Template> {
        match given {
            Some(p) if !p.trim().is_empty() => self.template("prompt", p),
            _ => {
                if mode != Mode::Notify {
                    // At `mode`, which asks for it; after a missing `tools` at the same place,
                    // the order chatcli reports them in.
                    let at = self
                        .key_pos("prompt")
                        .or_else(|| self.key_pos("mode"))
                        .unwrap_or(self.start);
                    self.error(
                        ErrorCode::PromptRequired,
                        Some("prompt"),
                        at,
                        format!("mode `{mode}` requires a `prompt`"),
                    );
                }
                None
            }
        }
    }

    /// Each `tools` entry: not empty, and a valid glob.
    fn tool_globs(&mut self, tools: &[String]) {
        for tool in tools {
            if tool.trim().is_empty() {
                let at = self.value_pos("tools");
                self.error(
                    ErrorCode::InvalidGlob,
                    Some("tools"),
                    at,
                    "`tools` entries cannot be empty".into(),
                );
            } else if let Err(reason) = compile_glob(tool) {
                let at = self.value_pos("tools");
                self.error(
                    ErrorCode::InvalidGlob,
                    Some("tools"),
                    at,
                    format!("invalid `tools` glob \"{tool}\": {reason}"),
                );
            }
        }
    }

    /// `rateLimit`; none when absent.
    fn rate_limit(&mut self, given: Option<&str>) -> RateLimit {
        match given {
            None => RateLimit::None,
            Some(text) => match parse_rate_limit(text) {
                Ok(r) => r,
                Err(reason) => {
                    let at = self.value_pos("rateLimit");
                    self.error(
                        ErrorCode::InvalidRateLimit,
                        Some("rateLimit"),
                        at,
                        format!("invalid `rateLimit` \"{text}\": {reason}"),
                    );
                    RateLimit::None
                }
            },
        }
    }

    /// `dedupWindow`; none when absent or zero.
    fn dedup_window(&mut self, given: Option<&str>) -> Option<Duration> {
        match given {
            None => None,
            Some(text) => match duration::parse(text) {
                Ok(d) if d.is_zero() => None,
                Ok(d) => Some(d),
                Err(reason) => {
                    let at = self.value_pos("dedupWindow");
                    self.error(
                        ErrorCode::InvalidDedupWindow,
                        Some("dedupWindow"),
                        at,
                        format!("invalid `dedupWindow` \"{text}\": {reason}"),
                    );
                    None
                }
            },
        }
    }

    /// `confirmTimeout`: longer than zero; [`DEFAULT_CONFIRM_TIMEOUT`] when absent.
    fn confirm_timeout(&mut self, given: Option<&str>) -> Duration {
        let Some(text) = given else {
            return DEFAULT_CONFIRM_TIMEOUT;
        };
        let message = match duration::parse(text) {
            Ok(d) if !d.is_zero() => return d,
            Ok(_) => "`confirmTimeout` must be longer than zero".to_string(),
            Err(reason) => format!("invalid `confirmTimeout` \"{text}\": {reason}"),
        };
        let at = self.value_pos("confirmTimeout");
        self.error(
            ErrorCode::InvalidDuration,
            Some("confirmTimeout"),
            at,
            message,
        );
        DEFAULT_CONFIRM_TIMEOUT
    }

    /// `delivery`: `wait` (the default, also `session`) or `exec`, which runs auto prompts only
    /// and takes the `tools` as a comma-separated list.
    fn delivery(&mut self, given: Option<&str>, mode: Mode, tools: &[String]) -> Delivery {
        match given.map(str::trim) {
            None | Some("") | Some("wait") | Some("session") => Delivery::Wait,
            Some("exec") if mode == Mode::Auto => {
                for tool in tools.iter().filter(|t| t.contains(',')) {
                    let at = self.value_pos("tools");
                    self.error(
                        ErrorCode::InvalidGlob,
                        Some("tools"),
                        at,
                        format!(
                            "`tools` entry \"{tool}\" cannot contain `,` with `delivery` \"exec\": the hosts take the whitelist as a comma-separated list; list each tool on its own"
                        ),
                    );
                }
                Delivery::Exec
            }
            Some("exec") => {
                let at = self.value_pos("delivery");
                self.error(
                    ErrorCode::ParseError,
                    Some("delivery"),
                    at,
                    format!(
                        "`delivery` \"exec\" runs auto prompts only, and this rule's mode is `{mode}`; set `mode` to \"auto\" or drop `delivery`"
                    ),
                );
                Delivery::Wait
            }
            Some(other) => {
                let at = self.value_pos("delivery");
                self.error(
                    ErrorCode::ParseError,
                    Some("delivery"),
                    at,
                    format!(
                        "unsupported `delivery` \"{other}\"; use \"wait\" (default) or \"exec\""
                    ),
                );
                Delivery::Wait
            }
        }
    }

    /// `approveVia`: known paths, at least one, on a confirm rule only.
    fn approve_via(&mut self, given: Option<&[String]>, mode: Mode) -> Vec<Via> {
        let Some(given) = given else {
            return Vec::new();
        };
        let at = self.value_pos("approveVia");
        if mode != Mode::Confirm {
            let at = self.key_pos("approveVia").unwrap_or(at);
            self.error(
                ErrorCode::InvalidApproveVia,
                Some("approveVia"),
                at,
                format!(
                    "`approveVia` says who may answer a confirm, but this rule's mode is `{mode}`; use it on a `confirm` rule"
                ),
            );
            return Vec::new();
        }
        if given.is_empty() {
            self.error(
                ErrorCode::InvalidApproveVia,
                Some("approveVia"),
                at,
                "`approveVia` is empty, so nothing could answer; list at least one of `cli`, `tool`, `web`, `elicitation`, `relay`, `slack`, or leave it out to allow all".into(),
            );
            return Vec::new();
        }
        let mut out = Vec::new();
        for name in given {
            match Via::parse(name.trim()) {
                Some(v) if !out.contains(&v) => out.push(v),
                Some(_) => {}
                None => self.error(
                    ErrorCode::InvalidApproveVia,
                    Some("approveVia"),
                    at,
                    format!(
                        "unknown `approveVia` path \"{name}\"; use `cli`, `tool`, `web`, `elicitation`, `relay` or `slack`"
                    ),
                ),
            }
        }
        out
    }

    /// `consumers`: globs on consumer names; empty entries and bad globs are errors.
    fn consumers(&mut self, patterns: Option<&[String]>) -> crate::actions::Audience {
        let patterns: Vec<String> = patterns
            .unwrap_or_default()
            .iter()
            .map(|p| p.trim().to_string())
            .collect();
        for p in &patterns {
            let reason = if p.is_empty() {
                Some("entries cannot be empty".to_string())
            } else {
                crate::actions::Audience::new(std::slice::from_ref(p))
                    .err()
                    .map(|e| e.kind().to_string())
            };
            if let Some(reason) = reason {
                let at = self.value_pos("consumers");
                self.error(
                    ErrorCode::InvalidGlob,
                    Some("consumers"),
                    at,
                    format!("invalid `consumers` glob \"{p}\": {reason}"),
                );
            }
        }
        crate::actions::Audience::new(&patterns).unwrap_or_default()
    }

    /// `resolveRegex` and `resolveKey`: both or neither, on a confirm rule only.
    fn resolve(&mut self, raw: &RawRule, mode: Mode) -> Option<Resolve> {
        let regex = raw.resolve_regex.as_deref().filter(|r| !r.is_empty());
        let key = raw.resolve_key.as_deref().filter(|k| !k.trim().is_empty());
        if regex.is_none() && key.is_none() {
            return None;
        }
        let (given, missing) = if regex.is_some() {
            ("resolveRegex", "resolveKey")
        } else {
            ("resolveKey", "resolveRegex")
        };
        if mode != Mode::Confirm {
            let at = self.key_pos(given).unwrap_or(self.start);
            self.error(
                ErrorCode::InvalidResolve,
                Some(given),
                at,
                format!(
                    "`{given}` closes pending confirms, but this rule's mode is `{mode}`; use it \
                     on a `confirm` rule"
                ),
            );
            return None;
        }
        let (Some(regex), Some(key)) = (regex, key) else {
            let at = self.key_pos(given).unwrap_or(self.start);
            self.error(
                ErrorCode::InvalidResolve,
                Some(missing),
                at,
                format!(
                    "`{given}` needs `{missing}`: a confirm is closed by a later message matching \
                     `resolveRegex` whose `resolveKey` renders like the confirm's message"
                ),
            );
            return None;
        };
        let regex = match ContentRegex::new(regex) {
            Ok(re) => re,
            Err(e) => {
                let at = self.value_pos("resolveRegex");
                self.error(
                    ErrorCode::InvalidRegex,
                    Some("resolveRegex"),
                    at,
                    format!("invalid `resolveRegex` \"{regex}\": {}", regex_reason(&e)),
                );
                return None;
            }
        };
        let key = self.template("resolveKey", key)?;
        Some(Resolve { regex, key })
    }

    fn pattern(&mut self, key: &str, src: Option<&str>) -> NamePattern {
        match NamePattern::parse(src.unwrap_or("")) {
            Ok(p) => p,
            Err(reason) => {
                let at = self.value_pos(key);
                self.error(
                    ErrorCode::InvalidGlob,
                    Some(key),
                    at,
                    format!("invalid `{key}` glob \"{}\": {reason}", src.unwrap_or("")),
                );
                NamePattern::Any
            }
        }
    }

    fn template(&mut self, key: &str, src: &str) -> Option<Template> {
        match Template::parse(src) {
            Ok(t) => Some(t),
            Err(reason) => {
                let at = self.value_pos(key);
                self.error(
                    ErrorCode::InvalidTemplate,
                    Some(key),
                    at,
                    format!("invalid `{key}` template: {reason}"),
                );
                None
            }
        }
    }
}

/// `"0"`: none; `"5m"`: cooldown; `"10/1h"` (or `"10/h"`): quota.
pub(crate) fn parse_rate_limit(text: &str) -> Result<RateLimit, String> {
    let s = text.trim();
    if let Some((count, period)) = s.split_once('/') {
        let (count, period) = duration::parse_quota(count, period)?;
        let count = count.get();
        return Ok(RateLimit::Quota { count, period });
    }
    let d: Duration = duration::parse(s)?;
    Ok(if d.is_zero() {
        RateLimit::None
    } else {
        RateLimit::Cooldown(d)
    })
}
