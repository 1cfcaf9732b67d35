//! The bridge to an external NATS system (external NATS mode).
//!
//! In external mode the node keeps its embedded server as an internal bus
//! with **no client listener**: the recorders, acks, internal request
//! subjects, Raft RPCs, replication and the activity stream keep talking
//! to it through [`LocalClient`](super::LocalClient)s, unchanged. This
//! module links that bus to the external system with one async-nats
//! connection (`no_echo`), which behaves like a route:
//!
//! - **Interest out.** Every local subscription (subject + queue group,
//!   counted by `ServerInner::add_subscription` / `unlist`, the hook routes
//!   use) is mirrored by one subscription on the external connection (a
//!   queue subscription with the same group name), removed when its count
//!   reaches zero.
//! - **Messages in.** A message arriving on a mirrored subscription
//!   `(subject, queue)` is delivered to the local subscriptions with exactly
//!   that subject and queue (the external server sends one copy per
//!   matching subscription of ours, so each local subscription gets exactly
//!   one). Injected messages never leave again: only
//!   `LocalClient::publish` feeds the bridge.
//! - **Messages out.** Every message published by an in-process client is
//!   delivered locally as before and also published on the external
//!   connection (the external server drops it when nobody listens). With
//!   `no_echo` the node never receives its own publishes back.
//!
//! # Tasks
//!
//! One **pump** task owns the async-nats client's outbound side: it drains
//! the outbound queue, applies interest changes (after taking the batch, so
//! a subscription made before a publish reaches the external server before
//! that publish: a request's reply inbox exists before the request leaves)
//! and publishes. One **reader** task per mirrored subscription injects
//! what arrives. async-nats reconnects forever with backoff and
//! resubscribes on its own; its events drive `connected` and the log.
//!
//! # Bounded queues and what happens when one is full
//!
//! - **Outbound** (in-process publishes waiting for the external
//!   connection): at most [`OUTBOUND_MAX_BYTES`] (subject, reply, headers
//!   and payload plus 160 bytes per entry), after which a message is
//!   **dropped and counted** (`liftbridge_nats_external_dropped`, a warning
//!   at most every 10 s). In-process publishers must never wait inside
//!   `publish` (see `nats::handle`); everything they publish is retried by
//!   its sender (Raft and replication requests, acked publishes time out
//!   and are resent by the client). While the connection is down, the
//!   async-nats client buffers up to its command capacity, then the queue
//!   fills and drops.
//! - **Inbound**: each mirrored subscription holds at most
//!   [`SUBSCRIPTION_CAPACITY`] messages (512 Ki, nats.go's default pending
//!   limit) in the async-nats client; the client bounds it by count, not
//!   bytes. The reader stalls on a full recorder queue as a client
//!   connection does (nothing dropped locally); when the subscription's
//!   buffer is full the async-nats client drops and reports a slow
//!   consumer, which is counted
//!   (`liftbridge_nats_external_slow_consumer_events`) and logged —
//!   Liftbridge's Go client drops the same way past its pending limits.
//!   The external system offers no flow control to a subscriber: a
//!   publisher faster than the store for longer than that slack loses
//!   messages, where the embedded server would have slowed it down.
//!
//! # What it must not do
//!
//! Never block inside the hooks (they run under the sublist's callers and
//! in `publish`); never forward an injected message back out.
//!
//! Known limit: a message published by this node on a subject where both
//! a local and an external member of the same queue group listen reaches
//! one member here and one there (the external server cannot be told that
//! the group was served locally).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::client::{self, ClientKind, ClientShared, FlushList, MsgRef, Origin, StallBound};
use super::server::ServerInner;
use super::sublist::MatchResult;
use crate::config::external::ExternalNatsOptions;

/// Byte limit of the outbound queue (see the module doc).
pub const OUTBOUND_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Messages each mirrored subscription may hold in the async-nats client
/// (nats.go's default pending limit): the slack between the external
/// server's pace and the recorder's before the client drops.
pub const SUBSCRIPTION_CAPACITY: usize = 512 * 1024;

/// Messages a reader injects per round.
const READ_BATCH: usize = 256;

/// Messages the pump takes from the outbound queue per round.
const PUMP_BATCH: usize = 256;

/// Why the external connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ExternalError {
    /// The first connection failed (unreachable, refused credentials, TLS).
    #[error("cannot connect to NATS at {servers}: {source}")]
    Connect {
        /// The configured servers.
        servers: String,
        /// Why.
        #[source]
        source: async_nats::ConnectError,
    },
    /// The bridge was already attached to this server.
    #[error("the NATS server is already bridged to an external system")]
    AlreadyAttached,
}

/// Counters of the bridge, for `/metrics` and `/varz`.
#[derive(Debug, Default)]
pub struct ExternalStats {
    /// Messages published on the external connection.
    pub out_msgs: AtomicU64,
    /// Their payload bytes (headers included).
    pub out_bytes: AtomicU64,
    /// Messages dropped because the outbound queue was full.
    pub out_dropped: AtomicU64,
    /// Messages received from the external system and injected.
    pub in_msgs: AtomicU64,
    /// Their payload bytes (headers included).
    pub in_bytes: AtomicU64,
    /// Slow consumer events reported by the async-nats client (messages
    /// dropped before reaching us).
    pub slow_consumer_events: AtomicU64,
    /// Times the connection came back after a loss.
    pub reconnects: AtomicU64,
}

/// A subscription's identity on the external connection.
type Key = (String, Option<String>);

#[derive(Default)]
struct Interest {
    counts: HashMap<Key, u32>,
    dirty: bool,
}

struct OutMsg {
    subject: Bytes,
    reply: Option<Bytes>,
    headers: Option<Bytes>,
    payload: Bytes,
    charge: u64,
}

#[derive(Default)]
struct Outbound {
    q: VecDeque<OutMsg>,
    bytes: u64,
}

/// The bridge of one embedded server to the external system.
pub struct Bridge {
    label: String,
    /// The configured server URLs (`nats.servers`).
    servers: Vec<String>,
    /// A handle on the connection, for the INFO of the server it is
    /// connected to (monitoring only); taken on shutdown so the
    /// connection closes with the pump.
    client: Mutex<Option<async_nats::Client>>,
    connected: AtomicBool,
    /// Set on the first loss: only a connection after one is a reconnect
    /// (the initial connection's event may arrive late).
    lost_once: AtomicBool,
    /// The last error the external server reported (e.g. an authorization
    /// violation after a credentials change), shown in health.
    last_error: Mutex<Option<String>>,
    interest: Mutex<Interest>,
    out: Mutex<Outbound>,
    wake: Notify,
    last_drop_warn: Mutex<Option<Instant>>,
    /// Counters.
    pub stats: ExternalStats,
    cancel: CancellationToken,
}

impl Bridge {
    fn new(label: String, servers: Vec<String>) -> Bridge {
        Bridge {
            label,
            servers,
            client: Mutex::new(None),
            connected: AtomicBool::new(false),
            lost_once: AtomicBool::new(false),
            last_error: Mutex::new(None),
            interest: Mutex::new(Interest::default()),
            out: Mutex::new(Outbound::default()),
            wake: Notify::new(),
            last_drop_warn: Mutex::new(None),
            stats: ExternalStats::default(),
            cancel: CancellationToken::new(),
        }
    }

    /// Whether the external connection is up.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    /// The configured servers (`nats://a:4222,…`).
    pub fn servers(&self) -> &str {
        &self.label
    }

    /// `None` while connected; otherwise what health reports.
    pub fn problem(&self) -> Option<String> {
        if self.is_connected() {
            return None;
        }
        let mut s = format!("nats: disconnected from {}", self.label);
        if let Some(e) = self.last_error.lock().as_ref() {
            s.push_str(": ");
            s.push_str(e);
        }
        Some(s)
    }

    /// Bytes waiting in the outbound queue.
    pub fn outbound_bytes(&self) -> u64 {
        self.out.lock().bytes
    }

    /// The configured URL of the server the connection is up to: the one
    /// whose host and port the server's INFO names (a server listening on
    /// every interface names only its port). `None` while disconnected, or
    /// when no configured URL (or more than one) matches — e.g. a server
    /// the client learned from the cluster's gossip.
    pub fn connected_url(&self) -> Option<String> {
        if !self.is_connected() {
            return None;
        }
        let info = self.client.lock().as_ref()?.server_info();
        let wildcard = matches!(info.host.as_str(), "" | "0.0.0.0" | "::" | "[::]");
        let mut hits = self.servers.iter().filter(|u| {
            url_host_port(u).is_some_and(|(h, p)| {
                p == info.port && (wildcard || h.eq_ignore_ascii_case(&info.host))
            })
        });
        match (hits.next(), hits.next()) {
            (Some(u), None) => Some(redact(u)),
            _ => None,
        }
    }

    /// The `external` object of `/varz` in external NATS mode: the
    /// configured servers, the connection's state and the server it is
    /// connected to, and the bridge's counters.
    pub fn varz_json(&self) -> serde_json::Value {
        let info = self
            .client
            .lock()
            .as_ref()
            .filter(|_| self.is_connected())
            .map(|c| c.server_info());
        let s = &self.stats;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "servers": self.servers.iter().map(|u| redact(u)).collect::<Vec<_>>(),
            "connected": self.is_connected(),
            "connected_url": self.connected_url(),
            "server_id": info.as_ref().map(|i| i.server_id.clone()),
            "server_name": info.as_ref().map(|i| i.server_name.clone()),
            "server_version": info.as_ref().map(|i| i.version.clone()),
            "last_error": self.last_error.lock().clone(),
            "reconnects": n(&s.reconnects),
            "in_msgs": n(&s.in_msgs),
            "in_bytes": n(&s.in_bytes),
            "out_msgs": n(&s.out_msgs),
            "out_bytes": n(&s.out_bytes),
            "slow_consumer_events": n(&s.slow_consumer_events),
            "dropped": n(&s.out_dropped),
            "outbound_pending_bytes": self.outbound_bytes(),
            "outbound_max_bytes": OUTBOUND_MAX_BYTES,
        })
    }

    /// Hook: a local subscription `(subject, queue)` came (`delta` 1) or
    /// went (-1). Never blocks: the pump applies the change.
    pub(crate) fn local_interest(&self, subject: &str, queue: Option<&str>, delta: i32) {
        let mut i = self.interest.lock();
        let key = (subject.to_string(), queue.map(str::to_string));
        if delta > 0 {
            *i.counts.entry(key).or_insert(0) += 1;
        } else if let Some(n) = i.counts.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                i.counts.remove(&key);
            }
        }
        i.dirty = true;
        drop(i);
        self.wake.notify_one();
    }

    /// Hook: an in-process client published this message. Queued for the
    /// external connection; dropped and counted when the queue is full.
    /// Returns whether it was queued.
    pub(crate) fn outbound(&self, msg: &MsgRef<'_>) -> bool {
        let charge = client::local_charge(
            msg.subject.len(),
            msg.reply.map_or(0, |r| r.len()),
            msg.size(),
        );
        let mut o = self.out.lock();
        if !o.q.is_empty() && o.bytes + charge > OUTBOUND_MAX_BYTES {
            drop(o);
            self.stats.out_dropped.fetch_add(1, Ordering::Relaxed);
            self.warn_drop();
            return false;
        }
        o.bytes += charge;
        o.q.push_back(OutMsg {
            subject: msg.subject.clone(),
            reply: msg.reply.cloned(),
            headers: msg.headers.cloned(),
            payload: msg.payload.clone(),
            charge,
        });
        drop(o);
        self.wake.notify_one();
        true
    }

    fn warn_drop(&self) {
        let mut last = self.last_drop_warn.lock();
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            *last = Some(Instant::now());
            tracing::warn!(
                servers = %self.label,
                connected = self.is_connected(),
                dropped = self.stats.out_dropped.load(Ordering::Relaxed),
                "external NATS outbound queue full ({OUTBOUND_MAX_BYTES} bytes): dropping messages (their senders retry)"
            );
        }
    }

    /// Stops the pump and every reader (the connection closes when the
    /// last clone of the client is dropped).
    pub(crate) fn shutdown(&self) {
        self.client.lock().take();
        self.connected.store(false, Ordering::Release);
        self.cancel.cancel();
        self.wake.notify_one();
    }
}

/// `url` with the password of its user info replaced (`nats://u:xxxxx@h`),
/// as nats-server shows URLs: monitoring never shows a password.
pub(crate) fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").map_or(("", url), |(s, r)| (s, r));
    let prefix = if scheme.is_empty() {
        String::new()
    } else {
        format!("{scheme}://")
    };
    match rest.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{prefix}{user}:xxxxx@{host}")
        }
        None => url.to_string(),
    }
}

/// Host and port of a server URL (`nats://user:pw@host:4222`, `tls://…`,
/// `host:port`, `host`; port 4222 when absent).
fn url_host_port(url: &str) -> Option<(&str, u16)> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let rest = rest.split('/').next().unwrap_or(rest);
    if let Some(v6) = rest.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => 4222,
        };
        return Some((h, port));
    }
    match rest.rsplit_once(':') {
        Some((h, p)) => Some((h, p.parse().ok()?)),
        None => Some((rest, 4222)),
    }
}

/// Connects to the external system and attaches the bridge to `server`.
/// The first connection must succeed (a wrong password or an unreachable
/// system is a start-up error naming the servers); later losses are
/// retried forever.
pub(crate) async fn attach(
    server: &Arc<ServerInner>,
    opts: &ExternalNatsOptions,
) -> Result<Arc<Bridge>, ExternalError> {
    let bridge = Arc::new(Bridge::new(opts.label(), opts.servers.clone()));
    let events = Arc::downgrade(&bridge);
    let mut co = async_nats::ConnectOptions::new()
        .no_echo()
        .name(format!("liftbridge {}", server.server_name))
        .max_reconnects(None)
        .subscription_capacity(SUBSCRIPTION_CAPACITY)
        .connection_timeout(Duration::from_secs(5))
        .reconnect_delay_callback(|attempts| {
            // 0, 100 ms, 200 ms, … capped at 2 s: a restarted server is
            // found again within 2 s.
            Duration::from_millis((attempts.saturating_sub(1) as u64 * 100).min(2000))
        })
        .event_callback(move |ev| {
            let events = events.clone();
            async move {
                if let Some(b) = events.upgrade() {
                    on_event(&b, ev);
                }
            }
        });
    if let Some(u) = &opts.user {
        co = co.user_and_password(u.clone(), opts.password.clone().unwrap_or_default());
    }
    if opts.tls() {
        co = co.require_tls(true);
    }
    if let Some((cert, key)) = &opts.client_cert {
        co = co.add_client_certificate(cert.clone(), key.clone());
    }
    if let Some(ca) = &opts.ca {
        co = co.add_root_certificates(ca.clone());
    }
    let nc = co
        .connect(opts.servers.as_slice())
        .await
        .map_err(|source| ExternalError::Connect {
            servers: opts.label(),
            source,
        })?;
    *bridge.client.lock() = Some(nc.clone());
    bridge.connected.store(true, Ordering::Release);
    tracing::info!(servers = %bridge.label, "connected to external NATS");
    if server.external.set(bridge.clone()).is_err() {
        return Err(ExternalError::AlreadyAttached);
    }
    // Subscriptions made before the bridge was attached.
    let existing: Vec<Key> = server
        .clients
        .lock()
        .values()
        .filter(|c| c.kind.feeds_routes())
        .flat_map(|c| {
            c.subs
                .lock()
                .values()
                .map(|s| (s.subject.clone(), s.queue.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    for (s, q) in existing {
        bridge.local_interest(&s, q.as_deref(), 1);
    }
    // The injecting pseudo-client: its deliveries are local only.
    let injector = ClientShared::new(server.next_client_id(), ClientKind::Local, None, usize::MAX);
    injector.meta.lock().name = "LIFT.external".to_string();
    injector.meta.lock().lang = "rust-local".to_string();
    server.clients.lock().insert(injector.id, injector.clone());
    tokio::spawn(pump(bridge.clone(), nc, server.clone(), injector));
    Ok(bridge)
}

fn on_event(b: &Bridge, ev: async_nats::Event) {
    use async_nats::Event;
    match ev {
        Event::Connected => {
            if !b.connected.swap(true, Ordering::AcqRel) && b.lost_once.load(Ordering::Acquire) {
                b.stats.reconnects.fetch_add(1, Ordering::Relaxed);
                *b.last_error.lock() = None;
                tracing::info!(servers = %b.label, "reconnected to external NATS");
            }
        }
        Event::Disconnected | Event::Closed => {
            b.lost_once.store(true, Ordering::Release);
            if b.connected.swap(false, Ordering::AcqRel) {
                tracing::warn!(servers = %b.label, "disconnected from external NATS; reconnecting");
            }
        }
        Event::SlowConsumer(sid) => {
            b.stats.slow_consumer_events.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(sid, "external NATS subscription over its buffer: the client dropped a message (slow consumer)");
        }
        Event::ServerError(e) => {
            tracing::warn!(servers = %b.label, error = %e, "external NATS server error");
            *b.last_error.lock() = Some(e.to_string());
        }
        Event::ClientError(e) => {
            tracing::warn!(servers = %b.label, error = %e, "external NATS client error");
        }
        Event::LameDuckMode | Event::Draining => {
            tracing::info!(servers = %b.label, event = %ev, "external NATS");
        }
    }
}

/// The pump: outbound messages and interest changes, in order.
async fn pump(
    b: Arc<Bridge>,
    nc: async_nats::Client,
    server: Arc<ServerInner>,
    injector: Arc<ClientShared>,
) {
    let mut active: HashMap<Key, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut batch: Vec<OutMsg> = Vec::with_capacity(PUMP_BATCH);
    loop {
        tokio::select! {
            _ = b.cancel.cancelled() => break,
            _ = b.wake.notified() => {}
        }
        loop {
            {
                let mut o = b.out.lock();
                while batch.len() < PUMP_BATCH {
                    match o.q.pop_front() {
                        Some(m) => batch.push(m),
                        None => break,
                    }
                }
            }
            // After taking the batch: interest registered before any of
            // these messages was published goes out first.
            let dirty = std::mem::take(&mut b.interest.lock().dirty);
            if dirty {
                reconcile(&b, &nc, &server, &injector, &mut active).await;
            }
            if batch.is_empty() {
                break;
            }
            for m in batch.drain(..) {
                let size = m.payload.len() + m.headers.as_ref().map_or(0, |h| h.len());
                let charge = m.charge;
                let sent = tokio::select! {
                    _ = b.cancel.cancelled() => false,
                    s = publish(&nc, m) => s,
                };
                b.out.lock().bytes -= charge;
                if sent {
                    b.stats.out_msgs.fetch_add(1, Ordering::Relaxed);
                    b.stats.out_bytes.fetch_add(size as u64, Ordering::Relaxed);
                } else {
                    b.stats.out_dropped.fetch_add(1, Ordering::Relaxed);
                }
                if b.cancel.is_cancelled() {
                    break;
                }
            }
            if b.cancel.is_cancelled() {
                break;
            }
        }
        if b.cancel.is_cancelled() {
            break;
        }
    }
    for (_, t) in active.drain() {
        t.abort();
    }
    server.remove_client(&injector);
}

/// Publishes one message; false when the client refused it (closed).
async fn publish(nc: &async_nats::Client, m: OutMsg) -> bool {
    let Ok(subject) = async_nats::Subject::from_utf8(m.subject) else {
        return false;
    };
    let reply = match m.reply.map(async_nats::Subject::from_utf8) {
        None => None,
        Some(Ok(r)) => Some(r),
        Some(Err(_)) => return false,
    };
    let r = match (reply, m.headers) {
        (None, None) => nc.publish(subject, m.payload).await,
        (Some(r), None) => nc.publish_with_reply(subject, r, m.payload).await,
        (None, Some(h)) => {
            nc.publish_with_headers(subject, to_header_map(&h), m.payload)
                .await
        }
        (Some(r), Some(h)) => {
            nc.publish_with_reply_and_headers(subject, r, to_header_map(&h), m.payload)
                .await
        }
    };
    r.is_ok()
}

/// Brings the external subscriptions in line with the local interest.
async fn reconcile(
    b: &Arc<Bridge>,
    nc: &async_nats::Client,
    server: &Arc<ServerInner>,
    injector: &Arc<ClientShared>,
    active: &mut HashMap<Key, tokio::task::JoinHandle<()>>,
) {
    let wanted: std::collections::HashSet<Key> = b.interest.lock().counts.keys().cloned().collect();
    // Dropping a reader's subscriber (abort) unsubscribes it.
    active.retain(|k, t| {
        let keep = wanted.contains(k) && !t.is_finished();
        if !keep {
            t.abort();
        }
        keep
    });
    for key in wanted {
        if active.contains_key(&key) {
            continue;
        }
        let sub = match &key.1 {
            None => nc.subscribe(key.0.clone()).await,
            Some(q) => nc.queue_subscribe(key.0.clone(), q.clone()).await,
        };
        match sub {
            Ok(sub) => {
                let t = tokio::spawn(read(
                    b.clone(),
                    server.clone(),
                    injector.clone(),
                    key.clone(),
                    sub,
                ));
                active.insert(key, t);
            }
            Err(e) => {
                tracing::warn!(subject = %key.0, error = %e, "external NATS subscription failed");
            }
        }
    }
}

/// A reader: injects what one external subscription receives.
async fn read(
    b: Arc<Bridge>,
    server: Arc<ServerInner>,
    injector: Arc<ClientShared>,
    key: Key,
    sub: async_nats::Subscriber,
) {
    // What has arrived is taken in batches: one stall check per batch.
    let mut sub = sub.ready_chunks(READ_BATCH);
    while let Some(batch) = sub.next().await {
        let mut flush = FlushList::new();
        let (mut msgs, mut bytes) = (0u64, 0u64);
        for m in batch {
            let subject = Bytes::copy_from_slice(m.subject.as_bytes());
            let reply = m.reply.map(|r| Bytes::copy_from_slice(r.as_bytes()));
            let headers = match (&m.headers, m.status) {
                (None, None) => None,
                (h, status) => Some(header_block(
                    h.as_ref(),
                    status.map(|s| s.as_u16()),
                    m.description.as_deref(),
                )),
            };
            let msg = MsgRef {
                subject: &subject,
                reply: reply.as_ref(),
                headers: headers.as_ref(),
                payload: &m.payload,
            };
            msgs += 1;
            bytes += msg.size() as u64;
            let result = server.local_account.sublist.match_subject(&m.subject);
            let mine = only(&result, &key);
            client::deliver(
                &server,
                &injector,
                true,
                &msg,
                &mine,
                &mut flush,
                Origin::Client,
                &[],
            );
        }
        flush.flush();
        b.stats.in_msgs.fetch_add(msgs, Ordering::Relaxed);
        b.stats.in_bytes.fetch_add(bytes, Ordering::Relaxed);
        let s = &server.stats;
        s.in_msgs.fetch_add(msgs, Ordering::Relaxed);
        s.in_bytes.fetch_add(bytes, Ordering::Relaxed);
        s.out_msgs.fetch_add(flush.tally.msgs, Ordering::Relaxed);
        s.out_bytes.fetch_add(flush.tally.bytes, Ordering::Relaxed);
        for st in flush.take_local_stalled() {
            client::wait_local_drained(&st, StallBound::Client, &b.cancel).await;
        }
    }
}

/// The part of a local match that a message received on the external
/// subscription `key` is for: the local subscriptions with exactly that
/// subject and queue group.
fn only(
    result: &MatchResult<client::Subscription>,
    key: &Key,
) -> MatchResult<client::Subscription> {
    match &key.1 {
        None => MatchResult {
            psubs: result
                .psubs
                .iter()
                .filter(|s| s.subject == key.0)
                .cloned()
                .collect(),
            qsubs: Vec::new(),
        },
        Some(q) => MatchResult {
            psubs: Vec::new(),
            qsubs: result
                .qsubs
                .iter()
                .filter(|(name, _)| name == q)
                .map(|(name, members)| {
                    (
                        name.clone(),
                        members
                            .iter()
                            .filter(|s| s.subject == key.0)
                            .cloned()
                            .collect(),
                    )
                })
                .collect(),
        },
    }
}

/// A NATS header block (`NATS/1.0[ status[ description]]\r\n…\r\n\r\n`).
fn header_block(
    h: Option<&async_nats::HeaderMap>,
    status: Option<u16>,
    description: Option<&str>,
) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_slice(b"NATS/1.0");
    if let Some(s) = status {
        b.put_slice(format!(" {s}").as_bytes());
        if let Some(d) = description {
            b.put_u8(b' ');
            b.put_slice(d.as_bytes());
        }
    }
    b.put_slice(b"\r\n");
    if let Some(h) = h {
        for (name, values) in h.iter() {
            for v in values {
                b.put_slice(name.as_ref());
                b.put_slice(b": ");
                b.put_slice(v.as_ref());
                b.put_slice(b"\r\n");
            }
        }
    }
    b.put_slice(b"\r\n");
    b.freeze()
}

/// Our header block as async-nats's map (a status line has no place in it
/// and is left out: in-process clients never publish one).
fn to_header_map(block: &Bytes) -> async_nats::HeaderMap {
    let mut m = async_nats::HeaderMap::new();
    for (name, value) in super::proto::parse_headers(block) {
        m.append(name.as_str(), String::from_utf8_lossy(&value).as_ref());
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_give_host_and_port() {
        assert_eq!(url_host_port("nats://a:4223"), Some(("a", 4223)));
        assert_eq!(url_host_port("nats://u:p@a:4223"), Some(("a", 4223)));
        assert_eq!(url_host_port("tls://a"), Some(("a", 4222)));
        assert_eq!(url_host_port("a:1"), Some(("a", 1)));
        assert_eq!(url_host_port("nats://[::1]:5"), Some(("::1", 5)));
        assert_eq!(url_host_port("nats://a:x"), None);
        assert_eq!(redact("nats://u:secret@a:1"), "nats://u:xxxxx@a:1");
        assert_eq!(redact("u:secret@a:1"), "u:xxxxx@a:1");
        assert_eq!(redact("nats://a:1"), "nats://a:1");
    }

    #[test]
    fn varz_of_a_bridge_that_is_down() {
        let b = Bridge::new("nats://x:4222".into(), vec!["nats://x:4222".into()]);
        let v = b.varz_json();
        assert_eq!(v["servers"], serde_json::json!(["nats://x:4222"]));
        assert_eq!(v["connected"], false);
        assert!(v["connected_url"].is_null() && v["server_id"].is_null());
        assert_eq!(v["outbound_max_bytes"], OUTBOUND_MAX_BYTES);
    }

    #[test]
    fn interest_is_counted_per_subject_and_queue() {
        let b = Bridge::new("nats://x:4222".into(), vec!["nats://x:4222".into()]);
        b.local_interest("a.b", None, 1);
        b.local_interest("a.b", None, 1);
        b.local_interest("a.b", Some("q"), 1);
        b.local_interest("a.b", None, -1);
        let keys = |b: &Bridge| {
            let mut k: Vec<Key> = b.interest.lock().counts.keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(
            keys(&b),
            [("a.b".into(), None), ("a.b".into(), Some("q".into()))]
        );
        b.local_interest("a.b", None, -1);
        b.local_interest("a.b", Some("q"), -1);
        assert!(keys(&b).is_empty(), "removed at zero");
        b.local_interest("never", None, -1);
        assert!(keys(&b).is_empty(), "an unknown removal is ignored");
        assert!(b.interest.lock().dirty);
    }

    #[test]
    fn outbound_queue_is_bounded_and_drops_are_counted() {
        let b = Bridge::new("nats://x:4222".into(), vec!["nats://x:4222".into()]);
        let subject = Bytes::from_static(b"s");
        // One message larger than the limit is still taken by an empty
        // queue (one reply may be that large), the next is dropped.
        let big = Bytes::from(vec![0u8; OUTBOUND_MAX_BYTES as usize]);
        let m = MsgRef {
            subject: &subject,
            reply: None,
            headers: None,
            payload: &big,
        };
        assert!(b.outbound(&m));
        let small = Bytes::from_static(b"x");
        let m2 = MsgRef {
            subject: &subject,
            reply: None,
            headers: None,
            payload: &small,
        };
        assert!(!b.outbound(&m2));
        assert_eq!(b.stats.out_dropped.load(Ordering::Relaxed), 1);
        assert!(b.outbound_bytes() > OUTBOUND_MAX_BYTES);
        assert_eq!(
            b.problem().as_deref(),
            Some("nats: disconnected from nats://x:4222")
        );
        b.connected.store(true, Ordering::Release);
        assert_eq!(b.problem(), None);
    }

    #[test]
    fn header_blocks_round_trip() {
        let block = Bytes::from_static(b"NATS/1.0\r\nA: 1\r\nA: 2\r\nB: x y\r\n\r\n");
        let m = to_header_map(&block);
        assert_eq!(m.get_all("A").count(), 2);
        let back = header_block(Some(&m), None, None);
        let again = to_header_map(&back);
        assert_eq!(again.get("B").map(|v| v.as_str()), Some("x y"));
        assert_eq!(again.get_all("A").count(), 2);
        assert!(back.starts_with(b"NATS/1.0\r\n") && back.ends_with(b"\r\n\r\n"));
        let st = header_block(None, Some(503), Some("No Responders"));
        assert_eq!(&st[..], b"NATS/1.0 503 No Responders\r\n\r\n");
    }
}
