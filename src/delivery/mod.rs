//! Delivery: how actions reach agents and people.
//!
//! - [`mcp`]: the MCP server (tools, long-poll wait, push) over stdio and streamable HTTP.
//!
//! The queues and claims behind the wait live in [`crate::actions::lifecycle`].

pub mod mcp;

pub use crate::actions::{ConfirmError, Item, ItemKind};
