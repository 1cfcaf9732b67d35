//! Subscribers that never read cost the node a bounded buffer each, do not
//! slow a normal reader, and give their memory back when they go.
//!
//! A real node process holds a ~20 MB stream; the node's RSS is read from
//! /proc/<pid>/status. The bound comes from the per-subscriber budget
//! ([`SUBSCRIBER_BUFFER`]) plus a fixed allowance per subscriber for its
//! HTTP/2 stream and tonic's encoding buffer.

use std::time::{Duration, Instant};

use futures::StreamExt;
use liftbridge::api::proto::{self, api_client::ApiClient};
use liftbridge::partition::reader::SUBSCRIBER_BUFFER;
use tonic::transport::Channel;

use crate::api_common::from_earliest;
use crate::support::procs::LiftbridgeNode;
use crate::support::wait_until;

/// Messages in the stream (with the first, acked one: 20,001).
const MESSAGES: usize = 20_000;
/// Value size: MESSAGES × VALUE ≈ 20 MB.
const VALUE: usize = 1000;
/// Idle subscribers opened at once.
const IDLE: usize = 200;
/// Idle subscribers per gRPC connection.
const PER_CONNECTION: usize = 10;
/// Memory allowed per idle subscriber besides its budget: its HTTP/2
/// stream, tonic's encoding buffer (32 KiB) and one frame in flight.
const PER_SUBSCRIBER_EXTRA: usize = 128 << 10;
/// Slack for everything else (allocator rounding, the normal reader).
const SLACK: usize = 48 << 20;

fn rss_bytes(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kib * 1024
}

/// A gRPC connection. Its receive windows are the client's choice: what
/// the node sends to a stream that is not read stays in the client up to
/// the stream window, and all such streams share the connection window,
/// so it is sized for PER_CONNECTION full streams plus room for the next
/// handshake (else later subscriptions on it could not even start).
async fn channel(port: u16) -> Channel {
    Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("uri")
        .initial_stream_window_size(Some(1 << 20))
        .initial_connection_window_size(Some(((PER_CONNECTION as u32) + 4) << 20))
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect gRPC")
}

/// Subscribes from the earliest offset and waits for the handshake.
async fn open(c: &mut ApiClient<Channel>, stream: &str) -> tonic::Streaming<proto::Message> {
    let mut s = c
        .subscribe(from_earliest(stream, 0))
        .await
        .expect("subscribe")
        .into_inner();
    let hs = tokio::time::timeout(Duration::from_secs(30), s.next())
        .await
        .expect("handshake in time")
        .expect("handshake present")
        .expect("handshake ok");
    assert_eq!(hs, proto::Message::default());
    s
}

/// Reads the whole stream on a connection of its own; returns how long it
/// took. Every offset must arrive, in order, before `deadline`.
async fn read_all(port: u16, stream: &str, deadline: Duration) -> Duration {
    let t0 = Instant::now();
    let mut c = ApiClient::new(channel(port).await).max_decoding_message_size(16 << 20);
    let mut s = open(&mut c, stream).await;
    let mut next = 0i64;
    let total = MESSAGES as i64 + 1;
    while next < total {
        let left = deadline.saturating_sub(t0.elapsed());
        let m = match tokio::time::timeout(left, s.next()).await {
            Ok(Some(Ok(m))) => m,
            Ok(other) => panic!("stream ended at offset {next}: {other:?}"),
            Err(_) => panic!("normal reader got {next} of {total} messages in {deadline:?}"),
        };
        assert_eq!(m.offset, next, "messages in order, none missing");
        next += 1;
    }
    t0.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_subscribers_cost_a_bounded_buffer_and_give_it_back() {
    let node = LiftbridgeNode::start("idlesubs", &[], "").await;
    let pid = node.proc.pid().expect("node running");
    let mut c = ApiClient::new(channel(node.grpc_port).await);
    c.create_stream(proto::CreateStreamRequest {
        subject: "big".into(),
        name: "big".into(),
        partitions: 1,
        ..Default::default()
    })
    .await
    .expect("create stream");
    // One acked publish proves the partition records; the rest go in as
    // plain NATS publishes, which the node records on the stream.
    let mut first = tonic::Request::new(proto::PublishRequest {
        value: vec![b'x'; VALUE].into(),
        stream: "big".into(),
        ack_policy: proto::AckPolicy::Leader as i32,
        expected_offset: -1,
        ..Default::default()
    });
    first.set_timeout(Duration::from_secs(30));
    c.publish(first).await.expect("acked publish");
    let nc = async_nats::connect(node.url()).await.expect("NATS connect");
    let value = bytes::Bytes::from(vec![b'y'; VALUE]);
    for i in 0..MESSAGES {
        nc.publish("big", value.clone())
            .await
            .expect("NATS publish");
        if i % 1000 == 999 {
            nc.flush().await.expect("flush");
        }
    }
    nc.flush().await.expect("flush");
    let newest = MESSAGES as i64;
    wait_until(Duration::from_secs(120), "all messages stored", || {
        let mut c = c.clone();
        async move {
            c.fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
                stream: "big".into(),
                partition: 0,
            })
            .await
            .ok()
            .and_then(|r| r.into_inner().metadata)
            .is_some_and(|m| m.high_watermark == newest)
        }
    })
    .await;

    // A first full read warms the node's read path (store caches, buffers):
    // the baseline is the node as a reader leaves it.
    let alone = read_all(node.grpc_port, "big", Duration::from_secs(180)).await;
    let baseline = rss_bytes(pid);

    let mut idle = Vec::with_capacity(IDLE);
    let mut channels = Vec::new();
    for _ in 0..IDLE / PER_CONNECTION {
        let ch = channel(node.grpc_port).await;
        for _ in 0..PER_CONNECTION {
            let mut c = ApiClient::new(ch.clone()).max_decoding_message_size(16 << 20);
            idle.push(open(&mut c, "big").await);
        }
        channels.push(ch);
    }
    // The idle readers fill their budgets; a normal reader still gets every
    // message.
    let with_idle = read_all(node.grpc_port, "big", Duration::from_secs(180)).await;
    let bound = baseline + IDLE * (SUBSCRIBER_BUFFER + PER_SUBSCRIBER_EXTRA) + SLACK;
    // The highest of a few samples: idle readers may still be filling
    // their budgets.
    let mut peak = 0;
    for _ in 0..10 {
        peak = peak.max(rss_bytes(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "normal reader: {alone:?} alone, {with_idle:?} with {IDLE} idle subscribers; \
         RSS baseline {} MiB, with idle subscribers {} MiB (bound {} MiB)",
        baseline >> 20,
        peak >> 20,
        bound >> 20
    );
    assert!(
        peak <= bound,
        "RSS {} MiB with {IDLE} idle subscribers exceeds {} MiB (baseline {} MiB)",
        peak >> 20,
        bound >> 20,
        baseline >> 20
    );

    // Cancelled, the idle subscribers' memory goes back to the system.
    drop(idle);
    drop(channels);
    let back = baseline + (16 << 20);
    wait_until(
        Duration::from_secs(60),
        &format!("RSS back under {} MiB", back >> 20),
        || async { rss_bytes(pid) <= back },
    )
    .await;
    eprintln!("RSS after cancel: {} MiB", rss_bytes(pid) >> 20);
}
