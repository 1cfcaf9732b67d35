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
