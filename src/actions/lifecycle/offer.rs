//! Offering the dispatcher's actions: each is admitted against its queue's bound (or dropped,
//! on the record), queued with its creation record, and journalled with the dispatcher's new
//! evaluation mark in the same write. Nudges and work are visible at once; confirm requests
//! only once that write is on disk, and the lifecycle's evaluation mark moves only then too, so
//! neither runs ahead of the disk while the journal fails and its writer holds the records.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::{oneshot, watch};

use super::{Changes, Event, Item, ItemKind, Lifecycle, State};
use crate::actions::journal::Record;
use crate::actions::{Action, ActionId, ActionState, Delivery, Mode};
use crate::message::{Message, Seq};

/// The outcome of offering a batch of actions.
#[derive(Debug, Default)]
pub struct Offered {
    /// Items queued, in id order.
    pub queued: Vec<Item>,
    /// Actions refused (or, for nudges, evicted) because their queue was full.
    pub dropped: Vec<ActionId>,
}

/// One offer, as it is decided under the lock.
#[derive(Default)]
struct Batch {
    offered: Offered,
    changes: Changes,
    /// Confirm requests created: shown once their records are written.
    staged: Vec<Item>,
    /// Exec work was queued: the runner is woken.
    exec: bool,
}

impl Lifecycle {
    /// Offers the actions of evaluated messages; `evaluated` is the dispatcher's new mark,
    /// written in the same journal write as the actions (a mark with nothing else to write
    /// waits up to 5 ms for the marks after it: see
    /// [`crate::actions::writer::JournalWriter::submit_mark`]). Nudges and work are visible at
    /// once; confirm requests once that write is on disk, and the mark
    /// ([`Lifecycle::evaluated`]) moves only then too.
    ///
    /// Returns once the confirm requests are visible. While the journal fails, it returns only
    /// once the batch is written: the dispatcher evaluates no further than what is on disk,
    /// and the messages after it wait in the inbox.
    pub async fn offer(
        &self,
        actions: Vec<(Action, Arc<Message>)>,
        evaluated: Option<Seq>,
        now: DateTime<Utc>,
    ) -> Offered {
        let (batch, written) = self.decide(actions, evaluated, now);
        let Batch {
            mut offered,
            changes,
            staged,
            exec,
        } = batch;
        self.announce(changes.events, exec);
        self.inner.sharing.wake_out();
        if let Some(written) = written {
            if written.await.is_err() {
                // The writer is gone: nothing is written any more, so nothing is shown.
                return offered;
            }
            // Confirm ids are shown to people: visible only once their record is on disk.
            self.show_confirms(staged, &mut offered);
            advance(&self.inner.evaluated, evaluated);
        }
        offered
    }

    /// Decides the offer under the lock and hands its records, with the mark, to the journal
    /// (still under the lock, so the file's order is the order of the decisions). Returns the
    /// batch, and a receiver that fires once its records are written when the offer must wait
    /// for that: it has confirm requests to show, or the journal fails. Otherwise the writer
    /// moves the mark once they are written.
    fn decide(
        &self,
        actions: Vec<(Action, Arc<Message>)>,
        evaluated: Option<Seq>,
        now: DateTime<Utc>,
    ) -> (Batch, Option<oneshot::Receiver<()>>) {
        let cap = self.capacity();
        let mut batch = Batch::default();
        let mut s = self.lock();
        for (action, message) in actions {
            if s.admit(&action, cap, now, &mut batch) {
                s.queue(action, message, &mut batch);
            }
        }
        s.nudges.trim_delivered(cap);
        s.drops.log(cap);
        let journal = &self.inner.journal;
        let waits = !batch.staged.is_empty() || journal.is_failing();
        if let Some(seq) = evaluated
            && batch.changes.records.is_empty()
            && !waits
        {
            // Only the mark moves: it may wait for the marks after it (see the writer).
            journal.submit_mark(seq, &self.inner.on_mark);
            return (batch, None);
        }
        if let Some(seq) = evaluated {
            batch.changes.record(Record {
                at: Some(now),
                evaluated: Some(seq),
                ..Record::default()
            });
        }
        let records = std::mem::take(&mut batch.changes.records);
        let written = if !waits {
            let mark = self.inner.evaluated.clone();
            journal.submit_then(records, move || advance(&mark, evaluated));
            None
        } else {
            Some(journal.submit_acked(records))
        };
        (batch, written)
    }

    /// Publishes what an offer made visible, and wakes the waits and the exec runner.
    fn announce(&self, events: Vec<Event>, exec: bool) {
        if !events.is_empty() {
            self.publish(events);
            self.inner.wake.notify_waiters();
        }
        if exec {
            self.inner.exec_wake.notify_one();
        }
    }

    /// Shows the staged confirm requests `staged`, whose records are written.
    fn show_confirms(&self, staged: Vec<Item>, offered: &mut Offered) {
        if staged.is_empty() {
            return;
        }
        let mut events = Vec::with_capacity(staged.len());
        {
            let mut s = self.lock();
            for item in staged {
                s.confirms.show(item.clone());
                events.push(Event::Queued { item: item.clone() });
                offered.queued.push(item);
            }
        }
        offered.queued.sort_by_key(|i| i.action_id);
        self.publish(events);
        self.inner.expiry.notify_one();
        self.inner.wake.notify_waiters();
    }
}

/// Moves the evaluation `mark` up to `seq` (never back).
pub(super) fn advance(mark: &watch::Sender<Seq>, seq: Option<Seq>) {
    if let Some(seq) = seq {
        mark.send_if_modified(|m| {
            let newer = seq > *m;
            *m = (*m).max(seq);
            newer
        });
    }
}

impl State {
    /// Makes room for `action`, or refuses it: a full nudge queue drops its oldest undelivered
    /// nudge (the newest alert matters most); a full confirm, work or exec queue refuses the
    /// newest. Returns whether `action` may be queued.
    fn admit(
        &mut self,
        action: &Action,
        cap: usize,
        now: DateTime<Utc>,
        batch: &mut Batch,
    ) -> bool {
        if action.mode == Mode::Notify {
            if self.nudges.undelivered() >= cap
                && let Some(old) = self.nudges.evict_oldest_undelivered()
            {
                let reason = format!("notify queue full ({cap}): oldest nudge dropped");
                let changes = &mut batch.changes;
                self.drop_action(Mode::Notify, old.action_id, &old.rule, reason, now, changes);
                batch.offered.dropped.push(old.action_id);
            }
            return true;
        }
        let full = match (action.mode, action.delivery) {
            (Mode::Confirm, _) => self.confirms.is_full(cap),
            (_, Delivery::Exec) => self.runs.queued() >= cap,
            (_, Delivery::Wait) => self.work.len() + self.outbox.len() >= cap,
        };
        if full {
            let reason = format!("{} queue full ({cap}): newest refused", action.mode);
            let changes = &mut batch.changes;
            self.drop_action(action.mode, action.id, &action.rule, reason, now, changes);
            batch.offered.dropped.push(action.id);
        }
        !full
    }

    /// Queues an admitted action: its creation record, then its item in its queue. A confirm
    /// request is staged until its record is written; the rest is visible at once.
    fn queue(&mut self, action: Action, message: Arc<Message>, batch: &mut Batch) {
        let state = if action.mode == Mode::Confirm {
            ActionState::Pending
        } else {
            ActionState::Queued
        };
        batch
            .changes
            .record(Record::created(&action, state, &message));
        let fired = action.created;
        let item = Item::new(action, message);
        match item.kind {
            ItemKind::ConfirmRequest => {
                self.confirms.stage();
                batch.staged.push(item);
                return;
            }
            ItemKind::Nudge => self.nudges.push(item.clone(), fired),
            _ if item.delivery == Delivery::Exec => {
                batch.exec = true;
                self.runs.push(item.clone());
            }
            _ => self.push_work(item.clone()),
        }
        batch.changes.event(if item.delivery == Delivery::Exec {
            // Its own event: nothing that pushes `queued` work to sessions sees it.
            Event::ExecQueued { item: item.clone() }
        } else {
            Event::Queued { item: item.clone() }
        });
        batch.offered.queued.push(item);
    }
}
