//! Many partition logs in one process: no thread per log, small files for
//! empty logs, every log keeps its own order and data through a reopen.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use liftbridge::store::{
    writer_threads, LogConfig, NewRecord, PartitionLog, RetentionPolicy, SyncPolicy,
};

fn rec(i: u64) -> NewRecord {
    NewRecord {
        timestamp_ns: i as i64,
        key: None,
        headers: Vec::new(),
        value: Bytes::from(format!("value-{i}")),
        subject: "s".into(),
        reply: None,
    }
}

/// Threads of this process now.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("Threads line")
}

/// Bytes allocated on disk (as `du` counts them) by the files in `dir`.
fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("dir entry").metadata().expect("metadata").blocks() * 512)
        .sum()
}

async fn open_many(dir: &Path, n: usize, cfg: &LogConfig) -> Vec<PartitionLog> {
    let dir = dir.to_owned();
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || {
        (0..n)
            .map(|i| PartitionLog::open(&dir, &format!("p{i}"), cfg.clone()).expect("open"))
            .collect()
    })
    .await
    .expect("open task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_many_logs_share_threads_and_empty_ones_stay_small() {
    const N: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        sync: SyncPolicy::Always,
        // Retention is configured, so every log is known to the
        // maintenance thread; it must still not cost a thread each.
        retention: RetentionPolicy {
            max_messages: Some(1_000_000),
            ..Default::default()
        },
        cleaner_interval: Duration::from_millis(50),
        ..Default::default()
    };
    let before = threads();
    let logs = open_many(dir.path(), N, &cfg).await;
    let with_logs = threads();
    // Other tests of this binary run at the same time and start threads of
    // their own, so allow some slack; one thread per log would be +300.
    assert!(
        with_logs < before + writer_threads() + 1 + 60,
        "{N} logs took {} threads (before {before}, after {with_logs})",
        with_logs.saturating_sub(before)
    );
    // An empty log: ≤ 256 KiB on disk, database and journal together (no
    // database file until the first record, an empty journal).
    let empty = du(dir.path()) / N as u64;
    assert!(
        empty <= 256 << 10,
        "an empty log uses {empty} bytes on disk"
    );

    // Every log takes appends, interleaved across logs, in its own order.
    let mut pending = Vec::new();
    for round in 0..5u64 {
        for log in &logs {
            pending.push(log.append(1, vec![rec(round)]));
        }
    }
    for r in futures::future::join_all(pending).await {
        r.expect("append");
    }
    for log in &logs {
        assert_eq!(log.log_end_offset(), 5);
        let got = log.read(0, 10, usize::MAX).await.expect("read");
        let values: Vec<_> = got.iter().map(|r| r.value.clone()).collect();
        let want: Vec<_> = (0..5).map(|i| Bytes::from(format!("value-{i}"))).collect();
        assert_eq!(values, want, "{}", log.partition_name());
    }
    // Closing them all, concurrently, is quick and reopening finds the data.
    let started = Instant::now();
    futures::future::join_all(logs.iter().map(|l| l.close()))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .expect("close");
    let closed_in = started.elapsed();
    assert!(
        closed_in < Duration::from_secs(30),
        "closing took {closed_in:?}"
    );
    drop(logs);
    let logs = open_many(dir.path(), N, &cfg).await;
    for log in &logs {
        assert_eq!(log.log_end_offset(), 5);
        assert_eq!(log.record_count(), 5);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_many_retention_runs_on_the_shared_maintenance_thread() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        retention: RetentionPolicy {
            max_messages: Some(2),
            ..Default::default()
        },
        cleaner_interval: Duration::from_millis(20),
        ..Default::default()
    };
    let logs = open_many(dir.path(), 20, &cfg).await;
    for log in &logs {
        log.append(1, (0..10).map(rec).collect())
            .await
            .expect("append");
    }
    // The cleaner of every log trims it to 2 records without being asked.
    let deadline = Instant::now() + Duration::from_secs(30);
    for log in &logs {
        while log.record_count() > 2 {
            assert!(
                Instant::now() < deadline,
                "retention never ran on {}",
                log.partition_name()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(log.oldest_offset(), Some(8));
    }
    // A configuration change reaches the maintenance thread too.
    for log in &logs {
        log.update_config(LogConfig {
            retention: RetentionPolicy {
                max_messages: Some(1),
                ..Default::default()
            },
            cleaner_interval: Duration::from_millis(20),
            ..Default::default()
        });
    }
    for log in &logs {
        while log.record_count() > 1 {
            assert!(Instant::now() < deadline, "new retention never applied");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
