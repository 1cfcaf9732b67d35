//! Conversions between the gRPC types of `proto.API` and the domain types of
//! the layers below (partition positions; a stored record is encoded for
//! delivery by [`outgoing`](super::outgoing)).
//!
//! The adapter's vocabulary stops here: nothing below `api` sees a
//! `proto::*` request or response. Pure functions, no I/O.

#[cfg(test)]
use std::collections::HashMap;

#[cfg(test)]
use bytes::Bytes;

use super::proto;
use crate::cluster::{StreamConfig, StreamMeta};
use crate::partition::reader::{StartPosition, StopPosition};
use crate::service::{
    self, ConsumerRef, CreateStream, Publish, PublishToSubject, Service, ServiceError,
};
#[cfg(test)]
use crate::store::Record;
use crate::wire::AckPolicy;

/// A CreateStream request in the domain's terms (absent optional settings
/// stay `None`: server defaults).
pub fn create_stream(r: proto::CreateStreamRequest) -> CreateStream {
    CreateStream {
        name: r.name,
        subject: r.subject,
        group: r.group,
        replication_factor: r.replication_factor,
        partitions: r.partitions,
        config: StreamConfig {
            retention_max_bytes: r.retention_max_bytes.map(|v| v.value),
            retention_max_messages: r.retention_max_messages.map(|v| v.value),
            retention_max_age_ms: r.retention_max_age.map(|v| v.value),
            cleaner_interval_ms: r.cleaner_interval.map(|v| v.value),
            segment_max_bytes: r.segment_max_bytes.map(|v| v.value),
            segment_max_age_ms: r.segment_max_age.map(|v| v.value),
            compact_max_goroutines: r.compact_max_goroutines.map(|v| v.value),
            compact_enabled: r.compact_enabled.map(|v| v.value),
            auto_pause_time_ms: r.auto_pause_time.map(|v| v.value),
            auto_pause_disable_if_subscribers: r.auto_pause_disable_if_subscribers.map(|v| v.value),
            min_isr: r.min_isr.map(|v| v.value),
            optimistic_concurrency_control: r.optimistic_concurrency_control.map(|v| v.value),
            encryption: r.encryption.map(|v| v.value),
        },
    }
}

/// A wire ack policy; unknown values read as LEADER, as Liftbridge does.
fn ack_policy(v: i32) -> AckPolicy {
    AckPolicy::try_from(v).unwrap_or(AckPolicy::Leader)
}

/// A Publish request in the domain's terms.
pub fn publish(r: proto::PublishRequest) -> Publish {
    Publish {
        stream: r.stream,
        partition: r.partition,
        key: r.key,
        value: r.value,
        headers: r.headers,
        ack_inbox: r.ack_inbox,
        correlation_id: r.correlation_id,
        ack_policy: ack_policy(r.ack_policy),
        expected_offset: r.expected_offset,
    }
}

/// A PublishToSubject request in the domain's terms.
pub fn publish_to_subject(r: proto::PublishToSubjectRequest) -> PublishToSubject {
    PublishToSubject {
        subject: r.subject,
        key: r.key,
        value: r.value,
        headers: r.headers,
        ack_inbox: r.ack_inbox,
        correlation_id: r.correlation_id,
        ack_policy: ack_policy(r.ack_policy),
    }
}

/// A Subscribe request in the domain's terms; INVALID_ARGUMENT for a start
/// or stop position this server does not know. A consumer without a group
/// id is no group member, as in Liftbridge.
pub fn subscribe(r: proto::SubscribeRequest) -> Result<service::SubscribeRequest, ServiceError> {
    Ok(service::SubscribeRequest {
        start: start_position(&r)?,
        stop: stop_position(&r)?,
        stream: r.stream,
        partition: r.partition,
        resume: r.resume,
        reverse: r.reverse,
        read_isr_replica: r.read_isr_replica,
        consumer: r
            .consumer
            .filter(|c| !c.group_id.is_empty())
            .map(|c| ConsumerRef {
                group_id: c.group_id,
                group_epoch: c.group_epoch,
                consumer_id: c.consumer_id,
            }),
    })
}

/// A partition's metadata as FetchMetadata/FetchPartitionMetadata report
/// it (offsets from this node's log when it runs here, -1 otherwise).
pub fn partition_metadata(svc: &Service, s: &StreamMeta, id: i32) -> proto::PartitionMetadata {
    let Some(p) = s.partition(id) else {
        return proto::PartitionMetadata::default();
    };
    let st = svc.partition_status(s, id);
    proto::PartitionMetadata {
        id,
        leader: p.leader.clone(),
        replicas: p.replicas.clone(),
        isr: p.isr.clone(),
        high_watermark: st.high_watermark,
        newest_offset: st.newest_offset,
        paused: p.paused,
        readonly: p.readonly,
        messages_received_timestamps: Some(proto::PartitionEventTimestamps {
            first_timestamp: st.received.0,
            latest_timestamp: st.received.1,
        }),
        pause_timestamps: Some(proto::PartitionEventTimestamps {
            first_timestamp: p.pause_timestamps.first_ns,
            latest_timestamp: p.pause_timestamps.latest_ns,
        }),
        readonly_timestamps: Some(proto::PartitionEventTimestamps {
            first_timestamp: p.readonly_timestamps.first_ns,
            latest_timestamp: p.readonly_timestamps.latest_ns,
        }),
    }
}

/// A stream's metadata with all its partitions.
pub fn stream_metadata(svc: &Service, s: &StreamMeta) -> proto::StreamMetadata {
    proto::StreamMetadata {
        name: s.name.clone(),
        subject: s.subject.clone(),
        error: proto::stream_metadata::Error::Ok as i32,
        partitions: s
            .partitions
            .iter()
            .map(|p| (p.id, partition_metadata(svc, s, p.id)))
            .collect(),
        creation_timestamp: s.creation_timestamp_ns,
    }
}

/// The start position a subscribe request asks for (INVALID_ARGUMENT
/// "Unknown StartPosition <n>" for a value outside the enum, as Liftbridge).
pub fn start_position(req: &proto::SubscribeRequest) -> Result<StartPosition, ServiceError> {
    let pos = proto::StartPosition::try_from(req.start_position).map_err(|_| {
        ServiceError::InvalidArgument(format!("Unknown StartPosition {}", req.start_position))
    })?;
    Ok(match pos {
        proto::StartPosition::NewOnly => StartPosition::NewOnly,
        proto::StartPosition::Offset => StartPosition::Offset(req.start_offset),
        proto::StartPosition::Earliest => StartPosition::Earliest,
        proto::StartPosition::Latest => StartPosition::Latest,
        proto::StartPosition::Timestamp => StartPosition::Timestamp(req.start_timestamp),
    })
}

/// The stop position a subscribe request asks for (INVALID_ARGUMENT
/// "Unknown StopPosition <n>" for a value outside the enum).
pub fn stop_position(req: &proto::SubscribeRequest) -> Result<StopPosition, ServiceError> {
    let pos = proto::StopPosition::try_from(req.stop_position).map_err(|_| {
        ServiceError::InvalidArgument(format!("Unknown StopPosition {}", req.stop_position))
    })?;
    Ok(match pos {
        proto::StopPosition::StopOnCancel => StopPosition::OnCancel,
        proto::StopPosition::StopOffset => StopPosition::Offset(req.stop_offset),
        proto::StopPosition::StopLatest => StopPosition::Latest,
        proto::StopPosition::StopTimestamp => StopPosition::Timestamp(req.stop_timestamp),
    })
}

/// The API's `Message` a stored record is delivered as, with the `subject`
/// and `reply` headers the stenographer promises, built field by field:
/// the reference a Subscribe stream's encoding
/// ([`Outgoing`](super::outgoing::Outgoing)) is tested against.
#[cfg(test)]
pub(crate) fn record_to_message(stream: &str, partition: i32, r: Record) -> proto::Message {
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
