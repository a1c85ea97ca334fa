//! The literal scan: every occurrence of every indexed literal in a message's content, found in
//! one pass, and the verdicts that an occurrence alone gives.
//!
//! The automaton is aho-corasick's (ASCII case ignored, standard semantics, so that a state
//! carries every literal ending there): its DFA, one table lookup per byte, while the literals
//! stay small, else its contiguous NFA. The loop that drives it is [`Literals::scan`], not the
//! crate's overlapping iterator: on ~120-byte contents that iterator's bookkeeping around each
//! byte cost more than the lookups themselves (a quarter of a 100-rule dispatch, by `perf`).
//!
//! A regex that is nothing but a literal between assertions (`(?i)error code E7001\b`,
//! `\bOOMKilled\b`, `^deploy failed`) needs no regex run at all: it matches exactly when one
//! occurrence of its literal has the right case and its assertions hold where it starts and
//! ends. [`Exact`] is that shape, and [`Exact::holds`] the check at one occurrence.

use aho_corasick::automaton::Automaton;
use aho_corasick::{Anchored, MatchKind, dfa, nfa::contiguous};
use regex_syntax::hir::{Hir, HirKind, Look};

/// Literal bytes up to which the automaton is a DFA; its table grows with them (one row of
/// byte classes per state). The 10,000-rule catch-all bench has about 120,000 literal bytes,
/// and its whole compiled set, DFA included, added 5–20 MiB of RSS.
const DFA_MAX_LITERAL_BYTES: usize = 200_000;

/// The automaton over the index's literals.
#[derive(Debug)]
pub struct Literals {
    automaton: Kind,
    /// What the scan may skip from the start state without the automaton: see [`Skip`].
    skip: Skip,
}

/// Positions where the scan, in the automaton's unanchored start state, can step over one
/// byte without a table lookup: no literal begins there. Most content bytes are such; the
/// scan skips runs of them in a loop without the lookup's dependency from one byte to the
/// next.
///
/// A byte alone decides too little where a common letter begins a literal (`e` of
/// `error code E7`, `h` of `host12`), and each stop is a mispredicted exit from the loop. So
/// the scan looks at the byte *and the next one*: the pair `(a, b)` can be stepped over when
/// reading `a` from the start state reaches no match and the state after `a b` is the one
/// after `b` alone, which is where resuming at `b` from the start state leads. One bit per
/// pair, 8 KiB.
///
/// When the pairs that cannot be stepped over are few up to ASCII case (`er` and `ho` for
/// `error code E7` and `host12`), [`Stops`] finds them eight positions at a time first.
#[derive(Debug)]
struct Skip {
    /// Per byte: it keeps the start state (the last byte of a haystack has no pair).
    stay: Box<[bool; 256]>,
    /// Bit `a << 8 | b`: the pair `(a, b)` can be stepped over at `a`.
    pairs: Box<[u64; 1024]>,
    /// The pairs that stop the scan, when there are at most [`Stops::MAX`] up to case.
    stops: Option<Stops>,
}

/// The pairs `(a, b)` that cannot be stepped over, ASCII letters folded to lowercase, tested
/// on eight positions at once in a `u64` (no SIMD instructions, so on any target).
///
/// A lane's test: `(x | fold) ^ splat(a)` is zero in the lanes holding `a` (either case when
/// `a` is a letter, `fold` then being `0x20`), and `(v - 0x01…) & !v & 0x80…` has the high bit
/// of every zero lane set. That test can also set a lane above a zero one (a borrow) and the
/// fold lets in both cases of a letter: the lanes it finds are candidates, each then checked
/// against [`Skip::pairs`]; a lane it does not find is never a stop.
#[derive(Debug)]
struct Stops {
    /// Per pair: `a` in every lane, its fold, `b` in every lane, its fold.
    pairs: Vec<[u64; 4]>,
}

impl Stops {
    /// Most pairs worth testing this way: each adds about a dozen operations per eight bytes,
    /// where the pair loop spends about six a byte.
    const MAX: usize = 4;
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;

    /// Adds the pair `(a, b)`, unless its folded form is there already; false when that would
    /// make more than [`Stops::MAX`].
    fn add(&mut self, a: u8, b: u8) -> bool {
        let fold = |b: u8| {
            if b.is_ascii_alphabetic() {
                (b | 0x20, 0x20)
            } else {
                (b, 0)
            }
        };
        let ((a, fa), (b, fb)) = (fold(a), fold(b));
        let lanes = [a, fa, b, fb].map(|v| Stops::ONES * u64::from(v));
        if !self.pairs.contains(&lanes) {
            if self.pairs.len() == Stops::MAX {
                return false;
            }
            self.pairs.push(lanes);
        }
        true
    }

    /// The lanes (high bit of each) where a stop may begin, given the eight bytes at a
    /// position (`x`, little-endian) and the eight after it (`y`).
    #[inline(always)]
    fn candidates(&self, x: u64, y: u64) -> u64 {
        let zero = |v: u64| v.wrapping_sub(Stops::ONES) & !v;
        self.pairs.iter().fold(0, |m, &[a, fa, b, fb]| {
            m | (zero((x | fa) ^ a) & zero((y | fb) ^ b))
        }) & Stops::HIGHS
    }
}

impl Skip {
    fn of<A: Automaton>(aut: &A) -> Option<Skip> {
        let start = aut.start_state(Anchored::No).ok()?;
        let next = |sid, b: usize| aut.next_state(Anchored::No, sid, b as u8);
        let mut stay = Box::new([false; 256]);
        let mut pairs = Box::new([0u64; 1024]);
        // The pairs that cannot be stepped over, gathered on the way while they are few.
        let mut stops = Some(Stops { pairs: Vec::new() });
        for a in 0..256 {
            let after_a = next(start, a);
            stay[a] = after_a == start;
            let quiet = !aut.is_match(after_a);
            for b in 0..256 {
                if stay[a] || (quiet && next(after_a, b) == next(start, b)) {
                    let bit = a << 8 | b;
                    pairs[bit >> 6] |= 1 << (bit & 63);
                } else if stops.as_mut().is_some_and(|s| !s.add(a as u8, b as u8)) {
                    stops = None;
                }
            }
        }
        Some(Skip { stay, pairs, stops })
    }

    /// Whether the pair `(a, b)` can be stepped over at `a`.
    #[inline(always)]
    fn skips(&self, a: u8, b: u8) -> bool {
        let bit = usize::from(a) << 8 | usize::from(b);
        self.pairs[bit >> 6] & (1 << (bit & 63)) != 0
    }

    /// The first position from `i` on where the scan must run the automaton.
    ///
    /// Four positions a step, with one bounds check and one branch for the four when all can
    /// be stepped over, as most are. The scan is about a third of a 100-rule dispatch's
    /// instructions (`benches/engine_count.rs`), most of it this loop; one position a step,
    /// with a check and a branch for each, it cost 5% more instructions per dispatch.
    ///
    /// With [`Stops`], eight positions a step first: a step with no candidate lane, as most
    /// are, costs one branch.
    #[inline(always)]
    fn from(&self, haystack: &[u8], mut i: usize) -> usize {
        if let Some(stops) = &self.stops {
            while let Some(w) = haystack.get(i..i + 9) {
                let word = |at: usize| u64::from_le_bytes(w[at..at + 8].try_into().unwrap());
                let mut lanes = stops.candidates(word(0), word(1));
                while lanes != 0 {
                    let k = lanes.trailing_zeros() as usize / 8;
                    if !self.skips(w[k], w[k + 1]) {
                        return i + k;
                    }
                    lanes &= lanes - 1;
                }
                i += 8;
            }
        }
        while let Some(w) = haystack.get(i..i + 5) {
            let (a, b, c, d) = (
                self.skips(w[0], w[1]),
                self.skips(w[1], w[2]),
                self.skips(w[2], w[3]),
                self.skips(w[3], w[4]),
            );
            if a & b & c & d {
                i += 4;
                continue;
            }
            return i + [a, a & b, a & b & c].iter().take_while(|&&s| s).count();
        }
        while let Some(w) = haystack.get(i..i + 2) {
            if !self.skips(w[0], w[1]) {
                return i;
            }
            i += 1;
        }
        if i < haystack.len() && self.stay[usize::from(haystack[i])] {
            i += 1;
        }
        i
    }
}

#[derive(Debug)]
enum Kind {
    /// One table lookup per byte.
    Dfa(dfa::DFA),
    /// For literal sets too large for a DFA's table.
    Nfa(contiguous::NFA),
}

impl Literals {
    /// The automaton over `patterns` (lowercase; matched with ASCII case ignored), or `None`
    /// if it cannot be built.
    pub fn new(patterns: &[&[u8]]) -> Option<Literals> {
        let bytes: usize = patterns.iter().map(|p| p.len()).sum();
        let dfa = (bytes <= DFA_MAX_LITERAL_BYTES)
            .then(|| {
                dfa::Builder::new()
                    .ascii_case_insensitive(true)
                    .match_kind(MatchKind::Standard)
                    .prefilter(false)
                    .build(patterns)
                    .ok()
            })
            .flatten();
        let automaton = match dfa {
            Some(dfa) => Kind::Dfa(dfa),
            None => Kind::Nfa(
                contiguous::NFA::builder()
                    .ascii_case_insensitive(true)
                    .match_kind(MatchKind::Standard)
                    .prefilter(false)
                    .build(patterns)
                    .ok()?,
            ),
        };
        let skip = match &automaton {
            Kind::Dfa(a) => Skip::of(a)?,
            Kind::Nfa(a) => Skip::of(a)?,
        };
        Some(Literals { automaton, skip })
    }

    /// Calls `found(pattern, end)` for every occurrence of every pattern in `haystack`,
    /// overlapping ones included, in order of their end.
    #[inline]
    pub fn scan(&self, haystack: &[u8], found: impl FnMut(usize, usize)) {
        match &self.automaton {
            Kind::Dfa(a) => run(a, &self.skip, haystack, found),
            Kind::Nfa(a) => run(a, &self.skip, haystack, found),
        }
    }
}

#[inline(always)]
fn run<A: Automaton>(aut: &A, skip: &Skip, haystack: &[u8], mut found: impl FnMut(usize, usize)) {
    let Ok(start) = aut.start_state(Anchored::No) else {
        return;
    };
    let (mut sid, mut i) = (start, 0);
    while i < haystack.len() {
        if sid == start {
            i = skip.from(haystack, i);
            if i == haystack.len() {
                return;
            }
        }
        sid = aut.next_state(Anchored::No, sid, haystack[i]);
        i += 1;
        if aut.is_special(sid) {
            if aut.is_match(sid) {
                for k in 0..aut.match_len(sid) {
                    found(aut.match_pattern(sid, k).as_usize(), i);
                }
            } else if aut.is_dead(sid) {
                return;
            }
        }
    }
}

/// A regex that is one literal between assertions: it matches exactly where its literal
/// occurs with the right case and the assertions hold at the literal's two ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exact {
    /// The literal, ASCII letters lowercased: the pattern the scan looks for.
    lowered: Box<[u8]>,
    /// Per byte of the literal: the byte, and whether it is a lowercase letter that may be in
    /// either case.
    bytes: Box<[(u8, bool)]>,
    /// Assertions at the literal's start.
    before: Box<[Look]>,
    /// Assertions at its end.
    after: Box<[Look]>,
}

impl Exact {
    /// The shape of `hir`, if it is a literal (of at least one byte) between assertions that
    /// [`Exact::holds`] can check.
    pub fn of(hir: &Hir) -> Option<Exact> {
        let parts = match hir.kind() {
            HirKind::Concat(parts) => parts.as_slice(),
            _ => std::slice::from_ref(hir),
        };
        let look = |h: &Hir| match h.kind() {
            HirKind::Look(l) if checkable(*l) => Some(*l),
            _ => None,
        };
        let start = parts.iter().take_while(|h| look(h).is_some()).count();
        let end = parts.len()
            - parts[start..]
                .iter()
                .rev()
                .take_while(|h| look(h).is_some())
                .count();
        let mut bytes = Vec::new();
        for part in &parts[start..end] {
            literal(part, &mut bytes)?;
        }
        if bytes.is_empty() {
            return None;
        }
        Some(Exact {
            lowered: bytes.iter().map(|&(b, _)| b.to_ascii_lowercase()).collect(),
            bytes: bytes.into(),
            before: parts[..start].iter().filter_map(look).collect(),
            after: parts[end..].iter().filter_map(look).collect(),
        })
    }

    /// The literal as the scan looks for it (ASCII letters lowercased).
    pub fn lowered(&self) -> &[u8] {
        &self.lowered
    }

    /// Whether the regex matches at the occurrence of its literal that ends at `end` (as the
    /// scan reports it: found with ASCII case ignored).
    pub fn holds(&self, haystack: &str, end: usize) -> bool {
        let Some(start) = end.checked_sub(self.bytes.len()) else {
            return false;
        };
        let Some(found) = haystack.as_bytes().get(start..end) else {
            return false;
        };
        self.bytes
            .iter()
            .zip(found)
            .all(|(&(want, fold), &got)| want == got || (fold && want == got.to_ascii_lowercase()))
            && self.before.iter().all(|&l| look_holds(l, haystack, start))
            && self.after.iter().all(|&l| look_holds(l, haystack, end))
    }
}

/// Appends the bytes `hir` matches when it matches exactly one string up to ASCII case: a
/// byte as is, or the lowercase letter of a class that is exactly one ASCII letter in both
/// cases (the same reading as [`super::literals`], so the lowered text is the one it extracts).
fn literal(hir: &Hir, out: &mut Vec<(u8, bool)>) -> Option<()> {
    match hir.kind() {
        HirKind::Literal(lit) => out.extend(lit.0.iter().map(|&b| (b, false))),
        HirKind::Class(class) => out.push((super::literals::ascii_case_pair(class)?, true)),
        HirKind::Capture(cap) => literal(&cap.sub, out)?,
        HirKind::Concat(parts) => {
            for part in parts {
                literal(part, out)?;
            }
        }
        _ => return None,
    }
    Some(())
}

/// The assertions [`look_holds`] checks: start and end of text, and every word boundary.
fn checkable(look: Look) -> bool {
    matches!(
        look,
        Look::Start
            | Look::End
            | Look::WordAscii
            | Look::WordAsciiNegate
            | Look::WordUnicode
            | Look::WordUnicodeNegate
            | Look::WordStartAscii
            | Look::WordEndAscii
            | Look::WordStartUnicode
            | Look::WordEndUnicode
            | Look::WordStartHalfAscii
            | Look::WordEndHalfAscii
            | Look::WordStartHalfUnicode
            | Look::WordEndHalfUnicode
    )
}

/// Whether `look` holds at byte `at` of `haystack`, with `regex`'s meaning: `^`/`$` outside
/// multi-line mode, `\b` and its kin over Unicode word characters, or ASCII ones for the
/// `Ascii` forms (bytes outside ASCII are never word bytes there).
fn look_holds(look: Look, haystack: &str, at: usize) -> bool {
    let bytes = haystack.as_bytes();
    let ascii = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
    let unicode = |c: Option<char>| c.is_some_and(regex_syntax::is_word_character);
    let (a_before, a_after) = (
        ascii(at.checked_sub(1).and_then(|i| bytes.get(i))),
        ascii(bytes.get(at)),
    );
    let u = || {
        (
            unicode(haystack.get(..at).and_then(|s| s.chars().next_back())),
            unicode(haystack.get(at..).and_then(|s| s.chars().next())),
        )
    };
    match look {
        Look::Start => at == 0,
        Look::End => at == haystack.len(),
        Look::WordAscii => a_before != a_after,
        Look::WordAsciiNegate => a_before == a_after,
        Look::WordStartAscii => !a_before && a_after,
        Look::WordEndAscii => a_before && !a_after,
        Look::WordStartHalfAscii => !a_before,
        Look::WordEndHalfAscii => !a_after,
        Look::WordUnicode => {
            let (b, a) = u();
            b != a
        }
        Look::WordUnicodeNegate => {
            let (b, a) = u();
            b == a
        }
        Look::WordStartUnicode => {
            let (b, a) = u();
            !b && a
        }
        Look::WordEndUnicode => {
            let (b, a) = u();
            b && !a
        }
        Look::WordStartHalfUnicode => !u().0,
        Look::WordEndHalfUnicode => !u().1,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hir(pattern: &str) -> Hir {
        regex_syntax::parse(pattern).unwrap()
    }

    /// Every occurrence the scan reports, as (pattern, start..end).
    fn occurrences(patterns: &[&str], haystack: &str) -> Vec<(usize, usize, usize)> {
        let pats: Vec<&[u8]> = patterns.iter().map(|p| p.as_bytes()).collect();
        let mut out = Vec::new();
        for lits in [
            Literals::new(&pats).unwrap(),
            {
                let nfa = contiguous::NFA::builder()
                    .ascii_case_insensitive(true)
                    .match_kind(MatchKind::Standard)
                    .build(&pats)
                    .unwrap();
                Literals {
                    skip: Skip::of(&nfa).unwrap(),
                    automaton: Kind::Nfa(nfa),
                }
            },
            {
                // The same DFA scanned by the pair loop alone, without `Stops`.
                let mut lits = Literals::new(&pats).unwrap();
                lits.skip.stops = None;
                lits
            },
        ] {
            let mut got = Vec::new();
            lits.scan(haystack.as_bytes(), |p, end| {
                got.push((p, end - patterns[p].len(), end))
            });
            got.sort();
            if !out.is_empty() {
                assert_eq!(got, out, "the scans differ on {haystack:?}");
            }
            out = got;
        }
        out
    }

    #[test]
    fn scan_reports_every_overlapping_occurrence() {
        // Contained, overlapping and repeated literals, in either case.
        let got = occurrences(&["abcd", "bc", "c", "cd e"], "xABCD e abcd");
        assert_eq!(
            got,
            [
                (0, 1, 5),
                (0, 8, 12),
                (1, 2, 4),
                (1, 9, 11),
                (2, 3, 4),
                (2, 10, 11),
                (3, 3, 7)
            ]
        );
        // Each against a plain search for it, on a longer text.
        let pats = ["error code e7", "error code e75", "host9", "st95", "95 v"];
        let hay = "Error Code E75: ERROR code e7 host95 volume, host9, HOST95 v";
        let got = occurrences(&pats, hay);
        let lower = hay.to_ascii_lowercase();
        let mut want = Vec::new();
        for (p, pat) in pats.iter().enumerate() {
            for (start, _) in lower.match_indices(pat) {
                want.push((p, start, start + pat.len()));
            }
        }
        // `match_indices` skips overlaps of one pattern with itself; none occur here.
        want.sort();
        assert_eq!(got, want);
    }

    /// Pseudo-random numbers below `n` from `seed` (a linear congruential generator: the same
    /// cases on every run).
    fn numbers(mut seed: u64) -> impl FnMut(usize) -> usize {
        move |n| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        }
    }

    #[test]
    fn scan_finds_what_a_plain_search_finds_on_random_literals() {
        // Small alphabets make literals that overlap, contain each other and share pairs, so
        // the pair skip meets every case: one-byte literals, a pair that begins a literal
        // only after another byte, a haystack's last byte.
        let mut next = numbers(7);
        for _ in 0..2000 {
            let alphabet = b"abAB c";
            let word = |len: usize, next: &mut dyn FnMut(usize) -> usize| -> String {
                (0..len)
                    .map(|_| alphabet[next(alphabet.len())] as char)
                    .collect()
            };
            let pats: Vec<String> = (0..1 + next(4))
                .map(|_| {
                    let len = 1 + next(4);
                    word(len, &mut next).to_ascii_lowercase()
                })
                .collect();
            let hay_len = next(40);
            let hay = word(hay_len, &mut next);
            let refs: Vec<&str> = pats.iter().map(String::as_str).collect();
            let got = occurrences(&refs, &hay);
            let lower = hay.to_ascii_lowercase();
            let mut want = Vec::new();
            for (p, pat) in pats.iter().enumerate() {
                for start in 0..lower.len() {
                    if lower[start..].starts_with(pat.as_str()) {
                        want.push((p, start, start + pat.len()));
                    }
                }
            }
            want.sort();
            assert_eq!(got, want, "patterns {pats:?} in {hay:?}");
        }
    }

    #[test]
    fn stops_find_what_the_pair_loop_finds() {
        // Letters in both cases, bytes that fold onto letters (`@` and `` ` `` are `@ | 0x20`
        // apart), a byte above ASCII: every position `from` may start at, on each haystack.
        let mut next = numbers(11);
        let alphabet = b"eEhHor @`\xc3-";
        let mut built = 0;
        for _ in 0..3000 {
            let pats: Vec<Vec<u8>> = (0..1 + next(3))
                .map(|_| {
                    (0..2 + next(4))
                        .map(|_| alphabet[next(alphabet.len())].to_ascii_lowercase())
                        .collect()
                })
                .collect();
            let refs: Vec<&[u8]> = pats.iter().map(Vec::as_slice).collect();
            let Some(with) = Literals::new(&refs) else {
                continue;
            };
            if with.skip.stops.is_none() {
                continue;
            }
            built += 1;
            let mut without = Literals::new(&refs).unwrap();
            without.skip.stops = None;
            let hay: Vec<u8> = (0..next(60))
                .map(|_| alphabet[next(alphabet.len())])
                .collect();
            for i in 0..=hay.len() {
                assert_eq!(
                    with.skip.from(&hay, i),
                    without.skip.from(&hay, i),
                    "patterns {pats:?}, haystack {hay:?}, from {i}"
                );
            }
        }
        assert!(
            built > 500,
            "only {built} literal sets had few enough stops"
        );
    }

    #[test]
    fn exact_shapes() {
        let lowered =
            |p: &str| Exact::of(&hir(p)).map(|e| String::from_utf8(e.lowered.to_vec()).unwrap());
        let table: &[(&str, Option<&str>)] = &[
            (r"(?i)error code E7001\b", Some("error code e7001")),
            (r"\bOOMKilled\b", Some("oomkilled")),
            (r"^deploy failed", Some("deploy failed")),
            (r"disk full$", Some("disk full")),
            (r"(?-u:\b)x1(?-u:\B)", Some("x1")),
            (r"\b{start}abc\b{end}", Some("abc")),
            (r"été", Some("été")),
            // Not a literal between assertions.
            (r"sev[12].*host7\b", None),
            (r"(?i)kernel", None), // `k` is also the Kelvin sign
            (r"(?m)^deploy", None),
            (r"a|b", None),
            (r"\b", None),
            (r"", None),
            (r"ab?", None),
        ];
        for (pattern, want) in table {
            assert_eq!(lowered(pattern).as_deref(), *want, "{pattern:?}");
        }
    }

    /// The verdict from occurrences, for `pattern`, on `haystack`.
    fn exact_verdict(pattern: &str, haystack: &str) -> bool {
        let exact = Exact::of(&hir(pattern)).unwrap();
        let lits = Literals::new(&[exact.lowered()]).unwrap();
        let mut hit = false;
        lits.scan(haystack.as_bytes(), |_, end| {
            hit |= exact.holds(haystack, end)
        });
        hit
    }

    #[test]
    fn exact_verdicts_are_the_regex_crates() {
        let patterns = [
            r"(?i)error code E75\b",
            r"error code E75\b",
            r"\berror\b",
            r"(?i)\bOOM\b",
            r"^ab",
            r"ab$",
            r"^ab$",
            r"(?-u:\b)ab(?-u:\b)",
            r"\Bab\B",
            r"(?-u:\B)ab",
            r"\b{start}ab",
            r"ab\b{end}",
            r"\b{start-half}ab\b{end-half}",
            r"(?-u:\b{start-half})ab(?-u:\b{end-half})",
            r"(?-u:\b{start})ab(?-u:\b{end})",
            r"été",
            r"\bété\b",
            r"(?-u:\b)été",
            r"\b1\.5\b",
        ];
        let haystacks = [
            "",
            "ab",
            "AB",
            "xab",
            "abx",
            "xabx",
            " ab ",
            "_ab_",
            "éab",
            "abé",
            "été",
            "xété",
            "étéx",
            " été ",
            "ab ab",
            "xab ab",
            "Error code E75",
            "error code e75",
            "ERROR CODE E750, error code E75!",
            "error code E750",
            "an error",
            "errors",
            "OOM",
            "oomkill oom",
            "1.5",
            "v1.5",
            "1.55",
            "µab",
            "abµ",
            "ab\nab",
        ];
        for pattern in patterns {
            let re = regex::Regex::new(pattern).unwrap();
            for hay in haystacks {
                assert_eq!(
                    exact_verdict(pattern, hay),
                    re.is_match(hay),
                    "{pattern:?} on {hay:?}"
                );
            }
        }
    }
}
