//! The use-case layer: what a client can ask of this node, in the domain's
//! words, whatever the protocol it asked in.
//!
//! Both adapters call it: the gRPC service (`api::service`, proto → domain
//! → here → proto/Status) and the admin HTTP API (`admin`, JSON → domain →
//! here → JSON/status). So validation, error messages and side effects
//! (waiting for partitions to start or stop) are the same on both.
//!
//! - [`streams`]: create, delete, pause, resume, readonly, list, describe;
//! - [`publish`]: publishes through NATS (one path into the log: the
//!   partition leader's stenographer) and the wait for acks ([`acks`]);
//! - [`subscribe`]: checks and starts partition readers;
//! - [`consumers`]: cursors and consumer groups.
//!
//! Metadata changes go through [`Metadata::propose`] (checks happen at
//! apply time there). When this node is not the controller (the metadata
//! leader), `propose` forwards the command to it: this layer neither knows
//! nor cares where the controller is.
//!
//! Errors are [`ServiceError`]: the adapters map it to a gRPC status
//! (`api::service`) and to an HTTP status (`admin`), each in one place.
//! This layer never sees `proto::*`, `tonic` or HTTP types; below it are
//! `partition`, `cluster` (metadata), `wire`, `store` and `nats`.
//!
//! Tasks: one task per service that waits for the end of the ack inbox
//! (made on the first acked publish; acks are routed inline, where they
//! are delivered) and then releases its waiters; one member-timer
//! task per service (spawned with it, ends when the service is dropped)
//! that expires silent consumer-group members; the readers spawned by
//! [`Service::subscribe`] belong to their subscription.

pub mod acks;
pub mod activity;
pub mod consumers;
pub mod publish;
pub mod streams;
pub mod subscribe;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::cluster::{
    ApplyError, MetaCommand, MetaError, MetaResponse, Metadata, MetadataState, StreamMeta,
};
use crate::nats::handle::LocalClient;
use crate::partition::reader::ReadEnd;
use crate::partition::{Partition, PartitionManager};

pub use crate::cluster::internal::{ACTIVITY_STREAM, CURSORS_STREAM};
pub use consumers::{GroupAssignments, GroupJoined};
pub use publish::{Publish, PublishToSubject};
pub use streams::{CreateStream, PartitionStatus};
pub use subscribe::{ConsumerRef, SubscribeRequest, Subscription};

/// How long a resumed or newly created partition may take to start here.
const START_WAIT: Duration = Duration::from_secs(5);

/// A failed use case. The adapters turn it into a gRPC or HTTP status, each
/// in one place; the messages are the ones clients see.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The request is malformed (gRPC INVALID_ARGUMENT, HTTP 400).
    #[error("{0}")]
    InvalidArgument(String),
    /// No such stream, partition or group (NOT_FOUND, 404).
    #[error("{0}")]
    NotFound(String),
    /// The stream exists already (ALREADY_EXISTS, 409).
    #[error("{0}")]
    AlreadyExists(String),
    /// The state forbids the request: readonly, paused, not the leader or
    /// coordinator, stale epoch (FAILED_PRECONDITION, 409).
    #[error("{0}")]
    FailedPrecondition(String),
    /// A server limit was hit (RESOURCE_EXHAUSTED, 429).
    #[error("{0}")]
    ResourceExhausted(String),
    /// The partition stopped here before the request could finish, and
    /// another node (or a later try) may serve it (UNAVAILABLE, 503).
    #[error("{0}")]
    Unavailable(String),
    /// An acknowledgement did not come in time (DEADLINE_EXCEEDED, 504).
    #[error("{0}")]
    Timeout(String),
    /// An error Liftbridge reports without a specific code (UNKNOWN, 500).
    #[error("{0}")]
    Unknown(String),
    /// Anything else (INTERNAL, 500).
    #[error("{0}")]
    Internal(String),
    /// A subscription could not start at the requested position.
    #[error(transparent)]
    Read(#[from] ReadEnd),
}

/// Resolves with the value of `rx` once `until` holds for it; never if
/// its sender is gone first (what it watched can no longer happen).
pub(crate) async fn watch_until<T: Clone>(
    rx: &mut tokio::sync::watch::Receiver<T>,
    until: impl FnMut(&T) -> bool,
) -> T {
    let seen = rx.wait_for(until).await.map(|v| v.clone());
    match seen {
        Ok(v) => v,
        Err(_) => std::future::pending().await,
    }
}

impl From<MetaError> for ServiceError {
    fn from(e: MetaError) -> ServiceError {
        match e {
            MetaError::NoLeader => ServiceError::Internal("no known metadata leader".into()),
            other => ServiceError::Internal(other.to_string()),
        }
    }
}

impl From<ApplyError> for ServiceError {
    fn from(e: ApplyError) -> ServiceError {
        match e {
            ApplyError::AlreadyExists { .. } => {
                ServiceError::AlreadyExists("Stream already exists".into())
            }
            ApplyError::StreamNotFound { .. } => ServiceError::NotFound("No such stream".into()),
            ApplyError::PartitionNotFound { .. } => {
                ServiceError::NotFound("No such partition".into())
            }
            ApplyError::Invalid { reason } => ServiceError::InvalidArgument(reason),
            ApplyError::GroupNotFound { .. } => {
                ServiceError::NotFound("No such consumer group".into())
            }
            e @ (ApplyError::NotMember { .. } | ApplyError::EpochMismatch { .. }) => {
                ServiceError::FailedPrecondition(e.to_string())
            }
        }
    }
}

impl From<crate::nats::NatsError> for ServiceError {
    fn from(e: crate::nats::NatsError) -> ServiceError {
        match e {
            crate::nats::NatsError::InvalidSubject(s) => {
                ServiceError::InvalidArgument(format!("invalid subject {s:?}"))
            }
            crate::nats::NatsError::MaxPayload => {
                ServiceError::InvalidArgument("message too large".into())
            }
            other => ServiceError::Internal(other.to_string()),
        }
    }
}

/// Options of the service.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// `clustering.namespace`: prefix of server-generated ack inboxes.
    pub namespace: String,
    /// `cursors.stream.partitions` (0 = cursors disabled).
    pub cursor_partitions: i32,
    /// `groups.consumer.timeout`: members silent this long are evicted.
    pub consumer_timeout: Duration,
    /// `groups.coordinator.timeout`, told to consumers.
    pub coordinator_timeout: Duration,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            namespace: "liftbridge-default".into(),
            cursor_partitions: 0,
            consumer_timeout: Duration::from_secs(15),
            coordinator_timeout: Duration::from_secs(15),
        }
    }
}

struct Inner {
    meta: Metadata,
    parts: PartitionManager,
    nats: LocalClient,
    opts: ServiceOptions,
    acks: acks::AckRouter,
    /// Latest cursor offsets by cursor key, filled by SetCursor and by scans.
    cursors: Mutex<HashMap<String, (u64, i64)>>,
    /// Last time each (group, consumer) joined or fetched its assignments,
    /// on the coordinator (this node): the liveness that eviction checks.
    group_seen: Mutex<HashMap<(String, String), tokio::time::Instant>>,
    /// The group member subscribed to each partition here, by (stream,
    /// partition, group): one entry per live group subscription, removed
    /// when it ends.
    group_subs: Mutex<HashMap<(String, i32, String), subscribe::GroupSub>>,
    /// Ids telling a group subscription from the one that replaced it.
    next_sub_id: std::sync::atomic::AtomicU64,
}

/// The use cases of this node. Cheap to clone.
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

/// Longest stream name, in bytes: the name is the stream's directory name
/// (`<data dir>/streams/<name>`), and Linux file systems refuse names over
/// NAME_MAX (255 bytes) with ENAMETOOLONG.
pub const MAX_STREAM_NAME_BYTES: usize = 255;

/// Refuses, before anything is committed, a stream name that cannot be its
/// directory name: empty, `.`/`..`, a path separator, NUL or whitespace,
/// or longer than [`MAX_STREAM_NAME_BYTES`]. A name accepted here can
/// always be stored, so no stream is ever listed without a directory.
fn check_stream_name(name: &str) -> Result<(), ServiceError> {
    if name.len() > MAX_STREAM_NAME_BYTES {
        return Err(ServiceError::InvalidArgument(format!(
            "Stream name is {} bytes long, longer than the {MAX_STREAM_NAME_BYTES} bytes a directory name may have",
            name.len()
        )));
    }
    let valid = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !name.chars().any(char::is_whitespace);
    if !valid {
        return Err(ServiceError::InvalidArgument(format!(
            "Invalid stream name {name:?}: it must be usable as a directory name (no '/', '\\', NUL or whitespace, not '.' or '..')"
        )));
    }
    Ok(())
}

impl Service {
    /// Creates the service.
    pub fn new(
        meta: Metadata,
        parts: PartitionManager,
        nats: LocalClient,
        opts: ServiceOptions,
    ) -> Service {
        let acks = acks::AckRouter::new(nats.clone(), &opts.namespace);
        parts.set_local_acks(acks.local_acks());
        let svc = Service {
            inner: Arc::new(Inner {
                meta,
                parts,
                nats,
                opts,
                acks,
                cursors: Mutex::new(HashMap::new()),
                group_seen: Mutex::new(HashMap::new()),
                group_subs: Mutex::new(HashMap::new()),
                next_sub_id: std::sync::atomic::AtomicU64::new(1),
            }),
        };
        // Without a runtime (never the case in a node) members expire only
        // when their group is used.
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(consumers::member_timers(Arc::downgrade(&svc.inner)));
        }
        svc
    }

    /// The replicated metadata as this node last applied it.
    pub fn state(&self) -> Arc<MetadataState> {
        self.inner.meta.state()
    }

    /// This node's server id.
    pub fn server_id(&self) -> &str {
        self.inner.parts.server_id()
    }

    /// The partition served here, if it runs here (same stream incarnation).
    pub fn local_partition(&self, s: &StreamMeta, id: i32) -> Option<Arc<Partition>> {
        self.inner
            .parts
            .get(&s.name, id)
            .filter(|p| p.creation_ns == s.creation_timestamp_ns)
    }

    /// This node's copy of a partition in any role (same stream incarnation).
    pub fn local_replica(&self, s: &StreamMeta, id: i32) -> Option<Arc<Partition>> {
        self.inner
            .parts
            .get_replica(&s.name, id)
            .filter(|p| p.creation_ns == s.creation_timestamp_ns)
    }

    /// Whether the partition is under-replicated (see `PartitionDefaults`).
    pub fn under_replicated(
        &self,
        s: &StreamMeta,
        p: &crate::cluster::state::PartitionMeta,
    ) -> bool {
        self.inner.parts.defaults().under_replicated(s, p)
    }

    /// Publishes still waiting for an ack on the shared ack inbox.
    pub fn pending_acks(&self) -> usize {
        self.inner.acks.pending()
    }

    async fn propose(&self, cmd: MetaCommand) -> Result<(), ServiceError> {
        match self.inner.meta.propose(cmd).await? {
            MetaResponse::Ok => Ok(()),
            MetaResponse::Rejected(e) => Err(e.into()),
        }
    }

    fn stream_partition<'a>(
        &self,
        state: &'a MetadataState,
        stream: &str,
        partition: i32,
    ) -> Result<&'a StreamMeta, ServiceError> {
        let s = state
            .stream(stream)
            .ok_or_else(|| ServiceError::NotFound("No such stream".into()))?;
        if s.partition(partition).is_none() {
            return Err(ServiceError::NotFound("No such partition".into()));
        }
        Ok(s)
    }

    /// Refuses a partition led here whose log failed to open (lost or
    /// corrupt files): FAILED_PRECONDITION naming the cause, instead of a
    /// wait that times out or a log recreated empty.
    pub fn check_not_failed(&self, s: &StreamMeta, partition: i32) -> Result<(), ServiceError> {
        match self
            .inner
            .parts
            .failure(&s.name, partition, s.creation_timestamp_ns)
        {
            Some(f) => Err(ServiceError::FailedPrecondition(format!(
                "partition {partition} of stream {} failed: {}",
                s.name, f.reason
            ))),
            None => Ok(()),
        }
    }

    /// Resumes a paused partition (all partitions when the stream was paused
    /// with resumeAll) and waits for it to run here if this node leads it.
    async fn ensure_resumed(&self, s: &StreamMeta, partition: i32) -> Result<(), ServiceError> {
        let Some(p) = s.partition(partition) else {
            return Err(ServiceError::NotFound("No such partition".into()));
        };
        if p.paused {
            let partitions = if p.resume_all {
                Vec::new()
            } else {
                vec![partition]
            };
            self.propose(MetaCommand::ResumeStream {
                name: s.name.clone(),
                partitions,
            })
            .await?;
        }
        // Fast path: the partition already runs here.
        if p.leader == self.inner.parts.server_id()
            && (p.paused || self.inner.parts.get(&s.name, partition).is_none())
        {
            self.inner
                .parts
                .wait_for(&s.name, partition, START_WAIT)
                .await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_names() {
        assert!(check_stream_name("orders").is_ok());
        for bad in ["..", ".", "a/b", "a\\b", "a b", "", "a\0b"] {
            assert!(
                matches!(
                    check_stream_name(bad),
                    Err(ServiceError::InvalidArgument(_))
                ),
                "{bad:?}"
            );
        }
        // The limit is in bytes, as the file system counts.
        assert!(check_stream_name(&"x".repeat(MAX_STREAM_NAME_BYTES)).is_ok());
        assert!(check_stream_name(&"x".repeat(MAX_STREAM_NAME_BYTES + 1)).is_err());
        assert!(check_stream_name(&"é".repeat(128)).is_err(), "256 bytes");
        assert!(check_stream_name(&"x".repeat(10_000)).is_err());
    }
}
