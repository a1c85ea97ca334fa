//! Sessions and consumers: which consumer each live session (one MCP connection) reads as, and
//! each consumer's position in the nudges and confirm requests.
//!
//! A session reads as its own consumer, forgotten when it ends, unless its consumer was named:
//! a named consumer outlives its sessions and resumes its position.
//!
//! Consumers are bounded, since their names come from outside (a host's `clientInfo.name`, a
//! session id in a hook's event, `serve --consumer`): a name is at most
//! [`MAX_CONSUMER_NAME`] bytes ([`consumer_name_problem`], [`fit_consumer_name`]), and at
//! most `actions.maxConsumers` are remembered: past that, the consumer used longest ago that
//! no live session reads as is forgotten (its name is handed to whoever keeps its cursor, see
//! [`Sessions::take_forgotten`]).

use std::collections::{HashMap, HashSet};

use crate::actions::ActionId;

/// A session's handle in the lifecycle (one per MCP connection).
pub type SessionId = u64;

/// The longest consumer name, in bytes.
pub const MAX_CONSUMER_NAME: usize = 64;

/// Why `name` cannot name a consumer (empty, longer than [`MAX_CONSUMER_NAME`] bytes, or
/// holding a control character); `None` when it can.
pub fn consumer_name_problem(name: &str) -> Option<String> {
    if name.trim().is_empty() {
        Some("a consumer name must not be empty".into())
    } else if name.len() > MAX_CONSUMER_NAME {
        Some(format!(
            "a consumer name is at most {MAX_CONSUMER_NAME} bytes; this one has {}",
            name.len()
        ))
    } else if name.chars().any(char::is_control) {
        Some("a consumer name must not hold control characters".into())
    } else {
        None
    }
}

/// `prefix` + `suffix` as a consumer name: `prefix` cut (at a character) so that the name
/// fits [`MAX_CONSUMER_NAME`], its control characters as `?`.
pub fn fit_consumer_name(prefix: &str, suffix: &str) -> String {
    let room = MAX_CONSUMER_NAME.saturating_sub(suffix.len());
    let mut end = prefix.len().min(room);
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    let mut name: String = prefix[..end]
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    name.push_str(suffix);
    name
}

/// One consumer's position: the newest nudge and confirm request it has seen.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Consumer {
    pub(super) nudges_after: ActionId,
    pub(super) confirms_after: ActionId,
}

/// A known consumer: its position, and when it was last used (a tick of [`Sessions`]).
struct Known {
    position: Consumer,
    used: u64,
}

/// A live session.
pub(super) struct Session {
    pub(super) consumer: String,
    /// The consumer is this session's own (not named): forgotten when the session ends.
    pub(super) ephemeral: bool,
}

/// The live sessions and the known consumers.
pub(super) struct Sessions {
    sessions: HashMap<SessionId, Session>,
    consumers: HashMap<String, Known>,
    last_id: SessionId,
    /// Bumped at every use of a consumer.
    tick: u64,
    /// The most consumers remembered (`actions.maxConsumers`).
    max_consumers: usize,
    /// Consumers forgotten to stay within `max_consumers`, not yet taken.
    forgotten: Vec<String>,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions::new(crate::actions::ActionSettings::default().max_consumers)
    }
}

impl Sessions {
    /// No sessions, and at most `max_consumers` consumers remembered.
    pub(super) fn new(max_consumers: usize) -> Sessions {
        Sessions {
            sessions: HashMap::new(),
            consumers: HashMap::new(),
            last_id: 0,
            tick: 0,
            max_consumers: max_consumers.max(1),
            forgotten: Vec::new(),
        }
    }

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
            .map(|c| c.position.nudges_after)
            .min()
    }

    /// Consumer `name`'s position, when it is known.
    pub(super) fn position(&self, name: &str) -> Option<Consumer> {
        self.consumers.get(name).map(|k| k.position)
    }

    /// Sets consumer `name`'s position; it counts as used now. A consumer new here may make
    /// the one used longest ago that no live session reads as forgotten.
    pub(super) fn set_position(&mut self, name: &str, position: Consumer) {
        self.tick += 1;
        let used = self.tick;
        match self.consumers.get_mut(name) {
            Some(known) => *known = Known { position, used },
            None => {
                self.consumers
                    .insert(name.to_string(), Known { position, used });
                if self.consumers.len() > self.max_consumers {
                    self.forget_idle(name);
                }
            }
        }
    }

    /// Forgets the consumers used longest ago that no live session reads as (and not `keep`),
    /// until at most `max_consumers` are known (or only live ones are left).
    #[cold]
    fn forget_idle(&mut self, keep: &str) {
        let live: HashSet<&str> = self
            .sessions
            .values()
            .map(|s| s.consumer.as_str())
            .collect();
        let mut idle: Vec<(u64, &String)> = self
            .consumers
            .iter()
            .filter(|(name, _)| name.as_str() != keep && !live.contains(name.as_str()))
            .map(|(name, k)| (k.used, name))
            .collect();
        idle.sort_unstable();
        let over = self.consumers.len() - self.max_consumers;
        let gone: Vec<String> = idle
            .into_iter()
            .take(over)
            .map(|(_, n)| n.clone())
            .collect();
        for name in &gone {
            self.consumers.remove(name);
        }
        if !gone.is_empty() {
            tracing::info!(
                forgotten = gone.len(),
                max = self.max_consumers,
                "consumers used longest ago were forgotten (`actions.maxConsumers`)"
            );
        }
        self.forgotten.extend(gone);
    }

    /// The consumers forgotten since last asked (their cursors go too).
    pub(super) fn take_forgotten(&mut self) -> Vec<String> {
        std::mem::take(&mut self.forgotten)
    }

    /// How many consumers are known.
    #[cfg(test)]
    pub(super) fn known(&self) -> usize {
        self.consumers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_and_fitted() {
        assert!(consumer_name_problem("payments").is_none());
        assert!(consumer_name_problem(&"x".repeat(64)).is_none());
        assert!(consumer_name_problem(&"x".repeat(65)).is_some());
        assert!(consumer_name_problem(" ").is_some());
        assert!(consumer_name_problem("a\nb").is_some());
        let fitted = fit_consumer_name(&"é".repeat(100), "#12");
        assert!(
            fitted.len() <= MAX_CONSUMER_NAME && fitted.ends_with("é#12"),
            "{fitted}"
        );
        assert_eq!(fit_consumer_name("copilot\u{7}cli", "#1"), "copilot?cli#1");
        assert!(consumer_name_problem(&fitted).is_none());
    }

    /// Issue 46.4: consumer names had no bound on their count. Past the maximum, the consumer
    /// used longest ago that no live session reads as is forgotten, and said so.
    #[test]
    fn past_the_maximum_the_idle_consumer_used_longest_ago_is_forgotten() {
        let mut s = Sessions::new(3);
        let pos = Consumer::default();
        s.open(1, "live".into(), false);
        s.set_position("live", pos);
        s.set_position("a", pos);
        s.set_position("b", pos);
        assert!(s.take_forgotten().is_empty());
        s.set_position("a", pos); // used again: `b` is now the idle one used longest ago
        s.set_position("c", pos);
        assert_eq!(s.take_forgotten(), ["b"]);
        assert_eq!(s.known(), 3);
        assert!(s.position("b").is_none() && s.position("a").is_some());
        // A live session's consumer is never forgotten, even when all the others are live.
        s.open(2, "a".into(), false);
        s.open(3, "c".into(), false);
        s.set_position("d", pos);
        assert!(s.take_forgotten().is_empty());
        assert_eq!(
            s.known(),
            4,
            "over the maximum only while sessions hold them"
        );
        s.close(3);
        s.set_position("e", pos);
        assert_eq!(s.take_forgotten(), ["c", "d"]);
        assert_eq!(s.known(), 3);
    }
}
