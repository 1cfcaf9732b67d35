//! A follower's side of replication: copy the leader's log.
//!
//! One task per partition followed here, for one leader epoch (a new
//! leader or epoch means a new `Partition` and a new task):
//! 1. **Truncate.** Ask the leader where the latest leader epoch of this
//!    replica's log ends in the leader's log (KIP-101/279) and remove
//!    anything past it: records a deposed leader wrote that the new one
//!    never had. So logs never diverge.
//! 2. **Fetch** from the log end: the answer carries the leader's epoch, its
//!    high watermark and records, which are appended as they are (offsets,
//!    epochs, timestamps kept). One append may be in flight while the next
//!    fetch goes out (each fetch tells the leader what is written, which
//!    is what counts for the commit). What the leader has committed and this
//!    replica has is committed here too (readers with `readISRReplica` see
//!    it). Caught up, its fetch waits at the leader (up to
//!    `replica.max.idle.wait`, at most half of `replica.fetch.timeout`)
//!    until there is something new; a leader that answers at once instead
//!    (one that does not hold fetches) is fetched from again after its
//!    notification or `replica.max.idle.wait`.
//! 3. **Report** the leader to the controller when no fetch has succeeded
//!    for `replica.max.leader.timeout` (again every timeout while it lasts),
//!    or sooner when nobody in the NATS cluster has listened on the fetch
//!    subject for `replica.fetch.timeout` (the leader's node left the
//!    cluster); a majority of the ISR followers' reports replaces the
//!    leader.
//!
//! An answer from another leader epoch (a deposed leader, or metadata not
//! yet applied here) counts as a failed fetch. A record that does not
//! decode or append ends the round: the task truncates again and refetches.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::leader::Partition;
use super::subjects;
use crate::cluster::state::MetaCommand;
use crate::nats::NatsError;
use crate::store::codec;
use crate::store::StoreError;
use crate::wire::pb;
use crate::wire::replication as rw;

/// Pause after a failed request before the next one.
const RETRY: Duration = Duration::from_millis(100);

/// Starts following `leader` for the partition.
pub fn start(p: &Arc<Partition>, leader: String) {
    p.spawn_task(move |p, cancel| follow(p, leader, cancel));
}

/// Why a round of fetching ended.
enum RoundEnd {
    /// Stop: the partition is stopping or its log closed.
    Stop,
    /// Truncate again, then fetch.
    Again,
}

async fn follow(p: Arc<Partition>, leader: String, cancel: CancellationToken) {
    let mut health = Health {
        last_ok: Instant::now(),
        last_report: None,
        gone_since: None,
        leader,
    };
    loop {
        if !truncate(&p, &mut health, &cancel).await {
            return;
        }
        match fetch_loop(&p, &mut health, &cancel).await {
            RoundEnd::Stop => return,
            RoundEnd::Again => continue,
        }
    }
}

/// Tracks the leader's reachability and reports it when it is gone.
struct Health {
    last_ok: Instant,
    last_report: Option<Instant>,
    /// Since when no server has listened on the leader's subjects.
    gone_since: Option<Instant>,
    leader: String,
}

impl Health {
    fn ok(&mut self) {
        self.last_ok = Instant::now();
        self.last_report = None;
        self.gone_since = None;
    }

    /// After a failed request; `gone`: nobody listens on the subject.
    fn failed_with(&mut self, p: &Partition, gone: bool) {
        if gone {
            self.gone_since.get_or_insert_with(Instant::now);
        } else {
            self.gone_since = None;
        }
        self.failed(p);
    }

    /// After a failure: reports the leader when it has been unreachable
    /// for the leader timeout, or absent from the NATS cluster for the
    /// fetch timeout (and again every such period while it lasts).
    fn failed(&mut self, p: &Partition) {
        let gone = self
            .gone_since
            .is_some_and(|t| t.elapsed() >= p.ctx.fetch_timeout);
        let timeout = if gone {
            p.ctx.fetch_timeout.min(p.ctx.leader_timeout)
        } else {
            p.ctx.leader_timeout
        };
        if self.last_ok.elapsed() < timeout && !gone {
            return;
        }
        if self.last_report.is_some_and(|t| t.elapsed() < timeout) {
            return;
        }
        if p.rebuilding.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::debug!(stream = %p.stream, partition = p.id, "leader unreachable, but this copy is still being rebuilt: not reporting it");
            return;
        }
        self.last_report = Some(Instant::now());
        let Some(meta) = p.ctx.meta.clone() else {
            return;
        };
        let cmd = MetaCommand::ReportLeader {
            name: p.stream.clone(),
            partition: p.id,
            leader: self.leader.clone(),
            leader_epoch: p.leader_epoch(),
            reporter: p.ctx.me.clone(),
        };
        let (stream, id, leader) = (p.stream.clone(), p.id, self.leader.clone());
        tracing::warn!(%stream, partition = id, %leader, "partition leader unreachable; reporting it");
        tokio::spawn(async move {
            match meta.propose(cmd).await {
                Ok(r) => {
                    if let Err(e) = r.into_result() {
                        tracing::debug!(%stream, partition = id, error = %e, "leader report refused");
                    }
                }
                Err(e) => {
                    tracing::warn!(%stream, partition = id, error = %e, "reporting the partition leader")
                }
            }
        });
    }
}

/// A request to the leader that gives up when the partition stops
/// (`None`), so stopping never waits for a fetch timeout.
async fn request(
    p: &Partition,
    subject: &str,
    body: bytes::Bytes,
    cancel: &CancellationToken,
) -> Option<Result<crate::nats::handle::LocalMsg, NatsError>> {
    tokio::select! {
        _ = cancel.cancelled() => None,
        r = p.nats().request(subject, body, p.ctx.fetch_timeout) => Some(r),
    }
}

/// Sleeps `d` unless cancelled; false when cancelled.
async fn pause(d: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// Step 1: truncates the log to where it agrees with the leader's. False
/// when the partition stops.
async fn truncate(p: &Arc<Partition>, health: &mut Health, cancel: &CancellationToken) -> bool {
    let epochs = p.log().leader_epochs();
    let Some(&(latest, _)) = epochs.last() else {
        return true; // an empty log agrees with every leader
    };
    let subject = subjects::offset(&p.ctx.namespace, &p.stream, p.id);
    let body = rw::encode_epoch_request(&pb::LeaderEpochOffsetRequest {
        leader_epoch: latest,
    });
    loop {
        if cancel.is_cancelled() {
            return false;
        }
        let Some(sent) = request(p, &subject, body.clone(), cancel).await else {
            return false;
        };
        let gone = matches!(sent, Err(NatsError::NoResponders));
        let answer = sent
            .ok()
            .and_then(|m| rw::decode_epoch_response(&m.payload).ok())
            .filter(|r| r.leader_epoch == p.leader_epoch());
        let Some(r) = answer else {
            health.failed_with(p, gone);
            if !pause(RETRY, cancel).await {
                return false;
            }
            continue;
        };
        health.ok();
        let leo = p.log().log_end_offset();
        let target = truncation_target(&epochs, latest, &r, leo);
        if target < leo {
            tracing::info!(
                stream = %p.stream,
                partition = p.id,
                from = leo,
                to = target,
                "truncating to the leader's log"
            );
            if let Err(e) = p.log().truncate(target).await {
                if matches!(e, StoreError::Closed(_)) {
                    return false;
                }
                tracing::error!(stream = %p.stream, partition = p.id, error = %e, "truncating");
                if !pause(RETRY, cancel).await {
                    return false;
                }
                continue;
            }
        }
        return true;
    }
}

/// Where this replica's log stops agreeing with the leader's: the leader
/// answered the largest epoch it has ≤ ours (`r.epoch`) and where that
/// epoch ends in its log. If it is our latest epoch, we agree up to that
/// end; if older, also only up to where our next epoch starts.
pub fn truncation_target(
    epochs: &[(u64, u64)],
    latest: u64,
    r: &pb::LeaderEpochOffsetResponse,
    leo: u64,
) -> u64 {
    let end = r.end_offset.max(0) as u64;
    let target = if r.epoch == latest as i64 {
        end
    } else {
        let next_start = epochs
            .iter()
            .find(|(e, _)| (*e as i64) > r.epoch)
            .map_or(leo, |(_, s)| *s);
        end.min(next_start)
    };
    target.min(leo)
}

/// Step 2: fetches until the partition stops or a round must start over.
async fn fetch_loop(
    p: &Arc<Partition>,
    health: &mut Health,
    cancel: &CancellationToken,
) -> RoundEnd {
    let subject = subjects::replicate(&p.ctx.namespace, &p.stream, p.id);
    let epoch = p.leader_epoch();
    // Where to fetch from: past the batch being written, if any.
    let mut next = p.log().log_end_offset();
    let mut writing: Option<Writing> = None;
    // How long the leader may hold a fetch: as long as an idle follower
    // would sleep, and well inside the request's timeout.
    let hold_ms = p.ctx.idle_wait.min(p.ctx.fetch_timeout / 2).as_millis() as u32;
    // The leader's high watermark as last answered.
    let mut known_hw = -1;
    loop {
        if cancel.is_cancelled() {
            return RoundEnd::Stop;
        }
        let leo = next;
        // Held at the leader only when this fetch reports everything
        // received as written (a batch written on this thread already
        // counts); otherwise the next one must report it.
        let written = p.log().log_end_offset();
        let wait_ms = if written >= leo { hold_ms } else { 0 };
        let body = rw::encode_fetch(&pb::ReplicationRequest {
            replica_id: p.ctx.me.clone(),
            offset: leo as i64,
            leader_epoch: epoch,
            written: written as i64,
            wait_ms,
            hw: known_hw,
        });
        let mut gone = false;
        let Some(sent) = request(p, &subject, body, cancel).await else {
            return RoundEnd::Stop;
        };
        let answer = match sent {
            Ok(m) => match rw::decode_response(m.payload.clone()) {
                Ok(r) => Ok(r),
                Err(e) => match rw::decode_epoch_response(&m.payload) {
                    // The leader has less than this replica: truncate to
                    // its end and fetch from there.
                    Ok(end) if end.leader_epoch == epoch => {
                        if let Err(e) = finish(p, writing.take()).await {
                            return e;
                        }
                        let leo = p.log().log_end_offset();
                        let to = end.end_offset.max(0) as u64;
                        if to < leo {
                            tracing::info!(stream = %p.stream, partition = p.id, from = leo, to, "leader has less than this replica; truncating");
                            match p.log().truncate(to).await {
                                Ok(()) => {}
                                Err(StoreError::Closed(_)) => return RoundEnd::Stop,
                                Err(e) => {
                                    tracing::error!(stream = %p.stream, partition = p.id, error = %e, "truncating");
                                    return RoundEnd::Again;
                                }
                            }
                        }
                        health.ok();
                        next = p.log().log_end_offset();
                        continue;
                    }
                    _ => Err(e.to_string()),
                },
            },
            Err(NatsError::Stopped) => return RoundEnd::Stop,
            Err(e) => {
                gone = matches!(e, NatsError::NoResponders);
                Err(e.to_string())
            }
        };
        let r = match answer {
            Ok(r) if r.leader_epoch == epoch => r,
            other => {
                if let Err(e) = other {
                    tracing::trace!(stream = %p.stream, partition = p.id, error = %e, "fetch failed");
                }
                health.failed_with(p, gone);
                if !pause(RETRY, cancel).await {
                    return RoundEnd::Stop;
                }
                continue;
            }
        };
        health.ok();
        let mut records = Vec::with_capacity(r.records.len());
        for (offset, bytes) in r.records {
            if offset < leo {
                continue;
            }
            match codec::decode(offset, bytes) {
                Ok(rec) => records.push(rec),
                Err(e) => {
                    tracing::warn!(stream = %p.stream, partition = p.id, offset, error = %e, "undecodable record from the leader");
                    return finish(p, writing.take())
                        .await
                        .err()
                        .unwrap_or(RoundEnd::Again);
                }
            }
        }
        let got = !records.is_empty();
        if got {
            // At most one batch in flight: the previous one first.
            if let Err(e) = finish(p, writing.take()).await {
                return e;
            }
            next = records.last().map_or(next, |r| r.offset + 1);
            // The write overlaps with the next fetch, which reports what
            // is written by then. The batch is queued here (and, under
            // `interval` with an idle writer, already in the journal when
            // `append_replicated` returns), so the next fetch reports it
            // instead of the one after.
            writing = Some(tokio::spawn(p.log().append_replicated(records)));
        }
        known_hw = r.hw;
        let hw_end = (r.hw + 1).max(0) as u64;
        p.follower_committed(hw_end);
        if p.log().log_end_offset() >= hw_end
            && p.rebuilding
                .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::info!(stream = %p.stream, partition = p.id, "rebuilt copy reached the leader's commit point");
        }
        if !got {
            if writing.is_some() {
                // Caught up: once the last batch is written, say so at once.
                if let Err(e) = finish(p, writing.take()).await {
                    return e;
                }
                continue;
            }
            if r.held {
                // The leader held this fetch until now: the next one is
                // held as well, no notification needed.
                continue;
            }
            tokio::select! {
                _ = cancel.cancelled() => return RoundEnd::Stop,
                _ = p.wake.notified() => {}
                _ = tokio::time::sleep(p.ctx.idle_wait) => {}
            }
        }
    }
}

/// A replicated batch being written.
type Writing = tokio::task::JoinHandle<Result<crate::store::AppendResult, StoreError>>;

/// Waits for the batch being written, if any. `Err` says how the round
/// ends when the write failed.
async fn finish(p: &Partition, writing: Option<Writing>) -> Result<(), RoundEnd> {
    let Some(w) = writing else {
        return Ok(());
    };
    match w.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(StoreError::Closed(_))) => Err(RoundEnd::Stop),
        Ok(Err(e)) => {
            tracing::warn!(stream = %p.stream, partition = p.id, error = %e, "appending replicated records");
            tokio::time::sleep(RETRY).await;
            Err(RoundEnd::Again)
        }
        Err(e) => {
            tracing::warn!(stream = %p.stream, partition = p.id, error = %e, "replicated append task");
            Err(RoundEnd::Again)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(epoch: i64, end: i64) -> pb::LeaderEpochOffsetResponse {
        pb::LeaderEpochOffsetResponse {
            end_offset: end,
            leader_epoch: 9,
            epoch,
        }
    }

    #[test]
    fn truncation_targets() {
        // Same latest epoch: agree up to where it ends at the leader.
        assert_eq!(
            truncation_target(&[(0, 0), (1, 40)], 1, &answer(1, 55), 60),
            55
        );
        // Leader has more of it: nothing to remove.
        assert_eq!(
            truncation_target(&[(0, 0), (1, 40)], 1, &answer(1, 70), 60),
            60
        );
        // Our epoch 1 is unknown to the leader (it has 0 up to 50): our
        // epoch-1 records from 45 diverge.
        assert_eq!(
            truncation_target(&[(0, 0), (1, 45)], 1, &answer(0, 50), 48),
            45
        );
        // The leader has no epoch ≤ ours: nothing agrees past its start.
        assert_eq!(truncation_target(&[(1, 0)], 1, &answer(-1, 0), 10), 0);
    }
}
