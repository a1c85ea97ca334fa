//! A person's answer to a confirm: kept or refused, never claimed.
//!
//! The answer's records (the decision, and the claim or the relayed verdict it makes) are
//! written to the actions journal *before* anything changes in memory, with
//! [`JournalWriter::commit`](crate::actions::writer::JournalWriter::commit): written at once,
//! or taken back out when the journal cannot be written. Meanwhile the confirm is *reserved*:
//! it stays pending and shown, but nothing else closes it (a second answer waits to hear how
//! the first went; expiry and resolution pass it over until the answer is in or refused). Only
//! once the records are on disk is the confirm closed, the approved work queued or claimed, and
//! the answer published (so push, the relay's verdict to its host and the page hear of it only
//! then). A write that fails refuses the answer (`not recorded`): nothing changed, the confirm
//! stays pending, and the person can try again. The lock is never held across the write.

use chrono::{DateTime, Utc};

use super::{Changes, ConfirmError, Event, Item, ItemKind, Lifecycle, SessionId, State};
use crate::actions::journal::Record;
use crate::actions::{ActionId, ActionState, By, Via};

/// Who answered, and the path it came by.
type Who<'a> = (&'a By, Via);

impl Lifecycle {
    /// Answers a confirm, by the path `via`. Yes with `claim_for = Some(session)` (the
    /// `channel_confirm` tool) hands the approved item to that session as a claim, to be
    /// settled like a wait's; yes without (the CLI, the page, a form) queues it as approved
    /// work for the next session. No returns `Ok(None)`. A path the rule's `approveVia` does
    /// not list is refused, and so is a session whose consumer the rule's `consumers` leave
    /// out; the confirm stays pending. The answer is in the actions journal before this
    /// returns `Ok`; when it cannot be written, [`ConfirmError::NotRecorded`] and nothing
    /// changed.
    pub async fn confirm(
        &self,
        id: ActionId,
        approve: bool,
        by: &By,
        via: Via,
        claim_for: Option<SessionId>,
        now: DateTime<Utc>,
    ) -> Result<Option<Item>, ConfirmError> {
        let state = if approve {
            ActionState::Approved
        } else {
            ActionState::Denied
        };
        let records = loop {
            // Another answer being saved: this one waits to hear how it went.
            let saved = self.inner.answered.notified();
            tokio::pin!(saved);
            saved.as_mut().enable();
            let checked = {
                let mut s = self.lock();
                if s.confirms.is_reserved(id) {
                    None
                } else {
                    Some(s.check_answer(id, via, claim_for, now).map(|()| {
                        s.confirms.reserve(id);
                        let item = s.confirms.get(id).expect("pending: checked above");
                        s.answer_records(item, state, (by, via), claim_for, now)
                    }))
                }
            };
            match checked {
                None => saved.await,
                Some(Ok(records)) => break records,
                Some(Err(e @ ConfirmError::Expired { .. })) => {
                    self.expire_due(now);
                    return Err(e);
                }
                Some(Err(e)) => return Err(e),
            }
        };
        let written = self.inner.journal.commit(records).await;
        let mut s = self.lock();
        s.confirms.unreserve(id);
        self.inner.answered.notify_waiters();
        if let Err(cause) = written {
            drop(s);
            // An expiry passed over while the answer was being saved comes now.
            self.inner.expiry.notify_one();
            tracing::warn!(
                action_id = id,
                via = %via,
                "answer to a confirm not recorded: the actions journal cannot be written ({cause}); the confirm stays pending"
            );
            return Err(ConfirmError::NotRecorded { id, cause });
        }
        let Some(item) = s.confirms.close(id, state, now, |c| {
            c.by = Some(by.clone());
            c.via = Some(via);
        }) else {
            // Reserved: nothing else closes it. Should it be gone anyway, the record on disk
            // is the answer, and the replay reads it so.
            return Err(s.confirms.refusal(id));
        };
        let mut changes = Changes::default();
        let approved = s.apply_answer(item, state, (by, via), claim_for, now, &mut changes);
        self.commit(s, changes);
        if approve && claim_for.is_none() {
            self.inner.wake.notify_waiters();
            self.inner.sharing.wake_out();
        }
        Ok(approved)
    }
}

impl State {
    /// Whether pending confirm `id` may be answered now by `via` (for `claim_for`'s session).
    fn check_answer(
        &self,
        id: ActionId,
        via: Via,
        claim_for: Option<SessionId>,
        now: DateTime<Utc>,
    ) -> Result<(), ConfirmError> {
        let Some(item) = self.confirms.get(id) else {
            return Err(self.confirms.refusal(id));
        };
        if let Some(refused) = self.refuse_own_permission(item, via) {
            return Err(refused);
        }
        if !item.allows(via) {
            return Err(ConfirmError::ViaRefused {
                id,
                rule: item.rule.to_string(),
                via,
                allowed: crate::actions::via::list(&item.approve_via),
            });
        }
        if let Some(expires) = item.expires_at
            && expires <= now
        {
            return Err(ConfirmError::Expired {
                id,
                expired: crate::message::format_timestamp(expires),
            });
        }
        // A window the rule's `consumers` leave out was never shown it: it may not answer it
        // (the operator's CLI, which claims nothing, may).
        if let Some(consumer) = claim_for.and_then(|session| self.sessions.consumer_of(session))
            && !item.consumers.admits(consumer)
        {
            let consumers = item
                .consumers
                .patterns()
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ConfirmError::NotForConsumer {
                id,
                consumer: consumer.to_string(),
                consumers,
            });
        }
        Ok(())
    }

    /// The records of an answer to pending confirm `item`: the decision, then what an
    /// approval makes of it (the relayed verdict delivered to the session that asked, or the
    /// claim of the session that answered).
    fn answer_records(
        &self,
        item: &Item,
        state: ActionState,
        (by, via): Who<'_>,
        claim_for: Option<SessionId>,
        now: DateTime<Utc>,
    ) -> Vec<Record> {
        let id = item.action_id;
        let mut records = vec![Record {
            by: Some(by.clone()),
            via: Some(via),
            ..Record::transition(id, state, now)
        }];
        if state != ActionState::Approved {
            return records;
        }
        if self.relays.contains(id) {
            records.push(Record {
                consumer: Some(self.relay_consumer(id)),
                ..Record::transition(id, ActionState::Delivered, now)
            });
        } else if let Some(session) = claim_for {
            records.push(Record {
                consumer: Some(self.claimer(session, by)),
                ..Record::transition(id, ActionState::Claimed, now)
            });
        }
        records
    }

    /// Records an answer to confirm `item` (closed already) and applies it: see
    /// [`State::apply_answer`].
    pub(super) fn answer(
        &mut self,
        item: Item,
        state: ActionState,
        who: Who<'_>,
        claim_for: Option<SessionId>,
        now: DateTime<Utc>,
        changes: &mut Changes,
    ) -> Option<Item> {
        let records = self.answer_records(&item, state, who, claim_for, now);
        changes.records.extend(records);
        self.apply_answer(item, state, who, claim_for, now, changes)
    }

    /// Applies an answer to confirm `item` (closed already, its records written or on their
    /// way), given by `who`: approved work is claimed for `claim_for`, or queued for the next
    /// session without one (or when that session ended meanwhile).
    fn apply_answer(
        &mut self,
        item: Item,
        state: ActionState,
        (by, via): Who<'_>,
        claim_for: Option<SessionId>,
        now: DateTime<Utc>,
        changes: &mut Changes,
    ) -> Option<Item> {
        let id = item.action_id;
        changes.event(Event::Answered {
            id,
            rule: item.rule.clone(),
            state,
            by: by.clone(),
            via: Some(via),
        });
        if state != ActionState::Approved {
            self.relays.remove(id);
            self.counters.denied += 1;
            return None;
        }
        self.counters.approved += 1;
        let approved = Item {
            kind: ItemKind::Approved,
            ..item
        };
        if self.relays.contains(id) {
            // A relayed permission request: the verdict goes to its host, nothing is queued.
            self.relayed_verdict(id, changes);
            return Some(approved);
        }
        match claim_for {
            Some(session) => {
                let consumer = self.claimer(session, by);
                changes.event(Event::Claimed {
                    id,
                    consumer: consumer.clone(),
                });
                self.counters.claimed += 1;
                self.work.claim(approved.clone(), session, &consumer);
                if self.sessions.consumer_of(session).is_none() {
                    let why = "the session that answered ended before its answer was saved";
                    self.release(&[id], why, false, now, changes);
                }
            }
            None => {
                self.push_work(approved.clone());
                changes.event(Event::Queued {
                    item: approved.clone(),
                });
            }
        }
        Some(approved)
    }

    /// The consumer that claims approved work for `session`, which answered as `by`: the
    /// session's own (`by`'s id should it have ended meanwhile).
    fn claimer(&self, session: SessionId, by: &By) -> String {
        self.sessions
            .consumer_of(session)
            .unwrap_or(&by.id)
            .to_string()
    }
}
