//! Who answered a confirm: the person or program behind an answer, named the way its path
//! knows it.
//!
//! [`Via`](super::Via) says which path an answer came by; [`By`] says who was at the end of it:
//! the operating-system user at a terminal, the label of the approval page's link, the MCP
//! client and session that called the tool or showed the form, the host whose own dialog
//! allowed a relayed call, the Slack user who clicked. It is kept next to `via` in
//! `actions.jsonl` and shown by `pending --closed`, `watch` and the page; in JSON it is an
//! object `{"kind", "id", "name"}`.

use serde::{Deserialize, Serialize};

/// Who answered. Read also from a bare name, as a daemon older than the object sent it
/// (`"cli"`, `"claude-code#2"`): a client of that name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "ByWire")]
pub struct By {
    /// What sort of answerer `id` names.
    pub kind: ByKind,
    /// Who, as the path identifies them: a user id, a link id, a session's consumer.
    pub id: String,
    /// The name people know them by, when the path has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The sorts of answerer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ByKind {
    /// An operating-system user at a terminal: `id` the uid, `name` the login.
    User,
    /// A browser signed in to the approval page by a link of `switchboard ui`: `id` the
    /// link's own id, `name` its `--label`.
    Link,
    /// An MCP client session (the `channel_confirm` tool, an elicitation form): `id` the
    /// session's consumer (`claude-code#2`), `name` the client's `clientInfo.name`.
    Client,
    /// A host that allowed a relayed call in its own dialog: `id` its session's consumer.
    Host,
    /// A Slack user who clicked a button: `id` the user id (`U…`), `name` their name.
    Slack,
}

/// What `by` may be on the wire: the object, or a bare name from an older daemon.
#[derive(Deserialize)]
#[serde(untagged)]
enum ByWire {
    Object {
        kind: ByKind,
        id: String,
        #[serde(default)]
        name: Option<String>,
    },
    Name(String),
}

impl From<ByWire> for By {
    fn from(wire: ByWire) -> By {
        match wire {
            ByWire::Object { kind, id, name } => By::new(kind, id, name),
            ByWire::Name(name) => By::new(ByKind::Client, name, None),
        }
    }
}

impl By {
    /// `kind` `id`, known as `name`.
    pub fn new(kind: ByKind, id: impl Into<String>, name: Option<String>) -> By {
        By {
            kind,
            id: id.into(),
            name: name.filter(|n| !n.is_empty()),
        }
    }

    /// The user this process runs as (the terminal's answers).
    pub fn this_user() -> By {
        // SAFETY: getuid never fails and touches no memory of ours.
        let uid = unsafe { libc::getuid() };
        let name = crate::home::user_name(uid).or_else(|| std::env::var("USER").ok());
        By::new(ByKind::User, uid.to_string(), name)
    }
}

/// How people read it: the login, the link's label, the session, `@name` in Slack.
impl std::fmt::Display for By {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.kind, &self.name) {
            (ByKind::User, Some(name)) => f.write_str(name),
            (ByKind::User, None) => write!(f, "uid {}", self.id),
            (ByKind::Link, Some(label)) => write!(f, "page link \"{label}\""),
            (ByKind::Link, None) => write!(f, "page link {}", self.id),
            (ByKind::Client | ByKind::Host, _) => f.write_str(&self.id),
            (ByKind::Slack, Some(name)) => write!(f, "@{name}"),
            (ByKind::Slack, None) => write!(f, "Slack user {}", self.id),
        }
    }
}

/// A client session named `id`, for tests: it reads as `id`.
#[cfg(test)]
pub(crate) fn by(id: &str) -> By {
    By::new(ByKind::Client, id, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_an_object_of_kind_id_and_name() {
        let by = By::new(ByKind::Slack, "U024BE7LH", Some("ada".into()));
        assert_eq!(
            serde_json::to_value(&by).unwrap(),
            serde_json::json!({"kind": "slack", "id": "U024BE7LH", "name": "ada"})
        );
        let anon = By::new(ByKind::Link, "5f2a", Some(String::new()));
        assert_eq!(
            serde_json::to_string(&anon).unwrap(),
            r#"{"kind":"link","id":"5f2a"}"#,
            "an empty name is no name"
        );
        let back: By = serde_json::from_str(r#"{"kind":"client","id":"claude-code#2"}"#).unwrap();
        assert_eq!(back.to_string(), "claude-code#2");
        let older: By = serde_json::from_str(r#""cli""#).unwrap();
        assert_eq!(
            older.to_string(),
            "cli",
            "an older daemon's bare name still reads"
        );
        assert!(serde_json::from_str::<By>(r#"{"kind":"robot","id":"x"}"#).is_err());
    }

    #[test]
    fn each_kind_reads_as_people_know_it() {
        let shown = |kind, id: &str, name: Option<&str>| {
            By::new(kind, id, name.map(str::to_string)).to_string()
        };
        assert_eq!(shown(ByKind::User, "1000", Some("ada")), "ada");
        assert_eq!(shown(ByKind::User, "1000", None), "uid 1000");
        assert_eq!(
            shown(ByKind::Link, "5f2a", Some("phone")),
            "page link \"phone\""
        );
        assert_eq!(shown(ByKind::Link, "5f2a", None), "page link 5f2a");
        assert_eq!(shown(ByKind::Host, "claude-code#1", None), "claude-code#1");
        assert_eq!(shown(ByKind::Slack, "U1", Some("ada")), "@ada");
    }

    #[test]
    fn this_user_is_the_process_owner() {
        let me = By::this_user();
        assert_eq!(me.kind, ByKind::User);
        assert_eq!(me.id, unsafe { libc::getuid() }.to_string());
        assert!(me.name.is_some_and(|n| !n.is_empty()));
    }
}
