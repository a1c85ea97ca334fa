//! Name patterns for `channel` and `server`: any, a literal, a subtree, or a glob.
//!
//! The semantics are chatcli's: empty or `*` matches anything; a literal (no glob
//! metacharacter) is an exact, case-sensitive match; a trailing `/*` matches the prefix itself
//! and everything below it at any depth (`alerts/*` matches `alerts`, `alerts/x`, `alerts/x/y`,
//! not `alertsx`). Any other glob is a globset glob in which `*` and `?` stay inside one
//! `/`-separated segment and `**` crosses segments.
//!
//! The engine's index reads the variant: literals and subtrees are looked up in hash maps,
//! only real globs go through a `GlobSet`.

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

/// A compiled `channel` or `server` pattern.
#[derive(Clone, Debug)]
pub enum NamePattern {
    /// Empty or `*`: everything.
    Any,
    /// A literal: exactly this name.
    Exact(String),
    /// `prefix/*` with a literal prefix: the prefix and everything below it.
    Subtree(String),
    /// A glob (or two, for `glob/*`); matches when any matches.
    Glob {
        /// The globs, for building the engine's shared `GlobSet`.
        globs: Vec<Glob>,
        /// The same globs compiled on their own.
        set: GlobSet,
    },
}

const META: &[char] = &['*', '?', '[', ']', '{', '}', '\\'];

impl NamePattern {
    /// Compiles `pattern`; the error is globset's reason, ready to follow a colon.
    pub fn parse(pattern: &str) -> Result<NamePattern, String> {
        let p = pattern.trim();
        if p.is_empty() || p == "*" || p == "**" {
            return Ok(NamePattern::Any);
        }
        if !p.contains(META) {
            return Ok(NamePattern::Exact(p.to_string()));
        }
        let mut sources = Vec::new();
        if let Some(prefix) = p.strip_suffix("/*") {
            if prefix.is_empty() {
                return Ok(NamePattern::Any);
            }
            if !prefix.contains(META) {
                return Ok(NamePattern::Subtree(prefix.to_string()));
            }
            sources.push(prefix.to_string());
            sources.push(format!("{prefix}/**"));
        } else {
            sources.push(p.to_string());
        }
        let mut globs = Vec::new();
        let mut builder = GlobSetBuilder::new();
        for source in sources {
            let glob = compile_glob(&source)?;
            builder.add(glob.clone());
            globs.push(glob);
        }
        let set = builder.build().map_err(|e| e.kind().to_string())?;
        Ok(NamePattern::Glob { globs, set })
    }

    /// Whether `name` matches.
    pub fn is_match(&self, name: &str) -> bool {
        match self {
            NamePattern::Any => true,
            NamePattern::Exact(s) => name == s,
            NamePattern::Subtree(prefix) => in_subtree(name, prefix),
            NamePattern::Glob { set, .. } => set.is_match(name),
        }
    }
}

/// `name` is `prefix` or below it.
pub fn in_subtree(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// One glob with switchboard's options: `*` stays inside a segment, case-sensitive.
pub fn compile_glob(source: &str) -> Result<Glob, String> {
    GlobBuilder::new(source)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| e.kind().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_table() {
        // (pattern, name, matches)
        let table: &[(&str, &str, bool)] = &[
            ("", "anything/at/all", true),
            ("*", "alerts/critical", true),
            ("alerts/critical", "alerts/critical", true),
            ("alerts/critical", "alerts/Critical", false),
            ("alerts/critical", "alerts/critical/x", false),
            ("alerts/*", "alerts", true),
            ("alerts/*", "alerts/x", true),
            ("alerts/*", "alerts/x/y", true),
            ("alerts/*", "alertsx", false),
            ("alerts/*", "alertsx/y", false),
            ("alerts/*", "ci/alerts", false),
            ("*/main", "ci/main", true),
            ("*/main", "ci/x/main", false),
            ("**/main", "ci/x/main", true),
            ("ci/{main,release}", "ci/release", true),
            ("ci/{main,release}", "ci/dev", false),
            ("teams/dm-?", "teams/dm-1", true),
            ("teams/*/x/*", "teams/a/x", true),
            ("teams/*/x/*", "teams/a/x/b/c", true),
            ("teams/*/x/*", "teams/a/y/b", false),
            ("prom*", "prometheus", true),
            ("prom*", "Prometheus", false),
        ];
        for (pattern, name, want) in table {
            let p = NamePattern::parse(pattern).unwrap();
            assert_eq!(p.is_match(name), *want, "{pattern:?} vs {name:?}");
        }
    }

    #[test]
    fn variants() {
        assert!(matches!(
            NamePattern::parse("a/b").unwrap(),
            NamePattern::Exact(_)
        ));
        assert!(
            matches!(NamePattern::parse("a/b/*").unwrap(), NamePattern::Subtree(p) if p == "a/b")
        );
        assert!(matches!(
            NamePattern::parse("a/*/b").unwrap(),
            NamePattern::Glob { .. }
        ));
        assert!(
            NamePattern::parse("ci/{main")
                .unwrap_err()
                .contains("unclosed")
        );
    }
}
