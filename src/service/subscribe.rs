//! The subscribe use case: check the request against the metadata
//! (leadership, paused), resolve the positions and start a partition
//! reader.
//!
//! Consumer-group members follow Liftbridge's rule: one member of a group
//! reads a partition at a time; a new member's subscription replaces (and
//! closes) the previous one unless that one holds a newer group epoch, in
//! which case the new one is refused. Assignments themselves are not
//! checked here (the member asked the coordinator for them).
//!
//! The reader runs as its own task and hands out one store read per item on
//! a small channel ([`Subscription::batches`]) whose contents are bounded in
//! bytes by the subscription's [`reader::Budget`] (each delivery holds its
//! credit until the consumer drops it); it ends when the subscriber drops
//! the channel or the partition stops.

use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Service, ServiceError, START_WAIT};
use crate::partition::reader::{
    self, Batch, Budget, Delivery, ReadEnd, StartPosition, StopPosition,
};

/// Items queued per subscription. The bound that matters is in bytes (the
/// reader's budget: two reads' worth); this only has to hold those reads
/// and the final end-of-subscription item without making the reader wait.
const BATCHES_BUFFERED: usize = 4;

/// A consumer group member subscribing to an assigned partition.
#[derive(Debug, Clone, Default)]
pub struct ConsumerRef {
    /// The group.
    pub group_id: String,
    /// The group epoch the member's assignments are from.
    pub group_epoch: u64,
    /// The member.
    pub consumer_id: String,
}

/// A subscription to start.
#[derive(Debug, Clone)]
pub struct SubscribeRequest {
    /// Stream name.
    pub stream: String,
    /// Partition id.
    pub partition: i32,
    /// Where to start.
    pub start: StartPosition,
    /// Where to stop.
    pub stop: StopPosition,
    /// Resume a paused partition instead of failing.
    pub resume: bool,
    /// Read from the start position down to the oldest message.
    pub reverse: bool,
    /// Read from this node's copy when it is an in-sync follower (up to
    /// the high watermark it knows), instead of requiring the leader.
    pub read_isr_replica: bool,
    /// Set when a consumer group member subscribes.
    pub consumer: Option<ConsumerRef>,
}

/// (stream, partition, group) of a group member's subscription.
type GroupKey = (String, i32, String);

/// The group member subscribed to a partition here.
pub(super) struct GroupSub {
    /// The member.
    consumer_id: String,
    /// The group epoch it subscribed under.
    epoch: u64,
    /// Tells this subscription from the one that replaces it.
    id: u64,
    /// Closes the subscription when another member replaces it.
    cancel: CancellationToken,
}

/// A running subscription.
pub struct Subscription {
    /// One item per store read, then the reason the subscription ended.
    /// A delivery holds part of the subscription's byte budget until it is
    /// dropped: drop it once its records are handed on.
    pub batches: mpsc::Receiver<Result<Delivery, ReadEnd>>,
}

impl Service {
    /// Starts a subscription; errors are for requests that cannot start.
    pub async fn subscribe(&self, r: SubscribeRequest) -> Result<Subscription, ServiceError> {
        if r.consumer
            .as_ref()
            .is_some_and(|c| c.consumer_id.is_empty())
        {
            return Err(ServiceError::InvalidArgument(
                "Consumer id cannot be empty when group id is provided".into(),
            ));
        }
        let state = self.state();
        let group_key = r
            .consumer
            .as_ref()
            .map(|c| (r.stream.clone(), r.partition, c.group_id.clone()));
        if let (Some(key), Some(c)) = (&group_key, &r.consumer) {
            self.check_group_fence(key, c.group_epoch)?;
        }
        let s = match state.stream(&r.stream) {
            Some(s) if s.partition(r.partition).is_some() => s.clone(),
            _ => return Err(ServiceError::NotFound("No such partition".into())),
        };
        let pm = s.partition(r.partition).cloned().unwrap_or_default();
        let me = self.inner.parts.server_id();
        // A paused partition is refused (or resumed) below, on a follower
        // as on the leader.
        let from_follower = pm.leader != me && r.read_isr_replica && pm.isr.iter().any(|x| x == me);
        if pm.leader != me && !from_follower {
            return Err(ServiceError::FailedPrecondition(
                "Server not partition leader".into(),
            ));
        }
        if pm.paused {
            if !r.resume {
                return Err(ServiceError::FailedPrecondition(
                    "Partition is paused".into(),
                ));
            }
            self.ensure_resumed(&s, r.partition).await?;
        }
        self.check_not_failed(&s, r.partition)?;
        let p = if from_follower {
            self.inner
                .parts
                .wait_for_replica(&r.stream, r.partition, START_WAIT)
                .await
        } else {
            self.inner
                .parts
                .wait_for(&r.stream, r.partition, START_WAIT)
                .await
        }
        .ok_or_else(|| ServiceError::FailedPrecondition("Server not partition leader".into()))?;
        let start = reader::resolve_start(&p, r.start).await?;
        let mut stop = reader::resolve_stop(&p, r.stop).await?;
        // A readonly partition ends at its newest message: -1 when empty,
        // which is before any start (Liftbridge's rule, in either
        // direction).
        let stop_offset = match stop {
            Some(st) => Some(st as i64),
            None if p.is_readonly() => Some(p.newest_committed().map_or(-1, |n| n as i64)),
            None => None,
        };
        if let Some(st) = stop_offset {
            if st < start as i64 {
                return Err(ServiceError::InvalidArgument(format!(
                    "Stop offset is before start offset: {st} < {start}"
                )));
            }
            stop = Some(st as u64);
        }
        if r.reverse && p.newest_committed().is_none() {
            // Liftbridge cannot open a reverse reader on an empty log.
            return Err(ServiceError::Internal(
                "Failed to create stream reader: segment not found".into(),
            ));
        }
        let (tx, mut rx) = mpsc::channel(BATCHES_BUFFERED);
        let budget = Budget::new();
        let read = async move {
            if r.reverse {
                reader::run_reverse(p, start, stop, budget, tx).await
            } else {
                reader::run(p, start, stop, budget, tx).await
            }
        };
        if let Some(mk) = self.inner.parts.defaults().encryption_key(&s) {
            // Values are stored sealed: open them between the reader and
            // the subscriber (a small second queue; the deliveries keep
            // their credit, so the byte bound covers both queues).
            let (dtx, drx) = mpsc::channel(BATCHES_BUFFERED);
            let mut raw = rx;
            tokio::spawn(async move {
                while let Some(item) = raw.recv().await {
                    let item = item.and_then(|batch| open_batch(&mk, batch));
                    let end = item.is_err();
                    if dtx.send(item).await.is_err() || end {
                        break;
                    }
                }
            });
            rx = drx;
        }
        let (Some(key), Some(c)) = (group_key, r.consumer) else {
            tokio::spawn(read);
            return Ok(Subscription { batches: rx });
        };
        // A group member: replace (and close) the member subscribed here
        // before, unless it holds a newer epoch; the reader ends when it is
        // replaced in turn, and only then leaves the map if it is still the
        // one registered.
        let cancel = CancellationToken::new();
        let id = self.register_group_sub(&key, &c, cancel.clone())?;
        let inner = self.inner.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = read => {}
                _ = cancel.cancelled() => {}
            }
            let mut subs = inner.group_subs.lock();
            if subs.get(&key).is_some_and(|g| g.id == id) {
                subs.remove(&key);
            }
        });
        Ok(Subscription { batches: rx })
    }

    /// Liftbridge's only check on a group member's subscription: another
    /// member of the same group subscribed to this partition with a newer
    /// epoch fences it (FAILED_PRECONDITION).
    fn check_group_fence(&self, key: &GroupKey, epoch: u64) -> Result<(), ServiceError> {
        match self.inner.group_subs.lock().get(key) {
            Some(g) if g.epoch > epoch => Err(ServiceError::FailedPrecondition(
                "Consumer is not currently assigned this partition".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Registers a group member's subscription, closing the one it
    /// replaces; checks the fence again under the lock (another member may
    /// have subscribed since the first check). Returns the new entry's id.
    fn register_group_sub(
        &self,
        key: &GroupKey,
        c: &ConsumerRef,
        cancel: CancellationToken,
    ) -> Result<u64, ServiceError> {
        let id = self.inner.next_sub_id.fetch_add(1, Ordering::Relaxed);
        let mut subs = self.inner.group_subs.lock();
        if let Some(prev) = subs.get(key) {
            if prev.epoch > c.group_epoch {
                return Err(ServiceError::FailedPrecondition(
                    "Consumer is not currently assigned this partition".into(),
                ));
            }
            tracing::debug!(stream = %key.0, partition = key.1, group = %key.2, from = %prev.consumer_id, to = %c.consumer_id, "replacing group subscriber");
            prev.cancel.cancel();
        }
        subs.insert(
            key.clone(),
            GroupSub {
                consumer_id: c.consumer_id.clone(),
                epoch: c.group_epoch,
                id,
                cancel,
            },
        );
        Ok(id)
    }
}

/// Decrypts the values of a batch read from an encrypted partition; a
/// value that does not open ends the subscription (FAILED_PRECONDITION).
fn open_batch(mk: &crate::crypt::MasterKey, mut d: Delivery) -> Result<Delivery, ReadEnd> {
    let batch: &mut Batch = &mut d.records;
    for r in batch.iter_mut() {
        match mk.open(&r.value) {
            Ok(v) => r.value = v.into(),
            Err(e) => {
                tracing::error!(offset = r.offset, error = %e, "stored value does not decrypt");
                return Err(ReadEnd::Failed);
            }
        }
    }
    Ok(d)
}
