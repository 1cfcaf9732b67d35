//! Routes: the full mesh between NATS servers of one cluster (ours and Go
//! nats-server 2.x), as spec `nats.md` §1.13 describes.
//!
//! **Model.** Every server listens on a cluster port and solicits the
//! routes it is configured with. By default a route is one TCP (or TLS)
//! connection per pair of servers, unpooled and uncompressed: our INFO
//! carries neither `route_pool_size` nor `compression`, which makes Go
//! servers treat us as a 2.9-style peer. With `compression` configured
//! (on every connection of a pool too) the two sides agree on S2 first (see
//! `RouteReader::negotiate` and `s2`): the soliciting side holds its INFO
//! back until it has the peer's, answers with an INFO naming its mode and
//! compresses everything after; the accepting side then compresses from
//! its second INFO on, and that exchange of second INFOs registers the
//! route. On a new route both sides send INFO
//! (the soliciting side sends CONNECT first); the accepting side then
//! forwards the newcomer's INFO (with its route URL in `ip`) to its other
//! routes, which connect to it (implicit routes), so each server needs to
//! know only one seed.
//!
//! **Pools.** With `pool_size: n` our INFO carries `route_pool_size`, and
//! towards a peer that pools too (ours or nats-server 2.10+) a route is a
//! pool of `max(ours, theirs)` connections, as nats-server: the soliciting
//! side sends its INFO only after the peer's, naming the pool slot it took
//! (`route_pool_idx`, the first free one); once a connection's first PONG
//! shows the peer accepted it, the solicitor dials the next, until the pool
//! is full (a connection beyond that is closed and not retried). An
//! account's interest travels on the connection at `fnv1a(name) % n` of the
//! sender's pool, and a message follows the interest it matched, so one
//! peer still gets each message once. If either side does not pool, the
//! pair keeps one connection for every account.
//!
//! **Pinned accounts.** `cluster { accounts: [...] }` gives each listed
//! account a connection of its own to every pooling peer, as nats-server's
//! pinned accounts: the dialling side names the account in its INFO
//! (`route_account`), and on that connection RS+/RS-/RMSG/HMSG omit the
//! account ([`Dialect::Pinned`](super::proto::route::Dialect)). A pinned
//! account's interest (hence its messages) travels only there, never on
//! the pool. Configured routes dial their pinned connections from the
//! start; towards a peer learned by gossip they are dialled once its first
//! pool connection is up, and the gossip we forward names each pinned
//! account too, which is how nats-server peers learn to dial theirs.
//! Pinned connections a peer dials for accounts we do not pin (nats-server
//! pins its system account by default) are accepted and read the same way.
//! An account a reload pins is first announced to each pooling peer
//! (`route_account` with `route_acc_add_reqid`, nats-server's reload
//! protocol), so a nats-server peer that does not pin it accepts the pinned
//! connection; the same announcement from a peer drops the interest in that
//! account its pool connections carried (it arrives again on the pinned
//! connection) and is answered. A pinned connection a peer refuses is
//! re-dialled with backoff.
//!
//! **Reload.** `routes`, `connect_retries`, `pool_size` and `accounts` may
//! change at run time ([`Routes::reconfigure`]); a new pool size or pinned
//! list closes the pool connections and those pinned to an account it
//! pinned or unpinned, which re-form; other pinned connections stay.
//!
//! **Accounts.** Every account but the system account (`$SYS`, or the
//! operator's) is carried, by name (the public key in operator mode), in
//! every `RS+`/`RS-`/`RMSG`/`HMSG`: one route carries all accounts, as
//! between nats-server peers without pools. Interest or a message naming
//! an account this server does not know (or the system account) is
//! ignored with a debug log, as nats-server does. Imports across nodes are
//! described in `account.rs`.
//!
//! **Interest.** Local interest (TCP clients and in-process clients, never
//! routes) is counted per (account, subject, queue) in [`Routes`]: the
//! first plain subscription sends `RS+ <account> subject` to every route,
//! the last one `RS- <account> subject`; every change of a queue group's
//! size sends `RS+ <account> subject queue weight` (or `RS-` at zero). A
//! new route first gets the whole table. Interest received from a peer
//! becomes ordinary [`Subscription`]s owned by the route's pseudo-client
//! in that account's sublist, so matching is one lookup for local and
//! remote receivers.
//!
//! **Forwarding.** A message from a local client goes once to each route
//! with matching interest (`RMSG`/`HMSG`), carrying the names of the queue
//! groups for which that peer must pick a member; local queue members are
//! preferred. A message from a route is delivered to local subscribers only
//! (never to another route: no loops in a full mesh), and to queue groups
//! only when the sender named them, so each message reaches one member per
//! group cluster-wide. A message from a route is delivered only in the
//! account it names.
//!
//! **Duplicates.** Two servers that connect to each other at once end up
//! with two connections for one slot. Both keep the one solicited by the
//! server with the smaller server id (so they agree without talking); the
//! other is closed.
//! A route to ourselves (a configured URL that is our own port) is closed
//! and not retried.
//!
//! **Tasks.** Per server: the accept loop and one solicit task per
//! configured route (until it connects). Per route: the reader (this
//! module; it also owns cleanup and spawns the reconnect), the writer
//! (`client::write_loop`) and a ping timer. Configured routes reconnect
//! forever with backoff (100 ms doubling to 2 s); implicit ones a few times.
//!
//! **Bounded memory.** A route's outbound buffer is limited by
//! `max_pending`; producers wait (bounded) when it passes 75 %, and a route
//! whose buffer still overflows is closed as a slow route (logged and
//! counted in `slow_routes`) and reconnected, as nats-server does. A
//! peer's interest is capped (`MAX_ROUTE_SUBS`, then the route is closed),
//! as are gossip-driven dials in flight (`MAX_CONNECTING`, then gossip is
//! ignored), a routed payload (`MAX_ROUTE_PAYLOAD`) and a control line.
//!
//! Must not: block the executor, hold a lock across `.await`, panic on
//! anything a peer sends, or forward a routed message to another route.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::account::Account;
use super::client::{self, ClientKind, ClientShared, FlushList, MsgRef, Origin, Subscription};
use super::proto::route::{
    encode_pinned_minus, encode_pinned_plus, encode_rmsg, encode_rs_minus, encode_rs_plus, RouteOp,
    RouteParseError, RouteParsed, RouteParser,
};
use super::proto::{self};
use super::s2;
use super::server::{ServerInner, SERVER_VERSION};
use crate::config::nats::{ClusterAuth, ClusterOptions, NatsOptions, S2Compression};

/// The global account (every client when accounts are not configured).
pub const GLOBAL_ACCOUNT: &str = "$G";
/// First reconnect delay of a solicited route.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
/// Largest reconnect delay.
const RECONNECT_MAX: Duration = Duration::from_secs(2);
/// Extra attempts of an implicit route beyond `connect_retries` (covers the
/// race where both sides connect at once and one connection is dropped).
const IMPLICIT_EXTRA_ATTEMPTS: u32 = 3;
/// Time a new route has to complete CONNECT/INFO.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest route ping interval (nats-server caps it at 30 s too).
const MAX_PING_INTERVAL: Duration = Duration::from_secs(30);
/// Entries of a route reader's private match cache.
const ROUTE_CACHE_MAX: usize = 256;
/// Accounts a route reader keeps a match cache for at once.
const ACCOUNT_CACHES_MAX: usize = 16;
/// Interest entries one peer may hold here. A peer that announces more is
/// closed with `-ERR 'maximum subscriptions exceeded'` (its interest goes
/// with it): one bad peer cannot grow our sublist without bound.
pub(crate) const MAX_ROUTE_SUBS: usize = 1 << 20;
/// Gossiped servers being dialled at once; further gossip is ignored
/// until attempts finish (a peer cannot make us dial without bound).
const MAX_CONNECTING: usize = 1024;
/// Largest route pool a peer may announce (a larger one is refused, so a
/// peer cannot make us keep slots without bound).
const MAX_PEER_POOL_SIZE: i64 = 1024;

/// Route counters (for `/varz`, `/routez` and `/metrics`).
#[derive(Debug, Default)]
pub struct RouteStats {
    /// Messages received from routes.
    pub in_msgs: AtomicU64,
    /// Payload bytes (headers included) received from routes.
    pub in_bytes: AtomicU64,
    /// Messages sent to routes.
    pub out_msgs: AtomicU64,
    /// Payload bytes sent to routes.
    pub out_bytes: AtomicU64,
    /// Routes closed because their outbound buffer overflowed.
    pub slow_routes: AtomicU64,
    /// Route connections closed for protocol errors or refused handshakes.
    pub rejected: AtomicU64,
}

/// What we know about the server at the other end of a route.
#[derive(Debug, Clone, Default)]
pub struct Remote {
    /// Its server id.
    pub id: String,
    /// Its server name.
    pub name: String,
    /// Its route URL (`nats-route://host:port/`).
    pub url: String,
    /// Its client URLs (`host:port`).
    pub connect_urls: Vec<String>,
    /// Its leaf listener's URL (`host:port`), when it advertises one.
    pub leaf_urls: Vec<String>,
}

/// One route connection.
pub struct Route {
    /// The pseudo-client holding the outbound buffer and remote interest.
    pub client: Arc<ClientShared>,
    /// We opened the connection.
    pub did_solicit: bool,
    /// URL to solicit again when this connection closes, and whether it is
    /// a configured (explicit) route.
    reconnect: Mutex<Option<(String, bool)>>,
    /// Reconnect attempts so far (reset when the handshake completes).
    attempt: AtomicU32,
    /// The peer (known after its INFO).
    pub remote: Mutex<Remote>,
    registered: AtomicBool,
    /// Closed as the losing duplicate: its cleanup must not touch the
    /// table entry of the winner, and it does not reconnect.
    replaced: AtomicBool,
    /// The next pool connection to dial once the peer answers our PING
    /// (the solicitor's way of filling a pool only after it was accepted).
    start_next: Mutex<Option<(String, bool)>>,
    /// The account a pinned connection is dedicated to.
    pub pinned: Mutex<Option<String>>,
    /// The compression this connection agreed on (`/routez`).
    compression: Mutex<&'static str>,
    /// Its compression switches (`None`: it formed while ours was off).
    switches: Option<s2::Switches>,
    /// The user and password an accepted route's CONNECT presented (a
    /// reload of the route users checks them again).
    presented: Mutex<(Option<String>, Option<String>)>,
}

impl Route {
    /// Whether the route was configured (rather than learned by gossip).
    pub fn is_configured(&self) -> bool {
        self.reconnect.lock().as_ref().is_some_and(|(_, c)| *c)
    }

    /// The URL to dial the peer's server at: the one we dialled, or the
    /// one it announced.
    fn peer_url(&self) -> Option<String> {
        if self.did_solicit {
            self.reconnect.lock().clone().map(|(u, _)| u)
        } else {
            Some(self.remote.lock().url.clone()).filter(|u| !u.is_empty())
        }
    }
}

/// (account, subject, queue) of local interest.
type InterestKey = (String, String, Option<String>);

/// One peer server's route connections: one slot per pool index, or a
/// single slot when either side does not pool.
struct Peer {
    conns: Vec<Option<Arc<Route>>>,
    /// Both sides pool: accounts are spread over the slots.
    pooled: bool,
    /// Connections the peer dedicated to one account each, by account.
    pinned: HashMap<String, Arc<Route>>,
    /// Accounts the peer announced it pins from now on (nats-server's
    /// reload protocol) that we do not pin: our interest in them goes to
    /// its connection pinned to them, as it expects.
    moved: std::collections::HashSet<String>,
    /// The INFO we forwarded to the other peers when this one joined
    /// (when we announce it, see `register`), to name it again per newly
    /// pinned account after a reload.
    gossip: Option<serde_json::Value>,
}

impl Peer {
    fn new(size: usize, pooled: bool) -> Peer {
        Peer {
            conns: vec![None; size],
            pooled,
            pinned: HashMap::new(),
            moved: std::collections::HashSet::new(),
            gossip: None,
        }
    }

    fn live(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.conns.iter().flatten().chain(self.pinned.values())
    }

    /// Every pool slot is taken (a peer whose pool a reload closed, its
    /// pinned connections kept, has no slots until the pool re-forms).
    fn is_full(&self) -> bool {
        !self.conns.is_empty() && self.conns.iter().all(Option::is_some)
    }

    /// Our interest in `account` travels on its pinned connection to
    /// this peer (we pin it, or the peer moved it there).
    fn pins(&self, account: &str, pins: &[String]) -> bool {
        self.pooled && (pins.iter().any(|a| a == account) || self.moved.contains(account))
    }

    /// The connection that carries `account` from us (with our pool of
    /// `pool_size`; only its own connection when it is pinned, see
    /// [`Peer::pins`]), when it is up.
    fn conn_for(&self, account: &str, pool_size: usize, pins: &[String]) -> Option<&Arc<Route>> {
        if self.pins(account, pins) {
            return self.pinned.get(account);
        }
        let idx = if self.pooled {
            pool_index(pool_size, account)
        } else {
            0
        };
        self.conns.get(idx)?.as_ref()
    }
}

/// The pool slot of `account` in a pool of `pool_size`: FNV-1a (32 bits)
/// of its name modulo the size, as nats-server computes it, so every
/// server puts an account on the same slot.
pub(crate) fn pool_index(pool_size: usize, account: &str) -> usize {
    if pool_size <= 1 {
        return 0;
    }
    let mut h: u32 = 0x811c_9dc5;
    for b in account.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    (h % pool_size as u32) as usize
}

/// A peer's `gossip` INFO once per account of `accounts`, naming it
/// (`route_account`).
fn encode_pinned_gossip<'a>(
    b: &mut BytesMut,
    gossip: &serde_json::Value,
    accounts: impl Iterator<Item = &'a String>,
) {
    for a in accounts {
        let mut g = gossip.clone();
        if let serde_json::Value::Object(m) = &mut g {
            m.insert("route_account".into(), serde_json::Value::String(a.clone()));
        }
        proto::encode_info(b, &g.to_string());
    }
}

/// Our whole interest in `account` as `RS+` lines: in the pinned form
/// (the account omitted) with `pinned`, else naming the account.
fn encode_account_interest(
    b: &mut BytesMut,
    interest: &HashMap<InterestKey, u32>,
    account: &str,
    pinned: bool,
) {
    for ((acc, subject, queue), n) in interest.iter().filter(|((a, _, _), _)| a == account) {
        let queue = queue.as_deref().map(|q| (q, *n));
        if pinned {
            encode_pinned_plus(b, subject, queue);
        } else {
            encode_rs_plus(b, acc, subject, queue);
        }
    }
}

/// The interest in `account` that `peer`'s pool connections carried, to
/// drop (with [`ServerInner::remove_subscription`], outside the state
/// lock) when it arrives again on the peer's connection pinned to it.
fn pool_interest(peer: &Peer, account: &str) -> Vec<Arc<Subscription>> {
    let prefix = format!("{account} ");
    let mut v = Vec::new();
    for r in peer.conns.iter().flatten() {
        v.extend(
            r.client
                .subs
                .lock()
                .iter()
                .filter(|(k, _)| k.starts_with(prefix.as_bytes()))
                .map(|(_, s)| s.clone()),
        );
    }
    v
}

/// Why a route connection was not added to the table.
enum NotAdded {
    /// Its slot keeps another connection (the duplicate rule).
    Duplicate,
    /// The pool is already full: closed, not retried.
    PoolFull,
    /// The peer's INFO breaks the pool rules: answered with this `-ERR`.
    Protocol(String),
}

/// Mutable cluster state, under one lock so interest snapshots sent to a
/// new route and later updates are never reordered.
#[derive(Default)]
struct State {
    /// Local interest: (account, subject, queue) → number of local
    /// subscriptions.
    interest: HashMap<InterestKey, u32>,
    /// Registered route connections by remote server id.
    routes: HashMap<String, Peer>,
    /// Connections not yet registered (by client id), for shutdown.
    pending: HashMap<u64, Arc<Route>>,
    /// Server ids being solicited because of gossip (no duplicate attempts).
    connecting: std::collections::HashSet<String>,
}

impl State {
    fn all_routes(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.routes.values().flat_map(Peer::live)
    }

    /// A route to `id` exists and needs no more connections (with
    /// `pinned`: its connection pinned to that account exists).
    fn has_route(&self, id: &str, pinned: Option<&str>) -> bool {
        self.routes.get(id).is_some_and(|p| match pinned {
            Some(a) => p.pinned.contains_key(a),
            None => p.is_full(),
        })
    }
}

/// The cluster side of a server. Present when `cluster` is configured.
pub struct Routes {
    opts: ClusterOptions,
    /// The configured routes in force (`cluster.routes`, changed by a
    /// reload): a solicit task of a URL no longer listed stops, and
    /// connections to it are not re-dialled.
    configured: Mutex<Vec<String>>,
    /// `connect_retries` in force (changed by a reload).
    connect_retries: AtomicU32,
    /// `pool_size` in force (changed by a reload; see
    /// [`ClusterOptions::pool_size`]).
    pool_size: AtomicUsize,
    /// Pinned accounts in force (`accounts`, changed by a reload).
    pins: parking_lot::RwLock<Arc<Vec<String>>>,
    /// `compression` in force (changed by a reload).
    compression: parking_lot::RwLock<S2Compression>,
    /// The bound route listener address.
    pub listen: SocketAddr,
    name: Mutex<String>,
    dynamic: AtomicBool,
    state: Mutex<State>,
    cancel: CancellationToken,
    /// Counters.
    pub stats: RouteStats,
    /// TLS of accepted and solicited routes (`cluster { tls }`); a reload
    /// replaces them with the re-read files, TLS staying on or off.
    tls_acceptor: parking_lot::RwLock<Option<tokio_rustls::TlsAcceptor>>,
    tls_connector: parking_lot::RwLock<Option<tokio_rustls::TlsConnector>>,
    /// Our client URL (`host:port`) advertised to peers and clients.
    own_client_url: String,
    /// `advertise` and `no_advertise` in force (a reload changes them; new
    /// route INFOs and client `connect_urls` follow).
    advertise: parking_lot::RwLock<(Option<String>, bool)>,
    /// `authorization { user, password }` in force (a reload changes it:
    /// new routes present and are checked against it; accepted routes
    /// that no longer pass are closed).
    auth: parking_lot::RwLock<Option<ClusterAuth>>,
    max_pending: usize,
}

/// Errors of setting up the cluster listener.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The route listener could not be bound.
    #[error("cannot listen for routes on {addr}: {source}")]
    Bind {
        /// The `host:port` that was tried.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// TLS files of the cluster block are unusable.
    #[error("cluster tls: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// TLS on routes needs a CA to verify peers.
    #[error("cluster tls needs ca_file to verify peer servers")]
    TlsWithoutCa,
}

/// Whether the user and password a route's CONNECT presented pass `auth`
/// (no `authorization` admits every route).
fn route_authorized(
    auth: Option<&ClusterAuth>,
    presented: &(Option<String>, Option<String>),
) -> bool {
    auth.is_none_or(|a| {
        presented.0.as_deref() == Some(a.user.as_str())
            && presented.1.as_deref().unwrap_or("") == a.password
    })
}

/// The acceptor and connector of routes with TLS files `files` (the same
/// certificate both ways; the CA verifies peers both ways).
pub(crate) fn route_tls(
    files: &crate::config::nats::TlsFiles,
) -> Result<(tokio_rustls::TlsAcceptor, tokio_rustls::TlsConnector), RouteError> {
    let ca = files.ca.as_deref().ok_or(RouteError::TlsWithoutCa)?;
    let server = crate::tls::server_config(files)?;
    let client =
        crate::tls::client_config_with(ca, Some((&files.cert, &files.key)), &files.params)?;
    Ok((
        tokio_rustls::TlsAcceptor::from(server),
        tokio_rustls::TlsConnector::from(client),
    ))
}

/// The route INFO we send.
#[derive(Serialize)]
struct RouteInfoOut<'a> {
    server_id: &'a str,
    server_name: &'a str,
    version: &'static str,
    proto: u32,
    go: &'static str,
    host: &'a str,
    port: u16,
    headers: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    auth_required: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    tls_required: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    tls_verify: bool,
    max_payload: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip: Option<String>,
    cluster: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cluster_dynamic: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    connect_urls: Vec<String>,
    /// Our leaf listener's advertised URL, which the peer passes on to the
    /// leaves it accepts (as nats-server).
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    leafnode_urls: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    ldm: bool,
    #[serde(skip_serializing_if = "is_zero")]
    route_pool_size: usize,
    #[serde(skip_serializing_if = "is_zero")]
    route_pool_idx: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    route_account: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    compression: Option<&'a str>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The fields of a peer's INFO we use (others are ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PeerInfo {
    server_id: String,
    /// The peer's route compression mode (absent: a server without it).
    compression: Option<String>,
    server_name: String,
    port: u16,
    ip: String,
    cluster: String,
    cluster_dynamic: bool,
    connect_urls: Vec<String>,
    leafnode_urls: Vec<String>,
    ldm: bool,
    route_pool_size: i64,
    route_pool_idx: i64,
    route_account: String,
    /// nats-server's announcement that `route_account` moves to a pinned
    /// connection (a reload pinned it), or, without an account, the
    /// answer to ours.
    route_acc_add_reqid: String,
}

/// The fields of a peer's CONNECT we check.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PeerConnect {
    user: Option<String>,
    pass: Option<String>,
    name: String,
    cluster: String,
    cluster_dynamic: bool,
    /// Only clients send `lang`: its presence means a client dialled the
    /// cluster port.
    lang: Option<String>,
    gateway: Option<String>,
}

/// The CONNECT we send on solicited routes.
#[derive(Serialize)]
struct ConnectOut<'a> {
    echo: bool,
    verbose: bool,
    pedantic: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pass: Option<&'a str>,
    tls_required: bool,
    headers: bool,
    name: &'a str,
    cluster: &'a str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cluster_dynamic: bool,
}

pub(crate) fn is_wildcard_host(h: &str) -> bool {
    h.is_empty() || h == "0.0.0.0" || h == "::" || h == "[::]"
}

/// Splits a route URL into (user, pass) credentials and `host:port`.
fn split_route_url(url: &str) -> (Option<(String, String)>, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.trim_end_matches('/');
    match rest.rsplit_once('@') {
        Some((ui, hp)) => {
            let (u, p) = ui.split_once(':').unwrap_or((ui, ""));
            (Some((u.to_string(), p.to_string())), hp.to_string())
        }
        None => (None, rest.to_string()),
    }
}

/// The host part of `host:port` (brackets of IPv6 removed).
pub(crate) fn host_of(hp: &str) -> &str {
    hp.rsplit_once(':')
        .map_or(hp, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
}

/// A reachable address of this machine for URLs when listening on all
/// interfaces: the source address the kernel would use for an outside
/// destination (a UDP connect sends nothing), else loopback.
pub(crate) fn primary_ip() -> String {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

impl Routes {
    /// Binds the route listener (so a bad address fails start-up).
    pub(crate) async fn bind(
        opts: &NatsOptions,
        cluster: &ClusterOptions,
        client_port: u16,
    ) -> Result<(Routes, TcpListener), RouteError> {
        let bind = format!("{}:{}", cluster.host, cluster.port);
        let listener = TcpListener::bind(&bind)
            .await
            .map_err(|source| RouteError::Bind {
                addr: bind.clone(),
                source,
            })?;
        let listen = listener.local_addr().map_err(|source| RouteError::Bind {
            addr: bind.clone(),
            source,
        })?;
        let (tls_acceptor, tls_connector) = match &cluster.tls {
            Some(files) => {
                let (a, c) = route_tls(files)?;
                (Some(a), Some(c))
            }
            None => (None, None),
        };
        let client_host = if is_wildcard_host(&opts.host) {
            primary_ip()
        } else {
            opts.host.clone()
        };
        let (name, dynamic) = match &cluster.name {
            Some(n) => (n.clone(), false),
            // As nats-server: a random name, given up for a peer's
            // configured one.
            None => (
                nkeys::KeyPair::new_server().public_key()[..22].to_string(),
                true,
            ),
        };
        Ok((
            Routes {
                opts: cluster.clone(),
                configured: Mutex::new(cluster.routes.clone()),
                connect_retries: AtomicU32::new(cluster.connect_retries),
                pool_size: AtomicUsize::new(cluster.pool_size),
                pins: parking_lot::RwLock::new(Arc::new(cluster.pinned_accounts.clone())),
                compression: parking_lot::RwLock::new(cluster.compression.clone()),
                listen,
                name: Mutex::new(name),
                dynamic: AtomicBool::new(dynamic),
                state: Mutex::new(State::default()),
                cancel: CancellationToken::new(),
                stats: RouteStats::default(),
                tls_acceptor: parking_lot::RwLock::new(tls_acceptor),
                tls_connector: parking_lot::RwLock::new(tls_connector),
                own_client_url: format!("{client_host}:{client_port}"),
                advertise: parking_lot::RwLock::new((
                    cluster.advertise.clone(),
                    cluster.no_advertise,
                )),
                auth: parking_lot::RwLock::new(cluster.auth.clone()),
                max_pending: opts.max_pending,
            },
            listener,
        ))
    }

    /// The cluster name (may change once while dynamic).
    pub fn cluster_name(&self) -> String {
        self.name.lock().clone()
    }

    /// The cluster options (as at start-up; `routes`, `connect_retries`,
    /// `pool_size`, `accounts`, `compression`, `advertise`, `no_advertise`
    /// and the TLS files may have changed since, see
    /// [`Routes::reconfigure`]).
    pub fn options(&self) -> &ClusterOptions {
        &self.opts
    }

    /// `no_advertise` in force: our clients are not told the cluster's
    /// client URLs, nor are peers told ours.
    pub fn no_advertise(&self) -> bool {
        self.advertise.read().1
    }

    /// `pool_size` in force: `0` = no pool.
    pub fn pool_size(&self) -> usize {
        self.pool_size.load(Ordering::Acquire)
    }

    /// The accounts pinned in force.
    pub fn pinned_accounts(&self) -> Arc<Vec<String>> {
        self.pins.read().clone()
    }

    /// Registered route connections (every connection of a pool).
    pub fn routes(&self) -> Vec<Arc<Route>> {
        let st = self.state.lock();
        let mut v: Vec<Arc<Route>> = st.all_routes().cloned().collect();
        v.sort_by_key(|r| r.client.id);
        v
    }

    /// Number of registered route connections.
    pub fn num_routes(&self) -> usize {
        self.state.lock().all_routes().count()
    }

    /// Whether `url` is one of the configured routes in force.
    fn is_configured_url(&self, url: &str) -> bool {
        self.configured
            .lock()
            .iter()
            .any(|u| same_route_url(u, url))
    }

    /// Every route connection, registered or still in its handshake.
    fn every_connection(&self) -> Vec<Arc<Route>> {
        let st = self.state.lock();
        st.all_routes()
            .chain(st.pending.values())
            .cloned()
            .collect()
    }

    /// A reload's new cluster name, as nats-server applies it: INFOs from
    /// now on carry it and peers must match it from their next connection;
    /// routes already up stay; the leaf connections we solicited close
    /// and reconnect, so hubs see the new name. Returns the notices.
    fn rename(&self, server: &Arc<ServerInner>, name: &str) -> Vec<String> {
        *self.name.lock() = name.to_string();
        self.dynamic.store(false, Ordering::Relaxed);
        let closed = server.leafs.as_ref().map_or(0, |l| l.close_solicited());
        vec![
            format!("Cluster name updated to {name}"),
            format!("{closed} solicited leafnode connections closed to reconnect with it"),
        ]
    }

    /// After a reload of the route users, as nats-server: each connection a
    /// peer dialled whose CONNECT no longer passes `auth` is closed with
    /// `-ERR 'Authorization Violation'` (the peer is refused until its
    /// configuration matches); connections we dialled stay, since the
    /// peer checked them. Returns the notices.
    fn recheck_accepted(&self, auth: &Option<ClusterAuth>) -> Vec<String> {
        let mut closed = 0;
        for r in self.every_connection() {
            if r.did_solicit || route_authorized(auth.as_ref(), &r.presented.lock()) {
                continue;
            }
            tracing::warn!(
                rid = r.client.id,
                "route no longer authorized after reload: closing"
            );
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            r.client.close_with_err(Some("Authorization Violation"));
            closed += 1;
        }
        vec![format!(
            "Reloaded: cluster authorization ({closed} accepted route connections no longer authorized closed)"
        )]
    }

    /// Routes connected from now on use `tls` (a reload re-read the
    /// files); connected ones keep their session.
    pub(crate) fn set_tls(&self, tls: (tokio_rustls::TlsAcceptor, tokio_rustls::TlsConnector)) {
        *self.tls_acceptor.write() = Some(tls.0);
        *self.tls_connector.write() = Some(tls.1);
    }

    /// Applies a reload's cluster block (its other fields cannot change,
    /// see `reload::diff_cluster`). Returns the notices to log.
    ///
    /// - `routes`, as nats-server: connections solicited for a route no
    ///   longer listed are closed and not re-dialled (a connection the peer
    ///   dialled itself stays), and new routes are dialled;
    /// - `connect_retries` applies to the next gossip-driven dial;
    /// - `advertise` and `no_advertise` apply to route INFOs sent from now
    ///   on and to client `connect_urls` (peers keep what they were told
    ///   until their route re-forms, as with nats-server);
    /// - `name`: see [`Routes::rename`];
    /// - `authorization` (the route users): see
    ///   [`Routes::recheck_accepted`];
    /// - `compression` alone: see [`Routes::recompress`];
    /// - `pool_size` or `accounts`: the pool connections and the ones
    ///   pinned to an account the reload pinned or unpinned close and
    ///   re-form with the new pools, pins and compression; other pinned
    ///   connections stay (see [`Routes::reset_pools`]). Core messages
    ///   crossing a closing connection in that moment may be lost, as at
    ///   any route reconnect.
    pub(crate) fn reconfigure(
        &self,
        server: &Arc<ServerInner>,
        cluster: &ClusterOptions,
    ) -> Vec<String> {
        let routes = &cluster.routes;
        self.connect_retries
            .store(cluster.connect_retries, Ordering::Relaxed);
        *self.advertise.write() = (cluster.advertise.clone(), cluster.no_advertise);
        let mut notes = Vec::new();
        if let Some(name) = cluster.name.as_ref().filter(|n| **n != self.cluster_name()) {
            notes.extend(self.rename(server, name));
        }
        if *self.auth.read() != cluster.auth {
            *self.auth.write() = cluster.auth.clone();
            notes.extend(self.recheck_accepted(&cluster.auth));
        }
        let old_pins = self.pinned_accounts();
        let compression_changed = *self.compression.read() != cluster.compression;
        if compression_changed {
            *self.compression.write() = cluster.compression.clone();
        }
        if self.pool_size() != cluster.pool_size {
            notes.extend(self.reset_pools(server, cluster, &old_pins));
        } else if *old_pins != cluster.pinned_accounts {
            if self.pool_size() > 0 {
                notes.extend(self.repin(server, cluster, &old_pins));
            } else {
                *self.pins.write() = Arc::new(cluster.pinned_accounts.clone());
            }
        }
        // Connections that stay (all, or the pinned ones a new pool size
        // kept) switch level in place.
        if compression_changed {
            notes.extend(self.recompress(&cluster.compression));
        }
        let (added, removed) = {
            let mut cur = self.configured.lock();
            let added: Vec<String> = routes
                .iter()
                .filter(|n| !cur.iter().any(|o| same_route_url(o, n)))
                .cloned()
                .collect();
            let removed: Vec<String> = cur
                .iter()
                .filter(|o| !routes.iter().any(|n| same_route_url(o, n)))
                .cloned()
                .collect();
            *cur = routes.to_vec();
            (added, removed)
        };
        if !removed.is_empty() {
            let conns: Vec<Arc<Route>> = self.every_connection();
            for url in &removed {
                let mut closed = false;
                for r in &conns {
                    let mut rc = r.reconnect.lock();
                    if rc
                        .as_ref()
                        .is_some_and(|(u, configured)| *configured && same_route_url(u, url))
                    {
                        *rc = None;
                        drop(rc);
                        r.start_next.lock().take();
                        r.client.close_now();
                        closed = true;
                    }
                }
                if closed {
                    notes.push(format!("Removed route {}", redact_route_url(url)));
                }
            }
        }
        for url in added {
            solicit_configured(server, self, url);
        }
        notes
    }

    /// Puts a new `compression` in force on the live connections, as
    /// nats-server's reload does (see [`s2::reapply`]): a new level
    /// applies from the next write, and only the connections that must
    /// agree again (compression turned on or off, or `accept`) close and
    /// re-form. Returns the notices to log.
    fn recompress(&self, new: &S2Compression) -> Vec<String> {
        let conns: Vec<Arc<Route>> = self.every_connection();
        let (mut switched, mut closed) = (0, 0);
        for r in &conns {
            let sw = r.switches.as_ref();
            let rtt = r.client.meta.lock().rtt.unwrap_or_default();
            match s2::reapply_live(&r.compression, sw, sw.is_none(), new, rtt) {
                s2::Reapply::Keep => {}
                s2::Reapply::Level(..) => switched += 1,
                s2::Reapply::Reconnect => {
                    r.client.close_with_err(None);
                    closed += 1;
                }
            }
        }
        vec![format!(
            "Route compression {} in force: {switched} route connections switched level, {closed} closed to agree again",
            new.name().unwrap_or("off"),
        )]
    }

    /// Puts a new `pool_size` and pinned account list in force. With pools
    /// on before and after, as nats-server: the pool connections close and
    /// re-form at the new size (each carrying the interest of its slot
    /// under the new pins), connections pinned to an account the reload
    /// pinned or unpinned close, and the other pinned connections (a peer's
    /// `$SYS`, accounts pinned before and after) stay up with their
    /// interest. Pools turned on or off re-form every connection. Pinned
    /// connections to configured routes are dialled for accounts newly
    /// pinned; a pinned connection we dialled for an account no longer
    /// pinned is not re-dialled.
    fn reset_pools(
        &self,
        server: &Arc<ServerInner>,
        cluster: &ClusterOptions,
        old_pins: &[String],
    ) -> Vec<String> {
        let new_pins = Arc::new(cluster.pinned_accounts.clone());
        let added: Vec<&String> = new_pins.iter().filter(|a| !old_pins.contains(a)).collect();
        let changed = |a: &String| old_pins.contains(a) != new_pins.contains(a);
        let pooled_both = self.pool_size() > 0 && cluster.pool_size > 0;
        let announce = self.announcement(server, &added);
        self.pool_size.store(cluster.pool_size, Ordering::Release);
        *self.pins.write() = new_pins.clone();
        let kept =
            |r: &Arc<Route>| pooled_both && r.pinned.lock().as_ref().is_some_and(|a| !changed(a));
        let (conns, stayed) = {
            let mut st = self.state.lock();
            if !announce.is_empty() {
                for p in st.routes.values().filter(|p| p.pooled) {
                    if let Some(r) = p.conns.iter().flatten().next() {
                        r.client.send_now(&announce);
                    }
                }
            }
            let mut v: Vec<Arc<Route>> =
                st.pending.values().filter(|r| !kept(r)).cloned().collect();
            st.routes.retain(|_, p| {
                v.extend(p.conns.drain(..).flatten());
                let (stay, go): (HashMap<_, _>, HashMap<_, _>) =
                    p.pinned.drain().partition(|(_, r)| kept(r));
                v.extend(go.into_values());
                p.pinned = stay;
                !p.pinned.is_empty()
            });
            let stayed = st.routes.values().map(|p| p.pinned.len()).sum::<usize>();
            (v, stayed)
        };
        for r in &conns {
            // Our pinned connection of an account no longer pinned (or
            // with pools gone) is not re-dialled; the rest re-dial (or are
            // re-dialled by the peer) and meet the new settings.
            let unpinned = r
                .pinned
                .lock()
                .as_ref()
                .is_some_and(|a| r.did_solicit && !new_pins.contains(a));
            if unpinned {
                *r.reconnect.lock() = None;
            }
            r.start_next.lock().take();
            // What is queued (the announcements) goes out first.
            r.client.close_with_err(None);
        }
        for url in self.configured.lock().clone() {
            solicit_pinned(server, &url, true, None, added.iter().copied());
        }
        vec![format!(
            "Route pool size {}, pinned accounts {:?} and compression {} in force: {} route connections closed to re-form, {stayed} pinned connections kept",
            cluster.pool_size,
            new_pins.as_slice(),
            cluster.compression.name().unwrap_or("off"),
            conns.len()
        )]
    }

    /// nats-server's announcement of accounts a reload pinned, sent to
    /// each pooling peer before their pinned connections are dialled: a
    /// peer that does not pin one itself then accepts its pinned
    /// connection (else it answers `-ERR 'No route for account'`) and
    /// moves its interest there.
    fn announcement(&self, server: &ServerInner, added: &[&String]) -> BytesMut {
        let mut announce = BytesMut::new();
        for a in added {
            let info = serde_json::json!({
                "route_pool_size": self.pool_size(),
                "route_account": a,
                "route_acc_add_reqid": &server.server_id,
            });
            proto::encode_info(&mut announce, &info.to_string());
        }
        announce
    }

    /// Puts a new pinned account list in force with the pool size
    /// unchanged, as nats-server: no pool connection closes. An account
    /// newly pinned is announced to each pooling peer, the interest in it
    /// that their pool connections carried is dropped (it comes again on
    /// the pinned connections), ours goes to a connection already pinned
    /// to it or to the ones dialled now; an account unpinned has its
    /// pinned connections closed (ours not re-dialled) and our interest in
    /// it sent on the pool connection of its slot.
    fn repin(
        &self,
        server: &Arc<ServerInner>,
        cluster: &ClusterOptions,
        old_pins: &[String],
    ) -> Vec<String> {
        let new_pins = Arc::new(cluster.pinned_accounts.clone());
        let added: Vec<&String> = new_pins.iter().filter(|a| !old_pins.contains(a)).collect();
        let removed: Vec<&String> = old_pins.iter().filter(|a| !new_pins.contains(a)).collect();
        let announce = self.announcement(server, &added);
        *self.pins.write() = new_pins.clone();
        let pool = self.pool_size();
        let (mut drop, mut close, mut dial) = (Vec::new(), Vec::new(), Vec::new());
        {
            let mut guard = self.state.lock();
            let st = &mut *guard;
            close.extend(
                st.pending
                    .values()
                    .filter(|r| {
                        r.pinned
                            .lock()
                            .as_ref()
                            .is_some_and(|a| removed.contains(&a))
                    })
                    .cloned(),
            );
            for (id, p) in st.routes.iter_mut().filter(|(_, p)| p.pooled) {
                let first = p.conns.iter().flatten().next().cloned();
                if let Some(r) = first.as_ref().filter(|_| !announce.is_empty()) {
                    r.client.send_now(&announce);
                }
                for a in &added {
                    drop.extend(pool_interest(p, a));
                    let sent = p.moved.remove(*a);
                    if let Some(r) = p.pinned.get(*a).filter(|_| !sent) {
                        let mut b = BytesMut::new();
                        encode_account_interest(&mut b, &st.interest, a, true);
                        r.client.send_now(&b);
                    }
                }
                for a in &removed {
                    close.extend(p.pinned.remove(*a));
                    p.moved.remove(*a);
                    if let Some(r) = p.conn_for(a, pool, &new_pins) {
                        let mut b = BytesMut::new();
                        encode_account_interest(&mut b, &st.interest, a, false);
                        r.client.send_now(&b);
                    }
                }
                // Configured routes dial below; peers learned by gossip here.
                if let Some(url) = first
                    .filter(|r| !r.is_configured())
                    .and_then(|r| r.peer_url())
                {
                    dial.push((url, id.clone()));
                }
            }
            // The peers we announced to the others are named again per
            // newly pinned account, as when they joined: nats-server peers
            // dial their pinned connections between each other only when
            // told so.
            if !added.is_empty() {
                for (id, p) in st.routes.iter().filter(|(_, p)| p.pooled) {
                    let Some(g) = &p.gossip else { continue };
                    let mut b = BytesMut::new();
                    encode_pinned_gossip(&mut b, g, added.iter().copied());
                    for (_, other) in st.routes.iter().filter(|(k, o)| *k != id && o.pooled) {
                        if let Some(r) = other.conns.iter().flatten().next() {
                            r.client.send_now(&b);
                        }
                    }
                }
            }
        }
        for sub in drop {
            server.remove_subscription(&sub);
        }
        for r in &close {
            if r.did_solicit {
                *r.reconnect.lock() = None;
            }
            r.client.close_with_err(None);
        }
        for url in self.configured.lock().clone() {
            solicit_pinned(server, &url, true, None, added.iter().copied());
        }
        for (url, id) in dial {
            solicit_pinned(server, &url, false, Some(&id), added.iter().copied());
        }
        vec![format!(
            "Route pinned accounts {:?} in force: {} accounts pinned, {} unpinned ({} pinned connections closed), pool connections kept",
            new_pins.as_slice(),
            added.len(),
            removed.len(),
            close.len()
        )]
    }

    /// Number of servers we have routes to.
    pub fn num_remotes(&self) -> usize {
        self.state.lock().routes.len()
    }

    /// Remote server ids of the routed peers.
    pub fn remote_ids(&self) -> Vec<String> {
        let mut v: Vec<String> = self.state.lock().routes.keys().cloned().collect();
        v.sort();
        v
    }

    /// Client URLs of this server and every routed peer (deduplicated,
    /// sorted), for `connect_urls` in client INFO.
    pub fn client_connect_urls(&self) -> Vec<String> {
        if self.no_advertise() {
            return Vec::new();
        }
        let st = self.state.lock();
        let mut urls: Vec<String> = vec![self.own_client_url.clone()];
        for r in st.routes.values().filter_map(|p| p.live().next()) {
            urls.extend(r.remote.lock().connect_urls.iter().cloned());
        }
        urls.sort();
        urls.dedup();
        urls
    }

    /// The leaf URLs the routed peers advertise (deduplicated, sorted):
    /// leaves we accept may reconnect to any of them.
    pub fn peer_leaf_urls(&self) -> Vec<String> {
        let st = self.state.lock();
        let mut urls: Vec<String> = st
            .routes
            .values()
            .filter_map(|p| p.live().next())
            .flat_map(|r| r.remote.lock().leaf_urls.clone())
            .collect();
        urls.sort();
        urls.dedup();
        urls
    }

    /// Passes a message of the claims service (an update pushed here, a
    /// lookup, a pack request) to every route peer, in the system account
    /// `account`, for the queue groups `queues` too (see `claims`).
    /// Returns how many peers it went to.
    pub(crate) fn forward_system(
        &self,
        account: &str,
        subject: &str,
        reply: Option<&str>,
        queues: &[&[u8]],
        payload: &[u8],
    ) -> usize {
        let mut b = BytesMut::new();
        encode_rmsg(
            &mut b,
            account.as_bytes(),
            subject.as_bytes(),
            reply.map(str::as_bytes),
            queues,
            None,
            payload,
        );
        let st = self.state.lock();
        let pool = self.pool_size();
        let mut n = 0;
        for p in st.routes.values() {
            let pool_conn = p.conn_for(account, pool, &[]);
            if let Some(r) = pool_conn.or_else(|| p.conns.iter().flatten().next()) {
                r.client.send_now(&b);
                n += 1;
            }
        }
        n
    }

    pub(crate) fn local_interest(
        &self,
        account: &str,
        subject: &str,
        queue: Option<&str>,
        delta: i32,
    ) {
        let mut st = self.state.lock();
        let key = (
            account.to_string(),
            subject.to_string(),
            queue.map(str::to_string),
        );
        let before = st.interest.get(&key).copied().unwrap_or(0);
        let after = if delta > 0 {
            before.saturating_add(1)
        } else {
            before.saturating_sub(1)
        };
        if after == 0 {
            st.interest.remove(&key);
        } else {
            st.interest.insert(key, after);
        }
        let changed = match queue {
            None => (before == 0) != (after == 0),
            Some(_) => before != after,
        };
        if !changed || st.routes.is_empty() {
            return;
        }
        let mut b = BytesMut::new();
        if after == 0 {
            encode_rs_minus(&mut b, account, subject, queue);
        } else {
            encode_rs_plus(&mut b, account, subject, queue.map(|q| (q, after)));
        }
        // A pinned connection's lines omit the account.
        let (pool, pins) = (self.pool_size(), self.pinned_accounts());
        let mut pinned = BytesMut::new();
        if after == 0 {
            encode_pinned_minus(&mut pinned, subject, queue);
        } else {
            encode_pinned_plus(&mut pinned, subject, queue.map(|q| (q, after)));
        }
        // A slot not connected yet gets the whole table when it is.
        for r in st
            .routes
            .values()
            .filter_map(|p| p.conn_for(account, pool, &pins))
        {
            if r.client.pinned_route.load(Ordering::Acquire) {
                r.client.send_now(&pinned);
            } else {
                r.client.send_now(&b);
            }
        }
    }

    /// Closes the listener, the solicit tasks and every route.
    pub(crate) fn shutdown(&self) {
        self.cancel.cancel();
        let routes: Vec<Arc<Route>> = self.every_connection();
        for r in routes {
            r.client.close_now();
        }
    }

    /// Tells every peer we entered lame duck mode, so they stop handing
    /// our client URLs to their clients.
    pub(crate) fn announce_lame_duck(&self, server: &ServerInner) {
        let mut frame = BytesMut::new();
        proto::encode_info(&mut frame, &self.info_json(server, true, 0, None, None));
        for r in self.state.lock().all_routes() {
            r.client.send_now(&frame);
        }
    }

    /// The INFO of a new connection; `pool_idx`: the slot a solicited
    /// pool connection took; `account`: the account of a solicited pinned
    /// connection.
    fn route_info_json(
        &self,
        server: &ServerInner,
        pool_idx: usize,
        account: Option<&str>,
    ) -> String {
        self.info_json(server, false, pool_idx, account, None)
    }

    fn info_json(
        &self,
        server: &ServerInner,
        ldm: bool,
        pool_idx: usize,
        route_account: Option<&str>,
        compression: Option<&str>,
    ) -> String {
        let (advertise, no_advertise) = self.advertise.read().clone();
        let advertise = advertise
            .as_ref()
            .map(|a| format!("nats-route://{}/", a.trim_end_matches('/')));
        let host = self.opts.host.as_str();
        let name = self.cluster_name();
        let info = RouteInfoOut {
            server_id: &server.server_id,
            server_name: &server.server_name,
            version: SERVER_VERSION,
            // Route protocol 2: accounts in RS+/RMSG (as 2.9.10 announces).
            proto: 2,
            go: "rust",
            host,
            port: self.listen.port(),
            headers: true,
            auth_required: self.auth.read().is_some(),
            tls_required: self.tls_acceptor.read().is_some(),
            tls_verify: self.tls_acceptor.read().is_some(),
            max_payload: server.opts.max_payload,
            ip: advertise,
            cluster: name,
            cluster_dynamic: self.dynamic.load(Ordering::Relaxed),
            connect_urls: if no_advertise || ldm {
                Vec::new()
            } else {
                vec![self.own_client_url.clone()]
            },
            leafnode_urls: server
                .leafs
                .as_ref()
                .map_or(&[][..], |l| l.advertised_url()),
            ldm,
            route_pool_size: self.pool_size(),
            route_pool_idx: pool_idx,
            route_account,
            compression,
        };
        // Serializing strings and numbers cannot fail.
        serde_json::to_string(&info).unwrap_or_default()
    }
}

/// Starts the accept loop and the configured routes.
pub(crate) fn spawn(server: Arc<ServerInner>, listener: TcpListener) {
    let Some(routes) = server.routes.as_ref() else {
        return;
    };
    tracing::info!(addr = %routes.listen, cluster = %routes.cluster_name(), "listening for route connections");
    tokio::spawn(accept_loop(server.clone(), listener));
    // The pool, then one connection per pinned account, to every
    // configured route (as nats-server).
    let urls = routes.configured.lock().clone();
    for url in urls {
        solicit_configured(&server, routes, url);
    }
}

/// Dials a configured route: the pool, then one connection per pinned
/// account (as nats-server).
fn solicit_configured(server: &Arc<ServerInner>, routes: &Routes, url: String) {
    solicit_pinned(server, &url, true, None, routes.pinned_accounts().iter());
    tokio::spawn(solicit(server.clone(), url, true, None, 0, None));
}

/// Dials one connection pinned to each of `accounts` at `url` (to server
/// `expect_id` when the route was learned by gossip).
fn solicit_pinned<'a>(
    server: &Arc<ServerInner>,
    url: &str,
    configured: bool,
    expect_id: Option<&str>,
    accounts: impl Iterator<Item = &'a String>,
) {
    for a in accounts {
        tokio::spawn(solicit(
            server.clone(),
            url.to_string(),
            configured,
            expect_id.map(str::to_string),
            0,
            Some(a.clone()),
        ));
    }
}

/// A route URL for logs: its password replaced, as nats-server redacts.
fn redact_route_url(url: &str) -> String {
    match split_route_url(url) {
        (Some((user, _)), hp) => {
            let scheme = url.split_once("://").map_or("nats-route", |(s, _)| s);
            format!("{scheme}://{user}:xxxxx@{hp}")
        }
        (None, _) => url.trim_end_matches('/').to_string(),
    }
}

/// Two route URLs name the same configured route (a trailing `/` aside).
fn same_route_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

async fn accept_loop(server: Arc<ServerInner>, listener: TcpListener) {
    let Some(routes) = server.routes.as_ref() else {
        return;
    };
    let cancel = routes.cancel.clone();
    accept_peers(listener, cancel, "route", move |stream, addr| {
        tokio::spawn(accept_one(server.clone(), stream, addr));
    })
    .await;
}

/// Accepts connections on a peer listener (routes, leaf nodes) until
/// `cancel`, handing each to `on_conn`; a failing accept (EMFILE) backs
/// off instead of spinning.
pub(crate) async fn accept_peers(
    listener: TcpListener,
    cancel: CancellationToken,
    what: &'static str,
    mut on_conn: impl FnMut(TcpStream, SocketAddr),
) {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, addr)) => {
                let _ = stream.set_nodelay(true);
                on_conn(stream, addr);
            }
            Err(e) => {
                tracing::warn!(error = %e, "{what} accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn accept_one(server: Arc<ServerInner>, stream: TcpStream, addr: SocketAddr) {
    let Some(routes) = server.routes.as_ref() else {
        return;
    };
    let acceptor = routes.tls_acceptor.read().clone();
    match acceptor {
        None => run_route(server, stream, addr, None, 0, None).await,
        Some(acc) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, acc.accept(stream)).await {
            Ok(Ok(tls)) => run_route(server, tls, addr, None, 0, None).await,
            Ok(Err(e)) => {
                tracing::warn!(%addr, error = %e, "route TLS handshake failed");
                routes.stats.rejected.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                tracing::warn!(%addr, "route TLS handshake timed out");
                routes.stats.rejected.fetch_add(1, Ordering::Relaxed);
            }
        },
    }
}

/// The entry in `connecting` of a gossip-driven dial to server `id` (of
/// its connection pinned to `account`, if any).
fn connecting_key(id: &str, account: Option<&str>) -> String {
    match account {
        Some(a) => format!("{id} {a}"),
        None => id.to_string(),
    }
}

fn backoff(attempt: u32) -> Duration {
    let d = RECONNECT_MIN.saturating_mul(1u32 << attempt.min(8));
    d.min(RECONNECT_MAX)
}

/// Solicits a route to `url` (retrying with backoff) and runs it.
/// `expect_id`: for implicit routes, the id learned by gossip (stop when a
/// route to it exists). `attempt`: attempts already made.
async fn solicit(
    server: Arc<ServerInner>,
    url: String,
    configured: bool,
    expect_id: Option<String>,
    mut attempt: u32,
    account: Option<String>,
) {
    let Some(routes) = server.routes.as_ref() else {
        return;
    };
    // As nats-server: configured routes retry forever; `connect_retries`
    // bounds implicit (gossiped) ones.
    let max_attempts = if configured {
        u32::MAX
    } else {
        routes
            .connect_retries
            .load(Ordering::Relaxed)
            .saturating_add(1 + IMPLICIT_EXTRA_ATTEMPTS)
    };
    let (_, hostport) = split_route_url(&url);
    let connecting_key = expect_id
        .as_ref()
        .map(|id| connecting_key(id, account.as_deref()));
    loop {
        if attempt > 0 {
            tokio::select! {
                _ = routes.cancel.cancelled() => break,
                _ = tokio::time::sleep(backoff(attempt - 1)) => {}
            }
        }
        if routes.cancel.is_cancelled() || attempt >= max_attempts {
            break;
        }
        // A configured route removed by a reload is not dialled again.
        if configured && !routes.is_configured_url(&url) {
            tracing::debug!(%url, "not connecting to route: no longer configured");
            break;
        }
        // Nor a pinned connection of an account a reload unpinned.
        if account
            .as_ref()
            .is_some_and(|a| !routes.pinned_accounts().contains(a))
        {
            tracing::debug!(%url, account = ?account, "not connecting to route: account no longer pinned");
            break;
        }
        if let Some(id) = &expect_id {
            if routes.state.lock().has_route(id, account.as_deref()) || *id == server.server_id {
                break;
            }
        }
        attempt += 1;
        let conn = tokio::time::timeout(HANDSHAKE_TIMEOUT, TcpStream::connect(&hostport)).await;
        let stream = match conn {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(%url, error = %e, "error trying to connect to route");
                continue;
            }
            Err(_) => {
                tracing::debug!(%url, "timed out connecting to route");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let addr = match stream.peer_addr() {
            Ok(a) => a,
            Err(_) => continue,
        };
        // From here the connection's own cleanup decides about retries.
        if let Some(k) = &connecting_key {
            routes.state.lock().connecting.remove(k);
        }
        let solicited = Some((url.clone(), configured));
        let connector = routes.tls_connector.read().clone();
        match connector {
            None => run_route(server.clone(), stream, addr, solicited, attempt, account).await,
            Some(conn) => {
                let name =
                    match rustls::pki_types::ServerName::try_from(host_of(&hostport).to_string()) {
                        Ok(n) => n,
                        Err(e) => {
                            tracing::error!(%url, error = %e, "bad route host name for TLS");
                            break;
                        }
                    };
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, conn.connect(name, stream)).await {
                    Ok(Ok(tls)) => {
                        run_route(server.clone(), tls, addr, solicited, attempt, account).await
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(%url, error = %e, "route TLS handshake failed");
                        continue;
                    }
                    Err(_) => {
                        tracing::warn!(%url, "route TLS handshake timed out");
                        continue;
                    }
                }
            }
        }
        // The connection ran and ended; its cleanup decided whether to
        // reconnect (it spawns a new solicit task if so).
        return;
    }
    if let Some(k) = &connecting_key {
        routes.state.lock().connecting.remove(k);
    }
}

/// Runs one route connection to its end, then cleans up and, for a
/// solicited route, reconnects.
async fn run_route<S>(
    server: Arc<ServerInner>,
    stream: S,
    addr: SocketAddr,
    solicited: Option<(String, bool)>,
    attempt: u32,
    pinned: Option<String>,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let Some(routes) = server.routes.as_ref() else {
        return;
    };
    let cid = server.next_client_id();
    let client = ClientShared::new(cid, ClientKind::Route, Some(addr), routes.max_pending);
    // With compression configured both sides first agree on it (see
    // `negotiate`): the accepting side's INFO names our mode, and the
    // soliciting side holds its INFO back until it knows the peer's.
    let compression = routes.compression.read().name();
    let switches = compression.map(|_| {
        let sw = s2::Switches::default();
        sw.read_armed.store(true, Ordering::Release);
        sw
    });
    let route = Arc::new(Route {
        client: client.clone(),
        did_solicit: solicited.is_some(),
        reconnect: Mutex::new(solicited.clone()),
        attempt: AtomicU32::new(attempt),
        remote: Mutex::new(Remote::default()),
        registered: AtomicBool::new(false),
        replaced: AtomicBool::new(false),
        start_next: Mutex::new(None),
        pinned: Mutex::new(pinned),
        compression: Mutex::new("not supported"),
        switches: switches.clone(),
        presented: Mutex::new((None, None)),
    });
    {
        let mut st = routes.state.lock();
        if routes.cancel.is_cancelled() {
            return;
        }
        st.pending.insert(cid, route.clone());
    }
    let mut hello = BytesMut::new();
    if let Some((url, _)) = &solicited {
        let (creds, _) = split_route_url(url);
        let creds = creds.or_else(|| {
            routes
                .auth
                .read()
                .as_ref()
                .map(|a| (a.user.clone(), a.password.clone()))
        });
        let name = routes.cluster_name();
        let c = ConnectOut {
            echo: true,
            verbose: false,
            pedantic: false,
            user: creds.as_ref().map(|c| c.0.as_str()),
            pass: creds.as_ref().map(|c| c.1.as_str()),
            tls_required: routes.tls_connector.read().is_some(),
            headers: true,
            name: &server.server_id,
            cluster: &name,
            cluster_dynamic: routes.dynamic.load(Ordering::Relaxed),
        };
        hello.extend_from_slice(b"CONNECT ");
        hello.extend_from_slice(serde_json::to_string(&c).unwrap_or_default().as_bytes());
        hello.extend_from_slice(b"\r\n");
    }
    // A soliciting pool member sends its INFO once it knows its slot
    // (`register`), as nats-server expects.
    let info_held = solicited.is_some() && (routes.pool_size() > 0 || compression.is_some());
    if !info_held {
        let json = routes.info_json(&server, false, 0, None, compression);
        proto::encode_info(&mut hello, &json);
    }
    client.send_now(&hello);
    tracing::info!(%addr, rid = cid, solicited = solicited.is_some(), "route connection created");
    let (r, w) = tokio::io::split(stream);
    let r: Box<dyn AsyncRead + Send + Unpin> = match &switches {
        None => {
            tokio::spawn(client::write_loop(
                client.clone(),
                w,
                server.opts.write_deadline,
                server.clone(),
            ));
            Box::new(r)
        }
        Some(sw) => {
            tokio::spawn(client::write_loop(
                client.clone(),
                s2::S2Write::new(w, sw),
                server.opts.write_deadline,
                server.clone(),
            ));
            Box::new(s2::S2Read::new(r, sw))
        }
    };
    tokio::spawn(peer_ping_loop(client.clone(), server.clone()));
    let mut reader = RouteReader {
        negotiated: false,
        info_held: info_held && routes.pool_size() == 0,
        started: Instant::now(),
        server: server.clone(),
        route: route.clone(),
        addr,
        parser: RouteParser::new(server.opts.max_control_line.max(16 * 1024)),
        connected: solicited.is_some(),
        flush: FlushList::new(),
        cache: client::MatchCache::new(ROUTE_CACHE_MAX),
        acc_caches: HashMap::new(),
        in_msgs: 0,
        in_bytes: 0,
        pinned: None,
    };
    let reason = read_peer(&mut reader, r, BytesMut::with_capacity(64 * 1024)).await;
    // A connection closed with `-ERR` is already closing: its writer sends
    // the error, then ends. Anything else ends now.
    if !client.is_closed() {
        client.close_now();
    }
    cleanup(&server, &route, &reason);
}

fn cleanup(server: &Arc<ServerInner>, route: &Arc<Route>, reason: &str) {
    let Some(routes) = server.routes.as_ref() else {
        return;
    };
    // Remote interest goes with the connection.
    server.remove_client(&route.client);
    let remote = route.remote.lock().clone();
    let mut urls_changed = false;
    {
        let mut guard = routes.state.lock();
        let st = &mut *guard;
        st.pending.remove(&route.client.id);
        let mine =
            route.registered.load(Ordering::Acquire) && !route.replaced.load(Ordering::Acquire);
        if let Some(peer) = st.routes.get_mut(&remote.id).filter(|_| mine) {
            let slot = peer
                .conns
                .iter_mut()
                .find(|c| c.as_ref().is_some_and(|r| Arc::ptr_eq(r, route)));
            if let Some(slot) = slot {
                *slot = None;
            }
            peer.pinned.retain(|_, r| !Arc::ptr_eq(r, route));
            // An account the peer moved to this connection: our interest
            // in it goes back to the pool.
            let moved = route.pinned.lock().clone().filter(|a| peer.moved.remove(a));
            if let Some(account) = moved {
                let pool = routes.pool_size();
                if let Some(r) = peer.conn_for(&account, pool, &routes.pinned_accounts()) {
                    let mut b = BytesMut::new();
                    encode_account_interest(&mut b, &st.interest, &account, false);
                    r.client.send_now(&b);
                }
            }
            if peer.live().next().is_none() {
                st.routes.remove(&remote.id);
                urls_changed = !remote.connect_urls.is_empty() || !remote.leaf_urls.is_empty();
            }
        }
    }
    tracing::info!(
        rid = route.client.id,
        remote_id = %remote.id,
        remote_name = %remote.name,
        reason,
        "route connection closed"
    );
    if urls_changed {
        server.peer_urls_changed();
    }
    if routes.cancel.is_cancelled() || route.replaced.load(Ordering::Acquire) {
        return;
    }
    let Some((url, configured)) = route.reconnect.lock().clone() else {
        return;
    };
    let attempt = route.attempt.load(Ordering::Relaxed);
    let pinned = route.pinned.lock().clone();
    let expect = (!configured && !remote.id.is_empty()).then(|| remote.id.clone());
    if let Some(id) = &expect {
        if !routes
            .state
            .lock()
            .connecting
            .insert(connecting_key(id, pinned.as_deref()))
        {
            return;
        }
    }
    tokio::spawn(solicit(
        server.clone(),
        url,
        configured,
        expect,
        attempt,
        pinned,
    ));
}

/// Periodic PINGs on a route or leaf connection; one that misses
/// `ping_max` PONGs is closed.
pub(crate) async fn peer_ping_loop(client: Arc<ClientShared>, server: Arc<ServerInner>) {
    let interval = server.opts.ping_interval.min(MAX_PING_INTERVAL);
    let cancel = client.cancel.clone();
    let outstanding = &client.pings_out;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let out = outstanding.load(Ordering::Relaxed);
        if out + 1 > u64::from(server.opts.ping_max) {
            let kind = if client.kind == ClientKind::Route {
                "route"
            } else {
                "leafnode"
            };
            tracing::warn!(cid = client.id, "{kind} stale: no PONG, closing");
            client.close_with_err(Some("Stale Connection"));
            return;
        }
        outstanding.store(out + 1, Ordering::Relaxed);
        client.send_ping();
    }
}

/// The connection-specific half of a route or leaf read loop: what to do
/// with each operation, and when a batch of reads ends. [`read_peer`] is
/// the shared loop (buffering, parsing, batching, producer stalls).
pub(crate) trait PeerReader {
    /// What the connection is, for log lines ("route", "leafnode").
    const KIND: &'static str;
    /// The connection.
    fn peer(&self) -> &Arc<ClientShared>;
    /// The connection's parser.
    fn parser(&mut self) -> &mut RouteParser;
    /// The per-batch delivery state.
    fn flush_list(&mut self) -> &mut FlushList;
    /// Whether the handshake is complete (until then a timer runs).
    fn ready(&self) -> bool;
    /// The handshake did not complete in time: reject the peer.
    fn handshake_timed_out(&mut self);
    /// Applies one operation; `Err(reason)` ends the connection.
    fn apply(&mut self, op: RouteOp) -> Result<(), String>;
    /// Flushes receivers and adds the batch's counters.
    fn end_batch(&mut self);
    /// Counts a connection rejected for a protocol error.
    fn count_rejected(&self);
}

/// Reads and applies a peer's operations until the connection ends;
/// returns why. `buf` may hold bytes already read.
pub(crate) async fn read_peer<P: PeerReader, R: AsyncRead + Unpin>(
    p: &mut P,
    mut r: R,
    mut buf: BytesMut,
) -> String {
    let cancel = p.peer().cancel.clone();
    let handshake = tokio::time::sleep(HANDSHAKE_TIMEOUT);
    tokio::pin!(handshake);
    let mut pending_input = !buf.is_empty();
    loop {
        if !pending_input {
            let need = p.parser().needed();
            if need > buf.capacity() {
                buf.reserve(need - buf.len());
            } else if buf.capacity() - buf.len() < 4096 {
                buf.reserve(64 * 1024);
            }
            let ready = p.ready();
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return "closed".into(),
                _ = &mut handshake, if !ready => {
                    p.handshake_timed_out();
                    return "handshake timeout".into();
                }
                res = r.read_buf(&mut buf) => match res {
                    Ok(0) => return "connection closed by peer".into(),
                    Err(e) => return format!("read error: {e}"),
                    Ok(_) => {}
                },
            }
        }
        pending_input = false;
        loop {
            if p.flush_list().has_local_stall() {
                // A recorder queue is over its mark: stop reading this
                // peer until it drains (bounded, see `StallBound::Peer`).
                p.end_batch();
                for s in p.flush_list().take_local_stalled() {
                    client::wait_local_drained(&s, client::StallBound::Peer, &cancel).await;
                }
            }
            match p.parser().parse(&mut buf) {
                Ok(RouteParsed::Incomplete) => break,
                Ok(RouteParsed::Op(op)) => {
                    if let Err(why) = p.apply(op) {
                        p.end_batch();
                        return why;
                    }
                }
                Err(e) => {
                    p.end_batch();
                    let text = match &e {
                        RouteParseError::MaxControlLine => "maximum control line exceeded",
                        RouteParseError::MaxPayload => "Maximum Payload Violation",
                        _ => "Unknown Protocol Operation",
                    };
                    let c = p.peer();
                    tracing::warn!(cid = c.id, error = %e, "{} protocol error, closing", P::KIND);
                    p.count_rejected();
                    p.peer().close_with_err(Some(text));
                    return format!("protocol error: {e}");
                }
            }
        }
        p.end_batch();
        for s in p.flush_list().take_local_stalled() {
            client::wait_local_drained(&s, client::StallBound::Peer, &cancel).await;
        }
        for c in p.flush_list().take_stalled() {
            client::wait_drained(&c).await;
        }
    }
}

/// The sublist key of a peer's interest: `subject` or `subject queue`.
fn peer_sub_key(subject: &[u8], queue: Option<&[u8]>) -> Bytes {
    let mut k = BytesMut::with_capacity(subject.len() + queue.map_or(0, |q| q.len() + 1));
    k.extend_from_slice(subject);
    if let Some(q) = queue {
        k.extend_from_slice(b" ");
        k.extend_from_slice(q);
    }
    k.freeze()
}

/// A peer's interest (subject, queue) as text; `None` when either is not
/// UTF-8 (ignored, as an invalid subject is).
fn interest_text<'a>(
    subject: &'a [u8],
    queue: Option<&'a [u8]>,
) -> Option<(&'a str, Option<&'a str>)> {
    let subject = std::str::from_utf8(subject).ok()?;
    let queue = match queue {
        Some(q) => Some(std::str::from_utf8(q).ok()?),
        None => None,
    };
    Some((subject, queue))
}

/// Records a peer's (route's or leaf's) interest as a subscription of its
/// pseudo-client. A repeated queue interest is a weight update: one member
/// per peer is enough for us to pick the peer; the peer picks among its
/// members. Interest on an invalid subject is ignored (logged).
pub(crate) fn add_peer_interest(
    server: &ServerInner,
    client: &Arc<ClientShared>,
    subject: &[u8],
    queue: Option<&[u8]>,
) {
    let Some((subj, q)) = interest_text(subject, queue) else {
        return;
    };
    let key = peer_sub_key(subject, queue);
    if client.subs.lock().contains_key(&key) {
        return;
    }
    let sub = Subscription::new(
        subj.to_string(),
        q.map(str::to_string),
        key.clone(),
        client.clone(),
        None,
    );
    if server.add_subscription(&sub).is_err() {
        tracing::debug!(cid = client.id, subject = %subj, "ignoring peer interest on an invalid subject");
        return;
    }
    client.subs.lock().insert(key, sub);
}

/// Withdraws a peer's interest recorded by [`add_peer_interest`].
pub(crate) fn remove_peer_interest(
    server: &ServerInner,
    client: &Arc<ClientShared>,
    subject: &[u8],
    queue: Option<&[u8]>,
) {
    let key = peer_sub_key(subject, queue);
    let sub = client.subs.lock().get(&key).cloned();
    if let Some(sub) = sub {
        server.remove_subscription(&sub);
    }
}

/// The key of a route's interest in a non-global account in its
/// pseudo-client's map: `account subject[ queue]`.
fn route_sub_key(account: &[u8], subject: &[u8], queue: Option<&[u8]>) -> Bytes {
    let mut k = BytesMut::with_capacity(account.len() + 1 + subject.len());
    k.extend_from_slice(account);
    k.extend_from_slice(b" ");
    k.extend_from_slice(&peer_sub_key(subject, queue));
    k.freeze()
}

/// Records a route's interest in account `acc` (not `$G`) as a
/// subscription of its pseudo-client in that account's sublist; as
/// [`add_peer_interest`] otherwise.
fn add_route_interest(
    server: &ServerInner,
    client: &Arc<ClientShared>,
    acc: Arc<Account>,
    subject: &[u8],
    queue: Option<&[u8]>,
) {
    let Some((subj, q)) = interest_text(subject, queue) else {
        return;
    };
    let key = route_sub_key(acc.name.as_bytes(), subject, queue);
    if client.subs.lock().contains_key(&key) {
        return;
    }
    let sub = Subscription::new_in(
        subj.to_string(),
        q.map(str::to_string),
        key.clone(),
        client.clone(),
        None,
        Some(acc),
    );
    if server.add_subscription(&sub).is_err() {
        tracing::debug!(cid = client.id, subject = %subj, "ignoring route interest on an invalid subject");
        return;
    }
    client.subs.lock().insert(key, sub);
}

struct RouteReader {
    server: Arc<ServerInner>,
    route: Arc<Route>,
    addr: SocketAddr,
    parser: RouteParser,
    /// CONNECT received (accepted side) or sent (solicited side).
    connected: bool,
    flush: FlushList,
    /// Match cache of `$G`.
    cache: client::MatchCache,
    /// Match caches of other accounts, by account index.
    acc_caches: HashMap<usize, client::MatchCache>,
    /// Messages and bytes received in the current read batch.
    in_msgs: u64,
    in_bytes: u64,
    /// The account of a pinned connection, whose operations omit it.
    pinned: Option<Bytes>,
    /// Compression agreed on (or found unavailable) with the peer.
    negotiated: bool,
    /// Our INFO is still to be sent (a soliciting side with compression).
    info_held: bool,
    /// When the connection began (`s2_auto` measures its first round trip).
    started: Instant,
}

/// Why a route read loop ended early.
enum Stop {
    /// Close with this reason (already answered with `-ERR` if needed).
    Close(String),
}

impl PeerReader for RouteReader {
    const KIND: &'static str = "route";

    fn peer(&self) -> &Arc<ClientShared> {
        &self.route.client
    }

    fn parser(&mut self) -> &mut RouteParser {
        &mut self.parser
    }

    fn flush_list(&mut self) -> &mut FlushList {
        &mut self.flush
    }

    fn ready(&self) -> bool {
        self.route.registered.load(Ordering::Acquire)
    }

    fn handshake_timed_out(&mut self) {
        self.reject("Authentication Timeout", "route handshake timed out");
    }

    fn apply(&mut self, op: RouteOp) -> Result<(), String> {
        RouteReader::apply(self, op).map_err(|Stop::Close(why)| why)
    }

    fn end_batch(&mut self) {
        RouteReader::end_batch(self);
    }

    fn count_rejected(&self) {
        self.routes().stats.rejected.fetch_add(1, Ordering::Relaxed);
    }
}

impl RouteReader {
    fn routes(&self) -> &Routes {
        // `run_route` only runs when the server has routes.
        self.server
            .routes
            .as_ref()
            .expect("route reader without a cluster")
    }

    fn end_batch(&mut self) {
        self.flush.flush();
        let (m, b) = (
            std::mem::take(&mut self.in_msgs),
            std::mem::take(&mut self.in_bytes),
        );
        if m > 0 {
            let routes = self.routes();
            routes.stats.in_msgs.fetch_add(m, Ordering::Relaxed);
            routes.stats.in_bytes.fetch_add(b, Ordering::Relaxed);
            let c = &self.route.client.stats;
            c.in_msgs.fetch_add(m, Ordering::Relaxed);
            c.in_bytes.fetch_add(b, Ordering::Relaxed);
        }
        let tally = std::mem::take(&mut self.flush.tally);
        if tally.msgs > 0 {
            let s = &self.server.stats;
            s.out_msgs.fetch_add(tally.msgs, Ordering::Relaxed);
            s.out_bytes.fetch_add(tally.bytes, Ordering::Relaxed);
        }
    }

    /// Sends `-ERR`, logs, counts and closes.
    fn reject(&self, err: &str, log: &str) {
        tracing::warn!(addr = %self.addr, rid = self.route.client.id, "{log}");
        self.routes().stats.rejected.fetch_add(1, Ordering::Relaxed);
        self.route.client.close_with_err(Some(err));
    }

    fn apply(&mut self, op: RouteOp) -> Result<(), Stop> {
        if !self.connected {
            return match op {
                RouteOp::Connect(json) => self.on_connect(&json),
                _ => {
                    self.reject(
                        "Authorization Violation",
                        "route peer sent an operation before CONNECT",
                    );
                    Err(Stop::Close("no CONNECT".into()))
                }
            };
        }
        let registered = self.route.registered.load(Ordering::Acquire);
        match op {
            RouteOp::Ping => {
                self.route.client.send_raw(proto::PONG, &mut self.flush);
                Ok(())
            }
            RouteOp::Pong => {
                self.route.client.pings_out.store(0, Ordering::Relaxed);
                self.route.attempt.store(0, Ordering::Relaxed);
                if let Some(rtt) = self.route.client.note_pong() {
                    self.repick_level(rtt);
                }
                // The peer accepted this pool connection: dial the next.
                if let Some((url, configured)) = self.route.start_next.lock().take() {
                    let id = self.route.remote.lock().id.clone();
                    tokio::spawn(solicit(
                        self.server.clone(),
                        url,
                        configured,
                        Some(id),
                        0,
                        None,
                    ));
                }
                Ok(())
            }
            RouteOp::Ok => Ok(()),
            RouteOp::Err(text) => {
                let t = String::from_utf8_lossy(&text).into_owned();
                tracing::warn!(addr = %self.addr, rid = self.route.client.id, error = %t, "route peer sent -ERR, closing");
                Err(Stop::Close(format!("peer error {t}")))
            }
            RouteOp::Connect(_) => Ok(()),
            RouteOp::Info(json) => self.on_info(&json),
            _ if !registered => {
                self.reject(
                    "Unknown Protocol Operation",
                    "route peer sent interest or messages before INFO",
                );
                Err(Stop::Close("no INFO".into()))
            }
            RouteOp::Sub {
                account,
                subject,
                queue,
            } => {
                if self.route.client.subs.lock().len() >= MAX_ROUTE_SUBS {
                    self.reject(
                        "maximum subscriptions exceeded",
                        "route peer announced more interest than allowed, closing",
                    );
                    return Err(Stop::Close("too many remote subscriptions".into()));
                }
                let account = self.pinned.clone().unwrap_or(account);
                self.remote_sub(&account, &subject, queue);
                Ok(())
            }
            RouteOp::Unsub {
                account,
                subject,
                queue,
            } => {
                let account = self.pinned.clone().unwrap_or(account);
                self.remote_unsub(&account, &subject, queue.as_ref());
                Ok(())
            }
            RouteOp::Msg {
                account,
                subject,
                reply,
                queues,
                headers,
                payload,
            } => {
                let account = self.pinned.clone().unwrap_or(account);
                self.routed_msg(&account, subject, reply, &queues, headers, payload);
                Ok(())
            }
        }
    }

    fn on_connect(&mut self, json: &[u8]) -> Result<(), Stop> {
        let c: PeerConnect = match serde_json::from_slice(json) {
            Ok(c) => c,
            Err(e) => {
                self.reject(
                    "Unknown Protocol Operation",
                    &format!("route CONNECT is not valid JSON: {e}"),
                );
                return Err(Stop::Close("bad CONNECT".into()));
            }
        };
        if c.lang.is_some() {
            self.reject(
                "attempted to connect to route port",
                "a client connected to the route port",
            );
            return Err(Stop::Close("client on route port".into()));
        }
        if let Some(g) = &c.gateway {
            let text = format!("Rejecting connection from gateway {g:?} on the Route port");
            self.reject(&text, &text);
            return Err(Stop::Close("gateway on route port".into()));
        }
        let routes = self.routes();
        *self.route.presented.lock() = (c.user.clone(), c.pass.clone());
        if !route_authorized(routes.auth.read().as_ref(), &self.route.presented.lock()) {
            self.reject(
                "Authorization Violation",
                "route authorization failed (bad user or password)",
            );
            return Err(Stop::Close("authorization violation".into()));
        }
        if !self.cluster_name_ok(&c.cluster, c.cluster_dynamic) {
            let ours = routes.cluster_name();
            let text = format!(
                "Rejecting connection, cluster name {:?} does not match {:?}",
                c.cluster, ours
            );
            self.reject(&text, &text);
            return Err(Stop::Close("cluster name conflict".into()));
        }
        self.route.remote.lock().id = c.name;
        self.connected = true;
        Ok(())
    }

    /// Whether a peer's cluster name is acceptable; a dynamic name of ours
    /// is replaced by a configured (or larger dynamic) one, as nats-server.
    fn cluster_name_ok(&self, theirs: &str, their_dynamic: bool) -> bool {
        let routes = self.routes();
        let mut ours = routes.name.lock();
        if theirs.is_empty() || *ours == theirs {
            return true;
        }
        if routes.dynamic.load(Ordering::Relaxed) && (!their_dynamic || ours.as_str() < theirs) {
            tracing::info!(from = %*ours, to = %theirs, "adopting the cluster name of a peer");
            *ours = theirs.to_string();
            if !their_dynamic {
                routes.dynamic.store(false, Ordering::Relaxed);
            }
            return true;
        }
        false
    }

    fn on_info(&mut self, json: &[u8]) -> Result<(), Stop> {
        let info: PeerInfo = match serde_json::from_slice(json) {
            Ok(i) => i,
            Err(e) => {
                self.reject(
                    "Unknown Protocol Operation",
                    &format!("route INFO is not valid JSON: {e}"),
                );
                return Err(Stop::Close("bad INFO".into()));
            }
        };
        let server = self.server.clone();
        if self.route.registered.load(Ordering::Acquire) {
            if !info.route_acc_add_reqid.is_empty() {
                self.account_moves_to_pinned(&info);
                return Ok(());
            }
            let remote_id = self.route.remote.lock().id.clone();
            if info.server_id != remote_id {
                // Gossip about another server: connect to it if needed
                // (gossip about a peer's pinned route is not for us).
                if info.route_account.is_empty() {
                    self.implicit_route(&info);
                }
                return Ok(());
            }
            // An update from the peer itself (client URLs, lame duck).
            let urls = if info.ldm {
                Vec::new()
            } else {
                info.connect_urls
            };
            let changed = {
                let mut r = self.route.remote.lock();
                let changed = r.connect_urls != urls || r.leaf_urls != info.leafnode_urls;
                r.connect_urls = urls;
                r.leaf_urls = info.leafnode_urls;
                changed
            };
            if changed {
                server.peer_urls_changed();
            }
            return Ok(());
        }
        if info.server_id.is_empty() {
            self.reject("Unknown Protocol Operation", "route INFO without server_id");
            return Err(Stop::Close("INFO without id".into()));
        }
        if info.server_id == server.server_id {
            tracing::debug!(addr = %self.addr, "detected route to self, closing");
            // A configured URL that points at us is never retried.
            *self.route.reconnect.lock() = None;
            return Err(Stop::Close("route to self".into()));
        }
        if !self.cluster_name_ok(&info.cluster, info.cluster_dynamic) {
            let text = format!(
                "Rejecting connection, cluster name {:?} does not match {:?}",
                info.cluster,
                self.routes().cluster_name()
            );
            self.reject(&text, &text);
            return Err(Stop::Close("cluster name conflict".into()));
        }
        if !self.route.did_solicit && info.server_name == server.server_name {
            let text = format!("Remote server has a duplicate name: {:?}", info.server_name);
            self.reject(&text, &text);
            return Err(Stop::Close("duplicate server name".into()));
        }
        if !self.negotiated && self.route.switches.is_some() {
            self.negotiated = true;
            if self.negotiate(&info)? {
                // The peer's next INFO, compressed, is its real first one.
                return Ok(());
            }
        }
        if self.info_held {
            self.info_held = false;
            let routes = self.routes();
            let mut b = BytesMut::new();
            proto::encode_info(&mut b, &routes.route_info_json(&server, 0, None));
            self.route.client.send_now(&b);
        }
        let url = if !info.ip.is_empty() {
            info.ip.clone()
        } else {
            let ip = self.addr.ip();
            let host = if ip.is_ipv6() {
                format!("[{ip}]")
            } else {
                ip.to_string()
            };
            format!("nats-route://{host}:{}/", info.port)
        };
        {
            let mut r = self.route.remote.lock();
            r.id = info.server_id.clone();
            r.name = info.server_name.clone();
            r.url = url.clone();
            r.connect_urls = if info.ldm {
                Vec::new()
            } else {
                info.connect_urls.clone()
            };
            r.leaf_urls = info.leafnode_urls.clone();
        }
        // Forwarded INFO for gossip: the peer's own, with its route URL.
        let mut gossip: serde_json::Value =
            serde_json::from_slice(json).unwrap_or(serde_json::Value::Null);
        if let serde_json::Value::Object(m) = &mut gossip {
            m.insert("ip".into(), serde_json::Value::String(url));
            m.remove("nonce");
            m.remove("route_pool_idx");
        }
        match self.register(&info, &gossip) {
            Ok(slot) => {
                // The reconnect backoff starts over only once the peer
                // answers a PING: a peer that takes our INFO and then
                // refuses the connection (`-ERR 'No route for account'`)
                // is retried with backoff, not in a loop.
                if self.route.did_solicit && self.route.start_next.lock().is_none() {
                    self.route.client.send_ping();
                }
                tracing::info!(
                    addr = %self.addr,
                    rid = self.route.client.id,
                    remote_id = %info.server_id,
                    remote_name = %info.server_name,
                    pool_idx = slot,
                    "route registered"
                );
                server.peer_urls_changed();
                Ok(())
            }
            Err(NotAdded::Duplicate) => {
                tracing::debug!(remote_id = %info.server_id, "duplicate route, closing this connection");
                Err(Stop::Close("duplicate route".into()))
            }
            Err(NotAdded::PoolFull) => {
                tracing::debug!(remote_id = %info.server_id, "route pool full, closing extra connection");
                Err(Stop::Close("route pool full".into()))
            }
            Err(NotAdded::Protocol(text)) => {
                self.reject(&text, &text);
                Err(Stop::Close("route pool violation".into()))
            }
        }
    }

    /// Agrees on compression with the peer whose first INFO is `info`, as
    /// nats-server: the soliciting side answers with an INFO naming the
    /// mode it chose and compresses everything after it; the accepting
    /// side compresses from its next INFO on. Each side compresses at its
    /// own level. Returns whether compression is on (the handshake then
    /// goes on with the peer's next INFO); without it the reader stops
    /// looking for a compressed stream.
    fn negotiate(&mut self, info: &PeerInfo) -> Result<bool, Stop> {
        let Some(sw) = self.route.switches.clone() else {
            return Ok(false);
        };
        let ours = self.routes().compression.read().clone();
        let rtt = self.started.elapsed();
        let chosen = match s2::select(&ours, info.compression.as_deref(), rtt) {
            Ok(c) => c,
            Err(text) => {
                self.reject(&text, &text);
                return Err(Stop::Close("bad compression mode".into()));
            }
        };
        let Some(level) = chosen else {
            sw.read_armed.store(false, Ordering::Release);
            *self.route.compression.lock() = match info.compression.as_deref() {
                None | Some("") | Some("not supported") | Some("not_supported") => "not supported",
                _ => "off",
            };
            return Ok(false);
        };
        sw.set_level(level);
        let mode = s2::mode_name(&ours, level);
        *self.route.compression.lock() = mode;
        let routes = self.routes();
        let client = self.route.client.clone();
        if self.route.did_solicit {
            let mut b = BytesMut::new();
            let json = routes.info_json(&self.server, false, 0, None, Some(mode));
            proto::encode_info(&mut b, &json);
            client.send_switching(&b, sw.write_on.clone(), &[]);
        } else {
            let mut b = BytesMut::new();
            proto::encode_info(&mut b, &routes.route_info_json(&self.server, 0, None));
            client.send_switching(&[], sw.write_on.clone(), &b);
        }
        tracing::debug!(addr = %self.addr, mode, "route compression agreed");
        Ok(true)
    }

    /// With `s2_auto` in force on a compressed route: the level follows the
    /// round trip each PONG measures (nats-server's rule; purely local, as
    /// every write starts a new stream).
    fn repick_level(&self, rtt: Duration) {
        let Some(sw) = &self.route.switches else {
            return;
        };
        if !sw.write_on.load(Ordering::Acquire) {
            return;
        }
        if let S2Compression::Auto(t) = &*self.routes().compression.read() {
            sw.set_level(s2::auto_level(t, rtt));
        }
    }

    /// Checks a peer's pool fields against the rules nats-server applies;
    /// returns whether the pair pools and the pool size (`max(ours,
    /// theirs)`), or the `-ERR` text.
    fn pool_terms(&self, info: &PeerInfo) -> Result<(bool, usize), String> {
        let ours = self.routes().pool_size();
        if ours == 0 || info.route_pool_size <= 0 {
            return Ok((false, 1));
        }
        if info.route_pool_size > MAX_PEER_POOL_SIZE {
            return Err(format!(
                "Invalid route pool size: {} - at most {MAX_PEER_POOL_SIZE}",
                info.route_pool_size
            ));
        }
        let size = ours.max(info.route_pool_size as usize);
        if self.route.did_solicit {
            if info.route_pool_idx != 0 {
                return Err(format!(
                    "Route pool index should not be set but is set to {}",
                    info.route_pool_idx
                ));
            }
        } else if info.route_pool_idx < 0 || info.route_pool_idx >= size as i64 {
            return Err(format!(
                "Invalid route pool index: {} - pool size is {}",
                info.route_pool_idx, info.route_pool_size
            ));
        }
        Ok((true, size))
    }

    /// Adds the connection to the peer's slots (resolving duplicates),
    /// sends it our INFO if we solicited a pool member, then the interest
    /// it carries; the peer's first connection also forwards its INFO to
    /// the other peers.
    /// Returns the pool slot taken (0 for a pinned connection).
    fn register(&mut self, info: &PeerInfo, gossip: &serde_json::Value) -> Result<usize, NotAdded> {
        let (pooled, size) = self.pool_terms(info).map_err(NotAdded::Protocol)?;
        let ours = self.route.pinned.lock().clone();
        if let Some(account) =
            ours.or_else(|| (!info.route_account.is_empty()).then(|| info.route_account.clone()))
        {
            return self
                .register_pinned(info, account, pooled, size)
                .map(|()| 0);
        }
        let server = self.server.clone();
        let routes = self.routes();
        let route = &self.route;
        let id = info.server_id.clone();
        let mut st = routes.state.lock();
        let peer = st
            .routes
            .entry(id.clone())
            .or_insert_with(|| Peer::new(size, pooled));
        if peer.pooled != pooled {
            // The peer restarted with another pool setting and its old
            // connections are still closing: the new one retries.
            return Err(NotAdded::Duplicate);
        }
        if peer.conns.len() < size {
            peer.conns.resize(size, None);
        }
        let slot = if !pooled {
            0
        } else if !route.did_solicit {
            info.route_pool_idx as usize
        } else {
            match peer.conns.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    route.replaced.store(true, Ordering::Release);
                    return Err(NotAdded::PoolFull);
                }
            }
        };
        if let Some(existing) = peer.conns[slot].take() {
            if !settle_duplicate(&server.server_id, &id, &existing, route) {
                peer.conns[slot] = Some(existing);
                return Err(NotAdded::Duplicate);
            }
        }
        // Pinned connections aside: the peer's first pool connection
        // announces it.
        let first = peer.conns.iter().all(Option::is_none);
        let moved = peer.moved.clone();
        let mut b = BytesMut::new();
        if route.did_solicit && routes.pool_size() > 0 {
            proto::encode_info(&mut b, &routes.route_info_json(&server, slot, None));
        }
        // A full resolver's accounts go first, so the peer knows them
        // before the interest in them (see `claims`).
        super::claims::encode_sync(&server, &mut b);
        let (pool, pins) = (routes.pool_size(), routes.pinned_accounts());
        for ((account, subject, queue), n) in &st.interest {
            if !pooled
                || (pool_index(pool, account) == slot
                    && !pins.contains(account)
                    && !moved.contains(account))
            {
                encode_rs_plus(&mut b, account, subject, queue.as_deref().map(|q| (q, *n)));
            }
        }
        if !b.is_empty() {
            route.client.send_now(&b);
        }
        let peer = st.routes.get_mut(&id).expect("entry made above");
        peer.conns[slot] = Some(route.clone());
        // A solicitor fills the pool one connection at a time, each after
        // the peer answered the previous one's PING.
        if pooled && route.did_solicit && !peer.is_full() {
            *route.start_next.lock() = route.reconnect.lock().clone();
            route.client.send_ping();
        }
        // Pinned accounts towards a peer learned by gossip, or that dialled
        // us (configured routes dial theirs from the start); the duplicate
        // rule settles a pinned connection both sides dial.
        if pooled && first && !route.is_configured() {
            if let Some(url) = route.peer_url() {
                let missing = pins.iter().filter(|a| !peer.pinned.contains_key(*a));
                solicit_pinned(&server, &url, false, Some(&id), missing);
            }
        }
        st.pending.remove(&route.client.id);
        // Gossip: a route we accepted, or solicited from configuration,
        // announces the newcomer to the others (an implicit route does
        // not, which ends the propagation); once per peer.
        let implicit = route.did_solicit && !route.is_configured();
        if first && !implicit {
            let mut plain = BytesMut::new();
            proto::encode_info(&mut plain, &gossip.to_string());
            let mut frame = plain.clone();
            // Per pinned account, the same INFO naming it: a pooling peer
            // (nats-server) dials its pinned connection to the newcomer
            // only when told so.
            if pooled {
                encode_pinned_gossip(&mut frame, gossip, pins.iter());
                if let Some(p) = st.routes.get_mut(&id) {
                    p.gossip = Some(gossip.clone());
                }
            }
            for (_, p) in st.routes.iter().filter(|(k, _)| **k != id) {
                if let Some(r) = p.conns.iter().flatten().next() {
                    // One without pools gets the plain INFO only.
                    r.client.send_now(if p.pooled { &frame } else { &plain });
                }
            }
        }
        route.registered.store(true, Ordering::Release);
        Ok(slot)
    }

    /// Adds a connection dedicated to one account (see the module
    /// documentation): its operations omit the account from here on; it
    /// carries our interest in that account when we pin it too.
    fn register_pinned(
        &mut self,
        info: &PeerInfo,
        account: String,
        pooled: bool,
        size: usize,
    ) -> Result<(), NotAdded> {
        if !pooled {
            // A peer without pools: ours is not retried (as nats-server).
            *self.route.reconnect.lock() = None;
            return Err(NotAdded::Protocol(format!(
                "Not possible to have a dedicated route for account {account:?} between those servers"
            )));
        }
        let server = self.server.clone();
        let route = self.route.clone();
        let id = info.server_id.clone();
        {
            let routes = self.routes();
            let mut st = routes.state.lock();
            let peer = st
                .routes
                .entry(id.clone())
                .or_insert_with(|| Peer::new(size, pooled));
            if !peer.pooled {
                return Err(NotAdded::Duplicate);
            }
            if let Some(existing) = peer.pinned.remove(&account) {
                if !settle_duplicate(&server.server_id, &id, &existing, &route) {
                    peer.pinned.insert(account.clone(), existing);
                    return Err(NotAdded::Duplicate);
                }
            }
            let mut b = BytesMut::new();
            if route.did_solicit {
                proto::encode_info(&mut b, &routes.route_info_json(&server, 0, Some(&account)));
            }
            // The interest of an account pinned (by us, or moved here by
            // the peer) travels only here.
            if peer.pins(&account, &routes.pinned_accounts()) {
                encode_account_interest(&mut b, &st.interest, &account, true);
            }
            route.client.pinned_route.store(true, Ordering::Release);
            if !b.is_empty() {
                route.client.send_now(&b);
            }
            let peer = st.routes.get_mut(&id).expect("entry made above");
            peer.pinned.insert(account.clone(), route.clone());
            *route.pinned.lock() = Some(account.clone());
            st.pending.remove(&route.client.id);
        }
        self.pinned = Some(Bytes::from(account.into_bytes()));
        self.parser
            .set_dialect(super::proto::route::Dialect::Pinned);
        route.registered.store(true, Ordering::Release);
        Ok(())
    }

    /// Gossip told us about a server: solicit it unless already routed.
    fn implicit_route(&self, info: &PeerInfo) {
        let server = &self.server;
        let routes = self.routes();
        if info.server_id == server.server_id || info.ip.is_empty() {
            return;
        }
        {
            let mut st = routes.state.lock();
            if st.routes.contains_key(&info.server_id)
                || st.connecting.len() >= MAX_CONNECTING
                || !st.connecting.insert(info.server_id.clone())
            {
                return;
            }
        }
        tracing::debug!(remote_id = %info.server_id, url = %info.ip, "connecting to an implicit route");
        let auth = routes.auth.read().clone();
        let url = match &auth {
            // Gossiped URLs carry no credentials: use ours.
            Some(a) => {
                let (_, hp) = split_route_url(&info.ip);
                format!("nats-route://{}:{}@{hp}/", a.user, a.password)
            }
            None => info.ip.clone(),
        };
        tokio::spawn(solicit(
            server.clone(),
            url,
            false,
            Some(info.server_id.clone()),
            0,
            None,
        ));
    }

    /// The account a peer's operation names, if we carry it; otherwise
    /// logged (debug) and `None`, as nats-server ignores unknown accounts.
    fn carried_account(&self, account: &[u8], subject: &[u8]) -> Option<Arc<Account>> {
        let found = std::str::from_utf8(account)
            .ok()
            .and_then(|name| self.server.accounts.get(name))
            .filter(|a| self.server.routes_carry(a));
        if found.is_none() {
            tracing::debug!(
                rid = self.route.client.id,
                account = %String::from_utf8_lossy(account),
                subject = %String::from_utf8_lossy(subject),
                "route operation for an unknown or local-only account, ignored"
            );
        }
        found
    }

    fn remote_sub(&mut self, account: &[u8], subject: &[u8], queue: Option<(Bytes, u32)>) {
        let q = queue.as_ref().map(|(q, _)| &q[..]);
        if account == GLOBAL_ACCOUNT.as_bytes() {
            add_peer_interest(&self.server, &self.route.client, subject, q);
            return;
        }
        let Some(acc) = self.carried_account(account, subject) else {
            return;
        };
        add_route_interest(&self.server, &self.route.client, acc, subject, q);
    }

    /// The peer pins `info.route_account` from now on (nats-server's
    /// reload protocol): its interest in that account arrives again on the
    /// pinned connection it dials next, so what its pool connections
    /// carried is dropped (or messages would reach it twice), and ours
    /// goes to that connection from now on ([`Peer::moved`]); the answer
    /// carries the request id back. An answer to our own announcement
    /// needs nothing.
    fn account_moves_to_pinned(&mut self, info: &PeerInfo) {
        let account = info.route_account.as_str();
        if account.is_empty() {
            return;
        }
        let remote_id = self.route.remote.lock().id.clone();
        let routes = self.routes();
        let mut drop = Vec::new();
        if let Some(p) = routes.state.lock().routes.get_mut(&remote_id) {
            drop = pool_interest(p, account);
            if !routes.pinned_accounts().iter().any(|a| a == account) {
                p.moved.insert(account.to_string());
            }
        }
        for sub in drop {
            self.server.remove_subscription(&sub);
        }
        let answer = serde_json::json!({
            "route_pool_size": info.route_pool_size,
            "route_acc_add_reqid": info.route_acc_add_reqid,
        });
        let mut b = BytesMut::new();
        proto::encode_info(&mut b, &answer.to_string());
        self.route.client.send_now(&b);
    }

    fn remote_unsub(&mut self, account: &[u8], subject: &[u8], queue: Option<&Bytes>) {
        let q = queue.map(|q| &q[..]);
        if account == GLOBAL_ACCOUNT.as_bytes() {
            remove_peer_interest(&self.server, &self.route.client, subject, q);
            return;
        }
        let key = route_sub_key(account, subject, q);
        let sub = self.route.client.subs.lock().get(&key).cloned();
        if let Some(sub) = sub {
            self.server.remove_subscription(&sub);
        }
    }

    fn routed_msg(
        &mut self,
        account: &[u8],
        subject: Bytes,
        reply: Option<Bytes>,
        queues: &[Bytes],
        headers: Option<Bytes>,
        payload: Bytes,
    ) {
        let size = headers.as_ref().map_or(0, |h| h.len()) + payload.len();
        let routes = self.routes();
        routes.stats.in_msgs.fetch_add(1, Ordering::Relaxed);
        routes
            .stats
            .in_bytes
            .fetch_add(size as u64, Ordering::Relaxed);
        let c = &self.route.client.stats;
        c.in_msgs.fetch_add(1, Ordering::Relaxed);
        c.in_bytes.fetch_add(size as u64, Ordering::Relaxed);
        if self
            .server
            .operator
            .as_ref()
            .and_then(|o| o.system_account())
            .is_some_and(|s| s.as_bytes() == account)
        {
            super::claims::from_route(
                &self.server,
                &self.route.client,
                &subject,
                reply.as_deref(),
                &payload,
            );
            return;
        }
        let acc = if account == GLOBAL_ACCOUNT.as_bytes() {
            self.server.accounts.global().clone()
        } else {
            match self.carried_account(account, &subject) {
                Some(a) => a,
                None => return,
            }
        };
        let result = if acc.is_global() {
            self.cache.lookup(&acc.sublist, &subject)
        } else {
            // One cache per account (few accounts carry traffic; the map
            // is cleared when it outgrows its bound).
            if self.acc_caches.len() >= ACCOUNT_CACHES_MAX
                && !self.acc_caches.contains_key(&acc.idx)
            {
                self.acc_caches.clear();
            }
            self.acc_caches
                .entry(acc.idx)
                .or_insert_with(|| client::MatchCache::new(ROUTE_CACHE_MAX))
                .lookup(&acc.sublist, &subject)
        };
        let Some(result) = result else {
            return;
        };
        let msg = MsgRef {
            subject: &subject,
            reply: reply.as_ref(),
            headers: headers.as_ref(),
            payload: &payload,
        };
        let route_client = self.route.client.clone();
        super::account::deliver_in(
            &self.server,
            &acc,
            &route_client,
            false,
            &msg,
            &result,
            &mut self.flush,
            Origin::Route(queues),
        );
    }
}

/// Two connections for one slot (or one pinned account) of peer
/// `peer_id`: keeps the one solicited by the server with the smaller id
/// (both sides agree without talking), else the older one. Returns whether
/// `new` wins; the loser is marked replaced (and closed here if it was the
/// registered one), and the survivor inherits its configured URL so that
/// it reconnects when it closes.
fn settle_duplicate(our_id: &str, peer_id: &str, existing: &Arc<Route>, new: &Arc<Route>) -> bool {
    let keep_new = if existing.did_solicit == new.did_solicit {
        false
    } else if our_id < peer_id {
        new.did_solicit
    } else {
        !new.did_solicit
    };
    let (winner, loser) = if keep_new {
        (new, existing)
    } else {
        (existing, new)
    };
    {
        let lost = loser.reconnect.lock().clone();
        let mut w = winner.reconnect.lock();
        if lost.as_ref().is_some_and(|(_, c)| *c) && !w.as_ref().is_some_and(|(_, c)| *c) {
            *w = lost;
        }
    }
    loser.replaced.store(true, Ordering::Release);
    if keep_new {
        existing.client.close_now();
    }
    keep_new
}

/// `/routez` body; `subs=1` adds each route's `subscriptions_list`
/// (subjects of the peer's interest, all accounts), `subs=detail` the
/// `subscriptions_list_detail` (account, subject, queue), as nats-server.
pub(crate) fn routez_json(server: &ServerInner, subs: bool, detail: bool) -> serde_json::Value {
    use serde_json::json;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let Some(routes) = server.routes.as_ref() else {
        return json!({
            "server_id": server.server_id,
            "server_name": server.server_name,
            "now": now,
            "num_routes": 0,
            "routes": [],
        });
    };
    let list: Vec<serde_json::Value> = routes
        .routes()
        .iter()
        .map(|r| {
            let remote = r.remote.lock().clone();
            let (out_msgs, out_bytes) = r.client.out_counts();
            let addr = r.client.addr;
            let rtt = r.client.meta.lock().rtt;
            let mut subjects: Vec<String> = r
                .client
                .subs
                .lock()
                .values()
                .map(|s| s.subject.clone())
                .collect();
            subjects.sort();
            let mut v = json!({
                "rid": r.client.id,
                "remote_id": remote.id,
                "remote_name": remote.name,
                "did_solicit": r.did_solicit,
                "is_configured": r.is_configured(),
                "ip": addr.map(|a| a.ip().to_string()).unwrap_or_default(),
                "port": addr.map_or(0, |a| a.port()),
                "start": r.client.start.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
                "last_activity": r.client.last_activity().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
                "rtt": rtt.map(|d| format!("{d:?}")).unwrap_or_default(),
                "pending_size": r.client.pending_bytes(),
                "in_msgs": r.client.stats.in_msgs.load(Ordering::Relaxed),
                "out_msgs": out_msgs,
                "in_bytes": r.client.stats.in_bytes.load(Ordering::Relaxed),
                "out_bytes": out_bytes,
                "subscriptions": r.client.subs.lock().len(),
                "compression": *r.compression.lock(),
            });
            if let Some(a) = r.pinned.lock().as_ref() {
                v["account"] = json!(a);
            }
            if detail {
                let mut list: Vec<serde_json::Value> = r
                    .client
                    .subs
                    .lock()
                    .values()
                    .map(|s| {
                        let mut d = json!({
                            "account": server.sub_account(s).name,
                            "subject": s.subject,
                            "sid": String::from_utf8_lossy(&s.sid),
                            "msgs": s.delivered(),
                            "cid": r.client.id,
                        });
                        if let Some(q) = &s.queue {
                            d["qgroup"] = json!(q);
                        }
                        d
                    })
                    .collect();
                list.sort_by(|a, b| a["sid"].as_str().cmp(&b["sid"].as_str()));
                v["subscriptions_list_detail"] = json!(list);
            } else if subs {
                v["subscriptions_list"] = json!(subjects);
            }
            v
        })
        .collect();
    json!({
        "server_id": server.server_id,
        "server_name": server.server_name,
        "now": now,
        "num_routes": list.len(),
        "routes": list,
    })
}

/// The `cluster` object of `/varz`.
pub(crate) fn varz_cluster(server: &ServerInner) -> serde_json::Value {
    use serde_json::json;
    let Some(routes) = server.routes.as_ref() else {
        return json!({});
    };
    let urls: Vec<String> = routes
        .configured
        .lock()
        .iter()
        .map(|u| split_route_url(u).1)
        .collect();
    json!({
        "name": routes.cluster_name(),
        "addr": routes.opts.host,
        "cluster_port": routes.listen.port(),
        "auth_timeout": routes.opts.auth_timeout.as_secs_f64(),
        "urls": urls,
        "tls_timeout": 2.0,
        "tls_required": routes.tls_acceptor.read().is_some(),
        "tls_verify": routes.tls_acceptor.read().is_some(),
        "pool_size": match routes.pool_size() { 0 => -1, n => n as i64 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_urls_split() {
        assert_eq!(
            split_route_url("nats-route://u:p@127.0.0.1:6222/"),
            (
                Some(("u".to_string(), "p".to_string())),
                "127.0.0.1:6222".to_string()
            )
        );
        assert_eq!(split_route_url("nats://h:1"), (None, "h:1".to_string()));
        assert_eq!(host_of("[::1]:5"), "::1");
        assert_eq!(host_of("h:5"), "h");
    }

    #[test]
    fn pool_index_is_fnv1a_modulo_the_pool() {
        // FNV-1a 32 test vectors: "a" = 0xe40c292c, "foobar" = 0xbf9cf968.
        assert_eq!(
            pool_index(1 << 30, "a"),
            (0xe40c_292c_u32 % (1 << 30)) as usize
        );
        assert_eq!(
            pool_index(1000, "foobar"),
            (0xbf9c_f968_u32 % 1000) as usize
        );
        // The slots the pool tests rely on, in a pool of three.
        assert_eq!(
            ["A", "C", "ACC1", "$G"].map(|a| pool_index(3, a)),
            [0, 1, 2, 2]
        );
        // No pool, or a pool of one: everything on the one connection.
        assert_eq!(pool_index(0, "C"), 0);
        assert_eq!(pool_index(1, "C"), 0);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(0), RECONNECT_MIN);
        assert!(backoff(1) > backoff(0));
        assert_eq!(backoff(30), RECONNECT_MAX);
    }
}
