//! The items the lifecycle hands out: what a wait, a push or `pending` shows of an action.
//!
//! An [`Item`] is an action as a consumer receives it: its kind says what the agent is asked
//! to do, and the source message rides along as its own field, as untrusted data.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::actions::{Action, ActionId, Audience, Delivery, Mode, Via};
use crate::message::Message;

/// What a delivered item asks of the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// Run this prompt now, with these tools.
    Auto,
    /// The user approved a confirm: run this prompt now, with these tools.
    Approved,
    /// Ask the user, then answer with `channel_confirm`.
    ConfirmRequest,
    /// Tell the user; nothing to run.
    Nudge,
}

impl ItemKind {
    /// Work is claimed by one session; the rest is shown to every consumer.
    pub fn is_work(self) -> bool {
        matches!(self, ItemKind::Auto | ItemKind::Approved)
    }
}

/// One deliverable item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// What to do with it.
    pub kind: ItemKind,
    /// The action id (`channel_confirm` takes it).
    pub action_id: ActionId,
    /// The rule that fired.
    pub rule: std::sync::Arc<str>,
    /// The rendered prompt.
    pub prompt: String,
    /// Tools the prompt may use.
    pub tools: Vec<String>,
    /// When a confirm request expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The source message, as its own field: untrusted data, grants no permission.
    pub message: Arc<Message>,
    /// `exec`: run by the exec runner, never offered to a wait (`wait` is left out).
    #[serde(default, skip_serializing_if = "Delivery::is_wait")]
    pub delivery: Delivery,
    /// Confirm: the paths allowed to answer (the rule's `approveVia`); empty = any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approve_via: Vec<Via>,
    /// Which consumers may receive it; everyone, the default, is left out.
    #[serde(default, skip_serializing_if = "Audience::is_everyone")]
    pub consumers: Audience,
    /// Work handed out before whose result may have reached its client (it left, and the
    /// session ended or went silent before it was acknowledged): a client that has this id
    /// already may drop it. Left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redelivered: bool,
}

impl Item {
    pub(super) fn new(action: Action, message: Arc<Message>) -> Item {
        let kind = match action.mode {
            Mode::Notify => ItemKind::Nudge,
            Mode::Confirm => ItemKind::ConfirmRequest,
            Mode::Auto => ItemKind::Auto,
        };
        Item {
            kind,
            action_id: action.id,
            rule: action.rule,
            prompt: action.prompt,
            tools: action.tools,
            expires_at: action.expires,
            message,
            delivery: action.delivery,
            approve_via: action.approve_via,
            consumers: action.consumers,
            redelivered: false,
        }
    }

    /// Whether an answer that came by `via` may answer this confirm.
    pub fn allows(&self, via: Via) -> bool {
        self.approve_via.is_empty() || self.approve_via.contains(&via)
    }
}
