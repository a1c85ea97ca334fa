//! `actions.jsonl`: every action and every change of its state, appended.
//!
//! One JSON object per line. A creation record carries the whole action and its source
//! message (so a restart can deliver it without the inbox); a transition record carries the
//! id and the new state; an `evaluated` record marks how far the dispatcher has evaluated
//! the inbox. The dispatcher writes a batch's actions and its mark in one write and one
//! fsync, so after a crash either both are on disk or neither is: no message makes its actions
//! twice, none is skipped. A batch that made no action writes only its mark, and may be
//! written a few milliseconds later together with the marks after it (see
//! [`super::writer`]): a crash in between evaluates those messages again at the next start.
//!
//! The file is kept by the journal engine ([`crate::message::journal`]): a failed write cuts
//! away what part of it landed (or, should the cut fail, the file is cut back when it is opened
//! again) and the records are written again, whole, in order. A record written twice would
//! replay to the same state all the same: each line sets an action's state, and the same lines
//! follow.
//!
//! At boot the file is replayed into [`Replay`] (live actions, next id, evaluation mark) and
//! compacted: rewritten (tmp + rename) with only what is still live, so it does not grow
//! across restarts. A torn last line (crash mid-write) is skipped.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Action, ActionId, ActionState};
use crate::message::journal::{self as engine, open_for_append};
use crate::message::{Message, Seq};

/// One line of `actions.jsonl`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// When it was written.
    pub at: Option<DateTime<Utc>>,
    /// The action id (absent on an `evaluated` mark).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<ActionId>,
    /// The state the action entered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ActionState>,
    /// On creation: the action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// On creation: the source message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// Who it was delivered to, or who answered a confirm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// Who answered a confirm (absent in journals written before it was kept, which name
    /// the answerer in `consumer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<super::By>,
    /// The path a confirm's answer came by (absent in journals written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<super::Via>,
    /// Why (dropped: which queue was full).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The dispatcher has evaluated every message up to this seq.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluated: Option<Seq>,
    /// The end of an exec run: kind, duration, tool calls, usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<super::ExecReport>,
    /// Released work whose result may have reached its client: handed out again, it is
    /// marked `redelivered` (and so on a creation record that compaction rewrote).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redelivered: bool,
}

impl Record {
    /// A transition of action `id` to `state`.
    pub fn transition(id: ActionId, state: ActionState, at: DateTime<Utc>) -> Record {
        Record {
            at: Some(at),
            id: Some(id),
            state: Some(state),
            ..Record::default()
        }
    }

    /// The creation of `action` in `state`, with its message.
    pub fn created(action: &Action, state: ActionState, message: &Message) -> Record {
        Record {
            at: Some(action.created),
            id: Some(action.id),
            state: Some(state),
            action: Some(action.clone()),
            message: Some(message.clone()),
            ..Record::default()
        }
    }
}

/// A live action found at boot.
#[derive(Clone, Debug)]
pub struct LiveAction {
    /// The action.
    pub action: Action,
    /// Its source message.
    pub message: Message,
    /// Its last state.
    pub state: ActionState,
    /// Handed out before, and its result may have reached a client: a release said so, or it
    /// was still claimed when the process stopped.
    pub redelivered: bool,
}

/// What replaying `actions.jsonl` found.
#[derive(Debug, Default)]
pub struct Replay {
    /// Actions not finished, by id: queued (never delivered), pending, approved (not delivered),
    /// running (an exec run the process did not see end).
    pub live: BTreeMap<ActionId, LiveAction>,
    /// The id after the highest one seen.
    pub next_id: ActionId,
    /// The evaluation mark, when one was written.
    pub evaluated: Option<Seq>,
    /// Lines that could not be read (a torn last line after a crash).
    pub skipped: u64,
    /// Whether the file existed.
    pub existed: bool,
}

/// The actions journal, replayed, compacted and open for appending: what
/// [`super::writer::JournalWriter::start`] writes to.
pub struct ActionLog {
    path: PathBuf,
    file: File,
}

impl ActionLog {
    /// Replays `path`, compacts it, and opens it for appending.
    pub fn open(path: &Path) -> std::io::Result<(ActionLog, Replay)> {
        let replay = replay(path)?;
        compact(path, &replay)?;
        let (file, _) = open_for_append(path)?;
        let log = ActionLog {
            path: path.to_path_buf(),
            file,
        };
        Ok((log, replay))
    }

    /// The path and the open file.
    pub fn into_parts(self) -> (PathBuf, File) {
        (self.path, self.file)
    }
}

/// A record as the journal writes it: one JSON line.
impl engine::Record for Record {
    fn encode(&self, out: &mut Vec<u8>) {
        serde_json::to_writer(&mut *out, self).expect("records serialize");
        out.push(b'\n');
    }
}

/// Reads `path` (absent = empty) into the live actions, next id and evaluation mark.
pub fn replay(path: &Path) -> std::io::Result<Replay> {
    let mut out = Replay {
        next_id: 1,
        ..Replay::default()
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    out.existed = true;
    for line in BufReader::new(file).split(b'\n') {
        let line = line?;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(r) = serde_json::from_slice::<Record>(&line) else {
            out.skipped += 1;
            continue;
        };
        if let Some(seq) = r.evaluated {
            out.evaluated = Some(out.evaluated.unwrap_or(0).max(seq));
        }
        let (Some(id), Some(state)) = (r.id, r.state) else {
            continue;
        };
        out.next_id = out.next_id.max(id + 1);
        if let (Some(action), Some(message)) = (r.action, r.message) {
            out.live.insert(
                id,
                LiveAction {
                    action,
                    message,
                    state,
                    redelivered: r.redelivered,
                },
            );
        } else if let Some(live) = out.live.get_mut(&id) {
            live.state = state;
            live.redelivered |= r.redelivered;
        }
    }
    // A claim dies with the process that held it: claimed or released work is queued again.
    out.live.retain(|_, a| {
        matches!(
            a.state,
            ActionState::Queued
                | ActionState::Pending
                | ActionState::Approved
                | ActionState::Claimed
                | ActionState::Released
                | ActionState::Running
        )
    });
    Ok(out)
}

/// Rewrites `path` with only the live actions, the next id and the mark.
fn compact(path: &Path, replay: &Replay) -> std::io::Result<()> {
    if !replay.existed {
        return Ok(());
    }
    let mut text = Vec::new();
    for live in replay.live.values() {
        let r = Record {
            redelivered: live.redelivered,
            ..Record::created(&live.action, live.state, &live.message)
        };
        serde_json::to_writer(&mut text, &r).expect("records serialize");
        text.push(b'\n');
    }
    // Keeps the id counter when nothing is live.
    if replay.next_id > 1 && !replay.live.contains_key(&(replay.next_id - 1)) {
        let r = Record {
            at: Some(Utc::now()),
            id: Some(replay.next_id - 1),
            state: Some(ActionState::Done),
            reason: Some("compacted".into()),
            ..Record::default()
        };
        serde_json::to_writer(&mut text, &r).expect("records serialize");
        text.push(b'\n');
    }
    if let Some(seq) = replay.evaluated {
        let r = Record {
            at: Some(Utc::now()),
            evaluated: Some(seq),
            ..Record::default()
        };
        serde_json::to_writer(&mut text, &r).expect("records serialize");
        text.push(b'\n');
    }
    crate::home::write_atomic(path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::Mode;
    use crate::message::NewMessage;

    fn action(id: ActionId, mode: Mode) -> (Action, Message) {
        let now = Utc::now();
        let msg = Message::from_new(NewMessage::new("s", "c", "x"), id, now);
        let a = Action {
            id,
            rule: "r".into(),
            mode,
            seq: id,
            prompt: "p".into(),
            tools: vec![],
            created: now,
            expires: None,
            delivery: Default::default(),
            approve_via: vec![],
            consumers: Default::default(),
        };
        (a, msg)
    }

    /// Appends `records` to `path` as the journal writes them.
    fn append(path: &Path, records: &[Record]) {
        use std::io::Write;
        let mut lines = Vec::new();
        for r in records {
            engine::Record::encode(r, &mut lines);
        }
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(&lines).unwrap();
    }

    #[test]
    fn replay_keeps_live_actions_and_compacts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("actions.jsonl");
        let now = Utc::now();
        {
            let (_log, replay) = ActionLog::open(&path).unwrap();
            assert!(!replay.existed);
            assert_eq!(replay.next_id, 1);
            let (a1, m1) = action(1, Mode::Confirm);
            let (a2, m2) = action(2, Mode::Auto);
            let (a3, m3) = action(3, Mode::Notify);
            append(
                &path,
                &[
                    Record::created(&a1, ActionState::Pending, &m1),
                    Record::created(&a2, ActionState::Queued, &m2),
                    Record::created(&a3, ActionState::Queued, &m3),
                    Record {
                        evaluated: Some(3),
                        ..Record::default()
                    },
                ],
            );
            append(&path, &[Record::transition(3, ActionState::Delivered, now)]);
        }
        // A torn line, as after kill -9.
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(b"{\"id\":4,\"sta").unwrap();
        }

        let (_, replay) = ActionLog::open(&path).unwrap();
        assert_eq!(replay.live.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(replay.live[&1].state, ActionState::Pending);
        assert_eq!(replay.next_id, 4);
        assert_eq!(replay.evaluated, Some(3));
        assert_eq!(replay.skipped, 1);
        // Compacted: the live actions, the id counter and the mark; replays the same.
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert_eq!(lines, 4);
        let (_, again) = ActionLog::open(&path).unwrap();
        assert_eq!(again.live.len(), 2);
        assert_eq!(again.next_id, 4);
        assert_eq!(again.evaluated, Some(3));
        assert_eq!(again.skipped, 0);
    }

    #[test]
    fn a_journal_written_before_via_and_approve_via_still_replays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("actions.jsonl");
        let created = r#"{"at":"2026-01-01T00:00:00Z","id":1,"state":"pending","action":{"id":1,"rule":"r","mode":"confirm","seq":1,"prompt":"p","tools":[],"created":"2026-01-01T00:00:00Z","expires":"2099-01-01T00:00:00Z"},"message":{"seq":1,"serverName":"s","channel":"c","content":"x","timestamp":"2026-01-01T00:00:00Z"}}"#;
        let answered = r#"{"at":"2026-01-01T00:01:00Z","id":2,"state":"denied","consumer":"cli"}"#;
        std::fs::write(&path, format!("{created}\n{answered}\n")).unwrap();
        let (_log, replay) = ActionLog::open(&path).unwrap();
        assert_eq!(replay.skipped, 0);
        let live = &replay.live[&1];
        assert_eq!(live.state, ActionState::Pending);
        assert!(live.action.approve_via.is_empty(), "any path may answer");
        let record: Record = serde_json::from_str(answered).unwrap();
        assert_eq!(
            (record.consumer.as_deref(), record.via),
            (Some("cli"), None)
        );
        let now = Record {
            via: Some(super::super::Via::Web),
            ..record
        };
        assert!(
            serde_json::to_string(&now)
                .unwrap()
                .contains(r#""via":"web""#)
        );
    }
}
