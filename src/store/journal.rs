//! The partition journal: an append-only file in front of the redb database.
//!
//! Role: make an append durable (or, under `interval`, hand it to the OS)
//! with one sequential write — and at most one `fdatasync` — instead of a
//! redb commit, which costs several fsyncs. The writer thread appends one
//! frame per group commit, answers the appenders, and applies the records to
//! redb later in large batches; once redb has committed them durably the
//! journal is emptied ([`Journal::reset`]).
//!
//! File `<dir>/<partition>.journal`, a sequence of frames:
//!
//! ```text
//! magic u32 | payload length u32 | base LEO u64 | end LEO u64 | previous crc u32 | crc32c u32 | payload
//! ```
//!
//! all little-endian; the CRC-32C covers the length, both offsets, the
//! previous frame's CRC (0 for the first frame) and the payload, so frames
//! form a chain from position 0.
//!
//! Once the journal has been used, the file is preallocated with zeros
//! ([`PREALLOC`]) and emptying it only rewinds the write position and
//! clears the first frame header: frames then overwrite blocks that already
//! exist, and an `fdatasync` has no file size or block allocation to
//! record — on ext4 that is several times faster than syncing an append.
//! A partition never written keeps an empty file (no 4 MiB per idle
//! partition): its first frame only extends the file to [`PREALLOC`]
//! without writing it (its blocks reserved where the journal is mapped, a
//! sparse file elsewhere; no cost on the acknowledgement path), and the
//! zeros are written at its first reset, after a checkpoint. Old frames left past the write position are never
//! read back: the chain ends at the first frame whose previous CRC does not
//! match, and an emptied journal starts with a cleared header, so opening
//! it reads one header, not the old frames.
//!
//! On ext4 and tmpfs the file is mapped into memory from its first frame
//! on, and a frame is copied into the mapping: the page cache holds it as
//! soon as the copy ends, as after a `write`, without a system call per
//! frame. The mapping covers the file's whole length, which only grows in
//! [`PREALLOC`] steps with its blocks reserved first (`fallocate`), so a
//! full device is an error of the append that needs the room, never a fault
//! on a page; the mapping is dropped before the file shrinks. Other file
//! systems (copy-on-write ones among them, which allocate on every write)
//! get one positioned `write` per frame, as does a frame synced at once
//! ([`Journal::append_written`]). What the mapping does not cover:
//! a disk that fails to read back a page of the journal the kernel had
//! evicted ends the process (SIGBUS) where a `write` would have failed.
//!
//! The payload is a record chunk in the [`codec`](super::codec) layout (entry header + encoded record, offsets increasing), so applying a
//! frame to redb copies slices of it. `base LEO` is the log end offset the
//! frame was written against and `end LEO` the one after it.
//!
//! Invariants:
//! - frames are written back to back from position 0 and chained by CRC; a
//!   frame is overwritten only after [`Journal::reset`], called once
//!   everything in the journal is durable in redb;
//! - replay ([`read_frames`]) returns the longest chain of well-formed
//!   frames from position 0: a torn or corrupt frame, zeros, or a frame of
//!   an earlier chain ends the journal, which is how a crash in the middle
//!   of a write is repaired;
//! - the caller accepts a frame only if its base LEO equals the log end it
//!   has reached (and skips frames already in redb); after a truncation the
//!   journal is cleared durably ([`Journal::reset`] with `durable`), so no
//!   frame can bring back truncated offsets.
//!
//! Must not: decide policy (when to fsync, when to reset) — the writer
//! does — or panic on any file content.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use memmap2::{MmapMut, MmapOptions};

/// Marks the start of a frame ("LBJ1").
pub(super) const MAGIC: u32 = 0x314A_424C;
/// Bytes before a frame's payload.
pub const FRAME_HEADER: usize = 4 + 4 + 8 + 8 + 4 + 4;
/// Size the journal file is preallocated to (zeros, written and synced
/// once, at the first reset after a frame was written), so that frames
/// overwrite existing blocks.
pub const PREALLOC: u64 = 4 << 20;
/// Largest frame copied into the mapping; a larger one is written. A
/// small frame mostly lands in a page already mapped writable (a 1 KiB
/// message shares its page with three others), where the copy saves the
/// system call; a large one covers many pages whose first write each
/// takes a page fault (after the kernel wrote them back), which costs more
/// than a `write` of the same pages: with frames of about 130 KiB (window
/// 256, one publisher) the mapping made acknowledgements 10–14 % slower.
const MAPPED_FRAME_MAX: usize = 16 << 10;
/// File name suffix of a partition journal.
pub const SUFFIX: &str = ".journal";
/// File name suffix of a partition's second journal (see [`spare_path`]).
pub const SPARE_SUFFIX: &str = ".journal.1";

/// One frame read back from the journal.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Log end offset before the frame.
    pub base_leo: u64,
    /// Log end offset after the frame.
    pub end_leo: u64,
    /// Record entries in the chunk layout.
    pub payload: Bytes,
}

/// A position in the journal (see [`Journal::mark`]).
#[derive(Debug, Clone, Copy)]
pub struct JournalMark {
    pos: u64,
    last_crc: u32,
    unsynced: bool,
}

/// The open journal of one partition, owned by the writer thread.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    /// Frames are copied into a mapping of the file (see the module
    /// documentation) rather than written.
    mappable: bool,
    /// The first `allocated` bytes of the file mapped read-write, while
    /// frames go there; `None` until the next append maps them.
    map: Option<MmapMut>,
    /// Where the next frame goes (= bytes of valid frames).
    pos: u64,
    /// Frames were written since the last `sync`.
    unsynced: bool,
    /// `pos` as of the last `sync` (or reset): the frames before it are
    /// durable.
    synced_pos: u64,
    /// CRC of the last frame (0 at position 0).
    last_crc: u32,
    /// Length of the file: 0 until the first frame, then at least
    /// [`PREALLOC`]; a mapped journal's file has its blocks reserved up to
    /// here.
    allocated: u64,
    /// The zeros up to [`PREALLOC`] are written (blocks exist).
    filled: bool,
}

/// Path of the journal of `name` in `dir`.
pub fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}{SUFFIX}"))
}

/// Path of the second journal of `name` in `dir`: under `interval`, a
/// busy log's checkpoint runs in the background while appends go to the
/// other file, so a log may hold frames in both. The file exists only
/// once a log has needed it; it is created after the first journal and
/// removed before it.
pub fn spare_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}{SPARE_SUFFIX}"))
}

/// The frames of a log's two journals in log order (by base LEO). Frames
/// of a file not yet emptied after its checkpoint (a crash in between) end
/// at or before redb's durable end, and the replay skips them as it skips
/// those of one journal.
pub fn merge(mut first: Vec<Frame>, second: Vec<Frame>) -> Vec<Frame> {
    if second.is_empty() {
        return first;
    }
    first.extend(second);
    first.sort_by_key(|f| f.base_leo);
    first
}

/// Encodes the header of a frame whose payload is `payload`, chained to the
/// frame before it by `prev_crc`; returns the header and the frame's CRC.
pub fn frame_header(
    base_leo: u64,
    end_leo: u64,
    prev_crc: u32,
    payload: &[u8],
) -> ([u8; FRAME_HEADER], u32) {
    let mut h = [0u8; FRAME_HEADER];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    // Payloads are bounded far below 4 GiB by the writer's batch limit.
    h[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[8..16].copy_from_slice(&base_leo.to_le_bytes());
    h[16..24].copy_from_slice(&end_leo.to_le_bytes());
    h[24..28].copy_from_slice(&prev_crc.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&h[4..28]), payload);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    (h, crc)
}

/// A frame header that passed its checks: payload length, offsets and the
/// CRC the payload must complete.
struct Header {
    len: usize,
    base_leo: u64,
    end_leo: u64,
    crc: u32,
    /// CRC of the header's covered fields, to be extended by the payload.
    partial: u32,
}

/// Checks a frame header read at the end of a chain whose last CRC is
/// `prev`; `None` ends the chain.
fn parse_header(h: &[u8], prev: u32) -> Option<Header> {
    let h = h.get(..FRAME_HEADER)?;
    let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h[i..i + 8]);
        u64::from_le_bytes(b)
    };
    if u32_at(0) != MAGIC || u32_at(24) != prev {
        return None;
    }
    let (base_leo, end_leo) = (u64_at(8), u64_at(16));
    if end_leo < base_leo {
        return None;
    }
    Some(Header {
        len: u32_at(4) as usize,
        base_leo,
        end_leo,
        crc: u32_at(28),
        partial: crc32c::crc32c(&h[4..28]),
    })
}

/// Reads the chain of well-formed frames from the start of `bytes`; stops
/// at the first torn, corrupt or unchained one. Returns the frames, the
/// length of the chain and the last frame's CRC.
pub fn read_frames(bytes: &Bytes) -> (Vec<Frame>, u64, u32) {
    let mut frames = Vec::new();
    let mut pos = 0usize;
    let mut prev = 0u32;
    while let Some(h) = bytes
        .get(pos..pos + FRAME_HEADER)
        .and_then(|h| parse_header(h, prev))
    {
        let start = pos + FRAME_HEADER;
        let Some(payload) = bytes.get(start..start.saturating_add(h.len)) else {
            break;
        };
        if crc32c::crc32c_append(h.partial, payload) != h.crc {
            break;
        }
        frames.push(Frame {
            base_leo: h.base_leo,
            end_leo: h.end_leo,
            payload: bytes.slice(start..start + h.len),
        });
        prev = h.crc;
        pos = start + h.len;
    }
    (frames, pos as u64, prev)
}

/// [`read_frames`] straight from the file, one frame at a time: only the
/// chain is read (an emptied journal costs one header read, not the
/// preallocated megabytes).
fn read_chain(file: &File, file_len: u64) -> std::io::Result<(Vec<Frame>, u64, u32)> {
    let mut frames = Vec::new();
    let mut pos = 0u64;
    let mut prev = 0u32;
    let mut h = [0u8; FRAME_HEADER];
    while pos + FRAME_HEADER as u64 <= file_len {
        file.read_exact_at(&mut h, pos)?;
        let Some(hd) = parse_header(&h, prev) else {
            break;
        };
        let start = pos + FRAME_HEADER as u64;
        if start + hd.len as u64 > file_len {
            break;
        }
        let mut payload = vec![0u8; hd.len];
        file.read_exact_at(&mut payload, start)?;
        if crc32c::crc32c_append(hd.partial, &payload) != hd.crc {
            break;
        }
        frames.push(Frame {
            base_leo: hd.base_leo,
            end_leo: hd.end_leo,
            payload: Bytes::from(payload),
        });
        prev = hd.crc;
        pos = start + hd.len as u64;
    }
    Ok((frames, pos, prev))
}

/// Writes zeros from the file's end up to [`PREALLOC`] and syncs them.
fn preallocate(file: &File, from: u64) -> std::io::Result<()> {
    if from >= PREALLOC {
        return Ok(());
    }
    let zeros = vec![0u8; (PREALLOC - from) as usize];
    file.write_all_at(&zeros, from)?;
    file.sync_all()
}

/// Takes an exclusive `flock` on `file` without waiting; `WouldBlock` if
/// another open file description holds it. Released when the file closes.
fn try_lock(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on a descriptor this `File` owns and keeps open for
    // the duration of the call; no memory is passed.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether frames may be copied into a mapping of `file`: on ext4 and
/// tmpfs, where a page of a file whose blocks are reserved is written
/// without allocating (a copy-on-write file system would allocate at the
/// page's first write, and a full device would then fault the process).
pub(super) fn mappable(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    const EXT4: i64 = 0xEF53;
    const TMPFS: i64 = 0x0102_1994;
    // SAFETY: an all-zero `statfs` is a valid value of the plain C struct,
    // and fstatfs(2) only writes into it, on a descriptor `file` keeps open.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    r == 0 && matches!(st.f_type as i64, EXT4 | TMPFS)
}

/// `pos` as a file offset for the system calls that take one.
fn file_offset(pos: u64) -> std::io::Result<libc::off_t> {
    libc::off_t::try_from(pos)
        .map_err(|_| std::io::Error::new(ErrorKind::InvalidInput, "journal size out of range"))
}

/// Writes `head` and then `body` at `pos` of `file`, all of both
/// (`pwritev`, again after a short write): the frame's payload is not copied
/// into a buffer of its own first.
fn write_all_at2(file: &File, head: &[u8], body: &[u8], mut pos: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (mut head, mut body) = (head, body);
    while !head.is_empty() || !body.is_empty() {
        let iov = [
            libc::iovec {
                iov_base: head.as_ptr() as *mut libc::c_void,
                iov_len: head.len(),
            },
            libc::iovec {
                iov_base: body.as_ptr() as *mut libc::c_void,
                iov_len: body.len(),
            },
        ];
        let off = file_offset(pos)?;
        // SAFETY: both vectors point into slices that outlive the call, and
        // pwritev(2) only reads them; `file` keeps the descriptor open.
        let n = unsafe { libc::pwritev(file.as_raw_fd(), iov.as_ptr(), 2, off) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(ErrorKind::WriteZero.into());
        }
        // `n` is at most the two lengths together.
        let n = n as usize;
        let from_head = n.min(head.len());
        head = &head[from_head..];
        body = &body[n - from_head..];
        pos += n as u64;
    }
    Ok(())
}

/// Reserves the blocks of `file` up to `to` and makes it at least `to`
/// long (`fallocate`): a hole left by an earlier sparse extension gets its
/// blocks, those already there are kept as they are. A full device is an
/// error here; a file that cannot have blocks reserved (an ext4 file
/// without extents) is `EOPNOTSUPP`.
fn reserve(file: &File, to: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = file_offset(to)?;
    // SAFETY: fallocate(2) on a descriptor `file` keeps open; no memory is
    // passed.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Journal {
    /// Opens (creating if missing) the journal at `path`, locks it
    /// (`ErrorKind::WouldBlock` if it is open already) and reads its
    /// frames. The file is not changed: the caller replays what it needs and
    /// then calls [`reset`](Self::reset).
    pub fn open(path: PathBuf) -> std::io::Result<(Journal, Vec<Frame>)> {
        Self::open_with(path, true)
    }

    /// [`open`](Self::open) of a journal only if its file exists.
    pub fn open_existing(path: PathBuf) -> std::io::Result<Option<(Journal, Vec<Frame>)>> {
        match Self::open_with(path, false) {
            Ok(j) => Ok(Some(j)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn open_with(path: PathBuf, create: bool) -> std::io::Result<(Journal, Vec<Frame>)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(&path)?;
        // One writer per journal: a second open of the same log (in this
        // process or another) fails here, as redb refuses a second open of
        // its file — which a log that never held a record does not have yet.
        try_lock(&file)?;
        let meta = file.metadata()?;
        let allocated = meta.len();
        let filled = meta.blocks().saturating_mul(512) >= PREALLOC;
        let (frames, pos, last_crc) = read_chain(&file, allocated)?;
        Ok((
            Journal {
                mappable: mappable(&file),
                map: None,
                file,
                path,
                pos,
                unsynced: false,
                synced_pos: pos,
                last_crc,
                allocated,
                filled,
            },
            frames,
        ))
    }

    /// Reads the frames of the open journal again (a writer rebuilding its
    /// tail after reopening its database), without taking the file's lock
    /// a second time.
    pub fn frames(&self) -> std::io::Result<Vec<Frame>> {
        let len = self.file.metadata()?.len();
        Ok(read_chain(&self.file, len)?.0)
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of frames in the journal.
    pub fn len(&self) -> u64 {
        self.pos
    }

    /// Whether the journal holds no frame.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// Whether frames were written since the last sync.
    pub fn unsynced(&self) -> bool {
        self.unsynced
    }

    /// Bytes of frames appended since the last `sync` (or reset): what an
    /// `fdatasync` now would have to write.
    pub fn unsynced_bytes(&self) -> u64 {
        self.pos.saturating_sub(self.synced_pos)
    }

    /// Appends one frame (header and payload) in one positioned write. On
    /// error the journal end does not move, so the next frame overwrites
    /// whatever part of this one reached the file.
    pub fn append(&mut self, base_leo: u64, end_leo: u64, payload: &[u8]) -> std::io::Result<()> {
        let mapped = self.mappable && FRAME_HEADER + payload.len() <= MAPPED_FRAME_MAX;
        self.append_frame(base_leo, end_leo, payload, mapped)
    }

    /// [`append`](Self::append) with a positioned write even where the
    /// journal is mapped: for a frame synced at once. An `fdatasync` leaves
    /// the pages it wrote write-protected, so the next frame copied into the
    /// same page would first take a page fault; with an fsync per frame
    /// (`store.sync: always`) that made acknowledgements 30–45 % slower.
    pub fn append_written(
        &mut self,
        base_leo: u64,
        end_leo: u64,
        payload: &[u8],
    ) -> std::io::Result<()> {
        self.append_frame(base_leo, end_leo, payload, false)
    }

    fn append_frame(
        &mut self,
        base_leo: u64,
        end_leo: u64,
        payload: &[u8],
        mapped: bool,
    ) -> std::io::Result<()> {
        let (h, crc) = frame_header(base_leo, end_leo, self.last_crc, payload);
        let len = FRAME_HEADER + payload.len();
        if mapped {
            let at = self.pos;
            let map = match self.mapped(at + len as u64) {
                Ok(map) => map,
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    // No blocks can be reserved for this file: it is
                    // written from now on.
                    self.mappable = false;
                    return self.append_frame(base_leo, end_leo, payload, false);
                }
                Err(e) => return Err(e),
            };
            // In range: `mapped` covers the frame's end, and a mapping's
            // length is a `usize`.
            let at = at as usize;
            map[at..at + FRAME_HEADER].copy_from_slice(&h);
            map[at + FRAME_HEADER..at + len].copy_from_slice(payload);
        } else {
            if self.allocated < PREALLOC {
                self.file.set_len(PREALLOC)?;
                self.allocated = PREALLOC;
            }
            write_all_at2(&self.file, &h, payload, self.pos)?;
        }
        self.pos += len as u64;
        self.last_crc = crc;
        self.unsynced = true;
        Ok(())
    }

    /// The mapping of the file, covering at least its first `end` bytes.
    /// A new mapping covers the whole file, grown first to a multiple of
    /// [`PREALLOC`] past `end` if shorter, with the blocks of all of it
    /// reserved (written frames or an earlier sparse extension may have
    /// left holes), so that no page of the mapping has to be allocated when
    /// it is first written.
    fn mapped(&mut self, end: u64) -> std::io::Result<&mut MmapMut> {
        if end > self.allocated {
            // Never a mapping of a file whose length changes under it.
            self.map = None;
        }
        let map = match self.map.take() {
            Some(m) => m,
            None => {
                let size = self.allocated.max(end.div_ceil(PREALLOC) * PREALLOC);
                reserve(&self.file, size)?;
                self.allocated = size;
                let len = usize::try_from(size).map_err(|_| {
                    std::io::Error::new(ErrorKind::InvalidInput, "journal size out of range")
                })?;
                // SAFETY: the file is locked by this journal (`try_lock`),
                // so no other journal writes or resizes it; it is at least
                // `len` long and only shrinks after this mapping is dropped
                // (`reset`), so every byte of the mapping is backed by the
                // file. The data directory is this process's alone.
                unsafe { MmapOptions::new().len(len).map_mut(&self.file)? }
            }
        };
        Ok(self.map.insert(map))
    }

    /// Where the next frame goes: give it to [`Journal::rewind`] to cut
    /// off the frames appended after this point.
    pub fn mark(&self) -> JournalMark {
        JournalMark {
            pos: self.pos,
            last_crc: self.last_crc,
            unsynced: self.unsynced,
        }
    }

    /// Cuts off what was appended since `mark` (a frame whose write or
    /// fsync failed): the next frame goes at the mark, and the first bytes
    /// there are zeroed so that no reader takes a frame written there for
    /// part of the journal, even if no new frame follows.
    pub fn rewind(&mut self, mark: JournalMark) -> std::io::Result<()> {
        self.pos = mark.pos;
        self.synced_pos = self.synced_pos.min(mark.pos);
        self.last_crc = mark.last_crc;
        self.unsynced = mark.unsynced;
        let len = self.file.metadata()?.len();
        if mark.pos < len {
            let n = (len - mark.pos).min(FRAME_HEADER as u64) as usize;
            self.file
                .write_all_at(&[0u8; FRAME_HEADER][..n], mark.pos)?;
            self.unsynced = true;
        }
        Ok(())
    }

    /// Makes every appended frame durable (`fdatasync`: the data and the
    /// file size, not the other metadata).
    pub fn sync(&mut self) -> std::io::Result<()> {
        if self.unsynced {
            self.file.sync_data()?;
            self.unsynced = false;
        }
        self.synced_pos = self.pos;
        Ok(())
    }

    /// Empties the journal: call only once everything in it is durable in
    /// redb. The next frame starts a new chain at position 0 (the old frames
    /// past it are never read back). With `durable`, the file is cleared
    /// and the clearing synced — needed when the log end moved back (a
    /// truncation), where an old frame could otherwise match the log end
    /// again.
    pub fn reset(&mut self, durable: bool) -> std::io::Result<()> {
        let used = self.pos > 0;
        self.pos = 0;
        self.synced_pos = 0;
        self.last_crc = 0;
        self.unsynced = false;
        if durable {
            self.map = None;
            self.file.set_len(0)?;
            self.file.sync_all()?;
            preallocate(&self.file, 0)?;
            self.allocated = PREALLOC;
            self.filled = true;
        } else if used {
            if !self.filled {
                // First reset of a journal that was written: every frame
                // is in redb, so the file is overwritten with zeros, and
                // from now on frames overwrite existing blocks.
                self.map = None;
                self.file.set_len(0)?;
                preallocate(&self.file, 0)?;
                self.allocated = PREALLOC;
                self.filled = true;
            }
            // The old chain is all in redb now; clearing its first header
            // lets the next open stop there instead of reading it through.
            // Not synced: an old chain that survives a crash is skipped by
            // replay all the same (its frames end at or before redb's end).
            self.file.write_all_at(&[0u8; FRAME_HEADER], 0)?;
        }
        Ok(())
    }

    /// Unmaps the file until the next frame: called when the partition has
    /// gone quiet, so that the pages of its journal leave the process's
    /// resident memory (they stay in the page cache, as written ones do).
    /// A busy journal keeps its mapping from one reset to the next.
    pub fn release(&mut self) {
        self.map = None;
    }

    /// Removes the journal file of a partition; a missing file is fine.
    pub fn remove(path: &Path) -> std::io::Result<()> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opens the journal at `p`, mapped or written as `mapped` says (the
    /// test directory's file system would choose one of them only).
    fn open_as(p: &Path, mapped: bool) -> Journal {
        let (mut j, frames) = Journal::open(p.to_path_buf()).unwrap();
        assert!(frames.is_empty());
        j.mappable = mapped;
        j
    }

    #[test]
    fn frames_round_trip_and_a_torn_tail_ends_the_journal() {
        for mapped in [true, false] {
            round_trip_and_torn_tail(mapped);
        }
    }

    fn round_trip_and_torn_tail(mapped: bool) {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "p");
        {
            let mut j = open_as(&p, mapped);
            j.append(0, 2, b"first").unwrap();
            j.append(2, 5, b"second").unwrap();
            j.sync().unwrap();
            assert!(!j.unsynced());
        }
        let full = (2 * FRAME_HEADER + 11) as u64;
        let (_, frames) = Journal::open(p.clone()).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!((frames[1].base_leo, frames[1].end_leo), (2, 5));
        assert_eq!(&frames[1].payload[..], b"second");
        // Every torn length keeps exactly the complete frames.
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        for cut in (0..full).rev() {
            // A torn write: the file ends at `cut` (zeros follow in a
            // preallocated file, which ends the chain the same way).
            f.set_len(cut).unwrap();
            let (j, frames) = Journal::open(p.clone()).unwrap();
            let want = if cut >= (FRAME_HEADER + 5) as u64 {
                1
            } else {
                0
            };
            assert_eq!(frames.len(), want, "cut at {cut}");
            assert_eq!(j.len(), (want * (FRAME_HEADER + 5)) as u64);
        }
    }

    /// Frames past the preallocated size grow a mapped journal's file in
    /// whole steps (remapped), interleaved with written frames, a rewind
    /// and a reset, and read back as written, as do those of a journal
    /// that is only written.
    #[test]
    fn a_journal_grows_past_its_preallocation_mapped_or_written() {
        // Small frames (copied where mapped), every tenth a large one and
        // every tenth a small one synced at once (both written): 16 MiB in
        // all, past 4, 8 and 12 MiB; the last frame is a mapped one.
        let size = |i: u64| match i % 10 {
            4 => 300 << 10,
            _ => 12 << 10,
        };
        let payload = |i: u64| vec![i as u8; size(i)];
        const FRAMES: u64 = 400;
        for mapped in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let p = path(dir.path(), "p");
            let mut j = open_as(&p, mapped);
            for i in 0..FRAMES {
                if i == 7 {
                    // A failed frame, cut off: the next one takes its place.
                    let mark = j.mark();
                    j.append(i, i + 1, b"cut").unwrap();
                    j.rewind(mark).unwrap();
                }
                if i % 10 == 7 {
                    j.append_written(i, i + 1, &payload(i)).unwrap();
                    j.sync().unwrap();
                } else {
                    j.append(i, i + 1, &payload(i)).unwrap();
                }
            }
            j.sync().unwrap();
            let len = std::fs::metadata(&p).unwrap().len();
            assert!(
                len >= j.len(),
                "mapped {mapped}: file {len} < frames {}",
                j.len()
            );
            if mapped {
                assert_eq!(len % PREALLOC, 0, "grown in whole steps: {len}");
                assert!(len > 3 * PREALLOC, "{len}");
            }
            drop(j);
            let (mut j, frames) = Journal::open(p.clone()).unwrap();
            j.mappable = mapped;
            assert_eq!(frames.len() as u64, FRAMES, "mapped {mapped}");
            for (i, f) in frames.iter().enumerate() {
                let i = i as u64;
                assert_eq!((f.base_leo, f.end_leo), (i, i + 1));
                assert_eq!(f.payload, payload(i), "frame {i}");
            }
            // Emptied, it starts over at position 0 in the same file.
            j.reset(false).unwrap();
            j.append(FRAMES, FRAMES + 1, b"after").unwrap();
            drop(j);
            let (_, frames) = Journal::open(p.clone()).unwrap();
            assert_eq!(frames.len(), 1, "mapped {mapped}");
            assert_eq!(&frames[0].payload[..], b"after");
        }
    }

    /// A journal extended sparsely by a written frame, then mapped, has
    /// the blocks of its whole file reserved first: no page of the mapping
    /// is a hole that a full device could fail to allocate.
    #[test]
    fn a_mapped_journal_has_no_holes() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "p");
        let mut j = open_as(&p, true);
        j.append_written(0, 1, &[7u8; 1000]).unwrap();
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!(meta.len(), PREALLOC);
        assert!(
            meta.blocks() * 512 < PREALLOC,
            "a written frame extends sparsely"
        );
        j.append(1, 2, &[8u8; 1000]).unwrap();
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!(meta.len(), PREALLOC);
        if j.map.is_some() {
            assert!(meta.blocks() * 512 >= PREALLOC, "{} blocks", meta.blocks());
        } else {
            // Only a file system refusing `fallocate` leaves it unmapped:
            // the frame was written instead, and so are the next ones.
            assert!(!j.mappable);
        }
        drop(j);
        let (_, frames) = Journal::open(p).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(&frames[1].payload[..], &[8u8; 1000][..]);
    }

    #[test]
    fn a_flipped_bit_ends_the_journal_there() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "p");
        let (mut j, _) = Journal::open(p.clone()).unwrap();
        j.append(0, 1, b"a").unwrap();
        j.append(1, 2, b"b").unwrap();
        j.append(2, 3, b"c").unwrap();
        drop(j);
        let mut bytes = std::fs::read(&p).unwrap();
        let second = FRAME_HEADER + 1 + FRAME_HEADER;
        bytes[second] ^= 0x40;
        std::fs::write(&p, &bytes).unwrap();
        let (j, frames) = Journal::open(p.clone()).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(j.len(), (FRAME_HEADER + 1) as u64);
    }

    #[test]
    fn a_rewound_frame_is_never_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "p");
        let (mut j, _) = Journal::open(p.clone()).unwrap();
        j.append(0, 1, b"kept").unwrap();
        let mark = j.mark();
        // A frame whose fsync failed: whole in the file, but cut off.
        j.append(1, 2, b"failed").unwrap();
        j.rewind(mark).unwrap();
        drop(j);
        let (mut j, frames) = Journal::open(p.clone()).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(&frames[0].payload[..], b"kept");
        // The next frame takes its place and continues the chain.
        let mark = j.mark();
        j.append(1, 2, b"failed").unwrap();
        j.rewind(mark).unwrap();
        j.append(1, 3, b"next").unwrap();
        drop(j);
        let (_, frames) = Journal::open(p).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!((frames[1].base_leo, frames[1].end_leo), (1, 3));
        assert_eq!(&frames[1].payload[..], b"next");
    }

    #[test]
    fn reset_starts_a_new_chain_and_old_frames_stay_unread() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "p");
        let (mut j, _) = Journal::open(p.clone()).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            0,
            "a journal never written stays empty"
        );
        // Old chain: a short frame then longer ones.
        j.append(0, 1, b"o").unwrap();
        j.append(1, 2, b"old-two").unwrap();
        j.append(2, 3, b"old-three").unwrap();
        j.reset(false).unwrap();
        assert!(j.is_empty());
        assert_eq!(std::fs::metadata(&p).unwrap().len(), PREALLOC);
        let bytes = std::fs::read(&p).unwrap();
        let (frames, _, _) = read_frames(&Bytes::from(bytes));
        assert!(frames.is_empty(), "an emptied journal reads as empty");
        assert!(
            Journal::open(p.clone()).is_err(),
            "an open journal cannot be opened twice"
        );
        // The new frame has the same length as the old first one, so the
        // old second frame starts right after it: the chain check ends the
        // journal there.
        j.append(1, 2, b"n").unwrap();
        drop(j);
        let (_, frames) = Journal::open(p.clone()).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].base_leo, 1);
        assert_eq!(&frames[0].payload[..], b"n");
        // A durable reset clears the file: nothing is read back.
        let (mut j, _) = Journal::open(p.clone()).unwrap();
        j.reset(true).unwrap();
        drop(j);
        let (_, frames) = Journal::open(p.clone()).unwrap();
        assert!(frames.is_empty());
        assert_eq!(std::fs::metadata(&p).unwrap().len(), PREALLOC);
    }
}
