//! One partition replicated on this node: its log, its role (leader or
//! follower), its stenographer when it leads, and its state.
//!
//! A `Partition` has one role for its whole life: when the metadata gives
//! the node another role or another leader epoch, the manager stops it and
//! opens a new one on the same files. As leader it records (below) and
//! serves its followers (`fetch_server`); as follower it copies the
//! leader's log (`follower`). Replication state (who has what, the ISR,
//! the ALL acks waiting for a commit) is `replication::IsrState`.
//!
//! The stenographer is a task that owns an in-process NATS subscription on
//! the partition subject (a queue subscription when the stream has a group)
//! and records every message that arrives. It drains whatever is queued into
//! one `append` per batch, so the store's group commit sees large batches
//! under load and single messages when idle. Enveloped publishes (magic
//! `B9 0E 43 B4`, type 0) carry key, headers and ack instructions; anything
//! else is stored as a raw value with the NATS headers it came with. Acks
//! (envelope type 1) are published to the ack inbox by the store's writer
//! thread as soon as the batch is in the journal — under `store.sync:
//! interval`, when the writer is idle, by the stenographer's own thread,
//! which then wrote the journal itself: on one node that is both
//! "leader wrote it" and "all replicas have it" (with `sync = always` only
//! after the journal's fdatasync).
//!
//! A publish made through this node's API need not take the detour through
//! NATS: while the stenographer runs, its subscription alone would receive
//! the message and the stream has no OCC, the service hands it over
//! (`Partition::hand_over`) and it enters the log the way the
//! stenographer's batches do, through the partition's `Intake`: staged
//! for followers and queued with the store under one lock, so both see
//! one order, with permits that bound what is queued and not yet
//! answered.
//!
//! Invariants: only the intake appends to the log while the partition is
//! led here, and only while the stenographer runs; the log is closed only
//! after the stenographer has stopped and every append queued through the
//! intake has been answered.
//! Readers never block the stenographer: they read committed data from the
//! store and wait on the partition's committed-end (high watermark) watch,
//! which the leader owns and moves after each append; it is not the store's
//! log end, so replication can hold it back to what the ISR has.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::replication::{IsrState, Staged, WaitingAcks};
use crate::nats::client::LocalQueue;
use crate::nats::handle::{LocalClient, LocalMsg, SoleInterest};
use crate::store::{AppendResult, InlineAppend, NewRecord, PartitionLog, Record, StoreError};
use crate::time::now_ns;
use crate::wire::{envelope, Ack, AckError, AckPolicy, Message};

/// Most messages taken from the subscription queue into one append.
const MAX_BATCH: usize = 4096;
/// Batches whose append is queued but not yet acknowledged, per partition.
const MAX_IN_FLIGHT: usize = 64;
/// Bytes (as the recorder queue charges them) of batches whose append is
/// queued but not yet acknowledged, per partition, at most (less when the
/// recorder queue's limit is smaller). Enough for the writer to find the
/// next group queued while it writes one (a group takes at most 16 MiB;
/// at the store's pace this is over 100 ms of work), while the batches
/// handed over add little to what the recorder queue holds: they are
/// memory too, outside the queue's accounting. Below the store's per-log
/// queue limit (`MAX_QUEUED_BYTES`, 64 MiB of payload), so a recorded batch
/// is never refused for a full queue.
const MAX_IN_FLIGHT_BYTES: u64 = 16 << 20;

/// The way into the log of a partition led here, while its stenographer
/// runs (see the module documentation).
struct Intake {
    /// Cancelled when the stenographer stops: nothing new is handed over.
    cancel: CancellationToken,
    /// Batches queued with the store and not answered yet (MAX_IN_FLIGHT).
    in_flight: Arc<tokio::sync::Semaphore>,
    /// Their bytes, in KiB permits (`budget_kib` in all).
    in_flight_bytes: Arc<tokio::sync::Semaphore>,
    budget_kib: u32,
    /// Whether the stenographer's subscription alone hears the subject.
    sole: SoleInterest,
    /// The subscription's queue: how many messages it was ever given.
    queue: Arc<LocalQueue>,
    /// How many of those the stenographer has finished with (queued with
    /// the store, or refused), counted under `order`. Equal to the queue's
    /// count when no message delivered so far waits to enter the log.
    settled: AtomicU64,
    /// Held while a batch is staged and queued with the store.
    order: Mutex<()>,
}

/// The permits of one queued batch, returned when its append is answered.
type BatchPermits = (
    tokio::sync::OwnedSemaphorePermit,
    tokio::sync::OwnedSemaphorePermit,
);

impl Intake {
    /// Waits for room for a batch of `bytes` (as the recorder queue charges
    /// them); `None` if the semaphores were closed.
    async fn permits(&self, bytes: u64) -> Option<BatchPermits> {
        let kib = u32::try_from(bytes / 1024)
            .unwrap_or(u32::MAX)
            .clamp(1, self.budget_kib);
        let batch = self.in_flight.clone().acquire_owned().await.ok()?;
        let bytes = self
            .in_flight_bytes
            .clone()
            .acquire_many_owned(kib)
            .await
            .ok()?;
        Some((batch, bytes))
    }

    /// Whether every message delivered to the subscription so far has
    /// entered the log's queue (or was refused). Meaningful under `order`.
    fn caught_up(&self) -> bool {
        self.queue.delivered() == self.settled.load(Ordering::SeqCst)
    }

    /// The stenographer is done with `n` more delivered messages.
    fn settle(&self, n: usize) {
        self.settled.fetch_add(n as u64, Ordering::SeqCst);
    }

    /// Waits until every batch queued through this intake is answered.
    async fn drained(&self) {
        let _ = self.in_flight.acquire_many(MAX_IN_FLIGHT as u32).await;
        let _ = self.in_flight_bytes.acquire_many(self.budget_kib).await;
    }
}

/// What a hand-over must not overtake (see [`Partition::hand_over`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behind {
    /// Nothing: the caller knows none of its earlier publishes to the
    /// partition went into NATS.
    Nothing,
    /// Every message delivered to the stenographer's subscription so far.
    Delivered,
}

/// The running stenographer: its task and the intake it feeds.
struct Stenographer {
    intake: Arc<Intake>,
    task: JoinHandle<()>,
}

/// A batch ready to append and the acks it owes once it is written.
struct Recorded {
    records: Vec<NewRecord>,
    pending: Vec<Pending>,
    reception_ns: i64,
    epoch: u64,
}

/// Why a partition stopped being served here; readers map it to a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The stream was deleted (subscribers get NOT_FOUND).
    Deleted,
    /// The partition was paused (subscribers get FAILED_PRECONDITION).
    Paused,
    /// The node is shutting down.
    Shutdown,
    /// The log was found damaged (subscribers get FAILED_PRECONDITION).
    Failed,
    /// This node's role changed (another leader or leader epoch):
    /// subscribers get UNAVAILABLE and resubscribe where the metadata says.
    Moved,
}

/// This node's role for a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// It leads: records, serves fetches, tracks the ISR.
    Leader,
    /// It copies the log of `leader`.
    Follower {
        /// Server id of the leader followed.
        leader: String,
    },
}

/// Takes an ack whose inbox is served in this process and has no other
/// subscriber, in place of a NATS publish; gives the ack back when it must
/// go over NATS. Set by the service above the partitions (see
/// `service::acks`); it must not block or publish.
pub type LocalAcks = Arc<dyn Fn(Ack) -> Option<Ack> + Send + Sync>;

/// Replication settings and identity shared by the partitions of a node.
#[derive(Clone)]
pub struct ReplicaContext {
    /// This server's id.
    pub me: String,
    /// `clustering.namespace` (prefix of the internal subjects).
    pub namespace: String,
    /// For ISR changes and leader reports.
    pub meta: Option<crate::cluster::Metadata>,
    /// `clustering.replica.max.lag.time`.
    pub max_lag: std::time::Duration,
    /// `clustering.replica.max.leader.timeout`.
    pub leader_timeout: std::time::Duration,
    /// `clustering.replica.max.idle.wait`.
    pub idle_wait: std::time::Duration,
    /// `clustering.replica.fetch.timeout`.
    pub fetch_timeout: std::time::Duration,
    /// `clustering.replication.max.bytes`: size of one fetch answer.
    pub max_bytes: usize,
    /// Where acks for this process's own publishers go without NATS, once
    /// the service has set it.
    pub local_acks: Arc<std::sync::OnceLock<LocalAcks>>,
}

impl std::fmt::Debug for ReplicaContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaContext")
            .field("me", &self.me)
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl ReplicaContext {
    /// A context for a node alone (tests, tools): no metadata proposals.
    pub fn standalone(me: &str) -> ReplicaContext {
        ReplicaContext {
            me: me.to_string(),
            namespace: "liftbridge-default".into(),
            meta: None,
            max_lag: std::time::Duration::from_secs(15),
            leader_timeout: std::time::Duration::from_secs(15),
            idle_wait: std::time::Duration::from_secs(10),
            fetch_timeout: std::time::Duration::from_secs(3),
            max_bytes: 1 << 20,
            local_acks: Arc::default(),
        }
    }
}

/// Who replicates a partition, from the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// All replicas, leader included.
    pub replicas: Vec<String>,
    /// In-sync replicas.
    pub isr: Vec<String>,
    /// Fewest in-sync replicas for a commit (`minIsr`).
    pub min_isr: usize,
}

/// Settings of one partition that the stenographer needs.
#[derive(Debug, Clone)]
pub struct PartitionSettings {
    /// Largest NATS payload recorded (`clustering.replication.max.bytes`).
    pub max_bytes: usize,
    /// Optimistic concurrency control: one message per append, checked.
    pub occ: bool,
    /// Leader epoch stamped on appended records (as follower: the leader
    /// epoch followed).
    pub leader_epoch: u64,
    /// Encryption at rest: values are sealed with this master key before
    /// they reach the store (followers copy them sealed).
    pub encrypt: Option<Arc<crate::crypt::MasterKey>>,
}

/// A partition led by this node.
pub struct Partition {
    /// Stream name.
    pub stream: String,
    /// Partition id.
    pub id: i32,
    /// The stream's base subject (`Ack.partitionSubject`).
    pub stream_subject: String,
    /// The NATS subject this partition records.
    pub subject: String,
    /// Creation time of the stream this partition belongs to (tells a
    /// recreated stream of the same name apart).
    pub creation_ns: i64,
    log: PartitionLog,
    settings: Mutex<PartitionSettings>,
    group: String,
    nats: LocalClient,
    /// First and latest reception time of a recorded message (0 = none).
    recv_first: AtomicI64,
    recv_latest: AtomicI64,
    /// Number of active subscribers (auto-pause may wait for none).
    subscribers: AtomicUsize,
    readonly: watch::Sender<bool>,
    closed: watch::Sender<Option<Closed>>,
    /// Set when a read found the log damaged: the manager then stops the
    /// partition and reports it failed (see `PartitionManager`).
    failure: Mutex<Option<String>>,
    /// Committed end: every offset below it is committed (the high
    /// watermark is this minus one). Set by the leader after each append
    /// (on one node the log end; with replicas, what the ISR has), never
    /// moves back; readers deliver only below it and wait on it.
    hw: watch::Sender<u64>,
    steno: Mutex<Option<Stenographer>>,
    /// Leader or follower, for the object's whole life.
    role: Role,
    /// Identity and replication settings of this node.
    pub(super) ctx: ReplicaContext,
    /// As leader: the ISR bookkeeping (`None` as follower).
    isr: Mutex<Option<IsrState>>,
    /// As leader: ALL acks waiting for the committed end.
    waiting: Mutex<WaitingAcks<Pending>>,
    /// As leader of a replicated partition: records queued for the log
    /// but not written yet, which followers may copy already.
    staged: Option<Mutex<Staged<Record>>>,
    /// As follower: woken by the leader's new-data notification.
    pub(super) wake: tokio::sync::Notify,
    /// As leader: wakes the fetch server when fetches are held and there
    /// is new data or a new committed end (see `fetch_server`).
    pub(super) fetch_wake: tokio::sync::Notify,
    /// As leader: how many fetches the fetch server holds.
    pub(super) fetches_held: AtomicUsize,
    /// Replication tasks (fetch server, ISR check, follower loop),
    /// cancelled when the partition stops.
    tasks: Mutex<Vec<(CancellationToken, JoinHandle<()>)>>,
    /// As follower: this copy is being rebuilt from nothing (its files
    /// were lost) and has not reached the leader's commit point yet; until
    /// it has, it must not help elect a leader (it could be chosen with
    /// less than what was committed).
    pub(super) rebuilding: std::sync::atomic::AtomicBool,
    /// Unary publishes waiting to be handed over together (see
    /// [`Partition::queue_one`]).
    unary: Mutex<UnaryQueue>,
    /// Unary calls waiting for their acks here (see
    /// [`Partition::unary_call`]).
    unary_calls: Arc<AtomicUsize>,
    /// Held while a lone unary publish is being handed over (see
    /// [`Partition::hand_over_one`]).
    handing_one: tokio::sync::Mutex<()>,
}

/// A unary call waiting for its ack (see [`Partition::unary_call`]).
pub struct UnaryCall(Arc<AtomicUsize>);

impl Drop for UnaryCall {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Unary publishes queued for one hand-over (see [`Partition::queue_one`]).
#[derive(Default)]
struct UnaryQueue {
    msgs: Vec<Message>,
    bytes: usize,
    /// A flusher is taking the queue (it empties it, and goes on taking
    /// what comes meanwhile, until it finds it empty).
    flushing: bool,
}

/// Most payload bytes of unary publishes queued for one hand-over; a
/// publish that would pass it goes through NATS instead (as one refused
/// by the partition does), where the recorder's queue limits apply.
const UNARY_QUEUE_BYTES: usize = 4 << 20;

/// What [`Partition::queue_one`] did with a publish.
pub enum Queued {
    /// Queued behind a flusher already at work: it hands it over.
    Taken,
    /// Queued, and the caller must start the flusher
    /// ([`Partition::take_queued`] until it returns `None`).
    Flush,
    /// Not queued (the queue is full): the caller publishes it into NATS.
    Refused(Box<Message>),
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("stream", &self.stream)
            .field("id", &self.id)
            .field("subject", &self.subject)
            .finish()
    }
}

/// Per-message bookkeeping kept until its ack is sent.
pub(super) struct Pending {
    ack_inbox: String,
    correlation_id: String,
    ack_policy: i32,
    msg_subject: String,
    expected: i64,
    reception_ns: i64,
    too_large: bool,
}

impl Partition {
    /// Wraps an opened log. The stenographer is not running yet.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        stream: String,
        id: i32,
        stream_subject: String,
        group: String,
        creation_ns: i64,
        log: PartitionLog,
        settings: PartitionSettings,
        readonly: bool,
        nats: LocalClient,
        role: Role,
        membership: Membership,
        ctx: ReplicaContext,
    ) -> Arc<Partition> {
        let subject = if id == 0 {
            stream_subject.clone()
        } else {
            format!("{stream_subject}.{id}")
        };
        // Alone, whatever the log holds was committed. Replicated, what is
        // committed is learnt from the ISR (as leader) or from the leader
        // (as follower): until then, nothing is served past what is known.
        let alone = membership.replicas.len() <= 1;
        let committed_end = if alone { log.log_end_offset() } else { 0 };
        // Retention and compaction stay below the committed end: replicated,
        // nothing is cleaned until this role learns what is committed.
        log.set_compaction_limit(committed_end);
        let staged =
            (!alone && role == Role::Leader).then(|| Mutex::new(Staged::new(log.log_end_offset())));
        let isr = (role == Role::Leader).then(|| {
            IsrState::new(
                &ctx.me,
                &membership.replicas,
                &membership.isr,
                membership.min_isr,
                log.log_end_offset(),
                std::time::Instant::now(),
            )
        });
        Arc::new(Partition {
            stream,
            id,
            stream_subject,
            subject,
            creation_ns,
            log,
            settings: Mutex::new(settings),
            group,
            nats,
            recv_first: AtomicI64::new(0),
            recv_latest: AtomicI64::new(0),
            subscribers: AtomicUsize::new(0),
            readonly: watch::channel(readonly).0,
            hw: watch::channel(committed_end).0,
            closed: watch::channel(None).0,
            failure: Mutex::new(None),
            steno: Mutex::new(None),
            role,
            ctx,
            isr: Mutex::new(isr),
            waiting: Mutex::new(WaitingAcks::default()),
            staged,
            wake: tokio::sync::Notify::new(),
            fetch_wake: tokio::sync::Notify::new(),
            fetches_held: AtomicUsize::new(0),
            tasks: Mutex::new(Vec::new()),
            rebuilding: std::sync::atomic::AtomicBool::new(false),
            unary: Mutex::new(UnaryQueue::default()),
            unary_calls: Arc::new(AtomicUsize::new(0)),
            handing_one: tokio::sync::Mutex::new(()),
        })
    }

    /// This node's role for the partition.
    pub fn role(&self) -> &Role {
        &self.role
    }

    /// Whether this node leads the partition.
    pub fn is_leader(&self) -> bool {
        self.role == Role::Leader
    }

    /// The leader epoch this partition object serves (leader) or follows.
    pub fn leader_epoch(&self) -> u64 {
        self.settings.lock().leader_epoch
    }

    /// Whether the ISR lacks a replica or is below its minimum (leader
    /// only; a follower reports false).
    pub fn under_replicated(&self) -> bool {
        self.isr
            .lock()
            .as_ref()
            .is_some_and(|s| s.under_replicated())
    }

    /// The ISR as this leader applies it (empty as follower).
    pub fn isr(&self) -> Vec<String> {
        self.isr
            .lock()
            .as_ref()
            .map(|s| s.isr().to_vec())
            .unwrap_or_default()
    }

    /// ALL acks waiting for a commit.
    pub fn waiting_acks(&self) -> usize {
        self.waiting.lock().len()
    }

    /// Applies a metadata change of the ISR, replicas or minimum (leader).
    pub fn set_membership(&self, m: &Membership) {
        if let Some(st) = self.isr.lock().as_mut() {
            st.set_membership(&m.replicas, &m.isr, m.min_isr, std::time::Instant::now());
        }
        self.recompute_commit(None, false);
    }

    /// Runs a replication task until the partition stops.
    pub(super) fn spawn_task<F>(
        self: &Arc<Self>,
        f: impl FnOnce(Arc<Partition>, CancellationToken) -> F,
    ) where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let token = CancellationToken::new();
        let handle = tokio::spawn(f(self.clone(), token.clone()));
        self.tasks.lock().push((token, handle));
    }

    /// As leader: a follower fetched at `offset`. Returns whether it may
    /// rejoin the ISR.
    pub(super) fn follower_fetched(&self, replica: &str, offset: u64) -> bool {
        let committed = self.committed_end();
        let outcome = match self.isr.lock().as_mut() {
            Some(st) => st.fetched(replica, offset, committed, std::time::Instant::now()),
            None => return false,
        };
        self.recompute_commit(Some(replica), false);
        outcome.rejoin
    }

    /// As leader: staged records from `from` on (see `Staged`), up to
    /// `max_bytes`, and where staging ends.
    pub(super) fn staged_from(&self, from: u64, max_bytes: usize) -> (Vec<(u64, Record)>, u64) {
        match &self.staged {
            Some(s) => {
                let s = s.lock();
                (s.from(from, max_bytes), s.end())
            }
            None => (Vec::new(), 0),
        }
    }

    /// As leader: where the staged records end (0 when nothing is staged
    /// here).
    pub(super) fn staged_end(&self) -> u64 {
        self.staged.as_ref().map_or(0, |s| s.lock().end())
    }

    /// As leader: a fetch from `replica` is held until there is news for
    /// it, so it needs no notification meanwhile.
    pub(super) fn fetch_held(&self, replica: &str) {
        if let Some(st) = self.isr.lock().as_mut() {
            st.hold(replica);
        }
    }

    /// As leader: there is news for held fetches (new records or a new
    /// committed end). The fence pairs with the fetch server's after it
    /// counts a fetch it holds: either this sees the count or the server
    /// sees the news when it looks again.
    fn wake_held_fetches(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.fetches_held.load(Ordering::Relaxed) > 0 {
            self.fetch_wake.notify_one();
        }
    }

    /// As leader: queues a batch for followers before it is written;
    /// returns nothing (offsets are predicted inside).
    fn stage(&self, epoch: u64, records: &[NewRecord]) {
        let Some(staged) = &self.staged else {
            return;
        };
        staged.lock().queued(records.len(), |first| {
            records
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let rec = Record {
                        offset: first + i as u64,
                        timestamp_ns: r.timestamp_ns,
                        leader_epoch: epoch,
                        key: r.key.clone(),
                        headers: r.headers.clone(),
                        value: r.value.clone(),
                        subject: r.subject.clone(),
                        reply: r.reply.clone(),
                    };
                    (rec, r.encoded_len())
                })
                .collect()
        });
        self.wake_held_fetches();
        self.notify_idle();
    }

    /// Notifies idle followers that there is new data.
    fn notify_idle(&self) {
        let idle = match self.isr.lock().as_mut() {
            Some(st) => st.take_idle_except(None),
            None => Vec::new(),
        };
        for f in idle {
            self.notify_follower(&f);
        }
    }

    /// As leader: its durable log end (what followers may copy).
    pub(super) fn leader_leo(&self) -> u64 {
        self.isr
            .lock()
            .as_ref()
            .map_or_else(|| self.log.log_end_offset(), |s| s.leader_leo())
    }

    /// As leader: ISR followers lagging for longer than `max_lag`.
    pub(super) fn lagging(&self) -> Vec<String> {
        self.isr
            .lock()
            .as_ref()
            .map(|s| s.lagging(std::time::Instant::now(), self.ctx.max_lag))
            .unwrap_or_default()
    }

    /// As follower: the leader's committed end is `end`; what this replica
    /// has of it is committed here too.
    pub(super) fn follower_committed(&self, end: u64) {
        let end = end.min(self.log.log_end_offset());
        self.advance_committed(end);
    }

    /// As leader: recomputes the committed end from the ISR, sends the ALL
    /// acks it passed, and notifies idle followers when there is something
    /// new for them (`new_data`, or a committed end that moved), except
    /// `requester` (its answer carries the news).
    fn recompute_commit(&self, requester: Option<&str>, new_data: bool) {
        let before = self.committed_end();
        let end = match self.isr.lock().as_ref() {
            Some(st) => st.committed_end(),
            None => return,
        };
        if let Some(end) = end {
            self.advance_committed(end);
        }
        let committed = self.committed_end();
        let ready = self.waiting.lock().release(committed);
        for (offset, p) in ready {
            self.send_ack(p, offset as i64, AckError::Ok);
        }
        if new_data || committed != before {
            self.wake_held_fetches();
            let idle = match self.isr.lock().as_mut() {
                Some(st) => st.take_idle_except(requester),
                None => Vec::new(),
            };
            for f in idle {
                self.notify_follower(&f);
            }
        }
    }

    /// Wakes an idle follower: there is something new to fetch.
    fn notify_follower(&self, server: &str) {
        let n = crate::wire::pb::PartitionNotification {
            stream: self.stream.clone(),
            partition: self.id,
        };
        let subject = super::subjects::notify(&self.ctx.namespace, server);
        if let Err(e) = self.nats.publish(
            &subject,
            None,
            None,
            crate::wire::replication::encode_notification(&n),
        ) {
            tracing::debug!(%subject, error = %e, "notifying a follower");
        }
    }

    /// The NATS client this partition uses.
    pub(super) fn nats(&self) -> &LocalClient {
        &self.nats
    }

    /// Records that the log was found damaged (the first reason is kept);
    /// the manager stops the partition at its next check.
    pub fn mark_failed(&self, reason: String) {
        let mut f = self.failure.lock();
        if f.is_none() {
            tracing::error!(stream = %self.stream, partition = self.id, error = %reason, "partition log is damaged; the partition stops");
            *f = Some(reason);
        }
    }

    /// Why the log was found damaged, if it was.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }

    /// The partition's log.
    pub fn log(&self) -> &PartitionLog {
        &self.log
    }

    /// The high watermark: the newest committed offset, `None` when nothing
    /// was committed.
    pub fn high_watermark(&self) -> Option<u64> {
        self.committed_end().checked_sub(1)
    }

    /// The high watermark as the APIs and the replication protocol carry
    /// it: -1 when nothing was committed.
    pub fn high_watermark_or_minus_one(&self) -> i64 {
        self.high_watermark().map_or(-1, |o| o as i64)
    }

    /// The newest offset still stored that is committed (`None` for an
    /// empty partition or nothing committed).
    pub fn newest_committed(&self) -> Option<u64> {
        let hw = self.high_watermark()?;
        self.log.newest_offset().map(|n| n.min(hw))
    }

    /// The committed end: offsets below it are committed and may be read.
    pub fn committed_end(&self) -> u64 {
        *self.hw.borrow()
    }

    /// Watches the committed end (readers wait on it for new messages).
    pub fn committed_watch(&self) -> watch::Receiver<u64> {
        self.hw.subscribe()
    }

    /// Moves the committed end forward to `end` (never back). The leader
    /// calls it after each append, before the acks go out, so a client that
    /// got its ack can read its message.
    /// Retention and compaction may then reach `end` too.
    pub fn advance_committed(&self, end: u64) {
        self.hw.send_if_modified(|h| {
            if end > *h {
                *h = end;
                // Under the watermark's lock: concurrent moves set the limit
                // in the order they move the watermark.
                self.log.set_compaction_limit(end);
                true
            } else {
                false
            }
        });
    }

    /// Whether the partition is readonly.
    pub fn is_readonly(&self) -> bool {
        *self.readonly.borrow()
    }

    /// Watches the readonly flag.
    pub fn readonly_watch(&self) -> watch::Receiver<bool> {
        self.readonly.subscribe()
    }

    /// Watches the closed state (`Some` once the partition stopped here).
    pub fn closed_watch(&self) -> watch::Receiver<Option<Closed>> {
        self.closed.subscribe()
    }

    /// First and latest reception time of recorded messages (ns, 0 = none).
    pub fn received_timestamps(&self) -> (i64, i64) {
        (
            self.recv_first.load(Ordering::Relaxed),
            self.recv_latest.load(Ordering::Relaxed),
        )
    }

    /// Seeds the reception times from stored records (at start-up).
    pub fn seed_received(&self, first: i64, latest: i64) {
        self.recv_first.store(first, Ordering::Relaxed);
        self.recv_latest.store(latest, Ordering::Relaxed);
    }

    /// Number of active subscribers.
    pub fn subscriber_count(&self) -> usize {
        self.subscribers.load(Ordering::Relaxed)
    }

    /// Registers a subscriber; the guard unregisters it when dropped.
    pub fn subscriber_guard(self: &Arc<Self>) -> SubscriberGuard {
        self.subscribers.fetch_add(1, Ordering::Relaxed);
        SubscriberGuard(self.clone())
    }

    /// Changes the readonly flag: a readonly partition records nothing.
    pub fn set_readonly(self: &Arc<Self>, readonly: bool) -> Result<(), crate::nats::NatsError> {
        if self.is_readonly() == readonly {
            return Ok(());
        }
        self.readonly.send_replace(readonly);
        if readonly {
            self.stop_stenographer_now();
            Ok(())
        } else {
            self.start_stenographer()
        }
    }

    /// Updates settings (OCC, size limit, epoch) after a metadata change.
    pub fn update_settings(&self, s: PartitionSettings) {
        *self.settings.lock() = s;
    }

    /// Starts recording the partition subject (no-op when readonly or running).
    pub fn start_stenographer(self: &Arc<Self>) -> Result<(), crate::nats::NatsError> {
        if self.is_readonly() || !self.is_leader() {
            return Ok(());
        }
        let mut guard = self.steno.lock();
        if guard.is_some() {
            return Ok(());
        }
        let queue = (!self.group.is_empty()).then_some(self.group.as_str());
        let sub = self.nats.subscribe_recorder(&self.subject, queue)?;
        // At most MAX_IN_FLIGHT batches, and at most the subscription
        // queue's limit in bytes (KiB permits, at most MAX_IN_FLIGHT_BYTES),
        // are queued with the store and not answered yet; past that, the
        // stenographer waits, messages wait in the subscription, and once
        // it is full its publishers are stalled; handed-over publishes wait
        // for their permits the same way.
        let budget_kib = u32::try_from(sub.queue().limit.min(MAX_IN_FLIGHT_BYTES) / 1024)
            .unwrap_or(u32::MAX)
            .max(1);
        let intake = Arc::new(Intake {
            cancel: CancellationToken::new(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            in_flight_bytes: Arc::new(tokio::sync::Semaphore::new(budget_kib as usize)),
            budget_kib,
            sole: sub.sole_interest(),
            queue: sub.queue(),
            settled: AtomicU64::new(0),
            order: Mutex::new(()),
        });
        let me = self.clone();
        let i = intake.clone();
        let task = tokio::spawn(async move { me.record_loop(sub, i).await });
        *guard = Some(Stenographer { intake, task });
        Ok(())
    }

    /// Stops the stenographer without waiting for the task to finish its
    /// current batch (the batch still completes; nothing new is taken).
    fn stop_stenographer_now(&self) {
        if let Some(s) = self.steno.lock().take() {
            s.intake.cancel.cancel();
        }
    }

    /// Stops the stenographer, waits for its last batch, then closes the log
    /// and tells readers why.
    pub async fn stop(&self, why: Closed) {
        let steno = self.steno.lock().take();
        if let Some(s) = steno {
            s.intake.cancel.cancel();
            // The task ends by itself after its current batch; a join error
            // would mean it panicked, which leaves nothing to clean up.
            let _ = s.task.await;
        }
        let tasks: Vec<_> = self.tasks.lock().drain(..).collect();
        for (t, h) in tasks {
            t.cancel();
            let _ = h.await;
        }
        self.closed.send_replace(Some(why));
        if let Err(e) = self.log.close().await {
            tracing::warn!(stream = %self.stream, partition = self.id, error = %e, "closing partition log");
        }
    }

    /// Appends publishes made through this node's API as if they had
    /// arrived on the partition subject, without publishing them into
    /// NATS: only while the stenographer runs, the stream has no OCC (its
    /// checked appends go one by one through the stenographer) and the
    /// stenographer's subscription is the only interest in the subject (no
    /// other subscriber, queue group, import, route or external NATS could
    /// tell the difference). Otherwise they are given back untouched, to be
    /// published. Taken publishes are answered as the stenographer's are:
    /// acks, error acks, or nothing if the partition stops first.
    ///
    /// `Behind::Delivered` also gives them back while a message already
    /// delivered to the subscription has not entered the log: a caller
    /// that cannot tell whether an earlier publish of its client is still
    /// on its way (a unary Publish) never overtakes one.
    pub async fn hand_over(
        self: &Arc<Self>,
        msgs: Vec<Message>,
        behind: Behind,
    ) -> Result<(), Vec<Message>> {
        let intake = match self.steno.lock().as_ref() {
            Some(s) => s.intake.clone(),
            None => return Err(msgs),
        };
        let taken = |i: &Intake| {
            !i.cancel.is_cancelled()
                && (behind == Behind::Nothing || i.caught_up())
                && i.sole.holds(&self.subject)
        };
        if msgs.is_empty() || !taken(&intake) || self.settings.lock().occ {
            return Err(msgs);
        }
        // Charged as the same messages would be in the recorder queue.
        let lens: Vec<usize> = msgs.iter().map(envelope::message_len).collect();
        let bytes = lens
            .iter()
            .map(|&l| crate::nats::client::local_charge(self.subject.len(), 0, l))
            .sum();
        let Some(permits) = intake.permits(bytes).await else {
            return Err(msgs);
        };
        let order = intake.order.lock();
        let settings = self.settings.lock().clone();
        if !taken(&intake) || settings.occ {
            return Err(msgs);
        }
        let reception_ns = now_ns();
        let items = msgs
            .into_iter()
            .zip(lens)
            .map(|(m, len)| {
                let too_large = len > settings.max_bytes;
                self.enveloped(m, self.subject.clone(), None, reception_ns, too_large)
            })
            .collect();
        let write = self
            .prepare(items, &settings, reception_ns)
            .map(|rec| self.queue_with_store(rec, permits));
        // The batch has its place in the log: the next hand-over queues
        // behind it while it is written.
        drop(order);
        drop(write);
        Ok(())
    }

    /// Counts a unary call as waiting for its ack here while the guard
    /// lives: with others waiting too, its publish is queued for a shared
    /// hand-over ([`Partition::queue_one`]); alone, it is handed over at
    /// once ([`Partition::hand_over_one`]).
    pub fn unary_call(&self) -> UnaryCall {
        self.unary_calls.fetch_add(1, Ordering::Relaxed);
        UnaryCall(self.unary_calls.clone())
    }

    /// Whether a unary publish is best handed over at once: no other call
    /// is waiting for an ack here and nothing is queued, so no other
    /// publish would share its hand-over.
    pub fn alone(&self) -> bool {
        self.unary_calls.load(Ordering::Relaxed) <= 1 && {
            let q = self.unary.lock();
            !q.flushing && q.msgs.is_empty()
        }
    }

    /// Hands over one publish of a unary call at once, behind every
    /// message already delivered to the stenographer
    /// ([`Behind::Delivered`]), and only while no other one is being
    /// handed over this way: the publish goes back to the caller (for
    /// NATS) otherwise.
    pub async fn hand_over_one(self: &Arc<Self>, msg: Message) -> Result<(), Message> {
        let Ok(_alone) = self.handing_one.try_lock() else {
            return Err(msg);
        };
        self.hand_over(vec![msg], Behind::Delivered)
            .await
            .map_err(|mut back| back.pop().unwrap_or_default())
    }

    /// Queues the publish of a unary call, to be handed over together with
    /// the others that arrive before its flusher runs: one journal write
    /// and one ack pass for many calls, as the stenographer's batches are.
    /// The flusher hands each batch over behind every message already
    /// delivered to the stenographer ([`Behind::Delivered`]: an earlier
    /// publish of the same client may still be on its way through NATS),
    /// and there is one flusher at a time, so the calls keep their order.
    pub fn queue_one(&self, msg: Message) -> Queued {
        let len = envelope::message_len(&msg);
        let mut q = self.unary.lock();
        if q.bytes + len > UNARY_QUEUE_BYTES || q.msgs.len() >= MAX_BATCH {
            return Queued::Refused(Box::new(msg));
        }
        q.msgs.push(msg);
        q.bytes += len;
        if q.flushing {
            return Queued::Taken;
        }
        q.flushing = true;
        Queued::Flush
    }

    /// The flusher's next batch of queued unary publishes, or `None` once
    /// the queue is empty (the flusher then stops; the next publish queued
    /// starts another).
    pub fn take_queued(&self) -> Option<Vec<Message>> {
        let mut q = self.unary.lock();
        if q.msgs.is_empty() {
            q.flushing = false;
            return None;
        }
        q.bytes = 0;
        Some(std::mem::take(&mut q.msgs))
    }

    /// Empties the queue of unary publishes and lets the next one start a
    /// flusher (the one at work stopped early).
    pub fn abandon_queued(&self) {
        *self.unary.lock() = UnaryQueue::default();
    }

    /// Stages a batch for followers and queues it with the store; its acks
    /// are sent (and its permits returned) when the store answers. Called
    /// under the intake's order lock; the returned write is dropped after
    /// the lock is released.
    fn queue_with_store(self: &Arc<Self>, rec: Recorded, permits: BatchPermits) -> InlineAppend {
        let me = self.clone();
        self.stage(rec.epoch, &rec.records);
        self.log
            .append_then(rec.epoch, None, rec.records, move |r| {
                me.acknowledge(r, rec.pending, rec.reception_ns);
                drop(permits);
            })
    }

    async fn record_loop(
        self: Arc<Self>,
        mut sub: crate::nats::handle::LocalSubscription,
        intake: Arc<Intake>,
    ) {
        // Each batch is queued with the store as soon as it is read, and its
        // acks are published by the store's writer thread the moment the
        // batch is journaled (see `PartitionLog::append_then`): no task
        // wake-up between the write and the acks. While one batch is being
        // written (and fsynced), the next ones queue up and the writer takes
        // them together, within the intake's permits.
        let mut batch: Vec<LocalMsg> = Vec::with_capacity(64);
        loop {
            let first = tokio::select! {
                biased;
                _ = intake.cancel.cancelled() => break,
                m = sub.next() => m,
            };
            let Some(first) = first else { break };
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match sub.try_next() {
                    Some(m) => batch.push(m),
                    None => break,
                }
            }
            let bytes: u64 = batch.iter().map(LocalMsg::charge).sum();
            let n = batch.len();
            match self.record_batch(std::mem::take(&mut batch)).await {
                Ok(Some(rec)) => {
                    let Some(permits) = intake.permits(bytes).await else {
                        break;
                    };
                    let write = {
                        let _order = intake.order.lock();
                        let write = self.queue_with_store(rec, permits);
                        intake.settle(n);
                        write
                    };
                    drop(write);
                }
                // Nothing left to queue: appended one by one already (OCC),
                // or nothing in the batch to record.
                Ok(None) => intake.settle(n),
                // A closed log means the partition is going away; any other
                // store error is logged and the batch is lost (never acked),
                // so publishers waiting for acks time out and retry.
                Err(StoreError::Closed(_)) => break,
                Err(e) => {
                    self.write_failed(e);
                    intake.settle(n);
                }
            }
        }
        // Every append queued through the intake (by this loop or handed
        // over) is answered (or reported) before the loop ends: a permit
        // comes back when its answer ran, or when the store dropped the
        // request. Nothing is handed over once the intake is cancelled.
        intake.cancel.cancel();
        intake.drained().await;
    }

    /// Sends the acks of a written batch (runs on the store's writer thread).
    fn acknowledge(
        &self,
        r: Result<AppendResult, StoreError>,
        pending: Vec<Pending>,
        reception_ns: i64,
    ) {
        match r {
            Ok(a) => self.written(a, pending, reception_ns),
            Err(StoreError::Closed(_)) => {}
            Err(e) => {
                self.write_failed(e);
                self.refuse(pending);
            }
        }
    }

    /// A write failed: the batch was not stored. Publishers waiting for an
    /// ack get an error ack (UNKNOWN: the envelope's Ack has no field for
    /// the cause; the gRPC API adds the log's fault, see
    /// `PartitionLog::fault`) at once rather than a timeout.
    fn refuse(&self, pending: Vec<Pending>) {
        for p in pending {
            self.send_ack(p, 0, AckError::Unknown);
        }
    }

    /// A write failed: the batch is lost (never acknowledged, so its
    /// publishers retry). A replicated partition also stops being led here
    /// (it is failed, its followers elect another leader): its followers
    /// may have copied the lost batch from the staged records, and the next
    /// write would give its offsets to other messages.
    fn write_failed(&self, e: StoreError) {
        // A batch refused because of an earlier failure is not news: the
        // store logged that failure once, and publishers flat out would
        // otherwise write one error line per batch.
        let refused = matches!(&e, StoreError::Storage { source, .. }
            if matches!(**source, crate::store::EngineError::Stopped(_)));
        if refused {
            tracing::debug!(stream = %self.stream, partition = self.id, error = %e, "batch refused");
        } else {
            tracing::error!(stream = %self.stream, partition = self.id, error = %e, "recording batch");
        }
        if self.staged.is_some() {
            self.mark_failed(format!("write failed: {e}"));
        }
    }

    /// A batch is in the leader's log: LEADER acks go out, ALL acks wait
    /// for the committed end (which may pass them at once).
    fn written(&self, a: AppendResult, pending: Vec<Pending>, reception_ns: i64) {
        self.mark_received(reception_ns);
        let mut all = Vec::new();
        for (i, p) in pending.into_iter().enumerate() {
            let offset = a.first_offset + i as u64;
            if p.ack_policy == AckPolicy::All as i32 && !p.ack_inbox.is_empty() {
                all.push((offset, p));
            } else {
                self.send_ack(p, offset as i64, AckError::Ok);
            }
        }
        if let Some(st) = self.isr.lock().as_mut() {
            st.appended(a.last_offset + 1);
        }
        if let Some(s) = &self.staged {
            s.lock().written(a.last_offset + 1);
        }
        {
            let mut w = self.waiting.lock();
            for (o, p) in all {
                w.push(o, p);
            }
        }
        self.recompute_commit(None, true);
    }

    /// Records one batch of NATS messages. Checked (OCC) appends are done
    /// and acknowledged here, one message at a time; otherwise the batch is
    /// returned, ready to be queued with the store.
    async fn record_batch(&self, batch: Vec<LocalMsg>) -> Result<Option<Recorded>, StoreError> {
        let reception_ns = now_ns();
        let settings = self.settings.lock().clone();
        let items = batch
            .into_iter()
            .map(|m| self.to_record(m, reception_ns, settings.max_bytes))
            .collect();
        let Some(rec) = self.prepare(items, &settings, reception_ns) else {
            return Ok(None);
        };
        if !settings.occ {
            return Ok(Some(rec));
        }
        // Checked appends go one message at a time: each expectation is
        // against the offset that message would get. Streams without OCC
        // ignore the expected offset (clients that never set it send 0).
        for (r, p) in rec.records.into_iter().zip(rec.pending) {
            let res = if p.expected >= 0 {
                self.log
                    .append_expecting(settings.leader_epoch, p.expected as u64, vec![r])
                    .await
            } else {
                self.log.append(settings.leader_epoch, vec![r]).await
            };
            match res {
                Ok(a) => self.written(a, vec![p], reception_ns),
                Err(StoreError::OffsetMismatch { .. }) => {
                    self.send_ack(p, 0, AckError::IncorrectOffset);
                }
                Err(e) => {
                    self.refuse(vec![p]);
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    /// Readies records for the append: too-large messages are answered and
    /// dropped, and with encryption at rest values are sealed (one fresh
    /// data key per batch; a value that cannot be sealed is answered with
    /// the ENCRYPTION ack error and never stored). `None` when nothing is
    /// left to append.
    fn prepare(
        &self,
        items: Vec<(NewRecord, Pending)>,
        settings: &PartitionSettings,
        reception_ns: i64,
    ) -> Option<Recorded> {
        let mut records = Vec::with_capacity(items.len());
        let mut pending = Vec::with_capacity(items.len());
        let sealer = settings.encrypt.as_ref().map(|mk| mk.sealer());
        for (mut r, p) in items {
            if p.too_large {
                self.send_ack(p, 0, AckError::TooLarge);
                continue;
            }
            if let Some(sealer) = &sealer {
                match sealer.seal(&r.value) {
                    Ok(v) => r.value = v.into(),
                    Err(e) => {
                        tracing::error!(stream = %self.stream, partition = self.id, error = %e, "encryption failed");
                        self.send_ack(p, 0, AckError::Encryption);
                        continue;
                    }
                }
            }
            records.push(r);
            pending.push(p);
        }
        (!records.is_empty()).then_some(Recorded {
            records,
            pending,
            reception_ns,
            epoch: settings.leader_epoch,
        })
    }

    fn mark_received(&self, ts: i64) {
        let _ = self
            .recv_first
            .compare_exchange(0, ts, Ordering::Relaxed, Ordering::Relaxed);
        self.recv_latest.store(ts, Ordering::Relaxed);
    }

    /// Turns a NATS message into a record plus its ack instructions.
    fn to_record(&self, m: LocalMsg, reception_ns: i64, max_bytes: usize) -> (NewRecord, Pending) {
        let subject = String::from_utf8_lossy(&m.subject).into_owned();
        let reply = m
            .reply
            .as_ref()
            .map(|r| String::from_utf8_lossy(r).into_owned());
        let too_large = m.payload.len() > max_bytes;
        match envelope::decode_message_shared(&m.payload) {
            Ok(env) => self.enveloped(env, subject, reply, reception_ns, too_large),
            Err(_) => {
                // A plain publish is never acknowledged (no ack inbox), so
                // its bookkeeping needs no copy of the subject.
                let pending = Pending {
                    ack_inbox: String::new(),
                    correlation_id: String::new(),
                    ack_policy: AckPolicy::None as i32,
                    msg_subject: String::new(),
                    expected: -1,
                    reception_ns,
                    too_large,
                };
                // A plain client's NATS headers are kept with the record;
                // `subject` and `reply` are the stenographer's own.
                let headers = m
                    .headers
                    .as_ref()
                    .map(|h| {
                        crate::nats::proto::parse_headers(h)
                            .into_iter()
                            .filter(|(k, _)| k != "subject" && k != "reply")
                            .collect()
                    })
                    .unwrap_or_default();
                let rec = NewRecord {
                    timestamp_ns: reception_ns,
                    key: None,
                    headers,
                    value: m.payload,
                    subject,
                    reply,
                };
                (rec, pending)
            }
        }
    }

    /// The record and ack instructions of an enveloped publish that came
    /// on `subject` (with `reply`).
    fn enveloped(
        &self,
        env: Message,
        subject: String,
        reply: Option<String>,
        reception_ns: i64,
        too_large: bool,
    ) -> (NewRecord, Pending) {
        let pending = Pending {
            ack_inbox: env.ack_inbox,
            correlation_id: env.correlation_id,
            ack_policy: env.ack_policy,
            msg_subject: subject.clone(),
            expected: env.offset,
            reception_ns,
            too_large,
        };
        let mut headers: Vec<(String, Bytes)> = env
            .headers
            .into_iter()
            .filter(|(k, _)| k != "subject" && k != "reply")
            .collect();
        // Map order is random; a stable order keeps replays identical.
        headers.sort_by(|a, b| a.0.cmp(&b.0));
        let rec = NewRecord {
            timestamp_ns: reception_ns,
            key: (!env.key.is_empty()).then_some(env.key),
            headers,
            value: env.value,
            subject,
            reply,
        };
        (rec, pending)
    }

    /// Sends the ack of a message, as Liftbridge does: a success only when
    /// the message asked for one (policy not NONE); an error (TOO_LARGE,
    /// INCORRECT_OFFSET, UNKNOWN for a failed write) whenever there is an
    /// inbox, with offset 0, and a TOO_LARGE or UNKNOWN nack without a
    /// commit timestamp (it was never committed).
    fn send_ack(&self, p: Pending, offset: i64, err: AckError) {
        if p.ack_inbox.is_empty() {
            return;
        }
        if err == AckError::Ok && p.ack_policy == AckPolicy::None as i32 {
            return;
        }
        let commit_timestamp = if matches!(err, AckError::TooLarge | AckError::Unknown) {
            0
        } else {
            now_ns()
        };
        let ack = Ack {
            stream: self.stream.clone(),
            partition_subject: self.stream_subject.clone(),
            msg_subject: p.msg_subject,
            offset,
            ack_inbox: p.ack_inbox,
            correlation_id: p.correlation_id,
            ack_policy: p.ack_policy,
            reception_timestamp: p.reception_ns,
            commit_timestamp,
            ack_error: err as i32,
        };
        let ack = match self.ctx.local_acks.get() {
            Some(local) => match local(ack) {
                None => return,
                Some(ack) => ack,
            },
            None => ack,
        };
        if let Err(e) = self
            .nats
            .publish(&ack.ack_inbox, None, None, envelope::encode_ack(&ack))
        {
            tracing::debug!(inbox = %ack.ack_inbox, error = %e, "sending ack");
        }
    }
}

/// Keeps a partition's subscriber count while a subscription lives.
pub struct SubscriberGuard(Arc<Partition>);

impl Drop for SubscriberGuard {
    fn drop(&mut self) {
        self.0.subscribers.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::LogConfig;

    /// A leader partition of `log` replicated on `replicas` (this node is
    /// the first), all in sync, on an embedded NATS server of its own that
    /// the caller shuts down. Its tasks are not started.
    pub(crate) async fn leader_of(
        log: &PartitionLog,
        replicas: &[&str],
    ) -> (crate::nats::NatsServer, Arc<Partition>) {
        let nats = crate::nats::NatsServer::start(crate::config::nats::NatsOptions {
            host: "127.0.0.1".into(),
            port: 0,
            ..Default::default()
        })
        .await
        .unwrap();
        let replicas: Vec<String> = replicas.iter().map(|r| r.to_string()).collect();
        let p = Partition::new(
            "s".into(),
            0,
            "s".into(),
            String::new(),
            1,
            log.clone(),
            PartitionSettings {
                max_bytes: 1 << 20,
                occ: false,
                leader_epoch: 0,
                encrypt: None,
            },
            false,
            nats.local_client("test"),
            Role::Leader,
            Membership {
                isr: replicas.clone(),
                min_isr: replicas.len().min(2),
                replicas,
            },
            ReplicaContext::standalone("me"),
        );
        (nats, p)
    }

    fn keyed(key: &'static str) -> NewRecord {
        NewRecord {
            timestamp_ns: 1,
            key: Some(Bytes::from_static(key.as_bytes())),
            headers: Vec::new(),
            value: Bytes::from_static(b"v"),
            subject: "s".into(),
            reply: None,
        }
    }

    async fn offsets(log: &PartitionLog) -> Vec<u64> {
        let records = log.read(0, 100, usize::MAX).await.unwrap();
        records.iter().map(|r| r.offset).collect()
    }

    /// A replicated partition's log is cleaned only below what is known to
    /// be committed: nothing at all when a leader takes over a log (the ISR
    /// has not told it anything yet), then up to the committed end as it
    /// moves. Alone, the whole log is committed and may be cleaned.
    #[tokio::test]
    async fn replicated_logs_are_never_cleaned_past_the_committed_end() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        let cfg = LogConfig {
            retention: crate::store::RetentionPolicy {
                max_messages: Some(1),
                ..Default::default()
            },
            // As the partition manager opens every partition's log.
            initial_compaction_limit: 0,
            ..LogConfig::default()
        };
        let open = move || {
            let (d, cfg) = (d.clone(), cfg.clone());
            async move {
                tokio::task::spawn_blocking(move || PartitionLog::open(&d, "log", cfg))
                    .await
                    .unwrap()
                    .unwrap()
            }
        };
        let log = open().await;
        // Offsets 0..6; `a` is superseded at 2 and 4, `b` at 5.
        for k in ["a", "b", "a", "c", "a", "b"] {
            log.append(0, vec![keyed(k)]).await.unwrap();
        }
        // Opened for a replicated partition: nothing is cleaned before a
        // role sets the limit.
        assert_eq!(log.compact().await.unwrap().removed_records, 0);
        assert_eq!(log.enforce_retention().await.unwrap().removed_records, 0);
        // As if a previous role had left the log open to cleaning.
        log.set_compaction_limit(u64::MAX);
        let (nats, p) = leader_of(&log, &["me", "f1", "f2"]).await;
        assert_eq!(p.committed_end(), 0);
        assert_eq!(log.compact().await.unwrap().removed_records, 0);
        assert_eq!(log.enforce_retention().await.unwrap().removed_records, 0);
        assert_eq!(offsets(&log).await, vec![0, 1, 2, 3, 4, 5]);

        // Committed up to 3: compaction sees offsets 0..3 only (the `a` at 0
        // is superseded at 2), retention keeps 3 onwards.
        p.advance_committed(3);
        assert_eq!(log.compact().await.unwrap().removed_records, 1);
        assert_eq!(offsets(&log).await, vec![1, 2, 3, 4, 5]);
        assert_eq!(log.enforce_retention().await.unwrap().removed_records, 2);
        assert_eq!(offsets(&log).await, vec![3, 4, 5]);
        p.stop(Closed::Shutdown).await;
        nats.shutdown().await;

        // Alone, the log is the committed log: retention keeps one record.
        let log = open().await;
        let (nats, p) = leader_of(&log, &["me"]).await;
        assert_eq!(p.committed_end(), 6);
        log.enforce_retention().await.unwrap();
        assert_eq!(offsets(&log).await, vec![5]);
        p.stop(Closed::Shutdown).await;
        nats.shutdown().await;
    }
}
