//! Content regexes as rules use them: Rust `regex` syntax and meaning, searched unanchored
//! over a message's content, and only ever asked whether they match.
//!
//! A rule file may hold 10,000 content regexes, of which a message needs one or two. So a
//! [`ContentRegex`] is parsed and checked when the file loads (every syntax error reported
//! then, as `regex` words it) and its matcher is built the first time it runs, once, shared by
//! every clone. A pattern that could come near the compiled-size limit is built at load
//! instead, so that a file `regex` would refuse is refused at load, never later.
//!
//! The matcher is `regex`'s own meta regex (same parser, same semantics, same size limit)
//! built for `is_match` alone: without capture slots, the full and one-pass DFAs and the
//! literal prefilter that `regex::Regex` builds for every pattern (for `(?i)error code E7` an
//! Aho-Corasick automaton over 128 spellings of its prefix). With those, a file of 10,000
//! regexes took seconds and hundreds of MiB to load. The engine's own literal scan
//! ([`crate::engine::Index`]) already decides which regexes are worth running; the lazy DFA
//! answers for those, and its cache only grows for the regexes that run.
//!
//! # The budget
//!
//! One rule must not hold up every other: the dispatcher evaluates a message against all the
//! rules in turn. The lazy DFA runs in time linear in the message, but a pattern such as
//! `[\s\S]{1,5000}ZZZ` makes it build new states on every byte until it gives up; `regex`
//! then falls back to the PikeVM, whose cost is the NFA's size times the message's length
//! (13-18 s for such a pattern on a 200 kB message). So the lazy DFA here gives up early
//! (after [`GIVE_UP_AFTER_CLEARS`] cache clears at a low rate of bytes per state) and the
//! fallback runs only while NFA states × bytes stays under [`FALLBACK_BUDGET`] (a few hundred
//! milliseconds at most). Above it the search stops: [`ContentRegex::check`] answers
//! [`OverBudget`] and the regex counts it ([`ContentRegex::over_budget`],
//! `switchboard_regex_budget_total` in `/metrics`). What an undecided rule does is the rule's
//! to say, and it fails closed: see [`crate::rules::Rule::check`].
//!
//! The lazy DFA also quits on the first non-ASCII byte of a message when the pattern has a
//! Unicode word boundary (`\b`), which a guard usually has. Before the fallback, the message is
//! then tried once more with its non-ASCII characters stood in for by ASCII bytes, when the
//! pattern allows ([`super::stand_in`]): a long message with a few accented letters, arrows or
//! emoji is decided by the lazy DFA, in time linear in its length.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson::{self, WhichCaptures};
use regex_automata::util::pool::Pool;
use regex_automata::util::syntax;
use regex_automata::{Input, MatchErrorKind, MatchKind, meta};
use regex_syntax::hir::{Class, Hir, HirKind};

use super::stand_in::StandIns;

/// The compiled size limit `regex::Regex` uses by default (10 MiB).
const NFA_SIZE_LIMIT: usize = 10 * (1 << 20);
/// The lazy DFA cache `regex::Regex` allows per regex by default (2 MiB).
const LAZY_DFA_CACHE: usize = 2 * (1 << 20);
/// A pattern whose compiled size may exceed this is built at load, to learn whether it fits
/// [`NFA_SIZE_LIMIT`]; below it, it surely does.
const BUILD_AT_LOAD_ABOVE: usize = NFA_SIZE_LIMIT / 4;
/// The lazy DFA gives up after this many cache clears, when it also builds a state for fewer
/// than [`MIN_BYTES_PER_STATE`] bytes searched: it is thrashing, not searching.
pub const GIVE_UP_AFTER_CLEARS: usize = 3;
/// See [`GIVE_UP_AFTER_CLEARS`].
const MIN_BYTES_PER_STATE: usize = 10;
/// The most NFA states × message bytes the fallback (the PikeVM) may cost one regex on one
/// message. About 5-20 ns each in a release build: well under a second.
pub const FALLBACK_BUDGET: usize = 20_000_000;

/// A search stopped because it would have cost more than the budget (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverBudget;

/// A compiled `contentRegex`.
#[derive(Clone, Debug)]
pub struct ContentRegex {
    source: Arc<str>,
    inner: Arc<Inner>,
}

/// The deepest nesting of groups and repetitions a content regex may have. The regex crate
/// allows 250; every level is a recursion in parsing, literal extraction and compilation, and
/// 200 nested `*` overflowed a 2 MiB thread stack in a debug build (found by the `rules_file`
/// fuzz target). Real patterns nest a handful of levels.
pub const NEST_LIMIT: u32 = 50;

#[derive(Debug)]
struct Inner {
    hir: Hir,
    /// Built on first use; `None` only if building failed, which the load-time bound rules out.
    matcher: OnceLock<Option<Matcher>>,
    /// Searches stopped by the budget.
    over_budget: AtomicU64,
}

type CachePool = Pool<Cache, Box<dyn Fn() -> Cache + Send + Sync>>;

/// The lazy DFA that answers first, and the fallback for when it gives up.
struct Matcher {
    dfa: Arc<DFA>,
    caches: CachePool,
    /// States of the forward NFA: the fallback's cost per byte.
    nfa_states: usize,
    /// `regex`'s meta regex, built the first time the lazy DFA gives up.
    fallback: OnceLock<Option<meta::Regex>>,
    /// For a pattern with a Unicode word boundary: how a message with non-ASCII characters
    /// is made ASCII for the lazy DFA, when it can be.
    stand_ins: Option<StandIns>,
}

impl std::fmt::Debug for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher")
            .field("nfa_states", &self.nfa_states)
            .finish_non_exhaustive()
    }
}

impl ContentRegex {
    /// Parses and checks `source`; the error is the one `regex::Regex::new` gives for it.
    pub fn new(source: &str) -> Result<ContentRegex, regex::Error> {
        let refused = || {
            regex::Regex::new(source)
                .err()
                .unwrap_or_else(|| regex::Error::Syntax(format!("cannot compile `{source}`")))
        };
        let hir = match syntax::parse_with(source, &syntax::Config::new().nest_limit(NEST_LIMIT)) {
            Ok(hir) => hir,
            // Deeper than our limit (the regex crate's own is 250, and its parser recurses too,
            // so it is not asked): say which limit.
            Err(regex_syntax::Error::Parse(e))
                if matches!(e.kind(), regex_syntax::ast::ErrorKind::NestLimitExceeded(_)) =>
            {
                return Err(regex::Error::Syntax(format!(
                    "`{source}` nests groups or repetitions more than {NEST_LIMIT} deep; \
                     switchboard refuses that, because compiling and matching it recurses once \
                     per level"
                )));
            }
            Err(_) => return Err(refused()),
        };
        let matcher = OnceLock::new();
        if size_bound(&hir) > BUILD_AT_LOAD_ABOVE {
            // `regex` decides what it refuses: the meta regex is built with its limits.
            let fallback = build(&hir).map_err(|_| refused())?;
            let built = Matcher::new(&hir, Some(fallback)).map_err(|_| refused())?;
            let _ = matcher.set(Some(built));
        }
        Ok(ContentRegex {
            source: source.into(),
            inner: Arc::new(Inner {
                hir,
                matcher,
                over_budget: AtomicU64::new(0),
            }),
        })
    }

    /// Whether the regex matches anywhere in `haystack`; a search over the budget counts as no
    /// match (and is counted, see [`ContentRegex::over_budget`]). A rule decides through
    /// [`ContentRegex::check`], and fails closed.
    pub fn is_match(&self, haystack: &str) -> bool {
        self.check(haystack).unwrap_or(false)
    }

    /// Whether the regex matches anywhere in `haystack`, or [`OverBudget`] when finding out
    /// would cost more than the budget.
    pub fn check(&self, haystack: &str) -> Result<bool, OverBudget> {
        let Some(matcher) = self
            .inner
            .matcher
            .get_or_init(|| match Matcher::new(&self.inner.hir, None) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::error!(regex = %self.source, cause = %e, "content regex cannot be built; it matches nothing");
                    None
                }
            })
            .as_ref()
        else {
            return Ok(false);
        };
        let answer = matcher.check(&self.inner.hir, haystack);
        if answer.is_err() && self.inner.over_budget.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(
                regex = %self.source,
                bytes = haystack.len(),
                "content regex over its budget, undecided (regex_budget): a confirm or `stop` \
                 rule counts the message as a match and a person decides, an auto or notify rule \
                 does not fire; simplify the pattern (a large counted repetition such as \
                 {{1,5000}} is the usual cause)"
            );
        }
        answer
    }

    /// How many searches the budget stopped since the rules loaded.
    pub fn over_budget(&self) -> u64 {
        self.inner.over_budget.load(Ordering::Relaxed)
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The parsed pattern (for the engine's literal extraction).
    pub fn hir(&self) -> &Hir {
        &self.inner.hir
    }

    /// Whether its matcher has been built (it is on first use).
    pub fn is_built(&self) -> bool {
        self.inner.matcher.get().is_some()
    }
}

impl Matcher {
    fn new(hir: &Hir, fallback: Option<meta::Regex>) -> Result<Matcher, String> {
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .nfa_size_limit(Some(NFA_SIZE_LIMIT))
                    .which_captures(WhichCaptures::None),
            )
            .build_from_hir(hir)
            .map_err(|e| e.to_string())?;
        let nfa_states = nfa.states().len();
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .match_kind(MatchKind::LeftmostFirst)
                    .cache_capacity(LAZY_DFA_CACHE)
                    .skip_cache_capacity_check(true)
                    .minimum_cache_clear_count(Some(GIVE_UP_AFTER_CLEARS))
                    .minimum_bytes_per_state(Some(MIN_BYTES_PER_STATE))
                    .unicode_word_boundary(true),
            )
            .build_from_nfa(nfa)
            .map_err(|e| e.to_string())?;
        let dfa = Arc::new(dfa);
        let for_pool = Arc::clone(&dfa);
        let caches: CachePool = Pool::new(Box::new(move || for_pool.create_cache()));
        let lock = OnceLock::new();
        if let Some(fallback) = fallback {
            let _ = lock.set(Some(fallback));
        }
        let stand_ins = hir
            .properties()
            .look_set()
            .contains_word_unicode()
            .then(|| StandIns::of(hir))
            .flatten();
        Ok(Matcher {
            dfa,
            caches,
            nfa_states,
            fallback: lock,
            stand_ins,
        })
    }

    fn check(&self, hir: &Hir, haystack: &str) -> Result<bool, OverBudget> {
        let quit = match self.search(haystack.as_bytes()) {
            Ok(found) => return Ok(found),
            Err(kind) => matches!(kind, MatchErrorKind::Quit { .. }),
        };
        // Quit on a non-ASCII byte (a Unicode word boundary): the message with stand-ins.
        if quit
            && let Some(copy) = self.stand_ins.as_ref().and_then(|s| s.copy(haystack))
            && let Ok(found) = self.search(&copy)
        {
            return Ok(found);
        }
        // Gave up (thrashing), or no stand-ins: the PikeVM answers, if it can within the
        // budget.
        if self.nfa_states.saturating_mul(haystack.len()) > FALLBACK_BUDGET {
            return Err(OverBudget);
        }
        let fallback = self.fallback.get_or_init(|| build(hir).ok());
        Ok(fallback.as_ref().is_some_and(|re| re.is_match(haystack)))
    }

    /// The lazy DFA's verdict on `haystack`, or why it stopped.
    fn search(&self, haystack: &[u8]) -> Result<bool, MatchErrorKind> {
        let input = Input::new(haystack).earliest(true);
        let mut cache = self.caches.get();
        self.dfa
            .try_search_fwd(&mut cache, &input)
            .map(|found| found.is_some())
            .map_err(|e| e.kind().clone())
    }
}

fn build(hir: &Hir) -> Result<meta::Regex, Box<meta::BuildError>> {
    let config = meta::Config::new()
        .match_kind(MatchKind::LeftmostFirst)
        .utf8_empty(true)
        .nfa_size_limit(Some(NFA_SIZE_LIMIT))
        .hybrid_cache_capacity(LAZY_DFA_CACHE)
        .which_captures(WhichCaptures::None)
        .auto_prefilter(false)
        .dfa(false)
        .onepass(false);
    meta::Builder::new()
        .configure(config)
        .build_from_hir(hir)
        .map_err(Box::new)
}

/// More bytes than the Thompson NFA of `hir` takes, in either direction: 32 bytes for each
/// literal byte, look-around and join, 768 for each range of a Unicode class (measured: about
/// 50 in the reverse NFA of `\w`, at most about 450 for a range across every UTF-8 length),
/// times the copies of a repeated part, plus 2 KiB for the unanchored prefix and the rest
/// (measured: about 800 bytes). The test below holds the bound to real sizes.
fn size_bound(hir: &Hir) -> usize {
    units(hir).saturating_add(64).saturating_mul(32)
}

fn units(hir: &Hir) -> usize {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => 2,
        HirKind::Literal(lit) => lit.0.len(),
        HirKind::Class(Class::Unicode(c)) => c.ranges().len().saturating_mul(24),
        HirKind::Class(Class::Bytes(c)) => c.ranges().len().saturating_mul(2),
        HirKind::Repetition(rep) => {
            let copies = rep.max.unwrap_or(rep.min).max(rep.min) as usize + 1;
            copies.saturating_mul(units(&rep.sub).saturating_add(2))
        }
        HirKind::Capture(cap) => units(&cap.sub).saturating_add(2),
        HirKind::Concat(parts) | HirKind::Alternation(parts) => parts
            .iter()
            .fold(2 * parts.len(), |sum, h| sum.saturating_add(units(h))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Same verdicts as `regex::Regex` on patterns where engines could differ: Unicode case
    /// folding and word boundaries, anchors, empty matches, multi-line flags.
    #[test]
    fn nesting_deeper_than_the_limit_is_refused_with_its_reason() {
        let deep = format!("a{}", "*".repeat(200));
        let err = ContentRegex::new(&deep).unwrap_err().to_string();
        assert!(err.contains("more than 50 deep"), "{err}");
        let groups = format!("{}a{}", "(".repeat(60), ")".repeat(60));
        assert!(ContentRegex::new(&groups).is_err());
        let fine = format!("{}a{}", "(".repeat(20), ")".repeat(20));
        assert!(ContentRegex::new(&fine).is_ok());
    }

    #[test]
    fn agrees_with_regex() {
        let patterns = [
            r"(?i)error code E7\b",
            r"(?i)kelvin",
            r"\bsev[12]\b",
            r"^start",
            r"end$",
            r"(?m)^line$",
            r"x*",
            r"",
            r"\d{3}",
            r"(?i)straße",
            r"é\b",
            r"(?-u:\b)é",
            r"\w{30}",
        ];
        let long = "a".repeat(30);
        let haystacks = [
            "",
            "Error Code e7 here",
            "error code E77",
            "\u{212A}elvin",
            "sev1",
            "xsev1",
            "start end",
            "a\nline\nb",
            "12",
            "1234",
            "STRASSE",
            "strasse",
            "café!",
            "caféx",
            &long,
        ];
        for p in patterns {
            let ours = ContentRegex::new(p).unwrap();
            let theirs = regex::Regex::new(p).unwrap();
            assert_eq!(ours.as_str(), p);
            for h in haystacks {
                assert_eq!(ours.is_match(h), theirs.is_match(h), "{p:?} on {h:?}");
            }
        }
    }

    #[test]
    fn errors_are_regex_errors_and_come_at_load() {
        for p in [
            "(",
            "[z-a]",
            r"\p{Nope}",
            r"\w{1000}{1000}",
            r"(?:\w{200}){200}",
        ] {
            let ours = ContentRegex::new(p).unwrap_err().to_string();
            let theirs = regex::Regex::new(p).unwrap_err().to_string();
            assert_eq!(ours, theirs, "{p:?}");
        }
    }

    #[test]
    fn built_on_first_use_unless_large() {
        let small = ContentRegex::new(r"(?i)error code E7\b").unwrap();
        assert!(!small.is_built());
        let clone = small.clone();
        assert!(clone.is_match("ERROR CODE e7."));
        assert!(small.is_built(), "clones share the matcher");
        let large = ContentRegex::new(r"\w{100}").unwrap();
        assert!(large.is_built(), "checked against the size limit at load");
    }

    /// The bound that lets a pattern wait until first use must be above the real size of
    /// both NFAs the meta regex builds.
    #[test]
    fn size_bound_is_above_the_compiled_size() {
        let patterns = [
            r"(?i)error code E7001\b",
            r"sev[12].*host42\b",
            r"\w+",
            r"(?i)\w{1,20}",
            r"[\p{L}\p{N}]{5}",
            r"(?i)[a-zäöü]{3,}[\u{100}-\u{10FFFF}]",
            r"(?:foo|bar|baz){2,9}",
            r".*",
            r"(?s).{64}",
            r"\bword\b|\Bnot\B",
            r"[^a]",
            r"[\u{80}-\u{10FFFF}]",
            r"[\u{7F}-\u{80}\u{7FF}-\u{800}\u{FFFF}-\u{10000}]",
            r"(?i)[\u{7F}-\u{80}\u{7FF}-\u{800}\u{FFFF}-\u{10000}]{3}",
            r"(?-u)[\x00-\x10A-Z]{2}",
            r"\W",
            r"(?i)\p{Greek}+x",
        ];
        for p in patterns {
            let hir = syntax::parse_with(p, &syntax::Config::new()).unwrap();
            for reverse in [false, true] {
                let nfa = regex_automata::nfa::thompson::NFA::compiler()
                    .configure(
                        regex_automata::nfa::thompson::Config::new()
                            .reverse(reverse)
                            .which_captures(WhichCaptures::None),
                    )
                    .build_from_hir(&hir)
                    .unwrap();
                assert!(
                    nfa.memory_usage() < size_bound(&hir),
                    "{p:?} reverse={reverse}: {} ≥ {}",
                    nfa.memory_usage(),
                    size_bound(&hir)
                );
            }
        }
    }
    #[test]
    fn a_thrashing_pattern_stops_at_its_budget_and_is_counted() {
        let re = ContentRegex::new(r"[\s\S]{1,5000}ZZZ").unwrap();
        let mut message = "a".repeat(200_000);
        message.push_str("ZZZ");
        assert_eq!(re.check(&message), Err(OverBudget));
        assert!(!re.is_match(&message), "over the budget counts as no match");
        assert_eq!(re.over_budget(), 2);
        // The same pattern on a short message is still answered.
        assert_eq!(re.check("abcZZZ"), Ok(true));
        assert_eq!(re.check("abc"), Ok(false));
        assert_eq!(re.over_budget(), 2);
    }

    /// Issue 46.3: a guard with word boundaries over a 260 kB message with one accented
    /// letter went to the PikeVM, over its budget, and counted as not matching. The message
    /// with a stand-in for the letter is decided by the lazy DFA.
    #[test]
    fn a_word_boundary_over_a_long_message_with_one_accent_is_decided() {
        let guard = ContentRegex::new(
            r"(?i)\b(?:rm\s+-rf|drop\s+(?:table|database)|truncate\s+table|chmod\s+-R\s+777)\b",
        )
        .unwrap();
        let mut message = "routine log line, nothing to see\n".repeat(8_000);
        message.push_str("café closed; ");
        assert_eq!(guard.check(&message), Ok(false));
        message.push_str("now DROP TABLE users;");
        assert!(message.len() > 256_000);
        assert_eq!(guard.check(&message), Ok(true));
        let states = guard
            .inner
            .matcher
            .get()
            .unwrap()
            .as_ref()
            .unwrap()
            .nfa_states;
        assert!(
            states * message.len() > FALLBACK_BUDGET,
            "the PikeVM would be over its budget: {states} states"
        );
        assert_eq!(guard.over_budget(), 0);
        // A letter the pattern can match (`(?i)s` matches `ſ`) is not stood in for: the
        // budget decides, and fails closed (see `Rule::check`).
        message.push('ſ');
        assert_eq!(guard.check(&message), Err(OverBudget));
    }

    #[test]
    fn the_fallback_answers_where_the_lazy_dfa_quits() {
        // A Unicode word boundary makes the lazy DFA quit on non-ASCII text.
        let re = ContentRegex::new(r"\bdisk\b").unwrap();
        assert_eq!(re.check("é disk full"), Ok(true));
        assert_eq!(re.check("éedisks"), Ok(false));
        assert_eq!(re.over_budget(), 0);
    }
}
