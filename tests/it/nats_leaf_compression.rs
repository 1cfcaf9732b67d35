//! Contract: leaf node `compression` (listener and remotes) as nats-server
//! 2.10+ speaks it. A leaf that wants S2 sends an INFO naming its mode
//! before CONNECT; the hub answers with a compressed INFO and everything
//! after is compressed, each side at its own level. Tested with ours and Go
//! 2.15 in both roles (Go's default for leaves is `s2_auto`), a TCP proxy
//! between leaf and hub counting the bytes; a hub without compression (ours
//! with `off`, Go 2.9) keeps the link plain.

use crate::nats_route_compression::{assert_wire, one_way};
use crate::support::procs::{go_nats_server_2_15, go_nats_server_2_9, ConfNode, Impl};
use crate::support::proxy::{Dir, Proxy};

/// The `compression` of the server's only leaf connection.
async fn leaf_mode(n: &ConfNode) -> String {
    n.wait_leafs(1).await;
    n.leafz().await["leafs"][0]["compression"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

struct Case {
    hub: Impl,
    hub_mode: Option<&'static str>,
    leaf: Impl,
    leaf_mode: Option<&'static str>,
    /// `/leafz` compression on the hub and on the leaf (`None`: not
    /// checked).
    want: (Option<&'static str>, Option<&'static str>),
    /// Whether the bytes towards the hub and towards the leaf shrink.
    shrinks: (bool, bool),
}

async fn run(c: Case, label: &str) {
    let hub_body = c.hub_mode.map(|m| format!("compression: {m}"));
    let hub = ConfNode::start(&c.hub, &format!("{label}-hub"), true, hub_body.as_deref()).await;
    let proxy = Proxy::start(
        format!("127.0.0.1:{}", hub.leaf_port.unwrap())
            .parse()
            .unwrap(),
    )
    .await;
    let comp = c
        .leaf_mode
        .map_or(String::new(), |m| format!(", compression: {m}"));
    let remote = format!(
        "remotes [ {{ url: \"nats-leaf://127.0.0.1:{}\"{comp} }} ]",
        proxy.port
    );
    let leaf = ConfNode::start(&c.leaf, &format!("{label}-leaf"), false, Some(&remote)).await;
    let modes = (leaf_mode(&hub).await, leaf_mode(&leaf).await);
    if let Some(w) = c.want.0 {
        assert_eq!(modes.0, w, "{label}: hub's leaf compression");
    }
    if let Some(w) = c.want.1 {
        assert_eq!(modes.1, w, "{label}: leaf's compression");
    }
    let ch = async_nats::connect(hub.url()).await.unwrap();
    let cl = async_nats::connect(leaf.url()).await.unwrap();
    // Interest first, so the bytes counted are the messages.
    let mut up = ch.subscribe("lz.up").await.unwrap();
    let mut down = cl.subscribe("lz.down").await.unwrap();
    ch.flush().await.unwrap();
    cl.flush().await.unwrap();
    leaf.wait_leaf_interest("lz.up").await;
    hub.wait_leaf_interest("lz.down").await;
    let (u0, d0) = (proxy.bytes(Dir::ToUpstream), proxy.bytes(Dir::ToClient));
    one_way(&cl, &mut up, "lz.up", &format!("{label} up")).await;
    one_way(&ch, &mut down, "lz.down", &format!("{label} down")).await;
    assert_wire(
        label,
        [
            (
                "towards the hub",
                proxy.bytes(Dir::ToUpstream) - u0,
                c.shrinks.0,
            ),
            (
                "towards the leaf",
                proxy.bytes(Dir::ToClient) - d0,
                c.shrinks.1,
            ),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_compression_ours_leaf_of_go_2_15() {
    run(
        Case {
            hub: Impl::Go(go_nats_server_2_15()),
            hub_mode: Some("s2_fast"),
            leaf: Impl::Liftbridge,
            leaf_mode: Some("s2_best"),
            want: (Some("s2_fast"), Some("s2_best")),
            shrinks: (true, true),
        },
        "ours-leaf",
    )
    .await;
}

/// Go's default for leaves (`s2_auto`) against our hub: Go picks its level
/// from the round trip (on loopback: frames holding the bytes as they
/// are), ours compresses at `s2_better`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_compression_go_2_15_default_leaf_of_ours() {
    run(
        Case {
            hub: Impl::Liftbridge,
            hub_mode: Some("s2_better"),
            leaf: Impl::Go(go_nats_server_2_15()),
            leaf_mode: None,
            want: (Some("s2_better"), None),
            shrinks: (false, true),
        },
        "go-leaf",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_compression_go_2_15_fast_leaf_of_ours() {
    run(
        Case {
            hub: Impl::Liftbridge,
            hub_mode: Some("s2_fast"),
            leaf: Impl::Go(go_nats_server_2_15()),
            leaf_mode: Some("s2_fast"),
            want: (Some("s2_fast"), Some("s2_fast")),
            shrinks: (true, true),
        },
        "go-fast-leaf",
    )
    .await;
}

/// Ours on both ends: the hub accepts the leaf's level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_compression_between_ours() {
    run(
        Case {
            hub: Impl::Liftbridge,
            hub_mode: Some("accept"),
            leaf: Impl::Liftbridge,
            leaf_mode: Some("s2_best"),
            want: (Some("s2_best"), Some("s2_best")),
            shrinks: (true, true),
        },
        "ours-both",
    )
    .await;
}

/// Hubs without compression keep the link plain: ours with the default
/// (`off`) under Go's `s2_auto` leaf, and Go 2.9 under ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_compression_without_it_on_the_hub_stays_plain() {
    run(
        Case {
            hub: Impl::Liftbridge,
            hub_mode: None,
            leaf: Impl::Go(go_nats_server_2_15()),
            leaf_mode: None,
            want: (Some("not supported"), None),
            shrinks: (false, false),
        },
        "ours-off",
    )
    .await;
    run(
        Case {
            hub: Impl::Go(go_nats_server_2_9()),
            hub_mode: None,
            leaf: Impl::Liftbridge,
            leaf_mode: Some("s2_fast"),
            want: (None, Some("not supported")),
            shrinks: (false, false),
        },
        "go29-hub",
    )
    .await;
}
