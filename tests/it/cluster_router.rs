//! Three metadata nodes over an in-process transport: the same log store,
//! state machine and `propose` path as a single node, plus members and a
//! network. Checks snapshot installation and replication to followers, a
//! leader failure and a new leader continuing from the replicated state.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use liftbridge::cluster::{
    MetaCommand, MetaError, Metadata, MetadataOptions, MetadataState, NodeInfo, TypeConfig,
};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{Raft, RaftNetwork, RaftNetworkFactory};
use parking_lot::RwLock;

/// Raft handles by id; a node missing from the map is unreachable.
#[derive(Clone, Default)]
struct Router(Arc<RwLock<BTreeMap<u64, Raft<TypeConfig>>>>);

#[derive(Debug, thiserror::Error)]
#[error("node {0} is down")]
struct Down(u64);

struct Client {
    router: Router,
    target: u64,
}

impl Client {
    fn raft(&self) -> Result<Raft<TypeConfig>, Unreachable> {
        self.router
            .0
            .read()
            .get(&self.target)
            .cloned()
            .ok_or_else(|| Unreachable::new(&Down(self.target)))
    }
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Client;
    async fn new_client(&mut self, target: u64, _node: &NodeInfo) -> Client {
        Client {
            router: self.clone(),
            target,
        }
    }
}

impl RaftNetwork<TypeConfig> for Client {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, NodeInfo, RaftError<u64>>> {
        let raft = self.raft()?;
        raft.append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, NodeInfo, RaftError<u64, InstallSnapshotError>>,
    > {
        let raft = self.raft()?;
        raft.install_snapshot(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, NodeInfo, RaftError<u64>>> {
        let raft = self.raft()?;
        raft.vote(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

fn info(id: &str) -> NodeInfo {
    NodeInfo {
        id: id.into(),
        host: "127.0.0.1".into(),
        ..Default::default()
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

/// Waits until `md`'s applied state satisfies `f`.
async fn wait_state(md: &Metadata, f: impl Fn(&MetadataState) -> bool) {
    let mut rx = md.watch();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if f(&rx.borrow_and_update()) {
                return;
            }
            rx.changed().await.unwrap();
        }
    })
    .await
    .expect("state reached in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_three_nodes_replicate_and_survive_leader_loss() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let router = Router::default();
    let opts = MetadataOptions {
        leader_wait: Duration::from_secs(5),
        ..Default::default()
    };
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let md = Metadata::open_with_network(
            dir.path(),
            info(&format!("n{i}")),
            i == 0,
            opts.clone(),
            router.clone(),
        )
        .await
        .unwrap();
        router.0.write().insert(md.raft_id(), md.raft().clone());
        nodes.push(md);
    }
    assert!(nodes[0].is_leader());
    // State written and compacted before the others join reaches them only
    // through a snapshot (the log behind it is purged).
    nodes[0].propose_ok(create("before", 1)).await.unwrap();
    nodes[0].compact().await.unwrap();
    for md in &nodes[1..] {
        nodes[0]
            .add_voter(md.raft_id(), md.node().clone())
            .await
            .unwrap();
    }
    // Replication factor 3 is valid now that three brokers are registered.
    nodes[0].propose_ok(create("rf3", 3)).await.unwrap();
    for md in &nodes {
        wait_state(md, |s| {
            s.stream("rf3").is_some() && s.stream("before").is_some() && s.brokers.len() == 3
        })
        .await;
    }
    for md in &nodes[1..] {
        let snap = md.raft().metrics().borrow().snapshot;
        assert!(
            snap.is_some(),
            "follower {} installed the leader's snapshot",
            md.node().id
        );
    }
    // A follower does not accept writes: it names the leader.
    match nodes[1].propose(create("x", 1)).await {
        Err(MetaError::NotLeader { leader }) => assert_eq!(leader, "n0"),
        other => panic!("expected NotLeader, got {other:?}"),
    }

    // The leader goes away; the two others elect a new one and keep the state.
    let old = nodes.remove(0);
    router.0.write().remove(&old.raft_id());
    old.shutdown().await.unwrap();
    let new_leader = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(md) = nodes.iter().find(|m| m.is_leader()) {
                return md.clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a new leader is elected");
    assert_ne!(new_leader.node().id, "n0");
    new_leader.propose_ok(create("after", 2)).await.unwrap();
    for md in &nodes {
        wait_state(md, |s| {
            s.stream("after").is_some() && s.stream("rf3").is_some()
        })
        .await;
    }
    for md in &nodes {
        md.shutdown().await.unwrap();
    }
}
