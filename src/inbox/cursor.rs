//! Consumer cursors and the other small durable state in `state.json`.
//!
//! CONTRACT: every consumer (an MCP client, `watch`, a CLI) has its own cursor
//! (last seq seen); unread = messages after it; one consumer reading never
//! consumes for another. `state.json` also keeps the pause flag and the last
//! seq the engine evaluated. Writes are atomic (tmp + rename).
//!
//! STUB: memory only.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::message::Seq;

/// The content of `state.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct State {
    /// Last seq seen, per consumer.
    pub cursors: BTreeMap<String, Seq>,
    /// Rule evaluation paused.
    pub paused: bool,
    /// Highest seq the engine has evaluated.
    pub evaluated: Seq,
}

/// A handle on `state.json`.
#[derive(Clone, Default)]
pub struct StateStore {
    state: Arc<Mutex<State>>,
}

impl StateStore {
    /// A store that is never written (tests, `rules test`).
    pub fn memory() -> StateStore {
        StateStore::default()
    }

    /// Opens `path`, reading it if present.
    pub fn open(_path: &std::path::Path) -> std::io::Result<StateStore> {
        Ok(StateStore::default())
    }

    /// A consumer's cursor, if it has one.
    pub fn cursor(&self, consumer: &str) -> Option<Seq> {
        self.state.lock().unwrap().cursors.get(consumer).copied()
    }

    /// Moves a consumer's cursor (never backwards) and persists it.
    pub fn set_cursor(&self, consumer: &str, seq: Seq) {
        let mut s = self.state.lock().unwrap();
        let c = s.cursors.entry(consumer.to_string()).or_insert(0);
        *c = (*c).max(seq);
    }

    /// Whether rule evaluation is paused.
    pub fn paused(&self) -> bool {
        self.state.lock().unwrap().paused
    }

    /// Sets and persists the pause flag.
    pub fn set_paused(&self, paused: bool) {
        self.state.lock().unwrap().paused = paused;
    }

    /// Highest seq the engine evaluated.
    pub fn evaluated(&self) -> Seq {
        self.state.lock().unwrap().evaluated
    }

    /// Records evaluation progress (persisted lazily; see the module docs).
    pub fn set_evaluated(&self, seq: Seq) {
        let mut s = self.state.lock().unwrap();
        s.evaluated = s.evaluated.max(seq);
    }

    /// A copy of the whole state.
    pub fn snapshot(&self) -> State {
        self.state.lock().unwrap().clone()
    }
}
