//! Helpers for the NATS server tests: start a server on 127.0.0.1:0 and
//! speak the raw protocol over a real socket.

use std::time::Duration;

use liftbridge::config::nats::NatsOptions;
use liftbridge::nats::NatsServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Options for a test server on a free loopback port.
pub fn test_opts() -> NatsOptions {
    NatsOptions {
        host: "127.0.0.1".to_string(),
        port: 0,
        ..NatsOptions::default()
    }
}

/// Starts a server with `opts`.
pub async fn start(opts: NatsOptions) -> NatsServer {
    NatsServer::start(opts).await.expect("server starts")
}

/// `nats://` URL of a server.
pub fn url(s: &NatsServer) -> String {
    format!("nats://{}", s.client_addr())
}

/// A raw protocol connection.
pub struct Raw {
    pub stream: TcpStream,
    pub info: String,
}

impl Raw {
    /// Connects and reads the INFO line.
    pub async fn connect(s: &NatsServer) -> Raw {
        let mut stream = TcpStream::connect(s.client_addr()).await.expect("connect");
        let mut buf = Vec::new();
        let mut b = [0u8; 4096];
        while !buf.ends_with(b"\r\n") {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut b))
                .await
                .expect("INFO in time")
                .expect("read");
            assert!(n > 0, "closed before INFO");
            buf.extend_from_slice(&b[..n]);
        }
        Raw {
            stream,
            info: String::from_utf8(buf).expect("utf8 INFO"),
        }
    }

    /// Connects and sends a non-verbose CONNECT with headers.
    pub async fn connected(s: &NatsServer) -> Raw {
        let mut r = Raw::connect(s).await;
        r.send(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"no_responders\":true,\"protocol\":1}\r\n")
            .await;
        r
    }

    pub async fn send(&mut self, data: &[u8]) {
        self.stream.write_all(data).await.expect("write");
    }

    /// Reads until `wait` passes without data or the peer closes.
    /// Returns the bytes and whether the connection was closed.
    pub async fn read_for(&mut self, wait: Duration) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let mut b = [0u8; 65536];
        loop {
            match tokio::time::timeout(wait, self.stream.read(&mut b)).await {
                Err(_) => return (out, false),
                Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
                Ok(Ok(n)) => out.extend_from_slice(&b[..n]),
            }
        }
    }

    /// Reads until the buffer ends with `suffix` (or 5 s pass).
    pub async fn read_until(&mut self, suffix: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut b = [0u8; 65536];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !out.ends_with(suffix) {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut b)).await {
                Err(_) | Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => out.extend_from_slice(&b[..n]),
            }
        }
        out
    }

    /// PING and wait for PONG: everything before it is returned.
    pub async fn sync(&mut self) -> Vec<u8> {
        self.send(b"PING\r\n").await;
        let out = self.read_until(b"PONG\r\n").await;
        assert!(
            out.ends_with(b"PONG\r\n"),
            "no PONG: {:?}",
            String::from_utf8_lossy(&out)
        );
        out[..out.len() - 6].to_vec()
    }
}

pub fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Waits until the server holds at least `n` subscriptions (client
/// `flush()` only flushes the socket; it does not wait for the server).
pub async fn wait_subs(srv: &NatsServer, n: u64) {
    for _ in 0..500 {
        let v = srv.subsz_json("").expect("subsz");
        if v["num_subscriptions"].as_u64().unwrap_or(0) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("server never reached {n} subscriptions");
}
