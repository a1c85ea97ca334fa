//! A message filter outside a rule: the `server`, `channel`, `contentRegex` and `matchers` of a
//! rule, compiled by the same code ([`NamePattern`], [`ContentRegex`], [`Matcher`]) and matched
//! the same way, for what selects messages without firing anything (the `switchboard.message`
//! event type's arguments).

use serde::{Deserialize, Serialize};

use super::{ContentRegex, Matcher, NamePattern};
use crate::message::Message;

/// A filter as written: each key as in a rule, each optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RawFilter {
    /// Server pattern, as a rule's `server` (`*`, a literal, `name/*`, a glob).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Channel pattern, as a rule's `channel`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// A regex searched unanchored in the content, as a rule's `contentRegex`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_regex: Option<String>,
    /// Metadata matchers (`KEY="v"`, `KEY!="v"`, `KEY=~"re"`, `KEY!~"re"`); all must hold.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub matchers: Vec<String>,
}

/// A compiled filter.
#[derive(Clone, Debug)]
pub struct MessageFilter {
    server: NamePattern,
    channel: NamePattern,
    content_regex: Option<ContentRegex>,
    matchers: Vec<Matcher>,
}

impl MessageFilter {
    /// Compiles `raw`; the error names the key and says why, as a rule's would.
    pub fn compile(raw: &RawFilter) -> Result<MessageFilter, String> {
        let pattern = |key: &str, p: &Option<String>| {
            NamePattern::parse(p.as_deref().unwrap_or("*"))
                .map_err(|e| format!("`{key}` \"{}\": {e}", p.as_deref().unwrap_or("")))
        };
        let content_regex = match &raw.content_regex {
            Some(re) => Some(ContentRegex::new(re).map_err(|e| {
                format!(
                    "`contentRegex` \"{re}\": {}",
                    super::error::regex_reason(&e)
                )
            })?),
            None => None,
        };
        let matchers = raw
            .matchers
            .iter()
            .map(|m| {
                Matcher::parse(m).map_err(|e| {
                    format!("`matchers` \"{m}\": {} (at character {})", e.reason, e.at)
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(MessageFilter {
            server: pattern("server", &raw.server)?,
            channel: pattern("channel", &raw.channel)?,
            content_regex,
            matchers,
        })
    }

    /// Whether `msg` matches every part, as a rule would (a content regex over its budget does
    /// not match).
    pub fn is_match(&self, msg: &Message) -> bool {
        self.server.is_match(&msg.server)
            && self.channel.is_match(&msg.channel)
            && self.matchers.iter().all(|m| m.is_match(&msg.metadata))
            && self
                .content_regex
                .as_ref()
                .is_none_or(|re| re.is_match(&msg.content))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(server: &str, channel: &str, content: &str, meta: &[(&str, &str)]) -> Message {
        let mut m = Message::from_new(
            crate::message::NewMessage::new(server, channel, content),
            1,
            chrono::Utc::now(),
        );
        for (k, v) in meta {
            m.metadata.insert(k, v);
        }
        m
    }

    fn filter(json: serde_json::Value) -> MessageFilter {
        MessageFilter::compile(&serde_json::from_value(json).unwrap()).unwrap()
    }

    #[test]
    fn a_filter_matches_as_a_rule_with_the_same_keys_does() {
        let f = filter(serde_json::json!({
            "server": "alert*", "channel": "alerts/*",
            "contentRegex": "disk (full|low)", "matchers": ["severity=~\"crit.*\""],
        }));
        let crit = [("severity", "critical")];
        assert!(f.is_match(&msg(
            "alertmanager",
            "alerts/db",
            "disk full on db-1",
            &crit
        )));
        assert!(!f.is_match(&msg("github", "alerts/db", "disk full", &crit)));
        assert!(!f.is_match(&msg("alertmanager", "ci", "disk full", &crit)));
        assert!(!f.is_match(&msg("alertmanager", "alerts/db", "cpu high", &crit)));
        let warn = [("severity", "warning")];
        assert!(!f.is_match(&msg("alertmanager", "alerts/db", "disk low", &warn)));
        assert!(filter(serde_json::json!({})).is_match(&msg("x", "y", "z", &[])));
    }

    #[test]
    fn a_bad_key_is_refused_naming_it() {
        let bad = |json| {
            MessageFilter::compile(&serde_json::from_value(json).unwrap())
                .err()
                .unwrap()
        };
        assert!(bad(serde_json::json!({"contentRegex": "("})).starts_with("`contentRegex` \"(\""));
        assert!(bad(serde_json::json!({"matchers": ["a=~\"(\""]})).starts_with("`matchers` \"a=~"));
        assert!(serde_json::from_value::<RawFilter>(serde_json::json!({"chanel": "x"})).is_err());
    }
}
