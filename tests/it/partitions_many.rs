//! A thousand partitions on one real node process: a bounded number of
//! threads, every partition takes a publish and gives it back, a graceful
//! stop (SIGTERM) in bounded time, and a restart that opens them all with
//! their data. (Scaled down from the 10,000 of `scripts/load-partitions.sh`
//! for a debug build.)

use std::time::{Duration, Instant};

use futures::StreamExt;
use liftbridge::api::proto;

use crate::api_common::{publish_acked, Client};
use crate::support::cluster::{Node, NodeYaml, Spec};

const STREAMS: usize = 4;
const PER_STREAM: i32 = 250;
/// Bound on the node's threads (the target is 64 for 10,000 partitions).
const MAX_THREADS: usize = 64;

fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("Threads line")
}

/// Every (stream, partition) of the test.
fn all() -> Vec<(String, i32)> {
    (0..STREAMS)
        .flat_map(|s| (0..PER_STREAM).map(move |p| (format!("many{s}"), p)))
        .collect()
}

/// The first record of a partition, if it can be read now.
async fn first_value(c: &mut Client, stream: &str, partition: i32) -> Option<Vec<u8>> {
    let req = proto::SubscribeRequest {
        stream: stream.into(),
        partition,
        start_position: proto::StartPosition::Earliest as i32,
        ..Default::default()
    };
    let mut s = c.subscribe(req).await.ok()?.into_inner();
    // The handshake (an empty message), then the record.
    for _ in 0..2 {
        let m = tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .ok()??
            .ok()?;
        if m != proto::Message::default() {
            return Some(m.value.to_vec());
        }
    }
    None
}

/// Reads back every partition's record (retrying while partitions start).
async fn check_all(node: &Node, deadline: Instant) {
    let missing = futures::stream::iter(all())
        .map(|(stream, p)| async move {
            let mut c = node.client().await;
            let want = format!("{stream}/{p}").into_bytes();
            loop {
                if first_value(&mut c, &stream, p).await.as_deref() == Some(&want[..]) {
                    return None;
                }
                if Instant::now() > deadline {
                    return Some((stream, p));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .buffer_unordered(32)
        .filter_map(|m| async move { m })
        .collect::<Vec<_>>()
        .await;
    assert!(missing.is_empty(), "not read back: {missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_many_on_one_node_bounded_threads_fast_stop_and_restart() {
    let spec = Spec::new("solo", "127.0.0.1");
    let y = NodeYaml::direct(&spec, std::slice::from_ref(&spec), "many");
    let mut node = Node::start(&spec, &y, None);
    node.wait_ready().await;
    let pid = node.proc.pid().expect("pid");
    let mut c = node.client().await;
    for s in 0..STREAMS {
        let name = format!("many{s}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = c
                .create_stream(proto::CreateStreamRequest {
                    subject: name.clone(),
                    name: name.clone(),
                    replication_factor: 1,
                    partitions: PER_STREAM,
                    ..Default::default()
                })
                .await;
            match r {
                Ok(_) => break,
                Err(e) if e.code() == tonic::Code::AlreadyExists => break,
                // The metadata leader may not be elected yet.
                Err(e) => {
                    assert!(Instant::now() < deadline, "create stream {name}: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
    // Every partition takes a publish (acked once stored).
    let deadline = Instant::now() + Duration::from_secs(120);
    let node_ref = &node;
    futures::stream::iter(all())
        .for_each_concurrent(32, |(stream, p)| async move {
            let mut c = node_ref.client().await;
            loop {
                let mut req = tonic::Request::new(proto::PublishRequest {
                    value: format!("{stream}/{p}").into_bytes().into(),
                    stream: stream.clone(),
                    partition: p,
                    ack_policy: proto::AckPolicy::Leader as i32,
                    // Offset 0 expected: a retry after an attempt that
                    // timed out but was stored is refused instead of
                    // stored twice (check_all reads offset 0 back).
                    expected_offset: 0,
                    ..Default::default()
                });
                req.set_timeout(Duration::from_secs(10));
                match c.publish(req).await {
                    Ok(r) => {
                        let ack = r.into_inner().ack.expect("ack");
                        assert_eq!(ack.offset, 0, "{stream}/{p}");
                        return;
                    }
                    // An earlier attempt timed out here but was stored.
                    Err(e) if e.message().contains("incorrect expected offset") => return,
                    // Partitions start while the publishes begin.
                    Err(e) => {
                        assert!(Instant::now() < deadline, "publish {stream}/{p}: {e}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        })
        .await;
    let running = threads(pid);
    assert!(
        running <= MAX_THREADS,
        "{} partitions, {running} threads",
        all().len()
    );
    check_all(&node, Instant::now() + Duration::from_secs(120)).await;
    // A second publish to one partition still works after the read-back.
    let ack = publish_acked(&mut c, "many0", 7, b"", b"again").await;
    assert_eq!(ack.offset, 1);
    drop(c);

    // Graceful stop: SIGTERM, the process exits by itself in bounded time.
    let stopping = Instant::now();
    // SAFETY: kill(2) on our own, unreaped child.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    while node.proc.is_running() {
        assert!(
            stopping.elapsed() < Duration::from_secs(30),
            "graceful stop of {} partitions took over 30 s",
            all().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stopped_in = stopping.elapsed();
    eprintln!("graceful stop took {stopped_in:?}");

    // Restart: every partition opens again with its record.
    node.restart().await;
    let pid = node.proc.pid().expect("pid");
    check_all(&node, Instant::now() + Duration::from_secs(120)).await;
    let running = threads(pid);
    assert!(running <= MAX_THREADS, "after restart: {running} threads");
    let mut c = node.client().await;
    let ack = publish_acked(&mut c, "many0", 7, b"", b"after restart").await;
    assert_eq!(ack.offset, 2, "offsets continue after the restart");
    node.stop().await;
}
