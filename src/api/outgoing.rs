//! A Subscribe stream's `Message`, encoded straight from the stored record.
//!
//! The generated `Message` holds its headers in a `HashMap` of owned
//! strings and its stream name as a `String`: building one per delivered
//! record would take a map, two header names, copies of the subject and
//! reply and of the stream name, and a hash of every header, all dropped as
//! soon as it is encoded. [`Outgoing`] keeps the record as the store decoded
//! it and writes the same protobuf fields from it, so a client decodes
//! exactly the `Message` built field by field (the tests compare the two;
//! the map's entries come in the record's order rather than a hash order).
//! The server only ever encodes it; decoding one yields the handshake
//! (fields are skipped).

use std::sync::Arc;

use bytes::{Buf, BufMut};
use prost::encoding::{
    encode_key, encode_varint, encoded_len_varint, key_len, skip_field, DecodeContext, WireType,
};
use prost::DecodeError;

use crate::store::Record;

/// Field numbers of `proto.Message` (proto/wire.proto).
mod field {
    pub const OFFSET: u32 = 1;
    pub const KEY: u32 = 2;
    pub const VALUE: u32 = 3;
    pub const TIMESTAMP: u32 = 4;
    pub const STREAM: u32 = 5;
    pub const PARTITION: u32 = 6;
    pub const SUBJECT: u32 = 7;
    pub const REPLY_SUBJECT: u32 = 8;
    pub const HEADERS: u32 = 9;
    /// Key and value of a map entry.
    pub const ENTRY_KEY: u32 = 1;
    pub const ENTRY_VALUE: u32 = 2;
}

/// The header names the stenographer adds to every delivered message.
const SUBJECT_HEADER: &str = "subject";
const REPLY_HEADER: &str = "reply";

/// One item of a Subscribe stream: the empty handshake that tells the
/// client its subscription is established (the default), or a stored
/// record.
#[derive(Debug, Default)]
pub struct Outgoing(Option<Delivered>);

/// A record of partition `partition` of stream `stream`.
#[derive(Debug)]
struct Delivered {
    /// Stream name, shared by every message of the subscription.
    stream: Arc<str>,
    partition: i32,
    record: Record,
}

impl Outgoing {
    /// The empty `Message` sent first.
    pub fn handshake() -> Self {
        Outgoing(None)
    }

    /// A record of `stream`'s partition `partition`.
    pub fn record(stream: Arc<str>, partition: i32, record: Record) -> Self {
        Outgoing(Some(Delivered {
            stream,
            partition,
            record,
        }))
    }
}

/// Encoded length of a length-delimited field `tag` of `len` bytes.
fn delimited_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

/// Length-delimited field `tag` unless empty (proto3 leaves defaults out).
fn put_delimited(tag: u32, data: &[u8], buf: &mut impl BufMut) {
    if !data.is_empty() {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(data.len() as u64, buf);
        buf.put_slice(data);
    }
}

fn opt_delimited_len(tag: u32, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        delimited_len(tag, len)
    }
}

/// Varint field `tag` unless zero.
fn put_varint(tag: u32, v: u64, buf: &mut impl BufMut) {
    if v != 0 {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(v, buf);
    }
}

fn opt_varint_len(tag: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(v)
    }
}

/// Length of a map entry's body: its key and value, each left out when
/// empty, as prost writes a `map<string, bytes>` entry.
fn entry_body_len(name: &str, value: &[u8]) -> usize {
    opt_delimited_len(field::ENTRY_KEY, name.len())
        + opt_delimited_len(field::ENTRY_VALUE, value.len())
}

fn put_entry(name: &str, value: &[u8], buf: &mut impl BufMut) {
    encode_key(field::HEADERS, WireType::LengthDelimited, buf);
    encode_varint(entry_body_len(name, value) as u64, buf);
    put_delimited(field::ENTRY_KEY, name.as_bytes(), buf);
    put_delimited(field::ENTRY_VALUE, value, buf);
}

fn entry_len(name: &str, value: &[u8]) -> usize {
    delimited_len(field::HEADERS, entry_body_len(name, value))
}

/// The record's own headers that reach the client: the stenographer's
/// `subject` and `reply` replace any of the same name.
fn own_headers(r: &Record) -> impl Iterator<Item = &(String, bytes::Bytes)> {
    r.headers
        .iter()
        .filter(|(n, _)| n != SUBJECT_HEADER && n != REPLY_HEADER)
}

impl Delivered {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        let r = &self.record;
        let reply = r.reply.as_deref().unwrap_or_default();
        put_varint(field::OFFSET, r.offset, buf);
        put_delimited(field::KEY, r.key.as_deref().unwrap_or_default(), buf);
        put_delimited(field::VALUE, &r.value, buf);
        put_varint(field::TIMESTAMP, r.timestamp_ns as u64, buf);
        put_delimited(field::STREAM, self.stream.as_bytes(), buf);
        put_varint(field::PARTITION, self.partition as i64 as u64, buf);
        put_delimited(field::SUBJECT, r.subject.as_bytes(), buf);
        put_delimited(field::REPLY_SUBJECT, reply.as_bytes(), buf);
        for (n, v) in own_headers(r) {
            put_entry(n, v, buf);
        }
        put_entry(SUBJECT_HEADER, r.subject.as_bytes(), buf);
        put_entry(REPLY_HEADER, reply.as_bytes(), buf);
    }

    fn encoded_len(&self) -> usize {
        let r = &self.record;
        let reply = r.reply.as_deref().unwrap_or_default();
        opt_varint_len(field::OFFSET, r.offset)
            + opt_delimited_len(field::KEY, r.key.as_ref().map_or(0, |k| k.len()))
            + opt_delimited_len(field::VALUE, r.value.len())
            + opt_varint_len(field::TIMESTAMP, r.timestamp_ns as u64)
            + opt_delimited_len(field::STREAM, self.stream.len())
            + opt_varint_len(field::PARTITION, self.partition as i64 as u64)
            + opt_delimited_len(field::SUBJECT, r.subject.len())
            + opt_delimited_len(field::REPLY_SUBJECT, reply.len())
            + own_headers(r).map(|(n, v)| entry_len(n, v)).sum::<usize>()
            + entry_len(SUBJECT_HEADER, r.subject.as_bytes())
            + entry_len(REPLY_HEADER, reply.as_bytes())
    }
}

impl prost::Message for Outgoing {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if let Some(d) = &self.0 {
            d.encode_raw(buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.as_ref().map_or(0, Delivered::encoded_len)
    }

    fn clear(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use prost::Message as _;

    use super::*;
    use crate::api::convert::record_to_message;
    use crate::api::proto;

    fn decoded(o: &Outgoing) -> proto::Message {
        let bytes = o.encode_to_vec();
        assert_eq!(bytes.len(), o.encoded_len());
        proto::Message::decode(&bytes[..]).expect("decodes as proto.Message")
    }

    fn record(offset: u64, headers: Vec<(String, Bytes)>, reply: Option<&str>) -> Record {
        Record {
            offset,
            timestamp_ns: 1_700_000_000_123_456_789,
            key: Some(Bytes::from_static(b"key")),
            headers,
            value: Bytes::from(vec![7u8; 1000]),
            subject: "orders.eu".into(),
            reply: reply.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn decodes_as_the_message_built_from_the_record() {
        let cases = [
            record(0, Vec::new(), None),
            record(
                42,
                vec![("h".into(), Bytes::from_static(b"v"))],
                Some("_INBOX.1"),
            ),
            record(
                u64::from(u32::MAX) + 9,
                vec![
                    ("empty".into(), Bytes::new()),
                    ("".into(), Bytes::from_static(b"no name")),
                    ("subject".into(), Bytes::from_static(b"forged")),
                    ("reply".into(), Bytes::from_static(b"forged")),
                    ("big".into(), Bytes::from(vec![1u8; 300])),
                ],
                Some(""),
            ),
            Record {
                timestamp_ns: -5,
                key: None,
                value: Bytes::new(),
                subject: String::new(),
                ..record(3, Vec::new(), None)
            },
        ];
        for (i, r) in cases.into_iter().enumerate() {
            let partition = i as i32 - 1;
            let want = record_to_message("stream-a", partition, r.clone());
            let got = decoded(&Outgoing::record("stream-a".into(), partition, r));
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn the_handshake_is_the_empty_message() {
        let h = Outgoing::handshake();
        assert_eq!(h.encoded_len(), 0);
        assert_eq!(decoded(&h), proto::Message::default());
    }
}
