//! WebSocket wire format, without I/O: the HTTP/1.1 upgrade request check
//! and answer (RFC 6455 §4, with nats-server's statuses and reasons), frame
//! headers (§5.2), close payloads (§5.5.1, §7.4) and the per-message
//! deflate helpers (RFC 7692, no context takeover in either direction).
//!
//! Everything here takes bytes and returns values or errors; nothing
//! panics on input. The I/O side (`super`) feeds it.

use base64::Engine;
use bytes::{BufMut, BytesMut};
use thiserror::Error;

use crate::config::nats::{split_host_port, WebsocketOptions};

/// The GUID of RFC 6455 §1.3, appended to the key before hashing.
const WS_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Frame opcodes.
pub const OP_CONT: u8 = 0;
/// Text frame (treated as binary, as nats-server does).
pub const OP_TEXT: u8 = 1;
/// Binary frame.
pub const OP_BINARY: u8 = 2;
/// Close.
pub const OP_CLOSE: u8 = 8;
/// Ping.
pub const OP_PING: u8 = 9;
/// Pong.
pub const OP_PONG: u8 = 10;

/// Close status codes the server sends (RFC 6455 §7.4.1).
pub mod code {
    /// Normal closure.
    pub const NORMAL: u16 = 1000;
    /// Going away: shutdown, stale connection, read/write failure.
    pub const GOING_AWAY: u16 = 1001;
    /// Protocol error.
    pub const PROTOCOL: u16 = 1002;
    /// No status in the peer's close frame (never sent on the wire).
    pub const NO_STATUS: u16 = 1005;
    /// Invalid payload data (a close reason that is not UTF-8).
    pub const INVALID_PAYLOAD: u16 = 1007;
    /// Policy violation: authorization, limits, slow consumer.
    pub const POLICY: u16 = 1008;
    /// Message too big.
    pub const TOO_BIG: u16 = 1009;
    /// Unexpected condition.
    pub const INTERNAL: u16 = 1011;
}

/// Largest control frame payload (RFC 6455 §5.5).
pub const MAX_CONTROL_PAYLOAD: usize = 125;

/// Tail a deflate sync flush ends with; stripped on send, re-added on
/// receive (RFC 7692 §7.2.1, §7.2.2).
pub const DEFLATE_TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// The extension answer when compression is negotiated (nats-server's text).
pub const DEFLATE_RESPONSE: &str =
    "permessage-deflate; server_no_context_takeover; client_no_context_takeover";

/// A refused upgrade: the HTTP status and nats-server's reason text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("websocket handshake error: {reason}")]
pub struct HandshakeError {
    /// HTTP status to answer with.
    pub status: u16,
    /// Logged reason (as nats-server words it).
    pub reason: String,
}

fn refuse(status: u16, reason: impl Into<String>) -> HandshakeError {
    HandshakeError {
        status,
        reason: reason.into(),
    }
}

/// An accepted upgrade request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upgrade {
    /// `Sec-WebSocket-Accept` value.
    pub accept: String,
    /// permessage-deflate was asked for and is enabled.
    pub compress: bool,
    /// The client asked for unmasked frames (`Nats-No-Masking: true`).
    pub no_masking: bool,
    /// First `X-Forwarded-For` address, when it parses as an IP.
    pub forwarded_ip: Option<std::net::IpAddr>,
    /// The request path (any path is accepted).
    pub path: String,
    /// Credentials from the cookies the options name.
    pub cookies: WsCookies,
    /// The configured extra headers of the answer.
    pub headers: Vec<(String, String)>,
}

/// Credentials a WebSocket client brought in cookies (`jwt_cookie`,
/// `user_cookie`, `pass_cookie`, `token_cookie`), for a CONNECT that
/// carries none of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WsCookies {
    pub jwt: Option<String>,
    pub user: Option<String>,
    pub pass: Option<String>,
    pub token: Option<String>,
}

impl WsCookies {
    /// Whether no credential came in a cookie.
    pub fn is_empty(&self) -> bool {
        self.jwt.is_none() && self.user.is_none() && self.pass.is_none() && self.token.is_none()
    }
}

/// The cookies of `Cookie` header values (`a=1; b="2"`), as Go's
/// `Request.Cookies` reads them: pairs split on `;`, values unquoted;
/// pairs without `=` skipped.
pub fn parse_cookies<'a>(values: impl Iterator<Item = &'a str>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for v in values {
        for part in v.split(';') {
            let Some((name, value)) = part.trim().split_once('=') else {
                continue;
            };
            let name = name.trim();
            if name.is_empty() {
                continue;
            }
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            out.push((name.to_string(), value.to_string()));
        }
    }
    out
}

/// Whether `head` (bytes read so far) holds a complete request head;
/// returns its length including the blank line.
pub fn head_len(head: &[u8]) -> Option<usize> {
    memchr::memmem::find(head, b"\r\n\r\n").map(|i| i + 4)
}

/// Every value of a (possibly repeated) header.
fn header_values<'a, 'h: 'a>(
    headers: &'a [httparse::Header<'h>],
    name: &'a str,
) -> impl Iterator<Item = &'h str> + 'a {
    headers
        .iter()
        .filter(move |h| h.name.eq_ignore_ascii_case(name))
        .filter_map(|h| std::str::from_utf8(h.value).ok())
}

/// The first value of a header, trimmed.
fn header<'h>(headers: &[httparse::Header<'h>], name: &str) -> Option<&'h str> {
    header_values(headers, name).next().map(str::trim)
}

/// Every value of a (possibly repeated) header, split on `sep`, trimmed
/// and lower-cased.
fn header_tokens(headers: &[httparse::Header<'_>], name: &str, sep: char) -> Vec<String> {
    header_values(headers, name)
        .flat_map(|v| v.split(sep))
        .map(|t| t.trim().to_ascii_lowercase())
        .collect()
}

/// Checks an upgrade request head (`head` = bytes up to and including the
/// blank line) against the options, in nats-server's order.
pub fn check_upgrade(
    head: &[u8],
    opts: &WebsocketOptions,
    tls: bool,
) -> Result<Upgrade, HandshakeError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(refuse(400, "incomplete request")),
        Err(e) => return Err(refuse(400, format!("malformed request: {e}"))),
    }
    if req.method != Some("GET") {
        return Err(refuse(405, "request method must be GET"));
    }
    let get = |name: &str| header(req.headers, name);
    let tokens = |name: &str| header_tokens(req.headers, name, ',');
    let host = match get("Host") {
        Some(h) if !h.is_empty() => h.to_string(),
        _ => return Err(refuse(400, "'Host' missing in request")),
    };
    if !tokens("Upgrade").iter().any(|t| t == "websocket") {
        return Err(refuse(400, "invalid value for header 'Upgrade'"));
    }
    if !tokens("Connection").iter().any(|t| t == "upgrade") {
        return Err(refuse(400, "invalid value for header 'Connection'"));
    }
    let key = match get("Sec-WebSocket-Key") {
        Some(k) if !k.is_empty() => k.to_string(),
        _ => return Err(refuse(400, "key missing")),
    };
    match base64::engine::general_purpose::STANDARD.decode(&key) {
        Ok(raw) if raw.len() == 16 => {}
        _ => return Err(refuse(400, "invalid websocket key")),
    }
    if !tokens("Sec-WebSocket-Version").iter().any(|t| t == "13") {
        return Err(refuse(400, "invalid version"));
    }
    if opts.same_origin || !opts.allowed_origins.is_empty() {
        let origin = get("Origin").or_else(|| get("Sec-WebSocket-Origin"));
        if let Some(origin) = origin.filter(|o| !o.is_empty()) {
            check_origin(origin, &host, tls, opts)?;
        }
    }
    let compress = opts.compression
        && tokens("Sec-WebSocket-Extensions")
            .iter()
            .any(|t| t.split(';').next().map(str::trim) == Some("permessage-deflate"));
    let no_masking = get("Nats-No-Masking").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let forwarded_ip = get("X-Forwarded-For")
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.trim().parse().ok());
    let path = req.path.unwrap_or("/").to_string();
    let mut cookies = WsCookies::default();
    // Leaves authenticate in CONNECT only.
    if !is_leaf_path(&path) {
        let names = &opts.cookies;
        for (name, value) in parse_cookies(header_values(req.headers, "Cookie")) {
            let slot = if name == names.jwt {
                &mut cookies.jwt
            } else if name == names.user {
                &mut cookies.user
            } else if name == names.pass {
                &mut cookies.pass
            } else if name == names.token {
                &mut cookies.token
            } else {
                continue;
            };
            *slot = Some(value);
        }
    }
    Ok(Upgrade {
        accept: accept_key(key.as_bytes()),
        compress,
        no_masking,
        forwarded_ip,
        path,
        cookies,
        headers: opts.headers.clone(),
    })
}

/// `Sec-WebSocket-Accept` for a client key: base64(SHA-1(key + GUID)).
pub fn accept_key(key: &[u8]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key);
    ctx.update(WS_GUID);
    base64::engine::general_purpose::STANDARD.encode(ctx.finish().as_ref())
}

fn check_origin(
    origin: &str,
    host: &str,
    tls: bool,
    opts: &WebsocketOptions,
) -> Result<(), HandshakeError> {
    let Ok(o) = crate::config::nats::parse_ws_origin(origin) else {
        // An origin that is not an http(s) URL matches nothing.
        let why = if opts.same_origin {
            "origin not allowed: not same origin"
        } else {
            "origin not allowed: not in the allowed list"
        };
        return Err(refuse(403, why));
    };
    if opts.same_origin {
        let scheme = if tls { "https" } else { "http" };
        let (h, p) = split_host_port(host).unwrap_or((host, None));
        let p = p.unwrap_or(if tls { 443 } else { 80 });
        if o.scheme != scheme || o.host != h.to_ascii_lowercase() || o.port != p {
            return Err(refuse(403, "origin not allowed: not same origin"));
        }
    }
    if !opts.allowed_origins.is_empty()
        && !opts
            .allowed_origins
            .iter()
            .any(|a| a.scheme == o.scheme && a.host == o.host && a.port == o.port)
    {
        return Err(refuse(403, "origin not allowed: not in the allowed list"));
    }
    Ok(())
}

/// The `101 Switching Protocols` answer.
pub fn switching_response(up: &Upgrade) -> String {
    let mut s = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n",
        up.accept
    );
    if up.compress {
        s.push_str("Sec-WebSocket-Extensions: ");
        s.push_str(DEFLATE_RESPONSE);
        s.push_str("\r\n");
    }
    if up.no_masking {
        s.push_str("Nats-No-Masking: true\r\n");
    }
    for (k, v) in &up.headers {
        s.push_str(k);
        s.push_str(": ");
        s.push_str(v);
        s.push_str("\r\n");
    }
    s.push_str("\r\n");
    s
}

/// The path a leaf asks a hub's WebSocket listener for: a leaf
/// connection, not a client (`<url path>/leafnode`).
pub const LEAF_PATH: &str = "/leafnode";

/// Whether an upgrade request's path asks for a leaf connection.
pub fn is_leaf_path(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    path.ends_with(LEAF_PATH)
}

/// The upgrade request a leaf sends a hub: `GET <path>/leafnode` with the
/// base64 `key`, asking for permessage-deflate and for unmasked frames
/// when configured to.
pub fn leaf_request(host: &str, path: &str, key: &str, compress: bool, no_masking: bool) -> String {
    let path = path.trim_end_matches('/');
    let mut s = format!(
        "GET {path}{LEAF_PATH} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
    );
    if compress {
        s.push_str("Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n");
    }
    if no_masking {
        s.push_str("Nats-No-Masking: true\r\n");
    }
    s.push_str("\r\n");
    s
}

/// What a hub agreed to in its `101` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agreed {
    /// Messages may be compressed both ways.
    pub compress: bool,
    /// Our frames need no mask.
    pub no_masking: bool,
}

/// Checks a hub's answer (`head` = up to and including the blank line) to
/// [`leaf_request`] with `key`, as nats-server's leaf does: a `101` with
/// the upgrade headers and the matching accept key; compression only when
/// the hub agreed to it without context takeover, no masking only when
/// the hub said so.
pub fn check_leaf_response(
    head: &[u8],
    key: &str,
    compress: bool,
    no_masking: bool,
) -> Result<Agreed, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("incomplete response".into()),
        Err(e) => return Err(format!("malformed response: {e}")),
    }
    let get = |name: &str| header(resp.headers, name);
    if resp.code != Some(101)
        || !get("Upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
        || !get("Connection").is_some_and(|v| v.eq_ignore_ascii_case("upgrade"))
        || get("Sec-WebSocket-Accept") != Some(accept_key(key.as_bytes()).as_str())
    {
        return Err(format!(
            "invalid websocket connection (status {})",
            resp.code.unwrap_or(0)
        ));
    }
    let mut agreed = Agreed {
        compress: false,
        no_masking: no_masking
            && get("Nats-No-Masking").is_some_and(|v| v.eq_ignore_ascii_case("true")),
    };
    if compress {
        let ext = header_tokens(resp.headers, "Sec-WebSocket-Extensions", ';');
        if ext.iter().any(|t| t == "permessage-deflate") {
            if !ext.iter().any(|t| t == "server_no_context_takeover")
                || !ext.iter().any(|t| t == "client_no_context_takeover")
            {
                return Err("compression negotiation error".into());
            }
            agreed.compress = true;
        }
    }
    Ok(agreed)
}

/// Appends a whole client frame (FIN set, masked with `key`): header, key
/// and the masked `payload`.
pub fn encode_masked(out: &mut BytesMut, opcode: u8, rsv1: bool, payload: &[u8], key: [u8; 4]) {
    let start = out.len();
    encode_header_into(out, opcode, rsv1, payload.len());
    out[start + 1] |= 0x80;
    out.put_slice(&key);
    let from = out.len();
    out.put_slice(payload);
    unmask(&mut out[from..], key, 0);
}

/// Re-encodes the unmasked frames in `frames` (as [`encode_header`] and
/// [`encode_close`] write them) as client frames masked with `key`.
pub fn mask_frames(frames: &[u8], key: [u8; 4]) -> BytesMut {
    let mut out = BytesMut::with_capacity(frames.len() + 16);
    let mut rest = frames;
    while let Ok(Some(h)) = parse_header(rest, true, false) {
        let end = h.header_len + h.len as usize;
        if rest.len() < end {
            break;
        }
        encode_masked(&mut out, h.opcode, h.rsv1, &rest[h.header_len..end], key);
        rest = &rest[end..];
    }
    out
}

/// The answer to a refused upgrade: the status line and text body, with
/// `Sec-Websocket-Version: 13`, as Go's `http.Error` writes it.
pub fn error_response(status: u16) -> String {
    let text = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Internal Server Error",
    };
    format!(
        "HTTP/1.1 {status} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nSec-Websocket-Version: 13\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}\n",
        text.len() + 1
    )
}

/// A frame-level protocol violation: the close code to answer with and
/// nats-server's reason text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("websocket {reason} (close {code})")]
pub struct FrameError {
    /// Close status to send.
    pub code: u16,
    /// Reason, also the close frame's text.
    pub reason: &'static str,
}

const fn violation(reason: &'static str) -> FrameError {
    FrameError {
        code: code::PROTOCOL,
        reason,
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// FIN bit.
    pub fin: bool,
    /// RSV1 (compressed message).
    pub rsv1: bool,
    /// Opcode.
    pub opcode: u8,
    /// Masking key, when the mask bit is set.
    pub mask: Option<[u8; 4]>,
    /// Payload length.
    pub len: u64,
    /// Header length in bytes.
    pub header_len: usize,
}

impl FrameHeader {
    /// Whether this is a control frame (close, ping, pong).
    pub fn is_control(&self) -> bool {
        self.opcode & 0x8 != 0
    }
}

/// Parses a frame header from the start of `b`: `Ok(None)` when more bytes
/// are needed. Checks what can be checked without connection state
/// (reserved bits, mask, lengths, control frame rules, opcodes).
pub fn parse_header(
    b: &[u8],
    compression: bool,
    mask_required: bool,
) -> Result<Option<FrameHeader>, FrameError> {
    if b.len() < 2 {
        return Ok(None);
    }
    let fin = b[0] & 0x80 != 0;
    let rsv1 = b[0] & 0x40 != 0;
    if b[0] & 0x30 != 0 {
        return Err(violation("RSV2 and RSV3 must be clear"));
    }
    let opcode = b[0] & 0x0f;
    if !matches!(
        opcode,
        OP_CONT | OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG
    ) {
        return Err(FrameError {
            code: code::PROTOCOL,
            reason: unknown_opcode_text(opcode),
        });
    }
    if rsv1 && !compression {
        return Err(violation(
            "compressed frame received without negotiated permessage-deflate",
        ));
    }
    let masked = b[1] & 0x80 != 0;
    if !masked && mask_required {
        return Err(violation("mask bit missing"));
    }
    let (len, mut pos) = match b[1] & 0x7f {
        126 => {
            if b.len() < 4 {
                return Ok(None);
            }
            (u64::from(u16::from_be_bytes([b[2], b[3]])), 4)
        }
        127 => {
            if b.len() < 10 {
                return Ok(None);
            }
            let mut l = [0u8; 8];
            l.copy_from_slice(&b[2..10]);
            let l = u64::from_be_bytes(l);
            if l >> 63 != 0 {
                return Err(violation("invalid 64-bit payload length"));
            }
            (l, 10)
        }
        l => (u64::from(l), 2),
    };
    let mask = if masked {
        if b.len() < pos + 4 {
            return Ok(None);
        }
        let mut m = [0u8; 4];
        m.copy_from_slice(&b[pos..pos + 4]);
        pos += 4;
        Some(m)
    } else {
        None
    };
    let h = FrameHeader {
        fin,
        rsv1,
        opcode,
        mask,
        len,
        header_len: pos,
    };
    if h.is_control() {
        if len > MAX_CONTROL_PAYLOAD as u64 {
            return Err(violation(
                "control frame length bigger than maximum allowed of 125 bytes",
            ));
        }
        if !fin {
            return Err(violation("control frame does not have final bit set"));
        }
        if rsv1 {
            return Err(violation("control frame must not be compressed"));
        }
    }
    Ok(Some(h))
}

fn unknown_opcode_text(op: u8) -> &'static str {
    // Static texts so the error stays allocation-free.
    const T: [&str; 16] = [
        "unknown opcode 0",
        "unknown opcode 1",
        "unknown opcode 2",
        "unknown opcode 3",
        "unknown opcode 4",
        "unknown opcode 5",
        "unknown opcode 6",
        "unknown opcode 7",
        "unknown opcode 8",
        "unknown opcode 9",
        "unknown opcode 10",
        "unknown opcode 11",
        "unknown opcode 12",
        "unknown opcode 13",
        "unknown opcode 14",
        "unknown opcode 15",
    ];
    T[usize::from(op & 0x0f)]
}

/// XORs `data` with `mask`, starting at mask position `pos`; returns the
/// next position.
pub fn unmask(data: &mut [u8], mask: [u8; 4], pos: usize) -> usize {
    let mut p = pos & 3;
    // Rotate the key so the word-wise loop starts aligned with `p`.
    let key = u32::from_ne_bytes([
        mask[p],
        mask[(p + 1) & 3],
        mask[(p + 2) & 3],
        mask[(p + 3) & 3],
    ]);
    let mut chunks = data.chunks_exact_mut(4);
    for c in &mut chunks {
        let w = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]) ^ key;
        c.copy_from_slice(&w.to_ne_bytes());
    }
    for b in chunks.into_remainder() {
        *b ^= mask[p];
        p = (p + 1) & 3;
    }
    // Full words leave the position unchanged; the remainder advanced `p`.
    p
}

/// Appends a server frame header (FIN set, unmasked).
pub fn encode_header(out: &mut BytesMut, opcode: u8, rsv1: bool, len: usize) {
    encode_header_into(out, opcode, rsv1, len);
}

/// Writes a server frame header (at most 10 bytes) into any buffer.
pub fn encode_header_into<B: BufMut>(out: &mut B, opcode: u8, rsv1: bool, len: usize) {
    let b0 = 0x80 | if rsv1 { 0x40 } else { 0 } | (opcode & 0x0f);
    out.put_u8(b0);
    if len < 126 {
        out.put_u8(len as u8);
    } else if len <= usize::from(u16::MAX) {
        out.put_u8(126);
        out.put_u16(len as u16);
    } else {
        out.put_u8(127);
        out.put_u64(len as u64);
    }
}

/// Appends a whole close frame with `code` and `reason` (truncated to 123
/// bytes with `...`, as nats-server does, on a character boundary).
pub fn encode_close(out: &mut BytesMut, code: u16, reason: &str) {
    if code == code::NO_STATUS {
        encode_header(out, OP_CLOSE, false, 0);
        return;
    }
    let max = MAX_CONTROL_PAYLOAD - 2;
    let mut text = reason.to_string();
    if text.len() > max {
        let mut cut = max - 3;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    encode_header(out, OP_CLOSE, false, 2 + text.len());
    out.put_u16(code);
    out.put_slice(text.as_bytes());
}

/// Checks a received close payload: `Ok(code)` (NO_STATUS when empty), or
/// the close to answer with when it is invalid.
pub fn check_close_payload(p: &[u8]) -> Result<u16, FrameError> {
    if p.is_empty() {
        return Ok(code::NO_STATUS);
    }
    if p.len() == 1 {
        return Err(violation("invalid close frame payload length"));
    }
    let c = u16::from_be_bytes([p[0], p[1]]);
    let valid = matches!(c, 1000..=4999) && !matches!(c, 1004..=1006) && !matches!(c, 1015..=2999);
    if !valid {
        return Err(violation("invalid close status code"));
    }
    if std::str::from_utf8(&p[2..]).is_err() {
        return Err(FrameError {
            code: code::INVALID_PAYLOAD,
            reason: "invalid utf8 body in close frame",
        });
    }
    Ok(c)
}

/// The close code for a connection the NATS layer ended with `-ERR
/// '<text>'` (nats-server's mapping from close reason to status).
pub fn close_code_for_err(text: &str) -> u16 {
    let t = text.to_ascii_lowercase();
    if t.contains("maximum payload") {
        code::TOO_BIG
    } else if t.contains("authorization")
        || t.contains("authentication")
        || t.contains("slow consumer")
        || t.contains("maximum connections")
        || t.contains("maximum subscriptions")
        || t.contains("maximum control line")
    {
        code::POLICY
    } else if t.contains("stale connection") {
        code::GOING_AWAY
    } else if t.contains("unknown protocol") || t.contains("invalid") || t.contains("parser") {
        code::PROTOCOL
    } else {
        code::INTERNAL
    }
}

/// Finds the text of the last `-ERR '<text>'` line in `tail`.
pub fn last_err_text(tail: &[u8]) -> Option<String> {
    let start = memchr::memmem::rfind(tail, b"-ERR '")? + 6;
    let rest = &tail[start..];
    let end = memchr::memchr(b'\'', rest)?;
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Inflates one compressed message (`data` without the deflate tail) into
/// `out`, refusing output beyond `max` bytes. A fresh inflater per message
/// (client_no_context_takeover).
pub fn inflate_message(data: &[u8], max: usize, out: &mut BytesMut) -> Result<(), FrameError> {
    const TOO_BIG: FrameError = FrameError {
        code: code::TOO_BIG,
        reason: "maximum payload exceeded",
    };
    const BAD: FrameError = FrameError {
        code: code::PROTOCOL,
        reason: "invalid compressed data",
    };
    let mut d = flate2::Decompress::new(false);
    let mut input: Vec<u8> = Vec::with_capacity(data.len() + 4);
    input.extend_from_slice(data);
    input.extend_from_slice(&DEFLATE_TAIL);
    let start = out.len();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let before_in = d.total_in();
        let before_out = d.total_out();
        let consumed = before_in as usize;
        let status = d
            .decompress(
                &input[consumed.min(input.len())..],
                &mut chunk,
                flate2::FlushDecompress::Sync,
            )
            .map_err(|_| BAD)?;
        let produced = (d.total_out() - before_out) as usize;
        if out.len() - start + produced > max {
            return Err(TOO_BIG);
        }
        out.extend_from_slice(&chunk[..produced]);
        let done_input = d.total_in() as usize >= input.len();
        if matches!(status, flate2::Status::StreamEnd) || (done_input && produced < chunk.len()) {
            return Ok(());
        }
        if produced == 0 && d.total_in() == before_in {
            // No progress with input left: corrupt stream.
            return Err(BAD);
        }
    }
}

/// Deflates one outgoing message into `out` (tail stripped), with a
/// compressor the caller resets per message (server_no_context_takeover).
pub fn deflate_message(c: &mut flate2::Compress, data: &[u8], out: &mut Vec<u8>) {
    c.reset();
    out.clear();
    out.reserve(data.len() / 2 + 64);
    let mut consumed = 0usize;
    loop {
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(1024));
        }
        let before = c.total_in();
        // compress_vec only fails on a corrupt stream state, which a
        // freshly reset compressor cannot have; stop rather than loop.
        if c.compress_vec(&data[consumed..], out, flate2::FlushCompress::Sync)
            .is_err()
        {
            break;
        }
        consumed += (c.total_in() - before) as usize;
        if consumed >= data.len() && out.capacity() > out.len() {
            break;
        }
    }
    if out.ends_with(&DEFLATE_TAIL) {
        out.truncate(out.len() - 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> WebsocketOptions {
        WebsocketOptions::default()
    }

    const REQ: &str = "GET / HTTP/1.1\r\nHost: localhost:8080\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";

    fn req(extra: &str) -> Vec<u8> {
        format!("{REQ}{extra}\r\n").into_bytes()
    }

    #[test]
    fn accept_key_matches_rfc_example() {
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn upgrade_checks_in_order() {
        let up = check_upgrade(&req(""), &opts(), false).unwrap();
        assert_eq!(up.accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert!(!up.compress);
        let post = REQ.replacen("GET", "POST", 1) + "\r\n";
        let e = check_upgrade(post.as_bytes(), &opts(), false).unwrap_err();
        assert_eq!(
            (e.status, e.reason.as_str()),
            (405, "request method must be GET")
        );
        let cases = [
            (
                "Upgrade: websocket",
                "Upgrade: h2c",
                "invalid value for header 'Upgrade'",
            ),
            (
                "keep-alive, Upgrade",
                "keep-alive",
                "invalid value for header 'Connection'",
            ),
            ("dGhlIHNhbXBsZSBub25jZQ==", "", "key missing"),
            (
                "dGhlIHNhbXBsZSBub25jZQ==",
                "c2hvcnQ=",
                "invalid websocket key",
            ),
            ("Version: 13", "Version: 8", "invalid version"),
            ("Host: localhost:8080\r\n", "", "'Host' missing in request"),
        ];
        for (from, to, reason) in cases {
            let r = REQ.replacen(from, to, 1) + "\r\n";
            let e = check_upgrade(r.as_bytes(), &opts(), false).unwrap_err();
            assert_eq!((e.status, e.reason.as_str()), (400, reason), "{from}");
        }
    }

    #[test]
    fn origins() {
        let mut o = opts();
        o.same_origin = true;
        assert!(
            check_upgrade(&req(""), &o, false).is_ok(),
            "no origin passes"
        );
        assert!(check_upgrade(&req("Origin: http://localhost:8080\r\n"), &o, false).is_ok());
        let e = check_upgrade(&req("Origin: http://other:8080\r\n"), &o, false).unwrap_err();
        assert_eq!(
            (e.status, e.reason.as_str()),
            (403, "origin not allowed: not same origin")
        );
        let e = check_upgrade(&req("Origin: https://localhost:8080\r\n"), &o, false).unwrap_err();
        assert_eq!(e.status, 403);
        let mut o = opts();
        o.allowed_origins =
            vec![crate::config::nats::parse_ws_origin("https://app.example.com").unwrap()];
        assert!(check_upgrade(&req("Origin: https://APP.example.com:443\r\n"), &o, false).is_ok());
        let e = check_upgrade(&req("Origin: http://app.example.com\r\n"), &o, false).unwrap_err();
        assert_eq!(e.reason, "origin not allowed: not in the allowed list");
    }

    #[test]
    fn compression_and_no_masking_negotiation() {
        let mut o = opts();
        let ext = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n";
        assert!(!check_upgrade(&req(ext), &o, false).unwrap().compress);
        o.compression = true;
        let up = check_upgrade(&req(ext), &o, false).unwrap();
        assert!(up.compress);
        let r = switching_response(&up);
        assert!(r.contains(DEFLATE_RESPONSE), "{r}");
        let up = check_upgrade(&req("Nats-No-Masking: true\r\n"), &o, false).unwrap();
        assert!(up.no_masking && switching_response(&up).contains("Nats-No-Masking: true"));
    }

    #[test]
    fn headers_and_violations() {
        let h = parse_header(&[0x82, 0x85, 1, 2, 3, 4], false, true)
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.opcode, h.len, h.header_len, h.mask),
            (2, 5, 6, Some([1, 2, 3, 4]))
        );
        assert_eq!(parse_header(&[0x82], false, true), Ok(None));
        assert_eq!(parse_header(&[0x82, 0xfe, 0], false, true), Ok(None));
        let e = |b: &[u8], c: bool| parse_header(b, c, true).unwrap_err().reason;
        assert_eq!(e(&[0x82, 0x05], false), "mask bit missing");
        assert!(parse_header(&[0x82, 0x05], false, false).unwrap().is_some());
        assert_eq!(
            e(&[0xa2, 0x80, 0, 0, 0, 0], false),
            "RSV2 and RSV3 must be clear"
        );
        assert_eq!(
            e(&[0xc2, 0x80, 0, 0, 0, 0], false),
            "compressed frame received without negotiated permessage-deflate"
        );
        assert_eq!(e(&[0x83, 0x80, 0, 0, 0, 0], false), "unknown opcode 3");
        assert_eq!(
            e(&[0x09, 0x80, 0, 0, 0, 0], false),
            "control frame does not have final bit set"
        );
        assert_eq!(
            e(&[0x89, 0xfe, 0, 126, 0, 0, 0, 0], false),
            "control frame length bigger than maximum allowed of 125 bytes"
        );
        let mut big = vec![0x82, 0xff];
        big.extend_from_slice(&(1u64 << 63).to_be_bytes());
        big.extend_from_slice(&[0; 4]);
        assert_eq!(e(&big, false), "invalid 64-bit payload length");
    }

    #[test]
    fn unmask_any_offset() {
        let mask = [0x11, 0x22, 0x33, 0x44];
        let plain: Vec<u8> = (0..37u8).collect();
        let masked: Vec<u8> = plain
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ mask[i % 4])
            .collect();
        for split in 0..plain.len() {
            let mut m = masked.clone();
            let (a, b) = m.split_at_mut(split);
            let p = unmask(a, mask, 0);
            unmask(b, mask, p);
            assert_eq!(m, plain, "split {split}");
        }
    }

    #[test]
    fn close_payloads() {
        assert_eq!(check_close_payload(&[]), Ok(code::NO_STATUS));
        assert_eq!(check_close_payload(&[0x03, 0xe8, b'o', b'k']), Ok(1000));
        assert!(check_close_payload(&[3]).is_err());
        assert!(check_close_payload(&1005u16.to_be_bytes()).is_err());
        assert!(check_close_payload(&2000u16.to_be_bytes()).is_err());
        assert_eq!(
            check_close_payload(&[0x03, 0xe8, 0xff]).unwrap_err().code,
            1007
        );
        let mut b = BytesMut::new();
        encode_close(&mut b, 1008, &"é".repeat(100));
        assert!(b.len() - 2 <= 125 && b.ends_with(b"..."));
        assert_eq!(close_code_for_err("Authorization Violation"), 1008);
        assert_eq!(close_code_for_err("Maximum Payload Violation"), 1009);
        assert_eq!(
            last_err_text(b"+OK\r\n-ERR 'Stale Connection'\r\n").as_deref(),
            Some("Stale Connection")
        );
    }

    #[test]
    fn deflate_round_trip_and_cap() {
        let mut c = flate2::Compress::new(flate2::Compression::fast(), false);
        let data = b"PUB foo 11\r\nhello world\r\n".repeat(200);
        let mut z = Vec::new();
        deflate_message(&mut c, &data, &mut z);
        assert!(z.len() < data.len() / 4 && !z.ends_with(&DEFLATE_TAIL));
        let mut out = BytesMut::new();
        inflate_message(&z, data.len(), &mut out).unwrap();
        assert_eq!(&out[..], &data[..]);
        let mut out = BytesMut::new();
        assert_eq!(
            inflate_message(&z, 100, &mut out).unwrap_err().code,
            code::TOO_BIG
        );
        let mut out = BytesMut::new();
        assert!(inflate_message(b"\xff\xff\xff garbage", 1000, &mut out).is_err());
    }

    #[test]
    fn leaf_upgrade_request_and_answer() {
        let key = "dGhlIHNhbXBsZSBub25jZQ==";
        let req = leaf_request("hub:443", "/edge/", key, true, true);
        assert!(req.starts_with("GET /edge/leafnode HTTP/1.1\r\nHost: hub:443\r\n"));
        assert!(req.contains("Nats-No-Masking: true\r\n") && req.ends_with("\r\n\r\n"));
        assert!(leaf_request("h", "", key, false, false).starts_with("GET /leafnode "));
        // Our own server accepts it as a leaf request and answers it.
        let mut o = opts();
        o.compression = true;
        let up = check_upgrade(req.as_bytes(), &o, false).unwrap();
        assert!(is_leaf_path(&up.path) && up.compress && up.no_masking);
        assert!(!is_leaf_path("/") && !is_leaf_path("/leafnodes"));
        let answer = switching_response(&up);
        let agreed = check_leaf_response(answer.as_bytes(), key, true, true).unwrap();
        assert_eq!(
            agreed,
            Agreed {
                compress: true,
                no_masking: true
            }
        );
        // Not asked for: not agreed, whatever the hub says.
        let agreed = check_leaf_response(answer.as_bytes(), key, false, false).unwrap();
        assert!(!agreed.compress && !agreed.no_masking);
        // A hub that does not agree leaves both off.
        o.compression = false;
        let plain = check_upgrade(
            leaf_request("h", "", key, true, false).as_bytes(),
            &o,
            false,
        )
        .unwrap();
        let agreed =
            check_leaf_response(switching_response(&plain).as_bytes(), key, true, true).unwrap();
        assert!(!agreed.compress && !agreed.no_masking);
        // Wrong key, wrong status, context takeover, not HTTP at all.
        assert!(
            check_leaf_response(answer.as_bytes(), "b3RoZXIga2V5IHZhbHVlIQ==", false, false)
                .is_err()
        );
        assert!(check_leaf_response(error_response(403).as_bytes(), key, false, false).is_err());
        let takeover = answer.replace("; server_no_context_takeover", "");
        assert_eq!(
            check_leaf_response(takeover.as_bytes(), key, true, false).unwrap_err(),
            "compression negotiation error"
        );
        assert!(check_leaf_response(
            b"-ERR 'Unknown Protocol Operation'\r\n\r\n",
            key,
            false,
            false
        )
        .is_err());
    }

    #[test]
    fn client_frames_are_masked_and_parse_back() {
        let key = [1, 2, 3, 4];
        let mut b = BytesMut::new();
        encode_masked(&mut b, OP_BINARY, false, b"PING\r\n", key);
        let h = parse_header(&b, false, true).unwrap().unwrap();
        assert_eq!((h.mask, h.len, h.header_len), (Some(key), 6, 6));
        let mut payload = b[h.header_len..].to_vec();
        assert_ne!(&payload[..], b"PING\r\n");
        unmask(&mut payload, key, 0);
        assert_eq!(&payload[..], b"PING\r\n");
        // Queued control frames become masked ones, in order.
        let mut ctl = BytesMut::new();
        encode_header(&mut ctl, OP_PONG, false, 2);
        ctl.extend_from_slice(b"hi");
        encode_close(&mut ctl, 1001, "bye");
        let masked = mask_frames(&ctl, key);
        let pong = parse_header(&masked, false, true).unwrap().unwrap();
        assert_eq!((pong.opcode, pong.len), (OP_PONG, 2));
        let close = parse_header(&masked[pong.header_len + 2..], false, true)
            .unwrap()
            .unwrap();
        assert_eq!((close.opcode, close.len), (OP_CLOSE, 5));
        assert_eq!(masked.len(), ctl.len() + 8);
    }
}
