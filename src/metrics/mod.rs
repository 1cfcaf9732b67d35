//! Prometheus metrics at `/metrics`.
//!
//! One [`NodeMetrics`] per node owns a `prometheus-client` registry with:
//! - collectors read at scrape time from state other modules already keep
//!   (NATS counters behind `/varz`, partition logs and metadata, `/proc`),
//!   so the hot paths carry no metric code of their own ([`nats`],
//!   [`partitions`], [`process`]);
//! - the process-wide storage histograms and counters fed by the storage
//!   writer threads ([`store`]);
//! - gRPC requests by method and code with a duration histogram, recorded
//!   by a tower layer on the tonic server ([`grpc`]);
//! - HTTP requests by route and status, recorded by the HTTP router's
//!   observer (installed by [`routes`]).
//!
//! Exposition: the crate encodes OpenMetrics; [`to_prometheus_text`] turns
//! that into the Prometheus text format 0.0.4 (counter HELP/TYPE carry the
//! `_total` name, no `# UNIT`, no `# EOF`), which `promtool check metrics`
//! accepts cleanly, served as [`CONTENT_TYPE`].
//!
//! Rendering reads files (`/proc`, database sizes), so the handler runs it
//! on the blocking pool, never on an async worker. Label sets are bounded:
//! stream and partition, gRPC method and code, HTTP route pattern and
//! status.

pub mod grpc;
pub mod nats;
pub mod partitions;
pub mod process;
pub mod store;

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::cluster::Metadata;
use crate::http::{HttpResponse, Router};
use crate::nats::NatsServer;
use crate::partition::PartitionManager;

/// Content type of the `/metrics` response (Prometheus text format).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Errors of metrics rendering.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The encoder failed (a collector returned an error).
    #[error("encoding metrics: {0}")]
    Encode(#[from] std::fmt::Error),
    /// The blocking render task did not complete.
    #[error("metrics render task failed: {0}")]
    Task(String),
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    status: String,
}

struct Inner {
    registry: Registry,
    grpc: grpc::GrpcMetrics,
    http_requests: Family<HttpLabels, Counter>,
}

/// The metrics of one node. Cheap to clone.
#[derive(Clone)]
pub struct NodeMetrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NodeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMetrics").finish_non_exhaustive()
    }
}

impl NodeMetrics {
    /// Builds the registry of a node from its running parts.
    pub fn new(nats: NatsServer, meta: Metadata, parts: PartitionManager) -> NodeMetrics {
        let mut registry = Registry::default();
        let grpc = grpc::GrpcMetrics::default();
        grpc.register(&mut registry);
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "liftbridge_http_requests",
            "HTTP requests served, by route pattern and status",
            http_requests.clone(),
        );
        store::store().register(&mut registry);
        registry.register_collector(Box::new(nats::NatsCollector::new(nats)));
        registry.register_collector(Box::new(partitions::PartitionCollector::new(meta, parts)));
        registry.register_collector(Box::new(process::ProcessCollector::new()));
        NodeMetrics {
            inner: Arc::new(Inner {
                registry,
                grpc,
                http_requests,
            }),
        }
    }

    /// The tower layer counting gRPC requests (add to the tonic server).
    pub fn grpc_layer(&self) -> grpc::GrpcMetricsLayer {
        self.inner.grpc.layer()
    }

    /// Counts one HTTP request served by `route` (a registered pattern or
    /// `unmatched`) with `status`.
    pub fn observe_http(&self, route: &str, status: u16) {
        self.inner
            .http_requests
            .get_or_create(&HttpLabels {
                route: route.to_string(),
                status: status.to_string(),
            })
            .inc();
    }

    /// Renders the exposition text. Blocking (reads `/proc` and file
    /// sizes): call from a blocking thread.
    pub fn render(&self) -> Result<String, MetricsError> {
        let mut om = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode(&mut om, &self.inner.registry)?;
        Ok(to_prometheus_text(&om))
    }

    /// Renders on the blocking pool.
    pub async fn render_async(&self) -> Result<String, MetricsError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.render())
            .await
            .map_err(|e| MetricsError::Task(e.to_string()))?
    }
}

/// Converts the OpenMetrics text produced by `prometheus-client` to the
/// Prometheus text format 0.0.4: the HELP and TYPE lines of a counter name
/// its `_total` sample, `# UNIT` lines and the `# EOF` marker are dropped.
pub fn to_prometheus_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    // Pending HELP line: its name is only known to need `_total` once the
    // TYPE line that follows it is seen.
    let mut help: Option<(&str, &str)> = None;
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let suffix = if kind == "counter" { "_total" } else { "" };
            if let Some((h_name, text)) = help.take() {
                out.push_str(&format!("# HELP {h_name}{suffix} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name}{suffix} {kind}\n"));
            continue;
        }
        if let Some((name, text)) = help.take() {
            out.push_str(&format!("# HELP {name} {text}\n"));
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The `/metrics` route, plus the router observer that counts every HTTP
/// request by route and status. Merge it into the node's router.
pub fn routes(metrics: NodeMetrics) -> Router {
    let obs = metrics.clone();
    Router::new()
        .route("/metrics", move |_| {
            let m = metrics.clone();
            async move {
                match m.render_async().await {
                    Ok(text) => HttpResponse::bytes(200, CONTENT_TYPE, text),
                    Err(e) => {
                        tracing::warn!(error = %e, "rendering metrics");
                        HttpResponse::error(500, &e.to_string())
                    }
                }
            }
        })
        .observe(move |route, status| obs.observe_http(route, status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_becomes_prometheus_text() {
        let om = "# HELP a_bytes Bytes.\n# TYPE a_bytes counter\n# UNIT a_bytes bytes\n\
                  a_bytes_total{x=\"1\"} 3\n# HELP g A gauge.\n# TYPE g gauge\ng 1\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP a_bytes_total Bytes.\n# TYPE a_bytes_total counter\n\
             a_bytes_total{x=\"1\"} 3\n# HELP g A gauge.\n# TYPE g gauge\ng 1\n"
        );
    }

    #[test]
    fn registry_output_converts() {
        let mut reg = Registry::default();
        let c: Counter = Counter::default();
        c.inc_by(7);
        reg.register("x_events", "Events", c);
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &reg).unwrap();
        let text = to_prometheus_text(&om);
        assert!(text.contains("# TYPE x_events_total counter\n"), "{text}");
        assert!(text.contains("\nx_events_total 7\n"), "{text}");
        assert!(!text.contains("# EOF"), "{text}");
    }
}
