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
//!
//! The workloads are built in `engine_workload/`, which `engine_count.rs` shares: the same
//! dispatches counted in instructions and cache misses, which the shared host's noise does not
//! move.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use switchboard::engine::{Engine, Prepared};
use switchboard::rules::RuleSet;

mod engine_workload;
use engine_workload::{CYCLE, Pools, catchall, messages, mix, with_matchers};

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
