//! The rules watcher: reloads `triggers.json` when it changes on disk.
//!
//! Editors save by writing a temporary file and renaming it over the old one, which
//! replaces the inode a file watch would follow, so the watcher watches the home
//! *directory* and reacts to any event naming `triggers.json` (create, write, rename,
//! remove). Events are debounced (an editor's save is several events) and the watcher only
//! signals: the reload itself is [`App::reload_rules`], the same one SIGHUP and
//! `rules reload` use, so a deleted or invalid file keeps the live rules.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;

use crate::app::App;

/// How long events are gathered before one reload.
const DEBOUNCE: Duration = Duration::from_millis(150);

/// Watches the home of `app` until shutdown; a no-op for an app without a home.
pub fn spawn(app: &Arc<App>) -> anyhow::Result<()> {
    let Some(home) = &app.home else { return Ok(()) };
    let dir = home.dir().to_path_buf();
    let file_name = home.triggers().file_name().map(|n| n.to_os_string());
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        let Ok(events) = result else { return };
        let touches = events.iter().any(|e| {
            e.paths
                .iter()
                .any(|p| p.file_name().map(|n| n.to_os_string()) == file_name)
        });
        if touches {
            let _ = tx.send(());
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
            }
        }
    });
    tracing::info!(dir = %dir.display(), "watching for triggers.json changes");
    Ok(())
}
