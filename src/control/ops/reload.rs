//! `reload`: `rules_reload`, `switchboard rules reload`, the rules watcher and SIGHUP —
//! triggers.json read again. An invalid or missing file keeps the live rules; the report says
//! why (it is the reply either way: `ok: false` is not a failed call).
//!
//! Every reload that read the file is announced to `watch` ([`Reloaded`], one line each:
//! `rules: reloaded, 4 rules` or `rules: triggers.json:3:12: …; still running the previous 4
//! rules`); the watcher announces the reloads of `switchboard.json` the same way.

use serde::{Deserialize, Serialize};

use crate::app::ReloadReport;
use crate::control::{ApiError, Ctx, Op};

/// Reloads triggers.json.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Reload {
    /// The hash of a file ([`crate::rules::file_hash`]) that need not be read again: when the
    /// last (re)load read exactly that file, its report is the reply (`rules check`, the
    /// watcher).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unless: Option<String>,
}

/// A reload of a file of the home, as `watch` shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reloaded {
    /// `triggers.json` or `switchboard.json`.
    pub file: String,
    /// True when the new content runs.
    pub ok: bool,
    /// One line for people (`rules: reloaded, 4 rules`).
    pub line: String,
    /// The reload's report (a rules [`ReloadReport`], or the config's), for `watch --json`.
    pub report: serde_json::Value,
}

impl Op for Reload {
    type Reply = ReloadReport;

    async fn apply(self, cx: &Ctx<'_>) -> Result<ReloadReport, ApiError> {
        let (report, fresh) = cx.core().reload_rules(self.unless).await;
        if fresh {
            cx.local.announce(Reloaded {
                file: "triggers.json".into(),
                ok: report.ok,
                line: format!("rules: {}", reload_line(&report)),
                report: serde_json::to_value(&report).unwrap_or_default(),
            });
        }
        Ok(report)
    }
}

/// `4 rules` / `1 rule`.
pub fn rules_count(n: usize) -> String {
    format!("{n} rule{}", if n == 1 { "" } else { "s" })
}

/// What runs after `report`: `the previous 4 rules`, or the built-in rule.
pub fn still_running(report: &ReloadReport) -> String {
    match report.running {
        Some(_) => format!("the previous {}", rules_count(report.rules)),
        None => "the built-in catch-all notify rule".into(),
    }
}

/// What a (re)load did, in one line: `reloaded, 4 rules`, or its first error (located, with the
/// file's name) and what still runs.
pub fn reload_line(report: &ReloadReport) -> String {
    if report.ok {
        return match report.running {
            Some(_) => format!("reloaded, {}", rules_count(report.rules)),
            None => "no triggers.json: the built-in catch-all notify rule runs".into(),
        };
    }
    let why = match report.errors.first() {
        Some(first) => {
            let more = match report.errors.len() {
                1 => String::new(),
                n => format!(
                    " (and {} more error{})",
                    n - 1,
                    if n == 2 { "" } else { "s" }
                ),
            };
            format!("{}{more}", first.render("triggers.json"))
        }
        None if report.hash.is_none() => "triggers.json is missing".into(),
        None => report.message.clone(),
    };
    format!("{why}; still running {}", still_running(report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(ok: bool, rules: usize, running: bool) -> ReloadReport {
        ReloadReport {
            ok,
            source: if ok { "file" } else { "kept" }.into(),
            rules,
            at: chrono::Utc::now(),
            message: "rules not reloaded".into(),
            errors: vec![],
            hash: Some("ab".into()),
            running: running.then(|| "cd".into()),
        }
    }

    #[test]
    fn a_reload_reads_as_one_line() {
        assert_eq!(reload_line(&report(true, 4, true)), "reloaded, 4 rules");
        assert_eq!(reload_line(&report(true, 1, true)), "reloaded, 1 rule");
        let errors = crate::rules::RuleSet::parse("{\"rules\": [{\"name\": \"x\", \"mode\": \"confirm\"}]}")
            .unwrap_err();
        let mut bad = report(false, 4, true);
        bad.errors = errors;
        let line = reload_line(&bad);
        assert!(
            line.starts_with("triggers.json:1:") && line.contains("requires a `prompt`"),
            "{line}"
        );
        assert!(
            line.ends_with("; still running the previous 4 rules"),
            "{line}"
        );
        let mut gone = report(false, 2, true);
        gone.hash = None;
        assert_eq!(
            reload_line(&gone),
            "triggers.json is missing; still running the previous 2 rules"
        );
        let at_boot = report(false, 1, false);
        assert!(
            reload_line(&at_boot).ends_with("still running the built-in catch-all notify rule"),
            "{}",
            reload_line(&at_boot)
        );
    }
}
