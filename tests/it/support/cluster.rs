//! Three (or more) real `liftbridge` processes forming one cluster, started
//! as a user would: a liftbridge.yaml per node with `nats.cluster.routes`
//! to the others and `clustering.raft.bootstrap.peers` listing every id.
//!
//! - [`Spec`] + [`NodeYaml`] + [`yaml`]: where a node listens and the file
//!   it runs with (extra yaml per node: `store.sync`, replica timings…);
//! - [`Node`]: one process (optionally inside a network namespace) with its
//!   gRPC client, `/api/v1/info` and metadata helpers, `kill -9`, graceful
//!   stop, restart on the same ports and data, deletion of its data dir
//!   while it is down;
//! - [`Cluster`]: three nodes on 127.0.0.1, optionally with every NATS route
//!   through a [`Proxy`] per ordered pair of nodes, so one node can be cut
//!   off, frozen or slowed down while the other two keep talking.
//!
//! Route topology with proxies: node `i` reaches node `j` only through
//! proxy `(i, j)` (its configured route), and every node advertises a
//! closed address for gossip, so no implicit route bypasses the proxies.
//! Both directions of a pair therefore cross one of the two proxies of the
//! pair; isolating a node freezes all four proxies it touches.
//!
//! Must not: use fixed ports (all come from `free_port`), leave processes
//! behind (a [`Proc`] is killed on drop), or sleep for fixed times where a
//! condition can be polled.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use liftbridge::api::proto::{self, api_client::ApiClient};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::procs::{Proc, START_TIMEOUT};
use super::proxy::{Dir, Proxy};
use super::{free_port, http_json_at};

/// Deadline for cluster-wide conditions (elections, catch-up) on a loaded
/// machine.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);

/// Where one node listens; kept across restarts.
#[derive(Debug, Clone)]
pub struct Spec {
    pub id: String,
    pub ip: String,
    pub grpc: u16,
    pub client: u16,
    pub cluster: u16,
    pub http: u16,
}

impl Spec {
    /// A node `id` on `ip` with fresh ports.
    pub fn new(id: &str, ip: &str) -> Spec {
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

/// The cluster-dependent part of a node's liftbridge.yaml.
#[derive(Debug, Clone, Default)]
pub struct NodeYaml {
    /// `clustering.namespace`.
    pub namespace: String,
    /// `clustering.raft.bootstrap.peers`: every server id.
    pub peers: Vec<String>,
    /// `nats.cluster.routes`, as `host:port`.
    pub routes: Vec<String>,
    /// `nats.cluster.advertise` (`host:port`), if set.
    pub advertise: Option<String>,
    /// Appended verbatim (top-level keys, dotted or nested).
    pub extra: String,
}

impl NodeYaml {
    /// Routes straight to every other node's cluster port, Raft peers from
    /// every id (the plain layout).
    pub fn direct(me: &Spec, all: &[Spec], namespace: &str) -> NodeYaml {
        NodeYaml {
            namespace: namespace.into(),
            peers: all.iter().map(|s| s.id.clone()).collect(),
            routes: all
                .iter()
                .filter(|s| s.id != me.id)
                .map(|s| format!("{}:{}", s.ip, s.cluster))
                .collect(),
            advertise: None,
            extra: String::new(),
        }
    }
}

/// The liftbridge.yaml of `me`, storing its data under `data`.
pub fn yaml(me: &Spec, data: &Path, y: &NodeYaml) -> String {
    let routes: String = y
        .routes
        .iter()
        .map(|hp| format!("      - nats-route://{hp}\n"))
        .collect();
    let advertise = y
        .advertise
        .as_ref()
        .map(|a| format!("    advertise: {a}\n"))
        .unwrap_or_default();
    format!(
        "listen: {ip}:{grpc}\n\
         data.dir: {data}\n\
         logging.level: debug\n\
         http.listen: {ip}:{http}\n\
         clustering:\n  server.id: {id}\n  namespace: {namespace}\n  raft.bootstrap.peers: [{peers}]\n\
         nats:\n  listen: {ip}:{client}\n  cluster:\n    name: {namespace}\n    listen: {ip}:{cluster}\n{advertise}    routes:\n{routes}{extra}",
        ip = me.ip,
        grpc = me.grpc,
        http = me.http,
        client = me.client,
        cluster = me.cluster,
        id = me.id,
        data = data.display(),
        namespace = y.namespace,
        peers = y.peers.join(", "),
        extra = y.extra,
    )
}

/// One node process, optionally inside a network namespace.
pub struct Node {
    pub spec: Spec,
    pub proc: Proc,
}

impl Node {
    /// Writes the node's liftbridge.yaml into a fresh temp dir and starts
    /// it (inside network namespace `netns` when given). Does not wait.
    pub fn start(spec: &Spec, y: &NodeYaml, netns: Option<&str>) -> Node {
        Node::start_with_env(spec, y, netns, Vec::new())
    }

    /// [`Node::start`] with extra environment variables (outside a
    /// network namespace).
    pub fn start_with_env(
        spec: &Spec,
        y: &NodeYaml,
        netns: Option<&str>,
        env: Vec<(String, String)>,
    ) -> Node {
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = dir.path().join("liftbridge.yaml");
        std::fs::write(&cfg, yaml(spec, &dir.path().join("data"), y))
            .expect("write liftbridge.yaml");
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_liftbridge"));
        let args = vec!["-c".to_string(), cfg.display().to_string()];
        let proc = match netns {
            None => Proc::spawn_with_env(&bin, args, env, dir),
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

    /// The node's `data.dir`.
    pub fn data_dir(&self) -> PathBuf {
        self.proc.dir.path().join("data")
    }

    /// Where this node keeps its copy of `stream`/`partition`.
    pub fn partition_dir(&self, stream: &str, partition: i32) -> PathBuf {
        self.data_dir()
            .join("streams")
            .join(stream)
            .join(partition.to_string())
    }

    /// Waits until the gRPC and HTTP ports accept connections.
    pub async fn wait_ready(&mut self) {
        if let Err(e) = self.try_wait_ready().await {
            panic!("{e}");
        }
    }

    /// [`Node::wait_ready`], with the failure (the node exited, or the
    /// deadline passed; with the node's log) as an error.
    pub async fn try_wait_ready(&mut self) -> Result<(), String> {
        let end = Instant::now() + START_TIMEOUT;
        for port in [self.spec.grpc, self.spec.http] {
            loop {
                let addr = (self.spec.ip.as_str(), port);
                if tokio::net::TcpStream::connect(addr).await.is_ok() {
                    break;
                }
                if !self.proc.is_running() {
                    return Err(format!(
                        "node {} exited; log:\n{}",
                        self.spec.id,
                        self.proc.log_text()
                    ));
                }
                if Instant::now() >= end {
                    return Err(format!(
                        "node {} not listening on {port}; log:\n{}",
                        self.spec.id,
                        self.proc.log_text()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        Ok(())
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        self.proc.kill9();
    }

    /// SIGTERM, then `kill -9` if it has not exited within 20 s.
    pub async fn stop(&mut self) {
        self.proc.stop(Duration::from_secs(20)).await;
    }

    /// Starts the (stopped or killed) node again on its ports and data and
    /// waits until it listens.
    pub async fn restart(&mut self) {
        self.proc.restart();
        self.wait_ready().await;
    }

    /// Deletes the node's whole data dir (Raft state and partitions); only
    /// while it is down.
    pub fn wipe_data(&mut self) {
        assert!(!self.proc.is_running(), "wipe the data of a stopped node");
        let d = self.data_dir();
        if d.exists() {
            std::fs::remove_dir_all(&d).expect("remove data dir");
        }
    }

    /// `/api/v1/info`, `None` while the node does not answer.
    pub async fn info(&self) -> Option<Value> {
        http_json_at(&self.spec.ip, self.spec.http, "/api/v1/info").await
    }

    /// The controller (metadata leader) this node reports, if any.
    pub async fn controller(&self) -> Option<String> {
        self.info().await?["cluster"]["controller"]
            .as_str()
            .map(str::to_string)
    }

    /// A client; panics when the node cannot be reached.
    pub async fn client(&self) -> ApiClient<Channel> {
        self.try_client().await.expect("connect gRPC")
    }

    /// A client, or `None` while the node cannot be reached (just after a
    /// restart, or a link that comes back up).
    pub async fn try_client(&self) -> Option<ApiClient<Channel>> {
        let ch = Channel::from_shared(format!("http://{}:{}", self.spec.ip, self.spec.grpc))
            .ok()?
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(15))
            .connect()
            .await
            .ok()?;
        Some(ApiClient::new(ch))
    }

    /// The node's metadata; `None` when it cannot be reached or answered
    /// with an error (callers poll).
    pub async fn metadata(&self) -> Option<Meta> {
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
pub struct Meta {
    /// id → (host, port, partitions, leading).
    pub brokers: BTreeMap<String, (String, i32, i32, i32)>,
    /// stream → partition → view.
    pub streams: BTreeMap<String, BTreeMap<i32, PartitionView>>,
}

/// (leader, replicas sorted, isr sorted, paused, readonly).
pub type PartitionView = (String, Vec<String>, Vec<String>, bool, bool);

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

impl Meta {
    /// The view of `stream`/`partition`, if the stream is known.
    pub fn partition(&self, stream: &str, partition: i32) -> Option<&PartitionView> {
        self.streams.get(stream)?.get(&partition)
    }
}

/// Waits until every node in `nodes` reports the same controller, three
/// registered voters and its NATS routes to the others; returns the
/// controller's server id.
pub async fn wait_formed(nodes: &[&Node]) -> String {
    let end = Instant::now() + CLUSTER_TIMEOUT;
    let want = nodes.len();
    loop {
        let mut seen = Vec::new();
        for n in nodes {
            let info = n.info().await.unwrap_or(Value::Null);
            let c = &info["cluster"];
            let members = c["nodes"].as_array().cloned().unwrap_or_default();
            let routes = info["nats"]["routes"].as_array().map_or(0, Vec::len);
            let ok = members.len() == want
                && routes + 1 >= want
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
pub async fn wait_identical(nodes: &[&Node], what: &str) -> Meta {
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

/// A loopback port that accepts and at once closes every connection: the
/// gossip address of proxied nodes, so implicit routes never bypass the
/// proxies (they fail and are given up).
struct Blackhole {
    port: u16,
    stop: CancellationToken,
}

impl Blackhole {
    async fn start() -> Blackhole {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind blackhole");
        let port = l.local_addr().expect("blackhole addr").port();
        let stop = CancellationToken::new();
        let s = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = s.cancelled() => return,
                    a = l.accept() => drop(a),
                }
            }
        });
        Blackhole { port, stop }
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// How to build a [`Cluster`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Server ids; their number is the cluster size.
    pub ids: Vec<String>,
    /// Namespace and NATS cluster name (unique per test).
    pub namespace: String,
    /// Yaml appended to every node's file.
    pub extra_yaml: String,
    /// Yaml appended to one node's file (index as in `ids`), after
    /// `extra_yaml`.
    pub node_yaml: BTreeMap<usize, String>,
    /// Route every NATS route through a [`Proxy`] per ordered pair.
    pub proxied: bool,
}

impl ClusterOptions {
    /// Three nodes `<prefix>-a`, `-b`, `-c` in namespace `<prefix>` plus a
    /// random tag, direct routes, no extra yaml.
    pub fn three(prefix: &str) -> ClusterOptions {
        let tag = rand::random::<u32>() & 0xff_ffff;
        ClusterOptions {
            ids: ["a", "b", "c"]
                .iter()
                .map(|s| format!("{prefix}-{s}"))
                .collect(),
            namespace: format!("{prefix}{tag:06x}"),
            extra_yaml: String::new(),
            node_yaml: BTreeMap::new(),
            proxied: false,
        }
    }
}

/// A running cluster; every process is killed and every proxy closed on
/// drop.
pub struct Cluster {
    pub nodes: Vec<Node>,
    /// `(from, to)` → the proxy node `from` uses to reach node `to`.
    links: BTreeMap<(usize, usize), Proxy>,
    _blackhole: Option<Blackhole>,
}

impl Cluster {
    /// Starts the nodes, waits until each listens and the metadata group
    /// has formed (one controller, every member registered).
    pub async fn start(opts: &ClusterOptions) -> Cluster {
        // A port picked by `free_port` can be taken before its node binds
        // it (by a proxy of this cluster binding port 0, or anyone else):
        // start again on fresh ports then.
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start(opts).await {
                Ok(c) => {
                    c.wait_formed().await;
                    return c;
                }
                Err(e) if e.contains("Address already in use") => last = e,
                Err(e) => panic!("{e}"),
            }
        }
        panic!("cluster did not start three times; last: {last}");
    }

    async fn try_start(opts: &ClusterOptions) -> Result<Cluster, String> {
        let specs: Vec<Spec> = opts
            .ids
            .iter()
            .map(|id| Spec::new(id, "127.0.0.1"))
            .collect();
        let mut links = BTreeMap::new();
        let mut blackhole = None;
        if opts.proxied {
            let bh = Blackhole::start().await;
            for (i, _) in specs.iter().enumerate() {
                for (j, to) in specs.iter().enumerate() {
                    if i != j {
                        let upstream = format!("127.0.0.1:{}", to.cluster)
                            .parse()
                            .expect("socket addr");
                        links.insert((i, j), Proxy::start(upstream).await);
                    }
                }
            }
            blackhole = Some(bh);
        }
        let mut nodes = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let mut y = NodeYaml::direct(spec, &specs, &opts.namespace);
            if let Some(bh) = &blackhole {
                y.routes = (0..specs.len())
                    .filter(|j| *j != i)
                    .map(|j| links[&(i, j)].addr())
                    .collect();
                y.advertise = Some(format!("127.0.0.1:{}", bh.port));
            }
            y.extra = format!(
                "{}\n{}\n",
                opts.extra_yaml,
                opts.node_yaml.get(&i).map(String::as_str).unwrap_or("")
            );
            nodes.push(Node::start(spec, &y, None));
        }
        for n in &mut nodes {
            n.try_wait_ready().await?;
        }
        Ok(Cluster {
            nodes,
            links,
            _blackhole: blackhole,
        })
    }

    /// Index of the node with server id `id`.
    pub fn index_of(&self, id: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.spec.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// The node with server id `id`.
    pub fn node(&self, id: &str) -> &Node {
        &self.nodes[self.index_of(id)]
    }

    /// Waits until all nodes agree on the controller; returns its id.
    pub async fn wait_formed(&self) -> String {
        let refs: Vec<&Node> = self.nodes.iter().collect();
        wait_formed(&refs).await
    }

    /// The controller as reported by every running node in `among`
    /// (indices), if they agree.
    pub async fn controller_among(&self, among: &[usize]) -> Option<String> {
        let mut seen = BTreeSet::new();
        for &i in among {
            seen.insert(self.nodes[i].controller().await?);
        }
        (seen.len() == 1).then(|| seen.into_iter().next().expect("one"))
    }

    /// Metadata of `stream`/`partition` as node `via` reports it.
    pub async fn partition_view(
        &self,
        via: usize,
        stream: &str,
        partition: i32,
    ) -> Option<PartitionView> {
        self.nodes[via]
            .metadata()
            .await?
            .partition(stream, partition)
            .cloned()
    }

    /// The leader of `stream`/`partition` that every node in `among`
    /// reports (they agree and it is not empty).
    pub async fn leader_among(
        &self,
        among: &[usize],
        stream: &str,
        partition: i32,
    ) -> Option<String> {
        let mut seen = BTreeSet::new();
        for &i in among {
            let v = self.partition_view(i, stream, partition).await?;
            seen.insert(v.0);
        }
        let l = (seen.len() == 1).then(|| seen.into_iter().next().expect("one"))?;
        (!l.is_empty()).then_some(l)
    }

    /// The proxies that carry traffic between node `i` and any other.
    fn links_of(&self, i: usize) -> impl Iterator<Item = &Proxy> {
        self.links
            .iter()
            .filter(move |((a, b), _)| *a == i || *b == i)
            .map(|(_, p)| p)
    }

    fn assert_proxied(&self) {
        assert!(
            !self.links.is_empty(),
            "network faults need ClusterOptions::proxied"
        );
    }

    /// Cuts node `i` off from every other node: its route connections stop
    /// carrying bytes (frozen, not closed, as a network partition does) and
    /// new ones get nowhere until [`Cluster::heal`].
    pub fn isolate(&self, i: usize) {
        self.assert_proxied();
        for p in self.links_of(i) {
            p.freeze();
        }
    }

    /// Delays every byte between node `i` and the others by `delay` in
    /// each direction.
    pub fn slow_down(&self, i: usize, delay: Duration) {
        self.assert_proxied();
        for p in self.links_of(i) {
            p.set_delay(Dir::ToUpstream, delay);
            p.set_delay(Dir::ToClient, delay);
        }
    }

    /// Undoes every [`Cluster::isolate`] and [`Cluster::slow_down`].
    pub fn heal(&self) {
        for p in self.links.values() {
            p.thaw();
            p.set_delay(Dir::ToUpstream, Duration::ZERO);
            p.set_delay(Dir::ToClient, Duration::ZERO);
        }
    }

    /// Gracefully stops every node (SIGTERM, waiting for exit).
    pub async fn stop_all(&mut self) {
        for n in &mut self.nodes {
            n.stop().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The proxies really carry every route: cutting off the controller
    /// makes the other two elect another one, and healing reunites all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cluster_proxied_isolate_and_heal() {
        let mut o = ClusterOptions::three("pxy");
        o.proxied = true;
        let c = Cluster::start(&o).await;
        let controller = c.wait_formed().await;
        let i = c.index_of(&controller);
        let others: Vec<usize> = (0..3).filter(|j| *j != i).collect();
        c.isolate(i);
        super::super::wait_until(
            CLUSTER_TIMEOUT,
            "a controller on the majority side",
            || async {
                c.controller_among(&others)
                    .await
                    .is_some_and(|n| n != controller)
            },
        )
        .await;
        c.heal();
        let after = c.wait_formed().await;
        assert_ne!(after, "", "a controller after healing");
    }
}
