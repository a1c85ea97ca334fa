//! Sources: where messages come from.
//!
//! - [`http`]: the webhook endpoint (generic messages, Alertmanager, GitHub): authentication,
//!   limits, statuses.
//! - [`alertmanager`]: an Alertmanager webhook (version 4) → one message per alert. Pure.
//! - [`github`]: a GitHub webhook delivery → one message. Pure.

pub mod alertmanager;
pub mod github;
pub mod http;

/// Why a well-formed JSON payload could not be turned into messages (HTTP 422).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// Occurs when the JSON is valid but a field is missing or has the wrong type.
    #[error("request body has the wrong shape: {0}")]
    Shape(String),
    /// Occurs when an Alertmanager webhook is not version 4.
    #[error("unsupported alertmanager webhook version \"{0}\"; expected \"4\"")]
    UnsupportedVersion(String),
}

impl PayloadError {
    /// The stable code, as the `error` field of an HTTP error body.
    pub fn code(&self) -> &'static str {
        match self {
            PayloadError::Shape(_) => "invalid_payload",
            PayloadError::UnsupportedVersion(_) => "unsupported_version",
        }
    }
}
