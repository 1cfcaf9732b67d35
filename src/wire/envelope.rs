//! The Liftbridge envelope: the 8- or 12-byte header that frames protobuf
//! payloads carried over NATS (publishes with type 0, acks with type 1).
//!
//! Layout: magic `B9 0E 43 B4`, version 0, header length (8, or 12 with a
//! CRC), flags (bit 0 = CRC-32C present), message type, then optionally the
//! big-endian CRC-32C of the payload. Pure code: bytes in, values out; no I/O.
//! A payload that fails any check is an error here; callers of the publish
//! path then treat it as a raw (non-enveloped) message, as Liftbridge does.

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message as _;

use super::pb;

/// The four magic bytes that start every envelope.
pub const MAGIC: [u8; 4] = [0xB9, 0x0E, 0x43, 0xB4];
/// The only envelope version that exists.
pub const VERSION: u8 = 0;
/// Header length without CRC.
const HEADER_LEN: usize = 8;
/// Header length with the CRC-32C field.
const HEADER_LEN_CRC: usize = 12;
/// Flag bit: a CRC-32C of the payload follows the fixed header.
const FLAG_CRC: u8 = 0x01;

/// Envelope message types: the client-facing ones (publish, ack) and the
/// ones nodes exchange (replication), numbered as Liftbridge numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MsgType {
    /// A `proto.Message` to record.
    Publish = 0,
    /// A `proto.Ack` sent to an ack inbox.
    Ack = 1,
    /// A `proto.ReplicationRequest` (follower fetch).
    ReplicationRequest = 2,
    /// A fetch answer: leader epoch, high watermark, records (see
    /// `wire::replication`).
    ReplicationResponse = 3,
    /// A `proto.LeaderEpochOffsetRequest`.
    LeaderEpochOffsetRequest = 6,
    /// A `proto.LeaderEpochOffsetResponse`.
    LeaderEpochOffsetResponse = 7,
    /// A `proto.PartitionNotification`.
    PartitionNotification = 14,
}

/// Why a payload is not a valid envelope.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvelopeError {
    /// Fewer bytes than a header.
    #[error("payload too short for an envelope ({0} bytes)")]
    TooShort(usize),
    /// The magic number does not match.
    #[error("bad envelope magic")]
    BadMagic,
    /// An unknown envelope version.
    #[error("unsupported envelope version {0}")]
    BadVersion(u8),
    /// Header length inconsistent with the flags or the data.
    #[error("bad envelope header length {0}")]
    BadHeaderLen(u8),
    /// Another message type than the expected one.
    #[error("envelope type {got}, expected {want}")]
    WrongType {
        /// The type found.
        got: u8,
        /// The type expected.
        want: u8,
    },
    /// The CRC-32C does not match the payload.
    #[error("envelope CRC mismatch")]
    BadCrc,
    /// The protobuf payload does not decode.
    #[error("envelope payload: {0}")]
    Decode(#[from] prost::DecodeError),
}

/// Frames `payload` with a header of type `t` (no CRC, as servers write).
pub fn encode_raw(t: MsgType, payload: &[u8], with_crc: bool) -> Bytes {
    let hl = if with_crc { HEADER_LEN_CRC } else { HEADER_LEN };
    let mut b = BytesMut::with_capacity(hl + payload.len());
    b.put_slice(&MAGIC);
    b.put_u8(VERSION);
    b.put_u8(hl as u8);
    b.put_u8(if with_crc { FLAG_CRC } else { 0 });
    b.put_u8(t as u8);
    if with_crc {
        b.put_u32(crc32c::crc32c(payload));
    }
    b.put_slice(payload);
    b.freeze()
}

/// Checks the header and returns the payload slice of an envelope of type `want`.
pub fn decode_raw(data: &[u8], want: MsgType) -> Result<&[u8], EnvelopeError> {
    if data.len() < HEADER_LEN {
        return Err(EnvelopeError::TooShort(data.len()));
    }
    if data[0..4] != MAGIC {
        return Err(EnvelopeError::BadMagic);
    }
    if data[4] != VERSION {
        return Err(EnvelopeError::BadVersion(data[4]));
    }
    let hl = data[5];
    let flags = data[6];
    let crc = flags & FLAG_CRC != 0;
    // Liftbridge slices the payload at the header length it is given and
    // only insists on the exact length when a CRC is flagged; a length past
    // the data is an error here (Liftbridge would fail on it too).
    if (crc && hl as usize != HEADER_LEN_CRC) || data.len() < hl as usize {
        return Err(EnvelopeError::BadHeaderLen(hl));
    }
    if data[7] != want as u8 {
        return Err(EnvelopeError::WrongType {
            got: data[7],
            want: want as u8,
        });
    }
    let payload = &data[hl as usize..];
    if crc {
        let stored = u32::from_be_bytes([data[8], data[9], data[10], data[11]]);
        if crc32c::crc32c(payload) != stored {
            return Err(EnvelopeError::BadCrc);
        }
    }
    Ok(payload)
}

/// Encodes a publish envelope around `msg`.
pub fn encode_message(msg: &pb::Message) -> Bytes {
    encode_framed(MsgType::Publish, msg)
}

/// The length of `msg`'s publish envelope, without encoding it.
pub fn message_len(msg: &pb::Message) -> usize {
    HEADER_LEN + prost::Message::encoded_len(msg)
}

/// Frames a protobuf message with a header of type `t` (no CRC), encoding
/// it straight after the header: one buffer, no intermediate copy.
pub(crate) fn encode_framed(t: MsgType, msg: &impl prost::Message) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER_LEN + msg.encoded_len());
    b.put_slice(&MAGIC);
    b.put_u8(VERSION);
    b.put_u8(HEADER_LEN as u8);
    b.put_u8(0);
    b.put_u8(t as u8);
    // A BytesMut grows as needed, so encoding into it cannot run out of room.
    let _ = msg.encode(&mut b);
    b.freeze()
}

/// Decodes a publish envelope; `Err` means "treat the payload as raw".
pub fn decode_message(data: &[u8]) -> Result<pb::Message, EnvelopeError> {
    let p = decode_raw(data, MsgType::Publish)?;
    Ok(pb::Message::decode(p)?)
}

/// Like [`decode_message`], but the key and value are slices of `data`
/// (prost takes `Bytes` fields out of a `Bytes` buffer without copying):
/// the stenographer's path, where the value would otherwise be copied once
/// more per message.
pub fn decode_message_shared(data: &Bytes) -> Result<pb::Message, EnvelopeError> {
    let p = decode_raw(data, MsgType::Publish)?;
    let start = data.len() - p.len();
    Ok(pb::Message::decode(data.slice(start..))?)
}

/// Encodes an ack envelope.
pub fn encode_ack(ack: &pb::Ack) -> Bytes {
    encode_framed(MsgType::Ack, ack)
}

/// Decodes an ack envelope.
pub fn decode_ack(data: &[u8]) -> Result<pb::Ack, EnvelopeError> {
    let p = decode_raw(data, MsgType::Ack)?;
    Ok(pb::Ack::decode(p)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_len_is_the_encoded_length() {
        let mut m = pb::Message::default();
        assert_eq!(message_len(&m), encode_message(&m).len());
        m.value = Bytes::from(vec![7u8; 1500]);
        m.key = Bytes::from_static(b"key");
        m.headers.insert("h".into(), Bytes::from_static(b"v"));
        m.ack_inbox = "inbox.1".into();
        m.correlation_id = "c".into();
        m.offset = -1;
        assert_eq!(message_len(&m), encode_message(&m).len());
    }

    #[test]
    fn message_roundtrip_without_and_with_crc() {
        let m = pb::Message {
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"hello"),
            ack_inbox: "inbox".into(),
            offset: -1,
            ..Default::default()
        };
        let e = encode_message(&m);
        assert_eq!(&e[..8], &[0xB9, 0x0E, 0x43, 0xB4, 0, 8, 0, 0]);
        assert_eq!(decode_message(&e).unwrap(), m);
        let c = encode_raw(MsgType::Publish, &m.encode_to_vec(), true);
        assert_eq!(c[5], 12);
        assert_eq!(decode_message(&c).unwrap(), m);
        assert_eq!(decode_message_shared(&c).unwrap(), m);
        // The shared form hands out slices of the envelope's buffer.
        let shared = decode_message_shared(&e).unwrap();
        assert_eq!(shared, m);
        let range = e.as_ptr() as usize..e.as_ptr() as usize + e.len();
        assert!(range.contains(&(shared.value.as_ptr() as usize)));
        assert_eq!(
            decode_message_shared(&Bytes::from_static(b"hello world")).unwrap_err(),
            EnvelopeError::BadMagic
        );
    }

    #[test]
    fn rejects_bad_inputs() {
        let m = pb::Message::default();
        assert!(matches!(
            decode_message(b"abc"),
            Err(EnvelopeError::TooShort(3))
        ));
        assert_eq!(
            decode_message(b"hello world").unwrap_err(),
            EnvelopeError::BadMagic
        );
        let mut v = encode_message(&m).to_vec();
        v[4] = 1;
        assert_eq!(
            decode_message(&v).unwrap_err(),
            EnvelopeError::BadVersion(1)
        );
        let ack = encode_ack(&pb::Ack::default());
        assert!(matches!(
            decode_message(&ack),
            Err(EnvelopeError::WrongType { got: 1, want: 0 })
        ));
        let mut c = encode_raw(MsgType::Publish, &[8, 1], true).to_vec();
        c[8] ^= 0xFF;
        assert_eq!(decode_message(&c).unwrap_err(), EnvelopeError::BadCrc);
        // CRC flagged with a header too short for it
        let mut h = encode_raw(MsgType::Publish, &[8, 1], true).to_vec();
        h[5] = 8;
        assert!(matches!(
            decode_message(&h),
            Err(EnvelopeError::BadHeaderLen(8))
        ));
        // a header length past the data
        let mut h = encode_message(&m).to_vec();
        h[5] = 200;
        assert!(matches!(
            decode_message(&h),
            Err(EnvelopeError::BadHeaderLen(200))
        ));
    }

    /// Without a CRC flag, the header length slices the payload, whatever
    /// it is (Liftbridge's rule): padding after the fixed header is skipped.
    #[test]
    fn header_length_without_crc_slices_the_payload() {
        let m = pb::Message {
            value: Bytes::from_static(b"padded"),
            ..Default::default()
        };
        let body = m.encode_to_vec();
        let mut h = encode_raw(MsgType::Publish, &[], false).to_vec();
        h[5] = 12;
        h.extend_from_slice(&[0xAA; 4]);
        h.extend_from_slice(&body);
        assert_eq!(decode_message(&h).unwrap(), m);
    }

    #[test]
    fn ack_roundtrip() {
        let a = pb::Ack {
            stream: "s".into(),
            offset: 42,
            ack_error: pb::ack::Error::TooLarge as i32,
            ..Default::default()
        };
        assert_eq!(decode_ack(&encode_ack(&a)).unwrap(), a);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        const TYPES: [MsgType; 7] = [
            MsgType::Publish,
            MsgType::Ack,
            MsgType::ReplicationRequest,
            MsgType::ReplicationResponse,
            MsgType::LeaderEpochOffsetRequest,
            MsgType::LeaderEpochOffsetResponse,
            MsgType::PartitionNotification,
        ];

        fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
            proptest::collection::vec(any::<u8>(), 0..max)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Any bytes, or a valid header followed by any bytes, decode to
            /// a value or an error for every type: never a panic.
            #[test]
            fn any_bytes_never_panic(data in bytes(80), t in 0usize..7, header in any::<bool>()) {
                let mut v = Vec::new();
                if header {
                    v.extend_from_slice(&MAGIC);
                    v.push(VERSION);
                }
                v.extend_from_slice(&data);
                let _ = decode_raw(&v, TYPES[t]);
                let _ = decode_message(&v);
                let _ = decode_ack(&v);
            }

            /// Frames round-trip with and without a CRC, are refused as
            /// another type, and a flipped payload bit under a CRC is
            /// refused as such.
            #[test]
            fn raw_frames_round_trip(
                payload in bytes(200), t in 0usize..7, other in 0usize..7,
                crc in any::<bool>(), flip in any::<proptest::sample::Index>(), bit in 0u8..8,
            ) {
                let e = encode_raw(TYPES[t], &payload, crc);
                prop_assert_eq!(decode_raw(&e, TYPES[t]).unwrap(), &payload[..]);
                if other != t {
                    let wrong = matches!(
                        decode_raw(&e, TYPES[other]),
                        Err(EnvelopeError::WrongType { .. })
                    );
                    prop_assert!(wrong);
                }
                if crc && !payload.is_empty() {
                    let mut v = e.to_vec();
                    v[HEADER_LEN_CRC + flip.index(payload.len())] ^= 1 << bit;
                    prop_assert_eq!(decode_raw(&v, TYPES[t]).unwrap_err(), EnvelopeError::BadCrc);
                }
            }

            /// Publish and ack payloads round-trip through their envelope.
            #[test]
            fn messages_and_acks_round_trip(
                key in bytes(20), value in bytes(200), offset in any::<i64>(),
                timestamp in any::<i64>(), subject in "\\PC{0,16}", reply in "\\PC{0,16}",
                inbox in "\\PC{0,16}", cid in "\\PC{0,16}", policy in 0i32..3,
                headers in proptest::collection::hash_map("\\PC{0,8}", bytes(8), 0..4),
            ) {
                let m = pb::Message {
                    offset,
                    key: Bytes::from(key),
                    value: Bytes::from(value),
                    timestamp,
                    subject: subject.clone(),
                    reply_subject: reply,
                    headers: headers.into_iter().map(|(k, v)| (k, Bytes::from(v))).collect(),
                    ack_inbox: inbox.clone(),
                    correlation_id: cid.clone(),
                    ack_policy: policy,
                    ..Default::default()
                };
                prop_assert_eq!(decode_message(&encode_message(&m)).unwrap(), m);
                let a = pb::Ack {
                    stream: subject,
                    offset,
                    ack_inbox: inbox,
                    correlation_id: cid,
                    ack_policy: policy,
                    commit_timestamp: timestamp,
                    ..Default::default()
                };
                prop_assert_eq!(decode_ack(&encode_ack(&a)).unwrap(), a);
            }
        }
    }
}
