//! `duty`: `switchboard duty on|off [--for 8h]` — whether the stop hooks keep an agent with
//! nothing queued listening (on duty) or let it stop; without a change, the mode as it is.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::actions::duty::DutyView;
use crate::control::{ApiError, Ctx, Op, RefusalCode};

/// Reads, or changes, on-duty mode.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SetDuty {
    /// On or off; `None` reads the mode without changing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<bool>,
    /// On duty for this long, then off by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_ms: Option<u64>,
}

impl Op for SetDuty {
    type Reply = DutyView;

    async fn apply(self, cx: &Ctx<'_>) -> Result<DutyView, ApiError> {
        let now = chrono::Utc::now();
        let Some(on) = self.on else {
            return Ok(cx.duty().view(now));
        };
        let until = match self.for_ms {
            Some(ms) => {
                // Bounded as every duration is: a control client may send any number.
                let until = Some(Duration::from_millis(ms))
                    .filter(|d| *d <= crate::duration::MAX)
                    .and_then(|d| chrono::Duration::from_std(d).ok())
                    .and_then(|d| now.checked_add_signed(d));
                Some(until.ok_or_else(|| {
                    ApiError::refused(
                        RefusalCode::Invalid,
                        format!(
                            "`duty --for`: {ms} ms is longer than the longest duration, 100 \
                             years (\"876000h\")"
                        ),
                    )
                })?)
            }
            None => None,
        };
        cx.duty().set(on, until).map_err(|e| {
            let path = cx
                .home()
                .map(|h| h.duty().display().to_string())
                .unwrap_or_default();
            ApiError::refused(
                RefusalCode::Failed,
                format!("{path}: cannot write on-duty mode: {e}"),
            )
        })
    }
}
