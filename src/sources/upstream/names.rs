//! Host-facing names of re-exported tools: `<upstream>__<tool>`.
//!
//! Hosts cap a tool's full name at 64 characters including their own prefix: Claude Code
//! shows `mcp__switchboard__<name>` (18 characters), Copilot CLI `switchboard-<name>`. So a
//! re-exported name gets a budget of [`BUDGET`] = 64 − 18 = 46 characters, in
//! `[A-Za-z0-9_-]` (anything else becomes `_`). A longer name is cut and ends in `_` plus 8
//! hex digits of a stable hash of the full original name, so it stays the same across
//! restarts and two long names that share a beginning stay apart. A name taken by an earlier
//! tool after sanitising gets the hash suffix too.

/// The longest re-exported name.
pub const BUDGET: usize = 46;
/// `_` + 8 hex digits.
const SUFFIX: usize = 9;

/// The exported name of `tool` of `upstream`; `taken` says whether a name is already used.
pub fn export(upstream: &str, tool: &str, taken: impl Fn(&str) -> bool) -> String {
    let full = format!("{upstream}__{}", sanitise(tool));
    if full.len() <= BUDGET && !taken(&full) {
        return full;
    }
    let hash = fnv1a(format!("{upstream}__{tool}").as_bytes());
    let keep = full.len().min(BUDGET - SUFFIX);
    format!("{}_{hash:08x}", &full[..keep])
}

/// `[A-Za-z0-9_-]` only; every other character becomes `_`.
pub fn sanitise(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// 32-bit FNV-1a: small, stable across versions and platforms.
fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_prefixed_and_sanitised() {
        assert_eq!(
            export("teams", "send_message", |_| false),
            "teams__send_message"
        );
        assert_eq!(export("ci", "jobs.list/v2", |_| false), "ci__jobs_list_v2");
        assert_eq!(
            export("everything", "toggle-simulated-logging", |_| false),
            "everything__toggle-simulated-logging"
        );
    }

    #[test]
    fn long_names_are_cut_with_a_stable_hash_and_fit_the_budget() {
        let long = "get_the_full_conversation_history_of_a_chat_thread_with_replies";
        let a = export("teams", long, |_| false);
        assert_eq!(a.len(), BUDGET, "{a}");
        assert!(
            a.starts_with("teams__get_the_full_conversation_hist"),
            "{a}"
        );
        assert_eq!(a, export("teams", long, |_| false), "stable");
        let b = export("teams", &format!("{long}_2"), |_| false);
        assert_ne!(a, b, "names sharing a beginning stay apart");
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        );
        // With a host prefix such as Claude Code's, the whole name fits 64 characters.
        assert!(format!("mcp__switchboard__{a}").len() <= 64);
    }

    #[test]
    fn a_collision_after_sanitising_gets_a_hash() {
        let first = export("ci", "a.b", |_| false);
        let second = export("ci", "a/b", |n| n == first);
        assert_eq!(first, "ci__a_b");
        assert!(
            second.starts_with("ci__a_b_") && second.len() == "ci__a_b".len() + SUFFIX,
            "{second}"
        );
    }
}
