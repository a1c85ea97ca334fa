//! What the lifecycle records about an exec run: the [`ExecReport`] an `actions.jsonl` record
//! keeps of a finished run, its [`ToolCall`]s, and the [`ExecFailure`] kind of a run that did
//! not succeed.
//!
//! The exec runner (in `delivery`) fills them in; the lifecycle journals them,
//! counts the failures by kind and replays them, so they live here, beside the records that
//! carry them, and the actions do not depend on the delivery that runs the work.

use serde::{Deserialize, Serialize};

/// Why a run did not succeed: the `kind` of a `failed` (or `cancelled`) record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecFailure {
    /// Occurs when the host binary is missing or exits 127.
    AgentNotFound,
    /// Occurs when the host has no credentials (preflight, or the host says so).
    AuthMissing,
    /// Occurs when the run takes longer than `turnTimeout`.
    Timeout,
    /// Occurs when the host prints nothing for `stallTimeout`.
    Stalled,
    /// Occurs when the run is cancelled or the daemon stops while it runs.
    Cancelled,
    /// Occurs on any other failure: a non-zero exit, a crash, an error result.
    Failed,
}

impl ExecFailure {
    /// Every kind, in the order `/metrics` lists them.
    pub const ALL: [ExecFailure; 6] = [
        ExecFailure::AgentNotFound,
        ExecFailure::AuthMissing,
        ExecFailure::Timeout,
        ExecFailure::Stalled,
        ExecFailure::Cancelled,
        ExecFailure::Failed,
    ];

    /// The snake_case name used in records and labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecFailure::AgentNotFound => "agent_not_found",
            ExecFailure::AuthMissing => "auth_missing",
            ExecFailure::Timeout => "timeout",
            ExecFailure::Stalled => "stalled",
            ExecFailure::Cancelled => "cancelled",
            ExecFailure::Failed => "failed",
        }
    }
}

impl std::fmt::Display for ExecFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One tool call a run made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool's name.
    pub name: String,
    /// From start to completion, as switchboard saw the events.
    pub duration_ms: u64,
    /// Whether it succeeded; `false` also when the run ended before it completed.
    pub success: bool,
}

/// What `actions.jsonl` keeps of a finished run (the `exec` field of its last record).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecReport {
    /// `copilot-cli` or `claude-code`.
    pub host: String,
    /// Why it failed or was cancelled; absent on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ExecFailure>,
    /// From spawn to the end.
    pub duration_ms: u64,
    /// The host's exit code, when it exited by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Turns the model took.
    pub turns: u32,
    /// Every tool call, in start order.
    pub tool_calls: Vec<ToolCall>,
    /// Usage as the host reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<serde_json::Value>,
    /// Output lines that were not JSON (or too long): recorded, not fatal.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub malformed_lines: u64,
    /// The final message (cut to 4 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
