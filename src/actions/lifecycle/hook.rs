//! What a host's stop hook takes: one piece of work, claimed as a wait claims it, by a session
//! of its own that lives as long as the hook's connection; else the confirm requests its
//! consumer has not been told of.
//!
//! The hook's session is not a window: it opens with its work already claimed and closes
//! once the hook settled it, so it never takes over the nudges held for the first window, and
//! a hook that dies before it settles has its claim released with its session.

use chrono::Utc;

use super::{Changes, Item, Lifecycle, SessionId};

impl Lifecycle {
    /// Claims the oldest queued work for a new session reading as `consumer` (a named
    /// consumer: it outlives the session), to be settled with [`Lifecycle::settle`] and closed
    /// with [`Lifecycle::close_session`]. `None`, with no session opened, when no work waits.
    pub fn claim_for_hook(&self, consumer: &str) -> Option<(SessionId, Item)> {
        let now = Utc::now();
        let mut changes = Changes::default();
        let mut s = self.lock();
        if s.work.len() == 0 {
            return None;
        }
        let id = s.sessions.next_id();
        s.ensure_consumer(consumer, None);
        s.sessions.open(id, consumer.to_string(), false);
        let item = s
            .claim_work(id, consumer, 1, now, &mut changes)
            .pop()
            .expect("work is queued: checked under the same lock");
        self.commit(s, changes);
        Some((id, item))
    }

    /// The open confirm requests `consumer` has not been told of and `shown` accepts, oldest
    /// first; they count as told from now on (each is mentioned once per consumer).
    pub fn unseen_confirms(&self, consumer: &str, shown: impl Fn(&Item) -> bool) -> Vec<Item> {
        let mut s = self.lock();
        let mut pos = s.ensure_consumer(consumer, None);
        let ids: Vec<_> = s.confirms.ids_after(pos.confirms_after).collect();
        let mut out = Vec::new();
        for id in ids {
            pos.confirms_after = pos.confirms_after.max(id);
            if let Some(item) = s.confirms.get(id).filter(|i| shown(i)) {
                out.push(item.clone());
            }
        }
        s.sessions.set_position(consumer, pos);
        out
    }
}
