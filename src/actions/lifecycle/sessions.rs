//! Sessions and consumers: which consumer each live session (one MCP connection) reads as, and
//! each consumer's position in the nudges and confirm requests.
//!
//! A session reads as its own consumer, forgotten when it ends, unless its consumer was named:
//! a named consumer outlives its sessions and resumes its position.

use std::collections::HashMap;

use crate::actions::ActionId;

/// A session's handle in the lifecycle (one per MCP connection).
pub type SessionId = u64;

/// One consumer's position: the newest nudge and confirm request it has seen.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Consumer {
    pub(super) nudges_after: ActionId,
    pub(super) confirms_after: ActionId,
}

/// A live session.
pub(super) struct Session {
    pub(super) consumer: String,
    /// The consumer is this session's own (not named): forgotten when the session ends.
    pub(super) ephemeral: bool,
}

/// The live sessions and the known consumers.
#[derive(Default)]
pub(super) struct Sessions {
    sessions: HashMap<SessionId, Session>,
    consumers: HashMap<String, Consumer>,
    last_id: SessionId,
}

impl Sessions {
    /// Live sessions.
    pub(super) fn len(&self) -> usize {
        self.sessions.len()
    }

    /// The id the next session gets.
    pub(super) fn next_id(&mut self) -> SessionId {
        self.last_id += 1;
        self.last_id
    }

    /// Opens session `id` reading as `consumer`.
    pub(super) fn open(&mut self, id: SessionId, consumer: String, ephemeral: bool) {
        self.sessions.insert(
            id,
            Session {
                consumer,
                ephemeral,
            },
        );
    }

    /// Ends session `id`; forgets its consumer when it was the session's own and no other
    /// live session reads as it. Returns the session, and whether its consumer was forgotten.
    pub(super) fn close(&mut self, id: SessionId) -> Option<(Session, bool)> {
        let session = self.sessions.remove(&id)?;
        let forget = session.ephemeral && !self.in_use(&session.consumer);
        if forget {
            self.consumers.remove(&session.consumer);
        }
        Some((session, forget))
    }

    /// The consumer live session `id` reads as.
    pub(super) fn consumer_of(&self, id: SessionId) -> Option<&str> {
        self.sessions.get(&id).map(|s| s.consumer.as_str())
    }

    /// Whether a live session reads as `consumer`.
    pub(super) fn in_use(&self, consumer: &str) -> bool {
        self.sessions.values().any(|s| s.consumer == consumer)
    }

    /// The earliest nudge position among the consumers of the live sessions.
    pub(super) fn earliest_nudge_position(&self) -> Option<ActionId> {
        self.sessions
            .values()
            .filter_map(|s| self.consumers.get(&s.consumer))
            .map(|c| c.nudges_after)
            .min()
    }

    /// Consumer `name`'s position, when it is known.
    pub(super) fn position(&self, name: &str) -> Option<Consumer> {
        self.consumers.get(name).copied()
    }

    /// Sets consumer `name`'s position.
    pub(super) fn set_position(&mut self, name: &str, position: Consumer) {
        match self.consumers.get_mut(name) {
            Some(c) => *c = position,
            None => {
                self.consumers.insert(name.to_string(), position);
            }
        }
    }
}
