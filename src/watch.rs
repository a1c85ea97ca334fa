//! The rules watcher: reloads `triggers.json` when its content changes on disk.
//!
//! Editors save by writing a temporary file and renaming it over the old one, which
//! replaces the inode a file watch would follow, so the watcher watches the home
//! *directory*. Only events that can change the file count: create, write, rename and
//! remove of `triggers.json` itself. Opening or reading it does not (the reload itself
//! reads the file, so reacting to access events reloaded forever), and neither does a
//! change of its metadata. Events are debounced (an editor's save is several events), and
//! the watcher then compares a hash of the file with the one it last saw, so one save is
//! one reload and a `touch` is none. The watcher only signals: the reload itself is
//! [`App::reload_rules`], the same one SIGHUP and `rules reload` use, so a deleted or
//! invalid file keeps the live rules.
//!
//! `switchboard.json` is watched the same way. A change is validated (an invalid file changes
//! nothing and says why), then compared with the settings the daemon started with: what can
//! change live ([`crate::config::LIVE_KEYS`]: `actions.queueCapacity`, `http.rateLimit`,
//! `http.githubSecret`) is applied, and every other changed key is named in one "restart
//! needed for X" log line, kept for `stats`.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify::{Event, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::app::App;

/// How long events are gathered before one reload.
const DEBOUNCE: Duration = Duration::from_millis(150);

/// What the watcher last saw of the file: the hash of its bytes, `None` when it could not be
/// read (missing or unreadable).
type Seen = Option<[u8; 32]>;

/// Watches the home of `app` until shutdown; a no-op for an app without a home.
pub fn spawn(app: &Arc<App>) -> anyhow::Result<()> {
    let Some(home) = &app.home else { return Ok(()) };
    let dir = home.dir().to_path_buf();
    let path = home.triggers();
    let Some(file_name) = path.file_name().map(|n| n.to_os_string()) else {
        return Ok(());
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let (config_tx, mut config_rx) = mpsc::unbounded_channel::<()>();
    let mut seen = fingerprint(&path);
    let watched = path.clone();
    let config_path = home.config_file();
    let config_name = config_path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    let mut config_seen = fingerprint(&config_path);
    // The settings the daemon started with, as the file gave them.
    let boot = home.load_config().unwrap_or_default();
    // The callback runs on the debouncer's own thread, so hashing the file blocks no async worker.
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        let Ok(events) = result else { return };
        if events.iter().any(|e| changes(e, &file_name)) {
            let now = fingerprint(&watched);
            if now != seen {
                seen = now;
                let _ = tx.send(());
            }
        }
        if events.iter().any(|e| changes(e, &config_name)) {
            let now = fingerprint(&config_path);
            if now != config_seen {
                config_seen = now;
                let _ = config_tx.send(());
            }
        }
    })?;
    debouncer.watch(Path::new(&dir), RecursiveMode::NonRecursive)?;
    let app2 = app.clone();
    app.tasks.spawn(async move {
        // The debouncer stops watching when dropped: it lives as long as this task.
        let _debouncer = debouncer;
        loop {
            tokio::select! {
                _ = app2.shutdown.cancelled() => break,
                got = rx.recv() => {
                    if got.is_none() { break }
                    while rx.try_recv().is_ok() {}
                    app2.reload_rules().await;
                }
                got = config_rx.recv() => {
                    if got.is_none() { break }
                    while config_rx.try_recv().is_ok() {}
                    reload_config(&app2, &boot);
                }
            }
        }
    });
    tracing::info!(dir = %dir.display(), "watching for triggers.json and switchboard.json changes");
    Ok(())
}

/// Reads `switchboard.json` again: applies what can change live, names what needs a restart.
fn reload_config(app: &App, boot: &crate::config::Config) {
    let Some(home) = &app.home else { return };
    let report = match home.load_config() {
        Ok(new) => {
            let plan = crate::config::plan_reload(boot, &new);
            let capacity = new.actions.queue_capacity.max(1);
            if app.lifecycle.capacity() != capacity {
                app.lifecycle.set_capacity(capacity);
            }
            // `SWITCHBOARD_GITHUB_SECRET` wins over the file, as at start.
            let secret_from_env =
                std::env::var(crate::config::GITHUB_SECRET_ENV).is_ok_and(|v| !v.trim().is_empty());
            app.http_settings.update(|http| {
                http.rate_limit = new.http.rate_limit.clone();
                if !secret_from_env {
                    http.github_secret = new.http.github_secret.clone();
                }
            });
            if plan.restart_needed.is_empty() {
                tracing::info!("{}", plan.message);
            } else {
                tracing::warn!("{}", plan.message);
            }
            plan
        }
        Err(e) => not_reloaded(format!("{e:#}")),
    };
    *app.config_reload.lock().unwrap() = Some(report);
}

/// The report (and error log line) of a `switchboard.json` that was not applied, for `why`.
fn not_reloaded(why: String) -> crate::config::ConfigReload {
    let message = format!("switchboard.json not reloaded: {why}; the running settings stay");
    tracing::error!("{message}");
    crate::config::ConfigReload {
        at: crate::message::format_timestamp(chrono::Utc::now()),
        ok: false,
        message,
        ..Default::default()
    }
}

/// Whether `event` can have changed the file named `file_name`: a create, a write (or the close
/// after one), a rename or a remove naming it. Opens, reads and metadata changes cannot.
fn changes(event: &Event, file_name: &OsString) -> bool {
    let kind = match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) => true,
        // An overflowed queue (rescan) or an event the backend could not classify.
        EventKind::Any | EventKind::Other => true,
    };
    kind && (event.need_rescan()
        || event
            .paths
            .iter()
            .any(|p| p.file_name() == Some(file_name.as_os_str())))
}

/// The hash of the file's bytes, or `None` when it cannot be read.
fn fingerprint(path: &Path) -> Seen {
    std::fs::read(path)
        .ok()
        .map(|bytes| Sha256::digest(&bytes).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, MetadataKind, RemoveKind, RenameMode};
    use std::path::PathBuf;

    fn event(kind: EventKind, path: &str) -> Event {
        Event::new(kind).add_path(PathBuf::from(path))
    }

    #[test]
    fn only_changes_to_the_rules_file_count() {
        let name = OsString::from("triggers.json");
        let table = [
            (EventKind::Create(CreateKind::File), true),
            (EventKind::Modify(ModifyKind::Data(DataChange::Any)), true),
            (EventKind::Modify(ModifyKind::Name(RenameMode::To)), true),
            (EventKind::Remove(RemoveKind::File), true),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                true,
            ),
            (EventKind::Access(AccessKind::Open(AccessMode::Any)), false),
            (EventKind::Access(AccessKind::Read), false),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Read)),
                false,
            ),
            (
                EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
                false,
            ),
        ];
        for (kind, want) in table {
            assert_eq!(
                changes(&event(kind, "/h/triggers.json"), &name),
                want,
                "{kind:?}"
            );
            assert!(
                !changes(&event(kind, "/h/state.json"), &name),
                "{kind:?} on another file"
            );
        }
    }

    #[test]
    fn fingerprint_follows_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("triggers.json");
        assert_eq!(fingerprint(&path), None);
        std::fs::write(&path, "{}").unwrap();
        let first = fingerprint(&path);
        assert!(first.is_some());
        std::fs::write(&path, "{}").unwrap();
        assert_eq!(fingerprint(&path), first, "same bytes, same fingerprint");
        std::fs::write(&path, r#"{"rules":[]}"#).unwrap();
        assert_ne!(fingerprint(&path), first);
    }
}
