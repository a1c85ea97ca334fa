//! Who may see the approval page: one-time codes (what `switchboard ui` prints in a link) and
//! the browser sessions they become.
//!
//! A code works once and for [`CODE_TTL`]; opening it sets an HttpOnly, SameSite=Strict cookie
//! naming a session, which holds the session's CSRF token. Both live in memory only: a daemon
//! restart signs every browser out (run `switchboard ui` again). The ingest token is never
//! part of any of it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::actions::{By, ByKind};
use crate::control::{WebLink, WebLinks};
use crate::listener::TrustedProxies;

/// How long a one-time code may wait to be opened.
pub const CODE_TTL: Duration = Duration::from_secs(120);

/// How long a browser session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The session cookie's name.
pub const COOKIE: &str = "switchboard_ui";

/// One browser session.
#[derive(Clone, Debug)]
pub struct WebSession {
    /// What every state-changing request must carry in `X-CSRF-Token`.
    pub csrf: String,
    /// Who its answers are recorded as: the link it was signed in by (its own id, and the
    /// `--label` given to `switchboard ui`).
    pub by: By,
    expires: Instant,
}

/// A link not opened yet.
struct Code {
    expires: Instant,
    /// The label its browser answers as.
    label: Option<String>,
}

/// The codes and sessions, and where the page is served.
#[derive(Default)]
pub struct WebAccess {
    /// Where the page is served, once the ingest listener is bound.
    served: Mutex<Option<Served>>,
    /// The proxies whose `X-Forwarded-*` headers are believed (`http.trustedProxies`).
    proxies: Mutex<TrustedProxies>,
    codes: Mutex<HashMap<String, Code>>,
    sessions: Mutex<HashMap<String, WebSession>>,
}

/// Where the page is served.
#[derive(Clone, Debug)]
struct Served {
    /// The address the listener is bound to.
    bound: SocketAddr,
    /// `http://HOST:PORT` as a browser on this machine reaches it: a listener on every
    /// address (`0.0.0.0`, `::`) is reached on loopback.
    base: String,
    /// Beyond this machine over plain HTTP: not on loopback, and no TLS proxy in front.
    exposed: bool,
}

impl WebAccess {
    /// The page is served by the listener bound to `bound`, behind `proxies` (if any:
    /// `http.trustedProxies`, an error when one is not an address or network). A page served
    /// beyond this machine with no proxy in front is reached over plain HTTP: that is logged,
    /// and `switchboard ui` gives a link to it only with `--public`.
    pub fn serve_at(&self, bound: SocketAddr, proxies: &[String]) -> anyhow::Result<()> {
        let proxies = TrustedProxies::parse(proxies)
            .map_err(|e| anyhow::anyhow!("switchboard.json: `http.trustedProxies`: {e}"))?;
        let host = match bound.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => "127.0.0.1".to_string(),
            IpAddr::V6(ip) if ip.is_unspecified() => "[::1]".to_string(),
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        };
        let exposed = !bound.ip().is_loopback() && proxies.is_empty();
        if exposed {
            tracing::warn!(
                %bound,
                "the approval page is served on {bound} over plain HTTP: anyone on the network \
                 path could read its links and session cookie; `{}` gives a link only with \
                 `--public` (put a TLS reverse proxy in front and list it in \
                 `http.trustedProxies`, or listen on 127.0.0.1)",
                crate::home::command("ui")
            );
        }
        *self.served.lock().unwrap() = Some(Served {
            bound,
            base: format!("http://{host}:{}", bound.port()),
            exposed,
        });
        *self.proxies.lock().unwrap() = proxies;
        Ok(())
    }

    /// Whether `peer` is a trusted proxy, whose `X-Forwarded-*` headers are believed.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.proxies.lock().unwrap().trusts(peer)
    }

    /// Exchanges a one-time code for a new session: (session id, session). `None` when the
    /// code is unknown, used or expired.
    pub fn redeem(&self, code: &str) -> Option<(String, WebSession)> {
        let now = Instant::now();
        let code = self.codes.lock().unwrap().remove(code)?;
        if code.expires <= now {
            return None;
        }
        let id = random_token();
        // The link's own id, shown beside its label: not a part of any secret.
        let link_id = random_token()[..8].to_string();
        let session = WebSession {
            csrf: random_token(),
            by: By::new(ByKind::Link, link_id, code.label),
            expires: now + SESSION_TTL,
        };
        let mut sessions = self.sessions.lock().unwrap();
        sessions.retain(|_, s| s.expires > now);
        sessions.insert(id.clone(), session.clone());
        Some((id, session))
    }

    /// The live session named `id`.
    pub fn session(&self, id: &str) -> Option<WebSession> {
        let sessions = self.sessions.lock().unwrap();
        sessions
            .get(id)
            .filter(|s| s.expires > Instant::now())
            .cloned()
    }
}

impl WebLinks for WebAccess {
    fn link(&self, public: bool, label: Option<String>) -> Result<WebLink, String> {
        let Some(served) = self.served.lock().unwrap().clone() else {
            return Err(format!(
                "the approval page is not served yet: the ingest listener is not bound; check `{}`",
                crate::home::command("status")
            ));
        };
        let bound = served.bound;
        if served.exposed && !public {
            return Err(format!(
                "the approval page is served on {bound} over plain HTTP, beyond this machine: the \
                 link and the session cookie would cross the network readable by anyone on the \
                 way; put a TLS reverse proxy in front and list it in `http.trustedProxies`, or \
                 listen on 127.0.0.1, or run `{}` to accept that",
                crate::home::command("ui --public")
            ));
        }
        let mut notes = Vec::new();
        if bound.ip().is_unspecified() {
            notes.push(format!(
                "the daemon listens on every address ({bound}): from another machine, use this \
                 machine's name or address in the link"
            ));
        }
        if served.exposed {
            notes.push(format!(
                "warning: the page is served over plain HTTP on {bound}: anyone on the network \
                 path can read this link and the session cookie"
            ));
        }
        let code = random_token();
        let now = Instant::now();
        let mut codes = self.codes.lock().unwrap();
        codes.retain(|_, c| c.expires > now);
        codes.insert(
            code.clone(),
            Code {
                expires: now + CODE_TTL,
                label,
            },
        );
        Ok(WebLink {
            url: format!("{}/ui/login?code={code}", served.base),
            note: (!notes.is_empty()).then(|| notes.join("\n")),
        })
    }

    fn revoke(&self) -> (usize, usize) {
        let sessions = std::mem::take(&mut *self.sessions.lock().unwrap()).len();
        let now = Instant::now();
        let links = std::mem::take(&mut *self.codes.lock().unwrap())
            .values()
            .filter(|c| c.expires > now)
            .count();
        (sessions, links)
    }
}

/// 32 random bytes, hex.
fn random_token() -> String {
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).expect("the system's random source works");
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_works_once_and_becomes_a_session() {
        let access = WebAccess::default();
        assert!(
            access.link(false, None).is_err(),
            "no link before the listener is bound"
        );
        access
            .serve_at("127.0.0.1:9".parse().unwrap(), &[])
            .unwrap();
        let link = access.link(false, None).unwrap();
        assert_eq!(link.note, None);
        let code = link
            .url
            .strip_prefix("http://127.0.0.1:9/ui/login?code=")
            .unwrap();
        assert_eq!(code.len(), 64);
        let (id, session) = access.redeem(code).expect("first use");
        assert!(access.redeem(code).is_none(), "second use");
        assert_eq!(access.session(&id).unwrap().csrf, session.csrf);
        assert!(access.session("nope").is_none());
    }

    #[test]
    fn revoking_ends_every_session_and_unused_link() {
        let access = WebAccess::default();
        access
            .serve_at("127.0.0.1:9".parse().unwrap(), &[])
            .unwrap();
        let used = access.link(false, None).unwrap().url;
        let (id, _) = access.redeem(used.rsplit('=').next().unwrap()).unwrap();
        let unused = access.link(false, None).unwrap().url;
        assert_eq!(access.revoke(), (1, 1));
        assert!(access.session(&id).is_none());
        assert!(access.redeem(unused.rsplit('=').next().unwrap()).is_none());
        assert_eq!(access.revoke(), (0, 0));
    }

    #[test]
    fn a_page_beyond_this_machine_over_plain_http_needs_public_and_gets_a_usable_link() {
        let access = WebAccess::default();
        access
            .serve_at("0.0.0.0:8787".parse().unwrap(), &[])
            .unwrap();
        let refused = access.link(false, None).unwrap_err();
        assert!(
            refused.starts_with("the approval page is served on 0.0.0.0:8787 over plain HTTP")
                && refused.contains("`switchboard ui --public`"),
            "{refused}"
        );
        let link = access.link(true, None).unwrap();
        assert!(
            link.url.starts_with("http://127.0.0.1:8787/ui/login?code="),
            "{}",
            link.url
        );
        let note = link.note.unwrap();
        assert!(
            note.contains("use this machine's name or address"),
            "{note}"
        );
        assert!(
            note.contains("warning: the page is served over plain HTTP"),
            "{note}"
        );
        // Behind a TLS proxy: no `--public` needed, no warning.
        let proxies = ["10.0.0.1".to_string()];
        access
            .serve_at("[::]:8787".parse().unwrap(), &proxies)
            .unwrap();
        let link = access.link(false, None).unwrap();
        assert!(
            link.url.starts_with("http://[::1]:8787/ui/login?code="),
            "{}",
            link.url
        );
        assert!(!link.note.unwrap().contains("warning"));
        access
            .serve_at("192.0.2.7:8787".parse().unwrap(), &[])
            .unwrap();
        assert!(access.link(false, None).is_err());
        assert!(
            access
                .link(true, None)
                .unwrap()
                .url
                .starts_with("http://192.0.2.7:8787/")
        );
    }
}
