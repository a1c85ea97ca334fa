//! Who answered a confirm: the path a person's (or an agent's) answer came by.
//!
//! Every answer is recorded with its [`Via`] in `actions.jsonl` and shown in `watch` and
//! `pending`; a confirm rule's `approveVia` lists the paths allowed to answer it, so that a
//! team can say "the agent itself cannot approve" (`["cli", "web", "elicitation"]`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The path an answer came by.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// `switchboard confirm ID yes|no` at a terminal.
    Cli,
    /// The agent's `channel_confirm` tool.
    Tool,
    /// The approval page (`/ui`).
    Web,
    /// An MCP elicitation form the host put to its user.
    Elicitation,
    /// Claude Code's permission relay.
    Relay,
    /// The Approve / Deny buttons of the Slack source's approval message.
    Slack,
}

impl Via {
    /// Every path, in the order the documentation lists them.
    pub const ALL: [Via; 6] = [
        Via::Cli,
        Via::Tool,
        Via::Web,
        Via::Elicitation,
        Via::Relay,
        Via::Slack,
    ];

    /// The lowercase name used in files and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Cli => "cli",
            Via::Tool => "tool",
            Via::Web => "web",
            Via::Elicitation => "elicitation",
            Via::Relay => "relay",
            Via::Slack => "slack",
        }
    }

    /// The path named `name` (exactly, lowercase).
    pub fn parse(name: &str) -> Option<Via> {
        Via::ALL.into_iter().find(|v| v.as_str() == name)
    }
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `approveVia` as a list people read: `cli, web`.
pub fn list(vias: &[Via]) -> String {
    vias.iter()
        .map(|v| v.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_json_and_parse() {
        for v in Via::ALL {
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(json, format!("\"{}\"", v.as_str()));
            assert_eq!(serde_json::from_str::<Via>(&json).unwrap(), v);
            assert_eq!(Via::parse(v.as_str()), Some(v));
        }
        assert_eq!(Via::parse("Web"), None);
        assert_eq!(Via::parse("browser"), None);
    }
}
