//! [`PartitionLog`]: the handle, its writer (journal, then group commit
//! into redb) and its cleaner (retention and compaction). Neither owns a
//! thread: the writer runs on the process's shared writer pool and the
//! cleaner on its maintenance thread ([`sched`](super::sched)); "the writer
//! thread" below is whichever pool thread runs this log's writer, one at a
//! time.
//!
//! # Write path
//!
//! The writer drains every queued append into one group, gives the group
//! its offsets, writes it as one frame to the partition's
//! [journal](super::journal) (one `write`, plus one `fdatasync` under
//! [`SyncPolicy::Always`]) and answers the appenders right there, on the
//! writer thread: an append's completion callback runs as soon as its frame
//! is written (and synced). Under [`SyncPolicy::Interval`] an append that
//! finds the writer idle is written by the appender's own thread instead
//! (`Writer::try_inline`, [`Slot::claim_inline`]), together with the
//! appends that queue behind it meanwhile (a few frames at most): each
//! frame is one `write` into the page cache, and neither the appender nor
//! the pool thread has to wake the other; an apply, a checkpoint, a sync
//! or a large batch still go to the pool. The records then wait in an
//! in-memory tail, readable at once, until the writer applies them to redb
//! in one transaction — when it has had no request for [`APPLY_IDLE`] or
//! when the tail reaches [`TAIL_APPLY_BYTES`]. Under [`SyncPolicy::Always`] each
//! apply is a durable commit (a checkpoint, after which the journal is
//! rewound); under [`SyncPolicy::Interval`] applies are non-durable and a
//! full tail is applied on an applier thread ([`sched::background`]) while
//! the writer goes on journaling and answering appends, a
//! checkpoint follows every [`CHECKPOINT_BYTES`] of journal or
//! [`CHECKPOINT_EVERY`], and the journal is fsynced at most once per
//! interval — no fsync on the ack path. When the interval's sync finds
//! [`SYNC_BY_CHECKPOINT_BYTES`] or more journaled since the last one, it is
//! a checkpoint instead: the records reach the disk once, in redb, not a
//! second time in the journal (whose blocks the next frames overwrite).
//! Such a checkpoint first waits for the background apply in flight and
//! hands a tail of [`SYNC_PRE_APPLY_BYTES`] or more to one more (appends go
//! on being journaled and answered meanwhile), for at most
//! [`SYNC_DEFER_MAX`]; the appends then wait only while the checkpoint
//! applies the rest and commits.
//!
//! At open, the journal frames past redb's last durable commit are replayed
//! into redb (a torn or corrupt frame ends the journal) and committed
//! durably before the log accepts anything.
//!
//! Invariants:
//! - only the writer thread writes the journal and opens write transactions,
//!   except for one background apply at a time, which the writer collects
//!   (or waits for) before it opens a write transaction or reads the
//!   applied state itself; it owns the applied [`State`] (what redb holds)
//!   and the logical state (applied + tail), and publishes the logical one
//!   to [`Shared`] before answering any appender; only the writer removes
//!   batches from the tail, the applied ones from its front;
//! - an append is answered only after its frame is in the journal (and, under
//!   `always`, synced), so a process crash never loses an acknowledged
//!   record, and replay gives back exactly the offsets that were handed out:
//!   an acknowledged offset is never given to another record;
//! - the tail is bounded: past [`TAIL_APPLY_BYTES`] it is applied before the
//!   writer takes more work (appenders queue behind it) or, under
//!   `interval`, handed to an applier once the previous background apply is
//!   done, so it never holds more than twice that plus two groups;
//! - truncation, retention and compaction first apply the tail, then run
//!   against redb; a truncation is committed durably and empties the journal
//!   durably, so no journal frame can outlive the offsets it wrote;
//! - retention and compaction plan in read transactions and send their
//!   deletions to the writer tagged with the truncation generation they were
//!   planned against; the writer drops a plan made stale by a truncation;
//! - readers take a snapshot of the tail before opening their read
//!   transaction, so a batch moving from the tail into redb meanwhile is
//!   seen in one place or the other, never in neither;
//! - after a journal or engine failure (a full device, an I/O error) the
//!   writer refuses writes at once (answers [`EngineError::Stopped`]) and
//!   publishes the fault ([`PartitionLog::fault`]); a frame whose write or
//!   fsync failed is cut off the journal (never replayed, never
//!   acknowledged); a failed redb call poisons its handle, so the writer
//!   reopens the database at once (reads go on: the open writes only
//!   within the file) and rebuilds the tail from the journal; every
//!   [`RETRY_EVERY`] it retries a durable commit (first checking free
//!   space when the device was full) and, once that succeeds, accepts
//!   writes again at the next offset — no gap, no reuse;
//! - nothing here runs redb or an fsync on a tokio worker: async methods hand
//!   work to the writer thread or to `spawn_blocking`; the only disk call an
//!   appender's thread (a tokio worker) may make is the inline journal
//!   `write` of at most [`INLINE_MAX_BYTES`] under `interval`, which the
//!   crash guarantee is the same for (the page cache outlives the process).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};
use redb::{
    Database, DatabaseError, Durability, ReadTransaction, ReadableTable, StorageError as RedbIo,
    Table, TableDefinition, TableError, WriteTransaction,
};
use tokio::sync::{oneshot, watch};

use super::codec::{self, RecordRef};
use super::journal::{self, Journal};
use super::sched::{self, QueueLimit, Refused, Slot, SlotWork};
use super::{
    AppendResult, CommitStats, CompactionStats, EngineError, FirstRecord, LogConfig, LogFault,
    NewRecord, Observer, Record, RetentionStats, StoreError, SyncPolicy,
};

/// Chunks of records: key = offset of the chunk's first record, value =
/// entries (see [`codec`]). A chunk is never empty and its key always equals
/// its first entry's offset.
pub(super) const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("chunks");
/// The first layout, one record per value (key = its offset); migrated into
/// [`RECORDS`] when a file that still has it is opened.
pub(super) const RECORDS_V1: TableDefinition<u64, &[u8]> = TableDefinition::new("records");
pub(super) const TIME_INDEX: TableDefinition<(i64, u64), ()> = TableDefinition::new("time_index");
pub(super) const EPOCHS: TableDefinition<u64, u64> = TableDefinition::new("epochs");
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

pub(super) const META_LEO: &str = "leo";
pub(super) const META_COUNT: &str = "count";
pub(super) const META_BYTES: &str = "bytes";

/// Sentinel for "no offset" in the published atomics.
const NO_OFFSET: u64 = u64::MAX;
/// Smallest page cache given to redb, whatever the configuration or the
/// node-wide budget says (16 pages).
const MIN_CACHE_BYTES: usize = 64 << 10;
/// The page caches of all open logs share this many times
/// [`LogConfig::cache_bytes`]: a log opened while `n` logs are open gets
/// `budget / n` (at most `cache_bytes`, at least [`MIN_CACHE_BYTES`]), so a
/// node with thousands of partitions does not give each one the cache a
/// node with a few would. redb fills a cache only with pages it reads or
/// writes, so an idle partition costs little whatever its share.
const CACHE_BUDGET_FACTOR: usize = 4;
/// Logs open in this process (for the cache share).
static OPEN_LOGS: AtomicU64 = AtomicU64::new(0);
/// A group stops draining the queue past this many payload bytes, so one
/// journal frame stays bounded in memory.
const MAX_BATCH_BYTES: usize = 16 << 20;
/// The request queue of one log holds at most this many bytes of appends
/// (as counted by `Op::payload_bytes`) and this many requests
/// ([`MAX_QUEUED_OPS`]); past that an append is refused at once with
/// [`StoreError::Overloaded`] (see `sched`'s module documentation). The
/// stenographer's bytes in flight stay below it (see
/// `partition::leader`), so only a producer that does not bound itself
/// meets it.
pub(crate) const MAX_QUEUED_BYTES: usize = 4 * MAX_BATCH_BYTES;
/// See [`MAX_QUEUED_BYTES`].
pub(crate) const MAX_QUEUED_OPS: usize = 4096;
/// The tail (journaled, not yet in redb) is applied to redb once it holds
/// this many bytes or once the writer has had no request for
/// [`APPLY_IDLE`] (durably under `always`, see `Writer::flush`). Under
/// `interval` a full tail is applied on an applier thread while the writer
/// goes on journaling (`Writer::start_apply`); a second full tail waits for
/// that apply. This bounds the tail's memory: at most twice this plus one
/// group (≤ [`MAX_BATCH_BYTES`] of payload) each — appenders queue behind
/// a writer that waits.
pub(crate) const TAIL_APPLY_BYTES: usize = 4 << 20;
/// Largest append (payload bytes, as counted for a batch) written to the
/// journal on the appender's thread under `interval` (see
/// `Writer::try_inline`): a `write` of this much into the page cache takes
/// a few tens of microseconds; larger batches go to the pool.
const INLINE_MAX_BYTES: usize = 256 << 10;
/// How often an idle writer looks whether its background apply is done.
const APPLY_POLL: Duration = Duration::from_millis(1);
/// See [`TAIL_APPLY_BYTES`].
pub(crate) const APPLY_IDLE: Duration = Duration::from_millis(5);
/// A checkpoint (durable redb commit, then the journal is rewound) happens
/// once the journal holds this many bytes ...
pub(crate) const CHECKPOINT_BYTES: u64 = 32 << 20;
/// ... and at least this often while anything is pending.
pub(crate) const CHECKPOINT_EVERY: Duration = Duration::from_secs(2);
/// Under `interval`, a due journal sync with at least this many bytes
/// journaled since the last one is done by a checkpoint: syncing the
/// journal would write those bytes to the disk, and the checkpoint that
/// follows would write them again into redb. Below it (light traffic, or
/// many small partitions), one `fdatasync` of the journal is cheaper than a
/// durable redb commit.
pub(crate) const SYNC_BY_CHECKPOINT_BYTES: u64 = 1 << 20;
/// A checkpoint for the interval's sync that finds at least this much of
/// the tail not applied first hands it to a background apply and commits
/// once that is done: the log then takes no appends only while the rest is
/// applied and the commit syncs, not while all of it is written.
const SYNC_PRE_APPLY_BYTES: usize = 512 << 10;
/// Longest a due sync waits for background applies (see
/// [`SYNC_PRE_APPLY_BYTES`]) before it checkpoints regardless.
const SYNC_DEFER_MAX: Duration = Duration::from_millis(30);
/// Records removed per retention transaction: small enough that appends
/// queued meanwhile wait only for one short transaction.
const RETENTION_CHUNK: u64 = 1024;
/// Most bytes a read reserves before it knows what it will find (larger
/// reads grow their buffer as they go).
const READ_PREALLOC_MAX: usize = 1 << 20;
/// File name suffix of a partition database.
const SUFFIX: &str = ".redb";
/// Suffix of a database file being initialised: it is renamed to
/// [`SUFFIX`] once complete, so a crash while the engine writes its header
/// never leaves a half-made database file (which would read as corrupt).
const CREATING_SUFFIX: &str = ".redb.new";
/// How often a writer stopped by an I/O failure tries again (reopening
/// the database and committing what is pending). Appends meanwhile are
/// refused at once with the failure.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);
/// A writer stopped by a full device tries again only once the file
/// system has at least this much free space (plus what is pending), so a
/// still-full device costs a `statvfs` per retry, not a failed commit. A
/// new log is refused below it too: its files would not fit.
const RETRY_MIN_FREE: u64 = 1 << 20;
/// How long a reopen waits for reads in progress to release the old
/// database handle (redb locks the file).
const REOPEN_WAIT: Duration = Duration::from_secs(2);

/// How the writer answers a request: called once, on the writer thread.
type Reply<T> = Box<dyn FnOnce(Result<T, StoreError>) + Send>;

/// A request to the writer thread. The request queue is bounded
/// ([`MAX_QUEUED_BYTES`], [`MAX_QUEUED_OPS`]; appends past it are refused),
/// though its producers bound themselves below that — the stenographer
/// keeps at most 64 batches and a byte budget in flight, replication and
/// maintenance await each request — and the writer drains at most
/// [`MAX_BATCH_BYTES`] of it per group.
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
    Maint(Maint),
    Sync {
        reply: Reply<()>,
    },
}

/// Operations that change redb directly (after the tail is applied).
enum Maint {
    /// Only apply the tail (retention and compaction plan against redb).
    Apply {
        reply: Reply<()>,
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
}

impl Op {
    fn payload_bytes(&self) -> usize {
        match self {
            Op::Append { records, .. } => records.iter().map(|r| r.value.len() + 64).sum(),
            Op::Replicate { records, .. } => records.iter().map(|r| r.value.len() + 64).sum(),
            Op::Maint(Maint::DeleteOffsets { offsets, .. }) => offsets.len() * 8,
            _ => 64,
        }
    }
}

/// One append's answer, sent once its frame is written.
struct Answer {
    reply: Reply<AppendResult>,
    result: Result<AppendResult, StoreError>,
}

/// The log's state: the applied one (what redb holds) and the logical one
/// (applied + tail) share this shape.
#[derive(Debug, Clone)]
struct State {
    leo: u64,
    oldest: Option<u64>,
    newest: Option<u64>,
    count: u64,
    bytes: u64,
    /// Running maximum timestamp (the key of the last time-index entry);
    /// kept only in the applied state.
    rmax: Option<i64>,
    epochs: Vec<(u64, u64)>,
    generation: u64,
    /// Records and encoded bytes appended since open (metrics).
    appended: (u64, u64),
}

impl State {
    /// The state of a log that never held a record.
    fn empty() -> State {
        State {
            leo: 0,
            oldest: None,
            newest: None,
            count: 0,
            bytes: 0,
            rmax: None,
            epochs: Vec::new(),
            generation: 0,
            appended: (0, 0),
        }
    }

    /// Notes an epoch starting at `offset` if it is newer than the last.
    fn note_epoch(&mut self, epoch: u64, offset: u64) -> bool {
        if self.epochs.last().is_none_or(|&(e, _)| epoch > e) {
            self.epochs.push((epoch, offset));
            return true;
        }
        false
    }

    /// Counts one record of `len` encoded bytes at `offset`.
    fn note_record(&mut self, offset: u64, len: usize) {
        self.count += 1;
        self.bytes += len as u64;
        self.appended = (self.appended.0 + 1, self.appended.1 + len as u64);
        if self.oldest.is_none() {
            self.oldest = Some(offset);
        }
        self.newest = Some(offset);
        self.leo = offset + 1;
    }
}

/// One record of a tail batch.
#[derive(Debug, Clone, Copy)]
struct TailEntry {
    offset: u64,
    timestamp_ns: i64,
    leader_epoch: u64,
    /// Range of the record's encoding in the batch payload (its entry header
    /// is the [`codec::ENTRY_HEADER`] bytes before `start`).
    start: usize,
    end: usize,
}

/// A journaled group not yet applied to redb. The payload is the journal
/// frame's payload: record entries in the chunk layout.
#[derive(Debug)]
struct TailBatch {
    payload: Bytes,
    entries: Vec<TailEntry>,
}

impl TailBatch {
    /// Parses a journal payload (replay); `None` if it is malformed.
    fn parse(payload: Bytes) -> Option<TailBatch> {
        let list = codec::chunk_entry_list(&payload).ok()?;
        let mut entries = Vec::with_capacity(list.len());
        for e in list {
            let rec = &payload[e.start..e.end];
            entries.push(TailEntry {
                offset: e.offset,
                timestamp_ns: codec::peek_timestamp(rec)?,
                leader_epoch: codec::peek_epoch(rec)?,
                start: e.start,
                end: e.end,
            });
        }
        Some(TailBatch { payload, entries })
    }

    fn first_offset(&self) -> Option<u64> {
        self.entries.first().map(|e| e.offset)
    }
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
    /// Journaled batches not yet in redb, oldest first.
    tail: Mutex<VecDeque<Arc<TailBatch>>>,
    /// Set while the writer refuses writes after an I/O failure.
    fault: Mutex<Option<LogFault>>,
    /// I/O failures met by the writer since the log was opened.
    io_errors: AtomicU64,
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

    /// The tail batches now (cheap: clones of `Arc`s).
    fn tail_snapshot(&self) -> Vec<Arc<TailBatch>> {
        self.tail.lock().iter().cloned().collect()
    }
}

struct Inner {
    name: String,
    path: PathBuf,
    journal_path: PathBuf,
    spare_path: PathBuf,
    /// The database: created by the writer before the first record is
    /// journaled, so a log never written has no database file.
    db: Arc<RwLock<DbState>>,
    /// This log's place in the writer pool (request queue and writer).
    slot: Arc<Slot<Writer>>,
    shared: Arc<Shared>,
    config: Arc<Mutex<LogConfig>>,
    observer: Observer,
    /// Records replayed from the journal when the log was opened.
    replayed: u64,
    compaction_limit: AtomicU64,
    /// Registration with the maintenance thread (0 until registered).
    maint_id: AtomicU64,
    /// Serialises retention and compaction passes of this partition.
    maintenance: Mutex<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the slot lets the writer drain, commit durably and finish
        // on the pool; the maintenance thread forgets the log.
        self.slot.close();
        sched::unregister(self.maint_id.load(Ordering::Acquire));
        OPEN_LOGS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether a log's database exists.
enum DbState {
    /// Not created yet: the log has never held a record (a fresh log costs
    /// no database file — redb's initial layout is over a megabyte).
    NotCreated,
    Open(Arc<Database>),
    Closed,
}

/// An append of [`PartitionLog::append_then`] that took an idle writer's
/// turn: its journal write (and its `done`) runs on the thread that drops
/// this. The log writes nothing else meanwhile, so drop it soon.
#[must_use = "the append is written when this is dropped"]
pub struct InlineAppend {
    /// Runs the write when dropped.
    _claimed: Option<sched::Claimed<Writer>>,
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

/// Where the database file at `path` is initialised before it is renamed
/// into place (see [`CREATING_SUFFIX`]).
fn creating_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(&CREATING_SUFFIX[SUFFIX.len()..]);
    path.with_file_name(name)
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
            // The journal is created only after the database file was
            // created in full, so a journal next to a missing or empty
            // database file proves the log existed and lost its file:
            // creating an empty one would hand out offset 0 again.
            let db_len = match std::fs::metadata(&path) {
                Ok(m) => Some(m.len()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io(e)),
            };
            // A journal that ever held a frame is never empty again (it
            // is preallocated from its first frame on), and the database is
            // created before the first frame: a non-empty journal next to a
            // missing or empty database proves the log lost its file. An
            // empty journal belongs to a log that never held a record.
            let journal_len = match std::fs::metadata(journal::path(dir, name)) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
                Err(e) => return Err(io(e)),
            };
            if db_len.is_none_or(|l| l == 0) && journal_len > 0 {
                return Err(StoreError::Lost {
                    partition: name.to_owned(),
                    path,
                    detail: if db_len.is_none() {
                        "the file is missing".into()
                    } else {
                        "the file is empty".into()
                    },
                });
            }
            // A new log on a (nearly) full device is refused now, with the
            // device's own error, rather than created and failing at its
            // first record.
            if db_len.is_none() && journal_len == 0 {
                if let Some(free) = free_space(dir) {
                    if free < RETRY_MIN_FREE {
                        return Err(io(std::io::Error::from_raw_os_error(libc::ENOSPC)));
                    }
                }
            }
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
        // A log that never held a record gets its database file with its
        // first record (see `Writer::create_db`).
        let lazy = create
            && std::fs::metadata(&path)
                .map(|m| m.len() == 0)
                .unwrap_or(true);
        let corrupt = |detail: String| StoreError::Corrupt {
            partition: name.to_owned(),
            path: path.clone(),
            detail,
        };
        // The engine is not supposed to panic on a bad file, but a corrupt
        // file must never take the process down: treat a panic as corruption.
        let cache = cache_share(cfg.cache_bytes);
        let opened = catch_unwind(AssertUnwindSafe(|| {
            if lazy {
                return Ok(None);
            }
            let mut b = Database::builder();
            b.set_cache_size(cache);
            if create {
                b.create(&path).map(Some)
            } else {
                b.open(&path).map(Some)
            }
        }))
        .map_err(|_| corrupt("storage engine failed while opening the file".into()))?;
        let db = opened.map_err(|e| match e {
            DatabaseError::DatabaseAlreadyOpen => StoreError::Locked {
                partition: name.to_owned(),
                path: path.clone(),
            },
            // The engine reports a file that is not a database (bad magic
            // or header) as invalid data: that is corruption, not an I/O
            // failure worth retrying.
            DatabaseError::Storage(RedbIo::Io(source))
                if source.kind() == std::io::ErrorKind::InvalidData =>
            {
                corrupt(format!("not a valid database file: {source}"))
            }
            DatabaseError::Storage(RedbIo::Io(source)) => io(source),
            DatabaseError::Storage(RedbIo::Corrupted(d)) => corrupt(d),
            DatabaseError::UpgradeRequired(v) => {
                corrupt(format!("file format version {v} is not supported"))
            }
            other => corrupt(other.to_string()),
        })?;
        let mut state = match &db {
            Some(db) => catch_unwind(AssertUnwindSafe(|| load_state(db)))
                .map_err(|_| corrupt("storage engine failed while loading the log".into()))?
                .map_err(|e| {
                    // Creating the tables writes: on a full device that is
                    // an I/O failure, not a damaged file.
                    if e.io_error().is_some() {
                        StoreError::Storage {
                            partition: name.to_owned(),
                            source: Arc::new(e),
                        }
                    } else {
                        corrupt(e.to_string())
                    }
                })?,
            None => State::empty(),
        };
        let observer = cfg.observer.clone();
        let first_record = cfg.first_record.clone();
        let initial_compaction_limit = cfg.initial_compaction_limit;

        // Replay the journal frames past redb's last durable commit, then
        // commit them durably and empty the journal, so the log starts with
        // everything that was ever acknowledged in redb.
        let journal_path = journal::path(dir, name);
        let jio = |source| StoreError::Io {
            partition: name.to_owned(),
            path: journal_path.clone(),
            source,
        };
        let (mut journal, frames) = match Journal::open(journal_path.clone()) {
            Ok(j) => j,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(StoreError::Locked {
                    partition: name.to_owned(),
                    path,
                })
            }
            Err(e) => return Err(jio(e)),
        };
        let spare_path = journal::spare_path(dir, name);
        let (mut spare, frames) = match Journal::open_existing(spare_path.clone()) {
            Ok(Some((j, more))) => (Some(j), journal::merge(frames, more)),
            Ok(None) => (None, frames),
            Err(source) => {
                return Err(StoreError::Io {
                    partition: name.to_owned(),
                    path: spare_path,
                    source,
                })
            }
        };
        let batches = frames_past(frames, state.leo);
        let replayed: u64 = batches.iter().map(|b| b.entries.len() as u64).sum();
        if !batches.is_empty() {
            let Some(db) = &db else {
                // Unreachable by the check above (frames mean a non-empty
                // journal); refused rather than replayed into nothing.
                return Err(StoreError::Lost {
                    partition: name.to_owned(),
                    path,
                    detail: "the journal holds records but the database file is missing".into(),
                });
            };
            let applied = catch_unwind(AssertUnwindSafe(|| {
                apply_batches(db, &state, &batches, true)
            }))
            .unwrap_or(Err(EngineError::Panicked("journal replay")))
            .map_err(|e| StoreError::Storage {
                partition: name.to_owned(),
                source: Arc::new(e),
            })?;
            state = applied.0;
            state.appended = (0, 0);
            tracing::info!(partition = %name, records = replayed, leo = state.leo, "replayed the journal");
        }
        // Everything in the journals is durable in redb now: the next frame
        // starts a new chain.
        journal.reset(false).map_err(jio)?;
        if let Some(j) = &mut spare {
            j.reset(false).map_err(|source| StoreError::Io {
                partition: name.to_owned(),
                path: j.path().to_owned(),
                source,
            })?;
        }

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
            tail: Mutex::new(VecDeque::new()),
            fault: Mutex::new(None),
            io_errors: AtomicU64::new(0),
        });
        shared.publish(&state);
        let db = db.map(Arc::new);
        let db_state = Arc::new(RwLock::new(match &db {
            Some(d) => DbState::Open(d.clone()),
            None => DbState::NotCreated,
        }));
        let config = Arc::new(Mutex::new(cfg));
        let now = Instant::now();
        let writer = Writer {
            name: name.to_owned(),
            db,
            db_state: db_state.clone(),
            path: path.clone(),
            cache,
            shared: shared.clone(),
            config: config.clone(),
            observer: observer.clone(),
            first_record,
            logical: state.clone(),
            state,
            journal,
            spare,
            spare_path: spare_path.clone(),
            tail_bytes: 0,
            applying: None,
            last_durable: now,
            last_journal_sync: now,
            sync_pre_applied: false,
            last_group: now,
            dirty: false,
            stopped: None,
            retry_at: None,
        };
        let interval = config.lock().cleaner_interval;
        OPEN_LOGS.fetch_add(1, Ordering::AcqRel);
        let inner = Arc::new(Inner {
            name: name.to_owned(),
            path: path.clone(),
            journal_path,
            spare_path,
            db: db_state,
            slot: Slot::new(
                writer,
                MAX_BATCH_BYTES,
                QueueLimit {
                    bytes: MAX_QUEUED_BYTES,
                    ops: MAX_QUEUED_OPS,
                },
            ),
            shared,
            config,
            observer,
            replayed,
            compaction_limit: AtomicU64::new(initial_compaction_limit),
            maint_id: AtomicU64::new(0),
            maintenance: Mutex::new(()),
        });
        let weak: Weak<dyn sched::Maintained> = Arc::downgrade(&inner) as _;
        let id = sched::register(weak, cleaner_wait(interval));
        inner.maint_id.store(id, Ordering::Release);
        Ok(PartitionLog { inner })
    }

    /// Records replayed from the journal when this log was opened (acknowledged
    /// appends that had not reached a durable redb commit before the process
    /// stopped).
    pub fn replayed_records(&self) -> u64 {
        self.inner.replayed
    }

    /// Why the log refuses writes for now (`None` when it accepts them).
    /// Set by the first failed write, commit or fsync; cleared when a
    /// retry succeeds (every [`RETRY_EVERY`]). Reads keep working.
    pub fn fault(&self) -> Option<LogFault> {
        self.inner.shared.fault.lock().clone()
    }

    /// I/O failures of the writer since the log was opened.
    pub fn io_errors(&self) -> u64 {
        self.inner.shared.io_errors.load(Ordering::Relaxed)
    }

    /// Path of the journal file.
    pub fn journal_path(&self) -> &Path {
        &self.inner.journal_path
    }

    /// Removes the database and journal files of a partition (stream
    /// deletion gives the space back). Close every handle first. A missing
    /// file is not an error.
    pub fn delete_files(dir: &Path, partition_name: &str) -> Result<(), StoreError> {
        check_name(partition_name)?;
        // The second journal first: the first one proves the log existed.
        for jpath in [
            journal::spare_path(dir, partition_name),
            journal::path(dir, partition_name),
        ] {
            Journal::remove(&jpath).map_err(|source| StoreError::Io {
                partition: partition_name.to_owned(),
                path: jpath,
                source,
            })?;
        }
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
        self.inner.slot.send(op).map_err(|r| self.refused(&r))
    }

    /// The error for a request the queue gave back.
    fn refused(&self, r: &Refused<Op>) -> StoreError {
        match r {
            Refused::Closed(_) => self.closed(),
            Refused::Full(_) => StoreError::Overloaded {
                partition: self.inner.name.clone(),
                bytes: MAX_QUEUED_BYTES,
                ops: MAX_QUEUED_OPS,
            },
        }
    }

    fn closed(&self) -> StoreError {
        StoreError::Closed(self.inner.name.clone())
    }

    fn storage_err(&self, e: EngineError) -> StoreError {
        StoreError::Storage {
            partition: self.inner.name.clone(),
            source: Arc::new(e),
        }
    }

    async fn call<T: Send + 'static>(
        &self,
        make: impl FnOnce(Reply<T>) -> Op,
    ) -> Result<T, StoreError> {
        self.call_now(make).await
    }

    /// Queues the request now; the future waits for its answer.
    fn call_now<T: Send + 'static>(
        &self,
        make: impl FnOnce(Reply<T>) -> Op,
    ) -> impl Future<Output = Result<T, StoreError>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let sent = self.send(make(Box::new(move |r| {
            // A waiter that gave up (dropped its receiver) needs no answer.
            let _ = tx.send(r);
        })));
        let name = self.inner.name.clone();
        async move {
            sent?;
            rx.await.map_err(|_| StoreError::Closed(name))?
        }
    }

    fn call_blocking<T: Send + 'static>(
        &self,
        make: impl FnOnce(Reply<T>) -> Op,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(make(Box::new(move |r| {
            let _ = tx.send(r);
        })))?;
        rx.blocking_recv().map_err(|_| self.closed())?
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&PartitionLog) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(&me))
            .await
            .map_err(|e| self.storage_err(EngineError::Task(e)))?
    }

    /// Appends a batch under `leader_epoch`; offsets are assigned in arrival
    /// order. The batch is queued when this method is called (not when the
    /// future is first polled), so appends issued one after another get
    /// offsets in that order even when their futures are awaited later. The
    /// future completes once the batch is in the journal (and, with
    /// [`SyncPolicy::Always`], fsynced) and readable.
    pub fn append(
        &self,
        leader_epoch: u64,
        records: Vec<NewRecord>,
    ) -> impl Future<Output = Result<AppendResult, StoreError>> + Send + 'static {
        let started = Instant::now();
        let observer = self.inner.observer.clone();
        let done = self.call_now(move |reply| Op::Append {
            epoch: leader_epoch,
            expected: None,
            records,
            reply,
        });
        async move {
            let r = done.await;
            observer.append(started.elapsed());
            r
        }
    }

    /// Like [`append`](Self::append), but instead of a future the outcome is
    /// handed to `done`, which runs on the log's writer thread as soon as the
    /// batch is journaled (and synced under `always`): no task wake-up
    /// between the write and whatever `done` does (e.g. publishing acks).
    /// The batch takes its place in the log's order when this is called.
    /// Under `interval` an idle writer's journal write, and so `done`, may
    /// then run on the calling thread when the returned [`InlineAppend`] is
    /// dropped: a caller that orders its appends under a lock drops the lock
    /// first, so other appenders queue behind instead of waiting.
    /// `done` must be quick and must not block or call back into this log.
    /// If the log is closed, `done` runs at once on the calling thread.
    pub fn append_then(
        &self,
        leader_epoch: u64,
        expected_next_offset: Option<u64>,
        records: Vec<NewRecord>,
        done: impl FnOnce(Result<AppendResult, StoreError>) + Send + 'static,
    ) -> InlineAppend {
        let started = Instant::now();
        let observer = self.inner.observer.clone();
        let reply: Reply<AppendResult> = Box::new(move |r| {
            observer.append(started.elapsed());
            done(r)
        });
        let op = Op::Append {
            epoch: leader_epoch,
            expected: expected_next_offset,
            records,
            reply,
        };
        match self.inner.slot.claim_inline(op) {
            Ok(claimed) => InlineAppend { _claimed: claimed },
            // The op could not be queued: the caller still gets its answer.
            Err(r) => {
                let e = self.refused(&r);
                if let Refused::Closed(Op::Append { reply, .. })
                | Refused::Full(Op::Append { reply, .. }) = r
                {
                    reply(Err(e));
                }
                InlineAppend { _claimed: None }
            }
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
    pub fn append_replicated(
        &self,
        records: Vec<Record>,
    ) -> impl Future<Output = Result<AppendResult, StoreError>> + Send + 'static {
        // Queued when called, as `append`; written on this thread at once
        // when that is cheap (see `Writer::try_inline`), so the log end
        // offset already counts the batch when this returns.
        let (tx, rx) = oneshot::channel();
        let op = Op::Replicate {
            records,
            reply: Box::new(move |r| {
                let _ = tx.send(r);
            }),
        };
        let sent = self
            .inner
            .slot
            .send_inline(op)
            .map_err(|r| self.refused(&r));
        let name = self.inner.name.clone();
        async move {
            sent?;
            rx.await.map_err(|_| StoreError::Closed(name))?
        }
    }

    /// Reads records at offsets ≥ `from`, in order, skipping gaps, until
    /// `max_records` or `max_bytes` (encoded size) is reached. At least one
    /// record is returned when one exists and `max_records > 0`, even if it
    /// alone exceeds `max_bytes`. Records still in the in-memory tail are
    /// served from it without a database read; others are copied out of the
    /// database in one buffer, and record fields are slices of it.
    pub async fn read(
        &self,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>, StoreError> {
        if max_records == 0 || from >= self.log_end_offset() {
            return Ok(Vec::new());
        }
        let tail = self.inner.shared.tail_snapshot();
        if tail
            .first()
            .and_then(|b| b.first_offset())
            .is_some_and(|f| from >= f)
        {
            // Everything at or past `from` is in memory: no engine call.
            let mut out = Vec::new();
            self.read_tail(&tail, from, max_records, max_bytes, 0, &mut out)?;
            return Ok(out);
        }
        self.blocking(move |me| me.read_blocking(from, max_records, max_bytes))
            .await
    }

    /// Appends to `out` the tail records at offsets ≥ `from` within the
    /// budgets (`used` bytes already taken).
    fn read_tail(
        &self,
        tail: &[Arc<TailBatch>],
        from: u64,
        max_records: usize,
        max_bytes: usize,
        mut used: usize,
        out: &mut Vec<Record>,
    ) -> Result<(), StoreError> {
        for b in tail {
            if b.entries.last().is_none_or(|e| e.offset < from) {
                continue;
            }
            let skip = b.entries.partition_point(|e| e.offset < from);
            for e in &b.entries[skip..] {
                if out.len() >= max_records {
                    return Ok(());
                }
                let len = e.end - e.start;
                if !out.is_empty() && used + len > max_bytes {
                    return Ok(());
                }
                used += len;
                let r =
                    codec::decode(e.offset, b.payload.slice(e.start..e.end)).map_err(|source| {
                        StoreError::CorruptRecord {
                            partition: self.inner.name.clone(),
                            offset: e.offset,
                            source,
                        }
                    })?;
                out.push(r);
            }
        }
        Ok(())
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
        // The tail first: a batch applied to redb after this snapshot is in
        // the read transaction opened below.
        let tail = self.inner.shared.tail_snapshot();
        let name = &self.inner.name;
        // `full`: the scan stopped at a budget (not at the end of what redb
        // holds), so the tail must not add records after a gap.
        let spans = self.with_read(Ok((Vec::new(), BytesMut::new(), false)), |rtx| {
            let mut spans = Vec::new();
            // Sized for the whole read up front: a buffer grown by doubling
            // would hold up to twice what it carries for as long as a
            // subscriber holds any record of the read.
            let mut buf = BytesMut::with_capacity(max_bytes.min(READ_PREALLOC_MAX));
            let mut full = false;
            let Some(t) = open_read(rtx, RECORDS)? else {
                return Ok(Ok((spans, buf, full)));
            };
            let start = chunk_start(&t, from)?;
            'chunks: for item in t.range(start..)? {
                let (k, v) = item?;
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
                        full = true;
                        break 'chunks;
                    }
                    let start = buf.len();
                    buf.extend_from_slice(&v[e.start..e.end]);
                    spans.push((e.offset, start, buf.len()));
                    if spans.len() >= max_records {
                        full = true;
                        break 'chunks;
                    }
                }
            }
            Ok(Ok((spans, buf, full)))
        })??;
        let (spans, mut buf, full) = spans;
        let used = buf.len();
        if buf.capacity() - used > used / 8 {
            // A short read: keep only what it carries.
            buf = BytesMut::from(&buf[..]);
        }
        let buf = buf.freeze();
        let mut out = spans
            .into_iter()
            .map(|(offset, s, e)| {
                codec::decode(offset, buf.slice(s..e)).map_err(|source| StoreError::CorruptRecord {
                    partition: name.clone(),
                    offset,
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !full {
            let next = out.last().map_or(from, |r| r.offset + 1);
            self.read_tail(&tail, next, max_records, max_bytes, used, &mut out)?;
        }
        Ok(out)
    }

    /// The database, `None` while it is not created (the log holds nothing
    /// outside its tail).
    fn db(&self) -> Result<Option<Arc<Database>>, StoreError> {
        match &*self.inner.db.read() {
            DbState::Open(d) => Ok(Some(d.clone())),
            DbState::NotCreated => Ok(None),
            DbState::Closed => Err(self.closed()),
        }
    }

    /// Runs `f` in a read transaction, turning engine errors and panics into
    /// [`StoreError::Storage`]; `absent` is the answer while the database
    /// is not created (nothing is stored there).
    fn with_read<T>(
        &self,
        absent: T,
        f: impl FnOnce(&ReadTransaction) -> Result<T, EngineError>,
    ) -> Result<T, StoreError> {
        let Some(db) = self.db()? else {
            return Ok(absent);
        };
        catch_unwind(AssertUnwindSafe(|| {
            let rtx = db.begin_read()?;
            f(&rtx)
        }))
        .unwrap_or(Err(EngineError::Panicked("a read")))
        .map_err(|e| self.storage_err(e))
    }

    /// First offset whose timestamp is ≥ `ts_ns` (precisely: whose running
    /// maximum timestamp over the log is ≥ `ts_ns`, which is the same when
    /// timestamps do not go backwards), or `None` if there is none.
    pub async fn offset_for_timestamp(&self, ts_ns: i64) -> Result<Option<u64>, StoreError> {
        self.blocking(move |me| {
            let tail = me.inner.shared.tail_snapshot();
            let mut entries = tail.iter().flat_map(|b| b.entries.iter());
            match me.with_read(None, |rtx| time_lookup(rtx, ts_ns))? {
                Some((_, Some(o))) => Ok(Some(o)),
                // The running maximum reached `ts_ns` at `at`, but no record
                // at or after it is in redb: the first such tail record.
                Some((at, None)) => Ok(entries.find(|e| e.offset >= at).map(|e| e.offset)),
                // The running maximum of redb stays below `ts_ns`, so the
                // first tail record at or past it is where it gets there.
                None => Ok(entries.find(|e| e.timestamp_ns >= ts_ns).map(|e| e.offset)),
            }
        })
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
        self.call(|reply| {
            Op::Maint(Maint::Truncate {
                to: to_offset,
                reply,
            })
        })
        .await
    }

    /// Replication hook: compaction and retention never touch offsets ≥
    /// `offset` (set it to the committed end). Default: no limit (whole log).
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
        let interval = cfg.cleaner_interval;
        *self.inner.config.lock() = cfg;
        sched::reschedule(
            self.inner.maint_id.load(Ordering::Acquire),
            cleaner_wait(interval),
        );
    }

    /// Current configuration.
    pub fn config(&self) -> LogConfig {
        self.inner.config.lock().clone()
    }

    /// Size of the partition's files on disk (database and journal), in
    /// bytes.
    pub fn disk_size(&self) -> u64 {
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let i = &self.inner;
        size(&i.path) + size(&i.journal_path) + size(&i.spare_path)
    }

    /// Commits durably, stops the writer and the cleaner and releases the
    /// file. Other clones see [`StoreError::Closed`] afterwards.
    pub async fn close(&self) -> Result<(), StoreError> {
        let synced = self.sync().await;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.shutdown())
            .await
            .map_err(|e| self.storage_err(EngineError::Task(e)))?;
        match synced {
            Err(StoreError::Closed(_)) => Ok(()),
            other => other,
        }
    }

    /// Has the writer apply the tail, so that a plan made in a read
    /// transaction sees every record appended so far.
    fn apply_tail_blocking(&self) -> Result<(), StoreError> {
        self.call_blocking(|reply| Op::Maint(Maint::Apply { reply }))
    }

    fn retention_blocking(&self, now: i64) -> Result<RetentionStats, StoreError> {
        let _g = self.inner.maintenance.lock();
        self.apply_tail_blocking()?;
        let policy = self.inner.config.lock().retention;
        let generation = self.inner.shared.generation.load(Ordering::Acquire);
        let cut = self.with_read(None, |rtx| {
            let Some(meta) = open_read(rtx, META)? else {
                return Ok(None);
            };
            let get = |k: &str| -> Result<u64, EngineError> {
                Ok(meta.get(k)?.map(|v| v.value()).unwrap_or(0))
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
            for item in t.iter()? {
                let (k, v) = item?;
                for e in codec::chunk_entries(v.value()) {
                    let e = e.map_err(|e| corrupt_chunk(k.value(), e))?;
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
        // Never past the replication limit (the committed end): an
        // uncommitted record is not removed before its followers have it.
        let limit = self.inner.compaction_limit.load(Ordering::Acquire);
        if let Some(before) = cut.map(|c| c.min(limit)).filter(|c| *c > 0) {
            loop {
                let (n, b) = self.call_blocking(|reply| {
                    Op::Maint(Maint::DeletePrefix {
                        before,
                        max: RETENTION_CHUNK,
                        generation,
                        reply,
                    })
                })?;
                stats.removed_records += n;
                stats.removed_bytes += b;
                if n < RETENTION_CHUNK {
                    break;
                }
            }
        }
        stats.oldest_offset = self.oldest_offset();
        self.inner.observer.retention(stats.removed_records);
        Ok(stats)
    }

    fn compact_blocking(&self) -> Result<CompactionStats, StoreError> {
        let _g = self.inner.maintenance.lock();
        self.apply_tail_blocking()?;
        let generation = self.inner.shared.generation.load(Ordering::Acquire);
        let limit = self.inner.compaction_limit.load(Ordering::Acquire);
        let name = self.inner.name.clone();
        let (scanned, doomed) = self.with_read(Ok((0, Vec::new())), |rtx| {
            let Some(t) = open_read(rtx, RECORDS)? else {
                return Ok(Ok((0, Vec::new())));
            };
            let mut latest: HashMap<Vec<u8>, u64> = HashMap::new();
            let mut doomed = Vec::new();
            let mut scanned = 0u64;
            for item in t.range(..limit)? {
                let (k, v) = item?;
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
            let (n, b) = self.call_blocking(|reply| {
                Op::Maint(Maint::DeleteOffsets {
                    offsets: doomed,
                    generation,
                    reply,
                })
            })?;
            stats.removed_records = n;
            stats.removed_bytes = b;
        }
        self.inner.observer.compaction(stats.removed_records);
        Ok(stats)
    }
}

impl Inner {
    /// Stops the writer (after it drained and committed) and the cleaner, then
    /// releases the database so the file can be reopened or removed.
    fn shutdown(&self) {
        self.slot.close_and_wait();
        sched::unregister(self.maint_id.load(Ordering::Acquire));
        // A pass already running ends at its next request to the (closed)
        // writer; wait for it, so that it holds no database handle.
        drop(self.maintenance.lock());
        *self.db.write() = DbState::Closed;
    }
}

fn opt(v: u64) -> Option<u64> {
    (v != NO_OFFSET).then_some(v)
}

fn open_read<K: redb::Key + 'static, V: redb::Value + 'static>(
    rtx: &ReadTransaction,
    def: TableDefinition<K, V>,
) -> Result<Option<redb::ReadOnlyTable<K, V>>, EngineError> {
    match rtx.open_table(def) {
        Ok(t) => Ok(Some(t)),
        Err(TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn offset_for_ts(rtx: &ReadTransaction, ts: i64) -> Result<Option<u64>, EngineError> {
    Ok(time_lookup(rtx, ts)?.and_then(|(_, found)| found))
}

/// The time index's answer for `ts`: the offset from which the running
/// maximum timestamp is ≥ `ts` (`None` if it never is in redb), with the
/// first record present at or after it in redb (`None` if there is none
/// there: it may be in the tail).
fn time_lookup(rtx: &ReadTransaction, ts: i64) -> Result<Option<(u64, Option<u64>)>, EngineError> {
    let Some(index) = open_read(rtx, TIME_INDEX)? else {
        return Ok(None);
    };
    let Some(first) = index.range((ts, 0u64)..)?.next() else {
        return Ok(None);
    };
    let (_, at) = first?.0.value();
    let Some(records) = open_read(rtx, RECORDS)? else {
        return Ok(Some((at, None)));
    };
    Ok(Some((at, first_at_or_after(&records, at)?)))
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
fn migrate_v1(txn: &WriteTransaction) -> Result<(), EngineError> {
    let mut chunks = txn.open_table(RECORDS)?;
    let old_len = {
        let old = txn.open_table(RECORDS_V1)?;
        let mut chunk = Vec::new();
        let mut first = None;
        let mut count = 0;
        let mut total = 0u64;
        for item in old.iter()? {
            total += 1;
            let (k, v) = item?;
            let v = v.value();
            let len = u32::try_from(v.len()).map_err(|_| EngineError::ChunkTooLarge(v.len()))?;
            if count > 0
                && (count >= codec::CHUNK_RECORDS || chunk.len() + v.len() > codec::CHUNK_BYTES)
            {
                if let Some(f) = first.take() {
                    chunks.insert(f, chunk.as_slice())?;
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
            chunks.insert(f, chunk.as_slice())?;
        }
        total
    };
    drop(chunks);
    txn.delete_table(RECORDS_V1)?;
    if old_len > 0 {
        tracing::info!(
            records = old_len,
            "moved records of the first layout into chunks"
        );
    }
    Ok(())
}

/// Creates the tables if needed and reads the state without scanning.
fn load_state(db: &Database) -> Result<State, EngineError> {
    let mut txn = db.begin_write()?;
    txn.set_quick_repair(true);
    migrate_v1(&txn)?;
    let state = {
        let records = txn.open_table(RECORDS)?;
        let index = txn.open_table(TIME_INDEX)?;
        let epochs = txn.open_table(EPOCHS)?;
        let meta = txn.open_table(META)?;
        state_from(&records, &index, &epochs, &meta)?
    };
    txn.commit()?;
    Ok(state)
}

/// Reads the state of a log whose tables exist, in a read transaction:
/// nothing is written, so it works on a full device (reopening after a
/// failure).
fn read_state(db: &Database) -> Result<State, EngineError> {
    let rtx = db.begin_read()?;
    let records = rtx.open_table(RECORDS)?;
    let index = rtx.open_table(TIME_INDEX)?;
    let epochs = rtx.open_table(EPOCHS)?;
    let meta = rtx.open_table(META)?;
    state_from(&records, &index, &epochs, &meta)
}

fn state_from(
    records: &impl ReadableTable<u64, &'static [u8]>,
    index: &impl ReadableTable<(i64, u64), ()>,
    epochs: &impl ReadableTable<u64, u64>,
    meta: &impl ReadableTable<&'static str, u64>,
) -> Result<State, EngineError> {
    let get =
        |k: &str| -> Result<u64, EngineError> { Ok(meta.get(k)?.map(|v| v.value()).unwrap_or(0)) };
    let oldest = records.first()?.map(|(k, _)| k.value());
    let newest = last_offset(records)?;
    let rmax = index.last()?.map(|(k, _)| k.value().0);
    let mut ep = Vec::new();
    for item in epochs.iter()? {
        let (k, v) = item?;
        ep.push((k.value(), v.value()));
    }
    let mut leo = get(META_LEO)?;
    if let Some(n) = newest {
        if leo <= n {
            return Err(EngineError::LeoBehindRecords { leo, newest: n });
        }
    }
    if let Some(o) = oldest {
        leo = leo.max(o + 1);
    }
    Ok(State {
        leo,
        oldest,
        newest,
        count: get(META_COUNT)?,
        bytes: get(META_BYTES)?,
        rmax,
        epochs: ep,
        generation: 0,
        appended: (0, 0),
    })
}

/// The journal frames past `leo` (what redb does not hold), as tail
/// batches: they must continue one another from `leo`; a gap, a malformed
/// payload or an entry outside its frame's range ends the journal there.
fn frames_past(frames: Vec<journal::Frame>, mut leo: u64) -> Vec<Arc<TailBatch>> {
    let mut batches = Vec::new();
    for f in frames {
        if f.end_leo <= leo {
            // Already in redb (the journal was not emptied before a crash).
            continue;
        }
        if f.base_leo != leo {
            break;
        }
        let Some(b) = TailBatch::parse(f.payload) else {
            break;
        };
        let inside = |o: u64| o >= f.base_leo && o < f.end_leo;
        if !b.entries.iter().all(|e| inside(e.offset)) || b.entries.is_empty() {
            break;
        }
        leo = f.end_leo;
        batches.push(Arc::new(b));
    }
    batches
}

/// Free bytes for unprivileged use on the file system holding `path`
/// (`None` if it cannot be asked).
fn free_space(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated path and `st` points to writable
    // memory of the right type; statvfs(3) only writes into it.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the struct.
    let st = unsafe { st.assume_init() };
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Time between cleaner passes (as the former per-partition cleaner
/// waited: never less than 10 ms).
fn cleaner_wait(interval: Duration) -> Duration {
    interval.max(Duration::from_millis(10))
}

/// Page cache for a log opened now: its share of the node-wide budget (see
/// [`CACHE_BUDGET_FACTOR`]).
fn cache_share(cache_bytes: usize) -> usize {
    let open = usize::try_from(OPEN_LOGS.load(Ordering::Acquire))
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    (cache_bytes.saturating_mul(CACHE_BUDGET_FACTOR) / open)
        .min(cache_bytes)
        .max(MIN_CACHE_BYTES)
}

impl sched::Maintained for Inner {
    /// One cleaner pass, on the maintenance thread: retention and
    /// compaction as configured.
    fn maintain(self: Arc<Self>) -> Option<Duration> {
        let log = PartitionLog { inner: self };
        let cfg = log.config();
        let r = cfg.retention;
        if r.max_age.is_some() || r.max_bytes.is_some() || r.max_messages.is_some() {
            match log.retention_blocking(now_ns()) {
                Ok(_) => {}
                Err(StoreError::Closed(_)) => return None,
                Err(e) => {
                    tracing::warn!(partition = %log.inner.name, error = %e, "retention failed")
                }
            }
        }
        if cfg.compact {
            match log.compact_blocking() {
                Ok(_) => {}
                Err(StoreError::Closed(_)) => return None,
                Err(e) => {
                    tracing::warn!(partition = %log.inner.name, error = %e, "compaction failed")
                }
            }
        }
        Some(cleaner_wait(log.config().cleaner_interval))
    }
}

/// The storage writer: sole owner of the journal and of write transactions
/// for one partition.
struct Writer {
    name: String,
    /// `None` until the first record (see [`DbState::NotCreated`]).
    db: Option<Arc<Database>>,
    /// Where readers find the database once created.
    db_state: Arc<RwLock<DbState>>,
    path: PathBuf,
    cache: usize,
    shared: Arc<Shared>,
    config: Arc<Mutex<LogConfig>>,
    observer: Observer,
    /// Run before the database file is created (see [`FirstRecord`]).
    first_record: FirstRecord,
    /// What redb holds (committed, durably or not).
    state: State,
    /// What the log holds: `state` plus the tail. Appends are checked and
    /// given offsets against it.
    logical: State,
    /// The journal appends go to.
    journal: Journal,
    /// The log's other journal file (see [`journal::spare_path`]), open
    /// once it exists: empty, or holding the frames of a checkpoint running
    /// in the background (see [`Writer::rotate`]).
    spare: Option<Journal>,
    spare_path: PathBuf,
    /// Payload bytes of the tail (journaled, not yet in redb) past the
    /// batches being applied in the background.
    tail_bytes: usize,
    /// The tail's first batches being applied on an applier thread (see
    /// [`Writer::start_apply`]); at most one apply per log at a time.
    applying: Option<Applying>,
    last_durable: Instant,
    last_journal_sync: Instant,
    /// The due sync's checkpoint has had its background apply (see
    /// [`Writer::sync_journal_if_due`]).
    sync_pre_applied: bool,
    /// When the last group of appends was journaled: an idle tail is
    /// applied only [`APPLY_IDLE`] after it.
    last_group: Instant,
    /// Non-durable redb commits exist since the last durable one.
    dirty: bool,
    /// Set after an I/O failure of the journal or redb: every write is
    /// refused with it until a retry (every [`RETRY_EVERY`]) reopens the
    /// database and commits what is pending.
    stopped: Option<Arc<EngineError>>,
    /// When the next retry is due while stopped.
    retry_at: Option<Instant>,
}

/// A background apply of the tail's first `batches` (see
/// [`Writer::start_apply`]).
struct Applying {
    /// A checkpoint: the commit is durable, and once it is done the spare
    /// journal holds nothing redb lacks (see [`Writer::rotate`]).
    rotation: bool,
    batches: usize,
    /// Their payload bytes.
    bytes: usize,
    records: u64,
    started: Instant,
    done: Arc<ApplyDone>,
}

type ApplyResult = Result<(State, Duration), EngineError>;

/// Where an applier thread leaves the outcome of an apply.
#[derive(Default)]
struct ApplyDone {
    result: Mutex<Option<ApplyResult>>,
    cond: parking_lot::Condvar,
}

impl ApplyDone {
    fn set(&self, r: ApplyResult) {
        *self.result.lock() = Some(r);
        self.cond.notify_all();
    }

    fn take(&self) -> Option<ApplyResult> {
        self.result.lock().take()
    }

    fn wait(&self) -> ApplyResult {
        let mut g = self.result.lock();
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            self.cond.wait(&mut g);
        }
    }
}

struct Tables<'t> {
    records: Table<'t, u64, &'static [u8]>,
    index: Table<'t, (i64, u64), ()>,
    epochs: Table<'t, u64, u64>,
    meta: Table<'t, &'static str, u64>,
}

impl<'t> Tables<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self, EngineError> {
        Ok(Tables {
            records: txn.open_table(RECORDS)?,
            index: txn.open_table(TIME_INDEX)?,
            epochs: txn.open_table(EPOCHS)?,
            meta: txn.open_table(META)?,
        })
    }

    fn put_meta(&mut self, st: &State) -> Result<(), redb::StorageError> {
        self.meta.insert(META_LEO, st.leo)?;
        self.meta.insert(META_COUNT, st.count)?;
        self.meta.insert(META_BYTES, st.bytes)?;
        Ok(())
    }
}

/// Begins a write transaction with the durability asked for; durable
/// commits use quick repair, so a reopen after a crash does not walk the
/// file.
fn begin(db: &Database, durable: bool) -> Result<WriteTransaction, EngineError> {
    let mut txn = db.begin_write()?;
    if durable {
        txn.set_durability(Durability::Immediate);
        txn.set_quick_repair(true);
    } else {
        txn.set_durability(Durability::None);
    }
    Ok(txn)
}

/// Applies journaled batches to redb in one transaction. Returns the new
/// applied state and how long the commit call took.
fn apply_batches(
    db: &Database,
    st: &State,
    batches: &[Arc<TailBatch>],
    durable: bool,
) -> Result<(State, Duration), EngineError> {
    let mut st = st.clone();
    let txn = begin(db, durable)?;
    {
        let mut t = Tables::open(&txn)?;
        put_batches(&mut t, &mut st, batches)?;
        t.put_meta(&st)?;
    }
    let committing = Instant::now();
    txn.commit()?;
    Ok((st, committing.elapsed()))
}

/// Encodes one record as a chunk entry at the end of `payload`; returns its
/// encoded length.
fn push_entry(
    payload: &mut Vec<u8>,
    entries: &mut Vec<TailEntry>,
    offset: u64,
    r: &RecordRef<'_>,
) -> usize {
    let len = codec::encoded_len(r);
    let at = payload.len();
    payload.resize(at + codec::ENTRY_HEADER + len, 0);
    // `len` fits in u32: every field was validated to fit.
    codec::put_entry_header(&mut payload[at..], offset, len as u32);
    let start = at + codec::ENTRY_HEADER;
    codec::encode_into(r, &mut payload[start..]);
    entries.push(TailEntry {
        offset,
        timestamp_ns: r.timestamp_ns,
        leader_epoch: r.leader_epoch,
        start,
        end: start + len,
    });
    len
}

/// The writer on the shared pool: each call is one step of what the former
/// per-partition thread did in its loop (drain the queue into one batch, or
/// time out and do what is due; on close, a final durable commit).
impl SlotWork for Writer {
    type Op = Op;

    fn op_bytes(op: &Op) -> usize {
        op.payload_bytes()
    }

    fn bounded(op: &Op) -> bool {
        matches!(op, Op::Append { .. } | Op::Replicate { .. })
    }

    fn batch(&mut self, ops: Vec<Op>) {
        self.retry_if_due();
        let policy = self.config.lock().sync;
        // The database file exists before anything that writes: a frame in
        // the journal always has a database next to it.
        let writes = ops
            .iter()
            .any(|op| !matches!(op, Op::Sync { .. } | Op::Maint(Maint::Apply { .. })));
        if writes && self.db.is_none() && self.stopped.is_none() {
            if let Err(e) = self.create_db() {
                // Every write of the batch is then refused with it.
                self.stop(e);
            }
        }
        self.process(ops, policy);
    }

    fn idle(&mut self) {
        self.retry_if_due();
        let policy = self.config.lock().sync;
        Writer::idle(self, policy);
    }

    fn deadline(&self) -> Option<Instant> {
        let policy = self.config.lock().sync;
        Writer::deadline(self, policy)
    }

    /// Appends (one, or those that queued behind it meanwhile, as one
    /// frame) are written to the journal on an appender's own thread
    /// when that costs no more than a `write` into the page cache: under
    /// `interval`, with the database created, nothing stopped, and neither
    /// an apply nor a checkpoint due after it (those, and any fsync, stay on
    /// the pool). The appender's answer (the stenographer's acks) then runs
    /// on its thread too: no wake-up of a pool thread and none back.
    fn try_inline(&mut self, ops: Vec<Op>) -> Result<(), Vec<Op>> {
        if !ops
            .iter()
            .all(|op| matches!(op, Op::Append { .. } | Op::Replicate { .. }))
        {
            return Err(ops);
        }
        let policy = self.config.lock().sync;
        let bytes: usize = ops.iter().map(Op::payload_bytes).sum();
        let cheap = matches!(policy, SyncPolicy::Interval(_))
            && bytes <= INLINE_MAX_BYTES
            && self.db.is_some()
            && self.stopped.is_none()
            && self.tail_bytes + bytes < TAIL_APPLY_BYTES
            && !self.checkpoint_due()
            && !self.journal_sync_due(policy);
        if !cheap {
            return Err(ops);
        }
        self.journal_group(ops, policy);
        Ok(())
    }

    fn finish(&mut self) {
        // Closing: everything acknowledged goes into redb durably.
        if self.stopped.is_none() {
            if let Err(e) = self.checkpoint() {
                tracing::error!(partition = %self.name, error = %e, "final durable commit failed");
            }
        }
    }
}

impl Writer {
    /// The database, created when the log takes its first record.
    fn engine(&self) -> Result<Arc<Database>, EngineError> {
        match &self.db {
            Some(db) => Ok(db.clone()),
            None if self.stopped.is_some() => {
                Err(EngineError::Storage(Box::new(redb::StorageError::Io(
                    std::io::Error::other("the database is not open (reopening after a failure)"),
                ))))
            }
            None => Err(EngineError::NotCreated),
        }
    }

    /// Creates the database file of a log that never held a record and
    /// makes it visible to readers.
    ///
    /// The file is initialised under a temporary name and renamed into
    /// place (then the directory synced): a crash meanwhile leaves either
    /// no database file (the log is still new) or a complete one. The
    /// first-record hook runs after that and before anything is written, so
    /// a crash during the creation leaves no note of a partition that held
    /// records either.
    fn create_db(&mut self) -> Result<(), EngineError> {
        let tmp = creating_path(&self.path);
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(EngineError::CreateFile(e)),
        }
        let created = catch_unwind(AssertUnwindSafe(|| {
            let mut b = Database::builder();
            b.set_cache_size(self.cache);
            let db = b
                .create(&tmp)
                .map_err(|e| EngineError::Create(Box::new(e)))?;
            load_state(&db)?;
            Ok::<_, EngineError>(db)
        }))
        .unwrap_or(Err(EngineError::Panicked("creating the database")))?;
        std::fs::rename(&tmp, &self.path)
            .and_then(|()| match self.path.parent() {
                Some(dir) => std::fs::File::open(dir)?.sync_all(),
                None => Ok(()),
            })
            .map_err(EngineError::CreateFile)?;
        self.first_record.run().map_err(EngineError::FirstRecord)?;
        let db = Arc::new(created);
        *self.db_state.write() = DbState::Open(db.clone());
        self.db = Some(db);
        Ok(())
    }

    /// Records or changes wait for a durable redb commit.
    fn pending(&self) -> bool {
        self.tail_bytes > 0 || self.dirty || self.journaled()
    }

    /// Either journal holds frames.
    fn journaled(&self) -> bool {
        !self.journal.is_empty() || self.spare.as_ref().is_some_and(|j| !j.is_empty())
    }

    fn checkpoint_due(&self) -> bool {
        // A checkpoint running in the background (see `rotate`) is the
        // one due.
        self.pending()
            && !self.applying.as_ref().is_some_and(|a| a.rotation)
            && (self.journal.len() >= CHECKPOINT_BYTES
                || self.last_durable.elapsed() >= CHECKPOINT_EVERY)
    }

    /// When the writer must wake up without a request: to apply an idle
    /// tail, for a checkpoint, or for the interval's journal sync.
    fn deadline(&self, policy: SyncPolicy) -> Option<Instant> {
        if self.stopped.is_some() {
            return self.retry_at;
        }
        let mut at: Option<Instant> = None;
        let mut add = |t: Instant| at = Some(at.map_or(t, |a| a.min(t)));
        if self.applying.is_some() {
            // Collect the background apply soon after it is done.
            add(Instant::now() + APPLY_POLL);
        }
        if self.tail_bytes > 0 {
            add(self.last_group + APPLY_IDLE);
        }
        if self.pending() {
            add(self.last_durable + CHECKPOINT_EVERY);
        }
        if let SyncPolicy::Interval(d) = policy {
            if self.journal.unsynced() && self.applying.is_none() {
                // While an apply is in flight, a due sync waits for it
                // (see `sync_journal_if_due`): the apply's poll covers it.
                add(self.last_journal_sync + d);
            }
        }
        at
    }

    /// A deadline passed with no request queued: collect a finished
    /// background apply; apply the tail once no group has come for
    /// [`APPLY_IDLE`]; checkpoint or sync the journal when due. A deadline
    /// also passes between appends taken on the appenders' threads (the
    /// poll of a background apply, [`APPLY_POLL`]): the tail then stays
    /// for the background apply, as under a stream of pool batches,
    /// instead of waiting for the apply in flight and applying the rest on
    /// this thread while appenders queue behind it.
    fn idle(&mut self, policy: SyncPolicy) {
        self.poll_apply(false);
        let quiet = self.last_group.elapsed() >= APPLY_IDLE;
        if (self.tail_bytes > 0 && quiet) || self.checkpoint_due() {
            self.flush(policy);
        }
        self.sync_journal_if_due(policy);
        if !self.pending() {
            // Quiet and all durable: the journal's pages need not stay
            // mapped (see `Journal::release`).
            self.journal.release();
            if let Some(j) = &mut self.spare {
                j.release();
            }
        }
    }

    /// After a group, under a steady stream of requests: apply when the tail
    /// is full, checkpoint when due; under `interval`, sync the journal once
    /// per interval.
    fn after_group(&mut self, policy: SyncPolicy) {
        self.poll_apply(false);
        if self.checkpoint_due() {
            self.flush(policy);
        } else if self.tail_bytes >= TAIL_APPLY_BYTES {
            if matches!(policy, SyncPolicy::Interval(_)) && self.stopped.is_none() {
                // At most one apply in flight: a full tail behind it waits
                // for it, which bounds the tail to two applies' worth.
                self.poll_apply(true);
                if self.stopped.is_none() {
                    self.start_apply();
                }
            } else {
                self.flush(policy);
            }
        }
        self.sync_journal_if_due(policy);
    }

    /// Under `interval`: applies the tail to redb, non-durably, on an
    /// applier thread, while appends go on being journaled (and read from
    /// the tail) here; the redb file's new pages are then written to the
    /// disk there too, so the next checkpoint's fsync finds little to
    /// write. The applied batches leave the tail when the apply is seen
    /// done ([`Writer::poll_apply`]). Called with no apply in flight.
    fn start_apply(&mut self) {
        let batches = self.shared.tail_snapshot();
        if batches.is_empty() {
            return;
        }
        if let Err(e) = self.spawn_apply(batches, false) {
            self.stop(e);
        }
    }

    /// Applies `batches` (the tail's first ones) on an applier thread, in a
    /// durable commit for a `rotation`.
    fn spawn_apply(
        &mut self,
        batches: Vec<Arc<TailBatch>>,
        rotation: bool,
    ) -> Result<(), EngineError> {
        let db = self.engine()?;
        let st = self.state.clone();
        let path = self.path.clone();
        let done = Arc::new(ApplyDone::default());
        let records = batches.iter().map(|b| b.entries.len() as u64).sum();
        let applying = Applying {
            rotation,
            batches: batches.len(),
            bytes: self.tail_bytes,
            records,
            started: Instant::now(),
            done: done.clone(),
        };
        sched::background(Box::new(move || {
            let r = catch_unwind(AssertUnwindSafe(|| {
                apply_batches(&db, &st, &batches, rotation)
            }))
            .unwrap_or(Err(EngineError::Panicked("a write")));
            // A durable commit has written its pages already.
            let flush = r.is_ok() && !rotation;
            drop(batches);
            drop(db);
            done.set(r);
            if flush {
                // Any descriptor of the file flushes its pages; a failure
                // here only leaves them to the checkpoint's own fsync.
                if let Ok(f) = std::fs::File::open(&path) {
                    let _ = f.sync_data();
                }
            }
        }));
        self.applying = Some(applying);
        self.tail_bytes = 0;
        Ok(())
    }

    /// Takes the result of the background apply, if there is one and it is
    /// done (with `wait`, once it is): the applied batches leave the tail.
    /// A failed apply leaves them there and stops the writer, as a failed
    /// apply on this thread does.
    fn poll_apply(&mut self, wait: bool) {
        let Some(a) = &self.applying else {
            return;
        };
        let r = if wait {
            a.done.wait()
        } else {
            match a.done.take() {
                Some(r) => r,
                None => return,
            }
        };
        let Some(a) = self.applying.take() else {
            return;
        };
        match r {
            Ok((st, commit_time)) => {
                self.observer
                    .commit(a.records, a.started.elapsed(), a.rotation);
                self.state = st;
                {
                    let mut tail = self.shared.tail.lock();
                    for _ in 0..a.batches {
                        tail.pop_front();
                    }
                }
                self.committed(a.rotation, commit_time);
                if a.rotation {
                    // Everything in the spare journal is durable in redb.
                    if let Err(e) = self.reset_spare(false) {
                        self.stop(e);
                    }
                }
            }
            Err(e) => {
                self.tail_bytes += a.bytes;
                self.stop(e);
            }
        }
    }

    /// Under `interval`: the journal holds unsynced frames older than the
    /// interval.
    fn journal_sync_due(&self, policy: SyncPolicy) -> bool {
        let SyncPolicy::Interval(d) = policy else {
            return false;
        };
        self.journal.unsynced() && self.last_journal_sync.elapsed() >= d
    }

    fn sync_journal_if_due(&mut self, policy: SyncPolicy) {
        if self.stopped.is_some() || !self.journal_sync_due(policy) {
            return;
        }
        if self.journal.unsynced_bytes() >= SYNC_BY_CHECKPOINT_BYTES {
            // Appends go on while an apply runs in the background: the
            // checkpoint waits for it rather than the appends for both.
            // It starts one apply at most and waits at most
            // SYNC_DEFER_MAX, so a steady stream of appends cannot put it
            // off further. The checkpoint itself then runs in the
            // background as well (`rotate`).
            let SyncPolicy::Interval(d) = policy else {
                return;
            };
            if self.last_journal_sync.elapsed() < d + SYNC_DEFER_MAX {
                self.poll_apply(false);
                if self.applying.is_some() {
                    return;
                }
                if !self.sync_pre_applied && self.tail_bytes >= SYNC_PRE_APPLY_BYTES {
                    self.sync_pre_applied = true;
                    self.start_apply();
                    return;
                }
            }
            match self.rotate() {
                Ok(()) => self.last_journal_sync = Instant::now(),
                Err(e) => self.stop(e),
            }
            return;
        }
        let started = Instant::now();
        match self.journal.sync() {
            Ok(()) => {
                self.observer.journal_sync(started.elapsed());
                self.last_journal_sync = Instant::now();
            }
            Err(source) => self.stop(self.journal_err(source)),
        }
    }

    /// Applies the tail to redb. Under `always` every apply is a durable
    /// commit (a checkpoint): redb reuses freed pages only from durable
    /// commits, and the journal then stays small. Under `interval` applies
    /// are non-durable (no fsync in the writer's way) and a checkpoint
    /// follows every [`CHECKPOINT_BYTES`] of journal or [`CHECKPOINT_EVERY`]
    /// (in the background for a busy journal, see [`Writer::rotate`]); the
    /// database file may then grow by up to that much between checkpoints.
    fn flush(&mut self, policy: SyncPolicy) {
        self.poll_apply(true);
        if self.stopped.is_some() {
            return;
        }
        let r = match policy {
            SyncPolicy::Interval(_) if self.checkpoint_due() => self.rotate(),
            SyncPolicy::Interval(_) => self.apply_tail(false),
            SyncPolicy::Always => self.checkpoint(),
        };
        if let Err(e) = r {
            self.stop(e);
        }
    }

    fn stop(&mut self, e: EngineError) {
        self.stop_shared(Arc::new(e));
    }

    /// Stops writing after an I/O failure: later writes are refused with
    /// it at once, the fault is published (health, metrics), and a retry
    /// is scheduled. A failure inside redb leaves its handle refusing
    /// every call, reads included, so the database is reopened right away
    /// (opening writes only within the file, which works on a full
    /// device): reads of what is stored keep working.
    fn stop_shared(&mut self, e: Arc<EngineError>) {
        // The background apply holds the database: it ends first (a
        // failure there is reported as well).
        self.poll_apply(true);
        let no_space = e.is_no_space();
        if no_space {
            tracing::error!(partition = %self.name, path = %self.path.display(), error = %e, "storage writer stopped: the device is full; writes are refused until space is freed (retried every {:?})", RETRY_EVERY);
        } else {
            tracing::error!(partition = %self.name, path = %self.path.display(), error = %e, "storage writer stopped after an I/O failure; writes are refused until a retry succeeds (every {:?})", RETRY_EVERY);
        }
        self.shared.io_errors.fetch_add(1, Ordering::Relaxed);
        let engine_failed = !matches!(&*e, EngineError::Journal { .. });
        *self.shared.fault.lock() = Some(LogFault {
            reason: e.to_string(),
            no_space,
            since_ns: crate::time::now_ns(),
        });
        self.stopped = Some(e);
        self.retry_at = Some(Instant::now() + RETRY_EVERY);
        if engine_failed {
            if let Err(e) = self.reopen() {
                tracing::error!(partition = %self.name, error = %e, "reopening the database after a failure; retrying");
            }
        }
    }

    /// While stopped, once the retry is due: reopens the database if
    /// needed and commits what is pending durably; on success the log
    /// accepts writes again, offsets continuing where they stopped.
    fn retry_if_due(&mut self) {
        let Some(stopped) = self.stopped.clone() else {
            return;
        };
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return;
        }
        self.retry_at = Some(Instant::now() + RETRY_EVERY);
        if stopped.is_no_space() {
            let need = RETRY_MIN_FREE + self.tail_bytes as u64;
            let dir = self.path.parent().unwrap_or(Path::new("."));
            if free_space(dir).is_some_and(|free| free < need) {
                return;
            }
        }
        if self.db.is_none() {
            if let Err(e) = self.reopen() {
                tracing::debug!(partition = %self.name, error = %e, "reopen still failing");
                return;
            }
        }
        self.stopped = None;
        let r = self.checkpoint();
        match r {
            Ok(()) => {
                self.retry_at = None;
                *self.shared.fault.lock() = None;
                tracing::info!(partition = %self.name, leo = self.logical.leo, "storage writer recovered; accepting writes again");
            }
            Err(e) => self.stop_shared(Arc::new(e)),
        }
    }

    /// Closes the database and opens it again, then rebuilds the tail from
    /// the journal: redb keeps its last durable commit, the journal holds
    /// everything acknowledged since (it is emptied only after a durable
    /// commit), so the log is the same as before the failure.
    fn reopen(&mut self) -> Result<(), EngineError> {
        // A log whose database was never created has nothing to reopen:
        // its next record creates it.
        if !matches!(*self.db_state.read(), DbState::Open(_)) && self.db.is_none() {
            return Ok(());
        }
        let old = std::mem::replace(&mut *self.db_state.write(), DbState::Closed);
        let weak = match &old {
            DbState::Open(d) => Some(Arc::downgrade(d)),
            _ => None,
        };
        drop(old);
        self.db = None;
        if let Some(w) = weak {
            // Reads in progress hold the old handle for a moment.
            let until = Instant::now() + REOPEN_WAIT;
            while w.strong_count() > 0 {
                if Instant::now() >= until {
                    return Err(EngineError::Storage(Box::new(redb::StorageError::Io(
                        std::io::Error::other("reads still hold the old database handle"),
                    ))));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let cache = self.cache;
        let path = self.path.clone();
        let db = catch_unwind(AssertUnwindSafe(|| {
            let mut b = Database::builder();
            b.set_cache_size(cache);
            b.open(&path)
        }))
        .map_err(|_| EngineError::Panicked("reopening"))?
        .map_err(|e| match e {
            DatabaseError::Storage(s) => EngineError::Storage(Box::new(s)),
            other => EngineError::Storage(Box::new(redb::StorageError::Io(std::io::Error::other(
                other.to_string(),
            )))),
        })?;
        let state = catch_unwind(AssertUnwindSafe(|| read_state(&db)))
            .unwrap_or(Err(EngineError::Panicked("reopening")))?;
        let frames = self
            .journal
            .frames()
            .map_err(|source| self.journal_err(source))?;
        let frames = match &self.spare {
            Some(j) => {
                let more = j.frames().map_err(|source| self.spare_err(source))?;
                journal::merge(frames, more)
            }
            None => frames,
        };
        let batches = frames_past(frames, state.leo);
        let mut logical = state.clone();
        for b in &batches {
            for e in &b.entries {
                logical.note_epoch(e.leader_epoch, e.offset);
                logical.note_record(e.offset, e.end - e.start);
            }
        }
        if logical.leo != self.logical.leo {
            tracing::warn!(partition = %self.name, before = self.logical.leo, after = logical.leo, "the reopened log ends elsewhere than before the failure");
        }
        // Plans made against the old handle are stale.
        let generation = self.state.generation + 1;
        logical.appended = self.logical.appended;
        logical.generation = generation;
        self.state = State {
            generation,
            ..state
        };
        self.logical = logical;
        self.tail_bytes = batches.iter().map(|b| b.payload.len()).sum();
        *self.shared.tail.lock() = batches.into_iter().collect();
        self.dirty = false;
        let db = Arc::new(db);
        self.db = Some(db.clone());
        *self.db_state.write() = DbState::Open(db);
        self.shared.publish(&self.logical);
        tracing::info!(partition = %self.name, leo = self.logical.leo, "reopened the database after a failure; reads are served");
        Ok(())
    }

    /// An I/O failure of the journal file that appends do not go to.
    fn spare_err(&self, source: std::io::Error) -> EngineError {
        let path = self.spare.as_ref().map_or(&*self.spare_path, |j| j.path());
        EngineError::Journal {
            path: path.to_owned(),
            source,
        }
    }

    fn journal_err(&self, source: std::io::Error) -> EngineError {
        EngineError::Journal {
            path: self.journal.path().to_owned(),
            source,
        }
    }

    /// A maintenance write failed: an I/O failure stops writing (as for
    /// appends) and reopens the database; the caller gets the failure.
    fn failed(&mut self, e: EngineError) -> StoreError {
        let e = Arc::new(e);
        if e.io_error().is_some() {
            self.stop_shared(e.clone());
        }
        StoreError::Storage {
            partition: self.name.clone(),
            source: e,
        }
    }

    fn closed_err(&self) -> StoreError {
        StoreError::Closed(self.name.clone())
    }

    fn stopped_err(&self) -> Option<StoreError> {
        self.stopped.as_ref().map(|s| StoreError::Storage {
            partition: self.name.clone(),
            source: Arc::new(EngineError::Stopped(s.clone())),
        })
    }

    /// Applies and commits the tail durably, then empties the journals.
    fn checkpoint(&mut self) -> Result<(), EngineError> {
        self.sync_pre_applied = false;
        self.poll_apply(true);
        if let Some(s) = &self.stopped {
            return Err(EngineError::Stopped(s.clone()));
        }
        self.apply_tail(true)?;
        self.journal.reset(false).map_err(|e| self.journal_err(e))?;
        if self.spare.as_ref().is_some_and(|j| !j.is_empty()) {
            self.reset_spare(false)?;
        }
        Ok(())
    }

    /// Empties the spare journal, if it is open (see [`Journal::reset`]).
    fn reset_spare(&mut self, durable: bool) -> Result<(), EngineError> {
        match self.spare.as_mut().map(|j| j.reset(durable)) {
            Some(Err(source)) => Err(self.spare_err(source)),
            _ => Ok(()),
        }
    }

    /// A checkpoint under `interval` (of a due sync, or at the
    /// [`CHECKPOINT_BYTES`] / [`CHECKPOINT_EVERY`] bound) that does not
    /// stop the appends: the journal's frames are handed to the spare file, which keeps them
    /// while an applier thread applies the tail and commits it durably,
    /// and appends go on into the other, empty, file. Once that commit is
    /// done ([`Writer::poll_apply`]) the spare file is emptied. A crash in
    /// between leaves frames in both files; the replay reads both. Falls
    /// back to [`Writer::checkpoint`] when the spare file cannot be
    /// opened or still holds frames (an earlier rotation failed), and
    /// checkpoints a journal of less than [`SYNC_BY_CHECKPOINT_BYTES`] in
    /// place: its checkpoint is short, and a log that is never busy gets no
    /// second file.
    fn rotate(&mut self) -> Result<(), EngineError> {
        self.sync_pre_applied = false;
        self.poll_apply(true);
        if let Some(s) = &self.stopped {
            return Err(EngineError::Stopped(s.clone()));
        }
        if self.journal.len() < SYNC_BY_CHECKPOINT_BYTES {
            return self.checkpoint();
        }
        if self.spare.is_none() {
            match Journal::open(self.spare_path.clone()) {
                Ok((mut j, frames)) => {
                    if !frames.is_empty() {
                        // Not this log's (the file was absent at open).
                        tracing::warn!(partition = %self.name, path = %self.spare_path.display(), "a second journal appeared while the log was open; it is cleared");
                        j.reset(true).map_err(|source| self.spare_err(source))?;
                    }
                    self.spare = Some(j);
                }
                Err(source) => {
                    tracing::warn!(partition = %self.name, path = %self.spare_path.display(), error = %source, "cannot open the second journal; checkpointing in place");
                    return self.checkpoint();
                }
            }
        }
        let Some(spare) = self.spare.as_mut().filter(|j| j.is_empty()) else {
            return self.checkpoint();
        };
        let batches = self.shared.tail_snapshot();
        std::mem::swap(&mut self.journal, spare);
        // On failure nothing started: the frames stay in the spare file,
        // and the checkpoint of the retry empties both.
        self.spawn_apply(batches, true)?;
        self.observer.journal_switched();
        Ok(())
    }

    /// Applies every tail batch to redb in one transaction. With `durable`
    /// the commit is durable even if the tail is empty (when anything is
    /// pending).
    fn apply_tail(&mut self, durable: bool) -> Result<(), EngineError> {
        self.poll_apply(true);
        if let Some(s) = &self.stopped {
            return Err(EngineError::Stopped(s.clone()));
        }
        let batches = self.shared.tail_snapshot();
        let pending = self.dirty || self.journaled();
        if batches.is_empty() && !(durable && pending) {
            return Ok(());
        }
        let started = Instant::now();
        let db = self.engine()?;
        let (st, commit_time) = catch_unwind(AssertUnwindSafe(|| {
            apply_batches(&db, &self.state, &batches, durable)
        }))
        .unwrap_or(Err(EngineError::Panicked("a write")))?;
        let applied: u64 = batches.iter().map(|b| b.entries.len() as u64).sum();
        self.observer.commit(applied, started.elapsed(), durable);
        self.state = st;
        {
            // Only this thread adds batches, so the first ones are exactly
            // those applied.
            let mut tail = self.shared.tail.lock();
            for _ in 0..batches.len() {
                tail.pop_front();
            }
        }
        self.tail_bytes = 0;
        self.committed(durable, commit_time);
        Ok(())
    }

    fn committed(&mut self, durable: bool, commit_time: Duration) {
        self.shared.commits.fetch_add(1, Ordering::Relaxed);
        if durable {
            self.observer.durable_commit(commit_time);
            self.shared.durable_commits.fetch_add(1, Ordering::Relaxed);
            self.last_durable = Instant::now();
            self.dirty = false;
        } else {
            self.dirty = true;
        }
    }

    fn process(&mut self, batch: Vec<Op>, policy: SyncPolicy) {
        let mut group = Vec::new();
        for op in batch {
            match op {
                Op::Append { .. } | Op::Replicate { .. } => group.push(op),
                Op::Maint(m) => {
                    self.journal_group(std::mem::take(&mut group), policy);
                    self.maint(m);
                }
                Op::Sync { reply } => {
                    self.journal_group(std::mem::take(&mut group), policy);
                    let r = match self.checkpoint() {
                        Ok(()) => Ok(()),
                        Err(e) => {
                            if self.stopped.is_none() {
                                self.stop(e);
                            }
                            Err(self.stopped_err().unwrap_or_else(|| self.closed_err()))
                        }
                    };
                    reply(r);
                }
            }
        }
        self.journal_group(group, policy);
        self.after_group(policy);
    }

    /// Gives a group of appends their offsets, writes them as one journal
    /// frame (synced under `always`), makes them readable and answers them.
    fn journal_group(&mut self, ops: Vec<Op>, policy: SyncPolicy) {
        if ops.is_empty() {
            return;
        }
        let saved = self.logical.clone();
        let base = self.logical.leo;
        let mut payload = Vec::with_capacity(ops.iter().map(Op::payload_bytes).sum());
        let mut entries = Vec::new();
        let mut answers: Vec<Answer> = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                Op::Append {
                    epoch,
                    expected,
                    records,
                    reply,
                } => {
                    if let Some(e) = self.stopped_err() {
                        answers.push(Answer {
                            reply,
                            result: Err(e),
                        });
                        continue;
                    }
                    if let Err(e) = self.check_append(&self.logical, epoch, expected, &records) {
                        answers.push(Answer {
                            reply,
                            result: Err(e),
                        });
                        continue;
                    }
                    let first = self.logical.leo;
                    self.logical.note_epoch(epoch, first);
                    for (i, r) in records.iter().enumerate() {
                        let offset = first + i as u64;
                        let len = push_entry(
                            &mut payload,
                            &mut entries,
                            offset,
                            &RecordRef::from_new(r, epoch),
                        );
                        self.logical.note_record(offset, len);
                    }
                    answers.push(Answer {
                        reply,
                        result: Ok(AppendResult {
                            first_offset: first,
                            last_offset: self.logical.leo - 1,
                        }),
                    });
                }
                Op::Replicate { records, reply } => {
                    if let Some(e) = self.stopped_err() {
                        answers.push(Answer {
                            reply,
                            result: Err(e),
                        });
                        continue;
                    }
                    if let Err(e) = self.check_replicated(&self.logical, &records) {
                        answers.push(Answer {
                            reply,
                            result: Err(e),
                        });
                        continue;
                    }
                    let first = records.first().map_or(self.logical.leo, |r| r.offset);
                    for r in &records {
                        self.logical.note_epoch(r.leader_epoch, r.offset);
                        let len = push_entry(
                            &mut payload,
                            &mut entries,
                            r.offset,
                            &RecordRef::from_record(r),
                        );
                        self.logical.note_record(r.offset, len);
                    }
                    answers.push(Answer {
                        reply,
                        result: Ok(AppendResult {
                            first_offset: first,
                            last_offset: self.logical.leo - 1,
                        }),
                    });
                }
                Op::Maint(_) | Op::Sync { .. } => {
                    // `process` hands only appends to this function.
                }
            }
        }
        if entries.is_empty() {
            for a in answers {
                (a.reply)(a.result);
            }
            return;
        }
        let end = self.logical.leo;
        let started = Instant::now();
        self.last_group = started;
        let always = matches!(policy, SyncPolicy::Always);
        let mark = self.journal.mark();
        let written = if always {
            self.journal
                .append_written(base, end, &payload)
                .and_then(|()| self.journal.sync())
        } else {
            self.journal.append(base, end, &payload)
        };
        if let Err(source) = written {
            // The frame may be partly on disk (or, after a failed fsync,
            // whole in the page cache but not on disk): it is cut off the
            // journal, so that neither a replay nor the next frame, written
            // in its place, can take it for acknowledged. Writes stop until
            // a retry.
            self.logical = saved;
            if let Err(e) = self.journal.rewind(mark) {
                tracing::error!(partition = %self.name, error = %e, "cutting a failed frame off the journal");
            }
            let e = Arc::new(self.journal_err(source));
            self.stop_shared(e.clone());
            for a in answers {
                let r = match a.result {
                    Ok(_) => Err(StoreError::Storage {
                        partition: self.name.clone(),
                        source: e.clone(),
                    }),
                    Err(refused) => Err(refused),
                };
                (a.reply)(r);
            }
            return;
        }
        if always {
            self.last_journal_sync = Instant::now();
        }
        self.observer.journal_write(
            entries.len() as u64,
            payload.len() as u64,
            started.elapsed(),
            always,
        );
        let payload = Bytes::from(payload);
        self.tail_bytes += payload.len();
        self.shared
            .tail
            .lock()
            .push_back(Arc::new(TailBatch { payload, entries }));
        self.shared.publish(&self.logical);
        for a in answers {
            (a.reply)(a.result);
        }
    }

    /// Truncation, retention and compaction: the tail is applied first, then
    /// one transaction (durable for a truncation, which also empties the
    /// journal durably).
    fn maint(&mut self, m: Maint) {
        self.poll_apply(true);
        if self.stopped.is_none() {
            if let Err(e) = self.apply_tail(false) {
                self.stop(e);
            }
        }
        match m {
            Maint::Apply { reply } => match self.stopped_err() {
                Some(e) => reply(Err(e)),
                None => reply(Ok(())),
            },
            Maint::Truncate { to, reply } => {
                if let Some(e) = self.stopped_err() {
                    return reply(Err(e));
                }
                let r = self.transact(true, |t, st| truncate(t, st, to));
                // Both journals cleared durably: a frame of either could
                // otherwise match the moved log end again.
                let r = r
                    .and_then(|()| {
                        self.journal
                            .reset(true)
                            .map_err(|source| self.journal_err(source))
                    })
                    .and_then(|()| self.reset_spare(true));
                reply(r.map_err(|e| self.failed(e)));
            }
            Maint::DeletePrefix {
                before,
                max,
                generation,
                reply,
            } => {
                if let Some(e) = self.stopped_err() {
                    return reply(Err(e));
                }
                if generation != self.state.generation {
                    return reply(Ok((0, 0)));
                }
                let r = self.transact(false, |t, st| delete_prefix(t, st, before, max));
                reply(r.map_err(|e| self.failed(e)));
            }
            Maint::DeleteOffsets {
                offsets,
                generation,
                reply,
            } => {
                if let Some(e) = self.stopped_err() {
                    return reply(Err(e));
                }
                if generation != self.state.generation {
                    return reply(Ok((0, 0)));
                }
                let r = self.transact(false, |t, st| delete_offsets(t, st, &offsets));
                reply(r.map_err(|e| self.failed(e)));
            }
        }
    }

    /// Runs `f` in one write transaction on a copy of the applied state;
    /// on success the copy becomes the applied and the logical state (the
    /// tail is empty here).
    fn transact<T>(
        &mut self,
        durable: bool,
        f: impl FnOnce(&mut Tables<'_>, &mut State) -> Result<T, redb::StorageError>,
    ) -> Result<T, EngineError> {
        let mut st = self.state.clone();
        let started = Instant::now();
        let db = self.engine()?;
        let (out, commit_time) = catch_unwind(AssertUnwindSafe(|| {
            let txn = begin(&db, durable)?;
            let out = {
                let mut t = Tables::open(&txn)?;
                let out = f(&mut t, &mut st)?;
                t.put_meta(&st)?;
                out
            };
            let committing = Instant::now();
            txn.commit()?;
            Ok::<_, EngineError>((out, committing.elapsed()))
        }))
        .unwrap_or(Err(EngineError::Panicked("a write")))?;
        self.observer.commit(0, started.elapsed(), durable);
        self.committed(durable, commit_time);
        self.state = st;
        let appended = self.logical.appended;
        self.logical = State {
            appended,
            ..self.state.clone()
        };
        self.shared.publish(&self.logical);
        Ok(out)
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

fn note_epoch(
    t: &mut Tables<'_>,
    st: &mut State,
    epoch: u64,
    offset: u64,
) -> Result<(), redb::StorageError> {
    if st.note_epoch(epoch, offset) {
        t.epochs.insert(epoch, offset)?;
    }
    Ok(())
}

/// Writes journaled batches into the chunk table, one B-tree insert per
/// chunk (up to [`codec::CHUNK_RECORDS`] records or [`codec::CHUNK_BYTES`]
/// bytes). Chunks are cut across batch boundaries: a tail of many small
/// batches (one per ack at window 1) makes full chunks, not one small
/// chunk — and one leaf page of at least 4 KiB written to the disk — per
/// batch. A batch's payload already has the chunk layout, so a chunk within
/// one batch is a slice of it; one that spans batches is their slices put
/// together.
fn put_batches(
    t: &mut Tables<'_>,
    st: &mut State,
    batches: &[Arc<TailBatch>],
) -> Result<(), redb::StorageError> {
    // The chunk being gathered: runs of entries (batch, from, to).
    let mut parts: Vec<(&TailBatch, usize, usize)> = Vec::new();
    let (mut records, mut size) = (0usize, 0usize);
    let mut joined = Vec::new();
    for b in batches {
        for (i, e) in b.entries.iter().enumerate() {
            let add = codec::ENTRY_HEADER + (e.end - e.start);
            if records > 0 && (records == codec::CHUNK_RECORDS || size + add > codec::CHUNK_BYTES) {
                put_chunk(t, st, &parts, &mut joined)?;
                parts.clear();
                (records, size) = (0, 0);
            }
            match parts.last_mut() {
                Some((pb, _, to)) if std::ptr::eq(*pb, &**b) => *to = i + 1,
                _ => parts.push((&**b, i, i + 1)),
            }
            records += 1;
            size += add;
        }
    }
    if records > 0 {
        put_chunk(t, st, &parts, &mut joined)?;
    }
    Ok(())
}

/// Inserts one chunk made of runs of batch entries (see [`put_batches`])
/// and indexes its records; `joined` is scratch space for a chunk that
/// spans batches.
fn put_chunk(
    t: &mut Tables<'_>,
    st: &mut State,
    parts: &[(&TailBatch, usize, usize)],
    joined: &mut Vec<u8>,
) -> Result<(), redb::StorageError> {
    fn bytes<'b>(&(b, from, to): &(&'b TailBatch, usize, usize)) -> &'b [u8] {
        &b.payload[b.entries[from].start - codec::ENTRY_HEADER..b.entries[to - 1].end]
    }
    let Some(&(b0, from0, _)) = parts.first() else {
        return Ok(());
    };
    let first = b0.entries[from0].offset;
    if let [one] = parts {
        t.records.insert(first, bytes(one))?;
    } else {
        joined.clear();
        for p in parts {
            joined.extend_from_slice(bytes(p));
        }
        t.records.insert(first, joined.as_slice())?;
    }
    for &(b, from, to) in parts {
        for e in &b.entries[from..to] {
            note_epoch(t, st, e.leader_epoch, e.offset)?;
            if st.rmax.is_none_or(|m| e.timestamp_ns > m) {
                t.index.insert((e.timestamp_ns, e.offset), ())?;
                st.rmax = Some(e.timestamp_ns);
            }
            st.note_record(e.offset, e.end - e.start);
        }
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
        let t = log
            .with_read(None, |rtx| offset_for_ts(rtx, 1000 + 300))
            .unwrap();
        assert_eq!(t, Some(300));
        // The old table is gone: the records live in chunks now.
        let db = log.db().unwrap().expect("the database exists");
        let rtx = db.begin_read().unwrap();
        assert!(open_read(&rtx, RECORDS_V1).unwrap().is_none());
        let chunks = open_read(&rtx, RECORDS).unwrap().unwrap();
        assert!(chunks.iter().unwrap().count() < n as usize / 2);
    }

    /// Under `interval`, full tails are applied on an applier thread while
    /// appends go on: every record stays readable at its offset throughout
    /// (from the tail or from redb), non-durable commits are made, and the
    /// log reopens with everything, once, in order.
    #[tokio::test]
    async fn full_tails_are_applied_in_the_background_while_appends_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig {
            sync: SyncPolicy::Interval(Duration::from_secs(3600)),
            ..LogConfig::default()
        };
        let log = PartitionLog::open(dir.path(), "p", cfg.clone()).unwrap();
        fn value(o: u64) -> Bytes {
            Bytes::from(format!("{o:08}").repeat(1024))
        }
        async fn assert_whole(log: &PartitionLog, end: u64) {
            let all = log.read(0, usize::MAX, usize::MAX).await.unwrap();
            assert_eq!(all.len() as u64, end);
            for (i, r) in all.iter().enumerate() {
                assert_eq!((r.offset, &r.value), (i as u64, &value(i as u64)));
            }
        }
        let per_batch = 16u64;
        // Three tails' worth (8 KiB values), in 128 KiB appends.
        let batches = (3 * TAIL_APPLY_BYTES as u64) / (8192 * per_batch) + 1;
        let mut next = 0u64;
        for _ in 0..batches {
            let recs = (0..per_batch)
                .map(|i| NewRecord {
                    timestamp_ns: (next + i) as i64,
                    value: value(next + i),
                    subject: "s".into(),
                    ..Default::default()
                })
                .collect();
            let a = log.append(1, recs).await.unwrap();
            assert_eq!(a.first_offset, next);
            next += per_batch;
            // The oldest, the middle and the newest record, wherever each is.
            for o in [0, next / 2, next - 1] {
                let got = log.read(o, 1, usize::MAX).await.unwrap();
                assert_eq!(got.len(), 1, "offset {o} readable");
                assert_eq!(got[0].offset, o);
                assert_eq!(got[0].value, value(o));
            }
        }
        let stats = log.commit_stats();
        assert!(
            stats.commits >= 2,
            "full tails were applied while appending: {stats:?}"
        );
        assert_eq!(stats.durable_commits, 0, "no checkpoint was due");
        assert_whole(&log, next).await;
        log.close().await.unwrap();
        let log = PartitionLog::open_existing(dir.path(), "p", cfg).unwrap();
        assert_eq!(log.log_end_offset(), next);
        assert_whole(&log, next).await;
        log.close().await.unwrap();
    }

    /// Where frames are copied into a mapping of the journal, a log keeps
    /// it mapped while records wait for a checkpoint and unmaps it once it
    /// is quiet and all durable (its pages then leave the process's
    /// resident memory); the next append maps it again, and every record
    /// reads back, also after a reopen.
    #[tokio::test]
    async fn a_quiet_log_unmaps_its_journal() {
        let dir = tempfile::tempdir().unwrap();
        let jpath = journal::path(dir.path(), "p");
        let mapped = || {
            std::fs::read_to_string("/proc/self/maps")
                .unwrap()
                .lines()
                .any(|l| l.ends_with(&*jpath.to_string_lossy()))
        };
        let mappable = journal::mappable(&std::fs::File::open(dir.path()).unwrap());
        let cfg = LogConfig {
            sync: SyncPolicy::Interval(Duration::from_millis(20)),
            ..LogConfig::default()
        };
        let log = PartitionLog::open(dir.path(), "p", cfg.clone()).unwrap();
        let rec = |v: &'static str| NewRecord {
            timestamp_ns: 1,
            value: Bytes::from_static(v.as_bytes()),
            subject: "s".into(),
            ..Default::default()
        };
        // The first checkpoint fills the journal's file (and so remaps it);
        // from the second on, only going quiet unmaps it.
        for (i, v) in ["one", "two"].into_iter().enumerate() {
            log.append(1, vec![rec(v)]).await.unwrap();
            // Until the checkpoint (up to CHECKPOINT_EVERY away) it is
            // pending.
            assert_eq!(mapped(), mappable, "mapped after append {i}");
            let deadline = Instant::now() + CHECKPOINT_EVERY * 5;
            while mapped() {
                assert!(Instant::now() < deadline, "the journal stays mapped ({i})");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(log.commit_stats().durable_commits > i as u64);
        }
        log.append(1, vec![rec("three")]).await.unwrap();
        assert_eq!(mapped(), mappable, "mapped again by the next append");
        let values = |rs: Vec<Record>| rs.into_iter().map(|r| r.value).collect::<Vec<_>>();
        let want: Vec<Bytes> = ["one", "two", "three"]
            .into_iter()
            .map(|v| Bytes::from_static(v.as_bytes()))
            .collect();
        assert_eq!(values(log.read(0, 10, usize::MAX).await.unwrap()), want);
        log.close().await.unwrap();
        assert!(!mapped(), "closed, nothing is mapped");
        let log = PartitionLog::open_existing(dir.path(), "p", cfg).unwrap();
        assert_eq!(values(log.read(0, 10, usize::MAX).await.unwrap()), want);
        log.close().await.unwrap();
    }

    /// A half-made database file left by a crash while a new log created
    /// its file is under the temporary name, never the log's own: the log
    /// still opens, its first append creates the file in full, and no
    /// temporary file is left.
    #[tokio::test]
    async fn a_half_made_database_file_is_replaced_and_never_seen_as_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = file_path(dir.path(), "p");
        let tmp = creating_path(&path);
        assert_eq!(tmp, dir.path().join("p.redb.new"));
        std::fs::write(&tmp, b"redb header cut short").unwrap();
        let log = PartitionLog::open(dir.path(), "p", LogConfig::default()).unwrap();
        assert!(!path.exists(), "a new log has no database file yet");
        let rec = NewRecord {
            timestamp_ns: 1,
            value: Bytes::from_static(b"v"),
            subject: "s".into(),
            ..Default::default()
        };
        log.append(1, vec![rec]).await.unwrap();
        assert!(path.exists() && !tmp.exists());
        log.close().await.unwrap();
        let log = PartitionLog::open_existing(dir.path(), "p", LogConfig::default()).unwrap();
        assert_eq!(log.log_end_offset(), 1);
        log.close().await.unwrap();
    }
}
