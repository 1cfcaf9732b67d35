//! Partition state that lives on every replica, on three real node
//! processes, across a kill -9 of the leader:
//! - cursors: `__cursors` is replicated as `cursors.stream.replication.factor`
//!   says; a cursor stored under one leader is fetched from the next one,
//!   which stores new ones;
//! - readonly applies on every replica: the next leader refuses publishes
//!   too, followers end readISRReplica subscriptions at the log's end, and
//!   the partition is writable again where it left off;
//! - pause stops every replica; a publish resumes them all, and each
//!   replica holds the whole log;
//! - retention runs on every replica and leaves them alike, before and
//!   after a leader change.

use std::time::Duration;

use liftbridge::api::proto;
use tokio_stream::StreamExt;

use crate::cluster_isr::{
    create, isr_subscription, leader_index, publish, publish_acked, read_isr, TIMINGS,
};
use crate::support::cluster::{Cluster, ClusterOptions, PartitionView, CLUSTER_TIMEOUT};
use crate::support::wait_until;

/// The view of `stream`/0 that every node in `among` reports, once they
/// agree and it passes `ok`.
async fn agreed(
    c: &Cluster,
    among: &[usize],
    stream: &str,
    what: &str,
    ok: impl Fn(&PartitionView) -> bool,
) -> PartitionView {
    let end = std::time::Instant::now() + CLUSTER_TIMEOUT;
    loop {
        let mut views = Vec::new();
        for &i in among {
            if let Some(v) = c.partition_view(i, stream, 0).await {
                views.push(v);
            }
        }
        if views.len() == among.len() && views.windows(2).all(|w| w[0] == w[1]) && ok(&views[0]) {
            return views.remove(0);
        }
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kills the leader of `stream`/0 and returns its index and the index of
/// the leader the other two then agree on.
async fn kill_leader(c: &mut Cluster, stream: &str) -> (usize, usize) {
    let old = leader_index(c, stream).await;
    let old_id = c.nodes[old].spec.id.clone();
    c.nodes[old].kill9();
    let others: Vec<usize> = (0..3).filter(|i| *i != old).collect();
    let v = agreed(c, &others, stream, "a new leader", |v| {
        !v.0.is_empty() && v.0 != old_id
    })
    .await;
    (old, c.index_of(&v.0))
}

async fn set_cursor(c: &Cluster, via: usize, offset: i64) -> Result<(), tonic::Status> {
    let mut client = c.nodes[via].client().await;
    client
        .set_cursor(proto::SetCursorRequest {
            stream: "data".into(),
            partition: 0,
            cursor_id: "c1".into(),
            offset,
        })
        .await
        .map(|_| ())
}

async fn fetch_cursor(c: &Cluster, via: usize) -> Result<i64, tonic::Status> {
    let mut client = c.nodes[via].client().await;
    client
        .fetch_cursor(proto::FetchCursorRequest {
            stream: "data".into(),
            partition: 0,
            cursor_id: "c1".into(),
        })
        .await
        .map(|r| r.into_inner().offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_state_cursors_survive_a_leader_change() {
    let mut opts = ClusterOptions::three("curs");
    opts.extra_yaml =
        format!("{TIMINGS}cursors:\n  stream.partitions: 1\n  stream.replication.factor: 2\n");
    let mut c = Cluster::start(&opts).await;
    // Two replicas, as configured, both in sync.
    let v = agreed(
        &c,
        &[0, 1, 2],
        "__cursors",
        "__cursors led, 2 in sync",
        |v| !v.0.is_empty() && v.1.len() == 2 && v.2.len() == 2,
    )
    .await;
    create(&c, "data", None).await;
    let leader = c.index_of(&v.0);
    set_cursor(&c, leader, 41).await.expect("set on the leader");
    assert_eq!(fetch_cursor(&c, leader).await.expect("fetch"), 41);
    let elsewhere = (leader + 1) % 3;
    let refused = fetch_cursor(&c, elsewhere).await.unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );

    let (old, new) = kill_leader(&mut c, "__cursors").await;
    assert!(
        v.1.contains(&c.nodes[new].spec.id),
        "the new leader {} is not a replica of {v:?}",
        c.nodes[new].spec.id
    );
    // The new leader has never seen the cursor set: it reads its copy.
    let end = std::time::Instant::now() + CLUSTER_TIMEOUT;
    let fetched = loop {
        match fetch_cursor(&c, new).await {
            Ok(o) => break o,
            Err(e) => assert!(
                std::time::Instant::now() < end,
                "the new leader does not serve cursors: {e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(fetched, 41);
    set_cursor(&c, new, 42)
        .await
        .expect("set on the new leader");
    assert_eq!(fetch_cursor(&c, new).await.unwrap(), 42);

    // The old leader returns as a follower and catches up.
    c.nodes[old].restart().await;
    agreed(
        &c,
        &[0, 1, 2],
        "__cursors",
        "both replicas in sync again",
        |v| v.2.len() == 2,
    )
    .await;
    assert_eq!(
        fetch_cursor(&c, leader_index(&c, "__cursors").await)
            .await
            .unwrap(),
        42
    );
}

/// An acked ALL publish through node `via`, or its error code (a resumed
/// partition's replicas reopen before it commits: up to 20 s).
async fn try_publish(c: &Cluster, via: usize, value: &str) -> Result<i64, tonic::Code> {
    publish(
        c,
        via,
        "st",
        value,
        proto::AckPolicy::All,
        Duration::from_secs(20),
    )
    .await
    .map(|a| a.offset)
    .map_err(|e| {
        if e.starts_with("FailedPrecondition") {
            tonic::Code::FailedPrecondition
        } else {
            panic!("publishing {value}: {e}")
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_state_readonly_and_pause_apply_on_every_replica() {
    let mut opts = ClusterOptions::three("rostate");
    opts.extra_yaml = TIMINGS.into();
    let mut c = Cluster::start(&opts).await;
    create(&c, "st", None).await;
    let leader = leader_index(&c, "st").await;
    for i in 0..3 {
        assert_eq!(try_publish(&c, leader, &format!("m{i}")).await, Ok(i));
    }
    // The follower read below has them committed before the stream turns
    // readonly (its subscription stops at what it has committed then).
    let follower = (leader + 1) % 3;
    let want: Vec<(i64, String)> = (0..3).map(|i| (i, format!("m{i}"))).collect();
    assert_eq!(read_isr(&c, follower, "st", 3).await, want);

    // Readonly: every node's metadata says so and the leader refuses.
    let mut admin = c.nodes[(leader + 1) % 3].client().await;
    let readonly = |on: bool| proto::SetStreamReadonlyRequest {
        name: "st".into(),
        partitions: vec![],
        readonly: on,
    };
    admin
        .set_stream_readonly(readonly(true))
        .await
        .expect("readonly");
    agreed(&c, &[0, 1, 2], "st", "readonly everywhere", |v| v.4).await;
    assert_eq!(
        try_publish(&c, leader, "no").await,
        Err(tonic::Code::FailedPrecondition)
    );
    // A follower's readISRReplica subscription ends at the log's end.
    let mut s = isr_subscription(&c, follower, "st").await;
    let mut values = Vec::new();
    let end = loop {
        match tokio::time::timeout(Duration::from_secs(20), s.next())
            .await
            .expect("an item within 20 s")
        {
            Some(Ok(m)) => values.push(String::from_utf8_lossy(&m.value).into_owned()),
            Some(Err(st)) => break st,
            None => panic!("stream closed without a status after {values:?}"),
        }
    };
    assert_eq!(values, ["", "m0", "m1", "m2"]);
    // Started on a readonly partition: its newest message is the stop.
    assert_eq!(end.code(), tonic::Code::ResourceExhausted, "{end:?}");

    // The next leader is readonly too, until the stream is made writable.
    let (old, new) = kill_leader(&mut c, "st").await;
    assert_eq!(
        try_publish(&c, new, "still no").await,
        Err(tonic::Code::FailedPrecondition)
    );
    // The partition itself, not only the API, refuses: a plain NATS
    // message on its subject at the new leader is not recorded (m3 below
    // gets offset 3).
    let n = &c.nodes[new].spec;
    let nc = async_nats::connect(format!("{}:{}", n.ip, n.client))
        .await
        .expect("NATS connection to the new leader");
    nc.publish("st", "plain".into())
        .await
        .expect("NATS publish");
    nc.flush().await.expect("NATS flush");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut admin = c.nodes[new].client().await;
    admin
        .set_stream_readonly(readonly(false))
        .await
        .expect("writable");
    let others: Vec<usize> = (0..3).filter(|i| *i != old).collect();
    agreed(&c, &others, "st", "writable", |v| !v.4).await;
    assert_eq!(try_publish(&c, new, "m3").await, Ok(3));
    c.nodes[old].restart().await;
    agreed(&c, &[0, 1, 2], "st", "all three in sync", |v| {
        v.2.len() == 3
    })
    .await;

    // Pause stops every replica: followers no longer serve reads.
    admin
        .pause_stream(proto::PauseStreamRequest {
            name: "st".into(),
            partitions: vec![],
            resume_all: false,
        })
        .await
        .expect("pause");
    let paused = agreed(&c, &[0, 1, 2], "st", "paused everywhere", |v| v.3).await;
    let leader = c.index_of(&paused.0);
    let follower = (leader + 1) % 3;
    let mut client = c.nodes[follower].client().await;
    let refused = match client
        .subscribe(proto::SubscribeRequest {
            stream: "st".into(),
            read_isr_replica: true,
            ..Default::default()
        })
        .await
    {
        Err(st) => st,
        Ok(r) => r
            .into_inner()
            .next()
            .await
            .expect("an item")
            .expect_err("a paused partition is not served"),
    };
    assert_eq!(refused.message(), "Partition is paused", "{refused:?}");
    // A publish resumes every replica; each holds the whole log.
    assert_eq!(try_publish(&c, leader, "m4").await, Ok(4));
    agreed(&c, &[0, 1, 2], "st", "resumed, all in sync", |v| {
        !v.3 && v.2.len() == 3
    })
    .await;
    let want: Vec<(i64, String)> = (0..5).map(|i| (i, format!("m{i}"))).collect();
    for i in 0..3 {
        assert_eq!(read_isr(&c, i, "st", 5).await, want, "node {i}");
    }
}

/// Waits until node `i`'s replica of partition 0 of `stream` holds
/// exactly the messages `oldest..=newest` (read with readISRReplica).
async fn holds_exactly(c: &Cluster, i: usize, stream: &str, oldest: i64, newest: i64) {
    let n = (newest + 1 - oldest) as usize;
    let want: Vec<(i64, String)> = (oldest..=newest).map(|o| (o, format!("m{o}"))).collect();
    let want = &want;
    let what = format!("node {i} to hold exactly {want:?}");
    wait_until(CLUSTER_TIMEOUT, &what, || async move {
        read_isr(c, i, stream, n).await == *want
    })
    .await;
}

/// Retention runs on every replica, each within what it knows to be
/// committed, and keeps them alike across a leader change: a stream keeping
/// 5 messages holds offsets 15–19 everywhere after 20, and 20–24 after 5
/// more through the next leader, the old leader included once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_state_retention_keeps_replicas_alike() {
    let mut opts = ClusterOptions::three("retst");
    opts.extra_yaml = TIMINGS.into();
    let mut c = Cluster::start(&opts).await;
    let mut client = c.nodes[0].client().await;
    client
        .create_stream(proto::CreateStreamRequest {
            subject: "ret".into(),
            name: "ret".into(),
            replication_factor: 3,
            partitions: 1,
            retention_max_messages: Some(proto::NullableInt64 { value: 5 }),
            cleaner_interval: Some(proto::NullableInt64 { value: 200 }),
            ..Default::default()
        })
        .await
        .expect("create stream");
    let leader = leader_index(&c, "ret").await;
    publish_acked(&c, leader, "ret", 0..20).await;
    for i in 0..3 {
        holds_exactly(&c, i, "ret", 15, 19).await;
    }
    let (old, new) = kill_leader(&mut c, "ret").await;
    publish_acked(&c, new, "ret", 20..25).await;
    c.nodes[old].restart().await;
    agreed(&c, &[0, 1, 2], "ret", "all three in sync", |v| {
        v.2.len() == 3
    })
    .await;
    for i in 0..3 {
        holds_exactly(&c, i, "ret", 20, 24).await;
    }
}
