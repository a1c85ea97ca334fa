//! Engine dispatch: one message through N rules, indexed versus trying every rule.
//!
//! `cargo bench --bench engine_dispatch`
//!
//! The rule mix (per the issue): 40% literal channels, 30% `prefix/*` subtrees, 20%
//! case-insensitive content regexes with `\b` on any channel, 10% server + glob + regex.
//! Messages are ~120 bytes; a quarter match no rule. `indexed/N` is `Engine::evaluate`;
//! `naive/N`, the baseline, tries every rule in order (server, channel, regex) the way a
//! plain loop does, and renders the same prompts.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use switchboard::engine::Engine;
use switchboard::message::{Message, NewMessage};
use switchboard::rules::RuleSet;

/// A small deterministic generator (no dependency, same numbers every run).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

fn rules(n: usize) -> RuleSet {
    let mut rules = Vec::with_capacity(n);
    for i in 0..n {
        let rule = match i * 10 / n.max(1) {
            0..=3 => {
                serde_json::json!({ "name": format!("r{i}"), "channel": format!("svc{}/events", i % (n / 4).max(1)) })
            }
            4..=6 => {
                serde_json::json!({ "name": format!("r{i}"), "channel": format!("team{}/*", i % (n / 4).max(1)) })
            }
            7..=8 => {
                serde_json::json!({ "name": format!("r{i}"), "contentRegex": format!("(?i)\\b(incident{i}|outage{i})\\b") })
            }
            _ => serde_json::json!({
                "name": format!("r{i}"),
                "server": format!("prom{}", i % 8),
                "channel": format!("alerts/*/db{}", i % 16),
                "contentRegex": "(?i)\\btimeout\\b",
            }),
        };
        rules.push(rule);
    }
    RuleSet::parse(&serde_json::json!({ "rules": rules }).to_string()).expect("bench rules compile")
}

fn messages(n: usize) -> Vec<Message> {
    let mut rng = Lcg(42);
    let now = Utc::now();
    (0..256)
        .map(|seq| {
            let k = rng.next((n / 4).max(1));
            let (server, channel, content) = match seq % 4 {
                0 => ("http", format!("svc{k}/events"), format!("deploy of svc{k} finished; 3 pods restarted, readiness ok after 42s, canary error rate 0.2% on request 4821")),
                1 => ("http", format!("team{k}/chat/ops"), format!("incident{} opened by on-call: checkout latency p99 at 2.3s in eu-west-1, customers report slow payment pages", rng.next(n.max(1)))),
                2 => ("prom3", format!("alerts/eu/db{}", rng.next(16)), "Postgres replica lag above 30s on db-eu-3; upstream Timeout talking to primary, WAL receiver restarting".to_string()),
                // A quarter match nothing: unknown channel, no keyword.
                _ => ("other", format!("misc{k}/noise"), "nightly backup completed in 14m with 0 errors; 1.2 TiB written to cold storage bucket acme-archive-7".to_string()),
            };
            Message::from_new(NewMessage::new(server, channel, content), seq as u64 + 1, now)
        })
        .collect()
}

fn dispatch(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_dispatch");
    group.throughput(Throughput::Elements(1));
    let now = Utc::now();
    for n in [10usize, 100, 1000] {
        let set = Arc::new(rules(n));
        let msgs = messages(n);
        let mut engine = Engine::new(set.clone());
        let mut i = 0;
        group.bench_with_input(BenchmarkId::new("indexed", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % msgs.len();
                black_box(engine.evaluate(&msgs[i], now))
            })
        });
        let mut i = 0;
        group.bench_with_input(BenchmarkId::new("naive", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % msgs.len();
                let m = &msgs[i];
                let prompts: Vec<String> = set
                    .rules()
                    .iter()
                    .filter(|r| r.enabled && r.is_match(m))
                    .map(|r| r.render_prompt(m))
                    .collect();
                black_box(prompts)
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = dispatch
}
criterion_main!(benches);
