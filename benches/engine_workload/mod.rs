//! The `engine_dispatch` workloads, shared by `engine_dispatch.rs` (Criterion, wall clock) and
//! `engine_count.rs` (a fixed number of dispatches, for `cachegrind`'s counts). Included by
//! both as `mod engine_workload`; what each workload is, is told in `engine_dispatch.rs`.

#![allow(dead_code)]

use chrono::Utc;
use switchboard::message::{Message, NewMessage};

/// Messages in one cycle.
pub const CYCLE: usize = 4096;

/// A small deterministic generator (no dependency, same numbers every run).
pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }

    pub fn pick(&mut self, from: &[usize]) -> usize {
        from[self.next(from.len())]
    }
}

/// The rule numbers a message kind draws from.
pub struct Pools {
    pub literal: Vec<usize>,
    pub team: Vec<usize>,
    pub code: Vec<usize>,
    pub host: Vec<usize>,
}

pub fn limits(rule: &mut serde_json::Value, i: usize) {
    if i.is_multiple_of(5) {
        rule["dedupWindow"] = "1m".into();
    }
    if i.is_multiple_of(7) {
        rule["rateLimit"] = "1ms".into();
    }
}

/// The mix of `n` rules, as `triggers.json` text, and the pools messages draw from.
pub fn mix(n: usize) -> (String, Pools) {
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
pub fn with_matchers(n: usize) -> (String, Pools) {
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
pub fn catchall(n: usize) -> (String, Pools) {
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
pub fn messages(pools: &Pools, meta: bool) -> Vec<Message> {
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

/// The workload called `label` in the bench's ids (`100`, `catchall_10000`, `matchers_1000`,
/// `meta_100`, ...): its rules as `triggers.json` text, its pools, and whether its messages
/// carry metadata; `None` for a label that names none.
pub fn workload(label: &str) -> Option<(String, Pools, bool)> {
    let n = |s: &str| s.parse::<usize>().ok().filter(|&n| n > 0);
    if let Some(k) = label.strip_prefix("catchall_") {
        let (text, pools) = catchall(n(k)?);
        return Some((text, pools, false));
    }
    if let Some(k) = label.strip_prefix("matchers_") {
        let (text, pools) = with_matchers(n(k)?);
        return Some((text, pools, true));
    }
    if let Some(k) = label.strip_prefix("meta_") {
        let (text, pools) = mix(n(k)?);
        return Some((text, pools, true));
    }
    let (text, pools) = mix(n(label)?);
    Some((text, pools, false))
}
