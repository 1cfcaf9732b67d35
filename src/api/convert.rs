//! Conversions between the gRPC types of `proto.API` and the domain types of
//! the layers below (partition positions, stored records).
//!
//! The adapter's vocabulary stops here: nothing below `api` sees a
//! `proto::*` request or response. Pure functions, no I/O.

use std::collections::HashMap;

use bytes::Bytes;

use super::proto;
use crate::partition::reader::{StartPosition, StopPosition};
use crate::store::Record;

/// The start position a subscribe request asks for (unknown values read as
/// NEW_ONLY, as Liftbridge does).
pub fn start_position(req: &proto::SubscribeRequest) -> StartPosition {
    match proto::StartPosition::try_from(req.start_position)
        .unwrap_or(proto::StartPosition::NewOnly)
    {
        proto::StartPosition::NewOnly => StartPosition::NewOnly,
        proto::StartPosition::Offset => StartPosition::Offset(req.start_offset),
        proto::StartPosition::Earliest => StartPosition::Earliest,
        proto::StartPosition::Latest => StartPosition::Latest,
        proto::StartPosition::Timestamp => StartPosition::Timestamp(req.start_timestamp),
    }
}

/// The stop position a subscribe request asks for (unknown values read as
/// STOP_ON_CANCEL).
pub fn stop_position(req: &proto::SubscribeRequest) -> StopPosition {
    match proto::StopPosition::try_from(req.stop_position)
        .unwrap_or(proto::StopPosition::StopOnCancel)
    {
        proto::StopPosition::StopOnCancel => StopPosition::OnCancel,
        proto::StopPosition::StopOffset => StopPosition::Offset(req.stop_offset),
        proto::StopPosition::StopLatest => StopPosition::Latest,
        proto::StopPosition::StopTimestamp => StopPosition::Timestamp(req.stop_timestamp),
    }
}

/// Converts a stored record into the API's `Message`, with the `subject`
/// and `reply` headers the stenographer promises.
pub fn record_to_message(stream: &str, partition: i32, r: Record) -> proto::Message {
    let mut headers: HashMap<String, Bytes> = HashMap::with_capacity(r.headers.len() + 2);
    headers.extend(r.headers);
    headers.insert(
        "subject".into(),
        Bytes::copy_from_slice(r.subject.as_bytes()),
    );
    let reply = r.reply.unwrap_or_default();
    headers.insert("reply".into(), Bytes::copy_from_slice(reply.as_bytes()));
    proto::Message {
        offset: r.offset as i64,
        key: r.key.unwrap_or_default(),
        value: r.value,
        timestamp: r.timestamp_ns,
        stream: stream.to_string(),
        partition,
        subject: r.subject,
        reply_subject: reply,
        headers,
        ack_inbox: String::new(),
        correlation_id: String::new(),
        ack_policy: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_records_carry_subject_and_reply_headers() {
        let r = Record {
            offset: 7,
            timestamp_ns: 42,
            key: Some(Bytes::from_static(b"k")),
            headers: vec![("h".into(), Bytes::from_static(b"v"))],
            value: Bytes::from_static(b"payload"),
            subject: "foo.bar".into(),
            reply: Some("_INBOX.1".into()),
            ..Default::default()
        };
        let m = record_to_message("s", 3, r);
        assert_eq!((m.offset, m.timestamp, m.partition), (7, 42, 3));
        assert_eq!(m.stream, "s");
        assert_eq!(&m.key[..], b"k");
        assert_eq!(&m.value[..], b"payload");
        assert_eq!(m.subject, "foo.bar");
        assert_eq!(m.reply_subject, "_INBOX.1");
        assert_eq!(&m.headers["subject"][..], b"foo.bar");
        assert_eq!(&m.headers["reply"][..], b"_INBOX.1");
        assert_eq!(&m.headers["h"][..], b"v");
    }

    #[test]
    fn no_reply_gives_an_empty_reply_header() {
        let m = record_to_message("s", 0, Record::default());
        assert!(m.headers["reply"].is_empty());
        assert!(m.key.is_empty());
    }
}
