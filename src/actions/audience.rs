//! Who may receive an action: a rule's `consumers` (globs on consumer names), or the one
//! consumer a message was sent to (`switchboard send --to NAME`).
//!
//! An empty audience is everyone, as before routing existed. A non-empty one limits the
//! nudges, confirm requests and work of the action to the sessions whose consumer name one
//! of its globs matches; work for a consumer with no session open waits for one, and is not
//! handed to another window. The globs are compiled once, when the action is created or read
//! back from `actions.jsonl`; in files and on the wire the audience is its list of patterns.

use std::sync::Arc;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The metadata key that sends one message to one consumer (`switchboard send --to NAME`):
/// every action of the message goes to that consumer only, whatever the rule's `consumers`.
pub const TO_CONSUMER_KEY: &str = "to_consumer";

/// A compiled list of consumer-name globs; empty = everyone.
#[derive(Debug, Default)]
pub struct Audience {
    patterns: Vec<String>,
    /// `None` when empty.
    set: Option<Arc<GlobSet>>,
}

impl Clone for Audience {
    /// Everyone is made in place (no call into `Vec::clone`): the engine copies a rule's
    /// audience into every action it fires, and most rules have none.
    #[inline]
    fn clone(&self) -> Audience {
        if self.patterns.is_empty() {
            return Audience::everyone();
        }
        Audience {
            patterns: self.patterns.clone(),
            set: self.set.clone(),
        }
    }
}

impl Audience {
    /// Everyone.
    pub fn everyone() -> Audience {
        Audience::default()
    }

    /// Compiles `patterns` (`*`, `?`, `[...]` and `{a,b}` as globset reads them, case
    /// sensitive); the first bad one is the error.
    pub fn new(patterns: &[String]) -> Result<Audience, globset::Error> {
        if patterns.is_empty() {
            return Ok(Audience::everyone());
        }
        let mut set = GlobSetBuilder::new();
        for p in patterns {
            set.add(GlobBuilder::new(p).literal_separator(false).build()?);
        }
        Ok(Audience {
            patterns: patterns.to_vec(),
            set: Some(Arc::new(set.build()?)),
        })
    }

    /// The audience of a message sent to `name`: that consumer only (a name that is not a
    /// valid glob is matched as written).
    pub fn only(name: &str) -> Audience {
        let patterns = vec![name.to_string()];
        Audience::new(&patterns).unwrap_or_else(|_| {
            let mut literal = GlobSetBuilder::new();
            literal.add(globset::Glob::new(&globset::escape(name)).expect("an escaped name"));
            Audience {
                patterns,
                set: literal.build().ok().map(Arc::new),
            }
        })
    }

    /// Whether consumer `name` may receive the action.
    pub fn admits(&self, name: &str) -> bool {
        match &self.set {
            None => true,
            Some(set) => set.is_match(name),
        }
    }

    /// Whether everyone may receive it.
    pub fn is_everyone(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The globs as written.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }
}

impl PartialEq for Audience {
    fn eq(&self, other: &Audience) -> bool {
        self.patterns == other.patterns
    }
}

impl Eq for Audience {}

impl Serialize for Audience {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.patterns.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Audience {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Audience, D::Error> {
        let patterns = Vec::<String>::deserialize(d)?;
        Audience::new(&patterns).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audience(patterns: &[&str]) -> Audience {
        Audience::new(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn globs_on_consumer_names() {
        let a = audience(&["oncall", "payments-*"]);
        for (name, admitted) in [
            ("oncall", true),
            ("payments-eu", true),
            ("payments-", true),
            ("payments", false),
            ("oncall-2", false),
            ("Oncall", false),
            ("copilot#3", false),
        ] {
            assert_eq!(a.admits(name), admitted, "{name}");
        }
        assert!(Audience::everyone().admits("anyone"));
        assert!(audience(&["team/*"]).admits("team/a/b"), "no path rules");
        assert!(Audience::new(&["a{b".to_string()]).is_err());
    }

    #[test]
    fn a_message_sent_to_one_consumer_names_it_exactly_or_as_a_glob() {
        assert!(Audience::only("oncall").admits("oncall"));
        assert!(!Audience::only("oncall").admits("oncall-2"));
        assert!(Audience::only("pay-*").admits("pay-eu"));
        let odd = Audience::only("a{b");
        assert!(
            odd.admits("a{b") && !odd.admits("ab"),
            "a bad glob is literal"
        );
    }

    #[test]
    fn it_is_written_as_its_list_of_patterns() {
        let a = audience(&["oncall", "payments-*"]);
        let text = serde_json::to_string(&a).unwrap();
        assert_eq!(text, r#"["oncall","payments-*"]"#);
        let back: Audience = serde_json::from_str(&text).unwrap();
        assert_eq!(back, a);
        assert!(back.admits("payments-eu"));
    }
}

/// The lifecycle applying an audience: each session gets only what its consumer may receive.
#[cfg(test)]
mod routing {
    use std::sync::Arc;

    use chrono::{TimeDelta, Utc};

    use super::*;
    use crate::actions::{Action, ActionId, Item, ItemKind, Lifecycle, Mode};
    use crate::message::{Message, NewMessage};

    fn action(id: ActionId, mode: Mode, consumers: &[&str]) -> (Action, Arc<Message>) {
        let now = Utc::now();
        let msg = Message::from_new(NewMessage::new("s", "c", format!("m{id}")), id, now);
        let patterns: Vec<String> = consumers.iter().map(|c| c.to_string()).collect();
        let a = Action {
            id,
            rule: format!("r{id}").into(),
            mode,
            seq: id,
            prompt: format!("p{id}"),
            tools: vec!["t".into()],
            created: now,
            expires: (mode == Mode::Confirm).then(|| now + TimeDelta::minutes(30)),
            delivery: Default::default(),
            consumers: Audience::new(&patterns).unwrap(),
            approve_via: Vec::new(),
        };
        (a, Arc::new(msg))
    }

    fn ids(items: &[Item]) -> Vec<(ItemKind, ActionId)> {
        items.iter().map(|i| (i.kind, i.action_id)).collect()
    }

    #[tokio::test]
    async fn two_windows_each_get_only_their_rules_nudges_confirms_and_work() {
        use ItemKind::*;
        let lc = Lifecycle::default();
        let pay = lc.open_session("payments-eu", true, None);
        let infra = lc.open_session("infra", true, None);
        lc.offer(
            vec![
                action(1, Mode::Auto, &["payments-*"]),
                action(2, Mode::Auto, &["infra"]),
                action(3, Mode::Notify, &["payments-*"]),
                action(4, Mode::Notify, &[]),
                action(5, Mode::Confirm, &["infra", "oncall"]),
                action(6, Mode::Auto, &[]),
            ],
            None,
            Utc::now(),
        )
        .await;
        assert_eq!(
            ids(&lc.take(infra, "infra", 10)),
            [(Auto, 2), (Auto, 6), (Nudge, 4), (ConfirmRequest, 5)],
            "infra skips the payments work at the head of the queue"
        );
        assert_eq!(
            ids(&lc.take(pay, "payments-eu", 10)),
            [(Auto, 1), (Nudge, 3), (Nudge, 4)]
        );
        assert!(lc.take(infra, "infra", 10).is_empty());
        assert!(lc.take(pay, "payments-eu", 10).is_empty());
        assert_eq!(lc.queued_for("infra"), 0);
    }

    #[tokio::test]
    async fn work_for_an_absent_consumer_waits_for_it_and_is_not_handed_to_another() {
        let lc = Lifecycle::default();
        let other = lc.open_session("copilot#1", false, None);
        lc.offer(vec![action(1, Mode::Auto, &["oncall"])], None, Utc::now())
            .await;
        assert!(lc.take(other, "copilot#1", 10).is_empty());
        assert_eq!(lc.stats().queued_work, 1, "it waits");
        assert_eq!(lc.queued_for("oncall"), 1);
        assert_eq!(lc.queued_for("copilot#1"), 0);
        // The oncall window opens later: a wait in flight wakes with it.
        let oncall = lc.open_session("oncall", true, None);
        let cancel = tokio_util::sync::CancellationToken::new();
        let got = lc
            .wait(
                oncall,
                "oncall",
                10,
                std::time::Duration::from_secs(5),
                &cancel,
            )
            .await;
        assert_eq!(ids(&got), [(ItemKind::Auto, 1)]);
        // Released by the oncall window (its result could not be sent): back for oncall only.
        lc.settle(&[1], false, false, "not sent");
        assert!(lc.take(other, "copilot#1", 10).is_empty());
        assert_eq!(ids(&lc.take(oncall, "oncall", 10)), [(ItemKind::Auto, 1)]);
    }

    #[tokio::test]
    async fn a_window_left_out_cannot_answer_and_approved_work_waits_for_the_audience() {
        let lc = Lifecycle::default();
        let other = lc.open_session("infra", true, None);
        lc.offer(
            vec![action(1, Mode::Confirm, &["oncall"])],
            None,
            Utc::now(),
        )
        .await;
        assert!(lc.take(other, "infra", 10).is_empty(), "not shown to infra");
        // infra answers it by id anyway: refused, and it stays pending.
        let refused = lc
            .confirm(
                1,
                true,
                &crate::actions::by::by("infra"),
                crate::actions::Via::Tool,
                Some(other),
                Utc::now(),
            )
            .await
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "confirm 1 is for consumers `oncall`, not `infra`; answer it from one of their \
             windows, or with `switchboard confirm`"
        );
        assert_eq!(lc.pending_confirms().len(), 1);
        // The operator approves it: the work waits for the oncall window.
        assert!(
            lc.confirm(
                1,
                true,
                &crate::actions::by::by("cli"),
                crate::actions::Via::Cli,
                None,
                Utc::now()
            )
            .await
            .unwrap()
            .is_some()
        );
        assert!(lc.take(other, "infra", 10).is_empty());
        let oncall = lc.open_session("oncall", true, None);
        assert_eq!(
            ids(&lc.take(oncall, "oncall", 10)),
            [(ItemKind::Approved, 1)]
        );
    }

    #[test]
    fn an_action_keeps_its_audience_through_the_journal() {
        let (a, _) = action(1, Mode::Auto, &["oncall", "payments-*"]);
        let text = serde_json::to_string(&a).unwrap();
        assert!(
            text.contains(r#""consumers":["oncall","payments-*"]"#),
            "{text}"
        );
        let back: Action = serde_json::from_str(&text).unwrap();
        assert_eq!(back, a);
        assert!(back.consumers.admits("payments-us"));
        let (everyone, _) = action(2, Mode::Auto, &[]);
        let text = serde_json::to_string(&everyone).unwrap();
        assert!(
            !text.contains("consumers"),
            "left out when everyone: {text}"
        );
    }
}
