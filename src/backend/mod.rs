//! The one interface every front end calls: [`Backend`].
//!
//! MCP sessions, the control socket and ingest (HTTP and upstream servers) do not touch the
//! inbox, the lifecycle or the engine directly; they call a backend. [`LocalBackend`] runs the
//! calls against the [`App`](crate::app::App) in this process (the daemon). [`RemoteBackend`]
//! sends them over the control socket to the home's daemon (an MCP front-end started by a
//! host), starting and re-attaching to the daemon when it is not there. The request and reply
//! types below are the wire types of that socket too, so both sides speak one typed protocol.

pub mod local;
pub mod remote;

use std::future::Future;
use std::pin::Pin;

use rmcp::model::{CallToolRequestParams, CallToolResponse, ErrorData, Tool};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::actions::{ActionId, Event, Item};
use crate::app::{ReloadReport, Stats};
use crate::config::PushPolicy;
use crate::inbox::{Appended, InboxError, SeqReceiver};
use crate::message::{Message, NewMessage, Seq};

pub use local::LocalBackend;
pub use remote::RemoteBackend;

/// A boxed future, so that [`Backend`] can be used as `dyn Backend`.
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a backend call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The daemon cannot be reached (it is restarting, or cannot be started).
    #[error("the switchboard daemon is not reachable: {0}")]
    Unavailable(String),
    /// The daemon refused the call (bad arguments, an unknown id).
    #[error("{0}")]
    Refused(String),
    /// The inbox did not store the messages of an append, or stored them in memory only
    /// ([`InboxError::NotDurable`]): ingest answers each case with its own status. Over the
    /// control socket it travels as its text, and a remote backend returns it as `Refused`.
    #[error("not stored: {0}")]
    Store(InboxError),
}

/// The result of a backend call.
pub type Result<T> = std::result::Result<T, BackendError>;

/// The session a front end opens: one per MCP session.
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

/// An open session: its handle and the consumer it reads as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The handle to pass to `wait` and `confirm`.
    pub id: u64,
    /// Its own consumer (`copilot-cli#3`, or the `--consumer` name).
    pub consumer: String,
}

/// What a front end needs to know of the daemon's settings.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Settings {
    /// The server-side cap of a wait, in seconds.
    pub max_wait_s: u64,
    /// When to send `notifications/claude/channel`.
    pub claude_channel: PushPolicy,
}

/// `wait_for_inbound_message`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WaitRequest {
    /// The session whose claims the work becomes.
    pub session: u64,
    /// The consumer it reads as.
    pub consumer: String,
    /// The most items.
    pub max: usize,
    /// How long to wait when nothing is queued (capped by the daemon).
    pub timeout_ms: u64,
}

/// What a wait returns. Work among the items is claimed by the session until settled.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WaitReply {
    /// The items, work first.
    pub items: Vec<Item>,
    /// The consumer's cursor after the wait.
    pub cursor: Seq,
    /// Messages after the cursor.
    pub unread: u64,
}

/// `inbox_pull`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PullRequest {
    /// The consumer whose cursor is read and moved.
    pub consumer: String,
    /// After this seq instead of the cursor.
    pub since_seq: Option<Seq>,
    /// The most messages.
    pub limit: usize,
    /// Only this channel (glob).
    pub channel: Option<String>,
    /// Move the cursor.
    pub mark_read: bool,
}

/// Messages with the consumer's position.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PullReply {
    /// Oldest first.
    pub messages: Vec<Message>,
    /// The cursor after the pull.
    pub cursor: Seq,
    /// Messages after the cursor.
    pub unread: u64,
    /// The newest seq.
    pub last_seq: Seq,
}

/// The newest messages.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ListReply {
    /// Newest last.
    pub messages: Vec<Message>,
    /// The newest seq.
    pub last_seq: Seq,
}

/// A consumer's position.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerView {
    /// Its name.
    pub name: String,
    /// Its cursor.
    pub cursor: Seq,
    /// Messages after the cursor.
    pub unread: u64,
    /// Items queued for it.
    pub queued: usize,
}

/// `channel_confirm`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConfirmRequest {
    /// The action id.
    pub id: ActionId,
    /// Yes or no.
    pub approve: bool,
    /// Who answers (the consumer, or `cli`).
    pub by: String,
    /// The session that gets the approved work as its claim; none = queued for any session.
    pub claim_for: Option<u64>,
}

/// `channel_run`: a stored message, or the newest seq when there is none.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MessageReply {
    /// The message.
    pub message: Option<Message>,
    /// The newest seq.
    pub last_seq: Seq,
}

/// `inbox_stats` and `switchboard stats`: the daemon's stats and, when asked, one consumer's.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatsReply {
    /// Everything the daemon counts.
    #[serde(flatten)]
    pub stats: Stats,
    /// The asking consumer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<ConsumerView>,
}

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

/// The operations front ends need. Every method is cancel-safe in the sense that matters:
/// a dropped call never loses work (a wait that is dropped after it took work leaves that
/// work claimed by its session, which releases it when the session closes).
pub trait Backend: Send + Sync + 'static {
    /// The daemon's settings a front end follows.
    fn settings(&self) -> Settings;

    /// Opens a session (its consumer, its claims).
    fn open(&self, spec: SessionSpec) -> BoxFut<'_, Result<SessionInfo>>;

    /// Closes a session: its claims go back to the queue.
    fn close(&self, session: u64);

    /// Makes sure a named consumer exists (a tool's `consumer` argument).
    fn ensure_consumer(&self, name: String) -> BoxFut<'_, Result<()>>;

    /// Takes, or waits for, the consumer's items. Returns empty, having taken nothing, once
    /// `cancel` fires.
    fn wait(
        &self,
        request: WaitRequest,
        cancel: CancellationToken,
    ) -> BoxFut<'_, Result<WaitReply>>;

    /// Settles claims: delivered once the result carrying them was sent, else released with
    /// `why` to the front of the queue.
    fn settle(&self, claims: Vec<ActionId>, delivered: bool, why: String);

    /// Messages after the consumer's cursor (or a seq).
    fn pull(&self, request: PullRequest) -> BoxFut<'_, Result<PullReply>>;

    /// The newest messages, optionally of one channel.
    fn list(&self, channel: Option<String>, limit: usize) -> BoxFut<'_, Result<ListReply>>;

    /// Marks everything read for a consumer.
    fn ack(&self, consumer: String) -> BoxFut<'_, Result<ConsumerView>>;

    /// Answers a confirm: `Ok(Some(item))` approved, `Ok(None)` denied.
    fn confirm(&self, request: ConfirmRequest) -> BoxFut<'_, Result<Option<Item>>>;

    /// One stored message by seq.
    fn message(&self, seq: Seq) -> BoxFut<'_, Result<MessageReply>>;

    /// Pauses or resumes rule evaluation.
    fn pause(&self, paused: bool) -> BoxFut<'_, Result<bool>>;

    /// Reloads triggers.json.
    fn reload(&self) -> BoxFut<'_, Result<ReloadReport>>;

    /// The live rules, as `rules_list` shows them.
    fn rules(&self) -> BoxFut<'_, Result<Vec<serde_json::Value>>>;

    /// The daemon's stats, and the consumer's position when named.
    fn stats(&self, consumer: Option<String>) -> BoxFut<'_, Result<StatsReply>>;

    /// Appends messages (durable before the reply), counted as from `source`.
    fn append(
        &self,
        messages: Vec<NewMessage>,
        source: String,
    ) -> BoxFut<'_, Result<Vec<Appended>>>;

    /// Transitions, commits and tool changes from now on.
    fn subscribe(&self) -> Feed;

    /// The upstream tools re-exported to sessions.
    fn upstream_tools(&self) -> BoxFut<'_, Result<Vec<Tool>>>;

    /// Forwards a call when it names an upstream tool; `None` otherwise.
    fn call_upstream(
        &self,
        request: CallToolRequestParams,
    ) -> BoxFut<'_, Option<std::result::Result<CallToolResponse, ErrorData>>>;
}
