//! Work: auto prompts and approved confirms waiting for a session's wait, oldest first, and the
//! claims taken on them.
//!
//! A wait *claims* work for exactly one session; the claim is settled as *delivered* once the
//! result carrying it was sent, or *released* back to the front of the queue when the session
//! ended or the result could not be sent. So delivery is at least once, never zero. Work whose
//! result may have reached a client before it came back is marked `redelivered`. Work whose
//! audience is limited (a rule's `consumers`) is claimed only by a session of a consumer it
//! admits: it waits in the queue for one, and other sessions claim what is behind it.

use std::collections::{HashMap, VecDeque};

use super::{Item, SessionId};
use crate::actions::ActionId;

/// A claim on one piece of work.
pub(super) struct Claim {
    pub(super) item: Item,
    pub(super) session: SessionId,
    /// The consumer the session reads as (who the records name).
    pub(super) consumer: String,
}

/// The work queue and its claims.
#[derive(Default)]
pub(super) struct Work {
    queue: VecDeque<Item>,
    claims: HashMap<ActionId, Claim>,
    /// Which session pushes each queued item: one window gets the push of a piece of work only
    /// one of them can take. Entries leave with the item.
    pushed_by: HashMap<ActionId, SessionId>,
}

impl Work {
    /// Work waiting for a session.
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Work claimed and not settled yet.
    pub(super) fn claimed(&self) -> usize {
        self.claims.len()
    }

    /// Whether a session holds a claim on `id`.
    pub(super) fn is_claimed(&self, id: ActionId) -> bool {
        self.claims.contains_key(&id)
    }

    /// Queues work behind what is queued.
    pub(super) fn push(&mut self, item: Item) {
        self.queue.push_back(item);
    }

    /// Whether `session` is the one to push queued work `id`: the first to ask while it is
    /// queued. Work already claimed (a wait took it) or gone is pushed by nobody.
    pub(super) fn push_by(&mut self, id: ActionId, session: SessionId) -> bool {
        if !self.queue.iter().any(|i| i.action_id == id) {
            return false;
        }
        *self.pushed_by.entry(id).or_insert(session) == session
    }

    /// The queued work, oldest first.
    pub(super) fn queued(&self) -> impl Iterator<Item = &Item> {
        self.queue.iter()
    }

    /// Claims queued work `id` for `session`, reading as `consumer`; `None` when it is not
    /// queued.
    pub(super) fn claim_queued(
        &mut self,
        id: ActionId,
        session: SessionId,
        consumer: &str,
    ) -> Option<Item> {
        let at = self.queue.iter().position(|item| item.action_id == id)?;
        let item = self.queue.remove(at)?;
        self.pushed_by.remove(&item.action_id);
        self.claim(item.clone(), session, consumer);
        Some(item)
    }

    /// Queued work `consumer` may receive.
    pub(super) fn len_for(&self, consumer: &str) -> usize {
        self.queue
            .iter()
            .filter(|item| item.consumers.admits(consumer))
            .count()
    }

    /// Records `session`'s claim on `item` (taken from the queue, or approved for it).
    pub(super) fn claim(&mut self, item: Item, session: SessionId, consumer: &str) {
        self.pushed_by.remove(&item.action_id);
        self.claims.insert(
            item.action_id,
            Claim {
                item,
                session,
                consumer: consumer.to_string(),
            },
        );
    }

    /// Ends the claim on `id` (its work was delivered); `None` when nothing holds it.
    pub(super) fn settle(&mut self, id: ActionId) -> Option<Claim> {
        self.claims.remove(&id)
    }

    /// Ends the claims on `ids` and puts their work back at the front of the queue, in id
    /// order: it was due before anything queued since. Work whose result `maybe_seen` (it
    /// left, unacknowledged) is marked `redelivered`. Returns the claims released.
    pub(super) fn release(
        &mut self,
        ids: &[ActionId],
        maybe_seen: bool,
    ) -> Vec<(ActionId, String)> {
        let mut back: Vec<Claim> = ids.iter().filter_map(|id| self.claims.remove(id)).collect();
        for c in &mut back {
            c.item.redelivered |= maybe_seen;
        }
        let released = back
            .iter()
            .map(|c| (c.item.action_id, c.consumer.clone()))
            .collect();
        back.sort_by_key(|c| std::cmp::Reverse(c.item.action_id));
        for c in back {
            self.queue.push_front(c.item);
        }
        released
    }

    /// Queues work taken in from the shared queue first: a session waits for it now.
    pub(super) fn push_front(&mut self, item: Item) {
        self.queue.push_front(item);
    }

    /// Takes the queued work `take` accepts out of the queue, oldest first.
    pub(super) fn drain_where(&mut self, mut take: impl FnMut(&Item) -> bool) -> Vec<Item> {
        let (out, stay): (Vec<Item>, Vec<Item>) = self.queue.drain(..).partition(|i| take(i));
        self.queue = stay.into();
        for item in &out {
            self.pushed_by.remove(&item.action_id);
        }
        out
    }

    /// Takes queued (not claimed) work `id` out of the queue; false when it is not queued.
    pub(super) fn remove_queued(&mut self, id: ActionId) -> bool {
        let Some(at) = self.queue.iter().position(|i| i.action_id == id) else {
            return false;
        };
        self.queue.remove(at);
        self.pushed_by.remove(&id);
        true
    }

    /// `session` ended: the work it was to push may be pushed by another.
    pub(super) fn forget_pusher(&mut self, session: SessionId) {
        self.pushed_by.retain(|_, s| *s != session);
    }

    /// The ids of the work `session` holds claims on.
    pub(super) fn held_by(&self, session: SessionId) -> Vec<ActionId> {
        self.claims
            .iter()
            .filter(|(_, c)| c.session == session)
            .map(|(id, _)| *id)
            .collect()
    }
}
