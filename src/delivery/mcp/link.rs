//! [`SessionLink`]: how one session and its transport settle the work its waits claimed, and
//! how the transport tells the session it ended.
//!
//! Work handed to a wait stays *claimed* until its client had the result carrying it; then it
//! is *delivered*. Delivered means the client had it, as far as each transport can tell:
//!
//! 1. **Held**: the result is being sent. A write that fails (stdio), a response body dropped
//!    before the response went out or one that ended without it (HTTP), or a request the
//!    client cancelled (`notifications/cancelled`) releases the claims at once, to the next
//!    wait, as they were. A cancel that comes once the result left releases them too (the
//!    spec tells the client to ignore a result after its cancel), marked, since a client may
//!    cancel a request it already has the answer of.
//! 2. **Sent**: the result left (stdio: the line written and flushed; HTTP: hyper took the
//!    frame carrying the response). Bytes that left may still be lost with a client that
//!    vanishes after they did, so the session has `mcp.deliveryGrace` to show it is there: a
//!    call received since the bytes could reach the client (an acknowledgement may overtake
//!    the transport's report that the write is done), or the session still open (stdio:
//!    stdin not closed; HTTP: a stream or another request in progress). Then the claims are
//!    delivered.
//! 3. **Quiet** (HTTP only): at the grace's end nothing showed the client is there. The claims
//!    stay until it calls again (delivered at once) or its session ends.
//!
//! A stateless request (HTTP in the 2026-07-28 era) has no session to show anything: its
//! claims are delivered once its response was sent, and released when the client dropped the
//! POST before that ([`SessionLink::settle_when_sent`]).
//!
//! A session that ends (stdin EOF, HTTP DELETE or idle expiry, shutdown) settles what it still
//! held: a result it called again after is delivered; the rest is released *marked*
//! (`redelivered: true`, same id, when handed out again), because a result being written or
//! not yet acknowledged may have reached its client. So delivery is at least once; a duplicate
//! happens only where a client had a result and then vanished within the grace without a
//! further call (or cancelled the request it had the answer of), and it says so.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use rmcp::model::RequestId;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::actions::ActionId;
use crate::backend::Api;
use crate::control::ops::Settle;

/// How many cancelled request ids a session remembers (a cancel that came before its wait
/// handed anything to the transport).
const CANCELLED_MEMORY: usize = 64;

/// Says whether the transport's client is still there (HTTP: a stream or a request in
/// progress); stdio has none: its session is there until stdin closes.
pub type Alive = Arc<dyn Fn() -> bool + Send + Sync>;

/// Where a result carrying claims is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Being made and sent.
    Held,
    /// Handed to the transport: its bytes may reach the client from now on; `calls` is how
    /// many calls the session had received then. A call after it may be the client's answer
    /// to the result (an acknowledgement can overtake the transport's report of the write).
    Handed { calls: u64 },
    /// Sent; `calls` is how many calls the session had received then.
    Sent { calls: u64 },
    /// Sent, the grace is over and nothing showed the client is there.
    Quiet,
}

struct Receipt {
    claims: Vec<ActionId>,
    stage: Stage,
}

#[derive(Default)]
struct Deliveries {
    receipts: HashMap<RequestId, Receipt>,
    /// Requests the client cancelled lately whose results held nothing yet.
    cancelled: VecDeque<RequestId>,
}

/// How a session and its transport settle the work its waits claimed, and how the transport
/// tells the session it ended. See the module docs.
pub struct SessionLink {
    ended: CancellationToken,
    /// Cancelled when the link is dropped: the session's server and transport are gone.
    released: CancellationToken,
    api: Api,
    tasks: TaskTracker,
    grace: Duration,
    deliveries: Mutex<Deliveries>,
    /// Calls received from the client so far.
    calls: AtomicU64,
    /// The transport reports what became of each result (stdio, HTTP); without one, a result
    /// is delivered when the tool returns it.
    reports: AtomicBool,
    /// No session will follow the result (a stateless request): sent is delivered.
    at_once: AtomicBool,
    alive: OnceLock<Alive>,
}

/// Ends its link's session ([`SessionLink::end`]) when dropped: held by the session's server,
/// whose last handle goes when rmcp is done with the session, whichever came first of that and
/// the transport's own end (an HTTP `DELETE`, stdin closed).
pub struct EndOnDrop(Arc<SessionLink>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.end();
    }
}

impl Drop for SessionLink {
    fn drop(&mut self) {
        self.released.cancel();
    }
}

impl SessionLink {
    /// A link for a session on `api` that ends with `shutdown`; its grace timers run on
    /// `tasks`.
    pub fn new(api: Api, shutdown: &CancellationToken, tasks: TaskTracker) -> Arc<SessionLink> {
        let grace = api.settings().delivery_grace();
        Arc::new(SessionLink {
            ended: shutdown.child_token(),
            released: CancellationToken::new(),
            api,
            tasks,
            grace,
            deliveries: Mutex::default(),
            calls: AtomicU64::new(0),
            reports: AtomicBool::new(false),
            at_once: AtomicBool::new(false),
            alive: OnceLock::new(),
        })
    }

    /// The session is over (stdin EOF, HTTP DELETE, shutdown): waits in flight return empty,
    /// and the claims of results not acknowledged go back to the queue (marked when they
    /// left) before the session closes.
    pub fn end(&self) {
        let calls = self.calls.load(Ordering::Acquire);
        let (mut had, mut left) = (Vec::new(), Vec::new());
        for (id, r) in self.deliveries.lock().unwrap().receipts.drain() {
            tracing::debug!(request = %id, stage = ?r.stage, calls, "a result the ended session held");
            match r.stage {
                // The client called after the result could reach it: it had it.
                Stage::Sent { calls: then } | Stage::Handed { calls: then } if calls > then => {
                    had.extend(r.claims)
                }
                // A result still being written, or not acknowledged, may yet have reached the
                // client: marked.
                _ => left.extend(r.claims),
            }
        }
        self.deliver(&had);
        self.release(
            &left,
            true,
            "the session ended before it acknowledged the result",
        );
        self.ended.cancel();
    }

    /// A guard that ends the session when dropped.
    pub fn end_on_drop(self: &Arc<Self>) -> EndOnDrop {
        EndOnDrop(self.clone())
    }

    /// Fires when the session ends.
    pub fn ended(&self) -> &CancellationToken {
        &self.ended
    }

    /// The daemon's task tracker, where the session's own tasks run.
    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Fires once the link is dropped, that is once the session's server (and with it its
    /// transport's buffers) is gone.
    pub fn released(&self) -> CancellationToken {
        self.released.clone()
    }

    /// Says that the transport reports what became of each result ([`SessionLink::written`],
    /// [`SessionLink::unwritten`]).
    pub fn reports_sends(&self) {
        self.reports.store(true, Ordering::Relaxed);
    }

    /// Says that no call will follow a result on this link (a stateless request): a result
    /// that was sent is delivered at once, without a grace.
    pub fn settle_when_sent(&self) {
        self.at_once.store(true, Ordering::Relaxed);
    }

    /// Whether the transport reports sends.
    pub(super) fn has_reports(&self) -> bool {
        self.reports.load(Ordering::Relaxed)
    }

    /// Says how the transport knows its client is still there (HTTP), once.
    pub fn alive_when(&self, alive: Alive) {
        let _ = self.alive.set(alive);
    }

    /// A call came from the client: a sign it is there. Results past their grace that waited
    /// for one are delivered now.
    pub fn called(&self) {
        self.calls.fetch_add(1, Ordering::AcqRel);
        let quiet: Vec<ActionId> = {
            let mut d = self.deliveries.lock().unwrap();
            let ids: Vec<RequestId> = d
                .receipts
                .iter()
                .filter(|(_, r)| r.stage == Stage::Quiet)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter()
                .filter_map(|id| d.receipts.remove(id))
                .flat_map(|r| r.claims)
                .collect()
        };
        self.deliver(&quiet);
    }

    /// Keeps `claims` until the result of request `id` is sent and acknowledged. A request the
    /// client cancelled already gives them back at once; without a transport that reports
    /// sends, they are delivered now.
    pub(super) fn hold(&self, id: RequestId, claims: Vec<ActionId>) {
        if claims.is_empty() {
            return;
        }
        if !self.has_reports() {
            self.deliver(&claims);
            return;
        }
        if self.ended.is_cancelled() {
            self.release(
                &claims,
                true,
                "the session ended before the result was sent",
            );
            return;
        }
        {
            let mut d = self.deliveries.lock().unwrap();
            if !d.cancelled.contains(&id) {
                d.receipts.insert(
                    id,
                    Receipt {
                        claims,
                        stage: Stage::Held,
                    },
                );
                return;
            }
        }
        self.release(&claims, false, "the client cancelled the request");
    }

    /// The result of request `id` is being handed to the transport: from now on its bytes may
    /// reach the client, so a call counted after this may be the client's answer to it (stdio:
    /// the line is about to be written; HTTP: the frame carrying the response is handed to
    /// hyper).
    pub fn handing(&self, id: &RequestId) {
        let calls = self.calls.load(Ordering::Acquire);
        if let Some(r) = self.deliveries.lock().unwrap().receipts.get_mut(id)
            && r.stage == Stage::Held
        {
            r.stage = Stage::Handed { calls };
        }
    }

    /// The result of request `id` left: its claims are delivered once the session shows it is
    /// there, within the grace.
    pub fn written(self: &Arc<Self>, id: &RequestId) {
        let now = self.calls.load(Ordering::Acquire);
        if self.at_once.load(Ordering::Relaxed) {
            let receipt = self.deliveries.lock().unwrap().receipts.remove(id);
            if let Some(r) = receipt {
                self.deliver(&r.claims);
            }
            return;
        }
        {
            let mut d = self.deliveries.lock().unwrap();
            let Some(r) = d.receipts.get_mut(id) else {
                return;
            };
            r.stage = match r.stage {
                Stage::Held => Stage::Sent { calls: now },
                Stage::Handed { calls } => Stage::Sent { calls },
                _ => return,
            };
        }
        let link: Weak<SessionLink> = Arc::downgrade(self);
        let (id, grace, ended) = (id.clone(), self.grace, self.ended.clone());
        self.tasks.spawn(async move {
            tokio::select! {
                _ = ended.cancelled() => {}
                _ = tokio::time::sleep(grace) => {
                    if let Some(link) = link.upgrade() {
                        link.after_grace(&id);
                    }
                }
            }
        });
    }

    /// The result of request `id` did not leave (`why`): its claims go back as they were.
    pub fn unwritten(&self, id: &RequestId, why: &str) {
        let receipt = self.deliveries.lock().unwrap().receipts.remove(id);
        if let Some(r) = receipt {
            self.release(&r.claims, false, why);
        }
    }

    /// The client cancelled request `id`: whatever its result carries goes back to the queue,
    /// whether or not it left (a client ignores a result that comes after its cancel). One
    /// that left is marked: a client may send a cancel for a request it already has the
    /// answer of (the TypeScript SDK does when its abort signal fires late).
    pub fn cancelled(&self, id: &RequestId) {
        let receipt = {
            let mut d = self.deliveries.lock().unwrap();
            let receipt = d.receipts.remove(id);
            if receipt.is_none() {
                d.cancelled.push_back(id.clone());
                if d.cancelled.len() > CANCELLED_MEMORY {
                    d.cancelled.pop_front();
                }
            }
            receipt
        };
        let Some(r) = receipt else {
            return;
        };
        if r.stage == Stage::Quiet {
            tracing::warn!(
                request = %id,
                "a cancel came after the grace (`mcp.deliveryGrace`) of its result; released"
            );
        }
        let left = r.stage != Stage::Held;
        self.release(&r.claims, left, "the client cancelled the request");
    }

    /// The grace of request `id`'s result is over: delivered when the session showed it is
    /// there, else quiet until it does or ends.
    fn after_grace(&self, id: &RequestId) {
        let alive = || self.alive.get().is_none_or(|alive| alive());
        let claims = {
            let mut d = self.deliveries.lock().unwrap();
            let Some(r) = d.receipts.get_mut(id) else {
                return;
            };
            let Stage::Sent { calls } = r.stage else {
                return;
            };
            if self.calls.load(Ordering::Acquire) > calls || alive() {
                d.receipts.remove(id).map(|r| r.claims).unwrap_or_default()
            } else {
                r.stage = Stage::Quiet;
                return;
            }
        };
        self.deliver(&claims);
    }

    fn deliver(&self, claims: &[ActionId]) {
        self.settle(claims, true, false, "delivered");
    }

    fn release(&self, claims: &[ActionId], maybe_seen: bool, why: &str) {
        self.settle(claims, false, maybe_seen, why);
    }

    /// Settles claims: delivered, or released with `why` (marked when `maybe_seen`).
    pub fn settle(&self, claims: &[ActionId], delivered: bool, maybe_seen: bool, why: &str) {
        if !claims.is_empty() {
            self.api.cast(Settle {
                claims: claims.to_vec(),
                delivered,
                why: why.to_string(),
                maybe_seen,
            });
        }
    }
}
