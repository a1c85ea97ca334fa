//! Inbox tests on a real temporary home.

use super::*;

fn settings() -> InboxSettings {
    InboxSettings {
        ring_size: 50,
        ..InboxSettings::default()
    }
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
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    let inbox = Inbox::open(&home, &settings()).await.unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    let inbox = Inbox::open(&home, &settings()).await.unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    let inbox = Inbox::open(&home, &settings()).await.unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
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
        .filter(|n| n.starts_with("channels"))
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, vec!["channels.jsonl", "channels.jsonl.1"]);
    let backup = journal_seqs(&dir.path().join("channels.jsonl.1"));
    let active = journal_seqs(&home.journal());
    assert_eq!(*active.last().unwrap(), 300);
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
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    let inbox = Inbox::open(&home, &settings()).await.unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    // Every write to /dev/full fails with "no space left on device".
    std::os::unix::fs::symlink("/dev/full", home.journal()).unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    let inbox = Inbox::open(&home, &settings()).await.unwrap();
    let mut rx = inbox.committed();
    let writer = inbox.clone();
    tokio::spawn(async move { writer.append(NewMessage::new("t", "c", "hi")).await });
    tokio::time::timeout(std::time::Duration::from_secs(5), rx.changed())
        .await
        .expect("woken within 5 s")
        .unwrap();
    assert_eq!(*rx.borrow(), 1);
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
