//! Matchers over a message's metadata, written as Alertmanager writes them: `KEY="value"`,
//! `KEY!="value"`, `KEY=~"regex"`, `KEY!~"regex"`. A rule's `matchers` must all hold.
//!
//! The syntax follows Alertmanager's matcher parser (`pkg/labels/parse.go`), extended only
//! where our keys need it:
//! - whitespace around the key, the operator and the value is ignored;
//! - the key is a metadata key as the message carries it (`labels.team`, `annotations.summary`,
//!   `sender`): any text without whitespace, `= ! ~ " , { }`, or any text in double quotes;
//! - the value may be in double quotes (then it may hold `,`, `=`, spaces at either end);
//!   inside it `\"` is a quote, `\n` a line feed and `\\` a backslash; any other backslash is
//!   itself (`\d` stays `\d`, so regexes read as written); an unescaped `"` may only close a
//!   quoted value;
//! - a regex is anchored at both ends, as `^(?:regex)$` (`=~"db"` does not match `db-1`);
//! - a key the message does not have reads as the empty string, so `team=""` holds for a
//!   message without `team` and `team!=""` asks for one.
//!
//! Regexes are Rust `regex` syntax (RE2-like, as Alertmanager's Go regexes are), built on
//! first use like content regexes ([`ContentRegex`]).

use std::fmt;

use regex_syntax::hir::{Class, Hir, HirKind};

use super::ContentRegex;
use super::error::regex_reason;
use crate::message::Metadata;

/// The operator of a matcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchOp {
    /// `=`: the value equals.
    Equal,
    /// `!=`: the value differs.
    NotEqual,
    /// `=~`: the whole value matches the regex.
    Regex,
    /// `!~`: the whole value does not match the regex.
    NotRegex,
}

impl MatchOp {
    /// As written.
    pub fn as_str(self) -> &'static str {
        match self {
            MatchOp::Equal => "=",
            MatchOp::NotEqual => "!=",
            MatchOp::Regex => "=~",
            MatchOp::NotRegex => "!~",
        }
    }
}

/// A compiled matcher.
#[derive(Clone, Debug)]
pub struct Matcher {
    key: String,
    op: MatchOp,
    value: String,
    /// For `=~` and `!~`: the value anchored at both ends.
    regex: Option<ContentRegex>,
    /// For `=~` and `!~` whose regex matches a few strings only (`critical|page`): those
    /// strings, compared instead of running the regex.
    exact: Option<Box<[String]>>,
}

/// Why a matcher does not parse: the reason, and the character (0-based) where it shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatcherError {
    /// Character offset in the matcher text.
    pub at: usize,
    /// What is wrong (lowercase, hint after a semicolon).
    pub reason: String,
}

fn err<T>(at: usize, reason: impl Into<String>) -> Result<T, MatcherError> {
    Err(MatcherError {
        at,
        reason: reason.into(),
    })
}

/// What an unquoted key may hold: anything but whitespace, the operators' characters, quotes,
/// commas and braces.
fn is_key_char(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, '=' | '!' | '~' | '"' | ',' | '{' | '}')
}

/// Reads a quoted or unquoted text from `chars[i..]` up to `end` (exclusive), undoing the
/// escapes; `quoted` says whether `chars[i]` opens a quote that must close at `end - 1`.
fn unescape(chars: &[(usize, char)], quoted: bool) -> Result<String, MatcherError> {
    let mut out = String::new();
    let (body, close) = if quoted {
        match chars.split_last() {
            Some((last, body)) if last.1 == '"' && !body.is_empty() => (&body[1..], true),
            _ => {
                let at = chars.last().map_or(0, |c| c.0 + 1);
                return err(at, "missing closing `\"`");
            }
        }
    } else {
        (chars, false)
    };
    let mut it = body.iter().peekable();
    while let Some(&(at, c)) = it.next() {
        match c {
            '\\' => match it.peek().map(|c| c.1) {
                Some('"') | Some('\\') => out.push(it.next().unwrap().1),
                Some('n') => {
                    it.next();
                    out.push('\n');
                }
                // A lone backslash is itself, as in Alertmanager (so `\d` stays `\d`).
                _ => out.push('\\'),
            },
            '"' => {
                let hint = if close {
                    "; write `\\\"` for a quote inside the value"
                } else {
                    "; quote the whole value or write `\\\"`"
                };
                return err(at, format!("unescaped `\"` inside the value{hint}"));
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

impl Matcher {
    /// Parses one matcher, e.g. `labels.severity=~"critical|page"`.
    pub fn parse(text: &str) -> Result<Matcher, MatcherError> {
        let chars: Vec<(usize, char)> = text.chars().enumerate().collect();
        let n = chars.len();
        let mut i = 0;
        while i < n && chars[i].1.is_whitespace() {
            i += 1;
        }
        // The key.
        let key_start = i;
        let key = if i < n && chars[i].1 == '"' {
            let mut j = i + 1;
            while j < n && chars[j].1 != '"' {
                j += if chars[j].1 == '\\' { 2 } else { 1 };
            }
            if j >= n {
                return err(n, "missing closing `\"` after the key");
            }
            i = j + 1;
            unescape(&chars[key_start..=j], true)?
        } else {
            while i < n && is_key_char(chars[i].1) {
                i += 1;
            }
            if let Some(&(at, c)) = chars.get(i)
                && i > key_start
                && matches!(c, '"' | ',' | '{' | '}')
            {
                return err(
                    at,
                    format!("`{c}` cannot be in a key; quote the key (`\"my key\"=\"v\"`)"),
                );
            }
            chars[key_start..i].iter().map(|c| c.1).collect()
        };
        if key.is_empty() {
            let hint = match chars.get(key_start) {
                None => "an empty matcher; write `KEY=\"value\"`".to_string(),
                Some((_, '=' | '!' | '~')) => {
                    "a matcher starts with a metadata key, e.g. `labels.team=\"db\"`".into()
                }
                Some((_, c)) => format!("`{c}` cannot begin a key; quote the key"),
            };
            return err(key_start, hint);
        }
        while i < n && chars[i].1.is_whitespace() {
            i += 1;
        }
        // The operator.
        let rest: String = chars[i..].iter().take(2).map(|c| c.1).collect();
        let op = if rest.starts_with("=~") {
            MatchOp::Regex
        } else if rest.starts_with("!=") {
            MatchOp::NotEqual
        } else if rest.starts_with("!~") {
            MatchOp::NotRegex
        } else if rest.starts_with('=') {
            MatchOp::Equal
        } else {
            let got = match chars.get(i) {
                None => "the end".to_string(),
                Some((_, c)) => format!("`{c}`"),
            };
            return err(
                i,
                format!(
                    "expected an operator (`=`, `!=`, `=~` or `!~`) after the key `{key}`, got {got}"
                ),
            );
        };
        i += op.as_str().len();
        // The value: the rest, without the whitespace around it.
        let mut end = n;
        while end > i && chars[end - 1].1.is_whitespace() {
            end -= 1;
        }
        while i < end && chars[i].1.is_whitespace() {
            i += 1;
        }
        let raw = &chars[i..end];
        let quoted = raw.first().is_some_and(|c| c.1 == '"');
        let value = unescape(raw, quoted)?;
        let regex = match op {
            MatchOp::Regex | MatchOp::NotRegex => {
                match ContentRegex::new(&format!("^(?:{value})$")) {
                    Ok(re) => Some(re),
                    Err(e) => {
                        let reason = regex_reason(&e);
                        return err(i, format!("invalid regex \"{value}\": {reason}"));
                    }
                }
            }
            _ => None,
        };
        let exact = regex.as_ref().and_then(|_| {
            let hir = regex_syntax::parse(&value).ok()?;
            let mut strings = Vec::new();
            exact_strings(&hir, &mut strings)?;
            Some(strings.into_boxed_slice())
        });
        Ok(Matcher {
            key,
            op,
            value,
            regex,
            exact,
        })
    }

    /// The metadata key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn op(&self) -> MatchOp {
        self.op
    }

    /// The value (for a regex, as written, without the anchors).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Whether it holds for `value` (the empty string for a missing key).
    pub fn holds(&self, value: &str) -> bool {
        if let Some(set) = &self.exact {
            return set.iter().any(|s| s == value) == (self.op == MatchOp::Regex);
        }
        match (self.op, &self.regex) {
            (MatchOp::Equal, _) => value == self.value,
            (MatchOp::NotEqual, _) => value != self.value,
            (MatchOp::Regex, Some(re)) => re.is_match(value),
            (MatchOp::NotRegex, Some(re)) => !re.is_match(value),
            (_, None) => false,
        }
    }

    /// The strings that decide it without a regex: it holds for a value when the value is
    /// among them (`="db"`, `=~"critical|page"`) or, with `false`, when it is not (`!="db"`,
    /// `!~"bot-1|bot-2"`). `None` for a regex that must run. So the engine's index can keep
    /// every rule's strings in one table of its own, and decide a matcher from it without
    /// reading the matcher.
    pub fn decided_by(&self) -> Option<(Vec<&str>, bool)> {
        let when_in = match (self.op, &self.exact) {
            (MatchOp::Equal, _) | (MatchOp::Regex, Some(_)) => true,
            (MatchOp::NotEqual, _) | (MatchOp::NotRegex, Some(_)) => false,
            (MatchOp::Regex | MatchOp::NotRegex, None) => return None,
        };
        let among = match &self.exact {
            Some(set) => set.iter().map(String::as_str).collect(),
            None => vec![self.value.as_str()],
        };
        Some((among, when_in))
    }

    /// Whether it holds for a message's metadata.
    pub fn is_match(&self, metadata: &Metadata) -> bool {
        self.holds(metadata.value(&self.key))
    }

    /// Every value it holds for, when that is a short list of non-empty strings: `="db"` →
    /// `db`, `=~"db|web"` → `db`, `web`. The engine's index finds the rule by these; `None`
    /// when the matcher can hold for other values (or for a missing key).
    pub fn values(&self) -> Option<Vec<String>> {
        match self.op {
            MatchOp::Equal if !self.value.is_empty() => Some(vec![self.value.clone()]),
            MatchOp::Regex => {
                let set = self.exact.as_ref()?;
                set.iter().all(|v| !v.is_empty()).then(|| set.to_vec())
            }
            _ => None,
        }
    }
}

/// Most values a regex matcher may stand for in the index.
const MAX_VALUES: usize = 16;

/// The strings `hir` matches in full, when it is a literal, an alternation of literals, or a
/// small class of characters; `None` otherwise.
fn exact_strings(hir: &Hir, out: &mut Vec<String>) -> Option<()> {
    match hir.kind() {
        HirKind::Literal(lit) => out.push(String::from_utf8(lit.0.to_vec()).ok()?),
        HirKind::Capture(cap) => exact_strings(&cap.sub, out)?,
        HirKind::Alternation(branches) => {
            for b in branches {
                exact_strings(b, out)?;
            }
        }
        HirKind::Class(Class::Unicode(class)) => {
            for range in class.ranges() {
                for c in range.start()..=range.end() {
                    out.push(c.to_string());
                    if out.len() > MAX_VALUES {
                        return None;
                    }
                }
            }
        }
        _ => return None,
    }
    (out.len() <= MAX_VALUES).then_some(())
}

/// The matcher as it could be written again: `key="value"`, the key quoted when it needs it.
impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quote = |s: &str| {
            let mut out = String::from("\"");
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    '\\' => out.push_str("\\\\"),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        };
        if !self.key.is_empty() && self.key.chars().all(is_key_char) {
            f.write_str(&self.key)?;
        } else {
            f.write_str(&quote(&self.key))?;
        }
        f.write_str(self.op.as_str())?;
        f.write_str(&quote(&self.value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> Metadata {
        pairs.iter().copied().collect()
    }

    fn parsed(text: &str) -> (String, MatchOp, String) {
        let m = Matcher::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e:?}"));
        (m.key().to_string(), m.op(), m.value().to_string())
    }

    #[test]
    fn every_operator() {
        use MatchOp::*;
        let md = meta(&[("labels.team", "db"), ("sender", "Ada Lovelace")]);
        let table: &[(&str, bool)] = &[
            (r#"labels.team="db""#, true),
            (r#"labels.team="web""#, false),
            (r#"labels.team!="web""#, true),
            (r#"labels.team!="db""#, false),
            (r#"labels.team=~"db|web""#, true),
            (r#"labels.team=~"web|api""#, false),
            (r#"labels.team!~"web|api""#, true),
            (r#"labels.team!~"d.""#, false),
            (r#"sender=~"Ada .*""#, true),
        ];
        for (text, want) in table {
            assert_eq!(Matcher::parse(text).unwrap().is_match(&md), *want, "{text}");
        }
        assert_eq!(parsed("a=b").1, Equal);
        assert_eq!(parsed("a!=b").1, NotEqual);
        assert_eq!(parsed("a=~b").1, Regex);
        assert_eq!(parsed("a!~b").1, NotRegex);
    }

    #[test]
    fn decided_by_agrees_with_holds() {
        // Each matcher, and whether a few strings decide it.
        let matchers = [
            (r#"k="db""#, true),
            (r#"k="""#, true),
            (r#"k!="db""#, true),
            (r#"k!="""#, true),
            (r#"k=~"db|web""#, true),
            (r#"k=~"[ab]""#, true),
            (r#"k!~"db|web""#, true),
            (r#"k!~"""#, false),
            (r#"k=~"d.*""#, false),
            (r#"k!~"d.*""#, false),
        ];
        let values = ["", "db", "web", "a", "b", "dbx", "d", "DB"];
        for (text, few) in matchers {
            let m = Matcher::parse(text).unwrap();
            assert_eq!(m.decided_by().is_some(), few, "{text}");
            let Some((among, when_in)) = m.decided_by() else {
                continue;
            };
            for v in values {
                assert_eq!(among.contains(&v) == when_in, m.holds(v), "{text} on {v:?}");
            }
        }
    }

    #[test]
    fn regexes_are_anchored_at_both_ends() {
        let m = Matcher::parse(r#"labels.instance=~"api-\d+""#).unwrap();
        for (value, want) in [
            ("api-1", true),
            ("api-12", true),
            ("xapi-1", false),
            ("api-1x", false),
            ("api-1\n", false),
        ] {
            assert_eq!(m.holds(value), want, "{value:?}");
        }
        // An alternation is anchored as a whole, not only its first and last branch.
        let m = Matcher::parse(r#"x=~"a|b""#).unwrap();
        assert!(m.holds("a") && m.holds("b"));
        assert!(!m.holds("ab") && !m.holds("xa") && !m.holds("bx"));
        // Flags inside stay inside the group.
        let m = Matcher::parse(r#"x=~"(?i)db""#).unwrap();
        assert!(m.holds("DB") && !m.holds("db1"));
        let m = Matcher::parse(r#"x!~".*test.*""#).unwrap();
        assert!(m.holds("prod") && !m.holds("a-test-b"));
    }

    #[test]
    fn a_missing_key_is_the_empty_string() {
        let none = meta(&[]);
        let empty = meta(&[("team", "")]);
        let some = meta(&[("team", "db")]);
        let table: &[(&str, [bool; 3])] = &[
            (r#"team="""#, [true, true, false]),
            (r#"team!="""#, [false, false, true]),
            (r#"team="db""#, [false, false, true]),
            (r#"team!="db""#, [true, true, false]),
            (r#"team=~".*""#, [true, true, true]),
            (r#"team=~".+""#, [false, false, true]),
            (r#"team!~"db""#, [true, true, false]),
        ];
        for (text, want) in table {
            let m = Matcher::parse(text).unwrap();
            let got = [m.is_match(&none), m.is_match(&empty), m.is_match(&some)];
            assert_eq!(got, *want, "{text}");
        }
    }

    #[test]
    fn quoting_and_escaping_as_alertmanager() {
        let table: &[(&str, &str, &str)] = &[
            // Whitespace around each part goes; inside quotes it stays.
            (r#"  team  =  "db"  "#, "team", "db"),
            (r#"team=" db ""#, "team", " db "),
            // Unquoted values are taken as they are, with the same escapes.
            ("team=db", "team", "db"),
            ("team=", "team", ""),
            (r#"team="""#, "team", ""),
            // Escapes: \" quote, \n line feed, \\ backslash; any other backslash is itself.
            (r#"q="say \"hi\"""#, "q", "say \"hi\""),
            (r#"q="a\nb""#, "q", "a\nb"),
            (r#"q="a\\b""#, "q", "a\\b"),
            (r#"q="\d+""#, "q", "\\d+"),
            (r#"q="end\""#, "q", "end\\"),
            // Commas, equals signs and operators inside the value are text.
            (r#"summary="a=b, c!=d""#, "summary", "a=b, c!=d"),
            // Keys as the message carries them, or quoted.
            (
                r#"annotations.runbook_url="x""#,
                "annotations.runbook_url",
                "x",
            ),
            (
                r#"labels.app.kubernetes.io/name="api""#,
                "labels.app.kubernetes.io/name",
                "api",
            ),
            (r#""my key"="v""#, "my key", "v"),
            (r#"chat_id@teams="19:ada""#, "chat_id@teams", "19:ada"),
            (r#""k\"q"="v""#, "k\"q", "v"),
        ];
        for (text, key, value) in table {
            let (k, _, v) = parsed(text);
            assert_eq!((k.as_str(), v.as_str()), (*key, *value), "{text}");
        }
        let m = Matcher::parse(r#"q=~"\d+""#).unwrap();
        assert!(m.holds("42") && !m.holds("4a"));
    }

    #[test]
    fn bad_matchers_say_where() {
        let table: &[(&str, usize, &str)] = &[
            ("", 0, "empty matcher"),
            (r#"="x""#, 0, "starts with a metadata key"),
            (r#"team"#, 4, "expected an operator"),
            (r#"team=="x""#, 6, "unescaped"),
            (r#"team ~ "x""#, 5, "expected an operator"),
            (r#"team="db"#, 8, "missing closing"),
            (r#"team="a"b""#, 7, "unescaped `\"`"),
            (r#"team=a"b"#, 6, "unescaped `\"`"),
            (r#"team=~"(db""#, 6, "invalid regex \"(db\""),
            (r#"team,x="y""#, 4, "cannot be in a key"),
            (r#""team"#, 5, "missing closing"),
        ];
        for (text, at, reason) in table {
            let e = Matcher::parse(text).unwrap_err();
            assert!(e.reason.contains(reason), "{text}: {e:?}");
            assert_eq!(e.at, *at, "{text}: {e:?}");
        }
    }

    #[test]
    fn values_for_the_index_are_exact() {
        let table: &[(&str, Option<&[&str]>)] = &[
            (r#"team="db""#, Some(&["db"])),
            (r#"team="""#, None),
            (r#"team!="db""#, None),
            (r#"team=~"db|web""#, Some(&["db", "web"])),
            (r#"team=~"(db|web)""#, Some(&["db", "web"])),
            (r#"team=~"db""#, Some(&["db"])),
            (r#"sev=~"[12]""#, Some(&["1", "2"])),
            (r#"team=~"db.*""#, None),
            (r#"team=~"db|""#, None),
            (r#"team=~"(?i)db""#, None),
            (r#"team!~"db""#, None),
        ];
        for (text, want) in table {
            let got = Matcher::parse(text).unwrap().values();
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(got, want, "{text}");
        }
        // Exact: the values, and the comparison that replaces the regex for such matchers,
        // say what the anchored regex says.
        for (pattern, listed) in [
            ("db|web", true),
            ("[12]", true),
            ("(a)|b", true),
            ("é|ß", true),
            ("db|", false),
            ("", false),
            ("(?i)db", false),
            ("db.*", false),
        ] {
            let re = regex::Regex::new(&format!("^(?:{pattern})$")).unwrap();
            for op in ["=~", "!~"] {
                let m = Matcher::parse(&format!("t{op}\"{pattern}\"")).unwrap();
                assert_eq!(m.values().is_some(), listed && op == "=~", "{op}{pattern}");
                for v in [
                    "", "db", "web", "DB", "1", "2", "a", "b", "dbweb", "12", "é", "ß", "x",
                ] {
                    let want = re.is_match(v) == (op == "=~");
                    assert_eq!(m.holds(v), want, "{op}{pattern:?} on {v:?}");
                    if let Some(values) = m.values() {
                        assert_eq!(values.iter().any(|x| x == v), want, "{pattern} on {v:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn display_writes_it_back() {
        for text in [
            r#"labels.team="db""#,
            r#"q!~"say \"hi\"\n""#,
            r#""my key"=~"a|b""#,
        ] {
            let m = Matcher::parse(text).unwrap();
            assert_eq!(m.to_string(), *text);
            assert_eq!(Matcher::parse(&m.to_string()).unwrap().value(), m.value());
        }
    }
}
