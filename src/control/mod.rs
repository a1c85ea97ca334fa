//! The control socket: how the operator CLI and the MCP front ends talk to the daemon.
//!
//! A Unix socket in the home (`control.sock`, 0600). Each connection sends one
//! JSON request line ([`Request`], whose variants name their reply types) and reads JSON
//! response lines: one for ordinary commands, a stream of events for `watch` (until the
//! client hangs up), or, after `attach`, the multiplexed calls of a front end ([`attach`]).
//!
//! The socket file is the daemon's for as long as it holds the home's lock: deleted (a
//! cleaner of stale sockets, a careless `rm`), it is bound again within
//! [`SOCKET_CHECK_EVERY`], so front ends and the CLI find the daemon again instead of failing
//! to start a second one. A file another process put there is left alone. At shutdown the
//! socket is removed if it is still this daemon's.
//!
//! Limits, so that a stuck or hostile client cannot lock the operator out: at most
//! [`MAX_CONNECTIONS`] connections at once (one more is told the socket is busy and
//! closed); the request line must arrive within [`REQUEST_TIMEOUT`] and be at most
//! [`MAX_REQUEST_BYTES`]; every response line must be taken by the client within
//! [`WRITE_TIMEOUT`]. A `watch` stream, once its request is read, runs as long as the
//! client reads it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

use crate::actions::Event;
use crate::app::App;
use crate::backend::{Backend, LocalBackend};

pub mod attach;

pub use attach::{Attached, DaemonListeners};

/// The most control connections served at once (`watch` streams included).
pub const MAX_CONNECTIONS: usize = 64;

/// How long a client may take to send its request line after connecting.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest request line (a `send` carries its messages).
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// How long one response line may wait for the client to read it.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the daemon checks that its socket file is still there.
pub const SOCKET_CHECK_EVERY: Duration = Duration::from_secs(1);

/// A request from the CLI.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    /// Counters. Reply: [`crate::app::Stats`].
    Stats,
    /// Pause or resume evaluation. Reply: [`Paused`].
    Pause {
        /// true = pause.
        paused: bool,
    },
    /// Reload triggers.json. Reply: [`crate::app::ReloadReport`] (also when refused).
    Reload,
    /// The live rules. Reply: `Vec<serde_json::Value>`, one summary per rule.
    Rules,
    /// Recent messages. Reply: `Vec<`[`crate::message::Message`]`>`.
    List {
        /// Channel filter (`alerts/*`).
        channel: Option<String>,
        /// How many.
        limit: usize,
    },
    /// Answer a confirm. Reply: `Option<`[`crate::actions::Item`]`>` (the approved item).
    Confirm {
        /// Action id.
        id: u64,
        /// true = yes.
        approve: bool,
    },
    /// Stream messages and actions.
    Watch,
    /// Open confirm requests, oldest first. Reply: `Vec<`[`PendingView`]`>`.
    Pending,
    /// Append messages to the inbox (`switchboard send`); answers once they are durable.
    /// Reply: `Vec<`[`crate::inbox::Appended`]`>`.
    Send {
        /// The messages, in order.
        messages: Vec<crate::message::NewMessage>,
    },
    /// Attach an MCP front end: the connection then carries its calls and the daemon's pushes
    /// ([`attach`]).
    Attach {
        /// The front end's version.
        version: String,
        /// The front end's pid.
        pid: u32,
    },
    /// The daemon's identity, listeners and state (`switchboard status`).
    Status,
    /// Stop the daemon (`switchboard stop`); answered before it stops.
    Shutdown,
}

/// One response line.
#[derive(Debug, Serialize, Deserialize)]
pub struct Response {
    /// Whether the request succeeded.
    pub ok: bool,
    /// The result.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub result: serde_json::Value,
    /// The error, when not ok.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    fn ok(result: impl Serialize) -> Response {
        Response {
            ok: true,
            result: serde_json::to_value(result).unwrap_or_default(),
            error: None,
        }
    }
    fn err(error: impl std::fmt::Display) -> Response {
        Response {
            ok: false,
            result: serde_json::Value::Null,
            error: Some(error.to_string()),
        }
    }
}

/// Binds the socket (replacing a stale one) and serves it until shutdown.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// What `switchboard status` shows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    /// The daemon's pid.
    pub pid: u32,
    /// Its version.
    pub version: String,
    /// Its home.
    pub home: String,
    /// When it started (RFC 3339).
    pub started: String,
    /// Its log file, when it logs to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// The listeners asked for.
    pub asked: DaemonListeners,
    /// The stats, which include the listeners' state.
    pub stats: crate::app::Stats,
}

/// Accepts connections on `listener`, bound at `path`, until the app shuts down; binds the
/// socket again if its file is deleted while `lock` still holds the home.
pub async fn serve(
    app: Arc<App>,
    path: PathBuf,
    mut listener: UnixListener,
    lock: Arc<crate::config::HomeLock>,
    listeners: DaemonListeners,
) {
    let listeners = Arc::new(listeners);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut ours = inode(&path);
    let mut check = tokio::time::interval(SOCKET_CHECK_EVERY);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rebind_failed = false;
    loop {
        let stream = tokio::select! {
            _ = app.shutdown.cancelled() => break,
            _ = check.tick() => {
                let gone = matches!(
                    std::fs::symlink_metadata(&path),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound
                );
                if gone && lock.intact() {
                    match bind(&path) {
                        Ok(again) => {
                            listener = again;
                            ours = inode(&path);
                            rebind_failed = false;
                            tracing::warn!(
                                socket = %path.display(),
                                "the control socket was deleted; bound it again"
                            );
                        }
                        Err(err) if !std::mem::replace(&mut rebind_failed, true) => {
                            tracing::error!(
                                socket = %path.display(),
                                cause = %err,
                                "the control socket was deleted and cannot be bound again; \
                                 the CLI and front ends cannot reach this daemon"
                            );
                        }
                        Err(_) => {}
                    }
                }
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::warn!(cause = %err, "control socket accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // The answer fits any socket buffer: it never waits for the client.
            let busy = Response::err(format!(
                "the control socket is busy: {MAX_CONNECTIONS} connections are open; retry, or \
                 stop the `switchboard watch` commands you do not need"
            ));
            let mut line = serde_json::to_vec(&busy).unwrap_or_default();
            line.push(b'\n');
            let _ = stream.try_write(&line);
            continue;
        };
        let app = app.clone();
        let listeners = listeners.clone();
        app.tasks.clone().spawn(async move {
            if let Err(err) = handle(app, stream, &listeners).await {
                tracing::debug!(cause = %err, "control connection ended");
            }
            drop(slot);
        });
    }
    // Only our own: a daemon that started after us (our lock was lost) owns what is there now.
    if ours.is_some() && inode(&path) == ours {
        let _ = std::fs::remove_file(&path);
    }
}

/// The inode of `path`, to tell our own socket file from one that replaced it.
fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| m.ino())
}

/// Reads the request line: within [`REQUEST_TIMEOUT`], at most [`MAX_REQUEST_BYTES`].
async fn read_request(
    read: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
) -> Result<Request, String> {
    let mut line = Vec::new();
    let mut limited = read.take(MAX_REQUEST_BYTES as u64 + 1);
    match tokio::time::timeout(REQUEST_TIMEOUT, limited.read_until(b'\n', &mut line)).await {
        Err(_) => {
            return Err(format!(
                "no request line within {}s",
                REQUEST_TIMEOUT.as_secs()
            ));
        }
        Ok(Err(e)) => return Err(format!("cannot read the request: {e}")),
        Ok(Ok(_)) => {}
    }
    if line.len() > MAX_REQUEST_BYTES {
        return Err(format!(
            "the request is longer than {MAX_REQUEST_BYTES} bytes"
        ));
    }
    serde_json::from_slice(&line).map_err(|e| format!("bad request: {e}"))
}

async fn handle(
    app: Arc<App>,
    stream: UnixStream,
    listeners: &DaemonListeners,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let request = match read_request(&mut read).await {
        Ok(r) => r,
        Err(e) => return send(&mut write, &Response::err(e)).await,
    };
    let backend = LocalBackend::new(app.clone());
    let response = match request {
        Request::Attach { version, pid } => {
            tracing::debug!(front_end = pid, %version, "front end attached");
            if version != env!("CARGO_PKG_VERSION") {
                tracing::warn!(
                    front_end = pid,
                    %version,
                    "a front end of another version attached; restart the daemon \
                     (`switchboard stop`) to run the installed version"
                );
            }
            let hello = Attached {
                pid: std::process::id(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                settings: crate::backend::Backend::settings(&backend),
                listeners: listeners.clone(),
            };
            return attach::serve(backend, read, write, hello).await;
        }
        Request::Status => Response::ok(Status {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            home: app
                .home
                .as_ref()
                .map(|h| h.dir().display().to_string())
                .unwrap_or_default(),
            started: crate::message::format_timestamp(app.started),
            log: app.log_file.clone(),
            asked: listeners.clone(),
            stats: app.stats(),
        }),
        Request::Shutdown => {
            tracing::info!("stop requested on the control socket");
            let reply = send(
                &mut write,
                &Response::ok(serde_json::json!({"pid": std::process::id()})),
            )
            .await;
            app.shutdown.cancel();
            return reply;
        }
        Request::Stats => reply(backend.stats(None).await.map(|s| s.stats)),
        Request::Pending => Response::ok(
            app.lifecycle
                .pending_confirms()
                .iter()
                .map(PendingView::of)
                .collect::<Vec<_>>(),
        ),
        Request::Pause { paused } => {
            reply(backend.pause(paused).await.map(|paused| Paused { paused }))
        }
        Request::Reload => {
            let report = match backend.reload().await {
                Ok(report) => report,
                Err(e) => return send(&mut write, &Response::err(e)).await,
            };
            if report.ok {
                Response::ok(report)
            } else {
                Response {
                    ok: false,
                    error: Some(report.message.clone()),
                    result: serde_json::to_value(report).unwrap_or_default(),
                }
            }
        }
        Request::Rules => reply(backend.rules().await),
        Request::List { channel, limit } => {
            reply(backend.list(channel, limit).await.map(|l| l.messages))
        }
        Request::Confirm { id, approve } => reply(
            backend
                .confirm(crate::backend::ConfirmRequest {
                    id,
                    approve,
                    by: "cli".into(),
                    claim_for: None,
                })
                .await,
        ),
        Request::Watch => return watch(app, write).await,
        Request::Send { messages } => reply(backend.append(messages, "cli".into()).await),
    };
    send(&mut write, &response).await
}

/// The answer to a backend call as a response line.
fn reply<T: Serialize>(result: crate::backend::Result<T>) -> Response {
    match result {
        Ok(v) => Response::ok(v),
        Err(e) => Response::err(e),
    }
}

/// The reply of `pause` and `resume`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paused {
    /// Whether evaluation is paused now.
    pub paused: bool,
}

/// An open confirm request as `switchboard pending` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingView {
    /// The action id to answer with `switchboard confirm ID yes|no`.
    pub id: crate::actions::ActionId,
    /// The rule that asks.
    pub rule: String,
    /// The source message's server, channel and seq.
    pub server: String,
    /// The source message's channel.
    pub channel: String,
    /// The source message's seq.
    pub seq: crate::message::Seq,
    /// The question: the rendered prompt.
    pub prompt: String,
    /// The source message's content.
    pub content: String,
    /// When it expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl PendingView {
    fn of(item: &crate::actions::Item) -> PendingView {
        PendingView {
            id: item.action_id,
            rule: item.rule.to_string(),
            server: item.message.server.clone(),
            channel: item.message.channel.clone(),
            seq: item.message.seq,
            prompt: item.prompt.clone(),
            content: item.message.content.clone(),
            expires_at: item.expires_at.map(crate::message::format_timestamp),
        }
    }
}

/// A line of `watch`: a message or an action transition.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WatchEvent {
    /// A committed message.
    Message(crate::message::Message),
    /// An action transition (queued, answered, expired, resolved, claimed, delivered,
    /// released, dropped).
    Action(Event),
    /// A matching rule that did not fire (dedup, rate limit).
    Suppressed(crate::metrics::Suppression),
}

async fn watch(app: Arc<App>, mut write: tokio::net::unix::OwnedWriteHalf) -> std::io::Result<()> {
    let mut committed = app.inbox.committed();
    let mut items = app.lifecycle.subscribe();
    let mut suppressions = app.metrics.suppressions.subscribe();
    let mut after = app.inbox.last_seq();
    loop {
        tokio::select! {
            _ = app.shutdown.cancelled() => return Ok(()),
            changed = committed.changed() => {
                if changed.is_err() { return Ok(()); }
                for msg in app.inbox.read_after(after, 256).await {
                    after = msg.seq;
                    send(&mut write, &WatchEvent::Message((*msg).clone())).await?;
                }
            }
            item = items.recv() => match item {
                Ok(item) => send(&mut write, &WatchEvent::Action(item)).await?,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return Ok(()),
            },
            s = suppressions.rx.recv() => match s {
                Ok(s) => send(&mut write, &WatchEvent::Suppressed(s)).await?,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return Ok(()),
            },
        }
    }
}

/// Writes one JSON line; fails when the peer has not taken it within [`WRITE_TIMEOUT`].
async fn send(
    write: &mut (impl AsyncWriteExt + Unpin),
    value: &impl Serialize,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    line.push(b'\n');
    match tokio::time::timeout(WRITE_TIMEOUT, write.write_all(&line)).await {
        Ok(written) => written,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the peer did not read for {}s", WRITE_TIMEOUT.as_secs()),
        )),
    }
}

/// Client side: connects to the server of `home`.
pub struct Client {
    stream: BufReader<UnixStream>,
}

impl Client {
    /// Connects, or explains that no server runs on this home.
    pub async fn connect(home: &Path) -> anyhow::Result<Client> {
        let path = home.join("control.sock");
        match UnixStream::connect(&path).await {
            Ok(stream) => Ok(Client {
                stream: BufReader::new(stream),
            }),
            Err(e) => anyhow::bail!(
                "no switchboard is running on {}: cannot connect to {}: {e}; start one with `switchboard start`",
                home.display(),
                path.display()
            ),
        }
    }

    /// A client on a connection already made.
    pub fn from_stream(stream: UnixStream) -> Client {
        Client {
            stream: BufReader::new(stream),
        }
    }

    /// Sends a request and reads the first response line. A server that answered before it
    /// read the request (the socket is busy) is heard even though the send failed.
    pub async fn call(&mut self, request: &Request) -> anyhow::Result<Response> {
        let sent = send(self.stream.get_mut(), request).await;
        match self.next_line().await {
            Ok(Some(response)) => return Ok(response),
            Err(err) if sent.is_ok() => return Err(err),
            _ => {}
        }
        // Not `?`: a broken pipe here is the server's, not the terminal's (`main` exits 0
        // quietly on a closed stdout).
        if let Err(err) = sent {
            anyhow::bail!("cannot send the request to the server: {err}");
        }
        anyhow::bail!("the server closed the control connection")
    }

    /// Sends `request` and decodes its result as `T` (each request's reply type is named on
    /// [`Request`]); the daemon's refusal becomes the error.
    pub async fn request<T: for<'de> Deserialize<'de>>(
        &mut self,
        request: &Request,
    ) -> anyhow::Result<T> {
        let response = self.call(request).await?;
        if !response.ok {
            anyhow::bail!(
                response
                    .error
                    .unwrap_or_else(|| "the daemon refused the request".into())
            );
        }
        serde_json::from_value(response.result).map_err(|e| {
            anyhow::anyhow!(
                "the daemon's reply does not fit this switchboard ({e}); is the daemon another \
                 version? `switchboard status` says"
            )
        })
    }

    /// Reads the next line as `T`; `None` at end of stream.
    pub async fn next_line<T: for<'de> Deserialize<'de>>(&mut self) -> anyhow::Result<Option<T>> {
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        Ok(Some(serde_json::from_str(&line)?))
    }

    /// Sends a request without reading (for `watch`).
    pub async fn send(&mut self, request: &Request) -> anyhow::Result<()> {
        send(self.stream.get_mut(), request)
            .await
            .map_err(|err| anyhow::anyhow!("cannot send the request to the server: {err}"))
    }
}
