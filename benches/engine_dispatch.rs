//! Engine dispatch: one message through N rules, the indexed engine against the naive loop.
//!
//! `cargo bench --bench engine_dispatch`
//!
//! The workload is the one the reference comparison uses (issue 16), so anyone can rerun it.
//! N rules (10, 100, 1000, 10000); rule `i` by `i*10/N`:
//! - 0–3: literal channel `svc{i}/events`;
//! - 4–6: subtree `team{i}/*`;
//! - 7–8: any channel, `contentRegex` `(?i)error code E{i}\b`;
//! - 9: server `prom`, channel `alerts/*`, `contentRegex` `sev[12].*host{i}\b`;
//!
//! every 5th rule has `dedupWindow` `1m`, every 7th `rateLimit` `1ms`; all notify. A cycle of
//! 4,096 messages of about 120 bytes, a quarter each: a literal rule's channel; a nested team
//! channel whose content holds `error code E<k>` (team and code each drawn from their rules);
//! `alerts/disk` from `prom` with `sev<1..4> … host<k>`; an unrelated channel. The clock is the
//! wall clock, read for every message, so cooldowns and dedup windows run out as they would.
//!
//! `catchall/10000` is the worst case the issue names: 10,000 rules on any server and any
//! channel, each with a content regex (even rules `(?i)error code E{i}\b`, odd rules
//! `sev[12].*host{i}\b`), the same limits and the same message mix.
//!
//! `matchers_N` (100, 1000, 10000; issue 29) is the mix with Alertmanager-style matchers on
//! every even rule: literal rules `labels.service="svc{i}"`, subtree rules
//! `labels.team=~"team{i}|team{i}-oncall"`, content rules `sender!="renovate[bot]"` (a
//! matcher the index cannot use), alert rules `labels.severity=~"critical|warning"` and
//! `labels.instance="host{i}"`. The messages are the same, carrying the metadata a source
//! would give them (`labels.service`, `labels.team` and `sender`, five alert keys).
//! `meta_N` is the plain mix's rules on those same messages: what `matchers_N` costs over it
//! is the matchers' own cost, and what `meta_N` costs over `N` is reading messages that carry
//! metadata (every fired rule looks up `to_consumer`).
//!
//! `indexed` is `Engine::evaluate`; `naive`, the same-run baseline, is
//! `Engine::evaluate_naive`: every rule tried in file order (server, channel, regex), with
//! the same dedup, rate limits and rendered prompts. Setup prints, for each rule set, how long
//! compiling and indexing took and the resident memory it added.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use switchboard::engine::{Engine, Prepared};
use switchboard::message::{Message, NewMessage};
use switchboard::rules::RuleSet;

/// Messages in one cycle.
const CYCLE: usize = 4096;

/// A small deterministic generator (no dependency, same numbers every run).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }

    fn pick(&mut self, from: &[usize]) -> usize {
        from[self.next(from.len())]
    }
}

/// The rule numbers a message kind draws from.
struct Pools {
    literal: Vec<usize>,
    team: Vec<usize>,
    code: Vec<usize>,
    host: Vec<usize>,
}

fn limits(rule: &mut serde_json::Value, i: usize) {
    if i.is_multiple_of(5) {
        rule["dedupWindow"] = "1m".into();
    }
    if i.is_multiple_of(7) {
        rule["rateLimit"] = "1ms".into();
    }
}

/// The mix of `n` rules, as `triggers.json` text, and the pools messages draw from.
fn mix(n: usize) -> (String, Pools) {
    let mut pools = Pools {
        literal: vec![],
        team: vec![],
        code: vec![],
        host: vec![],
    };
    let mut rules = Vec::with_capacity(n);
    for i in 0..n {
        let mut rule = match i * 10 / n {
            0..=3 => {
                pools.literal.push(i);
                serde_json::json!({ "name": format!("r{i}"), "channel": format!("svc{i}/events") })
            }
            4..=6 => {
                pools.team.push(i);
                serde_json::json!({ "name": format!("r{i}"), "channel": format!("team{i}/*") })
            }
            7..=8 => {
                pools.code.push(i);
                serde_json::json!({ "name": format!("r{i}"), "contentRegex": format!("(?i)error code E{i}\\b") })
            }
            _ => {
                pools.host.push(i);
                serde_json::json!({
                    "name": format!("r{i}"),
                    "server": "prom",
                    "channel": "alerts/*",
                    "contentRegex": format!("sev[12].*host{i}\\b"),
                })
            }
        };
        limits(&mut rule, i);
        rules.push(rule);
    }
    (serde_json::json!({ "rules": rules }).to_string(), pools)
}

/// [`mix`] with matchers on every even rule.
fn with_matchers(n: usize) -> (String, Pools) {
    let (text, pools) = mix(n);
    let mut file: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (i, rule) in file["rules"].as_array_mut().unwrap().iter_mut().enumerate() {
        if i % 2 == 1 {
            continue;
        }
        let matchers = match i * 10 / n {
            0..=3 => serde_json::json!([format!("labels.service=\"svc{i}\"")]),
            4..=6 => serde_json::json!([format!("labels.team=~\"team{i}|team{i}-oncall\"")]),
            7..=8 => serde_json::json!(["sender!=\"renovate[bot]\""]),
            _ => serde_json::json!([
                "labels.severity=~\"critical|warning\"",
                format!("labels.instance=\"host{i}\"")
            ]),
        };
        rule["matchers"] = matchers;
    }
    (file.to_string(), pools)
}

/// 10,000 content regexes on any server and channel.
fn catchall(n: usize) -> (String, Pools) {
    let mut pools = Pools {
        literal: (0..n).collect(),
        team: (0..n).collect(),
        code: vec![],
        host: vec![],
    };
    let mut rules = Vec::with_capacity(n);
    for i in 0..n {
        let mut rule = if i % 2 == 0 {
            pools.code.push(i);
            serde_json::json!({ "name": format!("r{i}"), "contentRegex": format!("(?i)error code E{i}\\b") })
        } else {
            pools.host.push(i);
            serde_json::json!({ "name": format!("r{i}"), "contentRegex": format!("sev[12].*host{i}\\b") })
        };
        limits(&mut rule, i);
        rules.push(rule);
    }
    (serde_json::json!({ "rules": rules }).to_string(), pools)
}

/// The 4,096-message cycle; with `meta`, each message carries its source's metadata.
fn messages(pools: &Pools, meta: bool) -> Vec<Message> {
    let mut rng = Lcg(42);
    let now = Utc::now();
    (0..CYCLE)
        .map(|seq| {
            let r = rng.next(100_000);
            let (server, channel, content, metadata) = match seq % 4 {
                0 => {
                    let k = rng.pick(&pools.literal);
                    ("http", format!("svc{k}/events"), format!("deploy of svc{k} finished: 3 pods restarted, readiness ok after 42s, canary error rate 0.2% (run {r})"),
                     vec![("labels.service", format!("svc{k}"))])
                }
                1 => {
                    let (k, e) = (rng.pick(&pools.team), rng.pick(&pools.code));
                    ("http", format!("team{k}/ci/deploys"), format!("pipeline {r} for team{k} failed at stage deploy: error code E{e} from the registry, retrying in 30s"),
                     vec![("labels.team", format!("team{k}")), ("sender", "ci".to_string())])
                }
                2 => {
                    let (s, h) = (1 + rng.next(4), rng.pick(&pools.host));
                    ("prom", "alerts/disk".to_string(), format!("[FIRING] sev{s} disk usage 93% on host{h} volume /var/lib/postgres, growing 2.1 GB/h (alert {r})"),
                     vec![
                         ("status", "firing".to_string()),
                         ("alertname", "DiskFilling".to_string()),
                         ("fingerprint", format!("{r:x}")),
                         ("labels.severity", ["critical", "warning", "info", "warning"][s - 1].to_string()),
                         ("labels.instance", format!("host{h}")),
                     ])
                }
                _ => ("http", format!("misc{}/noise", r % 50), format!("nightly backup {r} completed in 14m with 0 errors; 1.2 TiB written to the cold storage bucket acme-archive-7"),
                      vec![("sender", "cron".to_string())]),
            };
            let mut new = NewMessage::new(server, channel, content);
            if meta {
                for (k, v) in metadata {
                    new = new.with_meta(k, v);
                }
            }
            Message::from_new(new, seq as u64 + 1, now)
        })
        .collect()
}

/// Resident set size of this process, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Compiles and indexes `text`, printing the time and memory it took.
fn prepare(label: &str, text: &str) -> Prepared {
    let rss = rss_kib();
    let start = Instant::now();
    let rules = RuleSet::parse(text).expect("bench rules compile");
    let parsed = start.elapsed();
    let prepared = Prepared::new(Arc::new(rules));
    let total = start.elapsed();
    eprintln!(
        "{label}: compiled in {:.1} ms (parse and compile {:.1} ms, index {:.1} ms), +{:.1} MiB RSS",
        total.as_secs_f64() * 1e3,
        parsed.as_secs_f64() * 1e3,
        (total - parsed).as_secs_f64() * 1e3,
        rss.abs_diff(rss_kib()) as f64 / 1024.0
    );
    prepared
}

fn dispatch(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_dispatch");
    group.throughput(Throughput::Elements(1));
    let sets: Vec<(String, (String, Pools), bool)> = [10usize, 100, 1000, 10000]
        .into_iter()
        .map(|n| (n.to_string(), mix(n), false))
        .chain([("catchall_10000".to_string(), catchall(10000), false)])
        .chain(
            [100usize, 1000, 10000]
                .into_iter()
                .map(|n| (format!("matchers_{n}"), with_matchers(n), true)),
        )
        .chain(
            [100usize, 1000, 10000]
                .into_iter()
                .map(|n| (format!("meta_{n}"), mix(n), true)),
        )
        .collect();
    for (label, (text, pools), meta) in &sets {
        let msgs = messages(pools, *meta);
        // What the workload does: matches per cycle, on a fresh engine (limits aside).
        let mut probe = Engine::from_prepared(prepare(label, text));
        let matched: usize = msgs
            .iter()
            .map(|m| {
                let eval = probe.evaluate(m, Utc::now());
                eval.actions.len() + eval.suppressed.len()
            })
            .sum();
        eprintln!("{label}: {matched} rule matches in a cycle of {CYCLE} messages");
        drop(probe);
        let mut indexed = Engine::from_prepared(prepare(label, text));
        let mut naive = Engine::from_prepared(prepare(label, text));
        let mut i = 0;
        group.bench_with_input(BenchmarkId::new("indexed", label), label, |b, _| {
            b.iter(|| {
                i = (i + 1) % msgs.len();
                black_box(indexed.evaluate(&msgs[i], Utc::now()))
            })
        });
        let mut i = 0;
        group.bench_with_input(BenchmarkId::new("naive", label), label, |b, _| {
            b.iter(|| {
                i = (i + 1) % msgs.len();
                black_box(naive.evaluate_naive(&msgs[i], Utc::now()))
            })
        });
        eprintln!("{label}: {} KiB RSS after the runs", rss_kib());
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = dispatch
}
criterion_main!(benches);
