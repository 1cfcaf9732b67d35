//! A tiny HTTP/1.1 client for the admin API tests: one request per
//! connection (`Connection: close`) over any byte stream, so the same code
//! talks plain TCP and TLS.

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    /// The body as JSON (panics with the body text if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {} body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The first header of this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The `error` message of an error body.
    pub fn error(&self) -> String {
        let v = self.json();
        assert_eq!(v["code"], self.status, "error body carries the status");
        v["error"].as_str().unwrap_or_default().to_string()
    }
}

/// Sends one request over `s` and reads the whole response.
pub async fn request_on<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Resp {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    s.write_all(&bytes).await.expect("send request");
    s.flush().await.expect("flush request");
    let mut buf = Vec::new();
    // The server may close while a large body is still unread (413): keep
    // what arrived.
    let _ = s.read_to_end(&mut buf).await;
    parse(&buf)
}

/// Parses a complete HTTP/1.1 response with a Content-Length body.
pub fn parse(buf: &[u8]) -> Resp {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Resp {
        status,
        headers,
        body: buf[split + 4..].to_vec(),
    }
}

/// One request over a new TCP connection.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Resp {
    let s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    request_on(s, method, path, headers, body).await
}

/// GET `path`.
pub async fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, &[], None).await
}

/// `method` `path` with a JSON body.
pub async fn send_json(addr: SocketAddr, method: &str, path: &str, body: &Value) -> Resp {
    let b = serde_json::to_vec(body).unwrap();
    request(
        addr,
        method,
        path,
        &[("Content-Type", "application/json")],
        Some(&b),
    )
    .await
}

/// POST `path` with a JSON body.
pub async fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    send_json(addr, "POST", path, body).await
}
