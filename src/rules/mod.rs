//! The rules language: `triggers.json` parsed, validated and compiled.
//!
//! Text goes through [`file`] (serde shape and positions), [`compile`] (every key and every
//! rule checked, every error collected and located) and comes out as a [`RuleSet`] of compiled
//! [`Rule`]s: globs, regexes, metadata [`matcher`]s, time [`interval`]s, templates and durations
//! ready to use. Nothing matches on raw rules. A file is all-or-nothing: one bad rule rejects it, and the caller keeps what it had.
//!
//! A missing file means [`RuleSet::builtin`]: one catch-all notify rule.

mod compile;
mod content;
mod error;
pub mod file;
pub mod filter;
pub mod interval;
pub mod matcher;
pub mod pattern;
mod stand_in;
pub mod template;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

pub use content::ContentRegex;
pub(crate) use error::suggest;
pub use error::{ErrorCode, LoadError, RuleError};
pub use file::{RawFile, RawRule};
pub use filter::{MessageFilter, RawFilter};
pub use interval::{NamedIntervals, TimeInterval, time_zone};
pub use matcher::{MatchOp, Matcher};
pub use pattern::NamePattern;
pub use template::Template;

use crate::actions::{Delivery, Mode};
use crate::message::Message;

/// How long a confirm waits for an answer when the rule does not say.
pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How often a rule may fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateLimit {
    /// No limit (`"0"` or absent).
    None,
    /// At most one fire per window, counted from the last fire; exactly the window later is allowed.
    Cooldown(Duration),
    /// At most `count` fires in any window of `period` (a sliding window).
    Quota {
        /// Fires allowed per period.
        count: u32,
        /// The period.
        period: Duration,
    },
}

/// A compiled rule.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Unique name; identity of its rate-limit and dedup state.
    pub name: Arc<str>,
    /// What it does when it fires.
    pub mode: Mode,
    /// Server pattern.
    pub server: NamePattern,
    /// Channel pattern.
    pub channel: NamePattern,
    /// Content regex, searched unanchored.
    pub content_regex: Option<ContentRegex>,
    /// Metadata matchers; all must hold.
    pub matchers: Vec<Matcher>,
    /// `activeTimeIntervals`: it fires only inside one of them (empty: always).
    pub active_intervals: Vec<Arc<NamedIntervals>>,
    /// `muteTimeIntervals`: it never fires inside any of them.
    pub mute_intervals: Vec<Arc<NamedIntervals>>,
    /// Prompt template; `None` for a notify rule with the default prompt.
    pub prompt: Option<Template>,
    /// Tool whitelist (names or globs).
    pub tools: Vec<String>,
    /// How an auto prompt is run: the wait tool (default) or the exec runner.
    pub delivery: Delivery,
    /// Cooldown or quota.
    pub rate_limit: RateLimit,
    /// Dedup window; `None` = no dedup.
    pub dedup_window: Option<Duration>,
    /// Dedup key template; `None` = the first 256 bytes of content.
    pub dedup_key: Option<Template>,
    /// How long a confirm of this rule waits.
    pub confirm_timeout: Duration,
    /// Disabled rules never fire.
    pub enabled: bool,
    /// When it matches a message, later rules are not tried for that message (fired or
    /// suppressed alike).
    pub stop: bool,
    /// Free text.
    pub description: String,
    /// What closes this confirm rule's pending confirms, when it says (`resolveRegex` +
    /// `resolveKey`).
    pub resolve: Option<Resolve>,
    /// Confirm rules: the paths that may answer (`approveVia`); empty = any.
    pub approve_via: Vec<crate::actions::Via>,
    /// `consumers`: who may receive its actions (everyone when empty).
    pub consumers: crate::actions::Audience,
    /// The rule as written (for `rules list`).
    pub raw: RawRule,
}

/// What resolves a confirm rule's pending confirms: a later message that matches the rule's
/// `server` and `channel` and `regex`, and renders `key` the same as the confirm's message.
#[derive(Clone, Debug)]
pub struct Resolve {
    /// `resolveRegex`, searched unanchored in the later message's content.
    pub regex: ContentRegex,
    /// `resolveKey`, rendered for both messages; an empty rendering matches nothing.
    pub key: Template,
}

/// Whether a rule matches a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matched {
    /// Server, channel, matchers or content do not match.
    No,
    /// Everything matches.
    Yes,
    /// Server, channel and matchers match, but whether the content regex does could not be
    /// found within its budget (`regex_budget`, see [`ContentRegex::check`]).
    Undecided,
}

/// What an action fired on an undecided message says first: why a person is asked.
pub const UNDECIDED_NOTE: &str = "switchboard could not decide within its regex budget \
                                  (regex_budget) whether this message matches the rule's \
                                  `contentRegex`, so it counts as a match and a person decides.";

impl Rule {
    /// Whether the message matches server, channel, matchers and content; a message whose
    /// content regex is undecided matches when the rule [fails closed](Rule::fails_closed).
    pub fn is_match(&self, msg: &Message) -> bool {
        match self.check(msg) {
            Matched::Yes => true,
            Matched::No => false,
            Matched::Undecided => self.fails_closed(),
        }
    }

    /// Whether the message matches server, channel, matchers and content, or could not be
    /// decided within the content regex's budget.
    pub fn check(&self, msg: &Message) -> Matched {
        if !(self.server.is_match(&msg.server)
            && self.channel.is_match(&msg.channel)
            && self.matchers_hold(msg))
        {
            return Matched::No;
        }
        match self.content_regex.as_ref().map(|re| re.check(&msg.content)) {
            None | Some(Ok(true)) => Matched::Yes,
            Some(Ok(false)) => Matched::No,
            Some(Err(_)) => Matched::Undecided,
        }
    }

    /// Whether a message this rule cannot decide (see [`Matched::Undecided`]) counts as a
    /// match: for a confirm rule, whose confirm puts the message to a person, and a `stop`
    /// rule, which guards the rules after it. An auto or notify rule without `stop` does not
    /// fire on what it cannot decide; what a `stop` rule fires on it is put to a person (see
    /// `engine`).
    pub fn fails_closed(&self) -> bool {
        self.mode == Mode::Confirm || self.stop
    }

    /// Whether every matcher holds for the message's metadata.
    pub fn matchers_hold(&self, msg: &Message) -> bool {
        self.matchers.iter().all(|m| m.is_match(&msg.metadata))
    }

    /// The first of `muteTimeIntervals` that `now` is inside: the rule is muted by it.
    pub fn muted_by(&self, now: DateTime<Utc>) -> Option<&NamedIntervals> {
        self.mute_intervals
            .iter()
            .find(|n| n.contains(now))
            .map(|n| &**n)
    }

    /// Whether `now` is inside one of `activeTimeIntervals` (always, without any).
    pub fn is_active(&self, now: DateTime<Utc>) -> bool {
        self.active_intervals.is_empty() || self.active_intervals.iter().any(|n| n.contains(now))
    }

    /// The prompt for `msg`: the template, or the default investigate prompt.
    pub fn render_prompt(&self, msg: &Message) -> String {
        match &self.prompt {
            Some(t) => t.render(msg),
            None => default_prompt(msg),
        }
    }
}

/// A compiled, validated set of rules, in file order.
#[derive(Clone, Debug)]
pub struct RuleSet {
    rules: Vec<Rule>,
    builtin: bool,
}

impl RuleSet {
    pub(crate) fn new(rules: Vec<Rule>, builtin: bool) -> RuleSet {
        RuleSet { rules, builtin }
    }

    /// The built-in default: one catch-all notify rule named `default`.
    pub fn builtin() -> RuleSet {
        let raw = RawRule {
            name: Some("default".into()),
            description: Some("built-in catch-all: every message nudges".into()),
            ..RawRule::default()
        };
        let mut set = compile::compile(&serde_json::json!({ "rules": [raw] }).to_string())
            .expect("the built-in rule compiles");
        set.builtin = true;
        set
    }

    /// Parses and compiles `text`; every error, in file order, on failure.
    pub fn parse(text: &str) -> Result<RuleSet, Vec<RuleError>> {
        compile::compile(text)
    }

    /// Loads `path`: `Ok(None)` when it does not exist.
    pub fn load(path: &Path) -> Result<Option<RuleSet>, LoadError> {
        RuleSet::load_hashed(path).1
    }

    /// [`RuleSet::load`], with the [`file_hash`] of the text it read (`None` when there was
    /// no file, or it could not be read): what the daemon ran, for `rules check` to compare
    /// with the file on disk. Only a regular file is read, within
    /// [`crate::home::MAX_READ`].
    pub fn load_hashed(path: &Path) -> (Option<String>, Result<Option<RuleSet>, LoadError>) {
        let text = match crate::home::read_regular(path, crate::home::MAX_READ) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (None, Ok(None)),
            Err(source) => {
                let path = path.display().to_string();
                return (None, Err(LoadError::Io { path, source }));
            }
        };
        let hash = Some(file_hash(text.as_bytes()));
        let loaded = RuleSet::parse(&text)
            .map(Some)
            .map_err(|errors| LoadError::Invalid {
                path: path.display().to_string(),
                errors,
            });
        (hash, loaded)
    }

    /// The rules in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether this is the built-in default rather than a file.
    pub fn is_builtin(&self) -> bool {
        self.builtin
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

/// The SHA-256 of a rules file's bytes, in hex: the daemon's reload report carries the hash of
/// the file it read and of the file it runs, and `rules check` compares them with the file on
/// disk.
pub fn file_hash(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The JSON Schema of `triggers.json`, for editors.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RawFile)).expect("schema serialises")
}

/// The investigate prompt for a message (empty notify prompt, `channel_run`):
/// `Investigate this SERVER/CHANNEL event:`, a blank line, the content.
pub fn default_prompt(msg: &Message) -> String {
    const HEAD: &str = "Investigate this ";
    const TAIL: &str = " event:\n\n";
    let mut out = String::with_capacity(
        HEAD.len() + msg.server.len() + 1 + msg.channel.len() + TAIL.len() + msg.content.len(),
    );
    for part in [HEAD, &msg.server, "/", &msg.channel, TAIL, &msg.content] {
        out.push_str(part);
    }
    template::cap(out)
}

/// What `rules_list` and `switchboard rules list` show of each rule: the rule as written,
/// with defaults filled in.
pub fn summaries(rules: &RuleSet) -> Vec<serde_json::Value> {
    rules
        .rules()
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(&r.raw).unwrap_or_default();
            if let Some(map) = v.as_object_mut() {
                map.insert("mode".into(), r.mode.as_str().into());
                map.insert("enabled".into(), r.enabled.into());
                map.entry("tools").or_insert_with(|| serde_json::json!([]));
                if r.mode == Mode::Confirm {
                    map.insert(
                        "confirmTimeout".into(),
                        humantime::format_duration(r.confirm_timeout)
                            .to_string()
                            .into(),
                    );
                }
            }
            v
        })
        .collect()
}

#[cfg(test)]
mod tests;
