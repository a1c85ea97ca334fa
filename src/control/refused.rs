//! Refusals: the daemon's "no" to a call, with a stable code per kind.
//!
//! A component says why it refuses in its own error type ([`ConfirmError`] in the lifecycle,
//! [`RelayError`] for a relayed permission prompt, ...); at the operation's boundary that
//! becomes a [`Refused`]: the kind as a [`RefusalCode`] that travels over the control socket as
//! it was made, and the sentence for people. Each front end maps the code once: an HTTP status
//! and `{"error": code, "message"}` for ingest and the approval page
//! ([`super::ApiError::http_status`]), a tool error carrying the code for MCP
//! (`delivery::mcp::tools::Refusal`), an exit code for the CLI (`cli::exit`). So a front end never
//! reads the prose to tell an expired confirm from an unknown one.

use serde::{Deserialize, Serialize};

use crate::actions::ConfirmError;
use crate::actions::lifecycle::RelayError;

/// The kind of a refusal, stable on the wire and in every front end's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalCode {
    /// Occurs when an id names no confirm request the daemon knows (never made, or closed so
    /// long ago that it is forgotten).
    Unknown,
    /// Occurs when a confirm expired before it was answered.
    Expired,
    /// Occurs when a confirm was already approved, denied or resolved.
    AlreadyAnswered,
    /// Occurs when the caller may not do this: the path or the consumer an answer came by is
    /// not among the rule's, an agent answers its own permission prompt, a front end sends the
    /// daemon's own call.
    NotAllowed,
    /// Occurs when what the call names is not there (a session of the connection).
    NotFound,
    /// Occurs when the call itself is wrong (an argument missing or out of range).
    Invalid,
    /// Occurs when a bounded queue is full.
    Full,
    /// Occurs when what the call needs is not there now (the approval page is not served, the
    /// shared stream cannot be reached); retry later, or start the daemon so.
    Unavailable,
    /// Occurs when an answer could not be written to the actions journal: it was not kept,
    /// nothing changed, the confirm is still pending; try again.
    NotRecorded,
    /// Occurs when the daemon tried and failed (a file it could not write, a reply it could not
    /// encode).
    Failed,
}

impl RefusalCode {
    /// Every code, in the order the documentation lists them.
    pub const ALL: [RefusalCode; 10] = [
        RefusalCode::Unknown,
        RefusalCode::Expired,
        RefusalCode::AlreadyAnswered,
        RefusalCode::NotAllowed,
        RefusalCode::NotFound,
        RefusalCode::Invalid,
        RefusalCode::Full,
        RefusalCode::Unavailable,
        RefusalCode::NotRecorded,
        RefusalCode::Failed,
    ];

    /// The code as it is written on the wire and in answers (`already_answered`).
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::Unknown => "unknown",
            RefusalCode::Expired => "expired",
            RefusalCode::AlreadyAnswered => "already_answered",
            RefusalCode::NotAllowed => "not_allowed",
            RefusalCode::NotFound => "not_found",
            RefusalCode::Invalid => "invalid",
            RefusalCode::Full => "full",
            RefusalCode::Unavailable => "unavailable",
            RefusalCode::NotRecorded => "not_recorded",
            RefusalCode::Failed => "failed",
        }
    }
}

impl std::fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal: its kind, and the sentence for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Refused {
    /// The kind.
    pub code: RefusalCode,
    /// Why, for people: what was refused, the cause after a colon, a hint after a semicolon.
    pub message: String,
    /// What a program branches on beyond the code, when the refusal says more (which limit,
    /// which feature, which failure category): the MCP events methods' typed error `data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl Refused {
    /// A refusal of kind `code`, saying `message`.
    pub fn new(code: RefusalCode, message: impl std::fmt::Display) -> Refused {
        Refused {
            code,
            message: message.to_string(),
            data: None,
        }
    }

    /// The same refusal, carrying `data`.
    pub fn with_data(mut self, data: serde_json::Value) -> Refused {
        self.data = Some(data);
        self
    }
}

impl From<ConfirmError> for Refused {
    fn from(e: ConfirmError) -> Refused {
        let code = match &e {
            ConfirmError::Unknown(_) => RefusalCode::Unknown,
            ConfirmError::Expired { .. } => RefusalCode::Expired,
            ConfirmError::AlreadyAnswered { .. } => RefusalCode::AlreadyAnswered,
            ConfirmError::NotForConsumer { .. }
            | ConfirmError::ViaRefused { .. }
            | ConfirmError::OwnPermission { .. } => RefusalCode::NotAllowed,
            ConfirmError::NotRecorded { .. } => RefusalCode::NotRecorded,
        };
        Refused::new(code, e)
    }
}

impl From<RelayError> for Refused {
    fn from(e: RelayError) -> Refused {
        let code = match &e {
            RelayError::NoSession(_) => RefusalCode::NotFound,
            RelayError::Full(_) => RefusalCode::Full,
        };
        Refused::new(code, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_written_as_named_and_read_back() {
        for code in RefusalCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(serde_json::from_str::<RefusalCode>(&json).unwrap(), code);
        }
    }

    #[test]
    fn each_kind_of_confirm_error_keeps_its_own_code() {
        let of = |e: ConfirmError| Refused::from(e).code;
        assert_eq!(of(ConfirmError::Unknown(9)), RefusalCode::Unknown);
        let expired = ConfirmError::Expired {
            id: 1,
            expired: "2026-01-01T00:00:00Z".into(),
        };
        assert_eq!(of(expired), RefusalCode::Expired);
        let answered = ConfirmError::AlreadyAnswered {
            id: 1,
            state: "approved".into(),
        };
        assert_eq!(of(answered), RefusalCode::AlreadyAnswered);
        let own = ConfirmError::OwnPermission {
            id: 1,
            tool: "Bash".into(),
        };
        assert_eq!(of(own), RefusalCode::NotAllowed);
        let full = Refused::from(RelayError::Full(10));
        assert_eq!(full.code, RefusalCode::Full);
        assert!(full.message.contains("full (10)"), "{}", full.message);
    }
}
