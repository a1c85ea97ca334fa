//! Work exactly once across instances: the work queue every instance pulls from.
//!
//! Every instance evaluates every message with its own rules, so the same `auto` rule on
//! three instances makes the same piece of work three times. The work that must run once —
//! auto prompts and confirms approved outside a session (`switchboard confirm`, the page) —
//! therefore does not go to the local sessions: the lifecycle hands it here
//! (`actions::lifecycle::shared`), and it is published to a second stream, `STREAM_WORK`,
//! on the subject `PREFIX.work.<message's stream seq>.<rule>`.
//!
//! # One piece of work per message and rule: a compare-and-set on the subject
//!
//! The publish carries `Nats-Expected-Last-Subject-Sequence: 0`: JetStream stores it only if
//! the subject holds nothing yet, the same compare-and-set a KV `create` is (a KV bucket is a
//! stream with a subject per key). The first instance to publish makes the work; the others
//! get "wrong last sequence" and record their copy as `shared` (a duplicate). Why not
//! `Nats-Msg-Id` alone: the duplicate window is time-bounded (two minutes by default), and an
//! instance that was down catches up and evaluates the message long after the others; the
//! subject's compare-and-set holds as long as the work stream keeps the item. The stream uses
//! limits retention (an acknowledged item stays, so that it still blocks a late duplicate)
//! and no age limit; an operator who sets `max_age` on it bounds that guarantee by it. (The
//! work id also goes as `Nats-Msg-Id`, so a publish retried within the window is answered as a
//! duplicate without a second store either way.)
//!
//! # Pull on demand, claim, extend, acknowledge
//!
//! All instances read the work stream through one shared durable pull consumer (`work`,
//! explicit acks, `AckWait` = `workAckWait`), so JetStream hands each item to one of them:
//! - An instance pulls (one item, one request) only when one of its sessions waits with
//!   nothing local to take (`work_demand`); the item becomes local work (`work_in`: a local
//!   action id, recorded in `actions.jsonl`, its message marked `jetstream.work`), which the
//!   waiting session claims as it claims any work.
//! - While the item is here — queued for a moment, or claimed by a wait whose result is on
//!   its way — this instance sends `AckProgress` every third of `AckWait` (at most every
//!   second), so that a slow delivery is not given to another instance.
//! - When the session's result was delivered (the lifecycle's `delivered` event), the item is
//!   acknowledged (double ack: JetStream confirms it); a holder that missed the event (it fell
//!   behind the lifecycle's event channel) finds the item gone (`work_held`) at its next tick
//!   and acknowledges it then. When no session here claimed it within
//!   one tick (the wait that asked ended, or no waiting session is in the rule's
//!   `consumers`), it is taken back (`work_withdraw`) and NAKed, with a short delay, for
//!   another instance.
//! - When this instance dies holding it, nothing extends it: JetStream delivers it again
//!   after `AckWait` to another instance's waiting session. At boot an instance does not
//!   queue again what it had taken in; it records it as `shared`.
//!
//! So delivery is JetStream's at-least-once made effectively once: an item is delivered once
//! unless its holder dies (or loses NATS for longer than `AckWait`) after the session's result
//! was sent and before the acknowledgement reached JetStream — then another instance delivers
//! it again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::pull, message::PublishMessage, stream};
use futures::StreamExt;
use tokio::sync::broadcast::error::RecvError;

use super::{INSTANCE_HEADER, SEQ_KEY, Shared, retry, token};
use crate::actions::lifecycle::Held;
use crate::actions::{Event, Item};
use crate::control::Local;
use crate::control::ops::{WorkDemand, WorkHeld, WorkIn, WorkOut, WorkShared, WorkWithdraw};

/// The shared durable consumer's name: every instance pulls through the same one.
const DURABLE: &str = "work";
/// How long one pull request waits for an item.
const PULL_EXPIRES: Duration = Duration::from_secs(5);
/// How long an item given back waits before JetStream offers it again.
const NAK_DELAY: Duration = Duration::from_millis(200);

/// What `stats`, `status` and `/metrics` show of the shared work queue (`jetstream.work`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkState {
    /// Work this instance made and published.
    pub published: u64,
    /// Work this instance made that another instance had made first (dropped as duplicates).
    pub duplicates: u64,
    /// Items this instance pulled for its waiting sessions.
    pub taken: u64,
    /// Of those, items JetStream had delivered before (their holder died or gave them back).
    pub redelivered: u64,
    /// Items delivered by a session here and acknowledged.
    pub acked: u64,
    /// Items delivered here whose acknowledgement did not reach JetStream (delivered again
    /// elsewhere after `workAckWait`).
    pub unacked: u64,
    /// Items given back because no session here claimed them.
    pub returned: u64,
    /// Items held here now (queued for a moment or claimed, extended until delivered).
    pub held: u64,
    /// Items in the queue not yet delivered to any instance (as of the last look, every
    /// heartbeat).
    pub pending: u64,
    /// Items delivered to some instance and not yet acknowledged, across all instances.
    pub in_flight: u64,
    /// Items JetStream is delivering again (their ack wait ran out or they were given back).
    pub redelivering: u64,
}

impl WorkState {
    /// The part of the `jetstream` line about work; empty while no work was seen.
    pub fn line(&self) -> String {
        if *self == WorkState::default() {
            return String::new();
        }
        format!(
            "; work: {} pending, {} in flight, {} redelivering; here {} published, {} \
             duplicates, {} taken ({} redelivered), {} acknowledged, {} held",
            self.pending,
            self.in_flight,
            self.redelivering,
            self.published,
            self.duplicates,
            self.taken,
            self.redelivered,
            self.acked,
            self.held
        )
    }

    /// What it adds to `/metrics`.
    pub fn metrics(&self, out: &mut crate::metrics::Scrape) {
        use crate::metrics::Kind;
        let rows: [(&str, Kind, &str, u64); 10] = [
            (
                "work_pending",
                Kind::Gauge,
                "Shared work not yet delivered to any instance.",
                self.pending,
            ),
            (
                "work_in_flight",
                Kind::Gauge,
                "Shared work delivered to an instance and not yet acknowledged.",
                self.in_flight,
            ),
            (
                "work_redelivering",
                Kind::Gauge,
                "Shared work JetStream is delivering again.",
                self.redelivering,
            ),
            (
                "work_held",
                Kind::Gauge,
                "Shared work held by this instance now.",
                self.held,
            ),
            (
                "work_published_total",
                Kind::Counter,
                "Work this instance made and published to the shared queue.",
                self.published,
            ),
            (
                "work_duplicates_total",
                Kind::Counter,
                "Work this instance made that another instance had made first.",
                self.duplicates,
            ),
            (
                "work_taken_total",
                Kind::Counter,
                "Shared work pulled by this instance for its waiting sessions.",
                self.taken,
            ),
            (
                "work_redelivered_total",
                Kind::Counter,
                "Shared work pulled here that JetStream had delivered before.",
                self.redelivered,
            ),
            (
                "work_acked_total",
                Kind::Counter,
                "Shared work delivered here and acknowledged.",
                self.acked,
            ),
            (
                "work_returned_total",
                Kind::Counter,
                "Shared work given back because no session here claimed it.",
                self.returned,
            ),
        ];
        for (name, kind, help, v) in rows {
            out.family(&format!("switchboard_jetstream_{name}"), help, kind)
                .value(crate::metrics::count(v));
        }
    }
}

/// Reads the shared consumer's pending, in-flight and redelivering counts.
pub(super) async fn refresh(s: &Shared) {
    if !s.work_ready.load(Ordering::Relaxed) {
        return;
    }
    let Ok(stream) = s.js.get_stream(stream_name(&s.settings.stream)).await else {
        return;
    };
    let Ok(mut consumer) = stream.get_consumer::<pull::Config>(DURABLE).await else {
        return;
    };
    if let Ok(info) = consumer.info().await {
        let c = &s.counters;
        c.work_pending.store(info.num_pending, Ordering::Relaxed);
        c.work_in_flight
            .store(info.num_ack_pending as u64, Ordering::Relaxed);
        c.work_redelivering
            .store(info.num_redelivered as u64, Ordering::Relaxed);
    }
}

/// Which work is shared: work from a message of the shared stream (it has a stream seq that
/// names it on every instance). Work from older, local-only messages stays local.
pub fn shareable(item: &Item) -> bool {
    item.message.metadata.contains_key(SEQ_KEY)
}

/// The work stream's name.
pub(super) fn stream_name(stream: &str) -> String {
    format!("{stream}_WORK")
}

/// The work's subject tail, `<stream seq>.<rule>`: the same on every instance. A rule name
/// that is not a NATS token is written in hex (`x` first), so that no two names meet.
fn key(item: &Item) -> Option<String> {
    let seq = item.message.metadata.get(SEQ_KEY)?;
    let rule = &*item.rule;
    let rule = if !rule.is_empty() && token(rule) == rule && !rule.starts_with('x') {
        rule.to_string()
    } else {
        let hex: String = rule.bytes().map(|b| format!("{b:02x}")).collect();
        format!("x{hex}")
    };
    Some(format!("{}.{rule}", token(seq)))
}

/// Creates the work stream and the shared consumer when missing.
async fn prepare(s: &Shared) -> anyhow::Result<jetstream::consumer::Consumer<pull::Config>> {
    let prefix = &s.settings.subject_prefix;
    let name = stream_name(&s.settings.stream);
    let stream =
        s.js.get_or_create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("{prefix}.work.>")],
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| anyhow::anyhow!("stream `{name}`: {e}"))?;
    stream
        .get_or_create_consumer(
            DURABLE,
            pull::Config {
                durable_name: Some(DURABLE.into()),
                description: Some("switchboard work, shared by every instance".into()),
                deliver_policy: jetstream::consumer::DeliverPolicy::All,
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: s.settings.work_ack_wait,
                filter_subject: format!("{prefix}.work.>"),
                max_ack_pending: 10_000,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("consumer `{DURABLE}` of `{name}`: {e}"))
}

/// Starts the loops: out (publish what the lifecycle hands over), in (pull on demand).
pub(super) fn run(s: Arc<Shared>, local: Local, tasks: &tokio_util::task::TaskTracker) {
    tasks.spawn(share(s.clone(), local.clone()));
    tasks.spawn(pull(s, local, tasks.clone()));
}

/// Publishes each piece of work the lifecycle hands over, until JetStream has it (or has the
/// same work from another instance), then records it as `shared`.
async fn share(s: Arc<Shared>, local: Local) {
    let shutdown = local.shutdown().clone();
    loop {
        let Ok(Some(item)) = local.call_until(WorkOut {}, shutdown.clone()).await else {
            return;
        };
        let Some(key) = key(&item) else { continue };
        let mut backoff = retry();
        let reason = loop {
            match publish(&s, &item, &key).await {
                Ok(reason) => break reason,
                Err(e) => {
                    s.fail("work queue", format!("{e:#}"));
                    if !backoff.sleep(&shutdown).await {
                        return;
                    }
                }
            }
        };
        let id = item.action_id;
        if let Err(e) = local.call(WorkShared { id, reason }).await {
            tracing::warn!(action_id = id, cause = %e, "jetstream: shared work not recorded");
        }
    }
}

/// One publish of `item` as `key`; the reason for the record, or why it did not land.
async fn publish(s: &Shared, item: &Item, key: &str) -> anyhow::Result<String> {
    if s.client.connection_state() != async_nats::connection::State::Connected {
        anyhow::bail!("NATS is not reachable");
    }
    if !s.work_ready.load(Ordering::Acquire) {
        prepare(s).await?;
        s.work_ready.store(true, Ordering::Release);
    }
    let subject = format!("{}.work.{key}", s.settings.subject_prefix);
    let payload = serde_json::to_vec(item)?;
    let message = PublishMessage::build()
        .payload(payload.into())
        .message_id(key)
        .expected_last_subject_sequence(0)
        .header(INSTANCE_HEADER, s.instance.as_str());
    let sent = s.js.send_publish(subject, message).await;
    let acked = match sent {
        Ok(ack) => ack.await,
        Err(e) => return Err(e.into()),
    };
    let c = &s.counters;
    if acked.is_ok() {
        s.recovered("work queue");
    }
    match acked {
        Ok(ack) if !ack.duplicate => {
            c.work_published.fetch_add(1, Ordering::Relaxed);
            Ok(format!("published to the shared work queue as {key}"))
        }
        Ok(_) => {
            c.work_duplicates.fetch_add(1, Ordering::Relaxed);
            Ok(format!("already in the shared work queue as {key}"))
        }
        Err(e) if e.kind() == jetstream::context::PublishErrorKind::WrongLastSequence => {
            c.work_duplicates.fetch_add(1, Ordering::Relaxed);
            Ok(format!(
                "another instance made the same work ({key}): this copy is its duplicate"
            ))
        }
        Err(e) => Err(e.into()),
    }
}

/// Pulls one item whenever a session here waits for work this instance does not have.
async fn pull(s: Arc<Shared>, local: Local, tasks: tokio_util::task::TaskTracker) {
    let shutdown = local.shutdown().clone();
    let mut consumer = None;
    let mut backoff = retry();
    loop {
        match local.call_until(WorkDemand {}, shutdown.clone()).await {
            Ok(true) => {}
            _ => return,
        }
        let run = async {
            if consumer.is_none() {
                consumer = Some(prepare(&s).await?);
                s.work_ready.store(true, Ordering::Release);
            }
            let c = consumer.as_ref().expect("prepared above");
            let mut batch = c
                .fetch()
                .max_messages(1)
                .expires(PULL_EXPIRES)
                .messages()
                .await?;
            while let Some(m) = batch.next().await {
                let m = m.map_err(|e| anyhow::anyhow!("{e}"))?;
                take(&s, &local, &tasks, m).await;
            }
            anyhow::Ok(())
        };
        let r = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = run => r,
        };
        match r {
            Ok(()) => {
                s.recovered("work queue");
                backoff.reset();
            }
            Err(e) => {
                consumer = None;
                s.fail("work queue", format!("{e:#}"));
                if !backoff.sleep(&shutdown).await {
                    return;
                }
            }
        }
    }
}

/// Takes a pulled item in as local work and holds it until it is delivered or given back.
async fn take(
    s: &Arc<Shared>,
    local: &Local,
    tasks: &tokio_util::task::TaskTracker,
    m: jetstream::Message,
) {
    let c = &s.counters;
    if m.info().is_ok_and(|i| i.delivered > 1) {
        c.work_redelivered.fetch_add(1, Ordering::Relaxed);
    }
    let prefix = format!("{}.work.", s.settings.subject_prefix);
    let key = m
        .subject
        .as_str()
        .strip_prefix(&prefix)
        .unwrap_or(m.subject.as_str())
        .to_string();
    let item = match serde_json::from_slice::<Item>(&m.payload) {
        Ok(item) => item,
        Err(e) => {
            tracing::warn!(key, cause = %e, "jetstream: an item of the work queue is not switchboard work; terminated");
            let _ = m.ack_with(AckKind::Term).await;
            return;
        }
    };
    // Subscribed before the item is queued: its claim and delivery are not missed.
    let events = local.subscribe().events;
    let local_item = match local.call(WorkIn { item, key }).await {
        Ok(item) => item,
        Err(e) => {
            tracing::warn!(cause = %e, "jetstream: pulled work not taken in; given back");
            let _ = m.ack_with(AckKind::Nak(Some(NAK_DELAY))).await;
            return;
        }
    };
    c.work_taken.fetch_add(1, Ordering::Relaxed);
    tasks.spawn(hold(
        s.clone(),
        local.clone(),
        m,
        local_item.action_id,
        events,
    ));
}

/// Holds one taken-in item: extends it while it is here, acknowledges it once delivered,
/// gives it back when no session claimed it within a tick. The lifecycle's events say when it
/// is claimed, released or delivered; a holder that fell behind them (the channel lagged) asks
/// where the item is instead, and so does every tick, so a missed `delivered` is acknowledged
/// within a tick rather than extended for ever.
async fn hold(
    s: Arc<Shared>,
    local: Local,
    m: jetstream::Message,
    id: crate::actions::ActionId,
    mut events: tokio::sync::broadcast::Receiver<Event>,
) {
    let shutdown = local.shutdown().clone();
    let c = &s.counters;
    let every = (s.settings.work_ack_wait / 3)
        .min(Duration::from_secs(1))
        .max(Duration::from_millis(50));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut claimed = false;
    c.work_held.fetch_add(1, Ordering::Relaxed);
    loop {
        let held = tokio::select! {
            // Dying (or stopping) holding it: JetStream gives it to another after AckWait.
            _ = shutdown.cancelled() => {
                if !claimed {
                    // Stopping with it unclaimed: another instance may take it at once.
                    let _ = m.ack_with(AckKind::Nak(None)).await;
                }
                break;
            }
            got = events.recv() => match got {
                Ok(Event::Claimed { id: i, .. }) if i == id => Held::Claimed,
                Ok(Event::Released { id: i, .. }) if i == id => Held::Queued,
                Ok(Event::Delivered { id: i, .. }) if i == id => Held::Gone,
                Ok(_) => continue,
                Err(RecvError::Lagged(_)) => match local.call(WorkHeld { id }).await {
                    Ok(held) => held,
                    Err(_) => continue,
                },
                Err(RecvError::Closed) => break,
            },
            _ = tick.tick() => {
                let held = if claimed {
                    local.call(WorkHeld { id }).await
                } else {
                    local.call(WorkWithdraw { id }).await
                };
                match held {
                    // Unclaimed for a whole tick: taken back here, given back to the queue.
                    Ok(Held::Queued) if !claimed => {
                        c.work_returned.fetch_add(1, Ordering::Relaxed);
                        let _ = m.ack_with(AckKind::Nak(Some(NAK_DELAY))).await;
                        break;
                    }
                    Ok(Held::Gone) => Held::Gone,
                    // Still here: keep it.
                    still => {
                        let _ = m.ack_with(AckKind::Progress).await;
                        match still {
                            Ok(held) => held,
                            Err(_) if claimed => Held::Claimed,
                            Err(_) => Held::Queued,
                        }
                    }
                }
            }
        };
        match held {
            Held::Claimed => claimed = true,
            Held::Queued => claimed = false,
            Held::Gone => {
                match m.double_ack().await {
                    Ok(()) => c.work_acked.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        tracing::warn!(action_id = id, cause = %e, "jetstream: delivered work not acknowledged; another instance may deliver it again after its ack wait");
                        c.work_unacked.fetch_add(1, Ordering::Relaxed)
                    }
                };
                break;
            }
        }
    }
    c.work_held.fetch_sub(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::message::{Message, NewMessage};

    fn item(rule: &str, seq: Option<&str>) -> Item {
        let mut new = NewMessage::new("s", "c", "m");
        if let Some(seq) = seq {
            new.metadata.insert(SEQ_KEY, seq);
        }
        let message = Message::from_new(new, 3, chrono::Utc::now());
        Item {
            kind: crate::actions::ItemKind::Auto,
            action_id: 1,
            rule: rule.into(),
            prompt: "p".into(),
            tools: vec![],
            expires_at: None,
            message: Arc::new(message),
            delivery: Default::default(),
            approve_via: vec![],
            consumers: Default::default(),
            redelivered: false,
        }
    }

    #[test]
    fn the_key_is_the_stream_seq_and_the_rule_and_names_never_meet() {
        assert_eq!(key(&item("triage", Some("41"))).unwrap(), "41.triage");
        assert_eq!(key(&item("a.b", Some("41"))).unwrap(), "41.x612e62");
        assert_eq!(key(&item("a_b", Some("41"))).unwrap(), "41.a_b");
        assert_eq!(key(&item("xy", Some("41"))).unwrap(), "41.x7879");
        assert!(key(&item("triage", None)).is_none());
        assert!(shareable(&item("t", Some("1"))));
        assert!(!shareable(&item("t", None)), "a local-only message's work");
    }
}
