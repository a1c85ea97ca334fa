//! The inbox's settings: `inbox` in `switchboard.json`.
//!
//! The inbox owns them (ring bounds, journal fsync policy and rotation, the id window, the
//! limits on one message); `config` only composes them into its `Config`.

use serde::{Deserialize, Serialize};

use crate::home::FsyncPolicy;
use crate::message::MessageLimits;

/// Inbox settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct InboxSettings {
    /// Newest messages kept in memory (`ringSize`, default 200).
    pub ring_size: usize,
    /// The most bytes the ring holds, by `Message::mem_bytes` (`ringBytes`, default 32 MiB);
    /// the oldest leave first, once the journal holds them.
    pub ring_bytes: usize,
    /// `always` (default), `interval` or `never`.
    pub fsync: FsyncPolicy,
    /// Rotate `channels.jsonl` to `.1` past this many bytes (`rotateBytes`, default 10 MiB).
    pub rotate_bytes: u64,
    /// How many recent source ids are remembered for duplicate detection (`dedupIds`, default
    /// 4096).
    pub dedup_ids: usize,
    /// Per-message size limits, checked before a message gets a seq (`limits`: `contentBytes`
    /// 256 KiB, `idBytes` 256, `serverBytes` 128, `channelBytes` 256, `metadataKeys` 64,
    /// `metadataBytes` 16 KiB).
    pub limits: MessageLimits,
}

impl Default for InboxSettings {
    fn default() -> Self {
        InboxSettings {
            ring_size: 200,
            ring_bytes: 32 * 1024 * 1024,
            fsync: FsyncPolicy::Always,
            rotate_bytes: 10 * 1024 * 1024,
            dedup_ids: 4096,
            limits: MessageLimits::default(),
        }
    }
}
