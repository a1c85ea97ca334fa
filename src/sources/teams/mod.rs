//! Teams: direct messages and chats straight from Microsoft Graph.
//!
//! - [`mapping`] (with [`html`]): Graph's documented chat message JSON turned into our message.
//! - [`settings`]: the `teams` section of `switchboard.json`.

pub mod html;
pub mod mapping;
pub mod settings;

pub use self::mapping::{META_KEYS, SERVER};
pub use self::settings::TeamsSettings;
