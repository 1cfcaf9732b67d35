//! Three real `liftbridge` processes meshed by NATS routes, started as a
//! user would (a liftbridge.yaml with `nats.cluster.*` routes and
//! `clustering.raft.bootstrap.peers`). Contract:
//! - the three form one metadata group; `FetchMetadata` on every node lists
//!   the three brokers with their real hosts and gRPC ports;
//! - `CreateStream` sent to a node that is not the controller succeeds
//!   (forwarded) and every node sees the stream;
//! - after `kill -9` of the controller another node is elected (the time is
//!   printed), metadata changes continue, and the killed node, restarted on
//!   its data, catches up;
//! - a node cut off from the other two by a Linux network namespace whose
//!   veth link is set down cannot commit a metadata change (its client gets
//!   "no known metadata leader"), the majority can; after the link is back
//!   every node's metadata is identical.
//! - an encrypted stream is stored sealed on every replica and a follower
//!   that takes over after the leader is killed serves the plaintext;
//! - the activity stream goes on, in order, after the metadata leader is
//!   killed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use liftbridge::api::proto;

use crate::support::cluster::{
    wait_formed, wait_identical, Meta, Node, NodeYaml, Spec, CLUSTER_TIMEOUT,
};
use crate::support::wait_until;

/// Starts `spec` in a cluster of `all` with direct routes.
fn start_node(spec: &Spec, all: &[Spec], namespace: &str, netns: Option<&str>) -> Node {
    Node::start(spec, &NodeYaml::direct(spec, all, namespace), netns)
}

fn create_req(name: &str, rf: i32) -> proto::CreateStreamRequest {
    proto::CreateStreamRequest {
        subject: format!("{name}.subj"),
        name: name.into(),
        replication_factor: rf,
        partitions: 2,
        ..Default::default()
    }
}

fn assert_brokers(meta: &Meta, specs: &[Spec]) {
    assert_eq!(meta.brokers.len(), 3, "{meta:?}");
    for s in specs {
        let (host, port, _, _) = &meta.brokers[&s.id];
        assert_eq!(host, &s.ip, "advertised host of {}", s.id);
        assert_eq!(*port, i32::from(s.grpc), "advertised gRPC port of {}", s.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_procs_create_failover_and_catch_up() {
    let specs: Vec<Spec> = ["lb-a", "lb-b", "lb-c"]
        .iter()
        .map(|id| Spec::new(id, "127.0.0.1"))
        .collect();
    let mut nodes: Vec<Node> = specs
        .iter()
        .map(|s| start_node(s, &specs, "lbprocs", None))
        .collect();
    for n in &mut nodes {
        n.wait_ready().await;
    }
    let refs: Vec<&Node> = nodes.iter().collect();
    let controller = wait_formed(&refs).await;
    let meta = wait_identical(&refs, "after start").await;
    assert_brokers(&meta, &specs);

    // CreateStream on a node that does not lead the metadata group.
    let follower = nodes.iter().find(|n| n.spec.id != controller).unwrap();
    follower
        .client()
        .await
        .create_stream(create_req("on-follower", 3))
        .await
        .expect("CreateStream on a non-controller node");
    let meta = wait_identical(&refs, "after CreateStream").await;
    let parts = &meta.streams["on-follower"];
    assert_eq!(parts.len(), 2);
    for (leader, replicas, isr, ..) in parts.values() {
        assert_eq!(replicas.len(), 3, "replication factor 3");
        assert_eq!(isr, replicas, "a new partition's ISR is every replica");
        assert!(replicas.contains(leader));
    }
    let leaders: std::collections::BTreeSet<&String> = parts.values().map(|p| &p.0).collect();
    assert_eq!(
        leaders.len(),
        2,
        "the two partitions have different leaders"
    );

    // Each node runs only the partitions it leads: partition 0's leader
    // answers for it, the other replicas refuse. A message published with a
    // plain NATS client on a node that does not lead reaches the leader over
    // the routes and is recorded there.
    let p0_leader = &parts[&0].0;
    let leader_node = nodes.iter().find(|n| &n.spec.id == p0_leader).unwrap();
    let other = nodes.iter().find(|n| &n.spec.id != p0_leader).unwrap();
    let pm = proto::FetchPartitionMetadataRequest {
        stream: "on-follower".into(),
        partition: 0,
    };
    leader_node
        .client()
        .await
        .fetch_partition_metadata(pm.clone())
        .await
        .expect("the partition leader serves it");
    let err = other
        .client()
        .await
        .fetch_partition_metadata(pm)
        .await
        .expect_err("a replica that does not lead does not run it");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    // The stenographer's interest must have reached the other node, or a
    // plain publish there has no receiver (NATS semantics).
    wait_until(
        CLUSTER_TIMEOUT,
        "the leader's interest on the other node",
        || async {
            crate::cluster_routes::routes_with_interest(other.spec.http, "on-follower.subj").await
                >= 1
        },
    )
    .await;
    let nc = async_nats::connect(format!("nats://127.0.0.1:{}", other.spec.client))
        .await
        .expect("connect NATS");
    nc.publish("on-follower.subj", "from-a-replica".into())
        .await
        .unwrap();
    nc.flush().await.unwrap();
    let mut c = leader_node.client().await;
    let mut sub =
        crate::api_common::subscribe(&mut c, crate::api_common::from_earliest("on-follower", 0))
            .await;
    let got = crate::api_common::take(&mut sub, 1).await;
    assert_eq!(got[0].value.as_ref(), b"from-a-replica");

    // `liftbridge status --http` prints the cluster as a node sees it.
    let out = Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args([
            "status",
            "--addr",
            &format!("127.0.0.1:{}", other.spec.grpc),
            "--http",
            &format!("127.0.0.1:{}", other.spec.http),
        ])
        .output()
        .expect("run liftbridge status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("controller {controller}")),
        "status names the controller: {text}"
    );
    for s in &specs {
        assert!(
            text.contains(&format!("{}  voter", s.id)),
            "status lists {}: {text}",
            s.id
        );
    }

    // kill -9 the controller: the other two elect a new one.
    let ci = nodes.iter().position(|n| n.spec.id == controller).unwrap();
    nodes[ci].proc.kill9();
    let t0 = Instant::now();
    let survivors: Vec<&Node> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != ci)
        .map(|(_, n)| n)
        .collect();
    let new_controller = loop {
        let a = survivors[0].controller().await;
        let b = survivors[1].controller().await;
        if let Some(new) = a
            .as_ref()
            .filter(|a| Some(*a) == b.as_ref() && **a != controller)
        {
            break new.clone();
        }
        assert!(
            t0.elapsed() < CLUSTER_TIMEOUT,
            "no new controller after {CLUSTER_TIMEOUT:?}: {a:?} {b:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "controller {controller} killed; {new_controller} elected after {:?}",
        t0.elapsed()
    );
    // Metadata operations continue, on both survivors.
    for (i, n) in survivors.iter().enumerate() {
        n.client()
            .await
            .create_stream(create_req(&format!("after-kill-{i}"), 2))
            .await
            .expect("CreateStream after failover");
    }
    // The killed node restarts on its data and catches up.
    nodes[ci].proc.restart();
    nodes[ci].wait_ready().await;
    let refs: Vec<&Node> = nodes.iter().collect();
    let meta = wait_identical(&refs, "after restart").await;
    for name in ["on-follower", "after-kill-0", "after-kill-1"] {
        assert!(meta.streams.contains_key(name), "{name} in {meta:?}");
    }
    assert_brokers(&meta, &specs);
    wait_formed(&refs).await;
}

/// A network namespace with a veth pair to the host; removed on drop.
struct Netns {
    name: String,
    host_if: String,
    ns_if: String,
    host_ip: String,
    ns_ip: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("/usr/sbin/ip")
        .args(args)
        .output()
        .expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    fn create() -> Netns {
        let tag: u32 = rand::random::<u32>() & 0xff_ffff;
        let (b2, b3) = (((tag >> 8) & 0xff) as u8, (tag & 0xfc) as u8);
        let n = Netns {
            name: format!("lbt{tag:06x}"),
            host_if: format!("lbh{tag:06x}"),
            ns_if: format!("lbn{tag:06x}"),
            host_ip: format!("10.{}.{b2}.{}", 200 + (tag >> 16) % 50, b3 + 1),
            ns_ip: format!("10.{}.{b2}.{}", 200 + (tag >> 16) % 50, b3 + 2),
        };
        ip(&["netns", "add", &n.name]);
        ip(&[
            "link", "add", &n.host_if, "type", "veth", "peer", "name", &n.ns_if,
        ]);
        ip(&["link", "set", &n.ns_if, "netns", &n.name]);
        ip(&[
            "addr",
            "add",
            &format!("{}/30", n.host_ip),
            "dev",
            &n.host_if,
        ]);
        ip(&["link", "set", &n.host_if, "up"]);
        n.exec_ip(&["addr", "add", &format!("{}/30", n.ns_ip), "dev", &n.ns_if]);
        n.exec_ip(&["link", "set", "lo", "up"]);
        n.set_link(true);
        n
    }

    fn exec_ip(&self, args: &[&str]) {
        let mut full = vec!["netns", "exec", &self.name, "/usr/sbin/ip"];
        full.extend_from_slice(args);
        ip(&full);
    }

    /// Brings the namespace side of the link up or down. Cutting this side
    /// keeps the host's address local, so the host nodes keep talking to
    /// each other while the namespace is unreachable.
    fn set_link(&self, up: bool) {
        self.exec_ip(&["link", "set", &self.ns_if, if up { "up" } else { "down" }]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace destroys its veth end and with it the pair.
        let _ = Command::new("/usr/sbin/ip")
            .args(["netns", "del", &self.name])
            .output();
        let _ = Command::new("/usr/sbin/ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_procs_isolated_node_cannot_commit() {
    let net = Netns::create();
    // The isolated node has the lowest id, so it initializes the group and
    // most likely is the controller when it is cut off.
    let specs = vec![
        Spec::new("iso-a", &net.ns_ip),
        Spec::new("iso-b", &net.host_ip),
        Spec::new("iso-c", &net.host_ip),
    ];
    let mut nodes = vec![
        start_node(&specs[0], &specs, "lbiso", Some(&net.name)),
        start_node(&specs[1], &specs, "lbiso", None),
        start_node(&specs[2], &specs, "lbiso", None),
    ];
    for n in &mut nodes {
        n.wait_ready().await;
    }
    let refs: Vec<&Node> = nodes.iter().collect();
    let controller = wait_formed(&refs).await;
    println!("controller before the cut: {controller}");
    nodes[1]
        .client()
        .await
        .create_stream(create_req("before-cut", -1))
        .await
        .expect("CreateStream before the cut");
    wait_identical(&refs, "before the cut").await;

    net.set_link(false);
    let t0 = Instant::now();
    // The majority elects (or keeps) a controller other than the isolated node.
    wait_until(
        CLUSTER_TIMEOUT,
        "a controller on the majority side",
        || async {
            let b = nodes[1].controller().await;
            let c = nodes[2].controller().await;
            b.is_some() && b == c && b.as_deref() != Some("iso-a")
        },
    )
    .await;
    println!("majority controller after the cut: {:?}", t0.elapsed());
    // The majority commits.
    nodes[2]
        .client()
        .await
        .create_stream(create_req("majority", 2))
        .await
        .expect("CreateStream on the majority side");
    // The isolated node cannot: a client inside its namespace gets
    // "no known metadata leader" (gRPC INTERNAL).
    let out = Command::new("/usr/sbin/ip")
        .args(["netns", "exec", &net.name, env!("CARGO_BIN_EXE_liftbridge")])
        .args([
            "stream",
            "--addr",
            &format!("{}:{}", specs[0].ip, specs[0].grpc),
            "create",
            "minority",
        ])
        .output()
        .expect("run the CLI in the namespace");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the isolated node committed: {stderr}"
    );
    assert!(
        stderr.contains("no known metadata leader"),
        "isolated CreateStream error: {stderr}"
    );

    net.set_link(true);
    let meta = wait_identical(&refs, "after healing").await;
    assert!(meta.streams.contains_key("majority"));
    assert!(meta.streams.contains_key("before-cut"));
    assert!(
        !meta.streams.contains_key("minority"),
        "the isolated node's change was not committed: {meta:?}"
    );
    assert_brokers(&meta, &specs);
    wait_formed(&refs).await;
}

/// Whether any file under `dir` contains `needle`.
fn on_disk(dir: &Path, needle: &[u8]) -> bool {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    return true;
                }
            }
        }
    }
    false
}

/// Encryption at rest with replication: followers store the sealed
/// records as the leader wrote them, and after the leader dies a follower
/// that becomes leader serves the plaintext (same master key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_procs_encrypted_stream_replicates_sealed() {
    use futures::StreamExt;
    let specs: Vec<Spec> = ["enc-a", "enc-b", "enc-c"]
        .iter()
        .map(|id| Spec::new(id, "127.0.0.1"))
        .collect();
    let env = vec![(
        "LIFTBRIDGE_ENCRYPTION_KEY".to_string(),
        "0123456789abcdef0123456789abcdef".to_string(),
    )];
    let mut nodes: Vec<Node> = specs
        .iter()
        .map(|s| Node::start_with_env(s, &NodeYaml::direct(s, &specs, "lbenc"), None, env.clone()))
        .collect();
    for n in &mut nodes {
        n.wait_ready().await;
    }
    let refs: Vec<&Node> = nodes.iter().collect();
    wait_formed(&refs).await;
    let req = |name: &str, encryption: bool| proto::CreateStreamRequest {
        subject: format!("{name}.subj"),
        name: name.into(),
        replication_factor: 3,
        partitions: 1,
        encryption: Some(proto::NullableBool { value: encryption }),
        ..Default::default()
    };
    let mut c = nodes[0].client().await;
    c.create_stream(req("sealed", true))
        .await
        .expect("create sealed");
    c.create_stream(req("plain", false))
        .await
        .expect("create plain");
    let meta = wait_identical(&refs, "after CreateStream").await;
    let leader_of = |s: &str| meta.streams[s][&0].0.clone();
    for (stream, value) in [
        ("sealed", &b"replicated-secret-marker"[..]),
        ("plain", &b"replicated-clear-marker"[..]),
    ] {
        let leader = nodes
            .iter()
            .find(|n| n.spec.id == leader_of(stream))
            .unwrap();
        let mut lc = leader.client().await;
        crate::api_common::publish_acked(&mut lc, stream, 0, b"", value).await;
    }
    // AckPolicy ALL: every ISR replica has both; wait for them on disk.
    let end = Instant::now() + CLUSTER_TIMEOUT;
    for n in &nodes {
        let data = n.proc.dir.path().join("data");
        while !on_disk(&data, b"replicated-clear-marker") {
            assert!(
                Instant::now() < end,
                "{} never stored the clear value",
                n.spec.id
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            !on_disk(&data, b"replicated-secret-marker"),
            "{} stored the encrypted stream's plaintext",
            n.spec.id
        );
    }

    // The leader dies; a follower takes over and reads its sealed copy.
    let old = leader_of("sealed");
    let i = nodes.iter().position(|n| n.spec.id == old).unwrap();
    nodes[i].proc.kill9();
    let rest: Vec<&Node> = nodes.iter().filter(|n| n.spec.id != old).collect();
    let end = Instant::now() + CLUSTER_TIMEOUT;
    'outer: loop {
        for n in &rest {
            let Some(mut c) = n.try_client().await else {
                continue;
            };
            let Ok(s) = c
                .subscribe(crate::api_common::from_earliest("sealed", 0))
                .await
            else {
                continue;
            };
            let mut s = s.into_inner();
            let mut got = Vec::new();
            while got.len() < 2 {
                match tokio::time::timeout(Duration::from_secs(5), s.next()).await {
                    Ok(Some(Ok(m))) => got.push(m),
                    _ => break,
                }
            }
            if got.len() == 2 {
                assert_eq!(&got[1].value[..], b"replicated-secret-marker");
                break 'outer;
            }
        }
        assert!(
            Instant::now() < end,
            "no new leader served the sealed stream"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Activity events of `__activity` read from whichever node serves it,
/// until `done` holds for them (ids and create/delete stream names).
async fn activity_until(
    nodes: &[&Node],
    done: impl Fn(&[proto::ActivityStreamEvent]) -> bool,
) -> Vec<proto::ActivityStreamEvent> {
    use futures::StreamExt;
    use prost::Message as _;
    // After a failover both the metadata and __activity's partition may
    // need a new leader, and the publisher backs off up to 10 s between
    // attempts: allow twice the cluster timeout on a loaded machine.
    let end = Instant::now() + 2 * CLUSTER_TIMEOUT;
    let mut last = Vec::new();
    loop {
        for n in nodes {
            let Some(mut c) = n.try_client().await else {
                continue;
            };
            let Ok(s) = c
                .subscribe(crate::api_common::from_earliest("__activity", 0))
                .await
            else {
                continue;
            };
            let mut s = s.into_inner();
            let mut out = Vec::new();
            while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(2), s.next()).await
            {
                if m == proto::Message::default() {
                    continue;
                }
                out.push(proto::ActivityStreamEvent::decode(m.value).expect("an event"));
                if done(&out) {
                    return out;
                }
            }
            last = out;
        }
        assert!(Instant::now() < end, "activity events so far: {last:#?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn created(events: &[proto::ActivityStreamEvent], name: &str) -> bool {
    events.iter().any(|e| {
        e.create_stream_op
            .as_ref()
            .is_some_and(|o| o.stream == name)
    })
}

/// The activity stream across a metadata leader failover: the new leader
/// goes on publishing (after what is already on the stream), in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_procs_activity_survives_metadata_failover() {
    let specs: Vec<Spec> = ["act-a", "act-b", "act-c"]
        .iter()
        .map(|id| Spec::new(id, "127.0.0.1"))
        .collect();
    let mut nodes: Vec<Node> = specs
        .iter()
        .map(|s| {
            let mut y = NodeYaml::direct(s, &specs, "lbact");
            y.extra = "activity.stream.enabled: true\n".into();
            Node::start(s, &y, None)
        })
        .collect();
    for n in &mut nodes {
        n.wait_ready().await;
    }
    let refs: Vec<&Node> = nodes.iter().collect();
    let controller = wait_formed(&refs).await;
    let mut c = nodes[0].client().await;
    c.create_stream(create_req("before", 3))
        .await
        .expect("create before");
    let first = activity_until(&refs, |e| created(e, "before")).await;
    assert!(created(&first, "__activity"), "{first:#?}");
    // Created once all three servers registered: every one holds a copy.
    let meta = wait_identical(&refs, "after the activity stream").await;
    assert_eq!(meta.streams["__activity"][&0].1.len(), 3, "{meta:?}");

    // The metadata leader dies; the stream is created through a survivor.
    let i = nodes.iter().position(|n| n.spec.id == controller).unwrap();
    nodes[i].proc.kill9();
    let rest: Vec<&Node> = nodes.iter().filter(|n| n.spec.id != controller).collect();
    let end = Instant::now() + CLUSTER_TIMEOUT;
    loop {
        let mut c = rest[0].client().await;
        match c.create_stream(create_req("after", 3)).await {
            Ok(_) => break,
            Err(st) if st.code() == tonic::Code::AlreadyExists => break,
            Err(st) => {
                assert!(Instant::now() < end, "no create after failover: {st:?}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    let events = activity_until(&rest, |e| created(e, "after")).await;
    assert!(created(&events, "before"), "{events:#?}");
    // In order: each id first appears after every smaller one (a repeat
    // after the failover is allowed: delivery is at least once).
    let mut firsts: Vec<u64> = Vec::new();
    for e in &events {
        if !firsts.contains(&e.id) {
            firsts.push(e.id);
        }
    }
    assert!(firsts.windows(2).all(|w| w[0] < w[1]), "{events:#?}");
}
