//! A TCP proxy for network faults: forwards 127.0.0.1:`port` to an
//! upstream address until told to cut every connection (both sides see a
//! close), to freeze (connections stay open, bytes stop flowing: a
//! partition that only timeouts can detect), or to delay the bytes of one
//! direction (a slow link: every chunk is held for the delay before it is
//! forwarded, in order). It counts the bytes it forwards each way.
//!
//! Bounds: each direction of a connection holds at most [`MAX_IN_FLIGHT`]
//! chunks of up to 64 KiB while they wait out a delay; when that is full
//! the proxy stops reading from the sender (TCP back-pressure), it never
//! drops bytes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Chunks one direction of one connection holds while they are delayed.
pub const MAX_IN_FLIGHT: usize = 256;

/// One direction of the proxied connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From the connecting side to the upstream.
    ToUpstream,
    /// From the upstream back to the connecting side.
    ToClient,
}

/// Shared switches of one proxy.
#[derive(Default)]
struct Knobs {
    frozen: AtomicBool,
    /// Delay in µs of [`Dir::ToUpstream`] and [`Dir::ToClient`].
    delay_us: [AtomicU64; 2],
    /// Bytes forwarded in each direction.
    bytes: [AtomicU64; 2],
}

impl Knobs {
    fn delay(&self, d: Dir) -> Duration {
        Duration::from_micros(self.delay_us[d as usize].load(Ordering::SeqCst))
    }
}

/// A running proxy; stops (closing everything) on drop.
pub struct Proxy {
    /// The port clients connect to.
    pub port: u16,
    knobs: Arc<Knobs>,
    cut: Arc<parking_lot::Mutex<CancellationToken>>,
    stop: CancellationToken,
}

impl Proxy {
    /// Starts forwarding a free loopback port to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy addr").port();
        let knobs = Arc::new(Knobs::default());
        let cut = Arc::new(parking_lot::Mutex::new(CancellationToken::new()));
        let stop = CancellationToken::new();
        let (k, c, s) = (knobs.clone(), cut.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = s.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((down, _)) = accepted else { continue };
                let Ok(up) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let token = c.lock().child_token();
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                spawn_direction(dr, uw, k.clone(), Dir::ToUpstream, token.clone());
                spawn_direction(ur, dw, k.clone(), Dir::ToClient, token);
            }
        });
        Proxy {
            port,
            knobs,
            cut,
            stop,
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Closes every current connection (new ones are still accepted).
    pub fn cut(&self) {
        let mut t = self.cut.lock();
        t.cancel();
        *t = CancellationToken::new();
    }

    /// Stops forwarding bytes, keeping connections open.
    pub fn freeze(&self) {
        self.knobs.frozen.store(true, Ordering::SeqCst);
    }

    /// Forwards again (connections that survived the freeze resume).
    pub fn thaw(&self) {
        self.knobs.frozen.store(false, Ordering::SeqCst);
    }

    /// Bytes forwarded so far in direction `dir` (all connections).
    pub fn bytes(&self, dir: Dir) -> u64 {
        self.knobs.bytes[dir as usize].load(Ordering::SeqCst)
    }

    /// Holds every chunk going in direction `dir` for `delay` before it is
    /// forwarded (zero: no delay). Applies to chunks read from now on.
    pub fn set_delay(&self, dir: Dir, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.knobs.delay_us[dir as usize].store(us, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
        self.cut();
    }
}

/// Waits while the proxy is frozen; false when the connection was cut.
async fn wait_thawed(knobs: &Knobs, cut: &CancellationToken) -> bool {
    while knobs.frozen.load(Ordering::SeqCst) {
        tokio::select! {
            _ = cut.cancelled() => return false,
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
    !cut.is_cancelled()
}

/// One direction: a reader that stamps each chunk with the time it may
/// leave, and a writer that forwards chunks in order once due.
fn spawn_direction(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    knobs: Arc<Knobs>,
    dir: Dir,
    cut: CancellationToken,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(MAX_IN_FLIGHT);
    let (k, c) = (knobs.clone(), cut.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // While frozen, read nothing.
            if !wait_thawed(&k, &c).await {
                return;
            }
            let n = tokio::select! {
                _ = c.cancelled() => return,
                r = r.read(&mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                },
            };
            let due = Instant::now() + k.delay(dir);
            // A full queue makes the reader wait (back-pressure).
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                return;
            }
        }
        // Dropping `tx` ends the writer once it has forwarded the rest.
    });
    tokio::spawn(async move {
        while let Some((due, chunk)) = tokio::select! {
            _ = cut.cancelled() => None,
            c = rx.recv() => c,
        } {
            tokio::select! {
                _ = cut.cancelled() => return,
                _ = tokio::time::sleep_until(due) => {}
            }
            // While frozen, write nothing.
            if !wait_thawed(&knobs, &cut).await {
                return;
            }
            if w.write_all(&chunk).await.is_err() {
                return;
            }
            knobs.bytes[dir as usize].fetch_add(chunk.len() as u64, Ordering::SeqCst);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn rtt(s: &mut TcpStream, msg: &[u8]) -> Duration {
        let t = Instant::now();
        s.write_all(msg).await.unwrap();
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(got, msg);
        t.elapsed()
    }

    /// An echo server behind the proxy: a delay in one direction shows in
    /// the round trip, in order, and is lifted again.
    #[tokio::test]
    async fn proxy_delays_one_direction() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.into_split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let p = Proxy::start(upstream).await;
        let mut s = TcpStream::connect(("127.0.0.1", p.port)).await.unwrap();
        assert!(rtt(&mut s, b"fast").await < Duration::from_millis(300));
        p.set_delay(Dir::ToClient, Duration::from_millis(400));
        let d = rtt(&mut s, b"slow-back").await;
        assert!(d >= Duration::from_millis(400), "{d:?}");
        p.set_delay(Dir::ToClient, Duration::ZERO);
        p.set_delay(Dir::ToUpstream, Duration::from_millis(300));
        let d = rtt(&mut s, b"slow-there").await;
        assert!(d >= Duration::from_millis(300), "{d:?}");
        p.set_delay(Dir::ToUpstream, Duration::ZERO);
        assert!(rtt(&mut s, b"fast-again").await < Duration::from_millis(300));
    }
}
