//! Actions: what the engine decides a message should cause.
//!
//! An [`Action`] is created by the engine (pure) and handed by the dispatcher to the
//! [`lifecycle`], the one owner of its state from then on and the only writer of
//! `actions.jsonl` (through the [`writer`] thread). An action's [`Audience`] says which
//! consumers may receive it.

pub mod audience;
pub mod by;
pub mod duty;
pub mod exec;
#[cfg(test)]
mod fault;
pub mod journal;
pub mod lifecycle;
pub mod settings;
pub mod via;
pub mod writer;

pub use audience::{Audience, TO_CONSUMER_KEY};
pub use by::{By, ByKind};
pub use exec::{ExecFailure, ExecReport};
pub use lifecycle::{
    ConfirmError, Event, Item, ItemKind, Lifecycle, SessionId, Shareable, WORK_KEY,
};
pub use settings::ActionSettings;
pub use via::Via;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::message::Seq;

/// A global, increasing, durable action id (starts at 1).
pub type ActionId = u64;

/// What a rule does when it fires.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Nudge: tell the agent something happened.
    #[default]
    Notify,
    /// Ask the user before the agent acts.
    Confirm,
    /// Queue the prompt for the agent to run.
    Auto,
}

impl Mode {
    /// The lowercase name used in files and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Notify => "notify",
            Mode::Confirm => "confirm",
            Mode::Auto => "auto",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a rule's auto prompt is run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Queued for the in-session agent's `wait_for_inbound_message` (and push).
    #[default]
    Wait,
    /// Run in a fresh headless host by the exec runner (`delivery::exec`).
    Exec,
}

impl Delivery {
    /// The default, left out of records and items.
    pub fn is_wait(&self) -> bool {
        *self == Delivery::Wait
    }

    /// The lowercase name used in files and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Wait => "wait",
            Delivery::Exec => "exec",
        }
    }
}

/// One action, as the engine creates it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    /// Global id.
    pub id: ActionId,
    /// The rule that fired.
    pub rule: std::sync::Arc<str>,
    /// The rule's mode.
    pub mode: Mode,
    /// The message that caused it.
    pub seq: Seq,
    /// The rendered prompt.
    pub prompt: String,
    /// The rule's tool whitelist (names or globs).
    #[serde(default)]
    pub tools: Vec<String>,
    /// When the engine created it.
    pub created: DateTime<Utc>,
    /// When a confirm expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<DateTime<Utc>>,
    /// How an auto prompt is run (`wait`, the default, is left out).
    #[serde(default, skip_serializing_if = "Delivery::is_wait")]
    pub delivery: Delivery,
    /// Confirm: the paths allowed to answer (the rule's `approveVia`); empty = any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approve_via: Vec<Via>,
    /// Which consumers may receive it (the rule's `consumers`, or the message's
    /// `to_consumer`); everyone, the default, is left out.
    #[serde(default, skip_serializing_if = "Audience::is_everyone")]
    pub consumers: Audience,
}

/// A state in an action's lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionState {
    /// Notify/auto: waiting for a consumer.
    Queued,
    /// Auto or approved work taken by one session's wait; not yet delivered.
    Claimed,
    /// Seen by a consumer (work: the result carrying it was sent).
    Delivered,
    /// A claim given back (the session ended or the result could not be sent): queued again.
    Released,
    /// Confirm: waiting for the user's answer.
    Pending,
    /// Confirm answered yes; queued like auto.
    Approved,
    /// Confirm answered no.
    Denied,
    /// Confirm not answered in time.
    Expired,
    /// Confirm closed by a later message (the alert's `[RESOLVED]`) before anyone answered.
    Resolved,
    /// Auto: the agent ran it.
    Done,
    /// Exec runner started it.
    Running,
    /// Exec runner finished it successfully.
    Succeeded,
    /// Exec runner failed (a kind and a reason say why).
    Failed,
    /// Exec run stopped before it finished (cancelled, or the daemon stopped).
    Cancelled,
    /// Refused because its queue was full.
    Dropped,
    /// Work handed to the queue instances share (`jetstream`): it runs wherever a session
    /// takes it; the reason says how it left.
    Shared,
}

impl ActionState {
    /// The lowercase name used in `actions.jsonl` and events.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionState::Queued => "queued",
            ActionState::Claimed => "claimed",
            ActionState::Delivered => "delivered",
            ActionState::Released => "released",
            ActionState::Pending => "pending",
            ActionState::Approved => "approved",
            ActionState::Denied => "denied",
            ActionState::Expired => "expired",
            ActionState::Resolved => "resolved",
            ActionState::Done => "done",
            ActionState::Running => "running",
            ActionState::Succeeded => "succeeded",
            ActionState::Failed => "failed",
            ActionState::Cancelled => "cancelled",
            ActionState::Dropped => "dropped",
            ActionState::Shared => "shared",
        }
    }
}
