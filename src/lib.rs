//! switchboard: a rules-driven trigger engine around channel messages, and an MCP server.
//!
//! # The path of a message
//!
//! ```text
//!  sources                  inbox                   engine                   delivery
//!  HTTP webhooks ─┐                                                      ┌─ wait_for_inbound_message
//!  upstream MCP  ─┼─► NewMessage ─► ring + Log ───► rules → decisions ─►  ├─ notifications/claude/channel
//!  switchboard send┘     (seq)      (journal)      (pure, clocked)   │    ├─ notifications/message
//!                                                                    ▼    └─ `switchboard watch`, exec
//!                                                          actions: lifecycle + journal
//! ```
//!
//! A webhook `POST /v1/alertmanager` is read by [`sources::http`], turned into one
//! [`message::NewMessage`] per alert by [`sources::alertmanager`], and handed to the
//! `append` operation ([`control::ops`]), which has the [`app::Core`] append it: each message
//! gets its seq in the [`inbox`] (ring in memory, durable in the [`inbox::Log`], the journal)
//! and is counted by source, and ingest answers `202` once the message is durable. The dispatcher then runs the [`engine`] over it
//! with the live [`rules`] and the time; each decision becomes an action in the [`actions`]
//! lifecycle (a nudge, a confirm request, or work), recorded in its own journal. A session
//! blocked in `wait_for_inbound_message` ([`delivery::mcp`]) is woken through the `wait`
//! operation, takes the item (claimed exactly once) and settles it once its client had it.
//!
//! # Floors
//!
//! Each module imports only modules on its own floor or below; nothing imports upward and
//! there is no import circle. From the ground up:
//!
//! 1. Ground: [`message`], [`home`], [`duration`], [`listener`], [`auth`].
//! 2. Stores: [`inbox`] (every message, numbered and kept) and [`actions`] (the action
//!    lifecycle and its journal). They never import config, the core or anything above.
//! 3. [`rules`] (`triggers.json` parsed, checked, compiled), then [`engine`] (pure: message +
//!    rules + now → decisions).
//! 4. The core: [`metrics`] and [`app`], the running switchboard behind the operations: the
//!    components it runs, and what only it does (engine, live rules, dispatcher, appends).
//! 5. [`control`]: the operations, one file each, each applied to the components it uses,
//!    and the versioned control socket; the one way into the core. [`backend`]: the front
//!    ends' side of them (local or remote).
//! 6. [`sources`] and [`delivery`]: the edges. They reach the core only through operations.
//! 7. [`config`]: composes each component's own settings into `switchboard.json`.
//! 8. Processes: [`watch`], [`daemon`], [`frontend`]; then [`cli`] and `main.rs`.
//!
//! # Layout
//!
//! - [`message`]: `Message` (the journal record), `NewMessage` (what sources produce),
//!   `MessageView` (the one JSON shape tools, resources and the CLI show).
//! - [`home`]: the home directory's paths, its lock, `write_atomic`, `FsyncPolicy`.
//! - [`duration`]: durations as the files write them (`"90s"`, `"1h30m"`).
//! - [`inbox`]: ring + `Log` (the group-commit journal), consumer cursors and `state.json`.
//! - [`actions`]: actions and their lifecycle (queues, claims, sessions, `actions.jsonl`).
//! - [`rules`]: `triggers.json` parsed, validated, compiled (matchers, time intervals).
//! - [`engine`]: pure evaluation of a message against the rules at a given time.
//! - [`metrics`]: process counters, and the `Scrape` of `GET /metrics` (encoded by prometheus-client).
//! - [`app`]: `Core`, the running whole: its `Components` (what the operations use), the
//!   engine with the live rules, the dispatcher, appends with their metrics.
//! - [`control`]: the operations (each applied to the components it uses), the control socket
//!   (protocol, handshake, deadlines), and refusals that keep their kind (`Refused { code,
//!   message }`) to every front end.
//! - [`backend`]: `Api` (local or remote) for MCP sessions, `Client` for the CLI and hooks.
//! - [`sources`]: HTTP ingest (generic, Alertmanager, GitHub) and upstream MCP servers.
//! - [`delivery`]: the MCP server (tools, long-poll wait, push) and the headless exec runner.
//! - [`auth`]: the bearer token and `Origin` checks of HTTP ingest and `/mcp`.
//! - [`listener`]: HTTP connections: the cap, header/body/idle timeouts.
//! - [`config`]: `switchboard.json`, composed from each component's settings.
//! - [`watch`]: reloads `triggers.json` and `switchboard.json` when they are saved.
//! - [`daemon`]: the daemon (one per home, the only writer): its components, each started
//!   from its own settings; start, log, shutdown.
//! - [`frontend`]: `serve`, an MCP front end on stdio attached to the daemon.
//! - [`cli`]: the command line.
//! - [`fuzzing`]: the entry points of the `fuzz/` targets, and the corpus replay test.
//!
//! `ARCHITECTURE.md` at the top of the repository says the same for readers of the source tree.

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
