//! `confirm`: `channel_confirm` and `switchboard confirm ID yes|no` — a person's answer.
//!
//! Yes returns the approved item: claimed by the answering session when it names one (the
//! tool runs it now), else queued as approved work for the next session (the CLI, the page,
//! a form). The answer is on disk before the reply, with the path it came by (`via`). Unknown,
//! expired or already-answered ids, and a path the rule's `approveVia` does not list, are
//! refusals that say which ([`crate::control::RefusalCode`]). An answer the actions journal
//! cannot take is refused as `not_recorded`: nothing changed, the confirm stays pending.
//!
//! Every way of answering says yes or no with one [`Decision`]: the terminal's and the tool's
//! `yes`/`no`, the approval page's and the elicitation form's `approve`/`deny`.

use chrono::Utc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::actions::{ActionId, By, Item, Via};
use crate::control::{ApiError, Ctx, Op};

/// Answers a confirm.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Confirm {
    /// The action id.
    pub id: ActionId,
    /// Yes or no.
    pub decision: Decision,
    /// Who answers: the terminal's user, the page link, the MCP session, the Slack user.
    pub by: By,
    /// The session that gets the approved work as its claim; none = queued for any session.
    #[serde(default)]
    pub claim_for: Option<u64>,
    /// The path the answer came by. Absent (a front end older than the field): `tool` when
    /// it claims for a session, else `cli`.
    #[serde(default)]
    pub via: Option<Via>,
}

impl Op for Confirm {
    /// The approved item; `None` when denied.
    type Reply = Option<Item>;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Option<Item>, ApiError> {
        let claim_for = match self.claim_for {
            Some(handle) => Some(cx.session(handle)?),
            None => None,
        };
        let via = self.via.unwrap_or(if claim_for.is_some() {
            Via::Tool
        } else {
            Via::Cli
        });
        // The answer is on disk before the reply, or refused.
        cx.lifecycle()
            .confirm(self.id, self.decision.is_yes(), &self.by, via, claim_for, Utc::now())
            .await
            .map_err(ApiError::from)
    }
}

/// A person's answer to a confirm request, whichever way it came: `yes`/`no` at the terminal
/// (`switchboard confirm ID yes|no`) and in the agent's `channel_confirm`, `approve`/`deny` on
/// the approval page and in an elicitation form. Each path reads its words into this, and
/// only this travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Approve: the prompt runs, with only its tools.
    #[serde(alias = "approve")]
    Yes,
    /// Deny: nothing runs.
    #[serde(alias = "deny")]
    No,
}

impl Decision {
    /// Both answers, yes first.
    pub const ALL: [Decision; 2] = [Decision::Yes, Decision::No];

    /// Whether it approves.
    pub fn is_yes(self) -> bool {
        self == Decision::Yes
    }

    /// The terminal's and the tool's word: `yes` or `no`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Yes => "yes",
            Decision::No => "no",
        }
    }

    /// The page's and the form's word: `approve` or `deny`.
    pub fn verb(self) -> &'static str {
        match self {
            Decision::Yes => "approve",
            Decision::No => "deny",
        }
    }

    /// The answer `word` says, in either vocabulary (exactly, lowercase).
    pub fn parse(word: &str) -> Option<Decision> {
        Decision::ALL
            .into_iter()
            .find(|d| d.as_str() == word || d.verb() == word)
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Decision;

    #[test]
    fn every_vocabulary_reads_into_one_decision() {
        for d in Decision::ALL {
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{}\"", d.as_str()));
            for word in [d.as_str(), d.verb()] {
                assert_eq!(Decision::parse(word), Some(d));
                let read: Decision = serde_json::from_value(serde_json::json!(word)).unwrap();
                assert_eq!(read, d);
            }
        }
        assert_eq!(Decision::parse("Yes"), None);
        assert_eq!(Decision::parse("maybe"), None);
        assert!(serde_json::from_str::<Decision>("\"true\"").is_err());
    }
}
