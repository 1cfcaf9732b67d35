//! Test support shared by the cluster tests: real processes on free
//! loopback ports, each in its own temp dir, cleaned up on drop.
//!
//! - [`cluster`]: a cluster of full liftbridge nodes (yaml per node,
//!   optional proxies on every route, kill/stop/restart, metadata helpers);
//! - [`history`]: concurrent publishers recording every attempt, and the
//!   checker of replicated logs against that history;
//! - [`jwt`]: operator, account and user JWTs and creds files;
//! - [`procs`]: spawn the built `liftbridge` binary (NATS-server mode or a
//!   full node from a liftbridge.yaml) or a Go `nats-server`, wait until it
//!   listens, `kill -9` it and restart it on the same ports;
//! - [`proxy`]: a TCP proxy that cuts or freezes connections (network
//!   faults without mocks);
//! - [`rawleaf`]: a leaf-node connection spoken by hand, for a hub's
//!   protocol-level answers;
//! - [`free_port`], [`http_json`], [`wait_until`], [`until_flowing`],
//!   [`drain`]: the small helpers those tests need.

pub mod cluster;
pub mod history;
pub mod jwt;
pub mod procs;
pub mod proxy;
pub mod rawleaf;
pub mod rawroute;

use std::time::Duration;

/// A free TCP port on 127.0.0.1 (checked by binding it, then released).
/// Ports come from below the kernel's ephemeral range (32768–60999 by
/// default), so no outgoing connection can take one as its source port
/// between the pick and the server's bind; a process-wide counter (from a
/// per-process offset) never hands out the same port twice in a run.
pub fn free_port() -> u16 {
    liftbridge::bench::free_port().expect("a free loopback port")
}

/// GET `path` from `127.0.0.1:port` over HTTP/1.0 (no chunking) and parse
/// the body as JSON; `None` when the server does not answer (yet).
pub async fn http_json(port: u16, path: &str) -> Option<serde_json::Value> {
    http_json_at("127.0.0.1", port, path).await
}

/// [`http_json`] against `ip:port` (nodes in network namespaces have other
/// addresses than loopback).
pub async fn http_json_at(ip: &str, port: u16, path: &str) -> Option<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (_, body) = text.split_once("\r\n\r\n")?;
        serde_json::from_str(body).ok()
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .ok()
        .flatten()
}

/// Polls `check` every 50 ms until it returns true or `within` passes;
/// panics with `what` on timeout (robust on a loaded machine: no fixed
/// sleeps, only deadlines).
pub async fn wait_until<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A round trip on `c`'s connection (a message to a fresh inbox it
/// subscribed to): everything it sent before — SUBs included — has been
/// processed by its server. A flush only writes the client's buffer out.
pub async fn sync(c: &async_nats::Client) {
    use futures::StreamExt;
    let inbox = c.new_inbox();
    let mut s = c.subscribe(inbox.clone()).await.unwrap();
    c.publish(inbox, bytes::Bytes::new()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), s.next())
        .await
        .expect("round trip within 20 s")
        .expect("round-trip subscription open");
}

/// Publishes `probe` on `subject` from `c` every 100 ms until `sub`
/// receives one (interest has reached the publisher's server, across
/// every hop), within 20 s; `what` names the flow in the failure.
pub async fn until_flowing(
    c: &async_nats::Client,
    sub: &mut async_nats::Subscriber,
    subject: &str,
    what: &str,
) {
    use futures::StreamExt;
    let end = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            tokio::time::Instant::now() < end,
            "{what}: no message on {subject} reached its subscriber"
        );
        c.publish(subject.to_string(), bytes::Bytes::from_static(b"probe"))
            .await
            .unwrap();
        c.flush().await.unwrap();
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(100), sub.next()).await {
            return;
        }
    }
}

/// Takes what `sub` still receives until it has been quiet for 200 ms
/// (the probes [`until_flowing`] sent before the first arrived).
pub async fn drain(sub: &mut async_nats::Subscriber) {
    use futures::StreamExt;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(200), sub.next()).await {}
}

/// Runs `liftbridge nats-server -c` on a file holding `text`, which must
/// be refused at start-up; returns its output (stderr, then stdout).
pub fn nats_config_refused(text: &str) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("refused.conf");
    std::fs::write(&path, text).expect("write config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args(["nats-server", "-c"])
        .arg(&path)
        .output()
        .expect("run liftbridge");
    assert!(!out.status.success(), "{text}: started");
    String::from_utf8_lossy(&out.stderr).into_owned() + &*String::from_utf8_lossy(&out.stdout)
}
