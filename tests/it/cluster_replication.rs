//! Fault injection against replicated partitions: three real nodes, a
//! stream with replication factor 3 and min ISR 2, concurrent AckPolicy ALL
//! publishers through every node, a fault, healing, and then the history
//! checker over every replica's log read offline (see
//! `support::history`). Scenarios (issue 10):
//! - `leader_kill`: kill -9 of the partition leader, restart it;
//! - `leader_isolated`: the leader cut off from the other two by proxies:
//!   it acknowledges nothing sent through it, the majority elects a new
//!   leader, after healing the old one truncates and no log diverges;
//! - `rolling_restart`: every node stopped and restarted in turn under load;
//! - `slow_follower`: a follower behind a proxy delay drops out of the ISR
//!   while acks continue, and rejoins after the delay is lifted;
//! - `follower_wiped`: a follower's data dir deleted while it is down; it
//!   rebuilds its copy from the leader;
//! - `follower_dir_deleted`: only a follower's partition directory deleted
//!   while it is down (the node's note that it held records stays): it is
//!   not refused as a lone leader's would be, it rebuilds from the leader;
//! - `controller_kill`: kill -9 of the controller (which also leads the
//!   partition) while streams are being created and the partition needs a
//!   new leader.
//!
//! Each runs `LB_FAULT_ROUNDS` rounds (default 1), each on a fresh cluster,
//! for each policy in `LB_FAULT_SYNC` (`always`, `interval` or `both`,
//! default both). Every round prints one `FAULT-ROUND` line (read by
//! scripts/fault-rounds.sh) with its result, the acknowledged messages
//! checked and the failover time (kill → first ack of a message sent after
//! the kill; for a graceful stop, acked after the node is gone); a failed round keeps its nodes' logs under
//! `$CARGO_TARGET_TMPDIR/fault-logs/` and the test fails after all rounds.
//! Scenarios run one at a time (a static lock), so their timings are not
//! disturbed by each other.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use liftbridge::api::proto;

use crate::support::cluster::{Cluster, ClusterOptions, Spec, CLUSTER_TIMEOUT};
use crate::support::history::{self, History, Load, LoadOptions, Target};

/// One scenario at a time in this binary.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Replica timings short enough for tests (contract values).
const REPLICA_YAML: &str = "clustering.replica.max.lag.time: 2s\n\
     clustering.replica.max.leader.timeout: 1500ms\n\
     clustering.replica.max.idle.wait: 500ms\n\
     clustering.replica.fetch.timeout: 500ms\n";

/// The RPC deadline of every publish (the server's ack timeout).
const ACK_TIMEOUT: Duration = Duration::from_secs(2);
/// Concurrent publishers (plus the prober).
const PUBLISHERS: usize = 3;
/// Acks a phase waits for to call the cluster "making progress".
const PROGRESS: usize = 20;
/// Streams created during a controller kill, at most.
const MAX_CREATED: usize = 24;

fn rounds() -> usize {
    std::env::var("LB_FAULT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

fn policies() -> Vec<&'static str> {
    match std::env::var("LB_FAULT_SYNC").as_deref() {
        Ok("always") => vec!["always"],
        Ok("interval") => vec!["interval"],
        Ok("both") | Err(_) => vec!["always", "interval"],
        Ok(other) => panic!("LB_FAULT_SYNC={other}: use always, interval or both"),
    }
}

/// What one passed round measured.
#[derive(Debug, Clone, Default)]
pub struct RoundStats {
    /// Acknowledged messages the checker verified.
    pub acked: usize,
    pub attempted: usize,
    pub errors: usize,
    pub unacked_present: usize,
    /// Kill (or cut) → first ack of a message sent after it.
    pub failover: Option<Duration>,
}

/// Runs `round` for every policy and round count; prints one line per
/// round and fails at the end if any round failed. Returns the stats of
/// the passed rounds.
async fn run_rounds<F, Fut>(scenario: &str, round: F) -> Vec<RoundStats>
where
    F: Fn(&'static str, usize) -> Fut,
    Fut: Future<Output = RoundStats> + Send + 'static,
{
    let _one = SERIAL.lock().await;
    let mut passed = Vec::new();
    let mut failed = Vec::new();
    for policy in policies() {
        for r in 0..rounds() {
            let t = Instant::now();
            // A panic in the round (a failed check) ends its task; the
            // cluster it owned is dropped (processes killed) on unwinding.
            match tokio::spawn(round(policy, r)).await {
                Ok(s) => {
                    println!(
                        "FAULT-ROUND scenario={scenario} sync={policy} round={r} result=pass \
                         acked={} attempted={} errors={} unacked_present={} failover_ms={} secs={}",
                        s.acked,
                        s.attempted,
                        s.errors,
                        s.unacked_present,
                        s.failover
                            .map_or("-".to_string(), |d| d.as_millis().to_string()),
                        t.elapsed().as_secs()
                    );
                    passed.push(s);
                }
                Err(e) => {
                    let why = panic_text(e);
                    println!(
                        "FAULT-ROUND scenario={scenario} sync={policy} round={r} result=fail secs={}",
                        t.elapsed().as_secs()
                    );
                    println!("{scenario} {policy} round {r} failed: {why}");
                    failed.push(format!("{policy}#{r}: {why}"));
                }
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{scenario}: {} round(s) failed:\n{}",
        failed.len(),
        failed.join("\n---\n")
    );
    passed
}

fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into()),
        Err(e) => e.to_string(),
    }
}

/// A round's cluster, stream and publishers.
struct Round {
    cluster: Cluster,
    stream: String,
    load: Option<Load>,
    history: Arc<History>,
    /// The kept logs' name on failure.
    name: String,
    /// A node whose truncations `finish` reports (the cut-off leader).
    watch_truncation: Option<usize>,
}

impl Drop for Round {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Keep the evidence: every node's log.
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join("fault-logs")
                .join(&self.name);
            if std::fs::create_dir_all(&dir).is_ok() {
                for n in &self.cluster.nodes {
                    let _ = std::fs::copy(&n.proc.log, dir.join(format!("{}.log", n.spec.id)));
                }
                eprintln!("node logs kept in {}", dir.display());
            }
        }
    }
}

/// Cluster options of a round: replica timings, `store.sync`, min ISR 2.
fn options(prefix: &str, policy: &str, proxied: bool) -> ClusterOptions {
    let mut o = ClusterOptions::three(prefix);
    o.proxied = proxied;
    o.extra_yaml =
        format!("store.sync: {policy}\n{REPLICA_YAML}clustering.min.insync.replicas: 2\n");
    o
}

impl Round {
    /// Starts a cluster and creates stream `s` (RF 3, minIsr 2), waiting
    /// until it has a leader and a full ISR on every node.
    async fn start(scenario: &str, policy: &str, r: usize, proxied: bool) -> Round {
        Round::start_with(scenario, policy, r, proxied, "").await
    }

    /// As [`Round::start`], with `extra` yaml for every node.
    async fn start_with(
        scenario: &str,
        policy: &str,
        r: usize,
        proxied: bool,
        extra: &str,
    ) -> Round {
        let mut opts = options(scenario, policy, proxied);
        opts.extra_yaml.push_str(extra);
        let cluster = Cluster::start(&opts).await;
        let name = format!("{scenario}-{policy}-{r}-{}", opts.namespace);
        let mut round = Round {
            cluster,
            stream: "s".into(),
            load: None,
            history: History::new(),
            name,
            watch_truncation: None,
        };
        round.create("s").await.expect("CreateStream");
        round.wait_full_isr("s", CLUSTER_TIMEOUT).await;
        round
    }

    /// CreateStream `name` (RF 3, minIsr 2, one partition) through node 0.
    async fn create(&mut self, name: &str) -> Result<(), tonic::Status> {
        create_via(&self.cluster, 0, name).await
    }

    fn all(&self) -> Vec<usize> {
        (0..self.cluster.nodes.len()).collect()
    }

    /// Waits until the nodes in `among` agree on a leader of `stream`.
    async fn leader(&self, among: &[usize], stream: &str) -> String {
        let end = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            if let Some(l) = self.cluster.leader_among(among, stream, 0).await {
                return l;
            }
            assert!(Instant::now() < end, "no agreed leader of {stream}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every node reports ISR = replicas (3) for `stream`.
    async fn wait_full_isr(&self, stream: &str, within: Duration) {
        let end = Instant::now() + within;
        let mut last = Vec::new();
        loop {
            last.clear();
            for i in self.all() {
                last.push(self.cluster.partition_view(i, stream, 0).await);
            }
            let ok = last.iter().all(|v| {
                v.as_ref().is_some_and(|(l, reps, isr, ..)| {
                    !l.is_empty() && reps.len() == 3 && isr == reps
                })
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < end,
                "{stream}: ISR not full within {within:?}: {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts the publishers (and the prober) over every node.
    fn start_load(&mut self) {
        let targets: Vec<Target> = self
            .cluster
            .nodes
            .iter()
            .map(|n| (n.spec.id.clone(), format!("{}:{}", n.spec.ip, n.spec.grpc)))
            .collect();
        let load = Load::start(
            targets,
            LoadOptions {
                stream: self.stream.clone(),
                partition: 0,
                publishers: PUBLISHERS,
                ack_timeout: ACK_TIMEOUT,
                probe_every: Some(Duration::from_millis(100)),
            },
        );
        self.history = load.history.clone();
        self.load = Some(load);
    }

    /// Waits until `n` more messages are acknowledged.
    async fn progress(&self, n: usize, what: &str) {
        let base = self.history.acked();
        let end = Instant::now() + CLUSTER_TIMEOUT;
        while self.history.acked() < base + n {
            assert!(
                Instant::now() < end,
                "no progress {what}: {} of {n} acks in {CLUSTER_TIMEOUT:?}",
                self.history.acked() - base
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the first ack of a message sent after `t0`; returns the
    /// time from `t0`.
    async fn failover_since(&self, t0: Instant) -> Duration {
        self.failover_since_gone(t0, t0).await
    }

    /// As [`Round::failover_since`], counting only acks received after
    /// `gone` (a node stopped gracefully acks what reaches it while it
    /// stops: that is not a failover).
    async fn failover_since_gone(&self, t0: Instant, gone: Instant) -> Duration {
        let end = t0 + CLUSTER_TIMEOUT;
        loop {
            if let Some((at, via)) = self.history.first_ack_after(t0, gone) {
                let d = at - t0;
                println!("{}: first ack after {d:?} (via {via})", self.name);
                return d;
            }
            assert!(
                Instant::now() < end,
                "no ack within {CLUSTER_TIMEOUT:?} of the fault"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Heals the network, requires progress, stops the publishers, waits
    /// until every replica is back in the ISR and caught up, stops every
    /// node and checks every replica's log against the history.
    async fn finish(mut self, failover: Option<Duration>) -> RoundStats {
        self.cluster.heal();
        self.progress(PROGRESS, "after healing").await;
        let load = self.load.take().expect("load running");
        let history = load.stop().await;
        self.wait_full_isr(&self.stream.clone(), CLUSTER_TIMEOUT)
            .await;
        let stream = self.stream.clone();
        self.wait_caught_up(&stream).await;
        let view = self
            .cluster
            .partition_view(0, &stream, 0)
            .await
            .expect("final metadata");
        self.cluster.stop_all().await;
        if let Some(i) = self.watch_truncation {
            // Evidence that the old leader's uncommitted tail was cut
            // (the checker proves the logs ended up identical).
            let n = &self.cluster.nodes[i];
            let cuts: Vec<String> = n
                .proc
                .log_text()
                .lines()
                .filter(|l| l.contains("truncating to the leader's log"))
                .map(|l| l.chars().take(200).collect())
                .collect();
            println!(
                "{}: {} truncated {} time(s): {cuts:?}",
                self.name,
                n.spec.id,
                cuts.len()
            );
        }
        let dirs: BTreeMap<String, std::path::PathBuf> = self
            .cluster
            .nodes
            .iter()
            .map(|n| (n.spec.id.clone(), n.partition_dir(&stream, 0)))
            .collect();
        let replicas = history::read_replicas(&dirs, &view.2).await;
        let attempts = history.attempts();
        let report = history::check(&attempts, &replicas);
        // Which errors the publishers saw, by kind.
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for a in &attempts {
            if let history::Outcome::Failed { error } = &a.outcome {
                let kind: String = error.chars().take(60).collect();
                *kinds.entry(kind).or_default() += 1;
            }
        }
        println!("{}: {:?} errors {kinds:?}", self.name, report.counts);
        report.assert_ok(&self.name);
        assert!(
            report.counts.acked > 0,
            "{}: nothing was acknowledged",
            self.name
        );
        RoundStats {
            acked: report.counts.acked,
            attempted: report.counts.attempted,
            errors: report.counts.errors,
            unacked_present: report.counts.unacked_present,
            failover,
        }
    }

    /// Waits until the leader's HW reaches its newest offset (everything
    /// written is committed, so every ISR replica holds it).
    async fn wait_caught_up(&self, stream: &str) {
        let end = Instant::now() + CLUSTER_TIMEOUT;
        let mut last = None;
        loop {
            let leader = self.leader(&self.all(), stream).await;
            let node = self.cluster.node(&leader);
            if let Some(mut c) = node.try_client().await {
                let req = proto::FetchPartitionMetadataRequest {
                    stream: stream.into(),
                    partition: 0,
                };
                if let Ok(r) = c.fetch_partition_metadata(req).await {
                    let md = r.into_inner().metadata.unwrap_or_default();
                    if md.high_watermark == md.newest_offset && md.isr.len() == 3 {
                        return;
                    }
                    last = Some((md.high_watermark, md.newest_offset, md.isr));
                }
            }
            assert!(
                Instant::now() < end,
                "{stream}: leader {leader} not caught up (hw, newest, isr) = {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn create_via(cluster: &Cluster, via: usize, name: &str) -> Result<(), tonic::Status> {
    create_at(&cluster.nodes[via].spec, name).await
}

/// CreateStream `name` (RF 3, minIsr 2, one partition) on the node at
/// `spec`.
async fn create_at(spec: &Spec, name: &str) -> Result<(), tonic::Status> {
    let ch = tonic::transport::Channel::from_shared(format!("http://{}:{}", spec.ip, spec.grpc))
        .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    proto::api_client::ApiClient::new(ch)
        .create_stream(proto::CreateStreamRequest {
            subject: format!("{name}.subj"),
            name: name.into(),
            replication_factor: 3,
            partitions: 1,
            min_isr: Some(proto::NullableInt32 { value: 2 }),
            ..Default::default()
        })
        .await
        .map(|_| ())
}

/// No fault: the harness itself (load, convergence, offline read, check).
async fn baseline_round(policy: &'static str, r: usize) -> RoundStats {
    let mut round = Round::start("base", policy, r, true).await;
    round.start_load();
    round.progress(PROGRESS * 2, "without faults").await;
    round.finish(None).await
}

/// kill -9 of the partition leader under ALL load with min ISR 2; the
/// others elect a new leader; the old one restarts and rejoins.
async fn leader_kill_round(policy: &'static str, r: usize) -> RoundStats {
    kill_the_leader(Round::start("lkill", policy, r, false).await).await
}

/// The leader-kill fault on a started round: load, kill -9 of the
/// leader, a new leader among the others, progress, restart, check.
async fn kill_the_leader(mut round: Round) -> RoundStats {
    round.start_load();
    round.progress(PROGRESS, "before the kill").await;
    let old = round.leader(&round.all(), "s").await;
    let i = round.cluster.index_of(&old);
    round.cluster.nodes[i].kill9();
    let t0 = Instant::now();
    let failover = round.failover_since(t0).await;
    let survivors: Vec<usize> = round.all().into_iter().filter(|j| *j != i).collect();
    let new = round.leader(&survivors, "s").await;
    assert_ne!(new, old, "the dead node still leads");
    round.progress(PROGRESS, "with the old leader down").await;
    round.cluster.nodes[i].restart().await;
    round.finish(Some(failover)).await
}

/// As [`leader_kill_round`], with the nodes' NATS routes in pools of
/// three: replication, acks and metadata cross whichever pool connection
/// their account hashes to, and the pools fill again after the restart.
async fn leader_kill_pooled_round(policy: &'static str, r: usize) -> RoundStats {
    let round = Round::start_with("lkpool", policy, r, false, "nats.cluster.pool_size: 3\n").await;
    for n in &round.cluster.nodes {
        let (ip, port) = (n.spec.ip.clone(), n.spec.http);
        crate::support::wait_until(CLUSTER_TIMEOUT, "pools of three to both peers", || {
            let ip = ip.clone();
            async move {
                let rz = crate::support::http_json_at(&ip, port, "/routez").await;
                rz.is_some_and(|v| v["num_routes"] == 6)
            }
        })
        .await;
    }
    kill_the_leader(round).await
}

/// The leader cut off from the other two: nothing sent through it is
/// acknowledged while it is cut off; the majority elects a new leader; the
/// old one truncates after healing.
async fn leader_isolated_round(policy: &'static str, r: usize) -> RoundStats {
    let mut round = Round::start("liso", policy, r, true).await;
    round.start_load();
    round.progress(PROGRESS, "before the cut").await;
    let old = round.leader(&round.all(), "s").await;
    let i = round.cluster.index_of(&old);
    round.cluster.isolate(i);
    round.watch_truncation = Some(i);
    let t0 = Instant::now();
    let failover = round.failover_since(t0).await;
    let majority: Vec<usize> = round.all().into_iter().filter(|j| *j != i).collect();
    let new = round.leader(&majority, "s").await;
    assert_ne!(new, old, "the majority still names the cut-off leader");
    round.progress(PROGRESS, "on the majority side").await;
    // Long enough that publishes sent to the old leader after the cut
    // time out while it is still cut off.
    let t_heal = Instant::now().max(t0 + ACK_TIMEOUT * 2);
    tokio::time::sleep_until(t_heal.into()).await;
    // Slack for acks the old leader had committed just before the cut.
    let acked = round
        .history
        .acked_via_between(&old, t0 + Duration::from_millis(200), t_heal);
    assert!(
        acked.is_empty(),
        "the cut-off leader {old} acknowledged {} message(s) sent through it after the cut: {:?}",
        acked.len(),
        acked.iter().take(5).collect::<Vec<_>>()
    );
    round.finish(Some(failover)).await
}

/// Every node stopped (SIGTERM) and restarted in turn under load, the
/// leader last; each must be back in the ISR before the next goes.
async fn rolling_restart_round(policy: &'static str, r: usize) -> RoundStats {
    let mut round = Round::start("roll", policy, r, false).await;
    round.start_load();
    round.progress(PROGRESS, "before the restarts").await;
    let leader = round.leader(&round.all(), "s").await;
    let li = round.cluster.index_of(&leader);
    let mut order: Vec<usize> = round.all().into_iter().filter(|j| *j != li).collect();
    order.push(li);
    let mut failover = None;
    for i in order {
        let t0 = Instant::now();
        round.cluster.nodes[i].stop().await;
        if i == li {
            let gone = Instant::now();
            println!("{}: leader stopped in {:?}", round.name, gone - t0);
            failover = Some(round.failover_since_gone(t0, gone).await);
        }
        round.progress(PROGRESS, "with a node down").await;
        round.cluster.nodes[i].restart().await;
        round.wait_full_isr("s", CLUSTER_TIMEOUT).await;
        round.progress(PROGRESS, "after a restart").await;
    }
    round.finish(failover).await
}

/// A follower behind a 1 s delay each way cannot fetch within the fetch
/// timeout: it leaves the ISR (acks go on with ISR 2 ≥ min ISR) and
/// rejoins once the delay is lifted.
async fn slow_follower_round(policy: &'static str, r: usize) -> RoundStats {
    let mut round = Round::start("slow", policy, r, true).await;
    round.start_load();
    round.progress(PROGRESS, "before the delay").await;
    let leader = round.leader(&round.all(), "s").await;
    // Prefer a follower that is not the controller, so the delay slows
    // replication, not the metadata group.
    let controller = round.cluster.controller_among(&round.all()).await;
    let followers: Vec<usize> = round
        .all()
        .into_iter()
        .filter(|j| round.cluster.nodes[*j].spec.id != leader)
        .collect();
    let f = *followers
        .iter()
        .find(|j| Some(&round.cluster.nodes[**j].spec.id) != controller.as_ref())
        .unwrap_or(&followers[0]);
    let fid = round.cluster.nodes[f].spec.id.clone();
    round.cluster.slow_down(f, Duration::from_secs(1));
    let others: Vec<usize> = round.all().into_iter().filter(|j| *j != f).collect();
    let end = Instant::now() + CLUSTER_TIMEOUT;
    loop {
        let v = round.cluster.partition_view(others[0], "s", 0).await;
        if v.as_ref()
            .is_some_and(|v| !v.2.contains(&fid) && v.2.len() == 2)
        {
            break;
        }
        assert!(Instant::now() < end, "{fid} never left the ISR: {v:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    round
        .progress(PROGRESS, "with the slow follower out of the ISR")
        .await;
    // `finish` lifts the delay and waits for the ISR to be full again.
    round.finish(None).await
}

/// A follower killed, its whole data dir deleted, restarted: it rebuilds
/// its copy from the leader and rejoins the ISR with an identical log.
async fn follower_wiped_round(policy: &'static str, r: usize) -> RoundStats {
    let mut round = Round::start("wipe", policy, r, false).await;
    round.start_load();
    round.progress(PROGRESS, "before the wipe").await;
    let leader = round.leader(&round.all(), "s").await;
    let f = round
        .all()
        .into_iter()
        .find(|j| round.cluster.nodes[*j].spec.id != leader)
        .expect("a follower");
    round.cluster.nodes[f].kill9();
    round.cluster.nodes[f].wipe_data();
    round.progress(PROGRESS, "with the follower down").await;
    round.cluster.nodes[f].restart().await;
    round.finish(None).await
}

async fn follower_dir_deleted_round(policy: &'static str, r: usize) -> RoundStats {
    let mut round = Round::start("pdir", policy, r, false).await;
    round.start_load();
    round.progress(PROGRESS, "before the deletion").await;
    let leader = round.leader(&round.all(), "s").await;
    let f = round
        .all()
        .into_iter()
        .find(|j| round.cluster.nodes[*j].spec.id != leader)
        .expect("a follower");
    round.cluster.nodes[f].kill9();
    let dir = round.cluster.nodes[f].partition_dir(&round.stream, 0);
    assert!(dir.exists(), "the follower holds {}", dir.display());
    std::fs::remove_dir_all(&dir).expect("remove the partition directory");
    round.progress(PROGRESS, "with the follower down").await;
    round.cluster.nodes[f].restart().await;
    // It found the note without the files and took the rebuild path.
    let deadline = Instant::now() + CLUSTER_TIMEOUT;
    loop {
        let log = round.cluster.nodes[f].proc.log_text();
        if log.contains("recorded that the partition held records") && log.contains("rebuilding") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the follower never reported its deleted partition directory:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    round.finish(None).await
}

/// kill -9 of the controller while it leads the partition under load and
/// streams are being created through the other nodes: a new controller
/// and a new partition leader are elected, every stream whose creation
/// was acknowledged exists everywhere, and no ack is lost.
async fn controller_kill_round(policy: &'static str, r: usize) -> RoundStats {
    let mut round = Round::start("ckill", policy, r, false).await;
    // Make the controller lead the partition under load: create streams
    // until one is placed on it.
    let controller = round.cluster.wait_formed().await;
    let mut led = None;
    for k in 0..8 {
        let name = format!("led{k}");
        round.create(&name).await.expect("CreateStream");
        round.wait_full_isr(&name, CLUSTER_TIMEOUT).await;
        if round.leader(&round.all(), &name).await == controller {
            led = Some(name);
            break;
        }
    }
    let name = led.unwrap_or_else(|| panic!("no stream placed on the controller {controller}"));
    println!("{}: controller {controller} leads {name}", round.name);
    round.stream = name;
    round.start_load();
    round.progress(PROGRESS, "before the kill").await;
    let ci = round.cluster.index_of(&controller);
    let survivors: Vec<usize> = round.all().into_iter().filter(|j| *j != ci).collect();
    // Stream creations through the survivors, during the kill.
    let stop = tokio_util::sync::CancellationToken::new();
    let creator = {
        let stop = stop.clone();
        let cluster_specs: Vec<_> = survivors
            .iter()
            .map(|j| round.cluster.nodes[*j].spec.clone())
            .collect();
        tokio::spawn(async move {
            let mut created = Vec::new();
            let mut k = 0usize;
            // Bounded: every stream adds replication work to the nodes.
            while !stop.is_cancelled() && k < MAX_CREATED {
                let spec = &cluster_specs[k % cluster_specs.len()];
                let name = format!("new{k}");
                k += 1;
                let ok = create_at(spec, &name).await.is_ok();
                if ok {
                    created.push(name);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            created
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    round.cluster.nodes[ci].kill9();
    let t0 = Instant::now();
    let failover = round.failover_since(t0).await;
    let end = Instant::now() + CLUSTER_TIMEOUT;
    while round
        .cluster
        .controller_among(&survivors)
        .await
        .is_none_or(|c| c == controller)
    {
        assert!(Instant::now() < end, "no new controller");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    round.progress(PROGRESS, "with the controller down").await;
    // Creations go on with the new controller.
    tokio::time::sleep(Duration::from_secs(1)).await;
    round.cluster.nodes[ci].restart().await;
    stop.cancel();
    let created = creator.await.expect("creator task");
    assert!(!created.is_empty(), "no CreateStream succeeded");
    println!(
        "{}: {} stream(s) created around the kill",
        round.name,
        created.len()
    );
    // Every acknowledged creation exists on every node with a leader.
    for name in &created {
        round.wait_full_isr(name, CLUSTER_TIMEOUT).await;
    }
    round.finish(Some(failover)).await
}

/// Median and max of the failover times of `stats`, for the summary.
fn failover_summary(stats: &[RoundStats]) -> String {
    let mut f: Vec<Duration> = stats.iter().filter_map(|s| s.failover).collect();
    if f.is_empty() {
        return "-".into();
    }
    f.sort();
    format!("median {:?} max {:?}", f[f.len() / 2], f[f.len() - 1])
}

async fn scenario<F, Fut>(name: &str, round: F)
where
    F: Fn(&'static str, usize) -> Fut,
    Fut: Future<Output = RoundStats> + Send + 'static,
{
    let stats = run_rounds(name, round).await;
    println!(
        "FAULT-SUMMARY scenario={name} rounds={} acked={} failover {}",
        stats.len(),
        stats.iter().map(|s| s.acked).sum::<usize>(),
        failover_summary(&stats)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replication_baseline() {
    scenario("baseline", baseline_round).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replication_leader_kill() {
    scenario("leader_kill", leader_kill_round).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replication_leader_kill_pooled_routes() {
    scenario("leader_kill_pooled", leader_kill_pooled_round).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replication_leader_isolated() {
    scenario("leader_isolated", leader_isolated_round).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replication_rolling_restart() {
    scenario("rolling_restart", rolling_restart_round).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replication_slow_follower() {
    scenario("slow_follower", slow_follower_round).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replication_follower_wiped() {
    scenario("follower_wiped", follower_wiped_round).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replication_follower_dir_deleted() {
    scenario("follower_dir_deleted", follower_dir_deleted_round).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replication_controller_kill() {
    scenario("controller_kill", controller_kill_round).await;
}
