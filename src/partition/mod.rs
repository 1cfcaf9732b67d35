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
