//! The bodies of the cargo-fuzz targets in `fuzz/`: one plain function per
//! target, each taking the fuzzer's bytes and asserting the target's
//! property (a panic is a finding).
//!
//! Role: keep the targets compiled and exercised by the normal test suite.
//! `fuzz/` is a crate of its own that only `cargo fuzz` (nightly) builds;
//! its targets are one-line calls to these functions, so an API change that
//! would break them breaks the main crate's build instead, and the tests
//! below run every body on valid encodings, their truncations and flipped
//! bytes, and random input.
//!
//! Must not: do I/O beyond what the parsers themselves do (the
//! configuration parsers resolve includes against a directory that does
//! not exist), or hold state between calls.

use std::path::Path;

use bytes::{Bytes, BytesMut};

use crate::config::{liftbridge, nats_conf};
use crate::nats::proto::{Parsed, Parser};
use crate::nats::s2;
use crate::store::codec;
use crate::wire::{envelope, replication};

/// The NATS client protocol parser: any byte stream, split at any point,
/// parses to operations or an error, never a panic, and never consumes
/// bytes when it asks for more. The first byte picks where the stream is
/// split into two reads.
pub fn nats_parser(data: &[u8]) {
    let (split, data) = match data.split_first() {
        Some((s, rest)) => (*s as usize % (rest.len() + 1), rest),
        None => return,
    };
    let mut p = Parser::new(4096, 64 * 1024);
    let mut buf = BytesMut::new();
    for chunk in [&data[..split], &data[split..]] {
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match p.parse(&mut buf) {
                Ok(Parsed::Op(_)) => assert!(buf.len() < before, "an operation consumed nothing"),
                Ok(_) => {
                    assert_eq!(buf.len(), before, "waiting for more consumed bytes");
                    break;
                }
                Err(_) => return,
            }
        }
    }
}

/// The envelope decoder (publishes and acks from NATS clients): any bytes
/// decode or fail, never panic; a decoded message re-encodes to bytes that
/// decode to the same message.
pub fn envelope(data: &[u8]) {
    if let Ok(m) = envelope::decode_message(data) {
        let again = envelope::decode_message(&envelope::encode_message(&m)).expect("re-encoded");
        assert_eq!(again, m);
    }
    if let Ok(a) = envelope::decode_ack(data) {
        let again = envelope::decode_ack(&envelope::encode_ack(&a)).expect("re-encoded");
        assert_eq!(again, a);
    }
}

/// What nodes exchange to replicate: any bytes decode or fail as a fetch
/// request, fetch answer, epoch request/answer or notification, never
/// panic; a decoded fetch answer's records lie within the input.
pub fn replication(data: &[u8]) {
    let _ = replication::decode_fetch(data);
    let _ = replication::decode_epoch_request(data);
    let _ = replication::decode_epoch_response(data);
    let _ = replication::decode_notification(data);
    if let Ok(resp) = replication::decode_response(Bytes::copy_from_slice(data)) {
        let len: usize = resp
            .records
            .iter()
            .map(|(_, b)| b.len() + replication::ENTRY_OVERHEAD)
            .sum();
        assert!(len <= data.len());
    }
}

/// The stored record and chunk encodings (bytes read back from disk): any
/// bytes decode or fail, never panic; a decoded record re-encodes to the
/// same bytes (the encoding is canonical) and its length is `encoded_len`.
pub fn record_codec(data: &[u8]) {
    if let Ok(r) = codec::decode(0, Bytes::copy_from_slice(data)) {
        let rr = codec::RecordRef::from_record(&r);
        let enc = codec::encode(&rr).expect("a decoded record encodes");
        assert_eq!(enc.len(), codec::encoded_len(&rr));
        assert_eq!(&enc[..], data);
    }
    let _ = codec::peek_key(data);
    let _ = codec::peek_timestamp(data);
    let _ = codec::peek_epoch(data);
    if let Ok(entries) = codec::chunk_entry_list(data) {
        for e in entries {
            let _ = codec::decode(e.offset, Bytes::copy_from_slice(&data[e.start..e.end]));
        }
    }
}

/// The S2 stream decoder of compressed routes and leaf links: any bytes,
/// split at any point, decode or fail with an error, never a panic, and a
/// partial chunk waits for the rest. Decoded output re-encodes (at the
/// level the first byte picks) to a stream that decodes to the same bytes.
pub fn s2_stream(data: &[u8]) {
    let (split, data) = match data.split_first() {
        Some((s, rest)) => (*s as usize % (rest.len() + 1), rest),
        None => return,
    };
    let mut input = BytesMut::new();
    let mut out = BytesMut::new();
    for chunk in [&data[..split], &data[split..]] {
        input.extend_from_slice(chunk);
        if s2::decode_chunks(&mut input, &mut out).is_err() {
            return;
        }
    }
    let level = match split % 4 {
        0 => s2::Level::Uncompressed,
        1 => s2::Level::Fast,
        2 => s2::Level::Better,
        _ => s2::Level::Best,
    };
    let mut framed = BytesMut::new();
    s2::encode_stream(&out, level, &mut framed);
    let mut again = BytesMut::new();
    s2::decode_chunks(&mut framed, &mut again).expect("re-encoded stream decodes");
    assert!(framed.is_empty(), "whole chunks left undecoded");
    assert_eq!(again, out);
}

/// The nats-server configuration parser (the embedded server's config file
/// and `liftbridge nats-server -c`): any text parses or fails with an
/// error, never a panic.
pub fn nats_conf(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        // Includes are resolved against a directory that does not exist.
        let origin = Path::new("/nonexistent/fuzz.conf");
        let _ = nats_conf::parse_str(text, origin);
        let _ = nats_conf::from_str(text, origin);
    }
}

/// The liftbridge.yaml loader: any text is a configuration or an error
/// naming the key, never a panic.
pub fn liftbridge_yaml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = liftbridge::from_yaml_str(text, Path::new("/nonexistent/fuzz.yaml"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Record;
    use crate::wire::pb;
    use proptest::prelude::*;

    /// A target's body.
    type Body = fn(&[u8]);

    /// Every target, by name (as in `fuzz/Cargo.toml`).
    const TARGETS: [(&str, Body); 7] = [
        ("nats_parser", nats_parser),
        ("envelope", envelope),
        ("replication", replication),
        ("record_codec", record_codec),
        ("nats_conf", nats_conf),
        ("liftbridge_yaml", liftbridge_yaml),
        ("s2_stream", s2_stream),
    ];

    /// Valid inputs for the targets (what a fuzzer's corpus starts from).
    fn seeds() -> Vec<Vec<u8>> {
        let msg = pb::Message {
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"hello"),
            ack_inbox: "inbox".into(),
            offset: -1,
            ..Default::default()
        };
        let rec = Record {
            offset: 7,
            timestamp_ns: 1_700_000_000_000_000_000,
            leader_epoch: 3,
            key: Some(Bytes::from_static(b"key")),
            headers: vec![("h".into(), Bytes::from_static(b"v"))],
            value: Bytes::from_static(b"value"),
            subject: "foo.bar".into(),
            reply: Some("_INBOX.x".into()),
        };
        let record = codec::encode(&codec::RecordRef::from_record(&rec)).expect("encodes");
        vec![
            b"\x05PUB foo 5\r\nhello\r\nHPUB a 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\nSUB x 1\r\n"
                .to_vec(),
            envelope::encode_message(&msg).to_vec(),
            envelope::encode_ack(&pb::Ack {
                stream: "s".into(),
                offset: 4,
                ..Default::default()
            })
            .to_vec(),
            replication::encode_fetch(&pb::ReplicationRequest {
                replica_id: "b".into(),
                offset: 12,
                ..Default::default()
            })
            .to_vec(),
            replication::encode_notification(&pb::PartitionNotification {
                stream: "s".into(),
                partition: 1,
            })
            .to_vec(),
            record,
            b"port: 4222\nauthorization { user: a, password: b }\ninclude 'x.conf'\n".to_vec(),
            b"host: 127.0.0.1\nport: 9292\nstreams:\n  retention.max.bytes: 1MB\n".to_vec(),
            {
                let mut s = BytesMut::from(&b"\x07"[..]);
                s2::encode_stream(
                    b"RMSG $G foo 5\r\nhello\r\nRMSG $G foo 5\r\nhello\r\n",
                    s2::Level::Fast,
                    &mut s,
                );
                s2::encode_stream(b"PING\r\n", s2::Level::Uncompressed, &mut s);
                s.to_vec()
            },
        ]
    }

    #[test]
    fn every_target_survives_seeds_truncations_and_flipped_bytes() {
        let mut runs = 0;
        for seed in seeds() {
            for (name, body) in TARGETS {
                let run = |input: &[u8]| {
                    let r = std::panic::catch_unwind(|| body(input));
                    assert!(r.is_ok(), "target {name} panicked on {input:?}");
                };
                run(&seed);
                for cut in 0..seed.len() {
                    run(&seed[..cut]);
                }
                for i in 0..seed.len() {
                    let mut m = seed.clone();
                    m[i] ^= 0x5A;
                    run(&m);
                    runs += 1;
                }
            }
        }
        assert!(runs > 1000, "{runs} runs");
    }

    #[test]
    fn a_decoded_seed_takes_the_round_trip_path() {
        // The record seed decodes, so `record_codec`'s re-encoding assertion
        // runs on it (not only its error paths).
        let seeds = seeds();
        let record = &seeds[5];
        assert!(codec::decode(0, Bytes::copy_from_slice(record)).is_ok());
        record_codec(record);
        assert!(envelope::decode_message(&seeds[1]).is_ok());
        envelope(&seeds[1]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn every_target_survives_random_bytes(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            for (_, body) in TARGETS {
                body(&data);
            }
        }
    }
}
