//! The home directory and the process configuration.
//!
//! [`Home`] owns the paths of everything switchboard keeps on disk and the
//! exclusive lock that makes one process the only writer of a home.
//! [`Config`] is the optional `switchboard.json` in the home: every key has a
//! default, so a fresh machine needs no file at all.

use std::fs;

use serde::{Deserialize, Serialize};

pub use crate::actions::ActionSettings;
pub use crate::control::PushPolicy;
pub use crate::delivery::exec::{ExecKind, ExecSettings};
pub use crate::delivery::mcp::McpSettings;
pub use crate::home::{
    GITHUB_SECRET_ENV, HOME_ENV, Home, HomeError, HomeLock, SECRET_ENV, TEAMS_SECRET_ENV,
    TOKEN_ENV, restrict, write_atomic,
};
pub use crate::inbox::InboxSettings;
pub use crate::sources::http::{HttpSettings, LiveHttp};
pub use crate::sources::jetstream::JetStreamSettings;
pub use crate::sources::schedule::ScheduleSettings;
pub use crate::sources::slack::SlackSettings;
pub use crate::sources::teams::TeamsSettings;
use crate::sources::upstream::config::{ConfigError, ErrorCode};
use crate::sources::upstream::locate::Locator;

impl Home {
    /// Loads `switchboard.json`, or the defaults when it does not exist. Refused when another
    /// user could have changed it ([`Home::check_file`]), as at every reload.
    pub fn load_config(&self) -> anyhow::Result<Config> {
        let path = self.config_file();
        self.check_file(&path)?;
        match crate::home::read_regular(&path, crate::home::MAX_READ) {
            Ok(text) => check(&text).map_err(|errors| {
                let shown = path.display().to_string();
                let lines: Vec<_> = errors.iter().map(|e| e.render(&shown)).collect();
                anyhow::anyhow!("{}", lines.join("\n"))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        }
    }
}

/// The top-level keys of `switchboard.json`.
const SECTIONS: &[&str] = &[
    "inbox",
    "http",
    "mcp",
    "actions",
    "exec",
    "upstreams",
    "schedules",
    "jetstream",
    "teams",
    "slack",
];

/// Parses and validates the text of `switchboard.json`: JSON syntax, every section's shape,
/// `http.rateLimit`, each upstream and each schedule. Returns the config, or every error found,
/// in file order: each section is read on its own, and each key of a section that does not
/// read, so that one mistake hides no other.
pub fn check(text: &str) -> Result<Config, Vec<ConfigError>> {
    use crate::sources::upstream::config as upstream;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| vec![located_syntax(e)])?;
    let loc = Locator::new(text);
    let Some(top) = value.as_object() else {
        return Err(vec![ConfigError {
            code: ErrorCode::ParseError,
            upstream: None,
            key: None,
            line: Some(1),
            column: Some(1),
            message: format!(
                "parse error: the file must be a JSON object of sections, got {}",
                crate::json_kind(&value)
            ),
        }]);
    };
    let mut errors = Vec::new();
    for key in top.keys().filter(|k| !SECTIONS.contains(&k.as_str())) {
        errors.push(unknown_key(&loc, &[], key, SECTIONS));
    }
    let mut config = Config::default();
    let mut section_ok = true;
    macro_rules! section {
        ($key:literal, $field:ident) => {
            match read_section(&loc, top, $key, &mut errors) {
                Some(Some(v)) => config.$field = v,
                Some(None) => section_ok = false,
                None => {}
            }
        };
    }
    section!("inbox", inbox);
    section!("http", http);
    section!("mcp", mcp);
    section!("actions", actions);
    section!("exec", exec);
    match read_section(&loc, top, "jetstream", &mut errors) {
        Some(Some(js)) => config.jetstream = Some(js),
        Some(None) => section_ok = false,
        None => {}
    }
    match read_section(&loc, top, "teams", &mut errors) {
        Some(Some(teams)) => config.teams = Some(teams),
        Some(None) => section_ok = false,
        None => {}
    }
    match read_section(&loc, top, "slack", &mut errors) {
        Some(Some(slack)) => config.slack = Some(slack),
        Some(None) => section_ok = false,
        None => {}
    }
    match top.get("upstreams") {
        None => {}
        Some(serde_json::Value::Object(raw)) => match upstream::parse(text, raw) {
            Ok(_) => config.upstreams = raw.clone(),
            Err(e) => errors.extend(e),
        },
        Some(other) => errors.push(ConfigError::at(
            ErrorCode::WrongType,
            "upstreams",
            loc.value(&["upstreams"]),
            format!(
                "`upstreams` must be an object of upstreams by name, got {}",
                crate::json_kind(other)
            ),
        )),
    }
    if let Some(raw) = top.get("schedules") {
        let found = crate::sources::schedule::check(text, raw);
        if found.is_empty() {
            config.schedules = serde_json::from_value(raw.clone()).unwrap_or_default();
        }
        errors.extend(found);
    }
    errors.extend(value_problems(&loc, top, &config));
    errors.sort_by_key(|e| (e.line.unwrap_or(usize::MAX), e.column.unwrap_or(0)));
    if errors.is_empty() && section_ok {
        Ok(config)
    } else {
        Err(errors)
    }
}

/// The problems of values that read but are wrong (a rate, an address, a name), each located:
/// checked here so that `config check`, the start and a live reload refuse them alike.
fn value_problems(
    loc: &Locator,
    top: &serde_json::Map<String, serde_json::Value>,
    config: &Config,
) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    // Read from the file, so that another mistake in `http` does not hide it.
    let rate_limit = top.get("http").and_then(|h| h.get("rateLimit"));
    if let Some(limit) = rate_limit.and_then(serde_json::Value::as_str)
        && let Err(e) = crate::sources::http::parse_rate_limit(limit)
    {
        errors.push(ConfigError::at(
            ErrorCode::InvalidRateLimit,
            "http.rateLimit",
            loc.value(&["http", "rateLimit"]),
            format!("invalid `http.rateLimit` \"{limit}\": {e}"),
        ));
    }
    if let Err(message) = crate::listener::TrustedProxies::parse(&config.http.trusted_proxies) {
        errors.push(ConfigError::at(
            ErrorCode::InvalidAddress,
            "http.trustedProxies",
            loc.value(&["http", "trustedProxies"]),
            format!("`http.trustedProxies`: {message}"),
        ));
    }
    if let Some(js) = &config.jetstream {
        for (key, message) in js.problems() {
            let pos = loc.value(&["jetstream", key]);
            let code = match key {
                "servers" => ErrorCode::InvalidUrl,
                "stream" | "subjectPrefix" | "instance" => ErrorCode::InvalidName,
                _ => ErrorCode::WrongType,
            };
            errors.push(ConfigError::at(
                code,
                format!("jetstream.{key}"),
                pos,
                message,
            ));
        }
    }
    if let Some(teams) = &config.teams {
        errors.extend(teams_problems(loc, teams));
        if top
            .get("upstreams")
            .and_then(|u| u.get(crate::sources::teams::SERVER))
            .is_some()
        {
            let mut taken = ConfigError::at(
                ErrorCode::InvalidName,
                "upstreams.teams",
                loc.key(&["upstreams", crate::sources::teams::SERVER]),
                "the name `teams` is the Teams source's (the `teams` section): rename this upstream"
                    .to_string(),
            );
            taken.upstream = Some(crate::sources::teams::SERVER.into());
            errors.push(taken);
        }
    }
    if let Some(slack) = &config.slack {
        errors.extend(slack.problems().into_iter().map(|(key, message)| {
            let pos = loc.value(&["slack", key]).or_else(|| loc.value(&["slack"]));
            let code = match key {
                "apiUrl" => ErrorCode::InvalidUrl,
                _ => ErrorCode::InvalidValue,
            };
            ConfigError::at(code, format!("slack.{key}"), pos, message)
        }));
    }
    errors
}

/// Reads the section `key` on its own: `None` when the file has none, `Some(None)` when it
/// does not read. Then each of its keys is read alone (every setting has a default), so that
/// each wrong key is its own error, located, with a "did you mean" for an unknown one.
fn read_section<T: serde::de::DeserializeOwned>(
    loc: &Locator,
    top: &serde_json::Map<String, serde_json::Value>,
    key: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<Option<T>> {
    let raw = top.get(key).filter(|v| !v.is_null())?;
    let whole = match serde_json::from_value::<T>(raw.clone()) {
        Ok(v) => return Some(Some(v)),
        Err(e) => e,
    };
    let before = errors.len();
    if let serde_json::Value::Object(map) = raw {
        for (k, v) in map {
            let alone = serde_json::Value::Object([(k.clone(), v.clone())].into_iter().collect());
            let Err(e) = serde_json::from_value::<T>(alone) else {
                continue;
            };
            let said = e.to_string();
            if said.starts_with("missing field") {
                continue;
            }
            if let Some(known) = said.strip_prefix("unknown field ") {
                let names: Vec<&str> = known.split('`').skip(3).step_by(2).collect();
                errors.push(unknown_key(loc, &[key], k, &names));
                continue;
            }
            errors.push(ConfigError::at(
                ErrorCode::WrongType,
                format!("{key}.{k}"),
                loc.value(&[key, k]),
                format!("invalid `{key}.{k}`: {said}"),
            ));
        }
    }
    if errors.len() == before {
        errors.push(ConfigError::at(
            ErrorCode::WrongType,
            key,
            loc.value(&[key]),
            format!("invalid `{key}`: {whole}"),
        ));
    }
    Some(None)
}

/// An unknown key at `path` + `key`, located, with the closest of `known`.
fn unknown_key(loc: &Locator, path: &[&str], key: &str, known: &[&str]) -> ConfigError {
    let mut at: Vec<&str> = path.to_vec();
    at.push(key);
    let pos = loc.key(&at);
    let shown = at.join(".");
    let hint = match crate::rules::suggest(key, known) {
        Some(close) => {
            let mut near: Vec<&str> = path.to_vec();
            near.push(close);
            format!("; did you mean `{}`?", near.join("."))
        }
        None if known.is_empty() => String::new(),
        None => format!("; the keys are {}", known.join(", ")),
    };
    let message = format!("unknown key `{shown}`{hint}");
    ConfigError::at(ErrorCode::UnknownKey, shown, pos, message)
}

/// The problems of the `teams` section, located.
fn teams_problems(loc: &Locator, teams: &TeamsSettings) -> Vec<ConfigError> {
    teams
        .problems()
        .into_iter()
        .map(|(key, message)| {
            let pos = loc.value(&["teams", key]).or_else(|| loc.value(&["teams"]));
            let code = match key {
                "clientId" => ErrorCode::MissingKey,
                "graphUrl" | "authorityUrl" | "notificationUrl" => ErrorCode::InvalidUrl,
                "poll" => ErrorCode::InvalidDuration,
                _ => ErrorCode::InvalidValue,
            };
            ConfigError::at(code, format!("teams.{key}"), pos, message)
        })
        .collect()
}

fn located_syntax(e: serde_json::Error) -> ConfigError {
    let message = e.to_string();
    let message = message
        .rsplit_once(" at line ")
        .map_or(message.clone(), |(m, _)| m.to_string());
    ConfigError {
        code: ErrorCode::ParseError,
        upstream: None,
        key: None,
        line: Some(e.line()),
        column: Some(e.column()),
        message: format!("parse error: {message}"),
    }
}

impl Home {
    /// The ingest bearer token kept in the `token` file: read it, or generate one (32 random
    /// bytes as 64 hex digits) and write it 0600 when the file is missing or empty. An existing
    /// file that other users can read is refused, with the command that fixes it.
    pub fn ensure_token(&self) -> anyhow::Result<String> {
        let path = self.token();
        match fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => {
                self.check_token()?;
                return Ok(text.trim().to_string());
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
        }
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw)
            .map_err(|e| anyhow::anyhow!("cannot generate the ingest token: {e}"))?;
        let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        write_atomic(&path, format!("{token}\n").as_bytes())
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        tracing::info!(path = %path.display(), "generated the ingest bearer token");
        Ok(token)
    }
}

/// `switchboard.json`: every key optional, unknown keys rejected.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Inbox ring and journal.
    pub inbox: InboxSettings,
    /// HTTP ingest.
    pub http: HttpSettings,
    /// MCP delivery.
    pub mcp: McpSettings,
    /// Action queues.
    pub actions: ActionSettings,
    /// Exec delivery: the headless host that runs `"delivery": "exec"` rules.
    pub exec: ExecSettings,
    /// Upstream MCP servers by name, as written; [`check`] validates them and
    /// [`crate::sources::upstream::config::parse`] turns them into `UpstreamConfig`s.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub upstreams: serde_json::Map<String, serde_json::Value>,
    /// Cron schedules that append a message when they fire; [`check`] validates them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<ScheduleSettings>,
    /// A shared NATS JetStream stream for many instances; none by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jetstream: Option<JetStreamSettings>,
    /// Microsoft Teams chats from Microsoft Graph; none by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub teams: Option<TeamsSettings>,
    /// Slack over Socket Mode or the Events API, and approvals in Slack; none by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackSettings>,
}

/// The `switchboard.json` keys a running daemon applies when the file changes; every other
/// key is read only at start.
pub const LIVE_KEYS: &[&str] = &[
    "actions.queueCapacity",
    "http.githubSecret",
    "http.rateLimit",
];

/// What a change of `switchboard.json` means for the running daemon, for the log and `stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigReload {
    /// When the change was seen (RFC 3339).
    pub at: String,
    /// False when the new file is invalid (nothing was applied).
    pub ok: bool,
    /// Keys applied live (`actions.queueCapacity`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<String>,
    /// Keys that differ from the running settings and take effect only after a restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restart_needed: Vec<String>,
    /// One line for people.
    pub message: String,
}

/// Every leaf of `config` as `section.key` (camelCase, as written) → value; upstreams by name.
fn leaves(config: &Config) -> std::collections::BTreeMap<String, serde_json::Value> {
    fn walk(
        prefix: &str,
        v: &serde_json::Value,
        depth: usize,
        out: &mut std::collections::BTreeMap<String, serde_json::Value>,
    ) {
        match v {
            // Sections and nested settings (`inbox.limits`) by key; an upstream is one leaf.
            serde_json::Value::Object(map) if depth < 2 || prefix.starts_with("inbox.") => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, depth + 1, out);
                }
            }
            other => {
                out.insert(prefix.to_string(), other.clone());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(
        "",
        &serde_json::to_value(config).unwrap_or_default(),
        0,
        &mut out,
    );
    out
}

/// The keys whose values differ between `old` and `new`, sorted.
pub fn changed_keys(old: &Config, new: &Config) -> Vec<String> {
    let (a, b) = (leaves(old), leaves(new));
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// What a reload of `switchboard.json` does: the live keys whose value differs from the
/// settings running now (`running`: what the daemon started with, as changed by the reloads
/// since) are applied; every other key that differs from the settings the daemon started
/// with (`boot`) needs a restart. Says so in one line. `secret_from_env`:
/// `SWITCHBOARD_GITHUB_SECRET` is set, so a changed `http.githubSecret` is not applied.
pub fn plan_reload(
    boot: &Config,
    running: &Config,
    new: &Config,
    secret_from_env: bool,
) -> ConfigReload {
    let live = |k: &String| LIVE_KEYS.contains(&k.as_str());
    let mut applied: Vec<String> = changed_keys(running, new)
        .into_iter()
        .filter(live)
        .collect();
    let mut ignored = Vec::new();
    if secret_from_env && let Some(i) = applied.iter().position(|k| k == "http.githubSecret") {
        ignored.push(applied.remove(i));
    }
    let restart_needed: Vec<String> = changed_keys(boot, new)
        .into_iter()
        .filter(|k| !live(k))
        .collect();
    let mut parts = Vec::new();
    if !applied.is_empty() {
        parts.push(format!("applied {}", applied.join(", ")));
    }
    if !ignored.is_empty() {
        parts.push(format!(
            "{} not applied: {GITHUB_SECRET_ENV} is set and wins over the file",
            ignored.join(", ")
        ));
    }
    if !restart_needed.is_empty() {
        parts.push(format!(
            "restart needed for {}: they are read only at start",
            restart_needed.join(", ")
        ));
    }
    let message = if parts.is_empty() {
        "switchboard.json reloaded: nothing differs from the running settings".to_string()
    } else {
        format!("switchboard.json reloaded: {}", parts.join("; "))
    };
    ConfigReload {
        at: crate::message::format_timestamp(chrono::Utc::now()),
        ok: true,
        applied,
        restart_needed,
        message,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_existing_home_is_never_created_and_open_creates_one() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone");
        let err = Home::existing(&missing).unwrap_err().to_string();
        assert!(err.contains("does not exist (deleted?)"), "{err}");
        assert!(!missing.exists(), "Home::existing created the home");
        Home::open(&missing).unwrap();
        assert!(missing.is_dir());
        Home::existing(&missing).unwrap();
    }

    #[test]
    fn a_reload_applies_what_it_can_and_names_what_needs_a_restart() {
        let boot = Config::default();
        let new = check(
            r#"{"actions": {"queueCapacity": 8}, "http": {"listen": "127.0.0.1:9999",
                "rateLimit": "5/1s"}, "inbox": {"limits": {"contentBytes": 10}}}"#,
        )
        .unwrap();
        let plan = plan_reload(&boot, &boot, &new, false);
        assert_eq!(plan.applied, ["actions.queueCapacity", "http.rateLimit"]);
        assert_eq!(
            plan.restart_needed,
            ["http.listen", "inbox.limits.contentBytes"]
        );
        assert!(
            plan.message.contains(
                "applied actions.queueCapacity, http.rateLimit; restart needed for http.listen, \
                 inbox.limits.contentBytes: they are read only at start"
            ),
            "{}",
            plan.message
        );
        let same = plan_reload(&boot, &boot, &Config::default(), false);
        assert!(same.applied.is_empty() && same.restart_needed.is_empty());
        let up = check(r#"{"upstreams": {"teams": {"command": "x"}}}"#).unwrap();
        assert_eq!(changed_keys(&boot, &up), ["upstreams.teams"]);
    }

    /// Issue 47: a bad cron hid the `http` errors and the bad time zone beside it; now every
    /// error shows at once, located, each with its "did you mean".
    #[test]
    fn every_error_of_the_file_shows_at_once_with_a_suggestion() {
        let text = r#"{
  "http": {"rateLimit": "30", "listn": "127.0.0.1:1"},
  "schedules": [
    {"name": "a", "cron": "61 * * * *", "timezone": "America/New_york", "channel": "x", "content": "y"}
  ],
  "actions": {"queueCapacty": 5},
  "mcp": {"maxWaitS": "x"},
  "inbx": {}
}"#;
        let errors = check(text).unwrap_err();
        let got: Vec<String> = errors
            .iter()
            .map(|e| e.render("switchboard.json"))
            .collect();
        assert_eq!(
            got,
            [
                "switchboard.json:2:25: invalid `http.rateLimit` \"30\": expected \"N/period\" (e.g. \"200/1s\") or \"0\" for none",
                "switchboard.json:2:31: unknown key `http.listn`; did you mean `http.listen`?",
                "switchboard.json:4:27: schedule 0 `a`: invalid `cron` \"61 * * * *\": component error: Number out of bounds",
                "switchboard.json:4:53: schedule 0 `a`: invalid `timezone` \"America/New_york\": not an IANA time zone; did you mean \"America/New_York\"?",
                "switchboard.json:6:15: unknown key `actions.queueCapacty`; did you mean `actions.queueCapacity`?",
                "switchboard.json:7:23: invalid `mcp.maxWaitS`: invalid type: string \"x\", expected u64",
                "switchboard.json:8:3: unknown key `inbx`; did you mean `inbox`?",
            ],
            "{got:#?}"
        );
    }

    /// Issue 47: a second save that changed nothing said "applied http.githubSecret" again,
    /// because it was compared with the settings at start, not with the running ones.
    #[test]
    fn a_save_that_changes_nothing_applies_nothing() {
        let boot = Config::default();
        let secret = check(r#"{"http": {"githubSecret": "s3"}}"#).unwrap();
        let first = plan_reload(&boot, &boot, &secret, false);
        assert_eq!(first.applied, ["http.githubSecret"]);
        let again = check(r#"{"http": {"githubSecret": "s3"}, "mcp": {}}"#).unwrap();
        let second = plan_reload(&boot, &secret, &again, false);
        assert!(second.applied.is_empty(), "{second:?}");
        assert_eq!(
            second.message,
            "switchboard.json reloaded: nothing differs from the running settings"
        );
        // A restart-only key stays named while it differs from the settings at start.
        let listen = check(r#"{"http": {"githubSecret": "s3", "listen": "127.0.0.1:1"}}"#).unwrap();
        let third = plan_reload(&boot, &secret, &listen, false);
        assert!(third.applied.is_empty());
        assert_eq!(third.restart_needed, ["http.listen"]);
        // The environment's secret wins: the file's is not applied, and the line says so.
        let other = check(r#"{"http": {"githubSecret": "other"}}"#).unwrap();
        let env = plan_reload(&boot, &secret, &other, true);
        assert!(env.applied.is_empty(), "{env:?}");
        assert!(
            env.message
                .contains("http.githubSecret not applied: SWITCHBOARD_GITHUB_SECRET is set"),
            "{}",
            env.message
        );
    }

    #[test]
    fn an_invalid_http_rate_limit_is_located() {
        let errors =
            check("{\n  \"http\": {\"rateLimit\": \"30\"},\n  \"upstreams\": {\"a\": {}}\n}")
                .unwrap_err();
        let rate = &errors[0];
        assert_eq!(
            (
                rate.code.as_str(),
                rate.key.as_deref(),
                rate.line,
                rate.column
            ),
            (
                "invalid_rate_limit",
                Some("http.rateLimit"),
                Some(2),
                Some(25)
            ),
            "{errors:?}"
        );
        assert!(
            rate.message
                .starts_with("invalid `http.rateLimit` \"30\": "),
            "{}",
            rate.message
        );
        assert_eq!(
            errors.len(),
            2,
            "the upstream's error is listed too: {errors:?}"
        );
        for ok in ["0", "200/1s", " 10/m "] {
            let text = format!(r#"{{"http": {{"rateLimit": "{ok}"}}}}"#);
            assert!(check(&text).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn the_jetstream_section_is_optional_and_checked_where_written() {
        assert!(check("{}").unwrap().jetstream.is_none());
        let c = check(r#"{"jetstream": {"servers": ["nats://127.0.0.1:4222"]}}"#).unwrap();
        assert_eq!(c.jetstream.unwrap().stream, "SWITCHBOARD");
        assert_eq!(
            located("{\"jetstream\": {\"servers\": [],\n  \"stream\": \"a.b\"}}"),
            [
                ("invalid_url", "jetstream.servers".into(), Some(1)),
                ("invalid_name", "jetstream.stream".into(), Some(2)),
            ],
        );
        assert!(check(r#"{"jetstream": {"servers": ["nats://x"], "stram": "A"}}"#).is_err());
    }

    /// The errors of `text`: code, key and line.
    fn located(text: &str) -> Vec<(&'static str, String, Option<usize>)> {
        check(text)
            .unwrap_err()
            .iter()
            .map(|e| (e.code.as_str(), e.key.clone().unwrap_or_default(), e.line))
            .collect()
    }

    #[test]
    fn the_teams_section_is_optional_and_checked_where_written() {
        assert!(check("{}").unwrap().teams.is_none());
        let c = check(r#"{"teams": {"clientId": "c"}}"#).unwrap();
        assert_eq!(c.teams.unwrap().poll, Duration::from_secs(5));
        assert_eq!(
            located(
                "{\"teams\": {\"tenant\": \"contoso.com\",\n  \"chatTypes\": [\"dm\"],\n  \"poll\": \"100ms\"},\n \"upstreams\": {\"teams\": {\"command\": \"x\"}}}"
            ),
            [
                ("missing_key", "teams.clientId".into(), Some(1)),
                ("invalid_value", "teams.chatTypes".into(), Some(2)),
                ("invalid_duration", "teams.poll".into(), Some(3)),
                ("invalid_name", "upstreams.teams".into(), Some(4)),
            ],
        );
        assert!(check(r#"{"teams": {"clientID": "c"}}"#).is_err());
    }

    #[test]
    fn the_exec_section_reads_durations_and_refuses_unknown_keys() {
        let c = check(
            r#"{"exec": {"kind": "claude-code", "turnTimeout": "90s", "stallTimeout": "1m",
                "maxConcurrent": 3, "args": ["--x"], "env": {"A": "b"}}}"#,
        )
        .unwrap();
        assert_eq!(c.exec.kind, ExecKind::ClaudeCode);
        assert_eq!(c.exec.turn_timeout, Duration::from_secs(90));
        assert_eq!(c.exec.stall_timeout, Duration::from_secs(60));
        assert_eq!(c.exec.max_concurrent, 3);
        for bad in [
            r#"{"exec": {"turnTimeout": "30"}}"#,
            r#"{"exec": {"stallTimeout": "0"}}"#,
            r#"{"exec": {"kind": "codex"}}"#,
            r#"{"exec": {"comand": "x"}}"#,
        ] {
            let errors = check(bad).unwrap_err();
            assert!(errors[0].line.is_some(), "{bad}: {errors:?}");
        }
    }

    #[test]
    fn token_is_generated_once_as_hex_and_kept_private() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path().join("home")).unwrap();
        let first = home.ensure_token().unwrap();
        assert_eq!(first.len(), 64, "{first}");
        assert!(first.bytes().all(|b| b.is_ascii_hexdigit()), "{first}");
        let mode = fs::metadata(home.token()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            home.ensure_token().unwrap(),
            first,
            "read back, not regenerated"
        );
    }

    #[test]
    fn an_existing_token_file_is_read_and_one_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path()).unwrap();
        fs::write(home.token(), "  my-token \n").unwrap();
        fs::set_permissions(home.token(), fs::Permissions::from_mode(0o644)).unwrap();
        let err = home.ensure_token().unwrap_err().to_string();
        assert!(
            err.contains("`token` can be read by other users (mode 0644)")
                && err.contains(&format!("run `chmod 600 {}`", home.token().display())),
            "{err}"
        );
        fs::set_permissions(home.token(), fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(home.ensure_token().unwrap(), "my-token");
        fs::write(home.token(), "\n").unwrap();
        let fresh = home.ensure_token().unwrap();
        assert_eq!(fresh.len(), 64, "an empty file gets a new token");
    }
}
