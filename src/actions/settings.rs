//! The `actions` section of `switchboard.json`: how much the lifecycle's queues hold.
//!
//! The lifecycle owns these settings; the process configuration only places them under
//! `actions` (camelCase keys, every one optional).

use serde::{Deserialize, Serialize};

/// Action queue settings (`actions`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ActionSettings {
    /// Pending deliveries per kind before the newest is refused.
    pub queue_capacity: usize,
}

impl Default for ActionSettings {
    fn default() -> Self {
        ActionSettings { queue_capacity: 64 }
    }
}
