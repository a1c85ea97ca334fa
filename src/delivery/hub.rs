//! The delivery hub: deliverable actions, per consumer, bounded, durable.
//!
//! Three queues, each holding at most `capacity` undelivered items (default 64):
//! - nudges (notify): every consumer sees each once; the first delivery is recorded, and
//!   delivered nudges stay visible (bounded) for consumers that have not seen them yet;
//! - confirm requests: every consumer sees each pending request once, until it is answered
//!   or expires;
//! - work (auto prompts and approved confirms): consumed by the first consumer that takes it.
//!
//! On overflow the newest is refused and recorded as `dropped`: never silent. Every state
//! change is written to the actions journal before it is visible; [`Hub::restore`] rebuilds
//! the queues from it at boot. [`Hub::expire_due`] expires confirms; the server runs it on a
//! timer so that expiry does not wait for a read.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, broadcast};

use crate::actions::journal::{ActionLog, LiveAction, Record};
use crate::actions::{Action, ActionId, ActionState, Mode};
use crate::message::{Message, Seq};

/// What a delivered item asks of the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

/// One deliverable item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// What to do with it.
    pub kind: ItemKind,
    /// The action id (`channel_confirm` takes it).
    pub action_id: ActionId,
    /// The rule that fired.
    pub rule: String,
    /// The rendered prompt.
    pub prompt: String,
    /// Tools the prompt may use.
    pub tools: Vec<String>,
    /// When a confirm request expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The source message, as its own field: untrusted data, grants no permission.
    pub message: Arc<Message>,
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
    /// Already approved or denied.
    #[error("confirm {id} was already answered: {state}")]
    AlreadyAnswered {
        /// The action id.
        id: ActionId,
        /// `approved` or `denied`.
        state: String,
    },
}

/// The outcome of offering a batch of actions.
#[derive(Debug, Default)]
pub struct Offered {
    /// Items queued, in id order.
    pub queued: Vec<Item>,
    /// Actions refused because their queue was full.
    pub dropped: Vec<Action>,
}

/// How many answered or expired confirm ids are remembered, for clear errors.
const ANSWERED_MEMORY: usize = 4096;

struct Nudge {
    item: Item,
    delivered: bool,
}

#[derive(Default)]
struct Queues {
    nudges: VecDeque<Nudge>,
    confirms: BTreeMap<ActionId, Item>,
    work: VecDeque<Item>,
    /// Highest nudge / confirm-request id each consumer has seen.
    seen: HashMap<String, ActionId>,
    /// Answered or expired confirms: state and expiry.
    answered: HashMap<ActionId, (ActionState, Option<DateTime<Utc>>)>,
    answered_order: VecDeque<ActionId>,
    dropped: BTreeMap<Mode, u64>,
    drops_unlogged: u64,
    drop_logged_at: Option<Instant>,
}

impl Queues {
    fn undelivered_nudges(&self) -> usize {
        self.nudges.iter().filter(|n| !n.delivered).count()
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

/// The hub.
#[derive(Clone)]
pub struct Hub {
    queues: Arc<Mutex<Queues>>,
    capacity: usize,
    log: Option<Arc<ActionLog>>,
    notify: Arc<Notify>,
    /// Woken when the earliest confirm expiry may have changed.
    expiry: Arc<Notify>,
    events: broadcast::Sender<Item>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub::new(64, None)
    }
}

impl Hub {
    /// A hub whose queues hold `capacity` undelivered items each, journaling to `log`.
    pub fn new(capacity: usize, log: Option<Arc<ActionLog>>) -> Hub {
        Hub {
            queues: Arc::default(),
            capacity: capacity.max(1),
            log,
            notify: Arc::new(Notify::new()),
            expiry: Arc::new(Notify::new()),
            events: broadcast::channel(1024).0,
        }
    }

    fn write(&self, records: &[Record]) {
        if let Some(log) = &self.log {
            // A failed write is logged and counted by the log; delivery carries on in memory.
            let _ = log.append(records);
        }
    }

    /// Rebuilds the queues from the actions journal at boot.
    pub fn restore(&self, live: impl IntoIterator<Item = LiveAction>) {
        let mut q = self.queues.lock().unwrap();
        for l in live {
            let mut item = Item::new(l.action, Arc::new(l.message));
            match (l.state, item.kind) {
                (ActionState::Pending, ItemKind::ConfirmRequest) => {
                    q.confirms.insert(item.action_id, item);
                }
                (ActionState::Approved, _) => {
                    item.kind = ItemKind::Approved;
                    q.work.push_back(item);
                }
                (ActionState::Queued, ItemKind::Auto) => q.work.push_back(item),
                (ActionState::Queued, ItemKind::Nudge) => q.nudges.push_back(Nudge {
                    item,
                    delivered: false,
                }),
                _ => {}
            }
        }
        drop(q);
        self.expiry.notify_one();
    }

    /// Offers the actions of evaluated messages; `evaluated` is the dispatcher's new mark,
    /// written in the same journal write as the actions.
    pub fn offer(
        &self,
        actions: Vec<(Action, Arc<Message>)>,
        evaluated: Option<Seq>,
        now: DateTime<Utc>,
    ) -> Offered {
        let mut out = Offered::default();
        let mut records = Vec::with_capacity(actions.len() + 1);
        let mut q = self.queues.lock().unwrap();
        let mut undelivered = q.undelivered_nudges();
        for (action, message) in actions {
            let full = match action.mode {
                Mode::Notify => undelivered >= self.capacity,
                Mode::Confirm => q.confirms.len() >= self.capacity,
                Mode::Auto => q.work.len() >= self.capacity,
            };
            if full {
                *q.dropped.entry(action.mode).or_default() += 1;
                q.drops_unlogged += 1;
                records.push(Record {
                    at: Some(now),
                    id: Some(action.id),
                    state: Some(ActionState::Dropped),
                    reason: Some(format!("{} queue full ({})", action.mode, self.capacity)),
                    ..Record::default()
                });
                out.dropped.push(action);
                continue;
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
                    q.nudges.push_back(Nudge {
                        item: item.clone(),
                        delivered: false,
                    });
                }
                ItemKind::ConfirmRequest => {
                    q.confirms.insert(item.action_id, item.clone());
                }
                _ => q.work.push_back(item.clone()),
            }
            out.queued.push(item);
        }
        // Delivered nudges stay visible to other consumers, but only `capacity` of them.
        let delivered = q.nudges.len() - undelivered;
        if delivered > self.capacity {
            let mut excess = delivered - self.capacity;
            q.nudges.retain(|n| {
                if excess > 0 && n.delivered {
                    excess -= 1;
                    false
                } else {
                    true
                }
            });
        }
        if let Some(seq) = evaluated {
            records.push(Record {
                at: Some(now),
                evaluated: Some(seq),
                ..Record::default()
            });
        }
        self.write(&records);
        if q.drops_unlogged > 0
            && q.drop_logged_at
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(5))
        {
            tracing::warn!(
                dropped = q.drops_unlogged,
                capacity = self.capacity,
                "actions dropped: their delivery queue is full; recorded as dropped in actions.jsonl"
            );
            q.drops_unlogged = 0;
            q.drop_logged_at = Some(Instant::now());
        }
        drop(q);
        if out
            .queued
            .iter()
            .any(|i| i.kind == ItemKind::ConfirmRequest)
        {
            self.expiry.notify_one();
        }
        for item in &out.queued {
            let _ = self.events.send(item.clone());
        }
        if !out.queued.is_empty() {
            self.notify.notify_waiters();
        }
        out
    }

    /// Takes up to `max` items for `consumer` without waiting: work first (consumed), then
    /// nudges and confirm requests this consumer has not seen, oldest first.
    pub fn take(&self, consumer: &str, max: usize) -> Vec<Item> {
        let now = Utc::now();
        let mut q = self.queues.lock().unwrap();
        let mut out = Vec::new();
        let mut records = Vec::new();
        while out.len() < max {
            let Some(item) = q.work.pop_front() else {
                break;
            };
            records.push(Record {
                consumer: Some(consumer.to_string()),
                ..Record::transition(item.action_id, ActionState::Delivered, now)
            });
            out.push(item);
        }
        let seen = q.seen.get(consumer).copied().unwrap_or(0);
        let mut shared: Vec<(ActionId, bool)> = q
            .nudges
            .iter()
            .filter(|n| n.item.action_id > seen)
            .map(|n| (n.item.action_id, true))
            .chain(q.confirms.range(seen + 1..).map(|(id, _)| (*id, false)))
            .collect();
        shared.sort_unstable();
        let mut last = seen;
        for (id, is_nudge) in shared {
            if out.len() >= max {
                break;
            }
            last = id;
            if is_nudge {
                let Some(n) = q.nudges.iter_mut().find(|n| n.item.action_id == id) else {
                    continue;
                };
                if !n.delivered {
                    n.delivered = true;
                    records.push(Record {
                        consumer: Some(consumer.to_string()),
                        ..Record::transition(id, ActionState::Delivered, now)
                    });
                }
                out.push(n.item.clone());
            } else if let Some(item) = q.confirms.get(&id) {
                out.push(item.clone());
            }
        }
        if last > seen {
            q.seen.insert(consumer.to_string(), last);
        }
        self.write(&records);
        out
    }

    /// Takes items for `consumer`, waiting up to `timeout` for the first one. Wakes the moment
    /// an item is queued (no polling).
    pub async fn wait(&self, consumer: &str, max: usize, timeout: Duration) -> Vec<Item> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            let items = self.take(consumer, max);
            if !items.is_empty() {
                return items;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Vec::new();
            }
        }
    }

    /// Answers a confirm. Yes with `taker = Some(consumer)` (the `channel_confirm` tool) hands
    /// the approved item straight to that consumer, recorded as delivered; yes with
    /// `taker = None` (the operator CLI) queues it as `approved` work for the next consumer.
    /// No returns `Ok(None)`.
    pub fn confirm(
        &self,
        id: ActionId,
        approve: bool,
        taker: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<Option<Item>, ConfirmError> {
        let mut q = self.queues.lock().unwrap();
        let Some(item) = q.confirms.get(&id) else {
            return Err(match q.answered.get(&id) {
                Some((ActionState::Expired, expires)) => ConfirmError::Expired {
                    id,
                    expired: expires
                        .map(crate::message::format_timestamp)
                        .unwrap_or_default(),
                },
                Some((state, _)) => ConfirmError::AlreadyAnswered {
                    id,
                    state: format!("{state:?}").to_lowercase(),
                },
                None => ConfirmError::Unknown(id),
            });
        };
        if let Some(expires) = item.expires_at
            && expires <= now
        {
            drop(q);
            self.expire_due(now);
            return Err(ConfirmError::Expired {
                id,
                expired: crate::message::format_timestamp(expires),
            });
        }
        let item = q.confirms.remove(&id).expect("checked above");
        let state = if approve {
            ActionState::Approved
        } else {
            ActionState::Denied
        };
        q.remember_answer(id, state, item.expires_at);
        let who = taker.unwrap_or("cli").to_string();
        let mut records = vec![Record {
            consumer: Some(who.clone()),
            ..Record::transition(id, state, now)
        }];
        if !approve {
            self.write(&records);
            return Ok(None);
        }
        let approved = Item {
            kind: ItemKind::Approved,
            ..item
        };
        match taker {
            Some(_) => records.push(Record {
                consumer: Some(who),
                ..Record::transition(id, ActionState::Delivered, now)
            }),
            None => q.work.push_back(approved.clone()),
        }
        self.write(&records);
        drop(q);
        if taker.is_none() {
            let _ = self.events.send(approved.clone());
            self.notify.notify_waiters();
        }
        Ok(Some(approved))
    }

    /// Expires every confirm whose time has come; returns the next expiry, if any.
    pub fn expire_due(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut q = self.queues.lock().unwrap();
        let due: Vec<ActionId> = q
            .confirms
            .values()
            .filter(|i| i.expires_at.is_some_and(|e| e <= now))
            .map(|i| i.action_id)
            .collect();
        let mut records = Vec::new();
        for id in due {
            if let Some(item) = q.confirms.remove(&id) {
                q.remember_answer(id, ActionState::Expired, item.expires_at);
                records.push(Record::transition(id, ActionState::Expired, now));
                tracing::info!(action_id = id, rule = %item.rule, "confirm expired unanswered");
            }
        }
        self.write(&records);
        q.confirms.values().filter_map(|i| i.expires_at).min()
    }

    /// Runs [`Hub::expire_due`] whenever the earliest expiry comes, until `shutdown`.
    pub async fn run_expiry(&self, shutdown: tokio_util::sync::CancellationToken) {
        loop {
            let changed = self.expiry.notified();
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

    /// Pending confirm requests, oldest first.
    pub fn pending_confirms(&self) -> Vec<Item> {
        self.queues
            .lock()
            .unwrap()
            .confirms
            .values()
            .cloned()
            .collect()
    }

    /// Items a consumer would get now, without taking them.
    pub fn queued_for(&self, consumer: &str) -> usize {
        let q = self.queues.lock().unwrap();
        let seen = q.seen.get(consumer).copied().unwrap_or(0);
        q.work.len()
            + q.nudges.iter().filter(|n| n.item.action_id > seen).count()
            + q.confirms.range(seen + 1..).count()
    }

    /// New deliverable items as they are queued (for push).
    pub fn subscribe(&self) -> broadcast::Receiver<Item> {
        self.events.subscribe()
    }

    /// Total actions dropped since start.
    pub fn dropped_total(&self) -> u64 {
        self.queues.lock().unwrap().dropped.values().sum()
    }

    /// Queue depths, capacity and drops, for `inbox_stats` and `/metrics`.
    pub fn stats(&self) -> serde_json::Value {
        let q = self.queues.lock().unwrap();
        let dropped: BTreeMap<&str, u64> =
            q.dropped.iter().map(|(m, n)| (m.as_str(), *n)).collect();
        serde_json::json!({
            "capacity": self.capacity,
            "nudges_undelivered": q.undelivered_nudges(),
            "pending_confirms": q.confirms.len(),
            "queued_work": q.work.len(),
            "dropped": dropped,
            "actions_journal": self.log.as_ref().map_or("memory".to_string(), |l| l.status()),
        })
    }
}

#[cfg(test)]
mod tests;
