//! gRPC request metrics: a tower layer on the tonic server that counts
//! requests by method and status code and times them by method.
//!
//! The status is read where gRPC puts it: in the response headers for a
//! trailers-only response (errors returned by a handler), otherwise in the
//! trailers at the end of the body (unary OK responses and streams), which
//! is why the response body is wrapped. A body dropped before its trailers
//! (the client went away) counts as `Cancelled`. The duration runs from the
//! request to the status, so for `Subscribe` it is the stream's lifetime.
//!
//! Labels are bounded: `method` is one of the known `proto.API` and health
//! methods or `other`; `code` is one of gRPC's 17 codes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use hyper::body::{Body, Frame, SizeHint};
use hyper::{Request, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// The methods served (`proto.API` v1.9.0 and `grpc.health.v1.Health`).
const METHODS: &[&str] = &[
    "CreateStream",
    "DeleteStream",
    "PauseStream",
    "SetStreamReadonly",
    "Subscribe",
    "FetchMetadata",
    "FetchPartitionMetadata",
    "Publish",
    "PublishAsync",
    "PublishToSubject",
    "SetCursor",
    "FetchCursor",
    "JoinConsumerGroup",
    "LeaveConsumerGroup",
    "FetchConsumerGroupAssignments",
    "ReportConsumerGroupCoordinator",
    "Check",
    "Watch",
];

/// The method label of a request path (`/proto.API/Publish` → `Publish`).
pub fn method_label(path: &str) -> &'static str {
    let last = path.rsplit('/').next().unwrap_or("");
    METHODS
        .iter()
        .find(|m| **m == last)
        .copied()
        .unwrap_or("other")
}

/// The code label of a `grpc-status` value (`5` → `NotFound`).
pub fn code_label(value: &[u8]) -> &'static str {
    use tonic::Code::*;
    match tonic::Code::from_bytes(value) {
        Ok => "OK",
        Cancelled => "Cancelled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    method: &'static str,
    code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: &'static str,
}

fn new_histogram() -> Histogram {
    // 100 µs to about 26 s, ×2.
    Histogram::new(exponential_buckets(0.000_1, 2.0, 19))
}

/// The gRPC series of one node. Cheap to clone (shared values).
#[derive(Debug, Clone)]
pub struct GrpcMetrics {
    requests: Family<CodeLabels, Counter>,
    duration: Family<MethodLabels, Histogram, fn() -> Histogram>,
}

impl Default for GrpcMetrics {
    fn default() -> Self {
        GrpcMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(new_histogram),
        }
    }
}

impl GrpcMetrics {
    /// Registers the series with `reg`.
    pub fn register(&self, reg: &mut Registry) {
        reg.register(
            "liftbridge_grpc_requests",
            "gRPC requests completed, by method and status code",
            self.requests.clone(),
        );
        reg.register_with_unit(
            "liftbridge_grpc_request_duration",
            "gRPC request duration from the request to its status, by method",
            Unit::Seconds,
            self.duration.clone(),
        );
    }

    /// The tower layer recording into these series.
    pub fn layer(&self) -> GrpcMetricsLayer {
        GrpcMetricsLayer { m: self.clone() }
    }

    fn record(&self, method: &'static str, code: &'static str, started: Instant) {
        self.requests
            .get_or_create(&CodeLabels { method, code })
            .inc();
        self.duration
            .get_or_create(&MethodLabels { method })
            .observe(started.elapsed().as_secs_f64());
    }
}

/// Tower layer for `tonic::transport::Server::builder().layer(...)`.
#[derive(Debug, Clone)]
pub struct GrpcMetricsLayer {
    m: GrpcMetrics,
}

impl<S> tower_layer::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetricsService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetricsService {
            inner,
            m: self.m.clone(),
        }
    }
}

/// The service built by [`GrpcMetricsLayer`].
#[derive(Debug, Clone)]
pub struct GrpcMetricsService<S> {
    inner: S,
    m: GrpcMetrics,
}

/// Records one request exactly once: when its status is known, or as
/// `Cancelled` when dropped before that.
struct Recorder {
    m: GrpcMetrics,
    method: &'static str,
    started: Instant,
    done: bool,
}

impl Recorder {
    fn finish(&mut self, code: &'static str) {
        if !self.done {
            self.done = true;
            self.m.record(self.method, code, self.started);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.finish("Cancelled");
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for GrpcMetricsService<S>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Body + Unpin + Send + 'static,
{
    type Response = Response<MeteredBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let mut rec = Recorder {
            m: self.m.clone(),
            method: method_label(req.uri().path()),
            started: Instant::now(),
            done: false,
        };
        let fut = self.inner.call(req);
        Box::pin(async move {
            match fut.await {
                Ok(resp) => {
                    // Trailers-only response: the status is in the headers.
                    if let Some(v) = resp.headers().get("grpc-status") {
                        rec.finish(code_label(v.as_bytes()));
                    }
                    Ok(resp.map(|inner| MeteredBody { inner, rec }))
                }
                Err(e) => {
                    rec.finish("Unknown");
                    Err(e)
                }
            }
        })
    }
}

/// A response body that records the request when its trailers pass.
pub struct MeteredBody<B> {
    inner: B,
    rec: Recorder,
}

impl<B: Body + Unpin> Body for MeteredBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        // Both fields are Unpin (B by bound, Recorder by construction).
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(|t| t.get("grpc-status")) {
                    this.rec.finish(code_label(code.as_bytes()));
                }
            }
            Poll::Ready(Some(Err(_))) => this.rec.finish("Internal"),
            // The body ended without trailers: no status was sent.
            Poll::Ready(None) => this.rec.finish("Unknown"),
            Poll::Pending => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded() {
        assert_eq!(method_label("/proto.API/Publish"), "Publish");
        assert_eq!(method_label("/grpc.health.v1.Health/Check"), "Check");
        assert_eq!(method_label("/proto.API/Nonsense123"), "other");
        assert_eq!(method_label(""), "other");
        assert_eq!(code_label(b"0"), "OK");
        assert_eq!(code_label(b"5"), "NotFound");
        assert_eq!(code_label(b"99"), "Unknown");
        assert_eq!(code_label(b"garbage"), "Unknown");
    }
}
