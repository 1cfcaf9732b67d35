//! [`PartitionLog`]: the handle, its writer thread (group commit) and its
//! cleaner thread (retention and compaction).
//!
//! Invariants:
//! - only the writer thread opens write transactions; it is the single owner
//!   of the in-memory [`State`] and publishes it to [`Shared`] after each
//!   successful commit, before answering any waiter;
//! - a batch is all-or-nothing: if the storage engine fails mid-batch the
//!   transaction is aborted and every waiter of the batch gets the error;
//! - retention and compaction plan in read transactions and send their
//!   deletions to the writer tagged with the truncation generation they were
//!   planned against; the writer drops a plan made stale by a truncation, so
//!   a plan can never delete records appended after it was made;
//! - nothing here runs redb on a tokio worker: async methods hand work to the
//!   writer thread or to `spawn_blocking`.

use std::collections::HashMap;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use parking_lot::{Mutex, RwLock};
use redb::{
    Database, DatabaseError, Durability, ReadTransaction, ReadableTable, StorageError as RedbIo,
    Table, TableDefinition, TableError, WriteTransaction,
};
use tokio::sync::{oneshot, watch};

use super::codec::{self, RecordRef};
use super::{
    AppendResult, CommitStats, CompactionStats, LogConfig, NewRecord, Record, RetentionStats,
    StoreError, SyncPolicy,
};

/// Chunks of records: key = offset of the chunk's first record, value =
/// entries (see [`codec`]). A chunk is never empty and its key always equals
/// its first entry's offset.
const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("chunks");
/// The first layout, one record per value (key = its offset); migrated into
/// [`RECORDS`] when a file that still has it is opened.
const RECORDS_V1: TableDefinition<u64, &[u8]> = TableDefinition::new("records");
const TIME_INDEX: TableDefinition<(i64, u64), ()> = TableDefinition::new("time_index");
const EPOCHS: TableDefinition<u64, u64> = TableDefinition::new("epochs");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

const META_LEO: &str = "leo";
const META_COUNT: &str = "count";
const META_BYTES: &str = "bytes";

/// Sentinel for "no offset" in the published atomics.
const NO_OFFSET: u64 = u64::MAX;
/// Smallest page cache given to redb, whatever the configuration says.
const MIN_CACHE_BYTES: usize = 256 << 10;
/// A group commit stops draining the queue past this many payload bytes, so
/// one transaction stays bounded in memory.
const MAX_BATCH_BYTES: usize = 64 << 20;
/// Records removed per retention transaction: small enough that appends
/// queued meanwhile wait only for one short transaction.
const RETENTION_CHUNK: u64 = 1024;
/// File name suffix of a partition database.
const SUFFIX: &str = ".redb";

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// A request to the writer thread.
enum Op {
    Append {
        epoch: u64,
        expected: Option<u64>,
        records: Vec<NewRecord>,
        reply: Reply<AppendResult>,
    },
    Replicate {
        records: Vec<Record>,
        reply: Reply<AppendResult>,
    },
    Truncate {
        to: u64,
        reply: Reply<()>,
    },
    DeletePrefix {
        before: u64,
        max: u64,
        generation: u64,
        reply: Reply<(u64, u64)>,
    },
    DeleteOffsets {
        offsets: Vec<u64>,
        generation: u64,
        reply: Reply<(u64, u64)>,
    },
    Sync {
        reply: Reply<()>,
    },
}

impl Op {
    fn payload_bytes(&self) -> usize {
        match self {
            Op::Append { records, .. } => records.iter().map(|r| r.value.len() + 64).sum(),
            Op::Replicate { records, .. } => records.iter().map(|r| r.value.len() + 64).sum(),
            Op::DeleteOffsets { offsets, .. } => offsets.len() * 8,
            _ => 64,
        }
    }
}

/// An answer computed inside a transaction, sent only once it committed.
enum Done {
    Append(Reply<AppendResult>, Result<AppendResult, StoreError>),
    Unit(Reply<()>, Result<(), StoreError>),
    Removed(Reply<(u64, u64)>, Result<(u64, u64), StoreError>),
}

/// The answer to an append or a replicated append of the records from
/// `first` up to `leo`. An engine failure `w` is returned as fatal: the
/// writer then aborts the transaction and fails every answer of the batch.
fn appended(
    reply: Reply<AppendResult>,
    first: u64,
    leo: u64,
    w: Result<(), redb::StorageError>,
) -> Result<Done, (Done, Fatal)> {
    let res = Ok(AppendResult {
        first_offset: first,
        last_offset: leo - 1,
    });
    match w {
        Ok(()) => Ok(Done::Append(reply, res)),
        Err(x) => Err((Done::Append(reply, res), x.to_string())),
    }
}

impl Done {
    fn send(self) {
        // A waiter that gave up (dropped its receiver) needs no answer.
        match self {
            Done::Append(tx, r) => drop(tx.send(r)),
            Done::Unit(tx, r) => drop(tx.send(r)),
            Done::Removed(tx, r) => drop(tx.send(r)),
        }
    }
    fn fail(self, e: &StoreError) {
        let err = clone_err(e);
        match self {
            Done::Append(tx, _) => drop(tx.send(Err(err))),
            Done::Unit(tx, _) => drop(tx.send(Err(err))),
            Done::Removed(tx, _) => drop(tx.send(Err(err))),
        }
    }
}

fn clone_err(e: &StoreError) -> StoreError {
    match e {
        StoreError::Storage { partition, detail } => StoreError::Storage {
            partition: partition.clone(),
            detail: detail.clone(),
        },
        other => StoreError::Storage {
            partition: String::new(),
            detail: other.to_string(),
        },
    }
}

/// The log's state, owned by the writer thread.
#[derive(Debug, Clone)]
struct State {
    leo: u64,
    oldest: Option<u64>,
    newest: Option<u64>,
    count: u64,
    bytes: u64,
    /// Running maximum timestamp (the key of the last time-index entry).
    rmax: Option<i64>,
    epochs: Vec<(u64, u64)>,
    generation: u64,
    /// Records and encoded bytes appended since open (metrics).
    appended: (u64, u64),
}

/// State published by the writer for lock-free reads.
struct Shared {
    leo: AtomicU64,
    oldest: AtomicU64,
    newest: AtomicU64,
    count: AtomicU64,
    bytes: AtomicU64,
    generation: AtomicU64,
    epochs: Mutex<Vec<(u64, u64)>>,
    leo_tx: watch::Sender<u64>,
    commits: AtomicU64,
    durable_commits: AtomicU64,
    appended: AtomicU64,
    appended_bytes: AtomicU64,
}

impl Shared {
    fn publish(&self, st: &State) {
        self.oldest
            .store(st.oldest.unwrap_or(NO_OFFSET), Ordering::Release);
        self.newest
            .store(st.newest.unwrap_or(NO_OFFSET), Ordering::Release);
        self.count.store(st.count, Ordering::Release);
        self.bytes.store(st.bytes, Ordering::Release);
        self.generation.store(st.generation, Ordering::Release);
        self.appended.store(st.appended.0, Ordering::Relaxed);
        self.appended_bytes.store(st.appended.1, Ordering::Relaxed);
        {
            let mut e = self.epochs.lock();
            if *e != st.epochs {
                e.clone_from(&st.epochs);
            }
        }
        self.leo.store(st.leo, Ordering::Release);
        self.leo_tx.send_if_modified(|v| {
            let changed = *v != st.leo;
            *v = st.leo;
            changed
        });
    }
}

enum CleanerMsg {
    Wake,
}

struct Inner {
    name: String,
    path: PathBuf,
    db: RwLock<Option<Arc<Database>>>,
    tx: RwLock<Option<mpsc::Sender<Op>>>,
    shared: Arc<Shared>,
    config: Arc<Mutex<LogConfig>>,
    compaction_limit: AtomicU64,
    writer: Mutex<Option<JoinHandle<()>>>,
    cleaner: Mutex<Option<(mpsc::Sender<CleanerMsg>, JoinHandle<()>)>>,
    /// Serialises retention and compaction passes of this partition.
    maintenance: Mutex<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropping the sender lets the writer drain, commit durably and exit;
        // dropping the cleaner's channel stops the cleaner.
        self.tx.write().take();
        self.cleaner.lock().take();
    }
}

/// Handle to one partition's log. Cheap to clone; all clones share one
/// writer. See the module documentation of `store` for the model.
#[derive(Clone)]
pub struct PartitionLog {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PartitionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionLog")
            .field("partition", &self.inner.name)
            .field("path", &self.inner.path)
            .field("leo", &self.log_end_offset())
            .finish()
    }
}

fn check_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.contains('\\')
        || name.contains('\0')
    {
        return Err(StoreError::InvalidName(name.to_owned()));
    }
    Ok(())
}

fn file_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}{SUFFIX}"))
}

use crate::time::now_ns;

/// One entry of [`open_all`]: the partition name and its open result.
pub type OpenedPartition = (String, Result<PartitionLog, StoreError>);

/// Opens every partition database (`*.redb`) found in `dir`. One bad file
/// does not stop the others: each entry carries its own result. A missing
/// directory yields an empty list.
pub fn open_all(dir: &Path, cfg: &LogConfig) -> Result<Vec<OpenedPartition>, StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(StoreError::Io {
                partition: "*".into(),
                path: dir.to_owned(),
                source,
            })
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(SUFFIX).map(str::to_owned)
        })
        .collect();
    names.sort();
    Ok(names
        .into_iter()
        .map(|n| {
            let r = PartitionLog::open_existing(dir, &n, cfg.clone());
            (n, r)
        })
        .collect())
}

impl PartitionLog {
    /// Opens the log of `partition_name` in `dir` (file
    /// `<dir>/<partition_name>.redb`), creating the directory and the file if
    /// missing. Blocking: call from `spawn_blocking` or a plain thread.
    pub fn open(dir: &Path, partition_name: &str, cfg: LogConfig) -> Result<Self, StoreError> {
        Self::open_impl(dir, partition_name, cfg, true)
    }

    /// Like [`open`](Self::open) but fails with [`StoreError::NotFound`] if
    /// the file does not exist (start-up recovery of known partitions).
    pub fn open_existing(
        dir: &Path,
        partition_name: &str,
        cfg: LogConfig,
    ) -> Result<Self, StoreError> {
        Self::open_impl(dir, partition_name, cfg, false)
    }

    fn open_impl(dir: &Path, name: &str, cfg: LogConfig, create: bool) -> Result<Self, StoreError> {
        check_name(name)?;
        let path = file_path(dir, name);
        let io = |source| StoreError::Io {
            partition: name.to_owned(),
            path: path.clone(),
            source,
        };
        if create {
            std::fs::create_dir_all(dir).map_err(io)?;
        } else {
            match std::fs::metadata(&path) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(StoreError::NotFound {
                        partition: name.to_owned(),
                        path,
                    })
                }
                Err(e) => return Err(io(e)),
            }
        }
        if path.is_dir() {
            return Err(io(std::io::Error::other("path is a directory")));
        }
        let corrupt = |detail: String| StoreError::Corrupt {
            partition: name.to_owned(),
            path: path.clone(),
            detail,
        };
        // The engine is not supposed to panic on a bad file, but a corrupt
        // file must never take the process down: treat a panic as corruption.
        let opened = catch_unwind(AssertUnwindSafe(|| {
            let mut b = Database::builder();
            b.set_cache_size(cfg.cache_bytes.max(MIN_CACHE_BYTES));
            if create {
                b.create(&path)
            } else {
                b.open(&path)
            }
        }))
        .map_err(|_| corrupt("storage engine failed while opening the file".into()))?;
        let db = opened.map_err(|e| match e {
            DatabaseError::DatabaseAlreadyOpen => StoreError::Locked {
                partition: name.to_owned(),
                path: path.clone(),
            },
            DatabaseError::Storage(RedbIo::Io(source)) => io(source),
            DatabaseError::Storage(RedbIo::Corrupted(d)) => corrupt(d),
            DatabaseError::UpgradeRequired(v) => {
                corrupt(format!("file format version {v} is not supported"))
            }
            other => corrupt(other.to_string()),
        })?;
        let state = catch_unwind(AssertUnwindSafe(|| load_state(&db)))
            .map_err(|_| corrupt("storage engine failed while loading the log".into()))?
            .map_err(corrupt)?;

        let (leo_tx, _) = watch::channel(state.leo);
        let shared = Arc::new(Shared {
            leo: AtomicU64::new(0),
            oldest: AtomicU64::new(NO_OFFSET),
            newest: AtomicU64::new(NO_OFFSET),
            count: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            epochs: Mutex::new(Vec::new()),
            leo_tx,
            commits: AtomicU64::new(0),
            durable_commits: AtomicU64::new(0),
            appended: AtomicU64::new(0),
            appended_bytes: AtomicU64::new(0),
        });
        shared.publish(&state);
        let db = Arc::new(db);
        let config = Arc::new(Mutex::new(cfg));
        let (tx, rx) = mpsc::channel();
        let writer = Writer {
            name: name.to_owned(),
            db: db.clone(),
            rx,
            shared: shared.clone(),
            config: config.clone(),
            state,
            last_durable: Instant::now(),
            dirty: false,
        };
        let writer = std::thread::Builder::new()
            .name(format!("store-w-{name}"))
            .spawn(move || writer.run())
            .map_err(io)?;
        let inner = Arc::new(Inner {
            name: name.to_owned(),
            path: path.clone(),
            db: RwLock::new(Some(db)),
            tx: RwLock::new(Some(tx)),
            shared,
            config,
            compaction_limit: AtomicU64::new(u64::MAX),
            writer: Mutex::new(Some(writer)),
            cleaner: Mutex::new(None),
            maintenance: Mutex::new(()),
        });
        let (ctx, crx) = mpsc::channel();
        let weak = Arc::downgrade(&inner);
        let cleaner = std::thread::Builder::new()
            .name(format!("store-c-{name}"))
            .spawn(move || cleaner_loop(weak, crx))
            .map_err(io)?;
        *inner.cleaner.lock() = Some((ctx, cleaner));
        Ok(PartitionLog { inner })
    }

    /// Removes the database file of a partition (stream deletion gives the
    /// space back). Close every handle first. A missing file is not an error.
    pub fn delete_files(dir: &Path, partition_name: &str) -> Result<(), StoreError> {
        check_name(partition_name)?;
        let path = file_path(dir, partition_name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StoreError::Io {
                partition: partition_name.to_owned(),
                path,
                source,
            }),
        }
    }

    /// Partition name given at open.
    pub fn partition_name(&self) -> &str {
        &self.inner.name
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn send(&self, op: Op) -> Result<(), StoreError> {
        let guard = self.inner.tx.read();
        let tx = guard.as_ref().ok_or_else(|| self.closed())?;
        tx.send(op).map_err(|_| self.closed())
    }

    fn closed(&self) -> StoreError {
        StoreError::Closed(self.inner.name.clone())
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Op) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx))?;
        rx.await.map_err(|_| self.closed())?
    }

    fn call_now<T: Send + 'static>(
        &self,
        make: impl FnOnce(Reply<T>) -> Op,
    ) -> impl Future<Output = Result<T, StoreError>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let sent = self.send(make(tx));
        let name = self.inner.name.clone();
        async move {
            sent?;
            rx.await.map_err(|_| StoreError::Closed(name))?
        }
    }

    fn call_blocking<T>(&self, make: impl FnOnce(Reply<T>) -> Op) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx))?;
        rx.blocking_recv().map_err(|_| self.closed())?
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&PartitionLog) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(&me))
            .await
            .map_err(|e| StoreError::Storage {
                partition: self.inner.name.clone(),
                detail: format!("blocking task failed: {e}"),
            })?
    }

    /// Appends a batch under `leader_epoch`; offsets are assigned in arrival
    /// order. The batch is queued when this method is called (not when the
    /// future is first polled), so appends issued one after another get
    /// offsets in that order even when their futures are awaited later. The
    /// future completes once the batch is committed (and, with
    /// [`SyncPolicy::Always`], fsynced).
    pub fn append(
        &self,
        leader_epoch: u64,
        records: Vec<NewRecord>,
    ) -> impl Future<Output = Result<AppendResult, StoreError>> + Send + 'static {
        let started = Instant::now();
        let done = self.call_now(move |reply| Op::Append {
            epoch: leader_epoch,
            expected: None,
            records,
            reply,
        });
        async move {
            let r = done.await;
            crate::metrics::store::observe_append(started.elapsed());
            r
        }
    }

    /// Like [`append`](Self::append), but only if the batch would start at
    /// `expected_next_offset` (optimistic concurrency); otherwise
    /// [`StoreError::OffsetMismatch`] and nothing is written.
    pub fn append_expecting(
        &self,
        leader_epoch: u64,
        expected_next_offset: u64,
        records: Vec<NewRecord>,
    ) -> impl Future<Output = Result<AppendResult, StoreError>> + Send + 'static {
        self.call_now(move |reply| Op::Append {
            epoch: leader_epoch,
            expected: Some(expected_next_offset),
            records,
            reply,
        })
    }

    /// Appends records copied from a leader (replication): offsets, epochs and
    /// timestamps are kept. Offsets must increase and start at or past the
    /// log end offset (gaps from compaction are allowed); the log end offset
    /// becomes the last offset + 1.
    pub async fn append_replicated(
        &self,
        records: Vec<Record>,
    ) -> Result<AppendResult, StoreError> {
        self.call(|reply| Op::Replicate { records, reply }).await
    }

    /// Reads records at offsets ≥ `from`, in order, skipping gaps, until
    /// `max_records` or `max_bytes` (encoded size) is reached. At least one
    /// record is returned when one exists and `max_records > 0`, even if it
    /// alone exceeds `max_bytes`. The batch is copied out of the database in
    /// one buffer; record fields are slices of it.
    pub async fn read(
        &self,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>, StoreError> {
        if max_records == 0 || from >= self.log_end_offset() {
            return Ok(Vec::new());
        }
        self.blocking(move |me| me.read_blocking(from, max_records, max_bytes))
            .await
    }

    /// Blocking form of [`read`](Self::read), for threads outside the runtime.
    pub fn read_blocking(
        &self,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>, StoreError> {
        if max_records == 0 {
            return Ok(Vec::new());
        }
        let name = &self.inner.name;
        let spans = self.with_read(|rtx| {
            let mut spans = Vec::new();
            let mut buf = BytesMut::new();
            let Some(t) = open_read(rtx, RECORDS)? else {
                return Ok(Ok((spans, buf)));
            };
            let start = chunk_start(&t, from).map_err(|e| e.to_string())?;
            'chunks: for item in t.range(start..).map_err(|e| e.to_string())? {
                let (k, v) = item.map_err(|e| e.to_string())?;
                let v = v.value();
                for e in codec::chunk_entries(v) {
                    let e = match e {
                        Ok(e) => e,
                        Err(source) => {
                            return Ok(Err(StoreError::CorruptRecord {
                                partition: name.clone(),
                                offset: k.value(),
                                source,
                            }))
                        }
                    };
                    if e.offset < from {
                        continue;
                    }
                    if !spans.is_empty() && buf.len() + e.len() > max_bytes {
                        break 'chunks;
                    }
                    let start = buf.len();
                    buf.extend_from_slice(&v[e.start..e.end]);
                    spans.push((e.offset, start, buf.len()));
                    if spans.len() >= max_records {
                        break 'chunks;
                    }
                }
            }
            Ok(Ok((spans, buf)))
        })??;
        let (spans, buf) = spans;
        let buf = buf.freeze();
        spans
            .into_iter()
            .map(|(offset, s, e)| {
                codec::decode(offset, buf.slice(s..e)).map_err(|source| StoreError::CorruptRecord {
                    partition: name.clone(),
                    offset,
                    source,
                })
            })
            .collect()
    }

    fn db(&self) -> Result<Arc<Database>, StoreError> {
        self.inner.db.read().clone().ok_or_else(|| self.closed())
    }

    /// Runs `f` in a read transaction, turning engine errors and panics into
    /// [`StoreError::Storage`].
    fn with_read<T>(
        &self,
        f: impl FnOnce(&ReadTransaction) -> Result<T, String>,
    ) -> Result<T, StoreError> {
        let db = self.db()?;
        let storage = |detail: String| StoreError::Storage {
            partition: self.inner.name.clone(),
            detail,
        };
        catch_unwind(AssertUnwindSafe(|| {
            let rtx = db.begin_read().map_err(|e| e.to_string())?;
            f(&rtx)
        }))
        .map_err(|_| storage("storage engine failed during a read".into()))?
        .map_err(storage)
    }

    /// First offset whose timestamp is ≥ `ts_ns` (precisely: whose running
    /// maximum timestamp over the log is ≥ `ts_ns`, which is the same when
    /// timestamps do not go backwards), or `None` if there is none.
    pub async fn offset_for_timestamp(&self, ts_ns: i64) -> Result<Option<u64>, StoreError> {
        self.blocking(move |me| me.with_read(|rtx| offset_for_ts(rtx, ts_ns)))
            .await
    }

    /// Next offset to assign (log end offset).
    pub fn log_end_offset(&self) -> u64 {
        self.inner.shared.leo.load(Ordering::Acquire)
    }

    /// Oldest offset present, `None` when the log holds no record.
    pub fn oldest_offset(&self) -> Option<u64> {
        opt(self.inner.shared.oldest.load(Ordering::Acquire))
    }

    /// Newest offset present, `None` when the log holds no record.
    pub fn newest_offset(&self) -> Option<u64> {
        opt(self.inner.shared.newest.load(Ordering::Acquire))
    }

    /// Number of records present.
    pub fn record_count(&self) -> u64 {
        self.inner.shared.count.load(Ordering::Acquire)
    }

    /// Total encoded bytes of the records present.
    pub fn record_bytes(&self) -> u64 {
        self.inner.shared.bytes.load(Ordering::Acquire)
    }

    /// Commits made by the writer since open (for metrics and benchmarks).
    pub fn commit_stats(&self) -> CommitStats {
        CommitStats {
            commits: self.inner.shared.commits.load(Ordering::Relaxed),
            durable_commits: self.inner.shared.durable_commits.load(Ordering::Relaxed),
            appended_records: self.inner.shared.appended.load(Ordering::Relaxed),
            appended_bytes: self.inner.shared.appended_bytes.load(Ordering::Relaxed),
        }
    }

    /// Watches the log end offset: changes on every committed append or
    /// truncation (wait for new data without polling).
    pub fn subscribe_end(&self) -> watch::Receiver<u64> {
        self.inner.shared.leo_tx.subscribe()
    }

    /// Removes every offset ≥ `to_offset` (replication divergence) and the
    /// epoch-cache entries starting there. A no-op if `to_offset` ≥ LEO.
    pub async fn truncate(&self, to_offset: u64) -> Result<(), StoreError> {
        self.call(|reply| Op::Truncate {
            to: to_offset,
            reply,
        })
        .await
    }

    /// Replication hook: compaction never touches offsets ≥ `offset` (set it
    /// to the high watermark). Default: no limit (whole log).
    pub fn set_compaction_limit(&self, offset: u64) {
        self.inner.compaction_limit.store(offset, Ordering::Release);
    }

    /// First offset written under `epoch`, if that epoch is in the cache.
    pub fn epoch_start_offset(&self, epoch: u64) -> Option<u64> {
        self.inner
            .shared
            .epochs
            .lock()
            .iter()
            .find(|(e, _)| *e == epoch)
            .map(|(_, o)| *o)
    }

    /// Kafka-style "end offset for leader epoch": the start offset of the
    /// first epoch greater than `epoch`, or the LEO if `epoch` is the latest
    /// (or later). `None` if no epoch is known.
    pub fn epoch_end_offset(&self, epoch: u64) -> Option<u64> {
        let epochs = self.inner.shared.epochs.lock();
        let last = epochs.last()?;
        if epoch >= last.0 {
            return Some(self.log_end_offset());
        }
        epochs.iter().find(|(e, _)| *e > epoch).map(|(_, o)| *o)
    }

    /// The persisted leader-epoch cache: (epoch, first offset), ascending.
    pub fn leader_epochs(&self) -> Vec<(u64, u64)> {
        self.inner.shared.epochs.lock().clone()
    }

    /// Applies the retention limits now (wall clock).
    pub async fn enforce_retention(&self) -> Result<RetentionStats, StoreError> {
        self.enforce_retention_at(now_ns()).await
    }

    /// Applies the retention limits as if the time were `now_ns` (for tests
    /// and for callers with their own clock).
    pub async fn enforce_retention_at(&self, now_ns: i64) -> Result<RetentionStats, StoreError> {
        self.blocking(move |me| me.retention_blocking(now_ns)).await
    }

    /// Runs one key-based compaction pass now (whether or not compaction is
    /// enabled in the config).
    pub async fn compact(&self) -> Result<CompactionStats, StoreError> {
        self.blocking(|me| me.compact_blocking()).await
    }

    /// Forces a durable commit now (useful with [`SyncPolicy::Interval`]).
    pub async fn sync(&self) -> Result<(), StoreError> {
        self.call(|reply| Op::Sync { reply }).await
    }

    /// Replaces the configuration; the writer and the cleaner pick it up at
    /// their next step.
    pub fn update_config(&self, cfg: LogConfig) {
        *self.inner.config.lock() = cfg;
        if let Some((tx, _)) = self.inner.cleaner.lock().as_ref() {
            // The cleaner may be gone (closing): nothing to wake then.
            let _ = tx.send(CleanerMsg::Wake);
        }
    }

    /// Current configuration.
    pub fn config(&self) -> LogConfig {
        self.inner.config.lock().clone()
    }

    /// Size of the database file on disk, in bytes.
    pub fn disk_size(&self) -> u64 {
        std::fs::metadata(&self.inner.path)
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// Commits durably, stops the writer and the cleaner and releases the
    /// file. Other clones see [`StoreError::Closed`] afterwards.
    pub async fn close(&self) -> Result<(), StoreError> {
        let synced = self.sync().await;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.shutdown())
            .await
            .map_err(|e| StoreError::Storage {
                partition: self.inner.name.clone(),
                detail: format!("close task failed: {e}"),
            })?;
        match synced {
            Err(StoreError::Closed(_)) => Ok(()),
            other => other,
        }
    }

    fn retention_blocking(&self, now: i64) -> Result<RetentionStats, StoreError> {
        let _g = self.inner.maintenance.lock();
        let policy = self.inner.config.lock().retention;
        let generation = self.inner.shared.generation.load(Ordering::Acquire);
        let cut = self.with_read(|rtx| {
            let Some(meta) = open_read(rtx, META)? else {
                return Ok(None);
            };
            let get = |k: &str| -> Result<u64, String> {
                Ok(meta
                    .get(k)
                    .map_err(|e| e.to_string())?
                    .map(|v| v.value())
                    .unwrap_or(0))
            };
            let (leo, count, bytes) = (get(META_LEO)?, get(META_COUNT)?, get(META_BYTES)?);
            let need_n = policy.max_messages.map_or(0, |m| count.saturating_sub(m));
            let need_b = policy.max_bytes.map_or(0, |m| bytes.saturating_sub(m));
            let age_cut = match policy.max_age {
                Some(age) => {
                    let limit =
                        now.saturating_sub(i64::try_from(age.as_nanos()).unwrap_or(i64::MAX));
                    offset_for_ts(rtx, limit)?.unwrap_or(leo)
                }
                None => 0,
            };
            if need_n == 0 && need_b == 0 && age_cut == 0 {
                return Ok(None);
            }
            let Some(t) = open_read(rtx, RECORDS)? else {
                return Ok(None);
            };
            let (mut n, mut b) = (0u64, 0u64);
            for item in t.iter().map_err(|e| e.to_string())? {
                let (k, v) = item.map_err(|e| e.to_string())?;
                for e in codec::chunk_entries(v.value()) {
                    let e = e.map_err(|e| corrupt_chunk(k.value(), e).to_string())?;
                    if n < need_n || b < need_b || e.offset < age_cut {
                        n += 1;
                        b += e.len() as u64;
                    } else {
                        return Ok(Some(e.offset));
                    }
                }
            }
            Ok(Some(leo))
        })?;
        let mut stats = RetentionStats::default();
        if let Some(before) = cut {
            loop {
                let (n, b) = self.call_blocking(|reply| Op::DeletePrefix {
                    before,
                    max: RETENTION_CHUNK,
                    generation,
                    reply,
                })?;
                stats.removed_records += n;
                stats.removed_bytes += b;
                if n < RETENTION_CHUNK {
                    break;
                }
            }
        }
        stats.oldest_offset = self.oldest_offset();
        crate::metrics::store::retention_run(stats.removed_records);
        Ok(stats)
    }

    fn compact_blocking(&self) -> Result<CompactionStats, StoreError> {
        let _g = self.inner.maintenance.lock();
        let generation = self.inner.shared.generation.load(Ordering::Acquire);
        let limit = self.inner.compaction_limit.load(Ordering::Acquire);
        let name = self.inner.name.clone();
        let (scanned, doomed) = self.with_read(|rtx| {
            let Some(t) = open_read(rtx, RECORDS)? else {
                return Ok(Ok((0, Vec::new())));
            };
            let mut latest: HashMap<Vec<u8>, u64> = HashMap::new();
            let mut doomed = Vec::new();
            let mut scanned = 0u64;
            for item in t.range(..limit).map_err(|e| e.to_string())? {
                let (k, v) = item.map_err(|e| e.to_string())?;
                let v = v.value();
                for e in codec::chunk_entries(v) {
                    let (offset, key) = match e
                        .and_then(|e| Ok((e.offset, codec::peek_key(&v[e.start..e.end])?)))
                    {
                        Ok((o, _)) if o >= limit => break,
                        Ok((o, Some(key))) => (o, key),
                        Ok((_, None)) => {
                            scanned += 1;
                            continue;
                        }
                        Err(source) => {
                            return Ok(Err(StoreError::CorruptRecord {
                                partition: name.clone(),
                                offset: k.value(),
                                source,
                            }))
                        }
                    };
                    scanned += 1;
                    if let Some(prev) = latest.get_mut(key) {
                        doomed.push(*prev);
                        *prev = offset;
                    } else {
                        latest.insert(key.to_vec(), offset);
                    }
                }
            }
            Ok(Ok((scanned, doomed)))
        })??;
        let mut stats = CompactionStats {
            scanned_records: scanned,
            ..Default::default()
        };
        if !doomed.is_empty() {
            let (n, b) = self.call_blocking(|reply| Op::DeleteOffsets {
                offsets: doomed,
                generation,
                reply,
            })?;
            stats.removed_records = n;
            stats.removed_bytes = b;
        }
        crate::metrics::store::compaction_run(stats.removed_records);
        Ok(stats)
    }
}

impl Inner {
    /// Stops the writer (after it drained and committed) and the cleaner, then
    /// releases the database so the file can be reopened or removed.
    fn shutdown(&self) {
        self.tx.write().take();
        if let Some(w) = self.writer.lock().take() {
            // A writer that panicked has nothing more to clean up.
            let _ = w.join();
        }
        let cleaner = self.cleaner.lock().take();
        if let Some((tx, handle)) = cleaner {
            drop(tx);
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
        self.db.write().take();
    }
}

fn opt(v: u64) -> Option<u64> {
    (v != NO_OFFSET).then_some(v)
}

fn open_read<K: redb::Key + 'static, V: redb::Value + 'static>(
    rtx: &ReadTransaction,
    def: TableDefinition<K, V>,
) -> Result<Option<redb::ReadOnlyTable<K, V>>, String> {
    match rtx.open_table(def) {
        Ok(t) => Ok(Some(t)),
        Err(TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

fn offset_for_ts(rtx: &ReadTransaction, ts: i64) -> Result<Option<u64>, String> {
    let Some(index) = open_read(rtx, TIME_INDEX)? else {
        return Ok(None);
    };
    let Some(first) = index.range((ts, 0u64)..).map_err(|e| e.to_string())?.next() else {
        return Ok(None);
    };
    let (_, at) = first.map_err(|e| e.to_string())?.0.value();
    let Some(records) = open_read(rtx, RECORDS)? else {
        return Ok(None);
    };
    first_at_or_after(&records, at).map_err(|e| e.to_string())
}

/// First offset present that is ≥ `at`.
fn first_at_or_after<T: ReadableTable<u64, &'static [u8]>>(
    t: &T,
    at: u64,
) -> Result<Option<u64>, redb::StorageError> {
    let start = chunk_start(t, at)?;
    for item in t.range(start..)? {
        let (k, v) = item?;
        for e in codec::chunk_entries(v.value()) {
            let e = e.map_err(|e| corrupt_chunk(k.value(), e))?;
            if e.offset >= at {
                return Ok(Some(e.offset));
            }
        }
    }
    Ok(None)
}

/// Moves the records of a file written with the first layout (one record
/// per value, table `records`) into chunks, in the transaction that opens
/// the log; the record encoding itself is the same in both layouts.
fn migrate_v1(txn: &WriteTransaction) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let mut chunks = txn.open_table(RECORDS).map_err(|x| e(&x))?;
    let old_len = {
        let old = txn.open_table(RECORDS_V1).map_err(|x| e(&x))?;
        let mut chunk = Vec::new();
        let mut first = None;
        let mut count = 0;
        let mut total = 0u64;
        for item in old.iter().map_err(|x| e(&x))? {
            total += 1;
            let (k, v) = item.map_err(|x| e(&x))?;
            let v = v.value();
            let len = u32::try_from(v.len())
                .map_err(|_| format!("record at offset {} is too large", k.value()))?;
            if count > 0
                && (count >= codec::CHUNK_RECORDS || chunk.len() + v.len() > codec::CHUNK_BYTES)
            {
                if let Some(f) = first.take() {
                    chunks.insert(f, chunk.as_slice()).map_err(|x| e(&x))?;
                }
                chunk.clear();
                count = 0;
            }
            first.get_or_insert(k.value());
            let mut h = [0; codec::ENTRY_HEADER];
            codec::put_entry_header(&mut h, k.value(), len);
            chunk.extend_from_slice(&h);
            chunk.extend_from_slice(v);
            count += 1;
        }
        if let Some(f) = first {
            chunks.insert(f, chunk.as_slice()).map_err(|x| e(&x))?;
        }
        total
    };
    drop(chunks);
    txn.delete_table(RECORDS_V1).map_err(|x| e(&x))?;
    if old_len > 0 {
        tracing::info!(
            records = old_len,
            "moved records of the first layout into chunks"
        );
    }
    Ok(())
}

/// Creates the tables if needed and reads the state without scanning.
fn load_state(db: &Database) -> Result<State, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mut txn = db.begin_write().map_err(|x| e(&x))?;
    txn.set_quick_repair(true);
    migrate_v1(&txn)?;
    let state = {
        let records = txn.open_table(RECORDS).map_err(|x| e(&x))?;
        let index = txn.open_table(TIME_INDEX).map_err(|x| e(&x))?;
        let epochs = txn.open_table(EPOCHS).map_err(|x| e(&x))?;
        let meta = txn.open_table(META).map_err(|x| e(&x))?;
        let get = |k: &str| -> Result<u64, String> {
            Ok(meta
                .get(k)
                .map_err(|x| e(&x))?
                .map(|v| v.value())
                .unwrap_or(0))
        };
        let oldest = records.first().map_err(|x| e(&x))?.map(|(k, _)| k.value());
        let newest = last_offset(&records).map_err(|x| e(&x))?;
        let rmax = index.last().map_err(|x| e(&x))?.map(|(k, _)| k.value().0);
        let mut ep = Vec::new();
        for item in epochs.iter().map_err(|x| e(&x))? {
            let (k, v) = item.map_err(|x| e(&x))?;
            ep.push((k.value(), v.value()));
        }
        let mut leo = get(META_LEO)?;
        if let Some(n) = newest {
            if leo <= n {
                return Err(format!(
                    "log end offset {leo} is not past the newest record {n}"
                ));
            }
        }
        if let Some(o) = oldest {
            leo = leo.max(o + 1);
        }
        State {
            leo,
            oldest,
            newest,
            count: get(META_COUNT)?,
            bytes: get(META_BYTES)?,
            rmax,
            epochs: ep,
            generation: 0,
            appended: (0, 0),
        }
    };
    txn.commit().map_err(|x| e(&x))?;
    Ok(state)
}

fn cleaner_loop(weak: Weak<Inner>, rx: mpsc::Receiver<CleanerMsg>) {
    loop {
        let interval = match weak.upgrade() {
            Some(inner) => inner.config.lock().cleaner_interval,
            None => return,
        };
        match rx.recv_timeout(interval.max(Duration::from_millis(10))) {
            Ok(CleanerMsg::Wake) => continue,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        let Some(inner) = weak.upgrade() else { return };
        let log = PartitionLog { inner };
        let cfg = log.config();
        let r = cfg.retention;
        if r.max_age.is_some() || r.max_bytes.is_some() || r.max_messages.is_some() {
            if let Err(e) = log.retention_blocking(now_ns()) {
                tracing::warn!(partition = %log.inner.name, error = %e, "retention failed");
            }
        }
        if cfg.compact {
            if let Err(e) = log.compact_blocking() {
                tracing::warn!(partition = %log.inner.name, error = %e, "compaction failed");
            }
        }
    }
}

/// The storage writer: sole owner of write transactions for one database.
struct Writer {
    name: String,
    db: Arc<Database>,
    rx: mpsc::Receiver<Op>,
    shared: Arc<Shared>,
    config: Arc<Mutex<LogConfig>>,
    state: State,
    last_durable: Instant,
    /// Non-durable commits exist since the last durable one.
    dirty: bool,
}

struct Tables<'t> {
    records: Table<'t, u64, &'static [u8]>,
    index: Table<'t, (i64, u64), ()>,
    epochs: Table<'t, u64, u64>,
    meta: Table<'t, &'static str, u64>,
}

type Fatal = String;

impl Writer {
    fn run(mut self) {
        loop {
            let interval = match self.config.lock().sync {
                SyncPolicy::Interval(d) => Some(d),
                SyncPolicy::Always => None,
            };
            let first = match (self.dirty, interval) {
                (true, Some(d)) => {
                    let wait = (self.last_durable + d).saturating_duration_since(Instant::now());
                    match self.rx.recv_timeout(wait) {
                        Ok(op) => Some(op),
                        Err(mpsc::RecvTimeoutError::Timeout) => None,
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                _ => match self.rx.recv() {
                    Ok(op) => Some(op),
                    Err(_) => break,
                },
            };
            let mut batch = Vec::new();
            if let Some(op) = first {
                let mut bytes = op.payload_bytes();
                batch.push(op);
                while bytes < MAX_BATCH_BYTES {
                    match self.rx.try_recv() {
                        Ok(op) => {
                            bytes += op.payload_bytes();
                            batch.push(op);
                        }
                        Err(_) => break,
                    }
                }
            }
            self.commit_batch(batch);
        }
        if self.dirty {
            self.commit_batch(Vec::new());
            if self.dirty {
                tracing::error!(partition = %self.name, "final durable commit failed");
            }
        }
    }

    /// Applies `batch` in one transaction and answers every op. An empty
    /// batch is a durable commit of what non-durable commits left pending.
    fn commit_batch(&mut self, batch: Vec<Op>) {
        let force = batch.is_empty() || batch.iter().any(|op| matches!(op, Op::Sync { .. }));
        let durable = force
            || match self.config.lock().sync {
                SyncPolicy::Always => true,
                SyncPolicy::Interval(d) => self.last_durable.elapsed() >= d,
            };
        let mut st = self.state.clone();
        let mut done = Vec::with_capacity(batch.len());
        let started = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| {
            self.transact(batch, &mut st, &mut done, durable)
        }))
        .unwrap_or_else(|_| Err("storage engine failed during a write".into()));
        match result {
            Ok(()) => {
                let appended = st.appended.0 - self.state.appended.0;
                crate::metrics::store::observe_commit(appended, started.elapsed(), durable);
                self.state = st;
                self.shared.publish(&self.state);
                self.shared.commits.fetch_add(1, Ordering::Relaxed);
                if durable {
                    self.shared.durable_commits.fetch_add(1, Ordering::Relaxed);
                    self.last_durable = Instant::now();
                    self.dirty = false;
                } else {
                    self.dirty = true;
                }
                for d in done {
                    d.send();
                }
            }
            Err(detail) => {
                tracing::error!(partition = %self.name, %detail, "write transaction failed");
                let err = StoreError::Storage {
                    partition: self.name.clone(),
                    detail,
                };
                for d in done {
                    d.fail(&err);
                }
            }
        }
    }

    fn transact(
        &self,
        batch: Vec<Op>,
        st: &mut State,
        done: &mut Vec<Done>,
        durable: bool,
    ) -> Result<(), Fatal> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let mut txn: WriteTransaction = self.db.begin_write().map_err(|x| e(&x))?;
        if durable {
            txn.set_durability(Durability::Immediate);
            txn.set_quick_repair(true);
        } else {
            txn.set_durability(Durability::None);
        }
        let mut fatal = None;
        {
            let mut t = Tables {
                records: txn.open_table(RECORDS).map_err(|x| e(&x))?,
                index: txn.open_table(TIME_INDEX).map_err(|x| e(&x))?,
                epochs: txn.open_table(EPOCHS).map_err(|x| e(&x))?,
                meta: txn.open_table(META).map_err(|x| e(&x))?,
            };
            let before = (st.leo, st.count, st.bytes);
            for op in batch {
                if fatal.is_some() {
                    done.push(failed(op));
                    continue;
                }
                match self.apply(&mut t, st, op) {
                    Ok(d) => done.push(d),
                    Err((d, f)) => {
                        done.push(d);
                        fatal = Some(f);
                    }
                }
            }
            if fatal.is_none() && before != (st.leo, st.count, st.bytes) {
                let r = (|| -> Result<(), redb::StorageError> {
                    t.meta.insert(META_LEO, st.leo)?;
                    t.meta.insert(META_COUNT, st.count)?;
                    t.meta.insert(META_BYTES, st.bytes)?;
                    Ok(())
                })();
                if let Err(x) = r {
                    fatal = Some(x.to_string());
                }
            }
        }
        if let Some(f) = fatal {
            // Aborting cannot make things worse; its own error adds nothing.
            let _ = txn.abort();
            return Err(f);
        }
        let committing = Instant::now();
        txn.commit().map_err(|x| e(&x))?;
        if durable {
            crate::metrics::store::observe_fsync(committing.elapsed());
        }
        Ok(())
    }

    /// Applies one op. `Err` means the engine failed and the transaction must
    /// be aborted; logical refusals are `Ok` with an error answer.
    fn apply(&self, t: &mut Tables<'_>, st: &mut State, op: Op) -> Result<Done, (Done, Fatal)> {
        match op {
            Op::Append {
                epoch,
                expected,
                records,
                reply,
            } => {
                let r = self.check_append(st, epoch, expected, &records);
                if let Err(err) = r {
                    return Ok(Done::Append(reply, Err(err)));
                }
                let first = st.leo;
                let w = (|| -> Result<(), redb::StorageError> {
                    note_epoch(t, st, epoch, first)?;
                    let refs: Vec<(u64, RecordRef<'_>)> = records
                        .iter()
                        .enumerate()
                        .map(|(i, r)| (first + i as u64, RecordRef::from_new(r, epoch)))
                        .collect();
                    put_records(t, st, &refs)
                })();
                appended(reply, first, st.leo, w)
            }
            Op::Replicate { records, reply } => {
                if let Err(err) = self.check_replicated(st, &records) {
                    return Ok(Done::Append(reply, Err(err)));
                }
                let first = records.first().map_or(st.leo, |r| r.offset);
                let w = (|| -> Result<(), redb::StorageError> {
                    for r in &records {
                        note_epoch(t, st, r.leader_epoch, r.offset)?;
                    }
                    let refs: Vec<(u64, RecordRef<'_>)> = records
                        .iter()
                        .map(|r| (r.offset, RecordRef::from_record(r)))
                        .collect();
                    put_records(t, st, &refs)
                })();
                appended(reply, first, st.leo, w)
            }
            Op::Truncate { to, reply } => match truncate(t, st, to) {
                Ok(()) => Ok(Done::Unit(reply, Ok(()))),
                Err(x) => Err((Done::Unit(reply, Ok(())), x.to_string())),
            },
            Op::DeletePrefix {
                before,
                max,
                generation,
                reply,
            } => {
                if generation != st.generation {
                    return Ok(Done::Removed(reply, Ok((0, 0))));
                }
                match delete_prefix(t, st, before, max) {
                    Ok(r) => Ok(Done::Removed(reply, Ok(r))),
                    Err(x) => Err((Done::Removed(reply, Ok((0, 0))), x.to_string())),
                }
            }
            Op::DeleteOffsets {
                offsets,
                generation,
                reply,
            } => {
                if generation != st.generation {
                    return Ok(Done::Removed(reply, Ok((0, 0))));
                }
                match delete_offsets(t, st, &offsets) {
                    Ok(r) => Ok(Done::Removed(reply, Ok(r))),
                    Err(x) => Err((Done::Removed(reply, Ok((0, 0))), x.to_string())),
                }
            }
            Op::Sync { reply } => Ok(Done::Unit(reply, Ok(()))),
        }
    }

    fn check_append(
        &self,
        st: &State,
        epoch: u64,
        expected: Option<u64>,
        records: &[NewRecord],
    ) -> Result<(), StoreError> {
        if let Some(exp) = expected {
            if exp != st.leo {
                return Err(StoreError::OffsetMismatch {
                    expected: exp,
                    actual: st.leo,
                });
            }
        }
        if records.is_empty() {
            return Err(StoreError::EmptyBatch);
        }
        if let Some(&(latest, _)) = st.epochs.last() {
            if epoch < latest {
                return Err(StoreError::StaleEpoch { epoch, latest });
            }
        }
        for r in records {
            codec::validate(&RecordRef::from_new(r, epoch)).map_err(|source| {
                StoreError::Encode {
                    partition: self.name.clone(),
                    source,
                }
            })?;
        }
        Ok(())
    }

    fn check_replicated(&self, st: &State, records: &[Record]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Err(StoreError::EmptyBatch);
        }
        let mut next = st.leo;
        let mut latest = st.epochs.last().map_or(0, |e| e.0);
        for r in records {
            // u64::MAX is reserved: the log end offset must stay representable.
            if r.offset < next || r.offset == u64::MAX {
                return Err(StoreError::OffsetOutOfOrder {
                    offset: r.offset,
                    next,
                });
            }
            if r.leader_epoch < latest {
                return Err(StoreError::StaleEpoch {
                    epoch: r.leader_epoch,
                    latest,
                });
            }
            codec::validate(&RecordRef::from_record(r)).map_err(|source| StoreError::Encode {
                partition: self.name.clone(),
                source,
            })?;
            latest = r.leader_epoch;
            next = r.offset.saturating_add(1);
        }
        Ok(())
    }
}

fn failed(op: Op) -> Done {
    match op {
        Op::Append { reply, .. } | Op::Replicate { reply, .. } => {
            Done::Append(reply, Err(StoreError::EmptyBatch))
        }
        Op::Truncate { reply, .. } | Op::Sync { reply } => Done::Unit(reply, Ok(())),
        Op::DeletePrefix { reply, .. } | Op::DeleteOffsets { reply, .. } => {
            Done::Removed(reply, Ok((0, 0)))
        }
    }
}

fn note_epoch(
    t: &mut Tables<'_>,
    st: &mut State,
    epoch: u64,
    offset: u64,
) -> Result<(), redb::StorageError> {
    if st.epochs.last().is_none_or(|&(e, _)| epoch > e) {
        t.epochs.insert(epoch, offset)?;
        st.epochs.push((epoch, offset));
    }
    Ok(())
}

/// Writes records (offsets increasing, at or past the log end) as chunks
/// of up to [`codec::CHUNK_RECORDS`] records or [`codec::CHUNK_BYTES`]
/// bytes: one B-tree insert per chunk.
fn put_records(
    t: &mut Tables<'_>,
    st: &mut State,
    recs: &[(u64, RecordRef<'_>)],
) -> Result<(), redb::StorageError> {
    let lens: Vec<usize> = recs.iter().map(|(_, r)| codec::encoded_len(r)).collect();
    let mut i = 0;
    while i < recs.len() {
        let mut j = i;
        let mut size = 0usize;
        while j < recs.len() && j - i < codec::CHUNK_RECORDS {
            let add = codec::ENTRY_HEADER + lens[j];
            if j > i && size + add > codec::CHUNK_BYTES {
                break;
            }
            size += add;
            j += 1;
        }
        let size32 = u32::try_from(size).map_err(|_| redb::StorageError::ValueTooLarge(size))?;
        {
            let mut slot = t.records.insert_reserve(recs[i].0, size32)?;
            let out = slot.as_mut();
            let mut pos = 0;
            for ((offset, r), &len) in recs[i..j].iter().zip(&lens[i..j]) {
                // `len` fits in u32: the whole chunk does.
                codec::put_entry_header(&mut out[pos..], *offset, len as u32);
                pos += codec::ENTRY_HEADER;
                codec::encode_into(r, &mut out[pos..pos + len]);
                pos += len;
            }
        }
        for ((offset, r), &len) in recs[i..j].iter().zip(&lens[i..j]) {
            if st.rmax.is_none_or(|m| r.timestamp_ns > m) {
                t.index.insert((r.timestamp_ns, *offset), ())?;
                st.rmax = Some(r.timestamp_ns);
            }
            st.count += 1;
            st.bytes += len as u64;
            st.appended = (st.appended.0 + 1, st.appended.1 + len as u64);
            if st.oldest.is_none() {
                st.oldest = Some(*offset);
            }
            st.newest = Some(*offset);
            st.leo = offset + 1;
        }
        i = j;
    }
    Ok(())
}

/// A chunk's bytes, copied out of the table (so the table can be changed
/// while they are looked at), with its decoded entries.
struct OwnedChunk {
    key: u64,
    bytes: Vec<u8>,
    entries: Vec<codec::Entry>,
}

fn corrupt_chunk(key: u64, e: codec::CodecError) -> redb::StorageError {
    redb::StorageError::Corrupted(format!("record chunk at offset {key}: {e}"))
}

/// One item of a redb iteration over the chunk table.
type ChunkItem<'a> = Option<
    Result<
        (
            redb::AccessGuard<'a, u64>,
            redb::AccessGuard<'a, &'static [u8]>,
        ),
        redb::StorageError,
    >,
>;

fn owned_chunk(item: ChunkItem<'_>) -> Result<Option<OwnedChunk>, redb::StorageError> {
    let Some(item) = item else { return Ok(None) };
    let (k, v) = item?;
    let key = k.value();
    let bytes = v.value().to_vec();
    let entries = codec::chunk_entry_list(&bytes).map_err(|e| corrupt_chunk(key, e))?;
    Ok(Some(OwnedChunk {
        key,
        bytes,
        entries,
    }))
}

/// Offset of the last record in the table, if any.
fn last_offset<T: ReadableTable<u64, &'static [u8]>>(
    t: &T,
) -> Result<Option<u64>, redb::StorageError> {
    let Some(item) = t.last()? else {
        return Ok(None);
    };
    let (k, v) = item;
    let key = k.value();
    let mut last = None;
    for e in codec::chunk_entries(v.value()) {
        last = Some(e.map_err(|e| corrupt_chunk(key, e))?.offset);
    }
    Ok(last)
}

/// Key of the chunk that may hold `offset`: the last chunk starting at or
/// before it, or `offset` itself when there is none.
fn chunk_start<T: ReadableTable<u64, &'static [u8]>>(
    t: &T,
    offset: u64,
) -> Result<u64, redb::StorageError> {
    match t.range(..=offset)?.next_back() {
        Some(item) => Ok(item?.0.value()),
        None => Ok(offset),
    }
}

/// Replaces chunk `c` by the entries `keep` selects (removing it if none).
/// Returns the records and bytes removed.
fn rewrite_chunk(
    t: &mut Tables<'_>,
    c: &OwnedChunk,
    keep: impl Fn(&codec::Entry) -> bool,
) -> Result<(u64, u64), redb::StorageError> {
    let (mut n, mut b) = (0u64, 0u64);
    for e in c.entries.iter().filter(|e| !keep(e)) {
        n += 1;
        b += e.len() as u64;
    }
    if n == 0 {
        return Ok((0, 0));
    }
    t.records.remove(c.key)?;
    if let Some((first, bytes)) = codec::rebuild_chunk(&c.bytes, &c.entries, keep) {
        t.records.insert(first, bytes.as_slice())?;
    }
    Ok((n, b))
}

fn truncate(t: &mut Tables<'_>, st: &mut State, to: u64) -> Result<(), redb::StorageError> {
    if to >= st.leo {
        return Ok(());
    }
    let (mut n, mut b) = (0u64, 0u64);
    t.records.retain_in(to.., |_, v| {
        for e in codec::chunk_entries(v).flatten() {
            n += 1;
            b += e.len() as u64;
        }
        false
    })?;
    // The chunk before `to` may hold records at or past it.
    let before = owned_chunk(t.records.range(..to)?.next_back())?;
    if let Some(c) = before {
        let (cn, cb) = rewrite_chunk(t, &c, |e| e.offset < to)?;
        n += cn;
        b += cb;
    }
    loop {
        let last = t.index.last()?.map(|(k, _)| k.value().1);
        match last {
            Some(o) if o >= to => drop(t.index.pop_last()?),
            _ => break,
        }
    }
    loop {
        let last = t.epochs.last()?.map(|(_, v)| v.value());
        match last {
            Some(start) if start >= to => drop(t.epochs.pop_last()?),
            _ => break,
        }
    }
    st.epochs.retain(|&(_, s)| s < to);
    st.rmax = t.index.last()?.map(|(k, _)| k.value().0);
    st.count = st.count.saturating_sub(n);
    st.bytes = st.bytes.saturating_sub(b);
    st.leo = to;
    st.oldest = t.records.first()?.map(|(k, _)| k.value());
    st.newest = last_offset(&t.records)?;
    st.generation += 1;
    Ok(())
}

fn delete_prefix(
    t: &mut Tables<'_>,
    st: &mut State,
    before: u64,
    max: u64,
) -> Result<(u64, u64), redb::StorageError> {
    let (mut n, mut b) = (0u64, 0u64);
    while n < max {
        let Some(c) = owned_chunk(t.records.first()?.map(Ok))? else {
            break;
        };
        if c.key >= before {
            break;
        }
        // Remove the chunk's records below `before`, within the quota: a
        // prefix of its entries, since offsets increase.
        let below = c.entries.partition_point(|e| e.offset < before);
        let k = below.min(usize::try_from(max - n).unwrap_or(usize::MAX));
        let first_kept = c.entries.get(k).map(|e| e.offset);
        let (cn, cb) = rewrite_chunk(t, &c, |e| first_kept.is_some_and(|f| e.offset >= f))?;
        n += cn;
        b += cb;
        if first_kept.is_some() {
            // A record stays in this chunk: it is at or past `before`, or
            // over the quota.
            break;
        }
    }
    st.count = st.count.saturating_sub(n);
    st.bytes = st.bytes.saturating_sub(b);
    st.oldest = t.records.first()?.map(|(k, _)| k.value());
    if st.oldest.is_none() {
        st.newest = None;
    }
    // Keep the last index entry at or below the new oldest offset: it still
    // gives the running maximum of the offsets that follow it.
    let bound = st.oldest.unwrap_or(st.leo);
    let mut stale = Vec::new();
    let mut prev = None;
    for item in t.index.iter()? {
        let (k, _) = item?;
        let key = k.value();
        if key.1 > bound {
            break;
        }
        if let Some(p) = prev.replace(key) {
            stale.push(p);
        }
    }
    for k in stale {
        t.index.remove(k)?;
    }
    Ok((n, b))
}

fn delete_offsets(
    t: &mut Tables<'_>,
    st: &mut State,
    offsets: &[u64],
) -> Result<(u64, u64), redb::StorageError> {
    let mut offs = offsets.to_vec();
    offs.sort_unstable();
    offs.dedup();
    let (mut n, mut b) = (0u64, 0u64);
    let mut i = 0;
    while i < offs.len() {
        let Some(c) = owned_chunk(t.records.range(..=offs[i])?.next_back())? else {
            i += 1;
            continue;
        };
        // Every doomed offset up to the chunk's last record is in this chunk
        // (or in a gap of it).
        let last = c.entries.last().map_or(c.key, |e| e.offset);
        let j = i + offs[i..].partition_point(|&o| o <= last);
        let doomed = &offs[i..j.max(i + 1)];
        let (cn, cb) = rewrite_chunk(t, &c, |e| doomed.binary_search(&e.offset).is_err())?;
        n += cn;
        b += cb;
        i = j.max(i + 1);
    }
    st.count = st.count.saturating_sub(n);
    st.bytes = st.bytes.saturating_sub(b);
    st.oldest = t.records.first()?.map(|(k, _)| k.value());
    st.newest = last_offset(&t.records)?;
    Ok((n, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// A file written with the first layout (one record per value in table
    /// `records`) opens with every record readable, in chunks afterwards.
    #[test]
    fn first_layout_is_migrated_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = file_path(dir.path(), "p");
        let n = 600u64;
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut old = txn.open_table(RECORDS_V1).unwrap();
                let mut index = txn.open_table(TIME_INDEX).unwrap();
                let mut meta = txn.open_table(META).unwrap();
                let mut bytes = 0;
                for o in 0..n {
                    let r = NewRecord {
                        timestamp_ns: 1000 + o as i64,
                        value: Bytes::from(format!("v{o}")),
                        subject: "s".into(),
                        ..Default::default()
                    };
                    let enc = codec::encode(&RecordRef::from_new(&r, 1)).unwrap();
                    bytes += enc.len() as u64;
                    old.insert(o, enc.as_slice()).unwrap();
                    index.insert((r.timestamp_ns, o), ()).unwrap();
                }
                meta.insert(META_LEO, n).unwrap();
                meta.insert(META_COUNT, n).unwrap();
                meta.insert(META_BYTES, bytes).unwrap();
            }
            txn.commit().unwrap();
        }
        let log = PartitionLog::open_existing(dir.path(), "p", LogConfig::default()).unwrap();
        assert_eq!(log.log_end_offset(), n);
        assert_eq!(
            (log.oldest_offset(), log.newest_offset()),
            (Some(0), Some(n - 1))
        );
        let recs = log.read_blocking(250, 1000, usize::MAX).unwrap();
        assert_eq!(recs.len(), 350);
        assert_eq!(recs[0].offset, 250);
        assert_eq!(recs[0].value, Bytes::from("v250"));
        assert_eq!(recs[349].value, Bytes::from(format!("v{}", n - 1)));
        let t = log.with_read(|rtx| offset_for_ts(rtx, 1000 + 300)).unwrap();
        assert_eq!(t, Some(300));
        // The old table is gone: the records live in chunks now.
        let db = log.db().unwrap();
        let rtx = db.begin_read().unwrap();
        assert!(open_read(&rtx, RECORDS_V1).unwrap().is_none());
        let chunks = open_read(&rtx, RECORDS).unwrap().unwrap();
        assert!(chunks.iter().unwrap().count() < n as usize / 2);
    }
}
