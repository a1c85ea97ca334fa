//! Shared work: when instances share a stream (`sources::jetstream`), the work that must run
//! once across them — auto prompts and confirms approved from outside a session — leaves this
//! lifecycle for a queue every instance pulls from, and comes back as a claim only when one of
//! this instance's sessions is waiting.
//!
//! The lifecycle stays the one owner of the action lifecycle and of `actions.jsonl`; the
//! component that talks to the queue only moves items in and out, through operations:
//! - **Out.** Once sharing is on ([`Lifecycle::share_work`]), work the component's predicate
//!   accepts (work from a message of the shared stream) goes to the `outbox` instead of the
//!   local work queue; it is recorded as created (`queued`) as always. The component takes it
//!   ([`Lifecycle::next_shared`]), publishes it, and reports it ([`Lifecycle::shared`]), which
//!   records the terminal `shared` transition (made by this instance or, when another
//!   instance already made the same work, dropped as its duplicate). A crash before that
//!   record leaves the action `queued` in the journal: at boot it is queued again, and moved
//!   to the outbox when sharing is turned on — published again, which the queue drops as a
//!   duplicate if the first publish landed.
//! - **Demand.** A wait that found nothing to take counts as idle while it blocks;
//!   [`Lifecycle::work_demand`] returns once more waits are idle than work is queued here, so
//!   the component pulls one item per waiting session, not ahead of them.
//! - **In.** A pulled item becomes a local action ([`Lifecycle::take_in`]): a new local id,
//!   a creation record (`queued`) whose message carries [`WORK_KEY`], queued at the front and
//!   claimed, delivered or released by the sessions like any work. The component acknowledges
//!   the queue's message when the `delivered` event comes, extends it while the item is here,
//!   and gives it back when no session took it ([`Lifecycle::withdraw`], recorded as
//!   `shared`).
//! - **Restore.** An item that came from the queue is never queued again at boot: its holder
//!   (this process) died, so the queue redelivers it after its ack wait to whoever waits; it
//!   is recorded as `shared`.
//!
//! Without sharing turned on nothing here runs: work is queued locally as it always was.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Changes, Event, Item, ItemKind, Lifecycle, State};
use crate::actions::journal::Record;
use crate::actions::{Action, ActionId, ActionState, Delivery, Mode};
use crate::message::Message;

/// The metadata key that marks a message of work taken in from the shared queue (its value
/// names the queue's item).
pub const WORK_KEY: &str = "jetstream.work";

/// Which work is shared: the component's rule (work from a message of the shared stream).
pub type Shareable = fn(&Item) -> bool;

/// The outbox, under the lifecycle's lock.
#[derive(Default)]
pub(super) struct Outbox {
    /// Sharing is on: the work `shareable` accepts goes out.
    shareable: Option<Shareable>,
    /// Work waiting to be published, oldest first.
    queue: VecDeque<Item>,
}

impl Outbox {
    /// Whether `item` goes out instead of into the local queue.
    fn takes(&self, item: &Item) -> bool {
        item.kind.is_work()
            && item.delivery == Delivery::Wait
            && !item.message.metadata.contains_key(WORK_KEY)
            && self.shareable.is_some_and(|f| f(item))
    }

    /// Work waiting to be published.
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }
}

/// Idle waits and the wake-ups of the component's loops (beside the lock).
#[derive(Default)]
pub(super) struct Sharing {
    /// Waits blocked with nothing to take.
    idle: AtomicUsize,
    /// Woken when a wait becomes idle.
    demand: Notify,
    /// Woken when work goes to the outbox.
    out: Notify,
}

/// Counts a wait as idle while it lives.
pub(super) struct Idle<'a>(&'a Sharing);

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        self.0.idle.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Sharing {
    /// A wait found nothing to take and blocks: idle until the guard drops.
    pub(super) fn idle(&self) -> Idle<'_> {
        self.idle.fetch_add(1, Ordering::Relaxed);
        self.demand.notify_waiters();
        Idle(self)
    }

    /// Work went to the outbox.
    pub(super) fn wake_out(&self) {
        self.out.notify_one();
    }
}

impl State {
    /// Queues work: to the outbox when it is shared, else to the local queue.
    pub(super) fn push_work(&mut self, item: Item) {
        if self.outbox.takes(&item) {
            self.outbox.queue.push_back(item);
        } else {
            self.work.push(item);
        }
    }
}

impl Lifecycle {
    /// Turns sharing on: from now on the work `shareable` accepts goes out instead of into the
    /// local queue, and so does the work queued here now (restored at boot).
    pub fn share_work(&self, shareable: Shareable) {
        let mut guard = self.lock();
        let s = &mut *guard;
        s.outbox.shareable = Some(shareable);
        let moved = s.work.drain_where(|item| s.outbox.takes(item));
        s.outbox.queue.extend(moved);
        drop(guard);
        self.inner.sharing.wake_out();
    }

    /// Waits for the next piece of work to publish; `None` once `cancel` fires. It stays
    /// `queued` here until [`Lifecycle::shared`] says where it went.
    pub async fn next_shared(&self, cancel: &CancellationToken) -> Option<Item> {
        loop {
            let notified = self.inner.sharing.out.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if cancel.is_cancelled() {
                return None;
            }
            if let Some(item) = self.lock().outbox.queue.pop_front() {
                return Some(item);
            }
            tokio::select! {
                _ = cancel.cancelled() => return None,
                _ = notified => {}
            }
        }
    }

    /// Records that work `id` left this instance for the shared queue (`reason` says how:
    /// published, or a duplicate of the same work another instance made).
    pub fn shared(&self, id: ActionId, reason: &str) {
        let mut changes = Changes::default();
        changes.record(Record {
            reason: Some(reason.to_string()),
            ..Record::transition(id, ActionState::Shared, Utc::now())
        });
        let s = self.lock();
        self.commit(s, changes);
    }

    /// Waits until more waits are idle than work is queued here (a session waits for work
    /// this instance does not have); false once `cancel` fires.
    pub async fn work_demand(&self, cancel: &CancellationToken) -> bool {
        loop {
            let notified = self.inner.sharing.demand.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if cancel.is_cancelled() {
                return false;
            }
            let idle = self.inner.sharing.idle.load(Ordering::Relaxed);
            if idle > self.lock().work.len() {
                return true;
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = notified => {}
            }
        }
    }

    /// Takes in `item`, pulled from the shared queue, as local work `id` (a fresh local id):
    /// its message is marked with [`WORK_KEY`] = `key`, its creation recorded, and it is
    /// queued at the front for the waiting sessions. Returns the local item.
    pub fn take_in(&self, item: Item, id: ActionId, key: &str, now: DateTime<Utc>) -> Item {
        let mut message = Message::clone(&item.message);
        message.metadata.insert(WORK_KEY, key);
        let action = Action {
            id,
            rule: item.rule.clone(),
            mode: if item.kind == ItemKind::Approved {
                Mode::Confirm
            } else {
                Mode::Auto
            },
            seq: message.seq,
            prompt: item.prompt.clone(),
            tools: item.tools.clone(),
            created: now,
            expires: None,
            delivery: Delivery::Wait,
            approve_via: Vec::new(),
            consumers: item.consumers.clone(),
        };
        let local = Item {
            kind: if item.kind == ItemKind::Approved {
                ItemKind::Approved
            } else {
                ItemKind::Auto
            },
            action_id: id,
            message: std::sync::Arc::new(message),
            expires_at: None,
            approve_via: Vec::new(),
            delivery: Delivery::Wait,
            ..item
        };
        let mut changes = Changes::default();
        changes.record(Record::created(
            &action,
            ActionState::Queued,
            &local.message,
        ));
        changes.event(Event::Queued {
            item: local.clone(),
        });
        let mut s = self.lock();
        s.work.push_front(local.clone());
        self.commit(s, changes);
        self.inner.wake.notify_waiters();
        local
    }

    /// Where taken-in work `id` is: queued here, claimed by a session, or gone (delivered, or
    /// ended otherwise). What the component asks when it may have missed an event.
    pub fn held(&self, id: ActionId) -> Held {
        let s = self.lock();
        if s.work.is_claimed(id) {
            Held::Claimed
        } else if s.work.queued().any(|i| i.action_id == id) {
            Held::Queued
        } else {
            Held::Gone
        }
    }

    /// Takes back work `id` that came from the shared queue while no session has claimed it:
    /// it leaves the local queue, recorded as `shared` (given back). Returns where it was:
    /// [`Held::Queued`] when it is taken back now; else claimed, or gone.
    pub fn withdraw(&self, id: ActionId) -> Held {
        let mut s = self.lock();
        if !s.work.remove_queued(id) {
            return if s.work.is_claimed(id) {
                Held::Claimed
            } else {
                Held::Gone
            };
        }
        let mut changes = Changes::default();
        changes.record(Record {
            reason: Some("given back to the shared queue: no session here took it".into()),
            ..Record::transition(id, ActionState::Shared, Utc::now())
        });
        self.commit(s, changes);
        // A session that is still idle (one the work's audience left out) may want another.
        self.inner.sharing.demand.notify_waiters();
        Held::Queued
    }

    /// Work waiting to be published to the shared queue.
    pub fn outgoing(&self) -> usize {
        self.lock().outbox.len()
    }
}

/// Where a piece of taken-in work is ([`Lifecycle::held`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Held {
    /// Queued here, no session has claimed it.
    Queued,
    /// A session's wait has claimed it.
    Claimed,
    /// Neither: delivered (or it ended otherwise).
    Gone,
}

/// Whether restored work came from the shared queue (its holder died: the queue delivers it
/// again, so it is not queued here).
pub(super) fn came_in(item: &Item) -> bool {
    item.message.metadata.contains_key(WORK_KEY)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use chrono::Utc;

    use super::*;

    fn shared_everything(_: &Item) -> bool {
        true
    }

    fn action(id: ActionId, mode: Mode) -> (Action, Arc<Message>) {
        super::super::tests::action(id, mode, Utc::now())
    }

    #[tokio::test]
    async fn shared_work_goes_out_and_nudges_stay() {
        let lc = Lifecycle::default();
        let session = lc.open_session("w#1", false, None);
        lc.share_work(shared_everything);
        lc.offer(
            vec![action(1, Mode::Auto), action(2, Mode::Notify)],
            None,
            Utc::now(),
        )
        .await;
        let taken = lc.take(session, "w#1", 10);
        assert_eq!(
            taken.iter().map(|i| i.kind).collect::<Vec<_>>(),
            [ItemKind::Nudge],
            "the work is not queued here"
        );
        let cancel = CancellationToken::new();
        let out = lc.next_shared(&cancel).await.unwrap();
        assert_eq!(out.action_id, 1);
        assert_eq!(lc.outgoing(), 0);
        lc.shared(1, "published");
        assert!(lc.flush().await);
    }

    #[tokio::test]
    async fn work_queued_before_sharing_moves_out() {
        let lc = Lifecycle::default();
        lc.offer(vec![action(1, Mode::Auto)], None, Utc::now())
            .await;
        assert_eq!(lc.stats().queued_work, 1);
        lc.share_work(shared_everything);
        assert_eq!((lc.stats().queued_work, lc.outgoing()), (0, 1));
    }

    #[tokio::test]
    async fn a_waiting_session_makes_demand_and_takes_what_comes_in() {
        let lc = Lifecycle::default();
        let session = lc.open_session("w#1", false, None);
        lc.share_work(shared_everything);
        let cancel = CancellationToken::new();
        let waiting = {
            let lc = lc.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                lc.wait(session, "w#1", 10, Duration::from_secs(10), &cancel)
                    .await
            })
        };
        assert!(lc.work_demand(&cancel).await, "the wait is idle");
        let (a, m) = action(7, Mode::Auto);
        let pulled = Item::new(a, m);
        let local = lc.take_in(pulled, 40, "5.r", Utc::now());
        assert_eq!(&local.message.metadata[WORK_KEY], "5.r");
        let got = waiting.await.unwrap();
        assert_eq!(
            got.iter()
                .map(|i| (i.kind, i.action_id))
                .collect::<Vec<_>>(),
            [(ItemKind::Auto, 40)]
        );
        assert_eq!(lc.withdraw(40), Held::Claimed, "claimed: not given back");
        lc.settle(&[40], true, false, "sent");
        assert_eq!(lc.stats().counters.delivered, 1);
        assert_eq!(lc.held(40), Held::Gone, "delivered");
        assert_eq!(lc.withdraw(40), Held::Gone);
    }

    #[test]
    fn work_taken_in_before_a_restart_is_not_queued_again() {
        use crate::actions::journal::LiveAction;
        let live = |id: ActionId, taken_in: bool| {
            let (action, message) = action(id, Mode::Auto);
            let mut message = Message::clone(&message);
            if taken_in {
                message.metadata.insert(WORK_KEY, "5.r");
            }
            LiveAction {
                action,
                message,
                state: ActionState::Claimed,
                redelivered: false,
            }
        };
        let lc = Lifecycle::default();
        lc.restore([live(1, true), live(2, false)]);
        // The shared queue delivers the first again; the second was made here.
        assert_eq!(lc.stats().queued_work, 1);
        let session = lc.open_session("w#1", false, None);
        let taken = lc.take(session, "w#1", 10);
        assert_eq!(taken.iter().map(|i| i.action_id).collect::<Vec<_>>(), [2]);
    }

    #[tokio::test]
    async fn work_no_session_took_is_given_back() {
        let lc = Lifecycle::default();
        lc.share_work(shared_everything);
        let (a, m) = action(7, Mode::Auto);
        lc.take_in(Item::new(a, m), 40, "5.r", Utc::now());
        assert_eq!(lc.stats().queued_work, 1);
        assert_eq!(lc.held(40), Held::Queued);
        assert_eq!(lc.withdraw(40), Held::Queued, "taken back");
        assert_eq!(lc.stats().queued_work, 0);
        assert_eq!(lc.withdraw(40), Held::Gone);
        // No idle wait: no demand.
        let cancel = CancellationToken::new();
        let demand = tokio::time::timeout(Duration::from_millis(50), lc.work_demand(&cancel));
        assert!(demand.await.is_err(), "nobody waits");
    }
}
