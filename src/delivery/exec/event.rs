//! The normalised events of a headless run and the report of its outcome.
//!
//! Each host prints its own newline-delimited JSON (Copilot CLI's `session.*` / `assistant.*` /
//! `tool.*` events, Claude Code's `system` / `assistant` / `user` / `result` messages); its
//! normaliser ([`super::copilot`], [`super::claude`]) turns every line into zero or more
//! [`ExecEvent`]s, so the runner, the journal and `watch` see one vocabulary. What
//! `actions.jsonl` keeps of a finished run ([`ExecReport`], [`ExecFailure`], [`ToolCall`]) is
//! the lifecycle's, in [`crate::actions::exec`]; it is re-exported here for the runner.

use serde::{Deserialize, Serialize};

pub use crate::actions::exec::{ExecFailure, ExecReport, ToolCall};

/// One thing a headless host reported, in host-neutral terms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ExecEvent {
    /// The model started a turn.
    TurnStart,
    /// The model finished a turn.
    TurnEnd,
    /// The host started a tool call.
    ToolStart {
        /// The host's id of the call, to pair it with its completion.
        id: String,
        /// The tool's name as the host knows it.
        name: String,
    },
    /// A tool call ended.
    ToolComplete {
        /// The id given at the start.
        id: String,
        /// The tool's name, when the host repeats it.
        name: Option<String>,
        /// Whether the host says the call succeeded.
        success: bool,
    },
    /// A whole assistant message.
    Message {
        /// Its text.
        text: String,
    },
    /// The host reported an error (the run may still go on, unless `auth`).
    Error {
        /// What it said.
        text: String,
        /// The model provider refused the credentials: retrying cannot help, so the run is
        /// stopped at once as `auth_missing`.
        auth: bool,
    },
    /// The host's final word on the run.
    Result {
        /// Whether the host itself reports an error.
        is_error: bool,
        /// The exit code the host reports, when it reports one.
        exit_code: Option<i32>,
        /// Token and time usage, as the host gives it.
        usage: Option<serde_json::Value>,
        /// The final text, or the error text.
        text: Option<String>,
    },
}

/// Cuts `text` to at most `max` bytes on a character boundary.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
