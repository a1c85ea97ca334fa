//! The engine on its own, with a record of its own; the logs' tests (`inbox`, `actions`) run it
//! under their records, the crash and fault tests through the binary.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::*;

/// A test record: `{"n":N,"pad":"xx…"}`.
#[derive(Clone, Debug)]
struct Line {
    n: u64,
    pad: usize,
}

impl Record for Line {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(
            format!(
                "{{\"n\":{},\"pad\":\"{}\"}}\n",
                self.n,
                "x".repeat(self.pad)
            )
            .as_bytes(),
        );
    }
}

fn line(n: u64) -> Line {
    Line { n, pad: 0 }
}

fn text(lines: impl IntoIterator<Item = Line>) -> String {
    let mut out = Vec::new();
    for l in lines {
        l.encode(&mut out);
    }
    String::from_utf8(out).unwrap()
}

fn settings(fsync: FsyncPolicy) -> Settings {
    Settings {
        name: "test journal",
        kept: "lines",
        fsync,
        rotation: None,
        retry: Backoff::new(Duration::from_millis(10), Duration::from_millis(100)),
    }
}

/// A journal on `test.jsonl` in `dir`, with `file` as its handle.
fn started(
    dir: &Path,
    settings: Settings,
    file: impl FnOnce(&Path) -> File,
) -> (PathBuf, Journal<Line>) {
    let path = dir.join("test.jsonl");
    drop(open_for_append(&path).unwrap());
    let handle = file(&path);
    let journal = Journal::start(
        path.clone(),
        handle,
        settings,
        Arc::new(Status::default()),
        (),
        || {},
    )
    .unwrap();
    (path, journal)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// Waits, up to ten seconds, until `done`.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn open_for_append_cuts_a_torn_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("test.jsonl");
    let full = text([line(1)]);
    std::fs::write(&path, full.clone() + "{\"n\":2,\"pa").unwrap();
    let (_file, cut) = open_for_append(&path).unwrap();
    assert_eq!(cut, 10);
    assert_eq!(read(&path), full);
}

#[tokio::test(flavor = "multi_thread")]
async fn always_writes_from_the_appending_task_and_answers_once_synced() {
    let dir = tempfile::tempdir().unwrap();
    let (path, journal) = started(dir.path(), settings(FsyncPolicy::Always), |p| {
        open_for_append(p).unwrap().0
    });
    let status = journal.status().clone();
    let (release, gate) = std::sync::mpsc::channel();
    *status.sync_gate.lock().unwrap() = Some(gate);
    let Landing::Later(mut answer) = journal.append([line(1)].iter(), 1) else {
        panic!("`always` answers after the sync");
    };
    // Written by the time the call returns, on the caller's thread...
    assert_eq!(read(&path), text([line(1)]));
    assert_eq!(status.written.load(Ordering::Acquire), 1);
    // ...but answered only once the sync thread has synced it.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(answer.try_recv().is_err(), "answered before any sync");
    assert_eq!(status.synced.load(Ordering::Acquire), 0);
    drop(release);
    assert_eq!(answer.await.unwrap(), Ok(()));
    assert_eq!(status.synced.load(Ordering::Acquire), 1);
    journal.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_write_answers_at_once_and_the_next_append_lands_it_once() {
    let dir = tempfile::tempdir().unwrap();
    // A read-only handle: the first write fails, and the file is opened again for the next.
    let (path, journal) = started(dir.path(), settings(FsyncPolicy::Interval), |p| {
        File::open(p).unwrap()
    });
    let status = journal.status().clone();
    let Landing::Now(first) = journal.append([line(1)].iter(), 1) else {
        panic!("`interval` answers at once");
    };
    assert!(first.is_err(), "told at once");
    assert!(status.errors.load(Ordering::Relaxed) >= 1);
    let Landing::Now(second) = journal.append([line(2)].iter(), 2) else {
        panic!("`interval` answers at once");
    };
    assert_eq!(second, Ok(()));
    assert_eq!(read(&path), text([line(1), line(2)]), "each once, in order");
    assert!(!status.is_failing());
    assert_eq!(status.describe(), "ok");
    assert_eq!(status.written.load(Ordering::Acquire), 2);
    journal.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn queued_records_land_in_order_without_a_later_hand_off_and_then_runs_after() {
    let dir = tempfile::tempdir().unwrap();
    let (path, journal) = started(dir.path(), settings(FsyncPolicy::Never), |p| {
        open_for_append(p).unwrap().0
    });
    let (tx, ran) = std::sync::mpsc::channel();
    for n in 1..=1000 {
        let tx = tx.clone();
        let then = Waiter::Then(Box::new(move || tx.send(n).unwrap()));
        journal.queue(vec![line(n)], Some(then));
    }
    // Nothing else comes: the writer thread writes them within its flush interval.
    let told: Vec<u64> = (0..1000)
        .map(|_| ran.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    assert_eq!(told, (1..=1000).collect::<Vec<_>>(), "in order");
    assert_eq!(read(&path), text((1..=1000).map(line)));
    journal.flush().await.unwrap();
    journal.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_appender_that_fills_the_file_only_asks_the_writer_thread_to_rotate() {
    let dir = tempfile::tempdir().unwrap();
    let backup = dir.path().join("test.jsonl.1");
    let mut s = settings(FsyncPolicy::Interval);
    // The second record fills the file.
    s.rotation = Some(Rotation {
        backup: backup.clone(),
        bytes: text([line(1)]).len() as u64 + 1,
    });
    let (path, journal) = started(dir.path(), s, |p| open_for_append(p).unwrap().0);
    let status = journal.status().clone();
    for n in 1..=2 {
        let Landing::Now(result) = journal.append([line(n)].iter(), n) else {
            panic!("`interval` answers at once");
        };
        result.unwrap();
    }
    // The writer thread rotates: the old file becomes the backup, and is synced (after the
    // rename: the wait is for both).
    eventually("rotated and synced", || {
        backup.exists() && read(&path).is_empty() && status.synced.load(Ordering::Acquire) == 2
    });
    assert_eq!(read(&backup), text([line(1), line(2)]));
    assert_eq!(status.bytes.load(Ordering::Relaxed), 0);
    let Landing::Now(result) = journal.append([line(3)].iter(), 3) else {
        panic!("`interval` answers at once");
    };
    result.unwrap();
    assert_eq!(read(&path), text([line(3)]));
    journal.close().await;
}

/// A write that fills the disk part way is cut back to where it began and lands whole once
/// there is room; whoever waits for it is told only then. Needs `mount -t tmpfs` (root);
/// where that is refused it says so and checks nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_the_disk_cannot_hold_is_cut_back_and_lands_whole_later() {
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
    let (path, journal) = started(dir.path(), settings(FsyncPolicy::Always), |p| {
        open_for_append(p).unwrap().0
    });
    journal.queue(vec![line(1)], None);
    journal.flush().await.unwrap();
    let before = std::fs::metadata(&path).unwrap().len();
    // The rest of the disk taken, but for the room left in the file's own first page.
    let filler = dir.path().join("filler");
    {
        use std::io::Write;
        let mut f = File::create(&filler).unwrap();
        while f.write_all(&[0u8; 1024]).is_ok() {}
    }
    let big = vec![Line { n: 2, pad: 3000 }, Line { n: 3, pad: 3000 }];
    let (tx, landed) = std::sync::mpsc::channel();
    journal.queue(
        big.clone(),
        Some(Waiter::Then(Box::new(move || tx.send(()).unwrap()))),
    );
    assert!(journal.flush().await.is_err(), "the disk is full");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        before,
        "what landed of the failed write is cut away"
    );
    assert!(journal.status().is_failing());
    assert!(landed.try_recv().is_err(), "told before it is written");
    std::fs::remove_file(&filler).unwrap();
    // The writer thread tries again on its own.
    landed
        .recv_timeout(Duration::from_secs(10))
        .expect("written by a retry once there is room");
    assert_eq!(read(&path), text([line(1)].into_iter().chain(big)));
    assert!(!journal.status().is_failing());
    journal.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_is_written_at_once_or_taken_back_out() {
    let dir = tempfile::tempdir().unwrap();
    // A read-only handle: the first write fails, and the file is opened again for the next.
    let (path, journal) = started(dir.path(), settings(FsyncPolicy::Never), |p| {
        File::open(p).unwrap()
    });
    let refused = journal.commit(vec![line(1)]).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(journal.unwritten(), 0, "taken back out, not kept");
    journal.queue(vec![line(2)], None);
    journal.commit(vec![line(3)]).await.unwrap();
    assert_eq!(
        read(&path),
        text([line(2), line(3)]),
        "written at once, after what came before it; the refused one never"
    );
    assert!(!journal.status().is_failing());
    journal.close().await;
    assert_eq!(read(&path), text([line(2), line(3)]));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_last_handle_gone_writes_what_is_queued() {
    let dir = tempfile::tempdir().unwrap();
    let (path, journal) = started(dir.path(), settings(FsyncPolicy::Interval), |p| {
        open_for_append(p).unwrap().0
    });
    journal.queue((1..=3).map(line).collect(), None);
    drop(journal);
    eventually("written at the end", || {
        read(&path) == text((1..=3).map(line))
    });
}
