//! The cluster's control plane around the Raft group: bootstrap, join,
//! forwarding of proposals to the controller, broker registration and voter
//! promotion. Everything here rides internal NATS request/reply subjects
//! through the in-process client, as the Raft RPCs do (see `network`):
//!
//! | subject | who answers | what |
//! |---|---|---|
//! | `<ns>.raft.metadata.join` | the controller (others stay silent) | add the sender as a learner, promote it to voter while voters < `clustering.raft.max.quorum.size` (0 = no limit); update its addresses if it is already a member |
//! | `<ns>.raft.metadata.propagate` | the controller (others stay silent) | apply a `MetaCommand` proposed on another node; the reply carries the log index so the proposer can wait until it applied it too |
//! | `<ns>.raft.metadata.info.<server-id>` | that server | its Raft id, addresses, and whether its Raft group is initialized (for `bootstrap.peers`) |
//!
//! Only the controller answers join and propagate: every member subscribes,
//! and a member that does not lead stays silent, so the requester gets the
//! controller's answer or a timeout (then it retries). A deposed controller
//! that still believes it leads cannot commit; its `client_write` fails with
//! "forward to leader" or times out, and it stays silent too, so a proposer
//! never receives a stale "no" next to the real controller's "yes".
//!
//! Bootstrap rules (`Bootstrap`):
//! - `Seed`: a fresh data directory becomes a one-member group (this node).
//! - `Peers(ids)`: the nodes wait until every listed server answers on its
//!   info subject; then the one with the lowest server id — provided nobody
//!   reports an initialized group — initializes the group with all of them
//!   as voters. The others are brought in by its replication.
//! - `Join`: wait to be added by the controller.
//!
//! Whatever the rule, a node that is not a member of the group keeps asking
//! the controller to join (backoff 200 ms doubling to 2 s), and once it is a
//! member it registers itself as a broker with its advertised addresses
//! (`RegisterBroker`, or `ReplaceBroker` when its data directory was created
//! under another server id).
//!
//! Tasks per node (all aborted by `Metadata::shutdown`): the Raft RPC server
//! (`network::serve`), one handler loop per control subject, the member task
//! (join, then register; ends when done), the controller tick (promotes
//! caught-up learners every second while this node leads), the controller
//! watch (below) and, with `Peers`, the bootstrap task (ends once the group
//! exists).
//!
//! Controller watch (voters that follow): once the controller has been
//! silent for two heartbeats, ask whether anybody in the NATS cluster still
//! listens on its info subject. "No responders" means its node is gone (the
//! process died, or every route to it closed) — not merely slow. Then, as
//! soon as the controller's lease has run out here (the moment the other
//! voters can grant a vote), this node starts an election instead of
//! waiting out openraft's own timer (lease + a randomized election
//! timeout). The followers space their starts by their rank among the
//! voters (sorted Raft ids, two heartbeats apart) so that they do not split
//! the vote; one that is asked for its vote first does not start its own.
//! A controller that answers, or whose node cannot be asked (timeout), is
//! left to openraft's timers (1.5–2 election timeouts of silence, see
//! `RaftTiming`): a slow but live controller is never deposed by the watch.
//! Nor does the watch act before this node has accepted any append since it
//! started (its routes may still be forming then).
//!
//! Bounds: each handler loop serves at most [`MAX_HANDLERS`] requests at once;
//! a request arriving while all are busy is dropped and its sender times
//! out and retries (the same as a lost message). The loop itself only
//! decodes and hands off, so the in-process subscription's queue in front
//! of it stays short.
//!
//! Trust: as in Liftbridge, whoever can publish on `<ns>.raft.>` is treated
//! as a member (it can join, propose, and speak Raft). Restrict those
//! subjects with NATS authorization (users, route credentials) on networks
//! that are not trusted. Requests are still validated: a malformed one is
//! dropped, a join without a usable server id or Raft id is refused, and
//! proposals go through the state machine's checks like local ones.
//!
//! Must not: propose through `Metadata::propose` from a handler (a handler
//! runs on the controller and calls Raft directly, so a forwarded request is
//! never forwarded again), or hold a lock across `.await`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::error::{ClientWriteError, RaftError};
use openraft::ChangeMembers;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::state::{MetaCommand, MetaResponse, NodeInfo};
use super::{MetaError, Metadata};
use crate::nats::handle::LocalClient;
use crate::nats::NatsError;

/// Requests served at once by one handler loop; more are dropped.
pub const MAX_HANDLERS: usize = 64;

/// How long one join request waits for the controller's answer. Short: no
/// answer at all is the common case while no controller exists yet, and the
/// controller keeps working on a join whose requester gave up (the next
/// attempt finds the node added).
const JOIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the controller works on one join (adding a learner waits for it
/// to catch up).
const JOIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one bootstrap info request waits.
const INFO_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest pause between two join or bootstrap attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Controller tick (learner promotion).
const TICK: Duration = Duration::from_secs(1);

/// How a node comes to be in the metadata group
/// (`LiftbridgeConfig::raft_bootstrap_mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bootstrap {
    /// Initialize a one-member group on a fresh data directory.
    Seed,
    /// Wait for these servers (this one may be listed); the lowest id
    /// initializes the group with all of them as voters.
    Peers(Vec<String>),
    /// Wait to be added by the controller.
    Join,
}

/// What a clustered `Metadata` needs besides its storage.
#[derive(Clone)]
pub struct ClusterOptions {
    /// In-process NATS client for the Raft RPCs and the control subjects.
    pub client: LocalClient,
    /// `clustering.namespace`: prefix of every internal subject.
    pub namespace: String,
    /// How this node enters the group.
    pub bootstrap: Bootstrap,
    /// `clustering.raft.max.quorum.size`: voters at most (0 = no limit).
    pub max_quorum_size: u32,
}

/// Subject of join requests.
pub fn join_subject(ns: &str) -> String {
    format!("{ns}.raft.metadata.join")
}

/// Subject of forwarded proposals.
pub fn propagate_subject(ns: &str) -> String {
    format!("{ns}.raft.metadata.propagate")
}

/// Subject on which server `server_id` describes itself.
pub fn info_subject(ns: &str, server_id: &str) -> String {
    format!("{ns}.raft.metadata.info.{server_id}")
}

/// A request to join the group.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    /// Raft id of the joining node.
    pub raft_id: u64,
    /// Its broker entry (addresses).
    pub node: NodeInfo,
}

/// The controller's answer to a join.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum JoinReply {
    /// The node is a member (voter or learner).
    Member {
        /// Whether it votes.
        voter: bool,
    },
    /// The controller could not add it (it retries).
    Failed {
        /// Why.
        reason: String,
    },
}

/// A proposal forwarded to the controller.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PropagateRequest {
    /// The command.
    pub cmd: MetaCommand,
}

/// The controller's answer to a forwarded proposal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PropagateReply {
    /// Committed and applied on the controller at this log index.
    Applied {
        /// Log index of the entry.
        index: u64,
        /// The state machine's answer.
        response: MetaResponse,
    },
    /// The controller failed for a reason other than leadership (storage,
    /// shutdown); the proposer reports it.
    Failed {
        /// Why.
        reason: String,
    },
}

/// A server's description of itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InfoReply {
    /// Raft id.
    pub raft_id: u64,
    /// Broker entry.
    pub node: NodeInfo,
    /// Whether its Raft group is initialized (it has a membership).
    pub initialized: bool,
}

/// Why a forwarded proposal did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// No controller answered (none known, unreachable, or slow): retry.
    #[error("forwarding to the controller: {0}")]
    Nats(#[from] NatsError),
    /// The answer could not be read.
    #[error("forwarding to the controller: bad reply: {0}")]
    Codec(#[from] serde_json::Error),
    /// The controller failed.
    #[error("controller: {0}")]
    Failed(String),
}

/// The NATS side of a clustered `Metadata`.
pub(crate) struct ClusterLink {
    pub(crate) client: LocalClient,
    pub(crate) namespace: String,
    pub(crate) max_quorum_size: u32,
    /// When this node last accepted an append from a leader.
    pub(crate) contact: Arc<super::network::LeaderContact>,
    pub(crate) tasks: parking_lot::Mutex<Vec<JoinHandle<()>>>,
}

impl ClusterLink {
    /// Sends `cmd` to the controller and waits up to `timeout` for its answer.
    pub(crate) async fn forward(
        &self,
        cmd: &MetaCommand,
        timeout: Duration,
    ) -> Result<(u64, MetaResponse), ForwardError> {
        let body = serde_json::to_vec(&PropagateRequest { cmd: cmd.clone() })?;
        let msg = self
            .client
            .request(
                &propagate_subject(&self.namespace),
                Bytes::from(body),
                timeout,
            )
            .await?;
        match serde_json::from_slice::<PropagateReply>(&msg.payload)? {
            PropagateReply::Applied { index, response } => Ok((index, response)),
            PropagateReply::Failed { reason } => Err(ForwardError::Failed(reason)),
        }
    }

    pub(crate) fn spawn(&self, task: JoinHandle<()>) {
        self.tasks.lock().push(task);
    }

    pub(crate) fn abort_all(&self) {
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
    }
}

/// Subscribes to `subject` and answers each request with `f` (no answer
/// when `f` returns `None`), at most [`MAX_HANDLERS`] at once.
fn serve_requests<Req, Resp, F, Fut>(
    client: &LocalClient,
    subject: &str,
    md: Metadata,
    f: F,
) -> Result<JoinHandle<()>, NatsError>
where
    Req: DeserializeOwned + Send + 'static,
    Resp: Serialize + Send + 'static,
    F: Fn(Metadata, Req) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Option<Resp>> + Send + 'static,
{
    let mut sub = client.subscribe(subject, None)?;
    let client = client.clone();
    let permits = Arc::new(Semaphore::new(MAX_HANDLERS));
    let subject = subject.to_string();
    Ok(tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            let Some(reply) = m.reply.and_then(|r| String::from_utf8(r.to_vec()).ok()) else {
                continue;
            };
            let req = match serde_json::from_slice::<Req>(&m.payload) {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(subject = %subject, error = %e, "bad control request dropped");
                    continue;
                }
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                tracing::debug!(subject = %subject, "control request dropped: handlers busy");
                continue;
            };
            let (md, f, client) = (md.clone(), f.clone(), client.clone());
            tokio::spawn(async move {
                if let Some(resp) = f(md, req).await {
                    if let Ok(body) = serde_json::to_vec(&resp) {
                        let _ = client.publish(&reply, None, None, Bytes::from(body));
                    }
                }
                drop(permit);
            });
        }
    }))
}

/// Starts the Raft RPC server and the control handlers (before the group
/// is bootstrapped: peers may call at once).
pub(crate) fn start_servers(md: &Metadata, link: &ClusterLink) -> Result<(), NatsError> {
    let ns = link.namespace.clone();
    let client = &link.client;
    link.spawn(super::network::serve(
        md.raft.clone(),
        client.clone(),
        &ns,
        md.raft_id,
        link.contact.clone(),
    )?);
    link.spawn(serve_requests(
        client,
        &join_subject(&ns),
        md.clone(),
        |md: Metadata, req: JoinRequest| async move {
            // Adding a learner waits for it to catch up: bounded, so a
            // joiner that vanished does not hold a handler forever.
            tokio::time::timeout(JOIN_TIMEOUT, handle_join(&md, req))
                .await
                .ok()
                .flatten()
        },
    )?);
    link.spawn(serve_requests(
        client,
        &propagate_subject(&ns),
        md.clone(),
        |md: Metadata, req: PropagateRequest| async move { handle_propagate(&md, req).await },
    )?);
    link.spawn(serve_requests(
        client,
        &info_subject(&ns, &md.node.id),
        md.clone(),
        |md: Metadata, _req: serde_json::Value| async move {
            Some(InfoReply {
                raft_id: md.raft_id,
                node: (*md.node).clone(),
                initialized: md.raft.is_initialized().await.unwrap_or(false),
            })
        },
    )?);
    Ok(())
}

/// Starts the member task, the controller tick and (with `Peers`) the
/// bootstrap task. Called after a `Seed` node initialized its group, so
/// that a seed never asks another group to take it in.
pub(crate) fn start_tasks(
    md: &Metadata,
    link: &ClusterLink,
    bootstrap: &Bootstrap,
    previous_id: Option<String>,
) {
    if let Bootstrap::Peers(peers) = bootstrap {
        let (md2, peers) = (md.clone(), peers.clone());
        link.spawn(tokio::spawn(async move {
            bootstrap_peers(&md2, &peers).await;
        }));
    }
    let md2 = md.clone();
    link.spawn(tokio::spawn(async move {
        member_task(&md2, previous_id).await;
    }));
    let md2 = md.clone();
    link.spawn(tokio::spawn(async move {
        controller_tick(&md2).await;
    }));
    let md2 = md.clone();
    link.spawn(tokio::spawn(async move {
        controller_watch(&md2).await;
    }));
    let md2 = md.clone();
    link.spawn(tokio::spawn(async move {
        log_controller_changes(&md2).await;
    }));
}

/// Logs every change of the controller this node knows (an election
/// starting shows as "none"), so a failover's timeline can be read from
/// the nodes' logs.
async fn log_controller_changes(md: &Metadata) {
    let mut metrics = md.raft.metrics();
    let mut known: Option<Option<u64>> = None;
    loop {
        let (leader, term, server) = {
            let m = metrics.borrow_and_update();
            let server = m.current_leader.and_then(|l| {
                m.membership_config
                    .membership()
                    .get_node(&l)
                    .map(|n| n.id.clone())
            });
            (m.current_leader, m.current_term, server)
        };
        if known != Some(leader) {
            known = Some(leader);
            match server {
                Some(s) => tracing::info!(controller = %s, term, "metadata controller known"),
                None => tracing::info!(term, "no metadata controller known (election)"),
            }
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Whether the node is in the group's membership (as voter or learner).
fn is_member(md: &Metadata) -> bool {
    md.raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .get_node(&md.raft_id)
        .is_some()
}

/// The node's entry in the membership, if any.
fn member_node(md: &Metadata, raft_id: u64) -> Option<NodeInfo> {
    md.raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .get_node(&raft_id)
        .cloned()
}

fn voter_count(md: &Metadata) -> usize {
    md.raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .count()
}

fn quorum_has_room(md: &Metadata, max: u32) -> bool {
    max == 0 || voter_count(md) < max as usize
}

/// The controller's side of a join. Silent (`None`) on a non-leader.
async fn handle_join(md: &Metadata, req: JoinRequest) -> Option<JoinReply> {
    if !md.is_leader() {
        return None;
    }
    let id = &req.node.id;
    if req.raft_id == 0
        || id.is_empty()
        || id
            .chars()
            .any(|c| c.is_whitespace() || c == '.' || c == '*' || c == '>')
    {
        return Some(JoinReply::Failed {
            reason: format!(
                "invalid join: raft id {} and server id {id:?} (non-empty, no spaces, dots or wildcards)",
                req.raft_id
            ),
        });
    }
    let max = md.link.as_ref().map_or(0, |l| l.max_quorum_size);
    match member_node(md, req.raft_id) {
        Some(n) if n == req.node => {}
        Some(_) => {
            // A member restarted with new addresses: refresh them.
            let nodes = BTreeMap::from([(req.raft_id, req.node.clone())]);
            if let Err(e) = md
                .raft
                .change_membership(ChangeMembers::SetNodes(nodes), false)
                .await
            {
                return join_failure(&e);
            }
        }
        None => {
            // Blocking: returns once the learner has caught up, so that its
            // promotion does not stall commits on a lagging voter.
            if let Err(e) = md
                .raft
                .add_learner(req.raft_id, req.node.clone(), true)
                .await
            {
                return join_failure(&e);
            }
            tracing::info!(server = %req.node.id, raft_id = req.raft_id, "metadata learner added");
        }
    }
    let voter = |md: &Metadata| {
        md.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == req.raft_id)
    };
    if !voter(md) && quorum_has_room(md, max) {
        match md
            .raft
            .change_membership(ChangeMembers::AddVoterIds([req.raft_id].into()), false)
            .await
        {
            Ok(_) => tracing::info!(server = %req.node.id, "metadata voter added"),
            Err(e) => return join_failure(&e),
        }
    }
    // A server that lost its data directory rejoins under a new Raft id: its
    // old id would count as a dead voter in every quorum from now on.
    let stale: BTreeSet<u64> = {
        let m = md.raft.metrics();
        let m = m.borrow();
        let found = m
            .membership_config
            .membership()
            .nodes()
            .filter(|(id, n)| **id != req.raft_id && n.id == req.node.id)
            .map(|(id, _)| *id)
            .collect();
        found
    };
    if !stale.is_empty() && voter(md) {
        let voters: BTreeSet<u64> = md
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect();
        let (stale_voters, stale_learners): (BTreeSet<u64>, BTreeSet<u64>) =
            stale.into_iter().partition(|id| voters.contains(id));
        if !stale_voters.is_empty() {
            if let Err(e) = md
                .raft
                .change_membership(ChangeMembers::RemoveVoters(stale_voters), false)
                .await
            {
                return join_failure(&e);
            }
        }
        if !stale_learners.is_empty() {
            if let Err(e) = md
                .raft
                .change_membership(ChangeMembers::RemoveNodes(stale_learners), false)
                .await
            {
                return join_failure(&e);
            }
        }
        tracing::info!(server = %req.node.id, "stale raft ids of a rejoining server removed");
    }
    Some(JoinReply::Member { voter: voter(md) })
}

/// Whether a write failed because this node no longer leads (then the
/// handler stays silent: the real controller answers).
fn leader_lost(e: &RaftError<u64, ClientWriteError<u64, NodeInfo>>) -> bool {
    matches!(e, RaftError::APIError(ClientWriteError::ForwardToLeader(_)))
}

/// The answer to a join whose membership change failed: none when this node
/// lost the leadership meanwhile, else the reason.
fn join_failure(e: &RaftError<u64, ClientWriteError<u64, NodeInfo>>) -> Option<JoinReply> {
    (!leader_lost(e)).then(|| JoinReply::Failed {
        reason: e.to_string(),
    })
}

/// The controller's side of a forwarded proposal. Silent on a non-leader,
/// and when this node turns out not to lead (a deposed controller).
async fn handle_propagate(md: &Metadata, req: PropagateRequest) -> Option<PropagateReply> {
    if !md.is_leader() {
        return None;
    }
    let write = md.raft.client_write(req.cmd);
    match tokio::time::timeout(md.opts.leader_wait, write).await {
        Ok(Ok(resp)) => Some(PropagateReply::Applied {
            index: resp.log_id.index,
            response: resp.data,
        }),
        Ok(Err(e)) if leader_lost(&e) => None,
        Ok(Err(e)) => Some(PropagateReply::Failed {
            reason: e.to_string(),
        }),
        // No quorum: a deposed controller that does not know it yet.
        Err(_) => None,
    }
}

/// Joins the group if needed, then registers this node as a broker.
/// Retries with backoff until both are done.
async fn member_task(md: &Metadata, previous_id: Option<String>) {
    let Some(link) = md.link.clone() else {
        return;
    };
    let mut backoff = Duration::from_millis(200);
    loop {
        match member_step(md, &link, previous_id.as_deref()).await {
            Ok(true) => {
                tracing::info!(server = %md.node.id, "metadata member registered as broker");
                return;
            }
            Ok(false) => {}
            Err(e) => tracing::debug!(error = %e, "joining the metadata group"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One attempt: join (or refresh addresses), then register. `Ok(true)` when
/// this node is a member with a current broker entry.
async fn member_step(
    md: &Metadata,
    link: &ClusterLink,
    previous_id: Option<&str>,
) -> Result<bool, MetaError> {
    if member_node(md, md.raft_id).as_ref() != Some(&*md.node) {
        if md.is_leader() {
            // Our own addresses changed between runs.
            let nodes = BTreeMap::from([(md.raft_id, (*md.node).clone())]);
            md.raft
                .change_membership(ChangeMembers::SetNodes(nodes), false)
                .await
                .map_err(|e| MetaError::Raft(e.to_string()))?;
        } else {
            let body = serde_json::to_vec(&JoinRequest {
                raft_id: md.raft_id,
                node: (*md.node).clone(),
            })
            .map_err(|e| MetaError::Raft(e.to_string()))?;
            let reply = link
                .client
                .request(
                    &join_subject(&link.namespace),
                    Bytes::from(body),
                    JOIN_REQUEST_TIMEOUT,
                )
                .await
                .map_err(|e| MetaError::Raft(format!("join: {e}")))?;
            match serde_json::from_slice::<JoinReply>(&reply.payload) {
                Ok(JoinReply::Member { voter }) => {
                    tracing::info!(voter, "joined the metadata group");
                }
                Ok(JoinReply::Failed { reason }) => {
                    return Err(MetaError::Raft(format!("join: {reason}")))
                }
                Err(e) => return Err(MetaError::Raft(format!("join: bad reply: {e}"))),
            }
        }
        if !is_member(md) {
            // The membership reaches us with the controller's replication.
            return Ok(false);
        }
    }
    md.register_broker(previous_id).await?;
    Ok(true)
}

/// While this node leads: promote learners that have caught up, as long as
/// the voters are fewer than `max.quorum.size`.
async fn controller_tick(md: &Metadata) {
    let max = md.link.as_ref().map_or(0, |l| l.max_quorum_size);
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !md.is_leader() || !quorum_has_room(md, max) {
            continue;
        }
        let candidate = {
            let m = md.raft.metrics();
            let m = m.borrow();
            let membership = m.membership_config.membership();
            let voters: BTreeSet<u64> = membership.voter_ids().collect();
            let caught_up: BTreeSet<u64> = m
                .replication
                .as_ref()
                .map(|r| {
                    r.iter()
                        .filter(|(_, matched)| {
                            matched.map(|l| l.index)
                                >= m.last_log_index.map(|i| i.saturating_sub(1))
                        })
                        .map(|(id, _)| *id)
                        .collect()
                })
                .unwrap_or_default();
            let found = membership
                .learner_ids()
                .find(|id| !voters.contains(id) && caught_up.contains(id));
            found
        };
        if let Some(id) = candidate {
            match md
                .raft
                .change_membership(ChangeMembers::AddVoterIds([id].into()), false)
                .await
            {
                Ok(_) => tracing::info!(raft_id = id, "learner promoted to metadata voter"),
                Err(e) => tracing::debug!(raft_id = id, error = %e, "promoting learner"),
            }
        }
    }
}

/// `Peers` bootstrap: waits until every listed server answers, then the
/// lowest server id initializes the group with all of them as voters,
/// unless one of them already has a group (then everybody joins it).
async fn bootstrap_peers(md: &Metadata, peers: &[String]) {
    let Some(link) = md.link.clone() else {
        return;
    };
    let mut all: BTreeSet<String> = peers.iter().cloned().collect();
    all.insert(md.node.id.clone());
    let lowest = all.iter().next().cloned().unwrap_or_default();
    let mut backoff = Duration::from_millis(100);
    loop {
        if md.raft.is_initialized().await.unwrap_or(true) {
            return;
        }
        if lowest != md.node.id {
            // The lowest id initializes; the member task joins meanwhile.
            return;
        }
        let mut members = BTreeMap::from([(md.raft_id, (*md.node).clone())]);
        let mut ready = true;
        let mut existing = false;
        for id in all.iter().filter(|id| **id != md.node.id) {
            let answer = link
                .client
                .request(
                    &info_subject(&link.namespace, id),
                    Bytes::from_static(b"{}"),
                    INFO_TIMEOUT,
                )
                .await
                .ok()
                .and_then(|m| serde_json::from_slice::<InfoReply>(&m.payload).ok());
            match answer {
                Some(info) => {
                    existing |= info.initialized;
                    members.insert(info.raft_id, info.node);
                }
                None => ready = false,
            }
        }
        if existing {
            tracing::info!("a listed peer already has a metadata group: joining it");
            return;
        }
        if ready {
            match md.raft.initialize(members.clone()).await {
                Ok(()) => {
                    tracing::info!(
                        voters = members.len(),
                        "metadata group bootstrapped with peers"
                    );
                }
                Err(e) => tracing::warn!(error = %e, "bootstrapping the metadata group"),
            }
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// What the controller watch needs from the Raft metrics.
struct Followed {
    /// The controller's Raft id and server id.
    leader: u64,
    server: String,
    /// Its term.
    term: u64,
    /// This node's rank among the voters other than the controller (0 =
    /// lowest Raft id).
    rank: u32,
}

/// The controller this node follows as a voter, if any.
fn followed(md: &Metadata) -> Option<Followed> {
    let m = md.raft.metrics();
    let m = m.borrow();
    let leader = m.current_leader?;
    if leader == md.raft_id {
        return None;
    }
    let membership = m.membership_config.membership();
    let mut others: Vec<u64> = membership.voter_ids().filter(|v| *v != leader).collect();
    others.sort_unstable();
    let rank = others.iter().position(|v| *v == md.raft_id)?;
    Some(Followed {
        leader,
        server: membership.get_node(&leader)?.id.clone(),
        term: m.current_term,
        rank: u32::try_from(rank).unwrap_or(u32::MAX),
    })
}

/// Starts a metadata election as soon as the controller's lease runs out
/// when its node has left the NATS cluster (see the module docs).
async fn controller_watch(md: &Metadata) {
    let Some(link) = md.link.clone() else {
        return;
    };
    let timing = super::RaftTiming::of(&md.opts);
    let hb = timing.heartbeat;
    // Appends reach the voters within a few milliseconds of each other;
    // half a heartbeat more makes sure their leases ran out too.
    let margin = (hb / 2).max(Duration::from_millis(20));
    let spacing = hb * 2;
    let mut tick = tokio::time::interval((hb / 3).max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The term in which this node last started an election here: once per
    // controller term, openraft's timers take over after that.
    let mut started_in: Option<u64> = None;
    loop {
        tick.tick().await;
        let silence = link.contact.silence();
        if silence < hb * 2 {
            continue;
        }
        // Before the first append since start the routes may still be
        // forming: an absent listener proves nothing then.
        if !link.contact.heard_any() {
            continue;
        }
        let Some(f) = followed(md) else {
            continue;
        };
        if started_in == Some(f.term) {
            continue;
        }
        let due = timing.lease + margin + spacing * f.rank;
        if silence < due {
            // Not yet: asking now would only be asked again.
            continue;
        }
        let probe = link
            .client
            .request(
                &info_subject(&link.namespace, &f.server),
                Bytes::from_static(b"{}"),
                hb,
            )
            .await;
        if !matches!(probe, Err(NatsError::NoResponders)) {
            continue;
        }
        // The probe took time: still the same controller, still silent?
        match followed(md) {
            Some(now) if now.leader == f.leader && now.term == f.term => {}
            _ => continue,
        }
        if link.contact.silence() < due {
            continue;
        }
        started_in = Some(f.term);
        tracing::info!(
            controller = %f.server,
            silent_ms = link.contact.silence().as_millis() as u64,
            "metadata controller's node left the NATS cluster: starting an election"
        );
        if let Err(e) = md.raft.trigger().elect().await {
            tracing::warn!(error = %e, "starting a metadata election");
        }
    }
}
