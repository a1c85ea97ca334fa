//! Durations as switchboard's files write them (`triggers.json`, `switchboard.json`): Go's
//! syntax (so chatcli files load unchanged) and humantime's longer forms. A ground-floor module:
//! the rules, the action settings, exec, HTTP ingest and the upstreams all read durations here.
//!
//! Go: `0`, `250ms`, `1.5s`, `1h30m`, units `ns us µs ms s m h`. humantime: `5 minutes`, `1d`,
//! `2h 30m`. `"0"` means zero (no limit); any other bare number is an error, because `"30"` could
//! mean seconds or minutes and a guess would silently change a rule.
//!
//! [`Backoff`] is the one wait between the tries of something that fails, for every retry loop of
//! the crate: the journals' writers, the dispatcher, the listeners' accepts, the upstreams'
//! reconnects (with full jitter), JetStream's consumers and publishers.

use std::time::Duration;

/// The waits between the tries of something that fails: `first`, then doubling up to `max`
/// (with [`Backoff::full_jitter`], each wait drawn uniformly below that ceiling, so that many
/// clients failing together do not retry together). [`Backoff::reset`] after a success.
#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    /// The ceiling of the next wait.
    ceiling: Duration,
    jitter: bool,
}

impl Backoff {
    /// Waits from `first`, doubling up to `max`.
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            ceiling: first,
            jitter: false,
        }
    }

    /// Each wait uniform in [0, ceiling], the ceiling doubling from `first` to `max`
    /// ("full jitter").
    pub const fn full_jitter(mut self) -> Backoff {
        self.jitter = true;
        self
    }

    /// The next wait; the one after it is twice as long, up to the maximum.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Duration {
        let ceiling = self.ceiling;
        self.ceiling = ceiling.saturating_mul(2).min(self.max);
        if !self.jitter {
            return ceiling;
        }
        let r = getrandom::u64().unwrap_or(u64::MAX / 2);
        ceiling.mul_f64((r >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// Whether no failure has been counted since the start or the last reset.
    pub fn is_reset(&self) -> bool {
        self.ceiling == self.first
    }

    /// Starts again from the first wait (after a success).
    pub fn reset(&mut self) {
        self.ceiling = self.first;
    }

    /// Sleeps the next wait; false, at once, when `shutdown` fires first.
    pub async fn sleep(&mut self, shutdown: &tokio_util::sync::CancellationToken) -> bool {
        let wait = self.next();
        tokio::select! {
            _ = shutdown.cancelled() => false,
            _ = tokio::time::sleep(wait) => true,
        }
    }
}

/// Parses a quota, `"N/period"`: N a whole number above zero, the period a duration
/// (`"10/1h"`) or a bare unit (`"10/h"`) longer than zero. The error is the reason, ready to
/// follow a colon. Rules' `rateLimit` and the ingest `http.rateLimit` both take this form.
pub fn parse_quota(count: &str, period: &str) -> Result<(std::num::NonZeroU32, Duration), String> {
    let count = count
        .trim()
        .parse::<u32>()
        .ok()
        .and_then(std::num::NonZeroU32::new)
        .ok_or_else(|| {
            format!(
                "the count before `/` must be a whole number above zero, got \"{}\"",
                count.trim()
            )
        })?;
    let period = period.trim();
    let period = if period.starts_with(|c: char| c.is_ascii_digit()) {
        parse(period)?
    } else {
        parse(&format!("1{period}"))?
    };
    if period.is_zero() {
        return Err("the period after `/` must be longer than zero".into());
    }
    Ok((count, period))
}

/// The longest duration any file or argument may give: 100 years (`"876000h"`). Longer ones
/// are refused as they are read, so that no deadline computed from one (now + it) overflows.
pub const MAX: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// Parses a rules-file duration, at most [`MAX`]; the error is the reason, ready to follow a
/// colon.
pub fn parse(text: &str) -> Result<Duration, String> {
    let d = parse_unbounded(text)?;
    if d > MAX {
        return Err(format!(
            "\"{}\" is longer than the longest duration, 100 years (\"876000h\")",
            text.trim()
        ));
    }
    Ok(d)
}

fn parse_unbounded(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration; write e.g. \"5m\", or \"0\" for none".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err("a duration cannot be negative".into());
    }
    if s.parse::<f64>().is_ok() {
        return Err(format!(
            "a bare number needs a unit (\"{s}s\", \"{s}m\") or \"0\""
        ));
    }
    if let Some(d) = parse_go(s.strip_prefix('+').unwrap_or(s)) {
        return Ok(d);
    }
    humantime::parse_duration(s).map_err(|e| match e {
        humantime::DurationError::UnknownUnit { unit, .. } => format!(
            "unknown unit \"{unit}\"; use Go's units (ns, us, ms, s, m, h: \"1h30m\", \"250ms\") or \
             words (\"5 minutes\", \"2 hours\", \"1 day\")"
        ),
        humantime::DurationError::NumberOverflow => "the duration is too long".into(),
        _ => "not a duration; expected Go syntax (\"1h30m\", \"250ms\") or words (\"5 minutes\")"
            .into(),
    })
}

/// Go's `time.ParseDuration` for non-negative values: one or more `<decimal><unit>` terms.
fn parse_go(s: &str) -> Option<Duration> {
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        if num.is_empty() || num == "." {
            return None;
        }
        let value: f64 = num.parse().ok()?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let nanos_per = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += value * nanos_per;
        rest = tail;
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return None;
    }
    Some(Duration::from_nanos(total.round() as u64))
}

/// Serde for a setting written as a duration (`"10m"`, `"90s"`), in this syntax; zero is
/// refused. Written back in humantime's form. Use as `#[serde(with = "crate::duration::text")]`.
pub mod text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `d` as humantime text (`"10m"`).
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    /// Reads a duration longer than zero.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        match super::parse(&text) {
            Ok(d) if !d.is_zero() => Ok(d),
            Ok(_) => Err(serde::de::Error::custom(format!(
                "invalid duration \"{text}\": must be longer than zero"
            ))),
            Err(reason) => Err(serde::de::Error::custom(format!(
                "invalid duration \"{text}\": {reason}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_maximum_and_starts_again_after_a_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(500));
        assert!(b.is_reset());
        let waits: Vec<_> = (0..5).map(|_| b.next()).collect();
        assert_eq!(waits, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
        assert!(!b.is_reset());
        b.reset();
        assert!(b.is_reset());
        assert_eq!(b.next(), ms(100));
    }

    #[test]
    fn full_jitter_stays_under_a_doubling_ceiling() {
        let first = Duration::from_millis(500);
        let max = Duration::from_secs(30);
        let mut b = Backoff::new(first, max).full_jitter();
        for attempt in 0..40u32 {
            let ceiling = first.saturating_mul(1 << attempt.min(16)).min(max);
            for _ in 0..20 {
                let mut again = b.clone();
                assert!(again.next() <= ceiling, "attempt {attempt}");
            }
            b.next();
        }
        // At the cap the waits spread over [0, max]: full jitter, not the ceiling each time.
        let late: Vec<_> = (0..200).map(|_| b.clone().next()).collect();
        let (low, high) = (
            late.iter().min().copied().unwrap(),
            late.iter().max().copied().unwrap(),
        );
        assert!(low < max / 4 && high > max * 3 / 4, "{low:?}..{high:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_sleep_ends_at_shutdown() {
        let mut b = Backoff::new(Duration::from_secs(3600), Duration::from_secs(3600));
        let shutdown = tokio_util::sync::CancellationToken::new();
        let started = tokio::time::Instant::now();
        assert!(b.sleep(&shutdown).await, "slept the whole wait");
        assert_eq!(started.elapsed(), Duration::from_secs(3600));
        shutdown.cancel();
        assert!(!b.sleep(&shutdown).await);
    }

    #[test]
    fn go_and_humantime_forms() {
        let table: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("250ms", Duration::from_millis(250)),
            ("1.5s", Duration::from_millis(1500)),
            ("1h30m", Duration::from_secs(5400)),
            (
                "2h45m30.5s",
                Duration::from_millis((2 * 3600 + 45 * 60 + 30) * 1000 + 500),
            ),
            ("10us", Duration::from_micros(10)),
            ("10µs", Duration::from_micros(10)),
            ("5m", Duration::from_secs(300)),
            ("5 minutes", Duration::from_secs(300)),
            ("1d", Duration::from_secs(86400)),
            ("2h 30m", Duration::from_secs(9000)),
            (" 30s ", Duration::from_secs(30)),
        ];
        for (text, want) in table {
            assert_eq!(parse(text).as_ref(), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejected_forms() {
        for text in ["", "30", "1.5", "-5m", "5 parsecs", "m", "5x"] {
            assert!(parse(text).is_err(), "{text:?} should be rejected");
        }
        assert!(parse("30").unwrap_err().contains("\"30s\""));
        assert_eq!(
            parse("5 minuts").unwrap_err(),
            "unknown unit \"minuts\"; use Go's units (ns, us, ms, s, m, h: \"1h30m\", \"250ms\") or \
             words (\"5 minutes\", \"2 hours\", \"1 day\")",
            "our words, not humantime's"
        );
        assert!(
            parse("fortnight")
                .unwrap_err()
                .starts_with("not a duration; expected Go syntax")
        );
    }

    /// Issue 46: `duty on --for 99999999999h` parsed, and `now +` it panicked a daemon task.
    #[test]
    fn durations_are_bounded() {
        assert_eq!(parse("876000h"), Ok(MAX));
        for text in [
            "99999999999h",
            "876001h",
            "200 years",
            "1000000000000000000000s",
        ] {
            let e = parse(text).unwrap_err();
            assert!(
                e.contains("longer than the longest") || e.contains("too long"),
                "{text}: {e}"
            );
        }
        assert_eq!(
            parse("99999999999h").unwrap_err(),
            "\"99999999999h\" is longer than the longest duration, 100 years (\"876000h\")"
        );
    }
}
