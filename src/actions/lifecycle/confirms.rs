//! Confirm requests: the pending ones, which every consumer is shown once until they are
//! answered, expire or are resolved; the ones whose creation record is still on its way to the
//! disk (staged: counted against the queue's bound, shown to no one yet); and a bounded memory
//! of the closed ones, so that a late answer gets a clear error instead of "unknown".

use std::collections::{BTreeMap, HashMap, VecDeque};

use chrono::{DateTime, Utc};

use super::Item;
use crate::actions::{ActionId, ActionState};

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
         their windows, or with `switchboard confirm`"
    )]
    NotForConsumer {
        /// The action id.
        id: ActionId,
        /// The answering session's consumer.
        consumer: String,
        /// The rule's `consumers`, as written (`oncall`, `payments-*`).
        consumers: String,
    },
}

/// The confirm requests.
#[derive(Default)]
pub(super) struct Confirms {
    /// Shown and waiting for an answer, by id.
    pending: BTreeMap<ActionId, Item>,
    /// Created, but their record is not on disk yet: not shown.
    staged: usize,
    /// How each remembered confirm was closed, and its expiry.
    closed: HashMap<ActionId, (ActionState, Option<DateTime<Utc>>)>,
    /// The remembered ids, oldest first.
    closed_order: VecDeque<ActionId>,
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

    /// Closes pending confirm `id` as `state` (`approved`, `denied`, `expired`, `resolved`)
    /// and remembers how; `None` when it is not pending.
    pub(super) fn close(&mut self, id: ActionId, state: ActionState) -> Option<Item> {
        let item = self.pending.remove(&id)?;
        self.closed.insert(id, (state, item.expires_at));
        self.closed_order.push_back(id);
        while self.closed_order.len() > ANSWERED_MEMORY {
            if let Some(old) = self.closed_order.pop_front() {
                self.closed.remove(&old);
            }
        }
        Some(item)
    }

    /// Why an answer to `id`, which is not pending, is refused.
    pub(super) fn refusal(&self, id: ActionId) -> ConfirmError {
        match self.closed.get(&id) {
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
        }
    }

    /// The pending confirms whose expiry is at or before `now`.
    pub(super) fn due(&self, now: DateTime<Utc>) -> Vec<ActionId> {
        self.pending
            .values()
            .filter(|i| i.expires_at.is_some_and(|e| e <= now))
            .map(|i| i.action_id)
            .collect()
    }

    /// The earliest expiry of a pending confirm.
    pub(super) fn next_expiry(&self) -> Option<DateTime<Utc>> {
        self.pending.values().filter_map(|i| i.expires_at).min()
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
