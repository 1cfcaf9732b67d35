//! Raft network for the single-node group: there are no peers yet, so every
//! RPC answers `Unreachable`.
//!
//! This is the place where the NATS transport goes: a factory that, for a
//! target node, publishes requests on `<namespace>.raft.<node>.{append,vote,
//! snapshot}` through the in-process NATS handle and awaits the reply. Adding
//! it must not change anything else in `cluster`: the log store, the state
//! machine and `Metadata::propose` are already the one metadata path.
//!
//! In a one-member group openraft never calls the network (there is nobody
//! to replicate to or ask for votes), so these errors are only seen if a
//! membership with other nodes is installed before the transport exists.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{RaftNetwork, RaftNetworkFactory};

use super::state::NodeInfo;
use super::TypeConfig;

/// Why an RPC to a peer could not be sent.
#[derive(Debug, thiserror::Error)]
#[error("no transport to raft node {target} (server {server:?}): clustering is not available yet")]
pub struct NoTransport {
    /// Raft id of the peer.
    pub target: u64,
    /// Server id of the peer.
    pub server: String,
}

/// Network factory of a node without peers.
#[derive(Debug, Clone, Default)]
pub struct NoPeers;

/// A client for one peer, which fails every call.
#[derive(Debug, Clone)]
pub struct NoPeerClient {
    target: u64,
    server: String,
}

impl NoPeerClient {
    fn unreachable(&self) -> Unreachable {
        Unreachable::new(&NoTransport {
            target: self.target,
            server: self.server.clone(),
        })
    }
}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeerClient;

    async fn new_client(&mut self, target: u64, node: &NodeInfo) -> NoPeerClient {
        NoPeerClient {
            target,
            server: node.id.clone(),
        }
    }
}

impl RaftNetwork<TypeConfig> for NoPeerClient {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, NodeInfo, RaftError<u64>>> {
        Err(RPCError::Unreachable(self.unreachable()))
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, NodeInfo, RaftError<u64, InstallSnapshotError>>,
    > {
        Err(RPCError::Unreachable(self.unreachable()))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, NodeInfo, RaftError<u64>>> {
        Err(RPCError::Unreachable(self.unreachable()))
    }
}
