//! The nudge queue: every nudge (notify action) the lifecycle holds, in id order, and whether
//! any consumer has seen it yet.
//!
//! One queue serves every consumer: each reads it from its own position (the newest nudge id
//! it has seen, kept in [`super::sessions`]), so each sees each nudge once. At most `capacity`
//! undelivered nudges are kept; a new nudge past that evicts the *oldest* undelivered one (the
//! newest alert matters most). Delivered nudges stay visible, at most `capacity` of them, for
//! consumers that have not seen them yet.

use std::collections::VecDeque;

use super::Item;
use crate::actions::ActionId;
use crate::message::Seq;

struct Nudge {
    item: Item,
    /// Some consumer has seen it.
    delivered: bool,
}

/// The nudges, oldest first.
#[derive(Default)]
pub(super) struct Nudges {
    queue: VecDeque<Nudge>,
    /// How many in `queue` no consumer has seen.
    undelivered: usize,
    /// The highest nudge id issued so far: where a new session's nudges start.
    last: ActionId,
}

impl Nudges {
    /// Nudges no consumer has seen yet.
    pub(super) fn undelivered(&self) -> usize {
        self.undelivered
    }

    /// The highest nudge id issued so far.
    pub(super) fn last(&self) -> ActionId {
        self.last
    }

    /// Queues a new (or restored) nudge, newer than every nudge queued so far.
    pub(super) fn push(&mut self, item: Item) {
        self.last = self.last.max(item.action_id);
        self.undelivered += 1;
        self.queue.push_back(Nudge {
            item,
            delivered: false,
        });
    }

    /// Takes the oldest nudge no consumer has seen out of the queue (to make room).
    pub(super) fn evict_oldest_undelivered(&mut self) -> Option<Item> {
        let pos = self.queue.iter().position(|n| !n.delivered)?;
        self.undelivered -= 1;
        self.queue.remove(pos).map(|n| n.item)
    }

    /// Delivered nudges stay visible to other consumers, but only `cap` of them.
    pub(super) fn trim_delivered(&mut self, cap: usize) {
        let delivered = self.queue.len() - self.undelivered;
        if delivered > cap {
            let mut excess = delivered - cap;
            self.queue.retain(|n| {
                if excess > 0 && n.delivered {
                    excess -= 1;
                    false
                } else {
                    true
                }
            });
        }
    }

    /// Where a new consumer's nudges start: after the nudges of messages up to `cursor` (its
    /// saved message cursor), or after every nudge so far when it has none.
    pub(super) fn start_after(&self, cursor: Option<Seq>) -> ActionId {
        match cursor {
            Some(seq) => self
                .queue
                .iter()
                .take_while(|n| n.item.message.seq <= seq)
                .map(|n| n.item.action_id)
                .last()
                .unwrap_or_else(|| {
                    self.queue
                        .front()
                        .map_or(self.last, |n| n.item.action_id - 1)
                }),
            None => self.last,
        }
    }

    /// The ids of the nudges after position `after`, oldest first.
    pub(super) fn ids_after(&self, after: ActionId) -> impl Iterator<Item = ActionId> + '_ {
        self.newer_than(after).map(|n| n.item.action_id)
    }

    /// How many nudges there are after position `after`.
    pub(super) fn count_after(&self, after: ActionId) -> usize {
        self.newer_than(after).count()
    }

    /// Nudge `id` for a consumer: the item, and whether this is its first delivery (it is
    /// marked delivered then).
    pub(super) fn deliver(&mut self, id: ActionId) -> Option<(Item, bool)> {
        let n = self.queue.iter_mut().find(|n| n.item.action_id == id)?;
        let first = !n.delivered;
        if first {
            n.delivered = true;
            self.undelivered -= 1;
        }
        Some((n.item.clone(), first))
    }

    fn newer_than(&self, after: ActionId) -> impl Iterator<Item = &Nudge> {
        self.queue.iter().filter(move |n| n.item.action_id > after)
    }
}
