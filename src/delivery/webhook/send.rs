//! One signed POST to a webhook endpoint: the name resolved and checked first
//! ([`super::address`]), the request sent to the checked address (a client pinned to it, no
//! redirects), signed per Standard Webhooks by the `standardwebhooks` crate, with
//! `X-MCP-Subscription-Id`; a failure reported as a `lastError` category only (never what the
//! endpoint said).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;

/// How long one POST may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a POST failed: a `lastError` category.
pub enum Failed {
    /// Worth another try.
    Retry(&'static str),
    /// Not retried (413: the endpoint will never take it).
    Permanent(&'static str),
}

/// Where a subscription's POSTs go.
pub struct Target {
    url: reqwest::Url,
    host: String,
    port: u16,
    id: String,
    /// The client's secret (replaced on a refresh).
    pub secret: String,
    allow_loopback: bool,
    /// A client pinned to the last checked address.
    client: Option<(SocketAddr, reqwest::Client)>,
}

impl Target {
    /// The endpoint `url` of subscription `id`.
    pub fn new(url: &reqwest::Url, id: &str, secret: &str, allow_loopback: bool) -> Target {
        Target {
            url: url.clone(),
            host: url.host_str().unwrap_or_default().to_string(),
            port: url.port_or_known_default().unwrap_or(443),
            id: id.to_string(),
            secret: secret.to_string(),
            allow_loopback,
            client: None,
        }
    }

    /// A client that connects to the address the name resolves to now, checked.
    async fn client(&mut self) -> Result<reqwest::Client, (&'static str, String)> {
        let addr = super::address::resolve(&self.host, self.port, self.allow_loopback).await?;
        if let Some((at, client)) = &self.client
            && *at == addr
        {
            return Ok(client.clone());
        }
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")));
        if self.host.parse::<std::net::IpAddr>().is_err() && !self.host.starts_with('[') {
            builder = builder.resolve(&self.host, addr);
        }
        let client = builder
            .build()
            .map_err(|e| ("tls_error", format!("cannot build the HTTP client: {e}")))?;
        self.client = Some((addr, client.clone()));
        Ok(client)
    }

    /// POSTs `body` as message `webhook_id`; the response body when it was 2xx.
    async fn send(&mut self, webhook_id: &str, body: &[u8]) -> Result<bytes_body::Body, Failed> {
        let client = self
            .client()
            .await
            .map_err(|(reason, _)| Failed::Retry(reason))?;
        let ts = chrono::Utc::now().timestamp();
        let signature = standardwebhooks::Webhook::new(&self.secret)
            .and_then(|w| w.sign(webhook_id, ts, body))
            .map_err(|_| Failed::Permanent("http_4xx"))?;
        let response = client
            .post(self.url.clone())
            .header("content-type", "application/json")
            .header("webhook-id", webhook_id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", signature)
            .header("X-MCP-Subscription-Id", &self.id)
            .body(body.to_vec())
            .send()
            .await
            .map_err(|e| Failed::Retry(category(&e)))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response.bytes().await.unwrap_or_default().to_vec());
        }
        Err(match status.as_u16() {
            413 => Failed::Permanent("http_4xx"),
            400..=499 => Failed::Retry("http_4xx"),
            _ => Failed::Retry("http_5xx"),
        })
    }

    /// Delivers one occurrence.
    pub async fn post(&mut self, webhook_id: &str, body: &[u8]) -> Result<(), Failed> {
        self.send(webhook_id, body).await.map(drop)
    }
}

mod bytes_body {
    /// A response body.
    pub type Body = Vec<u8>;
}

/// The category of a transport error.
fn category(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        return "timeout";
    }
    let mut cause: Option<&dyn std::error::Error> = Some(e);
    while let Some(c) = cause {
        let text = c.to_string().to_ascii_lowercase();
        if text.contains("certificate") || text.contains("tls") || text.contains("handshake") {
            return "tls_error";
        }
        cause = c.source();
    }
    "connection_refused"
}

/// The draft's endpoint verification: a signed `verification` envelope carrying a single-use
/// challenge, which the endpoint must echo (`{"challenge": ...}`) in a 2xx body; compared in
/// constant time. The error is a `lastError` category and why.
pub async fn verify(target: &Target) -> Result<(), (&'static str, String)> {
    let mut target = Target {
        client: None,
        ..Target::new(
            &target.url,
            &target.id,
            &target.secret,
            target.allow_loopback,
        )
    };
    // Resolve first, so a refused address says why.
    target.client().await?;
    let challenge = nonce();
    let body = json!({"type": "verification", "challenge": challenge}).to_string();
    let id = format!("msg_verification_{}", nonce());
    let answer = match target.send(&id, body.as_bytes()).await {
        Ok(answer) => answer,
        Err(Failed::Retry(reason) | Failed::Permanent(reason)) => {
            return Err((reason, format!("the verification POST failed ({reason})")));
        }
    };
    let echoed = serde_json::from_slice::<serde_json::Value>(&answer)
        .ok()
        .and_then(|v| {
            v.get("challenge")
                .and_then(|c| c.as_str())
                .map(str::to_string)
        })
        .unwrap_or_default();
    if crate::auth::same_secret(&echoed, &challenge) {
        Ok(())
    } else {
        Err((
            "challenge_failed",
            "the endpoint did not echo the verification challenge; answer the `verification` \
             POST with `{\"challenge\": <the challenge>}`"
                .into(),
        ))
    }
}

/// 16 random bytes, hex.
fn nonce() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).unwrap_or_default();
    b.iter().map(|x| format!("{x:02x}")).collect()
}
