//! Stream use cases: create, delete, pause, resume, readonly, and what a
//! partition looks like from here (list/describe).
//!
//! Each mutation is one metadata proposal; then, for the partitions this
//! node leads, it waits (up to `START_WAIT`) until the partition manager has
//! acted on it, so the next request sees the new state (a publish right
//! after creation or resume is recorded; a delete or pause has stopped
//! recording).

use std::sync::Arc;
use std::time::Duration;

use super::{
    check_stream_name, Service, ServiceError, ACTIVITY_STREAM, CURSORS_STREAM, START_WAIT,
};
use crate::cluster::{MetaCommand, MetadataState, StreamConfig, StreamMeta};
use crate::partition::Partition;
use crate::time::now_ns;

/// A stream to create.
#[derive(Debug, Clone, Default)]
pub struct CreateStream {
    /// Stream name (also a directory name).
    pub name: String,
    /// The NATS subject recorded.
    pub subject: String,
    /// Queue group of the stenographer subscription (empty = none).
    pub group: String,
    /// Replicas per partition: 0 = 1, -1 = all brokers.
    pub replication_factor: i32,
    /// Number of partitions: 0 = 1.
    pub partitions: i32,
    /// Per-stream overrides of the server defaults.
    pub config: StreamConfig,
}

/// What this node knows of a partition beyond the metadata: offsets and
/// reception times of its log when it runs here, -1/0 otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionStatus {
    /// Newest committed offset, -1 for none.
    pub high_watermark: i64,
    /// Newest stored offset, -1 for none.
    pub newest_offset: i64,
    /// First and latest reception time of a recorded message (ns, 0 = none).
    pub received: (i64, i64),
    /// Whether the partition runs here.
    pub local: bool,
}

impl Service {
    /// Creates a stream. `internal` allows the reserved names (`__cursors`
    /// at start-up).
    pub async fn create_stream(&self, r: CreateStream, internal: bool) -> Result<(), ServiceError> {
        if r.name.is_empty() {
            return Err(ServiceError::InvalidArgument(
                "No stream name provided".into(),
            ));
        }
        if !internal && (r.name == CURSORS_STREAM || r.name == ACTIVITY_STREAM) {
            return Err(ServiceError::InvalidArgument(format!(
                "Stream name {} is reserved",
                r.name
            )));
        }
        check_stream_name(&r.name)?;
        if r.subject.is_empty() || !crate::nats::subject::is_valid_subject(&r.subject) {
            return Err(ServiceError::InvalidArgument(format!(
                "Invalid subject {:?}",
                r.subject
            )));
        }
        let partitions = match r.partitions {
            0 => 1,
            n if n < 0 => {
                return Err(ServiceError::InvalidArgument(
                    "Invalid number of partitions".into(),
                ))
            }
            n => n,
        };
        let brokers = self.state().brokers.len().max(1) as i32;
        let rf = match r.replication_factor {
            0 => 1,
            -1 => -1,
            n if n < 1 || n > brokers => {
                return Err(ServiceError::InvalidArgument(format!(
                    "Invalid replication factor {n}: must be between 1 and {brokers}, or -1"
                )))
            }
            n => n,
        };
        if r.config.encryption == Some(true) && self.inner.parts.defaults().master_key.is_none() {
            return Err(ServiceError::FailedPrecondition(format!(
                "Failed on preconditions for stream's encryption handler: {} is not set",
                crate::crypt::MASTER_KEY_VAR
            )));
        }
        self.propose(MetaCommand::CreateStream {
            name: r.name.clone(),
            subject: r.subject,
            group: r.group,
            replication_factor: rf,
            partitions,
            config: r.config,
            creation_timestamp_ns: now_ns(),
        })
        .await?;
        // Best effort: wait for the partitions led here to start recording,
        // so a publish right after creation is not lost.
        let state = self.state();
        if let Some(s) = state.stream(&r.name) {
            let me = self.inner.parts.server_id().to_string();
            let mut refused = None;
            for p in s.partitions.iter().filter(|p| p.leader == me && !p.paused) {
                self.inner.parts.wait_for(&r.name, p.id, START_WAIT).await;
                if refused.is_none() {
                    refused = self
                        .inner
                        .parts
                        .failure(&r.name, p.id, s.creation_timestamp_ns)
                        .map(|f| (p.id, f));
                }
            }
            if let Some((id, f)) = refused {
                return Err(self.roll_back_create(&r.name, id, f).await);
            }
        }
        Ok(())
    }

    /// A partition of a stream just created could not create its files
    /// here (a full device, an I/O error): the stream is deleted again, so
    /// that nothing half-created stays listed, and the client gets the
    /// cause (RESOURCE_EXHAUSTED for a full device). If the deletion cannot
    /// be committed either, the partition stays listed as failed (with the
    /// reason) and is opened again at the next reconciliation or start.
    async fn roll_back_create(
        &self,
        name: &str,
        id: i32,
        f: crate::partition::PartitionFailure,
    ) -> ServiceError {
        let m = format!(
            "stream {name} was not created: partition {id} could not create its files: {}",
            f.reason
        );
        tracing::error!(stream = %name, partition = id, error = %f.reason, "creating a stream failed; deleting it again");
        if let Err(e) = self
            .propose(MetaCommand::DeleteStream {
                name: name.to_string(),
            })
            .await
        {
            tracing::error!(stream = %name, error = %e, "deleting a half-created stream");
        }
        if f.no_space {
            ServiceError::ResourceExhausted(m)
        } else {
            ServiceError::Internal(m)
        }
    }

    /// Deletes a stream and waits until its partitions stopped here.
    /// An empty name is a stream that does not exist (NOT_FOUND), as in
    /// Liftbridge.
    pub async fn delete_stream(&self, name: &str) -> Result<(), ServiceError> {
        if name == CURSORS_STREAM || name == ACTIVITY_STREAM {
            return Err(ServiceError::InvalidArgument(format!(
                "Stream name {name} is reserved"
            )));
        }
        let parts: Vec<i32> = self
            .state()
            .stream(name)
            .map(|s| s.partitions.iter().map(|p| p.id).collect())
            .unwrap_or_default();
        self.propose(MetaCommand::DeleteStream {
            name: name.to_string(),
        })
        .await?;
        self.bump_groups_consuming(name).await;
        for id in parts {
            self.inner.parts.wait_gone(name, id, START_WAIT).await;
        }
        Ok(())
    }

    /// The partitions a pause or readonly request applies to: the ones
    /// named, or all of the stream's when none are. NOT_FOUND for an unknown
    /// stream or partition, as Liftbridge's metadata.go maps its
    /// ErrStreamNotFound / ErrPartitionNotFound preconditions.
    fn target_partitions(&self, name: &str, partitions: &[i32]) -> Result<Vec<i32>, ServiceError> {
        let state = self.state();
        // Liftbridge's words: its API checks the stream itself when no
        // partition is named, its metadata precondition otherwise.
        let s = state.stream(name).ok_or_else(|| {
            ServiceError::NotFound(if partitions.is_empty() {
                "stream not found".into()
            } else {
                "stream does not exist".into()
            })
        })?;
        if partitions.iter().any(|p| s.partition(*p).is_none()) {
            return Err(ServiceError::NotFound("partition does not exist".into()));
        }
        Ok(if partitions.is_empty() {
            s.partitions.iter().map(|p| p.id).collect()
        } else {
            partitions.to_vec()
        })
    }

    /// Pauses partitions of a stream (empty = all) and waits until those led
    /// here stopped recording.
    pub async fn pause_stream(
        &self,
        name: &str,
        partitions: Vec<i32>,
        resume_all: bool,
    ) -> Result<(), ServiceError> {
        let ids = self.target_partitions(name, &partitions)?;
        self.propose(MetaCommand::PauseStream {
            name: name.to_string(),
            partitions,
            resume_all,
            timestamp_ns: now_ns(),
        })
        .await?;
        for id in ids {
            self.inner.parts.wait_gone(name, id, START_WAIT).await;
        }
        Ok(())
    }

    /// Resumes partitions of a stream (empty = all) and waits until those led
    /// here record again, so a message published right after is recorded.
    /// The admin API's resume; the gRPC API resumes on publish or subscribe.
    pub async fn resume_partitions(
        &self,
        name: &str,
        partitions: &[i32],
    ) -> Result<(), ServiceError> {
        let ids = self.target_partitions(name, partitions)?;
        self.propose(MetaCommand::ResumeStream {
            name: name.to_string(),
            partitions: partitions.to_vec(),
        })
        .await?;
        let state = self.state();
        let Some(s) = state.stream(name) else {
            return Ok(());
        };
        let me = self.inner.parts.server_id();
        for p in s
            .partitions
            .iter()
            .filter(|p| p.leader == me && !p.paused && ids.contains(&p.id))
        {
            self.inner.parts.wait_for(name, p.id, START_WAIT).await;
        }
        Ok(())
    }

    /// Sets or clears the readonly flag of partitions (empty = all) and
    /// waits until the running ones picked it up.
    pub async fn set_readonly(
        &self,
        name: &str,
        partitions: Vec<i32>,
        readonly: bool,
    ) -> Result<(), ServiceError> {
        let ids = self.target_partitions(name, &partitions)?;
        self.propose(MetaCommand::SetStreamReadonly {
            name: name.to_string(),
            partitions,
            readonly,
            timestamp_ns: now_ns(),
        })
        .await?;
        // Let the running partitions pick up the flag before answering, so
        // subscribers and the stenographer agree with the metadata.
        let deadline = tokio::time::Instant::now() + START_WAIT;
        for id in ids {
            while let Some(p) = self.inner.parts.get(name, id) {
                if p.is_readonly() == readonly || tokio::time::Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(())
    }

    /// All streams, ordered by name.
    pub fn list_streams(&self) -> Vec<StreamMeta> {
        self.state().streams.values().cloned().collect()
    }

    /// One stream by name.
    pub fn describe_stream(&self, name: &str) -> Option<StreamMeta> {
        self.state().stream(name).cloned()
    }

    /// What this node knows of partition `id` of `s` (see
    /// [`PartitionStatus`]); the running partition is found by name, as the
    /// gRPC metadata calls always did.
    pub fn partition_status(&self, s: &StreamMeta, id: i32) -> PartitionStatus {
        let paused = || {
            self.inner
                .parts
                .paused_offsets(&s.name, id, s.creation_timestamp_ns)
        };
        match self.inner.parts.get(&s.name, id) {
            Some(part) => status_of(&part),
            // A paused partition led here reports its closed log's offsets,
            // as Liftbridge does.
            None => match paused() {
                Some(o) => PartitionStatus {
                    high_watermark: o.high_watermark,
                    newest_offset: o.newest_offset,
                    received: o.received,
                    local: false,
                },
                None => PartitionStatus {
                    high_watermark: -1,
                    newest_offset: -1,
                    received: (0, 0),
                    local: false,
                },
            },
        }
    }

    /// The stream of a partition whose metadata a client asks of its
    /// leader: NOT_FOUND for an unknown partition, FAILED_PRECONDITION when
    /// another node leads it. A partition still opening here is waited for,
    /// so its offsets are reported once open.
    pub async fn describe_partition(
        &self,
        stream: &str,
        partition: i32,
    ) -> Result<StreamMeta, ServiceError> {
        let state: Arc<MetadataState> = self.state();
        let s = match state.stream(stream) {
            Some(s) if s.partition(partition).is_some() => s.clone(),
            _ => return Err(ServiceError::NotFound("partition not found".into())),
        };
        // A paused partition has no leader running (Liftbridge's steps
        // down on pause), so it is refused like one led elsewhere.
        let led_here = s
            .partition(partition)
            .is_some_and(|p| p.leader == self.inner.parts.server_id() && !p.paused);
        if !led_here {
            return Err(ServiceError::FailedPrecondition(
                "The request should be sent to partition leader".into(),
            ));
        }
        self.check_not_failed(&s, partition)?;
        self.inner
            .parts
            .wait_for(stream, partition, START_WAIT)
            .await;
        // It may have failed while it was being opened.
        self.check_not_failed(&s, partition)?;
        Ok(s)
    }
}

fn status_of(part: &Partition) -> PartitionStatus {
    PartitionStatus {
        high_watermark: part.high_watermark_or_minus_one(),
        newest_offset: part.log().newest_offset().map_or(-1, |o| o as i64),
        received: part.received_timestamps(),
        local: true,
    }
}
