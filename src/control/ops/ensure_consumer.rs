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
        let cursor = cx.state().cursor(&self.name);
        cx.lifecycle().ensure_consumer(&self.name, cursor);
        Ok(())
    }
}
