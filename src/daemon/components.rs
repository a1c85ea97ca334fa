//! The daemon's components beside the core and its HTTP listeners ([`super::listeners`]):
//! the action queues' live capacity, exec, the upstream MCP servers, the schedules, Teams, Slack,
//! the shared stream and the control socket. Each is a [`Component`]: what it reports, how it starts
//! from its settings, and what of them it applies live.

use std::sync::Arc;

use anyhow::Context as _;
use tokio_util::task::TaskTracker;

use super::component::{Component, Context};
use crate::config::{Config, Home, HomeLock, ScheduleSettings};
use crate::control::local::BoxFuture;
use crate::control::ops::QueueCapacity;
use crate::control::{DaemonListeners, Parts};
use crate::delivery::exec::Exec;
use crate::sources::jetstream::{JetStream, JetStreamSettings};
use crate::sources::slack::settings::SlackTokens;
use crate::sources::slack::{Slack, SlackSettings};
use crate::sources::teams::{Teams, TeamsSettings};
use crate::sources::upstream::Upstreams;

/// The action queues. They live in the core, which starts before every component; this one
/// applies a new `actions.queueCapacity` live.
pub struct Queues;

impl Component for Queues {
    type Settings = usize;
    const KEYS: &'static [&'static str] = &["actions.queueCapacity"];

    fn settings(config: &Config) -> usize {
        config.actions.queue_capacity.max(1)
    }

    fn start(&self, _: &Context, _: usize) -> anyhow::Result<()> {
        Ok(())
    }

    fn reload<'a>(&'a self, cx: &'a Context, capacity: usize) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let _ = cx.api.call(QueueCapacity { capacity }).await;
        })
    }
}

/// Exec delivery (`exec`), built from its settings with [`Exec::new`]: takes exec work
/// whenever a slot is free and runs it.
impl Component for Arc<Exec> {
    type Settings = ();
    const KEYS: &'static [&'static str] = &["exec"];

    fn settings(_: &Config) {}

    fn report(&self, parts: Parts) -> Parts {
        let exec = self.clone();
        parts.status("exec", move |core| {
            serde_json::to_value(exec.stats(&core.delivery)).unwrap_or_default()
        })
    }

    fn start(&self, cx: &Context, (): ()) -> anyhow::Result<()> {
        self.spawn(cx.api.clone(), cx.tasks.clone());
        Ok(())
    }
}

/// The upstream MCP servers (`upstreams`): their tools, states and counters, and a supervisor
/// and an ingest task for each.
impl Component for Upstreams {
    type Settings = serde_json::Map<String, serde_json::Value>;
    const KEYS: &'static [&'static str] = &["upstreams"];

    fn settings(config: &Config) -> Self::Settings {
        config.upstreams.clone()
    }

    fn report(&self, parts: Parts) -> Parts {
        let (states, counters) = (self.clone(), self.clone());
        parts
            .tools(Arc::new(self.clone()))
            .status("upstreams", move |_| {
                serde_json::to_value(states.states()).unwrap_or_default()
            })
            .metrics(move |_, out| counters.metrics(out))
    }

    fn start(&self, cx: &Context, raw: Self::Settings) -> anyhow::Result<()> {
        // Checked with the whole file when it was loaded; this is a second line of defence.
        let configs = crate::sources::upstream::config::parse("", &raw)
            .map_err(|e| anyhow::anyhow!("{}", e[0]))?;
        crate::sources::upstream::start(&cx.source(), self, configs);
        Ok(())
    }
}

/// The cron schedules (`schedules`), whose last firings are kept in the home.
pub struct Schedules;

impl Component for Schedules {
    type Settings = Vec<ScheduleSettings>;
    const KEYS: &'static [&'static str] = &["schedules"];

    fn settings(config: &Config) -> Self::Settings {
        config.schedules.clone()
    }

    fn start(&self, cx: &Context, schedules: Self::Settings) -> anyhow::Result<()> {
        let state = crate::sources::schedule::state_path(&cx.home);
        crate::sources::schedule::start(&cx.source(), &schedules, &state);
        Ok(())
    }
}

/// Microsoft Teams (`teams`), when the section is there: its replier, status and counters, the
/// poller (and the change notification subscription, with `notificationUrl`).
pub struct TeamsSource(Option<Teams>);

impl TeamsSource {
    /// The source as `settings` say (none: no Teams), its files in `home`; `secret` is
    /// `SWITCHBOARD_TEAMS_CLIENT_SECRET` (app-only sign-in).
    pub fn new(settings: Option<TeamsSettings>, home: &Home, secret: Option<String>) -> Self {
        TeamsSource(settings.map(|s| Teams::new(s, home.dir(), secret)))
    }

    /// `POST /v1/teams/notifications`, for the ingest listener, when it subscribes.
    pub fn notifications(&self) -> Option<axum::Router> {
        self.0.as_ref().and_then(Teams::router)
    }
}

impl Component for TeamsSource {
    type Settings = ();
    const KEYS: &'static [&'static str] = &["teams"];

    fn settings(_: &Config) {}

    fn report(&self, parts: Parts) -> Parts {
        match &self.0 {
            Some(teams) => teams.parts(parts),
            None => parts,
        }
    }

    fn start(&self, cx: &Context, (): ()) -> anyhow::Result<()> {
        if let Some(teams) = &self.0 {
            teams.start(&cx.source());
        }
        Ok(())
    }
}

/// MCP Events webhook subscriptions (`mcp.events`): `events/subscribe` reaches them, and each
/// delivers from the inbox on its own.
pub struct EventWebhooks(pub crate::delivery::webhook::Webhooks);

impl Component for EventWebhooks {
    type Settings = ();
    const KEYS: &'static [&'static str] = &[];

    fn settings(_: &Config) {}

    fn report(&self, parts: Parts) -> Parts {
        self.0.parts(parts)
    }

    fn start(&self, cx: &Context, (): ()) -> anyhow::Result<()> {
        let api = crate::backend::Api::Local(cx.api.clone());
        self.0.start(api, cx.tasks.clone(), cx.shutdown().clone());
        Ok(())
    }
}

/// Slack (`slack`), when the section is there: its replier, status and counters, Socket Mode
/// (or the Events API's routes) and the approval messages.
pub struct SlackSource(Option<Slack>);

impl SlackSource {
    /// The source as `settings` say (none: no Slack), with `tokens` from the environment;
    /// refused when a token it needs is missing.
    pub fn new(settings: Option<SlackSettings>, tokens: SlackTokens) -> anyhow::Result<Self> {
        match settings {
            None => Ok(SlackSource(None)),
            Some(s) => Slack::new(s, tokens)
                .map(|slack| SlackSource(Some(slack)))
                .map_err(|e| anyhow::anyhow!(e)),
        }
    }

    /// `POST /v1/slack/events` and `/v1/slack/interactivity`, for the ingest listener, in
    /// events mode.
    pub fn routes(&self) -> Option<axum::Router> {
        self.0.as_ref().and_then(Slack::router)
    }
}

impl Component for SlackSource {
    type Settings = ();
    const KEYS: &'static [&'static str] = &["slack"];

    fn settings(_: &Config) {}

    fn report(&self, parts: Parts) -> Parts {
        match &self.0 {
            Some(slack) => slack.parts(parts),
            None => parts,
        }
    }

    fn start(&self, cx: &Context, (): ()) -> anyhow::Result<()> {
        if let Some(slack) = &self.0 {
            slack.start(&cx.source());
        }
        Ok(())
    }
}

/// A shared stream (`jetstream`), when there is one: appends go there, and its consumer stores
/// here what every instance appended.
pub struct SharedStream(Option<JetStream>);

impl SharedStream {
    /// Connects to the stream `settings` name (none: no shared stream), and from then on sends
    /// the work that must run once to its work queue, not to local sessions.
    pub async fn connect(
        settings: Option<JetStreamSettings>,
        home: &Home,
        core: &crate::app::Core,
    ) -> anyhow::Result<SharedStream> {
        let Some(settings) = settings else {
            return Ok(SharedStream(None));
        };
        let js = JetStream::connect(settings, home.dir()).await?;
        core.components()
            .lifecycle
            .share_work(crate::sources::jetstream::shareable);
        Ok(SharedStream(Some(js)))
    }
}

impl Component for SharedStream {
    type Settings = ();
    const KEYS: &'static [&'static str] = &["jetstream"];

    fn settings(_: &Config) {}

    fn report(&self, parts: Parts) -> Parts {
        let Some(js) = &self.0 else {
            return parts;
        };
        let (state, counters) = (js.clone(), js.clone());
        parts
            .relay(Arc::new(js.clone()))
            .status("jetstream", move |_| {
                serde_json::to_value(state.state()).unwrap_or_default()
            })
            .metrics(move |_, out| counters.metrics(out))
    }

    fn start(&self, cx: &Context, (): ()) -> anyhow::Result<()> {
        if let Some(js) = &self.0 {
            js.run(cx.api.clone(), &cx.tasks);
        }
        Ok(())
    }
}

/// The control socket in the home, where front ends and the CLI reach the operations.
pub struct ControlSocket {
    /// The home's lock: a front end checks that the daemon it reached still holds it.
    pub lock: Arc<HomeLock>,
    /// The listeners the daemon was asked for, for front ends that start it.
    pub asked: DaemonListeners,
}

impl Component for ControlSocket {
    type Settings = ();
    const KEYS: &'static [&'static str] = &[];

    fn settings(_: &Config) {}

    fn start(&self, cx: &Context, (): ()) -> anyhow::Result<()> {
        let path = cx.home.control_socket();
        let socket = crate::control::bind(&path)
            .with_context(|| format!("cannot bind {}", path.display()))?;
        let tasks: &TaskTracker = &cx.tasks;
        tasks.spawn(crate::control::server::serve(
            cx.api.clone(),
            path,
            socket,
            self.lock.clone(),
            self.asked.clone(),
            tasks.clone(),
        ));
        Ok(())
    }
}
