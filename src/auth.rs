//! Who may talk to switchboard over HTTP: the bearer token shared by ingest and `/mcp`, and
//! the `Origin` check of `/mcp`.
//!
//! The token is compared as a SHA-256 digest, so a comparison takes the same time whatever the
//! length or content of the guess. `http.disableAuth` turns the token off, and is refused at
//! start on any address that is not loopback.

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// How bearer requests are authenticated.
#[derive(Clone)]
pub enum Bearer {
    /// `http.disableAuth` (loopback only).
    Disabled,
    /// The SHA-256 of the token.
    Token([u8; 32]),
    /// No token was configured: nothing is accepted.
    Unset,
}

/// Why a request was refused: a stable code and a sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `missing_token` or `invalid_token`.
    pub code: &'static str,
    /// For people.
    pub message: String,
}

impl Bearer {
    /// The check for `token` (none or empty: every request is refused), or none at all when
    /// `disable_auth` (the caller allows that on loopback only).
    pub fn new(token: Option<&str>, disable_auth: bool) -> Bearer {
        match (token, disable_auth) {
            (_, true) => Bearer::Disabled,
            (Some(token), false) if !token.is_empty() => Bearer::Token(digest(token.as_bytes())),
            _ => Bearer::Unset,
        }
    }

    /// Checks the `Authorization` header.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let expected = match self {
            Bearer::Disabled => return Ok(()),
            Bearer::Token(expected) => expected,
            Bearer::Unset => {
                return Err(Refusal {
                    code: "invalid_token",
                    message: "no token is configured on this server".into(),
                });
            }
        };
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Err(Refusal {
                code: "missing_token",
                message: "missing bearer token; send `Authorization: Bearer <token>` with the \
                          token from the `token` file in the switchboard home"
                    .into(),
            });
        };
        let token = value.to_str().ok().and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
        let Some(token) = token else {
            return Err(Refusal {
                code: "missing_token",
                message: "the `Authorization` header is not `Bearer <token>`".into(),
            });
        };
        if bool::from(digest(token.as_bytes()).ct_eq(expected)) {
            Ok(())
        } else {
            Err(Refusal {
                code: "invalid_token",
                message: "wrong bearer token".into(),
            })
        }
    }
}

/// Whether an `Origin` header value may talk to `/mcp`: a loopback origin
/// (`http(s)://localhost|127.x.x.x|[::1]` on any port), or one listed in `mcp.allowedOrigins`
/// exactly. A request without `Origin` (not a browser) is not judged here.
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    if allowed.iter().any(|a| a.eq_ignore_ascii_case(origin)) {
        return true;
    }
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    if rest.contains('/') || rest.contains('@') {
        return false;
    }
    let host = if let Some(v6) = rest.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, port)) if port.is_empty() || port.starts_with(':') => h,
            _ => return false,
        }
    } else {
        rest.split(':').next().unwrap_or_default()
    };
    if host.eq_ignore_ascii_case("localhost") || host == "::1" {
        return true;
    }
    host.parse::<std::net::Ipv4Addr>()
        .is_ok_and(|ip| ip.is_loopback())
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_listed_origins_pass_others_do_not() {
        let listed = vec!["https://app.example.com".to_string()];
        for ok in [
            "http://localhost",
            "http://localhost:6274",
            "http://127.0.0.1:8788",
            "https://[::1]:3000",
            "https://app.example.com",
        ] {
            assert!(origin_allowed(ok, &listed), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example",
            "null",
            "file://",
            "http://user@localhost",
            "https://app.example.com:8443",
        ] {
            assert!(!origin_allowed(bad, &listed), "{bad}");
        }
    }

    #[test]
    fn bearer_tokens_are_checked() {
        let bearer = Bearer::new(Some("s3cret"), false);
        let mut h = HeaderMap::new();
        assert_eq!(bearer.check(&h).unwrap_err().code, "missing_token");
        h.insert(header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        assert_eq!(bearer.check(&h).unwrap_err().code, "invalid_token");
        h.insert(header::AUTHORIZATION, "bearer s3cret".parse().unwrap());
        assert!(bearer.check(&h).is_ok());
    }
}
