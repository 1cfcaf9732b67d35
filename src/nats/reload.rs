//! Configuration reload of a running NATS server (SIGHUP, `--signal
//! reload`), as nats-server's `server/reload.go` (`spec/nats-parity.md` §5).
//!
//! The state that may change at run time lives in one [`Live`] snapshot
//! behind `ServerInner::live`: the current options, the authenticator, the
//! client TLS acceptor and the INFO template. [`NatsServer::reload`] builds
//! a complete new snapshot first (diff against the running options, new
//! authenticator, certificate files re-read) and only then swaps it in, so
//! a refused or invalid configuration changes nothing at all.
//!
//! After the swap, connected clients are re-checked, as nats-server's
//! `reloadAuthorization` does:
//! - a client whose user (or nkey) no longer exists is closed without an
//!   error (nats-server treats it as "moved to another account": it closes
//!   the connection and the client reconnects under the new rules);
//! - a client whose credentials no longer pass gets
//!   `-ERR 'Authorization Violation'` and is closed;
//! - every other client gets its new permissions; each existing
//!   subscription the new permissions no longer allow is removed with
//!   `-ERR 'Permissions Violation for Subscription to "<subj>" (sid "<sid>")'`
//!   and the connection stays open;
//! - with a lower `max_connections`, connections over the limit are closed
//!   with `-ERR 'maximum connections exceeded'`;
//! - leaves that authenticated with the client users are checked the same
//!   way (closed with `-ERR 'Authorization Violation'` when they no longer
//!   pass).
//!
//! Clients not affected by a change are never disconnected. Readers pick up
//! the new snapshot (permissions, `max_payload`, `max_control_line`,
//! `max_subscriptions`) through `ServerInner::reload_gen`, checked once per
//! socket read; ping timers read the interval at each tick.
//!
//! Configured routes (`cluster { routes }`) are added and removed as
//! nats-server does ([`Routes::reconfigure`](super::route::Routes)): new
//! ones are dialled, removed ones have the connections we dialled to them
//! closed and not re-dialled; a new `pool_size` or pinned account list
//! re-forms the pool connections and the pinned ones of the accounts it
//! changes (other pinned connections stay). A new `compression` (of the cluster, the leaf
//! listener or a leaf remote) applies as nats-server's reload does: a new
//! level from the next write on, and only the connections that must agree
//! again (compression turned on or off, or `accept`) close and re-form.
//!
//! Invariants: reloads are serialised (`reload_lock`); this module never
//! logs (the caller logs the returned lines with its own logger, so the
//! `nats-server` mode and the liftbridge mode each keep their format); it
//! never changes listeners (host, port, the rest of the cluster block,
//! leaf nodes other than `compression` and certificates, WebSocket other
//! than its certificate): those are refused
//! with nats-server's `config reload not supported for <Field>: old=<v>,
//! new=<v>`.

use std::fmt::Debug;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::auth::{AuthError, Authenticator, Credentials, PermissionSet};
use super::client::{ClientKind, ClientShared};
use super::server::{Info, NatsServer, ServerInner};
use crate::config::nats::{NatsOptions, TlsFiles};

/// Why a reload was refused; nothing was applied.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// An option that cannot change at run time changed (nats-server's text).
    #[error("config reload not supported for {field}: old={old}, new={new}")]
    NotSupported {
        /// nats-server's name for the option (its Go field name).
        field: &'static str,
        /// The running value.
        old: String,
        /// The value in the new configuration.
        new: String,
    },
    /// `max_payload` over `max_pending` (nats-server's validation text).
    #[error("max_payload ({payload}) cannot be higher than max_pending ({pending})")]
    MaxPayloadOverPending {
        /// The new `max_payload`.
        payload: usize,
        /// The `max_pending` in force.
        pending: usize,
    },
    /// The new users, tokens, nkeys or permissions are invalid.
    #[error("{0}")]
    Auth(#[from] AuthError),
    /// The users name an account that does not exist (or the accounts are
    /// otherwise inconsistent).
    #[error("{0}")]
    Account(#[from] crate::nats::account::AccountError),
    /// A certificate or key file cannot be read or used.
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    /// A new value is malformed (nats-server's text).
    #[error("{0}")]
    Invalid(String),
    /// The cluster block's new TLS files cannot be used.
    #[error("{0}")]
    Route(#[from] super::route::RouteError),
    /// The leafnodes block's new TLS files cannot be used.
    #[error("{0}")]
    Leaf(#[from] super::leaf::LeafError),
    /// A removed account is still named by configuration that cannot
    /// change at run time.
    #[error("account {account:?} cannot be removed: {what} uses it")]
    AccountInUse {
        /// The configuration naming it.
        what: &'static str,
        /// The account.
        account: String,
    },
    /// The blocking pool failed while re-checking clients.
    #[error("re-checking clients failed: {0}")]
    Join(String),
}

/// What may change at run time, swapped as a whole on reload.
pub(crate) struct Live {
    /// The options in force (listener fields as at start-up).
    pub opts: NatsOptions,
    /// `None` when no authentication is configured.
    pub authenticator: Option<Arc<Authenticator>>,
    /// WebSocket clients' authenticator when the `websocket` block has its
    /// own authorization (see `WsAuth`); else they use `authenticator`.
    pub ws_authenticator: Option<Arc<Authenticator>>,
    /// The client listener's TLS; `None` = plain TCP.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// INFO template (per-connection fields are filled in per client).
    pub info: Info,
}

impl Live {
    /// Builds a snapshot from `opts`, reading certificate files and
    /// validating the authentication settings. `template` supplies the
    /// fields fixed at start-up (ids, host, port).
    pub(crate) fn build(opts: NatsOptions, template: &Info) -> Result<Live, ReloadError> {
        let authenticator = authenticator_for(&opts)?;
        let ws_authenticator = ws_authenticator_for(&opts)?;
        let tls = tls_acceptor(opts.tls.as_ref())?;
        let mut info = template.clone();
        info.auth_required = authenticator.as_ref().is_some_and(|a| a.required());
        info.tls_required = tls.is_some();
        info.tls_verify = opts.tls.as_ref().is_some_and(|t| t.verify);
        info.max_payload = opts.max_payload;
        Ok(Live {
            opts,
            authenticator,
            ws_authenticator,
            tls,
            info,
        })
    }

    /// The authenticator of a client connection (`websocket`: it came in
    /// over WebSocket).
    pub(crate) fn client_authenticator(&self, websocket: bool) -> Option<&Arc<Authenticator>> {
        match (&self.ws_authenticator, websocket) {
            (Some(ws), true) => Some(ws),
            _ => self.authenticator.as_ref(),
        }
    }
}

/// The authenticator for `opts` (`None` when nothing is configured).
pub(crate) fn authenticator_for(
    opts: &NatsOptions,
) -> Result<Option<Arc<Authenticator>>, AuthError> {
    if opts.auth.required() || opts.auth.no_auth_user.is_some() {
        Ok(Some(Arc::new(Authenticator::new(&opts.auth)?)))
    } else {
        Ok(None)
    }
}

/// WebSocket clients' own authenticator, when the `websocket` block has
/// its own authorization.
pub(crate) fn ws_authenticator_for(
    opts: &NatsOptions,
) -> Result<Option<Arc<Authenticator>>, AuthError> {
    match opts.websocket.as_ref().and_then(|w| w.auth.as_ref()) {
        Some(a) => Ok(Some(Arc::new(Authenticator::new(&a.apply(&opts.auth))?))),
        None => Ok(None),
    }
}

/// A TLS acceptor from PEM files (read now).
pub(crate) fn tls_acceptor(
    files: Option<&TlsFiles>,
) -> Result<Option<tokio_rustls::TlsAcceptor>, crate::tls::TlsError> {
    files
        .map(|f| crate::tls::server_config(f).map(tokio_rustls::TlsAcceptor::from))
        .transpose()
}

/// The credentials a client connected with, kept so a reload can check
/// them against the new users (nats-server keeps the CONNECT options for
/// the same reason), and the permissions in force for it.
#[derive(Clone, Default)]
pub(crate) struct ConnAuth {
    pub user: Option<String>,
    pub pass: Option<String>,
    pub auth_token: Option<String>,
    pub nkey: Option<String>,
    pub sig: Option<String>,
    /// The nonce of this connection's INFO (nkey signatures cover it).
    pub nonce: Option<String>,
    /// Operator mode: the user JWT the client connected with (claims
    /// updates re-check it; config reloads leave such clients alone).
    pub jwt: Option<String>,
    /// `None` = no restrictions.
    pub perms: Option<Arc<PermissionSet>>,
}

impl ConnAuth {
    fn credentials(&self) -> Credentials<'_> {
        Credentials {
            user: self.user.as_deref(),
            pass: self.pass.as_deref(),
            auth_token: self.auth_token.as_deref(),
            nkey: self.nkey.as_deref(),
            sig: self.sig.as_deref(),
        }
    }

    /// How nats-server names the client in its log (`User "a"`).
    fn who(&self) -> String {
        match (&self.nkey, &self.user) {
            (Some(k), _) => format!("Nkey {k:?}"),
            (None, Some(u)) => format!("User {u:?}"),
            (None, None) => "client".to_string(),
        }
    }
}

/// Go's `time.Duration` text (`2m0s`, `30s`, `1.5s`, `500ms`), as
/// nats-server prints durations in its reload lines.
pub fn go_duration(d: Duration) -> String {
    fn frac(v: u128, div: u128) -> String {
        let int = v / div;
        let rest = v % div;
        if rest == 0 {
            return int.to_string();
        }
        let width = div.to_string().len() - 1;
        let digits = format!("{rest:0width$}");
        format!("{int}.{}", digits.trim_end_matches('0'))
    }
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000_000_000 {
        let (unit, div) = match ns {
            n if n < 1_000 => ("ns", 1),
            n if n < 1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{}{unit}", frac(ns, div));
    }
    const H: u128 = 3_600_000_000_000;
    const M: u128 = 60_000_000_000;
    let (h, m, s) = (ns / H, (ns % H) / M, frac(ns % M, 1_000_000_000));
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// Equality through `Debug`: the option structs do not implement
/// `PartialEq` (they belong to the loaders), and their derived `Debug`
/// shows every field, so equal text means equal values.
fn same<T: Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

fn refuse(field: &'static str, old: impl ToString, new: impl ToString) -> ReloadError {
    ReloadError::NotSupported {
        field,
        old: old.to_string(),
        new: new.to_string(),
    }
}

fn opt_str(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("")
}

/// Ports of listeners bound at start-up: a new configuration asking for
/// a random port (`0`, `-1` in the file) keeps the bound one.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BoundPorts {
    pub client: u16,
    pub cluster: Option<u16>,
    pub leaf: Option<u16>,
    pub websocket: Option<u16>,
}

/// Compares the running options with `new` as nats-server's `diffOptions`:
/// the `Reloaded: …` lines of what changes, or the first refused change.
/// Random ports in `new` are replaced by the running values.
pub(crate) fn diff(
    old: &NatsOptions,
    new: &mut NatsOptions,
    bound: BoundPorts,
) -> Result<Vec<String>, ReloadError> {
    // Every field is named here, so a new option cannot be added without
    // deciding whether a reload applies it or refuses it.
    let NatsOptions {
        host: _,
        port: _,
        http: _,
        server_name: _,
        max_payload: _,
        max_control_line: _,
        max_pending: _,
        local_max_pending: _,
        max_connections: _,
        max_subscriptions: _,
        ping_interval: _,
        ping_max: _,
        auth_timeout: _,
        write_deadline: _,
        lame_duck_duration: _,
        lame_duck_grace_period: _,
        auth: _,
        tls: _,
        trace: _,
        debug: _,
        cluster: _,
        websocket: _,
        leafnodes: _,
        local_account: _,
    } = new;
    let mut lines = Vec::new();
    if old.server_name != new.server_name {
        return Err(refuse(
            "ServerName",
            opt_str(&old.server_name),
            opt_str(&new.server_name),
        ));
    }
    if old.host != new.host {
        return Err(refuse("Host", &old.host, &new.host));
    }
    if new.port == 0 || new.port == bound.client {
        new.port = old.port;
    } else if new.port != old.port {
        return Err(refuse("Port", bound.client, new.port));
    }
    if old.trace != new.trace {
        lines.push(format!("Reloaded: trace = {}", new.trace));
    }
    if old.debug != new.debug {
        lines.push(format!("Reloaded: debug = {}", new.debug));
    }
    if old.max_connections != new.max_connections {
        lines.push(format!(
            "Reloaded: max_connections = {}",
            new.max_connections
        ));
    }
    if old.max_subscriptions != new.max_subscriptions {
        // nats-server refuses MaxSubs; ours applies to later SUBs.
        lines.push(format!(
            "Reloaded: max_subscriptions = {}",
            new.max_subscriptions
        ));
    }
    if !same(&old.auth.nkeys, &new.auth.nkeys) {
        lines.push("Reloaded: authorization nkey users".into());
    }
    // Accounts may be added, removed, and change their exports and
    // imports (applied by `reload`); users may move between accounts (a
    // client whose account changes is closed and reconnects into the new
    // one). What is fixed at start-up must keep its account: the
    // in-process clients' and the leaf node configuration's.
    if !same(&old.auth.accounts, &new.auth.accounts) {
        if old.auth.operator.is_some() {
            // Operator mode's accounts come from their JWTs.
            let names = |o: &NatsOptions| {
                let v: Vec<&str> = o.auth.accounts.iter().map(|a| a.name.as_str()).collect();
                format!("{v:?}")
            };
            return Err(refuse("Accounts", names(old), names(new)));
        }
        let defined = |name: &str| {
            name == crate::nats::account::GLOBAL_ACCOUNT
                || name == crate::nats::account::SYSTEM_ACCOUNT
                || new.auth.accounts.iter().any(|a| a.name == name)
        };
        let pinned = new
            .local_account
            .iter()
            .map(|a| ("nats.account", a.as_str()))
            .chain(new.leafnodes.iter().flat_map(|l| {
                l.account
                    .iter()
                    .map(|a| ("leafnodes authorization", a.as_str()))
                    .chain(
                        l.users
                            .iter()
                            .filter_map(|u| u.account.as_deref().map(|a| ("leafnodes user", a))),
                    )
                    .chain(
                        l.remotes
                            .iter()
                            .filter_map(|r| r.account.as_deref().map(|a| ("leafnodes remote", a))),
                    )
            }));
        for (what, name) in pinned {
            if !defined(name) {
                return Err(ReloadError::AccountInUse {
                    what,
                    account: name.to_string(),
                });
            }
        }
    }
    // Operator mode's trust and resolver are fixed at start-up (nats-server
    // refuses moving to or from a resolver; its claims change through
    // pushed updates instead).
    if old.auth.operator != new.auth.operator {
        let mode = |o: &NatsOptions| {
            if o.auth.operator.is_some() {
                "operator mode"
            } else {
                "no operator"
            }
        };
        return Err(refuse("Operator", mode(old), mode(new)));
    }
    if old.local_account != new.local_account {
        return Err(refuse(
            "LocalAccount",
            opt_str(&old.local_account),
            opt_str(&new.local_account),
        ));
    }
    // Builds the accounts (and their mappings) to check them.
    crate::nats::account::Accounts::new(&new.auth)?;
    if old.auth.mappings != new.auth.mappings {
        lines.push("Reloaded: mappings".into());
    }
    let ws_auth = |o: &NatsOptions| o.websocket.as_ref().and_then(|w| w.auth.clone());
    if ws_auth(old) != ws_auth(new) {
        lines.push("Reloaded: websocket authorization".into());
    }
    // nats-server reports users and accounts on every reload (it cannot
    // compare them), and re-checks every client each time.
    lines.push("Reloaded: authorization users".into());
    lines.push("Reloaded: accounts".into());
    match (&old.auth.no_auth_user, &new.auth.no_auth_user) {
        (a, b) if a == b => {}
        (Some(a), None) => {
            // Dropping it is allowed only together with its user.
            let still = new.auth.users.iter().any(|u| &u.username == a)
                || new.auth.nkeys.iter().any(|n| &n.nkey == a);
            if still {
                return Err(refuse("NoAuthUser", a, ""));
            }
        }
        (a, b) => return Err(refuse("NoAuthUser", opt_str(a), opt_str(b))),
    }
    if old.auth.token != new.auth.token
        || !same(&old.auth.default_permissions, &new.auth.default_permissions)
    {
        lines.push("Reloaded: authorization token".into());
    }
    if old.ping_interval != new.ping_interval {
        lines.push(format!(
            "Reloaded: ping_interval = {}",
            go_duration(new.ping_interval)
        ));
    }
    if old.ping_max != new.ping_max {
        lines.push(format!("Reloaded: ping_max = {}", new.ping_max));
    }
    let http_host = |h: &Option<(String, u16)>| h.as_ref().map_or(String::new(), |x| x.0.clone());
    let http_port = |h: &Option<(String, u16)>| h.as_ref().map_or(0, |x| x.1);
    if http_host(&old.http) != http_host(&new.http) {
        return Err(refuse(
            "HTTPHost",
            http_host(&old.http),
            http_host(&new.http),
        ));
    }
    match (&old.http, &mut new.http) {
        (Some(o), Some(n)) if n.1 == 0 || n.1 == o.1 => n.1 = o.1,
        (None, None) => {}
        (o, n) => return Err(refuse("HTTPPort", http_port(o), http_port(n))),
    }
    if old.auth_timeout != new.auth_timeout {
        lines.push(format!(
            "Reloaded: authorization timeout = {}",
            new.auth_timeout.as_secs_f64()
        ));
    }
    if old.max_control_line != new.max_control_line {
        lines.push(format!(
            "Reloaded: max_control_line = {}",
            new.max_control_line
        ));
    }
    if new.max_payload > new.max_pending {
        return Err(ReloadError::MaxPayloadOverPending {
            payload: new.max_payload,
            pending: new.max_pending,
        });
    }
    if old.max_payload != new.max_payload {
        lines.push(format!("Reloaded: max_payload = {}", new.max_payload));
    }
    if old.max_pending != new.max_pending {
        return Err(refuse("MaxPending", old.max_pending, new.max_pending));
    }
    if old.local_max_pending != new.local_max_pending {
        return Err(refuse(
            "LocalMaxPending",
            old.local_max_pending,
            new.local_max_pending,
        ));
    }
    lines.extend(diff_cluster(old, new, bound)?);
    diff_leafnodes(old, new, bound)?;
    diff_websocket(old, new, bound)?;
    if old.tls.is_some() || new.tls.is_some() {
        // As nats-server: the certificate files are read again on every
        // reload while TLS is configured.
        let state = if new.tls.is_some() {
            "enabled"
        } else {
            "disabled"
        };
        lines.push(format!("Reloaded: tls = {state}"));
    }
    if old.write_deadline != new.write_deadline {
        lines.push(format!(
            "Reloaded: write_deadline = {}",
            go_duration(new.write_deadline)
        ));
    }
    if old.lame_duck_duration != new.lame_duck_duration {
        return Err(refuse(
            "LameDuckDuration",
            go_duration(old.lame_duck_duration),
            go_duration(new.lame_duck_duration),
        ));
    }
    if old.lame_duck_grace_period != new.lame_duck_grace_period {
        return Err(refuse(
            "LameDuckGracePeriod",
            go_duration(old.lame_duck_grace_period),
            go_duration(new.lame_duck_grace_period),
        ));
    }
    Ok(lines)
}

/// Of the cluster block, `routes` (dialled or dropped by `reload`),
/// `connect_retries`, `advertise`, `no_advertise` (new route INFOs and
/// client `connect_urls`), `name` and `authorization` (the route users;
/// see `Routes::reconfigure`), `pool_size` and `accounts` (see `Routes::reset_pools`),
/// `compression` (see `Routes::recompress`) and the TLS files (see
/// [`files_only`]) may change; the rest is refused, host and port with
/// nats-server's own texts.
fn diff_cluster(
    old: &NatsOptions,
    new: &mut NatsOptions,
    bound: BoundPorts,
) -> Result<Vec<String>, ReloadError> {
    match (&old.cluster, &mut new.cluster) {
        (None, None) => Ok(Vec::new()),
        (Some(o), Some(n)) => {
            if o.host != n.host {
                return Err(ReloadError::NotSupported {
                    field: "cluster host",
                    old: o.host.clone(),
                    new: n.host.clone(),
                });
            }
            if n.port == 0 || Some(n.port) == bound.cluster {
                n.port = o.port;
            } else if n.port != o.port {
                return Err(ReloadError::NotSupported {
                    field: "cluster port",
                    old: bound.cluster.unwrap_or(o.port).to_string(),
                    new: n.port.to_string(),
                });
            }
            if let Some(a) = &n.advertise {
                // nats-server's check of the new value's syntax.
                if let Some((_, port)) = a.rsplit_once(':') {
                    if port.parse::<u16>().is_err() {
                        return Err(ReloadError::Invalid(format!(
                            "invalid Cluster.Advertise value of {a}, err=invalid port {port:?}"
                        )));
                    }
                }
            }
            let mut lines = Vec::new();
            if o.connect_retries != n.connect_retries
                || o.pool_size != n.pool_size
                || o.pinned_accounts != n.pinned_accounts
                || o.compression != n.compression
                || o.advertise != n.advertise
                || o.no_advertise != n.no_advertise
                || o.auth != n.auth
                || (n.name.is_some() && o.name != n.name)
            {
                lines.push("Reloaded: cluster".to_string());
            }
            if o.routes != n.routes {
                lines.push("Reloaded: cluster routes".to_string());
            }
            let fixed = |c: &crate::config::nats::ClusterOptions| {
                let mut c = c.clone();
                c.routes = Vec::new();
                c.connect_retries = 0;
                c.pool_size = 0;
                c.pinned_accounts = Vec::new();
                c.compression = Default::default();
                c.advertise = None;
                c.no_advertise = false;
                c.auth = None;
                // As nats-server, a new name applies; none keeps the
                // name in force.
                c.name = None;
                // The files are read again on every reload; TLS itself
                // cannot be turned on or off.
                c.tls = c.tls.as_ref().map(files_only);
                c
            };
            if same(&fixed(o), &fixed(n)) {
                Ok(lines)
            } else {
                Err(refuse("Cluster", format!("{o:?}"), format!("{n:?}")))
            }
        }
        (o, n) => Err(refuse("Cluster", format!("{o:?}"), format!("{n:?}"))),
    }
}

/// A TLS block with what a reload may change cleared: the certificate,
/// key and CA files and the TLS parameters, re-read on every reload.
/// `verify` and `handshake_first` stay, so changing them is refused.
fn files_only(t: &TlsFiles) -> TlsFiles {
    TlsFiles {
        verify: t.verify,
        handshake_first: t.handshake_first,
        ..TlsFiles::default()
    }
}

/// Of leaf nodes, the listener's `compression` and TLS files (see
/// [`files_only`]) may change, and the remotes as nats-server allows
/// (applied by `Leafnodes::reconfigure`): a remote is known by its name
/// (URLs, account, credentials); one whose name is new is added, one whose
/// name is gone is removed, and of a kept one only `compression`, the TLS
/// files and `disabled` may change. An added remote's URLs, credentials
/// and account are checked by [`check_added_remotes`].
fn diff_leafnodes(
    old: &NatsOptions,
    new: &mut NatsOptions,
    bound: BoundPorts,
) -> Result<(), ReloadError> {
    if let (Some(o), Some(n)) = (&old.leafnodes, &mut new.leafnodes) {
        if n.port == Some(0) || n.port == bound.leaf {
            n.port = o.port;
        }
    }
    let listener = |l: &Option<crate::config::nats::LeafnodeOptions>| {
        l.clone().map(|mut l| {
            l.compression = Default::default();
            l.tls = l.tls.as_ref().map(files_only);
            l.remotes = Vec::new();
            l
        })
    };
    if !same(&listener(&old.leafnodes), &listener(&new.leafnodes)) {
        return Err(refuse(
            "LeafNode",
            format!("{:?}", old.leafnodes),
            format!("{:?}", new.leafnodes),
        ));
    }
    let (Some(o), Some(n)) = (&old.leafnodes, &new.leafnodes) else {
        return Ok(());
    };
    super::leaf::check_remotes(&n.remotes)?;
    let fixed = |r: &crate::config::nats::LeafRemote| {
        let mut r = r.clone();
        r.compression = Default::default();
        r.tls = r.tls.as_ref().map(files_only);
        r.disabled = false;
        r
    };
    for nr in &n.remotes {
        let name = super::leaf::remote_name(nr, false);
        let Some(or) = o
            .remotes
            .iter()
            .find(|r| super::leaf::remote_name(r, false) == name)
        else {
            continue;
        };
        if !same(&fixed(or), &fixed(nr)) {
            return Err(ReloadError::Invalid(format!(
                "config reload not supported for LeafNode: remote {}: old={or:?}, new={nr:?}",
                super::leaf::remote_name(nr, true)
            )));
        }
    }
    Ok(())
}

/// Checks the remotes `new` adds to `old` (see [`diff_leafnodes`]): their
/// URLs and credentials files, and that their accounts exist — configured
/// in `new` or, in operator mode, known to `accounts`. Reads files: call
/// on the blocking pool.
fn check_added_remotes(
    old: &NatsOptions,
    new: &NatsOptions,
    accounts: &crate::nats::account::Accounts,
) -> Result<(), ReloadError> {
    let (Some(o), Some(n)) = (&old.leafnodes, &new.leafnodes) else {
        return Ok(());
    };
    let operator = new.auth.operator.is_some();
    let known: Vec<String> = o
        .remotes
        .iter()
        .map(|r| super::leaf::remote_name(r, false))
        .collect();
    for (i, r) in n.remotes.iter().enumerate() {
        if known.contains(&super::leaf::remote_name(r, false)) {
            continue;
        }
        super::leaf::check_remote(i, r, operator)?;
        let Some(a) = &r.account else { continue };
        let defined = a == crate::nats::account::GLOBAL_ACCOUNT
            || a == crate::nats::account::SYSTEM_ACCOUNT
            || new.auth.accounts.iter().any(|c| &c.name == a)
            || (operator && accounts.get(a).is_some());
        if !defined {
            return Err(super::leaf::LeafError::UnknownAccount {
                account: a.clone(),
                what: "remote",
            }
            .into());
        }
    }
    Ok(())
}

/// WebSocket: only its certificate files may change (re-read for new
/// handshakes); turning TLS on or off would change the listener's scheme.
fn diff_websocket(
    old: &NatsOptions,
    new: &mut NatsOptions,
    bound: BoundPorts,
) -> Result<(), ReloadError> {
    // TLS files and the block's own authorization reload (the latter
    // with the server's users: see `diff`).
    let comparable = |w: &crate::config::nats::WebsocketOptions| {
        let mut w = w.clone();
        w.tls = w.tls.map(|_| TlsFiles::default());
        w.auth = None;
        w
    };
    match (&old.websocket, &mut new.websocket) {
        (None, None) => Ok(()),
        (Some(o), Some(n)) => {
            if n.port == 0 || Some(n.port) == bound.websocket {
                n.port = o.port;
            }
            if same(&comparable(o), &comparable(n)) {
                Ok(())
            } else {
                Err(refuse("Websocket", format!("{o:?}"), format!("{n:?}")))
            }
        }
        (o, n) => Err(refuse("Websocket", format!("{o:?}"), format!("{n:?}"))),
    }
}

impl NatsServer {
    /// Applies a new configuration to the running server: returns the
    /// lines to log (`Reloaded: …` per change, then notices about clients),
    /// or why it was refused — in which case nothing changed.
    pub async fn reload(&self, mut new: NatsOptions) -> Result<Vec<String>, ReloadError> {
        let inner = self.inner.clone();
        let _serial = inner.reload_lock.lock().await;
        let cur = inner.live();
        let bound = BoundPorts {
            client: inner.addr.port(),
            cluster: inner.routes.as_ref().map(|r| r.listen.port()),
            leaf: inner
                .leafs
                .as_ref()
                .and_then(|l| l.listen)
                .map(|a| a.port()),
            websocket: inner.ws.as_ref().map(|w| w.addr.port()),
        };
        let mut lines = diff(&cur.opts, &mut new, bound)?;
        // Certificate reads and bcrypt parsing run off the I/O threads. As
        // for clients, the WebSocket, route and leaf TLS files are read
        // again on every reload; unusable ones refuse the reload.
        let template = cur.info.clone();
        let (has_ws, has_routes, has_leafs) = (
            inner.ws.is_some(),
            inner.routes.is_some(),
            inner.leafs.is_some(),
        );
        let old = cur.opts.clone();
        let server = inner.clone();
        let (live, ws_tls, route_tls, leaf_tls) = tokio::task::spawn_blocking(move || {
            check_added_remotes(&old, &new, &server.accounts)?;
            let ws_tls = match &new.websocket {
                Some(w) if has_ws => tls_acceptor(w.tls.as_ref())?,
                _ => None,
            };
            let route_tls = match new.cluster.as_ref().and_then(|c| c.tls.as_ref()) {
                Some(files) if has_routes => Some(super::route::route_tls(files)?),
                _ => None,
            };
            let leaf_tls = match &new.leafnodes {
                Some(lo) if has_leafs => Some(super::leaf::leaf_tls(lo)?),
                _ => None,
            };
            Ok::<_, ReloadError>((Live::build(new, &template)?, ws_tls, route_tls, leaf_tls))
        })
        .await
        .map_err(|e| ReloadError::Join(e.to_string()))??;
        let live = Arc::new(live);
        // New accounts exist before the new users can log into them;
        // removed ones lose their users below. `diff` validated the
        // accounts, so this cannot fail in practice; if it did, nothing
        // has changed yet.
        if !same(&cur.opts.auth.accounts, &live.opts.auth.accounts) {
            inner.update_accounts(&live.opts.auth.accounts, true)?;
        }
        if cur.opts.auth.mappings != live.opts.auth.mappings {
            inner.set_global_mappings(&live.opts.auth.mappings)?;
        }
        // Nothing can fail from here on: swap, then bring clients in line.
        *inner.live.write() = live.clone();
        inner
            .max_payload
            .store(live.opts.max_payload, Ordering::Relaxed);
        if let (Some(ws), Some(t)) = (&inner.ws, ws_tls) {
            ws.set_tls(t);
        }
        if let (Some(r), Some(t)) = (&inner.routes, route_tls) {
            r.set_tls(t);
        }
        if let (Some(r), Some(c)) = (&inner.routes, &live.opts.cluster) {
            lines.extend(r.reconfigure(&inner, c));
        }
        if let (Some(l), Some(o), Some(t)) = (&inner.leafs, &live.opts.leafnodes, leaf_tls) {
            lines.extend(l.reconfigure(&inner, o, t));
        }
        inner.reload_gen.fetch_add(1, Ordering::SeqCst);
        let rechecked = {
            let inner = inner.clone();
            let live = live.clone();
            tokio::task::spawn_blocking(move || recheck_clients(&inner, &live))
                .await
                .map_err(|e| ReloadError::Join(e.to_string()))?
        };
        lines.extend(rechecked);
        // Readers that refreshed between the swap and the re-check take
        // their final permissions at this second bump.
        inner.reload_gen.fetch_add(1, Ordering::SeqCst);
        Ok(lines)
    }
}

/// Client connections (TCP and WebSocket) that have completed CONNECT.
fn connected_clients(inner: &ServerInner) -> Vec<Arc<ClientShared>> {
    let mut v: Vec<Arc<ClientShared>> = inner
        .clients
        .lock()
        .values()
        .filter(|c| c.kind == ClientKind::Tcp && c.connected.load(Ordering::SeqCst))
        .cloned()
        .collect();
    v.sort_by_key(|c| c.id);
    v
}

/// Re-authenticates every connected client against `live` and applies its
/// new permissions; enforces a lowered `max_connections`. Returns the
/// notices to log. May run bcrypt checks: call on the blocking pool.
fn recheck_clients(inner: &Arc<ServerInner>, live: &Live) -> Vec<String> {
    let mut notes = Vec::new();
    let mut survivors = Vec::new();
    for c in connected_clients(inner) {
        notes.extend(recheck_client(inner, &c, live));
        if !c.is_closed() {
            survivors.push(c);
        }
    }
    if let Some(l) = &inner.leafs {
        for c in l.leaves_on_client_users() {
            notes.extend(recheck_leaf(inner, &c, live));
        }
    }
    let max = live.opts.max_connections;
    if survivors.len() > max {
        let over = survivors.len() - max;
        // The newest connections go first.
        for c in survivors.iter().rev().take(over) {
            c.close_with_err(Some("maximum connections exceeded"));
        }
        notes.push(format!(
            "Closed {over} connections to fall within max_connections"
        ));
    }
    notes
}

/// Checks one connected client against `live` (see the module notes):
/// closes it, or stores its new permissions and drops the subscriptions
/// they deny. Returns the notices to log. Idempotent for one `live`.
pub(crate) fn recheck_client(
    inner: &Arc<ServerInner>,
    c: &Arc<ClientShared>,
    live: &Live,
) -> Vec<String> {
    let mut notes = Vec::new();
    if c.is_closed() {
        return notes;
    }
    let Some(mut ca) = c.auth.lock().clone() else {
        return notes;
    };
    if ca.jwt.is_some() {
        // Governed by account claims, which a reload does not change.
        return notes;
    }
    let websocket = c.meta.lock().websocket;
    let auth = live
        .client_authenticator(websocket)
        .map(|a| a.as_ref())
        .filter(|a| a.required());
    let outcome = match auth {
        None => Ok((None, None)),
        Some(a) => {
            // nats-server closes, without an error, a client whose user or
            // nkey is gone ("moved to another account"); it reconnects and
            // meets the new rules.
            let gone = match (&ca.nkey, &ca.user) {
                (Some(k), _) => !a.has_nkey(k),
                (None, Some(u)) => !a.has_user(u) && !a.has_token(),
                (None, None) => false,
            };
            if gone {
                c.close_now();
                return notes;
            }
            a.authenticate_identity(&ca.credentials(), ca.nonce.as_deref(), c.connection_type())
                .map(|o| (o.permissions, o.account))
        }
    };
    // A user moved to another account is closed without an error, as
    // nats-server does; it reconnects into its new account.
    let outcome = match outcome {
        Ok((perms, account)) => {
            let want = account
                .as_deref()
                .unwrap_or(crate::nats::account::GLOBAL_ACCOUNT);
            if inner.account_of(c).name != want {
                c.close_now();
                return notes;
            }
            Ok(perms)
        }
        Err(e) => Err(e),
    };
    let perms = match outcome {
        Ok(p) => p,
        Err(_) => {
            notes.push(format!("authentication error - {}", ca.who()));
            inner.auth_failures.fetch_add(1, Ordering::Relaxed);
            c.close_with_err(Some("Authorization Violation"));
            return notes;
        }
    };
    ca.perms = perms.clone();
    *c.auth.lock() = Some(ca.clone());
    if let Some(p) = perms {
        remove_denied_subs(inner, c, &p, &ca, &mut notes);
    }
    notes
}

/// Checks a leaf that authenticated with the client users: closed with
/// `-ERR 'Authorization Violation'` when its credentials no longer pass,
/// when its user now has permissions (which leaves do not get here, as
/// at connect time) or belongs to another account than the one the leaf
/// is bound to (a connection never changes account). A JWT leaf is
/// checked for revocation only.
fn recheck_leaf(inner: &Arc<ServerInner>, c: &Arc<ClientShared>, live: &Live) -> Vec<String> {
    let Some(ca) = c.auth.lock().clone() else {
        return Vec::new();
    };
    let bound = inner.account_of(c).name.clone();
    if let Some(jwt) = &ca.jwt {
        // A JWT leaf: only a revocation (operator mode) can end it here.
        let why = inner
            .operator
            .as_ref()
            .and_then(|op| op.recheck_user(&bound, jwt));
        if let Some(why) = why {
            c.close_with_err(Some(why));
            return vec![format!("leafnode authentication error - {}", ca.who())];
        }
        return Vec::new();
    }
    let Some(auth) = live.authenticator.as_deref().filter(|a| a.required()) else {
        return Vec::new();
    };
    match auth.authenticate_identity(&ca.credentials(), ca.nonce.as_deref(), "LEAFNODE") {
        // Still the same user, in the account the leaf is bound to, with
        // the permissions it connected with (the leaf enforces those too,
        // from our INFO: on a change it must reconnect to learn them).
        Ok(o)
            if o.permissions.as_deref() == ca.perms.as_deref()
                && o.account
                    .as_deref()
                    .unwrap_or(super::account::GLOBAL_ACCOUNT)
                    == bound =>
        {
            Vec::new()
        }
        Ok(_) | Err(_) => {
            inner.auth_failures.fetch_add(1, Ordering::Relaxed);
            c.close_with_err(Some("Authorization Violation"));
            vec![format!("leafnode authentication error - {}", ca.who())]
        }
    }
}

/// Removes the subscriptions of `c` that `perms` no longer allow.
fn remove_denied_subs(
    inner: &Arc<ServerInner>,
    c: &Arc<ClientShared>,
    perms: &PermissionSet,
    ca: &ConnAuth,
    notes: &mut Vec<String>,
) {
    let mut subs: Vec<_> = c
        .subs
        .lock()
        .values()
        .filter(|s| s.local.is_none())
        .cloned()
        .collect();
    subs.sort_by(|a, b| a.sid.cmp(&b.sid));
    for sub in subs {
        if perms.can_subscribe(&sub.subject, sub.queue.as_deref()) {
            continue;
        }
        inner.remove_subscription(&sub);
        let sid = String::from_utf8_lossy(&sub.sid);
        let (err, note) = match &sub.queue {
            Some(q) => (
                format!(
                    "Permissions Violation for Subscription to {:?} using queue {q:?} (sid {sid:?})",
                    sub.subject
                ),
                format!(
                    "Removed sub {:?} using queue {q:?} (sid {sid:?}) for {} - not authorized",
                    sub.subject,
                    ca.who()
                ),
            ),
            None => (
                format!(
                    "Permissions Violation for Subscription to {:?} (sid {sid:?})",
                    sub.subject
                ),
                format!(
                    "Removed sub {:?} (sid {sid:?}) for {} - not authorized",
                    sub.subject,
                    ca.who()
                ),
            ),
        };
        let mut frame = bytes::BytesMut::new();
        super::proto::encode_err(&mut frame, &err);
        c.send_now(&frame);
        notes.push(note);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::nats::{ClusterOptions, User};

    fn bound() -> BoundPorts {
        BoundPorts {
            client: 4222,
            ..BoundPorts::default()
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(120)), "2m0s");
        assert_eq!(go_duration(Duration::from_secs(30)), "30s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn limits_and_logging_are_reloaded_in_nats_server_order() {
        let old = NatsOptions::default();
        let mut new = NatsOptions {
            max_connections: 100,
            ping_interval: Duration::from_secs(30),
            ping_max: 3,
            max_control_line: 2048,
            write_deadline: Duration::from_secs(3),
            max_payload: 2000,
            debug: true,
            ..NatsOptions::default()
        };
        let lines = diff(&old, &mut new, bound()).unwrap();
        assert_eq!(
            lines,
            [
                "Reloaded: debug = true",
                "Reloaded: max_connections = 100",
                "Reloaded: authorization users",
                "Reloaded: accounts",
                "Reloaded: ping_interval = 30s",
                "Reloaded: ping_max = 3",
                "Reloaded: max_control_line = 2048",
                "Reloaded: max_payload = 2000",
                "Reloaded: write_deadline = 3s",
            ]
        );
    }

    #[test]
    fn listeners_and_fixed_options_are_refused_with_nats_server_texts() {
        let old = NatsOptions::default();
        let mut new = NatsOptions {
            port: 4223,
            ..NatsOptions::default()
        };
        let e = diff(&old, &mut new, bound()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "config reload not supported for Port: old=4222, new=4223"
        );
        // A random port in the new file keeps the bound one.
        let mut new = NatsOptions {
            port: 0,
            ..NatsOptions::default()
        };
        assert!(diff(&old, &mut new, bound()).is_ok());
        assert_eq!(new.port, 4222);
        let mut new = NatsOptions {
            lame_duck_duration: Duration::from_secs(30),
            ..NatsOptions::default()
        };
        assert_eq!(
            diff(&old, &mut new, bound()).unwrap_err().to_string(),
            "config reload not supported for LameDuckDuration: old=2m0s, new=30s"
        );
        let mut new = NatsOptions {
            max_pending: 1_000_000,
            ..NatsOptions::default()
        };
        assert_eq!(
            diff(&old, &mut new, bound()).unwrap_err().to_string(),
            "max_payload (1048576) cannot be higher than max_pending (1000000)"
        );
        let mut new = NatsOptions::default();
        new.auth.no_auth_user = Some("a".into());
        assert_eq!(
            diff(&old, &mut new, bound()).unwrap_err().to_string(),
            "config reload not supported for NoAuthUser: old=, new=a"
        );
        let mut new = NatsOptions {
            server_name: Some("x".into()),
            ..NatsOptions::default()
        };
        assert!(matches!(
            diff(&old, &mut new, bound()),
            Err(ReloadError::NotSupported {
                field: "ServerName",
                ..
            })
        ));
    }

    #[test]
    fn cluster_listen_changes_are_refused() {
        let old = NatsOptions {
            cluster: Some(ClusterOptions {
                host: "127.0.0.1".into(),
                port: 6222,
                ..ClusterOptions::default()
            }),
            ..NatsOptions::default()
        };
        let mut new = old.clone();
        if let Some(c) = &mut new.cluster {
            c.port = 6333;
        }
        assert_eq!(
            diff(&old, &mut new, bound()).unwrap_err().to_string(),
            "config reload not supported for cluster port: old=6222, new=6333"
        );
        let mut same = old.clone();
        assert!(diff(&old, &mut same, bound()).is_ok());
    }

    #[test]
    fn cluster_routes_and_pools_may_change_the_rest_is_refused() {
        let old = NatsOptions {
            cluster: Some(ClusterOptions {
                routes: vec!["nats-route://127.0.0.1:6223".into()],
                ..ClusterOptions::default()
            }),
            ..NatsOptions::default()
        };
        let with = |f: &dyn Fn(&mut ClusterOptions)| {
            let mut n = old.clone();
            if let Some(c) = &mut n.cluster {
                f(c);
            }
            n
        };
        let mut new = with(&|c| c.routes.push("nats-route://127.0.0.1:6224".into()));
        let lines = diff(&old, &mut new, bound()).unwrap();
        assert!(
            lines.iter().any(|l| l == "Reloaded: cluster routes"),
            "{lines:?}"
        );
        assert!(!lines.iter().any(|l| l == "Reloaded: cluster"), "{lines:?}");
        let mut new = with(&|c| c.connect_retries = 3);
        let lines = diff(&old, &mut new, bound()).unwrap();
        assert!(lines.iter().any(|l| l == "Reloaded: cluster"), "{lines:?}");
        let mut new = with(&|c| {
            c.pool_size = 3;
            c.pinned_accounts = vec!["A".into()];
        });
        let lines = diff(&old, &mut new, bound()).unwrap();
        assert!(lines.iter().any(|l| l == "Reloaded: cluster"), "{lines:?}");
        for change in [
            &(|c: &mut ClusterOptions| c.no_advertise = true) as &dyn Fn(&mut ClusterOptions),
            &|c| c.advertise = Some("h:1".into()),
            &|c| {
                c.auth = Some(crate::config::nats::ClusterAuth {
                    user: "r".into(),
                    password: "p".into(),
                })
            },
        ] {
            let lines = diff(&old, &mut with(change), bound()).unwrap();
            assert!(lines.iter().any(|l| l == "Reloaded: cluster"), "{lines:?}");
        }
        let err = diff(
            &old,
            &mut with(&|c| c.advertise = Some("h:port".into())),
            bound(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("invalid Cluster.Advertise value of h:port"),
            "{err}"
        );
        let lines = diff(&old, &mut with(&|c| c.name = Some("other".into())), bound()).unwrap();
        assert!(lines.iter().any(|l| l == "Reloaded: cluster"), "{lines:?}");
        let err = diff(
            &old,
            &mut with(&|c| c.auth_timeout = Duration::from_secs(9)),
            bound(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("config reload not supported for Cluster: "),
            "{err}"
        );
    }

    #[test]
    fn leaf_compression_and_remotes_may_change_the_rest_of_leafnodes_is_refused() {
        use crate::config::nats::{LeafRemote, LeafnodeOptions, S2Compression};
        let old = NatsOptions {
            leafnodes: Some(LeafnodeOptions {
                remotes: vec![LeafRemote {
                    urls: vec!["nats-leaf://127.0.0.1:7422".into()],
                    ..LeafRemote::default()
                }],
                ..LeafnodeOptions::default()
            }),
            ..NatsOptions::default()
        };
        let with = |f: &dyn Fn(&mut LeafnodeOptions)| {
            let mut n = old.clone();
            if let Some(l) = &mut n.leafnodes {
                f(l);
            }
            n
        };
        type Change<'a> = &'a dyn Fn(&mut LeafnodeOptions);
        let allowed: [Change; 5] = [
            &|l| {
                l.compression = S2Compression::Best;
                l.remotes[0].compression = S2Compression::Auto(vec![]);
            },
            &|l| l.remotes[0].disabled = true,
            // Another name: the old remote goes, the new one comes.
            &|l| l.remotes[0].urls.push("nats-leaf://h:1".into()),
            &|l| {
                l.remotes.push(LeafRemote {
                    urls: vec!["nats-leaf://h:2".into()],
                    ..LeafRemote::default()
                })
            },
            &|l| l.remotes.clear(),
        ];
        for change in allowed {
            let mut new = with(change);
            assert!(diff(&old, &mut new, bound()).is_ok(), "{:?}", new.leafnodes);
        }
        let refused: [(Change, &str); 3] = [
            (
                &|l| l.remotes[0].deny_imports = vec!["a".into()],
                "config reload not supported for LeafNode: remote urls=[\"nats-leaf://127.0.0.1:7422\"], account=\"$G\": ",
            ),
            (
                &|l| l.port = Some(7000),
                "config reload not supported for LeafNode: ",
            ),
            (
                &|l| {
                    let r = l.remotes[0].clone();
                    l.remotes.push(r)
                },
                "duplicate remote urls=[\"nats-leaf://127.0.0.1:7422\"], account=\"$G\"",
            ),
        ];
        for (change, want) in refused {
            let mut new = with(change);
            let err = diff(&old, &mut new, bound()).unwrap_err().to_string();
            assert!(err.starts_with(want), "{err}");
        }
    }

    #[test]
    fn route_and_leaf_certificates_may_change_tls_itself_may_not() {
        use crate::config::nats::{LeafnodeOptions, TlsFiles};
        let files = |cert: &str| TlsFiles {
            cert: cert.into(),
            key: format!("{cert}.key").into(),
            ca: Some("ca.pem".into()),
            ..TlsFiles::default()
        };
        let opts = |cluster: Option<TlsFiles>, leaf: Option<TlsFiles>| NatsOptions {
            cluster: Some(ClusterOptions {
                tls: cluster,
                ..ClusterOptions::default()
            }),
            leafnodes: Some(LeafnodeOptions {
                tls: leaf,
                ..LeafnodeOptions::default()
            }),
            ..NatsOptions::default()
        };
        let old = opts(Some(files("a.pem")), Some(files("a.pem")));
        let mut new = opts(Some(files("b.pem")), Some(files("b.pem")));
        assert!(diff(&old, &mut new, bound()).is_ok());
        let verify = TlsFiles {
            verify: true,
            ..files("a.pem")
        };
        for (mut new, field) in [
            (opts(None, Some(files("a.pem"))), "Cluster"),
            (opts(Some(verify.clone()), Some(files("a.pem"))), "Cluster"),
            (opts(Some(files("a.pem")), None), "LeafNode"),
            (opts(Some(files("a.pem")), Some(verify)), "LeafNode"),
        ] {
            let err = diff(&old, &mut new, bound()).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("config reload not supported for {field}: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn accounts_change_while_what_is_fixed_keeps_its_account() {
        use crate::config::nats::AccountConfig;
        let acc = |n: &str| AccountConfig {
            name: n.into(),
            ..Default::default()
        };
        let user = |n: &str, a: &str| User {
            username: n.into(),
            password: "p".into(),
            permissions: None,
            account: Some(a.into()),
        };
        let mut old = NatsOptions::default();
        old.auth.accounts = vec![acc("A"), acc("B")];
        old.auth.users = vec![user("a", "A"), user("b", "B")];
        // A user moves from A to B: accepted.
        let mut moved = old.clone();
        moved.auth.users = vec![user("a", "B"), user("b", "B")];
        assert!(diff(&old, &mut moved, bound()).is_ok());
        // A new account, with a user: accepted.
        let mut more = old.clone();
        more.auth.accounts.push(acc("C"));
        more.auth.users.push(user("c", "C"));
        assert!(diff(&old, &mut more, bound()).is_ok());
        // An account removed with its users: accepted; while a user still
        // names it: refused.
        let mut fewer = old.clone();
        fewer.auth.accounts.retain(|a| a.name != "B");
        fewer.auth.users.retain(|u| u.username != "b");
        assert!(diff(&old, &mut fewer, bound()).is_ok());
        let mut orphan = old.clone();
        orphan.auth.accounts.retain(|a| a.name != "B");
        assert!(diff(&old, &mut orphan, bound()).is_err());
        // The in-process clients' account cannot go away.
        let mut pinned = old.clone();
        pinned.local_account = Some("B".into());
        let mut gone = pinned.clone();
        gone.auth.accounts.retain(|a| a.name != "B");
        gone.auth.users.retain(|u| u.username != "b");
        let e = diff(&pinned, &mut gone, bound()).unwrap_err().to_string();
        assert_eq!(
            e, "account \"B\" cannot be removed: nats.account uses it",
            "{e}"
        );
        // In operator mode accounts come from JWTs: refused naming Accounts.
        let mut op = old.clone();
        op.auth.operator = Some(Default::default());
        let mut op_more = op.clone();
        op_more.auth.accounts.push(acc("C"));
        let e = diff(&op, &mut op_more, bound()).unwrap_err().to_string();
        assert!(
            e.starts_with("config reload not supported for Accounts"),
            "{e}"
        );
        // A user in an account that does not exist: refused.
        let mut unknown = old.clone();
        unknown.auth.users.push(user("c", "Z"));
        assert!(diff(&old, &mut unknown, bound()).is_err());
        // The account of the in-process clients cannot change.
        let mut local = old.clone();
        local.local_account = Some("A".into());
        let e = diff(&old, &mut local, bound()).unwrap_err().to_string();
        assert!(e.contains("LocalAccount"), "{e}");
    }

    #[test]
    fn no_auth_user_may_go_only_with_its_user() {
        let user = |n: &str| User {
            username: n.into(),
            password: "p".into(),
            permissions: None,
            account: None,
        };
        let mut old = NatsOptions::default();
        old.auth.users = vec![user("a"), user("b")];
        old.auth.no_auth_user = Some("a".into());
        let mut keep_user = old.clone();
        keep_user.auth.no_auth_user = None;
        assert!(diff(&old, &mut keep_user, bound()).is_err());
        let mut drop_both = old.clone();
        drop_both.auth.no_auth_user = None;
        drop_both.auth.users = vec![user("b")];
        assert!(diff(&old, &mut drop_both, bound()).is_ok());
    }
}
