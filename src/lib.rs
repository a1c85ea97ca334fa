//! switchboard: a rules-driven trigger engine around channel messages, and an MCP server.
//!
//! ```text
//!  sources                 inbox                  engine                   delivery
//!  HTTP webhooks ─┐                                                     ┌─ wait_for_inbound_message
//!  upstream MCP  ─┼─► NewMessage ─► ring + journal ─► rules → Action ───┼─ notifications/claude/channel
//!  switchboard send┘     (seq)        (durable)        (pure, clocked)  ├─ notifications/message, resource
//!                                                          │            └─ `switchboard watch`
//!                                                   actions journal
//! ```
//!
//! # Layout
//!
//! - [`message`]: `Message` (the journal record) and `NewMessage` (what sources produce).
//! - [`config`]: the home directory (paths, lock) and `switchboard.json`.
//! - [`sources`]: HTTP ingest (generic, Alertmanager, GitHub) and upstream MCP servers.
//! - [`inbox`]: ring + group-commit journal, consumer cursors and `state.json`.
//! - [`rules`]: `triggers.json` parsed, validated, compiled.
//! - [`engine`]: pure evaluation of a message against the rules at a given time.
//! - [`actions`]: actions and their lifecycle (queues, claims, sessions, `actions.jsonl`).
//! - [`delivery`]: the MCP server (tools, long-poll wait, push) over stdio and HTTP.
//! - [`auth`]: the bearer token and `Origin` checks of HTTP ingest and `/mcp`.
//! - [`app`]: the running whole, shared by every front end; the dispatcher.
//! - [`backend`]: the one interface front ends call: local (the daemon) or remote (a front end).
//! - [`watch`]: reloads `triggers.json` when it is saved.
//! - [`control`]: the control socket between the CLI and the running server.
//! - [`daemon`]: the daemon (one per home, the only writer): wiring, start, log, shutdown.
//! - [`frontend`]: `serve`, an MCP front end on stdio attached to the daemon.
//! - [`listener`]: HTTP connections: the cap, header/body/idle timeouts.
//! - [`cli`]: the command line.
//! - [`fuzzing`]: the entry points of the `fuzz/` targets, and the corpus replay test.

pub mod actions;
pub mod app;
pub mod auth;
pub mod backend;
pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod delivery;
pub mod duration;
pub mod engine;
pub mod frontend;
pub mod fuzzing;
pub mod home;
pub mod inbox;
pub mod listener;
pub mod message;
pub mod metrics;
pub mod rules;
pub mod sources;
pub mod watch;

/// The JSON type of `v` with its article (`a string`, `an object`, `null`), for error messages.
pub(crate) fn json_kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
