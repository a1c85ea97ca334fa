//! `events_subscribe`: the MCP Events `events/subscribe` (webhook delivery): checks the event
//! type, its arguments and where delivery starts, then hands the subscription to the daemon's
//! webhook part ([`crate::control::EventHooks`]), which checks the endpoint, keeps the
//! subscription in the home and delivers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::EventsPoll;
use crate::control::events::{cursor_of, seq_of, unsupported};
use crate::control::{ApiError, Ctx, Op};
use crate::message::Seq;

/// Where a webhook subscription delivers.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// `webhook` (the only mode subscribed to; poll and push need no subscription).
    #[serde(default)]
    pub mode: Option<String>,
    /// The callback URL.
    #[serde(default)]
    pub url: String,
    /// The client's Standard Webhooks secret, `whsec_` + base64 of 24-64 bytes (absent on
    /// `events/unsubscribe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// A webhook subscription, made or refreshed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsSubscribe {
    /// The event type.
    pub name: String,
    /// Its arguments (the filter).
    #[serde(default)]
    pub arguments: Option<Value>,
    /// Where to deliver.
    pub delivery: WebhookDelivery,
    /// Where delivery starts when the subscription is new (null: from now).
    #[serde(default)]
    pub cursor: Option<String>,
    /// Do not replay occurrences older than this.
    #[serde(default)]
    pub max_age_ms: Option<u64>,
    /// The suggested lifetime: absent = the server's default, `null` = no expiry, else
    /// milliseconds.
    #[serde(default, deserialize_with = "present")]
    pub ttl_ms: Option<Value>,
    /// Filled in by the operation: the seq delivery starts after.
    #[serde(default, skip_deserializing)]
    pub start: Seq,
    /// Filled in by the operation: the start is later than the cursor asked for.
    #[serde(default, skip_deserializing)]
    pub truncated: bool,
}

/// `ttlMs: null` is kept apart from no `ttlMs` at all.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// `events/subscribe`'s result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscribed {
    /// The subscription's id, derived from its key (what `X-MCP-Subscription-Id` carries).
    pub id: String,
    /// When it expires unless refreshed (RFC 3339); `None` = never.
    pub refresh_before: Option<String>,
    /// Everything up to here was delivered or given up on: safe for the client to keep.
    pub cursor: Option<String>,
    /// Delivery starts later than the cursor given.
    pub truncated: bool,
    /// On a refresh: how delivery has gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_status: Option<Value>,
}

impl Op for EventsSubscribe {
    type Reply = Subscribed;

    async fn apply(mut self, cx: &Ctx<'_>) -> Result<Subscribed, ApiError> {
        let check = EventsPoll {
            name: self.name.clone(),
            arguments: self.arguments.clone(),
            ..EventsPoll::default()
        };
        check.filter()?;
        if let Some(mode) = self.delivery.mode.as_deref().filter(|m| *m != "webhook") {
            return Err(unsupported(
                "deliveryMode",
                mode,
                format!(
                    "events: `events/subscribe` takes delivery mode \"webhook\", not \"{mode}\"; \
                     poll with `events/poll`, push with `events/stream`"
                ),
            ));
        }
        let Some(hooks) = cx.parts().event_hooks() else {
            return Err(unsupported(
                "deliveryMode",
                "webhook",
                "events: this daemon delivers no webhooks",
            ));
        };
        let inbox = cx.inbox();
        (self.start, self.truncated) = match &self.cursor {
            None => (inbox.last_seq(), false),
            Some(c) => {
                let seq = seq_of(c)?;
                (seq, !inbox.holds_after(seq).await)
            }
        };
        if self.cursor.is_some()
            && let Some(ms) = self.max_age_ms
        {
            // The floor: start at the first message no older than `maxAgeMs`.
            let floor = chrono::Utc::now() - chrono::Duration::milliseconds(ms as i64);
            let young = inbox.read_after(self.start, 1_000).await;
            if let Some(first) = young.iter().find(|m| m.timestamp >= floor)
                && first.seq > self.start + 1
            {
                self.start = first.seq - 1;
                self.truncated = true;
            }
        }
        self.cursor = Some(cursor_of(self.start));
        hooks.subscribe(self).await
    }
}
