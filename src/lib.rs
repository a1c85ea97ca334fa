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

/// Logs to stderr (stdout is the MCP channel in stdio mode), or to `log_file` (rotated by
/// size) for a daemon started in the background. `RUST_LOG` sets the level.
pub fn init_tracing(log_file: Option<&std::path::Path>) {
    // rmcp logs every request it handles at INFO (the whole `initialize` params among them):
    // into a host's MCP log that is noise, so it speaks at WARN unless RUST_LOG says more.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    if let Some(path) = log_file {
        match daemon::log::Rotating::open(path) {
            Ok(file) => {
                let _ = builder.with_writer(std::sync::Mutex::new(file)).try_init();
                return;
            }
            Err(e) => eprintln!("error: cannot open the log file {}: {e}", path.display()),
        }
    }
    let _ = builder.with_writer(std::io::stderr).try_init();
}

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
