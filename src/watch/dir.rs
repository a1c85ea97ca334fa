//! The directory watch under the rules watcher: which events of a watched directory reach it.
//!
//! A watch reports the name of each file whose content an event may have changed (created,
//! written and closed, renamed in or out, removed), or `None` when events were lost and any
//! file may have changed. Opens, reads and metadata changes are not reported.
//!
//! On Linux the watch is inotify itself, asked for only those events. The journals in the
//! home are written for every message and held open, so their writes make no event at all. notify's watcher asks for every write (`IN_MODIFY`) and every open
//! (`IN_OPEN`), so under load each journal write queued an event in the kernel and woke
//! notify's thread to drop it. A file written in place counts when its writer closes it
//! (`IN_CLOSE_WRITE`), which is also when its content is whole. Elsewhere the watch is
//! notify's recommended watcher, its events filtered by kind ([`can_change`]).

use std::ffi::OsStr;
use std::path::Path;

use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};

/// What a watch calls for each event it reports: a file's name, or `None` for "anything may
/// have changed" (the kernel's event queue overflowed).
pub type OnEvent = Box<dyn Fn(Option<&OsStr>) + Send + Sync + 'static>;

/// A watch of directories (not recursive); stops watching when dropped.
pub trait DirWatch: Send {
    /// Starts watching `dir`.
    fn watch(&mut self, dir: &Path) -> anyhow::Result<()>;
    /// Stops watching `dir` (nothing if it was not watched).
    fn unwatch(&mut self, dir: &Path);
}

/// The watch for this platform: inotify on Linux, notify's recommended watcher elsewhere.
/// On Linux it must be made inside a tokio runtime: it reads its events on a task of `tasks`
/// (aborted when the watch is dropped).
pub fn recommended(
    on_event: OnEvent,
    tasks: &tokio_util::task::TaskTracker,
) -> anyhow::Result<Box<dyn DirWatch>> {
    #[cfg(target_os = "linux")]
    let watch = linux::Inotify::new(on_event, tasks)?;
    #[cfg(not(target_os = "linux"))]
    let watch = {
        let _ = tasks;
        Portable::new(on_event)?
    };
    Ok(Box::new(watch))
}

/// Whether an event of this kind can have changed a file's content: a create, a write (or the
/// close after one), a rename or a remove. Opens, reads and metadata changes cannot.
pub fn can_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) => true,
        // An event the backend could not classify.
        EventKind::Any | EventKind::Other => true,
    }
}

/// notify's recommended watcher (on Linux, notify's own inotify backend, with its fixed mask).
/// Used where there is no inotify; on Linux only by a test that holds it to the same reports of
/// saves, renames, removes and reads as the inotify watch.
#[cfg_attr(target_os = "linux", allow(dead_code))]
pub struct Portable(notify::RecommendedWatcher);

#[cfg_attr(target_os = "linux", allow(dead_code))]
impl Portable {
    pub fn new(on_event: OnEvent) -> anyhow::Result<Portable> {
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            if event.need_rescan() {
                on_event(None);
            } else if can_change(&event.kind) {
                for path in &event.paths {
                    if let Some(name) = path.file_name() {
                        on_event(Some(name));
                    }
                }
            }
        })?;
        Ok(Portable(watcher))
    }
}

impl DirWatch for Portable {
    fn watch(&mut self, dir: &Path) -> anyhow::Result<()> {
        use notify::Watcher;
        Ok(self.0.watch(dir, notify::RecursiveMode::NonRecursive)?)
    }

    fn unwatch(&mut self, dir: &Path) {
        use notify::Watcher;
        let _ = self.0.unwatch(dir);
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};

    use futures::StreamExt;
    use inotify::{EventMask, WatchDescriptor, WatchMask, Watches};

    use super::{DirWatch, OnEvent};

    /// The events that can change a file's content, and only those.
    const MASK: WatchMask = WatchMask::CREATE
        .union(WatchMask::CLOSE_WRITE)
        .union(WatchMask::MOVED_TO)
        .union(WatchMask::MOVED_FROM)
        .union(WatchMask::DELETE);

    /// inotify, its events read on a tokio task (no thread of its own).
    pub struct Inotify {
        watches: Watches,
        dirs: HashMap<PathBuf, WatchDescriptor>,
        reader: tokio::task::JoinHandle<()>,
    }

    impl Inotify {
        pub fn new(
            on_event: OnEvent,
            tasks: &tokio_util::task::TaskTracker,
        ) -> anyhow::Result<Inotify> {
            let inotify = inotify::Inotify::init()?;
            let watches = inotify.watches();
            let mut events = inotify.into_event_stream([0u8; 4096])?;
            let reader = tasks.spawn(async move {
                while let Some(event) = events.next().await {
                    let event = match event {
                        Ok(event) => event,
                        Err(err) => {
                            tracing::warn!(
                                cause = %err,
                                "cannot read the watch of the home any more; rule and config \
                                 edits are picked up by `{}` and SIGHUP only",
                                crate::home::command("rules reload")
                            );
                            break;
                        }
                    };
                    if event.mask.contains(EventMask::Q_OVERFLOW) {
                        on_event(None);
                    } else if let Some(name) = &event.name {
                        on_event(Some(name));
                    }
                }
            });
            Ok(Inotify {
                watches,
                dirs: HashMap::new(),
                reader,
            })
        }
    }

    impl DirWatch for Inotify {
        fn watch(&mut self, dir: &Path) -> anyhow::Result<()> {
            let wd = self.watches.add(dir, MASK)?;
            self.dirs.insert(dir.to_path_buf(), wd);
            Ok(())
        }

        fn unwatch(&mut self, dir: &Path) {
            if let Some(wd) = self.dirs.remove(dir) {
                let _ = self.watches.remove(wd);
            }
        }
    }

    impl Drop for Inotify {
        /// The reader owns the inotify descriptor: ending it closes the descriptor and with it
        /// every watch.
        fn drop(&mut self) {
            self.reader.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, MetadataKind, RemoveKind, RenameMode};
    use std::ffi::OsString;
    use std::io::Write;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn only_events_that_can_change_content_count() {
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
            assert_eq!(can_change(&kind), want, "{kind:?}");
        }
    }

    /// The platform's watch, its reader on a tracker of its own.
    fn native(on: OnEvent) -> anyhow::Result<Box<dyn DirWatch>> {
        recommended(on, &tokio_util::task::TaskTracker::new())
    }

    /// A watch made by `make` on a new directory, and what it reports.
    fn watching(
        make: fn(OnEvent) -> anyhow::Result<Box<dyn DirWatch>>,
    ) -> (
        tempfile::TempDir,
        Box<dyn DirWatch>,
        mpsc::Receiver<Option<OsString>>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = mpsc::channel();
        let mut watch = make(Box::new(move |name| {
            let _ = tx.send(name.map(|n| n.to_os_string()));
        }))
        .unwrap();
        watch.watch(dir.path()).unwrap();
        (dir, watch, rx)
    }

    /// Waits for a report naming `name`, failing after ten seconds; the names reported before it.
    fn wait_for(rx: &mpsc::Receiver<Option<OsString>>, name: &str) -> Vec<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(Some(n)) if n == name => return before,
                Ok(n) => {
                    before.push(n.map_or("(lost)".into(), |n| n.to_string_lossy().into_owned()))
                }
                Err(_) => panic!("no report of {name}"),
            }
        }
    }

    /// What was reported since the last look, markers left out: a marker file is created in
    /// `dir` and every report before the marker's is returned (a watch reports in the order
    /// things happened; a marker makes more than one report, so the next look sees its last).
    fn since_last(dir: &Path, rx: &mpsc::Receiver<Option<OsString>>, marker: &str) -> Vec<String> {
        std::fs::write(dir.join(marker), "").unwrap();
        let before = wait_for(rx, marker);
        before
            .into_iter()
            .filter(|n| !n.starts_with("marker-"))
            .collect()
    }

    /// Saves, renames and removes are reported by name, whichever watch; reads are not. (On a
    /// runtime with workers: the test blocks its own thread while inotify's task reads.)
    #[tokio::test(flavor = "multi_thread")]
    async fn saves_renames_and_removes_are_reported_by_name() {
        for make in [native, |on: OnEvent| {
            Ok(Box::new(Portable::new(on)?) as Box<dyn DirWatch>)
        }] {
            let (dir, _watch, rx) = watching(make);
            let file = dir.path().join("triggers.json");
            std::fs::write(&file, "{}").unwrap();
            wait_for(&rx, "triggers.json");
            since_last(dir.path(), &rx, "marker-1");
            std::fs::read(&file).unwrap();
            assert_eq!(
                since_last(dir.path(), &rx, "marker-2"),
                Vec::<String>::new(),
                "a read"
            );
            // An editor's save: a temporary file renamed over the old one.
            std::fs::write(dir.path().join(".triggers.json.tmp"), "{\"rules\":[]}").unwrap();
            std::fs::rename(dir.path().join(".triggers.json.tmp"), &file).unwrap();
            wait_for(&rx, "triggers.json");
            std::fs::remove_file(&file).unwrap();
            wait_for(&rx, "triggers.json");
        }
    }

    /// A file held open and written to, as the journals are, makes no report on Linux until it
    /// is closed; and a directory no longer watched reports nothing.
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread")]
    async fn writes_to_a_file_held_open_are_reported_once_it_is_closed() {
        let (dir, mut watch, rx) = watching(native);
        let mut journal = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("channels.jsonl"))
            .unwrap();
        wait_for(&rx, "channels.jsonl");
        since_last(dir.path(), &rx, "marker-1");
        for i in 0..100 {
            writeln!(journal, "{{\"seq\":{i}}}").unwrap();
            journal.flush().unwrap();
        }
        journal.sync_data().unwrap();
        assert_eq!(
            since_last(dir.path(), &rx, "marker-2"),
            Vec::<String>::new(),
            "writes while open"
        );
        drop(journal);
        wait_for(&rx, "channels.jsonl");
        // Unwatched, while another directory still is: its markers say what came meanwhile.
        let other = tempfile::tempdir().unwrap();
        watch.watch(other.path()).unwrap();
        watch.unwatch(dir.path());
        since_last(other.path(), &rx, "marker-3");
        std::fs::write(dir.path().join("triggers.json"), "{}").unwrap();
        assert_eq!(
            since_last(other.path(), &rx, "marker-4"),
            Vec::<String>::new(),
            "after unwatch"
        );
    }
}
