//! Teams message HTML as plain text: tags stripped, `<br>` and block ends (`<p>`, `<div>`) as
//! line breaks, entities decoded, `<at>` mentions as `@Name`, `<attachment>` as
//! `[attachment: name]`, images and emoji by their `alt` text, links as `text (url)`.
//!
//! Written by hand rather than with an HTML parser crate: Teams sends a small, regular subset
//! (the samples in Microsoft's docs are the unit tests), and this reader never fails: a stray
//! `<`, an unclosed tag or an unknown entity stays as text.

/// What the HTML refers to: mention ids and attachment ids, with the text each stands for.
#[derive(Debug, Default)]
pub struct Refs {
    /// `<at id="N">` → the mention's text (`mentionText`).
    pub mentions: Vec<(String, String)>,
    /// `<attachment id="X">` → the attachment's name.
    pub attachments: Vec<(String, String)>,
}

/// The text of `html`, and the ids of the attachments it showed in place.
pub fn to_text(html: &str, refs: &Refs) -> (String, Vec<String>) {
    let mut out = Writer::default();
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        out.text(&decode(&rest[..lt]));
        let tail = &rest[lt..];
        if let Some(end) = tail.strip_prefix("<!--").and_then(|t| t.find("-->")) {
            rest = &tail[4 + end + 3..];
            continue;
        }
        match tag_end(tail) {
            Some(end) if is_tag_start(tail) => {
                out.tag(&Tag::parse(&tail[1..end]), refs);
                rest = &tail[end + 1..];
                if let Some(skip) = out.skipping.clone() {
                    // The content of `<script>` and `<style>` is not text.
                    let close = format!("</{skip}");
                    let at = find_ignore_case(rest, &close).unwrap_or(rest.len());
                    rest = &rest[at..];
                    out.skipping = None;
                }
            }
            _ => {
                out.text("<");
                rest = &tail[1..];
            }
        }
    }
    out.text(&decode(rest));
    out.finish()
}

/// Whether `<` starts a tag (`<p`, `</p`, `<!DOCTYPE`), not a literal `<` ("a < b").
fn is_tag_start(s: &str) -> bool {
    s.as_bytes()
        .get(1)
        .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'/' || *b == b'!')
}

/// The index of the `>` that closes the tag at the start of `s`, quotes respected.
fn tag_end(s: &str) -> Option<usize> {
    let mut quote = None;
    for (i, b) in s.bytes().enumerate().skip(1) {
        match (quote, b) {
            (None, b'"' | b'\'') => quote = Some(b),
            (Some(q), _) if b == q => quote = None,
            (None, b'>') => return Some(i),
            _ => {}
        }
    }
    None
}

fn find_ignore_case(haystack: &str, needle: &str) -> Option<usize> {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    (0..=h.len().checked_sub(n.len())?).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// One tag: its lowercase name, whether it closes, its attributes.
struct Tag {
    name: String,
    closing: bool,
    attrs: Vec<(String, String)>,
}

impl Tag {
    /// Parses the inside of `<...>`.
    fn parse(inner: &str) -> Tag {
        let inner = inner.trim().trim_end_matches('/');
        let (closing, inner) = match inner.strip_prefix('/') {
            Some(rest) => (true, rest.trim_start()),
            None => (false, inner),
        };
        let name_end = inner
            .find(|c: char| c.is_whitespace())
            .unwrap_or(inner.len());
        Tag {
            name: inner[..name_end].to_ascii_lowercase(),
            closing,
            attrs: attributes(&inner[name_end..]),
        }
    }

    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `a="x" b='y' c=z d` → pairs, names lowercase, values decoded.
fn attributes(mut s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    loop {
        s = s.trim_start();
        let name_end = s
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(s.len());
        if name_end == 0 {
            return out;
        }
        let name = s[..name_end].to_ascii_lowercase();
        s = s[name_end..].trim_start();
        let Some(after) = s.strip_prefix('=') else {
            out.push((name, String::new()));
            continue;
        };
        let after = after.trim_start();
        let (value, rest) = match after.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let body = &after[1..];
                let end = body.find(q).unwrap_or(body.len());
                (&body[..end], body.get(end + 1..).unwrap_or(""))
            }
            _ => {
                let end = after
                    .find(|c: char| c.is_whitespace())
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        out.push((name, decode(value)));
        s = rest;
    }
}

/// Builds the text: collapses whitespace as HTML does, places line breaks, remembers where a
/// mention or a link began.
#[derive(Default)]
struct Writer {
    out: String,
    space: bool,
    mention: Option<(usize, Option<String>)>,
    link: Option<(usize, String)>,
    shown: Vec<String>,
    skipping: Option<String>,
}

impl Writer {
    /// Text between tags: runs of whitespace become one space.
    fn text(&mut self, s: &str) {
        for c in s.chars() {
            if c.is_whitespace() {
                self.space = true;
            } else {
                self.put_space();
                self.out.push(c);
            }
        }
    }

    /// Text that stands for an element (`@Name`, `[image]`), after any pending space.
    fn inline(&mut self, s: &str) {
        self.put_space();
        self.out.push_str(s);
    }

    fn put_space(&mut self) {
        if self.space && !self.out.is_empty() && !self.out.ends_with(['\n', ' ']) {
            self.out.push(' ');
        }
        self.space = false;
    }

    /// Ends the line unless it is empty: block elements.
    fn end_line(&mut self) {
        self.trim_spaces();
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push('\n');
        }
        self.space = false;
    }

    /// A line break, even after another: `<br>`.
    fn line_break(&mut self) {
        self.trim_spaces();
        if !self.out.is_empty() {
            self.out.push('\n');
        }
        self.space = false;
    }

    fn trim_spaces(&mut self) {
        let kept = self.out.trim_end_matches(' ').len();
        self.out.truncate(kept);
    }

    fn tag(&mut self, tag: &Tag, refs: &Refs) {
        match (tag.name.as_str(), tag.closing) {
            ("br", _) => self.line_break(),
            (
                "p" | "div" | "tr" | "table" | "ul" | "ol" | "blockquote" | "pre" | "hr" | "h1"
                | "h2" | "h3" | "h4" | "h5" | "h6",
                _,
            ) => self.end_line(),
            ("li", false) => {
                self.end_line();
                self.out.push_str("- ");
            }
            ("li", true) => self.end_line(),
            ("td" | "th", true) => self.space = true,
            ("script" | "style", false) => self.skipping = Some(tag.name.clone()),
            ("at", false) => {
                self.inline("@");
                let id = tag.attr("id").unwrap_or_default();
                let known = refs.mentions.iter().find(|(m, _)| m == id);
                self.mention = Some((self.out.len(), known.map(|(_, t)| t.clone())));
            }
            ("at", true) => {
                if let Some((start, Some(text))) = self.mention.take() {
                    self.out.truncate(start);
                    self.out.push_str(text.trim());
                }
            }
            ("attachment", false) => {
                let id = tag.attr("id").unwrap_or_default();
                let name = refs.attachments.iter().find(|(a, _)| a == id);
                let name = name.map_or("file", |(_, n)| n.as_str());
                self.inline(&format!("[attachment: {name}]"));
                self.shown.push(id.to_string());
            }
            ("img" | "emoji", false) => match tag.attr("alt").filter(|a| !a.trim().is_empty()) {
                Some(alt) => self.inline(alt),
                None if tag.name == "img" => self.inline("[image]"),
                None => {}
            },
            ("a", false) => {
                let href = tag.attr("href").unwrap_or_default().to_string();
                self.put_space();
                self.link = Some((self.out.len(), href));
            }
            ("a", true) => {
                if let Some((start, href)) = self.link.take() {
                    let text = self.out[start..].trim().to_string();
                    let web = href.starts_with("https://") || href.starts_with("http://");
                    if web && text.is_empty() {
                        self.inline(&href);
                    } else if web && text != href {
                        self.out.push_str(&format!(" ({href})"));
                    }
                }
            }
            _ => {}
        }
    }

    fn finish(mut self) -> (String, Vec<String>) {
        self.trim_spaces();
        let mut text = String::with_capacity(self.out.len());
        let mut blank = 0;
        for line in self.out.trim_matches('\n').split('\n') {
            let line = line.trim_end();
            blank = if line.is_empty() { blank + 1 } else { 0 };
            if blank < 2 {
                text.push_str(line);
                text.push('\n');
            }
        }
        text.truncate(text.trim_end().len());
        (text, self.shown)
    }
}

/// Decodes character references: the common named ones, `&#NNN;` and `&#xHH;`. Anything else
/// stays as written.
pub fn decode(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let tail = &rest[amp..];
        let semi = tail[1..].find(';').map(|i| i + 1).filter(|&i| i <= 12);
        let decoded = semi.and_then(|i| entity(&tail[1..i]));
        match (semi, decoded) {
            (Some(i), Some(c)) => {
                out.push(c);
                rest = &tail[i + 1..];
            }
            _ => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn entity(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(code);
    }
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "copy" => '©',
        "reg" => '®',
        "hellip" => '…',
        "mdash" => '—',
        "ndash" => '–',
        "lsquo" => '‘',
        "rsquo" => '’',
        "ldquo" => '“',
        "rdquo" => '”',
        "bull" => '•',
        "middot" => '·',
        "euro" => '€',
        _ => return None,
    })
}

/// `text` as the HTML of a chat message: `&`, `<`, `>`, `"` and `'` escaped, line breaks as
/// `<br>`. What `channel_reply` posts, so that an answer shows as written.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\r' | '\n' => out.push_str("<br>"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(html: &str) -> String {
        to_text(html, &Refs::default()).0
    }

    #[test]
    fn tags_go_and_paragraphs_and_breaks_become_lines() {
        // `chatmessage-get`, example 3 (learn.microsoft.com/graph/api/chatmessage-get).
        assert_eq!(text("<div><div>Test</div></div>"), "Test");
        assert_eq!(
            text("<p>first line</p><p>second <b>bold</b>   line</p>"),
            "first line\nsecond bold line"
        );
        assert_eq!(text("one<br>two<br/><br />three"), "one\ntwo\n\nthree");
        assert_eq!(
            text("<ul><li>a</li><li>b</li></ul>after"),
            "- a\n- b\nafter"
        );
        assert_eq!(text("<systemEventMessage/>"), "");
    }

    #[test]
    fn entities_are_decoded_and_literal_angles_stay() {
        assert_eq!(
            text("Tom &amp; Jerry &lt;3 &quot;hi&quot; &#39;x&#39; &#x1F600; caf&eacute; a&nbsp;b"),
            "Tom & Jerry <3 \"hi\" 'x' 😀 caf&eacute; a b"
        );
        assert_eq!(text("if a < b and c > d"), "if a < b and c > d");
        assert_eq!(text("unclosed <b"), "unclosed <b");
        assert_eq!(decode("&amp;amp;"), "&amp;");
    }

    #[test]
    fn mentions_attachments_images_and_links() {
        // `chatmessage-post`, "@mentions" (learn.microsoft.com/graph/api/chatmessage-post).
        let refs = Refs {
            mentions: vec![("0".into(), "Jane Smith".into())],
            attachments: vec![(
                "153fa47d-18c9-4179-be08-9879815a9f90".into(),
                "test doc.docx".into(),
            )],
        };
        let (t, shown) = to_text(
            "Hello World <at id=\"0\">Jane Smith</at>, see \
             <attachment id=\"153fa47d-18c9-4179-be08-9879815a9f90\"></attachment>",
            &refs,
        );
        assert_eq!(
            t,
            "Hello World @Jane Smith, see [attachment: test doc.docx]"
        );
        assert_eq!(shown, ["153fa47d-18c9-4179-be08-9879815a9f90"]);
        assert_eq!(text("<at id=\"7\">Bo</at> hi"), "@Bo hi");
        // A hosted image, as in `chat-list-messages`' second message.
        assert_eq!(
            text(
                "<div><div><div><span><img height=\"63\" src=\"https://graph.microsoft.com/v1.0/x/$value\" width=\"67\"></span></div></div></div>"
            ),
            "[image]"
        );
        assert_eq!(
            text("nice <emoji id=\"smile\" alt=\"🙂\" title=\"Smile\"></emoji>"),
            "nice 🙂"
        );
        assert_eq!(
            text("see <a href=\"https://x.example/runbook\">the runbook</a>."),
            "see the runbook (https://x.example/runbook)."
        );
        assert_eq!(
            text("<a href=\"https://x.example\">https://x.example</a>"),
            "https://x.example"
        );
        assert_eq!(
            text("a<script>alert(1)</script>b<style>p{}</style>c"),
            "abc"
        );
    }

    #[test]
    fn escape_keeps_the_text_as_written() {
        assert_eq!(
            escape("<b>5 > 3</b> & \"ok\"\nsecond\r\nthird"),
            "&lt;b&gt;5 &gt; 3&lt;/b&gt; &amp; &quot;ok&quot;<br>second<br>third"
        );
        // What was escaped reads back as the same text.
        let s = "a < b & c\nnext 'line'";
        assert_eq!(text(&escape(s)), s);
    }

    #[test]
    fn nothing_panics_on_broken_html() {
        for s in [
            "<",
            "<<",
            "<a",
            "<a href=\"",
            "</",
            "<!--",
            "<!-- x",
            "&",
            "&#",
            "&#x;",
            "&#99999999;",
            "<at id=\"0\">x",
            "</at>",
            "</a>",
            "<li>",
            "é<b>ü</b>ß",
            "<img alt='ü'",
            "<p>\u{202e}</p>",
        ] {
            let _ = text(s);
        }
    }
}
