//! The on-disk encoding of one record (pure code: no I/O, no redb).
//!
//! Layout, all integers little-endian:
//!
//! ```text
//! 0   u8   format version (= 1)
//! 1   u32  CRC-32C of every byte after this field (offset 5 .. end)
//! 5   u8   flags: bit 0 = key present, bit 1 = reply present
//! 6   i64  timestamp (ns since the Unix epoch)
//! 14  u64  leader epoch
//! 22  u32  subject length, then the subject (UTF-8)
//!     u32  reply length, then the reply (UTF-8)      -- only if flag bit 1
//!     u32  key length, then the key                  -- only if flag bit 0
//!     u32  header count; per header: u32 name length, name (UTF-8), u32 value length, value
//!     u32  value length, then the value
//! ```
//!
//! Records are stored in *chunks* (one table value holds the records of one
//! append, up to [`CHUNK_BYTES`] or [`CHUNK_RECORDS`]): each record is
//! preceded by an entry header,
//!
//! ```text
//! 0   u64  offset of the record
//! 8   u32  length of the record encoding that follows
//! ```
//!
//! so that a group commit of thousands of records costs a few B-tree
//! inserts rather than one per record (the per-insert cost of the B-tree,
//! not the bytes, is what bounded appends). The record encoding itself is
//! unchanged and still carries its own CRC, so a damaged entry is detected
//! per record.
//!
//! Invariants: `encoded_len(r)` is exactly the number of bytes `encode_into`
//! writes; `decode` never panics, whatever the bytes — a bad version, a
//! checksum mismatch or a truncated field is a [`CodecError`].

use bytes::Bytes;
use thiserror::Error;

use super::{NewRecord, Record};

/// Current format version written by [`encode_into`].
pub const FORMAT_VERSION: u8 = 1;

const FLAG_KEY: u8 = 1;
const FLAG_REPLY: u8 = 2;
const FIXED_HEADER: usize = 1 + 4 + 1 + 8 + 8;

/// Bytes before each record inside a chunk: offset (u64) and length (u32).
pub const ENTRY_HEADER: usize = 12;
/// A chunk is closed once it holds this many bytes (a single larger record
/// gets a chunk of its own).
pub const CHUNK_BYTES: usize = 64 << 10;
/// A chunk is closed once it holds this many records.
pub const CHUNK_RECORDS: usize = 256;

/// Writes the entry header of a record of `len` bytes at `offset` into the
/// first [`ENTRY_HEADER`] bytes of `out`.
pub fn put_entry_header(out: &mut [u8], offset: u64, len: u32) {
    out[..8].copy_from_slice(&offset.to_le_bytes());
    out[8..ENTRY_HEADER].copy_from_slice(&len.to_le_bytes());
}

/// One record inside a chunk: its offset and the byte range of its
/// encoding within the chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Offset of the record.
    pub offset: u64,
    /// Start of the record encoding in the chunk.
    pub start: usize,
    /// End (exclusive) of the record encoding in the chunk.
    pub end: usize,
}

impl Entry {
    /// Length of the record encoding.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the record encoding is empty (never true for a valid record).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// Iterates the entries of a chunk. Yields one error and stops if the chunk
/// is truncated; never panics.
pub fn chunk_entries(chunk: &[u8]) -> ChunkEntries<'_> {
    ChunkEntries { chunk, pos: 0 }
}

/// Iterator returned by [`chunk_entries`].
pub struct ChunkEntries<'a> {
    chunk: &'a [u8],
    pos: usize,
}

impl Iterator for ChunkEntries<'_> {
    type Item = Result<Entry, CodecError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.chunk.len() {
            return None;
        }
        let Some(h) = self.chunk.get(self.pos..self.pos + ENTRY_HEADER) else {
            self.pos = self.chunk.len();
            return Some(Err(CodecError::Truncated("chunk entry header")));
        };
        let mut o = [0; 8];
        o.copy_from_slice(&h[..8]);
        let mut l = [0; 4];
        l.copy_from_slice(&h[8..]);
        let start = self.pos + ENTRY_HEADER;
        let end = start.saturating_add(u32::from_le_bytes(l) as usize);
        if end > self.chunk.len() {
            self.pos = self.chunk.len();
            return Some(Err(CodecError::Truncated("chunk entry")));
        }
        self.pos = end;
        Some(Ok(Entry {
            offset: u64::from_le_bytes(o),
            start,
            end,
        }))
    }
}

/// Decodes every entry of a chunk (offsets must increase).
pub fn chunk_entry_list(chunk: &[u8]) -> Result<Vec<Entry>, CodecError> {
    let mut v: Vec<Entry> = Vec::new();
    for e in chunk_entries(chunk) {
        let e = e?;
        if v.last().is_some_and(|p| p.offset >= e.offset) {
            return Err(CodecError::Truncated("chunk entry order"));
        }
        v.push(e);
    }
    Ok(v)
}

/// Builds a chunk from the entries of `chunk` that `keep` selects, copying
/// their bytes. Returns `None` when none is kept.
pub fn rebuild_chunk(
    chunk: &[u8],
    entries: &[Entry],
    keep: impl Fn(&Entry) -> bool,
) -> Option<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut first = None;
    for e in entries.iter().filter(|e| keep(e)) {
        first.get_or_insert(e.offset);
        let mut h = [0; ENTRY_HEADER];
        put_entry_header(&mut h, e.offset, e.len() as u32);
        out.extend_from_slice(&h);
        out.extend_from_slice(&chunk[e.start..e.end]);
    }
    first.map(|f| (f, out))
}

/// Why bytes could not be decoded as a record.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CodecError {
    /// The first byte names a format this build does not know.
    #[error("unknown record format version {0}")]
    UnknownVersion(u8),
    /// The stored checksum does not match the bytes.
    #[error("record checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// Checksum found in the record.
        stored: u32,
        /// Checksum of the bytes as read.
        computed: u32,
    },
    /// A length field points past the end of the record.
    #[error("record truncated while reading {0}")]
    Truncated(&'static str),
    /// A text field is not valid UTF-8.
    #[error("record field {0} is not valid UTF-8")]
    Utf8(&'static str),
    /// Bytes remain after the value.
    #[error("{0} unexpected trailing bytes after the record")]
    Trailing(usize),
    /// A field is longer than the format can express (4 GiB).
    #[error("record field {0} is too large to encode")]
    TooLarge(&'static str),
}

/// The fields of a record to encode, borrowed from either record type.
pub struct RecordRef<'a> {
    /// Timestamp, ns.
    pub timestamp_ns: i64,
    /// Leader epoch.
    pub leader_epoch: u64,
    /// Optional key.
    pub key: Option<&'a [u8]>,
    /// Headers in order.
    pub headers: &'a [(String, Bytes)],
    /// Value.
    pub value: &'a [u8],
    /// Subject the record arrived on.
    pub subject: &'a str,
    /// Reply subject, if any.
    pub reply: Option<&'a str>,
}

impl<'a> RecordRef<'a> {
    /// Borrows a new record with the epoch it will be stored under.
    pub fn from_new(r: &'a NewRecord, leader_epoch: u64) -> Self {
        RecordRef {
            timestamp_ns: r.timestamp_ns,
            leader_epoch,
            key: r.key.as_deref(),
            headers: &r.headers,
            value: &r.value,
            subject: &r.subject,
            reply: r.reply.as_deref(),
        }
    }

    /// Borrows a stored record (its offset is not encoded).
    pub fn from_record(r: &'a Record) -> Self {
        RecordRef {
            timestamp_ns: r.timestamp_ns,
            leader_epoch: r.leader_epoch,
            key: r.key.as_deref(),
            headers: &r.headers,
            value: &r.value,
            subject: &r.subject,
            reply: r.reply.as_deref(),
        }
    }
}

/// Exact encoded size of a record, in bytes (also its size for byte budgets
/// and retention).
pub fn encoded_len(r: &RecordRef<'_>) -> usize {
    let mut n = FIXED_HEADER + 4 + r.subject.len();
    if let Some(reply) = r.reply {
        n += 4 + reply.len();
    }
    if let Some(key) = r.key {
        n += 4 + key.len();
    }
    n += 4;
    for (name, value) in r.headers {
        n += 8 + name.len() + value.len();
    }
    n + 4 + r.value.len()
}

fn len32(n: usize, field: &'static str) -> Result<[u8; 4], CodecError> {
    u32::try_from(n)
        .map(u32::to_le_bytes)
        .map_err(|_| CodecError::TooLarge(field))
}

/// Checks that every length fits the format, so that [`encode_into`] cannot fail.
pub fn validate(r: &RecordRef<'_>) -> Result<(), CodecError> {
    len32(r.subject.len(), "subject")?;
    len32(r.reply.map_or(0, str::len), "reply")?;
    len32(r.key.map_or(0, <[u8]>::len), "key")?;
    len32(r.headers.len(), "headers")?;
    for (name, value) in r.headers {
        len32(name.len(), "header name")?;
        len32(value.len(), "header value")?;
    }
    len32(r.value.len(), "value")?;
    Ok(())
}

/// Encodes `r` into `out`, which must be exactly `encoded_len(r)` bytes long
/// and whose lengths were checked by [`validate`].
pub fn encode_into(r: &RecordRef<'_>, out: &mut [u8]) {
    debug_assert_eq!(out.len(), encoded_len(r));
    let mut w = Writer { out, pos: 0 };
    let mut flags = 0;
    if r.key.is_some() {
        flags |= FLAG_KEY;
    }
    if r.reply.is_some() {
        flags |= FLAG_REPLY;
    }
    w.put(&[FORMAT_VERSION]);
    w.put(&[0; 4]); // checksum, filled in below
    w.put(&[flags]);
    w.put(&r.timestamp_ns.to_le_bytes());
    w.put(&r.leader_epoch.to_le_bytes());
    w.put_bytes(r.subject.as_bytes());
    if let Some(reply) = r.reply {
        w.put_bytes(reply.as_bytes());
    }
    if let Some(key) = r.key {
        w.put_bytes(key);
    }
    w.put_len(r.headers.len());
    for (name, value) in r.headers {
        w.put_bytes(name.as_bytes());
        w.put_bytes(value);
    }
    w.put_bytes(r.value);
    let crc = crc32c::crc32c(&w.out[5..]);
    w.out[1..5].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes into a fresh vector (tests and replication).
pub fn encode(r: &RecordRef<'_>) -> Result<Vec<u8>, CodecError> {
    validate(r)?;
    let mut v = vec![0; encoded_len(r)];
    encode_into(r, &mut v);
    Ok(v)
}

struct Writer<'a> {
    out: &'a mut [u8],
    pos: usize,
}

impl Writer<'_> {
    fn put(&mut self, b: &[u8]) {
        self.out[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }
    fn put_len(&mut self, n: usize) {
        // Lengths were checked by `validate`; saturate rather than wrap if not.
        self.put(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
    }
    fn put_bytes(&mut self, b: &[u8]) {
        self.put_len(b.len());
        self.put(b);
    }
}

/// Decodes a record stored at `offset`. Key, header values and value are
/// slices of `buf` (no copy).
pub fn decode(offset: u64, buf: Bytes) -> Result<Record, CodecError> {
    if buf.is_empty() {
        return Err(CodecError::Truncated("version"));
    }
    if buf[0] != FORMAT_VERSION {
        return Err(CodecError::UnknownVersion(buf[0]));
    }
    if buf.len() < FIXED_HEADER {
        return Err(CodecError::Truncated("header"));
    }
    let stored = u32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]);
    let computed = crc32c::crc32c(&buf[5..]);
    if stored != computed {
        return Err(CodecError::Checksum { stored, computed });
    }
    let flags = buf[5];
    let mut r = Reader { buf: &buf, pos: 6 };
    let timestamp_ns = i64::from_le_bytes(r.fixed::<8>("timestamp")?);
    let leader_epoch = u64::from_le_bytes(r.fixed::<8>("leader epoch")?);
    let subject = r.text("subject")?;
    let reply = if flags & FLAG_REPLY != 0 {
        Some(r.text("reply")?)
    } else {
        None
    };
    let key = if flags & FLAG_KEY != 0 {
        let (s, e) = r.span("key")?;
        Some(buf.slice(s..e))
    } else {
        None
    };
    let count = r.len("header count")?;
    // Each header takes at least 8 bytes: bound the allocation by what is there.
    let mut headers = Vec::with_capacity(count.min(buf.len() / 8));
    for _ in 0..count {
        let name = r.text("header name")?;
        let (s, e) = r.span("header value")?;
        headers.push((name, buf.slice(s..e)));
    }
    let (s, e) = r.span("value")?;
    if e != buf.len() {
        return Err(CodecError::Trailing(buf.len() - e));
    }
    Ok(Record {
        offset,
        timestamp_ns,
        leader_epoch,
        key,
        headers,
        value: buf.slice(s..e),
        subject,
        reply,
    })
}

/// Reads the timestamp of an encoded record without decoding it or checking
/// its checksum (for scans that must not allocate per record).
pub fn peek_timestamp(buf: &[u8]) -> Option<i64> {
    let b: [u8; 8] = buf.get(6..14)?.try_into().ok()?;
    Some(i64::from_le_bytes(b))
}

/// Reads the leader epoch of an encoded record without decoding it or
/// checking its checksum.
pub fn peek_epoch(buf: &[u8]) -> Option<u64> {
    let b: [u8; 8] = buf.get(14..22)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

/// Returns the key of an encoded record without decoding the rest
/// (`Ok(None)` for a keyless record).
pub fn peek_key(buf: &[u8]) -> Result<Option<&[u8]>, CodecError> {
    if buf.first() != Some(&FORMAT_VERSION) {
        return Err(CodecError::UnknownVersion(
            buf.first().copied().unwrap_or(0),
        ));
    }
    if buf.len() < FIXED_HEADER {
        return Err(CodecError::Truncated("header"));
    }
    let flags = buf[5];
    if flags & FLAG_KEY == 0 {
        return Ok(None);
    }
    let mut r = Reader {
        buf,
        pos: FIXED_HEADER,
    };
    r.span("subject")?;
    if flags & FLAG_REPLY != 0 {
        r.span("reply")?;
    }
    let (s, e) = r.span("key")?;
    Ok(Some(&buf[s..e]))
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn fixed<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], CodecError> {
        let end = self.pos.checked_add(N).ok_or(CodecError::Truncated(what))?;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or(CodecError::Truncated(what))?;
        self.pos = end;
        // `s` has exactly N bytes (sliced above).
        let mut a = [0; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn len(&mut self, what: &'static str) -> Result<usize, CodecError> {
        Ok(u32::from_le_bytes(self.fixed::<4>(what)?) as usize)
    }
    fn span(&mut self, what: &'static str) -> Result<(usize, usize), CodecError> {
        let n = self.len(what)?;
        let start = self.pos;
        let end = start.checked_add(n).ok_or(CodecError::Truncated(what))?;
        if end > self.buf.len() {
            return Err(CodecError::Truncated(what));
        }
        self.pos = end;
        Ok((start, end))
    }
    fn text(&mut self, what: &'static str) -> Result<String, CodecError> {
        let (s, e) = self.span(what)?;
        std::str::from_utf8(&self.buf[s..e])
            .map(str::to_owned)
            .map_err(|_| CodecError::Utf8(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> NewRecord {
        NewRecord {
            timestamp_ns: -5,
            key: Some(Bytes::from_static(b"k1")),
            headers: vec![
                ("a".into(), Bytes::from_static(b"1")),
                ("b".into(), Bytes::new()),
            ],
            value: Bytes::from_static(b"hello"),
            subject: "foo.bar".into(),
            reply: Some("_INBOX.x".into()),
        }
    }

    #[test]
    fn round_trip_all_fields() {
        let n = sample();
        let bytes = encode(&RecordRef::from_new(&n, 7)).unwrap();
        assert_eq!(bytes.len(), encoded_len(&RecordRef::from_new(&n, 7)));
        let r = decode(42, Bytes::from(bytes.clone())).unwrap();
        assert_eq!(r.offset, 42);
        assert_eq!(r.leader_epoch, 7);
        assert_eq!(r.timestamp_ns, -5);
        assert_eq!(r.key, n.key);
        assert_eq!(r.headers, n.headers);
        assert_eq!(r.value, n.value);
        assert_eq!(r.subject, n.subject);
        assert_eq!(r.reply, n.reply);
        assert_eq!(peek_key(&bytes).unwrap(), Some(&b"k1"[..]));
        assert_eq!(peek_timestamp(&bytes), Some(-5));
    }

    #[test]
    fn empty_key_differs_from_no_key() {
        let mut n = sample();
        n.key = Some(Bytes::new());
        let b = encode(&RecordRef::from_new(&n, 0)).unwrap();
        assert_eq!(decode(0, b.into()).unwrap().key, Some(Bytes::new()));
        n.key = None;
        n.reply = None;
        let b = encode(&RecordRef::from_new(&n, 0)).unwrap();
        assert_eq!(peek_key(&b).unwrap(), None);
        let r = decode(0, b.into()).unwrap();
        assert_eq!(r.key, None);
        assert_eq!(r.reply, None);
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let b = encode(&RecordRef::from_new(&sample(), 1)).unwrap();
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut c = b.clone();
                c[i] ^= 1 << bit;
                assert!(decode(0, c.into()).is_err(), "flip {i}:{bit} not detected");
            }
        }
    }

    #[test]
    fn unknown_version_and_truncation() {
        let b = encode(&RecordRef::from_new(&sample(), 1)).unwrap();
        let mut c = b.clone();
        c[0] = 9;
        assert_eq!(decode(0, c.into()), Err(CodecError::UnknownVersion(9)));
        for cut in 0..b.len() {
            assert!(decode(0, Bytes::copy_from_slice(&b[..cut])).is_err());
        }
        assert_eq!(
            decode(0, Bytes::new()),
            Err(CodecError::Truncated("version"))
        );
    }

    #[test]
    fn chunk_entries_round_trip_and_rebuild() {
        let recs: Vec<Vec<u8>> = (0..3)
            .map(|i| {
                let mut n = sample();
                n.timestamp_ns = i;
                encode(&RecordRef::from_new(&n, 1)).unwrap()
            })
            .collect();
        let mut chunk = Vec::new();
        for (i, r) in recs.iter().enumerate() {
            let mut h = [0; ENTRY_HEADER];
            put_entry_header(&mut h, 10 + 2 * i as u64, r.len() as u32);
            chunk.extend_from_slice(&h);
            chunk.extend_from_slice(r);
        }
        let es = chunk_entry_list(&chunk).unwrap();
        assert_eq!(
            es.iter().map(|e| e.offset).collect::<Vec<_>>(),
            [10, 12, 14]
        );
        for (e, r) in es.iter().zip(&recs) {
            assert_eq!(&chunk[e.start..e.end], &r[..]);
        }
        let (first, rebuilt) = rebuild_chunk(&chunk, &es, |e| e.offset != 10).unwrap();
        assert_eq!(first, 12);
        let es2 = chunk_entry_list(&rebuilt).unwrap();
        assert_eq!(es2.iter().map(|e| e.offset).collect::<Vec<_>>(), [12, 14]);
        assert_eq!(
            decode(
                12,
                Bytes::copy_from_slice(&rebuilt[es2[0].start..es2[0].end])
            )
            .unwrap()
            .timestamp_ns,
            1
        );
        assert!(rebuild_chunk(&chunk, &es, |_| false).is_none());
        for cut in 1..chunk.len() {
            if es.iter().any(|e| e.end == cut) {
                continue;
            }
            assert!(chunk_entry_list(&chunk[..cut]).is_err(), "cut {cut}");
        }
    }

    proptest! {
        #[test]
        fn chunk_entries_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = chunk_entry_list(&bytes);
        }

        #[test]
        fn round_trip_random(ts in any::<i64>(), epoch in any::<u64>(),
                key in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
                value in proptest::collection::vec(any::<u8>(), 0..300),
                headers in proptest::collection::vec(("[a-z]{0,6}", proptest::collection::vec(any::<u8>(), 0..10)), 0..4),
                subject in "[a-z.]{1,20}", reply in proptest::option::of("[A-Z_.]{1,20}")) {
            let n = NewRecord {
                timestamp_ns: ts,
                key: key.map(Bytes::from),
                headers: headers.into_iter().map(|(k, v)| (k, Bytes::from(v))).collect(),
                value: Bytes::from(value),
                subject,
                reply,
            };
            let b = encode(&RecordRef::from_new(&n, epoch)).unwrap();
            let r = decode(3, Bytes::from(b)).unwrap();
            prop_assert_eq!(r.key, n.key);
            prop_assert_eq!(r.headers, n.headers);
            prop_assert_eq!(r.value, n.value);
            prop_assert_eq!(r.subject, n.subject);
            prop_assert_eq!(r.reply, n.reply);
            prop_assert_eq!(r.timestamp_ns, ts);
            prop_assert_eq!(r.leader_epoch, epoch);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(0, Bytes::from(bytes.clone()));
            let _ = peek_key(&bytes);
            let _ = peek_timestamp(&bytes);
        }

        /// Records written into a chunk come back entry by entry (offsets,
        /// lengths, fields); `encoded_len` is what `encode` writes; a
        /// mutated byte is caught by the record's checksum or leaves it
        /// equal; a cut chunk yields an error, never a panic.
        #[test]
        fn chunks_round_trip_and_damage_is_caught(
            values in proptest::collection::vec(
                (proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
                 proptest::collection::vec(any::<u8>(), 0..60), "[a-z.]{1,8}"), 1..12),
            first in 0u64..1_000_000, gap in 1u64..4,
            hit in any::<proptest::sample::Index>(), bit in 0u8..8,
            cut in any::<proptest::sample::Index>(),
        ) {
            let records: Vec<NewRecord> = values
                .into_iter()
                .map(|(k, v, s)| NewRecord {
                    key: k.map(Bytes::from),
                    value: Bytes::from(v),
                    subject: s,
                    ..Default::default()
                })
                .collect();
            let mut chunk = Vec::new();
            for (i, r) in records.iter().enumerate() {
                let rr = RecordRef::from_new(r, 7);
                let enc = encode(&rr).unwrap();
                prop_assert_eq!(enc.len(), encoded_len(&rr));
                let mut h = [0u8; ENTRY_HEADER];
                put_entry_header(&mut h, first + i as u64 * gap, enc.len() as u32);
                chunk.extend_from_slice(&h);
                chunk.extend_from_slice(&enc);
            }
            let entries = chunk_entry_list(&chunk).unwrap();
            prop_assert_eq!(entries.len(), records.len());
            for (i, (e, r)) in entries.iter().zip(&records).enumerate() {
                prop_assert_eq!(e.offset, first + i as u64 * gap);
                let got = decode(e.offset, Bytes::copy_from_slice(&chunk[e.start..e.end])).unwrap();
                prop_assert_eq!(&got.value, &r.value);
                prop_assert_eq!(&got.key, &r.key);
                prop_assert_eq!(got.leader_epoch, 7);
            }
            let (kept_first, kept) = rebuild_chunk(&chunk, &entries, |e| e.offset != first).unwrap_or((0, Vec::new()));
            if records.len() > 1 {
                prop_assert_eq!(kept_first, first + gap);
                prop_assert_eq!(chunk_entry_list(&kept).unwrap().len(), records.len() - 1);
            }
            // One flipped bit inside a record's encoding.
            let e = entries[hit.index(entries.len())];
            let mut bad = chunk.clone();
            let at = e.start + hit.index(e.len());
            bad[at] ^= 1 << bit;
            let again = decode(e.offset, Bytes::copy_from_slice(&bad[e.start..e.end]));
            prop_assert!(again.is_err(), "a flipped bit at {} went unnoticed", at - e.start);
            // A cut chunk.
            let n = cut.index(chunk.len());
            if let Ok(es) = chunk_entry_list(&chunk[..n]) {
                prop_assert!(es.len() < records.len());
            }
        }
    }
}
