//! The HTTP port: NATS monitoring JSON, metrics, admin API and UI.
//!
//! A small hyper 1 (HTTP/1.1) server with a [`Router`] of registered
//! handlers, so each module adds its own paths without touching the server:
//! NATS monitoring (`/varz`, `/connz`, `/routez`, `/subsz`, `/healthz`, see
//! [`monitoring_routes`]), and later `/metrics`, `/api/v1/…` and UI assets
//! (prefix routes). Handlers get a parsed [`HttpRequest`] (method, path,
//! raw query, body) and return an [`HttpResponse`]; JSON helpers set
//! `application/json`. Unknown paths get a 404 JSON body; handlers reject
//! bad queries with 400. An optional observer ([`Router::observe`], set by
//! the metrics routes) is told the matched route pattern and the status of
//! every dispatched request.
//!
//! Security: an optional TLS acceptor (rustls, [`HttpState::with_tls`])
//! wraps every connection, and an optional auth layer ([`auth`],
//! [`HttpState::with_auth`]) checks each request before its body is read
//! and before any route runs, so no handler can skip it.
//!
//! Invariants: no lock is held across `.await`; request bodies are capped
//! ([`MAX_BODY`]); TLS handshakes are bounded by a timeout; shutdown stops
//! accepting, lets in-flight requests finish (bounded by a timeout) and
//! then returns.

pub mod auth;

pub mod ui;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use auth::AuthConfig;

/// Largest request body accepted (the admin API posts small JSON).
pub const MAX_BODY: usize = 1024 * 1024;

/// How long shutdown waits for in-flight requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long a client may take to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's headers (and how long a
/// kept-alive connection may sit before its next request starts). Past it
/// the connection is closed, so slow or silent clients (slowloris) cannot
/// hold connections open forever.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of the HTTP server.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen for HTTP on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A request as handlers see it.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub method: hyper::Method,
    pub path: String,
    /// Raw query string without `?` (may be empty).
    pub query: String,
    /// Request headers (content type, authorization, …).
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl HttpRequest {
    /// A request without headers or body (for handlers called directly).
    pub fn new(method: hyper::Method, path: &str, query: &str) -> HttpRequest {
        HttpRequest {
            method,
            path: path.to_string(),
            query: query.to_string(),
            headers: hyper::HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    /// The value of header `name` when present and valid text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Query parameters, percent-decoded (`+` as space); later duplicates
    /// win.
    pub fn query_params(&self) -> HashMap<String, String> {
        parse_query(&self.query)
    }
}

/// Parses `a=1&b=x%20y` into a map.
pub fn parse_query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A response built by a handler.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
    /// Extra headers (name, value).
    pub headers: Vec<(&'static str, String)>,
}

impl HttpResponse {
    /// A JSON response, pretty-printed as nats-server does.
    pub fn json(status: u16, v: &Value) -> HttpResponse {
        // Serializing a `serde_json::Value` cannot fail.
        Self::json_bytes(status, serde_json::to_vec_pretty(v).unwrap_or_default())
    }

    /// A JSON response on one line: for bulk data (message pages), where
    /// indentation would add a third to the size.
    pub fn json_compact(status: u16, v: &Value) -> HttpResponse {
        // Serializing a `serde_json::Value` cannot fail.
        Self::json_bytes(status, serde_json::to_vec(v).unwrap_or_default())
    }

    fn json_bytes(status: u16, mut body: Vec<u8>) -> HttpResponse {
        body.push(b'\n');
        HttpResponse {
            status,
            content_type: "application/json",
            body: body.into(),
            headers: Vec::new(),
        }
    }

    /// `{"error": msg}` with `status`.
    pub fn error(status: u16, msg: &str) -> HttpResponse {
        HttpResponse::json(status, &serde_json::json!({ "code": status, "error": msg }))
    }

    /// A body with an explicit content type (metrics text, UI assets).
    pub fn bytes(status: u16, content_type: &'static str, body: impl Into<Bytes>) -> HttpResponse {
        HttpResponse {
            status,
            content_type,
            body: body.into(),
            headers: Vec::new(),
        }
    }
}

/// A boxed future returned by a handler.
pub type HandlerFuture = Pin<Box<dyn Future<Output = HttpResponse> + Send>>;
/// A request handler.
pub type Handler = Arc<dyn Fn(HttpRequest) -> HandlerFuture + Send + Sync>;

/// Told about every dispatched request: the matched route pattern (an
/// exact path, a prefix, or `unmatched`) and the response status. Patterns
/// are registered in code, so the set of values is bounded.
pub type Observer = Arc<dyn Fn(&str, u16) + Send + Sync>;

/// Paths to handlers: exact paths first, then the longest matching prefix.
#[derive(Clone, Default)]
pub struct Router {
    exact: HashMap<String, Handler>,
    prefixes: Vec<(String, Handler)>,
    observer: Option<Observer>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut paths: Vec<&String> = self.exact.keys().collect();
        paths.sort();
        f.debug_struct("Router")
            .field("exact", &paths)
            .field(
                "prefixes",
                &self.prefixes.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Router {
    /// An empty router (everything is 404).
    pub fn new() -> Router {
        Router::default()
    }

    /// Registers an async handler for an exact path (any method).
    pub fn route<F, Fut>(mut self, path: &str, f: F) -> Router
    where
        F: Fn(HttpRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HttpResponse> + Send + 'static,
    {
        self.exact
            .insert(path.to_string(), Arc::new(move |r| Box::pin(f(r))));
        self
    }

    /// Registers a synchronous handler for an exact path.
    pub fn route_sync<F>(self, path: &str, f: F) -> Router
    where
        F: Fn(&HttpRequest) -> HttpResponse + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        self.route(path, move |r| {
            let f = f.clone();
            async move { f(&r) }
        })
    }

    /// Registers an async handler for every path starting with `prefix`
    /// (e.g. `/api/v1/`, `/ui/`).
    pub fn prefix<F, Fut>(mut self, prefix: &str, f: F) -> Router
    where
        F: Fn(HttpRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HttpResponse> + Send + 'static,
    {
        self.prefixes
            .push((prefix.to_string(), Arc::new(move |r| Box::pin(f(r)))));
        // Longest prefix first.
        self.prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        self
    }

    /// Sets the observer told about every request (metrics).
    pub fn observe<F>(mut self, f: F) -> Router
    where
        F: Fn(&str, u16) + Send + Sync + 'static,
    {
        self.observer = Some(Arc::new(f));
        self
    }

    /// Adds every route of `other` (its routes and observer win on
    /// conflicts).
    pub fn merge(mut self, other: Router) -> Router {
        if other.observer.is_some() {
            self.observer = other.observer;
        }
        self.exact.extend(other.exact);
        self.prefixes.extend(other.prefixes);
        self.prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        self
    }

    /// The handler for `path` and the pattern it was registered under.
    fn find(&self, path: &str) -> Option<(&str, &Handler)> {
        self.exact
            .get_key_value(path)
            .or_else(|| {
                self.prefixes
                    .iter()
                    .find(|(p, _)| path.starts_with(p.as_str()))
                    .map(|(p, h)| (p, h))
            })
            .map(|(p, h)| (p.as_str(), h))
    }

    /// Dispatches a request (404 JSON when no route matches).
    pub async fn dispatch(&self, req: HttpRequest) -> HttpResponse {
        // nats-server accepts a trailing slash on its endpoints.
        let handler = self.find(&req.path).or_else(|| {
            req.path
                .strip_suffix('/')
                .filter(|p| !p.is_empty())
                .and_then(|p| self.exact.get_key_value(p))
                .map(|(p, h)| (p.as_str(), h))
        });
        let (route, resp) = match handler {
            Some((route, h)) => (route, h(req).await),
            None => (
                "unmatched",
                HttpResponse::error(404, &format!("no such endpoint: {}", req.path)),
            ),
        };
        self.notify(route, resp.status);
        resp
    }

    /// Tells the observer about a request answered without a route (refused
    /// by the server before dispatch); `what` is a fixed label.
    fn notify(&self, what: &str, status: u16) {
        if let Some(o) = &self.observer {
            o(what, status);
        }
    }
}

/// What the HTTP server serves, and how it guards the port.
#[derive(Debug, Clone, Default)]
pub struct HttpState {
    pub router: Router,
    /// Credentials checked before routing (open when none are configured).
    pub auth: AuthConfig,
    /// TLS for every connection when set (see [`tls_config`]).
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl HttpState {
    /// State serving `router` over plain HTTP without authentication.
    pub fn new(router: Router) -> HttpState {
        HttpState {
            router,
            ..HttpState::default()
        }
    }

    /// Requires the credentials of `auth`.
    pub fn with_auth(mut self, auth: AuthConfig) -> HttpState {
        self.auth = auth;
        self
    }

    /// Serves HTTPS only, with `tls`.
    pub fn with_tls(mut self, tls: Arc<rustls::ServerConfig>) -> HttpState {
        self.tls = Some(tls);
        self
    }
}

/// A rustls server config for the HTTP port from PEM files (certificate
/// chain and key), offering HTTP/1.1 by ALPN. Reads the files: call it from
/// a blocking context.
pub fn tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<Arc<rustls::ServerConfig>, crate::tls::TlsError> {
    let files = crate::config::nats::TlsFiles {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        ca: None,
        verify: false,
        params: Default::default(),
        handshake_first: None,
    };
    let mut cfg = (*crate::tls::server_config(&files)?).clone();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A running HTTP server.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// The bound address (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, waits for in-flight requests (bounded) and returns.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Binds `addr` (port 0 picks a free port) and serves `state` until
/// [`HttpServer::shutdown`].
pub async fn serve(addr: SocketAddr, state: HttpState) -> Result<HttpServer, HttpError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })?;
    serve_listener(listener, state)
}

/// Serves `state` on an already bound listener (lets a caller learn a
/// random port before starting other components). Must be called inside a
/// tokio runtime.
pub fn serve_listener(listener: TcpListener, state: HttpState) -> Result<HttpServer, HttpError> {
    let local = listener.local_addr().map_err(|source| HttpError::Bind {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })?;
    let cancel = CancellationToken::new();
    let tls = state.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let task = tokio::spawn(accept_loop(listener, Arc::new(state), tls, cancel.clone()));
    Ok(HttpServer {
        addr: local,
        cancel,
        task: Some(task),
    })
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<HttpState>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    cancel: CancellationToken,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "http accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let state = state.clone();
        let cancel = cancel.clone();
        let tls = tls.clone();
        conns.spawn(async move {
            match tls {
                None => serve_connection(stream, state, cancel).await,
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream));
                    let tls_stream = tokio::select! {
                        _ = cancel.cancelled() => return,
                        r = handshake => r,
                    };
                    match tls_stream {
                        Ok(Ok(s)) => serve_connection(s, state, cancel).await,
                        // Plain HTTP to the TLS port, scanners, timeouts.
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "http tls handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "http tls handshake timed out"),
                    }
                }
            }
        });
        // Reap finished connections so the set does not grow.
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(1), async {
        while conns.join_next().await.is_some() {}
    })
    .await;
}

/// Serves HTTP/1.1 on one connection (plain or TLS) until it closes or the
/// server shuts down.
async fn serve_connection<I>(io: I, state: Arc<HttpState>, cancel: CancellationToken)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| {
        let state = state.clone();
        async move { Ok::<_, std::convert::Infallible>(handle(&state, req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = cancel.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, conn).await;
        }
    }
}

/// The server's own checks, in order, then the route: credentials (an
/// unauthenticated client gets nothing read), the cross-origin guard, the
/// body limit. Refusals are reported to the router's observer under fixed
/// labels.
async fn respond(
    state: &HttpState,
    parts: &hyper::http::request::Parts,
    body: Incoming,
) -> HttpResponse {
    if let Err(why) = state
        .auth
        .check(&parts.method, parts.uri.path(), &parts.headers)
    {
        let r = state.auth.refusal_response(why);
        state.router.notify("unauthenticated", r.status);
        return r;
    }
    if let Some(r) = auth::cross_origin_refusal(&parts.method, &parts.headers) {
        state.router.notify("cross_origin", r.status);
        return r;
    }
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            let r = HttpResponse::error(413, "request body too large or unreadable");
            state.router.notify("body_too_large", r.status);
            return r;
        }
    };
    let req = HttpRequest {
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: parts.headers.clone(),
        body,
    };
    state.router.dispatch(req).await
}

async fn handle(state: &HttpState, req: hyper::Request<Incoming>) -> hyper::Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let resp = respond(state, &parts, body).await;
    let head = parts.method == hyper::Method::HEAD;
    let mut b = hyper::Response::builder()
        .status(resp.status)
        .header("content-type", resp.content_type)
        .header("content-length", resp.body.len());
    for (k, v) in &resp.headers {
        b = b.header(*k, v);
    }
    let body = if head { Bytes::new() } else { resp.body };
    b.body(Full::new(body)).unwrap_or_else(|_| {
        // Only an invalid status or header can fail; answer 500 then.
        let mut r =
            hyper::Response::new(Full::new(Bytes::from_static(b"{\"error\":\"internal\"}")));
        *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}

/// Where the NATS monitoring endpoints get their data (implemented by the
/// embedded NATS server).
pub trait MonitorSource: Send + Sync + 'static {
    /// `/varz`.
    fn varz(&self) -> Value;
    /// `/connz` with the raw query (`Err` = bad query → 400).
    fn connz(&self, query: &str) -> Result<Value, String>;
    /// `/subsz` with the raw query (`Err` = bad query → 400).
    fn subsz(&self, query: &str) -> Result<Value, String>;
    /// `/healthz` (`status` other than `ok` → 503).
    fn healthz(&self) -> Value;
    /// `/routez` with the raw query.
    fn routez(&self, query: &str) -> Value;
    /// `/leafz` with the raw query.
    fn leafz(&self, query: &str) -> Value;
    /// `/accountz` with the raw query (`Err` = unknown account → 400).
    fn accountz(&self, _query: &str) -> Result<Value, String> {
        Err("accounts are not available".to_string())
    }
}

impl MonitorSource for crate::nats::server::NatsServer {
    fn varz(&self) -> Value {
        self.varz_json()
    }
    fn connz(&self, query: &str) -> Result<Value, String> {
        self.connz_json(query)
    }
    fn subsz(&self, query: &str) -> Result<Value, String> {
        self.subsz_json(query)
    }
    fn healthz(&self) -> Value {
        self.healthz_json()
    }
    fn routez(&self, query: &str) -> Value {
        self.routez_json(query)
    }
    fn leafz(&self, query: &str) -> Value {
        self.leafz_json(query)
    }
    fn accountz(&self, query: &str) -> Result<Value, String> {
        self.accountz_json(query)
    }
}

/// Routes for the NATS monitoring endpoints served from `src`: `/varz`,
/// `/connz`, `/subsz` (and `/subscriptionsz`), `/routez`, `/leafz`,
/// `/accountz`, `/healthz`, and `/` listing them.
pub fn monitoring_routes<M: MonitorSource>(src: Arc<M>) -> Router {
    let (a, b, c, d, e) = (
        src.clone(),
        src.clone(),
        src.clone(),
        src.clone(),
        src.clone(),
    );
    let subsz = move |r: &HttpRequest| match c.subsz(&r.query) {
        Ok(v) => HttpResponse::json(200, &v),
        Err(e) => HttpResponse::error(400, &e),
    };
    let subsz = Arc::new(subsz);
    let subsz2 = subsz.clone();
    let accz = src.clone();
    Router::new()
        .route_sync("/accountz", move |r| match accz.accountz(&r.query) {
            Ok(v) => HttpResponse::json(200, &v),
            Err(e) => HttpResponse::error(400, &e),
        })
        .route_sync("/varz", move |_| HttpResponse::json(200, &a.varz()))
        .route_sync("/connz", move |r| match b.connz(&r.query) {
            Ok(v) => HttpResponse::json(200, &v),
            Err(e) => HttpResponse::error(400, &e),
        })
        .route_sync("/subsz", move |r| subsz(r))
        .route_sync("/routez", move |r| {
            HttpResponse::json(200, &e.routez(&r.query))
        })
        .route_sync("/leafz", move |r| {
            HttpResponse::json(200, &src.leafz(&r.query))
        })
        .route_sync("/subscriptionsz", move |r| subsz2(r))
        .route_sync("/healthz", move |_| {
            let v = d.healthz();
            let ok = v.get("status").and_then(Value::as_str) == Some("ok");
            HttpResponse::json(if ok { 200 } else { 503 }, &v)
        })
        .route_sync("/", |_| {
            HttpResponse::json(
                200,
                &serde_json::json!({
                    "endpoints": ["/varz", "/connz", "/routez", "/leafz", "/subsz", "/accountz", "/healthz"]
                }),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Fake {
        hits: AtomicU64,
        healthy: bool,
    }

    impl MonitorSource for Fake {
        fn varz(&self) -> Value {
            let n = self.hits.fetch_add(1, Ordering::Relaxed) + 1;
            serde_json::json!({ "in_msgs": n })
        }
        fn connz(&self, q: &str) -> Result<Value, String> {
            let p = parse_query(q);
            match p.get("limit").map(|l| l.parse::<u64>()) {
                Some(Err(_)) => Err("bad limit".into()),
                Some(Ok(l)) => Ok(serde_json::json!({ "limit": l })),
                None => Ok(serde_json::json!({ "limit": 1024 })),
            }
        }
        fn subsz(&self, _q: &str) -> Result<Value, String> {
            Ok(serde_json::json!({ "num_subscriptions": 0 }))
        }
        fn healthz(&self) -> Value {
            if self.healthy {
                serde_json::json!({ "status": "ok" })
            } else {
                serde_json::json!({ "status": "unavailable" })
            }
        }
        fn routez(&self, _q: &str) -> Value {
            serde_json::json!({ "num_routes": 0 })
        }
        fn leafz(&self, _q: &str) -> Value {
            serde_json::json!({ "leafnodes": 0 })
        }
    }

    /// Minimal HTTP/1.1 client over a real socket: (status, headers, body).
    async fn get(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        let text = String::from_utf8(buf).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_ascii_lowercase(), body.to_string())
    }

    async fn start(healthy: bool) -> HttpServer {
        let src = Arc::new(Fake {
            hits: AtomicU64::new(0),
            healthy,
        });
        let router = monitoring_routes(src)
            .prefix("/api/v1/", |r| async move {
                HttpResponse::json(200, &serde_json::json!({ "path": r.path }))
            })
            .route("/metrics", |_| async {
                HttpResponse::bytes(200, "text/plain; version=0.0.4", "up 1\n")
            });
        serve("127.0.0.1:0".parse().unwrap(), HttpState::new(router))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn routes_statuses_and_content_types() {
        let srv = start(true).await;
        let addr = srv.local_addr();
        assert_ne!(addr.port(), 0);
        let (st, head, body) = get(addr, "GET", "/varz").await;
        assert_eq!(st, 200);
        assert!(head.contains("content-type: application/json"), "{head}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["in_msgs"], 1);
        let (st, _, body) = get(addr, "GET", "/varz/").await;
        assert_eq!(st, 200);
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["in_msgs"], 2);

        let (st, _, body) = get(addr, "GET", "/connz?limit=5&subs=1").await;
        assert_eq!(st, 200);
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["limit"], 5);
        let (st, head, body) = get(addr, "GET", "/connz?limit=abc").await;
        assert_eq!(st, 400);
        assert!(head.contains("application/json"));
        assert!(body.contains("bad limit"));

        let (st, head, body) = get(addr, "GET", "/nope").await;
        assert_eq!(st, 404);
        assert!(head.contains("application/json"));
        assert!(serde_json::from_str::<Value>(&body).unwrap()["error"]
            .as_str()
            .unwrap()
            .contains("/nope"));

        let (st, _, body) = get(addr, "GET", "/api/v1/streams/x").await;
        assert_eq!(st, 200);
        assert!(body.contains("/api/v1/streams/x"));
        let (st, head, body) = get(addr, "GET", "/metrics").await;
        assert_eq!(st, 200);
        assert!(head.contains("text/plain"));
        assert_eq!(body, "up 1\n");
        let (st, _, body) = get(addr, "HEAD", "/healthz").await;
        assert_eq!(st, 200);
        assert!(body.is_empty());
        let (st, _, body) = get(addr, "GET", "/subsz").await;
        assert_eq!(st, 200);
        assert!(body.contains("num_subscriptions"));
        srv.shutdown().await;
        // Closed after shutdown.
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test]
    async fn unhealthy_is_503() {
        let srv = start(false).await;
        let (st, _, body) = get(srv.local_addr(), "GET", "/healthz").await;
        assert_eq!(st, 503);
        assert!(body.contains("unavailable"));
        srv.shutdown().await;
    }

    #[tokio::test]
    async fn observer_sees_route_patterns_and_statuses() {
        let seen = Arc::new(parking_lot::Mutex::new(Vec::<(String, u16)>::new()));
        let s2 = seen.clone();
        let observed = Router::new()
            .route_sync("/metrics", |_| HttpResponse::bytes(200, "text/plain", "x"))
            .observe(move |route, status| s2.lock().push((route.to_string(), status)));
        // The observer survives being merged into another router.
        let router = Router::new()
            .route_sync("/varz", |_| HttpResponse::error(503, "down"))
            .prefix("/ui/", |_| async {
                HttpResponse::bytes(200, "text/html", "")
            })
            .merge(observed);
        for path in ["/metrics", "/varz/", "/ui/app.js", "/nope"] {
            router
                .dispatch(HttpRequest::new(hyper::Method::GET, path, ""))
                .await;
        }
        assert_eq!(
            *seen.lock(),
            vec![
                ("/metrics".to_string(), 200),
                ("/varz".to_string(), 503),
                ("/ui/".to_string(), 200),
                ("unmatched".to_string(), 404),
            ]
        );
    }

    #[test]
    fn query_decoding() {
        let q = parse_query("subs=1&test=foo%2Ebar&x=a+b&flag&bad=%zz&end=%4");
        assert_eq!(q["subs"], "1");
        assert_eq!(q["test"], "foo.bar");
        assert_eq!(q["x"], "a b");
        assert_eq!(q["flag"], "");
        assert_eq!(q["bad"], "%zz");
        assert_eq!(q["end"], "%4");
    }
}
