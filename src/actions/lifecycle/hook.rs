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
        // Sessions waiting meanwhile come first: the hook may find nothing left for it.
        let Some(item) = s
            .claim_work(
                super::waiters::Taker::Passing,
                (id, consumer),
                1,
                now,
                &mut changes,
            )
            .pop()
        else {
            s.sessions.close(id);
            return None;
        };
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
            if let Some(item) = s
                .confirms
                .get(id)
                .filter(|i| shown(i) && !i.is_permission_request())
            {
                out.push(item.clone());
            }
        }
        s.sessions.set_position(consumer, pos);
        out
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::actions::{Action, ActionId, ItemKind, Mode};
    use crate::message::Message;

    fn action(id: ActionId, mode: Mode) -> (Action, std::sync::Arc<Message>) {
        super::super::tests::action(id, mode, Utc::now())
    }

    #[tokio::test]
    async fn a_hook_claims_one_piece_of_work_and_its_session_ending_releases_it() {
        let lc = Lifecycle::default();
        let window = lc.open_session("copilot-cli#1", false, None);
        lc.offer(
            vec![action(1, Mode::Auto), action(2, Mode::Auto)],
            None,
            Utc::now(),
        )
        .await;
        let (session, item) = lc.claim_for_hook("copilot-hook:a").unwrap();
        assert_eq!((item.kind, item.action_id), (ItemKind::Auto, 1));
        assert_eq!(lc.stats().claimed_work, 1);
        // The hook died before its decision: its session ends, the work goes back first.
        lc.close_session(session, Utc::now());
        let taken: Vec<_> = lc
            .take(window, "copilot-cli#1", 10)
            .iter()
            .map(|i| i.action_id)
            .collect();
        assert_eq!(taken, [1, 2], "released to the front of the queue");
        assert!(
            lc.claim_for_hook("copilot-hook:a").is_none(),
            "no work left"
        );
        assert_eq!(lc.stats().sessions, 1, "no session opened without work");
    }

    #[tokio::test]
    async fn a_settled_hook_claim_is_delivered_once() {
        let lc = Lifecycle::default();
        lc.offer(vec![action(1, Mode::Auto)], None, Utc::now())
            .await;
        let (session, item) = lc.claim_for_hook("claude-hook:b").unwrap();
        lc.settle(&[item.action_id], true, false, "written");
        lc.close_session(session, Utc::now());
        assert_eq!(lc.stats().counters.delivered, 1);
        assert_eq!(lc.stats().queued_work, 0);
        assert_eq!(lc.stats().sessions, 0);
    }

    #[tokio::test]
    async fn confirm_requests_are_mentioned_once_per_consumer_and_only_when_shown() {
        let lc = Lifecycle::default();
        lc.open_session("w#1", false, None);
        lc.offer(
            vec![action(1, Mode::Confirm), action(2, Mode::Confirm)],
            None,
            Utc::now(),
        )
        .await;
        lc.flush().await;
        let ids = |items: Vec<Item>| items.iter().map(|i| i.action_id).collect::<Vec<_>>();
        assert_eq!(ids(lc.unseen_confirms("h:1", |i| i.action_id != 2)), [1]);
        assert!(lc.unseen_confirms("h:1", |_| true).is_empty(), "told once");
        assert_eq!(ids(lc.unseen_confirms("h:2", |_| true)), [1, 2]);
        assert_eq!(lc.pending_confirms().len(), 2, "never answered here");
    }
}
