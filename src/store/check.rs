//! Offline check and repair of one partition's files (`log.redb` and its
//! journal), for `liftbridge check` and `liftbridge repair`.
//!
//! Role: with the node stopped, read every record the partition holds —
//! the database's chunks and the journal frames a restart would replay —
//! verify each record's checksum and the structure around it (chunk entry
//! headers, increasing offsets, the stored log end offset, record count and
//! byte total), and report the *last good offset*: the end of the longest
//! prefix of the log in which every record is intact. Repair rewrites the
//! partition to that prefix, as Kafka recovers a segment by truncating it at
//! its first invalid batch.
//!
//! Invariants:
//! - a check never writes: the database is opened through [`ReadOnlyFile`],
//!   a storage backend that keeps whatever the engine writes (its own
//!   crash repair, header updates) in memory, and the journal is only read;
//! - nothing here panics on file content: every engine call runs under
//!   [`catch_quiet`] (redb asserts on some malformed headers), and record
//!   bytes go through the panic-free [`codec`];
//! - a check or repair takes the file lock the engine takes (`flock`), so it
//!   refuses a file a running node holds, and a node cannot open the file
//!   while a repair rewrites it;
//! - repair never reuses an offset: the rebuilt log keeps the highest log
//!   end offset known (stored, seen in a chunk key, or in the journal), so
//!   the next append gets an offset no reader was ever given. The records
//!   after the last good one are lost; repair says which offsets;
//! - repair builds the new database next to the old one, syncs it, then
//!   renames: the damaged file is kept as `log.redb.damaged` (or
//!   `.damaged.N`) for inspection, never deleted.
//!
//! Must not: be used on a partition a node has open (the lock refuses it),
//! or decide anything about replication: in a cluster, a replica that
//! holds the lost tail is the better source, and repair is the last resort.
//!
//! The table layout read here is the one `log.rs` writes (chunks, time
//! index, epochs, meta): the tests open logs written by [`PartitionLog`]
//! so that a change of layout there fails here.
//!
//! Known limits: a database file redb cannot open at all (header
//! destroyed, or the file truncated: redb refuses a file shorter than the
//! layout its header records, and cannot recover one) is reported but not
//! repaired — nothing in it can be found without its B-tree roots; a journal overwritten *after* its first frame
//! cannot be told from the stale frames a journal normally holds past its
//! end, so only a damaged head (not zeros, not a frame) is reported.
//!
//! [`PartitionLog`]: super::PartitionLog

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::FileExt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

use bytes::Bytes;
use redb::{Database, DatabaseError, Durability, ReadableTable, StorageBackend, TableError};
use serde::Serialize;
use thiserror::Error;

use super::codec::{self, Entry};
use super::journal;

// The layout of `log.rs` (see the module doc there).
use super::log::{EPOCHS, META, META_BYTES, META_COUNT, META_LEO, RECORDS, RECORDS_V1, TIME_INDEX};

/// File name of a partition's database inside its directory.
pub const DB_FILE: &str = "log.redb";
/// File name of a partition's journal inside its directory.
pub const JOURNAL_FILE: &str = "log.journal";
/// File name of a partition's second journal (see
/// [`journal::spare_path`]).
pub const SPARE_JOURNAL_FILE: &str = "log.journal.1";

/// Errors that stop a check or repair before any verdict on the records.
#[derive(Debug, Error)]
pub enum CheckError {
    /// A node (or another check) holds the file.
    #[error("{} is locked: a node is running with this data directory (stop it first)", .0.display())]
    Locked(PathBuf),
    /// The file cannot be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The database cannot be opened or read at all.
    #[error("{}: {detail}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What the engine reported.
        detail: String,
    },
    /// Repair cannot rebuild the partition (nothing trustworthy to keep).
    #[error("{}: cannot repair: {reason}", path.display())]
    CannotRepair {
        /// The database file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The rebuilt database could not be written.
    #[error("writing the repaired database {}: {detail}", path.display())]
    Write {
        /// The new file.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
    static QUIET_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}
static QUIET_HOOK: Once = Once::new();

/// Runs `f`, turning a panic (redb asserts on some malformed pages) into
/// `Err(message)` without printing it; other threads' panics are reported
/// by the previous hook as before.
pub fn catch_quiet<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()));
                QUIET_AT.with(|a| *a.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let res = std::panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    res.map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        match QUIET_AT.with(|a| a.borrow_mut().take()) {
            Some(at) => format!("the storage engine failed a check: {msg} at {at}"),
            None => format!("the storage engine failed a check: {msg}"),
        }
    })
}

/// Overlay block size of [`ReadOnlyFile`].
const BLOCK: u64 = 4096;

/// A redb storage backend over a file that is never written: the engine's
/// writes (crash repair at open, header flips) land in an in-memory overlay
/// of 4 KiB blocks. It holds a shared `flock`, so a running node (which
/// holds an exclusive one) makes opening fail with [`CheckError::Locked`].
#[derive(Debug)]
pub struct ReadOnlyFile {
    file: File,
    file_len: u64,
    state: Mutex<Overlay>,
}

#[derive(Debug, Default)]
struct Overlay {
    len: u64,
    blocks: HashMap<u64, Vec<u8>>,
}

impl ReadOnlyFile {
    /// Opens `path` for reading and takes a shared lock on it.
    pub fn open(path: &Path) -> Result<ReadOnlyFile, CheckError> {
        let file = File::open(path).map_err(|source| CheckError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_locked(file, path, false)
    }

    /// Wraps `file`; takes a shared lock first unless `locked` (the caller
    /// holds one already on this open file).
    fn from_locked(file: File, path: &Path, locked: bool) -> Result<ReadOnlyFile, CheckError> {
        if !locked {
            try_flock(&file, false, path)?;
        }
        let file_len = file
            .metadata()
            .map_err(|source| CheckError::Io {
                path: path.to_owned(),
                source,
            })?
            .len();
        Ok(ReadOnlyFile {
            file,
            file_len,
            state: Mutex::new(Overlay {
                len: file_len,
                blocks: HashMap::new(),
            }),
        })
    }

    fn base_block(&self, n: u64) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; BLOCK as usize];
        let start = n * BLOCK;
        if start < self.file_len {
            let want = (self.file_len - start).min(BLOCK) as usize;
            self.file.read_exact_at(&mut buf[..want], start)?;
        }
        Ok(buf)
    }
}

impl StorageBackend for ReadOnlyFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.state.lock().map_err(|_| poisoned())?.len)
    }

    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, std::io::Error> {
        let st = self.state.lock().map_err(|_| poisoned())?;
        let end = offset
            .checked_add(len as u64)
            .filter(|e| *e <= st.len)
            .ok_or_else(|| std::io::Error::new(ErrorKind::UnexpectedEof, "read past the end"))?;
        let mut out = Vec::with_capacity(len);
        let mut pos = offset;
        while pos < end {
            let n = pos / BLOCK;
            let within = (pos % BLOCK) as usize;
            let take = ((BLOCK - pos % BLOCK).min(end - pos)) as usize;
            match st.blocks.get(&n) {
                Some(b) => out.extend_from_slice(&b[within..within + take]),
                None if pos + take as u64 <= self.file_len => {
                    let at = out.len();
                    out.resize(at + take, 0);
                    self.file.read_exact_at(&mut out[at..], pos)?;
                }
                None => {
                    let b = self.base_block(n)?;
                    out.extend_from_slice(&b[within..within + take]);
                }
            }
            pos += take as u64;
        }
        Ok(out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let mut st = self.state.lock().map_err(|_| poisoned())?;
        if len < st.len {
            // Bytes past the new end read as zeros if the file grows again.
            let keep = len.div_ceil(BLOCK);
            st.blocks.retain(|n, _| *n < keep);
            if len % BLOCK != 0 {
                let n = len / BLOCK;
                let cut = (len % BLOCK) as usize;
                let mut b = match st.blocks.remove(&n) {
                    Some(b) => b,
                    None => self.base_block(n)?,
                };
                b[cut..].fill(0);
                st.blocks.insert(n, b);
            }
            // Whole blocks of the file past the end must read as zeros too.
            let mut n = keep;
            while n * BLOCK < self.file_len {
                st.blocks.insert(n, vec![0u8; BLOCK as usize]);
                n += 1;
            }
        }
        st.len = len;
        Ok(())
    }

    fn sync_data(&self, _eventual: bool) -> Result<(), std::io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut st = self.state.lock().map_err(|_| poisoned())?;
        let end = offset + data.len() as u64;
        let mut pos = offset;
        while pos < end {
            let n = pos / BLOCK;
            let within = (pos % BLOCK) as usize;
            let take = ((BLOCK - pos % BLOCK).min(end - pos)) as usize;
            let b = match st.blocks.entry(n) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(self.base_block(n)?),
            };
            let from = (pos - offset) as usize;
            b[within..within + take].copy_from_slice(&data[from..from + take]);
            pos += take as u64;
        }
        st.len = st.len.max(end);
        Ok(())
    }
}

/// Takes the non-blocking `flock` redb takes on its files (exclusive for a
/// node's open database): shared for a check, exclusive for a repair. The
/// lock lasts as long as the open file (and its clones).
pub fn try_flock(file: &File, exclusive: bool, path: &Path) -> Result<(), CheckError> {
    use std::os::fd::AsRawFd;
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // SAFETY: flock on a descriptor this `File` owns for the whole call.
    if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == ErrorKind::WouldBlock {
        Err(CheckError::Locked(path.to_owned()))
    } else {
        Err(CheckError::Io {
            path: path.to_owned(),
            source: e,
        })
    }
}

fn poisoned() -> std::io::Error {
    std::io::Error::other("overlay lock poisoned")
}

/// Opens the redb database in `backend` without writing to its file.
pub fn open_database(backend: ReadOnlyFile, path: &Path) -> Result<Database, CheckError> {
    let unreadable = |detail: String| CheckError::Unreadable {
        path: path.to_owned(),
        detail,
    };
    let mut b = Database::builder();
    // Small: the check reads each page once.
    b.set_cache_size(4 << 20);
    match catch_quiet(|| b.create_with_backend(backend)) {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(DatabaseError::DatabaseAlreadyOpen)) => Err(CheckError::Locked(path.to_owned())),
        Ok(Err(e)) => Err(unreadable(format!("not a readable database: {e}"))),
        Err(panic) => Err(unreadable(panic)),
    }
}

/// What a journal holds.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct JournalReport {
    /// The file exists.
    pub present: bool,
    /// Size of the file in bytes (with the second journal's, if any).
    pub file_bytes: u64,
    /// Well-formed frames chained from the start of the file (and of the
    /// second journal's).
    pub frames: u64,
    /// Records of those frames that a restart would replay (past the
    /// database's log end offset).
    pub pending_records: u64,
}

/// The verdict on one partition.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct PartitionReport {
    /// The partition directory.
    pub dir: PathBuf,
    /// Offset of the first record (database and journal).
    pub first_offset: Option<u64>,
    /// Offset of the last record found, readable or not.
    pub last_offset: Option<u64>,
    /// Records found intact.
    pub records: u64,
    /// Encoded bytes of those records.
    pub bytes: u64,
    /// The log end offset recorded in the database.
    pub stored_log_end: Option<u64>,
    /// The end of the longest intact prefix, minus one: every record up to
    /// here is readable. `None` when no record is (or the log is empty).
    pub last_good_offset: Option<u64>,
    /// The offset the next append must get so that no offset is reused:
    /// past everything the database or journal ever recorded.
    pub next_offset: u64,
    /// Records after the last good one that a repair would drop (found
    /// intact past the damage).
    pub records_after_damage: u64,
    /// The journal.
    pub journal: JournalReport,
    /// What is wrong; empty when the partition is sound.
    pub problems: Vec<String>,
    /// The database could not be opened at all (repair cannot help).
    pub unreadable: bool,
}

impl PartitionReport {
    /// Whether nothing is wrong.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// One chunk copied out of the database, with what the scan found in it.
struct ScannedChunk {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
    /// Entries `..good` are intact and belong to the good prefix.
    good: usize,
}

/// Everything a scan learns, kept for a repair.
struct Scan {
    report: PartitionReport,
    /// Chunks of the good prefix (the last one maybe partly good).
    chunks: Vec<ScannedChunk>,
    /// Intact journal entries of the good prefix (payload, entries).
    journal_batches: Vec<(Bytes, Vec<Entry>)>,
    /// Epoch entries and time index entries, if their tables were readable.
    epochs: Option<Vec<(u64, u64)>>,
    index: Option<Vec<(i64, u64)>>,
}

/// Checks the partition in `dir` (the directory holding `log.redb` and
/// `log.journal`) without writing to it.
pub fn check_partition(dir: &Path) -> Result<PartitionReport, CheckError> {
    let path = dir.join(DB_FILE);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(missing_db(dir)),
        Err(source) => return Err(CheckError::Io { path, source }),
    };
    let backend = ReadOnlyFile::from_locked(file, &path, false)?;
    Ok(scan(dir, backend)?.report)
}

/// A partition directory without its database file.
fn missing_db(dir: &Path) -> PartitionReport {
    let mut r = PartitionReport {
        dir: dir.to_owned(),
        unreadable: true,
        ..Default::default()
    };
    let jpath = dir.join(JOURNAL_FILE);
    r.journal.present = jpath.exists();
    r.problems.push(if r.journal.present {
        format!(
            "{DB_FILE} is missing next to its journal: the log was lost \
             (restore it from a replica or a backup, or delete the stream)"
        )
    } else {
        format!("{DB_FILE} is missing")
    });
    r
}

fn scan(dir: &Path, backend: ReadOnlyFile) -> Result<Scan, CheckError> {
    let path = dir.join(DB_FILE);
    let mut report = PartitionReport {
        dir: dir.to_owned(),
        ..Default::default()
    };
    let mut out = Scan {
        report: PartitionReport::default(),
        chunks: Vec::new(),
        journal_batches: Vec::new(),
        epochs: None,
        index: None,
    };
    if backend.file_len == 0 {
        report.unreadable = true;
        report
            .problems
            .push(format!("{DB_FILE} is empty: the log was lost"));
        read_journal(dir, &mut report, &mut out, None)?;
        out.report = report;
        return Ok(out);
    }
    let opened = match open_database(backend, &path) {
        // redb asserts that the file is at least as long as the layout its
        // header records; the engine's words would not tell an operator.
        Err(CheckError::Unreadable { path, detail }) if detail.contains("raw_file_len") => {
            Err(CheckError::Unreadable {
                path,
                detail: "the file was truncated: it is shorter than the layout its header \
                         records, and the storage engine cannot read it"
                    .into(),
            })
        }
        other => other,
    };
    let db = match opened {
        Ok(db) => db,
        Err(CheckError::Unreadable { detail, .. }) => {
            report.unreadable = true;
            report.problems.push(format!("{DB_FILE}: {detail}"));
            read_journal(dir, &mut report, &mut out, None)?;
            out.report = report;
            return Ok(out);
        }
        Err(e) => return Err(e),
    };
    let damaged = match catch_quiet(|| scan_db(&db, &mut report, &mut out)) {
        Ok(damaged) => damaged,
        Err(panic) => {
            // Whatever was scanned before the failure stands; what follows
            // it is unknown, so nothing after it counts as good.
            report.problems.push(format!("{DB_FILE}: {panic}"));
            true
        }
    };
    drop(db);
    let db_end = if damaged {
        None
    } else {
        Some(report.stored_log_end.unwrap_or(0).max(good_end(&report)))
    };
    read_journal(dir, &mut report, &mut out, db_end)?;
    out.report = report;
    Ok(out)
}

fn good_end(r: &PartitionReport) -> u64 {
    r.last_good_offset.map_or(0, |o| o + 1)
}

/// Scans the database; returns whether damage was found in the records
/// (the intact prefix ends there).
fn scan_db(db: &Database, r: &mut PartitionReport, out: &mut Scan) -> bool {
    let rtx = match db.begin_read() {
        Ok(t) => t,
        Err(e) => {
            r.problems.push(format!("{DB_FILE}: cannot read: {e}"));
            return true;
        }
    };
    // Meta.
    let mut stored_count = None;
    let mut stored_bytes = None;
    match rtx.open_table(META) {
        Ok(meta) => {
            let mut get = |k: &str| match meta.get(k) {
                Ok(v) => v.map(|v| v.value()),
                Err(e) => {
                    r.problems.push(format!("meta table: {e}"));
                    None
                }
            };
            r.stored_log_end = get(META_LEO);
            stored_count = get(META_COUNT);
            stored_bytes = get(META_BYTES);
        }
        Err(TableError::TableDoesNotExist(_)) => {}
        Err(e) => r.problems.push(format!("meta table: {e}")),
    }
    // Records: the current layout, or the first one (converted at open).
    let mut damaged = false;
    let mut last_seen: Option<u64> = None;
    for (def, chunked) in [(RECORDS, true), (RECORDS_V1, false)] {
        let table = match rtx.open_table(def) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => continue,
            Err(e) => {
                r.problems.push(format!("records table: {e}"));
                damaged = true;
                break;
            }
        };
        let iter = match table.iter() {
            Ok(i) => i,
            Err(e) => {
                r.problems.push(format!("records table: {e}"));
                damaged = true;
                break;
            }
        };
        for item in iter {
            let (k, v) = match item {
                Ok(kv) => kv,
                Err(e) => {
                    if !damaged {
                        r.problems.push(format!(
                            "records after offset {}: the storage engine cannot read them: {e}",
                            last_seen.map_or("-".into(), |o| o.to_string())
                        ));
                    }
                    damaged = true;
                    break;
                }
            };
            let key = k.value();
            let bytes = v.value().to_vec();
            r.first_offset.get_or_insert(key);
            let entries = if chunked {
                codec::chunk_entries(&bytes).collect::<Vec<_>>()
            } else {
                vec![Ok(Entry {
                    offset: key,
                    start: 0,
                    end: bytes.len(),
                })]
            };
            let mut chunk = ScannedChunk {
                bytes: Vec::new(),
                entries: Vec::new(),
                good: 0,
            };
            for (i, e) in entries.into_iter().enumerate() {
                // A record that does not decode (a checksum mismatch) leaves
                // the chunk's framing intact: the records after it are
                // still counted. A framing problem ends the chunk.
                let mut framing_ok = false;
                let problem = match e {
                    Err(e) => Some(format!("chunk at offset {key}: {e}")),
                    Ok(e) if i == 0 && e.offset != key => Some(format!(
                        "chunk at offset {key} starts with offset {}",
                        e.offset
                    )),
                    Ok(e) if last_seen.is_some_and(|p| e.offset <= p) => Some(format!(
                        "offset {} follows offset {} (offsets must increase)",
                        e.offset,
                        last_seen.unwrap_or(0)
                    )),
                    Ok(e) => {
                        last_seen = Some(e.offset);
                        r.last_offset = Some(e.offset);
                        match codec::decode(
                            e.offset,
                            Bytes::copy_from_slice(&bytes[e.start..e.end]),
                        ) {
                            Err(err) => {
                                framing_ok = true;
                                Some(format!("offset {}: {err}", e.offset))
                            }
                            Ok(_) if damaged => {
                                r.records_after_damage += 1;
                                None
                            }
                            Ok(_) => {
                                r.records += 1;
                                r.bytes += e.len() as u64;
                                r.last_good_offset = Some(e.offset);
                                chunk.entries.push(e);
                                chunk.good += 1;
                                None
                            }
                        }
                    }
                };
                if let Some(p) = problem {
                    if !damaged {
                        r.problems.push(p);
                    }
                    damaged = true;
                    if framing_ok {
                        continue;
                    }
                    // The rest of this chunk is not trusted; later chunks
                    // are still counted as records a repair drops.
                    break;
                }
            }
            r.last_offset = r.last_offset.max(Some(key));
            if chunk.good > 0 {
                chunk.bytes = bytes;
                out.chunks.push(chunk);
            }
        }
        if damaged {
            break;
        }
    }
    // The stored totals must match the records (a clean log only).
    if !damaged {
        if let Some(c) = stored_count.filter(|c| *c != r.records) {
            r.problems.push(format!(
                "meta: record count {c} does not match the {} records found",
                r.records
            ));
        }
        if let Some(b) = stored_bytes.filter(|b| *b != r.bytes) {
            r.problems.push(format!(
                "meta: byte total {b} does not match the {} bytes found",
                r.bytes
            ));
        }
        if let (Some(leo), Some(last)) = (r.stored_log_end, r.last_offset) {
            if leo <= last {
                r.problems.push(format!(
                    "meta: log end offset {leo} is not past the last record {last}"
                ));
            }
        }
    }
    // Time index and epochs: readable, and kept for a repair.
    out.index = match rtx.open_table(TIME_INDEX) {
        Ok(t) => collect(t.iter().map(|i| i.map(|i| i.map(|(k, _)| k.value())))),
        Err(TableError::TableDoesNotExist(_)) => Some(Vec::new()),
        Err(_) => None,
    };
    if out.index.is_none() {
        r.problems.push("time index table cannot be read".into());
    }
    out.epochs = match rtx.open_table(EPOCHS) {
        Ok(t) => collect(
            t.iter()
                .map(|i| i.map(|i| i.map(|(k, v)| (k.value(), v.value())))),
        ),
        Err(TableError::TableDoesNotExist(_)) => Some(Vec::new()),
        Err(_) => None,
    };
    if out.epochs.is_none() {
        r.problems.push("epochs table cannot be read".into());
    }
    damaged
}

fn collect<T, E>(
    it: Result<impl Iterator<Item = Result<T, E>>, impl std::fmt::Debug>,
) -> Option<Vec<T>> {
    let it = it.ok()?;
    let mut v = Vec::new();
    for x in it {
        v.push(x.ok()?);
    }
    Some(v)
}

/// Reads the journal; its records count as good only if they continue the
/// database's intact log (`db_end`, `None` if the database is damaged).
fn read_journal(
    dir: &Path,
    r: &mut PartitionReport,
    out: &mut Scan,
    db_end: Option<u64>,
) -> Result<(), CheckError> {
    // Both journal files, their frames in log order (as a restart reads
    // them).
    let magic = journal::MAGIC.to_le_bytes();
    let mut frames = Vec::new();
    for name in [JOURNAL_FILE, SPARE_JOURNAL_FILE] {
        let jpath = dir.join(name);
        let mut buf = Vec::new();
        match File::open(&jpath) {
            Ok(mut f) => f.read_to_end(&mut buf).map_err(|source| CheckError::Io {
                path: jpath.clone(),
                source,
            })?,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(CheckError::Io {
                    path: jpath,
                    source,
                })
            }
        };
        r.journal.present |= name == JOURNAL_FILE;
        r.journal.file_bytes += buf.len() as u64;
        let bytes = Bytes::from(buf);
        let (read, _, _) = journal::read_frames(&bytes);
        r.journal.frames += read.len() as u64;
        // The head of a journal is zeros (never written) or the first frame
        // of a chain (current or stale); anything else is damage. Past the
        // chain's end, stale frames of earlier chains are normal and not
        // looked at.
        if read.is_empty() && bytes.len() >= 4 && bytes[..4] != magic {
            let head = &bytes[..bytes.len().min(journal::FRAME_HEADER)];
            if head.iter().any(|b| *b != 0) {
                r.problems.push(format!(
                    "{name}: the head of the file is neither a frame nor zeros: \
                     records acknowledged after the last database commit, if any, are lost"
                ));
            }
        }
        frames.extend(read.into_iter().map(|f| (name, f)));
    }
    frames.sort_by_key(|(_, f)| f.base_leo);
    let mut journal_end = 0u64;
    let mut expect = db_end;
    for (name, f) in frames {
        journal_end = journal_end.max(f.end_leo);
        let Some(end) = expect else { continue };
        if f.end_leo <= end {
            // Already in the database.
            continue;
        }
        if f.base_leo != end {
            r.problems.push(format!(
                "{name}: a frame for offsets {}..{} does not follow the log end {end}: \
                 a restart would ignore it",
                f.base_leo, f.end_leo
            ));
            expect = None;
            continue;
        }
        let entries = match codec::chunk_entry_list(&f.payload) {
            Ok(e)
                if !e.is_empty()
                    && e.iter()
                        .all(|e| e.offset >= f.base_leo && e.offset < f.end_leo) =>
            {
                e
            }
            Ok(_) | Err(_) => {
                r.problems.push(format!(
                    "{name}: the frame for offsets {}..{} is malformed",
                    f.base_leo, f.end_leo
                ));
                expect = None;
                continue;
            }
        };
        let mut good = Vec::new();
        for e in entries {
            match codec::decode(e.offset, f.payload.slice(e.start..e.end)) {
                Ok(_) if expect.is_some() => {
                    r.journal.pending_records += 1;
                    r.records += 1;
                    r.bytes += e.len() as u64;
                    r.first_offset.get_or_insert(e.offset);
                    r.last_offset = r.last_offset.max(Some(e.offset));
                    r.last_good_offset = Some(e.offset);
                    good.push(e);
                }
                Ok(_) => r.records_after_damage += 1,
                Err(err) => {
                    if expect.is_some() {
                        r.problems
                            .push(format!("{name}: offset {}: {err}", e.offset));
                    }
                    expect = None;
                }
            }
        }
        if !good.is_empty() {
            out.journal_batches.push((f.payload.clone(), good));
        }
        if expect.is_some() {
            expect = Some(f.end_leo);
        }
    }
    r.next_offset = next_offset(r, journal_end);
    Ok(())
}

/// The first offset never handed out, as far as the files tell.
fn next_offset(r: &PartitionReport, journal_end: u64) -> u64 {
    r.stored_log_end
        .unwrap_or(0)
        .max(r.last_offset.map_or(0, |o| o + 1))
        .max(journal_end)
        .max(good_end(r))
}

/// What a repair did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RepairOutcome {
    /// The partition directory.
    pub dir: PathBuf,
    /// The check before the repair.
    pub before: PartitionReport,
    /// Where the damaged database was moved (`None` if only the journal
    /// was cleared).
    pub kept_as: Option<PathBuf>,
    /// Records kept.
    pub kept_records: u64,
    /// Offsets dropped: from the one after the last good offset to the log
    /// end (exclusive); empty when nothing was dropped.
    pub dropped_from: u64,
    /// Log end offset of the repaired log: the next append gets it.
    pub log_end: u64,
}

/// Repairs the partition in `dir` if its check finds a problem: rewrites
/// the database to its intact prefix (keeping the log end offset so that
/// no offset is reused), clears the journal, and keeps the damaged file.
/// Returns `None` when the partition is sound.
pub fn repair_partition(dir: &Path) -> Result<Option<RepairOutcome>, CheckError> {
    let path = dir.join(DB_FILE);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| CheckError::Io { path, source }
    };
    let file = match OpenOptions::new().read(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(CheckError::CannotRepair {
                path,
                reason: "the database file is missing: restore it from a replica or a backup, \
                         or delete the stream"
                    .into(),
            })
        }
        Err(e) => return Err(io(&path)(e)),
    };
    // Exclusive: the node cannot open the file while it is rewritten.
    try_flock(&file, true, &path)?;
    let lock = file.try_clone().map_err(io(&path))?;
    let backend = ReadOnlyFile::from_locked(file, &path, true)?;
    let scan = scan(dir, backend)?;
    let before = scan.report.clone();
    if before.ok() {
        return Ok(None);
    }
    if before.unreadable {
        return Err(CheckError::CannotRepair {
            path,
            reason: "the storage engine cannot open it, so no record can be trusted: \
                     restore it from a replica or a backup, or delete the stream"
                .into(),
        });
    }
    let log_end = before.next_offset;
    let tmp = dir.join(format!("{DB_FILE}.repair"));
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io(&tmp)(e)),
    }
    let written = catch_quiet(|| write_repaired(&tmp, &scan, log_end)).map_err(|detail| {
        CheckError::Write {
            path: tmp.clone(),
            detail,
        }
    })?;
    let kept_records = written.map_err(|detail| CheckError::Write {
        path: tmp.clone(),
        detail,
    })?;
    File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io(&tmp))?;
    // Keep the damaged file for inspection; never overwrite an earlier one.
    let mut kept = dir.join(format!("{DB_FILE}.damaged"));
    let mut n = 1;
    while kept.exists() {
        kept = dir.join(format!("{DB_FILE}.damaged.{n}"));
        n += 1;
    }
    std::fs::rename(&path, &kept).map_err(io(&path))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    // The journal's records are in the new database (or dropped): clear it
    // so a restart replays nothing, keeping its size (the writer overwrites
    // preallocated blocks).
    for name in [JOURNAL_FILE, SPARE_JOURNAL_FILE] {
        let jpath = dir.join(name);
        if let Ok(f) = OpenOptions::new().write(true).open(&jpath) {
            let len = f.metadata().map_err(io(&jpath))?.len();
            f.write_all_at(&vec![0u8; len as usize], 0)
                .and_then(|()| f.sync_all())
                .map_err(io(&jpath))?;
        }
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    drop(lock);
    Ok(Some(RepairOutcome {
        dir: dir.to_owned(),
        kept_as: Some(kept),
        kept_records,
        dropped_from: good_end(&before),
        log_end,
        before,
    }))
}

/// Writes the intact prefix of `scan` to a new database at `path` with the
/// log end offset `log_end`. Returns the number of records written.
fn write_repaired(path: &Path, scan: &Scan, log_end: u64) -> Result<u64, String> {
    let db = Database::builder()
        .create(path)
        .map_err(|e| e.to_string())?;
    let mut txn = db.begin_write().map_err(|e| e.to_string())?;
    txn.set_durability(Durability::Immediate);
    let r = &scan.report;
    let last_good = r.last_good_offset;
    let keep = |o: u64| last_good.is_some_and(|g| o <= g);
    let mut count = 0u64;
    let mut bytes = 0u64;
    // (offset, timestamp, epoch, from the journal) of every record kept.
    let mut records_meta: Vec<(u64, i64, u64, bool)> = Vec::new();
    {
        let mut records = txn.open_table(RECORDS).map_err(|e| e.to_string())?;
        let mut put = |chunk: &[u8], entries: &[Entry], from_journal: bool| -> Result<(), String> {
            for group in chunk_groups(entries) {
                let Some((first, body)) = codec::rebuild_chunk(chunk, group, |_| true) else {
                    continue;
                };
                records
                    .insert(first, body.as_slice())
                    .map_err(|e| e.to_string())?;
                for e in group {
                    let rec = &chunk[e.start..e.end];
                    records_meta.push((
                        e.offset,
                        codec::peek_timestamp(rec).unwrap_or(0),
                        codec::peek_epoch(rec).unwrap_or(0),
                        from_journal,
                    ));
                    count += 1;
                    bytes += e.len() as u64;
                }
            }
            Ok(())
        };
        for c in &scan.chunks {
            let entries: Vec<Entry> = c.entries[..c.good]
                .iter()
                .copied()
                .filter(|e| keep(e.offset))
                .collect();
            put(&c.bytes, &entries, false)?;
        }
        for (payload, entries) in &scan.journal_batches {
            let entries: Vec<Entry> = entries.iter().copied().filter(|e| keep(e.offset)).collect();
            put(payload, &entries, true)?;
        }
    }
    {
        let mut index = txn.open_table(TIME_INDEX).map_err(|e| e.to_string())?;
        // The stored index cut to the kept records, as truncation cuts it;
        // entries for the journal's records are added as the writer adds
        // them (each time the running maximum grows). If the stored index
        // is unreadable, it is rebuilt from every record.
        let mut rmax: Option<i64> = None;
        if let Some(stored) = &scan.index {
            for &(ts, o) in stored.iter().filter(|(_, o)| keep(*o)) {
                index.insert((ts, o), ()).map_err(|e| e.to_string())?;
                rmax = rmax.max(Some(ts));
            }
        }
        for &(o, ts, _, from_journal) in &records_meta {
            if (from_journal || scan.index.is_none()) && rmax.is_none_or(|m| ts > m) {
                index.insert((ts, o), ()).map_err(|e| e.to_string())?;
                rmax = Some(ts);
            }
        }
    }
    {
        let mut epochs = txn.open_table(EPOCHS).map_err(|e| e.to_string())?;
        let mut last: Option<u64> = None;
        if let Some(stored) = &scan.epochs {
            for &(e, start) in stored.iter().filter(|(_, s)| keep(*s)) {
                epochs.insert(e, start).map_err(|e| e.to_string())?;
                last = last.max(Some(e));
            }
        }
        for &(o, _, e, _) in &records_meta {
            if last.is_none_or(|l| e > l) {
                epochs.insert(e, o).map_err(|e| e.to_string())?;
                last = Some(e);
            }
        }
    }
    {
        let mut meta = txn.open_table(META).map_err(|e| e.to_string())?;
        for (k, v) in [
            (META_LEO, log_end),
            (META_COUNT, count),
            (META_BYTES, bytes),
        ] {
            meta.insert(k, v).map_err(|e| e.to_string())?;
        }
    }
    txn.commit().map_err(|e| e.to_string())?;
    Ok(count)
}

/// Splits entries into groups the size of the chunks the writer makes.
fn chunk_groups(entries: &[Entry]) -> Vec<&[Entry]> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < entries.len() {
        let mut j = i;
        let mut size = 0usize;
        while j < entries.len() && j - i < codec::CHUNK_RECORDS {
            let add = codec::ENTRY_HEADER + entries[j].len();
            if j > i && size + add > codec::CHUNK_BYTES {
                break;
            }
            size += add;
            j += 1;
        }
        out.push(&entries[i..j]);
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{LogConfig, NewRecord, PartitionLog, SyncPolicy};

    fn value(o: u64) -> Vec<u8> {
        format!("value-{o:06}-payload").into_bytes()
    }

    /// Writes `n` records through the real log (so the layout is the one
    /// `log.rs` writes), in batches, and closes it.
    async fn write_log(dir: &Path, n: u64) {
        let cfg = LogConfig {
            sync: SyncPolicy::Interval(std::time::Duration::from_millis(50)),
            ..Default::default()
        };
        let log = PartitionLog::open(dir, "log", cfg).unwrap();
        let mut o = 0;
        while o < n {
            let batch: Vec<NewRecord> = (o..(o + 100).min(n))
                .map(|i| NewRecord {
                    timestamp_ns: 1_000 + i as i64,
                    key: Some(Bytes::from(format!("k{}", i % 7))),
                    value: Bytes::from(value(i)),
                    subject: "s".into(),
                    ..Default::default()
                })
                .collect();
            o += batch.len() as u64;
            log.append(1 + o / 300, batch).await.unwrap();
        }
        log.close().await.unwrap();
    }

    /// Flips one byte inside every stored copy of record `o`'s value.
    fn flip(file: &Path, o: u64) -> usize {
        let mark = value(o);
        let mut bytes = std::fs::read(file).unwrap();
        let mut n = 0;
        let mut i = 0;
        while i + mark.len() <= bytes.len() {
            if bytes[i..i + mark.len()] == mark[..] {
                bytes[i + 2] ^= 0x5A;
                n += 1;
                i += mark.len();
            } else {
                i += 1;
            }
        }
        std::fs::write(file, bytes).unwrap();
        n
    }

    async fn read_all(dir: &Path) -> (Vec<u64>, PartitionLog) {
        let log = PartitionLog::open_existing(dir, "log", LogConfig::default()).unwrap();
        let got = log.read(0, 100_000, usize::MAX).await.unwrap();
        for r in &got {
            assert_eq!(r.value, Bytes::from(value(r.offset)));
        }
        (got.iter().map(|r| r.offset).collect(), log)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sound_log_checks_clean_and_repair_leaves_it() {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path(), 700).await;
        let r = check_partition(dir.path()).unwrap();
        assert!(r.ok(), "{r:?}");
        assert_eq!(
            (r.first_offset, r.last_offset, r.records),
            (Some(0), Some(699), 700)
        );
        assert_eq!((r.last_good_offset, r.next_offset), (Some(699), 700));
        assert!(r.journal.present);
        assert!(repair_partition(dir.path()).unwrap().is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flipped_record_ends_the_good_prefix_and_repair_truncates_there() {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path(), 600).await;
        let db = dir.path().join(DB_FILE);
        assert!(flip(&db, 450) >= 1);
        let before = std::fs::read(&db).unwrap();
        let r = check_partition(dir.path()).unwrap();
        assert!(!r.ok());
        assert_eq!(r.last_good_offset, Some(449), "{r:?}");
        assert_eq!(r.next_offset, 600);
        assert!(r.problems[0].contains("offset 450"), "{:?}", r.problems);
        assert!(r.records_after_damage > 0, "{r:?}");
        // The check wrote nothing.
        assert!(std::fs::read(&db).unwrap() == before);

        let o = repair_partition(dir.path()).unwrap().expect("repaired");
        assert_eq!((o.kept_records, o.dropped_from, o.log_end), (450, 450, 600));
        assert!(o.kept_as.as_ref().is_some_and(|k| k.exists()));
        let r = check_partition(dir.path()).unwrap();
        assert!(r.ok(), "{r:?}");
        assert_eq!((r.last_good_offset, r.next_offset), (Some(449), 600));

        let (offsets, log) = read_all(dir.path()).await;
        assert_eq!(offsets, (0..450).collect::<Vec<_>>());
        // The time index and epochs were cut, not lost.
        assert_eq!(
            log.offset_for_timestamp(1_000 + 300).await.unwrap(),
            Some(300)
        );
        assert_eq!(log.epoch_start_offset(2), Some(200));
        // No offset handed out before is given again.
        let next = log
            .append(
                9,
                vec![NewRecord {
                    value: Bytes::from(value(600)),
                    subject: "s".into(),
                    ..Default::default()
                }],
            )
            .await
            .unwrap();
        assert_eq!(next.first_offset, 600);
        log.close().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_garbage_journal_head_is_reported_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path(), 50).await;
        let j = dir.path().join(JOURNAL_FILE);
        let len = std::fs::metadata(&j).unwrap().len() as usize;
        let garbage: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8 | 1).collect();
        std::fs::write(&j, garbage).unwrap();
        let r = check_partition(dir.path()).unwrap();
        assert!(!r.ok());
        assert!(r.problems[0].contains(JOURNAL_FILE), "{:?}", r.problems);
        assert_eq!(r.last_good_offset, Some(49));
        let o = repair_partition(dir.path()).unwrap().expect("repaired");
        assert_eq!((o.kept_records, o.log_end), (50, 50));
        assert!(check_partition(dir.path()).unwrap().ok());
        let (offsets, log) = read_all(dir.path()).await;
        assert_eq!(offsets.len(), 50);
        log.close().await.unwrap();
    }

    /// The second journal is checked as the first is, and repair clears
    /// it too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_garbage_second_journal_is_reported_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path(), 50).await;
        let j = dir.path().join(SPARE_JOURNAL_FILE);
        let garbage: Vec<u8> = (0..8192).map(|i| (i * 31 % 251) as u8 | 1).collect();
        std::fs::write(&j, garbage).unwrap();
        let r = check_partition(dir.path()).unwrap();
        assert!(!r.ok());
        assert!(
            r.problems[0].contains(SPARE_JOURNAL_FILE),
            "{:?}",
            r.problems
        );
        assert_eq!(
            r.journal.file_bytes,
            std::fs::metadata(dir.path().join(JOURNAL_FILE))
                .unwrap()
                .len()
                + 8192
        );
        let o = repair_partition(dir.path()).unwrap().expect("repaired");
        assert_eq!((o.kept_records, o.log_end), (50, 50));
        assert!(std::fs::read(&j).unwrap().iter().all(|b| *b == 0));
        assert!(check_partition(dir.path()).unwrap().ok());
        let (offsets, log) = read_all(dir.path()).await;
        assert_eq!(offsets.len(), 50);
        log.close().await.unwrap();
    }

    /// Truncated or overwritten files of every size give a report or an
    /// error, never a panic, and repair either rebuilds a log that opens or
    /// refuses.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn damaged_files_of_any_length_never_panic() {
        let src = tempfile::tempdir().unwrap();
        write_log(src.path(), 400).await;
        let full = std::fs::read(src.path().join(DB_FILE)).unwrap();
        let journal = std::fs::read(src.path().join(JOURNAL_FILE)).unwrap();
        let mut cuts: Vec<usize> = vec![0, 1, 100, 511, 4096, 8192];
        cuts.extend((1..8).map(|i| full.len() * i / 8));
        for cut in cuts {
            for overwrite in [false, true] {
                let dir = tempfile::tempdir().unwrap();
                let mut bytes = full.clone();
                if overwrite {
                    let end = (cut + 4096).min(bytes.len());
                    bytes[cut..end].fill(0xA5);
                } else {
                    bytes.truncate(cut);
                }
                std::fs::write(dir.path().join(DB_FILE), &bytes).unwrap();
                std::fs::write(dir.path().join(JOURNAL_FILE), &journal).unwrap();
                let r = check_partition(dir.path()).unwrap();
                if !overwrite {
                    assert!(!r.ok(), "cut {cut}: {r:?}");
                }
                if !overwrite && cut > 4096 {
                    assert!(r.problems[0].contains("truncated"), "{:?}", r.problems);
                }
                match repair_partition(dir.path()) {
                    Ok(Some(o)) => {
                        assert!(o.log_end >= 400, "cut {cut}: {o:?}");
                        let r = check_partition(dir.path()).unwrap();
                        assert!(r.ok(), "cut {cut} after repair: {r:?}");
                        let (offsets, log) = read_all(dir.path()).await;
                        assert_eq!(offsets.last().copied(), r.last_good_offset, "cut {cut}");
                        log.close().await.unwrap();
                    }
                    Ok(None) => assert!(r.ok()),
                    Err(CheckError::CannotRepair { .. }) => assert!(r.unreadable, "{r:?}"),
                    Err(e) => panic!("cut {cut}: {e}"),
                }
            }
        }
    }

    #[test]
    fn a_missing_database_next_to_its_journal_is_reported_lost() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(JOURNAL_FILE), [0u8; 64]).unwrap();
        let r = check_partition(dir.path()).unwrap();
        assert!(r.unreadable && !r.ok());
        assert!(r.problems[0].contains("lost"), "{:?}", r.problems);
        assert!(matches!(
            repair_partition(dir.path()),
            Err(CheckError::CannotRepair { .. })
        ));
    }

    #[test]
    fn a_file_open_by_the_engine_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        let _db = Database::create(&path).unwrap();
        assert!(matches!(
            check_partition(dir.path()),
            Err(CheckError::Locked(_))
        ));
        assert!(matches!(
            repair_partition(dir.path()),
            Err(CheckError::Locked(_))
        ));
    }

    #[test]
    fn the_overlay_reads_its_writes_and_never_touches_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let base: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        std::fs::write(&path, &base).unwrap();
        let f = ReadOnlyFile::open(&path).unwrap();
        assert_eq!(f.read(4090, 20).unwrap(), base[4090..4110].to_vec());
        f.write(4095, &[1, 2, 3]).unwrap();
        let mut want = base.clone();
        want[4095..4098].copy_from_slice(&[1, 2, 3]);
        assert_eq!(f.read(0, 10_000).unwrap(), want);
        f.set_len(5000).unwrap();
        assert!(f.read(4990, 20).is_err());
        f.set_len(12_000).unwrap();
        want.truncate(5000);
        want.resize(12_000, 0);
        assert_eq!(f.read(0, 12_000).unwrap(), want);
        f.write(11_999, &[9]).unwrap();
        assert_eq!(f.len().unwrap(), 12_000);
        assert_eq!(std::fs::read(&path).unwrap(), base);
    }
}
