//! `ensure_consumer`: a tool's `consumer` argument names a consumer; it exists from then on.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};

/// Makes sure a named consumer exists.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EnsureConsumer {
    /// The consumer.
    pub name: String,
}

impl Op for EnsureConsumer {
    type Reply = ();

    async fn apply(self, cx: &Ctx<'_>) -> Result<(), ApiError> {
        cx.local.core().ensure_consumer(&self.name);
        Ok(())
    }
}
