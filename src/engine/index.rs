//! The rule index: which rules can match a message, without trying every rule.
//!
//! Channel patterns are sorted into literal channels (hash lookup), subtrees (one lookup per
//! ancestor of the message's channel), real globs (one shared `GlobSet`) and catch-alls.
//! Content regexes are compiled once more into a `RegexSet`; when several candidates have a
//! regex, one pass of the set answers all of them. Candidates come out in file order, so
//! evaluation order is the order of the file.

use std::collections::HashMap;

use globset::{GlobSet, GlobSetBuilder};
use regex::RegexSet;

use crate::message::Message;
use crate::rules::{NamePattern, RuleSet};

/// Above this many candidates with a regex, one `RegexSet` pass beats trying each regex.
const REGEX_SET_THRESHOLD: usize = 3;

/// An index over the enabled rules of one rule set.
#[derive(Debug, Default)]
pub struct Index {
    exact: HashMap<String, Vec<usize>>,
    subtree: HashMap<String, Vec<usize>>,
    globs: GlobSet,
    glob_owner: Vec<usize>,
    any: Vec<usize>,
    regex_set: Option<RegexSet>,
    /// Rule index → its pattern's slot in `regex_set`.
    regex_slot: Vec<Option<usize>>,
}

impl Index {
    /// Indexes the enabled rules of `rules`.
    pub fn new(rules: &RuleSet) -> Index {
        let mut ix = Index {
            regex_slot: vec![None; rules.len()],
            ..Index::default()
        };
        let mut globs = GlobSetBuilder::new();
        let mut sources = Vec::new();
        for (i, rule) in rules.rules().iter().enumerate() {
            if !rule.enabled {
                continue;
            }
            match &rule.channel {
                NamePattern::Any => ix.any.push(i),
                NamePattern::Exact(c) => ix.exact.entry(c.clone()).or_default().push(i),
                NamePattern::Subtree(p) => ix.subtree.entry(p.clone()).or_default().push(i),
                NamePattern::Glob { globs: gs, .. } => {
                    for g in gs {
                        globs.add(g.clone());
                        ix.glob_owner.push(i);
                    }
                }
            }
            if let Some(re) = &rule.content_regex {
                ix.regex_slot[i] = Some(sources.len());
                sources.push(re.as_str().to_string());
            }
        }
        // Each glob compiled on its own, so the set builds; fall back to nothing only if not.
        ix.globs = globs.build().unwrap_or_else(|_| GlobSet::empty());
        if ix.glob_owner.len() != ix.globs.len() {
            ix.glob_owner.clear();
        }
        ix.regex_set = RegexSet::new(&sources).ok().filter(|s| s.len() > 1);
        ix
    }

    /// The enabled rules that match `msg`, in file order, appended to `out`.
    pub fn matches(&self, rules: &RuleSet, msg: &Message, out: &mut Vec<usize>) {
        let mut cand: Vec<usize> = Vec::with_capacity(16);
        cand.extend_from_slice(&self.any);
        if let Some(v) = self.exact.get(msg.channel.as_str()) {
            cand.extend_from_slice(v);
        }
        if !self.subtree.is_empty() {
            let ch = msg.channel.as_str();
            for (i, _) in ch.match_indices('/') {
                if let Some(v) = self.subtree.get(&ch[..i]) {
                    cand.extend_from_slice(v);
                }
            }
            if let Some(v) = self.subtree.get(ch) {
                cand.extend_from_slice(v);
            }
        }
        if !self.glob_owner.is_empty() {
            let mut hits = Vec::new();
            self.globs.matches_into(msg.channel.as_str(), &mut hits);
            cand.extend(hits.into_iter().map(|g| self.glob_owner[g]));
        }
        cand.sort_unstable();
        cand.dedup();

        let all = rules.rules();
        cand.retain(|&i| all[i].server.is_match(&msg.server));
        let with_regex = cand
            .iter()
            .filter(|&&i| self.regex_slot[i].is_some())
            .count();
        let set_hits = match &self.regex_set {
            Some(set) if with_regex > REGEX_SET_THRESHOLD => Some(set.matches(&msg.content)),
            _ => None,
        };
        for i in cand {
            let ok = match (self.regex_slot[i], &set_hits) {
                (None, _) => true,
                (Some(slot), Some(hits)) => hits.matched(slot),
                (Some(_), None) => all[i]
                    .content_regex
                    .as_ref()
                    .is_some_and(|re| re.is_match(&msg.content)),
            };
            if ok {
                out.push(i);
            }
        }
    }
}
