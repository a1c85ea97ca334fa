//! Prompt and dedup-key templates: `{{content}} {{channel}} {{server}} {{seq}} {{timestamp}}
//! {{meta.KEY}}`.
//!
//! A template is split once, at load time, into literal text and variables, so rendering is a
//! single pass: text substituted into the output is never scanned again (a message whose content
//! says `{{channel}}` stays as written). Unknown placeholders such as `{{foo}}` are kept verbatim;
//! `{{meta.KEY}}` of a key the message lacks renders as nothing. Spaces inside the braces are
//! allowed (`{{ content }}`). An unclosed `{{` or an empty `{{meta.}}` is an error.

use crate::message::Message;

/// A variable a template can name.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Var {
    Content,
    Channel,
    Server,
    Seq,
    Timestamp,
    Meta(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(Var),
}

/// A compiled template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Compiles `text`; the error is the reason, ready to follow a colon.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            literal.push_str(&rest[..open]);
            let after = &rest[open + 2..];
            let Some(close) = after.find("}}") else {
                let col = text.len() - rest.len() + open;
                return Err(format!(
                    "unclosed `{{{{` at byte {col}; close it with `}}}}`"
                ));
            };
            let raw = &after[..close];
            let name = raw.trim();
            let var = match name {
                "content" => Some(Var::Content),
                "channel" => Some(Var::Channel),
                "server" => Some(Var::Server),
                "seq" => Some(Var::Seq),
                "timestamp" => Some(Var::Timestamp),
                _ => match name.strip_prefix("meta.") {
                    Some("") => return Err("empty metadata key in `{{meta.}}`".into()),
                    Some(key) => Some(Var::Meta(key.to_string())),
                    None => None,
                },
            };
            match var {
                Some(var) => {
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Var(var));
                }
                // Unknown placeholder: verbatim.
                None => {
                    literal.push_str("{{");
                    literal.push_str(raw);
                    literal.push_str("}}");
                }
            }
            rest = &after[close + 2..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Template { parts })
    }

    /// Renders the template for `msg`.
    pub fn render(&self, msg: &Message) -> String {
        let mut out = String::with_capacity(64 + msg.content.len());
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Var(Var::Content) => out.push_str(&msg.content),
                Part::Var(Var::Channel) => out.push_str(&msg.channel),
                Part::Var(Var::Server) => out.push_str(&msg.server),
                Part::Var(Var::Seq) => out.push_str(&msg.seq.to_string()),
                Part::Var(Var::Timestamp) => out.push_str(&msg.timestamp_rfc3339()),
                Part::Var(Var::Meta(k)) => {
                    if let Some(v) = msg.metadata.get(k) {
                        out.push_str(v)
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::NewMessage;
    use chrono::TimeZone;

    fn msg() -> Message {
        let t = chrono::Utc
            .with_ymd_and_hms(2026, 11, 22, 9, 30, 5)
            .unwrap()
            + chrono::TimeDelta::milliseconds(250);
        Message::from_new(
            NewMessage::new("alertmanager", "alerts/critical", "disk {{channel}} full")
                .with_meta("host", "db1")
                .with_timestamp(t),
            42,
            t,
        )
    }

    #[test]
    fn renders_table() {
        let table: &[(&str, &str)] = &[
            ("{{content}}", "disk {{channel}} full"),
            (
                "{{channel}}/{{server}}#{{seq}}",
                "alerts/critical/alertmanager#42",
            ),
            ("at {{timestamp}}", "at 2026-11-22T09:30:05Z"),
            ("host={{meta.host}} dc={{meta.dc}}", "host=db1 dc="),
            ("{{ content }}", "disk {{channel}} full"),
            (
                "keep {{foo}} and {{meta}} as is",
                "keep {{foo}} and {{meta}} as is",
            ),
            ("no placeholders", "no placeholders"),
            ("{{seq}}{{seq}}", "4242"),
            ("", ""),
            ("a }} b", "a }} b"),
        ];
        for (tpl, want) in table {
            let t = Template::parse(tpl).unwrap();
            assert_eq!(t.render(&msg()), *want, "template {tpl:?}");
        }
    }

    #[test]
    fn rejects_unclosed_and_empty_meta() {
        assert!(
            Template::parse("hello {{content")
                .unwrap_err()
                .contains("unclosed")
        );
        assert!(
            Template::parse("{{meta.}}")
                .unwrap_err()
                .contains("empty metadata key")
        );
    }
}
