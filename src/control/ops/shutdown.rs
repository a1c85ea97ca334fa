//! `shutdown`: `switchboard stop` — the daemon stops; the reply goes out first, and says how
//! many changes of state the actions journal could not take (one more try is made first): a
//! stop loses them, and `switchboard stop` says so and exits non-zero.

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
    /// Changes of state not in the actions journal when it was asked to stop (absent from an
    /// older daemon: 0).
    #[serde(default)]
    pub unsaved: u64,
    /// Why they are not: the journal's status (`failing: CAUSE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

impl Op for Shutdown {
    type Reply = Stopping;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Stopping, ApiError> {
        tracing::info!("stop requested on the control socket");
        // One more try to write what the actions journal holds; what it still cannot take is
        // counted, for the stop to say.
        let lifecycle = cx.lifecycle();
        let (unsaved, cause) = if lifecycle.flush().await {
            (0, None)
        } else {
            (lifecycle.unsaved(), Some(lifecycle.stats().actions_journal))
        };
        if unsaved > 0 {
            tracing::error!(
                unsaved,
                "stopping with changes of state the actions journal cannot take ({}); they are lost",
                cause.as_deref().unwrap_or("unknown")
            );
        }
        // The connection still writes this reply: it drains its calls' replies before it
        // closes, and shutdown waits for it.
        cx.core().shutdown().cancel();
        Ok(Stopping {
            pid: std::process::id(),
            unsaved,
            cause,
        })
    }
}
