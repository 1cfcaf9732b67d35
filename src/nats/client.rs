//! One client connection: its shared state, the read loop that parses and
//! applies operations, the writer task, and message delivery.
//!
//! Delivery model: a publisher's read loop matches each message (through a
//! per-connection match cache in front of the shared sublist cache) and
//! appends the encoded MSG/HMSG frame to every receiver's outbound buffer
//! under that receiver's short mutex. Receivers are collected in a flush
//! list and woken ONCE at the end of the read batch, so a batch of many
//! messages becomes one write per receiver. Each connection has exactly one
//! writer task that swaps the outbound buffer with a spare (no allocation in
//! steady state) and writes it.
//!
//! Invariants: no lock is held across `.await`; a receiver whose pending
//! bytes exceed `max_pending` is closed (slow consumer) without affecting
//! the publisher; nothing received from the network can panic this code.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::auth::{Credentials, PermissionSet};
use super::handle::LocalMsg;
use super::mapping::Mapped;
use super::proto::{self, ClientOp, ConnectOptions, Parsed, Parser};
use super::reload::{ConnAuth, Live};
use super::server::ServerInner;
use super::sublist::{MatchResult, Sublist};

/// Read buffer growth step.
const READ_CHUNK: usize = 64 * 1024;
/// Maximum entries of a connection's private match cache.
const CONN_CACHE_MAX: usize = 128;
/// A reader's private cache of sublist matches, in front of the shared
/// sublist cache: cleared whenever the sublist changes (its generation) and
/// when it reaches `max` entries. Keys are copies, so a cached subject never
/// keeps a read buffer alive.
pub(crate) struct MatchCache {
    gen: u64,
    max: usize,
    map: HashMap<Bytes, Arc<MatchResult<Subscription>>>,
}

impl MatchCache {
    /// An empty cache of at most `max` subjects.
    pub(crate) fn new(max: usize) -> MatchCache {
        MatchCache {
            gen: u64::MAX,
            max,
            map: HashMap::new(),
        }
    }

    /// The receivers of `subject` (`None` for a subject that is not UTF-8).
    pub(crate) fn lookup(
        &mut self,
        sublist: &Sublist<Subscription>,
        subject: &[u8],
    ) -> Option<Arc<MatchResult<Subscription>>> {
        let gen = sublist.genid();
        if gen != self.gen {
            self.map.clear();
            self.gen = gen;
        }
        if let Some(r) = self.map.get(subject) {
            return Some(r.clone());
        }
        let s = std::str::from_utf8(subject).ok()?;
        let r = sublist.match_subject(s);
        if self.map.len() >= self.max {
            self.map.clear();
        }
        self.map.insert(Bytes::copy_from_slice(subject), r.clone());
        Some(r)
    }
}

/// Maximum entries of a connection's publish-permission cache.
const PERM_CACHE_MAX: usize = 256;

/// What kind of client this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// A TCP (or TLS) client.
    Tcp,
    /// An in-process client (see `handle.rs`).
    Local,
    /// A route to another server (see `route.rs`): its subscriptions are
    /// the peer's interest; messages to it are encoded as `RMSG`/`HMSG`.
    Route,
    /// A leaf-node connection (see `leaf.rs`): as a route, its
    /// subscriptions are the peer's interest; messages to it are encoded as
    /// `LMSG`/`HMSG`. `spoke`: we solicited it, so the peer is our hub.
    Leaf {
        /// We are the spoke (leaf) side of this connection.
        spoke: bool,
    },
}

impl ClientKind {
    /// A server-to-server connection (route or leaf): its subscriptions
    /// are a peer's interest, and it gets one copy of a message however
    /// many of them match.
    pub fn is_peer(self) -> bool {
        matches!(self, ClientKind::Route | ClientKind::Leaf { .. })
    }

    /// Whether this connection's subscriptions count as local interest
    /// announced to routes: clients, and leaves that connect to us (as
    /// nats-server, interest learned from our hub stays off our routes).
    pub fn feeds_routes(self) -> bool {
        !matches!(self, ClientKind::Route | ClientKind::Leaf { spoke: true })
    }
}

/// Message counters of one connection (payload bytes incl. headers).
#[derive(Debug, Default)]
pub struct ClientStats {
    /// Messages received from the client.
    pub in_msgs: AtomicU64,
    /// Payload bytes (headers included) received from the client.
    pub in_bytes: AtomicU64,
    /// Messages delivered (in-process clients and server totals only; TCP
    /// clients count under their outbound lock, see `out_counts`).
    pub out_msgs: AtomicU64,
    /// Payload bytes delivered (same scope as `out_msgs`).
    pub out_bytes: AtomicU64,
}

/// Descriptive data of a connection, for `/connz`.
#[derive(Debug, Clone, Default)]
pub struct ConnMeta {
    /// `name` from CONNECT.
    pub name: String,
    /// `lang` from CONNECT.
    pub lang: String,
    /// Client library `version` from CONNECT.
    pub version: String,
    /// User name or nkey the client authenticated as (empty if none).
    pub authorized_user: String,
    /// Negotiated TLS version (empty without TLS).
    pub tls_version: String,
    /// Negotiated TLS cipher suite (empty without TLS).
    pub tls_cipher: String,
    /// Last measured round-trip time, if any.
    pub rtt: Option<Duration>,
    /// The client came in over WebSocket.
    pub websocket: bool,
    /// The error the server closed it with (empty: the client closed).
    pub close_reason: String,
}

/// Outbound state guarded by the connection's mutex.
pub(crate) struct Outbound {
    buf: BytesMut,
    /// Bytes handed to the writer and not yet written.
    inflight: usize,
    /// Already in some publisher's flush list for its current batch.
    flush_queued: bool,
    /// No more bytes are accepted (closing or closed).
    closed: bool,
    /// Close after the buffer is written (error sent).
    close_after_flush: bool,
    /// Messages and bytes delivered to this TCP client, counted under the
    /// lock already held for the append (no extra atomics per message).
    out_msgs: u64,
    out_bytes: u64,
    /// Where in `buf` the transport switches to compression (routes, see
    /// `s2`): the writer sets the flag once the bytes before are written.
    switch: Option<(usize, Arc<AtomicBool>)>,
}

/// State of a connection shared between its reader, its writer, other
/// connections' readers (delivery) and monitoring.
pub struct ClientShared {
    /// Client id (`cid`), unique per server.
    pub id: u64,
    /// TCP or in-process.
    pub kind: ClientKind,
    /// Peer address (TCP clients).
    pub addr: Option<SocketAddr>,
    /// When the connection was accepted.
    pub start: chrono::DateTime<chrono::Utc>,
    started: Instant,
    out: Mutex<Outbound>,
    notify: Notify,
    /// Signalled by the writer after each write (wakes stalled producers).
    drained: Notify,
    /// Signalled once CONNECT is accepted (starts the ping timer).
    connected_notify: Notify,
    /// Milliseconds since `started` of the writer's last progress (a
    /// completed piece, or waking up to new work).
    last_drain_ms: AtomicU64,
    pub(crate) cancel: CancellationToken,
    /// Whether the client declared `headers` (else headers are stripped).
    headers: AtomicBool,
    /// Message counters.
    pub stats: ClientStats,
    /// Subscriptions by sid.
    pub(crate) subs: Mutex<HashMap<Bytes, Arc<Subscription>>>,
    pub(crate) meta: Mutex<ConnMeta>,
    /// Milliseconds since `started` of the last inbound activity.
    last_activity_ms: AtomicU64,
    pub(crate) pings_out: AtomicU64,
    /// Microseconds since `started` when the last server PING was sent
    /// (0 = none outstanding); the PONG gives the RTT shown in `/connz`.
    ping_sent_us: AtomicU64,
    pub(crate) connected: AtomicBool,
    max_pending: usize,
    /// Credentials and permissions of a client since its CONNECT (a reload
    /// re-checks them and may replace the permissions).
    pub(crate) auth: Mutex<Option<ConnAuth>>,
    /// The account, set once when the client is bound to one (at CONNECT,
    /// or at creation for in-process clients); unset = `$G`.
    pub(crate) account: std::sync::OnceLock<Arc<super::account::Account>>,
    /// A leaf connection's permissions as the connection applies them (see
    /// `leaf.rs`): `publish` = what we may send over it, `subscribe` = what
    /// it may bring us and what interest we announce on it. `None` = no
    /// restrictions (and always for other kinds).
    pub(crate) leaf_perms: parking_lot::RwLock<Option<Arc<PermissionSet>>>,
    /// `allow_responses`: the reply subjects this connection may answer
    /// (see `replies`); `tracks_replies` says whether there is a tracker,
    /// so deliveries to other connections take no lock.
    replies: Mutex<Option<super::replies::ReplyTracker>>,
    tracks_replies: AtomicBool,
    /// A route connection dedicated to one account: its operations omit
    /// the account (`proto::route::Dialect::Pinned`).
    pub(crate) pinned_route: AtomicBool,
}

impl ClientShared {
    pub(crate) fn new(
        id: u64,
        kind: ClientKind,
        addr: Option<SocketAddr>,
        max_pending: usize,
    ) -> Arc<Self> {
        Arc::new(ClientShared {
            id,
            kind,
            addr,
            start: chrono::Utc::now(),
            started: Instant::now(),
            out: Mutex::new(Outbound {
                buf: BytesMut::with_capacity(4096),
                inflight: 0,
                flush_queued: false,
                closed: false,
                close_after_flush: false,
                out_msgs: 0,
                out_bytes: 0,
                switch: None,
            }),
            notify: Notify::new(),
            drained: Notify::new(),
            connected_notify: Notify::new(),
            last_drain_ms: AtomicU64::new(0),
            cancel: CancellationToken::new(),
            headers: AtomicBool::new(kind == ClientKind::Local),
            stats: ClientStats::default(),
            subs: Mutex::new(HashMap::new()),
            meta: Mutex::new(ConnMeta::default()),
            last_activity_ms: AtomicU64::new(0),
            pings_out: AtomicU64::new(0),
            ping_sent_us: AtomicU64::new(0),
            connected: AtomicBool::new(kind == ClientKind::Local),
            max_pending,
            auth: Mutex::new(None),
            account: std::sync::OnceLock::new(),
            leaf_perms: parking_lot::RwLock::new(None),
            replies: Mutex::new(None),
            tracks_replies: AtomicBool::new(false),
            pinned_route: AtomicBool::new(false),
        })
    }

    /// Follows a change of this connection's permissions: reply subjects
    /// are tracked when they have `allow_responses` (kept when the
    /// permissions did not change).
    pub(crate) fn set_reply_perms(&self, perms: Option<&Arc<PermissionSet>>) {
        let mut g = self.replies.lock();
        match (g.as_ref(), perms) {
            (Some(t), Some(p)) if t.serves(p) => return,
            _ => *g = perms.and_then(super::replies::ReplyTracker::new),
        }
        self.tracks_replies.store(g.is_some(), Ordering::Release);
    }

    /// A message with reply subject `reply` is being delivered here.
    #[inline]
    fn track_reply(&self, reply: Option<&Bytes>) {
        let Some(reply) = reply else {
            return;
        };
        if !self.tracks_replies.load(Ordering::Acquire) {
            return;
        }
        if let Some(t) = self.replies.lock().as_mut() {
            t.track(
                reply,
                Instant::now(),
                matches!(self.kind, ClientKind::Leaf { .. }),
            );
        }
    }

    /// Whether a publish to `subject` (denied by the permissions) answers
    /// a reply subject delivered here (`allow_responses`); counts it.
    pub(crate) fn answers_reply(&self, subject: &[u8]) -> bool {
        if !self.tracks_replies.load(Ordering::Acquire) {
            return false;
        }
        self.replies
            .lock()
            .as_mut()
            .is_some_and(|t| t.answer(subject, Instant::now()))
    }

    /// Messages and bytes delivered to this client so far.
    pub fn out_counts(&self) -> (u64, u64) {
        let (m, b) = {
            let o = self.out.lock();
            (o.out_msgs, o.out_bytes)
        };
        (
            m + self.stats.out_msgs.load(Ordering::Relaxed),
            b + self.stats.out_bytes.load(Ordering::Relaxed),
        )
    }

    /// Outbound bytes not yet written to the socket.
    ///
    /// For an in-process client: the bytes queued in its subscriptions.
    pub fn pending_bytes(&self) -> usize {
        if self.kind == ClientKind::Local {
            return self
                .subs
                .lock()
                .values()
                .filter_map(|s| s.local.as_ref())
                .map(|l| l.q.pending_bytes() as usize)
                .sum();
        }
        let o = self.out.lock();
        o.buf.len() + o.inflight
    }

    /// Time of the last inbound activity.
    pub fn last_activity(&self) -> chrono::DateTime<chrono::Utc> {
        let ms = self.last_activity_ms.load(Ordering::Relaxed);
        let since_start = chrono::Duration::milliseconds(ms as i64);
        self.start + since_start
    }

    fn touch(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_activity_ms.store(ms, Ordering::Relaxed);
    }

    /// Called under the outbound lock before appending: when the backlog
    /// was empty, new work starts now, so the writer's clock of progress
    /// starts now too. Without this a writer that sat idle longer than
    /// `STUCK_AFTER_MS` looked stuck to a producer that filled its buffer
    /// before the writer task was scheduled, and the producer ran past the
    /// 75 % stall into a slow-consumer close of a live reader.
    fn note_work(&self, o: &Outbound) {
        if o.buf.is_empty() && o.inflight == 0 {
            self.last_drain_ms
                .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
    }

    /// Appends raw protocol bytes (PONG, +OK, -ERR, INFO) and queues a flush.
    pub(crate) fn send_raw(self: &Arc<Self>, data: &[u8], flush: &mut FlushList) {
        let mut o = self.out.lock();
        if o.closed {
            return;
        }
        self.note_work(&o);
        o.buf.extend_from_slice(data);
        if !o.flush_queued {
            o.flush_queued = true;
            flush.push(self.clone());
        }
    }

    /// Sends raw bytes and wakes the writer right away.
    pub(crate) fn send_now(self: &Arc<Self>, data: &[u8]) {
        let mut fl = FlushList::default();
        self.send_raw(data, &mut fl);
        fl.flush();
    }

    /// Sends `before`, then `after` with the transport switched by `on`
    /// in between (the writer sets it once `before` is written), in one
    /// step so nothing else can fall between them.
    pub(crate) fn send_switching(&self, before: &[u8], on: Arc<AtomicBool>, after: &[u8]) {
        {
            let mut o = self.out.lock();
            if o.closed {
                return;
            }
            self.note_work(&o);
            o.buf.extend_from_slice(before);
            o.switch = Some((o.buf.len(), on));
            o.buf.extend_from_slice(after);
        }
        self.notify.notify_one();
    }

    /// Sends a PING, noting when (for the round trip its PONG measures).
    pub(crate) fn send_ping(self: &Arc<Self>) {
        let now = (self.started.elapsed().as_micros() as u64).max(1);
        self.ping_sent_us.store(now, Ordering::Relaxed);
        self.send_now(proto::PING);
    }

    /// A PONG arrived: the round trip since the last [`send_ping`]
    /// (`/connz`, `/routez`, `/leafz` `rtt`), if one was outstanding.
    ///
    /// [`send_ping`]: ClientShared::send_ping
    pub(crate) fn note_pong(&self) -> Option<Duration> {
        let sent = self.ping_sent_us.swap(0, Ordering::Relaxed);
        if sent == 0 {
            return None;
        }
        let now = self.started.elapsed().as_micros() as u64;
        let rtt = Duration::from_micros(now.saturating_sub(sent));
        self.meta.lock().rtt = Some(rtt);
        Some(rtt)
    }

    /// Wakes the writer task: a transport with frames of its own to send
    /// (WebSocket pong/close) writes them when the writer flushes it.
    pub(crate) fn wake_writer(&self) {
        self.notify.notify_one();
    }

    /// Sends `-ERR '<text>'` and closes the connection once it is written.
    pub(crate) fn close_with_err(&self, text: Option<&str>) {
        {
            let mut o = self.out.lock();
            if o.closed {
                return;
            }
            if let Some(t) = text {
                proto::encode_err(&mut o.buf, t);
            }
            o.closed = true;
            o.close_after_flush = true;
        }
        if let Some(t) = text {
            self.meta.lock().close_reason = t.to_string();
        }
        self.notify.notify_one();
    }

    /// Closes immediately, discarding pending output.
    pub(crate) fn close_now(&self) {
        {
            let mut o = self.out.lock();
            o.closed = true;
            o.buf.clear();
        }
        self.cancel.cancel();
        self.notify.notify_one();
    }

    /// The connection type a client user's `allowed_connection_types`
    /// is checked against (nats-server's names).
    pub(crate) fn connection_type(&self) -> &'static str {
        if self.meta.lock().websocket {
            "WEBSOCKET"
        } else {
            "STANDARD"
        }
    }

    /// Whether the connection is closing or closed.
    pub fn is_closed(&self) -> bool {
        self.out.lock().closed
    }
}

/// Per-batch delivery state of a producer: receivers to wake at the end of
/// the batch, receivers whose backlog passed 75 % of `max_pending` (the
/// producer waits for them), queue-member randomness and out counters.
#[derive(Default)]
pub(crate) struct FlushList {
    wake: Vec<Arc<ClientShared>>,
    stalled: Vec<Arc<ClientShared>>,
    /// Recorder subscriptions (stall policy) whose queue passed its mark:
    /// the producer waits for them before its next operation.
    local_stalled: Vec<Arc<Subscription>>,
    /// Routes that get the message being delivered, each with the indexes
    /// (in the match result's `qsubs`) of the queue groups it must serve.
    /// Reused from message to message.
    route_targets: Vec<(Arc<ClientShared>, Vec<usize>)>,
    pub rng: u64,
    pub tally: OutTally,
    /// Messages and bytes sent to routes in this batch.
    pub routed: OutTally,
    /// Messages and bytes sent to leaf connections in this batch.
    pub leafed: OutTally,
}

impl FlushList {
    /// An empty batch with a random queue-selection seed.
    pub(crate) fn new() -> FlushList {
        FlushList {
            rng: rand::random::<u64>() | 1,
            ..FlushList::default()
        }
    }

    fn push(&mut self, c: Arc<ClientShared>) {
        self.wake.push(c);
    }

    /// Adds the batch's routed (and leaf) counts to the server's route
    /// (and leaf) counters.
    pub(crate) fn count_routed(&mut self, server: &ServerInner) {
        let t = std::mem::take(&mut self.routed);
        if t.msgs > 0 {
            if let Some(r) = server.routes.as_ref() {
                r.stats.out_msgs.fetch_add(t.msgs, Ordering::Relaxed);
                r.stats.out_bytes.fetch_add(t.bytes, Ordering::Relaxed);
            }
        }
        let t = std::mem::take(&mut self.leafed);
        if t.msgs > 0 {
            if let Some(l) = server.leafs.as_ref() {
                l.stats.out_msgs.fetch_add(t.msgs, Ordering::Relaxed);
                l.stats.out_bytes.fetch_add(t.bytes, Ordering::Relaxed);
            }
        }
    }

    /// Clears each receiver's queued flag and wakes its writer once.
    pub(crate) fn flush(&mut self) {
        for c in self.wake.drain(..) {
            c.out.lock().flush_queued = false;
            c.notify.notify_one();
        }
    }

    /// Adds `route` as a receiver of the current message (once), with
    /// queue group `queue` (an index into the match result) if given.
    fn add_route(&mut self, route: &Arc<ClientShared>, queue: Option<usize>) {
        let entry = match self
            .route_targets
            .iter_mut()
            .position(|(r, _)| Arc::ptr_eq(r, route))
        {
            Some(i) => &mut self.route_targets[i],
            None => {
                self.route_targets.push((route.clone(), Vec::new()));
                let last = self.route_targets.len() - 1;
                &mut self.route_targets[last]
            }
        };
        if let Some(q) = queue {
            entry.1.push(q);
        }
    }

    /// Records that the producer must wait for `c` after this batch (once).
    fn add_stalled(&mut self, c: &Arc<ClientShared>) {
        if !self.stalled.iter().any(|s| Arc::ptr_eq(s, c)) {
            self.stalled.push(c.clone());
        }
    }

    /// Whether a recorder queue filled up during this batch.
    pub(crate) fn has_local_stall(&self) -> bool {
        !self.local_stalled.is_empty()
    }

    /// Recorder subscriptions the producer must wait for (taken).
    pub(crate) fn take_local_stalled(&mut self) -> Vec<Arc<Subscription>> {
        std::mem::take(&mut self.local_stalled)
    }

    /// Receivers the producer should wait for (taken).
    pub(crate) fn take_stalled(&mut self) -> Vec<Arc<ClientShared>> {
        std::mem::take(&mut self.stalled)
    }
}

/// How often a stalled producer re-checks a receiver that made no progress.
const STALL_MAX: Duration = Duration::from_millis(50);
/// Largest single socket write.
const WRITE_PIECE: usize = 256 * 1024;
/// A receiver whose last write completed longer ago than this is stuck:
/// producers do not wait for it (its backlog will hit `max_pending`). Long
/// enough that a live reader descheduled for a while on a loaded machine is
/// waited for (at 1 s such readers were cut as slow consumers about one run
/// in four with two busy loops on two cores); short enough that a dead
/// receiver holds its publishers up once, for at most this long.
const STUCK_AFTER_MS: u64 = 2500;

/// Fast-producer stall: waits (bounded) until `c`'s backlog is back under
/// 75 % of its limit, so a publisher cannot outrun a live receiver into
/// a slow-consumer close.
pub(crate) async fn wait_drained(c: &ClientShared) {
    loop {
        let notified = c.drained.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let o = c.out.lock();
            if o.closed || (o.buf.len() + o.inflight) * 4 <= c.max_pending * 3 {
                return;
            }
        }
        let now_ms = c.started.elapsed().as_millis() as u64;
        if now_ms.saturating_sub(c.last_drain_ms.load(Ordering::Relaxed)) > STUCK_AFTER_MS {
            return;
        }
        // Woken by the writer's progress, or re-checked for "stuck".
        let _ = tokio::time::timeout(STALL_MAX, notified).await;
    }
}

/// One subscription, held by the sublist and by its connection's sid map.
pub struct Subscription {
    /// Subscribed subject (may hold wildcards).
    pub subject: String,
    /// Queue group, if any.
    pub queue: Option<String>,
    /// The client's subscription id.
    pub sid: Bytes,
    pub(crate) client: Arc<ClientShared>,
    /// For in-process subscriptions: the unbounded queue of the handle.
    pub(crate) local: Option<LocalSink>,
    /// The account whose sublist holds this subscription when it is not
    /// the connection's own: a route carries interest of every account.
    pub(crate) acc: Option<Arc<super::account::Account>>,
    delivered: AtomicU64,
    /// Auto-unsubscribe after this many messages (0 = never).
    max: AtomicU64,
    closed: AtomicBool,
}

/// The receiving side of an in-process subscription. The channel itself is
/// unbounded; its bound is `q.limit` bytes, enforced at delivery.
pub(crate) struct LocalSink {
    pub tx: mpsc::UnboundedSender<LocalMsg>,
    pub q: Arc<LocalQueue>,
    /// Takes each message at delivery, on the publisher's task, instead of
    /// the queue (see `LocalClient::subscribe_inline`).
    pub inline: Option<InlineHandler>,
}

/// A handler that takes an in-process subscription's messages where they
/// are delivered (subject, payload). It must not block or publish.
pub type InlineHandler = Arc<dyn Fn(&[u8], &Bytes) + Send + Sync>;

/// What an in-process subscription does when its queue is over its mark
/// (see `handle.rs` for who gets which policy and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullPolicy {
    /// A recorder (the subject of a stream partition): every message is
    /// queued; the reader of the connection that delivered it (TCP or
    /// WebSocket client, route, leaf) waits until the queue is back under
    /// the mark. In-process publishers never wait.
    Stall,
    /// An internal request subject: a message that does not fit is dropped
    /// and counted; its requester times out and retries.
    Drop,
}

/// Counters of all in-process queues of a server, kept outside the queues
/// so they never go backwards when a subscription ends.
#[derive(Debug, Default)]
pub struct LocalTotals {
    /// Microseconds producers spent stalled on recorder queues.
    pub stall_us: AtomicU64,
    /// Stalls (a producer waited for a recorder queue).
    pub stalls: AtomicU64,
    /// Messages dropped by full internal request queues.
    pub dropped: AtomicU64,
    /// When the last drop warning was logged.
    last_warn: Mutex<Option<Instant>>,
}

/// Memory a queued in-process message costs beyond its subject, reply,
/// headers and payload: the `LocalMsg` (four `Bytes`, 128 bytes), its slot
/// in the channel and the protocol line around it in the read buffer the
/// payload still references. Without it a queue of small messages held
/// about 2.5 times its accounted bytes.
pub const LOCAL_MSG_OVERHEAD: u64 = 160;

/// The bytes an in-process queue charges for a message (see
/// `LOCAL_MSG_OVERHEAD`); `size` is headers plus payload.
pub fn local_charge(subject: usize, reply: usize, size: usize) -> u64 {
    (subject + reply + size) as u64 + LOCAL_MSG_OVERHEAD
}

/// How often a full internal request queue may log a warning.
const DROP_WARN_EVERY: Duration = Duration::from_secs(10);

/// The byte-bounded queue of one in-process subscription: accounting
/// (read by `/connz`, `/varz`, `/metrics`, the UI), its mark, and the wake-up
/// of producers stalled on it.
#[derive(Debug)]
pub struct LocalQueue {
    /// The subscribed subject.
    pub subject: String,
    /// What happens when it is full.
    pub policy: FullPolicy,
    /// The limit in bytes (of queued messages, as charged by
    /// `local_charge`: subject, reply, headers, payload and overhead).
    pub limit: u64,
    pending: AtomicU64,
    msgs: AtomicU64,
    /// Messages ever queued (less those given back by `unpush`).
    delivered: AtomicU64,
    high_water: AtomicU64,
    stall_us: AtomicU64,
    stalls: AtomicU64,
    dropped: AtomicU64,
    /// Milliseconds since `started` of the consumer's last take (or of the
    /// moment work arrived on an empty queue).
    progress_ms: AtomicU64,
    started: Instant,
    ended: AtomicBool,
    drained: Notify,
    totals: Arc<LocalTotals>,
}

impl LocalQueue {
    pub(crate) fn new(
        subject: &str,
        policy: FullPolicy,
        limit: u64,
        totals: Arc<LocalTotals>,
    ) -> Arc<LocalQueue> {
        Arc::new(LocalQueue {
            subject: subject.to_string(),
            policy,
            limit: limit.max(1),
            pending: AtomicU64::new(0),
            msgs: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            high_water: AtomicU64::new(0),
            stall_us: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            progress_ms: AtomicU64::new(0),
            started: Instant::now(),
            ended: AtomicBool::new(false),
            drained: Notify::new(),
            totals,
        })
    }

    /// Producers of a recorder wait while the queue holds more than this
    /// (75 % of the limit, as for a TCP receiver's `max_pending`), so the
    /// queue stays under the limit by the last message of each producer.
    pub fn mark(&self) -> u64 {
        self.limit - self.limit / 4
    }

    /// Bytes queued and not yet taken.
    pub fn pending_bytes(&self) -> u64 {
        self.pending.load(Ordering::Relaxed)
    }

    /// Messages queued and not yet taken.
    pub fn pending_msgs(&self) -> u64 {
        self.msgs.load(Ordering::Relaxed)
    }

    /// Messages ever queued. Counted before a message can be taken, so a
    /// consumer that counts what it has finished with knows, by comparing,
    /// whether any delivered message is still queued or in its hands.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::SeqCst)
    }

    /// The most bytes ever queued at once.
    pub fn high_water_bytes(&self) -> u64 {
        self.high_water.load(Ordering::Relaxed)
    }

    /// Total time producers spent waiting for this queue.
    pub fn stall_time(&self) -> Duration {
        Duration::from_micros(self.stall_us.load(Ordering::Relaxed))
    }

    /// How many times a producer waited for this queue.
    pub fn stalls(&self) -> u64 {
        self.stalls.load(Ordering::Relaxed)
    }

    /// Messages dropped because the queue was full (drop policy only).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Producer side: `size` more bytes queued. Returns the new total.
    fn push(&self, size: u64) -> u64 {
        let prev = self.pending.fetch_add(size, Ordering::Relaxed);
        if prev == 0 {
            // Work arrives on an empty queue: the consumer's clock of
            // progress starts now (an idle consumer is not a stuck one).
            self.progress_ms.store(self.now_ms(), Ordering::Relaxed);
        }
        self.msgs.fetch_add(1, Ordering::Relaxed);
        self.delivered.fetch_add(1, Ordering::SeqCst);
        let now = prev + size;
        self.high_water.fetch_max(now, Ordering::Relaxed);
        now
    }

    /// Undoes `push` (the receiver was gone).
    fn unpush(&self, size: u64) {
        self.pending.fetch_sub(size, Ordering::Relaxed);
        self.msgs.fetch_sub(1, Ordering::Relaxed);
        self.delivered.fetch_sub(1, Ordering::SeqCst);
    }

    /// Consumer side: a message of `size` bytes was taken. Wakes stalled
    /// producers when the queue falls back under the mark.
    pub(crate) fn take(&self, size: u64) {
        let prev = self.pending.fetch_sub(size, Ordering::Relaxed);
        self.msgs.fetch_sub(1, Ordering::Relaxed);
        self.progress_ms.store(self.now_ms(), Ordering::Relaxed);
        let mark = self.mark();
        if prev > mark && prev - size <= mark {
            self.drained.notify_waiters();
        }
    }

    /// The consumer went away: nobody waits for this queue any more.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    /// Counts a dropped message and warns, at most every `DROP_WARN_EVERY`
    /// per server.
    fn drop_one(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        let total = self.totals.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        let mut last = self.totals.last_warn.lock();
        if last.is_none_or(|t| t.elapsed() >= DROP_WARN_EVERY) {
            *last = Some(Instant::now());
            drop(last);
            tracing::warn!(
                subject = %self.subject,
                limit = self.limit,
                dropped_total = total,
                "internal request queue full: message dropped (the requester retries)"
            );
        }
    }

    fn add_stall(&self, d: Duration) {
        let us = d.as_micros() as u64;
        self.stall_us.fetch_add(us, Ordering::Relaxed);
        self.stalls.fetch_add(1, Ordering::Relaxed);
        self.totals.stall_us.fetch_add(us, Ordering::Relaxed);
        self.totals.stalls.fetch_add(1, Ordering::Relaxed);
    }
}

/// Who waits for a full recorder queue, and how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StallBound {
    /// A client connection: waits as long as the queue is over its mark
    /// (TCP flow control slows the publisher); ends when the connection or
    /// the subscription does.
    Client,
    /// A route or leaf: waits while the recorder makes progress, but not
    /// for one that took nothing for `STUCK_AFTER_MS`: the connection also
    /// carries Raft and replication traffic. The message stays queued.
    Peer,
}

/// Recorder stall: waits until `sub`'s queue is back under its mark (see
/// `StallBound`), adding the time waited to the queue's stall time.
pub(crate) async fn wait_local_drained(
    sub: &Subscription,
    bound: StallBound,
    cancel: &CancellationToken,
) {
    let Some(local) = &sub.local else {
        return;
    };
    let q = &local.q;
    let start = Instant::now();
    loop {
        let notified = q.drained.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if q.pending_bytes() <= q.mark()
            || q.ended.load(Ordering::Acquire)
            || sub.closed.load(Ordering::Acquire)
            || local.tx.is_closed()
            || cancel.is_cancelled()
        {
            break;
        }
        if bound == StallBound::Peer
            && q.now_ms()
                .saturating_sub(q.progress_ms.load(Ordering::Relaxed))
                > STUCK_AFTER_MS
        {
            break;
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            // Woken when the consumer brings the queue under the mark;
            // re-checked regularly for the end conditions above.
            _ = tokio::time::timeout(STALL_MAX, notified) => {}
        }
    }
    q.add_stall(start.elapsed());
}

impl Subscription {
    pub(crate) fn new(
        subject: String,
        queue: Option<String>,
        sid: Bytes,
        client: Arc<ClientShared>,
        local: Option<LocalSink>,
    ) -> Arc<Self> {
        Self::new_in(subject, queue, sid, client, local, None)
    }

    /// A subscription held in `acc`'s sublist rather than its
    /// connection's account (`None`: the connection's).
    pub(crate) fn new_in(
        subject: String,
        queue: Option<String>,
        sid: Bytes,
        client: Arc<ClientShared>,
        local: Option<LocalSink>,
        acc: Option<Arc<super::account::Account>>,
    ) -> Arc<Self> {
        Arc::new(Subscription {
            subject,
            queue,
            sid,
            client,
            local,
            acc,
            delivered: AtomicU64::new(0),
            max: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        })
    }

    /// Messages delivered so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Auto-unsubscribe limit (0 = none).
    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// The owning connection's id.
    pub fn client_id(&self) -> u64 {
        self.client.id
    }

    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// A message being delivered (borrowed from the publisher's frame).
pub(crate) struct MsgRef<'a> {
    pub subject: &'a Bytes,
    pub reply: Option<&'a Bytes>,
    pub headers: Option<&'a Bytes>,
    pub payload: &'a Bytes,
}

impl MsgRef<'_> {
    pub(crate) fn size(&self) -> usize {
        self.headers.map_or(0, |h| h.len()) + self.payload.len()
    }
}

/// Per-delivery counters accumulated by a publisher for the server totals.
#[derive(Default)]
pub(crate) struct OutTally {
    /// Deliveries in this batch.
    pub msgs: u64,
    /// Delivered payload bytes in this batch.
    pub bytes: u64,
}

/// xorshift64*: cheap randomness for queue member selection.
#[inline]
pub(crate) fn next_rand(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// Where a message being delivered came from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Origin<'a> {
    /// A client of this server (TCP or in-process): local subscribers,
    /// plus one copy to each route and leaf with matching interest.
    Client,
    /// A route: local subscribers and leaves that connect to us, never
    /// another route; queue groups only when named by the sender.
    Route(&'a [Bytes]),
    /// A leaf connection (`spoke`: we solicited it): local subscribers and
    /// other leaves; routes too unless it is our hub (the hub's cluster
    /// already has the message). Queue groups only when named.
    Leaf {
        /// The message came from our hub.
        spoke: bool,
        /// Queue groups the sender asked us to serve.
        queues: &'a [Bytes],
    },
    /// A stream import carrying a message into another account: its
    /// plain subscribers, local ones and leaf connections only — other
    /// nodes get the message in the exporter's account (the importer's
    /// nodes announce interest there), so passing it on here would deliver
    /// it twice. Its queue groups are served with the exporter's (see
    /// [`Shadow`]), never here.
    Import,
}

impl<'a> Origin<'a> {
    /// Whether a message of this origin may go to `to` (a route or leaf
    /// connection other than the publisher), as nats-server decides.
    fn may_reach(self, to: ClientKind) -> bool {
        match (self, to) {
            (Origin::Client, _) => true,
            (Origin::Route(_), ClientKind::Leaf { spoke }) => !spoke,
            (Origin::Route(_), _) => false,
            (Origin::Leaf { spoke, .. }, ClientKind::Route) => !spoke,
            (Origin::Leaf { .. }, _) => true,
            // A leaf is served here only: no other node delivers to it.
            (Origin::Import, ClientKind::Leaf { .. }) => true,
            (Origin::Import, _) => false,
        }
    }

    /// Queue groups named by a peer sender (`None`: a client, serve all).
    fn named_queues(self) -> Option<&'a [Bytes]> {
        match self {
            Origin::Client | Origin::Import => None,
            Origin::Route(q) | Origin::Leaf { queues: q, .. } => Some(q),
        }
    }
}

/// Whether a message on `subject` may go out on `peer`: a leaf connection
/// with permissions carries only what they let us send (a queue group
/// then picks another member).
fn leaf_may_send(peer: &ClientShared, subject: &[u8]) -> bool {
    if !matches!(peer.kind, ClientKind::Leaf { .. }) {
        return true;
    }
    match &*peer.leaf_perms.read() {
        None => true,
        Some(p) => std::str::from_utf8(subject).is_ok_and(|s| p.can_publish(s)),
    }
}

/// A member of the importing account's queue group that a stream import
/// feeds (nats-server's shadow subscription): it joins the exporter's
/// queue group of the same name, and receives the message on the
/// importer's subject. So a queue group of an importer gets one copy
/// cluster-wide, whichever node (ours or nats-server's) holds its members.
pub(crate) struct Shadow {
    /// The queue group's name.
    pub(crate) queue: String,
    /// The importer's subscription (a local client, or a leaf connection
    /// bound to the importer).
    pub(crate) sub: Arc<Subscription>,
    /// The importer-side subject.
    pub(crate) subject: Bytes,
}

/// Delivers `msg` to everything in `result`, with the importers' queue
/// members (`shadows`) counted in the queue groups of the same name: each
/// group, merged, gets one copy. Returns how many subscriptions (and
/// routes) received it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn deliver(
    server: &ServerInner,
    publisher: &Arc<ClientShared>,
    echo: bool,
    msg: &MsgRef<'_>,
    result: &MatchResult<Subscription>,
    flush: &mut FlushList,
    origin: Origin<'_>,
    shadows: &[Shadow],
) -> usize {
    let mut n = 0;
    // The account the matched peer interest belongs to: one lookup is in
    // one account's sublist, so every peer subscription agrees.
    let mut peer_account: Option<&Arc<super::account::Account>> = None;
    // A peer connection (route or leaf) that may take this message.
    let peer_ok = |sub: &Arc<Subscription>| {
        origin.may_reach(sub.client.kind)
            && !Arc::ptr_eq(&sub.client, publisher)
            && !sub.closed.load(Ordering::Acquire)
            && leaf_may_send(&sub.client, msg.subject)
    };
    for sub in &result.psubs {
        if sub.client.kind.is_peer() {
            if peer_ok(sub) {
                peer_account = peer_account.or(sub.acc.as_ref());
                flush.add_route(&sub.client, None);
                sub.client.track_reply(msg.reply);
            }
            continue;
        }
        if deliver_one(server, publisher, echo, sub, msg, flush) {
            n += 1;
        }
    }
    let serves = |name: &str| match origin {
        Origin::Import => false,
        _ => origin
            .named_queues()
            .is_none_or(|named| named.iter().any(|q| q[..] == *name.as_bytes())),
    };
    let mut shadow_groups: Vec<&str> = Vec::new();
    for (qi, (name, members)) in result.qsubs.iter().enumerate() {
        if !serves(name) {
            continue;
        }
        let extra: Vec<&Shadow> = shadows.iter().filter(|s| s.queue == *name).collect();
        let pick = pick_member(server, publisher, echo, msg, origin, members, &extra, flush);
        match pick {
            Picked::Local => n += 1,
            Picked::Peer(sub) => {
                peer_account = peer_account.or(sub.acc.as_ref());
                flush.add_route(&sub.client, Some(qi));
                sub.client.track_reply(msg.reply);
            }
            Picked::ShadowPeer(s) => n += send_to_shadow(server, msg, s, flush),
            Picked::None => {}
        }
    }
    // Importers' groups the exporter's account has no group of that name
    // for: their members alone.
    for s in shadows {
        let name = s.queue.as_str();
        if shadow_groups.contains(&name)
            || result.qsubs.iter().any(|(q, _)| q == name)
            || !serves(name)
        {
            continue;
        }
        shadow_groups.push(name);
        let extra: Vec<&Shadow> = shadows.iter().filter(|x| x.queue == name).collect();
        match pick_member(server, publisher, echo, msg, origin, &[], &extra, flush) {
            Picked::Local => n += 1,
            Picked::ShadowPeer(s) => n += send_to_shadow(server, msg, s, flush),
            Picked::Peer(_) | Picked::None => {}
        }
    }
    if !flush.route_targets.is_empty() {
        let account = peer_account.map_or(super::route::GLOBAL_ACCOUNT, |a| a.name.as_str());
        n += send_routed(server, account.as_bytes(), msg, result, flush);
    }
    n
}

/// What [`pick_member`] chose.
enum Picked<'a> {
    /// A local member took the message.
    Local,
    /// A route or leaf member of the group itself is to get it.
    Peer(&'a Arc<Subscription>),
    /// An importer's leaf member is to get it.
    ShadowPeer(&'a Shadow),
    /// No member could take it.
    None,
}

/// Picks one member of a queue group (its own `members` and the
/// importers' `shadows` of the same name), starting at a random one:
/// delivers to the first local member that takes the message; a route or
/// leaf member is chosen only when no local one did.
#[allow(clippy::too_many_arguments)]
fn pick_member<'a>(
    server: &ServerInner,
    publisher: &Arc<ClientShared>,
    echo: bool,
    msg: &MsgRef<'_>,
    origin: Origin<'_>,
    members: &'a [Arc<Subscription>],
    shadows: &[&'a Shadow],
    flush: &mut FlushList,
) -> Picked<'a> {
    let len = members.len() + shadows.len();
    if len == 0 {
        return Picked::None;
    }
    let member_ok = |sub: &Arc<Subscription>| {
        origin.may_reach(sub.client.kind)
            && !Arc::ptr_eq(&sub.client, publisher)
            && !sub.closed.load(Ordering::Acquire)
            && leaf_may_send(&sub.client, msg.subject)
    };
    let start = (next_rand(&mut flush.rng) % len as u64) as usize;
    let mut remote = Picked::None;
    for i in 0..len {
        let k = (start + i) % len;
        let (sub, shadow) = match members.get(k) {
            Some(sub) => (sub, None),
            None => {
                let s = shadows[k - members.len()];
                (&s.sub, Some(s))
            }
        };
        if sub.client.kind.is_peer() {
            if matches!(remote, Picked::None) && member_ok(sub) {
                remote = match shadow {
                    Some(s) => Picked::ShadowPeer(s),
                    None => Picked::Peer(sub),
                };
            }
            continue;
        }
        let took = match shadow {
            None => deliver_one(server, publisher, echo, sub, msg, flush),
            Some(s) => deliver_one(server, publisher, true, sub, &s.msg(msg), flush),
        };
        if took {
            return Picked::Local;
        }
    }
    remote
}

impl Shadow {
    /// `msg` on this member's (the importer's) subject.
    fn msg<'m>(&'m self, msg: &MsgRef<'m>) -> MsgRef<'m> {
        MsgRef {
            subject: &self.subject,
            reply: msg.reply,
            headers: msg.headers,
            payload: msg.payload,
        }
    }
}

/// Sends `msg` to an importer's leaf member `s` (on the importer's
/// subject, naming its group) right away; the exporter's own route
/// targets collected so far stay for the end of the delivery.
fn send_to_shadow(
    server: &ServerInner,
    msg: &MsgRef<'_>,
    s: &Shadow,
    flush: &mut FlushList,
) -> usize {
    let pending = std::mem::take(&mut flush.route_targets);
    flush.add_route(&s.sub.client, Some(0));
    s.sub.client.track_reply(msg.reply);
    let one = MatchResult {
        psubs: Vec::new(),
        qsubs: vec![(s.queue.clone(), vec![s.sub.clone()])],
    };
    let account = s.sub.acc.as_ref().map_or("", |a| a.name.as_str());
    let sent = send_routed(server, account.as_bytes(), &s.msg(msg), &one, flush);
    flush.route_targets = pending;
    sent
}

/// Appends the message as `RMSG`/`HMSG` (`LMSG`/`HMSG` on a leaf) to every
/// peer collected in `flush.route_targets` (then cleared). A peer whose
/// outbound buffer overflows `max_pending` is closed as a slow route or
/// leaf (a solicited one reconnects); the publisher is never blocked
/// beyond the 75 % stall.
fn send_routed(
    server: &ServerInner,
    account: &[u8],
    msg: &MsgRef<'_>,
    result: &MatchResult<Subscription>,
    flush: &mut FlushList,
) -> usize {
    let mut targets = std::mem::take(&mut flush.route_targets);
    let mut sent = 0;
    let size = msg.size();
    for (route, qidx) in targets.drain(..) {
        let queues: Vec<&[u8]> = qidx
            .iter()
            .filter_map(|&i| result.qsubs.get(i).map(|(q, _)| q.as_bytes()))
            .collect();
        let leaf = matches!(route.kind, ClientKind::Leaf { .. });
        let dialect = if leaf {
            proto::route::Dialect::Leaf
        } else if route.pinned_route.load(Ordering::Relaxed) {
            proto::route::Dialect::Pinned
        } else {
            proto::route::Dialect::Route
        };
        let mut o = route.out.lock();
        if o.closed {
            continue;
        }
        route.note_work(&o);
        proto::route::put_msg(
            &mut o.buf,
            dialect,
            account,
            msg.subject,
            msg.reply.map(|r| &r[..]),
            &queues,
            msg.headers.map(|h| &h[..]),
            msg.payload,
        );
        if o.buf.len() + o.inflight > route.max_pending {
            o.closed = true;
            o.buf = BytesMut::new();
            drop(o);
            if leaf {
                if let Some(l) = server.leafs.as_ref() {
                    l.stats.slow_leafs.fetch_add(1, Ordering::Relaxed);
                }
            } else if let Some(r) = server.routes.as_ref() {
                r.stats.slow_routes.fetch_add(1, Ordering::Relaxed);
            }
            if leaf {
                tracing::warn!(
                    cid = route.id,
                    "slow leafnode: outbound buffer over max_pending, closing"
                );
            } else {
                tracing::warn!(
                    rid = route.id,
                    "slow route: outbound buffer over max_pending, closing (it reconnects)"
                );
            }
            route.cancel.cancel();
            route.notify.notify_one();
            continue;
        }
        o.out_msgs += 1;
        o.out_bytes += size as u64;
        let stall = (o.buf.len() + o.inflight) * 4 > route.max_pending * 3;
        if !o.flush_queued {
            o.flush_queued = true;
            flush.push(route.clone());
        }
        if stall {
            flush.add_stalled(&route);
        }
        drop(o);
        let tally = if leaf {
            &mut flush.leafed
        } else {
            &mut flush.routed
        };
        tally.msgs += 1;
        tally.bytes += size as u64;
        sent += 1;
    }
    // Keep the allocation for the next message.
    flush.route_targets = targets;
    sent
}

/// Delivers to one subscription; false if it could not take the message.
fn deliver_one(
    server: &ServerInner,
    publisher: &Arc<ClientShared>,
    echo: bool,
    sub: &Arc<Subscription>,
    msg: &MsgRef<'_>,
    flush: &mut FlushList,
) -> bool {
    if sub.closed.load(Ordering::Acquire) {
        return false;
    }
    if !echo && Arc::ptr_eq(&sub.client, publisher) {
        return false;
    }
    let max = sub.max.load(Ordering::Relaxed);
    let nth = sub.delivered.fetch_add(1, Ordering::Relaxed) + 1;
    if max > 0 && nth > max {
        return false;
    }
    let client = &sub.client;
    let size = if let Some(local) = &sub.local {
        let size = msg.size();
        if let Some(handle) = &local.inline {
            handle(&msg.subject[..], msg.payload);
            client.stats.out_msgs.fetch_add(1, Ordering::Relaxed);
            client
                .stats
                .out_bytes
                .fetch_add(size as u64, Ordering::Relaxed);
            return true;
        }
        let charge = local_charge(msg.subject.len(), msg.reply.map_or(0, |r| r.len()), size);
        let q = &local.q;
        // An empty queue takes any message (one reply may be as large as
        // the limit: replication batches, snapshots).
        let queued_now = q.pending_bytes();
        if q.policy == FullPolicy::Drop && queued_now > 0 && queued_now + charge > q.limit {
            // Taken, then lost: the requester times out and retries (a
            // "no responders" answer would be wrong, someone is there).
            q.drop_one();
            return true;
        }
        let m = LocalMsg {
            subject: msg.subject.clone(),
            reply: msg.reply.cloned(),
            headers: msg.headers.cloned(),
            payload: msg.payload.clone(),
        };
        let queued = q.push(charge);
        if local.tx.send(m).is_err() {
            q.unpush(charge);
            return false;
        }
        if q.policy == FullPolicy::Stall
            && queued > q.mark()
            && !flush.local_stalled.iter().any(|s| Arc::ptr_eq(s, sub))
        {
            flush.local_stalled.push(sub.clone());
        }
        client.stats.out_msgs.fetch_add(1, Ordering::Relaxed);
        client
            .stats
            .out_bytes
            .fetch_add(size as u64, Ordering::Relaxed);
        size
    } else {
        client.track_reply(msg.reply);
        let with_headers = msg.headers.is_some() && client.headers.load(Ordering::Relaxed);
        let size = if with_headers {
            msg.size()
        } else {
            msg.payload.len()
        };
        let mut o = client.out.lock();
        if o.closed {
            return false;
        }
        client.note_work(&o);
        let reply = msg.reply.map(|r| &r[..]);
        match msg.headers {
            Some(h) if with_headers => {
                proto::encode_hmsg(&mut o.buf, msg.subject, &sub.sid, reply, h, msg.payload)
            }
            _ => proto::encode_msg(&mut o.buf, msg.subject, &sub.sid, reply, msg.payload),
        }
        if o.buf.len() + o.inflight > client.max_pending {
            // Slow consumer: close this client only.
            o.closed = true;
            o.buf = BytesMut::new();
            drop(o);
            server.slow_consumers.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                cid = client.id,
                "slow consumer detected: max pending exceeded"
            );
            client.cancel.cancel();
            client.notify.notify_one();
            return false;
        }
        o.out_msgs += 1;
        o.out_bytes += size as u64;
        let stall = (o.buf.len() + o.inflight) * 4 > client.max_pending * 3;
        if !o.flush_queued {
            o.flush_queued = true;
            flush.push(client.clone());
        }
        // Checked on every message, not only the first of the batch to
        // reach this receiver: a batch may cross the 75 % mark part way.
        if stall {
            flush.add_stalled(client);
        }
        size
    };
    flush.tally.msgs += 1;
    flush.tally.bytes += size as u64;
    if max > 0 && nth == max {
        server.remove_subscription(sub);
    }
    true
}

/// The writer task: drains the outbound buffer to the socket.
pub(crate) async fn write_loop<W: AsyncWrite + Unpin>(
    client: Arc<ClientShared>,
    mut w: W,
    deadline: Duration,
    server: Arc<ServerInner>,
) {
    let mut spare = BytesMut::with_capacity(4096);
    let mut switch: Option<(usize, Arc<AtomicBool>)> = None;
    enum Step {
        Wait,
        Write,
        Exit,
    }
    loop {
        let step = {
            let mut o = client.out.lock();
            if o.buf.is_empty() {
                if o.close_after_flush || client.cancel.is_cancelled() {
                    Step::Exit
                } else {
                    Step::Wait
                }
            } else {
                std::mem::swap(&mut o.buf, &mut spare);
                o.inflight = spare.len();
                switch = o.switch.take();
                Step::Write
            }
        };
        match step {
            Step::Exit => break,
            Step::Wait => {
                tokio::select! {
                    _ = client.notify.notified() => {}
                    _ = client.cancel.cancelled() => {}
                }
                let (flushing, idle) = {
                    let o = client.out.lock();
                    (o.close_after_flush, o.buf.is_empty())
                };
                if client.cancel.is_cancelled() && !flushing {
                    break;
                }
                // Woken with nothing to write: the transport may have
                // frames of its own (see `wake_writer`).
                if idle
                    && tokio::time::timeout(deadline, w.flush())
                        .await
                        .map_or(true, |r| r.is_err())
                {
                    break;
                }
                // Progress is measured from when new work arrives, so an
                // idle period never makes a live receiver look stuck.
                client.last_drain_ms.store(
                    client.started.elapsed().as_millis() as u64,
                    Ordering::Relaxed,
                );
                continue;
            }
            Step::Write => {}
        }
        // Write in bounded pieces so pending bytes, the write deadline and
        // stalled producers all see progress while a big backlog drains.
        let mut off = 0;
        let mut failed = false;
        while off < spare.len() {
            let mut end = (off + WRITE_PIECE).min(spare.len());
            // A transport switch applies from its byte on: pieces stop there.
            if let Some((at, on)) = &switch {
                if *at <= off {
                    on.store(true, Ordering::Release);
                    switch = None;
                } else if *at < end {
                    end = *at;
                }
            }
            let res = tokio::select! {
                r = tokio::time::timeout(deadline, w.write_all(&spare[off..end])) => r,
                // Closed meanwhile (slow consumer, shutdown): stop at once.
                _ = client.cancel.cancelled() => {
                    failed = true;
                    break;
                }
            };
            match res {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    failed = true;
                    break;
                }
                Err(_) => {
                    server.slow_consumers.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        cid = client.id,
                        "slow consumer detected: write deadline exceeded"
                    );
                    failed = true;
                    break;
                }
            }
            off = end;
            client.out.lock().inflight = spare.len() - off;
            client.last_drain_ms.store(
                client.started.elapsed().as_millis() as u64,
                Ordering::Relaxed,
            );
            client.drained.notify_waiters();
        }
        // A switch after the last byte applies to what comes next.
        if let Some((_, on)) = switch.take() {
            on.store(true, Ordering::Release);
        }
        if failed
            || tokio::time::timeout(deadline, w.flush())
                .await
                .map_or(true, |r| r.is_err())
        {
            break;
        }
        spare.clear();
        if spare.capacity() > 4 * 1024 * 1024 {
            // Do not keep a huge buffer after a burst.
            spare = BytesMut::with_capacity(4096);
        }
    }
    client.drained.notify_waiters();
    // Bounded: a TLS close_notify cannot be written to a peer that stopped reading.
    let _ = tokio::time::timeout(Duration::from_secs(1), w.shutdown()).await;
    {
        let mut o = client.out.lock();
        o.closed = true;
        o.buf = BytesMut::new();
        o.inflight = 0;
    }
    client.cancel.cancel();
}

/// Connection-level options fixed by CONNECT.
struct ConnState {
    connected: bool,
    verbose: bool,
    pedantic: bool,
    echo: bool,
    headers: bool,
    no_responders: bool,
    perms: Option<Arc<PermissionSet>>,
}

/// The reader side of one TCP connection.
pub(crate) struct Reader {
    client: Arc<ClientShared>,
    server: Arc<ServerInner>,
    parser: Parser,
    st: ConnState,
    nonce: Option<String>,
    /// `connect_urls_gen` when our INFO was sent.
    urls_gen: u64,
    cache: MatchCache,
    perm_cache: HashMap<Bytes, bool>,
    flush: FlushList,
    in_msgs: u64,
    in_bytes: u64,
    /// The reloadable settings this reader applies, and the reload
    /// generation they belong to.
    live: Arc<Live>,
    live_gen: u64,
    /// The connection's account (`$G` until CONNECT binds another).
    account: Arc<super::account::Account>,
    /// The subscription and payload limits of this connection's user or
    /// account: in operator mode the user JWT's (lowered by the
    /// account's), else its account's `limits`; `None` = unlimited.
    own_max_subs: Option<usize>,
    own_max_payload: Option<usize>,
    /// Credentials a WebSocket client brought in cookies, for a CONNECT
    /// without its own.
    cookies: Option<Box<super::ws::proto::WsCookies>>,
}

/// What to do after an operation.
enum Flow {
    Continue,
    Close,
    /// CONNECT passed its checks; credentials must be verified (possibly
    /// slow: bcrypt runs on the blocking pool).
    Authenticate(Box<ConnectOptions>),
}

impl Reader {
    pub(crate) fn new(
        client: Arc<ClientShared>,
        server: Arc<ServerInner>,
        nonce: Option<String>,
        urls_gen: u64,
    ) -> Reader {
        let live_gen = server.reload_gen.load(Ordering::SeqCst);
        let live = server.live();
        let parser = Parser::new(live.opts.max_control_line, live.opts.max_payload);
        let account = server.accounts.global().clone();
        Reader {
            account,
            client,
            server,
            parser,
            // Before CONNECT nats-server applies its defaults: verbose and
            // pedantic on.
            st: ConnState {
                connected: false,
                verbose: true,
                pedantic: true,
                echo: true,
                headers: false,
                no_responders: false,
                perms: None,
            },
            nonce,
            urls_gen,
            cache: MatchCache::new(CONN_CACHE_MAX),
            perm_cache: HashMap::new(),
            flush: FlushList::new(),
            in_msgs: 0,
            in_bytes: 0,
            live,
            live_gen,
            own_max_subs: None,
            own_max_payload: None,
            cookies: None,
        }
    }

    /// Credentials from the WebSocket upgrade's cookies: a CONNECT field
    /// left out takes the cookie's value, as in nats-server.
    pub(crate) fn set_cookies(&mut self, cookies: super::ws::proto::WsCookies) {
        self.cookies = (!cookies.is_empty()).then(|| Box::new(cookies));
    }

    /// The parser's payload limit: the server's, or a JWT user's when
    /// lower.
    fn apply_payload_limit(&mut self) {
        let o = &self.live.opts;
        let max = self
            .own_max_payload
            .map_or(o.max_payload, |p| p.min(o.max_payload));
        self.parser.set_limits(o.max_control_line, max);
    }

    /// Takes the settings of a reload that happened since the last read:
    /// limits, and the permissions the reload gave this client.
    fn refresh_live(&mut self) {
        let g = self.server.reload_gen.load(Ordering::SeqCst);
        if g == self.live_gen {
            return;
        }
        self.live_gen = g;
        self.live = self.server.live();
        self.apply_payload_limit();
        if self.st.connected {
            if let Some(a) = self.client.auth.lock().as_ref() {
                self.st.perms = a.perms.clone();
            }
            self.perm_cache.clear();
            self.client.set_reply_perms(self.st.perms.as_ref());
        }
    }

    /// Reads and applies operations until the connection ends.
    pub(crate) async fn run<R: AsyncRead + Unpin>(mut self, mut r: R) {
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        let cancel = self.client.cancel.clone();
        'outer: loop {
            let need = self.parser.needed();
            if need > buf.capacity() {
                // A large payload is arriving: make room for all of it once.
                buf.reserve(need - buf.len());
            } else if buf.capacity() - buf.len() < 4096 {
                buf.reserve(READ_CHUNK);
            }
            let n = tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                r = r.read_buf(&mut buf) => match r {
                    Ok(0) | Err(_) => {
                        self.client.close_now();
                        break;
                    }
                    Ok(n) => n,
                },
            };
            let _ = n;
            self.client.touch();
            self.refresh_live();
            loop {
                if self.flush.has_local_stall() {
                    // A recorder queue is over its mark: stop reading (TCP
                    // flow control slows the publisher) until it drains.
                    self.end_batch();
                    for s in self.flush.take_local_stalled() {
                        wait_local_drained(&s, StallBound::Client, &cancel).await;
                    }
                }
                match self.parser.parse(&mut buf) {
                    Ok(Parsed::Incomplete) => break,
                    Ok(Parsed::Op(op)) => match self.apply(op) {
                        Flow::Continue => {}
                        Flow::Close => {
                            self.end_batch();
                            break 'outer;
                        }
                        Flow::Authenticate(co) => {
                            if let Flow::Close = self.authenticate(co).await {
                                self.end_batch();
                                break 'outer;
                            }
                        }
                    },
                    Err(e) => {
                        tracing::debug!(cid = self.client.id, error = %e, "protocol error");
                        self.end_batch();
                        self.client.close_with_err(e.err_text());
                        break 'outer;
                    }
                }
            }
            self.end_batch();
            for s in self.flush.take_local_stalled() {
                wait_local_drained(&s, StallBound::Client, &cancel).await;
            }
            for c in self.flush.take_stalled() {
                wait_drained(&c).await;
            }
        }
        if self.st.connected {
            super::sysreq::client_event(&self.server, &self.client, false);
        }
        self.server.remove_client(&self.client);
        if self.st.connected {
            super::sysreq::account_conns_changed(&self.server, &self.client);
        }
    }

    fn end_batch(&mut self) {
        self.flush.flush();
        self.flush.count_routed(&self.server);
        let s = &self.server.stats;
        if self.in_msgs > 0 {
            s.in_msgs.fetch_add(self.in_msgs, Ordering::Relaxed);
            s.in_bytes.fetch_add(self.in_bytes, Ordering::Relaxed);
            self.client
                .stats
                .in_msgs
                .fetch_add(self.in_msgs, Ordering::Relaxed);
            self.client
                .stats
                .in_bytes
                .fetch_add(self.in_bytes, Ordering::Relaxed);
            self.in_msgs = 0;
            self.in_bytes = 0;
        }
        let tally = std::mem::take(&mut self.flush.tally);
        if tally.msgs > 0 {
            s.out_msgs.fetch_add(tally.msgs, Ordering::Relaxed);
            s.out_bytes.fetch_add(tally.bytes, Ordering::Relaxed);
        }
    }

    fn send(&mut self, data: &[u8]) {
        self.client.send_raw(data, &mut self.flush);
    }

    fn send_err(&mut self, text: &str) {
        let mut b = BytesMut::with_capacity(text.len() + 10);
        proto::encode_err(&mut b, text);
        self.send(&b);
    }

    fn ok(&mut self) {
        if self.st.verbose {
            self.send(proto::OK);
        }
    }

    fn apply(&mut self, op: ClientOp) -> Flow {
        if !self.st.connected
            && !matches!(op, ClientOp::Connect(_))
            && self
                .server
                .client_auth_required(self.client.meta.lock().websocket)
        {
            self.client.close_with_err(Some("Authorization Violation"));
            self.server.auth_failures.fetch_add(1, Ordering::Relaxed);
            return Flow::Close;
        }
        match op {
            ClientOp::Ping => {
                self.send(proto::PONG);
                Flow::Continue
            }
            ClientOp::Pong => {
                self.client.pings_out.store(0, Ordering::Relaxed);
                self.client.note_pong();
                Flow::Continue
            }
            ClientOp::Info | ClientOp::Ok => Flow::Continue,
            ClientOp::Err(_) => {
                self.client.close_with_err(None);
                Flow::Close
            }
            ClientOp::Connect(json) => self.connect(&json),
            ClientOp::Pub {
                subject,
                reply,
                payload,
            } => self.publish(subject, reply, None, payload),
            ClientOp::HPub {
                subject,
                reply,
                headers,
                payload,
            } => {
                if !self.st.headers {
                    self.client.close_with_err(None);
                    return Flow::Close;
                }
                self.publish(subject, reply, Some(headers), payload)
            }
            ClientOp::Sub {
                subject,
                queue,
                sid,
            } => {
                self.subscribe(&subject, queue.as_deref(), &sid);
                Flow::Continue
            }
            ClientOp::Unsub { sid, max } => {
                self.unsubscribe(&sid, max);
                self.ok();
                Flow::Continue
            }
        }
    }

    fn connect(&mut self, json: &[u8]) -> Flow {
        let mut co: ConnectOptions = match serde_json::from_slice(json) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(cid = self.client.id, error = %e, "bad CONNECT json");
                self.client.close_with_err(None);
                return Flow::Close;
            }
        };
        if co.protocol < 0 || co.protocol > 1 {
            self.client.close_with_err(Some("invalid client protocol"));
            return Flow::Close;
        }
        if co.no_responders && !co.headers {
            self.client
                .close_with_err(Some("no responders requires headers support"));
            return Flow::Close;
        }
        if co.account.is_some() || co.new_account.is_some() {
            self.client.close_with_err(Some("Authorization Violation"));
            return Flow::Close;
        }
        if let Some(c) = &self.cookies {
            let fill = |field: &mut Option<String>, cookie: &Option<String>| {
                if field.as_deref().is_none_or(str::is_empty) && cookie.is_some() {
                    field.clone_from(cookie);
                }
            };
            fill(&mut co.jwt, &c.jwt);
            fill(&mut co.user, &c.user);
            fill(&mut co.pass, &c.pass);
            fill(&mut co.auth_token, &c.token);
        }
        let gen = self.server.reload_gen.load(Ordering::SeqCst);
        if self
            .server
            .client_auth_required(self.client.meta.lock().websocket)
        {
            return Flow::Authenticate(Box::new(co));
        }
        self.finish_connect(co, None, String::new(), None);
        if self.server.reload_gen.load(Ordering::SeqCst) != gen {
            // A reload (which may have turned authentication on) ran
            // while this client was not yet counted as connected.
            self.recheck_self();
            if self.client.is_closed() {
                return Flow::Close;
            }
        }
        Flow::Continue
    }

    /// Applies the current configuration to this client as a reload does
    /// (the rare case of a reload racing its CONNECT).
    fn recheck_self(&mut self) {
        let live = self.server.live();
        super::reload::recheck_client(&self.server, &self.client, &live);
        if let Some(a) = self.client.auth.lock().as_ref() {
            self.st.perms = a.perms.clone();
        }
        self.perm_cache.clear();
        self.client.set_reply_perms(self.st.perms.as_ref());
    }

    /// Verifies CONNECT credentials; bcrypt hashes are checked on the
    /// blocking pool so a slow hash never stalls a runtime worker. A reload
    /// that lands during the check makes it run again with the new users;
    /// one that lands between the check and the client counting as
    /// connected may have skipped this client, so it re-checks itself.
    async fn authenticate(&mut self, co: Box<ConnectOptions>) -> Flow {
        if let Some(op) = self.server.operator.clone() {
            // An account not stored here may be known to a route peer.
            if let Some(key) = co.jwt.as_deref().and_then(|j| op.account_to_fetch(j)) {
                super::claims::fetch(&self.server, &key).await;
            }
            return self.authenticate_jwt(&op, co);
        }
        let mut co = co;
        let (result, gen) = loop {
            let gen = self.server.reload_gen.load(Ordering::SeqCst);
            let websocket = self.client.meta.lock().websocket;
            let auth = self.server.live().client_authenticator(websocket).cloned();
            let Some(auth) = auth.filter(|a| a.required()) else {
                self.finish_connect(*co, None, String::new(), None);
                if self.server.reload_gen.load(Ordering::SeqCst) != gen {
                    self.recheck_self();
                    if self.client.is_closed() {
                        return Flow::Close;
                    }
                }
                return Flow::Continue;
            };
            let bcrypt = auth.uses_bcrypt() && co.pass.is_some();
            let nonce = self.nonce.clone();
            let kind = self.client.connection_type();
            let check = move |co: Box<ConnectOptions>| {
                let creds = Credentials {
                    user: co.user.as_deref(),
                    pass: co.pass.as_deref(),
                    auth_token: co.auth_token.as_deref(),
                    nkey: co.nkey.as_deref(),
                    sig: co.sig.as_deref(),
                };
                let r = auth.authenticate_identity(&creds, nonce.as_deref(), kind);
                (r, co)
            };
            let (result, back) = if bcrypt {
                match tokio::task::spawn_blocking(move || check(co)).await {
                    Ok(v) => v,
                    Err(_) => {
                        self.client.close_with_err(Some("Authorization Violation"));
                        return Flow::Close;
                    }
                }
            } else {
                check(co)
            };
            co = back;
            if self.server.reload_gen.load(Ordering::SeqCst) == gen {
                break (result, gen);
            }
        };
        match result {
            Ok(outcome) => {
                let who = match outcome.identity {
                    super::auth::Identity::User(u) => u,
                    super::auth::Identity::Nkey(k) => k,
                    super::auth::Identity::Token | super::auth::Identity::Anonymous => {
                        String::new()
                    }
                };
                let account = match outcome.account.as_deref() {
                    None => None,
                    Some(name) => match self.server.accounts.get(name) {
                        Some(a) => Some(a.clone()),
                        // Accounts are checked against users at start-up;
                        // refuse rather than fall back to `$G`.
                        None => {
                            self.server.auth_failures.fetch_add(1, Ordering::Relaxed);
                            self.client.close_with_err(Some("Authorization Violation"));
                            return Flow::Close;
                        }
                    },
                };
                if let Some(a) = &account {
                    let limits = a.limits();
                    if self.account_full(a, limits.max_connections) {
                        return Flow::Close;
                    }
                    self.own_max_subs = limits.max_subscriptions;
                    self.own_max_payload = limits.max_payload;
                    self.apply_payload_limit();
                }
                self.finish_connect(*co, outcome.permissions, who, account);
                if self.server.reload_gen.load(Ordering::SeqCst) != gen {
                    // Rare (a reload between the check and now): checked
                    // inline, even when that means a bcrypt hash.
                    self.recheck_self();
                    if self.client.is_closed() {
                        return Flow::Close;
                    }
                }
                Flow::Continue
            }
            Err(e) => {
                tracing::debug!(cid = self.client.id, error = %e, "authorization violation");
                self.server.auth_failures.fetch_add(1, Ordering::Relaxed);
                self.client.close_with_err(Some("Authorization Violation"));
                Flow::Close
            }
        }
    }

    /// Whether `account` already has `max` client connections besides
    /// this one; if so, this one is refused with nats-server's error.
    fn account_full(&self, account: &Arc<super::account::Account>, max: Option<usize>) -> bool {
        let Some(max) = max else {
            return false;
        };
        let n = self
            .server
            .clients
            .lock()
            .values()
            .filter(|c| c.id != self.client.id && c.kind == ClientKind::Tcp)
            .filter(|c| c.connected.load(Ordering::Acquire) && !c.is_closed())
            .filter(|c| c.account.get().is_some_and(|a| Arc::ptr_eq(a, account)))
            .count();
        if n < max {
            return false;
        }
        self.client
            .close_with_err(Some("maximum account active connections exceeded"));
        true
    }

    /// Operator mode: verifies the user JWT and nonce signature, binds the
    /// client to the JWT's account with its permissions and limits, checks
    /// the account's connection limit and arms the expiry timer.
    fn authenticate_jwt(
        &mut self,
        op: &super::resolver::OperatorState,
        co: Box<ConnectOptions>,
    ) -> Flow {
        let websocket = self.client.meta.lock().websocket;
        let ip = self.client.addr.map(|a| a.ip());
        let now = super::jwt::unix_now();
        let result = match co.jwt.as_deref() {
            Some(jwt) => op.authenticate(
                jwt,
                co.sig.as_deref(),
                self.nonce.as_deref(),
                websocket,
                ip,
                now,
            ),
            None => Err(super::resolver::JwtAuthError::NoJwt),
        };
        let account = result.and_then(|u| {
            // Accounts pushed after start-up are stored but not wired.
            match self.server.accounts.get(&u.account) {
                Some(a) => Ok((u, a.clone())),
                None => Err(super::resolver::JwtAuthError::UnknownAccount(u.account)),
            }
        });
        let (user, account) = match account {
            Ok(v) => v,
            Err(e) => {
                use super::resolver::JwtAuthError::{BadSrc, OutsideTimes};
                if matches!(e, BadSrc(_) | OutsideTimes) {
                    // nats-server logs these two as errors: the user is
                    // valid, but not here or not now.
                    tracing::warn!(cid = self.client.id, error = %e, "authorization violation");
                } else {
                    tracing::debug!(cid = self.client.id, error = %e, "authorization violation");
                }
                self.server.auth_failures.fetch_add(1, Ordering::Relaxed);
                self.client.close_with_err(Some("Authorization Violation"));
                return Flow::Close;
            }
        };
        if self.account_full(&account, op.max_connections(&user.account)) {
            return Flow::Close;
        }
        self.own_max_subs = user.max_subs;
        self.own_max_payload = user.max_payload;
        self.apply_payload_limit();
        let jwt = co.jwt.clone();
        self.finish_connect(
            *co,
            user.permissions.clone(),
            user.user.clone(),
            Some(account),
        );
        if let Some(a) = self.client.auth.lock().as_mut() {
            a.jwt = jwt;
        }
        if let Some(exp) = user.expires {
            let at = std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(exp).unwrap_or(0));
            let wait = at
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            let client = self.client.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = client.cancel.cancelled() => {}
                    _ = tokio::time::sleep(wait) => {
                        client.close_with_err(Some("User Authentication Expired"));
                    }
                }
            });
        }
        Flow::Continue
    }

    fn finish_connect(
        &mut self,
        co: ConnectOptions,
        perms: Option<Arc<PermissionSet>>,
        who: String,
        account: Option<Arc<super::account::Account>>,
    ) {
        if let Some(a) = account {
            // Bound once: a second CONNECT cannot move a connection (and
            // its subscriptions) to another account.
            if self.client.account.set(a.clone()).is_ok() {
                self.account = a;
            }
        }
        self.st = ConnState {
            connected: true,
            verbose: co.verbose,
            pedantic: co.pedantic,
            echo: co.echo,
            headers: co.headers,
            no_responders: co.no_responders,
            perms,
        };
        self.perm_cache.clear();
        self.client.set_reply_perms(self.st.perms.as_ref());
        *self.client.auth.lock() = Some(ConnAuth {
            user: co.user.clone(),
            pass: co.pass.clone(),
            auth_token: co.auth_token.clone(),
            nkey: co.nkey.clone(),
            sig: co.sig.clone(),
            nonce: self.nonce.clone(),
            perms: self.st.perms.clone(),
            jwt: None,
        });
        self.client.headers.store(co.headers, Ordering::Relaxed);
        self.client.connected.store(true, Ordering::SeqCst);
        self.client.connected_notify.notify_one();
        {
            let mut m = self.client.meta.lock();
            m.name = co.name.unwrap_or_default();
            m.lang = co.lang.unwrap_or_default();
            m.version = co.version.unwrap_or_default();
            m.authorized_user = who;
        }
        self.ok();
        super::sysreq::client_event(&self.server, &self.client, true);
        super::sysreq::account_conns_changed(&self.server, &self.client);
        // Routes came or went between our INFO and this CONNECT: the
        // broadcast skipped this client, so it gets the update now.
        if self.server.connect_urls_gen.load(Ordering::SeqCst) != self.urls_gen
            && !self.client.meta.lock().websocket
        {
            let frame = self.server.async_info_frame();
            self.send(&frame);
        }
    }

    fn can_publish(&mut self, subject: &Bytes) -> bool {
        let Some(perms) = &self.st.perms else {
            return true;
        };
        if let Some(&ok) = self.perm_cache.get(&subject[..]) {
            return ok || self.client.answers_reply(subject);
        }
        let ok = std::str::from_utf8(subject).is_ok_and(|s| perms.can_publish(s));
        if self.perm_cache.len() >= PERM_CACHE_MAX {
            self.perm_cache.clear();
        }
        self.perm_cache.insert(Bytes::copy_from_slice(subject), ok);
        ok || self.client.answers_reply(subject)
    }

    fn publish(
        &mut self,
        subject: Bytes,
        reply: Option<Bytes>,
        headers: Option<Bytes>,
        payload: Bytes,
    ) -> Flow {
        let size = headers.as_ref().map_or(0, |h| h.len()) + payload.len();
        self.in_msgs += 1;
        self.in_bytes += size as u64;
        if self.st.pedantic
            && !std::str::from_utf8(&subject).is_ok_and(super::subject::is_valid_literal_subject)
        {
            self.send_err("Invalid Publish Subject");
        }
        self.ok();
        // As nats-server: the mapped subject is the one published (and
        // checked against the permissions).
        let subject = match self.account.map_subject(&self.server, &subject) {
            None => subject,
            Some(Mapped::To(s)) => Bytes::from(s),
            Some(Mapped::Dropped) => return Flow::Continue,
        };
        if !self.can_publish(&subject) {
            let text = format!(
                "Permissions Violation for Publish to \"{}\"",
                String::from_utf8_lossy(&subject)
            );
            self.send_err(&text);
            return Flow::Continue;
        }
        if subject.starts_with(b"$SYS.REQ.")
            && super::sysreq::system_import(
                &self.server,
                &self.account,
                &self.client,
                self.st.perms.as_deref(),
                &subject,
                reply.as_ref(),
                &payload,
            )
        {
            return Flow::Continue;
        }
        let Some(result) = self.cache.lookup(&self.account.sublist, &subject) else {
            return Flow::Continue;
        };
        let msg = MsgRef {
            subject: &subject,
            reply: reply.as_ref(),
            headers: headers.as_ref(),
            payload: &payload,
        };
        let n = super::account::deliver_in(
            &self.server,
            &self.account,
            &self.client,
            self.st.echo,
            &msg,
            &result,
            &mut self.flush,
            Origin::Client,
        );
        if n == 0 && self.st.no_responders {
            if let Some(reply) = &reply {
                self.no_responders(reply);
            }
        }
        Flow::Continue
    }

    /// Sends the 503 status to the publisher's own subscription on `reply`.
    fn no_responders(&mut self, reply: &Bytes) {
        let Ok(r) = std::str::from_utf8(reply) else {
            return;
        };
        let result = self.account.sublist.match_subject(r);
        let Some(sub) = result
            .psubs
            .iter()
            .find(|s| Arc::ptr_eq(&s.client, &self.client) && s.local.is_none())
        else {
            return;
        };
        let mut b = BytesMut::with_capacity(64 + reply.len());
        proto::encode_hmsg(&mut b, reply, &sub.sid, None, b"NATS/1.0 503\r\n\r\n", b"");
        self.send(&b);
    }

    fn subscribe(&mut self, subject: &[u8], queue: Option<&[u8]>, sid: &[u8]) {
        let (Ok(subj), Ok(q)) = (
            std::str::from_utf8(subject),
            queue.map(std::str::from_utf8).transpose(),
        ) else {
            self.send_err("Invalid Subject");
            return;
        };
        if let Some(perms) = &self.st.perms {
            if !perms.can_subscribe(subj, q) {
                let text = match q {
                    Some(q) => format!(
                        "Permissions Violation for Subscription to \"{subj}\" using queue \"{q}\""
                    ),
                    None => format!("Permissions Violation for Subscription to \"{subj}\""),
                };
                self.send_err(&text);
                return;
            }
        }
        if self.client.subs.lock().contains_key(sid) {
            // Duplicate sid: keep the original subscription.
            self.ok();
            return;
        }
        let max_subs = match (self.live.opts.max_subscriptions, self.own_max_subs) {
            (0, None) => None,
            (0, Some(j)) => Some(j),
            (m, None) => Some(m),
            (m, Some(j)) => Some(m.min(j)),
        };
        if max_subs.is_some_and(|m| self.client.subs.lock().len() >= m) {
            self.send_err("maximum subscriptions exceeded");
            return;
        }
        let sub = Subscription::new(
            subj.to_string(),
            q.map(str::to_string),
            Bytes::copy_from_slice(sid),
            self.client.clone(),
            None,
        );
        if self.server.add_subscription(&sub).is_err() {
            self.send_err("Invalid Subject");
            return;
        }
        self.client.subs.lock().insert(sub.sid.clone(), sub);
        self.ok();
    }

    fn unsubscribe(&mut self, sid: &[u8], max: Option<u64>) {
        let sub = self.client.subs.lock().get(sid).cloned();
        let Some(sub) = sub else {
            return;
        };
        match max {
            Some(m) if m > sub.delivered() => sub.max.store(m, Ordering::Relaxed),
            _ => self.server.remove_subscription(&sub),
        }
    }
}

/// Periodic server PINGs, stale detection and the auth timeout.
/// A client's PING interval: the `websocket` block's `ping_interval` for
/// WebSocket clients when set, else the server's.
fn ping_interval(live: &super::reload::Live, websocket: bool) -> Duration {
    live.opts
        .websocket
        .as_ref()
        .and_then(|w| w.ping_interval)
        .filter(|_| websocket)
        .unwrap_or(live.opts.ping_interval)
}

pub(crate) async fn ping_loop(client: Arc<ClientShared>, server: Arc<ServerInner>) {
    let cancel = client.cancel.clone();
    let live = server.live();
    let websocket = client.meta.lock().websocket;
    if live
        .client_authenticator(websocket)
        .is_some_and(|a| a.required())
    {
        let ws_timeout = live
            .opts
            .websocket
            .as_ref()
            .and_then(|w| w.auth.as_ref())
            .and_then(|a| a.timeout)
            .filter(|_| websocket);
        let timeout = ws_timeout.unwrap_or(live.opts.auth_timeout);
        drop(live);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(timeout) => {}
        }
        if !client.connected.load(Ordering::Acquire) {
            client.close_with_err(Some("Authentication Timeout"));
            server.auth_failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    // The ping timer starts at CONNECT (notify_one keeps the permit if
    // CONNECT came first): first PING about 2 s later, then every
    // ping_interval.
    if !client.connected.load(Ordering::Acquire) {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = client.connected_notify.notified() => {}
        }
    }
    // Interval and limit are read at each tick, so a reload applies to
    // the next one.
    let first = ping_interval(&server.live(), websocket).min(Duration::from_secs(2));
    let mut wait = first;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let (interval, ping_max) = {
            let live = server.live();
            (ping_interval(&live, websocket), live.opts.ping_max)
        };
        wait = interval;
        if !client.connected.load(Ordering::Acquire) {
            continue;
        }
        let out = client.pings_out.load(Ordering::Relaxed);
        if out + 1 > u64::from(ping_max) {
            client.close_with_err(Some("Stale Connection"));
            return;
        }
        client.pings_out.store(out + 1, Ordering::Relaxed);
        client.send_ping();
    }
}
