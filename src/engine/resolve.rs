//! Confirms that close themselves: which pending confirms a later message resolves.
//!
//! A confirm rule with `resolveRegex` and `resolveKey` names what ends its pending confirms
//! before anyone answers: a later message that matches the rule's `server` and `channel`
//! globs and `resolveRegex`, and whose rendered `resolveKey` equals the key rendered for the
//! confirm's own message (for Alertmanager, the `[RESOLVED]` message with the same
//! `{{meta.fingerprint}}`). An empty rendered key matches nothing, so a message without the
//! metadata never closes every confirm at once.
//!
//! Pure and apart from [`super::Engine::evaluate`]: it keeps no state, costs nothing when no
//! rule has a resolve key, and runs in its own pass that follows the dispatcher (`App`),
//! never inside the hot dispatch loop.

use std::collections::HashMap;

use crate::actions::{ActionId, Item, ItemKind};
use crate::message::Message;
use crate::rules::{Rule, RuleSet};

/// Whether any rule of `rules` can resolve confirms (when none can, the pass reads nothing).
pub fn any(rules: &RuleSet) -> bool {
    rules.rules().iter().any(|r| r.resolve.is_some())
}

/// The ids of the confirms among `pending` that `msg` resolves, in the order given. A confirm
/// is resolved by its own rule (by name, in the live rules) and only by a later message.
pub fn resolved_by(rules: &RuleSet, msg: &Message, pending: &[Item]) -> Vec<ActionId> {
    let resolving: HashMap<&str, &Rule> = rules
        .rules()
        .iter()
        .filter(|r| r.resolve.is_some())
        .map(|r| (&*r.name, r))
        .collect();
    if resolving.is_empty() {
        return Vec::new();
    }
    // The key of `msg` for each rule, rendered once and only when the message qualifies.
    let mut keys: HashMap<&str, Option<String>> = HashMap::new();
    let mut out = Vec::new();
    for item in pending {
        if item.kind != ItemKind::ConfirmRequest || item.message.seq >= msg.seq {
            continue;
        }
        let Some(rule) = resolving.get(&*item.rule) else {
            continue;
        };
        let Some(resolve) = &rule.resolve else {
            continue;
        };
        let key = keys.entry(&*rule.name).or_insert_with(|| {
            let qualifies = rule.server.is_match(&msg.server)
                && rule.channel.is_match(&msg.channel)
                && resolve.regex.is_match(&msg.content);
            qualifies
                .then(|| resolve.key.render(msg))
                .filter(|k| !k.is_empty())
        });
        if let Some(key) = key
            && *key == resolve.key.render(&item.message)
        {
            out.push(item.action_id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::message::NewMessage;

    const RULES: &str = r#"{"rules": [
        {"name": "crit", "server": "alertmanager", "channel": "alerts/*",
         "contentRegex": "^\\[FIRING\\]", "mode": "confirm", "prompt": "look at {{content}}",
         "resolveRegex": "^\\[RESOLVED\\]", "resolveKey": "{{meta.fingerprint}}"},
        {"name": "plain", "mode": "confirm", "prompt": "p"}
    ]}"#;

    fn msg(seq: u64, server: &str, content: &str, fingerprint: Option<&str>) -> Arc<Message> {
        let mut m = NewMessage::new(server, "alerts/critical", content);
        if let Some(f) = fingerprint {
            m = m.with_meta("fingerprint", f);
        }
        Arc::new(Message::from_new(m, seq, chrono::Utc::now()))
    }

    fn confirm(id: ActionId, rule: &str, message: Arc<Message>) -> Item {
        Item {
            kind: ItemKind::ConfirmRequest,
            action_id: id,
            rule: rule.into(),
            prompt: String::new(),
            tools: vec![],
            expires_at: None,
            message,
            delivery: Default::default(),
            approve_via: vec![],
            consumers: Default::default(),
            redelivered: false,
        }
    }

    #[test]
    fn the_resolved_alert_with_the_same_fingerprint_closes_its_confirm_only() {
        let rules = RuleSet::parse(RULES).unwrap();
        assert!(any(&rules));
        let pending = vec![
            confirm(
                1,
                "crit",
                msg(1, "alertmanager", "[FIRING] Disk", Some("aaa")),
            ),
            confirm(
                2,
                "crit",
                msg(2, "alertmanager", "[FIRING] Cpu", Some("bbb")),
            ),
            // Another rule without a resolve key: never closed.
            confirm(
                3,
                "plain",
                msg(3, "alertmanager", "[FIRING] Disk", Some("aaa")),
            ),
        ];
        let resolved = msg(4, "alertmanager", "[RESOLVED] Disk", Some("aaa"));
        assert_eq!(resolved_by(&rules, &resolved, &pending), vec![1]);
    }

    #[test]
    fn what_does_not_qualify_resolves_nothing() {
        let rules = RuleSet::parse(RULES).unwrap();
        let pending = vec![confirm(
            1,
            "crit",
            msg(5, "alertmanager", "[FIRING] Disk", Some("aaa")),
        )];
        let table = [
            (
                "a repeat firing",
                msg(6, "alertmanager", "[FIRING] Disk", Some("aaa")),
            ),
            (
                "another fingerprint",
                msg(6, "alertmanager", "[RESOLVED] Disk", Some("zzz")),
            ),
            (
                "another server",
                msg(6, "github", "[RESOLVED] Disk", Some("aaa")),
            ),
            (
                "no fingerprint on either side",
                msg(6, "alertmanager", "[RESOLVED] Disk", None),
            ),
            (
                "an earlier message",
                msg(4, "alertmanager", "[RESOLVED] Disk", Some("aaa")),
            ),
        ];
        for (what, m) in table {
            assert!(resolved_by(&rules, &m, &pending).is_empty(), "{what}");
        }
        // An empty key on both sides is no match either.
        let keyless = vec![confirm(
            2,
            "crit",
            msg(5, "alertmanager", "[FIRING] Disk", None),
        )];
        let m = msg(6, "alertmanager", "[RESOLVED] Disk", None);
        assert!(resolved_by(&rules, &m, &keyless).is_empty());
    }

    #[test]
    fn a_rule_without_resolve_keys_costs_nothing_and_resolves_nothing() {
        let rules = RuleSet::builtin();
        assert!(!any(&rules));
        let pending = vec![confirm(1, "default", msg(1, "x", "a", Some("f")))];
        assert!(resolved_by(&rules, &msg(2, "x", "a", Some("f")), &pending).is_empty());
    }
}
