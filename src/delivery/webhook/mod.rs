//! MCP Events webhook delivery (`events/subscribe`), written from the draft
//! (modelcontextprotocol/experimental-ext-triggers-events, `docs/design-sketch-proposal.md`,
//! "Webhook-Based Delivery" and "Webhook Security"):
//!
//! - a subscription is keyed on (principal, `delivery.url`, name, canonical arguments); its
//!   `id` is derived from the key; `events/subscribe` again with the same key refreshes it
//!   (TTL re-granted, secret replaced, suspended delivery resumed);
//! - it is refused without an authenticated principal (-32012 under `http.disableAuth`), for a
//!   secret that is not `whsec_` + base64 of 24-64 bytes, a URL that is not `https://` (plain
//!   `http://` to loopback only with `mcp.events.allowHttpLoopback`) or a literal address that
//!   is not public (-32602), a name that resolves to one (-32015), and before the first
//!   delivery the endpoint must echo a `verification` challenge (-32015 `challenge_failed`);
//! - each occurrence is POSTed signed per Standard Webhooks (the `standardwebhooks` crate:
//!   `webhook-id` = the eventId, `webhook-timestamp`, `webhook-signature: v1,...`) with
//!   `X-MCP-Subscription-Id`; the name is resolved and checked at every delivery and the
//!   request goes to the checked address, never following a redirect;
//! - a failed delivery is retried with the one [`Backoff`] (full jitter); after
//!   `mcp.events.maxAttempts` tries delivery is suspended (`deliveryStatus.active: false`,
//!   `lastError` a category) until the next refresh, and nothing is skipped;
//! - subscriptions and their cursors (the seq of the last occurrence the endpoint took) are
//!   kept in the home (`events-webhooks.json`), so a restart neither loses nor repeats a
//!   delivery; a subscription past its `refreshBefore` is dropped.
//!
//! Each subscription reads the inbox on its own (a run of `events_poll` calls that wait), so a
//! slow endpoint holds only its own subscription back, never ingest.

pub mod address;
mod send;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::backend::Api;
use crate::control::events::{cursor_of, endpoint_error, exhausted, forbidden, invalid, not_found};
use crate::control::local::BoxFuture;
use crate::control::ops::{EventsPoll, EventsSubscribe, EventsUnsubscribe, Subscribed};
use crate::control::{ApiError, EventHooks, Parts};
use crate::delivery::mcp::events::EventsSettings;
use crate::duration::Backoff;
use crate::message::Seq;

/// How long a webhook post in flight may still finish once its delivery stops (shutdown,
/// unsubscribe): the endpoint may have taken it, and a post recorded is not sent again.
const IN_FLIGHT: Duration = Duration::from_secs(2);

/// The one principal: whoever holds the daemon's token (HTTP) or owns its home (stdio).
const PRINCIPAL: &str = "owner";

/// The file in the home.
pub const FILE: &str = "events-webhooks.json";

/// One subscription, as kept in the home.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sub {
    id: String,
    url: String,
    name: String,
    arguments: Value,
    secret: String,
    /// Every occurrence up to this seq was taken by the endpoint.
    cursor: Seq,
    /// `None`: no expiry.
    expires: Option<DateTime<Utc>>,
    active: bool,
    #[serde(default)]
    last_delivery_at: Option<DateTime<Utc>>,
    #[serde(default)]
    last_error: Option<String>,
    #[serde(default)]
    failed_since: Option<DateTime<Utc>>,
}

impl Sub {
    fn status(&self) -> Value {
        let mut status = json!({
            "active": self.active,
            "lastDeliveryAt": self.last_delivery_at.map(|t| t.to_rfc3339()),
            "lastError": self.last_error,
        });
        if let Some(since) = self.failed_since {
            status["failedSince"] = json!(since.to_rfc3339());
        }
        status
    }
}

/// Counters for `stats` and `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Occurrences the endpoints took.
    pub delivered: AtomicU64,
    /// Delivery attempts that failed.
    pub failures: AtomicU64,
    /// Subscriptions dropped at their `refreshBefore`.
    pub expired: AtomicU64,
    /// Milliseconds between the last delivered occurrence's arrival and its delivery.
    pub lag_ms: AtomicU64,
}

/// The webhook part of the daemon.
#[derive(Clone)]
pub struct Webhooks {
    inner: Arc<Inner>,
}

struct Inner {
    settings: EventsSettings,
    disable_auth: bool,
    path: Option<PathBuf>,
    subs: Mutex<BTreeMap<String, Sub>>,
    /// Per running subscription: ends it, wakes it (a refresh).
    running: Mutex<BTreeMap<String, (CancellationToken, Arc<tokio::sync::Notify>)>>,
    started: OnceLock<(Api, tokio_util::task::TaskTracker, CancellationToken)>,
    counters: Counters,
}

impl Webhooks {
    /// The part, its subscriptions read from `home` (none without one); `disable_auth` is
    /// `http.disableAuth` (no principal: no webhooks).
    pub fn new(
        settings: EventsSettings,
        disable_auth: bool,
        home: Option<&crate::home::Home>,
    ) -> Webhooks {
        let path = home.map(|h| h.dir().join(FILE));
        let subs = path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice::<Vec<Sub>>(&b).ok())
            .unwrap_or_default()
            .into_iter()
            .map(|s| (s.id.clone(), s))
            .collect();
        Webhooks {
            inner: Arc::new(Inner {
                settings,
                disable_auth,
                path,
                subs: Mutex::new(subs),
                running: Mutex::default(),
                started: OnceLock::new(),
                counters: Counters::default(),
            }),
        }
    }

    /// Registers the part: `events/subscribe` reaches it; `stats` and `/metrics` show it.
    pub fn parts(&self, parts: Parts) -> Parts {
        let (status, metrics) = (self.clone(), self.clone());
        parts
            .event_hooks_by(Arc::new(self.clone()))
            .status("events", move |_| status.report())
            .metrics(move |_, out| metrics.scrape(out))
    }

    /// Starts delivering to every subscription kept in the home.
    pub fn start(
        &self,
        api: Api,
        tasks: tokio_util::task::TaskTracker,
        shutdown: CancellationToken,
    ) {
        let _ = self.inner.started.set((api, tasks, shutdown));
        let ids: Vec<String> = self.inner.subs.lock().unwrap().keys().cloned().collect();
        for id in ids {
            self.run(id);
        }
    }

    fn report(&self) -> Value {
        let c = &self.inner.counters;
        let subs = self.inner.subs.lock().unwrap();
        json!({
            "subscriptions": {"webhook": subs.len()},
            "streams": crate::delivery::mcp::events::OPEN_STREAMS.load(Ordering::Relaxed),
            "polls": crate::control::events::POLLS.load(Ordering::Relaxed),
            "suspended": subs.values().filter(|s| !s.active).count(),
            "delivered": c.delivered.load(Ordering::Relaxed),
            "failures": c.failures.load(Ordering::Relaxed),
            "expired": c.expired.load(Ordering::Relaxed),
            "lag_ms": c.lag_ms.load(Ordering::Relaxed),
        })
    }

    fn scrape(&self, out: &mut crate::metrics::Scrape) {
        use crate::metrics::count;
        let c = &self.inner.counters;
        let (subs, suspended) = {
            let subs = self.inner.subs.lock().unwrap();
            (
                subs.len() as u64,
                subs.values().filter(|s| !s.active).count() as u64,
            )
        };
        out.gauge(
            "switchboard_events_subscriptions",
            "MCP Events webhook subscriptions, by state",
        )
        .with(
            &[("mode", "webhook"), ("state", "active")],
            count(subs - suspended),
        )
        .with(
            &[("mode", "webhook"), ("state", "suspended")],
            count(suspended),
        );
        out.gauge(
            "switchboard_events_streams",
            "MCP Events push streams open in the daemon (HTTP)",
        )
        .value(count(
            crate::delivery::mcp::events::OPEN_STREAMS.load(Ordering::Relaxed),
        ));
        out.counter(
            "switchboard_events_polls_total",
            "MCP Events polls answered (each stream turn included)",
        )
        .value(count(crate::control::events::POLLS.load(Ordering::Relaxed)));
        out.counter(
            "switchboard_events_webhook_deliveries_total",
            "Occurrences the webhook endpoints took",
        )
        .value(count(c.delivered.load(Ordering::Relaxed)));
        out.counter(
            "switchboard_events_webhook_failures_total",
            "Webhook delivery attempts that failed",
        )
        .value(count(c.failures.load(Ordering::Relaxed)));
        out.gauge(
            "switchboard_events_webhook_lag_ms",
            "Milliseconds from the last delivered occurrence's time to its delivery",
        )
        .value(count(c.lag_ms.load(Ordering::Relaxed)));
    }

    fn save(&self) {
        let Some(path) = &self.inner.path else { return };
        let all: Vec<Sub> = self.inner.subs.lock().unwrap().values().cloned().collect();
        let bytes = serde_json::to_vec_pretty(&all).unwrap_or_default();
        if let Err(e) = crate::home::write_atomic(path, &bytes) {
            tracing::warn!(cause = %e, file = %path.display(), "events: cannot keep the webhook subscriptions; a restart may lose or repeat deliveries");
        }
    }

    fn grant(&self, ttl: Option<&Value>) -> Option<DateTime<Utc>> {
        let s = &self.inner.settings;
        let ttl = match ttl {
            None => s.default_ttl,
            // No expiry asked: granted the longest finite TTL (the draft lets a server decline).
            Some(Value::Null) => s.max_ttl,
            Some(v) => Duration::from_millis(v.as_u64().unwrap_or(0)).clamp(s.min_ttl, s.max_ttl),
        };
        Some(Utc::now() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::hours(1)))
    }
}

/// Canonical JSON: object keys sorted, recursively.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, Value> =
                m.iter().map(|(k, v)| (k, canonical(v))).collect();
            Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The subscription id derived from its key.
fn derive_id(url: &str, name: &str, arguments: &Value) -> String {
    use sha2::{Digest, Sha256};
    let key = json!([PRINCIPAL, url, name, canonical(arguments)]).to_string();
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("sub_{hex}")
}

/// `whsec_` + base64 of 24-64 bytes, or why not.
fn check_secret(secret: Option<&str>) -> Result<String, ApiError> {
    use base64::Engine;
    let secret = secret.unwrap_or_default();
    let ok = secret
        .strip_prefix("whsec_")
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .is_some_and(|k| (24..=64).contains(&k.len()));
    if !ok {
        return Err(invalid(
            "events: `delivery.secret` is not a Standard Webhooks secret; give `whsec_` \
             followed by base64 of 24 to 64 random bytes",
        ));
    }
    Ok(secret.to_string())
}

/// The URL checked as the draft asks: `https://`, plain `http://` to loopback only when
/// allowed, a literal address only a public one (or loopback when allowed).
fn check_url(url: &str, allow_loopback: bool) -> Result<reqwest::Url, ApiError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| invalid(format!("events: `delivery.url` \"{url}\": {e}")))?;
    let host = parsed.host_str().unwrap_or_default().to_string();
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .ok();
    let loopback = literal.is_some_and(|ip| ip.is_loopback()) || host == "localhost";
    match parsed.scheme() {
        "https" => {}
        "http" if allow_loopback && loopback => {}
        "http" if loopback => {
            return Err(invalid(format!(
                "events: `delivery.url` \"{url}\" is plain http; webhooks go over https only \
                 (to loopback over http only with `mcp.events.allowHttpLoopback`)"
            )));
        }
        scheme => {
            return Err(invalid(format!(
                "events: `delivery.url` \"{url}\" is not https (it is \"{scheme}\"); webhooks \
                 go over https only"
            )));
        }
    }
    if let Some(ip) = literal
        && let Some(why) = address::refused(ip, allow_loopback)
    {
        return Err(invalid(format!(
            "events: `delivery.url` \"{url}\" is a {why} address; webhooks go only to public \
             addresses"
        )));
    }
    Ok(parsed)
}

impl Webhooks {
    async fn subscribe_now(&self, req: EventsSubscribe) -> Result<Subscribed, ApiError> {
        if self.inner.disable_auth {
            return Err(forbidden(
                "events: webhooks need an authenticated principal, and `http.disableAuth` is \
                 set; poll with `events/poll` or push with `events/stream`, or turn auth back on",
            ));
        }
        let secret = check_secret(req.delivery.secret.as_deref())?;
        let allow = self.inner.settings.allow_http_loopback;
        let url = check_url(&req.delivery.url, allow)?;
        let arguments = req.arguments.clone().unwrap_or(json!({}));
        let id = derive_id(&req.delivery.url, &req.name, &arguments);
        let expires = self.grant(req.ttl_ms.as_ref());
        let refreshed = {
            let mut subs = self.inner.subs.lock().unwrap();
            subs.get_mut(&id).map(|sub| {
                sub.secret = secret.clone();
                sub.expires = expires;
                let status = sub.status();
                sub.active = true;
                (sub.cursor, status)
            })
        };
        if let Some((cursor, status)) = refreshed {
            self.save();
            if let Some((_, wake)) = self.inner.running.lock().unwrap().get(&id) {
                wake.notify_one();
            }
            return Ok(Subscribed {
                id,
                refresh_before: expires.map(|t| t.to_rfc3339()),
                cursor: Some(cursor_of(cursor)),
                truncated: false,
                delivery_status: Some(status),
            });
        }
        let port = url.port_or_known_default().unwrap_or(443);
        let why = |(reason, why): (&str, String)| {
            endpoint_error(
                reason,
                format!("events: `delivery.url` \"{}\": {why}", req.delivery.url),
            )
        };
        address::resolve(url.host_str().unwrap_or_default(), port, allow)
            .await
            .map_err(why)?;
        let max = self.inner.settings.max_subscriptions;
        if self.inner.subs.lock().unwrap().len() >= max {
            return Err(exhausted(
                "subscriptions",
                max,
                format!(
                    "events: already {max} webhook subscriptions (`mcp.events.maxSubscriptions`); unsubscribe one first"
                ),
            ));
        }
        let target = send::Target::new(&url, &id, &secret, allow);
        send::verify(&target).await.map_err(why)?;
        let sub = Sub {
            id: id.clone(),
            url: req.delivery.url.clone(),
            name: req.name.clone(),
            arguments,
            secret,
            cursor: req.start,
            expires,
            active: true,
            last_delivery_at: None,
            last_error: None,
            failed_since: None,
        };
        self.inner.subs.lock().unwrap().insert(id.clone(), sub);
        self.save();
        self.run(id.clone());
        Ok(Subscribed {
            id,
            refresh_before: expires.map(|t| t.to_rfc3339()),
            cursor: Some(cursor_of(req.start)),
            truncated: req.truncated,
            delivery_status: None,
        })
    }

    fn unsubscribe_now(&self, req: EventsUnsubscribe) -> Result<(), ApiError> {
        let arguments = req.arguments.clone().unwrap_or(json!({}));
        let id = derive_id(&req.delivery.url, &req.name, &arguments);
        if self.inner.subs.lock().unwrap().remove(&id).is_none() {
            return Err(not_found(
                "subscription",
                format!(
                    "events: no webhook subscription to \"{}\" for \"{}\" with these arguments",
                    req.delivery.url, req.name
                ),
            ));
        }
        if let Some((stop, _)) = self.inner.running.lock().unwrap().remove(&id) {
            stop.cancel();
        }
        self.save();
        Ok(())
    }

    /// Starts the delivery task of subscription `id`.
    fn run(&self, id: String) {
        let Some((api, tasks, shutdown)) = self.inner.started.get() else {
            return;
        };
        let stop = shutdown.child_token();
        let wake = Arc::new(tokio::sync::Notify::new());
        self.inner
            .running
            .lock()
            .unwrap()
            .insert(id.clone(), (stop.clone(), wake.clone()));
        let (this, api) = (self.clone(), api.clone());
        // Stopped between posts; a post in flight gets `IN_FLIGHT` to finish, so that one the
        // endpoint took is recorded before a shutdown and not delivered again after it.
        tasks.spawn(async move { this.deliver_loop(&api, &id, &wake, &stop).await });
    }

    fn sub(&self, id: &str) -> Option<Sub> {
        self.inner.subs.lock().unwrap().get(id).cloned()
    }

    /// Drops the subscription when it is past its `refreshBefore`; whether it did.
    fn expire(&self, id: &str) -> bool {
        let mut subs = self.inner.subs.lock().unwrap();
        let due = subs
            .get(id)
            .is_some_and(|s| s.expires.is_some_and(|t| t <= Utc::now()));
        if due {
            subs.remove(id);
            drop(subs);
            self.inner.running.lock().unwrap().remove(id);
            self.inner.counters.expired.fetch_add(1, Ordering::Relaxed);
            tracing::info!(subscription = %id, "events: webhook subscription expired (not refreshed before `refreshBefore`)");
            self.save();
        }
        due
    }

    async fn deliver_loop(
        &self,
        api: &Api,
        id: &str,
        wake: &tokio::sync::Notify,
        stop: &CancellationToken,
    ) {
        let heartbeat = self.inner.settings.heartbeat;
        let mut target: Option<send::Target> = None;
        loop {
            if self.expire(id) {
                return;
            }
            let Some(sub) = self.sub(id) else { return };
            let until_expiry = sub
                .expires
                .map(|t| (t - Utc::now()).to_std().unwrap_or_default())
                .unwrap_or(heartbeat);
            let poll = EventsPoll {
                name: sub.name.clone(),
                arguments: Some(sub.arguments.clone()),
                cursor: Some(cursor_of(sub.cursor)),
                max_events: Some(100),
                wait_ms: heartbeat
                    .min(until_expiry + Duration::from_millis(1))
                    .as_millis() as u64,
                ..EventsPoll::default()
            };
            let Some(polled) = stop.run_until_cancelled(api.call(poll)).await else {
                return;
            };
            let page = match polled {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(subscription = %id, cause = %e, "events: cannot read the inbox for a webhook subscription; retrying");
                    let slept = tokio::time::sleep(Duration::from_secs(1));
                    if stop.run_until_cancelled(slept).await.is_none() {
                        return;
                    }
                    continue;
                }
            };
            let url = reqwest::Url::parse(&sub.url).ok();
            let Some(url) = url else { return };
            let t = target.get_or_insert_with(|| {
                send::Target::new(
                    &url,
                    id,
                    &sub.secret,
                    self.inner.settings.allow_http_loopback,
                )
            });
            t.secret.clone_from(&sub.secret);
            for event in &page.events {
                if !self.deliver_one(t, id, event, wake, stop).await {
                    return;
                }
            }
            if page.events.is_empty()
                && let Some(cursor) = page
                    .cursor
                    .as_deref()
                    .and_then(|c| crate::control::events::seq_of(c).ok())
            {
                // Nothing matched up to here: the watermark moves on.
                if let Some(s) = self.inner.subs.lock().unwrap().get_mut(id) {
                    s.cursor = s.cursor.max(cursor);
                }
            }
        }
    }

    /// Delivers one occurrence, retrying with backoff, suspending after too many tries until a
    /// refresh; false when the subscription is gone or its delivery stops.
    async fn deliver_one(
        &self,
        target: &mut send::Target,
        id: &str,
        event: &crate::control::events::Occurrence,
        wake: &tokio::sync::Notify,
        stop: &CancellationToken,
    ) -> bool {
        let s = &self.inner.settings;
        let mut backoff = Backoff::new(s.retry_first, s.retry_max).full_jitter();
        let mut tries = 0;
        let body = serde_json::to_vec(event).unwrap_or_default();
        loop {
            if stop.is_cancelled() || self.sub(id).is_none() || self.expire(id) {
                return false;
            }
            let posted = tokio::select! {
                posted = target.post(&event.event_id, &body) => posted,
                () = async {
                    stop.cancelled().await;
                    tokio::time::sleep(IN_FLIGHT).await;
                } => return false,
            };
            match posted {
                Ok(()) => {
                    self.delivered(id, event);
                    return true;
                }
                Err(send::Failed::Permanent(reason)) => {
                    // 413: not retried; the occurrence is given up.
                    self.failed(id, reason, false);
                    self.delivered(id, event);
                    return true;
                }
                Err(send::Failed::Retry(reason)) => {
                    tries += 1;
                    let suspend = tries >= s.max_attempts;
                    self.failed(id, reason, suspend);
                    if suspend {
                        tracing::warn!(subscription = %id, reason, "events: webhook delivery suspended until the next refresh");
                        if stop.run_until_cancelled(wake.notified()).await.is_none() {
                            return false;
                        }
                        tries = 0;
                        backoff.reset();
                    } else {
                        let slept = tokio::time::sleep(backoff.next());
                        if stop.run_until_cancelled(slept).await.is_none() {
                            return false;
                        }
                    }
                }
            }
        }
    }

    fn delivered(&self, id: &str, event: &crate::control::events::Occurrence) {
        let now = Utc::now();
        if let Some(s) = self.inner.subs.lock().unwrap().get_mut(id) {
            if let Some(seq) = event.seq() {
                s.cursor = s.cursor.max(seq);
            }
            s.last_delivery_at = Some(now);
            s.failed_since = None;
        }
        let c = &self.inner.counters;
        c.delivered.fetch_add(1, Ordering::Relaxed);
        if let Ok(at) = DateTime::parse_from_rfc3339(&event.timestamp) {
            let lag = (now - at.with_timezone(&Utc)).num_milliseconds().max(0) as u64;
            c.lag_ms.store(lag, Ordering::Relaxed);
        }
        self.save();
    }

    fn failed(&self, id: &str, reason: &'static str, suspend: bool) {
        self.inner.counters.failures.fetch_add(1, Ordering::Relaxed);
        if let Some(s) = self.inner.subs.lock().unwrap().get_mut(id) {
            s.last_error = Some(reason.to_string());
            s.failed_since.get_or_insert_with(Utc::now);
            if suspend {
                s.active = false;
            }
        }
        self.save();
    }
}

impl EventHooks for Webhooks {
    fn subscribe(&self, request: EventsSubscribe) -> BoxFuture<'_, Result<Subscribed, ApiError>> {
        Box::pin(self.subscribe_now(request))
    }

    fn unsubscribe(&self, request: EventsUnsubscribe) -> BoxFuture<'_, Result<(), ApiError>> {
        Box::pin(async move { self.unsubscribe_now(request) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_stable_over_argument_order_and_differs_by_url() {
        let a = derive_id(
            "https://h/x",
            "switchboard.message",
            &json!({"server": "a", "channel": "b"}),
        );
        let b = derive_id(
            "https://h/x",
            "switchboard.message",
            &json!({"channel": "b", "server": "a"}),
        );
        let c = derive_id(
            "https://h/y",
            "switchboard.message",
            &json!({"channel": "b", "server": "a"}),
        );
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.starts_with("sub_") && a.len() == 20);
    }

    #[test]
    fn secrets_and_urls_are_checked_as_the_draft_says() {
        let ok = format!("whsec_{}", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        assert!(check_secret(Some(&ok)).is_ok());
        assert!(check_secret(Some("whsec_c2hvcnQ=")).is_err());
        assert!(check_secret(Some("secret")).is_err());
        assert!(check_url("https://hooks.example.com/x", false).is_ok());
        assert!(check_url("http://hooks.example.com/x", false).is_err());
        assert!(check_url("http://127.0.0.1:9/x", false).is_err());
        assert!(check_url("http://127.0.0.1:9/x", true).is_ok());
        assert!(check_url("https://10.0.0.1/x", true).is_err());
        assert!(check_url("https://[fd00::1]/x", false).is_err());
    }
}
