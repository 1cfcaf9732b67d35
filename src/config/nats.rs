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
}

impl AuthConfig {
    /// Whether clients must authenticate (`auth_required` in INFO).
    pub fn required(&self) -> bool {
        !self.users.is_empty() || self.token.is_some() || !self.nkeys.is_empty()
    }
}

/// A user/password entry.
#[derive(Debug, Clone, Default)]
pub struct User {
    pub username: String,
    /// Plain text, or a bcrypt hash (`$2a$`, `$2b$`, `$2y$`).
    pub password: String,
    pub permissions: Option<Permissions>,
}

/// An nkey-authenticated user.
#[derive(Debug, Clone, Default)]
pub struct NkeyUser {
    /// Public user nkey (starts with `U`).
    pub nkey: String,
    pub permissions: Option<Permissions>,
}

/// Publish and subscribe rules of one user.
#[derive(Debug, Clone, Default)]
pub struct Permissions {
    pub publish: PermissionRules,
    pub subscribe: PermissionRules,
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
}

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
        }
    }
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
    use super::parse_cluster_listen;

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
