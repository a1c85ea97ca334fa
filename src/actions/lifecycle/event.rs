//! The transitions the lifecycle publishes: one [`Event`] per change of an action's state, in
//! the order they were decided. Push, `watch`, metrics and the exec runner read them.

use serde::{Deserialize, Serialize};

use super::Item;
use crate::actions::{ActionId, ActionState, ExecFailure, Mode, Via};
use crate::message::Seq;

/// One transition, as published to push, `watch` and metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// An item became deliverable: a nudge, a confirm request, auto work, or approved work
    /// queued by an answer from outside a session.
    Queued {
        /// The item.
        item: Item,
    },
    /// A confirm was approved or denied.
    Answered {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
        /// `approved` or `denied`.
        state: ActionState,
        /// Who answered.
        by: crate::actions::By,
        /// The path the answer came by (absent from a daemon older than the field).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        via: Option<Via>,
    },
    /// A confirm expired unanswered.
    Expired {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
    },
    /// A pending confirm was closed by a later message before anyone answered.
    Resolved {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
        /// The seq of the message that resolved it.
        by_seq: Seq,
    },
    /// A relayed permission request ended unanswered here: the session that asked ended (its
    /// host's dialog with it), or a restart found it open.
    Ended {
        /// The action id.
        id: ActionId,
        /// The rule (`permission:<tool>`).
        rule: std::sync::Arc<str>,
        /// Why.
        reason: String,
    },
    /// Work was claimed by a session's wait.
    Claimed {
        /// The action id.
        id: ActionId,
        /// The consumer that claimed it.
        consumer: String,
    },
    /// An item reached a consumer (work: the result was sent).
    Delivered {
        /// The action id.
        id: ActionId,
        /// The consumer.
        consumer: String,
    },
    /// A claim went back to the queue.
    Released {
        /// The action id.
        id: ActionId,
        /// The consumer that held it.
        consumer: String,
        /// Why.
        reason: String,
    },
    /// Auto work of an exec rule was queued for the exec runner (never offered to sessions).
    ExecQueued {
        /// The item.
        item: Item,
    },
    /// The exec runner started a headless host on auto work.
    Running {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
    },
    /// An exec run ended: `succeeded`, `failed` or `cancelled`.
    Finished {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
        /// `succeeded`, `failed` or `cancelled`.
        state: ActionState,
        /// Why it failed or was cancelled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<ExecFailure>,
        /// The reason, for people.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// How long it ran.
        duration_ms: u64,
        /// How many tool calls it made.
        tool_calls: usize,
    },
    /// An action was refused or evicted by a full queue.
    Dropped {
        /// The action id.
        id: ActionId,
        /// The rule.
        rule: std::sync::Arc<str>,
        /// The rule's mode.
        mode: Mode,
        /// Which queue and why.
        reason: String,
    },
}
