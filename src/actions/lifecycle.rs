//! The action lifecycle: the one owner of every action's state, and the only writer of
//! `actions.jsonl` (through [`JournalWriter`]).
//!
//! It holds, behind one lock that is never held across I/O, one small type per queue:
//! - `nudges` (notify): each consumer sees each nudge once, from its start (or from its named
//!   cursor); the first session to open while none is also gets the unseen nudges held for it
//!   (`actions.heldNudges`, `actions.heldNudgeMaxAge`). A full queue drops its *oldest*
//!   undelivered nudge (the newest alert matters most).
//! - `confirms`: every consumer sees each pending request once, until it is answered, expires
//!   or is resolved. A full queue refuses the newest.
//! - `work` (auto prompts and approved confirms): *claimed* by exactly one session's wait,
//!   then *delivered*, or *released* back to the front of the queue. A full queue refuses the
//!   newest. Delivery is at least once, never zero.
//! - `runs`: auto work of exec rules, for the exec runner only, and the runs in flight.
//! - `sessions`: which consumer each session reads as, and each consumer's position.
//!
//! Every transition is decided under the lock, handed to the journal writer in decision order
//! (still under the lock: the writer's queue never blocks), and published as an [`Event`] once
//! the lock is let go (push, `watch` and metrics read those). Offering the dispatcher's actions
//! is in [`offer`](Lifecycle::offer): a confirm request becomes visible only once its creation
//! record is written, so an id a person was shown survives a crash; nudges and work are visible
//! at once (a crash before their record is written re-evaluates the message: at least once).
//! While the journal fails, its writer holds the records until they land, and the evaluation
//! mark waits for them.

mod answer;
mod confirms;
mod event;
mod hook;
mod item;
mod nudges;
mod offer;
pub mod relay;
mod runs;
mod sessions;
mod shared;
mod stats;
mod waiters;
mod work;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use super::journal::{LiveAction, Record};
use super::writer::{JournalWriter, OnMark};
use super::{ActionId, ActionSettings, ActionState, Delivery, ExecFailure, ExecReport, Mode};
use crate::message::Seq;

pub use confirms::{ClosedConfirm, ConfirmError};
pub use event::Event;
pub use item::{Item, ItemKind};
pub use offer::Offered;
pub use relay::{PermissionRequest, RULE_PREFIX, RelayError, permission_action};
pub use sessions::{MAX_CONSUMER_NAME, SessionId, consumer_name_problem, fit_consumer_name};
pub use shared::{Held, Shareable, WORK_KEY};
pub use stats::{Counters, LifecycleStats, PendingConfirm};

/// Everything the lifecycle holds, behind its one lock.
#[derive(Default)]
struct State {
    nudges: nudges::Nudges,
    confirms: confirms::Confirms,
    work: work::Work,
    runs: runs::Runs,
    sessions: sessions::Sessions,
    counters: Counters,
    drops: stats::DropLog,
    /// Work on its way to the shared queue (instances sharing a stream).
    outbox: shared::Outbox,
    relays: relay::Relays,
    /// The waits in progress, oldest first: work is handed round them.
    waiters: waiters::Waiters,
}

/// What one call decided under the lock: the records for the journal, in decision order, and
/// the events to publish once the lock is let go.
#[derive(Default)]
struct Changes {
    records: Vec<Record>,
    events: Vec<Event>,
}

impl Changes {
    fn record(&mut self, record: Record) {
        self.records.push(record);
    }

    fn event(&mut self, event: Event) {
        self.events.push(event);
    }
}

struct Inner {
    state: Mutex<State>,
    journal: JournalWriter,
    events: broadcast::Sender<Event>,
    /// Woken when something becomes deliverable (queued, released, approved).
    wake: Notify,
    /// Woken when the earliest confirm expiry may have changed.
    expiry: Notify,
    /// Woken when an answer being saved is in, or refused (see `answer`).
    answered: Notify,
    /// The dispatcher's evaluation mark, once the actions of the messages up to it are written
    /// and the confirms they created are visible (the resolve pass follows it). Shared with
    /// the journal writer, which moves it as the records land.
    evaluated: Arc<tokio::sync::watch::Sender<Seq>>,
    /// Moves `evaluated` once a mark that came alone is written.
    on_mark: OnMark,
    /// Each queue's capacity; `actions.queueCapacity`, changed live by a config reload.
    capacity: std::sync::atomic::AtomicUsize,
    /// Woken when exec work is queued.
    exec_wake: Notify,
    /// Which unseen nudges the first session to open while none is gets.
    hold: nudges::Hold,
    /// Idle waits, and the wake-ups of the shared queue's component.
    sharing: shared::Sharing,
}

/// The lifecycle handle (cheap to clone).
#[derive(Clone)]
pub struct Lifecycle {
    inner: Arc<Inner>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle::new(64, JournalWriter::memory())
    }
}

impl Lifecycle {
    /// A lifecycle whose queues hold `capacity` items each, journaling through `journal`; the
    /// other settings are the defaults.
    pub fn new(capacity: usize, journal: JournalWriter) -> Lifecycle {
        let settings = ActionSettings {
            queue_capacity: capacity,
            ..ActionSettings::default()
        };
        Lifecycle::with_settings(&settings, journal)
    }

    /// A lifecycle with `settings`, journaling through `journal`.
    pub fn with_settings(settings: &ActionSettings, journal: JournalWriter) -> Lifecycle {
        let capacity = settings.queue_capacity;
        let evaluated = Arc::new(tokio::sync::watch::Sender::new(0));
        let on_mark: OnMark = {
            let evaluated = evaluated.clone();
            Arc::new(move |seq| offer::advance(&evaluated, Some(seq)))
        };
        Lifecycle {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    sessions: sessions::Sessions::new(settings.max_consumers),
                    ..State::default()
                }),
                journal,
                events: broadcast::channel(4096).0,
                wake: Notify::new(),
                expiry: Notify::new(),
                answered: Notify::new(),
                evaluated,
                on_mark,
                capacity: std::sync::atomic::AtomicUsize::new(capacity.max(1)),
                exec_wake: Notify::new(),
                hold: nudges::Hold {
                    keep: settings.held_nudges,
                    max_age: settings.held_nudge_max_age,
                },
                sharing: shared::Sharing::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap()
    }

    /// Hands `changes`' records to the journal while `state` is still locked (so the file's
    /// order is the order of the decisions), lets go of the lock, then publishes the events.
    fn commit(&self, state: MutexGuard<'_, State>, changes: Changes) {
        self.inner.journal.submit(changes.records);
        drop(state);
        self.publish(changes.events);
    }

    fn publish(&self, events: Vec<Event>) {
        for e in events {
            let _ = self.inner.events.send(e);
        }
    }

    /// Rebuilds the queues from the actions journal at boot. Claims die with the process that
    /// held them, so claimed and released work is queued again.
    ///
    /// Exec work not started yet is queued for the runner again; a run that was `running` when
    /// the process died is recorded as `failed` with reason `interrupted` (never a silent gap).
    pub fn restore(&self, live: impl IntoIterator<Item = LiveAction>) {
        let now = Utc::now();
        let mut changes = Changes::default();
        let mut s = self.lock();
        for l in live {
            let mode = l.action.mode;
            let fired = l.action.created;
            let mut item = Item::new(l.action, Arc::new(l.message));
            // A claim the stop ended may have been on its way to, or with, its client.
            item.redelivered = l.redelivered || l.state == ActionState::Claimed;
            if shared::came_in(&item) {
                // Its holder was this process: the shared queue delivers it again.
                changes.record(Record {
                    reason: Some("taken from the shared queue before a restart".into()),
                    ..Record::transition(item.action_id, ActionState::Shared, now)
                });
                continue;
            }
            match (l.state, mode) {
                (ActionState::Running, Mode::Auto) => {
                    let report = ExecReport {
                        kind: Some(ExecFailure::Failed),
                        ..ExecReport::default()
                    };
                    s.finish_run(
                        &item,
                        ActionState::Failed,
                        Some("interrupted".into()),
                        report,
                        now,
                        &mut changes,
                    );
                    tracing::warn!(
                        action_id = item.action_id,
                        rule = %item.rule,
                        "exec run was interrupted by a stop of switchboard; recorded as failed"
                    );
                }
                (ActionState::Queued, Mode::Auto) if item.delivery == Delivery::Exec => {
                    s.runs.push(item)
                }
                // The session that asked is gone with the process that served it.
                (ActionState::Pending, Mode::Confirm) if item.is_permission_request() => {
                    let id = item.action_id;
                    s.confirms.restore(item);
                    let reason = "ended by a restart (the session that asked is gone)";
                    s.end_relayed(id, reason, now, &mut changes);
                }
                (ActionState::Pending, Mode::Confirm) => s.confirms.restore(item),
                (_, Mode::Confirm) if item.is_permission_request() => {}
                (
                    ActionState::Approved | ActionState::Claimed | ActionState::Released,
                    Mode::Confirm,
                ) => {
                    item.kind = ItemKind::Approved;
                    s.work.push(item);
                }
                (
                    ActionState::Queued | ActionState::Claimed | ActionState::Released,
                    Mode::Auto,
                ) => s.work.push(item),
                (ActionState::Queued, Mode::Notify) => s.nudges.push(item, fired),
                _ => {}
            }
        }
        self.commit(s, changes);
        self.inner.expiry.notify_one();
        self.inner.exec_wake.notify_one();
    }

    /// Waits for exec work and marks it `running` (journalled, published); `None` once
    /// `shutdown` fires. The caller holds a concurrency slot before it asks; `on_start` runs
    /// before the `running` event is published (so a cancel prompted by the event finds the run).
    pub async fn next_exec(
        &self,
        shutdown: &CancellationToken,
        on_start: impl FnOnce(&Item),
    ) -> Option<Item> {
        let mut on_start = Some(on_start);
        loop {
            let notified = self.inner.exec_wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if shutdown.is_cancelled() {
                return None;
            }
            let started = {
                let mut s = self.lock();
                s.runs.start_next().inspect(|item| {
                    s.counters.running += 1;
                    self.inner.journal.submit(vec![Record::transition(
                        item.action_id,
                        ActionState::Running,
                        Utc::now(),
                    )]);
                })
            };
            if let Some(item) = started {
                if let Some(f) = on_start.take() {
                    f(&item);
                }
                self.publish(vec![Event::Running {
                    id: item.action_id,
                    rule: item.rule.clone(),
                }]);
                return Some(item);
            }
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                _ = notified => {}
            }
        }
    }

    /// Ends an exec run: `succeeded`, `failed` or `cancelled`, with the run's report (kind,
    /// duration, tool calls, usage) in the record.
    pub fn finish_exec(
        &self,
        id: ActionId,
        state: ActionState,
        reason: Option<String>,
        report: ExecReport,
    ) {
        let mut changes = Changes::default();
        let mut s = self.lock();
        let Some(item) = s.runs.finish(id) else {
            return;
        };
        s.finish_run(&item, state, reason, report, Utc::now(), &mut changes);
        self.commit(s, changes);
    }

    /// Each queue's capacity.
    pub fn capacity(&self) -> usize {
        self.inner
            .capacity
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Changes each queue's capacity from now on (a config reload). Items already queued
    /// stay; a smaller queue refuses (or, for nudges, evicts) until it is below the new size.
    pub fn set_capacity(&self, capacity: usize) {
        self.inner
            .capacity
            .store(capacity.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// Sets the evaluation mark a restarted daemon starts from: the messages up to `seq` were
    /// evaluated before (their actions are in the journal) or are history not evaluated again.
    pub fn start_from(&self, seq: Seq) {
        offer::advance(&self.inner.evaluated, Some(seq));
    }

    /// The dispatcher's evaluation mark: the actions of every message up to it are written
    /// (under the fsync policy), and every confirm they created is visible in
    /// [`Lifecycle::pending_confirms`].
    pub fn evaluated(&self) -> tokio::sync::watch::Receiver<Seq> {
        self.inner.evaluated.subscribe()
    }

    /// Closes the pending confirms `ids` as `resolved` by message `by_seq`, before anyone
    /// answered; ids no longer pending (answered, expired) are skipped. Returns the ids closed.
    pub fn resolve(&self, ids: &[ActionId], by_seq: Seq, now: DateTime<Utc>) -> Vec<ActionId> {
        let mut changes = Changes::default();
        let mut closed = Vec::new();
        let mut s = self.lock();
        for &id in ids {
            let reason = format!("resolved by message {by_seq}");
            let Some(item) = s.confirms.close(id, ActionState::Resolved, now, |c| {
                c.reason = Some(reason.clone())
            }) else {
                continue;
            };
            s.counters.resolved += 1;
            changes.record(Record {
                reason: Some(reason),
                ..Record::transition(id, ActionState::Resolved, now)
            });
            tracing::info!(action_id = id, rule = %item.rule, by_seq, "confirm resolved");
            changes.event(Event::Resolved {
                id,
                rule: item.rule,
                by_seq,
            });
            closed.push(id);
        }
        self.commit(s, changes);
        if !closed.is_empty() {
            self.inner.expiry.notify_one();
        }
        closed
    }

    /// Opens a session reading as `consumer`. `named` says the consumer was named explicitly
    /// (it outlives the session); `cursor` is its saved message cursor, if any: its nudges
    /// start after that message, else from now. A new session is offered every open confirm
    /// request and all unclaimed work at once; the first to open while none is open is also
    /// handed the nudges held for it (see `actions.heldNudges`).
    pub fn open_session(&self, consumer: &str, named: bool, cursor: Option<Seq>) -> SessionId {
        let mut s = self.lock();
        let id = s.sessions.next_id();
        s.open_session(id, consumer.to_string(), !named, cursor, self.inner.hold);
        id
    }

    /// Opens a session reading as its own consumer, named `PREFIX#N` with N the returned
    /// session number; nudges from now on (and the held ones, when it is the first).
    pub fn open_session_numbered(&self, prefix: &str) -> SessionId {
        let mut s = self.lock();
        let id = s.sessions.next_id();
        let consumer = fit_consumer_name(prefix, &format!("#{id}"));
        s.open_session(id, consumer, true, None, self.inner.hold);
        id
    }

    /// Ends a session: its claims go back to the queue, and its own consumer is forgotten.
    /// Returns the consumer name when it was the session's own (to drop its cursor).
    pub fn close_session(&self, session: SessionId, now: DateTime<Utc>) -> Option<String> {
        let mut changes = Changes::default();
        let mut s = self.lock();
        let (info, forgotten) = s.sessions.close(session)?;
        s.end_relays(session, now, &mut changes);
        let held = s.work.held_by(session);
        s.work.forget_pusher(session);
        // Whatever it still held may have reached its client before it ended.
        let why = "the session ended before it acknowledged the result";
        s.release(&held, why, true, now, &mut changes);
        let released = !changes.events.is_empty();
        self.commit(s, changes);
        if released {
            self.inner.wake.notify_waiters();
        }
        forgotten.then_some(info.consumer)
    }

    /// Takes up to `max` items for `consumer` without waiting: work first (claimed by
    /// `session`, to be settled with [`Lifecycle::settle`]), then the nudges and confirm
    /// requests this consumer has not seen, oldest first. Of the work, it takes the share a
    /// taker that does not wait gets while others wait (see `waiters`).
    pub fn take(&self, session: SessionId, consumer: &str, max: usize) -> Vec<Item> {
        self.take_as(waiters::Taker::Passing, session, consumer, max)
    }

    fn take_as(
        &self,
        taker: waiters::Taker,
        session: SessionId,
        consumer: &str,
        max: usize,
    ) -> Vec<Item> {
        let now = Utc::now();
        let mut changes = Changes::default();
        let mut s = self.lock();
        let mut out = s.claim_work(taker, (session, consumer), max, now, &mut changes);
        s.show_unseen(consumer, max, now, &mut out, &mut changes);
        self.commit(s, changes);
        out
    }

    /// Whether `session` is the one to push queued work `id` (to its host, as a channel
    /// notification): the first session to ask while the work is queued. Work a wait already
    /// claimed is pushed by nobody: the wait's result carries it.
    pub fn push_by(&self, id: ActionId, session: SessionId) -> bool {
        self.lock().work.push_by(id, session)
    }

    /// Whether `session` may put pending confirm `id` to its user in an elicitation form
    /// (`ask`), or that it stopped asking (`!ask`, always true): one session asks a confirm
    /// at a time, and only when the rule's `approveVia` takes `elicitation`.
    pub fn elicit(&self, id: ActionId, session: SessionId, ask: bool) -> bool {
        let mut guard = self.lock();
        let s = &mut *guard;
        if !ask {
            s.confirms.unask(id, session);
            return true;
        }
        let sessions = &s.sessions;
        s.confirms
            .ask(id, session, |other| sessions.consumer_of(other).is_some())
    }

    /// Settles claims: `delivered` once their client had the result carrying them, else they
    /// go back to the front of the queue (`released`) for the next session, marked
    /// `redelivered` when the result `maybe_seen` (it left, unacknowledged).
    pub fn settle(&self, claims: &[ActionId], delivered: bool, maybe_seen: bool, why: &str) {
        if claims.is_empty() {
            return;
        }
        let now = Utc::now();
        let mut changes = Changes::default();
        let mut s = self.lock();
        if delivered {
            for &id in claims {
                if let Some(c) = s.work.settle(id) {
                    s.counters.delivered += 1;
                    changes.record(Record {
                        consumer: Some(c.consumer.clone()),
                        ..Record::transition(id, ActionState::Delivered, now)
                    });
                    changes.event(Event::Delivered {
                        id,
                        consumer: c.consumer,
                    });
                }
            }
        } else {
            s.release(claims, why, maybe_seen, now, &mut changes);
        }
        let released = !delivered && !changes.events.is_empty();
        self.commit(s, changes);
        if released {
            self.inner.wake.notify_waiters();
        }
    }

    /// Takes items for `consumer`, waiting up to `timeout` for the first one; wakes the moment
    /// an item is queued (no polling). Returns empty, having taken nothing, once `cancel` fires.
    /// While several sessions wait, the work is handed round them, the longest waiting first.
    pub async fn wait(
        &self,
        session: SessionId,
        consumer: &str,
        max: usize,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Vec<Item> {
        /// Leaves the round of waits when the wait ends, however it ends.
        struct Waiting<'a>(&'a Lifecycle, u64);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                let mut s = self.0.lock();
                s.waiters.leave(self.1);
                // Its share, if it left without it, goes round the others.
                let queued = s.work.len() > 0 && s.waiters.len() > 0;
                drop(s);
                if queued {
                    self.0.inner.wake.notify_waiters();
                }
            }
        }
        if max == 0 {
            return Vec::new();
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let ticket = self.lock().waiters.join(session, consumer, max);
        let _waiting = Waiting(self, ticket);
        loop {
            let notified = self.inner.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if cancel.is_cancelled() {
                return Vec::new();
            }
            let items = self.take_as(waiters::Taker::Waiting(ticket), session, consumer, max);
            if !items.is_empty() {
                return items;
            }
            let _idle = self.inner.sharing.idle();
            tokio::select! {
                _ = cancel.cancelled() => return Vec::new(),
                _ = tokio::time::sleep_until(deadline) => return Vec::new(),
                _ = notified => {}
            }
        }
    }

    /// Expires every confirm whose time has come; returns the next expiry, if any.
    pub fn expire_due(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut changes = Changes::default();
        let mut s = self.lock();
        for id in s.confirms.due(now) {
            if let Some(item) = s.confirms.close(id, ActionState::Expired, now, |_| {}) {
                s.counters.expired += 1;
                changes.record(Record::transition(id, ActionState::Expired, now));
                tracing::info!(action_id = id, rule = %item.rule, "confirm expired unanswered");
                changes.event(Event::Expired {
                    id,
                    rule: item.rule,
                });
            }
        }
        let next = s.confirms.next_expiry();
        self.commit(s, changes);
        next
    }

    /// Runs [`Lifecycle::expire_due`] whenever the earliest expiry comes, until `shutdown`.
    pub async fn run_expiry(&self, shutdown: CancellationToken) {
        loop {
            let changed = self.inner.expiry.notified();
            let next = self.expire_due(Utc::now());
            let sleep = next.map(|t| {
                (t - Utc::now())
                    .to_std()
                    .unwrap_or(Duration::ZERO)
                    .max(Duration::from_millis(1))
            });
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = changed => {}
                _ = async {
                    match sleep {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    }

    /// Writes and syncs every transition decided so far. True once they are on disk; false
    /// while the journal fails (they stay held and are written when it recovers).
    pub async fn flush(&self) -> bool {
        self.inner.journal.flush().await
    }

    /// Transitions decided and not written yet (held while the journal fails): what a stop
    /// now would lose.
    pub fn unsaved(&self) -> u64 {
        self.inner.journal.unwritten()
    }

    /// Writes and syncs every transition decided so far, then stops the journal's writer
    /// thread (at shutdown, once nothing decides any more); nothing decided afterwards is
    /// written.
    pub async fn close(&self) {
        self.inner.journal.close().await;
    }

    /// Pending confirm requests, oldest first.
    pub fn pending_confirms(&self) -> Vec<Item> {
        self.lock().confirms.items().cloned().collect()
    }

    /// Pending confirm `id`, if it still is.
    pub fn pending_confirm(&self, id: ActionId) -> Option<Item> {
        self.lock().confirms.get(id).cloned()
    }

    /// How confirm `id` was closed, while it is remembered (the last few thousand).
    pub fn closed_confirm(&self, id: ActionId) -> Option<ClosedConfirm> {
        self.lock().confirms.closed(id).cloned()
    }

    /// The last `limit` confirms closed since start, oldest first: how each ended.
    pub fn closed_confirms(&self, limit: usize) -> Vec<ClosedConfirm> {
        self.lock().confirms.recently_closed(limit)
    }

    /// The consumers forgotten since last asked, to stay within `actions.maxConsumers`: their
    /// cursors go too.
    pub fn take_forgotten(&self) -> Vec<String> {
        self.lock().sessions.take_forgotten()
    }

    /// Remembers consumers known before a restart (their saved cursors), oldest use first, so
    /// that they count towards `actions.maxConsumers` and are forgotten in turn.
    pub fn remember_consumers<'a>(&self, consumers: impl IntoIterator<Item = (&'a str, Seq)>) {
        let mut s = self.lock();
        for (name, cursor) in consumers {
            s.ensure_consumer(name, Some(cursor));
        }
    }

    /// The consumer live session `session` reads as.
    pub fn consumer_of(&self, session: SessionId) -> Option<String> {
        self.lock()
            .sessions
            .consumer_of(session)
            .map(str::to_string)
    }

    /// Whether a live session reads as `consumer`.
    pub fn consumer_in_use(&self, consumer: &str) -> bool {
        self.lock().sessions.in_use(consumer)
    }

    /// Items `consumer` would get now, without taking them.
    pub fn queued_for(&self, consumer: &str) -> usize {
        let s = self.lock();
        let pos = s.sessions.position(consumer).unwrap_or(sessions::Consumer {
            nudges_after: s.nudges.last(),
            confirms_after: 0,
        });
        s.work.len_for(consumer)
            + s.nudges.count_after(pos.nudges_after)
            + s.confirms.ids_after(pos.confirms_after).count()
    }

    /// Every transition from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    /// Queue depths and counters.
    pub fn stats(&self) -> LifecycleStats {
        let s = self.lock();
        let (nudges_waiting, nudges_held) = match s.sessions.earliest_nudge_position() {
            Some(after) => (s.nudges.undelivered_after(after), 0),
            None => (0, s.nudges.held(self.inner.hold, Utc::now()).0),
        };
        LifecycleStats {
            capacity: self.capacity(),
            nudges_undelivered: s.nudges.undelivered(),
            nudges_waiting,
            nudges_held,
            pending_confirms: s.confirms.len(),
            queued_work: s.work.len(),
            claimed_work: s.work.claimed(),
            sessions: s.sessions.len(),
            exec_queued: s.runs.queued(),
            exec_running: s.runs.running(),
            counters: s.counters.clone(),
            work_outgoing: s.outbox.len(),
            actions_journal: self.inner.journal.status(),
        }
    }

    /// Pending confirms in the short form `inbox_stats` shows.
    pub fn pending_summary(&self) -> Vec<PendingConfirm> {
        self.pending_confirms()
            .into_iter()
            .map(|i| PendingConfirm {
                id: i.action_id,
                rule: i.rule,
                seq: i.message.seq,
                expires_at: i.expires_at,
            })
            .collect()
    }
}

impl State {
    /// Opens session `id` reading as `consumer`, from its position (a new consumer: after
    /// `cursor`, or from now). The first session to open while none is open is handed the
    /// nudges `hold` keeps: its position moves back to just before them.
    fn open_session(
        &mut self,
        id: SessionId,
        consumer: String,
        ephemeral: bool,
        cursor: Option<Seq>,
        hold: nudges::Hold,
    ) {
        let first = self.sessions.len() == 0;
        let mut pos = self.ensure_consumer(&consumer, cursor);
        if first
            && let Some(after) = self.nudges.hand_over(hold, Utc::now())
            && after < pos.nudges_after
        {
            pos.nudges_after = after;
            self.sessions.set_position(&consumer, pos);
        }
        self.sessions.open(id, consumer, ephemeral);
    }

    /// Consumer `name`'s position; a new consumer starts after its saved message `cursor`, or
    /// from now.
    fn ensure_consumer(&mut self, name: &str, cursor: Option<Seq>) -> sessions::Consumer {
        if let Some(c) = self.sessions.position(name) {
            return c;
        }
        let c = sessions::Consumer {
            nudges_after: self.nudges.start_after(cursor),
            confirms_after: 0,
        };
        self.sessions.set_position(name, c);
        c
    }

    /// Claims up to `max` pieces of queued work for `session`, reading as `consumer`: the
    /// share of `taker` among the waits in progress.
    fn claim_work(
        &mut self,
        taker: waiters::Taker,
        (session, consumer): (SessionId, &str),
        max: usize,
        now: DateTime<Utc>,
        changes: &mut Changes,
    ) -> Vec<Item> {
        let share = self.waiters.share(taker, consumer, max, self.work.queued());
        let mut out = Vec::new();
        for id in share {
            let Some(item) = self.work.claim_queued(id, session, consumer) else {
                continue;
            };
            self.counters.claimed += 1;
            changes.record(Record {
                consumer: Some(consumer.to_string()),
                ..Record::transition(item.action_id, ActionState::Claimed, now)
            });
            changes.event(Event::Claimed {
                id: item.action_id,
                consumer: consumer.to_string(),
            });
            out.push(item);
        }
        out
    }

    /// Adds to `out`, up to `max` items in all, the nudges and confirm requests `consumer`
    /// has not seen, oldest first, and moves its position past them. A nudge's first delivery
    /// is a transition.
    fn show_unseen(
        &mut self,
        consumer: &str,
        max: usize,
        now: DateTime<Utc>,
        out: &mut Vec<Item>,
        changes: &mut Changes,
    ) {
        let mut pos = self.ensure_consumer(consumer, None);
        let mut unseen: Vec<(ActionId, bool)> = self
            .nudges
            .ids_after(pos.nudges_after)
            .map(|id| (id, true))
            .chain(
                self.confirms
                    .ids_after(pos.confirms_after)
                    .map(|id| (id, false)),
            )
            .collect();
        unseen.sort_unstable();
        for (id, is_nudge) in unseen {
            if out.len() >= max {
                break;
            }
            if is_nudge {
                pos.nudges_after = id;
                if !self.nudges.admits(id, consumer) {
                    continue;
                }
                let Some((item, first)) = self.nudges.deliver(id) else {
                    continue;
                };
                if first {
                    self.counters.delivered += 1;
                    changes.record(Record {
                        consumer: Some(consumer.to_string()),
                        ..Record::transition(id, ActionState::Delivered, now)
                    });
                    changes.event(Event::Delivered {
                        id,
                        consumer: consumer.to_string(),
                    });
                }
                out.push(item);
            } else {
                // Relayed permission requests are for people, not agents (see `relay`); the
                // position does not pass them, so that an older id still on its way is seen.
                if self.relays.contains(id) {
                    continue;
                }
                pos.confirms_after = id;
                if let Some(item) = self.confirms.get(id)
                    && item.consumers.admits(consumer)
                {
                    out.push(item.clone());
                }
            }
        }
        self.sessions.set_position(consumer, pos);
    }

    /// Gives the claims `ids` back: their work goes to the front of the queue, marked
    /// `redelivered` when its result `maybe_seen`.
    fn release(
        &mut self,
        ids: &[ActionId],
        why: &str,
        maybe_seen: bool,
        now: DateTime<Utc>,
        changes: &mut Changes,
    ) {
        for (id, consumer) in self.work.release(ids, maybe_seen) {
            self.counters.released += 1;
            changes.record(Record {
                consumer: Some(consumer.clone()),
                reason: Some(why.to_string()),
                redelivered: maybe_seen,
                ..Record::transition(id, ActionState::Released, now)
            });
            changes.event(Event::Released {
                id,
                consumer,
                reason: why.to_string(),
            });
        }
    }

    /// Records the end of an exec run of `item`.
    fn finish_run(
        &mut self,
        item: &Item,
        state: ActionState,
        reason: Option<String>,
        report: ExecReport,
        now: DateTime<Utc>,
        changes: &mut Changes,
    ) {
        match state {
            ActionState::Succeeded => self.counters.succeeded += 1,
            ActionState::Cancelled => self.counters.cancelled += 1,
            _ => self.counters.failed += 1,
        }
        if let Some(kind) = report.kind {
            *self.counters.exec_failures.entry(kind).or_default() += 1;
        }
        changes.event(Event::Finished {
            id: item.action_id,
            rule: item.rule.clone(),
            state,
            kind: report.kind,
            reason: reason.clone(),
            duration_ms: report.duration_ms,
            tool_calls: report.tool_calls.len(),
        });
        changes.record(Record {
            reason,
            exec: Some(report),
            ..Record::transition(item.action_id, state, now)
        });
    }

    /// Records action `id` as dropped by a full queue (refused, or for a nudge evicted).
    fn drop_action(
        &mut self,
        mode: Mode,
        id: ActionId,
        rule: &str,
        reason: String,
        now: DateTime<Utc>,
        changes: &mut Changes,
    ) {
        *self.counters.dropped.entry(mode).or_default() += 1;
        self.drops.count();
        changes.record(Record {
            at: Some(now),
            id: Some(id),
            state: Some(ActionState::Dropped),
            reason: Some(reason.clone()),
            ..Record::default()
        });
        changes.event(Event::Dropped {
            id,
            rule: rule.into(),
            mode,
            reason,
        });
    }
}

/// Ids of the work items among `items` (what a wait claimed).
pub fn claims_of(items: &[Item]) -> Vec<ActionId> {
    items
        .iter()
        .filter(|i| i.kind.is_work())
        .map(|i| i.action_id)
        .collect()
}

#[cfg(test)]
mod tests;
