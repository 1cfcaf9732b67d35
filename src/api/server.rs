//! The gRPC server's connections: accepting, TLS, HTTP/2, the client's
//! `grpc-timeout`, and the tasks that run each call.
//!
//! hyper runs every HTTP/2 stream in a task of its own, and that task wakes
//! itself once per DATA frame it sends (it reserves send capacity after
//! registering its waker, and h2 grants it at once). tokio treats a task
//! woken during its own poll as a yield: queued at the back and another
//! worker woken to take it, a thread hand-off per response message that
//! does nothing. [`Repoll`] runs each of these tasks so that a wake from
//! inside its own poll polls it again in place, a few times at most, and
//! only other wakes reach the runtime (`BENCHMARKS.md`: a PublishAsync
//! stream acked one message at a time took 2.1 thread switches and 47 µs
//! of server CPU per message through the runtime's yield, 1.0 and 38 µs
//! this way).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures::task::AtomicWaker;
use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tonic::body::BoxBody;
use tonic::transport::server::Connected;
use tonic::Status;
use tower_service::Service;

/// How long a client has to complete its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Polls in place of a task woken during its own poll before the wake goes
/// to the runtime after all (a task that keeps waking itself, like one out
/// of its cooperative budget, must yield).
const REPOLLS: usize = 3;

/// HTTP/2 settings of the gRPC port.
#[derive(Debug, Clone, Copy)]
pub struct Http2 {
    pub stream_window: u32,
    pub connection_window: u32,
    pub max_frame: u32,
}

/// Serves `svc` on `listener` until `stop` fires, then lets every
/// connection finish its calls (HTTP/2 GOAWAY) and returns when all are
/// closed. Dropping the future closes every connection at once.
pub async fn serve<S, B>(
    listener: TcpListener,
    svc: S,
    http2: Http2,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: impl Future<Output = ()>,
) where
    S: Service<Request<BoxBody>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = hyper::server::conn::http2::Builder::new(RepollExecutor);
    builder
        .timer(TokioTimer::new())
        .initial_stream_window_size(http2.stream_window)
        .initial_connection_window_size(http2.connection_window)
        .max_frame_size(http2.max_frame)
        // As many streams per connection as the client opens, as grpc-go
        // and Liftbridge allow: a consumer may subscribe to hundreds of
        // partitions over one connection (hyper's default would hold the
        // 201st back until another ended).
        .max_concurrent_streams(None);
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let handler: Handler = Arc::new(move |req| {
        let mut svc = svc.clone();
        Box::pin(async move {
            let Ok(()) = std::future::poll_fn(|cx| svc.poll_ready(cx)).await;
            let Ok(resp) = svc.call(req).await;
            Ok(resp.map(tonic::body::boxed))
        })
    });
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: the listener
                        // itself is fine; give the condition a moment.
                        tracing::debug!(error = %e, "gRPC accept");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let conn = Conn {
                    builder: builder.clone(),
                    handler: handler.clone(),
                    closing: closing.clone(),
                };
                conns.spawn(conn.run(tcp, peer, tls.clone()));
            }
        }
    }
    drop(listener);
    let _ = closing_tx.send(true);
    while conns.join_next().await.is_some() {}
}

/// The service as every connection calls it.
type Handler =
    Arc<dyn Fn(Request<BoxBody>) -> BoxFuture<Result<Response<BoxBody>, Infallible>> + Send + Sync>;

/// One accepted connection.
struct Conn {
    builder: hyper::server::conn::http2::Builder<RepollExecutor>,
    handler: Handler,
    closing: tokio::sync::watch::Receiver<bool>,
}

impl Conn {
    async fn run(self, tcp: TcpStream, peer: SocketAddr, tls: Option<tokio_rustls::TlsAcceptor>) {
        let tcp_info = tcp.connect_info();
        match tls {
            None => {
                self.http2(tcp, move |ext| {
                    ext.insert(tcp_info.clone());
                })
                .await
            }
            Some(acceptor) => {
                let io =
                    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(io)) => io,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "gRPC TLS handshake");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "gRPC TLS handshake timed out");
                            return;
                        }
                    };
                // As tonic's own server does: the TLS details, with the
                // certificates the client presented, and the TCP ones.
                let info = io.connect_info();
                self.http2(io, move |ext| {
                    ext.insert(info.get_ref().clone());
                    ext.insert(info.clone());
                })
                .await
            }
        }
    }

    async fn http2<IO>(
        mut self,
        io: IO,
        info: impl Fn(&mut hyper::http::Extensions) + Send + 'static,
    ) where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let handler = self.handler.clone();
        let hyper_svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let mut req = req.map(tonic::body::boxed);
            info(req.extensions_mut());
            handler(req)
        });
        let conn = self.builder.serve_connection(TokioIo::new(io), hyper_svc);
        tokio::pin!(conn);
        let closing = async {
            let _ = self.closing.wait_for(|c| *c).await;
        };
        tokio::pin!(closing);
        let mut shutting = false;
        loop {
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "gRPC connection");
                    }
                    return;
                }
                _ = &mut closing, if !shutting => {
                    shutting = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// The client's `grpc-timeout` on every call: when it passes before the
/// call has answered (its response headers), the call is dropped and the
/// client gets CANCELLED "Timeout expired", as from tonic's own server.
/// Streams that have answered run on.
#[derive(Clone)]
pub struct Deadline<S>(pub S);

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<Request<BoxBody>> for Deadline<S>
where
    S: Service<Request<BoxBody>, Response = Response<BoxBody>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: Send + 'static,
{
    type Response = Response<BoxBody>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response<BoxBody>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The routes are always ready; an error here would be theirs.
        match self.0.poll_ready(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, req: Request<BoxBody>) -> Self::Future {
        let timeout = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(super::service::parse_grpc_timeout);
        let call = self.0.call(req);
        fn answer<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
            r: Result<Response<BoxBody>, E>,
        ) -> Result<Response<BoxBody>, Infallible> {
            Ok(r.unwrap_or_else(|e| Status::from_error(e.into()).into_http()))
        }
        // Two futures, so that a call without a timeout (most) does not
        // carry, and move, a timer it never sets.
        match timeout {
            Some(t) => Box::pin(async move {
                match tokio::time::timeout(t, call).await {
                    Ok(r) => answer(r),
                    Err(_) => Ok(Status::cancelled("Timeout expired").into_http()),
                }
            }),
            None => Box::pin(async move { answer(call.await) }),
        }
    }
}

/// The gRPC services of the port, chosen by the path's service part: the
/// health service by its name (`/NAME/method`), everything else the API,
/// whose generated router answers a method it does not know with
/// `Unimplemented` (as tonic's own router does for an unknown service).
#[derive(Clone)]
pub struct Services<A, H> {
    pub api: A,
    pub health: H,
}

impl<A, H> Service<Request<BoxBody>> for Services<A, H>
where
    A: Service<Request<BoxBody>, Response = Response<BoxBody>, Error = Infallible>,
    H: Service<Request<BoxBody>, Response = Response<BoxBody>, Error = Infallible>
        + tonic::server::NamedService,
{
    type Response = Response<BoxBody>;
    type Error = Infallible;
    type Future = futures::future::Either<A::Future, H::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Both generated servers are always ready; ask both all the same.
        let Poll::Ready(Ok(())) = self.api.poll_ready(cx) else {
            return Poll::Pending;
        };
        self.health.poll_ready(cx)
    }

    fn call(&mut self, req: Request<BoxBody>) -> Self::Future {
        let health = req
            .uri()
            .path()
            .strip_prefix('/')
            .and_then(|p| p.strip_prefix(H::NAME))
            .is_some_and(|p| p.starts_with('/'));
        if health {
            futures::future::Either::Right(self.health.call(req))
        } else {
            futures::future::Either::Left(self.api.call(req))
        }
    }
}

/// Runs hyper's tasks (one per connection and one per stream) through
/// [`Repoll`].
#[derive(Clone, Copy, Debug)]
struct RepollExecutor;

impl<F> hyper::rt::Executor<F> for RepollExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        tokio::spawn(Repoll::new(fut));
    }
}

/// A future polled again in place when it wakes itself during its poll
/// (see the module documentation); wakes from elsewhere go to the task.
struct Repoll<F> {
    inner: Pin<Box<F>>,
    wake: Arc<RepollWake>,
    waker: Waker,
}

/// The waker [`Repoll`] gives its future.
struct RepollWake {
    /// Set while the future is being polled.
    polling: AtomicBool,
    /// A wake arrived while it was being polled.
    woken: AtomicBool,
    /// The task's own waker, for wakes from outside the poll.
    task: AtomicWaker,
}

impl Wake for RepollWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.woken.store(true, Ordering::SeqCst);
            // Still polling: the poll sees `woken` once it ends. Else it
            // may have looked already, and the task must be woken.
            if self.polling.load(Ordering::SeqCst) {
                return;
            }
        }
        self.task.wake();
    }
}

impl<F: Future> Repoll<F> {
    fn new(fut: F) -> Self {
        let wake = Arc::new(RepollWake {
            polling: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            task: AtomicWaker::new(),
        });
        Repoll {
            inner: Box::pin(fut),
            waker: Waker::from(wake.clone()),
            wake,
        }
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.wake.task.register(cx.waker());
        let this = &mut *self;
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..REPOLLS {
            this.wake.woken.store(false, Ordering::SeqCst);
            this.wake.polling.store(true, Ordering::SeqCst);
            let r = this.inner.as_mut().poll(&mut inner_cx);
            this.wake.polling.store(false, Ordering::SeqCst);
            if r.is_ready() {
                return r;
            }
            if !this.wake.woken.swap(false, Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts the wakes that reach the task.
    struct Counting(AtomicUsize);

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Wakes itself during each of its first `self_wakes` polls, then ends.
    struct SelfWaking {
        polls: usize,
        self_wakes: usize,
    }

    impl Future for SelfWaking {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.polls > self.self_wakes {
                return Poll::Ready(self.polls);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[test]
    fn a_wake_during_the_poll_polls_again_in_place() {
        let task = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let mut f = Repoll::new(SelfWaking {
            polls: 0,
            self_wakes: 2,
        });
        assert_eq!(Pin::new(&mut f).poll(&mut cx), Poll::Ready(3));
        assert_eq!(task.0.load(Ordering::SeqCst), 0, "no wake reached the task");
    }

    #[test]
    fn a_future_that_keeps_waking_itself_still_yields() {
        let task = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let mut f = Repoll::new(SelfWaking {
            polls: 0,
            self_wakes: usize::MAX,
        });
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert_eq!(f.inner.polls, REPOLLS);
        assert_eq!(
            task.0.load(Ordering::SeqCst),
            1,
            "the task was woken to yield"
        );
    }

    #[test]
    fn wakes_from_outside_the_poll_reach_the_task() {
        let task = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let mut f = Repoll::new(rx);
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        std::thread::spawn(move || tx.send(7))
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert_eq!(Pin::new(&mut f).poll(&mut cx), Poll::Ready(Ok(7)));
    }

    /// A call that never answers.
    #[derive(Clone)]
    struct Never;

    impl Service<Request<BoxBody>> for Never {
        type Response = Response<BoxBody>;
        type Error = Infallible;
        type Future = std::future::Pending<Result<Response<BoxBody>, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<BoxBody>) -> Self::Future {
            std::future::pending()
        }
    }

    #[tokio::test]
    async fn a_call_past_the_clients_grpc_timeout_is_cancelled() {
        let mut d = Deadline(Never);
        let mut req = Request::new(tonic::body::empty_body());
        req.headers_mut()
            .insert("grpc-timeout", "20m".parse().unwrap());
        let resp = d.call(req).await.unwrap();
        let st = Status::from_header_map(resp.headers()).expect("a status");
        assert_eq!(st.code(), tonic::Code::Cancelled);
        assert_eq!(st.message(), "Timeout expired");

        // Without a timeout the call runs on.
        let req = Request::new(tonic::body::empty_body());
        let waited = tokio::time::timeout(Duration::from_millis(100), d.call(req)).await;
        assert!(waited.is_err());
    }
}
