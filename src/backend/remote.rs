//! [`RemoteBackend`]: the [`Backend`] calls sent to the home's daemon over the control socket.
//!
//! One connection per front end, attached ([`crate::control::attach`]): calls go out with an
//! id and may be answered in any order; lifecycle events, commits and tool changes come back
//! on the same connection and are re-published here, so the MCP session code reads them as
//! it would read a local [`Feed`].
//!
//! **When the daemon goes away** (killed, crashed, stopped) a supervisor task starts it again
//! (or finds the one another front end started: one of them wins the home's lock) and
//! re-attaches, re-opening every session under the consumer name it had. Calls in flight at
//! that moment fail as [`BackendError::Unavailable`], except waits: a wait carries on against
//! the new daemon for the rest of its time, or returns empty. Work a session had taken and not
//! yet settled is in the daemon's journal as claimed, so the new daemon queues it again: at
//! least once, never lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResponse, ErrorData, Tool};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::{
    Backend, BackendError, BoxFut, ConfirmRequest, ConsumerView, Feed, ListReply, MessageReply,
    PullReply, PullRequest, Result, SessionInfo, SessionSpec, Settings, StatsReply, WaitReply,
    WaitRequest,
};
use crate::actions::{ActionId, Event, Item};
use crate::app::ReloadReport;
use crate::control::attach::{Attached, Call, Down, ToolList, Up};
use crate::control::{Request, Response};
use crate::daemon::launch::{Launch, connect_or_start};
use crate::inbox::{Appended, SeqWatch};
use crate::message::{NewMessage, Seq};

/// How long a call waits for the daemon to come back before it fails.
const REATTACH_WAIT: Duration = Duration::from_secs(10);

/// The pause between failed attempts to reach or start the daemon.
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// The backend of a front end: the home's daemon, over the control socket.
#[derive(Clone)]
pub struct RemoteBackend {
    inner: Arc<Inner>,
}

struct Inner {
    home: std::path::PathBuf,
    launch: Option<Launch>,
    next_id: AtomicU64,
    /// The live connection and its generation; `None` while re-attaching.
    conn: watch::Sender<Option<Arc<Conn>>>,
    settings: Mutex<Settings>,
    attached: Mutex<Option<Attached>>,
    /// This front end's sessions, by the handle the MCP code holds.
    sessions: Mutex<HashMap<u64, Local>>,
    next_handle: AtomicU64,
    events: broadcast::Sender<Event>,
    committed: SeqWatch,
    tools: watch::Sender<u64>,
    /// Stops the supervisor.
    stop: CancellationToken,
    /// The daemon said it stops on purpose: start it again only on demand.
    stopped_on_purpose: std::sync::atomic::AtomicBool,
    /// A call needs the daemon.
    demand: tokio::sync::Notify,
}

/// One session as this front end knows it.
#[derive(Clone)]
struct Local {
    spec: SessionSpec,
    /// The daemon's id for it on the current connection.
    remote: u64,
    consumer: String,
}

/// One attached connection.
struct Conn {
    out: mpsc::UnboundedSender<Up>,
    pending: Mutex<HashMap<u64, oneshot::Sender<std::result::Result<Value, String>>>>,
    closed: CancellationToken,
}

impl Conn {
    fn fail_all(&self) {
        self.closed.cancel();
        self.pending.lock().unwrap().clear();
    }
}

impl RemoteBackend {
    /// Attaches to the daemon of `home`, starting it with `launch` when none runs (without
    /// `launch`, fails when none runs). Keeps re-attaching until `stop` fires.
    pub async fn attach(
        home: std::path::PathBuf,
        launch: Option<Launch>,
        stop: CancellationToken,
    ) -> anyhow::Result<RemoteBackend> {
        let (conn, _) = watch::channel(None);
        let inner = Arc::new(Inner {
            home,
            launch,
            next_id: AtomicU64::new(1),
            conn,
            settings: Mutex::default(),
            attached: Mutex::default(),
            sessions: Mutex::default(),
            next_handle: AtomicU64::new(1),
            events: broadcast::channel(1024).0,
            committed: SeqWatch::new(0),
            tools: watch::channel(0).0,
            stop,
            stopped_on_purpose: Default::default(),
            demand: Default::default(),
        });
        let first = connect(&inner).await?;
        tokio::spawn(supervise(inner.clone(), first));
        Ok(RemoteBackend { inner })
    }

    /// What the daemon said when this front end last attached.
    pub fn attached(&self) -> Option<Attached> {
        self.inner.attached.lock().unwrap().clone()
    }

    /// Sends `call` and decodes its reply.
    async fn call<T: DeserializeOwned>(&self, call: Call) -> Result<T> {
        let value = self.inner.call(call, None).await?;
        decode(value)
    }
}

fn decode<T: DeserializeOwned>(value: Value) -> Result<T> {
    serde_json::from_value(value)
        .map_err(|e| BackendError::Unavailable(format!("the daemon's reply does not fit: {e}")))
}

impl Inner {
    /// The live connection, waiting up to [`REATTACH_WAIT`] for one.
    async fn live(&self) -> Result<Arc<Conn>> {
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
            _ => Err(BackendError::Unavailable(format!(
                "no daemon answers on {}",
                self.home.join("control.sock").display()
            ))),
        }
    }

    /// Sends a call on the live connection; `cancel` asks the daemon to end it early.
    async fn call(&self, call: Call, cancel: Option<&CancellationToken>) -> Result<Value> {
        let conn = self.live().await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        conn.pending.lock().unwrap().insert(id, tx);
        let gone = || BackendError::Unavailable("the daemon went away during the call".into());
        if conn
            .out
            .send(Up {
                id,
                call: Some(call),
                cancel: false,
            })
            .is_err()
        {
            conn.pending.lock().unwrap().remove(&id);
            return Err(gone());
        }
        let never = CancellationToken::new();
        let cancel = cancel.unwrap_or(&never);
        tokio::pin!(rx);
        let answer = tokio::select! {
            answer = &mut rx => answer,
            _ = cancel.cancelled() => {
                // The daemon ends the call and still replies (empty, or with what it took).
                let _ = conn.out.send(Up { id, call: None, cancel: true });
                rx.await
            }
        };
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(BackendError::Refused(error)),
            Err(_) => Err(gone()),
        }
    }

    /// Sends a call that has no reply (ordered: open/close/settle); dropped when no daemon
    /// is attached, which is what a restarted daemon needs anyway (it replayed its claims).
    fn cast(&self, call: Call) {
        if let Some(conn) = self.conn.borrow().clone() {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let _ = conn.out.send(Up {
                id,
                call: Some(call),
                cancel: false,
            });
        }
    }
}

/// Connects (starting the daemon when allowed), attaches, and starts the connection's tasks.
async fn connect(inner: &Arc<Inner>) -> anyhow::Result<Arc<Conn>> {
    let Some(stream) = connect_or_start(&inner.home, inner.launch.as_ref()).await? else {
        anyhow::bail!(
            "no switchboard daemon runs on {}; start one with `switchboard start`",
            inner.home.display()
        );
    };
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let hello = Request::Attach {
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
    };
    let mut line = serde_json::to_vec(&hello)?;
    line.push(b'\n');
    write.write_all(&line).await?;
    let mut answer = String::new();
    let n = tokio::time::timeout(Duration::from_secs(10), read.read_line(&mut answer))
        .await
        .map_err(|_| anyhow::anyhow!("the daemon did not answer the attach request"))??;
    if n == 0 {
        anyhow::bail!("the daemon closed the connection (it is stopping)");
    }
    let response: Response = serde_json::from_str(&answer)?;
    if !response.ok {
        anyhow::bail!(
            "the daemon refused to attach: {}",
            response.error.unwrap_or_default()
        );
    }
    let attached: Attached = serde_json::from_value(response.result)?;
    *inner.settings.lock().unwrap() = attached.settings.clone();
    *inner.attached.lock().unwrap() = Some(attached);

    let (out, mut out_rx) = mpsc::unbounded_channel::<Up>();
    let conn = Arc::new(Conn {
        out,
        pending: Mutex::default(),
        closed: CancellationToken::new(),
    });
    // Writer: one line per call, in order.
    {
        let conn = conn.clone();
        tokio::spawn(async move {
            loop {
                let up = tokio::select! {
                    _ = conn.closed.cancelled() => break,
                    up = out_rx.recv() => match up { Some(up) => up, None => break },
                };
                let Ok(mut line) = serde_json::to_vec(&up) else {
                    continue;
                };
                line.push(b'\n');
                if write.write_all(&line).await.is_err() {
                    break;
                }
            }
            conn.fail_all();
        });
    }
    // Reader: replies to their callers, pushes to the feed.
    {
        let conn = conn.clone();
        let inner = inner.clone();
        tokio::spawn(async move {
            let mut line = String::new();
            loop {
                line.clear();
                let n = tokio::select! {
                    _ = conn.closed.cancelled() => break,
                    n = read.read_line(&mut line) => n,
                };
                match n {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let down: Down = match serde_json::from_str(&line) {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!(cause = %e, "the daemon sent a line this front end cannot read; ignored");
                        continue;
                    }
                };
                match down {
                    Down::Reply { id, ok, error } => {
                        if let Some(tx) = conn.pending.lock().unwrap().remove(&id) {
                            let _ = tx.send(match error {
                                Some(e) => Err(e),
                                None => Ok(ok),
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

/// Keeps this front end attached: re-opens its sessions on each new connection, and when
/// the connection drops, starts or finds the daemon again.
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

/// Opens every session of this front end on `conn`, keeping its consumer name.
async fn reopen_sessions(inner: &Arc<Inner>, conn: &Arc<Conn>) {
    let sessions: Vec<(u64, Local)> = inner
        .sessions
        .lock()
        .unwrap()
        .iter()
        .map(|(h, l)| (*h, l.clone()))
        .collect();
    for (handle, local) in sessions {
        let mut spec = local.spec.clone();
        spec.resume = Some(local.consumer.clone());
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        conn.pending.lock().unwrap().insert(id, tx);
        let _ = conn.out.send(Up {
            id,
            call: Some(Call::Open { spec }),
            cancel: false,
        });
        if let Ok(Ok(value)) = rx.await
            && let Ok(opened) = serde_json::from_value::<SessionInfo>(value)
            && let Some(l) = inner.sessions.lock().unwrap().get_mut(&handle)
        {
            if l.consumer != opened.consumer {
                tracing::info!(was = %l.consumer, now = %opened.consumer, "session re-opened under a new consumer name");
            }
            l.remote = opened.id;
            l.consumer = opened.consumer;
        }
    }
}

impl RemoteBackend {
    fn remote_session(&self, handle: u64) -> Result<u64> {
        self.inner
            .sessions
            .lock()
            .unwrap()
            .get(&handle)
            .map(|l| l.remote)
            .ok_or_else(|| BackendError::Refused(format!("no open session {handle}")))
    }
}

impl Backend for RemoteBackend {
    fn settings(&self) -> Settings {
        self.inner.settings.lock().unwrap().clone()
    }

    fn open(&self, spec: SessionSpec) -> BoxFut<'_, Result<SessionInfo>> {
        Box::pin(async move {
            let opened: SessionInfo = self.call(Call::Open { spec: spec.clone() }).await?;
            let handle = self.inner.next_handle.fetch_add(1, Ordering::Relaxed);
            self.inner.sessions.lock().unwrap().insert(
                handle,
                Local {
                    spec,
                    remote: opened.id,
                    consumer: opened.consumer.clone(),
                },
            );
            Ok(SessionInfo {
                id: handle,
                consumer: opened.consumer,
            })
        })
    }

    fn close(&self, session: u64) {
        if let Some(local) = self.inner.sessions.lock().unwrap().remove(&session) {
            self.inner.cast(Call::Close {
                session: local.remote,
            });
        }
    }

    fn ensure_consumer(&self, name: String) -> BoxFut<'_, Result<()>> {
        Box::pin(async move { self.call(Call::EnsureConsumer { name }).await })
    }

    fn wait(
        &self,
        request: WaitRequest,
        cancel: CancellationToken,
    ) -> BoxFut<'_, Result<WaitReply>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_millis(request.timeout_ms);
            loop {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                let session = self.remote_session(request.session)?;
                let call = Call::Wait {
                    request: WaitRequest {
                        session,
                        timeout_ms: remaining.as_millis() as u64,
                        ..request.clone()
                    },
                };
                match self.inner.call(call, Some(&cancel)).await {
                    Ok(value) => return decode(value),
                    Err(BackendError::Unavailable(why)) => {
                        // The daemon went away mid-wait: carry on against the next one for
                        // the rest of the time, or return empty.
                        if cancel.is_cancelled() || remaining.is_zero() {
                            return Ok(WaitReply::default());
                        }
                        tracing::debug!(%why, "wait interrupted; waiting for the daemon to come back");
                        let back = tokio::select! {
                            _ = cancel.cancelled() => return Ok(WaitReply::default()),
                            _ = tokio::time::sleep_until(deadline) => return Ok(WaitReply::default()),
                            live = self.inner.live() => live,
                        };
                        if back.is_err() {
                            return Ok(WaitReply::default());
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        })
    }

    fn settle(&self, claims: Vec<ActionId>, delivered: bool, why: String) {
        self.inner.cast(Call::Settle {
            claims,
            delivered,
            why,
        });
    }

    fn pull(&self, request: PullRequest) -> BoxFut<'_, Result<PullReply>> {
        Box::pin(async move { self.call(Call::Pull { request }).await })
    }

    fn list(&self, channel: Option<String>, limit: usize) -> BoxFut<'_, Result<ListReply>> {
        Box::pin(async move { self.call(Call::List { channel, limit }).await })
    }

    fn ack(&self, consumer: String) -> BoxFut<'_, Result<ConsumerView>> {
        Box::pin(async move { self.call(Call::Ack { consumer }).await })
    }

    fn confirm(&self, mut request: ConfirmRequest) -> BoxFut<'_, Result<Option<Item>>> {
        Box::pin(async move {
            if let Some(handle) = request.claim_for {
                request.claim_for = Some(self.remote_session(handle)?);
            }
            self.call(Call::Confirm { request }).await
        })
    }

    fn message(&self, seq: Seq) -> BoxFut<'_, Result<MessageReply>> {
        Box::pin(async move { self.call(Call::Message { seq }).await })
    }

    fn pause(&self, paused: bool) -> BoxFut<'_, Result<bool>> {
        Box::pin(async move { self.call(Call::Pause { paused }).await })
    }

    fn reload(&self) -> BoxFut<'_, Result<ReloadReport>> {
        Box::pin(async move { self.call(Call::Reload).await })
    }

    fn rules(&self) -> BoxFut<'_, Result<Vec<Value>>> {
        Box::pin(async move { self.call(Call::Rules).await })
    }

    fn stats(&self, consumer: Option<String>) -> BoxFut<'_, Result<StatsReply>> {
        Box::pin(async move { self.call(Call::Stats { consumer }).await })
    }

    fn append(
        &self,
        messages: Vec<NewMessage>,
        source: String,
    ) -> BoxFut<'_, Result<Vec<Appended>>> {
        Box::pin(async move { self.call(Call::Append { messages, source }).await })
    }

    fn subscribe(&self) -> Feed {
        Feed {
            events: self.inner.events.subscribe(),
            committed: self.inner.committed.subscribe(),
            tools: self.inner.tools.subscribe(),
        }
    }

    fn upstream_tools(&self) -> BoxFut<'_, Result<Vec<Tool>>> {
        Box::pin(async move {
            let list: ToolList = self.call(Call::UpstreamTools).await?;
            Ok(list.tools)
        })
    }

    fn call_upstream(
        &self,
        request: CallToolRequestParams,
    ) -> BoxFut<'_, Option<std::result::Result<CallToolResponse, ErrorData>>> {
        Box::pin(async move {
            let value: Value = match self.call(Call::CallUpstream { request }).await {
                Ok(v) => v,
                Err(e) => return Some(Err(ErrorData::internal_error(e.to_string(), None))),
            };
            if value.is_null() {
                return None;
            }
            if let Some(error) = value.get("error") {
                return Some(Err(serde_json::from_value(error.clone()).unwrap_or_else(
                    |e| ErrorData::internal_error(format!("unreadable upstream error: {e}"), None),
                )));
            }
            Some(
                serde_json::from_value::<rmcp::model::CallToolResult>(value["ok"].clone())
                    .map(CallToolResponse::Complete)
                    .map_err(|e| {
                        ErrorData::internal_error(format!("unreadable upstream result: {e}"), None)
                    }),
            )
        })
    }
}
