//! Socket Mode: the source opens a WebSocket to Slack and Slack sends the events over it.
//!
//! - **Connecting**: `apps.connections.open` with the app token (`xapp-`) gives a `wss://`
//!   URL, used as it is; Slack then says `hello`.
//! - **Envelopes**: `events_api` ones are acknowledged (`{"envelope_id": ...}`) only once
//!   their message is durable in the inbox; `interactive` ones once the decision is in the
//!   actions journal; any other (and an event that is skipped) at once. One that is not
//!   acknowledged (a crash, an inbox that cannot write) is delivered again by Slack, with
//!   `retry_attempt`; its `event_id` is the message's source id, so it is stored once.
//! - **`disconnect`**: `refresh_requested` and `warning` (Slack is about to close the
//!   connection) open a new one with a fresh URL, at once; envelopes are read and acknowledged
//!   one at a time, so none read before is lost. `link_disabled` (Socket Mode turned off in the
//!   app's settings) stops the source, and `status` says so: no reconnect loop.
//! - **A dead socket**: a ping every [`PING`]; nothing heard for [`SILENCE`], a closed or failed
//!   connection, or a failed `apps.connections.open` → connect again after a backoff.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message as Frame;

use super::client::Args;
use super::{Inner, Outcome, approvals};
use crate::duration::Backoff;
use crate::sources::SourceContext;

/// How often the source pings Slack.
pub const PING: Duration = Duration::from_secs(20);

/// How long without a frame (a pong included) before the connection is taken for dead.
pub const SILENCE: Duration = Duration::from_secs(60);

/// How one connection ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Slack asked for a new connection (`disconnect`: `refresh_requested`, `warning`).
    Refresh,
    /// Socket Mode was turned off for the app (`disconnect`: `link_disabled`).
    LinkDisabled,
    /// The daemon is stopping.
    Shutdown,
}

/// Connects, and again whenever the connection ends, until the daemon stops or Slack disables
/// the link.
pub async fn run(inner: Arc<Inner>, cx: SourceContext) {
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60)).full_jitter();
    let mut first = true;
    loop {
        if !first {
            inner
                .counts
                .reconnects
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        first = false;
        inner.set_state(|s| s.state = "connecting".into());
        match session(&inner, &cx).await {
            Ok(End::Shutdown) => return,
            Ok(End::LinkDisabled) => {
                tracing::warn!(
                    "slack: Socket Mode was disabled for the app (link_disabled); the source stops"
                );
                inner.set_state(|s| {
                    s.state = "link_disabled".into();
                    s.error = Some("Slack disabled the app's Socket Mode connection".into());
                });
                return;
            }
            Ok(End::Refresh) => {
                tracing::info!("slack: Slack asked for a new connection; reconnecting");
                backoff.reset();
            }
            Err(cause) => {
                tracing::warn!(%cause, "slack: Socket Mode connection failed");
                inner.set_state(|s| {
                    s.state = "failing".into();
                    s.error = Some(cause);
                });
                tokio::select! {
                    _ = cx.shutdown().cancelled() => return,
                    _ = tokio::time::sleep(backoff.next()) => {}
                }
            }
        }
    }
}

/// One connection: opened, read until it ends.
async fn session(inner: &Arc<Inner>, cx: &SourceContext) -> Result<End, String> {
    inner.who_am_i().await.map_err(|e| e.to_string())?;
    let app = inner.tokens.app.as_deref().unwrap_or_default();
    let open = inner
        .api
        .call("apps.connections.open", app, Args::Form(&[]))
        .await
        .map_err(|e| e.to_string())?;
    let url = open
        .get("url")
        .and_then(Value::as_str)
        .ok_or("`apps.connections.open` gave no `url`")?;
    let (ws, _) = tokio_tungstenite::connect_async_tls_with_config(
        url,
        None,
        true,
        Some(tokio_tungstenite::Connector::Rustls(tls()?)),
    )
    .await
    .map_err(|e| format!("cannot open Slack's WebSocket: {e}"))?;
    let (mut sink, mut stream) = ws.split();
    let mut ping = tokio::time::interval_at(Instant::now() + PING, PING);
    let mut heard = Instant::now();
    loop {
        let frame = tokio::select! {
            _ = cx.shutdown().cancelled() => {
                let _ = sink.send(Frame::Close(None)).await;
                return Ok(End::Shutdown);
            }
            _ = ping.tick() => {
                if heard.elapsed() >= SILENCE {
                    return Err(format!("nothing from Slack for {} s", SILENCE.as_secs()));
                }
                sink.send(Frame::Ping(Vec::new().into())).await.map_err(|e| e.to_string())?;
                continue;
            }
            frame = stream.next() => frame,
        };
        heard = Instant::now();
        let text = match frame {
            None => return Err("Slack closed the connection".into()),
            Some(Err(e)) => return Err(format!("the connection failed: {e}")),
            Some(Ok(Frame::Text(text))) => text,
            Some(Ok(Frame::Close(_))) => return Err("Slack closed the connection".into()),
            Some(Ok(_)) => continue,
        };
        let Ok(envelope) = serde_json::from_str::<Value>(&text) else {
            tracing::warn!("slack: a frame that is not JSON was ignored");
            continue;
        };
        match on_envelope(inner, cx, &envelope).await {
            Step::Ack(id) => {
                let ack = json!({"envelope_id": id}).to_string();
                sink.send(Frame::Text(ack.into()))
                    .await
                    .map_err(|e| e.to_string())?;
                inner
                    .counts
                    .acked
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Step::Next => {}
            Step::End(end) => return Ok(end),
        }
    }
}

/// What to do after an envelope.
enum Step {
    /// Acknowledge this envelope id.
    Ack(String),
    /// Nothing: read on.
    Next,
    /// This connection ends.
    End(End),
}

/// Handles one envelope.
async fn on_envelope(inner: &Arc<Inner>, cx: &SourceContext, envelope: &Value) -> Step {
    let str_of = |k: &str| envelope.get(k).and_then(Value::as_str);
    let id = str_of("envelope_id").map(String::from);
    match str_of("type").unwrap_or_default() {
        "hello" => {
            tracing::info!("slack: connected over Socket Mode");
            inner.set_state(|s| {
                s.state = "connected".into();
                s.error = None;
            });
            Step::Next
        }
        "disconnect" => match str_of("reason") {
            Some("link_disabled") => Step::End(End::LinkDisabled),
            _ => Step::End(End::Refresh),
        },
        "events_api" => {
            let payload = envelope.get("payload").unwrap_or(&Value::Null);
            match inner.on_event(payload).await {
                Ok(outcome) => {
                    if outcome == Outcome::Duplicate {
                        tracing::debug!(retry = ?envelope.get("retry_attempt"), "slack: a redelivered event, stored before");
                    }
                    id.map_or(Step::Next, Step::Ack)
                }
                Err(e) => {
                    tracing::warn!(cause = %e, "slack: an event not stored; not acknowledged, Slack delivers it again");
                    Step::Next
                }
            }
        }
        "interactive" => {
            let payload = envelope.get("payload").unwrap_or(&Value::Null);
            match approvals::on_click(inner, cx, payload).await {
                Ok(()) => id.map_or(Step::Next, Step::Ack),
                Err(e) => {
                    tracing::warn!(cause = %e, "slack: a click not recorded; not acknowledged");
                    Step::Next
                }
            }
        }
        _ => id.map_or(Step::Next, Step::Ack),
    }
}

/// The TLS settings of the WebSocket: rustls with aws-lc-rs (as reqwest), the system's roots.
fn tls() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS: {e}"))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}
