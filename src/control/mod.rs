//! The operations: the one way into the running switchboard, local or over the control socket.
//!
//! Every front end (the MCP sessions, the operator CLI, HTTP ingest, upstream servers, the
//! exec runner, `watch`) does what it does through an [`Op`]: one file per operation in
//! [`ops`], holding its request type, its reply type, and how the daemon applies it. An op is
//! applied with a [`Ctx`], which hands it the components it may use — the inbox, the action
//! lifecycle, `state.json` (cursors), the metrics, on-duty mode, the daemon's [`Parts`], and the
//! [`Core`](crate::app::Core) for what the core alone does (the live rules, pause, appends
//! counted by source, the action id space) — and the op calls the component itself, as a
//! mini-redis command applies itself to its `Db`. So a new operation is its file, its line in
//! the [`ops`] table and, when it needs one, a method on the component it uses; nothing else
//! grows. [`ops::Call`] is the one enum of calls built from them, matched once
//! ([`ops::Call::apply`]).
//!
//! Two ways to call:
//! - [`Local`]: in the daemon, an op is applied directly (no encoding), with the components the
//!   daemon registered beside the core (upstream tools, exec, listeners: [`Parts`]).
//! - Over the home's control socket ([`server`] is the daemon's side), typed both ways
//!   ([`wire`]): from a front end or the CLI, through [`crate::backend`]. The connection
//!   starts with a hello that says which control protocol each side speaks ([`PROTOCOL`]); a
//!   mismatch is refused at once with a sentence saying what to do; a call the daemon does not
//!   know gets an error reply, never silence; every call has a deadline.
//!
//! Front ends hold a [`crate::backend::Api`], which is one or the other, and never touch the
//! inbox or the lifecycle themselves. Errors are one type, [`ApiError`], local and remote
//! alike.

pub mod events;
pub mod local;
pub mod ops;
pub mod peer;
pub mod refused;
pub mod server;
pub mod view;
pub mod wire;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::actions::duty::Duty;
use crate::actions::{Event, Lifecycle};
use crate::app::{Core, CoreSettings};
use crate::home::Home;
use crate::inbox::{Appended, Inbox, InboxError, SeqReceiver, StateStore};
use crate::metrics::Metrics;

pub use local::{EventHooks, Local, Parts, Relay, Replier, ToolHub, WebLink, WebLinks};
pub use ops::Call;
pub use refused::{RefusalCode, Refused};
pub use server::bind;
pub use view::{ConsumerView, ItemView, PendingView};
pub use wire::{DaemonListeners, FrontendSettings, PushPolicy};

/// The control protocol this build speaks. Bumped whenever a call, a reply or a line of the
/// connection changes shape, so that a front end and a daemon of different builds refuse each
/// other with a sentence instead of misreading each other. 3: an error names its variant in
/// `type` (it was `code`), a refusal carries its kind in `code`, `confirm` takes a `decision`.
pub const PROTOCOL: u32 = 3;

/// How long a call may take before its caller gives up on the daemon (a wait: its own timeout
/// plus [`WAIT_MARGIN`]).
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// What a wait's deadline adds to its own timeout: the time its reply takes to travel.
pub const WAIT_MARGIN: Duration = Duration::from_secs(5);

/// What a session hears besides its calls' replies: every lifecycle transition, each inbox
/// commit, each change of the upstream tools. Lossy under lag, like any push: the wait tool
/// still has every item.
pub struct Feed {
    /// Lifecycle transitions.
    pub events: broadcast::Receiver<Event>,
    /// The newest committed seq.
    pub committed: SeqReceiver,
    /// Bumped when the upstream tools change.
    pub tools: watch::Receiver<u64>,
}

/// One operation: its request (the type itself), its reply, and how the daemon applies it.
pub trait Op: Serialize + DeserializeOwned + Into<Call> + Send + 'static {
    /// The reply.
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// Applied in the order the connection sent it, before anything the connection sends after
    /// it (opening, closing and settling sessions); such an op completes without waiting.
    const ORDERED: bool = false;

    /// May come over the control socket; the daemon's own calls (the exec runner's) may not.
    const REMOTE: bool = true;

    /// How long a remote caller waits for the reply.
    fn deadline(&self) -> Duration {
        CALL_DEADLINE
    }

    /// Applies the op in the daemon.
    fn apply(self, cx: &Ctx<'_>) -> impl Future<Output = Result<Self::Reply, ApiError>> + Send;
}

/// What an op is applied with: the handles on the components it may use (the core's and the
/// daemon's parts), the call's cancellation, and the connection it came on (its sessions), if
/// it came over the socket. An op calls the component itself, as a mini-redis command applies
/// itself to its `Db`.
pub struct Ctx<'a> {
    /// The core and the daemon's parts.
    pub(in crate::control) local: &'a Local,
    /// Fires when the caller cancels the call (or goes away).
    pub cancel: CancellationToken,
    /// The sessions of the connection the call came on; `None` for a local call.
    pub sessions: Option<&'a server::Sessions>,
    /// The process at the other end of the control connection the call came on, from the
    /// socket's credentials ([`peer`]); `None` for a local call.
    pub peer: Option<u32>,
}

impl Ctx<'_> {
    /// The core: the live rules and their reloads, pause, appends counted by source, the
    /// action id space, its stats.
    pub fn core(&self) -> &Arc<Core> {
        self.local.core()
    }

    /// The inbox: every message, numbered and kept.
    pub fn inbox(&self) -> &Inbox {
        &self.local.core().components().inbox
    }

    /// The action lifecycle: queues, claims, sessions, confirms.
    pub fn lifecycle(&self) -> &Lifecycle {
        &self.local.core().components().lifecycle
    }

    /// `state.json`: the consumers' cursors.
    pub fn state(&self) -> &StateStore {
        &self.local.core().components().state
    }

    /// The process counters.
    pub fn metrics(&self) -> &Metrics {
        &self.local.core().components().metrics
    }

    /// On-duty mode and the stop hooks' counts.
    pub fn duty(&self) -> &Duty {
        &self.local.core().components().duty
    }

    /// The home, when the daemon runs on disk.
    pub fn home(&self) -> Option<&Home> {
        self.local.core().components().home.as_ref()
    }

    /// The core's settings (the cap of a wait).
    pub fn settings(&self) -> &CoreSettings {
        &self.local.core().components().settings
    }

    /// What the daemon wired beside the core: upstream tools, the shared stream, the approval
    /// page, what each part reports.
    pub fn parts(&self) -> &Parts {
        self.local.parts()
    }

    /// The core's session id for the caller's session `handle` (a connection numbers its
    /// own sessions; a local caller uses the core's ids).
    pub fn session(&self, handle: u64) -> Result<u64, ApiError> {
        match self.sessions {
            None => Ok(handle),
            Some(sessions) => sessions.get(handle).ok_or_else(|| {
                ApiError::refused(
                    RefusalCode::NotFound,
                    format!("no open session {handle} on this connection"),
                )
            }),
        }
    }
}

/// Why a call failed: one type for local and remote calls, serialisable so that the daemon's
/// refusal reaches a front end as it was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApiError {
    /// Occurs when the daemon cannot be reached (it is restarting, or cannot be started).
    #[error("the switchboard daemon is not reachable: {message}")]
    Unavailable {
        /// Why.
        message: String,
    },
    /// Occurs when the daemon refuses the call: an unknown id, an expired confirm, an answer
    /// not allowed, ... — each kind with its own code ([`RefusalCode`]).
    #[error("{0}")]
    Refused(Refused),
    /// Occurs when the inbox did not store the messages of an append (or stored them in
    /// memory only): ingest answers each case with its own status.
    #[error("not stored: {0}")]
    Store(StoreError),
    /// Occurs when the daemon does not know the call (it is an older build).
    #[error(
        "the daemon does not know the call `{call}`: it speaks control protocol {protocol}; \
         run `{}` so that the next front end starts the installed switchboard",
        crate::home::command("stop")
    )]
    UnknownCall {
        /// The call's name.
        call: String,
        /// The daemon's protocol.
        protocol: u32,
    },
    /// Occurs when the daemon did not answer within the call's deadline.
    #[error("the daemon did not answer `{call}` within {}s", secs)]
    Timeout {
        /// The call's name.
        call: String,
        /// The deadline, in seconds.
        secs: u64,
    },
    /// Occurs when the two sides do not speak the same control protocol, or a line does not
    /// fit it.
    #[error("{message}")]
    Protocol {
        /// What does not fit, and what to do.
        message: String,
    },
}

impl ApiError {
    /// A refusal of kind `code`, saying `message`.
    pub fn refused(code: RefusalCode, message: impl std::fmt::Display) -> ApiError {
        ApiError::Refused(Refused::new(code, message))
    }

    /// The stable code of the failure, as every front end shows it: a refusal's own code
    /// (`expired`, `not_allowed`, ...), why an append was not stored (`message_too_large`,
    /// `not_durable`, ...), or what went wrong between the two sides (`unknown_call`, ...).
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unavailable { .. } => "unavailable",
            ApiError::Refused(refused) => refused.code.as_str(),
            ApiError::Store(StoreError::TooLarge { count: true, .. }) => "too_many_metadata_keys",
            ApiError::Store(StoreError::TooLarge { .. }) => "message_too_large",
            ApiError::Store(StoreError::NotDurable { .. }) => "not_durable",
            ApiError::Store(StoreError::Unavailable { .. }) => "not_stored",
            ApiError::Store(StoreError::Closed) => "shutting_down",
            ApiError::UnknownCall { .. } => "unknown_call",
            ApiError::Timeout { .. } => "timeout",
            ApiError::Protocol { .. } => "protocol",
        }
    }

    /// The HTTP status the HTTP front ends (ingest, the approval page) answer it with: the one
    /// mapping, so that an expired confirm is `410` and an unknown one `404` wherever it is
    /// asked.
    pub fn http_status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            ApiError::Refused(refused) => match refused.code {
                RefusalCode::Unknown | RefusalCode::NotFound => S::NOT_FOUND,
                RefusalCode::Expired => S::GONE,
                RefusalCode::AlreadyAnswered => S::CONFLICT,
                RefusalCode::NotAllowed => S::FORBIDDEN,
                RefusalCode::Invalid => S::UNPROCESSABLE_ENTITY,
                RefusalCode::Full | RefusalCode::Unavailable | RefusalCode::NotRecorded => {
                    S::SERVICE_UNAVAILABLE
                }
                RefusalCode::Failed => S::INTERNAL_SERVER_ERROR,
            },
            ApiError::Store(StoreError::TooLarge { count: true, .. }) => S::UNPROCESSABLE_ENTITY,
            ApiError::Store(StoreError::TooLarge { .. }) => S::PAYLOAD_TOO_LARGE,
            ApiError::Store(_) | ApiError::Unavailable { .. } => S::SERVICE_UNAVAILABLE,
            ApiError::Timeout { .. } => S::GATEWAY_TIMEOUT,
            ApiError::UnknownCall { .. } | ApiError::Protocol { .. } => S::INTERNAL_SERVER_ERROR,
        }
    }

    /// The refusal's code, when the daemon refused.
    pub fn refusal(&self) -> Option<RefusalCode> {
        match self {
            ApiError::Refused(refused) => Some(refused.code),
            _ => None,
        }
    }

    /// The daemon is not reachable: `message` says why.
    pub fn unavailable(message: impl std::fmt::Display) -> ApiError {
        ApiError::Unavailable {
            message: message.to_string(),
        }
    }
}

/// Why the inbox did not take an append, as it travels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoreError {
    /// A message is over a limit; nothing of the batch was stored.
    #[error("{}{detail}", if *batch { format!("message {index}: ") } else { String::new() })]
    TooLarge {
        /// The message's position in the batch.
        index: usize,
        /// More than one message was sent.
        batch: bool,
        /// The limit and the size, for people.
        detail: String,
        /// The limit is a count (of metadata keys), not a size.
        count: bool,
    },
    /// The messages are in memory and readable, but the journal write failed; it is retried.
    #[error("kept in memory, not on disk: journal write failed: {cause}")]
    NotDurable {
        /// The seqs assigned.
        appended: Vec<Appended>,
        /// The I/O error.
        cause: String,
    },
    /// The journal can take nothing now; no seq is shown.
    #[error("the journal cannot take messages now: {cause}")]
    Unavailable {
        /// Why.
        cause: String,
    },
    /// The inbox is shutting down.
    #[error("inbox closed")]
    Closed,
}

impl From<InboxError> for StoreError {
    fn from(e: InboxError) -> StoreError {
        match e {
            InboxError::TooLarge {
                index,
                batch,
                error,
            } => StoreError::TooLarge {
                index,
                batch,
                count: error.is_count(),
                detail: error.to_string(),
            },
            InboxError::NotDurable { appended, cause } => {
                StoreError::NotDurable { appended, cause }
            }
            InboxError::Unavailable { cause } => StoreError::Unavailable { cause },
            InboxError::Closed => StoreError::Closed,
            InboxError::Journal { path, source } => StoreError::Unavailable {
                cause: format!("journal {path}: {source}"),
            },
        }
    }
}

impl From<Refused> for ApiError {
    fn from(refused: Refused) -> ApiError {
        ApiError::Refused(refused)
    }
}

impl From<crate::actions::ConfirmError> for ApiError {
    fn from(e: crate::actions::ConfirmError) -> ApiError {
        ApiError::Refused(e.into())
    }
}

impl From<crate::actions::lifecycle::RelayError> for ApiError {
    fn from(e: crate::actions::lifecycle::RelayError) -> ApiError {
        ApiError::Refused(e.into())
    }
}

impl From<InboxError> for ApiError {
    fn from(e: InboxError) -> ApiError {
        ApiError::Store(e.into())
    }
}
