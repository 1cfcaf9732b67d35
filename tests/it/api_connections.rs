//! The gRPC port under clients that misbehave: a peer speaking garbage, one
//! that opens a TLS connection and never completes the handshake, and one
//! that says nothing. None of them keeps others from being served, and
//! shutdown is not held up by them. And a client may open as many streams
//! over one connection as it likes.

use std::time::Duration;

use liftbridge::api::proto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::api_common::*;

/// Reads until the server closes the connection (EOF or reset); false if
/// it is still open after `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_speaking_garbage_is_closed_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let addr = node.grpc_addr();

    // Not the HTTP/2 preface: the connection is closed.
    let mut garbage = TcpStream::connect(addr).await.unwrap();
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\x01\x02garbage")
        .await
        .unwrap();
    assert!(closed_within(&mut garbage, Duration::from_secs(5)).await);

    // A valid preface followed by a frame of nonsense: closed too.
    let mut bad_frames = TcpStream::connect(addr).await.unwrap();
    bad_frames
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    bad_frames
        .write_all(&[
            0xff, 0xff, 0xff, 0x77, 0x00, 0x00, 0x00, 0x00, 0x01, 1, 2, 3,
        ])
        .await
        .unwrap();
    assert!(closed_within(&mut bad_frames, Duration::from_secs(5)).await);

    // A peer that connects and says nothing holds nothing up.
    let _silent = TcpStream::connect(addr).await.unwrap();
    let mut c = client(&node).await;
    create(&mut c, "conn", "conn", 1).await;
    assert_eq!(publish_acked(&mut c, "conn", 0, b"", b"v").await.offset, 0);
    tokio::time::timeout(Duration::from_secs(10), node.shutdown())
        .await
        .expect("shutdown is not held up by a silent peer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_tls_handshake_holds_nothing_up() {
    let dir = tempfile::tempdir().unwrap();
    let (node, certs) = start_mtls(dir.path()).await;
    let addr = node.grpc_addr();

    // Opens TCP and never sends a ClientHello.
    let _stalled = TcpStream::connect(addr).await.unwrap();
    // Plain HTTP/2 on the TLS port: refused.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    assert!(closed_within(&mut plain, Duration::from_secs(5)).await);

    let mut c = mtls_client(&node, &certs).await;
    let md = c
        .fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(md.brokers.len(), 1);
    tokio::time::timeout(Duration::from_secs(10), node.shutdown())
        .await
        .expect("shutdown is not held up by a stalled handshake");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_subscriptions_share_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "many", "many", 1).await;
    // Every subscription is established (its handshake arrives) while all
    // the earlier ones stay open, on the one connection of `c`.
    let mut subs = Vec::new();
    for _ in 0..300 {
        let s = tokio::time::timeout(
            Duration::from_secs(10),
            subscribe(&mut c, from_earliest("many", 0)),
        )
        .await
        .unwrap_or_else(|_| panic!("subscription {} held back", subs.len() + 1));
        subs.push(s);
    }
    publish_acked(&mut c, "many", 0, b"", b"to all").await;
    for i in [0, subs.len() - 1] {
        let m = take(&mut subs[i], 1).await;
        assert_eq!(m[0].value, &b"to all"[..]);
    }
    drop(subs);
    node.shutdown().await;
}
