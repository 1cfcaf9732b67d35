//! NATS series, read at scrape time from the counters the embedded server
//! already keeps for `/varz` (connections, subscriptions, messages and
//! bytes in and out, slow consumers, authentication failures, routes, leaf
//! nodes, and routed and leaf traffic), and the backlog of the in-process
//! recorder queues (one per partition led here, labelled by `subject`):
//! bytes and messages queued, the most bytes ever queued, the limit, and
//! the time publishers spent stalled on them; plus the messages dropped by
//! full internal request queues.
//!
//! Nothing here touches the message path: the collector only loads atomics
//! and takes the client-map lock long enough to count TCP clients.

use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use std::time::Duration;

use crate::nats::client::{ClientKind, LocalQueue};
use crate::nats::NatsServer;

/// Collects the embedded NATS server's series.
pub struct NatsCollector {
    server: NatsServer,
}

impl std::fmt::Debug for NatsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsCollector")
            .field("addr", &self.server.client_addr())
            .finish()
    }
}

impl NatsCollector {
    /// A collector reading `server`.
    pub fn new(server: NatsServer) -> NatsCollector {
        NatsCollector { server }
    }
}

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: u64,
) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, unit, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> std::fmt::Result {
    let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

impl Collector for NatsCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let i = &self.server.inner;
        let tcp = i
            .clients
            .lock()
            .values()
            .filter(|c| c.kind == ClientKind::Tcp)
            .count();
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let bytes = Unit::Bytes;
        gauge(
            &mut enc,
            "liftbridge_nats_connections",
            "Current NATS client connections (TCP; the node's in-process clients are not counted).",
            tcp as i64,
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_connections_accepted",
            "NATS client connections accepted since start.",
            None,
            load(&i.total_connections),
        )?;
        gauge(
            &mut enc,
            "liftbridge_nats_subscriptions",
            "Current NATS subscriptions (in-process ones included).",
            i.accounts.num_subscriptions() as i64,
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_in_messages",
            "Messages published into the NATS server (TCP and in-process clients).",
            None,
            load(&i.stats.in_msgs),
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_out_messages",
            "Messages delivered by the NATS server to subscribers.",
            None,
            load(&i.stats.out_msgs),
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_in",
            "Payload bytes (headers included) published into the NATS server.",
            Some(&bytes),
            load(&i.stats.in_bytes),
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_out",
            "Payload bytes (headers included) delivered by the NATS server.",
            Some(&bytes),
            load(&i.stats.out_bytes),
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_slow_consumers",
            "Clients disconnected or flagged as slow consumers.",
            None,
            load(&i.slow_consumers),
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_auth_failures",
            "NATS connections refused for bad credentials or authentication timeout.",
            None,
            load(&i.auth_failures),
        )?;
        gauge(
            &mut enc,
            "liftbridge_nats_routes",
            "Current routes to other NATS servers of the cluster.",
            self.server.num_routes() as i64,
        )?;
        let zero = crate::nats::route::RouteStats::default();
        let r = self.server.route_stats().unwrap_or(&zero);
        counter(
            &mut enc,
            "liftbridge_nats_routed_in_messages",
            "Messages received from routes.",
            None,
            load(&r.in_msgs),
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_routed_out_messages",
            "Messages sent to routes.",
            None,
            load(&r.out_msgs),
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_routed_in",
            "Payload bytes (headers included) received from routes.",
            Some(&bytes),
            load(&r.in_bytes),
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_routed_out",
            "Payload bytes (headers included) sent to routes.",
            Some(&bytes),
            load(&r.out_bytes),
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_slow_routes",
            "Routes closed (and reconnected) because their outbound buffer overflowed.",
            None,
            load(&r.slow_routes),
        )?;
        counter(
            &mut enc,
            "liftbridge_nats_route_rejects",
            "Route connections closed for protocol errors or refused handshakes.",
            None,
            load(&r.rejected),
        )?;
        gauge(
            &mut enc,
            "liftbridge_nats_leafnodes",
            "Current leaf-node connections (to our hubs and from our leaves).",
            self.server.num_leafs() as i64,
        )?;
        let zero = crate::nats::leaf::LeafStats::default();
        let l = self.server.leaf_stats().unwrap_or(&zero);
        for (name, help, unit, value) in [
            (
                "liftbridge_nats_leaf_in_messages",
                "Messages received from leaf-node connections.",
                None,
                &l.in_msgs,
            ),
            (
                "liftbridge_nats_leaf_out_messages",
                "Messages sent to leaf-node connections.",
                None,
                &l.out_msgs,
            ),
            (
                "liftbridge_nats_leaf_in",
                "Payload bytes (headers included) received from leaf-node connections.",
                Some(&bytes),
                &l.in_bytes,
            ),
            (
                "liftbridge_nats_leaf_out",
                "Payload bytes (headers included) sent to leaf-node connections.",
                Some(&bytes),
                &l.out_bytes,
            ),
            (
                "liftbridge_nats_slow_leafs",
                "Leaf-node connections closed because their outbound buffer overflowed.",
                None,
                &l.slow_leafs,
            ),
            (
                "liftbridge_nats_leaf_rejects",
                "Leaf-node connections refused or closed for protocol or auth errors.",
                None,
                &l.rejected,
            ),
            (
                "liftbridge_nats_leaf_loops",
                "Leaf-node loops detected (our loop-detection subject came back).",
                None,
                &l.loops,
            ),
        ] {
            counter(&mut enc, name, help, unit, load(value))?;
        }
        self.encode_external(&mut enc)?;
        self.encode_recorders(&mut enc)
    }
}

impl NatsCollector {
    /// External NATS mode: the bridge's state and counters (absent in
    /// embedded mode).
    fn encode_external(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let Some(b) = self.server.external() else {
            return Ok(());
        };
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let bytes = Unit::Bytes;
        gauge(
            enc,
            "liftbridge_nats_external_connected",
            "1 while the connection to the external NATS system is up, 0 while it is down.",
            i64::from(b.is_connected()),
        )?;
        gauge(
            enc,
            "liftbridge_nats_external_outbound_pending_bytes",
            "Bytes of in-process publishes waiting for the external NATS connection.",
            i64::try_from(b.outbound_bytes()).unwrap_or(i64::MAX),
        )?;
        let s = &b.stats;
        for (name, help, unit, value) in [
            (
                "liftbridge_nats_external_out_messages",
                "Messages published on the external NATS connection.",
                None,
                &s.out_msgs,
            ),
            (
                "liftbridge_nats_external_out",
                "Payload bytes (headers included) published on the external NATS connection.",
                Some(&bytes),
                &s.out_bytes,
            ),
            (
                "liftbridge_nats_external_dropped",
                "In-process publishes dropped because the outbound queue to the external NATS connection was full.",
                None,
                &s.out_dropped,
            ),
            (
                "liftbridge_nats_external_in_messages",
                "Messages received from the external NATS system.",
                None,
                &s.in_msgs,
            ),
            (
                "liftbridge_nats_external_in",
                "Payload bytes (headers included) received from the external NATS system.",
                Some(&bytes),
                &s.in_bytes,
            ),
            (
                "liftbridge_nats_external_slow_consumer_events",
                "Messages the NATS client dropped because a subscription's buffer was full.",
                None,
                &s.slow_consumer_events,
            ),
            (
                "liftbridge_nats_external_reconnects",
                "Times the connection to the external NATS system came back after a loss.",
                None,
                &s.reconnects,
            ),
        ] {
            counter(enc, name, help, unit, load(value))?;
        }
        Ok(())
    }
}

impl NatsCollector {
    /// The recorder queues' series (see the module doc).
    fn encode_recorders(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let i = &self.server.inner;
        let queues = self.server.recorder_queues();
        let labels: Vec<[(&str, String); 1]> = queues
            .iter()
            .map(|q| [("subject", super::partitions::escape_label_value(&q.subject))])
            .collect();
        let bytes = Unit::Bytes;
        type G = fn(&LocalQueue) -> i64;
        let gauges: [(&str, &str, Option<&Unit>, G); 4] = [
            (
                "liftbridge_nats_recorder_pending",
                "Bytes (subject, headers, payload and 160 per message of queue overhead) queued for a partition's recorder and not yet taken.",
                Some(&bytes),
                |q| q.pending_bytes() as i64,
            ),
            (
                "liftbridge_nats_recorder_pending_messages",
                "Messages queued for a partition's recorder and not yet taken.",
                None,
                |q| q.pending_msgs() as i64,
            ),
            (
                "liftbridge_nats_recorder_pending_max",
                "The most bytes ever queued at once for a partition's recorder.",
                Some(&bytes),
                |q| q.high_water_bytes() as i64,
            ),
            (
                "liftbridge_nats_recorder_limit",
                "Byte limit of a recorder queue (nats.recorder.max.pending); publishers stall past 75 % of it.",
                Some(&bytes),
                |q| q.limit as i64,
            ),
        ];
        for (name, help, unit, get) in gauges {
            let mut m = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
            for (q, l) in queues.iter().zip(&labels) {
                ConstGauge::new(get(q)).encode(m.encode_family(l)?)?;
            }
        }
        let secs = Unit::Seconds;
        let mut m = enc.encode_descriptor(
            "liftbridge_nats_recorder_stall",
            "Time publishers spent stalled because a partition's recorder queue was over its mark.",
            Some(&secs),
            MetricType::Counter,
        )?;
        for (q, l) in queues.iter().zip(&labels) {
            ConstCounter::new(q.stall_time().as_secs_f64()).encode(m.encode_family(l)?)?;
        }
        let t = &i.local_totals;
        let m = enc.encode_descriptor(
            "liftbridge_nats_recorder_stall_all",
            "Time publishers spent stalled on recorder queues, all partitions since start.",
            Some(&secs),
            MetricType::Counter,
        )?;
        ConstCounter::new(Duration::from_micros(t.stall_us.load(Ordering::Relaxed)).as_secs_f64())
            .encode(m)?;
        counter(
            enc,
            "liftbridge_nats_internal_dropped",
            "Messages dropped because an internal request queue (replication, Raft, notify, inboxes) was full.",
            None,
            t.dropped.load(Ordering::Relaxed),
        )
    }
}
