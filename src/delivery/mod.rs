//! Delivery: how actions reach agents and people.
//!
//! - [`hub`]: per-consumer queues and the long-poll behind `wait_for_inbound_message`.
//! - [`mcp`]: the MCP server (tools, push) over stdio and streamable HTTP.

pub mod hub;
pub mod mcp;

pub use hub::{ConfirmError, Hub, Item, ItemKind};
