//! Contract: a leaf reaches its hub through the hub's WebSocket listener,
//! as with nats-server: a remote whose URLs are `ws://` or `wss://` sends
//! an HTTP upgrade for `<path>/leafnode`, masks its frames unless the hub
//! agreed to `Nats-No-Masking`, deflates them when `ws_compression` was
//! agreed, and then speaks the leaf protocol inside the frames; a hub's
//! WebSocket listener runs such a connection as a leaf (only when it has a
//! leaf listener too), with the leaf authorization. Both roles against Go
//! nats-server 2.15.1 and against ourselves, plain and over TLS; messages
//! cross both ways.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::support::procs::{go_nats_server_2_15, ConfNode, Impl};
use crate::support::{free_port, wait_until};

const WAIT: Duration = Duration::from_secs(20);

async fn connect(url: &str) -> async_nats::Client {
    async_nats::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// A hub named `name` with a leaf listener and the WebSocket listener
/// `websocket { listen … <ws> }`; returns it and the WebSocket port.
async fn ws_hub(imp: &Impl, name: &str, ws: &str, hub_leaf: Option<&str>) -> (ConfNode, u16) {
    let port = free_port();
    let top = format!("websocket {{ listen: \"127.0.0.1:{port}\"\n{ws} }}");
    let mut hub = ConfNode::start_with(imp, name, true, hub_leaf, &top).await;
    hub.proc
        .try_wait_port(port)
        .await
        .unwrap_or_else(|e| panic!("websocket listener of {name}: {e}"));
    (hub, port)
}

/// `sub` on one side gets what is published on `subject` at `from` once
/// `watch` carries the subscriber side's interest.
async fn crosses(
    watch: &ConfNode,
    from: &ConfNode,
    sub: &mut async_nats::Subscriber,
    subject: &str,
) {
    watch.wait_leaf_interest(subject).await;
    let c = connect(&from.url()).await;
    c.publish(subject.to_string(), subject.to_string().into())
        .await
        .unwrap();
    c.flush().await.unwrap();
    let m = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap_or_else(|_| panic!("{subject} crossed in time"))
        .expect("subscription open");
    assert_eq!(m.payload, Bytes::from(subject.to_string()));
}

/// Messages cross a formed leaf connection both ways, small and large
/// (a 200 KiB payload spans many frames and, compressed, is deflated).
async fn both_ways(hub: &ConfNode, leaf: &ConfNode, tag: &str) {
    hub.wait_leafs(1).await;
    leaf.wait_leafs(1).await;
    let down = format!("{tag}.down");
    let up = format!("{tag}.up");
    let lc = connect(&leaf.url()).await;
    let mut at_leaf = lc.subscribe(down.clone()).await.unwrap();
    lc.flush().await.unwrap();
    crosses(hub, hub, &mut at_leaf, &down).await;
    let hc = connect(&hub.url()).await;
    let mut at_hub = hc.subscribe(up.clone()).await.unwrap();
    hc.flush().await.unwrap();
    crosses(leaf, leaf, &mut at_hub, &up).await;
    // A large message, compressible and not.
    let big: Vec<u8> = (0..200 * 1024u32).map(|i| (i % 7) as u8).collect();
    let noise: Vec<u8> = (0..200 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for body in [big, noise] {
        lc.publish(up.clone(), body.clone().into()).await.unwrap();
        lc.flush().await.unwrap();
        let m = tokio::time::timeout(WAIT, at_hub.next())
            .await
            .expect("large message in time")
            .expect("subscription open");
        assert_eq!(m.payload.len(), body.len());
        assert!(m.payload == body, "{tag}: large payload intact");
    }
}

fn remote(port: u16, extra: &str) -> String {
    format!("reconnect: 200ms\nremotes [ {{ url: \"ws://127.0.0.1:{port}\"{extra} }} ]")
}

/// Our edge under a Go 2.15.1 hub's WebSocket listener: masked frames,
/// then unmasked and deflated ones (both agreed by the hub).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_ws_ours_under_a_go_hub() {
    let go = Impl::Go(go_nats_server_2_15());
    for (i, extra) in ["", ", ws_compression: true, ws_no_masking: true"]
        .into_iter()
        .enumerate()
    {
        let (hub, port) = ws_hub(&go, "gows", "no_tls: true\ncompression: true", None).await;
        let leaf =
            ConfNode::start(&Impl::Liftbridge, "edge", false, Some(&remote(port, extra))).await;
        both_ways(&hub, &leaf, &format!("gohub{i}")).await;
    }
}

/// A Go 2.15.1 leaf under our hub's WebSocket listener, masked and
/// unmasked, with and without compression.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_ws_go_under_our_hub() {
    let go = Impl::Go(go_nats_server_2_15());
    for (i, extra) in ["", ", ws_compression: true, ws_no_masking: true"]
        .into_iter()
        .enumerate()
    {
        let (hub, port) = ws_hub(
            &Impl::Liftbridge,
            "lbws",
            "no_tls: true\ncompression: true",
            None,
        )
        .await;
        let leaf = ConfNode::start(&go, "goedge", false, Some(&remote(port, extra))).await;
        both_ways(&hub, &leaf, &format!("ourhub{i}")).await;
        let leafz = hub.leafz().await;
        assert_eq!(leafz["leafs"][0]["name"], "goedge", "{leafz}");
    }
}

/// Ours on both ends: the leaf authorization of the hub applies (the
/// credentials in the URL), a wrong password is refused, and a hub whose
/// WebSocket listener has no leaf listener beside it refuses leaves while
/// its WebSocket clients keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_ws_ours_both_ends_with_leaf_auth() {
    let auth = "authorization { user: edge, password: s3cret }";
    let (hub, port) = ws_hub(&Impl::Liftbridge, "lbauth", "no_tls: true", Some(auth)).await;
    let good = format!(
        "reconnect: 200ms\nremotes [ {{ url: \"ws://edge:s3cret@127.0.0.1:{port}/some/path\", ws_no_masking: true }} ]"
    );
    let leaf = ConfNode::start(&Impl::Liftbridge, "edge", false, Some(&good)).await;
    both_ways(&hub, &leaf, "authws").await;
    let bad =
        format!("reconnect: 200ms\nremotes [ {{ url: \"ws://edge:wrong@127.0.0.1:{port}\" }} ]");
    let refused = ConfNode::start(&Impl::Liftbridge, "intruder", false, Some(&bad)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(hub.leafz().await["leafnodes"], 1, "{}", hub.leafz().await);
    assert_eq!(refused.leafz().await["leafnodes"], 0);

    // WebSocket, but no leaf listener.
    let ws_port = free_port();
    let top = format!("websocket {{ listen: \"127.0.0.1:{ws_port}\", no_tls: true }}");
    let mut plain = ConfNode::start_with(&Impl::Liftbridge, "noleafs", false, None, &top).await;
    plain.proc.try_wait_port(ws_port).await.unwrap();
    let lonely = ConfNode::start(
        &Impl::Liftbridge,
        "lonely",
        false,
        Some(&remote(ws_port, "")),
    )
    .await;
    wait_until(WAIT, "the hub refused the leaf", || async {
        plain
            .proc
            .log_text()
            .contains("Not configured to accept leaf node connections")
    })
    .await;
    assert_eq!(lonely.leafz().await["leafnodes"], 0);
    let c = connect(&plain.url()).await;
    let mut s = c.subscribe("still.fine").await.unwrap();
    c.publish("still.fine", "ok".into()).await.unwrap();
    c.flush().await.unwrap();
    let m = tokio::time::timeout(WAIT, s.next()).await.unwrap().unwrap();
    assert_eq!(m.payload, Bytes::from("ok"));
}

/// `wss://`: TLS before the upgrade, verified against the remote's CA;
/// ours under ours and a Go leaf under ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_wss_both_implementations() {
    let dir = tempfile::tempdir().unwrap();
    let certs = liftbridge::tls::generate_dev_certs(dir.path(), &[]).unwrap();
    let ws_tls = format!(
        "tls {{ cert_file: \"{}\", key_file: \"{}\" }}",
        certs.server_cert.display(),
        certs.server_key.display()
    );
    let (hub, port) = ws_hub(&Impl::Liftbridge, "lbwss", &ws_tls, None).await;
    let remote = format!(
        "reconnect: 200ms\nremotes [ {{ url: \"wss://localhost:{port}\", tls {{ ca_file: \"{}\" }} }} ]",
        certs.ca_cert.display()
    );
    let ours = ConfNode::start(&Impl::Liftbridge, "wssedge", false, Some(&remote)).await;
    both_ways(&hub, &ours, "wssours").await;
    let go = ConfNode::start(
        &Impl::Go(go_nats_server_2_15()),
        "wssgo",
        false,
        Some(&remote),
    )
    .await;
    hub.wait_leafs(2).await;
    go.wait_leafs(1).await;
    let gc = connect(&go.url()).await;
    let mut at_go = gc.subscribe("wssgo.down").await.unwrap();
    gc.flush().await.unwrap();
    crosses(&hub, &hub, &mut at_go, "wssgo.down").await;
}

/// A minimal HTTP `CONNECT` proxy on 127.0.0.1: requires `Basic
/// <base64(user:pass)>`, answers 407 otherwise, and counts the tunnels it
/// opened. Returns its port and the counter.
async fn connect_proxy(
    user: &'static str,
    pass: &'static str,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use base64::Engine;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let tunnels = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = tunnels.clone();
    let want = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
    );
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            let (want, count) = (want.clone(), count.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if c.read(&mut b).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let target = text
                    .strip_prefix("CONNECT ")
                    .and_then(|t| t.split(' ').next())
                    .unwrap_or("")
                    .to_string();
                let authorized = text
                    .lines()
                    .any(|l| l.strip_prefix("Proxy-Authorization: ") == Some(want.as_str()));
                if !authorized {
                    let _ = c
                        .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
                        .await;
                    return;
                }
                let Ok(mut up) = tokio::net::TcpStream::connect(&target).await else {
                    let _ = c.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    return;
                };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = c
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                let _ = tokio::io::copy_bidirectional(&mut c, &mut up).await;
            });
        }
    });
    (port, tunnels)
}

/// Leaves behind an HTTP proxy: a remote's `proxy { url, username,
/// password }` tunnels its `ws://` connection with `CONNECT`. Ours and a
/// Go 2.15.1 leaf reach our hub and a Go hub through the same proxy; with
/// a wrong password the proxy's 407 keeps the leaf out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_ws_through_an_http_proxy() {
    let (proxy, tunnels) = connect_proxy("edge", "pw").await;
    let go = Impl::Go(go_nats_server_2_15());
    let via = |port: u16, pass: &str| {
        format!(
            "reconnect: 200ms\nremotes [ {{ url: \"ws://127.0.0.1:{port}\", proxy {{ url: \"http://127.0.0.1:{proxy}\", username: edge, password: {pass}, timeout: 2s }} }} ]"
        )
    };
    let mut opened = 0;
    for (hub_imp, leaf_imp, tag) in [
        (&Impl::Liftbridge, &Impl::Liftbridge, "ours-ours"),
        (&go, &Impl::Liftbridge, "go-ours"),
        (&Impl::Liftbridge, &go, "ours-go"),
    ] {
        let (hub, port) = ws_hub(hub_imp, "proxied-hub", "no_tls: true", None).await;
        let leaf = ConfNode::start(leaf_imp, "proxied-edge", false, Some(&via(port, "pw"))).await;
        both_ways(&hub, &leaf, &tag.replace('-', "")).await;
        let now = tunnels.load(std::sync::atomic::Ordering::SeqCst);
        assert!(now > opened, "{tag}: the leaf went through the proxy");
        opened = now;
    }
    let (hub, port) = ws_hub(&Impl::Liftbridge, "guarded", "no_tls: true", None).await;
    let leaf = ConfNode::start(
        &Impl::Liftbridge,
        "no-pass",
        false,
        Some(&via(port, "wrong")),
    )
    .await;
    wait_until(WAIT, "the proxy refusal logged", || async {
        leaf.proc.log_text().contains("proxy CONNECT failed: 407")
    })
    .await;
    assert_eq!(hub.leafz().await["leafnodes"], 0);
    assert_eq!(leaf.leafz().await["leafnodes"], 0);
}
