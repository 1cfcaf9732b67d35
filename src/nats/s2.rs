//! S2 compression of route and leaf node connections, as nats-server 2.10+
//! speaks it:
//! the S2 stream format (Snappy framing with S2 blocks) over the socket,
//! switched on mid-connection once both sides agreed (see `route`).
//!
//! **Frames.** A stream starts with the identifier chunk (`0xff`, length 6,
//! `S2sTwO`); each data chunk is a type byte, a 3-byte little-endian
//! length, a masked CRC-32C of the uncompressed data and then the data:
//! S2-compressed (type `0x00`) or as is (`0x01`). Every write here starts a
//! new stream, as nats-server starts one per flush; the reader accepts
//! identifiers anywhere (and Snappy's `sNaPpY`), skips padding and
//! skippable chunks (`0x80`–`0xfe`) and refuses the reserved unskippable
//! ones (`0x02`–`0x7f`), a bad checksum or an oversized block: a peer
//! speaking garbage gets its connection closed, never a panic.
//!
//! **Switching.** [`S2Write`] passes bytes through until its switch is set
//! (the route's writer sets it at the exact byte where the agreed
//! compression starts), then frames everything. [`S2Read`] passes bytes
//! through while plain; while *armed* (the handshake, which is all UTF-8
//! text) the first `0xff` byte, which no text contains, starts the
//! compressed stream.
//!
//! The same stream serves leaf node connections (`leaf`), which agree on it
//! in their own order. [`select`] is nats-server's choice of a mode from
//! both sides' settings.
//!
//! Memory: the reader holds at most one chunk of input (≤ 5 MiB: a larger
//! announced length is refused before it is buffered) and one decoded
//! block (≤ [`MAX_BLOCK`]); the writer holds the framed form of one write
//! (the route writer's pieces are bounded) until the socket takes it.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::nats::S2Compression;

/// The stream identifier chunk.
const STREAM_ID: &[u8] = b"\xff\x06\x00\x00S2sTwO";
/// Snappy's, which S2 readers accept too.
const SNAPPY_ID: &[u8] = b"\xff\x06\x00\x00sNaPpY";
/// Uncompressed bytes per chunk written here.
const CHUNK: usize = 64 * 1024;
/// Largest decoded block accepted (nats-server's reader: 4 MiB).
pub const MAX_BLOCK: usize = 4 << 20;
/// Largest chunk accepted: a checksum and a block of [`MAX_BLOCK`] bytes
/// that did not compress (S2's worst case adds well under a quarter).
const MAX_CHUNK: usize = MAX_BLOCK + MAX_BLOCK / 4 + 64;

/// Compression levels; `Uncompressed` frames data as is (what `s2_auto`
/// picks on a fast link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Level {
    Uncompressed = 0,
    Fast = 1,
    Better = 2,
    Best = 3,
}

impl Level {
    fn from_u8(v: u8) -> Level {
        match v {
            0 => Level::Uncompressed,
            2 => Level::Better,
            3 => Level::Best,
            _ => Level::Fast,
        }
    }

    /// nats-server's name of the level.
    pub fn name(self) -> &'static str {
        match self {
            Level::Uncompressed => "s2_uncompressed",
            Level::Fast => "s2_fast",
            Level::Better => "s2_better",
            Level::Best => "s2_best",
        }
    }
}

/// The mode a connection that compresses at `level` names (INFO,
/// `/routez`, `/leafz`): `s2_auto` when that is ours, else the level.
pub fn mode_name(ours: &S2Compression, level: Level) -> &'static str {
    match ours {
        S2Compression::Auto(_) => "s2_auto",
        _ => level.name(),
    }
}

/// What a reload that puts mode `new` in force does to a live connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reapply {
    /// Nothing changes.
    Keep,
    /// The connection closes and agrees again when it re-forms.
    Reconnect,
    /// Outbound bytes go on at this level; the connection names this mode.
    Level(Level, &'static str),
}

/// nats-server's reload rule for a connection that agreed on `agreed`
/// (`/routez`, `/leafz` name), `formed_off` (it formed while ours was
/// off, so it has no compressed stream) and round trip `rtt`: a peer without compression
/// is left alone; turning compression on or off, or to `accept`, needs a
/// new agreement (reconnect); a new level (or `s2_auto`'s pick) takes
/// effect on the next write, as every write starts a new stream.
pub fn reapply(agreed: &str, formed_off: bool, new: &S2Compression, rtt: Duration) -> Reapply {
    if formed_off {
        return if *new == S2Compression::Off {
            Reapply::Keep
        } else {
            Reapply::Reconnect
        };
    }
    if agreed == "not supported" {
        return Reapply::Keep;
    }
    let level = match new {
        S2Compression::Off | S2Compression::Accept => return Reapply::Reconnect,
        _ if agreed == "off" => return Reapply::Reconnect,
        S2Compression::Fast => Level::Fast,
        S2Compression::Better => Level::Better,
        S2Compression::Best => Level::Best,
        S2Compression::Auto(t) => auto_level(t, rtt),
    };
    let name = mode_name(new, level);
    if name == agreed && !matches!(new, S2Compression::Auto(_)) {
        Reapply::Keep
    } else {
        Reapply::Level(level, name)
    }
}

/// [`reapply`] on a live connection whose agreed mode is `agreed` and
/// whose switches are `sw`: a new level is set on the switches and named
/// in `agreed`; the caller closes the connection on
/// [`Reapply::Reconnect`].
pub fn reapply_live(
    agreed: &parking_lot::Mutex<&'static str>,
    sw: Option<&Switches>,
    formed_off: bool,
    new: &S2Compression,
    rtt: Duration,
) -> Reapply {
    let mut a = agreed.lock();
    let r = reapply(&a, formed_off, new, rtt);
    if let Reapply::Level(level, name) = r {
        if let Some(sw) = sw {
            sw.set_level(level);
        }
        *a = name;
    }
    r
}

/// The level `s2_auto` picks for round-trip time `rtt`: thresholds top
/// uncompressed, fast, better and best in turn (a zero one skips its
/// level); above the last, best with three or more thresholds, otherwise
/// the last level they name.
pub fn auto_level(thresholds: &[Duration], rtt: Duration) -> Level {
    const LEVELS: [Level; 4] = [Level::Uncompressed, Level::Fast, Level::Better, Level::Best];
    for (t, level) in thresholds.iter().zip(LEVELS) {
        if !t.is_zero() && rtt <= *t {
            return level;
        }
    }
    if thresholds.len() >= 3 {
        Level::Best
    } else {
        LEVELS[thresholds.len().saturating_sub(1)]
    }
}

/// The compression a connection uses, from our mode (not off) and the peer's
/// (`None`: a server without compression), as nats-server selects it:
/// `Ok(None)` for none, an error text for a mode we do not know.
pub fn select(
    ours: &S2Compression,
    theirs: Option<&str>,
    rtt: Duration,
) -> Result<Option<Level>, String> {
    let ours_level = || match ours {
        S2Compression::Off | S2Compression::Accept => None,
        S2Compression::Fast => Some(Level::Fast),
        S2Compression::Better => Some(Level::Better),
        S2Compression::Best => Some(Level::Best),
        S2Compression::Auto(t) => Some(auto_level(t, rtt)),
    };
    let accept = *ours == S2Compression::Accept;
    let theirs_level = match theirs.unwrap_or("") {
        "" | "not supported" | "not_supported" | "off" => return Ok(None),
        "accept" => return Ok(ours_level()),
        "s2_uncompressed" => Level::Uncompressed,
        "s2_fast" | "s2_auto" => Level::Fast,
        "s2_better" => Level::Better,
        "s2_best" => Level::Best,
        other => return Err(format!("Unsupported route compression mode {other:?}")),
    };
    Ok(if accept {
        Some(theirs_level)
    } else {
        ours_level()
    })
}

/// The masked CRC-32C of the framing format.
fn masked_crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
        .rotate_right(15)
        .wrapping_add(0xa282_ead8)
}

/// Appends `data` as one S2 stream (identifier, then chunks).
pub fn encode_stream(data: &[u8], level: Level, out: &mut BytesMut) {
    out.put_slice(STREAM_ID);
    for piece in data.chunks(CHUNK) {
        let crc = masked_crc(piece);
        let packed = match level {
            Level::Uncompressed => None,
            Level::Fast => Some(minlz::encode(piece)),
            Level::Better => Some(minlz::encode_better(piece)),
            Level::Best => Some(minlz::encode_best(piece)),
        }
        // Kept only when it saves at least an eighth (as the S2 writer).
        .filter(|p| p.len() < piece.len() - piece.len() / 8);
        let (kind, body): (u8, &[u8]) = match &packed {
            Some(p) => (0x00, p),
            None => (0x01, piece),
        };
        let len = body.len() + 4;
        out.put_u8(kind);
        out.put_slice(&(len as u32).to_le_bytes()[..3]);
        out.put_u32_le(crc);
        out.put_slice(body);
    }
}

/// Why compressed input cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("s2: bad stream identifier")]
    BadIdentifier,
    #[error("s2: reserved chunk type {0:#04x}")]
    Reserved(u8),
    #[error("s2: chunk too short")]
    Short,
    #[error("s2: corrupt block")]
    Corrupt,
    #[error("s2: block of {0} bytes is too large")]
    TooLarge(usize),
    #[error("s2: checksum mismatch")]
    Checksum,
}

/// Decodes whole chunks from the front of `input` into `out`; a partial
/// chunk stays in `input`.
pub fn decode_chunks(input: &mut BytesMut, out: &mut BytesMut) -> Result<(), DecodeError> {
    while input.len() >= 4 {
        let kind = input[0];
        let len = u32::from_le_bytes([input[1], input[2], input[3], 0]) as usize;
        // Refused before it is buffered: no valid chunk is this large.
        if len > MAX_CHUNK {
            return Err(DecodeError::TooLarge(len));
        }
        if input.len() < 4 + len {
            return Ok(());
        }
        let body = &input[4..4 + len];
        match kind {
            0xff if len != 6 || (body != &STREAM_ID[4..] && body != &SNAPPY_ID[4..]) => {
                return Err(DecodeError::BadIdentifier);
            }
            0xff => {}
            0x00 | 0x01 => {
                if len < 4 {
                    return Err(DecodeError::Short);
                }
                let crc = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
                let data = &body[4..];
                let start = out.len();
                if kind == 0x00 {
                    let (n, _) = minlz::decode_len(data).map_err(|_| DecodeError::Corrupt)?;
                    if n > MAX_BLOCK {
                        return Err(DecodeError::TooLarge(n));
                    }
                    let plain = minlz::decode(data).map_err(|_| DecodeError::Corrupt)?;
                    out.put_slice(&plain);
                } else {
                    if data.len() > MAX_BLOCK {
                        return Err(DecodeError::TooLarge(data.len()));
                    }
                    out.put_slice(data);
                }
                if masked_crc(&out[start..]) != crc {
                    return Err(DecodeError::Checksum);
                }
            }
            0x02..=0x7f => return Err(DecodeError::Reserved(kind)),
            // Padding and skippable chunks.
            _ => {}
        }
        input.advance(4 + len);
    }
    Ok(())
}

/// A writer that frames everything as S2 once `on` is set (see the module
/// documentation), at the level `level` holds.
pub struct S2Write<W> {
    inner: W,
    on: Arc<AtomicBool>,
    level: Arc<AtomicU8>,
    /// Framed bytes the socket has not taken yet.
    pending: BytesMut,
}

/// The switches of an [`S2Write`]/[`S2Read`] pair, kept by the connection.
#[derive(Debug, Clone, Default)]
pub struct Switches {
    /// Outbound bytes are compressed from now on.
    pub write_on: Arc<AtomicBool>,
    /// The level outbound bytes are compressed at.
    pub level: Arc<AtomicU8>,
    /// Inbound: the first `0xff` byte starts the compressed stream.
    pub read_armed: Arc<AtomicBool>,
}

impl Switches {
    pub fn set_level(&self, level: Level) {
        self.level.store(level as u8, Ordering::Relaxed);
    }
}

impl<W> S2Write<W> {
    pub fn new(inner: W, sw: &Switches) -> S2Write<W> {
        S2Write {
            inner,
            on: sw.write_on.clone(),
            level: sw.level.clone(),
            pending: BytesMut::new(),
        }
    }
}

impl<W: AsyncWrite + Unpin> S2Write<W> {
    /// Writes the pending framed bytes; `Ready(Ok)` once none are left.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.pending) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.pending.advance(n),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for S2Write<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.pending.is_empty() && !this.on.load(Ordering::Acquire) {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        match this.drain(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other.map(|r| r.map(|()| 0)),
        }
        if !this.on.load(Ordering::Acquire) {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        let level = Level::from_u8(this.level.load(Ordering::Relaxed));
        encode_stream(buf, level, &mut this.pending);
        // Taken: what the socket does not take now goes with the next
        // write or the flush.
        if let Poll::Ready(Err(e)) = this.drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_shutdown(cx),
            other => other,
        }
    }
}

/// A reader that decompresses once the peer's compressed stream starts
/// (see the module documentation).
pub struct S2Read<R> {
    inner: R,
    armed: Arc<AtomicBool>,
    compressed: bool,
    /// Raw input not yet handed on (plain) or decoded (compressed).
    raw: BytesMut,
    /// Decoded bytes not yet handed on.
    decoded: BytesMut,
}

impl<R> S2Read<R> {
    pub fn new(inner: R, sw: &Switches) -> S2Read<R> {
        S2Read {
            inner,
            armed: sw.read_armed.clone(),
            compressed: false,
            raw: BytesMut::new(),
            decoded: BytesMut::new(),
        }
    }
}

fn hand_on(from: &mut BytesMut, n: usize, out: &mut ReadBuf<'_>) {
    let n = n.min(out.remaining());
    out.put_slice(&from[..n]);
    from.advance(n);
}

impl<R: AsyncRead + Unpin> AsyncRead for S2Read<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.decoded.is_empty() {
                let n = this.decoded.len();
                hand_on(&mut this.decoded, n, out);
                return Poll::Ready(Ok(()));
            }
            if this.compressed {
                decode_chunks(&mut this.raw, &mut this.decoded)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                if !this.decoded.is_empty() {
                    continue;
                }
            } else if !this.raw.is_empty() {
                let armed = this.armed.load(Ordering::Acquire);
                match this.raw.iter().position(|b| armed && *b == 0xff) {
                    Some(0) => {
                        this.compressed = true;
                        this.armed.store(false, Ordering::Release);
                        continue;
                    }
                    Some(i) => hand_on(&mut this.raw, i, out),
                    None => {
                        let n = this.raw.len();
                        hand_on(&mut this.raw, n, out);
                    }
                }
                return Poll::Ready(Ok(()));
            } else if !this.armed.load(Ordering::Acquire) {
                // Plain and nothing buffered: read straight through.
                return Pin::new(&mut this.inner).poll_read(cx, out);
            }
            // More input.
            this.raw.reserve(64 * 1024);
            match tokio_util::io::poll_read_buf(Pin::new(&mut this.inner), cx, &mut this.raw) {
                // End of input (a partial chunk is dropped).
                Poll::Ready(Ok(0)) => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn compression_is_selected_as_nats_server_does() {
        use Level::*;
        let ms = Duration::from_millis;
        let sel = |ours: &S2Compression, theirs: Option<&str>| select(ours, theirs, ms(1));
        let auto = S2Compression::Auto(S2Compression::default_thresholds());
        // A peer without compression, or with it off.
        for theirs in [None, Some(""), Some("not supported"), Some("off")] {
            assert_eq!(sel(&S2Compression::Fast, theirs), Ok(None));
        }
        // Theirs `accept`: ours decides; both `accept`: none.
        assert_eq!(sel(&S2Compression::Best, Some("accept")), Ok(Some(Best)));
        assert_eq!(sel(&S2Compression::Accept, Some("accept")), Ok(None));
        // Ours `accept`: theirs decides (their `s2_auto` is fast here).
        assert_eq!(
            sel(&S2Compression::Accept, Some("s2_better")),
            Ok(Some(Better))
        );
        assert_eq!(sel(&S2Compression::Accept, Some("s2_auto")), Ok(Some(Fast)));
        // Otherwise each side compresses at its own level.
        assert_eq!(sel(&S2Compression::Fast, Some("s2_best")), Ok(Some(Fast)));
        assert_eq!(sel(&auto, Some("s2_fast")), Ok(Some(Uncompressed)));
        assert!(sel(&S2Compression::Fast, Some("zstd")).is_err());
    }

    #[test]
    fn reloads_keep_switch_or_reconnect_as_nats_server() {
        let ms = Duration::from_millis;
        let auto = S2Compression::Auto(S2Compression::default_thresholds());
        // Formed while ours was off: only staying off keeps it.
        assert_eq!(
            reapply("not supported", true, &S2Compression::Off, ms(1)),
            Reapply::Keep
        );
        assert_eq!(
            reapply("not supported", true, &S2Compression::Fast, ms(1)),
            Reapply::Reconnect
        );
        // A peer without compression is left alone.
        assert_eq!(
            reapply("not supported", false, &S2Compression::Best, ms(1)),
            Reapply::Keep
        );
        // On/off and accept need a new agreement.
        for new in [S2Compression::Off, S2Compression::Accept] {
            assert_eq!(reapply("s2_fast", false, &new, ms(1)), Reapply::Reconnect);
        }
        assert_eq!(
            reapply("off", false, &S2Compression::Fast, ms(1)),
            Reapply::Reconnect
        );
        // Levels switch in place; the same level keeps.
        assert_eq!(
            reapply("s2_fast", false, &S2Compression::Fast, ms(1)),
            Reapply::Keep
        );
        assert_eq!(
            reapply("s2_fast", false, &S2Compression::Best, ms(1)),
            Reapply::Level(Level::Best, "s2_best")
        );
        assert_eq!(
            reapply("s2_best", false, &auto, ms(60)),
            Reapply::Level(Level::Better, "s2_auto")
        );
        assert_eq!(
            reapply("s2_auto", false, &auto, ms(1)),
            Reapply::Level(Level::Uncompressed, "s2_auto")
        );
    }

    #[test]
    fn s2_auto_levels_follow_the_round_trip() {
        use Level::*;
        let ms = Duration::from_millis;
        let t = S2Compression::default_thresholds();
        assert_eq!(auto_level(&t, ms(2)), Uncompressed);
        assert_eq!(auto_level(&t, ms(30)), Fast);
        assert_eq!(auto_level(&t, ms(80)), Better);
        assert_eq!(auto_level(&t, ms(500)), Best);
        // A zero threshold skips its level; past two thresholds the last
        // level they name.
        assert_eq!(auto_level(&[ms(0), ms(50)], ms(2)), Fast);
        assert_eq!(auto_level(&[ms(10), ms(50)], ms(90)), Fast);
    }

    #[test]
    fn streams_round_trip_at_every_level() {
        let text: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("RMSG $G foo.{} 5\r\nhello\r\n", i % 97).into_bytes())
            .collect();
        for level in [Level::Uncompressed, Level::Fast, Level::Better, Level::Best] {
            let mut framed = BytesMut::new();
            encode_stream(&text, level, &mut framed);
            encode_stream(b"PING\r\n", level, &mut framed);
            if level != Level::Uncompressed {
                assert!(framed.len() < text.len() / 4, "{level:?} compresses");
            }
            let mut out = BytesMut::new();
            // Fed in odd pieces: partial chunks wait for the rest.
            let mut input = BytesMut::new();
            for piece in framed.chunks(777) {
                input.extend_from_slice(piece);
                decode_chunks(&mut input, &mut out).unwrap();
            }
            assert!(input.is_empty());
            assert_eq!(&out[..text.len()], &text[..]);
            assert_eq!(&out[text.len()..], b"PING\r\n");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut out = BytesMut::new();
        let mut bad_id = BytesMut::from(&b"\xff\x06\x00\x00nopeno"[..]);
        assert_eq!(
            decode_chunks(&mut bad_id, &mut out),
            Err(DecodeError::BadIdentifier)
        );
        let mut reserved = BytesMut::from(&b"\x05\x01\x00\x00x"[..]);
        assert_eq!(
            decode_chunks(&mut reserved, &mut out),
            Err(DecodeError::Reserved(5))
        );
        let mut framed = BytesMut::new();
        encode_stream(b"hello hello hello hello hello", Level::Fast, &mut framed);
        let last = framed.len() - 1;
        framed[last] ^= 0x55;
        assert!(decode_chunks(&mut framed, &mut out).is_err());
        // An announced 16 MiB chunk is refused before it arrives.
        let mut huge = BytesMut::from(&b"\x00\xff\xff\xff"[..]);
        assert_eq!(
            decode_chunks(&mut huge, &mut out),
            Err(DecodeError::TooLarge(0xff_ffff))
        );
        let mut short = BytesMut::from(&b"\x00\x02\x00\x00ab"[..]);
        assert_eq!(decode_chunks(&mut short, &mut out), Err(DecodeError::Short));
        // Skippable chunks are skipped.
        let mut skip = BytesMut::from(&b"\xfe\x02\x00\x00ab"[..]);
        decode_chunks(&mut skip, &mut out).unwrap();
        assert!(skip.is_empty());
    }

    #[tokio::test]
    async fn plain_then_compressed_across_the_switch() {
        let (a, b) = tokio::io::duplex(1 << 20);
        let sw = Switches::default();
        sw.set_level(Level::Fast);
        let mut w = S2Write::new(a, &sw);
        let rs = Switches::default();
        rs.read_armed.store(true, Ordering::Relaxed);
        let mut r = S2Read::new(b, &rs);
        w.write_all(b"INFO {\"compression\":\"s2_fast\"}\r\n")
            .await
            .unwrap();
        sw.write_on.store(true, Ordering::Release);
        let big = vec![b'x'; 300_000];
        w.write_all(&big).await.unwrap();
        w.write_all(b"PING\r\n").await.unwrap();
        w.flush().await.unwrap();
        drop(w);
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        let head = b"INFO {\"compression\":\"s2_fast\"}\r\n".len();
        assert_eq!(&got[..head], b"INFO {\"compression\":\"s2_fast\"}\r\n");
        assert_eq!(got.len(), head + big.len() + 6);
        assert!(got[head..head + big.len()].iter().all(|b| *b == b'x'));
        assert!(!rs.read_armed.load(Ordering::Relaxed), "switched once");
    }
}
