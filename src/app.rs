//! The core: the running switchboard behind the operations.
//!
//! [`Core`] owns the inbox, the consumer state, the live rules and the engine, the dispatcher
//! and the action lifecycle. Its fields are private: nothing outside reaches the inbox or the
//! lifecycle. Every front end (MCP sessions, the control socket, the CLI, HTTP ingest, upstream
//! servers, the exec runner) goes through the operations in [`crate::control`], which call the
//! methods here; each method is one capability of the core at the grain of an operation.
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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::actions::duty::{Duty, DutyView, HookStats};
use crate::actions::journal::ActionLog;
use crate::actions::lifecycle::{LifecycleStats, PendingConfirm};
use crate::actions::writer::JournalWriter;
use crate::actions::{
    ActionId, ActionSettings, ActionState, ConfirmError, Event, ExecReport, Item, Lifecycle,
};
use crate::engine::{Engine, Prepared};
use crate::home::Home;
use crate::inbox::InboxSettings;
use crate::inbox::{Appended, Inbox, InboxError, InboxStats, SeqReceiver, StateStore};
use crate::message::{Message, NewMessage, Seq};
use crate::metrics::{Metrics, ReloadResult, SuppressionWatch};
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

/// Who opens a session: one per MCP session (a host window).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SessionSpec {
    /// `clientInfo.name` of the host (`mcp` when it gave none).
    pub client: String,
    /// `serve --consumer NAME`: the consumer the session reads as; it keeps its cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub named: Option<String>,
    /// The consumer name of this session before the daemon restarted, to keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
}

/// A consumer's position.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConsumerView {
    /// Its name.
    pub name: String,
    /// Its cursor: the last seq it has seen.
    pub cursor: Seq,
    /// Messages after the cursor.
    pub unread: u64,
    /// Items queued for it.
    pub queued: usize,
}

/// Messages read for a consumer, with its position after the read.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Read {
    /// Oldest first.
    pub messages: Vec<Message>,
    /// The consumer's cursor after the read.
    pub cursor: Seq,
    /// Messages after the cursor.
    pub unread: u64,
    /// The newest committed seq.
    pub last_seq: Seq,
}

/// The shared handle on the running core.
pub struct Core {
    home: Option<Home>,
    settings: CoreSettings,
    inbox: Inbox,
    state: StateStore,
    lifecycle: Lifecycle,
    metrics: Metrics,
    /// On-duty mode and the stop hooks' blocks in a row.
    duty: Duty,
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
            duty,
            home,
            settings,
            inbox,
            state,
            lifecycle,
            metrics: Metrics::default(),
            engine: Mutex::new(engine),
            rules: RulesState::default(),
            shutdown,
            tasks,
        })
    }

    /// The home, when running on disk.
    pub fn home(&self) -> Option<&Home> {
        self.home.as_ref()
    }

    /// Fires when the core shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// The server-side cap of a wait.
    pub fn max_wait(&self) -> Duration {
        self.settings.max_wait
    }

    /// The counters `/metrics` renders.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Flushes the journals and the state, and closes the inbox (the last step of a shutdown,
    /// once every task has stopped).
    pub async fn close(&self) {
        self.lifecycle.flush().await;
        self.inbox.close().await;
        self.state.flush();
    }

    // ---- rules ------------------------------------------------------------------------------

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
        let core = self.clone();
        match tokio::task::spawn_blocking(move || core.reload_rules_blocking()).await {
            Ok(report) => report,
            Err(e) => self.report(
                false,
                "kept",
                format!("rules not reloaded: the reload failed: {e}; the live rules stay"),
                vec![],
            ),
        }
    }

    /// [`Core::reload_rules`] on the calling thread.
    fn reload_rules_blocking(&self) -> ReloadReport {
        let _in_order = self.rules.reloading.lock().unwrap();
        let Some(home) = &self.home else {
            return self.report(true, "builtin", "no home: rules are fixed".into(), vec![]);
        };
        let path = home.triggers();
        let shown = path.display().to_string();
        let live = self.live_rules_phrase();
        // A file that another user could have changed is not obeyed.
        if let Err(refused) = home.check_file(&path) {
            let report = self.report(
                false,
                "kept",
                format!("rules not reloaded: {refused}; {live} stay live"),
                vec![],
            );
            self.metrics.rule_reload(ReloadResult::Unsafe);
            tracing::error!("{}", report.message);
            return report;
        }
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
        *self.rules.loaded_at.lock().unwrap() = Some(Utc::now());
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
    ) -> ReloadReport {
        let report = ReloadReport {
            ok,
            source: source.to_string(),
            rules: self.rules().len(),
            at: Utc::now(),
            message,
            errors,
        };
        *self.rules.last_reload.lock().unwrap() = Some(report.clone());
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

    // ---- sessions and consumers --------------------------------------------------------------

    /// Opens a session; returns its id and the consumer it reads as.
    pub fn open_session(&self, spec: &SessionSpec) -> (u64, String) {
        if let Some(name) = spec.named.as_deref().filter(|n| !n.trim().is_empty()) {
            let cursor = self.state.cursor(name);
            let id = self.lifecycle.open_session(name, true, cursor);
            return (id, name.to_string());
        }
        // A front end re-attaching after a daemon restart keeps its consumer name, unless a
        // live session took it meanwhile.
        if let Some(old) = spec.resume.as_deref()
            && !self.lifecycle.consumer_in_use(old)
        {
            let cursor = self.state.cursor(old).unwrap_or(self.inbox.last_seq());
            let id = self.lifecycle.open_session(old, false, Some(cursor));
            self.state.set_cursor(old, cursor);
            return (id, old.to_string());
        }
        let prefix = spec.client.trim();
        let prefix = if prefix.is_empty() { "mcp" } else { prefix };
        let id = self.lifecycle.open_session_numbered(prefix);
        let name = format!("{prefix}#{id}");
        // Its cursor starts at its start: what came before is not unread for it.
        self.state.set_cursor(&name, self.inbox.last_seq());
        (id, name)
    }

    /// Closes a session: its claims go back to the queue, its own consumer is forgotten.
    pub fn close_session(&self, session: u64) {
        if let Some(own) = self.lifecycle.close_session(session, Utc::now()) {
            self.state.remove_cursor(&own);
        }
    }

    /// Makes sure a named consumer exists (a tool's `consumer` argument).
    pub fn ensure_consumer(&self, name: &str) {
        let cursor = self.state.cursor(name);
        self.lifecycle.ensure_consumer(name, cursor);
    }

    /// A consumer's position.
    pub fn consumer_view(&self, name: &str) -> ConsumerView {
        let last_seq = self.inbox.last_seq();
        ConsumerView {
            name: name.to_string(),
            cursor: self.state.cursor_or_boot(name),
            unread: self.state.unread(name, last_seq),
            queued: self.lifecycle.queued_for(name),
        }
    }

    /// Takes, or waits up to `timeout` (capped) for, `consumer`'s items; work among them is
    /// claimed by `session` until settled. Returns empty, having taken nothing, once `cancel`
    /// fires. The consumer's cursor moves past the items' messages.
    pub async fn wait(
        &self,
        session: u64,
        consumer: &str,
        max: usize,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> (Vec<Item>, ConsumerView) {
        struct InFlight<'a>(&'a AtomicU64);
        impl Drop for InFlight<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let timeout = timeout.min(self.settings.max_wait);
        let max = max.clamp(1, 100);
        let in_flight = &self.metrics.wait_calls_in_flight;
        in_flight.fetch_add(1, Ordering::Relaxed);
        let _in_flight = InFlight(in_flight);
        let items = self
            .lifecycle
            .wait(session, consumer, max, timeout, cancel)
            .await;
        if let Some(seq) = items.iter().map(|i| i.message.seq).max() {
            self.state.set_cursor(consumer, seq);
        }
        (items, self.consumer_view(consumer))
    }

    /// Whether `session` pushes queued work `id` (see [`Lifecycle::push_by`]).
    pub fn push_by(&self, id: ActionId, session: u64) -> bool {
        self.lifecycle.push_by(id, session)
    }

    /// Whether session `session` may put confirm `id` to its user in an elicitation form
    /// (`ask`), or that it stopped asking.
    pub fn elicit(&self, id: ActionId, session: u64, ask: bool) -> bool {
        self.lifecycle.elicit(id, session, ask)
    }

    /// Settles claims: delivered once the result carrying them was sent, else released with
    /// `why` to the front of the queue.
    pub fn settle(&self, claims: &[ActionId], delivered: bool, why: &str) {
        self.lifecycle.settle(claims, delivered, why);
    }

    // ---- reading -------------------------------------------------------------------------------

    /// Up to `limit` messages after `consumer`'s cursor (or after `since`), optionally of one
    /// channel, moving the cursor past them when `mark_read`.
    pub async fn pull(
        &self,
        consumer: &str,
        since: Option<Seq>,
        limit: usize,
        channel: Option<&str>,
        mark_read: bool,
    ) -> Read {
        let after = since.unwrap_or_else(|| self.state.cursor_or_boot(consumer));
        let limit = limit.clamp(1, 1000);
        let out = self.inbox.read_after_matching(after, limit, channel).await;
        if mark_read && let Some(last) = out.last() {
            self.state.set_cursor(consumer, last.seq);
        }
        let last_seq = self.inbox.last_seq();
        Read {
            messages: out.iter().map(|m| (**m).clone()).collect(),
            cursor: self.state.cursor_or_boot(consumer),
            unread: self.state.unread(consumer, last_seq),
            last_seq,
        }
    }

    /// The newest messages, optionally of one channel, newest last; and the newest seq.
    pub fn recent(&self, channel: Option<&str>, limit: usize) -> (Vec<Message>, Seq) {
        let messages = self.inbox.recent(channel, limit.clamp(1, 1000));
        (
            messages.iter().map(|m| (**m).clone()).collect(),
            self.inbox.last_seq(),
        )
    }

    /// Marks everything read for `consumer`.
    pub fn ack(&self, consumer: &str) -> ConsumerView {
        self.state.set_cursor(consumer, self.inbox.last_seq());
        self.consumer_view(consumer)
    }

    /// One stored message by seq (from the ring, or the journal behind it); and the newest seq.
    pub async fn message(&self, seq: Seq) -> (Option<Message>, Seq) {
        let found = match self.inbox.get(seq) {
            Some(m) => Some(m),
            None => self
                .inbox
                .read_after(seq.saturating_sub(1), 1)
                .await
                .into_iter()
                .find(|m| m.seq == seq),
        };
        (found.map(|m| (*m).clone()), self.inbox.last_seq())
    }

    /// Messages committed after `after`, oldest first (what `watch` follows).
    pub async fn read_after(&self, after: Seq, limit: usize) -> Vec<Message> {
        self.inbox
            .read_after(after, limit)
            .await
            .iter()
            .map(|m| (**m).clone())
            .collect()
    }

    // ---- writing -------------------------------------------------------------------------------

    /// Appends messages (durable under the fsync policy before it returns), counted as from
    /// `source`.
    pub async fn append(
        &self,
        messages: Vec<NewMessage>,
        source: &str,
    ) -> Result<Vec<Appended>, InboxError> {
        let result = self.inbox.append_batch(messages).await;
        // Messages kept in memory only are in the inbox all the same: counted. A repeat of a
        // recent id is acknowledged but not stored: not counted.
        if let Ok(appended) | Err(InboxError::NotDurable { appended, .. }) = &result {
            let stored = appended.iter().filter(|a| !a.duplicate).count() as u64;
            if stored > 0 {
                self.metrics.ingested(source, stored);
            }
        }
        result
    }

    /// The highest seq of the inbox durable under its fsync policy.
    pub fn durable(&self) -> Seq {
        self.inbox.durable()
    }

    /// Checks `messages` against the inbox's limits as an append does, storing nothing: the
    /// first one over a limit, as the append would refuse it.
    pub fn check_limits(&self, messages: &[NewMessage]) -> Result<(), InboxError> {
        let batch = messages.len() > 1;
        for (index, m) in messages.iter().enumerate() {
            self.settings
                .inbox
                .limits
                .check(m)
                .map_err(|error| InboxError::TooLarge {
                    index,
                    batch,
                    error,
                })?;
        }
        Ok(())
    }

    /// Splits `messages` into those within the inbox's limits and, by position, why each of
    /// the others is over one.
    pub fn split_by_limits(
        &self,
        messages: Vec<NewMessage>,
    ) -> (Vec<NewMessage>, Vec<(usize, String)>) {
        let mut fit = Vec::with_capacity(messages.len());
        let mut refused = Vec::new();
        for (index, m) in messages.into_iter().enumerate() {
            match self.settings.inbox.limits.check(&m) {
                Ok(()) => fit.push(m),
                Err(e) => refused.push((index, e.to_string())),
            }
        }
        (fit, refused)
    }

    // ---- confirms ------------------------------------------------------------------------------

    /// Answers a confirm by the path `via`: `Ok(Some(item))` approved, `Ok(None)` denied.
    /// With `claim_for`, the approved item is claimed by that session; without, it is queued
    /// for any session. The answer is on disk before this returns.
    pub async fn confirm(
        &self,
        id: ActionId,
        approve: bool,
        by: &str,
        via: crate::actions::Via,
        claim_for: Option<u64>,
    ) -> Result<Option<Item>, ConfirmError> {
        let item = self
            .lifecycle
            .confirm(id, approve, by, via, claim_for, Utc::now())?;
        self.lifecycle.flush().await;
        Ok(item)
    }

    /// Open confirm requests, oldest first.
    pub fn pending(&self) -> Vec<Item> {
        self.lifecycle.pending_confirms()
    }

    /// The last `limit` confirms closed, oldest first: how each ended.
    pub fn closed_confirms(&self, limit: usize) -> Vec<crate::actions::lifecycle::ClosedConfirm> {
        self.lifecycle.closed_confirms(limit)
    }

    // ---- exec work -----------------------------------------------------------------------------

    /// Waits for exec work and marks it `running`; `None` once `cancel` fires. `on_start` runs
    /// before the `running` event is published.
    pub async fn exec_next(
        &self,
        cancel: &CancellationToken,
        on_start: impl FnOnce(&Item),
    ) -> Option<Item> {
        self.lifecycle.next_exec(cancel, on_start).await
    }

    /// Ends an exec run.
    pub fn exec_finish(
        &self,
        id: ActionId,
        state: ActionState,
        reason: Option<String>,
        report: ExecReport,
    ) {
        self.lifecycle.finish_exec(id, state, reason, report);
    }

    /// Changes each action queue's capacity from now on (a config reload).
    pub fn set_queue_capacity(&self, capacity: usize) -> bool {
        if self.lifecycle.capacity() == capacity {
            return false;
        }
        self.lifecycle.set_capacity(capacity);
        true
    }

    // ---- what it holds -------------------------------------------------------------------------

    /// Every lifecycle transition from now on, and the committed seq.
    pub fn subscribe(&self) -> (broadcast::Receiver<Event>, SeqReceiver) {
        (self.lifecycle.subscribe(), self.inbox.committed())
    }

    /// Suppressions as they happen (for `watch`).
    pub fn suppressions(&self) -> SuppressionWatch {
        self.metrics.suppressions.subscribe()
    }

    /// The newest committed seq.
    pub fn last_seq(&self) -> Seq {
        self.inbox.last_seq()
    }

    /// Everything the core counts and holds.
    pub fn stats(&self) -> CoreStats {
        CoreStats {
            inbox: self.inbox.stats(),
            paused: self.is_paused(),
            rules_loaded: self.rules().len(),
            last_reload: self.rules.last_reload.lock().unwrap().clone(),
            evaluated: self.state.evaluated(),
            delivery: self.lifecycle.stats(),
            wait_calls_in_flight: self.metrics.wait_calls_in_flight.load(Ordering::Relaxed),
            pending_confirms: self.lifecycle.pending_summary(),
            hooks: self.duty.stats(Utc::now()),
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
            let mut committed = core.inbox.committed();
            let mut evaluated = mark;
            let mut backoff = UNREADABLE_BACKOFF_MIN;
            loop {
                let visible = committed.borrow_and_update();
                let batch = core.inbox.read_after(evaluated, DISPATCH_BATCH).await;
                if let Some(last) = batch.last() {
                    let now = Utc::now();
                    let mut actions = Vec::new();
                    for msg in &batch {
                        let eval = core.engine.lock().unwrap().evaluate(msg, now);
                        for s in &eval.suppressed {
                            core.metrics.suppressed(&s.rule, s.reason);
                        }
                        for action in eval.actions {
                            core.metrics.action(&action.rule, action.mode);
                            actions.push((action, msg.clone()));
                        }
                    }
                    evaluated = last.seq;
                    // Waits while the actions journal fails (see `Lifecycle::offer`).
                    tokio::select! {
                        _ = core.shutdown.cancelled() => break,
                        _ = core.lifecycle.offer(actions, Some(evaluated), now) => {}
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
                        _ = core.shutdown.cancelled() => break,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(UNREADABLE_BACKOFF_MAX);
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
        let saved = self.state.snapshot().limits;
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
            self.state
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
            let mut evaluated = core.lifecycle.evaluated();
            let mut done = mark;
            loop {
                let upto = *evaluated.borrow_and_update();
                core.state.set_evaluated(upto);
                while done < upto {
                    let rules = core.rules();
                    if !crate::engine::resolve::any(&rules) || core.is_paused() {
                        done = upto;
                        break;
                    }
                    // Every confirm a message up to `upto` made is visible by now: with none
                    // pending, there is nothing to read.
                    let mut pending = core.lifecycle.pending_confirms();
                    if pending.is_empty() {
                        done = upto;
                        break;
                    }
                    let batch = core.inbox.read_after(done, DISPATCH_BATCH).await;
                    for msg in batch.iter().take_while(|m| m.seq <= upto) {
                        if pending.is_empty() {
                            break;
                        }
                        let ids = crate::engine::resolve::resolved_by(&rules, msg, &pending);
                        if !ids.is_empty() {
                            core.lifecycle.resolve(&ids, msg.seq, Utc::now());
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
        let lifecycle = self.lifecycle.clone();
        let token = self.shutdown.clone();
        self.tasks
            .spawn(async move { lifecycle.run_expiry(token).await });
    }

    fn spawn_state_flusher(self: &Arc<Core>) {
        let state = self.state.clone();
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

// ---- stop hooks ------------------------------------------------------------------------------

impl Core {
    /// On-duty mode and the stop hooks' blocks in a row.
    pub fn duty(&self) -> &Duty {
        &self.duty
    }

    /// Goes on or off duty (kept in the home).
    pub fn set_duty(&self, on: bool, until: Option<DateTime<Utc>>) -> std::io::Result<DutyView> {
        self.duty.set(on, until)
    }

    /// Claims the oldest queued work for a stop hook reading as `consumer`, by a session of its
    /// own (see [`Lifecycle::claim_for_hook`]); `None` when no work waits.
    pub fn hook_claim(&self, consumer: &str) -> Option<(u64, Item)> {
        self.lifecycle.claim_for_hook(consumer)
    }

    /// The open confirm requests a stop hook reading as `consumer` was not told of yet and
    /// `shown` accepts; told from now on.
    pub fn hook_confirms(&self, consumer: &str, shown: impl Fn(&Item) -> bool) -> Vec<Item> {
        self.lifecycle.unseen_confirms(consumer, shown)
    }
}

/// Work shared with other instances (see `actions::lifecycle::shared`): what the shared
/// queue's component asks of the lifecycle, through its operations.
impl Core {
    /// From now on the work `shareable` accepts goes to the shared queue.
    pub fn share_work(&self, shareable: crate::actions::Shareable) {
        self.lifecycle.share_work(shareable);
    }

    /// The next piece of work to publish to the shared queue; `None` once `cancel` fires.
    pub async fn next_shared(&self, cancel: &CancellationToken) -> Option<Item> {
        self.lifecycle.next_shared(cancel).await
    }

    /// Work `id` left for the shared queue (`reason`: how).
    pub fn shared(&self, id: ActionId, reason: &str) {
        self.lifecycle.shared(id, reason);
    }

    /// Waits until a session waits for work this instance does not have.
    pub async fn work_demand(&self, cancel: &CancellationToken) -> bool {
        self.lifecycle.work_demand(cancel).await
    }

    /// Takes in an item pulled from the shared queue as local work, under a fresh action id.
    pub fn take_in(&self, item: Item, key: &str) -> Item {
        let id = self.next_action_id();
        self.lifecycle.take_in(item, id, key, Utc::now())
    }

    /// Gives back taken-in work `id` no session claimed; false when claimed or gone.
    pub fn withdraw(&self, id: ActionId) -> bool {
        self.lifecycle.withdraw(id)
    }

    /// An action id that no rule's action will take: actions that do not come from the
    /// engine (work taken in, relayed permission requests) share its one id space, so that
    /// `switchboard confirm ID` means one thing.
    fn next_action_id(&self) -> ActionId {
        let mut engine = self.engine.lock().unwrap();
        let id = engine.next_action_id();
        engine.set_next_action_id(id + 1);
        id
    }
}

// ---- relayed permission requests ---------------------------------------------------------------

impl Core {
    /// Queues `request`, asked by the host of `session`, as a confirm request for people (see
    /// [`Lifecycle::relay_permission`]), expiring after `timeout`; returns it once visible. Its
    /// id is the next action id.
    pub async fn relay_permission(
        &self,
        session: u64,
        request: &crate::actions::lifecycle::PermissionRequest,
        timeout: Duration,
    ) -> Result<Item, crate::actions::lifecycle::RelayError> {
        let id = self.next_action_id();
        let item = self
            .lifecycle
            .relay_permission(session, id, request, timeout, Utc::now())
            .await?;
        tracing::info!(
            action_id = id,
            rule = %item.rule,
            from = %item.message.server,
            request_id = %request.request_id,
            "permission request relayed by the host"
        );
        Ok(item)
    }

    /// A host ran `tool` with `input`: the open relayed request it was allowed for in the
    /// host's own dialog, closed so, once on disk; `None` when none fits.
    pub async fn allowed_in_host(
        &self,
        tool: &str,
        input: &serde_json::Value,
    ) -> Option<crate::actions::lifecycle::ClosedConfirm> {
        let closed = self.lifecycle.allowed_in_host(tool, input, Utc::now())?;
        self.lifecycle.flush().await;
        Some(closed)
    }
}
