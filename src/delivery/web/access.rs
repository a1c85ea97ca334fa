//! Who may see the approval page: one-time codes (what `switchboard ui` prints in a link) and
//! the browser sessions they become.
//!
//! A code works once and for [`CODE_TTL`]; opening it sets an HttpOnly, SameSite=Strict cookie
//! naming a session, which holds the session's CSRF token. Both live in memory only: a daemon
//! restart signs every browser out (run `switchboard ui` again). The ingest token is never
//! part of any of it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::control::WebLinks;

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
    expires: Instant,
}

/// The codes and sessions.
#[derive(Default)]
pub struct WebAccess {
    /// `http://HOST:PORT`, once the ingest listener is bound.
    base: Mutex<Option<String>>,
    codes: Mutex<HashMap<String, Instant>>,
    sessions: Mutex<HashMap<String, WebSession>>,
}

impl WebAccess {
    /// The page is served at `base` (`http://127.0.0.1:8787`).
    pub fn set_base(&self, base: String) {
        *self.base.lock().unwrap() = Some(base);
    }

    /// Exchanges a one-time code for a new session: (session id, session). `None` when the
    /// code is unknown, used or expired.
    pub fn redeem(&self, code: &str) -> Option<(String, WebSession)> {
        let now = Instant::now();
        let expires = self.codes.lock().unwrap().remove(code)?;
        if expires <= now {
            return None;
        }
        let id = random_token();
        let session = WebSession {
            csrf: random_token(),
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
    fn link(&self) -> Result<String, String> {
        let Some(base) = self.base.lock().unwrap().clone() else {
            return Err(
                "the approval page is not served yet: the ingest listener is not bound; \
                        check `switchboard status`"
                    .into(),
            );
        };
        let code = random_token();
        let now = Instant::now();
        let mut codes = self.codes.lock().unwrap();
        codes.retain(|_, e| *e > now);
        codes.insert(code.clone(), now + CODE_TTL);
        Ok(format!("{base}/ui/login?code={code}"))
    }
}

/// 32 random bytes, hex.
fn random_token() -> String {
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).expect("the system's random source works");
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `a` and `b` are equal, in time independent of where they differ.
pub fn same(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_works_once_and_becomes_a_session() {
        let access = WebAccess::default();
        assert!(
            access.link().is_err(),
            "no link before the listener is bound"
        );
        access.set_base("http://127.0.0.1:9".into());
        let link = access.link().unwrap();
        let code = link
            .strip_prefix("http://127.0.0.1:9/ui/login?code=")
            .unwrap();
        assert_eq!(code.len(), 64);
        let (id, session) = access.redeem(code).expect("first use");
        assert!(access.redeem(code).is_none(), "second use");
        assert_eq!(access.session(&id).unwrap().csrf, session.csrf);
        assert!(access.session("nope").is_none());
        assert!(same(&session.csrf, &session.csrf.clone()));
        assert!(!same(&session.csrf, "x"));
    }
}
