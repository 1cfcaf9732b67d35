//! A raw route peer on a server's cluster port, for protocol-level checks:
//! the handshake lines, sending anything, reading until the close, and
//! reading the messages the server routes to it (answering its PINGs).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(20);

/// A raw TCP peer on a cluster port.
pub struct RawPeer {
    s: TcpStream,
    /// Read and not yet parsed.
    buf: Vec<u8>,
    /// The `RS+` lines read so far.
    pub interest: Vec<String>,
}

/// A message the server routed to the peer (`RMSG`).
#[derive(Debug, Clone)]
pub struct Routed {
    pub account: String,
    pub subject: String,
    pub reply: Option<String>,
    pub payload: Vec<u8>,
}

impl RawPeer {
    /// Connects and reads the server's INFO line.
    pub async fn connect(port: u16) -> (RawPeer, String) {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut buf = Vec::new();
        let mut b = [0u8; 4096];
        while !buf.windows(2).any(|w| w == b"\r\n") {
            let n = tokio::time::timeout(WAIT, s.read(&mut b))
                .await
                .expect("INFO in time")
                .unwrap();
            assert!(n > 0, "closed before INFO");
            buf.extend_from_slice(&b[..n]);
        }
        let end = buf.windows(2).position(|w| w == b"\r\n").unwrap() + 2;
        let info = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        (
            RawPeer {
                s,
                buf,
                interest: Vec::new(),
            },
            info,
        )
    }

    pub async fn send(&mut self, data: &str) {
        self.s.write_all(data.as_bytes()).await.unwrap();
    }

    /// Sends `RMSG <account> <subject> [reply] <size>` and the payload.
    pub async fn send_rmsg(
        &mut self,
        account: &str,
        subject: &str,
        reply: Option<&str>,
        payload: &[u8],
    ) {
        let reply = reply.map(|r| format!(" {r}")).unwrap_or_default();
        let mut frame =
            format!("RMSG {account} {subject}{reply} {}\r\n", payload.len()).into_bytes();
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n");
        self.s.write_all(&frame).await.unwrap();
    }

    /// Everything until the server closes the connection (fails if it
    /// stays open for `WAIT`).
    pub async fn read_to_close(&mut self) -> String {
        let mut out = std::mem::take(&mut self.buf);
        let mut b = [0u8; 65536];
        loop {
            match tokio::time::timeout(WAIT, self.s.read(&mut b)).await {
                Err(_) => panic!(
                    "connection still open; got {:?}",
                    String::from_utf8_lossy(&out)
                ),
                Ok(Ok(0)) | Ok(Err(_)) => return String::from_utf8_lossy(&out).into_owned(),
                Ok(Ok(n)) => out.extend_from_slice(&b[..n]),
            }
        }
    }

    /// The next `RMSG` the server sends within `within`; other lines
    /// (INFO, PONG) are skipped, `RS+` lines kept in `interest` and PINGs
    /// answered. `None` when
    /// nothing came in time.
    pub async fn next_rmsg(&mut self, within: Duration) -> Option<Routed> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            while let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                let mut words = line.split_whitespace();
                match words.next() {
                    Some("PING") => {
                        self.buf.drain(..end + 2);
                        self.send("PONG\r\n").await;
                    }
                    Some("RMSG") => {
                        let args: Vec<&str> = words.collect();
                        assert!(args.len() >= 3, "RMSG line {line:?}");
                        let size: usize = args.last().unwrap().parse().expect("RMSG size");
                        if self.buf.len() < end + 2 + size + 2 {
                            break;
                        }
                        let payload = self.buf[end + 2..end + 2 + size].to_vec();
                        self.buf.drain(..end + 2 + size + 2);
                        // `RMSG acc subject [reply | + reply queues… | | queues…] size`.
                        let reply = match args.len() {
                            4 if args[2] != "|" && args[2] != "+" => Some(args[2].to_string()),
                            n if n > 4 && args[2] == "+" => Some(args[3].to_string()),
                            _ => None,
                        };
                        return Some(Routed {
                            account: args[0].to_string(),
                            subject: args[1].to_string(),
                            reply,
                            payload,
                        });
                    }
                    Some("RS+") => {
                        self.interest.push(line);
                        self.buf.drain(..end + 2);
                    }
                    _ => {
                        self.buf.drain(..end + 2);
                    }
                }
            }
            let mut b = [0u8; 65536];
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return None;
            }
            match tokio::time::timeout(deadline - now, self.s.read(&mut b)).await {
                Err(_) => return None,
                Ok(Ok(0)) | Ok(Err(_)) => panic!("route closed by the server"),
                Ok(Ok(n)) => self.buf.extend_from_slice(&b[..n]),
            }
        }
    }
}

/// A route's CONNECT line.
pub fn route_connect(name: &str, cluster: &str) -> String {
    format!(
        "CONNECT {{\"echo\":true,\"verbose\":false,\"pedantic\":false,\"tls_required\":false,\"headers\":true,\"name\":\"{name}\",\"cluster\":\"{cluster}\"}}\r\n"
    )
}

/// A route's INFO line.
pub fn route_info(id: &str, cluster: &str) -> String {
    format!(
        "INFO {{\"server_id\":\"{id}\",\"server_name\":\"{id}\",\"host\":\"127.0.0.1\",\"port\":1,\"cluster\":\"{cluster}\",\"headers\":true}}\r\n"
    )
}
