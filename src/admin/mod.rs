//! The admin HTTP API: `/api/v1/…` JSON for the web UI and for scripts.
//!
//! Every mutation goes through the use-case layer the gRPC API also calls
//! ([`Service`]): creating, deleting, pausing, resuming and making streams
//! readonly, and publishing, so validation, error messages and side effects
//! (waiting for partitions to start or stop) are the gRPC ones. Service
//! errors become HTTP statuses in one place (`impl From<ServiceError> for
//! AdminError`). Resume has no gRPC call (Liftbridge resumes on publish); it
//! goes through [`Service::resume_partitions`], which waits for the
//! partitions this node leads to run again.
//!
//! Reads come from the replicated metadata (listed and described by the
//! service; node-level facts from [`Metadata`]) and from the partition logs
//! this node serves ([`Service::local_partition`]); a
//! partition that is paused or led by another node has no open log here, so
//! its offsets read as -1 and its messages cannot be browsed (409).
//!
//! Invariants: handlers never panic on a path, query or body; every error
//! is `{"code": status, "error": message}`; byte fields are standard
//! base64; timestamps are Unix nanoseconds (`*_ns`), durations milliseconds
//! (`*_ms`). Storage reads run on the log's blocking pool (through
//! [`crate::store::PartitionLog`]'s async API) and file metadata through
//! `spawn_blocking`: nothing here blocks a tokio worker. This module does
//! not authenticate: the HTTP server's auth layer runs before any handler.

mod messages;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::{MetaError, Metadata, MetadataState, PartitionMeta, StreamConfig, StreamMeta};
use crate::http::{HttpRequest, HttpResponse, Router};
use crate::nats::NatsServer;
use crate::partition::reader::ReadEnd;
use crate::partition::{Partition, PartitionManager};
use crate::service::{CreateStream, Service, ServiceError};
use crate::time::now_ns;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

/// A failed admin request; its status and message become the response.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// 400: bad path parameter, query or body.
    #[error("{0}")]
    BadRequest(String),
    /// 404: unknown stream, partition or endpoint.
    #[error("{0}")]
    NotFound(String),
    /// 405: the path exists but not for this method.
    #[error("method {method} not allowed (allowed: {allow})")]
    MethodNotAllowed {
        /// The method used.
        method: String,
        /// The `Allow` header value.
        allow: &'static str,
    },
    /// 409: the stream exists already, or the state forbids the request.
    #[error("{0}")]
    Conflict(String),
    /// 415: a body that is not JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 429: a server limit was hit.
    #[error("{0}")]
    TooManyRequests(String),
    /// 501: not available on this server.
    #[error("{0}")]
    NotImplemented(String),
    /// 503: no metadata leader, or the server is stopping.
    #[error("{0}")]
    Unavailable(String),
    /// 504: an acknowledgement did not arrive in time.
    #[error("{0}")]
    Timeout(String),
    /// 500: anything else.
    #[error("{0}")]
    Internal(String),
}

impl AdminError {
    /// The HTTP status of this error.
    pub fn status(&self) -> u16 {
        match self {
            AdminError::BadRequest(_) => 400,
            AdminError::NotFound(_) => 404,
            AdminError::MethodNotAllowed { .. } => 405,
            AdminError::Conflict(_) => 409,
            AdminError::UnsupportedMediaType(_) => 415,
            AdminError::TooManyRequests(_) => 429,
            AdminError::NotImplemented(_) => 501,
            AdminError::Unavailable(_) => 503,
            AdminError::Timeout(_) => 504,
            AdminError::Internal(_) => 500,
        }
    }

    /// The JSON error response (with `Allow` for 405).
    pub fn into_response(self) -> HttpResponse {
        let mut r = HttpResponse::error(self.status(), &self.to_string());
        if let AdminError::MethodNotAllowed { allow, .. } = &self {
            r.headers.push(("allow", (*allow).to_string()));
        }
        r
    }
}

/// Service errors as HTTP statuses: the one mapping of this API.
impl From<ServiceError> for AdminError {
    fn from(e: ServiceError) -> AdminError {
        match e {
            ServiceError::InvalidArgument(m) => AdminError::BadRequest(m),
            ServiceError::NotFound(m) => AdminError::NotFound(m),
            ServiceError::AlreadyExists(m) | ServiceError::FailedPrecondition(m) => {
                AdminError::Conflict(m)
            }
            ServiceError::ResourceExhausted(m) => AdminError::TooManyRequests(m),
            ServiceError::Timeout(m) => AdminError::Timeout(m),
            ServiceError::Unavailable(m) => AdminError::Unavailable(m),
            ServiceError::Unknown(m) | ServiceError::Internal(m) => AdminError::Internal(m),
            ServiceError::Read(end) => {
                let m = end.to_string();
                match end {
                    ReadEnd::StopReached
                    | ReadEnd::Empty
                    | ReadEnd::ReadonlyEnd
                    | ReadEnd::ReverseEnd => AdminError::TooManyRequests(m),
                    ReadEnd::Deleted => AdminError::NotFound(m),
                    ReadEnd::Paused | ReadEnd::Failed => AdminError::Conflict(m),
                    ReadEnd::Shutdown | ReadEnd::Moved => AdminError::Unavailable(m),
                    ReadEnd::Invalid(_) => AdminError::BadRequest(m),
                    ReadEnd::Store(_) => AdminError::Internal(m),
                }
            }
        }
    }
}

impl From<MetaError> for AdminError {
    fn from(e: MetaError) -> AdminError {
        match e {
            MetaError::NoLeader => AdminError::Unavailable("no known metadata leader".into()),
            other => AdminError::Internal(other.to_string()),
        }
    }
}

impl From<crate::store::StoreError> for AdminError {
    fn from(e: crate::store::StoreError) -> AdminError {
        AdminError::Internal(e.to_string())
    }
}

/// Where this node listens (shown by `/api/v1/info`).
#[derive(Debug, Clone, Copy)]
pub struct NodeAddrs {
    /// gRPC API.
    pub grpc: SocketAddr,
    /// NATS client port.
    pub nats: SocketAddr,
    /// This HTTP listener.
    pub http: SocketAddr,
}

/// What the admin handlers read and act on. Cheap to clone.
#[derive(Clone)]
pub struct AdminContext {
    /// Replicated metadata (streams, partitions, leader).
    pub meta: Metadata,
    /// The partitions this node serves (logs).
    pub parts: PartitionManager,
    /// The use cases, called for every mutation.
    pub service: Service,
    /// The embedded NATS server (statistics, connections).
    pub nats: NatsServer,
    /// Listener addresses.
    pub addrs: NodeAddrs,
    /// When the node started, Unix ns.
    pub start_time_ns: i64,
}

/// The `/api/v1/` routes served from `ctx`.
pub fn routes(ctx: AdminContext) -> Router {
    let ctx = Arc::new(ctx);
    Router::new().prefix("/api/v1/", move |req| {
        let ctx = ctx.clone();
        async move { handle(&ctx, req).await }
    })
}

/// Handles one `/api/v1/…` request.
pub async fn handle(ctx: &AdminContext, req: HttpRequest) -> HttpResponse {
    match route(ctx, &req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// The method classes the API distinguishes (HEAD is answered as GET; the
/// server drops the body).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    Post,
    Delete,
    Other,
}

fn verb(m: &hyper::Method) -> Verb {
    match *m {
        hyper::Method::GET | hyper::Method::HEAD => Verb::Get,
        hyper::Method::POST => Verb::Post,
        hyper::Method::DELETE => Verb::Delete,
        _ => Verb::Other,
    }
}

fn not_allowed(req: &HttpRequest, allow: &'static str) -> Result<HttpResponse, AdminError> {
    Err(AdminError::MethodNotAllowed {
        method: req.method.to_string(),
        allow,
    })
}

async fn route(ctx: &AdminContext, req: &HttpRequest) -> Result<HttpResponse, AdminError> {
    let segs = segments(&req.path)?;
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let v = verb(&req.method);
    match s.as_slice() {
        ["info"] => match v {
            Verb::Get => ok(info(ctx).await),
            _ => not_allowed(req, "GET"),
        },
        ["health"] => match v {
            Verb::Get => Ok(health(ctx)),
            _ => not_allowed(req, "GET"),
        },
        ["streams"] => match v {
            Verb::Get => ok(list_streams(ctx)),
            Verb::Post => create_stream(ctx, req).await,
            _ => not_allowed(req, "GET, POST"),
        },
        ["streams", name] => match v {
            Verb::Get => ok(ctx.stream_json(&ctx.stream(name)?)),
            Verb::Delete => delete_stream(ctx, name).await,
            _ => not_allowed(req, "GET, DELETE"),
        },
        ["streams", name, "pause"] => match v {
            Verb::Post => pause_stream(ctx, name, req).await,
            _ => not_allowed(req, "POST"),
        },
        ["streams", name, "resume"] => match v {
            Verb::Post => resume_stream(ctx, name, req).await,
            _ => not_allowed(req, "POST"),
        },
        ["streams", name, "readonly"] => match v {
            Verb::Post => set_readonly(ctx, name, req).await,
            _ => not_allowed(req, "POST"),
        },
        ["streams", name, "partitions", id] => {
            let (s, id) = ctx.stream_partition(name, id)?;
            match v {
                Verb::Get => ok(ctx.partition_detail(&s, id).await),
                _ => not_allowed(req, "GET"),
            }
        }
        ["streams", name, "partitions", id, "messages"] => {
            let (s, id) = ctx.stream_partition(name, id)?;
            match v {
                Verb::Get => Ok(HttpResponse::json_compact(
                    200,
                    &messages::read(ctx, &s, id, req).await?,
                )),
                Verb::Post => ok(messages::publish(ctx, &s, id, req).await?),
                _ => not_allowed(req, "GET, POST"),
            }
        }
        ["connections"] => match v {
            Verb::Get => nats_json(&req.query, |q| ctx.nats.connz_json(q)),
            _ => not_allowed(req, "GET"),
        },
        ["subscriptions"] => match v {
            Verb::Get => nats_json(&req.query, |q| ctx.nats.subsz_json(q)),
            _ => not_allowed(req, "GET"),
        },
        _ => Err(AdminError::NotFound(format!(
            "no such endpoint: {}",
            req.path
        ))),
    }
}

fn ok(v: Value) -> Result<HttpResponse, AdminError> {
    Ok(HttpResponse::json(200, &v))
}

/// Splits the path below `/api/v1/` into percent-decoded segments (one
/// trailing slash is ignored). An empty segment stays empty and matches no
/// route.
fn segments(path: &str) -> Result<Vec<String>, AdminError> {
    let rest = path.strip_prefix("/api/v1/").unwrap_or("");
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    rest.split('/').map(decode_segment).collect()
}

/// Strict percent-decoding of one path segment (`+` stays `+`).
fn decode_segment(s: &str) -> Result<String, AdminError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    AdminError::BadRequest(format!("bad percent-encoding in path segment {s:?}"))
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| AdminError::BadRequest(format!("path segment {s:?} is not UTF-8")))
}

/// Parses a JSON request body. A declared content type must be JSON
/// (else 415); an empty body reads as `{}` when `empty_ok`.
fn parse_body<T: DeserializeOwned>(req: &HttpRequest, empty_ok: bool) -> Result<T, AdminError> {
    if let Some(raw) = req.headers.get("content-type") {
        let ct = raw.to_str().unwrap_or("");
        let media = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if media != "application/json" && !media.ends_with("+json") {
            return Err(AdminError::UnsupportedMediaType(format!(
                "content type {ct:?} is not application/json"
            )));
        }
    }
    let body: &[u8] = if req.body.iter().all(u8::is_ascii_whitespace) {
        if !empty_ok {
            return Err(AdminError::BadRequest("a JSON body is required".into()));
        }
        b"{}"
    } else {
        &req.body
    };
    serde_json::from_slice(body)
        .map_err(|e| AdminError::BadRequest(format!("invalid JSON body: {e}")))
}

/// Runs a NATS monitoring query with `subs=1` unless the caller chose.
fn nats_json(
    query: &str,
    f: impl FnOnce(&str) -> Result<Value, String>,
) -> Result<HttpResponse, AdminError> {
    let q = if crate::http::parse_query(query).contains_key("subs") {
        query.to_string()
    } else if query.is_empty() {
        "subs=1".to_string()
    } else {
        format!("{query}&subs=1")
    };
    f(&q)
        .map(|v| HttpResponse::json(200, &v))
        .map_err(AdminError::BadRequest)
}

/// -1 for "no offset".
fn off(o: Option<u64>) -> i64 {
    o.map_or(-1, |o| i64::try_from(o).unwrap_or(i64::MAX))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl AdminContext {
    fn stream(&self, name: &str) -> Result<StreamMeta, AdminError> {
        self.service
            .describe_stream(name)
            .ok_or_else(|| AdminError::NotFound(format!("no such stream: {name}")))
    }

    /// The stream and a partition id from the path (400 for a non-numeric
    /// id, 404 for an unknown stream or partition).
    fn stream_partition(&self, name: &str, id: &str) -> Result<(StreamMeta, i32), AdminError> {
        let id: i32 = id
            .parse()
            .map_err(|_| AdminError::BadRequest(format!("invalid partition id {id:?}")))?;
        let s = self.stream(name)?;
        if s.partition(id).is_none() {
            return Err(AdminError::NotFound(format!(
                "no such partition: {name}/{id}"
            )));
        }
        Ok((s, id))
    }

    /// The running partition of this stream (same incarnation) served here.
    fn local(&self, s: &StreamMeta, id: i32) -> Option<Arc<Partition>> {
        self.service.local_partition(s, id)
    }

    fn stream_json(&self, s: &StreamMeta) -> Value {
        json!({
            "name": s.name,
            "subject": s.subject,
            "group": s.group,
            "creation_timestamp_ns": s.creation_timestamp_ns,
            "partitions": s.partitions.iter().map(|p| self.partition_summary(s, p)).collect::<Vec<_>>(),
        })
    }

    fn partition_summary(&self, s: &StreamMeta, p: &PartitionMeta) -> Value {
        let local = self.local(s, p.id);
        let (newest, hw, oldest, messages, bytes) = match &local {
            Some(part) => {
                let log = part.log();
                (
                    off(log.newest_offset()),
                    off(part.high_watermark()),
                    off(log.oldest_offset()),
                    log.record_count(),
                    log.record_bytes(),
                )
            }
            None => (-1, -1, -1, 0, 0),
        };
        let failed = self
            .parts
            .failure(&s.name, p.id, s.creation_timestamp_ns)
            .map(|f| f.reason);
        // Why the log here refuses writes for now (it serves reads and
        // retries), if it does.
        let degraded = local
            .as_ref()
            .and_then(|part| part.log().fault())
            .map(|f| f.reason);
        let me = self.service.server_id();
        let role = if p.leader == me {
            "leader"
        } else if p.replicas.iter().any(|r| r == me) {
            "follower"
        } else {
            "none"
        };
        // A follower reports its own copy's log end and what it knows to be
        // committed.
        let replica = local
            .is_none()
            .then(|| self.service.local_replica(s, p.id))
            .flatten();
        let (newest, hw) = match &replica {
            Some(r) => (off(r.log().newest_offset()), off(r.high_watermark())),
            None => (newest, hw),
        };
        json!({
            "id": p.id,
            "leader": p.leader,
            "replicas": p.replicas,
            "isr": p.isr,
            "epoch": p.epoch,
            "leader_epoch": p.leader_epoch,
            "under_replicated": self.service.under_replicated(s, p),
            "role": role,
            "paused": p.paused,
            "readonly": p.readonly,
            "newest_offset": newest,
            // The partition's high watermark, as FetchPartitionMetadata
            // reports it (on one node: the newest offset).
            "high_watermark": hw,
            "oldest_offset": oldest,
            "messages": messages,
            "bytes": bytes,
            "local": local.is_some(),
            // Why the partition's log could not be opened here (null when
            // it runs or is not led here).
            "failed": failed,
            // Why the log here refuses writes for now (null when it
            // accepts them): a full device or an I/O error; it retries.
            "degraded": degraded,
        })
    }

    async fn partition_detail(&self, s: &StreamMeta, id: i32) -> Value {
        let Some(p) = s.partition(id) else {
            return Value::Null;
        };
        let mut v = self.partition_summary(s, p);
        let local = self.local(s, id);
        // The backlog of the NATS queue feeding this partition's log (led
        // here only): bytes and messages waiting, the most ever queued, the
        // limit, and how long publishers were stalled by it.
        let recorder = local.as_ref().and_then(|part| {
            let qs: Vec<_> = self
                .nats
                .recorder_queues()
                .into_iter()
                .filter(|q| q.subject == part.subject)
                .collect();
            (!qs.is_empty()).then(|| {
                json!({
                    "pending_bytes": qs.iter().map(|q| q.pending_bytes()).sum::<u64>(),
                    "pending_msgs": qs.iter().map(|q| q.pending_msgs()).sum::<u64>(),
                    "pending_bytes_max": qs.iter().map(|q| q.high_water_bytes()).max(),
                    "limit_bytes": qs[0].limit,
                    "stalls": qs.iter().map(|q| q.stalls()).sum::<u64>(),
                    "stall_seconds": qs.iter().map(|q| q.stall_time().as_secs_f64()).sum::<f64>(),
                })
            })
        });
        let (leo, recv, subscribers) = match &local {
            Some(part) => (
                i64::try_from(part.log().log_end_offset()).unwrap_or(i64::MAX),
                part.received_timestamps(),
                part.subscriber_count(),
            ),
            None => (-1, (0, 0), 0),
        };
        let disk_bytes = match local {
            // File metadata is file I/O: off the tokio workers.
            Some(part) => tokio::task::spawn_blocking(move || part.log().disk_size())
                .await
                .unwrap_or(0),
            None => 0,
        };
        let d = self.parts.defaults();
        let lc = d.log_config(s);
        let (auto_pause, auto_pause_subs) = d.auto_pause(s);
        let c = &s.config;
        let extra = json!({
            "stream": s.name,
            "log_end_offset": leo,
            "disk_bytes": disk_bytes,
            "paused_timestamp_ns": p.pause_timestamps.latest_ns,
            "readonly_timestamp_ns": p.readonly_timestamps.latest_ns,
            "message_received_timestamp_ns": { "first": recv.0, "latest": recv.1 },
            "subscribers": subscribers,
            "recorder": recorder,
            // Effective values (stream overrides over server defaults; 0 =
            // unlimited); null where the server has no setting of its own.
            "config": {
                "retention_max_bytes": lc.retention.max_bytes.unwrap_or(0),
                "retention_max_messages": lc.retention.max_messages.unwrap_or(0),
                "retention_max_age_ms": lc.retention.max_age.map_or(0, millis),
                "cleaner_interval_ms": millis(lc.cleaner_interval),
                "segment_max_bytes": c.segment_max_bytes,
                "segment_max_age_ms": c.segment_max_age_ms,
                "compact_enabled": lc.compact,
                "auto_pause_time_ms": millis(auto_pause),
                "auto_pause_disable_if_subscribers": auto_pause_subs,
                "min_isr": c.min_isr,
                "optimistic_concurrency_control": d.occ(s),
            },
        });
        if let (Value::Object(a), Value::Object(b)) = (&mut v, extra) {
            a.extend(b);
        }
        v
    }
}

async fn info(ctx: &AdminContext) -> Value {
    let nats = ctx.nats.clone();
    // varz reads /proc (file I/O): off the tokio workers.
    let varz = tokio::task::spawn_blocking(move || nats.varz_json())
        .await
        .unwrap_or(Value::Null);
    let state = ctx.meta.state();
    let partitions: usize = state.streams.values().map(|s| s.partitions.len()).sum();
    let now = now_ns();
    let pick = |k: &str| varz.get(k).cloned().unwrap_or(json!(0));
    // External NATS mode: no NATS listener here; the external servers
    // stand where the listener would, as in the broker entry.
    let nats_addr = match ctx.nats.external() {
        Some(b) => b.servers().to_string(),
        None => ctx.addrs.nats.to_string(),
    };
    json!({
        "server_id": ctx.meta.node().id,
        "version": env!("CARGO_PKG_VERSION"),
        "start_time_ns": ctx.start_time_ns,
        "uptime_ms": (now - ctx.start_time_ns).max(0) / 1_000_000,
        "grpc_addr": ctx.addrs.grpc.to_string(),
        "nats_addr": nats_addr,
        "http_addr": ctx.addrs.http.to_string(),
        "metadata_leader": ctx.meta.leader_id(),
        "is_metadata_leader": ctx.meta.is_leader(),
        "cluster": cluster_json(&ctx.meta, &state),
        "streams": state.streams.len(),
        "partitions": partitions,
        "nats": {
            "connections": pick("connections"),
            "total_connections": pick("total_connections"),
            "subscriptions": pick("subscriptions"),
            "in_msgs": pick("in_msgs"),
            "out_msgs": pick("out_msgs"),
            "in_bytes": pick("in_bytes"),
            "out_bytes": pick("out_bytes"),
            "slow_consumers": pick("slow_consumers"),
            "routes": routes_json(&ctx.nats),
            // External NATS mode only (else null): `/varz`'s `external`.
            "external": varz.get("external").cloned().unwrap_or(Value::Null),
        },
    })
}

/// This node's NATS routes to other nodes: the peer's server id and name,
/// its address, which side dialed, and the messages exchanged.
fn routes_json(nats: &NatsServer) -> Value {
    let routez = nats.routez_json("");
    let list = routez["routes"].as_array().cloned().unwrap_or_default();
    Value::Array(
        list.into_iter()
            .map(|r| {
                json!({
                    "remote_id": r["remote_id"],
                    "remote_name": r["remote_name"],
                    "ip": r["ip"],
                    "port": r["port"],
                    "did_solicit": r["did_solicit"],
                    "in_msgs": r["in_msgs"],
                    "out_msgs": r["out_msgs"],
                })
            })
            .collect(),
    )
}

/// The metadata group as this node sees it: its role, the controller, and
/// every member with the addresses it registered (the broker entry, else
/// the Raft membership's copy).
fn cluster_json(meta: &Metadata, state: &MetadataState) -> Value {
    let nodes: Vec<Value> = meta
        .members()
        .into_iter()
        .map(|m| {
            let broker = state.brokers.get(&m.node.id);
            let n = broker.unwrap_or(&m.node);
            json!({
                "server_id": n.id,
                "raft_id": m.raft_id.to_string(),
                "voter": m.voter,
                "registered": broker.is_some(),
                "host": n.host,
                "port": n.port,
                "nats_addr": n.nats_addr,
                "http_addr": n.http_addr,
            })
        })
        .collect();
    json!({
        "role": meta.role(),
        "controller": meta.leader_id(),
        "raft_id": meta.raft_id().to_string(),
        "nodes": nodes,
    })
}

/// The partitions that cannot write here, as `/api/v1/health` and
/// `/healthz` list them.
pub fn degraded_json(d: &[crate::partition::DegradedPartition]) -> Vec<Value> {
    d.iter()
        .map(|p| {
            json!({
                "stream": p.stream,
                "partition": p.partition,
                "reason": p.reason,
                "no_space": p.no_space,
                "running": p.running,
                "since_ns": p.since_ns,
            })
        })
        .collect()
}

/// `/healthz` as nats-server answers when unhealthy (HTTP 503, `status`
/// "unavailable", `status_code`, `error`, and `errors` with one entry per
/// cause, typed as its JetStream stream errors are), listing the
/// partitions that cannot write; `None` when every partition can.
pub fn healthz_degraded(parts: &PartitionManager) -> Option<Value> {
    let d = parts.unhealthy();
    let first = d.first()?;
    let errors: Vec<Value> = d
        .iter()
        .map(|p| {
            json!({
                "type": "STREAM",
                "stream": p.stream,
                "partition": p.partition,
                "error": format!("partition {} of stream {} is degraded: {}", p.partition, p.stream, p.reason),
            })
        })
        .collect();
    Some(json!({
        "status": "unavailable",
        "status_code": 503,
        "error": format!(
            "{} partition(s) degraded: partition {} of stream {} cannot write: {}",
            d.len(), first.partition, first.stream, first.reason
        ),
        "errors": errors,
    }))
}

fn health(ctx: &AdminContext) -> HttpResponse {
    // External mode: nothing is recorded while the system is out of reach.
    if let Some(problem) = ctx.nats.external().and_then(|b| b.problem()) {
        return HttpResponse::json(
            503,
            &json!({"code": 503, "status": "unavailable", "error": problem}),
        );
    }
    let degraded = ctx.parts.unhealthy();
    if ctx.meta.leader_id().is_some() && degraded.is_empty() {
        HttpResponse::json(200, &json!({"status": "ok"}))
    } else if let Some(first) = degraded.first() {
        HttpResponse::json(
            503,
            &json!({
                "code": 503,
                "status": "degraded",
                "error": format!(
                    "{} partition(s) cannot write: partition {} of stream {}: {}",
                    degraded.len(), first.partition, first.stream, first.reason
                ),
                "degraded": degraded_json(&degraded),
            }),
        )
    } else {
        HttpResponse::json(
            503,
            &json!({"code": 503, "status": "unavailable", "error": "no known metadata leader"}),
        )
    }
}

fn list_streams(ctx: &AdminContext) -> Value {
    // Ordered by name.
    let streams: Vec<Value> = ctx
        .service
        .list_streams()
        .iter()
        .map(|s| ctx.stream_json(s))
        .collect();
    json!({ "streams": streams })
}

/// Body of `POST /api/v1/streams`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    // Name and subject default to empty so the gRPC validation names them.
    #[serde(default)]
    name: String,
    #[serde(default)]
    subject: String,
    #[serde(default)]
    group: String,
    partitions: Option<i32>,
    replication_factor: Option<i32>,
    retention_max_bytes: Option<i64>,
    retention_max_messages: Option<i64>,
    retention_max_age_ms: Option<i64>,
    cleaner_interval_ms: Option<i64>,
    segment_max_bytes: Option<i64>,
    segment_max_age_ms: Option<i64>,
    compact_enabled: Option<bool>,
    compact_max_goroutines: Option<i32>,
    auto_pause_time_ms: Option<i64>,
    auto_pause_disable_if_subscribers: Option<bool>,
    min_isr: Option<i32>,
    optimistic_concurrency_control: Option<bool>,
}

async fn create_stream(ctx: &AdminContext, req: &HttpRequest) -> Result<HttpResponse, AdminError> {
    let b: CreateBody = parse_body(req, false)?;
    let r = CreateStream {
        name: b.name.clone(),
        subject: b.subject,
        group: b.group,
        replication_factor: b.replication_factor.unwrap_or(1),
        partitions: b.partitions.unwrap_or(1),
        config: StreamConfig {
            retention_max_bytes: b.retention_max_bytes,
            retention_max_messages: b.retention_max_messages,
            retention_max_age_ms: b.retention_max_age_ms,
            cleaner_interval_ms: b.cleaner_interval_ms,
            segment_max_bytes: b.segment_max_bytes,
            segment_max_age_ms: b.segment_max_age_ms,
            compact_max_goroutines: b.compact_max_goroutines,
            compact_enabled: b.compact_enabled,
            auto_pause_time_ms: b.auto_pause_time_ms,
            auto_pause_disable_if_subscribers: b.auto_pause_disable_if_subscribers,
            min_isr: b.min_isr,
            optimistic_concurrency_control: b.optimistic_concurrency_control,
            encryption: None,
        },
    };
    if r.partitions == 0 {
        // gRPC reads 0 as "default"; an explicit 0 here is a mistake.
        return Err(AdminError::BadRequest(
            "Invalid number of partitions".into(),
        ));
    }
    ctx.service.create_stream(r, false).await?;
    let s = ctx.stream(&b.name)?;
    Ok(HttpResponse::json(201, &ctx.stream_json(&s)))
}

async fn delete_stream(ctx: &AdminContext, name: &str) -> Result<HttpResponse, AdminError> {
    ctx.service.delete_stream(name).await?;
    ok(json!({ "deleted": name }))
}

/// Body of `POST …/pause`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PauseBody {
    #[serde(default)]
    partitions: Vec<i32>,
    #[serde(default)]
    resume_all: bool,
}

async fn pause_stream(
    ctx: &AdminContext,
    name: &str,
    req: &HttpRequest,
) -> Result<HttpResponse, AdminError> {
    let b: PauseBody = parse_body(req, true)?;
    ctx.service
        .pause_stream(name, b.partitions, b.resume_all)
        .await?;
    ok(ctx.stream_json(&ctx.stream(name)?))
}

/// Body of `POST …/resume`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    #[serde(default)]
    partitions: Vec<i32>,
}

async fn resume_stream(
    ctx: &AdminContext,
    name: &str,
    req: &HttpRequest,
) -> Result<HttpResponse, AdminError> {
    let b: ResumeBody = parse_body(req, true)?;
    // Partitions led here start recording before the answer.
    ctx.service.resume_partitions(name, &b.partitions).await?;
    ok(ctx.stream_json(&ctx.stream(name)?))
}

/// Body of `POST …/readonly`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadonlyBody {
    readonly: bool,
    #[serde(default)]
    partitions: Vec<i32>,
}

async fn set_readonly(
    ctx: &AdminContext,
    name: &str,
    req: &HttpRequest,
) -> Result<HttpResponse, AdminError> {
    let b: ReadonlyBody = parse_body(req, false)?;
    ctx.service
        .set_readonly(name, b.partitions, b.readonly)
        .await?;
    ok(ctx.stream_json(&ctx.stream(name)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_decoded_strictly() {
        assert_eq!(segments("/api/v1/streams").unwrap(), vec!["streams"]);
        assert_eq!(segments("/api/v1/streams/").unwrap(), vec!["streams"]);
        assert_eq!(
            segments("/api/v1/streams/a%2Eb+c/partitions/0").unwrap(),
            vec!["streams", "a.b+c", "partitions", "0"]
        );
        assert_eq!(segments("/api/v1/streams//x").unwrap()[1], "");
        assert!(matches!(
            segments("/api/v1/streams/%zz"),
            Err(AdminError::BadRequest(_))
        ));
        assert!(matches!(
            segments("/api/v1/streams/%4"),
            Err(AdminError::BadRequest(_))
        ));
        assert!(matches!(
            segments("/api/v1/streams/%ff"),
            Err(AdminError::BadRequest(_))
        ));
    }

    proptest::proptest! {
        /// Any path splits into segments or a 400, never a panic, and
        /// encoding a segment then decoding it gives it back.
        #[test]
        fn any_path_parses_or_is_refused(path in "\\PC{0,40}", seg in "\\PC{0,12}") {
            match segments(&format!("/api/v1/{path}")) {
                Ok(_) => {}
                Err(e) => proptest::prop_assert_eq!(e.status(), 400),
            }
            let encoded: String = seg.bytes().map(|b| format!("%{b:02X}")).collect();
            proptest::prop_assert_eq!(decode_segment(&encoded).unwrap(), seg);
        }
    }

    #[test]
    fn service_errors_map_to_http_statuses() {
        let st = |e: ServiceError| AdminError::from(e).status();
        let m = || "m".to_string();
        assert_eq!(st(ServiceError::InvalidArgument(m())), 400);
        assert_eq!(st(ServiceError::NotFound(m())), 404);
        assert_eq!(st(ServiceError::AlreadyExists(m())), 409);
        assert_eq!(st(ServiceError::FailedPrecondition(m())), 409);
        assert_eq!(st(ServiceError::Read(ReadEnd::Shutdown)), 503);
        assert_eq!(st(ServiceError::Timeout(m())), 504);
        assert_eq!(st(ServiceError::Unavailable(m())), 503);
        assert_eq!(st(ServiceError::Internal(m())), 500);
        assert_eq!(st(ServiceError::Unknown(m())), 500);
        let r = AdminError::MethodNotAllowed {
            method: "PUT".into(),
            allow: "GET",
        }
        .into_response();
        assert_eq!(r.status, 405);
        assert!(r.headers.iter().any(|(k, v)| *k == "allow" && v == "GET"));
    }

    #[test]
    fn bodies_need_json() {
        let mut req = HttpRequest::new(hyper::Method::POST, "/api/v1/streams", "");
        req.body = bytes::Bytes::from_static(b"{\"readonly\": true}");
        assert!(parse_body::<ReadonlyBody>(&req, false).unwrap().readonly);
        req.headers
            .insert("content-type", "text/plain".parse().unwrap());
        assert_eq!(
            parse_body::<ReadonlyBody>(&req, false)
                .unwrap_err()
                .status(),
            415
        );
        req.headers.insert(
            "content-type",
            "application/json; charset=utf-8".parse().unwrap(),
        );
        assert!(parse_body::<ReadonlyBody>(&req, false).is_ok());
        req.body = bytes::Bytes::from_static(b"{\"readonly\": 1}");
        assert_eq!(
            parse_body::<ReadonlyBody>(&req, false)
                .unwrap_err()
                .status(),
            400
        );
        req.body = bytes::Bytes::from_static(b"{\"readonly\": true, \"x\": 1}");
        assert_eq!(
            parse_body::<ReadonlyBody>(&req, false)
                .unwrap_err()
                .status(),
            400
        );
        req.body = bytes::Bytes::new();
        assert_eq!(
            parse_body::<ReadonlyBody>(&req, false)
                .unwrap_err()
                .status(),
            400
        );
        assert!(parse_body::<PauseBody>(&req, true).is_ok());
    }
}
