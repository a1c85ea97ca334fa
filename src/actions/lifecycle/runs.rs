//! Exec runs: auto work of `"delivery": "exec"` rules waiting for the exec runner, oldest
//! first, and the runs in flight. A session's wait never sees this work.

use std::collections::{HashMap, VecDeque};

use super::Item;
use crate::actions::ActionId;

/// Exec work and runs.
#[derive(Default)]
pub(super) struct Runs {
    queue: VecDeque<Item>,
    running: HashMap<ActionId, Item>,
}

impl Runs {
    /// Work waiting for the runner.
    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Runs in flight.
    pub(super) fn running(&self) -> usize {
        self.running.len()
    }

    /// Queues work for the runner.
    pub(super) fn push(&mut self, item: Item) {
        self.queue.push_back(item);
    }

    /// Starts the oldest queued work: it is running from now on.
    pub(super) fn start_next(&mut self) -> Option<Item> {
        let item = self.queue.pop_front()?;
        self.running.insert(item.action_id, item.clone());
        Some(item)
    }

    /// Ends run `id`; `None` when it is not running.
    pub(super) fn finish(&mut self, id: ActionId) -> Option<Item> {
        self.running.remove(&id)
    }
}
