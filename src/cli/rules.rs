//! `switchboard rules check | test | reload | list | schema`.
//!
//! `check`, `test` and `schema` work on files alone, with no server; `reload` and `list` ask
//! the running server over the control socket.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand, ValueEnum};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::actions::Mode;
use crate::engine::{Decision, Engine};
use crate::message::{Message, NewMessage, format_timestamp};
use crate::rules::{LoadError, RuleSet};

/// The rules subcommands.
#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// Validate a rules file (default: the home's triggers.json); exit 1 when invalid.
    Check(CheckArgs),
    /// Replay messages through rules and print the actions they produce.
    Test(TestArgs),
    /// Ask the running server to reload triggers.json.
    Reload,
    /// Show the running server's rules.
    List,
    /// Print the JSON Schema of triggers.json.
    Schema,
}

/// Output format of `rules check`.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum Format {
    /// One line per error.
    #[default]
    Text,
    /// A JSON array of `{code, rule_index, rule, key, line, column, message}`.
    Json,
}

/// Options of `rules check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The file (default: triggers.json in the home).
    pub file: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// Options of `rules test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// The rules file.
    #[arg(long)]
    pub rules: PathBuf,
    /// Messages, one JSON object a line.
    #[arg(long)]
    pub messages: PathBuf,
    /// Also print why each rule did not fire for each message.
    #[arg(long)]
    pub explain: bool,
}

/// Runs a rules subcommand.
pub async fn execute(home: PathBuf, command: RulesCommand) -> anyhow::Result<ExitCode> {
    match command {
        RulesCommand::Check(args) => check(&home, args),
        RulesCommand::Test(args) => test(args),
        RulesCommand::Schema => {
            let schema = serde_json::to_string_pretty(&crate::rules::schema())?;
            writeln!(std::io::stdout().lock(), "{schema}")?;
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Reload => super::control_cmds::reload(home).await,
        RulesCommand::List => super::control_cmds::rules_list(home).await,
    }
}

/// `rules check`: 0 when valid, 1 when invalid; errors on stdout (text lines or a JSON array).
fn check(home: &Path, args: CheckArgs) -> anyhow::Result<ExitCode> {
    let explicit = args.file.is_some();
    let path = args.file.unwrap_or_else(|| home.join("triggers.json"));
    let shown = path.display().to_string();
    let mut out = std::io::stdout().lock();
    let result = match RuleSet::load(&path) {
        Ok(None) if explicit => anyhow::bail!("cannot read {shown}: no such file"),
        Ok(None) => {
            match args.format {
                Format::Json => writeln!(out, "[]")?,
                Format::Text => writeln!(
                    out,
                    "{shown}: no such file; the built-in catch-all notify rule applies"
                )?,
            }
            return Ok(ExitCode::SUCCESS);
        }
        Ok(Some(set)) => Ok(set),
        Err(LoadError::Invalid { errors, .. }) => Err(errors),
        Err(e @ LoadError::Io { .. }) => return Err(e.into()),
    };
    match (result, args.format) {
        (Ok(_), Format::Json) => writeln!(out, "[]")?,
        (Ok(set), Format::Text) => {
            let names: Vec<_> = set.rules().iter().map(|r| &*r.name).collect();
            writeln!(
                out,
                "{shown}: ok, {} rule{}{}{}",
                set.len(),
                if set.len() == 1 { "" } else { "s" },
                if names.is_empty() { "" } else { ": " },
                names.join(", ")
            )?;
        }
        (Err(errors), Format::Json) => {
            writeln!(out, "{}", serde_json::to_string_pretty(&errors)?)?;
            return Ok(ExitCode::from(1));
        }
        (Err(errors), Format::Text) => {
            for e in &errors {
                writeln!(out, "{}", e.render(&shown))?;
            }
            writeln!(
                out,
                "{shown}: invalid, {} error{}",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            )?;
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of a `rules test` messages file. A `channels.jsonl` record also fits
/// (`serverName` and `seq` are accepted), so real history can be replayed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestMessage {
    #[serde(default, alias = "serverName")]
    server: String,
    #[serde(default)]
    channel: String,
    /// Required, as at ingest: a message without content is a mistake in the file.
    content: String,
    #[serde(default)]
    timestamp: Option<DateTime<Utc>>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    /// When it arrives (the engine's clock); default `timestamp`.
    #[serde(default)]
    at: Option<DateTime<Utc>>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    seq: Option<u64>,
}

/// `rules test`: replays messages with the clock at each arrival; one JSON line per action.
fn test(args: TestArgs) -> anyhow::Result<ExitCode> {
    let shown = args.rules.display().to_string();
    let rules = match RuleSet::load(&args.rules) {
        Ok(Some(set)) => set,
        Ok(None) => anyhow::bail!("cannot read {shown}: no such file"),
        Err(LoadError::Invalid { errors, .. }) => {
            for e in &errors {
                eprintln!("{}", e.render(&shown));
            }
            eprintln!(
                "{shown}: invalid, {} error(s); nothing replayed",
                errors.len()
            );
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    let file = std::fs::File::open(&args.messages)
        .with_context(|| format!("cannot read {}", args.messages.display()))?;
    let lines = std::io::BufReader::new(file)
        .lines()
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("cannot read {}", args.messages.display()))?;
    let out_lines = match replay(rules, &lines, args.explain) {
        Ok(out) => out,
        Err(bad) => {
            let shown = args.messages.display();
            for e in &bad {
                eprintln!("{shown}:{e}");
            }
            eprintln!(
                "{shown}: {} bad line{}; nothing replayed",
                bad.len(),
                if bad.len() == 1 { "" } else { "s" }
            );
            return Ok(ExitCode::from(1));
        }
    };
    let mut out = std::io::stdout().lock();
    for line in out_lines {
        writeln!(out, "{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One message line, checked: the message and its arrival, or `LINE: reason`.
fn parse_line(n: usize, line: &str, index: usize) -> Result<(Message, DateTime<Utc>), String> {
    let t: TestMessage = serde_json::from_str(line).map_err(|e| format!("{}: {e}", n + 1))?;
    let Some(arrival) = t.at.or(t.timestamp) else {
        return Err(format!("{}: a message needs `timestamp` or `at`", n + 1));
    };
    let mut new = NewMessage::new(t.server, t.channel, t.content)
        .with_timestamp(t.timestamp.unwrap_or(arrival));
    new.metadata = t.metadata;
    new.id = t.id;
    Ok((
        Message::from_new(new, t.seq.unwrap_or(index as u64 + 1), arrival),
        arrival,
    ))
}

/// Replays message lines through `rules`: the output lines of `rules test`. Every line is
/// checked before anything is replayed; the error lists each bad line as `LINE: reason`.
pub fn replay(rules: RuleSet, lines: &[String], explain: bool) -> Result<Vec<Value>, Vec<String>> {
    let mut messages = Vec::new();
    let mut bad = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(n, line, messages.len()) {
            Ok(m) => messages.push(m),
            Err(e) => bad.push(e),
        }
    }
    if !bad.is_empty() {
        return Err(bad);
    }
    let rules = Arc::new(rules);
    let mut engine = Engine::new(rules.clone());
    let mut out = Vec::new();
    for (index, (msg, arrival)) in messages.into_iter().enumerate() {
        if explain {
            let (eval, decisions) = engine.evaluate_explained(&msg, arrival);
            let mut actions = eval.actions.into_iter();
            for ((rule, decision), compiled) in decisions.into_iter().zip(rules.rules()) {
                match decision {
                    Decision::Fired(_) => {
                        let action = actions.next().expect("one action per fired rule");
                        out.push(action_line(index, &action));
                    }
                    Decision::NoMatch => {
                        let mut line = json!({"msg": index, "rule": rule, "reason": "no_match"});
                        if let Some((failed, detail)) = mismatch(compiled, &msg) {
                            line["failed"] = failed.into();
                            line["detail"] = detail.into();
                        }
                        out.push(line);
                    }
                    other => out.push(json!({
                        "msg": index,
                        "rule": rule,
                        "reason": other.reason(),
                    })),
                }
            }
        } else {
            for action in engine.evaluate(&msg, arrival).actions {
                out.push(action_line(index, &action));
            }
        }
    }
    Ok(out)
}

/// Which matcher of `rule` turned `msg` away, in the order they are tried (`server`,
/// `channel`, `contentRegex`), with a sentence naming the value and the pattern.
fn mismatch(
    rule: &crate::rules::Rule,
    msg: &crate::message::Message,
) -> Option<(&'static str, String)> {
    let names = [
        ("server", &rule.server, &msg.server, &rule.raw.server),
        ("channel", &rule.channel, &msg.channel, &rule.raw.channel),
    ];
    for (key, pattern, value, written) in names {
        if !pattern.is_match(value) {
            let written = written.as_deref().unwrap_or("");
            return Some((
                key,
                format!("{key} \"{value}\" does not match `{key}` \"{written}\""),
            ));
        }
    }
    if let Some(re) = &rule.content_regex
        && !re.is_match(&msg.content)
    {
        return Some((
            "content",
            format!("content does not match `contentRegex` \"{}\"", re.as_str()),
        ));
    }
    None
}

fn action_line(index: usize, action: &crate::actions::Action) -> Value {
    let mut line = json!({
        "msg": index,
        "rule": action.rule,
        "mode": action.mode,
        "id": action.id,
        "prompt": action.prompt,
        "tools": action.tools,
    });
    if action.mode == Mode::Confirm
        && let Some(expires) = action.expires
    {
        line["expires_at"] = format_timestamp(expires).into();
    }
    if !action.delivery.is_wait() {
        line["delivery"] = action.delivery.as_str().into();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_uses_arrival_time_and_explains() {
        let rules = RuleSet::parse(
            r#"{"rules": [
              {"name": "crit", "channel": "alerts/*", "mode": "confirm", "prompt": "look: {{content}}",
               "rateLimit": "5m", "confirmTimeout": "10m"},
              {"name": "ci", "channel": "ci/*"}
            ]}"#,
        )
        .unwrap();
        let lines: Vec<String> = [
            r#"{"server": "am", "channel": "alerts/critical", "content": "db down", "timestamp": "2026-11-22T10:00:00Z"}"#,
            "",
            r#"{"server": "am", "channel": "alerts/critical", "content": "db down", "timestamp": "2026-11-22T10:00:00Z", "at": "2026-11-22T10:04:59Z"}"#,
            r#"{"serverName": "am", "seq": 9, "channel": "alerts/critical", "content": "db up", "timestamp": "2026-11-22T10:05:00Z"}"#,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = replay(rules.clone(), &lines, false).unwrap();
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(
            out[0],
            json!({"msg": 0, "rule": "crit", "mode": "confirm", "id": 1, "prompt": "look: db down",
                   "tools": [], "expires_at": "2026-11-22T10:10:00Z"})
        );
        assert_eq!(out[1]["msg"], 2);
        assert_eq!(out[1]["id"], 2);
        let explained = replay(rules, &lines, true).unwrap();
        assert_eq!(
            explained[1],
            json!({"msg": 0, "rule": "ci", "reason": "no_match", "failed": "channel",
                   "detail": "channel \"alerts/critical\" does not match `channel` \"ci/*\""})
        );
        let reasons: Vec<_> = explained
            .iter()
            .map(|l| {
                (
                    l["msg"].as_u64().unwrap(),
                    l["rule"].as_str().unwrap(),
                    l["reason"].as_str(),
                )
            })
            .collect();
        assert_eq!(
            reasons,
            [
                (0, "crit", None),
                (0, "ci", Some("no_match")),
                (1, "crit", Some("rate_limited")),
                (1, "ci", Some("no_match")),
                (2, "crit", None),
                (2, "ci", Some("no_match")),
            ]
        );
    }

    #[test]
    fn explain_names_the_matcher_that_failed() {
        let rules = RuleSet::parse(
            r#"{"rules": [{"name": "am", "server": "alertmanager", "channel": "alerts/*",
                            "contentRegex": "^\\[FIRING\\]"}]}"#,
        )
        .unwrap();
        let lines: Vec<String> = [
            ("github", "alerts/x", "[FIRING] a"),
            ("alertmanager", "ci/main", "[FIRING] a"),
            ("alertmanager", "alerts/x", "[RESOLVED] a"),
        ]
        .iter()
        .map(|(s, c, t)| {
            json!({"server": s, "channel": c, "content": t, "timestamp": "2026-11-22T10:00:00Z"})
                .to_string()
        })
        .collect();
        let out = replay(rules, &lines, true).unwrap();
        let failed: Vec<_> = out.iter().map(|l| l["failed"].as_str().unwrap()).collect();
        assert_eq!(failed, ["server", "channel", "content"]);
        assert_eq!(
            out[2]["detail"],
            "content does not match `contentRegex` \"^\\[FIRING\\]\""
        );
    }

    #[test]
    fn replay_names_the_bad_line() {
        let rules = RuleSet::builtin();
        let lines = vec![
            r#"{"channel": "a", "content": "x", "timestamp": "2026-11-22T10:00:00Z"}"#.to_string(),
            r#"{"chanel": "a"}"#.to_string(),
            String::new(),
            r#"{"channel": "a", "timestamp": "2026-11-22T10:00:00Z"}"#.to_string(),
            r#"{"channel": "a", "content": "x"}"#.to_string(),
        ];
        let err = replay(rules, &lines, false).unwrap_err();
        assert_eq!(err.len(), 3, "every bad line: {err:?}");
        assert!(err[0].starts_with("2: unknown field `chanel`"), "{err:?}");
        assert!(err[1].starts_with("4: missing field `content`"), "{err:?}");
        assert!(
            err[2].contains("5: a message needs `timestamp` or `at`"),
            "{err:?}"
        );
    }
}
