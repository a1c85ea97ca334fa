//! `ack`: `channel_ack` — everything is read for a consumer.

use serde::{Deserialize, Serialize};

use crate::app::ConsumerView;
use crate::control::{ApiError, Ctx, Op};

/// Marks everything read.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ack {
    /// The consumer.
    pub consumer: String,
}

impl Op for Ack {
    type Reply = ConsumerView;

    async fn apply(self, cx: &Ctx<'_>) -> Result<ConsumerView, ApiError> {
        Ok(cx.local.core().ack(&self.consumer))
    }
}
