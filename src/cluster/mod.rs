//! Metadata through Raft (openraft 0.9) with redb storage.
//!
//! Every metadata change — create/delete/pause/resume/readonly of a stream
//! (internal `__cursors`/`__activity` included), broker registration,
//! consumer-group membership and coordinator, leader and ISR changes
//! (defined, used once replication exists) — is a `MetaCommand`
//! appended to one openraft group and applied by a deterministic state
//! machine (`state::MetadataState`). A lone node is a one-member group;
//! a cluster adds members and a transport over NATS, not a second metadata
//! path.
//!
//! Layout:
//! - `state`: the metadata model and the pure `apply` function;
//! - `placement`: where a new stream's partitions go (pure, by broker load);
//! - `store`: Raft log, vote, committed/purged markers and snapshots in
//!   `<data>/raft/raft.redb` (all redb calls on the blocking pool);
//! - `network`: Raft RPCs over `<ns>.raft.<raft-id>.{append,vote,snapshot}`
//!   (and `NoPeers`, the transport of a node opened without NATS);
//! - `control`: bootstrap (seed / peers / join), joins, forwarding of
//!   proposals to the controller, broker registration, learner promotion;
//! - `internal`: the internal streams' create commands.
//!
//! Public API (used by the gRPC API, the admin API and the partition layer):
//!
//! ```text
//! Metadata::open_cluster(data_dir, node, ClusterOptions, MetadataOptions)  // a node
//! Metadata::open(data_dir, node: NodeInfo, bootstrap) -> Result<Metadata, MetaError>
//! Metadata::open_with(data_dir, node, bootstrap, MetadataOptions)     // without NATS
//! metadata.propose(MetaCommand) -> Result<MetaResponse, MetaError>   // through Raft
//! metadata.propose_ok(MetaCommand) -> Result<(), MetaError>           // rejection = Err(Rejected)
//! metadata.state() -> Arc<MetadataState>                             // latest applied
//! metadata.watch() -> watch::Receiver<Arc<MetadataState>>            // every apply
//! metadata.is_leader() -> bool; metadata.role() -> &str
//! metadata.leader_id() -> Option<String>                              // server id of the controller
//! metadata.members() -> Vec<Member>                                   // Raft membership
//! metadata.node() -> &NodeInfo                                        // server id in use
//! metadata.compact() -> Result<u64, MetaError>                        // snapshot + purge
//! metadata.shutdown() -> Result<(), MetaError>   // call before reopening the same dir
//! internal::ensure_internal_streams(&metadata, &config)   // __cursors / __activity
//! MetadataOptions::from_config(&config); now_ns()
//! ```
//!
//! Start-up order for the server: bind the listeners first (ports may be 0),
//! then `open_cluster` with a `NodeInfo` carrying the advertised addresses
//! and the bootstrap rule from `config.raft_bootstrap_mode()`, then
//! `ensure_internal_streams`.
//!
//! `propose` works on every member: a node that does not lead forwards the
//! command to the controller (`control`) and returns once it applied the
//! entry itself. It returns `Ok(MetaResponse::Rejected(ApplyError::..))`
//! when the command was committed but rejected at apply (stream exists, not
//! found, bad partition, bad replication factor, unknown group, stale group
//! epoch): those checks are linearizable. Suggested gRPC mapping:
//! AlreadyExists → ALREADY_EXISTS; StreamNotFound, PartitionNotFound,
//! GroupNotFound → NOT_FOUND; Invalid → INVALID_ARGUMENT; NotMember,
//! EpochMismatch → FAILED_PRECONDITION. It returns `Err(MetaError::NoLeader)`
//! ("no known metadata leader", gRPC INTERNAL) when no controller committed
//! it within `MetadataOptions::leader_wait` (no leader, or this node is cut
//! off from the majority).
//!
//! Identity: the Raft node id is random, chosen once per data directory and
//! stored with the server id; an empty `NodeInfo::id` reuses the stored
//! server id. A restart under a new server id replaces the old broker
//! everywhere (`MetaCommand::ReplaceBroker`), so the node keeps leading its
//! partitions; new addresses are refreshed in the Raft membership.
//!
//! Tasks: openraft's core and replication tasks, plus for a cluster member
//! the RPC server and control tasks listed in `control`; `shutdown` ends them.
//!
//! Must not: block a tokio worker (redb runs on the blocking pool), read a
//! clock inside `apply` (timestamps come in the command), or change metadata
//! anywhere but through `propose`.

pub mod control;
pub mod internal;
pub mod network;
pub mod placement;
pub mod state;
pub mod store;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{ChangeMembers, Config, Raft, ServerState, SnapshotPolicy};
use rand::Rng;
use tokio::sync::watch;

pub use control::{Bootstrap, ClusterOptions};
pub use network::LeaderContact;
pub use state::{
    ApplyError, EventTimestamps, GroupMeta, MetaCommand, MetaResponse, MetadataState, NodeInfo,
    PartitionMeta, StreamConfig, StreamMeta,
};
pub use store::StoreError;

use control::ClusterLink;
use store::{Identity, LogStore, RaftDb, StateMachine};

openraft::declare_raft_types!(
    /// openraft type configuration of the metadata group.
    pub TypeConfig:
        D = MetaCommand,
        R = MetaResponse,
        NodeId = u64,
        Node = NodeInfo,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Errors of the metadata layer.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// No leader is known (maps to gRPC INTERNAL, as Liftbridge does).
    #[error("no known metadata leader")]
    NoLeader,
    /// Another node leads; the request must go there.
    #[error("not the metadata leader (leader is {leader:?})")]
    NotLeader {
        /// Server id of the leader.
        leader: String,
    },
    /// The Raft storage failed.
    #[error("raft storage: {0}")]
    Store(#[from] StoreError),
    /// openraft reported an error (invalid config, fatal error, shut down).
    #[error("raft: {0}")]
    Raft(String),
    /// The command was committed but rejected by the state machine.
    #[error("metadata command rejected: {0}")]
    Rejected(#[from] ApplyError),
    /// Creating the data directory failed.
    #[error("creating {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Tuning of the metadata group.
#[derive(Debug, Clone)]
pub struct MetadataOptions {
    /// Take a snapshot after this many applied entries
    /// (`clustering.raft.snapshot.threshold`).
    pub snapshot_threshold: u64,
    /// How long `propose` waits for a leader before `NoLeader`.
    pub leader_wait: Duration,
    /// Raft heartbeat interval; also the timeout of one append RPC.
    pub heartbeat: Duration,
    /// Raft election timeout: for this long after the controller's last
    /// heartbeat a voter refuses other candidates (openraft's leader
    /// lease). A follower that hears nothing from the controller for 1.5–2
    /// times this starts an election, or after this long when the
    /// controller's node has left the NATS cluster (see [`RaftTiming`]).
    pub election_timeout: Duration,
}

/// The openraft timings of a metadata group, derived from
/// [`MetadataOptions`].
///
/// openraft 0.9 has no separate lease setting: its leader lease is
/// `election_timeout_max`, a voter refuses every vote request until the
/// lease has run out since the last append it accepted, and a follower
/// campaigns only after the lease *plus* its own randomized election
/// timeout (drawn once from `[min, max)`). With `max = E` and `min = E/2`
/// (E = `clustering.raft.election.timeout`) a silent controller is replaced
/// after 1.5–2 E — what the configuration promises ("E, randomized up to
/// twice it"), where `min = E, max = 2E` gave 3–4 E. When the controller's
/// node is known to be gone, `control`'s controller watch starts the
/// election as soon as the lease has run out (about E).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    /// Heartbeat interval.
    pub heartbeat: Duration,
    /// Leader lease = openraft's `election_timeout_max`.
    pub lease: Duration,
    /// openraft's `election_timeout_min`.
    pub election_min: Duration,
}

impl RaftTiming {
    /// The timings for `opts`: the lease is at least two heartbeats (and a
    /// little more, so `election_min` stays above the heartbeat, as
    /// openraft requires).
    pub fn of(opts: &MetadataOptions) -> RaftTiming {
        let heartbeat = opts.heartbeat.as_millis().clamp(1, u128::from(u32::MAX)) as u64;
        let lease = (opts.election_timeout.as_millis().min(u128::from(u32::MAX)) as u64)
            .max(heartbeat * 2 + 2);
        RaftTiming {
            heartbeat: Duration::from_millis(heartbeat),
            lease: Duration::from_millis(lease),
            election_min: Duration::from_millis(lease / 2),
        }
    }
}

impl Default for MetadataOptions {
    /// Timings for a real network: a heartbeat every 150 ms, a lease of 1 s,
    /// elections after 1.5–2 s of silence (ten or more lost heartbeats, so a
    /// busy machine does not depose a healthy controller), or after the 1 s
    /// lease when the controller's node is gone.
    fn default() -> Self {
        MetadataOptions {
            snapshot_threshold: 8192,
            leader_wait: Duration::from_secs(5),
            heartbeat: Duration::from_millis(150),
            election_timeout: Duration::from_millis(1000),
        }
    }
}

impl MetadataOptions {
    /// Options from the configuration (`clustering.raft.snapshot.threshold`,
    /// `clustering.raft.heartbeat.interval`, `clustering.raft.election.timeout`).
    /// An election timeout below two heartbeats is raised to two heartbeats.
    pub fn from_config(cfg: &crate::config::liftbridge::LiftbridgeConfig) -> MetadataOptions {
        let c = &cfg.clustering;
        MetadataOptions {
            snapshot_threshold: c.raft_snapshot_threshold,
            heartbeat: c.raft_heartbeat_interval,
            election_timeout: c.raft_election_timeout,
            ..Default::default()
        }
    }
}

/// Current time as Unix nanoseconds, for the timestamps carried in commands.
pub use crate::time::now_ns;

/// Handle on the metadata group. Cloning is cheap; all clones share the group.
#[derive(Clone)]
pub struct Metadata {
    raft: Raft<TypeConfig>,
    raft_id: u64,
    node: Arc<NodeInfo>,
    rx: watch::Receiver<Arc<MetadataState>>,
    opts: Arc<MetadataOptions>,
    db: RaftDb,
    /// The NATS side when clustered (`open_cluster`); `None` for a node
    /// opened without NATS, whose `propose` never forwards.
    link: Option<Arc<ClusterLink>>,
}

/// How long one forwarded proposal waits for the controller's answer before
/// it is sent again (a commit takes milliseconds; a longer wait means the
/// controller is gone or cut off).
const FORWARD_ATTEMPT: Duration = Duration::from_secs(2);

/// A member of the metadata group, as listed by `Metadata::members`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Raft id.
    pub raft_id: u64,
    /// Broker entry (server id, addresses).
    pub node: NodeInfo,
    /// Whether it votes (else it is a learner).
    pub voter: bool,
}

/// A random id in the style of a NATS NUID (22 alphanumerics): no spaces or
/// dots, so it is a valid server id.
pub fn random_server_id() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::thread_rng();
    (0..22)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

impl Metadata {
    /// Opens the metadata group stored under `<data_dir>/raft/` with default options.
    ///
    /// With `bootstrap` (the `--raft-bootstrap-seed` flag, and the default when
    /// no peers are configured) a fresh directory becomes a one-member group
    /// led by this node; an existing directory is reused as is (state, vote
    /// and log survive restarts). An empty `node.id` means: reuse the server id
    /// this directory was created with, or generate a random one.
    ///
    /// Once this node leads, its `NodeInfo` is registered as a broker (a Raft
    /// command) when the stored entry differs.
    pub async fn open(
        data_dir: &Path,
        node: NodeInfo,
        bootstrap: bool,
    ) -> Result<Metadata, MetaError> {
        Self::open_with(data_dir, node, bootstrap, MetadataOptions::default()).await
    }

    /// Like `open`, with explicit options.
    pub async fn open_with(
        data_dir: &Path,
        node: NodeInfo,
        bootstrap: bool,
        opts: MetadataOptions,
    ) -> Result<Metadata, MetaError> {
        Self::open_with_network(data_dir, node, bootstrap, opts, network::NoPeers).await
    }

    /// Like `open_with`, with the transport to peers. This is the only
    /// difference between a single node and a cluster member: the log store,
    /// state machine and `propose` path are the same.
    pub async fn open_with_network<N>(
        data_dir: &Path,
        node: NodeInfo,
        bootstrap: bool,
        opts: MetadataOptions,
        network: N,
    ) -> Result<Metadata, MetaError>
    where
        N: openraft::RaftNetworkFactory<TypeConfig>,
    {
        let (md, previous_id) = Self::open_raft(data_dir, node, opts, network).await?;
        let initialized = md.initialized().await?;
        if bootstrap && !initialized {
            md.initialize_alone().await?;
        }
        if bootstrap || initialized {
            md.register_self(previous_id).await?;
        }
        Ok(md)
    }

    /// Opens a cluster member: Raft RPCs, joins and forwarded proposals ride
    /// NATS subjects under `cluster.namespace` (see `control` and
    /// `network`). `propose` works on every member: a non-leader forwards to
    /// the controller.
    ///
    /// With `Bootstrap::Seed` a fresh directory becomes a one-member group
    /// and, as with `open`, this returns once the node is registered as a
    /// broker. Otherwise it returns at once; joining and registration
    /// continue in the background (see `control`).
    pub async fn open_cluster(
        data_dir: &Path,
        node: NodeInfo,
        cluster: ClusterOptions,
        opts: MetadataOptions,
    ) -> Result<Metadata, MetaError> {
        let network = network::NatsNetwork::new(cluster.client.clone(), cluster.namespace.clone());
        let (mut md, previous_id) = Self::open_raft(data_dir, node, opts, network).await?;
        let link = Arc::new(ClusterLink {
            client: cluster.client.clone(),
            namespace: cluster.namespace.clone(),
            max_quorum_size: cluster.max_quorum_size,
            contact: Arc::new(network::LeaderContact::new()),
            tasks: parking_lot::Mutex::new(Vec::new()),
        });
        md.link = Some(link.clone());
        if let Err(e) = control::start_servers(&md, &link) {
            let _ = md.shutdown().await;
            return Err(MetaError::Raft(format!("cluster subjects: {e}")));
        }
        let started = async {
            let initialized = md.initialized().await?;
            let seed = cluster.bootstrap == Bootstrap::Seed;
            if seed && !initialized {
                md.initialize_alone().await?;
            }
            if seed || (initialized && md.is_sole_voter()) {
                md.register_self(previous_id.clone()).await?;
            }
            Ok::<(), MetaError>(())
        };
        if let Err(e) = started.await {
            let _ = md.shutdown().await;
            return Err(e);
        }
        control::start_tasks(&md, &link, &cluster.bootstrap, previous_id);
        Ok(md)
    }

    /// Whether this node is the only voter of an initialized group (a
    /// single node restarting elects itself at once).
    pub fn is_sole_voter(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
        voters == [self.raft_id]
    }

    async fn initialized(&self) -> Result<bool, MetaError> {
        self.raft
            .is_initialized()
            .await
            .map_err(|e| MetaError::Raft(e.to_string()))
    }

    /// Makes a fresh group with this node as its only member.
    async fn initialize_alone(&self) -> Result<(), MetaError> {
        let members = BTreeMap::from([(self.raft_id, (*self.node).clone())]);
        self.raft
            .initialize(members)
            .await
            .map_err(|e| MetaError::Raft(e.to_string()))
    }

    /// Opens the storage and starts Raft (not initialized, not registered).
    /// Returns the server id this directory had before, when it changed.
    async fn open_raft<N>(
        data_dir: &Path,
        mut node: NodeInfo,
        opts: MetadataOptions,
        network: N,
    ) -> Result<(Metadata, Option<String>), MetaError>
    where
        N: openraft::RaftNetworkFactory<TypeConfig>,
    {
        store::check_not_lost(data_dir).await?;
        let dir = data_dir.join("raft");
        let db = RaftDb::open(&dir).await?;
        let mut previous_id = None;
        let raft_id = match db.identity().await? {
            Some(id) => {
                if node.id.is_empty() {
                    node.id = id.server_id.clone();
                }
                if node.id != id.server_id {
                    previous_id = Some(id.server_id.clone());
                    // The Raft id stays: it is what the stored membership knows.
                    db.set_identity(&Identity {
                        raft_id: id.raft_id,
                        server_id: node.id.clone(),
                    })
                    .await?;
                }
                id.raft_id
            }
            None => {
                if node.id.is_empty() {
                    node.id = random_server_id();
                }
                // Never 0: keeps "no node" distinguishable in logs and metrics.
                let raft_id = rand::thread_rng().gen_range(1..u64::MAX);
                db.set_identity(&Identity {
                    raft_id,
                    server_id: node.id.clone(),
                })
                .await?;
                raft_id
            }
        };

        let timing = RaftTiming::of(&opts);
        let ms = |d: Duration| d.as_millis() as u64;
        let config = Config {
            cluster_name: "liftbridge".into(),
            heartbeat_interval: ms(timing.heartbeat),
            election_timeout_min: ms(timing.election_min),
            election_timeout_max: ms(timing.lease),
            // One snapshot chunk per NATS message (see `network`).
            snapshot_max_chunk_size: network::SNAPSHOT_CHUNK_BYTES,
            install_snapshot_timeout: ms(timing.lease).max(1000),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(opts.snapshot_threshold.max(1)),
            ..Default::default()
        }
        .validate()
        .map_err(|e| MetaError::Raft(e.to_string()))?;

        let log_store = LogStore::new(db.clone());
        let sm = StateMachine::open(db.clone()).await?;
        let rx = sm.subscribe();
        let raft = Raft::new(raft_id, Arc::new(config), network, log_store, sm)
            .await
            .map_err(|e| MetaError::Raft(e.to_string()))?;

        let md = Metadata {
            raft,
            raft_id,
            node: Arc::new(node),
            rx,
            opts: Arc::new(opts),
            db,
            link: None,
        };
        Ok((md, previous_id))
    }

    /// Registers this node as a broker once it leads (single-node groups
    /// always elect themselves); a node that does not lead leaves it to later.
    ///
    /// When the data directory was created under another server id
    /// (`previous_id`), that broker is replaced so that the streams this node
    /// led are still led by it. The Raft membership's copy of this node's
    /// addresses is refreshed too (ports may change between runs).
    async fn register_self(&self, previous_id: Option<String>) -> Result<(), MetaError> {
        if !self.wait_for_leader().await {
            return Ok(());
        }
        if self.raft_leader() != Some(self.raft_id) {
            return Ok(());
        }
        let member = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&self.raft_id)
            .cloned();
        if member.as_ref() != Some(&*self.node) {
            let nodes = BTreeMap::from([(self.raft_id, (*self.node).clone())]);
            self.raft
                .change_membership(ChangeMembers::SetNodes(nodes), true)
                .await
                .map_err(|e| MetaError::Raft(e.to_string()))?;
        }
        self.register_broker(previous_id.as_deref()).await
    }

    /// Proposes this node's broker entry when the applied state lacks it or
    /// differs. When the data directory was created under another server id
    /// (`previous_id`), that broker is replaced instead (the state machine
    /// rejects the replacement when the old id is unknown: then a plain
    /// registration follows, so a lagging local state cannot mislead it).
    /// Waits up to `within` until this node's state holds everything the
    /// controller had committed when this was called (a `Barrier` through
    /// the controller, applied here). False when that could not be shown
    /// in time (no controller, or this node is not a member yet).
    pub async fn catch_up(&self, within: Duration) -> bool {
        matches!(
            tokio::time::timeout(within, self.propose(MetaCommand::Barrier)).await,
            Ok(Ok(MetaResponse::Ok))
        )
    }

    pub(crate) async fn register_broker(&self, previous_id: Option<&str>) -> Result<(), MetaError> {
        if let Some(old) = previous_id {
            if old != self.node.id {
                match self
                    .propose(MetaCommand::ReplaceBroker {
                        old: old.to_string(),
                        new: (*self.node).clone(),
                    })
                    .await?
                {
                    MetaResponse::Ok => return Ok(()),
                    MetaResponse::Rejected(ApplyError::Invalid { .. }) => {}
                    MetaResponse::Rejected(e) => return Err(MetaError::Rejected(e)),
                }
            }
        }
        if self.state().brokers.get(&self.node.id) != Some(&*self.node) {
            self.propose_ok(MetaCommand::RegisterBroker((*self.node).clone()))
                .await?;
        }
        Ok(())
    }

    fn raft_leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    /// Waits up to `leader_wait` for any leader to be known.
    async fn wait_for_leader(&self) -> bool {
        let mut metrics = self.raft.metrics();
        let wait = async {
            loop {
                if metrics.borrow_and_update().current_leader.is_some() {
                    return true;
                }
                if metrics.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::time::timeout(self.opts.leader_wait, wait)
            .await
            .unwrap_or(false)
    }

    /// Proposes a command through Raft and returns the state machine's answer
    /// once it is committed and applied locally.
    ///
    /// On a cluster member that does not lead, the command is forwarded to
    /// the controller (`<ns>.raft.metadata.propagate`), and the answer is
    /// returned once this node has applied the entry too (or `leader_wait`
    /// is over), so callers read their own writes. `NoLeader` when no
    /// controller committed it within `leader_wait`. A forwarded command
    /// whose answer is lost may have been applied: it is sent again, and the
    /// state machine's existence checks answer the repeat (e.g.
    /// `AlreadyExists`).
    ///
    /// Without NATS (`open`, `open_with_network`), a non-leader answers
    /// `NotLeader` naming the controller.
    pub async fn propose(&self, cmd: MetaCommand) -> Result<MetaResponse, MetaError> {
        match self.link.clone() {
            Some(link) => self.propose_clustered(&link, cmd).await,
            None => self.propose_local(cmd).await,
        }
    }

    async fn propose_clustered(
        &self,
        link: &ClusterLink,
        cmd: MetaCommand,
    ) -> Result<MetaResponse, MetaError> {
        let deadline = tokio::time::Instant::now() + self.opts.leader_wait;
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return Err(MetaError::NoLeader);
            }
            match self.raft_leader() {
                Some(id) if id == self.raft_id => {
                    // A controller cut off from its quorum does not know it
                    // yet: its write never commits, hence the timeout. A
                    // sole voter cannot be cut off: it waits for its disk
                    // however slow, as a lone node always did.
                    let write = self.raft.client_write(cmd.clone());
                    let written = if self.is_sole_voter() {
                        Ok(write.await)
                    } else {
                        tokio::time::timeout(remaining, write).await
                    };
                    match written {
                        Err(_) => return Err(MetaError::NoLeader),
                        Ok(Ok(resp)) => return Ok(resp.data),
                        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
                            // Deposed meanwhile: the next round forwards.
                            tokio::time::sleep(Duration::from_millis(20).min(remaining)).await;
                        }
                        Ok(Err(RaftError::APIError(e))) => {
                            return Err(MetaError::Raft(e.to_string()))
                        }
                        Ok(Err(RaftError::Fatal(e))) => return Err(MetaError::Raft(e.to_string())),
                    }
                }
                Some(controller) => {
                    // Only the controller answers; when it dies its
                    // followers elect another, and the attempt in flight is
                    // given up at once rather than waited out.
                    let forwarded = tokio::select! {
                        r = link.forward(&cmd, remaining.min(FORWARD_ATTEMPT)) => Some(r),
                        () = self.leader_changed_from(controller) => None,
                    };
                    match forwarded {
                        None => {}
                        Some(Ok((index, resp))) => {
                            self.wait_applied(index, deadline).await;
                            return Ok(resp);
                        }
                        Some(Err(control::ForwardError::Failed(reason))) => {
                            return Err(MetaError::Raft(reason))
                        }
                        Some(Err(e)) => {
                            tracing::debug!(error = %e, "forwarding a proposal; retrying");
                            tokio::time::sleep(Duration::from_millis(50).min(remaining)).await;
                        }
                    }
                }
                None => {
                    let _ = tokio::time::timeout(remaining, self.leader_known()).await;
                }
            }
        }
    }

    /// Resolves once the known leader is no longer `leader` (none, or
    /// another); never when the Raft task ended.
    async fn leader_changed_from(&self, leader: u64) {
        let mut metrics = self.raft.metrics();
        loop {
            if metrics.borrow_and_update().current_leader != Some(leader) {
                return;
            }
            if metrics.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves once some leader is known (never when the Raft task ended).
    async fn leader_known(&self) {
        let mut metrics = self.raft.metrics();
        loop {
            if metrics.borrow_and_update().current_leader.is_some() {
                return;
            }
            if metrics.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits until the local state machine applied `index`, or `deadline`.
    async fn wait_applied(&self, index: u64, deadline: tokio::time::Instant) {
        let mut rx = self.rx.clone();
        let _ = tokio::time::timeout_at(deadline, async {
            loop {
                if rx.borrow_and_update().applied_index >= index {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }

    async fn propose_local(&self, cmd: MetaCommand) -> Result<MetaResponse, MetaError> {
        let mut waited = false;
        loop {
            match self.raft.client_write(cmd.clone()).await {
                Ok(resp) => return Ok(resp.data),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                    if let Some(node) = f.leader_node {
                        return Err(MetaError::NotLeader { leader: node.id });
                    }
                    if let Some(id) = f.leader_id {
                        if id != self.raft_id {
                            // Name the leader by server id when the membership knows it.
                            let leader = self
                                .raft
                                .metrics()
                                .borrow()
                                .membership_config
                                .membership()
                                .get_node(&id)
                                .map(|n| n.id.clone())
                                .unwrap_or_else(|| id.to_string());
                            return Err(MetaError::NotLeader { leader });
                        }
                    }
                    // No leader known (yet): wait once for an election.
                    if waited || !self.wait_for_leader().await {
                        return Err(MetaError::NoLeader);
                    }
                    waited = true;
                }
                Err(RaftError::APIError(e)) => return Err(MetaError::Raft(e.to_string())),
                Err(RaftError::Fatal(e)) => return Err(MetaError::Raft(e.to_string())),
            }
        }
    }

    /// Like `propose`, with a rejection turned into `MetaError::Rejected`.
    pub async fn propose_ok(&self, cmd: MetaCommand) -> Result<(), MetaError> {
        self.propose(cmd)
            .await?
            .into_result()
            .map_err(MetaError::Rejected)
    }

    /// The latest applied state.
    pub fn state(&self) -> Arc<MetadataState> {
        self.rx.borrow().clone()
    }

    /// A receiver notified after every applied batch of entries.
    pub fn watch(&self) -> watch::Receiver<Arc<MetadataState>> {
        self.rx.clone()
    }

    /// Whether this node currently leads the metadata group (is the controller).
    pub fn is_leader(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.raft_id)
    }

    /// This node's identity (with the server id actually in use).
    pub fn node(&self) -> &NodeInfo {
        &self.node
    }

    /// Server id of the current metadata leader, if known.
    pub fn leader_id(&self) -> Option<String> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let leader = m.current_leader?;
        m.membership_config
            .membership()
            .get_node(&leader)
            .map(|n| n.id.clone())
    }

    /// Takes a snapshot of the applied state and purges the log up to it.
    /// Returns the log index the snapshot covers.
    pub async fn compact(&self) -> Result<u64, MetaError> {
        let applied = self.raft.metrics().borrow().last_applied;
        let Some(applied) = applied else {
            return Ok(0);
        };
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|e| MetaError::Raft(e.to_string()))?;
        let timeout = Some(Duration::from_secs(10));
        self.raft
            .wait(timeout)
            .metrics(
                |m| m.snapshot.map(|s| s.index) >= Some(applied.index),
                "snapshot taken",
            )
            .await
            .map_err(|e| MetaError::Raft(e.to_string()))?;
        self.raft
            .trigger()
            .purge_log(applied.index)
            .await
            .map_err(|e| MetaError::Raft(e.to_string()))?;
        self.raft
            .wait(timeout)
            .metrics(
                |m| m.purged.map(|p| p.index) >= Some(applied.index),
                "log purged",
            )
            .await
            .map_err(|e| MetaError::Raft(e.to_string()))?;
        Ok(applied.index)
    }

    /// The members of the metadata group, by Raft id.
    pub fn members(&self) -> Vec<Member> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let membership = m.membership_config.membership();
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(id, node)| Member {
                raft_id: *id,
                node: node.clone(),
                voter: voters.contains(id),
            })
            .collect()
    }

    /// This node's role in the metadata group: `leader`, `follower`,
    /// `candidate` or `learner`, or `shutdown`.
    pub fn role(&self) -> &'static str {
        match self.raft.metrics().borrow().state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        }
    }

    /// This node's Raft id (stable for its data directory).
    pub fn raft_id(&self) -> u64 {
        self.raft_id
    }

    /// Adds a server to the group as a voter (leader only): it joins as a
    /// learner, catches up, then becomes a voter; it is also registered as a
    /// broker. Idempotent for a server that is already a voter.
    pub async fn add_voter(&self, raft_id: u64, node: NodeInfo) -> Result<(), MetaError> {
        let map_err = |e: RaftError<u64, ClientWriteError<u64, NodeInfo>>| match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => match f.leader_node {
                Some(n) => MetaError::NotLeader { leader: n.id },
                None => MetaError::NoLeader,
            },
            other => MetaError::Raft(other.to_string()),
        };
        self.raft
            .add_learner(raft_id, node.clone(), true)
            .await
            .map_err(map_err)?;
        self.raft
            .change_membership(ChangeMembers::AddVoterIds([raft_id].into()), false)
            .await
            .map_err(map_err)?;
        self.propose_ok(MetaCommand::RegisterBroker(node)).await
    }

    /// The underlying openraft handle (metrics, RPC entry points for a transport).
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }

    /// Stops the Raft task and closes the database (the directory can then be
    /// opened again in this process). Other clones become unusable.
    pub async fn shutdown(&self) -> Result<(), MetaError> {
        if let Some(link) = &self.link {
            link.abort_all();
        }
        let res = self
            .raft
            .shutdown()
            .await
            .map_err(|e| MetaError::Raft(e.to_string()));
        self.db.close().await;
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(heartbeat_ms: u64, election_ms: u64) -> RaftTiming {
        RaftTiming::of(&MetadataOptions {
            heartbeat: Duration::from_millis(heartbeat_ms),
            election_timeout: Duration::from_millis(election_ms),
            ..Default::default()
        })
    }

    /// The defaults: a 1 s lease (openraft's `election_timeout_max`) and a
    /// randomized timeout from 500 ms, so a silent controller is replaced
    /// after 1.5–2 s (lease + timeout), not 3–4 s.
    #[test]
    fn raft_timing_defaults() {
        let t = RaftTiming::of(&MetadataOptions::default());
        assert_eq!(t.heartbeat, Duration::from_millis(150));
        assert_eq!(t.lease, Duration::from_millis(1000));
        assert_eq!(t.election_min, Duration::from_millis(500));
    }

    /// Whatever is configured, openraft's rules hold: heartbeat <
    /// election_timeout_min < election_timeout_max.
    #[test]
    fn raft_timing_is_valid_for_openraft() {
        for (hb, el) in [
            (10, 100),
            (150, 100),
            (150, 301),
            (500, 100),
            (1, 1),
            (50, 5000),
        ] {
            let t = timing(hb, el);
            assert!(t.heartbeat < t.election_min, "{hb}/{el}: {t:?}");
            assert!(t.election_min < t.lease, "{hb}/{el}: {t:?}");
            let ms = |d: Duration| d.as_millis() as u64;
            Config {
                heartbeat_interval: ms(t.heartbeat),
                election_timeout_min: ms(t.election_min),
                election_timeout_max: ms(t.lease),
                ..Default::default()
            }
            .validate()
            .unwrap_or_else(|e| panic!("{hb}/{el}: {e}"));
        }
        assert_eq!(timing(50, 5000).lease, Duration::from_millis(5000));
    }
}
