//! Contract: liftbridge NATS servers joined by routes behave as one NATS
//! server to clients — publish on one node reaches subscribers on every
//! node exactly once, request/reply and headers cross routes, a queue
//! group spread over the nodes gets each message once, a node killed with
//! `kill -9` comes back into the mesh without duplicates, and clients learn
//! the other nodes from `connect_urls` and fail over to them.
//!
//! Every node is a real `liftbridge nats-server` process on 127.0.0.1
//! (see `support::procs`), meshed from one seed (implicit routes by gossip).

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::support::procs::{mesh3, Impl, NatsNode};
use crate::support::{http_json, wait_until};

const WAIT: Duration = Duration::from_secs(20);

async fn connect(url: &str) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// How many of the server's routes carry interest in exactly `subject`
/// (`/routez?subs=1`, which our server and Go's both serve).
pub async fn routes_with_interest(http_port: u16, subject: &str) -> usize {
    let v = http_json(http_port, "/routez?subs=1")
        .await
        .unwrap_or_default();
    v["routes"].as_array().map_or(0, |routes| {
        routes
            .iter()
            .filter(|r| {
                r["subscriptions_list"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|s| s.as_str() == Some(subject)))
            })
            .count()
    })
}

/// Waits until `n` routes of the server behind `http_port` carry interest
/// in `subject`: the peers' subscriptions have propagated.
pub async fn wait_interest(http_port: u16, subject: &str, n: usize) {
    let what = format!("{n} routes with interest in {subject} on :{http_port}");
    wait_until(WAIT, &what, || async {
        routes_with_interest(http_port, subject).await == n
    })
    .await;
}

/// Publishes 100 messages `<label>-<i>` on `subject` from each labelled
/// client, then checks that `rx` (fed by the members of one queue group)
/// gets every one of them exactly once, and nothing more.
pub async fn publish_each_once(
    clients: &[(&str, &async_nats::Client)],
    subject: &str,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let mut expected = HashSet::new();
    for (label, c) in clients {
        for i in 0..100 {
            let id = format!("{label}-{i}");
            c.publish(subject.to_string(), Bytes::from(id.clone()))
                .await
                .unwrap();
            expected.insert(id);
        }
        c.flush().await.unwrap();
    }
    let mut seen = HashSet::new();
    while seen.len() < expected.len() {
        let id = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {} queue messages", seen.len(), expected.len()))
            .unwrap();
        assert!(seen.insert(id.clone()), "{id} delivered twice");
    }
    assert_eq!(seen, expected);
    if let Ok(Some(id)) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        panic!("{id} delivered again");
    }
}

/// The `/metrics` text of a node.
pub async fn metrics_text(port: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// Receives `n` messages from `sub` (or fails after `WAIT`).
async fn recv_n(sub: &mut async_nats::Subscriber, n: usize) -> Vec<async_nats::Message> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match tokio::time::timeout(WAIT, sub.next()).await {
            Ok(Some(m)) => out.push(m),
            Ok(None) => panic!("subscription ended after {} of {n}", out.len()),
            Err(_) => panic!("only {} of {n} messages arrived", out.len()),
        }
    }
    out
}

/// Nothing more arrives on `sub` within `wait`.
async fn assert_quiet(sub: &mut async_nats::Subscriber, wait: Duration) {
    if let Ok(Some(m)) = tokio::time::timeout(wait, sub.next()).await {
        panic!("unexpected extra message {:?}", m.payload);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_on_one_node_reaches_the_others_once() {
    let nodes = mesh3(&Impl::Liftbridge, "pubsub").await;
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let pa = connect(&a.url()).await;
    let sb = connect(&b.url()).await;
    let sc = connect(&c.url()).await;
    let mut on_b = sb.subscribe("mesh.data").await.unwrap();
    let mut on_c = sc.subscribe("mesh.>").await.unwrap();
    sb.flush().await.unwrap();
    sc.flush().await.unwrap();
    wait_interest(a.http_port, "mesh.data", 1).await;
    wait_interest(a.http_port, "mesh.>", 1).await;

    for i in 0..500u32 {
        pa.publish("mesh.data", Bytes::from(i.to_string()))
            .await
            .unwrap();
    }
    pa.flush().await.unwrap();
    for sub in [&mut on_b, &mut on_c] {
        let got = recv_n(sub, 500).await;
        let ids: Vec<u32> = got
            .iter()
            .map(|m| std::str::from_utf8(&m.payload).unwrap().parse().unwrap())
            .collect();
        assert_eq!(ids, (0..500).collect::<Vec<_>>(), "in order, each once");
        assert_quiet(sub, Duration::from_millis(300)).await;
    }

    // /routez and /varz describe the mesh.
    let rz = a.routez().await;
    assert_eq!(rz["num_routes"], 2, "{rz}");
    let out: u64 = rz["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["out_msgs"].as_u64().unwrap())
        .sum();
    assert!(out >= 1000, "500 messages to each of two routes: {rz}");
    let varz = http_json(a.http_port, "/varz").await.unwrap();
    assert_eq!(varz["routes"], 2);
    assert_eq!(varz["cluster"]["name"], "pubsub");
    assert_eq!(varz["cluster"]["cluster_port"], a.cluster_port);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_reply_and_headers_cross_routes() {
    let nodes = mesh3(&Impl::Liftbridge, "reqrep").await;
    let (a, c) = (&nodes[0], &nodes[2]);
    let responder = connect(&c.url()).await;
    let mut svc = responder.subscribe("svc.echo").await.unwrap();
    responder.flush().await.unwrap();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            if let Some(reply) = m.reply {
                let mut h = async_nats::HeaderMap::new();
                let seen = m
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("X-Trace"))
                    .map(|v| v.to_string())
                    .unwrap_or_default();
                h.insert("X-Seen", seen.as_str());
                let _ = responder
                    .publish_with_headers(reply, h, m.payload.clone())
                    .await;
            }
        }
    });
    wait_interest(a.http_port, "svc.echo", 1).await;
    let requester = connect(&a.url()).await;
    for i in 0..20 {
        let mut h = async_nats::HeaderMap::new();
        h.insert("X-Trace", format!("t{i}").as_str());
        let resp = tokio::time::timeout(
            WAIT,
            requester.request_with_headers("svc.echo", h, Bytes::from(format!("ping {i}"))),
        )
        .await
        .expect("reply in time")
        .expect("reply");
        assert_eq!(&resp.payload[..], format!("ping {i}").as_bytes());
        let seen = resp.headers.as_ref().and_then(|h| h.get("X-Seen")).unwrap();
        assert_eq!(seen.as_str(), format!("t{i}"), "headers crossed both ways");
    }
    // No responders anywhere: the requester hears so (503) at once.
    let err = requester
        .request("svc.nobody", Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        async_nats::client::RequestErrorKind::NoResponders,
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_group_over_three_nodes_gets_each_message_once() {
    let nodes = mesh3(&Impl::Liftbridge, "queue").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, String)>();
    let mut clients = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let c = connect(&n.url()).await;
        for _ in 0..2 {
            let mut s = c
                .queue_subscribe("work.items", "workers".into())
                .await
                .unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some(m) = s.next().await {
                    let _ = tx.send((i, String::from_utf8_lossy(&m.payload).into_owned()));
                }
            });
        }
        c.flush().await.unwrap();
        clients.push(c);
    }
    for n in &nodes {
        wait_interest(n.http_port, "work.items", 2).await;
    }
    // Publishers on every node; 600 messages in all.
    let mut expected = HashSet::new();
    for (i, n) in nodes.iter().enumerate() {
        let p = connect(&n.url()).await;
        for k in 0..200 {
            let id = format!("{i}-{k}");
            p.publish("work.items", Bytes::from(id.clone()))
                .await
                .unwrap();
            expected.insert(id);
        }
        p.flush().await.unwrap();
    }
    let mut seen = HashSet::new();
    let mut per_node = [0usize; 3];
    while seen.len() < expected.len() {
        let (node, id) = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of 600 delivered", seen.len()))
            .unwrap();
        assert!(seen.insert(id.clone()), "{id} delivered twice");
        per_node[node] += 1;
    }
    assert_eq!(seen, expected);
    // Local members are preferred: each node's members took its own
    // publisher's messages.
    for (i, n) in per_node.iter().enumerate() {
        assert!(*n >= 200, "node {i} members got {n}: {per_node:?}");
    }
    if let Ok(Some((_, id))) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        panic!("{id} delivered after all 600 (a duplicate)");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_node_rejoins_without_duplicates() {
    let mut nodes = mesh3(&Impl::Liftbridge, "crash").await;
    let pa = connect(&nodes[0].url()).await;
    let sb = connect(&nodes[1].url()).await;
    let mut on_b = sb.subscribe("crash.data").await.unwrap();
    sb.flush().await.unwrap();

    // The seed itself (A) crashes: B and C reconnect their configured
    // route to it when it returns; C's implicit route to B is untouched.
    nodes[0].crash_and_restart().await;
    for n in &nodes {
        n.wait_routes(2).await;
    }
    let pa2 = connect(&nodes[0].url()).await;
    drop(pa);
    wait_interest(nodes[0].http_port, "crash.data", 1).await;
    for i in 0..200u32 {
        pa2.publish("crash.data", Bytes::from(i.to_string()))
            .await
            .unwrap();
    }
    pa2.flush().await.unwrap();
    let got = recv_n(&mut on_b, 200).await;
    let ids: Vec<u32> = got
        .iter()
        .map(|m| std::str::from_utf8(&m.payload).unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, (0..200).collect::<Vec<_>>());
    assert_quiet(&mut on_b, Duration::from_millis(300)).await;

    // A non-seed (C) crashes and returns: it meshes again with both.
    nodes[2].crash_and_restart().await;
    for n in &nodes {
        n.wait_routes(2).await;
    }
    let pc = connect(&nodes[2].url()).await;
    wait_interest(nodes[2].http_port, "crash.data", 1).await;
    for i in 0..100u32 {
        pc.publish("crash.data", Bytes::from(format!("c{i}")))
            .await
            .unwrap();
    }
    pc.flush().await.unwrap();
    let got = recv_n(&mut on_b, 100).await;
    let unique: HashSet<_> = got.iter().map(|m| m.payload.clone()).collect();
    assert_eq!(unique.len(), 100);
    assert_quiet(&mut on_b, Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_learn_connect_urls_and_fail_over() {
    let mut nodes = mesh3(&Impl::Liftbridge, "failover").await;
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .retry_on_initial_connect()
        .connect(nodes[0].url())
        .await
        .unwrap();
    let others: HashSet<String> = nodes[1..]
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.client_port))
        .collect();
    wait_until(WAIT, "connect_urls listing B and C", || {
        let urls: HashSet<String> = client.server_info().connect_urls.into_iter().collect();
        let others = others.clone();
        async move { others.is_subset(&urls) }
    })
    .await;

    let sb = connect(&nodes[1].url()).await;
    let mut on_b = sb.subscribe("failover.data").await.unwrap();
    sb.flush().await.unwrap();
    wait_interest(nodes[0].http_port, "failover.data", 1).await;

    nodes[0].proc.kill9();
    // The client reconnects to B or C and keeps publishing.
    wait_until(WAIT, "client reconnected to another node", || {
        let port = client.server_info().port;
        let ok = client.connection_state() == async_nats::connection::State::Connected
            && port != nodes[0].client_port;
        async move { ok }
    })
    .await;
    client
        .publish("failover.data", Bytes::from_static(b"after"))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let got = recv_n(&mut on_b, 1).await;
    assert_eq!(&got[0].payload[..], b"after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_node_and_nats_server_mode_node_mesh() {
    // A full liftbridge node (routes from liftbridge.yaml `nats.cluster.*`)
    // and a `nats-server`-mode node: a requester on one reaches a
    // responder on the other and the reply comes back.
    let node = crate::support::procs::LiftbridgeNode::start("lbmix", &[], "").await;
    let peer = NatsNode::start(&Impl::Liftbridge, "lbmix", &[node.cluster_port]).await;
    node.wait_routes(1).await;
    peer.wait_routes(1).await;
    let on_node = connect(&node.url()).await;
    let mut svc = on_node.subscribe("mix.svc").await.unwrap();
    on_node.flush().await.unwrap();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            if let Some(r) = m.reply {
                let _ = on_node.publish(r, m.payload).await;
            }
        }
    });
    wait_interest(peer.http_port, "mix.svc", 1).await;
    let on_peer = connect(&peer.url()).await;
    let resp = tokio::time::timeout(WAIT, on_peer.request("mix.svc", Bytes::from_static(b"hi")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&resp.payload[..], b"hi");
}

/// Two in-process servers with routes on port 0 (cluster port 0 too).
async fn routed_pair(
    cluster: &str,
) -> (liftbridge::nats::NatsServer, liftbridge::nats::NatsServer) {
    use liftbridge::config::nats::ClusterOptions;
    let opts = |routes: Vec<String>| liftbridge::config::nats::NatsOptions {
        host: "127.0.0.1".into(),
        port: 0,
        cluster: Some(ClusterOptions {
            name: Some(cluster.into()),
            host: "127.0.0.1".into(),
            port: 0,
            routes,
            ..ClusterOptions::default()
        }),
        ..Default::default()
    };
    let a = liftbridge::nats::NatsServer::start(opts(Vec::new()))
        .await
        .unwrap();
    let seed = format!("nats-route://{}", a.cluster_addr().unwrap());
    let b = liftbridge::nats::NatsServer::start(opts(vec![seed]))
        .await
        .unwrap();
    wait_until(WAIT, "A and B routed", || {
        let ok = a.num_routes() == 1 && b.num_routes() == 1;
        async move { ok }
    })
    .await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_client_subscriptions_and_requests_cross_routes() {
    let (a, b) = routed_pair("lc").await;
    // The in-process client of A subscribes; its interest reaches B.
    let la = a.local_client("log");
    let mut sub = la.subscribe("lc.events.*", None).unwrap();
    let mut qsub = la.subscribe("lc.work", Some("grp")).unwrap();
    wait_until(WAIT, "A's in-process interest on B", || {
        let v = b.subsz_json("subs=1&test=lc.events.x").unwrap();
        let ok = v["subscriptions_list"].as_array().map_or(0, Vec::len) == 1;
        async move { ok }
    })
    .await;
    // A TCP client of B publishes; A's in-process subscription gets it,
    // headers included.
    let nb = connect(&format!("nats://{}", b.client_addr())).await;
    let mut h = async_nats::HeaderMap::new();
    h.insert("K", "v");
    nb.publish_with_headers("lc.events.x", h, Bytes::from_static(b"one"))
        .await
        .unwrap();
    nb.publish("lc.work", Bytes::from_static(b"job"))
        .await
        .unwrap();
    nb.flush().await.unwrap();
    let m = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"one");
    assert!(m
        .headers
        .as_ref()
        .is_some_and(|h| h.windows(6).any(|w| w == b"K: v\r\n")));
    let q = tokio::time::timeout(WAIT, qsub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&q.payload[..], b"job");

    // B's in-process client answers requests; A's in-process client asks
    // across the route and gets the reply back over it.
    let lb = b.local_client("raft");
    let mut svc = lb.subscribe("lc.rpc", None).unwrap();
    let responder = lb.clone();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            if let Some(r) = m.reply {
                let r = String::from_utf8_lossy(&r).into_owned();
                let mut body = b"re:".to_vec();
                body.extend_from_slice(&m.payload);
                let _ = responder.publish(&r, None, None, Bytes::from(body));
            }
        }
    });
    wait_until(WAIT, "B's in-process responder known to A", || {
        let v = a.subsz_json("subs=1&test=lc.rpc").unwrap();
        let ok = v["subscriptions_list"].as_array().map_or(0, Vec::len) == 1;
        async move { ok }
    })
    .await;
    for i in 0..50 {
        let r = la
            .request("lc.rpc", Bytes::from(format!("q{i}")), WAIT)
            .await
            .expect("reply across the route");
        assert_eq!(&r.payload[..], format!("re:q{i}").as_bytes());
    }
    // Interest goes away with the subscription.
    drop(sub);
    wait_until(WAIT, "A's interest withdrawn from B", || {
        let v = b.subsz_json("subs=1&test=lc.events.x").unwrap();
        let ok = v["subscriptions_list"].as_array().map_or(0, Vec::len) == 0;
        async move { ok }
    })
    .await;
    // No responder anywhere: the in-process request says so.
    assert!(matches!(
        la.request("lc.none", Bytes::new(), Duration::from_secs(2))
            .await,
        Err(liftbridge::nats::NatsError::NoResponders)
    ));
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_nodes_record_messages_published_on_other_nodes() {
    use crate::support::procs::LiftbridgeNode;
    use liftbridge::api::proto;
    let mut a = LiftbridgeNode::start("lbfull", &[], "").await;
    let b = LiftbridgeNode::start("lbfull", &[a.cluster_port], "").await;
    let c = LiftbridgeNode::start("lbfull", &[a.cluster_port], "").await;
    for n in [&a, &b, &c] {
        n.wait_routes(2).await;
    }
    // A stream on A (one-node metadata each): its stenographer is an
    // in-process subscription of A, so messages published on B and C
    // cross the routes into A's log.
    let ch = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{}", a.grpc_port))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut api = proto::api_client::ApiClient::new(ch);
    crate::api_common::create(&mut api, "orders", "orders.in", 1).await;
    wait_interest(b.http_port, "orders.in", 1).await;
    wait_interest(c.http_port, "orders.in", 1).await;
    let pb = connect(&b.url()).await;
    let pc = connect(&c.url()).await;
    for i in 0..10 {
        pb.publish("orders.in", Bytes::from(format!("b{i}")))
            .await
            .unwrap();
        pc.publish("orders.in", Bytes::from(format!("c{i}")))
            .await
            .unwrap();
    }
    pb.flush().await.unwrap();
    pc.flush().await.unwrap();
    let mut s =
        crate::api_common::subscribe(&mut api, crate::api_common::from_earliest("orders", 0)).await;
    let got = crate::api_common::take(&mut s, 20).await;
    let values: HashSet<Vec<u8>> = got.iter().map(|m| m.value.to_vec()).collect();
    assert_eq!(values.len(), 20, "each message recorded once");
    assert!(values.contains(&b"b9"[..]) && values.contains(&b"c0"[..]));

    // The node's /metrics count its routes and the routed traffic.
    let metrics = metrics_text(b.http_port).await;
    assert!(metrics.contains("liftbridge_nats_routes 2"), "{metrics}");
    let routed_out = metrics
        .lines()
        .find_map(|l| l.strip_prefix("liftbridge_nats_routed_out_messages_total "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("routed out counter");
    assert!(
        routed_out >= 10,
        "B sent its 10 messages to A: {routed_out}"
    );

    // A crashes and returns: its stenographer subscribes again and the
    // interest reaches B over the re-established routes.
    drop(s);
    a.crash_and_restart().await;
    for n in [&a, &b, &c] {
        n.wait_routes(2).await;
    }
    wait_interest(b.http_port, "orders.in", 1).await;
    pb.publish("orders.in", Bytes::from_static(b"after"))
        .await
        .unwrap();
    pb.flush().await.unwrap();
    let ch = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{}", a.grpc_port))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut api = proto::api_client::ApiClient::new(ch);
    let mut s =
        crate::api_common::subscribe(&mut api, crate::api_common::from_earliest("orders", 0)).await;
    let got = crate::api_common::take(&mut s, 21).await;
    assert_eq!(&got[20].value[..], b"after", "recorded after the restart");
}

/// The `connect_urls` of the last INFO in `text` (raw protocol bytes).
fn last_connect_urls(text: &str) -> Option<HashSet<String>> {
    let line = text.lines().rev().find(|l| l.starts_with("INFO "))?;
    let v: serde_json::Value = serde_json::from_str(line[5..].trim()).ok()?;
    Some(
        v["connect_urls"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|u| u.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_urls_follow_nodes_joining_and_leaving() {
    use crate::nats_support::Raw;
    let (a, b) = routed_pair("urls").await;
    let url_of = |s: &liftbridge::nats::NatsServer| s.client_addr().to_string();
    // A raw client of B sees the first INFO and every async INFO.
    let mut raw = Raw::connected(&b).await;
    let mut seen = raw.info.clone();
    assert_eq!(
        last_connect_urls(&seen),
        Some(HashSet::from([url_of(&a), url_of(&b)])),
        "{seen}"
    );
    // A third server joins (seeded with A): B tells its clients.
    let c = liftbridge::nats::NatsServer::start(liftbridge::config::nats::NatsOptions {
        host: "127.0.0.1".into(),
        port: 0,
        cluster: Some(liftbridge::config::nats::ClusterOptions {
            name: Some("urls".into()),
            host: "127.0.0.1".into(),
            port: 0,
            routes: vec![format!("nats-route://{}", a.cluster_addr().unwrap())],
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let all = HashSet::from([url_of(&a), url_of(&b), url_of(&c)]);
    let end = tokio::time::Instant::now() + WAIT;
    while last_connect_urls(&seen).as_ref() != Some(&all) {
        assert!(
            tokio::time::Instant::now() < end,
            "no INFO with C: {seen}\nA: {}\nB: {}\nC: {}",
            a.routez_json(""),
            b.routez_json(""),
            c.routez_json("")
        );
        let (more, closed) = raw.read_for(Duration::from_millis(200)).await;
        assert!(!closed);
        seen.push_str(&String::from_utf8_lossy(&more));
    }
    // A leaves through lame duck mode: B's clients stop hearing of it.
    a.enter_lame_duck();
    let rest = HashSet::from([url_of(&b), url_of(&c)]);
    let end = tokio::time::Instant::now() + WAIT;
    while last_connect_urls(&seen).as_ref() != Some(&rest) {
        assert!(
            tokio::time::Instant::now() < end,
            "no INFO without A: {seen}"
        );
        let (more, closed) = raw.read_for(Duration::from_millis(200)).await;
        assert!(!closed);
        seen.push_str(&String::from_utf8_lossy(&more));
    }
    b.shutdown().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertise_and_no_advertise_options_take_effect() {
    use liftbridge::config::nats::{ClusterOptions, NatsOptions};
    use tokio::io::AsyncReadExt;
    let s = liftbridge::nats::NatsServer::start(NatsOptions {
        host: "127.0.0.1".into(),
        port: 0,
        cluster: Some(ClusterOptions {
            name: Some("adv".into()),
            host: "127.0.0.1".into(),
            port: 0,
            advertise: Some("10.1.2.3:7777".into()),
            no_advertise: true,
            ..ClusterOptions::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    // Peers are told the advertised route URL, and no client URLs.
    let mut peer = tokio::net::TcpStream::connect(s.cluster_addr().unwrap())
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(WAIT, peer.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let info = String::from_utf8_lossy(&buf[..n]).into_owned();
    let v: serde_json::Value = serde_json::from_str(info[5..].trim()).unwrap();
    assert_eq!(v["ip"], "nats-route://10.1.2.3:7777/", "{info}");
    assert_eq!(v["cluster"], "adv");
    assert!(v.get("connect_urls").is_none(), "{info}");
    assert!(v.get("route_pool_size").is_none() && v.get("compression").is_none());
    // Clients get no connect_urls either.
    let raw = crate::nats_support::Raw::connect(&s).await;
    assert!(!raw.info.contains("connect_urls"), "{}", raw.info);
    assert!(raw.info.contains("\"cluster\":\"adv\""), "{}", raw.info);
    s.shutdown().await;
}
