//! Teams: direct messages and chats straight from Microsoft Graph.
//!
//! - [`mapping`] (with [`html`]): Graph's documented chat message JSON turned into our message.

pub mod html;
pub mod mapping;

pub use self::mapping::{META_KEYS, SERVER};
