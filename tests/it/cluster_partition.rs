//! Contract: a route survives network faults. When the connection between
//! two servers is cut, the configured side reconnects and traffic resumes
//! with nothing delivered twice; when the network freezes (no close, no
//! bytes), missed PONGs close the route on both sides, and it comes back
//! when the network does. Faults come from a real TCP proxy between them.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use liftbridge::config::nats::{ClusterOptions, NatsOptions};
use liftbridge::nats::NatsServer;

use crate::support::proxy::Proxy;
use crate::support::wait_until;

const WAIT: Duration = Duration::from_secs(20);

fn opts(cluster: &str, routes: Vec<String>) -> NatsOptions {
    NatsOptions {
        host: "127.0.0.1".into(),
        port: 0,
        // Fast stale detection for the freeze case.
        ping_interval: Duration::from_millis(300),
        ping_max: 2,
        cluster: Some(ClusterOptions {
            name: Some(cluster.into()),
            host: "127.0.0.1".into(),
            port: 0,
            routes,
            ..ClusterOptions::default()
        }),
        ..Default::default()
    }
}

/// A, and B whose only route goes to A through a proxy.
async fn through_proxy(cluster: &str) -> (NatsServer, NatsServer, Proxy) {
    let a = NatsServer::start(opts(cluster, Vec::new())).await.unwrap();
    let proxy = Proxy::start(a.cluster_addr().unwrap()).await;
    let b = NatsServer::start(opts(
        cluster,
        vec![format!("nats-route://127.0.0.1:{}", proxy.port)],
    ))
    .await
    .unwrap();
    routed(&a, &b, 1).await;
    (a, b, proxy)
}

async fn routed(a: &NatsServer, b: &NatsServer, n: usize) {
    wait_until(WAIT, &format!("{n} route(s) on both sides"), || {
        let ok = a.num_routes() == n && b.num_routes() == n;
        async move { ok }
    })
    .await;
}

/// Publishes `tags` on A until B's subscriber has them all; returns every
/// payload received (to check for duplicates).
async fn deliver_all(
    a: &NatsServer,
    sub: &mut liftbridge::nats::LocalSubscription,
    tags: &[String],
) -> Vec<Bytes> {
    let p = a.local_client("pub");
    for t in tags {
        p.publish("faults.x", None, None, Bytes::from(t.clone()))
            .unwrap();
    }
    let mut got = Vec::new();
    while got.len() < tags.len() {
        let m = tokio::time::timeout(WAIT, sub.next())
            .await
            .expect("delivery in time")
            .expect("subscription open");
        got.push(m.payload);
    }
    got
}

/// The connection id of a server's (only) route.
fn rid(s: &NatsServer) -> u64 {
    s.routez_json("")["routes"][0]["rid"].as_u64().unwrap_or(0)
}

async fn interest_on(a: &NatsServer) {
    wait_until(WAIT, "B's interest on A", || {
        let v = a.routez_json("subs=1");
        let ok = v["routes"][0]["subscriptions_list"]
            .as_array()
            .is_some_and(|l| l.iter().any(|s| s == "faults.x"));
        async move { ok }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_route_reconnects_without_duplicates() {
    let (a, b, proxy) = through_proxy("cut").await;
    let lb = b.local_client("sub");
    let mut sub = lb.subscribe("faults.x", None).unwrap();
    interest_on(&a).await;
    let first: Vec<String> = (0..100).map(|i| format!("a{i}")).collect();
    let got = deliver_all(&a, &mut sub, &first).await;
    assert_eq!(got.len(), 100);

    for round in 0..3 {
        let rids = (rid(&a), rid(&b));
        proxy.cut();
        // Both sides see the close, then B's configured route comes back
        // as a new connection on each side.
        wait_until(WAIT, "route re-established after the cut", || {
            let ok = a.num_routes() == 1
                && b.num_routes() == 1
                && rid(&a) != rids.0
                && rid(&b) != rids.1;
            async move { ok }
        })
        .await;
        interest_on(&a).await;
        let tags: Vec<String> = (0..100).map(|i| format!("r{round}-{i}")).collect();
        let got = deliver_all(&a, &mut sub, &tags).await;
        let unique: HashSet<_> = got.iter().cloned().collect();
        assert_eq!(unique.len(), tags.len(), "no duplicates after cut {round}");
        assert!(got
            .iter()
            .all(|g| g.starts_with(format!("r{round}-").as_bytes())));
    }
    // Nothing else arrives.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), sub.next())
            .await
            .is_err(),
        "an extra delivery"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_route_is_closed_by_pings_and_comes_back() {
    let (a, b, proxy) = through_proxy("frozen").await;
    let lb = b.local_client("sub");
    let mut sub = lb.subscribe("faults.x", None).unwrap();
    interest_on(&a).await;
    proxy.freeze();
    // No PONGs cross: both sides close the route as stale.
    routed(&a, &b, 0).await;
    // While partitioned, A has no interest from B: publishing is harmless.
    a.local_client("p")
        .publish("faults.x", None, None, Bytes::from_static(b"lost"))
        .unwrap();
    proxy.thaw();
    routed(&a, &b, 1).await;
    interest_on(&a).await;
    let tags: Vec<String> = (0..50).map(|i| format!("t{i}")).collect();
    let got = deliver_all(&a, &mut sub, &tags).await;
    assert_eq!(
        got.iter()
            .map(|g| String::from_utf8_lossy(g).into_owned())
            .collect::<Vec<_>>(),
        tags,
        "after the partition: everything published after it, in order"
    );
    a.shutdown().await;
    b.shutdown().await;
}
