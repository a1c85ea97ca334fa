//! Where polling stands in each chat, kept in the home (`teams-cursors.json`) so that a restart
//! neither replays nor skips.
//!
//! A chat's cursor is the creation time of the newest message taken from it (appended or
//! skipped) and the ids of the messages created at that very millisecond: a message is new when
//! it was created later, or at that time with another id. The first start begins from now: each
//! chat's cursor is its newest message then. A chat first seen later (a new chat) begins from the
//! poll before, so its first messages are not lost. A cursor moves only after the messages it
//! passes are in the inbox.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::home::write_atomic;

/// The file in the home.
pub const CURSORS_FILE: &str = "teams-cursors.json";

/// Every chat's cursor, and when the chats were last listed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cursors {
    /// When the last poll listed the chats; a chat first seen after it begins there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listed: Option<DateTime<Utc>>,
    /// By chat id.
    #[serde(default)]
    pub chats: BTreeMap<String, ChatCursor>,
}

/// Where one chat stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatCursor {
    /// The creation time of the newest message taken.
    pub at: DateTime<Utc>,
    /// The ids of the messages taken that were created at `at`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
}

impl ChatCursor {
    /// A cursor at `at`, with no message taken there.
    pub fn at(at: DateTime<Utc>) -> ChatCursor {
        ChatCursor {
            at,
            ids: Vec::new(),
        }
    }

    /// Whether a message created at `created` with `id` comes after this cursor.
    pub fn is_new(&self, created: DateTime<Utc>, id: &str) -> bool {
        created > self.at || (created == self.at && !self.ids.iter().any(|i| i == id))
    }

    /// Moves past the message created at `created` with `id`.
    pub fn take(&mut self, created: DateTime<Utc>, id: &str) {
        if created > self.at {
            self.at = created;
            self.ids = vec![id.to_string()];
        } else if created == self.at && !self.ids.iter().any(|i| i == id) {
            self.ids.push(id.to_string());
        }
    }
}

impl Cursors {
    /// The file in the home `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(CURSORS_FILE)
    }

    /// The saved cursors; `None` on a first start. A file that cannot be read is logged and
    /// counts as a first start (polling begins from now).
    pub fn load(path: &Path) -> Option<Cursors> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), cause = %e, "teams: cannot read the chat cursors; polling begins from now");
                return None;
            }
        };
        match serde_json::from_slice(&bytes) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(path = %path.display(), cause = %e, "teams: the chat cursors do not read as JSON; polling begins from now");
                None
            }
        }
    }

    /// Saves them (0600, atomically).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let mut text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        text.push(b'\n');
        write_atomic(path, &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_700_000_000_000 + ms).unwrap()
    }

    #[test]
    fn a_message_at_the_cursors_millisecond_is_new_once() {
        let mut c = ChatCursor::at(t(0));
        assert!(!c.is_new(t(-1), "a"));
        assert!(c.is_new(t(0), "a"), "nothing was taken at t0 yet");
        c.take(t(0), "a");
        assert!(!c.is_new(t(0), "a"));
        assert!(
            c.is_new(t(0), "b"),
            "another message of the same millisecond"
        );
        c.take(t(0), "b");
        c.take(t(5), "c");
        assert_eq!(
            c,
            ChatCursor {
                at: t(5),
                ids: vec!["c".into()]
            }
        );
        c.take(t(1), "late");
        assert_eq!(c.at, t(5), "a cursor never moves back");
    }

    #[test]
    fn cursors_survive_a_save_and_a_broken_file_is_a_first_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = Cursors::path(dir.path());
        assert_eq!(Cursors::load(&path), None);
        let mut c = Cursors {
            listed: Some(t(9)),
            ..Cursors::default()
        };
        c.chats
            .insert("19:a@thread.v2".into(), ChatCursor::at(t(3)));
        c.save(&path).unwrap();
        assert_eq!(Cursors::load(&path), Some(c));
        std::fs::write(&path, "{not json").unwrap();
        assert_eq!(Cursors::load(&path), None);
    }
}
