//! The `proto.API` service implementation.
//!
//! Metadata operations go through `Metadata::propose` (linearizable checks
//! happen at apply time there). Publishes are wrapped in an envelope and
//! published into NATS on the partition subject, exactly as any client
//! would, so the stenographer is the one path into the log; the service then
//! waits on the ack inbox when the caller wants an ack. Subscriptions are
//! served by reader tasks on the running partition (see `partition::reader`).
//!
//! Errors: every failure is an `ApiError`, converted to a `tonic::Status` in
//! one place (`impl From<ApiError> for Status`), with Liftbridge's codes.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use prost::Message as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::convert;
use super::proto::{self, api_server::Api};
use crate::cluster::{
    ApplyError, MetaCommand, MetaError, MetaResponse, Metadata, MetadataState, StreamConfig,
    StreamMeta,
};
use crate::nats::handle::{LocalClient, LocalSubscription};
use crate::partition::reader::{self, ReadEnd};
use crate::partition::PartitionManager;
use crate::time::now_ns;
use crate::wire::envelope;

/// Name of the internal cursors stream.
pub const CURSORS_STREAM: &str = "__cursors";
/// Name of the internal activity stream.
pub const ACTIVITY_STREAM: &str = "__activity";
/// How long PublishAsync waits for the next in-flight ack after the client
/// half-closes (reset by every ack that arrives).
const ASYNC_ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long SetCursor waits for its ack.
const CURSOR_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a resumed or newly created partition may take to start here.
const START_WAIT: Duration = Duration::from_secs(5);

/// A failed API call; converted to a gRPC status in one place.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// INVALID_ARGUMENT.
    #[error("{0}")]
    InvalidArgument(String),
    /// NOT_FOUND.
    #[error("{0}")]
    NotFound(String),
    /// ALREADY_EXISTS.
    #[error("{0}")]
    AlreadyExists(String),
    /// FAILED_PRECONDITION.
    #[error("{0}")]
    FailedPrecondition(String),
    /// INTERNAL.
    #[error("{0}")]
    Internal(String),
    /// DEADLINE_EXCEEDED.
    #[error("{0}")]
    DeadlineExceeded(String),
    /// RESOURCE_EXHAUSTED.
    #[error("{0}")]
    ResourceExhausted(String),
    /// UNKNOWN (Liftbridge's code for errors without an explicit mapping).
    #[error("{0}")]
    Unknown(String),
    /// UNIMPLEMENTED.
    #[error("{0}")]
    Unimplemented(String),
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Status {
        match e {
            ApiError::InvalidArgument(m) => Status::invalid_argument(m),
            ApiError::NotFound(m) => Status::not_found(m),
            ApiError::AlreadyExists(m) => Status::already_exists(m),
            ApiError::FailedPrecondition(m) => Status::failed_precondition(m),
            ApiError::Internal(m) => Status::internal(m),
            ApiError::DeadlineExceeded(m) => Status::deadline_exceeded(m),
            ApiError::ResourceExhausted(m) => Status::resource_exhausted(m),
            ApiError::Unknown(m) => Status::unknown(m),
            ApiError::Unimplemented(m) => Status::unimplemented(m),
        }
    }
}

impl From<MetaError> for ApiError {
    fn from(e: MetaError) -> ApiError {
        match e {
            MetaError::NoLeader => ApiError::Internal("no known metadata leader".into()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<ApplyError> for ApiError {
    fn from(e: ApplyError) -> ApiError {
        match e {
            ApplyError::AlreadyExists { .. } => {
                ApiError::AlreadyExists("Stream already exists".into())
            }
            ApplyError::StreamNotFound { .. } => ApiError::NotFound("No such stream".into()),
            ApplyError::PartitionNotFound { .. } => ApiError::NotFound("No such partition".into()),
            ApplyError::Invalid { reason } => ApiError::InvalidArgument(reason),
            ApplyError::GroupNotFound { .. } => ApiError::NotFound("No such consumer group".into()),
            e @ (ApplyError::NotMember { .. } | ApplyError::EpochMismatch { .. }) => {
                ApiError::FailedPrecondition(e.to_string())
            }
        }
    }
}

impl From<ReadEnd> for Status {
    fn from(e: ReadEnd) -> Status {
        let m = e.to_string();
        match e {
            ReadEnd::StopReached | ReadEnd::Empty | ReadEnd::ReadonlyEnd => {
                Status::resource_exhausted(m)
            }
            ReadEnd::Deleted => Status::not_found(m),
            ReadEnd::Paused => Status::failed_precondition(m),
            ReadEnd::Shutdown => Status::unavailable(m),
            ReadEnd::Invalid(_) => Status::invalid_argument(m),
            ReadEnd::Store(_) => Status::internal(m),
        }
    }
}

impl From<crate::nats::NatsError> for ApiError {
    fn from(e: crate::nats::NatsError) -> ApiError {
        match e {
            crate::nats::NatsError::InvalidSubject(s) => {
                ApiError::InvalidArgument(format!("invalid subject {s:?}"))
            }
            crate::nats::NatsError::MaxPayload => {
                ApiError::InvalidArgument("message too large".into())
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// Options of the service.
#[derive(Debug, Clone)]
pub struct ApiOptions {
    /// `clustering.namespace`: prefix of server-generated ack inboxes.
    pub namespace: String,
    /// `cursors.stream.partitions` (0 = cursors disabled).
    pub cursor_partitions: i32,
    /// `groups.consumer.timeout`: members silent this long are evicted.
    pub consumer_timeout: Duration,
    /// `groups.coordinator.timeout`, told to consumers.
    pub coordinator_timeout: Duration,
}

impl Default for ApiOptions {
    fn default() -> Self {
        ApiOptions {
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
    opts: ApiOptions,
    /// Latest cursor offsets by cursor key, filled by SetCursor and by scans.
    cursors: Mutex<HashMap<String, i64>>,
    /// Last time each (group, consumer) joined or fetched its assignments,
    /// on the coordinator (this node): the liveness that eviction checks.
    group_seen: Mutex<HashMap<(String, String), tokio::time::Instant>>,
}

/// The `proto.API` service. Cheap to clone.
#[derive(Clone)]
pub struct ApiService {
    inner: Arc<Inner>,
}

/// Parses the `grpc-timeout` header ("<digits><unit>", unit one of
/// H M S m u n).
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (num, unit) = v.split_at(v.len() - 1);
    let n: u64 = num.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// How long to wait for an ack given the call's deadline: a little less
/// than the deadline, so the caller gets DEADLINE_EXCEEDED from the server
/// rather than a cancellation from its own timer.
fn deadline_of<T>(req: &Request<T>) -> Option<Duration> {
    let d = req
        .metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)?;
    Some(d.saturating_sub((d / 10).min(Duration::from_millis(50))))
}

/// Names that cannot be used as a directory name are rejected up front.
fn valid_stream_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !name.chars().any(char::is_whitespace)
}

type Ack = proto::Ack;

impl ApiService {
    /// Creates the service.
    pub fn new(
        meta: Metadata,
        parts: PartitionManager,
        nats: LocalClient,
        opts: ApiOptions,
    ) -> ApiService {
        ApiService {
            inner: Arc::new(Inner {
                meta,
                parts,
                nats,
                opts,
                cursors: Mutex::new(HashMap::new()),
                group_seen: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The partitions a pause or readonly request applies to: the ones
    /// named, or all of the stream's when none are. NOT_FOUND for an unknown
    /// stream or partition.
    fn target_partitions(&self, name: &str, partitions: &[i32]) -> Result<Vec<i32>, ApiError> {
        let state = self.state();
        let s = state
            .stream(name)
            .ok_or_else(|| ApiError::NotFound("No such stream".into()))?;
        for p in partitions {
            if s.partition(*p).is_none() {
                return Err(ApiError::NotFound(format!("No such partition {p}")));
            }
        }
        Ok(if partitions.is_empty() {
            s.partitions.iter().map(|p| p.id).collect()
        } else {
            partitions.to_vec()
        })
    }

    fn state(&self) -> Arc<MetadataState> {
        self.inner.meta.state()
    }

    fn ack_inbox(&self) -> String {
        let suffix = self.inner.nats.new_inbox();
        // new_inbox() gives "_INBOX.<id>"; keep only the unique part.
        let id = suffix.rsplit('.').next().unwrap_or(&suffix).to_string();
        format!("{}.ack.{}", self.inner.opts.namespace, id)
    }

    async fn propose(&self, cmd: MetaCommand) -> Result<(), ApiError> {
        match self.inner.meta.propose(cmd).await? {
            MetaResponse::Ok => Ok(()),
            MetaResponse::Rejected(e) => Err(e.into()),
        }
    }

    /// Creates a stream (also used at start-up for `__cursors`).
    pub async fn create_stream_internal(
        &self,
        r: proto::CreateStreamRequest,
        internal: bool,
    ) -> Result<(), ApiError> {
        if r.name.is_empty() {
            return Err(ApiError::InvalidArgument("No stream name provided".into()));
        }
        if !internal && (r.name == CURSORS_STREAM || r.name == ACTIVITY_STREAM) {
            return Err(ApiError::InvalidArgument(format!(
                "Stream name {} is reserved",
                r.name
            )));
        }
        if !valid_stream_name(&r.name) {
            return Err(ApiError::InvalidArgument(format!(
                "Invalid stream name {:?}",
                r.name
            )));
        }
        if r.subject.is_empty() || !crate::nats::subject::is_valid_subject(&r.subject) {
            return Err(ApiError::InvalidArgument(format!(
                "Invalid subject {:?}",
                r.subject
            )));
        }
        let partitions = match r.partitions {
            0 => 1,
            n if n < 0 => {
                return Err(ApiError::InvalidArgument(
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
                return Err(ApiError::InvalidArgument(format!(
                    "Invalid replication factor {n}: must be between 1 and {brokers}, or -1"
                )))
            }
            n => n,
        };
        if r.encryption.as_ref().is_some_and(|b| b.value) {
            return Err(ApiError::FailedPrecondition(
                "Encryption at rest is not available on this server".into(),
            ));
        }
        let config = StreamConfig {
            retention_max_bytes: r.retention_max_bytes.map(|v| v.value),
            retention_max_messages: r.retention_max_messages.map(|v| v.value),
            retention_max_age_ms: r.retention_max_age.map(|v| v.value),
            cleaner_interval_ms: r.cleaner_interval.map(|v| v.value),
            segment_max_bytes: r.segment_max_bytes.map(|v| v.value),
            segment_max_age_ms: r.segment_max_age.map(|v| v.value),
            compact_max_goroutines: r.compact_max_goroutines.map(|v| v.value),
            compact_enabled: r.compact_enabled.map(|v| v.value),
            auto_pause_time_ms: r.auto_pause_time.map(|v| v.value),
            auto_pause_disable_if_subscribers: r.auto_pause_disable_if_subscribers.map(|v| v.value),
            min_isr: r.min_isr.map(|v| v.value),
            optimistic_concurrency_control: r.optimistic_concurrency_control.map(|v| v.value),
            encryption: r.encryption.map(|v| v.value),
        };
        self.propose(MetaCommand::CreateStream {
            name: r.name.clone(),
            subject: r.subject.clone(),
            group: r.group.clone(),
            replication_factor: rf,
            partitions,
            config,
            creation_timestamp_ns: now_ns(),
        })
        .await?;
        // Best effort: wait for the partitions led here to start recording,
        // so a publish right after creation is not lost.
        let state = self.state();
        if let Some(s) = state.stream(&r.name) {
            let me = self.inner.parts.server_id().to_string();
            for p in s.partitions.iter().filter(|p| p.leader == me && !p.paused) {
                self.inner.parts.wait_for(&r.name, p.id, START_WAIT).await;
            }
        }
        Ok(())
    }

    fn stream_partition<'a>(
        &self,
        state: &'a MetadataState,
        stream: &str,
        partition: i32,
    ) -> Result<&'a StreamMeta, ApiError> {
        let s = state
            .stream(stream)
            .ok_or_else(|| ApiError::NotFound("No such stream".into()))?;
        if s.partition(partition).is_none() {
            return Err(ApiError::NotFound("No such partition".into()));
        }
        Ok(s)
    }

    /// Resumes partitions of a stream (empty = all) and waits until those led
    /// here record again, so a message published right after is recorded.
    /// The admin API's resume; the gRPC API resumes on publish or subscribe.
    pub async fn resume_partitions(&self, name: &str, partitions: &[i32]) -> Result<(), ApiError> {
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

    /// Resumes a paused partition (all partitions when the stream was paused
    /// with resumeAll) and waits for it to run here if this node leads it.
    async fn ensure_resumed(&self, s: &StreamMeta, partition: i32) -> Result<(), ApiError> {
        let Some(p) = s.partition(partition) else {
            return Err(ApiError::NotFound("No such partition".into()));
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

    /// The shared publish path: validate, resume, envelope, publish into
    /// NATS, and wait for the ack when `wait` is given.
    async fn publish_one(
        &self,
        r: proto::PublishRequest,
        wait: Option<Duration>,
    ) -> Result<Option<Ack>, ApiError> {
        if r.stream.is_empty() {
            return Err(ApiError::InvalidArgument("No stream provided".into()));
        }
        let state = self.state();
        let s = self.stream_partition(&state, &r.stream, r.partition)?;
        if s.partition(r.partition).is_some_and(|p| p.readonly) {
            return Err(ApiError::FailedPrecondition("Partition is readonly".into()));
        }
        let policy = proto::AckPolicy::try_from(r.ack_policy).unwrap_or(proto::AckPolicy::Leader);
        let occ = self.inner.parts.defaults().occ(s);
        if occ && policy == proto::AckPolicy::None {
            return Err(ApiError::InvalidArgument(
                "BAD_REQUEST: optimistic concurrency control requires an ack policy other than NONE".into(),
            ));
        }
        self.ensure_resumed(s, r.partition).await?;
        let subject = s.partition_subject(r.partition);
        let wait = wait.filter(|_| policy != proto::AckPolicy::None);
        let ack_inbox = if wait.is_some() && r.ack_inbox.is_empty() {
            self.ack_inbox()
        } else {
            r.ack_inbox.clone()
        };
        let msg = proto::Message {
            offset: r.expected_offset,
            key: r.key.into(),
            value: r.value.into(),
            headers: r.headers.into_iter().map(|(k, v)| (k, v.into())).collect(),
            ack_inbox: ack_inbox.clone(),
            correlation_id: r.correlation_id,
            ack_policy: r.ack_policy,
            ..Default::default()
        };
        self.publish_and_wait(&subject, msg, wait).await
    }

    async fn publish_and_wait(
        &self,
        subject: &str,
        msg: proto::Message,
        wait: Option<Duration>,
    ) -> Result<Option<Ack>, ApiError> {
        let payload = envelope::encode_message(&msg);
        let Some(wait) = wait else {
            self.inner.nats.publish(subject, None, None, payload)?;
            return Ok(None);
        };
        // Subscribe before publishing so the ack cannot be missed.
        let mut sub = self.inner.nats.subscribe(&msg.ack_inbox, None)?;
        self.inner.nats.publish(subject, None, None, payload)?;
        let got = tokio::time::timeout(wait, async {
            while let Some(m) = sub.next().await {
                if let Ok(ack) = envelope::decode_ack(&m.payload) {
                    return Some(ack);
                }
            }
            None
        })
        .await;
        match got {
            Ok(Some(ack)) => Ok(Some(ack)),
            Ok(None) => Err(ApiError::Internal("server shutting down".into())),
            Err(_) => Err(ApiError::DeadlineExceeded(
                "timed out waiting for ack".into(),
            )),
        }
    }

    fn partition_metadata(&self, s: &StreamMeta, id: i32) -> proto::PartitionMetadata {
        let Some(p) = s.partition(id) else {
            return proto::PartitionMetadata::default();
        };
        let (hw, newest, recv) = match self.inner.parts.get(&s.name, id) {
            Some(part) => {
                let hw = part.high_watermark().map_or(-1, |o| o as i64);
                let newest = part.log().newest_offset().map_or(-1, |o| o as i64);
                let (first, latest) = part.received_timestamps();
                (hw, newest, (first, latest))
            }
            None => (-1, -1, (0, 0)),
        };
        proto::PartitionMetadata {
            id,
            leader: p.leader.clone(),
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            high_watermark: hw,
            newest_offset: newest,
            paused: p.paused,
            readonly: p.readonly,
            messages_received_timestamps: Some(proto::PartitionEventTimestamps {
                first_timestamp: recv.0,
                latest_timestamp: recv.1,
            }),
            pause_timestamps: Some(proto::PartitionEventTimestamps {
                first_timestamp: p.pause_timestamps.first_ns,
                latest_timestamp: p.pause_timestamps.latest_ns,
            }),
            readonly_timestamps: Some(proto::PartitionEventTimestamps {
                first_timestamp: p.readonly_timestamps.first_ns,
                latest_timestamp: p.readonly_timestamps.latest_ns,
            }),
        }
    }

    fn stream_metadata(&self, s: &StreamMeta) -> proto::StreamMetadata {
        proto::StreamMetadata {
            name: s.name.clone(),
            subject: s.subject.clone(),
            error: proto::stream_metadata::Error::Ok as i32,
            partitions: s
                .partitions
                .iter()
                .map(|p| (p.id, self.partition_metadata(s, p.id)))
                .collect(),
            creation_timestamp: s.creation_timestamp_ns,
        }
    }

    /// Evicts members of `group` this coordinator has not heard from within
    /// the consumer timeout (checked whenever the group is used, so no
    /// background task is needed).
    async fn evict_expired(&self, group: &str) -> Result<(), ApiError> {
        let state = self.state();
        let Some(g) = state.group(group) else {
            return Ok(());
        };
        if g.coordinator != self.inner.parts.server_id() {
            return Ok(());
        }
        let now = tokio::time::Instant::now();
        let expired: Vec<String> = {
            let mut seen = self.inner.group_seen.lock();
            g.members
                .keys()
                .filter(|c| {
                    // A member never seen here (e.g. after a restart) starts
                    // its timeout now.
                    let t = *seen.entry((group.to_string(), (*c).clone())).or_insert(now);
                    now.duration_since(t) > self.inner.opts.consumer_timeout
                })
                .cloned()
                .collect()
        };
        for c in expired {
            self.inner
                .group_seen
                .lock()
                .remove(&(group.to_string(), c.clone()));
            match self
                .propose(MetaCommand::LeaveConsumerGroup {
                    group_id: group.to_string(),
                    consumer_id: c,
                    expired: true,
                })
                .await
            {
                Ok(()) | Err(ApiError::NotFound(_)) | Err(ApiError::FailedPrecondition(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn touch_member(&self, group: &str, consumer: &str) {
        self.inner.group_seen.lock().insert(
            (group.to_string(), consumer.to_string()),
            tokio::time::Instant::now(),
        );
    }

    fn cursor_key(cursor_id: &str, stream: &str, partition: i32) -> String {
        format!("{cursor_id},{stream},{partition}")
    }

    /// The `__cursors` partition holding `key`, checked to be led here.
    fn cursor_partition(&self, key: &str) -> Result<(StreamMeta, i32), ApiError> {
        let state = self.state();
        let s = state
            .stream(CURSORS_STREAM)
            .ok_or_else(|| ApiError::Internal("Cursors stream does not exist".into()))?
            .clone();
        let n = s.partitions.len().max(1) as u32;
        let id = (crc32fast::hash(key.as_bytes()) % n) as i32;
        let leader = s
            .partition(id)
            .map(|p| p.leader.clone())
            .unwrap_or_default();
        if leader != self.inner.parts.server_id() {
            return Err(ApiError::FailedPrecondition(
                "Server not cursor partition leader".into(),
            ));
        }
        Ok((s, id))
    }

    /// Scans a cursors partition for the latest value of `key`.
    async fn scan_cursor(&self, s: &StreamMeta, id: i32, key: &str) -> Result<i64, ApiError> {
        self.ensure_resumed(s, id).await?;
        let Some(p) = self.inner.parts.wait_for(&s.name, id, START_WAIT).await else {
            return Err(ApiError::Internal(
                "cursors partition is not available".into(),
            ));
        };
        let log = p.log();
        let mut next = log.oldest_offset().unwrap_or(0);
        let end = log.log_end_offset();
        let mut found = -1;
        while next < end {
            let recs = log
                .read(next, 1024, 4 << 20)
                .await
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            let Some(last) = recs.last() else { break };
            next = last.offset + 1;
            for r in recs {
                if r.key.as_deref() == Some(key.as_bytes()) {
                    if let Ok(c) = proto::Cursor::decode(r.value.as_ref()) {
                        found = c.offset;
                    }
                }
            }
        }
        Ok(found)
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Api for ApiService {
    async fn create_stream(
        &self,
        request: Request<proto::CreateStreamRequest>,
    ) -> Result<Response<proto::CreateStreamResponse>, Status> {
        self.create_stream_internal(request.into_inner(), false)
            .await?;
        Ok(Response::new(proto::CreateStreamResponse {}))
    }

    async fn delete_stream(
        &self,
        request: Request<proto::DeleteStreamRequest>,
    ) -> Result<Response<proto::DeleteStreamResponse>, Status> {
        let r = request.into_inner();
        if r.name.is_empty() {
            return Err(ApiError::InvalidArgument("No stream name provided".into()).into());
        }
        if r.name == CURSORS_STREAM || r.name == ACTIVITY_STREAM {
            return Err(
                ApiError::InvalidArgument(format!("Stream name {} is reserved", r.name)).into(),
            );
        }
        let parts: Vec<i32> = self
            .state()
            .stream(&r.name)
            .map(|s| s.partitions.iter().map(|p| p.id).collect())
            .unwrap_or_default();
        self.propose(MetaCommand::DeleteStream {
            name: r.name.clone(),
        })
        .await?;
        for id in parts {
            self.inner.parts.wait_gone(&r.name, id, START_WAIT).await;
        }
        Ok(Response::new(proto::DeleteStreamResponse {}))
    }

    async fn pause_stream(
        &self,
        request: Request<proto::PauseStreamRequest>,
    ) -> Result<Response<proto::PauseStreamResponse>, Status> {
        let r = request.into_inner();
        let ids = self.target_partitions(&r.name, &r.partitions)?;
        self.propose(MetaCommand::PauseStream {
            name: r.name.clone(),
            partitions: r.partitions,
            resume_all: r.resume_all,
            timestamp_ns: now_ns(),
        })
        .await?;
        for id in ids {
            self.inner.parts.wait_gone(&r.name, id, START_WAIT).await;
        }
        Ok(Response::new(proto::PauseStreamResponse {}))
    }

    async fn set_stream_readonly(
        &self,
        request: Request<proto::SetStreamReadonlyRequest>,
    ) -> Result<Response<proto::SetStreamReadonlyResponse>, Status> {
        let r = request.into_inner();
        let ids = self.target_partitions(&r.name, &r.partitions)?;
        self.propose(MetaCommand::SetStreamReadonly {
            name: r.name.clone(),
            partitions: r.partitions,
            readonly: r.readonly,
            timestamp_ns: now_ns(),
        })
        .await?;
        // Let the running partitions pick up the flag before answering, so
        // subscribers and the stenographer agree with the metadata.
        let deadline = tokio::time::Instant::now() + START_WAIT;
        for id in ids {
            while let Some(p) = self.inner.parts.get(&r.name, id) {
                if p.is_readonly() == r.readonly || tokio::time::Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(Response::new(proto::SetStreamReadonlyResponse {}))
    }

    type SubscribeStream = BoxStream<proto::Message>;

    async fn subscribe(
        &self,
        request: Request<proto::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let r = request.into_inner();
        let state = self.state();
        if let Some(c) = &r.consumer {
            // A group member may only read what is assigned to it, under the
            // current group epoch.
            let g = state
                .group(&c.group_id)
                .ok_or_else(|| ApiError::NotFound("No such consumer group".into()))?;
            if g.epoch != c.group_epoch {
                return Err(
                    ApiError::FailedPrecondition("Consumer group epoch is stale".into()).into(),
                );
            }
            let assigned = g
                .assignments(&state)
                .get(&c.consumer_id)
                .and_then(|a| a.get(&r.stream))
                .is_some_and(|ps| ps.contains(&r.partition));
            if !assigned {
                return Err(ApiError::FailedPrecondition(
                    "Partition not assigned to this consumer".into(),
                )
                .into());
            }
        }
        let s = match state.stream(&r.stream) {
            Some(s) if s.partition(r.partition).is_some() => s.clone(),
            _ => return Err(ApiError::NotFound("No such partition".into()).into()),
        };
        let pm = s.partition(r.partition).cloned().unwrap_or_default();
        if pm.leader != self.inner.parts.server_id() {
            return Err(ApiError::FailedPrecondition("Server not partition leader".into()).into());
        }
        if pm.paused {
            if !r.resume {
                return Err(ApiError::FailedPrecondition("Partition is paused".into()).into());
            }
            self.ensure_resumed(&s, r.partition).await?;
        }
        let p = self
            .inner
            .parts
            .wait_for(&r.stream, r.partition, START_WAIT)
            .await
            .ok_or_else(|| ApiError::FailedPrecondition("Server not partition leader".into()))?;
        let start = reader::resolve_start(&p, convert::start_position(&r))
            .await
            .map_err(Status::from)?;
        let mut stop = reader::resolve_stop(&p, convert::stop_position(&r))
            .await
            .map_err(Status::from)?;
        if stop.is_none() && p.is_readonly() {
            // A readonly partition ends at its newest message.
            stop = p.newest_committed();
            if stop.is_none() {
                return Err(ReadEnd::ReadonlyEnd.into());
            }
        }
        if !r.reverse {
            if let Some(st) = stop {
                if st < start {
                    return Err(ApiError::InvalidArgument(
                        "Stop position is before start position".into(),
                    )
                    .into());
                }
            }
        }
        // Each item is one store read (up to 512 messages): a few reads
        // buffered keep the stream busy while the reader fetches the next.
        let (tx, rx) = mpsc::channel(4);
        if r.reverse {
            tokio::spawn(reader::run_reverse(p, start, stop, tx));
        } else {
            tokio::spawn(reader::run(p, start, stop, tx));
        }
        let handshake = futures::stream::once(async { Ok(proto::Message::default()) });
        let (stream, partition): (Arc<str>, i32) = (r.stream.into(), r.partition);
        let body = ReceiverStream::new(rx).flat_map(move |item| {
            futures::stream::iter(batch_items(stream.clone(), partition, item))
        });
        Ok(Response::new(Box::pin(handshake.chain(body))))
    }

    async fn fetch_metadata(
        &self,
        request: Request<proto::FetchMetadataRequest>,
    ) -> Result<Response<proto::FetchMetadataResponse>, Status> {
        let r = request.into_inner();
        let state = self.state();
        let brokers = state
            .brokers
            .values()
            .map(|b| {
                let (pc, lc) = state.broker_load(&b.id);
                proto::Broker {
                    id: b.id.clone(),
                    host: b.host.clone(),
                    port: i32::from(b.port),
                    partition_count: pc as i32,
                    leader_count: lc as i32,
                }
            })
            .collect();
        let stream_metadata = if r.streams.is_empty() {
            state
                .streams
                .values()
                .map(|s| self.stream_metadata(s))
                .collect()
        } else {
            r.streams
                .iter()
                .map(|n| match state.stream(n) {
                    Some(s) => self.stream_metadata(s),
                    None => proto::StreamMetadata {
                        name: n.clone(),
                        error: proto::stream_metadata::Error::UnknownStream as i32,
                        ..Default::default()
                    },
                })
                .collect()
        };
        let group_metadata = r
            .groups
            .iter()
            .map(|g| match state.group(g) {
                Some(meta) => proto::ConsumerGroupMetadata {
                    group_id: g.clone(),
                    error: proto::consumer_group_metadata::Error::Ok as i32,
                    coordinator: meta.coordinator.clone(),
                    epoch: meta.epoch,
                },
                None => proto::ConsumerGroupMetadata {
                    group_id: g.clone(),
                    error: proto::consumer_group_metadata::Error::UnknownGroup as i32,
                    ..Default::default()
                },
            })
            .collect();
        Ok(Response::new(proto::FetchMetadataResponse {
            brokers,
            stream_metadata,
            group_metadata,
        }))
    }

    async fn fetch_partition_metadata(
        &self,
        request: Request<proto::FetchPartitionMetadataRequest>,
    ) -> Result<Response<proto::FetchPartitionMetadataResponse>, Status> {
        let r = request.into_inner();
        let state = self.state();
        let s = match state.stream(&r.stream) {
            Some(s) if s.partition(r.partition).is_some() => s,
            _ => return Err(ApiError::NotFound("partition not found".into()).into()),
        };
        let leader = s
            .partition(r.partition)
            .map(|p| p.leader.as_str())
            .unwrap_or_default();
        if leader != self.inner.parts.server_id() {
            return Err(ApiError::FailedPrecondition("Server not partition leader".into()).into());
        }
        if s.partition(r.partition).is_some_and(|p| !p.paused) {
            // A partition that is still opening reports its offsets once open.
            self.inner
                .parts
                .wait_for(&r.stream, r.partition, START_WAIT)
                .await;
        }
        Ok(Response::new(proto::FetchPartitionMetadataResponse {
            metadata: Some(self.partition_metadata(s, r.partition)),
        }))
    }

    async fn publish(
        &self,
        request: Request<proto::PublishRequest>,
    ) -> Result<Response<proto::PublishResponse>, Status> {
        let deadline = deadline_of(&request);
        let r = request.into_inner();
        let ack = self.publish_one(r, deadline).await?;
        if let Some(a) = &ack {
            match proto::ack::Error::try_from(a.ack_error).unwrap_or(proto::ack::Error::Unknown) {
                proto::ack::Error::Ok => {}
                proto::ack::Error::TooLarge => {
                    return Err(
                        ApiError::InvalidArgument("BAD_REQUEST: message too large".into()).into(),
                    )
                }
                proto::ack::Error::IncorrectOffset => {
                    return Err(ApiError::Unknown("incorrect expected offset".into()).into())
                }
                other => return Err(ApiError::Internal(format!("ack error {other:?}")).into()),
            }
        }
        Ok(Response::new(proto::PublishResponse {
            ack,
            ..Default::default()
        }))
    }

    type PublishAsyncStream = BoxStream<proto::PublishResponse>;

    async fn publish_async(
        &self,
        request: Request<Streaming<proto::PublishRequest>>,
    ) -> Result<Response<Self::PublishAsyncStream>, Status> {
        let mut input = request.into_inner();
        let inbox = self.ack_inbox();
        let acks = self
            .inner
            .nats
            .subscribe(&inbox, None)
            .map_err(ApiError::from)?;
        let (tx, rx) = mpsc::channel::<Result<proto::PublishResponse, Status>>(1024);
        let me = self.clone();
        tokio::spawn(async move { me.async_session(&mut input, acks, inbox, tx).await });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn publish_to_subject(
        &self,
        request: Request<proto::PublishToSubjectRequest>,
    ) -> Result<Response<proto::PublishToSubjectResponse>, Status> {
        let deadline = deadline_of(&request);
        let r = request.into_inner();
        if r.subject.is_empty() || !crate::nats::subject::is_valid_literal_subject(&r.subject) {
            return Err(ApiError::InvalidArgument("Invalid subject".into()).into());
        }
        let policy = proto::AckPolicy::try_from(r.ack_policy).unwrap_or(proto::AckPolicy::Leader);
        let wait = deadline.filter(|_| policy != proto::AckPolicy::None);
        let ack_inbox = if wait.is_some() && r.ack_inbox.is_empty() {
            self.ack_inbox()
        } else {
            r.ack_inbox
        };
        let msg = proto::Message {
            offset: -1,
            key: r.key.into(),
            value: r.value.into(),
            headers: r.headers.into_iter().map(|(k, v)| (k, v.into())).collect(),
            ack_inbox,
            correlation_id: r.correlation_id,
            ack_policy: r.ack_policy,
            ..Default::default()
        };
        let ack = self.publish_and_wait(&r.subject, msg, wait).await?;
        Ok(Response::new(proto::PublishToSubjectResponse { ack }))
    }

    async fn set_cursor(
        &self,
        request: Request<proto::SetCursorRequest>,
    ) -> Result<Response<proto::SetCursorResponse>, Status> {
        let r = request.into_inner();
        if r.stream.is_empty() {
            return Err(ApiError::InvalidArgument("No stream provided".into()).into());
        }
        if r.cursor_id.is_empty() {
            return Err(ApiError::InvalidArgument("No cursor id provided".into()).into());
        }
        let key = Self::cursor_key(&r.cursor_id, &r.stream, r.partition);
        let (_s, id) = self.cursor_partition(&key)?;
        let cursor = proto::Cursor {
            stream: r.stream,
            partition: r.partition,
            cursor_id: r.cursor_id,
            offset: r.offset,
        };
        let req = proto::PublishRequest {
            key: key.clone().into_bytes(),
            value: cursor.encode_to_vec(),
            stream: CURSORS_STREAM.into(),
            partition: id,
            ack_policy: proto::AckPolicy::All as i32,
            expected_offset: -1,
            ..Default::default()
        };
        let ack = self.publish_one(req, Some(CURSOR_TIMEOUT)).await?;
        if ack.is_some_and(|a| a.ack_error != proto::ack::Error::Ok as i32) {
            return Err(ApiError::Internal("failed to store cursor".into()).into());
        }
        self.inner.cursors.lock().insert(key, r.offset);
        Ok(Response::new(proto::SetCursorResponse {}))
    }

    async fn fetch_cursor(
        &self,
        request: Request<proto::FetchCursorRequest>,
    ) -> Result<Response<proto::FetchCursorResponse>, Status> {
        let r = request.into_inner();
        if r.stream.is_empty() {
            return Err(ApiError::InvalidArgument("No stream provided".into()).into());
        }
        if r.cursor_id.is_empty() {
            return Err(ApiError::InvalidArgument("No cursor id provided".into()).into());
        }
        let key = Self::cursor_key(&r.cursor_id, &r.stream, r.partition);
        let (s, id) = self.cursor_partition(&key)?;
        let cached = self.inner.cursors.lock().get(&key).copied();
        let offset = match cached {
            Some(o) => o,
            None => {
                let o = self.scan_cursor(&s, id, &key).await?;
                if o >= 0 {
                    self.inner.cursors.lock().insert(key, o);
                }
                o
            }
        };
        Ok(Response::new(proto::FetchCursorResponse { offset }))
    }

    async fn join_consumer_group(
        &self,
        request: Request<proto::JoinConsumerGroupRequest>,
    ) -> Result<Response<proto::JoinConsumerGroupResponse>, Status> {
        let r = request.into_inner();
        if r.group_id.is_empty() || r.consumer_id.is_empty() || r.streams.is_empty() {
            return Err(ApiError::InvalidArgument(
                "group id, consumer id and streams are required".into(),
            )
            .into());
        }
        self.evict_expired(&r.group_id).await?;
        self.propose(MetaCommand::JoinConsumerGroup {
            group_id: r.group_id.clone(),
            consumer_id: r.consumer_id.clone(),
            streams: r.streams,
            coordinator: self.inner.parts.server_id().to_string(),
        })
        .await?;
        self.touch_member(&r.group_id, &r.consumer_id);
        let state = self.state();
        let g = state
            .group(&r.group_id)
            .ok_or_else(|| ApiError::Internal("group vanished after join".into()))?;
        Ok(Response::new(proto::JoinConsumerGroupResponse {
            coordinator: g.coordinator.clone(),
            epoch: g.epoch,
            consumer_timeout: self.inner.opts.consumer_timeout.as_nanos() as i64,
            coordinator_timeout: self.inner.opts.coordinator_timeout.as_nanos() as i64,
        }))
    }

    async fn leave_consumer_group(
        &self,
        request: Request<proto::LeaveConsumerGroupRequest>,
    ) -> Result<Response<proto::LeaveConsumerGroupResponse>, Status> {
        let r = request.into_inner();
        if r.group_id.is_empty() || r.consumer_id.is_empty() {
            return Err(
                ApiError::InvalidArgument("group id and consumer id are required".into()).into(),
            );
        }
        self.propose(MetaCommand::LeaveConsumerGroup {
            group_id: r.group_id.clone(),
            consumer_id: r.consumer_id.clone(),
            expired: false,
        })
        .await?;
        self.inner
            .group_seen
            .lock()
            .remove(&(r.group_id, r.consumer_id));
        Ok(Response::new(proto::LeaveConsumerGroupResponse {}))
    }

    async fn fetch_consumer_group_assignments(
        &self,
        request: Request<proto::FetchConsumerGroupAssignmentsRequest>,
    ) -> Result<Response<proto::FetchConsumerGroupAssignmentsResponse>, Status> {
        let r = request.into_inner();
        self.evict_expired(&r.group_id).await?;
        let state = self.state();
        let g = state
            .group(&r.group_id)
            .ok_or_else(|| ApiError::NotFound("No such consumer group".into()))?;
        if !g.members.contains_key(&r.consumer_id) {
            return Err(ApiError::FailedPrecondition(
                "Consumer is not a member of the group".into(),
            )
            .into());
        }
        if g.coordinator != self.inner.parts.server_id() {
            return Err(ApiError::FailedPrecondition("Server not group coordinator".into()).into());
        }
        if g.epoch != r.epoch {
            return Err(ApiError::FailedPrecondition(format!(
                "Group epoch is {}, request was for {}",
                g.epoch, r.epoch
            ))
            .into());
        }
        self.touch_member(&r.group_id, &r.consumer_id);
        let assignments = g
            .assignments(&state)
            .remove(&r.consumer_id)
            .unwrap_or_default()
            .into_iter()
            .map(|(stream, partitions)| proto::PartitionAssignment { stream, partitions })
            .collect();
        Ok(Response::new(
            proto::FetchConsumerGroupAssignmentsResponse {
                epoch: g.epoch,
                assignments,
            },
        ))
    }

    async fn report_consumer_group_coordinator(
        &self,
        request: Request<proto::ReportConsumerGroupCoordinatorRequest>,
    ) -> Result<Response<proto::ReportConsumerGroupCoordinatorResponse>, Status> {
        let r = request.into_inner();
        let state = self.state();
        let g = state
            .group(&r.group_id)
            .ok_or_else(|| ApiError::NotFound("No such consumer group".into()))?;
        if !g.members.contains_key(&r.consumer_id) {
            return Err(ApiError::FailedPrecondition(
                "Consumer is not a member of the group".into(),
            )
            .into());
        }
        // A report about a coordinator or epoch that is no longer current
        // is stale; otherwise, with this node the only possible
        // coordinator, the group moves to this node (bumping the epoch so
        // consumers refetch their assignments).
        if g.coordinator == r.coordinator && g.epoch == r.epoch {
            self.propose(MetaCommand::ChangeGroupCoordinator {
                group_id: r.group_id.clone(),
                coordinator: self.inner.parts.server_id().to_string(),
                epoch: r.epoch,
            })
            .await?;
        }
        Ok(Response::new(
            proto::ReportConsumerGroupCoordinatorResponse {},
        ))
    }
}

/// Subscription items as tonic wants them (its stream item type is fixed,
/// hence the large error variant).
#[allow(clippy::result_large_err)]
/// The stream items of one reader batch, or the status that ends the stream.
fn batch_items(
    stream: Arc<str>,
    partition: i32,
    item: Result<reader::Batch, ReadEnd>,
) -> impl Iterator<Item = Result<proto::Message, Status>> {
    let (batch, end) = match item {
        Ok(b) => (b, None),
        Err(e) => (Vec::new(), Some(Status::from(e))),
    };
    batch
        .into_iter()
        .map(move |r| Ok(convert::record_to_message(&stream, partition, r)))
        .chain(end.map(Err))
}

fn async_error(
    code: proto::publish_async_error::Code,
    correlation_id: String,
    message: String,
) -> proto::PublishResponse {
    proto::PublishResponse {
        // Older clients expect an (empty) ack next to the error.
        ack: Some(proto::Ack::default()),
        async_error: Some(proto::PublishAsyncError {
            code: code as i32,
            message,
        }),
        correlation_id,
    }
}

fn api_error_code(e: &ApiError) -> proto::publish_async_error::Code {
    use proto::publish_async_error::Code;
    match e {
        ApiError::InvalidArgument(_) => Code::BadRequest,
        ApiError::NotFound(_) => Code::NotFound,
        ApiError::FailedPrecondition(_) => Code::Readonly,
        ApiError::Unknown(_) => Code::Unknown,
        _ => Code::Internal,
    }
}

impl ApiService {
    /// One PublishAsync session: publishes each request with the session's
    /// ack inbox and forwards acks (or async errors) in arrival order.
    /// One PublishAsync stream: this task publishes the requests; a second
    /// task turns acks into responses, so the two directions of the stream
    /// progress in parallel. Once the input ends, the ack task waits for the
    /// acks still owed (the budget runs from the last progress).
    async fn async_session(
        &self,
        input: &mut Streaming<proto::PublishRequest>,
        acks: LocalSubscription,
        inbox: String,
        tx: mpsc::Sender<Result<proto::PublishResponse, Status>>,
    ) {
        // Acks owed for requests published so far; `None` while the input
        // is still open.
        let (owed_tx, owed_rx) = tokio::sync::watch::channel::<Option<u64>>(None);
        let acker = tokio::spawn(forward_acks(acks, owed_rx, tx.clone()));
        let mut published: u64 = 0;
        // The input ends with the client half-closing it (or failing).
        while let Ok(Some(mut r)) = input.message().await {
            let corr = r.correlation_id.clone();
            let wants_ack = r.ack_policy != proto::AckPolicy::None as i32;
            if wants_ack {
                r.ack_inbox = inbox.clone();
            }
            match self.publish_one(r, None).await {
                Ok(_) => {
                    if wants_ack {
                        published += 1;
                    }
                }
                Err(e) => {
                    let resp = async_error(api_error_code(&e), corr, e.to_string());
                    if tx.send(Ok(resp)).await.is_err() {
                        break;
                    }
                }
            }
        }
        owed_tx.send_replace(Some(published));
        // A join error would mean the ack task panicked: nothing to clean up.
        let _ = acker.await;
    }
}

/// The ack half of a PublishAsync stream: every ack on the session's inbox
/// becomes a response, until the input has ended and every owed ack came
/// (or none came for [`ASYNC_ACK_TIMEOUT`]).
async fn forward_acks(
    mut acks: LocalSubscription,
    mut owed: tokio::sync::watch::Receiver<Option<u64>>,
    tx: mpsc::Sender<Result<proto::PublishResponse, Status>>,
) {
    let mut acked: u64 = 0;
    let mut draining = false;
    let drain_until = tokio::time::sleep(Duration::from_secs(3600));
    tokio::pin!(drain_until);
    loop {
        let total = *owed.borrow_and_update();
        if total.is_some_and(|t| acked >= t) {
            break;
        }
        if total.is_some() && !draining {
            draining = true;
            drain_until
                .as_mut()
                .reset(tokio::time::Instant::now() + ASYNC_ACK_TIMEOUT);
        }
        tokio::select! {
            r = owed.changed(), if total.is_none() => {
                if r.is_err() {
                    // The publishing half is gone without a total.
                    break;
                }
            }
            m = acks.next() => {
                let Some(m) = m else { break };
                let Ok(ack) = envelope::decode_ack(&m.payload) else { continue };
                acked += 1;
                if total.is_some() {
                    drain_until.as_mut().reset(tokio::time::Instant::now() + ASYNC_ACK_TIMEOUT);
                }
                let corr = ack.correlation_id.clone();
                use proto::publish_async_error::Code;
                let resp = match proto::ack::Error::try_from(ack.ack_error).unwrap_or(proto::ack::Error::Unknown) {
                    proto::ack::Error::Ok => proto::PublishResponse { ack: Some(ack), async_error: None, correlation_id: corr },
                    proto::ack::Error::IncorrectOffset => async_error(Code::IncorrectOffset, corr, "incorrect expected offset".into()),
                    proto::ack::Error::TooLarge => async_error(Code::BadRequest, corr, "message too large".into()),
                    proto::ack::Error::Encryption => async_error(Code::EncryptionFailed, corr, "encryption failed".into()),
                    proto::ack::Error::Unknown => async_error(Code::Unknown, corr, "unknown error".into()),
                };
                if tx.send(Ok(resp)).await.is_err() {
                    return;
                }
            }
            _ = &mut drain_until, if total.is_some() => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_units() {
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout("7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout("1234567890S"), None);
    }

    #[test]
    fn stream_names() {
        assert!(valid_stream_name("orders"));
        assert!(!valid_stream_name(".."));
        assert!(!valid_stream_name("a/b"));
        assert!(!valid_stream_name("a b"));
        assert!(!valid_stream_name(""));
    }
}
