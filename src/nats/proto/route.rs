//! The route (server ↔ server) protocol as pure code: a parser for what a
//! peer sends on a route connection and encoders for what we send.
//!
//! Operations (spec `nats.md` §1.13): `INFO`, `CONNECT`, `PING`, `PONG`,
//! `+OK`, `-ERR`, `RS+ <account> <subject> [<queue> <weight>]`,
//! `RS- <account> <subject> [<queue>]`,
//! `RMSG <account> <subject> [+ <reply> | |] [<queue>…] [<reply>] <size>` and
//! `HMSG` with a header size before the total size. The reply indicator
//! (`+ reply` or `|`) appears only when queue names follow.
//!
//! Leafnode-origin operations (`LS+`, `LS-`, `LMSG`) are sent only to
//! servers that announce `lnoc`; we never do, so they are protocol errors.
//!
//! Invariants: the parser never panics on any input; `Incomplete` leaves
//! the buffer untouched; a frame's bytes are split off without copying.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

use super::put_usize;

/// Largest routed payload accepted (headers included). Peers may run with
/// a larger `max_payload` than ours, so this is a memory bound rather than
/// the client limit.
pub const MAX_ROUTE_PAYLOAD: usize = 64 * 1024 * 1024;

/// One operation received on a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteOp {
    /// `CONNECT {json}`.
    Connect(Bytes),
    /// `INFO {json}`.
    Info(Bytes),
    /// `PING`.
    Ping,
    /// `PONG`.
    Pong,
    /// `+OK`.
    Ok,
    /// `-ERR '<text>'` (the text as sent).
    Err(Bytes),
    /// `RS+`: interest of the peer's clients.
    Sub {
        account: Bytes,
        subject: Bytes,
        /// Queue group and its weight (number of members on the peer).
        queue: Option<(Bytes, u32)>,
    },
    /// `RS-`: interest withdrawn.
    Unsub {
        account: Bytes,
        subject: Bytes,
        queue: Option<Bytes>,
    },
    /// `RMSG` / `HMSG`: a message for our local subscribers.
    Msg {
        account: Bytes,
        subject: Bytes,
        reply: Option<Bytes>,
        /// Queue groups for which this server must pick a member.
        queues: Vec<Bytes>,
        headers: Option<Bytes>,
        payload: Bytes,
    },
}

/// Result of one parse step.
#[derive(Debug, PartialEq, Eq)]
pub enum RouteParsed {
    /// One whole operation; its bytes were removed from the buffer.
    Op(RouteOp),
    /// More bytes are needed; the buffer is untouched.
    Incomplete,
}

/// Why a route's byte stream is rejected (the route is closed).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RouteParseError {
    /// Control line longer than the limit.
    #[error("maximum control line exceeded")]
    MaxControlLine,
    /// Payload larger than [`MAX_ROUTE_PAYLOAD`].
    #[error("maximum payload exceeded")]
    MaxPayload,
    /// Not an operation of the route protocol, or a payload not followed
    /// by CRLF.
    #[error("Unknown Protocol Operation")]
    UnknownOp,
    /// Wrong arguments for a known operation.
    #[error("{op} parse error")]
    BadArgs {
        /// The operation whose arguments were wrong.
        op: &'static str,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Connect,
    Info,
    Ping,
    Pong,
    Ok,
    Err,
    Sub,
    Unsub,
    RMsg,
    HMsg,
}

fn kind_of(word: &[u8]) -> Option<Kind> {
    const OPS: &[(&[u8], Kind)] = &[
        (b"RMSG", Kind::RMsg),
        (b"HMSG", Kind::HMsg),
        (b"RS+", Kind::Sub),
        (b"RS-", Kind::Unsub),
        (b"PING", Kind::Ping),
        (b"PONG", Kind::Pong),
        (b"INFO", Kind::Info),
        (b"CONNECT", Kind::Connect),
        (b"+OK", Kind::Ok),
        (b"-ERR", Kind::Err),
    ];
    OPS.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(word))
        .map(|(_, k)| *k)
}

fn parse_num(b: &[u8]) -> Option<usize> {
    if b.is_empty() || b.len() > 18 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0usize, |n, c| n * 10 + (c - b'0') as usize))
}

/// The route parser of one connection (limits, a reusable argument list,
/// and the "bytes needed" hint of a partially received message).
#[derive(Debug, Clone)]
pub struct RouteParser {
    max_control_line: usize,
    need: usize,
    args: Vec<(usize, usize)>,
}

impl RouteParser {
    /// A parser with this control-line limit.
    pub fn new(max_control_line: usize) -> RouteParser {
        RouteParser {
            max_control_line,
            need: 0,
            args: Vec::with_capacity(8),
        }
    }

    /// Total bytes the frame at the front of the buffer needs (0 = unknown).
    pub fn needed(&self) -> usize {
        self.need
    }

    /// Parses one operation from the front of `buf`.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<RouteParsed, RouteParseError> {
        if buf.is_empty() || buf.len() < self.need {
            return Ok(RouteParsed::Incomplete);
        }
        let Some(line_end) = memchr::memchr(b'\n', buf) else {
            if buf.len() > self.max_control_line {
                return Err(RouteParseError::MaxControlLine);
            }
            return Ok(RouteParsed::Incomplete);
        };
        let mut ctl = line_end;
        if ctl > 0 && buf[ctl - 1] == b'\r' {
            ctl -= 1;
        }
        if ctl > self.max_control_line {
            return Err(RouteParseError::MaxControlLine);
        }
        // Arguments as ranges of the control line.
        self.args.clear();
        let line = &buf[..ctl];
        let mut i = 0;
        while i < line.len() {
            while i < line.len() && (line[i] == b' ' || line[i] == b'\t') {
                i += 1;
            }
            let s = i;
            while i < line.len() && line[i] != b' ' && line[i] != b'\t' {
                i += 1;
            }
            if s < i {
                self.args.push((s, i));
            }
        }
        let Some(&(ws, we)) = self.args.first() else {
            return Err(RouteParseError::UnknownOp);
        };
        let kind = kind_of(&line[ws..we]).ok_or(RouteParseError::UnknownOp)?;
        let header_len = line_end + 1;
        match kind {
            Kind::Ping | Kind::Pong | Kind::Ok => {
                buf.advance(header_len);
                self.need = 0;
                Ok(RouteParsed::Op(match kind {
                    Kind::Ping => RouteOp::Ping,
                    Kind::Pong => RouteOp::Pong,
                    _ => RouteOp::Ok,
                }))
            }
            Kind::Connect | Kind::Info | Kind::Err => {
                // The rest of the line after the op word, trimmed.
                let rest_start = self.args.get(1).map_or(ctl, |a| a.0);
                let rest_end = self.args.last().map_or(ctl, |a| a.1).max(rest_start);
                if rest_start == rest_end && kind != Kind::Err {
                    return Err(RouteParseError::BadArgs {
                        op: if kind == Kind::Info {
                            "INFO"
                        } else {
                            "CONNECT"
                        },
                    });
                }
                let mut frame = buf.split_to(header_len).freeze();
                self.need = 0;
                frame.truncate(rest_end);
                frame.advance(rest_start);
                Ok(RouteParsed::Op(match kind {
                    Kind::Connect => RouteOp::Connect(frame),
                    Kind::Info => RouteOp::Info(frame),
                    _ => RouteOp::Err(frame),
                }))
            }
            Kind::Sub => {
                let n = self.args.len() - 1;
                if n != 2 && n != 4 {
                    return Err(RouteParseError::BadArgs { op: "RS+" });
                }
                let weight = if n == 4 {
                    let (s, e) = self.args[4];
                    let w = parse_num(&line[s..e]).ok_or(RouteParseError::BadArgs { op: "RS+" })?;
                    Some(u32::try_from(w).unwrap_or(u32::MAX))
                } else {
                    None
                };
                let args = self.args.clone();
                let frame = buf.split_to(header_len).freeze();
                self.need = 0;
                let at = |k: usize| frame.slice(args[k].0..args[k].1);
                Ok(RouteParsed::Op(RouteOp::Sub {
                    account: at(1),
                    subject: at(2),
                    queue: weight.map(|w| (at(3), w)),
                }))
            }
            Kind::Unsub => {
                let n = self.args.len() - 1;
                if n != 2 && n != 3 {
                    return Err(RouteParseError::BadArgs { op: "RS-" });
                }
                let args = self.args.clone();
                let frame = buf.split_to(header_len).freeze();
                self.need = 0;
                let at = |k: usize| frame.slice(args[k].0..args[k].1);
                Ok(RouteParsed::Op(RouteOp::Unsub {
                    account: at(1),
                    subject: at(2),
                    queue: (n == 3).then(|| at(3)),
                }))
            }
            Kind::RMsg | Kind::HMsg => self.parse_msg(buf, kind == Kind::HMsg, header_len),
        }
    }

    fn parse_msg(
        &mut self,
        buf: &mut BytesMut,
        with_headers: bool,
        header_len: usize,
    ) -> Result<RouteParsed, RouteParseError> {
        let op = if with_headers { "HMSG" } else { "RMSG" };
        let bad = RouteParseError::BadArgs { op };
        // Arguments after the op word.
        let a = &self.args[1..];
        let sizes = if with_headers { 2 } else { 1 };
        if a.len() < 2 + sizes {
            return Err(bad);
        }
        let num = |k: usize| parse_num(&buf[a[k].0..a[k].1]);
        let total = num(a.len() - 1).ok_or(bad.clone())?;
        let hdr = if with_headers {
            let h = num(a.len() - 2).ok_or(bad.clone())?;
            if h > total {
                return Err(bad);
            }
            Some(h)
        } else {
            None
        };
        if total > MAX_ROUTE_PAYLOAD {
            return Err(RouteParseError::MaxPayload);
        }
        // Between subject and sizes: nothing, a reply, or an indicator
        // (`+ reply` / `|`) followed by queue names.
        let middle = &a[2..a.len() - sizes];
        type Range = (usize, usize);
        let (reply_r, queue_r): (Option<Range>, &[Range]) = match middle.len() {
            0 => (None, &[]),
            1 => (Some(middle[0]), &[]),
            _ => {
                let ind = &buf[middle[0].0..middle[0].1];
                match ind {
                    b"+" => (Some(middle[1]), &middle[2..]),
                    b"|" => (None, &middle[1..]),
                    _ => return Err(bad),
                }
            }
        };
        let frame_len = header_len + total + 2;
        if buf.len() < frame_len {
            self.need = frame_len;
            return Ok(RouteParsed::Incomplete);
        }
        if &buf[header_len + total..frame_len] != b"\r\n" {
            return Err(RouteParseError::UnknownOp);
        }
        let (acc_r, subj_r) = (a[0], a[1]);
        let queues_r: Vec<(usize, usize)> = queue_r.to_vec();
        let frame = buf.split_to(frame_len).freeze();
        self.need = 0;
        let at = |r: (usize, usize)| frame.slice(r.0..r.1);
        let body = header_len..header_len + total;
        let (headers, payload) = match hdr {
            Some(h) => (
                Some(frame.slice(body.start..body.start + h)),
                frame.slice(body.start + h..body.end),
            ),
            None => (None, frame.slice(body)),
        };
        Ok(RouteParsed::Op(RouteOp::Msg {
            account: at(acc_r),
            subject: at(subj_r),
            reply: reply_r.map(at),
            queues: queues_r.into_iter().map(at).collect(),
            headers,
            payload,
        }))
    }
}

/// Appends `RS+ <account> <subject> [<queue> <weight>]\r\n`.
pub fn encode_rs_plus(
    buf: &mut BytesMut,
    account: &str,
    subject: &str,
    queue: Option<(&str, u32)>,
) {
    buf.reserve(account.len() + subject.len() + 32);
    buf.put_slice(b"RS+ ");
    buf.put_slice(account.as_bytes());
    buf.put_u8(b' ');
    buf.put_slice(subject.as_bytes());
    if let Some((q, w)) = queue {
        buf.put_u8(b' ');
        buf.put_slice(q.as_bytes());
        buf.put_u8(b' ');
        put_usize(buf, w as usize);
    }
    buf.put_slice(b"\r\n");
}

/// Appends `RS- <account> <subject> [<queue>]\r\n`.
pub fn encode_rs_minus(buf: &mut BytesMut, account: &str, subject: &str, queue: Option<&str>) {
    buf.reserve(account.len() + subject.len() + 16);
    buf.put_slice(b"RS- ");
    buf.put_slice(account.as_bytes());
    buf.put_u8(b' ');
    buf.put_slice(subject.as_bytes());
    if let Some(q) = queue {
        buf.put_u8(b' ');
        buf.put_slice(q.as_bytes());
    }
    buf.put_slice(b"\r\n");
}

/// Appends an `RMSG` (or `HMSG` when `headers` is given) for a peer.
/// `queues` are the groups for which the peer must pick a member.
#[inline]
pub fn encode_rmsg(
    buf: &mut BytesMut,
    account: &[u8],
    subject: &[u8],
    reply: Option<&[u8]>,
    queues: &[&[u8]],
    headers: Option<&[u8]>,
    payload: &[u8],
) {
    let qlen: usize = queues.iter().map(|q| q.len() + 1).sum();
    let hlen = headers.map_or(0, <[u8]>::len);
    buf.reserve(
        account.len()
            + subject.len()
            + reply.map_or(0, |r| r.len() + 3)
            + qlen
            + hlen
            + payload.len()
            + 48,
    );
    buf.put_slice(if headers.is_some() {
        b"HMSG "
    } else {
        b"RMSG "
    });
    buf.put_slice(account);
    buf.put_u8(b' ');
    buf.put_slice(subject);
    buf.put_u8(b' ');
    if queues.is_empty() {
        if let Some(r) = reply {
            buf.put_slice(r);
            buf.put_u8(b' ');
        }
    } else {
        match reply {
            Some(r) => {
                buf.put_slice(b"+ ");
                buf.put_slice(r);
                buf.put_u8(b' ');
            }
            None => buf.put_slice(b"| "),
        }
        for q in queues {
            buf.put_slice(q);
            buf.put_u8(b' ');
        }
    }
    if let Some(h) = headers {
        put_usize(buf, h.len());
        buf.put_u8(b' ');
    }
    put_usize(buf, hlen + payload.len());
    buf.put_slice(b"\r\n");
    if let Some(h) = headers {
        buf.put_slice(h);
    }
    buf.put_slice(payload);
    buf.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8]) -> Vec<RouteOp> {
        let mut p = RouteParser::new(4096);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Ok(RouteParsed::Op(op)) = p.parse(&mut buf) {
            out.push(op);
        }
        assert!(buf.is_empty(), "unparsed: {buf:?}");
        out
    }

    #[test]
    fn encoded_messages_parse_back() {
        let mut b = BytesMut::new();
        encode_rmsg(&mut b, b"$G", b"foo", None, &[], None, b"hi");
        encode_rmsg(&mut b, b"$G", b"foo", Some(b"_INBOX.1"), &[], None, b"");
        encode_rmsg(
            &mut b,
            b"$G",
            b"foo",
            Some(b"r"),
            &[b"q1", b"q2"],
            None,
            b"x",
        );
        encode_rmsg(
            &mut b,
            b"$G",
            b"foo",
            None,
            &[b"q1"],
            Some(b"NATS/1.0\r\n\r\n"),
            b"p",
        );
        encode_rs_plus(&mut b, "$G", "a.*", None);
        encode_rs_plus(&mut b, "$G", "a.b", Some(("grp", 3)));
        encode_rs_minus(&mut b, "$G", "a.b", Some("grp"));
        assert!(b.starts_with(b"RMSG $G foo 2\r\nhi\r\nRMSG $G foo _INBOX.1 0\r\n\r\n"));
        let ops = parse_all(&b);
        assert_eq!(ops.len(), 7);
        match &ops[2] {
            RouteOp::Msg { reply, queues, .. } => {
                assert_eq!(reply.as_deref(), Some(&b"r"[..]));
                assert_eq!(queues, &vec![Bytes::from("q1"), Bytes::from("q2")]);
            }
            o => panic!("{o:?}"),
        }
        match &ops[3] {
            RouteOp::Msg {
                reply,
                queues,
                headers,
                payload,
                ..
            } => {
                assert!(reply.is_none());
                assert_eq!(queues.len(), 1);
                assert_eq!(headers.as_deref(), Some(&b"NATS/1.0\r\n\r\n"[..]));
                assert_eq!(&payload[..], b"p");
            }
            o => panic!("{o:?}"),
        }
        assert_eq!(
            ops[5],
            RouteOp::Sub {
                account: "$G".into(),
                subject: "a.b".into(),
                queue: Some(("grp".into(), 3))
            }
        );
    }

    #[test]
    fn split_input_gives_same_ops() {
        let input =
            b"INFO {\"server_id\":\"x\"}\r\nRS+ $G foo\r\nRMSG $G foo 5\r\nhello\r\nPING\r\n";
        let whole = parse_all(input);
        for cut in 0..input.len() {
            let mut p = RouteParser::new(4096);
            let mut buf = BytesMut::from(&input[..cut]);
            let mut out = Vec::new();
            while let Ok(RouteParsed::Op(op)) = p.parse(&mut buf) {
                out.push(op);
            }
            buf.extend_from_slice(&input[cut..]);
            while let Ok(RouteParsed::Op(op)) = p.parse(&mut buf) {
                out.push(op);
            }
            assert_eq!(out, whole, "cut at {cut}");
        }
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        for bad in [
            &b"FOO bar\r\n"[..],
            b"RMSG $G\r\n",
            b"RMSG $G foo x\r\n",
            b"RMSG $G foo ? q 1\r\n",
            b"HMSG $G foo 5 2\r\n",
            b"RS+ $G\r\n",
            b"RS+ $G foo q notanumber\r\n",
            b"RMSG $G foo 1\r\nabc\r\n",
            b"LS+ $G foo\r\n",
            b"RMSG $G foo 99999999999999999\r\n",
        ] {
            let mut p = RouteParser::new(4096);
            let mut buf = BytesMut::from(bad);
            assert!(
                p.parse(&mut buf).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut p = RouteParser::new(16);
        let mut buf = BytesMut::from(&[b'x'; 40][..]);
        assert_eq!(p.parse(&mut buf), Err(RouteParseError::MaxControlLine));
    }
}
