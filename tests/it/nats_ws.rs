//! NATS over WebSocket: the upgrade (statuses, origin policy), framing
//! (masking, fragmentation, control frames between fragments, close
//! codes, oversized frames, permessage-deflate) with raw frames over a real
//! socket, a real WebSocket client library (tokio-tungstenite), and the
//! same auth and subject space as TCP clients (async-nats on the TCP side).
//!
//! Contract: every refusal closes only the offending connection; other
//! WebSocket and TCP clients keep working.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use liftbridge::config::nats::{parse_ws_origin, AuthConfig, NatsOptions, User, WebsocketOptions};
use liftbridge::nats::NatsServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use super::nats_support::{start, test_opts, url};

const WAIT: Duration = Duration::from_secs(10);

fn ws_opts() -> WebsocketOptions {
    WebsocketOptions {
        host: "127.0.0.1".into(),
        port: 0,
        ..WebsocketOptions::default()
    }
}

fn opts_with(ws: WebsocketOptions) -> NatsOptions {
    NatsOptions {
        websocket: Some(ws),
        ..test_opts()
    }
}

async fn ws_server() -> NatsServer {
    start(opts_with(ws_opts())).await
}

fn ws_addr(s: &NatsServer) -> std::net::SocketAddr {
    s.websocket_addr().expect("websocket listener")
}

/// A raw WebSocket client: writes frames byte by byte as told, reads
/// server frames.
struct RawWs {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// One frame from the server.
#[derive(Debug)]
struct Frame {
    fin: bool,
    rsv1: bool,
    opcode: u8,
    masked: bool,
    payload: Vec<u8>,
}

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

fn request(host: &str, extra: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
}

/// Sends `req` and returns the whole HTTP answer head (and body for errors).
async fn http_exchange(s: &NatsServer, req: &str) -> (String, TcpStream) {
    let (head, stream, _) = http_exchange_rest(s, req).await;
    (head, stream)
}

/// As `http_exchange`, plus the bytes that followed a 101 (frames).
async fn http_exchange_rest(s: &NatsServer, req: &str) -> (String, TcpStream, Vec<u8>) {
    let mut stream = TcpStream::connect(ws_addr(s)).await.unwrap();
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i + 4]).into_owned();
            if head.starts_with("HTTP/1.1 101") {
                let rest = buf[i + 4..].to_vec();
                return (head, stream, rest);
            }
            // Error answers carry a short body; read to close.
            let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut buf)).await;
            return (
                String::from_utf8_lossy(&buf).into_owned(),
                stream,
                Vec::new(),
            );
        }
        let n = tokio::time::timeout(WAIT, stream.read(&mut b))
            .await
            .expect("answer in time")
            .unwrap();
        if n == 0 {
            return (
                String::from_utf8_lossy(&buf).into_owned(),
                stream,
                Vec::new(),
            );
        }
        buf.extend_from_slice(&b[..n]);
    }
}

impl RawWs {
    async fn connect(s: &NatsServer, extra: &str) -> (RawWs, String) {
        let host = ws_addr(s).to_string();
        let (head, stream, buf) = http_exchange_rest(s, &request(&host, extra)).await;
        assert!(
            head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
            "{head}"
        );
        (RawWs { stream, buf }, head)
    }

    /// Connects, reads INFO, sends CONNECT (non-verbose) + PING, waits PONG.
    async fn connected(s: &NatsServer) -> RawWs {
        let (mut c, _) = RawWs::connect(s, "").await;
        let info = c.read_data_until(b"\r\n").await;
        assert!(
            info.starts_with(b"INFO {"),
            "{}",
            String::from_utf8_lossy(&info)
        );
        c.send_frame(
            true,
            2,
            b"CONNECT {\"verbose\":false,\"headers\":true}\r\nPING\r\n",
            true,
        )
        .await;
        let pong = c.read_data_until(b"PONG\r\n").await;
        assert!(pong.ends_with(b"PONG\r\n"));
        c
    }

    fn encode(fin: bool, opcode: u8, payload: &[u8], mask: bool, rsv1: bool) -> Vec<u8> {
        let mut f = vec![(if fin { 0x80 } else { 0 }) | (if rsv1 { 0x40 } else { 0 }) | opcode];
        let mbit = if mask { 0x80 } else { 0 };
        if payload.len() < 126 {
            f.push(mbit | payload.len() as u8);
        } else if payload.len() <= 65535 {
            f.push(mbit | 126);
            f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        } else {
            f.push(mbit | 127);
            f.extend_from_slice(&(payload.len() as u64).to_be_bytes());
        }
        if mask {
            let key: [u8; 4] = rand::random();
            f.extend_from_slice(&key);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        } else {
            f.extend_from_slice(payload);
        }
        f
    }

    async fn send_frame(&mut self, fin: bool, opcode: u8, payload: &[u8], mask: bool) {
        let f = RawWs::encode(fin, opcode, payload, mask, false);
        self.stream.write_all(&f).await.unwrap();
    }

    async fn send_raw(&mut self, b: &[u8]) {
        self.stream.write_all(b).await.unwrap();
    }

    /// Next frame, or None when the server closed the socket.
    async fn frame(&mut self) -> Option<Frame> {
        loop {
            if let Some((f, used)) = parse(&self.buf) {
                self.buf.drain(..used);
                return Some(f);
            }
            let mut b = [0u8; 65536];
            let n = tokio::time::timeout(WAIT, self.stream.read(&mut b))
                .await
                .expect("frame in time")
                .unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&b[..n]);
        }
    }

    /// Reads data frames until their payloads end with `end`.
    async fn read_data_until(&mut self, end: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        while !out.ends_with(end) {
            let f = self.frame().await.expect("server frame");
            assert!(!f.masked, "server frames are unmasked");
            assert!(f.fin, "server data frames are whole");
            if f.opcode == 2 {
                out.extend_from_slice(&f.payload);
            } else {
                panic!(
                    "unexpected frame {f:?} after {:?}",
                    String::from_utf8_lossy(&out)
                );
            }
        }
        out
    }

    /// Reads until a close frame; returns (code, reason) and checks the
    /// socket is then closed.
    async fn expect_close(&mut self) -> (u16, String) {
        loop {
            let f = self.frame().await.expect("close frame before EOF");
            if f.opcode == 8 {
                assert!(f.payload.len() >= 2, "close with status");
                let code = u16::from_be_bytes([f.payload[0], f.payload[1]]);
                let reason = String::from_utf8(f.payload[2..].to_vec()).unwrap();
                assert!(
                    self.frame().await.is_none(),
                    "socket closed after the close frame"
                );
                return (code, reason);
            }
        }
    }
}

fn parse(b: &[u8]) -> Option<(Frame, usize)> {
    if b.len() < 2 {
        return None;
    }
    let masked = b[1] & 0x80 != 0;
    let (len, mut pos) = match b[1] & 0x7f {
        126 => (u16::from_be_bytes([*b.get(2)?, *b.get(3)?]) as usize, 4),
        127 => {
            let mut l = [0u8; 8];
            l.copy_from_slice(b.get(2..10)?);
            (u64::from_be_bytes(l) as usize, 10)
        }
        l => (l as usize, 2),
    };
    if masked {
        pos += 4;
    }
    if b.len() < pos + len {
        return None;
    }
    Some((
        Frame {
            fin: b[0] & 0x80 != 0,
            rsv1: b[0] & 0x40 != 0,
            opcode: b[0] & 0x0f,
            masked,
            payload: b[pos..pos + len].to_vec(),
        },
        pos + len,
    ))
}

/// A TCP client on the same server still works.
async fn tcp_client_works(s: &NatsServer) {
    let nc = async_nats::connect(url(s)).await.unwrap();
    let mut sub = nc.subscribe("tcp.check").await.unwrap();
    nc.publish("tcp.check", "ok".into()).await.unwrap();
    let m = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"ok");
}

#[tokio::test]
async fn nats_ws_tungstenite_client_and_tcp_share_subjects() {
    let srv = ws_server().await;
    let (mut ws, resp) =
        tokio_tungstenite::connect_async(format!("ws://{}/any/path", ws_addr(&srv)))
            .await
            .unwrap();
    assert_eq!(resp.status(), 101);
    assert!(resp.headers().get("sec-websocket-protocol").is_none());
    let info = ws.next().await.unwrap().unwrap();
    let Message::Binary(info) = info else {
        panic!("INFO comes as a binary frame: {info:?}")
    };
    assert!(info.starts_with(b"INFO {"));
    // Text frames are accepted as binary ones.
    ws.send(Message::Text(
        "CONNECT {\"verbose\":false}\r\nSUB from.tcp 1\r\nPING\r\n".into(),
    ))
    .await
    .unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"PONG\r\n") {
        match ws.next().await.unwrap().unwrap() {
            Message::Binary(b) => got.extend_from_slice(&b),
            other => panic!("{other:?}"),
        }
    }
    let nc = async_nats::connect(url(&srv)).await.unwrap();
    let mut tcp_sub = nc.subscribe("from.ws").await.unwrap();
    nc.flush().await.unwrap();
    nc.publish("from.tcp", "hello ws".into()).await.unwrap();
    nc.flush().await.unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"hello ws\r\n") {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            Message::Binary(b) => got.extend_from_slice(&b),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, b"MSG from.tcp 1 8\r\nhello ws\r\n");
    ws.send(Message::Binary(b"PUB from.ws 5\r\nhello\r\n".to_vec()))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, tcp_sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"hello");
    // Ping/pong at the WebSocket level.
    ws.send(Message::Ping(b"p1".to_vec())).await.unwrap();
    loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            Message::Pong(p) => {
                assert_eq!(p, b"p1");
                break;
            }
            Message::Binary(_) => {}
            other => panic!("{other:?}"),
        }
    }
    // Normal close: echoed with the same status.
    ws.close(None).await.unwrap();
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("{e}"),
        }
    }
    let v = srv.varz_json();
    assert_eq!(v["websocket"]["port"], ws_addr(&srv).port());
    assert_eq!(v["websocket"]["no_tls"], true);
}

#[tokio::test]
async fn nats_ws_fragments_and_control_frames_between_them() {
    let srv = ws_server().await;
    let (mut c, _) = RawWs::connect(&srv, "").await;
    c.read_data_until(b"\r\n").await;
    // One message in three fragments, a ping between fragments, and an
    // operation split across fragment boundaries.
    c.send_frame(false, 2, b"CONNECT {\"verbose\":false}\r\nSU", true)
        .await;
    c.send_frame(true, 9, b"mid", true).await;
    c.send_frame(false, 0, b"B frag 9\r\nPUB frag 5\r\nhe", true)
        .await;
    c.send_frame(true, 0, b"llo\r\nPI", true).await;
    // The next message finishes the op the previous one began.
    c.send_frame(true, 1, b"NG\r\n", true).await;
    let pong = c.frame().await.unwrap();
    assert_eq!((pong.opcode, &pong.payload[..]), (10, &b"mid"[..]));
    let data = c.read_data_until(b"PONG\r\n").await;
    assert_eq!(data, b"MSG frag 9 5\r\nhello\r\nPONG\r\n");
    // Pongs from the client are ignored; empty frames are harmless.
    c.send_frame(true, 10, b"", true).await;
    c.send_frame(true, 2, b"", true).await;
    c.send_frame(true, 2, b"PING\r\n", true).await;
    assert_eq!(c.read_data_until(b"PONG\r\n").await, b"PONG\r\n");
}

#[tokio::test]
async fn nats_ws_protocol_violations_close_with_1002() {
    let srv = ws_server().await;
    let cases: [(&[u8], &str); 5] = [
        (
            &[0x82, 0x06, b'P', b'I', b'N', b'G', b'\r', b'\n'],
            "mask bit missing",
        ),
        (&[0x80, 0x80, 0, 0, 0, 0], "invalid continuation frame"),
        (&[0xb2, 0x80, 0, 0, 0, 0], "RSV2 and RSV3 must be clear"),
        (&[0x83, 0x80, 0, 0, 0, 0], "unknown opcode 3"),
        (
            &[0x09, 0x80, 0, 0, 0, 0],
            "control frame does not have final bit set",
        ),
    ];
    let keep = RawWs::connected(&srv).await;
    for (bytes, reason) in cases {
        let mut c = RawWs::connected(&srv).await;
        c.send_raw(bytes).await;
        assert_eq!(c.expect_close().await, (1002, reason.to_string()));
    }
    // A new message before the previous one's final frame.
    let mut c = RawWs::connected(&srv).await;
    c.send_frame(false, 2, b"PI", true).await;
    c.send_frame(true, 2, b"NG\r\n", true).await;
    assert_eq!(
        c.expect_close().await,
        (
            1002,
            "new message started before final frame for previous message was received".into()
        )
    );
    // A compressed frame without negotiated compression.
    let mut c = RawWs::connected(&srv).await;
    c.send_raw(&RawWs::encode(true, 2, b"x", true, true)).await;
    assert_eq!(c.expect_close().await.0, 1002);
    let mut keep = keep;
    keep.send_frame(true, 2, b"PING\r\n", true).await;
    assert_eq!(keep.read_data_until(b"PONG\r\n").await, b"PONG\r\n");
    tcp_client_works(&srv).await;
}

#[tokio::test]
async fn nats_ws_oversized_frame_closes_1009_only_that_client() {
    let srv = start(NatsOptions {
        max_payload: 1024,
        ..opts_with(ws_opts())
    })
    .await;
    let mut keep = RawWs::connected(&srv).await;
    keep.send_frame(true, 2, b"SUB big.* 1\r\nPING\r\n", true)
        .await;
    keep.read_data_until(b"PONG\r\n").await;
    let mut c = RawWs::connected(&srv).await;
    // Only the header of a frame far over max_payload + overhead: refused
    // before any of its payload is read.
    let len: u64 = 1024 + liftbridge::nats::ws::FRAME_OVERHEAD + 1;
    let mut hdr = vec![0x82, 0xff];
    hdr.extend_from_slice(&len.to_be_bytes());
    hdr.extend_from_slice(&[1, 2, 3, 4]);
    c.send_raw(&hdr).await;
    assert_eq!(
        c.expect_close().await,
        (1009, "maximum payload exceeded".into())
    );
    // A NATS payload over max_payload in a normal-sized frame: the NATS
    // error, then close 1009 as nats-server maps it.
    let mut c = RawWs::connected(&srv).await;
    let mut op = b"PUB big.x 2000\r\n".to_vec();
    op.extend(std::iter::repeat_n(b'x', 2000));
    op.extend_from_slice(b"\r\n");
    c.send_frame(true, 2, &op, true).await;
    let err = c.read_data_until(b"\r\n").await;
    assert_eq!(err, b"-ERR 'Maximum Payload Violation'\r\n");
    assert_eq!(
        c.expect_close().await,
        (1009, "Maximum Payload Violation".into())
    );
    // The other client saw nothing and still works.
    keep.send_frame(true, 2, b"PUB big.y 2\r\nok\r\nPING\r\n", true)
        .await;
    assert_eq!(
        keep.read_data_until(b"PONG\r\n").await,
        b"MSG big.y 1 2\r\nok\r\nPONG\r\n"
    );
    tcp_client_works(&srv).await;
}

#[tokio::test]
async fn nats_ws_close_frames() {
    let srv = ws_server().await;
    // A close with status is echoed with the same status.
    let mut c = RawWs::connected(&srv).await;
    let mut body = 1000u16.to_be_bytes().to_vec();
    body.extend_from_slice(b"bye");
    c.send_frame(true, 8, &body, true).await;
    assert_eq!(c.expect_close().await.0, 1000);
    // Without status: echoed without a body.
    let mut c = RawWs::connected(&srv).await;
    c.send_frame(true, 8, b"", true).await;
    let f = c.frame().await.unwrap();
    assert_eq!((f.opcode, f.payload.len()), (8, 0));
    assert!(c.frame().await.is_none());
    // Invalid status, bad UTF-8 reason.
    let mut c = RawWs::connected(&srv).await;
    c.send_frame(true, 8, &1005u16.to_be_bytes(), true).await;
    assert_eq!(c.expect_close().await.0, 1002);
    let mut c = RawWs::connected(&srv).await;
    c.send_frame(true, 8, &[0x03, 0xe8, 0xff, 0xfe], true).await;
    assert_eq!(
        c.expect_close().await,
        (1007, "invalid utf8 body in close frame".into())
    );
    // Closed clients are gone from the server.
    let deadline = tokio::time::Instant::now() + WAIT;
    while srv.num_connections() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "connections removed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn nats_ws_handshake_refusals() {
    let mut o = ws_opts();
    o.same_origin = true;
    let srv = start(opts_with(o)).await;
    let host = ws_addr(&srv).to_string();
    let status = |s: &str| s.lines().next().unwrap_or("").to_string();
    let (r, _) = http_exchange(&srv, &request(&host, "").replacen("GET", "POST", 1)).await;
    assert_eq!(status(&r), "HTTP/1.1 405 Method Not Allowed");
    assert!(r.contains("Sec-Websocket-Version: 13\r\n"), "{r}");
    let (r, _) = http_exchange(&srv, &request(&host, "").replace(KEY, "")).await;
    assert_eq!(status(&r), "HTTP/1.1 400 Bad Request");
    assert!(r.ends_with("\r\n\r\nBad Request\n"), "{r}");
    let (r, _) = http_exchange(&srv, &request(&host, "").replace("13", "8")).await;
    assert_eq!(status(&r), "HTTP/1.1 400 Bad Request");
    let (r, _) = http_exchange(&srv, &(request(&host, "") + "\u{82}")).await;
    assert_eq!(status(&r), "HTTP/1.1 400 Bad Request");
    // Same-origin policy.
    let other = request(&host, "Origin: http://evil.example.com\r\n");
    let (r, _) = http_exchange(&srv, &other).await;
    assert_eq!(status(&r), "HTTP/1.1 403 Forbidden");
    let same = request(&host, &format!("Origin: http://{host}\r\n"));
    let (r, _) = http_exchange(&srv, &same).await;
    assert_eq!(status(&r), "HTTP/1.1 101 Switching Protocols");
    // A missing origin passes.
    let (r, _) = http_exchange(&srv, &request(&host, "")).await;
    assert_eq!(status(&r), "HTTP/1.1 101 Switching Protocols");

    let mut o = ws_opts();
    o.allowed_origins = vec![parse_ws_origin("https://app.example.com").unwrap()];
    let srv = start(opts_with(o)).await;
    let host = ws_addr(&srv).to_string();
    let (r, _) = http_exchange(&srv, &request(&host, "Origin: https://app.example.com\r\n")).await;
    assert_eq!(status(&r), "HTTP/1.1 101 Switching Protocols");
    let (r, _) = http_exchange(&srv, &request(&host, "Origin: http://app.example.com\r\n")).await;
    assert_eq!(status(&r), "HTTP/1.1 403 Forbidden");
    // A silent socket is dropped after the handshake timeout.
    let mut o = ws_opts();
    o.handshake_timeout = Duration::from_millis(300);
    let srv = start(opts_with(o)).await;
    let mut idle = TcpStream::connect(ws_addr(&srv)).await.unwrap();
    let mut b = [0u8; 16];
    let n = tokio::time::timeout(WAIT, idle.read(&mut b))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
}

#[tokio::test]
async fn nats_ws_permessage_deflate_both_ways() {
    let mut o = ws_opts();
    o.compression = true;
    let srv = start(opts_with(o)).await;
    let (mut c, head) = RawWs::connect(
        &srv,
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n",
    )
    .await;
    assert!(
        head.contains("Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n"),
        "{head}"
    );
    // INFO is over 64 bytes: compressed.
    let info = c.frame().await.unwrap();
    assert!(info.rsv1 && info.opcode == 2);
    assert!(inflate(&info.payload).starts_with(b"INFO {"));
    // A compressed message from the client, in two fragments.
    let mut ops = b"CONNECT {\"verbose\":false}\r\nSUB z 1\r\n".to_vec();
    let payload = "compressible ".repeat(40);
    ops.extend_from_slice(format!("PUB z {}\r\n{payload}\r\nPING\r\n", payload.len()).as_bytes());
    let z = deflate(&ops);
    let (a, b) = z.split_at(z.len() / 2);
    c.send_raw(&RawWs::encode(false, 2, a, true, true)).await;
    c.send_raw(&RawWs::encode(true, 0, b, true, false)).await;
    let mut got = Vec::new();
    while !got.ends_with(b"PONG\r\n") {
        let f = c.frame().await.expect("frame");
        got.extend(if f.rsv1 {
            inflate(&f.payload)
        } else {
            f.payload
        });
    }
    let want = format!("MSG z 1 {}\r\n{payload}\r\nPONG\r\n", payload.len());
    assert_eq!(String::from_utf8_lossy(&got), want);
    // A compressed bomb over max_payload once inflated: 1009.
    let bomb = deflate(&vec![b'a'; 2 * 1024 * 1024]);
    c.send_raw(&RawWs::encode(true, 2, &bomb, true, true)).await;
    assert_eq!(
        c.expect_close().await,
        (1009, "maximum payload exceeded".into())
    );
}

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut c = flate2::Compress::new(flate2::Compression::default(), false);
    let mut out = Vec::with_capacity(data.len() + 1024);
    c.compress_vec(data, &mut out, flate2::FlushCompress::Sync)
        .unwrap();
    assert!(
        c.total_in() as usize == data.len(),
        "one call compresses all"
    );
    out.truncate(out.len() - 4);
    out
}

fn inflate(data: &[u8]) -> Vec<u8> {
    let mut d = flate2::Decompress::new(false);
    let mut input = data.to_vec();
    input.extend_from_slice(&[0, 0, 0xff, 0xff]);
    let mut out = Vec::with_capacity(64 * 1024);
    d.decompress_vec(&input, &mut out, flate2::FlushDecompress::Sync)
        .unwrap();
    out
}

#[tokio::test]
async fn nats_ws_same_auth_as_tcp() {
    let srv = start(NatsOptions {
        auth: AuthConfig {
            users: vec![User {
                account: None,
                username: "alice".into(),
                password: "secret".into(),
                permissions: None,
            }],
            ..AuthConfig::default()
        },
        ..opts_with(ws_opts())
    })
    .await;
    let (mut c, _) = RawWs::connect(&srv, "").await;
    let info = c.read_data_until(b"\r\n").await;
    assert!(String::from_utf8_lossy(&info).contains("\"auth_required\":true"));
    c.send_frame(
        true,
        2,
        b"CONNECT {\"verbose\":false,\"user\":\"alice\",\"pass\":\"wrong\"}\r\n",
        true,
    )
    .await;
    assert_eq!(
        c.read_data_until(b"\r\n").await,
        b"-ERR 'Authorization Violation'\r\n"
    );
    assert_eq!(
        c.expect_close().await,
        (1008, "Authorization Violation".into())
    );
    let (mut c, _) = RawWs::connect(&srv, "").await;
    c.read_data_until(b"\r\n").await;
    c.send_frame(
        true,
        2,
        b"CONNECT {\"verbose\":false,\"user\":\"alice\",\"pass\":\"secret\"}\r\nPING\r\n",
        true,
    )
    .await;
    assert_eq!(c.read_data_until(b"PONG\r\n").await, b"PONG\r\n");
    let connz = srv.connz_json("?auth=1").unwrap();
    let conns = connz["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 1);
    assert_eq!(conns[0]["type"], "websocket");
    assert_eq!(conns[0]["authorized_user"], "alice");
}

#[tokio::test]
async fn nats_ws_async_nats_client_pub_sub_request() {
    let mut o = ws_opts();
    o.compression = true;
    let srv = start(opts_with(o)).await;
    let ws = async_nats::connect(format!("ws://{}", ws_addr(&srv)))
        .await
        .unwrap();
    let tcp = async_nats::connect(url(&srv)).await.unwrap();
    // A responder on TCP, a requester on WebSocket, and the other way round.
    let mut svc = tcp.subscribe("svc.tcp").await.unwrap();
    let tcp2 = tcp.clone();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            if let Some(r) = m.reply {
                let mut body = b"tcp:".to_vec();
                body.extend_from_slice(&m.payload);
                tcp2.publish(r, body.into()).await.unwrap();
            }
        }
    });
    // async-nats's flush is no round trip: a request on the same
    // connection is, and it comes after the SUB.
    tcp.request("svc.tcp", "sync".into()).await.unwrap();
    let r = tokio::time::timeout(WAIT, ws.request("svc.tcp", "q1".into()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&r.payload[..], b"tcp:q1");
    let mut wsvc = ws.subscribe("svc.ws").await.unwrap();
    let ws2 = ws.clone();
    tokio::spawn(async move {
        while let Some(m) = wsvc.next().await {
            if let Some(r) = m.reply {
                ws2.publish(r, m.payload).await.unwrap();
            }
        }
    });
    ws.request("svc.ws", "sync".into()).await.unwrap();
    let big = bytes::Bytes::from(vec![7u8; 300 * 1024]);
    let r = tokio::time::timeout(WAIT, tcp.request("svc.ws", big.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.payload, big);
    // Many messages through one WebSocket subscriber, in order.
    let mut sub = ws.subscribe("count").await.unwrap();
    ws.request("svc.tcp", "sync".into()).await.unwrap();
    for i in 0..2000u32 {
        tcp.publish("count", i.to_string().into()).await.unwrap();
    }
    tcp.flush().await.unwrap();
    for i in 0..2000u32 {
        let m = tokio::time::timeout(WAIT, sub.next())
            .await
            .unwrap_or_else(|_| panic!("message {i} in time"))
            .unwrap();
        assert_eq!(m.payload, i.to_string());
    }
}

/// `nats.websocket.*` in liftbridge.yaml: the node's embedded server serves
/// WebSocket clients next to TCP ones.
#[tokio::test]
async fn nats_ws_liftbridge_yaml_node() {
    use super::support::procs::LiftbridgeNode;
    let ws_port = super::support::free_port();
    let extra = format!(
        "  websocket:\n    listen: 127.0.0.1:{ws_port}\n    no_tls: true\n    compression: true\n"
    );
    let mut node = LiftbridgeNode::start("wsc", &[], &extra).await;
    node.proc.try_wait_port(ws_port).await.unwrap();
    let ws = async_nats::connect(format!("ws://127.0.0.1:{ws_port}"))
        .await
        .unwrap();
    let tcp = async_nats::connect(node.url()).await.unwrap();
    let mut sub = tcp.subscribe("yaml.ws").await.unwrap();
    tcp.request("nobody", "x".into()).await.unwrap_err(); // round trip: SUB is in
    ws.publish("yaml.ws", "from ws".into()).await.unwrap();
    ws.flush().await.unwrap();
    let m = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"from ws");
    let varz = super::support::http_json(node.http_port, "/varz")
        .await
        .expect("varz");
    assert_eq!(varz["websocket"]["port"], ws_port);
    assert_eq!(varz["websocket"]["compression"], true);
}

/// `wss://`: TLS first, then the upgrade, then NATS; the origin policy sees
/// the https scheme; /connz shows the TLS version.
#[tokio::test]
async fn nats_ws_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let certs = liftbridge::tls::generate_dev_certs(dir.path(), &[]).unwrap();
    let mut o = ws_opts();
    o.tls = Some(liftbridge::config::nats::TlsFiles {
        cert: certs.server_cert.clone(),
        key: certs.server_key.clone(),
        ca: None,
        verify: false,
        params: Default::default(),
        handshake_first: None,
    });
    o.same_origin = true;
    let srv = start(opts_with(o)).await;
    let port = ws_addr(&srv).port();
    let connector = tokio_rustls::TlsConnector::from(
        liftbridge::tls::client_config(&certs.ca_cert, None).unwrap(),
    );
    let tcp = TcpStream::connect(ws_addr(&srv)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let req = tokio_tungstenite::tungstenite::http::Request::builder()
        .uri(format!("wss://localhost:{port}/"))
        .header("Host", format!("localhost:{port}"))
        .header("Origin", format!("https://localhost:{port}"))
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", KEY)
        .body(())
        .unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tls).await.unwrap();
    assert_eq!(resp.status(), 101);
    let Some(Ok(Message::Binary(info))) = ws.next().await else {
        panic!("INFO")
    };
    assert!(info.starts_with(b"INFO {"));
    ws.send(Message::Binary(
        b"CONNECT {\"verbose\":false,\"name\":\"tls-ws\"}\r\nPING\r\n".to_vec(),
    ))
    .await
    .unwrap();
    let Some(Ok(Message::Binary(pong))) = ws.next().await else {
        panic!("PONG")
    };
    assert_eq!(pong, b"PONG\r\n");
    let connz = srv.connz_json("").unwrap();
    let c = &connz["connections"][0];
    assert_eq!(c["type"], "websocket");
    assert!(
        c["tls_version"].as_str().is_some_and(|v| v.contains("TLS")),
        "{c}"
    );
    assert!(srv.varz_json()["websocket"].get("no_tls").is_none());
    // A plain-text client is refused by the TLS layer, nothing else.
    let (r, _) = http_exchange(&srv, &request("localhost", "")).await;
    assert!(!r.contains("101"), "{r}");
    tcp_client_works(&srv).await;
}

/// In a cluster, WebSocket clients get no `connect_urls` (they are the
/// peers' TCP addresses, useless to a WebSocket client), at connect time
/// or when a route comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_ws_no_tcp_connect_urls_in_cluster() {
    use liftbridge::config::nats::ClusterOptions;
    let cluster = |routes: Vec<String>| ClusterOptions {
        name: Some("wsc".into()),
        host: "127.0.0.1".into(),
        port: 0,
        routes,
        ..Default::default()
    };
    let a = start(NatsOptions {
        cluster: Some(cluster(vec![])),
        ..opts_with(ws_opts())
    })
    .await;
    let mut ws = RawWs::connected(&a).await;
    let b = start(NatsOptions {
        cluster: Some(cluster(vec![format!(
            "nats-route://{}",
            a.cluster_addr().unwrap()
        )])),
        ..test_opts()
    })
    .await;
    super::support::wait_until(WAIT, "route up", || async { a.num_routes() == 1 }).await;
    // A TCP client now hears of B; the WebSocket client gets nothing.
    let mut tcp = super::nats_support::Raw::connect(&a).await;
    assert!(tcp.info.contains("connect_urls"), "{}", tcp.info);
    tcp.send(b"CONNECT {\"verbose\":false}\r\n").await;
    ws.send_frame(true, 2, b"PING\r\n", true).await;
    // Exactly PONG: no async INFO came before it.
    assert_eq!(ws.read_data_until(b"PONG\r\n").await, b"PONG\r\n");
    let mut fresh = RawWs::connect(&a, "").await.0;
    let first = fresh.read_data_until(b"\r\n").await;
    let first = String::from_utf8_lossy(&first);
    assert!(
        first.starts_with("INFO ") && !first.contains("connect_urls"),
        "{first}"
    );
    b.shutdown().await;
}

/// `allowed_connection_types` limits how a user may connect: `web` only
/// over WebSocket, `tcp` only over TCP, `any` both ways; a refused client
/// gets `Authorization Violation` and the others are not disturbed.
#[tokio::test]
async fn nats_ws_allowed_connection_types_per_user() {
    let mut auth = AuthConfig::default();
    for name in ["web", "tcp", "any"] {
        auth.users.push(User {
            account: None,
            username: name.into(),
            password: "pw".into(),
            permissions: None,
        });
    }
    auth.connection_types
        .insert("web".into(), vec!["WEBSOCKET".into()]);
    auth.connection_types
        .insert("tcp".into(), vec!["STANDARD".into()]);
    let srv = start(NatsOptions {
        auth,
        ..opts_with(ws_opts())
    })
    .await;
    let tcp_addr = url(&srv);
    let ws_url = format!("ws://{}", ws_addr(&srv));
    let connect = |user: &'static str, to: String| async move {
        async_nats::ConnectOptions::with_user_and_password(user.into(), "pw".into())
            .max_reconnects(1)
            .connect(to)
            .await
    };
    // Allowed ways.
    let web = connect("web", ws_url.clone()).await.unwrap();
    let tcp = connect("tcp", tcp_addr.clone()).await.unwrap();
    let any_ws = connect("any", ws_url.clone()).await.unwrap();
    let any_tcp = connect("any", tcp_addr.clone()).await.unwrap();
    for c in [&web, &tcp, &any_ws, &any_tcp] {
        c.flush().await.unwrap();
    }
    // Refused ways, seen on the wire.
    for (user, pass) in [("web", "pw"), ("tcp", "pw")] {
        let over_ws = user == "tcp";
        if over_ws {
            let (mut c, _) = RawWs::connect(&srv, "").await;
            c.read_data_until(b"\r\n").await;
            let line = format!(
                "CONNECT {{\"verbose\":false,\"user\":\"{user}\",\"pass\":\"{pass}\"}}\r\n"
            );
            c.send_frame(true, 2, line.as_bytes(), true).await;
            assert_eq!(
                c.read_data_until(b"\r\n").await,
                b"-ERR 'Authorization Violation'\r\n"
            );
        } else {
            let mut s = TcpStream::connect(srv.client_addr()).await.unwrap();
            let mut b = vec![0u8; 4096];
            let _ = s.read(&mut b).await.unwrap();
            let line = format!(
                "CONNECT {{\"verbose\":false,\"user\":\"{user}\",\"pass\":\"{pass}\"}}\r\nPING\r\n"
            );
            s.write_all(line.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
            let text = String::from_utf8_lossy(&out);
            assert!(text.contains("-ERR 'Authorization Violation'"), "{text}");
            assert!(!text.contains("PONG"), "{text}");
        }
    }
    // The allowed clients still talk to each other both ways.
    let mut sub = web.subscribe("types.x").await.unwrap();
    web.flush().await.unwrap();
    tcp.publish("types.x", "hello".into()).await.unwrap();
    tcp.flush().await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"hello");
}

/// Whether `user`/`pass` (or no credentials) can connect to `url` now.
async fn ws_auth_ok(url: &str, creds: Option<(&str, &str)>) -> bool {
    let opts = match creds {
        Some((u, p)) => async_nats::ConnectOptions::with_user_and_password(u.into(), p.into()),
        None => async_nats::ConnectOptions::new(),
    };
    match tokio::time::timeout(WAIT, opts.connect(url)).await {
        Ok(Ok(c)) => c.flush().await.is_ok(),
        _ => false,
    }
}

/// The `websocket` block's own authorization, the same body against our
/// server and Go 2.15.1: with `authorization { user, password }` there,
/// WebSocket clients use that user and the server's user is refused over
/// WebSocket (and the reverse over TCP); with only `no_auth_user` there,
/// a WebSocket client without credentials is that user while a TCP one
/// is refused.
async fn ws_authorization_body(imp: &super::support::procs::Impl, tag: &str) {
    use super::support::procs::ConfNode;
    let ws_port = super::support::free_port();
    let top = format!(
        "authorization {{ user: tcp, password: tcpw }}\nwebsocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true, authorization {{ user: ws, password: wsw }} }}\n"
    );
    let mut n = ConfNode::start_with(imp, &format!("wsauth-{tag}"), false, None, &top).await;
    n.proc.try_wait_port(ws_port).await.unwrap();
    let ws = format!("ws://127.0.0.1:{ws_port}");
    assert!(ws_auth_ok(&n.url(), Some(("tcp", "tcpw"))).await, "{tag}");
    assert!(ws_auth_ok(&ws, Some(("ws", "wsw"))).await, "{tag}");
    assert!(!ws_auth_ok(&ws, Some(("tcp", "tcpw"))).await, "{tag}");
    assert!(!ws_auth_ok(&n.url(), Some(("ws", "wsw"))).await, "{tag}");
    assert!(!ws_auth_ok(&ws, None).await, "{tag}");
    drop(n);

    let ws_port = super::support::free_port();
    let top = format!(
        "authorization {{ users: [ {{user: a, password: apw}}, {{user: anon, password: x}} ] }}\nwebsocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true, no_auth_user: anon }}\n"
    );
    let mut n = ConfNode::start_with(imp, &format!("wsanon-{tag}"), false, None, &top).await;
    n.proc.try_wait_port(ws_port).await.unwrap();
    let ws = format!("ws://127.0.0.1:{ws_port}");
    assert!(ws_auth_ok(&ws, None).await, "{tag}");
    assert!(ws_auth_ok(&ws, Some(("a", "apw"))).await, "{tag}");
    assert!(!ws_auth_ok(&n.url(), None).await, "{tag}");
    drop(n);

    // Only WebSocket clients must authenticate.
    let ws_port = super::support::free_port();
    let top = format!(
        "websocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true, authorization {{ token: wstok, timeout: 1 }} }}\n"
    );
    let mut n = ConfNode::start_with(imp, &format!("wsonly-{tag}"), false, None, &top).await;
    n.proc.try_wait_port(ws_port).await.unwrap();
    let ws = format!("ws://127.0.0.1:{ws_port}");
    assert!(ws_auth_ok(&n.url(), None).await, "{tag}");
    assert!(!ws_auth_ok(&ws, None).await, "{tag}");
    let with_token = async_nats::ConnectOptions::with_token("wstok".into())
        .connect(&ws)
        .await;
    assert!(with_token.is_ok(), "{tag}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_ws_own_authorization_ours() {
    ws_authorization_body(&super::support::procs::Impl::Liftbridge, "lb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_ws_own_authorization_go_2_15() {
    let go = super::support::procs::Impl::Go(super::support::procs::go_nats_server_2_15());
    ws_authorization_body(&go, "go").await;
}

/// The `websocket` block's authorization `timeout`: a WebSocket client
/// that sends no CONNECT is closed with `Authentication Timeout` after it,
/// even when TCP clients need no authentication.
#[tokio::test]
async fn nats_ws_own_authorization_timeout() {
    let mut o = ws_opts();
    o.auth = Some(liftbridge::config::nats::WsAuth {
        token: Some("t".into()),
        timeout: Some(Duration::from_millis(300)),
        ..Default::default()
    });
    let srv = start(opts_with(o)).await;
    let (mut c, _) = RawWs::connect(&srv, "").await;
    let info = c.read_data_until(b"\r\n").await;
    assert!(
        String::from_utf8_lossy(&info).contains("\"auth_required\":true"),
        "{}",
        String::from_utf8_lossy(&info)
    );
    let started = std::time::Instant::now();
    let err = c.read_data_until(b"\r\n").await;
    assert_eq!(err, b"-ERR 'Authentication Timeout'\r\n");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// A tungstenite client on `port` with `Cookie: <cookie>`: the upgrade
/// answer's headers, and what the server answers `CONNECT <connect>` and
/// `PING` with after its INFO (`PONG` or an `-ERR`).
async fn ws_cookie_attempt(
    port: u16,
    cookie: Option<&str>,
    connect: &str,
) -> (tokio_tungstenite::tungstenite::http::HeaderMap, String) {
    let mut req = tokio_tungstenite::tungstenite::http::Request::builder()
        .uri(format!("ws://127.0.0.1:{port}/"))
        .header("Host", format!("127.0.0.1:{port}"))
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", KEY);
    if let Some(c) = cookie {
        req = req.header("Cookie", c);
    }
    let (mut ws, resp) = tokio_tungstenite::connect_async(req.body(()).unwrap())
        .await
        .expect("upgrade");
    let mut text = String::new();
    let mut sent = false;
    while let Ok(Some(Ok(m))) = tokio::time::timeout(WAIT, ws.next()).await {
        let Message::Binary(b) = m else { break };
        text.push_str(&String::from_utf8_lossy(&b));
        if !sent && text.contains("INFO ") && text.ends_with("\r\n") {
            sent = true;
            ws.send(Message::Binary(
                format!("CONNECT {connect}\r\nPING\r\n").into_bytes(),
            ))
            .await
            .unwrap();
        }
        if text.contains("PONG\r\n") || text.contains("-ERR") {
            break;
        }
    }
    let after_info = text
        .split_once("\r\n")
        .map_or(text.clone(), |(_, rest)| rest.trim_end().to_string());
    (resp.headers().clone(), after_info)
}

/// The `websocket` block's `user_cookie`/`pass_cookie`/`token_cookie`
/// (credentials from the upgrade request's cookies stand in for those a
/// CONNECT leaves out) and `headers` (added to the 101 answer), the same
/// body against our server and Go 2.15.1.
async fn ws_cookies_body(imp: &super::support::procs::Impl, tag: &str) {
    use super::support::procs::ConfNode;
    let ws_port = super::support::free_port();
    let top = format!(
        "authorization {{ users: [ {{user: cu, password: cpw}} ] }}\nwebsocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true, user_cookie: nuser, pass_cookie: npass, headers {{ X-Edge: \"one\" }} }}\n"
    );
    let mut n = ConfNode::start_with(imp, &format!("wscookie-{tag}"), false, None, &top).await;
    n.proc.try_wait_port(ws_port).await.unwrap();
    let plain = r#"{"verbose":false}"#;
    let (headers, answer) =
        ws_cookie_attempt(ws_port, Some("other=1; nuser=cu; npass=\"cpw\""), plain).await;
    assert_eq!(answer, "PONG", "{tag}");
    assert_eq!(
        headers.get("X-Edge").map(|v| v.as_bytes()),
        Some(&b"one"[..]),
        "{tag}"
    );
    let (_, answer) = ws_cookie_attempt(ws_port, Some("nuser=cu; npass=wrong"), plain).await;
    assert_eq!(answer, "-ERR 'Authorization Violation'", "{tag}");
    let (_, answer) = ws_cookie_attempt(ws_port, None, plain).await;
    assert_eq!(answer, "-ERR 'Authorization Violation'", "{tag}");
    // CONNECT's own credentials win over the cookies.
    let own = r#"{"verbose":false,"user":"cu","pass":"cpw"}"#;
    let (_, answer) = ws_cookie_attempt(ws_port, Some("nuser=cu; npass=wrong"), own).await;
    assert_eq!(answer, "PONG", "{tag}");
    // TCP clients have no cookies.
    assert!(async_nats::connect(n.url()).await.is_err(), "{tag}");
    drop(n);

    let ws_port = super::support::free_port();
    let top = format!(
        "authorization {{ token: tk }}\nwebsocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true, token_cookie: ntok }}\n"
    );
    let mut n = ConfNode::start_with(imp, &format!("wstok-{tag}"), false, None, &top).await;
    n.proc.try_wait_port(ws_port).await.unwrap();
    let (_, answer) = ws_cookie_attempt(ws_port, Some("ntok=tk"), plain).await;
    assert_eq!(answer, "PONG", "{tag}");
    let (_, answer) = ws_cookie_attempt(ws_port, Some("ntok=nope"), plain).await;
    assert_eq!(answer, "-ERR 'Authorization Violation'", "{tag}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_ws_cookies_and_headers_ours() {
    ws_cookies_body(&super::support::procs::Impl::Liftbridge, "lb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_ws_cookies_and_headers_go_2_15() {
    let go = super::support::procs::Impl::Go(super::support::procs::go_nats_server_2_15());
    ws_cookies_body(&go, "go").await;
}

/// The `websocket` block's `ping_interval` applies to WebSocket clients
/// only: a WebSocket client is pinged within a second, a TCP client (the
/// server's 2 minutes) is not.
#[tokio::test]
async fn nats_ws_own_ping_interval() {
    let mut o = ws_opts();
    o.ping_interval = Some(Duration::from_millis(300));
    let srv = start(opts_with(o)).await;
    let (mut c, _) = RawWs::connect(&srv, "").await;
    let _info = c.read_data_until(b"\r\n").await;
    c.send_frame(true, 2, b"CONNECT {\"verbose\":false}\r\n", true)
        .await;
    let ping = tokio::time::timeout(Duration::from_secs(2), c.read_data_until(b"\r\n"))
        .await
        .expect("a PING within the WebSocket ping interval");
    assert_eq!(ping, b"PING\r\n");
    let mut tcp = TcpStream::connect(url(&srv).trim_start_matches("nats://"))
        .await
        .unwrap();
    tcp.write_all(b"CONNECT {\"verbose\":false}\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_millis(1500), async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("INFO ") && !got.contains("PING"), "{got}");
}

/// `jwt_cookie` in operator mode: a bearer user JWT in the cookie
/// authenticates a WebSocket client whose CONNECT has no JWT; one that
/// needs a nonce signature does not; the same body against our server and
/// Go 2.15.1.
async fn ws_jwt_cookie_body(imp: &super::support::procs::Impl, tag: &str) {
    use super::support::jwt::{account_jwt, operator_jwt, user_jwt};
    use super::support::procs::ConfNode;
    let op = nkeys::KeyPair::new_operator();
    let (acc, sys, user) = (
        nkeys::KeyPair::new_account(),
        nkeys::KeyPair::new_account(),
        nkeys::KeyPair::new_user(),
    );
    let ws_port = super::support::free_port();
    let top = format!(
        "operator: {}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n {}: {}\n {}: {}\n}}\nwebsocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true, jwt_cookie: njwt }}\n",
        operator_jwt(&op, &sys.public_key()),
        sys.public_key(),
        acc.public_key(),
        account_jwt(&op, &acc.public_key(), "a", |_| {}),
        sys.public_key(),
        account_jwt(&op, &sys.public_key(), "sys", |_| {}),
    );
    let mut n = ConfNode::start_with(imp, &format!("wsjwt-{tag}"), false, None, &top).await;
    n.proc.try_wait_port(ws_port).await.unwrap();
    let plain = r#"{"verbose":false}"#;
    let bearer = user_jwt(&acc, &user, |c| c.nats.limits.bearer_token = true);
    let (_, answer) = ws_cookie_attempt(ws_port, Some(&format!("njwt={bearer}")), plain).await;
    assert_eq!(answer, "PONG", "{tag}");
    let signed = user_jwt(&acc, &user, |_| {});
    let (_, answer) = ws_cookie_attempt(ws_port, Some(&format!("njwt={signed}")), plain).await;
    assert_eq!(answer, "-ERR 'Authorization Violation'", "{tag}");
    let (_, answer) = ws_cookie_attempt(ws_port, None, plain).await;
    assert_eq!(answer, "-ERR 'Authorization Violation'", "{tag}");
    let varz = super::support::http_json(n.http_port, "/varz")
        .await
        .unwrap();
    assert_eq!(varz["websocket"]["jwt_cookie"], "njwt", "{tag}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_ws_jwt_cookie_ours() {
    ws_jwt_cookie_body(&super::support::procs::Impl::Liftbridge, "lb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_ws_jwt_cookie_go_2_15() {
    let go = super::support::procs::Impl::Go(super::support::procs::go_nats_server_2_15());
    ws_jwt_cookie_body(&go, "go").await;
}
