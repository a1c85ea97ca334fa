//! Consumer cursors and the other small durable state in `state.json`.
//!
//! Every consumer (an MCP client, `watch`, a CLI) has its own cursor: the last
//! seq it has seen. Unread = committed messages after it; one consumer reading
//! never consumes for another. A consumer with no cursor yet starts at the
//! seq the inbox had at boot, because replayed messages count as read.
//!
//! `state.json` also keeps the pause flag and the highest seq the engine has
//! evaluated. Every write replaces the file atomically (tmp + fsync + rename).
//! The pause flag is saved at once. Cursors and the evaluation mark move with
//! every read and every message, so they are saved at most once a second (by
//! [`StateStore::run_flusher`]) and at [`StateStore::flush`]: the replace costs
//! two fsyncs and a rename, which must not sit on the path of a waiting
//! consumer; nor does it hold the state's lock, which a save takes only to copy
//! the state. A crash can lose the last second of cursor moves; those messages
//! then count as unread again, never the other way round.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::home::write_atomic;
use crate::message::Seq;

/// The longest a cursor move or the evaluation mark goes unsaved.
const SAVE_INTERVAL: Duration = Duration::from_secs(1);

/// The content of `state.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct State {
    /// Last seq seen, per consumer.
    pub cursors: BTreeMap<String, Seq>,
    /// Rule evaluation paused.
    pub paused: bool,
    /// Highest seq the engine evaluated.
    pub evaluated: Seq,
    /// The engine's rate-limit and dedup memory, opaque here (the engine defines it); saved
    /// like the cursors. Absent in files from before it was kept.
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub limits: serde_json::Value,
}

struct Inner {
    path: Option<PathBuf>,
    state: State,
    boot_seq: Seq,
    dirty: bool,
    /// The last save failed; logged once, then again when a save succeeds.
    failing: bool,
}

/// A handle on `state.json`.
#[derive(Clone)]
pub struct StateStore {
    inner: Arc<Mutex<Inner>>,
    /// Held for a whole save, so saves land in the order their copies were taken. The
    /// state's own lock is held only to take the copy: the replace never holds up a
    /// cursor move, the dispatcher's mark or a read.
    saving: Arc<Mutex<()>>,
}

impl Default for StateStore {
    fn default() -> Self {
        StateStore::memory()
    }
}

impl StateStore {
    /// A store that is never written (tests, `rules test`).
    pub fn memory() -> StateStore {
        StateStore::with(None, State::default())
    }

    fn with(path: Option<PathBuf>, state: State) -> StateStore {
        StateStore {
            inner: Arc::new(Mutex::new(Inner {
                path,
                state,
                boot_seq: 0,
                dirty: false,
                failing: false,
            })),
            saving: Arc::new(Mutex::new(())),
        }
    }

    /// Opens `path`, reading it if present. A file that is not valid state is
    /// an error naming it (it is never silently replaced).
    pub fn open(path: &Path) -> std::io::Result<StateStore> {
        let state = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{}:{}:{}: not valid state: {e}",
                        path.display(),
                        e.line(),
                        e.column()
                    ),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(e),
        };
        Ok(StateStore::with(Some(path.to_path_buf()), state))
    }

    /// Sets the seq present at boot: where consumers without a cursor start.
    pub fn set_boot_seq(&self, seq: Seq) {
        self.inner.lock().unwrap().boot_seq = seq;
    }

    /// A consumer's cursor, if it has one.
    pub fn cursor(&self, consumer: &str) -> Option<Seq> {
        self.inner
            .lock()
            .unwrap()
            .state
            .cursors
            .get(consumer)
            .copied()
    }

    /// A consumer's cursor, or the boot seq for a consumer seen for the first time.
    pub fn cursor_or_boot(&self, consumer: &str) -> Seq {
        let inner = self.inner.lock().unwrap();
        inner
            .state
            .cursors
            .get(consumer)
            .copied()
            .unwrap_or(inner.boot_seq)
    }

    /// Committed messages after the consumer's cursor, given the last committed seq.
    pub fn unread(&self, consumer: &str, last_seq: Seq) -> u64 {
        last_seq.saturating_sub(self.cursor_or_boot(consumer))
    }

    /// Every consumer's cursor.
    pub fn cursors(&self) -> Vec<(String, Seq)> {
        let inner = self.inner.lock().unwrap();
        inner
            .state
            .cursors
            .iter()
            .map(|(name, &seq)| (name.clone(), seq))
            .collect()
    }

    /// Forgets a consumer's cursor (a session's own consumer, when the session ends).
    pub fn remove_cursor(&self, consumer: &str) {
        let mut inner = self.inner.lock().unwrap();
        if inner.state.cursors.remove(consumer).is_some() {
            inner.dirty = true;
        }
    }

    /// Moves a consumer's cursor (never backwards); saved within [`SAVE_INTERVAL`].
    pub fn set_cursor(&self, consumer: &str, seq: Seq) {
        let mut inner = self.inner.lock().unwrap();
        if inner.state.cursors.get(consumer).is_some_and(|&c| c >= seq) {
            return;
        }
        inner.state.cursors.insert(consumer.to_string(), seq);
        inner.dirty = true;
    }

    /// Whether rule evaluation is paused.
    pub fn paused(&self) -> bool {
        self.inner.lock().unwrap().state.paused
    }

    /// Sets and persists the pause flag.
    pub fn set_paused(&self, paused: bool) {
        self.inner.lock().unwrap().state.paused = paused;
        self.save();
    }

    /// Highest seq the engine evaluated.
    pub fn evaluated(&self) -> Seq {
        self.inner.lock().unwrap().state.evaluated
    }

    /// Records evaluation progress; saved within [`SAVE_INTERVAL`].
    pub fn set_evaluated(&self, seq: Seq) {
        let mut inner = self.inner.lock().unwrap();
        if seq <= inner.state.evaluated {
            return;
        }
        inner.state.evaluated = seq;
        inner.dirty = true;
    }

    /// Replaces the engine's memory; saved within [`SAVE_INTERVAL`].
    pub fn set_limits(&self, limits: serde_json::Value) {
        let mut inner = self.inner.lock().unwrap();
        if inner.state.limits != limits {
            inner.state.limits = limits;
            inner.dirty = true;
        }
    }

    /// Saves anything not yet saved.
    pub fn flush(&self) {
        if self.inner.lock().unwrap().dirty {
            self.save();
        }
    }

    /// Replaces `state.json` with the state as it is now.
    fn save(&self) {
        let _saving = self.saving.lock().unwrap();
        let (path, bytes) = {
            let mut inner = self.inner.lock().unwrap();
            inner.dirty = false;
            let Some(path) = inner.path.clone() else {
                return;
            };
            let bytes = serde_json::to_vec_pretty(&inner.state).expect("state always serializes");
            (path, bytes)
        };
        let result = write_atomic(&path, &bytes);
        let mut inner = self.inner.lock().unwrap();
        match result {
            Ok(()) if inner.failing => {
                inner.failing = false;
                tracing::info!(path = %path.display(), "state saved again");
            }
            Ok(()) => {}
            Err(err) => {
                inner.dirty = true;
                // The flusher retries every second: one line per outage, not one per retry.
                if !std::mem::replace(&mut inner.failing, true) {
                    tracing::warn!(
                        path = %path.display(),
                        cause = %err,
                        "cannot save state; retrying every second, logged again on recovery"
                    );
                }
            }
        }
    }

    /// Saves what is dirty once a second, off the async threads, until `shutdown`; the
    /// server's stop calls [`StateStore::flush`] for the rest.
    pub async fn run_flusher(&self, shutdown: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(SAVE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {
                    if !self.inner.lock().unwrap().dirty {
                        continue;
                    }
                    let store = self.clone();
                    let _ = tokio::task::spawn_blocking(move || store.flush()).await;
                }
            }
        }
    }

    /// A copy of the whole state.
    pub fn snapshot(&self) -> State {
        self.inner.lock().unwrap().state.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_per_consumer_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let store = StateStore::open(&path).unwrap();
        store.set_boot_seq(10);
        assert_eq!(
            store.unread("copilot", 12),
            2,
            "a new consumer starts at the boot seq"
        );
        store.set_cursor("copilot", 12);
        store.set_cursor("claude-code", 11);
        store.set_cursor("copilot", 5);
        assert_eq!(
            store.cursor("copilot"),
            Some(12),
            "cursors never move backwards"
        );
        assert_eq!(store.unread("claude-code", 12), 1);

        store.flush();
        let again = StateStore::open(&path).unwrap();
        assert_eq!(again.cursor("copilot"), Some(12));
        assert_eq!(again.cursor("claude-code"), Some(11));
    }

    #[tokio::test]
    async fn the_flusher_saves_cursor_moves_within_a_second_or_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let store = StateStore::open(&path).unwrap();
        let token = tokio_util::sync::CancellationToken::new();
        let flusher = tokio::spawn({
            let (store, token) = (store.clone(), token.clone());
            async move { store.run_flusher(token).await }
        });
        store.set_cursor("copilot", 3);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while StateStore::open(&path).unwrap().cursor("copilot") != Some(3) {
            assert!(std::time::Instant::now() < deadline, "cursor never saved");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        token.cancel();
        flusher.await.unwrap();
    }

    #[test]
    fn pause_is_saved_at_once_and_evaluated_at_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let store = StateStore::open(&path).unwrap();
        store.set_paused(true);
        store.set_evaluated(7);
        store.flush();
        let again = StateStore::open(&path).unwrap();
        assert!(again.paused());
        assert_eq!(again.evaluated(), 7);
    }

    #[test]
    fn limits_are_saved_and_an_old_file_without_them_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(
            &path,
            r#"{"cursors": {"copilot": 4}, "paused": false, "evaluated": 9}"#,
        )
        .unwrap();
        let store = StateStore::open(&path).unwrap();
        assert_eq!(store.cursor("copilot"), Some(4));
        assert!(store.snapshot().limits.is_null());
        let limits = serde_json::json!({"crit": {"fires": ["2026-11-22T10:00:00Z"]}});
        store.set_limits(limits.clone());
        store.flush();
        let again = StateStore::open(&path).unwrap();
        assert_eq!(again.snapshot().limits, limits);
        assert_eq!(again.evaluated(), 9);
    }

    #[test]
    fn a_corrupt_state_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "{nope").unwrap();
        let err = StateStore::open(&path).err().unwrap().to_string();
        assert!(err.contains("state.json:1:2: not valid state"), "{err}");
    }

    /// Log lines written while `f` runs on this thread.
    fn logs(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            // Another test's thread may have met a callsite first, with no subscriber of its
            // own, while this one was being set: tracing then caches "never" for it. Ask every
            // callsite again, now that this subscriber is in place.
            tracing::callsite::rebuild_interest_cache();
            f()
        });
        let bytes = sink.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_save_in_progress_holds_up_no_cursor_move() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let store = StateStore::open(&path).unwrap();
        // A FIFO where the save writes its temporary file: the save blocks opening it until
        // something reads, as long as a slow disk's fsync would.
        let tmp = dir.path().join("state.json.tmp");
        let made = std::process::Command::new("mkfifo")
            .arg(&tmp)
            .status()
            .unwrap();
        assert!(made.success());
        store.set_cursor("copilot", 1);
        let saving = std::thread::spawn({
            let store = store.clone();
            move || store.flush()
        });
        // The save has its copy (the state is clean again) and is stuck in the write; the
        // state's lock is free meanwhile.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(inner) = store.inner.try_lock()
                && !inner.dirty
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the state's lock is held while the file is written"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn({
            let store = store.clone();
            move || {
                store.set_cursor("copilot", 2);
                let _ = tx.send(store.cursor("copilot"));
            }
        });
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(Some(2)),
            "a cursor move waited for the save"
        );
        // Let the stuck save go (it fails on the FIFO), then save for real.
        let mut fifo = std::fs::File::open(&tmp).unwrap();
        std::io::Read::read_to_end(&mut fifo, &mut Vec::new()).unwrap();
        saving.join().unwrap();
        std::fs::remove_file(&tmp).unwrap();
        store.flush();
        assert_eq!(StateStore::open(&path).unwrap().cursor("copilot"), Some(2));
    }

    #[test]
    fn a_failing_save_is_logged_once_per_outage_and_again_on_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let store = StateStore::open(&path).unwrap();
        // A directory where the file should be: every save fails (also as root).
        std::fs::create_dir(&path).unwrap();
        let text = logs(|| {
            for seq in 1..=5 {
                store.set_cursor("copilot", seq);
                store.flush();
            }
        });
        assert_eq!(text.matches("cannot save state").count(), 1, "{text}");
        assert!(
            store.inner.lock().unwrap().dirty,
            "the failed save is retried"
        );

        std::fs::remove_dir(&path).unwrap();
        let text = logs(|| {
            store.flush();
            store.set_cursor("copilot", 6);
            store.flush();
        });
        assert_eq!(text.matches("state saved again").count(), 1, "{text}");
        assert!(!text.contains("cannot save state"), "{text}");
        assert_eq!(StateStore::open(&path).unwrap().cursor("copilot"), Some(6));
    }
}
