//! The Microsoft Graph client: the HTTP calls of the Teams source and their retry rules.
//!
//! - every request carries the access token [`Auth`] holds; a `401` gets one refresh and one
//!   more try;
//! - `429` and `503` (and `504`) are throttling: the request waits `Retry-After` seconds (or
//!   1, 2, 4... s when Graph gives none, at most [`MAX_WAIT`]) and tries again, up to
//!   [`MAX_THROTTLED`] times; each one is counted;
//! - collections are read page by page through `@odata.nextLink`, which must stay on Graph's URL
//!   (the token is never sent elsewhere);
//! - any other status is an error carrying Graph's `error.code` and `error.message`.
//!
//! Requests go to `{graphUrl}/v1.0/...`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::auth::{Auth, AuthError};

/// The longest one throttled request waits before it tries again.
pub const MAX_WAIT: Duration = Duration::from_secs(120);

/// How many times one request is tried again after throttling.
pub const MAX_THROTTLED: u32 = 5;

/// The longest a request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a Graph call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// Occurs when there is no token: nobody signed in, or the sign-in no longer works.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// Occurs when Graph answered with an error status.
    #[error("{what}: {status} {code}: {message}")]
    Status {
        /// The call (`GET /me/chats`), without its query.
        what: String,
        /// The HTTP status.
        status: u16,
        /// Graph's `error.code` (`Forbidden`, `NotFound`).
        code: String,
        /// Graph's `error.message`.
        message: String,
    },
    /// Occurs when Graph could not be reached, or its answer does not read.
    #[error("{what}: {cause}")]
    Transport {
        /// The call.
        what: String,
        /// Why.
        cause: String,
    },
}

impl GraphError {
    /// The HTTP status Graph answered, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            GraphError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Microsoft Graph, as one signed-in app sees it.
pub struct Graph {
    http: reqwest::Client,
    /// `{graphUrl}`: where `@odata.nextLink`s must point.
    base: String,
    /// `{graphUrl}/v1.0`.
    api: String,
    auth: Arc<Auth>,
    /// Requests answered 429 or 503 (504): throttled.
    pub throttled: AtomicU64,
}

impl Graph {
    /// Graph at `graph_url`, signed in through `auth`.
    pub fn new(graph_url: &str, auth: Arc<Auth>) -> Graph {
        Graph {
            http: crate::sources::api_client(REQUEST_TIMEOUT),
            base: graph_url.trim_end_matches('/').to_string(),
            api: format!("{}/v1.0", graph_url.trim_end_matches('/')),
            auth,
            throttled: AtomicU64::new(0),
        }
    }

    /// The sign-in Graph is called with.
    pub fn auth(&self) -> &Arc<Auth> {
        &self.auth
    }

    /// `GET {api}{path}`.
    pub async fn get(&self, path: &str) -> Result<Value, GraphError> {
        self.send(Method::GET, &format!("{}{path}", self.api), None)
            .await
    }

    /// `POST {api}{path}` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, GraphError> {
        self.send(Method::POST, &format!("{}{path}", self.api), Some(body))
            .await
    }

    /// `PATCH {api}{path}` with a JSON body.
    pub async fn patch(&self, path: &str, body: &Value) -> Result<Value, GraphError> {
        self.send(Method::PATCH, &format!("{}{path}", self.api), Some(body))
            .await
    }

    /// `DELETE {api}{path}`.
    pub async fn delete(&self, path: &str) -> Result<Value, GraphError> {
        self.send(Method::DELETE, &format!("{}{path}", self.api), None)
            .await
    }

    /// The collection at `path`, page by page through `@odata.nextLink`: `page` gets each page's
    /// `value` and says whether to read on. At most `max_pages` pages.
    pub async fn pages(
        &self,
        path: &str,
        max_pages: usize,
        mut page: impl FnMut(&[Value]) -> bool,
    ) -> Result<(), GraphError> {
        let mut url = format!("{}{path}", self.api);
        for _ in 0..max_pages {
            let body = self.send(Method::GET, &url, None).await?;
            let items = body
                .get("value")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            if !page(items) {
                return Ok(());
            }
            match body.get("@odata.nextLink").and_then(Value::as_str) {
                Some(next) if self.is_graph(next) => url = next.to_string(),
                Some(next) => {
                    return Err(GraphError::Transport {
                        what: what(&Method::GET, &url),
                        cause: format!(
                            "`@odata.nextLink` \"{next}\" is not on `teams.graphUrl` \"{}\"; \
                             not followed",
                            self.base
                        ),
                    });
                }
                None => return Ok(()),
            }
        }
        Ok(())
    }

    fn is_graph(&self, url: &str) -> bool {
        url.strip_prefix(&self.base)
            .is_some_and(|rest| rest.starts_with('/'))
    }

    /// One call, with the retry rules: one refresh on `401`, waits on throttling.
    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
    ) -> Result<Value, GraphError> {
        let what = what(&method, url);
        let mut token = self.auth.token().await?;
        let mut renewed = false;
        let mut throttled = 0;
        loop {
            let mut request = self.http.request(method.clone(), url).bearer_auth(&token);
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request.send().await.map_err(|e| GraphError::Transport {
                what: what.clone(),
                cause: e.without_url().to_string(),
            })?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && !renewed {
                renewed = true;
                token = self.auth.renew(&token).await?;
                continue;
            }
            let throttle = matches!(
                status,
                StatusCode::TOO_MANY_REQUESTS
                    | StatusCode::SERVICE_UNAVAILABLE
                    | StatusCode::GATEWAY_TIMEOUT
            );
            if throttle && throttled < MAX_THROTTLED {
                self.throttled.fetch_add(1, Ordering::Relaxed);
                let wait = retry_after(response.headers())
                    .unwrap_or(Duration::from_secs(1 << throttled))
                    .min(MAX_WAIT);
                tracing::debug!(call = %what, status = status.as_u16(), wait_ms = wait.as_millis() as u64, "teams: Graph throttled the request; waiting");
                throttled += 1;
                tokio::time::sleep(wait).await;
                continue;
            }
            let bytes = response.bytes().await.map_err(|e| GraphError::Transport {
                what: what.clone(),
                cause: e.without_url().to_string(),
            })?;
            if status.is_success() {
                if bytes.is_empty() {
                    return Ok(Value::Null);
                }
                return serde_json::from_slice(&bytes).map_err(|e| GraphError::Transport {
                    what,
                    cause: format!("the answer is not JSON: {e}"),
                });
            }
            return Err(status_error(what, status, &bytes));
        }
    }
}

/// Who `token` belongs to (`GET {graph_url}/v1.0/me`): what `switchboard login teams` says.
pub async fn whoami(graph_url: &str, token: &str) -> Result<super::mapping::Me, String> {
    let url = format!("{}/v1.0/me", graph_url.trim_end_matches('/'));
    let response = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(status_error("GET /v1.0/me".into(), status, &body).to_string());
    }
    let user: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    super::mapping::Me::from_user(&user).ok_or_else(|| "the answer has no user `id`".into())
}

/// `GET /v1.0/me/chats`: the method and the path, without the query (which can be long).
fn what(method: &Method, url: &str) -> String {
    let path = url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or(url);
    let path = path.split('?').next().unwrap_or(path);
    format!("{method} {path}")
}

/// Graph's error body (`{"error": {"code", "message"}}`) as an error.
fn status_error(what: String, status: StatusCode, body: &[u8]) -> GraphError {
    let parsed: Value = serde_json::from_slice(body).unwrap_or_default();
    let field = |k: &str| {
        parsed
            .get("error")
            .and_then(|e| e.get(k))
            .and_then(Value::as_str)
            .map(String::from)
    };
    GraphError::Status {
        what,
        status: status.as_u16(),
        code: field("code")
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string()),
        message: field("message").unwrap_or_default(),
    }
}

/// `Retry-After` in seconds, as Graph sends it.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// A chat or message id as one path segment: what a URL cannot carry is percent-encoded.
pub fn segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:@!$&'()*+,;=".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_stay_readable_in_a_path() {
        assert_eq!(segment("19:2da4c29f@thread.v2"), "19:2da4c29f@thread.v2");
        assert_eq!(segment("a/b?c#d e"), "a%2Fb%3Fc%23d%20e");
    }

    #[test]
    fn a_call_is_named_without_host_or_query() {
        assert_eq!(
            what(
                &Method::GET,
                "https://graph.microsoft.com/v1.0/me/chats?$expand=lastMessagePreview"
            ),
            "GET /v1.0/me/chats"
        );
    }

    #[test]
    fn graphs_error_body_is_read() {
        let e = status_error(
            "POST /v1.0/chats/x/messages".into(),
            StatusCode::FORBIDDEN,
            br#"{"error": {"code": "Forbidden", "message": "Missing scope permissions on the request."}}"#,
        );
        assert_eq!(
            e.to_string(),
            "POST /v1.0/chats/x/messages: 403 Forbidden: Missing scope permissions on the request."
        );
        let e = status_error("GET /v1.0/me".into(), StatusCode::BAD_GATEWAY, b"<html>");
        assert_eq!(e.status(), Some(502));
    }
}
