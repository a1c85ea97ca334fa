//! The nudge queue: every nudge (notify action) the lifecycle holds, in id order, and whether
//! any consumer has seen it yet.
//!
//! One queue serves every consumer: each reads it from its own position (the newest nudge id
//! it has seen, kept in [`super::sessions`]), so each sees each nudge once. At most `capacity`
//! undelivered nudges are kept; a new nudge past that evicts the *oldest* undelivered one (the
//! newest alert matters most). Delivered nudges stay visible, at most `capacity` of them, for
//! consumers that have not seen them yet.
//!
//! A new session's nudges start from its start, except for the first session to open while
//! none is: it is handed the nudges no consumer has seen (the newest [`Hold::keep`], none older
//! than [`Hold::max_age`]), so the warning that fired overnight reaches the morning's agent.
//! Those it is handed stay held until some session takes them; older unseen ones are left
//! behind (a named consumer resuming an older cursor still reads them).

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::Item;
use crate::actions::ActionId;
use crate::message::Seq;

struct Nudge {
    item: Item,
    /// When it fired (the action's creation).
    fired: DateTime<Utc>,
    /// Some consumer has seen it.
    delivered: bool,
}

/// Which unseen nudges are held for the first session to open while none is
/// (`actions.heldNudges`, `actions.heldNudgeMaxAge`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Hold {
    /// How many of the newest.
    pub(super) keep: usize,
    /// None fired longer ago than this.
    pub(super) max_age: Duration,
}

/// The nudges, oldest first.
#[derive(Default)]
pub(super) struct Nudges {
    queue: VecDeque<Nudge>,
    /// How many in `queue` no consumer has seen.
    undelivered: usize,
    /// The highest nudge id issued so far: where a new session's nudges start.
    last: ActionId,
    /// Only nudges after this one can be held: the ones before the last hand-off's were left
    /// behind by it (past [`Hold::keep`], or too old).
    hold_after: ActionId,
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

    /// Queues a new (or restored) nudge that fired at `fired`, newer than every nudge queued
    /// so far.
    pub(super) fn push(&mut self, item: Item, fired: DateTime<Utc>) {
        self.last = self.last.max(item.action_id);
        self.undelivered += 1;
        self.queue.push_back(Nudge {
            item,
            fired,
            delivered: false,
        });
    }

    /// The nudges `hold` keeps for the first session to open at `now`: the newest `keep` no
    /// consumer has seen, none older than `max_age`, none left behind by an earlier hand-off.
    /// Returns how many, and the position that hands them to a consumer (just before the
    /// oldest of them).
    pub(super) fn held(&self, hold: Hold, now: DateTime<Utc>) -> (usize, Option<ActionId>) {
        let oldest = TimeDelta::from_std(hold.max_age)
            .ok()
            .and_then(|age| now.checked_sub_signed(age))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut count = 0;
        let mut after = None;
        for n in self
            .newer_than(self.hold_after)
            .rev()
            .filter(|n| !n.delivered)
        {
            if count == hold.keep || n.fired < oldest {
                break;
            }
            count += 1;
            after = Some(n.item.action_id - 1);
        }
        (count, after)
    }

    /// Hands the held nudges over (to the first session to open): returns the position just
    /// before them, and leaves the unseen nudges older than them behind for good. A session
    /// that ends before it takes them leaves them held for the next.
    pub(super) fn hand_over(&mut self, hold: Hold, now: DateTime<Utc>) -> Option<ActionId> {
        let (_, after) = self.held(hold, now);
        if let Some(after) = after {
            self.hold_after = self.hold_after.max(after);
        }
        after
    }

    /// How many nudges after position `after` no consumer has seen.
    pub(super) fn undelivered_after(&self, after: ActionId) -> usize {
        self.newer_than(after).filter(|n| !n.delivered).count()
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

    /// Whether `consumer` may receive nudge `id` (its rule's `consumers`); a nudge no longer
    /// queued admits nobody.
    pub(super) fn admits(&self, id: ActionId, consumer: &str) -> bool {
        self.queue
            .iter()
            .find(|n| n.item.action_id == id)
            .is_some_and(|n| n.item.consumers.admits(consumer))
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

    fn newer_than(&self, after: ActionId) -> impl DoubleEndedIterator<Item = &Nudge> {
        self.queue.iter().filter(move |n| n.item.action_id > after)
    }
}
