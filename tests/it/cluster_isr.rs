//! Contract of the in-sync replica set, on three real node processes:
//! - every replica holds the partition; a follower serves `Subscribe` only
//!   with `readISRReplica` (FAILED_PRECONDITION "Server not partition
//!   leader" otherwise) and then delivers up to the high watermark;
//! - with `minIsr` 3 and a follower down: the follower leaves the ISR after
//!   `replica.max.lag.time`, the partition is under-replicated (admin API
//!   and metric), an ALL publish is not acknowledged while a LEADER publish
//!   is; once the follower is back it rejoins the ISR, the partition is no
//!   longer under-replicated and ALL publishes are acknowledged again;
//! - a PublishAsync stream to the leader (its messages handed to the log
//!   without NATS) is replicated as any publish;
//! - a leader stopped (SIGTERM) while a unary ALL publish waits there for an
//!   ack that cannot come (below min ISR) ends that call at once with
//!   INTERNAL "server shutting down" and exits without waiting for it;
//! - a leader whose node left the NATS cluster is replaced after
//!   `replica.fetch.timeout`, not `replica.max.leader.timeout`;
//! - no fetch answer is larger than `clustering.replication.max.bytes`.

use std::time::Duration;

use liftbridge::api::proto;
use tokio_stream::StreamExt;

use crate::support::cluster::{Cluster, ClusterOptions, CLUSTER_TIMEOUT};
use crate::support::{http_json_at, wait_until};

/// Fast replica timings so the test waits seconds, not Liftbridge's 15 s.
pub(crate) const TIMINGS: &str = "clustering.replica.max.lag.time: 2s\n\
                       clustering.replica.max.leader.timeout: 2s\n\
                       clustering.replica.max.idle.wait: 500ms\n\
                       clustering.replica.fetch.timeout: 500ms\n";

pub(crate) async fn create(c: &Cluster, name: &str, min_isr: Option<i32>) {
    let mut client = c.nodes[0].client().await;
    client
        .create_stream(proto::CreateStreamRequest {
            subject: name.into(),
            name: name.into(),
            replication_factor: 3,
            partitions: 1,
            min_isr: min_isr.map(|v| proto::NullableInt32 { value: v }),
            ..Default::default()
        })
        .await
        .expect("create stream");
}

pub(crate) async fn publish(
    c: &Cluster,
    via: usize,
    stream: &str,
    value: &str,
    policy: proto::AckPolicy,
    within: Duration,
) -> Result<proto::Ack, String> {
    let mut client = c.nodes[via].client().await;
    // The server waits for the ack as long as the call's deadline.
    let mut req = tonic::Request::new(proto::PublishRequest {
        stream: stream.into(),
        value: value.as_bytes().to_vec().into(),
        ack_policy: policy as i32,
        expected_offset: -1,
        ..Default::default()
    });
    req.set_timeout(within);
    match tokio::time::timeout(within + Duration::from_secs(5), client.publish(req)).await {
        Ok(Ok(r)) => r.into_inner().ack.ok_or_else(|| "no ack".to_string()),
        Ok(Err(s)) => Err(format!("{:?}: {}", s.code(), s.message())),
        Err(_) => Err("timed out".into()),
    }
}

/// Publishes `m<i>` for each `i` of `offsets` through node `via` with
/// AckPolicy ALL, checking that each is acknowledged at offset `i`.
pub(crate) async fn publish_acked(
    c: &Cluster,
    via: usize,
    stream: &str,
    offsets: std::ops::Range<i64>,
) {
    for i in offsets {
        let value = format!("m{i}");
        let ack = publish(
            c,
            via,
            stream,
            &value,
            proto::AckPolicy::All,
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| panic!("ALL ack of {value} through node {via}: {e}"));
        assert_eq!(ack.offset, i, "offset of {value}");
    }
}

/// The partition as node `i`'s admin API reports it.
async fn partition_json(c: &Cluster, i: usize, stream: &str) -> Option<serde_json::Value> {
    let n = &c.nodes[i].spec;
    let v = http_json_at(&n.ip, n.http, &format!("/api/v1/streams/{stream}")).await?;
    Some(v["partitions"][0].clone())
}

/// Kills (`kill -9`) a follower of `stream`'s partition and waits until
/// the leader has dropped it from the ISR (after the lag time: the
/// partition is under-replicated, its ISR the two others); returns the
/// follower's index.
async fn kill_a_follower(c: &mut Cluster, leader: usize, stream: &str) -> usize {
    let down = (leader + 1) % 3;
    c.nodes[down].kill9();
    wait_out_of_isr(c, leader, stream, down).await;
    down
}

/// Waits until the leader at `leader` has dropped the dead node `down`
/// from the partition's ISR.
async fn wait_out_of_isr(c: &Cluster, leader: usize, stream: &str, down: usize) {
    let down_id = c.nodes[down].spec.id.clone();
    wait_until(
        CLUSTER_TIMEOUT,
        "the dead follower leaves the ISR",
        || async {
            partition_json(c, leader, stream).await.is_some_and(|p| {
                p["under_replicated"] == true
                    && p["isr"]
                        .as_array()
                        .is_some_and(|isr| isr.len() == 2 && !isr.iter().any(|r| r == &down_id))
            })
        },
    )
    .await;
}

/// A unary call running as a task.
type Call = tokio::task::JoinHandle<Result<tonic::Response<proto::PublishResponse>, tonic::Status>>;

/// A unary ALL publish through node `via` that waits for its ack (up to
/// 30 s), as a task.
async fn waiting_call(c: &Cluster, via: usize, stream: &str) -> Call {
    let mut client = c.nodes[via].client().await;
    let stream = stream.to_string();
    tokio::spawn(async move {
        let mut req = tonic::Request::new(proto::PublishRequest {
            stream,
            value: b"waiting".to_vec().into(),
            ack_policy: proto::AckPolicy::All as i32,
            expected_offset: -1,
            ..Default::default()
        });
        req.set_timeout(Duration::from_secs(30));
        client.publish(req).await
    })
}

/// Index of the partition's leader, once every node agrees on one.
pub(crate) async fn leader_index(c: &Cluster, stream: &str) -> usize {
    let end = std::time::Instant::now() + CLUSTER_TIMEOUT;
    loop {
        if let Some(l) = c.leader_among(&[0, 1, 2], stream, 0).await {
            return c.index_of(&l);
        }
        assert!(
            std::time::Instant::now() < end,
            "no leader all nodes agree on"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_isr_followers_serve_read_isr_replica_subscriptions() {
    let mut opts = ClusterOptions::three("isrread");
    opts.extra_yaml = TIMINGS.into();
    let c = Cluster::start(&opts).await;
    create(&c, "reads", None).await;
    let leader = leader_index(&c, "reads").await;
    publish_acked(&c, leader, "reads", 0..10).await;
    let follower = (leader + 1) % 3;
    let mut client = c.nodes[follower].client().await;
    let req = |read_isr_replica| proto::SubscribeRequest {
        stream: "reads".into(),
        start_position: proto::StartPosition::Earliest as i32,
        read_isr_replica,
        ..Default::default()
    };
    // Without readISRReplica a follower refuses, as Liftbridge does.
    let refused = match client.subscribe(req(false)).await {
        Err(s) => s,
        Ok(r) => r
            .into_inner()
            .next()
            .await
            .expect("an item")
            .expect_err("a follower must refuse"),
    };
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert_eq!(refused.message(), "Server not partition leader");
    // With it, the follower's copy is read up to the high watermark.
    let mut stream = client
        .subscribe(req(true))
        .await
        .expect("subscribe on an ISR follower")
        .into_inner();
    // The first item is the empty message that confirms the subscription
    // (as Liftbridge sends it).
    let first = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .expect("confirmation within 20 s")
        .expect("stream open")
        .expect("confirmation");
    assert!(first.value.is_empty(), "{first:?}");
    let mut got = Vec::new();
    while got.len() < 10 {
        let m = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("messages within 20 s")
            .expect("stream open")
            .expect("message");
        got.push((m.offset, String::from_utf8_lossy(&m.value).into_owned()));
    }
    let want: Vec<(i64, String)> = (0..10).map(|i| (i, format!("m{i}"))).collect();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_isr_below_min_isr_nothing_commits_until_the_follower_returns() {
    let mut opts = ClusterOptions::three("isrmin");
    opts.extra_yaml = TIMINGS.into();
    let mut c = Cluster::start(&opts).await;
    create(&c, "strict", Some(3)).await;
    let leader = leader_index(&c, "strict").await;
    publish(
        &c,
        leader,
        "strict",
        "before",
        proto::AckPolicy::All,
        Duration::from_secs(10),
    )
    .await
    .expect("ALL ack with the full ISR");
    let p = partition_json(&c, leader, "strict")
        .await
        .expect("partition");
    assert_eq!(p["under_replicated"], false, "{p}");
    assert_eq!(p["isr"].as_array().map(Vec::len), Some(3), "{p}");

    // A follower goes down: after the lag time it leaves the ISR.
    let down = kill_a_follower(&mut c, leader, "strict").await;
    let n = &c.nodes[leader].spec;
    let addr = format!("{}:{}", n.ip, n.http).parse().expect("address");
    let metrics = crate::api_common::http_get(addr, "/metrics").await;
    assert!(
        metrics
            .contains("liftbridge_partition_under_replicated{stream=\"strict\",partition=\"0\"} 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("under_replicated"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Below the minimum: ALL is not acknowledged, LEADER is.
    let all = publish(
        &c,
        leader,
        "strict",
        "all-while-down",
        proto::AckPolicy::All,
        Duration::from_secs(3),
    )
    .await;
    assert!(
        all.is_err(),
        "an ALL publish was acknowledged below min ISR: {all:?}"
    );
    let ack = publish(
        &c,
        leader,
        "strict",
        "leader-while-down",
        proto::AckPolicy::Leader,
        Duration::from_secs(10),
    )
    .await
    .expect("LEADER ack below min ISR");
    assert_eq!(
        ack.offset, 2,
        "offsets 1 and 2 were written, only not committed"
    );
    let hw = partition_json(&c, leader, "strict")
        .await
        .expect("partition")["high_watermark"]
        .clone();
    assert_eq!(hw, 0, "nothing past the first message is committed");

    // The follower comes back, catches up and rejoins: commits resume.
    c.nodes[down].restart().await;
    wait_until(CLUSTER_TIMEOUT, "the follower rejoins the ISR", || async {
        partition_json(&c, leader, "strict")
            .await
            .is_some_and(|p| p["under_replicated"] == false && p["high_watermark"] == 2)
    })
    .await;
    let ack = publish(
        &c,
        leader,
        "strict",
        "after",
        proto::AckPolicy::All,
        Duration::from_secs(10),
    )
    .await
    .expect("ALL ack after the follower rejoined");
    assert_eq!(ack.offset, 3);
    // Every replica holds the same four messages.
    for i in 0..3 {
        wait_until(
            CLUSTER_TIMEOUT,
            "every replica has the four messages",
            || async {
                partition_json(&c, i, "strict")
                    .await
                    .is_some_and(|p| p["newest_offset"] == 3)
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_isr_a_stopping_leader_ends_calls_waiting_for_acks() {
    let mut opts = ClusterOptions::three("isrstop");
    opts.extra_yaml = TIMINGS.into();
    let mut c = Cluster::start(&opts).await;
    create(&c, "stopping", Some(3)).await;
    let leader = leader_index(&c, "stopping").await;
    publish_acked(&c, leader, "stopping", 0..1).await;
    let down = kill_a_follower(&mut c, leader, "stopping").await;
    let follower = (0..3).find(|i| *i != leader && *i != down).unwrap();

    // Below min ISR nothing commits: these calls wait for their acks, one
    // at the leader, one at the follower (its publish goes through NATS).
    let call = waiting_call(&c, leader, "stopping").await;
    let at_follower = waiting_call(&c, follower, "stopping").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!call.is_finished(), "the call waits for its ack");
    assert!(!at_follower.is_finished(), "the follower's call waits too");

    // The follower stops first: its call cannot get an ack any more either.
    stop_ending(&mut c, follower, at_follower, "follower").await;
    assert!(!call.is_finished(), "the leader's call still waits");
    // Without the call released, the node's shutdown gave the gRPC port
    // its full 2 s.
    stop_ending(&mut c, leader, call, "leader").await;
}

/// The status `call` ends with: an error, within 5 s (`what` says why it
/// should end).
async fn ended(call: Call, what: &str) -> tonic::Status {
    tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .expect("call task")
        .expect_err("no ack can come")
}

/// Stops node `i` gracefully while `call` waits there for its ack: the
/// call ends with INTERNAL "server shutting down" and the node stops
/// within 1.5 s.
async fn stop_ending(c: &mut Cluster, i: usize, call: Call, who: &str) {
    let t0 = std::time::Instant::now();
    c.nodes[i].stop().await;
    let stopped = t0.elapsed();
    let st = ended(call, &format!("the {who}'s call ends with the node")).await;
    assert_eq!(st.code(), tonic::Code::Internal, "{st:?}");
    assert!(st.message().contains("shutting down"), "{st:?}");
    assert!(
        stopped < Duration::from_millis(1500),
        "the {who} took {stopped:?} to stop"
    );
}

/// A unary call waiting for its ack ends as soon as its partition stops
/// at the leader for good — the stream deleted (NOT_FOUND), the partition
/// paused (FAILED_PRECONDITION) — instead of at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_isr_a_partition_that_stops_ends_calls_waiting_for_acks() {
    let mut opts = ClusterOptions::three("isrgone");
    opts.extra_yaml = TIMINGS.into();
    let mut c = Cluster::start(&opts).await;
    create(&c, "pausing", Some(3)).await;
    create(&c, "deleting", Some(3)).await;
    let paused = leader_index(&c, "pausing").await;
    let deleted = leader_index(&c, "deleting").await;
    publish_acked(&c, paused, "pausing", 0..1).await;
    publish_acked(&c, deleted, "deleting", 0..1).await;
    // A node that leads neither stream: with it gone, neither commits.
    let down = (0..3).find(|i| *i != paused && *i != deleted).unwrap();
    c.nodes[down].kill9();
    wait_out_of_isr(&c, paused, "pausing", down).await;
    wait_out_of_isr(&c, deleted, "deleting", down).await;
    let pausing = waiting_call(&c, paused, "pausing").await;
    let deleting = waiting_call(&c, deleted, "deleting").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !pausing.is_finished() && !deleting.is_finished(),
        "both calls wait for their acks"
    );

    let mut admin = c.nodes[paused].client().await;
    admin
        .pause_stream(proto::PauseStreamRequest {
            name: "pausing".into(),
            ..Default::default()
        })
        .await
        .expect("pause");
    admin
        .delete_stream(proto::DeleteStreamRequest {
            name: "deleting".into(),
        })
        .await
        .expect("delete");
    let why = "the call ends with its partition, not at its deadline";
    let st = ended(pausing, why).await;
    assert_eq!(st.code(), tonic::Code::FailedPrecondition, "{st:?}");
    assert!(st.message().contains("partition paused"), "{st:?}");
    let st = ended(deleting, why).await;
    assert_eq!(st.code(), tonic::Code::NotFound, "{st:?}");
    assert!(st.message().contains("stream deleted"), "{st:?}");
}

/// A follower's fetch that finds nothing new waits at the leader when it
/// asks to (`waitMs`) and is answered as soon as there are records, or
/// shortly after the high watermark moved past the one it knows; one that
/// does not ask is answered at once. Probed on the leader's NATS port with
/// the fetch requests followers send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_isr_caught_up_fetches_wait_at_the_leader_for_records() {
    use liftbridge::wire::replication as rw;

    let mut opts = ClusterOptions::three("isrheld");
    opts.extra_yaml = TIMINGS.into();
    let namespace = opts.namespace.clone();
    let c = Cluster::start(&opts).await;
    create(&c, "held", None).await;
    let leader = leader_index(&c, "held").await;
    let ack = publish(
        &c,
        leader,
        "held",
        "m0",
        proto::AckPolicy::All,
        Duration::from_secs(10),
    )
    .await
    .expect("ALL ack");
    assert_eq!(ack.offset, 0);
    let mut probe = FetchProbe::new(&c, leader, &namespace, "held").await;
    let answers = &mut probe.answers;
    let ask = |body| probe.ask.send(body);
    // Any epoch: the answer names the leader's.
    ask(fetch_request(u64::MAX, 1, 0, -1)).await;
    let m = tokio::time::timeout(Duration::from_secs(5), answers.next())
        .await
        .expect("an answer to a fetch in another epoch")
        .unwrap();
    let epoch = rw::decode_response(m.payload).unwrap().leader_epoch;

    // Caught up (offset 1), knowing hw 0, asking to wait: held.
    ask(fetch_request(epoch, 1, 5_000, 0)).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(700), answers.next())
            .await
            .is_err(),
        "a caught-up fetch that asks to wait is held"
    );
    let sent = std::time::Instant::now();
    publish(
        &c,
        leader,
        "held",
        "m1",
        proto::AckPolicy::Leader,
        Duration::from_secs(10),
    )
    .await
    .expect("LEADER ack");
    let m = tokio::time::timeout(Duration::from_secs(3), answers.next())
        .await
        .expect("the held fetch is answered once there is a record")
        .unwrap();
    let r = rw::decode_response(m.payload).unwrap();
    assert!(r.held, "answered as a held fetch");
    assert_eq!(
        r.records.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        vec![1]
    );
    assert!(sent.elapsed() < Duration::from_secs(3));

    // Not asking to wait: answered at once, empty; asked until the
    // followers have m1 too and the high watermark is 1.
    let settled = std::time::Instant::now() + Duration::from_secs(10);
    let hw = loop {
        ask(fetch_request(epoch, 2, 0, 0)).await;
        let m = tokio::time::timeout(Duration::from_millis(500), answers.next())
            .await
            .expect("a fetch that does not ask to wait is answered at once")
            .unwrap();
        let r = rw::decode_response(m.payload).unwrap();
        assert!(!r.held && r.records.is_empty(), "{r:?}");
        if r.hw == 1 {
            break r.hw;
        }
        assert!(
            std::time::Instant::now() < settled,
            "high watermark {} instead of 1",
            r.hw
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // Waiting with nothing new: answered, empty, when the wait ends.
    let asked = std::time::Instant::now();
    ask(fetch_request(epoch, 2, 400, hw)).await;
    let m = tokio::time::timeout(Duration::from_secs(3), answers.next())
        .await
        .expect("answered when its wait ends")
        .unwrap();
    let r = rw::decode_response(m.payload).unwrap();
    assert!(r.held && r.records.is_empty(), "{r:?}");
    assert!(
        asked.elapsed() >= Duration::from_millis(350),
        "held for its wait, answered after {:?}",
        asked.elapsed()
    );

    // Knowing an older high watermark: answered soon with the current one.
    ask(fetch_request(epoch, 2, 5_000, -1)).await;
    let m = tokio::time::timeout(Duration::from_millis(1_000), answers.next())
        .await
        .expect("a stale high watermark is answered soon")
        .unwrap();
    let r = rw::decode_response(m.payload).unwrap();
    assert!(r.held && r.records.is_empty(), "{r:?}");
    assert_eq!(r.hw, hw);
}

/// A subscription to partition 0 of `stream` from the earliest offset on
/// node `i`, with `readISRReplica`.
pub(crate) async fn isr_subscription(
    c: &Cluster,
    i: usize,
    stream: &str,
) -> tonic::Streaming<proto::Message> {
    let mut client = c.nodes[i].client().await;
    client
        .subscribe(proto::SubscribeRequest {
            stream: stream.into(),
            start_position: proto::StartPosition::Earliest as i32,
            read_isr_replica: true,
            ..Default::default()
        })
        .await
        .expect("subscribe with readISRReplica")
        .into_inner()
}

/// Reads `n` messages of partition 0 of `stream` from node `i` with
/// `readISRReplica` (after the confirming empty message).
pub(crate) async fn read_isr(c: &Cluster, i: usize, stream: &str, n: usize) -> Vec<(i64, String)> {
    let mut s = isr_subscription(c, i, stream).await;
    let mut got = Vec::with_capacity(n + 1);
    while got.len() < n + 1 {
        let m = tokio::time::timeout(Duration::from_secs(20), s.next())
            .await
            .expect("messages within 20 s")
            .expect("stream open")
            .expect("message");
        got.push((m.offset, String::from_utf8_lossy(&m.value).into_owned()));
    }
    assert_eq!(got.remove(0).1, "", "the confirming empty message first");
    got
}

/// A PublishAsync stream to the leader of a replicated partition: its
/// messages reach the leader's log without a NATS publish and are
/// replicated as any other: every AckPolicy ALL ack arrives, at offsets
/// in the stream's order, and every replica holds the same messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_isr_publish_async_to_the_leader_is_replicated() {
    let mut opts = ClusterOptions::three("israsync");
    opts.extra_yaml = TIMINGS.into();
    let c = Cluster::start(&opts).await;
    create(&c, "pasync", None).await;
    let leader = leader_index(&c, "pasync").await;
    const N: usize = 500;
    let reqs: Vec<_> = (0..N)
        .map(|i| proto::PublishRequest {
            stream: "pasync".into(),
            value: format!("m{i}").into_bytes().into(),
            correlation_id: format!("c{i}"),
            ack_policy: proto::AckPolicy::All as i32,
            expected_offset: -1,
            ..Default::default()
        })
        .collect();
    let mut client = c.nodes[leader].client().await;
    let mut responses = client
        .publish_async(futures::stream::iter(reqs))
        .await
        .expect("publish_async")
        .into_inner();
    let mut acks = Vec::with_capacity(N);
    while acks.len() < N {
        let r = tokio::time::timeout(Duration::from_secs(30), responses.next())
            .await
            .expect("acks within 30 s")
            .expect("stream open")
            .expect("response");
        assert!(r.async_error.is_none(), "{r:?}");
        let a = r.ack.expect("an ack");
        acks.push((a.offset, a.correlation_id));
    }
    acks.sort();
    let want: Vec<(i64, String)> = (0..N).map(|i| (i as i64, format!("c{i}"))).collect();
    assert_eq!(acks, want);
    let want: Vec<(i64, String)> = (0..N).map(|i| (i as i64, format!("m{i}"))).collect();
    for i in 0..3 {
        assert_eq!(read_isr(&c, i, "pasync", N).await, want, "node {i}");
    }
}

/// kill -9 closes the leader's routes, so its followers find nobody
/// answering fetches: they report it after `replica.fetch.timeout` (500 ms)
/// and a new leader is elected long before `replica.max.leader.timeout`
/// (60 s here) would have it reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_isr_a_leader_whose_node_left_is_replaced_without_the_leader_timeout() {
    let mut opts = ClusterOptions::three("isrgone");
    opts.extra_yaml = "clustering.replica.max.lag.time: 2s\n\
                       clustering.replica.max.leader.timeout: 60s\n\
                       clustering.replica.max.idle.wait: 500ms\n\
                       clustering.replica.fetch.timeout: 500ms\n"
        .into();
    let mut c = Cluster::start(&opts).await;
    create(&c, "gone", None).await;
    let leader = leader_index(&c, "gone").await;
    let old = c.nodes[leader].spec.id.clone();
    publish_acked(&c, leader, "gone", 0..1).await;
    let killed = std::time::Instant::now();
    c.nodes[leader].kill9();
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let new = loop {
        match c.leader_among(&others, "gone", 0).await {
            Some(l) if l != old => break c.index_of(&l),
            _ => {}
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "no new leader 20 s after the leader's node left"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    publish_acked(&c, new, "gone", 1..2).await;
}

/// A stand-in follower: sends fetch requests to a partition's leader over
/// NATS, as followers do, and receives the answers.
struct FetchProbe {
    ask: FetchSender,
    answers: async_nats::Subscriber,
}

#[derive(Clone)]
struct FetchSender {
    nc: async_nats::Client,
    subject: String,
    inbox: String,
}

impl FetchSender {
    async fn send(&self, body: bytes::Bytes) {
        self.nc
            .publish_with_reply(self.subject.clone(), self.inbox.clone(), body)
            .await
            .unwrap();
        self.nc.flush().await.unwrap();
    }
}

impl FetchProbe {
    /// Connected to node `via`'s NATS port, for partition 0 of `stream`.
    async fn new(c: &Cluster, via: usize, namespace: &str, stream: &str) -> FetchProbe {
        let spec = &c.nodes[via].spec;
        let nc = async_nats::connect(format!("nats://{}:{}", spec.ip, spec.client))
            .await
            .expect("connect to the leader's node");
        let inbox = nc.new_inbox();
        let answers = nc.subscribe(inbox.clone()).await.unwrap();
        let subject = liftbridge::partition::subjects::replicate(namespace, stream, 0);
        FetchProbe {
            ask: FetchSender { nc, subject, inbox },
            answers,
        }
    }
}

/// A fetch request from `offset` in leader epoch `epoch`, waiting up to
/// `wait_ms` when caught up, knowing high watermark `hw`.
fn fetch_request(epoch: u64, offset: i64, wait_ms: u32, hw: i64) -> bytes::Bytes {
    use liftbridge::wire::{pb, replication as rw};
    rw::encode_fetch(&pb::ReplicationRequest {
        replica_id: "probe".into(),
        offset,
        leader_epoch: epoch,
        written: offset,
        wait_ms,
        hw,
    })
}

/// With `clustering.replication.max.bytes` at 16 KiB, no fetch answer is
/// larger: 40 messages of 1 KiB are replicated (every ALL publish is
/// acknowledged) in answers of at most 16 KiB, which together hold every
/// offset once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_isr_fetch_answers_stay_within_replication_max_bytes() {
    use liftbridge::wire::replication as rw;

    const MAX: usize = 16 * 1024;
    let mut opts = ClusterOptions::three("isrmax");
    opts.extra_yaml = format!("{TIMINGS}clustering.replication.max.bytes: {MAX}\n");
    let namespace = opts.namespace.clone();
    let c = Cluster::start(&opts).await;
    create(&c, "max", None).await;
    let leader = leader_index(&c, "max").await;
    let value = "v".repeat(1024);
    for i in 0..40 {
        let ack = publish(
            &c,
            leader,
            "max",
            &value,
            proto::AckPolicy::All,
            Duration::from_secs(10),
        )
        .await
        .expect("ALL ack");
        assert_eq!(ack.offset, i);
    }
    let mut probe = FetchProbe::new(&c, leader, &namespace, "max").await;
    let mut epoch = u64::MAX;
    let mut next = 0i64;
    let mut answers = 0;
    while next < 40 {
        probe.ask.send(fetch_request(epoch, next, 0, -1)).await;
        let m = tokio::time::timeout(Duration::from_secs(5), probe.answers.next())
            .await
            .expect("an answer")
            .expect("subscription open");
        let size = m.payload.len();
        let r = rw::decode_response(m.payload).expect("a fetch answer");
        if epoch == u64::MAX {
            // The first answer only names the leader's epoch.
            epoch = r.leader_epoch;
            continue;
        }
        assert!(size <= MAX, "an answer of {size} bytes");
        let offsets: Vec<i64> = r.records.iter().map(|(o, _)| *o as i64).collect();
        assert!(!offsets.is_empty(), "no records from {next}");
        assert_eq!(
            offsets,
            (next..next + offsets.len() as i64).collect::<Vec<_>>()
        );
        next += offsets.len() as i64;
        answers += 1;
    }
    assert_eq!(next, 40);
    // 40 KiB of values in answers of at most 16 KiB.
    assert!(answers >= 3, "{answers} answers");
}
