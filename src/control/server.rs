//! The control socket, the daemon's side: a Unix socket in the home (`control.sock`, 0600)
//! that the operator CLI and the MCP front ends connect to ([`super::wire`] has the lines).
//!
//! Each connection says hello first; then it carries many calls at once, answered in whatever
//! order they finish, and, when it asked, the daemon's pushes between them. The connection is
//! its sessions' lease: the sessions it opened close when it goes away, so that the work they
//! claimed and did not settle goes back to the queue. Opening, closing and settling are applied
//! in the order they arrive, so a `settle` that follows a wait's reply is never overtaken by the
//! `close` after it. Every line gets an answer: a call its reply, anything else an error reply
//! (with the line's id, or [`NO_ID`] when it names none: not JSON, or no `id`); a line that
//! cannot be read (over [`super::wire::MAX_LINE`]) is answered, then the connection closed.
//!
//! Limits, so that neither a stuck client nor a crowd of front ends locks the operator out:
//! at most [`MAX_HANDSHAKES`] connections may be between connect and hello, and each must say
//! hello within [`HELLO_TIMEOUT`]; front ends and operator commands have separate room
//! ([`MAX_FRONT_ENDS`], [`MAX_OPERATORS`]); a client that finds no room is told why and the
//! connection is closed. Every line the daemon writes must be taken within
//! [`super::wire::WRITE_TIMEOUT`].
//!
//! The socket file is the daemon's for as long as it holds the home's lock: deleted (a cleaner
//! of stale sockets, a careless `rm`), it is bound again within [`SOCKET_CHECK_EVERY`], so front
//! ends and the CLI find the daemon again instead of failing to start a second one. A file
//! another process put there is left alone. At shutdown the socket is removed if it is still
//! this daemon's.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::BufReader;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::wire::{
    Down, Greeting, Hello, Reply, Role, Up, Welcome, mismatch, read_line, write_line, write_lines,
};
use super::{ApiError, Call, Ctx, DaemonListeners, Local, PROTOCOL};
use crate::actions::Event;
use crate::duration::Backoff;
use crate::home::HomeLock;

/// The most connections between connect and hello.
pub const MAX_HANDSHAKES: usize = 64;

/// The most MCP front ends attached at once (host windows).
pub const MAX_FRONT_ENDS: usize = 256;

/// The most operator connections at once (CLI commands, `watch` streams), apart from the
/// front ends, so that `switchboard stop` always finds room.
pub const MAX_OPERATORS: usize = 32;

/// How long a client may take to say hello after connecting.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// The most lines a connection's writer puts in one write.
const WRITE_BATCH: usize = 64;

/// The id of the reply to a line that named none (it is not JSON, or has no `id`); clients
/// number their calls from 1.
pub const NO_ID: u64 = 0;

/// How often the daemon checks that its socket file is still there.
pub const SOCKET_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The sessions one connection opened, by the connection's own handle for each.
#[derive(Debug, Default)]
pub struct Sessions(Mutex<HashMap<u64, u64>>);

impl Sessions {
    /// The core's id for `handle`.
    pub fn get(&self, handle: u64) -> Option<u64> {
        self.0.lock().unwrap().get(&handle).copied()
    }

    /// Records `handle` → `id`; returns the id `handle` stood for before, if any.
    pub fn insert(&self, handle: u64, id: u64) -> Option<u64> {
        self.0.lock().unwrap().insert(handle, id)
    }

    /// Forgets `handle`; returns its id.
    pub fn remove(&self, handle: u64) -> Option<u64> {
        self.0.lock().unwrap().remove(&handle)
    }

    fn drain(&self) -> Vec<u64> {
        self.0.lock().unwrap().drain().map(|(_, id)| id).collect()
    }
}

/// Binds the socket (replacing a stale one), 0600.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// The room on the socket.
struct Room {
    handshakes: Arc<Semaphore>,
    front_ends: Arc<Semaphore>,
    operators: Arc<Semaphore>,
    listeners: DaemonListeners,
    /// The daemon's tasks: each connection, its writer and its feed.
    tasks: TaskTracker,
}

/// Accepts connections on `listener`, bound at `path`, until the daemon shuts down; binds the
/// socket again if its file is deleted while `lock` still holds the home. Connections run on
/// `tasks`.
pub async fn serve(
    local: Local,
    path: PathBuf,
    mut listener: UnixListener,
    lock: Arc<HomeLock>,
    listeners: DaemonListeners,
    tasks: TaskTracker,
) {
    let room = Arc::new(Room {
        handshakes: Arc::new(Semaphore::new(MAX_HANDSHAKES)),
        front_ends: Arc::new(Semaphore::new(MAX_FRONT_ENDS)),
        operators: Arc::new(Semaphore::new(MAX_OPERATORS)),
        listeners,
        tasks: tasks.clone(),
    });
    let shutdown = local.shutdown().clone();
    let mut ours = inode(&path);
    let mut check = tokio::time::interval(SOCKET_CHECK_EVERY);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rebind_failed = false;
    // Out of file descriptors, say: wait before the next accept, longer while it lasts.
    let mut accept_retry = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
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
                Ok((stream, _)) => {
                    accept_retry.reset();
                    stream
                }
                Err(err) => {
                    let wait = accept_retry.next();
                    tracing::warn!(cause = %err, "control socket accept failed; retrying in {wait:?}");
                    tokio::time::sleep(wait).await;
                    continue;
                }
            },
        };
        let Ok(handshake) = room.handshakes.clone().try_acquire_owned() else {
            // The answer fits any socket buffer: it never waits for the client.
            let busy = Greeting::Refused {
                message: format!(
                    "the control socket is busy: {MAX_HANDSHAKES} connections have not said \
                     hello yet; retry in a few seconds"
                ),
            };
            let mut line = serde_json::to_vec(&busy).unwrap_or_default();
            line.push(b'\n');
            let _ = stream.try_write(&line);
            continue;
        };
        let (local, room) = (local.clone(), room.clone());
        tasks.spawn(async move {
            if let Err(err) = handle(local, stream, room, handshake).await {
                tracing::debug!(cause = %err, "control connection ended");
            }
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

/// The first line, as any build's client sends it.
#[derive(Deserialize)]
struct FirstLine {
    hello: Option<Hello>,
    /// The protocol 1 CLI's request (`{"cmd": "attach", ...}`).
    cmd: Option<String>,
    /// Protocol 1's front end sent its build here.
    version: Option<String>,
}

/// Says hello, finds room, then serves the connection.
async fn handle(
    local: Local,
    stream: UnixStream,
    room: Arc<Room>,
    handshake: tokio::sync::OwnedSemaphorePermit,
) -> std::io::Result<()> {
    let peer = stream
        .peer_cred()
        .ok()
        .and_then(|c| c.pid())
        .and_then(|pid| u32::try_from(pid).ok());
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut line = Vec::new();
    let got = tokio::time::timeout(HELLO_TIMEOUT, read_line(&mut read, &mut line)).await;
    let refuse = |message: String| Greeting::Refused { message };
    let hello = match got {
        Err(_) => Err(refuse(format!(
            "no hello within {}s; closing",
            HELLO_TIMEOUT.as_secs()
        ))),
        Ok(Err(e)) => Err(refuse(format!("cannot read the hello: {e}"))),
        Ok(Ok(false)) => return Ok(()),
        Ok(Ok(true)) => match serde_json::from_slice::<FirstLine>(&line) {
            Ok(FirstLine {
                hello: Some(hello), ..
            }) => Ok(hello),
            Ok(FirstLine {
                cmd: Some(_),
                version,
                ..
            }) => {
                // A client of protocol 1 reads `{"ok": false, "error": ...}`.
                let message = mismatch(PROTOCOL, 1, version.as_deref().unwrap_or("older"), true);
                let old = serde_json::json!({"ok": false, "error": message});
                return write_line(&mut write, &old).await;
            }
            Ok(_) => Err(refuse(
                "the first line must be a hello (`{\"hello\": {...}}`); closing".into(),
            )),
            Err(e) => Err(refuse(format!(
                "the first line is not a hello: {e}; closing"
            ))),
        },
    };
    drop(handshake);
    let hello = match hello {
        Ok(hello) => hello,
        Err(refused) => return write_line(&mut write, &refused).await,
    };
    if hello.protocol != PROTOCOL {
        let message = mismatch(PROTOCOL, hello.protocol, &hello.version, true);
        tracing::warn!(client = hello.pid, "{message}");
        return write_line(&mut write, &refuse(message)).await;
    }
    let slots = match hello.role {
        Role::FrontEnd => &room.front_ends,
        Role::Operator => &room.operators,
    };
    let Ok(_slot) = slots.clone().try_acquire_owned() else {
        let message = match hello.role {
            Role::FrontEnd => format!(
                "the daemon serves {MAX_FRONT_ENDS} MCP front ends already; close host windows \
                 you do not use, or run a second home (`--home`)"
            ),
            Role::Operator => format!(
                "the control socket is busy: {MAX_OPERATORS} operator commands are connected; \
                 retry, or stop the `{}` commands you do not need",
                crate::home::command("watch")
            ),
        };
        tracing::warn!(client = hello.pid, "{message}");
        return write_line(&mut write, &refuse(message)).await;
    };
    if hello.version != env!("CARGO_PKG_VERSION") {
        tracing::debug!(
            client = hello.pid,
            version = %hello.version,
            "a client of another build speaks the same control protocol"
        );
    }
    let welcome = Greeting::Welcome(Welcome {
        protocol: PROTOCOL,
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        settings: local.settings(),
        listeners: room.listeners.clone(),
    });
    write_line(&mut write, &welcome).await?;
    connection(local, read, write, hello, peer, &room.tasks).await;
    Ok(())
}

/// Serves one connection until its client hangs up or the daemon stops; its writer and feed
/// run on `tasks` and end with it. Its calls run on a tracker of its own, which it waits for.
async fn connection(
    local: Local,
    mut read: BufReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
    hello: Hello,
    peer: Option<u32>,
    tasks: &TaskTracker,
) {
    let shutdown = local.shutdown().clone();
    let (tx, rx) = mpsc::channel::<Down>(1024);
    let gone = CancellationToken::new();
    let writer = tasks.spawn(write_all(write, rx, gone.clone()));
    let feed = hello.feed.then(|| {
        tasks.spawn(forward_feed(
            local.clone(),
            hello.suppressions,
            hello.role == Role::FrontEnd,
            tx.clone(),
            gone.clone(),
        ))
    });
    let sessions: Arc<Sessions> = Arc::default();
    let in_flight: Arc<Mutex<HashMap<u64, CancellationToken>>> = Arc::default();
    let calls = TaskTracker::new();
    let mut line = Vec::new();
    loop {
        let got = tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = tx.send(Down::Stopping).await;
                break;
            }
            _ = gone.cancelled() => break,
            got = read_line(&mut read, &mut line) => got,
        };
        match got {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                // Said (with the id of a line that named none), then the connection ends: the
                // rest of an overlong line cannot be told from the next one.
                tracing::debug!(cause = %e, "control connection: bad line; hanging up");
                let error = ApiError::Protocol {
                    message: format!("cannot read the line: {e}; closing"),
                };
                let _ = tx.send(refusal(NO_ID, error)).await;
                break;
            }
        }
        let (id, call) = match read_up(&line) {
            Ok(Line::Call(id, call)) => (id, *call),
            Ok(Line::Cancel(id)) => {
                if let Some(token) = in_flight.lock().unwrap().remove(&id) {
                    token.cancel();
                }
                continue;
            }
            Err((id, error)) => {
                let _ = tx.send(refusal(id, error)).await;
                continue;
            }
        };
        if call.is_ordered() {
            let cx = Ctx {
                local: &local,
                cancel: CancellationToken::new(),
                sessions: Some(&sessions),
                peer,
            };
            let done = call.apply(&cx).await;
            let _ = tx.send(reply(id, done)).await;
            continue;
        }
        let cancel = CancellationToken::new();
        in_flight.lock().unwrap().insert(id, cancel.clone());
        let (local, tx, in_flight, sessions) = (
            local.clone(),
            tx.clone(),
            in_flight.clone(),
            sessions.clone(),
        );
        calls.spawn(async move {
            let cx = Ctx {
                local: &local,
                cancel,
                sessions: Some(&sessions),
                peer,
            };
            let done = call.apply(&cx).await;
            in_flight.lock().unwrap().remove(&id);
            let _ = tx.send(reply(id, done)).await;
        });
    }
    // The client is gone (or the daemon stops): its waits return, then its sessions close,
    // which releases whatever they had claimed and not settled.
    for (_, token) in in_flight.lock().unwrap().drain() {
        token.cancel();
    }
    calls.close();
    calls.wait().await;
    for id in sessions.drain() {
        local_close(&local, id);
    }
    if let Some(feed) = feed {
        feed.abort();
    }
    drop(tx);
    let _ = writer.await;
}

/// Writes what goes down to the client until the connection's last sender is dropped or a write
/// fails; then `gone` fires. What is queued when the writer wakes goes out in one write: a
/// wait's reply and the events around it cost the client one read, not one each.
async fn write_all(
    mut write: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Down>,
    gone: CancellationToken,
) {
    let mut lines = Vec::new();
    while let Some(first) = rx.recv().await {
        lines.push(first);
        while lines.len() < WRITE_BATCH
            && let Ok(next) = rx.try_recv()
        {
            lines.push(next);
        }
        if write_lines(&mut write, &lines).await.is_err() {
            break;
        }
        lines.clear();
    }
    gone.cancel();
}

/// Closes the core's session `id` (a connection that went away).
fn local_close(local: &Local, id: u64) {
    let _ = local.apply_now(super::ops::Close { session: id });
}

/// What a line asks.
enum Line {
    /// Call `id`.
    Call(u64, Box<Call>),
    /// Cancel call `id`.
    Cancel(u64),
}

/// Reads a line: a call or a cancel, or the error it gets, with its id ([`NO_ID`] when it names
/// none).
fn read_up(line: &[u8]) -> Result<Line, (u64, ApiError)> {
    let up: Up = serde_json::from_slice(line).map_err(|e| {
        #[derive(Deserialize)]
        struct JustId {
            id: u64,
        }
        let id = serde_json::from_slice::<JustId>(line).map_or(NO_ID, |j| j.id);
        tracing::debug!(cause = %e, id, "control connection sent a line that is not a call");
        let message = format!("a line that is not a call: {e}");
        (id, ApiError::Protocol { message })
    })?;
    if up.cancel {
        return Ok(Line::Cancel(up.id));
    }
    let Some(raw) = up.call else {
        let message = "a line with neither a `call` nor `\"cancel\": true`".to_string();
        return Err((up.id, ApiError::Protocol { message }));
    };
    read_call(&raw)
        .map(|call| Line::Call(up.id, Box::new(call)))
        .map_err(|error| (up.id, error))
}

/// Reads a call; a call this build does not know, or whose fields do not fit, is an error that
/// names it.
fn read_call(raw: &RawValue) -> Result<Call, ApiError> {
    match serde_json::from_str::<Call>(raw.get()) {
        Ok(call) if !call.is_remote() => Err(ApiError::refused(
            super::RefusalCode::NotAllowed,
            format!(
                "`{}` is the daemon's own call; it is not served on the control socket",
                call.name()
            ),
        )),
        Ok(call) => Ok(call),
        Err(e) => {
            #[derive(Deserialize)]
            struct Named {
                op: Option<String>,
            }
            let op = serde_json::from_str::<Named>(raw.get())
                .ok()
                .and_then(|n| n.op);
            match op {
                Some(op) if !Call::NAMES.contains(&op.as_str()) => Err(ApiError::UnknownCall {
                    call: op,
                    protocol: PROTOCOL,
                }),
                Some(op) => Err(ApiError::Protocol {
                    message: format!("the call `{op}` does not fit this daemon's protocol: {e}"),
                }),
                None => Err(ApiError::Protocol {
                    message: format!("a call without an `op`: {e}"),
                }),
            }
        }
    }
}

fn reply(id: u64, done: Result<Box<RawValue>, ApiError>) -> Down {
    match done {
        Ok(ok) => Down::Reply(Reply {
            id,
            ok: Some(ok),
            error: None,
        }),
        Err(error) => refusal(id, error),
    }
}

fn refusal(id: u64, error: ApiError) -> Down {
    Down::Reply(Reply {
        id,
        ok: None,
        error: Some(error),
    })
}

/// Forwards transitions, commits, tool changes (and suppressions and reloads, for `watch`)
/// until the client is gone.
///
/// A front end is sent only the transitions it acts on ([`for_front_ends`]): with N sessions
/// attached, each wake-up makes N `delivered` events, and sending them all to every front end
/// cost N² lines, written, read and parsed, while the wait replies were on their way.
async fn forward_feed(
    local: Local,
    suppressions: bool,
    front_end: bool,
    tx: mpsc::Sender<Down>,
    gone: CancellationToken,
) {
    let mut feed = local.subscribe();
    feed.tools.mark_unchanged();
    let mut suppressed =
        suppressions.then(|| local.core().components().metrics.suppressions.subscribe());
    let mut reloads = suppressions.then(|| local.reloads());
    loop {
        let down = tokio::select! {
            _ = gone.cancelled() => return,
            event = feed.events.recv() => match event {
                Ok(event) if front_end && !for_front_ends(&event) => continue,
                Ok(event) => Down::Event(event),
                Err(RecvError::Lagged(n)) => {
                    tracing::debug!(skipped = n, "control connection lagged; the wait tool still has every item");
                    continue;
                }
                Err(RecvError::Closed) => return,
            },
            changed = feed.committed.changed() => {
                if changed.is_err() { return }
                Down::Committed(feed.committed.borrow_and_update())
            }
            changed = feed.tools.changed() => {
                if changed.is_err() { return }
                Down::ToolsChanged(*feed.tools.borrow_and_update())
            }
            s = async {
                match suppressed.as_mut() {
                    Some(w) => w.rx.recv().await,
                    None => std::future::pending().await,
                }
            } => match s {
                Ok(s) => Down::Suppressed(s),
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            },
            r = async {
                match reloads.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => match r {
                Ok(r) => Down::Reloaded(r),
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            },
        };
        if tx.send(down).await.is_err() {
            return;
        }
    }
}

/// Whether a front end acts on `event`: its push (queued items, confirms that closed), its
/// permission relay and its elicitation forms (confirms answered, expired, resolved, relayed
/// requests ended). The rest is for `watch` and the daemon's own parts.
fn for_front_ends(event: &Event) -> bool {
    match event {
        Event::Queued { .. }
        | Event::Answered { .. }
        | Event::Expired { .. }
        | Event::Resolved { .. }
        | Event::Ended { .. } => true,
        Event::Claimed { .. }
        | Event::Delivered { .. }
        | Event::Released { .. }
        | Event::ExecQueued { .. }
        | Event::Running { .. }
        | Event::Finished { .. }
        | Event::Dropped { .. } => false,
    }
}
