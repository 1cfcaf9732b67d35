//! The NATS server: listener, accept loop, INFO, TLS, connection limits,
//! lame duck mode and shutdown; with `cluster` configured, also the route
//! listener and solicited routes (`route.rs`); with `websocket`
//! configured, the WebSocket client listener (`ws/`); with `leafnodes`,
//! the leaf listener and remotes (`leaf.rs`). What a configuration reload
//! may change is read from one swappable snapshot (`reload.rs`).
//!
//! [`NatsServer`] is a cheap handle (an `Arc`) shared by the CLI, the HTTP
//! layer and the log layer. Each accepted connection gets INFO first, then
//! (with TLS) the handshake on the same socket, then three tasks: the reader
//! (which also owns cleanup), the writer, and the ping/auth timer.
//!
//! Invariants: every connection is in `clients` from just before its tasks
//! start until its reader has removed its subscriptions; shutdown closes
//! every connection and removes every subscription (which also ends every
//! in-process subscription stream).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use serde::Serialize;
use thiserror::Error;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::account::{Account, AccountError, Accounts, ImportInterest};
use super::auth::AuthError;
use super::client::{self, ClientKind, ClientShared, ClientStats, Reader, Subscription};
use super::handle::LocalClient;
use super::leaf::Leafnodes;
use super::proto;
use super::reload::Live;
use super::route::Routes;
use super::sublist::SublistError;
use crate::config::nats::{AccountConfig, NatsOptions};

/// Version reported in INFO and `/varz` (semver, as clients require).
pub const SERVER_VERSION: &str = "2.11.0";

/// Errors of the NATS server and its in-process client.
#[derive(Debug, Error)]
pub enum NatsError {
    /// The client listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The `host:port` that was tried.
        addr: String,
        /// Why binding failed.
        #[source]
        source: std::io::Error,
    },
    /// Invalid authentication configuration.
    #[error("auth configuration: {0}")]
    Auth(#[from] AuthError),
    /// Invalid TLS configuration.
    #[error("tls configuration: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// A subject is not valid for the operation.
    #[error("invalid subject {0:?}")]
    InvalidSubject(String),
    /// A payload exceeds `max_payload`.
    #[error("maximum payload exceeded")]
    MaxPayload,
    /// A request found no subscriber.
    #[error("no responders")]
    NoResponders,
    /// A request got no reply in time.
    #[error("request timed out")]
    Timeout,
    /// The server has shut down.
    #[error("server stopped")]
    Stopped,
    /// The cluster (route) listener could not be set up.
    #[error(transparent)]
    Route(#[from] super::route::RouteError),
    /// Leaf nodes could not be set up.
    #[error(transparent)]
    Leaf(#[from] super::leaf::LeafError),
    /// Invalid accounts configuration.
    #[error("accounts configuration: {0}")]
    Account(#[from] AccountError),
    /// Invalid operator (JWT) mode configuration.
    #[error("operator mode: {0}")]
    Operator(#[from] super::resolver::ResolverError),
}

/// The INFO object (field order as nats-server's `Info` struct).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Info {
    pub server_id: String,
    pub server_name: String,
    pub version: &'static str,
    pub proto: u32,
    pub go: &'static str,
    pub host: String,
    pub port: u16,
    pub headers: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub auth_required: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub tls_required: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub tls_verify: bool,
    pub max_payload: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_ip: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connect_urls: Vec<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub ldm: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Server-wide state shared by all connections.
pub(crate) struct ServerInner {
    /// The options at start-up. Listeners and other fixed settings are
    /// read here; values a reload may change are read from `live`.
    pub opts: NatsOptions,
    pub server_id: String,
    pub server_name: String,
    pub addr: SocketAddr,
    /// Every account, each with its own subscriptions (`$G` first).
    pub accounts: Accounts,
    /// Held (shared) while a subscription of a non-global account enters
    /// or leaves its sublist and its interest is announced, and
    /// (exclusive) while the accounts are rewired, so every subscription's
    /// import interest is announced and withdrawn under the same imports.
    pub(crate) wiring_gate: parking_lot::RwLock<()>,
    /// The account of in-process clients (`nats.account`, default `$G`).
    pub(crate) local_account: Arc<Account>,
    /// Operator (JWT) mode: trusted operators and account claims; `None`
    /// when users come from the config file.
    pub(crate) operator: Option<Arc<super::resolver::OperatorState>>,
    /// Account lookups sent to the route peers, awaiting answers.
    pub(crate) lookups: super::claims::Lookups,
    /// What a reload may change (options, auth, TLS, INFO); see `reload`.
    pub(crate) live: parking_lot::RwLock<Arc<Live>>,
    /// Bumped by each reload; readers refresh their snapshot when it moves.
    pub(crate) reload_gen: AtomicU64,
    /// `live.opts.max_payload`, for the in-process publish path (no lock).
    pub(crate) max_payload: std::sync::atomic::AtomicUsize,
    /// Serialises reloads.
    pub(crate) reload_lock: tokio::sync::Mutex<()>,
    pub stats: ClientStats,
    pub slow_consumers: AtomicU64,
    /// Stall time and drops of the in-process subscription queues.
    pub local_totals: Arc<super::client::LocalTotals>,
    /// Connections refused for bad credentials or authentication timeout.
    pub auth_failures: AtomicU64,
    pub total_connections: AtomicU64,
    pub clients: Mutex<HashMap<u64, Arc<ClientShared>>>,
    next_cid: AtomicU64,
    listener_cancel: CancellationToken,
    lame_duck: AtomicBool,
    stopped: watch::Sender<bool>,
    pub start: chrono::DateTime<chrono::Utc>,
    /// The cluster side (routes); `None` when not clustered.
    pub routes: Option<Routes>,
    /// Leaf nodes; `None` when not configured.
    pub leafs: Option<Leafnodes>,
    /// Bumped whenever the cluster's client URLs change, so a client whose
    /// CONNECT arrives after a change it missed gets a fresh INFO.
    pub connect_urls_gen: AtomicU64,
    /// The WebSocket listener; `None` when not configured.
    pub(crate) ws: Option<super::ws::WsListener>,
    /// The bridge to an external NATS system (external mode), set once.
    pub(crate) external: std::sync::OnceLock<Arc<super::external::Bridge>>,
    /// Client connect and disconnect events for the system account
    /// (see `sysreq`), set once its publisher runs.
    pub(crate) events: std::sync::OnceLock<tokio::sync::mpsc::Sender<(String, String)>>,
    /// Where a `$SYS.REQ.SERVER.<id>.RELOAD` request goes: set by the
    /// process that owns the configuration file (see
    /// [`NatsServer::reload_requests`]).
    pub(crate) reload_requests: std::sync::OnceLock<tokio::sync::mpsc::Sender<ReloadRequest>>,
    /// Requests of other accounts' clients on the subjects nats-server
    /// imports from the system account (see `sysreq`).
    pub(crate) sys_imports:
        std::sync::OnceLock<tokio::sync::mpsc::Sender<super::sysreq::ImportRequest>>,
}

/// A reload asked for through the system account: answered with the
/// outcome (the error text when it was refused).
pub type ReloadRequest = tokio::sync::oneshot::Sender<Result<(), String>>;

/// Outcome of admitting a new client connection.
pub(crate) enum ClientStart {
    /// Over `max_connections`: INFO and the `-ERR` to send before closing.
    Refused(BytesMut),
    /// Registered: send `info` first, then run the connection.
    Accepted {
        client: Arc<ClientShared>,
        info: BytesMut,
        nonce: Option<String>,
        urls_gen: u64,
    },
}

impl ServerInner {
    /// The account a connection belongs to (`$G` until it is bound).
    pub(crate) fn account_of<'a>(&'a self, c: &'a ClientShared) -> &'a Arc<Account> {
        c.account.get().unwrap_or_else(|| self.accounts.global())
    }

    /// The account whose sublist holds `sub` (a route's subscriptions
    /// name theirs; others belong to their connection's account).
    pub(crate) fn sub_account<'a>(&'a self, sub: &'a Subscription) -> &'a Arc<Account> {
        sub.acc
            .as_ref()
            .unwrap_or_else(|| self.account_of(&sub.client))
    }

    /// The name of the system account: the operator's, else the
    /// configured `system_account`, else `$SYS`.
    pub(crate) fn system_account_name(&self) -> String {
        match &self.operator {
            Some(op) => op
                .system_account()
                .unwrap_or(super::account::SYSTEM_ACCOUNT)
                .to_string(),
            None => self
                .opts
                .auth
                .system_account
                .clone()
                .unwrap_or_else(|| super::account::SYSTEM_ACCOUNT.to_string()),
        }
    }

    /// The system account, when it exists.
    pub(crate) fn system_account(&self) -> Option<Arc<Account>> {
        self.accounts.get(&self.system_account_name())
    }

    /// Whether routes carry `account`: every account but `$SYS` and the
    /// operator's system account, whose events stay local (a configured
    /// `system_account` is carried like any account).
    pub(crate) fn routes_carry(&self, account: &Account) -> bool {
        account.name != super::account::SYSTEM_ACCOUNT
            && self
                .operator
                .as_ref()
                .and_then(|o| o.system_account())
                .is_none_or(|s| s != account.name)
    }

    /// Tells the routes about a local subscription of a non-global
    /// account coming (`delta` 1) or going (-1): its own interest and
    /// the interest its stream imports imply in the exporters' accounts.
    fn announce_to_routes(&self, account: &Account, sub: &Subscription, delta: i32) {
        let Some(r) = &self.routes else {
            return;
        };
        if !sub.client.kind.feeds_routes() || !self.routes_carry(account) {
            return;
        }
        r.local_interest(&account.name, &sub.subject, sub.queue.as_deref(), delta);
        let queue = sub.queue.as_deref();
        self.announce_import_interest(r, account.import_interest(&sub.subject), queue, delta);
    }

    /// Announces (`delta` 1) or withdraws (-1) interest in exporters'
    /// accounts: (exporter index, exporter-side subject) pairs, in the
    /// subscription's queue group when it has one (the member joins the
    /// exporter's group of that name, as nats-server's shadow
    /// subscriptions do).
    fn announce_import_interest(
        &self,
        r: &Routes,
        interest: Vec<ImportInterest>,
        queue: Option<&str>,
        delta: i32,
    ) {
        for (idx, subject) in interest {
            if let Some(exporter) = self.accounts.at(idx) {
                if self.routes_carry(&exporter) {
                    r.local_interest(&exporter.name, &subject, queue, delta);
                }
            }
        }
    }

    /// Replaces the global account's mappings (the top-level `mappings`);
    /// its leaves learn the new sources.
    pub(crate) fn set_global_mappings(
        &self,
        m: &[crate::config::nats::MappingConfig],
    ) -> Result<(), AccountError> {
        let (old, new) = self.accounts.set_global_mappings(m)?;
        if let Some(l) = &self.leafs {
            l.served_subjects_changed(self.accounts.global(), &old, &new);
        }
        Ok(())
    }

    /// Rewires the accounts to `accounts` (operator mode, after an
    /// account JWT was added or changed): new accounts become usable, the
    /// leaves of an account learn its new service imports, and the
    /// interest that imports imply is moved on the routes — for each
    /// local subscription of an account whose imports changed, the new
    /// interest is announced before the old one is withdrawn, so a subject
    /// both cover never loses its interest in between.
    /// With `remove_missing` (a reloaded configuration), accounts not in
    /// `accounts` are removed (see [`Accounts::update`]).
    pub(crate) fn update_accounts(
        &self,
        accounts: &[AccountConfig],
        remove_missing: bool,
    ) -> Result<(), AccountError> {
        let _gate = self.wiring_gate.write();
        let (rewired, remapped) = self.accounts.update(accounts, remove_missing)?;
        if let Some(l) = &self.leafs {
            for rw in &rewired {
                let (old, new) = rw.service_subjects();
                l.served_subjects_changed(&rw.account, &old, &new);
            }
            for (account, old, new) in remapped {
                l.served_subjects_changed(&account, &old, &new);
            }
        }
        let Some(r) = &self.routes else {
            return Ok(());
        };
        for rw in rewired {
            if !self.routes_carry(&rw.account) {
                continue;
            }
            for (subject, _, sub) in rw.account.sublist.all() {
                if !sub.client.kind.feeds_routes() {
                    continue;
                }
                let (old, new) = rw.import_interest(&subject);
                let queue = sub.queue.as_deref();
                self.announce_import_interest(r, new, queue, 1);
                self.announce_import_interest(r, old, queue, -1);
            }
            let (old, new) = rw.response_interest();
            if let Some(s) = new {
                r.local_interest(&rw.account.name, &s, None, 1);
            }
            if let Some(s) = old {
                r.local_interest(&rw.account.name, &s, None, -1);
            }
        }
        Ok(())
    }

    pub(crate) fn auth_required(&self) -> bool {
        self.live
            .read()
            .authenticator
            .as_ref()
            .is_some_and(|a| a.required())
    }

    /// Whether a client connection must authenticate (`websocket`: it
    /// came in over WebSocket, whose block may have its own
    /// authorization).
    pub(crate) fn client_auth_required(&self, websocket: bool) -> bool {
        self.live
            .read()
            .client_authenticator(websocket)
            .is_some_and(|a| a.required())
    }

    /// The current reloadable state (options, authenticator, TLS, INFO).
    pub(crate) fn live(&self) -> Arc<Live> {
        self.live.read().clone()
    }

    /// Cancelled when the server stops accepting (lame duck, shutdown).
    pub(crate) fn listener_cancel(&self) -> CancellationToken {
        self.listener_cancel.clone()
    }

    /// Admits a client connection from `addr` (TCP, or WebSocket when
    /// `websocket`): its INFO (with a nonce when nkeys are configured), the
    /// connection limit, and registration in `clients`. WebSocket clients
    /// get no `connect_urls` (the cluster's are TCP addresses).
    pub(crate) fn start_client(&self, addr: SocketAddr, websocket: bool) -> ClientStart {
        let cid = self.next_client_id();
        let urls_gen = self.connect_urls_gen.load(Ordering::SeqCst);
        let live = self.live();
        let nonce = match live.client_authenticator(websocket) {
            Some(a) if a.needs_nonce() => Some(new_nonce()),
            _ => None,
        };
        let ip = Some(addr.ip().to_string());
        let json = self.info_json_for(Some(cid), ip, nonce.clone(), false, websocket);
        let mut info = BytesMut::new();
        proto::encode_info(&mut info, &json);
        let over_limit = self
            .clients
            .lock()
            .values()
            .filter(|c| c.kind == ClientKind::Tcp)
            .count()
            >= live.opts.max_connections;
        if over_limit {
            proto::encode_err(&mut info, "maximum connections exceeded");
            return ClientStart::Refused(info);
        }
        let client = ClientShared::new(cid, ClientKind::Tcp, Some(addr), self.opts.max_pending);
        client.meta.lock().websocket = websocket;
        self.clients.lock().insert(cid, client.clone());
        self.total_connections.fetch_add(1, Ordering::Relaxed);
        ClientStart::Accepted {
            client,
            info,
            nonce,
            urls_gen,
        }
    }

    pub(crate) fn next_client_id(&self) -> u64 {
        self.next_cid.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds a subscription to the sublist; it is announced to the leaves
    /// of its account that should know, and a local one (not a route's) of
    /// `$G` also to the routes.
    pub(crate) fn add_subscription(&self, sub: &Arc<Subscription>) -> Result<(), SublistError> {
        let account = self.sub_account(sub);
        let _wiring = (!account.is_global()).then(|| self.wiring_gate.read());
        let insert = || {
            account
                .sublist
                .insert(&sub.subject, sub.queue.as_deref(), sub.clone())
                .map(|()| true)
        };
        match &self.leafs {
            Some(l) => l.track(account, sub, 1, insert)?,
            None => insert()?,
        };
        if !account.is_global() {
            // Routes carry every account (by name); the external bridge
            // carries `$G` only.
            self.announce_to_routes(account, sub, 1);
            return Ok(());
        }
        if sub.client.kind.feeds_routes() {
            if let Some(r) = &self.routes {
                r.local_interest(
                    super::route::GLOBAL_ACCOUNT,
                    &sub.subject,
                    sub.queue.as_deref(),
                    1,
                );
            }
            if let Some(b) = self.external.get() {
                b.local_interest(&sub.subject, sub.queue.as_deref(), 1);
            }
        }
        Ok(())
    }

    /// Removes `sub` from the sublist (once) and withdraws its interest
    /// from the routes when it was local.
    fn unlist(&self, sub: &Arc<Subscription>) {
        sub.mark_closed();
        let account = self.sub_account(sub);
        let _wiring = (!account.is_global()).then(|| self.wiring_gate.read());
        let remove = || {
            Ok::<bool, SublistError>(account.sublist.remove(
                &sub.subject,
                sub.queue.as_deref(),
                sub,
            ))
        };
        let removed = match &self.leafs {
            Some(l) => l.track(account, sub, -1, remove),
            None => remove(),
        }
        .unwrap_or(false);
        if removed && !account.is_global() {
            self.announce_to_routes(account, sub, -1);
            return;
        }
        if removed && account.is_global() && sub.client.kind.feeds_routes() {
            if let Some(r) = &self.routes {
                r.local_interest(
                    super::route::GLOBAL_ACCOUNT,
                    &sub.subject,
                    sub.queue.as_deref(),
                    -1,
                );
            }
            if let Some(b) = self.external.get() {
                b.local_interest(&sub.subject, sub.queue.as_deref(), -1);
            }
        }
    }

    /// Removes one subscription everywhere (auto-unsubscribe, UNSUB, drop
    /// of an in-process subscription).
    pub(crate) fn remove_subscription(&self, sub: &Arc<Subscription>) {
        self.unlist(sub);
        let mut subs = sub.client.subs.lock();
        if subs.get(&sub.sid).is_some_and(|s| Arc::ptr_eq(s, sub)) {
            subs.remove(&sub.sid);
        }
    }

    /// Forgets a connection and all its subscriptions.
    pub(crate) fn remove_client(&self, c: &Arc<ClientShared>) {
        let subs: Vec<Arc<Subscription>> = c.subs.lock().drain().map(|(_, s)| s).collect();
        for s in subs {
            self.unlist(&s);
        }
        self.clients.lock().remove(&c.id);
    }

    /// Client URLs of the cluster for INFO (empty when not clustered).
    fn connect_urls(&self) -> Vec<String> {
        self.routes
            .as_ref()
            .map(Routes::client_connect_urls)
            .unwrap_or_default()
    }

    /// The INFO frame for a client that connected with an out-of-date
    /// `connect_urls` (see `connect_urls_gen`).
    pub(crate) fn async_info_frame(&self) -> BytesMut {
        let json = self.info_json(None, None, None, self.lame_duck.load(Ordering::Acquire));
        let mut frame = BytesMut::new();
        proto::encode_info(&mut frame, &json);
        frame
    }

    /// A routed peer came, went or changed its URLs: clients get the new
    /// `connect_urls` and accepted leaves the new `leafnode_urls`.
    pub(crate) fn peer_urls_changed(&self) {
        self.send_connect_urls_to_clients();
        if let Some(leafs) = self.leafs.as_ref() {
            leafs.send_urls_if_changed(self);
        }
    }

    /// Sends an async INFO with the current `connect_urls` to every TCP
    /// client (after a route came or went), as nats-server does.
    pub(crate) fn send_connect_urls_to_clients(&self) {
        if self.routes.as_ref().is_none_or(|r| r.no_advertise()) {
            return;
        }
        // A client between its INFO and its CONNECT is skipped below; the
        // new generation tells its reader to send the update after CONNECT
        // (it marks itself connected before comparing, so one of the two
        // always reaches it).
        self.connect_urls_gen.fetch_add(1, Ordering::SeqCst);
        let json = self.info_json(None, None, None, self.lame_duck.load(Ordering::Acquire));
        let mut frame = BytesMut::new();
        proto::encode_info(&mut frame, &json);
        for c in tcp_clients(self) {
            if c.connected.load(Ordering::SeqCst) && !c.meta.lock().websocket {
                c.send_now(&frame);
            }
        }
    }

    fn info_json(
        &self,
        cid: Option<u64>,
        ip: Option<String>,
        nonce: Option<String>,
        ldm: bool,
    ) -> String {
        self.info_json_for(cid, ip, nonce, ldm, false)
    }

    /// INFO as [`Self::info_json`]; without the cluster's (TCP) client
    /// URLs when `with_urls` is false: a WebSocket client cannot use them.
    fn info_json_for(
        &self,
        cid: Option<u64>,
        ip: Option<String>,
        nonce: Option<String>,
        ldm: bool,
        websocket: bool,
    ) -> String {
        let live = self.live();
        let mut info = live.info.clone();
        info.client_id = cid;
        info.client_ip = ip;
        info.nonce = nonce;
        info.ldm = ldm;
        info.cluster = self.routes.as_ref().map(Routes::cluster_name);
        if websocket {
            // The cluster's client URLs are TCP addresses.
            if let Some(a) = &live.ws_authenticator {
                info.auth_required = a.required();
            }
        } else {
            info.connect_urls = self.connect_urls();
        }
        // Serializing a struct of strings and numbers cannot fail.
        serde_json::to_string(&info).unwrap_or_default()
    }
}

/// The embedded NATS server. Cheap to clone.
#[derive(Clone)]
pub struct NatsServer {
    pub(crate) inner: Arc<ServerInner>,
}

impl NatsServer {
    /// Binds the client listener and starts accepting connections.
    pub async fn start(opts: NatsOptions) -> Result<NatsServer, NatsError> {
        Self::launch(opts, true).await
    }

    /// Starts the server as an in-process bus only, with no client
    /// listener (external NATS mode: see [`Self::connect_external`]);
    /// `client_addr` is then `0.0.0.0:0`.
    pub async fn start_internal(opts: NatsOptions) -> Result<NatsServer, NatsError> {
        Self::launch(opts, false).await
    }

    /// Bridges this server to an external NATS system (see
    /// `nats::external`). Call right after `start_internal`, before
    /// in-process clients subscribe.
    pub async fn connect_external(
        &self,
        opts: &crate::config::external::ExternalNatsOptions,
    ) -> Result<(), super::external::ExternalError> {
        super::external::attach(&self.inner, opts).await.map(|_| ())
    }

    /// The bridge to the external NATS system, in external mode.
    pub fn external(&self) -> Option<&Arc<super::external::Bridge>> {
        self.inner.external.get()
    }

    async fn launch(opts: NatsOptions, listen: bool) -> Result<NatsServer, NatsError> {
        let operator = match &opts.auth.operator {
            Some(c) => Some(Arc::new(super::resolver::OperatorState::load(c)?)),
            None => None,
        };
        let accounts = match &operator {
            // The accounts (subject spaces, exports, imports) are those of
            // the account JWTs known at start-up.
            Some(op) => {
                let mut auth = opts.auth.clone();
                auth.accounts = op.account_configs();
                Accounts::new(&auth)?
            }
            None => Accounts::new(&opts.auth)?,
        };
        let local_account = match opts.local_account.as_deref() {
            None => accounts.global().clone(),
            Some(name) => accounts
                .get(name)
                .ok_or_else(|| AccountError::UnknownLocalAccount(name.to_string()))?,
        };
        let authenticator = super::reload::authenticator_for(&opts)?;
        let ws_authenticator = super::reload::ws_authenticator_for(&opts)?;
        let tls = super::reload::tls_acceptor(opts.tls.as_ref())?;
        let bind = format!("{}:{}", opts.host, opts.port);
        let (listener, addr) = if listen {
            let listener = TcpListener::bind(&bind)
                .await
                .map_err(|source| NatsError::Bind {
                    addr: bind.clone(),
                    source,
                })?;
            let addr = listener.local_addr().map_err(|source| NatsError::Bind {
                addr: bind.clone(),
                source,
            })?;
            (Some(listener), addr)
        } else {
            (None, SocketAddr::from(([0, 0, 0, 0], 0)))
        };
        let server_id = nkeys::KeyPair::new_server().public_key();
        let server_name = opts
            .server_name
            .clone()
            .unwrap_or_else(|| server_id.clone());
        let info = Info {
            server_id: server_id.clone(),
            server_name: server_name.clone(),
            version: SERVER_VERSION,
            proto: 1,
            go: "rust",
            host: opts.host.clone(),
            port: addr.port(),
            headers: true,
            auth_required: authenticator.as_ref().is_some_and(|a| a.required()),
            tls_required: tls.is_some(),
            tls_verify: opts.tls.as_ref().is_some_and(|t| t.verify),
            max_payload: opts.max_payload,
            client_id: None,
            client_ip: None,
            nonce: None,
            cluster: None,
            connect_urls: Vec::new(),
            ldm: false,
        };
        let (ws, ws_listener) = match &opts.websocket {
            Some(w) => {
                let (ws, l) = super::ws::bind(w).await?;
                (Some(ws), Some(l))
            }
            None => (None, None),
        };
        let (routes, route_listener) = match &opts.cluster {
            Some(c) => {
                let (r, l) = Routes::bind(&opts, c, addr.port()).await?;
                (Some(r), Some(l))
            }
            None => (None, None),
        };
        let (leafs, leaf_listener) = match &opts.leafnodes {
            Some(lo) => {
                let (l, listener) = Leafnodes::bind(&opts, lo, &accounts).await?;
                (Some(l), listener)
            }
            None => (None, None),
        };
        let (stopped, _) = watch::channel(false);
        let max_payload = opts.max_payload;
        let live = Live {
            opts: opts.clone(),
            authenticator,
            ws_authenticator,
            tls,
            info,
        };
        let inner = Arc::new(ServerInner {
            opts,
            server_id,
            server_name,
            addr,
            accounts,
            wiring_gate: parking_lot::RwLock::new(()),
            local_account,
            operator,
            lookups: Default::default(),
            live: parking_lot::RwLock::new(Arc::new(live)),
            reload_gen: AtomicU64::new(0),
            max_payload: std::sync::atomic::AtomicUsize::new(max_payload),
            reload_lock: tokio::sync::Mutex::new(()),
            stats: ClientStats::default(),
            slow_consumers: AtomicU64::new(0),
            local_totals: Arc::default(),
            auth_failures: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            clients: Mutex::new(HashMap::new()),
            next_cid: AtomicU64::new(1),
            listener_cancel: CancellationToken::new(),
            lame_duck: AtomicBool::new(false),
            stopped,
            start: chrono::Utc::now(),
            routes,
            leafs,
            connect_urls_gen: AtomicU64::new(0),
            ws,
            external: std::sync::OnceLock::new(),
            events: std::sync::OnceLock::new(),
            reload_requests: std::sync::OnceLock::new(),
            sys_imports: std::sync::OnceLock::new(),
        });
        if let Some(listener) = listener {
            tokio::spawn(accept_loop(inner.clone(), listener));
            tracing::info!(%addr, "listening for client connections");
        }
        if let Some(l) = route_listener {
            if let Some(r) = &inner.routes {
                // Replies to imported services may come from responders on
                // other nodes: ask for them before any route registers.
                for a in inner.accounts.all() {
                    if let Some(subject) = a.response_interest() {
                        if inner.routes_carry(&a) {
                            r.local_interest(&a.name, &subject, None, 1);
                        }
                    }
                }
            }
            super::route::spawn(inner.clone(), l);
        }
        if let Some(l) = ws_listener {
            super::ws::spawn(inner.clone(), l);
        }
        super::leaf::spawn(inner.clone(), leaf_listener);
        super::claims::spawn(&inner)?;
        super::claims::spawn_expiry(&inner);
        super::sysreq::spawn(&inner)?;
        Ok(NatsServer { inner })
    }

    /// The bound client address (port 0 resolved).
    pub fn client_addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The 56-character server id (`N…`).
    pub fn server_id(&self) -> &str {
        &self.inner.server_id
    }

    /// The server name (defaults to the id).
    pub fn server_name(&self) -> &str {
        &self.inner.server_name
    }

    /// The queues of all the node's in-process subscriptions.
    pub fn local_queues(&self) -> Vec<Arc<super::client::LocalQueue>> {
        let locals: Vec<Arc<ClientShared>> = self
            .inner
            .clients
            .lock()
            .values()
            .filter(|c| c.kind == ClientKind::Local)
            .cloned()
            .collect();
        let mut out = Vec::new();
        for c in locals {
            out.extend(
                c.subs
                    .lock()
                    .values()
                    .filter_map(|s| s.local.as_ref().map(|l| l.q.clone())),
            );
        }
        out
    }

    /// The recorder queues (stall policy) of the node's in-process
    /// subscriptions: one per partition this node leads.
    pub fn recorder_queues(&self) -> Vec<Arc<super::client::LocalQueue>> {
        let mut v: Vec<_> = self
            .local_queues()
            .into_iter()
            .filter(|q| q.policy == super::client::FullPolicy::Stall)
            .collect();
        v.sort_by(|a, b| a.subject.cmp(&b.subject));
        v
    }

    /// The options the server started with (listeners and fixed
    /// settings; see [`Self::current_options`] for reloaded values).
    pub fn options(&self) -> &NatsOptions {
        &self.inner.opts
    }

    /// The options in force, with the changes of the last reload.
    pub fn current_options(&self) -> NatsOptions {
        self.inner.live().opts.clone()
    }

    /// An in-process client (no TCP) named `name`.
    pub fn local_client(&self, name: &str) -> LocalClient {
        LocalClient::new(self.inner.clone(), name)
    }

    /// Number of current client connections (TCP and in-process).
    pub fn num_connections(&self) -> usize {
        self.inner.clients.lock().len()
    }

    /// The bound WebSocket address, when `websocket` is configured.
    pub fn websocket_addr(&self) -> Option<SocketAddr> {
        self.inner.ws.as_ref().map(|w| w.addr)
    }

    /// The bound route (cluster) address, when clustered.
    pub fn cluster_addr(&self) -> Option<SocketAddr> {
        self.inner.routes.as_ref().map(|r| r.listen)
    }

    /// Number of registered route connections.
    pub fn num_routes(&self) -> usize {
        self.inner.routes.as_ref().map_or(0, Routes::num_routes)
    }

    /// Remote server ids of the registered routes.
    pub fn route_remote_ids(&self) -> Vec<String> {
        self.inner
            .routes
            .as_ref()
            .map_or_else(Vec::new, Routes::remote_ids)
    }

    /// Number of servers we have routes to (a pool counts once).
    pub fn num_remotes(&self) -> usize {
        self.inner.routes.as_ref().map_or(0, Routes::num_remotes)
    }

    /// Route counters, when clustered.
    pub fn route_stats(&self) -> Option<&super::route::RouteStats> {
        self.inner.routes.as_ref().map(|r| &r.stats)
    }

    /// `/routez` (`subs=1` or `subs=true` lists each route's interest;
    /// `subs=detail` lists it with each subscription's account and queue.
    pub fn routez_json(&self, query: &str) -> serde_json::Value {
        let params: Vec<&str> = query.trim_start_matches('?').split('&').collect();
        let detail = params.contains(&"subs=detail");
        let subs = detail || params.iter().any(|p| *p == "subs=1" || *p == "subs=true");
        super::route::routez_json(&self.inner, subs, detail)
    }

    /// The bound leaf-node listener address, when listening for leaves.
    pub fn leafnode_addr(&self) -> Option<SocketAddr> {
        self.inner.leafs.as_ref().and_then(|l| l.listen)
    }

    /// Number of leaf connections (both roles).
    pub fn num_leafs(&self) -> usize {
        self.inner.leafs.as_ref().map_or(0, Leafnodes::num_leafs)
    }

    /// Leaf counters, when leaf nodes are configured.
    pub fn leaf_stats(&self) -> Option<&super::leaf::LeafStats> {
        self.inner.leafs.as_ref().map(|l| &l.stats)
    }

    /// `/leafz` (`subs=1` or `subs=true` lists each connection's interest).
    pub fn leafz_json(&self, query: &str) -> serde_json::Value {
        let pairs = || query.trim_start_matches('?').split('&');
        let subs = pairs().any(|p| p == "subs=1" || p == "subs=true");
        // `acc=NAME`: the leaf connections bound to one account.
        let acc = pairs()
            .find_map(|p| p.strip_prefix("acc="))
            .filter(|a| !a.is_empty());
        super::leaf::leafz_json(&self.inner, subs, acc)
    }

    /// The reloads the system account asks for
    /// (`$SYS.REQ.SERVER.<id>.RELOAD`), for the owner of the configuration
    /// file to carry out and answer; `None` after the first call. One may
    /// wait at a time; another is refused while it does.
    pub fn reload_requests(&self) -> Option<tokio::sync::mpsc::Receiver<ReloadRequest>> {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        self.inner.reload_requests.set(tx).ok().map(|()| rx)
    }

    /// Whether lame duck mode has been entered.
    pub fn is_lame_duck(&self) -> bool {
        self.inner.lame_duck.load(Ordering::Acquire)
    }

    /// Lame duck mode: stop accepting, announce `"ldm":true` to clients,
    /// wait the grace period, close clients spread over the lame duck
    /// duration, then shut down.
    pub fn enter_lame_duck(&self) {
        if self.inner.lame_duck.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let inner = &me.inner;
            inner.listener_cancel.cancel();
            let json = inner.info_json(None, None, None, true);
            let mut frame = BytesMut::new();
            proto::encode_info(&mut frame, &json);
            let clients: Vec<Arc<ClientShared>> = tcp_clients(inner);
            for c in &clients {
                c.send_now(&frame);
            }
            if let Some(r) = &inner.routes {
                r.announce_lame_duck(inner);
            }
            tracing::info!("entering lame duck mode");
            if clients.is_empty() {
                // Nobody to hand over: stop at once, as nats-server does.
                me.shutdown().await;
                return;
            }
            tokio::time::sleep(inner.opts.lame_duck_grace_period).await;
            let clients = tcp_clients(inner);
            if !clients.is_empty() {
                let dur = inner
                    .opts
                    .lame_duck_duration
                    .saturating_sub(inner.opts.lame_duck_grace_period)
                    .max(Duration::from_millis(1));
                let step = (dur / clients.len() as u32).min(Duration::from_secs(1));
                for (i, c) in clients.iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(step).await;
                    }
                    c.close_now();
                }
            }
            me.shutdown().await;
        });
    }

    /// Closes the listener and every connection, removes every subscription.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.listener_cancel.cancel();
        if let Some(r) = &inner.routes {
            r.shutdown();
        }
        if let Some(l) = &inner.leafs {
            l.shutdown();
        }
        if let Some(b) = inner.external.get() {
            b.shutdown();
        }
        let clients: Vec<Arc<ClientShared>> = inner.clients.lock().values().cloned().collect();
        for c in clients {
            c.close_now();
            inner.remove_client(&c);
        }
        inner.stopped.send_replace(true);
    }

    /// Returns once the server has stopped (after `shutdown` or lame duck).
    pub async fn wait_stopped(&self) {
        let mut rx = self.inner.stopped.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

fn tcp_clients(inner: &ServerInner) -> Vec<Arc<ClientShared>> {
    inner
        .clients
        .lock()
        .values()
        .filter(|c| c.kind == ClientKind::Tcp)
        .cloned()
        .collect()
}

async fn accept_loop(inner: Arc<ServerInner>, listener: TcpListener) {
    loop {
        let accepted = tokio::select! {
            _ = inner.listener_cancel.cancelled() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, addr)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_conn(inner.clone(), stream, addr));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                // Back off on resource exhaustion (EMFILE) instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn serve_conn(inner: Arc<ServerInner>, mut stream: TcpStream, addr: SocketAddr) {
    let (client, info, nonce, urls_gen) = match inner.start_client(addr, false) {
        ClientStart::Refused(frames) => {
            let _ = stream.write_all(&frames).await;
            let _ = stream.shutdown().await;
            return;
        }
        ClientStart::Accepted {
            client,
            info,
            nonce,
            urls_gen,
        } => (client, info, nonce, urls_gen),
    };
    let live = inner.live();
    let tls_first = match (
        &live.tls,
        live.opts.tls.as_ref().and_then(|t| t.handshake_first),
    ) {
        (Some(_), Some(fallback)) => tls_handshake_first(&stream, fallback).await,
        _ => false,
    };
    if !tls_first && stream.write_all(&info).await.is_err() {
        inner.remove_client(&client);
        return;
    }
    let deadline = live.opts.write_deadline;
    tokio::spawn(client::ping_loop(client.clone(), inner.clone()));
    let reader = Reader::new(client.clone(), inner.clone(), nonce, urls_gen);
    match live.tls.clone() {
        None => {
            let (r, w) = stream.into_split();
            tokio::spawn(client::write_loop(
                client.clone(),
                w,
                deadline,
                inner.clone(),
            ));
            reader.run(r).await;
        }
        Some(acceptor) => {
            let hs = tokio::time::timeout(
                live.opts.auth_timeout.max(Duration::from_secs(2)),
                acceptor.accept(stream),
            )
            .await;
            let mut tls = match hs {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(cid = client.id, error = %e, "TLS handshake failed");
                    client.close_now();
                    inner.remove_client(&client);
                    return;
                }
                Err(_) => {
                    tracing::debug!(cid = client.id, "TLS handshake timed out");
                    client.close_now();
                    inner.remove_client(&client);
                    return;
                }
            };
            {
                let (_, conn) = tls.get_ref();
                let mut m = client.meta.lock();
                m.tls_version = conn
                    .protocol_version()
                    .map(|v| format!("{v:?}"))
                    .unwrap_or_default();
                m.tls_cipher = conn
                    .negotiated_cipher_suite()
                    .map(|c| format!("{:?}", c.suite()))
                    .unwrap_or_default();
            }
            if tls_first && tls.write_all(&info).await.is_err() {
                client.close_now();
                inner.remove_client(&client);
                return;
            }
            let (r, w) = tokio::io::split(tls);
            tokio::spawn(client::write_loop(
                client.clone(),
                w,
                deadline,
                inner.clone(),
            ));
            reader.run(r).await;
        }
    }
}

/// Whether a connection starts with the TLS handshake, INFO following it
/// (`tls { handshake_first }`): always with no `fallback`; otherwise only if
/// the client sends something within `fallback` (a client that waits for
/// INFO sends nothing), as nats-server decides.
async fn tls_handshake_first(stream: &TcpStream, fallback: Duration) -> bool {
    if fallback.is_zero() {
        return true;
    }
    let mut first = [0u8; 1];
    matches!(
        tokio::time::timeout(fallback, stream.peek(&mut first)).await,
        Ok(Ok(n)) if n > 0
    )
}

/// A random nonce for nkey challenges (base64url, as nats-server).
pub(crate) fn new_nonce() -> String {
    use base64::Engine;
    let bytes: [u8; 11] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}
