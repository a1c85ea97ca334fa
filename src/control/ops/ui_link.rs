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
    /// What the browser that opens it answers as (`switchboard ui --label phone`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// The longest label a link may have, in characters.
pub const MAX_LABEL: usize = 64;

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
        if let Some(label) = &self.label
            && let Some(problem) = label_problem(label)
        {
            return Err(ApiError::refused(
                RefusalCode::Invalid,
                format!("`--label` \"{}\": {problem}", label.escape_debug()),
            ));
        }
        web.link(self.public, self.label)
            .map(|link| UiLinkReply {
                url: link.url,
                note: link.note,
            })
            .map_err(|why| ApiError::refused(RefusalCode::Unavailable, why))
    }
}

/// What is wrong with a link's label, if anything.
fn label_problem(label: &str) -> Option<String> {
    if label.trim().is_empty() {
        Some("a label must not be empty".into())
    } else if label.chars().count() > MAX_LABEL {
        Some(format!("a label is at most {MAX_LABEL} characters"))
    } else if label.chars().any(char::is_control) {
        Some("a label must not hold control characters".into())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_a_short_printable_name() {
        assert_eq!(label_problem("phone"), None);
        assert_eq!(label_problem("Ada's laptop"), None);
        assert!(label_problem(" ").is_some());
        assert!(label_problem(&"x".repeat(MAX_LABEL + 1)).is_some());
        assert!(label_problem("a\x1b[2Jb").is_some());
    }
}
