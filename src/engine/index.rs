//! The rule index: which rules can match a message, without trying every rule.
//!
//! Each enabled rule is found one of three ways:
//! - **by content**: a rule whose content regex has necessary literals ([`super::literals`])
//!   is listed under them in one Aho-Corasick automaton (ASCII case ignored), so one scan of
//!   the content finds every such rule whose literal occurs, however many rules there are;
//! - **by metadata**: a rule with a matcher that holds for a few known values only
//!   (`labels.team="db"`, `labels.severity=~"critical|page"`) is listed under its key and each
//!   value, found with one hash lookup per indexed key that the message carries;
//! - **by channel**: every other rule is listed under its literal channel (one hash lookup), its
//!   subtree prefix (one lookup per ancestor of the message's channel), in one shared
//!   `GlobSet`, or among the catch-alls.
//!
//! A rule whose every literal is shared by many rules (`timeout`, `[FIRING]`) and whose
//! channel is not a catch-all is found by channel instead: its literal would make it a
//! candidate on most messages, its channel on few. The same holds for a matcher value shared
//! by many rules (`labels.severity="critical"`). Between a literal and a matcher value, the one
//! shared by fewer rules wins; a literal channel or subtree that few rules share wins over a
//! matcher, since it finds its rules without reading the message's metadata (two allocations
//! of its own: on a cycle of messages that is cold, reading them is cache misses, by
//! `benches/engine_count.rs` most of what metadata adds to a dispatch).
//!
//! A candidate is then confirmed on what did not find it: server, channel (when found by
//! content or metadata), its matchers (each key read once per message; a matcher of a few
//! strings decided from one table of every rule's strings, not from the matcher) and its own
//! regex. A regex that is only its literal between assertions
//! ([`Exact`]) never runs: the scan decides it where the literal occurs. Rules that share a
//! regex share its verdict, so each distinct regex runs at most once per message; when many
//! candidates have regexes without literals, one `RegexSet` pass answers for all of them.
//! Candidates come out in file order, so evaluation order is the order of the file, and the
//! list ends at the first matching rule with `stop`.

use std::collections::HashMap;

use globset::{GlobSet, GlobSetBuilder};
use regex::RegexSet;

use super::literals;
use super::scan::{Exact, Literals};
use crate::message::Message;
use crate::message::metadata::same_bytes;
use crate::rules::{NamePattern, RuleSet};

/// A literal shorter than this is in too many messages to be worth scanning for.
const MIN_LITERAL: usize = 3;
/// A rule whose best literal is shared by more rules than this, and which has a channel, is
/// found by its channel.
const SHARED_LITERAL: usize = 8;
/// Above this many candidates whose regexes have no literal, one `RegexSet` pass beats
/// trying each regex.
const REGEX_SET_THRESHOLD: usize = 3;
/// Most regexes put into that set: a set's lazy DFA grows with its patterns, and past a few
/// hundred it costs more memory and build time than the regexes run one by one.
const REGEX_SET_MAX: usize = 256;

/// Most distinct metadata keys (over every rule's matchers) that a message has looked up once
/// each: a matcher reads its key's value from the message's resolved keys, not from its
/// metadata map. A rule set with more keys than this has each matcher read the map itself.
const MAX_KEYS: usize = 32;

/// The bit of [`Index::subtree_lens`] for a prefix of `len` bytes.
fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
}

/// A metadata key's values → the rules found by each.
type ByValue = foldhash::HashMap<Box<str>, Vec<u32>>;

/// How a candidate is confirmed.
#[derive(Clone, Copy, Debug, Default)]
struct Check {
    /// Found by content: the channel pattern is still to be checked.
    channel: bool,
    /// Its regex, as an index into [`Index::regexes`].
    regex: Option<u32>,
    /// Where its matchers' key slots start in [`Index::matcher_keys`].
    keys_at: u32,
}

/// How the index decides one matcher.
#[derive(Clone, Copy, Debug)]
enum Test {
    /// Holds when the value is one of `strings[from..to]` (`=`, `=~` of a few strings), or,
    /// without `when_in`, when it is none of them (`!=`, `!~`).
    OneOf { from: u32, to: u32, when_in: bool },
    /// A regex: the matcher runs it.
    Regex,
}

/// A message's metadata values by key slot ([`Index::keys`]), each looked up the first time a
/// matcher or the metadata index asks for it; a missing key reads as the empty string. The
/// table (half a KiB) is cleared only for a message that asks: rule sets without matchers
/// never do.
struct Resolved<'m> {
    values: Option<[Option<&'m str>; MAX_KEYS]>,
}

impl<'m> Resolved<'m> {
    fn new() -> Resolved<'m> {
        Resolved { values: None }
    }

    fn get(&mut self, slot: usize, key: &str, msg: &'m Message) -> &'m str {
        self.values.get_or_insert([None; MAX_KEYS])[slot]
            .get_or_insert_with(|| msg.metadata.value(key))
    }
}

/// An index over the enabled rules of one rule set.
#[derive(Debug, Default)]
pub struct Index {
    exact: foldhash::HashMap<Box<str>, Vec<u32>>,
    subtree: foldhash::HashMap<Box<str>, Vec<u32>>,
    /// Bit `n` set: some subtree prefix is `n` bytes long (bit 63: 63 or more), so the
    /// ancestors of other lengths are not looked up.
    subtree_lens: u64,
    globs: GlobSet,
    glob_owner: Vec<u32>,
    any: Vec<u32>,
    /// Metadata key → value → the rules found by it.
    meta: Vec<(Box<str>, ByValue)>,
    /// The distinct keys of every enabled rule's matchers, when there are at most
    /// [`MAX_KEYS`]; empty otherwise (each matcher reads the metadata map itself).
    keys: Vec<Box<str>>,
    /// Per rule, from its [`Check::keys_at`]: the slot in `keys` of each of its matchers.
    matcher_keys: Vec<u8>,
    /// Beside `matcher_keys`: how each matcher is decided.
    matcher_tests: Vec<Test>,
    /// The strings of every [`Test::OneOf`], as ranges of `strings_text`: the matchers of
    /// every rule in two tables that stay in cache, where each matcher's own strings are an
    /// allocation apiece, cold in a large rule set.
    strings: Vec<(u32, u32)>,
    strings_text: String,
    /// Per entry of `meta`: its key's slot in `keys`.
    meta_slot: Vec<u8>,
    /// The necessary literals of the rules found by content.
    literals: Option<Literals>,
    /// Literal (pattern id) → what its occurrence tells.
    listed: Vec<Listed>,
    /// Per rule (by position in the file): how to confirm it.
    checks: Vec<Check>,
    /// Distinct content regexes (by source), each as the first rule that has it.
    regexes: Vec<u32>,
    /// Regexes without literals of rules found by channel, in one set.
    regex_set: Option<RegexSet>,
    /// Regex → its slot in `regex_set`.
    set_slot: Vec<Option<u32>>,
    /// Slot in `regex_set` → regex.
    set_regex: Vec<u32>,
}

/// What one literal of the scan stands for.
#[derive(Debug, Default)]
struct Listed {
    /// The rules listed under it: candidates once it occurs.
    rules: Vec<u32>,
    /// Regexes that are this literal between assertions, decided by its occurrences alone.
    exact: Vec<(u32, Exact)>,
}

/// Per-message working memory, kept between messages so that evaluating allocates nothing.
#[derive(Debug, Default)]
pub struct Scratch {
    cand: Vec<u32>,
    globs: Vec<usize>,
    /// Bumped for every message; a slot below stamped with it is this message's.
    generation: u32,
    regex_stamp: Vec<u32>,
    regex_hit: Vec<Hit>,
    literal_stamp: Vec<u32>,
}

/// A regex's verdict on this message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Hit {
    #[default]
    No,
    Yes,
    /// Not decided within its budget.
    Undecided,
}

impl From<bool> for Hit {
    fn from(matched: bool) -> Hit {
        if matched { Hit::Yes } else { Hit::No }
    }
}

/// Set on a rule of [`Index::matches`] whose content regex was not decided within its budget.
pub const UNDECIDED: u32 = 1 << 31;

impl Scratch {
    fn begin(&mut self, index: &Index) {
        let (regexes, lits) = (index.regexes.len(), index.listed.len());
        if self.regex_stamp.len() != regexes || self.literal_stamp.len() != lits {
            *self = Scratch::default();
            self.regex_stamp = vec![0; regexes];
            self.regex_hit = vec![Hit::No; regexes];
            self.literal_stamp = vec![0; lits];
        }
        if self.generation == u32::MAX {
            self.regex_stamp.fill(0);
            self.literal_stamp.fill(0);
            self.generation = 0;
        }
        self.generation += 1;
        self.cand.clear();
    }
}

/// What is known of the enabled rules before any is listed: each rule's choices of necessary
/// literals and of matcher values, and how many rules share each literal, each (key, value)
/// and each literal channel or subtree.
struct Plan<'r> {
    /// Per rule: the choices of necessary literals of its regex (long enough to scan for).
    choices: &'r [Vec<literals::Need>],
    /// Literal → how many choices of enabled rules hold it.
    shared: HashMap<&'r [u8], usize>,
    /// Per rule: its matchers that stand for a few values, as (key, values).
    meta_choices: Vec<Vec<(&'r str, Vec<String>)>>,
    /// (key, value) → how many rules have a matcher standing for it.
    meta_shared: HashMap<(&'r str, String), usize>,
    /// Rules per literal channel and per subtree: a channel few rules share finds its rules
    /// without reading the message's metadata.
    channel_shared: HashMap<&'r str, usize>,
}

/// How an enabled rule is found.
enum FoundBy<'p> {
    /// By a matcher's values: listed under its key and each value.
    Meta(&'p str, &'p [String]),
    /// By content: listed under each literal of one choice.
    Content(&'p literals::Need),
    /// By channel: literal, subtree, glob or catch-all.
    Channel,
}

impl<'r> Plan<'r> {
    /// Counts what the enabled rules of `all` share, given each rule's choices of literals.
    fn new(all: &'r [crate::rules::Rule], choices: &'r [Vec<literals::Need>]) -> Plan<'r> {
        let mut plan = Plan {
            choices,
            shared: HashMap::new(),
            meta_choices: vec![Vec::new(); all.len()],
            meta_shared: HashMap::new(),
            channel_shared: HashMap::new(),
        };
        for need in choices.iter().flatten() {
            for lit in need {
                *plan.shared.entry(lit.as_slice()).or_default() += 1;
            }
        }
        for (i, rule) in all.iter().enumerate() {
            if !rule.enabled {
                continue;
            }
            if let NamePattern::Exact(c) | NamePattern::Subtree(c) = &rule.channel {
                *plan.channel_shared.entry(c.as_str()).or_default() += 1;
            }
            for m in &rule.matchers {
                if let Some(values) = m.values() {
                    for v in &values {
                        *plan.meta_shared.entry((m.key(), v.clone())).or_default() += 1;
                    }
                    plan.meta_choices[i].push((m.key(), values));
                }
            }
        }
        plan
    }

    /// How many rules share the most shared literal of `need`.
    fn sharing(&self, need: &literals::Need) -> Option<usize> {
        need.iter().map(|l| self.shared[l.as_slice()]).max()
    }

    /// How many rules share the most shared value of a matcher choice.
    fn meta_sharing(&self, (key, values): &(&'r str, Vec<String>)) -> usize {
        values
            .iter()
            .map(|v| self.meta_shared[&(*key, v.clone())])
            .max()
            .unwrap_or(usize::MAX)
    }

    /// How rule `i` is found: by the choice (a literal or a matcher value) shared by the
    /// fewest rules, unless that is shared by so many that its channel finds it among fewer.
    fn found_by(&self, i: usize, rule: &crate::rules::Rule) -> FoundBy<'_> {
        let best = self.choices[i]
            .iter()
            .min_by_key(|n| (self.sharing(n), std::cmp::Reverse(literals::quality(n))));
        let by_content = best.filter(|n| {
            matches!(rule.channel, NamePattern::Any) || self.sharing(n) <= Some(SHARED_LITERAL)
        });
        // A matcher finds the rule only where its channel would not find it among few:
        // reading a message's metadata costs more than a hash lookup of its channel.
        let selective_channel = match &rule.channel {
            NamePattern::Exact(c) | NamePattern::Subtree(c) => {
                self.channel_shared[c.as_str()] <= SHARED_LITERAL
            }
            _ => false,
        };
        let by_meta = self.meta_choices[i]
            .iter()
            .filter(|_| !selective_channel)
            .min_by_key(|c| self.meta_sharing(c))
            .filter(|c| {
                let shared = self.meta_sharing(c);
                (matches!(rule.channel, NamePattern::Any) || shared <= SHARED_LITERAL)
                    && by_content
                        .and_then(|n| self.sharing(n))
                        .is_none_or(|content| shared < content)
            });
        match (by_meta, by_content) {
            (Some((key, values)), _) => FoundBy::Meta(key, values),
            (None, Some(need)) => FoundBy::Content(need),
            (None, None) => FoundBy::Channel,
        }
    }
}

/// The literals of the scan as they are gathered: each distinct literal once, in the order
/// first listed (its pattern id).
#[derive(Default)]
struct Scan<'p> {
    pattern_of: HashMap<&'p [u8], usize>,
    patterns: Vec<&'p [u8]>,
}

impl Index {
    /// Indexes the enabled rules of `rules`.
    pub fn new(rules: &RuleSet) -> Index {
        let all = rules.rules();
        let mut ix = Index {
            checks: vec![Check::default(); all.len()],
            ..Index::default()
        };
        let (choices, mut exact_of_regex) = ix.distinct_regexes(all);
        let plan = Plan::new(all, &choices);
        let mut scan = Scan::default();
        let mut globs = GlobSetBuilder::new();
        ix.set_slot = vec![None; ix.regexes.len()];
        for (i, rule) in all.iter().enumerate() {
            if !rule.enabled {
                continue;
            }
            match plan.found_by(i, rule) {
                FoundBy::Meta(key, values) => ix.list_by_meta(i, rule, key, values),
                FoundBy::Content(need) => {
                    ix.list_by_content(i, rule, need, &mut exact_of_regex, &mut scan)
                }
                FoundBy::Channel => ix.list_by_channel(i, rule, &mut globs),
            }
        }
        ix.build_globs(globs);
        ix.build_regex_set(all);
        ix.resolve_keys(rules);
        ix.build_scan(scan);
        ix
    }

    /// Gives each distinct content regex of the enabled rules an id (in [`Index::regexes`],
    /// and each rule's [`Check::regex`]); returns each rule's choices of necessary literals and
    /// each regex's [`Exact`] form.
    fn distinct_regexes(
        &mut self,
        all: &[crate::rules::Rule],
    ) -> (Vec<Vec<literals::Need>>, Vec<Option<Exact>>) {
        let mut regex_of: HashMap<&str, u32> = HashMap::new();
        let mut choices: Vec<Vec<literals::Need>> = vec![Vec::new(); all.len()];
        let mut choices_of_regex: Vec<Vec<literals::Need>> = Vec::new();
        let mut exact_of_regex: Vec<Option<Exact>> = Vec::new();
        for (i, rule) in all.iter().enumerate() {
            let Some(re) = rule.content_regex.as_ref().filter(|_| rule.enabled) else {
                continue;
            };
            let id = *regex_of.entry(re.as_str()).or_insert_with(|| {
                self.regexes.push(i as u32);
                choices_of_regex.push(
                    literals::choices(re.hir())
                        .into_iter()
                        .filter(|n| literals::quality(n).0 >= MIN_LITERAL)
                        .collect(),
                );
                exact_of_regex.push(Exact::of(re.hir()));
                (self.regexes.len() - 1) as u32
            });
            self.checks[i].regex = Some(id);
            choices[i] = choices_of_regex[id as usize].clone();
        }
        (choices, exact_of_regex)
    }

    /// Lists rule `i` under metadata `key` and each of its `values`. Its regex is still to be
    /// run when it has one (not in the regex set: a rule found by metadata is a candidate on
    /// few messages).
    fn list_by_meta(&mut self, i: usize, rule: &crate::rules::Rule, key: &str, values: &[String]) {
        self.checks[i].channel = !matches!(rule.channel, NamePattern::Any);
        let slot = match self.meta.iter().position(|(k, _)| &**k == key) {
            Some(slot) => slot,
            None => {
                self.meta.push((key.into(), Default::default()));
                self.meta.len() - 1
            }
        };
        for v in values {
            self.meta[slot]
                .1
                .entry(v.as_str().into())
                .or_default()
                .push(i as u32);
        }
    }

    /// Lists rule `i` under each literal of `need`, each added to `scan` once.
    fn list_by_content<'p>(
        &mut self,
        i: usize,
        rule: &crate::rules::Rule,
        need: &'p literals::Need,
        exact_of_regex: &mut [Option<Exact>],
        scan: &mut Scan<'p>,
    ) {
        self.checks[i].channel = !matches!(rule.channel, NamePattern::Any);
        for lit in need {
            let p = *scan.pattern_of.entry(lit.as_slice()).or_insert_with(|| {
                scan.patterns.push(lit.as_slice());
                self.listed.push(Listed::default());
                scan.patterns.len() - 1
            });
            let listed = &mut self.listed[p];
            listed.rules.push(i as u32);
            // A regex that is only this literal is decided where it occurs (once per
            // regex: rules with the same regex share it).
            if let Some(id) = self.checks[i].regex
                && let Some(exact) =
                    exact_of_regex[id as usize].take_if(|e| e.lowered() == lit.as_slice())
            {
                listed.exact.push((id, exact));
            }
        }
    }

    /// Lists rule `i` under its channel, and its regex (if any) in the regex set while there
    /// is room.
    fn list_by_channel(&mut self, i: usize, rule: &crate::rules::Rule, globs: &mut GlobSetBuilder) {
        let i32 = i as u32;
        match &rule.channel {
            NamePattern::Any => self.any.push(i32),
            NamePattern::Exact(c) => self.exact.entry(c.as_str().into()).or_default().push(i32),
            NamePattern::Subtree(p) => {
                self.subtree_lens |= length_bit(p.len());
                self.subtree.entry(p.as_str().into()).or_default().push(i32)
            }
            NamePattern::Glob { globs: gs, .. } => {
                for g in gs {
                    globs.add(g.clone());
                    self.glob_owner.push(i32);
                }
            }
        }
        if let Some(id) = self.checks[i].regex
            && self.set_slot[id as usize].is_none()
            && self.set_regex.len() < REGEX_SET_MAX
        {
            self.set_slot[id as usize] = Some(self.set_regex.len() as u32);
            self.set_regex.push(id);
        }
    }

    /// Builds the glob set. Each glob compiled on its own when the rules did, so the set
    /// builds; should it not, the globs' rules become catch-alls confirmed by their own
    /// pattern.
    fn build_globs(&mut self, globs: GlobSetBuilder) {
        match globs.build() {
            Ok(set) if set.len() == self.glob_owner.len() => self.globs = set,
            _ => {
                for &i in &self.glob_owner {
                    self.checks[i as usize].channel = true;
                    self.any.push(i);
                }
                self.any.sort_unstable();
                self.any.dedup();
                self.glob_owner.clear();
            }
        }
    }

    /// Builds the regex set when enough regexes are in it; else each runs on its own.
    fn build_regex_set(&mut self, all: &[crate::rules::Rule]) {
        if self.set_regex.len() > REGEX_SET_THRESHOLD {
            let sources = self.set_regex.iter().map(|&id| {
                all[self.regexes[id as usize] as usize]
                    .content_regex
                    .as_ref()
                    .map_or("", |re| re.as_str())
            });
            self.regex_set = RegexSet::new(sources).ok();
        }
        if self.regex_set.is_none() {
            self.set_slot.fill(None);
            self.set_regex.clear();
        }
    }

    /// Builds the automaton of the scan over the literals gathered.
    fn build_scan(&mut self, scan: Scan<'_>) {
        if scan.patterns.is_empty() {
            return;
        }
        self.literals = Literals::new(&scan.patterns);
        if self.literals.is_none() {
            // Unreachable in practice (the automaton has no size limit set); if it ever
            // fails, the rules it would have found are tried on every message instead.
            for listed in std::mem::take(&mut self.listed) {
                self.any.extend(listed.rules);
            }
            self.any.sort_unstable();
            self.any.dedup();
        }
    }

    /// Gives each distinct matcher key a slot, each rule's matchers and each metadata index
    /// key theirs; none when there are more than [`MAX_KEYS`] keys.
    fn resolve_keys(&mut self, rules: &RuleSet) {
        let mut slot_of: HashMap<&str, u8> = HashMap::new();
        let mut keys = Vec::new();
        for rule in rules.rules().iter().filter(|r| r.enabled) {
            for m in &rule.matchers {
                slot_of.entry(m.key()).or_insert_with(|| {
                    keys.push(m.key());
                    (keys.len() - 1).min(u8::MAX as usize) as u8
                });
            }
        }
        if keys.is_empty() || keys.len() > MAX_KEYS {
            return;
        }
        self.keys = keys.iter().map(|&k| k.into()).collect();
        for (i, rule) in rules.rules().iter().enumerate() {
            if !rule.enabled || rule.matchers.is_empty() {
                continue;
            }
            self.checks[i].keys_at = self.matcher_keys.len() as u32;
            for m in &rule.matchers {
                self.matcher_keys.push(slot_of[m.key()]);
                let test = match m.decided_by() {
                    Some((among, when_in)) => {
                        let from = self.strings.len() as u32;
                        for text in among {
                            let start = self.strings_text.len() as u32;
                            self.strings_text.push_str(text);
                            self.strings.push((start, self.strings_text.len() as u32));
                        }
                        let to = self.strings.len() as u32;
                        Test::OneOf { from, to, when_in }
                    }
                    None => Test::Regex,
                };
                self.matcher_tests.push(test);
            }
        }
        // Every indexed key is some matcher's key.
        self.meta_slot = self.meta.iter().map(|(k, _)| slot_of[&**k]).collect();
    }

    /// Whether every matcher of rule `i` holds, reading the values resolved for the message.
    fn matchers_hold<'m>(
        &self,
        rule: &crate::rules::Rule,
        i: usize,
        msg: &'m Message,
        resolved: &mut Resolved<'m>,
    ) -> bool {
        if rule.matchers.is_empty() {
            return true;
        }
        if self.keys.is_empty() {
            return rule.matchers_hold(msg);
        }
        let at = self.checks[i].keys_at as usize;
        // The key is read from `keys` and the strings from `strings`, which every rule shares
        // (in cache), not from the matcher's own copies (cold lines in a large rule set); only
        // a regex reads the matcher.
        (0..rule.matchers.len()).all(|n| {
            let slot = self.matcher_keys[at + n] as usize;
            let value = resolved.get(slot, &self.keys[slot], msg);
            match self.matcher_tests[at + n] {
                Test::OneOf { from, to, when_in } => {
                    let text = self.strings_text.as_bytes();
                    let among =
                        self.strings[from as usize..to as usize]
                            .iter()
                            .any(|&(start, end)| {
                                same_bytes(&text[start as usize..end as usize], value.as_bytes())
                            });
                    among == when_in
                }
                Test::Regex => rule.matchers[n].holds(value),
            }
        })
    }

    /// The enabled rules that match `msg`, in file order, up to and including the first that
    /// has `stop`, appended to `out`. A rule whose content regex was not decided within its
    /// budget is listed with [`UNDECIDED`] set, and ends the list when it has `stop` (it fails
    /// closed, see [`crate::rules::Rule::fails_closed`]).
    pub fn matches(
        &self,
        rules: &RuleSet,
        msg: &Message,
        scratch: &mut Scratch,
        out: &mut Vec<u32>,
    ) {
        scratch.begin(self);
        let generation = scratch.generation;
        let cand = &mut scratch.cand;
        let ch = msg.channel.as_str();
        cand.extend_from_slice(&self.any);
        if let Some(v) = self.exact.get(ch) {
            cand.extend_from_slice(v);
        }
        if self.subtree_lens != 0 {
            let ancestors = ch.bytes().enumerate().filter(|&(_, b)| b == b'/');
            for end in ancestors.map(|(i, _)| i).chain([ch.len()]) {
                if self.subtree_lens & length_bit(end) != 0
                    && let Some(v) = self.subtree.get(&ch[..end])
                {
                    cand.extend_from_slice(v);
                }
            }
        }
        if !self.glob_owner.is_empty() {
            self.globs.matches_into(ch, &mut scratch.globs);
            cand.extend(scratch.globs.iter().map(|&g| self.glob_owner[g]));
        }
        let mut resolved = Resolved::new();
        for (slot, (key, values)) in self.meta.iter().enumerate() {
            let value = match self.meta_slot.get(slot) {
                Some(&k) => resolved.get(k as usize, key, msg),
                None => msg.metadata.value(key),
            };
            if let Some(rules) = values.get(value) {
                cand.extend_from_slice(rules);
            }
        }
        if let Some(literals) = &self.literals {
            let content = msg.content.as_str();
            let (literal_stamp, regex_stamp, regex_hit) = (
                &mut scratch.literal_stamp,
                &mut scratch.regex_stamp,
                &mut scratch.regex_hit,
            );
            literals.scan(content.as_bytes(), |p, end| {
                let listed = &self.listed[p];
                if literal_stamp[p] != generation {
                    literal_stamp[p] = generation;
                    cand.extend_from_slice(&listed.rules);
                }
                for (id, exact) in &listed.exact {
                    let id = *id as usize;
                    if regex_stamp[id] != generation {
                        regex_stamp[id] = generation;
                        regex_hit[id] = Hit::No;
                    }
                    if regex_hit[id] == Hit::No && exact.holds(content, end) {
                        regex_hit[id] = Hit::Yes;
                    }
                }
            });
        }
        cand.sort_unstable();
        cand.dedup();

        let all = rules.rules();
        if let Some(set) = &self.regex_set {
            let unfiltered = cand
                .iter()
                .filter_map(|&i| self.checks[i as usize].regex)
                .filter(|&id| self.set_slot[id as usize].is_some())
                .count();
            if unfiltered > REGEX_SET_THRESHOLD {
                let hits = set.matches(&msg.content);
                for (slot, &id) in self.set_regex.iter().enumerate() {
                    scratch.regex_stamp[id as usize] = generation;
                    scratch.regex_hit[id as usize] = hits.matched(slot).into();
                }
            }
        }
        for &i in cand.iter() {
            let (rule, check) = (&all[i as usize], self.checks[i as usize]);
            if !rule.server.is_match(&msg.server)
                || (check.channel && !rule.channel.is_match(ch))
                || !self.matchers_hold(rule, i as usize, msg, &mut resolved)
            {
                continue;
            }
            if let Some(id) = check.regex {
                let seen = (
                    &mut scratch.regex_stamp[..],
                    &mut scratch.regex_hit[..],
                    generation,
                );
                match self.regex_hit(all, id as usize, msg, seen) {
                    Hit::Yes => {}
                    Hit::No => continue,
                    Hit::Undecided => {
                        // A `stop` rule fails closed: it ends the list.
                        out.push(i | UNDECIDED);
                        if rule.stop {
                            break;
                        }
                        continue;
                    }
                }
            }
            out.push(i);
            if rule.stop {
                break;
            }
        }
    }

    /// Whether content regex `id` matches `msg`, decided once per message (`stamp` says
    /// whether the scan of the literals or the regex set decided it already, in `hit`):
    /// [`Hit::Undecided`] when its budget ran out.
    #[inline]
    fn regex_hit(
        &self,
        all: &[crate::rules::Rule],
        id: usize,
        msg: &Message,
        (stamp, hit, generation): (&mut [u32], &mut [Hit], u32),
    ) -> Hit {
        if stamp[id] != generation {
            stamp[id] = generation;
            hit[id] = match all[self.regexes[id] as usize]
                .content_regex
                .as_ref()
                .map(|re| re.check(&msg.content))
            {
                Some(Ok(matched)) => matched.into(),
                Some(Err(_)) => Hit::Undecided,
                None => Hit::No,
            };
        }
        hit[id]
    }
}
