//! The `actions` section of `switchboard.json`: how much the lifecycle's queues hold, and which
//! nudges it holds for the next session while none is open.
//!
//! The lifecycle owns these settings; the process configuration only places them under
//! `actions` (camelCase keys, every one optional).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Action queue settings (`actions`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ActionSettings {
    /// Pending deliveries per kind before the newest is refused (`queueCapacity`, default 64).
    pub queue_capacity: usize,
    /// While no session is open, how many of the newest nudges no consumer has seen are held
    /// for the first session that opens (`heldNudges`, default 20; 0 holds none).
    pub held_nudges: usize,
    /// The oldest a held nudge may be when the first session opens (`heldNudgeMaxAge`, default
    /// `"24h"`): an older warning is no longer news.
    #[serde(with = "crate::duration::text")]
    pub held_nudge_max_age: Duration,
    /// How many consumers are remembered (`maxConsumers`, default 256): past that, the one
    /// used longest ago that no live session reads as is forgotten, with its cursor.
    pub max_consumers: usize,
}

impl Default for ActionSettings {
    fn default() -> Self {
        ActionSettings {
            queue_capacity: 64,
            held_nudges: 20,
            held_nudge_max_age: Duration::from_secs(24 * 60 * 60),
            max_consumers: 256,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_nudge_settings_read_camel_case_keys_and_durations() {
        let s: ActionSettings =
            serde_json::from_str(r#"{"heldNudges": 5, "heldNudgeMaxAge": "90m"}"#).unwrap();
        assert_eq!(s.held_nudges, 5);
        assert_eq!(s.held_nudge_max_age, Duration::from_secs(90 * 60));
        assert_eq!(s.queue_capacity, 64, "the other keys keep their defaults");
        let round: ActionSettings =
            serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(round.held_nudge_max_age, s.held_nudge_max_age);
        for bad in [
            r#"{"heldNudgeMaxAge": "0"}"#,
            r#"{"heldNudgeMaxAge": "12"}"#,
            r#"{"heldNudge": 3}"#,
        ] {
            assert!(
                serde_json::from_str::<ActionSettings>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
