//! A partition's life on this node: the manager that follows the metadata,
//! the leader (stenographer + acks), replication (the leader's fetch
//! server, the follower loop, the ISR bookkeeping) and the readers.
//!
//! The `PartitionManager` watches the replicated metadata and reconciles:
//! every partition this node is a replica of that is not paused has an open
//! log under `<data>/streams/<stream>/<partition>/`; where this node leads,
//! a running stenographer (unless readonly) and fetch server; where it
//! follows, a follower task copying the leader's log. A new role or leader
//! epoch replaces the partition object (same files). Paused partitions are
//! closed (they record nothing); partitions of deleted streams are closed
//! and their files removed.
//! Reconciliation runs in one task, so partitions are started and stopped
//! by a single owner and never concurrently.
//!
//! A partition whose log cannot be opened, or whose log a reader finds
//! damaged, is *failed*: it is not served (publishes, subscribes and
//! FetchPartitionMetadata get FAILED_PRECONDITION with the reason; the
//! admin API shows `failed`, the metric `liftbridge_partition_failed` is 1)
//! and never recreated empty, so no offset is handed out twice. A lost or
//! corrupt log stays failed until the node restarts; other partitions are
//! not affected. The auto-pause tick (100 ms) also stops partitions a
//! reader marked damaged.
//!
//! Auto-pause also lives here: a partition idle for its `autoPauseTime`
//! (and without subscribers when so configured) is paused through a
//! metadata proposal, like an explicit PauseStream.

pub mod fetch_server;
pub mod follower;
pub mod held;
pub mod leader;
pub mod manager;
pub mod reader;
pub mod replication;
pub mod subjects;

pub use leader::{
    Behind, Closed, LocalAcks, Membership, Partition, PartitionSettings, Queued, ReplicaContext,
    Role, UnaryCall,
};
pub use manager::{
    DegradedPartition, ManagerTasks, PartitionDefaults, PartitionError, PartitionFailure,
    PartitionManager, PausedOffsets,
};
