//! systemd integration: every sd_notify call of the server lives here.
//!
//! Outside systemd (no `NOTIFY_SOCKET`) every call is a no-op, so the server
//! can call these unconditionally. Errors talking to the notify socket are
//! logged and otherwise ignored: they must never stop the server.

use std::time::Duration;

use sd_notify::NotifyState;

fn send(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!(error = %e, "systemd notification failed");
    }
}

/// Tells systemd that start-up is finished (`READY=1`) with a status line.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Tells systemd that a graceful stop has begun (`STOPPING=1`).
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// Tells systemd that a configuration reload has begun (`RELOADING=1`).
pub fn reloading() {
    send(&[NotifyState::Reloading]);
}

/// Tells systemd that a reload is finished (`READY=1` again).
pub fn reloaded() {
    send(&[NotifyState::Ready]);
}

/// The watchdog interval systemd asked for (`WatchdogSec=`), if any.
pub fn watchdog_interval() -> Option<Duration> {
    let mut usec = 0u64;
    if sd_notify::watchdog_enabled(false, &mut usec) && usec > 0 {
        Some(Duration::from_micros(usec))
    } else {
        None
    }
}

/// Spawns a task that pings the watchdog at half the requested interval
/// while `healthy()` holds. Returns `None` when no watchdog is configured.
pub fn spawn_watchdog<F>(healthy: F) -> Option<tokio::task::JoinHandle<()>>
where
    F: Fn() -> bool + Send + 'static,
{
    let every = watchdog_interval()? / 2;
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            if healthy() {
                send(&[NotifyState::Watchdog]);
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    /// With NOTIFY_SOCKET pointing at a datagram socket, `ready` sends
    /// `READY=1` and the status line, as systemd expects.
    #[test]
    fn ready_reaches_the_notify_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        std::env::set_var("NOTIFY_SOCKET", &path);
        ready("serving");
        stopping();
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 256];
        let n = sock.recv(&mut buf).unwrap();
        let msg = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(msg.contains("READY=1"), "{msg}");
        assert!(msg.contains("STATUS=serving"), "{msg}");
        let n = sock.recv(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
    }
}
