//! The HTTP port's limits against slow or silent clients: a connection that
//! sends no request, or only part of its headers, is closed after the
//! header-read timeout, and other clients are served meanwhile.

use std::time::{Duration, Instant};

use liftbridge::http::HEADER_READ_TIMEOUT;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::api_common::{config, http_get, start};

/// Waits until the server closes `s` (EOF or reset); returns how long it took.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> Duration {
    let t0 = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(limit, s.read(&mut buf)).await {
            Err(_) => panic!("connection still open after {limit:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return t0.elapsed(),
            // A 408 response before the close is fine.
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_closes_silent_and_slow_clients() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let addr = node.http_addr().expect("http enabled");

    // 50 connections that never send a byte, and 50 that send half a request.
    let mut silent = Vec::new();
    let mut partial = Vec::new();
    for _ in 0..50 {
        silent.push(TcpStream::connect(addr).await.unwrap());
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        partial.push(s);
    }
    // Others are served while they hang.
    let ok = http_get(addr, "/healthz").await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");

    let limit = HEADER_READ_TIMEOUT + Duration::from_secs(10);
    for s in silent.iter_mut().chain(partial.iter_mut()) {
        let took = closed_within(s, limit).await;
        assert!(took <= limit, "closed after {took:?}");
    }
    // And the server still answers.
    let ok = http_get(addr, "/healthz").await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
}
