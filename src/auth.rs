//! Who may talk to switchboard over HTTP: the bearer token shared by ingest and `/mcp`, the
//! browser's `Origin` (parsed here once, for `/mcp` and the approval page), and the one
//! comparison of secrets.
//!
//! Secrets (the bearer token, the approval page's CSRF token) are compared as SHA-256 digests,
//! in constant time ([`same_secret`]), so a comparison takes the same time whatever the length
//! or content of the guess. `http.disableAuth` turns the token off, and is refused at start on
//! any address that is not loopback.

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// How bearer requests are authenticated.
#[derive(Clone)]
pub enum Bearer {
    /// `http.disableAuth` (loopback only).
    Disabled,
    /// The token.
    Token(Secret),
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
            (Some(token), false) if !token.is_empty() => Bearer::Token(Secret::new(token)),
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
        if expected.matches(token) {
            Ok(())
        } else {
            Err(Refusal {
                code: "invalid_token",
                message: "wrong bearer token".into(),
            })
        }
    }
}

/// A secret kept as its SHA-256 digest, so that the secret itself is not kept and a guess is
/// compared in the same time whatever its length or content.
#[derive(Clone)]
pub struct Secret([u8; 32]);

impl Secret {
    /// Keeps `secret`'s digest.
    pub fn new(secret: &str) -> Secret {
        Secret(Sha256::digest(secret.as_bytes()).into())
    }

    /// Whether `guess` is the secret: digests compared in constant time.
    pub fn matches(&self, guess: &str) -> bool {
        bool::from(Secret::new(guess).0.ct_eq(&self.0))
    }
}

/// The bytes of an even number of hex digits (a signature header's digest); `None` otherwise.
pub fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Whether `a` and `b` are the same secret, in time independent of both (see [`Secret`]).
pub fn same_secret(a: &str, b: &str) -> bool {
    Secret::new(a).matches(b)
}

/// A browser's `Origin`, parsed once for every check of it: an `http` or `https` scheme, a host
/// (lowercase; an IPv6 address in its brackets) and a port (the scheme's default when the
/// origin writes none, as a browser leaves a default port out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// `http` or `https`.
    pub scheme: &'static str,
    /// `localhost`, `127.0.0.1`, `[::1]`, `approvals.example`.
    pub host: String,
    /// The port, written or the scheme's default.
    pub port: u16,
}

impl Origin {
    /// Parses `scheme://host[:port]`; `None` for anything else (`null`, another scheme, a path,
    /// user info, a port that is not a number).
    pub fn parse(origin: &str) -> Option<Origin> {
        let (scheme, authority) = origin.split_once("://")?;
        let (scheme, default_port) = match scheme.to_ascii_lowercase().as_str() {
            "http" => ("http", 80),
            "https" => ("https", 443),
            _ => return None,
        };
        let (host, port) = authority_parts(authority, default_port)?;
        Some(Origin { scheme, host, port })
    }

    /// A loopback origin: `localhost`, `127.x.x.x` or `[::1]`, on any port.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost"
            || self.host == "[::1]"
            || self
                .host
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// Whether this origin names `authority`, a `Host` header's `host[:port]` (its port the
    /// scheme's default when it writes none): the page's own origin, whether the browser
    /// reached it directly or through a reverse proxy with TLS.
    pub fn is_host(&self, authority: &str) -> bool {
        let default_port = if self.scheme == "https" { 443 } else { 80 };
        authority_parts(authority.trim(), default_port)
            .is_some_and(|(host, port)| host == self.host && port == self.port)
    }
}

/// `host[:port]` as (lowercase host, port); `None` when it is empty, holds a path, user info
/// or a query, or its port is not a number.
fn authority_parts(authority: &str, default_port: u16) -> Option<(String, u16)> {
    if authority.is_empty() || authority.contains(['/', '@', '?', '#', ' ']) {
        return None;
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (address, rest) = v6.split_once(']')?;
            (&authority[..address.len() + 2], rest)
        }
        None => authority.split_at(authority.find(':').unwrap_or(authority.len())),
    };
    let port = match port {
        "" => default_port,
        port => port.strip_prefix(':')?.parse().ok()?,
    };
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

/// Whether an `Origin` header value may talk to `/mcp`: a loopback origin
/// (`http(s)://localhost|127.x.x.x|[::1]` on any port), or one listed in `mcp.allowedOrigins`
/// exactly. A request without `Origin` (not a browser) is not judged here.
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|a| a.eq_ignore_ascii_case(origin))
        || Origin::parse(origin).is_some_and(|o| o.is_loopback())
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
    fn an_origin_names_its_host_over_http_or_https_with_the_default_port_left_out() {
        let is_host =
            |origin: &str, host: &str| Origin::parse(origin).is_some_and(|o| o.is_host(host));
        assert!(is_host("http://127.0.0.1:8787", "127.0.0.1:8787"));
        assert!(is_host("https://127.0.0.1:8787", "127.0.0.1:8787"));
        assert!(is_host("https://Approvals.Example", "approvals.example"));
        assert!(is_host(
            "https://approvals.example",
            "approvals.example:443"
        ));
        assert!(is_host("http://approvals.example:80", "approvals.example"));
        assert!(is_host("http://[::1]:8787", "[::1]:8787"));
        for (origin, host) in [
            ("http://evil.example", "127.0.0.1:8787"),
            ("https://127.0.0.1:8788", "127.0.0.1:8787"),
            ("https://127.0.0.1", "127.0.0.1:8787"),
            ("https://127.0.0.1:8787.evil.example", "127.0.0.1:8787"),
            ("ftp://127.0.0.1:8787", "127.0.0.1:8787"),
            ("null", "127.0.0.1:8787"),
            ("https://", ""),
            ("https://approvals.example", "approvals.example:80"),
        ] {
            assert!(!is_host(origin, host), "{origin} names {host}");
        }
        assert_eq!(
            Origin::parse("HTTPS://[::1]:3000"),
            Some(Origin {
                scheme: "https",
                host: "[::1]".into(),
                port: 3000
            })
        );
        for bad in [
            "http://localhost:",
            "http://localhost:x",
            "http://[::1",
            "http://a:1:2",
        ] {
            assert_eq!(Origin::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn secrets_match_only_themselves() {
        assert!(same_secret("s3cret", "s3cret"));
        assert!(!same_secret("s3cret", "s3cre"));
        assert!(!same_secret("s3cret", ""));
        assert!(Secret::new("t").matches("t") && !Secret::new("t").matches("T"));
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
