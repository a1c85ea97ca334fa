//! Teams: direct messages and chats straight from Microsoft Graph, and answers back to them.
//!
//! The source signs in as a person with the device code flow (`switchboard login teams`) or as
//! an app ([`auth`]), polls Graph for new messages in each chat with a cursor per chat kept in
//! the home ([`poller`], [`cursors`]), or, when `teams.notificationUrl` is set, subscribes to
//! Graph's change notifications and fetches each notified message ([`notify`]). The wire is
//! apart from the mapping: [`client`] has the HTTP calls and their retry rules, [`mapping`] (with
//! [`html`]) turns Graph's documented JSON into our message, purely. It answers in the chat a
//! message came from as the `teams` [`Replier`] (`channel_reply`, `switchboard reply`).
//!
//! What it owns: the sign-in (`teams-token.json`), the cursors (`teams-cursors.json`), the
//! subscription and its `clientState`, the chat types it learned, the ids it appended lately
//! (polling and notifications never append one message twice), and what `status`, `stats` and
//! `/metrics` say of it.
//!
//! - [`settings`]: the `teams` section of `switchboard.json`.

pub mod auth;
pub mod client;
pub mod cursors;
pub mod html;
pub mod mapping;
pub mod notify;
pub mod poller;
pub mod settings;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use self::auth::{Auth, AuthError};
use self::client::{Graph, GraphError, segment};
use self::mapping::Me;
use crate::control::local::BoxFuture;
use crate::control::ops::Sent;
use crate::control::{ApiError, Parts, RefusalCode, Replier, StoreError};
use crate::message::{Message, NewMessage};
use crate::metrics::{Scrape, count};
use crate::sources::SourceContext;

pub use self::mapping::{META_KEYS, SERVER};
pub use self::settings::TeamsSettings;

/// How many recently appended message keys are kept to tell a repeat.
const SEEN: usize = 4096;

/// The Teams source, shared by its tasks, the notification route, the replier and the stats.
#[derive(Clone)]
pub struct Teams {
    inner: Arc<Inner>,
}

/// Everything the source's parts share.
pub struct Inner {
    settings: TeamsSettings,
    graph: Graph,
    cursors: PathBuf,
    state: Mutex<TeamsState>,
    me: Mutex<Option<Me>>,
    /// Graph's `chatType` of each chat seen.
    chat_types: Mutex<HashMap<String, String>>,
    /// `chat/message` keys appended lately, oldest first.
    seen: Mutex<(VecDeque<String>, HashSet<String>)>,
    /// Wakes the poller now: a catch-up after notifications were missed or the subscription
    /// was (re)made.
    catch_up: tokio::sync::Notify,
    messages: AtomicU64,
    notification_failures: Mutex<BTreeMap<&'static str, u64>>,
    hub: Option<notify::Hub>,
}

/// What `status` and `stats` show of the source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamsState {
    /// `starting`, `polling`, `subscribed`, `sign_in_needed` or `failing`.
    pub state: String,
    /// Who is signed in (display name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Chats read.
    pub chats: usize,
    /// When Graph was last polled (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_poll: Option<String>,
    /// When the change notification subscription expires (RFC 3339), while there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription_expires: Option<String>,
    /// The last error, while it lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Messages appended.
    pub messages: u64,
    /// Graph requests answered 429 or 503.
    pub throttled: u64,
    /// Access tokens refreshed.
    pub token_refreshes: u64,
    /// Notifications ignored or not followed (wrong `clientState`, a fetch that failed).
    pub notification_failures: u64,
}

impl TeamsState {
    /// One line: `polling 14 chats, last poll 3 s ago`.
    pub fn line(&self, now: DateTime<Utc>) -> String {
        let ago = |at: &Option<String>| {
            at.as_deref()
                .and_then(|t| t.parse::<DateTime<Utc>>().ok())
                .map(|t| format!("{} s ago", (now - t).num_seconds().max(0)))
        };
        let chats = format!(
            "{} chat{}",
            self.chats,
            if self.chats == 1 { "" } else { "s" }
        );
        let polled = match ago(&self.last_poll) {
            Some(ago) => format!("{chats}, last poll {ago}"),
            None => chats,
        };
        match self.state.as_str() {
            "sign_in_needed" => "sign-in needed: switchboard login teams".to_string(),
            "polling" => format!("polling {polled}"),
            "subscribed" => format!(
                "subscribed to change notifications until {} ({polled})",
                self.subscription_expires.as_deref().unwrap_or("?")
            ),
            "failing" if self.last_poll.is_some() => format!(
                "polling {polled}; failing: {}",
                self.error.as_deref().unwrap_or("?")
            ),
            "failing" => format!("not polling: {}", self.error.as_deref().unwrap_or("?")),
            other => other.to_string(),
        }
    }
}

impl Teams {
    /// The source as `settings` say, with its files in the home `dir`; app-only sign-in takes
    /// `secret` (`SWITCHBOARD_TEAMS_CLIENT_SECRET`). Nothing runs until [`Teams::start`].
    pub fn new(settings: TeamsSettings, dir: &Path, secret: Option<String>) -> Teams {
        let auth = Auth::new(&settings, dir, secret);
        let graph = Graph::new(&settings.graph_url(), auth);
        let hub = settings.notification_url.clone().map(notify::Hub::new);
        Teams {
            inner: Arc::new(Inner {
                graph,
                cursors: cursors::Cursors::path(dir),
                state: Mutex::new(TeamsState {
                    state: "starting".into(),
                    ..TeamsState::default()
                }),
                me: Mutex::default(),
                chat_types: Mutex::default(),
                seen: Mutex::default(),
                catch_up: tokio::sync::Notify::new(),
                messages: AtomicU64::new(0),
                notification_failures: Mutex::default(),
                hub,
                settings,
            }),
        }
    }

    /// Registers the source with the daemon's parts: its replier, its `stats` and `/metrics`.
    pub fn parts(&self, parts: Parts) -> Parts {
        let (stats, metrics) = (self.clone(), self.clone());
        parts
            .replier(SERVER, Arc::new(self.clone()))
            .status("teams", move |_| {
                serde_json::to_value(stats.inner.state()).unwrap_or_default()
            })
            .metrics(move |_, out| metrics.inner.scrape(out))
    }

    /// Starts polling (and the subscription, with `notificationUrl`) on the source's tasks.
    pub fn start(&self, sources: &SourceContext) {
        let (inner, cx) = (self.inner.clone(), sources.clone());
        sources.tasks().spawn(poller::run(inner, cx));
        if let Some(events) = self.inner.hub.as_ref().and_then(notify::Hub::take_events) {
            let (inner, cx) = (self.inner.clone(), sources.clone());
            sources.tasks().spawn(notify::run(inner, cx, events));
        }
    }

    /// `POST /v1/teams/notifications` for the ingest listener, when `notificationUrl` is set.
    pub fn router(&self) -> Option<axum::Router> {
        self.inner.hub.as_ref()?;
        Some(notify::router(self.inner.clone()))
    }

    /// What `status` shows now.
    pub fn state(&self) -> TeamsState {
        self.inner.state()
    }
}

impl Inner {
    fn state(&self) -> TeamsState {
        let mut s = self.state.lock().unwrap().clone();
        s.messages = self.messages.load(Ordering::Relaxed);
        s.throttled = self.graph.throttled.load(Ordering::Relaxed);
        s.token_refreshes = self.graph.auth().refreshes.load(Ordering::Relaxed);
        s.notification_failures = self.notification_failures.lock().unwrap().values().sum();
        s
    }

    /// Changes what `status` shows.
    fn set_state(&self, change: impl FnOnce(&mut TeamsState)) {
        change(&mut self.state.lock().unwrap());
    }

    /// Records why the source stopped or failed; the state says which.
    fn failed(&self, error: &GraphError) {
        let (state, line) = match error {
            GraphError::Auth(AuthError::SignInNeeded(why)) => {
                *self.me.lock().unwrap() = None;
                ("sign_in_needed", why.clone())
            }
            other => ("failing", other.to_string()),
        };
        let changed = {
            let mut s = self.state.lock().unwrap();
            let changed = s.state != state || s.error.as_deref() != Some(&line);
            s.state = state.into();
            s.error = Some(line.clone());
            changed
        };
        if changed && state == "sign_in_needed" {
            tracing::warn!(cause = %line, "teams: sign-in needed: switchboard login teams");
        } else if changed {
            tracing::warn!(cause = %line, "teams: Graph call failed");
        }
    }

    /// A notification that was not followed, counted by `reason`.
    fn notification_failed(&self, reason: &'static str) {
        *self
            .notification_failures
            .lock()
            .unwrap()
            .entry(reason)
            .or_default() += 1;
    }

    /// Who is signed in, asked of Graph once (`GET /me`, or the app-only `user`).
    async fn me(&self) -> Result<Me, GraphError> {
        if let Some(me) = self.me.lock().unwrap().clone() {
            return Ok(me);
        }
        let user = self.graph.get(&self.who()).await?;
        let me = Me::from_user(&user).ok_or_else(|| GraphError::Transport {
            what: format!("GET /v1.0{}", self.who()),
            cause: "the answer has no user `id`".into(),
        })?;
        tracing::info!(user = %me.name, "teams: signed in");
        self.set_state(|s| s.user = Some(me.name.clone()));
        *self.me.lock().unwrap() = Some(me.clone());
        Ok(me)
    }

    /// `/me`, or `/users/{user}` when the app signs in on its own.
    fn who(&self) -> String {
        match &self.settings.user {
            Some(user) => format!("/users/{}", segment(user)),
            None => "/me".to_string(),
        }
    }

    /// Graph's `chatType` of chat `id`, asked once.
    async fn chat_type(&self, id: &str) -> Result<String, GraphError> {
        if let Some(t) = self.chat_types.lock().unwrap().get(id) {
            return Ok(t.clone());
        }
        let chat = self.graph.get(&format!("/chats/{}", segment(id))).await?;
        let t = mapping::str_at(&chat, &["chatType"])
            .unwrap_or_default()
            .to_string();
        self.learn_chat(id, &t);
        Ok(t)
    }

    fn learn_chat(&self, id: &str, chat_type: &str) {
        self.chat_types
            .lock()
            .unwrap()
            .insert(id.to_string(), chat_type.to_string());
    }

    /// Whether message `key` (`chat/message`) was appended lately.
    fn seen(&self, key: &str) -> bool {
        self.seen.lock().unwrap().1.contains(key)
    }

    fn remember(&self, key: String) {
        let mut seen = self.seen.lock().unwrap();
        if seen.1.insert(key.clone()) {
            seen.0.push_back(key);
            if seen.0.len() > SEEN
                && let Some(old) = seen.0.pop_front()
            {
                seen.1.remove(&old);
            }
        }
    }

    /// Appends `messages` (what fits of them) and remembers them; `Err` when the inbox took
    /// none and the caller should try again.
    async fn append(
        &self,
        sources: &SourceContext,
        messages: Vec<NewMessage>,
    ) -> Result<(), ApiError> {
        if messages.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = messages.iter().filter_map(|m| m.id.clone()).collect();
        match sources.append_each(messages, SERVER).await {
            Ok(each) => {
                for refused in &each.refused {
                    tracing::warn!(reason = %refused.reason, "teams: a message over the inbox's limits was not stored");
                }
                let stored = each.appended.iter().filter(|a| !a.duplicate).count();
                self.messages.fetch_add(stored as u64, Ordering::Relaxed);
            }
            Err(ApiError::Store(StoreError::NotDurable { appended, cause })) => {
                tracing::warn!(%cause, "teams: messages kept in memory, not yet on disk");
                self.messages
                    .fetch_add(appended.len() as u64, Ordering::Relaxed);
            }
            Err(e) => return Err(e),
        }
        keys.into_iter().for_each(|k| self.remember(k));
        Ok(())
    }

    /// The source's families of `/metrics`.
    fn scrape(&self, out: &mut Scrape) {
        let s = self.state();
        let auth = self.graph.auth();
        out.counter(
            "switchboard_teams_messages_total",
            "Messages appended from Microsoft Teams.",
        )
        .value(count(s.messages));
        out.counter(
            "switchboard_teams_throttled_total",
            "Microsoft Graph requests answered 429 or 503 (waited for Retry-After, then tried again).",
        )
        .value(count(s.throttled));
        out.counter(
            "switchboard_teams_token_refreshes_total",
            "Access tokens obtained by a refresh, by result.",
        )
        .with(&[("result", "ok")], count(s.token_refreshes))
        .with(
            &[("result", "failed")],
            count(auth.refresh_failures.load(Ordering::Relaxed)),
        );
        let failures = self.notification_failures.lock().unwrap().clone();
        let family = out.counter(
            "switchboard_teams_notification_failures_total",
            "Change notifications ignored or not followed, by reason.",
        );
        for reason in notify::FAILURES {
            family.with(
                &[("reason", reason)],
                count(failures.get(reason).copied().unwrap_or(0)),
            );
        }
        out.gauge(
            "switchboard_teams_signed_in",
            "1 while the Teams source has a working sign-in, else 0.",
        )
        .value(f64::from(u8::from(matches!(
            s.state.as_str(),
            "polling" | "subscribed"
        ))));
    }
}

impl Replier for Teams {
    fn reply<'a>(
        &'a self,
        message: &'a Message,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Sent, ApiError>> {
        Box::pin(self.inner.reply(message, text))
    }
}

impl Inner {
    /// Posts `text` to the chat `message` came from: `POST /chats/{id}/messages` with the text
    /// as HTML (escaped, line breaks kept).
    async fn reply(&self, message: &Message, text: &str) -> Result<Sent, ApiError> {
        let Some(chat) = message.metadata.get("chat_id") else {
            return Err(ApiError::refused(
                RefusalCode::Invalid,
                format!(
                    "message {} has no `chat_id`: it did not come from a Teams chat",
                    message.seq
                ),
            ));
        };
        if self.graph.auth().is_app_only() {
            return Err(ApiError::refused(
                RefusalCode::NotAllowed,
                "teams: app-only sign-in (`teams.user`) cannot send chat messages: Microsoft \
                 Graph sends them only as a signed-in person; sign in with `switchboard login \
                 teams` instead",
            ));
        }
        let body = json!({"body": {"contentType": "html", "content": html::escape(text)}});
        let sent = self
            .graph
            .post(&format!("/chats/{}/messages", segment(chat)), &body)
            .await
            .map_err(|e| reply_error(&e))?;
        match sent.get("id").and_then(Value::as_str) {
            Some(id) => {
                self.remember(format!("{chat}/{id}"));
                Ok(Sent { id: id.to_string() })
            }
            None => Err(ApiError::refused(
                RefusalCode::Failed,
                "teams: Microsoft Graph accepted the message but gave no id",
            )),
        }
    }
}

/// Why an answer was not sent, and what to do.
fn reply_error(e: &GraphError) -> ApiError {
    let (code, why) = match e {
        GraphError::Auth(AuthError::SignInNeeded(_)) => (
            RefusalCode::Unavailable,
            "teams: sign-in needed: switchboard login teams; nothing was sent".to_string(),
        ),
        GraphError::Status { status: 403, .. } => (
            RefusalCode::NotAllowed,
            format!(
                "teams: {e}; the sign-in needs the `ChatMessage.Send` permission: sign in again \
                 with `switchboard login teams`"
            ),
        ),
        other => (
            RefusalCode::Failed,
            format!("teams: {other}; nothing was sent"),
        ),
    };
    ApiError::refused(code, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_says_what_the_source_does() {
        let now: DateTime<Utc> = "2026-11-22T10:00:03Z".parse().unwrap();
        let mut s = TeamsState {
            state: "polling".into(),
            chats: 14,
            last_poll: Some("2026-11-22T10:00:00Z".into()),
            ..TeamsState::default()
        };
        assert_eq!(s.line(now), "polling 14 chats, last poll 3 s ago");
        s.state = "sign_in_needed".into();
        assert_eq!(s.line(now), "sign-in needed: switchboard login teams");
        s.state = "subscribed".into();
        s.subscription_expires = Some("2026-11-22T10:55:00Z".into());
        assert_eq!(
            s.line(now),
            "subscribed to change notifications until 2026-11-22T10:55:00Z (14 chats, last poll 3 s ago)"
        );
        s.state = "failing".into();
        s.last_poll = None;
        s.error = Some("GET /v1.0/me/chats: 500 InternalServerError: boom".into());
        assert_eq!(
            s.line(now),
            "not polling: GET /v1.0/me/chats: 500 InternalServerError: boom"
        );
    }
}
