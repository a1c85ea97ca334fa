//! ASCII stand-ins: how a content regex with a Unicode word boundary is decided over text with
//! a few non-ASCII characters by the lazy DFA, not by the PikeVM.
//!
//! The lazy DFA cannot tell a Unicode word boundary (`\b`, `\<`, ...) beside a non-ASCII
//! character, so for such a pattern it quits at the first non-ASCII byte of the message. Its
//! fallback, the PikeVM, costs the pattern's NFA states times the message's bytes: for a guard
//! of a hundred states over a 256 KiB message with one `é`, more than the budget
//! ([`super::content`]), and the message could not be decided.
//!
//! A non-ASCII character that none of the pattern's literals and classes can match is never
//! part of a match: the pattern only sees it through its look-arounds, and there only whether
//! it is a word character (a non-ASCII character is never a line terminator). So each such
//! character is replaced by one ASCII byte that the pattern cannot match either: a word byte
//! (`_`, a digit, a letter) for a word character, another byte for the rest. Every match of the
//! pattern in the message is a match in the copy and the other way round; the copy is ASCII,
//! and the lazy DFA decides it in time linear in its length.
//!
//! It does not apply when the message holds a non-ASCII character that the pattern can match
//! (`(?i)s` matches `ſ`, `\w` every letter), when the pattern also has an ASCII word boundary
//! (which reads a non-ASCII byte as a non-word byte, where the stand-in may be a word byte), or
//! when the pattern's classes leave no ASCII byte to stand in; the budgeted fallback answers
//! then, as before.

use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, Hir, HirKind};

/// Word bytes to stand in for a non-ASCII word character, the rarest in patterns first.
const WORD_BYTES: &[u8] = b"_0123456789QZXJKVWYqzxjkvwyABCDEFGHILMNOPRSTUabcdefghilmnoprstu";
/// Other bytes to stand in for any other non-ASCII character: never `\n` or `\r`, which the
/// multi-line and CRLF modes read as line ends.
const OTHER_BYTES: &[u8] = b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0e\x0f\x10\x11\x12\x13\
\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f~`^|@#$%&;";

/// The stand-ins of one pattern.
#[derive(Debug)]
pub(super) struct StandIns {
    /// The non-ASCII characters the pattern's literals and classes can match, as sorted,
    /// disjoint ranges: a message with one of them is not copied.
    matched: Vec<(char, char)>,
    /// Stands in for a non-ASCII word character.
    word: u8,
    /// Stands in for any other non-ASCII character.
    other: u8,
}

impl StandIns {
    /// The stand-ins for `hir`, when it has some (see the module doc).
    pub(super) fn of(hir: &Hir) -> Option<StandIns> {
        if hir.properties().look_set().contains_word_ascii() {
            return None;
        }
        let mut ascii = [false; 128];
        let mut ranges = Vec::new();
        alphabet(hir, &mut ascii, &mut ranges)?;
        let class = ClassUnicode::new(ranges);
        let matched: Vec<(char, char)> = class
            .ranges()
            .iter()
            .map(|r| (r.start(), r.end()))
            .collect();
        // `.`, `[^a]`, `\W`: every non-ASCII character is matched, none can be stood in for.
        if matched
            .iter()
            .any(|&(start, end)| start <= '\u{80}' && end == char::MAX)
        {
            return None;
        }
        let free = |bytes: &[u8]| bytes.iter().copied().find(|&b| !ascii[usize::from(b)]);
        Some(StandIns {
            matched,
            word: free(WORD_BYTES)?,
            other: free(OTHER_BYTES)?,
        })
    }

    /// `haystack` with each non-ASCII character replaced by its stand-in; `None` when one of
    /// them is a character the pattern can match.
    pub(super) fn copy(&self, haystack: &str) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(haystack.len());
        let mut rest = haystack;
        loop {
            let ascii = rest
                .bytes()
                .position(|b| !b.is_ascii())
                .unwrap_or(rest.len());
            out.extend_from_slice(&rest.as_bytes()[..ascii]);
            rest = &rest[ascii..];
            let Some(c) = rest.chars().next() else {
                return Some(out);
            };
            if self.matches(c) {
                return None;
            }
            let word = regex_syntax::try_is_word_character(c).unwrap_or(false);
            out.push(if word { self.word } else { self.other });
            rest = &rest[c.len_utf8()..];
        }
    }

    /// Whether the pattern can match `c`.
    fn matches(&self, c: char) -> bool {
        let at = self.matched.partition_point(|&(_, end)| end < c);
        self.matched.get(at).is_some_and(|&(start, _)| start <= c)
    }
}

/// Adds what `hir`'s literals and classes can match: ASCII characters to `ascii`, the rest to
/// `ranges`. `None` when a literal or class can match a byte that is not a whole character.
fn alphabet(hir: &Hir, ascii: &mut [bool; 128], ranges: &mut Vec<ClassUnicodeRange>) -> Option<()> {
    let mut add = |start: char, end: char| {
        for c in start..=end.min('\u{7f}') {
            ascii[c as usize] = true;
        }
        if end >= '\u{80}' {
            ranges.push(ClassUnicodeRange::new(start.max('\u{80}'), end));
        }
    };
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => {}
        HirKind::Literal(lit) => {
            for c in std::str::from_utf8(&lit.0).ok()?.chars() {
                add(c, c);
            }
        }
        HirKind::Class(Class::Unicode(class)) => {
            for r in class.ranges() {
                add(r.start(), r.end());
            }
        }
        HirKind::Class(Class::Bytes(class)) => {
            for r in class.ranges() {
                if !r.end().is_ascii() {
                    return None;
                }
                add(char::from(r.start()), char::from(r.end()));
            }
        }
        HirKind::Repetition(rep) => alphabet(&rep.sub, ascii, ranges)?,
        HirKind::Capture(cap) => alphabet(&cap.sub, ascii, ranges)?,
        HirKind::Concat(parts) | HirKind::Alternation(parts) => {
            for part in parts {
                alphabet(part, ascii, ranges)?;
            }
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex_automata::util::syntax;

    fn stand_ins(pattern: &str) -> Option<StandIns> {
        StandIns::of(&syntax::parse(pattern).unwrap())
    }

    #[test]
    fn a_character_the_pattern_cannot_match_is_stood_in_for_by_its_kind() {
        let s = stand_ins(r"\bdisk full\b").unwrap();
        assert_eq!(s.copy("é disk → full").unwrap(), b"_ disk \x00 full");
        assert_eq!(s.copy("plain").unwrap(), b"plain");
        // `(?i)s` matches the long s: a message with one is not copied.
        let folded = stand_ins(r"(?i)\bsev1\b").unwrap();
        assert!(folded.copy("ſev1").is_none());
        assert!(folded.copy("é sev1").is_some());
    }

    #[test]
    fn patterns_without_stand_ins() {
        for p in [r"\b.", r"\b[^a]", r"\b\W", r"(?-u:\b)x\b"] {
            assert!(stand_ins(p).is_none(), "{p}");
        }
        // Every ASCII word byte is in the pattern's classes: no word stand-in is left.
        assert!(stand_ins(r"\b(?-u:\w)+\b").is_none());
    }

    /// The copy decides as the message does, for `regex` itself, on patterns and texts where
    /// a stand-in could change a verdict: word boundaries beside non-ASCII letters, marks and
    /// symbols, folded letters, anchors and line ends.
    #[test]
    fn the_copy_has_the_same_verdict_as_the_message() {
        let patterns = [
            r"\bdisk\b",
            r"\bcaf\b",
            r"(?i)\bsev[12]\b",
            r"\Bisk\b",
            r"\b{start}disk",
            r"disk\b{end}",
            r"\b{start-half}x",
            r"(?m)^disk$",
            r"(?i)\bdrop\s+table\b",
            r"\bé\b",
            r"\b[a-z]+\b\s\b[a-z]+\b",
            r"(?s)\bdisk.*full\b",
            r"x\b",
        ];
        let texts = [
            "disk",
            "édisk",
            "disk→",
            "disk é",
            "café",
            "caf é",
            "cafe\u{301}",
            "ſev1",
            "sev1 ü",
            "üsev1",
            "risk\u{a0}disk",
            "x\u{2028}disk\nfull é",
            "DROP\u{2003}TABLE",
            "drop  table😀",
            "😀x",
            "xé",
            "x.é",
            "a é b",
        ];
        for p in patterns {
            let re = regex::bytes::Regex::new(p).unwrap();
            let Some(s) = stand_ins(p) else {
                continue;
            };
            for t in texts {
                if let Some(copy) = s.copy(t) {
                    assert_eq!(
                        re.is_match(&copy),
                        re.is_match(t.as_bytes()),
                        "{p:?} on {t:?} (copy {copy:?})"
                    );
                }
            }
        }
    }
}
