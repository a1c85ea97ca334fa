//! The warnings of `rules check`: what is valid but reads a metadata key no message of the
//! rule's server carries. `{{meta.KEY}}` of a missing key renders as nothing and a matcher
//! sees the empty string, so a typo (`{{meta.fingerprnt}}`) would make every dedup key empty,
//! and a bare label (`team="db"` on an Alertmanager rule, whose labels are `labels.team`)
//! would never match, without a word. Only rules on a built-in source's server are checked:
//! other senders choose their own keys. Each warning is located like an error.

use crate::rules::RuleSet;
use crate::rules::file::{Locator, Pos};

/// One warning and where it points.
#[derive(Debug, PartialEq, Eq)]
pub struct Warning {
    /// The key or matcher it is about.
    pub at: Option<Pos>,
    /// `rule 0 `am`: …`.
    pub message: String,
}

impl Warning {
    /// `PATH:LINE:COL: warning: MESSAGE`.
    pub fn render(&self, path: &str) -> String {
        match self.at {
            Some(at) => format!(
                "{path}:{}:{}: warning: {}",
                at.line, at.column, self.message
            ),
            None => format!("{path}: warning: {}", self.message),
        }
    }
}

/// The warnings of the valid rule set `set`, read from `text` (for the positions).
pub fn warnings(set: &RuleSet, text: &str) -> Vec<Warning> {
    let loc = Locator::new(text);
    let mut warnings = Vec::new();
    for (i, rule) in set.rules().iter().enumerate() {
        let crate::rules::NamePattern::Exact(server) = &rule.server else {
            continue;
        };
        let Some((keys, prefixes)) = crate::sources::known_meta_keys(server) else {
            continue;
        };
        let known = |k: &str| {
            keys.contains(&k)
                || prefixes
                    .iter()
                    .any(|p| k.starts_with(p) && k.len() > p.len())
        };
        let keys_of_rule = loc.rules.get(i).map(|(_, keys)| keys.as_slice());
        let at = |key: &str, item: Option<usize>| {
            let kp = keys_of_rule?.iter().rev().find(|k| k.key == key)?;
            Some(item.map_or(kp.value, |n| kp.item(n)))
        };
        let templates = [
            ("prompt", rule.prompt.as_ref()),
            ("dedupKey", rule.dedup_key.as_ref()),
            ("resolveKey", rule.resolve.as_ref().map(|r| &r.key)),
        ];
        let mut seen = Vec::new();
        for (field, template) in templates {
            for key in template.into_iter().flat_map(|t| t.meta_keys()) {
                if !known(key) && !seen.contains(&(field, key)) {
                    seen.push((field, key));
                    warnings.push(Warning {
                        at: at(field, None),
                        message: format!(
                            "rule {i} `{}`: `{{{{meta.{key}}}}}` in `{field}` is set by no `{server}` message, so it renders empty{}",
                            rule.name,
                            suggestion(key, keys, prefixes)
                        ),
                    });
                }
            }
        }
        for (n, m) in rule.matchers.iter().enumerate() {
            let key = m.key();
            if !known(key) {
                warnings.push(Warning {
                    at: at("matchers", Some(n)),
                    message: format!(
                        "rule {i} `{}`: matcher key `{key}` is set by no `{server}` message, so it always sees \"\"{}",
                        rule.name,
                        suggestion(key, keys, prefixes)
                    ),
                });
            }
        }
    }
    warnings
}

/// `; did you mean `KEY`?` for the closest known key; for a bare key on a source whose
/// metadata has prefixes (Alertmanager's `labels.` and `annotations.`), the key under them.
fn suggestion(key: &str, keys: &[&str], prefixes: &[&str]) -> String {
    if let Some(close) = crate::rules::suggest(key, keys) {
        return format!("; did you mean `{close}`?");
    }
    let mut under: Vec<String> = prefixes.iter().map(|p| format!("{p}{key}")).collect();
    // A misspelt prefix (`lables.team`): the same key under the right one.
    if let Some((head, rest)) = key.split_once('.') {
        let heads: Vec<&str> = prefixes.iter().map(|p| p.trim_end_matches('.')).collect();
        if let Some(close) = crate::rules::suggest(head, &heads) {
            under = vec![format!("{close}.{rest}")];
        } else {
            return String::new();
        }
    }
    match under.as_slice() {
        [] => String::new(),
        [one] => format!("; did you mean `{one}`?"),
        [first, rest @ ..] => format!(
            "; did you mean `{first}`{}?",
            rest.iter()
                .map(|k| format!(" or `{k}`"))
                .collect::<String>()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_label_on_an_alertmanager_rule_is_pointed_to_labels() {
        let text = "{\"rules\": [{\"name\": \"db\", \"server\": \"alertmanager\",\n  \"matchers\": [\"severity=\\\"critical\\\"\", \"team=\\\"db\\\"\", \"lables.team=\\\"db\\\"\"]}]}";
        let set = RuleSet::parse(text).unwrap();
        let found = warnings(&set, text);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert_eq!(
            found[0].render("triggers.json"),
            "triggers.json:2:41: warning: rule 0 `db`: matcher key `team` is set by no \
             `alertmanager` message, so it always sees \"\"; did you mean `labels.team` or \
             `annotations.team`?"
        );
        assert!(
            found[1].message.ends_with("did you mean `labels.team`?"),
            "{}",
            found[1].message
        );
    }

    #[test]
    fn a_misspelt_key_on_a_github_rule_is_pointed_to_the_right_one() {
        let text = "{\"rules\": [{\"name\": \"ci\", \"server\": \"github\",\n  \
                    \"matchers\": [\"conclsion=\\\"failure\\\"\"], \"dedupKey\": \"{{meta.brnch}}\"}]}";
        let set = RuleSet::parse(text).unwrap();
        let found: Vec<String> = warnings(&set, text)
            .iter()
            .map(|w| w.render("triggers.json"))
            .collect();
        assert_eq!(
            found,
            [
                "triggers.json:2:54: warning: rule 0 `ci`: `{{meta.brnch}}` in `dedupKey` is set \
                 by no `github` message, so it renders empty; did you mean `branch`?",
                "triggers.json:2:16: warning: rule 0 `ci`: matcher key `conclsion` is set by no \
                 `github` message, so it always sees \"\"; did you mean `conclusion`?",
            ]
        );
    }
}
