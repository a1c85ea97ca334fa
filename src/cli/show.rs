//! Human output: what a terminal shows of messages and confirms. Message text comes from
//! outside: control characters, ANSI escapes and bidi overrides in channels, content and
//! prompts are printed escaped ([`escape`]: `\n`, `\x1b`, `\u{202e}`), so a message cannot
//! forge a line or repaint the screen.

use std::borrow::Cow;

use crate::control::PendingView;
use crate::sources::upstream::UpstreamState;

/// `text` with every control character (C0, DEL, C1) and every bidi override escaped, so it
/// prints as one inert line: a newline becomes `\n`, ESC `\x1b`, U+202E `\u{202e}`.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

pub(crate) fn message_line(m: &crate::message::Message) -> String {
    format!(
        "#{} {} {}/{}: {}",
        m.seq,
        m.timestamp_rfc3339(),
        escape(&m.server),
        escape(&m.channel),
        escape(&m.content)
    )
}

/// One open confirm: `#7 [oncall-critical] alerts/critical, 14m left: EXCERPT`.
pub(crate) fn pending_line(p: &PendingView, now: chrono::DateTime<chrono::Utc>) -> String {
    let left = p
        .expires_at
        .as_deref()
        .and_then(|e| chrono::DateTime::parse_from_rfc3339(e).ok())
        .map(|e| {
            let secs = (e.with_timezone(&chrono::Utc) - now).num_seconds().max(0) as u64;
            let shown = humantime::format_duration(std::time::Duration::from_secs(secs));
            format!("{shown} left")
        })
        .unwrap_or_else(|| "no expiry".into());
    let excerpt: String = p.content.split_whitespace().collect::<Vec<_>>().join(" ");
    let excerpt = match excerpt.char_indices().nth(100) {
        Some((cut, _)) => format!("{}…", &excerpt[..cut]),
        None => excerpt,
    };
    format!(
        "#{} [{}] {}/{} seq {}, {left}: {}",
        p.id,
        escape(&p.rule),
        escape(&p.server),
        escape(&p.channel),
        p.seq,
        escape(&excerpt)
    )
}

/// How a closed confirm ended, one line: `#3 [crit] approved via web by web at 10:42:07Z`.
pub(crate) fn closed_line(c: &crate::actions::lifecycle::ClosedConfirm) -> String {
    use crate::actions::ActionState;
    let at = crate::message::format_timestamp(c.at);
    let how = match (c.state, c.via, &c.by, &c.reason) {
        (ActionState::Expired, ..) => "expired unanswered".to_string(),
        (ActionState::Resolved, _, _, Some(why)) => format!("{why} before anyone answered"),
        (state, Some(via), Some(by), Some(why)) => {
            format!("{} via {via} by {by} ({why})", state.as_str())
        }
        (state, Some(via), Some(by), None) => format!("{} via {via} by {by}", state.as_str()),
        (state, _, Some(by), _) => format!("{} by {by}", state.as_str()),
        (state, ..) => state.as_str().to_string(),
    };
    format!("#{} [{}] {} at {at}", c.id, escape(&c.rule), escape(&how))
}

/// `n thing` or `n things`.
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// One upstream, as `stats` and `status` show it: `teams (stdio): connected; connected since
/// T; 3 tools, 120 stored` or `teams (http): failed: WHY; 0 tools, 0 stored, 4 restarts`.
pub fn upstream_line(u: &UpstreamState) -> String {
    let state = serde_json::to_value(u.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut line = format!("{} ({}): {state}", escape(&u.name), u.transport);
    if let Some(e) = &u.last_error
        && u.state != crate::sources::upstream::Phase::Connected
    {
        line.push_str(&format!(": {}", escape(e)));
    }
    if let Some(since) = &u.connected_since {
        line.push_str(&format!("; connected since {since}"));
    }
    line.push_str(&format!(
        "; {}, {} stored",
        count(u.tools as u64, "tool", "tools"),
        u.stored
    ));
    if u.refused > 0 {
        line.push_str(&format!(", {} refused (too large)", u.refused));
    }
    if u.restarts > 0 {
        line.push_str(&format!(", {}", count(u.restarts, "restart", "restarts")));
    }
    line
}

/// Whether to colour what goes to a stream: on a terminal, or where `CLICOLOR_FORCE` asks for
/// it, and never where `NO_COLOR` is set (<https://no-color.org>).
pub fn colour(is_terminal: bool) -> bool {
    let set = |name| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    if set("NO_COLOR") {
        return false;
    }
    is_terminal || (set("CLICOLOR_FORCE") && std::env::var_os("CLICOLOR_FORCE") != Some("0".into()))
}

/// `text` in the SGR style `code` (`1;31`: bold red) when `colour`, else as it is.
pub fn paint(colour: bool, code: &str, text: &str) -> String {
    if colour {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// Pretty JSON on stdout, for `--json`.
pub fn print_json(value: &serde_json::Value) -> std::io::Result<()> {
    use std::io::Write;
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    writeln!(std::io::stdout().lock(), "{text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_makes_control_characters_visible() {
        let table = [
            ("plain text, üñí €", "plain text, üñí €"),
            ("two\nlines", "two\\nlines"),
            ("\x1b[2J\x1b[31mred", "\\x1b[2J\\x1b[31mred"),
            ("tab\there\r", "tab\\there\\r"),
            ("nul\0 del\x7f", "nul\\x00 del\\x7f"),
            ("c1 \u{9b}31m", "c1 \\u{9b}31m"),
            ("bidi \u{202e}txt.exe", "bidi \\u{202e}txt.exe"),
        ];
        for (raw, want) in table {
            assert_eq!(escape(raw), want, "{raw:?}");
        }
        assert!(matches!(escape("clean"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_message_line_is_one_line() {
        let msg = crate::message::Message::from_new(
            crate::message::NewMessage::new("x\x1b]0;title\x07", "a\nb", "line\n#2 forged"),
            7,
            chrono::Utc::now(),
        );
        let line = message_line(&msg);
        assert!(!line.chars().any(|c| c.is_control()), "{line:?}");
        assert!(line.contains("a\\nb"), "{line:?}");
        assert!(line.ends_with("line\\n#2 forged"), "{line:?}");
    }
}
