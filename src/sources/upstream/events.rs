//! An upstream MCP Events server as a source, written from the draft
//! (modelcontextprotocol/experimental-ext-triggers-events, `docs/design-sketch-proposal.md`):
//! for each entry of the upstream's `events` (`{"name", "arguments", "channel"}`), switchboard
//! asks `events/list`, then opens an `events/stream` (or runs `events/poll` when the event type
//! offers only that) from the cursor it kept, and appends each occurrence as a message
//! (`server` = the upstream, `id` = the `eventId`, the channel the entry names, `data` as the
//! content and its top-level values as metadata). The cursor is kept in the home
//! (`upstream-events.json`) only after the messages before it are durable, so a restart
//! resumes without a gap, and a repeat is absorbed by the inbox's source-id window.
//!
//! Notifications reach this consumer in wire order through the connection's [`super::ordered`]
//! wrapper (bounded: a flooding upstream is slowed down, never buffered without bound).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ClientRequest, CustomRequest, ServerResult};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::config::{EventSubscription, UpstreamConfig};
use crate::message::NewMessage;
use crate::sources::SourceContext;

/// One `notifications/events/*`: its method and params.
pub type Note = (String, Value);

/// Notifications waiting for the consumer before the connection's reader waits.
pub const NOTES_CAPACITY: usize = 256;

/// The file in the home.
pub const FILE: &str = "upstream-events.json";

/// The shortest wait between polls, whatever `nextPollMs` says (the draft's default floor).
const POLL_FLOOR: Duration = Duration::from_secs(1);

/// The kept cursors, by upstream, event and arguments.
#[derive(Debug, Default)]
pub struct Cursors {
    path: Option<PathBuf>,
    map: Mutex<BTreeMap<String, Value>>,
}

impl Cursors {
    /// The cursors kept at `path`.
    pub fn open(path: PathBuf) -> Cursors {
        let map = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Cursors {
            path: Some(path),
            map: Mutex::new(map),
        }
    }

    fn get(&self, key: &str) -> Value {
        self.map
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or(Value::Null)
    }

    fn set(&self, key: &str, cursor: &Value) {
        let bytes = {
            let mut map = self.map.lock().unwrap();
            if map.get(key) == Some(cursor) {
                return;
            }
            map.insert(key.to_string(), cursor.clone());
            serde_json::to_vec_pretty(&*map).unwrap_or_default()
        };
        if let Some(path) = &self.path
            && let Err(e) = crate::home::write_atomic(path, &bytes)
        {
            tracing::warn!(cause = %e, "events: cannot keep an upstream's cursor; a restart may replay from an older one");
        }
    }
}

fn key(up: &str, sub: &EventSubscription) -> String {
    let args = sub.arguments.clone().unwrap_or(json!({}));
    format!("{up} {} {args}", sub.name)
}

/// An occurrence as a message.
fn message(up: &UpstreamConfig, sub: &EventSubscription, occurrence: &Value) -> Option<NewMessage> {
    let data = occurrence.get("data").cloned().unwrap_or(Value::Null);
    let channel = sub
        .channel
        .clone()
        .unwrap_or_else(|| format!("events/{}", sub.name));
    let content = match &data {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut m = NewMessage::new(&up.name, &channel, &content);
    m.id = occurrence
        .get("eventId")
        .and_then(Value::as_str)
        .map(str::to_string);
    m.metadata.insert("event", &sub.name);
    if let Value::Object(fields) = &data {
        for (k, v) in fields {
            match v {
                Value::String(s) => m.metadata.insert(k, s),
                Value::Number(_) | Value::Bool(_) => m.metadata.insert(k, &v.to_string()),
                _ => {}
            }
        }
    }
    Some(m)
}

async fn request(peer: &Peer<RoleClient>, method: &str, params: Value) -> Result<Value, String> {
    let req = ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)));
    match peer.send_request(req).await {
        Ok(ServerResult::CustomResult(r)) => Ok(r.0),
        Ok(other) => serde_json::to_value(other).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Consumes the upstream's configured events on this connection; returns only when there is
/// nothing to consume (then the connection goes on without it).
pub async fn consume(
    cx: SourceContext,
    up: Arc<UpstreamConfig>,
    peer: Peer<RoleClient>,
    mut notes: mpsc::Receiver<Note>,
    cursors: Arc<Cursors>,
) {
    if up.events.is_empty() {
        return std::future::pending().await;
    }
    let types = match request(&peer, "events/list", json!({})).await {
        Ok(list) => list["events"].as_array().cloned().unwrap_or_default(),
        Err(e) => {
            tracing::warn!(upstream = %up.name, cause = %e, "events: the upstream answers no `events/list`; its `events` are not consumed");
            return std::future::pending().await;
        }
    };
    // Streams by request id; polls run beside them.
    let mut streams: Vec<(Value, usize, rmcp::service::RequestHandle<RoleClient>)> = Vec::new();
    let mut polls = futures::stream::FuturesUnordered::new();
    for (i, sub) in up.events.iter().enumerate() {
        let modes = types
            .iter()
            .find(|t| t["name"] == sub.name.as_str())
            .map(|t| t["delivery"].clone());
        let has = |m: &str| {
            modes
                .as_ref()
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|d| d == m))
        };
        let cursor = cursors.get(&key(&up.name, sub));
        if has("push") {
            let params = json!({"name": sub.name, "arguments": sub.arguments.clone().unwrap_or(json!({})), "cursor": cursor});
            let req =
                ClientRequest::CustomRequest(CustomRequest::new("events/stream", Some(params)));
            match peer
                .send_request_with_option(req, PeerRequestOptions::no_options())
                .await
            {
                Ok(handle) => {
                    let id = serde_json::to_value(&handle.id).unwrap_or_default();
                    streams.push((id, i, handle));
                }
                Err(e) => {
                    tracing::warn!(upstream = %up.name, event = %sub.name, cause = %e, "events: cannot open the stream")
                }
            }
        } else if has("poll") {
            polls.push(poll_loop(&cx, &up, &peer, i, &cursors));
        } else {
            tracing::warn!(upstream = %up.name, event = %sub.name, "events: the upstream offers no such event type by push or poll; not consumed");
        }
    }
    use futures::StreamExt;
    loop {
        tokio::select! {
            note = notes.recv() => {
                let Some((method, params)) = note else { return std::future::pending().await };
                let sub_id = &params["_meta"][crate::control::events::SUBSCRIPTION_ID_META];
                let Some(i) = streams.iter().find(|(id, ..)| id == sub_id).map(|s| s.1) else {
                    continue;
                };
                on_note(&cx, &up, i, &method, &params, &cursors).await;
            }
            _ = polls.next(), if !polls.is_empty() => {}
        }
    }
}

/// One stream notification: an event appended (then its cursor kept), a heartbeat's or an
/// `active`'s cursor kept.
async fn on_note(
    cx: &SourceContext,
    up: &UpstreamConfig,
    i: usize,
    method: &str,
    params: &Value,
    cursors: &Cursors,
) {
    let sub = &up.events[i];
    match method {
        "notifications/events/event" => {
            if let Some(m) = message(up, sub, params)
                && cx.append(vec![m], &up.name).await.is_err()
            {
                tracing::warn!(upstream = %up.name, event = %sub.name, "events: an occurrence was not stored; its cursor is not kept");
                return;
            }
        }
        "notifications/events/active" | "notifications/events/heartbeat" => {}
        "notifications/events/error" => {
            tracing::warn!(upstream = %up.name, event = %sub.name, error = %params["error"], "events: the upstream reports an error on the stream");
            return;
        }
        _ => return,
    }
    if params.get("truncated") == Some(&Value::Bool(true)) {
        tracing::warn!(upstream = %up.name, event = %sub.name, "events: the upstream skipped occurrences (truncated)");
    }
    if let Some(cursor) = params.get("cursor") {
        cursors.set(&key(&up.name, sub), cursor);
    }
}

/// `events/poll` at the upstream's pace, from the kept cursor.
async fn poll_loop(
    cx: &SourceContext,
    up: &UpstreamConfig,
    peer: &Peer<RoleClient>,
    i: usize,
    cursors: &Cursors,
) {
    let sub = &up.events[i];
    let k = key(&up.name, sub);
    loop {
        let params = json!({"name": sub.name, "arguments": sub.arguments.clone().unwrap_or(json!({})),
                            "cursor": cursors.get(&k)});
        let page = match request(peer, "events/poll", params).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(upstream = %up.name, event = %sub.name, cause = %e, "events: poll failed");
                tokio::time::sleep(POLL_FLOOR * 5).await;
                continue;
            }
        };
        let batch: Vec<NewMessage> = page["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| message(up, sub, o))
            .collect();
        if !batch.is_empty() && cx.append(batch, &up.name).await.is_err() {
            tokio::time::sleep(POLL_FLOOR).await;
            continue;
        }
        cursors.set(&k, &page["cursor"]);
        if page["hasMore"] != true {
            let next = Duration::from_millis(page["nextPollMs"].as_u64().unwrap_or(5000));
            tokio::time::sleep(next.max(POLL_FLOOR)).await;
        }
    }
}
