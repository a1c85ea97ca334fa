//! The running switchboard: the inbox, the live rules, the dispatcher and the
//! delivery hub, behind one handle that every front end (MCP, HTTP, control
//! socket) shares.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, Home};
use crate::delivery::Hub;
use crate::engine::Engine;
use crate::inbox::{Inbox, StateStore};
use crate::metrics::Metrics;
use crate::rules::{LoadError, RuleError, RuleSet};

/// The result of the last rules (re)load, for `rules_reload`, `inbox_stats` and logs.
#[derive(Clone, Debug, Serialize)]
pub struct ReloadReport {
    /// True when the new rules are live.
    pub ok: bool,
    /// `file`, `builtin` (no file) or `kept` (invalid or deleted file: old rules stay live).
    pub source: &'static str,
    /// Rules live after the reload.
    pub rules: usize,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// One line for people.
    pub message: String,
    /// The errors of an invalid file, in file order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<RuleError>,
}

/// The shared handle.
pub struct App {
    /// The home, when running on disk.
    pub home: Option<Home>,
    /// The process configuration.
    pub config: Config,
    /// The inbox.
    pub inbox: Inbox,
    /// Cursors, pause, evaluation progress.
    pub state: StateStore,
    /// The delivery hub.
    pub hub: Hub,
    /// Counters for `/metrics` and `inbox_stats`.
    pub metrics: Metrics,
    /// The engine; held while one message is evaluated, so a reload is atomic.
    pub engine: Mutex<Engine>,
    /// The last reload result.
    pub last_reload: Mutex<Option<ReloadReport>>,
    /// Cancelled when the process shuts down.
    pub shutdown: CancellationToken,
    /// Every background task, so shutdown can wait for them.
    pub tasks: TaskTracker,
}

impl App {
    /// Starts on `home`: opens the inbox and state, loads the rules, starts the dispatcher.
    pub async fn start(
        home: Home,
        config: Config,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Arc<App>> {
        let inbox = Inbox::open(&home, &config.inbox).await?;
        let state = StateStore::open(&home.state())?;
        state.set_boot_seq(inbox.last_seq());
        let app = App::assemble(Some(home), config, inbox, state, shutdown);
        app.reload_rules();
        app.spawn_dispatcher();
        Ok(app)
    }

    /// An in-memory switchboard with the given rules (tests, `rules test`).
    pub fn memory(config: Config, rules: RuleSet) -> Arc<App> {
        let inbox = Inbox::memory(&config.inbox);
        let app = App::assemble(
            None,
            config,
            inbox,
            StateStore::memory(),
            CancellationToken::new(),
        );
        app.engine.lock().unwrap().swap_rules(Arc::new(rules));
        app.spawn_dispatcher();
        app
    }

    fn assemble(
        home: Option<Home>,
        config: Config,
        inbox: Inbox,
        state: StateStore,
        shutdown: CancellationToken,
    ) -> Arc<App> {
        let mut engine = Engine::new(Arc::new(RuleSet::builtin()));
        engine.set_paused(state.paused());
        Arc::new(App {
            hub: Hub::new(config.actions.queue_capacity),
            home,
            config,
            inbox,
            state,
            metrics: Metrics::default(),
            engine: Mutex::new(engine),
            last_reload: Mutex::new(None),
            shutdown,
            tasks: TaskTracker::new(),
        })
    }

    /// The live rules.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.engine.lock().unwrap().rules().clone()
    }

    /// Reloads `triggers.json` from the home; an invalid file keeps the old rules.
    pub fn reload_rules(&self) -> ReloadReport {
        let at = Utc::now();
        let Some(home) = &self.home else {
            return ReloadReport {
                ok: true,
                source: "builtin",
                rules: self.rules().len(),
                at,
                message: "no home: rules are fixed".into(),
                errors: vec![],
            };
        };
        let path = home.triggers();
        let report = match RuleSet::load(&path) {
            Ok(loaded) => {
                let (source, rules) = match loaded {
                    Some(rules) => ("file", rules),
                    None => ("builtin", RuleSet::builtin()),
                };
                let n = rules.len();
                self.engine.lock().unwrap().swap_rules(Arc::new(rules));
                tracing::info!(rules = n, source, "rules loaded");
                ReloadReport {
                    ok: true,
                    source,
                    rules: n,
                    at,
                    message: format!("{n} rules loaded from {source}"),
                    errors: vec![],
                }
            }
            Err(err) => {
                let live = self.rules().len();
                let errors = match &err {
                    LoadError::Invalid { errors, .. } => errors.clone(),
                    LoadError::Io { .. } => vec![],
                };
                let message =
                    format!("rules not reloaded: {err}; the {live} rules loaded stay live");
                tracing::warn!(%message);
                ReloadReport {
                    ok: false,
                    source: "kept",
                    rules: live,
                    at,
                    message,
                    errors,
                }
            }
        };
        *self.last_reload.lock().unwrap() = Some(report.clone());
        report
    }

    /// Pauses or resumes rule evaluation (persisted).
    pub fn set_paused(&self, paused: bool) {
        self.engine.lock().unwrap().set_paused(paused);
        self.state.set_paused(paused);
    }

    /// Whether rule evaluation is paused.
    pub fn is_paused(&self) -> bool {
        self.engine.lock().unwrap().is_paused()
    }

    /// Everything `inbox_stats` shows.
    pub fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "inbox": self.inbox.stats(),
            "paused": self.is_paused(),
            "rules_loaded": self.rules().len(),
            "last_reload": *self.last_reload.lock().unwrap(),
            "delivery": self.hub.stats(),
        })
    }

    /// STUB dispatcher: evaluates committed messages in seq order and offers
    /// the actions to the hub. The durable version replaces it.
    fn spawn_dispatcher(self: &Arc<App>) {
        let app = self.clone();
        self.tasks.spawn(async move {
            let mut committed = app.inbox.committed();
            let mut evaluated = app.state.evaluated().max(app.inbox.last_seq());
            loop {
                for msg in app.inbox.read_after(evaluated, 256).await {
                    let eval = app.engine.lock().unwrap().evaluate(&msg, Utc::now());
                    for action in eval.actions {
                        app.hub.offer(action, msg.clone());
                    }
                    evaluated = msg.seq;
                    app.state.set_evaluated(evaluated);
                }
                if evaluated < *committed.borrow_and_update() {
                    continue;
                }
                tokio::select! {
                    _ = app.shutdown.cancelled() => break,
                    changed = committed.changed() => if changed.is_err() { break },
                }
            }
        });
    }
}
