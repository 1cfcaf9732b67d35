//! Contract: a liftbridge node joins a cluster of Go nats-servers (Debian's
//! 2.9.10 and 2.15.1) as a plain unpooled, uncompressed route peer, and
//! with `pool_size: 3` as a pooled one (a pool of three plus Go's pinned
//! system-account route towards 2.15.1, which pools by default; one
//! connection towards 2.9.10, which does not): messages flow both ways,
//! request/reply crosses, a queue group spread over all three servers gets
//! each message once, and interest follows subscriptions as they come and
//! go.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::cluster_routes::{publish_each_once, routes_with_interest, wait_interest};
use crate::support::procs::{go_nats_server_2_15, go_nats_server_2_9, Impl, NatsNode};
use crate::support::{http_json, wait_until};

const WAIT: Duration = Duration::from_secs(20);

async fn connect(url: &str) -> async_nats::Client {
    async_nats::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

async fn next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("message in time")
        .expect("subscription open")
}

/// A cluster-name suffix per Go binary, so tests running at the same time
/// never share a cluster name (a retrying route must not join another
/// test's mesh through a reused port).
fn go_version(go: &Path) -> &'static str {
    if go.starts_with("/usr") {
        "29"
    } else {
        "215"
    }
}

/// A config file (in `dir`) giving our node a route pool of three, and
/// the flags that load it.
fn pool_flags(dir: &tempfile::TempDir) -> Vec<String> {
    let conf = dir.path().join("pool.conf");
    std::fs::write(&conf, "cluster { pool_size: 3 }\n").unwrap();
    vec!["-c".into(), conf.display().to_string()]
}

/// Go seed G1, our node L (started with `ours` flags) and Go node G2 (both
/// seeded with G1), meshed.
async fn mixed(go: &Path, ours: &[String]) -> (NatsNode, NatsNode, NatsNode) {
    let pooled = if ours.is_empty() { "" } else { "-pool" };
    let name = format!("mixed-{}{pooled}", go_version(go));
    let go = Impl::Go(go.to_path_buf());
    let g1 = NatsNode::start(&go, &name, &[]).await;
    let ours: Vec<&str> = ours.iter().map(String::as_str).collect();
    let l = NatsNode::start_with(&Impl::Liftbridge, &name, &[g1.cluster_port], &ours).await;
    let g2 = NatsNode::start(&go, &name, &[g1.cluster_port]).await;
    for n in [&g1, &l, &g2] {
        n.wait_routes(2).await;
    }
    (g1, l, g2)
}

/// Route connections per remote server in a `/routez` body.
fn conns_per_remote(rz: &serde_json::Value) -> std::collections::HashMap<String, usize> {
    let mut m = std::collections::HashMap::new();
    for r in rz["routes"].as_array().into_iter().flatten() {
        *m.entry(r["remote_id"].as_str().unwrap_or("").to_string())
            .or_insert(0) += 1;
    }
    m
}

/// The whole exchange; `ours`: flags of our node; `conns`: route
/// connections between our node and each Go server (a pool, plus Go's
/// pinned system-account route when Go dialled us).
async fn interop(go: &Path, ours: &[String], conns: std::ops::RangeInclusive<usize>) {
    let (g1, l, g2) = mixed(go, ours).await;

    // Go → liftbridge and liftbridge → Go, with headers.
    let cl = connect(&l.url()).await;
    let c1 = connect(&g1.url()).await;
    let c2 = connect(&g2.url()).await;
    let mut on_l = cl.subscribe("x.to.lb").await.unwrap();
    let mut on_g1 = c1.subscribe("x.to.go").await.unwrap();
    cl.flush().await.unwrap();
    c1.flush().await.unwrap();
    wait_interest(g2.http_port, "x.to.lb", 1).await;
    wait_interest(l.http_port, "x.to.go", 1).await;
    for i in 0..100 {
        let mut h = async_nats::HeaderMap::new();
        h.insert("N", i.to_string().as_str());
        c2.publish_with_headers("x.to.lb", h, Bytes::from(format!("g{i}")))
            .await
            .unwrap();
        cl.publish("x.to.go", Bytes::from(format!("l{i}")))
            .await
            .unwrap();
    }
    c2.flush().await.unwrap();
    cl.flush().await.unwrap();
    for i in 0..100 {
        let m = next(&mut on_l).await;
        assert_eq!(&m.payload[..], format!("g{i}").as_bytes());
        let n = m.headers.as_ref().and_then(|h| h.get("N")).unwrap();
        assert_eq!(n.as_str(), i.to_string());
        let m = next(&mut on_g1).await;
        assert_eq!(&m.payload[..], format!("l{i}").as_bytes());
    }

    // Request/reply: a responder on our node, a requester on Go, and the
    // other way round.
    let mut svc_l = cl.subscribe("svc.lb").await.unwrap();
    let cl2 = cl.clone();
    tokio::spawn(async move {
        while let Some(m) = svc_l.next().await {
            if let Some(r) = m.reply {
                let _ = cl2.publish(r, Bytes::from_static(b"from lb")).await;
            }
        }
    });
    let mut svc_g = c2.subscribe("svc.go").await.unwrap();
    let c2b = c2.clone();
    tokio::spawn(async move {
        while let Some(m) = svc_g.next().await {
            if let Some(r) = m.reply {
                let _ = c2b.publish(r, Bytes::from_static(b"from go")).await;
            }
        }
    });
    cl.flush().await.unwrap();
    c2.flush().await.unwrap();
    wait_interest(g1.http_port, "svc.lb", 1).await;
    wait_interest(l.http_port, "svc.go", 1).await;
    let r = tokio::time::timeout(WAIT, c1.request("svc.lb", Bytes::new()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&r.payload[..], b"from lb");
    let r = tokio::time::timeout(WAIT, cl.request("svc.go", Bytes::new()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&r.payload[..], b"from go");

    // A queue group with members on all three servers; publishers on all
    // three: every message once.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    for c in [&cl, &c1, &c2] {
        let mut s = c.queue_subscribe("q.work", "w".into()).await.unwrap();
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(m) = s.next().await {
                let _ = tx.send(String::from_utf8_lossy(&m.payload).into_owned());
            }
        });
        c.flush().await.unwrap();
    }
    for n in [&g1, &l, &g2] {
        // The two other servers' members, one route each.
        wait_interest(n.http_port, "q.work", 2).await;
    }
    publish_each_once(&[("l", &cl), ("g1", &c1), ("g2", &c2)], "q.work", &mut rx).await;

    // Interest comes and goes: a subscription on our node appears on the
    // Go servers and disappears after UNSUB.
    let mut temp = cl.subscribe("x.temp").await.unwrap();
    cl.flush().await.unwrap();
    wait_interest(g1.http_port, "x.temp", 1).await;
    wait_interest(g2.http_port, "x.temp", 1).await;
    temp.unsubscribe().await.unwrap();
    cl.flush().await.unwrap();
    for port in [g1.http_port, g2.http_port] {
        wait_until(WAIT, "x.temp interest withdrawn on Go", || async move {
            routes_with_interest(port, "x.temp").await == 0
        })
        .await;
    }
    // And a Go subscription that goes away is withdrawn from ours.
    let mut gtemp = c2.subscribe("x.gtemp").await.unwrap();
    c2.flush().await.unwrap();
    wait_interest(l.http_port, "x.gtemp", 1).await;
    gtemp.unsubscribe().await.unwrap();
    c2.flush().await.unwrap();
    wait_until(WAIT, "x.gtemp interest withdrawn on ours", || async {
        routes_with_interest(l.http_port, "x.gtemp").await == 0
    })
    .await;

    // The Go servers list our node as a route peer.
    let rz = g1.routez().await;
    let ours = http_json(l.http_port, "/varz").await.unwrap();
    let ids: Vec<&str> = rz["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["remote_id"].as_str())
        .collect();
    let our_id = ours["server_id"].as_str().unwrap();
    assert!(ids.contains(&our_id), "{rz}");
    let n = ids.iter().filter(|i| **i == our_id).count();
    assert!(
        conns.contains(&n),
        "{n} route connections to our node: {rz}"
    );
    let ours_rz = l.routez().await;
    let per_remote = conns_per_remote(&ours_rz);
    assert_eq!(per_remote.len(), 2, "{ours_rz}");
    assert!(per_remote.values().all(|n| conns.contains(n)), "{ours_rz}");
    let varz = http_json(l.http_port, "/varz").await.unwrap();
    assert_eq!(varz["remotes"], 2, "{varz}");
    assert_eq!(varz["routes"], ours_rz["num_routes"], "{varz}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_with_go_nats_server_2_9() {
    interop(&go_nats_server_2_9(), &[], 1..=1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_with_go_nats_server_2_15() {
    interop(&go_nats_server_2_15(), &[], 1..=1).await;
}

/// 2.15.1 pools by default: three connections, plus the one it pins to
/// its system account (announced with `route_account`) when it dialled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_interop_with_go_nats_server_2_15() {
    let dir = tempfile::tempdir().unwrap();
    interop(&go_nats_server_2_15(), &pool_flags(&dir), 3..=4).await;
}

/// 2.9.10 does not pool: our pooled node keeps one connection to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_interop_with_go_nats_server_2_9() {
    let dir = tempfile::tempdir().unwrap();
    interop(&go_nats_server_2_9(), &pool_flags(&dir), 1..=1).await;
}

/// Our node as the only seed of two Go servers: they find each other
/// through the INFO we forward (gossip), and traffic flows between them
/// and through us.
async fn ours_as_seed(go: &Path, ours: &[String]) {
    let pooled = if ours.is_empty() { "" } else { "-pool" };
    let name = format!("seeded-{}{pooled}", go_version(go));
    let go = Impl::Go(go.to_path_buf());
    let ours: Vec<&str> = ours.iter().map(String::as_str).collect();
    let l = NatsNode::start_with(&Impl::Liftbridge, &name, &[], &ours).await;
    let g1 = NatsNode::start(&go, &name, &[l.cluster_port]).await;
    let g2 = NatsNode::start(&go, &name, &[l.cluster_port]).await;
    for n in [&l, &g1, &g2] {
        n.wait_routes(2).await;
    }
    let c1 = connect(&g1.url()).await;
    let c2 = connect(&g2.url()).await;
    let cl = connect(&l.url()).await;
    let mut on_g2 = c2.subscribe("seeded.x").await.unwrap();
    let mut on_l = cl.subscribe("seeded.x").await.unwrap();
    c2.flush().await.unwrap();
    cl.flush().await.unwrap();
    wait_interest(g1.http_port, "seeded.x", 2).await;
    for i in 0..50 {
        c1.publish("seeded.x", Bytes::from(format!("m{i}")))
            .await
            .unwrap();
    }
    c1.flush().await.unwrap();
    for i in 0..50 {
        assert_eq!(
            &next(&mut on_g2).await.payload[..],
            format!("m{i}").as_bytes()
        );
        assert_eq!(
            &next(&mut on_l).await.payload[..],
            format!("m{i}").as_bytes()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_2_9_servers_mesh_through_our_seed() {
    ours_as_seed(&go_nats_server_2_9(), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_2_15_servers_mesh_through_our_seed() {
    ours_as_seed(&go_nats_server_2_15(), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_2_15_servers_mesh_through_our_pooled_seed() {
    let dir = tempfile::tempdir().unwrap();
    ours_as_seed(&go_nats_server_2_15(), &pool_flags(&dir)).await;
}
