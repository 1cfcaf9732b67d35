//! Publish use cases: to a stream partition, to a subject, and the
//! PublishAsync session.
//!
//! A publish is wrapped in a Liftbridge envelope and published into NATS on
//! the partition's subject, exactly as any client would, so the
//! stenographer records it. When the caller waits for the ack, the envelope
//! names an inbox of the service's shared ack inbox ([`super::acks`]); a
//! caller that supplied its own ack inbox is waited for on that inbox (a
//! subscription of its own, as it is not ours to route).
//!
//! A publish to a partition led here skips NATS when nobody could tell
//! ([`Partition::hand_over`]: the stenographer's subscription is the
//! subject's sole interest). A unary Publish is handed over one at a
//! time (concurrent calls go through NATS, where the stenographer batches
//! them) and only while every message already delivered to the
//! stenographer has entered the log, so it never overtakes an earlier
//! publish of its client (AckPolicy NONE returns before its message is
//! stored) still on its way through NATS.
//!
//! A PublishAsync session skips NATS the same way: consecutive
//! publishes to a partition led here are held and handed to it together
//! ([`Partition::hand_over`]), which takes them only while its
//! stenographer's subscription is the subject's sole interest. A partition
//! a session has once published into NATS keeps getting its publishes that
//! way for the rest of the session, so a hand-over never overtakes a
//! publish still on its way to the stenographer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::acks::{AckSession, AckSink, AckWait};
use super::{Service, ServiceError};
use crate::partition::{Behind, Closed, Partition, Queued};
use crate::wire::{envelope, Ack, AckError, AckPolicy, Message};

/// Most publishes a session holds for one hand-over.
const MAX_HELD: usize = 1024;

/// A message to publish to a stream partition.
#[derive(Debug, Clone, Default)]
pub struct Publish {
    /// Stream name.
    pub stream: String,
    /// Partition id.
    pub partition: i32,
    /// Optional key (empty = none).
    pub key: Bytes,
    /// The payload.
    pub value: Bytes,
    /// Headers carried in the envelope.
    pub headers: HashMap<String, Bytes>,
    /// Where the ack goes (empty: the service's own inbox when waiting).
    pub ack_inbox: String,
    /// Echoed in the ack.
    pub correlation_id: String,
    /// When the ack is sent (NONE: never).
    pub ack_policy: AckPolicy,
    /// Optimistic concurrency control: the offset the message must get
    /// (-1 = any).
    pub expected_offset: i64,
}

/// A message to publish to a NATS subject (recorded by whatever streams
/// attach to it).
#[derive(Debug, Clone, Default)]
pub struct PublishToSubject {
    /// The literal subject.
    pub subject: String,
    /// Optional key (empty = none).
    pub key: Bytes,
    /// The payload.
    pub value: Bytes,
    /// Headers carried in the envelope.
    pub headers: HashMap<String, Bytes>,
    /// Where the ack goes (empty: the service's own inbox when waiting).
    pub ack_inbox: String,
    /// Echoed in the ack.
    pub correlation_id: String,
    /// When the ack is sent (NONE: never).
    pub ack_policy: AckPolicy,
}

/// A PublishAsync session: its requests share one inbox of the service's
/// ack inbox; their acks go to the sink it was opened with, in arrival
/// order, until it is dropped. Publishes it holds for a hand-over are
/// published by [`Service::flush_session`], which the caller runs whenever
/// it would wait (for the client, for room in its window) and at the end.
pub struct PublishSession {
    acks: AckSession,
    /// Consecutive publishes to `held_to`, not handed over yet.
    held: Vec<Message>,
    held_to: Option<Arc<Partition>>,
    /// Partitions (stream, id) this session has published into NATS.
    over_nats: Vec<(String, i32)>,
    /// Held publishes that failed, for [`PublishSession::take_failed`].
    failed: Vec<Unpublished>,
}

impl PublishSession {
    /// The inbox acked requests of this session carry.
    pub fn inbox(&self) -> &str {
        &self.acks.inbox
    }

    /// The held publishes that could not be published after all (each
    /// owes its client an error in place of its ack).
    pub fn take_failed(&mut self) -> Vec<Unpublished> {
        std::mem::take(&mut self.failed)
    }

    /// Whether this session has published into NATS to partition `id` of
    /// `stream` (and so keeps doing so).
    fn over_nats(&self, stream: &str, id: i32) -> bool {
        self.over_nats.iter().any(|(s, i)| *i == id && s == stream)
    }

    /// From now on the session publishes to that partition over NATS.
    fn mark_over_nats(&mut self, stream: &str, id: i32) {
        if !self.over_nats(stream, id) {
            self.over_nats.push((stream.to_string(), id));
        }
    }
}

/// A publish of a session that could not be published after all.
#[derive(Debug)]
pub struct Unpublished {
    /// Its correlation id.
    pub correlation_id: String,
    /// Whether it asked for an ack (which will not come).
    pub acked: bool,
    /// Why.
    pub error: ServiceError,
}

/// Why `p` cannot store messages now, if its log met an I/O failure (see
/// [`Service::write_refusal`]).
fn refusal(p: &Partition) -> Option<ServiceError> {
    let fault = p.log().fault()?;
    let m = format!(
        "partition {} of stream {} cannot store messages: {}",
        p.id, p.stream, fault.reason
    );
    Some(if fault.no_space {
        ServiceError::ResourceExhausted(m)
    } else {
        ServiceError::Internal(m)
    })
}

/// A failed resume as the caller sees it: as is for Publish, INTERNAL
/// "failed to resume stream: …" in a PublishAsync session (Liftbridge's
/// publishLoop reports it with code INTERNAL whatever the cause).
fn resume_failed(e: ServiceError, in_session: bool) -> ServiceError {
    if in_session {
        ServiceError::Internal(format!("failed to resume stream: {e}"))
    } else {
        e
    }
}

impl Service {
    /// Why a partition of `stream` led here cannot store messages now (its
    /// log met an I/O failure and retries on its own): RESOURCE_EXHAUSTED
    /// for a full device, INTERNAL otherwise, with the OS error in the
    /// message. `partition` `None`: any partition of the stream.
    pub fn write_refusal(&self, stream: &str, partition: Option<i32>) -> Option<ServiceError> {
        // The publish path asks for one partition: a map lookup, no scan.
        let parts = match partition {
            Some(id) => self.inner.parts.get(stream, id).into_iter().collect(),
            None => self.inner.parts.replicas(),
        };
        parts
            .iter()
            .filter(|p| p.stream == stream && p.is_leader())
            .find_map(|p| refusal(p))
    }

    /// [`Service::write_refusal`] for an error ack of `stream` (acks do
    /// not name the partition).
    pub fn write_failure(&self, stream: &str) -> Option<ServiceError> {
        self.write_refusal(stream, None)
    }

    /// Publishes to a stream partition and, when `wait` is given (and the
    /// policy is not NONE), waits that long for the ack. An ack that
    /// reports an error is an error here (as gRPC Publish reports it).
    pub async fn publish(
        &self,
        r: Publish,
        wait: Option<Duration>,
    ) -> Result<Option<Ack>, ServiceError> {
        let r_partition = r.partition;
        let ack = self.publish_one(r, wait).await?;
        if let Some(a) = &ack {
            match AckError::try_from(a.ack_error).unwrap_or(AckError::Unknown) {
                AckError::Ok => {}
                AckError::TooLarge => {
                    return Err(ServiceError::InvalidArgument(
                        "BAD_REQUEST: message too large".into(),
                    ))
                }
                AckError::IncorrectOffset => {
                    return Err(ServiceError::Unknown("incorrect expected offset".into()))
                }
                // The leader could not write it: say why when it is here.
                AckError::Unknown => {
                    return Err(self
                        .write_refusal(&a.stream, Some(r_partition))
                        .unwrap_or_else(|| {
                            ServiceError::Internal(
                                "the partition leader could not store the message".into(),
                            )
                        }))
                }
                other => return Err(ServiceError::Internal(format!("ack error {other:?}"))),
            }
        }
        Ok(ack)
    }

    /// The shared publish path: validate, resume, envelope, publish into
    /// NATS, and wait for the ack when `wait` is given. Ack errors are
    /// returned in the ack.
    pub(super) async fn publish_one(
        &self,
        r: Publish,
        wait: Option<Duration>,
    ) -> Result<Option<Ack>, ServiceError> {
        let wait = wait.filter(|_| r.ack_policy != AckPolicy::None);
        let (subject, msg, local) = self.prepare_publish(r, false).await?;
        let to = self.hand_over_target(&subject, &msg, local);
        self.publish_and_wait(&subject, msg, wait, to).await
    }

    /// The partition led here that a publish may be handed to, if any (it
    /// still decides whether it takes it): `local`, the partition running
    /// here as leader, when the publish could go into NATS as it is.
    fn hand_over_target(
        &self,
        subject: &str,
        msg: &Message,
        local: Option<Arc<Partition>>,
    ) -> Option<Arc<Partition>> {
        local.filter(|_| {
            crate::nats::subject::is_valid_literal_subject(subject)
                && envelope::message_len(msg) <= self.inner.nats.max_payload()
        })
    }

    /// Validates a publish, resumes its partition if paused and builds its
    /// envelope's message; returns it with the subject it goes to and the
    /// partition running here as its leader, if it does. In a
    /// PublishAsync session (`in_session`) a failed resume is INTERNAL
    /// "failed to resume stream: …", as Liftbridge reports it there;
    /// Publish returns the resume error as is.
    async fn prepare_publish(
        &self,
        r: Publish,
        in_session: bool,
    ) -> Result<(String, Message, Option<Arc<Partition>>), ServiceError> {
        if r.stream.is_empty() {
            return Err(ServiceError::InvalidArgument("No stream provided".into()));
        }
        let state = self.state();
        let s = self.stream_partition(&state, &r.stream, r.partition)?;
        if s.partition(r.partition).is_some_and(|p| p.readonly) {
            return Err(ServiceError::FailedPrecondition(
                "Partition is readonly".into(),
            ));
        }
        let occ = self.inner.parts.defaults().occ(s);
        if occ && r.ack_policy == AckPolicy::None {
            return Err(ServiceError::InvalidArgument(
                "BAD_REQUEST: optimistic concurrency control requires an ack policy other than NONE".into(),
            ));
        }
        // Before any wait for the partition to start: a failed one will not.
        self.check_not_failed(s, r.partition)?;
        // Looked up once per publish: the partition running here as leader.
        let mut local = self.inner.parts.get(&r.stream, r.partition);
        // A log led here that cannot write now refuses at once (it retries
        // on its own and accepts writes again when it can).
        if let Some(e) = local.as_deref().and_then(refusal) {
            return Err(e);
        }
        // Running here and not paused: nothing to resume or wait for.
        let paused = s.partition(r.partition).is_some_and(|p| p.paused);
        if local.is_none() || paused {
            // Boxed: a rare path, kept out of every publish's future.
            if let Err(e) = Box::pin(self.ensure_resumed(s, r.partition)).await {
                return Err(resume_failed(e, in_session));
            }
            local = self.inner.parts.get(&r.stream, r.partition);
        }
        let subject = s.partition_subject(r.partition);
        // The envelope names the stream and the subject it is published
        // on, as Liftbridge's server-built envelopes do.
        let msg = Message {
            stream: r.stream,
            subject: subject.clone(),
            offset: r.expected_offset,
            key: r.key,
            value: r.value,
            headers: r.headers,
            ack_inbox: r.ack_inbox,
            correlation_id: r.correlation_id,
            ack_policy: r.ack_policy as i32,
            ..Default::default()
        };
        Ok((subject, msg, local))
    }

    /// Publishes to a literal subject and, when `wait` is given (and the
    /// policy is not NONE), waits that long for the ack.
    pub async fn publish_to_subject(
        &self,
        r: PublishToSubject,
        wait: Option<Duration>,
    ) -> Result<Option<Ack>, ServiceError> {
        if r.subject.is_empty() || !crate::nats::subject::is_valid_literal_subject(&r.subject) {
            return Err(ServiceError::InvalidArgument("Invalid subject".into()));
        }
        let wait = wait.filter(|_| r.ack_policy != AckPolicy::None);
        // No expected offset: the field stays 0, as Liftbridge leaves it
        // (an OCC stream recording this subject checks it against 0).
        let msg = Message {
            subject: r.subject.clone(),
            offset: 0,
            key: r.key,
            value: r.value,
            headers: r.headers,
            ack_inbox: r.ack_inbox,
            correlation_id: r.correlation_id,
            ack_policy: r.ack_policy as i32,
            ..Default::default()
        };
        self.publish_and_wait(&r.subject, msg, wait, None).await
    }

    /// Starts a PublishAsync session on the shared ack inbox: its acks go
    /// to `sink` where they are delivered (it must not block or publish).
    pub fn publish_session(&self, sink: AckSink) -> Result<PublishSession, ServiceError> {
        Ok(PublishSession {
            acks: self.inner.acks.session(sink)?,
            held: Vec::new(),
            held_to: None,
            over_nats: Vec::new(),
            failed: Vec::new(),
        })
    }

    /// Publishes one request of a session without waiting for its ack
    /// (which arrives on the session's queue). Ack errors come in the ack.
    /// A publish to a partition led here may be held for a hand-over (see
    /// the module documentation); held publishes that fail later are
    /// reported by [`PublishSession::take_failed`].
    pub async fn publish_in_session(
        &self,
        s: &mut PublishSession,
        r: Publish,
    ) -> Result<(), ServiceError> {
        let partition = r.partition;
        let (subject, msg, local) = self.prepare_publish(r, true).await?;
        let to = (!s.over_nats(&msg.stream, partition))
            .then(|| self.hand_over_target(&subject, &msg, local))
            .flatten();
        if let Some(p) = to {
            if s.held_to.as_ref().is_some_and(|h| !Arc::ptr_eq(h, &p)) {
                self.flush_session(s).await;
            }
            s.held_to = Some(p);
            s.held.push(msg);
            if s.held.len() >= MAX_HELD {
                self.flush_session(s).await;
            }
            return Ok(());
        }
        // Whatever is held goes first: it was sent first.
        self.flush_session(s).await;
        s.mark_over_nats(&msg.stream, partition);
        self.publish_and_wait(&subject, msg, None, None)
            .await
            .map(|_| ())
    }

    /// Publishes whatever the session holds: handed over to its partition,
    /// or published into NATS when the partition does not take it (those
    /// that fail are reported by [`PublishSession::take_failed`]).
    pub async fn flush_session(&self, s: &mut PublishSession) {
        let Some(p) = s.held_to.take() else {
            return;
        };
        let held = std::mem::take(&mut s.held);
        let Err(back) = p.hand_over(held, Behind::Nothing).await else {
            return;
        };
        // From now on this partition gets the session's publishes over NATS.
        s.mark_over_nats(&p.stream, p.id);
        for msg in back {
            let acked = msg.ack_policy != AckPolicy::None as i32;
            let correlation_id = msg.correlation_id.clone();
            if let Err(error) = self.publish_and_wait(&p.subject, msg, None, None).await {
                s.failed.push(Unpublished {
                    correlation_id,
                    acked,
                    error,
                });
            }
        }
    }

    /// Publishes `msg` (handed over to `to` when it takes it) and, when
    /// `wait` is given, waits that long for its ack.
    async fn publish_and_wait(
        &self,
        subject: &str,
        mut msg: Message,
        wait: Option<Duration>,
        to: Option<Arc<Partition>>,
    ) -> Result<Option<Ack>, ServiceError> {
        let Some(wait) = wait else {
            self.send(subject, msg, to).await?;
            return Ok(None);
        };
        if !msg.ack_inbox.is_empty() {
            // Boxed: a rare path, kept out of every publish's future.
            return Box::pin(self.publish_and_wait_on(subject, msg, wait)).await;
        }
        // Registered before publishing so the ack cannot be missed; the
        // registration is removed when `waiter` is dropped, however this
        // call ends.
        let waiter: AckWait = self.inner.acks.wait_one()?;
        msg.ack_inbox = waiter.inbox.clone();
        let _call = to.as_ref().map(|p| p.unary_call());
        let closed = to.as_ref().map(|p| p.closed_watch());
        let taken = self.send(subject, msg, to).await?;
        let ack = async {
            let recv = waiter.recv();
            tokio::pin!(recv);
            let Some(mut closed) = closed else {
                return Ok(recv.await);
            };
            tokio::select! {
                biased;
                ack = &mut recv => Ok(ack),
                // The partition stopped here (deleted, paused, failed, led
                // elsewhere now, or the node is shutting down): no ack can
                // come from it, so the call ends now rather than at its
                // deadline (and does not hold up the node's shutdown). An
                // ack it sent as it stopped is still taken. A publish it
                // refused went through NATS instead, where whatever records
                // the subject next (this partition reopened, say) acks it:
                // only the node's shutdown ends that wait early.
                why = stopped(&mut closed, taken) => match tokio::time::timeout(ACK_GRACE, recv).await {
                    Ok(Some(ack)) => Ok(Some(ack)),
                    _ => Err(why),
                },
            }
        };
        match tokio::time::timeout(wait, ack).await {
            Ok(Ok(Some(ack))) => Ok(Some(ack)),
            Ok(Ok(None)) => Err(ServiceError::Internal("server shutting down".into())),
            Ok(Err(why)) => Err(unacknowledged(why)),
            Err(_) => Err(ServiceError::Timeout("timed out waiting for ack".into())),
        }
    }

    /// Hands one publish over to `to` when it takes it, and publishes it
    /// into NATS otherwise: at once when no other call waits for an ack
    /// there ([`Partition::alone`]); otherwise queued and handed over with
    /// the publishes queued with it, by one flusher task at a time
    /// ([`Partition::queue_one`], [`Service::flush_queued`]).
    ///
    /// True when `to` took it (handed over or queued there), false when it
    /// went into NATS.
    async fn send(
        &self,
        subject: &str,
        msg: Message,
        to: Option<Arc<Partition>>,
    ) -> Result<bool, ServiceError> {
        let msg = match to {
            Some(p) if p.alone() => match p.hand_over_one(msg).await {
                Ok(()) => return Ok(true),
                Err(back) => back,
            },
            Some(p) => match p.queue_one(msg) {
                Queued::Taken => return Ok(true),
                Queued::Flush => {
                    self.flush_queued(p, subject.to_string());
                    return Ok(true);
                }
                Queued::Refused(msg) => *msg,
            },
            None => msg,
        };
        // Boxed: publishes this node does not lead, kept out of the
        // futures of those it does.
        Box::pin(self.publish_enveloped(subject, &msg)).await?;
        Ok(false)
    }

    /// Publishes `msg`'s envelope on `subject` (paced by the recorders it
    /// reaches).
    async fn publish_enveloped(&self, subject: &str, msg: &Message) -> Result<(), ServiceError> {
        let payload = envelope::encode_message(msg);
        self.inner
            .nats
            .publish_paced(subject, None, None, payload)
            .await?;
        Ok(())
    }

    /// Starts the flusher of `p`'s queued unary publishes. It first lets
    /// the tasks ready to run (other calls on the same connection, decoded
    /// together) queue theirs, then hands over what is queued, and repeats
    /// until it finds the queue empty. What the partition refuses goes into
    /// NATS, in order; if that fails (the node is shutting down) the
    /// callers' waits for their acks end as they would without an ack.
    fn flush_queued(&self, p: Arc<Partition>, subject: String) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut guard = FlushGuard { p, done: false };
            loop {
                tokio::task::yield_now().await;
                let Some(batch) = guard.p.take_queued() else {
                    break;
                };
                let Err(back) = guard.p.hand_over(batch, Behind::Delivered).await else {
                    continue;
                };
                for m in back {
                    if let Err(e) = me.publish_enveloped(&subject, &m).await {
                        tracing::debug!(subject = %subject, error = %e, "queued publish not sent");
                    }
                }
            }
            guard.done = true;
        });
    }

    /// Waits on an ack inbox the caller chose (not routed by us).
    async fn publish_and_wait_on(
        &self,
        subject: &str,
        msg: Message,
        wait: Duration,
    ) -> Result<Option<Ack>, ServiceError> {
        // Subscribe before publishing so the ack cannot be missed.
        let mut sub = self.inner.nats.subscribe(&msg.ack_inbox, None)?;
        self.publish_enveloped(subject, &msg).await?;
        let got = tokio::time::timeout(wait, async {
            while let Some(m) = sub.next().await {
                if let Ok(ack) = envelope::decode_ack(&m.payload) {
                    return Some(ack);
                }
            }
            None
        })
        .await;
        match got {
            Ok(Some(ack)) => Ok(Some(ack)),
            Ok(None) => Err(ServiceError::Internal("server shutting down".into())),
            Err(_) => Err(ServiceError::Timeout("timed out waiting for ack".into())),
        }
    }
}

/// How long a call whose partition stopped still waits for an ack the
/// partition sent as it stopped.
const ACK_GRACE: Duration = Duration::from_millis(100);

/// Resolves with the reason once the partition behind `closed` has stopped
/// — for any reason when `any`, else only for the node's shutdown (never if
/// it is gone without saying why).
async fn stopped(closed: &mut tokio::sync::watch::Receiver<Option<Closed>>, any: bool) -> Closed {
    super::watch_until(closed, |c| c.is_some_and(|c| any || c == Closed::Shutdown))
        .await
        .unwrap_or(Closed::Shutdown)
}

/// The error of a call whose partition stopped before its publish was
/// acknowledged. Whether the publish is committed is unknown, as after a
/// timeout.
fn unacknowledged(why: Closed) -> ServiceError {
    let m = |what: &str| format!("{what} before the publish was acknowledged");
    match why {
        Closed::Shutdown => ServiceError::Internal("server shutting down".into()),
        Closed::Moved => ServiceError::Unavailable(m("partition leader changed")),
        Closed::Deleted => ServiceError::NotFound(m("stream deleted")),
        Closed::Paused => ServiceError::FailedPrecondition(m("partition paused")),
        Closed::Failed => {
            ServiceError::FailedPrecondition(m("partition failed (its log is damaged)"))
        }
    }
}

/// Ends a flusher that stops early (its task aborted as the runtime
/// shuts down, or a panic): the queue it held is dropped, so its callers'
/// waits end without an ack, and the next publish starts a new flusher.
struct FlushGuard {
    p: Arc<Partition>,
    done: bool,
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        if !self.done {
            self.p.abandon_queued();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_resume_is_internal_only_in_a_session() {
        let e = || ServiceError::NotFound("partition does not exist".into());
        assert!(matches!(
            resume_failed(e(), true),
            ServiceError::Internal(m) if m == "failed to resume stream: partition does not exist"
        ));
        assert!(matches!(
            resume_failed(e(), false),
            ServiceError::NotFound(_)
        ));
        // Whatever the cause, a session reports INTERNAL.
        let pre = ServiceError::FailedPrecondition("x".into());
        assert!(matches!(
            resume_failed(pre, true),
            ServiceError::Internal(_)
        ));
    }
}
