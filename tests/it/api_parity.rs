//! Status codes and bytes clients notice, as Liftbridge's Go server has
//! them (server/api.go, metadata.go, partition.go, protocol/envelope.go):
//! consumer-group preconditions, stream and subscribe errors, metadata of
//! paused partitions, the acks and envelopes on the wire, and how reverse
//! subscriptions end. Each check names the Liftbridge rule it follows.

use std::time::Duration;

use futures::StreamExt;
use liftbridge::api::proto;
use liftbridge::wire::envelope;
use tonic::Code;

use crate::api_common::*;

fn join(group: &str, consumer: &str, streams: &[&str]) -> proto::JoinConsumerGroupRequest {
    proto::JoinConsumerGroupRequest {
        group_id: group.into(),
        consumer_id: consumer.into(),
        streams: streams.iter().map(|s| s.to_string()).collect(),
    }
}

fn report(
    group: &str,
    consumer: &str,
    coordinator: &str,
    epoch: u64,
) -> proto::ReportConsumerGroupCoordinatorRequest {
    proto::ReportConsumerGroupCoordinatorRequest {
        group_id: group.into(),
        consumer_id: consumer.into(),
        coordinator: coordinator.into(),
        epoch,
    }
}

/// The group's epoch as FetchMetadata reports it.
async fn group_epoch(c: &mut Client, group: &str) -> u64 {
    let md = c
        .fetch_metadata(proto::FetchMetadataRequest {
            streams: vec![],
            groups: vec![group.into()],
        })
        .await
        .unwrap()
        .into_inner();
    md.group_metadata[0].epoch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parity_consumer_group_codes() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "gs", "gs", 1).await;

    // Joining with a stream that does not exist: FAILED_PRECONDITION, for a
    // new group and for an existing one.
    let e = c
        .join_consumer_group(join("g", "c1", &["nope"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let j = c
        .join_consumer_group(join("g", "c1", &["gs"]))
        .await
        .unwrap()
        .into_inner();
    // A new group starts at epoch 0, as Liftbridge's.
    assert_eq!(j.epoch, 0);
    let e = c
        .join_consumer_group(join("g", "c2", &["gs", "nope"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");

    // Joining again as a member: FAILED_PRECONDITION, and the group is
    // unchanged (same epoch).
    let e = c
        .join_consumer_group(join("g", "c1", &["gs"]))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::FailedPrecondition,
            "consumer is already a member of the consumer group"
        )
    );
    let md = c
        .fetch_metadata(proto::FetchMetadataRequest {
            streams: vec![],
            groups: vec!["g".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(md.group_metadata[0].epoch, j.epoch);

    // Missing ids: INVALID_ARGUMENT with Liftbridge's messages.
    let e = c
        .fetch_consumer_group_assignments(proto::FetchConsumerGroupAssignmentsRequest {
            group_id: "g".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "No consumerId provided")
    );
    let e = c
        .fetch_consumer_group_assignments(proto::FetchConsumerGroupAssignmentsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "No groupId provided")
    );
    for (r, msg) in [
        (report("", "c1", "x", 0), "No groupId provided"),
        (report("g", "", "x", 0), "No consumerId provided"),
        (report("g", "c1", "", 0), "No coordinator provided"),
    ] {
        let e = c.report_consumer_group_coordinator(r).await.unwrap_err();
        assert_eq!((e.code(), e.message()), (Code::InvalidArgument, msg));
    }

    // Unknown group: FAILED_PRECONDITION (not NOT_FOUND).
    let e = c
        .report_consumer_group_coordinator(report("ghost", "c1", "x", 0))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::FailedPrecondition, "No such consumer group ghost")
    );
    // A stale coordinator or epoch: FAILED_PRECONDITION, nothing changes.
    let me = node.server_id();
    let e = c
        .report_consumer_group_coordinator(report("g", "c1", "other", j.epoch))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().starts_with("Coordinator generation mismatch"),
        "{e:?}"
    );
    let e = c
        .report_consumer_group_coordinator(report("g", "c1", &me, j.epoch + 5))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let md = c
        .fetch_metadata(proto::FetchMetadataRequest {
            streams: vec![],
            groups: vec!["g".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            md.group_metadata[0].epoch,
            md.group_metadata[0].coordinator.as_str()
        ),
        (j.epoch, me.as_str())
    );
    // A current report from a member is accepted; with one member it is a
    // majority, so the group moves (here: to this same node) with a new
    // epoch.
    c.report_consumer_group_coordinator(report("g", "c1", &me, j.epoch))
        .await
        .unwrap();
    assert!(group_epoch(&mut c, "g").await > j.epoch);
    // With two members one report is not enough; the second one moves it.
    let j2 = c
        .join_consumer_group(join("g2", "a", &["gs"]))
        .await
        .unwrap()
        .into_inner();
    let e2 = c
        .join_consumer_group(join("g2", "b", &["gs"]))
        .await
        .unwrap()
        .into_inner()
        .epoch;
    assert!(e2 > j2.epoch);
    c.report_consumer_group_coordinator(report("g2", "a", &me, e2))
        .await
        .unwrap();
    c.report_consumer_group_coordinator(report("g2", "a", &me, e2))
        .await
        .unwrap();
    assert_eq!(
        group_epoch(&mut c, "g2").await,
        e2,
        "one member of two is no majority"
    );
    c.report_consumer_group_coordinator(report("g2", "b", &me, e2))
        .await
        .unwrap();
    assert!(group_epoch(&mut c, "g2").await > e2);

    // Subscribe with a group id but no consumer id: INVALID_ARGUMENT.
    let mut r = from_earliest("gs", 0);
    r.consumer = Some(proto::Consumer {
        group_id: "g".into(),
        group_epoch: 0,
        consumer_id: String::new(),
    });
    let e = c.subscribe(r).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::InvalidArgument,
            "Consumer id cannot be empty when group id is provided"
        )
    );
    // A consumer with an empty group id is no group member: a plain
    // subscription.
    let mut r = from_earliest("gs", 0);
    r.consumer = Some(proto::Consumer {
        group_id: String::new(),
        group_epoch: 0,
        consumer_id: "solo".into(),
    });
    subscribe(&mut c, r).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parity_stream_and_subscribe_codes() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "s", "s", 1).await;

    // DeleteStream with an empty name: no such stream, NOT_FOUND.
    let e = c
        .delete_stream(proto::DeleteStreamRequest { name: "".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");

    // Pause / SetStreamReadonly naming a partition that does not exist:
    // Liftbridge's precondition check returns ErrPartitionNotFound, which
    // metadata.go maps to NOT_FOUND; nothing is paused.
    let e = c
        .pause_stream(proto::PauseStreamRequest {
            name: "s".into(),
            partitions: vec![0, 9],
            resume_all: false,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::NotFound, "partition does not exist")
    );
    let e = c
        .set_stream_readonly(proto::SetStreamReadonlyRequest {
            name: "s".into(),
            partitions: vec![9],
            readonly: true,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::NotFound, "partition does not exist")
    );
    let e = c
        .pause_stream(proto::PauseStreamRequest {
            name: "ghost".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::NotFound, "stream not found")
    );
    let pm = partition_metadata(&mut c, "s", 0).await;
    assert!(!pm.paused && !pm.readonly);

    // Unknown start or stop position values: INVALID_ARGUMENT.
    let mut r = from_earliest("s", 0);
    r.start_position = 42;
    let e = c.subscribe(r).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "Unknown StartPosition 42")
    );
    let mut r = from_earliest("s", 0);
    r.stop_position = 7;
    let e = c.subscribe(r).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "Unknown StopPosition 7")
    );

    // An empty readonly partition with STOP_ON_CANCEL: the stop (newest,
    // -1) is before the start (0): INVALID_ARGUMENT.
    create(&mut c, "ro", "ro", 1).await;
    c.set_stream_readonly(proto::SetStreamReadonlyRequest {
        name: "ro".into(),
        partitions: vec![],
        readonly: true,
    })
    .await
    .unwrap();
    let e = c.subscribe(from_earliest("ro", 0)).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::InvalidArgument,
            "Stop offset is before start offset: -1 < 0"
        )
    );

    // A paused partition: FetchPartitionMetadata is FAILED_PRECONDITION
    // (no leader runs), FetchMetadata reports the closed log's offsets.
    create(&mut c, "pz", "pz", 1).await;
    for i in 0..3 {
        publish_acked(&mut c, "pz", 0, b"", format!("m{i}").as_bytes()).await;
    }
    c.pause_stream(proto::PauseStreamRequest {
        name: "pz".into(),
        partitions: vec![],
        resume_all: false,
    })
    .await
    .unwrap();
    let e = c
        .fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
            stream: "pz".into(),
            partition: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::FailedPrecondition,
            "The request should be sent to partition leader"
        )
    );
    let paused_md = |c: &Client| {
        let mut c = c.clone();
        async move {
            c.fetch_metadata(proto::FetchMetadataRequest {
                streams: vec!["pz".into()],
                groups: vec![],
            })
            .await
            .unwrap()
            .into_inner()
            .stream_metadata
            .remove(0)
            .partitions
            .remove(&0)
            .unwrap()
        }
    };
    let p = paused_md(&c).await;
    assert!(p.paused);
    assert_eq!((p.high_watermark, p.newest_offset), (2, 2));
    assert!(p.messages_received_timestamps.unwrap().latest_timestamp > 0);
    node.shutdown().await;

    // After a restart, the paused partition's offsets are read from disk
    // before the node serves. (The shutdown above may come while the node
    // is still stopping the partition it was told to pause: the stop
    // finishes, so its log is closed and free to be read.)
    let node = start(config(dir.path())).await;
    let c = client(&node).await;
    let p = paused_md(&c).await;
    assert!(p.paused);
    assert_eq!((p.high_watermark, p.newest_offset), (2, 2));
    node.shutdown().await;
}

/// The next NATS message (failing after 5 s).
async fn next(s: &mut async_nats::Subscriber, what: &str) -> async_nats::Message {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .unwrap_or_else(|_| panic!("{what} in time"))
        .unwrap_or_else(|| panic!("subscription open for {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parity_acks_and_envelopes_on_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.partitions.max_message_bytes = 256;
    let node = start(cfg).await;
    let mut c = client(&node).await;
    let mut r = proto::CreateStreamRequest {
        subject: "occ".into(),
        name: "occ".into(),
        ..Default::default()
    };
    r.optimistic_concurrency_control = Some(proto::NullableBool { value: true });
    c.create_stream(r).await.unwrap();
    create(&mut c, "plain", "plain", 1).await;
    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .unwrap();
    let mut raw = nc.subscribe("plain").await.unwrap();

    // INCORRECT_OFFSET: offset 0, and sent although the policy is NONE,
    // because the message names an ack inbox.
    let inbox = nc.new_inbox();
    let mut acks = nc.subscribe(inbox.clone()).await.unwrap();
    nc.flush().await.unwrap();
    let env = envelope::encode_message(&proto::Message {
        value: b"x".to_vec().into(),
        ack_inbox: inbox.clone(),
        correlation_id: "occ-none".into(),
        ack_policy: proto::AckPolicy::None as i32,
        offset: 5,
        ..Default::default()
    });
    nc.publish("occ", env).await.unwrap();
    let ack = envelope::decode_ack(&next(&mut acks, "acks#1").await.payload).unwrap();
    assert_eq!(
        (ack.ack_error, ack.offset, ack.correlation_id.as_str()),
        (proto::ack::Error::IncorrectOffset as i32, 0, "occ-none")
    );
    assert!(ack.commit_timestamp > 0);

    // TOO_LARGE: offset 0 and no commit timestamp, policy NONE too.
    let env = envelope::encode_message(&proto::Message {
        value: vec![b'y'; 1000].into(),
        ack_inbox: inbox.clone(),
        correlation_id: "big".into(),
        ack_policy: proto::AckPolicy::None as i32,
        offset: -1,
        ..Default::default()
    });
    nc.publish("plain", env).await.unwrap();
    let ack = envelope::decode_ack(&next(&mut acks, "acks#2").await.payload).unwrap();
    assert_eq!(
        (
            ack.ack_error,
            ack.offset,
            ack.commit_timestamp,
            ack.correlation_id.as_str()
        ),
        (proto::ack::Error::TooLarge as i32, 0, 0, "big")
    );
    assert!(ack.reception_timestamp > 0);

    // A successful NONE publish with an inbox gets no ack: the next thing
    // on the inbox is the LEADER ack published after it.
    for (policy, corr) in [
        (proto::AckPolicy::None, "none"),
        (proto::AckPolicy::Leader, "leader"),
    ] {
        let env = envelope::encode_message(&proto::Message {
            value: b"ok".to_vec().into(),
            ack_inbox: inbox.clone(),
            correlation_id: corr.into(),
            ack_policy: policy as i32,
            offset: -1,
            ..Default::default()
        });
        nc.publish("plain", env).await.unwrap();
    }
    let ack = envelope::decode_ack(&next(&mut acks, "acks#3").await.payload).unwrap();
    assert_eq!((ack.correlation_id.as_str(), ack.offset), ("leader", 1));

    // The envelope a gRPC Publish puts on NATS names its stream and
    // subject; PublishToSubject's names the subject and expects offset 0.
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(200), raw.next()).await {}
    publish_acked(&mut c, "plain", 0, b"k", b"via-grpc").await;
    let m = envelope::decode_message(&next(&mut raw, "raw#4").await.payload).unwrap();
    assert_eq!(
        (m.stream.as_str(), m.subject.as_str(), &m.value[..]),
        ("plain", "plain", &b"via-grpc"[..])
    );
    assert_eq!(m.offset, -1, "the expected offset the client sent");
    c.publish_to_subject(proto::PublishToSubjectRequest {
        subject: "plain".into(),
        value: b"via-subject".to_vec().into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let m = envelope::decode_message(&next(&mut raw, "raw#5").await.payload).unwrap();
    assert_eq!(
        (
            m.stream.as_str(),
            m.subject.as_str(),
            m.offset,
            &m.value[..]
        ),
        ("", "plain", 0, &b"via-subject"[..])
    );

    // An envelope whose header length is 12 without the CRC flag is
    // decoded, the length slicing off 4 bytes of padding.
    let body = prost::Message::encode_to_vec(&proto::Message {
        value: b"padded".to_vec().into(),
        offset: -1,
        ..Default::default()
    });
    let mut raw_env = vec![0xB9, 0x0E, 0x43, 0xB4, 0, 12, 0, 0, 0xAA, 0xAA, 0xAA, 0xAA];
    raw_env.extend_from_slice(&body);
    nc.publish("plain", raw_env.into()).await.unwrap();
    nc.flush().await.unwrap();
    let mut s = subscribe(&mut c, from_earliest("plain", 0)).await;
    let got = take(&mut s, 5).await;
    let last = &got[4];
    assert_eq!(last.value, &b"padded"[..], "{last:?}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parity_reverse_subscriptions_end_as_liftbridge() {
    use proto::{StartPosition as Start, StopPosition as Stop};
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "rv", "rv", 1).await;
    let rev = |start: Start, start_offset: i64| proto::SubscribeRequest {
        stream: "rv".into(),
        partition: 0,
        start_position: start as i32,
        start_offset,
        reverse: true,
        ..Default::default()
    };

    // Empty partition: no reverse reader (INTERNAL).
    let e = c.subscribe(rev(Start::Latest, 0)).await.unwrap_err();
    assert_eq!(e.code(), Code::Internal, "{e:?}");

    for i in 0..10 {
        publish_acked(&mut c, "rv", 0, b"", format!("v{i}").as_bytes()).await;
    }
    // Read down to the oldest, then UNKNOWN "EOF".
    let mut s = subscribe(&mut c, rev(Start::Latest, 0)).await;
    let got = take(&mut s, 10).await;
    assert_eq!(
        got.iter().map(|m| m.offset).collect::<Vec<_>>(),
        (0..10).rev().collect::<Vec<_>>()
    );
    let st = end_status(&mut s).await;
    assert_eq!((st.code(), st.message()), (Code::Unknown, "EOF"));

    // A stop offset below the start is refused, in reverse too.
    let mut r = rev(Start::Offset, 6);
    r.stop_position = Stop::StopOffset as i32;
    r.stop_offset = 2;
    let e = c.subscribe(r).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::InvalidArgument,
            "Stop offset is before start offset: 2 < 6"
        )
    );
    // The check is against the start asked for, before the reverse reader
    // clamps it to the newest offset.
    let mut r = rev(Start::Offset, 50);
    r.stop_position = Stop::StopOffset as i32;
    r.stop_offset = 9;
    assert_eq!(
        c.subscribe(r).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    // A stop offset at the start ends after that message.
    let mut r = rev(Start::Latest, 0);
    r.stop_position = Stop::StopOffset as i32;
    r.stop_offset = 9;
    let mut s = subscribe(&mut c, r).await;
    assert_eq!(take(&mut s, 1).await[0].offset, 9);
    let st = end_status(&mut s).await;
    assert_eq!(
        (st.code(), st.message()),
        (Code::ResourceExhausted, "Stop offset reached")
    );
    node.shutdown().await;
}
