//! Necessary literals of a content regex: sets of strings such that every match of the regex
//! contains one string of the set (ASCII case ignored).
//!
//! The index puts one such set per rule into a single Aho-Corasick automaton, so that a
//! message's content is scanned once for every rule, and a rule's own regex runs only when one
//! of its literals occurs. A set is only ever a necessary condition, never a verdict: a literal
//! in the content makes the rule a candidate, the regex decides. So the extraction only has to
//! be sound (no match of the regex without one of the literals), and it is deliberately plain:
//!
//! - a run of literal characters in a concatenation is one literal; under `(?i)` a character
//!   class that is exactly an ASCII letter in both cases (`[Ee]`) continues the run, any other
//!   class ends it (`(?i)s` is `[Ssſ]`, which no ASCII-folding literal covers);
//! - a concatenation needs what any one of its parts needs, so each part (and each run) is a
//!   choice; an alternation needs one of what its branches need; a repetition needs what its
//!   body needs when it repeats at least once; an empty match, a look-around or an optional
//!   part needs nothing, and neither does anything containing one in every choice.
//!
//! regex-syntax's own `hir::literal::Extractor` gives prefix and suffix sets, which for a
//! case-insensitive pattern are the case variants of a short prefix (`(?i)error code E7001`
//! becomes 128 spellings of `error c`, the same for every rule of that shape); an inner literal
//! compared without ASCII case is what tells 2,000 such rules apart.

use regex_syntax::hir::{Class, Hir, HirKind};

/// Most strings kept in one set; an alternation of more needs nothing as far as we know.
const MAX_ALTERNATIVES: usize = 16;

/// A set of literals, one of which every match contains; ASCII letters lowercased.
pub type Need = Vec<Vec<u8>>;

/// Every choice of necessary literal set for the parsed pattern `hir`, best first by length:
/// each is enough on its own, so the caller may pick the one shared with the fewest other
/// rules. Empty when the pattern needs no literal (it can match without one).
pub fn choices(hir: &Hir) -> Vec<Need> {
    let mut out = match hir.kind() {
        HirKind::Concat(parts) => concat_choices(parts),
        _ => need(hir).into_iter().collect(),
    };
    out.retain(|n| !n.is_empty() && n.iter().all(|l| !l.is_empty()));
    out.sort_by_key(|n| std::cmp::Reverse(quality(n)));
    out
}

/// How selective a set is: its shortest literal, then fewer alternatives.
pub fn quality(need: &Need) -> (usize, std::cmp::Reverse<usize>) {
    let shortest = need.iter().map(Vec::len).min().unwrap_or(0);
    (shortest, std::cmp::Reverse(need.len()))
}

/// The best single set for `hir`, or `None` when it can match without any literal.
fn need(hir: &Hir) -> Option<Need> {
    if let Some(lit) = piece(hir) {
        return (!lit.is_empty()).then(|| vec![lit]);
    }
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) | HirKind::Class(_) | HirKind::Literal(_) => None,
        HirKind::Repetition(rep) if rep.min >= 1 => need(&rep.sub),
        HirKind::Repetition(_) => None,
        HirKind::Capture(cap) => need(&cap.sub),
        HirKind::Alternation(branches) => {
            let mut all: Need = Vec::new();
            for branch in branches {
                for lit in need(branch)? {
                    if !all.contains(&lit) {
                        all.push(lit);
                    }
                }
                if all.len() > MAX_ALTERNATIVES {
                    return None;
                }
            }
            Some(all)
        }
        HirKind::Concat(parts) => concat_choices(parts).into_iter().max_by_key(quality),
    }
}

/// Each run of literal characters, and each other part's own set, of a concatenation.
fn concat_choices(parts: &[Hir]) -> Vec<Need> {
    let mut out = Vec::new();
    let mut run: Vec<u8> = Vec::new();
    for part in parts {
        if let Some(lit) = piece(part) {
            run.extend_from_slice(&lit);
            continue;
        }
        if !run.is_empty() {
            out.push(vec![std::mem::take(&mut run)]);
        }
        if let Some(n) = need(part) {
            out.push(n);
        }
    }
    if !run.is_empty() {
        out.push(vec![run]);
    }
    out
}

/// The text `hir` matches when it matches exactly one string up to ASCII case, lowercased.
fn piece(hir: &Hir) -> Option<Vec<u8>> {
    match hir.kind() {
        HirKind::Literal(lit) => Some(lit.0.to_ascii_lowercase()),
        HirKind::Class(class) => ascii_case_pair(class).map(|b| vec![b]),
        HirKind::Capture(cap) => piece(&cap.sub),
        HirKind::Concat(parts) => {
            let mut all = Vec::new();
            for part in parts {
                all.extend(piece(part)?);
            }
            Some(all)
        }
        _ => None,
    }
}

/// `b'e'` for a class that is exactly `[Ee]`, in Unicode or byte form.
pub(super) fn ascii_case_pair(class: &Class) -> Option<u8> {
    let chars: Vec<u32> = match class {
        Class::Unicode(c) => {
            let r = c.ranges();
            if r.len() != 2 || r.iter().any(|r| r.start() != r.end()) {
                return None;
            }
            r.iter().map(|r| r.start() as u32).collect()
        }
        Class::Bytes(c) => {
            let r = c.ranges();
            if r.len() != 2 || r.iter().any(|r| r.start() != r.end()) {
                return None;
            }
            r.iter().map(|r| u32::from(r.start())).collect()
        }
    };
    let (a, b) = (u8::try_from(chars[0]).ok()?, u8::try_from(chars[1]).ok()?);
    (a.is_ascii_alphabetic() && a != b && a.eq_ignore_ascii_case(&b))
        .then(|| a.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choices(pattern: &str) -> Vec<Need> {
        regex_syntax::parse(pattern).map_or(Vec::new(), |hir| super::choices(&hir))
    }

    fn best(pattern: &str) -> Option<Vec<String>> {
        choices(pattern).into_iter().next().map(|n| {
            n.into_iter()
                .map(|l| String::from_utf8(l).unwrap())
                .collect()
        })
    }

    #[test]
    fn extraction_table() {
        // (pattern, best set of necessary literals)
        let table: &[(&str, Option<&[&str]>)] = &[
            (r"(?i)error code E7001\b", Some(&["error code e7001"])),
            (r"sev[12].*host42\b", Some(&["host42"])),
            (r"Disk", Some(&["disk"])),
            (r"(?i)\bsev[12]\b", Some(&["ev"])),
            (r"(?i)kernel panic", Some(&["ernel panic"])),
            (r"(foo|barbaz)x", Some(&["foo", "barbaz"])),
            (r"(foo|barbaz)qux", Some(&["qux"])),
            (r"(?:foo|bar)+x", Some(&["foo", "bar"])),
            (r"x(?:foo|)y", Some(&["x"])),
            (r"a*", None),
            (r"", None),
            (r"\d+", None),
            (r"(?i)été", Some(&["t"])),
            (r"été", Some(&["été"])),
            (r"timeout|", None),
            (r"(?:timeout)?", None),
            (r"x{3}", Some(&["x"])),
            (r"(?i)(?:up|down)stream", Some(&["tream"])),
            (r"(?:up|down)stream", Some(&["stream"])),
            (r"[", None),
        ];
        for (pattern, want) in table {
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(best(pattern), want, "{pattern:?}");
        }
    }

    #[test]
    fn every_choice_is_necessary() {
        // Each choice of a concatenation is on its own enough.
        let got = choices(r"\[FIRING\].*host12 on disk");
        let lits: Vec<_> = got
            .iter()
            .map(|n| String::from_utf8(n[0].clone()).unwrap())
            .collect();
        assert_eq!(lits, ["host12 on disk", "[firing]"]);
        // Under `(?i)`, `s` and `k` also match non-ASCII letters, so they end a run.
        let got = choices(r"(?i)\[firing\].*host12 on disk");
        let lits: Vec<_> = got
            .iter()
            .map(|n| String::from_utf8(n[0].clone()).unwrap())
            .collect();
        assert_eq!(lits, ["t12 on di", "[firing]", "ho"]);
    }
}
