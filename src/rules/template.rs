//! Prompt and dedup-key templates: `{{content}} {{channel}} {{server}} {{seq}} {{timestamp}}
//! {{meta.KEY}}`.
//!
//! A template is split once, at load time, into literal text and variables, so rendering is a
//! single pass: text substituted into the output is never scanned again (a message whose content
//! says `{{channel}}` stays as written). Unknown placeholders such as `{{foo}}` are kept verbatim;
//! `{{meta.KEY}}` of a key the message lacks renders as nothing. Spaces inside the braces are
//! allowed (`{{ content }}`). An unclosed `{{` or an empty `{{meta.}}` is an error.
//!
//! A rendered text is at most [`MAX_RENDERED_BYTES`] (64 KiB): a template that repeats
//! `{{content}}` a thousand times must not turn a 10 KB message into 10 MB per action. Past the
//! cap the text is cut at a character boundary and ends with [`TRUNCATED_MARKER`]; the message
//! itself travels whole in its own field of every delivered item.

use crate::message::Message;

/// The most bytes a rendered prompt (or dedup key) has, marker included.
pub const MAX_RENDERED_BYTES: usize = 64 * 1024;

/// Ends a rendered text cut at [`MAX_RENDERED_BYTES`].
pub const TRUNCATED_MARKER: &str =
    "\n[switchboard: prompt truncated at 64 KiB; the whole message is in its own field]";

/// Builds a rendered text, keeping at most [`MAX_RENDERED_BYTES`] bytes.
struct Capped {
    out: String,
    full: bool,
}

impl Capped {
    fn with_capacity(n: usize) -> Capped {
        Capped {
            out: String::with_capacity(n.min(MAX_RENDERED_BYTES)),
            full: false,
        }
    }

    /// Appends `text`, or as much of it as fits before the marker; false once full.
    fn push(&mut self, text: &str) -> bool {
        if self.full {
            return false;
        }
        if self.out.len() + text.len() <= MAX_RENDERED_BYTES {
            self.out.push_str(text);
            return true;
        }
        let room = MAX_RENDERED_BYTES
            .saturating_sub(TRUNCATED_MARKER.len())
            .saturating_sub(self.out.len());
        if self.out.len() > MAX_RENDERED_BYTES - TRUNCATED_MARKER.len() {
            let mut end = MAX_RENDERED_BYTES - TRUNCATED_MARKER.len();
            while !self.out.is_char_boundary(end) {
                end -= 1;
            }
            self.out.truncate(end);
        }
        self.out.push_str(floor(text, room));
        self.out.push_str(TRUNCATED_MARKER);
        self.full = true;
        false
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn floor(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` cut to [`MAX_RENDERED_BYTES`] with [`TRUNCATED_MARKER`] when longer (the default
/// investigate prompt, which is not a template, goes through this too).
pub fn cap(text: String) -> String {
    if text.len() <= MAX_RENDERED_BYTES {
        return text;
    }
    let mut capped = Capped::with_capacity(MAX_RENDERED_BYTES);
    capped.push(&text);
    capped.out
}

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

    /// The metadata keys it reads (`{{meta.KEY}}`), in order of appearance.
    pub fn meta_keys(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(Var::Meta(k)) => Some(k.as_str()),
            _ => None,
        })
    }

    /// Renders the template for `msg`, at most [`MAX_RENDERED_BYTES`] long.
    pub fn render(&self, msg: &Message) -> String {
        let mut out = Capped::with_capacity(64 + msg.content.len());
        for part in &self.parts {
            let more = match part {
                Part::Text(t) => out.push(t),
                Part::Var(Var::Content) => out.push(&msg.content),
                Part::Var(Var::Channel) => out.push(&msg.channel),
                Part::Var(Var::Server) => out.push(&msg.server),
                Part::Var(Var::Seq) => out.push(&msg.seq.to_string()),
                Part::Var(Var::Timestamp) => out.push(&msg.timestamp_rfc3339()),
                Part::Var(Var::Meta(k)) => out.push(msg.metadata.get(k).map_or("", |v| v)),
            };
            if !more {
                break;
            }
        }
        out.out
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
    fn a_rendered_prompt_is_capped_on_a_char_boundary_with_a_marker() {
        // 10 KB of 3-byte characters, repeated 1000 times: 30 MB uncapped.
        let mut m = msg();
        m.content = "€".repeat(10_000 / 3);
        let t = Template::parse(&"{{content}}".repeat(1000)).unwrap();
        let out = t.render(&m);
        assert!(out.len() <= MAX_RENDERED_BYTES, "{} bytes", out.len());
        assert!(out.len() > MAX_RENDERED_BYTES - TRUNCATED_MARKER.len() - 4);
        assert!(out.ends_with(TRUNCATED_MARKER));
        let kept = out.strip_suffix(TRUNCATED_MARKER).unwrap();
        assert!(kept.chars().all(|c| c == '€'), "cut inside a character");

        // Just at the cap: whole, no marker.
        m.content = "x".repeat(MAX_RENDERED_BYTES);
        let whole = Template::parse("{{content}}").unwrap().render(&m);
        assert_eq!(whole, m.content);
        // One byte more: cut.
        let over = Template::parse("{{content}}.").unwrap().render(&m);
        assert_eq!(over.len(), MAX_RENDERED_BYTES);
        assert!(over.ends_with(TRUNCATED_MARKER));
        // Text after the cut is not rendered.
        let t = Template::parse("{{content}}{{content}} tail {{seq}}").unwrap();
        assert!(!t.render(&m).contains("tail"));
        assert_eq!(cap(m.content.clone()), m.content);
        let capped = cap(format!("{}é", m.content));
        assert_eq!(capped.len(), MAX_RENDERED_BYTES);
        assert!(capped.ends_with(TRUNCATED_MARKER));
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
