//! The rules language: `triggers.json` parsed, validated and compiled.
//!
//! CONTRACT: [`RuleSet::parse`] turns file text into a compiled rule set or
//! every error in file order; [`RuleSet::builtin`] is the catch-all notify
//! rule used when no file exists; [`default_prompt`] is the investigate prompt.
//!
//! STUB: only the built-in rule; the real parser replaces this body.

use std::path::Path;

use serde::Serialize;

use crate::actions::Mode;
use crate::message::Message;

/// A compiled rule (the parts other modules read).
#[derive(Clone, Debug)]
pub struct Rule {
    /// Unique name.
    pub name: String,
    /// What it does.
    pub mode: Mode,
    /// Tool whitelist.
    pub tools: Vec<String>,
    /// Disabled rules never fire.
    pub enabled: bool,
    /// Free text.
    pub description: String,
}

/// A compiled, validated set of rules.
#[derive(Clone, Debug)]
pub struct RuleSet {
    rules: Vec<Rule>,
}

/// One validation error, located.
#[derive(Clone, Debug, Serialize)]
pub struct RuleError {
    /// Stable code (`parse_error`, `unknown_key`, ...).
    pub code: &'static str,
    /// 0-based index of the rule, when the error is inside one.
    pub rule_index: Option<usize>,
    /// The rule's name, when known.
    pub rule: Option<String>,
    /// The key at fault.
    pub key: Option<String>,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// Human-readable message.
    pub message: String,
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
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
    #[error("{} invalid: {} error(s)", .path, .errors.len())]
    Invalid {
        /// The file.
        path: String,
        /// The errors.
        errors: Vec<RuleError>,
    },
}

impl RuleSet {
    /// The built-in default: one catch-all notify rule.
    pub fn builtin() -> RuleSet {
        RuleSet {
            rules: vec![Rule {
                name: "default".into(),
                mode: Mode::Notify,
                tools: vec![],
                enabled: true,
                description: "built-in catch-all: every message nudges".into(),
            }],
        }
    }

    /// Parses and compiles `text`; all errors in file order on failure.
    pub fn parse(_text: &str) -> Result<RuleSet, Vec<RuleError>> {
        Ok(RuleSet::builtin())
    }

    /// Loads `path`: `Ok(None)` when it does not exist.
    pub fn load(path: &Path) -> Result<Option<RuleSet>, LoadError> {
        match std::fs::read_to_string(path) {
            Ok(text) => RuleSet::parse(&text)
                .map(Some)
                .map_err(|errors| LoadError::Invalid {
                    path: path.display().to_string(),
                    errors,
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(LoadError::Io {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// The rules in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// The investigate prompt for a message (empty notify prompt, `channel_run`):
/// `Investigate this SERVER/CHANNEL event:`, a blank line, the content.
pub fn default_prompt(msg: &Message) -> String {
    format!(
        "Investigate this {}/{} event:\n\n{}",
        msg.server, msg.channel, msg.content
    )
}

/// What `rules_list` and `switchboard rules list` show of each rule.
pub fn summaries(rules: &RuleSet) -> Vec<serde_json::Value> {
    rules
        .rules()
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.name,
                "mode": r.mode,
                "enabled": r.enabled,
                "tools": r.tools,
                "description": r.description,
            })
        })
        .collect()
}
