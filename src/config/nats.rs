//! Options of the embedded NATS server.
//!
//! Defaults follow nats-server 2.x (see `spec/nats.md` §1.1). Every loader
//! (the `nats-server` flag parser, the NATS config file parser, the
//! liftbridge YAML) fills this one struct, so the server never sees where a
//! value came from.

use std::path::PathBuf;
use std::time::Duration;

/// Default client port.
pub const DEFAULT_PORT: u16 = 4222;
/// Default monitoring (HTTP) port.
pub const DEFAULT_HTTP_PORT: u16 = 8222;
/// Default maximum payload (1 MiB).
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;
/// Default maximum control line (4 KiB).
pub const DEFAULT_MAX_CONTROL_LINE: usize = 4096;
/// Default maximum pending outbound bytes per client (64 MiB).
pub const DEFAULT_MAX_PENDING: usize = 64 * 1024 * 1024;
/// Default maximum number of client connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64 * 1024;

/// Everything the embedded NATS server needs to run.
#[derive(Debug, Clone)]
pub struct NatsOptions {
    /// Interface to listen on for clients (`0.0.0.0` by default).
    pub host: String,
    /// Client port; `0` picks a free port (nats-server's `-p -1`).
    pub port: u16,
    /// Monitoring HTTP listener; `None` disables it. Port `0` picks a free port.
    pub http: Option<(String, u16)>,
    /// Server name reported in INFO; `None` uses the server id.
    pub server_name: Option<String>,
    pub max_payload: usize,
    pub max_control_line: usize,
    pub max_pending: usize,
    /// Byte limit of each in-process subscription queue (a recorder's, an
    /// internal request subject's): `nats.recorder.max.pending`. See
    /// `nats::handle` for the policy when one is full.
    pub local_max_pending: usize,
    pub max_connections: usize,
    /// Maximum subscriptions per connection; `0` means unlimited.
    pub max_subscriptions: usize,
    pub ping_interval: Duration,
    pub ping_max: u32,
    pub auth_timeout: Duration,
    pub write_deadline: Duration,
    pub lame_duck_duration: Duration,
    pub lame_duck_grace_period: Duration,
    pub auth: AuthConfig,
    pub tls: Option<TlsFiles>,
    /// Log protocol traces (`-V`/`-DV`).
    pub trace: bool,
    /// Log debug lines (`-D`/`-DV`).
    pub debug: bool,
    /// The cluster (route) listener and routes; `None` = not clustered.
    pub cluster: Option<ClusterOptions>,
    /// The WebSocket client listener; `None` = no WebSocket (there is no
    /// default port, as in nats-server).
    pub websocket: Option<WebsocketOptions>,
    /// Leaf nodes (`leafnodes { … }`): a listener for leaves and remotes
    /// (hubs) to solicit; `None` = no leaf-node support.
    pub leafnodes: Option<LeafnodeOptions>,
    /// The account of the server's in-process clients (the log's
    /// recorders and internal requests): `nats.account`; `None` = `$G`.
    pub local_account: Option<String>,
}

impl Default for NatsOptions {
    fn default() -> Self {
        NatsOptions {
            host: "0.0.0.0".to_string(),
            port: DEFAULT_PORT,
            http: None,
            server_name: None,
            max_payload: DEFAULT_MAX_PAYLOAD,
            max_control_line: DEFAULT_MAX_CONTROL_LINE,
            max_pending: DEFAULT_MAX_PENDING,
            local_max_pending: crate::nats::handle::DEFAULT_LOCAL_MAX_PENDING,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_subscriptions: 0,
            ping_interval: Duration::from_secs(120),
            ping_max: 2,
            auth_timeout: Duration::from_secs(2),
            write_deadline: Duration::from_secs(10),
            lame_duck_duration: Duration::from_secs(120),
            lame_duck_grace_period: Duration::from_secs(10),
            auth: AuthConfig::default(),
            tls: None,
            trace: false,
            debug: false,
            cluster: None,
            websocket: None,
            leafnodes: None,
            local_account: None,
        }
    }
}

/// Client authentication. Several methods may be configured at once, as in
/// nats-server: a client passes if any configured method accepts it.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Users with passwords (plain text or bcrypt hashes starting with `$2`).
    pub users: Vec<User>,
    /// A single token (`authorization { token: … }` or `--auth`).
    pub token: Option<String>,
    /// Users identified by an nkey public key (`U…`).
    pub nkeys: Vec<NkeyUser>,
    /// Permissions applied to token-authenticated clients.
    pub default_permissions: Option<Permissions>,
    /// Name of the user that clients without credentials are mapped to.
    pub no_auth_user: Option<String>,
    /// `accounts { … }`: named accounts with their exports and imports
    /// (their users are in `users`/`nkeys`, tagged with the account).
    /// Empty = only the global account `$G`.
    pub accounts: Vec<AccountConfig>,
    /// Operator (decentralized JWT) mode: trusted operators and the
    /// account resolver. `None` = config-file users only.
    pub operator: Option<OperatorConfig>,
    /// A user's `allowed_connection_types` (upper case), by user name or
    /// nkey; a user not listed may connect in any way.
    pub connection_types: std::collections::HashMap<String, Vec<String>>,
    /// Top-level `mappings`: the global account's subject mappings.
    pub mappings: Vec<MappingConfig>,
    /// `system_account` without operator mode: the configured account
    /// that serves the `$SYS` requests (`None` = `$SYS`).
    pub system_account: Option<String>,
}

/// One subject mapping (`mappings { src: dest }` or with weighted
/// destinations).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MappingConfig {
    /// The subject (or pattern) published to.
    pub src: String,
    /// Where it goes instead.
    pub dests: Vec<MapDest>,
}

/// One destination of a mapping.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapDest {
    /// The destination subject, with its functions (`$1`, `{{…}}`).
    pub subject: String,
    /// Percent of the messages (100 for a plain `src: dest`).
    pub weight: u8,
    /// Only in this cluster (`cluster`).
    pub cluster: Option<String>,
}

/// The connection types a user may be limited to (nats-server's names).
pub const CONNECTION_TYPES: [&str; 7] = [
    "STANDARD",
    "WEBSOCKET",
    "LEAFNODE",
    "LEAFNODE_WS",
    "MQTT",
    "MQTT_WS",
    "IN_PROCESS",
];

/// Operator mode (`operator`, `trusted`, `system_account`, `resolver`,
/// `resolver_preload`): who may sign accounts, and where account JWTs
/// come from. Users are never configured here; they bring a JWT.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorConfig {
    /// Operator JWTs (read from the file when the config named a path).
    pub operators: Vec<String>,
    /// Extra trusted operator public keys (`trusted`).
    pub trusted_keys: Vec<String>,
    /// The system account's public key; `None` = the operator's claim.
    pub system_account: Option<String>,
    /// Where account JWTs come from.
    pub resolver: ResolverConfig,
}

/// The account resolver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolverConfig {
    /// `MEMORY`: the accounts of `resolver_preload` (public key, JWT).
    Memory { preload: Vec<(String, String)> },
    /// `{type: full|cache, dir}`: JWTs stored as `<dir>/<key>.jwt`.
    Dir {
        /// `full` (every account stored, pushes of new ones accepted) or
        /// `cache` (pushes only for accounts already stored).
        full: bool,
        dir: PathBuf,
        /// `allow_delete` (full only): `$SYS.REQ.CLAIMS.DELETE` requests
        /// signed by the operator remove accounts.
        allow_delete: bool,
        /// `hard_delete`: a deleted account's file is removed, not renamed
        /// to `<key>.jwt.deleted`.
        hard_delete: bool,
        /// `limit`: most stored accounts. `None` (or 0) = nats-server's
        /// default: unlimited for `full`, 1,000 for `cache`, which then
        /// evicts its least recently used account to store a new one.
        limit: Option<usize>,
        /// `ttl` (cache): an account not used for this long leaves the
        /// cache (it is looked up again when a user needs it). `None` (or
        /// 0) = when its JWT expires.
        ttl: Option<Duration>,
        /// `interval` (full): how often the stored accounts are compared
        /// with the route peers' (a digest; the JWTs only when they
        /// differ). `None` = nats-server's one minute.
        interval: Option<Duration>,
        /// `timeout`: how long a connect with an account not stored here
        /// waits for a route peer to answer its lookup. `None` =
        /// nats-server's 1.9 s.
        timeout: Option<Duration>,
        /// Accounts of `resolver_preload`, stored at start-up when absent.
        preload: Vec<(String, String)>,
    },
}

impl Default for ResolverConfig {
    fn default() -> Self {
        ResolverConfig::Memory {
            preload: Vec::new(),
        }
    }
}

/// One account of `accounts { NAME { … } }`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountConfig {
    /// The account name (never `$G`).
    pub name: String,
    /// What other accounts may import from this one.
    pub exports: Vec<ExportConfig>,
    /// What this account takes from others.
    pub imports: Vec<ImportConfig>,
    /// Its subject mappings (`mappings`).
    pub mappings: Vec<MappingConfig>,
    /// Its `limits`.
    pub limits: AccountLimitsConfig,
}

/// An account's `limits { max_connections, max_subscriptions,
/// max_payload, max_leafnodes }` (`None` = unlimited, as a negative
/// value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountLimitsConfig {
    /// Client connections bound to the account at once.
    pub max_connections: Option<usize>,
    /// Subscriptions per connection.
    pub max_subscriptions: Option<usize>,
    /// Payload (with headers) per message.
    pub max_payload: Option<usize>,
    /// Leaf connections bound to the account at once.
    pub max_leafnodes: Option<usize>,
}

/// Whether an export or import is a stream (messages flow to the
/// importer) or a service (requests flow to the exporter, replies back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportKind {
    /// `stream`.
    Stream,
    /// `service`.
    Service,
}

/// How many responses a service request may get back through an import
/// (`response_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResponseType {
    /// One response, then the reply mapping is gone (the default).
    #[default]
    Singleton,
    /// Any number, until an empty message or the threshold.
    Stream,
    /// As `Stream` (chunked responses end the same way).
    Chunked,
}

/// `exports [ {stream|service: SUBJECT, accounts: [...]} ]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// Stream or service.
    pub kind: ExportKind,
    /// The exported subject (wildcards allowed).
    pub subject: String,
    /// Accounts allowed to import; empty = public.
    pub accounts: Vec<String>,
    /// Services: how many responses a request may get.
    pub response_type: ResponseType,
    /// Services: how long a reply mapping lives (2 min by default).
    pub response_threshold: Duration,
}

/// Default lifetime of a service import's reply mapping (nats-server's
/// `DEFAULT_SERVICE_EXPORT_RESPONSE_THRESHOLD`).
pub const DEFAULT_RESPONSE_THRESHOLD: Duration = Duration::from_secs(120);

/// `imports [ {stream|service: {account, subject}, prefix|to} ]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportConfig {
    /// Stream or service.
    pub kind: ExportKind,
    /// The exporting account.
    pub account: String,
    /// The subject as the exporter names it.
    pub subject: String,
    /// Streams: the local subject is `prefix.` + the exporter's subject.
    pub prefix: Option<String>,
    /// Local subject (streams: remap; services: what local clients
    /// publish to, default the exported subject).
    pub to: Option<String>,
}

impl AuthConfig {
    /// Whether clients must authenticate (`auth_required` in INFO).
    pub fn required(&self) -> bool {
        !self.users.is_empty()
            || self.token.is_some()
            || !self.nkeys.is_empty()
            || self.operator.is_some()
    }
}

/// A user/password entry.
#[derive(Debug, Clone, Default)]
pub struct User {
    pub username: String,
    /// Plain text, or a bcrypt hash (`$2a$`, `$2b$`, `$2y$`).
    pub password: String,
    pub permissions: Option<Permissions>,
    /// The account the user belongs to; `None` = the global account `$G`.
    pub account: Option<String>,
}

/// An nkey-authenticated user.
#[derive(Debug, Clone, Default)]
pub struct NkeyUser {
    /// Public user nkey (starts with `U`).
    pub nkey: String,
    pub permissions: Option<Permissions>,
    /// The account the user belongs to; `None` = the global account `$G`.
    pub account: Option<String>,
}

/// Publish and subscribe rules of one user.
#[derive(Debug, Clone, Default)]
pub struct Permissions {
    pub publish: PermissionRules,
    pub subscribe: PermissionRules,
    /// `allow_responses`: the user may also publish to the reply subjects
    /// of messages it received (and, with no publish allow list, only
    /// there).
    pub responses: Option<ResponsePermission>,
}

/// How many answers a user with `allow_responses` may publish to a reply
/// subject it received, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsePermission {
    /// `None` = any number.
    pub max_msgs: Option<u32>,
    /// `None` = no time limit.
    pub expires: Option<Duration>,
}

impl Default for ResponsePermission {
    /// nats-server's defaults: one response within two minutes.
    fn default() -> Self {
        ResponsePermission {
            max_msgs: Some(1),
            expires: Some(Duration::from_secs(120)),
        }
    }
}

impl ResponsePermission {
    /// From nats-server's numbers (a config's `max`, a JWT's `max`/`ttl`):
    /// 0 = the default, negative = no limit.
    pub fn from_limits(max: i64, expires_nanos: i64) -> ResponsePermission {
        let d = ResponsePermission::default();
        ResponsePermission {
            max_msgs: match max {
                0 => d.max_msgs,
                m if m < 0 => None,
                m => Some(u32::try_from(m).unwrap_or(u32::MAX)),
            },
            expires: match expires_nanos {
                0 => d.expires,
                n if n < 0 => None,
                n => Some(Duration::from_nanos(n as u64)),
            },
        }
    }
}

/// Allow and deny lists of subjects (wildcards allowed). An empty allow
/// list allows everything not denied; deny always wins.
#[derive(Debug, Clone, Default)]
pub struct PermissionRules {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

/// PEM files for TLS on a listener.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CA bundle used to verify client certificates.
    pub ca: Option<PathBuf>,
    /// Require and verify client certificates (mTLS).
    pub verify: bool,
    /// `min_version`, `cipher_suites`, `curve_preferences`.
    pub params: crate::tls::TlsParams,
    /// `handshake_first`: the TLS handshake comes before INFO. `Some(ZERO)`:
    /// always; `Some(d)` (client listener only): unless the client has sent
    /// nothing after `d` (a client that waits for INFO), then INFO first.
    /// On leaf node links both ends must set it.
    pub handshake_first: Option<Duration>,
}

/// The `websocket { … }` block: NATS clients over WebSocket
/// (`spec/nats-parity.md` §4).
#[derive(Debug, Clone)]
pub struct WebsocketOptions {
    /// Interface of the WebSocket listener (`0.0.0.0` by default).
    pub host: String,
    /// Port; `0` picks a free port (`-1` in the file).
    pub port: u16,
    /// `host:port` advertised instead of the listener address.
    pub advertise: Option<String>,
    /// TLS (`wss://`); `None` only with `no_tls: true`.
    pub tls: Option<TlsFiles>,
    /// Offer permessage-deflate to clients that ask for it.
    pub compression: bool,
    /// Refuse an `Origin` whose scheme, host and port differ from the
    /// request's `Host` (a missing `Origin` passes).
    pub same_origin: bool,
    /// Origins accepted (a missing `Origin` passes); empty = any.
    pub allowed_origins: Vec<WsOrigin>,
    /// Time a client has to complete the HTTP upgrade. nats-server has no
    /// default; we bound it (10 s) so a socket that never sends its request
    /// cannot be held open forever.
    pub handshake_timeout: Duration,
    /// WebSocket clients' own authorization (`authorization { user,
    /// password | token }` and `no_auth_user` in the block), in place of
    /// the server's single user, token and `no_auth_user`.
    pub auth: Option<WsAuth>,
    /// `jwt_cookie`, `user_cookie`, `pass_cookie`, `token_cookie`: names
    /// of cookies of the upgrade request whose values stand in for a
    /// CONNECT's `jwt`, `user`, `pass` and `auth_token` when it has none.
    pub cookies: WsCookieNames,
    /// `headers`: extra headers of the `101` answer, sorted by name.
    pub headers: Vec<(String, String)>,
    /// `ping_interval`: the PING interval of WebSocket clients (else the
    /// server's).
    pub ping_interval: Option<Duration>,
}

/// Names of the cookies that carry credentials (empty: not read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WsCookieNames {
    pub jwt: String,
    pub user: String,
    pub pass: String,
    pub token: String,
}

/// The `websocket` block's authorization override.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct WsAuth {
    pub username: Option<String>,
    pub password: String,
    pub token: Option<String>,
    pub no_auth_user: Option<String>,
    /// `timeout`: how long a WebSocket client has to authenticate (else
    /// the server's `authorization { timeout }`).
    pub timeout: Option<Duration>,
}

impl std::fmt::Debug for WsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets stay out of logs.
        f.debug_struct("WsAuth")
            .field("username", &self.username)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("no_auth_user", &self.no_auth_user)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl WsAuth {
    /// The authorization WebSocket clients meet, from the server's
    /// `auth`: with a user or token here, only that one; with only
    /// `no_auth_user` here, the server's users with that default user.
    pub fn apply(&self, auth: &AuthConfig) -> AuthConfig {
        let mut a = auth.clone();
        if self.username.is_some() || self.token.is_some() {
            a.users = self
                .username
                .iter()
                .map(|u| User {
                    username: u.clone(),
                    password: self.password.clone(),
                    permissions: None,
                    account: None,
                })
                .collect();
            a.token = self.token.clone();
            a.nkeys = Vec::new();
        }
        a.no_auth_user = self.no_auth_user.clone();
        a
    }
}

/// Default bound on the WebSocket HTTP upgrade.
pub const DEFAULT_WS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for WebsocketOptions {
    fn default() -> Self {
        WebsocketOptions {
            host: "0.0.0.0".into(),
            port: 0,
            advertise: None,
            tls: None,
            compression: false,
            same_origin: false,
            allowed_origins: Vec::new(),
            handshake_timeout: DEFAULT_WS_HANDSHAKE_TIMEOUT,
            auth: None,
            cookies: WsCookieNames::default(),
            headers: Vec::new(),
            ping_interval: None,
        }
    }
}

/// One allowed origin: scheme, lower-cased host and port (the scheme's
/// default when the URL has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsOrigin {
    /// `http` or `https`.
    pub scheme: String,
    /// Host, lower-cased, without brackets for IPv6.
    pub host: String,
    /// Port (80/443 when not written).
    pub port: u16,
    /// The text as configured (for `/varz`).
    pub text: String,
}

/// Parses an origin URL (`https://app.example.com[:port][/…]`); the error
/// is the reason nats-server gives after `unable to parse allowed origin`.
pub fn parse_ws_origin(s: &str) -> Result<WsOrigin, &'static str> {
    let (scheme, rest) = s
        .split_once("://")
        .ok_or("allowed origins must be absolute URLs with http or https scheme")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err("allowed origins must be absolute URLs with http or https scheme"),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = split_host_port(authority).ok_or("invalid port")?;
    if host.is_empty() {
        return Err("host is required");
    }
    Ok(WsOrigin {
        scheme,
        host: host.to_ascii_lowercase(),
        port: port.unwrap_or(default_port),
        text: s.to_string(),
    })
}

/// Splits `host`, `host:port`, `[v6]` or `[v6]:port`.
pub fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(p) => Some((h, Some(p.parse().ok()?))),
            None if after.is_empty() => Some((h, None)),
            None => None,
        };
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Some((h, Some(p.parse().ok()?))),
        _ => Some((s, None)),
    }
}

/// Default cluster (route) port.
pub const DEFAULT_CLUSTER_PORT: u16 = 6222;

/// The cluster block (`cluster { … }`, `--cluster`, `nats.cluster.*`):
/// where this server listens for routes and which routes it solicits.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Cluster name; `None` = dynamic (a random name, replaced by a
    /// configured peer's name, as nats-server does).
    pub name: Option<String>,
    /// Interface of the route listener.
    pub host: String,
    /// Route port; `0` picks a free port.
    pub port: u16,
    /// Routes to solicit (`nats-route://[user:pass@]host:port`).
    pub routes: Vec<String>,
    /// `host:port` advertised to peers instead of the listener address.
    pub advertise: Option<String>,
    /// Do not add peers' client URLs to our clients' `connect_urls`.
    pub no_advertise: bool,
    /// Retries of an implicit (gossiped) route; configured routes retry
    /// forever (as nats-server).
    pub connect_retries: u32,
    /// Credentials peers must present (and that we present when a route
    /// URL carries none).
    pub auth: Option<ClusterAuth>,
    /// Time a peer has to send CONNECT.
    pub auth_timeout: Duration,
    /// TLS on routes (both accepted and solicited).
    pub tls: Option<TlsFiles>,
    /// Route connections per peer (`pool_size`, at most
    /// [`MAX_ROUTE_POOL_SIZE`]): `0` = one unpooled route that carries
    /// every account (nats-server's `pool_size: -1`, our default); `n` =
    /// a pool of `n`, each account on the connection its name hashes to.
    pub pool_size: usize,
    /// `accounts`: accounts given a route connection of their own to each
    /// pooling peer (nats-server's pinned accounts; needs a pool).
    pub pinned_accounts: Vec<String>,
    /// `compression`: S2 compression of routes, negotiated with each peer.
    pub compression: S2Compression,
}

/// `compression` of `cluster {}`, `leafnodes {}` and leaf remotes:
/// nats-server's S2 compression modes. Each connection agrees on it with
/// its peer at connect time (`nats::route`, `nats::leaf`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum S2Compression {
    /// No compression; our INFO carries no `compression` (a peer sees a
    /// server without it).
    #[default]
    Off,
    /// Compress only if the peer asks, at the peer's level.
    Accept,
    Fast,
    Better,
    Best,
    /// A level from the round-trip time measured when the route connects:
    /// up to the first threshold uncompressed, then fast, better, best.
    /// Zero thresholds skip their level.
    Auto(Vec<Duration>),
}

impl S2Compression {
    /// nats-server's default `s2_auto` thresholds.
    pub fn default_thresholds() -> Vec<Duration> {
        vec![
            Duration::from_millis(10),
            Duration::from_millis(50),
            Duration::from_millis(100),
        ]
    }

    /// A mode by one of the names nats-server accepts (`None`: unknown).
    pub fn from_name(name: &str) -> Option<S2Compression> {
        Some(match name.to_ascii_lowercase().as_str() {
            "off" | "disabled" | "false" | "not supported" | "not_supported" => S2Compression::Off,
            "accept" => S2Compression::Accept,
            "on" | "enabled" | "true" | "fast" | "s2_fast" => S2Compression::Fast,
            "better" | "s2_better" => S2Compression::Better,
            "best" | "s2_best" => S2Compression::Best,
            "auto" | "s2_auto" => S2Compression::Auto(S2Compression::default_thresholds()),
            _ => return None,
        })
    }

    /// The mode as nats-server names it in INFO (`None` when off).
    pub fn name(&self) -> Option<&'static str> {
        match self {
            S2Compression::Off => None,
            S2Compression::Accept => Some("accept"),
            S2Compression::Fast => Some("s2_fast"),
            S2Compression::Better => Some("s2_better"),
            S2Compression::Best => Some("s2_best"),
            S2Compression::Auto(_) => Some("s2_auto"),
        }
    }
}

/// Largest `pool_size` accepted.
pub const MAX_ROUTE_POOL_SIZE: usize = 32;

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            name: None,
            host: "0.0.0.0".into(),
            port: DEFAULT_CLUSTER_PORT,
            routes: Vec::new(),
            advertise: None,
            no_advertise: false,
            connect_retries: 0,
            auth: None,
            auth_timeout: Duration::from_secs(2),
            tls: None,
            pool_size: 0,
            pinned_accounts: Vec::new(),
            compression: S2Compression::Off,
        }
    }
}

/// Default leaf-node port (nats-server's `DEFAULT_LEAFNODE_PORT`), filled
/// into remote URLs that lack a port.
pub const DEFAULT_LEAFNODE_PORT: u16 = 7422;

/// The leaf-node block (`leafnodes { … }`, `nats.leafnodes.*`): a listener
/// that accepts leaves (we are their hub) and remotes we solicit (we are a
/// leaf of each). Every leaf connection is bound to one local account:
/// a remote's `account`, or on the hub side the account of the user the
/// leaf authenticated as (`$G` by default).
#[derive(Debug, Clone)]
pub struct LeafnodeOptions {
    /// Interface of the leaf listener.
    pub host: String,
    /// Leaf port: `None` = no listener (remotes only); `Some(0)` picks a
    /// free port.
    pub port: Option<u16>,
    /// `host:port` advertised to leaves (`leafnode_urls`) instead of the
    /// listener address.
    pub advertise: Option<String>,
    /// Advertise no URL to leaves.
    pub no_advertise: bool,
    /// Users a leaf may authenticate as (`authorization { user, password,
    /// account }` or `users [...]`). Empty: the client users apply (as
    /// nats-server).
    pub users: Vec<LeafUser>,
    /// `authorization { account }` without a user: the account of leaves
    /// when no authentication is required (`None` = `$G`).
    pub account: Option<String>,
    /// Time a leaf has to send CONNECT.
    pub auth_timeout: Duration,
    /// TLS on the leaf listener.
    pub tls: Option<TlsFiles>,
    /// Delay before reconnecting a remote (plus a random jitter below it).
    pub reconnect: Duration,
    /// Hubs to solicit.
    pub remotes: Vec<LeafRemote>,
    /// `compression` of the leaf listener (agreed with each leaf).
    pub compression: S2Compression,
}

impl Default for LeafnodeOptions {
    fn default() -> Self {
        LeafnodeOptions {
            host: "0.0.0.0".into(),
            port: None,
            advertise: None,
            no_advertise: false,
            users: Vec::new(),
            account: None,
            auth_timeout: Duration::from_secs(2),
            tls: None,
            reconnect: Duration::from_secs(1),
            remotes: Vec::new(),
            compression: S2Compression::Off,
        }
    }
}

/// One remote (hub) a leaf connection is solicited to.
#[derive(Debug, Clone, Default)]
pub struct LeafRemote {
    /// `nats-leaf://[user:pass@]host[:port]` URLs (also `nats://`,
    /// `tls://`; or all `ws://`/`wss://` for a hub's WebSocket listener),
    /// tried in turn.
    pub urls: Vec<String>,
    /// TLS towards the hub: the CA that verifies it (`ca`), and an optional
    /// client certificate (`cert`/`key`). Also used when the hub's INFO
    /// says `tls_required` or the URL scheme is `tls://`.
    pub tls: Option<TlsFiles>,
    /// The local account the connection is bound to (`account`/`local`);
    /// `None` = `$G`.
    pub account: Option<String>,
    /// How the leaf authenticates beyond a URL's `user:pass@`.
    pub auth: LeafRemoteAuth,
    /// Subjects whose messages from the hub are not delivered here and in
    /// which we announce no interest (a local subscribe deny); also sent to
    /// the hub as `deny_pub` in CONNECT.
    pub deny_imports: Vec<String>,
    /// Subjects whose local messages do not go to the hub (a local publish
    /// deny).
    pub deny_exports: Vec<String>,
    /// `compression` towards the hub (agreed with it).
    pub compression: S2Compression,
    /// `disabled`: configured but not solicited (a reload may turn it on
    /// or off).
    pub disabled: bool,
    /// `no_randomize`: the URLs are tried in the configured order (else
    /// from a random one).
    pub no_randomize: bool,
    /// `ignore_discovered_servers`: the `leafnode_urls` a hub announces
    /// (its cluster's other leaf listeners) are not added to `urls`.
    pub ignore_discovered_servers: bool,
    /// `ws_compression` (`ws://`/`wss://` URLs): ask the hub for
    /// permessage-deflate.
    pub ws_compression: bool,
    /// `ws_no_masking` (`ws://`/`wss://` URLs): ask the hub to accept
    /// unmasked frames from us (`Nats-No-Masking`).
    pub ws_no_masking: bool,
    /// `first_info_timeout`: how long the hub has to send its first INFO
    /// (else 5 s).
    pub first_info_timeout: Option<Duration>,
    /// `dial_timeout`: how long a TCP connect may take (else 5 s).
    pub dial_timeout: Option<Duration>,
    /// `proxy`: an HTTP proxy the `ws://`/`wss://` URLs are reached
    /// through (an HTTP `CONNECT` tunnel).
    pub proxy: Option<LeafProxy>,
}

/// A remote's HTTP proxy (`proxy { url, username, password, timeout }`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct LeafProxy {
    /// `host:port` of the proxy (from an `http://` or `https://` URL;
    /// spoken to in plain HTTP, as nats-server does).
    pub hostport: String,
    /// The URL as configured (for messages).
    pub url: String,
    /// Basic credentials (both or neither).
    pub username: String,
    pub password: String,
    /// Bound on the tunnel's setup (else 5 s).
    pub timeout: Option<Duration>,
}

impl std::fmt::Debug for LeafProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs.
        f.debug_struct("LeafProxy")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A remote's credentials (`credentials` or `nkey`/`seed`).
#[derive(Clone, Default, PartialEq, Eq)]
pub enum LeafRemoteAuth {
    /// None (or only the URL's user and password).
    #[default]
    None,
    /// A creds file (user JWT + nkey seed): CONNECT carries `jwt` and the
    /// hub's nonce signed with the seed. Read at each connection attempt,
    /// so a rotated file is picked up.
    Credentials(PathBuf),
    /// A user nkey seed: CONNECT carries its public key and the signature.
    Seed(String),
}

impl std::fmt::Debug for LeafRemoteAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The seed stays out of logs.
        match self {
            LeafRemoteAuth::None => f.write_str("None"),
            LeafRemoteAuth::Credentials(p) => f.debug_tuple("Credentials").field(p).finish(),
            LeafRemoteAuth::Seed(_) => f.write_str("Seed(<hidden>)"),
        }
    }
}

/// A user a leaf may authenticate as on our leaf listener.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct LeafUser {
    pub user: String,
    pub password: String,
    /// The account its leaf connections are bound to (`None` = `$G`).
    pub account: Option<String>,
}

impl std::fmt::Debug for LeafUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs.
        f.debug_struct("LeafUser")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .field("account", &self.account)
            .finish()
    }
}

/// A parsed leaf remote URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafUrl {
    /// User and password from the URL (password empty when absent).
    pub creds: Option<(String, String)>,
    /// `host:port` to dial.
    pub hostport: String,
    /// The scheme asks for TLS (`tls://`, `wss://`).
    pub tls: bool,
    /// The hub is reached over WebSocket (`ws://`, `wss://`).
    pub ws: bool,
    /// The URL's path (WebSocket only; `/leafnode` is appended to it).
    pub path: String,
}

/// Parses a leaf remote URL. Accepted schemes: `nats-leaf`, `nats`, `tls`
/// (or none), where a missing port is 7422, and `ws`/`wss` (a hub's
/// WebSocket listener), where it is 80/443 and a path may follow.
pub fn parse_leaf_url(url: &str) -> Option<LeafUrl> {
    let url = url.trim();
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => (String::new(), url),
    };
    let (tls, ws, default_port) = match scheme.as_str() {
        "" | "nats-leaf" | "nats" => (false, false, DEFAULT_LEAFNODE_PORT),
        "tls" => (true, false, DEFAULT_LEAFNODE_PORT),
        "ws" => (false, true, 80),
        "wss" => (true, true, 443),
        _ => return None,
    };
    let (rest, path) = match rest.find('/') {
        Some(i) if ws => (&rest[..i], rest[i..].trim_end_matches('/').to_string()),
        _ => (rest.trim_end_matches('/'), String::new()),
    };
    let (creds, hp) = match rest.rsplit_once('@') {
        Some((ui, hp)) => {
            let (u, p) = ui.split_once(':').unwrap_or((ui, ""));
            (Some((u.to_string(), p.to_string())), hp)
        }
        None => (None, rest),
    };
    if hp.is_empty() || hp.contains('/') || hp.contains(char::is_whitespace) {
        return None;
    }
    let has_port = match hp.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && (!h.contains(':') || h.ends_with(']')) => {
            p.parse::<u16>().ok()?;
            true
        }
        _ => false,
    };
    let hostport = if has_port {
        hp.to_string()
    } else {
        format!("{hp}:{default_port}")
    };
    Some(LeafUrl {
        creds,
        hostport,
        tls,
        ws,
        path,
    })
}

/// Route credentials (`cluster { authorization { user, password } }`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClusterAuth {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for ClusterAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs.
        f.debug_struct("ClusterAuth")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// Parses a cluster listen URL or address (`nats://host:port`,
/// `nats-route://host:port`, `host:port`, `:port`, `port`) into host and
/// port. `-1` as port means "any free port" (0).
pub fn parse_cluster_listen(s: &str) -> Option<(String, u16)> {
    let s = s.trim();
    let s = s.split_once("://").map_or(s, |(_, rest)| rest);
    let s = s.trim_end_matches('/');
    let s = s.rsplit_once('@').map_or(s, |(_, hp)| hp);
    let parse_port = |p: &str| -> Option<u16> {
        if p == "-1" {
            Some(0)
        } else {
            p.parse().ok()
        }
    };
    if let Some(p) = parse_port(s) {
        return Some(("0.0.0.0".into(), p));
    }
    let (h, p) = s.rsplit_once(':')?;
    let h = h.trim_start_matches('[').trim_end_matches(']');
    let h = if h.is_empty() { "0.0.0.0" } else { h };
    Some((h.to_string(), parse_port(p)?))
}

#[cfg(test)]
mod cluster_tests {
    use super::{parse_cluster_listen, parse_leaf_url};

    #[test]
    fn leaf_urls() {
        let u = |creds: Option<(&str, &str)>, hp: &str, tls: bool| {
            Some(super::LeafUrl {
                creds: creds.map(|(a, b)| (a.to_string(), b.to_string())),
                hostport: hp.to_string(),
                tls,
                ws: false,
                path: String::new(),
            })
        };
        let ws = |hp: &str, tls: bool, path: &str| {
            Some(super::LeafUrl {
                creds: None,
                hostport: hp.to_string(),
                tls,
                ws: true,
                path: path.to_string(),
            })
        };
        assert_eq!(
            parse_leaf_url("nats-leaf://u:p@127.0.0.1:7000"),
            u(Some(("u", "p")), "127.0.0.1:7000", false)
        );
        assert_eq!(
            parse_leaf_url("tls://hub.example.com"),
            u(None, "hub.example.com:7422", true)
        );
        assert_eq!(parse_leaf_url("h:1/"), u(None, "h:1", false));
        assert_eq!(parse_leaf_url("ws://h:1"), ws("h:1", false, ""));
        assert_eq!(
            parse_leaf_url("wss://hub.example.com"),
            ws("hub.example.com:443", true, "")
        );
        assert_eq!(parse_leaf_url("ws://h/edge/"), ws("h:80", false, "/edge"));
        assert_eq!(parse_leaf_url("nats://h:1/x"), None, "a path only with ws");
        assert_eq!(parse_leaf_url("http://h:1"), None);
        assert_eq!(parse_leaf_url("nats://h:notaport"), None);
        assert_eq!(parse_leaf_url("nats://"), None);
    }

    #[test]
    fn cluster_listen_forms() {
        let p = |s| parse_cluster_listen(s);
        assert_eq!(p("nats://127.0.0.1:6222"), Some(("127.0.0.1".into(), 6222)));
        assert_eq!(p("nats-route://h:1/"), Some(("h".into(), 1)));
        assert_eq!(p(":7000"), Some(("0.0.0.0".into(), 7000)));
        assert_eq!(p("7000"), Some(("0.0.0.0".into(), 7000)));
        assert_eq!(p("127.0.0.1:-1"), Some(("127.0.0.1".into(), 0)));
        assert_eq!(p("nohost"), None);
        assert_eq!(p("h:notaport"), None);
    }
}
