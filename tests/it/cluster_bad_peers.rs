//! Contract: one bad peer never hurts the cluster. A route peer that sends
//! garbage is closed with `-ERR` and a log line; a client dialling the
//! cluster port is refused clearly; a peer claiming an existing server id
//! (or ours) is dropped; a node of another cluster name, or with wrong
//! route credentials, is refused with a log line; and in every case the
//! existing routes keep carrying traffic. Route TLS and credentials work.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cluster_routes::wait_interest;
use crate::support::procs::{Impl, NatsNode};
use crate::support::rawroute::{route_connect, route_info, RawPeer};
use crate::support::{http_json, wait_until};

const WAIT: Duration = Duration::from_secs(20);

/// A and B meshed, a subscriber on B; checks a publish on A reaches it.
struct Pair {
    a: NatsNode,
    b: NatsNode,
    on_b: async_nats::Subscriber,
    pub_a: async_nats::Client,
    _sub_client: async_nats::Client,
}

impl Pair {
    async fn start(cluster: &str) -> Pair {
        let a = NatsNode::start(&Impl::Liftbridge, cluster, &[]).await;
        let b = NatsNode::start(&Impl::Liftbridge, cluster, &[a.cluster_port]).await;
        a.wait_routes(1).await;
        b.wait_routes(1).await;
        let sc = async_nats::connect(b.url()).await.unwrap();
        let on_b = sc.subscribe("pair.check").await.unwrap();
        sc.flush().await.unwrap();
        wait_interest(a.http_port, "pair.check", 1).await;
        let pub_a = async_nats::connect(a.url()).await.unwrap();
        Pair {
            a,
            b,
            on_b,
            pub_a,
            _sub_client: sc,
        }
    }

    /// A message published on A still reaches B.
    async fn still_routes(&mut self, tag: &str) {
        self.pub_a
            .publish("pair.check", Bytes::from(tag.to_string()))
            .await
            .unwrap();
        self.pub_a.flush().await.unwrap();
        let m = tokio::time::timeout(WAIT, self.on_b.next())
            .await
            .expect("message in time")
            .unwrap();
        assert_eq!(&m.payload[..], tag.as_bytes());
    }

    async fn server_id(&self, n: &NatsNode) -> String {
        http_json(n.http_port, "/varz").await.unwrap()["server_id"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

async fn wait_log(n: &NatsNode, needle: &str) {
    let what = format!("log line containing {needle:?}");
    wait_until(WAIT, &what, || async { n.proc.log_text().contains(needle) }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_from_a_route_peer_closes_only_that_route() {
    let mut p = Pair::start("bad").await;
    let (mut peer, info) = RawPeer::connect(p.a.cluster_port).await;
    assert!(
        info.starts_with("INFO {") && info.contains("\"cluster\":\"bad\""),
        "{info}"
    );
    peer.send(&route_connect("NFAKEPEER1", "bad")).await;
    peer.send(&route_info("NFAKEPEER1", "bad")).await;
    peer.send("RMSG $G foo notanumber\r\nBOGUS\r\n").await;
    let out = peer.read_to_close().await;
    assert!(out.contains("-ERR 'Unknown Protocol Operation'"), "{out}");
    wait_log(&p.a, "route protocol error").await;
    p.still_routes("after garbage").await;
    // Unknown operation (not even a protocol word).
    let (mut peer, _) = RawPeer::connect(p.a.cluster_port).await;
    peer.send(&route_connect("NFAKEPEER2", "bad")).await;
    peer.send(&route_info("NFAKEPEER2", "bad")).await;
    peer.send("HELLO WORLD\r\n").await;
    let out = peer.read_to_close().await;
    assert!(out.contains("-ERR 'Unknown Protocol Operation'"), "{out}");
    // Messages before the handshake.
    let (mut peer, _) = RawPeer::connect(p.a.cluster_port).await;
    peer.send("RS+ $G foo\r\n").await;
    let out = peer.read_to_close().await;
    assert!(out.contains("-ERR "), "{out}");
    p.still_routes("after early ops").await;
    p.a.wait_routes(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_the_cluster_port_is_refused() {
    let mut p = Pair::start("cport").await;
    let (mut peer, _) = RawPeer::connect(p.a.cluster_port).await;
    peer.send("CONNECT {\"lang\":\"rust\",\"version\":\"1\",\"verbose\":false}\r\nPING\r\n")
        .await;
    let out = peer.read_to_close().await;
    assert!(
        out.contains("-ERR 'attempted to connect to route port'"),
        "{out}"
    );
    wait_log(&p.a, "client connected to the route port").await;
    // A real client library gets an error too, never a session.
    let r = tokio::time::timeout(
        WAIT,
        async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(3))
            .connect(format!("nats://127.0.0.1:{}", p.a.cluster_port)),
    )
    .await
    .expect("connect attempt ends");
    if let Ok(c) = r {
        // async-nats may report success before its first read; the
        // session must not work.
        let res = tokio::time::timeout(Duration::from_secs(3), c.flush()).await;
        assert!(
            !matches!(res, Ok(Ok(()))),
            "a client session worked on the route port"
        );
    }
    // A silent connection is closed by the handshake timeout.
    let (mut silent, _) = RawPeer::connect(p.a.cluster_port).await;
    let out = silent.read_to_close().await;
    assert!(out.contains("-ERR"), "{out}");
    p.still_routes("after clients").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_with_a_duplicate_server_id_is_dropped() {
    let mut p = Pair::start("dup").await;
    let b_id = p.server_id(&p.b).await;
    let a_id = p.server_id(&p.a).await;
    // Someone claims to be B (which already has a route to A).
    let (mut peer, _) = RawPeer::connect(p.a.cluster_port).await;
    peer.send(&route_connect(&b_id, "dup")).await;
    peer.send(&route_info(&b_id, "dup")).await;
    peer.read_to_close().await;
    // Someone claims to be A itself.
    let (mut peer, _) = RawPeer::connect(p.a.cluster_port).await;
    peer.send(&route_connect(&a_id, "dup")).await;
    peer.send(&route_info(&a_id, "dup")).await;
    peer.read_to_close().await;
    // The real route to B is the one left, and it works.
    let rz = p.a.routez().await;
    assert_eq!(rz["num_routes"], 1, "{rz}");
    assert_eq!(rz["routes"][0]["remote_id"], b_id.as_str());
    p.still_routes("after duplicates").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_cluster_is_refused() {
    let mut p = Pair::start("blue").await;
    let other = NatsNode::start(&Impl::Liftbridge, "green", &[p.a.cluster_port]).await;
    wait_log(&p.a, "does not match").await;
    // Raw: the exact -ERR.
    let (mut peer, _) = RawPeer::connect(p.a.cluster_port).await;
    peer.send(&route_connect("NGREEN", "green")).await;
    let out = peer.read_to_close().await;
    assert!(
        out.contains("-ERR 'Rejecting connection, cluster name \"green\" does not match \"blue\"'"),
        "{out}"
    );
    assert_eq!(p.a.routez().await["num_routes"], 1);
    assert_eq!(other.routez().await["num_routes"], 0);
    p.still_routes("after another cluster").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_credentials_are_required_when_configured() {
    let imp = Impl::Liftbridge;
    // The seed requires route credentials (cluster authorization in its
    // config file; the fixture's --cluster flag sets only the address).
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("seed.conf");
    std::fs::write(
        &conf,
        "cluster {\n  authorization { user: ruser, password: rpass, timeout: 2 }\n}\n",
    )
    .unwrap();
    let conf = conf.display().to_string();
    let a = NatsNode::start_with(&imp, "auth", &[], &["-c", &conf]).await;
    let route = |pass: &str| format!("nats://ruser:{pass}@127.0.0.1:{}", a.cluster_port);
    let good = NatsNode::start_with(&imp, "auth", &[], &["--routes", &route("rpass")]).await;
    let bad = NatsNode::start_with(&imp, "auth", &[], &["--routes", &route("wrong")]).await;
    good.wait_routes(1).await;
    wait_log(&a, "route authorization failed").await;
    // The refused node heard why (it keeps retrying its configured route,
    // as nats-server does, and is refused each time).
    wait_log(&bad, "Authorization Violation").await;
    let good_id = http_json(good.http_port, "/varz").await.unwrap()["server_id"].clone();
    let rz = a.routez().await;
    assert_eq!(rz["num_routes"], 1, "{rz}");
    assert_eq!(rz["routes"][0]["remote_id"], good_id, "{rz}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_over_tls() {
    use liftbridge::config::nats::{ClusterOptions, NatsOptions, TlsFiles};
    let dir = tempfile::tempdir().unwrap();
    let certs = liftbridge::tls::generate_dev_certs(dir.path(), &[]).unwrap();
    let opts = |routes: Vec<String>| NatsOptions {
        host: "127.0.0.1".into(),
        port: 0,
        cluster: Some(ClusterOptions {
            name: Some("tls".into()),
            host: "127.0.0.1".into(),
            port: 0,
            routes,
            tls: Some(TlsFiles {
                cert: certs.server_cert.clone(),
                key: certs.server_key.clone(),
                ca: Some(certs.ca_cert.clone()),
                verify: true,
                params: Default::default(),
                handshake_first: None,
            }),
            ..ClusterOptions::default()
        }),
        ..Default::default()
    };
    let a = liftbridge::nats::NatsServer::start(opts(Vec::new()))
        .await
        .unwrap();
    let seed = format!(
        "nats-route://127.0.0.1:{}",
        a.cluster_addr().unwrap().port()
    );
    let b = liftbridge::nats::NatsServer::start(opts(vec![seed.clone()]))
        .await
        .unwrap();
    wait_until(WAIT, "TLS route up", || {
        let ok = a.num_routes() == 1 && b.num_routes() == 1;
        async move { ok }
    })
    .await;
    let lb = b.local_client("t");
    let mut sub = lb.subscribe("tls.x", None).unwrap();
    wait_until(WAIT, "interest over TLS", || {
        let v = a.subsz_json("subs=1&test=tls.x").unwrap();
        let ok = v["subscriptions_list"].as_array().map_or(0, Vec::len) == 1;
        async move { ok }
    })
    .await;
    a.local_client("p")
        .publish("tls.x", None, None, Bytes::from_static(b"secret"))
        .unwrap();
    let m = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"secret");
    // A plain-TCP peer cannot speak to the TLS route port.
    let mut plain = TcpStream::connect(a.cluster_addr().unwrap()).await.unwrap();
    plain
        .write_all(b"CONNECT {\"name\":\"NPLAIN\",\"cluster\":\"tls\"}\r\n")
        .await
        .unwrap();
    let mut b2 = [0u8; 1024];
    let n = tokio::time::timeout(WAIT, plain.read(&mut b2))
        .await
        .unwrap();
    assert!(
        !matches!(n, Ok(k) if k > 0 && b2.starts_with(b"INFO")),
        "no plain-text route session"
    );
    assert_eq!(a.num_routes(), 1);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_that_stops_reading_is_closed_as_slow() {
    use liftbridge::config::nats::{ClusterOptions, NatsOptions};
    let a = liftbridge::nats::NatsServer::start(NatsOptions {
        host: "127.0.0.1".into(),
        port: 0,
        max_pending: 256 * 1024,
        cluster: Some(ClusterOptions {
            name: Some("slow".into()),
            host: "127.0.0.1".into(),
            port: 0,
            ..ClusterOptions::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let port = a.cluster_addr().unwrap().port();
    let (mut peer, _) = RawPeer::connect(port).await;
    peer.send(&route_connect("NSTUCKPEER", "slow")).await;
    peer.send(&route_info("NSTUCKPEER", "slow")).await;
    peer.send("RS+ $G slow.x\r\n").await;
    wait_until(WAIT, "stuck peer registered with interest", || {
        let v = a.routez_json("subs=1");
        let ok = v["routes"][0]["subscriptions_list"][0] == "slow.x";
        async move { ok }
    })
    .await;
    // A local subscriber on the same subject keeps receiving everything.
    let local = a.local_client("reader");
    let mut sub = local.subscribe("slow.x", None).unwrap();
    let publisher = a.local_client("writer");
    let payload = Bytes::from(vec![b'x'; 64 * 1024]);
    // The peer never reads: its socket buffers fill, then the route's
    // outbound buffer passes max_pending and the route is closed.
    let mut sent = 0;
    while a
        .route_stats()
        .unwrap()
        .slow_routes
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
    {
        publisher
            .publish("slow.x", None, None, payload.clone())
            .unwrap();
        sent += 1;
        assert!(sent < 20_000, "route never closed as slow");
        if sent % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    wait_until(WAIT, "slow route removed", || {
        let ok = a.num_routes() == 0;
        async move { ok }
    })
    .await;
    for _ in 0..sent {
        let m = tokio::time::timeout(WAIT, sub.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload.len(), payload.len());
    }
    let v = a.varz_json();
    assert_eq!(v["slow_consumer_stats"]["routes"], 1, "{v}");
    drop(peer);
    a.shutdown().await;
}
