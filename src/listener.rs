//! The HTTP listener for ingest and `/mcp`: accepts connections and serves a router on each,
//! within limits that keep a hostile or broken client from holding the server.
//!
//! - **Headers and idle keep-alive**: a connection must deliver a request's whole header
//!   within [`HEADER_READ_TIMEOUT`], also between requests on a kept-alive connection
//!   (hyper's `header_read_timeout`, which runs whenever the connection waits for a head).
//!   A slowloris that trickles its header is cut off there.
//! - **Bodies**: a request's body must arrive in full within [`BODY_READ_TIMEOUT`] of its
//!   header, however it trickles ([`BodyDeadline`]); ingest answers 408 past it.
//! - **Responses are not timed**: a `wait_for_inbound_message` long-poll (up to 55 s) and an
//!   MCP SSE stream keep their connection as long as they run.
//! - **Connections**: at most [`MAX_CONNECTIONS`] per listener, so the process never runs
//!   out of file descriptors (the journals and the control socket need some). A connection
//!   is *busy* from a request's head until its response has been written (a long-poll or an
//!   SSE stream stays busy as long as it runs), and *idle* otherwise: before its first
//!   request, and between requests when kept alive. When the cap is reached, the connection
//!   that has been idle the longest is closed to make room, so neither 1,000 silent sockets
//!   nor 256 kept-alive clients that sent one `GET /healthz` can lock a real sender out; a
//!   kept-alive one is closed the way hyper closes an idle connection (after flushing what it
//!   wrote). Only when every connection is busy does a new one get `503
//!   too_many_connections` with `Retry-After: 1`.
//! - **Credentials before work**: a request is *anonymous* from its head until its route says
//!   it authenticated ([`Standing::authenticated`]), which every route does from the headers,
//!   before it reads a body. Anonymous requests hold at most `MAX_CONNECTIONS -`
//!   [`AUTHENTICATED_RESERVE`] connections at once: one that arrives past that share gets `503
//!   too_many_connections` unless its route authenticates it, and a route that must read a body
//!   before it can authenticate it (GitHub's signature) asks first
//!   ([`Standing::may_read_anonymously`]). So no number of clients without credentials, however
//!   slow, can take the connections that requests with them need. An anonymous request that is
//!   refused (any 4xx or 5xx) is answered with `Connection: close` and closed.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use http::Request;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::duration::Backoff;

/// The most connections one listener serves at once.
pub const MAX_CONNECTIONS: usize = 256;

/// Of [`MAX_CONNECTIONS`], how many requests without credentials can never take: anonymous
/// requests hold at most the rest at once.
pub const AUTHENTICATED_RESERVE: usize = 64;

/// How long a connection may take to send a request's header, and how long a kept-alive
/// connection may sit idle between requests.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request's body may take to arrive, counted from its header.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Over-cap connections answered 503 at the same time; past this they are closed unanswered.
const MAX_REFUSALS: usize = 32;

/// The first and the longest wait after a failed accept (out of file descriptors, say).
const ACCEPT_RETRY_FIRST: Duration = Duration::from_millis(5);
const ACCEPT_RETRY_MAX: Duration = Duration::from_secs(1);

/// How long answering an over-cap connection may take.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// The error a request body yields once [`BODY_READ_TIMEOUT`] has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyDeadline;

impl std::fmt::Display for BodyDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {}s",
            BODY_READ_TIMEOUT.as_secs()
        )
    }
}

impl std::error::Error for BodyDeadline {}

impl BodyDeadline {
    /// Whether `err` (or anything in its source chain) is a [`BodyDeadline`].
    pub fn is_cause_of(err: &(dyn std::error::Error + 'static)) -> bool {
        let mut next = Some(err);
        while let Some(e) = next {
            if e.is::<BodyDeadline>() || e.to_string().contains(&BodyDeadline.to_string()) {
                return true;
            }
            next = e.source();
        }
        false
    }
}

/// A request body that fails with [`BodyDeadline`] when it has not ended by its deadline.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    expired: bool,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if this.expired {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.expired = true;
            return Poll::Ready(Some(Err(axum::Error::new(BodyDeadline))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.expired || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `request` with its body bounded by [`BODY_READ_TIMEOUT`] from now.
fn with_body_deadline(request: Request<Incoming>) -> Request<Body> {
    request.map(|body| {
        let inner = Body::new(body);
        if inner.is_end_stream() {
            return inner;
        }
        Body::new(DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(BODY_READ_TIMEOUT)),
            expired: false,
        })
    })
}

/// The open connections of one listener, and which of them are idle.
#[derive(Default)]
struct Slots {
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    open: usize,
    /// Numbers connections, and each time a connection becomes idle (so the lowest number
    /// is the longest idle).
    next: u64,
    /// Connections not serving a request, by when they became idle, oldest first: the first
    /// is closed to make room.
    idle: BTreeMap<u64, CancellationToken>,
    /// Per open connection (by id): requests in flight, when it became idle (its key in
    /// `idle`), and whether it has answered a request yet.
    conns: HashMap<u64, Use>,
    /// Requests in flight that have not authenticated (yet).
    anonymous: usize,
}

#[derive(Clone, Copy, Default)]
struct Use {
    in_flight: usize,
    idle_since: Option<u64>,
    served: bool,
}

/// One admitted connection; frees its slot when dropped.
struct Slot {
    slots: Arc<Slots>,
    id: u64,
    evicted: CancellationToken,
    /// The address the connection came from.
    peer: Option<SocketAddr>,
}

impl Slots {
    /// A slot for a new connection: a free one, or the one of the connection that has been
    /// idle the longest (which is told to close); `None` when every connection is busy.
    fn admit(self: &Arc<Slots>, cap: usize) -> Option<Slot> {
        let mut state = self.state.lock().unwrap();
        if state.open >= cap {
            let (_, oldest) = state.idle.pop_first()?;
            oldest.cancel();
        }
        state.open += 1;
        state.next += 1;
        let id = state.next;
        let evicted = CancellationToken::new();
        state.idle.insert(id, evicted.clone());
        state.conns.insert(
            id,
            Use {
                idle_since: Some(id),
                ..Use::default()
            },
        );
        Some(Slot {
            slots: self.clone(),
            id,
            evicted,
            peer: None,
        })
    }
}

impl Slot {
    /// A request's head arrived: the connection is busy until [`Slot::done`], and the request
    /// anonymous until it authenticates. Whether anonymous requests now hold more than their
    /// share (`cap - AUTHENTICATED_RESERVE`).
    fn busy(&self, cap: usize) -> bool {
        let mut state = self.slots.state.lock().unwrap();
        state.anonymous += 1;
        let over_share = state.anonymous > cap.saturating_sub(AUTHENTICATED_RESERVE).max(1);
        let Some(mut conn) = state.conns.get(&self.id).copied() else {
            return over_share;
        };
        if let Some(key) = conn.idle_since.take() {
            state.idle.remove(&key);
        }
        conn.in_flight += 1;
        state.conns.insert(self.id, conn);
        over_share
    }

    /// A request of this connection authenticated: it no longer counts as anonymous.
    fn authenticated(&self) {
        let mut state = self.slots.state.lock().unwrap();
        state.anonymous = state.anonymous.saturating_sub(1);
    }

    /// A response has been written (or dropped): with nothing else in flight the connection
    /// is idle, and the newest idle one. `anonymous`: its request never authenticated.
    fn done(&self, anonymous: bool) {
        let mut state = self.slots.state.lock().unwrap();
        if anonymous {
            state.anonymous = state.anonymous.saturating_sub(1);
        }
        let Some(mut conn) = state.conns.get(&self.id).copied() else {
            return;
        };
        conn.in_flight = conn.in_flight.saturating_sub(1);
        conn.served = true;
        if conn.in_flight == 0 && conn.idle_since.is_none() && !self.evicted.is_cancelled() {
            state.next += 1;
            let key = state.next;
            state.idle.insert(key, self.evicted.clone());
            conn.idle_since = Some(key);
        }
        state.conns.insert(self.id, conn);
    }

    /// What the connection is doing now.
    fn usage(&self) -> Use {
        let state = self.slots.state.lock().unwrap();
        state.conns.get(&self.id).copied().unwrap_or_default()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.slots.state.lock().unwrap();
        state.open -= 1;
        if let Some(conn) = state.conns.remove(&self.id)
            && let Some(key) = conn.idle_since
        {
            state.idle.remove(&key);
        }
    }
}

/// How a request stands with its listener: anonymous until its route says it authenticated.
/// In every request's extensions; a request served some other way (a test's `oneshot`) has
/// none, and the functions below then do nothing.
#[derive(Clone)]
pub struct Standing(Arc<RequestStanding>);

struct RequestStanding {
    slot: Arc<Slot>,
    authenticated: AtomicBool,
    /// Anonymous requests held their whole share when this one's head arrived.
    over_share: bool,
}

/// Anonymous requests hold their whole share of the connections: one more that would hold a
/// connection without credentials is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnonymousShareFull;

impl Standing {
    /// The standing of the request with these extensions, if a listener serves it.
    pub fn of(extensions: &http::Extensions) -> Option<&Standing> {
        extensions.get::<Standing>()
    }

    /// The request presented valid credentials (a token, a session, a signature): it no longer
    /// counts against the anonymous share, and a refusal no longer closes its connection.
    pub fn authenticated(&self) {
        if !self.0.authenticated.swap(true, Ordering::AcqRel) {
            self.0.slot.authenticated();
        }
    }

    /// The address the request's connection came from.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.0.slot.peer
    }

    /// Whether the request authenticated.
    pub fn is_authenticated(&self) -> bool {
        self.0.authenticated.load(Ordering::Acquire)
    }

    /// For a route that must read a body before it can tell whether it is authentic (GitHub's
    /// signature is over the body): whether this request may, within the anonymous share.
    pub fn may_read_anonymously(&self) -> Result<(), AnonymousShareFull> {
        if self.0.over_share && !self.is_authenticated() {
            Err(AnonymousShareFull)
        } else {
            Ok(())
        }
    }

    /// What an anonymous request is answered: past the share, 503 whatever the route said
    /// (its route served it without credentials, so nothing is lost); any refusal with
    /// `Connection: close`, so that the connection is freed at once.
    fn answer(&self, response: axum::response::Response) -> axum::response::Response {
        if self.is_authenticated() {
            return response;
        }
        let mut response = if self.0.over_share && !response.status().is_client_error() {
            anonymous_share_full()
        } else {
            response
        };
        if response.status().is_client_error() || response.status().is_server_error() {
            response.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

/// Marks the request of `extensions` authenticated (see [`Standing::authenticated`]).
pub fn authenticated(extensions: &http::Extensions) {
    if let Some(standing) = Standing::of(extensions) {
        standing.authenticated();
    }
}

/// `503 too_many_connections` for an anonymous request past its share, closing.
pub fn anonymous_share_full() -> axum::response::Response {
    let body = format!(
        r#"{{"error":"too_many_connections","message":"requests without credentials hold all the {} connections switchboard gives them (it keeps {AUTHENTICATED_RESERVE} of {MAX_CONNECTIONS} for requests with a token, a session or a signature); retry in a second"}}"#,
        MAX_CONNECTIONS - AUTHENTICATED_RESERVE
    );
    let mut response = axum::response::Response::new(Body::from(body));
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    let h = response.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    h.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    h.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    response
}

/// `http.trustedProxies`: the reverse proxies (addresses, or networks as `ADDR/BITS`) whose
/// `X-Forwarded-*` headers are believed. A request from any other peer is judged by what it
/// says itself: its `Host`, and plain HTTP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<(IpAddr, u8)>);

impl TrustedProxies {
    /// Parses the setting's entries (`"10.0.0.1"`, `"10.0.0.0/8"`, `"fd00::/8"`); the error
    /// names the first bad one.
    pub fn parse(entries: &[String]) -> Result<TrustedProxies, String> {
        let mut nets = Vec::new();
        for entry in entries {
            let bad = |why: &str| format!("invalid proxy \"{entry}\": {why}");
            let (addr, bits) = match entry.trim().split_once('/') {
                Some((addr, bits)) => (addr, Some(bits)),
                None => (entry.trim(), None),
            };
            let ip: IpAddr = addr
                .parse()
                .map_err(|_| bad("expected an IP address, or a network as ADDR/BITS"))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let bits = match bits {
                None => max,
                Some(b) => b
                    .parse::<u8>()
                    .ok()
                    .filter(|b| *b <= max)
                    .ok_or_else(|| bad(&format!("the prefix length is 0 to {max}")))?,
            };
            nets.push((ip, bits));
        }
        Ok(TrustedProxies(nets))
    }

    /// Whether none is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `peer` is one of the proxies.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.0.iter().any(|(net, bits)| match (net, peer) {
            (IpAddr::V4(net), IpAddr::V4(peer)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(*bits)).unwrap_or(0);
                u32::from(*net) & mask == u32::from(peer) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(peer)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(*bits)).unwrap_or(0);
                u128::from(*net) & mask == u128::from(peer) & mask
            }
            _ => false,
        })
    }
}

/// Marks its connection's request done when dropped: held by the response body, which hyper
/// drops once it has written the last of it (or the connection ended).
struct InFlight(Standing);

impl Drop for InFlight {
    fn drop(&mut self) {
        let standing = &self.0.0;
        let anonymous = !standing.authenticated.swap(true, Ordering::AcqRel);
        standing.slot.done(anonymous);
    }
}

/// A response body that keeps its request in flight for as long as it is being written.
struct TrackedBody {
    inner: Body,
    _in_flight: InFlight,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `router` on every connection `listener` accepts, within the limits above, until
/// `shutdown`; then lets requests in flight finish (the task tracker's deadline applies).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    what: &'static str,
) {
    let slots = Arc::new(Slots::default());
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
    let mut backoff = Backoff::new(ACCEPT_RETRY_FIRST, ACCEPT_RETRY_MAX);
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    backoff.reset();
                    accepted
                }
                Err(err) => {
                    // Out of file descriptors or a transient network error: wait, then retry.
                    let wait = backoff.next();
                    tracing::warn!(cause = %err, what, "accept failed; retrying in {wait:?}");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(wait) => continue,
                    }
                }
            },
        };
        let (stream, peer) = stream;
        let Some(mut slot) = slots.admit(MAX_CONNECTIONS) else {
            match refusals.clone().try_acquire_owned() {
                Ok(permit) => {
                    tasks.spawn(async move {
                        refuse(stream).await;
                        drop(permit);
                    });
                }
                Err(_) => drop(stream),
            }
            continue;
        };
        slot.peer = Some(peer);
        tasks.spawn(connection(stream, router.clone(), slot, shutdown.clone()));
    }
}

async fn connection(stream: TcpStream, router: Router, slot: Slot, shutdown: CancellationToken) {
    let _ = stream.set_nodelay(true);
    let evicted = slot.evicted.clone();
    let slot = Arc::new(slot);
    let service = {
        let slot = slot.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let standing = Standing(Arc::new(RequestStanding {
                over_share: slot.busy(MAX_CONNECTIONS),
                slot: slot.clone(),
                authenticated: AtomicBool::new(false),
            }));
            let in_flight = InFlight(standing.clone());
            let mut request = with_body_deadline(request);
            request.extensions_mut().insert(standing.clone());
            let router = router.clone();
            async move {
                let response = router.oneshot(request).await.into_response_ok();
                let response = standing.answer(response);
                Ok::<_, Infallible>(response.map(|inner| {
                    Body::new(TrackedBody {
                        inner,
                        _in_flight: in_flight,
                    })
                }))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        served = conn.as_mut() => {
            if let Err(err) = served {
                tracing::debug!(cause = %err, "http connection ended");
            }
        }
        _ = evicted.cancelled() => {
            let usage = slot.usage();
            if usage.in_flight == 0 && !usage.served {
                // Never sent a whole request head: nothing of it is lost.
                tracing::debug!("idle http connection closed to make room for a new one");
                return;
            }
            // Kept alive between requests (hyper closes it at once, after flushing what it
            // wrote), or a request arrived just as it was picked (it is answered first).
            conn.as_mut().graceful_shutdown();
            if usage.in_flight == 0 {
                tracing::debug!("kept-alive http connection closed to make room for a new one");
                let _ = tokio::time::timeout(REFUSAL_TIMEOUT, conn).await;
            } else {
                let _ = conn.await;
            }
        }
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Turns the router's `Result<Response, Infallible>` into the response.
trait IntoResponseOk {
    fn into_response_ok(self) -> axum::response::Response;
}

impl IntoResponseOk for Result<axum::response::Response, Infallible> {
    fn into_response_ok(self) -> axum::response::Response {
        match self {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// Answers a connection over the cap with `503 too_many_connections`, then closes it after
/// reading what the client sent (closing with unread data would reset the connection and
/// could lose the answer).
async fn refuse(mut stream: TcpStream) {
    let body = format!(
        r#"{{"error":"too_many_connections","message":"switchboard serves at most {MAX_CONNECTIONS} connections at once and all are busy; retry in a second"}}"#
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < 64 * 1024 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_closes_the_longest_idle_connection_and_never_a_busy_one() {
        let slots = Arc::new(Slots::default());
        let a = slots.admit(2).unwrap();
        let b = slots.admit(2).unwrap();
        a.busy(2);
        // Full: b (fresh) makes room, a (busy) does not.
        let c = slots.admit(2).unwrap();
        assert!(b.evicted.is_cancelled());
        assert!(!a.evicted.is_cancelled());
        drop(b);
        c.busy(2);
        assert!(slots.admit(2).is_none(), "every connection is busy");
        // A kept-alive connection that answered its request is idle again: it makes room.
        a.done(true);
        assert!(a.usage().served && a.usage().in_flight == 0);
        let d = slots
            .admit(2)
            .expect("a kept-alive idle connection makes room");
        assert!(a.evicted.is_cancelled());
        assert!(!c.evicted.is_cancelled() && !d.evicted.is_cancelled());
        drop(a);
        // Of two idle connections the one idle longer goes first: d has been idle since it
        // was admitted, c only from now.
        c.done(true);
        let e = slots.admit(2).unwrap();
        assert!(d.evicted.is_cancelled() && !c.evicted.is_cancelled());
        drop(d);
        // An evicted connection never becomes idle again.
        assert_eq!(slots.state.lock().unwrap().open, 2);
        drop((c, e));
        let state = slots.state.lock().unwrap();
        assert_eq!(state.open, 0);
        assert!(state.idle.is_empty() && state.conns.is_empty());
    }

    #[test]
    fn a_request_in_flight_keeps_its_connection_busy_until_its_last_response_ends() {
        let slots = Arc::new(Slots::default());
        let a = slots.admit(1).unwrap();
        a.busy(2);
        a.busy(2);
        a.done(true);
        assert!(slots.admit(1).is_none(), "one response still being written");
        a.done(true);
        let b = slots.admit(1).expect("idle again");
        assert!(a.evicted.is_cancelled());
        // Evicted: a request that slipped in does not make it idle (and closable) again.
        a.busy(2);
        a.done(true);
        let idle: Vec<u64> = slots.state.lock().unwrap().idle.keys().copied().collect();
        assert_eq!(idle, [b.id], "only the new connection is idle");
    }

    #[test]
    fn anonymous_requests_hold_at_most_their_share_and_authenticated_ones_do_not_count() {
        let cap = AUTHENTICATED_RESERVE + 2;
        let slots = Arc::new(Slots::default());
        let conns: Vec<Slot> = (0..4).map(|_| slots.admit(cap).unwrap()).collect();
        assert!(
            !conns[0].busy(cap) && !conns[1].busy(cap),
            "within the share"
        );
        assert!(conns[2].busy(cap), "a third anonymous request is past it");
        // One authenticates: it leaves the anonymous count, so the next one is within.
        conns[0].authenticated();
        conns[2].done(true);
        assert!(!conns[3].busy(cap));
        conns[1].done(true);
        conns[3].done(true);
        conns[0].done(false);
        assert_eq!(slots.state.lock().unwrap().anonymous, 0);
    }

    #[test]
    fn trusted_proxies_are_addresses_or_networks() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let proxies =
            TrustedProxies::parse(&list(&["10.1.2.3", "192.168.0.0/16", "fd00::/8"])).unwrap();
        for yes in ["10.1.2.3", "192.168.7.9", "fd12::1", "::ffff:10.1.2.3"] {
            assert!(proxies.trusts(yes.parse().unwrap()), "{yes}");
        }
        for no in ["10.1.2.4", "192.169.0.1", "fe80::1", "127.0.0.1"] {
            assert!(!proxies.trusts(no.parse().unwrap()), "{no}");
        }
        let everything = TrustedProxies::parse(&list(&["0.0.0.0/0"])).unwrap();
        assert!(everything.trusts("8.8.8.8".parse().unwrap()));
        assert!(!TrustedProxies::default().trusts("127.0.0.1".parse().unwrap()));
        for bad in ["proxy.example", "10.0.0.0/33", "10.0.0.0/x", "fd00::/129"] {
            let err = TrustedProxies::parse(&list(&[bad])).unwrap_err();
            assert!(
                err.starts_with(&format!("invalid proxy \"{bad}\": ")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_body_deadline_is_found_in_an_error_chain() {
        let wrapped = axum::Error::new(BodyDeadline);
        assert!(BodyDeadline::is_cause_of(&wrapped));
        let other = std::io::Error::other("connection reset");
        assert!(!BodyDeadline::is_cause_of(&other));
    }
}
