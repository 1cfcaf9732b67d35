//! A TCP proxy for network faults: forwards 127.0.0.1:`port` to an
//! upstream address until told to cut every connection (both sides see a
//! close) or to freeze (connections stay open, bytes stop flowing: a
//! partition that only timeouts can detect).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A running proxy; stops (closing everything) on drop.
pub struct Proxy {
    /// The port clients connect to.
    pub port: u16,
    frozen: Arc<AtomicBool>,
    cut: Arc<parking_lot::Mutex<CancellationToken>>,
    stop: CancellationToken,
}

impl Proxy {
    /// Starts forwarding a free loopback port to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy addr").port();
        let frozen = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(parking_lot::Mutex::new(CancellationToken::new()));
        let stop = CancellationToken::new();
        let (f, c, s) = (frozen.clone(), cut.clone(), stop.clone());
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
                tokio::spawn(pump(dr, uw, f.clone(), token.clone()));
                tokio::spawn(pump(ur, dw, f.clone(), token));
            }
        });
        Proxy {
            port,
            frozen,
            cut,
            stop,
        }
    }

    /// Closes every current connection (new ones are still accepted).
    pub fn cut(&self) {
        let mut t = self.cut.lock();
        t.cancel();
        *t = CancellationToken::new();
    }

    /// Stops forwarding bytes, keeping connections open.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Forwards again (connections that survived the freeze resume).
    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
        self.cut();
    }
}

async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
    cut: CancellationToken,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // While frozen, read nothing and write nothing.
        while frozen.load(Ordering::SeqCst) {
            tokio::select! {
                _ = cut.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        let n = tokio::select! {
            _ = cut.cancelled() => return,
            r = r.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::select! {
                _ = cut.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
