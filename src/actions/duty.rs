//! Stop hooks' memory: on-duty mode (kept in `duty.json` in the home) and, per host session,
//! how many stops in a row switchboard has blocked.
//!
//! A host runs `switchboard hook stop` when its agent is about to end a turn; the hook may
//! block the stop, and the host then starts another turn. Both hosts served (Copilot CLI,
//! Claude Code) end the turn by themselves after 8 blocks in a row, so the daemon counts the
//! blocks of each host session and lets the stop through at [`MAX_BLOCKS`], before the host's
//! cap would cut a turn that was handed work. A stop that does not follow a forced
//! continuation (the host's `stop_hook_active` is false) starts the count again.
//!
//! On duty, a stop with nothing queued is blocked too, with an instruction to call the wait
//! tool, so that the agent keeps listening; off duty (the default), it goes through. Duty is
//! the operator's choice and survives a restart of the daemon: it is written to `duty.json`
//! (atomically) when it changes, and an expired `--for` reads as off.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The most stops in a row the hooks block in one host session: one below the hosts' cap of
/// 8, so the host never cuts a turn the hook handed work to.
pub const MAX_BLOCKS: u32 = 7;

/// How many host sessions' counts are kept (the oldest is forgotten first).
const MAX_TRACKED_SESSIONS: usize = 1024;

/// On-duty mode as `duty.json` keeps it and `status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DutyView {
    /// On duty now.
    pub on: bool,
    /// When duty ends by itself (RFC 3339), for `duty on --for`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
}

/// What the stop hooks did, by host: the counters `stats`, `status` and `/metrics` show.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookStats {
    /// On-duty mode now.
    pub duty: DutyView,
    /// Stops seen, by host and by outcome (`delivered`, `confirm`, `duty`, `through`,
    /// `capped`, `released`).
    #[serde(default)]
    pub stops: BTreeMap<String, BTreeMap<String, u64>>,
}

/// The stop hooks' state (owned by the core; cheap to share behind its lock).
#[derive(Default)]
pub struct Duty {
    path: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    duty: DutyView,
    /// Blocks in a row per host session, and the order sessions were first seen in.
    blocks: HashMap<String, u32>,
    order: VecDeque<String>,
    stops: BTreeMap<String, BTreeMap<String, u64>>,
}

impl Duty {
    /// Off duty, kept in memory only (tests, a core without a home).
    pub fn memory() -> Duty {
        Duty::default()
    }

    /// Reads `path` (`duty.json`); a missing file is off duty, an unreadable one is logged and
    /// read as off duty.
    pub fn load(path: PathBuf) -> Duty {
        let duty = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), cause = %e, "duty file unreadable; off duty");
                DutyView::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => DutyView::default(),
            Err(e) => {
                tracing::warn!(path = %path.display(), cause = %e, "duty file unreadable; off duty");
                DutyView::default()
            }
        };
        Duty {
            path: Some(path),
            state: Mutex::new(State {
                duty,
                ..State::default()
            }),
        }
    }

    /// On-duty mode at `now` (a `--for` that ran out reads as off).
    pub fn view(&self, now: DateTime<Utc>) -> DutyView {
        current(&self.state.lock().unwrap().duty, now)
    }

    /// Goes on or off duty (on: until `until`, or until turned off), written to the duty file
    /// before it returns.
    pub fn set(&self, on: bool, until: Option<DateTime<Utc>>) -> std::io::Result<DutyView> {
        let view = DutyView {
            on,
            until: until.filter(|_| on),
        };
        let mut s = self.state.lock().unwrap();
        if let Some(path) = &self.path {
            let mut text = serde_json::to_vec_pretty(&view).map_err(std::io::Error::other)?;
            text.push(b'\n');
            crate::home::write_atomic(path, &text)?;
        }
        s.duty = view.clone();
        if !on {
            // Off duty: the next stop of every session starts a fresh count.
            s.blocks.clear();
            s.order.clear();
        }
        tracing::info!(on, until = ?view.until, "on-duty mode {}", if on { "on" } else { "off" });
        Ok(view)
    }

    /// A stop of host session `session`: `continued` is the host's `stop_hook_active` (this
    /// stop follows a forced continuation). Returns whether the stop may still be blocked.
    pub fn may_block(&self, session: &str, continued: bool) -> bool {
        let mut s = self.state.lock().unwrap();
        if !continued {
            s.blocks.remove(session);
        }
        s.blocks.get(session).copied().unwrap_or(0) < MAX_BLOCKS
    }

    /// Counts a block of host session `session`'s stop.
    pub fn blocked(&self, session: &str) {
        let mut s = self.state.lock().unwrap();
        if !s.blocks.contains_key(session) {
            s.order.push_back(session.to_string());
            while s.order.len() > MAX_TRACKED_SESSIONS {
                if let Some(old) = s.order.pop_front() {
                    s.blocks.remove(&old);
                }
            }
        }
        *s.blocks.entry(session.to_string()).or_default() += 1;
    }

    /// Counts a stop of `host` that ended as `outcome`.
    pub fn count(&self, host: &str, outcome: &str) {
        let mut s = self.state.lock().unwrap();
        *s.stops
            .entry(host.to_string())
            .or_default()
            .entry(outcome.to_string())
            .or_default() += 1;
    }

    /// Duty and the counters.
    pub fn stats(&self, now: DateTime<Utc>) -> HookStats {
        let s = self.state.lock().unwrap();
        HookStats {
            duty: current(&s.duty, now),
            stops: s.stops.clone(),
        }
    }
}

fn current(duty: &DutyView, now: DateTime<Utc>) -> DutyView {
    match duty.until {
        Some(until) if duty.on && until <= now => DutyView::default(),
        _ => duty.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_in_a_row_stop_below_the_hosts_cap_and_a_fresh_stop_starts_again() {
        let duty = Duty::memory();
        assert!(duty.may_block("s1", false));
        let mut blocked = 0;
        while duty.may_block("s1", true) {
            duty.blocked("s1");
            blocked += 1;
            assert!(blocked <= 8, "never reaches the host's cap");
        }
        assert_eq!(blocked, MAX_BLOCKS);
        const { assert!(MAX_BLOCKS < 8) };
        // Another session counts on its own; a stop after the user's own turn starts again.
        assert!(duty.may_block("s2", true));
        assert!(duty.may_block("s1", false));
    }

    #[test]
    fn duty_survives_a_restart_and_a_for_that_ran_out_reads_as_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("duty.json");
        let now = Utc::now();
        assert_eq!(Duty::load(path.clone()).view(now), DutyView::default());
        let until = now + chrono::Duration::hours(8);
        Duty::load(path.clone()).set(true, Some(until)).unwrap();
        let again = Duty::load(path.clone());
        assert_eq!(
            again.view(now),
            DutyView {
                on: true,
                until: Some(until)
            }
        );
        assert!(!again.view(until).on, "ran out at `until`");
        again.set(false, Some(until)).unwrap();
        assert_eq!(Duty::load(path).view(now), DutyView::default());
    }

    #[test]
    fn an_unreadable_duty_file_is_off_duty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("duty.json");
        std::fs::write(&path, "{not json").unwrap();
        assert!(!Duty::load(path).view(Utc::now()).on);
    }
}
