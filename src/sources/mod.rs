//! Sources: where messages come from.
//!
//! - [`http`]: the webhook endpoint (generic messages, Alertmanager, GitHub).

pub mod http;
