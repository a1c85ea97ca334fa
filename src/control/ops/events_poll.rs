//! `events_poll`: the MCP Events `events/poll` (and, with a wait, each turn of `events/stream`
//! and of a webhook subscription's delivery): the `switchboard.message` occurrences after a
//! cursor, read from the inbox (ring, then journal); no second store. The cursor is the seq of
//! the last message looked at, so a poll resumes exactly where the last one ended, across
//! daemon restarts; one older than what the journal keeps comes back `truncated`.

use std::time::Duration;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::control::events::{
    MESSAGE_EVENT, Occurrence, cursor_of, invalid, not_found, seq_of,
};
use crate::control::{ApiError, Ctx, Op};
use crate::message::Seq;
use crate::rules::{MessageFilter, RawFilter};

/// The most occurrences one poll returns, whatever `maxEvents` asks.
pub const MAX_EVENTS: usize = 1000;
/// What one poll returns when `maxEvents` is not given.
const DEFAULT_EVENTS: usize = 100;
/// The most messages one poll looks at; past it the page is `hasMore` with the cursor there.
const SCAN_LIMIT: usize = 10_000;
/// Messages read from the inbox at a time.
const BATCH: usize = 256;
/// `nextPollMs`: how soon a poller should come back when nothing more is waiting.
pub const NEXT_POLL_MS: u64 = 2000;
/// The longest a call waits for a first occurrence (a stream's heartbeat comes sooner).
const MAX_WAIT_MS: u64 = 60_000;

/// The occurrences after a cursor.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsPoll {
    /// The event type.
    pub name: String,
    /// Its arguments (the filter).
    #[serde(default)]
    pub arguments: Option<Value>,
    /// Where the last page ended; `None` = from now.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Do not replay occurrences older than this.
    #[serde(default)]
    pub max_age_ms: Option<u64>,
    /// At most this many occurrences.
    #[serde(default)]
    pub max_events: Option<usize>,
    /// Wait up to this long for a first occurrence (0: answer at once).
    #[serde(default)]
    pub wait_ms: u64,
}

/// One page (`events/poll`'s result).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsPage {
    /// Oldest first.
    pub events: Vec<Occurrence>,
    /// Where the next poll resumes.
    pub cursor: Option<String>,
    /// Occurrences between the given cursor and this page were skipped (the journal no
    /// longer keeps them, or `maxAgeMs` left them out).
    pub truncated: bool,
    /// More are waiting: poll again at once.
    pub has_more: bool,
    /// When to poll next otherwise.
    pub next_poll_ms: u64,
}

impl EventsPoll {
    /// The filter its arguments say, or -32011 / -32602.
    pub fn filter(&self) -> Result<MessageFilter, ApiError> {
        if self.name != MESSAGE_EVENT {
            return Err(not_found(
                "event",
                format!(
                    "events: no event type \"{}\"; `events/list` names them ({MESSAGE_EVENT})",
                    self.name
                ),
            ));
        }
        let raw: RawFilter = match &self.arguments {
            None | Some(Value::Null) => RawFilter::default(),
            Some(args) => serde_json::from_value(args.clone())
                .map_err(|e| invalid(format!("events: `arguments` of \"{}\": {e}", self.name)))?,
        };
        MessageFilter::compile(&raw)
            .map_err(|e| invalid(format!("events: `arguments` of \"{}\": {e}", self.name)))
    }
}

impl Op for EventsPoll {
    type Reply = EventsPage;

    fn deadline(&self) -> Duration {
        crate::control::CALL_DEADLINE + Duration::from_millis(self.wait_ms.min(MAX_WAIT_MS))
    }

    async fn apply(self, cx: &Ctx<'_>) -> Result<EventsPage, ApiError> {
        let filter = self.filter()?;
        crate::control::events::POLLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let inbox = cx.inbox();
        let Some(cursor) = &self.cursor else {
            // Null: from now. No events; the position to resume from.
            return Ok(EventsPage {
                cursor: Some(cursor_of(inbox.last_seq())),
                next_poll_ms: NEXT_POLL_MS,
                ..EventsPage::default()
            });
        };
        let after = seq_of(cursor)?;
        let mut truncated = !inbox.holds_after(after).await;
        let floor = self
            .max_age_ms
            .map(|ms| Utc::now() - chrono::Duration::milliseconds(ms.min(i64::MAX as u64) as i64));
        let max = self.max_events.unwrap_or(DEFAULT_EVENTS).clamp(1, MAX_EVENTS);
        let wait = Duration::from_millis(self.wait_ms.min(MAX_WAIT_MS));
        let until = tokio::time::Instant::now() + wait;
        let mut committed = inbox.committed();
        let mut pos = after;
        loop {
            let scan = scan(inbox, &filter, pos, max, floor).await;
            truncated |= scan.aged_out;
            if !scan.events.is_empty() || scan.has_more || wait.is_zero() {
                return Ok(scan.page(truncated));
            }
            pos = scan.pos;
            let woke = tokio::select! {
                r = committed.wait_for(|s| s > pos) => r.is_ok(),
                _ = tokio::time::sleep_until(until) => false,
                _ = cx.cancel.cancelled() => false,
            };
            if !woke {
                return Ok(scan.page(truncated));
            }
        }
    }
}

/// What one scan found.
struct Scan {
    events: Vec<Occurrence>,
    /// The last seq looked at.
    pos: Seq,
    has_more: bool,
    /// Matching occurrences were left out for `maxAgeMs`.
    aged_out: bool,
}

impl Scan {
    fn page(self, truncated: bool) -> EventsPage {
        EventsPage {
            events: self.events,
            cursor: Some(cursor_of(self.pos)),
            truncated,
            has_more: self.has_more,
            next_poll_ms: NEXT_POLL_MS,
        }
    }
}

/// Up to `max` matching occurrences after `after` (looking at no more than [`SCAN_LIMIT`]
/// messages), each with its own cursor.
async fn scan(
    inbox: &crate::inbox::Inbox,
    filter: &MessageFilter,
    after: Seq,
    max: usize,
    floor: Option<chrono::DateTime<Utc>>,
) -> Scan {
    let mut out = Scan {
        events: Vec::new(),
        pos: after,
        has_more: false,
        aged_out: false,
    };
    let mut looked = 0;
    loop {
        let batch = inbox.read_after(out.pos, BATCH).await;
        let full = batch.len() == BATCH;
        for m in &batch {
            if out.events.len() == max || looked == SCAN_LIMIT {
                out.has_more = true;
                return out;
            }
            looked += 1;
            out.pos = m.seq;
            if filter.is_match(m) {
                if floor.is_some_and(|f| m.timestamp < f) {
                    out.aged_out = true;
                } else {
                    out.events.push(Occurrence::of(m));
                }
            }
        }
        if !full {
            out.has_more = out.pos < inbox.last_seq() && out.events.len() == max;
            return out;
        }
    }
}
