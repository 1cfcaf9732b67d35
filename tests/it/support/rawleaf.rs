//! A raw leaf-node connection for protocol-level checks of a hub (ours or
//! Go's): CONNECT as a user, then read lines, errors and the close.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::procs::ConfNode;

const WAIT: Duration = Duration::from_secs(20);

/// A raw leaf connection to `hub` as `user`: reads INFO, sends CONNECT,
/// returns the INFO that answers it (parsed), the reader and the writer.
pub async fn raw_leaf(
    hub: &ConfNode,
    user: &str,
    pass: &str,
) -> (
    serde_json::Value,
    BufReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
) {
    let port = hub.leaf_port.expect("hub leaf port");
    let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the leaf port");
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    let first = read_line(&mut r).await;
    assert!(first.starts_with("INFO "), "{first}");
    let connect = serde_json::json!({
        "user": user, "pass": pass, "name": "raw", "server_id": "NRAWLEAF", "headers": true,
    });
    w.write_all(format!("CONNECT {connect}\r\n").as_bytes())
        .await
        .unwrap();
    loop {
        let line = read_line(&mut r).await;
        if let Some(json) = line.strip_prefix("INFO ") {
            let v: serde_json::Value = serde_json::from_str(json.trim()).expect("INFO json");
            if v["connect_info"] == serde_json::json!(true) {
                return (v, r, w);
            }
        }
        assert!(!line.starts_with("-ERR"), "refused: {line}");
    }
}

/// The next line (panics when the connection ends or nothing comes).
pub async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> String {
    let mut line = String::new();
    let n = tokio::time::timeout(WAIT, r.read_line(&mut line))
        .await
        .expect("a line in time")
        .expect("read");
    assert!(n > 0, "connection closed");
    line
}

/// Reads until `-ERR` (returned) or the end of the connection (`None`).
pub async fn read_until_err<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Option<String> {
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(WAIT, r.read_line(&mut line))
            .await
            .expect("an answer in time")
            .ok()?;
        if n == 0 {
            return None;
        }
        if line.starts_with("-ERR") {
            return Some(line.trim_end().to_string());
        }
    }
}

/// After the `-ERR`, the hub closes the connection.
pub async fn closed_after<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut line = String::new();
        match tokio::time::timeout_at(deadline, r.read_line(&mut line)).await {
            Err(_) => panic!("the hub did not close the connection"),
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => {}
        }
    }
}
