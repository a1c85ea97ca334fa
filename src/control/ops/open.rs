//! `open`: a session begins (one per MCP session); it reads as its own consumer.

use serde::{Deserialize, Serialize};

use crate::app::SessionSpec;
use crate::control::{ApiError, Ctx, Op};

/// Opens a session.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Open {
    /// Who opens it.
    pub spec: SessionSpec,
    /// The caller's number for it on a socket connection (a front end re-opening its
    /// sessions on a restarted daemon keeps them); a local caller leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<u64>,
}

/// An open session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The handle to pass to `wait`, `confirm` and `close`.
    pub id: u64,
    /// Its consumer (`copilot-cli#3`, or the `--consumer` name).
    pub consumer: String,
}

impl Op for Open {
    type Reply = SessionInfo;
    const ORDERED: bool = true;

    async fn apply(self, cx: &Ctx<'_>) -> Result<SessionInfo, ApiError> {
        let (id, consumer) = cx.local.core().open_session(&self.spec);
        let handle = match cx.sessions {
            Some(sessions) => {
                let handle = self.handle.unwrap_or(id);
                if let Some(old) = sessions.insert(handle, id) {
                    // A handle used twice: the older session ends, as its front end forgot it.
                    cx.local.core().close_session(old);
                }
                handle
            }
            None => id,
        };
        Ok(SessionInfo {
            id: handle,
            consumer,
        })
    }
}
