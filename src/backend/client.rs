//! [`Client`]: the operator CLI's connection to the daemon — one command, one connection, its
//! calls one after another (`watch` also reads the daemon's pushes between them).

use std::collections::VecDeque;
use std::path::Path;

use tokio::io::BufReader;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::remote::greet;
use crate::control::wire::{Down, Role, Up, Welcome, read_line, write_line};
use crate::control::{ApiError, Op};

/// No daemon answers on a home's control socket (the CLI exits 3).
#[derive(Debug, thiserror::Error)]
#[error(
    "no switchboard is running on {home}: {cause}; start one with `{}`",
    crate::home::command("start")
)]
pub struct NotRunning {
    /// The home.
    pub home: String,
    /// Why the socket did not answer.
    pub cause: String,
}

/// One operator connection.
pub struct Client {
    read: BufReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
    next_id: u64,
    welcome: Welcome,
    /// Pushes read while a call waited for its reply.
    held: VecDeque<Down>,
    line: Vec<u8>,
}

impl Client {
    /// Connects to the daemon of `home`, or explains that none runs.
    pub async fn connect(home: &Path) -> anyhow::Result<Client> {
        Client::open(home, false).await
    }

    /// Connects for `watch`: the daemon also pushes every transition, commit and suppression.
    pub async fn watch(home: &Path) -> anyhow::Result<Client> {
        Client::open(home, true).await
    }

    async fn open(home: &Path, feed: bool) -> anyhow::Result<Client> {
        let path = home.join("control.sock");
        let stream = match UnixStream::connect(&path).await {
            Ok(stream) => stream,
            Err(e) => {
                return Err(NotRunning {
                    home: home.display().to_string(),
                    cause: format!("cannot connect to {}: {e}", path.display()),
                }
                .into());
            }
        };
        Client::on(stream, feed).await
    }

    /// A client on a connection already made.
    pub async fn on(stream: UnixStream, feed: bool) -> anyhow::Result<Client> {
        let (welcome, read, write) = greet(stream, Role::Operator, feed, feed).await?;
        Ok(Client {
            read,
            write,
            next_id: 1,
            welcome,
            held: VecDeque::new(),
            line: Vec::new(),
        })
    }

    /// What the daemon said when it accepted this connection.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Calls `op` and waits for its reply, at most its deadline.
    pub async fn call<O: Op>(&mut self, op: O) -> Result<O::Reply, ApiError> {
        let deadline = op.deadline();
        let call: crate::control::Call = op.into();
        let name = call.name();
        let id = self.next_id;
        self.next_id += 1;
        let raw = serde_json::value::to_raw_value(&call).map_err(|e| {
            ApiError::refused(
                crate::control::RefusalCode::Failed,
                format!("the call does not encode: {e}"),
            )
        })?;
        let up = Up {
            id,
            call: Some(raw),
            cancel: false,
        };
        write_line(&mut self.write, &up)
            .await
            .map_err(|e| ApiError::unavailable(format!("cannot send `{name}`: {e}")))?;
        let reply = tokio::time::timeout(deadline, async {
            loop {
                match self.read_down().await? {
                    Some(Down::Reply(reply)) if reply.id == id => return Ok(Some(reply)),
                    Some(Down::Reply(_)) => {}
                    Some(push) => self.held.push_back(push),
                    None => return Ok(None),
                }
            }
        })
        .await
        .map_err(|_| ApiError::Timeout {
            call: name.to_string(),
            secs: deadline.as_secs(),
        })?
        .map_err(|e: std::io::Error| {
            ApiError::unavailable(format!("reading `{name}`'s reply: {e}"))
        })?;
        let Some(reply) = reply else {
            return Err(ApiError::unavailable(
                "the daemon closed the connection (it is stopping)",
            ));
        };
        match reply.error {
            Some(error) => Err(error),
            // A reply of `null` (`ok` left out) reads as such.
            None => serde_json::from_str(reply.ok.as_deref().map_or("null", |ok| ok.get()))
                .map_err(|e| ApiError::Protocol {
                    message: format!(
                        "the daemon's reply to `{name}` does not fit this switchboard ({e}); is \
                         the daemon another build? `{}` says",
                        crate::home::command("status")
                    ),
                }),
        }
    }

    /// The next push (`watch`): a transition, a commit, a suppression; `None` once the daemon
    /// closed the connection.
    pub async fn next_push(&mut self) -> std::io::Result<Option<Down>> {
        if let Some(push) = self.held.pop_front() {
            return Ok(Some(push));
        }
        loop {
            match self.read_down().await? {
                Some(Down::Reply(_)) => {}
                other => return Ok(other),
            }
        }
    }

    async fn read_down(&mut self) -> std::io::Result<Option<Down>> {
        loop {
            if !read_line(&mut self.read, &mut self.line).await? {
                return Ok(None);
            }
            match serde_json::from_slice::<Down>(&self.line) {
                Ok(down) => return Ok(Some(down)),
                Err(e) => {
                    tracing::warn!(cause = %e, "the daemon sent a line this switchboard cannot read; ignored");
                }
            }
        }
    }
}
