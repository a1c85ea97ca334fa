//! Attached front ends: the daemon's side of a connection that an MCP front end keeps open.
//!
//! After the `attach` request line, the connection carries many calls at once, each a line
//! `{"id": N, "call": {...}}` answered by `{"reply": {"id": N, "result": ...}}` in whatever
//! order they finish, and the daemon pushes `{"event": ...}`, `{"committed": SEQ}` and
//! `{"tools_changed": N}` lines between them. `{"id": N, "cancel": true}` cancels a call in
//! flight (a wait returns empty, having taken nothing).
//!
//! The connection is the front end's lease: the sessions it opened close when it goes away,
//! so that the work they had claimed and not settled goes back to the queue. Opening,
//! closing and settling are applied in the order they arrive, so a `settle` that follows a
//! wait's reply is never overtaken by the `close` after it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use rmcp::model::{CallToolRequestParams, Tool};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{MAX_REQUEST_BYTES, send};
use crate::actions::{ActionId, Event};
use crate::backend::{
    Backend, ConfirmRequest, LocalBackend, PullRequest, SessionSpec, Settings, WaitRequest,
};
use crate::message::{NewMessage, Seq};

/// What the daemon says to a front end that attaches.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Attached {
    /// The daemon's pid.
    pub pid: u32,
    /// The daemon's version (`CARGO_PKG_VERSION`).
    pub version: String,
    /// Settings the front end follows.
    pub settings: Settings,
    /// How the daemon was started: its listeners.
    pub listeners: DaemonListeners,
}

/// The listeners a daemon was asked for, and what became of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonListeners {
    /// The ingest address asked for (`None` = no ingest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingest: Option<String>,
    /// MCP over HTTP asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_http: Option<String>,
}

/// One call of an attached front end.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Call {
    /// Open a session.
    Open {
        /// Who opens it.
        spec: SessionSpec,
    },
    /// Close a session.
    Close {
        /// Its id.
        session: u64,
    },
    /// Make sure a named consumer exists.
    EnsureConsumer {
        /// The consumer.
        name: String,
    },
    /// Take or wait for items.
    Wait {
        /// The wait.
        request: WaitRequest,
    },
    /// Settle claims.
    Settle {
        /// The action ids.
        claims: Vec<ActionId>,
        /// Sent (true) or released.
        delivered: bool,
        /// Why released.
        why: String,
    },
    /// Messages after a cursor.
    Pull {
        /// The pull.
        request: PullRequest,
    },
    /// The newest messages.
    List {
        /// Channel filter.
        channel: Option<String>,
        /// How many.
        limit: usize,
    },
    /// Mark everything read.
    Ack {
        /// The consumer.
        consumer: String,
    },
    /// Answer a confirm.
    Confirm {
        /// The answer.
        request: ConfirmRequest,
    },
    /// One stored message.
    Message {
        /// Its seq.
        seq: Seq,
    },
    /// Pause or resume evaluation.
    Pause {
        /// true = pause.
        paused: bool,
    },
    /// Reload triggers.json.
    Reload,
    /// The live rules.
    Rules,
    /// Stats, with a consumer's position.
    Stats {
        /// The consumer.
        consumer: Option<String>,
    },
    /// Append messages.
    Append {
        /// The messages.
        messages: Vec<NewMessage>,
        /// Counted as from this source.
        source: String,
    },
    /// The upstream tools.
    UpstreamTools,
    /// Forward a call to an upstream tool.
    CallUpstream {
        /// The call.
        request: CallToolRequestParams,
    },
}

/// A line from the front end.
#[derive(Debug, Serialize, Deserialize)]
pub struct Up {
    /// The call's id, chosen by the front end.
    pub id: u64,
    /// The call (absent in a cancel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<Call>,
    /// Cancel call `id`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
}

/// A line from the daemon.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Down {
    /// The answer to call `id`: its result, or why it failed.
    Reply {
        /// The call's id.
        id: u64,
        /// The result.
        #[serde(default, skip_serializing_if = "Value::is_null")]
        ok: Value,
        /// The refusal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A lifecycle transition.
    Event(Event),
    /// A new commit: the newest seq.
    Committed(Seq),
    /// The upstream tools changed.
    ToolsChanged(u64),
    /// The daemon is stopping on purpose (`switchboard stop`, a signal, its lock lost): a
    /// front end starts it again only when it next needs it.
    Stopping,
}

/// The upstream tools as they travel (rmcp's `Tool`).
#[derive(Debug, Serialize, Deserialize)]
pub struct ToolList {
    /// The tools.
    pub tools: Vec<Tool>,
}

/// Serves an attached front end until it hangs up or the daemon stops.
pub(super) async fn serve(
    backend: LocalBackend,
    read: BufReader<OwnedReadHalf>,
    mut write: OwnedWriteHalf,
    hello: Attached,
) -> std::io::Result<()> {
    let shutdown = backend.app().shutdown.clone();
    let (tx, mut rx) = mpsc::channel::<Down>(1024);
    send(
        &mut write,
        &super::Response {
            ok: true,
            result: serde_json::to_value(&hello).unwrap_or_default(),
            error: None,
        },
    )
    .await?;
    let gone = CancellationToken::new();
    let writer = {
        let gone = gone.clone();
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if send(&mut write, &line).await.is_err() {
                    break;
                }
            }
            gone.cancel();
        })
    };
    let feed = tokio::spawn(forward_feed(backend.clone(), tx.clone(), gone.clone()));

    let sessions: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let in_flight: Arc<Mutex<HashMap<u64, CancellationToken>>> = Arc::default();
    let calls = TaskTracker::new();
    let mut lines = read.take(u64::MAX);
    let mut line = Vec::new();
    loop {
        line.clear();
        let got = tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = tx.send(Down::Stopping).await;
                break;
            }
            _ = gone.cancelled() => break,
            got = read_line(&mut lines, &mut line) => got,
        };
        match got {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                tracing::debug!(cause = %e, "attached front end: bad line; hanging up");
                break;
            }
        }
        let up: Up = match serde_json::from_slice(&line) {
            Ok(up) => up,
            Err(e) => {
                tracing::warn!(cause = %e, "attached front end sent a line that is not a call; ignored");
                continue;
            }
        };
        if up.cancel {
            if let Some(token) = in_flight.lock().unwrap().remove(&up.id) {
                token.cancel();
            }
            continue;
        }
        let Some(call) = up.call else { continue };
        // Ordered calls: applied now, in arrival order.
        match call {
            Call::Open { spec } => {
                let opened = backend.open_now(&spec);
                sessions.lock().unwrap().insert(opened.id);
                let _ = tx.send(reply(up.id, Ok(opened))).await;
                continue;
            }
            Call::Close { session } => {
                if sessions.lock().unwrap().remove(&session) {
                    backend.close(session);
                }
                continue;
            }
            Call::Settle {
                claims,
                delivered,
                why,
            } => {
                backend.settle(claims, delivered, why);
                continue;
            }
            call => {
                let cancel = CancellationToken::new();
                in_flight.lock().unwrap().insert(up.id, cancel.clone());
                let (backend, tx, in_flight) = (backend.clone(), tx.clone(), in_flight.clone());
                let id = up.id;
                calls.spawn(async move {
                    let down = run(&backend, id, call, cancel).await;
                    in_flight.lock().unwrap().remove(&id);
                    let _ = tx.send(down).await;
                });
            }
        }
    }
    // The front end is gone (or the daemon stops): its waits return, then its sessions close,
    // which releases whatever they had claimed and not settled.
    for (_, token) in in_flight.lock().unwrap().drain() {
        token.cancel();
    }
    calls.close();
    calls.wait().await;
    for session in sessions.lock().unwrap().drain() {
        backend.close(session);
    }
    feed.abort();
    drop(tx);
    let _ = writer.await;
    Ok(())
}

/// Reads one line of at most [`MAX_REQUEST_BYTES`]; false at end of stream.
async fn read_line(
    read: &mut tokio::io::Take<BufReader<OwnedReadHalf>>,
    line: &mut Vec<u8>,
) -> std::io::Result<bool> {
    read.set_limit(MAX_REQUEST_BYTES as u64 + 1);
    if read.read_until(b'\n', line).await? == 0 {
        return Ok(false);
    }
    if line.len() > MAX_REQUEST_BYTES {
        return Err(std::io::Error::other(format!(
            "a call longer than {MAX_REQUEST_BYTES} bytes"
        )));
    }
    Ok(true)
}

fn reply<T: Serialize>(id: u64, result: crate::backend::Result<T>) -> Down {
    match result {
        Ok(v) => Down::Reply {
            id,
            ok: serde_json::to_value(v).unwrap_or_default(),
            error: None,
        },
        Err(e) => Down::Reply {
            id,
            ok: Value::Null,
            error: Some(e.to_string()),
        },
    }
}

async fn run(backend: &LocalBackend, id: u64, call: Call, cancel: CancellationToken) -> Down {
    match call {
        Call::EnsureConsumer { name } => reply(id, backend.ensure_consumer(name).await),
        Call::Wait { request } => reply(id, backend.wait(request, cancel).await),
        Call::Pull { request } => reply(id, backend.pull(request).await),
        Call::List { channel, limit } => reply(id, backend.list(channel, limit).await),
        Call::Ack { consumer } => reply(id, backend.ack(consumer).await),
        Call::Confirm { request } => reply(id, backend.confirm(request).await),
        Call::Message { seq } => reply(id, backend.message(seq).await),
        Call::Pause { paused } => reply(id, backend.pause(paused).await),
        Call::Reload => reply(id, backend.reload().await),
        Call::Rules => reply(id, backend.rules().await),
        Call::Stats { consumer } => reply(id, backend.stats(consumer).await),
        Call::Append { messages, source } => reply(id, backend.append(messages, source).await),
        Call::UpstreamTools => reply(
            id,
            backend
                .upstream_tools()
                .await
                .map(|tools| ToolList { tools }),
        ),
        Call::CallUpstream { request } => {
            let forwarded = backend.call_upstream(request).await;
            let value = match forwarded {
                None => Value::Null,
                Some(Ok(rmcp::model::CallToolResponse::Complete(result))) => {
                    serde_json::json!({ "ok": result })
                }
                Some(Ok(_)) => serde_json::json!({ "error": rmcp::model::ErrorData::internal_error(
                    "the upstream answered with a task or an input request, which switchboard \
                     does not forward",
                    None,
                ) }),
                Some(Err(error)) => serde_json::json!({ "error": error }),
            };
            reply(id, Ok(value))
        }
        Call::Open { .. } | Call::Close { .. } | Call::Settle { .. } => {
            unreachable!("ordered calls are applied by the reader")
        }
    }
}

/// Forwards transitions, commits and tool changes to the front end until it is gone.
async fn forward_feed(backend: LocalBackend, tx: mpsc::Sender<Down>, gone: CancellationToken) {
    let mut feed = backend.subscribe();
    feed.tools.mark_unchanged();
    loop {
        let down = tokio::select! {
            _ = gone.cancelled() => return,
            event = feed.events.recv() => match event {
                Ok(event) => Down::Event(event),
                Err(RecvError::Lagged(n)) => {
                    tracing::debug!(skipped = n, "attached front end lagged; the wait tool still has every item");
                    continue;
                }
                Err(RecvError::Closed) => return,
            },
            changed = feed.committed.changed() => {
                if changed.is_err() { return }
                let seq = feed.committed.borrow_and_update();
                Down::Committed(seq)
            }
            changed = feed.tools.changed() => {
                if changed.is_err() { return }
                let n = *feed.tools.borrow_and_update();
                Down::ToolsChanged(n)
            }
        };
        if tx.send(down).await.is_err() {
            return;
        }
    }
}
