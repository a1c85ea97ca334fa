//! Rule errors: one located error per problem, each with a stable code.
//!
//! Editors and CI read the code and the position (`rules check --format json`);
//! people read the rendered line, which puts the location first:
//! `triggers.json:14:9: rule 2 `crit-alerts`: unknown key `contentRgex`; did you mean `contentRegex`?`

use std::fmt;

use serde::{Deserialize, Serialize};

/// The stable code of a rule error. The JSON form (snake_case) never changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// Occurs when the file is not JSON, or not the expected shape (a top-level array, comments,
    /// a wrong value type).
    ParseError,
    /// Occurs when a rule or the top level has a key that does not exist (keys are case-sensitive).
    UnknownKey,
    /// Occurs when a rule has no `name`, or an empty one.
    MissingName,
    /// Occurs when two rules share a `name`.
    DuplicateName,
    /// Occurs when `mode` is not `notify`, `confirm` or `auto`.
    InvalidMode,
    /// Occurs when an `auto` rule has no `tools`, or an empty list.
    AutoRequiresTools,
    /// Occurs when a `confirm` or `auto` rule has no `prompt`.
    PromptRequired,
    /// Occurs when `contentRegex` does not compile.
    InvalidRegex,
    /// Occurs when a `channel`, `server` or `tools` glob does not compile.
    InvalidGlob,
    /// Occurs when `rateLimit` is neither a duration nor `N/period`.
    InvalidRateLimit,
    /// Occurs when `dedupWindow` is not a duration.
    InvalidDedupWindow,
    /// Occurs when `prompt` or `dedupKey` has an unclosed or empty placeholder.
    InvalidTemplate,
    /// Occurs when another duration (`confirmTimeout`) does not parse.
    InvalidDuration,
    /// Occurs when `resolveRegex` or `resolveKey` is given without the other, or on a rule
    /// that is not a `confirm` rule.
    InvalidResolve,
    /// Occurs when an entry of `matchers` does not parse, or its regex does not compile.
    InvalidMatcher,
    /// Occurs when an interval of the top-level `timeIntervals` is malformed (a time that is
    /// not `HH:MM`, an unknown weekday or month, a range that starts after it ends, an
    /// unknown `location`).
    InvalidTimeInterval,
    /// Occurs when `activeTimeIntervals` or `muteTimeIntervals` names an interval that
    /// `timeIntervals` does not define.
    UnknownTimeInterval,
    /// Occurs when `approveVia` names a path that does not exist, is empty, or is given on a
    /// rule that is not a `confirm` rule.
    InvalidApproveVia,
}

impl ErrorCode {
    /// The code as it appears in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ParseError => "parse_error",
            ErrorCode::UnknownKey => "unknown_key",
            ErrorCode::MissingName => "missing_name",
            ErrorCode::DuplicateName => "duplicate_name",
            ErrorCode::InvalidMode => "invalid_mode",
            ErrorCode::AutoRequiresTools => "auto_requires_tools",
            ErrorCode::PromptRequired => "prompt_required",
            ErrorCode::InvalidRegex => "invalid_regex",
            ErrorCode::InvalidGlob => "invalid_glob",
            ErrorCode::InvalidRateLimit => "invalid_rate_limit",
            ErrorCode::InvalidDedupWindow => "invalid_dedup_window",
            ErrorCode::InvalidTemplate => "invalid_template",
            ErrorCode::InvalidDuration => "invalid_duration",
            ErrorCode::InvalidResolve => "invalid_resolve",
            ErrorCode::InvalidMatcher => "invalid_matcher",
            ErrorCode::InvalidTimeInterval => "invalid_time_interval",
            ErrorCode::UnknownTimeInterval => "unknown_time_interval",
            ErrorCode::InvalidApproveVia => "invalid_approve_via",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One validation error, located. Serialises as `{code, rule_index, rule, key, line, column, message}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleError {
    /// Stable code.
    pub code: ErrorCode,
    /// 0-based index of the rule, when the error is inside one.
    pub rule_index: Option<usize>,
    /// The rule's name, when it has one.
    pub rule: Option<String>,
    /// The key at fault.
    pub key: Option<String>,
    /// 1-based line.
    pub line: Option<usize>,
    /// 1-based column.
    pub column: Option<usize>,
    /// What is wrong, without the location (lowercase, hint after a semicolon).
    pub message: String,
}

impl RuleError {
    /// Renders the error as one line, location first, for `path`:
    /// `PATH:LINE:COL: rule N `NAME`: MESSAGE`.
    pub fn render(&self, path: &str) -> String {
        let mut out = String::from(path);
        if let (Some(line), Some(col)) = (self.line, self.column) {
            out.push_str(&format!(":{line}:{col}"));
        }
        out.push_str(": ");
        out.push_str(&self.to_string());
        out
    }
}

/// Without a path: `rule N `NAME`: MESSAGE`, or the message alone outside a rule.
impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.rule_index, &self.rule) {
            (Some(i), Some(name)) => write!(f, "rule {i} `{name}`: {}", self.message),
            (Some(i), None) => write!(f, "rule {i}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

/// Loading a rules file failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is invalid; every error, in file order.
    #[error("{}", invalid_summary(.path, .errors))]
    Invalid {
        /// The file.
        path: String,
        /// The errors.
        errors: Vec<RuleError>,
    },
}

fn invalid_summary(path: &str, errors: &[RuleError]) -> String {
    let first = errors.first().map(|e| e.render(path)).unwrap_or_default();
    match errors.len() {
        1 => first,
        n => format!(
            "{first} (and {} more error{})",
            n - 1,
            if n == 2 { "" } else { "s" }
        ),
    }
}

/// Suggests the known key closest to `unknown` (edit distance ≤ 3, or a case-only difference).
pub(crate) fn suggest<'a>(unknown: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = unknown.to_ascii_lowercase();
    if let Some(k) = known.iter().find(|k| k.to_ascii_lowercase() == lower) {
        return Some(k);
    }
    known
        .iter()
        .map(|k| (edit_distance(&lower, &k.to_ascii_lowercase()), *k))
        .filter(|(d, k)| *d <= 3 && *d < k.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The one-line reason of a regex error (its last `error:` line).
pub(crate) fn regex_reason(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .unwrap_or(text.lines().last().unwrap_or(""))
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        let known = ["contentRegex", "channel", "rateLimit", "dedupWindow"];
        assert_eq!(suggest("contentRgex", &known), Some("contentRegex"));
        assert_eq!(suggest("ContentRegex", &known), Some("contentRegex"));
        assert_eq!(suggest("ratelimit", &known), Some("rateLimit"));
        assert_eq!(suggest("chanel", &known), Some("channel"));
        assert_eq!(suggest("zzzzzzzzzz", &known), None);
    }

    #[test]
    fn render_puts_location_first() {
        let e = RuleError {
            code: ErrorCode::UnknownKey,
            rule_index: Some(2),
            rule: Some("crit-alerts".into()),
            key: Some("contentRgex".into()),
            line: Some(14),
            column: Some(9),
            message: "unknown key `contentRgex`; did you mean `contentRegex`?".into(),
        };
        assert_eq!(
            e.render("triggers.json"),
            "triggers.json:14:9: rule 2 `crit-alerts`: unknown key `contentRgex`; did you mean `contentRegex`?"
        );
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["code"], "unknown_key");
        assert_eq!(json["rule_index"], 2);
    }
}
