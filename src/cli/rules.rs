//! `switchboard rules check | test | reload | list | schema`.
//!
//! `check`, `test` and `schema` work on files alone, with no server; `reload` and `list` ask
//! the running server over the control socket.
//!
//! `rules test` replays messages two ways: `--rules FILE --messages FILE.jsonl` prints what
//! fires (and with `--explain` why the rest did not), and `rules test FILE.json` checks
//! expectations, like `promtool test rules`: each test's messages run through the rule
//! files on a fresh engine, each expectation (`{"msg", "rule", "mode"}` or `{"msg", "rule",
//! "reason"}`) must hold, rules not named are not checked, and a failed expectation says what
//! happened instead and what held the rule back (which matcher, which time interval).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand, ValueEnum};
use serde::Deserialize;
use serde_json::{Value, json};

use super::show::print_json;
use crate::actions::Mode;
use crate::backend::Client;
use crate::control::ops::Rules;
use crate::engine::{Decision, Engine};
use crate::home::{MAX_READ, read_regular};
use crate::message::{Message, Metadata, NewMessage, format_timestamp};
use crate::rules::{LoadError, RuleSet};

/// The rules subcommands.
#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// Validate a rules file (default: the home's triggers.json, which a running daemon is
    /// then made to run before this returns); exit 1 when invalid.
    Check(CheckArgs),
    /// Check expectations from a test file, or replay messages through rules and print the
    /// actions they produce.
    Test(TestArgs),
    /// Have the running daemon read triggers.json now; returns once it runs the file on
    /// disk (an invalid file keeps the rules running, and exits 1).
    Reload(ReloadArgs),
    /// Show the running server's rules: one line per rule, or JSON with `--json`.
    List(ListArgs),
    /// Print the JSON Schema of triggers.json.
    Schema,
}

/// Output format of `rules check` and `config check` (`--format json` is `--json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
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
    /// Print the errors as a JSON array of `{code, rule_index, rule, key, line, column,
    /// message}` (`[]` when valid).
    #[arg(long)]
    pub json: bool,
    /// `--format json` is `--json` (kept for the scripts that use it).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// Options of `rules reload`.
#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// Print the daemon's reload report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `rules test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// A test file: `{"ruleFiles": [...], "tests": [{"name", "messages", "expect"}]}`; exit 1
    /// when an expectation fails.
    #[arg(conflicts_with_all = ["rules", "messages", "explain"], required_unless_present = "rules")]
    pub file: Option<PathBuf>,
    /// The rules file (replay mode).
    #[arg(long, requires = "messages")]
    pub rules: Option<PathBuf>,
    /// Messages, one JSON object a line (replay mode).
    #[arg(long, requires = "rules")]
    pub messages: Option<PathBuf>,
    /// Also print why each rule did not fire for each message (replay mode).
    #[arg(long)]
    pub explain: bool,
    /// A test file's results as one JSON object (the replay mode prints JSON lines anyway).
    #[arg(long)]
    pub json: bool,
}

/// Options of `rules list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// The rules as JSON (the rule as written, defaults filled in), for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs a rules subcommand.
pub async fn execute(home: PathBuf, command: RulesCommand) -> anyhow::Result<ExitCode> {
    match command {
        RulesCommand::Check(args) => check(&home, args).await,
        RulesCommand::Test(args) => match args.file {
            Some(file) => test_file(&file, args.json),
            None => test(args),
        },
        RulesCommand::Schema => {
            let schema = serde_json::to_string_pretty(&crate::rules::schema())?;
            writeln!(std::io::stdout().lock(), "{schema}")?;
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Reload(args) => reload(&home, args.json).await,
        RulesCommand::List(args) => rules_list(home, args.json).await,
    }
}

/// `rules check`: 0 when valid, 1 when invalid; errors on stdout (text lines or a JSON array).
/// On the home's own file with a daemon running, it returns once the daemon runs the file.
async fn check(home: &Path, args: CheckArgs) -> anyhow::Result<ExitCode> {
    let json = args.json || args.format == Format::Json;
    let explicit = args.file.is_some();
    let path = args.file.unwrap_or_else(|| home.join("triggers.json"));
    let shown = path.display().to_string();
    let result = match RuleSet::load(&path) {
        Ok(None) if explicit => anyhow::bail!("cannot read {shown}: no such file"),
        Ok(None) => {
            let mut out = std::io::stdout().lock();
            match json {
                true => writeln!(out, "[]")?,
                false => writeln!(
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
    let valid = result.is_ok();
    print_check(&shown, result, json)?;
    if !explicit {
        // The daemon, when one runs, is made to run what was just checked.
        match Client::connect(home).await {
            Ok(mut client) => {
                let report = super::rules_running::sync(&mut client, &path, false).await?;
                let line = super::rules_running::running_line(&report, &path);
                let in_sync = report.ok && report.running == report.hash;
                match json {
                    true => eprintln!("{line}"),
                    false => writeln!(std::io::stdout().lock(), "{line}")?,
                }
                if valid && !in_sync {
                    return Ok(super::exit::code(super::exit::FAILURE));
                }
            }
            Err(e) if e.is::<crate::backend::NotRunning>() => {
                let line = format!(
                    "not running: no daemon runs on {}; `{}` loads these rules",
                    home.display(),
                    crate::home::command("start")
                );
                match json {
                    true => eprintln!("{line}"),
                    false => writeln!(std::io::stdout().lock(), "{line}")?,
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(if valid {
        ExitCode::SUCCESS
    } else {
        super::exit::code(super::exit::FAILURE)
    })
}

/// Prints what `rules check` found: `PATH: ok, N rules: …` (and the warnings), or every error.
fn print_check(
    shown: &str,
    result: Result<RuleSet, Vec<crate::rules::RuleError>>,
    json: bool,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match (result, json) {
        (Ok(_), true) => writeln!(out, "[]")?,
        (Ok(set), false) => {
            let text = std::fs::read_to_string(shown).unwrap_or_default();
            for warning in super::rules_lint::warnings(&set, &text) {
                eprintln!("{}", warning.render(shown));
            }
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
        (Err(errors), true) => writeln!(out, "{}", serde_json::to_string_pretty(&errors)?)?,
        (Err(errors), false) => {
            for e in &errors {
                writeln!(out, "{}", e.render(shown))?;
            }
            writeln!(
                out,
                "{shown}: invalid, {} error{}",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            )?;
        }
    }
    Ok(())
}

/// `rules reload`: the daemon reads triggers.json now; returns once it runs the file on disk.
/// An invalid or missing file keeps the rules running: its errors, and exit 1.
async fn reload(home: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let path = home.join("triggers.json");
    let mut client = Client::connect(home).await?;
    let report = super::rules_running::sync(&mut client, &path, true).await?;
    if json {
        print_json(&serde_json::to_value(&report)?)?;
        return Ok(super::exit::code(if report.ok {
            super::exit::OK
        } else {
            super::exit::FAILURE
        }));
    }
    if !report.ok {
        for e in &report.errors {
            eprintln!("{}", e.message);
        }
        anyhow::bail!(report.message);
    }
    writeln!(
        std::io::stdout().lock(),
        "{}",
        super::rules_running::running_line(&report, &path)
    )?;
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
    metadata: Metadata,
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
    let (Some(rules_path), Some(messages_path)) = (args.rules, args.messages) else {
        anyhow::bail!("`rules test` needs a test file, or `--rules FILE --messages FILE.jsonl`");
    };
    let args = ReplayArgs {
        rules: rules_path,
        messages: messages_path,
        explain: args.explain,
    };
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
    let lines: Vec<String> = read_regular(&args.messages, MAX_READ)
        .with_context(|| format!("cannot read {}", args.messages.display()))?
        .lines()
        .map(String::from)
        .collect();
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

/// The replay mode's files.
struct ReplayArgs {
    rules: PathBuf,
    messages: PathBuf,
    explain: bool,
}

/// One message line, checked: the message and its arrival, or `LINE: reason`.
fn parse_line(n: usize, line: &str, index: usize) -> Result<(Message, DateTime<Utc>), String> {
    let t: TestMessage = serde_json::from_str(line).map_err(|e| format!("{}: {e}", n + 1))?;
    to_message(t, index).map_err(|e| format!("{}: {e}", n + 1))
}

/// A test message as the engine sees it, with its arrival time (`at`, else `timestamp`).
fn to_message(t: TestMessage, index: usize) -> Result<(Message, DateTime<Utc>), String> {
    let Some(arrival) = t.at.or(t.timestamp) else {
        return Err("a message needs `timestamp` or `at`".into());
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
                    Decision::Undecided(_) => {
                        let action = actions.next().expect("one action per fired rule");
                        let mut line = action_line(index, &action);
                        line["undecided"] = "regex_budget".into();
                        line["detail"] = undecided(compiled, &msg).into();
                        out.push(line);
                    }
                    Decision::NoMatch => {
                        let mut line = json!({"msg": index, "rule": rule, "reason": "no_match"});
                        if let Some((failed, detail)) = mismatch(compiled, &msg) {
                            line["failed"] = failed.into();
                            line["detail"] = detail.into();
                        }
                        out.push(line);
                    }
                    other => {
                        let mut line =
                            json!({"msg": index, "rule": rule, "reason": other.reason()});
                        if let Some(detail) = held_back(compiled, &msg, other, arrival) {
                            line["detail"] = detail.into();
                        }
                        out.push(line);
                    }
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

/// Why `rule` counted `msg` as undecided, in a sentence.
fn undecided(rule: &crate::rules::Rule, msg: &Message) -> String {
    let pattern = rule.content_regex.as_ref().map_or("", |re| re.as_str());
    let then = if rule.fails_closed() {
        "a confirm or `stop` rule counts that as a match, and a person decides"
    } else {
        "an auto or notify rule without `stop` does not fire on that"
    };
    format!(
        "whether content ({} bytes) matches `contentRegex` \"{pattern}\" could not be decided \
         within the regex budget; {then}",
        msg.content.len()
    )
}

/// For a rule the clock held back, which time interval did, and for one whose content regex
/// was undecided, why; in a sentence.
fn held_back(
    rule: &crate::rules::Rule,
    msg: &Message,
    decision: Decision,
    at: DateTime<Utc>,
) -> Option<String> {
    let when = at.format("%Y-%m-%dT%H:%M:%SZ, a %A");
    match decision {
        Decision::RegexBudget => Some(undecided(rule, msg)),
        Decision::Muted => rule
            .muted_by(at)
            .map(|n| format!("{when}, is inside `muteTimeIntervals` \"{}\"", n.name)),
        Decision::Inactive => {
            let names: Vec<_> = rule
                .active_intervals
                .iter()
                .map(|n| format!("\"{}\"", n.name))
                .collect();
            Some(format!(
                "{when}, is outside `activeTimeIntervals` {}",
                names.join(", ")
            ))
        }
        _ => None,
    }
}

/// Which matcher of `rule` turned `msg` away, in the order they are tried (`server`,
/// `channel`, `matchers`, `contentRegex`), with a sentence naming the value and the pattern.
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
    if let Some(m) = rule.matchers.iter().find(|m| !m.is_match(&msg.metadata)) {
        let value = match msg.metadata.get(m.key()) {
            Some(v) => format!("is \"{}\"", v.escape_debug()),
            None => "is missing (the empty string)".into(),
        };
        return Some((
            "matchers",
            format!("matcher `{m}` does not hold: `{}` {value}", m.key()),
        ));
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

/// A `rules test` file, like `promtool test rules`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TestFile {
    /// Rule files, relative to the test file; their rules in this order, as one file.
    rule_files: Vec<PathBuf>,
    tests: Vec<TestCase>,
}

/// One test: messages replayed on a fresh engine, and what must have happened.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestCase {
    name: String,
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    expect: Vec<Expectation>,
}

/// `{"msg", "rule", "mode"}`: the rule fired for that message in that mode; `{"msg", "rule",
/// "reason"}`: it did not, for that reason; `{"msg", "rule"}`: it fired.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expectation {
    msg: usize,
    rule: String,
    #[serde(default)]
    mode: Option<Mode>,
    #[serde(default)]
    reason: Option<String>,
}

/// Every reason `rules test` can give a rule that did not fire.
const REASONS: &[&str] = &[
    "no_match",
    "disabled",
    "inactive",
    "muted",
    "dedup",
    "rate_limited",
    "stopped",
    "regex_budget",
];

/// What one rule did with one message.
struct Outcome {
    decision: Decision,
    mode: Option<Mode>,
    detail: Option<String>,
}

impl Outcome {
    fn describe(&self) -> String {
        let mut out = match (self.decision.reason(), self.mode) {
            (None, Some(mode)) => format!("fired ({mode})"),
            (Some(reason), _) => reason.to_string(),
            (None, None) => "fired".to_string(),
        };
        if let Some(detail) = &self.detail {
            out.push_str(": ");
            out.push_str(detail);
        }
        out
    }
}

/// `rules test FILE.json`: every test, passed or failed; exit 1 on any failure.
fn test_file(path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let shown = path.display().to_string();
    let text = read_regular(path, MAX_READ).with_context(|| format!("cannot read {shown}"))?;
    let file: TestFile = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{shown}:{}:{}: not a rules test file: {e}",
            e.line(),
            e.column()
        )
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    let rules = match load_rule_files(base, &file.rule_files) {
        Ok(rules) => Arc::new(rules),
        Err(lines) => {
            for line in &lines {
                eprintln!("{line}");
            }
            eprintln!("{shown}: the rule files are invalid; no test ran");
            return Ok(ExitCode::from(1));
        }
    };
    // Every test's messages are checked before any runs.
    let mut cases = Vec::new();
    let mut bad = Vec::new();
    for case in file.tests {
        let mut messages = Vec::new();
        for (i, value) in case.messages.iter().enumerate() {
            match serde_json::from_value::<TestMessage>(value.clone())
                .map_err(|e| e.to_string())
                .and_then(|t| to_message(t, i))
            {
                Ok(m) => messages.push(m),
                Err(e) => bad.push(format!("{shown}: test \"{}\": message {i}: {e}", case.name)),
            }
        }
        for e in &case.expect {
            if let Some(reason) = &e.reason
                && !REASONS.contains(&reason.as_str())
            {
                bad.push(format!(
                    "{shown}: test \"{}\": unknown reason \"{reason}\"; expected one of {}",
                    case.name,
                    REASONS.join(", ")
                ));
            }
            if e.reason.is_some() && e.mode.is_some() {
                bad.push(format!(
                    "{shown}: test \"{}\": msg {}, rule `{}`: give `mode` (it fired) or `reason` (it did not), not both",
                    case.name, e.msg, e.rule
                ));
            }
        }
        cases.push((case.name, messages, case.expect));
    }
    if !bad.is_empty() {
        for line in &bad {
            eprintln!("{line}");
        }
        eprintln!(
            "{shown}: {} problem{}; no test ran",
            bad.len(),
            if bad.len() == 1 { "" } else { "s" }
        );
        return Ok(ExitCode::from(1));
    }

    let mut out = std::io::stdout().lock();
    let (mut passed, mut failed) = (0, 0);
    let mut results = Vec::new();
    for (name, messages, expect) in cases {
        let outcomes = run_case(&rules, messages);
        let failures: Vec<String> = expect
            .iter()
            .filter_map(|e| check_expectation(&rules, &outcomes, e))
            .collect();
        if failures.is_empty() {
            passed += 1;
        } else {
            failed += 1;
        }
        if json {
            results
                .push(json!({"name": name, "passed": failures.is_empty(), "failures": failures}));
            continue;
        }
        if failures.is_empty() {
            writeln!(out, "passed: {name}")?;
        } else {
            writeln!(out, "failed: {name}")?;
            for f in failures {
                writeln!(out, "  {f}")?;
            }
        }
    }
    if json {
        let all = json!({"passed": passed, "failed": failed, "tests": results});
        writeln!(out, "{}", serde_json::to_string_pretty(&all)?)?;
    } else {
        writeln!(
            out,
            "{} test{}: {passed} passed, {failed} failed",
            passed + failed,
            if passed + failed == 1 { "" } else { "s" }
        )?;
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The rule files as one rule set (their `timeIntervals` together, their rules in order);
/// on failure, the lines to print.
fn load_rule_files(base: &Path, files: &[PathBuf]) -> Result<RuleSet, Vec<String>> {
    if files.is_empty() {
        return Err(vec![
            "`ruleFiles` is empty: name at least one rules file".into(),
        ]);
    }
    let mut intervals = serde_json::Map::new();
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    let mut texts = Vec::new();
    for file in files {
        let path = base.join(file);
        let shown = path.display().to_string();
        match read_regular(&path, MAX_READ) {
            Ok(text) => {
                let value: Value = serde_json::from_str(&text).unwrap_or_default();
                for (name, list) in value["timeIntervals"].as_object().into_iter().flatten() {
                    if intervals.insert(name.clone(), list.clone()).is_some() {
                        errors.push(format!(
                            "{shown}: time interval `{name}` is also defined in an earlier rule file"
                        ));
                    }
                }
                rules.extend(value["rules"].as_array().into_iter().flatten().cloned());
                texts.push((shown, text));
            }
            Err(e) => errors.push(format!("cannot read {shown}: {e}")),
        }
    }
    // Each file is checked on its own, for positions in it; a rule may name an interval
    // that another of the files defines.
    for (shown, text) in &texts {
        if let Err(errs) = RuleSet::parse(text) {
            errors.extend(
                errs.iter()
                    .filter(|e| {
                        e.code != crate::rules::ErrorCode::UnknownTimeInterval
                            || !intervals
                                .keys()
                                .any(|n| e.message.contains(&format!("names \"{n}\",")))
                    })
                    .map(|e| e.render(shown)),
            );
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let merged = json!({"timeIntervals": intervals, "rules": rules}).to_string();
    RuleSet::parse(&merged).map_err(|errs| {
        errs.iter()
            .map(|e| format!("ruleFiles together: {e}"))
            .collect()
    })
}

/// Replays one test's messages on a fresh engine: per message, what each rule did.
fn run_case(
    rules: &Arc<RuleSet>,
    messages: Vec<(Message, DateTime<Utc>)>,
) -> Vec<std::collections::HashMap<String, Outcome>> {
    let mut engine = Engine::new(rules.clone());
    let mut all = Vec::new();
    for (msg, at) in messages {
        let (eval, decisions) = engine.evaluate_explained(&msg, at);
        let mut actions = eval.actions.into_iter();
        let mut by_rule = std::collections::HashMap::new();
        for ((name, decision), rule) in decisions.into_iter().zip(rules.rules()) {
            let (mode, detail) = match decision {
                Decision::Fired(_) => (actions.next().map(|a| a.mode), None),
                Decision::Undecided(_) => {
                    (actions.next().map(|a| a.mode), Some(undecided(rule, &msg)))
                }
                Decision::NoMatch => (None, mismatch(rule, &msg).map(|(_, d)| d)),
                other => (None, held_back(rule, &msg, other, at)),
            };
            by_rule.insert(
                name,
                Outcome {
                    decision,
                    mode,
                    detail,
                },
            );
        }
        all.push(by_rule);
    }
    all
}

/// `None` when the expectation holds, else a line saying what was expected and what happened.
fn check_expectation(
    rules: &RuleSet,
    outcomes: &[std::collections::HashMap<String, Outcome>],
    e: &Expectation,
) -> Option<String> {
    let head = format!("msg {}, rule `{}`", e.msg, e.rule);
    let Some(by_rule) = outcomes.get(e.msg) else {
        return Some(format!("{head}: the test has {} messages", outcomes.len()));
    };
    let Some(got) = by_rule.get(&e.rule) else {
        let names: Vec<_> = rules.rules().iter().map(|r| &*r.name).collect();
        return Some(format!(
            "{head}: no such rule in the rule files ({})",
            names.join(", ")
        ));
    };
    let (holds, wanted) = match (&e.mode, &e.reason) {
        (Some(mode), _) => (got.mode == Some(*mode), format!("to fire ({mode})")),
        (None, Some(reason)) => (
            got.decision.reason() == Some(reason.as_str()),
            format!("reason {reason}"),
        ),
        (None, None) => (got.mode.is_some(), "to fire".to_string()),
    };
    (!holds).then(|| format!("{head}: expected {wanted}, got {}", got.describe()))
}

/// `switchboard rules list`: one line per rule, or JSON.
pub async fn rules_list(home: PathBuf, json: bool) -> anyhow::Result<ExitCode> {
    let rules = Client::connect(&home).await?.call(Rules {}).await?;
    if !json {
        print_list(&rules)?;
        return Ok(ExitCode::SUCCESS);
    }
    print_json(&serde_json::Value::Array(rules))?;
    Ok(ExitCode::SUCCESS)
}

/// `rules list` for people: one line per rule with its name, mode, what it matches and its
/// limits, from the daemon's summaries ([`crate::rules::summaries`]).
pub fn print_list(rules: &[Value]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if rules.is_empty() {
        return writeln!(out, "no rules: nothing fires");
    }
    let name_width = rules
        .iter()
        .map(|r| r["name"].as_str().unwrap_or("").chars().count())
        .max()
        .unwrap_or(0);
    for rule in rules {
        writeln!(out, "{}", list_line(rule, name_width))?;
    }
    Ok(())
}

/// One rule of `rules list`: `NAME  MODE  matches …  limits …`.
fn list_line(rule: &Value, name_width: usize) -> String {
    let text = |key: &str| rule[key].as_str().filter(|s| !s.is_empty() && *s != "*");
    let list = |key: &str| -> Vec<String> {
        rule[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let mut matches = Vec::new();
    if let Some(s) = text("server") {
        matches.push(format!("server {s}"));
    }
    if let Some(c) = text("channel") {
        matches.push(format!("channel {c}"));
    }
    matches.extend(list("matchers"));
    if let Some(re) = text("contentRegex") {
        matches.push(format!("content /{re}/"));
    }
    let active = list("activeTimeIntervals");
    if !active.is_empty() {
        matches.push(format!("active in {}", active.join(", ")));
    }
    let muted = list("muteTimeIntervals");
    if !muted.is_empty() {
        matches.push(format!("muted in {}", muted.join(", ")));
    }
    let mut limits = Vec::new();
    if let Some(r) = text("rateLimit").filter(|r| *r != "0") {
        limits.push(format!("rateLimit {r}"));
    }
    if let Some(w) = text("dedupWindow").filter(|w| *w != "0") {
        match text("dedupKey") {
            Some(k) => limits.push(format!("dedup {w} by {k}")),
            None => limits.push(format!("dedup {w}")),
        }
    }
    if let Some(t) = text("confirmTimeout") {
        limits.push(format!("confirm within {t}"));
    }
    if rule["stop"] == true {
        limits.push("stop".into());
    }
    if text("delivery") == Some("exec") {
        limits.push("exec".into());
    }
    let consumers = list("consumers");
    if !consumers.is_empty() {
        limits.push(format!("for {}", consumers.join(", ")));
    }
    let name = rule["name"].as_str().unwrap_or("");
    let mode = rule["mode"].as_str().unwrap_or("notify");
    let mut line = format!(
        "{}{}  {mode:<7}  {}",
        name,
        " ".repeat(name_width.saturating_sub(name.chars().count())),
        if matches.is_empty() {
            "every message".to_string()
        } else {
            matches.join(", ")
        }
    );
    if !limits.is_empty() {
        line.push_str("; ");
        line.push_str(&limits.join(", "));
    }
    if rule["enabled"] == false {
        line.push_str(" (disabled)");
    }
    // Names and patterns come from the file: a control character is shown, not obeyed.
    line.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
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
