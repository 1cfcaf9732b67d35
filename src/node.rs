//! One liftbridge node: embedded NATS, metadata, partitions and the gRPC API
//! wired together, with one start and one shutdown path.
//!
//! Start order matters: NATS first (the stenographers subscribe through it,
//! and Raft talks to the other nodes over its routes), then the gRPC and
//! HTTP listeners are bound (their ports are advertised in the metadata,
//! with the host from `config::liftbridge::advertise_host`), then the
//! metadata group (which registers this node as a broker — at once on a
//! lone node, in the background on a node that joins a cluster), the
//! partition manager (which starts the partitions this node leads), the
//! internal `__cursors` stream (created before serving by a controller, in
//! the background otherwise), and finally the gRPC and HTTP servers. Shutdown runs in the
//! reverse order so no acknowledged write is cut short: the API stops
//! taking requests, partitions close their logs (durable commit), the
//! metadata group stops, then NATS.
//!
//! The node always embeds its NATS server: the log layer talks to NATS
//! through the in-process client, never through TCP to itself.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::api::proto::server::api_server::ApiServer;
use crate::api::service::ApiService;
use crate::cluster::{
    Bootstrap, ClusterOptions, MetaError, Metadata, MetadataOptions, NodeInfo, StreamConfig,
};
use crate::config::liftbridge::{advertise_host, LiftbridgeConfig, RaftBootstrap};
use crate::config::NatsOptions;
use crate::nats::NatsServer;
use crate::partition::{ManagerTasks, PartitionDefaults, PartitionManager};
use crate::service::{CreateStream, Service, ServiceError, ServiceOptions, CURSORS_STREAM};

/// Largest gRPC message accepted or sent (clients default to 16 MiB).
const MAX_GRPC_MESSAGE: usize = 16 * 1024 * 1024;
/// HTTP/2 receive window per gRPC stream (h2 default: 64 KiB).
const GRPC_STREAM_WINDOW: u32 = 4 << 20;
/// HTTP/2 receive window per gRPC connection, shared by its streams.
const GRPC_CONNECTION_WINDOW: u32 = 16 << 20;
/// Largest HTTP/2 frame a client may send (h2 default: 16 KiB). Clients
/// hand over their request streams in chunks of 16 KiB and a bit more (one
/// more message past the threshold); with 16 KiB frames every chunk became
/// two frames, two writes and two reads.
const GRPC_MAX_FRAME: u32 = 64 << 10;

/// TLS settings of the gRPC listener.
#[derive(Debug, Clone, Default)]
pub struct GrpcTls {
    /// Server certificate chain (PEM).
    pub cert: PathBuf,
    /// Server private key (PEM).
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA (mTLS).
    pub client_ca: Option<PathBuf>,
}

/// TLS of the HTTP port (`http.tls.*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpTls {
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
}

/// Everything a node needs to start (built from the liftbridge config).
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Data directory (`data.dir`).
    pub data_dir: PathBuf,
    /// gRPC listen host (`listen`). Empty when neither `listen` nor `host`
    /// is configured: every address of both families (see `bind_grpc`),
    /// advertised as `localhost`.
    pub listen_host: String,
    /// gRPC listen port (`port`; 0 = any free port).
    pub port: u16,
    /// Host advertised to clients (`host`); empty = derived from
    /// `listen_host` (`config::liftbridge::advertise_host`).
    pub advertise_host: String,
    /// Server id (`clustering.server.id`); empty = stored or random.
    pub server_id: String,
    /// `clustering.namespace`.
    pub namespace: String,
    /// How the node enters the metadata group
    /// (`LiftbridgeConfig::raft_bootstrap_mode`).
    pub bootstrap: RaftBootstrap,
    /// `clustering.raft.max.quorum.size` (0 = no limit).
    pub max_quorum_size: u32,
    /// Raft timings and snapshot threshold.
    pub raft: MetadataOptions,
    /// Options of the embedded NATS server (its `http` is ignored: the node
    /// serves HTTP itself, see `http`).
    pub nats: NatsOptions,
    /// External NATS mode (`nats.embedded: false` or `nats.servers`): the
    /// embedded server runs without a client listener, bridged to these
    /// servers (see `nats::external`).
    pub external_nats: Option<crate::config::external::ExternalNatsOptions>,
    /// HTTP listener (monitoring, admin JSON); `None` = off, port 0 = any.
    pub http: Option<(String, u16)>,
    /// Credentials the HTTP port requires (`http.auth.*`; none = open).
    pub http_auth: crate::http::AuthConfig,
    /// HTTPS on the HTTP port (`http.tls.*`).
    pub http_tls: Option<HttpTls>,
    /// TLS for the gRPC API.
    pub tls: Option<GrpcTls>,
    /// Authorization of gRPC calls (`tls.client.authz.*`); needs `tls`
    /// with a client CA (the identity is the certificate's common name).
    pub authz: Option<crate::api::authz::AuthzFiles>,
    /// The activity stream (`activity.stream.*`), when enabled.
    pub activity: Option<crate::service::activity::ActivityOptions>,
    /// Partition defaults (`streams.*`, durability, size limit).
    pub partitions: PartitionDefaults,
    /// `cursors.stream.partitions` (0 = no cursors stream).
    pub cursor_partitions: i32,
    /// `cursors.stream.auto.pause.time`.
    pub cursor_auto_pause: Duration,
    /// `cursors.stream.replication.factor` (-1 = every server).
    pub cursor_replication_factor: i32,
    /// `groups.consumer.timeout`.
    pub consumer_timeout: Duration,
    /// `groups.coordinator.timeout`.
    pub coordinator_timeout: Duration,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            data_dir: PathBuf::from("./data"),
            listen_host: String::new(),
            port: 9292,
            advertise_host: String::new(),
            server_id: String::new(),
            namespace: "liftbridge-default".into(),
            bootstrap: RaftBootstrap::Seed,
            max_quorum_size: 0,
            raft: MetadataOptions::default(),
            nats: NatsOptions::default(),
            external_nats: None,
            http: None,
            http_auth: crate::http::AuthConfig::default(),
            http_tls: None,
            tls: None,
            authz: None,
            activity: None,
            partitions: PartitionDefaults::default(),
            cursor_partitions: 0,
            cursor_auto_pause: Duration::from_secs(60),
            cursor_replication_factor: -1,
            consumer_timeout: Duration::from_secs(15),
            coordinator_timeout: Duration::from_secs(15),
        }
    }
}

/// Maps `nats.websocket.*` over the embedded server's options (over a
/// `websocket {}` block of `nats.embedded.config`, key by key).
fn apply_websocket(
    c: &crate::config::liftbridge::NatsWebsocketConfig,
    nats: &mut NatsOptions,
) -> Result<(), NodeError> {
    use crate::config::nats::{parse_cluster_listen, parse_ws_origin, TlsFiles, WebsocketOptions};
    if !c.any() {
        return Ok(());
    }
    if nats.websocket.is_none() && c.listen.is_none() {
        return Err(NodeError::Config(
            "nats.websocket.* needs nats.websocket.listen".into(),
        ));
    }
    // A block from the file was validated there (TLS or no_tls); one made
    // here must say which.
    let created = nats.websocket.is_none();
    let o = nats.websocket.get_or_insert_with(WebsocketOptions::default);
    if let Some(l) = &c.listen {
        let (h, p) = parse_cluster_listen(l).ok_or_else(|| {
            NodeError::Config(format!("nats.websocket.listen: bad address {l:?}"))
        })?;
        o.host = h;
        o.port = p;
    }
    match (&c.tls_cert, &c.tls_key) {
        (Some(cert), Some(key)) => {
            o.tls = Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ..TlsFiles::default()
            })
        }
        (None, None) => {}
        _ => {
            return Err(NodeError::Config(
                "nats.websocket.tls needs both nats.websocket.tls.cert and nats.websocket.tls.key"
                    .into(),
            ))
        }
    }
    if c.no_tls == Some(true) && o.tls.is_some() {
        return Err(NodeError::Config(
            "nats.websocket.no_tls: true contradicts a websocket TLS certificate".into(),
        ));
    }
    if created && o.tls.is_none() && c.no_tls != Some(true) {
        return Err(NodeError::Config(
            "nats.websocket requires TLS (nats.websocket.tls.cert/key) or nats.websocket.no_tls: true"
                .into(),
        ));
    }
    if let Some(v) = c.compression {
        o.compression = v;
    }
    if let Some(v) = c.same_origin {
        o.same_origin = v;
    }
    if let Some(list) = &c.allowed_origins {
        o.allowed_origins = list
            .iter()
            .map(|s| {
                parse_ws_origin(s).map_err(|why| {
                    NodeError::Config(format!(
                        "nats.websocket.allowed_origins: unable to parse allowed origin {s:?}: {why}"
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(d) = c.handshake_timeout.filter(|d| !d.is_zero()) {
        o.handshake_timeout = d;
    }
    Ok(())
}

/// Maps `nats.cluster.*` over the embedded server's options (over a
/// `cluster {}` block of `nats.embedded.config`, key by key).
fn apply_cluster(
    c: &crate::config::liftbridge::NatsClusterConfig,
    nats: &mut NatsOptions,
) -> Result<(), NodeError> {
    use crate::config::nats::{parse_cluster_listen, ClusterAuth, ClusterOptions, TlsFiles};
    let any = c.enabled()
        || c.name.is_some()
        || c.pool_size.is_some()
        || c.compression.is_some()
        || c.advertise.is_some()
        || c.auth_user.is_some()
        || c.tls_cert.is_some();
    if !any {
        return Ok(());
    }
    if nats.cluster.is_none() && !c.enabled() {
        return Err(NodeError::Config(
            "nats.cluster.* needs nats.cluster.listen or nats.cluster.routes".into(),
        ));
    }
    let o = nats.cluster.get_or_insert_with(ClusterOptions::default);
    if let Some(n) = &c.name {
        o.name = Some(n.clone());
    }
    if let Some(l) = &c.listen {
        let (h, p) = parse_cluster_listen(l)
            .ok_or_else(|| NodeError::Config(format!("nats.cluster.listen: bad address {l:?}")))?;
        o.host = h;
        o.port = p;
    }
    if !c.routes.is_empty() {
        o.routes = c.routes.clone();
    }
    if let Some(a) = &c.advertise {
        o.advertise = Some(a.clone());
    }
    if let Some(n) = c.pool_size {
        o.pool_size = n;
    }
    if let Some(m) = &c.compression {
        o.compression = m.clone();
    }
    match (&c.auth_user, &c.auth_password) {
        (Some(u), p) => {
            o.auth = Some(ClusterAuth {
                user: u.clone(),
                password: p.clone().unwrap_or_default(),
            })
        }
        (None, Some(_)) => {
            return Err(NodeError::Config(
                "nats.cluster.auth.password needs nats.cluster.auth.user".into(),
            ))
        }
        (None, None) => {}
    }
    match (&c.tls_cert, &c.tls_key) {
        (Some(cert), Some(key)) => {
            if c.tls_ca.is_none() {
                return Err(NodeError::Config(
                    "nats.cluster.tls needs nats.cluster.tls.ca to verify peer nodes".into(),
                ));
            }
            o.tls = Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: c.tls_ca.clone(),
                verify: true,
                params: Default::default(),
                handshake_first: None,
            });
        }
        (None, None) if c.tls_ca.is_none() => {}
        _ => {
            return Err(NodeError::Config(
                "nats.cluster.tls.cert, nats.cluster.tls.key and nats.cluster.tls.ca go together"
                    .into(),
            ))
        }
    }
    Ok(())
}

/// Maps `nats.leafnodes.*` over the embedded server's options (over a
/// `leafnodes {}` block of `nats.embedded.config`, key by key).
fn apply_leafnodes(
    c: &crate::config::liftbridge::NatsLeafConfig,
    nats: &mut NatsOptions,
) -> Result<(), NodeError> {
    use crate::config::nats::{
        parse_cluster_listen, LeafRemote, LeafUser, LeafnodeOptions, TlsFiles,
    };
    if *c == crate::config::liftbridge::NatsLeafConfig::default() {
        return Ok(());
    }
    if nats.leafnodes.is_none() && c.listen.is_none() && c.remotes.is_empty() {
        return Err(NodeError::Config(
            "nats.leafnodes.* needs nats.leafnodes.listen or nats.leafnodes.remotes".into(),
        ));
    }
    let o = nats.leafnodes.get_or_insert_with(LeafnodeOptions::default);
    if let Some(l) = &c.listen {
        let (h, p) = parse_cluster_listen(l).ok_or_else(|| {
            NodeError::Config(format!("nats.leafnodes.listen: bad address {l:?}"))
        })?;
        o.host = h;
        o.port = Some(p);
    }
    if let Some(a) = &c.advertise {
        o.advertise = Some(a.clone());
    }
    if let Some(r) = c.reconnect {
        o.reconnect = r;
    }
    let remote_tls = c.remote_tls_ca.as_ref().map(|ca| TlsFiles {
        ca: Some(ca.clone()),
        ..TlsFiles::default()
    });
    if !c.remotes.is_empty() {
        o.remotes = c
            .remotes
            .iter()
            .map(|u| LeafRemote {
                urls: vec![u.clone()],
                tls: remote_tls.clone(),
                ..LeafRemote::default()
            })
            .collect();
    } else if remote_tls.is_some() {
        return Err(NodeError::Config(
            "nats.leafnodes.remote.tls.ca needs nats.leafnodes.remotes".into(),
        ));
    }
    match (&c.auth_user, &c.auth_password) {
        (Some(u), p) => {
            o.users = vec![LeafUser {
                user: u.clone(),
                password: p.clone().unwrap_or_default(),
                account: None,
            }]
        }
        (None, Some(_)) => {
            return Err(NodeError::Config(
                "nats.leafnodes.auth.password needs nats.leafnodes.auth.user".into(),
            ))
        }
        (None, None) => {}
    }
    match (&c.tls_cert, &c.tls_key) {
        (Some(cert), Some(key)) => {
            o.tls = Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: c.tls_ca.clone(),
                verify: c.tls_ca.is_some(),
                params: Default::default(),
                handshake_first: None,
            });
        }
        (None, None) if c.tls_ca.is_none() => {}
        _ => return Err(NodeError::Config(
            "nats.leafnodes.tls.cert and nats.leafnodes.tls.key go together (tls.ca needs both)"
                .into(),
        )),
    }
    Ok(())
}

/// Splits `host:port` (IPv6 in brackets allowed); a bare port means all
/// interfaces.
fn split_listen(s: &str, default_port: u16) -> (String, u16) {
    if let Ok(p) = s.parse::<u16>() {
        return ("0.0.0.0".into(), p);
    }
    match s.rsplit_once(':') {
        Some((h, p)) => {
            let h = h.trim_start_matches('[').trim_end_matches(']');
            (h.to_string(), p.parse().unwrap_or(default_port))
        }
        None => (s.to_string(), default_port),
    }
}

impl NodeConfig {
    /// Maps the liftbridge configuration onto what the node needs.
    ///
    /// The embedded NATS server always runs (the log reaches NATS in
    /// process); `nats.embedded.config` supplies its options when given,
    /// and `nats.listen` / `http.listen` otherwise.
    pub fn from_liftbridge(c: &LiftbridgeConfig) -> Result<NodeConfig, NodeError> {
        // The loader keeps `listen` and `port` consistent (flags applied).
        let (mut listen_host, port) = split_listen(&c.listen, c.port);
        if c.listen_is_default() {
            listen_host.clear();
        }
        let mut nats = match &c.nats.embedded_config {
            Some(path) => {
                crate::config::nats_conf::load_file(path)
                    .map_err(|e| {
                        NodeError::Config(format!("nats.embedded.config {}: {e}", path.display()))
                    })?
                    .options
            }
            None => {
                let (h, p) = split_listen(&c.nats.listen, crate::config::nats::DEFAULT_PORT);
                NatsOptions {
                    host: h,
                    port: p,
                    ..NatsOptions::default()
                }
            }
        };
        // Given explicitly (`nats.listen`, its env variable or
        // `--nats-port`), the listener overrides the NATS file's: flags
        // override files.
        if c.nats.embedded_config.is_some() && c.nats.listen_explicit {
            let (h, p) = split_listen(&c.nats.listen, crate::config::nats::DEFAULT_PORT);
            nats.host = h;
            nats.port = p;
        }
        apply_cluster(&c.nats.cluster, &mut nats)?;
        apply_websocket(&c.nats.websocket, &mut nats)?;
        apply_leafnodes(&c.nats.leafnodes, &mut nats)?;
        nats.local_max_pending = usize::try_from(c.nats.recorder_max_pending).unwrap_or(usize::MAX);
        nats.local_account = match c.nats.account.as_deref() {
            None | Some(crate::nats::account::GLOBAL_ACCOUNT) => None,
            Some(name) if nats.auth.accounts.iter().any(|a| a.name == name) => {
                Some(name.to_string())
            }
            Some(name) => {
                return Err(NodeError::Config(format!(
                    "nats.account: account {name:?} is not configured (declare it in the accounts block of nats.embedded.config)"
                )))
            }
        };
        // The node serves HTTP itself (one listener for NATS monitoring and
        // the liftbridge endpoints); a monitoring port from the NATS file
        // takes precedence over the default `http.listen`, an explicit one
        // (`http.listen`, `--http-port`) over the file.
        let file_http = nats.http.take();
        let http = match file_http {
            Some(hp) if !c.http.listen_explicit => Some(hp),
            _ if !c.http.listen.is_empty() => Some(split_listen(
                &c.http.listen,
                crate::config::nats::DEFAULT_HTTP_PORT,
            )),
            _ => None,
        };
        let tls = match (&c.tls.cert, &c.tls.key) {
            (Some(cert), Some(key)) => Some(GrpcTls {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: if c.tls.client_auth_enabled {
                    c.tls.client_auth_ca.clone()
                } else {
                    None
                },
            }),
            (None, None) => None,
            _ => {
                return Err(NodeError::Config(
                    "tls.cert and tls.key must be given together".into(),
                ))
            }
        };
        let authz = authz_files(c, tls.as_ref())?;
        let h = &c.http;
        let http_auth = crate::http::AuthConfig {
            token: h.auth_token.clone(),
            username: h.auth_username.clone(),
            password: h.auth_password.clone(),
            open_metrics: h.auth_open_metrics,
            open_reads: h.auth_open_reads,
        };
        http_auth
            .validate()
            .map_err(|e| NodeError::Config(e.to_string()))?;
        let http_tls = match (&h.tls_cert, &h.tls_key) {
            (Some(cert), Some(key)) => Some(HttpTls {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None) => None,
            _ => {
                return Err(NodeError::Config(
                    "http.tls.cert and http.tls.key must be given together".into(),
                ))
            }
        };
        let advertise = advertise_host(&c.host, &listen_host);
        let s = &c.streams;
        let partitions = PartitionDefaults {
            retention_max_bytes: s.retention_max_bytes,
            retention_max_messages: s.retention_max_messages,
            retention_max_age: s.retention_max_age,
            cleaner_interval: s.cleaner_interval,
            compact_enabled: s.compact_enabled,
            auto_pause_time: s.auto_pause_time,
            auto_pause_disable_if_subscribers: s.auto_pause_disable_if_subscribers,
            concurrency_control: s.concurrency_control,
            max_message_bytes: usize::try_from(c.clustering.replication_max_bytes.max(1))
                .unwrap_or(usize::MAX),
            sync: match c.store.sync {
                crate::config::liftbridge::SyncPolicy::Always => crate::store::SyncPolicy::Always,
                crate::config::liftbridge::SyncPolicy::Interval => {
                    crate::store::SyncPolicy::Interval(c.store.sync_interval)
                }
            },
            cache_bytes: usize::try_from(c.store.cache_size).unwrap_or(usize::MAX),
            namespace: c.clustering.namespace.clone(),
            min_insync_replicas: c.clustering.min_insync_replicas.max(1) as usize,
            replica_max_lag_time: c.clustering.replica_max_lag_time,
            replica_max_leader_timeout: c.clustering.replica_max_leader_timeout,
            replica_max_idle_wait: c.clustering.replica_max_idle_wait,
            replica_fetch_timeout: c.clustering.replica_fetch_timeout,
            encryption: s.encryption,
            master_key: match crate::crypt::MasterKey::from_env() {
                Some(Ok(k)) => Some(Arc::new(k)),
                Some(Err(e)) => return Err(NodeError::Config(e.to_string())),
                None if s.encryption => {
                    return Err(NodeError::Config(format!(
                        "streams.encryption needs the master key in {}",
                        crate::crypt::MASTER_KEY_VAR
                    )))
                }
                None => None,
            },
        };
        Ok(NodeConfig {
            data_dir: c.data_dir.clone(),
            listen_host,
            port,
            advertise_host: advertise,
            server_id: c.clustering.server_id.clone(),
            namespace: c.clustering.namespace.clone(),
            bootstrap: c.raft_bootstrap_mode_with(nats.cluster.is_some()),
            max_quorum_size: c.clustering.raft_max_quorum_size,
            raft: MetadataOptions::from_config(c),
            nats,
            external_nats: crate::config::external::from_liftbridge(c)
                .map_err(|e| NodeError::Config(e.to_string()))?,
            http,
            http_auth,
            http_tls,
            tls,
            authz,
            activity: c.activity.stream_enabled.then(|| {
                use crate::config::liftbridge::ActivityAckPolicy as P;
                crate::service::activity::ActivityOptions {
                    publish_timeout: c.activity.stream_publish_timeout,
                    ack_policy: match c.activity.stream_publish_ack_policy {
                        P::None => crate::wire::AckPolicy::None,
                        P::Leader => crate::wire::AckPolicy::Leader,
                        P::All => crate::wire::AckPolicy::All,
                    },
                    subject: format!("{}.activity", c.clustering.namespace),
                }
            }),
            partitions,
            cursor_partitions: c.cursors.stream_partitions,
            cursor_auto_pause: c.cursors.stream_auto_pause_time,
            cursor_replication_factor: c.cursors.stream_replication_factor,
            consumer_timeout: c.groups.consumer_timeout,
            coordinator_timeout: c.groups.coordinator_timeout,
        })
    }
}

/// The authorization files when `tls.client.authz.enabled` is set, after
/// checking that everything it needs is configured: unlike Liftbridge,
/// which quietly serves without authorization when a piece is missing, a
/// missing piece stops the start with the key to set.
fn authz_files(
    c: &LiftbridgeConfig,
    tls: Option<&GrpcTls>,
) -> Result<Option<crate::api::authz::AuthzFiles>, NodeError> {
    let t = &c.tls;
    if !t.client_authz_enabled {
        return Ok(None);
    }
    let need = |what: &str| {
        NodeError::Config(format!(
            "tls.client.authz.enabled needs {what} (clients are identified by their certificate's common name)"
        ))
    };
    let tls = tls.ok_or_else(|| need("tls.cert and tls.key"))?;
    if tls.client_ca.is_none() {
        return Err(need("tls.client.auth.enabled: true and tls.client.auth.ca"));
    }
    let model = t
        .client_authz_model
        .clone()
        .ok_or_else(|| need("tls.client.authz.model"))?;
    let policy = t
        .client_authz_policy
        .clone()
        .ok_or_else(|| need("tls.client.authz.policy"))?;
    Ok(Some(crate::api::authz::AuthzFiles { model, policy }))
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The configuration cannot be used.
    #[error("configuration: {0}")]
    Config(String),
    /// The data directory cannot be created.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The embedded NATS server failed to start.
    #[error("embedded NATS: {0}")]
    Nats(#[from] crate::nats::NatsError),
    /// The external NATS system could not be reached (external mode).
    #[error("external NATS: {0}")]
    ExternalNats(#[from] crate::nats::external::ExternalError),
    /// The gRPC listener could not be bound.
    #[error("gRPC listener {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// TLS files (gRPC `tls.*` or HTTP `http.tls.*`) could not be read or used.
    #[error("TLS: {0}")]
    Tls(String),
    /// The metadata group failed to open.
    #[error("metadata: {0}")]
    Meta(#[from] crate::cluster::MetaError),
    /// The cursors stream could not be created.
    #[error("creating the cursors stream (cursors.stream.*): {0}")]
    Cursors(ServiceError),
    /// The authorization model or policy could not be loaded.
    #[error("authorization: {0}")]
    Authz(#[from] crate::api::authz::AuthzError),
}

/// A running node.
pub struct NodeHandle {
    grpc_addr: SocketAddr,
    nats_addr: SocketAddr,
    nats: NatsServer,
    meta: Metadata,
    parts: PartitionManager,
    tasks: Option<ManagerTasks>,
    /// Creates `__cursors` when this node did not lead at start.
    cursors_task: Option<JoinHandle<()>>,
    /// Publishes the activity stream while this node leads the metadata.
    activity_task: Option<JoinHandle<()>>,
    http: Option<crate::http::HttpServer>,
    stop_grpc: Option<tokio::sync::watch::Sender<bool>>,
    grpc_task: Option<JoinHandle<()>>,
    /// The policy in force when authorization is on.
    authz: Option<Arc<crate::api::authz::Authorizer>>,
}

/// Entry point.
pub struct Node;

/// The embedded NATS server as the source of the monitoring endpoints;
/// `/healthz` also reports the partitions that cannot write here.
struct NatsMonitor(NatsServer, PartitionManager);

impl crate::http::MonitorSource for NatsMonitor {
    fn varz(&self) -> serde_json::Value {
        self.0.varz_json()
    }
    fn connz(&self, query: &str) -> Result<serde_json::Value, String> {
        self.0.connz_json(query)
    }
    fn subsz(&self, query: &str) -> Result<serde_json::Value, String> {
        self.0.subsz_json(query)
    }
    fn healthz(&self) -> serde_json::Value {
        crate::admin::healthz_degraded(&self.1).unwrap_or_else(|| self.0.healthz_json())
    }
    fn routez(&self, query: &str) -> serde_json::Value {
        self.0.routez_json(query)
    }
    fn leafz(&self, query: &str) -> serde_json::Value {
        self.0.leafz_json(query)
    }
}

/// Starts the HTTP listener. The router is built from route sets, one per
/// module: NATS monitoring (`/varz`, `/connz`, `/subsz`, `/healthz`), the
/// admin API (`/api/v1/…`), Prometheus `/metrics` (which also installs the
/// request observer) and the UI; later sets win on conflicting paths. The
/// server checks `http.auth.*` credentials before any route and serves
/// HTTPS only when `http.tls.*` is set. The listener is bound before the
/// metadata group opens (`bind_http`), so the broker entry carries its port.
async fn bind_http(host: &str, port: u16) -> Result<tokio::net::TcpListener, NodeError> {
    let addr = tokio::net::lookup_host((host, port))
        .await
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| NodeError::Config(format!("http.listen {host}:{port} does not resolve")))?;
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| NodeError::Bind {
            addr: addr.to_string(),
            source,
        })
}

async fn start_http(
    cfg: &NodeConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
    listener: tokio::net::TcpListener,
    admin: crate::admin::AdminContext,
    metrics: crate::metrics::NodeMetrics,
) -> Result<crate::http::HttpServer, NodeError> {
    use crate::http::{HttpState, Router};
    let bind_err = |source: std::io::Error| NodeError::Bind {
        addr: admin.addrs.http.to_string(),
        source,
    };
    let nats = admin.nats.clone();
    let router = Router::new()
        .merge(crate::http::monitoring_routes(Arc::new(NatsMonitor(
            nats,
            admin.parts.clone(),
        ))))
        .merge(crate::admin::routes(admin.clone()))
        .merge(crate::metrics::routes(metrics))
        // Merged last: the UI's `/` wins over the monitoring endpoint list.
        .merge(crate::http::ui::routes());
    let mut state = HttpState::new(router).with_auth(cfg.http_auth.clone());
    if let Some(tls) = tls {
        state = state.with_tls(tls);
    }
    crate::http::serve_listener(listener, state)
        .map_err(|e| bind_err(std::io::Error::other(e.to_string())))
}

/// Opens the metadata group. A previous node in this process may still be
/// releasing the Raft database (its storage tasks end asynchronously after
/// shutdown), so "already open" is retried for a short while.
async fn open_metadata(
    cfg: &NodeConfig,
    node: NodeInfo,
    nats: &NatsServer,
) -> Result<Metadata, NodeError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let bootstrap = match &cfg.bootstrap {
        RaftBootstrap::Seed => Bootstrap::Seed,
        RaftBootstrap::Peers(p) => Bootstrap::Peers(p.clone()),
        RaftBootstrap::Join => Bootstrap::Join,
    };
    loop {
        let cluster = ClusterOptions {
            client: nats.local_client("LIFT.raft"),
            namespace: cfg.namespace.clone(),
            bootstrap: bootstrap.clone(),
            max_quorum_size: cfg.max_quorum_size,
        };
        match Metadata::open_cluster(&cfg.data_dir, node.clone(), cluster, cfg.raft.clone()).await {
            Err(MetaError::Store(crate::cluster::StoreError::Redb(e)))
                if matches!(*e, redb::Error::DatabaseAlreadyOpen)
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return Ok(other?),
        }
    }
}

/// Binds the gRPC listener. An empty host (no `listen` configured) listens
/// on every address of both families: `[::]` with `IPV6_V6ONLY` off, so a
/// client that resolves the advertised `localhost` to `::1` or to
/// `127.0.0.1` connects either way; where IPv6 is unavailable, `0.0.0.0`.
/// A configured host is bound as given. Returns the listener and the
/// address it was asked for (for errors).
async fn bind_grpc(host: &str, port: u16) -> Result<(tokio::net::TcpListener, String), NodeError> {
    if host.is_empty() {
        let any = format!("[::]:{port}");
        match bind_dual_stack(port) {
            Ok(l) => return Ok((l, any)),
            // Taken: IPv4 alone would be taken too.
            Err(source) if source.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(NodeError::Bind { addr: any, source })
            }
            Err(e) => {
                tracing::info!(error = %e, "no IPv6 listener ({any}); listening on 0.0.0.0 only")
            }
        }
    }
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    let listen = host_port(host, port);
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|source| NodeError::Bind {
            addr: listen.clone(),
            source,
        })?;
    Ok((listener, listen))
}

/// `[::]:port` accepting IPv4 too (`IPV6_V6ONLY` off, whatever the
/// system default `net.ipv6.bindv6only` says).
fn bind_dual_stack(port: u16) -> std::io::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    s.set_only_v6(false)?;
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    let addr = std::net::SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port));
    s.bind(&addr.into())?;
    s.listen(1024)?;
    tokio::net::TcpListener::from_std(s.into())
}

/// `host:port`, with brackets around an IPv6 host.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl Node {
    /// Starts a node from the liftbridge configuration (what `serve` does).
    pub async fn start_with(cfg: &LiftbridgeConfig) -> Result<NodeHandle, NodeError> {
        Node::start(NodeConfig::from_liftbridge(cfg)?).await
    }

    /// Starts a node; returns once the gRPC API accepts connections.
    pub async fn start(cfg: NodeConfig) -> Result<NodeHandle, NodeError> {
        let start_time_ns = crate::time::now_ns();
        // HTTP TLS files are read first: a bad file stops the start before
        // anything runs.
        let http_tls = match cfg.http_tls.clone() {
            Some(t) => Some(
                tokio::task::spawn_blocking(move || crate::http::tls_config(&t.cert, &t.key))
                    .await
                    .map_err(|e| NodeError::Tls(format!("http.tls: {e}")))?
                    .map_err(|e| NodeError::Tls(format!("http.tls: {e}")))?,
            ),
            None => None,
        };
        // So are the authorization files.
        let authz = match cfg.authz.clone() {
            Some(files) => {
                if cfg
                    .tls
                    .as_ref()
                    .and_then(|t| t.client_ca.as_ref())
                    .is_none()
                {
                    return Err(NodeError::Config(
                        "authorization needs TLS with client certificates (tls.client.auth.ca)"
                            .into(),
                    ));
                }
                Some(Arc::new(crate::api::authz::Authorizer::load(files).await?))
            }
            None => None,
        };
        let dir = cfg.data_dir.clone();
        tokio::task::spawn_blocking(move || std::fs::create_dir_all(&dir).map_err(|e| (dir, e)))
            .await
            .map_err(|e| NodeError::DataDir {
                path: cfg.data_dir.clone(),
                source: std::io::Error::other(e.to_string()),
            })?
            .map_err(|(path, source)| NodeError::DataDir { path, source })?;

        let mut nats_opts = cfg.nats.clone();
        nats_opts.http = None;
        let nats = match &cfg.external_nats {
            None => NatsServer::start(nats_opts).await?,
            Some(ext) => {
                let nats = NatsServer::start_internal(nats_opts).await?;
                nats.connect_external(ext).await?;
                nats
            }
        };
        let nats_addr = nats.client_addr();

        let (listener, listen) = bind_grpc(&cfg.listen_host, cfg.port).await?;
        let grpc_addr = listener.local_addr().map_err(|source| NodeError::Bind {
            addr: listen.clone(),
            source,
        })?;

        let http_listener = match &cfg.http {
            Some((h, p)) => Some(bind_http(h, *p).await?),
            None => None,
        };
        let http_addr = match &http_listener {
            Some(l) => Some(l.local_addr().map_err(|source| NodeError::Bind {
                addr: "http".into(),
                source,
            })?),
            None => None,
        };
        let advertise = advertise_host(&cfg.advertise_host, &cfg.listen_host);
        let node = NodeInfo {
            id: cfg.server_id.clone(),
            host: advertise.clone(),
            port: grpc_addr.port(),
            // External mode: the system the node's NATS traffic goes to.
            nats_addr: match &cfg.external_nats {
                Some(e) => e.label(),
                None => host_port(&advertise, nats_addr.port()),
            },
            http_addr: http_addr.map_or(String::new(), |a| host_port(&advertise, a.port())),
        };
        let meta = open_metadata(&cfg, node, &nats).await?;
        // A node restarted into a running cluster starts from the state it
        // had: before serving, catch up with the controller, so it never
        // answers "no such stream" for a stream created while it was down.
        // A cluster without a controller (all restarting) is served as is.
        // A lone node does the same through itself: its log's committed
        // entries are applied before the partitions open, so a paused or
        // deleted partition is never briefly served from the older state.
        if (meta.members().len() > 1 || meta.is_sole_voter())
            && !meta.catch_up(Duration::from_secs(10)).await
        {
            tracing::warn!("metadata not confirmed current within 10s (no controller yet); serving the local state");
        }

        let local = nats.local_client("LIFT.streams");
        let (parts, tasks) = PartitionManager::start(
            &cfg.data_dir,
            local.clone(),
            meta.clone(),
            cfg.partitions.clone(),
        );
        if !parts.wait_started(Duration::from_secs(30)).await {
            tracing::warn!("partitions still opening after 30s; serving anyway");
        }
        let service = Service::new(
            meta.clone(),
            parts.clone(),
            nats.local_client("LIFT.api"),
            ServiceOptions {
                namespace: cfg.namespace.clone(),
                cursor_partitions: cfg.cursor_partitions,
                consumer_timeout: cfg.consumer_timeout,
                coordinator_timeout: cfg.coordinator_timeout,
            },
        );

        // `__cursors`: created before serving on a lone node, so a client's
        // first cursor call finds it; in a cluster (where the brokers may
        // not all be registered yet) every member keeps trying in the
        // background until the stream exists, created by whichever node
        // gets there first.
        let mut cursors_task = None;
        if cfg.cursor_partitions > 0 && meta.state().stream(CURSORS_STREAM).is_none() {
            let req = CreateStream {
                subject: format!("{}.cursors", cfg.namespace),
                name: CURSORS_STREAM.into(),
                replication_factor: cfg.cursor_replication_factor,
                partitions: cfg.cursor_partitions,
                config: StreamConfig {
                    compact_enabled: Some(true),
                    auto_pause_time_ms: Some(cfg.cursor_auto_pause.as_millis() as i64),
                    auto_pause_disable_if_subscribers: Some(true),
                    ..Default::default()
                },
                ..Default::default()
            };
            if meta.is_leader() && meta.members().len() <= 1 {
                match service.create_stream(req, true).await {
                    Ok(()) | Err(ServiceError::AlreadyExists(_)) => {}
                    Err(e) => return Err(NodeError::Cursors(e)),
                }
            } else {
                let (service, meta) = (service.clone(), meta.clone());
                cursors_task = Some(tokio::spawn(async move {
                    let mut attempts = 0u32;
                    while meta.state().stream(CURSORS_STREAM).is_none() {
                        match service.create_stream(req.clone(), true).await {
                            Ok(()) | Err(ServiceError::AlreadyExists(_)) => return,
                            // Until every broker has registered this is
                            // expected; a minute of it is not (e.g. more
                            // replicas asked for than there are brokers).
                            Err(e) if attempts % 60 == 59 => {
                                tracing::warn!(error = %e, attempts = attempts + 1, "creating __cursors (cursors.stream.*) keeps failing; retrying")
                            }
                            Err(e) => tracing::debug!(error = %e, "creating __cursors; retrying"),
                        }
                        attempts += 1;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }));
            }
        }

        // The metadata leader publishes committed changes on __activity.
        let activity_task = cfg
            .activity
            .clone()
            .map(|opts| tokio::spawn(service.clone().run_activity(opts)));

        let (mut reporter, health) = tonic_health::server::health_reporter();
        reporter.set_serving::<ApiServer<ApiService>>().await;

        // The gRPC port's TLS files are read before anything is served.
        let grpc_tls = match &cfg.tls {
            Some(tls) => {
                let files = crate::config::nats::TlsFiles {
                    cert: tls.cert.clone(),
                    key: tls.key.clone(),
                    ca: tls.client_ca.clone(),
                    verify: tls.client_ca.is_some(),
                    params: Default::default(),
                    handshake_first: None,
                };
                let mut c = crate::tls::server_config(&files)
                    .map_err(|e| NodeError::Tls(format!("tls: {e}")))?;
                Arc::make_mut(&mut c).alpn_protocols = vec![b"h2".to_vec()];
                Some(c)
            }
            None => None,
        };
        // Set once the node stops: the gRPC port stops accepting, and open
        // PublishAsync sessions end (see `ApiService::with_stopping`).
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        let admin_service = service.clone();
        let mut api_service = ApiService::new(service).with_stopping(stop_rx.clone());
        if let Some(a) = &authz {
            api_service = api_service.with_authz(a.clone());
        }
        let api = ApiServer::new(api_service)
            .max_decoding_message_size(MAX_GRPC_MESSAGE)
            .max_encoding_message_size(MAX_GRPC_MESSAGE);
        let metrics = crate::metrics::NodeMetrics::new(nats.clone(), meta.clone(), parts.clone());
        let routes = crate::api::server::Services { api, health };
        let grpc_svc =
            tower_layer::Layer::layer(&metrics.grpc_layer(), crate::api::server::Deadline(routes));
        // HTTP/2 flow-control windows sized for streams of many 1 KiB
        // messages: with h2's 64 KiB defaults a PublishAsync stream with
        // 256 messages in flight stalls on window updates.
        let http2 = crate::api::server::Http2 {
            stream_window: GRPC_STREAM_WINDOW,
            connection_window: GRPC_CONNECTION_WINDOW,
            max_frame: GRPC_MAX_FRAME,
        };
        let grpc_task = tokio::spawn(crate::api::server::serve(
            listener,
            grpc_svc,
            http2,
            grpc_tls,
            async move {
                let _ = stop_rx.wait_for(|stop| *stop).await;
            },
        ));
        let http = match (http_listener, http_addr) {
            (Some(listener), Some(http_addr)) => {
                let admin = crate::admin::AdminContext {
                    meta: meta.clone(),
                    parts: parts.clone(),
                    service: admin_service,
                    nats: nats.clone(),
                    addrs: crate::admin::NodeAddrs {
                        grpc: grpc_addr,
                        nats: nats_addr,
                        http: http_addr,
                    },
                    start_time_ns,
                };
                Some(start_http(&cfg, http_tls, listener, admin, metrics).await?)
            }
            _ => None,
        };
        tracing::info!(grpc = %grpc_addr, nats = %nats_addr, server_id = %meta.node().id, "liftbridge node started");

        Ok(NodeHandle {
            grpc_addr,
            nats_addr,
            nats,
            meta,
            parts,
            tasks: Some(tasks),
            cursors_task,
            activity_task,
            http,
            stop_grpc: Some(stop_tx),
            grpc_task: Some(grpc_task),
            authz,
        })
    }
}

impl NodeHandle {
    /// Re-reads the authorization model and policy (SIGHUP). `Ok(false)`
    /// when authorization is off; on error the previous policy stays.
    pub async fn reload_authz(&self) -> Result<bool, crate::api::authz::AuthzError> {
        match &self.authz {
            Some(a) => a.reload().await.map(|()| true),
            None => Ok(false),
        }
    }

    /// Applies the NATS part of a re-read configuration to the embedded
    /// server (SIGHUP): the lines to log, or why nothing changed.
    pub async fn reload_nats(
        &self,
        mut opts: NatsOptions,
    ) -> Result<Vec<String>, crate::nats::reload::ReloadError> {
        // The node serves monitoring on its own HTTP listener.
        opts.http = None;
        self.nats.reload(opts).await
    }

    /// Address the gRPC API listens on.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// Address of the embedded NATS server's client port (`0.0.0.0:0` in
    /// external NATS mode, where there is no client listener).
    pub fn nats_addr(&self) -> SocketAddr {
        self.nats_addr
    }

    /// The external NATS servers (`nats://a:4222,…`) in external NATS
    /// mode, where the node has no NATS listener of its own.
    pub fn external_nats(&self) -> Option<String> {
        self.nats.external().map(|b| b.servers().to_string())
    }

    /// Address of the HTTP listener, when enabled.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.local_addr())
    }

    /// This node's server id.
    pub fn server_id(&self) -> String {
        self.meta.node().id.clone()
    }

    /// The metadata handle (for tests and tools).
    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// Stops everything, in reverse start order; logs are closed durably.
    pub async fn shutdown(mut self) {
        if let Some(t) = self.cursors_task.take() {
            t.abort();
        }
        if let Some(t) = self.activity_task.take() {
            t.abort();
        }
        if let Some(h) = self.http.take() {
            h.shutdown().await;
        }
        if let Some(tx) = self.stop_grpc.take() {
            let _ = tx.send(true);
        }
        // Stopping the partitions ends every subscription stream, which lets
        // the gRPC server's graceful shutdown complete.
        if let Some(tasks) = self.tasks.take() {
            self.parts.shutdown(tasks).await;
        }
        if let Some(t) = self.grpc_task.take() {
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        if let Err(e) = self.meta.shutdown().await {
            tracing::warn!(error = %e, "stopping metadata");
        }
        self.nats.shutdown().await;
    }
}
