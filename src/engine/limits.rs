//! Per-rule memory: when the rule last fired (cooldown, quota) and which dedup keys it has
//! seen inside their window. Keyed by rule name in the engine, so it survives a reload.
//!
//! Both checks are read-only; [`RuleState::record`] changes state, and only when the rule
//! fires. So a repeat suppressed by dedup neither spends the rate limit nor extends the window,
//! and a rate-limited message does not start a dedup window for a prompt nobody saw.
//!
//! [`RuleMemory`] is the same memory as data, for `state.json`: a restart must not reopen a
//! rule's rate limit or dedup windows. Taking it and putting it back both drop what has
//! expired by then, judged by the rule's current windows.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::rules::RateLimit;

/// The longest default dedup key: the first 256 bytes of the content.
pub const DEDUP_KEY_BYTES: usize = 256;

/// What one rule remembers.
#[derive(Debug, Default)]
pub struct RuleState {
    /// Recent fire times, oldest first; at most as many as the quota counts (1 for a cooldown).
    fires: VecDeque<DateTime<Utc>>,
    /// Dedup key → when its window opened. Keys come from message content, so the hasher is
    /// seeded per process (foldhash), not a fixed function an attacker could collide.
    dedup: foldhash::HashMap<String, DateTime<Utc>>,
    /// Dedup map size after the last sweep of expired keys.
    swept_len: usize,
}

/// `t + d`, saturating at the end of time instead of panicking.
pub(crate) fn plus(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(d)
        .ok()
        .and_then(|d| t.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl RuleState {
    /// Whether `key` repeats inside `window` at `now`.
    pub fn is_duplicate(&self, key: &str, window: Duration, now: DateTime<Utc>) -> bool {
        self.dedup
            .get(key)
            .is_some_and(|opened| now < plus(*opened, window))
    }

    /// Whether firing at `now` would break `limit`.
    pub fn is_rate_limited(&self, limit: RateLimit, now: DateTime<Utc>) -> bool {
        match limit {
            RateLimit::None => false,
            RateLimit::Cooldown(window) => self
                .fires
                .back()
                .is_some_and(|last| now < plus(*last, window)),
            RateLimit::Quota { count, period } => {
                let in_window = self
                    .fires
                    .iter()
                    .filter(|f| now < plus(**f, period))
                    .count();
                in_window >= count as usize
            }
        }
    }

    /// Records a fire at `now`, opening the dedup window of `key` when there is one.
    pub fn record(
        &mut self,
        limit: RateLimit,
        dedup: Option<(String, Duration)>,
        now: DateTime<Utc>,
    ) {
        let keep = match limit {
            RateLimit::Quota { count, .. } => count as usize,
            _ => 1,
        };
        self.fires.push_back(now);
        while self.fires.len() > keep {
            self.fires.pop_front();
        }
        if let Some((key, window)) = dedup {
            self.dedup.insert(key, now);
            // Sweep expired keys when the map has doubled since the last sweep.
            if self.dedup.len() > 2 * self.swept_len.max(512) {
                self.dedup.retain(|_, opened| now < plus(*opened, window));
                self.swept_len = self.dedup.len();
            }
        }
    }

    /// Number of dedup keys remembered (for tests and stats).
    pub fn dedup_len(&self) -> usize {
        self.dedup.len()
    }

    /// What is still in force at `now` under `limit` and `window`, as data.
    pub fn memory(
        &self,
        limit: RateLimit,
        window: Option<Duration>,
        now: DateTime<Utc>,
    ) -> RuleMemory {
        RuleMemory {
            fires: live_fires(self.fires.iter().copied(), limit, now),
            dedup: match window {
                Some(w) => self
                    .dedup
                    .iter()
                    .filter(|(_, opened)| now < plus(**opened, w))
                    .map(|(k, opened)| (k.clone(), *opened))
                    .collect(),
                None => BTreeMap::new(),
            },
        }
    }

    /// The state `memory` describes, without what has expired at `now` under `limit` and
    /// `window` (a rule's windows may have changed while the process was down).
    pub fn from_memory(
        memory: RuleMemory,
        limit: RateLimit,
        window: Option<Duration>,
        now: DateTime<Utc>,
    ) -> RuleState {
        let mut fires = memory.fires;
        fires.sort_unstable();
        let fires: VecDeque<_> = live_fires(fires.into_iter(), limit, now).into();
        let dedup: foldhash::HashMap<String, DateTime<Utc>> = match window {
            Some(w) => memory
                .dedup
                .into_iter()
                .filter(|(_, opened)| now < plus(*opened, w))
                .collect(),
            None => Default::default(),
        };
        RuleState {
            fires,
            swept_len: dedup.len(),
            dedup,
        }
    }
}

/// The fires (oldest first) that still count against `limit` at `now`, at most as many as
/// the limit keeps.
fn live_fires(
    fires: impl Iterator<Item = DateTime<Utc>>,
    limit: RateLimit,
    now: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let (period, keep) = match limit {
        RateLimit::None => return Vec::new(),
        RateLimit::Cooldown(w) => (w, 1),
        RateLimit::Quota { count, period } => (period, count as usize),
    };
    let mut live: Vec<_> = fires.filter(|f| now < plus(*f, period)).collect();
    let extra = live.len().saturating_sub(keep);
    live.drain(..extra);
    live
}

/// One rule's rate-limit and dedup memory as saved in `state.json`: its recent fires and
/// the dedup keys whose window is open, each with when it opened.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RuleMemory {
    /// Fire times, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fires: Vec<DateTime<Utc>>,
    /// Dedup key → when its window opened.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub dedup: BTreeMap<String, DateTime<Utc>>,
}

impl RuleMemory {
    /// Nothing in force.
    pub fn is_empty(&self) -> bool {
        self.fires.is_empty() && self.dedup.is_empty()
    }
}

/// The engine's per-rule memory by rule name: what `state.json` keeps across a restart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LimitsSnapshot(pub BTreeMap<String, RuleMemory>);

/// The default dedup key: at most [`DEDUP_KEY_BYTES`] bytes of `content`, cut at a character
/// boundary (never inside a UTF-8 sequence).
pub fn default_dedup_key(content: &str) -> &str {
    if content.len() <= DEDUP_KEY_BYTES {
        return content;
    }
    let mut end = DEDUP_KEY_BYTES;
    while !content.is_char_boundary(end) {
        end -= 1;
    }
    &content[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn cooldown_boundary_table() {
        // Fire at 0 with a 5 minute cooldown; (try at, allowed)
        let limit = RateLimit::Cooldown(Duration::from_secs(300));
        for (at, allowed) in [(1, false), (299, false), (300, true), (301, true)] {
            let mut s = RuleState::default();
            s.record(limit, None, t(0));
            assert_eq!(!s.is_rate_limited(limit, t(at)), allowed, "at {at}s");
        }
        let exact = t(0) + TimeDelta::milliseconds(299_999);
        let mut s = RuleState::default();
        s.record(limit, None, t(0));
        assert!(
            s.is_rate_limited(limit, exact),
            "one millisecond early is limited"
        );
    }

    #[test]
    fn quota_is_a_sliding_window() {
        let limit = RateLimit::Quota {
            count: 3,
            period: Duration::from_secs(60),
        };
        let mut s = RuleState::default();
        for at in [0, 10, 20] {
            assert!(!s.is_rate_limited(limit, t(at)));
            s.record(limit, None, t(at));
        }
        assert!(s.is_rate_limited(limit, t(30)), "4th inside the minute");
        assert!(s.is_rate_limited(limit, t(59)));
        assert!(
            !s.is_rate_limited(limit, t(60)),
            "first fire left the window"
        );
        s.record(limit, None, t(60));
        assert!(s.is_rate_limited(limit, t(69)));
        assert!(!s.is_rate_limited(limit, t(70)));
    }

    #[test]
    fn dedup_window_is_not_extended_by_checks() {
        let w = Duration::from_secs(60);
        let mut s = RuleState::default();
        s.record(RateLimit::None, Some(("k".into(), w)), t(0));
        assert!(s.is_duplicate("k", w, t(30)));
        assert!(s.is_duplicate("k", w, t(59)));
        assert!(!s.is_duplicate("k", w, t(60)));
        assert!(!s.is_duplicate("other", w, t(1)));
    }

    #[test]
    fn dedup_map_is_swept() {
        let w = Duration::from_secs(1);
        let mut s = RuleState::default();
        for i in 0..10_000 {
            s.record(RateLimit::None, Some((format!("k{i}"), w)), t(i));
        }
        assert!(
            s.dedup_len() < 2048,
            "expired keys are swept: {}",
            s.dedup_len()
        );
    }

    #[test]
    fn dedup_key_cut_table() {
        let ascii = "a".repeat(300);
        assert_eq!(default_dedup_key(&ascii).len(), 256);
        // 255 ASCII bytes, then a 3-byte character straddling the 256-byte cut.
        let straddle = format!("{}€tail", "a".repeat(255));
        assert_eq!(default_dedup_key(&straddle), "a".repeat(255));
        // 4-byte characters: 64 of them are exactly 256 bytes.
        let emoji = "🚨".repeat(100);
        assert_eq!(default_dedup_key(&emoji), "🚨".repeat(64));
        let crab = format!("x{}", "🦀".repeat(100));
        assert_eq!(default_dedup_key(&crab).len(), 253);
        assert_eq!(default_dedup_key("short"), "short");
        assert_eq!(default_dedup_key(""), "");
    }
}
