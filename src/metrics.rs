//! Process counters, rendered as Prometheus text for `GET /metrics`.
//!
//! The core counts through the methods here (ingest by source, actions by rule and mode,
//! suppressions by reason: `dedup`, `rate_limited`, and `inactive` / `muted` for a rule its
//! time intervals held back; rules reloads by result); the lifecycle's counters and the gauges
//! (queue depths, ring depth) are read at render time. The daemon's other parts (HTTP ingest,
//! upstreams, exec) render their own families beside these.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::actions::Mode;
use crate::engine::SuppressReason;

/// Counters shared by every part of the process.
#[derive(Debug, Default)]
pub struct Metrics {
    /// `wait_for_inbound_message` calls in flight.
    pub wait_calls_in_flight: AtomicU64,
    ingested: Mutex<BTreeMap<String, u64>>,
    actions: Mutex<BTreeMap<(String, Mode), u64>>,
    suppressed: Mutex<BTreeMap<(String, SuppressReason), u64>>,
    reloads: Mutex<BTreeMap<ReloadResult, u64>>,
    /// Suppressions as they happen, for `watch`.
    pub suppressions: SuppressionTap,
}

/// One suppression as `watch` shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Suppression {
    /// The rule that matched but did not fire.
    pub rule: String,
    /// `dedup`, `rate_limited`, `inactive` or `muted`.
    pub reason: String,
}

/// Suppressions published to whoever watches. With no watcher (the usual case) a suppression
/// costs one atomic load here, so the dispatcher pays nothing for `watch`.
#[derive(Debug)]
pub struct SuppressionTap {
    watchers: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    tx: tokio::sync::broadcast::Sender<Suppression>,
}

impl Default for SuppressionTap {
    fn default() -> Self {
        SuppressionTap {
            watchers: Default::default(),
            tx: tokio::sync::broadcast::channel(1024).0,
        }
    }
}

/// A subscription to [`SuppressionTap`]; publishing stops when the last one is dropped.
#[derive(Debug)]
pub struct SuppressionWatch {
    watchers: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// The suppressions from now on.
    pub rx: tokio::sync::broadcast::Receiver<Suppression>,
}

impl Drop for SuppressionWatch {
    fn drop(&mut self) {
        self.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

impl SuppressionTap {
    /// Every suppression from now on, while the returned watch lives.
    pub fn subscribe(&self) -> SuppressionWatch {
        self.watchers.fetch_add(1, Ordering::Relaxed);
        SuppressionWatch {
            watchers: self.watchers.clone(),
            rx: self.tx.subscribe(),
        }
    }

    fn publish(&self, rule: &str, reason: SuppressReason) {
        if self.watchers.load(Ordering::Relaxed) > 0 {
            let _ = self.tx.send(Suppression {
                rule: rule.to_string(),
                reason: reason.as_str().to_string(),
            });
        }
    }
}

/// How a rules reload (SIGHUP, `rules reload`, the file watcher; not the boot load) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReloadResult {
    /// The new rules are live.
    Ok,
    /// The file is invalid: the live rules stay.
    Invalid,
    /// The file is gone: the live rules stay.
    Missing,
    /// The file cannot be read: the live rules stay.
    Unreadable,
}

impl ReloadResult {
    /// Every result, in the order `/metrics` lists them.
    pub const ALL: [ReloadResult; 4] = [
        ReloadResult::Ok,
        ReloadResult::Invalid,
        ReloadResult::Missing,
        ReloadResult::Unreadable,
    ];

    /// The `result` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadResult::Ok => "ok",
            ReloadResult::Invalid => "invalid",
            ReloadResult::Missing => "missing",
            ReloadResult::Unreadable => "unreadable",
        }
    }
}

/// A value read from a running part at render time: `(name, help, value)`.
pub type Reading<'a> = (&'a str, &'a str, f64);

impl Metrics {
    /// `n` messages accepted from `source` (`alertmanager`, `github`, `http`, `cli`, an upstream name).
    pub fn ingested(&self, source: &str, n: u64) {
        *self
            .ingested
            .lock()
            .unwrap()
            .entry(source.to_string())
            .or_default() += n;
    }

    /// A rule fired.
    pub fn action(&self, rule: &str, mode: Mode) {
        *self
            .actions
            .lock()
            .unwrap()
            .entry((rule.to_string(), mode))
            .or_default() += 1;
    }

    /// A matching rule was suppressed.
    pub fn suppressed(&self, rule: &str, reason: SuppressReason) {
        self.suppressions.publish(rule, reason);
        *self
            .suppressed
            .lock()
            .unwrap()
            .entry((rule.to_string(), reason))
            .or_default() += 1;
    }

    /// A rules reload ended with `result`.
    pub fn rule_reload(&self, result: ReloadResult) {
        *self.reloads.lock().unwrap().entry(result).or_default() += 1;
    }

    /// Reloads that ended with `result` so far.
    pub fn rule_reloads(&self, result: ReloadResult) -> u64 {
        self.reloads
            .lock()
            .unwrap()
            .get(&result)
            .copied()
            .unwrap_or(0)
    }

    /// Prometheus text exposition of every counter and gauge of the core: these counters, the
    /// lifecycle's (`delivery`), and readings of the inbox and the queues taken now.
    pub fn render(
        &self,
        inbox: &crate::inbox::InboxStats,
        delivery: &crate::actions::lifecycle::LifecycleStats,
    ) -> String {
        let counters = [
            (
                "switchboard_journal_write_errors_total",
                "Failed inbox journal writes since start.",
                inbox.journal_errors as f64,
            ),
            (
                "switchboard_duplicates_total",
                "Messages acknowledged as a repeat of a recent source id and not stored again.",
                inbox.duplicates as f64,
            ),
        ];
        let gauges = [
            (
                "switchboard_ring_depth",
                "Messages held in the in-memory ring.",
                inbox.ring_depth as f64,
            ),
            (
                "switchboard_last_seq",
                "Highest committed message seq.",
                inbox.last_seq as f64,
            ),
            (
                "switchboard_journal_failing",
                "1 while inbox journal writes fail, else 0.",
                f64::from(u8::from(inbox.journal_status.starts_with("failing"))),
            ),
            (
                "switchboard_queue_nudges",
                "Nudges no consumer has seen yet.",
                delivery.nudges_undelivered as f64,
            ),
            (
                "switchboard_queue_pending_confirms",
                "Confirms waiting for an answer.",
                delivery.pending_confirms as f64,
            ),
            (
                "switchboard_queue_work",
                "Auto prompts and approved confirms waiting for the agent.",
                delivery.queued_work as f64,
            ),
            (
                "switchboard_queue_claimed_work",
                "Work claimed by a wait whose result is not yet sent.",
                delivery.claimed_work as f64,
            ),
            (
                "switchboard_sessions",
                "MCP sessions connected now.",
                delivery.sessions as f64,
            ),
            (
                "switchboard_exec_running",
                "Exec runs in flight.",
                delivery.exec_running as f64,
            ),
            (
                "switchboard_exec_queued",
                "Exec work waiting for a slot.",
                delivery.exec_queued as f64,
            ),
        ];
        self.render_with(&delivery.counters, &counters, &gauges)
    }

    /// Prometheus text exposition of the counters, followed by `counters` and `gauges` read
    /// from the running parts (journal write errors, duplicates; ring and queue depths).
    /// `lifecycle` are the action lifecycle's own counters (drops, transitions), read as they
    /// are so that `/metrics` and `inbox_stats` never disagree.
    pub fn render_with(
        &self,
        lifecycle: &crate::actions::lifecycle::Counters,
        counters: &[Reading],
        gauges: &[Reading],
    ) -> String {
        let mut out = String::new();
        family(
            &mut out,
            "switchboard_messages_ingested_total",
            "counter",
            "Messages accepted, by source.",
        );
        for (source, n) in self.ingested.lock().unwrap().iter() {
            let _ = writeln!(
                out,
                "switchboard_messages_ingested_total{{source=\"{}\"}} {n}",
                escape(source)
            );
        }
        family(
            &mut out,
            "switchboard_actions_total",
            "counter",
            "Actions fired, by rule and mode.",
        );
        for ((rule, mode), n) in self.actions.lock().unwrap().iter() {
            let _ = writeln!(
                out,
                "switchboard_actions_total{{rule=\"{}\",mode=\"{mode}\"}} {n}",
                escape(rule)
            );
        }
        family(
            &mut out,
            "switchboard_suppressed_total",
            "counter",
            "Matching rules that did not fire, by reason.",
        );
        for ((rule, reason), n) in self.suppressed.lock().unwrap().iter() {
            let _ = writeln!(
                out,
                "switchboard_suppressed_total{{rule=\"{}\",reason=\"{}\"}} {n}",
                escape(rule),
                reason.as_str()
            );
        }
        family(
            &mut out,
            "switchboard_actions_dropped_total",
            "counter",
            "Actions refused by a full queue, by mode.",
        );
        for (mode, n) in &lifecycle.dropped {
            let _ = writeln!(
                out,
                "switchboard_actions_dropped_total{{mode=\"{mode}\"}} {n}"
            );
        }
        family(
            &mut out,
            "switchboard_action_transitions_total",
            "counter",
            "Action lifecycle transitions, by the state entered.",
        );
        let transitions = [
            ("claimed", lifecycle.claimed),
            ("delivered", lifecycle.delivered),
            ("released", lifecycle.released),
            ("approved", lifecycle.approved),
            ("denied", lifecycle.denied),
            ("expired", lifecycle.expired),
            ("resolved", lifecycle.resolved),
            ("running", lifecycle.running),
            ("succeeded", lifecycle.succeeded),
            ("failed", lifecycle.failed),
            ("cancelled", lifecycle.cancelled),
        ];
        for (state, n) in transitions {
            let _ = writeln!(
                out,
                "switchboard_action_transitions_total{{state=\"{state}\"}} {n}"
            );
        }
        family(
            &mut out,
            "switchboard_exec_failures_total",
            "counter",
            "Exec runs that did not succeed, by kind.",
        );
        for kind in crate::actions::ExecFailure::ALL {
            let n = lifecycle.exec_failures.get(&kind).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "switchboard_exec_failures_total{{kind=\"{kind}\"}} {n}"
            );
        }
        family(
            &mut out,
            "switchboard_wait_calls_in_flight",
            "gauge",
            "wait_for_inbound_message calls waiting now.",
        );
        let _ = writeln!(
            out,
            "switchboard_wait_calls_in_flight {}",
            self.wait_calls_in_flight.load(Ordering::Relaxed)
        );
        family(
            &mut out,
            "switchboard_rule_reloads_total",
            "counter",
            "Rules reloads since start (SIGHUP, `rules reload`, file watcher), by result.",
        );
        for result in ReloadResult::ALL {
            let _ = writeln!(
                out,
                "switchboard_rule_reloads_total{{result=\"{}\"}} {}",
                result.as_str(),
                self.rule_reloads(result)
            );
        }
        for (readings, kind) in [(counters, "counter"), (gauges, "gauge")] {
            for (name, help, value) in readings {
                family(&mut out, name, kind, help);
                let _ = writeln!(out, "{name} {value}");
            }
        }
        out
    }
}

/// The stop hooks' part of `/metrics`: stops by host and outcome (`delivered` is work handed
/// over by a hook), and whether on-duty mode is on.
pub fn render_hooks(hooks: &crate::actions::duty::HookStats) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "switchboard_hook_stops_total",
        "counter",
        "Agent stops seen by the stop hooks, by host and outcome (delivered = work handed over).",
    );
    for (host, outcomes) in &hooks.stops {
        for (outcome, n) in outcomes {
            let _ = writeln!(
                out,
                "switchboard_hook_stops_total{{host=\"{}\",outcome=\"{}\"}} {n}",
                escape(host),
                escape(outcome)
            );
        }
    }
    family(
        &mut out,
        "switchboard_on_duty",
        "gauge",
        "1 while on-duty mode keeps agents with nothing queued listening, else 0.",
    );
    let _ = writeln!(out, "switchboard_on_duty {}", u8::from(hooks.duty.on));
    out
}

/// The `# HELP` and `# TYPE` lines that open a metric family.
/// `switchboard_regex_budget_total`: searches of each rule's content or resolve regex that its
/// budget stopped (see [`crate::rules::ContentRegex::check`]); the rule did not fire for those
/// messages.
/// Counted since the rules loaded.
pub fn render_regex_budget(rules: &crate::rules::RuleSet) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "switchboard_regex_budget_total",
        "counter",
        "Content regex searches stopped by their budget (the rule did not fire), by rule.",
    );
    for rule in rules.rules() {
        let n = rule.content_regex.as_ref().map_or(0, |re| re.over_budget())
            + rule.resolve.as_ref().map_or(0, |r| r.regex.over_budget());
        if n > 0 {
            let _ = writeln!(
                out,
                "switchboard_regex_budget_total{{rule=\"{}\"}} {n}",
                escape(&rule.name)
            );
        }
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Escapes a Prometheus label value.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_stops_render_by_host_and_outcome() {
        let mut hooks = crate::actions::duty::HookStats::default();
        hooks
            .stops
            .entry("copilot".into())
            .or_default()
            .insert("delivered".into(), 3);
        hooks.duty.on = true;
        let text = render_hooks(&hooks);
        assert!(
            text.contains(
                "switchboard_hook_stops_total{host=\"copilot\",outcome=\"delivered\"} 3\n"
            ),
            "{text}"
        );
        assert!(text.contains("switchboard_on_duty 1\n"), "{text}");
    }

    #[test]
    fn renders_counters_with_labels() {
        let m = Metrics::default();
        m.ingested("alertmanager", 3);
        m.action("crit \"alerts\"", Mode::Confirm);
        m.suppressed("ci", SuppressReason::Dedup);
        m.suppressed("office", SuppressReason::Inactive);
        m.suppressed("office", SuppressReason::Muted);
        m.suppressed("office", SuppressReason::Muted);
        m.rule_reload(ReloadResult::Ok);
        m.rule_reload(ReloadResult::Invalid);
        m.rule_reload(ReloadResult::Invalid);
        let lifecycle = crate::actions::lifecycle::Counters {
            dropped: [(Mode::Auto, 1)].into(),
            released: 2,
            ..Default::default()
        };
        let text = m.render_with(
            &lifecycle,
            &[(
                "switchboard_journal_write_errors_total",
                "Failed writes.",
                2.0,
            )],
            &[("switchboard_ring_depth", "Messages in the ring.", 7.0)],
        );
        assert!(text.contains("switchboard_messages_ingested_total{source=\"alertmanager\"} 3\n"));
        assert!(text.contains(
            "switchboard_actions_total{rule=\"crit \\\"alerts\\\"\",mode=\"confirm\"} 1\n"
        ));
        assert!(text.contains("switchboard_suppressed_total{rule=\"ci\",reason=\"dedup\"} 1\n"));
        assert!(
            text.contains("switchboard_suppressed_total{rule=\"office\",reason=\"inactive\"} 1\n")
        );
        assert!(
            text.contains("switchboard_suppressed_total{rule=\"office\",reason=\"muted\"} 2\n")
        );
        assert!(text.contains("switchboard_actions_dropped_total{mode=\"auto\"} 1\n"));
        assert!(text.contains("switchboard_ring_depth 7\n"));
        assert!(text.contains(
            "# TYPE switchboard_journal_write_errors_total counter\nswitchboard_journal_write_errors_total 2\n"
        ));
        assert!(text.contains("switchboard_rule_reloads_total{result=\"ok\"} 1\n"));
        assert!(text.contains("switchboard_rule_reloads_total{result=\"invalid\"} 2\n"));
        assert!(
            text.contains("switchboard_rule_reloads_total{result=\"missing\"} 0\n"),
            "every result is listed, also at zero"
        );
        assert!(text.contains("switchboard_action_transitions_total{state=\"released\"} 2\n"));
    }
}
