//! `rules check` and `rules reload` on a running daemon: they return once the daemon runs
//! exactly the `triggers.json` on disk, and say so (`running: 1 rule from triggers.json, saved
//! 0.2 s ago`), so that the next command (a `send` pasted on the next line) meets the new
//! rules, not the ones of a moment ago.
//!
//! The daemon reports the hash of the file each (re)load read and of the file whose rules run
//! ([`crate::app::ReloadReport`]); [`sync`] asks it to read the file unless it last read
//! exactly the bytes on disk, and reads again when a save came in between.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::app::ReloadReport;
use crate::backend::Client;
use crate::control::ops::Reload;
use crate::control::ops::reload::{reload_line, rules_count, still_running};

/// How many times [`sync`] reads again a file that changed while the daemon read it.
const TRIES: usize = 5;

/// The hash of the file at `path`, `None` when it cannot be read.
fn hash_of(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|bytes| crate::rules::file_hash(&bytes))
}

/// Has the daemon read the file at `path` (always when `force`, else unless it last read
/// these very bytes) until the file it read is the file on disk. The daemon's report.
pub async fn sync(client: &mut Client, path: &Path, force: bool) -> anyhow::Result<ReloadReport> {
    let mut force = force;
    for _ in 0..TRIES {
        let disk = hash_of(path);
        let unless = if force { None } else { disk.clone() };
        let report = client.call(Reload { unless }).await?;
        force = false;
        if report.hash == disk {
            return Ok(report);
        }
        // The daemon did not read it (a file another user could change, one it cannot read):
        // its report says why, and what runs instead.
        if !report.ok && report.hash.is_none() && disk.is_some() {
            return Ok(report);
        }
        if report.hash.is_none() && disk.is_some() && report.ok {
            anyhow::bail!(
                "the daemon does not say which file it runs (it is an older build); run `{}`, \
                 then `{}`",
                crate::home::command("stop"),
                crate::home::command("start")
            );
        }
        // Saved again while the daemon read it: read the new bytes.
    }
    anyhow::bail!(
        "{} kept changing while the daemon read it; run `{}` again once it is saved",
        path.display(),
        crate::home::command("rules check")
    )
}

/// `running: 1 rule from triggers.json, saved 0.2 s ago`, or what runs instead of the file
/// (`not running it: the daemon keeps running the previous 4 rules`).
pub fn running_line(report: &ReloadReport, path: &Path) -> String {
    if report.ok && report.running.is_some() && report.running == report.hash {
        let saved = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .map(|ago| format!(", saved {} ago", ago_text(ago)))
            .unwrap_or_default();
        return format!(
            "running: {} from triggers.json{saved}",
            rules_count(report.rules)
        );
    }
    // The errors of an invalid file are printed above this line: what runs instead.
    if !report.errors.is_empty() {
        return format!(
            "not running it: the daemon keeps running {}",
            still_running(report)
        );
    }
    format!("not running it: {}", reload_line(report))
}

/// `0.2 s` below a minute, `3m 12s` above.
fn ago_text(ago: Duration) -> String {
    if ago < Duration::from_secs(60) {
        format!("{:.1} s", ago.as_secs_f64())
    } else {
        humantime::format_duration(Duration::from_secs(ago.as_secs())).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn how_long_ago_reads() {
        assert_eq!(ago_text(Duration::from_millis(230)), "0.2 s");
        assert_eq!(ago_text(Duration::from_secs(192)), "3m 12s");
    }
}
