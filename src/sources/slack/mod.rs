//! Slack: direct messages, mentions and channel messages from a Slack app, answers in their
//! thread, and approvals with Approve / Deny buttons in a Slack channel.
//!
//! Slack reaches the source by Socket Mode ([`socket`]: the source opens a WebSocket, no public
//! endpoint) or the Events API ([`events`]: Slack posts to the ingest listener, every request
//! checked by its signature). Either way an event is acknowledged only once its message is
//! durable in the inbox, and its `event_id` is the message's source id, so that a redelivery
//! after a crash or a retry is stored once. [`mapping`] turns Slack's JSON into our message,
//! purely; [`client`] is the Web API. The source answers in the thread a message came from as
//! the `slack` [`Replier`] (`channel_reply`, `switchboard reply`), and [`approvals`] posts a
//! Block Kit message for each confirm whose rule's `approveVia` names `slack`.
//!
//! What it owns: the names it looked up (`users.info`, `conversations.info`), the app's own
//! user id (`auth.test`), the approval messages it posted, and what `status`, `stats` and
//! `/metrics` say of it.
//!
//! - [`settings`]: the `slack` section of `switchboard.json`, and the tokens from the
//!   environment.

pub mod approvals;
pub mod client;
pub mod events;
pub mod mapping;
pub mod settings;
pub mod socket;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use self::client::{Args, SlackError, WebApi};
use self::mapping::{Heard, Names};
use self::settings::{Mode, SlackTokens};
use crate::control::local::BoxFuture;
use crate::control::ops::Sent;
use crate::control::{ApiError, Parts, RefusalCode, Replier, StoreError};
use crate::message::{Message, NewMessage};
use crate::metrics::{Scrape, count};
use crate::sources::SourceContext;

pub use self::mapping::{META_KEYS, SERVER};
pub use self::settings::SlackSettings;

/// How many names of each kind are kept (people, channels).
const NAMES: usize = 4096;

/// The Slack source, shared by its tasks, its routes, the replier and the stats.
#[derive(Clone)]
pub struct Slack {
    inner: Arc<Inner>,
}

/// Everything the source's parts share.
pub struct Inner {
    settings: SlackSettings,
    tokens: SlackTokens,
    api: WebApi,
    /// Where messages go and decisions are made; set at start.
    source: OnceLock<SourceContext>,
    /// The app's bot user id (`auth.test`): its own messages are skipped.
    me: Mutex<Option<String>>,
    users: Mutex<HashMap<String, String>>,
    channels: Mutex<HashMap<String, String>>,
    state: Mutex<SlackState>,
    counts: Counts,
    approvals: approvals::Board,
    replays: events::Replays,
}

/// The source's counters.
#[derive(Default)]
struct Counts {
    messages: AtomicU64,
    acked: AtomicU64,
    deduplicated: AtomicU64,
    skipped: AtomicU64,
    signature_failures: AtomicU64,
    approvals_posted: AtomicU64,
    approvals_answered: AtomicU64,
    reconnects: AtomicU64,
}

/// What `status` and `stats` show of the source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlackState {
    /// `socket` or `events`.
    pub mode: String,
    /// `starting`, `connecting`, `connected`, `listening` (events), `link_disabled` or
    /// `failing`.
    pub state: String,
    /// The workspace (`auth.test`'s `team`), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// The last error, while it lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Messages appended.
    pub messages: u64,
    /// Socket Mode envelopes acknowledged.
    pub acked: u64,
    /// Retries and redeliveries of an event already stored.
    pub deduplicated: u64,
    /// Events skipped (bots, edits, deletions, channels not heard).
    pub skipped: u64,
    /// Events API requests refused for their signature or timestamp.
    pub signature_failures: u64,
    /// Approval messages posted.
    pub approvals_posted: u64,
    /// Confirms answered with the buttons.
    pub approvals_answered: u64,
    /// Web API calls answered 429.
    pub throttled: u64,
    /// Socket Mode connections made again.
    pub reconnects: u64,
}

impl SlackState {
    /// One line: `socket mode: connected to Acme; 3 messages, 4 envelopes acked`.
    pub fn line(&self) -> String {
        let team = self
            .team
            .as_deref()
            .map(|t| format!(" to {t}"))
            .unwrap_or_default();
        let counts = format!(
            "{} message{}, {} envelope{} acked, {} retr{} deduplicated, {} approval{} posted",
            self.messages,
            if self.messages == 1 { "" } else { "s" },
            self.acked,
            if self.acked == 1 { "" } else { "s" },
            self.deduplicated,
            if self.deduplicated == 1 { "y" } else { "ies" },
            self.approvals_posted,
            if self.approvals_posted == 1 { "" } else { "s" },
        );
        let error = self.error.as_deref().unwrap_or("?");
        match self.state.as_str() {
            "connected" => format!("socket mode: connected{team}; {counts}"),
            "listening" => format!("events API at {}{team}; {counts}", events::EVENTS_PATH),
            "link_disabled" => format!(
                "socket mode: stopped: Slack disabled the app's connection (link_disabled); \
                 turn Socket Mode on in the app's settings, then restart; {counts}"
            ),
            "failing" => format!("socket mode: not connected: {error}; trying again; {counts}"),
            other => format!("{} mode: {other}", self.mode),
        }
    }
}

/// How one event ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its message is durable in the inbox.
    Stored,
    /// A retry of an event already stored.
    Duplicate,
    /// Not a message of ours.
    Skipped,
}

impl Slack {
    /// The source as `settings` say, with `tokens` from the environment; refused, naming the
    /// variable, when a token the mode needs is missing. Nothing runs until [`Slack::start`].
    pub fn new(settings: SlackSettings, tokens: SlackTokens) -> Result<Slack, String> {
        if let Some(var) = settings.missing(&tokens) {
            return Err(format!(
                "`slack`: {var} is not set: the Slack source ({} mode) needs it in the \
                 environment of `switchboard start`; docs/slack.md says where Slack shows it",
                match settings.mode {
                    Mode::Socket => "socket",
                    Mode::Events => "events",
                }
            ));
        }
        let api = WebApi::new(&settings.api_url());
        let mode = match settings.mode {
            Mode::Socket => "socket",
            Mode::Events => "events",
        };
        Ok(Slack {
            inner: Arc::new(Inner {
                api,
                source: OnceLock::new(),
                me: Mutex::default(),
                users: Mutex::default(),
                channels: Mutex::default(),
                state: Mutex::new(SlackState {
                    mode: mode.into(),
                    state: "starting".into(),
                    ..SlackState::default()
                }),
                counts: Counts::default(),
                approvals: approvals::Board::default(),
                replays: events::Replays::default(),
                settings,
                tokens,
            }),
        })
    }

    /// Registers the source with the daemon's parts: its replier, its `stats` and `/metrics`.
    pub fn parts(&self, parts: Parts) -> Parts {
        let (stats, metrics) = (self.clone(), self.clone());
        parts
            .replier(SERVER, Arc::new(self.clone()))
            .status("slack", move |_| {
                serde_json::to_value(stats.inner.state()).unwrap_or_default()
            })
            .metrics(move |_, out| metrics.inner.scrape(out))
    }

    /// Starts Socket Mode (or takes the Events API's requests from now on), and the approvals.
    pub fn start(&self, sources: &SourceContext) {
        let _ = self.inner.source.set(sources.clone());
        let inner = self.inner.clone();
        match self.inner.settings.mode {
            Mode::Socket => {
                sources.tasks().spawn(socket::run(inner, sources.clone()));
            }
            Mode::Events => {
                self.inner.set_state(|s| s.state = "listening".into());
                sources.tasks().spawn(async move {
                    let _ = inner.who_am_i().await;
                });
            }
        }
        if self.inner.settings.approvals.is_some() {
            let events = sources.transitions();
            sources
                .tasks()
                .spawn(approvals::run(self.inner.clone(), sources.clone(), events));
        }
    }

    /// `POST /v1/slack/events` and `/v1/slack/interactivity` for the ingest listener, in
    /// events mode.
    pub fn router(&self) -> Option<axum::Router> {
        (self.inner.settings.mode == Mode::Events).then(|| events::router(self.inner.clone()))
    }

    /// What `status` shows now.
    pub fn state(&self) -> SlackState {
        self.inner.state()
    }
}

impl Inner {
    fn state(&self) -> SlackState {
        let mut s = self.state.lock().unwrap().clone();
        let c = &self.counts;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        s.messages = n(&c.messages);
        s.acked = n(&c.acked);
        s.deduplicated = n(&c.deduplicated);
        s.skipped = n(&c.skipped);
        s.signature_failures = n(&c.signature_failures);
        s.approvals_posted = n(&c.approvals_posted);
        s.approvals_answered = n(&c.approvals_answered);
        s.throttled = n(&self.api.throttled);
        s.reconnects = n(&c.reconnects);
        s
    }

    /// Changes what `status` shows.
    fn set_state(&self, change: impl FnOnce(&mut SlackState)) {
        change(&mut self.state.lock().unwrap());
    }

    /// The bot token: every Web API call but `apps.connections.open` uses it.
    fn bot(&self) -> &str {
        self.tokens.bot.as_deref().unwrap_or_default()
    }

    /// Calls `method` with the bot token and a JSON body.
    async fn post(&self, method: &str, body: &Value) -> Result<Value, SlackError> {
        self.api.call(method, self.bot(), Args::Json(body)).await
    }

    /// The app's bot user id and workspace, asked of `auth.test` once.
    async fn who_am_i(&self) -> Result<String, SlackError> {
        if let Some(me) = self.me.lock().unwrap().clone() {
            return Ok(me);
        }
        let me = self
            .api
            .call("auth.test", self.bot(), Args::Form(&[]))
            .await?;
        let id = me
            .get("user_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let team = me.get("team").and_then(Value::as_str).map(String::from);
        tracing::info!(user = %id, team = team.as_deref().unwrap_or("?"), "slack: signed in");
        self.set_state(|s| s.team = team);
        *self.me.lock().unwrap() = Some(id.clone());
        Ok(id)
    }

    /// Handles one Events API payload (`event_callback`): its message is durable in the inbox
    /// when this returns `Ok(Stored)` or `Ok(Duplicate)`; `Err` when it is not, and Slack must
    /// deliver it again.
    async fn on_event(&self, payload: &Value) -> Result<Outcome, ApiError> {
        let Some(source) = self.source.get() else {
            return Err(ApiError::unavailable("slack: the source is still starting"));
        };
        let event = payload.get("event").unwrap_or(&Value::Null);
        let me = self.who_am_i().await.ok();
        let heard = match mapping::heard(event, me.as_deref()) {
            Ok(heard) => heard,
            Err(why) => {
                tracing::debug!(?why, "slack: event skipped");
                self.counts.skipped.fetch_add(1, Ordering::Relaxed);
                return Ok(Outcome::Skipped);
            }
        };
        let names = self.names(event, &heard).await;
        if let Heard::Channel(id) = &heard
            && !self
                .settings
                .hears(id, names.channels.get(id).map(String::as_str))
        {
            self.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(Outcome::Skipped);
        }
        let str_of = |k: &str| payload.get(k).and_then(Value::as_str);
        let message =
            mapping::to_message(event, &heard, str_of("event_id"), str_of("team_id"), &names);
        self.append(source, message).await
    }

    /// Appends one message; `Ok` once it is durable.
    async fn append(&self, source: &SourceContext, m: NewMessage) -> Result<Outcome, ApiError> {
        match source.append_each(vec![m], SERVER).await {
            Ok(each) => {
                if let Some(refused) = each.refused.first() {
                    tracing::warn!(reason = %refused.reason, "slack: a message over the inbox's limits was not stored");
                    return Ok(Outcome::Skipped);
                }
                if each.appended.iter().any(|a| a.duplicate) {
                    self.counts.deduplicated.fetch_add(1, Ordering::Relaxed);
                    return Ok(Outcome::Duplicate);
                }
                self.counts.messages.fetch_add(1, Ordering::Relaxed);
                Ok(Outcome::Stored)
            }
            Err(e @ ApiError::Store(StoreError::NotDurable { .. })) => {
                tracing::warn!(cause = %e, "slack: a message is in memory, not yet on disk; not acknowledged, so Slack delivers it again");
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// The names `event` needs: its author, its channel, and those its markup names.
    async fn names(&self, event: &Value, heard: &Heard) -> Names {
        let text = event
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (mut users, mut channels) = mapping::refs(text);
        users.extend(event.get("user").and_then(Value::as_str).map(String::from));
        if let Heard::Channel(id) = heard {
            channels.push(id.clone());
        } else if heard == &Heard::Mention
            && let Some(id) = event.get("channel").and_then(Value::as_str)
        {
            channels.push(id.to_string());
        }
        let mut names = Names::default();
        for id in users {
            if let Some(name) = self.user_name(&id).await {
                names.users.insert(id, name);
            }
        }
        for id in channels {
            if let Some(name) = self.channel_name(&id).await {
                names.channels.insert(id, name);
            }
        }
        names
    }

    /// A person's name, asked of `users.info` once.
    async fn user_name(&self, id: &str) -> Option<String> {
        if let Some(name) = self.users.lock().unwrap().get(id) {
            return Some(name.clone());
        }
        let answer = self
            .api
            .call("users.info", self.bot(), Args::Form(&[("user", id)]))
            .await
            .map_err(|e| tracing::debug!(cause = %e, "slack: no name for a user"))
            .ok()?;
        let name = mapping::person_name(answer.get("user")?)?;
        remember(&self.users, id, &name);
        Some(name)
    }

    /// A channel's name, asked of `conversations.info` once.
    async fn channel_name(&self, id: &str) -> Option<String> {
        if let Some(name) = self.channels.lock().unwrap().get(id) {
            return Some(name.clone());
        }
        let answer = self
            .api
            .call(
                "conversations.info",
                self.bot(),
                Args::Form(&[("channel", id)]),
            )
            .await
            .map_err(|e| tracing::debug!(cause = %e, "slack: no name for a channel"))
            .ok()?;
        let name = answer.get("channel")?.get("name")?.as_str()?.to_string();
        remember(&self.channels, id, &name);
        Some(name)
    }

    /// The source's families of `/metrics`.
    fn scrape(&self, out: &mut Scrape) {
        let s = self.state();
        for (name, help, value) in [
            (
                "switchboard_slack_messages_total",
                "Messages appended from Slack.",
                s.messages,
            ),
            (
                "switchboard_slack_envelopes_acked_total",
                "Socket Mode envelopes acknowledged (after their message was durable).",
                s.acked,
            ),
            (
                "switchboard_slack_retries_deduplicated_total",
                "Slack retries and redeliveries of an event already stored.",
                s.deduplicated,
            ),
            (
                "switchboard_slack_signature_failures_total",
                "Events API requests refused for their signature or timestamp.",
                s.signature_failures,
            ),
            (
                "switchboard_slack_approvals_posted_total",
                "Approval messages posted to Slack.",
                s.approvals_posted,
            ),
            (
                "switchboard_slack_approvals_answered_total",
                "Confirms answered with the buttons of a Slack approval message.",
                s.approvals_answered,
            ),
            (
                "switchboard_slack_throttled_total",
                "Slack Web API calls answered 429 (waited for Retry-After, then tried again).",
                s.throttled,
            ),
        ] {
            out.counter(name, help).value(count(value));
        }
        out.gauge(
            "switchboard_slack_connected",
            "1 while the Socket Mode connection is up (or the Events API is listened to), else 0.",
        )
        .value(f64::from(u8::from(matches!(
            s.state.as_str(),
            "connected" | "listening"
        ))));
    }
}

/// Keeps `name` for `id`, forgetting every name when the cache is full.
fn remember(cache: &Mutex<HashMap<String, String>>, id: &str, name: &str) {
    let mut cache = cache.lock().unwrap();
    if cache.len() >= NAMES {
        cache.clear();
    }
    cache.insert(id.to_string(), name.to_string());
}

impl Replier for Slack {
    fn reply<'a>(
        &'a self,
        message: &'a Message,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Sent, ApiError>> {
        Box::pin(self.inner.reply(message, text))
    }
}

impl Inner {
    /// Posts `text` in the thread of `message`: `chat.postMessage` to its channel, with
    /// `thread_ts` its thread's (or its own `ts` when it started none).
    async fn reply(&self, message: &Message, text: &str) -> Result<Sent, ApiError> {
        let meta = |k| message.metadata.get(k);
        let (Some(channel), Some(ts)) = (meta("channel_id"), meta("ts")) else {
            return Err(ApiError::refused(
                RefusalCode::Invalid,
                format!(
                    "message {} has no `channel_id` and `ts`: it did not come from Slack",
                    message.seq
                ),
            ));
        };
        let thread = meta("thread_ts").unwrap_or(ts);
        let body = json!({"channel": channel, "text": text, "thread_ts": thread});
        let sent = self
            .post("chat.postMessage", &body)
            .await
            .map_err(|e| reply_error(&e))?;
        match sent.get("ts").and_then(Value::as_str) {
            Some(ts) => Ok(Sent { id: ts.to_string() }),
            None => Err(ApiError::refused(
                RefusalCode::Failed,
                "slack: `chat.postMessage` answered ok but gave no `ts`",
            )),
        }
    }
}

/// Why an answer was not sent, and what to do.
fn reply_error(e: &SlackError) -> ApiError {
    let (code, why) = match e.code() {
        Some("not_in_channel" | "channel_not_found") => (
            RefusalCode::NotAllowed,
            format!("slack: {e}; invite the app to the channel (`/invite @app`); nothing was sent"),
        ),
        Some("missing_scope" | "not_authed" | "invalid_auth" | "token_revoked") => (
            RefusalCode::NotAllowed,
            format!(
                "slack: {e}; the bot token needs the `chat:write` scope (docs/slack.md has the \
                 app manifest); nothing was sent"
            ),
        ),
        _ => (RefusalCode::Failed, format!("slack: {e}; nothing was sent")),
    };
    ApiError::refused(code, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_says_what_the_source_does() {
        let mut s = SlackState {
            mode: "socket".into(),
            state: "connected".into(),
            team: Some("Acme".into()),
            messages: 3,
            acked: 1,
            deduplicated: 1,
            ..SlackState::default()
        };
        assert_eq!(
            s.line(),
            "socket mode: connected to Acme; 3 messages, 1 envelope acked, 1 retry deduplicated, \
             0 approvals posted"
        );
        s.state = "link_disabled".into();
        assert!(
            s.line().starts_with("socket mode: stopped: Slack disabled"),
            "{}",
            s.line()
        );
        s.state = "starting".into();
        assert_eq!(s.line(), "socket mode: starting");
    }

    #[test]
    fn a_missing_token_names_its_variable() {
        let Err(e) = Slack::new(SlackSettings::default(), SlackTokens::default()) else {
            panic!("no tokens, no source");
        };
        assert!(
            e.starts_with("`slack`: SWITCHBOARD_SLACK_APP_TOKEN is not set"),
            "{e}"
        );
    }
}
