//! Contract: a leaf configured with one server of a hub cluster fails over
//! to the others, as with nats-server. A hub announces in `leafnode_urls`
//! its own leaf listener and those of its routed peers (learned from their
//! route INFO), and sends the leaves it accepted a new INFO when a peer
//! comes or goes; a leaf adds the announced URLs to the ones it tries,
//! unless its remote sets `ignore_discovered_servers`. Both roles against
//! Go nats-server 2.15.1: our edge under a cluster of two Go hubs, and a Go
//! leaf under a cluster of two of our hubs. The second hub joins after the
//! leaf connected, so the URL arrives in an INFO sent on the live
//! connection; then the first hub is killed with `kill -9` and traffic
//! crosses through the second.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::support::procs::{go_nats_server_2_15, ConfNode, Impl};
use crate::support::{free_port, http_json, wait_until};

const WAIT: Duration = Duration::from_secs(20);

/// The `cluster {}` blocks of two hubs of cluster `name`: the first
/// listens, the second also routes to it.
fn hub_cluster(name: &str) -> (String, String) {
    let (c1, c2) = (free_port(), free_port());
    let first = format!("cluster {{ name: {name}, listen: 127.0.0.1:{c1} }}");
    let second = format!(
        "cluster {{ name: {name}, listen: 127.0.0.1:{c2}, routes: [\"nats-route://127.0.0.1:{c1}\"] }}"
    );
    (first, second)
}

/// Waits until `n` has a route (nats-server opens a pool of them).
async fn wait_routed(n: &ConfNode) {
    wait_until(WAIT, "the hubs routed", || async {
        http_json(n.http_port, "/routez")
            .await
            .is_some_and(|v| v["num_routes"].as_u64() >= Some(1))
    })
    .await;
}

async fn connect(url: &str) -> async_nats::Client {
    async_nats::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// `sub` (on a leaf) gets what `hub` publishes on `subject` once `hub`
/// sees the leaf's interest.
async fn crosses(hub: &ConfNode, sub: &mut async_nats::Subscriber, subject: &str) {
    hub.wait_leaf_interest(subject).await;
    let c = connect(&hub.url()).await;
    c.publish(subject.to_string(), "over".into()).await.unwrap();
    c.flush().await.unwrap();
    let m = tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("message in time")
        .expect("subscription open");
    assert_eq!(m.payload, Bytes::from("over"));
}

/// Counts a client's disconnections.
async fn counted(
    url: &str,
) -> (
    async_nats::Client,
    std::sync::Arc<std::sync::atomic::AtomicU32>,
) {
    let drops = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let d = drops.clone();
    let c = async_nats::ConnectOptions::new()
        .event_callback(move |e| {
            let d = d.clone();
            async move {
                if matches!(e, async_nats::Event::Disconnected) {
                    d.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        })
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    (c, drops)
}

/// Our edges under two Go 2.15.1 hubs: the one that takes the announced
/// URLs reconnects to the second hub when the first dies; the one with
/// `ignore_discovered_servers` keeps dialling the first only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_edge_fails_over_to_an_announced_go_hub() {
    let go = Impl::Go(go_nats_server_2_15());
    let (first, second) = hub_cluster("gohubs");
    let mut hub1 = ConfNode::start_with(&go, "gohub1", true, None, &first).await;
    let remote = |extra: &str| {
        format!(
            "reconnect: 200ms\nremotes [ {{ url: \"{}\"{extra} }} ]",
            hub1.leaf_url()
        )
    };
    let edge = ConfNode::start(&Impl::Liftbridge, "edge-follow", false, Some(&remote(""))).await;
    let pinned = ConfNode::start(
        &Impl::Liftbridge,
        "edge-pinned",
        false,
        Some(&remote(", ignore_discovered_servers: true")),
    )
    .await;
    hub1.wait_leafs(2).await;
    let hub2 = ConfNode::start_with(&go, "gohub2", true, None, &second).await;
    wait_routed(&hub2).await;
    let (c, drops) = counted(&edge.url()).await;
    let mut sub = c.subscribe("fo.down").await.unwrap();
    c.flush().await.unwrap();
    crosses(&hub1, &mut sub, "fo.down").await;

    hub1.proc.kill9();
    // Only the edge that follows the announced URLs reaches hub 2.
    hub2.wait_leafs(1).await;
    crosses(&hub2, &mut sub, "fo.down").await;
    let leafz = hub2.leafz().await;
    assert_eq!(leafz["leafs"][0]["name"], "edge-follow", "{leafz}");
    // The pinned edge keeps trying hub 1 alone: still one leaf on hub 2
    // after ten of its reconnect delays.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(hub2.leafz().await["leafnodes"], 1, "{}", hub2.leafz().await);
    assert_eq!(pinned.leafz().await["leafnodes"], 0);
    assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// A Go 2.15.1 leaf under two of our hubs: the second hub's leaf URL
/// reaches the leaf in an INFO from the first when the route forms, and
/// the leaf reconnects to it when the first dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_go_leaf_fails_over_to_a_hub_we_announced() {
    let (first, second) = hub_cluster("lbhubs");
    let mut hub1 = ConfNode::start_with(&Impl::Liftbridge, "lbhub1", true, None, &first).await;
    let leaf = ConfNode::start(
        &Impl::Go(go_nats_server_2_15()),
        "goleaf",
        false,
        Some(&format!("remotes [ {{ url: \"{}\" }} ]", hub1.leaf_url())),
    )
    .await;
    hub1.wait_leafs(1).await;
    let hub2 = ConfNode::start_with(&Impl::Liftbridge, "lbhub2", true, None, &second).await;
    wait_routed(&hub2).await;
    // Hub 1's leaf INFO now lists both listeners (new leaves get it in
    // their first INFO; the Go leaf got it in an update).
    let info = leaf_info(hub1.leaf_port.unwrap()).await;
    let urls = info["leafnode_urls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for p in [hub1.leaf_port.unwrap(), hub2.leaf_port.unwrap()] {
        let want = format!("127.0.0.1:{p}");
        assert!(urls.iter().any(|u| u.as_str() == Some(&want)), "{info}");
    }
    let c = connect(&leaf.url()).await;
    let mut sub = c.subscribe("fo.go").await.unwrap();
    c.flush().await.unwrap();
    crosses(&hub1, &mut sub, "fo.go").await;

    hub1.proc.kill9();
    hub2.wait_leafs(1).await;
    crosses(&hub2, &mut sub, "fo.go").await;
    // Hub 1 gone, hub 2 announces only itself to a new leaf.
    let info = leaf_info(hub2.leaf_port.unwrap()).await;
    assert_eq!(
        info["leafnode_urls"],
        serde_json::json!([format!("127.0.0.1:{}", hub2.leaf_port.unwrap())]),
        "{info}"
    );
}

/// The first INFO the leaf listener on `port` sends.
async fn leaf_info(port: u16) -> serde_json::Value {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the leaf port");
    let mut line = String::new();
    tokio::time::timeout(WAIT, BufReader::new(s).read_line(&mut line))
        .await
        .expect("INFO in time")
        .expect("read INFO");
    let json = line.trim_end().strip_prefix("INFO ").expect("an INFO line");
    serde_json::from_str(json).expect("INFO is JSON")
}
