//! Readers: one task per subscriber, streaming committed records from the
//! store in batches and then waiting on the partition's high watermark.
//!
//! Only committed records are read: below [`Partition::committed_end`]
//! (the high watermark plus one), which the partition's leader owns and
//! moves. The store's own log end may be ahead of it (written, not yet
//! committed); a reader never looks at it.
//!
//! A reader owns nothing shared but a clone of the log handle and watches,
//! so a slow subscriber only fills its own bounded buffer and never slows
//! the stenographer or another subscriber. Records go to the subscriber one
//! store read at a time ([`Delivery`]): one channel hand-off and one wake-up
//! per read rather than per message. Start and stop offsets are resolved
//! once, up front (`resolve_start`, `resolve_stop`), with Liftbridge's
//! rules.
//!
//! Memory per subscriber is bounded in bytes, not in batches: each read
//! first takes its size in credit from the subscription's [`Budget`] (two
//! reads), keeps what the records it read weigh, and the credit comes back
//! only when the consumer drops the delivery (after the gRPC layer has
//! encoded its last message). Reads start at [`READ_BYTES`] with a budget of
//! [`SUBSCRIBER_BUFFER`]; once the consumer has taken [`GROW_AFTER`] bytes —
//! more than any transport buffer holds for a client that does not read —
//! they grow to [`MAX_READ_BYTES`] and the budget to two of those, so a
//! replay pays for fewer, larger store reads. So a subscriber that never
//! reads stops its reader after at most `SUBSCRIBER_BUFFER` bytes of
//! records, and one that read at least `GROW_AFTER` and then stopped after
//! at most [`MAX_SUBSCRIBER_BUFFER`] (plus one record per read when a
//! single record is bigger than a read); reads are paced by what the
//! client consumes. The reader waits for credit without holding any lock.
//!
//! Speaks the domain only: positions in, stored [`Record`]s out. Turning a
//! gRPC request into positions and records into `proto.Message`s is the
//! API adapter's job.

use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::leader::{Closed, Partition};
use crate::store::{Record, StoreError};

/// Records read per store call.
const READ_BATCH: usize = 512;
/// Bytes read per store call (soft limit; at least one record is returned).
pub const READ_BYTES: usize = 64 << 10;
/// Bytes of records one subscription may hold between its store reads and
/// the client (read, queued, or being encoded): two reads, so the next read
/// overlaps the sending of the previous one.
pub const SUBSCRIBER_BUFFER: usize = 2 * READ_BYTES;
/// Bytes per store call once the consumer has taken [`GROW_AFTER`].
pub const MAX_READ_BYTES: usize = 256 << 10;
/// What a subscription may hold once its reads have grown.
pub const MAX_SUBSCRIBER_BUFFER: usize = 2 * MAX_READ_BYTES;
/// Bytes the consumer must have taken (credit returned) before reads grow:
/// far more than an HTTP/2 stream window and the encoder's buffers hold, so
/// a client that does not read never gets there.
pub const GROW_AFTER: usize = 16 << 20;
/// What a record costs in memory besides its fields (the `Record` itself
/// and its share of the batch's vector), so that a read of tiny records is
/// not counted as nearly free.
const RECORD_OVERHEAD: usize = 128;

/// The records of one store read, in the order they are delivered.
pub type Batch = Vec<Record>;

/// The byte budget of one subscription, shared by its reader (which takes
/// credit before each read) and its consumer (which returns it by dropping
/// deliveries). Never closed.
#[derive(Debug, Clone)]
pub struct Budget(Arc<Semaphore>);

impl Budget {
    /// A budget of [`SUBSCRIBER_BUFFER`] bytes.
    pub fn new() -> Self {
        Budget(Arc::new(Semaphore::new(SUBSCRIBER_BUFFER)))
    }

    /// Bytes not currently held by deliveries or a read in progress.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }

    /// Waits for `bytes` of credit for one read; `None` if the budget was
    /// closed (it never is; kept total rather than panicking).
    async fn take_read(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        self.0
            .clone()
            .acquire_many_owned(u32::try_from(bytes).unwrap_or(u32::MAX))
            .await
            .ok()
    }

    /// Adds `bytes` of credit (when reads grow).
    fn grow(&self, bytes: usize) {
        self.0.add_permits(bytes);
    }
}

/// A forward reader's read size: [`READ_BYTES`] until the consumer has
/// taken [`GROW_AFTER`] bytes, then [`MAX_READ_BYTES`] (see the module
/// documentation). The budget is always two reads.
struct ReadSize {
    bytes: usize,
    /// Credit the reader's deliveries kept (their weight), in total.
    delivered: usize,
}

impl ReadSize {
    fn new() -> Self {
        ReadSize {
            bytes: READ_BYTES,
            delivered: 0,
        }
    }

    /// Notes a delivery that kept `weight` bytes of credit.
    fn delivered(&mut self, weight: usize) {
        self.delivered = self.delivered.saturating_add(weight);
    }

    /// Grows reads and the budget once the consumer has given back
    /// [`GROW_AFTER`] bytes; the read size to use now.
    fn next(&mut self, budget: &Budget) -> usize {
        if self.bytes < MAX_READ_BYTES {
            // Held now = the budget (two reads) − available; the rest of
            // what was delivered came back.
            let held = (2 * self.bytes).saturating_sub(budget.available());
            if self.delivered.saturating_sub(held) >= GROW_AFTER {
                budget.grow(MAX_SUBSCRIBER_BUFFER - 2 * self.bytes);
                self.bytes = MAX_READ_BYTES;
            }
        }
        self.bytes
    }
}

impl Default for Budget {
    fn default() -> Self {
        Self::new()
    }
}

/// One store read on its way to the subscriber, holding the credit of the
/// bytes it weighs until it is dropped.
#[derive(Debug)]
pub struct Delivery {
    /// The records, in delivery order.
    pub records: Batch,
    /// Returned to the subscription's budget on drop.
    credit: OwnedSemaphorePermit,
}

impl Delivery {
    /// Wraps `records` read under `credit`, giving back the part of the
    /// credit they do not use.
    fn new(records: Batch, mut credit: OwnedSemaphorePermit) -> Self {
        let used = batch_bytes(&records).min(credit.num_permits());
        let spare = credit.num_permits() - used;
        if spare > 0 {
            drop(credit.split(spare));
        }
        Delivery { records, credit }
    }

    /// Splits into the records and the credit that must live as long as
    /// they (or what they are turned into) are held.
    pub fn into_parts(self) -> (Batch, OwnedSemaphorePermit) {
        (self.records, self.credit)
    }
}

/// What a batch weighs in memory, roughly (its fields plus a fixed
/// overhead per record).
pub fn batch_bytes(b: &[Record]) -> usize {
    b.iter()
        .map(|r| {
            RECORD_OVERHEAD
                + r.value.len()
                + r.key.as_ref().map_or(0, |k| k.len())
                + r.headers
                    .iter()
                    .map(|(k, v)| k.len() + v.len())
                    .sum::<usize>()
                + r.subject.len()
                + r.reply.as_ref().map_or(0, |x| x.len())
        })
        .sum()
}

/// The channel from a reader to its consumer: deliveries, then the reason
/// the subscription ended.
pub type ReadSender = mpsc::Sender<Result<Delivery, ReadEnd>>;

/// Where a subscription starts (Liftbridge's start positions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPosition {
    /// The next message recorded after the subscription starts.
    NewOnly,
    /// This offset (negative reads as 0; below the oldest, the oldest).
    Offset(i64),
    /// The oldest message still stored.
    Earliest,
    /// The newest message stored.
    Latest,
    /// The first message received at or after this Unix time (ns).
    Timestamp(i64),
}

/// Where a subscription stops (Liftbridge's stop positions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopPosition {
    /// Never: it runs until the subscriber goes away.
    OnCancel,
    /// After this offset (inclusive; must not be negative).
    Offset(i64),
    /// After the newest message stored when the subscription starts.
    Latest,
    /// After the last message received at or before this Unix time (ns).
    Timestamp(i64),
}

/// How a subscription ends other than by the client going away.
#[derive(Debug, thiserror::Error)]
pub enum ReadEnd {
    /// The stop position was reached.
    #[error("Stop offset reached")]
    StopReached,
    /// STOP_LATEST on an empty partition.
    #[error("Stream is empty")]
    Empty,
    /// A readonly partition was read to its end.
    #[error("End of readonly partition")]
    ReadonlyEnd,
    /// The stream was deleted while subscribed.
    #[error("Partition deleted")]
    Deleted,
    /// The partition was paused while subscribed.
    #[error("Partition paused")]
    Paused,
    /// The server is shutting down.
    #[error("Server shutting down")]
    Shutdown,
    /// A reverse subscription read down to the oldest record (Liftbridge's
    /// reverse reader reports its end of file, "EOF").
    #[error("EOF")]
    ReverseEnd,
    /// Invalid positions (stop before start).
    #[error("{0}")]
    Invalid(String),
    /// A storage error.
    #[error("storage: {0}")]
    Store(#[from] StoreError),
    /// The partition's log was found damaged and it stopped.
    #[error("Partition failed: its log is damaged")]
    Failed,
    /// The partition's leader changed (subscribe again where the metadata
    /// says it is now).
    #[error("Partition leader changed")]
    Moved,
}

/// The first offset a subscription starting at `pos` delivers.
pub async fn resolve_start(p: &Partition, pos: StartPosition) -> Result<u64, ReadEnd> {
    let log = p.log();
    let end = p.committed_end();
    Ok(match pos {
        StartPosition::NewOnly => end,
        StartPosition::Offset(o) => o.max(0) as u64,
        StartPosition::Earliest => log.oldest_offset().unwrap_or(end).min(end),
        StartPosition::Latest => p.newest_committed().unwrap_or(end),
        StartPosition::Timestamp(t) => log.offset_for_timestamp(t).await?.unwrap_or(end),
    })
}

/// The last offset to deliver (inclusive), `None` for "never stop".
/// `Some(None)`-like "nothing to deliver" is expressed as `Err(Empty)`.
pub async fn resolve_stop(p: &Partition, pos: StopPosition) -> Result<Option<u64>, ReadEnd> {
    let log = p.log();
    Ok(match pos {
        StopPosition::OnCancel => None,
        StopPosition::Offset(o) => {
            if o < 0 {
                return Err(ReadEnd::Invalid("stop offset must not be negative".into()));
            }
            Some(o as u64)
        }
        StopPosition::Latest => match p.newest_committed() {
            Some(n) => Some(n),
            None => return Err(ReadEnd::Empty),
        },
        StopPosition::Timestamp(t) => {
            // Last offset with a timestamp ≤ stopTimestamp: one before the
            // first offset with a timestamp > it.
            match log.offset_for_timestamp(t.saturating_add(1)).await? {
                Some(0) => {
                    return Err(ReadEnd::Invalid(
                        "stop timestamp is before the first message".into(),
                    ))
                }
                Some(o) => Some(o - 1),
                None => match p.newest_committed() {
                    Some(n) => Some(n),
                    None => return Err(ReadEnd::Empty),
                },
            }
        }
    })
}

/// Streams records `start..=stop` of `p` into `tx` until the stop, the
/// client's departure, or the partition's end, reading only with credit
/// from `budget`. Sends the final `Err` itself.
pub async fn run(
    p: Arc<Partition>,
    mut next: u64,
    stop: Option<u64>,
    budget: Budget,
    tx: ReadSender,
) {
    let _guard = p.subscriber_guard();
    let log = p.log().clone();
    let mut end_rx = p.committed_watch();
    let mut closed_rx = p.closed_watch();
    let mut ro_rx = p.readonly_watch();
    let mut size = ReadSize::new();
    let end = loop {
        if let Some(s) = stop {
            if next > s {
                break ReadEnd::StopReached;
            }
        }
        if let Some(why) = *closed_rx.borrow() {
            break closed_end(why);
        }
        let end = *end_rx.borrow_and_update();
        if next < end {
            // Credit first: a subscriber that does not read stops its
            // reader here, holding no records beyond its budget. The
            // partition closing or the client leaving still end it.
            let read_bytes = size.next(&budget);
            let credit = tokio::select! {
                c = budget.take_read(read_bytes) => match c {
                    Some(c) => c,
                    None => return,
                },
                r = closed_rx.changed() => {
                    if r.is_err() {
                        break ReadEnd::Shutdown;
                    }
                    continue;
                }
                _ = tx.closed() => return,
            };
            let committed = usize::try_from(end - next).unwrap_or(usize::MAX);
            let max = match stop {
                Some(s) => ((s - next + 1) as usize).min(READ_BATCH),
                None => READ_BATCH,
            }
            .min(committed);
            let recs = match log.read(next, max, read_bytes).await {
                Ok(r) => r,
                Err(StoreError::Closed(_)) => continue,
                Err(e) => break store_end(&p, e),
            };
            if recs.is_empty() {
                // Everything from `next` up to the committed end was
                // removed (retention or compaction); wait for new data.
                next = end;
                continue;
            }
            let mut batch = Vec::with_capacity(recs.len());
            for r in recs {
                if r.offset >= end {
                    // Past a gap (compaction) the store may hold records
                    // not committed yet: they wait for the watermark.
                    next = next.max(end);
                    break;
                }
                if let Some(s) = stop {
                    if r.offset > s {
                        next = r.offset;
                        break;
                    }
                }
                next = r.offset + 1;
                batch.push(r);
            }
            if batch.is_empty() {
                continue;
            }
            let delivery = Delivery::new(batch, credit);
            size.delivered(delivery.credit.num_permits());
            if tx.send(Ok(delivery)).await.is_err() {
                return;
            }
            continue;
        }
        if *ro_rx.borrow_and_update() {
            break ReadEnd::ReadonlyEnd;
        }
        tokio::select! {
            r = end_rx.changed() => if r.is_err() { break ReadEnd::Shutdown },
            r = closed_rx.changed() => if r.is_err() { break ReadEnd::Shutdown },
            r = ro_rx.changed() => if r.is_err() { break ReadEnd::Shutdown },
            _ = tx.closed() => return,
        }
    };
    let _ = tx.send(Err(end)).await;
}

/// Streams records from `start` (at most the newest committed) down to the
/// oldest (reverse subscription), as Liftbridge's reverse reader does: the
/// stop offset ends the subscription only when it is delivered
/// ([`ReadEnd::StopReached`]; the caller refused a stop below the start),
/// and reaching the oldest record ends it with [`ReadEnd::ReverseEnd`].
///
/// A reverse read takes a window of offsets below `hi` (a forward read
/// with a byte limit would stop short of `hi`), so the window's length
/// follows the records' average size to keep a read near [`READ_BYTES`].
pub async fn run_reverse(
    p: Arc<Partition>,
    start: u64,
    stop: Option<u64>,
    budget: Budget,
    tx: ReadSender,
) {
    let _guard = p.subscriber_guard();
    let log = p.log().clone();
    let Some(newest) = p.newest_committed() else {
        let _ = tx.send(Err(ReadEnd::ReverseEnd)).await;
        return;
    };
    let low = log.oldest_offset().unwrap_or(0);
    let mut hi = start.min(newest);
    let mut window: u64 = 16;
    let end = loop {
        if hi < low {
            break ReadEnd::ReverseEnd;
        }
        let credit = tokio::select! {
            c = budget.take_read(READ_BYTES) => match c {
                Some(c) => c,
                None => return,
            },
            _ = tx.closed() => return,
        };
        let from = hi.saturating_sub(window - 1).max(low);
        let recs = match log.read(from, (hi - from + 1) as usize, usize::MAX).await {
            Ok(r) => r,
            Err(e) => break store_end(&p, e),
        };
        let mut batch: Batch = recs.into_iter().rev().filter(|r| r.offset <= hi).collect();
        if !batch.is_empty() {
            let avg = (batch_bytes(&batch) / batch.len()).max(1);
            window = ((READ_BYTES / avg) as u64).clamp(1, READ_BATCH as u64);
        }
        let stop_at = stop.and_then(|st| batch.iter().position(|r| r.offset == st));
        if let Some(i) = stop_at {
            batch.truncate(i + 1);
        }
        if !batch.is_empty() && tx.send(Ok(Delivery::new(batch, credit))).await.is_err() {
            return;
        }
        if stop_at.is_some() {
            break ReadEnd::StopReached;
        }
        if from == 0 || from <= low {
            break ReadEnd::ReverseEnd;
        }
        hi = from - 1;
    };
    let _ = tx.send(Err(end)).await;
}

/// A read error ends the subscription; a damaged log also fails the
/// partition, so that appends stop rather than continue on a log that can
/// no longer be read.
fn store_end(p: &Partition, e: StoreError) -> ReadEnd {
    if e.is_corruption() {
        p.mark_failed(e.to_string());
    }
    ReadEnd::Store(e)
}

fn closed_end(why: Closed) -> ReadEnd {
    match why {
        Closed::Deleted => ReadEnd::Deleted,
        Closed::Paused => ReadEnd::Paused,
        Closed::Shutdown => ReadEnd::Shutdown,
        Closed::Failed => ReadEnd::Failed,
        Closed::Moved => ReadEnd::Moved,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::partition::leader::tests::leader_of;
    use crate::store::{LogConfig, NewRecord, PartitionLog};

    fn rec(v: &'static [u8]) -> NewRecord {
        NewRecord {
            timestamp_ns: 1,
            key: None,
            headers: Vec::new(),
            value: Bytes::from_static(v),
            subject: "s".into(),
            reply: None,
        }
    }

    async fn next_batch(rx: &mut mpsc::Receiver<Result<Delivery, ReadEnd>>) -> Vec<u64> {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(Ok(b))) => b.records.iter().map(|r| r.offset).collect(),
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    /// A consumer that holds what it got keeps reads at `READ_BYTES`; one
    /// that has taken `GROW_AFTER` bytes gets `MAX_READ_BYTES` reads and a
    /// budget of two of them.
    #[tokio::test]
    async fn reads_grow_only_once_the_consumer_took_enough() {
        let budget = Budget::new();
        let mut size = ReadSize::new();
        let mut held = Vec::new();
        for _ in 0..2 {
            let bytes = size.next(&budget);
            held.push(budget.take_read(bytes).await.unwrap());
            size.delivered(bytes);
        }
        assert_eq!(size.next(&budget), READ_BYTES);
        assert_eq!(budget.available(), 0);
        drop(held);
        let mut taken = 2 * READ_BYTES;
        while taken < GROW_AFTER {
            assert_eq!(size.next(&budget), READ_BYTES, "grew after {taken} bytes");
            let credit = budget.take_read(READ_BYTES).await.unwrap();
            size.delivered(READ_BYTES);
            drop(credit);
            taken += READ_BYTES;
        }
        assert_eq!(size.next(&budget), MAX_READ_BYTES);
        assert_eq!(budget.available(), MAX_SUBSCRIBER_BUFFER);
        // Grown once: the budget does not grow again.
        assert_eq!(size.next(&budget), MAX_READ_BYTES);
        assert_eq!(budget.available(), MAX_SUBSCRIBER_BUFFER);
    }

    /// Readers deliver only below the partition's committed end, whatever
    /// the store holds, and wake when the leader moves it.
    #[tokio::test]
    async fn readers_stop_at_the_high_watermark_and_wait_on_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        let log = tokio::task::spawn_blocking(move || {
            PartitionLog::open(&d, "log", LogConfig::default())
        })
        .await
        .unwrap()
        .unwrap();
        log.append(0, vec![rec(b"a"), rec(b"b")]).await.unwrap();
        let (nats, p) = leader_of(&log, &["me"]).await;
        // What the log held when the partition opened is committed.
        assert_eq!(p.high_watermark(), Some(1));
        // Written to the store but not committed (as a follower's or an
        // ISR leader's log can be).
        log.append(0, vec![rec(b"c"), rec(b"d")]).await.unwrap();
        assert_eq!(log.log_end_offset(), 4);
        assert_eq!(p.high_watermark(), Some(1));
        assert_eq!(p.newest_committed(), Some(1));
        assert_eq!(resolve_start(&p, StartPosition::NewOnly).await.unwrap(), 2);
        assert_eq!(resolve_start(&p, StartPosition::Latest).await.unwrap(), 1);

        let (tx, mut rx) = mpsc::channel(4);
        let reader = tokio::spawn(run(p.clone(), 0, None, Budget::new(), tx));
        assert_eq!(next_batch(&mut rx).await, vec![0, 1]);
        // Nothing more until the watermark moves.
        assert!(
            tokio::time::timeout(Duration::from_millis(200), rx.recv())
                .await
                .is_err(),
            "a reader delivered uncommitted records"
        );
        p.advance_committed(3);
        assert_eq!(next_batch(&mut rx).await, vec![2]);
        // The watermark never moves back.
        p.advance_committed(1);
        assert_eq!(p.committed_end(), 3);
        p.advance_committed(4);
        assert_eq!(next_batch(&mut rx).await, vec![3]);
        drop(rx);
        reader.abort();
        p.stop(Closed::Shutdown).await;
        nats.shutdown().await;
    }

    /// A subscriber that takes nothing holds at most its budget: the reader
    /// stops after two reads' worth of records and reads again only when a
    /// delivery is dropped.
    #[tokio::test]
    async fn a_reader_stops_at_its_budget_until_deliveries_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        let log = tokio::task::spawn_blocking(move || {
            PartitionLog::open(&d, "log", LogConfig::default())
        })
        .await
        .unwrap()
        .unwrap();
        static VALUE: [u8; 4000] = [7; 4000];
        log.append(0, (0..200).map(|_| rec(&VALUE)).collect())
            .await
            .unwrap();
        let (nats, p) = leader_of(&log, &["me"]).await;
        let budget = Budget::new();
        let (tx, mut rx) = mpsc::channel(4);
        let reader = tokio::spawn(run(p.clone(), 0, None, budget.clone(), tx));
        // Two reads fit the budget; the third waits for credit.
        let t0 = tokio::time::Instant::now();
        while rx.len() < 2 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "reader never filled its budget"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(rx.len(), 2, "a reader read past its budget");
        assert!(budget.available() < READ_BYTES);
        let first = rx.recv().await.unwrap().unwrap();
        let second = rx.recv().await.unwrap().unwrap();
        // The store limits a read by encoded size: the values held fit the
        // budget (the records' in-memory overhead is what the credit adds).
        let held: usize = [&first, &second]
            .iter()
            .flat_map(|d| d.records.iter())
            .map(|r| r.value.len())
            .sum();
        assert!(held <= SUBSCRIBER_BUFFER, "{held} bytes held");
        assert!(
            held > SUBSCRIBER_BUFFER / 2,
            "reads far below their size: {held}"
        );
        assert_eq!(first.records[0].offset, 0);
        let next = second.records.last().unwrap().offset + 1;
        // Dropping a delivery returns its credit: the reader goes on.
        drop(first);
        let third = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a read after credit came back")
            .unwrap()
            .unwrap();
        assert_eq!(third.records[0].offset, next);
        drop((second, third, rx));
        reader.abort();
        p.stop(Closed::Shutdown).await;
        nats.shutdown().await;
    }
}
