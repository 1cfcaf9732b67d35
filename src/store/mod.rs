//! The partition log on redb: one durable, Kafka-style log per stream partition.
//!
//! # Model
//!
//! A [`PartitionLog`] holds records at dense offsets starting at 0. Each
//! record carries a timestamp (ns), the leader epoch it was written under, an
//! optional key, headers, the value, and the NATS subject and reply subject it
//! arrived on. Offsets never change: retention removes a prefix, compaction
//! removes superseded keyed records (leaving gaps that reads skip), truncation
//! removes a suffix (replication divergence) and lowers the log end offset.
//!
//! # Storage
//!
//! One redb database file per partition (`<dir>/<partition>.redb`), so that
//! deleting a stream is a file removal. The file is created with the log's
//! first record: redb's initial layout takes over a megabyte, and a node
//! with thousands of partitions holds many that were never written. Tables:
//! - `chunks`: offset of a chunk's first record → the records of one
//!   append (up to 64 KiB or 256 records), each as offset, length and the
//!   encoded record ([`codec`], versioned, CRC-32C). One B-tree insert per
//!   chunk rather than per record: the engine's per-insert cost, not the
//!   bytes, bounded appends. Files written with the first layout (table
//!   `records`, one record per value) are converted when opened;
//! - `time_index`: (running maximum timestamp, offset) → (), one entry each
//!   time the running maximum grows; it answers "first offset with timestamp
//!   ≥ t" with one range lookup even if clocks step backwards;
//! - `epochs`: leader epoch → first offset written under it (persisted cache
//!   used by Kafka-style replication);
//! - `meta`: log end offset, record count and byte total, so that none of
//!   these needs a scan at open.
//!
//! Compaction needs no key table on the write path: it scans the compactable
//! region once (in a read transaction, off the writer) to find the newest
//! offset per key, then deletes the superseded offsets in one write
//! transaction, so readers (MVCC) see either all or none of a compaction.
//!
//! Next to it, `<dir>/<partition>.journal` ([`journal`]): an append-only,
//! CRC-chained file of record frames in front of redb. An append is
//! acknowledged once its frame is written (and, under
//! [`SyncPolicy::Always`], fdatasynced): one sequential write per group
//! commit, where a durable redb commit costs several fsyncs. Records then
//! wait in a bounded in-memory tail (readable at once) and are applied to
//! redb in one durable transaction per few MiB or when the writer is idle,
//! after which the journal is rewound. At open, the frames past redb's last
//! durable commit are replayed.
//!
//! Under [`SyncPolicy::Interval`], a busy log's checkpoint (the durable
//! redb commit that lets the journal be rewound) runs on an applier thread
//! while appends go to a second journal file, `<partition>.journal.1`,
//! created the first time a log needs it; the first file is rewound once
//! the commit is done, and the roles swap at the next checkpoint. Replay
//! reads both files' frames in log order.
//!
//! # Threads
//!
//! Each database has one writer, which owns the journal and every write
//! transaction; no partition has a thread of its own. Async callers queue
//! requests to the writer; a thread of the process's writer pool
//! ([`writer_threads`] of them, whatever the number of partitions) takes a
//! log with pending requests, drains everything queued, writes it as one
//! journal frame (group commit) and answers every waiter — or runs the
//! completion callback given to [`PartitionLog::append_then`] right there.
//! Only one pool thread runs a given log's writer at a time, so requests
//! keep their order. Reads run on `spawn_blocking` in read transactions (or
//! straight from the in-memory tail) and never block the writer. One
//! maintenance thread for the whole process applies retention (in small
//! chunks, so appends interleave) and compaction to every log on its
//! [`LogConfig::cleaner_interval`]. No redb call ever runs on a tokio
//! worker. Statistics go to the [`StoreObserver`] given in
//! [`LogConfig::observer`]; the store calls no process-wide metrics.
//!
//! # Durability
//!
//! See [`SyncPolicy`]. Under both policies an acknowledged append survives
//! the death of the process (kill -9, panic, abort): its frame is in the
//! journal, at least in the OS page cache. Under `always` it also survives
//! power loss. Every durable redb commit uses quick repair, so reopening
//! after a crash never walks the whole file; redb's copy-on-write commits
//! and the journal's CRC chain (a torn frame ends the journal) mean the
//! reopened log is always a prefix of what was appended: never a hole,
//! never a torn record, and never an acknowledged offset given to another
//! record.
//!
//! A log that existed is never silently recreated: the journal is created
//! only after the database file, so a journal next to a missing or empty
//! database file means the file was lost, and [`PartitionLog::open`]
//! refuses it ([`StoreError::Lost`]) instead of starting over at offset 0.
//! An I/O failure while running (a full device, EIO, a failed commit or
//! fsync) does not lose or reorder anything: the appends of the failed
//! group are answered with the error, later ones are refused at once, the
//! log keeps serving reads, reports the failure in [`PartitionLog::fault`],
//! and retries every [`RETRY_EVERY`] until it can write again. A log that
//! cannot be created removes the files it made, so nothing half-created
//! is left behind.
//!
//! A damaged file gives [`StoreError::Corrupt`] (never a panic);
//! [`StoreError::is_corruption`] tells callers to stop serving the log.
//!
//! # API in short
//!
//! - open: [`PartitionLog::open`] (creates), [`PartitionLog::open_existing`],
//!   [`open_all`] (one result per file); blocking, call from `spawn_blocking`;
//! - write: [`PartitionLog::append`], [`PartitionLog::append_expecting`]
//!   (OCC), [`PartitionLog::append_replicated`] (follower copy of leader
//!   records), [`PartitionLog::truncate`], [`PartitionLog::sync`];
//! - read: [`PartitionLog::read`] (offset, count and byte budget),
//!   [`PartitionLog::offset_for_timestamp`], [`PartitionLog::log_end_offset`],
//!   [`PartitionLog::oldest_offset`], [`PartitionLog::newest_offset`],
//!   [`PartitionLog::subscribe_end`] (wake on new data);
//! - replication: [`PartitionLog::leader_epochs`],
//!   [`PartitionLog::epoch_start_offset`], [`PartitionLog::epoch_end_offset`],
//!   [`PartitionLog::set_compaction_limit`] (set it to the high watermark);
//! - maintenance: [`PartitionLog::enforce_retention`],
//!   [`PartitionLog::compact`], [`PartitionLog::update_config`],
//!   [`PartitionLog::close`], [`PartitionLog::delete_files`],
//!   [`PartitionLog::disk_size`].
//!
//! Retention semantics: `max_messages` and `max_bytes` count the records
//! present (after compaction); `max_age` removes every record before the
//! first one whose running maximum timestamp is within the age. Retention may
//! empty the log; the log end offset never moves back except by truncation.
//!
//! Known costs: each open log runs two threads (writer and cleaner);
//! compaction deletes in one transaction, so appends wait for it (it
//! rewrites each touched chunk once: 0.4 s for 990k deletions, see
//! BENCHMARKS.md); a time lookup or a read from the middle of a chunk reads
//! the whole chunk (≤ 64 KiB); the database file never shrinks, freed pages
//! are reused; each partition's journal file is preallocated to 4 MiB (so
//! that its fdatasyncs overwrite existing blocks) and grows to its
//! high-water mark (about the tail bound plus one group), and a log that
//! was busy under `interval` has two such files; records are written twice
//! (journal, then redb).
//!
//! This module knows nothing of NATS or gRPC: subjects are plain strings.

pub mod check;
pub mod codec;
pub mod journal;
mod log;
mod observer;
mod sched;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

pub use log::{open_all, InlineAppend, OpenedPartition, PartitionLog, RETRY_EVERY};
pub use observer::{NoopObserver, Observer, StoreObserver};
pub use sched::writer_threads;

/// When appends reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Every group commit's journal frame is fdatasynced before any append
    /// in it is reported done: an acknowledged append survives a crash or
    /// power loss. Group commit amortises the fsync over everything queued
    /// meanwhile. This is the default, because the product promises that no
    /// acknowledged message is lost.
    #[default]
    Always,
    /// Appends are acknowledged once their journal frame is written (no
    /// fsync on the ack path) and are visible to readers at once; the
    /// journal is fdatasynced at most every given interval. A process crash
    /// loses nothing acknowledged; an OS crash or power loss may lose up to
    /// one interval of acknowledged appends, and what remains is still a
    /// consistent prefix of the log.
    Interval(Duration),
}

/// Retention limits of one partition; `None` means unlimited. The oldest
/// records are removed until every limit holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Maximum total encoded size of the records kept.
    pub max_bytes: Option<u64>,
    /// Maximum number of records kept.
    pub max_messages: Option<u64>,
    /// Records older than this (by running maximum timestamp) are removed.
    pub max_age: Option<Duration>,
}

/// Configuration of one partition log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Durability policy.
    pub sync: SyncPolicy,
    /// Retention limits, enforced by the cleaner.
    pub retention: RetentionPolicy,
    /// Key-based compaction by the cleaner.
    pub compact: bool,
    /// How often the cleaner runs (Liftbridge's default is 5 minutes).
    pub cleaner_interval: Duration,
    /// Page cache of the partition's database at most, in bytes (fixed when
    /// the log opens). The caches of all open logs share four times this
    /// much: a log opened while `n` are open gets `4 × cache_bytes / n`
    /// (at least 64 KiB), so many partitions fit on a small device.
    pub cache_bytes: usize,
    /// Where the log reports its statistics (taken when the log opens;
    /// later configuration updates keep the first one).
    pub observer: Observer,
    /// Run before a log that never held a record writes its first one
    /// (taken when the log opens, like `observer`).
    pub first_record: FirstRecord,
    /// The compaction limit the log opens with (taken when the log opens,
    /// like `observer`): a partition's log opens with 0, so the cleaner
    /// touches nothing before its role sets the committed end (see
    /// [`PartitionLog::set_compaction_limit`]). Default: no limit.
    pub initial_compaction_limit: u64,
}

/// A hook run once, on the log's writer thread, before a log that never
/// held a record creates its database file for its first record: the node
/// notes there, outside the partition's directory, that the partition holds
/// data (see `partition::held`). If it fails, the write fails as after an
/// I/O error (refused, retried by the writer), so no record is written
/// without it. Two hooks always compare equal: they are not configuration
/// values.
#[derive(Clone, Default)]
pub struct FirstRecord(Option<Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>>);

impl FirstRecord {
    /// A hook running `f`.
    pub fn new(f: impl Fn() -> std::io::Result<()> + Send + Sync + 'static) -> Self {
        FirstRecord(Some(Arc::new(f)))
    }

    /// Runs the hook (nothing if there is none).
    pub fn run(&self) -> std::io::Result<()> {
        self.0.as_ref().map_or(Ok(()), |f| f())
    }
}

impl std::fmt::Debug for FirstRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "FirstRecord(hook)"
        } else {
            "FirstRecord(none)"
        })
    }
}

impl PartialEq for FirstRecord {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for FirstRecord {}

/// Default page cache of one partition's database (`store.cache.size`).
/// redb keeps every page it wrote in this cache until it is full, so it
/// is memory a write burst leaves behind for good: 8 MiB keeps a node
/// near its idle size after a flood, and recording and replay measured
/// no slower than with 64 MiB (see BENCHMARKS.md, "Memory back near idle
/// after the flood").
pub const DEFAULT_CACHE_BYTES: usize = 8 << 20;

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            sync: SyncPolicy::Always,
            retention: RetentionPolicy::default(),
            compact: false,
            cleaner_interval: Duration::from_secs(300),
            cache_bytes: DEFAULT_CACHE_BYTES,
            observer: Observer::default(),
            first_record: FirstRecord::default(),
            initial_compaction_limit: u64::MAX,
        }
    }
}

/// A record to append; the log assigns its offset and leader epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewRecord {
    /// Timestamp in ns since the Unix epoch (stamped by the leader).
    pub timestamp_ns: i64,
    /// Optional key (used by compaction).
    pub key: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<(String, Bytes)>,
    /// The payload.
    pub value: Bytes,
    /// NATS subject the message arrived on.
    pub subject: String,
    /// NATS reply subject, if any.
    pub reply: Option<String>,
}

/// A stored record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// Offset in the partition.
    pub offset: u64,
    /// Timestamp in ns since the Unix epoch.
    pub timestamp_ns: i64,
    /// Leader epoch under which the record was written.
    pub leader_epoch: u64,
    /// Optional key.
    pub key: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<(String, Bytes)>,
    /// The payload.
    pub value: Bytes,
    /// NATS subject the message arrived on.
    pub subject: String,
    /// NATS reply subject, if any.
    pub reply: Option<String>,
}

impl Record {
    /// Encoded size: the unit of byte budgets and byte retention.
    pub fn encoded_len(&self) -> usize {
        codec::encoded_len(&codec::RecordRef::from_record(self))
    }
}

impl NewRecord {
    /// Encoded size: the unit of byte budgets and byte retention.
    pub fn encoded_len(&self) -> usize {
        codec::encoded_len(&codec::RecordRef::from_new(self, 0))
    }
}

/// Offsets assigned to one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    /// Offset of the first record of the batch.
    pub first_offset: u64,
    /// Offset of the last record of the batch.
    pub last_offset: u64,
}

/// Commit counters of one log since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Write transactions committed (group commits).
    pub commits: u64,
    /// Of those, commits fsynced to disk.
    pub durable_commits: u64,
    /// Records appended (leader appends and replicated copies).
    pub appended_records: u64,
    /// Encoded bytes of those records.
    pub appended_bytes: u64,
}

/// What one retention pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionStats {
    /// Records removed.
    pub removed_records: u64,
    /// Encoded bytes removed.
    pub removed_bytes: u64,
    /// Oldest offset after the pass (`None` if the log is empty).
    pub oldest_offset: Option<u64>,
}

/// What one compaction pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// Records scanned (offsets below the compaction limit).
    pub scanned_records: u64,
    /// Superseded keyed records removed.
    pub removed_records: u64,
    /// Encoded bytes removed.
    pub removed_bytes: u64,
}

/// Why a log refuses writes for now: the writer met an I/O failure (a full
/// device, an I/O error, a failed commit) and retries on its own; reads of
/// what is stored keep working meanwhile. See [`PartitionLog::fault`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFault {
    /// The failure, with the OS error text (e.g. "No space left on
    /// device (os error 28)").
    pub reason: String,
    /// The device is full (ENOSPC or a quota): writes resume once space is
    /// freed.
    pub no_space: bool,
    /// When the failure happened, in ns since the Unix epoch.
    pub since_ns: i64,
}

/// Errors of the partition log. Every variant about a file names the file
/// and the partition.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The partition name cannot be used as a file name.
    #[error("invalid partition name {0:?}: it must be a non-empty file name without '/'")]
    InvalidName(String),
    /// `open_existing` found no database file.
    #[error("partition {partition}: database file {} does not exist", path.display())]
    NotFound {
        /// Partition name.
        partition: String,
        /// Expected file.
        path: PathBuf,
    },
    /// The log existed (its journal is there) but its database file is
    /// missing or empty: it is refused rather than recreated empty, which
    /// would reuse offsets already handed out.
    #[error("partition {partition}: database file {} was lost ({detail}); refusing to start an empty log in its place", path.display())]
    Lost {
        /// Partition name.
        partition: String,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Another process (or handle) holds the database open.
    #[error("partition {partition}: database file {} is locked by another process or handle", path.display())]
    Locked {
        /// Partition name.
        partition: String,
        /// The file.
        path: PathBuf,
    },
    /// The file or its directory cannot be read or created.
    #[error("partition {partition}: cannot open database file {}: {source}", path.display())]
    Io {
        /// Partition name.
        partition: String,
        /// The file.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid database, or its contents are inconsistent.
    #[error("partition {partition}: database file {} is corrupt: {detail}", path.display())]
    Corrupt {
        /// Partition name.
        partition: String,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A stored record failed its checksum or could not be decoded.
    #[error("partition {partition}: record at offset {offset} is corrupt: {source}")]
    CorruptRecord {
        /// Partition name.
        partition: String,
        /// Offset of the bad record.
        offset: u64,
        /// Decoding error.
        #[source]
        source: codec::CodecError,
    },
    /// A record cannot be encoded (a field over 4 GiB).
    #[error("partition {partition}: record cannot be encoded: {source}")]
    Encode {
        /// Partition name.
        partition: String,
        /// Encoding error.
        #[source]
        source: codec::CodecError,
    },
    /// Optimistic concurrency check failed.
    #[error("expected next offset {expected}, but the log end offset is {actual}")]
    OffsetMismatch {
        /// Offset the caller expected the batch to start at.
        expected: u64,
        /// Actual next offset.
        actual: u64,
    },
    /// An append used a leader epoch older than one already in the log.
    #[error("leader epoch {epoch} is older than the latest epoch {latest} in the log")]
    StaleEpoch {
        /// Epoch of the append.
        epoch: u64,
        /// Latest epoch already written.
        latest: u64,
    },
    /// An append carried no record.
    #[error("empty batch: an append needs at least one record")]
    EmptyBatch,
    /// Replicated records must have increasing offsets at or past the log end.
    #[error("replicated record offset {offset} is below the next offset {next}")]
    OffsetOutOfOrder {
        /// Offending offset.
        offset: u64,
        /// Next acceptable offset.
        next: u64,
    },
    /// A storage engine or journal error while the log was running. Shared
    /// (`Arc`) because one failure answers every append of a group commit.
    #[error("partition {partition}: storage error: {source}")]
    Storage {
        /// Partition name.
        partition: String,
        /// What failed.
        #[source]
        source: Arc<EngineError>,
    },
    /// The log has been closed (or its writer stopped after an error).
    #[error("partition {0}: log is closed")]
    Closed(String),
    /// The partition's directory (database file and journal) is gone, but
    /// the node noted that the partition held records (see
    /// `partition::held`): refused rather than recreated empty, which would
    /// hand out acknowledged offsets again.
    #[error("partition {partition}: directory {} is missing, but this node recorded that the partition held records; refusing to start an empty log in its place (its offsets were handed out)", path.display())]
    DirectoryLost {
        /// Partition name.
        partition: String,
        /// The missing directory.
        path: PathBuf,
    },
    /// The log's request queue is full (see `sched`): the append was not
    /// queued; try again later. The node's own appenders stay below the
    /// limit (see `log::MAX_QUEUED_BYTES`), so none of them meets it.
    #[error("partition {partition}: too many appends queued (limit {bytes} bytes or {ops} requests); try again later")]
    Overloaded {
        /// Partition name.
        partition: String,
        /// The queue's byte limit.
        bytes: usize,
        /// The queue's request limit.
        ops: usize,
    },
}

impl StoreError {
    /// Whether the error shows that the partition's files are lost or
    /// damaged (as opposed to a closed log, bad input or a passing I/O
    /// failure): such a partition must stop being served.
    pub fn is_corruption(&self) -> bool {
        match self {
            StoreError::Lost { .. }
            | StoreError::DirectoryLost { .. }
            | StoreError::Corrupt { .. }
            | StoreError::CorruptRecord { .. } => true,
            StoreError::Storage { source, .. } => source.is_corruption(),
            _ => false,
        }
    }
}

impl StoreError {
    /// Whether the error comes from a full device (ENOSPC or a quota):
    /// the caller's answer is RESOURCE_EXHAUSTED rather than INTERNAL.
    pub fn is_no_space(&self) -> bool {
        match self {
            StoreError::Io { source, .. } => is_no_space_io(source),
            StoreError::Storage { source, .. } => source.is_no_space(),
            _ => false,
        }
    }
}

/// Whether an OS error says the device (or the user's quota) is full.
pub fn is_no_space_io(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || e.kind() == std::io::ErrorKind::StorageFull
}

impl EngineError {
    /// The OS error under this failure, if it is one.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        fn storage(e: &redb::StorageError) -> Option<&std::io::Error> {
            match e {
                redb::StorageError::Io(e) => Some(e),
                _ => None,
            }
        }
        match self {
            EngineError::Storage(e) => storage(e),
            EngineError::Transaction(e) => match &**e {
                redb::TransactionError::Storage(s) => storage(s),
                _ => None,
            },
            EngineError::Table(e) => match &**e {
                redb::TableError::Storage(s) => storage(s),
                _ => None,
            },
            EngineError::Commit(e) => match &**e {
                redb::CommitError::Storage(s) => storage(s),
                _ => None,
            },
            EngineError::Journal { source, .. } => Some(source),
            EngineError::FirstRecord(source) | EngineError::CreateFile(source) => Some(source),
            EngineError::Stopped(e) => e.io_error(),
            _ => None,
        }
    }

    /// Whether the failure is a full device (see [`is_no_space_io`]).
    pub fn is_no_space(&self) -> bool {
        self.io_error().is_some_and(is_no_space_io)
    }

    /// Whether the engine found a damaged page (or panicked on one).
    pub fn is_corruption(&self) -> bool {
        match self {
            EngineError::Storage(e) => matches!(**e, redb::StorageError::Corrupted(_)),
            EngineError::Transaction(e) => matches!(
                **e,
                redb::TransactionError::Storage(redb::StorageError::Corrupted(_))
            ),
            EngineError::Table(e) => matches!(
                **e,
                redb::TableError::Storage(redb::StorageError::Corrupted(_))
            ),
            EngineError::Panicked(_) | EngineError::LeoBehindRecords { .. } => true,
            EngineError::Stopped(e) => e.is_corruption(),
            _ => false,
        }
    }
}

/// A failure below the log: the storage engine, the journal file, or a
/// helper thread.
#[derive(Debug, Error)]
pub enum EngineError {
    /// redb storage error (I/O or a corrupt page).
    #[error(transparent)]
    Storage(Box<redb::StorageError>),
    /// redb could not begin a transaction.
    #[error(transparent)]
    Transaction(Box<redb::TransactionError>),
    /// redb could not open a table.
    #[error(transparent)]
    Table(Box<redb::TableError>),
    /// redb could not commit.
    #[error(transparent)]
    Commit(Box<redb::CommitError>),
    /// The journal file could not be written, synced or emptied.
    #[error("journal {}: {source}", path.display())]
    Journal {
        /// The journal file.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The storage engine panicked during the named operation (caught: a bad
    /// file must not take the process down).
    #[error("storage engine panicked during {0}")]
    Panicked(&'static str),
    /// A blocking helper task failed (it panicked or was cancelled).
    #[error("helper task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// The stored meta data contradicts the records.
    #[error("log end offset {leo} is not past the newest record {newest}")]
    LeoBehindRecords {
        /// Stored log end offset.
        leo: u64,
        /// Newest record found.
        newest: u64,
    },
    /// A record cannot be stored (it is larger than 4 GiB).
    #[error("record chunk of {0} bytes is too large")]
    ChunkTooLarge(usize),
    /// The database file could not be created (first record of a new log).
    #[error("creating the database file: {0}")]
    Create(Box<redb::DatabaseError>),
    /// The new database file could not be put in place (removing a stale
    /// half-made one, the rename, or syncing the directory).
    #[error("creating the database file: {0}")]
    CreateFile(std::io::Error),
    /// The first-record hook failed (see [`FirstRecord`]).
    #[error("noting that the partition holds records: {0}")]
    FirstRecord(std::io::Error),
    /// A write reached a log whose database file was never created.
    #[error("the database file was not created")]
    NotCreated,
    /// An earlier failure stopped the writer; the log refuses writes until
    /// it is reopened (the journal then replays what was acknowledged).
    #[error("the log stopped writing after an earlier failure: {0}")]
    Stopped(Arc<EngineError>),
}

// The engine's errors are boxed: they are large, and `Result`s carrying
// them travel through every read and write.
macro_rules! boxed_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for EngineError {
            fn from(e: $t) -> Self {
                EngineError::$v(Box::new(e))
            }
        }
    )*};
}
boxed_from!(
    redb::StorageError => Storage,
    redb::TransactionError => Transaction,
    redb::TableError => Table,
    redb::CommitError => Commit
);
