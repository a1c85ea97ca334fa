//! Process counters, and the scrape that `GET /metrics` serves.
//!
//! The core counts through the methods here (ingest by source, actions by rule and mode,
//! suppressions by reason: `dedup`, `rate_limited`, and `inactive` / `muted` for a rule its
//! time intervals held back; rules reloads by result); the lifecycle's counters and the gauges
//! (queue depths, ring depth) are read at scrape time. The daemon's other parts (HTTP ingest,
//! upstreams, JetStream) add their own families to the same [`Scrape`].
//!
//! A [`Scrape`] is data (families of samples, serializable, so the `metrics` operation can
//! answer it across the control socket); [`Scrape::encode`] turns it into the OpenMetrics text
//! exposition through `prometheus-client`'s encoder (a `Collector` read at scrape time: every
//! value here is read from state that exists anyway, so nothing is counted twice). That
//! encoder writes label values as they are, so each goes through [`Escaped`] first: a rule
//! named `crit "alerts"` must not make the whole scrape unparseable.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

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
    /// The file, a link to it or its directory can be changed by another user: the live rules
    /// stay.
    Unsafe,
}

impl ReloadResult {
    /// Every result, in the order `/metrics` lists them.
    pub const ALL: [ReloadResult; 5] = [
        ReloadResult::Ok,
        ReloadResult::Invalid,
        ReloadResult::Missing,
        ReloadResult::Unreadable,
        ReloadResult::Unsafe,
    ];

    /// The `result` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadResult::Ok => "ok",
            ReloadResult::Invalid => "invalid",
            ReloadResult::Missing => "missing",
            ReloadResult::Unreadable => "unreadable",
            ReloadResult::Unsafe => "unsafe",
        }
    }
}

/// Whether a family counts up or goes up and down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Only grows (since start, or since the rules loaded).
    Counter,
    /// A reading taken now.
    Gauge,
}

/// One metric family: its name, help, kind and samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Family {
    /// The sample name; a counter's ends in `_total`.
    pub name: String,
    /// One line saying what it counts.
    pub help: String,
    /// Counter or gauge.
    pub kind: Kind,
    /// Each label set with its value.
    pub samples: Vec<Sample>,
}

/// One sample of a family.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// `(label, value)` pairs, in this order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

/// Every family of one `/metrics` scrape, in the order they were added.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Scrape {
    /// The families.
    pub families: Vec<Family>,
}

impl Scrape {
    /// A counter family named `name` (ending in `_total`); add its samples to the result.
    pub fn counter(&mut self, name: &str, help: &str) -> &mut Family {
        self.family(name, help, Kind::Counter)
    }

    /// A gauge family named `name`; add its samples to the result.
    pub fn gauge(&mut self, name: &str, help: &str) -> &mut Family {
        self.family(name, help, Kind::Gauge)
    }

    /// A family of `kind` named `name` (a counter's ends in `_total`), for parts that list
    /// their families in a table.
    pub fn family(&mut self, name: &str, help: &str, kind: Kind) -> &mut Family {
        debug_assert!(
            kind == Kind::Gauge || name.ends_with("_total"),
            "{name}: a counter ends in _total"
        );
        self.families.push(Family {
            name: name.to_string(),
            help: help.to_string(),
            kind,
            samples: Vec::new(),
        });
        self.families.last_mut().unwrap()
    }

    /// The OpenMetrics text exposition of every family (`# EOF` last), through
    /// `prometheus-client`'s encoder.
    pub fn encode(self) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .expect("writing to a String cannot fail");
        out
    }
}

impl Family {
    /// A sample without labels.
    pub fn value(&mut self, value: impl Into<f64>) -> &mut Family {
        self.with(&[], value)
    }

    /// A sample with `labels`.
    pub fn with(&mut self, labels: &[(&str, &str)], value: impl Into<f64>) -> &mut Family {
        self.samples.push(Sample {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value: value.into(),
        });
        self
    }
}

/// A count as a sample value (exact below 2^53, which no counter here reaches).
pub fn count(n: u64) -> f64 {
    n as f64
}

impl prometheus_client::collector::Collector for Scrape {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> std::fmt::Result {
        use prometheus_client::metrics::MetricType;
        for family in &self.families {
            // The encoder adds `_total` to a counter's samples itself.
            let (name, kind) = match family.kind {
                Kind::Counter => (
                    family.name.strip_suffix("_total").unwrap_or(&family.name),
                    MetricType::Counter,
                ),
                Kind::Gauge => (family.name.as_str(), MetricType::Gauge),
            };
            let mut metric = encoder.encode_descriptor(name, &family.help, None, kind)?;
            for sample in &family.samples {
                let labels: Vec<(&str, Escaped)> = sample
                    .labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), Escaped(v)))
                    .collect();
                // A sample without labels is the family's own (`name 3`, not `name{} 3`).
                if labels.is_empty() {
                    put(&mut metric, family.kind, sample.value)?;
                } else {
                    put(
                        &mut metric.encode_family(&labels)?,
                        family.kind,
                        sample.value,
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// One value; an integral one printed as an integer (`3`, not `3.0`).
fn put(
    m: &mut prometheus_client::encoding::MetricEncoder,
    kind: Kind,
    value: f64,
) -> std::fmt::Result {
    use prometheus_client::encoding::NoLabelSet;
    let integral = value.fract() == 0.0 && value.abs() < 9e15;
    match kind {
        Kind::Counter if integral && value >= 0.0 => {
            m.encode_counter::<NoLabelSet, _, u64>(&(value as u64), None)
        }
        Kind::Counter => m.encode_counter::<NoLabelSet, _, f64>(&value, None),
        Kind::Gauge if integral => m.encode_gauge(&(value as i64)),
        Kind::Gauge => m.encode_gauge(&value),
    }
}

/// A label value escaped as the exposition formats require (`\`, `"` and a line feed), which
/// `prometheus-client` 0.24's text encoder leaves to the caller.
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a>(pub &'a str);

impl prometheus_client::encoding::EncodeLabelValue for Escaped<'_> {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder,
    ) -> std::fmt::Result {
        use std::fmt::Write;
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

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

    /// Every counter and gauge of the core, read now: these counters, the lifecycle's
    /// (`delivery`), and readings of the inbox and the queues.
    pub fn scrape(
        &self,
        out: &mut Scrape,
        inbox: &crate::inbox::InboxStats,
        delivery: &crate::actions::lifecycle::LifecycleStats,
    ) {
        self.scrape_rules(out);
        scrape_lifecycle(out, &delivery.counters);
        out.gauge(
            "switchboard_wait_calls_in_flight",
            "wait_for_inbound_message calls waiting now.",
        )
        .value(count(self.wait_calls_in_flight.load(Ordering::Relaxed)));
        let c = out.counter(
            "switchboard_rule_reloads_total",
            "Rules reloads since start (SIGHUP, `rules reload`, file watcher), by result.",
        );
        for result in ReloadResult::ALL {
            c.with(
                &[("result", result.as_str())],
                count(self.rule_reloads(result)),
            );
        }
        out.counter(
            "switchboard_journal_write_errors_total",
            "Failed inbox journal writes since start.",
        )
        .value(count(inbox.journal_errors));
        out.counter(
            "switchboard_duplicates_total",
            "Messages acknowledged as a repeat of a recent source id and not stored again.",
        )
        .value(count(inbox.duplicates));
        for (name, help, read) in GAUGES {
            out.gauge(name, help).value(count(read(inbox, delivery)));
        }
    }

    /// What the rules did: messages in by source, actions by rule and mode, suppressions.
    fn scrape_rules(&self, out: &mut Scrape) {
        let c = out.counter(
            "switchboard_messages_ingested_total",
            "Messages accepted, by source.",
        );
        for (source, n) in self.ingested.lock().unwrap().iter() {
            c.with(&[("source", source)], count(*n));
        }
        let c = out.counter(
            "switchboard_actions_total",
            "Actions fired, by rule and mode.",
        );
        for ((rule, mode), n) in self.actions.lock().unwrap().iter() {
            c.with(&[("rule", rule), ("mode", mode.as_str())], count(*n));
        }
        let c = out.counter(
            "switchboard_suppressed_total",
            "Matching rules that did not fire, by reason.",
        );
        for ((rule, reason), n) in self.suppressed.lock().unwrap().iter() {
            c.with(&[("rule", rule), ("reason", reason.as_str())], count(*n));
        }
    }
}

/// The lifecycle's counters: drops by mode, transitions by state entered, exec failures by kind.
fn scrape_lifecycle(out: &mut Scrape, lifecycle: &crate::actions::lifecycle::Counters) {
    let c = out.counter(
        "switchboard_actions_dropped_total",
        "Actions refused by a full queue, by mode.",
    );
    for (mode, n) in &lifecycle.dropped {
        c.with(&[("mode", mode.as_str())], count(*n));
    }
    let c = out.counter(
        "switchboard_action_transitions_total",
        "Action lifecycle transitions, by the state entered.",
    );
    for (state, n) in [
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
    ] {
        c.with(&[("state", state)], count(n));
    }
    let c = out.counter(
        "switchboard_exec_failures_total",
        "Exec runs that did not succeed, by kind.",
    );
    for kind in crate::actions::ExecFailure::ALL {
        let n = lifecycle.exec_failures.get(&kind).copied().unwrap_or(0);
        c.with(&[("kind", kind.as_str())], count(n));
    }
}

/// A gauge of the core: its name, its help, and how it is read from the inbox's and the
/// lifecycle's stats.
type Gauge = (
    &'static str,
    &'static str,
    fn(&crate::inbox::InboxStats, &crate::actions::lifecycle::LifecycleStats) -> u64,
);

/// The core's gauges, in the order `/metrics` lists them.
const GAUGES: [Gauge; 10] = [
    (
        "switchboard_ring_depth",
        "Messages held in the in-memory ring.",
        |inbox, _| inbox.ring_depth as u64,
    ),
    (
        "switchboard_last_seq",
        "Highest committed message seq.",
        |inbox, _| inbox.last_seq,
    ),
    (
        "switchboard_journal_failing",
        "1 while inbox journal writes fail, else 0.",
        |inbox, _| u64::from(inbox.journal_status.starts_with("failing")),
    ),
    (
        "switchboard_queue_nudges",
        "Nudges no consumer has seen yet.",
        |_, delivery| delivery.nudges_undelivered as u64,
    ),
    (
        "switchboard_queue_pending_confirms",
        "Confirms waiting for an answer.",
        |_, delivery| delivery.pending_confirms as u64,
    ),
    (
        "switchboard_queue_work",
        "Auto prompts and approved confirms waiting for the agent.",
        |_, delivery| delivery.queued_work as u64,
    ),
    (
        "switchboard_queue_claimed_work",
        "Work claimed by a wait whose result is not yet sent.",
        |_, delivery| delivery.claimed_work as u64,
    ),
    (
        "switchboard_sessions",
        "MCP sessions connected now.",
        |_, delivery| delivery.sessions as u64,
    ),
    (
        "switchboard_exec_running",
        "Exec runs in flight.",
        |_, delivery| delivery.exec_running as u64,
    ),
    (
        "switchboard_exec_queued",
        "Exec work waiting for a slot.",
        |_, delivery| delivery.exec_queued as u64,
    ),
];

/// The stop hooks' part of `/metrics`: stops by host and outcome (`delivered` is work handed
/// over by a hook), and whether on-duty mode is on.
pub fn scrape_hooks(out: &mut Scrape, hooks: &crate::actions::duty::HookStats) {
    let c = out.counter(
        "switchboard_hook_stops_total",
        "Agent stops seen by the stop hooks, by host and outcome (delivered = work handed over).",
    );
    for (host, outcomes) in &hooks.stops {
        for (outcome, n) in outcomes {
            c.with(&[("host", host), ("outcome", outcome)], count(*n));
        }
    }
    out.gauge(
        "switchboard_on_duty",
        "1 while on-duty mode keeps agents with nothing queued listening, else 0.",
    )
    .value(count(u64::from(hooks.duty.on)));
}

/// `switchboard_regex_budget_total`: searches of each rule's content or resolve regex that its
/// budget stopped (see [`crate::rules::ContentRegex::check`]): a confirm or `stop` rule counted
/// those messages as matching (a person decides), an auto or notify rule did not fire on them
/// (`switchboard_suppressed_total{reason="regex_budget"}`). Counted since the rules loaded.
pub fn scrape_regex_budget(out: &mut Scrape, rules: &crate::rules::RuleSet) {
    let c = out.counter(
        "switchboard_regex_budget_total",
        "Content regex searches stopped by their budget, by rule: a confirm or stop rule counts \
         the message as a match (a person decides), an auto or notify rule does not fire.",
    );
    for rule in rules.rules() {
        let n = rule.content_regex.as_ref().map_or(0, |re| re.over_budget())
            + rule.resolve.as_ref().map_or(0, |r| r.regex.over_budget());
        if n > 0 {
            c.with(&[("rule", &rule.name)], count(n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut Scrape)) -> String {
        let mut scrape = Scrape::default();
        f(&mut scrape);
        scrape.encode()
    }

    #[test]
    fn hook_stops_render_by_host_and_outcome() {
        let mut hooks = crate::actions::duty::HookStats::default();
        hooks
            .stops
            .entry("copilot".into())
            .or_default()
            .insert("delivered".into(), 3);
        hooks.duty.on = true;
        let text = text(|s| scrape_hooks(s, &hooks));
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
        let delivery = crate::actions::lifecycle::LifecycleStats {
            counters: crate::actions::lifecycle::Counters {
                dropped: [(Mode::Auto, 1)].into(),
                released: 2,
                ..Default::default()
            },
            ..Default::default()
        };
        let inbox = crate::inbox::InboxStats {
            journal_errors: 2,
            ring_depth: 7,
            ..Default::default()
        };
        let text = text(|s| m.scrape(s, &inbox, &delivery));
        assert!(text.contains("switchboard_messages_ingested_total{source=\"alertmanager\"} 3\n"));
        assert!(
            text.contains(
                "switchboard_actions_total{rule=\"crit \\\"alerts\\\"\",mode=\"confirm\"} 1\n"
            ),
            "a quote in a label value is escaped: {text}"
        );
        assert!(text.contains("switchboard_suppressed_total{rule=\"ci\",reason=\"dedup\"} 1\n"));
        assert!(
            text.contains("switchboard_suppressed_total{rule=\"office\",reason=\"inactive\"} 1\n")
        );
        assert!(
            text.contains("switchboard_suppressed_total{rule=\"office\",reason=\"muted\"} 2\n")
        );
        assert!(text.contains("switchboard_actions_dropped_total{mode=\"auto\"} 1\n"));
        assert!(text.contains("# TYPE switchboard_ring_depth gauge\nswitchboard_ring_depth 7\n"));
        assert!(
            text.contains(
                "# TYPE switchboard_journal_write_errors counter\nswitchboard_journal_write_errors_total 2\n"
            ),
            "{text}"
        );
        assert!(text.contains("switchboard_rule_reloads_total{result=\"ok\"} 1\n"));
        assert!(text.contains("switchboard_rule_reloads_total{result=\"invalid\"} 2\n"));
        assert!(
            text.contains("switchboard_rule_reloads_total{result=\"missing\"} 0\n"),
            "every result is listed, also at zero"
        );
        assert!(text.contains("switchboard_action_transitions_total{state=\"released\"} 2\n"));
        assert!(
            text.ends_with("# EOF\n"),
            "OpenMetrics ends with EOF: {text}"
        );
    }

    #[test]
    fn label_values_are_escaped_and_values_print_as_numbers() {
        let text = text(|s| {
            s.counter("x_total", "X.")
                .with(&[("rule", "a\\b\"c\nd")], 1.0);
            s.gauge("y", "Y.").value(0.25).value(-3.0);
        });
        assert!(
            text.contains("x_total{rule=\"a\\\\b\\\"c\\nd\"} 1\n"),
            "backslash, quote and line feed escaped: {text}"
        );
        assert!(text.contains("y 0.25\n"), "{text}");
        assert!(text.contains("y -3\n"), "{text}");
        assert!(text.contains("# HELP x X.\n# TYPE x counter\n"), "{text}");
    }

    #[test]
    fn a_scrape_crosses_the_control_socket_as_json() {
        let mut scrape = Scrape::default();
        scrape.gauge("g", "G.").with(&[("k", "v")], 2.0);
        let json = serde_json::to_string(&scrape).unwrap();
        assert_eq!(serde_json::from_str::<Scrape>(&json).unwrap(), scrape);
    }
}
