//! The replicated metadata: streams, partitions, brokers, and the commands
//! that change them.
//!
//! This module is pure: no I/O, no clocks, no randomness. `MetadataState::apply`
//! is a deterministic function of the current state and one `MetaCommand`, so
//! every replica that applies the same Raft log reaches the same state. Anything
//! time-dependent (creation time, pause time) travels inside the command,
//! stamped by the proposer.
//!
//! Existence checks (a stream that already exists, an unknown stream or
//! partition) happen here, at apply time, so they are linearizable: two
//! concurrent `CreateStream` of the same name cannot both succeed. A rejected
//! command leaves the state untouched and answers `MetaResponse::Rejected`.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// Upper bound of partitions per stream: a request for more is rejected
/// rather than allocating without limit.
pub const MAX_PARTITIONS: i32 = 65_536;

/// Address book entry of one server (a "broker" in Liftbridge's metadata).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Server id (`clustering.server.id`).
    pub id: String,
    /// Host advertised to clients (`host`, else the `listen` address).
    pub host: String,
    /// gRPC API port.
    pub port: u16,
    /// NATS client listener, `host:port` (empty when not embedded).
    pub nats_addr: String,
    /// HTTP (monitoring, metrics, UI) listener, `host:port` (empty when off).
    pub http_addr: String,
}

/// Per-stream overrides from `CreateStreamRequest`. `None` means "use the
/// server default" (`streams.*` keys). Durations are milliseconds, as on the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamConfig {
    /// `retentionMaxBytes`.
    pub retention_max_bytes: Option<i64>,
    /// `retentionMaxMessages`.
    pub retention_max_messages: Option<i64>,
    /// `retentionMaxAge` in ms.
    pub retention_max_age_ms: Option<i64>,
    /// `cleanerInterval` in ms.
    pub cleaner_interval_ms: Option<i64>,
    /// `segmentMaxBytes`.
    pub segment_max_bytes: Option<i64>,
    /// `segmentMaxAge` in ms.
    pub segment_max_age_ms: Option<i64>,
    /// `compactMaxGoroutines`.
    pub compact_max_goroutines: Option<i32>,
    /// `compactEnabled`.
    pub compact_enabled: Option<bool>,
    /// `autoPauseTime` in ms.
    pub auto_pause_time_ms: Option<i64>,
    /// `autoPauseDisableIfSubscribers`.
    pub auto_pause_disable_if_subscribers: Option<bool>,
    /// `minIsr`.
    pub min_isr: Option<i32>,
    /// `optimisticConcurrencyControl`.
    pub optimistic_concurrency_control: Option<bool>,
    /// `encryption`.
    pub encryption: Option<bool>,
}

/// First and latest time (Unix ns) an event happened; 0 = never.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventTimestamps {
    /// When the event first happened.
    pub first_ns: i64,
    /// When the event last happened.
    pub latest_ns: i64,
}

impl EventTimestamps {
    fn record(&mut self, ts: i64) {
        if self.first_ns == 0 {
            self.first_ns = ts;
        }
        self.latest_ns = ts;
    }
}

/// Metadata of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMeta {
    /// Partition number, 0-based.
    pub id: i32,
    /// Server id of the leader (empty when there is none).
    pub leader: String,
    /// Server ids of all replicas, leader included.
    pub replicas: Vec<String>,
    /// Server ids of the in-sync replicas.
    pub isr: Vec<String>,
    /// Bumped on every leader or ISR change.
    pub epoch: u64,
    /// Bumped on every leader change.
    pub leader_epoch: u64,
    /// Paused partitions have no leader activity and record nothing.
    pub paused: bool,
    /// Set by a pause with `resumeAll`: publishing to any partition resumes all.
    pub resume_all: bool,
    /// Readonly partitions reject publishes.
    pub readonly: bool,
    /// When the partition was paused.
    pub pause_timestamps: EventTimestamps,
    /// When the readonly flag changed.
    pub readonly_timestamps: EventTimestamps,
    /// ISR followers that reported the current leader unreachable (in its
    /// current leader epoch); cleared when the leader changes.
    #[serde(default)]
    pub leader_reports: Vec<String>,
}

impl PartitionMeta {
    /// Reports of ISR followers needed to replace the leader: a majority
    /// of the ISR members other than the leader.
    pub fn reports_needed(&self) -> usize {
        self.isr.iter().filter(|r| **r != self.leader).count() / 2 + 1
    }
}

/// Metadata of one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamMeta {
    /// Unique stream name.
    pub name: String,
    /// NATS subject of partition 0; partition i > 0 uses `<subject>.<i>`.
    pub subject: String,
    /// Load-balance group (NATS queue group), empty for none.
    pub group: String,
    /// Creation time, Unix ns.
    pub creation_timestamp_ns: i64,
    /// Per-stream overrides.
    pub config: StreamConfig,
    /// Partitions, index = partition id.
    pub partitions: Vec<PartitionMeta>,
}

impl StreamMeta {
    /// NATS subject of partition `id` (`subject` for 0, `subject.id` otherwise).
    pub fn partition_subject(&self, id: i32) -> String {
        if id == 0 {
            self.subject.clone()
        } else {
            format!("{}.{}", self.subject, id)
        }
    }

    /// The partition with this id, if any.
    pub fn partition(&self, id: i32) -> Option<&PartitionMeta> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

/// A change to the metadata. Every variant is one Raft log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaCommand {
    /// Adds or updates a server in the address book.
    RegisterBroker(NodeInfo),
    /// Replaces a broker by another (a server restarted on the same data with
    /// a new server id): the old entry goes, and every partition's leader,
    /// replicas and ISR name the new id. Epochs are unchanged: the data and
    /// the process are the same.
    ReplaceBroker {
        /// Server id being replaced.
        old: String,
        /// The new identity.
        new: NodeInfo,
    },
    /// Creates a stream. Replicas are placed at apply time on the brokers with
    /// the fewest partitions, the leader among them by fewest led (see
    /// `placement`); the first replica leads and the ISR is the leader alone.
    CreateStream {
        /// Stream name.
        name: String,
        /// Base subject.
        subject: String,
        /// Load-balance group.
        group: String,
        /// Replicas per partition; -1 = all brokers; must be ≥ 1 otherwise.
        replication_factor: i32,
        /// Number of partitions, ≥ 1.
        partitions: i32,
        /// Overrides.
        config: StreamConfig,
        /// Creation time stamped by the proposer, Unix ns.
        creation_timestamp_ns: i64,
    },
    /// Deletes a stream.
    DeleteStream {
        /// Stream name.
        name: String,
    },
    /// Pauses partitions (empty = all).
    PauseStream {
        /// Stream name.
        name: String,
        /// Partition ids; empty = all.
        partitions: Vec<i32>,
        /// Resume all partitions when any one is resumed by a publish.
        resume_all: bool,
        /// Time of the pause, Unix ns.
        timestamp_ns: i64,
    },
    /// Resumes partitions (empty = all).
    ResumeStream {
        /// Stream name.
        name: String,
        /// Partition ids; empty = all.
        partitions: Vec<i32>,
    },
    /// Sets or clears the readonly flag of partitions (empty = all).
    SetStreamReadonly {
        /// Stream name.
        name: String,
        /// Partition ids; empty = all.
        partitions: Vec<i32>,
        /// New flag value.
        readonly: bool,
        /// Time of the change, Unix ns.
        timestamp_ns: i64,
    },
    /// Makes `leader` the leader of a partition; bumps epoch and leader epoch.
    ChangeLeader {
        /// Stream name.
        name: String,
        /// Partition id.
        partition: i32,
        /// New leader's server id (must be a replica).
        leader: String,
    },
    /// Removes a replica (never the leader) from the ISR; bumps the epoch.
    ShrinkIsr {
        /// Stream name.
        name: String,
        /// Partition id.
        partition: i32,
        /// Replica leaving the ISR.
        replica: String,
        /// The leader epoch of the leader asking; a change asked by a
        /// deposed leader (another epoch) is rejected. `None`: unchecked.
        #[serde(default)]
        leader_epoch: Option<u64>,
    },
    /// Adds a replica back to the ISR; bumps the epoch.
    ExpandIsr {
        /// Stream name.
        name: String,
        /// Partition id.
        partition: i32,
        /// Replica joining the ISR (must be a replica).
        replica: String,
        /// As for `ShrinkIsr`.
        #[serde(default)]
        leader_epoch: Option<u64>,
    },
    /// Adds (or updates) a consumer in a group, creating the group with
    /// `coordinator` at epoch 0 when it does not exist (as Liftbridge).
    /// Bumps the epoch of an existing group when the membership changes.
    JoinConsumerGroup {
        /// Group id.
        group_id: String,
        /// Consumer id.
        consumer_id: String,
        /// Streams the consumer reads (must exist).
        streams: Vec<String>,
        /// Coordinator for a new group (a registered broker), chosen by the proposer.
        coordinator: String,
    },
    /// Removes a consumer from a group (`expired`: evicted by the coordinator
    /// after `groups.consumer.timeout`). An empty group is deleted.
    LeaveConsumerGroup {
        /// Group id.
        group_id: String,
        /// Consumer id.
        consumer_id: String,
        /// Whether the consumer timed out rather than left.
        expired: bool,
    },
    /// An ISR follower reports that it cannot reach the partition's leader
    /// (`leader`, in `leader_epoch`). When a majority of the ISR followers
    /// reported, the leader is replaced by one of the reporters (the
    /// smallest server id), which is alive since it reported: the old
    /// leader leaves the ISR, epoch and leader epoch are bumped. A report
    /// about another leader or epoch is stale and rejected.
    ReportLeader {
        /// Stream name.
        name: String,
        /// Partition id.
        partition: i32,
        /// The leader reported.
        leader: String,
        /// Its leader epoch as the reporter knows it.
        leader_epoch: u64,
        /// The reporting replica.
        reporter: String,
    },
    /// Changes nothing. A node proposes it to learn that its state is
    /// current: once the barrier is applied here, so is everything the
    /// controller committed before it.
    Barrier,
    /// A member of a group reports its coordinator unreachable (as
    /// Liftbridge's ReportConsumerGroupCoordinator). Reports count for the
    /// group's current epoch and coordinator only, one per member, and
    /// expire `timeout_ms` after they were made; once a majority of the
    /// members has reported within that window, the group moves to
    /// `candidate` (the node that took the completing report — alive, and
    /// reachable by that member) and its epoch is bumped.
    ReportGroupCoordinator {
        /// Group id.
        group_id: String,
        /// The reporting member.
        consumer_id: String,
        /// The coordinator reported.
        coordinator: String,
        /// The group epoch the member saw.
        epoch: u64,
        /// Where the group goes once a majority reported.
        candidate: String,
        /// When the report was made (ms since the epoch, proposer's clock).
        at_ms: i64,
        /// How long a report counts (`groups.coordinator.timeout`).
        timeout_ms: i64,
    },
    /// Moves a group to a new coordinator, fenced by the epoch the reporters saw.
    ChangeGroupCoordinator {
        /// Group id.
        group_id: String,
        /// New coordinator (a registered broker).
        coordinator: String,
        /// The group epoch the change is based on; a stale one is rejected.
        epoch: u64,
    },
}

/// A consumer group (spec §1.7).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMeta {
    /// Group id.
    pub id: String,
    /// Server id of the coordinator.
    pub coordinator: String,
    /// 0 for a new group, then set on every membership or coordinator
    /// change to the Raft index of that change (as Liftbridge; always
    /// increasing); fences stale coordinators and assignments.
    pub epoch: u64,
    /// Members: consumer id → streams it reads.
    pub members: BTreeMap<String, Vec<String>>,
    /// Members that reported the coordinator unreachable: the epoch the
    /// reports are about and, per member, when it reported (ms). Reports
    /// of another epoch no longer count.
    #[serde(default)]
    pub coordinator_reports: (u64, BTreeMap<String, i64>),
}

impl GroupMeta {
    /// Partition assignments: consumer id → stream → partition ids.
    ///
    /// Deterministic (every node computes the same): streams in name order,
    /// partitions in id order, each to the subscribed member with the fewest
    /// partitions so far, ties broken by consumer id. Streams that no longer
    /// exist are skipped.
    pub fn assignments(
        &self,
        state: &MetadataState,
    ) -> BTreeMap<String, BTreeMap<String, Vec<i32>>> {
        let mut out: BTreeMap<String, BTreeMap<String, Vec<i32>>> = self
            .members
            .keys()
            .map(|c| (c.clone(), BTreeMap::new()))
            .collect();
        let mut load: BTreeMap<&str, usize> =
            self.members.keys().map(|c| (c.as_str(), 0)).collect();
        let streams: std::collections::BTreeSet<&String> =
            self.members.values().flatten().collect();
        for name in streams {
            let Some(stream) = state.stream(name) else {
                continue;
            };
            for p in &stream.partitions {
                let pick = self
                    .members
                    .iter()
                    .filter(|(_, s)| s.contains(name))
                    .map(|(c, _)| c.as_str())
                    .min_by_key(|c| (load.get(c).copied().unwrap_or(0), *c));
                if let Some(c) = pick {
                    *load.entry(c).or_default() += 1;
                    out.entry(c.to_string())
                        .or_default()
                        .entry(name.clone())
                        .or_default()
                        .push(p.id);
                }
            }
        }
        out
    }
}

/// Why a command was rejected at apply time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ApplyError {
    /// A stream of this name exists (gRPC ALREADY_EXISTS).
    #[error("stream {name:?} already exists")]
    AlreadyExists {
        /// Stream name.
        name: String,
    },
    /// No stream of this name (gRPC NOT_FOUND).
    #[error("stream {name:?} not found")]
    StreamNotFound {
        /// Stream name.
        name: String,
    },
    /// The stream has no such partition (gRPC NOT_FOUND).
    #[error("partition {partition} of stream {name:?} not found")]
    PartitionNotFound {
        /// Stream name.
        name: String,
        /// Partition id.
        partition: i32,
    },
    /// The command's arguments cannot be applied (gRPC INVALID_ARGUMENT).
    #[error("invalid: {reason}")]
    Invalid {
        /// Explanation.
        reason: String,
    },
    /// No consumer group of this id (gRPC NOT_FOUND).
    #[error("consumer group {group:?} not found")]
    GroupNotFound {
        /// Group id.
        group: String,
    },
    /// The consumer is not a member of the group (gRPC FAILED_PRECONDITION).
    #[error("consumer {consumer:?} is not a member of group {group:?}")]
    NotMember {
        /// Group id.
        group: String,
        /// Consumer id.
        consumer: String,
    },
    /// The request was based on an old group epoch (gRPC FAILED_PRECONDITION).
    #[error("group {group:?} epoch is {current}, request was for {requested}")]
    EpochMismatch {
        /// Group id.
        group: String,
        /// Current epoch.
        current: u64,
        /// Epoch in the request.
        requested: u64,
    },
}

/// Rejects an ISR change asked by a leader of another leader epoch.
fn check_leader_epoch(p: &PartitionMeta, asked: Option<u64>) -> Result<(), ApplyError> {
    match asked {
        Some(e) if e != p.leader_epoch => Err(ApplyError::Invalid {
            reason: format!(
                "stale ISR change from leader epoch {e} (current {})",
                p.leader_epoch
            ),
        }),
        _ => Ok(()),
    }
}

/// Result of applying one log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum MetaResponse {
    /// Applied; also the answer to membership and blank entries.
    #[default]
    Ok,
    /// Rejected; the state is unchanged.
    Rejected(ApplyError),
}

impl MetaResponse {
    /// `Ok(())` when applied, the apply error otherwise.
    pub fn into_result(self) -> Result<(), ApplyError> {
        match self {
            MetaResponse::Ok => Ok(()),
            MetaResponse::Rejected(e) => Err(e),
        }
    }
}

/// How many committed changes the metadata keeps for the activity stream:
/// enough for a new metadata leader to publish what its predecessor had
/// not; older ones are dropped (the stream then misses them).
pub const ACTIVITY_RETAINED: usize = 256;

/// A committed change reported on the activity stream (`__activity`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityRecord {
    /// Raft log index of the change (the event id).
    pub index: u64,
    /// The applied command (create/delete/pause/resume/readonly of a
    /// stream, join/leave of a consumer group).
    pub command: MetaCommand,
}

/// The whole replicated metadata, as of Raft log index `applied_index`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataState {
    /// Raft log index of the last applied entry (0 before any).
    pub applied_index: u64,
    /// Streams by name.
    pub streams: BTreeMap<String, StreamMeta>,
    /// Brokers by server id.
    pub brokers: BTreeMap<String, NodeInfo>,
    /// Consumer groups by id.
    #[serde(default)]
    pub groups: BTreeMap<String, GroupMeta>,
    /// The latest committed changes for the activity stream, oldest first,
    /// at most [`ACTIVITY_RETAINED`].
    #[serde(default)]
    pub activity: VecDeque<ActivityRecord>,
}

impl MetadataState {
    /// The stream of this name.
    pub fn stream(&self, name: &str) -> Option<&StreamMeta> {
        self.streams.get(name)
    }

    /// The consumer group of this id.
    pub fn group(&self, id: &str) -> Option<&GroupMeta> {
        self.groups.get(id)
    }

    /// Number of partitions (replicas) each broker holds, and how many it leads.
    pub fn broker_load(&self, id: &str) -> (usize, usize) {
        let mut replicas = 0;
        let mut leads = 0;
        for p in self.streams.values().flat_map(|s| s.partitions.iter()) {
            if p.replicas.iter().any(|r| r == id) {
                replicas += 1;
            }
            if p.leader == id {
                leads += 1;
            }
        }
        (replicas, leads)
    }

    /// The epoch a change of group `group_id` applied now gives it: the
    /// Raft index of the change, as Liftbridge sets it (server/fsm.go
    /// passes the log index to every group change), and at least one more
    /// than the current epoch (a state applied outside Raft, as in tests,
    /// has no index).
    fn next_group_epoch(&self, group_id: &str) -> u64 {
        let current = self.groups.get(group_id).map_or(0, |g| g.epoch);
        self.applied_index.max(current + 1)
    }

    /// The group `group_id` at `epoch`, for a move to `coordinator` (a
    /// registered broker): rejected when either is not so.
    fn group_at(
        &mut self,
        group_id: &str,
        epoch: u64,
        coordinator: &str,
    ) -> Result<&mut GroupMeta, ApplyError> {
        if !self.brokers.contains_key(coordinator) {
            return Err(ApplyError::Invalid {
                reason: format!("coordinator {coordinator:?} is not a known server"),
            });
        }
        let group = self
            .groups
            .get_mut(group_id)
            .ok_or_else(|| ApplyError::GroupNotFound {
                group: group_id.to_string(),
            })?;
        if group.epoch != epoch {
            return Err(ApplyError::EpochMismatch {
                group: group_id.to_string(),
                current: group.epoch,
                requested: epoch,
            });
        }
        Ok(group)
    }

    /// Applies one command. On rejection the state is unchanged.
    pub fn apply(&mut self, cmd: &MetaCommand) -> MetaResponse {
        match self.try_apply(cmd) {
            Ok(()) => {
                self.record_activity(cmd);
                MetaResponse::Ok
            }
            Err(e) => MetaResponse::Rejected(e),
        }
    }

    /// Keeps an applied change that the activity stream reports, under
    /// the current `applied_index`.
    fn record_activity(&mut self, cmd: &MetaCommand) {
        use MetaCommand as C;
        let reported = matches!(
            cmd,
            C::CreateStream { .. }
                | C::DeleteStream { .. }
                | C::PauseStream { .. }
                | C::ResumeStream { .. }
                | C::SetStreamReadonly { .. }
                | C::JoinConsumerGroup { .. }
                | C::LeaveConsumerGroup { .. }
        );
        if !reported {
            return;
        }
        if self.activity.len() >= ACTIVITY_RETAINED {
            self.activity.pop_front();
        }
        self.activity.push_back(ActivityRecord {
            index: self.applied_index,
            command: cmd.clone(),
        });
    }

    fn try_apply(&mut self, cmd: &MetaCommand) -> Result<(), ApplyError> {
        match cmd {
            MetaCommand::Barrier => Ok(()),
            MetaCommand::RegisterBroker(b) => {
                self.brokers.insert(b.id.clone(), b.clone());
                Ok(())
            }
            MetaCommand::JoinConsumerGroup {
                group_id,
                consumer_id,
                streams,
                coordinator,
            } => {
                if group_id.is_empty() || consumer_id.is_empty() || streams.is_empty() {
                    return Err(ApplyError::Invalid {
                        reason: "group id, consumer id and streams are required".into(),
                    });
                }
                if let Some(missing) = streams.iter().find(|s| !self.streams.contains_key(*s)) {
                    return Err(ApplyError::StreamNotFound {
                        name: missing.clone(),
                    });
                }
                if !self.groups.contains_key(group_id) && !self.brokers.contains_key(coordinator) {
                    return Err(ApplyError::Invalid {
                        reason: format!("coordinator {coordinator:?} is not a known server"),
                    });
                }
                let mut wanted = streams.clone();
                wanted.sort();
                wanted.dedup();
                let next = self.next_group_epoch(group_id);
                match self.groups.get_mut(group_id) {
                    // As Liftbridge: a new group starts at epoch 0 with its
                    // first member (server/metadata.go JoinConsumerGroup:
                    // "The coordinator epoch for a new group is always 0").
                    None => {
                        self.groups.insert(
                            group_id.clone(),
                            GroupMeta {
                                id: group_id.clone(),
                                coordinator: coordinator.clone(),
                                members: BTreeMap::from([(consumer_id.clone(), wanted)]),
                                ..Default::default()
                            },
                        );
                    }
                    Some(group) => {
                        if group.members.get(consumer_id) != Some(&wanted) {
                            group.members.insert(consumer_id.clone(), wanted);
                            group.epoch = next;
                        }
                    }
                }
                Ok(())
            }
            MetaCommand::LeaveConsumerGroup {
                group_id,
                consumer_id,
                expired: _,
            } => {
                let next = self.next_group_epoch(group_id);
                let group =
                    self.groups
                        .get_mut(group_id)
                        .ok_or_else(|| ApplyError::GroupNotFound {
                            group: group_id.clone(),
                        })?;
                if group.members.remove(consumer_id).is_none() {
                    return Err(ApplyError::NotMember {
                        group: group_id.clone(),
                        consumer: consumer_id.clone(),
                    });
                }
                group.epoch = next;
                if group.members.is_empty() {
                    self.groups.remove(group_id);
                }
                Ok(())
            }
            MetaCommand::ReportGroupCoordinator {
                group_id,
                consumer_id,
                coordinator,
                epoch,
                candidate,
                at_ms,
                timeout_ms,
            } => {
                let next = self.next_group_epoch(group_id);
                let group = self.group_at(group_id, *epoch, candidate)?;
                if group.coordinator != *coordinator {
                    return Err(ApplyError::EpochMismatch {
                        group: group_id.clone(),
                        current: group.epoch,
                        requested: *epoch,
                    });
                }
                if !group.members.contains_key(consumer_id) {
                    return Err(ApplyError::NotMember {
                        group: group_id.clone(),
                        consumer: consumer_id.clone(),
                    });
                }
                let (at_epoch, reports) = &mut group.coordinator_reports;
                if *at_epoch != group.epoch {
                    *at_epoch = group.epoch;
                    reports.clear();
                }
                let since = at_ms.saturating_sub(*timeout_ms);
                let members = &group.members;
                reports.retain(|c, t| *t >= since && members.contains_key(c));
                let t = reports.entry(consumer_id.clone()).or_insert(*at_ms);
                *t = (*t).max(*at_ms);
                if reports.len() * 2 > group.members.len() {
                    group.coordinator = candidate.clone();
                    group.epoch = next;
                    group.coordinator_reports = (group.epoch, BTreeMap::new());
                }
                Ok(())
            }
            MetaCommand::ChangeGroupCoordinator {
                group_id,
                coordinator,
                epoch,
            } => {
                let next = self.next_group_epoch(group_id);
                let group = self.group_at(group_id, *epoch, coordinator)?;
                group.coordinator = coordinator.clone();
                group.epoch = next;
                Ok(())
            }
            MetaCommand::ReplaceBroker { old, new } => {
                if self.brokers.remove(old).is_none() {
                    return Err(ApplyError::Invalid {
                        reason: format!("unknown broker {old:?}"),
                    });
                }
                let rename = |id: &mut String| {
                    if id == old {
                        *id = new.id.clone();
                    }
                };
                for g in self.groups.values_mut() {
                    rename(&mut g.coordinator);
                }
                for p in self
                    .streams
                    .values_mut()
                    .flat_map(|s| s.partitions.iter_mut())
                {
                    rename(&mut p.leader);
                    p.replicas.iter_mut().for_each(rename);
                    p.isr.iter_mut().for_each(rename);
                }
                self.brokers.insert(new.id.clone(), new.clone());
                Ok(())
            }
            MetaCommand::CreateStream {
                name,
                subject,
                group,
                replication_factor,
                partitions,
                config,
                creation_timestamp_ns,
            } => {
                if self.streams.contains_key(name) {
                    return Err(ApplyError::AlreadyExists { name: name.clone() });
                }
                let parts = self.place(*replication_factor, *partitions)?;
                self.streams.insert(
                    name.clone(),
                    StreamMeta {
                        name: name.clone(),
                        subject: subject.clone(),
                        group: group.clone(),
                        creation_timestamp_ns: *creation_timestamp_ns,
                        config: config.clone(),
                        partitions: parts,
                    },
                );
                Ok(())
            }
            MetaCommand::DeleteStream { name } => match self.streams.remove(name) {
                Some(_) => Ok(()),
                None => Err(ApplyError::StreamNotFound { name: name.clone() }),
            },
            MetaCommand::PauseStream {
                name,
                partitions,
                resume_all,
                timestamp_ns,
            } => {
                for p in self.select(name, partitions)? {
                    p.paused = true;
                    p.resume_all = *resume_all;
                    p.pause_timestamps.record(*timestamp_ns);
                }
                Ok(())
            }
            MetaCommand::ResumeStream { name, partitions } => {
                for p in self.select(name, partitions)? {
                    p.paused = false;
                    p.resume_all = false;
                }
                Ok(())
            }
            MetaCommand::SetStreamReadonly {
                name,
                partitions,
                readonly,
                timestamp_ns,
            } => {
                for p in self.select(name, partitions)? {
                    p.readonly = *readonly;
                    p.readonly_timestamps.record(*timestamp_ns);
                }
                Ok(())
            }
            MetaCommand::ChangeLeader {
                name,
                partition,
                leader,
            } => {
                let p = self.partition_mut(name, *partition)?;
                if !leader.is_empty() && !p.replicas.contains(leader) {
                    return Err(ApplyError::Invalid {
                        reason: format!("{leader:?} is not a replica"),
                    });
                }
                p.leader = leader.clone();
                p.epoch += 1;
                p.leader_epoch += 1;
                p.leader_reports.clear();
                Ok(())
            }
            MetaCommand::ShrinkIsr {
                name,
                partition,
                replica,
                leader_epoch,
            } => {
                let p = self.partition_mut(name, *partition)?;
                check_leader_epoch(p, *leader_epoch)?;
                if *replica == p.leader {
                    return Err(ApplyError::Invalid {
                        reason: format!("{replica:?} leads the partition and stays in the ISR"),
                    });
                }
                let before = p.isr.len();
                p.isr.retain(|r| r != replica);
                if p.isr.len() != before {
                    p.epoch += 1;
                    p.leader_reports.retain(|r| r != replica);
                }
                Ok(())
            }
            MetaCommand::ReportLeader {
                name,
                partition,
                leader,
                leader_epoch,
                reporter,
            } => {
                let p = self.partition_mut(name, *partition)?;
                if *leader != p.leader || *leader_epoch != p.leader_epoch {
                    return Err(ApplyError::Invalid {
                        reason: format!(
                            "stale report: leader is {:?} in leader epoch {}",
                            p.leader, p.leader_epoch
                        ),
                    });
                }
                if *reporter == p.leader || !p.isr.contains(reporter) {
                    return Err(ApplyError::Invalid {
                        reason: format!("{reporter:?} is not an ISR follower"),
                    });
                }
                if !p.leader_reports.contains(reporter) {
                    p.leader_reports.push(reporter.clone());
                }
                if p.leader_reports.len() >= p.reports_needed() {
                    let Some(new) = p.leader_reports.iter().min().cloned() else {
                        return Ok(());
                    };
                    let old = std::mem::replace(&mut p.leader, new);
                    p.isr.retain(|r| *r != old);
                    p.epoch += 1;
                    p.leader_epoch += 1;
                    p.leader_reports.clear();
                }
                Ok(())
            }
            MetaCommand::ExpandIsr {
                name,
                partition,
                replica,
                leader_epoch,
            } => {
                let p = self.partition_mut(name, *partition)?;
                check_leader_epoch(p, *leader_epoch)?;
                if !p.replicas.contains(replica) {
                    return Err(ApplyError::Invalid {
                        reason: format!("{replica:?} is not a replica"),
                    });
                }
                if !p.isr.contains(replica) {
                    p.isr.push(replica.clone());
                    p.epoch += 1;
                }
                Ok(())
            }
        }
    }

    /// Chooses replicas and leader of each new partition by broker load
    /// (`placement::place`); the ISR starts as every replica (all empty,
    /// so all in sync).
    fn place(
        &self,
        replication_factor: i32,
        partitions: i32,
    ) -> Result<Vec<PartitionMeta>, ApplyError> {
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(ApplyError::Invalid {
                reason: format!(
                    "partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}"
                ),
            });
        }
        let n = self.brokers.len();
        if n == 0 {
            return Err(ApplyError::Invalid {
                reason: "no brokers registered".into(),
            });
        }
        let rf = match replication_factor {
            -1 => n,
            rf if rf >= 1 && (rf as usize) <= n => rf as usize,
            rf => {
                return Err(ApplyError::Invalid {
                    reason: format!("invalid replication factor {rf} (cluster has {n} servers)"),
                })
            }
        };
        let load: BTreeMap<String, super::placement::Load> = self
            .brokers
            .keys()
            .map(|id| {
                let (replicas, leads) = self.broker_load(id);
                (id.clone(), super::placement::Load { replicas, leads })
            })
            .collect();
        let placed = super::placement::place(&load, rf, partitions as usize);
        Ok(placed
            .into_iter()
            .zip(0..partitions)
            .map(|(pl, id)| PartitionMeta {
                id,
                isr: pl.replicas.clone(),
                leader: pl.leader,
                replicas: pl.replicas,
                epoch: 0,
                leader_epoch: 0,
                ..Default::default()
            })
            .collect())
    }

    /// The selected partitions of a stream (all when `ids` is empty), after
    /// checking that every id exists, so that a bad id changes nothing.
    fn select(&mut self, name: &str, ids: &[i32]) -> Result<Vec<&mut PartitionMeta>, ApplyError> {
        let stream = self
            .streams
            .get_mut(name)
            .ok_or_else(|| ApplyError::StreamNotFound { name: name.into() })?;
        if let Some(bad) = ids
            .iter()
            .find(|id| usize::try_from(**id).map_or(true, |i| i >= stream.partitions.len()))
        {
            return Err(ApplyError::PartitionNotFound {
                name: name.into(),
                partition: *bad,
            });
        }
        Ok(stream
            .partitions
            .iter_mut()
            .filter(|p| ids.is_empty() || ids.contains(&p.id))
            .collect())
    }

    fn partition_mut(&mut self, name: &str, id: i32) -> Result<&mut PartitionMeta, ApplyError> {
        let stream = self
            .streams
            .get_mut(name)
            .ok_or_else(|| ApplyError::StreamNotFound { name: name.into() })?;
        usize::try_from(id)
            .ok()
            .and_then(|i| stream.partitions.get_mut(i))
            .ok_or_else(|| ApplyError::PartitionNotFound {
                name: name.into(),
                partition: id,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(id: &str) -> MetaCommand {
        MetaCommand::RegisterBroker(NodeInfo {
            id: id.into(),
            host: "localhost".into(),
            port: 9292,
            ..Default::default()
        })
    }

    fn create(name: &str, rf: i32, parts: i32) -> MetaCommand {
        MetaCommand::CreateStream {
            name: name.into(),
            subject: format!("{name}.subj"),
            group: String::new(),
            replication_factor: rf,
            partitions: parts,
            config: StreamConfig::default(),
            creation_timestamp_ns: 42,
        }
    }

    #[test]
    fn create_places_partitions_and_rejects_duplicates() {
        let mut s = MetadataState::default();
        assert_eq!(
            s.apply(&create("a", 1, 1)),
            MetaResponse::Rejected(ApplyError::Invalid {
                reason: "no brokers registered".into()
            })
        );
        s.apply(&broker("b1"));
        s.apply(&broker("b2"));
        assert_eq!(s.apply(&create("a", 1, 4)), MetaResponse::Ok);
        let st = s.stream("a").unwrap();
        assert_eq!(st.partitions.len(), 4);
        assert_eq!(st.creation_timestamp_ns, 42);
        // Single replicas alternate between the two brokers.
        let leaders: Vec<&str> = st.partitions.iter().map(|p| p.leader.as_str()).collect();
        assert_eq!(leaders, ["b1", "b2", "b1", "b2"]);
        assert_eq!(st.partition_subject(0), "a.subj");
        assert_eq!(st.partition_subject(3), "a.subj.3");
        assert_eq!(
            s.apply(&create("a", 1, 1)),
            MetaResponse::Rejected(ApplyError::AlreadyExists { name: "a".into() })
        );
        assert_eq!(s.apply(&create("all", -1, 1)), MetaResponse::Ok);
        assert_eq!(s.stream("all").unwrap().partitions[0].replicas.len(), 2);
        assert!(matches!(
            s.apply(&create("x", 3, 1)),
            MetaResponse::Rejected(ApplyError::Invalid { .. })
        ));
        assert!(matches!(
            s.apply(&create("x", 1, 0)),
            MetaResponse::Rejected(ApplyError::Invalid { .. })
        ));
        assert!(matches!(
            s.apply(&create("x", 1, i32::MAX)),
            MetaResponse::Rejected(ApplyError::Invalid { .. })
        ));
        assert_eq!(s.broker_load("b1"), (3, 3));
        assert_eq!(s.broker_load("b2"), (3, 2));
    }

    #[test]
    fn pause_resume_readonly_and_bad_partition_changes_nothing() {
        let mut s = MetadataState::default();
        s.apply(&broker("b1"));
        s.apply(&create("a", 1, 3));
        let pause = |parts: Vec<i32>, ts| MetaCommand::PauseStream {
            name: "a".into(),
            partitions: parts,
            resume_all: true,
            timestamp_ns: ts,
        };
        let before = s.clone();
        assert_eq!(
            s.apply(&pause(vec![0, 7], 5)),
            MetaResponse::Rejected(ApplyError::PartitionNotFound {
                name: "a".into(),
                partition: 7
            })
        );
        assert_eq!(s, before);
        assert_eq!(s.apply(&pause(vec![1], 5)), MetaResponse::Ok);
        assert_eq!(s.apply(&pause(vec![], 9)), MetaResponse::Ok);
        let p1 = &s.stream("a").unwrap().partitions[1];
        assert!(p1.paused && p1.resume_all);
        assert_eq!(
            p1.pause_timestamps,
            EventTimestamps {
                first_ns: 5,
                latest_ns: 9
            }
        );
        assert_eq!(
            s.stream("a").unwrap().partitions[0].pause_timestamps,
            EventTimestamps {
                first_ns: 9,
                latest_ns: 9
            }
        );
        s.apply(&MetaCommand::ResumeStream {
            name: "a".into(),
            partitions: vec![0],
        });
        let st = s.stream("a").unwrap();
        assert!(!st.partitions[0].paused && !st.partitions[0].resume_all);
        assert!(st.partitions[2].paused);
        s.apply(&MetaCommand::SetStreamReadonly {
            name: "a".into(),
            partitions: vec![2],
            readonly: true,
            timestamp_ns: 11,
        });
        let p2 = &s.stream("a").unwrap().partitions[2];
        assert!(p2.readonly);
        assert_eq!(p2.readonly_timestamps.first_ns, 11);
        assert!(!s.stream("a").unwrap().partitions[0].readonly);
        assert_eq!(
            s.apply(&MetaCommand::ResumeStream {
                name: "zz".into(),
                partitions: vec![]
            }),
            MetaResponse::Rejected(ApplyError::StreamNotFound { name: "zz".into() })
        );
    }

    #[test]
    fn consumer_groups_join_leave_coordinator_and_assignments() {
        let mut s = MetadataState::default();
        s.apply(&broker("b1"));
        s.apply(&broker("b2"));
        s.apply(&create("a", 1, 3));
        s.apply(&create("b", 1, 1));
        let join = |c: &str, streams: &[&str]| MetaCommand::JoinConsumerGroup {
            group_id: "g".into(),
            consumer_id: c.into(),
            streams: streams.iter().map(|s| s.to_string()).collect(),
            coordinator: "b1".into(),
        };
        assert_eq!(
            s.apply(&join("c1", &["nope"])),
            MetaResponse::Rejected(ApplyError::StreamNotFound {
                name: "nope".into()
            })
        );
        assert!(s.group("g").is_none());
        assert_eq!(s.apply(&join("c1", &["a", "b"])), MetaResponse::Ok);
        let g = s.group("g").unwrap();
        // A new group starts at epoch 0, as Liftbridge's.
        assert_eq!((g.coordinator.as_str(), g.epoch), ("b1", 0));
        // Rejoining with the same streams changes nothing.
        s.apply(&join("c1", &["b", "a"]));
        assert_eq!(s.group("g").unwrap().epoch, 0);
        s.apply(&join("c2", &["a"]));
        let g = s.group("g").unwrap().clone();
        assert_eq!(g.epoch, 1);
        let a = g.assignments(&s);
        // Stream a: p0 → c1 (tie, id order), p1 → c2, p2 → c1 (tie again);
        // stream b is read by c1 only.
        assert_eq!(a["c1"]["a"], vec![0, 2]);
        assert_eq!(a["c2"]["a"], vec![1]);
        assert_eq!(a["c1"]["b"], vec![0]);
        assert!(!a["c2"].contains_key("b"));
        // A stale coordinator change is fenced; a current one applies.
        let change = |epoch| MetaCommand::ChangeGroupCoordinator {
            group_id: "g".into(),
            coordinator: "b2".into(),
            epoch,
        };
        assert!(matches!(
            s.apply(&change(0)),
            MetaResponse::Rejected(ApplyError::EpochMismatch {
                current: 1,
                requested: 0,
                ..
            })
        ));
        assert_eq!(s.apply(&change(1)), MetaResponse::Ok);
        assert_eq!(s.group("g").unwrap().coordinator, "b2");
        // Coordinator failover needs a majority of the members reporting
        // within the timeout: with two members, both.
        let report = |c: &str, epoch: u64, at_ms: i64| MetaCommand::ReportGroupCoordinator {
            group_id: "g".into(),
            consumer_id: c.into(),
            coordinator: "b2".into(),
            epoch,
            candidate: "b1".into(),
            at_ms,
            timeout_ms: 1_000,
        };
        assert_eq!(s.apply(&report("c1", 2, 10_000)), MetaResponse::Ok);
        assert_eq!(s.apply(&report("c1", 2, 10_500)), MetaResponse::Ok);
        assert_eq!(
            (
                s.group("g").unwrap().coordinator.as_str(),
                s.group("g").unwrap().epoch
            ),
            ("b2", 2),
            "one member's reports are not a majority"
        );
        assert!(matches!(
            s.apply(&report("ghost", 2, 10_600)),
            MetaResponse::Rejected(ApplyError::NotMember { .. })
        ));
        assert!(matches!(
            s.apply(&report("c2", 1, 10_600)),
            MetaResponse::Rejected(ApplyError::EpochMismatch { .. })
        ));
        // c1's last report (10.5 s) is too old at 11.6 s: still one.
        assert_eq!(s.apply(&report("c2", 2, 11_600)), MetaResponse::Ok);
        assert_eq!(s.group("g").unwrap().coordinator, "b2");
        // c1 again within c2's window: a majority, the group moves.
        assert_eq!(s.apply(&report("c1", 2, 12_000)), MetaResponse::Ok);
        let g = s.group("g").unwrap();
        assert_eq!((g.coordinator.as_str(), g.epoch), ("b1", 3));
        assert!(g.coordinator_reports.1.is_empty());
        let back = |epoch| MetaCommand::ChangeGroupCoordinator {
            group_id: "g".into(),
            coordinator: "b2".into(),
            epoch,
        };
        assert_eq!(s.apply(&back(3)), MetaResponse::Ok);
        let leave = |c: &str| MetaCommand::LeaveConsumerGroup {
            group_id: "g".into(),
            consumer_id: c.into(),
            expired: false,
        };
        // Under Raft a change's epoch is its log index (as Liftbridge's).
        s.applied_index = 40;
        assert_eq!(s.apply(&join("c3", &["a"])), MetaResponse::Ok);
        assert_eq!(s.group("g").unwrap().epoch, 40);
        assert_eq!(s.apply(&leave("c3")), MetaResponse::Ok);
        assert_eq!(s.group("g").unwrap().epoch, 41, "at least one more");
        assert_eq!(s.apply(&leave("c1")), MetaResponse::Ok);
        assert!(matches!(
            s.apply(&leave("c1")),
            MetaResponse::Rejected(ApplyError::NotMember { .. })
        ));
        assert_eq!(
            s.group("g").unwrap().assignments(&s)["c2"]["a"],
            vec![0, 1, 2]
        );
        assert_eq!(s.apply(&leave("c2")), MetaResponse::Ok);
        assert!(s.group("g").is_none(), "an empty group is deleted");
        assert!(matches!(
            s.apply(&leave("c2")),
            MetaResponse::Rejected(ApplyError::GroupNotFound { .. })
        ));
    }

    #[test]
    fn replace_broker_renames_everywhere() {
        let mut s = MetadataState::default();
        s.apply(&broker("old"));
        s.apply(&create("a", 1, 2));
        let new = NodeInfo {
            id: "new".into(),
            ..Default::default()
        };
        let cmd = MetaCommand::ReplaceBroker {
            old: "old".into(),
            new: new.clone(),
        };
        assert_eq!(s.apply(&cmd), MetaResponse::Ok);
        assert!(!s.brokers.contains_key("old"));
        assert_eq!(s.brokers.get("new"), Some(&new));
        for p in &s.stream("a").unwrap().partitions {
            assert_eq!(
                (p.leader.as_str(), p.replicas.clone(), p.isr.clone()),
                ("new", vec!["new".to_string()], vec!["new".to_string()])
            );
            assert_eq!(p.epoch, 0);
        }
        assert!(matches!(
            s.apply(&cmd),
            MetaResponse::Rejected(ApplyError::Invalid { .. })
        ));
    }

    #[test]
    fn a_majority_of_isr_followers_replaces_the_leader() {
        let mut s = MetadataState::default();
        for b in ["b1", "b2", "b3"] {
            s.apply(&broker(b));
        }
        s.apply(&create("a", 3, 1));
        let p = s.stream("a").unwrap().partitions[0].clone();
        let report = |reporter: &str, leader: &str, epoch: u64| MetaCommand::ReportLeader {
            name: "a".into(),
            partition: 0,
            leader: leader.into(),
            leader_epoch: epoch,
            reporter: reporter.into(),
        };
        let followers: Vec<String> = p
            .replicas
            .iter()
            .filter(|r| **r != p.leader)
            .cloned()
            .collect();
        assert_eq!(p.reports_needed(), 2);
        // The leader cannot report itself; stale reports are refused.
        assert!(matches!(
            s.apply(&report(&p.leader, &p.leader, 0)),
            MetaResponse::Rejected(_)
        ));
        assert!(matches!(
            s.apply(&report(&followers[0], &p.leader, 9)),
            MetaResponse::Rejected(_)
        ));
        // One report of two needed changes nothing but the report list;
        // repeating it does not count twice.
        assert_eq!(
            s.apply(&report(&followers[1], &p.leader, 0)),
            MetaResponse::Ok
        );
        assert_eq!(
            s.apply(&report(&followers[1], &p.leader, 0)),
            MetaResponse::Ok
        );
        let q = &s.stream("a").unwrap().partitions[0];
        assert_eq!((q.leader.as_str(), q.leader_epoch), (p.leader.as_str(), 0));
        assert_eq!(q.leader_reports, vec![followers[1].clone()]);
        // The second report elects the smallest reporter and drops the old
        // leader from the ISR.
        assert_eq!(
            s.apply(&report(&followers[0], &p.leader, 0)),
            MetaResponse::Ok
        );
        let q = &s.stream("a").unwrap().partitions[0];
        let want = followers.iter().min().unwrap();
        assert_eq!(&q.leader, want);
        assert_eq!((q.leader_epoch, q.epoch), (1, 1));
        assert!(!q.isr.contains(&p.leader));
        assert!(q.leader_reports.is_empty());
        // With the ISR down to leader + one follower, one report suffices.
        let other = followers.iter().find(|f| *f != want).unwrap();
        assert_eq!(s.apply(&report(other, want, 1)), MetaResponse::Ok);
        let q = &s.stream("a").unwrap().partitions[0];
        assert_eq!((&q.leader, q.isr.len()), (other, 1));
        // A leader alone in its ISR is never replaced (no unclean election).
        assert!(matches!(
            s.apply(&report(want, other, 2)),
            MetaResponse::Rejected(_)
        ));
    }

    #[test]
    fn leader_and_isr_changes_bump_epochs() {
        let mut s = MetadataState::default();
        s.apply(&broker("b1"));
        s.apply(&broker("b2"));
        s.apply(&create("a", 2, 1));
        // A new partition's replicas are all empty, so all in sync.
        let p = &s.stream("a").unwrap().partitions[0];
        assert_eq!((p.isr.clone(), p.epoch), (p.replicas.clone(), 0));
        assert_eq!(p.replicas, ["b1", "b2"]);
        let shrink = MetaCommand::ShrinkIsr {
            name: "a".into(),
            partition: 0,
            replica: "b2".into(),
            leader_epoch: Some(0),
        };
        s.apply(&shrink);
        let p = &s.stream("a").unwrap().partitions[0];
        assert_eq!((p.isr.clone(), p.epoch), (vec!["b1".to_string()], 1));
        s.apply(&shrink); // no-op: already out
        assert_eq!(s.stream("a").unwrap().partitions[0].epoch, 1);
        // The leader never leaves its own ISR.
        assert!(matches!(
            s.apply(&MetaCommand::ShrinkIsr {
                name: "a".into(),
                partition: 0,
                replica: "b1".into(),
                leader_epoch: None,
            }),
            MetaResponse::Rejected(ApplyError::Invalid { .. })
        ));
        // A change asked in another leader epoch is stale.
        assert!(matches!(
            s.apply(&MetaCommand::ExpandIsr {
                name: "a".into(),
                partition: 0,
                replica: "b2".into(),
                leader_epoch: Some(5),
            }),
            MetaResponse::Rejected(ApplyError::Invalid { .. })
        ));
        s.apply(&MetaCommand::ExpandIsr {
            name: "a".into(),
            partition: 0,
            replica: "b2".into(),
            leader_epoch: Some(0),
        });
        let p = &s.stream("a").unwrap().partitions[0];
        assert_eq!((p.isr.len(), p.epoch), (2, 2));
        s.apply(&MetaCommand::ShrinkIsr {
            name: "a".into(),
            partition: 0,
            replica: "b2".into(),
            leader_epoch: None,
        });
        s.apply(&MetaCommand::ExpandIsr {
            name: "a".into(),
            partition: 0,
            replica: "b2".into(),
            leader_epoch: None,
        });
        s.apply(&MetaCommand::ChangeLeader {
            name: "a".into(),
            partition: 0,
            leader: "b2".into(),
        });
        let p = &s.stream("a").unwrap().partitions[0];
        assert_eq!((p.leader.as_str(), p.epoch, p.leader_epoch), ("b2", 5, 1));
        assert!(matches!(
            s.apply(&MetaCommand::ChangeLeader {
                name: "a".into(),
                partition: 0,
                leader: "b9".into()
            }),
            MetaResponse::Rejected(ApplyError::Invalid { .. })
        ));
        assert_eq!(
            s.apply(&MetaCommand::DeleteStream { name: "a".into() }),
            MetaResponse::Ok
        );
        assert_eq!(
            s.apply(&MetaCommand::DeleteStream { name: "a".into() }),
            MetaResponse::Rejected(ApplyError::StreamNotFound { name: "a".into() })
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_string)
    }
    fn server() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["s1", "s2", "s3", "s4"]).prop_map(str::to_string)
    }
    fn parts() -> impl Strategy<Value = Vec<i32>> {
        prop::collection::vec(0i32..4, 0..3)
    }

    fn command() -> impl Strategy<Value = MetaCommand> {
        prop_oneof![
            server().prop_map(|id| MetaCommand::RegisterBroker(NodeInfo {
                id,
                ..Default::default()
            })),
            (name(), -2i32..4, -1i32..4).prop_map(|(n, rf, p)| MetaCommand::CreateStream {
                subject: n.clone(),
                name: n,
                group: String::new(),
                replication_factor: rf,
                partitions: p,
                config: StreamConfig::default(),
                creation_timestamp_ns: 1,
            }),
            name().prop_map(|name| MetaCommand::DeleteStream { name }),
            (name(), parts(), any::<bool>(), 1i64..100).prop_map(
                |(name, partitions, resume_all, timestamp_ns)| {
                    MetaCommand::PauseStream {
                        name,
                        partitions,
                        resume_all,
                        timestamp_ns,
                    }
                }
            ),
            (name(), parts())
                .prop_map(|(name, partitions)| MetaCommand::ResumeStream { name, partitions }),
            (name(), parts(), any::<bool>(), 1i64..100).prop_map(
                |(name, partitions, readonly, timestamp_ns)| {
                    MetaCommand::SetStreamReadonly {
                        name,
                        partitions,
                        readonly,
                        timestamp_ns,
                    }
                }
            ),
            (name(), 0i32..4, server()).prop_map(|(name, partition, leader)| {
                MetaCommand::ChangeLeader {
                    name,
                    partition,
                    leader,
                }
            }),
            (name(), 0i32..4, server()).prop_map(|(name, partition, replica)| {
                MetaCommand::ShrinkIsr {
                    name,
                    partition,
                    replica,
                    leader_epoch: None,
                }
            }),
            (name(), 0i32..4, server()).prop_map(|(name, partition, replica)| {
                MetaCommand::ExpandIsr {
                    name,
                    partition,
                    replica,
                    leader_epoch: None,
                }
            }),
            (name(), 0i32..4, server(), 0u64..3, server()).prop_map(
                |(name, partition, leader, leader_epoch, reporter)| MetaCommand::ReportLeader {
                    name,
                    partition,
                    leader,
                    leader_epoch,
                    reporter,
                }
            ),
            (
                name(),
                server(),
                prop::collection::vec(name(), 0..3),
                server()
            )
                .prop_map(|(g, c, streams, coord)| {
                    MetaCommand::JoinConsumerGroup {
                        group_id: g,
                        consumer_id: c,
                        streams,
                        coordinator: coord,
                    }
                }),
            (name(), server(), any::<bool>()).prop_map(|(g, c, expired)| {
                MetaCommand::LeaveConsumerGroup {
                    group_id: g,
                    consumer_id: c,
                    expired,
                }
            }),
            (name(), server(), 0u64..4).prop_map(|(g, coordinator, epoch)| {
                MetaCommand::ChangeGroupCoordinator {
                    group_id: g,
                    coordinator,
                    epoch,
                }
            }),
        ]
    }

    fn check_invariants(s: &MetadataState) {
        for st in s.streams.values() {
            assert!(!st.partitions.is_empty());
            for (i, p) in st.partitions.iter().enumerate() {
                assert_eq!(p.id as usize, i, "partition ids are their index");
                assert!(
                    p.leader.is_empty() || p.replicas.contains(&p.leader),
                    "leader is a replica"
                );
                assert!(
                    p.isr.iter().all(|r| p.replicas.contains(r)),
                    "isr within replicas"
                );
                assert!(p.leader_epoch <= p.epoch, "leader changes bump both epochs");
                assert!(
                    p.leader_reports
                        .iter()
                        .all(|r| p.isr.contains(r) && *r != p.leader),
                    "only ISR followers report the leader"
                );
                assert!(
                    p.leader_reports.len() < p.reports_needed().max(1),
                    "enough reports replace the leader at once"
                );
                if p.paused {
                    assert_ne!(
                        p.pause_timestamps.latest_ns, 0,
                        "a paused partition has a pause time"
                    );
                }
                assert!(!p.resume_all || p.paused, "resume_all only while paused");
            }
        }
        for g in s.groups.values() {
            assert!(!g.members.is_empty(), "empty groups are deleted");
            // Every partition of every read stream is assigned exactly once.
            let assigned = g.assignments(s);
            let streams: std::collections::BTreeSet<&String> =
                g.members.values().flatten().collect();
            for name in streams {
                if let Some(st) = s.stream(name) {
                    let mut got: Vec<i32> = assigned
                        .values()
                        .filter_map(|m| m.get(name))
                        .flatten()
                        .copied()
                        .collect();
                    got.sort();
                    let want: Vec<i32> = (0..st.partitions.len() as i32).collect();
                    assert_eq!(got, want);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Random command sequences: rejected commands change nothing,
        /// invariants hold after every step, and the JSON snapshot of the
        /// state reads back equal (what a restart restores).
        #[test]
        fn apply_sequences_keep_invariants(cmds in prop::collection::vec(command(), 1..40)) {
            let mut s = MetadataState::default();
            for cmd in &cmds {
                let before = s.clone();
                match s.apply(cmd) {
                    MetaResponse::Ok => {}
                    MetaResponse::Rejected(_) => prop_assert_eq!(&s, &before),
                }
                check_invariants(&s);
            }
            let json = serde_json::to_vec(&s).unwrap();
            let back: MetadataState = serde_json::from_slice(&json).unwrap();
            prop_assert_eq!(back, s);
        }
    }
}
