//! Metadata through Raft (openraft 0.9) with redb storage.
//!
//! Every metadata change — create/delete/pause/resume/readonly of a stream
//! (internal `__cursors`/`__activity` included), broker registration,
//! consumer-group membership and coordinator, leader and ISR changes
//! (defined, used once replication exists) — is a `MetaCommand`
//! appended to one openraft group and applied by a deterministic state
//! machine (`state::MetadataState`). On a single node the group has one
//! member, bootstrapped at first start; clustering adds members and a network
//! transport (see `network`), not a second metadata path.
//!
//! Layout:
//! - `state`: the metadata model and the pure `apply` function;
//! - `store`: Raft log, vote, committed/purged markers and snapshots in
//!   `<data>/raft/raft.redb` (all redb calls on the blocking pool);
//! - `network`: the peer transport (none yet: every RPC is `Unreachable`);
//! - `internal`: the internal streams' create commands.
//!
//! Public API (used by the gRPC API and the partition layer):
//!
//! ```text
//! Metadata::open(data_dir, node: NodeInfo, bootstrap) -> Result<Metadata, MetaError>
//! Metadata::open_with(data_dir, node, bootstrap, MetadataOptions) -> Result<Metadata, MetaError>
//! metadata.propose(MetaCommand) -> Result<MetaResponse, MetaError>   // through Raft
//! metadata.propose_ok(MetaCommand) -> Result<(), MetaError>           // rejection = Err(Rejected)
//! metadata.state() -> Arc<MetadataState>                             // latest applied
//! metadata.watch() -> watch::Receiver<Arc<MetadataState>>            // every apply
//! metadata.is_leader() -> bool
//! metadata.leader_id() -> Option<String>                              // server id of the controller
//! metadata.node() -> &NodeInfo                                        // server id in use
//! metadata.compact() -> Result<u64, MetaError>                        // snapshot + purge
//! metadata.shutdown() -> Result<(), MetaError>   // call before reopening the same dir
//! internal::ensure_internal_streams(&metadata, &config)   // __cursors / __activity
//! MetadataOptions::from_config(&config); now_ns()
//! ```
//!
//! Start-up order for the server: bind the listeners first (ports may be 0),
//! then `open` with a `NodeInfo` carrying the bound addresses, with
//! `bootstrap = config.raft_bootstrap()`, then `ensure_internal_streams`.
//!
//! `propose` returns `Ok(MetaResponse::Rejected(ApplyError::..))` when the
//! command was committed but rejected at apply (stream exists, not found, bad
//! partition, bad replication factor, unknown group, stale group epoch):
//! those checks are linearizable. Suggested gRPC mapping: AlreadyExists →
//! ALREADY_EXISTS; StreamNotFound, PartitionNotFound, GroupNotFound →
//! NOT_FOUND; Invalid → INVALID_ARGUMENT; NotMember, EpochMismatch →
//! FAILED_PRECONDITION. It
//! returns `Err(MetaError::NoLeader)` ("no known metadata leader", gRPC
//! INTERNAL) when no leader shows up within `MetadataOptions::leader_wait`.
//!
//! Identity: the Raft node id is random, chosen once per data directory and
//! stored with the server id; an empty `NodeInfo::id` reuses the stored
//! server id. A restart under a new server id replaces the old broker
//! everywhere (`MetaCommand::ReplaceBroker`), so the node keeps leading its
//! partitions; new addresses are refreshed in the Raft membership.
//!
//! Must not: block a tokio worker (redb runs on the blocking pool), read a
//! clock inside `apply` (timestamps come in the command), or change metadata
//! anywhere but through `propose`.

pub mod internal;
pub mod network;
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

pub use state::{
    ApplyError, EventTimestamps, GroupMeta, MetaCommand, MetaResponse, MetadataState, NodeInfo,
    PartitionMeta, StreamConfig, StreamMeta,
};
pub use store::StoreError;

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
    /// Raft heartbeat interval.
    pub heartbeat: Duration,
    /// Raft election timeout (minimum; the maximum is twice this).
    pub election_timeout: Duration,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        MetadataOptions {
            snapshot_threshold: 8192,
            leader_wait: Duration::from_secs(5),
            heartbeat: Duration::from_millis(50),
            election_timeout: Duration::from_millis(150),
        }
    }
}

impl MetadataOptions {
    /// Options from the configuration (`clustering.raft.snapshot.threshold`).
    pub fn from_config(cfg: &crate::config::liftbridge::LiftbridgeConfig) -> MetadataOptions {
        MetadataOptions {
            snapshot_threshold: cfg.clustering.raft_snapshot_threshold,
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
        mut node: NodeInfo,
        bootstrap: bool,
        opts: MetadataOptions,
        network: N,
    ) -> Result<Metadata, MetaError>
    where
        N: openraft::RaftNetworkFactory<TypeConfig>,
    {
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

        let heartbeat = opts.heartbeat.as_millis().max(1) as u64;
        let election = opts.election_timeout.as_millis().max(heartbeat as u128 * 2) as u64;
        let config = Config {
            cluster_name: "liftbridge".into(),
            heartbeat_interval: heartbeat,
            election_timeout_min: election,
            election_timeout_max: election * 2,
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
        };

        let initialized = md
            .raft
            .is_initialized()
            .await
            .map_err(|e| MetaError::Raft(e.to_string()))?;
        if bootstrap && !initialized {
            let members = BTreeMap::from([(raft_id, (*md.node).clone())]);
            md.raft
                .initialize(members)
                .await
                .map_err(|e| MetaError::Raft(e.to_string()))?;
        }
        if bootstrap || initialized {
            md.register_self(previous_id).await?;
        }
        Ok(md)
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
        let state = self.state();
        match previous_id {
            Some(old) if state.brokers.contains_key(&old) => {
                self.propose_ok(MetaCommand::ReplaceBroker {
                    old,
                    new: (*self.node).clone(),
                })
                .await?;
            }
            _ => {
                if state.brokers.get(&self.node.id) != Some(&*self.node) {
                    self.propose_ok(MetaCommand::RegisterBroker((*self.node).clone()))
                        .await?;
                }
            }
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
    pub async fn propose(&self, cmd: MetaCommand) -> Result<MetaResponse, MetaError> {
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
        let res = self
            .raft
            .shutdown()
            .await
            .map_err(|e| MetaError::Raft(e.to_string()));
        self.db.close().await;
        res
    }
}
