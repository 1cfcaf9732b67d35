//! Leaf nodes: a server extends another server's (the hub's) subjects over
//! one outbound connection, as spec `nats-parity.md` §3 describes. We play
//! both roles, with our own servers and Go nats-server 2.9/2.10+.
//!
//! **Model.** With `leafnodes { port }` we listen for leaves (we are their
//! hub); each `remotes [ { url } ]` entry is a hub we solicit (we are its
//! leaf, the "spoke"). A leaf connection is a route-like pseudo-client
//! ([`ClientKind::Leaf`]) speaking the route grammar without accounts
//! (`LS+`/`LS-`/`LMSG`, see `proto::route::Dialect::Leaf`). Handshake: the
//! hub sends INFO (plain text, then TLS if configured), the leaf sends
//! CONNECT (`lang` in it means a client dialled the leaf port and is
//! refused), then both send their interest. With `compression`
//! configured the hub's INFO names its mode and a leaf that agrees (see
//! `s2::select`) sends an INFO naming its own before CONNECT; the hub then
//! answers with a second INFO, and everything after it (CONNECT included)
//! is an S2 stream each way; without it our INFO carries no `compression`
//! (Go servers treat us as an uncompressed peer). Our INFO also carries
//! `info_on_connect`: we answer CONNECT with a `connect_info` INFO
//! (`remote_account`, and the leaf user's permissions as `import`/`export`)
//! before any interest, and a Go leaf waits for it. As a leaf we likewise
//! wait for that answer when the hub's INFO announces it.
//!
//! **Accounts.** No account travels on the leaf wire: each connection is
//! bound to one local account for its whole life (the pseudo-client's
//! `account`), and everything on it happens in that account only — the
//! interest it is told about, the interest it announces, the messages it
//! brings. A remote binds `account` (default `$G`) and names it in CONNECT
//! (`remote_account`). The hub binds an accepted leaf as nats-server does
//! (`isLeafNodeAuthorized`): a `leafnodes { authorization }` user binds
//! its `account`; without leaf users the client path applies (a config
//! user's account, a JWT's account in operator mode, `no_auth_user`);
//! with no authentication at all, `authorization { account }` or `$G`.
//! In operator mode the account JWT's `limits.leaf` caps the connections
//! bound to the account (accepted and solicited): one past it gets
//! `-ERR 'maximum account active connections exceeded'` and is closed.
//! Remote credentials: a creds file (`credentials`: user JWT + seed, read
//! at every attempt so a rotated file is used) or a user seed (`nkey`);
//! CONNECT then carries `jwt`/`nkey` and `sig`, the hub's INFO nonce
//! signed with the seed.
//!
//! **Permissions** (nats-server's semantics). A connection may carry a
//! [`PermissionSet`] (`ClientShared::leaf_perms`) read as: `publish` = what
//! we may send on it, `subscribe` = what it may bring us and the interest
//! we announce on it. On a leaf we accept, that is the user's permissions
//! swapped (we send what the user may subscribe to, minus the leaf's
//! `deny_pub`; it may bring what the user may publish). On a connection to
//! our hub it is the hub's `export` (+ our `deny_exports`) and `import`
//! (+ our `deny_imports`, also sent to the hub as `deny_pub`). Messages we
//! may not send are skipped at delivery (a queue group picks another
//! member); interest we may not announce is not sent (a wildcard broader
//! than an allowed pattern is, and is filtered per message). What the peer
//! may not bring: a leaf of ours is closed with `-ERR 'Permissions
//! Violation for Publish|Subscription to "<s>"'` (an `LS+` only for a
//! literal subject); from our hub it is dropped. `$LDS.`/`$GR.`/`_GR_.`
//! interest and `_R_.`/`$JS.ACK.` messages are exempt.
//!
//! **Interest.** Every live leaf connection has its own "smap": (subject,
//! queue) → count of the subscriptions it is told about. Toward a leaf of
//! ours (we are hub) that is every subscription here (clients, routes,
//! other leaves); toward our hub (we are spoke) only local ones (clients
//! and our own leaves), never what routes or the hub itself told us.
//! Plain subjects send `LS+` on 0→1 and `LS-` on 1→0; a queue group sends
//! `LS+ subject queue weight` on every change and `LS-` at zero. The
//! subscription change and the smap updates happen under one lock
//! ([`Leafnodes::track`]), so the snapshot a new connection gets and the
//! later updates are never reordered or counted twice.
//!
//! **Forwarding** (`client::deliver`, `Origin::Leaf`): a message from a
//! leaf goes to local subscribers, other leaves, and routes unless it came
//! from our hub (the hub's cluster already has it); a message from a route
//! reaches only leaves that connect to us. A leaf gets one copy per
//! message, with the names of the queue groups it must serve; queue
//! groups prefer local members.
//!
//! **Loops.** Each account has its own `$LDS.<random>` subject, always
//! announced to every leaf bound to it. Interest propagates hub-leaf →
//! spoke, so in a cycle the account's LDS subject comes back to us on a
//! connection of the same account: we then send `-ERR 'Loop detected for
//! leafnode account="<name>". Delaying attempt to reconnect for 30s'`,
//! close, and (as the soliciting side, or when we receive that error) wait
//! 30 s before reconnecting. (One subject per account, not per server: two
//! remotes of different accounts to the same hub account are no loop.)
//!
//! **Tasks.** Per server: the accept loop (with a listener) and one solicit
//! task per remote, which connects, runs the connection to its end and
//! reconnects after `reconnect` plus jitter, forever, to the next of its
//! URLs: those its hub announced in `leafnode_urls` (the hub's cluster's
//! leaf listeners, learned from route INFOs and re-sent to accepted leaves
//! when the routed peers change), then its configured ones. Per connection: the
//! reader (it also owns cleanup), the writer (`client::write_loop`) and a
//! ping timer.
//!
//! **Bounded memory.** As routes: the outbound buffer is limited by
//! `max_pending` (producers stall at 75 %, then the leaf is closed as slow
//! and, when solicited, reconnected); a peer's interest is capped at
//! `MAX_ROUTE_SUBS` (then it is closed); payloads at `MAX_ROUTE_PAYLOAD`.
//!
//! Must not: block the executor (bcrypt checks run on the blocking pool),
//! hold a lock across `.await`, panic on anything a peer sends, or send a
//! message back to the connection it came from.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use base64::Engine;

use super::account::{Account, Accounts};
use super::auth::{AuthError, Authenticator, Credentials, PermissionSet};
use super::client::{self, ClientKind, ClientShared, FlushList, MsgRef, Origin, Subscription};
use super::mapping::Mapped;
use super::proto::route::{
    encode_ls_minus, encode_ls_plus, Dialect, RouteOp, RouteParsed, RouteParser,
};
use super::proto::{self};
use super::route::{
    accept_peers, add_peer_interest, host_of, is_wildcard_host, peer_ping_loop, primary_ip,
    read_peer, remove_peer_interest, PeerReader, MAX_ROUTE_SUBS,
};
use super::s2;
use super::server::{new_nonce, ServerInner, SERVER_VERSION};
use super::subject::{is_valid_literal_subject, is_valid_subject};
use super::ws::{self, WsShared};
use crate::config::nats::{
    parse_leaf_url, AuthConfig, LeafRemote, LeafRemoteAuth, LeafUrl, LeafnodeOptions, NatsOptions,
    PermissionRules, Permissions, S2Compression, User,
};

/// Prefix of loop-detection subjects.
pub const LDS_PREFIX: &str = "$LDS.";
/// Reconnect delay after a loop was detected (nats-server's
/// `leafNodeReconnectDelayAfterLoopDetected`).
const LOOP_DELAY: Duration = Duration::from_secs(30);
/// Reconnect delay after the hub refused us for a reason that will not
/// fix itself soon (same cluster name, permissions).
const REFUSED_DELAY: Duration = Duration::from_secs(30);
/// Time to connect (TCP and TLS) and to receive the hub's first INFO.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Entries of a leaf reader's private match cache.
const LEAF_CACHE_MAX: usize = 256;
/// Largest first INFO or CONNECT line accepted during the handshake.
const HANDSHAKE_MAX_LINE: usize = 64 * 1024;

/// Leaf counters (for `/varz`, `/leafz` and `/metrics`).
#[derive(Debug, Default)]
pub struct LeafStats {
    /// Messages received from leaf connections.
    pub in_msgs: AtomicU64,
    /// Payload bytes (headers included) received from leaf connections.
    pub in_bytes: AtomicU64,
    /// Messages sent to leaf connections.
    pub out_msgs: AtomicU64,
    /// Payload bytes sent to leaf connections.
    pub out_bytes: AtomicU64,
    /// Leaf connections closed because their outbound buffer overflowed.
    pub slow_leafs: AtomicU64,
    /// Leaf connections refused or closed for protocol or auth errors.
    pub rejected: AtomicU64,
    /// Loops detected (our own loop-detection subject came back).
    pub loops: AtomicU64,
}

/// What we know about the server at the other end of a leaf connection.
#[derive(Debug, Clone, Default)]
pub struct LeafPeer {
    /// Its server id.
    pub id: String,
    /// Its server name.
    pub name: String,
    /// Its cluster name, if any.
    pub cluster: String,
}

/// One leaf connection.
pub struct Leaf {
    /// The pseudo-client holding the outbound buffer and remote interest.
    pub client: Arc<ClientShared>,
    /// We solicited it (the peer is our hub).
    pub spoke: bool,
    /// The remote it was solicited for (solicited connections).
    remote: Option<Arc<Remote>>,
    /// The local account the connection is bound to (also set as the
    /// pseudo-client's account, so its interest lands in this account).
    pub account: Arc<Account>,
    /// The peer.
    pub peer: Mutex<LeafPeer>,
    /// Interest flows (handshake complete).
    registered: AtomicBool,
    /// The compression this connection agreed on (`/leafz`).
    compression: Mutex<&'static str>,
    /// Its compression switches, once it agreed on compression (with
    /// `s2_auto` in force each PONG's round trip re-picks the level).
    switches: Mutex<Option<s2::Switches>>,
    /// It formed while our mode was off (no compressed stream possible).
    formed_off: bool,
}

/// Interest and connections, under one lock (see the module doc).
#[derive(Default)]
struct State {
    /// Live connections by client id (registered or not).
    conns: HashMap<u64, Arc<Leaf>>,
    /// Per registered connection: the interest it was told about.
    smaps: HashMap<u64, HashMap<(String, Option<String>), u32>>,
}

/// A remote's reconnect state.
#[derive(Debug, Default)]
struct RemoteState {
    /// Extra delay before the next attempt (after a loop or a refusal).
    delay: Option<Duration>,
    /// Attempts since the last successful handshake.
    attempts: u64,
    /// The URLs to try, the next first: those the hub last announced
    /// (`leafnode_urls`, not configured ones), then the configured ones.
    urls: Vec<String>,
    /// The URL of the last attempt.
    current: Option<String>,
}

/// One configured remote (a hub we solicit). A reload keeps it while its
/// name (URLs, account, credentials) stays in the configuration, and may
/// change its compression, its TLS files and whether it is disabled.
pub(crate) struct Remote {
    /// The options it was configured with; of these only `compression`,
    /// the TLS files and `disabled` can change, and they are kept current
    /// below.
    opts: LeafRemote,
    /// The configured URLs, in the order they are tried (from a random one
    /// unless `no_randomize`).
    configured_urls: Vec<String>,
    /// nats-server's name of the remote, with passwords redacted (logs).
    safe_name: String,
    /// The local account its connections bind.
    account: Arc<Account>,
    /// `compression` in force.
    compression: RwLock<S2Compression>,
    /// TLS towards the hub, from the files in force.
    tls: RwLock<Option<tokio_rustls::TlsConnector>>,
    state: Mutex<RemoteState>,
    /// While it is solicited: stops its solicit task. Cancelled when the
    /// remote is removed or disabled (its connection closes then too).
    run: Mutex<Option<CancellationToken>>,
}

impl Remote {
    /// The URLs a hub's INFO announces for this remote: its WebSocket
    /// listeners' (`ws_connect_urls`) when this remote dials WebSocket
    /// URLs (all do, or none), else its leaf listeners'.
    fn announced<'a>(&self, info: &'a HubInfo) -> &'a [String] {
        let ws = self
            .configured_urls
            .first()
            .and_then(|u| parse_leaf_url(u))
            .is_some_and(|u| u.ws);
        let urls = if ws {
            &info.ws_connect_urls
        } else {
            &info.leafnode_urls
        };
        urls.as_deref().unwrap_or_default()
    }

    /// Whether its solicit task has been told to stop.
    fn stopped(&self) -> bool {
        self.run.lock().as_ref().is_none_or(|c| c.is_cancelled())
    }

    /// The URL to dial next, as nats-server picks it: the first of the
    /// list, after moving the one dialled last to the end when it is
    /// first (so a dead hub is not dialled twice in a row while others
    /// are known).
    fn next_url(&self) -> Option<String> {
        let mut st = self.state.lock();
        if st.urls.is_empty() {
            st.urls = self.configured_urls.clone();
        }
        if st.urls.len() > 1 && st.current.as_ref() == st.urls.first() {
            st.urls.rotate_left(1);
        }
        st.current = st.urls.first().cloned();
        st.current.clone()
    }

    /// A hub announced `leafnode_urls` (its cluster's leaf listeners, as
    /// `host:port`; `ws_connect_urls` for a remote that dials WebSocket
    /// listeners): unless `ignore_discovered_servers`, the list to try
    /// becomes those not configured, then the configured ones. They are
    /// dialled with the scheme and the user and password of the first
    /// configured URL.
    fn discovered(&self, announced: &[String]) {
        if self.opts.ignore_discovered_servers || announced.is_empty() {
            return;
        }
        let configured: Vec<LeafUrl> = self
            .configured_urls
            .iter()
            .filter_map(|u| parse_leaf_url(u))
            .collect();
        let scheme = match configured.first() {
            Some(u) if u.ws && u.tls => "wss",
            Some(u) if u.ws => "ws",
            Some(u) if u.tls => "tls",
            _ => "nats-leaf",
        };
        let userinfo = configured
            .iter()
            .find_map(|u| u.creds.as_ref())
            .map(|(u, p)| {
                if p.is_empty() {
                    format!("{u}@")
                } else {
                    format!("{u}:{p}@")
                }
            })
            .unwrap_or_default();
        let mut urls: Vec<String> = Vec::with_capacity(announced.len() + configured.len());
        for hp in announced {
            let Some(found) = parse_leaf_url(hp) else {
                tracing::debug!(url = %hp, "unusable leafnode URL announced by the hub");
                continue;
            };
            if configured.iter().any(|u| u.hostport == found.hostport) {
                continue;
            }
            let url = format!("{scheme}://{userinfo}{}", found.hostport);
            if !urls.contains(&url) {
                urls.push(url);
            }
        }
        urls.extend(self.configured_urls.iter().cloned());
        let mut st = self.state.lock();
        if st.urls != urls {
            tracing::debug!(remote = %self.safe_name, count = urls.len(), "leafnode URLs updated from the hub");
            st.urls = urls;
        }
    }

    /// The `host:port` whose host a TLS handshake toward `hostport`
    /// verifies: a discovered hub is announced by IP address, while its
    /// certificate names the host of the configured URL; that name is used
    /// then.
    fn tls_hostport(&self, hostport: &str) -> String {
        let is_ip = |hp: &str| host_of(hp).parse::<std::net::IpAddr>().is_ok();
        if !is_ip(hostport) {
            return hostport.to_string();
        }
        let named = self
            .configured_urls
            .iter()
            .filter_map(|u| parse_leaf_url(u))
            .find(|u| !is_ip(&u.hostport));
        match (named, hostport.rsplit_once(':')) {
            (Some(u), Some((_, port))) => format!("{}:{port}", host_of(&u.hostport)),
            _ => hostport.to_string(),
        }
    }
}

/// nats-server's name of a remote, its identity across reloads: the URLs,
/// the local account and the credentials file or nkey. `redacted` hides
/// URL passwords and the nkey (for logs).
pub(crate) fn remote_name(r: &LeafRemote, redacted: bool) -> String {
    let urls: Vec<String> = r
        .urls
        .iter()
        .map(|u| {
            let u = if redacted {
                super::external::redact(u)
            } else {
                u.clone()
            };
            format!("{u:?}")
        })
        .collect();
    let account = r
        .account
        .as_deref()
        .unwrap_or(super::account::GLOBAL_ACCOUNT);
    let extra = match &r.auth {
        LeafRemoteAuth::None => String::new(),
        LeafRemoteAuth::Credentials(p) => format!(", credentials={:?}", p.display().to_string()),
        LeafRemoteAuth::Seed(_) if redacted => ", nkey=\"[REDACTED]\"".to_string(),
        LeafRemoteAuth::Seed(k) => format!(", nkey={k:?}"),
    };
    format!("urls=[{}], account={account:?}{extra}", urls.join(" "))
}

/// Refuses two remotes with the same name (nats-server's text).
pub(crate) fn check_remotes(remotes: &[LeafRemote]) -> Result<(), LeafError> {
    let mut seen = std::collections::HashSet::new();
    for r in remotes {
        if !seen.insert(remote_name(r, false)) {
            return Err(LeafError::Duplicate(remote_name(r, true)));
        }
    }
    Ok(())
}

/// The leaf-node side of a server. Present when `leafnodes` is configured.
pub struct Leafnodes {
    /// The start-up options (the listener's part, which a reload does not
    /// change except for `compression` and the TLS files).
    opts: LeafnodeOptions,
    /// `compression` of the leaf listener, in force.
    compression: RwLock<S2Compression>,
    /// The bound leaf listener, if any.
    pub listen: Option<SocketAddr>,
    /// This server's random part of every account's loop-detection
    /// subject (see [`Leafnodes::loop_detection_subject`]).
    lds_seed: String,
    /// The account of accepted leaves when no authentication applies.
    default_account: Arc<Account>,
    state: Mutex<State>,
    /// The remotes in force, in configuration order.
    remotes: RwLock<Vec<Arc<Remote>>>,
    cancel: CancellationToken,
    /// Counters.
    pub stats: LeafStats,
    /// TLS of the listener; a reload replaces it with the re-read files,
    /// TLS staying on or off.
    tls_acceptor: RwLock<Option<tokio_rustls::TlsAcceptor>>,
    /// Checks leaf credentials when `authorization` is set in the block.
    auth: Option<Authenticator>,
    /// Our leaf listener's advertised URL (`host:port`; none with
    /// `no_advertise` or without a listener).
    urls: Vec<String>,
    /// `leafnode_urls` as last sent to the leaves we accepted: ours, then
    /// those our routed peers advertise.
    sent_urls: Mutex<Vec<String>>,
    max_pending: usize,
}

/// The leaf listener's TLS acceptor and each remote's TLS connector.
pub(crate) type LeafTls = (
    Option<tokio_rustls::TlsAcceptor>,
    Vec<Option<tokio_rustls::TlsConnector>>,
);

/// The listener's acceptor and each remote's connector, from the TLS
/// files of `lo`.
pub(crate) fn leaf_tls(lo: &LeafnodeOptions) -> Result<LeafTls, LeafError> {
    let acceptor = match &lo.tls {
        Some(files) => Some(tokio_rustls::TlsAcceptor::from(crate::tls::server_config(
            files,
        )?)),
        None => None,
    };
    let mut remotes = Vec::with_capacity(lo.remotes.len());
    for (i, r) in lo.remotes.iter().enumerate() {
        remotes.push(match &r.tls {
            None => None,
            Some(files) => {
                let ca = files.ca.as_deref().ok_or(LeafError::TlsWithoutCa(i))?;
                let cert = (!files.cert.as_os_str().is_empty())
                    .then_some((files.cert.as_path(), files.key.as_path()));
                Some(tokio_rustls::TlsConnector::from(
                    crate::tls::client_config_with(ca, cert, &files.params)?,
                ))
            }
        });
    }
    Ok((acceptor, remotes))
}

/// Errors of setting up leaf nodes.
#[derive(Debug, thiserror::Error)]
pub enum LeafError {
    /// The leaf listener could not be bound.
    #[error("cannot listen for leaf nodes on {addr}: {source}")]
    Bind {
        /// The `host:port` that was tried.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// TLS files of the leafnodes block are unusable.
    #[error("leafnodes tls: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// TLS toward a hub needs a CA to verify it.
    #[error("leafnodes remote {0}: tls needs ca_file to verify the hub")]
    TlsWithoutCa(usize),
    /// Two remotes with the same URLs, account and credentials.
    #[error("duplicate remote {0}")]
    Duplicate(String),
    /// A remote URL is not usable.
    #[error("leafnodes remote {index}: bad url {url:?}")]
    BadUrl {
        /// Index of the remote.
        index: usize,
        /// The URL.
        url: String,
    },
    /// A remote has no URL.
    #[error("leafnodes remote {0}: needs url or urls")]
    NoUrl(usize),
    /// A remote mixes WebSocket and other URLs (nats-server's text).
    #[error("remote leaf node configuration cannot have a mix of websocket and non-websocket urls: {0:?}")]
    MixedUrls(Vec<String>),
    /// Leaf users are invalid.
    #[error("leafnodes authorization: {0}")]
    Auth(#[from] super::auth::AuthError),
    /// A remote or leaf user names an account that is not configured
    /// (nats-server's text).
    #[error("cannot find local account {account:?} specified in leafnode {what}")]
    UnknownAccount {
        /// The account name.
        account: String,
        /// `remote` or `authorization`.
        what: &'static str,
    },
    /// A remote's creds file is unusable.
    #[error("leafnodes remote {index}: credentials {path:?}: {source}")]
    Credentials {
        /// Index of the remote.
        index: usize,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: CredsError,
    },
    /// Leaf configuration that operator mode does not allow (nats-server's
    /// texts).
    #[error("{0}")]
    Operator(&'static str),
}

/// Why a creds file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CredsError {
    /// It cannot be read.
    #[error("cannot read: {0}")]
    Read(#[from] std::io::Error),
    /// It has no JWT and seed blocks.
    #[error("malformed (expected a user JWT block and a seed block)")]
    Malformed,
    /// The seed block is not a user seed.
    #[error("malformed seed")]
    Seed,
    /// The JWT block is not a valid user JWT.
    #[error("malformed user jwt: {0}")]
    Jwt(#[from] super::jwt::JwtError),
}

/// Whether `k` is an account public key (`A…`).
fn is_account_key(k: &str) -> bool {
    k.starts_with('A')
        && nkeys::KeyPair::from_public_key(k)
            .is_ok_and(|kp| kp.key_pair_type() == nkeys::KeyPairType::Account)
}

/// A creds file's user JWT and key.
struct Creds {
    jwt: String,
    key: nkeys::KeyPair,
}

/// Parses a creds file's text (as `nsc` writes it): the first framed
/// block is the user JWT, the second the user seed.
fn parse_creds(text: &str) -> Result<Creds, CredsError> {
    let blocks = super::jwt::framed_tokens(text);
    let [jwt, seed, ..] = blocks.as_slice() else {
        return Err(CredsError::Malformed);
    };
    if !seed.starts_with("SU") {
        return Err(CredsError::Seed);
    }
    let key = nkeys::KeyPair::from_seed(seed).map_err(|_| CredsError::Seed)?;
    super::jwt::decode_user(jwt)?;
    Ok(Creds {
        jwt: jwt.clone(),
        key,
    })
}

/// `sig` for CONNECT: the nonce's ASCII bytes signed with `key`, base64url
/// without padding (as nats-server and the clients send it).
fn sign_nonce(key: &nkeys::KeyPair, nonce: &str) -> Option<String> {
    key.sign(nonce.as_bytes())
        .ok()
        .map(|raw| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw))
}

/// The INFO we send to a leaf that connects to us.
#[derive(Serialize)]
struct LeafInfoOut<'a> {
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
    client_id: u64,
    #[serde(skip_serializing_if = "str::is_empty")]
    nonce: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<String>,
    /// Always present (possibly empty): Go leaves take an INFO without it
    /// for a wrong port.
    leafnode_urls: &'a [String],
    /// Our WebSocket listener, for leaves that come that way.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    ws_connect_urls: &'a [String],
    /// We answer CONNECT with a `connect_info` INFO: Go leaves (2.10+)
    /// wait for it, and so for their permissions, before sending interest.
    info_on_connect: bool,
    /// Set in the INFO that answers CONNECT.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    connect_info: bool,
    /// The account the leaf is bound to (in the `connect_info` INFO).
    #[serde(skip_serializing_if = "Option::is_none")]
    remote_account: Option<&'a str>,
    /// The leaf user's subscribe permissions (what the leaf may receive).
    #[serde(skip_serializing_if = "Option::is_none")]
    import: Option<SubjectPerm>,
    /// The leaf user's publish permissions (what the leaf may send us).
    #[serde(skip_serializing_if = "Option::is_none")]
    export: Option<SubjectPerm>,
    /// Our compression mode (first INFO) or the one chosen (second INFO).
    #[serde(skip_serializing_if = "Option::is_none")]
    compression: Option<&'a str>,
}

/// One direction of permissions in a leaf INFO (`import`/`export`), as
/// nats-server writes it.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
struct SubjectPerm {
    #[serde(skip_serializing_if = "Option::is_none")]
    allow: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deny: Option<Vec<String>>,
}

impl SubjectPerm {
    /// `None` when both lists are empty (nats-server sends no such key).
    fn from_rules(r: &PermissionRules) -> Option<SubjectPerm> {
        let some = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        let p = SubjectPerm {
            allow: some(&r.allow),
            deny: some(&r.deny),
        };
        (p.allow.is_some() || p.deny.is_some()).then_some(p)
    }
}

/// The fields of a hub's INFO we use.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct HubInfo {
    server_id: String,
    server_name: String,
    client_id: u64,
    leafnode_urls: Option<Vec<String>>,
    /// The hub cluster's WebSocket listeners (for leaves that dial them).
    ws_connect_urls: Option<Vec<String>>,
    tls_required: bool,
    cluster: String,
    nonce: String,
    /// The hub answers CONNECT with a `connect_info` INFO.
    info_on_connect: bool,
    /// This INFO answers our CONNECT.
    connect_info: bool,
    /// What we may receive from the hub (its user's subscribe permissions).
    import: Option<SubjectPerm>,
    /// What we may send to the hub (its user's publish permissions).
    export: Option<SubjectPerm>,
    /// The hub's compression mode (absent: a hub without compression).
    compression: Option<String>,
}

/// The CONNECT a leaf sends (the fields we read on the hub side).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LeafConnectIn {
    user: Option<String>,
    pass: Option<String>,
    auth_token: Option<String>,
    nkey: Option<String>,
    sig: Option<String>,
    jwt: Option<String>,
    server_id: String,
    name: String,
    is_hub: bool,
    cluster: String,
    /// Only clients send `lang`.
    lang: Option<String>,
    gateway: Option<String>,
    /// The leaf's `deny_imports`: subjects we must not send it.
    deny_pub: Option<Vec<String>>,
}

/// The CONNECT we send to a hub.
#[derive(Serialize)]
struct LeafConnectOut<'a> {
    version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pass: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth_token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jwt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nkey: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sig: Option<String>,
    server_id: &'a str,
    name: &'a str,
    headers: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<String>,
    remote_account: &'a str,
    /// Our `deny_imports`, so the hub does not send us those subjects.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    deny_pub: &'a [String],
}

/// Subjects no leaf permission applies to: loop detection and gateway
/// replies (nats-server's exemptions for `LS+`).
fn perm_exempt_interest(subject: &str) -> bool {
    subject.starts_with(LDS_PREFIX) || subject.starts_with("$GR.") || subject.starts_with("_GR_.")
}

/// Subjects a leaf message may always carry: service-import replies and
/// JetStream acks (nats-server forwards their interest unchecked).
fn perm_exempt_msg(subject: &str) -> bool {
    subject.starts_with("_R_.") || subject.starts_with("$JS.ACK.")
}

/// Permissions of a leaf connection we accept, as it applies them (the
/// user's directions swapped, as nats-server does): we may send it what the
/// user may subscribe to, minus the leaf's own `deny_pub`; it may bring us,
/// and we announce to it, what the user may publish. `None` = unrestricted.
fn hub_view(
    user: Option<&PermissionSet>,
    deny_pub: &[String],
) -> Result<Option<Arc<PermissionSet>>, AuthError> {
    // Entries that are not a valid subject are skipped (nats-server logs
    // and skips them too); anything else could make the set fail to build.
    let deny_pub: Vec<String> = deny_pub
        .iter()
        .filter(|d| !d.contains(char::is_whitespace) && is_valid_subject(d))
        .cloned()
        .collect();
    if user.is_none() && deny_pub.is_empty() {
        return Ok(None);
    }
    let lists = user.map(PermissionSet::lists).unwrap_or_default();
    let mut send = lists.subscribe;
    send.deny.extend(deny_pub);
    let view = Permissions {
        publish: send,
        subscribe: lists.publish,
        responses: None,
    };
    let mut set = PermissionSet::new(&view)?;
    // The user's `allow_responses` lets the leaf bring answers to the
    // requests we sent it (tracked on its connection).
    set.allow_leaf_responses(user.and_then(PermissionSet::responses));
    Ok(Some(Arc::new(set)))
}

/// Permissions of a connection to our hub: what we may send is the hub's
/// `export` plus our `deny_exports`; what we accept and announce is its
/// `import` plus our `deny_imports`. `None` = unrestricted.
fn spoke_view(
    remote: &LeafRemote,
    import: Option<&SubjectPerm>,
    export: Option<&SubjectPerm>,
) -> Result<Option<Arc<PermissionSet>>, AuthError> {
    let rules = |p: Option<&SubjectPerm>, extra: &[String]| {
        let mut r = PermissionRules {
            allow: p.and_then(|p| p.allow.clone()).unwrap_or_default(),
            deny: p.and_then(|p| p.deny.clone()).unwrap_or_default(),
        };
        r.deny.extend(extra.iter().cloned());
        r
    };
    let view = Permissions {
        publish: rules(export, &remote.deny_exports),
        subscribe: rules(import, &remote.deny_imports),
        responses: None,
    };
    let empty = |r: &PermissionRules| r.allow.is_empty() && r.deny.is_empty();
    if empty(&view.publish) && empty(&view.subscribe) {
        return Ok(None);
    }
    Ok(Some(Arc::new(PermissionSet::new(&view)?)))
}

/// Whether we may tell `leaf` about interest in `subject`.
fn may_announce(leaf: &Leaf, subject: &str) -> bool {
    perm_exempt_interest(subject)
        || leaf
            .client
            .leaf_perms
            .read()
            .as_ref()
            .is_none_or(|p| p.leaf_may_subscribe(subject))
}

/// Whether a leaf connection (we are `spoke` on it) is told about a
/// subscription of a connection of `kind` (nats-server's `updateSmap`).
fn leaf_wants(spoke: bool, kind: ClientKind) -> bool {
    !spoke
        || matches!(
            kind,
            ClientKind::Tcp | ClientKind::Local | ClientKind::Leaf { spoke: false }
        )
}

/// Applies one subscription change to a connection's smap and sends the
/// `LS+`/`LS-` it calls for (into `out`).
fn update_smap(
    smap: &mut HashMap<(String, Option<String>), u32>,
    subject: &str,
    queue: Option<&str>,
    delta: i32,
    out: &mut BytesMut,
) {
    let key = (subject.to_string(), queue.map(str::to_string));
    let before = smap.get(&key).copied().unwrap_or(0);
    if delta < 0 && before == 0 {
        return;
    }
    let after = if delta > 0 {
        before.saturating_add(1)
    } else {
        before - 1
    };
    if after == 0 {
        smap.remove(&key);
    } else {
        smap.insert(key, after);
    }
    match queue {
        Some(q) if after > 0 => encode_ls_plus(out, subject, Some((q, after))),
        Some(q) => encode_ls_minus(out, subject, Some(q)),
        None if before == 0 => encode_ls_plus(out, subject, None),
        None if after == 0 => encode_ls_minus(out, subject, None),
        None => {}
    }
}

/// A random nuid-like token (base62) for the loop-detection subject.
fn random_token() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..22)
        .map(|_| ALPHABET[rand::random::<usize>() % ALPHABET.len()] as char)
        .collect()
}

/// Checks remote `i`: its URLs, the account key operator mode requires,
/// its creds file (read again at each attempt; checked now so a typo is
/// refused).
pub(crate) fn check_remote(i: usize, r: &LeafRemote, operator: bool) -> Result<(), LeafError> {
    if r.urls.is_empty() {
        return Err(LeafError::NoUrl(i));
    }
    if let Some(u) = r.urls.iter().find(|u| parse_leaf_url(u).is_none()) {
        return Err(LeafError::BadUrl {
            index: i,
            url: u.clone(),
        });
    }
    let ws: Vec<bool> = r
        .urls
        .iter()
        .filter_map(|u| parse_leaf_url(u))
        .map(|u| u.ws)
        .collect();
    if ws.iter().any(|w| *w) && ws.iter().any(|w| !*w) {
        return Err(LeafError::MixedUrls(
            r.urls.iter().map(|u| super::external::redact(u)).collect(),
        ));
    }
    if operator && !r.account.as_deref().is_some_and(is_account_key) {
        return Err(LeafError::Operator(
            "operator mode requires account nkeys in remotes. Please add an `account` key to each remote in your `leafnodes` section, to assign it to an account. Each account value should be a 56 character public key, starting with the letter 'A'",
        ));
    }
    if let LeafRemoteAuth::Credentials(path) = &r.auth {
        std::fs::read_to_string(path)
            .map_err(CredsError::from)
            .and_then(|t| parse_creds(&t))
            .map_err(|source| LeafError::Credentials {
                index: i,
                path: path.clone(),
                source,
            })?;
    }
    Ok(())
}

/// The local account of `r` (`$G` when none is named).
fn remote_account(r: &LeafRemote, accounts: &Accounts) -> Result<Arc<Account>, LeafError> {
    match &r.account {
        None => Ok(accounts.global().clone()),
        Some(n) => accounts.get(n).ok_or_else(|| LeafError::UnknownAccount {
            account: n.clone(),
            what: "remote",
        }),
    }
}

impl Remote {
    fn new(
        r: &LeafRemote,
        account: Arc<Account>,
        tls: Option<tokio_rustls::TlsConnector>,
    ) -> Arc<Remote> {
        let mut configured_urls = r.urls.clone();
        if !r.no_randomize && configured_urls.len() > 1 {
            let start = rand::random::<usize>() % configured_urls.len();
            configured_urls.rotate_left(start);
        }
        Arc::new(Remote {
            opts: r.clone(),
            configured_urls,
            safe_name: remote_name(r, true),
            account,
            compression: RwLock::new(r.compression.clone()),
            tls: RwLock::new(tls),
            state: Mutex::default(),
            run: Mutex::new(None),
        })
    }
}

impl Leafnodes {
    /// Binds the leaf listener (so a bad address fails start-up) and checks
    /// the remotes: URLs, accounts, creds files.
    pub(crate) async fn bind(
        opts: &NatsOptions,
        lo: &LeafnodeOptions,
        accounts: &Accounts,
    ) -> Result<(Leafnodes, Option<TcpListener>), LeafError> {
        let operator = opts.auth.operator.is_some();
        let account = |name: &Option<String>, what: &'static str| match name {
            None => Ok(accounts.global().clone()),
            Some(n) => accounts.get(n).ok_or_else(|| LeafError::UnknownAccount {
                account: n.clone(),
                what,
            }),
        };
        if operator && !lo.users.is_empty() {
            return Err(LeafError::Operator(
                "operator mode does not allow specifying users in leafnode config",
            ));
        }
        for u in &lo.users {
            account(&u.account, "authorization")?;
        }
        let default_account = account(&lo.account, "authorization")?;
        let (listener, listen) = match lo.port {
            None => (None, None),
            Some(port) => {
                let bind = format!("{}:{}", lo.host, port);
                let l = TcpListener::bind(&bind)
                    .await
                    .map_err(|source| LeafError::Bind {
                        addr: bind.clone(),
                        source,
                    })?;
                let a = l.local_addr().map_err(|source| LeafError::Bind {
                    addr: bind.clone(),
                    source,
                })?;
                (Some(l), Some(a))
            }
        };
        let (tls_acceptor, remote_tls) = leaf_tls(lo)?;
        check_remotes(&lo.remotes)?;
        let mut remotes = Vec::with_capacity(lo.remotes.len());
        for (i, (r, tls)) in lo.remotes.iter().zip(remote_tls).enumerate() {
            check_remote(i, r, operator)?;
            remotes.push(Remote::new(r, remote_account(r, accounts)?, tls));
        }
        let auth = if lo.users.is_empty() {
            None
        } else {
            let cfg = AuthConfig {
                users: lo
                    .users
                    .iter()
                    .map(|u| User {
                        username: u.user.clone(),
                        password: u.password.clone(),
                        permissions: None,
                        account: u.account.clone(),
                    })
                    .collect(),
                ..AuthConfig::default()
            };
            Some(Authenticator::new(&cfg)?)
        };
        let urls = match (&listen, lo.no_advertise, &lo.advertise) {
            (_, true, _) | (None, _, _) => Vec::new(),
            (_, _, Some(a)) => vec![a.clone()],
            (Some(a), _, None) => {
                let host = if is_wildcard_host(&lo.host) {
                    primary_ip()
                } else {
                    lo.host.clone()
                };
                vec![format!("{host}:{}", a.port())]
            }
        };
        Ok((
            Leafnodes {
                opts: lo.clone(),
                compression: RwLock::new(lo.compression.clone()),
                listen,
                lds_seed: random_token(),
                default_account,
                state: Mutex::new(State::default()),
                remotes: RwLock::new(remotes),
                cancel: CancellationToken::new(),
                stats: LeafStats::default(),
                tls_acceptor: RwLock::new(tls_acceptor),
                auth,
                sent_urls: Mutex::new(urls.clone()),
                urls,
                max_pending: opts.max_pending,
            },
            listener,
        ))
    }

    /// The options.
    pub fn options(&self) -> &LeafnodeOptions {
        &self.opts
    }

    /// Our leaf listener's advertised URL, for route INFOs (empty with
    /// `no_advertise` or without a listener).
    pub(crate) fn advertised_url(&self) -> &[String] {
        &self.urls
    }

    /// `leafnode_urls` for the leaves we accept: ours, then the routed
    /// peers' (a leaf may reconnect to any server of the cluster).
    fn hub_urls(&self, server: &ServerInner) -> Vec<String> {
        let mut urls = self.urls.clone();
        if let Some(routes) = server.routes.as_ref() {
            for u in routes.peer_leaf_urls() {
                if !urls.contains(&u) {
                    urls.push(u);
                }
            }
        }
        urls
    }

    /// Sends the leaves we accepted an INFO with the new `leafnode_urls`
    /// when the routed peers' changed the list (as nats-server).
    pub(crate) fn send_urls_if_changed(&self, server: &ServerInner) {
        let urls = self.hub_urls(server);
        {
            let mut sent = self.sent_urls.lock();
            if *sent == urls {
                return;
            }
            sent.clone_from(&urls);
        }
        let accepted: Vec<Arc<Leaf>> = self
            .state
            .lock()
            .conns
            .values()
            .filter(|l| !l.spoke && l.registered.load(Ordering::Acquire))
            .cloned()
            .collect();
        for leaf in accepted {
            let mut b = BytesMut::new();
            encode_hub_info(server, self, leaf.client.id, "", None, None, &mut b);
            leaf.client.send_now(&b);
        }
    }

    /// The compression mode in force for the leaf listener (`None`) or
    /// `remote`.
    fn mode(&self, remote: Option<&Remote>) -> S2Compression {
        match remote {
            None => self.compression.read().clone(),
            Some(r) => r.compression.read().clone(),
        }
    }

    /// The remotes in force.
    fn remotes(&self) -> Vec<Arc<Remote>> {
        self.remotes.read().clone()
    }

    /// Puts a reload's leaf configuration in force, as nats-server does:
    /// - the listener's `compression`, and each kept remote's, apply to
    ///   live connections (see [`s2::reapply`]): a new level from the next
    ///   write; links that must agree again close, and their leaf
    ///   reconnects;
    /// - the re-read TLS files (`tls`, see [`leaf_tls`]) serve new
    ///   handshakes;
    /// - a remote no longer configured, or now `disabled`, stops being
    ///   solicited and its connection closes; an added one, or one no
    ///   longer disabled, is solicited.
    ///
    /// A remote is the same across reloads while its name (URLs, account,
    /// credentials) is. The new remotes were checked with the rest of the
    /// new configuration (see [`check_remote`]); their accounts exist.
    /// Returns the notices.
    pub(crate) fn reconfigure(
        &self,
        server: &Arc<ServerInner>,
        lo: &LeafnodeOptions,
        tls: LeafTls,
    ) -> Vec<String> {
        let mut notes = Vec::new();
        let (acceptor, mut connectors) = tls;
        *self.tls_acceptor.write() = acceptor;
        let mut recompress = false;
        {
            let mut m = self.compression.write();
            if *m != lo.compression {
                notes.push(format!(
                    "Reloaded: LeafNode Compression value is: {}",
                    lo.compression.name().unwrap_or("off")
                ));
                *m = lo.compression.clone();
                recompress = true;
            }
        }
        let old = self.remotes();
        let mut by_name: HashMap<String, Arc<Remote>> = old
            .iter()
            .map(|r| (remote_name(&r.opts, false), r.clone()))
            .collect();
        let (mut next, mut start, mut stop) = (Vec::new(), Vec::new(), Vec::new());
        for (i, r) in lo.remotes.iter().enumerate() {
            let name = remote_name(r, false);
            let tls = connectors.get_mut(i).and_then(Option::take);
            if let Some(kept) = by_name.remove(&name) {
                *kept.tls.write() = tls;
                {
                    let mut c = kept.compression.write();
                    if *c != r.compression {
                        notes.push(format!(
                            "Reloaded: LeafNode Remote {} Compression value is: {}",
                            kept.safe_name,
                            r.compression.name().unwrap_or("off")
                        ));
                        *c = r.compression.clone();
                        recompress = true;
                    }
                }
                let was_disabled = kept.run.lock().is_none();
                if was_disabled != r.disabled {
                    notes.push(format!(
                        "Reloaded: LeafNode Remote {} Disabled value is: {}",
                        kept.safe_name, r.disabled
                    ));
                    if r.disabled {
                        stop.push(kept.clone());
                    } else {
                        start.push(kept.clone());
                    }
                }
                next.push(kept);
            } else {
                let new = match remote_account(r, &server.accounts) {
                    Ok(account) => Remote::new(r, account, tls),
                    Err(e) => {
                        // The reload's checks make this unreachable.
                        tracing::error!(remote = %remote_name(r, true), error = %e, "leafnode remote not added");
                        continue;
                    }
                };
                notes.push(format!("Reloaded: LeafNode Remote {} added", new.safe_name));
                if !r.disabled {
                    start.push(new.clone());
                }
                next.push(new);
            }
        }
        for gone in by_name.into_values() {
            notes.push(format!(
                "Reloaded: LeafNode Remote {} removed",
                gone.safe_name
            ));
            stop.push(gone);
        }
        *self.remotes.write() = next;
        // A stopped remote's token is cancelled before the connections are
        // collected: one that registers meanwhile sees it (`run_leaf`).
        for r in &stop {
            if let Some(c) = r.run.lock().take() {
                c.cancel();
            }
        }
        let conns: Vec<Arc<Leaf>> = self.state.lock().conns.values().cloned().collect();
        let (mut switched, mut closed, mut ended) = (0, 0, 0);
        for l in conns {
            if let Some(r) = &l.remote {
                if stop.iter().any(|s| Arc::ptr_eq(s, r)) {
                    l.client.close_with_err(None);
                    ended += 1;
                    continue;
                }
            }
            if !recompress {
                continue;
            }
            let new = self.mode(l.remote.as_deref());
            let rtt = l.client.meta.lock().rtt.unwrap_or_default();
            let sw = l.switches.lock().clone();
            match s2::reapply_live(&l.compression, sw.as_ref(), l.formed_off, &new, rtt) {
                s2::Reapply::Keep => {}
                s2::Reapply::Level(..) => switched += 1,
                s2::Reapply::Reconnect => {
                    l.client.close_with_err(None);
                    closed += 1;
                }
            }
        }
        if recompress {
            notes.push(format!(
                "Leafnode compression: {switched} connections switched level, {closed} closed to agree again"
            ));
        }
        if ended > 0 {
            notes.push(format!(
                "Leafnode remotes: {ended} connections of removed or disabled remotes closed"
            ));
        }
        for r in start {
            self.start(server, r);
        }
        notes
    }

    /// Starts soliciting `remote` (unless the server is shutting down).
    fn start(&self, server: &Arc<ServerInner>, remote: Arc<Remote>) {
        let token = self.cancel.child_token();
        *remote.run.lock() = Some(token.clone());
        tokio::spawn(solicit(server.clone(), remote, token));
    }

    /// The loop-detection subject of `account`: this server's random seed
    /// and the account's index, so it is unique per server and account,
    /// also for accounts added after start-up (operator mode, reload).
    pub fn loop_detection_subject(&self, account: &Account) -> String {
        format!("{LDS_PREFIX}{}{}", self.lds_seed, account.idx)
    }

    /// Registered leaf connections, by client id.
    pub fn leafs(&self) -> Vec<Arc<Leaf>> {
        let st = self.state.lock();
        let mut v: Vec<Arc<Leaf>> = st
            .conns
            .values()
            .filter(|l| l.registered.load(Ordering::Acquire))
            .cloned()
            .collect();
        v.sort_by_key(|l| l.client.id);
        v
    }

    /// Number of registered leaf connections.
    pub fn num_leafs(&self) -> usize {
        self.state.lock().smaps.len()
    }

    /// The connections of leaves that authenticated with the client users
    /// (no `leafnodes { authorization }`): a reload checks them again.
    pub(crate) fn leaves_on_client_users(&self) -> Vec<Arc<ClientShared>> {
        if self.auth.is_some() {
            return Vec::new();
        }
        self.state
            .lock()
            .conns
            .values()
            .filter(|l| !l.spoke)
            .map(|l| l.client.clone())
            .collect()
    }

    /// Runs `op` (a sublist insert or removal of `sub`, which belongs to
    /// `account`, returning whether it changed anything) and, if it did,
    /// tells every leaf connection of that account that should know, all
    /// under the interest lock.
    pub(crate) fn track<E>(
        &self,
        account: &Account,
        sub: &Subscription,
        delta: i32,
        op: impl FnOnce() -> Result<bool, E>,
    ) -> Result<bool, E> {
        let mut guard = self.state.lock();
        let changed = op()?;
        if !changed {
            return Ok(false);
        }
        let st = &mut *guard;
        let mut out = BytesMut::new();
        for (cid, smap) in st.smaps.iter_mut() {
            let Some(leaf) = st.conns.get(cid) else {
                continue;
            };
            if leaf.account.idx != account.idx
                || Arc::ptr_eq(&leaf.client, &sub.client)
                || !leaf_wants(leaf.spoke, sub.client.kind)
            {
                continue;
            }
            // Interest the connection's permissions do not allow is not
            // announced; what was announced (before a hub sent us our
            // permissions) is still counted down, so its LS- goes out.
            if !may_announce(leaf, &sub.subject)
                && !smap.contains_key(&(sub.subject.clone(), sub.queue.clone()))
            {
                continue;
            }
            update_smap(smap, &sub.subject, sub.queue.as_deref(), delta, &mut out);
            if !out.is_empty() {
                leaf.client.send_now(&out);
                out.clear();
            }
        }
        Ok(true)
    }

    /// Subjects `account` serves to its leaves beyond its subscriptions
    /// (its service imports' local subjects, its mappings' sources)
    /// changed from `old` to `new`: its leaf connections are told (see
    /// `register`).
    pub(crate) fn served_subjects_changed(
        &self,
        account: &Account,
        old: &[String],
        new: &[String],
    ) {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let mut out = BytesMut::new();
        for (cid, smap) in st.smaps.iter_mut() {
            let Some(leaf) = st.conns.get(cid) else {
                continue;
            };
            if leaf.account.idx != account.idx {
                continue;
            }
            for s in new.iter().filter(|s| !old.contains(s)) {
                if may_announce(leaf, s) {
                    update_smap(smap, s, None, 1, &mut out);
                }
            }
            for s in old.iter().filter(|s| !new.contains(s)) {
                if smap.contains_key(&(s.clone(), None)) {
                    update_smap(smap, s, None, -1, &mut out);
                }
            }
            if !out.is_empty() {
                leaf.client.send_now(&out);
                out.clear();
            }
        }
    }

    /// Starts interest on a connection whose handshake is complete: its
    /// smap is built from every subscription of its account it should know
    /// about, sent (with the account's loop-detection subject) in one
    /// batch, and kept current by [`Leafnodes::track`] from now on.
    fn register(&self, leaf: &Arc<Leaf>) {
        let mut st = self.state.lock();
        let mut smap = HashMap::new();
        let mut out = BytesMut::new();
        encode_ls_plus(&mut out, &self.loop_detection_subject(&leaf.account), None);
        for (subject, queue, sub) in leaf.account.sublist.all() {
            if Arc::ptr_eq(&sub.client, &leaf.client)
                || !leaf_wants(leaf.spoke, sub.client.kind)
                || !may_announce(leaf, &subject)
            {
                continue;
            }
            let key = (subject, queue);
            *smap.entry(key).or_insert(0u32) += 1;
        }
        // Requests on the account's imported services are served here,
        // and its mappings' sources are delivered from here.
        let mut served = leaf.account.service_import_subjects();
        served.extend(leaf.account.mapping_sources());
        for subject in served {
            if may_announce(leaf, &subject) {
                *smap.entry((subject, None)).or_insert(0u32) += 1;
            }
        }
        for ((subject, queue), n) in &smap {
            encode_ls_plus(&mut out, subject, queue.as_deref().map(|q| (q, *n)));
        }
        leaf.client.send_now(&out);
        st.smaps.insert(leaf.client.id, smap);
        leaf.registered.store(true, Ordering::Release);
    }

    /// Sends a message of the claims service (an account lookup) over
    /// every registered connection bound to the system account `account`
    /// (a hub or leaf that serves lookups there). Returns how many it went
    /// to.
    pub(crate) fn forward_system(
        &self,
        account: &str,
        subject: &str,
        reply: Option<&str>,
        payload: &[u8],
    ) -> usize {
        let mut b = BytesMut::new();
        proto::route::put_msg(
            &mut b,
            Dialect::Leaf,
            account.as_bytes(),
            subject.as_bytes(),
            reply.map(str::as_bytes),
            &[],
            None,
            payload,
        );
        let st = self.state.lock();
        let mut sent = 0;
        for l in st.conns.values() {
            if l.account.name == account && l.registered.load(Ordering::Acquire) {
                l.client.send_now(&b);
                sent += 1;
            }
        }
        sent
    }

    /// Closes the connections we solicited (their remotes reconnect);
    /// returns how many.
    pub(crate) fn close_solicited(&self) -> usize {
        let conns: Vec<Arc<Leaf>> = self
            .state
            .lock()
            .conns
            .values()
            .filter(|l| l.spoke)
            .cloned()
            .collect();
        for l in &conns {
            l.client.close_with_err(None);
        }
        conns.len()
    }

    /// Closes the listener, the solicit tasks and every leaf connection.
    pub(crate) fn shutdown(&self) {
        self.cancel.cancel();
        let conns: Vec<Arc<Leaf>> = self.state.lock().conns.values().cloned().collect();
        for l in conns {
            l.client.close_now();
        }
    }

    fn set_remote_delay(&self, leaf: &Leaf, d: Duration) {
        if let Some(r) = &leaf.remote {
            r.state.lock().delay = Some(d);
        }
    }
}

/// Starts the accept loop and the solicit tasks.
pub(crate) fn spawn(server: Arc<ServerInner>, listener: Option<TcpListener>) {
    let Some(leafs) = server.leafs.as_ref() else {
        return;
    };
    if let Some(l) = listener {
        tracing::info!(addr = ?leafs.listen, "listening for leafnode connections");
        tokio::spawn(accept_loop(server.clone(), l));
    }
    for r in leafs.remotes() {
        if !r.opts.disabled {
            leafs.start(&server, r);
        }
    }
}

async fn accept_loop(server: Arc<ServerInner>, listener: TcpListener) {
    let Some(leafs) = server.leafs.as_ref() else {
        return;
    };
    let cancel = leafs.cancel.clone();
    accept_peers(listener, cancel, "leafnode", move |stream, addr| {
        tokio::spawn(accept_one(server.clone(), stream, addr));
    })
    .await;
}

/// Reads until one whole operation is parsed (bounded by `timeout` and
/// [`HANDSHAKE_MAX_LINE`]), starting with the bytes in `buf`; returns it
/// with the bytes after it.
async fn read_first_op<R: AsyncRead + Unpin>(
    r: &mut R,
    parser: &mut RouteParser,
    timeout: Duration,
    mut buf: BytesMut,
    cancel: &CancellationToken,
) -> Result<(RouteOp, BytesMut), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match parser.parse(&mut buf) {
            Ok(RouteParsed::Op(op)) => return Ok((op, buf)),
            Ok(RouteParsed::Incomplete) => {}
            Err(e) => return Err(format!("protocol error: {e}")),
        }
        if buf.len() > HANDSHAKE_MAX_LINE {
            return Err("handshake line too long".into());
        }
        tokio::select! {
            _ = cancel.cancelled() => return Err("closed".into()),
            _ = tokio::time::sleep_until(deadline) => return Err("handshake timed out".into()),
            res = r.read_buf(&mut buf) => match res {
                Ok(0) => return Err("connection closed by peer".into()),
                Err(e) => return Err(format!("read error: {e}")),
                Ok(_) => {}
            },
        }
    }
}

/// Writes `-ERR` and closes a connection that has no writer task yet.
async fn refuse<W: AsyncWrite + Unpin>(w: &mut W, text: &str) {
    let mut b = BytesMut::new();
    proto::encode_err(&mut b, text);
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = w.write_all(&b).await;
        let _ = w.shutdown().await;
    })
    .await;
}

/// Our WebSocket listener's `host:port` (advertised, or the listener's
/// with a wildcard host replaced by our address), when it runs.
fn ws_urls(server: &ServerInner) -> Vec<String> {
    let Some(ws) = server.ws.as_ref() else {
        return Vec::new();
    };
    if let Some(a) = &ws.opts.advertise {
        return vec![a.clone()];
    }
    let host = if is_wildcard_host(&ws.opts.host) {
        primary_ip()
    } else {
        ws.opts.host.clone()
    };
    vec![format!("{host}:{}", ws.addr.port())]
}

/// Appends the INFO we send a leaf: the first one (with `nonce`), or,
/// with `answer` (its account and its user's permissions), the one that
/// answers its CONNECT (`connect_info`, `remote_account`, `import`,
/// `export`).
fn encode_hub_info(
    server: &ServerInner,
    leafs: &Leafnodes,
    cid: u64,
    nonce: &str,
    answer: Option<(&Account, Option<&PermissionSet>)>,
    compression: Option<&str>,
    out: &mut BytesMut,
) {
    let lists = answer.and_then(|(_, p)| p).map(PermissionSet::lists);
    let urls = leafs.hub_urls(server);
    let ws_urls = ws_urls(server);
    let info = LeafInfoOut {
        server_id: &server.server_id,
        server_name: &server.server_name,
        version: SERVER_VERSION,
        proto: 1,
        go: "rust",
        host: &leafs.opts.host,
        port: leafs.listen.map_or(0, |a| a.port()),
        headers: true,
        auth_required: leafs.auth.is_some() || server.auth_required(),
        tls_required: leafs.tls_acceptor.read().is_some(),
        tls_verify: leafs.opts.tls.as_ref().is_some_and(|t| t.verify),
        max_payload: server.live().opts.max_payload,
        client_id: cid,
        nonce,
        cluster: server.routes.as_ref().map(|r| r.cluster_name()),
        leafnode_urls: &urls,
        ws_connect_urls: &ws_urls,
        info_on_connect: true,
        connect_info: answer.is_some(),
        remote_account: answer.map(|(a, _)| a.name.as_str()),
        import: lists
            .as_ref()
            .and_then(|l| SubjectPerm::from_rules(&l.subscribe)),
        export: lists
            .as_ref()
            .and_then(|l| SubjectPerm::from_rules(&l.publish)),
        compression,
    };
    // Serializing strings and numbers cannot fail.
    proto::encode_info(out, &serde_json::to_string(&info).unwrap_or_default());
}

async fn accept_one(server: Arc<ServerInner>, mut stream: TcpStream, addr: SocketAddr) {
    let Some(leafs) = server.leafs.as_ref() else {
        return;
    };
    let cid = server.next_client_id();
    // As nats-server, the accepting side always sends a nonce to leaves.
    let nonce = new_nonce();
    let mut frame = BytesMut::new();
    let mode = leafs.mode(None).name();
    encode_hub_info(&server, leafs, cid, &nonce, None, mode, &mut frame);
    // `handshake_first`: TLS before anything else, then INFO inside it.
    let tls_first = leafs
        .opts
        .tls
        .as_ref()
        .is_some_and(|t| t.handshake_first.is_some());
    if !tls_first && stream.write_all(&frame).await.is_err() {
        return;
    }
    let acceptor = leafs.tls_acceptor.read().clone();
    match acceptor {
        None => run_accepted(server, stream, addr, cid, nonce).await,
        Some(acc) => match tokio::time::timeout(CONNECT_TIMEOUT, acc.accept(stream)).await {
            Ok(Ok(mut tls)) => {
                if tls_first && tls.write_all(&frame).await.is_err() {
                    return;
                }
                run_accepted(server, tls, addr, cid, nonce).await
            }
            Ok(Err(e)) => {
                tracing::warn!(%addr, error = %e, "leafnode TLS handshake failed");
                leafs.stats.rejected.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                tracing::warn!(%addr, "leafnode TLS handshake timed out");
                leafs.stats.rejected.fetch_add(1, Ordering::Relaxed);
            }
        },
    }
}

/// The hub side: waits for CONNECT, checks it, then runs the connection.
async fn run_accepted<S>(
    server: Arc<ServerInner>,
    stream: S,
    addr: SocketAddr,
    cid: u64,
    nonce: String,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let Some(leafs) = server.leafs.as_ref() else {
        return;
    };
    let (r, w) = tokio::io::split(stream);
    if leafs.mode(None).name().is_none() {
        return admit(server, r, w, addr, cid, nonce, None, None).await;
    }
    // A leaf that wants compression says so in an INFO before its CONNECT
    // (see `hub_compression`); until then a compressed stream may start.
    let sw = s2::Switches::default();
    sw.read_armed.store(true, Ordering::Release);
    let (r, w) = (s2::S2Read::new(r, &sw), s2::S2Write::new(w, &sw));
    admit(server, r, w, addr, cid, nonce, Some(sw), None).await
}

/// The hub side of a leaf that came in on the WebSocket listener (path
/// `/leafnode`), as nats-server: only with a leaf listener configured;
/// then as a TCP leaf, except that TLS is the WebSocket listener's and
/// there is no S2 compression (the frames may be deflated instead).
pub(crate) async fn accept_websocket<R, W>(
    server: Arc<ServerInner>,
    r: R,
    mut w: W,
    addr: SocketAddr,
    ws: Arc<WsShared>,
) where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let Some(leafs) = server.leafs.as_ref().filter(|l| l.listen.is_some()) else {
        tracing::error!(%addr, "Not configured to accept leaf node connections");
        let _ = w.shutdown().await;
        return;
    };
    let cid = server.next_client_id();
    let nonce = new_nonce();
    let mut frame = BytesMut::new();
    encode_hub_info(&server, leafs, cid, &nonce, None, None, &mut frame);
    if w.write_all(&frame).await.is_err() || w.flush().await.is_err() {
        return;
    }
    admit(server, r, w, addr, cid, nonce, None, Some(ws)).await
}

/// The hub side after the first INFO: agrees on compression if the leaf
/// asks (`sw`: ours is configured), waits for CONNECT, checks it, then
/// runs the connection. `ws`: it came over the WebSocket listener.
#[allow(clippy::too_many_arguments)]
async fn admit<R, W>(
    server: Arc<ServerInner>,
    mut r: R,
    mut w: W,
    addr: SocketAddr,
    cid: u64,
    nonce: String,
    sw: Option<s2::Switches>,
    ws: Option<Arc<WsShared>>,
) where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let Some(leafs) = server.leafs.as_ref() else {
        return;
    };
    let started = Instant::now();
    let mut parser =
        RouteParser::with_dialect(Dialect::Leaf, server.opts.max_control_line.max(16 * 1024));
    let mut first = read_first_op(
        &mut r,
        &mut parser,
        leafs.opts.auth_timeout,
        BytesMut::with_capacity(4096),
        &leafs.cancel,
    )
    .await;
    let mut mode = "not supported";
    let mut agreed = None;
    if let Some(sw) = &sw {
        let info_first = match &first {
            Ok((RouteOp::Info(json), rest)) => Some((json.clone(), rest.clone())),
            _ => None,
        };
        if let Some((json, rest)) = info_first {
            match hub_compression(&server, leafs, &json, sw, cid, &nonce, started.elapsed()) {
                Ok((m, frame)) => {
                    mode = m;
                    agreed = Some(sw.clone());
                    sw.write_on.store(true, Ordering::Release);
                    if w.write_all(&frame).await.is_err() || w.flush().await.is_err() {
                        return;
                    }
                    first = read_first_op(
                        &mut r,
                        &mut parser,
                        leafs.opts.auth_timeout,
                        rest,
                        &leafs.cancel,
                    )
                    .await;
                }
                Err(text) => {
                    tracing::warn!(%addr, error = %text, "leafnode compression refused");
                    leafs.stats.rejected.fetch_add(1, Ordering::Relaxed);
                    refuse(&mut w, &text).await;
                    return;
                }
            }
        } else {
            // CONNECT first: the leaf does not compress.
            sw.read_armed.store(false, Ordering::Release);
        }
    }
    let (json, rest) = match first {
        Ok((RouteOp::Connect(json), rest)) => (json, rest),
        Ok((_, _)) => {
            tracing::warn!(%addr, "leafnode peer sent an operation before CONNECT");
            leafs.stats.rejected.fetch_add(1, Ordering::Relaxed);
            refuse(&mut w, "Authorization Violation").await;
            return;
        }
        Err(why) => {
            tracing::warn!(%addr, reason = %why, "leafnode connection refused");
            leafs.stats.rejected.fetch_add(1, Ordering::Relaxed);
            let text = if why.starts_with("protocol error") {
                "Unknown Protocol Operation"
            } else if why.contains("timed out") {
                "Authentication Timeout"
            } else {
                return;
            };
            refuse(&mut w, text).await;
            return;
        }
    };
    let nonce_sent = nonce.clone();
    let Admitted {
        connect,
        account,
        expires,
        perms,
    } = match check_connect(&server, json, nonce, addr.ip()).await {
        Ok(c) => c,
        Err(text) => {
            tracing::warn!(%addr, error = %text, "leafnode connection refused");
            leafs.stats.rejected.fetch_add(1, Ordering::Relaxed);
            refuse(&mut w, &text).await;
            return;
        }
    };
    let view = match hub_view(
        perms.as_deref(),
        connect.deny_pub.as_deref().unwrap_or_default(),
    ) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(%addr, error = %e, "leafnode permissions unusable, connection refused");
            leafs.stats.rejected.fetch_add(1, Ordering::Relaxed);
            refuse(&mut w, "Authorization Violation").await;
            return;
        }
    };
    let client = ClientShared::new(
        cid,
        ClientKind::Leaf { spoke: false },
        Some(addr),
        leafs.max_pending,
    );
    if let Some(ws) = &ws {
        ws.set_client(&client);
    }
    // A fresh client: the account cannot be set yet.
    let _ = client.account.set(account.clone());
    *client.leaf_perms.write() = view.clone();
    client.set_reply_perms(view.as_ref());
    // The answer to CONNECT goes out before any interest (`run_leaf`
    // registers the connection after this is queued).
    let mut answer = BytesMut::new();
    encode_hub_info(
        &server,
        leafs,
        cid,
        "",
        Some((&account, perms.as_deref())),
        None,
        &mut answer,
    );
    client.send_now(&answer);
    // Kept for a reload, which checks them against the new users.
    *client.auth.lock() = Some(super::reload::ConnAuth {
        user: connect.user.clone(),
        pass: connect.pass.clone(),
        auth_token: connect.auth_token.clone(),
        nkey: connect.nkey.clone(),
        sig: connect.sig.clone(),
        nonce: Some(nonce_sent),
        perms,
        jwt: connect.jwt.clone(),
    });
    if let Some(exp) = expires {
        // A JWT user's leaf ends at the JWT's expiry, as a client does.
        let at = std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(exp).unwrap_or(0));
        let wait = at
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        let c = client.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = c.cancel.cancelled() => {}
                _ = tokio::time::sleep(wait) => {
                    c.close_with_err(Some("User Authentication Expired"));
                }
            }
        });
    }
    let leaf = Arc::new(Leaf {
        client: client.clone(),
        spoke: false,
        remote: None,
        account,
        peer: Mutex::new(LeafPeer {
            id: connect.server_id,
            name: connect.name,
            cluster: connect.cluster,
        }),
        registered: AtomicBool::new(false),
        compression: Mutex::new(mode),
        formed_off: sw.is_none(),
        switches: Mutex::new(agreed),
    });
    run_leaf(server, leaf, r, w, rest, parser, false).await;
}

/// The hub's answer to a leaf's INFO before CONNECT (the leaf wants
/// compression): the mode chosen and our second INFO (same nonce), to be
/// sent compressed. An error text when the modes do not agree on
/// compression (a leaf that asks for it must get it) or are unknown.
fn hub_compression(
    server: &ServerInner,
    leafs: &Leafnodes,
    json: &[u8],
    sw: &s2::Switches,
    cid: u64,
    nonce: &str,
    rtt: Duration,
) -> Result<(&'static str, BytesMut), String> {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Theirs {
        compression: Option<String>,
    }
    let theirs: Theirs =
        serde_json::from_slice(json).map_err(|_| "Unknown Protocol Operation".to_string())?;
    let ours = &leafs.mode(None);
    let level = s2::select(ours, theirs.compression.as_deref(), rtt)?
        .ok_or_else(|| "Authorization Violation".to_string())?;
    sw.set_level(level);
    let mode = s2::mode_name(ours, level);
    let mut frame = BytesMut::new();
    encode_hub_info(server, leafs, cid, nonce, None, Some(mode), &mut frame);
    Ok((mode, frame))
}

/// A leaf CONNECT that passed [`check_connect`].
struct Admitted {
    connect: LeafConnectIn,
    /// The account the connection is bound to.
    account: Arc<Account>,
    /// The user JWT's expiry (unix seconds), in operator mode.
    expires: Option<i64>,
    /// The leaf user's permissions (`None` = unrestricted).
    perms: Option<Arc<PermissionSet>>,
}

/// How a leaf was authenticated, before its account is looked up.
enum Verdict {
    /// Bound to this account (`None` = `$G`), with these permissions.
    Account(Option<String>, Option<Arc<PermissionSet>>),
    /// A user JWT, bound to its account.
    Jwt(super::resolver::JwtUser),
}

/// Checks a leaf's CONNECT (its kind and credentials) and finds the
/// account to bind it to, as nats-server's `isLeafNodeAuthorized`: the
/// `leafnodes { authorization }` users first, else the client users (or
/// the user JWT in operator mode), else no authentication at all.
/// `Err` is the `-ERR` text to refuse it with.
async fn check_connect(
    server: &Arc<ServerInner>,
    json: Bytes,
    nonce: String,
    ip: std::net::IpAddr,
) -> Result<Admitted, String> {
    let c: LeafConnectIn = serde_json::from_slice(&json)
        .map_err(|e| format!("Invalid CONNECT: {e}").replace('\'', "\""))?;
    if c.lang.is_some() {
        return Err("attempted to connect to leaf node port".into());
    }
    if let Some(g) = &c.gateway {
        return Err(format!(
            "Rejecting connection from gateway {g:?} on the leafnode port"
        ));
    }
    if c.is_hub {
        return Err("leafnode remotes with hub: true are not supported by this server".into());
    }
    if c.cluster.contains(' ') {
        return Err("Invalid Cluster Name".into());
    }
    if let Some(routes) = &server.routes {
        if !c.cluster.is_empty() && c.cluster == routes.cluster_name() {
            return Err("remote leafnode has same cluster name".into());
        }
    }
    if let (Some(op), Some(jwt)) = (&server.operator, c.jwt.as_deref()) {
        if server.leafs.as_ref().is_some_and(|l| l.auth.is_none()) {
            // An account not stored here may be known to a route peer.
            if let Some(key) = op.account_to_fetch(jwt) {
                super::claims::fetch(server, &key).await;
            }
        }
    }
    let srv = server.clone();
    let creds = (
        c.user.clone(),
        c.pass.clone(),
        c.auth_token.clone(),
        c.nkey.clone(),
        c.sig.clone(),
        c.jwt.clone(),
    );
    // bcrypt may take a while: off the executor.
    let verdict = tokio::task::spawn_blocking(move || {
        let (user, pass, token, nkey, sig, jwt) = &creds;
        let creds = Credentials {
            user: user.as_deref(),
            pass: pass.as_deref(),
            auth_token: token.as_deref(),
            nkey: nkey.as_deref(),
            sig: sig.as_deref(),
        };
        let leafs = srv.leafs.as_ref()?;
        if leafs.auth.is_none() {
            if let Some(op) = &srv.operator {
                // Operator mode: the user JWT decides (no JWT, no entry).
                let Some(jwt) = jwt else {
                    return Some(Err("no user JWT in operator mode".to_string()));
                };
                let now = super::jwt::unix_now();
                return Some(
                    op.authenticate_as(
                        jwt,
                        sig.as_deref(),
                        Some(&nonce),
                        "LEAFNODE",
                        Some(ip),
                        now,
                    )
                    .map(Verdict::Jwt)
                    .map_err(|e| e.to_string()),
                );
            }
        }
        if jwt.is_some() {
            return Some(Err("a user JWT outside operator mode".to_string()));
        }
        let client_auth = srv.live().authenticator.clone();
        let auth = match (&leafs.auth, &client_auth) {
            (Some(a), _) => a,
            (None, Some(a)) if a.required() => a,
            _ => return Some(Ok(Verdict::Account(None, None))),
        };
        Some(
            auth.authenticate_identity(&creds, Some(&nonce), "LEAFNODE")
                .map(|o| Verdict::Account(o.account, o.permissions))
                .map_err(|e| e.to_string()),
        )
    })
    .await;
    let refused = |why: &str| {
        tracing::warn!(name = %c.name, reason = why, "leafnode authorization failed");
        server.auth_failures.fetch_add(1, Ordering::Relaxed);
        "Authorization Violation".to_string()
    };
    let (name, expires, perms) = match verdict {
        Ok(Some(Ok(Verdict::Account(name, perms)))) => (name, None, perms),
        Ok(Some(Ok(Verdict::Jwt(u)))) => (Some(u.account), u.expires, u.permissions),
        Ok(Some(Err(why))) => return Err(refused(&why)),
        _ => return Err("Authorization Violation".into()),
    };
    let Some(leafs) = server.leafs.as_ref() else {
        return Err("Authorization Violation".into());
    };
    let account = match name {
        // No user account: `authorization { account }` when nothing had to
        // be checked, else the global account (nats-server binds a client
        // user without an account to `$G`).
        None if leafs.auth.is_none() && !server.auth_required() => leafs.default_account.clone(),
        None => server.accounts.global().clone(),
        Some(n) => match server.accounts.get(&n) {
            Some(a) => a.clone(),
            None => return Err(refused(&format!("unable to lookup account {n:?}"))),
        },
    };
    Ok(Admitted {
        connect: c,
        account,
        expires,
        perms,
    })
}

/// Solicits remote `index` forever (until shutdown): connect, run, wait
/// `reconnect` plus jitter (or a longer delay the connection asked for).
async fn solicit(server: Arc<ServerInner>, remote: Arc<Remote>, cancel: CancellationToken) {
    let Some(leafs) = server.leafs.as_ref() else {
        return;
    };
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let Some(url) = remote.next_url() else {
            return;
        };
        let attempt = {
            let mut st = remote.state.lock();
            st.attempts += 1;
            st.attempts
        };
        // Not raced against `cancel`: a connection ends through its own
        // close (so its cleanup runs); one still in its handshake when the
        // remote stops is refused at registration (`run_leaf`).
        if let Err(e) = connect_remote(&server, &remote, &url).await {
            // The first failure and then one in 60 are logged as warnings.
            if attempt == 1 || attempt % 60 == 0 {
                tracing::warn!(%url, attempt, error = %e, "error trying to connect as leafnode to remote server");
            } else {
                tracing::debug!(%url, attempt, error = %e, "error trying to connect as leafnode to remote server");
            }
        }
        let extra = remote.state.lock().delay.take();
        let base = leafs.opts.reconnect;
        let jitter = base.mul_f64(rand::random::<f64>());
        let wait = extra.unwrap_or(base + jitter);
        if extra.is_some() {
            tracing::warn!(%url, delay = ?wait, "delaying leafnode reconnect");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Errors of one solicit attempt.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("connect: {0}")]
    Io(#[from] std::io::Error),
    #[error("timed out")]
    Timeout,
    #[error("{0}")]
    Handshake(String),
    #[error("tls: {0}")]
    Tls(String),
    #[error("credentials: {0}")]
    Credentials(CredsError),
}

/// One attempt on `remote` at `url`; returns when the connection ends
/// (`Ok`) or could not be set up.
async fn connect_remote(
    server: &Arc<ServerInner>,
    remote: &Arc<Remote>,
    url: &str,
) -> Result<(), ConnectError> {
    let Some(LeafUrl {
        creds,
        hostport,
        tls: tls_scheme,
        ws,
        path,
    }) = parse_leaf_url(url)
    else {
        return Err(ConnectError::Handshake(format!("bad url {url:?}")));
    };
    let dial = remote.opts.dial_timeout.unwrap_or(CONNECT_TIMEOUT);
    let proxy = remote.opts.proxy.as_ref().filter(|_| ws);
    let target = proxy.map_or(&hostport, |p| &p.hostport);
    let mut stream = tokio::time::timeout(dial, TcpStream::connect(target))
        .await
        .map_err(|_| ConnectError::Timeout)??;
    let _ = stream.set_nodelay(true);
    let addr = stream.peer_addr()?;
    if let Some(p) = proxy {
        let within = p.timeout.unwrap_or(CONNECT_TIMEOUT);
        tokio::time::timeout(within, proxy_tunnel(&mut stream, p, &hostport))
            .await
            .map_err(|_| ConnectError::Handshake("proxy CONNECT timed out".into()))??;
    }
    let host = hostport.clone();
    let hostport = remote.tls_hostport(&hostport);
    if ws {
        // TLS (`wss://`, or a `tls` block) comes before the upgrade; the
        // leaf protocol inside needs none of its own.
        let connector = remote.tls.read().clone();
        let target = WsTarget {
            host: &host,
            path: &path,
            hostport: &hostport,
            addr,
        };
        if !tls_scheme && connector.is_none() {
            return over_websocket(server, remote, stream, target, creds).await;
        }
        let Some(conn) = connector else {
            return Err(ConnectError::Tls(
                "wss:// needs tls { ca_file } in this remote".into(),
            ));
        };
        let tls = tls_connect(&conn, &hostport, stream).await?;
        return over_websocket(server, remote, tls, target, creds).await;
    }
    let tls_first = remote
        .opts
        .tls
        .as_ref()
        .is_some_and(|t| t.handshake_first.is_some());
    if !tls_first {
        return handshake_remote(
            server, remote, stream, addr, &hostport, creds, tls_scheme, false, None,
        )
        .await;
    }
    // `handshake_first`: TLS before anything else, INFO inside it.
    let Some(conn) = remote.tls.read().clone() else {
        return Err(ConnectError::Tls(
            "handshake_first needs tls { ca_file } in this remote".into(),
        ));
    };
    let tls = tls_connect(&conn, &hostport, stream).await?;
    handshake_remote(
        server, remote, tls, addr, &hostport, creds, true, true, None,
    )
    .await
}

/// Opens an HTTP `CONNECT` tunnel to `target` through the proxy `stream`
/// is connected to (Basic credentials when configured), as nats-server
/// does; anything but a `200` answer is an error naming the status.
async fn proxy_tunnel(
    stream: &mut TcpStream,
    p: &crate::config::nats::LeafProxy,
    target: &str,
) -> Result<(), ConnectError> {
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if !p.username.is_empty() {
        let basic = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", p.username, p.password));
        req.push_str(&format!("Proxy-Authorization: Basic {basic}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await?;
    // The answer head, read byte by byte so nothing of the tunnel behind
    // it is consumed (it is short, and this happens once per attempt).
    let mut head = Vec::with_capacity(256);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= 16 * 1024 {
            return Err(ConnectError::Handshake(
                "failed to read proxy response: head too large".into(),
            ));
        }
        let mut b = [0u8; 1];
        if stream.read(&mut b).await? == 0 {
            return Err(ConnectError::Handshake(
                "failed to read proxy response: connection closed".into(),
            ));
        }
        head.push(b[0]);
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(&head) {
        Ok(httparse::Status::Complete(_)) if resp.code == Some(200) => Ok(()),
        Ok(httparse::Status::Complete(_)) => Err(ConnectError::Handshake(format!(
            "proxy CONNECT failed: {} {}",
            resp.code.unwrap_or(0),
            resp.reason.unwrap_or("")
        ))),
        _ => Err(ConnectError::Handshake(
            "failed to read proxy response: not HTTP".into(),
        )),
    }
}

/// Where a WebSocket leaf connection goes.
struct WsTarget<'a> {
    /// `Host` of the upgrade request.
    host: &'a str,
    /// The URL's path.
    path: &'a str,
    /// The name TLS verified.
    hostport: &'a str,
    addr: SocketAddr,
}

/// The upgrade on `stream` (TCP or TLS), then the leaf protocol inside
/// the frames.
async fn over_websocket<S>(
    server: &Arc<ServerInner>,
    remote: &Arc<Remote>,
    stream: S,
    to: WsTarget<'_>,
    creds: Option<(String, String)>,
) -> Result<(), ConnectError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (link, shared) = ws_upgrade(server, remote, stream, to.host, to.path).await?;
    handshake_remote(
        server,
        remote,
        link,
        to.addr,
        to.hostport,
        creds,
        false,
        true,
        Some(shared),
    )
    .await
}

/// The WebSocket upgrade toward a hub's WebSocket listener at `host`
/// (`path`: the URL's, `/leafnode` is appended), with the remote's
/// `ws_compression` and `ws_no_masking`.
async fn ws_upgrade<S>(
    server: &ServerInner,
    remote: &Remote,
    stream: S,
    host: &str,
    path: &str,
) -> Result<(ws::LeafLink<S>, Arc<WsShared>), ConnectError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let max_payload = server.live().opts.max_payload as u64;
    tokio::time::timeout(
        CONNECT_TIMEOUT,
        ws::connect_leaf(
            stream,
            host,
            path,
            remote.opts.ws_compression,
            remote.opts.ws_no_masking,
            max_payload,
        ),
    )
    .await
    .map_err(|_| ConnectError::Timeout)?
    .map_err(ConnectError::Handshake)
}

/// The TLS client handshake toward a hub at `hostport`.
async fn tls_connect<S>(
    conn: &tokio_rustls::TlsConnector,
    hostport: &str,
    stream: S,
) -> Result<tokio_rustls::client::TlsStream<S>, ConnectError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let name = rustls::pki_types::ServerName::try_from(host_of(hostport).to_string())
        .map_err(|e| ConnectError::Tls(e.to_string()))?;
    tokio::time::timeout(CONNECT_TIMEOUT, conn.connect(name, stream))
        .await
        .map_err(|_| ConnectError::Timeout)?
        .map_err(|e| ConnectError::Tls(e.to_string()))
}

/// The rest of a connection to a hub, from its INFO on; `tls_done`: the
/// stream is already TLS (`handshake_first`) or needs none (WebSocket);
/// `ws`: the stream is a WebSocket link.
#[allow(clippy::too_many_arguments)]
async fn handshake_remote<S>(
    server: &Arc<ServerInner>,
    remote: &Arc<Remote>,
    mut stream: S,
    addr: SocketAddr,
    hostport: &str,
    creds: Option<(String, String)>,
    tls_scheme: bool,
    tls_done: bool,
    ws: Option<Arc<WsShared>>,
) -> Result<(), ConnectError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let leafs = server.leafs.as_ref().ok_or(ConnectError::Timeout)?;
    // `s2_auto` measures its round trip from here to the hub's INFO.
    let started = Instant::now();
    let mut parser =
        RouteParser::with_dialect(Dialect::Leaf, server.opts.max_control_line.max(16 * 1024));
    let (op, rest) = read_first_op(
        &mut stream,
        &mut parser,
        remote.opts.first_info_timeout.unwrap_or(CONNECT_TIMEOUT),
        BytesMut::with_capacity(4096),
        &leafs.cancel,
    )
    .await
    .map_err(ConnectError::Handshake)?;
    let RouteOp::Info(json) = op else {
        return Err(ConnectError::Handshake(
            "the remote did not start with INFO".into(),
        ));
    };
    let info: HubInfo = serde_json::from_slice(&json)
        .map_err(|e| ConnectError::Handshake(format!("bad INFO: {e}")))?;
    // Over WebSocket the `/leafnode` path already chose the port's role.
    if info.client_id == 0 || (ws.is_none() && info.leafnode_urls.is_none()) {
        return Err(ConnectError::Handshake(
            "attempted to connect to wrong port (not a leafnode port)".into(),
        ));
    }
    if info.server_id == server.server_id {
        return Err(ConnectError::Handshake(
            "remote is this server itself".into(),
        ));
    }
    remote.discovered(remote.announced(&info));
    let account = remote.account.clone();
    // The mode this connection agrees with (a reload after this point
    // re-applies its own to the registered connection). No S2 inside
    // WebSocket frames.
    let ours = if ws.is_some() {
        S2Compression::Off
    } else {
        leafs.mode(Some(remote))
    };
    // Our own deny lists apply from the start; the hub's permissions join
    // them when its INFO brings them.
    let initial = spoke_view(&remote.opts, None, None)
        .map_err(|e| ConnectError::Handshake(format!("deny_imports/deny_exports: {e}")))?;
    let (jwt, nkey, sig) = remote_signature(&remote.opts.auth, &info.nonce).await?;
    let cid = server.next_client_id();
    let client = ClientShared::new(
        cid,
        ClientKind::Leaf { spoke: true },
        Some(addr),
        leafs.max_pending,
    );
    if let Some(ws) = &ws {
        ws.set_client(&client);
    }
    // A fresh client: the account cannot be set yet.
    let _ = client.account.set(account.clone());
    *client.leaf_perms.write() = initial.clone();
    client.set_reply_perms(initial.as_ref());
    let leaf = Arc::new(Leaf {
        client: client.clone(),
        spoke: true,
        remote: Some(remote.clone()),
        account: account.clone(),
        peer: Mutex::new(LeafPeer {
            id: info.server_id.clone(),
            name: info.server_name.clone(),
            cluster: info.cluster.clone(),
        }),
        registered: AtomicBool::new(false),
        compression: Mutex::new("not supported"),
        formed_off: ours == S2Compression::Off,
        switches: Mutex::new(None),
    });
    let (user, pass, token) = match &creds {
        Some((u, p)) if p.is_empty() => (Some(u.as_str()), None, Some(u.as_str())),
        Some((u, p)) => (Some(u.as_str()), Some(p.as_str()), None),
        None => (None, None, None),
    };
    let connect = LeafConnectOut {
        version: SERVER_VERSION,
        user,
        pass,
        auth_token: token,
        jwt,
        nkey,
        sig,
        server_id: &server.server_id,
        name: &server.server_name,
        headers: true,
        cluster: server.routes.as_ref().map(|r| r.cluster_name()),
        remote_account: &account.name,
        deny_pub: &remote.opts.deny_imports,
    };
    let mut hello = BytesMut::new();
    hello.extend_from_slice(b"CONNECT ");
    hello.extend_from_slice(
        serde_json::to_string(&connect)
            .unwrap_or_default()
            .as_bytes(),
    );
    hello.extend_from_slice(b"\r\n");
    let connector = remote.tls.read().clone();
    let want_tls = tls_scheme || info.tls_required || connector.is_some();
    if tls_done || !want_tls {
        return start_remote(
            server, leaf, stream, hello, rest, parser, &info, &ours, started,
        )
        .await;
    }
    let Some(conn) = connector else {
        return Err(ConnectError::Tls(
            "the hub requires TLS: configure tls { ca_file } in this remote".into(),
        ));
    };
    if !rest.is_empty() {
        return Err(ConnectError::Tls("data before the TLS handshake".into()));
    }
    let tls = tls_connect(&conn, hostport, stream).await?;
    start_remote(
        server, leaf, tls, hello, rest, parser, &info, &ours, started,
    )
    .await
}

/// The leaf side once the link is up (TLS included): agrees on
/// compression with the hub if both want it (our INFO naming the mode in
/// the clear, then the hub's second INFO and everything after
/// compressed), sends CONNECT and runs the connection.
#[allow(clippy::too_many_arguments)]
async fn start_remote<T>(
    server: &Arc<ServerInner>,
    leaf: Arc<Leaf>,
    stream: T,
    hello: BytesMut,
    rest: BytesMut,
    mut parser: RouteParser,
    info: &HubInfo,
    ours: &S2Compression,
    started: Instant,
) -> Result<(), ConnectError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let leafs = server.leafs.as_ref().ok_or(ConnectError::Timeout)?;
    let (r, w) = tokio::io::split(stream);
    let level = match ours.name() {
        Some(_) => s2::select(ours, info.compression.as_deref(), started.elapsed())
            .map_err(ConnectError::Handshake)?,
        None => None,
    };
    let Some(level) = level else {
        leaf.client.send_now(&hello);
        run_leaf(
            server.clone(),
            leaf,
            r,
            w,
            rest,
            parser,
            info.info_on_connect,
        )
        .await;
        return Ok(());
    };
    let mode = s2::mode_name(ours, level);
    let sw = s2::Switches::default();
    sw.set_level(level);
    sw.read_armed.store(true, Ordering::Release);
    let (mut r, mut w) = (s2::S2Read::new(r, &sw), s2::S2Write::new(w, &sw));
    let mut frame = BytesMut::new();
    encode_hub_info(
        server,
        leafs,
        leaf.client.id,
        "",
        None,
        Some(mode),
        &mut frame,
    );
    w.write_all(&frame).await?;
    w.flush().await?;
    sw.write_on.store(true, Ordering::Release);
    let (op, rest) = read_first_op(&mut r, &mut parser, CONNECT_TIMEOUT, rest, &leafs.cancel)
        .await
        .map_err(ConnectError::Handshake)?;
    if !matches!(op, RouteOp::Info(_)) {
        return Err(ConnectError::Handshake(
            "the hub did not answer our compression INFO with INFO".into(),
        ));
    }
    *leaf.compression.lock() = mode;
    *leaf.switches.lock() = Some(sw.clone());
    leaf.client.send_now(&hello);
    run_leaf(
        server.clone(),
        leaf,
        r,
        w,
        rest,
        parser,
        info.info_on_connect,
    )
    .await;
    Ok(())
}

/// The `jwt`, `nkey` and `sig` a remote's CONNECT carries: a creds file is
/// read again (a rotated file is used from the next attempt on) and the
/// hub's `nonce` signed with its seed, as nats-server does.
async fn remote_signature(
    auth: &LeafRemoteAuth,
    nonce: &str,
) -> Result<(Option<String>, Option<String>, Option<String>), ConnectError> {
    match auth {
        LeafRemoteAuth::None => Ok((None, None, None)),
        LeafRemoteAuth::Credentials(path) => {
            let text = tokio::fs::read_to_string(path)
                .await
                .map_err(|e| ConnectError::Credentials(CredsError::Read(e)))?;
            let creds = parse_creds(&text).map_err(ConnectError::Credentials)?;
            let sig = sign_nonce(&creds.key, nonce);
            Ok((Some(creds.jwt), None, sig))
        }
        LeafRemoteAuth::Seed(seed) => {
            // Checked when the configuration was read.
            let key = nkeys::KeyPair::from_seed(seed)
                .map_err(|_| ConnectError::Credentials(CredsError::Seed))?;
            Ok((None, Some(key.public_key()), sign_nonce(&key, nonce)))
        }
    }
}

/// Runs a leaf connection whose handshake is done: registers it (sends
/// our interest), starts its writer and ping timer, reads until it ends,
/// then cleans up. With `await_info` (a hub that answers CONNECT with a
/// `connect_info` INFO) that answer, which carries our permissions, is
/// awaited before any interest is sent, as a Go leaf does.
async fn run_leaf<R, W>(
    server: Arc<ServerInner>,
    leaf: Arc<Leaf>,
    mut r: R,
    w: W,
    rest: BytesMut,
    mut parser: RouteParser,
    await_info: bool,
) where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let Some(leafs) = server.leafs.as_ref() else {
        return;
    };
    let client = leaf.client.clone();
    // In operator mode an account JWT may limit its leaf connections
    // (`limits.leaf`, both directions, as nats-server counts them); the
    // count and the insertion are one step, so two leaves connecting at
    // once cannot both take the last place.
    let max_leafs = match server.operator.as_ref() {
        Some(op) => op.max_leafnodes(&leaf.account.name),
        None => leaf.account.limits().max_leafnodes,
    };
    let over_limit = {
        let mut st = leafs.state.lock();
        // A remote removed or disabled by a reload cancelled its token
        // before collecting the connections to close.
        if leafs.cancel.is_cancelled() || leaf.remote.as_ref().is_some_and(|r| r.stopped()) {
            return;
        }
        let bound = || {
            st.conns
                .values()
                .filter(|l| Arc::ptr_eq(&l.account, &leaf.account))
                .count()
        };
        let over = max_leafs.is_some_and(|max| bound() >= max);
        if !over {
            st.conns.insert(client.id, leaf.clone());
        }
        over
    };
    tokio::spawn(client::write_loop(
        client.clone(),
        w,
        server.opts.write_deadline,
        server.clone(),
    ));
    if over_limit {
        tracing::warn!(
            cid = client.id,
            account = %leaf.account.name,
            limit = max_leafs.unwrap_or_default(),
            "leafnode connection refused: the account's leafnode connection limit is reached"
        );
        // nats-server's texts: an account JWT's limit is named, a
        // configured account's fails the authorization.
        client.close_with_err(Some(if server.operator.is_some() {
            "maximum account active connections exceeded"
        } else {
            "Authorization Violation"
        }));
        server.remove_client(&client);
        return;
    }
    let rest = if await_info {
        match await_connect_info(leafs, &leaf, &mut r, &mut parser, rest).await {
            Ok(rest) => rest,
            Err(why) => {
                tracing::warn!(cid = client.id, reason = %why, "leafnode handshake failed");
                client.close_now();
                leafs.state.lock().conns.remove(&client.id);
                server.remove_client(&client);
                return;
            }
        }
    } else {
        rest
    };
    {
        // The account's service imports read here are the ones a rewire
        // (which holds the gate exclusively) moves from.
        let _wiring = server.wiring_gate.read();
        leafs.register(&leaf);
    }
    if let Some(r) = &leaf.remote {
        r.state.lock().attempts = 0;
    }
    {
        let p = leaf.peer.lock();
        tracing::info!(
            cid = client.id,
            addr = ?client.addr,
            remote_id = %p.id,
            remote_name = %p.name,
            spoke = leaf.spoke,
            "leafnode connection created for account: {}",
            leaf.account.name
        );
    }
    tokio::spawn(peer_ping_loop(client.clone(), server.clone()));
    let mut reader = LeafReader {
        server: server.clone(),
        leaf: leaf.clone(),
        parser,
        flush: FlushList::new(),
        cache: client::MatchCache::new(LEAF_CACHE_MAX),
        in_msgs: 0,
        in_bytes: 0,
    };
    let reason = read_peer(&mut reader, r, rest).await;
    if !client.is_closed() {
        client.close_now();
    }
    // Interest goes with the connection: first stop tracking it, then
    // drop the peer's subscriptions (which updates the other leaves).
    {
        let mut st = leafs.state.lock();
        st.smaps.remove(&client.id);
        st.conns.remove(&client.id);
    }
    server.remove_client(&client);
    let p = leaf.peer.lock().clone();
    tracing::info!(
        cid = client.id,
        remote_id = %p.id,
        remote_name = %p.name,
        reason = %reason,
        "leafnode connection closed"
    );
}

/// The reconnect delay a hub's `-ERR` asks for: 30 s after a loop, a
/// permissions violation, the same cluster name or a too-old version.
fn refusal_delay(text: &str) -> Option<Duration> {
    if text.contains("Loop detected") {
        Some(LOOP_DELAY)
    } else if text.contains("same cluster name")
        || text.contains("Permissions Violation")
        || text.contains("minimum version")
    {
        Some(REFUSED_DELAY)
    } else {
        None
    }
}

/// Applies a hub's INFO on a connection we solicited: its `import` and
/// `export`, merged with our deny lists, become the connection's
/// permissions. Returns whether it answers our CONNECT (`connect_info`).
fn apply_hub_info(leaf: &Leaf, json: &[u8]) -> Result<bool, String> {
    let info: HubInfo = serde_json::from_slice(json).map_err(|e| format!("bad INFO: {e}"))?;
    if let Some(remote) = &leaf.remote {
        remote.discovered(remote.announced(&info));
    }
    if info.import.is_some() || info.export.is_some() {
        let remote = leaf
            .remote
            .as_ref()
            .ok_or("INFO with permissions on a connection we did not solicit")?;
        let view = spoke_view(&remote.opts, info.import.as_ref(), info.export.as_ref())
            .map_err(|e| format!("unusable permissions in the hub's INFO: {e}"))?;
        tracing::debug!(cid = leaf.client.id, perms = ?view, "leafnode permissions from the hub");
        *leaf.client.leaf_perms.write() = view.clone();
        leaf.client.set_reply_perms(view.as_ref());
    }
    Ok(info.connect_info)
}

/// Waits (at most [`CONNECT_TIMEOUT`]) for the hub's INFO that answers our
/// CONNECT, applying it; returns the bytes read after it.
async fn await_connect_info<R: AsyncRead + Unpin>(
    leafs: &Leafnodes,
    leaf: &Leaf,
    r: &mut R,
    parser: &mut RouteParser,
    mut buf: BytesMut,
) -> Result<BytesMut, String> {
    let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (op, rest) = read_first_op(r, parser, left, buf, &leafs.cancel).await?;
        buf = rest;
        match op {
            RouteOp::Info(json) => {
                if apply_hub_info(leaf, &json)? {
                    return Ok(buf);
                }
            }
            RouteOp::Ping => leaf.client.send_now(proto::PONG),
            RouteOp::Pong | RouteOp::Ok | RouteOp::Connect(_) => {}
            RouteOp::Err(text) => {
                let t = String::from_utf8_lossy(&text).into_owned();
                if let Some(d) = refusal_delay(&t) {
                    leafs.set_remote_delay(leaf, d);
                }
                return Err(format!("hub refused us: {t}"));
            }
            RouteOp::Sub { .. } | RouteOp::Unsub { .. } | RouteOp::Msg { .. } => {
                return Err("the hub sent interest or messages before answering CONNECT".into())
            }
        }
    }
}

struct LeafReader {
    server: Arc<ServerInner>,
    leaf: Arc<Leaf>,
    parser: RouteParser,
    flush: FlushList,
    cache: client::MatchCache,
    /// Messages and bytes received in the current read batch.
    in_msgs: u64,
    in_bytes: u64,
}

impl LeafReader {
    fn leafs(&self) -> &Leafnodes {
        // A leaf reader only runs when the server has leaf nodes.
        self.server
            .leafs
            .as_ref()
            .expect("leaf reader without leafnodes")
    }

    /// Our loop-detection subject came back: refuse, log, and delay the
    /// reconnect when we solicited.
    fn loop_detected(&self) -> String {
        let leafs = self.leafs();
        leafs.stats.loops.fetch_add(1, Ordering::Relaxed);
        let text = format!(
            "Loop detected for leafnode account=\"{}\". Delaying attempt to reconnect for {}s",
            self.leaf.account.name,
            LOOP_DELAY.as_secs()
        );
        tracing::error!(cid = self.leaf.client.id, "{text}");
        leafs.set_remote_delay(&self.leaf, LOOP_DELAY);
        self.leaf.client.close_with_err(Some(&text));
        "loop detected".into()
    }

    /// Whether interest in `subject` is acceptable: a wildcard or exempt
    /// subject always is, a literal one when we may send it on this
    /// connection.
    fn may_send_literal(&self, subject: &[u8]) -> bool {
        let perms = self.leaf.client.leaf_perms.read();
        let Some(p) = perms.as_ref() else {
            return true;
        };
        let Ok(s) = std::str::from_utf8(subject) else {
            return false;
        };
        perm_exempt_interest(s) || !is_valid_literal_subject(s) || p.can_publish(s)
    }

    /// Whether a message on `subject` may come in on this connection.
    fn may_receive(&self, subject: &[u8]) -> bool {
        let perms = self.leaf.client.leaf_perms.read();
        let Some(p) = perms.as_ref() else {
            return true;
        };
        std::str::from_utf8(subject).is_ok_and(|s| perm_exempt_msg(s) || p.can_subscribe(s, None))
            || self.leaf.client.answers_reply(subject)
    }

    /// Refuses a leaf of ours that broke its permissions, as nats-server:
    /// `-ERR 'Permissions Violation for <what> to "<subject>"'` and close.
    fn perm_violation(&self, what: &str, subject: &str) -> String {
        let text = format!("Permissions Violation for {what} to \"{subject}\"");
        tracing::error!(
            cid = self.leaf.client.id,
            "leafnode {what} violation on {subject:?}, closing - check the other side's configuration"
        );
        self.count_rejected();
        self.leaf.client.close_with_err(Some(&text));
        text
    }

    fn on_err(&self, text: &Bytes) -> String {
        let t = String::from_utf8_lossy(text).into_owned();
        tracing::error!(cid = self.leaf.client.id, error = %t, "leafnode peer sent -ERR, closing");
        if let Some(d) = refusal_delay(&t) {
            self.leafs().set_remote_delay(&self.leaf, d);
        }
        format!("peer error {t}")
    }

    fn leaf_msg(
        &mut self,
        subject: Bytes,
        reply: Option<Bytes>,
        queues: &[Bytes],
        headers: Option<Bytes>,
        payload: Bytes,
    ) {
        let size = headers.as_ref().map_or(0, |h| h.len()) + payload.len();
        self.in_msgs += 1;
        self.in_bytes += size as u64;
        let account = self.leaf.account.clone();
        let Some(result) = self.cache.lookup(&account.sublist, &subject) else {
            return;
        };
        let msg = MsgRef {
            subject: &subject,
            reply: reply.as_ref(),
            headers: headers.as_ref(),
            payload: &payload,
        };
        let publisher = self.leaf.client.clone();
        // As a client's publish: the account's exports and imports apply.
        super::account::deliver_in(
            &self.server,
            &account,
            &publisher,
            false,
            &msg,
            &result,
            &mut self.flush,
            Origin::Leaf {
                spoke: self.leaf.spoke,
                queues,
            },
        );
    }
}

impl PeerReader for LeafReader {
    const KIND: &'static str = "leafnode";

    fn peer(&self) -> &Arc<ClientShared> {
        &self.leaf.client
    }

    fn parser(&mut self) -> &mut RouteParser {
        &mut self.parser
    }

    fn flush_list(&mut self) -> &mut FlushList {
        &mut self.flush
    }

    fn ready(&self) -> bool {
        // The handshake happened before the read loop started.
        true
    }

    fn handshake_timed_out(&mut self) {}

    fn apply(&mut self, op: RouteOp) -> Result<(), String> {
        match op {
            RouteOp::Ping => {
                self.leaf.client.send_raw(proto::PONG, &mut self.flush);
                Ok(())
            }
            RouteOp::Pong => {
                self.leaf.client.pings_out.store(0, Ordering::Relaxed);
                if let Some(rtt) = self.leaf.client.note_pong() {
                    if let S2Compression::Auto(t) = self.leafs().mode(self.leaf.remote.as_deref()) {
                        if let Some(sw) = &*self.leaf.switches.lock() {
                            sw.set_level(s2::auto_level(&t, rtt));
                        }
                    }
                }
                Ok(())
            }
            // A hub's INFO may bring (new) permissions; other INFO fields
            // (URL updates) and a repeated CONNECT change nothing we use.
            RouteOp::Info(json) if self.leaf.spoke => {
                if let Err(why) = apply_hub_info(&self.leaf, &json) {
                    tracing::warn!(cid = self.leaf.client.id, reason = %why, "leafnode INFO refused, closing");
                    self.leaf.client.close_now();
                    return Err(why);
                }
                Ok(())
            }
            RouteOp::Ok | RouteOp::Info(_) | RouteOp::Connect(_) => Ok(()),
            RouteOp::Err(text) => Err(self.on_err(&text)),
            RouteOp::Sub { subject, queue, .. } => {
                let lds = self.leafs().loop_detection_subject(&self.leaf.account);
                if subject[..] == *lds.as_bytes() {
                    return Err(self.loop_detected());
                }
                // Interest in a literal subject we may not send on this
                // connection: a leaf of ours is refused (nats-server's
                // text); from our hub it is ignored (the hub told us our
                // permissions; nothing would be sent anyway). Wildcard
                // interest is kept and filtered message by message.
                if !self.may_send_literal(&subject) {
                    if self.leaf.spoke {
                        return Ok(());
                    }
                    let s = String::from_utf8_lossy(&subject).into_owned();
                    return Err(self.perm_violation("Subscription", &s));
                }
                if self.leaf.client.subs.lock().len() >= MAX_ROUTE_SUBS {
                    tracing::warn!(
                        cid = self.leaf.client.id,
                        "leafnode peer announced more interest than allowed, closing"
                    );
                    self.count_rejected();
                    self.leaf
                        .client
                        .close_with_err(Some("maximum subscriptions exceeded"));
                    return Err("too many remote subscriptions".into());
                }
                let q = queue.as_ref().map(|(q, _)| &q[..]);
                add_peer_interest(&self.server, &self.leaf.client, &subject, q);
                Ok(())
            }
            RouteOp::Unsub { subject, queue, .. } => {
                remove_peer_interest(&self.server, &self.leaf.client, &subject, queue.as_deref());
                Ok(())
            }
            RouteOp::Msg {
                subject,
                reply,
                queues,
                headers,
                payload,
                ..
            } => {
                // As nats-server, the leaf's account's mappings apply
                // before the permissions.
                let subject = match self.leaf.account.map_subject(&self.server, &subject) {
                    None => subject,
                    Some(Mapped::To(s)) => Bytes::from(s),
                    Some(Mapped::Dropped) => return Ok(()),
                };
                // A message the connection's permissions do not let in: a
                // leaf of ours is refused (nats-server's text), one from our
                // hub is dropped.
                if !self.may_receive(&subject) {
                    if self.leaf.spoke {
                        tracing::debug!(cid = self.leaf.client.id, subject = %String::from_utf8_lossy(&subject), "message from the hub not permitted here, dropped");
                        return Ok(());
                    }
                    let s = String::from_utf8_lossy(&subject).into_owned();
                    return Err(self.perm_violation("Publish", &s));
                }
                self.leaf_msg(subject, reply, &queues, headers, payload);
                Ok(())
            }
        }
    }

    fn end_batch(&mut self) {
        self.flush.flush();
        self.flush.count_routed(&self.server);
        let (m, b) = (
            std::mem::take(&mut self.in_msgs),
            std::mem::take(&mut self.in_bytes),
        );
        if m > 0 {
            let leafs = self.leafs();
            leafs.stats.in_msgs.fetch_add(m, Ordering::Relaxed);
            leafs.stats.in_bytes.fetch_add(b, Ordering::Relaxed);
            let c = &self.leaf.client.stats;
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

    fn count_rejected(&self) {
        self.leafs().stats.rejected.fetch_add(1, Ordering::Relaxed);
    }
}

/// `/leafz` body; `subs=1` adds each connection's `subscriptions_list`.
pub(crate) fn leafz_json(server: &ServerInner, subs: bool, acc: Option<&str>) -> serde_json::Value {
    use serde_json::json;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let list: Vec<serde_json::Value> = server
        .leafs
        .as_ref()
        .map(Leafnodes::leafs)
        .unwrap_or_default()
        .iter()
        .filter(|l| acc.is_none_or(|a| l.account.name == a))
        .map(|l| {
            let peer = l.peer.lock().clone();
            let c = &l.client;
            let (out_msgs, out_bytes) = c.out_counts();
            let rtt = c.meta.lock().rtt;
            let mut subjects: Vec<String> =
                c.subs.lock().values().map(|s| s.subject.clone()).collect();
            subjects.sort();
            let mut v = json!({
                "id": c.id,
                "name": peer.name,
                "is_spoke": l.spoke,
                "account": l.account.name,
                "ip": c.addr.map(|a| a.ip().to_string()).unwrap_or_default(),
                "port": c.addr.map_or(0, |a| a.port()),
                "rtt": rtt.map(|d| format!("{d:?}")).unwrap_or_default(),
                "in_msgs": c.stats.in_msgs.load(Ordering::Relaxed),
                "out_msgs": out_msgs,
                "in_bytes": c.stats.in_bytes.load(Ordering::Relaxed),
                "out_bytes": out_bytes,
                "subscriptions": subjects.len(),
                "compression": *l.compression.lock(),
            });
            if subs {
                v["subscriptions_list"] = json!(subjects);
            }
            v
        })
        .collect();
    json!({
        "server_id": server.server_id,
        "now": now,
        "leafnodes": list.len(),
        "leafs": list,
    })
}

/// The `leaf` object of `/varz`.
pub(crate) fn varz_leaf(server: &ServerInner) -> serde_json::Value {
    use serde_json::json;
    let Some(leafs) = server.leafs.as_ref() else {
        return json!({});
    };
    let remotes: Vec<serde_json::Value> = leafs
        .remotes()
        .iter()
        .map(|remote| {
            let (r, acc) = (&remote.opts, &remote.account);
            let urls: Vec<String> = r
                .urls
                .iter()
                .filter_map(|u| parse_leaf_url(u).map(|l| l.hostport))
                .collect();
            let mut v = json!({"local_account": acc.name, "urls": urls, "tls_timeout": 2.0});
            // As nats-server: `deny` only when a list is set, each list
            // only when non-empty.
            let mut deny = serde_json::Map::new();
            if !r.deny_exports.is_empty() {
                deny.insert("exports".into(), json!(r.deny_exports));
            }
            if !r.deny_imports.is_empty() {
                deny.insert("imports".into(), json!(r.deny_imports));
            }
            if !deny.is_empty() {
                v["deny"] = serde_json::Value::Object(deny);
            }
            v
        })
        .collect();
    json!({
        "host": leafs.opts.host,
        "port": leafs.listen.map_or(0, |a| a.port()),
        "auth_timeout": leafs.opts.auth_timeout.as_secs_f64(),
        "tls_timeout": 2.0,
        "tls_required": leafs.tls_acceptor.read().is_some(),
        "tls_verify": leafs.opts.tls.as_ref().is_some_and(|t| t.verify),
        "remotes": remotes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls_rotate_and_take_announced_ones_first() {
        let accounts = Accounts::new(&AuthConfig::default()).unwrap();
        let opts = LeafRemote {
            urls: vec![
                "tls://u:p@hub.example:7422".into(),
                "tls://10.0.0.2:7422".into(),
            ],
            no_randomize: true,
            ..LeafRemote::default()
        };
        let r = Remote::new(&opts, accounts.global().clone(), None);
        let first = r.next_url().unwrap();
        assert_eq!(first, "tls://u:p@hub.example:7422");
        // The last one dialled moves to the end.
        assert_eq!(r.next_url().unwrap(), "tls://10.0.0.2:7422");
        assert_eq!(r.next_url().unwrap(), first);
        // Announced: one configured (skipped), one new, one unusable.
        r.discovered(&["10.0.0.2:7422".into(), "10.0.0.3:7422".into(), "a b".into()]);
        assert_eq!(r.next_url().unwrap(), "tls://u:p@10.0.0.3:7422");
        assert_eq!(r.next_url().unwrap(), first);
        assert_eq!(r.next_url().unwrap(), "tls://10.0.0.2:7422");
        // A hub announced by address is verified as the configured host.
        assert_eq!(r.tls_hostport("10.0.0.3:7422"), "hub.example:7422");
        assert_eq!(r.tls_hostport("other.example:1"), "other.example:1");

        let ignoring = Remote::new(
            &LeafRemote {
                ignore_discovered_servers: true,
                ..opts
            },
            accounts.global().clone(),
            None,
        );
        ignoring.discovered(&["10.0.0.3:7422".into()]);
        for _ in 0..4 {
            assert_ne!(ignoring.next_url().unwrap(), "tls://u:p@10.0.0.3:7422");
        }
    }

    #[test]
    fn websocket_remotes_take_the_announced_websocket_urls() {
        let accounts = Accounts::new(&AuthConfig::default()).unwrap();
        let info: HubInfo = serde_json::from_str(
            r#"{"leafnode_urls": ["10.0.0.2:7422"], "ws_connect_urls": ["10.0.0.2:8443"]}"#,
        )
        .unwrap();
        let ws = Remote::new(
            &LeafRemote {
                urls: vec!["wss://u:p@hub.example/edge".into()],
                ..LeafRemote::default()
            },
            accounts.global().clone(),
            None,
        );
        assert_eq!(ws.announced(&info), ["10.0.0.2:8443"]);
        ws.discovered(ws.announced(&info));
        assert_eq!(ws.next_url().unwrap(), "wss://u:p@10.0.0.2:8443");
        let tcp = Remote::new(
            &LeafRemote {
                urls: vec!["nats-leaf://hub.example".into()],
                ..LeafRemote::default()
            },
            accounts.global().clone(),
            None,
        );
        assert_eq!(tcp.announced(&info), ["10.0.0.2:7422"]);
        let none: HubInfo = serde_json::from_str("{}").unwrap();
        assert!(ws.announced(&none).is_empty());
    }

    #[test]
    fn smap_counts_plain_and_queue_interest() {
        let mut smap = HashMap::new();
        let mut out = BytesMut::new();
        update_smap(&mut smap, "a", None, 1, &mut out);
        update_smap(&mut smap, "a", None, 1, &mut out);
        assert_eq!(&out[..], b"LS+ a\r\n", "only the first plain sub is sent");
        out.clear();
        update_smap(&mut smap, "a", None, -1, &mut out);
        assert!(out.is_empty());
        update_smap(&mut smap, "a", None, -1, &mut out);
        assert_eq!(&out[..], b"LS- a\r\n");
        out.clear();
        update_smap(&mut smap, "a", None, -1, &mut out);
        assert!(out.is_empty(), "removal of unknown interest sends nothing");
        update_smap(&mut smap, "q", Some("g"), 1, &mut out);
        update_smap(&mut smap, "q", Some("g"), 1, &mut out);
        update_smap(&mut smap, "q", Some("g"), -1, &mut out);
        update_smap(&mut smap, "q", Some("g"), -1, &mut out);
        assert_eq!(
            &out[..],
            &b"LS+ q g 1\r\nLS+ q g 2\r\nLS+ q g 1\r\nLS- q g\r\n"[..]
        );
        assert!(smap.is_empty());
    }

    #[test]
    fn spokes_hear_only_local_interest() {
        assert!(leaf_wants(false, ClientKind::Route));
        assert!(leaf_wants(false, ClientKind::Leaf { spoke: true }));
        assert!(leaf_wants(true, ClientKind::Tcp));
        assert!(leaf_wants(true, ClientKind::Local));
        assert!(leaf_wants(true, ClientKind::Leaf { spoke: false }));
        assert!(!leaf_wants(true, ClientKind::Route));
        assert!(!leaf_wants(true, ClientKind::Leaf { spoke: true }));
    }

    #[test]
    fn creds_files_parse_and_sign_the_nonce() {
        use super::super::jwt::{self, Claims, UserNats};
        let account = nkeys::KeyPair::new_account();
        let user = nkeys::KeyPair::new_user();
        let token = jwt::encode(
            &Claims {
                iss: account.public_key(),
                sub: user.public_key(),
                nats: UserNats {
                    kind: "user".into(),
                    version: 2,
                    ..Default::default()
                },
                ..Default::default()
            },
            &account,
        )
        .unwrap();
        let text = jwt::format_creds(&token, &user.seed().unwrap()).replace('\n', "\r\n");
        let creds = parse_creds(&text).expect("an nsc-style creds file (CRLF too)");
        assert_eq!(creds.jwt, token);
        let sig = sign_nonce(&creds.key, "abcdefghijklmno").unwrap();
        let raw = super::super::auth::decode_signature(&sig).unwrap();
        assert!(
            user.verify(b"abcdefghijklmno", &raw).is_ok(),
            "the ASCII nonce is signed with the user key"
        );
        assert!(!sig.contains('=') && !sig.contains('+') && !sig.contains('/'));

        assert!(matches!(parse_creds("junk"), Err(CredsError::Malformed)));
        let account_seed = jwt::format_creds(&token, &account.seed().unwrap());
        assert!(matches!(parse_creds(&account_seed), Err(CredsError::Seed)));
        let bad_jwt = jwt::format_creds("eyJ.not.ajwt", &user.seed().unwrap());
        assert!(matches!(parse_creds(&bad_jwt), Err(CredsError::Jwt(_))));
    }

    #[test]
    fn account_keys_are_recognised() {
        assert!(is_account_key(&nkeys::KeyPair::new_account().public_key()));
        assert!(!is_account_key(&nkeys::KeyPair::new_user().public_key()));
        assert!(!is_account_key("A"));
        assert!(!is_account_key("LA"));
    }

    fn perms(
        pub_allow: &[&str],
        pub_deny: &[&str],
        sub_allow: &[&str],
        sub_deny: &[&str],
    ) -> Permissions {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Permissions {
            publish: PermissionRules {
                allow: v(pub_allow),
                deny: v(pub_deny),
            },
            subscribe: PermissionRules {
                allow: v(sub_allow),
                deny: v(sub_deny),
            },
            responses: None,
        }
    }

    #[test]
    fn hub_view_swaps_the_user_directions_and_adds_deny_pub() {
        let user = PermissionSet::new(&perms(&["up.>"], &["up.secret"], &["down.>"], &[])).unwrap();
        let deny_pub = vec![
            "down.no".to_string(),
            "bad subject x".to_string(),
            "a..b".into(),
        ];
        let v = hub_view(Some(&user), &deny_pub).unwrap().unwrap();
        // We send what the user may subscribe to, minus deny_pub.
        assert!(v.can_publish("down.x"));
        assert!(!v.can_publish("down.no"));
        assert!(!v.can_publish("up.x"));
        // It may bring (and we announce) what the user may publish.
        assert!(v.can_subscribe("up.x", None));
        assert!(!v.can_subscribe("up.secret", None));
        assert!(!v.can_subscribe("down.x", None));
        assert!(v.leaf_may_subscribe(">"), "broader wildcard announced");
        assert!(!v.leaf_may_subscribe("other.>"));
        // No user permissions and no deny_pub: unrestricted.
        assert!(hub_view(None, &[]).unwrap().is_none());
        let only_deny = hub_view(None, &["x".to_string()]).unwrap().unwrap();
        assert!(!only_deny.can_publish("x") && only_deny.can_publish("y"));
    }

    #[test]
    fn spoke_view_merges_the_hub_permissions_with_our_deny_lists() {
        let remote = LeafRemote {
            deny_imports: vec!["in.secret".into()],
            deny_exports: vec!["out.secret".into()],
            ..LeafRemote::default()
        };
        let v = spoke_view(&remote, None, None).unwrap().unwrap();
        assert!(!v.can_publish("out.secret") && v.can_publish("out.ok"));
        assert!(!v.can_subscribe("in.secret", None) && v.can_subscribe("in.ok", None));
        assert!(!v.leaf_may_subscribe("in.secret") && v.leaf_may_subscribe("in.*"));
        let import = SubjectPerm {
            allow: Some(vec!["in.>".into()]),
            deny: None,
        };
        let export = SubjectPerm {
            allow: None,
            deny: Some(vec!["x".into()]),
        };
        let v = spoke_view(&remote, Some(&import), Some(&export))
            .unwrap()
            .unwrap();
        assert!(v.can_subscribe("in.ok", None));
        assert!(!v.can_subscribe("in.secret", None));
        assert!(!v.can_subscribe("other", None));
        assert!(!v.can_publish("x") && !v.can_publish("out.secret"));
        assert!(v.can_publish("y"));
        assert!(spoke_view(&LeafRemote::default(), None, None)
            .unwrap()
            .is_none());
    }

    #[test]
    fn info_permissions_have_nats_server_json_shape() {
        let user =
            PermissionSet::new(&perms(&["up.>"], &[], &["down.>"], &["down.secret q"])).unwrap();
        let l = user.lists();
        let import = serde_json::to_value(SubjectPerm::from_rules(&l.subscribe)).unwrap();
        let export = serde_json::to_value(SubjectPerm::from_rules(&l.publish)).unwrap();
        assert_eq!(
            import,
            serde_json::json!({"allow": ["down.>"], "deny": ["down.secret q"]})
        );
        assert_eq!(export, serde_json::json!({"allow": ["up.>"]}));
        assert!(SubjectPerm::from_rules(&PermissionRules::default()).is_none());
        // Go escapes `>` in JSON; the hub INFO parses either way.
        let info: HubInfo =
            serde_json::from_str(r#"{"connect_info":true,"import":{"allow":["a.\u003e"]}}"#)
                .unwrap();
        assert!(info.connect_info);
        assert_eq!(info.import.unwrap().allow.unwrap(), vec!["a.>"]);
    }

    #[test]
    fn lds_subject_is_a_valid_literal() {
        let t = random_token();
        assert_eq!(t.len(), 22);
        assert!(t.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}
