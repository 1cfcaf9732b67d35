//! Client → server parsing.
//!
//! A frame is a control line ending in `\n` (an optional `\r` before it is
//! dropped), followed for PUB/HPUB by exactly `size` payload bytes and
//! `\r\n`. The scan for a whole frame is a `memchr` for `\n` plus, for
//! publishes, a length check; only then are arguments split. While a large
//! payload is still arriving, the parser remembers how many bytes it needs
//! so repeated reads do not re-scan the control line.

use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

/// One operation sent by a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOp {
    /// `CONNECT {json}`; the raw JSON text.
    Connect(Bytes),
    /// `PUB <subject> [reply] <size>` and its payload.
    Pub {
        subject: Bytes,
        reply: Option<Bytes>,
        payload: Bytes,
    },
    /// `HPUB <subject> [reply] <hdr size> <total size>`: headers (including
    /// the blank line ending them) and payload.
    HPub {
        subject: Bytes,
        reply: Option<Bytes>,
        headers: Bytes,
        payload: Bytes,
    },
    /// `SUB <subject> [queue] <sid>`.
    Sub {
        subject: Bytes,
        queue: Option<Bytes>,
        sid: Bytes,
    },
    /// `UNSUB <sid> [max]`.
    Unsub { sid: Bytes, max: Option<u64> },
    /// `PING`.
    Ping,
    /// `PONG`.
    Pong,
    /// `INFO` sent by a client (ignored by the server, as nats-server does
    /// for client connections).
    Info,
    /// `+OK` sent by a client (ignored).
    Ok,
    /// `-ERR` sent by a client.
    Err(Bytes),
}

/// Result of one parse step.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// One whole operation; its bytes were removed from the buffer.
    Op(ClientOp),
    /// More bytes are needed; the buffer is untouched.
    Incomplete,
}

/// Why a client's byte stream is rejected. Every case closes the connection.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Control line longer than the limit: `-ERR 'maximum control line exceeded'`.
    #[error("maximum control line exceeded")]
    MaxControlLine,
    /// Payload larger than `max_payload`: `-ERR 'Maximum Payload Violation'`.
    #[error("Maximum Payload Violation")]
    MaxPayload,
    /// Not an operation of the client protocol, or a payload not followed
    /// by CRLF: `-ERR 'Unknown Protocol Operation'`.
    #[error("Unknown Protocol Operation")]
    UnknownOp,
    /// Wrong number of arguments or a bad number: closed without `-ERR`.
    #[error("{op} parse error")]
    BadArgs {
        /// The operation whose arguments were wrong.
        op: &'static str,
    },
}

impl ParseError {
    /// The `-ERR` text nats-server sends before closing, if any.
    pub fn err_text(&self) -> Option<&'static str> {
        match self {
            ParseError::MaxControlLine => Some("maximum control line exceeded"),
            ParseError::MaxPayload => Some("Maximum Payload Violation"),
            ParseError::UnknownOp => Some("Unknown Protocol Operation"),
            ParseError::BadArgs { .. } => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Connect,
    Pub,
    HPub,
    Sub,
    Unsub,
    Ping,
    Pong,
    Info,
    Ok,
    Err,
}

const OPS: &[(&[u8], OpKind)] = &[
    (b"PUB", OpKind::Pub),
    (b"HPUB", OpKind::HPub),
    (b"SUB", OpKind::Sub),
    (b"UNSUB", OpKind::Unsub),
    (b"PING", OpKind::Ping),
    (b"PONG", OpKind::Pong),
    (b"CONNECT", OpKind::Connect),
    (b"INFO", OpKind::Info),
    (b"+OK", OpKind::Ok),
    (b"-ERR", OpKind::Err),
];

#[inline]
fn is_ws(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Whether `word` (already complete) names an operation. Like
/// nats-server, `PING`, `PONG` and `+OK` ignore whatever follows them on
/// the line (`PINGX` is a PING).
fn op_of(word: &[u8]) -> Option<OpKind> {
    for (name, kind) in [
        (&b"PING"[..], OpKind::Ping),
        (b"PONG", OpKind::Pong),
        (b"+OK", OpKind::Ok),
    ] {
        if word.len() >= name.len() && word[..name.len()].eq_ignore_ascii_case(name) {
            return Some(kind);
        }
    }
    OPS.iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(word))
        .map(|(_, k)| *k)
}

/// Whether `partial` (an op word not yet terminated) could still become an
/// operation name.
fn could_be_op(partial: &[u8]) -> bool {
    op_of(partial).is_some()
        || OPS.iter().any(|(name, _)| {
            partial.len() <= name.len() && name[..partial.len()].eq_ignore_ascii_case(partial)
        })
}

/// Parses a decimal size as nats-server does: digits only, no sign.
fn parse_size(b: &[u8]) -> Option<usize> {
    if b.is_empty() || b.len() > 18 {
        return None;
    }
    let mut n: usize = 0;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (c - b'0') as usize;
    }
    Some(n)
}

/// Up to 4 argument ranges of a control line (start, end) relative to the
/// line start. More arguments than 4 set `count` to 5 (always an arity error).
struct Args {
    ranges: [(usize, usize); 4],
    count: usize,
}

fn split_args(line: &[u8], from: usize) -> Args {
    let mut a = Args {
        ranges: [(0, 0); 4],
        count: 0,
    };
    let mut i = from;
    let n = line.len();
    while i < n {
        while i < n && is_ws(line[i]) {
            i += 1;
        }
        if i >= n {
            break;
        }
        let start = i;
        while i < n && !is_ws(line[i]) {
            i += 1;
        }
        if a.count >= 4 {
            a.count = 5;
            return a;
        }
        a.ranges[a.count] = (start, i);
        a.count += 1;
    }
    a
}

/// The protocol parser of one connection. Cheap to create; holds only
/// limits and the "bytes needed" hint of a partially received frame.
#[derive(Debug, Clone)]
pub struct Parser {
    max_control_line: usize,
    max_payload: usize,
    /// Total frame length known to be needed (0 = unknown).
    need: usize,
}

impl Parser {
    /// A parser enforcing these limits.
    /// Changes the limits (a configuration reload); they apply from the
    /// next operation on.
    pub fn set_limits(&mut self, max_control_line: usize, max_payload: usize) {
        self.max_control_line = max_control_line;
        self.max_payload = max_payload;
    }

    pub fn new(max_control_line: usize, max_payload: usize) -> Parser {
        Parser {
            max_control_line,
            max_payload,
            need: 0,
        }
    }

    /// Total bytes the frame at the front of the buffer is known to need
    /// (0 when unknown), so the caller can reserve room in one step.
    pub fn needed(&self) -> usize {
        self.need
    }

    /// The whole frame of a PUB/HPUB whose control line is `header_len`
    /// bytes and whose payload (headers included) is `size` bytes: `None`
    /// while it has not fully arrived (`need` then says how much is wanted).
    /// Checks the payload limit and the CRLF after the payload.
    fn take_frame(
        &mut self,
        buf: &mut BytesMut,
        header_len: usize,
        size: usize,
    ) -> Result<Option<Bytes>, ParseError> {
        if size > self.max_payload {
            return Err(ParseError::MaxPayload);
        }
        let total = header_len + size + 2;
        if buf.len() < total {
            self.need = total;
            return Ok(None);
        }
        if &buf[header_len + size..total] != b"\r\n" {
            return Err(ParseError::UnknownOp);
        }
        self.need = 0;
        Ok(Some(buf.split_to(total).freeze()))
    }

    /// Parses one operation from the front of `buf`.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Parsed, ParseError> {
        if buf.len() < self.need || buf.is_empty() {
            return Ok(Parsed::Incomplete);
        }
        let line_end = match memchr::memchr(b'\n', buf) {
            Some(i) => i,
            None => {
                self.check_partial_line(buf)?;
                return Ok(Parsed::Incomplete);
            }
        };
        // Control line without the trailing \r.
        let mut ctl_len = line_end;
        if ctl_len > 0 && buf[ctl_len - 1] == b'\r' {
            ctl_len -= 1;
        }
        let line = &buf[..ctl_len];
        let word_end = line.iter().position(|&b| is_ws(b)).unwrap_or(ctl_len);
        let kind = op_of(&line[..word_end]).ok_or(ParseError::UnknownOp)?;
        if ctl_len > self.max_control_line {
            return Err(ParseError::MaxControlLine);
        }
        let header_len = line_end + 1;
        let has_args = matches!(
            kind,
            OpKind::Connect
                | OpKind::Pub
                | OpKind::HPub
                | OpKind::Sub
                | OpKind::Unsub
                | OpKind::Info
        );
        if has_args && word_end == ctl_len {
            // nats-server expects a space after these op names.
            return Err(ParseError::UnknownOp);
        }
        match kind {
            OpKind::Ping | OpKind::Pong | OpKind::Info | OpKind::Ok => {
                buf.advance(header_len);
                self.need = 0;
                Ok(Parsed::Op(match kind {
                    OpKind::Ping => ClientOp::Ping,
                    OpKind::Pong => ClientOp::Pong,
                    OpKind::Info => ClientOp::Info,
                    _ => ClientOp::Ok,
                }))
            }
            OpKind::Err => {
                let (s, e) = trim(&buf[word_end..ctl_len]);
                let (s, e) = (s + word_end, e + word_end);
                let mut frame = buf.split_to(header_len).freeze();
                self.need = 0;
                frame.truncate(e);
                frame.advance(s);
                Ok(Parsed::Op(ClientOp::Err(frame)))
            }
            OpKind::Connect => {
                let (s, e) = trim(&buf[word_end..ctl_len]);
                let (s, e) = (s + word_end, e + word_end);
                if s == e {
                    return Err(ParseError::BadArgs { op: "CONNECT" });
                }
                let mut frame = buf.split_to(header_len).freeze();
                self.need = 0;
                frame.truncate(e);
                frame.advance(s);
                Ok(Parsed::Op(ClientOp::Connect(frame)))
            }
            OpKind::Sub => {
                let a = split_args(line, word_end);
                let (subj, queue, sid) = match a.count {
                    2 => (a.ranges[0], None, a.ranges[1]),
                    3 => (a.ranges[0], Some(a.ranges[1]), a.ranges[2]),
                    _ => return Err(ParseError::BadArgs { op: "SUB" }),
                };
                let frame = buf.split_to(header_len).freeze();
                self.need = 0;
                Ok(Parsed::Op(ClientOp::Sub {
                    subject: frame.slice(subj.0..subj.1),
                    queue: queue.map(|q| frame.slice(q.0..q.1)),
                    sid: frame.slice(sid.0..sid.1),
                }))
            }
            OpKind::Unsub => {
                let a = split_args(line, word_end);
                let (sid, max) = match a.count {
                    1 => (a.ranges[0], None),
                    2 => {
                        // A bad max counts as "unsubscribe now", as in nats-server.
                        let m = a.ranges[1];
                        let v = parse_size(&line[m.0..m.1]).unwrap_or(0);
                        (a.ranges[0], Some(v as u64))
                    }
                    _ => return Err(ParseError::BadArgs { op: "UNSUB" }),
                };
                let frame = buf.split_to(header_len).freeze();
                self.need = 0;
                Ok(Parsed::Op(ClientOp::Unsub {
                    sid: frame.slice(sid.0..sid.1),
                    max,
                }))
            }
            OpKind::Pub => {
                let a = split_args(line, word_end);
                let (subj, reply, size) = match a.count {
                    2 => (a.ranges[0], None, a.ranges[1]),
                    3 => (a.ranges[0], Some(a.ranges[1]), a.ranges[2]),
                    _ => return Err(ParseError::BadArgs { op: "PUB" }),
                };
                let size =
                    parse_size(&line[size.0..size.1]).ok_or(ParseError::BadArgs { op: "PUB" })?;
                let Some(frame) = self.take_frame(buf, header_len, size)? else {
                    return Ok(Parsed::Incomplete);
                };
                Ok(Parsed::Op(ClientOp::Pub {
                    subject: frame.slice(subj.0..subj.1),
                    reply: reply.map(|r| frame.slice(r.0..r.1)),
                    payload: frame.slice(header_len..header_len + size),
                }))
            }
            OpKind::HPub => {
                let a = split_args(line, word_end);
                let (subj, reply, hdr, tot) = match a.count {
                    3 => (a.ranges[0], None, a.ranges[1], a.ranges[2]),
                    4 => (a.ranges[0], Some(a.ranges[1]), a.ranges[2], a.ranges[3]),
                    _ => return Err(ParseError::BadArgs { op: "HPUB" }),
                };
                let hdr =
                    parse_size(&line[hdr.0..hdr.1]).ok_or(ParseError::BadArgs { op: "HPUB" })?;
                let size =
                    parse_size(&line[tot.0..tot.1]).ok_or(ParseError::BadArgs { op: "HPUB" })?;
                if hdr > size {
                    return Err(ParseError::BadArgs { op: "HPUB" });
                }
                let Some(frame) = self.take_frame(buf, header_len, size)? else {
                    return Ok(Parsed::Incomplete);
                };
                Ok(Parsed::Op(ClientOp::HPub {
                    subject: frame.slice(subj.0..subj.1),
                    reply: reply.map(|r| frame.slice(r.0..r.1)),
                    headers: frame.slice(header_len..header_len + hdr),
                    payload: frame.slice(header_len + hdr..header_len + size),
                }))
            }
        }
    }

    /// Rejects a line that has no `\n` yet but can already be judged: an
    /// op word that cannot become an operation, or more bytes than a
    /// control line may hold.
    fn check_partial_line(&self, buf: &[u8]) -> Result<(), ParseError> {
        let word_end = buf
            .iter()
            .position(|&b| is_ws(b) || b == b'\r')
            .unwrap_or(buf.len());
        let word = &buf[..word_end];
        if word_end < buf.len() {
            if op_of(word).is_none() {
                return Err(ParseError::UnknownOp);
            }
        } else if !could_be_op(word) {
            return Err(ParseError::UnknownOp);
        }
        if buf.len() > self.max_control_line + 1 {
            return Err(ParseError::MaxControlLine);
        }
        Ok(())
    }
}

/// Start and end of `b` without surrounding spaces/tabs.
fn trim(b: &[u8]) -> (usize, usize) {
    let s = b.iter().position(|&c| !is_ws(c)).unwrap_or(b.len());
    let e = b.iter().rposition(|&c| !is_ws(c)).map_or(s, |i| i + 1);
    (s, e.max(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(p: &mut Parser, buf: &mut BytesMut) -> Result<Vec<ClientOp>, ParseError> {
        let mut out = Vec::new();
        loop {
            match p.parse(buf)? {
                Parsed::Op(op) => out.push(op),
                Parsed::Incomplete => return Ok(out),
            }
        }
    }

    fn ops(input: &[u8]) -> Result<Vec<ClientOp>, ParseError> {
        let mut p = Parser::new(4096, 1024 * 1024);
        let mut buf = BytesMut::from(input);
        parse_all(&mut p, &mut buf)
    }

    #[test]
    fn basic_ops() {
        let v = ops(b"CONNECT {\"verbose\":false}\r\nPING\r\npong\r\nsub foo 1\r\nSUB foo q 2\r\nPUB foo 5\r\nhello\r\nPUB foo bar 0\r\n\r\nUNSUB 1\r\nUNSUB 2 5\r\n").unwrap();
        assert_eq!(v.len(), 9);
        assert_eq!(
            v[0],
            ClientOp::Connect(Bytes::from_static(b"{\"verbose\":false}"))
        );
        assert_eq!(v[1], ClientOp::Ping);
        assert_eq!(v[2], ClientOp::Pong);
        assert_eq!(
            v[3],
            ClientOp::Sub {
                subject: "foo".into(),
                queue: None,
                sid: "1".into()
            }
        );
        assert_eq!(
            v[4],
            ClientOp::Sub {
                subject: "foo".into(),
                queue: Some("q".into()),
                sid: "2".into()
            }
        );
        assert_eq!(
            v[5],
            ClientOp::Pub {
                subject: "foo".into(),
                reply: None,
                payload: "hello".into()
            }
        );
        assert_eq!(
            v[6],
            ClientOp::Pub {
                subject: "foo".into(),
                reply: Some("bar".into()),
                payload: "".into()
            }
        );
        assert_eq!(
            v[8],
            ClientOp::Unsub {
                sid: "2".into(),
                max: Some(5)
            }
        );
    }

    #[test]
    fn hpub() {
        let v = ops(b"HPUB FOO 22 33\r\nNATS/1.0\r\nBar: Baz\r\n\r\nHello NATS!\r\n").unwrap();
        assert_eq!(
            v[0],
            ClientOp::HPub {
                subject: "FOO".into(),
                reply: None,
                headers: "NATS/1.0\r\nBar: Baz\r\n\r\n".into(),
                payload: "Hello NATS!".into()
            }
        );
        assert_eq!(
            ops(b"HPUB FOO 30 3\r\n").unwrap_err(),
            ParseError::BadArgs { op: "HPUB" }
        );
    }

    #[test]
    fn errors() {
        assert_eq!(ops(b"FOO\r\n").unwrap_err(), ParseError::UnknownOp);
        assert_eq!(ops(b"F").unwrap_err(), ParseError::UnknownOp);
        assert_eq!(ops(b"UNSUB\r\n").unwrap_err(), ParseError::UnknownOp);
        assert_eq!(ops(b"PUBX foo 1\r\n").unwrap_err(), ParseError::UnknownOp);
        assert_eq!(ops(b"  PING\r\n").unwrap_err(), ParseError::UnknownOp);
        assert_eq!(
            ops(b"PINGX\r\n+OKX\r\n").unwrap(),
            vec![ClientOp::Ping, ClientOp::Ok]
        );
        assert_eq!(
            ops(b"UNSUB 1 x\r\n").unwrap(),
            vec![ClientOp::Unsub {
                sid: "1".into(),
                max: Some(0)
            }]
        );
        assert!(ops(b"PU").unwrap().is_empty());
        assert_eq!(
            ops(b"PUB foo 3\r\nhello\r\n").unwrap_err(),
            ParseError::UnknownOp
        );
        assert_eq!(
            ops(b"PUB foo\r\n").unwrap_err(),
            ParseError::BadArgs { op: "PUB" }
        );
        assert_eq!(
            ops(b"PUB foo -1\r\n").unwrap_err(),
            ParseError::BadArgs { op: "PUB" }
        );
        assert_eq!(
            ops(b"SUB a b c d\r\n").unwrap_err(),
            ParseError::BadArgs { op: "SUB" }
        );
        assert_eq!(
            ops(b"PUB a 2000000\r\n").unwrap_err(),
            ParseError::MaxPayload
        );
        let mut long = b"SUB ".to_vec();
        long.extend(std::iter::repeat_n(b'a', 5000));
        assert_eq!(ops(&long).unwrap_err(), ParseError::MaxControlLine);
        long.extend_from_slice(b" 1\r\n");
        assert_eq!(ops(&long).unwrap_err(), ParseError::MaxControlLine);
    }

    #[test]
    fn incomplete_leaves_buffer() {
        let mut p = Parser::new(4096, 1024);
        let mut buf = BytesMut::from(&b"PUB foo 5\r\nhel"[..]);
        assert_eq!(p.parse(&mut buf).unwrap(), Parsed::Incomplete);
        assert_eq!(&buf[..], b"PUB foo 5\r\nhel");
        buf.extend_from_slice(b"lo\r\n");
        assert!(matches!(
            p.parse(&mut buf).unwrap(),
            Parsed::Op(ClientOp::Pub { .. })
        ));
        assert!(buf.is_empty());
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        fn frame() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                Just(b"PING\r\n".to_vec()),
                Just(b"pong\r\n".to_vec()),
                "[a-z]{1,8}(\\.[a-z*]{1,5}){0,3}"
                    .prop_map(|s| format!("SUB {s} 1\r\n").into_bytes()),
                ("[a-z]{1,8}", proptest::collection::vec(any::<u8>(), 0..64)).prop_map(|(s, p)| {
                    let mut v = format!("PUB {s} {}\r\n", p.len()).into_bytes();
                    v.extend(p);
                    v.extend_from_slice(b"\r\n");
                    v
                }),
                (
                    "[a-z]{1,8}",
                    "[a-z]{1,8}",
                    proptest::collection::vec(any::<u8>(), 0..32)
                )
                    .prop_map(|(s, r, p)| {
                        let h = b"NATS/1.0\r\nA: b\r\n\r\n";
                        let mut v = format!("HPUB {s} {r} {} {}\r\n", h.len(), h.len() + p.len())
                            .into_bytes();
                        v.extend_from_slice(h);
                        v.extend(p);
                        v.extend_from_slice(b"\r\n");
                        v
                    }),
                Just(b"UNSUB 1 10\r\n".to_vec()),
                Just(b"CONNECT {\"verbose\":false}\r\n".to_vec()),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

            #[test]
            fn split_anywhere_same_ops(frames in proptest::collection::vec(frame(), 1..20), cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
                let stream: Vec<u8> = frames.concat();
                let whole = ops(&stream).unwrap();
                prop_assert_eq!(whole.len(), frames.len());
                let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
                cuts.sort_unstable();
                cuts.push(stream.len());
                let mut p = Parser::new(4096, 1024 * 1024);
                let mut buf = BytesMut::new();
                let mut got = Vec::new();
                let mut prev = 0;
                for c in cuts {
                    buf.extend_from_slice(&stream[prev..c]);
                    prev = c;
                    got.extend(parse_all(&mut p, &mut buf).unwrap());
                }
                prop_assert_eq!(got, whole);
                prop_assert!(buf.is_empty());
            }

            #[test]
            fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..512), cut in any::<usize>()) {
                let mut p = Parser::new(64, 128);
                let mut buf = BytesMut::new();
                let cut = cut % (data.len() + 1);
                buf.extend_from_slice(&data[..cut]);
                let _ = parse_all(&mut p, &mut buf);
                buf.extend_from_slice(&data[cut..]);
                let _ = parse_all(&mut p, &mut buf);
            }

            #[test]
            fn mutated_frames_never_panic(frames in proptest::collection::vec(frame(), 1..8), pos in any::<usize>(), byte in any::<u8>()) {
                let mut stream: Vec<u8> = frames.concat();
                let i = pos % stream.len();
                stream[i] = byte;
                let mut p = Parser::new(4096, 1024);
                let mut buf = BytesMut::from(&stream[..]);
                let _ = parse_all(&mut p, &mut buf);
            }
        }
    }
}
