//! `wait`: `wait_for_inbound_message` — take, or wait for, a consumer's items.
//!
//! Returns at once when something is queued, else when something arrives or the timeout
//! (capped by the daemon) ends; empty, having taken nothing, once the call is cancelled (the
//! session ended, the client went away). Work among the items is claimed by the session until
//! a `settle` says what became of the result that carried it. A wait for 0 items takes nothing
//! and returns at once: a look at the cursor, the unread count and what is queued. Its deadline is its own timeout
//! plus [`WAIT_MARGIN`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::actions::Item;
use crate::control::refused::RefusalCode;
use crate::control::{ApiError, Ctx, Op, WAIT_MARGIN};
use crate::message::Seq;

/// Takes or waits for items.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Wait {
    /// The session whose claims the work becomes.
    pub session: u64,
    /// The consumer the caller knows the session by. The wait reads as the session's own
    /// consumer whatever this says (a session re-opened after a daemon restart may have been
    /// given another name): a session is its consumer and takes no other's work.
    pub consumer: String,
    /// The most items.
    pub max: usize,
    /// How long to wait when nothing is queued (capped by the daemon).
    pub timeout_ms: u64,
}

/// What a wait returns.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WaitReply {
    /// The items, work first.
    pub items: Vec<Item>,
    /// The consumer's cursor after the wait.
    pub cursor: Seq,
    /// Messages after the cursor.
    pub unread: u64,
    /// Items waiting for the consumer after the wait (absent from an older daemon: 0).
    #[serde(default)]
    pub queued: usize,
}

impl Op for Wait {
    type Reply = WaitReply;

    fn deadline(&self) -> Duration {
        Duration::from_millis(self.timeout_ms) + WAIT_MARGIN
    }

    async fn apply(self, cx: &Ctx<'_>) -> Result<WaitReply, ApiError> {
        let session = cx.session(self.session)?;
        let timeout = Duration::from_millis(self.timeout_ms).min(cx.settings().max_wait);
        // 0 asks only what is there (the cursor, the unread count, what is queued): nothing
        // is taken.
        let max = self.max.min(100);
        // A session is its consumer: it takes no other's work (issue 46.4).
        let consumer = cx.lifecycle().consumer_of(session).ok_or_else(|| {
            ApiError::refused(
                RefusalCode::NotFound,
                format!("session {} is not open", self.session),
            )
        })?;
        let consumer = &consumer;
        let items = {
            let _counted = InFlight::count(&cx.metrics().wait_calls_in_flight);
            cx.lifecycle()
                .wait(session, consumer, max, timeout, &cx.cancel)
                .await
        };
        // The consumer's cursor moves past the items' messages.
        let state = cx.state();
        if let Some(seq) = items.iter().map(|i| i.message.seq).max() {
            state.set_cursor(consumer, seq);
        }
        Ok(WaitReply {
            items,
            cursor: state.cursor_or_boot(consumer),
            unread: state.unread(consumer, cx.inbox().last_seq()),
            queued: cx.lifecycle().queued_for(consumer),
        })
    }
}

/// A wait in flight, counted while it lives (`wait_calls_in_flight`), also when the call is
/// dropped.
struct InFlight<'a>(&'a AtomicU64);

impl InFlight<'_> {
    fn count(gauge: &AtomicU64) -> InFlight<'_> {
        gauge.fetch_add(1, Ordering::Relaxed);
        InFlight(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
