//! `shutdown`: `switchboard stop` — the daemon stops; the reply goes out first.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op};

/// Stops the daemon.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Shutdown {}

/// The daemon that stops.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stopping {
    /// Its pid, to wait for.
    pub pid: u32,
}

impl Op for Shutdown {
    type Reply = Stopping;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Stopping, ApiError> {
        tracing::info!("stop requested on the control socket");
        // The connection still writes this reply: it drains its calls' replies before it
        // closes, and shutdown waits for it.
        cx.core().shutdown().cancel();
        Ok(Stopping {
            pid: std::process::id(),
        })
    }
}
