//! The `stream`, `pub`, `sub` and `status` subcommands of the real binary
//! against an in-process node; and `liftbridge` serving with gufo's flags.

use std::process::Command;
use std::time::Duration;

use crate::api_common::*;

async fn run(args: Vec<String>) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_liftbridge"))
            .args(&args)
            .output()
            .expect("run liftbridge");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_cli_stream_pub_sub_status() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let addr = node.grpc_addr().to_string();

    let (ok, out, err) = run(args(&[
        "stream",
        "--addr",
        &addr,
        "create",
        "cli",
        "--subject",
        "cli.in",
        "--partitions",
        "2",
    ]))
    .await;
    assert!(ok, "{err}");
    assert!(out.contains("created stream cli"));
    let (ok, _, err) = run(args(&["stream", "--addr", &addr, "create", "cli"])).await;
    assert!(!ok && err.contains("AlreadyExists"), "{err}");

    let (ok, out, err) = run(args(&[
        "pub", "--addr", &addr, "cli", "-k", "key", "-H", "h=1", "one", "two",
    ]))
    .await;
    assert!(ok, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec!["offset 0", "offset 1"]
    );

    let (ok, out, err) = run(args(&[
        "sub",
        "--addr",
        &addr,
        "cli",
        "--earliest",
        "--stop-latest",
    ]))
    .await;
    assert!(ok, "{err}");
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!((lines[0][0], lines[0][2], lines[0][3]), ("0", "key", "one"));
    assert_eq!((lines[1][0], lines[1][3]), ("1", "two"));
    let (ok, out, _) = run(args(&[
        "sub", "--addr", &addr, "cli", "--offset", "1", "-n", "1",
    ]))
    .await;
    assert!(ok);
    assert!(out.starts_with("1\t"));

    let (ok, out, _) = run(args(&["stream", "--addr", &addr, "list"])).await;
    assert!(ok && out.contains("cli.in"));
    let (ok, out, _) = run(args(&["stream", "--addr", &addr, "describe", "cli"])).await;
    assert!(ok && out.contains(&node.server_id()));
    let (ok, _, _) = run(args(&[
        "stream",
        "--addr",
        &addr,
        "readonly",
        "cli",
        "--partition",
        "1",
    ]))
    .await;
    assert!(ok);
    let (ok, _, _) = run(args(&[
        "stream",
        "--addr",
        &addr,
        "pause",
        "cli",
        "--partition",
        "0",
    ]))
    .await;
    assert!(ok);
    let (ok, out, _) = run(args(&["status", "--addr", &addr])).await;
    assert!(ok && out.contains("paused 1"), "{out}");
    let (ok, _, _) = run(args(&["stream", "--addr", &addr, "delete", "cli"])).await;
    assert!(ok);
    let (ok, _, err) = run(args(&["stream", "--addr", &addr, "describe", "cli"])).await;
    assert!(!ok && err.contains("unknown stream"));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_serve_with_liftbridge_flags_and_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let grpc = crate::support::free_port();
    let nats = crate::support::free_port();
    let cfg = dir.path().join(".liftbridge.yml");
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:{grpc}\nnats.listen: 127.0.0.1:{nats}\nhttp.listen: 127.0.0.1:0\ncursors:\n    stream.auto.pause.time: 0\n    stream.partitions: 1\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "-d",
            dir.path().join("data").to_str().unwrap(),
        ])
        .args(["--embedded-nats", "--raft-bootstrap-seed"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{grpc}");
    let mut c = None;
    for _ in 0..200 {
        if let Ok(ch) = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
        {
            c = Some(liftbridge::api::proto::api_client::ApiClient::new(ch));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut c = c.expect("server up");
    create(&mut c, "x", "x", 1).await;
    let nc = async_nats::connect(format!("127.0.0.1:{nats}"))
        .await
        .unwrap();
    nc.publish("x", "via-nats".into()).await.unwrap();
    nc.flush().await.unwrap();
    let mut s = subscribe(&mut c, from_earliest("x", 0)).await;
    assert_eq!(take(&mut s, 1).await[0].value, &b"via-nats"[..]);
    let md = c
        .fetch_metadata(liftbridge::api::proto::FetchMetadataRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(md.stream_metadata.iter().any(|s| s.name == "__cursors"));
    // SIGTERM: graceful exit with status 0.
    // SAFETY: kill(2) on our own child's pid has no memory-safety effects.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "exit status {status:?}");
}
