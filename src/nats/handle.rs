//! The in-process NATS client used by the log layer (no TCP, no parsing).
//!
//! A [`LocalClient`] is a pseudo-connection registered with the server:
//! its publishes go through the same matching and delivery code as a TCP
//! client's, and TCP clients' messages reach its subscriptions. Dropping a
//! [`LocalSubscription`] unsubscribes it.
//!
//! # Bounded queues and what happens when one is full
//!
//! Every [`LocalSubscription`] queue is bounded in bytes (subject, reply,
//! headers and payload of the queued messages plus a fixed 160 bytes per
//! message for the queue entry, so that the figure is the memory held) by
//! `nats.recorder.max.pending`
//! (default [`DEFAULT_LOCAL_MAX_PENDING`], 32 MiB). The limit is per
//! subscription, not per node: a per-node budget would let one hot
//! partition stall the publishers of every other partition, while per
//! subscription each partition's backlog is bounded and only the
//! publishers of a slow partition are slowed. 32 MiB holds about a
//! twentieth of a second of the store's pace (~130 MB/s as charged for
//! 100-byte messages), enough to absorb bursts, while a flooded partition
//! stays well inside a 256 MB node: a recorder's queue stalls its
//! publishers at 24 MiB and its stenographer keeps at most 16 MiB more in
//! flight to the store. Two policies:
//!
//! - **Recorders** ([`LocalClient::subscribe_recorder`], the stream
//!   partitions' subjects): nothing is ever dropped. Once the queue holds
//!   more than 75 % of the limit, the connection that delivered the
//!   message stops reading before its next operation until the
//!   stenographer brings the queue back under 75 %, as for a slow TCP
//!   receiver. Who stalls: TCP and WebSocket clients (for as long as the
//!   queue is over the mark: TCP flow control then slows the publisher;
//!   the wait ends if the connection or the subscription ends), routes and
//!   leaf connections (while the recorder makes progress; one that took
//!   nothing for 2.5 s is not waited for, since the same connection
//!   carries Raft and replication traffic; the message stays queued). The
//!   queue thus exceeds the mark by at most one message per stalled
//!   producer. In-process publishers never stall inside `publish` (acks,
//!   replication answers, notifications, activity, cursors are published
//!   from tasks that may be the very consumer of the full queue: waiting
//!   there could deadlock); the gRPC publish path, which is not such a
//!   task, waits after publishing with [`LocalClient::publish_paced`].
//! - **Internal request subjects** ([`LocalClient::subscribe`]: replication
//!   `<ns>.<stream>.<p>.replicate` and `.offset`, `<ns>.notify.<server>`,
//!   Raft RPC, control requests, ack and request inboxes): a message that
//!   does not fit under the limit is dropped, counted (`/varz`,
//!   `/metrics`) and reported by a warning at most every 10 s; its
//!   requester times out and retries. Stalling there is not safe: these
//!   are published by the node itself, often from the task that drains
//!   another of these queues.
//!
//! In a cluster the in-process client is a client like any other: its
//! subscriptions are announced to routes (`RS+`) and its publishes and
//! requests reach subscribers on other servers; replies come back over the
//! routes to its inbox subscription.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use std::collections::HashMap;

use tokio::sync::{mpsc, oneshot};

use super::client::{
    self, ClientKind, ClientShared, FlushList, FullPolicy, InlineHandler, LocalQueue, LocalSink,
    MsgRef, Origin, StallBound, Subscription,
};
use super::server::{NatsError, ServerInner};
use super::subject::{is_valid_literal_subject, is_valid_subject};

/// Default byte limit of each in-process subscription queue
/// (`nats.recorder.max.pending`).
pub const DEFAULT_LOCAL_MAX_PENDING: usize = 32 * 1024 * 1024;

/// A message received by an in-process subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalMsg {
    /// The subject it was published on.
    pub subject: Bytes,
    /// Reply subject, if the publisher set one.
    pub reply: Option<Bytes>,
    /// The complete header block (`NATS/1.0\r\n…\r\n\r\n`), if any.
    pub headers: Option<Bytes>,
    /// The payload.
    pub payload: Bytes,
}

impl LocalMsg {
    /// The bytes this message counts for in its subscription's queue:
    /// subject, reply, headers and payload plus the fixed cost of a queue
    /// entry (`client::LOCAL_MSG_OVERHEAD`).
    pub fn charge(&self) -> u64 {
        client::local_charge(
            self.subject.len(),
            self.reply.as_ref().map_or(0, |r| r.len()),
            self.headers.as_ref().map_or(0, |h| h.len()) + self.payload.len(),
        )
    }
}

/// Requests waiting for their reply, by reply token.
type PendingReplies = Arc<parking_lot::Mutex<HashMap<String, oneshot::Sender<LocalMsg>>>>;

struct LocalInner {
    server: Arc<ServerInner>,
    client: Arc<ClientShared>,
    next_sid: AtomicU64,
    inbox_prefix: String,
    /// Reply routing for `request`: one wildcard subscription per client
    /// (`<prefix>.r.*`) instead of a subscribe/unsubscribe per request, so
    /// requests do not churn the sublist and connections' match caches.
    replies: parking_lot::Mutex<Option<PendingReplies>>,
}

impl Drop for LocalInner {
    fn drop(&mut self) {
        self.server.remove_client(&self.client);
    }
}

/// An in-process client. Cheap to clone; the pseudo-connection goes away
/// when the last clone is dropped.
#[derive(Clone)]
pub struct LocalClient {
    inner: Arc<LocalInner>,
}

impl LocalClient {
    pub(crate) fn new(server: Arc<ServerInner>, name: &str) -> LocalClient {
        let account = server.local_account.clone();
        LocalClient::new_in(server, name, account)
    }

    /// An in-process client of `account` (the system account's services
    /// use this; the log's clients use `nats.account`).
    pub(crate) fn new_in(
        server: Arc<ServerInner>,
        name: &str,
        account: Arc<super::account::Account>,
    ) -> LocalClient {
        let id = server.next_client_id();
        let client = ClientShared::new(id, ClientKind::Local, None, usize::MAX);
        if !account.is_global() {
            // A fresh client: the cell is empty, so this cannot fail.
            let _ = client.account.set(account);
        }
        client.meta.lock().name = name.to_string();
        client.meta.lock().lang = "rust-local".to_string();
        server.clients.lock().insert(id, client.clone());
        let nonce: u64 = rand::random();
        LocalClient {
            inner: Arc::new(LocalInner {
                server,
                client,
                next_sid: AtomicU64::new(1),
                inbox_prefix: format!("_INBOX.{nonce:016x}{id:x}"),
                replies: parking_lot::Mutex::new(None),
            }),
        }
    }

    /// Publishes a message. `headers` is a complete NATS header block
    /// (`NATS/1.0\r\n…\r\n\r\n`).
    pub fn publish(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: Option<Bytes>,
        payload: Bytes,
    ) -> Result<(), NatsError> {
        self.publish_counted(subject, reply, headers, payload)
            .map(|_| ())
    }

    /// Publishes, then waits while a recorder queue that took the message
    /// is over its mark (see the module doc). Only for callers that are
    /// not themselves the consumer of a recorder queue (the gRPC publish
    /// path); the message is never dropped.
    pub async fn publish_paced(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: Option<Bytes>,
        payload: Bytes,
    ) -> Result<(), NatsError> {
        let mut stalled = Vec::new();
        self.publish_inner(subject, reply, headers, payload, Some(&mut stalled))?;
        for s in stalled {
            client::wait_local_drained(&s, StallBound::Client, &self.inner.client.cancel).await;
        }
        Ok(())
    }

    fn publish_counted(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: Option<Bytes>,
        payload: Bytes,
    ) -> Result<usize, NatsError> {
        self.publish_inner(subject, reply, headers, payload, None)
    }

    /// The largest payload (headers included) a publish may carry now.
    pub fn max_payload(&self) -> usize {
        self.inner.server.max_payload.load(Ordering::Relaxed)
    }

    /// Publishes; with `stalled`, collects the recorder subscriptions whose
    /// queue is over its mark (without, nobody waits for them).
    fn publish_inner(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: Option<Bytes>,
        payload: Bytes,
        stalled: Option<&mut Vec<Arc<Subscription>>>,
    ) -> Result<usize, NatsError> {
        let server = &self.inner.server;
        if !is_valid_literal_subject(subject) {
            return Err(NatsError::InvalidSubject(subject.to_string()));
        }
        if let Some(r) = reply {
            if !is_valid_literal_subject(r) {
                return Err(NatsError::InvalidSubject(r.to_string()));
            }
        }
        let size = headers.as_ref().map_or(0, |h| h.len()) + payload.len();
        if size > server.max_payload.load(Ordering::Relaxed) {
            return Err(NatsError::MaxPayload);
        }
        let account = server.account_of(&self.inner.client);
        let result = account.sublist.match_subject(subject);
        let subject_b = Bytes::copy_from_slice(subject.as_bytes());
        let reply_b = reply.map(|r| Bytes::copy_from_slice(r.as_bytes()));
        let msg = MsgRef {
            subject: &subject_b,
            reply: reply_b.as_ref(),
            headers: headers.as_ref(),
            payload: &payload,
        };
        let mut flush = FlushList::new();
        let mut n = super::account::deliver_in(
            server,
            account,
            &self.inner.client,
            true,
            &msg,
            &result,
            &mut flush,
            Origin::Client,
        );
        // External mode: the message also goes to the external system,
        // where its subscribers (or a request's responders) may be.
        if let Some(b) = server.external.get() {
            n += usize::from(b.outbound(&msg));
        }
        flush.flush();
        flush.count_routed(server);
        if let Some(st) = stalled {
            *st = flush.take_local_stalled();
        }
        let tally = std::mem::take(&mut flush.tally);
        let c = &self.inner.client.stats;
        c.in_msgs.fetch_add(1, Ordering::Relaxed);
        c.in_bytes.fetch_add(size as u64, Ordering::Relaxed);
        let s = &server.stats;
        s.in_msgs.fetch_add(1, Ordering::Relaxed);
        s.in_bytes.fetch_add(size as u64, Ordering::Relaxed);
        s.out_msgs.fetch_add(tally.msgs, Ordering::Relaxed);
        s.out_bytes.fetch_add(tally.bytes, Ordering::Relaxed);
        Ok(n)
    }

    /// Subscribes to an internal request subject (wildcards allowed),
    /// optionally in a queue group: a message that finds the queue full is
    /// dropped and counted (see the module doc).
    pub fn subscribe(
        &self,
        subject: &str,
        queue: Option<&str>,
    ) -> Result<LocalSubscription, NatsError> {
        self.subscribe_with(subject, queue, FullPolicy::Drop)
    }

    /// Subscribes a recorder (a stream partition's subject): nothing is
    /// dropped; the publishers that fill its queue stall (see the module
    /// doc).
    pub fn subscribe_recorder(
        &self,
        subject: &str,
        queue: Option<&str>,
    ) -> Result<LocalSubscription, NatsError> {
        self.subscribe_with(subject, queue, FullPolicy::Stall)
    }

    /// Subscribes with a handler that takes each message where it is
    /// delivered — on the publisher's task, with no queue and no task hop —
    /// for consumers whose work per message is a few map lookups (the
    /// service's ack inbox). The handler must not block, wait or publish.
    /// The returned subscription yields no messages; it ends (`next`
    /// returns `None`) when the server removes it, and dropping it
    /// unsubscribes.
    pub fn subscribe_inline(
        &self,
        subject: &str,
        handler: InlineHandler,
    ) -> Result<LocalSubscription, NatsError> {
        self.subscribe_sink(subject, None, FullPolicy::Drop, Some(handler))
    }

    fn subscribe_with(
        &self,
        subject: &str,
        queue: Option<&str>,
        policy: FullPolicy,
    ) -> Result<LocalSubscription, NatsError> {
        self.subscribe_sink(subject, queue, policy, None)
    }

    fn subscribe_sink(
        &self,
        subject: &str,
        queue: Option<&str>,
        policy: FullPolicy,
        inline: Option<InlineHandler>,
    ) -> Result<LocalSubscription, NatsError> {
        if !is_valid_subject(subject) {
            return Err(NatsError::InvalidSubject(subject.to_string()));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let server = &self.inner.server;
        let pending = LocalQueue::new(
            subject,
            policy,
            server.opts.local_max_pending as u64,
            server.local_totals.clone(),
        );
        let sid = self.inner.next_sid.fetch_add(1, Ordering::Relaxed);
        let sub = Subscription::new(
            subject.to_string(),
            queue.map(str::to_string),
            Bytes::from(sid.to_string()),
            self.inner.client.clone(),
            Some(LocalSink {
                tx,
                q: pending.clone(),
                inline,
            }),
        );
        self.inner
            .server
            .add_subscription(&sub)
            .map_err(|_| NatsError::InvalidSubject(subject.to_string()))?;
        self.inner
            .client
            .subs
            .lock()
            .insert(sub.sid.clone(), sub.clone());
        Ok(LocalSubscription {
            rx,
            pending,
            sub: Arc::downgrade(&sub),
            subject: subject.to_string(),
            server: self.inner.server.clone(),
        })
    }

    /// A fresh unique inbox subject.
    pub fn new_inbox(&self) -> String {
        let n: u64 = rand::random();
        format!("{}.{n:016x}", self.inner.inbox_prefix)
    }

    /// Publishes `payload` with a fresh inbox as reply subject and waits for
    /// the first reply.
    pub async fn request(
        &self,
        subject: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<LocalMsg, NatsError> {
        let pending = self.reply_router()?;
        let token = format!("{:016x}", rand::random::<u64>());
        let reply = format!("{}.r.{token}", self.inner.inbox_prefix);
        let (tx, rx) = oneshot::channel();
        pending.lock().insert(token.clone(), tx);
        let sent = self.publish_counted(subject, Some(&reply), None, payload);
        let result = match sent {
            Err(e) => Err(e),
            Ok(0) => Err(NatsError::NoResponders),
            Ok(_) => match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(m)) => Ok(m),
                Ok(Err(_)) => Err(NatsError::Stopped),
                Err(_) => Err(NatsError::Timeout),
            },
        };
        pending.lock().remove(&token);
        result
    }

    /// The reply map, creating the wildcard reply subscription and its
    /// routing task on first use.
    fn reply_router(&self) -> Result<PendingReplies, NatsError> {
        let mut guard = self.inner.replies.lock();
        if let Some(p) = guard.as_ref() {
            return Ok(p.clone());
        }
        let mut sub = self.subscribe(&format!("{}.r.*", self.inner.inbox_prefix), None)?;
        let pending: PendingReplies = Arc::default();
        let routes = pending.clone();
        // Ends when the subscription ends (client dropped, server stopped).
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                let token = m
                    .subject
                    .rsplit(|&b| b == b'.')
                    .next()
                    .and_then(|t| std::str::from_utf8(t).ok())
                    .map(str::to_string);
                if let Some(tx) = token.and_then(|t| routes.lock().remove(&t)) {
                    let _ = tx.send(m);
                }
            }
            routes.lock().clear();
        });
        *guard = Some(pending.clone());
        Ok(pending)
    }

    /// The pseudo-connection's client id (as shown in `/connz`).
    pub fn client_id(&self) -> u64 {
        self.inner.client.id
    }
}

/// An in-process subscription; unsubscribes when dropped.
pub struct LocalSubscription {
    rx: mpsc::UnboundedReceiver<LocalMsg>,
    pending: Arc<LocalQueue>,
    /// Weak so that removal from the server (shutdown) drops the sender
    /// and ends the stream.
    sub: std::sync::Weak<Subscription>,
    subject: String,
    server: Arc<ServerInner>,
}

/// Tells whether one in-process subscription is the only interest in a
/// subject (see [`LocalSubscription::sole_interest`]); it does not keep
/// the subscription alive.
pub struct SoleInterest {
    server: Arc<ServerInner>,
    sub: std::sync::Weak<Subscription>,
}

impl SoleInterest {
    /// Whether a message published on the literal `subject` in the
    /// subscription's account would reach that subscription and nothing
    /// else: no other subscription (of any connection, route or leaf), no
    /// queue group, no import of another account and no external NATS. A
    /// caller that hands such a message to the subscription's owner itself
    /// saves the publish and loses nothing a NATS client could observe.
    /// False once the subscription is gone.
    pub fn holds(&self, subject: &str) -> bool {
        let Some(sub) = self.sub.upgrade() else {
            return false;
        };
        if self.server.external.get().is_some() {
            return false;
        }
        let account = self.server.sub_account(&sub);
        if account.may_cross(subject) {
            return false;
        }
        let result = account.sublist.match_subject(subject);
        result.qsubs.is_empty() && matches!(&result.psubs[..], [only] if Arc::ptr_eq(only, &sub))
    }
}

impl LocalSubscription {
    /// A probe for whether this subscription alone is interested in a
    /// subject (see [`SoleInterest::holds`]).
    pub fn sole_interest(&self) -> SoleInterest {
        SoleInterest {
            server: self.server.clone(),
            sub: self.sub.clone(),
        }
    }

    /// The next message; `None` once the subscription has ended (server
    /// shut down or auto-unsubscribed).
    pub async fn next(&mut self) -> Option<LocalMsg> {
        let m = self.rx.recv().await?;
        self.account(&m);
        Some(m)
    }

    /// The next message if one is queued.
    pub fn try_next(&mut self) -> Option<LocalMsg> {
        let m = self.rx.try_recv().ok()?;
        self.account(&m);
        Some(m)
    }

    fn account(&self, m: &LocalMsg) {
        self.pending.take(m.charge());
    }

    /// Bytes queued and not yet taken.
    pub fn pending_bytes(&self) -> u64 {
        self.pending.pending_bytes()
    }

    /// The queue's accounting (backlog, stalls, drops), for monitoring.
    pub fn queue(&self) -> Arc<LocalQueue> {
        self.pending.clone()
    }

    /// The subscribed subject.
    pub fn subject(&self) -> &str {
        &self.subject
    }
}

impl Drop for LocalSubscription {
    fn drop(&mut self) {
        self.pending.end();
        if let Some(sub) = self.sub.upgrade() {
            self.server.remove_subscription(&sub);
        }
    }
}
