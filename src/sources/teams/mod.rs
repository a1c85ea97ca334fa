//! Teams: direct messages and chats straight from Microsoft Graph.
//!
//! - [`auth`]: the sign-in (device code flow, refresh, app-only) and `teams-token.json`.
//! - [`client`]: Graph's HTTP calls and their retry rules (429/503 `Retry-After`, 401 refresh once).
//! - [`mapping`] (with [`html`]): Graph's documented chat message JSON turned into our message.
//! - [`settings`]: the `teams` section of `switchboard.json`.

pub mod auth;
pub mod client;
pub mod html;
pub mod mapping;
pub mod settings;

pub use self::mapping::{META_KEYS, SERVER};
pub use self::settings::TeamsSettings;
