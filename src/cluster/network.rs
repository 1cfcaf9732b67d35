//! Raft transport over internal NATS subjects, through the in-process client.
//!
//! Every metadata node subscribes to `<namespace>.raft.<raft-id>.{append,vote,
//! snapshot}` and answers each request by calling the matching openraft entry
//! point (`Raft::append_entries`, `vote`, `install_snapshot`); a peer reaches
//! it with a NATS request on that subject. With NATS routes between nodes the
//! subjects span the cluster; nodes that share one NATS server (the
//! in-process tests) need nothing more.
//!
//! Wire format: the request is openraft's own request type as JSON
//! (`serde_json`; openraft's `serde` feature); the reply is a [`RpcReply`],
//! also JSON. Snapshot chunks travel as JSON arrays of bytes (up to ~4 bytes
//! per byte), so the metadata group's `snapshot_max_chunk_size` is kept at
//! [`SNAPSHOT_CHUNK_BYTES`], well under NATS's 1 MiB default `max_payload`.
//!
//! Timeouts and failures: each call waits at most the `hard_ttl` of openraft's
//! `RPCOption` (the heartbeat interval for appends and votes, the snapshot
//! timeout for snapshot chunks; openraft drops the call then anyway). No
//! responders (the peer is down, or not reachable through the routes) and a
//! timeout are both `Unreachable`, which makes openraft back off before
//! retrying that peer;
//! a reply that cannot be decoded is a `Network` error.
//!
//! Bounds: openraft keeps at most one request in flight per peer and RPC kind
//! (one replication stream per follower, one vote round per election), so the
//! client side needs no queue of its own. The server side receives into the
//! in-process subscription's queue and handles at most [`MAX_IN_FLIGHT`]
//! requests at once; a request that arrives while all are busy is dropped
//! (and counted in the log at debug level): its sender times out and openraft
//! retries it, which is the same outcome as a lost packet.
//!
//! [`NoPeers`] is the transport of a node opened without NATS (the storage
//! tests and tools): every RPC is `Unreachable`, which a one-member group
//! never notices.
//!
//! The server side also notes when this node last accepted an append from a
//! leader ([`LeaderContact`]): that is when openraft last renewed the
//! leader's lease here, which `control`'s controller watch needs to know
//! when a vote for another candidate can be granted.
//!
//! Must not: block (all work is async), panic on a malformed request (it is
//! answered with `RpcReply::BadRequest`), or hold a lock across `.await`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{Raft, RaftNetwork, RaftNetworkFactory};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::state::NodeInfo;
use super::TypeConfig;
use crate::nats::handle::LocalClient;
use crate::nats::NatsError;

/// Largest snapshot chunk sent in one request (raw bytes, before JSON).
pub const SNAPSHOT_CHUNK_BYTES: u64 = 128 * 1024;

/// Requests handled at once by one node's RPC server; more are dropped.
pub const MAX_IN_FLIGHT: usize = 32;

/// When this node last accepted an append (entries or a heartbeat) from a
/// leader whose vote it shares. openraft renews the leader's lease on every
/// such append, so this is what the lease runs from.
#[derive(Debug)]
pub struct LeaderContact {
    base: Instant,
    /// Milliseconds after `base` of the last accepted append, plus one (0:
    /// none yet).
    last_ms: AtomicU64,
}

impl Default for LeaderContact {
    fn default() -> Self {
        LeaderContact::new()
    }
}

impl LeaderContact {
    /// No append heard yet: the silence counts from now.
    pub fn new() -> LeaderContact {
        LeaderContact {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// Notes an accepted append.
    pub fn heard(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.last_ms.fetch_max(ms + 1, Ordering::Relaxed);
    }

    /// Whether any append was accepted since this node started.
    pub fn heard_any(&self) -> bool {
        self.last_ms.load(Ordering::Relaxed) > 0
    }

    /// How long ago the last accepted append arrived (since start when
    /// none was).
    pub fn silence(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed).saturating_sub(1));
        self.base.elapsed().saturating_sub(last)
    }
}

/// Subject prefix of a node's Raft RPCs: `<namespace>.raft.<raft-id>`.
pub fn rpc_prefix(namespace: &str, raft_id: u64) -> String {
    format!("{namespace}.raft.{raft_id}")
}

/// The three RPC kinds, named by the last subject token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Append,
    Vote,
    Snapshot,
}

impl Kind {
    fn token(self) -> &'static str {
        match self {
            Kind::Append => "append",
            Kind::Vote => "vote",
            Kind::Snapshot => "snapshot",
        }
    }

    fn from_token(t: &[u8]) -> Option<Kind> {
        match t {
            b"append" => Some(Kind::Append),
            b"vote" => Some(Kind::Vote),
            b"snapshot" => Some(Kind::Snapshot),
            _ => None,
        }
    }
}

/// The answer to one RPC, as sent back on the reply subject.
#[derive(Debug, Serialize, Deserialize)]
pub enum RpcReply<T, E> {
    /// The peer's Raft answered.
    Ok(T),
    /// The peer's Raft returned an error (shutting down, fatal, snapshot mismatch).
    Raft(E),
    /// The peer could not decode the request.
    BadRequest(String),
}

/// Why an RPC failed on the way, before any Raft answer.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The request could not be sent or no reply arrived.
    #[error("raft {kind} to node {target}: {source}")]
    Nats {
        /// RPC kind.
        kind: &'static str,
        /// Raft id of the peer.
        target: u64,
        /// Cause.
        #[source]
        source: NatsError,
    },
    /// The request could not be encoded or the reply decoded.
    #[error("raft {kind} to node {target}: bad message: {source}")]
    Codec {
        /// RPC kind.
        kind: &'static str,
        /// Raft id of the peer.
        target: u64,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// The peer could not decode our request.
    #[error("raft {kind} to node {target}: rejected by the peer: {reason}")]
    Rejected {
        /// RPC kind.
        kind: &'static str,
        /// Raft id of the peer.
        target: u64,
        /// The peer's explanation.
        reason: String,
    },
}

/// Network factory of a cluster node: one [`NatsPeer`] per target.
#[derive(Clone)]
pub struct NatsNetwork {
    client: LocalClient,
    namespace: String,
}

impl NatsNetwork {
    /// A transport publishing through `client` under `namespace`.
    pub fn new(client: LocalClient, namespace: impl Into<String>) -> NatsNetwork {
        NatsNetwork {
            client,
            namespace: namespace.into(),
        }
    }
}

/// Client side of the transport for one peer.
pub struct NatsPeer {
    client: LocalClient,
    prefix: String,
    target: u64,
}

impl RaftNetworkFactory<TypeConfig> for NatsNetwork {
    type Network = NatsPeer;

    async fn new_client(&mut self, target: u64, _node: &NodeInfo) -> NatsPeer {
        NatsPeer {
            client: self.client.clone(),
            prefix: rpc_prefix(&self.namespace, target),
            target,
        }
    }
}

/// Outcome of one call before the Raft error is typed.
enum CallError<E> {
    Transport(TransportError, bool),
    Raft(E),
}

impl NatsPeer {
    async fn call<Req, Resp, E>(
        &self,
        kind: Kind,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, CallError<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: DeserializeOwned,
    {
        let name = kind.token();
        let codec = |source| {
            CallError::Transport(
                TransportError::Codec {
                    kind: name,
                    target: self.target,
                    source,
                },
                false,
            )
        };
        let payload = serde_json::to_vec(req).map_err(codec)?;
        let subject = format!("{}.{}", self.prefix, name);
        let msg = self
            .client
            .request(&subject, Bytes::from(payload), timeout)
            .await
            .map_err(|source| {
                // No responders and timeouts mean "not reachable now": openraft
                // backs off. Anything else (payload too large, server stopped)
                // is a network error.
                let unreachable = matches!(source, NatsError::NoResponders | NatsError::Timeout);
                CallError::Transport(
                    TransportError::Nats {
                        kind: name,
                        target: self.target,
                        source,
                    },
                    unreachable,
                )
            })?;
        match serde_json::from_slice::<RpcReply<Resp, E>>(&msg.payload).map_err(codec)? {
            RpcReply::Ok(r) => Ok(r),
            RpcReply::Raft(e) => Err(CallError::Raft(e)),
            RpcReply::BadRequest(reason) => Err(CallError::Transport(
                TransportError::Rejected {
                    kind: name,
                    target: self.target,
                    reason,
                },
                false,
            )),
        }
    }

    fn map_err<E: std::error::Error>(
        &self,
        e: CallError<RaftError<u64, E>>,
    ) -> RPCError<u64, NodeInfo, RaftError<u64, E>> {
        match e {
            CallError::Transport(t, true) => RPCError::Unreachable(Unreachable::new(&t)),
            CallError::Transport(t, false) => RPCError::Network(NetworkError::new(&t)),
            CallError::Raft(e) => RPCError::RemoteError(RemoteError::new(self.target, e)),
        }
    }
}

impl RaftNetwork<TypeConfig> for NatsPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, NodeInfo, RaftError<u64>>> {
        self.call(Kind::Append, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.map_err(e))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, NodeInfo, RaftError<u64, InstallSnapshotError>>,
    > {
        self.call(Kind::Snapshot, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.map_err(e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, NodeInfo, RaftError<u64>>> {
        self.call(Kind::Vote, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.map_err(e))
    }
}

/// Starts the RPC server of the node `raft_id`: subscribes to
/// `<namespace>.raft.<raft_id>.*` and answers through `raft`, noting every
/// accepted append in `contact`. The task ends when the subscription ends
/// (NATS stopped) or when aborted.
pub fn serve(
    raft: Raft<TypeConfig>,
    client: LocalClient,
    namespace: &str,
    raft_id: u64,
    contact: Arc<LeaderContact>,
) -> Result<JoinHandle<()>, NatsError> {
    let mut sub = client.subscribe(&format!("{}.*", rpc_prefix(namespace, raft_id)), None)?;
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    Ok(tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            let kind = m
                .subject
                .rsplit(|&b| b == b'.')
                .next()
                .and_then(Kind::from_token);
            let (Some(kind), Some(reply)) = (kind, m.reply) else {
                continue;
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                tracing::debug!(?kind, "raft rpc dropped: {MAX_IN_FLIGHT} already in flight");
                continue;
            };
            let raft = raft.clone();
            let client = client.clone();
            let contact = contact.clone();
            tokio::spawn(async move {
                let answer = handle(&raft, kind, &m.payload, &contact).await;
                if let Ok(reply) = std::str::from_utf8(&reply) {
                    // The requester may have gone (timeout): nothing to do then.
                    let _ = client.publish(reply, None, None, Bytes::from(answer));
                }
                drop(permit);
            });
        }
    }))
}

/// Decodes one request, calls Raft, encodes the reply.
async fn handle(
    raft: &Raft<TypeConfig>,
    kind: Kind,
    payload: &[u8],
    contact: &LeaderContact,
) -> Vec<u8> {
    match kind {
        Kind::Append => match serde_json::from_slice::<AppendEntriesRequest<TypeConfig>>(payload) {
            Ok(req) => {
                let r = raft.append_entries(req).await;
                // Every answer but "higher vote" means the sender leads
                // with the vote this node holds: its lease was renewed.
                if matches!(&r, Ok(resp) if !matches!(resp, AppendEntriesResponse::HigherVote(_))) {
                    contact.heard();
                }
                encode(r)
            }
            Err(e) => bad::<AppendEntriesResponse<u64>, RaftError<u64>>(e),
        },
        Kind::Vote => match serde_json::from_slice::<VoteRequest<u64>>(payload) {
            Ok(req) => encode(raft.vote(req).await),
            Err(e) => bad::<VoteResponse<u64>, RaftError<u64>>(e),
        },
        Kind::Snapshot => {
            match serde_json::from_slice::<InstallSnapshotRequest<TypeConfig>>(payload) {
                Ok(req) => encode(raft.install_snapshot(req).await),
                Err(e) => {
                    bad::<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>(e)
                }
            }
        }
    }
}

fn encode<T: Serialize, E: Serialize>(r: Result<T, E>) -> Vec<u8> {
    let reply = match r {
        Ok(v) => RpcReply::Ok(v),
        Err(e) => RpcReply::Raft(e),
    };
    // Serializing openraft's plain data types to JSON cannot fail (no maps
    // with non-string keys, no custom serializers); an empty reply would
    // only make the caller report a decode error.
    serde_json::to_vec(&reply).unwrap_or_default()
}

fn bad<T: Serialize, E: Serialize>(e: serde_json::Error) -> Vec<u8> {
    serde_json::to_vec(&RpcReply::<T, E>::BadRequest(e.to_string())).unwrap_or_default()
}

/// Why an RPC to a peer could not be sent by [`NoPeers`].
#[derive(Debug, thiserror::Error)]
#[error("no transport to raft node {target} (server {server:?}): this node runs without NATS")]
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
