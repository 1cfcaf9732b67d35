//! Contract: a leaf connection bound to an importing account receives the
//! exporter's stream like any subscriber of that account, and its publishes
//! reach the exporter's services — with our hub as with Go 2.15.1's, for
//! our leaf and Go's.

use std::time::Duration;

use futures::StreamExt;

use crate::support::procs::{go_nats_server_2_15, ConfNode, Impl};

const WAIT: Duration = Duration::from_secs(20);

/// The hub's accounts: A exports a stream and a service, B imports both;
/// leaves connect as `b` (account B).
const HUB: &str = r#"
accounts {
  A {
    users: [ {user: a, password: pw} ]
    exports: [ {stream: "pub.>"}, {service: "req.>"} ]
  }
  B {
    users: [ {user: b, password: pw} ]
    imports: [
      {stream: {account: A, subject: "pub.>"}, prefix: "froma"}
      {service: {account: A, subject: "req.echo"}, to: "local.echo"}
    ]
  }
}
"#;

async fn imports_through_leaf(hub_imp: Impl, leaf_imp: Impl, tag: &str) {
    let hub = ConfNode::start_with(&hub_imp, &format!("hub-{tag}"), true, None, HUB).await;
    let port = hub.leaf_port.expect("hub leaf port");
    let remote = format!("remotes [ {{ url: \"nats-leaf://b:pw@127.0.0.1:{port}\" }} ]");
    let leaf = ConfNode::start(&leaf_imp, &format!("leaf-{tag}"), false, Some(&remote)).await;
    hub.wait_leafs(1).await;
    leaf.wait_leafs(1).await;
    let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
    let mut feed = on_leaf.subscribe("froma.pub.>").await.unwrap();
    on_leaf.flush().await.unwrap();
    hub.wait_leaf_interest("froma.pub.>").await;
    let a = async_nats::ConnectOptions::with_user_and_password("a".into(), "pw".into())
        .connect(hub.url())
        .await
        .unwrap();
    // Stream: A's publish on the hub reaches the leaf's subscriber in B.
    a.publish("pub.x", "from a".into()).await.unwrap();
    a.flush().await.unwrap();
    let m = tokio::time::timeout(WAIT, feed.next())
        .await
        .unwrap_or_else(|_| panic!("{tag}: A's stream did not reach the leaf"))
        .unwrap();
    assert_eq!(m.subject.as_str(), "froma.pub.x", "{tag}");
    // Service: a request from the leaf reaches A's responder on the hub.
    let mut reqs = a.subscribe("req.echo").await.unwrap();
    // A round trip on `a`: its SUB is in place before the request.
    let probe = a.new_inbox();
    let mut back = a.subscribe(probe.clone()).await.unwrap();
    a.publish(probe, "".into()).await.unwrap();
    tokio::time::timeout(WAIT, back.next())
        .await
        .expect("a round trip on a");
    let a2 = a.clone();
    tokio::spawn(async move {
        while let Some(m) = reqs.next().await {
            if let Some(r) = m.reply {
                let _ = a2.publish(r, "echo".into()).await;
            }
        }
    });
    leaf.wait_leaf_interest("local.echo").await;
    let r = tokio::time::timeout(WAIT, on_leaf.request("local.echo", "hi".into()))
        .await
        .unwrap_or_else(|_| panic!("{tag}: no answer in time"))
        .unwrap_or_else(|e| panic!("{tag}: {e}"));
    assert_eq!(r.payload, "echo", "{tag}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_imports_ours_hub_ours_leaf() {
    imports_through_leaf(Impl::Liftbridge, Impl::Liftbridge, "oo").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_imports_ours_hub_go_leaf() {
    imports_through_leaf(Impl::Liftbridge, Impl::Go(go_nats_server_2_15()), "og").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_imports_go_hub_ours_leaf() {
    imports_through_leaf(Impl::Go(go_nats_server_2_15()), Impl::Liftbridge, "go").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_imports_go_hub_go_leaf() {
    imports_through_leaf(
        Impl::Go(go_nats_server_2_15()),
        Impl::Go(go_nats_server_2_15()),
        "gg",
    )
    .await;
}
