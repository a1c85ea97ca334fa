//! `ui_link`: `switchboard ui` — a one-time link to the approval page, which becomes a session
//! cookie when opened. The link carries a short-lived code, never the ingest token.

use serde::{Deserialize, Serialize};

use crate::control::{ApiError, Ctx, Op, RefusalCode};

/// A one-time link to the approval page.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct UiLink {
    /// Give a link even when the page is served beyond this machine over plain HTTP
    /// (`switchboard ui --public`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub public: bool,
}

/// The link.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UiLinkReply {
    /// `http://HOST:PORT/ui/login?code=...`: works once, for a short while.
    pub url: String,
    /// What to know about it (how to reach it from another machine; plain HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Op for UiLink {
    type Reply = UiLinkReply;

    async fn apply(self, cx: &Ctx<'_>) -> Result<UiLinkReply, ApiError> {
        let Some(web) = cx.parts().web_links() else {
            return Err(ApiError::refused(
                RefusalCode::Unavailable,
                "the approval page is served on the ingest listener, and this daemon has none; \
                 start it with `--listen 127.0.0.1:PORT`",
            ));
        };
        web.link(self.public)
            .map(|link| UiLinkReply {
                url: link.url,
                note: link.note,
            })
            .map_err(|why| ApiError::refused(RefusalCode::Unavailable, why))
    }
}
