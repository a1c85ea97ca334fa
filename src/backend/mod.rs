//! The front ends' side of the operations: how an MCP session, the CLI and the hooks reach the
//! daemon.
//!
//! - [`Api`]: what every MCP session holds: [`Local`] in the daemon (the op is applied
//!   directly), [`Remote`] in a front end (`switchboard serve`, over the control socket, with
//!   its sessions re-opened on a restarted daemon).
//! - [`Client`]: the operator CLI's connection, one command at a time (`watch` reads the
//!   daemon's pushes too).
//!
//! The operations themselves, the wire and the daemon's side are in [`crate::control`].

pub mod client;
pub mod remote;

use tokio_util::sync::CancellationToken;

use crate::control::ops::SessionSpec;
use crate::control::ops::{Close, Open, SessionInfo, Wait, WaitReply};
use crate::control::{ApiError, Feed, FrontendSettings, Local, Op};

pub use client::{Client, NotRunning};
pub use remote::{Connector, Remote};

/// What an MCP session calls: the daemon's operations, here or over the socket.
#[derive(Clone)]
pub enum Api {
    /// In the daemon.
    Local(Local),
    /// In a front end.
    Remote(Remote),
}

impl Api {
    /// Calls `op`.
    pub async fn call<O: Op>(&self, op: O) -> Result<O::Reply, ApiError> {
        match self {
            Api::Local(local) => local.call(op).await,
            Api::Remote(remote) => remote.call(op).await,
        }
    }

    /// Sends an ordered op (settle); applied in the order sent, no reply awaited.
    pub fn cast<O: Op>(&self, op: O) {
        match self {
            Api::Local(local) => {
                if let Err(e) = local.apply_now(op) {
                    tracing::warn!(cause = %e, "an ordered call failed");
                }
            }
            Api::Remote(remote) => remote.cast(op),
        }
    }

    /// Opens a session.
    pub async fn open(&self, spec: SessionSpec) -> Result<SessionInfo, ApiError> {
        match self {
            Api::Local(local) => local.apply_now(Open { spec, handle: None }),
            Api::Remote(remote) => remote.open(spec).await,
        }
    }

    /// Closes a session: its claims go back to the queue.
    pub fn close(&self, session: u64) {
        match self {
            Api::Local(local) => {
                let _ = local.apply_now(Close { session });
            }
            Api::Remote(remote) => remote.close(session),
        }
    }

    /// Takes, or waits for, a consumer's items; empty, having taken nothing, once `cancel`
    /// fires.
    pub async fn wait(
        &self,
        wait: Wait,
        cancel: &CancellationToken,
    ) -> Result<WaitReply, ApiError> {
        match self {
            Api::Local(local) => local.call_until(wait, cancel.clone()).await,
            Api::Remote(remote) => remote.wait(wait, cancel).await,
        }
    }

    /// Transitions, commits and tool changes from now on.
    pub fn subscribe(&self) -> Feed {
        match self {
            Api::Local(local) => local.subscribe(),
            Api::Remote(remote) => remote.subscribe(),
        }
    }

    /// The settings front ends follow.
    pub fn settings(&self) -> FrontendSettings {
        match self {
            Api::Local(local) => local.settings(),
            Api::Remote(remote) => remote.settings(),
        }
    }
}
