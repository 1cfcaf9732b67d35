//! What nodes exchange to replicate partitions over NATS: the follower's
//! fetch request, the leader's answer, the leader-epoch offset request and
//! answer, and the new-data notification.
//!
//! Requests and notifications are protobuf messages in an envelope (types
//! 2, 6, 7 and 14). The fetch answer (type 3) is, after the envelope
//! header, the leader epoch (8 bytes, big endian), the high watermark (8
//! bytes, big endian, signed: -1 = nothing committed) and a message set:
//! entries of offset (8 bytes), length (4 bytes) and that many bytes of an
//! encoded record (the store's record encoding, opaque here). Flag bit
//! 0x02 of the envelope header marks an answer to a fetch the leader held
//! (the follower may fetch again at once: the leader holds it again rather
//! than answering "nothing new" in a loop). Pure code:
//! a malformed answer is an error, never a panic.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message as _;

use super::envelope::{decode_raw, encode_framed, EnvelopeError, MsgType, MAGIC, VERSION};
use super::pb;

/// Envelope header length of a fetch answer (no CRC).
const HEADER_LEN: usize = 8;
/// Leader epoch + high watermark after the header.
const FIXED_LEN: usize = 16;
/// Offset + length before each record of a message set.
pub const ENTRY_OVERHEAD: usize = 12;
/// Bytes of a fetch answer before its first entry.
pub const ANSWER_FIXED_LEN: usize = HEADER_LEN + FIXED_LEN;
/// Envelope flag of an answer to a held fetch.
const FLAG_HELD: u8 = 0x02;
/// Where the envelope's flags are.
const FLAGS_AT: usize = 6;

/// Why a fetch answer cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplicationError {
    /// The envelope is wrong.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// The answer ends inside its fixed fields or inside an entry.
    #[error("truncated replication answer")]
    Truncated,
}

/// Encodes a follower's fetch request.
pub fn encode_fetch(req: &pb::ReplicationRequest) -> Bytes {
    encode_framed(MsgType::ReplicationRequest, req)
}

/// Decodes a follower's fetch request.
pub fn decode_fetch(data: &[u8]) -> Result<pb::ReplicationRequest, EnvelopeError> {
    let p = decode_raw(data, MsgType::ReplicationRequest)?;
    Ok(pb::ReplicationRequest::decode(p)?)
}

/// Encodes a leader-epoch offset request.
pub fn encode_epoch_request(req: &pb::LeaderEpochOffsetRequest) -> Bytes {
    encode_framed(MsgType::LeaderEpochOffsetRequest, req)
}

/// Decodes a leader-epoch offset request.
pub fn decode_epoch_request(data: &[u8]) -> Result<pb::LeaderEpochOffsetRequest, EnvelopeError> {
    let p = decode_raw(data, MsgType::LeaderEpochOffsetRequest)?;
    Ok(pb::LeaderEpochOffsetRequest::decode(p)?)
}

/// Encodes a leader-epoch offset answer.
pub fn encode_epoch_response(r: &pb::LeaderEpochOffsetResponse) -> Bytes {
    encode_framed(MsgType::LeaderEpochOffsetResponse, r)
}

/// Decodes a leader-epoch offset answer.
pub fn decode_epoch_response(data: &[u8]) -> Result<pb::LeaderEpochOffsetResponse, EnvelopeError> {
    let p = decode_raw(data, MsgType::LeaderEpochOffsetResponse)?;
    Ok(pb::LeaderEpochOffsetResponse::decode(p)?)
}

/// Encodes a new-data notification.
pub fn encode_notification(n: &pb::PartitionNotification) -> Bytes {
    encode_framed(MsgType::PartitionNotification, n)
}

/// Decodes a new-data notification.
pub fn decode_notification(data: &[u8]) -> Result<pb::PartitionNotification, EnvelopeError> {
    let p = decode_raw(data, MsgType::PartitionNotification)?;
    Ok(pb::PartitionNotification::decode(p)?)
}

/// Builds a fetch answer: push encoded records, then `finish`.
pub struct ResponseWriter {
    buf: BytesMut,
    entries: usize,
}

impl ResponseWriter {
    /// Starts an answer from a leader in `leader_epoch` whose high
    /// watermark is `hw` (-1 = nothing committed), with room for
    /// `capacity` bytes of entries.
    pub fn new(leader_epoch: u64, hw: i64, capacity: usize) -> ResponseWriter {
        let mut buf = BytesMut::with_capacity(ANSWER_FIXED_LEN + capacity);
        buf.put_slice(&MAGIC);
        buf.put_u8(VERSION);
        buf.put_u8(HEADER_LEN as u8);
        buf.put_u8(0);
        buf.put_u8(MsgType::ReplicationResponse as u8);
        buf.put_u64(leader_epoch);
        buf.put_i64(hw);
        ResponseWriter { buf, entries: 0 }
    }

    /// Adds the record at `offset`, already encoded; `fill` writes exactly
    /// `len` bytes.
    pub fn push_with(&mut self, offset: u64, len: usize, fill: impl FnOnce(&mut [u8])) {
        self.buf.put_u64(offset);
        self.buf.put_u32(len as u32);
        let start = self.buf.len();
        self.buf.resize(start + len, 0);
        fill(&mut self.buf[start..]);
        self.entries += 1;
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether no record was added.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Marks the answer as one to a fetch the leader held (see the module
    /// documentation).
    pub fn set_held(&mut self) {
        self.buf[FLAGS_AT] |= FLAG_HELD;
    }

    /// The finished answer.
    pub fn finish(self) -> Bytes {
        self.buf.freeze()
    }
}

/// A decoded fetch answer; `records` are (offset, encoded record) pairs
/// sharing the answer's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    /// Leader epoch of the node that answered.
    pub leader_epoch: u64,
    /// Its high watermark, -1 when nothing is committed.
    pub hw: i64,
    /// The records, in offset order as sent.
    pub records: Vec<(u64, Bytes)>,
    /// The leader held the fetch (it holds the next one too).
    pub held: bool,
}

/// Decodes a fetch answer.
pub fn decode_response(data: Bytes) -> Result<FetchResponse, ReplicationError> {
    let hl = {
        let p = decode_raw(&data, MsgType::ReplicationResponse)?;
        data.len() - p.len()
    };
    let held = data[FLAGS_AT] & FLAG_HELD != 0;
    let mut rest = data.slice(hl..);
    if rest.len() < FIXED_LEN {
        return Err(ReplicationError::Truncated);
    }
    let leader_epoch = rest.get_u64();
    let hw = rest.get_i64();
    let mut records = Vec::new();
    while !rest.is_empty() {
        if rest.len() < ENTRY_OVERHEAD {
            return Err(ReplicationError::Truncated);
        }
        let offset = rest.get_u64();
        let len = rest.get_u32() as usize;
        if rest.len() < len {
            return Err(ReplicationError::Truncated);
        }
        records.push((offset, rest.split_to(len)));
    }
    Ok(FetchResponse {
        leader_epoch,
        hw,
        records,
        held,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_answer_roundtrip() {
        let mut w = ResponseWriter::new(7, 41, 64);
        assert!(w.is_empty());
        w.push_with(40, 3, |b| b.copy_from_slice(b"abc"));
        w.push_with(42, 0, |_| {});
        let r = decode_response(w.finish()).unwrap();
        assert_eq!(r.leader_epoch, 7);
        assert_eq!(r.hw, 41);
        assert_eq!(
            r.records,
            vec![(40, Bytes::from_static(b"abc")), (42, Bytes::new())]
        );
        assert!(!r.held);
        let mut w = ResponseWriter::new(7, 42, 0);
        w.set_held();
        let r = decode_response(w.finish()).unwrap();
        assert!(r.held && r.records.is_empty());
        assert_eq!((r.leader_epoch, r.hw), (7, 42));
    }

    #[test]
    fn truncated_or_foreign_answers_are_errors() {
        let mut w = ResponseWriter::new(1, -1, 8);
        w.push_with(0, 4, |b| b.copy_from_slice(b"data"));
        let full = w.finish();
        for cut in [full.len() - 1, full.len() - 5, HEADER_LEN + 3] {
            assert!(
                decode_response(full.slice(..cut)).is_err(),
                "cut at {cut} must not decode"
            );
        }
        let req = encode_fetch(&pb::ReplicationRequest {
            replica_id: "b".into(),
            offset: 3,
            leader_epoch: 2,
            written: 3,
            wait_ms: 500,
            hw: 2,
        });
        assert!(matches!(
            decode_response(req.clone()),
            Err(ReplicationError::Envelope(EnvelopeError::WrongType { .. }))
        ));
        assert_eq!(decode_fetch(&req).unwrap().offset, 3);
        assert!(decode_response(Bytes::from_static(b"garbage")).is_err());
    }

    #[test]
    fn small_messages_roundtrip() {
        let e = encode_epoch_request(&pb::LeaderEpochOffsetRequest { leader_epoch: 9 });
        assert_eq!(decode_epoch_request(&e).unwrap().leader_epoch, 9);
        let e = encode_epoch_response(&pb::LeaderEpochOffsetResponse {
            end_offset: 12,
            leader_epoch: 3,
            epoch: 2,
        });
        assert_eq!(decode_epoch_response(&e).unwrap().end_offset, 12);
        let n = encode_notification(&pb::PartitionNotification {
            stream: "s".into(),
            partition: 2,
        });
        assert_eq!(decode_notification(&n).unwrap().partition, 2);
        assert!(decode_notification(&e).is_err());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Any bytes after a fetch-answer header, or none at all,
            /// decode to an answer or an error: never a panic.
            #[test]
            fn any_answer_bytes_never_panic(
                data in proptest::collection::vec(any::<u8>(), 0..120), header in any::<bool>(),
            ) {
                let mut v = Vec::new();
                if header {
                    v.extend_from_slice(&MAGIC);
                    v.extend_from_slice(&[VERSION, HEADER_LEN as u8, 0, MsgType::ReplicationResponse as u8]);
                }
                v.extend_from_slice(&data);
                let v = Bytes::from(v);
                let _ = decode_response(v.clone());
                let _ = decode_fetch(&v);
                let _ = decode_epoch_request(&v);
                let _ = decode_epoch_response(&v);
                let _ = decode_notification(&v);
            }

            /// A written answer decodes to what was written; every strict
            /// prefix of it that cuts an entry is refused as truncated.
            #[test]
            fn answers_round_trip_and_prefixes_are_truncated(
                epoch in any::<u64>(), hw in any::<i64>(),
                records in proptest::collection::vec(
                    (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..40)), 0..8),
                cut in any::<proptest::sample::Index>(),
            ) {
                let mut w = ResponseWriter::new(epoch, hw, 64);
                for (o, r) in &records {
                    w.push_with(*o, r.len(), |b| b.copy_from_slice(r));
                }
                let data = w.finish();
                let got = decode_response(data.clone()).unwrap();
                prop_assert_eq!(got.leader_epoch, epoch);
                prop_assert_eq!(got.hw, hw);
                let want: Vec<(u64, Bytes)> =
                    records.iter().map(|(o, r)| (*o, Bytes::from(r.clone()))).collect();
                prop_assert_eq!(got.records, want);
                // Cut inside the fixed fields or inside the last entry.
                let at = cut.index(data.len());
                let ends_an_entry = {
                    let mut pos = HEADER_LEN + FIXED_LEN;
                    let mut ends = vec![pos];
                    for (_, r) in &records {
                        pos += ENTRY_OVERHEAD + r.len();
                        ends.push(pos);
                    }
                    ends.contains(&at)
                };
                if !ends_an_entry {
                    prop_assert!(decode_response(data.slice(..at)).is_err());
                }
            }

            /// The small messages round-trip through their envelopes.
            #[test]
            fn small_messages_round_trip_props(
                replica in "\\PC{0,12}", offset in any::<i64>(), epoch in any::<u64>(),
                stream in "\\PC{0,12}", partition in any::<i32>(),
            ) {
                let f = pb::ReplicationRequest {
                    replica_id: replica,
                    offset,
                    leader_epoch: epoch,
                    ..Default::default()
                };
                prop_assert_eq!(decode_fetch(&encode_fetch(&f)).unwrap(), f);
                let q = pb::LeaderEpochOffsetRequest { leader_epoch: epoch };
                prop_assert_eq!(decode_epoch_request(&encode_epoch_request(&q)).unwrap(), q);
                let a = pb::LeaderEpochOffsetResponse { end_offset: offset, ..Default::default() };
                prop_assert_eq!(decode_epoch_response(&encode_epoch_response(&a)).unwrap(), a);
                let n = pb::PartitionNotification { stream, partition };
                prop_assert_eq!(decode_notification(&encode_notification(&n)).unwrap(), n);
            }
        }
    }
}
