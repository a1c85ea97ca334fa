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
//! A failed write cuts away what part of it landed; the writer keeps the records and writes
//! them again. Should the cut fail too, the next write first ends the partial line, which
//! replay then skips. A record written twice (its sync failed, so it was written again)
//! replays to the same state: each line sets an action's state, and the same lines follow.
//!
//! At boot the file is replayed into [`Replay`] (live actions, next id, evaluation mark) and
//! compacted: rewritten (tmp + rename) with only what is still live, so it does not grow
//! across restarts. A torn last line (crash mid-write) is skipped.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Action, ActionId, ActionState};
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

/// The open actions journal.
pub struct ActionLog {
    path: PathBuf,
    /// The open file and its length as this process last wrote it (read once at open, so that
    /// a write needs no `fstat` to know where a failed write's cut goes). A failed write closes
    /// it: the next one opens the file again and reads its length then.
    file: Mutex<Option<(File, u64)>>,
    /// Write failures so far (each failed attempt, retries included).
    pub errors: AtomicU64,
    failing: Mutex<Option<String>>,
    /// A failed write may have left part of a line that could not be cut away: the next
    /// write ends it first, so the records after it stay readable.
    torn: AtomicBool,
}

impl ActionLog {
    /// Replays `path`, compacts it, and opens it for appending.
    pub fn open(path: &Path) -> std::io::Result<(ActionLog, Replay)> {
        let replay = replay(path)?;
        compact(path, &replay)?;
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        let len = file.metadata()?.len();
        Ok((
            ActionLog {
                path: path.to_path_buf(),
                file: Mutex::new(Some((file, len))),
                errors: AtomicU64::new(0),
                failing: Mutex::new(None),
                torn: AtomicBool::new(false),
            },
            replay,
        ))
    }

    /// Appends `records` with one write, then one fsync when `sync`; see [`ActionLog::write`].
    pub fn append(&self, records: &[Record], sync: bool) -> Result<(), String> {
        let mut lines = Vec::new();
        encode(records, &mut lines);
        self.write(&lines, sync)
    }

    /// Appends `lines` (whole JSON lines, from [`encode`]) with one write, then one fsync when
    /// `sync`. A failure is logged once per outage (and the recovery once), counted and
    /// returned; what part of `lines` landed is cut away where the file allows it, so the
    /// caller keeps them and writes them again.
    pub fn write(&self, lines: &[u8], sync: bool) -> Result<(), String> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut guard = self.file.lock().unwrap();
        let result = (|| {
            if guard.is_none() {
                let file = OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(&self.path)?;
                let len = file.metadata()?.len();
                *guard = Some((file, len));
            }
            let (file, len) = guard.as_mut().expect("opened above");
            if self.torn.load(Ordering::Relaxed) {
                file.write_all(b"\n")?;
                *len += 1;
                self.torn.store(false, Ordering::Relaxed);
            }
            if let Err(e) = file.write_all(lines) {
                let cut =
                    file.set_len(*len).is_ok() || file.metadata().is_ok_and(|m| m.len() == *len);
                if !cut {
                    self.torn.store(true, Ordering::Relaxed);
                }
                return Err(e);
            }
            *len += lines.len() as u64;
            if sync { file.sync_data() } else { Ok(()) }
        })();
        let mut failing = self.failing.lock().unwrap();
        match result {
            Ok(()) => {
                if let Some(cause) = failing.take() {
                    tracing::info!(previous = %cause, "actions journal writes recovered");
                }
                Ok(())
            }
            Err(e) => {
                *guard = None;
                self.errors.fetch_add(1, Ordering::Relaxed);
                let cause = e.to_string();
                if failing.is_none() {
                    tracing::error!(
                        journal = %self.path.display(),
                        "actions journal write failed: {cause}; retrying with backoff, actions kept in memory"
                    );
                }
                *failing = Some(cause.clone());
                Err(cause)
            }
        }
    }

    /// Flushes written records to the disk.
    pub fn sync(&self) -> Result<(), String> {
        match &*self.file.lock().unwrap() {
            Some((file, _)) => file.sync_data().map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// Whether the last write failed.
    pub fn is_failing(&self) -> bool {
        self.failing.lock().unwrap().is_some()
    }

    /// `ok`, or `failing: CAUSE`.
    pub fn status(&self) -> String {
        match &*self.failing.lock().unwrap() {
            None => "ok".into(),
            Some(cause) => format!("failing: {cause}"),
        }
    }
}

/// Appends `records` to `out` as JSON lines, ready for [`ActionLog::write`].
pub fn encode(records: &[Record], out: &mut Vec<u8>) {
    out.reserve(records.len() * 256);
    for r in records {
        serde_json::to_writer(&mut *out, r).expect("records serialize");
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

    /// A write that fills the disk part way is cut back to where it began, by the length the
    /// log keeps (it no longer asks the file), and lands whole once there is room. Needs
    /// `mount -t tmpfs` (root); where that is refused it says so and checks nothing.
    #[test]
    fn a_write_the_disk_cannot_hold_is_cut_back_and_lands_whole_later() {
        use std::process::Command;
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs"])
            .arg(dir.path())
            .output()
            .is_ok_and(|o| o.status.success());
        if !mounted {
            eprintln!("NOTICE: skipped: `mount -t tmpfs` is refused here");
            return;
        }
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = Command::new("umount").arg("-l").arg(self.0).output();
            }
        }
        let _unmount = Unmount(dir.path());
        let path = dir.path().join("actions.jsonl");
        let (log, _) = ActionLog::open(&path).unwrap();
        let mark = |n: u64, pad: usize| Record {
            evaluated: Some(n),
            reason: Some("x".repeat(pad)),
            ..Default::default()
        };
        log.append(&[mark(1, 10)], true).unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        // The rest of the disk taken, but for the room left in the log's own first page.
        let filler = dir.path().join("filler");
        {
            let mut f = File::create(&filler).unwrap();
            while f.write_all(&[0u8; 1024]).is_ok() {}
        }
        let big = [mark(2, 3000), mark(3, 3000)];
        assert!(log.append(&big, true).is_err(), "the disk is full");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            before,
            "what landed of the failed write is cut away"
        );
        std::fs::remove_file(&filler).unwrap();
        log.append(&big, true).unwrap();
        let replay = replay(&path).unwrap();
        assert_eq!(replay.skipped, 0, "no torn line");
        assert_eq!(replay.evaluated, Some(3));
        let lines = std::fs::read_to_string(&path).unwrap();
        assert_eq!(lines.lines().count(), 3, "{} bytes", lines.len());
    }

    #[test]
    fn replay_keeps_live_actions_and_compacts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("actions.jsonl");
        let now = Utc::now();
        {
            let (log, replay) = ActionLog::open(&path).unwrap();
            assert!(!replay.existed);
            assert_eq!(replay.next_id, 1);
            let (a1, m1) = action(1, Mode::Confirm);
            let (a2, m2) = action(2, Mode::Auto);
            let (a3, m3) = action(3, Mode::Notify);
            log.append(
                &[
                    Record::created(&a1, ActionState::Pending, &m1),
                    Record::created(&a2, ActionState::Queued, &m2),
                    Record::created(&a3, ActionState::Queued, &m3),
                    Record {
                        evaluated: Some(3),
                        ..Record::default()
                    },
                ],
                true,
            )
            .unwrap();
            log.append(&[Record::transition(3, ActionState::Delivered, now)], true)
                .unwrap();
        }
        // A torn line, as after kill -9.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"id\":4,\"sta").unwrap();
        drop(f);

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
