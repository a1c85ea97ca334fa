//! `status`: `switchboard status` — the daemon's identity, how it was started, its stats, and
//! whether the rules on disk are the rules running ([`RulesOnDisk`]).

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::reload::{reload_line, rules_count};
use super::stats::Stats;
use crate::app::ReloadReport;
use crate::control::{ApiError, Ctx, DaemonListeners, Op};

/// The daemon's identity, listeners and stats.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GetStatus {}

/// What `switchboard status` shows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    /// The daemon's pid.
    pub pid: u32,
    /// Its version.
    pub version: String,
    /// The control protocol it speaks.
    #[serde(default)]
    pub protocol: u32,
    /// Its home.
    pub home: String,
    /// When it started (RFC 3339).
    pub started: String,
    /// Its log file, when it logs to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// The listeners asked for.
    pub asked: DaemonListeners,
    /// The rules running, and whether they are the file on disk (absent from an older daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<RulesOnDisk>,
    /// The stats, which include the listeners' state.
    pub stats: Stats,
}

/// Whether the daemon runs exactly the `triggers.json` on disk, and when not, why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesOnDisk {
    /// True when the rules running are the file on disk (or the built-in rule, with no file).
    pub in_sync: bool,
    /// The rules running.
    pub running: usize,
    /// `file`, or `builtin` (the catch-all notify rule).
    pub from: String,
    /// When the file on disk was last written (RFC 3339); absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved: Option<String>,
    /// The first error of the file on disk, located (`triggers.json:3:12: …`), when it is
    /// invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How many errors the file on disk has.
    #[serde(default)]
    pub errors: usize,
    /// One line for people: what runs, and when it is not the file, why.
    pub line: String,
}

impl Op for GetStatus {
    type Reply = Status;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Status, ApiError> {
        let daemon = cx.parts().daemon_info();
        let stats = Stats::of(cx);
        let home = cx.home();
        let rules = match (home, &stats.core.last_reload) {
            (Some(home), Some(last)) => {
                let (path, last) = (home.triggers(), last.clone());
                tokio::task::spawn_blocking(move || rules_on_disk(&path, &last))
                    .await
                    .ok()
            }
            _ => None,
        };
        Ok(Status {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: crate::control::PROTOCOL,
            home: home
                .map(|h| h.dir().display().to_string())
                .unwrap_or_default(),
            started: crate::message::format_timestamp(daemon.started),
            log: daemon.log.clone(),
            asked: daemon.listeners.clone(),
            rules,
            stats,
        })
    }
}

/// Compares the file at `path` with what the last (re)load says runs. A file that differs and
/// was not read yet (a save the watcher has not reloaded) is checked here, so that its first
/// error shows at once.
pub fn rules_on_disk(path: &Path, last: &ReloadReport) -> RulesOnDisk {
    let bytes = std::fs::read(path).ok();
    let disk = bytes.as_deref().map(crate::rules::file_hash);
    let saved = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .map(|t| crate::message::format_timestamp(DateTime::<Utc>::from(t)));
    let from = if last.running.is_some() { "file" } else { "builtin" };
    let mut view = RulesOnDisk {
        in_sync: disk == last.running,
        running: last.rules,
        from: from.into(),
        saved,
        error: None,
        errors: 0,
        line: String::new(),
    };
    if view.in_sync {
        view.line = match last.running {
            Some(_) => format!("{} from triggers.json", rules_count(last.rules)),
            None => "the built-in catch-all notify rule (no triggers.json)".into(),
        };
        return view;
    }
    // Not what runs: the last reload's verdict when it read this very file, else the file's own.
    let report = if disk.is_some() && last.hash == disk {
        last.clone()
    } else {
        let text = bytes.map(|b| String::from_utf8_lossy(&b).into_owned());
        let errors = match text.as_deref().map(crate::rules::RuleSet::parse) {
            Some(Err(errors)) => errors,
            _ => Vec::new(),
        };
        ReloadReport {
            ok: false,
            hash: disk.clone(),
            errors,
            message: "triggers.json was saved and is not loaded yet".into(),
            ..last.clone()
        }
    };
    view.errors = report.errors.len();
    view.error = report.errors.first().map(|e| e.render("triggers.json"));
    view.line = format!(
        "the rules on disk are not the rules running: {}",
        reload_line(&report)
    );
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(path: &Path) -> ReloadReport {
        let bytes = std::fs::read(path).ok();
        let hash = bytes.as_deref().map(crate::rules::file_hash);
        ReloadReport {
            ok: true,
            source: "file".into(),
            rules: 1,
            at: Utc::now(),
            message: "1 rules loaded".into(),
            errors: vec![],
            hash: hash.clone(),
            running: hash,
        }
    }

    #[test]
    fn the_file_on_disk_is_compared_with_the_rules_running() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("triggers.json");
        std::fs::write(&path, r#"{"rules": [{"name": "a"}]}"#).unwrap();
        let last = loaded(&path);
        let view = rules_on_disk(&path, &last);
        assert!(view.in_sync, "{view:?}");
        assert_eq!(view.line, "1 rule from triggers.json");
        // A broken save, not reloaded yet: its first error at once.
        std::fs::write(&path, "{\"rules\": [{\"name\": \"a\", \"mode\": \"confirm\"}]}").unwrap();
        let view = rules_on_disk(&path, &last);
        assert!(!view.in_sync);
        assert_eq!(view.errors, 1);
        let error = view.error.clone().unwrap();
        assert!(error.starts_with("triggers.json:1:"), "{error}");
        assert!(
            view.line.starts_with("the rules on disk are not the rules running: triggers.json:1:")
                && view.line.ends_with("; still running the previous 1 rule"),
            "{}",
            view.line
        );
        // A valid save the watcher has not reloaded yet.
        std::fs::write(&path, r#"{"rules": [{"name": "b"}]}"#).unwrap();
        let view = rules_on_disk(&path, &last);
        assert!(!view.in_sync && view.error.is_none(), "{view:?}");
        assert!(view.line.contains("not loaded yet"), "{}", view.line);
        // Deleted: the previous rules still run.
        std::fs::remove_file(&path).unwrap();
        let view = rules_on_disk(&path, &last);
        assert!(!view.in_sync);
        assert!(view.line.ends_with("triggers.json is missing; still running the previous 1 rule"), "{}", view.line);
    }
}
