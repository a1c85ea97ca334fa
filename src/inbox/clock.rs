//! The time an append stamps on its messages: `Utc::now()`, with the calendar date worked out
//! once a day per thread instead of on every call.
//!
//! `chrono`'s `Utc::now` turns the seconds since the epoch into a date (year, ordinal, leap
//! flags) on every call, which was about a tenth of an in-memory append by `perf`. The date
//! only changes at midnight UTC, so each thread keeps the last day it saw and its date; the
//! time of day is plain arithmetic.

use std::cell::Cell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, NaiveDate, NaiveTime, Utc};

const SECS_PER_DAY: u64 = 86_400;

thread_local! {
    /// The last day this thread stamped, in days since the epoch, and its date.
    static DAY: Cell<(u64, NaiveDate)> = const { Cell::new((u64::MAX, NaiveDate::MIN)) };
}

/// Now, as `Utc::now()` gives it (the system clock, to the nanosecond).
pub fn now() -> DateTime<Utc> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(at)
        // A clock before 1970 or past chrono's range: rare enough for the general path.
        .unwrap_or_else(Utc::now)
}

/// The time `since` the epoch, the date from this thread's last day when it is the same.
fn at(since: Duration) -> Option<DateTime<Utc>> {
    let (secs, nanos) = (since.as_secs(), since.subsec_nanos());
    let day = secs / SECS_PER_DAY;
    let date = match DAY.get() {
        (seen, date) if seen == day => date,
        _ => {
            let date =
                DateTime::from_timestamp(i64::try_from(day * SECS_PER_DAY).ok()?, 0)?.date_naive();
            DAY.set((day, date));
            date
        }
    };
    let time = NaiveTime::from_num_seconds_from_midnight_opt((secs % SECS_PER_DAY) as u32, nanos)?;
    Some(date.and_time(time).and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_chronos_now() {
        for _ in 0..1000 {
            let before = Utc::now();
            let ours = now();
            let after = Utc::now();
            assert!(
                before <= ours && ours <= after,
                "{before} <= {ours} <= {after}"
            );
        }
    }

    #[test]
    fn the_date_follows_the_day() {
        // One thread, in this order: each midnight must replace the date it kept, and a day
        // seen again must give its own date, not the last one's.
        for (secs, nanos) in [
            (1_767_225_599, 999_999_999), // 2025-12-31 23:59:59.999999999
            (1_767_225_600, 0),           // 2026-01-01 00:00:00
            (1_767_225_601, 5),
            (1_772_323_199, 1), // 2026-02-28 23:59:59
            (1_772_323_200, 0), // 2026-03-01 00:00:00
            (951_782_400, 0),   // 2000-02-29 00:00:00
            (0, 0),
            (1_772_323_199, 7),
            (253_402_300_799, 0), // 9999-12-31 23:59:59
        ] {
            assert_eq!(
                at(Duration::new(secs, nanos)),
                DateTime::from_timestamp(secs as i64, nanos),
                "{secs}.{nanos:09}"
            );
        }
    }
}
