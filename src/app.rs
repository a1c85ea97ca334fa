//! The core: the running switchboard behind the operations.
//!
//! [`Core`] runs the components (the inbox, `state.json`, the action lifecycle, the metrics,
//! on-duty mode: [`Components`]) and keeps to itself only what they share: the engine with its
//! live rules and their reloads, the dispatcher that feeds the lifecycle from the inbox, and
//! appends counted by source. The operations in [`crate::control`] reach the components
//! themselves through their context, as a mini-redis command applies itself to its `Db`: an
//! operation is its own file and calls the component it uses, and the core does not grow a
//! method per operation.
//!
//! The dispatcher is the only caller of the engine: it reads committed messages in seq order
//! after the evaluation mark kept in `actions.jsonl`, evaluates a batch, and hands the actions
//! and the new mark to the lifecycle, which journals them in one write. So every message is
//! evaluated once, also the ones that arrived while nothing was evaluating (after a crash or a
//! restart).
//!
//! The core knows nothing of the sources, delivery or the control socket: it takes its settings
//! as plain values ([`CoreSettings`]), its shutdown token and task tracker from whoever runs it,
//! and reports what it holds; the daemon composes the rest around it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::actions::duty::{Duty, HookStats};
use crate::actions::journal::ActionLog;
use crate::actions::lifecycle::{LifecycleStats, PendingConfirm, consumer_name_problem};
use crate::actions::writer::JournalWriter;
use crate::actions::{ActionId, ActionSettings, Lifecycle};
use crate::duration::Backoff;
use crate::engine::{Engine, Prepared};
use crate::home::Home;
use crate::inbox::InboxSettings;
use crate::inbox::{Appended, Inbox, InboxError, InboxStats, StateStore};
use crate::message::{NewMessage, Seq};
use crate::metrics::{Metrics, ReloadResult};
use crate::rules::{LoadError, RuleError, RuleSet};

/// What the core needs to know, as plain values (the daemon reads them from `switchboard.json`).
#[derive(Clone, Debug)]
pub struct CoreSettings {
    /// The inbox: ring, journal, limits.
    pub inbox: InboxSettings,
    /// The action queues: capacity, held nudges (`actions`).
    pub actions: ActionSettings,
    /// The server-side cap of a wait (`mcp.maxWaitS`).
    pub max_wait: Duration,
}

impl Default for CoreSettings {
    fn default() -> Self {
        CoreSettings {
            inbox: InboxSettings::default(),
            actions: ActionSettings::default(),
            max_wait: Duration::from_secs(55),
        }
    }
}

/// The result of the last rules (re)load, for `rules_reload`, `inbox_stats` and logs.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReloadReport {
    /// True when the new rules are live.
    pub ok: bool,
    /// `file`, `builtin` (no file at boot) or `kept` (invalid or deleted file: old rules stay live).
    pub source: String,
    /// Rules live after the reload.
    pub rules: usize,
    /// When it happened (RFC 3339).
    #[schemars(with = "String")]
    pub at: DateTime<Utc>,
    /// One line for people.
    pub message: String,
    /// The errors of an invalid file, in file order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<serde_json::Value>")]
    pub errors: Vec<RuleError>,
    /// The SHA-256 of the file this (re)load read ([`crate::rules::file_hash`]); absent when
    /// there was no file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The SHA-256 of the file whose rules run after it; absent while the built-in rule runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
}

/// What the core counts and holds, for `inbox_stats`, `switchboard stats` and `/metrics`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoreStats {
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
    /// Open confirm requests.
    pub pending_confirms: Vec<PendingConfirm>,
    /// On-duty mode and what the stop hooks did.
    #[serde(default)]
    pub hooks: HookStats,
}

/// The components the core runs, as the operations reach them: each op takes the handles it
/// uses from here (as a mini-redis command takes its `Db`), so that a new operation touches its
/// own file and the component, not the core.
pub struct Components {
    /// The home, when running on disk.
    pub home: Option<Home>,
    /// The settings it runs with (the inbox's limits, the cap of a wait).
    pub settings: CoreSettings,
    /// Every message, numbered and kept.
    pub inbox: Inbox,
    /// `state.json`: consumer cursors, the evaluation mark, paused, the engine's memory.
    pub state: StateStore,
    /// The action lifecycle: queues, claims, sessions, confirms, `actions.jsonl`.
    pub lifecycle: Lifecycle,
    /// The process counters `/metrics` renders.
    pub metrics: Metrics,
    /// On-duty mode and the stop hooks' blocks in a row.
    pub duty: Duty,
}

/// The shared handle on the running core: the components, and what only the core does with
/// them (the engine and its live rules, the dispatcher, appends counted by source).
pub struct Core {
    components: Components,
    /// The engine; held while one message is evaluated, so a reload is atomic.
    engine: Mutex<Engine>,
    rules: RulesState,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

/// The live rules' history: the last reload and when the live rules were loaded.
#[derive(Default)]
struct RulesState {
    last_reload: Mutex<Option<ReloadReport>>,
    loaded_at: Mutex<Option<DateTime<Utc>>>,
    /// The hash of the file whose rules are live (`None`: the built-in rule).
    loaded_hash: Mutex<Option<String>>,
    /// Held by a reload from reading the file to the swap, so reloads apply in order.
    reloading: Mutex<()>,
}

impl Core {
    /// Starts on `home`: opens the inbox, state and actions journal, restores live actions,
    /// loads the rules, starts the dispatcher and the confirm expiry timer on `tasks`; every
    /// task stops when `shutdown` fires.
    pub async fn start(
        home: Home,
        settings: CoreSettings,
        shutdown: CancellationToken,
        tasks: TaskTracker,
    ) -> anyhow::Result<Arc<Core>> {
        let inbox = Inbox::open(&home, &settings.inbox).await?;
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
        let writer = JournalWriter::start(log, settings.inbox.fsync)?;
        let lifecycle = Lifecycle::with_settings(&settings.actions, writer);
        let restored = replay.live.len();
        lifecycle.restore(replay.live.into_values());
        lifecycle.start_from(mark);
        remember_consumers(&state, &lifecycle);
        let core = Core::assemble(
            Some(home),
            settings,
            inbox,
            state,
            lifecycle,
            shutdown,
            tasks,
        );
        core.engine
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
        let booting = core.clone();
        tokio::task::spawn_blocking(move || booting.load_rules_at_boot()).await?;
        core.restore_limits();
        core.spawn_limits_saver();
        core.spawn_dispatcher(mark);
        core.spawn_resolver(mark);
        core.spawn_expiry();
        core.spawn_state_flusher();
        Ok(core)
    }

    /// An in-memory core with the given rules (tests, benches).
    pub fn memory(settings: CoreSettings, rules: RuleSet) -> Arc<Core> {
        let inbox = Inbox::memory(&settings.inbox);
        let lifecycle = Lifecycle::with_settings(&settings.actions, JournalWriter::memory());
        let core = Core::assemble(
            None,
            settings,
            inbox,
            StateStore::memory(),
            lifecycle,
            CancellationToken::new(),
            TaskTracker::new(),
        );
        core.engine.lock().unwrap().swap_rules(Arc::new(rules));
        core.spawn_dispatcher(0);
        core.spawn_resolver(0);
        core.spawn_expiry();
        core
    }

    fn assemble(
        home: Option<Home>,
        settings: CoreSettings,
        inbox: Inbox,
        state: StateStore,
        lifecycle: Lifecycle,
        shutdown: CancellationToken,
        tasks: TaskTracker,
    ) -> Arc<Core> {
        let mut engine = Engine::new(Arc::new(RuleSet::builtin()));
        engine.set_paused(state.paused());
        let duty = match &home {
            Some(home) => Duty::load(home.duty()),
            None => Duty::memory(),
        };
        Arc::new(Core {
            components: Components {
                home,
                settings,
                inbox,
                state,
                lifecycle,
                metrics: Metrics::default(),
                duty,
            },
            engine: Mutex::new(engine),
            rules: RulesState::default(),
            shutdown,
            tasks,
        })
    }

    /// The components, for the operations.
    pub fn components(&self) -> &Components {
        &self.components
    }

    /// Fires when the core shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Flushes the journals and the state, and closes the inbox (the last step of a shutdown,
    /// once every task has stopped).
    pub async fn close(&self) {
        self.components.lifecycle.close().await;
        self.components.inbox.close().await;
        self.components.state.flush();
    }

    // ---- rules ------------------------------------------------------------------------------

    /// The live rules.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.engine.lock().unwrap().rules().clone()
    }

    /// Boot: the file's rules, or the built-in rule when there is no file. An invalid file at
    /// boot also leaves the built-in rule live (there is nothing older to keep) and says so.
    fn load_rules_at_boot(&self) {
        let Some(home) = &self.components.home else {
            return;
        };
        let (hash, loaded) = RuleSet::load_hashed(&home.triggers());
        let report = match loaded {
            Ok(None) => {
                self.swap(RuleSet::builtin(), None);
                self.report(
                    true,
                    "builtin",
                    "no triggers.json: the built-in catch-all notify rule is live".into(),
                    vec![],
                    hash,
                )
            }
            Ok(Some(rules)) => {
                let n = rules.len();
                self.swap(rules, hash.clone());
                self.report(
                    true,
                    "file",
                    format!("{n} rules loaded from {}", home.triggers().display()),
                    vec![],
                    hash,
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
                    hash,
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
    /// `unless`: the hash of a file whose reload is not needed: when the last (re)load read
    /// exactly that file, its report is returned and nothing is read again (`rules check`
    /// and the watcher both ask for the file they saw, which is then reloaded once). The flag
    /// says whether the file was read.
    ///
    /// Reading, compiling and indexing run on a blocking thread, not on an async worker, and
    /// the live rules keep serving until the new ones are swapped in at once.
    pub async fn reload_rules(self: &Arc<Self>, unless: Option<String>) -> (ReloadReport, bool) {
        let core = self.clone();
        match tokio::task::spawn_blocking(move || core.reload_rules_blocking(unless)).await {
            Ok(done) => done,
            Err(e) => {
                let why =
                    format!("rules not reloaded: the reload failed: {e}; the live rules stay");
                (self.report(false, "kept", why, vec![], None), true)
            }
        }
    }

    /// [`Core::reload_rules`] on the calling thread.
    fn reload_rules_blocking(&self, unless: Option<String>) -> (ReloadReport, bool) {
        let _in_order = self.rules.reloading.lock().unwrap();
        if let Some(last) = self.rules.last_reload.lock().unwrap().as_ref()
            && unless.is_some()
            && last.hash == unless
        {
            return (last.clone(), false);
        }
        let Some(home) = &self.components.home else {
            let fixed = "no home: rules are fixed".into();
            return (self.report(true, "builtin", fixed, vec![], None), false);
        };
        let path = home.triggers();
        let shown = path.display().to_string();
        let live = self.live_rules_phrase();
        // A file that another user could have changed is not obeyed. Its hash is reported,
        // so that `rules check` sees the daemon looked at this very file and said no.
        if let Err(refused) = home.check_file(&path) {
            let hash = std::fs::read(&path)
                .ok()
                .map(|bytes| crate::rules::file_hash(&bytes));
            let report = self.report(
                false,
                "kept",
                format!("rules not reloaded: {refused}; {live} stay live"),
                vec![],
                hash,
            );
            self.components.metrics.rule_reload(ReloadResult::Unsafe);
            tracing::error!("{}", report.message);
            return (report, true);
        }
        let (hash, loaded) = RuleSet::load_hashed(&path);
        let (result, report) = match loaded {
            Ok(Some(rules)) => {
                let n = rules.len();
                self.swap(rules, hash.clone());
                let report = self.report(
                    true,
                    "file",
                    format!("{n} rules loaded from {shown}"),
                    vec![],
                    hash,
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
                    None,
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
                    hash,
                );
                (result, report)
            }
        };
        self.components.metrics.rule_reload(result);
        if report.ok {
            tracing::info!(rules = report.rules, "{}", report.message);
        } else {
            tracing::warn!("{}", report.message);
        }
        (report, true)
    }

    /// Indexes `rules` outside the engine's lock, then swaps them in at once: an evaluation
    /// in flight finishes with the rules it started with.
    fn swap(&self, rules: RuleSet, hash: Option<String>) {
        let prepared = Prepared::new(Arc::new(rules));
        self.engine.lock().unwrap().swap(prepared);
        *self.rules.loaded_at.lock().unwrap() = Some(Utc::now());
        *self.rules.loaded_hash.lock().unwrap() = hash;
    }

    /// "the 5 rules loaded at 10:42:07" (UTC): the live rules and when they were really
    /// loaded, for a reload that keeps them.
    fn live_rules_phrase(&self) -> String {
        let n = self.rules().len();
        let rules = if n == 1 { "rule" } else { "rules" };
        match *self.rules.loaded_at.lock().unwrap() {
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
        hash: Option<String>,
    ) -> ReloadReport {
        let report = ReloadReport {
            ok,
            source: source.to_string(),
            rules: self.rules().len(),
            at: Utc::now(),
            message,
            errors,
            hash,
            running: self.rules.loaded_hash.lock().unwrap().clone(),
        };
        *self.rules.last_reload.lock().unwrap() = Some(report.clone());
        report
    }

    /// Pauses or resumes rule evaluation (persisted in `state.json`).
    pub fn set_paused(&self, paused: bool) {
        self.engine.lock().unwrap().set_paused(paused);
        self.components.state.set_paused(paused);
        self.components.state.flush();
        tracing::info!(
            paused,
            "rule evaluation {}",
            if paused { "paused" } else { "resumed" }
        );
    }

    /// Whether rule evaluation is paused.
    fn is_paused(&self) -> bool {
        self.engine.lock().unwrap().is_paused()
    }

    // ---- writing -------------------------------------------------------------------------------

    /// Appends messages (durable under the fsync policy before it returns), counted as from
    /// `source`.
    pub async fn append(
        &self,
        messages: Vec<NewMessage>,
        source: &str,
    ) -> Result<Vec<Appended>, InboxError> {
        let result = self.components.inbox.append_batch(messages).await;
        // Messages kept in memory only are in the inbox all the same: counted. A repeat of a
        // recent id is acknowledged but not stored: not counted.
        if let Ok(appended) | Err(InboxError::NotDurable { appended, .. }) = &result {
            let stored = appended.iter().filter(|a| !a.duplicate).count() as u64;
            if stored > 0 {
                self.components.metrics.ingested(source, stored);
            }
        }
        result
    }

    /// An action id that no rule's action will take: actions that do not come from the
    /// engine (work taken in, relayed permission requests) share its one id space, so that
    /// `switchboard confirm ID` means one thing.
    pub fn next_action_id(&self) -> ActionId {
        let mut engine = self.engine.lock().unwrap();
        let id = engine.next_action_id();
        engine.set_next_action_id(id + 1);
        id
    }

    /// Everything the core counts and holds.
    pub fn stats(&self) -> CoreStats {
        CoreStats {
            inbox: self.components.inbox.stats(),
            paused: self.is_paused(),
            rules_loaded: self.rules().len(),
            last_reload: self.rules.last_reload.lock().unwrap().clone(),
            evaluated: self.components.state.evaluated(),
            delivery: self.components.lifecycle.stats(),
            wait_calls_in_flight: self
                .components
                .metrics
                .wait_calls_in_flight
                .load(Ordering::Relaxed),
            pending_confirms: self.components.lifecycle.pending_summary(),
            hooks: self.components.duty.stats(Utc::now()),
        }
    }

    // ---- the tasks -----------------------------------------------------------------------------

    /// The dispatcher: evaluates committed messages after `mark`, in seq order, in batches,
    /// and offers the actions with the new mark to the lifecycle (one journal write per batch
    /// that made actions; marks alone share a write).
    /// While the actions journal fails it waits for its batch to be written, so it never runs
    /// ahead of what is on disk.
    fn spawn_dispatcher(self: &Arc<Core>, mark: Seq) {
        let core = self.clone();
        self.tasks.spawn(async move {
            let mut committed = core.components.inbox.committed();
            let mut evaluated = mark;
            let mut backoff = Backoff::new(UNREADABLE_BACKOFF_MIN, UNREADABLE_BACKOFF_MAX);
            loop {
                let visible = committed.borrow_and_update();
                let batch = core.components.inbox.read_after(evaluated, DISPATCH_BATCH).await;
                if let Some(last) = batch.last() {
                    let now = Utc::now();
                    let mut actions = Vec::new();
                    for msg in &batch {
                        let eval = core.engine.lock().unwrap().evaluate(msg, now);
                        for s in &eval.suppressed {
                            core.components.metrics.suppressed(&s.rule, s.reason);
                        }
                        for action in eval.actions {
                            core.components.metrics.action(&action.rule, action.mode);
                            actions.push((action, msg.clone()));
                        }
                    }
                    evaluated = last.seq;
                    // Waits while the actions journal fails (see `Lifecycle::offer`).
                    tokio::select! {
                        _ = core.shutdown.cancelled() => break,
                        _ = core.components.lifecycle.offer(actions, Some(evaluated), now) => {}
                    }
                    backoff.reset();
                    continue;
                }
                if evaluated < visible {
                    // Committed messages that cannot be read now (the journal behind the ring
                    // fails to read): wait for it with backoff, never spin.
                    if backoff.is_reset() {
                        tracing::warn!(
                            evaluated,
                            "messages after the evaluation mark cannot be read; retrying with backoff"
                        );
                    }
                    if !backoff.sleep(&core.shutdown).await {
                        break;
                    }
                    continue;
                }
                tokio::select! {
                    _ = core.shutdown.cancelled() => break,
                    changed = committed.changed() => if changed.is_err() { break },
                }
            }
            // After the last evaluation, for the stop's final save of `state.json`.
            core.save_limits(&mut 0);
        });
    }

    /// Puts back the rate-limit and dedup memory saved in `state.json`; after the boot load,
    /// so that it goes to the rules of the same name.
    fn restore_limits(&self) {
        let saved = self.components.state.snapshot().limits;
        if saved.is_null() {
            return;
        }
        match serde_json::from_value(saved) {
            Ok(snapshot) => {
                let rules = self
                    .engine
                    .lock()
                    .unwrap()
                    .restore_limits(snapshot, Utc::now());
                tracing::info!(rules, "rate limits and dedup windows restored");
            }
            Err(e) => {
                tracing::warn!(cause = %e, "state.json: `limits` unreadable; rate limits and dedup windows start empty")
            }
        }
    }

    /// Hands the engine's memory to `state.json` when it changed since version `saved`.
    fn save_limits(&self, saved: &mut u64) {
        let changed = self
            .engine
            .lock()
            .unwrap()
            .limits_snapshot_since(saved, Utc::now());
        if let Some(snapshot) = changed {
            self.components
                .state
                .set_limits(serde_json::to_value(snapshot).unwrap_or_default());
        }
    }

    /// Once a second, the engine's memory to `state.json` (whose flusher writes it).
    fn spawn_limits_saver(self: &Arc<Core>) {
        let core = self.clone();
        self.tasks.spawn(async move {
            let (mut saved, mut tick) =
                (0, tokio::time::interval(std::time::Duration::from_secs(1)));
            loop {
                tokio::select! {
                    _ = core.shutdown.cancelled() => break,
                    _ = tick.tick() => core.save_limits(&mut saved),
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
    fn spawn_resolver(self: &Arc<Core>, mark: Seq) {
        let core = self.clone();
        self.tasks.spawn(async move {
            let mut evaluated = core.components.lifecycle.evaluated();
            let mut done = mark;
            loop {
                let upto = *evaluated.borrow_and_update();
                core.components.state.set_evaluated(upto);
                while done < upto {
                    let rules = core.rules();
                    if !crate::engine::resolve::any(&rules) || core.is_paused() {
                        done = upto;
                        break;
                    }
                    // Every confirm a message up to `upto` made is visible by now: with none
                    // pending, there is nothing to read.
                    let mut pending = core.components.lifecycle.pending_confirms();
                    if pending.is_empty() {
                        done = upto;
                        break;
                    }
                    let batch = core.components.inbox.read_after(done, DISPATCH_BATCH).await;
                    for msg in batch.iter().take_while(|m| m.seq <= upto) {
                        if pending.is_empty() {
                            break;
                        }
                        let ids = crate::engine::resolve::resolved_by(&rules, msg, &pending);
                        if !ids.is_empty() {
                            core.components.lifecycle.resolve(&ids, msg.seq, Utc::now());
                            pending.retain(|i| !ids.contains(&i.action_id));
                        }
                    }
                    done = batch.last().map_or(upto, |m| m.seq.min(upto));
                }
                tokio::select! {
                    _ = core.shutdown.cancelled() => break,
                    changed = evaluated.changed() => if changed.is_err() { break },
                }
            }
        });
    }

    fn spawn_expiry(self: &Arc<Core>) {
        let lifecycle = self.components.lifecycle.clone();
        let token = self.shutdown.clone();
        self.tasks
            .spawn(async move { lifecycle.run_expiry(token).await });
    }

    fn spawn_state_flusher(self: &Arc<Core>) {
        let state = self.components.state.clone();
        let token = self.shutdown.clone();
        self.tasks
            .spawn(async move { state.run_flusher(token).await });
    }
}

/// How many messages the dispatcher evaluates per journal write.
const DISPATCH_BATCH: usize = 256;

/// The dispatcher's first and longest wait for messages it cannot read yet.
const UNREADABLE_BACKOFF_MIN: Duration = Duration::from_millis(100);
const UNREADABLE_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The consumers `state.json` keeps cursors for, remembered by the lifecycle (oldest cursor
/// first) so that they count towards `actions.maxConsumers`: past the maximum the oldest are
/// forgotten with their cursors, and so is a name no consumer may have (a file written before
/// names were bounded).
fn remember_consumers(state: &StateStore, lifecycle: &Lifecycle) {
    let mut cursors = state.cursors();
    cursors.retain(|(name, _)| {
        let ok = consumer_name_problem(name).is_none();
        if !ok {
            state.remove_cursor(name);
        }
        ok
    });
    cursors.sort_by_key(|(_, seq)| *seq);
    lifecycle.remember_consumers(cursors.iter().map(|(name, seq)| (name.as_str(), *seq)));
    for gone in lifecycle.take_forgotten() {
        state.remove_cursor(&gone);
    }
}
