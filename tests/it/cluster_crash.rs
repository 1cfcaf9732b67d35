//! The metadata survives a SIGKILL: every command acknowledged by `propose`
//! before the kill is in the state after a restart.
//!
//! The parent test re-runs this test binary as a child that runs the ignored
//! `cluster_crash_child` test, which writes as fast as it can and prints one
//! line per acknowledged command; the parent kills it mid-stream.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use liftbridge::cluster::{MetaCommand, Metadata, NodeInfo, StreamConfig};

const DIR_VAR: &str = "LIFTBRIDGE_TEST_CRASH_DIR";

fn create(name: String) -> MetaCommand {
    MetaCommand::CreateStream {
        subject: name.clone(),
        name,
        group: String::new(),
        replication_factor: 1,
        partitions: 1,
        config: StreamConfig::default(),
        creation_timestamp_ns: 1,
    }
}

/// Child side: only meaningful when started by `cluster_crash_keeps_acked_commands`.
#[tokio::test]
#[ignore = "started as a child process by cluster_crash_keeps_acked_commands"]
async fn cluster_crash_child() {
    let dir = std::env::var(DIR_VAR).expect("run by the parent test");
    let node = NodeInfo {
        id: "crash".into(),
        ..Default::default()
    };
    let md = Metadata::open(std::path::Path::new(&dir), node, true)
        .await
        .unwrap();
    for i in 0.. {
        md.propose_ok(create(format!("s{i}"))).await.unwrap();
        println!("ACK s{i}");
    }
}

#[tokio::test]
async fn cluster_crash_keeps_acked_commands() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "cluster_crash::cluster_crash_child",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(DIR_VAR, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Read acks on a blocking thread; kill after 50 of them.
    let acked = tokio::task::spawn_blocking(move || {
        let mut acked = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(name) = line.strip_prefix("ACK ") {
                acked.push(name.to_string());
                if acked.len() == 50 {
                    break;
                }
            }
        }
        acked
    })
    .await
    .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        acked.len(),
        50,
        "the child acknowledged commands before the kill"
    );

    let md = Metadata::open(
        dir.path(),
        NodeInfo {
            id: "crash".into(),
            ..Default::default()
        },
        true,
    )
    .await
    .unwrap();
    let st = md.state();
    for name in &acked {
        assert!(st.stream(name).is_some(), "acknowledged {name} lost");
    }
    // The group is writable after the crash.
    md.propose_ok(create("after".into())).await.unwrap();
    md.shutdown().await.unwrap();
}
