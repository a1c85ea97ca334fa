//! Time intervals as Alertmanager's `time_intervals`: the top-level `"timeIntervals"` object
//! of `triggers.json` names lists of intervals, and a rule's `activeTimeIntervals` (fires only
//! inside one of them) and `muteTimeIntervals` (never inside any) refer to them by name.
//!
//! An interval holds at an instant when every field it has holds, read on the wall clock of
//! its `location` (an IANA zone, default UTC; so `09:00`–`17:00` in `Europe/Berlin` stays
//! 09:00–17:00 Berlin time across a daylight-saving change):
//! - `times`: `startTime` ≤ time of day < `endTime`, `HH:MM`, `endTime` up to `24:00`;
//! - `weekdays`: `monday`, or a range `monday:friday` (Sunday first, as Alertmanager counts);
//! - `daysOfMonth`: `1`…`31`, or from the end of the month `-1` (the last day)…`-31`, and
//!   ranges (`1:5`, `-3:-1`, `25:-1`); a day past the month's end is skipped, not carried over;
//! - `months`: `january`…`december` or `1`…`12`, and ranges;
//! - `years`: `2026`, and ranges `2026:2027`.
//!
//! Names are case-insensitive. A list holds when any of its intervals holds; a field that is
//! absent (or empty) holds always. The zone database is the one built into the binary
//! (chrono-tz), so a host without `/usr/share/zoneinfo` (a container) reads zones the same.

use chrono::{DateTime, Datelike, NaiveDate, Timelike, Utc};
use chrono_tz::Tz;

use super::file::RawTimeInterval;

/// One interval, compiled.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeInterval {
    /// Minutes of the day, `[start, end)`.
    times: Vec<(u16, u16)>,
    /// Days from Sunday (0) to Saturday (6), inclusive ranges.
    weekdays: Vec<(u8, u8)>,
    /// Days of the month, negative from the end, inclusive ranges.
    days_of_month: Vec<(i8, i8)>,
    /// Months 1–12, inclusive ranges.
    months: Vec<(u8, u8)>,
    /// Years, inclusive ranges.
    years: Vec<(i32, i32)>,
    location: Tz,
}

/// A named list of intervals, as a rule refers to it.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedIntervals {
    /// The name in `timeIntervals`.
    pub name: String,
    /// Any of these.
    pub intervals: Vec<TimeInterval>,
}

impl NamedIntervals {
    /// Whether `t` is inside any of the intervals.
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.intervals.iter().any(|i| i.contains(t))
    }
}

/// A field of an interval that does not parse: which field (as written) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntervalError {
    /// `times`, `weekdays`, `daysOfMonth`, `months`, `years` or `location`.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

const WEEKDAYS: [&str; 7] = [
    "sunday",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
];

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

impl TimeInterval {
    /// Compiles one interval as written.
    pub fn new(raw: &RawTimeInterval) -> Result<TimeInterval, IntervalError> {
        let fail = |field: &'static str| move |reason: String| IntervalError { field, reason };
        let mut times = Vec::new();
        for t in raw.times.iter().flatten() {
            let start =
                minutes(t.start_time.as_deref(), "startTime", false).map_err(fail("times"))?;
            let end = minutes(t.end_time.as_deref(), "endTime", true).map_err(fail("times"))?;
            if start >= end {
                return Err(IntervalError {
                    field: "times",
                    reason: format!(
                        "`startTime` \"{}\" must be before `endTime` \"{}\"; a range across midnight is two ranges (\"22:00\"–\"24:00\" and \"00:00\"–\"06:00\")",
                        t.start_time.as_deref().unwrap_or(""),
                        t.end_time.as_deref().unwrap_or("")
                    ),
                });
            }
            times.push((start, end));
        }
        let weekdays = ranges(raw.weekdays.as_deref(), |s| {
            named(s, &WEEKDAYS, 0, "weekday")
        })
        .map_err(fail("weekdays"))?;
        let months = ranges(raw.months.as_deref(), |s| {
            if let Ok(n) = s.parse::<u8>() {
                return (1..=12)
                    .contains(&n)
                    .then_some(n)
                    .ok_or(format!("month {n} is not in 1..12"));
            }
            named(s, &MONTHS, 1, "month")
        })
        .map_err(fail("months"))?;
        let years = ranges(raw.years.as_deref(), |s| {
            s.parse::<i32>()
                .ok()
                .filter(|y| (1..=9999).contains(y))
                .ok_or(format!("\"{s}\" is not a year"))
        })
        .map_err(fail("years"))?;
        let days_of_month = days(raw.days_of_month.as_deref()).map_err(fail("daysOfMonth"))?;
        let location = match raw.location.as_deref().map(str::trim) {
            None | Some("") => Tz::UTC,
            Some(name) => time_zone(name).map_err(|hint| IntervalError {
                field: "location",
                reason: format!("unknown time zone \"{name}\"; {hint}"),
            })?,
        };
        Ok(TimeInterval {
            times,
            weekdays,
            days_of_month,
            months,
            years,
            location,
        })
    }

    /// Whether the instant `t` is inside the interval, on its location's wall clock.
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        let local = t.with_timezone(&self.location);
        let within =
            |v, list: &[(_, _)]| list.is_empty() || list.iter().any(|&(a, b)| a <= v && v <= b);
        if !self.times.is_empty() {
            let m = (local.hour() * 60 + local.minute()) as u16;
            if !self.times.iter().any(|&(a, b)| a <= m && m < b) {
                return false;
            }
        }
        if !within(local.weekday().num_days_from_sunday() as u8, &self.weekdays)
            || !within(local.month() as u8, &self.months)
        {
            return false;
        }
        if !self.years.is_empty()
            && !self
                .years
                .iter()
                .any(|&(a, b)| a <= local.year() && local.year() <= b)
        {
            return false;
        }
        if !self.days_of_month.is_empty() {
            let (day, len) = (
                local.day() as i32,
                days_in_month(local.year(), local.month()),
            );
            let at = |d: i8| if d < 0 { len + 1 + d as i32 } else { d as i32 };
            let inside = self.days_of_month.iter().any(|&(a, b)| {
                let (a, b) = (at(a), at(b));
                // A range that starts past this month's end is not in this month.
                a <= len && a.max(1) <= day && day <= b.min(len)
            });
            if !inside {
                return false;
            }
        }
        true
    }
}

fn days_in_month(year: i32, month: u32) -> i32 {
    let (y, m) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    NaiveDate::from_ymd_opt(y, m, 1)
        .and_then(|d| d.pred_opt())
        .map_or(31, |d| d.day() as i32)
}

/// `HH:MM` → minutes of the day; `24:00` only where `allow_24`.
fn minutes(text: Option<&str>, key: &str, allow_24: bool) -> Result<u16, String> {
    let Some(text) = text else {
        return Err(format!("every entry of `times` needs `{key}`"));
    };
    let bad = || format!("`{key}` \"{text}\" is not a time of day as HH:MM (00:00 to 24:00)");
    let (h, m) = text.trim().split_once(':').ok_or_else(bad)?;
    if h.len() != 2 || m.len() != 2 {
        return Err(bad());
    }
    let (h, m): (u16, u16) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if m > 59 || h > 24 || (h == 24 && (m != 0 || !allow_24)) {
        return Err(bad());
    }
    Ok(h * 60 + m)
}

/// A name from `names` (case-insensitive) → its index plus `base`.
fn named(s: &str, names: &[&str], base: u8, what: &str) -> Result<u8, String> {
    names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(s))
        .map(|i| i as u8 + base)
        .ok_or_else(|| {
            format!(
                "unknown {what} \"{s}\"; expected one of {}",
                names.join(", ")
            )
        })
}

/// `a` or `a:b` entries, each end read by `one`; `a` must not come after `b`.
fn ranges<T: PartialOrd + Copy>(
    list: Option<&[String]>,
    one: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<(T, T)>, String> {
    let mut out = Vec::new();
    for entry in list.unwrap_or_default() {
        let (a, b) = match entry.split_once(':') {
            Some((a, b)) => (one(a.trim())?, one(b.trim())?),
            None => {
                let v = one(entry.trim())?;
                (v, v)
            }
        };
        if a > b {
            return Err(format!("range \"{entry}\" starts after it ends"));
        }
        out.push((a, b));
    }
    Ok(out)
}

/// Days of the month: `1`..`31` or `-1`..`-31`, single or as ranges.
fn days(list: Option<&[String]>) -> Result<Vec<(i8, i8)>, String> {
    let one = |s: &str| {
        s.parse::<i8>()
            .ok()
            .filter(|d| *d != 0 && (-31..=31).contains(d))
            .ok_or(format!(
                "day \"{s}\" is not in 1..31 or -31..-1 (-1 is the last day of the month)"
            ))
    };
    let mut out = Vec::new();
    for entry in list.unwrap_or_default() {
        let (a, b) = match entry.split_once(':') {
            Some((a, b)) => (one(a.trim())?, one(b.trim())?),
            None => {
                let d = one(entry.trim())?;
                (d, d)
            }
        };
        // Same sign: in order. From the end to a day from the start (`-3:5`) is never a range.
        let ok = if (a < 0) == (b < 0) { a <= b } else { a > 0 };
        if !ok {
            return Err(format!("range \"{entry}\" starts after it ends"));
        }
        out.push((a, b));
    }
    Ok(out)
}

/// The IANA time zone `name`; else a hint: `did you mean "America/New_York"?` (for a name
/// that differs only in case, or a close one), or an example.
pub fn time_zone(name: &str) -> Result<Tz, String> {
    if let Ok(tz) = name.parse::<Tz>() {
        return Ok(tz);
    }
    let names: Vec<&str> = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect();
    let hint = match super::error::suggest(name, &names) {
        Some(close) => format!("did you mean \"{close}\"?"),
        None => "use an IANA name such as \"Europe/Berlin\" or \"UTC\"".into(),
    };
    Err(hint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::file::{RawTimeInterval, RawTimeRange};
    use chrono::TimeZone;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn list(v: &[&str]) -> Option<Vec<String>> {
        Some(v.iter().map(|s| s.to_string()).collect())
    }

    fn interval(f: impl FnOnce(&mut RawTimeInterval)) -> TimeInterval {
        let mut raw = RawTimeInterval::default();
        f(&mut raw);
        TimeInterval::new(&raw).unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn times(start: &str, end: &str) -> Option<Vec<RawTimeRange>> {
        Some(vec![RawTimeRange {
            start_time: Some(start.into()),
            end_time: Some(end.into()),
        }])
    }

    #[test]
    fn times_are_start_inclusive_end_exclusive() {
        let i = interval(|r| r.times = times("09:00", "17:00"));
        for (t, want) in [
            ("2026-11-23T08:59:59Z", false),
            ("2026-11-23T09:00:00Z", true),
            ("2026-11-23T16:59:59Z", true),
            ("2026-11-23T17:00:00Z", false),
        ] {
            assert_eq!(i.contains(at(t)), want, "{t}");
        }
        let late = interval(|r| r.times = times("22:00", "24:00"));
        assert!(late.contains(at("2026-11-23T23:59:00Z")));
        assert!(!late.contains(at("2026-11-23T00:00:00Z")));
    }

    #[test]
    fn weekdays_and_ranges() {
        let i = interval(|r| r.weekdays = list(&["monday:friday"]));
        // 2026-11-22 is a Sunday.
        let days: Vec<bool> = (22..=28)
            .map(|d| i.contains(Utc.with_ymd_and_hms(2026, 11, d, 12, 0, 0).unwrap()))
            .collect();
        assert_eq!(days, [false, true, true, true, true, true, false]);
        let weekend = interval(|r| r.weekdays = list(&["Saturday", "sunday"]));
        assert!(weekend.contains(at("2026-11-22T12:00:00Z")));
        assert!(weekend.contains(at("2026-11-28T12:00:00Z")));
        assert!(!weekend.contains(at("2026-11-23T12:00:00Z")));
    }

    #[test]
    fn days_of_month_from_the_start_and_the_end() {
        let table: &[(&[&str], &str, bool)] = &[
            (&["1"], "2026-02-01T00:00:00Z", true),
            (&["1:5"], "2026-02-05T23:59:00Z", true),
            (&["1:5"], "2026-02-06T00:00:00Z", false),
            (&["-1"], "2026-02-28T12:00:00Z", true),
            (&["-1"], "2028-02-28T12:00:00Z", false),
            (&["-1"], "2028-02-29T12:00:00Z", true),
            (&["-3:-1"], "2026-11-28T12:00:00Z", true),
            (&["-3:-1"], "2026-11-27T12:00:00Z", false),
            (&["25:-1"], "2026-11-30T12:00:00Z", true),
            // Past the month's end: not carried into the next month.
            (&["31"], "2026-11-30T12:00:00Z", false),
            (&["31"], "2026-12-01T12:00:00Z", false),
            (&["30:31"], "2026-02-28T12:00:00Z", false),
            (&["28:31"], "2026-02-28T12:00:00Z", true),
        ];
        for (days, t, want) in table {
            let i = interval(|r| r.days_of_month = list(days));
            assert_eq!(i.contains(at(t)), *want, "{days:?} at {t}");
        }
    }

    #[test]
    fn months_and_years() {
        let q1 = interval(|r| r.months = list(&["january:march"]));
        assert!(q1.contains(at("2026-03-31T23:00:00Z")));
        assert!(!q1.contains(at("2026-04-01T00:00:00Z")));
        let numbers = interval(|r| r.months = list(&["12", "6:7"]));
        assert!(numbers.contains(at("2026-12-24T00:00:00Z")));
        assert!(numbers.contains(at("2026-07-01T00:00:00Z")));
        assert!(!numbers.contains(at("2026-08-01T00:00:00Z")));
        let years = interval(|r| r.years = list(&["2026:2027", "2030"]));
        for (t, want) in [
            ("2025-12-31T23:59:00Z", false),
            ("2026-01-01T00:00:00Z", true),
            ("2027-12-31T00:00:00Z", true),
            ("2028-06-01T00:00:00Z", false),
            ("2030-06-01T00:00:00Z", true),
        ] {
            assert_eq!(years.contains(at(t)), want, "{t}");
        }
    }

    #[test]
    fn every_field_must_hold() {
        let i = interval(|r| {
            r.times = times("09:00", "17:00");
            r.weekdays = list(&["monday:friday"]);
            r.months = list(&["november"]);
        });
        assert!(
            i.contains(at("2026-11-23T10:00:00Z")),
            "Monday 10:00 in November"
        );
        assert!(!i.contains(at("2026-11-22T10:00:00Z")), "Sunday");
        assert!(!i.contains(at("2026-11-23T18:00:00Z")), "after hours");
        assert!(!i.contains(at("2026-12-01T10:00:00Z")), "December");
        let always = interval(|_| {});
        assert!(always.contains(at("2026-11-22T03:00:00Z")));
    }

    /// The interval is read on the zone's wall clock, so business hours stay 09:00–17:00
    /// local time on both sides of a daylight-saving change, and the day is the local day.
    #[test]
    fn time_zones_across_a_dst_change() {
        let berlin = interval(|r| {
            r.times = times("09:00", "17:00");
            r.weekdays = list(&["monday:friday"]);
            r.location = Some("Europe/Berlin".into());
        });
        // Berlin moves from UTC+1 to UTC+2 on Sunday 2026-03-29.
        for (t, want) in [
            ("2026-03-27T07:59:00Z", false), // Friday 08:59 CET
            ("2026-03-27T08:00:00Z", true),  // Friday 09:00 CET
            ("2026-03-27T15:59:00Z", true),  // Friday 16:59 CET
            ("2026-03-27T16:00:00Z", false), // Friday 17:00 CET
            ("2026-03-30T06:59:00Z", false), // Monday 08:59 CEST
            ("2026-03-30T07:00:00Z", true),  // Monday 09:00 CEST
            ("2026-03-30T08:00:00Z", true),  // Monday 10:00 CEST
            ("2026-03-30T14:59:00Z", true),  // Monday 16:59 CEST
            ("2026-03-30T15:00:00Z", false), // Monday 17:00 CEST
        ] {
            assert_eq!(berlin.contains(at(t)), want, "{t}");
        }
        // The night of the change: 02:00–03:00 local does not exist that day.
        let night = interval(|r| {
            r.times = times("02:00", "03:00");
            r.location = Some("Europe/Berlin".into());
        });
        assert!(
            night.contains(at("2026-03-28T01:30:00Z")),
            "02:30 CET the day before"
        );
        assert!(!night.contains(at("2026-03-29T00:59:00Z")), "01:59 CET");
        assert!(
            !night.contains(at("2026-03-29T01:00:00Z")),
            "03:00 CEST, straight after 01:59"
        );
        // New York changes on another date (2026-03-08): the weekday is New York's.
        let ny = interval(|r| {
            r.weekdays = list(&["friday"]);
            r.location = Some("America/New_York".into());
        });
        assert!(
            ny.contains(at("2026-03-07T03:00:00Z")),
            "still Friday 22:00 in New York"
        );
        assert!(
            !ny.contains(at("2026-03-07T06:00:00Z")),
            "Saturday 01:00 in New York"
        );
    }

    #[test]
    fn bad_fields_name_the_field() {
        type Case = (fn(&mut RawTimeInterval), &'static str, &'static str);
        let table: &[Case] = &[
            (|r| r.times = times("9:00", "17:00"), "times", "HH:MM"),
            (|r| r.times = times("09:00", "24:01"), "times", "HH:MM"),
            (|r| r.times = times("24:00", "24:00"), "times", "HH:MM"),
            (|r| r.times = times("17:00", "09:00"), "times", "before"),
            (
                |r| {
                    r.times = Some(vec![RawTimeRange {
                        start_time: Some("09:00".into()),
                        end_time: None,
                    }])
                },
                "times",
                "needs `endTime`",
            ),
            (
                |r| r.weekdays = list(&["funday"]),
                "weekdays",
                "unknown weekday",
            ),
            (
                |r| r.weekdays = list(&["friday:monday"]),
                "weekdays",
                "starts after",
            ),
            (
                |r| r.days_of_month = list(&["0"]),
                "daysOfMonth",
                "not in 1..31",
            ),
            (
                |r| r.days_of_month = list(&["32"]),
                "daysOfMonth",
                "not in 1..31",
            ),
            (
                |r| r.days_of_month = list(&["-1:-3"]),
                "daysOfMonth",
                "starts after",
            ),
            (
                |r| r.days_of_month = list(&["-3:5"]),
                "daysOfMonth",
                "starts after",
            ),
            (|r| r.months = list(&["13"]), "months", "not in 1..12"),
            (|r| r.months = list(&["smarch"]), "months", "unknown month"),
            (|r| r.years = list(&["2027:2026"]), "years", "starts after"),
            (|r| r.years = list(&["soon"]), "years", "not a year"),
            (
                |r| r.location = Some("Mars/Olympus".into()),
                "location",
                "unknown time zone",
            ),
        ];
        for (f, field, reason) in table {
            let mut raw = RawTimeInterval::default();
            f(&mut raw);
            let e = TimeInterval::new(&raw).unwrap_err();
            assert_eq!(e.field, *field, "{raw:?}");
            assert!(e.reason.contains(reason), "{raw:?}: {}", e.reason);
        }
    }

    #[test]
    fn a_time_zone_in_the_wrong_case_or_misspelt_is_named() {
        assert_eq!(
            time_zone("America/New_York"),
            Ok(chrono_tz::America::New_York)
        );
        assert_eq!(
            time_zone("America/New_york"),
            Err("did you mean \"America/New_York\"?".into())
        );
        assert_eq!(
            time_zone("Europe/Pariss"),
            Err("did you mean \"Europe/Paris\"?".into())
        );
        assert!(
            time_zone("Mars/Olympus")
                .unwrap_err()
                .contains("such as \"Europe/Berlin\"")
        );
    }
}
