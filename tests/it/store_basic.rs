//! Partition log behaviour on real files: append/read, time index, epochs,
//! truncation, retention, compaction, reopen, and bad disk states.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use liftbridge::store::{
    open_all, LogConfig, NewRecord, PartitionLog, RetentionPolicy, StoreError, SyncPolicy,
};

fn rec(ts: i64, key: Option<&str>, value: &str) -> NewRecord {
    NewRecord {
        timestamp_ns: ts,
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        headers: vec![("h".into(), Bytes::from_static(b"v"))],
        value: Bytes::copy_from_slice(value.as_bytes()),
        subject: "foo".into(),
        reply: Some("_INBOX.1".into()),
    }
}

async fn open(dir: &Path, name: &str, cfg: LogConfig) -> Result<PartitionLog, StoreError> {
    let dir = dir.to_owned();
    let name = name.to_owned();
    tokio::task::spawn_blocking(move || PartitionLog::open(&dir, &name, cfg))
        .await
        .expect("open task")
}

#[tokio::test]
async fn store_append_read_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), "s-0", LogConfig::default()).await.unwrap();
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.oldest_offset(), None);
    let mut end = log.subscribe_end();
    let r = log
        .append(1, vec![rec(10, Some("a"), "x"), rec(11, None, "y")])
        .await
        .unwrap();
    assert_eq!((r.first_offset, r.last_offset), (0, 1));
    assert!(end.has_changed().unwrap());
    assert_eq!(*end.borrow_and_update(), 2);
    let r = log.append(1, vec![rec(12, None, "z")]).await.unwrap();
    assert_eq!((r.first_offset, r.last_offset), (2, 2));
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(log.oldest_offset(), Some(0));
    assert_eq!(log.newest_offset(), Some(2));

    let all = log.read(0, 100, usize::MAX).await.unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].value, Bytes::from_static(b"x"));
    assert_eq!(all[0].key, Some(Bytes::from_static(b"a")));
    assert_eq!(all[0].subject, "foo");
    assert_eq!(all[0].reply.as_deref(), Some("_INBOX.1"));
    assert_eq!(all[0].leader_epoch, 1);
    assert_eq!(all[1].offset, 1);
    assert_eq!(all[2].timestamp_ns, 12);
    // Count and byte budgets; at least one record always.
    assert_eq!(log.read(1, 1, usize::MAX).await.unwrap().len(), 1);
    assert_eq!(log.read(0, 10, 1).await.unwrap().len(), 1);
    let two = all[0].encoded_len() + all[1].encoded_len();
    assert_eq!(log.read(0, 10, two).await.unwrap().len(), 2);
    assert!(log.read(3, 10, usize::MAX).await.unwrap().is_empty());

    // OCC.
    match log.append_expecting(1, 2, vec![rec(13, None, "w")]).await {
        Err(StoreError::OffsetMismatch { expected, actual }) => {
            assert_eq!((expected, actual), (2, 3))
        }
        other => panic!("expected mismatch, got {other:?}"),
    }
    log.append_expecting(1, 3, vec![rec(13, None, "w")])
        .await
        .unwrap();
    assert!(matches!(
        log.append(1, vec![]).await,
        Err(StoreError::EmptyBatch)
    ));
    log.close().await.unwrap();
    assert!(matches!(
        log.append(1, vec![rec(1, None, "a")]).await,
        Err(StoreError::Closed(_))
    ));
}

#[tokio::test]
async fn store_wait_for_new_data_without_polling() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), "w", LogConfig::default()).await.unwrap();
    let mut rx = log.subscribe_end();
    let reader = tokio::spawn(async move {
        rx.wait_for(|leo| *leo >= 5).await.unwrap();
    });
    for i in 0..5 {
        log.append(0, vec![rec(i, None, "v")]).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn store_offset_for_timestamp_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(dir.path(), "t", LogConfig::default()).await.unwrap();
        // A clock step backwards at offset 2 must not hide later records.
        for ts in [100, 200, 150, 300, 300, 400] {
            log.append(0, vec![rec(ts, None, "v")]).await.unwrap();
        }
        assert_eq!(log.offset_for_timestamp(0).await.unwrap(), Some(0));
        assert_eq!(log.offset_for_timestamp(100).await.unwrap(), Some(0));
        assert_eq!(log.offset_for_timestamp(101).await.unwrap(), Some(1));
        assert_eq!(log.offset_for_timestamp(160).await.unwrap(), Some(1));
        assert_eq!(log.offset_for_timestamp(250).await.unwrap(), Some(3));
        assert_eq!(log.offset_for_timestamp(400).await.unwrap(), Some(5));
        assert_eq!(log.offset_for_timestamp(401).await.unwrap(), None);
        log.close().await.unwrap();
    }
    let log = open(dir.path(), "t", LogConfig::default()).await.unwrap();
    assert_eq!(log.log_end_offset(), 6);
    assert_eq!(log.offset_for_timestamp(250).await.unwrap(), Some(3));
    let r = log.append(0, vec![rec(500, None, "v")]).await.unwrap();
    assert_eq!(r.first_offset, 6);
    assert_eq!(log.offset_for_timestamp(450).await.unwrap(), Some(6));
}

#[tokio::test]
async fn store_truncate_and_epoch_cache() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), "e", LogConfig::default()).await.unwrap();
    log.append(1, vec![rec(1, None, "a"), rec(2, None, "b")])
        .await
        .unwrap();
    log.append(3, vec![rec(3, None, "c"), rec(4, None, "d")])
        .await
        .unwrap();
    log.append(5, vec![rec(5, None, "e")]).await.unwrap();
    assert_eq!(log.leader_epochs(), vec![(1, 0), (3, 2), (5, 4)]);
    assert_eq!(log.epoch_start_offset(3), Some(2));
    assert_eq!(log.epoch_end_offset(1), Some(2));
    assert_eq!(log.epoch_end_offset(2), Some(2));
    assert_eq!(log.epoch_end_offset(5), Some(5));
    assert!(matches!(
        log.append(4, vec![rec(6, None, "x")]).await,
        Err(StoreError::StaleEpoch {
            epoch: 4,
            latest: 5
        })
    ));

    log.truncate(3).await.unwrap();
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(log.newest_offset(), Some(2));
    assert_eq!(log.leader_epochs(), vec![(1, 0), (3, 2)]);
    assert_eq!(log.offset_for_timestamp(4).await.unwrap(), None);
    let r = log.append(4, vec![rec(9, None, "n")]).await.unwrap();
    assert_eq!(r.first_offset, 3);
    let all = log.read(0, 10, usize::MAX).await.unwrap();
    let vals: Vec<_> = all.iter().map(|r| r.value.clone()).collect();
    assert_eq!(vals, vec!["a", "b", "c", "n"]);
    log.close().await.unwrap();
    let log = open(dir.path(), "e", LogConfig::default()).await.unwrap();
    assert_eq!(log.leader_epochs(), vec![(1, 0), (3, 2), (4, 3)]);
    assert_eq!(log.log_end_offset(), 4);

    // Replicated records keep offsets, epochs and timestamps; gaps allowed.
    let mut r1 = log.read(3, 1, usize::MAX).await.unwrap().remove(0);
    r1.offset = 6;
    r1.leader_epoch = 7;
    let res = log.append_replicated(vec![r1.clone()]).await.unwrap();
    assert_eq!((res.first_offset, res.last_offset), (6, 6));
    assert_eq!(log.log_end_offset(), 7);
    assert_eq!(log.read(4, 10, usize::MAX).await.unwrap(), vec![r1.clone()]);
    assert!(matches!(
        log.append_replicated(vec![r1]).await,
        Err(StoreError::OffsetOutOfOrder { offset: 6, next: 7 })
    ));
}

#[tokio::test]
async fn store_retention_by_messages_bytes_and_age() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), "r", LogConfig::default()).await.unwrap();
    for i in 0..100 {
        log.append(0, vec![rec(i * 1000, None, "0123456789")])
            .await
            .unwrap();
    }
    let size = log.read(0, 1, usize::MAX).await.unwrap()[0].encoded_len() as u64;
    assert_eq!(log.record_bytes(), size * 100);

    let mut cfg = LogConfig::default();
    cfg.retention.max_messages = Some(60);
    log.update_config(cfg.clone());
    let st = log.enforce_retention().await.unwrap();
    assert_eq!(st.removed_records, 40);
    assert_eq!(log.oldest_offset(), Some(40));
    assert_eq!(log.record_count(), 60);

    cfg.retention = RetentionPolicy {
        max_bytes: Some(size * 50 + 1),
        ..Default::default()
    };
    log.update_config(cfg.clone());
    log.enforce_retention().await.unwrap();
    assert_eq!(log.oldest_offset(), Some(50));

    // By age, with an injected clock: records older than 20 µs before
    // "now" = 99_000 go, i.e. timestamps < 79_000.
    cfg.retention = RetentionPolicy {
        max_age: Some(Duration::from_micros(20)),
        ..Default::default()
    };
    log.update_config(cfg.clone());
    let st = log.enforce_retention_at(99_000).await.unwrap();
    assert_eq!(st.removed_records, 29);
    assert_eq!(log.oldest_offset(), Some(79));
    assert_eq!(log.offset_for_timestamp(0).await.unwrap(), Some(79));
    assert_eq!(log.read(0, 1, usize::MAX).await.unwrap()[0].offset, 79);
    assert_eq!(log.log_end_offset(), 100);

    // Everything expired: the log is empty but keeps its end offset.
    log.enforce_retention_at(10_000_000).await.unwrap();
    assert_eq!(log.oldest_offset(), None);
    assert_eq!(log.newest_offset(), None);
    assert_eq!(log.log_end_offset(), 100);
    log.close().await.unwrap();
    let log = open(dir.path(), "r", LogConfig::default()).await.unwrap();
    assert_eq!(log.log_end_offset(), 100);
    assert_eq!(log.record_count(), 0);
    assert_eq!(
        log.append(0, vec![rec(1, None, "x")])
            .await
            .unwrap()
            .first_offset,
        100
    );
}

#[tokio::test]
async fn store_background_cleaner_applies_retention() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        retention: RetentionPolicy {
            max_messages: Some(10),
            ..Default::default()
        },
        cleaner_interval: Duration::from_millis(20),
        ..Default::default()
    };
    let log = open(dir.path(), "c", cfg).await.unwrap();
    let batch: Vec<_> = (0..50).map(|i| rec(i, None, "v")).collect();
    log.append(0, batch).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while log.record_count() > 10 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "cleaner did not run"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(log.oldest_offset(), Some(40));
}

#[tokio::test]
async fn store_compaction_keeps_newest_per_key_below_limit() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), "k", LogConfig::default()).await.unwrap();
    let keys = [
        Some("a"),
        Some("b"),
        None,
        Some("a"),
        Some("b"),
        None,
        Some("a"),
        Some("c"),
        Some("a"),
    ];
    for (i, k) in keys.iter().enumerate() {
        log.append(0, vec![rec(i as i64, *k, &i.to_string())])
            .await
            .unwrap();
    }
    // Replicas may still need offsets >= 7: the `a` at 8 does not count.
    log.set_compaction_limit(7);
    let st = log.compact().await.unwrap();
    assert_eq!(st.removed_records, 3);
    let offs: Vec<u64> = log
        .read(0, 100, usize::MAX)
        .await
        .unwrap()
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(offs, vec![2, 4, 5, 6, 7, 8]);
    log.set_compaction_limit(u64::MAX);
    log.compact().await.unwrap();
    let offs: Vec<u64> = log
        .read(0, 100, usize::MAX)
        .await
        .unwrap()
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(offs, vec![2, 4, 5, 7, 8]);
    assert_eq!(log.log_end_offset(), 9);
    assert_eq!(log.oldest_offset(), Some(2));
    // Reads from a compacted-away offset skip to the next record.
    assert_eq!(log.read(0, 1, usize::MAX).await.unwrap()[0].offset, 2);
    assert_eq!(log.offset_for_timestamp(6).await.unwrap(), Some(7));
}

#[tokio::test]
async fn store_interval_sync_is_visible_and_durable_on_close() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        sync: SyncPolicy::Interval(Duration::from_millis(50)),
        ..Default::default()
    };
    let log = open(dir.path(), "i", cfg.clone()).await.unwrap();
    for i in 0..20 {
        log.append(0, vec![rec(i, None, "v")]).await.unwrap();
    }
    assert_eq!(log.read(0, 100, usize::MAX).await.unwrap().len(), 20);
    log.close().await.unwrap();
    let log = open(dir.path(), "i", cfg).await.unwrap();
    assert_eq!(log.log_end_offset(), 20);
}

/// Appends about 25 MB/s (batches of 128 records of 1 KB every 5 ms) to
/// `log` from offset `next` for `time`; returns the offset after the last.
async fn stream_into(log: &PartitionLog, mut next: i64, time: Duration) -> i64 {
    let payload = "x".repeat(1000);
    let started = std::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    while started.elapsed() < time {
        tick.tick().await;
        let batch = (0..128).map(|i| rec(next + i, None, &payload)).collect();
        log.append(0, batch).await.unwrap();
        next += 128;
    }
    next
}

/// Streams into a new log `name` under an `interval` sync for `time` (see
/// [`stream_into`]); requires the second journal file to exist afterwards
/// (its checkpoints ran in the background, appends going to that file
/// meanwhile) and every record to be there after a reopen. Returns the
/// durable commits made while streaming.
async fn stream_with_background_checkpoints(
    dir: &Path,
    name: &str,
    interval: Duration,
    time: Duration,
) -> u64 {
    let cfg = LogConfig {
        sync: SyncPolicy::Interval(interval),
        ..Default::default()
    };
    let log = open(dir, name, cfg.clone()).await.unwrap();
    let before = log.commit_stats().durable_commits;
    let next = stream_into(&log, 0, time).await as u64;
    let checkpoints = log.commit_stats().durable_commits - before;
    let spare = liftbridge::store::journal::spare_path(dir, name);
    assert!(
        spare.exists(),
        "no second journal after {checkpoints} checkpoints: they stopped the appends"
    );
    log.close().await.unwrap();
    let log = open(dir, name, cfg).await.unwrap();
    assert_eq!(log.log_end_offset(), next);
    assert_eq!(log.record_count(), next);
    log.close().await.unwrap();
    checkpoints
}

/// With an interval far longer than the 2 s checkpoint bound (JetStream's
/// default is two minutes), a busy partition's 2 s (or 32 MiB) checkpoints
/// also run in the background.
#[tokio::test]
async fn store_long_interval_checkpoints_run_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let time = Duration::from_millis(2600);
    let checkpoints =
        stream_with_background_checkpoints(dir.path(), "long", Duration::from_secs(120), time)
            .await;
    assert!(checkpoints >= 1, "no checkpoint in 2.6 s of appends");
}

/// Under `interval`, a partition written faster than a megabyte per interval
/// still gets its interval's checkpoint while appends keep coming: the
/// checkpoint may wait for background applies, but only for a bounded
/// time, so a steady stream of appends cannot put it off until the
/// journal fills. About 25 MB/s for 1.2 s with a 100 ms interval makes
/// roughly a dozen checkpoints; without them the journal would pass its
/// 32 MiB checkpoint only once, near the end. They run in the background.
#[tokio::test]
async fn store_interval_checkpoints_keep_coming_under_a_steady_stream() {
    let dir = tempfile::tempdir().unwrap();
    let (interval, time) = (Duration::from_millis(100), Duration::from_millis(1200));
    let checkpoints =
        stream_with_background_checkpoints(dir.path(), "steady", interval, time).await;
    assert!(
        checkpoints >= 3,
        "{checkpoints} durable commits while records streamed in for 1.2 s"
    );
    // Deleting the log removes both journals.
    PartitionLog::delete_files(dir.path(), "steady").unwrap();
    assert!(!liftbridge::store::journal::spare_path(dir.path(), "steady").exists());
    assert!(!liftbridge::store::journal::path(dir.path(), "steady").exists());
}

/// Under `interval`, light traffic gets the interval's journal fsync and no
/// durable redb commit before the 2 s checkpoint; when a megabyte or more
/// was journaled since the last sync, the sync is a checkpoint instead (the
/// records reach the disk once, in redb), long before those 2 s. Both logs
/// keep every record across a reopen.
#[tokio::test]
async fn store_interval_sync_of_a_busy_journal_is_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        sync: SyncPolicy::Interval(Duration::from_millis(50)),
        ..Default::default()
    };
    let light = open(dir.path(), "light", cfg.clone()).await.unwrap();
    let before = light.commit_stats().durable_commits;
    for i in 0..5 {
        light.append(0, vec![rec(i, None, "v")]).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        light.commit_stats().durable_commits,
        before,
        "a few records: the interval syncs the journal, no checkpoint yet"
    );

    let busy = open(dir.path(), "busy", cfg.clone()).await.unwrap();
    let opened = std::time::Instant::now();
    let before = busy.commit_stats().durable_commits;
    let payload = "x".repeat(1000);
    for b in 0..8 {
        let batch = (0..500).map(|i| rec(b * 500 + i, None, &payload)).collect();
        busy.append(0, batch).await.unwrap();
    }
    while busy.commit_stats().durable_commits == before {
        assert!(
            opened.elapsed() < Duration::from_millis(1500),
            "4 MB journaled: the interval's sync should have been a checkpoint"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    light.close().await.unwrap();
    busy.close().await.unwrap();
    let light = open(dir.path(), "light", cfg.clone()).await.unwrap();
    let busy = open(dir.path(), "busy", cfg).await.unwrap();
    assert_eq!(light.log_end_offset(), 5);
    assert_eq!(busy.log_end_offset(), 4000);
    let last = busy.read(3999, 1, usize::MAX).await.unwrap();
    assert_eq!(last[0].value.as_ref(), payload.as_bytes());
}

#[tokio::test]
async fn store_delete_files_and_space_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), "d", LogConfig::default()).await.unwrap();
    let payload = "x".repeat(1000);
    let batch = |n: usize| (0..n).map(|i| rec(i as i64, None, &payload)).collect();
    for _ in 0..4 {
        log.append(0, batch(500)).await.unwrap();
    }
    // Measured with everything in the database (not still in the journal).
    log.sync().await.unwrap();
    let size_full = log.disk_size();
    log.update_config(LogConfig {
        retention: RetentionPolicy {
            max_messages: Some(0),
            ..Default::default()
        },
        ..Default::default()
    });
    log.enforce_retention().await.unwrap();
    // Durable commits release the freed pages (a sync with nothing new to
    // commit is none): two small ones, then refill as much again.
    for _ in 0..2 {
        log.append(0, batch(1)).await.unwrap();
        log.sync().await.unwrap();
    }
    for _ in 0..4 {
        log.append(0, batch(500)).await.unwrap();
    }
    log.sync().await.unwrap();
    let size_again = log.disk_size();
    assert!(
        size_again < size_full * 3 / 2,
        "space not reused: {size_full} then {size_again}"
    );
    let path = log.path().to_owned();
    log.close().await.unwrap();
    assert!(path.exists());
    PartitionLog::delete_files(dir.path(), "d").unwrap();
    assert!(!path.exists());
    PartitionLog::delete_files(dir.path(), "d").unwrap();
}

#[tokio::test]
async fn store_bad_disk_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = PartitionLog::open_existing(dir.path(), "gone", LogConfig::default()).unwrap_err();
    assert!(matches!(e, StoreError::NotFound { .. }));
    let msg = e.to_string();
    assert!(msg.contains("gone") && msg.contains("gone.redb"), "{msg}");
    assert!(matches!(
        PartitionLog::open(dir.path(), "../x", LogConfig::default()),
        Err(StoreError::InvalidName(_))
    ));
}

#[tokio::test]
async fn store_bad_disk_unreadable_file() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file should be cannot be read as a database.
    std::fs::create_dir(dir.path().join("u.redb")).unwrap();
    let e = PartitionLog::open_existing(dir.path(), "u", LogConfig::default()).unwrap_err();
    assert!(matches!(e, StoreError::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("u.redb"), "{e}");
    // A data directory that is a file.
    let file = dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let e = PartitionLog::open(&file, "p", LogConfig::default()).unwrap_err();
    assert!(matches!(e, StoreError::Io { .. }), "{e:?}");
}

#[tokio::test]
async fn store_bad_disk_locked_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), "l", LogConfig::default()).await.unwrap();
    let e = PartitionLog::open(dir.path(), "l", LogConfig::default()).unwrap_err();
    assert!(matches!(e, StoreError::Locked { .. }), "{e:?}");
    assert!(e.to_string().contains("l.redb"));
    log.close().await.unwrap();
    // Released on close.
    let again = open(dir.path(), "l", LogConfig::default()).await.unwrap();
    again.close().await.unwrap();
}

#[tokio::test]
async fn store_bad_disk_corrupt_file_and_others_still_open() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["good-a", "good-b", "bad"] {
        let log = open(dir.path(), name, LogConfig::default()).await.unwrap();
        log.append(0, vec![rec(1, None, name)]).await.unwrap();
        log.close().await.unwrap();
    }
    // Garbage over the whole file.
    let bad = dir.path().join("bad.redb");
    let len = std::fs::metadata(&bad).unwrap().len() as usize;
    std::fs::write(&bad, vec![0xA5; len]).unwrap();
    // A second corrupt file: truncated to a few bytes.
    std::fs::write(dir.path().join("short.redb"), b"redb").unwrap();

    let e = PartitionLog::open_existing(dir.path(), "bad", LogConfig::default()).unwrap_err();
    assert!(
        matches!(e, StoreError::Corrupt { .. } | StoreError::Io { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("bad.redb"), "{e}");

    let d = dir.path().to_owned();
    let all = tokio::task::spawn_blocking(move || open_all(&d, &LogConfig::default()))
        .await
        .unwrap()
        .unwrap();
    let names: Vec<_> = all.iter().map(|(n, r)| (n.as_str(), r.is_ok())).collect();
    assert_eq!(
        names,
        vec![
            ("bad", false),
            ("good-a", true),
            ("good-b", true),
            ("short", false)
        ]
    );
    for (name, r) in all {
        if let Ok(log) = r {
            let recs = log.read(0, 10, usize::MAX).await.unwrap();
            assert_eq!(recs[0].value, Bytes::from(name));
        }
    }
}

#[tokio::test]
async fn store_lost_or_truncated_file_is_refused_not_recreated() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.redb");
    let write_three = || async {
        let log = open(dir.path(), "p", LogConfig::default()).await.unwrap();
        let next = log.log_end_offset();
        log.append(0, (0..3).map(|i| rec(i, None, "v")).collect())
            .await
            .unwrap();
        log.close().await.unwrap();
        next
    };
    assert_eq!(write_three().await, 0);

    // Deleted: the journal proves the log existed, so no empty log is made.
    std::fs::remove_file(&db).unwrap();
    let e = open(dir.path(), "p", LogConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Lost { .. }), "{e:?}");
    assert!(
        e.to_string().contains("p.redb") && e.to_string().contains("missing"),
        "{e}"
    );
    assert!(!db.exists(), "the refused open must not create the file");

    // Emptied: the same.
    std::fs::write(&db, b"").unwrap();
    let e = open(dir.path(), "p", LogConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Lost { .. }), "{e:?}");
    assert!(e.to_string().contains("empty"), "{e}");
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0, "left as found");

    // A brand-new partition (no journal yet) is still created.
    let fresh = open(dir.path(), "q", LogConfig::default()).await.unwrap();
    assert_eq!(fresh.log_end_offset(), 0);
    fresh.close().await.unwrap();

    // Truncated to half: a typed error or the records intact, never an
    // empty log that reuses offset 0.
    std::fs::remove_file(&db).unwrap();
    std::fs::remove_file(dir.path().join("p.journal")).unwrap();
    assert_eq!(write_three().await, 0);
    let len = std::fs::metadata(&db).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    match open(dir.path(), "p", LogConfig::default()).await {
        Err(e) => assert!(
            matches!(e, StoreError::Corrupt { .. } | StoreError::Io { .. }),
            "{e:?}"
        ),
        Ok(log) => {
            assert_eq!(log.log_end_offset(), 3, "a truncated log reopened short");
            log.close().await.unwrap();
        }
    }
}
