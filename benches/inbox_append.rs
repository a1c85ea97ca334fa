//! Inbox append and boot replay.
//!
//! `cargo bench --bench inbox_append`
//!
//! - `ring_only`: the in-memory inbox (no journal).
//! - `journal_fsync_never`: ring + journal, no fsync: acknowledged once queued for the
//!   writer thread, which writes within about a millisecond.
//! - `ring_only_prebuilt`, `journal_fsync_never_prebuilt`: the same two, with each message
//!   built before the timed call (Criterion's `iter_batched`): the append alone, without the
//!   three `String`s of its input. The rows above time both, as they always have.
//! - `journal_fsync_interval`: ring + journal, written by the appender before it is
//!   acknowledged (one `write(2)` per append; synced by a timer): what `never` did before.
//! - `write_syscall_220B` (baseline): one `write(2)` of a 220-byte record to a file, the floor
//!   of any append that writes before it acknowledges.
//! - `fsync_always/N`: N concurrent writers, each appending one message, with
//!   fsync=always; the time is per message, so group commit shows as falling cost.
//! - `replay_two_full_files`: boot replay of 200 records from a full 10 MiB
//!   active file and a full 10 MiB backup.

use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use switchboard::config::Home;
use switchboard::inbox::{FsyncPolicy, Inbox, InboxSettings, journal::Files};
use switchboard::message::{Message, NewMessage};

/// A 120-byte message body, the size the targets are quoted for.
fn message() -> NewMessage {
    NewMessage::new("alertmanager", "alerts/critical", "x".repeat(120))
}

fn settings(fsync: FsyncPolicy) -> InboxSettings {
    InboxSettings {
        fsync,
        ..InboxSettings::default()
    }
}

fn append(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("inbox_append");
    group.throughput(Throughput::Elements(1));

    let memory = Inbox::memory(&settings(FsyncPolicy::Never));
    group.bench_function("ring_only", |b| {
        b.to_async(&rt).iter(|| memory.append(message()))
    });
    group.bench_function("ring_only_prebuilt", |b| {
        b.to_async(&rt)
            .iter_batched(message, |m| memory.append(m), BatchSize::SmallInput)
    });

    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    let never = rt
        .block_on(Inbox::open(&home, &settings(FsyncPolicy::Never)))
        .unwrap();
    group.bench_function("journal_fsync_never", |b| {
        b.to_async(&rt).iter(|| never.append(message()))
    });
    group.bench_function("journal_fsync_never_prebuilt", |b| {
        b.to_async(&rt)
            .iter_batched(message, |m| never.append(m), BatchSize::SmallInput)
    });
    rt.block_on(never.close());

    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    let interval = rt
        .block_on(Inbox::open(&home, &settings(FsyncPolicy::Interval)))
        .unwrap();
    group.bench_function("journal_fsync_interval", |b| {
        b.to_async(&rt).iter(|| interval.append(message()))
    });
    rt.block_on(interval.close());

    let dir = tempfile::tempdir().unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.path().join("raw.jsonl"))
        .unwrap();
    let record = vec![b'x'; 220];
    group.bench_function("write_syscall_220B", |b| {
        b.iter(|| std::io::Write::write_all(&mut file, &record).unwrap())
    });

    for writers in [1usize, 8, 64] {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path()).unwrap();
        let inbox = rt
            .block_on(Inbox::open(&home, &settings(FsyncPolicy::Always)))
            .unwrap();
        group.throughput(Throughput::Elements(writers as u64));
        group.bench_with_input(
            BenchmarkId::new("fsync_always", writers),
            &writers,
            |b, &n| {
                b.to_async(&rt).iter_custom(|iters| {
                    let inbox = inbox.clone();
                    async move {
                        let start = Instant::now();
                        for _ in 0..iters {
                            let tasks: Vec<_> = (0..n)
                                .map(|_| {
                                    let inbox = inbox.clone();
                                    tokio::spawn(async move { inbox.append(message()).await })
                                })
                                .collect();
                            for t in tasks {
                                t.await.unwrap().unwrap();
                            }
                        }
                        start.elapsed()
                    }
                })
            },
        );
        rt.block_on(inbox.close());
    }
    group.finish();
}

fn replay(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let files = Files::new(dir.path().join("channels.jsonl"));
    let t = "2026-11-22T10:00:00Z".parse().unwrap();
    let mut seq = 0;
    for path in [&files.backup, &files.active] {
        let mut text = String::new();
        while text.len() < 10 * 1024 * 1024 {
            seq += 1;
            let m = Message::from_new(message(), seq, t);
            text.push_str(&serde_json::to_string(&m).unwrap());
            text.push('\n');
        }
        std::fs::write(path, text).unwrap();
    }
    c.bench_function("inbox_replay/two_full_10MiB_files", |b| {
        b.iter(|| {
            let tail = files.tail(200).unwrap();
            assert_eq!(tail.records.len(), 200);
            tail
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = append, replay
}
criterion_main!(benches);
