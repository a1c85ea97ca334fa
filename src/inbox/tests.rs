//! Inbox tests on a real temporary home.

use super::*;
use journal::{Files, Marks};
use log::Batch;

fn settings() -> InboxSettings {
    InboxSettings {
        ring_size: 50,
        ..InboxSettings::default()
    }
}

/// A fresh home in a temporary directory (removed when the directory is dropped).
fn temp_home() -> (tempfile::TempDir, Home) {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    (dir, home)
}

/// A fresh home and an inbox opened on it with `settings`.
async fn on_disk(settings: &InboxSettings) -> (tempfile::TempDir, Home, Inbox) {
    let (dir, home) = temp_home();
    let inbox = Inbox::open(&home, settings).await.unwrap();
    (dir, home, inbox)
}

/// The journal's progress marks of an inbox on disk.
fn marks(inbox: &Inbox) -> &Marks {
    inbox.inner.log.marks().expect("an inbox on a journal")
}

fn journal_seqs(path: &std::path::Path) -> Vec<Seq> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Message>(l).unwrap().seq)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_get_unique_increasing_seqs_in_journal_order() {
    let (_dir, home, inbox) = on_disk(&settings()).await;
    let mut tasks = Vec::new();
    for t in 0..16 {
        let inbox = inbox.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..25 {
                let a = inbox
                    .append(NewMessage::new("test", "c", format!("{t}-{i}")))
                    .await
                    .unwrap();
                seqs.push(a.seq);
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let seqs = t.await.unwrap();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "one task's seqs increase: {seqs:?}"
        );
        all.extend(seqs);
    }
    all.sort();
    assert_eq!(all, (1..=400).collect::<Vec<_>>());
    assert_eq!(inbox.last_seq(), 400);
    assert_eq!(journal_seqs(&home.journal()), (1..=400).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn restart_continues_seq_and_replays_the_tail() {
    let (_dir, home, inbox) = on_disk(&settings()).await;
    for i in 0..120 {
        inbox
            .append(NewMessage::new("t", "c", format!("m{i}")))
            .await
            .unwrap();
    }
    inbox.close().await;

    let inbox = Inbox::open(&home, &settings()).await.unwrap();
    assert_eq!(inbox.last_seq(), 120);
    let recent = inbox.recent(None, 1000);
    assert_eq!(
        recent.len(),
        50,
        "the ring holds ring_size replayed messages"
    );
    assert_eq!(recent.first().unwrap().seq, 71);
    let a = inbox
        .append(NewMessage::new("t", "c", "after restart"))
        .await
        .unwrap();
    assert_eq!(a.seq, 121);
}

#[tokio::test(flavor = "multi_thread")]
async fn duplicate_ids_are_acknowledged_without_a_second_record_even_after_restart() {
    let (_dir, home, inbox) = on_disk(&settings()).await;
    let first = inbox
        .append(NewMessage::new("am", "alerts", "x").with_id("fp1"))
        .await
        .unwrap();
    let again = inbox
        .append(NewMessage::new("am", "alerts", "x").with_id("fp1"))
        .await
        .unwrap();
    assert_eq!(
        again,
        Appended {
            seq: first.seq,
            duplicate: true
        }
    );
    inbox.close().await;
    let inbox = Inbox::open(&home, &settings()).await.unwrap();
    let batch = inbox
        .append_batch(vec![
            NewMessage::new("am", "alerts", "x").with_id("fp1"),
            NewMessage::new("am", "alerts", "y").with_id("fp2"),
        ])
        .await
        .unwrap();
    assert_eq!(
        batch[0],
        Appended {
            seq: 1,
            duplicate: true
        }
    );
    assert_eq!(
        batch[1],
        Appended {
            seq: 2,
            duplicate: false
        }
    );
    assert_eq!(journal_seqs(&home.journal()), vec![1, 2]);
    assert_eq!(inbox.stats().duplicates, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn rotation_keeps_exactly_one_backup() {
    let (dir, home) = temp_home();
    let s = InboxSettings {
        rotate_bytes: 4 * 1024,
        ..settings()
    };
    let inbox = Inbox::open(&home, &s).await.unwrap();
    for i in 0..300 {
        inbox
            .append(NewMessage::new("t", "c", format!("message number {i:04}")))
            .await
            .unwrap();
    }
    inbox.close().await;
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("channels.jsonl"))
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, vec!["channels.jsonl", "channels.jsonl.1"]);
    let backup = journal_seqs(&dir.path().join("channels.jsonl.1"));
    let active = journal_seqs(&home.journal());
    // The writer thread rotates once the file is full, which may be after the last append.
    assert_eq!(
        active.last().or(backup.last()),
        Some(&300),
        "the newest record is kept"
    );
    assert_eq!(
        backup.last().unwrap() + 1,
        active.first().copied().unwrap_or(301)
    );
    assert!(
        std::fs::metadata(dir.path().join("channels.jsonl.1"))
            .unwrap()
            .len()
            >= 4 * 1024
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn read_after_reaches_behind_the_ring_into_the_journal() {
    let (_dir, _home, inbox) = on_disk(&settings()).await;
    for i in 0..500 {
        inbox
            .append(NewMessage::new("t", "c", format!("m{i}")))
            .await
            .unwrap();
    }
    let got: Vec<Seq> = inbox
        .read_after(100, 30)
        .await
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(got, (101..=130).collect::<Vec<_>>());
    let got: Vec<Seq> = inbox
        .read_after(480, 100)
        .await
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(got, (481..=500).collect::<Vec<_>>());
    assert!(inbox.read_after(500, 10).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_disk_keeps_the_ring_serving_and_is_reported_then_recovers() {
    let (_dir, home) = failing_home();
    let inbox = Inbox::open(&home, &settings()).await.unwrap();
    let err = inbox
        .append(NewMessage::new("t", "c", "disk is full"))
        .await
        .unwrap_err();
    let InboxError::NotDurable { appended, cause } = &err else {
        panic!("expected NotDurable, got {err}");
    };
    assert_eq!(appended[0].seq, 1);
    assert!(cause.contains("No space left on device"), "{cause}");
    assert!(
        err.to_string().starts_with("kept in memory, not on disk"),
        "{err}"
    );
    // Readers still see it, and the next append still gets a seq.
    assert_eq!(inbox.recent(None, 10)[0].content, "disk is full");
    assert!(
        inbox
            .append(NewMessage::new("t", "c", "second"))
            .await
            .is_err()
    );
    let stats = inbox.stats();
    assert!(
        stats.journal_status.starts_with("failing: "),
        "{}",
        stats.journal_status
    );
    assert!(stats.journal_errors >= 2);
    assert_eq!(inbox.last_seq(), 2);

    // Free the "disk": the retry lands both messages, in order, once.
    std::fs::remove_file(home.journal()).unwrap();
    let ok = inbox
        .append(NewMessage::new("t", "c", "third"))
        .await
        .unwrap();
    assert_eq!(
        ok,
        Appended {
            seq: 3,
            duplicate: false
        }
    );
    assert_eq!(inbox.stats().journal_status, "ok");
    inbox.close().await;
    assert_eq!(journal_seqs(&home.journal()), vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread")]
async fn committed_watch_wakes_on_commit() {
    let (_dir, _home, inbox) = on_disk(&settings()).await;
    let mut rx = inbox.committed();
    let writer = inbox.clone();
    tokio::spawn(async move { writer.append(NewMessage::new("t", "c", "hi")).await });
    tokio::time::timeout(std::time::Duration::from_secs(5), rx.changed())
        .await
        .expect("woken within 5 s")
        .unwrap();
    assert_eq!(rx.borrow(), 1);
    assert_eq!(inbox.get(1).unwrap().content, "hi");
}

#[test]
fn channel_filter_matches_prefix_and_subtree() {
    for (filter, channel, want) in [
        ("alerts/*", "alerts", true),
        ("alerts/*", "alerts/x/y", true),
        ("alerts/*", "alertsx", false),
        ("ci/main", "ci/main", true),
        ("ci/main", "ci/main/x", false),
        ("*", "anything", true),
    ] {
        assert_eq!(
            channel_filter(filter, channel),
            want,
            "{filter} vs {channel}"
        );
    }
}

/// A home whose journal fails every write ("no space left on device"), as root too.
fn failing_home() -> (tempfile::TempDir, Home) {
    let (dir, home) = temp_home();
    std::os::unix::fs::symlink("/dev/full", home.journal()).unwrap();
    (dir, home)
}

fn policy(fsync: FsyncPolicy) -> InboxSettings {
    InboxSettings {
        fsync,
        ..settings()
    }
}

/// Waits, up to ten seconds, until the inbox reports its journal failing.
async fn failing(inbox: &Inbox) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !inbox.stats().journal_status.starts_with("failing: ") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the journal never reported the full disk"
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

const POLICIES: [FsyncPolicy; 3] = [
    FsyncPolicy::Always,
    FsyncPolicy::Interval,
    FsyncPolicy::Never,
];

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_duplicate_is_acknowledged_only_once_its_original_is_on_disk() {
    for fsync in POLICIES {
        let (_dir, home) = failing_home();
        let inbox = Inbox::open(&home, &policy(fsync)).await.unwrap();
        let alert = || NewMessage::new("am", "alerts", "disk full").with_id("fp1");
        match inbox.append(alert()).await {
            Err(InboxError::NotDurable { appended, .. }) if appended[0].seq == 1 => {}
            // `never` answers once queued, before the writer thread may have met the full disk.
            Ok(first) if fsync == FsyncPolicy::Never && first.seq == 1 => {
                failing(&inbox).await;
            }
            other => panic!("{fsync:?}: {other:?}"),
        }
        for _ in 0..3 {
            let retry = inbox.append(alert()).await;
            assert!(
                matches!(&retry, Err(InboxError::NotDurable { appended, .. })
                    if appended[0] == Appended { seq: 1, duplicate: true }),
                "{fsync:?}: a retry while the original is not on disk is not a 202: {retry:?}"
            );
        }
        // An id-less retry is a new message, and not durable either.
        let plain = inbox.append(NewMessage::new("t", "c", "no id")).await;
        assert!(
            matches!(plain, Err(InboxError::NotDurable { .. })),
            "{fsync:?}"
        );

        // The disk recovers: the retry itself lands the original, then says duplicate.
        std::fs::remove_file(home.journal()).unwrap();
        let retry = inbox
            .append(alert())
            .await
            .unwrap_or_else(|e| panic!("{fsync:?}: {e:?}"));
        assert_eq!(
            retry,
            Appended {
                seq: 1,
                duplicate: true
            },
            "{fsync:?}"
        );
        inbox.close().await;
        assert_eq!(journal_seqs(&home.journal()), vec![1, 2], "{fsync:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn seqs_shown_during_an_outage_are_never_handed_out_again() {
    for fsync in POLICIES {
        let (_dir, home) = failing_home();
        let inbox = Inbox::open(&home, &policy(fsync)).await.unwrap();
        let mut shown = Vec::new();
        for i in 0..3 {
            match inbox
                .append(NewMessage::new("t", "c", format!("m{i}")))
                .await
            {
                Err(InboxError::NotDurable { appended, .. }) => shown.push(appended[0].seq),
                // `never` answers once queued, before the writer thread may have met the full
                // disk: shown all the same.
                Ok(appended) if fsync == FsyncPolicy::Never => shown.push(appended.seq),
                other => panic!("{fsync:?}: expected not durable, got {other:?}"),
            }
        }
        assert_eq!(shown, vec![1, 2, 3]);
        assert_eq!(inbox.last_seq(), 3, "readers see them meanwhile");
        let line = std::fs::read_to_string(Files::new(home.journal()).reserved).unwrap();
        assert_eq!(
            line.split(' ').nth(2),
            Some("u"),
            "{fsync:?}: shown unwritten, yet channels.seq says otherwise: {line:?}"
        );
        // The process stops with nothing on disk (as a crash during the outage would).
        inbox.close().await;
        std::fs::remove_file(home.journal()).unwrap();

        let inbox = Inbox::open(&home, &policy(fsync)).await.unwrap();
        let next = inbox
            .append(NewMessage::new("t", "c", "after"))
            .await
            .unwrap();
        assert!(
            next.seq > 3,
            "{fsync:?}: seq {} was shown before the restart",
            next.seq
        );
        assert_eq!(inbox.get(next.seq).unwrap().content, "after");
        assert_eq!(
            inbox
                .read_after(0, 10)
                .await
                .iter()
                .map(|m| m.seq)
                .collect::<Vec<_>>(),
            vec![next.seq],
            "{fsync:?}: readers step over the gap"
        );
        inbox.close().await;
        // A clean stop with everything on disk leaves no gap behind.
        let inbox = Inbox::open(&home, &policy(fsync)).await.unwrap();
        let again = inbox.append(NewMessage::new("t", "c", "x")).await.unwrap();
        assert_eq!(again.seq, next.seq + 1, "{fsync:?}");
        inbox.close().await;
    }
}

/// Copies the journal and `channels.seq` as they are now: what a restart after a crash of the
/// process finds (the page cache keeps every write).
fn crash_copy(home: &Home) -> (tempfile::TempDir, Home) {
    let (dir, copy) = temp_home();
    let files = Files::new(home.journal());
    let to = Files::new(copy.journal());
    for (from, to) in [
        (&files.active, &to.active),
        (&files.backup, &to.backup),
        (&files.reserved, &to.reserved),
    ] {
        if from.exists() {
            std::fs::copy(from, to).unwrap();
        }
    }
    (dir, copy)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_of_the_process_leaves_no_gap_unless_seqs_were_shown_unwritten() {
    for fsync in POLICIES {
        let (_dir, home, inbox) = on_disk(&policy(fsync)).await;
        for i in 0..20 {
            let content = format!("m{i}");
            inbox
                .append(NewMessage::new("t", "c", content))
                .await
                .unwrap();
        }
        // Wait until the writer has taken its reservation ahead and written every record.
        let marks = marks(&inbox);
        let start = std::time::Instant::now();
        while marks.disk.written.load(Ordering::Acquire) < 20
            || marks.reserved.load(Ordering::Acquire) < journal::RESERVE_BLOCK
        {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(5),
                "{fsync:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let (_crashed, copy) = crash_copy(&home);
        inbox.close().await;

        let after = Inbox::open(&copy, &policy(fsync)).await.unwrap();
        let next = after
            .append(NewMessage::new("t", "c", "after"))
            .await
            .unwrap();
        if fsync == FsyncPolicy::Never {
            // Acknowledged messages may have been shown before they were written.
            assert!(next.seq > journal::RESERVE_BLOCK, "{fsync:?}: {}", next.seq);
        } else {
            assert_eq!(
                next.seq, 21,
                "{fsync:?}: a gap after a crash of the process"
            );
        }
        assert_eq!(after.read_after(0, 100).await.len(), 21, "{fsync:?}");
        after.close().await;

        // After a reboot, the page cache may have lost what was not synced: skip the reservation.
        let files = Files::new(copy.journal());
        let line = std::fs::read_to_string(&files.reserved).unwrap();
        let boot = journal::boot_id().unwrap();
        let (_rebooted, copy2) = crash_copy(&copy);
        let reserved = line.replace(boot, "00000000-0000-0000-0000-000000000000");
        // The clean stop above left the journal synced: reboot into a crash copy of a run
        // that had reserved ahead.
        let reserved = reserved.replacen(&line[..20], "00000000000000009000", 1);
        std::fs::write(Files::new(copy2.journal()).reserved, reserved).unwrap();
        let rebooted = Inbox::open(&copy2, &policy(fsync)).await.unwrap();
        let next = rebooted
            .append(NewMessage::new("t", "c", "x"))
            .await
            .unwrap();
        assert_eq!(next.seq, 9001, "{fsync:?}");
        rebooted.close().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn always_shows_a_written_record_before_its_sync_and_acknowledges_after() {
    let (_dir, home, inbox) = on_disk(&policy(FsyncPolicy::Always)).await;
    let marks = marks(&inbox);
    let (release, gate) = std::sync::mpsc::channel();
    *marks.disk.sync_gate.lock().unwrap() = Some(gate);
    let committed = inbox.committed();
    let append = |text: &'static str| {
        let inbox = inbox.clone();
        tokio::spawn(async move { inbox.append(NewMessage::new("t", "c", text)).await })
    };
    let shown = |upto: Seq| {
        let mut committed = committed.clone();
        async move {
            tokio::time::timeout(
                std::time::Duration::from_secs(5),
                committed.wait_for(move |c| c >= upto),
            )
            .await
            .is_ok_and(|r| r.is_ok())
        }
    };
    // The record is written and its sync is held: readers see it.
    let first = append("first");
    assert!(
        shown(1).await,
        "a written record is not shown before its sync"
    );
    // While that sync is held, the next record is written and shown too: it does not queue
    // behind the sync in flight.
    let second = append("second");
    assert!(
        shown(2).await,
        "a record waits behind the sync of an earlier one"
    );
    assert_eq!(inbox.read_after(0, 10).await.len(), 2);
    assert_eq!(marks.disk.synced.load(Ordering::Acquire), 0);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(
        !first.is_finished() && !second.is_finished(),
        "acknowledged before the sync"
    );
    // The syncs go ahead (the gate is gone): both appenders are acknowledged.
    drop(release);
    for (task, seq) in [(first, 1), (second, 2)] {
        let appended = tokio::time::timeout(std::time::Duration::from_secs(30), task)
            .await
            .expect("acknowledged once synced")
            .unwrap()
            .unwrap();
        assert_eq!(appended.seq, seq);
    }
    assert!(marks.disk.synced.load(Ordering::Acquire) >= 2);
    inbox.close().await;
    assert_eq!(journal_seqs(&home.journal()), vec![1, 2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn interval_syncs_a_lone_write_within_about_a_second() {
    let (_dir, _home, inbox) = on_disk(&policy(FsyncPolicy::Interval)).await;
    let marks = marks(&inbox);
    // Let the writer thread finish its boot work (the seq reservation) and go idle first.
    let start = std::time::Instant::now();
    while marks.reserved.load(Ordering::Acquire) < journal::RESERVE_BLOCK {
        assert!(start.elapsed() < std::time::Duration::from_secs(3));
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let a = inbox
        .append(NewMessage::new("t", "c", "alone"))
        .await
        .unwrap();
    assert!(marks.disk.written.load(Ordering::Acquire) >= a.seq);
    let start = std::time::Instant::now();
    let mut changed = inbox.committed();
    while marks.disk.synced.load(Ordering::Acquire) < a.seq {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(3),
            "a write no later write follows is still unsynced after 3 s"
        );
        // Woken by the publish that follows the sync, or checked again shortly.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(50), changed.changed()).await;
    }
    assert!(start.elapsed() >= std::time::Duration::from_millis(500));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_over_a_limit_is_refused_whole_and_spends_no_seq() {
    let inbox = Inbox::memory(&settings());
    let err = inbox
        .append_batch(vec![
            NewMessage::new("t", "c", "fine"),
            NewMessage::new("t", "c", "x").with_id("i".repeat(300)),
        ])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "message 1: `id` is 300 bytes, over the limit of 256 (`inbox.limits.idBytes`)"
    );
    assert!(
        inbox.recent(None, 10).is_empty(),
        "nothing of the batch is stored"
    );
    let ok = inbox
        .append(NewMessage::new("t", "c", "next"))
        .await
        .unwrap();
    assert_eq!(ok.seq, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ring_is_bounded_by_bytes_as_well_as_count() {
    let (_dir, home) = temp_home();
    let s = InboxSettings {
        ring_size: 1000,
        ring_bytes: 64 * 1024,
        ..settings()
    };
    let inbox = Inbox::open(&home, &s).await.unwrap();
    for i in 0..200 {
        inbox
            .append(NewMessage::new(
                "t",
                "c",
                format!("{i:04}{}", "x".repeat(4000)),
            ))
            .await
            .unwrap();
    }
    let stats = inbox.stats();
    assert!(stats.ring_bytes <= 64 * 1024, "{stats:?}");
    assert!(stats.ring_depth < 20, "{stats:?}");
    // What left the ring is read from the journal.
    let got = inbox.read_after(10, 5).await;
    assert_eq!(
        got.iter().map(|m| m.seq).collect::<Vec<_>>(),
        vec![11, 12, 13, 14, 15]
    );
    inbox.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_not_on_disk_stay_in_the_ring_until_written() {
    let (_dir, home) = failing_home();
    let inbox = Inbox::open(&home, &settings()).await.unwrap();
    for i in 0..120 {
        let _ = inbox
            .append(NewMessage::new("t", "c", format!("m{i}")))
            .await;
    }
    // Over the ring's 50, but nothing is on disk to read them back from.
    assert_eq!(inbox.stats().ring_depth, 120);
    let got = inbox.read_after(0, 256).await;
    assert_eq!(got.len(), 120, "every committed message is readable");
    std::fs::remove_file(home.journal()).unwrap();
    inbox
        .append(NewMessage::new("t", "c", "recovered"))
        .await
        .unwrap();
    inbox
        .append(NewMessage::new("t", "c", "next"))
        .await
        .unwrap();
    assert_eq!(
        inbox.stats().ring_depth,
        50,
        "written, so the ring lets them go"
    );
    assert_eq!(inbox.read_after(0, 5).await[0].seq, 1);
    inbox.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filtered_read_behind_the_ring_finds_the_oldest_matches_in_one_scan() {
    let (_dir, _home, inbox) = on_disk(&settings()).await;
    for i in 1..=2000 {
        let channel = if i % 500 == 0 {
            "alerts/disk"
        } else {
            "ci/main"
        };
        inbox
            .append(NewMessage::new("t", channel, format!("m{i}")))
            .await
            .unwrap();
    }
    let seqs = |v: Vec<Arc<Message>>| v.iter().map(|m| m.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(inbox.read_after_matching(0, 3, Some("alerts/*")).await),
        vec![500, 1000, 1500]
    );
    assert_eq!(
        seqs(inbox.read_after_matching(600, 10, Some("alerts/*")).await),
        vec![1000, 1500, 2000],
        "journal and ring together"
    );
    assert!(
        inbox
            .read_after_matching(0, 10, Some("nothing"))
            .await
            .is_empty()
    );
    inbox.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_writes_what_it_queued_in_seq_order_without_a_later_append() {
    let (_dir, home, inbox) = on_disk(&policy(FsyncPolicy::Never)).await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let inbox = inbox.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..250 {
                inbox
                    .append(NewMessage::new("t", "c", format!("{t}-{i}")))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let marks = marks(&inbox);
    let start = std::time::Instant::now();
    while marks.disk.written.load(Ordering::Acquire) < 2000 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "queued messages not written"
        );
        tokio::task::yield_now().await;
    }
    // Written while the inbox is still open, not only at close.
    assert_eq!(
        journal_seqs(&home.journal()),
        (1..=2000).collect::<Vec<_>>()
    );
    inbox.close().await;
}

/// A log that keeps the seqs it is handed, in the order it gets them, and can read nothing
/// back: what a second implementation of the boundary sees.
struct Recording {
    seqs: Arc<Mutex<Vec<Seq>>>,
    committed: SeqWatch,
}

impl Log for Recording {
    fn admit(&self) -> Result<(), InboxError> {
        Ok(())
    }

    fn append(&self, batch: Batch<'_>) -> Landing {
        let mut seqs = self.seqs.lock().unwrap();
        seqs.extend(batch.messages().map(|m| m.seq));
        assert_eq!(seqs.last().copied().unwrap_or(0), batch.last());
        Landing::Now(Ok(()))
    }

    fn show(
        &self,
        upto: Seq,
        _: Seq,
        _: &Result<(), String>,
    ) -> Option<futures::future::BoxFuture<'static, ()>> {
        self.committed.advance(upto);
        None
    }

    fn committed(&self) -> &SeqWatch {
        &self.committed
    }

    fn durable(&self) -> Seq {
        Seq::MAX
    }

    fn held(&self) -> Seq {
        0
    }

    fn read_after(
        &self,
        _: Seq,
        _: usize,
        _: Option<&str>,
    ) -> futures::future::BoxFuture<'static, std::io::Result<(Vec<Message>, Seq)>> {
        Box::pin(std::future::ready(Ok((Vec::new(), 0))))
    }

    fn stats(&self) -> log::LogStats {
        log::LogStats::default()
    }

    fn close(&self) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_log_gets_batches_in_seq_order_and_the_ring_keeps_what_it_cannot_read_back() {
    let recording = Recording {
        seqs: Arc::default(),
        committed: SeqWatch::new(0),
    };
    let seqs = recording.seqs.clone();
    let opened = Opened {
        log: Box::new(recording),
        replayed: Vec::new(),
        start: 0,
        skipped: 0,
    };
    let inbox = Inbox::build(&settings(), opened);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let inbox = inbox.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let batch = (0..3)
                    .map(|j| NewMessage::new("t", "c", format!("{t}-{i}-{j}")))
                    .collect();
                inbox.append_batch(batch).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*seqs.lock().unwrap(), (1..=480).collect::<Vec<_>>());
    assert_eq!(inbox.last_seq(), 480);
    // Over the ring's 50, but the log can give nothing back: the ring keeps every message.
    assert_eq!(inbox.stats().ring_depth, 480);
    assert_eq!(inbox.read_after(0, 1000).await.len(), 480);
}
