//! The Liftbridge configuration: `liftbridge.yaml`, `LIFTBRIDGE_*` environment
//! variables and Liftbridge's command-line flags, merged into one typed tree.
//!
//! Precedence: defaults (in code) < file (`--config/-c`) < environment <
//! flags. Every key of Liftbridge's configuration is known here (see `KEYS`),
//! plus our own: `nats.listen`, `nats.cluster.*`, `nats.websocket.*`,
//! `http.listen`, `http.auth.*`, `http.tls.*`,
//! `store.sync`, `store.sync.interval`, `store.cache.size`.
//!
//! File syntax: keys may be written flat (`streams.retention.max.age: 24h`),
//! nested (`streams: { retention: { max: { age: 24h } } }`) or mixed, including
//! dotted keys inside a nested block (`cursors: { stream.partitions: 1 }`):
//! the loader flattens the YAML tree by joining map keys with dots. Durations
//! are Go strings (`24h`, `1m30s`, `500ms`); a bare number is nanoseconds, as
//! Go's duration cast reads it. Lists (`nats.servers`,
//! `clustering.raft.bootstrap.peers`) are YAML sequences or comma-separated
//! strings.
//!
//! Environment: for every key `a.b.c`, `LIFTBRIDGE_A_B_C` overrides it
//! (e.g. `LIFTBRIDGE_STREAMS_RETENTION_MAX_AGE=24h`). Unlike Liftbridge this
//! works for keys absent from the file too.
//!
//! Errors: an unknown key is an error naming the key and where it came from;
//! a bad value names the key, the value and the reason. Loading never panics.
//!
//! Deviations from Liftbridge, on purpose: embedded NATS is on by default;
//! the default data directory is `./data`; `telemetry.*` is accepted but
//! nothing is ever sent, so `telemetry.enabled` defaults to false.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde_yaml::Value;

/// Every configuration key, in file order of the example config.
pub const KEYS: &[&str] = &[
    "listen",
    "host",
    "port",
    "data.dir",
    "metadata.cache.max.age",
    "batch.max.messages",
    "batch.max.time",
    "logging.level",
    "logging.recovery",
    "logging.raft",
    "logging.nats",
    "tls.key",
    "tls.cert",
    "tls.client.auth.enabled",
    "tls.client.auth.ca",
    "tls.client.authz.enabled",
    "tls.client.authz.model",
    "tls.client.authz.policy",
    "nats.servers",
    "nats.user",
    "nats.password",
    "nats.tls.cert",
    "nats.tls.key",
    "nats.tls.ca",
    "nats.embedded",
    "nats.embedded.config",
    "nats.listen",
    "nats.cluster.name",
    "nats.cluster.listen",
    "nats.cluster.routes",
    "nats.cluster.advertise",
    "nats.cluster.auth.user",
    "nats.cluster.auth.password",
    "nats.cluster.tls.cert",
    "nats.cluster.tls.key",
    "nats.cluster.tls.ca",
    "nats.cluster.pool_size",
    "nats.cluster.compression",
    "nats.websocket.listen",
    "nats.websocket.no_tls",
    "nats.websocket.tls.cert",
    "nats.websocket.tls.key",
    "nats.websocket.compression",
    "nats.websocket.same_origin",
    "nats.websocket.allowed_origins",
    "nats.websocket.handshake_timeout",
    "nats.leafnodes.listen",
    "nats.leafnodes.advertise",
    "nats.leafnodes.remotes",
    "nats.leafnodes.reconnect",
    "nats.recorder.max.pending",
    "nats.account",
    "nats.leafnodes.auth.user",
    "nats.leafnodes.auth.password",
    "nats.leafnodes.tls.cert",
    "nats.leafnodes.tls.key",
    "nats.leafnodes.tls.ca",
    "nats.leafnodes.remote.tls.ca",
    "http.listen",
    "http.auth.token",
    "http.auth.username",
    "http.auth.password",
    "http.auth.open_metrics",
    "http.auth.open_reads",
    "http.tls.cert",
    "http.tls.key",
    "store.sync",
    "store.sync.interval",
    "store.cache.size",
    "streams.retention.max.bytes",
    "streams.retention.max.messages",
    "streams.retention.max.age",
    "streams.cleaner.interval",
    "streams.segment.max.bytes",
    "streams.segment.max.age",
    "streams.compact.enabled",
    "streams.compact.max.goroutines",
    "streams.auto.pause.time",
    "streams.auto.pause.disable.if.subscribers",
    "streams.concurrency.control",
    "streams.encryption",
    "clustering.server.id",
    "clustering.namespace",
    "clustering.raft.snapshot.retain",
    "clustering.raft.snapshot.threshold",
    "clustering.raft.cache.size",
    "clustering.raft.bootstrap.seed",
    "clustering.raft.bootstrap.peers",
    "clustering.raft.max.quorum.size",
    "clustering.raft.heartbeat.interval",
    "clustering.raft.election.timeout",
    "clustering.replica.max.lag.time",
    "clustering.replica.max.leader.timeout",
    "clustering.replica.max.idle.wait",
    "clustering.replica.fetch.timeout",
    "clustering.min.insync.replicas",
    "clustering.replication.max.bytes",
    "activity.stream.enabled",
    "activity.stream.publish.timeout",
    "activity.stream.publish.ack.policy",
    "cursors.stream.partitions",
    "cursors.stream.replication.factor",
    "cursors.stream.auto.pause.time",
    "groups.consumer.timeout",
    "groups.coordinator.timeout",
    "telemetry.enabled",
    "telemetry.interval.seconds",
];

/// The environment variable that overrides `key`.
pub fn env_var_name(key: &str) -> String {
    format!("LIFTBRIDGE_{}", key.to_ascii_uppercase().replace('.', "_"))
}

/// Errors of loading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid YAML.
    #[error("parsing config file {path}: {source}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_yaml::Error,
    },
    /// The file is valid YAML but not a mapping of keys, or a key is not a scalar.
    #[error("config file {path}: {reason}")]
    Shape {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A key that does not exist.
    #[error("unknown configuration key {key:?} in {origin}")]
    UnknownKey {
        /// The (flattened) key.
        key: String,
        /// Where it came from (file path).
        origin: String,
    },
    /// A value that does not parse or is out of range.
    #[error("invalid value {value:?} for {key} (from {origin}): {reason}")]
    BadValue {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// Where it came from (file path, environment variable, flag).
        origin: String,
        /// Why it is rejected.
        reason: String,
    },
}

/// Liftbridge's command-line flags (plus `--nats-port` and `--http-port`).
/// Each overrides the matching configuration key.
#[derive(Debug, Clone, Default, Args)]
pub struct LiftbridgeFlags {
    /// Configuration file (YAML).
    #[arg(short = 'c', long = "config")]
    pub config: Option<PathBuf>,
    /// Data directory (`data.dir`; default ./data).
    #[arg(short = 'd', long = "data-dir")]
    pub data_dir: Option<PathBuf>,
    /// gRPC API port (`port`; default 9292).
    #[arg(short = 'p', long = "port")]
    pub port: Option<u16>,
    /// Logging level: trace, debug, info, warn, error (`logging.level`).
    #[arg(short = 'l', long = "level")]
    pub level: Option<String>,
    /// Run the embedded NATS server (`nats.embedded`; on by default here).
    #[arg(short = 'e', long = "embedded-nats", num_args = 0..=1, default_missing_value = "true")]
    pub embedded_nats: Option<bool>,
    /// NATS configuration file for the embedded server; implies embedded.
    #[arg(long = "embedded-nats-config", visible_alias = "nc")]
    pub embedded_nats_config: Option<PathBuf>,
    /// NATS servers to connect to, comma-separated (`nats.servers`).
    #[arg(short = 'n', long = "nats-servers", value_delimiter = ',')]
    pub nats_servers: Vec<String>,
    /// Bootstrap a new cluster with this server as its only member.
    #[arg(long = "raft-bootstrap-seed")]
    pub raft_bootstrap_seed: bool,
    /// Bootstrap a cluster with these server ids, comma-separated.
    #[arg(long = "raft-bootstrap-peers", value_delimiter = ',')]
    pub raft_bootstrap_peers: Vec<String>,
    /// Server id (`clustering.server.id`; default: kept from the data dir, else random).
    #[arg(long = "server-id", visible_alias = "id")]
    pub server_id: Option<String>,
    /// Cluster namespace (`clustering.namespace`).
    #[arg(long = "namespace", visible_alias = "ns")]
    pub namespace: Option<String>,
    /// TLS certificate of the gRPC API (`tls.cert`).
    #[arg(long = "tls-cert")]
    pub tls_cert: Option<PathBuf>,
    /// TLS key of the gRPC API (`tls.key`).
    #[arg(long = "tls-key")]
    pub tls_key: Option<PathBuf>,
    /// Port of the embedded NATS client listener (port of `nats.listen`; 0 = random).
    #[arg(long = "nats-port")]
    pub nats_port: Option<u16>,
    /// Port of the HTTP listener (port of `http.listen`; 0 = random).
    #[arg(long = "http-port")]
    pub http_port: Option<u16>,
}

/// Log level (`logging.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Everything.
    Trace,
    /// Debug and above.
    Debug,
    /// Info and above (default).
    Info,
    /// Warnings and errors.
    Warn,
    /// Errors only.
    Error,
}

impl LogLevel {
    /// The `tracing` filter directive for this level.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// Ack policy of the activity stream publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivityAckPolicy {
    /// No ack.
    None,
    /// Ack once the leader has written.
    Leader,
    /// Ack once the ISR has the message (default).
    All,
}

/// When the store forces data to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// fsync before every ack (default).
    Always,
    /// fsync at most every `store.sync.interval`; acks may precede the fsync.
    Interval,
}

/// `batch.*`: the leader's append batching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchConfig {
    /// `batch.max.messages` (1024).
    pub max_messages: usize,
    /// `batch.max.time` (0 = do not wait for more).
    pub max_time: Duration,
}

/// `logging.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggingConfig {
    /// `logging.level` (info).
    pub level: LogLevel,
    /// `logging.recovery`: log messages replayed at recovery.
    pub recovery: bool,
    /// `logging.raft`: log Raft internals.
    pub raft: bool,
    /// `logging.nats`: log NATS internals.
    pub nats: bool,
}

/// `tls.*`: TLS of the gRPC API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// `tls.key`.
    pub key: Option<PathBuf>,
    /// `tls.cert`.
    pub cert: Option<PathBuf>,
    /// `tls.client.auth.enabled`: require client certificates.
    pub client_auth_enabled: bool,
    /// `tls.client.auth.ca`: CA for client certificates.
    pub client_auth_ca: Option<PathBuf>,
    /// `tls.client.authz.enabled`.
    pub client_authz_enabled: bool,
    /// `tls.client.authz.model`.
    pub client_authz_model: Option<PathBuf>,
    /// `tls.client.authz.policy`.
    pub client_authz_policy: Option<PathBuf>,
}

/// `nats.*`: the embedded NATS server and the client connection to NATS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsConfig {
    /// `nats.servers`: external servers (used when not embedded).
    pub servers: Vec<String>,
    /// `nats.user`.
    pub user: Option<String>,
    /// `nats.password`.
    pub password: Option<String>,
    /// `nats.tls.cert`.
    pub tls_cert: Option<PathBuf>,
    /// `nats.tls.key`.
    pub tls_key: Option<PathBuf>,
    /// `nats.tls.ca`.
    pub tls_ca: Option<PathBuf>,
    /// `nats.embedded` (true here).
    pub embedded: bool,
    /// `nats.embedded.config`: NATS config file; implies `embedded`.
    pub embedded_config: Option<PathBuf>,
    /// `nats.listen`: client listener of the embedded server (0.0.0.0:4222).
    pub listen: String,
    /// Whether `nats.listen` was given (file, environment or `--nats-port`):
    /// then it overrides the listener of a `nats.embedded.config` file.
    pub listen_explicit: bool,
    /// `nats.cluster.*`: routes of the embedded server to other nodes.
    pub cluster: NatsClusterConfig,
    /// `nats.websocket.*`: NATS clients over WebSocket.
    pub websocket: NatsWebsocketConfig,
    /// `nats.leafnodes.*`: leaf-node listener and hubs to connect to.
    pub leafnodes: NatsLeafConfig,
    /// `nats.recorder.max.pending`: byte limit of each in-process
    /// subscription queue (32 MiB); past 75 % of it, publishers to a
    /// stream's subject stall (see `nats::handle`).
    pub recorder_max_pending: u64,
    /// `nats.account`: the account of the node's in-process NATS clients
    /// (its streams record that account's subjects); `None` = the global
    /// account `$G`. Must be an account of `nats.embedded.config`.
    pub account: Option<String>,
}

/// `nats.websocket.*`: the embedded server's WebSocket listener, enabled by
/// `nats.websocket.listen`. Each key set here overrides the same field of a
/// `websocket {}` block of `nats.embedded.config`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsWebsocketConfig {
    /// `nats.websocket.listen`: `host:port` (port 0 = any free port).
    pub listen: Option<String>,
    /// `nats.websocket.no_tls`: plain `ws://` (required without TLS).
    pub no_tls: Option<bool>,
    /// `nats.websocket.tls.cert`: certificate (PEM) for `wss://`.
    pub tls_cert: Option<PathBuf>,
    /// `nats.websocket.tls.key`: key (PEM) for `wss://`.
    pub tls_key: Option<PathBuf>,
    /// `nats.websocket.compression`: offer permessage-deflate.
    pub compression: Option<bool>,
    /// `nats.websocket.same_origin`: refuse other origins.
    pub same_origin: Option<bool>,
    /// `nats.websocket.allowed_origins`: origins accepted (http/https URLs).
    pub allowed_origins: Option<Vec<String>>,
    /// `nats.websocket.handshake_timeout`: bound on the HTTP upgrade.
    pub handshake_timeout: Option<Duration>,
}

impl NatsWebsocketConfig {
    /// Whether any key is set.
    pub fn any(&self) -> bool {
        *self != NatsWebsocketConfig::default()
    }
}

/// `nats.leafnodes.*`: the embedded server's leaf nodes. `listen` accepts
/// leaves (this node is their hub); each URL of `remotes` is a hub this
/// node connects to as a leaf (the edge pattern: local clients and
/// streams keep working while the link to the hub is down).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct NatsLeafConfig {
    /// `nats.leafnodes.listen`: leaf listener (`host:port`).
    pub listen: Option<String>,
    /// `nats.leafnodes.advertise`: `host:port` leaves should use for us.
    pub advertise: Option<String>,
    /// `nats.leafnodes.remotes`: hub URLs (`nats-leaf://[user:pass@]host:port`,
    /// or `ws://`/`wss://` for a hub's WebSocket listener).
    pub remotes: Vec<String>,
    /// `nats.leafnodes.reconnect`: delay before reconnecting to a hub (1s).
    pub reconnect: Option<Duration>,
    /// `nats.leafnodes.auth.user`: the user leaves must present.
    pub auth_user: Option<String>,
    /// `nats.leafnodes.auth.password`.
    pub auth_password: Option<String>,
    /// `nats.leafnodes.tls.cert`: leaf listener certificate (PEM).
    pub tls_cert: Option<PathBuf>,
    /// `nats.leafnodes.tls.key`: leaf listener key (PEM).
    pub tls_key: Option<PathBuf>,
    /// `nats.leafnodes.tls.ca`: CA that verifies leaves' certificates.
    pub tls_ca: Option<PathBuf>,
    /// `nats.leafnodes.remote.tls.ca`: CA that verifies the hubs (turns
    /// TLS on toward them).
    pub remote_tls_ca: Option<PathBuf>,
}

impl std::fmt::Debug for NatsLeafConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Passwords (also inside remote URLs) stay out of logs.
        let remotes: Vec<String> = self
            .remotes
            .iter()
            .map(|u| match u.rsplit_once('@') {
                Some((_, hp)) => format!("<credentials>@{hp}"),
                None => u.clone(),
            })
            .collect();
        f.debug_struct("NatsLeafConfig")
            .field("listen", &self.listen)
            .field("advertise", &self.advertise)
            .field("remotes", &remotes)
            .field("reconnect", &self.reconnect)
            .field("auth_user", &self.auth_user)
            .field(
                "auth_password",
                &self.auth_password.as_ref().map(|_| "<hidden>"),
            )
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("tls_ca", &self.tls_ca)
            .field("remote_tls_ca", &self.remote_tls_ca)
            .finish()
    }
}

/// `nats.cluster.*`: the embedded server's cluster (routes). Routes are
/// enabled when `listen` or `routes` is set.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct NatsClusterConfig {
    /// `nats.cluster.name`: cluster name (all nodes must agree).
    pub name: Option<String>,
    /// `nats.cluster.listen`: route listener (`host:port`; default
    /// 0.0.0.0:6222 when routes are configured).
    pub listen: Option<String>,
    /// `nats.cluster.routes`: route URLs of seed nodes
    /// (`nats-route://host:port`).
    pub routes: Vec<String>,
    /// `nats.cluster.advertise`: `host:port` peers should use for us.
    pub advertise: Option<String>,
    /// `nats.cluster.auth.user`: route credentials (both directions).
    pub auth_user: Option<String>,
    /// `nats.cluster.auth.password`.
    pub auth_password: Option<String>,
    /// `nats.cluster.tls.cert`: route TLS certificate (PEM).
    pub tls_cert: Option<PathBuf>,
    /// `nats.cluster.tls.key`: route TLS key (PEM).
    pub tls_key: Option<PathBuf>,
    /// `nats.cluster.tls.ca`: CA that verifies peer nodes.
    pub tls_ca: Option<PathBuf>,
    /// `nats.cluster.pool_size`: route connections per peer (-1 or 0:
    /// one, the default; 1 to 32: a pool, as nats-server's `pool_size`).
    pub pool_size: Option<usize>,
    /// `nats.cluster.compression`: S2 route compression (`off`, `accept`,
    /// `s2_fast`, `s2_better`, `s2_best`, `s2_auto`), as nats-server's.
    pub compression: Option<crate::config::nats::S2Compression>,
}

impl NatsClusterConfig {
    /// Whether any key enables clustering.
    pub fn enabled(&self) -> bool {
        self.listen.is_some() || !self.routes.is_empty()
    }
}

impl std::fmt::Debug for NatsClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The route password stays out of logs.
        f.debug_struct("NatsClusterConfig")
            .field("name", &self.name)
            .field("listen", &self.listen)
            .field("routes", &self.routes)
            .field("advertise", &self.advertise)
            .field("auth_user", &self.auth_user)
            .field(
                "auth_password",
                &self.auth_password.as_ref().map(|_| "<hidden>"),
            )
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("tls_ca", &self.tls_ca)
            .field("pool_size", &self.pool_size)
            .field("compression", &self.compression)
            .finish()
    }
}

/// `http.*`: monitoring, metrics, admin API and UI.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// `http.listen` (0.0.0.0:8222); port 0 = random.
    pub listen: String,
    /// Whether `http.listen` was given (file, environment or `--http-port`):
    /// then it overrides the monitoring port of a `nats.embedded.config` file.
    pub listen_explicit: bool,
    /// `http.auth.token`: clients send `Authorization: Bearer <token>`.
    pub auth_token: Option<String>,
    /// `http.auth.username` (with the password): HTTP Basic.
    pub auth_username: Option<String>,
    /// `http.auth.password`.
    pub auth_password: Option<String>,
    /// `http.auth.open_metrics` (true): `/metrics`, `/healthz` and
    /// `/api/v1/health` need no credentials.
    pub auth_open_metrics: bool,
    /// `http.auth.open_reads` (false): GET requests need no credentials.
    pub auth_open_reads: bool,
    /// `http.tls.cert`: PEM certificate chain; with the key, HTTPS only.
    pub tls_cert: Option<PathBuf>,
    /// `http.tls.key`: PEM private key.
    pub tls_key: Option<PathBuf>,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets stay out of logs.
        let hidden = |o: &Option<String>| o.as_ref().map(|_| "<hidden>");
        f.debug_struct("HttpConfig")
            .field("listen", &self.listen)
            .field("auth_token", &hidden(&self.auth_token))
            .field("auth_username", &self.auth_username)
            .field("auth_password", &hidden(&self.auth_password))
            .field("auth_open_metrics", &self.auth_open_metrics)
            .field("auth_open_reads", &self.auth_open_reads)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .finish()
    }
}

/// `store.*`: durability of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// `store.sync` (always).
    pub sync: SyncPolicy,
    /// `store.sync.interval` (100ms), used with `interval`.
    pub sync_interval: Duration,
    /// `store.cache.size` (8 MiB): page cache of each partition's database.
    pub cache_size: u64,
}

/// `streams.*`: defaults of every stream (overridable per stream).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamsConfig {
    /// `streams.retention.max.bytes` (0 = no limit).
    pub retention_max_bytes: i64,
    /// `streams.retention.max.messages` (0 = no limit).
    pub retention_max_messages: i64,
    /// `streams.retention.max.age` (168h).
    pub retention_max_age: Duration,
    /// `streams.cleaner.interval` (5m).
    pub cleaner_interval: Duration,
    /// `streams.segment.max.bytes` (256 MiB).
    pub segment_max_bytes: i64,
    /// `streams.segment.max.age` (= retention max age when unset; at least 1s).
    pub segment_max_age: Duration,
    /// `streams.compact.enabled`.
    pub compact_enabled: bool,
    /// `streams.compact.max.goroutines` (10): compaction parallelism.
    pub compact_max_goroutines: i32,
    /// `streams.auto.pause.time` (0 = off).
    pub auto_pause_time: Duration,
    /// `streams.auto.pause.disable.if.subscribers`.
    pub auto_pause_disable_if_subscribers: bool,
    /// `streams.concurrency.control`: optimistic concurrency control.
    pub concurrency_control: bool,
    /// `streams.encryption`: encryption at rest.
    pub encryption: bool,
}

/// `clustering.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusteringConfig {
    /// `clustering.server.id`; empty = kept from the data dir, else random.
    pub server_id: String,
    /// `clustering.namespace` (liftbridge-default).
    pub namespace: String,
    /// `clustering.raft.snapshot.retain` (2).
    pub raft_snapshot_retain: u32,
    /// `clustering.raft.snapshot.threshold` (8192 entries).
    pub raft_snapshot_threshold: u64,
    /// `clustering.raft.cache.size` (512).
    pub raft_cache_size: u32,
    /// `clustering.raft.bootstrap.seed`.
    pub raft_bootstrap_seed: bool,
    /// `clustering.raft.bootstrap.peers`.
    pub raft_bootstrap_peers: Vec<String>,
    /// `clustering.raft.max.quorum.size` (0 = unlimited).
    pub raft_max_quorum_size: u32,
    /// `clustering.raft.heartbeat.interval` (150ms; not in Liftbridge): how
    /// often the controller reaches every member.
    pub raft_heartbeat_interval: Duration,
    /// `clustering.raft.election.timeout` (1s; not in Liftbridge): silence
    /// after which a member starts an election (randomized up to twice this).
    pub raft_election_timeout: Duration,
    /// `clustering.replica.max.lag.time` (15s).
    pub replica_max_lag_time: Duration,
    /// `clustering.replica.max.leader.timeout` (15s).
    pub replica_max_leader_timeout: Duration,
    /// `clustering.replica.max.idle.wait` (10s).
    pub replica_max_idle_wait: Duration,
    /// `clustering.replica.fetch.timeout` (3s).
    pub replica_fetch_timeout: Duration,
    /// `clustering.min.insync.replicas` (1).
    pub min_insync_replicas: i32,
    /// `clustering.replication.max.bytes` (1 MiB).
    pub replication_max_bytes: i64,
}

/// `activity.*`: the `__activity` stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityConfig {
    /// `activity.stream.enabled`.
    pub stream_enabled: bool,
    /// `activity.stream.publish.timeout` (5s).
    pub stream_publish_timeout: Duration,
    /// `activity.stream.publish.ack.policy` (all).
    pub stream_publish_ack_policy: ActivityAckPolicy,
}

/// `cursors.*`: the `__cursors` stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorsConfig {
    /// `cursors.stream.partitions` (0 = cursors disabled).
    pub stream_partitions: i32,
    /// `cursors.stream.replication.factor` (-1 = all servers).
    pub stream_replication_factor: i32,
    /// `cursors.stream.auto.pause.time` (1m).
    pub stream_auto_pause_time: Duration,
}

/// `groups.*`: consumer groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupsConfig {
    /// `groups.consumer.timeout` (15s).
    pub consumer_timeout: Duration,
    /// `groups.coordinator.timeout` (15s).
    pub coordinator_timeout: Duration,
}

/// `telemetry.*`: accepted for compatibility; nothing is ever sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// `telemetry.enabled` (false here).
    pub enabled: bool,
    /// `telemetry.interval.seconds` (86400).
    pub interval_seconds: u64,
}

/// The whole configuration. `Default` is the configuration with no file,
/// no environment and no flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiftbridgeConfig {
    /// gRPC API listener, `host:port` (from `listen`, else `0.0.0.0:<port>`).
    pub listen: String,
    /// `host`: address advertised to clients; empty = derived (see `advertised_host`).
    pub host: String,
    /// `port`: the gRPC API port (9292), also the port of `listen`.
    pub port: u16,
    /// `data.dir` (./data).
    pub data_dir: PathBuf,
    /// `metadata.cache.max.age` (2m).
    pub metadata_cache_max_age: Duration,
    /// `batch.*`.
    pub batch: BatchConfig,
    /// `logging.*`.
    pub logging: LoggingConfig,
    /// `tls.*`.
    pub tls: TlsConfig,
    /// `nats.*`.
    pub nats: NatsConfig,
    /// `http.*`.
    pub http: HttpConfig,
    /// `store.*`.
    pub store: StoreConfig,
    /// `streams.*`.
    pub streams: StreamsConfig,
    /// `clustering.*`.
    pub clustering: ClusteringConfig,
    /// `activity.*`.
    pub activity: ActivityConfig,
    /// `cursors.*`.
    pub cursors: CursorsConfig,
    /// `groups.*`.
    pub groups: GroupsConfig,
    /// `telemetry.*`.
    pub telemetry: TelemetryConfig,
    /// The keys set by a file, the environment or a flag (the rest kept
    /// their defaults); `config::audit` checks them.
    pub explicit_keys: BTreeSet<&'static str>,
}

const DEFAULT_PORT: u16 = 9292;
const WEEK: Duration = Duration::from_secs(168 * 3600);

impl Default for LiftbridgeConfig {
    fn default() -> Self {
        LiftbridgeConfig {
            listen: format!("0.0.0.0:{DEFAULT_PORT}"),
            host: String::new(),
            port: DEFAULT_PORT,
            data_dir: PathBuf::from("./data"),
            metadata_cache_max_age: Duration::from_secs(120),
            batch: BatchConfig {
                max_messages: 1024,
                max_time: Duration::ZERO,
            },
            logging: LoggingConfig {
                level: LogLevel::Info,
                recovery: false,
                raft: false,
                nats: false,
            },
            tls: TlsConfig::default(),
            nats: NatsConfig {
                servers: vec!["nats://127.0.0.1:4222".into()],
                user: None,
                password: None,
                tls_cert: None,
                tls_key: None,
                tls_ca: None,
                embedded: true,
                embedded_config: None,
                listen: "0.0.0.0:4222".into(),
                listen_explicit: false,
                cluster: NatsClusterConfig::default(),
                websocket: NatsWebsocketConfig::default(),
                leafnodes: NatsLeafConfig::default(),
                recorder_max_pending: crate::nats::handle::DEFAULT_LOCAL_MAX_PENDING as u64,
                account: None,
            },
            http: HttpConfig {
                listen: "0.0.0.0:8222".into(),
                listen_explicit: false,
                auth_token: None,
                auth_username: None,
                auth_password: None,
                auth_open_metrics: true,
                auth_open_reads: false,
                tls_cert: None,
                tls_key: None,
            },
            store: StoreConfig {
                sync: SyncPolicy::Always,
                sync_interval: Duration::from_millis(100),
                cache_size: crate::store::DEFAULT_CACHE_BYTES as u64,
            },
            streams: StreamsConfig {
                retention_max_bytes: 0,
                retention_max_messages: 0,
                retention_max_age: WEEK,
                cleaner_interval: Duration::from_secs(300),
                segment_max_bytes: 268_435_456,
                segment_max_age: WEEK,
                compact_enabled: false,
                compact_max_goroutines: 10,
                auto_pause_time: Duration::ZERO,
                auto_pause_disable_if_subscribers: false,
                concurrency_control: false,
                encryption: false,
            },
            clustering: ClusteringConfig {
                server_id: String::new(),
                namespace: "liftbridge-default".into(),
                raft_snapshot_retain: 2,
                raft_snapshot_threshold: 8192,
                raft_cache_size: 512,
                raft_bootstrap_seed: false,
                raft_bootstrap_peers: Vec::new(),
                raft_max_quorum_size: 0,
                raft_heartbeat_interval: Duration::from_millis(150),
                raft_election_timeout: Duration::from_secs(1),
                replica_max_lag_time: Duration::from_secs(15),
                replica_max_leader_timeout: Duration::from_secs(15),
                replica_max_idle_wait: Duration::from_secs(10),
                replica_fetch_timeout: Duration::from_secs(3),
                min_insync_replicas: 1,
                replication_max_bytes: 1_048_576,
            },
            activity: ActivityConfig {
                stream_enabled: false,
                stream_publish_timeout: Duration::from_secs(5),
                stream_publish_ack_policy: ActivityAckPolicy::All,
            },
            cursors: CursorsConfig {
                stream_partitions: 0,
                stream_replication_factor: -1,
                stream_auto_pause_time: Duration::from_secs(60),
            },
            groups: GroupsConfig {
                consumer_timeout: Duration::from_secs(15),
                coordinator_timeout: Duration::from_secs(15),
            },
            telemetry: TelemetryConfig {
                enabled: false,
                interval_seconds: 86_400,
            },
            explicit_keys: BTreeSet::new(),
        }
    }
}

/// The one rule for the host a node advertises to clients and peers (in
/// its broker entry, FetchMetadata and the admin API): `host` when set, else
/// the listen host unless it is a wildcard (`0.0.0.0`, `::`) or empty, else
/// `localhost`, as Liftbridge (server/config.go `GetConnectionAddress`).
/// With neither `listen` nor `host` configured the node listens on both
/// address families (`node::bind_grpc`), so `localhost` reaches it whether
/// a client resolves it to `::1` or to `127.0.0.1`.
pub fn advertise_host(host: &str, listen_host: &str) -> String {
    if !host.is_empty() {
        return host.to_string();
    }
    let h = listen_host.trim_start_matches('[').trim_end_matches(']');
    if h.is_empty() || h == "0.0.0.0" || h == "::" {
        "localhost".into()
    } else {
        h.to_string()
    }
}

/// How this node enters the metadata group (see `cluster::control`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RaftBootstrap {
    /// A one-member group on a fresh data directory.
    Seed,
    /// Wait for these servers; the lowest id initializes the group.
    Peers(Vec<String>),
    /// Wait to be added by the controller.
    Join,
}

impl LiftbridgeConfig {
    /// Whether the gRPC listener is left to the default: neither `listen`
    /// nor `host` configured (then it listens on both address families and
    /// advertises `localhost`).
    pub fn listen_is_default(&self) -> bool {
        !self.explicit_keys.contains("listen") && self.host.is_empty()
    }

    /// Host advertised to clients in metadata (`advertise_host`).
    pub fn advertised_host(&self) -> String {
        let listen = split_host_port(&self.listen).map_or("", |(h, _)| h);
        advertise_host(&self.host, listen)
    }

    /// Whether `nats.cluster.*` makes the embedded NATS server form a
    /// cluster (a route listener or routes). A `cluster {}` block in
    /// `nats.embedded.config` counts too; the node passes that in
    /// (`raft_bootstrap_mode_with`).
    pub fn nats_clustered(&self) -> bool {
        self.nats.cluster.enabled()
    }

    /// Whether this node bootstraps a one-member Raft group on its own:
    /// asked for with `--raft-bootstrap-seed`, and the default when neither
    /// peers nor a NATS cluster are configured (zero-config start).
    pub fn raft_bootstrap(&self) -> bool {
        self.raft_bootstrap_mode() == RaftBootstrap::Seed
    }

    /// How this node enters the metadata group: `Seed` with
    /// `clustering.raft.bootstrap.seed`; `Peers` with
    /// `clustering.raft.bootstrap.peers`; with neither, `Seed` when no NATS
    /// cluster is configured (a lone node) and `Join` when it is (the node
    /// waits to be added by the controller, as Liftbridge does).
    pub fn raft_bootstrap_mode(&self) -> RaftBootstrap {
        self.raft_bootstrap_mode_with(self.nats_clustered())
    }

    /// `raft_bootstrap_mode` with the NATS cluster decided by the caller
    /// (the node, which also knows `nats.embedded.config`'s cluster block).
    pub fn raft_bootstrap_mode_with(&self, nats_clustered: bool) -> RaftBootstrap {
        let c = &self.clustering;
        if c.raft_bootstrap_seed {
            RaftBootstrap::Seed
        } else if !c.raft_bootstrap_peers.is_empty() {
            RaftBootstrap::Peers(c.raft_bootstrap_peers.clone())
        } else if nats_clustered {
            RaftBootstrap::Join
        } else {
            RaftBootstrap::Seed
        }
    }
}

/// A value before it is typed: one scalar or a list.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Raw {
    Scalar(String),
    List(Vec<String>),
}

impl Raw {
    fn shown(&self) -> String {
        match self {
            Raw::Scalar(s) => s.clone(),
            Raw::List(v) => v.join(","),
        }
    }
}

/// Loads the configuration: defaults, then the file named by `--config`,
/// then `LIFTBRIDGE_*` environment variables, then the flags.
pub fn load(flags: &LiftbridgeFlags) -> Result<LiftbridgeConfig, ConfigError> {
    load_with_env(flags, |name| std::env::var(name).ok())
}

/// `load` with an explicit environment (for tests and embedding).
pub fn load_with_env<F>(flags: &LiftbridgeFlags, env: F) -> Result<LiftbridgeConfig, ConfigError>
where
    F: Fn(&str) -> Option<String>,
{
    let mut b = Builder::default();
    if let Some(path) = &flags.config {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        b.apply_yaml(&text, path)?;
    }
    for key in KEYS {
        let var = env_var_name(key);
        if let Some(v) = env(&var) {
            b.set(key, &Raw::Scalar(v), &format!("environment variable {var}"))?;
        }
    }
    b.apply_flags(flags)?;
    b.finish()
}

/// Parses a YAML document (the contents of a config file) over the defaults.
/// `origin` names the file in errors.
pub fn from_yaml_str(text: &str, origin: &Path) -> Result<LiftbridgeConfig, ConfigError> {
    let mut b = Builder::default();
    b.apply_yaml(text, origin)?;
    b.finish()
}

/// Accumulates sources over the defaults and remembers which keys were set.
#[derive(Default)]
struct Builder {
    cfg: LiftbridgeConfig,
    set: BTreeSet<&'static str>,
    flag_port: Option<u16>,
}

impl Builder {
    fn apply_yaml(&mut self, text: &str, path: &Path) -> Result<(), ConfigError> {
        let doc: Value = serde_yaml::from_str(text).map_err(|source| ConfigError::Yaml {
            path: path.to_path_buf(),
            source,
        })?;
        let mut flat = Vec::new();
        match doc {
            // An empty file is an empty configuration.
            Value::Null => {}
            Value::Mapping(_) => {
                flatten("", &doc, &mut flat).map_err(|reason| ConfigError::Shape {
                    path: path.to_path_buf(),
                    reason,
                })?
            }
            _ => {
                return Err(ConfigError::Shape {
                    path: path.to_path_buf(),
                    reason: "the top level must be a mapping of keys to values".into(),
                })
            }
        }
        let origin = path.display().to_string();
        for (key, raw) in flat {
            match raw {
                // `key:` with no value leaves the default.
                None => {
                    if !KEYS.contains(&key.as_str()) {
                        return Err(ConfigError::UnknownKey { key, origin });
                    }
                }
                Some(raw) => self.set(&key, &raw, &origin)?,
            }
        }
        Ok(())
    }

    fn apply_flags(&mut self, f: &LiftbridgeFlags) -> Result<(), ConfigError> {
        let s = |v: &dyn ToString| Raw::Scalar(v.to_string());
        let p = |v: &Path| Raw::Scalar(v.display().to_string());
        if let Some(v) = &f.data_dir {
            self.set("data.dir", &p(v), "flag --data-dir")?;
        }
        if let Some(v) = f.port {
            self.flag_port = Some(v);
        }
        if let Some(v) = &f.level {
            self.set("logging.level", &s(v), "flag --level")?;
        }
        if let Some(v) = f.embedded_nats {
            self.set("nats.embedded", &s(&v), "flag --embedded-nats")?;
        }
        if let Some(v) = &f.embedded_nats_config {
            self.set("nats.embedded.config", &p(v), "flag --embedded-nats-config")?;
        }
        if !f.nats_servers.is_empty() {
            self.set(
                "nats.servers",
                &Raw::List(f.nats_servers.clone()),
                "flag --nats-servers",
            )?;
        }
        if f.raft_bootstrap_seed {
            self.set(
                "clustering.raft.bootstrap.seed",
                &s(&true),
                "flag --raft-bootstrap-seed",
            )?;
        }
        if !f.raft_bootstrap_peers.is_empty() {
            self.set(
                "clustering.raft.bootstrap.peers",
                &Raw::List(f.raft_bootstrap_peers.clone()),
                "flag --raft-bootstrap-peers",
            )?;
        }
        if let Some(v) = &f.server_id {
            self.set("clustering.server.id", &s(v), "flag --server-id")?;
        }
        if let Some(v) = &f.namespace {
            self.set("clustering.namespace", &s(v), "flag --namespace")?;
        }
        if let Some(v) = &f.tls_cert {
            self.set("tls.cert", &p(v), "flag --tls-cert")?;
        }
        if let Some(v) = &f.tls_key {
            self.set("tls.key", &p(v), "flag --tls-key")?;
        }
        if let Some(port) = f.nats_port {
            self.cfg.nats.listen = with_port(&self.cfg.nats.listen, port);
            self.set.insert("nats.listen");
        }
        if let Some(port) = f.http_port {
            self.cfg.http.listen = with_port(&self.cfg.http.listen, port);
            self.set.insert("http.listen");
        }
        Ok(())
    }

    /// Sets one key. Unknown keys and bad values are errors naming `origin`.
    fn set(&mut self, key: &str, raw: &Raw, origin: &str) -> Result<(), ConfigError> {
        let Some(known) = KEYS.iter().copied().find(|k| *k == key) else {
            return Err(ConfigError::UnknownKey {
                key: key.to_string(),
                origin: origin.to_string(),
            });
        };
        self.assign(known, raw)
            .map_err(|reason| ConfigError::BadValue {
                key: key.to_string(),
                value: raw.shown(),
                origin: origin.to_string(),
                reason,
            })?;
        self.set.insert(known);
        Ok(())
    }

    fn assign(&mut self, key: &str, raw: &Raw) -> Result<(), String> {
        let c = &mut self.cfg;
        match key {
            "listen" => c.listen = parse_listen(&scalar(raw)?)?,
            "host" => c.host = scalar(raw)?,
            "port" => c.port = num(raw)?,
            "data.dir" => c.data_dir = PathBuf::from(non_empty(raw)?),
            "metadata.cache.max.age" => c.metadata_cache_max_age = duration(raw)?,
            "batch.max.messages" => c.batch.max_messages = num(raw)?,
            "batch.max.time" => c.batch.max_time = duration(raw)?,
            "logging.level" => {
                c.logging.level = match scalar(raw)?.to_ascii_lowercase().as_str() {
                    "trace" => LogLevel::Trace,
                    "debug" => LogLevel::Debug,
                    "info" => LogLevel::Info,
                    "warn" | "warning" => LogLevel::Warn,
                    "error" => LogLevel::Error,
                    _ => return Err("expected one of trace, debug, info, warn, error".into()),
                }
            }
            "logging.recovery" => c.logging.recovery = boolean(raw)?,
            "logging.raft" => c.logging.raft = boolean(raw)?,
            "logging.nats" => c.logging.nats = boolean(raw)?,
            "tls.key" => c.tls.key = path(raw)?,
            "tls.cert" => c.tls.cert = path(raw)?,
            "tls.client.auth.enabled" => c.tls.client_auth_enabled = boolean(raw)?,
            "tls.client.auth.ca" => c.tls.client_auth_ca = path(raw)?,
            "tls.client.authz.enabled" => c.tls.client_authz_enabled = boolean(raw)?,
            "tls.client.authz.model" => c.tls.client_authz_model = path(raw)?,
            "tls.client.authz.policy" => c.tls.client_authz_policy = path(raw)?,
            "nats.servers" => c.nats.servers = list(raw),
            "nats.user" => c.nats.user = opt_string(raw)?,
            "nats.account" => c.nats.account = opt_string(raw)?,
            "nats.password" => c.nats.password = opt_string(raw)?,
            "nats.tls.cert" => c.nats.tls_cert = path(raw)?,
            "nats.tls.key" => c.nats.tls_key = path(raw)?,
            "nats.tls.ca" => c.nats.tls_ca = path(raw)?,
            "nats.embedded" => c.nats.embedded = boolean(raw)?,
            "nats.embedded.config" => c.nats.embedded_config = path(raw)?,
            "nats.listen" => c.nats.listen = parse_listen(&scalar(raw)?)?,
            "nats.cluster.name" => {
                let n = non_empty(raw)?;
                if n.contains(char::is_whitespace) {
                    return Err("cluster name cannot contain spaces".into());
                }
                c.nats.cluster.name = Some(n);
            }
            "nats.cluster.listen" => {
                let l = scalar(raw)?;
                if crate::config::nats::parse_cluster_listen(&l).is_none() {
                    return Err("expected host:port".into());
                }
                c.nats.cluster.listen = Some(l);
            }
            "nats.cluster.routes" => {
                let routes = list(raw);
                if let Some(bad) = routes
                    .iter()
                    .find(|r| crate::config::nats::parse_cluster_listen(r).is_none())
                {
                    return Err(format!("not a route URL: {bad:?}"));
                }
                c.nats.cluster.routes = routes;
            }
            "nats.cluster.advertise" => c.nats.cluster.advertise = opt_string(raw)?,
            "nats.cluster.auth.user" => c.nats.cluster.auth_user = opt_string(raw)?,
            "nats.cluster.auth.password" => c.nats.cluster.auth_password = opt_string(raw)?,
            "nats.cluster.tls.cert" => c.nats.cluster.tls_cert = path(raw)?,
            "nats.cluster.tls.key" => c.nats.cluster.tls_key = path(raw)?,
            "nats.cluster.tls.ca" => c.nats.cluster.tls_ca = path(raw)?,
            "nats.cluster.pool_size" => {
                let max = crate::config::nats::MAX_ROUTE_POOL_SIZE as i64;
                let n: i64 = scalar(raw)?
                    .parse()
                    .map_err(|_| format!("expected a number from -1 to {max}"))?;
                if !(-1..=max).contains(&n) {
                    return Err(format!("expected a number from -1 to {max}"));
                }
                c.nats.cluster.pool_size = Some(usize::try_from(n).unwrap_or(0));
            }
            "nats.cluster.compression" => {
                let m = scalar(raw)?;
                c.nats.cluster.compression = Some(
                    crate::config::nats::S2Compression::from_name(&m).ok_or_else(|| {
                        "expected off, accept, s2_fast, s2_better, s2_best or s2_auto".to_string()
                    })?,
                );
            }
            "nats.websocket.listen" => {
                let l = scalar(raw)?;
                if crate::config::nats::parse_cluster_listen(&l).is_none() {
                    return Err("expected host:port".into());
                }
                c.nats.websocket.listen = Some(l);
            }
            "nats.websocket.no_tls" => c.nats.websocket.no_tls = Some(boolean(raw)?),
            "nats.websocket.tls.cert" => c.nats.websocket.tls_cert = path(raw)?,
            "nats.websocket.tls.key" => c.nats.websocket.tls_key = path(raw)?,
            "nats.websocket.compression" => c.nats.websocket.compression = Some(boolean(raw)?),
            "nats.websocket.same_origin" => c.nats.websocket.same_origin = Some(boolean(raw)?),
            "nats.websocket.allowed_origins" => {
                let origins = list(raw);
                for o in &origins {
                    if let Err(why) = crate::config::nats::parse_ws_origin(o) {
                        return Err(format!("unable to parse allowed origin {o:?}: {why}"));
                    }
                }
                c.nats.websocket.allowed_origins = Some(origins);
            }
            "nats.websocket.handshake_timeout" => {
                c.nats.websocket.handshake_timeout = Some(duration(raw)?)
            }
            "nats.leafnodes.listen" => {
                let l = scalar(raw)?;
                if crate::config::nats::parse_cluster_listen(&l).is_none() {
                    return Err("expected host:port".into());
                }
                c.nats.leafnodes.listen = Some(l);
            }
            "nats.leafnodes.advertise" => c.nats.leafnodes.advertise = opt_string(raw)?,
            "nats.leafnodes.remotes" => {
                let remotes = list(raw);
                if let Some(bad) = remotes
                    .iter()
                    .find(|r| crate::config::nats::parse_leaf_url(r).is_none())
                {
                    return Err(format!(
                        "not a leafnode URL (nats-leaf://, nats://, tls://, ws://, wss://): {bad:?}"
                    ));
                }
                c.nats.leafnodes.remotes = remotes;
            }
            "nats.recorder.max.pending" => {
                let n = size(raw)?;
                // A queue must hold at least one message of the largest
                // size an internal reply can have.
                if n < MIN_RECORDER_MAX_PENDING {
                    return Err("must be at least 1MB".into());
                }
                c.nats.recorder_max_pending = n;
            }
            "nats.leafnodes.reconnect" => {
                c.nats.leafnodes.reconnect = Some(positive(duration(raw)?)?)
            }
            "nats.leafnodes.auth.user" => c.nats.leafnodes.auth_user = opt_string(raw)?,
            "nats.leafnodes.auth.password" => c.nats.leafnodes.auth_password = opt_string(raw)?,
            "nats.leafnodes.tls.cert" => c.nats.leafnodes.tls_cert = path(raw)?,
            "nats.leafnodes.tls.key" => c.nats.leafnodes.tls_key = path(raw)?,
            "nats.leafnodes.tls.ca" => c.nats.leafnodes.tls_ca = path(raw)?,
            "nats.leafnodes.remote.tls.ca" => c.nats.leafnodes.remote_tls_ca = path(raw)?,
            "http.listen" => c.http.listen = parse_listen(&scalar(raw)?)?,
            "http.auth.token" => c.http.auth_token = opt_string(raw)?,
            "http.auth.username" => {
                let u = opt_string(raw)?;
                if u.as_deref().is_some_and(|u| u.contains(':')) {
                    return Err(
                        "cannot contain ':' (HTTP Basic separates it from the password with one)"
                            .into(),
                    );
                }
                c.http.auth_username = u;
            }
            "http.auth.password" => c.http.auth_password = opt_string(raw)?,
            "http.auth.open_metrics" => c.http.auth_open_metrics = boolean(raw)?,
            "http.auth.open_reads" => c.http.auth_open_reads = boolean(raw)?,
            "http.tls.cert" => c.http.tls_cert = path(raw)?,
            "http.tls.key" => c.http.tls_key = path(raw)?,
            "store.sync" => {
                c.store.sync = match scalar(raw)?.to_ascii_lowercase().as_str() {
                    "always" => SyncPolicy::Always,
                    "interval" => SyncPolicy::Interval,
                    _ => return Err("expected always or interval".into()),
                }
            }
            "store.sync.interval" => c.store.sync_interval = positive(duration(raw)?)?,
            "store.cache.size" => c.store.cache_size = size(raw)?,
            "streams.retention.max.bytes" => {
                c.streams.retention_max_bytes = non_negative(num(raw)?)?
            }
            "streams.retention.max.messages" => {
                c.streams.retention_max_messages = non_negative(num(raw)?)?
            }
            "streams.retention.max.age" => c.streams.retention_max_age = duration(raw)?,
            "streams.cleaner.interval" => c.streams.cleaner_interval = positive(duration(raw)?)?,
            "streams.segment.max.bytes" => c.streams.segment_max_bytes = positive_i64(num(raw)?)?,
            "streams.segment.max.age" => {
                let d = duration(raw)?;
                if d < Duration::from_secs(1) {
                    return Err("must be at least 1s".into());
                }
                c.streams.segment_max_age = d;
            }
            "streams.compact.enabled" => c.streams.compact_enabled = boolean(raw)?,
            "streams.compact.max.goroutines" => {
                let n: i32 = num(raw)?;
                if n < 1 {
                    return Err("must be at least 1".into());
                }
                c.streams.compact_max_goroutines = n;
            }
            "streams.auto.pause.time" => c.streams.auto_pause_time = duration(raw)?,
            "streams.auto.pause.disable.if.subscribers" => {
                c.streams.auto_pause_disable_if_subscribers = boolean(raw)?
            }
            "streams.concurrency.control" => c.streams.concurrency_control = boolean(raw)?,
            "streams.encryption" => c.streams.encryption = boolean(raw)?,
            "clustering.server.id" => {
                let id = scalar(raw)?;
                if id
                    .chars()
                    .any(|ch| ch.is_whitespace() || ch == '.' || ch == '*' || ch == '>')
                {
                    return Err("server id cannot contain spaces, dots or wildcards".into());
                }
                c.clustering.server_id = id;
            }
            "clustering.namespace" => {
                let ns = non_empty(raw)?;
                if ns
                    .chars()
                    .any(|ch| ch.is_whitespace() || ch == '*' || ch == '>')
                {
                    return Err("namespace cannot contain spaces or wildcards".into());
                }
                c.clustering.namespace = ns;
            }
            "clustering.raft.snapshot.retain" => c.clustering.raft_snapshot_retain = num(raw)?,
            "clustering.raft.snapshot.threshold" => {
                let n: u64 = num(raw)?;
                if n == 0 {
                    return Err("must be at least 1".into());
                }
                c.clustering.raft_snapshot_threshold = n;
            }
            "clustering.raft.cache.size" => c.clustering.raft_cache_size = num(raw)?,
            "clustering.raft.bootstrap.seed" => c.clustering.raft_bootstrap_seed = boolean(raw)?,
            "clustering.raft.bootstrap.peers" => c.clustering.raft_bootstrap_peers = list(raw),
            "clustering.raft.max.quorum.size" => c.clustering.raft_max_quorum_size = num(raw)?,
            "clustering.raft.heartbeat.interval" => {
                let d = duration(raw)?;
                if d < Duration::from_millis(10) {
                    return Err("must be at least 10ms".into());
                }
                c.clustering.raft_heartbeat_interval = d;
            }
            "clustering.raft.election.timeout" => {
                let d = duration(raw)?;
                if d < Duration::from_millis(100) {
                    return Err("must be at least 100ms".into());
                }
                c.clustering.raft_election_timeout = d;
            }
            "clustering.replica.max.lag.time" => {
                c.clustering.replica_max_lag_time = positive(duration(raw)?)?
            }
            "clustering.replica.max.leader.timeout" => {
                c.clustering.replica_max_leader_timeout = positive(duration(raw)?)?
            }
            "clustering.replica.max.idle.wait" => {
                c.clustering.replica_max_idle_wait = positive(duration(raw)?)?
            }
            "clustering.replica.fetch.timeout" => {
                c.clustering.replica_fetch_timeout = positive(duration(raw)?)?
            }
            "clustering.min.insync.replicas" => {
                let n: i32 = num(raw)?;
                if n < 1 {
                    return Err("must be at least 1".into());
                }
                c.clustering.min_insync_replicas = n;
            }
            "clustering.replication.max.bytes" => {
                c.clustering.replication_max_bytes = positive_i64(num(raw)?)?
            }
            "activity.stream.enabled" => c.activity.stream_enabled = boolean(raw)?,
            "activity.stream.publish.timeout" => {
                c.activity.stream_publish_timeout = positive(duration(raw)?)?
            }
            "activity.stream.publish.ack.policy" => {
                c.activity.stream_publish_ack_policy =
                    match scalar(raw)?.to_ascii_lowercase().as_str() {
                        "none" => ActivityAckPolicy::None,
                        "leader" => ActivityAckPolicy::Leader,
                        "all" => ActivityAckPolicy::All,
                        _ => return Err("expected none, leader or all".into()),
                    }
            }
            "cursors.stream.partitions" => c.cursors.stream_partitions = non_negative(num(raw)?)?,
            "cursors.stream.replication.factor" => {
                let n: i32 = num(raw)?;
                if n == 0 || n < -1 {
                    return Err("must be -1 (all servers) or at least 1".into());
                }
                c.cursors.stream_replication_factor = n;
            }
            "cursors.stream.auto.pause.time" => c.cursors.stream_auto_pause_time = duration(raw)?,
            "groups.consumer.timeout" => c.groups.consumer_timeout = positive(duration(raw)?)?,
            "groups.coordinator.timeout" => {
                c.groups.coordinator_timeout = positive(duration(raw)?)?
            }
            "telemetry.enabled" => c.telemetry.enabled = boolean(raw)?,
            "telemetry.interval.seconds" => c.telemetry.interval_seconds = num(raw)?,
            // `KEYS` and this match list the same keys (checked by a unit test).
            other => return Err(format!("key {other} has no setter")),
        }
        Ok(())
    }

    /// Resolves values that depend on others, then returns the config.
    fn finish(mut self) -> Result<LiftbridgeConfig, ConfigError> {
        let c = &mut self.cfg;
        // `listen` (host:port) wins over `port` from the same layers; the
        // `--port` flag overrides the port of either.
        if self.set.contains("listen") {
            if let Some((_, p)) =
                split_host_port(&c.listen).and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            {
                c.port = p;
            }
        } else {
            c.listen = format!("0.0.0.0:{}", c.port);
        }
        if let Some(p) = self.flag_port {
            c.port = p;
            c.listen = with_port(&c.listen, p);
        }
        if !self.set.contains("streams.segment.max.age") {
            // Liftbridge: the segment age follows the retention age, at least 1s.
            c.streams.segment_max_age = c.streams.retention_max_age.max(Duration::from_secs(1));
        }
        if c.nats.embedded_config.is_some() {
            c.nats.embedded = true;
        }
        c.nats.listen_explicit = self.set.contains("nats.listen");
        c.explicit_keys = self.set.clone();
        c.http.listen_explicit = self.set.contains("http.listen");
        Ok(self.cfg)
    }
}

/// Flattens a YAML tree into dotted keys. Leaves are `None` for null.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Option<Raw>)>) -> Result<(), String> {
    match v {
        Value::Mapping(m) => {
            for (k, child) in m {
                let k = match k {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => return Err(format!("key {k:?} under {prefix:?} is not a scalar")),
                };
                let key = if prefix.is_empty() {
                    k
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, child, out)?;
            }
        }
        Value::Sequence(items) => {
            let mut list = Vec::with_capacity(items.len());
            for item in items {
                match scalar_text(item) {
                    Some(s) => list.push(s),
                    None => return Err(format!("{prefix}: list items must be scalars")),
                }
            }
            out.push((prefix.to_string(), Some(Raw::List(list))));
        }
        Value::Null => out.push((prefix.to_string(), None)),
        Value::Tagged(t) => flatten(prefix, &t.value, out)?,
        other => match scalar_text(other) {
            Some(s) => out.push((prefix.to_string(), Some(Raw::Scalar(s)))),
            None => return Err(format!("{prefix}: unsupported value")),
        },
    }
    Ok(())
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn scalar(raw: &Raw) -> Result<String, String> {
    match raw {
        Raw::Scalar(s) => Ok(s.trim().to_string()),
        Raw::List(_) => Err("expected a single value, not a list".into()),
    }
}

fn non_empty(raw: &Raw) -> Result<String, String> {
    let s = scalar(raw)?;
    if s.is_empty() {
        return Err("cannot be empty".into());
    }
    Ok(s)
}

fn opt_string(raw: &Raw) -> Result<Option<String>, String> {
    let s = scalar(raw)?;
    Ok(if s.is_empty() { None } else { Some(s) })
}

fn path(raw: &Raw) -> Result<Option<PathBuf>, String> {
    Ok(opt_string(raw)?.map(PathBuf::from))
}

fn list(raw: &Raw) -> Vec<String> {
    match raw {
        Raw::List(v) => v
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        Raw::Scalar(s) => s
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    }
}

/// Smallest `nats.recorder.max.pending` (1 MiB).
const MIN_RECORDER_MAX_PENDING: u64 = 1024 * 1024;

fn num<T: std::str::FromStr>(raw: &Raw) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    scalar(raw)?
        .parse::<T>()
        .map_err(|e| format!("expected an integer ({e})"))
}

/// A byte size: a plain integer or one with a size suffix (`4MB`, `512KiB`,
/// `1G`), as in NATS config files.
fn size(raw: &Raw) -> Result<u64, String> {
    let s = scalar(raw)?;
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, suffix) = s.split_at(digits);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("expected a size such as 4194304 or 4MB, got {s:?}"))?;
    let mult = match suffix.trim() {
        "" => 1,
        sfx => crate::config::nats_conf::size_multiplier(sfx)
            .ok_or_else(|| format!("unknown size suffix {sfx:?} (use KB, MB, GB)"))?
            as u64,
    };
    n.checked_mul(mult)
        .ok_or_else(|| "size too large".to_string())
}

fn non_negative<T: PartialOrd + Default>(n: T) -> Result<T, String> {
    if n < T::default() {
        return Err("cannot be negative".into());
    }
    Ok(n)
}

fn positive_i64(n: i64) -> Result<i64, String> {
    if n <= 0 {
        return Err("must be positive".into());
    }
    Ok(n)
}

fn positive(d: Duration) -> Result<Duration, String> {
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

/// Go's `strconv.ParseBool` spellings.
fn boolean(raw: &Raw) -> Result<bool, String> {
    match scalar(raw)?.as_str() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

fn duration(raw: &Raw) -> Result<Duration, String> {
    parse_go_duration(&scalar(raw)?)
}

/// Parses a Go duration string (`1h30m`, `1.5s`, `500ms`; see
/// [`super::duration`]). `0` and a bare integer (nanoseconds, as Go's
/// duration cast reads numbers) are accepted. Negative durations are not.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    super::duration::parse_go_duration(s, super::duration::BareNumber::Nanoseconds)
        .map_err(|e| e.to_string())
}

/// Splits `host:port` (IPv6 as `[::1]:port`).
fn split_host_port(s: &str) -> Option<(&str, &str)> {
    let (h, p) = s.rsplit_once(':')?;
    Some((h, p))
}

/// Normalizes a listen address: `host:port`, `:port` (all interfaces) or a
/// bare port.
fn parse_listen(s: &str) -> Result<String, String> {
    let s = s.trim();
    if let Ok(port) = s.parse::<u16>() {
        return Ok(format!("0.0.0.0:{port}"));
    }
    let Some((host, port)) = split_host_port(s) else {
        return Err("expected host:port or a port".into());
    };
    port.parse::<u16>()
        .map_err(|_| format!("bad port {port:?}"))?;
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    Ok(format!("{host}:{port}"))
}

/// `addr` with its port replaced.
fn with_port(addr: &str, port: u16) -> String {
    match split_host_port(addr) {
        Some((h, _)) => format!("{h}:{port}"),
        None => format!("0.0.0.0:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn nats_cluster_keys_nested_and_flat() {
        let c = yaml(
            "nats:\n  cluster:\n    name: c1\n    listen: 127.0.0.1:6333\n    routes:\n      - nats-route://a:6222\n      - nats-route://b:6222\n    auth:\n      user: ru\n      password: rp\n",
        )
        .unwrap();
        let cl = &c.nats.cluster;
        assert_eq!(cl.name.as_deref(), Some("c1"));
        assert_eq!(cl.listen.as_deref(), Some("127.0.0.1:6333"));
        assert_eq!(cl.routes.len(), 2);
        assert_eq!(cl.auth_user.as_deref(), Some("ru"));
        assert!(cl.enabled());
        let flat = yaml("nats.cluster.routes: nats-route://a:6222,nats-route://b:6222\n").unwrap();
        assert_eq!(flat.nats.cluster.routes, cl.routes);
        assert_eq!(
            yaml("nats.cluster.pool_size: 3\n")
                .unwrap()
                .nats
                .cluster
                .pool_size,
            Some(3)
        );
        assert_eq!(
            yaml("nats.cluster.pool_size: -1\n")
                .unwrap()
                .nats
                .cluster
                .pool_size,
            Some(0)
        );
        assert_eq!(
            yaml("nats.cluster.compression: s2_auto\n")
                .unwrap()
                .nats
                .cluster
                .compression,
            crate::config::nats::S2Compression::from_name("s2_auto")
        );
        for bad in [
            "nats.cluster.compression: zstd\n",
            "nats.cluster.listen: nowhere\n",
            "nats.cluster.routes: [\"::bad\"]\n",
            "nats.cluster.name: \"a b\"\n",
            "nats.cluster.pool: 3\n",
            "nats.cluster.pool_size: 33\n",
            "nats.cluster.pool_size: many\n",
        ] {
            let e = yaml(bad).unwrap_err().to_string();
            assert!(e.contains("nats.cluster"), "{bad}: {e}");
        }
    }

    #[test]
    fn nats_websocket_keys() {
        let c = yaml(
            "nats:\n  websocket:\n    listen: 127.0.0.1:8443\n    no_tls: true\n    compression: true\n    same_origin: true\n    allowed_origins: [https://app.example.com]\n    handshake_timeout: 5s\n",
        )
        .unwrap();
        let w = &c.nats.websocket;
        assert_eq!(w.listen.as_deref(), Some("127.0.0.1:8443"));
        assert_eq!(
            (w.no_tls, w.compression, w.same_origin),
            (Some(true), Some(true), Some(true))
        );
        assert_eq!(
            w.allowed_origins.as_deref(),
            Some(&["https://app.example.com".to_string()][..])
        );
        assert_eq!(w.handshake_timeout, Some(Duration::from_secs(5)));
        for bad in [
            "nats.websocket.listen: nowhere\n",
            "nats.websocket.allowed_origins: app.example.com\n",
            "nats.websocket.compression: maybe\n",
            "nats.websocket.headers: x\n",
        ] {
            let e = yaml(bad).unwrap_err().to_string();
            assert!(e.contains("nats.websocket"), "{bad}: {e}");
        }
    }

    fn yaml(text: &str) -> Result<LiftbridgeConfig, ConfigError> {
        from_yaml_str(text, Path::new("test.yaml"))
    }

    #[test]
    fn defaults() {
        let c = LiftbridgeConfig::default();
        assert_eq!(c.listen, "0.0.0.0:9292");
        assert_eq!(c.port, 9292);
        assert_eq!(c.data_dir, PathBuf::from("./data"));
        assert!(c.nats.embedded);
        assert_eq!(c.nats.listen, "0.0.0.0:4222");
        assert_eq!(c.http.listen, "0.0.0.0:8222");
        assert_eq!(c.store.sync, SyncPolicy::Always);
        assert_eq!(c.store.sync_interval, Duration::from_millis(100));
        assert_eq!(c.store.cache_size, 8 << 20);
        assert_eq!(
            c.streams.retention_max_age,
            Duration::from_secs(7 * 24 * 3600)
        );
        assert_eq!(c.streams.segment_max_age, c.streams.retention_max_age);
        assert_eq!(c.clustering.namespace, "liftbridge-default");
        assert_eq!(c.cursors.stream_replication_factor, -1);
        assert_eq!(c.activity.stream_publish_ack_policy, ActivityAckPolicy::All);
        assert!(c.raft_bootstrap());
        // A wildcard listen address advertises `localhost`, as Liftbridge.
        assert_eq!(c.advertised_host(), "localhost");
        assert!(c.listen_is_default());
        // Loading nothing gives the defaults.
        let loaded = load_with_env(&LiftbridgeFlags::default(), |_| None).unwrap();
        assert_eq!(loaded, c);
    }

    #[test]
    fn flat_nested_and_mixed_are_equal() {
        let flat = yaml(
            "streams.retention.max.age: 24h\nstreams.compact.enabled: true\nlogging.level: debug\n",
        )
        .unwrap();
        let nested =
            yaml("streams:\n  retention:\n    max:\n      age: 24h\n  compact:\n    enabled: true\nlogging:\n  level: debug\n")
                .unwrap();
        let mixed = yaml("streams:\n  retention.max.age: 24h\n  compact: {enabled: true}\nlogging: {level: debug}\n").unwrap();
        assert_eq!(flat.streams.retention_max_age, Duration::from_secs(86_400));
        assert!(flat.streams.compact_enabled);
        assert_eq!(flat.logging.level, LogLevel::Debug);
        assert_eq!(flat, nested);
        assert_eq!(flat, mixed);
        // The segment age follows the retention age unless set.
        assert_eq!(flat.streams.segment_max_age, Duration::from_secs(86_400));
    }

    #[test]
    fn gufo_harness_config_loads() {
        let c = yaml("listen: 127.0.0.1:9292\ncursors:\n  stream.auto.pause.time: 0\n  stream.partitions: 1\n").unwrap();
        assert_eq!(c.listen, "127.0.0.1:9292");
        assert_eq!(c.port, 9292);
        assert_eq!(c.advertised_host(), "127.0.0.1");
        assert!(!c.listen_is_default());
        assert_eq!(c.cursors.stream_auto_pause_time, Duration::ZERO);
        assert_eq!(c.cursors.stream_partitions, 1);
    }

    #[test]
    fn liftbridge_dev_standalone_config_loads() {
        let c = yaml(
            "host: 0.0.0.0\nclustering.raft.bootstrap.seed: true\nnats.embedded.config: /etc/nats.conf\n\
             nats.embedded: false\nlogging:\n  level: debug\n  raft: true\n",
        )
        .unwrap();
        assert!(c.clustering.raft_bootstrap_seed);
        // The embedded config implies embedded.
        assert!(c.nats.embedded);
        assert_eq!(
            c.nats.embedded_config,
            Some(PathBuf::from("/etc/nats.conf"))
        );
        assert!(c.logging.raft);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = yaml("streams:\n  retention:\n    max:\n      agee: 1h\n").unwrap_err();
        match &e {
            ConfigError::UnknownKey { key, origin } => {
                assert_eq!(key, "streams.retention.max.agee");
                assert_eq!(origin, "test.yaml");
            }
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().contains("streams.retention.max.agee"));
        assert!(e.to_string().contains("test.yaml"));
        assert!(
            matches!(yaml("bogus: 1\n"), Err(ConfigError::UnknownKey { key, .. }) if key == "bogus")
        );
        assert!(matches!(yaml("- a\n- b\n"), Err(ConfigError::Shape { .. })));
        assert!(matches!(yaml("a: [\n"), Err(ConfigError::Yaml { .. })));
    }

    #[test]
    fn store_cache_size_takes_size_suffixes() {
        for (text, want) in [
            ("store.cache.size: 1048576", 1 << 20),
            ("store.cache.size: 4MB", 4 << 20),
            ("store.cache.size: 512KiB", 512 << 10),
            ("store: {cache: {size: 2G}}", 2_000_000_000),
        ] {
            assert_eq!(yaml(text).unwrap().store.cache_size, want, "{text}");
        }
    }

    #[test]
    fn recorder_max_pending_is_a_size_of_at_least_1mb() {
        let d = yaml("port: 9292\n").unwrap().nats.recorder_max_pending;
        assert_eq!(d, 32 << 20);
        for (text, want) in [
            ("nats.recorder.max.pending: 8MB", 8u64 << 20),
            ("nats.recorder.max.pending: 1048576", 1 << 20),
            ("nats: {recorder: {max: {pending: 2GB}}}", 2 << 30),
        ] {
            assert_eq!(
                yaml(text).unwrap().nats.recorder_max_pending,
                want,
                "{text}"
            );
        }
        for bad in [
            "nats.recorder.max.pending: 4096",
            "nats.recorder.max.pending: lots",
            "nats.recorder.max.pending: -1",
        ] {
            let e = yaml(bad).unwrap_err();
            assert!(matches!(e, ConfigError::BadValue { .. }), "{bad}: {e}");
            assert!(e.to_string().contains("nats.recorder.max.pending"), "{e}");
        }
    }

    #[test]
    fn bad_values_name_key_and_value() {
        let e = yaml("streams.retention.max.age: forever\n").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("streams.retention.max.age") && msg.contains("forever"),
            "{msg}"
        );
        for bad in [
            "port: 70000",
            "port: abc",
            "nats.embedded: maybe",
            "logging.level: loud",
            "store.sync: sometimes",
            "store.cache.size: lots",
            "store.cache.size: 4XB",
            "store.cache.size: -1",
            "clustering.server.id: a.b",
            "streams.segment.max.age: 10ms",
            "activity.stream.publish.ack.policy: most",
            "cursors.stream.replication.factor: 0",
            "listen: nohost",
            "data.dir: \"\"",
            "clustering.min.insync.replicas: 0",
        ] {
            assert!(
                matches!(yaml(bad), Err(ConfigError::BadValue { .. })),
                "{bad} must be rejected"
            );
        }
    }

    #[test]
    fn go_durations() {
        let d = |s| parse_go_duration(s).unwrap();
        assert_eq!(d("24h"), Duration::from_secs(86_400));
        assert_eq!(d("15s"), Duration::from_secs(15));
        assert_eq!(d("500ms"), Duration::from_millis(500));
        assert_eq!(d("1h30m"), Duration::from_secs(5400));
        assert_eq!(d("1.5s"), Duration::from_millis(1500));
        assert_eq!(d("2m3.5s"), Duration::from_millis(123_500));
        assert_eq!(d("10us"), Duration::from_micros(10));
        assert_eq!(d("10µs"), Duration::from_micros(10));
        assert_eq!(d("7ns"), Duration::from_nanos(7));
        assert_eq!(d("0"), Duration::ZERO);
        assert_eq!(d("1500"), Duration::from_nanos(1500));
        assert_eq!(d(".5h"), Duration::from_secs(1800));
        for bad in [
            "",
            "-1s",
            "1",
            "1x",
            "h",
            "1.s2",
            "s",
            "99999999999999999999h",
        ] {
            if bad == "1" {
                continue; // a bare integer is nanoseconds
            }
            assert!(parse_go_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn env_overrides_file_and_flags_override_env() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("lb.yaml");
        std::fs::write(
            &file,
            "port: 1000\nstreams.retention.max.age: 1h\nlogging.level: warn\nclustering:\n  namespace: fromfile\n",
        )
        .unwrap();
        let env: HashMap<String, String> = [
            ("LIFTBRIDGE_STREAMS_RETENTION_MAX_AGE", "2h"),
            ("LIFTBRIDGE_LOGGING_LEVEL", "error"),
            ("LIFTBRIDGE_NATS_SERVERS", "nats://a:1, nats://b:2"),
            ("LIFTBRIDGE_CURSORS_STREAM_PARTITIONS", "3"),
            ("LIFTBRIDGE_PORT", "2000"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut flags = LiftbridgeFlags {
            config: Some(file.clone()),
            ..Default::default()
        };
        let c = load_with_env(&flags, |k| env.get(k).cloned()).unwrap();
        assert_eq!(c.streams.retention_max_age, Duration::from_secs(7200));
        assert_eq!(c.logging.level, LogLevel::Error);
        assert_eq!(c.nats.servers, vec!["nats://a:1", "nats://b:2"]);
        assert_eq!(c.cursors.stream_partitions, 3);
        assert_eq!(c.clustering.namespace, "fromfile");
        assert_eq!((c.port, c.listen.as_str()), (2000, "0.0.0.0:2000"));

        flags.level = Some("debug".into());
        flags.port = Some(3000);
        flags.namespace = Some("fromflag".into());
        flags.data_dir = Some(PathBuf::from("/tmp/x"));
        flags.nats_port = Some(0);
        flags.http_port = Some(8000);
        flags.raft_bootstrap_seed = true;
        flags.embedded_nats = Some(false);
        let c = load_with_env(&flags, |k| env.get(k).cloned()).unwrap();
        assert_eq!(c.logging.level, LogLevel::Debug);
        assert_eq!((c.port, c.listen.as_str()), (3000, "0.0.0.0:3000"));
        assert_eq!(c.clustering.namespace, "fromflag");
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.nats.listen, "0.0.0.0:0");
        assert_eq!(c.http.listen, "0.0.0.0:8000");
        assert!(c.clustering.raft_bootstrap_seed);
        assert!(!c.nats.embedded);

        // Bad environment values name the variable.
        let e = load_with_env(&LiftbridgeFlags::default(), |k| {
            (k == "LIFTBRIDGE_STREAMS_COMPACT_ENABLED").then(|| "perhaps".to_string())
        })
        .unwrap_err();
        assert!(
            e.to_string().contains("LIFTBRIDGE_STREAMS_COMPACT_ENABLED"),
            "{e}"
        );
        // A missing file is an error naming it.
        let missing = LiftbridgeFlags {
            config: Some(dir.path().join("nope.yaml")),
            ..Default::default()
        };
        assert!(matches!(
            load_with_env(&missing, |_| None),
            Err(ConfigError::Read { .. })
        ));
    }

    #[test]
    fn listen_forms() {
        assert_eq!(yaml("listen: 9000\n").unwrap().listen, "0.0.0.0:9000");
        assert_eq!(yaml("listen: \":9001\"\n").unwrap().port, 9001);
        let c = yaml("port: 9100\n").unwrap();
        assert_eq!(c.listen, "0.0.0.0:9100");
        // Neither listen nor host: both address families, `localhost`.
        assert!(c.listen_is_default());
        assert_eq!(c.advertised_host(), "localhost");
        // A configured wildcard is bound as given (IPv4 only), and a
        // configured host keeps the listener as it was.
        let c = yaml("listen: 0.0.0.0:9000\n").unwrap();
        assert!(!c.listen_is_default());
        assert_eq!(c.advertised_host(), "localhost");
        let c = yaml("host: lb.example\n").unwrap();
        assert!(!c.listen_is_default());
        assert_eq!(c.advertised_host(), "lb.example");
        let c = yaml("listen: 10.0.0.1:9200\nhost: lb.example\n").unwrap();
        assert_eq!(c.advertised_host(), "lb.example");
        assert_eq!(c.port, 9200);
        assert_eq!(
            yaml("nats.listen: 127.0.0.1:0\n").unwrap().nats.listen,
            "127.0.0.1:0"
        );
    }

    /// `http.auth.*` and `http.tls.*`: nested or flat, from the
    /// environment, with values checked.
    #[test]
    fn http_auth_and_tls_keys() {
        let c = LiftbridgeConfig::default();
        assert!(c.http.auth_open_metrics);
        assert!(!c.http.auth_open_reads);
        assert_eq!(c.http.auth_token, None);
        let nested = yaml(
            "http:\n  listen: 127.0.0.1:9000\n  auth:\n    token: s3cret\n    username: admin\n    password: pw\n    open_metrics: false\n    open_reads: true\n  tls:\n    cert: /c.pem\n    key: /k.pem\n",
        )
        .unwrap();
        let flat = yaml(
            "http.listen: 127.0.0.1:9000\nhttp.auth.token: s3cret\nhttp.auth.username: admin\nhttp.auth.password: pw\nhttp.auth.open_metrics: false\nhttp.auth.open_reads: true\nhttp.tls.cert: /c.pem\nhttp.tls.key: /k.pem\n",
        )
        .unwrap();
        assert_eq!(nested, flat);
        let h = &nested.http;
        assert_eq!(h.auth_token.as_deref(), Some("s3cret"));
        assert_eq!(h.auth_username.as_deref(), Some("admin"));
        assert_eq!(h.auth_password.as_deref(), Some("pw"));
        assert!(!h.auth_open_metrics && h.auth_open_reads);
        assert_eq!(h.tls_cert.as_deref(), Some(Path::new("/c.pem")));
        assert_eq!(h.tls_key.as_deref(), Some(Path::new("/k.pem")));
        // Secrets never show in debug output.
        let shown = format!("{nested:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("\"pw\""),
            "{shown}"
        );

        let env: HashMap<&str, &str> = [
            ("LIFTBRIDGE_HTTP_AUTH_TOKEN", "fromenv"),
            ("LIFTBRIDGE_HTTP_AUTH_OPEN_READS", "true"),
            ("LIFTBRIDGE_HTTP_TLS_CERT", "/e.pem"),
        ]
        .into_iter()
        .collect();
        let c = load_with_env(&LiftbridgeFlags::default(), |k| {
            env.get(k).map(|v| v.to_string())
        })
        .unwrap();
        assert_eq!(c.http.auth_token.as_deref(), Some("fromenv"));
        assert!(c.http.auth_open_reads);
        assert_eq!(c.http.tls_cert.as_deref(), Some(Path::new("/e.pem")));

        let e = yaml("http.auth.open_metrics: maybe\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("http.auth.open_metrics") && e.contains("maybe"),
            "{e}"
        );
        let e = yaml("http.auth.username: a:b\n").unwrap_err().to_string();
        assert!(e.contains("http.auth.username"), "{e}");
        let e = yaml("http:\n  auth:\n    tokn: x\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("http.auth.tokn"), "{e}");
    }

    /// Every key in `KEYS` has a setter and an environment variable.
    #[test]
    fn every_key_is_settable_from_env() {
        for key in KEYS {
            let samples = [
                "1",
                "true",
                "1s",
                "x",
                "127.0.0.1:1",
                "always",
                "all",
                "info",
                "https://a.example.com",
                "64MB",
            ];
            let ok = samples.iter().any(|v| {
                load_with_env(&LiftbridgeFlags::default(), |k| {
                    (k == env_var_name(key)).then(|| v.to_string())
                })
                .is_ok()
            });
            assert!(ok, "no sample value accepted for {key}");
            let mut b = Builder::default();
            // Whatever the value, the key must be known (not an "unknown key" or "no setter").
            match b.set(key, &Raw::Scalar("1".into()), "t") {
                Ok(()) => {}
                Err(ConfigError::BadValue { reason, .. }) => {
                    assert!(!reason.contains("no setter"), "{key}")
                }
                Err(e) => panic!("{key}: {e}"),
            }
        }
        assert_eq!(
            env_var_name("streams.retention.max.age"),
            "LIFTBRIDGE_STREAMS_RETENTION_MAX_AGE"
        );
    }

    #[test]
    fn empty_file_and_null_values_keep_defaults() {
        assert_eq!(yaml("").unwrap(), LiftbridgeConfig::default());
        assert_eq!(
            yaml("nats:\n  user:\n").unwrap(),
            LiftbridgeConfig::default()
        );
    }

    #[test]
    fn raft_bootstrap_mode_follows_seed_peers_and_routes() {
        assert_eq!(yaml("").unwrap().raft_bootstrap_mode(), RaftBootstrap::Seed);
        let routes = "nats.cluster.routes: [nats-route://127.0.0.1:6222]\n";
        let c = yaml(routes).unwrap();
        assert_eq!(c.raft_bootstrap_mode(), RaftBootstrap::Join);
        assert!(!c.raft_bootstrap(), "a node with routes waits to join");
        let c = yaml(&format!("{routes}clustering.raft.bootstrap.seed: true\n")).unwrap();
        assert_eq!(c.raft_bootstrap_mode(), RaftBootstrap::Seed);
        let c = yaml(&format!(
            "{routes}clustering.raft.bootstrap.peers: [b, a]\n"
        ))
        .unwrap();
        assert_eq!(
            c.raft_bootstrap_mode(),
            RaftBootstrap::Peers(vec!["b".into(), "a".into()])
        );
        // A cluster block of nats.embedded.config counts as routes.
        assert_eq!(
            yaml("").unwrap().raft_bootstrap_mode_with(true),
            RaftBootstrap::Join
        );
        let c = yaml(
            "clustering.raft.heartbeat.interval: 50ms\nclustering.raft.election.timeout: 500ms\n",
        )
        .unwrap();
        assert_eq!(
            c.clustering.raft_heartbeat_interval,
            Duration::from_millis(50)
        );
        assert_eq!(
            c.clustering.raft_election_timeout,
            Duration::from_millis(500)
        );
        assert!(yaml("clustering.raft.election.timeout: 5ms\n").is_err());
    }

    #[test]
    fn packaged_example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/liftbridge.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let c = from_yaml_str(&text, &path).unwrap();
        // The example lists the defaults, except the packaged data directory.
        let mut expected = LiftbridgeConfig {
            data_dir: PathBuf::from("/var/lib/liftbridge"),
            explicit_keys: c.explicit_keys.clone(),
            ..Default::default()
        };
        expected.nats.listen_explicit = true;
        expected.http.listen_explicit = true;
        assert_eq!(c, expected);
        // It sets no key without effect (those are commented out) and none
        // that is refused.
        assert_eq!(crate::config::audit::audit(&c), Ok(vec![]));
        // And it mentions every key (set or commented out).
        for key in KEYS {
            assert!(
                text.contains(&format!("{key}:")),
                "example config does not mention {key}"
            );
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// Values of every shape a YAML scalar or collection can take,
        /// including ones no key accepts.
        fn any_value() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("".to_string()),
                Just("~".to_string()),
                Just("[]".to_string()),
                Just("{}".to_string()),
                Just("[a, 1, {b: c}]".to_string()),
                Just("{x: 1}".to_string()),
                any::<i64>().prop_map(|n| n.to_string()),
                any::<bool>().prop_map(|b| b.to_string()),
                "[0-9]{1,4}(ns|us|ms|s|m|h|KB|MB|GB|x)?",
                "\"\\PC{0,12}\"",
                "[a-z0-9.:/_-]{0,16}",
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Arbitrary text is a configuration or an error, never a panic.
            #[test]
            fn any_text_never_panics(text in "\\PC{0,200}") {
                let _ = from_yaml_str(&text, Path::new("p.yaml"));
            }

            /// Every known key with a value of any shape, flat or nested,
            /// is accepted or refused with an error: never a panic.
            #[test]
            fn known_keys_with_any_value_never_panic(
                entries in proptest::collection::vec(
                    (proptest::sample::select(KEYS), any_value(), any::<bool>()), 0..6),
            ) {
                let mut text = String::new();
                for (key, value, nested) in &entries {
                    match key.split_once('.') {
                        Some((head, rest)) if *nested => {
                            text.push_str(&format!("{head}:\n  {rest}: {value}\n"));
                        }
                        _ => text.push_str(&format!("{key}: {value}\n")),
                    }
                }
                let _ = from_yaml_str(&text, Path::new("p.yaml"));
            }

            /// Values written to a file are the values loaded, for keys of
            /// each kind (number, size, duration, boolean, choice, path).
            #[test]
            fn valid_values_round_trip(
                port in 1u16..,
                max_messages in 0i64..1_000_000_000,
                max_bytes in 0i64..1_000_000_000,
                age_s in 1u64..1_000_000,
                compact in any::<bool>(),
                level in proptest::sample::select(vec!["debug", "info", "warn", "error"]),
                dir in "/[a-z0-9_]{1,12}(/[a-z0-9_]{1,12}){0,2}",
            ) {
                let text = format!(
                    "port: {port}\ndata.dir: {dir}\nstreams.retention.max.messages: {max_messages}\n\
                     streams.retention.max.bytes: {max_bytes}\nstreams.retention.max.age: {age_s}s\n\
                     streams.compact.enabled: {compact}\nlogging.level: {level}\n"
                );
                let c = from_yaml_str(&text, Path::new("p.yaml")).unwrap();
                prop_assert_eq!(c.port, port);
                prop_assert_eq!(c.data_dir, PathBuf::from(&dir));
                prop_assert_eq!(c.streams.retention_max_messages, max_messages);
                prop_assert_eq!(c.streams.retention_max_bytes, max_bytes);
                prop_assert_eq!(c.streams.retention_max_age, Duration::from_secs(age_s));
                prop_assert_eq!(c.streams.compact_enabled, compact);
                prop_assert_eq!(format!("{:?}", c.logging.level).to_lowercase(), level);
            }
        }
    }
}
