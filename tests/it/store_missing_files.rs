//! A partition whose log file was deleted, emptied, truncated or overwritten
//! (or whose whole directory was deleted) while the node was stopped: after
//! a restart it is reported failed (gRPC, admin API, metrics) and refused,
//! never recreated empty to hand out offset 0 again; the other streams keep
//! working.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;

use liftbridge::api::proto;

use crate::api_common::{
    client, config, create, from_earliest, http_get, partition_metadata, publish_acked, start,
    subscribe, take, Client,
};

/// How the partition's database file is damaged while the node is down.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Delete,
    Empty,
    Truncate,
    Overwrite,
    /// The partition's whole directory (database file and journal).
    DeleteDir,
}

fn damage(file: &Path, how: Damage) {
    let len = std::fs::metadata(file).expect("log file exists").len();
    match how {
        Damage::Delete => std::fs::remove_file(file).unwrap(),
        Damage::Empty => std::fs::write(file, b"").unwrap(),
        Damage::Truncate => {
            let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
            // Past the header, into the pages.
            f.set_len(len / 3).unwrap();
        }
        Damage::Overwrite => std::fs::write(file, vec![0xA5; len as usize]).unwrap(),
        Damage::DeleteDir => std::fs::remove_dir_all(file.parent().unwrap()).unwrap(),
    }
}

async fn publish_with_deadline(
    c: &mut Client,
    stream: &str,
    value: &[u8],
) -> Result<proto::PublishResponse, tonic::Status> {
    let mut req = tonic::Request::new(proto::PublishRequest {
        value: value.to_vec().into(),
        stream: stream.into(),
        partition: 0,
        ack_policy: proto::AckPolicy::All as i32,
        expected_offset: -1,
        ..Default::default()
    });
    req.set_timeout(Duration::from_secs(3));
    c.publish(req).await.map(|r| r.into_inner())
}

async fn damaged_partition_is_refused(how: Damage) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let node = start(cfg.clone()).await;
    let mut c = client(&node).await;
    create(&mut c, "hurt", "hurt", 1).await;
    create(&mut c, "fine", "fine", 1).await;
    for i in 0..3u8 {
        let ack = publish_acked(&mut c, "hurt", 0, b"", &[i]).await;
        assert_eq!(ack.offset, i as i64);
        publish_acked(&mut c, "fine", 0, b"", &[i]).await;
    }
    node.shutdown().await;

    let file = dir.path().join("streams/hurt/0/log.redb");
    damage(&file, how);
    // What the failure names: the file, or the missing directory.
    let named = match how {
        Damage::DeleteDir => "streams/hurt/0",
        _ => "log.redb",
    };

    let node = start(cfg).await;
    let mut c = client(&node).await;

    // gRPC: the partition's metadata names the failure.
    let err = c
        .fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
            stream: "hurt".into(),
            partition: 0,
        })
        .await
        .expect_err("a failed partition has no healthy metadata");
    assert_eq!(
        err.code(),
        tonic::Code::FailedPrecondition,
        "{how:?}: {err:?}"
    );
    assert!(
        err.message().contains("failed") && err.message().contains(named),
        "{how:?}: {}",
        err.message()
    );

    // A publish is refused at once with the reason; never acked at offset 0.
    let err = publish_with_deadline(&mut c, "hurt", b"after")
        .await
        .expect_err("a publish to a failed partition is refused");
    assert_eq!(
        err.code(),
        tonic::Code::FailedPrecondition,
        "{how:?}: {err:?}"
    );
    assert!(err.message().contains(named), "{}", err.message());

    // A subscribe is refused the same way.
    let err = c
        .subscribe(from_earliest("hurt", 0))
        .await
        .expect_err("a subscribe to a failed partition is refused");
    assert_eq!(
        err.code(),
        tonic::Code::FailedPrecondition,
        "{how:?}: {err:?}"
    );

    // No empty log was put in place of a missing or empty file.
    match how {
        Damage::Delete => assert!(!file.exists(), "{how:?}: file recreated"),
        Damage::DeleteDir => assert!(!file.exists(), "{how:?}: file recreated"),
        Damage::Empty => assert_eq!(std::fs::metadata(&file).unwrap().len(), 0),
        Damage::Truncate | Damage::Overwrite => {}
    }

    // Admin API and metrics show the failure.
    let http = node.http_addr().expect("http enabled");
    let body = http_get(http, "/api/v1/streams/hurt/partitions/0").await;
    let json = body.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: serde_json::Value = serde_json::from_str(json).expect("admin JSON");
    let failed = v["failed"].as_str().unwrap_or_default();
    assert!(failed.contains(named), "{how:?}: {body}");
    let cause = match how {
        Damage::Delete | Damage::DeleteDir => "missing",
        Damage::Empty => "empty",
        Damage::Truncate | Damage::Overwrite => "corrupt",
    };
    assert!(failed.contains(cause), "{how:?}: {failed}");
    let metrics = http_get(http, "/metrics").await;
    assert!(
        metrics.contains("liftbridge_partition_failed{stream=\"hurt\",partition=\"0\"} 1"),
        "{how:?}: {metrics}"
    );
    assert!(
        metrics.contains("liftbridge_partition_failed{stream=\"fine\",partition=\"0\"} 0"),
        "{how:?}: {metrics}"
    );
    // Health checks name it: /api/v1/health and nats-style /healthz say 503.
    for path in ["/api/v1/health", "/healthz"] {
        let health = http_get(http, path).await;
        assert!(
            health.starts_with("HTTP/1.1 503"),
            "{how:?} {path}: {health}"
        );
        assert!(health.contains("hurt"), "{how:?} {path}: {health}");
    }

    // The other stream keeps its messages and its offsets.
    let ack = publish_acked(&mut c, "fine", 0, b"", b"more").await;
    assert_eq!(ack.offset, 3);
    assert_eq!(partition_metadata(&mut c, "fine", 0).await.newest_offset, 3);
    let mut sub = subscribe(&mut c, from_earliest("fine", 0)).await;
    let got = take(&mut sub, 4).await;
    assert_eq!(got[0].value, vec![0u8]);
    assert_eq!(got[3].value, b"more".to_vec());
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_missing_files_deleted_log_is_refused() {
    damaged_partition_is_refused(Damage::Delete).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_missing_files_emptied_log_is_refused() {
    damaged_partition_is_refused(Damage::Empty).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_missing_files_truncated_log_is_refused() {
    damaged_partition_is_refused(Damage::Truncate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_missing_files_overwritten_log_is_refused() {
    damaged_partition_is_refused(Damage::Overwrite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_missing_files_deleted_partition_directory_is_refused() {
    damaged_partition_is_refused(Damage::DeleteDir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_missing_files_flipped_bytes_fail_the_partition_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let node = start(cfg.clone()).await;
    let mut c = client(&node).await;
    create(&mut c, "hurt", "hurt", 1).await;
    create(&mut c, "fine", "fine", 1).await;
    const MARK: &[u8] = b"record-value-that-will-be-damaged";
    for i in 0..3 {
        let ack = publish_acked(&mut c, "hurt", 0, b"", MARK).await;
        assert_eq!(ack.offset, i);
        publish_acked(&mut c, "fine", 0, b"", b"ok").await;
    }
    node.shutdown().await;

    // Flip a byte inside every stored copy of the value: the file still
    // opens, but the records fail their checksum when read.
    let file = dir.path().join("streams/hurt/0/log.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    let mut flipped = 0;
    let mut i = 0;
    while i + MARK.len() <= bytes.len() {
        if &bytes[i..i + MARK.len()] == MARK {
            bytes[i + 3] ^= 0xFF;
            flipped += 1;
            i += MARK.len();
        } else {
            i += 1;
        }
    }
    assert!(flipped >= 1, "the value is stored in the database file");
    std::fs::write(&file, &bytes).unwrap();

    let node = start(cfg).await;
    let mut c = client(&node).await;
    // The reader that meets the damage ends with an error, never with the
    // damaged bytes.
    let res = c.subscribe(from_earliest("hurt", 0)).await;
    if let Ok(resp) = res {
        let mut s = resp.into_inner();
        let mut delivered = 0;
        let end = loop {
            match tokio::time::timeout(Duration::from_secs(5), s.next())
                .await
                .expect("the subscription ends in time")
            {
                Some(Ok(m)) => {
                    assert_ne!(m.value, {
                        let mut v = MARK.to_vec();
                        v[3] ^= 0xFF;
                        v
                    });
                    delivered += 1;
                }
                Some(Err(st)) => break st,
                None => panic!("stream ended without a status"),
            }
        };
        assert!(delivered <= 1, "only the handshake before the damage");
        assert!(end.message().contains("corrupt"), "{end:?}");
    }

    // The partition is then marked failed: publishes are refused (never
    // acked on a log that cannot be read), metadata and metrics say why.
    let http = node.http_addr().expect("http enabled");
    crate::api_common::eventually("the partition is reported failed", || async {
        http_get(http, "/metrics")
            .await
            .contains("liftbridge_partition_failed{stream=\"hurt\",partition=\"0\"} 1")
    })
    .await;
    let err = publish_with_deadline(&mut c, "hurt", b"after")
        .await
        .expect_err("a publish to a failed partition is refused");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("corrupt"), "{}", err.message());
    let err = c
        .fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
            stream: "hurt".into(),
            partition: 0,
        })
        .await
        .expect_err("a failed partition has no healthy metadata");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");

    // The other stream is untouched.
    let ack = publish_acked(&mut c, "fine", 0, b"", b"more").await;
    assert_eq!(ack.offset, 3);
    node.shutdown().await;
}
