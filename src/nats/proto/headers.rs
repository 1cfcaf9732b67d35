//! NATS message header blocks (`NATS/1.0[ status[ description]]\r\n`
//! followed by `Name: value\r\n` lines and a blank line), as carried by
//! HPUB/HMSG.
//!
//! The server relays header blocks as opaque bytes; this parser exists for
//! consumers inside the process (the stenographer stores a plain client's
//! headers with the record). It never panics: a block that is not valid
//! yields the lines it could read, and malformed lines are skipped, because
//! a stored message must not be lost for a bad header.

use bytes::Bytes;

/// The version line every header block starts with.
const VERSION: &[u8] = b"NATS/1.0";

/// Name/value pairs of a header block, in order; repeated names repeat.
///
/// The status line (`NATS/1.0 503`) is not a header and is not returned.
/// Names and values are trimmed of surrounding spaces/tabs; values keep
/// their bytes (slices of `block`, no copy).
pub fn parse_headers(block: &Bytes) -> Vec<(String, Bytes)> {
    let mut out = Vec::new();
    if !block.starts_with(VERSION) {
        return out;
    }
    let mut lines = block.split(|b| *b == b'\n');
    // Skip the version/status line.
    lines.next();
    let base = block.as_ptr() as usize;
    for raw in lines {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.is_empty() {
            continue;
        }
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let name = trim(&line[..colon]);
        if name.is_empty() {
            continue;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        let value = trim(&line[colon + 1..]);
        // `value` is a sub-slice of `block`; recover its range to slice the
        // shared buffer instead of copying.
        let start = value.as_ptr() as usize - base;
        out.push((name.to_string(), block.slice(start..start + value.len())));
    }
    out
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &'static str) -> Vec<(String, String)> {
        parse_headers(&Bytes::from_static(s.as_bytes()))
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v.to_vec()).unwrap()))
            .collect()
    }

    #[test]
    fn names_values_order_and_repeats() {
        let h = parse("NATS/1.0\r\nA: 1\r\nTrace-Id:  x y \r\nA: 2\r\n\r\n");
        assert_eq!(
            h,
            vec![
                ("A".into(), "1".into()),
                ("Trace-Id".into(), "x y".into()),
                ("A".into(), "2".into())
            ]
        );
    }

    #[test]
    fn status_line_is_not_a_header() {
        assert!(parse("NATS/1.0 503\r\n\r\n").is_empty());
        let h = parse("NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\n\r\n");
        assert_eq!(h, vec![("Nats-Pending-Messages".into(), "1".into())]);
    }

    #[test]
    fn malformed_input_is_skipped_not_fatal() {
        assert!(parse("").is_empty());
        assert!(parse("HTTP/1.1 200\r\nA: 1\r\n\r\n").is_empty());
        let h = parse("NATS/1.0\r\nno colon\r\n: empty name\r\nB:\r\nC: 3");
        assert_eq!(h, vec![("B".into(), "".into()), ("C".into(), "3".into())]);
        let bin = Bytes::from_static(b"NATS/1.0\r\n\xff\xfe: v\r\nD: \xff\r\n\r\n");
        let h = parse_headers(&bin);
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].0, "D");
        assert_eq!(&h[0].1[..], b"\xff");
    }
}
