//! [`Remote`]: the operations of a front end (`switchboard serve`), sent to the home's daemon
//! over the control socket.
//!
//! One connection per front end: calls go out with an id and may be answered in any order;
//! lifecycle events, commits and tool changes come back on the same connection and are
//! re-published here as a [`Feed`], so the MCP session code reads them as it would read a
//! local one. Every call has a deadline ([`super::Op::deadline`]): a daemon that does not
//! answer in time is an error the agent reads, never a hang.
//!
//! **When the daemon goes away** (killed, crashed, stopped) a supervisor task starts it again
//! (or finds the one another front end started: one of them wins the home's lock) and
//! re-attaches, re-opening every session under the handle and consumer name it had. Calls in
//! flight at that moment fail as [`ApiError::Unavailable`], except waits: a wait carries on
//! against the new daemon for the rest of its time, or returns empty. Work a session had taken
//! and not yet settled is in the daemon's journal as claimed, so the new daemon queues it
//! again: at least once, never lost.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::io::BufReader;
use tokio::net::UnixStream;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::actions::Event;
use crate::control::ops::SessionSpec;
use crate::control::ops::{Close, Open, SessionInfo, Wait, WaitReply};
use crate::control::wire::{
    Down, Greeting, Hello, Role, Up, Welcome, mismatch, read_line, write_line,
};
use crate::control::{ApiError, Feed, FrontendSettings, Op, PROTOCOL};
use crate::inbox::SeqWatch;

/// How long a call waits for the daemon to come back before it fails.
const REATTACH_WAIT: Duration = Duration::from_secs(10);

/// The pause between failed attempts to reach or start the daemon.
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// How long the daemon may take to answer a hello.
const WELCOME_TIMEOUT: Duration = Duration::from_secs(10);

/// A boxed future of a connection to the daemon.
pub type Connecting = Pin<Box<dyn Future<Output = anyhow::Result<Option<UnixStream>>> + Send>>;

/// How a front end reaches its daemon: connects to the home's socket, starting the daemon when
/// none answers (the daemon layer provides it); `None` when none runs and none may be started.
pub type Connector = Arc<dyn Fn() -> Connecting + Send + Sync>;

/// The connection ended before the daemon answered the hello: a daemon that is stopping, or
/// one that just started and replaced its socket. Worth one more try; a refusal is not.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HelloLost(String);

/// Says hello on `stream`; the daemon's welcome, or why it refused.
pub async fn greet(
    stream: UnixStream,
    role: Role,
    feed: bool,
    suppressions: bool,
) -> anyhow::Result<(
    Welcome,
    BufReader<tokio::net::unix::OwnedReadHalf>,
    tokio::net::unix::OwnedWriteHalf,
)> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let hello = serde_json::json!({"hello": Hello {
        protocol: PROTOCOL,
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        role,
        feed,
        suppressions,
    }});
    // A daemon with no room answers before it reads: its answer is heard even when the hello
    // could not be sent. (Errors here are sentences, not I/O errors: a broken pipe on the
    // socket must not pass for one on stdout, which `main` takes quietly.)
    let sent = write_line(&mut write, &hello).await;
    let mut line = Vec::new();
    let got = tokio::time::timeout(WELCOME_TIMEOUT, read_line(&mut read, &mut line))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "the daemon did not answer the hello within {}s",
                WELCOME_TIMEOUT.as_secs()
            )
        })?;
    match (got, sent) {
        (Ok(true), _) => {}
        (_, Err(e)) => return Err(HelloLost(format!("cannot say hello to the daemon: {e}")).into()),
        (Ok(false), Ok(())) => {
            return Err(
                HelloLost("the daemon closed the connection (it is stopping)".into()).into(),
            );
        }
        (Err(e), Ok(())) => {
            return Err(
                HelloLost(format!("cannot read the daemon's answer to the hello: {e}")).into(),
            );
        }
    }
    match serde_json::from_slice::<Greeting>(&line) {
        Ok(Greeting::Welcome(welcome)) if welcome.protocol == PROTOCOL => {
            Ok((welcome, read, write))
        }
        Ok(Greeting::Welcome(welcome)) => anyhow::bail!(
            "{}",
            mismatch(PROTOCOL, welcome.protocol, &welcome.version, false)
        ),
        Ok(Greeting::Refused { message }) => anyhow::bail!("{message}"),
        Err(_) => {
            // A daemon of protocol 1 answers `{"ok": false, "error": "bad request: ..."}`.
            #[derive(serde::Deserialize)]
            struct Old {
                ok: bool,
            }
            if serde_json::from_slice::<Old>(&line).is_ok_and(|o| !o.ok) {
                anyhow::bail!("{}", mismatch(PROTOCOL, 1, "older", false));
            }
            anyhow::bail!(
                "the daemon answered the hello with a line this switchboard cannot read: {}",
                String::from_utf8_lossy(&line).trim()
            )
        }
    }
}

/// The operations of a front end, over the control socket.
#[derive(Clone)]
pub struct Remote {
    inner: Arc<Inner>,
}

struct Inner {
    home: PathBuf,
    connector: Connector,
    next_id: AtomicU64,
    /// The live connection; `None` while re-attaching.
    conn: watch::Sender<Option<Arc<Conn>>>,
    welcome: Mutex<Option<Welcome>>,
    /// This front end's sessions, by handle, to re-open on a restarted daemon.
    sessions: Mutex<BTreeMap<u64, (SessionSpec, String)>>,
    next_handle: AtomicU64,
    events: broadcast::Sender<Event>,
    committed: SeqWatch,
    tools: watch::Sender<u64>,
    /// Stops the supervisor.
    stop: CancellationToken,
    /// The daemon said it stops on purpose: start it again only on demand.
    stopped_on_purpose: AtomicBool,
    /// A call needs the daemon.
    demand: tokio::sync::Notify,
    /// Every task of this front end's connection, so that the front end stops them all.
    tasks: tokio_util::task::TaskTracker,
}

/// A reply, or why there is none.
type Answer = Result<Box<RawValue>, ApiError>;

/// One attached connection.
struct Conn {
    out: mpsc::UnboundedSender<Up>,
    pending: Mutex<std::collections::HashMap<u64, oneshot::Sender<Answer>>>,
    closed: CancellationToken,
}

impl Conn {
    fn fail_all(&self) {
        self.closed.cancel();
        self.pending.lock().unwrap().clear();
    }
}

impl Remote {
    /// Attaches to the daemon of `home` through `connector`. Keeps re-attaching until `stop`
    /// fires; the supervisor runs on `tasks`.
    pub async fn attach(
        home: PathBuf,
        connector: Connector,
        stop: CancellationToken,
        tasks: &tokio_util::task::TaskTracker,
    ) -> anyhow::Result<Remote> {
        let inner = Arc::new(Inner {
            home,
            connector,
            next_id: AtomicU64::new(1),
            conn: watch::channel(None).0,
            welcome: Mutex::default(),
            sessions: Mutex::default(),
            next_handle: AtomicU64::new(1),
            events: broadcast::channel(1024).0,
            committed: SeqWatch::new(0),
            tools: watch::channel(0).0,
            stop,
            stopped_on_purpose: AtomicBool::new(false),
            demand: Default::default(),
            tasks: tasks.clone(),
        });
        // A daemon this front end just started (or one being replaced) may drop the first
        // connection before it answers: try a few more times before giving up.
        let mut tries = 0;
        let first = loop {
            match connect(&inner).await {
                Ok(conn) => break conn,
                Err(e) if e.is::<HelloLost>() && tries < 5 => {
                    tries += 1;
                    tracing::debug!(cause = %e, "attach: trying again");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        };
        tasks.spawn(supervise(inner.clone(), first));
        Ok(Remote { inner })
    }

    /// What the daemon said when this front end last attached.
    pub fn welcome(&self) -> Option<Welcome> {
        self.inner.welcome.lock().unwrap().clone()
    }

    /// Sends `op` and decodes its reply.
    pub async fn call<O: Op>(&self, op: O) -> Result<O::Reply, ApiError> {
        self.call_until(op, None).await
    }

    /// Sends `op`; `cancel` asks the daemon to end it early (it still replies).
    pub async fn call_until<O: Op>(
        &self,
        op: O,
        cancel: Option<&CancellationToken>,
    ) -> Result<O::Reply, ApiError> {
        let deadline = op.deadline();
        let call: crate::control::Call = op.into();
        let name = call.name();
        let raw = serde_json::value::to_raw_value(&call).map_err(|e| {
            ApiError::refused(
                crate::control::RefusalCode::Failed,
                format!("the call does not encode: {e}"),
            )
        })?;
        let answer = self.inner.call(raw, name, deadline, cancel).await?;
        serde_json::from_str(answer.get()).map_err(|e| ApiError::Protocol {
            message: format!(
                "the daemon's reply to `{name}` does not fit this switchboard ({e}); is the \
                 daemon another build? `{}` says",
                crate::home::command("status")
            ),
        })
    }

    /// Sends an ordered op without waiting for its reply; dropped when no daemon is attached,
    /// which is what a restarted daemon needs anyway (it replayed its claims).
    pub fn cast<O: Op>(&self, op: O) {
        let call: crate::control::Call = op.into();
        let Ok(raw) = serde_json::value::to_raw_value(&call) else {
            return;
        };
        if let Some(conn) = self.inner.conn.borrow().clone() {
            let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
            let _ = conn.out.send(Up {
                id,
                call: Some(raw),
                cancel: false,
            });
        }
    }

    /// Opens a session; it is re-opened under the same handle on a restarted daemon.
    pub async fn open(&self, spec: SessionSpec) -> Result<SessionInfo, ApiError> {
        let handle = self.inner.next_handle.fetch_add(1, Ordering::Relaxed);
        let opened = self
            .call(Open {
                spec: spec.clone(),
                handle: Some(handle),
            })
            .await?;
        self.inner
            .sessions
            .lock()
            .unwrap()
            .insert(handle, (spec, opened.consumer.clone()));
        Ok(opened)
    }

    /// Closes a session.
    pub fn close(&self, handle: u64) {
        if self
            .inner
            .sessions
            .lock()
            .unwrap()
            .remove(&handle)
            .is_some()
        {
            self.cast(Close { session: handle });
        }
    }

    /// A wait that carries on against a restarted daemon for the rest of its time.
    pub async fn wait(
        &self,
        wait: Wait,
        cancel: &CancellationToken,
    ) -> Result<WaitReply, ApiError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait.timeout_ms);
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let op = Wait {
                timeout_ms: remaining.as_millis() as u64,
                ..wait.clone()
            };
            match self.call_until(op, Some(cancel)).await {
                Err(ApiError::Unavailable { message }) => {
                    if let Some(gone) = self.inner.home_gone() {
                        // Not "nothing new": the agent must hear that nothing will come.
                        return Err(gone);
                    }
                    if cancel.is_cancelled() || remaining.is_zero() {
                        return Ok(WaitReply::default());
                    }
                    tracing::debug!(%message, "wait interrupted; waiting for the daemon to come back");
                    let back = tokio::select! {
                        _ = cancel.cancelled() => return Ok(WaitReply::default()),
                        _ = tokio::time::sleep_until(deadline) => return Ok(WaitReply::default()),
                        live = self.inner.live() => live,
                    };
                    if let Err(e) = back {
                        return match self.inner.home_gone() {
                            Some(_) => Err(e),
                            None => Ok(WaitReply::default()),
                        };
                    }
                }
                other => return other,
            }
        }
    }

    /// Transitions, commits and tool changes from now on.
    pub fn subscribe(&self) -> Feed {
        Feed {
            events: self.inner.events.subscribe(),
            committed: self.inner.committed.subscribe(),
            tools: self.inner.tools.subscribe(),
        }
    }

    /// The settings the daemon said front ends follow.
    pub fn settings(&self) -> FrontendSettings {
        self.inner
            .welcome
            .lock()
            .unwrap()
            .as_ref()
            .map(|w| w.settings.clone())
            .unwrap_or_default()
    }
}

impl Inner {
    /// Why no daemon can come back: the home was deleted.
    fn home_gone(&self) -> Option<ApiError> {
        (!self.home.is_dir()).then(|| {
            ApiError::unavailable(format!(
                "the switchboard home {} was deleted, and the daemon stopped with it; nothing \
                 can be delivered until the MCP server is restarted (restart the host, or its \
                 switchboard server) on an existing home",
                self.home.display()
            ))
        })
    }

    /// The live connection, waiting up to [`REATTACH_WAIT`] for one.
    async fn live(&self) -> Result<Arc<Conn>, ApiError> {
        if let Some(current) = self.conn.borrow().clone()
            && !current.closed.is_cancelled()
        {
            return Ok(current);
        }
        if let Some(gone) = self.home_gone() {
            return Err(gone);
        }
        let mut rx = self.conn.subscribe();
        if rx.borrow().is_none() {
            self.demand.notify_one();
        }
        let waited = tokio::time::timeout(REATTACH_WAIT, async {
            loop {
                if let Some(conn) = rx.borrow_and_update().clone()
                    && !conn.closed.is_cancelled()
                {
                    return Some(conn);
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await;
        match waited {
            Ok(Some(conn)) => Ok(conn),
            _ => Err(self.home_gone().unwrap_or_else(|| {
                ApiError::unavailable(format!(
                    "no daemon answers on {}",
                    self.home.join("control.sock").display()
                ))
            })),
        }
    }

    /// Sends a call on the live connection and waits for its reply, at most `deadline`.
    async fn call(
        &self,
        raw: Box<RawValue>,
        name: &'static str,
        deadline: Duration,
        cancel: Option<&CancellationToken>,
    ) -> Answer {
        let never = CancellationToken::new();
        let cancel = cancel.unwrap_or(&never);
        let conn = tokio::select! {
            conn = self.live() => conn?,
            _ = cancel.cancelled() => {
                return Err(ApiError::unavailable("the call was cancelled before it was sent"));
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        conn.pending.lock().unwrap().insert(id, tx);
        let gone = || ApiError::unavailable("the daemon went away during the call");
        if conn
            .out
            .send(Up {
                id,
                call: Some(raw),
                cancel: false,
            })
            .is_err()
        {
            conn.pending.lock().unwrap().remove(&id);
            return Err(gone());
        }
        let timed_out = || {
            conn.pending.lock().unwrap().remove(&id);
            let _ = conn.out.send(Up {
                id,
                call: None,
                cancel: true,
            });
            ApiError::Timeout {
                call: name.to_string(),
                secs: deadline.as_secs(),
            }
        };
        let sleep = tokio::time::sleep(deadline.min(Duration::from_secs(86_400 * 365)));
        tokio::pin!(rx, sleep);
        let answer = tokio::select! {
            answer = &mut rx => answer,
            _ = &mut sleep => return Err(timed_out()),
            _ = cancel.cancelled() => {
                // The daemon ends the call and still replies (empty, or with what it took).
                let _ = conn.out.send(Up { id, call: None, cancel: true });
                tokio::select! {
                    answer = &mut rx => answer,
                    _ = &mut sleep => return Err(timed_out()),
                }
            }
        };
        answer.unwrap_or_else(|_| Err(gone()))
    }
}

/// Connects (starting the daemon when allowed), says hello, and starts the connection's tasks.
async fn connect(inner: &Arc<Inner>) -> anyhow::Result<Arc<Conn>> {
    let Some(stream) = (inner.connector)().await? else {
        anyhow::bail!(
            "no switchboard daemon runs on {}; start one with `{}`",
            inner.home.display(),
            crate::home::command("start")
        );
    };
    let (welcome, mut read, mut write) = greet(stream, Role::FrontEnd, true, false).await?;
    *inner.welcome.lock().unwrap() = Some(welcome);

    let (out, mut out_rx) = mpsc::unbounded_channel::<Up>();
    let conn = Arc::new(Conn {
        out,
        pending: Mutex::default(),
        closed: CancellationToken::new(),
    });
    // Writer: one line per call, in order.
    {
        let conn = conn.clone();
        inner.tasks.spawn(async move {
            loop {
                let up = tokio::select! {
                    _ = conn.closed.cancelled() => break,
                    up = out_rx.recv() => match up { Some(up) => up, None => break },
                };
                if write_line(&mut write, &up).await.is_err() {
                    break;
                }
            }
            conn.fail_all();
        });
    }
    // Reader: replies to their callers, pushes to the feed.
    {
        let conn = conn.clone();
        let inner2 = inner.clone();
        inner.tasks.spawn(async move {
            let inner = inner2;
            let mut line = Vec::new();
            loop {
                let got = tokio::select! {
                    _ = conn.closed.cancelled() => break,
                    got = read_line(&mut read, &mut line) => got,
                };
                if !matches!(got, Ok(true)) {
                    break;
                }
                let down: Down = match serde_json::from_slice(&line) {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!(cause = %e, "the daemon sent a line this front end cannot read; ignored");
                        continue;
                    }
                };
                match down {
                    Down::Reply(reply) => {
                        if let Some(tx) = conn.pending.lock().unwrap().remove(&reply.id) {
                            let _ = tx.send(match (reply.ok, reply.error) {
                                (_, Some(e)) => Err(e),
                                (Some(ok), None) => Ok(ok),
                                // A reply of `null` travels without `ok`.
                                (None, None) => Ok(RawValue::from_string("null".into())
                                    .expect("null is JSON")),
                            });
                        }
                    }
                    Down::Event(event) => {
                        let _ = inner.events.send(event);
                    }
                    Down::Committed(seq) => {
                        inner.committed.replace(seq);
                    }
                    Down::ToolsChanged(_) => {
                        inner.tools.send_modify(|n| *n += 1);
                    }
                    Down::Suppressed(_) | Down::Reloaded(_) => {}
                    Down::Stopping => {
                        inner.stopped_on_purpose.store(true, Ordering::Relaxed);
                    }
                }
            }
            conn.fail_all();
        });
    }
    Ok(conn)
}

/// Keeps this front end attached: re-opens its sessions on each new connection, and when the
/// connection drops, starts or finds the daemon again.
async fn supervise(inner: Arc<Inner>, first: Arc<Conn>) {
    let mut conn = first;
    loop {
        reopen_sessions(&inner, &conn).await;
        inner.conn.send_replace(Some(conn.clone()));
        // The upstream tools may differ on the new daemon.
        inner.tools.send_modify(|n| *n += 1);
        tokio::select! {
            _ = inner.stop.cancelled() => {
                conn.fail_all();
                return;
            }
            _ = conn.closed.cancelled() => {}
        }
        inner.conn.send_replace(None);
        if inner.stopped_on_purpose.swap(false, Ordering::Relaxed) {
            tracing::info!(
                "the switchboard daemon stopped; it starts again when this session next needs it"
            );
            tokio::select! {
                _ = inner.stop.cancelled() => return,
                _ = inner.demand.notified() => {}
            }
        } else {
            tracing::warn!("the switchboard daemon went away; starting it again and re-attaching");
        }
        conn = loop {
            if inner.stop.is_cancelled() {
                return;
            }
            if !inner.home.is_dir() {
                // Never recreate a home someone deleted: that would start a second life of
                // switchboard in an empty directory, silently.
                tracing::error!(
                    home = %inner.home.display(),
                    "the home was deleted; not starting a daemon in its place. Restart the \
                     MCP server (the host) to start afresh"
                );
                tokio::select! {
                    _ = inner.stop.cancelled() => return,
                    _ = tokio::time::sleep(RETRY_EVERY * 4) => continue,
                }
            }
            match connect(&inner).await {
                Ok(conn) => break conn,
                Err(err) => {
                    tracing::warn!("cannot re-attach to the daemon: {err:#}; retrying");
                    tokio::select! {
                        _ = inner.stop.cancelled() => return,
                        _ = tokio::time::sleep(RETRY_EVERY) => {}
                    }
                }
            }
        };
        tracing::info!("re-attached to the switchboard daemon");
    }
}

/// Opens every session of this front end on `conn`, under its handle and consumer name.
async fn reopen_sessions(inner: &Arc<Inner>, conn: &Arc<Conn>) {
    let sessions: Vec<(u64, SessionSpec, String)> = inner
        .sessions
        .lock()
        .unwrap()
        .iter()
        .map(|(h, (spec, consumer))| (*h, spec.clone(), consumer.clone()))
        .collect();
    for (handle, mut spec, consumer) in sessions {
        spec.resume = Some(consumer.clone());
        let call: crate::control::Call = Open {
            spec,
            handle: Some(handle),
        }
        .into();
        let Ok(raw) = serde_json::value::to_raw_value(&call) else {
            continue;
        };
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        conn.pending.lock().unwrap().insert(id, tx);
        let _ = conn.out.send(Up {
            id,
            call: Some(raw),
            cancel: false,
        });
        if let Ok(Ok(raw)) = rx.await
            && let Ok(opened) = serde_json::from_str::<SessionInfo>(raw.get())
            && let Some((_, name)) = inner.sessions.lock().unwrap().get_mut(&handle)
        {
            if *name != opened.consumer {
                tracing::info!(was = %name, now = %opened.consumer, "session re-opened under a new consumer name");
            }
            *name = opened.consumer;
        }
    }
}
