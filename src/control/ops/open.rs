//! `open`: a session begins (one per MCP session); it reads as its own consumer.

use serde::{Deserialize, Serialize};

use crate::actions::lifecycle::{consumer_name_problem, fit_consumer_name};
use crate::control::refused::RefusalCode;
use crate::control::{ApiError, Ctx, Op};

/// Who opens a session: one per MCP session (a host window).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SessionSpec {
    /// `clientInfo.name` of the host (`mcp` when it gave none).
    pub client: String,
    /// `serve --consumer NAME`: the consumer the session reads as; it keeps its cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub named: Option<String>,
    /// The consumer name of this session before the daemon restarted, to keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
}

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
        let (id, consumer) = open(cx, &self.spec)?;
        let handle = match cx.sessions {
            Some(sessions) => {
                let handle = self.handle.unwrap_or(id);
                if let Some(old) = sessions.insert(handle, id) {
                    // A handle used twice: the older session ends, as its front end forgot it.
                    super::close::end(cx, old);
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

/// Opens a session in the lifecycle; returns its id and the consumer it reads as, or why a
/// named one may not be (see [`consumer_name_problem`]). Consumers forgotten to stay within
/// `actions.maxConsumers` lose their cursors.
fn open(cx: &Ctx<'_>, spec: &SessionSpec) -> Result<(u64, String), ApiError> {
    let opened = open_consumer(cx, spec);
    drop_forgotten(cx);
    opened
}

fn open_consumer(cx: &Ctx<'_>, spec: &SessionSpec) -> Result<(u64, String), ApiError> {
    let (lifecycle, state, inbox) = (cx.lifecycle(), cx.state(), cx.inbox());
    if let Some(name) = spec.named.as_deref().filter(|n| !n.trim().is_empty()) {
        if let Some(problem) = consumer_name_problem(name) {
            let shown = fit_consumer_name(name, "");
            return Err(ApiError::refused(
                RefusalCode::Invalid,
                format!("consumer \"{}\": {problem}", shown.escape_debug()),
            ));
        }
        let cursor = state.cursor(name);
        let id = lifecycle.open_session(name, true, cursor);
        return Ok((id, name.to_string()));
    }
    // A front end re-attaching after a daemon restart keeps its consumer name, unless a live
    // session took it meanwhile.
    if let Some(old) = spec.resume.as_deref()
        && consumer_name_problem(old).is_none()
        && !lifecycle.consumer_in_use(old)
    {
        let cursor = state.cursor(old).unwrap_or(inbox.last_seq());
        let id = lifecycle.open_session(old, false, Some(cursor));
        state.set_cursor(old, cursor);
        return Ok((id, old.to_string()));
    }
    let prefix = spec.client.trim();
    let prefix = if prefix.is_empty() { "mcp" } else { prefix };
    let id = lifecycle.open_session_numbered(prefix);
    let name = lifecycle.consumer_of(id).unwrap_or_default();
    // Its cursor starts at its start: what came before is not unread for it.
    state.set_cursor(&name, inbox.last_seq());
    Ok((id, name))
}

/// Drops the cursors of the consumers the lifecycle forgot to stay within
/// `actions.maxConsumers` (after an operation that may have made one).
pub(super) fn drop_forgotten(cx: &Ctx<'_>) {
    for gone in cx.lifecycle().take_forgotten() {
        cx.state().remove_cursor(&gone);
    }
}
