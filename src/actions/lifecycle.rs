//! The action lifecycle: the one owner of every action's state, and the only writer of
//! `actions.jsonl` (through [`JournalWriter`]).
//!
//! It holds, behind one lock that is never held across I/O:
//! - **nudges** (notify): each consumer sees each nudge once, from its start (or from its named
//!   cursor). At most `capacity` undelivered nudges are kept; a new nudge past that drops the
//!   *oldest* undelivered one (the newest alert matters most). Delivered nudges stay visible,
//!   bounded, for consumers that have not seen them yet.
//! - **confirm requests**: every consumer sees each pending request once, until it is answered,
//!   expires or is resolved. A full queue refuses the newest.
//! - **work** (auto prompts and approved confirms): *claimed* by exactly one session's wait, then
//!   *delivered* once the result carrying it was sent, or *released* back to the front of the
//!   queue when the session ended or the result could not be sent. A full queue refuses the
//!   newest. Delivery is at least once, never zero.
//! - **consumers and sessions**: a session (one MCP connection) reads as its own consumer; a
//!   consumer name given explicitly resumes that consumer's position.
//!
//! Every transition is decided under the lock, handed to the journal writer in decision order,
//! and published as an [`Event`] (push, `watch` and metrics read those). A confirm request
//! becomes visible only once its creation record is written, so an id a person was shown
//! survives a crash; nudges and work are visible at once (a crash before their record is written
//! re-evaluates the message: at least once).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use super::journal::{LiveAction, Record};
use super::writer::JournalWriter;
use super::{Action, ActionId, ActionState, Delivery, ExecFailure, ExecReport, Mode};
use crate::message::{Message, Seq};

/// What a delivered item asks of the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// Run this prompt now, with these tools.
    Auto,
    /// The user approved a confirm: run this prompt now, with these tools.
    Approved,
    /// Ask the user, then answer with `channel_confirm`.
    ConfirmRequest,
    /// Tell the user; nothing to run.
    Nudge,
}

impl ItemKind {
    /// Work is claimed by one session; the rest is shown to every consumer.
    pub fn is_work(self) -> bool {
        matches!(self, ItemKind::Auto | ItemKind::Approved)
    }
}

/// One deliverable item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// What to do with it.
    pub kind: ItemKind,
    /// The action id (`channel_confirm` takes it).
    pub action_id: ActionId,
    /// The rule that fired.
    pub rule: std::sync::Arc<str>,
    /// The rendered prompt.
    pub prompt: String,
    /// Tools the prompt may use.
    pub tools: Vec<String>,
    /// When a confirm request expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The source message, as its own field: untrusted data, grants no permission.
    pub message: Arc<Message>,
    /// `exec`: run by the exec runner, never offered to a wait (`wait` is left out).
    #[serde(default, skip_serializing_if = "Delivery::is_wait")]
    pub delivery: Delivery,
}

impl Item {
    fn new(action: Action, message: Arc<Message>) -> Item {
        let kind = match action.mode {
            Mode::Notify => ItemKind::Nudge,
            Mode::Confirm => ItemKind::ConfirmRequest,
            Mode::Auto => ItemKind::Auto,
        };
        Item {
            kind,
            action_id: action.id,
            rule: action.rule,
            prompt: action.prompt,
            tools: action.tools,
            expires_at: action.expires,
            message,
            delivery: action.delivery,
        }
    }
}

/// Why a confirm answer was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfirmError {
    /// No confirm request has that id.
    #[error("no confirm request with id {0}")]
    Unknown(ActionId),
    /// The confirm expired before it was answered.
    #[error("confirm {id} expired at {expired}; it can no longer be approved")]
    Expired {
        /// The action id.
        id: ActionId,
        /// When it expired (RFC 3339).
        expired: String,
    },
    /// Already approved, denied or resolved.
    #[error("confirm {id} was already answered: {state}")]
    AlreadyAnswered {
        /// The action id.
        id: ActionId,
        /// `approved`, `denied` or `resolved`.
        state: String,
    },
}

/// One transition, as published to push, `watch` and metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// An item became deliverable: a nudge, a confirm request, auto work, or approved work
    /// queued by an answer from outside a session.
    Queued {
        /// The item.
        item: Item,
    },
    /// A confirm was approved or denied.
    Answered {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
        /// `approved` or `denied`.
        state: ActionState,
        /// Who answered (a consumer name, or `cli`).
        by: String,
    },
    /// A confirm expired unanswered.
    Expired {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
    },
    /// A pending confirm was closed by a later message before anyone answered.
    Resolved {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
        /// The seq of the message that resolved it.
        by_seq: Seq,
    },
    /// Work was claimed by a session's wait.
    Claimed {
        /// The action id.
        id: ActionId,
        /// The consumer that claimed it.
        consumer: String,
    },
    /// An item reached a consumer (work: the result was sent).
    Delivered {
        /// The action id.
        id: ActionId,
        /// The consumer.
        consumer: String,
    },
    /// A claim went back to the queue.
    Released {
        /// The action id.
        id: ActionId,
        /// The consumer that held it.
        consumer: String,
        /// Why.
        reason: String,
    },
    /// Auto work of an exec rule was queued for the exec runner (never offered to sessions).
    ExecQueued {
        /// The item.
        item: Item,
    },
    /// The exec runner started a headless host on auto work.
    Running {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
    },
    /// An exec run ended: `succeeded`, `failed` or `cancelled`.
    Finished {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
        /// `succeeded`, `failed` or `cancelled`.
        state: ActionState,
        /// Why it failed or was cancelled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<ExecFailure>,
        /// The reason, for people.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// How long it ran.
        duration_ms: u64,
        /// How many tool calls it made.
        tool_calls: usize,
    },
    /// An action was refused or evicted by a full queue.
    Dropped {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
        /// The rule's mode.
        mode: Mode,
        /// Which queue and why.
        reason: String,
    },
}

/// A session's handle in the lifecycle (one per MCP connection).
pub type SessionId = u64;

/// How many answered or expired confirm ids are remembered, for clear errors.
const ANSWERED_MEMORY: usize = 4096;

/// How often a burst of drops is logged.
const DROP_LOG_EVERY: Duration = Duration::from_secs(5);

struct Nudge {
    item: Item,
    delivered: bool,
}

/// One consumer's position: the newest nudge and confirm request it has seen.
#[derive(Clone, Copy, Debug, Default)]
struct Consumer {
    nudges_after: ActionId,
    confirms_after: ActionId,
}

struct Session {
    consumer: String,
    /// The consumer is this session's own (not named): forgotten when the session ends.
    ephemeral: bool,
}

struct Claim {
    item: Item,
    session: SessionId,
    consumer: String,
}

#[derive(Default)]
struct State {
    nudges: VecDeque<Nudge>,
    confirms: BTreeMap<ActionId, Item>,
    /// Confirm requests whose creation record is on its way to the disk.
    staged: usize,
    work: VecDeque<Item>,
    /// Auto work for the exec runner, oldest first.
    exec: VecDeque<Item>,
    /// Exec runs in flight.
    running: HashMap<ActionId, Item>,
    claims: HashMap<ActionId, Claim>,
    consumers: HashMap<String, Consumer>,
    sessions: HashMap<SessionId, Session>,
    next_session: SessionId,
    /// The highest nudge id issued so far: where a new session's nudges start.
    last_nudge: ActionId,
    answered: HashMap<ActionId, (ActionState, Option<DateTime<Utc>>)>,
    answered_order: VecDeque<ActionId>,
    counters: Counters,
    drops_unlogged: u64,
    drop_logged_at: Option<Instant>,
}

/// Counters since start, by transition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Actions dropped by a full queue, by mode.
    pub dropped: BTreeMap<Mode, u64>,
    /// Work claimed by a wait.
    pub claimed: u64,
    /// Items delivered (first delivery of a nudge; work whose result was sent).
    pub delivered: u64,
    /// Claims given back.
    pub released: u64,
    /// Confirms approved.
    pub approved: u64,
    /// Confirms denied.
    pub denied: u64,
    /// Confirms expired.
    pub expired: u64,
    /// Confirms resolved by a later message.
    #[serde(default)]
    pub resolved: u64,
    /// Exec runs started.
    #[serde(default)]
    pub running: u64,
    /// Exec runs that succeeded.
    #[serde(default)]
    pub succeeded: u64,
    /// Exec runs that failed (any kind but `cancelled`).
    #[serde(default)]
    pub failed: u64,
    /// Exec runs cancelled.
    #[serde(default)]
    pub cancelled: u64,
    /// Exec runs that did not succeed, by kind (`cancelled` included).
    #[serde(default)]
    pub exec_failures: BTreeMap<ExecFailure, u64>,
}

/// Queue depths and counters, for `inbox_stats`, `stats` and `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleStats {
    /// Each queue's capacity.
    pub capacity: usize,
    /// Nudges no consumer has seen yet.
    pub nudges_undelivered: usize,
    /// Confirms waiting for an answer.
    pub pending_confirms: usize,
    /// Work waiting for a session.
    pub queued_work: usize,
    /// Work claimed by a wait, not yet delivered.
    pub claimed_work: usize,
    /// Live sessions.
    pub sessions: usize,
    /// Auto work waiting for an exec slot.
    #[serde(default)]
    pub exec_queued: usize,
    /// Exec runs in flight.
    #[serde(default)]
    pub exec_running: usize,
    /// Counters since start.
    pub counters: Counters,
    /// `ok`, `failing: CAUSE`, or `memory`.
    pub actions_journal: String,
}

/// A pending confirm, for `pending` and `inbox_stats`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingConfirm {
    /// The action id.
    pub id: ActionId,
    /// The rule.
    pub rule: std::sync::Arc<str>,
    /// The source message's seq.
    pub seq: Seq,
    /// When it expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

/// The outcome of offering a batch of actions.
#[derive(Debug, Default)]
pub struct Offered {
    /// Items queued, in id order.
    pub queued: Vec<Item>,
    /// Actions refused (or, for nudges, evicted) because their queue was full.
    pub dropped: Vec<ActionId>,
}

struct Inner {
    state: Mutex<State>,
    journal: JournalWriter,
    events: broadcast::Sender<Event>,
    /// Woken when something becomes deliverable (queued, released, approved).
    wake: Notify,
    /// Woken when the earliest confirm expiry may have changed.
    expiry: Notify,
    /// The dispatcher's evaluation mark, once the confirms it created are visible (the
    /// resolve pass follows it).
    evaluated: tokio::sync::watch::Sender<Seq>,
    /// Each queue's capacity; `actions.queueCapacity`, changed live by a config reload.
    capacity: std::sync::atomic::AtomicUsize,
    /// Woken when exec work is queued.
    exec_wake: Notify,
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
    /// A lifecycle whose queues hold `capacity` items each, journaling through `journal`.
    pub fn new(capacity: usize, journal: JournalWriter) -> Lifecycle {
        Lifecycle {
            inner: Arc::new(Inner {
                state: Mutex::default(),
                journal,
                events: broadcast::channel(4096).0,
                wake: Notify::new(),
                expiry: Notify::new(),
                evaluated: tokio::sync::watch::Sender::new(0),
                capacity: std::sync::atomic::AtomicUsize::new(capacity.max(1)),
                exec_wake: Notify::new(),
            }),
        }
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
        let mut records = Vec::new();
        let mut events = Vec::new();
        let mut s = self.inner.state.lock().unwrap();
        for l in live {
            let mode = l.action.mode;
            let mut item = Item::new(l.action, Arc::new(l.message));
            match (l.state, mode) {
                (ActionState::Running, Mode::Auto) => {
                    let report = ExecReport {
                        kind: Some(ExecFailure::Failed),
                        ..ExecReport::default()
                    };
                    s.finish(
                        &item,
                        ActionState::Failed,
                        Some("interrupted".into()),
                        report,
                        now,
                        &mut records,
                        &mut events,
                    );
                    tracing::warn!(
                        action_id = item.action_id,
                        rule = %item.rule,
                        "exec run was interrupted by a stop of switchboard; recorded as failed"
                    );
                }
                (ActionState::Queued, Mode::Auto) if item.delivery == Delivery::Exec => {
                    s.exec.push_back(item)
                }
                (ActionState::Pending, Mode::Confirm) => {
                    s.confirms.insert(item.action_id, item);
                }
                (
                    ActionState::Approved | ActionState::Claimed | ActionState::Released,
                    Mode::Confirm,
                ) => {
                    item.kind = ItemKind::Approved;
                    s.work.push_back(item);
                }
                (
                    ActionState::Queued | ActionState::Claimed | ActionState::Released,
                    Mode::Auto,
                ) => s.work.push_back(item),
                (ActionState::Queued, Mode::Notify) => {
                    s.last_nudge = s.last_nudge.max(item.action_id);
                    s.nudges.push_back(Nudge {
                        item,
                        delivered: false,
                    });
                }
                _ => {}
            }
        }
        self.inner.journal.submit(records);
        drop(s);
        self.publish(events);
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
                let mut s = self.inner.state.lock().unwrap();
                s.exec.pop_front().inspect(|item| {
                    s.counters.running += 1;
                    s.running.insert(item.action_id, item.clone());
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
        let mut records = Vec::new();
        let mut events = Vec::new();
        {
            let mut s = self.inner.state.lock().unwrap();
            let Some(item) = s.running.remove(&id) else {
                return;
            };
            s.finish(
                &item,
                state,
                reason,
                report,
                Utc::now(),
                &mut records,
                &mut events,
            );
            self.inner.journal.submit(records);
        }
        self.publish(events);
    }

    /// Offers the actions of evaluated messages; `evaluated` is the dispatcher's new mark,
    /// written in the same journal write as the actions. Returns once confirm requests are on
    /// disk and visible; nudges and work are visible before.
    pub async fn offer(
        &self,
        actions: Vec<(Action, Arc<Message>)>,
        evaluated: Option<Seq>,
        now: DateTime<Utc>,
    ) -> Offered {
        let mut out = Offered::default();
        let mut records = Vec::with_capacity(actions.len() + 1);
        let mut events = Vec::new();
        let mut staged = Vec::new();
        let mut exec_queued = false;
        let cap = self.capacity();
        {
            let mut s = self.inner.state.lock().unwrap();
            let mut undelivered = s.nudges.iter().filter(|n| !n.delivered).count();
            for (action, message) in actions {
                match action.mode {
                    Mode::Notify if undelivered >= cap => {
                        // The oldest undelivered nudge makes room for the newest.
                        let pos = s
                            .nudges
                            .iter()
                            .position(|n| !n.delivered)
                            .expect("undelivered nudges exist");
                        let old = s.nudges.remove(pos).expect("position is valid").item;
                        let reason = format!("notify queue full ({cap}): oldest nudge dropped");
                        s.drop_one(
                            Mode::Notify,
                            old.action_id,
                            &old.rule,
                            &reason,
                            now,
                            &mut records,
                            &mut events,
                        );
                        out.dropped.push(old.action_id);
                        undelivered -= 1;
                    }
                    Mode::Confirm | Mode::Auto
                        if (action.mode == Mode::Confirm && s.confirms.len() + s.staged >= cap)
                            || (action.mode == Mode::Auto
                                && action.delivery == Delivery::Wait
                                && s.work.len() >= cap)
                            || (action.mode == Mode::Auto
                                && action.delivery == Delivery::Exec
                                && s.exec.len() >= cap) =>
                    {
                        let reason = format!("{} queue full ({cap}): newest refused", action.mode);
                        s.drop_one(
                            action.mode,
                            action.id,
                            &action.rule,
                            &reason,
                            now,
                            &mut records,
                            &mut events,
                        );
                        out.dropped.push(action.id);
                        continue;
                    }
                    _ => {}
                }
                let state = if action.mode == Mode::Confirm {
                    ActionState::Pending
                } else {
                    ActionState::Queued
                };
                records.push(Record::created(&action, state, &message));
                let item = Item::new(action, message);
                match item.kind {
                    ItemKind::Nudge => {
                        undelivered += 1;
                        s.last_nudge = s.last_nudge.max(item.action_id);
                        s.nudges.push_back(Nudge {
                            item: item.clone(),
                            delivered: false,
                        });
                    }
                    ItemKind::ConfirmRequest => {
                        s.staged += 1;
                        staged.push(item.clone());
                        continue;
                    }
                    _ if item.delivery == Delivery::Exec => {
                        exec_queued = true;
                        s.exec.push_back(item.clone())
                    }
                    _ => s.work.push_back(item.clone()),
                }
                if item.delivery == Delivery::Exec {
                    // Its own event: nothing that pushes `queued` work to sessions sees it.
                    events.push(Event::ExecQueued { item: item.clone() });
                } else {
                    events.push(Event::Queued { item: item.clone() });
                }
                out.queued.push(item);
            }
            s.trim_delivered_nudges(cap);
            if let Some(seq) = evaluated {
                records.push(Record {
                    at: Some(now),
                    evaluated: Some(seq),
                    ..Record::default()
                });
            }
            s.log_drops(cap);
            if staged.is_empty() {
                self.inner.journal.submit(records);
                records = Vec::new();
            }
        }
        if !events.is_empty() {
            self.publish(events);
            self.inner.wake.notify_waiters();
        }
        if exec_queued {
            self.inner.exec_wake.notify_one();
        }
        if staged.is_empty() {
            self.mark_evaluated(evaluated);
            return out;
        }
        // Confirm ids are shown to people: visible only once their record is on disk.
        let _ = self.inner.journal.submit_acked(records).await;
        let mut events = Vec::with_capacity(staged.len());
        {
            let mut s = self.inner.state.lock().unwrap();
            for item in staged {
                s.staged -= 1;
                s.confirms.insert(item.action_id, item.clone());
                events.push(Event::Queued { item: item.clone() });
                out.queued.push(item);
            }
        }
        out.queued.sort_by_key(|i| i.action_id);
        self.publish(events);
        self.inner.expiry.notify_one();
        self.inner.wake.notify_waiters();
        self.mark_evaluated(evaluated);
        out
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

    fn mark_evaluated(&self, evaluated: Option<Seq>) {
        if let Some(seq) = evaluated {
            self.inner.evaluated.send_if_modified(|mark| {
                let newer = seq > *mark;
                *mark = (*mark).max(seq);
                newer
            });
        }
    }

    /// The dispatcher's evaluation mark: every confirm created by a message up to it is
    /// visible in [`Lifecycle::pending_confirms`].
    pub fn evaluated(&self) -> tokio::sync::watch::Receiver<Seq> {
        self.inner.evaluated.subscribe()
    }

    /// Closes the pending confirms `ids` as `resolved` by message `by_seq`, before anyone
    /// answered; ids no longer pending (answered, expired) are skipped. Returns the ids closed.
    pub fn resolve(&self, ids: &[ActionId], by_seq: Seq, now: DateTime<Utc>) -> Vec<ActionId> {
        let mut records = Vec::new();
        let mut events = Vec::new();
        let mut closed = Vec::new();
        {
            let mut s = self.inner.state.lock().unwrap();
            for &id in ids {
                let Some(item) = s.confirms.remove(&id) else {
                    continue;
                };
                s.remember_answer(id, ActionState::Resolved, item.expires_at);
                s.counters.resolved += 1;
                records.push(Record {
                    reason: Some(format!("resolved by message {by_seq}")),
                    ..Record::transition(id, ActionState::Resolved, now)
                });
                tracing::info!(action_id = id, rule = %item.rule, by_seq, "confirm resolved");
                events.push(Event::Resolved {
                    id,
                    rule: item.rule,
                    by_seq,
                });
                closed.push(id);
            }
            self.inner.journal.submit(records);
        }
        self.publish(events);
        if !closed.is_empty() {
            self.inner.expiry.notify_one();
        }
        closed
    }

    /// Opens a session reading as `consumer`. `named` says the consumer was named explicitly
    /// (it outlives the session); `cursor` is its saved message cursor, if any: its nudges
    /// start after that message, else from now. A new session is offered every open confirm
    /// request and all unclaimed work at once.
    pub fn open_session(&self, consumer: &str, named: bool, cursor: Option<Seq>) -> SessionId {
        let mut s = self.inner.state.lock().unwrap();
        s.next_session += 1;
        let id = s.next_session;
        s.ensure_consumer(consumer, cursor);
        s.sessions.insert(
            id,
            Session {
                consumer: consumer.to_string(),
                ephemeral: !named,
            },
        );
        id
    }

    /// Opens a session reading as its own consumer, named `PREFIX#N` with N the returned
    /// session number; nudges from now on.
    pub fn open_session_numbered(&self, prefix: &str) -> SessionId {
        let mut s = self.inner.state.lock().unwrap();
        s.next_session += 1;
        let id = s.next_session;
        let consumer = format!("{prefix}#{id}");
        s.ensure_consumer(&consumer, None);
        s.sessions.insert(
            id,
            Session {
                consumer,
                ephemeral: true,
            },
        );
        id
    }

    /// Makes sure `consumer` exists (a tool's explicit `consumer` argument), starting after
    /// `cursor` when it has one.
    pub fn ensure_consumer(&self, consumer: &str, cursor: Option<Seq>) {
        self.inner
            .state
            .lock()
            .unwrap()
            .ensure_consumer(consumer, cursor);
    }

    /// Ends a session: its claims go back to the queue, and its own consumer is forgotten.
    /// Returns the consumer name when it was the session's own (to drop its cursor).
    pub fn close_session(&self, session: SessionId, now: DateTime<Utc>) -> Option<String> {
        let (events, forgotten) = {
            let mut s = self.inner.state.lock().unwrap();
            let info = s.sessions.remove(&session)?;
            let held: Vec<ActionId> = s
                .claims
                .iter()
                .filter(|(_, c)| c.session == session)
                .map(|(id, _)| *id)
                .collect();
            let mut records = Vec::new();
            let mut events = Vec::new();
            s.release(&held, "the session ended", now, &mut records, &mut events);
            self.inner.journal.submit(records);
            let shared = s.sessions.values().any(|o| o.consumer == info.consumer);
            let forgotten = (info.ephemeral && !shared).then(|| {
                s.consumers.remove(&info.consumer);
                info.consumer
            });
            (events, forgotten)
        };
        if !events.is_empty() {
            self.publish(events);
            self.inner.wake.notify_waiters();
        }
        forgotten
    }

    /// Takes up to `max` items for `consumer` without waiting: work first (claimed by
    /// `session`, to be settled with [`Lifecycle::settle`]), then the nudges and confirm
    /// requests this consumer has not seen, oldest first.
    pub fn take(&self, session: SessionId, consumer: &str, max: usize) -> Vec<Item> {
        let now = Utc::now();
        let mut records = Vec::new();
        let mut events = Vec::new();
        let out = {
            let mut s = self.inner.state.lock().unwrap();
            let s = &mut *s;
            let mut out = Vec::new();
            while out.len() < max {
                let Some(item) = s.work.pop_front() else {
                    break;
                };
                records.push(Record {
                    consumer: Some(consumer.to_string()),
                    ..Record::transition(item.action_id, ActionState::Claimed, now)
                });
                events.push(Event::Claimed {
                    id: item.action_id,
                    consumer: consumer.to_string(),
                });
                s.counters.claimed += 1;
                s.claims.insert(
                    item.action_id,
                    Claim {
                        item: item.clone(),
                        session,
                        consumer: consumer.to_string(),
                    },
                );
                out.push(item);
            }
            let pos = s.ensure_consumer(consumer, None);
            let mut shown: Vec<(ActionId, bool)> = s
                .nudges
                .iter()
                .filter(|n| n.item.action_id > pos.nudges_after)
                .map(|n| (n.item.action_id, true))
                .chain(
                    s.confirms
                        .range(pos.confirms_after + 1..)
                        .map(|(id, _)| (*id, false)),
                )
                .collect();
            shown.sort_unstable();
            let mut pos = pos;
            for (id, is_nudge) in shown {
                if out.len() >= max {
                    break;
                }
                if is_nudge {
                    pos.nudges_after = id;
                    let Some(n) = s.nudges.iter_mut().find(|n| n.item.action_id == id) else {
                        continue;
                    };
                    if !n.delivered {
                        n.delivered = true;
                        s.counters.delivered += 1;
                        records.push(Record {
                            consumer: Some(consumer.to_string()),
                            ..Record::transition(id, ActionState::Delivered, now)
                        });
                        events.push(Event::Delivered {
                            id,
                            consumer: consumer.to_string(),
                        });
                    }
                    out.push(n.item.clone());
                } else {
                    pos.confirms_after = id;
                    if let Some(item) = s.confirms.get(&id) {
                        out.push(item.clone());
                    }
                }
            }
            s.consumers.insert(consumer.to_string(), pos);
            self.inner.journal.submit(records);
            out
        };
        self.publish(events);
        out
    }

    /// Settles claims: `delivered` once the result carrying them was sent, else they go back
    /// to the front of the queue (`released`) for the next session.
    pub fn settle(&self, claims: &[ActionId], delivered: bool, why: &str) {
        if claims.is_empty() {
            return;
        }
        let now = Utc::now();
        let mut records = Vec::new();
        let mut events = Vec::new();
        {
            let mut s = self.inner.state.lock().unwrap();
            if delivered {
                for id in claims {
                    if let Some(c) = s.claims.remove(id) {
                        s.counters.delivered += 1;
                        records.push(Record {
                            consumer: Some(c.consumer.clone()),
                            ..Record::transition(*id, ActionState::Delivered, now)
                        });
                        events.push(Event::Delivered {
                            id: *id,
                            consumer: c.consumer,
                        });
                    }
                }
            } else {
                s.release(claims, why, now, &mut records, &mut events);
            }
            self.inner.journal.submit(records);
        }
        let released = !delivered && !events.is_empty();
        self.publish(events);
        if released {
            self.inner.wake.notify_waiters();
        }
    }

    /// Takes items for `consumer`, waiting up to `timeout` for the first one; wakes the moment
    /// an item is queued (no polling). Returns empty, having taken nothing, once `cancel` fires.
    pub async fn wait(
        &self,
        session: SessionId,
        consumer: &str,
        max: usize,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Vec<Item> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.inner.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if cancel.is_cancelled() {
                return Vec::new();
            }
            let items = self.take(session, consumer, max);
            if !items.is_empty() {
                return items;
            }
            tokio::select! {
                _ = cancel.cancelled() => return Vec::new(),
                _ = tokio::time::sleep_until(deadline) => return Vec::new(),
                _ = notified => {}
            }
        }
    }

    /// Answers a confirm. Yes with `claim_for = Some(session)` (the `channel_confirm` tool)
    /// hands the approved item to that session as a claim, to be settled like a wait's; yes
    /// without (the operator CLI) queues it as approved work for the next session. No returns
    /// `Ok(None)`.
    pub fn confirm(
        &self,
        id: ActionId,
        approve: bool,
        by: &str,
        claim_for: Option<SessionId>,
        now: DateTime<Utc>,
    ) -> Result<Option<Item>, ConfirmError> {
        let mut records = Vec::new();
        let mut events = Vec::new();
        let result = {
            let mut s = self.inner.state.lock().unwrap();
            let Some(item) = s.confirms.get(&id) else {
                return Err(match s.answered.get(&id) {
                    Some((ActionState::Expired, expires)) => ConfirmError::Expired {
                        id,
                        expired: expires
                            .map(crate::message::format_timestamp)
                            .unwrap_or_default(),
                    },
                    Some((state, _)) => ConfirmError::AlreadyAnswered {
                        id,
                        state: state.as_str().to_string(),
                    },
                    None => ConfirmError::Unknown(id),
                });
            };
            if let Some(expires) = item.expires_at
                && expires <= now
            {
                drop(s);
                self.expire_due(now);
                return Err(ConfirmError::Expired {
                    id,
                    expired: crate::message::format_timestamp(expires),
                });
            }
            let item = s.confirms.remove(&id).expect("checked above");
            let state = if approve {
                ActionState::Approved
            } else {
                ActionState::Denied
            };
            s.remember_answer(id, state, item.expires_at);
            if approve {
                s.counters.approved += 1;
            } else {
                s.counters.denied += 1;
            }
            records.push(Record {
                consumer: Some(by.to_string()),
                ..Record::transition(id, state, now)
            });
            events.push(Event::Answered {
                id,
                rule: item.rule.clone(),
                state,
                by: by.to_string(),
            });
            if approve {
                let approved = Item {
                    kind: ItemKind::Approved,
                    ..item
                };
                match claim_for {
                    Some(session) => {
                        records.push(Record {
                            consumer: Some(by.to_string()),
                            ..Record::transition(id, ActionState::Claimed, now)
                        });
                        events.push(Event::Claimed {
                            id,
                            consumer: by.to_string(),
                        });
                        s.counters.claimed += 1;
                        s.claims.insert(
                            id,
                            Claim {
                                item: approved.clone(),
                                session,
                                consumer: by.to_string(),
                            },
                        );
                    }
                    None => {
                        s.work.push_back(approved.clone());
                        events.push(Event::Queued {
                            item: approved.clone(),
                        });
                    }
                }
                Some(approved)
            } else {
                None
            }
        };
        self.inner.journal.submit(records);
        self.publish(events);
        if approve && claim_for.is_none() {
            self.inner.wake.notify_waiters();
        }
        Ok(result)
    }

    /// Expires every confirm whose time has come; returns the next expiry, if any.
    pub fn expire_due(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut records = Vec::new();
        let mut events = Vec::new();
        let next = {
            let mut s = self.inner.state.lock().unwrap();
            let due: Vec<ActionId> = s
                .confirms
                .values()
                .filter(|i| i.expires_at.is_some_and(|e| e <= now))
                .map(|i| i.action_id)
                .collect();
            for id in due {
                if let Some(item) = s.confirms.remove(&id) {
                    s.remember_answer(id, ActionState::Expired, item.expires_at);
                    s.counters.expired += 1;
                    records.push(Record::transition(id, ActionState::Expired, now));
                    tracing::info!(action_id = id, rule = %item.rule, "confirm expired unanswered");
                    events.push(Event::Expired {
                        id,
                        rule: item.rule,
                    });
                }
            }
            self.inner.journal.submit(records);
            s.confirms.values().filter_map(|i| i.expires_at).min()
        };
        self.publish(events);
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

    /// Completes once every transition decided so far is written.
    pub async fn flush(&self) {
        self.inner.journal.flush().await;
    }

    /// Pending confirm requests, oldest first.
    pub fn pending_confirms(&self) -> Vec<Item> {
        self.inner
            .state
            .lock()
            .unwrap()
            .confirms
            .values()
            .cloned()
            .collect()
    }

    /// Whether a live session reads as `consumer`.
    pub fn consumer_in_use(&self, consumer: &str) -> bool {
        let s = self.inner.state.lock().unwrap();
        s.sessions.values().any(|o| o.consumer == consumer)
    }

    /// Items `consumer` would get now, without taking them.
    pub fn queued_for(&self, consumer: &str) -> usize {
        let s = self.inner.state.lock().unwrap();
        let pos = s.consumers.get(consumer).copied().unwrap_or(Consumer {
            nudges_after: s.last_nudge,
            confirms_after: 0,
        });
        s.work.len()
            + s.nudges
                .iter()
                .filter(|n| n.item.action_id > pos.nudges_after)
                .count()
            + s.confirms.range(pos.confirms_after + 1..).count()
    }

    /// Every transition from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    /// Queue depths and counters.
    pub fn stats(&self) -> LifecycleStats {
        let s = self.inner.state.lock().unwrap();
        LifecycleStats {
            capacity: self.capacity(),
            nudges_undelivered: s.nudges.iter().filter(|n| !n.delivered).count(),
            pending_confirms: s.confirms.len(),
            queued_work: s.work.len(),
            claimed_work: s.claims.len(),
            sessions: s.sessions.len(),
            exec_queued: s.exec.len(),
            exec_running: s.running.len(),
            counters: s.counters.clone(),
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
    /// Records the end of an exec run of `item`.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &mut self,
        item: &Item,
        state: ActionState,
        reason: Option<String>,
        report: ExecReport,
        now: DateTime<Utc>,
        records: &mut Vec<Record>,
        events: &mut Vec<Event>,
    ) {
        match state {
            ActionState::Succeeded => self.counters.succeeded += 1,
            ActionState::Cancelled => self.counters.cancelled += 1,
            _ => self.counters.failed += 1,
        }
        if let Some(kind) = report.kind {
            *self.counters.exec_failures.entry(kind).or_default() += 1;
        }
        events.push(Event::Finished {
            id: item.action_id,
            rule: item.rule.clone(),
            state,
            kind: report.kind,
            reason: reason.clone(),
            duration_ms: report.duration_ms,
            tool_calls: report.tool_calls.len(),
        });
        records.push(Record {
            reason,
            exec: Some(report),
            ..Record::transition(item.action_id, state, now)
        });
    }

    fn ensure_consumer(&mut self, name: &str, cursor: Option<Seq>) -> Consumer {
        if let Some(c) = self.consumers.get(name) {
            return *c;
        }
        // From its named cursor: the nudges after that message; else from now.
        let nudges_after = match cursor {
            Some(seq) => self
                .nudges
                .iter()
                .take_while(|n| n.item.message.seq <= seq)
                .map(|n| n.item.action_id)
                .last()
                .unwrap_or_else(|| {
                    self.nudges
                        .front()
                        .map_or(self.last_nudge, |n| n.item.action_id - 1)
                }),
            None => self.last_nudge,
        };
        let c = Consumer {
            nudges_after,
            confirms_after: 0,
        };
        self.consumers.insert(name.to_string(), c);
        c
    }

    fn release(
        &mut self,
        ids: &[ActionId],
        why: &str,
        now: DateTime<Utc>,
        records: &mut Vec<Record>,
        events: &mut Vec<Event>,
    ) {
        let mut back: Vec<Item> = Vec::new();
        for id in ids {
            if let Some(c) = self.claims.remove(id) {
                self.counters.released += 1;
                records.push(Record {
                    consumer: Some(c.consumer.clone()),
                    reason: Some(why.to_string()),
                    ..Record::transition(*id, ActionState::Released, now)
                });
                events.push(Event::Released {
                    id: *id,
                    consumer: c.consumer,
                    reason: why.to_string(),
                });
                back.push(c.item);
            }
        }
        // Released work goes first, in id order: it was due before anything queued since.
        back.sort_by_key(|i| std::cmp::Reverse(i.action_id));
        for item in back {
            self.work.push_front(item);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn drop_one(
        &mut self,
        mode: Mode,
        id: ActionId,
        rule: &str,
        reason: &str,
        now: DateTime<Utc>,
        records: &mut Vec<Record>,
        events: &mut Vec<Event>,
    ) {
        *self.counters.dropped.entry(mode).or_default() += 1;
        self.drops_unlogged += 1;
        records.push(Record {
            at: Some(now),
            id: Some(id),
            state: Some(ActionState::Dropped),
            reason: Some(reason.to_string()),
            ..Record::default()
        });
        events.push(Event::Dropped {
            id,
            rule: rule.into(),
            mode,
            reason: reason.to_string(),
        });
    }

    fn log_drops(&mut self, cap: usize) {
        if self.drops_unlogged > 0
            && self
                .drop_logged_at
                .is_none_or(|t| t.elapsed() >= DROP_LOG_EVERY)
        {
            tracing::warn!(
                dropped = self.drops_unlogged,
                capacity = cap,
                "actions dropped: their delivery queue is full; recorded as dropped in actions.jsonl"
            );
            self.drops_unlogged = 0;
            self.drop_logged_at = Some(Instant::now());
        }
    }

    /// Delivered nudges stay visible to other consumers, but only `cap` of them.
    fn trim_delivered_nudges(&mut self, cap: usize) {
        let delivered = self.nudges.iter().filter(|n| n.delivered).count();
        if delivered > cap {
            let mut excess = delivered - cap;
            self.nudges.retain(|n| {
                if excess > 0 && n.delivered {
                    excess -= 1;
                    false
                } else {
                    true
                }
            });
        }
    }

    fn remember_answer(
        &mut self,
        id: ActionId,
        state: ActionState,
        expires: Option<DateTime<Utc>>,
    ) {
        self.answered.insert(id, (state, expires));
        self.answered_order.push_back(id);
        while self.answered_order.len() > ANSWERED_MEMORY {
            if let Some(old) = self.answered_order.pop_front() {
                self.answered.remove(&old);
            }
        }
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
