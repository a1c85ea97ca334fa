//! NATS JetStream: one message stream for many switchboard instances (the `jetstream`
//! section of `switchboard.json`).
//!
//! # The design: beside the journal, not instead of it
//!
//! Each instance keeps its own inbox — ring, local journal, cursors, engine, actions — and the
//! stream becomes the way in. This component owns the connection, the stream's and this
//! instance's consumer's state, and the instances heard on the heartbeat subject:
//! - **Publish on ingest.** Every front end's append (HTTP ingest, upstream servers,
//!   `switchboard send`) reaches the daemon's [`crate::control::Relay`], implemented here: each
//!   message is published to `PREFIX.msg.<channel>` (the channel's `/` as `.`), its source id
//!   as `Nats-Msg-Id` so that JetStream's duplicate window drops a retry, and the sender is
//!   answered only once JetStream acknowledged every message (then 202; unreachable or not
//!   acknowledged in `publishTimeout`: 503, nothing claimed that is not in the stream).
//! - **One durable consumer per instance** (named after `instance`) feeds the local inbox in
//!   stream order through the `replicate` operation: a batch is stored (journal, fsync
//!   policy) before its messages are acknowledged to JetStream — with one ack of the newest
//!   stored message, shared by the batches that follow within 5 ms, up to 64 messages
//!   (`AckPolicy::All`; a consumer made by an earlier version keeps `Explicit`, and each of its
//!   messages is acked). The stream seq goes with the
//!   record as metadata (`jetstream.seq`, and the ingesting instance as `jetstream.instance`),
//!   so that at boot the inbox's newest records say how far this instance got: a message
//!   delivered again after a crash between store and acknowledgement is acknowledged, not
//!   stored twice. Every instance therefore sees every message once, in the same order.
//! - The ingesting instance stores its own messages through its consumer too, like everyone
//!   else's; its sender's reply waits (up to `publishTimeout`) for that, so that it carries
//!   this inbox's seqs as it always has (0 when the consumer is behind).
//!
//! Why not a second [`crate::inbox::log::Log`]: the log takes records that already have this
//! inbox's seqs, under its append lock; messages from other instances would have to enter
//! below it. Feeding the inbox from the consumer, above it, leaves the ring, the seqs, the
//! cursors, the engine and the actions exactly as they are: a message from another machine is
//! an append like any other, and a JetStream outage only stops new messages — sessions go on
//! reading and working on what is local.
//!
//! Outages: while the connection is down (or the stream not yet created) an append is refused
//! at once (refused as `unavailable`, which ingest answers with 503); the client reconnects in the
//! background and the consumer carries on from its ack floor. `stats`, `status` and
//! `/metrics` show the connection, the consumer's lag (messages in the stream not yet
//! delivered to it), redeliveries, and the other instances heard on `PREFIX.hb.*`.
//!
//! Work that must run once across instances (auto prompts, confirms approved outside a
//! session) goes through a second stream, a work queue every instance pulls from on demand:
//! see [`work`].

mod applied;
mod owner;
mod settings;
pub mod work;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, message::PublishMessage, stream};
use futures::{FutureExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio_util::task::TaskTracker;

use crate::control::local::BoxFuture;
use crate::control::ops::{EachAppended, List, Replicate};
use crate::control::{ApiError, Local, Relay};
use crate::duration::Backoff;
use crate::inbox::Appended;
use crate::message::NewMessage;

pub use settings::{JetStreamSettings, host_name};
pub use work::{WorkState, shareable};

/// The metadata key that carries a message's stream seq in every instance's inbox.
pub const SEQ_KEY: &str = "jetstream.seq";
/// The metadata key that names the instance that ingested a message.
pub const INSTANCE_KEY: &str = "jetstream.instance";
/// The header that names the ingesting instance.
const INSTANCE_HEADER: &str = "Switchboard-Instance";
/// The header that names the source an instance counted the message as from.
const SOURCE_HEADER: &str = "Switchboard-Source";
/// How many stream seqs → local answers are remembered for the replies of ingest.
const REMEMBERED: usize = 4096;
/// Messages stored in the local inbox as one batch, at most.
const BATCH: usize = 256;

/// The waits between the tries of what fails against the server (consuming, storing,
/// publishing work): 100 ms, doubling up to 2 s.
fn retry() -> Backoff {
    Backoff::new(Duration::from_millis(100), Duration::from_secs(2))
}

/// What `stats` and `status` show of the shared stream (the `jetstream` part).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JetStreamState {
    /// This instance's name on the stream.
    pub instance: String,
    /// The NATS servers.
    pub servers: Vec<String>,
    /// `connected`, `connecting` or `disconnected`.
    pub connection: String,
    /// The stream.
    pub stream: String,
    /// Whether the stream and this instance's consumer are ready (appends are refused until).
    pub ready: bool,
    /// The newest stream seq this instance stored.
    pub applied: u64,
    /// Messages in the stream not yet delivered to this instance's consumer (as of the last
    /// look, every heartbeat).
    pub lag: u64,
    /// Delivered but not yet acknowledged.
    pub ack_pending: u64,
    /// Messages JetStream delivered to this consumer more than once (its own count).
    pub redelivered: u64,
    /// Messages this instance published (acknowledged by JetStream).
    pub published: u64,
    /// Of those, dropped by JetStream's duplicate window.
    pub duplicates: u64,
    /// Appends refused because JetStream could not be reached or did not acknowledge.
    pub refused: u64,
    /// Messages stored from the stream into this inbox.
    pub stored: u64,
    /// Messages of the stream this inbox refused (over its limits, or undecodable).
    pub skipped: u64,
    /// The last error, while the connection or the consumer fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The other instances heard on the heartbeat subject within three heartbeats.
    #[serde(default)]
    pub instances: Vec<InstanceSeen>,
    /// The shared work queue, as this instance sees it.
    #[serde(default)]
    pub work: WorkState,
}

/// Another instance, as its heartbeat says.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceSeen {
    /// Its name.
    pub instance: String,
    /// The newest stream seq it stored.
    pub applied: u64,
    /// Its version.
    pub version: String,
    /// Seconds since its last heartbeat.
    pub seen_s: f64,
}

impl JetStreamState {
    /// One line for `status` and `stats`.
    pub fn line(&self) -> String {
        let others = if self.instances.is_empty() {
            "no other instance heard".to_string()
        } else {
            let names: Vec<_> = self
                .instances
                .iter()
                .map(|i| format!("{} ({:.0}s ago)", i.instance, i.seen_s))
                .collect();
            format!("instances: {}", names.join(", "))
        };
        // Messages of the stream this inbox could not take: said only when there are some.
        let skipped = match self.skipped {
            0 => String::new(),
            n => format!(", {n} skipped"),
        };
        format!(
            "{} as `{}`, stream {} {}; applied seq {}, lag {}, {} redelivered{}; {}{}{}",
            self.connection,
            self.instance,
            self.stream,
            if self.ready { "ready" } else { "NOT READY" },
            self.applied,
            self.lag,
            self.redelivered,
            skipped,
            others,
            self.work.line(),
            self.error
                .as_deref()
                .map(|e| format!("; error: {e}"))
                .unwrap_or_default()
        )
    }
}

/// The heartbeat's payload.
#[derive(Debug, Serialize, Deserialize)]
struct Heartbeat {
    instance: String,
    applied: u64,
    version: String,
}

#[derive(Default)]
struct Counters {
    published: AtomicU64,
    duplicates: AtomicU64,
    refused: AtomicU64,
    stored: AtomicU64,
    skipped: AtomicU64,
    redelivered: AtomicU64,
    lag: AtomicU64,
    ack_pending: AtomicU64,
    work_published: AtomicU64,
    work_duplicates: AtomicU64,
    work_taken: AtomicU64,
    work_redelivered: AtomicU64,
    work_acked: AtomicU64,
    work_unacked: AtomicU64,
    work_returned: AtomicU64,
    work_held: AtomicU64,
    work_pending: AtomicU64,
    work_in_flight: AtomicU64,
    work_redelivering: AtomicU64,
}

/// What the relay, the consumer and the reports share.
struct Shared {
    settings: JetStreamSettings,
    instance: String,
    /// The durable consumer's name: the instance, as a NATS name.
    durable: String,
    client: async_nats::Client,
    js: jetstream::Context,
    /// The stream and the consumer exist: appends may be published.
    ready: AtomicBool,
    /// The work stream and its shared consumer exist.
    work_ready: AtomicBool,
    /// The newest stream seq stored in the local inbox, and the ingests waiting for theirs.
    applied: applied::Applied,
    /// Recent stream seqs and what the local inbox answered for them.
    answers: Mutex<VecDeque<(u64, Appended)>>,
    counters: Counters,
    error: Mutex<Option<String>>,
    /// The connection's last error (a refused credential, an unreachable server) while it
    /// fails: said before any other, since nothing else works until it is mended.
    connection_error: Arc<Mutex<Option<String>>>,
    /// Whether this daemon holds its consumer's name (see [`owner`]): it consumes only then.
    claimed: tokio::sync::watch::Sender<bool>,
    instances: Mutex<BTreeMap<String, (Instant, Heartbeat)>>,
}

/// The running component: the [`Relay`] for the daemon's appends, and its reports.
#[derive(Clone)]
pub struct JetStream {
    shared: Arc<Shared>,
}

/// `name` as a NATS token: what is not a letter, digit, `_` or `-` becomes `_`.
fn token(name: &str) -> String {
    let mut t = String::with_capacity(name.len());
    push_token(&mut t, name);
    t
}

/// Appends `name` as a NATS token to `out` (see [`token`]).
fn push_token(out: &mut String, name: &str) {
    if name.is_empty() {
        out.push('_');
    }
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            c
        } else {
            '_'
        }
    }));
}

/// The subject of a message on `channel`: `PREFIX.msg.` and the channel's segments as tokens.
/// Built in one string: it runs for every message published.
pub fn subject(prefix: &str, channel: &str) -> String {
    let channel = crate::message::normalize_channel(channel);
    let mut out = String::with_capacity(prefix.len() + ".msg.".len() + channel.len());
    out.push_str(prefix);
    out.push_str(".msg");
    for segment in channel.split('/') {
        out.push('.');
        push_token(&mut out, segment);
    }
    out
}

impl JetStream {
    /// Connects, in the background: the daemon starts while NATS is down, and its appends are
    /// refused until the stream is reached. [`JetStream::run`] starts the consumer.
    pub async fn connect(
        settings: JetStreamSettings,
        home: &std::path::Path,
    ) -> anyhow::Result<JetStream> {
        let problems: Vec<String> = settings.problems().into_iter().map(|(_, p)| p).collect();
        if !problems.is_empty() {
            anyhow::bail!("switchboard.json: {}", problems.join("; "));
        }
        let instance = settings.instance_name(home);
        let mut options = match (&settings.credentials, &settings.token) {
            (Some(path), _) => async_nats::ConnectOptions::with_credentials_file(path)
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "switchboard.json: `jetstream.credentials` {}: {e}",
                        path.display()
                    )
                })?,
            (None, Some(t)) => async_nats::ConnectOptions::with_token(t.clone()),
            (None, None) => async_nats::ConnectOptions::new(),
        };
        let connection_error = Arc::new(Mutex::new(None));
        let seen = connection_error.clone();
        options = options
            .event_callback(move |event| {
                connection_event(&seen, event);
                std::future::ready(())
            })
            .name(format!("switchboard {instance}"))
            .retry_on_initial_connect()
            .max_reconnects(None)
            .connection_timeout(Duration::from_secs(2))
            .reconnect_delay_callback(|n| Duration::from_millis((n as u64 * 100).min(1000)));
        let addrs = settings
            .servers
            .iter()
            .map(|s| {
                s.parse::<async_nats::ServerAddr>().map_err(|e| {
                    anyhow::anyhow!("switchboard.json: `jetstream.servers` \"{s}\": {e}")
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let client = options
            .connect(addrs)
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to NATS: {e}"))?;
        let js = jetstream::ContextBuilder::new()
            .timeout(settings.publish_timeout)
            .max_ack_inflight(65536)
            .backpressure_on_inflight(true)
            .build(client.clone());
        let durable = token(&instance);
        let shared = Arc::new(Shared {
            settings,
            instance,
            durable,
            client,
            js,
            ready: AtomicBool::new(false),
            work_ready: AtomicBool::new(false),
            applied: applied::Applied::default(),
            answers: Mutex::new(VecDeque::new()),
            counters: Counters::default(),
            error: Mutex::new(None),
            connection_error,
            claimed: tokio::sync::watch::Sender::new(false),
            instances: Mutex::new(BTreeMap::new()),
        });
        Ok(JetStream { shared })
    }

    /// Starts the consumer (storing into `local`), the heartbeat and the lag refresher on
    /// `tasks`; they stop when the daemon shuts down.
    pub fn run(&self, local: Local, tasks: &TaskTracker) {
        tasks.spawn(owner::hold(self.shared.clone(), local.shutdown().clone()));
        tasks.spawn(consume(self.shared.clone(), local.clone()));
        tasks.spawn(heartbeat(self.shared.clone(), local.clone()));
        work::run(self.shared.clone(), local, tasks);
    }

    /// What `stats` and `status` show.
    pub fn state(&self) -> JetStreamState {
        let s = &*self.shared;
        let c = &s.counters;
        let every = s.settings.heartbeat * 3;
        let instances = s
            .instances
            .lock()
            .unwrap()
            .values()
            .filter(|(at, _)| at.elapsed() <= every)
            .map(|(at, hb)| InstanceSeen {
                instance: hb.instance.clone(),
                applied: hb.applied,
                version: hb.version.clone(),
                seen_s: at.elapsed().as_secs_f64(),
            })
            .collect();
        JetStreamState {
            instance: s.instance.clone(),
            servers: s.settings.servers.clone(),
            connection: match s.client.connection_state() {
                async_nats::connection::State::Connected => "connected",
                async_nats::connection::State::Pending => "connecting",
                async_nats::connection::State::Disconnected => "disconnected",
            }
            .into(),
            stream: s.settings.stream.clone(),
            ready: s.ready.load(Ordering::Relaxed),
            applied: s.applied.get(),
            lag: c.lag.load(Ordering::Relaxed),
            ack_pending: c.ack_pending.load(Ordering::Relaxed),
            redelivered: c.redelivered.load(Ordering::Relaxed),
            published: c.published.load(Ordering::Relaxed),
            duplicates: c.duplicates.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            stored: c.stored.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            error: (s.connection_error.lock().unwrap().clone())
                .or_else(|| s.error.lock().unwrap().clone()),
            instances,
            work: WorkState {
                published: c.work_published.load(Ordering::Relaxed),
                duplicates: c.work_duplicates.load(Ordering::Relaxed),
                taken: c.work_taken.load(Ordering::Relaxed),
                redelivered: c.work_redelivered.load(Ordering::Relaxed),
                acked: c.work_acked.load(Ordering::Relaxed),
                unacked: c.work_unacked.load(Ordering::Relaxed),
                returned: c.work_returned.load(Ordering::Relaxed),
                held: c.work_held.load(Ordering::Relaxed),
                pending: c.work_pending.load(Ordering::Relaxed),
                in_flight: c.work_in_flight.load(Ordering::Relaxed),
                redelivering: c.work_redelivering.load(Ordering::Relaxed),
            },
        }
    }

    /// What it adds to `/metrics`.
    pub fn metrics(&self, out: &mut crate::metrics::Scrape) {
        use crate::metrics::Kind;
        let st = self.state();
        let mut line = |name: &str, kind: Kind, help: &str, v: f64| {
            out.family(&format!("switchboard_jetstream_{name}"), help, kind)
                .value(v);
        };
        line(
            "connected",
            Kind::Gauge,
            "1 while connected to NATS and the stream is ready.",
            f64::from(u8::from(st.connection == "connected" && st.ready)),
        );
        line(
            "consumer_lag",
            Kind::Gauge,
            "Messages in the stream not yet delivered to this instance's consumer.",
            st.lag as f64,
        );
        line(
            "ack_pending",
            Kind::Gauge,
            "Messages delivered to this instance's consumer and not yet acknowledged.",
            st.ack_pending as f64,
        );
        line(
            "redelivered_total",
            Kind::Counter,
            "Messages JetStream delivered to this instance's consumer more than once.",
            st.redelivered as f64,
        );
        line(
            "published_total",
            Kind::Counter,
            "Messages this instance published and JetStream acknowledged.",
            st.published as f64,
        );
        line(
            "publish_refused_total",
            Kind::Counter,
            "Appends refused because JetStream was unreachable or did not acknowledge.",
            st.refused as f64,
        );
        line(
            "stored_total",
            Kind::Counter,
            "Messages from the stream stored in this instance's inbox.",
            st.stored as f64,
        );
        line(
            "skipped_total",
            Kind::Counter,
            "Messages of the stream this inbox refused (not a switchboard message, or over its limits).",
            st.skipped as f64,
        );
        line(
            "applied_seq",
            Kind::Gauge,
            "The newest stream seq stored in this instance's inbox.",
            st.applied as f64,
        );
        line(
            "instances",
            Kind::Gauge,
            "Other instances heard on the heartbeat subject within three heartbeats.",
            st.instances.len() as f64,
        );
        st.work.metrics(out);
    }
}

impl Shared {
    fn fail(&self, what: &str, e: impl std::fmt::Display) {
        let text = format!("{what}: {e}");
        let mut error = self.error.lock().unwrap();
        if error.as_deref() != Some(text.as_str()) {
            tracing::warn!(cause = %e, "jetstream: {what}");
        }
        *error = Some(text);
    }

    /// Forgets the last error when it was `what`'s: it works again.
    fn recovered(&self, what: &str) {
        let mut error = self.error.lock().unwrap();
        if error.as_deref().is_some_and(|e| e.starts_with(what)) {
            *error = None;
        }
    }

    fn unreachable(&self, why: impl std::fmt::Display) -> ApiError {
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
        ApiError::refused(
            crate::control::RefusalCode::Unavailable,
            format!(
                "not stored: JetStream ({}) {why}; retry later (a retry with the same ids is \
             dropped as a duplicate if the first one reached the stream)",
                self.settings.servers.join(", ")
            ),
        )
    }

    async fn publish(
        &self,
        messages: Vec<NewMessage>,
        source: &str,
    ) -> Result<Vec<Appended>, ApiError> {
        if self.client.connection_state() != async_nats::connection::State::Connected {
            return Err(match self.connection_error.lock().unwrap().clone() {
                Some(why) => self.unreachable(format_args!("is not reachable ({why})")),
                None => self.unreachable("is not reachable"),
            });
        }
        if !self.ready.load(Ordering::Acquire) {
            return Err(match self.error.lock().unwrap().clone() {
                Some(why) => self.unreachable(format_args!("is not ready ({why})")),
                None => self.unreachable("has no stream for switchboard yet"),
            });
        }
        let now = chrono::Utc::now();
        let mut acks = Vec::with_capacity(messages.len());
        for mut m in messages {
            // One time for every instance, not each one's receive time.
            m.timestamp.get_or_insert(now);
            let subject = subject(&self.settings.subject_prefix, &m.channel);
            let payload = serde_json::to_vec(&m).unwrap_or_default();
            let mut publish = PublishMessage::build()
                .payload(payload.into())
                .header(INSTANCE_HEADER, self.instance.as_str())
                .header(SOURCE_HEADER, source);
            if let Some(id) = m.id.as_deref().filter(|id| !id.is_empty()) {
                publish = publish.message_id(id);
            }
            let ack = self
                .js
                .send_publish(subject, publish)
                .await
                .map_err(|e| self.unreachable(format_args!("did not take the message: {e}")))?;
            acks.push(ack);
        }
        let mut seqs = Vec::with_capacity(acks.len());
        for ack in acks {
            let ack = ack
                .await
                .map_err(|e| self.unreachable(format_args!("did not acknowledge: {e}")))?;
            self.counters.published.fetch_add(1, Ordering::Relaxed);
            if ack.duplicate {
                self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
            }
            seqs.push((ack.sequence, ack.duplicate));
        }
        // The sender hears this inbox's seqs, once its consumer stored them.
        let last = seqs.iter().map(|(s, _)| *s).max().unwrap_or(0);
        self.applied
            .reached(last, self.settings.publish_timeout)
            .await;
        let answers = self.answers.lock().unwrap();
        let mut out = Vec::with_capacity(seqs.len());
        for (seq, duplicate) in seqs {
            // In stream order, each seq once: a binary search, not two scans of 4096.
            let Some(local) = answers
                .binary_search_by_key(&seq, |(s, _)| *s)
                .ok()
                .map(|i| answers[i].1)
            else {
                // In the stream, but not stored here: never a 202 with seq 0 (issue 46.6).
                return Err(self.unreachable(format_args!(
                    "took the message as stream seq {seq}, but this instance's consumer did \
                     not store it within `publishTimeout` ({})",
                    humantime::format_duration(self.settings.publish_timeout)
                )));
            };
            out.push(Appended {
                seq: local.seq,
                duplicate: duplicate || local.duplicate,
            });
        }
        Ok(out)
    }
}

impl Relay for JetStream {
    fn append(
        &self,
        messages: Vec<NewMessage>,
        source: &str,
    ) -> BoxFuture<'_, Result<Vec<Appended>, ApiError>> {
        let source = source.to_string();
        Box::pin(async move { self.shared.publish(messages, &source).await })
    }
}

/// The newest stream seq the local inbox holds (0: none), from the newest records' metadata.
async fn applied_mark(local: &Local) -> u64 {
    let recent = local
        .call(List {
            channel: None,
            limit: usize::MAX,
        })
        .await
        .map(|r| r.messages)
        .unwrap_or_default();
    recent
        .iter()
        .filter_map(|m| m.metadata.get(SEQ_KEY)?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// Creates the stream (when missing) and this instance's durable consumer (when missing: it
/// starts with the messages published from now on).
async fn prepare(s: &Shared) -> anyhow::Result<jetstream::consumer::Consumer<pull::Config>> {
    let prefix = &s.settings.subject_prefix;
    let stream =
        s.js.get_or_create_stream(stream::Config {
            name: s.settings.stream.clone(),
            subjects: vec![format!("{prefix}.msg.>")],
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| anyhow::anyhow!("stream `{}`: {e}", s.settings.stream))?;
    let consumer = stream
        .get_or_create_consumer(
            &s.durable,
            pull::Config {
                durable_name: Some(s.durable.clone()),
                description: Some(format!("switchboard instance {}", s.instance)),
                deliver_policy: jetstream::consumer::DeliverPolicy::New,
                // Stored in stream order, so one ack of a batch's last message says all of it.
                ack_policy: jetstream::consumer::AckPolicy::All,
                ack_wait: s.settings.ack_wait,
                filter_subject: format!("{prefix}.msg.>"),
                max_ack_pending: 4096,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("consumer `{}`: {e}", s.durable))?;
    Ok(consumer)
}

/// The consumer: delivered messages into the local inbox, in stream order, then acknowledged.
async fn consume(s: Arc<Shared>, local: Local) {
    let shutdown = local.shutdown().clone();
    let mark = applied_mark(&local).await;
    s.applied.advance(mark);
    tracing::info!(instance = %s.instance, stream = %s.settings.stream, applied = mark, "jetstream: starting");
    let mut backoff = retry();
    loop {
        let run = async {
            // Only while this daemon holds its consumer's name.
            let _ = s.claimed.subscribe().wait_for(|held| *held).await;
            let mut consumer = prepare(&s).await?;
            let info = consumer.info().await?.clone();
            // A new consumer starts at the stream's end: nothing before it is owed here.
            s.applied.advance(info.ack_floor.stream_sequence);
            // A consumer made before acks went by batch keeps its own policy (a durable
            // consumer's ack policy cannot change): each of its messages is acked.
            let acks = Acks::of(info.config.ack_policy);
            s.ready.store(true, Ordering::Release);
            *s.error.lock().unwrap() = None;
            tracing::info!(consumer = %s.durable, applied = s.applied.get(), "jetstream: consuming");
            let mut messages = consumer
                .stream()
                .max_messages_per_batch(BATCH)
                .heartbeat(Duration::from_secs(5))
                .expires(Duration::from_secs(30))
                .messages()
                .await?;
            // The ack of what is stored and not yet acknowledged (`Acks::Last` only).
            let mut unacked = Unacked::default();
            loop {
                let next = if unacked.waiting() {
                    match tokio::time::timeout(ACK_DELAY, messages.next()).await {
                        Ok(next) => next,
                        // Nothing more came: acknowledge what is stored.
                        Err(_) => {
                            unacked.send().await;
                            continue;
                        }
                    }
                } else {
                    messages.next().await
                };
                let first = match next {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        unacked.send().await;
                        return Err(e.into());
                    }
                    None => break,
                };
                // What has arrived is stored as one batch. Not `ready_chunks`: it reserves
                // room for `BATCH` deliveries for every chunk, and most chunks are a few.
                let mut batch = vec![first];
                while batch.len() < BATCH {
                    match messages.next().now_or_never() {
                        Some(Some(Ok(m))) => batch.push(m),
                        // Not stored: it comes again once the consumer starts again.
                        Some(Some(Err(e))) => {
                            unacked.send().await;
                            return Err(e.into());
                        }
                        _ => break,
                    }
                }
                let stored = batch.len();
                if let Some(last) = store(&s, &local, batch, acks).await {
                    unacked.stored(last, stored).await;
                }
            }
            unacked.send().await;
            anyhow::Ok(())
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = run => {
                if let Err(e) = r {
                    s.fail("consumer", format!("{e:#}"));
                } else {
                    s.fail("consumer", "the message stream ended");
                }
            }
        }
        s.ready.store(
            s.client.connection_state() == async_nats::connection::State::Connected
                && s.ready.load(Ordering::Relaxed),
            Ordering::Release,
        );
        if !backoff.sleep(&shutdown).await {
            return;
        }
    }
}

/// The longest a stored message waits for its acknowledgement when no other message follows.
const ACK_DELAY: Duration = Duration::from_millis(5);
/// Stored messages acknowledged with one ack at most (well under the consumer's
/// `max_ack_pending` of 4096).
const ACK_EVERY: usize = 64;

/// Stored and not yet acknowledged, under `Acks::Last`: the newest such message, whose one ack
/// says all of them. It is sent once [`ACK_EVERY`] messages wait, once no message has come
/// for [`ACK_DELAY`], or when the delivery stream ends or fails. Until then JetStream counts
/// them as ack pending; should this instance stop or die meanwhile, they come again after the
/// consumer's ack wait and are acknowledged, not stored twice (they are at or below the
/// applied mark).
#[derive(Default)]
struct Unacked {
    last: Option<jetstream::Message>,
    count: usize,
}

impl Unacked {
    fn waiting(&self) -> bool {
        self.last.is_some()
    }

    /// `last`, the newest of `count` more stored messages, waits for its ack.
    async fn stored(&mut self, last: jetstream::Message, count: usize) {
        self.last = Some(last);
        self.count += count;
        if self.count >= ACK_EVERY {
            self.send().await;
        }
    }

    async fn send(&mut self) {
        self.count = 0;
        if let Some(m) = self.last.take() {
            ack(&m).await;
        }
    }
}

async fn ack(m: &jetstream::Message) {
    if let Err(e) = m.ack().await {
        tracing::debug!(cause = %e, "jetstream: an acknowledgement was not sent; the message comes again and is skipped");
    }
}

/// How a stored batch is acknowledged, by the consumer's ack policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Acks {
    /// `AckPolicy::All` (consumers made from now on): the batch's last message, which
    /// acknowledges every one before it.
    Last,
    /// `AckPolicy::Explicit` (consumers made by earlier versions): every message.
    Each,
}

impl Acks {
    fn of(policy: jetstream::consumer::AckPolicy) -> Acks {
        match policy {
            jetstream::consumer::AckPolicy::All => Acks::Last,
            _ => Acks::Each,
        }
    }
}

/// Stores one batch of delivered messages (those past the applied mark), retrying while the
/// inbox cannot take them. Each run of messages from one source is stored as that source's, in
/// stream order, so that `/metrics` counts a mixed batch by the source of each message.
///
/// Under `Acks::Each` every message is then acknowledged here; under `Acks::Last` the batch's
/// last message is returned, for [`Unacked`]. `None` when the daemon stops first.
async fn store(
    s: &Shared,
    local: &Local,
    mut batch: Vec<jetstream::Message>,
    acks: Acks,
) -> Option<jetstream::Message> {
    let applied = s.applied.get();
    // Of each message to store: its place in the batch, its stream seq, its source.
    let mut places = Vec::with_capacity(batch.len());
    let mut seqs = Vec::with_capacity(batch.len());
    let mut news = Vec::with_capacity(batch.len());
    let mut sources = Vec::with_capacity(batch.len());
    let mut newest = 0;
    for (place, m) in batch.iter().enumerate() {
        let Ok(info) = m.info() else { continue };
        if info.delivered > 1 {
            s.counters.redelivered.fetch_add(1, Ordering::Relaxed);
        }
        let seq = info.stream_sequence;
        newest = newest.max(seq);
        if seq <= applied {
            continue;
        }
        match decode(m, &info) {
            Ok(new) => {
                places.push(place);
                seqs.push(seq);
                news.push(new);
                // Borrowed from the batch: a source is copied once per run, not per message.
                sources.push(header(m, SOURCE_HEADER).unwrap_or("jetstream"));
            }
            Err(e) => {
                s.counters.skipped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(seq, cause = %e, "jetstream: a message of the stream is not a switchboard message; skipped");
            }
        }
    }
    let mut news = news.into_iter();
    let mut at = 0;
    while at < seqs.len() {
        let run = sources[at..]
            .iter()
            .take_while(|source| **source == sources[at])
            .count();
        let messages: Vec<NewMessage> = news.by_ref().take(run).collect();
        // A retry decodes the run again from the batch, which is kept until it is acked: the
        // first try, nearly always the only one, moves its messages in without a copy.
        let again = || {
            (at..at + run)
                .filter_map(|k| {
                    let m = &batch[places[k]];
                    decode(m, &m.info().ok()?).ok()
                })
                .collect()
        };
        let done = replicate(s, local, messages, again, sources[at]).await?;
        record(s, &seqs[at..at + run], done);
        at += run;
    }
    s.applied.advance(newest);
    match acks {
        Acks::Last => batch.pop(),
        Acks::Each => {
            for m in &batch {
                ack(m).await;
            }
            None
        }
    }
}

/// A header of a delivered message, as text.
fn header(m: &jetstream::Message, name: impl async_nats::header::IntoHeaderName) -> Option<&str> {
    m.headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str())
}

/// The switchboard message a delivery carries, with its stream seq and the ingesting instance
/// added to its metadata.
///
/// A message an instance published has its id and time in the payload. One that a NATS client
/// published straight to the stream may leave them out: its `Nats-Msg-Id` header is then its
/// id (so the inbox's id window drops what JetStream's did not), and the time JetStream stored
/// it is its time — the same on every instance, not each one's receive time.
fn decode(
    m: &jetstream::Message,
    info: &jetstream::message::Info,
) -> Result<NewMessage, serde_json::Error> {
    let mut new = serde_json::from_slice::<NewMessage>(&m.payload)?;
    let seq = info.stream_sequence.to_string();
    match header(m, INSTANCE_HEADER) {
        Some(instance) => new
            .metadata
            .extend([(SEQ_KEY, seq.as_str()), (INSTANCE_KEY, instance)]),
        None => new.metadata.extend([(SEQ_KEY, seq.as_str())]),
    }
    if new.id.is_none() {
        new.id = header(m, async_nats::header::NATS_MESSAGE_ID).map(str::to_string);
    }
    if new.timestamp.is_none() {
        let at = info.published;
        new.timestamp = chrono::DateTime::from_timestamp(at.unix_timestamp(), at.nanosecond());
    }
    Ok(new)
}

/// Appends `messages` to the local inbox as from `source`, retrying (with the same messages
/// from `again`) until it takes them; `None` when the daemon shuts down first.
async fn replicate(
    s: &Shared,
    local: &Local,
    messages: Vec<NewMessage>,
    again: impl Fn() -> Vec<NewMessage>,
    source: &str,
) -> Option<EachAppended> {
    let mut wait = retry();
    let mut messages = Some(messages);
    loop {
        let messages = messages.take().unwrap_or_else(&again);
        match local
            .call(Replicate {
                messages,
                source: source.to_string(),
            })
            .await
        {
            Ok(done) => return Some(done),
            Err(e) => {
                s.fail("storing in the local inbox", &e);
                if !wait.sleep(local.shutdown()).await {
                    return None;
                }
            }
        }
    }
}

/// Counts what the inbox did with the messages of stream seqs `seqs`, and remembers each
/// stored one's answer for the ingest that is waiting for it.
fn record(s: &Shared, seqs: &[u64], done: EachAppended) {
    let refused: std::collections::HashSet<usize> = done.refused.iter().map(|r| r.index).collect();
    for r in &done.refused {
        s.counters.skipped.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(seq = seqs[r.index], reason = %r.reason, "jetstream: a message of the stream is over this inbox's limits; skipped");
    }
    let mut appended = done.appended.into_iter();
    let mut answers = s.answers.lock().unwrap();
    for (i, seq) in seqs.iter().enumerate() {
        if refused.contains(&i) {
            continue;
        }
        if let Some(a) = appended.next() {
            if !a.duplicate {
                s.counters.stored.fetch_add(1, Ordering::Relaxed);
            }
            answers.push_back((*seq, a));
            if answers.len() > REMEMBERED {
                answers.pop_front();
            }
        }
    }
}

/// Keeps the connection's last error (`connection_error`) while it fails; forgets it once
/// connected.
fn connection_event(error: &Mutex<Option<String>>, event: async_nats::Event) {
    use async_nats::Event;
    let why = match event {
        Event::Connected => {
            *error.lock().unwrap() = None;
            return;
        }
        // Not a slow consumer: that is no reason the connection fails.
        Event::ServerError(e @ async_nats::ServerError::SlowConsumer(_)) => {
            tracing::debug!(cause = %e, "jetstream: slow consumer");
            return;
        }
        Event::ServerError(e) => e.to_string(),
        Event::ClientError(e) => e.to_string(),
        _ => return,
    };
    // async-nats says `nats: authorization violation`; the line already says JetStream.
    let why = why.strip_prefix("nats: ").unwrap_or(&why);
    *error.lock().unwrap() = Some(format!("connection: {why}"));
}

/// Says this instance is alive every `heartbeat`, hears the others, and refreshes the
/// consumer's lag.
async fn heartbeat(s: Arc<Shared>, local: Local) {
    let shutdown = local.shutdown().clone();
    let prefix = s.settings.subject_prefix.clone();
    let mut subscription = None;
    let mut tick = tokio::time::interval(s.settings.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if subscription.is_none() {
            subscription = s.client.subscribe(format!("{prefix}.hb.*")).await.ok();
        }
        let next = async {
            match subscription.as_mut() {
                Some(sub) => sub.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            got = next => match got {
                Some(msg) => {
                    if let Ok(hb) = serde_json::from_slice::<Heartbeat>(&msg.payload)
                        && hb.instance != s.instance
                    {
                        s.instances.lock().unwrap().insert(hb.instance.clone(), (Instant::now(), hb));
                    }
                }
                None => subscription = None,
            },
            _ = tick.tick() => {
                let hb = Heartbeat {
                    instance: s.instance.clone(),
                    applied: s.applied.get(),
                    version: env!("CARGO_PKG_VERSION").into(),
                };
                let body = serde_json::to_vec(&hb).unwrap_or_default();
                let _ = s.client.publish(format!("{prefix}.hb.{}", s.durable), body.into()).await;
                if s.ready.load(Ordering::Relaxed) {
                    refresh(&s).await;
                }
            }
        }
    }
}

/// Reads the consumer's lag and pending acknowledgements.
async fn refresh(s: &Shared) {
    let Ok(stream) = s.js.get_stream(&s.settings.stream).await else {
        return;
    };
    let Ok(mut consumer) = stream.get_consumer::<pull::Config>(&s.durable).await else {
        return;
    };
    if let Ok(info) = consumer.info().await {
        s.counters.lag.store(info.num_pending, Ordering::Relaxed);
        s.counters
            .ack_pending
            .store(info.num_ack_pending as u64, Ordering::Relaxed);
    }
    work::refresh(s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_becomes_subject_tokens() {
        assert_eq!(
            subject("switchboard", "alerts/critical"),
            "switchboard.msg.alerts.critical"
        );
        assert_eq!(subject("sb", ""), "sb.msg.default");
        assert_eq!(subject("sb", "a.b/c d/*/>"), "sb.msg.a_b.c_d._._");
        assert_eq!(subject("sb", " /ci//main/ "), "sb.msg.ci.main");
        assert_eq!(
            subject("sb", "été/x"),
            "sb.msg._t_.x",
            "one `_` per character"
        );
        assert_eq!(token(""), "_");
        assert_eq!(token("host/home"), "host_home");
    }

    #[test]
    fn the_state_line_names_the_instances_heard() {
        let st = JetStreamState {
            instance: "a".into(),
            connection: "connected".into(),
            stream: "SWITCHBOARD".into(),
            ready: true,
            applied: 7,
            instances: vec![InstanceSeen {
                instance: "b".into(),
                seen_s: 1.2,
                ..InstanceSeen::default()
            }],
            ..JetStreamState::default()
        };
        assert_eq!(
            st.line(),
            "connected as `a`, stream SWITCHBOARD ready; applied seq 7, lag 0, 0 redelivered; \
             instances: b (1s ago)"
        );
        let skipping = JetStreamState { skipped: 2, ..st };
        assert!(
            skipping
                .line()
                .contains("0 redelivered, 2 skipped; instances"),
            "{}",
            skipping.line()
        );
    }
}
