//! Contract: leaf nodes interoperate with Go nats-server (Debian's 2.9.10
//! and 2.15.1) in both roles — our server as a leaf of a Go hub, and Go
//! leaves attached to our hub. Across the link: pub/sub both ways (with
//! headers), request/reply both ways, queue groups (each message once,
//! local members preferred), interest that exists when the link comes up,
//! and a hub killed with `kill -9` and restarted (the leaf reconnects and
//! re-sends its interest; local traffic never stops). A cycle of two
//! remotes is detected with nats-server's `Loop detected` error; a peer
//! speaking garbage on the leaf port gets an `-ERR` and the established
//! leaf is unaffected. The edge story: a full liftbridge node whose
//! embedded NATS is a leaf of a Go hub records its local subject in a
//! stream while the messages also reach the hub, and loses nothing while
//! the hub is down.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::support::procs::{
    go_nats_server_2_15, go_nats_server_2_9, ConfNode, Impl, LiftbridgeNode, START_TIMEOUT,
};
use crate::support::{free_port, http_json, wait_until};

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

/// `remotes [...]` toward `hub`.
fn remote_to(hub: &ConfNode) -> String {
    format!("remotes [ {{ url: \"{}\" }} ]", hub.leaf_url())
}

/// Starts a hub of `hub_imp` and a leaf of `leaf_imp` attached to it, and
/// waits until both see the connection.
async fn pair(hub_imp: &Impl, leaf_imp: &Impl, tag: &str) -> (ConfNode, ConfNode) {
    let hub = ConfNode::start(hub_imp, &format!("hub-{tag}"), true, None).await;
    let leaf = ConfNode::start(
        leaf_imp,
        &format!("leaf-{tag}"),
        false,
        Some(&remote_to(&hub)),
    )
    .await;
    hub.wait_leafs(1).await;
    leaf.wait_leafs(1).await;
    (hub, leaf)
}

/// Subscribes `on` to `subject` and waits until the server behind `peer`
/// (the other end of the link) has the interest.
async fn sub_seen(
    on: &async_nats::Client,
    subject: &str,
    peer: &ConfNode,
) -> async_nats::Subscriber {
    let s = on.subscribe(subject.to_string()).await.unwrap();
    on.flush().await.unwrap();
    peer.wait_leaf_interest(subject).await;
    s
}

/// Publishes `n` messages with an `N` header from `from` on `subject` and
/// checks `sub` gets all of them, in order, with headers.
async fn stream_across(
    from: &async_nats::Client,
    sub: &mut async_nats::Subscriber,
    subject: &str,
    n: usize,
) {
    for i in 0..n {
        let mut h = async_nats::HeaderMap::new();
        h.insert("N", i.to_string().as_str());
        from.publish_with_headers(subject.to_string(), h, Bytes::from(format!("m{i}")))
            .await
            .unwrap();
    }
    from.flush().await.unwrap();
    for i in 0..n {
        let m = next(sub).await;
        assert_eq!(m.payload, Bytes::from(format!("m{i}")), "{subject} #{i}");
        let h = m.headers.expect("headers cross the leaf link");
        assert_eq!(h.get("N").map(|v| v.as_str()), Some(i.to_string().as_str()));
    }
}

/// A responder on `serve` for `subject` answering `prefix` + request.
async fn responder(serve: &async_nats::Client, subject: &str, peer: &ConfNode, prefix: &str) {
    let mut s = sub_seen(serve, subject, peer).await;
    let c = serve.clone();
    let prefix = prefix.to_string();
    tokio::spawn(async move {
        while let Some(m) = s.next().await {
            if let Some(r) = m.reply {
                let mut body = prefix.clone().into_bytes();
                body.extend_from_slice(&m.payload);
                let _ = c.publish(r, body.into()).await;
                let _ = c.flush().await;
            }
        }
    });
}

/// Queue members: `n` subscribers of `group` on `c`, all feeding one
/// channel of payloads.
async fn queue_members(
    c: &async_nats::Client,
    subject: &str,
    group: &str,
    n: usize,
    tx: &tokio::sync::mpsc::UnboundedSender<(String, Bytes)>,
    label: &str,
) {
    for k in 0..n {
        let mut s = c
            .queue_subscribe(subject.to_string(), group.to_string())
            .await
            .unwrap();
        let tx = tx.clone();
        let who = format!("{label}{k}");
        tokio::spawn(async move {
            while let Some(m) = s.next().await {
                let _ = tx.send((who.clone(), m.payload));
            }
        });
    }
    c.flush().await.unwrap();
}

/// Receives exactly `n` payloads (then checks nothing more arrives for a
/// moment): returns them with who got each.
async fn collect(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, Bytes)>,
    n: usize,
) -> Vec<(String, Bytes)> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let got = tokio::time::timeout(WAIT, rx.recv())
            .await
            .expect("queue message in time")
            .expect("channel open");
        out.push(got);
    }
    // Duplicates would arrive right behind the originals.
    if let Ok(Some(extra)) = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await {
        panic!("more than {n} deliveries: extra {extra:?}");
    }
    out
}

/// Everything the two ends of a leaf link must do for each other.
async fn exercise(hub: &ConfNode, leaf: &ConfNode) {
    let ch = connect(&hub.url()).await;
    let cl = connect(&leaf.url()).await;

    // Hub → leaf and leaf → hub, with headers.
    let mut on_leaf = sub_seen(&cl, "t.down", hub).await;
    let mut on_hub = sub_seen(&ch, "t.up", leaf).await;
    stream_across(&ch, &mut on_leaf, "t.down", 100).await;
    stream_across(&cl, &mut on_hub, "t.up", 100).await;

    // Wildcard interest crosses as such.
    let mut wild = sub_seen(&cl, "w.*.x", hub).await;
    ch.publish("w.a.x", "wa".into()).await.unwrap();
    ch.publish("w.a.y", "no".into()).await.unwrap();
    ch.publish("w.b.x", "wb".into()).await.unwrap();
    ch.flush().await.unwrap();
    assert_eq!(next(&mut wild).await.payload, Bytes::from("wa"));
    assert_eq!(next(&mut wild).await.payload, Bytes::from("wb"));

    // Request/reply both ways (the requester's inbox interest crosses).
    responder(&ch, "svc.hub", leaf, "hub:").await;
    responder(&cl, "svc.leaf", hub, "leaf:").await;
    for i in 0..5 {
        let r = tokio::time::timeout(WAIT, cl.request("svc.hub", format!("q{i}").into()))
            .await
            .expect("reply in time")
            .expect("reply from the hub");
        assert_eq!(r.payload, Bytes::from(format!("hub:q{i}")));
        let r = tokio::time::timeout(WAIT, ch.request("svc.leaf", format!("q{i}").into()))
            .await
            .expect("reply in time")
            .expect("reply from the leaf");
        assert_eq!(r.payload, Bytes::from(format!("leaf:q{i}")));
    }

    // A queue group with members only across the link: each message once.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    queue_members(&cl, "q.remote", "workers", 2, &tx, "leaf").await;
    hub.wait_leaf_interest("q.remote").await;
    for i in 0..50 {
        ch.publish("q.remote", format!("r{i}").into())
            .await
            .unwrap();
    }
    ch.flush().await.unwrap();
    let got = collect(&mut rx, 50).await;
    let unique: HashSet<&Bytes> = got.iter().map(|(_, p)| p).collect();
    assert_eq!(unique.len(), 50, "every message once");

    // Members on both sides: each message once overall, and the
    // publisher's side serves its own messages (local members first).
    queue_members(&ch, "q.both", "workers", 2, &tx, "hub").await;
    queue_members(&cl, "q.both", "workers", 2, &tx, "leaf").await;
    hub.wait_leaf_interest("q.both").await;
    leaf.wait_leaf_interest("q.both").await;
    for i in 0..50 {
        ch.publish("q.both", format!("h{i}").into()).await.unwrap();
        cl.publish("q.both", format!("l{i}").into()).await.unwrap();
    }
    ch.flush().await.unwrap();
    cl.flush().await.unwrap();
    let got = collect(&mut rx, 100).await;
    let unique: HashSet<&Bytes> = got.iter().map(|(_, p)| p).collect();
    assert_eq!(unique.len(), 100, "every message once");
    for (who, p) in &got {
        let from_hub = p.starts_with(b"h");
        assert_eq!(
            who.starts_with("hub"),
            from_hub,
            "{p:?} served by {who}: local members are preferred"
        );
    }

    // Unsubscribing withdraws the interest across the link.
    drop(wild);
    cl.flush().await.unwrap();
    let what = "w.*.x interest withdrawn from the hub";
    wait_until(WAIT, what, || async {
        let v = hub.leafz().await;
        !v.to_string().contains("w.*.x")
    })
    .await;
}

/// The leaf's interest survives a `kill -9` of the hub: after the
/// restart the leaf reconnects, re-sends it, and traffic flows again; the
/// leaf's own clients are served throughout.
async fn hub_crash(hub: &mut ConfNode, leaf: &ConfNode) {
    let cl = connect(&leaf.url()).await;
    let mut on_leaf = sub_seen(&cl, "after.crash", hub).await;
    let mut local = cl.subscribe("local.only").await.unwrap();
    cl.flush().await.unwrap();

    hub.proc.kill9();
    leaf.wait_leafs(0).await;
    // The leaf alone still serves its own clients.
    let other = connect(&leaf.url()).await;
    other.publish("local.only", "alone".into()).await.unwrap();
    other.flush().await.unwrap();
    assert_eq!(next(&mut local).await.payload, Bytes::from("alone"));

    hub.crash_and_restart().await;
    hub.wait_leafs(1).await;
    hub.wait_leaf_interest("after.crash").await;
    let ch = connect(&hub.url()).await;
    ch.publish("after.crash", "back".into()).await.unwrap();
    ch.flush().await.unwrap();
    assert_eq!(next(&mut on_leaf).await.payload, Bytes::from("back"));
    leaf.wait_leafs(1).await;
}

async fn ours_as_leaf_of(go: Impl, tag: &str) {
    let (mut hub, leaf) = pair(&go, &Impl::Liftbridge, tag).await;
    exercise(&hub, &leaf).await;
    hub_crash(&mut hub, &leaf).await;
}

async fn go_leaf_of_ours(go: Impl, tag: &str) {
    let (mut hub, leaf) = pair(&Impl::Liftbridge, &go, tag).await;
    exercise(&hub, &leaf).await;
    hub_crash(&mut hub, &leaf).await;
    let v = http_json(hub.http_port, "/varz").await.expect("varz");
    assert_eq!(v["leafnodes"].as_u64(), Some(1), "{v}");
    assert_eq!(
        v["leaf"]["port"].as_u64(),
        hub.leaf_port.map(u64::from),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_ours_as_leaf_of_go_2_9() {
    ours_as_leaf_of(Impl::Go(go_nats_server_2_9()), "l29").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_ours_as_leaf_of_go_2_15() {
    ours_as_leaf_of(Impl::Go(go_nats_server_2_15()), "l215").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_go_2_9_leaf_of_ours() {
    go_leaf_of_ours(Impl::Go(go_nats_server_2_9()), "h29").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_go_2_15_leaf_of_ours() {
    go_leaf_of_ours(Impl::Go(go_nats_server_2_15()), "h215").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_ours_on_both_ends() {
    let (mut hub, leaf) = pair(&Impl::Liftbridge, &Impl::Liftbridge, "ll").await;
    exercise(&hub, &leaf).await;
    hub_crash(&mut hub, &leaf).await;
}

/// Interest that exists before the link comes up is announced on connect,
/// in both directions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_existing_interest_is_sent_on_connect() {
    let go = Impl::Go(go_nats_server_2_15());
    let hub = ConfNode::start(&go, "hub-pre", true, None).await;
    let ch = connect(&hub.url()).await;
    let mut on_hub = ch.subscribe("pre.up").await.unwrap();
    ch.flush().await.unwrap();
    // Our leaf starts with a remote to a hub that is not there yet: its
    // subscription exists long before the link.
    let leaf_port = free_port();
    let leaf = ConfNode::start(
        &Impl::Liftbridge,
        "leaf-pre",
        false,
        Some(&format!(
            "remotes [ {{ url: \"nats-leaf://127.0.0.1:{leaf_port}\" }}, {{ url: \"{}\" }} ]",
            hub.leaf_url()
        )),
    )
    .await;
    let cl = connect(&leaf.url()).await;
    let mut on_leaf = cl.subscribe("pre.down").await.unwrap();
    cl.flush().await.unwrap();
    hub.wait_leafs(1).await;
    hub.wait_leaf_interest("pre.down").await;
    leaf.wait_leaf_interest("pre.up").await;
    ch.publish("pre.down", "d".into()).await.unwrap();
    ch.flush().await.unwrap();
    cl.publish("pre.up", "u".into()).await.unwrap();
    cl.flush().await.unwrap();
    assert_eq!(next(&mut on_leaf).await.payload, Bytes::from("d"));
    assert_eq!(next(&mut on_hub).await.payload, Bytes::from("u"));
    // The unreachable remote is retried without disturbing the live one.
    wait_until(
        WAIT,
        "the dead remote reported in the leaf's log",
        || async {
            leaf.proc
                .log_text()
                .contains("error trying to connect as leafnode")
        },
    )
    .await;
}

/// Two servers that are each other's remote form a cycle: our own
/// loop-detection subject comes back and the link is refused with
/// nats-server's error text.
async fn loop_between(other: Impl, tag: &str) {
    let (pa, pb) = (free_port(), free_port());
    let body = |listen: u16, to: u16| {
        format!("listen: 127.0.0.1:{listen}\nremotes [ {{ url: \"nats-leaf://127.0.0.1:{to}\" }} ]")
    };
    let ours = ConfNode::start(
        &Impl::Liftbridge,
        &format!("loop-a-{tag}"),
        false,
        Some(&body(pa, pb)),
    )
    .await;
    let theirs =
        ConfNode::start(&other, &format!("loop-b-{tag}"), false, Some(&body(pb, pa))).await;
    let want = "Loop detected for leafnode account=\"$G\". Delaying attempt to reconnect for 30s";
    wait_until(START_TIMEOUT, "our server reports the loop", || async {
        ours.proc.log_text().contains(want)
    })
    .await;
    wait_until(
        START_TIMEOUT,
        "the other server learns of the loop",
        || async { theirs.proc.log_text().contains("Loop detected") },
    )
    .await;
    // Both servers still serve their clients.
    for n in [&ours, &theirs] {
        let c = connect(&n.url()).await;
        let mut s = c.subscribe("still.here").await.unwrap();
        c.publish("still.here", "yes".into()).await.unwrap();
        c.flush().await.unwrap();
        assert_eq!(next(&mut s).await.payload, Bytes::from("yes"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_loop_with_go_2_15_is_detected() {
    loop_between(Impl::Go(go_nats_server_2_15()), "go").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_loop_between_ours_is_detected() {
    loop_between(Impl::Liftbridge, "lb").await;
}

/// A leaf attached to one server of a cluster reaches the other servers:
/// messages and interest cross leaf → hub → route and back, queue groups
/// included, as nats-server does. Our hub is routed to a Go 2.15 server;
/// the leaf is a Go 2.9 server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_messages_cross_routes_and_leaf() {
    let (ca, cb) = (free_port(), free_port());
    let hub = ConfNode::start_with(
        &Impl::Liftbridge,
        "lr-a",
        true,
        None,
        &format!("cluster {{ name: lrc, listen: 127.0.0.1:{ca} }}"),
    )
    .await;
    let other = ConfNode::start_with(
        &Impl::Go(go_nats_server_2_15()),
        "lr-b",
        false,
        None,
        &format!(
            "cluster {{ name: lrc, listen: 127.0.0.1:{cb}, routes: [\"nats-route://127.0.0.1:{ca}\"] }}"
        ),
    )
    .await;
    let leaf = ConfNode::start(
        &Impl::Go(go_nats_server_2_9()),
        "lr-leaf",
        false,
        Some(&remote_to(&hub)),
    )
    .await;
    hub.wait_leafs(1).await;
    let routed = |port: u16, subject: &'static str| async move {
        crate::cluster_routes::routes_with_interest(port, subject).await > 0
    };
    wait_until(WAIT, "route between the hub and the Go server", || async {
        http_json(hub.http_port, "/routez")
            .await
            .is_some_and(|v| v["num_routes"].as_u64() == Some(1))
    })
    .await;
    let cl = connect(&leaf.url()).await;
    let cb_client = connect(&other.url()).await;

    // Leaf interest reaches the routed server; its messages reach the leaf.
    let mut on_leaf = cl.subscribe("lr.down").await.unwrap();
    cl.flush().await.unwrap();
    wait_until(WAIT, "leaf interest on the route", || {
        routed(other.http_port, "lr.down")
    })
    .await;
    for i in 0..20 {
        cb_client
            .publish("lr.down", format!("d{i}").into())
            .await
            .unwrap();
    }
    cb_client.flush().await.unwrap();
    for i in 0..20 {
        assert_eq!(
            next(&mut on_leaf).await.payload,
            Bytes::from(format!("d{i}"))
        );
    }

    // Routed interest reaches the leaf; its messages reach the routed server.
    let mut on_other = cb_client.subscribe("lr.up").await.unwrap();
    let mut q_other = cb_client
        .queue_subscribe("lr.q", "g".to_string())
        .await
        .unwrap();
    cb_client.flush().await.unwrap();
    leaf.wait_leaf_interest("lr.up").await;
    leaf.wait_leaf_interest("lr.q").await;
    for i in 0..20 {
        cl.publish("lr.up", format!("u{i}").into()).await.unwrap();
        cl.publish("lr.q", format!("q{i}").into()).await.unwrap();
    }
    cl.flush().await.unwrap();
    for i in 0..20 {
        assert_eq!(
            next(&mut on_other).await.payload,
            Bytes::from(format!("u{i}"))
        );
        assert_eq!(
            next(&mut q_other).await.payload,
            Bytes::from(format!("q{i}"))
        );
    }
}

/// A dev CA and a server certificate for 127.0.0.1 (`liftbridge cert init`).
fn dev_certs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args(["cert", "init", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    dir
}

/// One message each way across a leaf connection that is up.
async fn one_each_way(hub: &ConfNode, leaf: &ConfNode) {
    hub.wait_leafs(1).await;
    let ch = connect(&hub.url()).await;
    let cl = connect(&leaf.url()).await;
    let mut on_leaf = sub_seen(&cl, "tls.down", hub).await;
    let mut on_hub = sub_seen(&ch, "tls.up", leaf).await;
    ch.publish("tls.down", "d".into()).await.unwrap();
    ch.flush().await.unwrap();
    cl.publish("tls.up", "u".into()).await.unwrap();
    cl.flush().await.unwrap();
    assert_eq!(next(&mut on_leaf).await.payload, Bytes::from("d"));
    assert_eq!(next(&mut on_hub).await.payload, Bytes::from("u"));
}

/// TLS leaf links with a dev CA: a hub of each `pairs` entry with `hub_tls`
/// fields (and `hub_extra` in its `leafnodes` block), a leaf dialling it
/// over `tls://` with `remote_tls` fields (and `remote_extra` in its
/// remote); `before_leaf` runs against the hub first. One message each
/// way crosses every pair; returns the pairs for further checks.
async fn tls_pairs(
    pairs: &[(&Impl, &Impl)],
    tag: &str,
    (hub_tls, hub_extra): (&str, &str),
    (remote_tls, remote_extra): (&str, &str),
    before_leaf: impl Fn(&Impl, u16) -> Option<tokio::task::JoinHandle<()>>,
) -> Vec<(ConfNode, ConfNode)> {
    let certs = dev_certs();
    let p = |f: &str| certs.path().join(f).display().to_string();
    let server_tls = format!(
        "{hub_extra}\ntls {{ cert_file: \"{}\", key_file: \"{}\"{hub_tls} }}",
        p("server.pem"),
        p("server-key.pem")
    );
    let remote = |port: u16| {
        format!(
            "remotes [ {{ url: \"tls://127.0.0.1:{port}\"{remote_extra}, tls {{ ca_file: \"{}\"{remote_tls} }} }} ]",
            p("ca.pem")
        )
    };
    let mut out = Vec::new();
    for (hub_imp, leaf_imp) in pairs {
        let hub = ConfNode::start(hub_imp, &format!("{tag}-hub"), true, Some(&server_tls)).await;
        if let Some(check) = before_leaf(hub_imp, hub.leaf_port.unwrap()) {
            check.await.unwrap();
        }
        let leaf = ConfNode::start(
            leaf_imp,
            &format!("{tag}-leaf"),
            false,
            Some(&remote(hub.leaf_port.unwrap())),
        )
        .await;
        one_each_way(&hub, &leaf).await;
        out.push((hub, leaf));
    }
    out
}

/// TLS on the leaf link, both roles, against Go 2.15: the hub sends INFO
/// in the clear, then both sides switch to TLS (as nats-server does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_tls_both_roles() {
    let go = Impl::Go(go_nats_server_2_15());
    let pairs = [(&go, &Impl::Liftbridge), (&Impl::Liftbridge, &go)];
    tls_pairs(&pairs, "tls", ("", ""), ("", ""), |_, _| None).await;
}

/// TLS and S2 compression together, both roles, against Go 2.15: TLS
/// first, then the compression INFOs inside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_tls_with_compression_both_roles() {
    let go = Impl::Go(go_nats_server_2_15());
    let pairs = [(&go, &Impl::Liftbridge), (&Impl::Liftbridge, &go)];
    let hub = ("", "compression: s2_fast");
    let remote = ("", ", compression: s2_best");
    for (hub, leaf) in tls_pairs(&pairs, "tlsz", hub, remote, |_, _| None).await {
        for (n, want) in [(&hub, "s2_fast"), (&leaf, "s2_best")] {
            let z = n.leafz().await;
            assert_eq!(z["leafs"][0]["compression"], want, "{z}");
        }
    }
}

/// `handshake_first` on the leaf link, both roles, against Go 2.15: the
/// TLS handshake comes before the hub's INFO. A plain TCP connection to
/// such a hub gets no INFO in the clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_tls_first_both_roles() {
    let go = Impl::Go(go_nats_server_2_15());
    let pairs = [
        (&go, &Impl::Liftbridge),
        (&Impl::Liftbridge, &go),
        (&Impl::Liftbridge, &Impl::Liftbridge),
    ];
    let first = (", handshake_first: true", "");
    let silent_hub = |imp: &Impl, port: u16| {
        matches!(imp, Impl::Liftbridge).then(|| {
            tokio::spawn(async move {
                // Nothing in the clear: the hub waits for a TLS ClientHello.
                let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .unwrap();
                let mut buf = [0u8; 64];
                let got = tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await;
                assert!(got.is_err(), "the hub spoke before TLS: {got:?}");
            })
        })
    };
    tls_pairs(&pairs, "tls1", first, first, silent_hub).await;
}

/// A leafnode `handshake_first` is a boolean: a fallback delay (which only
/// the client listener has) is refused, naming the field.
#[test]
fn nats_leaf_tls_first_takes_no_delay() {
    let err = crate::support::nats_config_refused(
        "leafnodes { port: -1, tls { cert_file: a.pem, key_file: b.pem, handshake_first: 300ms } }\n",
    );
    assert!(
        err.contains("handshake_first") && err.contains("true or false"),
        "{err}"
    );
}

/// Sends `line` to a fresh connection on the leaf port (after its INFO)
/// and returns the next line the server sends.
async fn answer_to(port: u16, line: &[u8]) -> String {
    let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut r = BufReader::new(s);
    let mut info = String::new();
    tokio::time::timeout(WAIT, r.read_line(&mut info))
        .await
        .expect("INFO in time")
        .unwrap();
    assert!(info.starts_with("INFO {"), "{info}");
    let v: serde_json::Value = serde_json::from_str(info[5..].trim()).expect("INFO JSON");
    assert!(v["leafnode_urls"].is_array(), "{v}");
    assert!(v["client_id"].as_u64().is_some_and(|c| c > 0), "{v}");
    r.get_mut().write_all(line).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(WAIT, r.read_line(&mut out))
        .await
        .expect("answer in time")
        .unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_garbage_on_the_leaf_port() {
    let go = Impl::Go(go_nats_server_2_15());
    let (hub, leaf) = pair(&Impl::Liftbridge, &go, "bad").await;
    let ch = connect(&hub.url()).await;
    let cl = connect(&leaf.url()).await;
    let mut on_leaf = sub_seen(&cl, "ok.down", &hub).await;
    let port = hub.leaf_port.unwrap();
    assert_eq!(
        answer_to(port, b"HELLO there\r\n").await,
        "-ERR 'Unknown Protocol Operation'\r\n"
    );
    assert_eq!(
        answer_to(port, b"CONNECT {\"lang\":\"rust\",\"verbose\":false}\r\n").await,
        "-ERR 'attempted to connect to leaf node port'\r\n"
    );
    assert_eq!(
        answer_to(port, b"LS+ foo\r\n").await,
        "-ERR 'Authorization Violation'\r\n"
    );
    let bad_json = answer_to(port, b"CONNECT {not json\r\n").await;
    assert!(bad_json.starts_with("-ERR 'Invalid CONNECT"), "{bad_json}");
    // The established leaf is unaffected.
    ch.publish("ok.down", "still".into()).await.unwrap();
    ch.flush().await.unwrap();
    assert_eq!(next(&mut on_leaf).await.payload, Bytes::from("still"));
    hub.wait_leafs(1).await;
}

/// Our leaf pointed at a client port (not a leaf port) says so and keeps
/// retrying; nothing else is disturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_remote_on_a_client_port_is_reported() {
    let go = Impl::Go(go_nats_server_2_15());
    let hub = ConfNode::start(&go, "hub-wrong", true, None).await;
    let leaf = ConfNode::start(
        &Impl::Liftbridge,
        "leaf-wrong",
        false,
        Some(&format!(
            "remotes [ {{ url: \"nats-leaf://127.0.0.1:{}\" }} ]",
            hub.client_port
        )),
    )
    .await;
    wait_until(START_TIMEOUT, "wrong port reported", || async {
        leaf.proc.log_text().contains("wrong port")
    })
    .await;
    assert_eq!(leaf.leafz().await["leafnodes"].as_u64(), Some(0));
}

/// Credentials: a hub with `authorization` refuses a leaf without them
/// and accepts one with them in its URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_hub_authorization() {
    let hub = ConfNode::start(
        &Impl::Liftbridge,
        "hub-auth",
        true,
        Some("authorization { user: edge, password: s3cret }"),
    )
    .await;
    let port = hub.leaf_port.unwrap();
    let go = Impl::Go(go_nats_server_2_15());
    let bad = ConfNode::start(
        &go,
        "leaf-noauth",
        false,
        Some(&format!(
            "remotes [ {{ url: \"nats-leaf://edge:wrong@127.0.0.1:{port}\" }} ]"
        )),
    )
    .await;
    wait_until(START_TIMEOUT, "bad credentials refused", || async {
        bad.proc.log_text().contains("Authorization Violation")
    })
    .await;
    assert_eq!(hub.leafz().await["leafnodes"].as_u64(), Some(0));
    let good = ConfNode::start(
        &go,
        "leaf-auth",
        false,
        Some(&format!(
            "remotes [ {{ url: \"nats-leaf://edge:s3cret@127.0.0.1:{port}\" }} ]"
        )),
    )
    .await;
    good.wait_leafs(1).await;
    hub.wait_leafs(1).await;
}

/// The edge story: a full liftbridge node whose embedded NATS is a leaf
/// of a Go hub records its local subject in a stream while the messages
/// also reach a subscriber on the hub; the hub is killed and restarted;
/// every published message is in the stream, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_edge_node_records_through_hub_outage() {
    use liftbridge::api::proto::{self, api_client::ApiClient};
    let mut hub = ConfNode::start(&Impl::Go(go_nats_server_2_15()), "edge-hub", true, None).await;
    let extra = format!(
        "  leafnodes:\n    remotes:\n      - {}\n    reconnect: 200ms\n",
        hub.leaf_url()
    );
    let node = LiftbridgeNode::start("edge-node", &[], &extra).await;
    hub.wait_leafs(1).await;
    wait_until(WAIT, "the leaf connection in /metrics", || async {
        crate::cluster_routes::metrics_text(node.http_port)
            .await
            .lines()
            .any(|l| l == "liftbridge_nats_leafnodes 1")
    })
    .await;
    let ch = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{}", node.grpc_port))
        .unwrap()
        .connect()
        .await
        .expect("connect gRPC");
    let mut api = ApiClient::new(ch);
    let create = || proto::CreateStreamRequest {
        subject: "edge.data".into(),
        name: "edge".into(),
        replication_factor: 1,
        partitions: 1,
        ..Default::default()
    };
    wait_until(START_TIMEOUT, "stream created", || {
        let mut api = api.clone();
        async move { api.create_stream(create()).await.is_ok() }
    })
    .await;
    let leafz = || async {
        http_json(node.http_port, "/leafz?subs=1")
            .await
            .unwrap_or_default()
    };
    // A subscriber on the hub.
    let hub_client = connect(&hub.url()).await;
    let mut on_hub = hub_client.subscribe("edge.data").await.unwrap();
    hub_client.flush().await.unwrap();
    wait_until(WAIT, "hub interest on the edge node", || async {
        leafz().await.to_string().contains("edge.data")
    })
    .await;

    let local = connect(&node.url()).await;
    let publish = |from: usize, to: usize| {
        let local = local.clone();
        async move {
            for i in from..to {
                local
                    .publish("edge.data", format!("m{i}").into())
                    .await
                    .unwrap();
            }
            local.flush().await.unwrap();
        }
    };
    publish(0, 100).await;
    for i in 0..100 {
        assert_eq!(
            next(&mut on_hub).await.payload,
            Bytes::from(format!("m{i}"))
        );
    }

    // The hub goes away; the edge keeps recording.
    hub.proc.kill9();
    wait_until(WAIT, "link down on the edge node", || async {
        leafz().await["leafnodes"].as_u64() == Some(0)
    })
    .await;
    publish(100, 200).await;

    // The hub returns: the edge reconnects and re-sends its interest.
    hub.crash_and_restart().await;
    hub.wait_leafs(1).await;
    let hub_client = connect(&hub.url()).await;
    let mut on_hub = hub_client.subscribe("edge.data").await.unwrap();
    hub_client.flush().await.unwrap();
    wait_until(WAIT, "hub interest back on the edge node", || async {
        leafz().await.to_string().contains("edge.data")
    })
    .await;
    publish(200, 300).await;
    for i in 200..300 {
        let Ok(Some(m)) = tokio::time::timeout(WAIT, on_hub.next()).await else {
            panic!(
                "m{i} did not reach the hub; edge /leafz {}; hub /leafz {}",
                leafz().await,
                http_json(hub.http_port, "/leafz?subs=1")
                    .await
                    .unwrap_or_default()
            );
        };
        assert_eq!(m.payload, Bytes::from(format!("m{i}")));
    }

    // Nothing recorded locally was lost: all 300, in order.
    let mut s = api
        .subscribe(proto::SubscribeRequest {
            stream: "edge".into(),
            partition: 0,
            start_position: proto::StartPosition::Earliest as i32,
            ..Default::default()
        })
        .await
        .expect("subscribe")
        .into_inner();
    let mut values = Vec::new();
    while values.len() < 301 {
        let m = tokio::time::timeout(WAIT, s.next())
            .await
            .expect("stream message in time")
            .expect("stream open")
            .expect("message ok");
        values.push(m);
    }
    // The first message is the subscription handshake (empty).
    assert_eq!(values[0], proto::Message::default());
    for (i, m) in values[1..].iter().enumerate() {
        assert_eq!(m.offset, i as i64, "offsets are dense");
        assert_eq!(
            &m.value[..],
            format!("m{i}").as_bytes(),
            "message {i} in order"
        );
    }
}
