//! The control socket: how the operator CLI talks to the running server.
//!
//! A Unix socket in the home (`control.sock`, 0600). Each connection sends one
//! JSON request line and reads JSON response lines: one for ordinary commands,
//! a stream of events for `watch` (until the client hangs up).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::app::App;
use crate::delivery::Item;

/// A request from the CLI.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    /// Counters.
    Stats,
    /// Pause or resume evaluation.
    Pause {
        /// true = pause.
        paused: bool,
    },
    /// Reload triggers.json.
    Reload,
    /// The live rules.
    Rules,
    /// Recent messages.
    List {
        /// Channel filter (`alerts/*`).
        channel: Option<String>,
        /// How many.
        limit: usize,
    },
    /// Answer a confirm.
    Confirm {
        /// Action id.
        id: u64,
        /// true = yes.
        approve: bool,
    },
    /// Stream messages and actions.
    Watch,
    /// Append messages to the inbox (`switchboard send`); answers once they are durable.
    Send {
        /// The messages, in order.
        messages: Vec<crate::message::NewMessage>,
    },
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

/// Accepts connections until the app shuts down.
pub async fn serve(app: Arc<App>, listener: UnixListener) {
    loop {
        let stream = tokio::select! {
            _ = app.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::warn!(cause = %err, "control socket accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let app = app.clone();
        app.tasks.clone().spawn(async move {
            if let Err(err) = handle(app, stream).await {
                tracing::debug!(cause = %err, "control connection ended");
            }
        });
    }
}

async fn handle(app: Arc<App>, stream: UnixStream) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    let request: Request = match serde_json::from_str(&line) {
        Ok(r) => r,
        Err(e) => return send(&mut write, &Response::err(format!("bad request: {e}"))).await,
    };
    let response = match request {
        Request::Stats => Response::ok(app.stats()),
        Request::Pause { paused } => {
            app.set_paused(paused);
            Response::ok(serde_json::json!({ "paused": paused }))
        }
        Request::Reload => {
            let report = app.reload_rules().await;
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
        Request::Rules => Response::ok(crate::rules::summaries(&app.rules())),
        Request::List { channel, limit } => {
            Response::ok(app.inbox.recent(channel.as_deref(), limit))
        }
        Request::Confirm { id, approve } => match app.hub.confirm(id, approve, None, Utc::now()) {
            Ok(item) => Response::ok(item),
            Err(e) => Response::err(e),
        },
        Request::Watch => return watch(app, write).await,
        Request::Send { messages } => {
            let n = messages.len() as u64;
            match app.inbox.append_batch(messages).await {
                Ok(appended) => {
                    app.metrics.ingested("cli", n);
                    Response::ok(appended)
                }
                Err(e) => Response::err(format!("not stored: {e}")),
            }
        }
    };
    send(&mut write, &response).await
}

/// A line of `watch`: a message or an action.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WatchEvent {
    /// A committed message.
    Message(crate::message::Message),
    /// A deliverable action.
    Action(Item),
}

async fn watch(app: Arc<App>, mut write: tokio::net::unix::OwnedWriteHalf) -> std::io::Result<()> {
    let mut committed = app.inbox.committed();
    let mut items = app.hub.subscribe();
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
        }
    }
}

async fn send(
    write: &mut (impl AsyncWriteExt + Unpin),
    value: &impl Serialize,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await
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
                "no switchboard is running on {}: cannot connect to {}: {e}; start one with `switchboard serve`",
                home.display(),
                path.display()
            ),
        }
    }

    /// Sends a request and reads the first response line.
    pub async fn call(&mut self, request: &Request) -> anyhow::Result<Response> {
        send(self.stream.get_mut(), request).await?;
        self.next_line()
            .await?
            .ok_or_else(|| anyhow::anyhow!("the server closed the control connection"))
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
        Ok(send(self.stream.get_mut(), request).await?)
    }
}
