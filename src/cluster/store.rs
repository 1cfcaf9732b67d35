//! Raft storage in redb: the log, the vote/committed/purged markers, the
//! metadata state machine and its snapshots.
//!
//! One database file, `<data>/raft/raft.redb`, holds two tables:
//! - `raft_log`: log index (u64, big-endian order by redb) → JSON of the entry;
//! - `raft_meta`: small named values (JSON): `vote`, `committed`, `purged`,
//!   `snapshot` (meta + data of the latest snapshot) and `identity` (the Raft
//!   node id and server id this directory was created with).
//!
//! Invariants:
//! - every redb call runs on the blocking pool (`spawn_blocking`), never on a
//!   tokio worker; write transactions commit with immediate durability, so a
//!   vote or an appended entry is on disk before openraft is told so;
//! - `purge` records the purged marker and deletes the entries in the same
//!   transaction, so the log state read back after a crash is consistent;
//! - the state machine keeps the state in memory only; a restart restores the
//!   latest snapshot and openraft re-applies the committed entries after it;
//! - readers get an `Arc<MetadataState>` that never changes under them: apply
//!   copies the state once per batch (copy-on-write). That copy is linear in
//!   the number of streams (about 4 ms for 1000 streams in a debug build),
//!   fine for metadata rates; sharing unchanged streams is the next step if
//!   clusters grow to many thousands of streams.
//!
//! Data read back from disk is decoded with serde; a corrupt value becomes a
//! storage error, never a panic. A damaged file (truncated, garbage) is
//! reported as `StoreError::Damaged` naming it: redb asserts on some
//! malformed headers, so every redb call here runs under `catch_quiet`,
//! which turns such a panic into an error without printing it.
//!
//! Missing metadata must never look like a fresh start: `check_not_lost`
//! refuses to open when `raft.redb` is missing or empty while the data
//! directory still holds stream data, since starting would silently drop
//! every stream (their files would stay on disk, unknown to the metadata).

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::store::check::catch_quiet;

use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{
    AnyError, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend,
    RaftLogReader, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError, StorageIOError,
    StoredMembership, Vote,
};
use redb::{Database, Durability, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::state::{MetaResponse, MetadataState, NodeInfo};
use super::TypeConfig;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");

const KEY_VOTE: &str = "vote";
const KEY_COMMITTED: &str = "committed";
const KEY_PURGED: &str = "purged";
const KEY_SNAPSHOT: &str = "snapshot";
const KEY_IDENTITY: &str = "identity";

type NodeId = u64;
type SResult<T> = Result<T, StorageError<NodeId>>;

/// Errors of the redb layer, before they are mapped to openraft's error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// redb failed (I/O, corruption, transaction).
    #[error("redb: {0}")]
    Redb(Box<redb::Error>),
    /// A stored value does not decode.
    #[error("decoding stored {what}: {source}")]
    Decode {
        /// Which value.
        what: &'static str,
        /// Why.
        source: serde_json::Error,
    },
    /// A value does not encode (cannot happen for our plain data types, but
    /// it is an error rather than a panic).
    #[error("encoding {what}: {source}")]
    Encode {
        /// Which value.
        what: &'static str,
        /// Why.
        source: serde_json::Error,
    },
    /// The database was closed (the metadata group was shut down).
    #[error("raft database is closed")]
    Closed,
    /// The blocking task was cancelled or panicked.
    #[error("storage task failed: {0}")]
    Join(String),
    /// The database file exists but is not a readable redb database
    /// (truncated, overwritten, or corrupt).
    #[error(
        "raft database {path} is damaged ({reason}); restore it from a backup, \
         or move the data directory away to start empty"
    )]
    Damaged {
        /// The database file.
        path: PathBuf,
        /// What redb reported.
        reason: String,
    },
    /// The database file is missing or empty while stream data exists:
    /// opening would create empty metadata and silently drop the streams.
    #[error(
        "raft database {db} is missing or empty but {streams} holds stream data; \
         refusing to start, as those streams would be silently dropped: restore {db} \
         from a backup, or move {streams} away to start with no streams"
    )]
    MetadataLost {
        /// The missing or empty database file.
        db: PathBuf,
        /// The directory holding stream data.
        streams: PathBuf,
    },
}

fn boxed<E: Into<redb::Error>>(e: E) -> Box<redb::Error> {
    Box::new(e.into())
}

/// Whether a redb error means the file content is bad (as opposed to, say,
/// the file being locked by another process or a permission problem).
fn is_damage(e: &redb::Error) -> bool {
    use std::io::ErrorKind;
    match e {
        redb::Error::Corrupted(_) => true,
        redb::Error::Io(io) => {
            matches!(io.kind(), ErrorKind::InvalidData | ErrorKind::UnexpectedEof)
        }
        _ => false,
    }
}

/// Refuses to open over lost metadata: fails with
/// `StoreError::MetadataLost` when `<data_dir>/raft/raft.redb` is missing or
/// empty but `<data_dir>/streams` holds stream data (a file, or a stream
/// directory with anything in it; the layout of `partition::manager`).
/// A fresh data directory, or one with only empty stream directories, passes.
pub async fn check_not_lost(data_dir: &Path) -> Result<(), StoreError> {
    let data_dir = data_dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let db = data_dir.join("raft").join("raft.redb");
        match std::fs::metadata(&db) {
            Ok(m) if m.len() > 0 => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Unreadable for another reason: opening reports it.
            Err(_) => return Ok(()),
        }
        let streams = data_dir.join("streams");
        if holds_stream_data(&streams) {
            Err(StoreError::MetadataLost { db, streams })
        } else {
            Ok(())
        }
    })
    .await
    .map_err(|e| StoreError::Join(e.to_string()))?
}

/// Whether `streams` holds anything of a stream. An entry that cannot be
/// read counts as data: refusing is safer than dropping streams unseen.
fn holds_stream_data(streams: &Path) -> bool {
    let entries = match std::fs::read_dir(streams) {
        Ok(entries) => entries,
        Err(e) => return e.kind() != std::io::ErrorKind::NotFound,
    };
    for entry in entries {
        let Ok(entry) = entry else { return true };
        let path = entry.path();
        if !path.is_dir() {
            return true;
        }
        match std::fs::read_dir(&path) {
            Ok(mut inner) => {
                if inner.next().is_some() {
                    return true;
                }
            }
            Err(_) => return true,
        }
    }
    false
}

macro_rules! redb_err {
    ($e:expr) => {
        $e.map_err(|e| StoreError::Redb(Box::new(redb::Error::from(e))))
    };
}

fn encode<T: Serialize>(what: &'static str, v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(|source| StoreError::Encode { what, source })
}

fn decode<T: DeserializeOwned>(what: &'static str, b: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(b).map_err(|source| StoreError::Decode { what, source })
}

fn io_err(subject: ErrorSubject<NodeId>, verb: ErrorVerb, e: &StoreError) -> StorageError<NodeId> {
    StorageIOError::new(subject, verb, AnyError::new(e)).into()
}

/// The persisted identity of this data directory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Identity {
    /// Raft node id.
    pub raft_id: u64,
    /// Server id the directory was created with.
    pub server_id: String,
}

/// The latest snapshot as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, NodeInfo>,
    data: Vec<u8>,
}

/// Shared handle on the Raft database. Cloning is cheap.
///
/// `close` drops the database for every clone (once in-flight operations
/// finish), so the same directory can be opened again in this process even if
/// some handle outlives the Raft task.
#[derive(Clone)]
pub struct RaftDb {
    db: Arc<parking_lot::RwLock<Option<Arc<Database>>>>,
}

impl RaftDb {
    /// Opens (creating if needed) `<dir>/raft.redb` on the blocking pool.
    /// A file redb cannot read gives `StoreError::Damaged`; a lock held by
    /// another open stays `StoreError::Redb(DatabaseAlreadyOpen)`, which
    /// the node start retries.
    pub async fn open(dir: &Path) -> Result<RaftDb, StoreError> {
        let dir = dir.to_path_buf();
        let db = tokio::task::spawn_blocking(move || -> Result<Database, StoreError> {
            std::fs::create_dir_all(&dir).map_err(|e| StoreError::Redb(Box::new(e.into())))?;
            let path = dir.join("raft.redb");
            let opened = catch_quiet(|| -> Result<Database, Box<redb::Error>> {
                let db = Database::create(&path).map_err(boxed)?;
                // Create both tables so that readers never meet a missing table.
                let tx = db.begin_write().map_err(boxed)?;
                tx.open_table(LOG).map_err(boxed)?;
                tx.open_table(META).map_err(boxed)?;
                tx.commit().map_err(boxed)?;
                Ok(db)
            });
            match opened {
                Ok(Ok(db)) => Ok(db),
                Ok(Err(e)) if is_damage(&e) => Err(StoreError::Damaged {
                    path,
                    reason: e.to_string(),
                }),
                Ok(Err(e)) => Err(StoreError::Redb(e)),
                Err(reason) => Err(StoreError::Damaged { path, reason }),
            }
        })
        .await
        .map_err(|e| StoreError::Join(e.to_string()))??;
        Ok(RaftDb {
            db: Arc::new(parking_lot::RwLock::new(Some(Arc::new(db)))),
        })
    }

    /// Closes the database: later operations fail with `StoreError::Closed`.
    /// Waits (up to 5s) for operations in flight to release it, then drops it
    /// on the blocking pool, so that the file lock is gone when this returns.
    pub async fn close(&self) {
        let Some(mut db) = self.db.write().take() else {
            return;
        };
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match Arc::try_unwrap(db) {
                Ok(db) => {
                    // Dropping flushes and unlocks the file: blocking work.
                    let _ = tokio::task::spawn_blocking(move || drop(db)).await;
                    return;
                }
                Err(still_shared) => {
                    if tokio::time::Instant::now() >= deadline {
                        tracing::warn!(
                            "raft database still in use after shutdown; it closes when released"
                        );
                        return;
                    }
                    db = still_shared;
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            }
        }
    }

    /// Runs `f` with the database on the blocking pool.
    async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    {
        let db = self.db.read().clone().ok_or(StoreError::Closed)?;
        // A damaged page met after open may make redb panic too.
        tokio::task::spawn_blocking(move || catch_quiet(|| f(&db)))
            .await
            .map_err(|e| StoreError::Join(e.to_string()))?
            .map_err(StoreError::Join)?
    }

    async fn get_meta<T: DeserializeOwned + Send + 'static>(
        &self,
        key: &'static str,
    ) -> Result<Option<T>, StoreError> {
        self.run(move |db| {
            let tx = redb_err!(db.begin_read())?;
            let t = redb_err!(tx.open_table(META))?;
            match redb_err!(t.get(key))? {
                Some(v) => Ok(Some(decode(key, v.value())?)),
                None => Ok(None),
            }
        })
        .await
    }

    async fn put_meta<T: Serialize>(&self, key: &'static str, v: &T) -> Result<(), StoreError> {
        self.put_meta_with(key, v, Durability::Immediate).await
    }

    async fn put_meta_with<T: Serialize>(
        &self,
        key: &'static str,
        v: &T,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let bytes = encode(key, v)?;
        self.run(move |db| {
            let mut tx = redb_err!(db.begin_write())?;
            tx.set_durability(durability);
            {
                let mut t = redb_err!(tx.open_table(META))?;
                redb_err!(t.insert(key, bytes.as_slice()))?;
            }
            redb_err!(tx.commit())
        })
        .await
    }

    /// The identity stored in this database, if any.
    pub async fn identity(&self) -> Result<Option<Identity>, StoreError> {
        self.get_meta(KEY_IDENTITY).await
    }

    /// Stores the identity of this database.
    pub async fn set_identity(&self, id: &Identity) -> Result<(), StoreError> {
        self.put_meta(KEY_IDENTITY, id).await
    }
}

// ---------------------------------------------------------------- log store

/// Raft log storage (`RaftLogStorage` + `RaftLogReader`) on redb.
#[derive(Clone)]
pub struct LogStore {
    db: RaftDb,
}

impl LogStore {
    /// A log store on this database.
    pub fn new(db: RaftDb) -> LogStore {
        LogStore { db }
    }
}

fn bounds<RB: RangeBounds<u64>>(r: &RB) -> (u64, Option<u64>) {
    let start = match r.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    // An exclusive end of 0 selects nothing; map it to an empty range.
    let end = match r.end_bound() {
        Bound::Included(e) => Some(*e),
        Bound::Excluded(0) => return (1, Some(0)),
        Bound::Excluded(e) => Some(e - 1),
        Bound::Unbounded => None,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> SResult<Vec<Entry<TypeConfig>>> {
        let (start, end) = bounds(&range);
        if matches!(end, Some(e) if e < start) {
            return Ok(Vec::new());
        }
        self.db
            .run(move |db| {
                let tx = redb_err!(db.begin_read())?;
                let t = redb_err!(tx.open_table(LOG))?;
                let iter = match end {
                    Some(e) => redb_err!(t.range(start..=e))?,
                    None => redb_err!(t.range(start..))?,
                };
                let mut out = Vec::new();
                for item in iter {
                    let (_, v) = redb_err!(item)?;
                    out.push(decode::<Entry<TypeConfig>>("log entry", v.value())?);
                }
                Ok(out)
            })
            .await
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, &e))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> SResult<LogState<TypeConfig>> {
        self.db
            .run(|db| {
                let tx = redb_err!(db.begin_read())?;
                let meta = redb_err!(tx.open_table(META))?;
                let purged: Option<LogId<NodeId>> = match redb_err!(meta.get(KEY_PURGED))? {
                    Some(v) => decode("purged", v.value())?,
                    None => None,
                };
                let log = redb_err!(tx.open_table(LOG))?;
                let last = match redb_err!(log.last())? {
                    Some((_, v)) => {
                        Some(decode::<Entry<TypeConfig>>("log entry", v.value())?.log_id)
                    }
                    None => purged,
                };
                Ok(LogState {
                    last_purged_log_id: purged,
                    last_log_id: last,
                })
            })
            .await
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, &e))
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> SResult<()> {
        self.db
            .put_meta(KEY_VOTE, vote)
            .await
            .map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Write, &e))
    }

    async fn read_vote(&mut self) -> SResult<Option<Vote<NodeId>>> {
        self.db
            .get_meta(KEY_VOTE)
            .await
            .map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Read, &e))
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> SResult<()> {
        // The committed marker only saves re-applying entries after a
        // restart; losing the latest value in a crash is harmless (the leader
        // commits them again), so it does not pay for its own fsync: the next
        // durable commit (append, vote) persists it.
        self.db
            .put_meta_with(KEY_COMMITTED, &committed, Durability::None)
            .await
            .map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, &e))
    }

    async fn read_committed(&mut self) -> SResult<Option<LogId<NodeId>>> {
        self.db
            .get_meta::<Option<LogId<NodeId>>>(KEY_COMMITTED)
            .await
            .map(Option::flatten)
            .map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Read, &e))
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> SResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut encoded = Vec::new();
        for e in entries {
            match encode("log entry", &e) {
                Ok(b) => encoded.push((e.log_id.index, b)),
                Err(err) => {
                    callback.log_io_completed(Err(std::io::Error::other(err.to_string())));
                    return Err(io_err(ErrorSubject::Logs, ErrorVerb::Write, &err));
                }
            }
        }
        let res = self
            .db
            .run(move |db| {
                let tx = redb_err!(db.begin_write())?;
                {
                    let mut t = redb_err!(tx.open_table(LOG))?;
                    for (idx, bytes) in &encoded {
                        redb_err!(t.insert(*idx, bytes.as_slice()))?;
                    }
                }
                redb_err!(tx.commit())
            })
            .await;
        match res {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(io_err(ErrorSubject::Logs, ErrorVerb::Write, &e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> SResult<()> {
        let from = log_id.index;
        self.db
            .run(move |db| {
                let tx = redb_err!(db.begin_write())?;
                {
                    let mut t = redb_err!(tx.open_table(LOG))?;
                    let keys = collect_keys(&t, from..)?;
                    for k in keys {
                        redb_err!(t.remove(k))?;
                    }
                }
                redb_err!(tx.commit())
            })
            .await
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, &e))
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> SResult<()> {
        let marker = encode("purged", &Some(log_id))
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, &e))?;
        let upto = log_id.index;
        self.db
            .run(move |db| {
                let tx = redb_err!(db.begin_write())?;
                {
                    let mut m = redb_err!(tx.open_table(META))?;
                    redb_err!(m.insert(KEY_PURGED, marker.as_slice()))?;
                    let mut t = redb_err!(tx.open_table(LOG))?;
                    let keys = collect_keys(&t, ..=upto)?;
                    for k in keys {
                        redb_err!(t.remove(k))?;
                    }
                }
                redb_err!(tx.commit())
            })
            .await
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, &e))
    }
}

fn collect_keys<T, R>(t: &T, range: R) -> Result<Vec<u64>, StoreError>
where
    T: ReadableTable<u64, &'static [u8]>,
    R: RangeBounds<u64>,
{
    let mut keys = Vec::new();
    for item in redb_err!(t.range(range))? {
        let (k, _) = redb_err!(item)?;
        keys.push(k.value());
    }
    Ok(keys)
}

// ------------------------------------------------------------ state machine

/// The metadata state machine: applies entries to an in-memory
/// `MetadataState`, publishes each new state on a watch channel, and stores
/// snapshots in redb.
pub struct StateMachine {
    db: RaftDb,
    state: Arc<MetadataState>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, NodeInfo>,
    tx: watch::Sender<Arc<MetadataState>>,
}

impl StateMachine {
    /// Opens the state machine, restoring the latest stored snapshot.
    pub async fn open(db: RaftDb) -> Result<StateMachine, StoreError> {
        let snap: Option<StoredSnapshot> = db.get_meta(KEY_SNAPSHOT).await?;
        let (state, last_applied, membership) = match snap {
            Some(s) => (
                decode::<MetadataState>("snapshot data", &s.data)?,
                s.meta.last_log_id,
                s.meta.last_membership,
            ),
            None => (MetadataState::default(), None, StoredMembership::default()),
        };
        let state = Arc::new(state);
        let (tx, _) = watch::channel(state.clone());
        Ok(StateMachine {
            db,
            state,
            last_applied,
            membership,
            tx,
        })
    }

    /// A receiver of every state published after apply.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataState>> {
        self.tx.subscribe()
    }

    fn publish(&self) {
        self.tx.send_replace(self.state.clone());
    }
}

/// Builds a snapshot of the state as it was when the builder was made.
pub struct SnapshotBuilder {
    db: RaftDb,
    state: Arc<MetadataState>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, NodeInfo>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> SResult<Snapshot<TypeConfig>> {
        let data = encode("snapshot data", &*self.state)
            .map_err(|e| io_err(ErrorSubject::StateMachine, ErrorVerb::Read, &e))?;
        let snapshot_id = match self.last_applied {
            Some(l) => format!(
                "{}-{}-{}",
                l.leader_id.term,
                l.index,
                chrono::Utc::now().timestamp_micros()
            ),
            None => format!("0-0-{}", chrono::Utc::now().timestamp_micros()),
        };
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        };
        self.db.put_meta(KEY_SNAPSHOT, &stored).await.map_err(|e| {
            io_err(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Write,
                &e,
            )
        })?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> SResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, NodeInfo>)> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> SResult<Vec<MetaResponse>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut out = Vec::new();
        // Copy-on-write: readers keep the Arc they hold; the state is cloned at
        // most once per batch.
        let state = Arc::make_mut(&mut self.state);
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            state.applied_index = entry.log_id.index;
            let resp = match entry.payload {
                EntryPayload::Blank => MetaResponse::Ok,
                EntryPayload::Normal(cmd) => state.apply(&cmd),
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), m);
                    MetaResponse::Ok
                }
            };
            out.push(resp);
        }
        self.publish();
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            db: self.db.clone(),
            state: self.state.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> SResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, NodeInfo>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> SResult<()> {
        let data = snapshot.into_inner();
        let state: MetadataState = decode("snapshot data", &data).map_err(|e| {
            io_err(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Read,
                &e,
            )
        })?;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        self.db.put_meta(KEY_SNAPSHOT, &stored).await.map_err(|e| {
            io_err(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Write,
                &e,
            )
        })?;
        self.state = Arc::new(state);
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.publish();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> SResult<Option<Snapshot<TypeConfig>>> {
        let snap: Option<StoredSnapshot> = self
            .db
            .get_meta(KEY_SNAPSHOT)
            .await
            .map_err(|e| io_err(ErrorSubject::Snapshot(None), ErrorVerb::Read, &e))?;
        Ok(snap.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}

/// What an offline check of `raft.redb` found (`liftbridge check`).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct RaftFileReport {
    /// Log entries stored.
    pub entries: u64,
    /// Index of the first stored entry.
    pub first_index: Option<u64>,
    /// Index of the last stored entry.
    pub last_index: Option<u64>,
    /// A snapshot of the metadata is stored.
    pub snapshot: bool,
    /// The directory's identity (Raft id, server id), if stored.
    pub identity: Option<Identity>,
    /// What is wrong; empty when the file is sound.
    pub problems: Vec<String>,
}

/// Reads `path` (a `raft.redb`) offline, without writing to it, and
/// decodes every stored entry and marker. A file a running node holds is
/// refused ([`CheckError::Locked`]); a file redb cannot open is a problem
/// in the report, never a panic.
///
/// [`CheckError::Locked`]: crate::store::check::CheckError::Locked
pub fn check_file(path: &Path) -> Result<RaftFileReport, crate::store::check::CheckError> {
    use crate::store::check::{open_database, CheckError, ReadOnlyFile};
    let mut report = RaftFileReport::default();
    let backend = ReadOnlyFile::open(path)?;
    let db = match open_database(backend, path) {
        Ok(db) => db,
        Err(CheckError::Unreadable { detail, .. }) => {
            report.problems.push(detail);
            return Ok(report);
        }
        Err(e) => return Err(e),
    };
    let scanned = catch_quiet(|| -> Result<(), Box<redb::Error>> {
        let rtx = db.begin_read().map_err(boxed)?;
        match rtx.open_table(LOG) {
            Ok(log) => {
                for item in log.iter().map_err(boxed)? {
                    let (k, v) = item.map_err(boxed)?;
                    let index = k.value();
                    report.first_index.get_or_insert(index);
                    report.last_index = Some(index);
                    report.entries += 1;
                    if let Err(e) = decode::<Entry<TypeConfig>>("log entry", v.value()) {
                        report.problems.push(format!("log entry {index}: {e}"));
                    }
                }
            }
            Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(boxed(e)),
        }
        match rtx.open_table(META) {
            Ok(meta) => {
                let mut value = |key: &str| match meta.get(key) {
                    Ok(v) => v.map(|v| v.value().to_vec()),
                    Err(e) => {
                        report.problems.push(format!("{key}: {e}"));
                        None
                    }
                };
                let vote = value(KEY_VOTE);
                let committed = value(KEY_COMMITTED);
                let purged = value(KEY_PURGED);
                let snapshot = value(KEY_SNAPSHOT);
                let identity = value(KEY_IDENTITY);
                let mut check = |r: Result<(), StoreError>| {
                    if let Err(e) = r {
                        report.problems.push(e.to_string());
                    }
                };
                if let Some(v) = vote {
                    check(decode::<Vote<NodeId>>("vote", &v).map(drop));
                }
                if let Some(v) = committed {
                    check(decode::<Option<LogId<NodeId>>>("committed", &v).map(drop));
                }
                if let Some(v) = purged {
                    check(decode::<Option<LogId<NodeId>>>("purged", &v).map(drop));
                }
                if let Some(v) = snapshot {
                    report.snapshot = true;
                    check(decode::<StoredSnapshot>("snapshot", &v).map(drop));
                }
                if let Some(v) = identity {
                    match decode::<Identity>("identity", &v) {
                        Ok(id) => report.identity = Some(id),
                        Err(e) => report.problems.push(e.to_string()),
                    }
                }
            }
            Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(boxed(e)),
        }
        Ok(())
    });
    match scanned {
        Ok(Ok(())) => {}
        Ok(Err(e)) => report.problems.push(e.to_string()),
        Err(panic) => report.problems.push(panic),
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn check_not_lost_passes_fresh_and_empty_stream_dirs() {
        let dir = tempfile::tempdir().unwrap();
        check_not_lost(dir.path()).await.unwrap();
        // Directories of streams with no partition left: nothing to lose.
        std::fs::create_dir_all(dir.path().join("streams/a")).unwrap();
        check_not_lost(dir.path()).await.unwrap();
    }

    #[tokio::test]
    async fn check_not_lost_refuses_missing_or_empty_db_over_stream_data() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("streams/a/0")).unwrap();
        let err = check_not_lost(dir.path()).await.unwrap_err();
        let StoreError::MetadataLost { db, streams } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(*db, dir.path().join("raft/raft.redb"));
        assert_eq!(*streams, dir.path().join("streams"));

        std::fs::create_dir_all(dir.path().join("raft")).unwrap();
        std::fs::write(dir.path().join("raft/raft.redb"), b"").unwrap();
        let err = check_not_lost(dir.path()).await.unwrap_err();
        assert!(matches!(err, StoreError::MetadataLost { .. }), "{err:?}");

        // A non-empty file is for redb to judge.
        std::fs::write(dir.path().join("raft/raft.redb"), b"x").unwrap();
        check_not_lost(dir.path()).await.unwrap();
    }

    #[tokio::test]
    async fn open_truncated_file_is_damaged_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let db = RaftDb::open(dir.path()).await.unwrap();
        db.close().await;
        let path = dir.path().join("raft.redb");
        let full = std::fs::read(&path).unwrap();
        std::fs::write(&path, &full[..full.len() / 2]).unwrap();
        let err = RaftDb::open(dir.path()).await.err().expect("must not open");
        assert!(
            matches!(&err, StoreError::Damaged { path: p, .. } if *p == path),
            "{err:?}"
        );
    }
}
