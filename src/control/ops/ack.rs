//! `ack`: `channel_ack` — everything is read for a consumer.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, ConsumerView, Ctx, Op};

/// Marks everything read.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ack {
    /// The consumer.
    pub consumer: String,
}

impl Op for Ack {
    type Reply = ConsumerView;

    async fn apply(self, cx: &Ctx<'_>) -> Result<ConsumerView, ApiError> {
        cx.state()
            .set_cursor(&self.consumer, cx.inbox().last_seq());
        Ok(ConsumerView::of(cx, &self.consumer))
    }
}
