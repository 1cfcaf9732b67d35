//! Consumer groups with Liftbridge's semantics: one member of a group reads
//! a partition at a time (a newer or equal epoch replaces and closes the
//! previous subscriber, an older one is refused), members expire on their
//! own timers, and deleting a stream bumps the epoch of the groups reading
//! it.

use std::time::Duration;

use futures::StreamExt;
use liftbridge::api::proto;
use tonic::Code;

use crate::api_common::*;

fn member_sub(stream: &str, consumer: &str, epoch: u64) -> proto::SubscribeRequest {
    let mut r = from_earliest(stream, 0);
    r.consumer = Some(proto::Consumer {
        group_id: "grp".into(),
        group_epoch: epoch,
        consumer_id: consumer.into(),
    });
    r
}

async fn group_metadata(c: &Client, group: &str) -> proto::ConsumerGroupMetadata {
    c.clone()
        .fetch_metadata(proto::FetchMetadataRequest {
            streams: vec![],
            groups: vec![group.into()],
        })
        .await
        .unwrap()
        .into_inner()
        .group_metadata
        .remove(0)
}

/// Whether the stream ended cleanly (the server closed it without error)
/// within 5 s.
async fn closed_cleanly(s: &mut tonic::Streaming<proto::Message>) -> bool {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.next()).await {
            Ok(Some(Ok(_))) => continue,
            Ok(None) => return true,
            Ok(Some(Err(st))) => panic!("ended with {st:?}"),
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_subscriber_replaced_or_fenced_by_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "gp", "gp", 1).await;
    publish_acked(&mut c, "gp", 0, b"", b"first").await;

    // Epochs need no join: Subscribe checks only other subscribers.
    let mut s1 = subscribe(&mut c, member_sub("gp", "c1", 3)).await;
    assert_eq!(take(&mut s1, 1).await[0].value, &b"first"[..]);

    // An older epoch is fenced.
    let e = c.subscribe(member_sub("gp", "c2", 2)).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::FailedPrecondition,
            "Consumer is not currently assigned this partition"
        )
    );
    // The same epoch replaces c1, whose stream is closed.
    let mut s2 = subscribe(&mut c, member_sub("gp", "c2", 3)).await;
    assert!(closed_cleanly(&mut s1).await, "c1 closed when replaced");
    assert_eq!(take(&mut s2, 1).await[0].value, &b"first"[..]);
    publish_acked(&mut c, "gp", 0, b"", b"second").await;
    assert_eq!(take(&mut s2, 1).await[0].value, &b"second"[..]);

    // Another group is independent of this one.
    let mut other = from_earliest("gp", 0);
    other.consumer = Some(proto::Consumer {
        group_id: "other".into(),
        group_epoch: 0,
        consumer_id: "x".into(),
    });
    let mut so = subscribe(&mut c, other).await;
    assert_eq!(take(&mut so, 2).await[1].value, &b"second"[..]);

    // Once c2 goes away, an older epoch may subscribe again.
    drop(s2);
    eventually("c2's subscription to end", || {
        let mut c = c.clone();
        async move { c.subscribe(member_sub("gp", "c1", 1)).await.is_ok() }
    })
    .await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_members_expire_on_their_own_timers() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.consumer_timeout = Duration::from_millis(300);
    let node = start(cfg).await;
    let mut c = client(&node).await;
    create(&mut c, "gt", "gt", 1).await;
    // Taken before the join, so the member's timeout runs from after it.
    let started = tokio::time::Instant::now();
    let j = c
        .join_consumer_group(proto::JoinConsumerGroupRequest {
            group_id: "quiet".into(),
            consumer_id: "c1".into(),
            streams: vec!["gt".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        group_metadata(&c, "quiet").await.error,
        proto::consumer_group_metadata::Error::Ok as i32
    );
    // Nobody calls the group again: the member still expires, and with it
    // the group.
    eventually("the silent member to expire", || {
        let c = c.clone();
        async move {
            group_metadata(&c, "quiet").await.error
                == proto::consumer_group_metadata::Error::UnknownGroup as i32
        }
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "not before its timeout"
    );
    let e = c
        .fetch_consumer_group_assignments(proto::FetchConsumerGroupAssignmentsRequest {
            group_id: "quiet".into(),
            consumer_id: "c1".into(),
            epoch: j.epoch,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_epoch_bumped_when_a_consumed_stream_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "ga", "ga", 1).await;
    create(&mut c, "gb", "gb", 1).await;
    create(&mut c, "gz", "gz", 1).await;
    let join = |group: &str, streams: &[&str]| proto::JoinConsumerGroupRequest {
        group_id: group.into(),
        consumer_id: "c1".into(),
        streams: streams.iter().map(|s| s.to_string()).collect(),
    };
    let j = c
        .join_consumer_group(join("reads-a", &["ga", "gb"]))
        .await
        .unwrap()
        .into_inner();
    let k = c
        .join_consumer_group(join("reads-z", &["gz"]))
        .await
        .unwrap()
        .into_inner();
    c.delete_stream(proto::DeleteStreamRequest { name: "ga".into() })
        .await
        .unwrap();
    let g = group_metadata(&c, "reads-a").await;
    assert!(g.epoch > j.epoch, "the group reading ga moved on");
    assert_eq!(g.coordinator, node.server_id());
    assert_eq!(
        group_metadata(&c, "reads-z").await.epoch,
        k.epoch,
        "a group not reading ga is untouched"
    );
    // The member refetches under the new epoch: only gb is left.
    let a = c
        .fetch_consumer_group_assignments(proto::FetchConsumerGroupAssignmentsRequest {
            group_id: "reads-a".into(),
            consumer_id: "c1".into(),
            epoch: g.epoch,
        })
        .await
        .unwrap()
        .into_inner();
    let streams: Vec<&str> = a.assignments.iter().map(|p| p.stream.as_str()).collect();
    assert_eq!(streams, vec!["gb"]);
    node.shutdown().await;
}
