//! The running switchboard: the inbox, the live rules, the dispatcher and the
//! action lifecycle, behind one handle that every front end (MCP, HTTP, control
//! socket) shares.
//!
//! The dispatcher is the only caller of the engine: it reads committed messages
//! in seq order after the evaluation mark kept in `actions.jsonl`, evaluates a
//! batch, and hands the actions and the new mark to the lifecycle, which journals
//! them in one write. So every message is evaluated once, also the ones that
//! arrived while nothing was evaluating (after a crash or a restart).

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::actions::Lifecycle;
use crate::actions::journal::ActionLog;
use crate::actions::lifecycle::{LifecycleStats, PendingConfirm};
use crate::actions::writer::JournalWriter;
use crate::config::{Config, Home};
use crate::engine::Engine;
use crate::engine::Prepared;
use crate::inbox::{Inbox, InboxStats, StateStore};
use crate::message::Seq;
use crate::metrics::{Metrics, ReloadResult};
use crate::rules::{LoadError, RuleError, RuleSet};

/// The result of the last rules (re)load, for `rules_reload`, `inbox_stats` and logs.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct ReloadReport {
    /// True when the new rules are live.
    pub ok: bool,
    /// `file`, `builtin` (no file at boot) or `kept` (invalid or deleted file: old rules stay live).
    pub source: String,
    /// Rules live after the reload.
    pub rules: usize,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// One line for people.
    pub message: String,
    /// The errors of an invalid file, in file order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<RuleError>,
}

/// Everything `inbox_stats` and `switchboard stats` show.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Stats {
    /// The inbox: ring, seqs, journal.
    pub inbox: InboxStats,
    /// Rule evaluation paused.
    pub paused: bool,
    /// Live rules.
    pub rules_loaded: usize,
    /// The last (re)load.
    pub last_reload: Option<ReloadReport>,
    /// Highest seq the engine evaluated.
    pub evaluated: Seq,
    /// Queues, claims, sessions and counters of the action lifecycle.
    pub delivery: LifecycleStats,
    /// `wait_for_inbound_message` calls waiting now.
    pub wait_calls_in_flight: u64,
    /// Upstream MCP servers: state, counters.
    pub upstreams: Vec<crate::sources::upstream::UpstreamState>,
    /// Open confirm requests.
    pub pending_confirms: Vec<PendingConfirm>,
    /// The daemon's HTTP listeners (ingest, MCP): bound, or why not.
    #[serde(default)]
    pub listeners: Vec<ListenerState>,
    /// The last change of `switchboard.json` seen while running: what was applied, what needs
    /// a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_reload: Option<crate::config::ConfigReload>,
    /// Exec delivery: host, readiness, runs.
    pub exec: crate::delivery::exec::ExecStats,
}

/// One HTTP listener of the daemon, for `status` and `inbox_stats`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ListenerState {
    /// `ingest` or `mcp`.
    pub what: String,
    /// The address asked for.
    pub address: String,
    /// The address bound, when listening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<String>,
    /// Why it is not listening (the port is taken, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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
    /// The action lifecycle: queues, claims, sessions, `actions.jsonl`.
    pub lifecycle: Lifecycle,
    /// Counters for `/metrics` and `inbox_stats`.
    pub metrics: Metrics,
    /// The engine; held while one message is evaluated, so a reload is atomic.
    pub engine: Mutex<Engine>,
    /// The last reload result.
    pub last_reload: Mutex<Option<ReloadReport>>,
    /// When the live rules were loaded (boot or a later reload); for the reload messages.
    pub rules_loaded_at: Mutex<Option<DateTime<Utc>>>,
    /// Held by a reload from reading the file to the swap, so reloads apply in order.
    reloading: Mutex<()>,
    /// The last change of `switchboard.json` seen while running (see [`crate::watch`]).
    pub config_reload: Mutex<Option<crate::config::ConfigReload>>,
    /// HTTP ingest settings that a `switchboard.json` change applies live.
    pub http_settings: crate::config::LiveHttp,
    /// Cancelled when the process shuts down.
    pub shutdown: CancellationToken,
    /// Every background task, so shutdown can wait for them.
    pub tasks: TaskTracker,
    /// Upstream MCP servers: their state, tools and calls (empty until `serve` starts them).
    pub upstreams: crate::sources::upstream::Upstreams,
    /// When this process started serving.
    pub started: DateTime<Utc>,
    /// The daemon's log file, when it logs to one.
    pub log_file: Option<String>,
    /// The HTTP listeners, as the daemon bound them.
    pub listeners: Mutex<Vec<ListenerState>>,
    /// The exec runner: headless runs of `"delivery": "exec"` rules.
    pub exec: Arc<crate::delivery::exec::Exec>,
}

impl App {
    /// Starts on `home`: opens the inbox, state and actions journal, restores live actions,
    /// loads the rules, starts the dispatcher and the confirm expiry timer.
    pub async fn start(
        home: Home,
        config: Config,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Arc<App>> {
        let inbox = Inbox::open(&home, &config.inbox).await?;
        let state = StateStore::open(&home.state())?;
        state.set_boot_seq(inbox.last_seq());
        let (log, replay) = ActionLog::open(&home.actions())
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", home.actions().display()))?;
        if replay.skipped > 0 {
            tracing::warn!(
                skipped = replay.skipped,
                "actions journal replay skipped unreadable lines"
            );
        }
        // Without an actions journal there is nothing to resume: history is not re-evaluated.
        let mark = match replay.evaluated {
            Some(seq) if replay.existed => seq.min(inbox.last_seq()),
            _ => inbox.last_seq(),
        };
        let writer = JournalWriter::start(log, config.inbox.fsync)?;
        let lifecycle = Lifecycle::with_settings(&config.actions, writer);
        let restored = replay.live.len();
        lifecycle.restore(replay.live.into_values());
        let app = App::assemble(Some(home), config, inbox, state, lifecycle, shutdown);
        app.engine
            .lock()
            .unwrap()
            .set_next_action_id(replay.next_id);
        tracing::info!(
            restored,
            next_action_id = replay.next_id,
            evaluated = mark,
            "actions replayed"
        );
        // Compiling and indexing a large rule file takes a while: not on an async worker.
        let booting = app.clone();
        tokio::task::spawn_blocking(move || booting.load_rules_at_boot()).await?;
        app.spawn_dispatcher(mark);
        app.spawn_resolver(mark);
        app.spawn_expiry();
        app.spawn_state_flusher();
        app.spawn_exec();
        Ok(app)
    }

    /// An in-memory switchboard with the given rules (tests).
    pub fn memory(config: Config, rules: RuleSet) -> Arc<App> {
        let inbox = Inbox::memory(&config.inbox);
        let lifecycle = Lifecycle::with_settings(&config.actions, JournalWriter::memory());
        let app = App::assemble(
            None,
            config,
            inbox,
            StateStore::memory(),
            lifecycle,
            CancellationToken::new(),
        );
        app.engine.lock().unwrap().swap_rules(Arc::new(rules));
        app.spawn_dispatcher(0);
        app.spawn_resolver(0);
        app.spawn_expiry();
        app.spawn_exec();
        app
    }

    fn assemble(
        home: Option<Home>,
        config: Config,
        inbox: Inbox,
        state: StateStore,
        lifecycle: Lifecycle,
        shutdown: CancellationToken,
    ) -> Arc<App> {
        let mut engine = Engine::new(Arc::new(RuleSet::builtin()));
        engine.set_paused(state.paused());
        let http_settings = crate::config::LiveHttp::new(config.http.clone());
        let exec = Arc::new(crate::delivery::exec::Exec::new(config.exec.clone()));
        Arc::new(App {
            exec,
            lifecycle,
            home,
            config,
            inbox,
            state,
            metrics: Metrics::default(),
            engine: Mutex::new(engine),
            last_reload: Mutex::new(None),
            rules_loaded_at: Mutex::new(None),
            reloading: Mutex::new(()),
            config_reload: Mutex::new(None),
            http_settings,
            shutdown,
            tasks: TaskTracker::new(),
            upstreams: Default::default(),
            started: Utc::now(),
            log_file: crate::daemon::log::current().map(|p| p.display().to_string()),
            listeners: Mutex::default(),
        })
    }

    /// The live rules.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.engine.lock().unwrap().rules().clone()
    }

    /// Boot: the file's rules, or the built-in rule when there is no file. An invalid file at
    /// boot also leaves the built-in rule live (there is nothing older to keep) and says so.
    fn load_rules_at_boot(&self) {
        let Some(home) = &self.home else { return };
        let report = match RuleSet::load(&home.triggers()) {
            Ok(None) => {
                self.swap(RuleSet::builtin());
                self.report(
                    true,
                    "builtin",
                    "no triggers.json: the built-in catch-all notify rule is live".into(),
                    vec![],
                )
            }
            Ok(Some(rules)) => {
                let n = rules.len();
                self.swap(rules);
                self.report(
                    true,
                    "file",
                    format!("{n} rules loaded from {}", home.triggers().display()),
                    vec![],
                )
            }
            Err(err) => {
                let errors = match &err {
                    LoadError::Invalid { errors, .. } => errors.clone(),
                    LoadError::Io { .. } => vec![],
                };
                self.report(
                    false,
                    "kept",
                    format!("rules not loaded: {err}; the built-in catch-all notify rule is live"),
                    errors,
                )
            }
        };
        if report.ok {
            tracing::info!(
                rules = report.rules,
                source = report.source,
                "{}",
                report.message
            );
        } else {
            tracing::error!("{}", report.message);
        }
    }

    /// Reloads `triggers.json` from the home. An invalid or deleted file keeps the live rules;
    /// the report (also kept for `inbox_stats`) says why, with every error located.
    ///
    /// Reading, compiling and indexing run on a blocking thread, not on an async worker, and
    /// the live rules keep serving until the new ones are swapped in at once.
    pub async fn reload_rules(self: &Arc<Self>) -> ReloadReport {
        let app = self.clone();
        match tokio::task::spawn_blocking(move || app.reload_rules_blocking()).await {
            Ok(report) => report,
            Err(e) => self.report(
                false,
                "kept",
                format!("rules not reloaded: the reload failed: {e}; the live rules stay"),
                vec![],
            ),
        }
    }

    /// [`App::reload_rules`] on the calling thread.
    fn reload_rules_blocking(&self) -> ReloadReport {
        let _in_order = self.reloading.lock().unwrap();
        let Some(home) = &self.home else {
            return self.report(true, "builtin", "no home: rules are fixed".into(), vec![]);
        };
        let path = home.triggers();
        let shown = path.display().to_string();
        let live = self.live_rules_phrase();
        let (result, report) = match RuleSet::load(&path) {
            Ok(Some(rules)) => {
                let n = rules.len();
                self.swap(rules);
                let report = self.report(
                    true,
                    "file",
                    format!("{n} rules loaded from {shown}"),
                    vec![],
                );
                (ReloadResult::Ok, report)
            }
            Ok(None) => {
                let report = self.report(
                    false,
                    "kept",
                    format!(
                        "rules not reloaded: {shown} does not exist (deleted or moved?); {live} stay live"
                    ),
                    vec![],
                );
                (ReloadResult::Missing, report)
            }
            Err(err) => {
                let (result, errors) = match &err {
                    LoadError::Invalid { errors, .. } => (ReloadResult::Invalid, errors.clone()),
                    LoadError::Io { .. } => (ReloadResult::Unreadable, vec![]),
                };
                let n = errors.len().max(1);
                let report = self.report(
                    false,
                    "kept",
                    format!(
                        "rules not reloaded: {n} error{}; {live} stay live: {err}",
                        if n == 1 { "" } else { "s" }
                    ),
                    errors,
                );
                (result, report)
            }
        };
        self.metrics.rule_reload(result);
        if report.ok {
            tracing::info!(rules = report.rules, "{}", report.message);
        } else {
            tracing::warn!("{}", report.message);
        }
        report
    }

    /// Indexes `rules` outside the engine's lock, then swaps them in at once: an evaluation
    /// in flight finishes with the rules it started with.
    fn swap(&self, rules: RuleSet) {
        let prepared = Prepared::new(Arc::new(rules));
        self.engine.lock().unwrap().swap(prepared);
        *self.rules_loaded_at.lock().unwrap() = Some(Utc::now());
    }

    /// "the 5 rules loaded at 10:42:07" (UTC): the live rules and when they were really
    /// loaded, for a reload that keeps them.
    fn live_rules_phrase(&self) -> String {
        let n = self.rules().len();
        let rules = if n == 1 { "rule" } else { "rules" };
        match *self.rules_loaded_at.lock().unwrap() {
            Some(at) => format!("the {n} {rules} loaded at {} UTC", at.format("%H:%M:%S")),
            None => format!("the {n} {rules} loaded at start"),
        }
    }

    fn report(
        &self,
        ok: bool,
        source: &'static str,
        message: String,
        errors: Vec<RuleError>,
    ) -> ReloadReport {
        let report = ReloadReport {
            ok,
            source: source.to_string(),
            rules: self.rules().len(),
            at: Utc::now(),
            message,
            errors,
        };
        *self.last_reload.lock().unwrap() = Some(report.clone());
        report
    }

    /// Pauses or resumes rule evaluation (persisted in `state.json`).
    pub fn set_paused(&self, paused: bool) {
        self.engine.lock().unwrap().set_paused(paused);
        self.state.set_paused(paused);
        self.state.flush();
        tracing::info!(
            paused,
            "rule evaluation {}",
            if paused { "paused" } else { "resumed" }
        );
    }

    /// Whether rule evaluation is paused.
    pub fn is_paused(&self) -> bool {
        self.engine.lock().unwrap().is_paused()
    }

    /// Everything `inbox_stats` and `switchboard stats` show.
    pub fn stats(&self) -> Stats {
        let delivery = self.lifecycle.stats();
        Stats {
            exec: self.exec.stats(&delivery),
            inbox: self.inbox.stats(),
            paused: self.is_paused(),
            rules_loaded: self.rules().len(),
            last_reload: self.last_reload.lock().unwrap().clone(),
            evaluated: self.state.evaluated(),
            delivery,
            wait_calls_in_flight: self
                .metrics
                .wait_calls_in_flight
                .load(std::sync::atomic::Ordering::Relaxed),
            upstreams: self.upstreams.states(),
            pending_confirms: self.lifecycle.pending_summary(),
            listeners: self.listeners.lock().unwrap().clone(),
            config_reload: self.config_reload.lock().unwrap().clone(),
        }
    }

    /// The dispatcher: evaluates committed messages after `mark`, in seq order, in batches,
    /// and offers the actions with the new mark to the lifecycle (one journal write per batch).
    /// While the actions journal fails it waits for its batch to be written, so it never runs
    /// ahead of what is on disk.
    fn spawn_dispatcher(self: &Arc<App>, mark: Seq) {
        let app = self.clone();
        self.tasks.spawn(async move {
            let mut committed = app.inbox.committed();
            let mut evaluated = mark;
            let mut backoff = UNREADABLE_BACKOFF_MIN;
            loop {
                let visible = committed.borrow_and_update();
                let batch = app.inbox.read_after(evaluated, DISPATCH_BATCH).await;
                if let Some(last) = batch.last() {
                    let now = Utc::now();
                    let mut actions = Vec::new();
                    for msg in &batch {
                        let eval = app.engine.lock().unwrap().evaluate(msg, now);
                        for s in &eval.suppressed {
                            app.metrics.suppressed(&s.rule, s.reason);
                        }
                        for action in eval.actions {
                            app.metrics.action(&action.rule, action.mode);
                            actions.push((action, msg.clone()));
                        }
                    }
                    evaluated = last.seq;
                    // Waits while the actions journal fails (see `Lifecycle::offer`).
                    tokio::select! {
                        _ = app.shutdown.cancelled() => break,
                        _ = app.lifecycle.offer(actions, Some(evaluated), now) => {}
                    }
                    backoff = UNREADABLE_BACKOFF_MIN;
                    continue;
                }
                if evaluated < visible {
                    // Committed messages that cannot be read now (the journal behind the ring
                    // fails to read): wait for it with backoff, never spin.
                    if backoff == UNREADABLE_BACKOFF_MIN {
                        tracing::warn!(
                            evaluated,
                            "messages after the evaluation mark cannot be read; retrying with backoff"
                        );
                    }
                    tokio::select! {
                        _ = app.shutdown.cancelled() => break,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(UNREADABLE_BACKOFF_MAX);
                    continue;
                }
                tokio::select! {
                    _ = app.shutdown.cancelled() => break,
                    changed = committed.changed() => if changed.is_err() { break },
                }
            }
        });
    }

    /// The resolve pass: follows the lifecycle's evaluation mark (so the confirms a message
    /// created are visible before a later message is checked against them) and closes the
    /// pending confirms that a message resolves ([`crate::engine::resolve`]). It reads no
    /// message while no live rule has a resolve key, and while paused it closes nothing. It
    /// also keeps the mark in `state.json`, which so says a message was evaluated only once
    /// its actions are written.
    fn spawn_resolver(self: &Arc<App>, mark: Seq) {
        let app = self.clone();
        self.tasks.spawn(async move {
            let mut evaluated = app.lifecycle.evaluated();
            let mut done = mark;
            loop {
                let upto = *evaluated.borrow_and_update();
                app.state.set_evaluated(upto);
                while done < upto {
                    let rules = app.rules();
                    if !crate::engine::resolve::any(&rules) || app.is_paused() {
                        done = upto;
                        break;
                    }
                    // Every confirm a message up to `upto` made is visible by now: with none
                    // pending, there is nothing to read.
                    let mut pending = app.lifecycle.pending_confirms();
                    if pending.is_empty() {
                        done = upto;
                        break;
                    }
                    let batch = app.inbox.read_after(done, DISPATCH_BATCH).await;
                    for msg in batch.iter().take_while(|m| m.seq <= upto) {
                        if pending.is_empty() {
                            break;
                        }
                        let ids = crate::engine::resolve::resolved_by(&rules, msg, &pending);
                        if !ids.is_empty() {
                            app.lifecycle.resolve(&ids, msg.seq, Utc::now());
                            pending.retain(|i| !ids.contains(&i.action_id));
                        }
                    }
                    done = batch.last().map_or(upto, |m| m.seq.min(upto));
                }
                tokio::select! {
                    _ = app.shutdown.cancelled() => break,
                    changed = evaluated.changed() => if changed.is_err() { break },
                }
            }
        });
    }

    fn spawn_expiry(self: &Arc<App>) {
        let lifecycle = self.lifecycle.clone();
        let token = self.shutdown.clone();
        self.tasks
            .spawn(async move { lifecycle.run_expiry(token).await });
    }

    /// The exec runner: takes `"delivery": "exec"` work as slots free up, until shutdown.
    fn spawn_exec(self: &Arc<App>) {
        self.exec.spawn(
            self.lifecycle.clone(),
            self.tasks.clone(),
            self.shutdown.clone(),
        );
    }

    fn spawn_state_flusher(self: &Arc<App>) {
        let state = self.state.clone();
        let token = self.shutdown.clone();
        self.tasks
            .spawn(async move { state.run_flusher(token).await });
    }
}

/// How many messages the dispatcher evaluates per journal write.
const DISPATCH_BATCH: usize = 256;

/// The dispatcher's first and longest wait for messages it cannot read yet.
const UNREADABLE_BACKOFF_MIN: std::time::Duration = std::time::Duration::from_millis(100);
const UNREADABLE_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(5);
