//! The partition manager: follows the metadata and starts, stops and
//! deletes the partitions this node leads (see the parent module).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::leader::{
    Closed, LocalAcks, Membership, Partition, PartitionSettings, ReplicaContext, Role,
};
use crate::cluster::state::{MetaCommand, MetadataState, PartitionMeta, StreamMeta};
use crate::cluster::Metadata;
use crate::nats::handle::LocalClient;
use crate::store::{LogConfig, PartitionLog, RetentionPolicy, StoreError, SyncPolicy};
use crate::time::now_ns;

/// Partitions opened (or stopped) at once: a node with thousands of
/// partitions starts and stops them in parallel rather than one file after
/// another, while each open or close holds at most this many blocking
/// threads.
const OPEN_CONCURRENCY: usize = 16;
/// How long shutdown lets a reconciliation pass in progress finish.
const RECONCILE_STOP_WAIT: Duration = Duration::from_secs(30);

/// Server-wide defaults for partitions (`streams.*` and clustering keys);
/// per-stream overrides from CreateStream take precedence.
#[derive(Debug, Clone)]
pub struct PartitionDefaults {
    /// `streams.retention.max.bytes` (0 = unlimited).
    pub retention_max_bytes: i64,
    /// `streams.retention.max.messages` (0 = unlimited).
    pub retention_max_messages: i64,
    /// `streams.retention.max.age` (zero = unlimited).
    pub retention_max_age: Duration,
    /// `streams.cleaner.interval`.
    pub cleaner_interval: Duration,
    /// `streams.compact.enabled`.
    pub compact_enabled: bool,
    /// `streams.auto.pause.time` (zero = off).
    pub auto_pause_time: Duration,
    /// `streams.auto.pause.disable.if.subscribers`.
    pub auto_pause_disable_if_subscribers: bool,
    /// `streams.concurrency.control`.
    pub concurrency_control: bool,
    /// `clustering.replication.max.bytes`: largest message recorded.
    pub max_message_bytes: usize,
    /// Durability of appends.
    pub sync: SyncPolicy,
    /// `store.cache.size`: page cache of each partition's database.
    pub cache_bytes: usize,
    /// `clustering.namespace` (prefix of replication subjects).
    pub namespace: String,
    /// `clustering.min.insync.replicas`.
    pub min_insync_replicas: usize,
    /// `clustering.replica.max.lag.time`.
    pub replica_max_lag_time: Duration,
    /// `clustering.replica.max.leader.timeout`.
    pub replica_max_leader_timeout: Duration,
    /// `clustering.replica.max.idle.wait`.
    pub replica_max_idle_wait: Duration,
    /// `clustering.replica.fetch.timeout`.
    pub replica_fetch_timeout: Duration,
    /// `streams.encryption`: streams without their own `encryption` are
    /// encrypted at rest.
    pub encryption: bool,
    /// The master key (`LIFTBRIDGE_ENCRYPTION_KEY`), when set.
    pub master_key: Option<Arc<crate::crypt::MasterKey>>,
}

impl Default for PartitionDefaults {
    fn default() -> Self {
        PartitionDefaults {
            retention_max_bytes: 0,
            retention_max_messages: 0,
            retention_max_age: Duration::from_secs(168 * 3600),
            cleaner_interval: Duration::from_secs(300),
            compact_enabled: false,
            auto_pause_time: Duration::ZERO,
            auto_pause_disable_if_subscribers: false,
            concurrency_control: false,
            max_message_bytes: 1024 * 1024,
            sync: SyncPolicy::Always,
            cache_bytes: crate::store::DEFAULT_CACHE_BYTES,
            namespace: "liftbridge-default".into(),
            min_insync_replicas: 1,
            replica_max_lag_time: Duration::from_secs(15),
            replica_max_leader_timeout: Duration::from_secs(15),
            replica_max_idle_wait: Duration::from_secs(10),
            replica_fetch_timeout: Duration::from_secs(3),
            encryption: false,
            master_key: None,
        }
    }
}

impl PartitionDefaults {
    /// The master key when the stream's values are encrypted at rest.
    pub fn encryption_key(&self, s: &StreamMeta) -> Option<Arc<crate::crypt::MasterKey>> {
        if s.config.encryption.unwrap_or(self.encryption) {
            self.master_key.clone()
        } else {
            None
        }
    }

    /// The log configuration of a stream, overrides applied.
    pub fn log_config(&self, s: &StreamMeta) -> LogConfig {
        let c = &s.config;
        let pos = |v: i64| (v > 0).then_some(v as u64);
        let bytes = c.retention_max_bytes.unwrap_or(self.retention_max_bytes);
        let msgs = c
            .retention_max_messages
            .unwrap_or(self.retention_max_messages);
        let age = c
            .retention_max_age_ms
            .map(|ms| Duration::from_millis(ms.max(0) as u64))
            .unwrap_or(self.retention_max_age);
        let cleaner = c
            .cleaner_interval_ms
            .filter(|ms| *ms > 0)
            .map(|ms| Duration::from_millis(ms as u64))
            .unwrap_or(self.cleaner_interval);
        LogConfig {
            sync: self.sync,
            retention: RetentionPolicy {
                max_bytes: pos(bytes),
                max_messages: pos(msgs),
                max_age: (!age.is_zero()).then_some(age),
            },
            compact: c.compact_enabled.unwrap_or(self.compact_enabled),
            cleaner_interval: cleaner,
            cache_bytes: self.cache_bytes,
            observer: crate::metrics::store::observer(),
            // Set per partition where the log is opened (`open_log`).
            first_record: crate::store::FirstRecord::default(),
            // Nothing is cleaned before the partition's role knows what is
            // committed (`Partition::new` sets the limit).
            initial_compaction_limit: 0,
        }
    }

    /// The stream's minimum in-sync replicas (`minIsr`, else the server's),
    /// at least 1.
    pub fn min_isr(&self, s: &StreamMeta) -> usize {
        s.config
            .min_isr
            .map_or(self.min_insync_replicas, |v| v.max(1) as usize)
            .max(1)
    }

    /// Who replicates partition `p` of stream `s`.
    pub fn membership(&self, s: &StreamMeta, p: &PartitionMeta) -> Membership {
        Membership {
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            min_isr: self.min_isr(s),
        }
    }

    /// Whether a partition is under-replicated: a replica out of the ISR,
    /// or the ISR below the stream's minimum (then nothing commits).
    pub fn under_replicated(&self, s: &StreamMeta, p: &PartitionMeta) -> bool {
        p.isr.len() < p.replicas.len() || p.isr.len() < self.min_isr(s)
    }

    /// Whether OCC applies to the stream.
    pub fn occ(&self, s: &StreamMeta) -> bool {
        s.config
            .optimistic_concurrency_control
            .unwrap_or(self.concurrency_control)
    }

    /// The stream's auto-pause time (zero = off) and its subscriber rule.
    pub fn auto_pause(&self, s: &StreamMeta) -> (Duration, bool) {
        let t = s
            .config
            .auto_pause_time_ms
            .map(|ms| Duration::from_millis(ms.max(0) as u64))
            .unwrap_or(self.auto_pause_time);
        let d = s
            .config
            .auto_pause_disable_if_subscribers
            .unwrap_or(self.auto_pause_disable_if_subscribers);
        (t, d)
    }
}

/// Errors of partition management.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    /// The log could not be opened or removed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The NATS subscription could not be made.
    #[error("nats: {0}")]
    Nats(#[from] crate::nats::NatsError),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

type Key = (String, i32);

/// A partition key as borrowed parts, so a map keyed by [`Key`] is looked
/// up by `(&str, i32)` without building a `String` (the publish path does
/// this for every message).
trait KeyRef {
    fn parts(&self) -> (&str, i32);
}

impl KeyRef for Key {
    fn parts(&self) -> (&str, i32) {
        (&self.0, self.1)
    }
}

impl KeyRef for (&str, i32) {
    fn parts(&self) -> (&str, i32) {
        (self.0, self.1)
    }
}

impl<'a> std::borrow::Borrow<dyn KeyRef + 'a> for Key {
    fn borrow(&self) -> &(dyn KeyRef + 'a) {
        self
    }
}

// Hashes and compares as the tuple `Key` does (a `str` hashes as its
// `String`), as `Borrow` requires.
impl std::hash::Hash for dyn KeyRef + '_ {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.parts().hash(h);
    }
}

impl PartialEq for dyn KeyRef + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn KeyRef + '_ {}

/// A partition replicated here, as this process first saw it.
#[derive(Debug, Clone, Copy)]
struct FirstSeen {
    /// Its leader epoch then.
    epoch: u64,
    /// When.
    since: std::time::Instant,
    /// This process has run it since, in any role: its log holds nothing
    /// a previous process may have lost.
    opened: bool,
}

impl FirstSeen {
    /// Seen now in leader epoch `epoch`, not run yet.
    fn now(epoch: u64) -> FirstSeen {
        FirstSeen {
            epoch,
            since: std::time::Instant::now(),
            opened: false,
        }
    }
}

/// What a paused partition's closed log holds, as metadata reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PausedOffsets {
    /// Creation time of the stream incarnation these offsets belong to.
    pub creation_ns: i64,
    /// High watermark when the partition stopped, -1 for none.
    pub high_watermark: i64,
    /// Newest stored offset, -1 for none.
    pub newest_offset: i64,
    /// First and latest reception time of a recorded message (ns, 0 = none).
    pub received: (i64, i64),
}

/// A partition that cannot write here now (see [`PartitionManager::degraded`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DegradedPartition {
    /// Stream name.
    pub stream: String,
    /// Partition id.
    pub partition: i32,
    /// The I/O failure, with the OS error text.
    pub reason: String,
    /// The device is full.
    pub no_space: bool,
    /// When the running log stopped writing (ns since the Unix epoch; 0
    /// for a log that could not be opened).
    pub since_ns: i64,
    /// The partition runs (serves reads) and retries writes by itself;
    /// `false`: its log could not be opened and is retried at the next
    /// reconciliation.
    pub running: bool,
}

/// Why a partition led here does not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionFailure {
    /// Creation time of the stream incarnation that failed.
    pub creation_ns: i64,
    /// The error that stopped it, as logged.
    pub reason: String,
    /// Whether the cause is in the files (lost or corrupt log): such a
    /// partition is not reopened until the node restarts. Other causes
    /// (I/O, a lock still held) are retried at the next reconciliation.
    pub permanent: bool,
    /// The cause is a full device (ENOSPC or a quota).
    pub no_space: bool,
}

struct Inner {
    data_dir: PathBuf,
    /// Which partitions have held records here (see `held`).
    held: super::held::Held,
    me: String,
    nats: LocalClient,
    meta: Metadata,
    defaults: PartitionDefaults,
    running: Mutex<HashMap<Key, Arc<Partition>>>,
    /// Streams seen in the metadata (name → creation time), to tell a
    /// deletion from a state that is not loaded yet.
    seen: Mutex<HashMap<String, i64>>,
    /// The offsets of partitions led here that are paused (their log is
    /// closed): taken when they stop, or read once from the closed log
    /// after a restart, so metadata reports them as Liftbridge does.
    /// Bounded by the partitions led here; removed on resume or delete.
    paused: Mutex<HashMap<Key, PausedOffsets>>,
    /// Partitions led here whose log could not be opened (lost, corrupt,
    /// unreadable): why, for the stream incarnation it happened to. They
    /// are not retried until the node restarts (the cause is on disk and
    /// needs an operator), and they are refused rather than recreated
    /// empty. Bounded by the partitions led here; removed when the
    /// partition is deleted, paused or led elsewhere.
    failed: Mutex<HashMap<Key, PartitionFailure>>,
    /// Bumped after every reconciliation (waiters re-check the map).
    generation: watch::Sender<u64>,
    /// Identity and replication settings handed to every partition.
    ctx: ReplicaContext,
    /// What this process saw of each partition replicated here first (see
    /// `hold_leadership`). Bounded by the partitions of this node; kept
    /// while they are paused, forgotten when they are deleted or moved.
    first_led: Mutex<HashMap<Key, FirstSeen>>,
    /// Some leadership is held back: reconcile again every second.
    holding: std::sync::atomic::AtomicBool,
    /// When this process started (Unix ns): a follower whose files are
    /// missing for a stream older than that is rebuilding a lost copy.
    started_ns: i64,
}

/// Starts, stops and finds the partitions this node leads.
#[derive(Clone)]
pub struct PartitionManager {
    inner: Arc<Inner>,
}

/// Background tasks of the manager; stopping them ends reconciliation.
pub struct ManagerTasks {
    reconcile: JoinHandle<()>,
    /// Ends reconciliation between two passes (a pass cut short could
    /// leave a partition it was stopping or opening with its log open).
    stop_reconcile: tokio_util::sync::CancellationToken,
    auto_pause: JoinHandle<()>,
    notify: Option<JoinHandle<()>>,
}

impl PartitionManager {
    /// Creates the manager and starts following the metadata.
    pub fn start(
        data_dir: &Path,
        nats: LocalClient,
        meta: Metadata,
        defaults: PartitionDefaults,
    ) -> (PartitionManager, ManagerTasks) {
        let me = meta.node().id.clone();
        let ctx = ReplicaContext {
            me: me.clone(),
            namespace: defaults.namespace.clone(),
            meta: Some(meta.clone()),
            max_lag: defaults.replica_max_lag_time,
            leader_timeout: defaults.replica_max_leader_timeout,
            idle_wait: defaults.replica_max_idle_wait,
            fetch_timeout: defaults.replica_fetch_timeout,
            max_bytes: defaults.max_message_bytes,
            local_acks: Arc::default(),
        };
        let notify_sub = nats.subscribe(&super::subjects::notify(&defaults.namespace, &me), None);
        let mgr = PartitionManager {
            inner: Arc::new(Inner {
                data_dir: data_dir.to_path_buf(),
                held: super::held::Held::new(data_dir),
                me,
                nats,
                meta: meta.clone(),
                ctx,
                first_led: Mutex::new(HashMap::new()),
                holding: std::sync::atomic::AtomicBool::new(false),
                started_ns: now_ns(),
                defaults,
                running: Mutex::new(HashMap::new()),
                seen: Mutex::new(HashMap::new()),
                paused: Mutex::new(HashMap::new()),
                failed: Mutex::new(HashMap::new()),
                generation: watch::channel(0).0,
            }),
        };
        let m = mgr.clone();
        let stop_reconcile = tokio_util::sync::CancellationToken::new();
        let stop = stop_reconcile.clone();
        let reconcile = tokio::spawn(async move {
            let mut rx = meta.watch();
            loop {
                let state = rx.borrow_and_update().clone();
                m.reconcile(&state).await;
                let holding = m.inner.holding.load(std::sync::atomic::Ordering::Relaxed);
                tokio::select! {
                    _ = stop.cancelled() => break,
                    changed = rx.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                    _ = tokio::time::sleep(Duration::from_secs(1)), if holding => {}
                }
            }
        });
        let m = mgr.clone();
        let auto_pause = tokio::spawn(async move { m.auto_pause_loop().await });
        // Notifications wake idle followers; without the subscription they
        // still fetch every `replica.max.idle.wait`.
        let notify = match notify_sub {
            Ok(mut sub) => {
                let m = mgr.clone();
                Some(tokio::spawn(async move {
                    while let Some(msg) = sub.next().await {
                        let Ok(n) = crate::wire::replication::decode_notification(&msg.payload)
                        else {
                            continue;
                        };
                        if let Some(p) = m.get_replica(&n.stream, n.partition) {
                            p.wake.notify_one();
                        }
                    }
                }))
            }
            Err(e) => {
                tracing::warn!(error = %e, "subscribing to replication notifications");
                None
            }
        };
        (
            mgr,
            ManagerTasks {
                reconcile,
                stop_reconcile,
                auto_pause,
                notify,
            },
        )
    }

    /// The defaults in force.
    pub fn defaults(&self) -> &PartitionDefaults {
        &self.inner.defaults
    }

    /// Hands the acks of publishes made through this process to `local`
    /// instead of NATS (see [`LocalAcks`]); the first call wins.
    pub fn set_local_acks(&self, local: LocalAcks) {
        let _ = self.inner.ctx.local_acks.set(local);
    }

    /// This node's server id.
    pub fn server_id(&self) -> &str {
        &self.inner.me
    }

    /// The running partition, if this node leads it and it is not paused.
    pub fn get(&self, stream: &str, id: i32) -> Option<Arc<Partition>> {
        self.get_replica(stream, id).filter(|p| p.is_leader())
    }

    /// The running partition in whatever role this node has (leader or
    /// follower), if it is not paused.
    pub fn get_replica(&self, stream: &str, id: i32) -> Option<Arc<Partition>> {
        self.inner
            .running
            .lock()
            .get(&(stream, id) as &dyn KeyRef)
            .cloned()
    }

    /// Every running partition (leaders and followers), ordered by stream
    /// and id.
    pub fn replicas(&self) -> Vec<Arc<Partition>> {
        let mut v: Vec<_> = self
            .running_snapshot()
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        v.sort_by(|a, b| (&a.stream, a.id).cmp(&(&b.stream, b.id)));
        v
    }

    /// The offsets of a paused partition led here (same stream
    /// incarnation), if known.
    pub fn paused_offsets(&self, stream: &str, id: i32, creation_ns: i64) -> Option<PausedOffsets> {
        self.inner
            .paused
            .lock()
            .get(&(stream, id) as &dyn KeyRef)
            .copied()
            .filter(|o| o.creation_ns == creation_ns)
    }

    /// Why the partition (same stream incarnation) failed to start here,
    /// if it did.
    pub fn failure(&self, stream: &str, id: i32, creation_ns: i64) -> Option<PartitionFailure> {
        self.inner
            .failed
            .lock()
            .get(&(stream, id) as &dyn KeyRef)
            .filter(|f| f.creation_ns == creation_ns)
            .cloned()
    }

    /// Partitions here that cannot write now, ordered by stream and id: a
    /// running log whose writer met an I/O failure (it keeps serving reads
    /// and retries on its own), or a log that could not be opened for an
    /// I/O reason (retried at each reconciliation). Lost or corrupt logs
    /// are [`failures`](Self::failures), not listed here.
    pub fn degraded(&self) -> Vec<DegradedPartition> {
        let mut v: Vec<DegradedPartition> = self
            .replicas()
            .into_iter()
            .filter_map(|p| {
                let f = p.log().fault()?;
                Some(DegradedPartition {
                    stream: p.stream.clone(),
                    partition: p.id,
                    reason: f.reason,
                    no_space: f.no_space,
                    since_ns: f.since_ns,
                    running: true,
                })
            })
            .collect();
        for (stream, partition, f) in self.failures() {
            if !f.permanent {
                v.push(DegradedPartition {
                    stream,
                    partition,
                    reason: f.reason,
                    no_space: f.no_space,
                    since_ns: 0,
                    running: false,
                });
            }
        }
        v.sort_by(|a, b| (&a.stream, a.partition).cmp(&(&b.stream, b.partition)));
        v
    }

    /// Partitions here that cannot write, for health checks: the
    /// [`degraded`](Self::degraded) ones and the lost or corrupt ones
    /// ([`failures`](Self::failures), which stay refused until repaired),
    /// ordered by stream and id.
    pub fn unhealthy(&self) -> Vec<DegradedPartition> {
        let mut v = self.degraded();
        for (stream, partition, f) in self.failures() {
            if f.permanent {
                v.push(DegradedPartition {
                    stream,
                    partition,
                    reason: f.reason,
                    no_space: f.no_space,
                    since_ns: 0,
                    running: false,
                });
            }
        }
        v.sort_by(|a, b| (&a.stream, a.partition).cmp(&(&b.stream, b.partition)));
        v
    }

    /// Every partition that failed to start here, ordered by stream and id.
    pub fn failures(&self) -> Vec<(String, i32, PartitionFailure)> {
        let mut v: Vec<_> = self
            .inner
            .failed
            .lock()
            .iter()
            .map(|((s, id), f)| (s.clone(), *id, f.clone()))
            .collect();
        v.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        v
    }

    /// The partitions running here, copied out so the lock is not held
    /// while they are looked at.
    fn running_snapshot(&self) -> Vec<(Key, Arc<Partition>)> {
        self.inner
            .running
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Waits up to `timeout` for the first reconciliation to finish (every
    /// partition led here opened), so a node starting up serves its data
    /// from the first request.
    pub async fn wait_started(&self, timeout: Duration) -> bool {
        let mut rx = self.inner.generation.subscribe();
        let wait = async {
            loop {
                if *rx.borrow_and_update() > 0 {
                    return true;
                }
                if rx.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(false)
    }

    /// Waits up to `timeout` for the partition to be running here as
    /// leader.
    pub async fn wait_for(
        &self,
        stream: &str,
        id: i32,
        timeout: Duration,
    ) -> Option<Arc<Partition>> {
        self.wait_running(stream, id, timeout, false).await
    }

    /// Waits up to `timeout` for the partition to run here in any role.
    pub async fn wait_for_replica(
        &self,
        stream: &str,
        id: i32,
        timeout: Duration,
    ) -> Option<Arc<Partition>> {
        self.wait_running(stream, id, timeout, true).await
    }

    async fn wait_running(
        &self,
        stream: &str,
        id: i32,
        timeout: Duration,
        any_role: bool,
    ) -> Option<Arc<Partition>> {
        let mut rx = self.inner.generation.subscribe();
        let wait = async {
            loop {
                rx.borrow_and_update();
                let found = if any_role {
                    self.get_replica(stream, id)
                } else {
                    self.get(stream, id)
                };
                if found.is_some() {
                    return found;
                }
                // A partition that failed to start will not start (nor,
                // soon, one whose device is full): do not make the caller
                // wait the whole timeout for it.
                let key = (stream.to_string(), id);
                if self
                    .inner
                    .failed
                    .lock()
                    .get(&key)
                    .is_some_and(|f| f.permanent || f.no_space)
                {
                    return None;
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(None)
    }

    /// Waits up to `timeout` for the partition to be gone from this node
    /// (after a pause or a deletion).
    pub async fn wait_gone(&self, stream: &str, id: i32, timeout: Duration) {
        let mut rx = self.inner.generation.subscribe();
        let wait = async {
            loop {
                rx.borrow_and_update();
                if self.get(stream, id).is_none() {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
    }

    fn partition_dir(&self, stream: &str, id: i32) -> PathBuf {
        self.inner
            .data_dir
            .join("streams")
            .join(stream)
            .join(id.to_string())
    }

    async fn reconcile(&self, state: &MetadataState) {
        if state.applied_index == 0 {
            // Nothing applied yet (start-up): not a state to act on.
            return;
        }
        let me = &self.inner.me;
        let mut wanted: HashMap<Key, (&StreamMeta, i32, Role)> = HashMap::new();
        for s in state.streams.values() {
            for p in &s.partitions {
                if p.paused || !p.replicas.contains(me) || p.leader.is_empty() {
                    continue;
                }
                let role = if p.leader == *me {
                    Role::Leader
                } else {
                    Role::Follower {
                        leader: p.leader.clone(),
                    }
                };
                wanted.insert((s.name.clone(), p.id), (s, p.id, role));
            }
        }
        // Stop what is no longer wanted (paused, deleted, recreated) or
        // wanted in another role or leader epoch. What a replaced partition
        // knew to be committed stays committed in its successor (all of it
        // is on every in-sync replica, so on any new leader too).
        let mut carried: HashMap<Key, u64> = HashMap::new();
        let current = self.running_snapshot();
        for (key, part) in current {
            let stream = state.streams.get(&key.0);
            let same_stream = stream.is_some_and(|s| s.creation_timestamp_ns == part.creation_ns);
            let same_role = wanted.get(&key).is_some_and(|(s, id, role)| {
                role == part.role()
                    && s.partition(*id)
                        .is_some_and(|pm| pm.leader_epoch == part.leader_epoch())
            });
            if same_stream && same_role {
                continue;
            }
            self.inner.running.lock().remove(&key);
            if same_stream && wanted.contains_key(&key) {
                tracing::info!(stream = %key.0, partition = key.1, "partition role or leader epoch changed");
                part.stop(Closed::Moved).await;
                carried.insert(key.clone(), part.committed_end());
                self.inner.generation.send_modify(|g| *g += 1);
                continue;
            }
            let deleted = !same_stream;
            let paused = same_stream
                && stream
                    .and_then(|s| s.partition(key.1))
                    .is_some_and(|p| p.paused && p.leader == *me);
            if paused {
                let offsets = PausedOffsets {
                    creation_ns: part.creation_ns,
                    high_watermark: part.high_watermark_or_minus_one(),
                    newest_offset: part.log().newest_offset().map_or(-1, |o| o as i64),
                    received: part.received_timestamps(),
                };
                self.inner.paused.lock().insert(key.clone(), offsets);
            }
            part.stop(if deleted {
                Closed::Deleted
            } else {
                Closed::Paused
            })
            .await;
            if deleted {
                self.remove_files(&key.0, key.1).await;
            }
            self.inner.generation.send_modify(|g| *g += 1);
        }
        // Deleted streams whose partitions were not running here (paused)
        // still leave files behind: remove the directories of streams this
        // manager has seen in the metadata and that are now gone. Never
        // "everything unknown": right after a restart the state may not be
        // loaded yet, and unknown must not mean deleted.
        let gone: Vec<(String, i64)> = {
            let mut seen = self.inner.seen.lock();
            let gone = seen
                .iter()
                .filter(|(name, created)| {
                    state
                        .streams
                        .get(*name)
                        .is_none_or(|s| s.creation_timestamp_ns != **created)
                })
                .map(|(n, c)| (n.clone(), *c))
                .collect::<Vec<_>>();
            for (n, _) in &gone {
                seen.remove(n);
            }
            for st in state.streams.values() {
                seen.insert(st.name.clone(), st.creation_timestamp_ns);
            }
            gone
        };
        for (name, _) in gone {
            if state.streams.contains_key(&name) {
                // Recreated under the same name: its old files went with the
                // running partitions above; the new stream keeps its own.
                continue;
            }
            self.remove_stream_dir(&name).await;
        }
        // Paused offsets: forget those of partitions no longer paused here
        // (resumed, deleted, recreated, led elsewhere); read those of
        // paused partitions not known yet (after a restart) from their
        // closed log.
        self.inner.paused.lock().retain(|key, o| {
            state.streams.get(&key.0).is_some_and(|s| {
                s.creation_timestamp_ns == o.creation_ns
                    && s.partition(key.1)
                        .is_some_and(|p| p.paused && p.leader == *me)
            })
        });
        for s in state.streams.values() {
            for p in s.partitions.iter().filter(|p| p.paused && p.leader == *me) {
                let key = (s.name.clone(), p.id);
                if self.inner.paused.lock().contains_key(&key) {
                    continue;
                }
                match self.read_closed_offsets(s, p.id).await {
                    Ok(o) => {
                        self.inner.paused.lock().insert(key, o);
                    }
                    Err(e) => {
                        // Reported once: unknown offsets (-1) stand until
                        // the partition resumes, rather than a retry and a
                        // log line on every reconciliation.
                        tracing::warn!(stream = %s.name, partition = p.id, error = %e, "reading a paused partition's offsets");
                        let unknown = PausedOffsets {
                            creation_ns: s.creation_timestamp_ns,
                            high_watermark: -1,
                            newest_offset: -1,
                            received: (0, 0),
                        };
                        self.inner.paused.lock().insert(key, unknown);
                    }
                }
            }
        }
        self.inner.failed.lock().retain(|key, f| {
            wanted
                .get(key)
                .is_some_and(|(s, _, _)| s.creation_timestamp_ns == f.creation_ns)
        });
        self.inner.first_led.lock().retain(|k, _| {
            wanted.contains_key(k)
                || state
                    .streams
                    .get(&k.0)
                    .and_then(|s| s.partition(k.1))
                    .is_some_and(|p| p.replicas.contains(me))
        });
        let mut holding = false;
        let mut to_open = Vec::new();
        // Start or update what is wanted.
        for (key, (s, id, role)) in wanted {
            let Some(pm) = s.partition(id) else { continue };
            let settings = PartitionSettings {
                max_bytes: self.inner.defaults.max_message_bytes,
                occ: self.inner.defaults.occ(s),
                leader_epoch: pm.leader_epoch,
                encrypt: self.inner.defaults.encryption_key(s),
            };
            let membership = self.inner.defaults.membership(s, pm);
            self.inner
                .first_led
                .lock()
                .entry(key.clone())
                .or_insert(FirstSeen::now(pm.leader_epoch));
            let existing = self.get_replica(&key.0, key.1);
            if let Some(p) = existing {
                p.update_settings(settings);
                p.set_membership(&membership);
                if let Err(e) = p.set_readonly(pm.readonly) {
                    tracing::error!(stream = %key.0, partition = key.1, error = %e, "changing readonly state");
                }
                continue;
            }
            if self
                .inner
                .failed
                .lock()
                .get(&key)
                .is_some_and(|f| f.permanent)
            {
                continue;
            }
            if role == Role::Leader && self.hold_leadership(&key, pm) {
                holding = true;
                continue;
            }
            to_open.push((key, s, id, settings, pm.readonly, role, membership));
        }
        // Open the new ones concurrently (bounded), each result handled as
        // it comes.
        // (Futures pushed from a loop, not mapped by a closure: a closure
        // over borrowed stream metadata makes the task's future not `Send`.)
        let mut pending = to_open.into_iter();
        let mut opened = futures::stream::FuturesUnordered::new();
        loop {
            while opened.len() < OPEN_CONCURRENCY {
                let Some((key, s, id, settings, readonly, role, membership)) = pending.next()
                else {
                    break;
                };
                opened.push(async move {
                    let r = self
                        .open_partition(s, id, settings, readonly, role, membership)
                        .await;
                    (key, s, r)
                });
            }
            let Some((key, s, r)) = opened.next().await else {
                break;
            };
            match r {
                Ok(p) => {
                    if let Some(c) = carried.get(&key) {
                        p.advance_committed((*c).min(p.log().log_end_offset()));
                    }
                    if let Some(seen) = self.inner.first_led.lock().get_mut(&key) {
                        seen.opened = true;
                    }
                    self.inner.failed.lock().remove(&key);
                    self.inner.running.lock().insert(key, p);
                }
                Err(e) => {
                    let permanent = matches!(
                        e,
                        PartitionError::Store(
                            StoreError::Lost { .. }
                                | StoreError::DirectoryLost { .. }
                                | StoreError::Corrupt { .. }
                                | StoreError::CorruptRecord { .. }
                        )
                    );
                    // A lost or corrupt log is logged once and stays
                    // failed (refused, never recreated empty) until the
                    // node restarts.
                    if permanent {
                        tracing::error!(stream = %key.0, partition = key.1, error = %e, "partition failed: its log is lost or corrupt; refused until the files are repaired and the node restarts");
                    } else {
                        tracing::error!(stream = %key.0, partition = key.1, error = %e, "starting partition");
                    }
                    let failure = PartitionFailure {
                        creation_ns: s.creation_timestamp_ns,
                        reason: e.to_string(),
                        permanent,
                        no_space: matches!(&e, PartitionError::Store(se) if se.is_no_space()),
                    };
                    self.inner.failed.lock().insert(key, failure);
                }
            }
        }
        self.inner
            .holding
            .store(holding, std::sync::atomic::Ordering::Relaxed);
        self.inner.generation.send_modify(|g| *g += 1);
    }

    /// Whether not to lead a partition yet. A node that restarts may have
    /// lost writes its followers have: under `store.sync: interval` writes
    /// it had not synced (they may have been acknowledged as ALL), under
    /// either policy records it had staged for its followers before its own
    /// write. If it led again in the same leader epoch it would hand out
    /// those offsets a second time. So a process that finds itself leading, in the epoch
    /// it first saw, a partition it holds data of, has not run since it
    /// started (a pause and resume closed and reopened its own log) or
    /// since its log failed, and whose ISR has other members, does not
    /// lead: its followers cannot fetch, report it, and
    /// elect one of themselves; it then follows and truncates. If no
    /// election comes within twice `replica.max.leader.timeout` (the
    /// followers are down too), it leads anyway.
    fn hold_leadership(&self, key: &Key, pm: &PartitionMeta) -> bool {
        let Some(seen) = self.inner.first_led.lock().get(key).copied() else {
            return false;
        };
        if seen.opened
            || seen.epoch != pm.leader_epoch
            || !pm.isr.iter().any(|r| *r != self.inner.me)
            || !crate::store::journal::path(&self.partition_dir(&key.0, key.1), "log").exists()
        {
            return false;
        }
        let limit = self.inner.defaults.replica_max_leader_timeout * 2;
        if seen.since.elapsed() >= limit {
            tracing::warn!(stream = %key.0, partition = key.1, "no new leader was elected; leading with the data this node has");
            return false;
        }
        tracing::debug!(stream = %key.0, partition = key.1, "restarted leader waits for its followers to elect a new leader");
        true
    }

    /// Opens a paused partition's log just long enough to read its
    /// offsets; alone on this node, its newest offset is its high
    /// watermark. A partition never written has no directory: -1s.
    async fn read_closed_offsets(
        &self,
        s: &StreamMeta,
        id: i32,
    ) -> Result<PausedOffsets, PartitionError> {
        let dir = self.partition_dir(&s.name, id);
        let mut o = PausedOffsets {
            creation_ns: s.creation_timestamp_ns,
            high_watermark: -1,
            newest_offset: -1,
            received: (0, 0),
        };
        if !tokio::fs::try_exists(&dir).await.unwrap_or(false) {
            return Ok(o);
        }
        let cfg = self.inner.defaults.log_config(s);
        let d = dir.clone();
        let log = tokio::task::spawn_blocking(move || PartitionLog::open(&d, "log", cfg))
            .await
            .map_err(|e| PartitionError::Io {
                path: dir,
                source: std::io::Error::other(e.to_string()),
            })??;
        let stamp = |r: Vec<crate::store::Record>| r.first().map_or(0, |r| r.timestamp_ns);
        if let (Some(old), Some(new)) = (log.oldest_offset(), log.newest_offset()) {
            o.newest_offset = new as i64;
            o.high_watermark = new as i64;
            o.received = (
                stamp(log.read(old, 1, usize::MAX).await?),
                stamp(log.read(new, 1, usize::MAX).await?),
            );
        }
        log.close().await?;
        Ok(o)
    }

    #[allow(clippy::too_many_arguments)]
    async fn open_partition(
        &self,
        s: &StreamMeta,
        id: i32,
        settings: PartitionSettings,
        readonly: bool,
        role: Role,
        membership: Membership,
    ) -> Result<Arc<Partition>, PartitionError> {
        // A follower without files for a stream that existed before this
        // process started lost its copy (its data directory was wiped).
        let existed = crate::store::journal::path(&self.partition_dir(&s.name, id), "log").exists();
        let mut rebuilding =
            role != Role::Leader && !existed && s.creation_timestamp_ns < self.inner.started_ns;
        let log = match self.open_log(s, id).await {
            Ok(log) => log,
            // A follower's lost or damaged copy is rebuilt from the leader,
            // which has everything committed: removed and fetched anew.
            Err(PartitionError::Store(
                e @ (StoreError::Lost { .. }
                | StoreError::DirectoryLost { .. }
                | StoreError::Corrupt { .. }
                | StoreError::CorruptRecord { .. }),
            )) if role != Role::Leader => {
                tracing::error!(stream = %s.name, partition = id, error = %e, "follower copy lost or damaged; rebuilding it from the leader");
                self.remove_files(&s.name, id).await;
                rebuilding = true;
                self.open_log(s, id).await?
            }
            Err(e) => return Err(e),
        };
        // Reception times survive restarts through the stored timestamps.
        let first = match log.oldest_offset() {
            Some(o) => log
                .read(o, 1, usize::MAX)
                .await?
                .first()
                .map(|r| r.timestamp_ns),
            None => None,
        };
        let latest = match log.newest_offset() {
            Some(o) => log
                .read(o, 1, usize::MAX)
                .await?
                .first()
                .map(|r| r.timestamp_ns),
            None => None,
        };
        let p = Partition::new(
            s.name.clone(),
            id,
            s.subject.clone(),
            s.group.clone(),
            s.creation_timestamp_ns,
            log,
            settings,
            readonly,
            self.inner.nats.clone(),
            role.clone(),
            membership.clone(),
            self.inner.ctx.clone(),
        );
        // A leader whose ISR is itself alone commits what it holds now.
        p.set_membership(&membership);
        p.seed_received(first.unwrap_or(0), latest.unwrap_or(0));
        if rebuilding {
            tracing::warn!(stream = %s.name, partition = id, "no local copy of a partition this node replicates; rebuilding it from the leader");
            p.rebuilding
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let started = match &role {
            Role::Leader => super::fetch_server::start(&p).and_then(|()| p.start_stenographer()),
            Role::Follower { leader } => {
                super::follower::start(&p, leader.clone());
                Ok(())
            }
        };
        if let Err(e) = started {
            p.stop(Closed::Shutdown).await;
            return Err(e.into());
        }
        tracing::info!(
            stream = %s.name,
            partition = id,
            role = ?role,
            leader_epoch = p.leader_epoch(),
            newest = ?p.log().newest_offset(),
            "partition started"
        );
        Ok(p)
    }

    /// Opens (or creates) the partition's log. A partition this node noted
    /// as holding records (see `held`) whose database file is gone with its
    /// journal (its directory deleted) is refused with
    /// [`StoreError::DirectoryLost`]; a log that holds records is noted if it
    /// was not yet (logs created before the registry existed).
    async fn open_log(&self, s: &StreamMeta, id: i32) -> Result<PartitionLog, PartitionError> {
        let dir = self.partition_dir(&s.name, id);
        let mut cfg = self.inner.defaults.log_config(s);
        let held = self.inner.held.clone();
        let (stream, created) = (s.name.clone(), s.creation_timestamp_ns);
        cfg.first_record = held.hook(&stream, id, created);
        let path = dir.clone();
        tokio::task::spawn_blocking(move || {
            let db = dir.join("log.redb");
            let journal = crate::store::journal::path(&dir, "log");
            if held.holds(&stream, id, created) && !db.exists() && !journal.exists() {
                return Err(StoreError::DirectoryLost {
                    partition: "log".into(),
                    path: dir,
                });
            }
            let log = PartitionLog::open(&dir, "log", cfg)?;
            if db.exists() {
                if let Err(e) = held.record(&stream, id, created) {
                    tracing::warn!(stream = %stream, partition = id, error = %e, "noting that the partition holds records");
                }
            }
            Ok(log)
        })
        .await
            .map_err(|e| PartitionError::Io {
                path,
                source: std::io::Error::other(e.to_string()),
            })?
            .map_err(PartitionError::from)
    }

    /// Stops a running partition whose log was found damaged and keeps it
    /// failed (refused) until the node restarts.
    async fn fail_running(&self, key: &Key, p: &Arc<Partition>, reason: String) {
        let removed = {
            let mut running = self.inner.running.lock();
            let same = running.get(key).is_some_and(|r| Arc::ptr_eq(r, p));
            if same {
                running.remove(key);
            }
            same
        };
        if !removed {
            return;
        }
        if p.is_leader() {
            // Its followers may hold records it staged and could not write:
            // reopened (resumed) in this epoch, it holds back its leadership
            // as a restarted process does.
            if let Some(seen) = self.inner.first_led.lock().get_mut(key) {
                *seen = FirstSeen::now(p.leader_epoch());
            }
        }
        self.inner.failed.lock().insert(
            key.clone(),
            PartitionFailure {
                creation_ns: p.creation_ns,
                reason,
                permanent: true,
                no_space: false,
            },
        );
        p.stop(Closed::Failed).await;
        self.inner.generation.send_modify(|g| *g += 1);
    }

    async fn remove_files(&self, stream: &str, id: i32) {
        let dir = self.partition_dir(stream, id);
        let stream_dir = self.inner.data_dir.join("streams").join(stream);
        let held = self.inner.held.clone();
        let name = stream.to_owned();
        let res = tokio::task::spawn_blocking(move || {
            held.forget(&name, id);
            forget_journal(&dir);
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            // The stream directory goes once its last partition is gone.
            let _ = std::fs::remove_dir(&stream_dir);
            Ok(())
        })
        .await;
        if let Ok(Err(e)) = res {
            tracing::error!(stream, partition = id, error = %e, "removing partition files");
        }
    }

    async fn remove_stream_dir(&self, name: &str) {
        let dir = self.inner.data_dir.join("streams").join(name);
        let held = self.inner.held.clone();
        let stream = name.to_owned();
        let res = tokio::task::spawn_blocking(move || {
            held.forget_stream(&stream);
            if let Ok(parts) = std::fs::read_dir(&dir) {
                for p in parts.flatten() {
                    forget_journal(&p.path());
                }
            }
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            }
        })
        .await;
        if let Ok(Err(e)) = res {
            tracing::warn!(stream = %name, error = %e, "removing files of a deleted stream");
        }
    }

    /// Pauses idle partitions whose stream has an auto-pause time.
    async fn auto_pause_loop(&self) {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // Partitions are idle from when we first saw them running.
        let mut since: HashMap<Key, i64> = HashMap::new();
        loop {
            tick.tick().await;
            let state = self.inner.meta.state();
            let running = self.running_snapshot();
            since.retain(|k, _| running.iter().any(|(r, _)| r == k));
            let now = now_ns();
            for (key, p) in &running {
                if let Some(reason) = p.failure() {
                    self.fail_running(key, p, reason).await;
                }
            }
            let running: Vec<_> = running
                .into_iter()
                .filter(|(_, p)| p.failure().is_none() && p.is_leader())
                .collect();
            for (key, p) in running {
                let Some(s) = state.stream(&key.0) else {
                    continue;
                };
                let (t, no_if_subs) = self.inner.defaults.auto_pause(s);
                if t.is_zero() {
                    continue;
                }
                let start = *since.entry(key.clone()).or_insert(now);
                let last = p.received_timestamps().1.max(start);
                if now - last < t.as_nanos() as i64 {
                    continue;
                }
                if no_if_subs && p.subscriber_count() > 0 {
                    continue;
                }
                let cmd = MetaCommand::PauseStream {
                    name: key.0.clone(),
                    partitions: vec![key.1],
                    resume_all: false,
                    timestamp_ns: now,
                };
                if let Err(e) = self.inner.meta.propose(cmd).await {
                    tracing::warn!(stream = %key.0, partition = key.1, error = %e, "auto-pause");
                }
                since.remove(&key);
            }
        }
    }

    /// Stops reconciliation and every partition (logs closed cleanly).
    pub async fn shutdown(&self, mut tasks: ManagerTasks) {
        // A pass in progress finishes (it may be stopping a partition,
        // whose log must be closed), unless it takes longer than
        // `RECONCILE_STOP_WAIT`.
        tasks.stop_reconcile.cancel();
        tasks.auto_pause.abort();
        if tokio::time::timeout(RECONCILE_STOP_WAIT, &mut tasks.reconcile)
            .await
            .is_err()
        {
            tracing::warn!("partition reconciliation still running at shutdown; stopped");
            tasks.reconcile.abort();
            let _ = tasks.reconcile.await;
        }
        let _ = tasks.auto_pause.await;
        if let Some(n) = tasks.notify {
            n.abort();
            let _ = n.await;
        }
        let parts: Vec<Arc<Partition>> =
            self.inner.running.lock().drain().map(|(_, p)| p).collect();
        // In parallel (bounded): thousands of partitions stop in the time
        // of a few hundred sequential closes.
        futures::stream::iter(parts)
            .for_each_concurrent(OPEN_CONCURRENCY, |p| async move {
                p.stop(Closed::Shutdown).await;
            })
            .await;
        self.inner.generation.send_modify(|g| *g += 1);
    }
}

/// Removes a partition's journal before the rest of its files: the journal
/// is what proves a log existed, so a removal cut short (crash) must not
/// leave a journal without its database, which would make a stream later
/// created under the same name refuse its partition as lost. Best effort:
/// the directory removal that follows reports failures.
fn forget_journal(partition_dir: &Path) {
    let _ = std::fs::remove_file(crate::store::journal::spare_path(partition_dir, "log"));
    let _ = std::fs::remove_file(crate::store::journal::path(partition_dir, "log"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::state::StreamConfig;

    #[test]
    fn a_key_map_is_looked_up_by_borrowed_parts() {
        let mut m: HashMap<Key, u32> = HashMap::new();
        for (i, name) in ["a", "ab", "b", ""].into_iter().enumerate() {
            for id in [0, 1, -1, i32::MAX] {
                m.insert(
                    (name.to_string(), id),
                    i as u32 * 10 + id.unsigned_abs() % 7,
                );
            }
        }
        for (k, v) in &m {
            assert_eq!(m.get(&(k.0.as_str(), k.1) as &dyn KeyRef), Some(v), "{k:?}");
        }
        // Neither a stream name that only shares a prefix nor another id
        // matches.
        assert_eq!(m.get(&("abc", 0) as &dyn KeyRef), None);
        assert_eq!(m.get(&("a", 2) as &dyn KeyRef), None);
        assert_eq!(m.get(&("ba", 0) as &dyn KeyRef), None);
    }

    fn stream(config: StreamConfig) -> StreamMeta {
        StreamMeta {
            name: "s".into(),
            subject: "s".into(),
            config,
            ..Default::default()
        }
    }

    #[test]
    fn server_defaults_apply_when_the_stream_sets_nothing() {
        let d = PartitionDefaults {
            retention_max_messages: 10,
            ..Default::default()
        };
        let c = d.log_config(&stream(StreamConfig::default()));
        assert_eq!(c.retention.max_messages, Some(10));
        assert_eq!(c.retention.max_bytes, None, "0 means unlimited");
        assert_eq!(c.retention.max_age, Some(Duration::from_secs(168 * 3600)));
        assert!(!c.compact);
        assert_eq!(c.cleaner_interval, Duration::from_secs(300));
        assert!(!d.occ(&stream(StreamConfig::default())));
    }

    #[test]
    fn stream_overrides_win_and_durations_are_milliseconds() {
        let d = PartitionDefaults::default();
        let s = stream(StreamConfig {
            retention_max_bytes: Some(1000),
            retention_max_age_ms: Some(1500),
            cleaner_interval_ms: Some(50),
            compact_enabled: Some(true),
            auto_pause_time_ms: Some(250),
            auto_pause_disable_if_subscribers: Some(true),
            optimistic_concurrency_control: Some(true),
            ..Default::default()
        });
        let c = d.log_config(&s);
        assert_eq!(c.retention.max_bytes, Some(1000));
        assert_eq!(c.retention.max_age, Some(Duration::from_millis(1500)));
        assert_eq!(c.cleaner_interval, Duration::from_millis(50));
        assert!(c.compact);
        assert!(d.occ(&s));
        assert_eq!(d.auto_pause(&s), (Duration::from_millis(250), true));
        // An explicit 0 age means "no age limit", as on the wire.
        let s0 = stream(StreamConfig {
            retention_max_age_ms: Some(0),
            ..Default::default()
        });
        assert_eq!(d.log_config(&s0).retention.max_age, None);
    }

    /// `clustering.min.insync.replicas` applies to streams without a
    /// `minIsr` of their own; below the minimum a partition is
    /// under-replicated even with every replica in sync.
    #[test]
    fn min_isr_comes_from_the_stream_else_the_server() {
        let d = PartitionDefaults {
            min_insync_replicas: 3,
            ..Default::default()
        };
        let plain = stream(StreamConfig::default());
        let own = stream(StreamConfig {
            min_isr: Some(2),
            ..Default::default()
        });
        let zero = stream(StreamConfig {
            min_isr: Some(0),
            ..Default::default()
        });
        assert_eq!(d.min_isr(&plain), 3);
        assert_eq!(d.min_isr(&own), 2);
        assert_eq!(d.min_isr(&zero), 1);
        let ids = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let p = |replicas: &[&str], isr: &[&str]| PartitionMeta {
            replicas: ids(replicas),
            isr: ids(isr),
            ..Default::default()
        };
        let full = p(&["a", "b", "c"], &["a", "b", "c"]);
        let two = p(&["a", "b", "c"], &["a", "b"]);
        assert!(!d.under_replicated(&plain, &full));
        assert!(d.under_replicated(&plain, &two));
        // All in sync, but fewer replicas than the server's minimum.
        let pair = p(&["a", "b"], &["a", "b"]);
        assert!(d.under_replicated(&plain, &pair));
        assert!(!d.under_replicated(&own, &pair));
        assert_eq!(d.membership(&plain, &two).min_isr, 3);
    }
}
