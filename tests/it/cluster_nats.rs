//! Metadata nodes over the NATS transport, in one process: three
//! `Metadata` instances with their own data directories and in-process NATS
//! clients on one embedded `NatsServer`. Contract: a seed node bootstraps
//! and the others join through `<ns>.raft.metadata.join`; every member
//! registers itself as a broker; a proposal on a follower is forwarded to
//! the controller and is visible locally when `propose` returns; after the
//! controller goes away another member takes over and proposals continue;
//! `bootstrap.peers` forms one group deterministically and
//! `max.quorum.size` leaves the surplus members as learners.

use std::time::{Duration, Instant};

use liftbridge::cluster::{
    Bootstrap, ClusterOptions, MetaCommand, MetaError, MetaResponse, Metadata, MetadataOptions,
    MetadataState, NodeInfo,
};
use liftbridge::config::NatsOptions;
use liftbridge::nats::NatsServer;

const NS: &str = "lbtest";

fn info(id: &str) -> NodeInfo {
    NodeInfo {
        id: id.into(),
        host: "127.0.0.1".into(),
        port: 9000,
        nats_addr: "127.0.0.1:4222".into(),
        http_addr: String::new(),
    }
}

fn create(name: &str, rf: i32) -> MetaCommand {
    MetaCommand::CreateStream {
        name: name.into(),
        subject: name.into(),
        group: String::new(),
        replication_factor: rf,
        partitions: 1,
        config: Default::default(),
        creation_timestamp_ns: 1,
    }
}

async fn nats() -> NatsServer {
    NatsServer::start(NatsOptions {
        host: "127.0.0.1".into(),
        port: 0,
        ..Default::default()
    })
    .await
    .unwrap()
}

async fn open(
    nats: &NatsServer,
    dir: &std::path::Path,
    id: &str,
    bootstrap: Bootstrap,
    max_quorum_size: u32,
) -> Metadata {
    let cluster = ClusterOptions {
        client: nats.local_client(&format!("raft-{id}")),
        namespace: NS.into(),
        bootstrap,
        max_quorum_size,
    };
    Metadata::open_cluster(dir, info(id), cluster, MetadataOptions::default())
        .await
        .unwrap()
}

/// Polls `f` until it holds (20 s deadline: elections take 1–2 s, and the
/// machine is shared).
async fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn brokers(md: &Metadata) -> Vec<String> {
    md.state().brokers.keys().cloned().collect()
}

fn voters(md: &Metadata) -> Vec<String> {
    let mut v: Vec<String> = md
        .members()
        .into_iter()
        .filter(|m| m.voter)
        .map(|m| m.node.id)
        .collect();
    v.sort();
    v
}

fn same_streams(a: &MetadataState, b: &MetadataState) -> bool {
    a.streams == b.streams && a.brokers == b.brokers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_nats_join_forward_and_failover() {
    let nats = nats().await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let n0 = open(&nats, dirs[0].path(), "n0", Bootstrap::Seed, 0).await;
    assert!(n0.is_leader(), "the seed leads its one-member group");
    let n1 = open(&nats, dirs[1].path(), "n1", Bootstrap::Join, 0).await;
    let n2 = open(&nats, dirs[2].path(), "n2", Bootstrap::Join, 0).await;
    let nodes = [n0.clone(), n1.clone(), n2.clone()];

    // Both joiners become voters and register themselves as brokers.
    for md in &nodes {
        eventually("three voters and three brokers everywhere", || {
            voters(md) == ["n0", "n1", "n2"] && brokers(md) == ["n0", "n1", "n2"]
        })
        .await;
    }
    assert_eq!(n1.leader_id().as_deref(), Some("n0"));
    assert_eq!(n1.role(), "follower");
    assert_eq!(n0.role(), "leader");

    // A proposal on a follower is forwarded and visible there on return.
    assert_eq!(
        n1.propose(create("from-n1", 3)).await.unwrap(),
        MetaResponse::Ok
    );
    let s = n1.state();
    let p = &s.stream("from-n1").expect("applied locally").partitions[0];
    assert_eq!(
        p.replicas.len(),
        3,
        "replication factor 3 over three brokers"
    );
    assert_eq!(p.isr, p.replicas, "a new partition's ISR is every replica");
    // Rejections travel back too.
    assert_eq!(
        n2.propose(create("from-n1", 1)).await.unwrap(),
        MetaResponse::Rejected(liftbridge::cluster::ApplyError::AlreadyExists {
            name: "from-n1".into()
        })
    );

    // The controller goes away: the two others elect a new one.
    n0.shutdown().await.unwrap();
    let t0 = Instant::now();
    eventually("a new controller among n1 and n2", || {
        n1.is_leader() || n2.is_leader()
    })
    .await;
    println!("new metadata leader after {:?}", t0.elapsed());
    let (leader, follower) = if n1.is_leader() {
        (&n1, &n2)
    } else {
        (&n2, &n1)
    };
    eventually("the follower knows the new controller", || {
        follower.leader_id() == Some(leader.node().id.clone())
    })
    .await;
    // Proposals continue, on the follower too (forwarded to the new leader).
    follower
        .propose_ok(create("after-failover", 2))
        .await
        .unwrap();
    leader.propose_ok(create("on-new-leader", 1)).await.unwrap();
    eventually("both survivors applied the same state", || {
        let (a, b) = (n1.state(), n2.state());
        a.stream("on-new-leader").is_some() && same_streams(&a, &b)
    })
    .await;

    n1.shutdown().await.unwrap();
    n2.shutdown().await.unwrap();
    nats.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_nats_peers_bootstrap_and_quorum_limit() {
    let nats = nats().await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let peers = Bootstrap::Peers(vec!["p-a".into(), "p-b".into()]);
    // The higher id starts first: it waits for the lowest, which initializes.
    let b = open(&nats, dirs[1].path(), "p-b", peers.clone(), 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        b.leader_id().is_none(),
        "no group before every listed peer is up"
    );
    let a = open(&nats, dirs[0].path(), "p-a", peers, 2).await;
    // A third node joins while the quorum is capped at two voters.
    let c = open(&nats, dirs[2].path(), "p-c", Bootstrap::Join, 2).await;
    for md in [&a, &b, &c] {
        eventually("two voters, three members, three brokers", || {
            voters(md) == ["p-a", "p-b"]
                && md.members().len() == 3
                && brokers(md) == ["p-a", "p-b", "p-c"]
        })
        .await;
    }
    assert_eq!(c.role(), "learner");
    // A learner's proposals are forwarded like a follower's.
    c.propose_ok(create("from-learner", -1)).await.unwrap();
    assert_eq!(
        c.state().stream("from-learner").unwrap().partitions[0]
            .replicas
            .len(),
        3,
        "-1 = every broker, learners included"
    );

    // Without a quorum nothing commits: NoLeader within `leader_wait`.
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    let err = c.propose(create("lost", 1)).await.unwrap_err();
    assert!(matches!(err, MetaError::NoLeader), "{err:?}");
    c.shutdown().await.unwrap();
    nats.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_nats_wiped_member_rejoins_without_a_stale_voter() {
    let nats = nats().await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let n0 = open(&nats, dirs[0].path(), "w0", Bootstrap::Seed, 0).await;
    let n1 = open(&nats, dirs[1].path(), "w1", Bootstrap::Join, 0).await;
    let n2 = open(&nats, dirs[2].path(), "w2", Bootstrap::Join, 0).await;
    eventually("three voters and brokers", || {
        voters(&n1) == ["w0", "w1", "w2"] && brokers(&n1) == ["w0", "w1", "w2"]
    })
    .await;
    let old_raft_id = n2.raft_id();
    n2.shutdown().await.unwrap();
    // Same server id, empty data directory: a new Raft id.
    let fresh = tempfile::tempdir().unwrap();
    let n2 = open(&nats, fresh.path(), "w2", Bootstrap::Join, 0).await;
    assert_ne!(n2.raft_id(), old_raft_id);
    eventually("the new w2 replaces the old one", || {
        let m = n0.members();
        m.len() == 3
            && m.iter().all(|m| m.voter)
            && m.iter().any(|m| m.raft_id == n2.raft_id())
            && !m.iter().any(|m| m.raft_id == old_raft_id)
    })
    .await;
    n1.propose_ok(create("after-rejoin", 3)).await.unwrap();
    eventually("the rejoined node has the state", || {
        n2.state().stream("after-rejoin").is_some()
    })
    .await;
    for md in [n0, n1, n2] {
        md.shutdown().await.unwrap();
    }
    nats.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_nats_bad_requests_are_refused_and_change_nothing() {
    use bytes::Bytes;
    use liftbridge::cluster::control::{join_subject, propagate_subject, JoinReply, JoinRequest};
    let nats = nats().await;
    let dir = tempfile::tempdir().unwrap();
    let md = open(&nats, dir.path(), "solo", Bootstrap::Seed, 0).await;
    let c = nats.local_client("intruder");
    let wait = Duration::from_millis(500);
    // Garbage on the control subjects gets no answer.
    for subject in [join_subject(NS), propagate_subject(NS)] {
        let r = c
            .request(&subject, Bytes::from_static(b"\xff not json"), wait)
            .await;
        assert!(r.is_err(), "{subject}: {r:?}");
    }
    // A join without a usable server id is refused.
    let bad = JoinRequest {
        raft_id: 7,
        node: NodeInfo {
            id: "has space".into(),
            ..Default::default()
        },
    };
    let r = c
        .request(
            &join_subject(NS),
            Bytes::from(serde_json::to_vec(&bad).unwrap()),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let reply: JoinReply = serde_json::from_slice(&r.payload).unwrap();
    assert!(matches!(reply, JoinReply::Failed { .. }), "{reply:?}");
    // A garbage Raft RPC is answered with a decode error, not a crash.
    let r = c
        .request(
            &format!("{NS}.raft.{}.append", md.raft_id()),
            Bytes::from_static(b"[1,2"),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert!(
        std::str::from_utf8(&r.payload)
            .unwrap()
            .contains("BadRequest"),
        "{:?}",
        r.payload
    );
    assert_eq!(voters(&md), ["solo"]);
    assert_eq!(md.members().len(), 1);
    md.propose_ok(create("still-fine", 1)).await.unwrap();
    md.shutdown().await.unwrap();
    nats.shutdown().await;
}
