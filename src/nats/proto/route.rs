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
//! Leafnode-origin operations (`LS+`, `LS-`, `LMSG`) are sent on routes
//! only to servers that announce `lnoc`; we never do, so on a route they
//! are protocol errors.
//!
//! The leaf-node protocol (spec `nats-parity.md` §3.3) is the same grammar
//! without the account field, with `LS+`/`LS-`/`LMSG` in place of
//! `RS+`/`RS-`/`RMSG` (`HMSG` keeps its name): a leaf connection is bound to
//! one account. [`Dialect`] selects which of the two a parser reads and an
//! encoder writes; a leaf operation carries an empty `account`.
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

/// Which of the two server-to-server protocols a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Routes: `RS+`/`RS-`/`RMSG`, with an account before the subject.
    Route,
    /// Leaf nodes: `LS+`/`LS-`/`LMSG`, no account.
    Leaf,
    /// A route pinned to one account (nats-server's dedicated account
    /// routes): `RS+`/`RS-`/`RMSG` without the account.
    Pinned,
}

impl Dialect {
    /// Arguments before the subject (the account on routes).
    fn account_args(self) -> usize {
        match self {
            Dialect::Route => 1,
            Dialect::Leaf | Dialect::Pinned => 0,
        }
    }
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

fn kind_of(dialect: Dialect, word: &[u8]) -> Option<Kind> {
    let (msg, sub, unsub): (&[u8], &[u8], &[u8]) = match dialect {
        Dialect::Route | Dialect::Pinned => (b"RMSG", b"RS+", b"RS-"),
        Dialect::Leaf => (b"LMSG", b"LS+", b"LS-"),
    };
    if msg.eq_ignore_ascii_case(word) {
        return Some(Kind::RMsg);
    }
    if sub.eq_ignore_ascii_case(word) {
        return Some(Kind::Sub);
    }
    if unsub.eq_ignore_ascii_case(word) {
        return Some(Kind::Unsub);
    }
    const OPS: &[(&[u8], Kind)] = &[
        (b"HMSG", Kind::HMsg),
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
    dialect: Dialect,
    max_control_line: usize,
    need: usize,
    args: Vec<(usize, usize)>,
}

impl RouteParser {
    /// A route parser with this control-line limit.
    pub fn new(max_control_line: usize) -> RouteParser {
        RouteParser::with_dialect(Dialect::Route, max_control_line)
    }

    /// A parser of `dialect` with this control-line limit.
    pub fn with_dialect(dialect: Dialect, max_control_line: usize) -> RouteParser {
        RouteParser {
            dialect,
            max_control_line,
            need: 0,
            args: Vec::with_capacity(8),
        }
    }

    /// Switches the dialect for the operations that follow (a route that
    /// turns out to be pinned to one account).
    pub fn set_dialect(&mut self, dialect: Dialect) {
        self.dialect = dialect;
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
        let kind = kind_of(self.dialect, &line[ws..we]).ok_or(RouteParseError::UnknownOp)?;
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
                let op = self.op_name(Kind::Sub);
                // Account (routes only), subject, then optionally queue and weight.
                let acc = self.dialect.account_args();
                let n = self.args.len() - 1 - acc;
                if n != 1 && n != 3 {
                    return Err(RouteParseError::BadArgs { op });
                }
                let weight = if n == 3 {
                    let (s, e) = self.args[acc + 3];
                    let w = parse_num(&line[s..e]).ok_or(RouteParseError::BadArgs { op })?;
                    Some(u32::try_from(w).unwrap_or(u32::MAX))
                } else {
                    None
                };
                let args = self.args.clone();
                let frame = buf.split_to(header_len).freeze();
                self.need = 0;
                let at = |k: usize| frame.slice(args[k].0..args[k].1);
                Ok(RouteParsed::Op(RouteOp::Sub {
                    account: if acc == 1 { at(1) } else { Bytes::new() },
                    subject: at(acc + 1),
                    queue: weight.map(|w| (at(acc + 2), w)),
                }))
            }
            Kind::Unsub => {
                let acc = self.dialect.account_args();
                let n = self.args.len() - 1 - acc;
                if n != 1 && n != 2 {
                    return Err(RouteParseError::BadArgs {
                        op: self.op_name(Kind::Unsub),
                    });
                }
                let args = self.args.clone();
                let frame = buf.split_to(header_len).freeze();
                self.need = 0;
                let at = |k: usize| frame.slice(args[k].0..args[k].1);
                Ok(RouteParsed::Op(RouteOp::Unsub {
                    account: if acc == 1 { at(1) } else { Bytes::new() },
                    subject: at(acc + 1),
                    queue: (n == 2).then(|| at(acc + 2)),
                }))
            }
            Kind::RMsg | Kind::HMsg => self.parse_msg(buf, kind == Kind::HMsg, header_len),
        }
    }

    /// The op word of `kind` in this parser's dialect (for errors).
    fn op_name(&self, kind: Kind) -> &'static str {
        match (self.dialect, kind) {
            (_, Kind::HMsg) => "HMSG",
            (Dialect::Route | Dialect::Pinned, Kind::Sub) => "RS+",
            (Dialect::Route | Dialect::Pinned, Kind::Unsub) => "RS-",
            (Dialect::Route | Dialect::Pinned, _) => "RMSG",
            (Dialect::Leaf, Kind::Sub) => "LS+",
            (Dialect::Leaf, Kind::Unsub) => "LS-",
            (Dialect::Leaf, _) => "LMSG",
        }
    }

    fn parse_msg(
        &mut self,
        buf: &mut BytesMut,
        with_headers: bool,
        header_len: usize,
    ) -> Result<RouteParsed, RouteParseError> {
        let op = self.op_name(if with_headers { Kind::HMsg } else { Kind::RMsg });
        let bad = RouteParseError::BadArgs { op };
        let acc = self.dialect.account_args();
        // Arguments after the op word; on a leaf there is no account.
        let a = &self.args[1..];
        let sizes = if with_headers { 2 } else { 1 };
        if a.len() < 1 + acc + sizes {
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
        let middle = &a[1 + acc..a.len() - sizes];
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
        let (acc_r, subj_r) = (a[0], a[acc]);
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
            account: if acc == 1 { at(acc_r) } else { Bytes::new() },
            subject: at(subj_r),
            reply: reply_r.map(at),
            queues: queues_r.into_iter().map(at).collect(),
            headers,
            payload,
        }))
    }
}

/// Appends an interest line: `<op> [<account>] <subject>[ <queue>[ <weight>]]\r\n`.
fn put_interest(
    buf: &mut BytesMut,
    op: &[u8],
    account: Option<&str>,
    subject: &str,
    queue: Option<(&str, Option<u32>)>,
) {
    buf.reserve(account.map_or(0, str::len) + subject.len() + 32);
    buf.put_slice(op);
    if let Some(a) = account {
        buf.put_slice(a.as_bytes());
        buf.put_u8(b' ');
    }
    buf.put_slice(subject.as_bytes());
    if let Some((q, w)) = queue {
        buf.put_u8(b' ');
        buf.put_slice(q.as_bytes());
        if let Some(w) = w {
            buf.put_u8(b' ');
            put_usize(buf, w as usize);
        }
    }
    buf.put_slice(b"\r\n");
}

/// Appends `RS+ <account> <subject> [<queue> <weight>]\r\n`.
pub fn encode_rs_plus(
    buf: &mut BytesMut,
    account: &str,
    subject: &str,
    queue: Option<(&str, u32)>,
) {
    put_interest(
        buf,
        b"RS+ ",
        Some(account),
        subject,
        queue.map(|(q, w)| (q, Some(w))),
    );
}

/// Appends `RS- <account> <subject> [<queue>]\r\n`.
pub fn encode_rs_minus(buf: &mut BytesMut, account: &str, subject: &str, queue: Option<&str>) {
    put_interest(
        buf,
        b"RS- ",
        Some(account),
        subject,
        queue.map(|q| (q, None)),
    );
}

/// Appends `RS+ <subject> [<queue> <weight>]\r\n` (a pinned route).
pub fn encode_pinned_plus(buf: &mut BytesMut, subject: &str, queue: Option<(&str, u32)>) {
    put_interest(
        buf,
        b"RS+ ",
        None,
        subject,
        queue.map(|(q, w)| (q, Some(w))),
    );
}

/// Appends `RS- <subject> [<queue>]\r\n` (a pinned route).
pub fn encode_pinned_minus(buf: &mut BytesMut, subject: &str, queue: Option<&str>) {
    put_interest(buf, b"RS- ", None, subject, queue.map(|q| (q, None)));
}

/// Appends `LS+ <subject> [<queue> <weight>]\r\n`.
pub fn encode_ls_plus(buf: &mut BytesMut, subject: &str, queue: Option<(&str, u32)>) {
    put_interest(
        buf,
        b"LS+ ",
        None,
        subject,
        queue.map(|(q, w)| (q, Some(w))),
    );
}

/// Appends `LS- <subject> [<queue>]\r\n`.
pub fn encode_ls_minus(buf: &mut BytesMut, subject: &str, queue: Option<&str>) {
    put_interest(buf, b"LS- ", None, subject, queue.map(|q| (q, None)));
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
    put_msg(
        buf,
        Dialect::Route,
        account,
        subject,
        reply,
        queues,
        headers,
        payload,
    );
}

/// Appends a message in `dialect`: `RMSG <account> …` on a route, `LMSG …`
/// (no account) on a leaf, `HMSG` in both when `headers` is given.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn put_msg(
    buf: &mut BytesMut,
    dialect: Dialect,
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
    buf.put_slice(match (headers.is_some(), dialect) {
        (true, _) => b"HMSG ",
        (false, Dialect::Route | Dialect::Pinned) => b"RMSG ",
        (false, Dialect::Leaf) => b"LMSG ",
    });
    if dialect == Dialect::Route {
        buf.put_slice(account);
        buf.put_u8(b' ');
    }
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
    fn leaf_dialect_round_trips_without_account() {
        let mut b = BytesMut::new();
        put_msg(&mut b, Dialect::Leaf, b"", b"foo", None, &[], None, b"hi");
        put_msg(
            &mut b,
            Dialect::Leaf,
            b"",
            b"foo",
            Some(b"_INBOX.1"),
            &[b"q1"],
            None,
            b"x",
        );
        put_msg(
            &mut b,
            Dialect::Leaf,
            b"",
            b"foo",
            Some(b"r"),
            &[],
            Some(b"NATS/1.0\r\n\r\n"),
            b"p",
        );
        encode_ls_plus(&mut b, "a.*", None);
        encode_ls_plus(&mut b, "a.b", Some(("grp", 2)));
        encode_ls_minus(&mut b, "a.b", Some("grp"));
        encode_ls_minus(&mut b, "a.*", None);
        assert!(b.starts_with(b"LMSG foo 2\r\nhi\r\nLMSG foo + _INBOX.1 q1 1\r\nx\r\n"));
        let mut p = RouteParser::with_dialect(Dialect::Leaf, 4096);
        let mut out = Vec::new();
        while let Ok(RouteParsed::Op(op)) = p.parse(&mut b) {
            out.push(op);
        }
        assert!(b.is_empty());
        assert_eq!(out.len(), 7);
        match &out[1] {
            RouteOp::Msg {
                account,
                subject,
                reply,
                queues,
                ..
            } => {
                assert!(account.is_empty());
                assert_eq!(&subject[..], b"foo");
                assert_eq!(reply.as_deref(), Some(&b"_INBOX.1"[..]));
                assert_eq!(queues, &vec![Bytes::from("q1")]);
            }
            o => panic!("{o:?}"),
        }
        match &out[2] {
            RouteOp::Msg {
                reply,
                headers,
                payload,
                ..
            } => {
                assert_eq!(reply.as_deref(), Some(&b"r"[..]));
                assert_eq!(headers.as_deref(), Some(&b"NATS/1.0\r\n\r\n"[..]));
                assert_eq!(&payload[..], b"p");
            }
            o => panic!("{o:?}"),
        }
        assert_eq!(
            out[4],
            RouteOp::Sub {
                account: Bytes::new(),
                subject: "a.b".into(),
                queue: Some(("grp".into(), 2))
            }
        );
        assert_eq!(
            out[6],
            RouteOp::Unsub {
                account: Bytes::new(),
                subject: "a.*".into(),
                queue: None
            }
        );
    }

    #[test]
    fn route_ops_are_errors_on_a_leaf_and_back() {
        for (dialect, bad) in [
            (Dialect::Leaf, &b"RS+ $G foo\r\n"[..]),
            (Dialect::Leaf, b"RMSG $G foo 1\r\nx\r\n"),
            (Dialect::Leaf, b"LS+\r\n"),
            (Dialect::Leaf, b"LS+ foo q\r\n"),
            (Dialect::Leaf, b"LS- foo q extra\r\n"),
            (Dialect::Leaf, b"LMSG foo ? q 1\r\n"),
            (Dialect::Leaf, b"LMSG 1\r\n"),
            (Dialect::Route, b"LMSG foo 1\r\nx\r\n"),
        ] {
            let mut p = RouteParser::with_dialect(dialect, 4096);
            let mut buf = BytesMut::from(bad);
            assert!(
                p.parse(&mut buf).is_err(),
                "{dialect:?} {:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_pinned_route_reads_operations_without_the_account() {
        let mut p = RouteParser::new(4096);
        let mut buf = BytesMut::from(&b"RS+ $G a.b\r\n"[..]);
        assert!(matches!(
            p.parse(&mut buf),
            Ok(RouteParsed::Op(RouteOp::Sub { ref account, .. })) if &account[..] == b"$G"
        ));
        p.set_dialect(Dialect::Pinned);
        buf.extend_from_slice(b"RS+ a.b q 2\r\nRS- a.b\r\nRMSG a.b reply 2\r\nhi\r\n");
        match p.parse(&mut buf) {
            Ok(RouteParsed::Op(RouteOp::Sub {
                account,
                subject,
                queue: Some((q, 2)),
            })) => assert!(account.is_empty() && &subject[..] == b"a.b" && &q[..] == b"q"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            p.parse(&mut buf),
            Ok(RouteParsed::Op(RouteOp::Unsub { ref account, ref subject, queue: None }))
                if account.is_empty() && &subject[..] == b"a.b"
        ));
        match p.parse(&mut buf) {
            Ok(RouteParsed::Op(RouteOp::Msg {
                account,
                subject,
                reply: Some(r),
                payload,
                ..
            })) => {
                assert!(account.is_empty());
                assert_eq!(
                    (&subject[..], &r[..], &payload[..]),
                    (&b"a.b"[..], &b"reply"[..], &b"hi"[..])
                );
            }
            other => panic!("{other:?}"),
        }
        // Leaf words stay errors on a pinned route.
        let mut buf = BytesMut::from(&b"LS+ a.b\r\n"[..]);
        assert!(p.parse(&mut buf).is_err());
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
