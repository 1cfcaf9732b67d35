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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use liftbridge::api::proto::{self, api_client::ApiClient};
use serde_json::Value;
use tonic::transport::Channel;

use crate::support::procs::{Proc, START_TIMEOUT};
use crate::support::{free_port, wait_until};

/// Deadline for cluster-wide conditions (elections, catch-up) on a loaded
/// machine.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);

/// Where one node listens; kept across restarts.
#[derive(Debug, Clone)]
struct Spec {
    id: String,
    ip: String,
    grpc: u16,
    client: u16,
    cluster: u16,
    http: u16,
}

impl Spec {
    fn new(id: &str, ip: &str) -> Spec {
        Spec {
            id: id.into(),
            ip: ip.into(),
            grpc: free_port(),
            client: free_port(),
            cluster: free_port(),
            http: free_port(),
        }
    }
}

/// The liftbridge.yaml of `me` in a cluster of `all`: routes to every other
/// node's cluster port, Raft bootstrapped from the list of all server ids.
fn yaml(me: &Spec, all: &[Spec], data: &Path, namespace: &str) -> String {
    let routes: String = all
        .iter()
        .filter(|s| s.id != me.id)
        .map(|s| format!("      - nats-route://{}:{}\n", s.ip, s.cluster))
        .collect();
    let peers: Vec<&str> = all.iter().map(|s| s.id.as_str()).collect();
    format!(
        "listen: {ip}:{grpc}\n\
         data.dir: {data}\n\
         logging.level: debug\n\
         http.listen: {ip}:{http}\n\
         clustering:\n  server.id: {id}\n  namespace: {namespace}\n  raft.bootstrap.peers: [{peers}]\n\
         nats:\n  listen: {ip}:{client}\n  cluster:\n    name: lbraft\n    listen: {ip}:{cluster}\n    routes:\n{routes}",
        ip = me.ip,
        grpc = me.grpc,
        http = me.http,
        client = me.client,
        cluster = me.cluster,
        id = me.id,
        data = data.display(),
        peers = peers.join(", "),
    )
}

/// One node process, optionally inside a network namespace.
struct Node {
    spec: Spec,
    proc: Proc,
}

impl Node {
    fn start(spec: &Spec, all: &[Spec], namespace: &str, netns: Option<&str>) -> Node {
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = dir.path().join("liftbridge.yaml");
        std::fs::write(&cfg, yaml(spec, all, &dir.path().join("data"), namespace))
            .expect("write liftbridge.yaml");
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_liftbridge"));
        let args = vec!["-c".to_string(), cfg.display().to_string()];
        let proc = match netns {
            None => Proc::spawn(&bin, args, dir),
            Some(ns) => {
                let mut full = vec!["netns".into(), "exec".into(), ns.into()];
                full.push(bin.display().to_string());
                full.extend(args);
                Proc::spawn(Path::new("/usr/sbin/ip"), full, dir)
            }
        };
        Node {
            spec: spec.clone(),
            proc,
        }
    }

    /// Waits until the gRPC and HTTP ports accept connections.
    async fn wait_ready(&mut self) {
        let end = Instant::now() + START_TIMEOUT;
        for port in [self.spec.grpc, self.spec.http] {
            loop {
                let addr = (self.spec.ip.as_str(), port);
                if tokio::net::TcpStream::connect(addr).await.is_ok() {
                    break;
                }
                assert!(
                    self.proc.is_running(),
                    "node {} exited; log:\n{}",
                    self.spec.id,
                    self.proc.log_text()
                );
                assert!(
                    Instant::now() < end,
                    "node {} not listening on {port}; log:\n{}",
                    self.spec.id,
                    self.proc.log_text()
                );
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
    }

    async fn info(&self) -> Option<Value> {
        crate::support::http_json_at(&self.spec.ip, self.spec.http, "/api/v1/info").await
    }

    /// The controller this node reports, if any.
    async fn controller(&self) -> Option<String> {
        self.info().await?["cluster"]["controller"]
            .as_str()
            .map(str::to_string)
    }

    async fn client(&self) -> ApiClient<Channel> {
        self.try_client().await.expect("connect gRPC")
    }

    /// A client, or `None` while the node cannot be reached (just after a
    /// link comes back up the neighbour entry may still be failing).
    async fn try_client(&self) -> Option<ApiClient<Channel>> {
        let ch = Channel::from_shared(format!("http://{}:{}", self.spec.ip, self.spec.grpc))
            .unwrap()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(15))
            .connect()
            .await
            .ok()?;
        Some(ApiClient::new(ch))
    }

    /// The node's metadata; `None` when it cannot be reached or answered
    /// with an error (callers poll).
    async fn metadata(&self) -> Option<Meta> {
        let mut c = self.try_client().await?;
        let md = c
            .fetch_metadata(proto::FetchMetadataRequest::default())
            .await
            .ok()?
            .into_inner();
        Some(Meta::from(md))
    }
}

/// The replicated part of FetchMetadata (offsets are per node, not metadata).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    /// id → (host, port, partitions, leading).
    brokers: BTreeMap<String, (String, i32, i32, i32)>,
    /// stream → partition → (leader, replicas, isr, paused, readonly).
    streams: BTreeMap<String, BTreeMap<i32, PartitionView>>,
}

type PartitionView = (String, Vec<String>, Vec<String>, bool, bool);

impl From<proto::FetchMetadataResponse> for Meta {
    fn from(md: proto::FetchMetadataResponse) -> Meta {
        let brokers = md
            .brokers
            .into_iter()
            .map(|b| (b.id, (b.host, b.port, b.partition_count, b.leader_count)))
            .collect();
        let streams = md
            .stream_metadata
            .into_iter()
            .map(|s| {
                let parts = s
                    .partitions
                    .into_iter()
                    .map(|(id, p)| {
                        let mut replicas = p.replicas;
                        replicas.sort();
                        let mut isr = p.isr;
                        isr.sort();
                        (id, (p.leader, replicas, isr, p.paused, p.readonly))
                    })
                    .collect();
                (s.name, parts)
            })
            .collect();
        Meta { brokers, streams }
    }
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

/// Waits until every node in `nodes` reports the same controller and
/// three registered voters; returns the controller's server id.
async fn wait_formed(nodes: &[&Node]) -> String {
    let end = Instant::now() + CLUSTER_TIMEOUT;
    loop {
        let mut seen = Vec::new();
        for n in nodes {
            let info = n.info().await.unwrap_or(Value::Null);
            let c = &info["cluster"];
            let members = c["nodes"].as_array().cloned().unwrap_or_default();
            // Every node also shows its NATS routes to the other two.
            let routes = info["nats"]["routes"].as_array().map_or(0, Vec::len);
            let ok = members.len() == 3
                && routes >= 2
                && members
                    .iter()
                    .all(|m| m["voter"] == true && m["registered"] == true);
            seen.push(c["controller"].as_str().filter(|_| ok).map(str::to_string));
        }
        if let Some(Some(first)) = seen.first() {
            if seen.iter().all(|s| s.as_deref() == Some(first.as_str())) {
                return first.clone();
            }
        }
        assert!(
            Instant::now() < end,
            "cluster not formed in {CLUSTER_TIMEOUT:?}: controllers {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every node returns the same metadata; returns it.
async fn wait_identical(nodes: &[&Node], what: &str) -> Meta {
    let end = Instant::now() + CLUSTER_TIMEOUT;
    loop {
        let mut all = Vec::new();
        for n in nodes {
            all.push(n.metadata().await);
        }
        if let Some(Some(first)) = all.first() {
            if all.iter().all(|m| m.as_ref() == Some(first)) {
                return first.clone();
            }
        }
        assert!(Instant::now() < end, "{what}: metadata differs: {all:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
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
        .map(|s| Node::start(s, &specs, "lbprocs", None))
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
        Node::start(&specs[0], &specs, "lbiso", Some(&net.name)),
        Node::start(&specs[1], &specs, "lbiso", None),
        Node::start(&specs[2], &specs, "lbiso", None),
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
