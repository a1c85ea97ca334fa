//! The engine: given compiled rules, a message and the time, which actions fire.
//!
//! Pure: no I/O and no clock of its own; the caller passes `now`, so `rules test` and the tests
//! replay time exactly. Every matching enabled rule fires, in file order, until a matching rule
//! with `stop` ends the message's evaluation (fired or suppressed alike); per rule the order is
//! match (server, channel, matchers, content) → time intervals (`muteTimeIntervals`, then
//! `activeTimeIntervals`, read at `now`) → dedup → rateLimit, and state changes only when a
//! rule fires. A rule whose content regex cannot be decided within its budget fails closed
//! ([`Rule::fails_closed`]): a confirm or `stop` rule counts the message as a match and what it
//! fires is put to a person, saying why (work becomes a confirm); an auto or notify rule without
//! `stop` does not fire, suppressed as `regex_budget`. State (dedup windows,
//! fire times) is keyed by rule name and survives [`Engine::swap`] for rules whose name is
//! unchanged, and a restart through [`Engine::limits_snapshot`] and [`Engine::restore_limits`]
//! (the caller keeps the snapshot in `state.json`). While paused nothing fires and nothing
//! changes.
//!
//! [`Engine::evaluate`] finds candidates through the [`Index`]; [`Engine::evaluate_naive`] tries
//! every rule in file order. Both decide through the same code, and the property test in
//! `tests.rs` holds them to the same verdicts on random rule files and messages.

mod index;
mod limits;
mod literals;
pub mod resolve;
mod scan;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;

pub use index::{Index, Scratch};
pub use limits::{DEDUP_KEY_BYTES, LimitsSnapshot, RuleMemory, RuleState, default_dedup_key};

use crate::actions::{Action, ActionId, Mode};
use crate::message::Message;
use crate::rules::{Matched, Rule, RuleSet, UNDECIDED_NOTE};

/// Why a matching rule did not fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuppressReason {
    /// Same dedup key inside the window.
    Dedup,
    /// Cooldown or quota exhausted.
    RateLimited,
    /// Outside every one of its `activeTimeIntervals`.
    Inactive,
    /// Inside one of its `muteTimeIntervals`.
    Muted,
    /// Its content regex could not be decided within its budget, and the rule does not fail
    /// closed (an auto or notify rule without `stop`).
    RegexBudget,
}

impl SuppressReason {
    /// The snake_case name used in metrics and output.
    pub fn as_str(self) -> &'static str {
        match self {
            SuppressReason::Dedup => "dedup",
            SuppressReason::RateLimited => "rate_limited",
            SuppressReason::Inactive => "inactive",
            SuppressReason::Muted => "muted",
            SuppressReason::RegexBudget => "regex_budget",
        }
    }
}

/// A rule that matched but did not fire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Suppressed {
    /// Rule name.
    pub rule: Arc<str>,
    /// Why.
    pub reason: SuppressReason,
}

/// What one rule decided about one message (`rules test --explain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// It fired this action.
    Fired(ActionId),
    /// Its content regex could not be decided within its budget and the rule fails closed
    /// (confirm or `stop`): it fired this action, which puts the message to a person and says
    /// why.
    Undecided(ActionId),
    /// Its content regex could not be decided within its budget, and an auto or notify rule
    /// without `stop` does not fire on that.
    RegexBudget,
    /// Server, channel, matchers or content did not match.
    NoMatch,
    /// The rule is disabled.
    Disabled,
    /// Matched, but a repeat inside the dedup window.
    Dedup,
    /// Matched, but over its rate limit.
    RateLimited,
    /// Matched, but outside every one of its `activeTimeIntervals`.
    Inactive,
    /// Matched, but inside one of its `muteTimeIntervals`.
    Muted,
    /// Evaluation is paused.
    Paused,
    /// An earlier matching rule with `stop` ended evaluation for this message.
    Stopped,
}

impl Decision {
    /// The snake_case reason a rule did not fire, or `None` when it fired.
    pub fn reason(self) -> Option<&'static str> {
        match self {
            Decision::Fired(_) | Decision::Undecided(_) => None,
            Decision::NoMatch => Some("no_match"),
            Decision::Disabled => Some("disabled"),
            Decision::Dedup => Some("dedup"),
            Decision::RateLimited => Some("rate_limited"),
            Decision::Inactive => Some("inactive"),
            Decision::Muted => Some("muted"),
            Decision::Paused => Some("paused"),
            Decision::Stopped => Some("stopped"),
            Decision::RegexBudget => Some("regex_budget"),
        }
    }
}

/// The outcome of evaluating one message.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    /// Actions fired, in rule order.
    pub actions: Vec<Action>,
    /// Matching rules that were suppressed.
    pub suppressed: Vec<Suppressed>,
}

/// Rules with their index, built outside the engine's lock and swapped in at once.
#[derive(Debug)]
pub struct Prepared {
    rules: Arc<RuleSet>,
    index: Index,
}

impl Prepared {
    /// Indexes `rules` (the costly part of a reload: globs and the regex set).
    pub fn new(rules: Arc<RuleSet>) -> Prepared {
        let index = Index::new(&rules);
        Prepared { rules, index }
    }
}

/// The rules engine.
pub struct Engine {
    live: Prepared,
    /// Per rule of `live`, by position in the file.
    state: Vec<RuleState>,
    counters: Counters,
    paused: bool,
    scratch: Scratch,
    hits: Vec<u32>,
}

/// What every firing moves, beside its rule's state.
struct Counters {
    next_id: ActionId,
    /// Bumped whenever the rules' state changes, so a saver knows when a snapshot is due.
    limits_version: u64,
}

impl Engine {
    /// An engine over `rules`, numbering actions from 1.
    pub fn new(rules: Arc<RuleSet>) -> Engine {
        Engine::from_prepared(Prepared::new(rules))
    }

    /// An engine over rules already indexed, numbering actions from 1.
    pub fn from_prepared(live: Prepared) -> Engine {
        let state = live
            .rules
            .rules()
            .iter()
            .map(|_| RuleState::default())
            .collect();
        Engine {
            live,
            state,
            counters: Counters {
                next_id: 1,
                limits_version: 0,
            },
            paused: false,
            scratch: Scratch::default(),
            hits: Vec::new(),
        }
    }

    /// The live rules.
    pub fn rules(&self) -> &Arc<RuleSet> {
        &self.live.rules
    }

    /// Swaps in new rules; the state of rules whose name is unchanged is kept, the rest dropped.
    pub fn swap(&mut self, prepared: Prepared) {
        let mut kept: HashMap<&str, RuleState> = self
            .live
            .rules
            .rules()
            .iter()
            .map(|r| &*r.name)
            .zip(std::mem::take(&mut self.state))
            .collect();
        let state = prepared
            .rules
            .rules()
            .iter()
            .map(|r| kept.remove(&*r.name).unwrap_or_default())
            .collect();
        drop(kept);
        self.state = state;
        self.live = prepared;
        self.scratch = Scratch::default();
        self.counters.limits_version += 1;
    }

    /// The rate-limit and dedup memory of the live rules that is still in force at `now`,
    /// by rule name (rules with nothing in force are left out).
    pub fn limits_snapshot(&self, now: DateTime<Utc>) -> LimitsSnapshot {
        let rules = self.live.rules.rules();
        LimitsSnapshot(
            rules
                .iter()
                .zip(&self.state)
                .map(|(r, s)| (r, s.memory(r.rate_limit, r.dedup_window, now)))
                .filter(|(_, m)| !m.is_empty())
                .map(|(r, m)| (r.name.to_string(), m))
                .collect(),
        )
    }

    /// Puts back a [`Engine::limits_snapshot`] taken before a restart: each live rule of the
    /// same name gets its memory, without what has expired at `now` under its current windows.
    /// Names that are no longer live are dropped, as a reload drops them. Returns how many
    /// rules got memory back.
    pub fn restore_limits(&mut self, snapshot: LimitsSnapshot, now: DateTime<Utc>) -> usize {
        let mut by_name = snapshot.0;
        let mut restored = 0;
        for (rule, state) in self.live.rules.rules().iter().zip(&mut self.state) {
            if let Some(memory) = by_name.remove(&*rule.name) {
                *state = RuleState::from_memory(memory, rule.rate_limit, rule.dedup_window, now);
                restored += 1;
            }
        }
        self.counters.limits_version += 1;
        restored
    }

    /// [`Engine::limits_snapshot`] when [`Engine::limits_version`] is no longer `seen`, which
    /// then becomes the current version; `None` when nothing changed since.
    pub fn limits_snapshot_since(
        &self,
        seen: &mut u64,
        now: DateTime<Utc>,
    ) -> Option<LimitsSnapshot> {
        if *seen == self.counters.limits_version {
            return None;
        }
        *seen = self.counters.limits_version;
        Some(self.limits_snapshot(now))
    }

    /// Changes whenever the rate-limit and dedup memory may have changed (a fire, a swap, a
    /// restore): a saver takes a new snapshot only when it differs from the one it saved.
    pub fn limits_version(&self) -> u64 {
        self.counters.limits_version
    }

    /// [`Engine::swap`] for rules not yet indexed.
    pub fn swap_rules(&mut self, rules: Arc<RuleSet>) {
        self.swap(Prepared::new(rules));
    }

    /// The id the next action will get.
    pub fn next_action_id(&self) -> ActionId {
        self.counters.next_id
    }

    /// Continues numbering at `id` (after replaying the actions journal); never goes back.
    pub fn set_next_action_id(&mut self, id: ActionId) {
        self.counters.next_id = self.counters.next_id.max(id);
    }

    /// Pauses or resumes evaluation; while paused nothing fires and no state changes.
    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// Whether evaluation is paused.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Evaluates one message at time `now`, through the index.
    pub fn evaluate(&mut self, msg: &Message, now: DateTime<Utc>) -> Evaluation {
        let mut eval = Evaluation::default();
        if self.paused {
            return eval;
        }
        // Borrowed field by field: the rules are read while the state changes, without an
        // `Arc` clone (two atomic operations) per message.
        let Engine {
            live,
            state,
            counters,
            scratch,
            hits,
            ..
        } = self;
        hits.clear();
        live.index.matches(&live.rules, msg, scratch, hits);
        // The index stops listing candidates after the first that has `stop`.
        let rules = live.rules.rules();
        for &hit in hits.iter() {
            let i = (hit & !index::UNDECIDED) as usize;
            let undecided = hit & index::UNDECIDED != 0;
            if undecided && !rules[i].fails_closed() {
                budget_suppressed(&rules[i], &mut eval);
                continue;
            }
            decide(
                &rules[i],
                &mut state[i],
                counters,
                msg,
                now,
                undecided,
                &mut eval,
            );
        }
        eval
    }

    /// Evaluates one message trying every rule in file order, without the index: the plain
    /// loop that [`Engine::evaluate`] must agree with (the tests' oracle, the benches' baseline).
    pub fn evaluate_naive(&mut self, msg: &Message, now: DateTime<Utc>) -> Evaluation {
        let mut eval = Evaluation::default();
        if self.paused {
            return eval;
        }
        let rules = self.live.rules.rules();
        for (rule, state) in rules.iter().zip(&mut self.state) {
            if !rule.enabled {
                continue;
            }
            let undecided = match rule.check(msg) {
                Matched::No => continue,
                Matched::Yes => false,
                Matched::Undecided if rule.fails_closed() => true,
                Matched::Undecided => {
                    budget_suppressed(rule, &mut eval);
                    continue;
                }
            };
            decide(
                rule,
                state,
                &mut self.counters,
                msg,
                now,
                undecided,
                &mut eval,
            );
            if rule.stop {
                break;
            }
        }
        eval
    }

    /// Evaluates one message trying every rule, and says what each rule decided.
    /// Same actions and state changes as [`Engine::evaluate`]; slower, for `rules test --explain`.
    pub fn evaluate_explained(
        &mut self,
        msg: &Message,
        now: DateTime<Utc>,
    ) -> (Evaluation, Vec<(String, Decision)>) {
        let mut eval = Evaluation::default();
        let rules = self.live.rules.rules();
        let mut decisions = Vec::with_capacity(rules.len());
        let mut stopped = false;
        for (rule, state) in rules.iter().zip(&mut self.state) {
            let decision = if self.paused {
                Decision::Paused
            } else if stopped {
                Decision::Stopped
            } else if !rule.enabled {
                Decision::Disabled
            } else {
                match rule.check(msg) {
                    Matched::No => Decision::NoMatch,
                    Matched::Undecided if !rule.fails_closed() => {
                        budget_suppressed(rule, &mut eval);
                        Decision::RegexBudget
                    }
                    matched => {
                        stopped = rule.stop;
                        let undecided = matched == Matched::Undecided;
                        decide(
                            rule,
                            state,
                            &mut self.counters,
                            msg,
                            now,
                            undecided,
                            &mut eval,
                        )
                    }
                }
            };
            decisions.push((rule.name.to_string(), decision));
        }
        (eval, decisions)
    }
}

/// Records that `rule` did not fire because its content regex was undecided.
#[cold]
fn budget_suppressed(rule: &Rule, eval: &mut Evaluation) {
    eval.suppressed.push(Suppressed {
        rule: rule.name.clone(),
        reason: SuppressReason::RegexBudget,
    });
}

/// Time intervals, dedup, rate limit and fire for `rule`, which matched (`undecided`: which
/// counts as matching although its content regex could not be decided, see
/// [`Rule::fails_closed`]); `state` is its state.
fn decide(
    rule: &Rule,
    state: &mut RuleState,
    counters: &mut Counters,
    msg: &Message,
    now: DateTime<Utc>,
    undecided: bool,
    eval: &mut Evaluation,
) -> Decision {
    // The default key borrows the content; it is copied only when the rule fires.
    let dedup = rule.dedup_window.map(|window| {
        let key = match &rule.dedup_key {
            Some(t) => Cow::Owned(t.render(msg)),
            None => Cow::Borrowed(default_dedup_key(&msg.content)),
        };
        (key, window)
    });
    // Time intervals first: a rule held back by the clock neither spends its rate limit
    // nor opens a dedup window (Alertmanager checks mute, then active intervals).
    let reason = if !rule.mute_intervals.is_empty() && rule.muted_by(now).is_some() {
        Some(SuppressReason::Muted)
    } else if !rule.is_active(now) {
        Some(SuppressReason::Inactive)
    } else if let Some((key, window)) = &dedup
        && state.is_duplicate(key, *window, now)
    {
        Some(SuppressReason::Dedup)
    } else if state.is_rate_limited(rule.rate_limit, now) {
        Some(SuppressReason::RateLimited)
    } else {
        None
    };
    if let Some(reason) = reason {
        eval.suppressed.push(Suppressed {
            rule: rule.name.clone(),
            reason,
        });
        return match reason {
            SuppressReason::Dedup => Decision::Dedup,
            SuppressReason::RateLimited => Decision::RateLimited,
            SuppressReason::Inactive => Decision::Inactive,
            SuppressReason::Muted => Decision::Muted,
            SuppressReason::RegexBudget => Decision::RegexBudget,
        };
    }
    state.record(
        rule.rate_limit,
        dedup.map(|(key, window)| (key.into_owned(), window)),
        now,
    );
    counters.limits_version += 1;
    let id = counters.next_id;
    counters.next_id += 1;
    let (mode, prompt) = if undecided {
        undecided_action(rule, msg)
    } else {
        (rule.mode, rule.render_prompt(msg))
    };
    eval.actions.push(Action {
        id,
        rule: rule.name.clone(),
        mode,
        seq: msg.seq,
        prompt,
        tools: copied(&rule.tools),
        created: now,
        expires: (mode == Mode::Confirm).then(|| limits::plus(now, rule.confirm_timeout)),
        delivery: rule.delivery,
        approve_via: copied(&rule.approve_via),
        consumers: match msg.metadata.value(crate::actions::TO_CONSUMER_KEY) {
            "" => rule.consumers.clone(),
            to => crate::actions::Audience::only(to),
        },
    });
    if undecided {
        Decision::Undecided(id)
    } else {
        Decision::Fired(id)
    }
}

/// The mode and prompt of what `rule` fires on a message it could not decide: a person
/// decides, so work becomes a confirm (a nudge stays one), and the prompt says why first.
#[cold]
fn undecided_action(rule: &Rule, msg: &Message) -> (Mode, String) {
    let mode = match rule.mode {
        Mode::Auto => Mode::Confirm,
        other => other,
    };
    let prompt = format!("{UNDECIDED_NOTE}\n\n{}", rule.render_prompt(msg));
    (mode, prompt)
}

/// A copy of `list` for a new action. Most rules have no tools or `approveVia` (nor
/// `consumers`, see `Audience`'s `Clone`): an empty list is made in place, where `Vec::clone`
/// is a call; the three were about 1% of a dispatch at 100 rules (`benches/engine_count.rs`).
#[inline]
fn copied<T: Clone>(list: &[T]) -> Vec<T> {
    if list.is_empty() {
        Vec::new()
    } else {
        list.to_vec()
    }
}

#[cfg(test)]
mod tests;
