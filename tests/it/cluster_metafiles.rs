//! A missing, empty, truncated or overwritten `raft.redb` never silently
//! loses streams: the built binary refuses to start with an error naming the
//! file (and, when the file is gone, the stream data it would drop), exits
//! non-zero and does not panic. Restoring the file brings the streams back.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use liftbridge::api::proto;

use crate::api_common::{client, config, create, start};

/// Starts an in-process node on `dir`, creates stream `s` (so the data
/// directory holds partition files), stops it and returns the path of its
/// `raft.redb`.
async fn dir_with_stream(dir: &Path) -> PathBuf {
    let node = start(config(dir)).await;
    let mut c = client(&node).await;
    create(&mut c, "s", "s.subj", 1).await;
    drop(c);
    node.shutdown().await;
    let db = dir.join("raft").join("raft.redb");
    assert!(db.is_file(), "{} exists after a start", db.display());
    assert!(
        dir.join("streams").join("s").join("0").exists(),
        "the partition has files on disk"
    );
    db
}

/// Runs the binary on `dir`; it must exit on its own (within a deadline
/// generous for a loaded machine) with a failure. Returns its stderr.
async fn run_expect_refusal(dir: &Path) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args(["-d", dir.to_str().unwrap()])
        .args(["-p", "0", "--nats-port", "0", "--http-port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn liftbridge");
    let end = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        if tokio::time::Instant::now() >= end {
            let _ = child.kill();
            let out = child.wait_with_output().expect("reap");
            panic!(
                "liftbridge kept running over a bad raft.redb; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let out = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "must fail; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "no panic; stderr:\n{stderr}");
    stderr
}

/// The streams the node sees after a normal start on `dir`.
async fn streams_after_restart(dir: &Path) -> Vec<String> {
    let node = start(config(dir)).await;
    let mut c = client(&node).await;
    let md = c
        .fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .expect("fetch metadata")
        .into_inner();
    drop(c);
    node.shutdown().await;
    md.stream_metadata.into_iter().map(|s| s.name).collect()
}

#[tokio::test]
async fn cluster_metafiles_missing_or_empty_db_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir_with_stream(dir.path()).await;
    let saved = std::fs::read(&db).unwrap();
    let streams = dir.path().join("streams");

    std::fs::remove_file(&db).unwrap();
    let err = run_expect_refusal(dir.path()).await;
    assert!(
        err.contains(&db.display().to_string()),
        "names the db: {err}"
    );
    assert!(
        err.contains(&streams.display().to_string()),
        "names the stream data: {err}"
    );
    assert!(err.contains("missing or empty"), "{err}");
    assert!(err.contains("restore"), "says how to proceed: {err}");
    assert!(!db.exists(), "a refused start creates no empty metadata");

    std::fs::File::create(&db).unwrap().set_len(0).unwrap();
    let err = run_expect_refusal(dir.path()).await;
    assert!(
        err.contains(&db.display().to_string()),
        "names the db: {err}"
    );
    assert!(err.contains("missing or empty"), "{err}");
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0, "file untouched");

    // Nothing was lost: with the file back, the stream is there.
    std::fs::write(&db, &saved).unwrap();
    let names = streams_after_restart(dir.path()).await;
    assert!(names.iter().any(|n| n == "s"), "stream back: {names:?}");
}

#[tokio::test]
async fn cluster_metafiles_damaged_db_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir_with_stream(dir.path()).await;
    let saved = std::fs::read(&db).unwrap();
    assert!(saved.len() > 1024, "a real database: {} bytes", saved.len());

    // Truncated to half.
    std::fs::write(&db, &saved[..saved.len() / 2]).unwrap();
    let err = run_expect_refusal(dir.path()).await;
    assert!(
        err.contains(&db.display().to_string()),
        "names the db: {err}"
    );
    assert!(err.contains("damaged"), "{err}");

    // Overwritten with random bytes of the same size.
    let noise: Vec<u8> = (0..saved.len()).map(|_| rand::random::<u8>()).collect();
    std::fs::write(&db, &noise).unwrap();
    let err = run_expect_refusal(dir.path()).await;
    assert!(
        err.contains(&db.display().to_string()),
        "names the db: {err}"
    );
    assert!(err.contains("damaged"), "{err}");
    assert_eq!(std::fs::read(&db).unwrap(), noise, "file left as found");

    std::fs::write(&db, &saved).unwrap();
    let names = streams_after_restart(dir.path()).await;
    assert!(names.iter().any(|n| n == "s"), "stream back: {names:?}");
}
