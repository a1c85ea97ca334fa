//! Delivery: how actions reach agents and people.
//!
//! - [`mcp`]: the MCP server (tools, long-poll wait, push) over stdio and streamable HTTP.
//! - [`exec`]: the headless runner for `"delivery": "exec"` rules (Copilot CLI, Claude Code).
//! - [`web`]: the approval page (`/ui`) on the ingest listener, for people.
//! - [`webhook`]: MCP Events webhook subscriptions (`events/subscribe`) and their deliveries.
//!
//! The queues and claims behind the wait live in [`crate::actions::lifecycle`].

pub mod exec;
pub mod mcp;
pub mod web;
pub mod webhook;

pub use crate::actions::{ConfirmError, Item, ItemKind};
