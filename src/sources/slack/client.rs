//! Slack's Web API: `POST {apiUrl}/{method}` with a bearer token, and Slack's envelope.
//!
//! - write methods (`chat.postMessage`, `chat.update`, `chat.postEphemeral`) take a JSON body;
//!   reading methods (`users.info`, `conversations.info`) take their arguments form-encoded,
//!   as Slack accepts for every method;
//! - every answer is `{"ok": true, ...}` or `{"ok": false, "error": "channel_not_found"}`: an
//!   `ok: false` is an error carrying Slack's `error` code;
//! - `429` is rate limiting: the call waits `Retry-After` seconds (at most [`MAX_WAIT`]) and
//!   tries again, up to [`MAX_THROTTLED`] times; each one is counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

/// The longest one rate-limited call waits before it tries again.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// How many times one call is tried again after a 429.
pub const MAX_THROTTLED: u32 = 3;

/// The longest a call may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a Web API call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlackError {
    /// Slack answered `ok: false` (or an error status with its envelope).
    #[error("`{method}`: {error}")]
    Api {
        /// The method (`chat.postMessage`).
        method: String,
        /// Slack's `error` (`channel_not_found`, `not_authed`, `ratelimited`).
        error: String,
    },
    /// Slack could not be reached, or its answer does not read.
    #[error("`{method}`: {cause}")]
    Transport {
        /// The method.
        method: String,
        /// Why.
        cause: String,
    },
}

impl SlackError {
    /// Slack's `error` code, when Slack answered one.
    pub fn code(&self) -> Option<&str> {
        match self {
            SlackError::Api { error, .. } => Some(error),
            SlackError::Transport { .. } => None,
        }
    }
}

/// The arguments of a call.
pub enum Args<'a> {
    /// A JSON body.
    Json(&'a Value),
    /// Form-encoded pairs.
    Form(&'a [(&'a str, &'a str)]),
}

/// Slack's Web API at one URL.
pub struct WebApi {
    http: reqwest::Client,
    /// `{apiUrl}`, without a trailing `/`.
    url: String,
    /// Calls answered 429.
    pub throttled: AtomicU64,
}

impl WebApi {
    /// The Web API at `url` (`https://slack.com/api`).
    pub fn new(url: &str) -> WebApi {
        WebApi {
            http: crate::sources::api_client(REQUEST_TIMEOUT),
            url: url.trim_end_matches('/').to_string(),
            throttled: AtomicU64::new(0),
        }
    }

    /// Calls `method` with `token`; the answer's fields when it is `ok`.
    pub async fn call(
        &self,
        method: &str,
        token: &str,
        args: Args<'_>,
    ) -> Result<Value, SlackError> {
        let mut throttled = 0;
        loop {
            let request = self
                .http
                .post(format!("{}/{method}", self.url))
                .bearer_auth(token);
            let request = match &args {
                Args::Json(body) => request.json(body),
                Args::Form(pairs) => request
                    .header(
                        reqwest::header::CONTENT_TYPE,
                        "application/x-www-form-urlencoded",
                    )
                    .body(
                        form_urlencoded::Serializer::new(String::new())
                            .extend_pairs(pairs.iter())
                            .finish(),
                    ),
            };
            let transport = |cause: String| SlackError::Transport {
                method: method.to_string(),
                cause,
            };
            let response = request.send().await.map_err(|e| transport(e.to_string()))?;
            let status = response.status();
            if status == StatusCode::TOO_MANY_REQUESTS && throttled < MAX_THROTTLED {
                throttled += 1;
                self.throttled.fetch_add(1, Ordering::Relaxed);
                let wait = retry_after(response.headers()).min(MAX_WAIT);
                tracing::info!(
                    method,
                    ?wait,
                    "slack: rate limited; waiting for Retry-After"
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            let text = response
                .text()
                .await
                .map_err(|e| transport(e.to_string()))?;
            let body: Value = serde_json::from_str(&text).map_err(|_| {
                transport(format!("{status}: the answer is not Slack's JSON envelope"))
            })?;
            return match body.get("ok").and_then(Value::as_bool) {
                Some(true) => Ok(body),
                _ => Err(SlackError::Api {
                    method: method.to_string(),
                    error: body
                        .get("error")
                        .and_then(Value::as_str)
                        .unwrap_or(if status.is_success() {
                            "unknown_error"
                        } else {
                            status.as_str()
                        })
                        .to_string(),
                }),
            };
        }
    }
}

/// `Retry-After` in seconds; 1 s when it is missing or does not read.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Duration {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(1), Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&h), Duration::from_secs(1));
        h.insert(reqwest::header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&h), Duration::from_secs(7));
    }
}
