//! Server → client encoding into an outbound `BytesMut`.
//!
//! Appends frames without intermediate allocations: numbers are formatted
//! on the stack. Output matches nats-server byte for byte (`INFO {..} \r\n`
//! keeps the space before CRLF).

use bytes::{BufMut, BytesMut};

/// `PING\r\n`.
pub const PING: &[u8] = b"PING\r\n";
/// `PONG\r\n`.
pub const PONG: &[u8] = b"PONG\r\n";
/// `+OK\r\n`.
pub const OK: &[u8] = b"+OK\r\n";

/// Appends the decimal form of `n`.
#[inline]
pub fn put_usize(buf: &mut BytesMut, mut n: usize) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.put_slice(&tmp[i..]);
}

/// Appends `INFO <json> \r\n`.
pub fn encode_info(buf: &mut BytesMut, json: &str) {
    buf.reserve(json.len() + 8);
    buf.put_slice(b"INFO ");
    buf.put_slice(json.as_bytes());
    buf.put_slice(b" \r\n");
}

/// Appends `-ERR '<text>'\r\n`.
pub fn encode_err(buf: &mut BytesMut, text: &str) {
    buf.put_slice(b"-ERR '");
    buf.put_slice(text.as_bytes());
    buf.put_slice(b"'\r\n");
}

/// Appends `MSG <subject> <sid> [reply] <size>\r\n<payload>\r\n`.
#[inline]
pub fn encode_msg(
    buf: &mut BytesMut,
    subject: &[u8],
    sid: &[u8],
    reply: Option<&[u8]>,
    payload: &[u8],
) {
    buf.reserve(subject.len() + sid.len() + reply.map_or(0, |r| r.len() + 1) + payload.len() + 32);
    buf.put_slice(b"MSG ");
    buf.put_slice(subject);
    buf.put_u8(b' ');
    buf.put_slice(sid);
    buf.put_u8(b' ');
    if let Some(r) = reply {
        buf.put_slice(r);
        buf.put_u8(b' ');
    }
    put_usize(buf, payload.len());
    buf.put_slice(b"\r\n");
    buf.put_slice(payload);
    buf.put_slice(b"\r\n");
}

/// Appends `HMSG <subject> <sid> [reply] <hdr> <total>\r\n<headers><payload>\r\n`.
#[inline]
pub fn encode_hmsg(
    buf: &mut BytesMut,
    subject: &[u8],
    sid: &[u8],
    reply: Option<&[u8]>,
    headers: &[u8],
    payload: &[u8],
) {
    buf.reserve(
        subject.len()
            + sid.len()
            + reply.map_or(0, |r| r.len() + 1)
            + headers.len()
            + payload.len()
            + 48,
    );
    buf.put_slice(b"HMSG ");
    buf.put_slice(subject);
    buf.put_u8(b' ');
    buf.put_slice(sid);
    buf.put_u8(b' ');
    if let Some(r) = reply {
        buf.put_slice(r);
        buf.put_u8(b' ');
    }
    put_usize(buf, headers.len());
    buf.put_u8(b' ');
    put_usize(buf, headers.len() + payload.len());
    buf.put_slice(b"\r\n");
    buf.put_slice(headers);
    buf.put_slice(payload);
    buf.put_slice(b"\r\n");
}

/// CONNECT options sent by a client. Omitted `verbose`, `pedantic` and
/// `echo` default to `true`, as nats-server unmarshals over those defaults.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default)]
pub struct ConnectOptions {
    /// Answer every operation with `+OK`.
    pub verbose: bool,
    /// Check publish subjects strictly.
    pub pedantic: bool,
    /// Deliver the client's own publishes to its subscriptions.
    pub echo: bool,
    /// The client requires TLS.
    pub tls_required: bool,
    /// The client understands HPUB/HMSG.
    pub headers: bool,
    /// The client wants 503 status messages for requests nobody received.
    pub no_responders: bool,
    /// Protocol level (0 or 1).
    pub protocol: i64,
    /// User name.
    pub user: Option<String>,
    /// Password.
    pub pass: Option<String>,
    /// Token.
    pub auth_token: Option<String>,
    /// Public nkey.
    pub nkey: Option<String>,
    /// Signature of the INFO nonce.
    pub sig: Option<String>,
    /// User JWT (operator mode; not supported, rejected by auth).
    pub jwt: Option<String>,
    /// Connection name.
    pub name: Option<String>,
    /// Client library language.
    pub lang: Option<String>,
    /// Client library version.
    pub version: Option<String>,
    /// Account (not supported: an authorization violation).
    pub account: Option<String>,
    /// New account request (not supported: an authorization violation).
    pub new_account: Option<bool>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            verbose: true,
            pedantic: true,
            echo: true,
            tls_required: false,
            headers: false,
            no_responders: false,
            protocol: 0,
            user: None,
            pass: None,
            auth_token: None,
            nkey: None,
            sig: None,
            jwt: None,
            name: None,
            lang: None,
            version: None,
            account: None,
            new_account: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        let mut b = BytesMut::new();
        encode_info(&mut b, "{\"a\":1}");
        assert_eq!(&b[..], b"INFO {\"a\":1} \r\n");
        b.clear();
        encode_msg(&mut b, b"foo", b"1", Some(b"r"), b"hello");
        assert_eq!(&b[..], b"MSG foo 1 r 5\r\nhello\r\n");
        b.clear();
        encode_hmsg(
            &mut b,
            b"_INBOX.x",
            b"1",
            None,
            b"NATS/1.0 503\r\n\r\n",
            b"",
        );
        assert_eq!(&b[..], b"HMSG _INBOX.x 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n");
        b.clear();
        encode_err(&mut b, "Invalid Subject");
        assert_eq!(&b[..], b"-ERR 'Invalid Subject'\r\n");
        b.clear();
        put_usize(&mut b, 0);
        put_usize(&mut b, 1234567);
        assert_eq!(&b[..], b"01234567");
    }

    #[test]
    fn connect_defaults_true() {
        let c: ConnectOptions = serde_json::from_str("{}").unwrap();
        assert!(c.verbose && c.pedantic && c.echo);
        let c: ConnectOptions = serde_json::from_str("{\"echo\":false,\"lang\":\"go\"}").unwrap();
        assert!(!c.echo && c.verbose);
    }
}
