//! The leader's side of replication: it answers its followers' fetches and
//! leader-epoch offset requests, and keeps the ISR honest.
//!
//! One task per partition led here, started with the partition and
//! cancelled when it stops. It serves requests one at a time (a fetch is a
//! read of the log's tail, usually from memory), so the ISR bookkeeping
//! sees fetches in order. Every `max_lag / 4` it asks the controller to
//! remove ISR followers that have not caught up for `max_lag`; a fetch that
//! shows a replica out of the ISR caught up asks to add it back. Both
//! proposals carry the leader epoch, so a deposed leader's are refused, and
//! at most one per replica is in flight.
//!
//! A fetch in another leader epoch gets an empty answer carrying this
//! leader's epoch (the follower then knows it asked a stale leader); a
//! request that does not decode gets no answer (the sender times out). A
//! fetch past the end of what this leader has (its log plus the records it
//! staged) is answered with a leader-epoch offset answer giving that end:
//! the follower has records this leader lost, and truncates. Answers hold
//! at most `clustering.replication.max.bytes` of records: from the log up
//! to the leader's written end, then from the staged records (queued for
//! the leader's own write, so its write and the followers' overlap; the
//! commit still waits for the leader's write). A fetch that finds nothing
//! new is held, if its follower asks (`waitMs`), until records or a new
//! high watermark arrive or the wait ends; a caught-up follower keeps one
//! fetch waiting here, so a new record reaches it in one message.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::leader::Partition;
use super::subjects;
use crate::cluster::state::MetaCommand;
use crate::nats::handle::LocalMsg;
use crate::store::codec::{self, RecordRef};
use crate::wire::pb;
use crate::wire::replication::{self as rw, ResponseWriter, ENTRY_OVERHEAD};

/// Most records in one fetch answer.
const MAX_RECORDS: usize = 4096;
/// Room kept for the answer's header within `replication.max.bytes`.
const HEADER_ROOM: usize = 64;
/// Longest a fetch is held, whatever its follower asks.
const MAX_HOLD: Duration = Duration::from_secs(30);
/// Most fetches held at once (one per replica is the norm; a fetch beyond
/// this, from peers that send more, is answered at once).
const MAX_HELD: usize = 64;
/// Longest a held fetch waits for records once the committed end has moved
/// past what its follower knows: followers' readers (`readISRReplica`) see
/// a new committed end this late at most, and under load it travels with
/// the records at no extra message.
const HW_LAG: Duration = Duration::from_millis(5);

/// Starts serving the followers of a partition led here.
pub fn start(p: &Arc<Partition>) -> Result<(), crate::nats::NatsError> {
    let ns = p.ctx.namespace.clone();
    let fetches = p
        .nats()
        .subscribe(&subjects::replicate(&ns, &p.stream, p.id), None)?;
    let offsets = p
        .nats()
        .subscribe(&subjects::offset(&ns, &p.stream, p.id), None)?;
    p.spawn_task(move |p, cancel| serve(p, fetches, offsets, cancel));
    Ok(())
}

async fn serve(
    p: Arc<Partition>,
    mut fetches: crate::nats::handle::LocalSubscription,
    mut offsets: crate::nats::handle::LocalSubscription,
    cancel: CancellationToken,
) {
    let period = (p.ctx.max_lag / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let proposing: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut held: Vec<Held> = Vec::new();
    loop {
        let until = held.iter().map(|h| h.until).min();
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            _ = p.fetch_wake.notified(), if !held.is_empty() => {
                answer_held(&p, &mut held).await;
            }
            _ = tokio::time::sleep_until(until.unwrap_or_else(tokio::time::Instant::now)), if until.is_some() => {
                answer_held(&p, &mut held).await;
            }
            m = fetches.next() => match m {
                Some(m) => {
                    if let Some(rejoin) = answer_fetch(&p, m, &mut held).await {
                        propose_isr(&p, &proposing, rejoin, true);
                    }
                    // A fetch just held may have missed news that came
                    // while it was being answered.
                    answer_held(&p, &mut held).await;
                }
                None => break,
            },
            m = offsets.next() => match m {
                Some(m) => answer_offset(&p, m),
                None => break,
            },
            _ = tick.tick() => {
                for r in p.lagging() {
                    propose_isr(&p, &proposing, r, false);
                }
            }
        }
    }
    p.fetches_held.store(0, Ordering::Relaxed);
}

/// A fetch that found nothing new, held until there is something for it
/// (records, or `HW_LAG` after the committed end moved past what its
/// follower knows) or until its wait ends. Its follower fetches again as
/// soon as it is answered, so a caught-up follower learns of a new record
/// in one message instead of a notification, a fetch and its answer.
struct Held {
    replica: String,
    reply: String,
    offset: u64,
    /// The high watermark its follower knows.
    hw: i64,
    until: tokio::time::Instant,
}

/// Answers the held fetches that have news or whose wait is over; counts
/// the rest where `Partition::wake_held_fetches` sees them.
async fn answer_held(p: &Arc<Partition>, held: &mut Vec<Held>) {
    if held.is_empty() {
        return;
    }
    p.fetches_held.store(held.len(), Ordering::Relaxed);
    // Pairs with the fence in `wake_held_fetches`: news published before
    // that count was visible is seen below.
    std::sync::atomic::fence(Ordering::SeqCst);
    let now = tokio::time::Instant::now();
    let epoch = p.leader_epoch();
    let hw = p.high_watermark_or_minus_one();
    let end = p.leader_leo().max(p.staged_end());
    let mut i = 0;
    while i < held.len() {
        let h = &held[i];
        if h.offset >= end && h.until > now {
            // Nothing to send yet. A committed end the follower has not
            // been told goes with the next records, or after `HW_LAG` at
            // the latest.
            if h.hw != hw {
                let soon = now + HW_LAG;
                if soon < h.until {
                    held[i].until = soon;
                }
            }
            i += 1;
            continue;
        }
        let Some(mut w) = records_answer(p, h.offset, epoch, hw).await else {
            // The log could not be read: no answer, as for a fresh fetch.
            held.swap_remove(i);
            continue;
        };
        if w.is_empty() && h.until > now && h.hw == hw {
            i += 1;
            continue;
        }
        let h = held.swap_remove(i);
        w.set_held();
        publish(p, &h.reply, w.finish());
    }
    p.fetches_held.store(held.len(), Ordering::Relaxed);
}

/// Answers one fetch, or holds it (see [`Held`]); returns a replica that
/// may rejoin the ISR.
async fn answer_fetch(p: &Arc<Partition>, m: LocalMsg, held: &mut Vec<Held>) -> Option<String> {
    let reply = m.reply.as_ref().and_then(|r| std::str::from_utf8(r).ok())?;
    let req = match rw::decode_fetch(&m.payload) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(stream = %p.stream, partition = p.id, error = %e, "bad fetch request");
            return None;
        }
    };
    let epoch = p.leader_epoch();
    if req.leader_epoch != epoch || req.offset < 0 {
        let hw = p.high_watermark_or_minus_one();
        publish(p, reply, ResponseWriter::new(epoch, hw, 0).finish());
        return None;
    }
    let offset = req.offset as u64;
    let end = p.leader_leo().max(p.staged_end());
    if offset > end {
        // The follower is ahead of this leader: it has records this
        // leader lost (a crash before they were written here).
        let resp = pb::LeaderEpochOffsetResponse {
            end_offset: end as i64,
            leader_epoch: epoch,
            epoch: epoch as i64,
        };
        publish(p, reply, rw::encode_epoch_response(&resp));
        return None;
    }
    // A follower asking again replaces its held fetch (it gave up on it).
    held.retain(|h| h.replica != req.replica_id);
    // What the follower has written counts; what it has only received
    // does not (it may fetch ahead of its own write).
    let written = (req.written.max(0) as u64).min(offset);
    let rejoin = p
        .follower_fetched(&req.replica_id, written)
        .then(|| req.replica_id.clone());
    // Held when there are no records for the follower, if it asked to be
    // and there is room; a committed end its own fetch moved reaches it as
    // any other (see `answer_held`).
    if offset >= end && req.wait_ms > 0 && held.len() < MAX_HELD {
        let wait = Duration::from_millis(u64::from(req.wait_ms)).min(MAX_HOLD);
        p.fetch_held(&req.replica_id);
        held.push(Held {
            replica: req.replica_id.clone(),
            reply: reply.to_string(),
            offset,
            hw: req.hw,
            until: tokio::time::Instant::now() + wait,
        });
        return rejoin;
    }
    // The committed end may have moved with this fetch.
    let hw = p.high_watermark_or_minus_one();
    let w = records_answer(p, offset, epoch, hw).await?;
    publish(p, reply, w.finish());
    rejoin
}

/// An answer from `offset`: records from the log up to the leader's
/// written end, then from the staged records, within
/// `replication.max.bytes`. `None` when the log cannot be read.
async fn records_answer(
    p: &Arc<Partition>,
    offset: u64,
    epoch: u64,
    hw: i64,
) -> Option<ResponseWriter> {
    let leo = p.leader_leo();
    let budget = p.ctx.max_bytes.saturating_sub(HEADER_ROOM).max(1);
    let records = if offset < leo {
        match p.log().read(offset, MAX_RECORDS, budget).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(stream = %p.stream, partition = p.id, error = %e, "reading for a follower");
                return None;
            }
        }
    } else {
        p.staged_from(offset, budget)
            .0
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    };
    let limit = if offset < leo { leo } else { u64::MAX };
    // Sized first, so the answer is written into one allocation that
    // never grows (and is never copied to grow).
    let mut sized = Vec::with_capacity(records.len());
    let mut body = 0;
    for r in records.iter().filter(|r| r.offset < limit) {
        let rr = RecordRef::from_record(r);
        let len = codec::encoded_len(&rr);
        if !sized.is_empty() && rw::ANSWER_FIXED_LEN + body + len + ENTRY_OVERHEAD > budget {
            break;
        }
        body += ENTRY_OVERHEAD + len;
        sized.push((r.offset, rr, len));
    }
    let mut w = ResponseWriter::new(epoch, hw, body);
    for (offset, rr, len) in &sized {
        w.push_with(*offset, *len, |buf| codec::encode_into(rr, buf));
    }
    debug_assert_eq!(w.len(), rw::ANSWER_FIXED_LEN + body);
    Some(w)
}

/// Answers a leader-epoch offset request (KIP-101/279): the largest epoch
/// of this log not above the one asked for, and where it ends here.
fn answer_offset(p: &Arc<Partition>, m: LocalMsg) {
    let Some(reply) = m.reply.as_ref().and_then(|r| std::str::from_utf8(r).ok()) else {
        return;
    };
    let Ok(req) = rw::decode_epoch_request(&m.payload) else {
        return;
    };
    let (epoch, end) = epoch_end(&p.log().leader_epochs(), req.leader_epoch, p.leader_leo());
    let resp = pb::LeaderEpochOffsetResponse {
        end_offset: end as i64,
        leader_epoch: p.leader_epoch(),
        epoch: epoch.map_or(-1, |e| e as i64),
    };
    publish(p, reply, rw::encode_epoch_response(&resp));
}

/// In a log with leader epochs `epochs` (epoch, first offset; ascending)
/// and log end `leo`: the largest epoch ≤ `asked` and the offset where it
/// ends (the first offset of the next epoch, or `leo`). With no such
/// epoch: `None` and the first offset of the log's first epoch.
pub fn epoch_end(epochs: &[(u64, u64)], asked: u64, leo: u64) -> (Option<u64>, u64) {
    match epochs.iter().rposition(|(e, _)| *e <= asked) {
        Some(i) => (
            Some(epochs[i].0),
            epochs
                .get(i + 1)
                .map_or(leo, |(_, start)| (*start).min(leo)),
        ),
        None => (None, epochs.first().map_or(leo, |(_, s)| (*s).min(leo))),
    }
}

fn publish(p: &Partition, reply: &str, body: bytes::Bytes) {
    if let Err(e) = p.nats().publish(reply, None, None, body) {
        tracing::debug!(stream = %p.stream, partition = p.id, error = %e, "answering a follower");
    }
}

/// Asks the controller to add (`expand`) or remove a replica from the ISR,
/// unless such a request for it is already in flight.
fn propose_isr(
    p: &Arc<Partition>,
    proposing: &Arc<Mutex<HashSet<String>>>,
    replica: String,
    expand: bool,
) {
    let Some(meta) = p.ctx.meta.clone() else {
        return;
    };
    if !proposing.lock().insert(replica.clone()) {
        return;
    }
    let (name, partition, leader_epoch) = (p.stream.clone(), p.id, Some(p.leader_epoch()));
    let cmd = if expand {
        MetaCommand::ExpandIsr {
            name,
            partition,
            replica: replica.clone(),
            leader_epoch,
        }
    } else {
        MetaCommand::ShrinkIsr {
            name,
            partition,
            replica: replica.clone(),
            leader_epoch,
        }
    };
    let proposing = proposing.clone();
    let (stream, id) = (p.stream.clone(), p.id);
    tokio::spawn(async move {
        match meta.propose(cmd).await {
            Ok(r) => match r.into_result() {
                Ok(()) => tracing::info!(%stream, partition = id, %replica, expand, "ISR changed"),
                Err(e) => {
                    tracing::debug!(%stream, partition = id, %replica, error = %e, "ISR change refused")
                }
            },
            Err(e) => {
                tracing::warn!(%stream, partition = id, %replica, error = %e, "proposing an ISR change")
            }
        }
        proposing.lock().remove(&replica);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_end_offsets() {
        let epochs = [(0, 0), (2, 50), (5, 80)];
        assert_eq!(epoch_end(&epochs, 0, 100), (Some(0), 50));
        assert_eq!(
            epoch_end(&epochs, 1, 100),
            (Some(0), 50),
            "largest epoch ≤ 1 is 0"
        );
        assert_eq!(epoch_end(&epochs, 2, 100), (Some(2), 80));
        assert_eq!(epoch_end(&epochs, 9, 100), (Some(5), 100));
        assert_eq!(epoch_end(&[(3, 10)], 1, 20), (None, 10));
        assert_eq!(epoch_end(&[], 1, 0), (None, 0));
    }
}
