//! The `upstreams` section of `switchboard.json`: raw JSON in, validated [`UpstreamConfig`]s
//! out, with every error located and coded.
//!
//! ```json
//! {"upstreams": {
//!   "teams": {"command": "teams-bridge", "args": ["--stdio"], "env": {"TENANT": "x"},
//!             "channel": "dm/{{meta.chat_id}}", "channels": ["dm/*"]},
//!   "ci":    {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer t"},
//!             "callTimeout": "2m"}
//! }}
//! ```
//!
//! Keys are strict and case-sensitive, like `triggers.json`'s: a typo such as `comand` is an
//! error, not a silently ignored key. Every problem is reported, in file order, not just the
//! first.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use super::locate::Locator;
use crate::control::ops::FORWARD_DEADLINE;
use crate::rules::{NamePattern, Template};

/// The channel of `notifications/claude/channel` pushes when `channel` is not set (chatcli's).
pub const DEFAULT_CLAUDE_CHANNEL: &str = "claude/channel";

/// The keys an upstream may have.
pub const UPSTREAM_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "url",
    "headers",
    "channels",
    "channel",
    "enabled",
    "callTimeout",
    "events",
];

/// One MCP Events subscription of an upstream (`events: [{"name", "arguments", "channel"}]`).
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSubscription {
    /// The upstream's event type.
    pub name: String,
    /// Its subscription arguments.
    #[serde(default)]
    pub arguments: Option<Value>,
    /// The channel its occurrences land on (default `events/<name>`).
    #[serde(default)]
    pub channel: Option<String>,
}

/// How long a forwarded tool call waits for the upstream's answer when `callTimeout` is not
/// set: room for a slow tool that works (a search, a bulk send), far from the hours an
/// upstream that stopped answering would otherwise hold a call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// The longest `callTimeout`: a front end waits this long for a forwarded call
/// ([`FORWARD_DEADLINE`]), so the upstream's own deadline must end first.
pub const MAX_CALL_TIMEOUT: Duration = FORWARD_DEADLINE;

/// Headers the MCP HTTP transport sets itself; a configured one would conflict.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "content-type",
];

/// The longest upstream name: it prefixes every re-exported tool name.
pub const MAX_NAME_LEN: usize = 24;

/// How to reach an upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP on its stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Added to (or overriding) the inherited environment.
        env: BTreeMap<String, String>,
    },
    /// A streamable HTTP MCP endpoint.
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:9000/mcp`.
        url: String,
        /// Sent with every request (e.g. `Authorization`).
        headers: BTreeMap<String, String>,
    },
}

impl Transport {
    /// `stdio` or `http`.
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }
}

/// One validated upstream.
#[derive(Clone, Debug)]
pub struct UpstreamConfig {
    /// The name: the `serverName` of its messages and the prefix of its tools.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Allow-list of channel patterns; empty = every channel.
    pub channels: Vec<NamePattern>,
    /// The channel of `notifications/claude/channel` pushes.
    pub channel: Template,
    /// The channel template as written.
    pub channel_source: String,
    /// False = configured but not started.
    pub enabled: bool,
    /// How long a forwarded tool call waits for the upstream's answer (`callTimeout`).
    pub call_timeout: Duration,
    /// MCP Events to consume from it (`events`).
    pub events: Vec<EventSubscription>,
}

impl UpstreamConfig {
    /// Whether a message on `channel` passes the allow-list.
    pub fn allows(&self, channel: &str) -> bool {
        self.channels.is_empty() || self.channels.iter().any(|p| p.is_match(channel))
    }
}

/// The stable code of an `upstreams` error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// Occurs when the file is not JSON or another section has the wrong shape.
    ParseError,
    /// Occurs when an upstream has a key that does not exist.
    UnknownKey,
    /// Occurs when an upstream name is empty, too long or has characters other than
    /// letters, digits, `_` and `-`.
    InvalidName,
    /// Occurs when a value has the wrong JSON type.
    WrongType,
    /// Occurs when an upstream has neither `command` nor `url`, or both.
    InvalidTransport,
    /// Occurs when `url` is not an http(s) URL.
    InvalidUrl,
    /// Occurs when a header name or value is not valid HTTP, or is one the transport sets.
    InvalidHeader,
    /// Occurs when a `channels` glob does not compile.
    InvalidGlob,
    /// Occurs when the `channel` template has an unclosed or empty placeholder.
    InvalidTemplate,
    /// Occurs when `http.rateLimit` is not `N/<duration>` (`"200/1s"`) or `"0"`.
    InvalidRateLimit,
    /// Occurs when `callTimeout` is not a duration above zero and at most ten minutes.
    InvalidDuration,
    /// Occurs when a schedule's `cron` is not a cron expression of 5 fields, or 6 with
    /// seconds first.
    InvalidCron,
    /// Occurs when a schedule's `timezone` is not an IANA time zone name.
    InvalidTimezone,
    /// Occurs when two schedules have the same name.
    DuplicateName,
    /// Occurs when an entry of `http.trustedProxies` is not an IP address, or a network as
    /// `ADDR/BITS`.
    InvalidAddress,
    /// Occurs when a section lacks a key it cannot do without (`teams.clientId`).
    MissingKey,
    /// Occurs when a value is not one the key accepts (`teams.chatTypes`, `teams.cloud`).
    InvalidValue,
}

impl ErrorCode {
    /// The code as JSON shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ParseError => "parse_error",
            ErrorCode::UnknownKey => "unknown_key",
            ErrorCode::InvalidName => "invalid_name",
            ErrorCode::WrongType => "wrong_type",
            ErrorCode::InvalidTransport => "invalid_transport",
            ErrorCode::InvalidUrl => "invalid_url",
            ErrorCode::InvalidHeader => "invalid_header",
            ErrorCode::InvalidGlob => "invalid_glob",
            ErrorCode::InvalidTemplate => "invalid_template",
            ErrorCode::InvalidRateLimit => "invalid_rate_limit",
            ErrorCode::InvalidDuration => "invalid_duration",
            ErrorCode::InvalidCron => "invalid_cron",
            ErrorCode::InvalidTimezone => "invalid_timezone",
            ErrorCode::DuplicateName => "duplicate_name",
            ErrorCode::InvalidAddress => "invalid_address",
            ErrorCode::MissingKey => "missing_key",
            ErrorCode::InvalidValue => "invalid_value",
        }
    }
}

/// One located error. Serialises as `{code, upstream, key, line, column, message}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigError {
    /// Stable code.
    pub code: ErrorCode,
    /// The upstream's name, when the error is inside one.
    pub upstream: Option<String>,
    /// The key at fault.
    pub key: Option<String>,
    /// 1-based line.
    pub line: Option<usize>,
    /// 1-based column.
    pub column: Option<usize>,
    /// What is wrong, without the location (lowercase, hint after a semicolon).
    pub message: String,
}

impl ConfigError {
    /// An error outside any upstream, about `key`, written at `pos`.
    pub fn at(
        code: ErrorCode,
        key: impl Into<String>,
        pos: Option<super::locate::Pos>,
        message: String,
    ) -> ConfigError {
        ConfigError {
            code,
            upstream: None,
            key: Some(key.into()),
            line: pos.map(|p| p.line),
            column: pos.map(|p| p.column),
            message,
        }
    }

    /// `PATH:LINE:COL: upstream `NAME`: MESSAGE`.
    pub fn render(&self, path: &str) -> String {
        match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{path}:{l}:{c}: {self}"),
            _ => format!("{path}: {self}"),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.upstream {
            Some(name) => write!(f, "upstream `{name}`: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Validates the `upstreams` object of the file whose text is `text` (for positions).
/// Returns every upstream, or every error in file order.
pub fn parse(
    text: &str,
    raw: &Map<String, Value>,
) -> Result<Vec<UpstreamConfig>, Vec<ConfigError>> {
    let loc = Locator::new(text);
    let mut errors = Vec::new();
    let mut out = Vec::new();
    for (name, value) in raw {
        let mut cx = Cx {
            loc: &loc,
            name,
            errors: &mut errors,
        };
        if let Some(up) = cx.upstream(value) {
            out.push(up);
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        errors.sort_by_key(|e| (e.line.unwrap_or(usize::MAX), e.column.unwrap_or(0)));
        Err(errors)
    }
}

struct Cx<'a> {
    loc: &'a Locator,
    name: &'a str,
    errors: &'a mut Vec<ConfigError>,
}

impl Cx<'_> {
    fn error(&mut self, code: ErrorCode, key: Option<&str>, message: String) {
        let pos = match key {
            Some(k) => self.loc.value(&["upstreams", self.name, k]),
            None => self.loc.key(&["upstreams", self.name]),
        };
        self.errors.push(ConfigError {
            code,
            upstream: Some(self.name.to_string()),
            key: key.map(String::from),
            line: pos.map(|p| p.line),
            column: pos.map(|p| p.column),
            message,
        });
    }

    /// The upstream `self.name` as `value` writes it, every key checked; `None` when anything
    /// is wrong (each error recorded).
    fn upstream(&mut self, value: &Value) -> Option<UpstreamConfig> {
        let before = self.errors.len();
        if !valid_name(self.name) {
            self.error(
                ErrorCode::InvalidName,
                None,
                format!(
                    "invalid name \"{}\": use 1 to {MAX_NAME_LEN} letters, digits, `_` or `-` \
                     (it prefixes the tool names hosts see)",
                    self.name
                ),
            );
        }
        let Some(obj) = value.as_object() else {
            self.error(
                ErrorCode::WrongType,
                None,
                format!(
                    "expected an object with `command` or `url`, got {}",
                    crate::json_kind(value)
                ),
            );
            return None;
        };
        self.unknown_keys(obj);
        let command = self.string(obj, "command");
        let args = self.strings(obj, "args").unwrap_or_default();
        let env = self.string_map(obj, "env").unwrap_or_default();
        let url = self.string(obj, "url");
        let headers = self.string_map(obj, "headers").unwrap_or_default();
        let enabled = match obj.get("enabled") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.wrong_type("enabled", "true or false", other);
                true
            }
        };
        let transport = match (command, url) {
            (Some(command), None) => Some(self.stdio(obj, command, args, env)),
            (None, Some(url)) => Some(self.http(obj, url, headers)),
            (Some(_), Some(_)) => {
                self.error(
                    ErrorCode::InvalidTransport,
                    Some("url"),
                    "both `command` and `url` are set; keep one (a child process or an HTTP \
                     endpoint)"
                        .into(),
                );
                None
            }
            (None, None) => {
                if !obj.contains_key("command") && !obj.contains_key("url") {
                    self.error(
                        ErrorCode::InvalidTransport,
                        None,
                        "neither `command` nor `url` is set; add `command` (a child process \
                         speaking MCP on stdio) or `url` (a streamable HTTP endpoint)"
                            .into(),
                    );
                }
                None
            }
        };
        let channels = self.channels(obj);
        let call_timeout = self.call_timeout(obj);
        let events = match obj.get("events") {
            None => Vec::new(),
            Some(v) => match serde_json::from_value::<Vec<EventSubscription>>(v.clone()) {
                Ok(events) => events,
                Err(e) => {
                    self.error(
                        ErrorCode::WrongType,
                        Some("events"),
                        format!(
                            "invalid `events`: {e}; give a list of {{\"name\", \"arguments\", \"channel\"}}"
                        ),
                    );
                    Vec::new()
                }
            },
        };
        let channel_source = self
            .string(obj, "channel")
            .unwrap_or_else(|| DEFAULT_CLAUDE_CHANNEL.to_string());
        let channel = match Template::parse(&channel_source) {
            Ok(t) => Some(t),
            Err(e) => {
                self.error(
                    ErrorCode::InvalidTemplate,
                    Some("channel"),
                    format!("invalid `channel` template \"{channel_source}\": {e}"),
                );
                None
            }
        };
        if self.errors.len() > before {
            return None;
        }
        Some(UpstreamConfig {
            name: self.name.to_string(),
            transport: transport?,
            channels,
            channel: channel?,
            channel_source,
            enabled,
            call_timeout,
            events,
        })
    }

    /// Each key of the upstream that is not one of [`UPSTREAM_KEYS`], with a suggestion.
    fn unknown_keys(&mut self, obj: &Map<String, Value>) {
        for key in obj.keys() {
            if !UPSTREAM_KEYS.contains(&key.as_str()) {
                let hint = suggest(key)
                    .map(|s| format!("; did you mean `{s}`?"))
                    .unwrap_or_else(|| format!("; the keys are {}", UPSTREAM_KEYS.join(", ")));
                let pos = self.loc.key(&["upstreams", self.name, key]);
                self.errors.push(ConfigError {
                    code: ErrorCode::UnknownKey,
                    upstream: Some(self.name.to_string()),
                    key: Some(key.clone()),
                    line: pos.map(|p| p.line),
                    column: pos.map(|p| p.column),
                    message: format!("unknown key `{key}`{hint}"),
                });
            }
        }
    }

    /// A `command` upstream: the command named, and no key of a `url` one.
    fn stdio(
        &mut self,
        obj: &Map<String, Value>,
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    ) -> Transport {
        if command.trim().is_empty() {
            self.error(
                ErrorCode::InvalidTransport,
                Some("command"),
                "`command` is empty; name the program to run".into(),
            );
        }
        for key in ["headers"] {
            if obj.contains_key(key) {
                self.error(
                    ErrorCode::InvalidTransport,
                    Some(key),
                    format!("`{key}` applies to `url` upstreams, not to a `command`"),
                );
            }
        }
        Transport::Stdio { command, args, env }
    }

    /// A `url` upstream: the URL and the headers checked, and no key of a `command` one.
    fn http(
        &mut self,
        obj: &Map<String, Value>,
        url: String,
        headers: BTreeMap<String, String>,
    ) -> Transport {
        self.check_url(&url);
        self.check_headers(&headers);
        for key in ["args", "env"] {
            if obj.contains_key(key) {
                self.error(
                    ErrorCode::InvalidTransport,
                    Some(key),
                    format!("`{key}` applies to `command` upstreams, not to a `url`"),
                );
            }
        }
        Transport::Http { url, headers }
    }

    /// `channels`: the globs of the channels the upstream may post to.
    fn channels(&mut self, obj: &Map<String, Value>) -> Vec<NamePattern> {
        let mut channels = Vec::new();
        for source in self.strings(obj, "channels").unwrap_or_default() {
            match NamePattern::parse(&source) {
                Ok(p) => channels.push(p),
                Err(e) => self.error(
                    ErrorCode::InvalidGlob,
                    Some("channels"),
                    format!("invalid `channels` glob \"{source}\": {e}"),
                ),
            }
        }
        channels
    }

    /// `callTimeout`: a duration above zero, at most [`MAX_CALL_TIMEOUT`]; the default when
    /// absent (or wrong, with the error recorded).
    fn call_timeout(&mut self, obj: &Map<String, Value>) -> Duration {
        let Some(text) = self.string(obj, "callTimeout") else {
            return DEFAULT_CALL_TIMEOUT;
        };
        let problem = match crate::duration::parse(&text) {
            Ok(d) if d.is_zero() => "a call needs some time to answer; use e.g. \"30s\"".into(),
            Ok(d) if d > MAX_CALL_TIMEOUT => format!(
                "longer than {}, after which a front end stops waiting for the call anyway",
                humantime::format_duration(MAX_CALL_TIMEOUT)
            ),
            Ok(d) => return d,
            Err(reason) => reason,
        };
        self.error(
            ErrorCode::InvalidDuration,
            Some("callTimeout"),
            format!("invalid `callTimeout` \"{text}\": {problem}"),
        );
        DEFAULT_CALL_TIMEOUT
    }

    fn wrong_type(&mut self, key: &str, want: &str, got: &Value) {
        self.error(
            ErrorCode::WrongType,
            Some(key),
            format!("`{key}` must be {want}, got {}", crate::json_kind(got)),
        );
    }

    fn string(&mut self, obj: &Map<String, Value>, key: &str) -> Option<String> {
        match obj.get(key)? {
            Value::String(s) => Some(s.clone()),
            other => {
                self.wrong_type(key, "a string", other);
                None
            }
        }
    }

    fn strings(&mut self, obj: &Map<String, Value>, key: &str) -> Option<Vec<String>> {
        match obj.get(key)? {
            Value::Array(items) if items.iter().all(Value::is_string) => Some(
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect(),
            ),
            other => {
                self.wrong_type(key, "an array of strings", other);
                None
            }
        }
    }

    fn string_map(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
    ) -> Option<BTreeMap<String, String>> {
        match obj.get(key)? {
            Value::Object(m) if m.values().all(Value::is_string) => Some(
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect(),
            ),
            other => {
                self.wrong_type(key, "an object of strings", other);
                None
            }
        }
    }

    fn check_url(&mut self, url: &str) {
        let ok = match reqwest::Url::parse(url) {
            Ok(u) => matches!(u.scheme(), "http" | "https") && u.host().is_some(),
            Err(_) => false,
        };
        if !ok {
            self.error(
                ErrorCode::InvalidUrl,
                Some("url"),
                format!(
                    "invalid `url` \"{url}\": expected an http:// or https:// URL such as \
                     \"http://127.0.0.1:9000/mcp\""
                ),
            );
        }
    }

    fn check_headers(&mut self, headers: &BTreeMap<String, String>) {
        for (name, value) in headers {
            if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                self.error(
                    ErrorCode::InvalidHeader,
                    Some("headers"),
                    format!("header `{name}` is set by the MCP transport itself; remove it"),
                );
            } else if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                self.error(
                    ErrorCode::InvalidHeader,
                    Some("headers"),
                    format!("invalid header name `{name}`"),
                );
            } else if http::HeaderValue::from_str(value).is_err() {
                self.error(
                    ErrorCode::InvalidHeader,
                    Some("headers"),
                    format!(
                        "header `{name}` has a value that is not valid in HTTP (a line break?)"
                    ),
                );
            }
        }
    }
}

/// 1 to [`MAX_NAME_LEN`] of `[A-Za-z0-9_-]`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The known key closest to `key` (case-insensitive equal, or at most two edits away).
fn suggest(key: &str) -> Option<&'static str> {
    let lower = key.to_ascii_lowercase();
    UPSTREAM_KEYS
        .iter()
        .map(|k| (edit_distance(&lower, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<Vec<UpstreamConfig>, Vec<ConfigError>> {
        let v: Value = serde_json::from_str(text).unwrap();
        parse(text, v["upstreams"].as_object().unwrap())
    }

    /// `(code, key, line, column)` of each error.
    type Located = (ErrorCode, Option<String>, Option<usize>, Option<usize>);

    fn codes(text: &str) -> Vec<Located> {
        check(text)
            .unwrap_err()
            .into_iter()
            .map(|e| (e.code, e.key, e.line, e.column))
            .collect()
    }

    #[test]
    fn a_stdio_and_an_http_upstream() {
        let ups = check(
            r#"{"upstreams": {
                "teams": {"command": "bridge", "args": ["-v"], "env": {"A": "1"},
                          "channel": "dm/{{meta.chat_id}}", "channels": ["dm/*"]},
                "ci": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer x"},
                       "enabled": false}
            }}"#,
        )
        .unwrap();
        assert_eq!(ups.len(), 2);
        assert_eq!(ups[0].name, "teams");
        assert_eq!(
            ups[0].transport,
            Transport::Stdio {
                command: "bridge".into(),
                args: vec!["-v".into()],
                env: [("A".to_string(), "1".to_string())].into(),
            }
        );
        assert!(ups[0].allows("dm/42") && ups[0].allows("dm") && !ups[0].allows("message"));
        assert_eq!(ups[1].transport.kind(), "http");
        assert!(!ups[1].enabled && ups[1].allows("anything"));
        assert_eq!(ups[1].channel_source, DEFAULT_CLAUDE_CHANNEL);
    }

    #[test]
    fn every_error_is_located_and_coded_in_file_order() {
        let text = "{\"upstreams\": {\n  \"teams\": {\"comand\": \"x\"},\n  \"ci\": {\"url\": \"ftp://x\", \"args\": [1]},\n  \"bad.name\": {\"command\": \"x\", \"channels\": [\"dm/{a\"], \"channel\": \"{{meta.\"},\n  \"both\": {\"command\": \"x\", \"url\": \"http://h/mcp\", \"headers\": {\"Accept\": \"x\"}}\n}}";
        let got = codes(text);
        let want = vec![
            (ErrorCode::InvalidTransport, None, Some(2), Some(3)),
            (
                ErrorCode::UnknownKey,
                Some("comand".into()),
                Some(2),
                Some(13),
            ),
            (ErrorCode::InvalidUrl, Some("url".into()), Some(3), Some(17)),
            (ErrorCode::WrongType, Some("args".into()), Some(3), Some(36)),
            (
                ErrorCode::InvalidTransport,
                Some("args".into()),
                Some(3),
                Some(36),
            ),
            (ErrorCode::InvalidName, None, Some(4), Some(3)),
            (
                ErrorCode::InvalidGlob,
                Some("channels".into()),
                Some(4),
                Some(44),
            ),
            (
                ErrorCode::InvalidTemplate,
                Some("channel".into()),
                Some(4),
                Some(66),
            ),
            (
                ErrorCode::InvalidTransport,
                Some("url".into()),
                Some(5),
                Some(35),
            ),
        ];
        assert_eq!(got, want);
        let typo = &check(text).unwrap_err()[1];
        assert_eq!(
            typo.render("switchboard.json"),
            "switchboard.json:2:13: upstream `teams`: unknown key `comand`; did you mean `command`?"
        );
    }

    #[test]
    fn call_timeout_is_a_duration_above_zero_and_at_most_ten_minutes() {
        let ups = check(
            r#"{"upstreams": {"a": {"command": "x", "callTimeout": "90s"}, "b": {"command": "x"}}}"#,
        )
        .unwrap();
        assert_eq!(ups[0].call_timeout, Duration::from_secs(90));
        assert_eq!(ups[1].call_timeout, DEFAULT_CALL_TIMEOUT);
        let text = "{\"upstreams\": {\n  \"a\": {\"command\": \"x\", \"callTimeout\": \"soon\"},\n  \"b\": {\"command\": \"x\", \"callTimeout\": \"0\"},\n  \"c\": {\"command\": \"x\", \"callTimeout\": \"11m\"},\n  \"d\": {\"command\": \"x\", \"callTimeout\": 30}\n}}";
        let got = codes(text);
        let key = Some("callTimeout".to_string());
        assert_eq!(
            got,
            vec![
                (ErrorCode::InvalidDuration, key.clone(), Some(2), Some(40)),
                (ErrorCode::InvalidDuration, key.clone(), Some(3), Some(40)),
                (ErrorCode::InvalidDuration, key.clone(), Some(4), Some(40)),
                (ErrorCode::WrongType, key, Some(5), Some(40)),
            ]
        );
        let errors = check(text).unwrap_err();
        assert!(
            errors[2]
                .render("switchboard.json")
                .starts_with("switchboard.json:4:40: upstream `c`: invalid `callTimeout` \"11m\": longer than 10m"),
            "{}",
            errors[2].render("switchboard.json")
        );
    }

    #[test]
    fn reserved_headers_and_misplaced_keys_are_refused() {
        let got = codes(
            r#"{"upstreams": {"a": {"url": "http://h/mcp", "headers": {"Mcp-Session-Id": "x"}, "env": {}},
                              "b": {"command": "x", "headers": {}}}}"#,
        );
        let kinds: Vec<_> = got.iter().map(|g| (g.0, g.1.clone())).collect();
        assert_eq!(
            kinds,
            vec![
                (ErrorCode::InvalidHeader, Some("headers".into())),
                (ErrorCode::InvalidTransport, Some("env".into())),
                (ErrorCode::InvalidTransport, Some("headers".into())),
            ]
        );
    }
}
