//! Waits in progress, oldest first: which queued work goes to which of them.
//!
//! When several sessions wait at once, the work queued is handed round them: each item, oldest
//! first, goes to the wait that has waited longest among those its audience admits and that
//! still have room (`max_items`), and that wait then goes to the back of the round. A wait takes
//! only its own share; the others, woken with it, take theirs. So no waiting window starves
//! while another, quicker to wake, takes everything (issue 45: 40 items over four waiting
//! sessions went 0 / 36 / 0 / 4). A taker that is not waiting (a stop hook, a take that does
//! not wait) joins the round as the newest.

use std::collections::VecDeque;

use super::{Item, SessionId};
use crate::actions::ActionId;

/// One wait in progress.
struct Waiter {
    ticket: u64,
    consumer: String,
    max: usize,
}

/// The waits in progress, in the order they began.
#[derive(Default)]
pub(super) struct Waiters {
    waiting: VecDeque<Waiter>,
    last_ticket: u64,
}

/// Who asks for a share: a wait in progress (its ticket), or a taker that is not waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Taker {
    /// A wait in progress.
    Waiting(u64),
    /// A take that does not wait: it joins the round as the newest.
    Passing,
}

impl Waiters {
    /// A wait of `consumer` for at most `max` items begins: its ticket.
    pub(super) fn join(&mut self, _session: SessionId, consumer: &str, max: usize) -> u64 {
        self.last_ticket += 1;
        self.waiting.push_back(Waiter {
            ticket: self.last_ticket,
            consumer: consumer.to_string(),
            max,
        });
        self.last_ticket
    }

    /// The wait `ticket` is over.
    pub(super) fn leave(&mut self, ticket: u64) {
        self.waiting.retain(|w| w.ticket != ticket);
    }

    /// Waits in progress.
    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// The ids of the work in `queue` (oldest first) that is `taker`'s share, when it reads as
    /// `consumer` and takes at most `max`: the work handed round the waits, oldest wait first.
    pub(super) fn share<'a>(
        &self,
        taker: Taker,
        consumer: &str,
        max: usize,
        queue: impl Iterator<Item = &'a Item>,
    ) -> Vec<ActionId> {
        // The round: (ticket, consumer, room); the taker that is not waiting is ticket 0.
        let mut round: VecDeque<(u64, &str, usize)> = self
            .waiting
            .iter()
            .map(|w| (w.ticket, w.consumer.as_str(), w.max))
            .collect();
        let me = match taker {
            Taker::Waiting(ticket) => ticket,
            Taker::Passing => {
                round.push_back((0, consumer, max));
                0
            }
        };
        let mut mine = Vec::new();
        for item in queue {
            let Some(at) = round
                .iter()
                .position(|(_, c, room)| *room > 0 && item.consumers.admits(c))
            else {
                continue;
            };
            let (ticket, c, room) = round.remove(at).expect("found above");
            if ticket == me {
                mine.push(item.action_id);
                if mine.len() >= max {
                    break;
                }
            }
            round.push_back((ticket, c, room - 1));
        }
        mine
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::{Action, Audience, Mode};
    use crate::message::{Message, NewMessage};

    fn item(id: ActionId, consumers: &str) -> Item {
        let now = chrono::Utc::now();
        let message = Message::from_new(NewMessage::new("s", "c", "x"), id, now);
        let mut action = Action {
            id,
            rule: "r".into(),
            mode: Mode::Auto,
            seq: id,
            prompt: "p".into(),
            tools: vec!["view".into()],
            created: now,
            expires: None,
            delivery: Default::default(),
            approve_via: vec![],
            consumers: Audience::default(),
        };
        if !consumers.is_empty() {
            action.consumers = Audience::only(consumers);
        }
        Item::new(action, std::sync::Arc::new(message))
    }

    #[test]
    fn work_goes_round_the_waits_oldest_first() {
        let mut w = Waiters::default();
        let a = w.join(1, "a", 10);
        let b = w.join(2, "b", 10);
        let c = w.join(3, "c", 10);
        let queue: Vec<Item> = (1..=7).map(|id| item(id, "")).collect();
        assert_eq!(w.share(Taker::Waiting(a), "a", 10, queue.iter()), [1, 4, 7]);
        assert_eq!(w.share(Taker::Waiting(b), "b", 10, queue.iter()), [2, 5]);
        assert_eq!(w.share(Taker::Waiting(c), "c", 10, queue.iter()), [3, 6]);
        // Once the oldest took its share and left, the others' shares stay theirs.
        w.leave(a);
        let rest: Vec<Item> = [2, 3, 5, 6].map(|id| item(id, "")).into();
        assert_eq!(w.share(Taker::Waiting(b), "b", 10, rest.iter()), [2, 5]);
        // A taker that does not wait comes last in the round: 2 to b, 3 to c, 5 to it.
        assert_eq!(w.share(Taker::Passing, "hook", 10, rest.iter()), [5]);
    }

    #[test]
    fn a_wait_full_or_left_out_is_passed_over() {
        let mut w = Waiters::default();
        let a = w.join(1, "a", 1);
        let b = w.join(2, "oncall", 10);
        let queue = [item(1, ""), item(2, "oncall"), item(3, ""), item(4, "")];
        assert_eq!(w.share(Taker::Waiting(a), "a", 1, queue.iter()), [1]);
        assert_eq!(
            w.share(Taker::Waiting(b), "oncall", 10, queue.iter()),
            [2, 3, 4]
        );
    }
}
