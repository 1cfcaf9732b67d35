//! NATS clients over WebSocket (`websocket { … }`, `spec/nats-parity.md` §4).
//!
//! A second client listener. Each accepted socket goes through (TLS, when
//! configured, then) the HTTP/1.1 upgrade, checked by [`proto`]; then the
//! connection is an ordinary NATS client: the same [`Reader`] (parser,
//! auth, permissions, limits), writer task and ping timer as a TCP client,
//! running over two adapters that turn frames into a byte stream and back:
//!
//! - [`WsRead`] (an `AsyncRead`) unmasks data frames straight into the
//!   reader's buffer (frame boundaries mean nothing to the NATS parser),
//!   inflates compressed messages, and answers control frames by queueing
//!   pong/close frames for the writer side;
//! - [`WsWrite`] (an `AsyncWrite`) sends each chunk the writer task hands
//!   it as one unmasked binary frame (deflated when negotiated and larger
//!   than 64 bytes), and writes queued control frames between data frames.
//!
//! Tasks per connection: the same three as TCP (reader, writer, ping
//! timer); nothing extra. The reader wakes the writer for a queued pong
//! (the writer flushes its transport when woken with no NATS bytes).
//!
//! Limits (memory is bounded): a data frame longer than max_payload plus
//! [`FRAME_OVERHEAD`] is refused with close 1009; a compressed message may
//! be at most min(8 × max_payload, 64 MiB) compressed and max_payload
//! inflated (1009 again); queued control frames are capped at
//! [`MAX_CTL_QUEUE`] bytes (pongs beyond it are dropped: a client that
//! pings without reading loses answers, not memory); the upgrade request
//! head is at most [`MAX_REQUEST_HEAD`] bytes and must arrive within
//! `handshake_timeout`.
//!
//! Closing: a protocol violation queues a close frame with 1002 (or 1009,
//! 1007) and ends the read side; the client's own close is echoed; a
//! connection the NATS layer ends with `-ERR '…'` gets the close code
//! nats-server uses for that reason; anything else (shutdown) gets 1001.
//! The close frame is written when the writer task shuts the transport down.

pub mod proto;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use super::client::{self, ClientShared, Reader};
use super::server::{ClientStart, NatsError, ServerInner};
use crate::config::nats::WebsocketOptions;
use proto::{code, FrameError, FrameHeader};

/// Extra room over max_payload allowed in one data frame: a frame may carry
/// a full-size message together with its control line and other small
/// operations.
pub const FRAME_OVERHEAD: u64 = 64 * 1024;
/// Most control-frame bytes queued for the writer.
pub const MAX_CTL_QUEUE: usize = 64 * 1024;
/// Largest upgrade request head accepted.
pub const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// Compressed outgoing data only above this size (nats-server's rule).
const COMPRESS_MIN: usize = 64;
/// Raw read chunk of the frame decoder.
const READ_CHUNK: usize = 64 * 1024;

/// The bound WebSocket listener (kept in the server state for `/varz`).
pub(crate) struct WsListener {
    /// The options it runs with.
    pub opts: WebsocketOptions,
    /// Bound address (port 0 resolved).
    pub addr: SocketAddr,
    /// Read per handshake, so a reload's new certificate applies to new
    /// connections only.
    tls: parking_lot::RwLock<Option<tokio_rustls::TlsAcceptor>>,
}

impl WsListener {
    /// Whether the listener serves `wss://`.
    pub(crate) fn has_tls(&self) -> bool {
        self.tls.read().is_some()
    }

    /// Replaces the certificate (a reload; TLS stays on).
    pub(crate) fn set_tls(&self, tls: tokio_rustls::TlsAcceptor) {
        *self.tls.write() = Some(tls);
    }
}

/// The `/varz` `websocket` object (nats-server omits empty fields; `{}`
/// when WebSocket is not configured).
pub(crate) fn varz_websocket(inner: &ServerInner) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    if let Some(ws) = &inner.ws {
        let o = &ws.opts;
        m.insert("host".into(), o.host.clone().into());
        m.insert("port".into(), ws.addr.port().into());
        if let Some(a) = &o.advertise {
            m.insert("advertise".into(), a.clone().into());
        }
        if !o.cookies.jwt.is_empty() {
            m.insert("jwt_cookie".into(), o.cookies.jwt.clone().into());
        }
        if o.handshake_timeout != crate::config::nats::DEFAULT_WS_HANDSHAKE_TIMEOUT {
            m.insert(
                "handshake_timeout".into(),
                (o.handshake_timeout.as_nanos() as u64).into(),
            );
        }
        if !ws.has_tls() {
            m.insert("no_tls".into(), true.into());
        }
        if o.same_origin {
            m.insert("same_origin".into(), true.into());
        }
        if !o.allowed_origins.is_empty() {
            let list: Vec<serde_json::Value> = o
                .allowed_origins
                .iter()
                .map(|a| a.text.clone().into())
                .collect();
            m.insert("allowed_origins".into(), list.into());
        }
        if o.compression {
            m.insert("compression".into(), true.into());
        }
    }
    serde_json::Value::Object(m)
}

/// Binds the WebSocket listener described by `opts`.
pub(crate) async fn bind(opts: &WebsocketOptions) -> Result<(WsListener, TcpListener), NatsError> {
    let tls = match &opts.tls {
        Some(files) => Some(tokio_rustls::TlsAcceptor::from(crate::tls::server_config(
            files,
        )?)),
        None => None,
    };
    let bind = format!("{}:{}", opts.host, opts.port);
    let listener = TcpListener::bind(&bind)
        .await
        .map_err(|source| NatsError::Bind {
            addr: bind.clone(),
            source,
        })?;
    let addr = listener
        .local_addr()
        .map_err(|source| NatsError::Bind { addr: bind, source })?;
    Ok((
        WsListener {
            opts: opts.clone(),
            addr,
            tls: parking_lot::RwLock::new(tls),
        },
        listener,
    ))
}

/// Starts accepting WebSocket clients on `listener`.
pub(crate) fn spawn(inner: Arc<ServerInner>, listener: TcpListener) {
    if let Some(ws) = &inner.ws {
        let scheme = if ws.has_tls() { "wss" } else { "ws" };
        tracing::info!("Listening for websocket clients on {scheme}://{}", ws.addr);
        if !ws.has_tls() {
            tracing::warn!("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!");
        }
    }
    tokio::spawn(accept_loop(inner, listener));
}

async fn accept_loop(inner: Arc<ServerInner>, listener: TcpListener) {
    let cancel = inner.listener_cancel();
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, addr)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(inner.clone(), stream, addr));
            }
            Err(e) => {
                tracing::warn!(error = %e, "websocket accept failed");
                // Back off on resource exhaustion (EMFILE) instead of spinning.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

async fn serve(inner: Arc<ServerInner>, stream: TcpStream, addr: SocketAddr) {
    let Some(ws) = inner.ws.as_ref() else {
        return;
    };
    let timeout = ws.opts.handshake_timeout;
    let tls = ws.tls.read().clone();
    match tls {
        None => {
            let up = tokio::time::timeout(timeout, upgrade(stream, &ws.opts, false)).await;
            if let Ok(Ok((stream, up))) = up {
                let (r, w) = stream.into_split();
                run(inner.clone(), r, w, addr, up, None).await;
            } else {
                log_refused(addr, up);
            }
        }
        Some(acceptor) => {
            let up = tokio::time::timeout(timeout, async {
                let tls = acceptor.accept(stream).await.map_err(UpgradeError::Io)?;
                upgrade(tls, &ws.opts, true).await
            })
            .await;
            if let Ok(Ok((stream, up))) = up {
                let (_, conn) = stream.get_ref();
                let tls_info = (
                    conn.protocol_version()
                        .map(|v| format!("{v:?}"))
                        .unwrap_or_default(),
                    conn.negotiated_cipher_suite()
                        .map(|c| format!("{:?}", c.suite()))
                        .unwrap_or_default(),
                );
                let (r, w) = tokio::io::split(stream);
                run(inner.clone(), r, w, addr, up, Some(tls_info)).await;
            } else {
                log_refused(addr, up);
            }
        }
    }
}

fn log_refused<T>(
    addr: SocketAddr,
    r: Result<Result<T, UpgradeError>, tokio::time::error::Elapsed>,
) {
    match r {
        Ok(Ok(_)) => {}
        Ok(Err(UpgradeError::Refused(e))) => {
            tracing::debug!("{addr} - websocket handshake error: {}", e.reason)
        }
        Ok(Err(UpgradeError::Io(e))) => {
            tracing::debug!("{addr} - websocket handshake error: {e}")
        }
        Err(_) => tracing::debug!("{addr} - websocket handshake error: timeout"),
    }
}

/// Why an upgrade did not happen.
#[derive(Debug, thiserror::Error)]
enum UpgradeError {
    #[error(transparent)]
    Refused(#[from] proto::HandshakeError),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Reads the request head, answers it, and returns the upgraded stream.
async fn upgrade<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    opts: &WebsocketOptions,
    tls: bool,
) -> Result<(S, proto::Upgrade), UpgradeError> {
    let mut head = BytesMut::with_capacity(1024);
    let len = loop {
        if let Some(n) = proto::head_len(&head) {
            break n;
        }
        if head.len() >= MAX_REQUEST_HEAD {
            let _ = s.write_all(proto::error_response(431).as_bytes()).await;
            return Err(proto::HandshakeError {
                status: 431,
                reason: "request head too large".into(),
            }
            .into());
        }
        if s.read_buf(&mut head).await? == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
    };
    let checked = if head.len() > len {
        // A client must wait for the 101 before sending frames.
        Err(proto::HandshakeError {
            status: 400,
            reason: "client sent data before handshake is complete".into(),
        })
    } else {
        proto::check_upgrade(&head[..len], opts, tls)
    };
    match checked {
        Ok(up) => {
            s.write_all(proto::switching_response(&up).as_bytes())
                .await?;
            s.flush().await?;
            Ok((s, up))
        }
        Err(e) => {
            let _ = s
                .write_all(proto::error_response(e.status).as_bytes())
                .await;
            let _ = s.shutdown().await;
            Err(e.into())
        }
    }
}

/// Runs an upgraded connection as a NATS client.
async fn run<R, W>(
    inner: Arc<ServerInner>,
    r: R,
    w: W,
    addr: SocketAddr,
    up: proto::Upgrade,
    tls_info: Option<(String, String)>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let addr = match up.forwarded_ip {
        Some(ip) => SocketAddr::new(ip, addr.port()),
        None => addr,
    };
    let shared = Arc::new(WsShared::default());
    let mut writer = WsWrite::new(w, shared.clone(), up.compress);
    if proto::is_leaf_path(&up.path) {
        let max_payload = inner.live().opts.max_payload as u64;
        let read = WsRead::new(r, shared.clone(), up.compress, !up.no_masking, max_payload);
        super::leaf::accept_websocket(inner, read, writer, addr, shared).await;
        return;
    }
    match inner.start_client(addr, true) {
        ClientStart::Refused(frames) => {
            let _ = writer.write_all(&frames).await;
            let _ =
                tokio::time::timeout(std::time::Duration::from_secs(1), writer.shutdown()).await;
        }
        ClientStart::Accepted {
            client,
            info,
            nonce,
            urls_gen,
        } => {
            if let Some((v, c)) = tls_info {
                let mut m = client.meta.lock();
                m.tls_version = v;
                m.tls_cipher = c;
            }
            client.send_now(&info);
            shared.set_client(&client);
            let mut reader = Reader::new(client.clone(), inner.clone(), nonce, urls_gen);
            reader.set_cookies(up.cookies);
            let live = inner.live();
            let max_payload = live.opts.max_payload as u64;
            let read = WsRead::new(r, shared, up.compress, !up.no_masking, max_payload);
            tokio::spawn(client::ping_loop(client.clone(), inner.clone()));
            tokio::spawn(client::write_loop(
                client.clone(),
                writer,
                live.opts.write_deadline,
                inner.clone(),
            ));
            reader.run(read).await;
        }
    }
}

/// A leaf's framed connection to a hub's WebSocket listener.
pub(crate) type LeafLink<S> =
    tokio::io::Join<WsRead<tokio::io::ReadHalf<S>>, WsWrite<tokio::io::WriteHalf<S>>>;

/// The leaf side of the upgrade, on `s` (TCP, or TLS already set up):
/// asks `host` for `<path>/leafnode`, checks the `101`, and returns the
/// framed stream and its shared state (through which a queued pong wakes
/// the connection's writer). The caller bounds it with a timeout.
pub(crate) async fn connect_leaf<S>(
    mut s: S,
    host: &str,
    path: &str,
    compress: bool,
    no_masking: bool,
    max_payload: u64,
) -> Result<(LeafLink<S>, Arc<WsShared>), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    use base64::Engine;
    let key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 16]>());
    let req = proto::leaf_request(host, path, &key, compress, no_masking);
    let io = |e: io::Error| format!("websocket handshake: {e}");
    s.write_all(req.as_bytes()).await.map_err(io)?;
    s.flush().await.map_err(io)?;
    let mut head = BytesMut::with_capacity(1024);
    let len = loop {
        if let Some(n) = proto::head_len(&head) {
            break n;
        }
        if head.len() >= MAX_REQUEST_HEAD {
            return Err("websocket handshake: response head too large".into());
        }
        if s.read_buf(&mut head).await.map_err(io)? == 0 {
            return Err("websocket handshake: connection closed by the hub".into());
        }
    };
    let agreed = proto::check_leaf_response(&head[..len], &key, compress, no_masking)?;
    // Frames the hub sent right behind its answer (its INFO).
    let early = head.split_off(len);
    let shared = Arc::new(WsShared {
        mask: !agreed.no_masking,
        ..WsShared::default()
    });
    let (r, w) = tokio::io::split(s);
    let mut read = WsRead::new(r, shared.clone(), agreed.compress, false, max_payload);
    read.raw.extend_from_slice(&early);
    let write = WsWrite::new(w, shared.clone(), agreed.compress);
    Ok((tokio::io::join(read, write), shared))
}

/// State shared by the two halves of one WebSocket connection.
#[derive(Default)]
pub(crate) struct WsShared {
    /// Encoded control frames waiting for the writer (bounded by
    /// `MAX_CTL_QUEUE`).
    ctl: Mutex<CtlQueue>,
    /// The connection, to wake its writer for a queued control frame.
    client: Mutex<Option<std::sync::Weak<ClientShared>>>,
    /// We are the client side (a leaf dialling a hub) and mask every
    /// frame we send.
    mask: bool,
}

#[derive(Default)]
struct CtlQueue {
    frames: BytesMut,
    /// A close frame has been queued (nothing may follow it).
    close_queued: bool,
}

impl WsShared {
    /// The connection whose writer a queued control frame wakes.
    pub(crate) fn set_client(&self, c: &Arc<ClientShared>) {
        *self.client.lock() = Some(Arc::downgrade(c));
    }

    fn queue_pong(&self, payload: &[u8]) {
        {
            let mut q = self.ctl.lock();
            if q.close_queued || q.frames.len() + payload.len() + 2 > MAX_CTL_QUEUE {
                return;
            }
            proto::encode_header(&mut q.frames, proto::OP_PONG, false, payload.len());
            q.frames.extend_from_slice(payload);
        }
        self.wake();
    }

    fn queue_close(&self, code: u16, reason: &str) {
        let mut q = self.ctl.lock();
        if q.close_queued {
            return;
        }
        q.close_queued = true;
        proto::encode_close(&mut q.frames, code, reason);
    }

    fn wake(&self) {
        let c = self
            .client
            .lock()
            .as_ref()
            .and_then(std::sync::Weak::upgrade);
        if let Some(c) = c {
            c.wake_writer();
        }
    }
}

/// Where the decoder is within the frame stream.
enum RState {
    /// Waiting for a frame header.
    Header,
    /// Inside an uncompressed data frame: bytes go straight to the reader.
    Data {
        remaining: u64,
        mask: Option<[u8; 4]>,
        pos: usize,
    },
    /// Inside a frame of a compressed message: bytes collect in `zbuf`.
    Compressed {
        remaining: u64,
        mask: Option<[u8; 4]>,
        pos: usize,
        fin: bool,
    },
    /// Closed (peer close, or a violation): reads return end of stream.
    Done,
}

/// The read half: frames in, NATS protocol bytes out.
pub(crate) struct WsRead<R> {
    inner: R,
    shared: Arc<WsShared>,
    raw: BytesMut,
    state: RState,
    /// A data message is in progress (a non-FIN frame was seen).
    in_message: bool,
    /// The message in progress is compressed (RSV1 on its first frame).
    msg_compressed: bool,
    compression: bool,
    mask_required: bool,
    max_frame: u64,
    max_payload: usize,
    max_compressed: usize,
    zbuf: BytesMut,
    /// Inflated bytes not yet handed to the reader.
    out: BytesMut,
}

impl<R: AsyncRead + Unpin> WsRead<R> {
    fn new(
        inner: R,
        shared: Arc<WsShared>,
        compression: bool,
        mask_required: bool,
        max_payload: u64,
    ) -> Self {
        let mp = usize::try_from(max_payload).unwrap_or(usize::MAX);
        WsRead {
            inner,
            shared,
            raw: BytesMut::with_capacity(READ_CHUNK),
            state: RState::Header,
            in_message: false,
            msg_compressed: false,
            compression,
            mask_required,
            max_frame: max_payload.saturating_add(FRAME_OVERHEAD),
            max_payload: mp,
            max_compressed: mp.saturating_mul(8).min(64 * 1024 * 1024),
            zbuf: BytesMut::new(),
            out: BytesMut::new(),
        }
    }

    fn fail(&mut self, e: FrameError) -> io::Error {
        self.shared.queue_close(e.code, e.reason);
        self.state = RState::Done;
        io::Error::new(io::ErrorKind::InvalidData, e)
    }

    /// Handles a header found at the start of `raw`. Returns false when a
    /// control frame's payload is not all buffered yet.
    fn start_frame(&mut self, h: FrameHeader) -> Result<bool, FrameError> {
        if h.is_control() {
            let total = h.header_len + h.len as usize;
            if self.raw.len() < total {
                return Ok(false);
            }
            let mut payload = self.raw.split_to(total);
            payload.advance(h.header_len);
            if let Some(m) = h.mask {
                proto::unmask(&mut payload, m, 0);
            }
            match h.opcode {
                proto::OP_PING => self.shared.queue_pong(&payload),
                proto::OP_CLOSE => {
                    let status = proto::check_close_payload(&payload)?;
                    self.shared.queue_close(status, "");
                    self.state = RState::Done;
                }
                _ => {} // pong: nothing to do
            }
            return Ok(true);
        }
        self.raw.advance(h.header_len);
        if h.opcode == proto::OP_CONT {
            if !self.in_message || h.rsv1 {
                return Err(FrameError {
                    code: code::PROTOCOL,
                    reason: "invalid continuation frame",
                });
            }
        } else {
            if self.in_message {
                return Err(FrameError {
                    code: code::PROTOCOL,
                    reason:
                        "new message started before final frame for previous message was received",
                });
            }
            self.msg_compressed = h.rsv1;
            self.zbuf.clear();
        }
        self.in_message = !h.fin;
        if self.msg_compressed {
            if self.zbuf.len() as u64 + h.len > self.max_compressed as u64 {
                return Err(TOO_BIG);
            }
            self.state = RState::Compressed {
                remaining: h.len,
                mask: h.mask,
                pos: 0,
                fin: h.fin,
            };
        } else {
            if h.len > self.max_frame {
                return Err(TOO_BIG);
            }
            self.state = RState::Data {
                remaining: h.len,
                mask: h.mask,
                pos: 0,
            };
        }
        Ok(true)
    }
}

const TOO_BIG: FrameError = FrameError {
    code: code::TOO_BIG,
    reason: "maximum payload exceeded",
};

impl<R: AsyncRead + Unpin> AsyncRead for WsRead<R> {
    /// Hands over the payload of every frame already buffered (not just
    /// one frame's), so a burst of small frames reaches the NATS reader as
    /// one batch: one parse pass and one flush to the receivers, as over
    /// TCP. The socket is read only when nothing has been produced yet.
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        let start_len = dst.filled().len();
        loop {
            let produced = dst.filled().len() > start_len;
            if dst.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            if !me.out.is_empty() {
                let n = me.out.len().min(dst.remaining());
                dst.put_slice(&me.out[..n]);
                me.out.advance(n);
                continue;
            }
            match &mut me.state {
                // End of stream (after any data produced in this call).
                RState::Done => return Poll::Ready(Ok(())),
                RState::Data {
                    remaining,
                    mask,
                    pos,
                } => {
                    if *remaining == 0 {
                        me.state = RState::Header;
                        continue;
                    }
                    if !me.raw.is_empty() {
                        let n = (*remaining)
                            .min(me.raw.len() as u64)
                            .min(dst.remaining() as u64) as usize;
                        let start = dst.filled().len();
                        dst.put_slice(&me.raw[..n]);
                        me.raw.advance(n);
                        if let Some(m) = mask {
                            *pos = proto::unmask(&mut dst.filled_mut()[start..], *m, *pos);
                        }
                        *remaining -= n as u64;
                        if *remaining == 0 {
                            me.state = RState::Header;
                        }
                        continue;
                    }
                }
                RState::Compressed {
                    remaining,
                    mask,
                    pos,
                    fin,
                } => {
                    if *remaining > 0 && !me.raw.is_empty() {
                        let n = (*remaining).min(me.raw.len() as u64) as usize;
                        let start = me.zbuf.len();
                        me.zbuf.extend_from_slice(&me.raw[..n]);
                        me.raw.advance(n);
                        if let Some(m) = mask {
                            *pos = proto::unmask(&mut me.zbuf[start..], *m, *pos);
                        }
                        *remaining -= n as u64;
                    }
                    if *remaining == 0 {
                        let fin = *fin;
                        me.state = RState::Header;
                        if fin {
                            let z = std::mem::take(&mut me.zbuf);
                            if let Err(e) = proto::inflate_message(&z, me.max_payload, &mut me.out)
                            {
                                // Data already produced goes first; the
                                // next call sees Done (end of stream).
                                let err = me.fail(e);
                                return Poll::Ready(if produced { Ok(()) } else { Err(err) });
                            }
                        }
                        continue;
                    }
                }
                RState::Header => {
                    let step = match proto::parse_header(&me.raw, me.compression, me.mask_required)
                    {
                        Err(e) => Err(e),
                        Ok(Some(h)) => me.start_frame(h),
                        Ok(None) => Ok(false),
                    };
                    match step {
                        Err(e) => {
                            let err = me.fail(e);
                            return Poll::Ready(if produced { Ok(()) } else { Err(err) });
                        }
                        Ok(true) => continue,
                        Ok(false) => {}
                    }
                }
            }
            // More raw bytes are needed: hand over what we have first.
            if produced {
                return Poll::Ready(Ok(()));
            }
            if me.raw.capacity() - me.raw.len() < 4096 {
                me.raw.reserve(READ_CHUNK);
            }
            let n = ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut me.inner),
                cx,
                &mut me.raw
            ))?;
            if n == 0 {
                // End of stream without a close frame.
                me.state = RState::Done;
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// The write half: NATS protocol bytes in, unmasked binary frames out.
pub(crate) struct WsWrite<W> {
    inner: W,
    shared: Arc<WsShared>,
    /// Encoded frames not yet written to `inner` (at most one data frame
    /// plus queued control frames: a new chunk is taken only when empty).
    pending: BytesMut,
    deflate: Option<(flate2::Compress, Vec<u8>)>,
    /// The last bytes of NATS output, to find the `-ERR` a connection was
    /// closed with.
    tail: Vec<u8>,
    /// Our close frame has been moved to `pending`.
    close_sent: bool,
}

/// NATS output bytes remembered for the close reason.
const TAIL_KEEP: usize = 160;

impl<W: AsyncWrite + Unpin> WsWrite<W> {
    fn new(inner: W, shared: Arc<WsShared>, compress: bool) -> Self {
        WsWrite {
            inner,
            shared,
            pending: BytesMut::with_capacity(4096),
            deflate: compress.then(|| {
                (
                    flate2::Compress::new(flate2::Compression::fast(), false),
                    Vec::new(),
                )
            }),
            tail: Vec::with_capacity(TAIL_KEEP),
            close_sent: false,
        }
    }

    /// Moves queued control frames behind whatever is pending.
    fn take_ctl(&mut self) {
        let mut q = self.shared.ctl.lock();
        if !q.frames.is_empty() {
            if self.shared.mask {
                self.pending
                    .extend_from_slice(&proto::mask_frames(&q.frames, rand::random()));
            } else {
                self.pending.extend_from_slice(&q.frames);
            }
            q.frames.clear();
            if q.close_queued {
                self.close_sent = true;
            }
        }
    }

    /// Writes `pending` out; Ready(Ok) once it is empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.pending.advance(n);
        }
        Poll::Ready(Ok(()))
    }

    fn remember_tail(&mut self, data: &[u8]) {
        if data.len() >= TAIL_KEEP {
            self.tail.clear();
            self.tail.extend_from_slice(&data[data.len() - TAIL_KEEP..]);
        } else {
            self.tail.extend_from_slice(data);
            if self.tail.len() > TAIL_KEEP {
                let cut = self.tail.len() - TAIL_KEEP;
                self.tail.drain(..cut);
            }
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for WsWrite<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        me.take_ctl();
        ready!(me.poll_drain(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if me.close_sent {
            // Nothing may follow a close frame.
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        me.remember_tail(buf);
        let mask = me.shared.mask;
        match &mut me.deflate {
            Some((c, z)) if buf.len() > COMPRESS_MIN => {
                proto::deflate_message(c, buf, z);
                if mask {
                    proto::encode_masked(
                        &mut me.pending,
                        proto::OP_BINARY,
                        true,
                        z,
                        rand::random(),
                    );
                } else {
                    proto::encode_header(&mut me.pending, proto::OP_BINARY, true, z.len());
                    me.pending.extend_from_slice(z);
                }
            }
            _ if mask => {
                // A client frame's payload is masked: always a copy.
                proto::encode_masked(
                    &mut me.pending,
                    proto::OP_BINARY,
                    false,
                    buf,
                    rand::random(),
                );
            }
            _ => {
                // Header and payload in one vectored write, without copying
                // the payload; only what the socket did not take is kept.
                let mut hdr = [0u8; 10];
                let hlen = {
                    let mut h = &mut hdr[..];
                    let before = h.len();
                    proto::encode_header_into(&mut h, proto::OP_BINARY, false, buf.len());
                    before - h.len()
                };
                let bufs = [io::IoSlice::new(&hdr[..hlen]), io::IoSlice::new(buf)];
                let written = match Pin::new(&mut me.inner).poll_write_vectored(cx, &bufs) {
                    Poll::Ready(Ok(n)) => n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => 0,
                };
                if written < hlen {
                    me.pending.extend_from_slice(&hdr[written..hlen]);
                    me.pending.extend_from_slice(buf);
                } else {
                    me.pending
                        .extend_from_slice(&buf[(written - hlen).min(buf.len())..]);
                }
                return Poll::Ready(Ok(buf.len()));
            }
        }
        // Start writing now; the bytes are ours either way (a failure shows
        // on the next call or on flush).
        if let Poll::Ready(Err(e)) = me.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        me.take_ctl();
        ready!(me.poll_drain(cx))?;
        Pin::new(&mut me.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if !me.close_sent {
            let (status, reason) = match proto::last_err_text(&me.tail) {
                Some(t) => (proto::close_code_for_err(&t), t),
                None => (code::GOING_AWAY, "Server Shutdown".to_string()),
            };
            me.shared.queue_close(status, &reason);
        }
        me.take_ctl();
        ready!(me.poll_drain(cx))?;
        ready!(Pin::new(&mut me.inner).poll_flush(cx))?;
        Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn masked(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
        let key = [0x37, 0xfa, 0x21, 0x3d];
        let mut f = vec![
            if fin { 0x80 } else { 0 } | opcode,
            0x80 | payload.len() as u8,
        ];
        f.extend_from_slice(&key);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        f
    }

    async fn read_once(input: Vec<u8>) -> (io::Result<Vec<u8>>, Arc<WsShared>) {
        let shared = Arc::new(WsShared::default());
        let mut r = WsRead::new(&input[..], shared.clone(), false, true, 1024);
        let mut buf = vec![0u8; 4096];
        let res = r.read(&mut buf).await.map(|n| buf[..n].to_vec());
        (res, shared)
    }

    #[tokio::test]
    async fn buffered_frames_come_out_in_one_read() {
        let mut input = Vec::new();
        for i in 0..50 {
            input.extend(masked(
                2,
                true,
                format!("PUB a 1\r\n{}\r\n", i % 10).as_bytes(),
            ));
        }
        input.extend(masked(9, true, b"p"));
        input.extend(masked(2, false, b"PI"));
        input.extend(masked(0, true, b"NG\r\n"));
        let (out, shared) = read_once(input).await;
        let out = out.unwrap();
        assert!(out.starts_with(b"PUB a 1\r\n0\r\n") && out.ends_with(b"9\r\nPING\r\n"));
        assert_eq!(out.len(), 50 * 12 + 6);
        let q = shared.ctl.lock();
        assert_eq!(&q.frames[..], &[0x8a, 1, b'p'], "the ping's pong is queued");
    }

    #[tokio::test]
    async fn data_before_a_violation_is_delivered_then_the_stream_ends() {
        let mut input = masked(2, true, b"PING\r\n");
        input.extend_from_slice(&[0x82, 0x01, b'x']); // unmasked
        let shared = Arc::new(WsShared::default());
        let mut r = WsRead::new(&input[..], shared.clone(), false, true, 1024);
        let mut buf = vec![0u8; 64];
        let n = r.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"PING\r\n");
        assert_eq!(r.read(&mut buf).await.unwrap(), 0, "then end of stream");
        let q = shared.ctl.lock();
        assert!(q.close_queued);
        assert_eq!(&q.frames[2..4], &1002u16.to_be_bytes());
    }

    #[tokio::test]
    async fn frames_survive_short_writes() {
        // A pipe that takes a few bytes at a time: header and payload are
        // split at every kind of boundary.
        let (a, mut b) = tokio::io::duplex(7);
        let shared = Arc::new(WsShared::default());
        let mut w = WsWrite::new(a, shared, false);
        let payloads: Vec<Vec<u8>> = [3usize, 125, 126, 300, 70_000]
            .iter()
            .map(|&n| (0..n).map(|i| (i % 251) as u8).collect())
            .collect();
        let expect = payloads.clone();
        let writer = tokio::spawn(async move {
            for p in &payloads {
                w.write_all(p).await.unwrap();
            }
            w.flush().await.unwrap();
            drop(w);
        });
        let mut all = Vec::new();
        b.read_to_end(&mut all).await.unwrap();
        writer.await.unwrap();
        let mut pos = 0;
        for p in expect {
            let h = proto::parse_header(&all[pos..], false, false)
                .unwrap()
                .unwrap();
            assert!(h.fin && h.opcode == proto::OP_BINARY && h.mask.is_none());
            assert_eq!(h.len as usize, p.len());
            pos += h.header_len;
            assert_eq!(&all[pos..pos + p.len()], &p[..]);
            pos += p.len();
        }
        assert_eq!(pos, all.len());
    }

    #[tokio::test]
    async fn oversized_frame_is_refused_from_its_header() {
        let mut input = vec![0x82, 0xff];
        input.extend_from_slice(&(1024 + FRAME_OVERHEAD + 1).to_be_bytes());
        input.extend_from_slice(&[0; 4]);
        let (out, shared) = read_once(input).await;
        assert!(out.is_err());
        assert_eq!(&shared.ctl.lock().frames[2..4], &1009u16.to_be_bytes());
    }

    /// A leaf's writer masks (and deflates) what a hub's reader, which
    /// requires masks, reads back intact.
    #[tokio::test]
    async fn client_writer_frames_read_back_on_the_server_side() {
        for compress in [false, true] {
            let (a, b) = tokio::io::duplex(1 << 20);
            let client = Arc::new(WsShared {
                mask: true,
                ..WsShared::default()
            });
            let mut w = WsWrite::new(a, client.clone(), compress);
            client.queue_pong(b"p");
            let msgs: Vec<Vec<u8>> = vec![
                b"CONNECT {}\r\n".to_vec(),
                b"LMSG a 5\r\nhello\r\n".repeat(300),
                (0..70_000u32).map(|i| (i % 251) as u8).collect(),
            ];
            for m in &msgs {
                w.write_all(m).await.unwrap();
            }
            w.flush().await.unwrap();
            drop(w);
            let server = Arc::new(WsShared::default());
            let mut r = WsRead::new(b, server, compress, true, 1 << 20);
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, msgs.concat(), "compress={compress}");
        }
    }
}
