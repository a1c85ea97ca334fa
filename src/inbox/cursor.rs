//! Consumer cursors and the other small durable state in `state.json`.
//!
//! Every consumer (an MCP client, `watch`, a CLI) has its own cursor: the last
//! seq it has seen. Unread = committed messages after it; one consumer reading
//! never consumes for another. A consumer with no cursor yet starts at the
//! seq the inbox had at boot, because replayed messages count as read.
//!
//! `state.json` also keeps the pause flag and the highest seq the engine has
//! evaluated. Every write replaces the file atomically (tmp + fsync + rename);
//! the evaluation mark, which moves with every message, is saved at most once
//! a second and at [`StateStore::flush`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::write_atomic;
use crate::message::Seq;

/// The longest the evaluation mark goes unsaved.
const EVALUATED_SAVE_INTERVAL: Duration = Duration::from_secs(1);

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
}

struct Inner {
    path: Option<PathBuf>,
    state: State,
    boot_seq: Seq,
    saved_at: Instant,
    dirty: bool,
}

/// A handle on `state.json`.
#[derive(Clone)]
pub struct StateStore {
    inner: Arc<Mutex<Inner>>,
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
                saved_at: Instant::now(),
                dirty: false,
            })),
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

    /// Moves a consumer's cursor (never backwards) and persists it.
    pub fn set_cursor(&self, consumer: &str, seq: Seq) {
        let mut inner = self.inner.lock().unwrap();
        if inner.state.cursors.get(consumer).is_some_and(|&c| c >= seq) {
            return;
        }
        inner.state.cursors.insert(consumer.to_string(), seq);
        save(&mut inner);
    }

    /// Whether rule evaluation is paused.
    pub fn paused(&self) -> bool {
        self.inner.lock().unwrap().state.paused
    }

    /// Sets and persists the pause flag.
    pub fn set_paused(&self, paused: bool) {
        let mut inner = self.inner.lock().unwrap();
        inner.state.paused = paused;
        save(&mut inner);
    }

    /// Highest seq the engine evaluated.
    pub fn evaluated(&self) -> Seq {
        self.inner.lock().unwrap().state.evaluated
    }

    /// Records evaluation progress; saved at most once a second (and at `flush`).
    pub fn set_evaluated(&self, seq: Seq) {
        let mut inner = self.inner.lock().unwrap();
        if seq <= inner.state.evaluated {
            return;
        }
        inner.state.evaluated = seq;
        inner.dirty = true;
        if inner.saved_at.elapsed() >= EVALUATED_SAVE_INTERVAL {
            save(&mut inner);
        }
    }

    /// Saves anything not yet saved.
    pub fn flush(&self) {
        let mut inner = self.inner.lock().unwrap();
        if inner.dirty {
            save(&mut inner);
        }
    }

    /// A copy of the whole state.
    pub fn snapshot(&self) -> State {
        self.inner.lock().unwrap().state.clone()
    }
}

fn save(inner: &mut Inner) {
    inner.saved_at = Instant::now();
    inner.dirty = false;
    let Some(path) = &inner.path else {
        return;
    };
    let bytes = serde_json::to_vec_pretty(&inner.state).expect("state always serializes");
    if let Err(err) = write_atomic(path, &bytes) {
        inner.dirty = true;
        tracing::warn!(path = %path.display(), cause = %err, "cannot save state");
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

        let again = StateStore::open(&path).unwrap();
        assert_eq!(again.cursor("copilot"), Some(12));
        assert_eq!(again.cursor("claude-code"), Some(11));
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
    fn a_corrupt_state_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "{nope").unwrap();
        let err = StateStore::open(&path).err().unwrap().to_string();
        assert!(err.contains("state.json:1:2: not valid state"), "{err}");
    }
}
