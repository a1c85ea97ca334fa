//! Confirm requests: the pending ones, which every consumer is shown once until they are
//! answered, expire or are resolved; the ones whose creation record is still on its way to the
//! disk (staged: counted against the queue's bound, shown to no one yet); and a bounded memory
//! of the closed ones (how, when, by whom and by which path), so that a late answer gets a
//! clear error instead of "unknown", and `pending` and the approval page can say how each
//! ended.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use chrono::{DateTime, Utc};

use serde::{Deserialize, Serialize};

use super::Item;
use crate::actions::{ActionId, ActionState, Via};

/// How many answered or expired confirm ids are remembered, for clear errors.
const ANSWERED_MEMORY: usize = 4096;

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
    /// The answering window's consumer is not among the rule's `consumers`.
    #[error(
        "confirm {id} is for consumers {consumers}, not `{consumer}`; answer it from one of \
         their windows, or with `{}`",
        crate::home::command("confirm")
    )]
    NotForConsumer {
        /// The action id.
        id: ActionId,
        /// The answering session's consumer.
        consumer: String,
        /// The rule's `consumers`, as written (`oncall`, `payments-*`).
        consumers: String,
    },
    /// The rule's `approveVia` does not list the path the answer came by.
    #[error(
        "confirm {id} cannot be answered via `{via}`: rule `{rule}` takes answers only via {allowed}; ask a person to answer it there"
    )]
    ViaRefused {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: String,
        /// The path refused.
        via: Via,
        /// The rule's `approveVia`, as a list.
        allowed: String,
    },
    /// The actions journal could not be written: the answer was not kept, the confirm is
    /// still pending.
    #[error(
        "confirm {id}: not recorded: the actions journal cannot be written ({cause}); try again"
    )]
    NotRecorded {
        /// The action id.
        id: ActionId,
        /// Why the write failed.
        cause: String,
    },
    /// A relayed permission request, answered by the agent's own tool.
    #[error(
        "confirm {id} is the host's permission prompt for the agent's own `{tool}` call: an agent \
         may not answer it; a person answers it in the terminal, on the approval page or with \
         `{}`",
        crate::home::command(&format!("confirm {id} yes|no"))
    )]
    OwnPermission {
        /// The action id.
        id: ActionId,
        /// The tool the host asks about.
        tool: String,
    },
}

/// How a confirm was closed, as `pending` and the approval page show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosedConfirm {
    /// The action id.
    pub id: ActionId,
    /// The rule.
    pub rule: std::sync::Arc<str>,
    /// `approved`, `denied`, `expired` or `resolved`.
    pub state: ActionState,
    /// When it was closed.
    pub at: DateTime<Utc>,
    /// When it would have expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// Who answered (approved, denied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<crate::actions::By>,
    /// The path the answer came by (approved, denied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
    /// Why, for people (resolved: by which message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The confirm requests.
#[derive(Default)]
pub(super) struct Confirms {
    /// Shown and waiting for an answer, by id.
    pending: BTreeMap<ActionId, Item>,
    /// Created, but their record is not on disk yet: not shown.
    staged: usize,
    /// How each remembered confirm was closed.
    closed: HashMap<ActionId, ClosedConfirm>,
    /// The remembered ids, oldest first.
    closed_order: VecDeque<ActionId>,
    /// Which session's user is being asked each pending confirm in an elicitation form: one
    /// session at a time per confirm (see [`Confirms::ask`]).
    asked: HashMap<ActionId, u64>,
    /// Pending confirms whose answer is being written (see `answer`): nothing else closes
    /// them meanwhile, and they do not expire until the answer is in or refused.
    reserved: HashSet<ActionId>,
}

impl Confirms {
    /// Pending confirms.
    pub(super) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether pending and staged confirms fill a queue of `cap`.
    pub(super) fn is_full(&self, cap: usize) -> bool {
        self.pending.len() + self.staged >= cap
    }

    /// Counts a new confirm whose record is on its way to the disk.
    pub(super) fn stage(&mut self) {
        self.staged += 1;
    }

    /// Shows a staged confirm: its record is on disk.
    pub(super) fn show(&mut self, item: Item) {
        self.staged -= 1;
        self.pending.insert(item.action_id, item);
    }

    /// Shows a confirm restored from the journal.
    pub(super) fn restore(&mut self, item: Item) {
        self.pending.insert(item.action_id, item);
    }

    /// Pending confirm `id`.
    pub(super) fn get(&self, id: ActionId) -> Option<&Item> {
        self.pending.get(&id)
    }

    /// Reserves pending confirm `id` while its answer is written.
    pub(super) fn reserve(&mut self, id: ActionId) {
        self.reserved.insert(id);
    }

    /// Ends the reservation of `id`.
    pub(super) fn unreserve(&mut self, id: ActionId) {
        self.reserved.remove(&id);
    }

    /// Whether an answer to `id` is being written.
    pub(super) fn is_reserved(&self, id: ActionId) -> bool {
        self.reserved.contains(&id)
    }

    /// Closes pending confirm `id` as `state` (`approved`, `denied`, `expired`, `resolved`)
    /// and remembers how; `None` when it is not pending, or reserved by an answer being
    /// written. `how` fills in who answered, by which path, or why.
    pub(super) fn close(
        &mut self,
        id: ActionId,
        state: ActionState,
        at: DateTime<Utc>,
        how: impl FnOnce(&mut ClosedConfirm),
    ) -> Option<Item> {
        if self.reserved.contains(&id) {
            return None;
        }
        let item = self.pending.remove(&id)?;
        self.asked.remove(&id);
        let mut closed = ClosedConfirm {
            id,
            rule: item.rule.clone(),
            state,
            at,
            expires_at: item.expires_at,
            by: None,
            via: None,
            reason: None,
        };
        how(&mut closed);
        self.closed.insert(id, closed);
        self.closed_order.push_back(id);
        while self.closed_order.len() > ANSWERED_MEMORY {
            if let Some(old) = self.closed_order.pop_front() {
                self.closed.remove(&old);
            }
        }
        Some(item)
    }

    /// Lets `session` put pending confirm `id` to its user in an elicitation form: true when
    /// the confirm is pending, takes answers via `elicitation`, and no other session is
    /// asking it (a session that `live` says has ended does not count). The session asks
    /// until [`Confirms::unask`] or the confirm closes.
    pub(super) fn ask(&mut self, id: ActionId, session: u64, live: impl Fn(u64) -> bool) -> bool {
        let Some(item) = self.pending.get(&id) else {
            return false;
        };
        if !item.allows(Via::Elicitation) {
            return false;
        }
        match self.asked.get(&id) {
            Some(&other) if other != session && live(other) => false,
            _ => {
                self.asked.insert(id, session);
                true
            }
        }
    }

    /// `session` no longer asks confirm `id` (its form was answered, declined or dropped).
    pub(super) fn unask(&mut self, id: ActionId, session: u64) {
        if self.asked.get(&id) == Some(&session) {
            self.asked.remove(&id);
        }
    }

    /// Why an answer to `id`, which is not pending, is refused.
    pub(super) fn refusal(&self, id: ActionId) -> ConfirmError {
        match self.closed.get(&id) {
            Some(c) if c.state == ActionState::Expired => ConfirmError::Expired {
                id,
                expired: c
                    .expires_at
                    .map(crate::message::format_timestamp)
                    .unwrap_or_default(),
            },
            Some(c) => ConfirmError::AlreadyAnswered {
                id,
                state: match (&c.via, &c.by) {
                    (Some(via), Some(by)) => format!("{} via {via} by {by}", c.state.as_str()),
                    _ => c.state.as_str().to_string(),
                },
            },
            None => ConfirmError::Unknown(id),
        }
    }

    /// How confirm `id` was closed, while it is remembered.
    pub(super) fn closed(&self, id: ActionId) -> Option<&ClosedConfirm> {
        self.closed.get(&id)
    }

    /// The last `limit` confirms closed, oldest first.
    pub(super) fn recently_closed(&self, limit: usize) -> Vec<ClosedConfirm> {
        let skip = self.closed_order.len().saturating_sub(limit);
        self.closed_order
            .iter()
            .skip(skip)
            .filter_map(|id| self.closed.get(id).cloned())
            .collect()
    }

    /// The pending confirms whose expiry is at or before `now` (but those being answered).
    pub(super) fn due(&self, now: DateTime<Utc>) -> Vec<ActionId> {
        self.pending
            .values()
            .filter(|i| i.expires_at.is_some_and(|e| e <= now))
            .filter(|i| !self.reserved.contains(&i.action_id))
            .map(|i| i.action_id)
            .collect()
    }

    /// The earliest expiry of a pending confirm not being answered.
    pub(super) fn next_expiry(&self) -> Option<DateTime<Utc>> {
        self.pending
            .values()
            .filter(|i| !self.reserved.contains(&i.action_id))
            .filter_map(|i| i.expires_at)
            .min()
    }

    /// The ids of the pending confirms after position `after`, oldest first.
    pub(super) fn ids_after(&self, after: ActionId) -> impl Iterator<Item = ActionId> + '_ {
        self.pending.range(after + 1..).map(|(id, _)| *id)
    }

    /// Pending confirms, oldest first.
    pub(super) fn items(&self) -> impl Iterator<Item = &Item> {
        self.pending.values()
    }
}
