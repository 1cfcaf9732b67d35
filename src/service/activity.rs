//! The activity stream (`activity.stream.enabled`): the metadata leader
//! publishes one `ActivityStreamEvent` (protobuf, as the message value) on
//! `__activity` for every committed create/delete/pause/resume/readonly of
//! a stream and join/leave of a consumer group, as Liftbridge does.
//!
//! The events come from the replicated metadata (`MetadataState::activity`,
//! the latest [`ACTIVITY_RETAINED`] committed changes with their Raft index,
//! the event id), so a new metadata leader publishes what its predecessor
//! had not: on gaining leadership it reads the id of the newest event
//! already on `__activity` (its local replica) and publishes every retained
//! change after it, in order. Delivery is at least once and in order:
//! a failed publish is retried (1 s doubling up to 10 s, as Liftbridge)
//! and blocks the events behind it.
//!
//! Must not: publish while not the metadata leader, or skip a failed
//! event while leader. Memory: no queue of its own — the retained changes
//! live in the metadata, bounded by `ACTIVITY_RETAINED`.

use std::time::Duration;

use prost::Message as _;

use super::{CreateStream, Publish, Service, ServiceError, ACTIVITY_STREAM};
use crate::api::proto;
use crate::cluster::state::{ActivityRecord, ACTIVITY_RETAINED};
use crate::cluster::MetaCommand;
use crate::wire::AckPolicy;

/// Longest wait between two attempts to publish the same event.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often leadership is re-checked when nothing else happens.
const POLL: Duration = Duration::from_millis(250);
/// How long after start the stream's creation waits for every Raft voter
/// to register as a broker (replication factor -1 means the brokers
/// registered at creation), before creating it with those there are.
const REGISTER_WAIT: Duration = Duration::from_secs(30);

/// Settings of the activity stream (`activity.stream.*`).
#[derive(Debug, Clone)]
pub struct ActivityOptions {
    /// `activity.stream.publish.timeout`.
    pub publish_timeout: Duration,
    /// `activity.stream.publish.ack.policy`.
    pub ack_policy: AckPolicy,
    /// The stream's subject (`<namespace>.activity`).
    pub subject: String,
}

/// The event for a retained change.
pub fn event(r: &ActivityRecord) -> proto::ActivityStreamEvent {
    use proto::ActivityStreamOp as Op;
    let mut e = proto::ActivityStreamEvent {
        id: r.index,
        ..Default::default()
    };
    match &r.command {
        MetaCommand::CreateStream {
            name, partitions, ..
        } => {
            e.op = Op::CreateStream as i32;
            e.create_stream_op = Some(proto::CreateStreamOp {
                stream: name.clone(),
                partitions: (0..*partitions).collect(),
            });
        }
        MetaCommand::DeleteStream { name } => {
            e.op = Op::DeleteStream as i32;
            e.delete_stream_op = Some(proto::DeleteStreamOp {
                stream: name.clone(),
            });
        }
        MetaCommand::PauseStream {
            name,
            partitions,
            resume_all,
            ..
        } => {
            e.op = Op::PauseStream as i32;
            e.pause_stream_op = Some(proto::PauseStreamOp {
                stream: name.clone(),
                partitions: partitions.clone(),
                resume_all: *resume_all,
            });
        }
        MetaCommand::ResumeStream { name, partitions } => {
            e.op = Op::ResumeStream as i32;
            e.resume_stream_op = Some(proto::ResumeStreamOp {
                stream: name.clone(),
                partitions: partitions.clone(),
            });
        }
        MetaCommand::SetStreamReadonly {
            name,
            partitions,
            readonly,
            ..
        } => {
            e.op = Op::SetStreamReadonly as i32;
            e.set_stream_readonly_op = Some(proto::SetStreamReadonlyOp {
                stream: name.clone(),
                partitions: partitions.clone(),
                readonly: *readonly,
            });
        }
        MetaCommand::JoinConsumerGroup {
            group_id,
            consumer_id,
            streams,
            ..
        } => {
            e.op = Op::JoinConsumerGroup as i32;
            e.join_consumer_group_op = Some(proto::JoinConsumerGroupOp {
                group_id: group_id.clone(),
                consumer_id: consumer_id.clone(),
                streams: streams.clone(),
            });
        }
        MetaCommand::LeaveConsumerGroup {
            group_id,
            consumer_id,
            expired,
        } => {
            e.op = Op::LeaveConsumerGroup as i32;
            e.leave_consumer_group_op = Some(proto::LeaveConsumerGroupOp {
                group_id: group_id.clone(),
                consumer_id: consumer_id.clone(),
                expired: *expired,
            });
        }
        _ => {}
    }
    e
}

impl Service {
    /// Runs the activity publisher until the service's metadata shuts
    /// down (the task is aborted by the node on shutdown).
    pub async fn run_activity(self, opts: ActivityOptions) {
        let mut watch = self.inner.meta.watch();
        // The id of the last event known to be on the stream while this
        // node leads; `None` when not leading (re-read on gaining it).
        let mut last: Option<u64> = None;
        let started = tokio::time::Instant::now();
        loop {
            if self.inner.meta.is_leader() {
                if last.is_none() {
                    let patient = started.elapsed() < REGISTER_WAIT;
                    match self.activity_start(&opts, patient).await {
                        Ok(l) => last = Some(l),
                        Err(e) => tracing::debug!(error = %e, "activity stream not ready"),
                    }
                }
                if let Some(l) = last.as_mut() {
                    self.publish_pending(&opts, l).await;
                }
            } else {
                last = None;
            }
            // A new commit or, for leadership changes, the poll.
            let _ = tokio::time::timeout(POLL, watch.changed()).await;
        }
    }

    /// Creates `__activity` if needed and returns the id of its newest
    /// event (0 when empty). While `patient`, the stream is created only
    /// once every Raft voter is a registered broker, so that every server
    /// holds a copy.
    async fn activity_start(
        &self,
        opts: &ActivityOptions,
        patient: bool,
    ) -> Result<u64, ServiceError> {
        if self.state().stream(ACTIVITY_STREAM).is_none() {
            let state = self.state();
            let unregistered = self
                .inner
                .meta
                .members()
                .iter()
                .filter(|m| m.voter && !state.brokers.contains_key(&m.node.id))
                .count();
            if patient && unregistered > 0 {
                return Err(ServiceError::Unknown(format!(
                    "waiting for {unregistered} server(s) to register before creating {ACTIVITY_STREAM}"
                )));
            }
            let req = CreateStream {
                name: ACTIVITY_STREAM.into(),
                subject: opts.subject.clone(),
                replication_factor: -1,
                partitions: 1,
                ..Default::default()
            };
            match self.create_stream(req, true).await {
                Ok(()) | Err(ServiceError::AlreadyExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let state = self.state();
        let replica_here = state
            .stream(ACTIVITY_STREAM)
            .and_then(|s| s.partition(0))
            .is_some_and(|p| p.replicas.iter().any(|r| r == self.server_id()));
        if !replica_here {
            // A node that joined after the stream was created holds no
            // copy to read the newest event from: it publishes from the
            // next change on (events its predecessor left unpublished are
            // missed).
            let latest = state.activity.back().map_or(0, |r| r.index);
            tracing::warn!(
                after = latest,
                "no local copy of __activity; publishing activity events from the next change"
            );
            return Ok(latest);
        }
        let p = self
            .inner
            .parts
            .wait_for_replica(ACTIVITY_STREAM, 0, super::START_WAIT)
            .await
            .ok_or_else(|| ServiceError::Internal("activity stream not running here".into()))?;
        let Some(newest) = p.newest_committed() else {
            return Ok(0);
        };
        let recs = p
            .log()
            .read(newest, 1, usize::MAX)
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))?;
        Ok(recs
            .first()
            .and_then(|r| proto::ActivityStreamEvent::decode(r.value.clone()).ok())
            .map_or(0, |e| e.id))
    }

    /// Publishes the retained changes after `last`, in order, each retried
    /// until it is published or this node stops leading.
    async fn publish_pending(&self, opts: &ActivityOptions, last: &mut u64) {
        let pending: Vec<ActivityRecord> = self
            .state()
            .activity
            .iter()
            .filter(|r| r.index > *last)
            .cloned()
            .collect();
        if let (Some(first), true) = (pending.first(), *last > 0) {
            let oldest = self.state().activity.front().map_or(0, |r| r.index);
            if first.index == oldest && oldest > *last + 1 && pending.len() >= ACTIVITY_RETAINED {
                tracing::warn!(
                    from = *last + 1,
                    to = oldest - 1,
                    "activity events older than the retained ones were never published"
                );
            }
        }
        for r in pending {
            let value = event(&r).encode_to_vec();
            let mut backoff = Duration::ZERO;
            loop {
                if !self.inner.meta.is_leader() {
                    return;
                }
                match self.publish_activity(opts, value.clone()).await {
                    Ok(()) => break,
                    Err(e) => {
                        backoff = if backoff.is_zero() {
                            Duration::from_secs(1)
                        } else {
                            (backoff * 2).min(MAX_BACKOFF)
                        };
                        tracing::error!(id = r.index, error = %e, retry_in = ?backoff, "failed to publish activity event");
                        tokio::time::sleep(backoff).await;
                    }
                }
            }
            tracing::debug!(id = r.index, "published activity event");
            *last = r.index;
        }
    }

    async fn publish_activity(
        &self,
        opts: &ActivityOptions,
        value: Vec<u8>,
    ) -> Result<(), ServiceError> {
        let req = Publish {
            stream: ACTIVITY_STREAM.into(),
            partition: 0,
            key: Default::default(),
            value: value.into(),
            headers: Default::default(),
            ack_inbox: String::new(),
            correlation_id: String::new(),
            ack_policy: opts.ack_policy,
            expected_offset: -1,
        };
        let wait = (opts.ack_policy != AckPolicy::None).then_some(opts.publish_timeout);
        tokio::time::timeout(opts.publish_timeout, self.publish(req, wait))
            .await
            .map_err(|_| ServiceError::Timeout("activity publish timed out".into()))??;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_the_raft_index_and_liftbridge_fields() {
        let e = event(&ActivityRecord {
            index: 7,
            command: MetaCommand::CreateStream {
                name: "s".into(),
                subject: "s".into(),
                group: String::new(),
                replication_factor: 1,
                partitions: 3,
                config: Default::default(),
                creation_timestamp_ns: 0,
            },
        });
        assert_eq!(e.id, 7);
        assert_eq!(e.op, proto::ActivityStreamOp::CreateStream as i32);
        assert_eq!(e.create_stream_op.unwrap().partitions, vec![0, 1, 2]);
        let e = event(&ActivityRecord {
            index: 9,
            command: MetaCommand::LeaveConsumerGroup {
                group_id: "g".into(),
                consumer_id: "c".into(),
                expired: true,
            },
        });
        assert_eq!(e.op, proto::ActivityStreamOp::LeaveConsumerGroup as i32);
        let l = e.leave_consumer_group_op.unwrap();
        assert!(l.expired);
        assert_eq!((l.group_id.as_str(), l.consumer_id.as_str()), ("g", "c"));
    }
}
