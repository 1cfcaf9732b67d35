//! The subscribe use case: check the request against the metadata (group
//! assignment, leadership, paused), resolve the positions and start a
//! partition reader.
//!
//! The reader runs as its own task and hands out one store read per item on
//! a small bounded channel ([`Subscription::batches`]); it ends when the
//! subscriber drops the channel or the partition stops.

use tokio::sync::mpsc;

use super::{Service, ServiceError, START_WAIT};
use crate::partition::reader::{self, Batch, ReadEnd, StartPosition, StopPosition};

/// Store reads buffered per subscription: a few keep the stream busy while
/// the reader fetches the next (each holds up to 512 records).
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
    /// Set when a consumer group member subscribes.
    pub consumer: Option<ConsumerRef>,
}

/// A running subscription.
pub struct Subscription {
    /// One item per store read, then the reason the subscription ended.
    pub batches: mpsc::Receiver<Result<Batch, ReadEnd>>,
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
        if let Some(c) = &r.consumer {
            // A group member may only read what is assigned to it, under the
            // current group epoch.
            let g = state
                .group(&c.group_id)
                .ok_or_else(|| ServiceError::NotFound("No such consumer group".into()))?;
            if g.epoch != c.group_epoch {
                return Err(ServiceError::FailedPrecondition(
                    "Consumer group epoch is stale".into(),
                ));
            }
            let assigned = g
                .assignments(&state)
                .get(&c.consumer_id)
                .and_then(|a| a.get(&r.stream))
                .is_some_and(|ps| ps.contains(&r.partition));
            if !assigned {
                return Err(ServiceError::FailedPrecondition(
                    "Partition not assigned to this consumer".into(),
                ));
            }
        }
        let s = match state.stream(&r.stream) {
            Some(s) if s.partition(r.partition).is_some() => s.clone(),
            _ => return Err(ServiceError::NotFound("No such partition".into())),
        };
        let pm = s.partition(r.partition).cloned().unwrap_or_default();
        if pm.leader != self.inner.parts.server_id() {
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
        let p = self
            .inner
            .parts
            .wait_for(&r.stream, r.partition, START_WAIT)
            .await
            .ok_or_else(|| {
                ServiceError::FailedPrecondition("Server not partition leader".into())
            })?;
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
        let (tx, rx) = mpsc::channel(BATCHES_BUFFERED);
        if r.reverse {
            tokio::spawn(reader::run_reverse(p, start, stop, tx));
        } else {
            tokio::spawn(reader::run(p, start, stop, tx));
        }
        Ok(Subscription { batches: rx })
    }
}
