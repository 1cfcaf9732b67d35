//! Failover when the dead node held more than a partition (issues 10 and
//! 11), with three real node processes:
//! - `cluster_failover_controller_kill`: kill -9 of the metadata controller
//!   while it leads a partition under AckPolicy ALL publishing. Its node is
//!   gone from the NATS cluster, so a survivor starts the metadata election
//!   as soon as the controller's lease has run out (it does not wait for
//!   openraft's own, longer timer); the followers' leader reports reach the
//!   new controller, the partition gets a new leader and publishing
//!   resumes. The timeline (new controller, first ack) is printed.
//! - `cluster_failover_group_coordinator_kill`: a consumer group with two
//!   members; the node that coordinates it is killed; both members report
//!   the coordinator (ReportConsumerGroupCoordinator through other nodes),
//!   and within `groups.coordinator.timeout` the group has a new
//!   coordinator with a higher epoch, which hands out the assignments; the
//!   members read what was published after the kill.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use liftbridge::api::proto;
use liftbridge::api::proto::api_client::ApiClient;
use parking_lot::Mutex;
use tonic::transport::Channel;

use crate::support::cluster::{Cluster, ClusterOptions, CLUSTER_TIMEOUT};

/// Replica timings of the failover benchmark (`bench cluster`).
const REPLICA_YAML: &str = "clustering.replica.max.lag.time: 5s\n\
     clustering.replica.max.leader.timeout: 1s\n\
     clustering.replica.max.idle.wait: 500ms\n\
     clustering.replica.fetch.timeout: 500ms\n\
     clustering.min.insync.replicas: 2\n";

/// The fast path's log line (src/cluster/control.rs).
const FAST_ELECTION_LOG: &str = "metadata controller's node left the NATS cluster";

/// Ack timeout of the failover publisher: the resolution of the timing.
const PUBLISH_TIMEOUT: Duration = Duration::from_millis(250);

async fn create_stream(
    c: &mut ApiClient<Channel>,
    name: &str,
    partitions: i32,
) -> Result<(), tonic::Status> {
    let r = c
        .create_stream(proto::CreateStreamRequest {
            subject: name.into(),
            name: name.into(),
            replication_factor: 3,
            partitions,
            ..Default::default()
        })
        .await;
    match r {
        Ok(_) => Ok(()),
        // A retried request whose first answer was lost.
        Err(s) if s.code() == tonic::Code::AlreadyExists => Ok(()),
        Err(s) => Err(s),
    }
}

/// Waits until the nodes in `among` agree on a leader of every partition
/// of `stream` and its ISR holds all three replicas; returns the leaders.
async fn wait_full_isr(
    cluster: &Cluster,
    among: &[usize],
    stream: &str,
    partitions: i32,
) -> Vec<String> {
    let end = Instant::now() + CLUSTER_TIMEOUT;
    loop {
        let mut leaders = Vec::new();
        for p in 0..partitions {
            let mut views = BTreeSet::new();
            for &i in among {
                if let Some(v) = cluster.partition_view(i, stream, p).await {
                    views.insert(v);
                }
            }
            match views.into_iter().collect::<Vec<_>>().as_slice() {
                [(l, reps, isr, ..)] if !l.is_empty() && reps.len() == 3 && isr == reps => {
                    leaders.push(l.clone())
                }
                _ => break,
            }
        }
        if leaders.len() == partitions as usize {
            return leaders;
        }
        assert!(
            Instant::now() < end,
            "{stream}: no agreed leader with a full ISR"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One publish of the failover publisher.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    sent: Instant,
    done: Instant,
    acked: bool,
}

/// Publishes with a window of 1 (AckPolicy ALL) through `c` until `stop`,
/// recording every attempt.
fn spawn_publisher(
    c: ApiClient<Channel>,
    stream: String,
    stop: tokio_util::sync::CancellationToken,
) -> (Arc<Mutex<Vec<Attempt>>>, tokio::task::JoinHandle<()>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let out = log.clone();
    let task = tokio::spawn(async move {
        let mut i = 0u64;
        while !stop.is_cancelled() {
            i += 1;
            let mut req = tonic::Request::new(proto::PublishRequest {
                value: format!("m{i}").into_bytes().into(),
                stream: stream.clone(),
                ack_policy: proto::AckPolicy::All as i32,
                expected_offset: -1,
                ..Default::default()
            });
            req.set_timeout(PUBLISH_TIMEOUT);
            let sent = Instant::now();
            let r = tokio::time::timeout(PUBLISH_TIMEOUT * 2, c.clone().publish(req)).await;
            let acked = matches!(r, Ok(Ok(resp)) if resp.get_ref().ack.is_some());
            let done = Instant::now();
            log.lock().push(Attempt { sent, done, acked });
            if !acked {
                // A refused connection fails at once: do not spin.
                let left = PUBLISH_TIMEOUT.saturating_sub(done - sent);
                tokio::time::sleep(left.min(Duration::from_millis(50))).await;
            }
        }
    });
    (out, task)
}

fn acks(log: &Mutex<Vec<Attempt>>) -> usize {
    log.lock().iter().filter(|a| a.acked).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_controller_kill() {
    let mut o = ClusterOptions::three("fo");
    o.extra_yaml = REPLICA_YAML.into();
    let mut cluster = Cluster::start(&o).await;
    let all = [0, 1, 2];
    let controller = cluster.wait_formed().await;
    let ci = cluster.index_of(&controller);
    let survivors: Vec<usize> = all.iter().copied().filter(|i| *i != ci).collect();
    let via = survivors[0];

    // A stream whose partition the controller leads (placement spreads
    // leaders by load: a few streams are enough).
    let mut c = cluster.nodes[via].client().await;
    let mut led = None;
    for k in 0..9 {
        let name = format!("c{k}");
        create_stream(&mut c, &name, 1).await.expect("CreateStream");
        let leaders = wait_full_isr(&cluster, &all, &name, 1).await;
        if leaders[0] == controller {
            led = Some(name);
            break;
        }
    }
    let stream = led.unwrap_or_else(|| panic!("no stream placed on the controller {controller}"));

    let stop = tokio_util::sync::CancellationToken::new();
    let (log, publisher) = spawn_publisher(c.clone(), stream.clone(), stop.clone());
    let end = Instant::now() + CLUSTER_TIMEOUT;
    while acks(&log) < 20 {
        assert!(Instant::now() < end, "no acks before the kill");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let killed_wall = chrono::Utc::now();
    cluster.nodes[ci].kill9();
    let t0 = Instant::now();
    // The new controller, as both survivors report it.
    let new_controller = loop {
        if let Some(c) = cluster.controller_among(&survivors).await {
            if c != controller {
                break c;
            }
        }
        assert!(
            t0.elapsed() < CLUSTER_TIMEOUT,
            "no new controller after the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let elected = t0.elapsed();
    let first_ack = loop {
        let found = log
            .lock()
            .iter()
            .find(|a| a.acked && a.sent >= t0)
            .map(|a| a.done - t0);
        if let Some(d) = found {
            break d;
        }
        assert!(t0.elapsed() < CLUSTER_TIMEOUT, "no ack after the kill");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    stop.cancel();
    publisher.await.expect("publisher");
    println!(
        "FAILOVER controller_kill: controller {controller} killed; {new_controller} known as \
         controller on both survivors after {} ms; first ack after {} ms",
        elected.as_millis(),
        first_ack.as_millis()
    );

    // The partition moved to a survivor, and the election was started by
    // the controller watch (the killed node had left the NATS cluster), not
    // by openraft's own timer.
    let leaders = wait_full_isr_of_two(&cluster, &survivors, &stream).await;
    assert_ne!(leaders, controller);
    let logs: Vec<String> = survivors
        .iter()
        .map(|&i| cluster.nodes[i].proc.log_text())
        .collect();
    print_timeline(&killed_wall, &survivors, &cluster, &logs);
    assert!(
        logs.iter().any(|l| l.contains(FAST_ELECTION_LOG)),
        "no survivor started the election on seeing the controller's node gone"
    );
    cluster.stop_all().await;
}

/// Log lines that mark a failover's steps.
const TIMELINE: [&str; 5] = [
    "metadata controller known",
    "no metadata controller known",
    FAST_ELECTION_LOG,
    "partition leader unreachable",
    "partition role or leader epoch changed",
];

/// Prints the survivors' failover log lines from the kill on (the nodes
/// log to stderr with UTC timestamps: `2026-12-01T20:34:11.571438Z  INFO …`).
fn print_timeline(
    killed: &chrono::DateTime<chrono::Utc>,
    survivors: &[usize],
    cluster: &Cluster,
    logs: &[String],
) {
    let from = killed.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    println!("TIMELINE {from} kill -9");
    let mut lines = Vec::new();
    for (&i, log) in survivors.iter().zip(logs) {
        for l in log.lines() {
            let Some(at) = l.get(..from.len()) else {
                continue;
            };
            if at >= from.as_str() && TIMELINE.iter().any(|k| l.contains(k)) {
                lines.push(format!("{} {l}", cluster.nodes[i].spec.id));
            }
        }
    }
    lines.sort_by(|a, b| {
        a.split_once(' ')
            .map(|x| x.1)
            .cmp(&b.split_once(' ').map(|x| x.1))
    });
    for l in lines {
        println!("TIMELINE {l}");
    }
}

/// The leader of partition 0 of `stream` that the two `survivors` agree on.
async fn wait_full_isr_of_two(cluster: &Cluster, survivors: &[usize], stream: &str) -> String {
    let end = Instant::now() + CLUSTER_TIMEOUT;
    loop {
        if let Some(l) = cluster.leader_among(survivors, stream, 0).await {
            return l;
        }
        assert!(Instant::now() < end, "{stream}: no leader among survivors");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const GROUP: &str = "grp";
/// `groups.coordinator.timeout` of the group test.
const COORDINATOR_TIMEOUT: Duration = Duration::from_secs(3);

/// The group's coordinator and epoch as node `via` sees them.
async fn group_of(cluster: &Cluster, via: usize) -> Option<(String, u64)> {
    let mut c = cluster.nodes[via].try_client().await?;
    let md = c
        .fetch_metadata(proto::FetchMetadataRequest {
            streams: vec![],
            groups: vec![GROUP.into()],
        })
        .await
        .ok()?
        .into_inner();
    let g = md.group_metadata.into_iter().next()?;
    (g.error == proto::consumer_group_metadata::Error::Ok as i32)
        .then_some((g.coordinator, g.epoch))
}

/// `member`'s partitions of stream `cg`, asked of the coordinator at
/// `coordinator` under `epoch`.
async fn assignments(
    cluster: &Cluster,
    coordinator: usize,
    member: &str,
    epoch: u64,
) -> Result<Vec<i32>, tonic::Status> {
    let mut c = cluster.nodes[coordinator]
        .try_client()
        .await
        .ok_or_else(|| tonic::Status::unavailable("coordinator not reachable"))?;
    let r = c
        .fetch_consumer_group_assignments(proto::FetchConsumerGroupAssignmentsRequest {
            group_id: GROUP.into(),
            consumer_id: member.into(),
            epoch,
        })
        .await?
        .into_inner();
    assert_eq!(r.epoch, epoch);
    let mut parts: Vec<i32> = r
        .assignments
        .into_iter()
        .filter(|a| a.stream == "cg")
        .flat_map(|a| a.partitions)
        .collect();
    parts.sort_unstable();
    Ok(parts)
}

/// Publishes `value` to `cg`/`partition` through node `via` until it is
/// acknowledged (the partition may be between leaders).
async fn publish_until_acked(cluster: &Cluster, via: usize, partition: i32, value: String) {
    let end = Instant::now() + CLUSTER_TIMEOUT;
    loop {
        if let Some(mut c) = cluster.nodes[via].try_client().await {
            let mut req = tonic::Request::new(proto::PublishRequest {
                value: value.clone().into_bytes().into(),
                stream: "cg".into(),
                partition,
                ack_policy: proto::AckPolicy::All as i32,
                expected_offset: -1,
                ..Default::default()
            });
            req.set_timeout(Duration::from_secs(2));
            if matches!(c.publish(req).await, Ok(r) if r.get_ref().ack.is_some()) {
                return;
            }
        }
        assert!(Instant::now() < end, "publish of {value} not acknowledged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads `cg`/`partition` from the earliest offset as group member
/// `member` in `epoch`, at the partition's leader (as node `via` reports
/// it), until `want` values were seen; returns them.
async fn consume(
    cluster: &Cluster,
    via: usize,
    member: &str,
    epoch: u64,
    partition: i32,
    want: &BTreeSet<String>,
) -> BTreeSet<String> {
    let end = Instant::now() + CLUSTER_TIMEOUT;
    let mut seen = BTreeSet::new();
    loop {
        assert!(
            Instant::now() < end,
            "{member}: partition {partition}: read {seen:?}, want {want:?}"
        );
        let Some(view) = cluster.partition_view(via, "cg", partition).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Some(leader) = cluster.nodes.iter().position(|n| n.spec.id == view.0) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Some(mut c) = cluster.nodes[leader].try_client().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let req = proto::SubscribeRequest {
            stream: "cg".into(),
            partition,
            start_position: proto::StartPosition::Earliest as i32,
            consumer: Some(proto::Consumer {
                group_id: GROUP.into(),
                group_epoch: epoch,
                consumer_id: member.into(),
            }),
            ..Default::default()
        };
        let Ok(s) = c.subscribe(req).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut s = s.into_inner();
        // Until the stream ends, fails or stays idle: then look up the
        // leader again.
        while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(5), s.next()).await {
            if !m.value.is_empty() {
                seen.insert(String::from_utf8_lossy(&m.value).into_owned());
            }
            if want.is_subset(&seen) {
                return seen;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_group_coordinator_kill() {
    let mut o = ClusterOptions::three("gco");
    o.extra_yaml = format!(
        "{REPLICA_YAML}groups.coordinator.timeout: {}ms\ngroups.consumer.timeout: 60s\n",
        COORDINATOR_TIMEOUT.as_millis()
    );
    let mut cluster = Cluster::start(&o).await;
    let all = [0, 1, 2];
    let controller = cluster.wait_formed().await;
    // The coordinator's node is killed; the controller is left alone so
    // that what is measured is the group's own failover.
    let k = all
        .iter()
        .copied()
        .find(|i| cluster.nodes[*i].spec.id != controller)
        .expect("a node that is not the controller");
    let survivors: Vec<usize> = all.iter().copied().filter(|i| *i != k).collect();
    let (a, b) = (survivors[0], survivors[1]);

    let mut ca = cluster.nodes[a].client().await;
    create_stream(&mut ca, "cg", 2).await.expect("CreateStream");
    wait_full_isr(&cluster, &all, "cg", 2).await;
    let mut before: BTreeMap<i32, BTreeSet<String>> = BTreeMap::new();
    for p in 0..2 {
        for i in 0..5 {
            let v = format!("before-p{p}-{i}");
            publish_until_acked(&cluster, a, p, v.clone()).await;
            before.entry(p).or_default().insert(v);
        }
    }

    // Both members join through node k, which becomes the coordinator.
    let mut ck = cluster.nodes[k].client().await;
    for m in ["m1", "m2"] {
        let j = ck
            .join_consumer_group(proto::JoinConsumerGroupRequest {
                group_id: GROUP.into(),
                consumer_id: m.into(),
                streams: vec!["cg".into()],
            })
            .await
            .expect("JoinConsumerGroup")
            .into_inner();
        assert_eq!(j.coordinator, cluster.nodes[k].spec.id);
        assert_eq!(
            j.coordinator_timeout,
            COORDINATOR_TIMEOUT.as_nanos() as i64,
            "coordinator timeout handed to members (ns, as Liftbridge)"
        );
    }
    let (coordinator, epoch) = group_of(&cluster, k).await.expect("group metadata");
    assert_eq!(coordinator, cluster.nodes[k].spec.id);
    let p1 = assignments(&cluster, k, "m1", epoch)
        .await
        .expect("m1 assignments");
    let p2 = assignments(&cluster, k, "m2", epoch)
        .await
        .expect("m2 assignments");
    assert_eq!(p1.len() + p2.len(), 2, "m1 {p1:?} m2 {p2:?}");
    let mut both: Vec<i32> = p1.iter().chain(&p2).copied().collect();
    both.sort_unstable();
    assert_eq!(both, vec![0, 1], "every partition assigned once");
    // Each member reads its partitions under the coordinator's epoch.
    for (m, parts) in [("m1", &p1), ("m2", &p2)] {
        for &p in parts {
            consume(&cluster, a, m, epoch, p, &before[&p]).await;
        }
    }

    cluster.nodes[k].kill9();
    let t0 = Instant::now();
    // The members find the coordinator unreachable and report it, each
    // through another node (as a client with several addresses does).
    for m in ["m1", "m2"] {
        assert!(
            assignments(&cluster, k, m, epoch).await.is_err(),
            "the killed coordinator answered"
        );
    }
    let reported_at = Instant::now();
    for (m, via) in [("m1", a), ("m2", b)] {
        let mut c = cluster.nodes[via].client().await;
        c.report_consumer_group_coordinator(proto::ReportConsumerGroupCoordinatorRequest {
            group_id: GROUP.into(),
            consumer_id: m.into(),
            coordinator: coordinator.clone(),
            epoch,
        })
        .await
        .unwrap_or_else(|e| panic!("{m}: ReportConsumerGroupCoordinator: {e}"));
    }
    let (new_coordinator, new_epoch) = loop {
        let mut seen = BTreeSet::new();
        for &i in &survivors {
            seen.insert(group_of(&cluster, i).await);
        }
        if let [Some((c, e))] = seen.into_iter().collect::<Vec<_>>().as_slice() {
            if *c != coordinator {
                break (c.clone(), *e);
            }
        }
        assert!(
            reported_at.elapsed() < COORDINATOR_TIMEOUT,
            "no new coordinator within groups.coordinator.timeout of the reports"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let moved = reported_at.elapsed();
    println!(
        "FAILOVER group_coordinator_kill: {coordinator} killed; reports sent {} ms after the \
         kill; {new_coordinator} coordinates epoch {new_epoch} {} ms after the reports",
        (reported_at - t0).as_millis(),
        moved.as_millis()
    );
    assert!(new_epoch > epoch, "epoch {epoch} → {new_epoch}");
    let ni = cluster.index_of(&new_coordinator);
    assert!(survivors.contains(&ni), "new coordinator {new_coordinator}");

    // Assignments come from the new coordinator under the new epoch; the
    // old epoch is refused there.
    assert!(assignments(&cluster, ni, "m1", epoch).await.is_err());
    let q1 = assignments(&cluster, ni, "m1", new_epoch)
        .await
        .expect("m1 assignments from the new coordinator");
    let q2 = assignments(&cluster, ni, "m2", new_epoch)
        .await
        .expect("m2 assignments from the new coordinator");
    let mut both: Vec<i32> = q1.iter().chain(&q2).copied().collect();
    both.sort_unstable();
    assert_eq!(both, vec![0, 1], "m1 {q1:?} m2 {q2:?}");

    // The members keep consuming: what is published after the kill reaches
    // them (each partition's leader may have moved off the killed node).
    let mut after: BTreeMap<i32, BTreeSet<String>> = BTreeMap::new();
    for p in 0..2 {
        for i in 0..5 {
            let v = format!("after-p{p}-{i}");
            publish_until_acked(&cluster, a, p, v.clone()).await;
            after.entry(p).or_default().insert(v);
        }
    }
    for (m, parts) in [("m1", &q1), ("m2", &q2)] {
        for &p in parts {
            let want: BTreeSet<String> = before[&p].union(&after[&p]).cloned().collect();
            let got = consume(&cluster, a, m, new_epoch, p, &want).await;
            assert!(want.is_subset(&got), "{m}: partition {p}: {got:?}");
        }
    }
    cluster.stop_all().await;
}
