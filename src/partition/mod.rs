//! A partition's life on this node: the manager that follows the metadata,
//! the leader (stenographer + acks) and the readers.
//!
//! The `PartitionManager` watches the replicated metadata and reconciles:
//! every partition this node leads that is not paused has an open log under
//! `<data>/streams/<stream>/<partition>/` and, unless readonly, a running
//! stenographer; paused partitions are closed (they record nothing);
//! partitions of deleted streams are closed and their files removed.
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

pub mod leader;
pub mod manager;
pub mod reader;

pub use leader::{Closed, Partition, PartitionSettings};
pub use manager::{
    ManagerTasks, PartitionDefaults, PartitionError, PartitionFailure, PartitionManager,
    PausedOffsets,
};
