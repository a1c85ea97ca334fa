//! The engine: given compiled rules, a message and the time, which actions fire.
//!
//! CONTRACT: pure; no I/O, no clock of its own. Every matching enabled rule
//! fires in file order; per rule match → dedup → rateLimit. State (dedup
//! windows, rate limits) is keyed by rule name and survives [`Engine::swap_rules`].
//!
//! STUB: every rule fires with the default prompt.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::actions::{Action, ActionId};
use crate::message::Message;
use crate::rules::{RuleSet, default_prompt};

/// Why a matching rule did not fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuppressReason {
    /// Same dedup key inside the window.
    Dedup,
    /// Cooldown or quota exhausted.
    RateLimited,
}

/// A rule that matched but did not fire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Suppressed {
    /// Rule name.
    pub rule: String,
    /// Why.
    pub reason: SuppressReason,
}

/// The outcome of evaluating one message.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    /// Actions fired, in rule order.
    pub actions: Vec<Action>,
    /// Matching rules that were suppressed.
    pub suppressed: Vec<Suppressed>,
}

/// The rules engine.
pub struct Engine {
    rules: Arc<RuleSet>,
    next_id: ActionId,
    paused: bool,
}

impl Engine {
    /// An engine over `rules`, numbering actions from 1.
    pub fn new(rules: Arc<RuleSet>) -> Engine {
        Engine {
            rules,
            next_id: 1,
            paused: false,
        }
    }

    /// The live rules.
    pub fn rules(&self) -> &Arc<RuleSet> {
        &self.rules
    }

    /// Swaps in new rules; state of rules whose name is unchanged is kept.
    pub fn swap_rules(&mut self, rules: Arc<RuleSet>) {
        self.rules = rules;
    }

    /// The id the next action will get.
    pub fn next_action_id(&self) -> ActionId {
        self.next_id
    }

    /// Continues numbering at `id` (after replaying the actions journal).
    pub fn set_next_action_id(&mut self, id: ActionId) {
        self.next_id = self.next_id.max(id);
    }

    /// Pauses or resumes evaluation; while paused nothing fires and no state changes.
    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// Whether evaluation is paused.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Evaluates one message at time `now`.
    pub fn evaluate(&mut self, msg: &Message, now: DateTime<Utc>) -> Evaluation {
        let mut eval = Evaluation::default();
        if self.paused {
            return eval;
        }
        for rule in self.rules.rules().iter().filter(|r| r.enabled) {
            eval.actions.push(Action {
                id: self.next_id,
                rule: rule.name.clone(),
                mode: rule.mode,
                seq: msg.seq,
                prompt: default_prompt(msg),
                tools: rule.tools.clone(),
                created: now,
                expires: None,
            });
            self.next_id += 1;
        }
        eval
    }
}
