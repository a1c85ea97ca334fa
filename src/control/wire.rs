//! The control socket's lines: one JSON object per line, in both directions.
//!
//! ```text
//! client → {"hello": {"protocol": 3, "version": "0.1.0", "pid": 4121, "role": "front_end", "feed": true}}
//! daemon ← {"welcome": {"protocol": 3, "version": "0.1.0", "pid": 977, "settings": {...}, "listeners": {...}}}
//!        | {"refused": {"message": "..."}}               (and the daemon hangs up)
//! client → {"id": 1, "call": {"op": "wait", "session": 1, ...}}
//! client → {"id": 1, "cancel": true}                     (the daemon ends call 1 early)
//! daemon ← {"reply": {"id": 1, "ok": {...}}}
//!        | {"reply": {"id": 2, "error": {"type": "refused", "code": "expired", "message": "confirm 4 expired at ..."}}}
//!        | {"reply": {"id": 3, "error": {"type": "unknown_call", "call": "teleport", "protocol": 3}}}
//! daemon ← {"event": {...}} | {"committed": 42} | {"tools_changed": 3} | {"suppressed": {...}} | {"stopping": null}
//! ```
//!
//! Replies come in whatever order the calls finish; pushes (`event`, `committed`, ...) come
//! between them when the hello asked for the feed. A hello whose protocol the daemon does not
//! speak is refused at once, with a sentence that names both protocols and what to do (a
//! protocol 2 front end meeting this daemon reads "the running daemon (switchboard X) speaks
//! control protocol 3, this command (switchboard Y) speaks 2; run `switchboard stop`, then
//! retry: ..."); a call the daemon cannot read gets an error reply with its id. A refusal keeps
//! its kind across the socket ([`super::Refused`]: `code` and `message`), so that each front
//! end answers it as its own (an HTTP status, an MCP tool error, an exit code).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::ApiError;
use crate::actions::Event;
use crate::message::Seq;
use crate::metrics::Suppression;

/// The longest line either side reads (a `send` of many messages is one line).
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// How long one line may wait for its reader to take it.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Who connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// An MCP front end (`switchboard serve`): long-lived, many at once.
    FrontEnd,
    /// The operator CLI (`stats`, `confirm`, `watch`, `stop`, ...).
    Operator,
}

/// The first line a client sends.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Hello {
    /// The control protocol it speaks.
    pub protocol: u32,
    /// Its build (`CARGO_PKG_VERSION`).
    pub version: String,
    /// Its pid.
    pub pid: u32,
    /// Who it is.
    pub role: Role,
    /// Push lifecycle events, commits and tool changes on this connection.
    #[serde(default)]
    pub feed: bool,
    /// Also push suppressions (`watch`).
    #[serde(default)]
    pub suppressions: bool,
}

/// What the daemon tells a client it accepts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Welcome {
    /// The control protocol it speaks.
    pub protocol: u32,
    /// Its build.
    pub version: String,
    /// Its pid.
    pub pid: u32,
    /// The settings front ends follow.
    pub settings: FrontendSettings,
    /// The listeners it was started with.
    pub listeners: DaemonListeners,
}

/// The daemon's answer to a hello.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Greeting {
    /// Accepted.
    Welcome(Welcome),
    /// Refused (another protocol, or no room): why, and what to do.
    Refused {
        /// For people.
        message: String,
    },
}

/// A line from the client after its hello.
#[derive(Debug, Serialize, Deserialize)]
pub struct Up {
    /// The call's id, chosen by the client.
    pub id: u64,
    /// The call ([`super::Call`]); absent in a cancel. Kept raw so that a call the daemon
    /// cannot read still gets an answer with its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<Box<RawValue>>,
    /// Cancel call `id`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
}

/// The answer to one call.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reply {
    /// The call's id.
    pub id: u64,
    /// The reply, as the op's reply type serialises it (left out when it is `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<Box<RawValue>>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
}

/// A line from the daemon after its welcome.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Down {
    /// The answer to a call.
    Reply(Reply),
    /// A lifecycle transition.
    Event(Event),
    /// A new commit: the newest seq.
    Committed(Seq),
    /// The upstream tools changed.
    ToolsChanged(u64),
    /// A matching rule that did not fire.
    Suppressed(Suppression),
    /// A file of the home was reloaded, or could not be (`watch` only).
    Reloaded(super::ops::Reloaded),
    /// The daemon is stopping on purpose (`switchboard stop`, a signal, its lock lost): a
    /// front end starts it again only when it next needs it.
    Stopping,
}

/// What a front end follows of the daemon's settings.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FrontendSettings {
    /// The server-side cap of a wait, in seconds.
    pub max_wait_s: u64,
    /// When to send `notifications/claude/channel`.
    pub claude_channel: PushPolicy,
    /// Whether confirms are put to users in elicitation forms (`mcp.elicitation`); absent
    /// from an older daemon: on.
    #[serde(default = "elicitation_on")]
    pub elicitation: bool,
    /// `mcp.permissionRelay`: relay the host's permission prompts (absent from an older
    /// daemon: off).
    #[serde(default)]
    pub permission_relay: bool,
    /// `mcp.deliveryGrace`, in milliseconds: how long a session has to show it is still
    /// there once a result carrying work left (absent from an older daemon: 2000).
    #[serde(default = "delivery_grace_ms")]
    pub delivery_grace_ms: u64,
    /// `mcp.events.heartbeat`, in milliseconds: the longest an `events/stream` stays silent
    /// (absent from an older daemon: 25000).
    #[serde(default = "events_heartbeat_ms")]
    pub events_heartbeat_ms: u64,
}

impl FrontendSettings {
    /// `mcp.deliveryGrace` as a duration.
    pub fn delivery_grace(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.delivery_grace_ms)
    }
}

/// `events_heartbeat_ms` when a daemon's settings do not say.
pub fn events_heartbeat_ms() -> u64 {
    25_000
}

/// `delivery_grace_ms` when a daemon's settings do not say.
fn delivery_grace_ms() -> u64 {
    2000
}

/// `elicitation` when a daemon's settings do not say.
fn elicitation_on() -> bool {
    true
}

/// When to send the Claude Code channel push.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PushPolicy {
    /// Only to clients whose name contains `claude`.
    #[default]
    Auto,
    /// To every client.
    Always,
    /// Never.
    Never,
}

/// The listeners a daemon was asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonListeners {
    /// The ingest address asked for (`None` = no ingest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingest: Option<String>,
    /// MCP over HTTP asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_http: Option<String>,
}

/// Writes `value` as one line; fails when the peer has not taken it within [`WRITE_TIMEOUT`].
pub async fn write_line(
    write: &mut (impl AsyncWrite + Unpin),
    value: &impl Serialize,
) -> std::io::Result<()> {
    write_lines(write, std::slice::from_ref(value)).await
}

/// Writes `values`, one JSON line each, in one write; as [`write_line`], within
/// [`WRITE_TIMEOUT`].
pub async fn write_lines(
    write: &mut (impl AsyncWrite + Unpin),
    values: &[impl Serialize],
) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    for value in values {
        serde_json::to_writer(&mut bytes, value).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
    }
    match tokio::time::timeout(WRITE_TIMEOUT, write.write_all(&bytes)).await {
        Ok(written) => written,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the peer did not read for {}s", WRITE_TIMEOUT.as_secs()),
        )),
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes into `line` (cleared first); false at end of
/// stream.
pub async fn read_line(
    read: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
) -> std::io::Result<bool> {
    line.clear();
    let mut limited = read.take(MAX_LINE as u64 + 1);
    if limited.read_until(b'\n', line).await? == 0 {
        return Ok(false);
    }
    if line.len() > MAX_LINE {
        return Err(std::io::Error::other(format!(
            "a line longer than {MAX_LINE} bytes"
        )));
    }
    Ok(true)
}

/// The message for a peer that speaks another control protocol.
pub fn mismatch(ours: u32, theirs: u32, their_version: &str, we_are_daemon: bool) -> String {
    let (daemon, front) = if we_are_daemon {
        ((ours, env!("CARGO_PKG_VERSION")), (theirs, their_version))
    } else {
        ((theirs, their_version), (ours, env!("CARGO_PKG_VERSION")))
    };
    format!(
        "the running daemon (switchboard {}) speaks control protocol {}, this command \
         (switchboard {}) speaks {}; run `{}`, then retry: the next command starts \
         the installed switchboard",
        daemon.1,
        daemon.0,
        front.1,
        front.0,
        crate::home::command("stop")
    )
}
