//! Accounts a node does not store, looked up from its route peers
//! (operator mode).
//!
//! Two nodes, one with a full resolver that stores account A, one with a
//! cache resolver that stores only the system account, against our server
//! and Go nats-server 2.15.1 with the same configs and test body: a user of
//! A connects to the cache node at the first attempt (the node asks its
//! peer), its messages cross the route, the cache node keeps A's JWT in its
//! directory and takes later pushes of A; an account no node stores is
//! refused.
//!
//! Between our nodes, at the protocol level (a raw route peer): a full
//! resolver with `interval: 1s` sends its peers the digest of its accounts
//! every second; a peer's digest that differs is answered with the stored
//! JWTs and a matching one is not; lookups are answered with the JWT or an
//! empty message; and a client of an account the node does not store is
//! admitted once the peer answers the node's lookup, refused when it
//! answers empty.

use std::path::Path;
use std::time::Duration;

use liftbridge::nats::jwt;

use crate::nats_jwt_push::{connect, connect_once, push, Setup};
use crate::support::procs::{go_nats_server_2_15, Impl, NatsNode};
use crate::support::rawroute::{route_connect, route_info, RawPeer, Routed};
use crate::support::sync;
use crate::support::{drain, until_flowing};

const WAIT: Duration = Duration::from_secs(20);

/// The `iat` of the account JWT stored as `<dir>/<key>.jwt`, if any.
fn stored_iat(dir: &Path, acc: &nkeys::KeyPair) -> Option<i64> {
    let text = std::fs::read_to_string(dir.join(format!("{}.jwt", acc.public_key()))).ok()?;
    Some(jwt::decode_account(text.trim()).ok()?.iat)
}

fn assert_refused(r: Result<async_nats::Client, String>, what: &str) {
    match r {
        Ok(_) => panic!("{what}: admitted"),
        Err(e) => assert!(e.to_lowercase().contains("authorization"), "{what}: {e}"),
    }
}

/// The cache-node body (see the module doc).
async fn cache_node(imp: Impl) {
    let setup = Setup::new();
    let full = setup.conf_full("full", "", "").display().to_string();
    let cache = setup.conf_cache("cache").display().to_string();
    let n1 = NatsNode::start_with(&imp, "lookup", &[], &["-c", &full]).await;
    let n2 = NatsNode::start_with(&imp, "lookup", &[n1.cluster_port], &["-c", &cache]).await;
    n1.wait_routes(1).await;
    n2.wait_routes(1).await;
    let cache_dir = setup.dir.path().join("jwt-cache");
    assert_eq!(
        stored_iat(&cache_dir, &setup.a),
        None,
        "{imp:?}: A stored up front"
    );

    let a_creds = setup.creds("a", &setup.a);
    let a2 = connect_once(&n2.url(), &a_creds)
        .await
        .unwrap_or_else(|e| panic!("{imp:?}: A's user on the cache node: {e}"));
    let a1 = connect(&n1.url(), &a_creds).await.unwrap();
    let mut on1 = a1.subscribe("x.>").await.unwrap();
    sync(&a1).await;
    until_flowing(&a2, &mut on1, "x.1", "A from the cache node to node 1").await;
    drain(&mut on1).await;
    assert_eq!(
        stored_iat(&cache_dir, &setup.a),
        Some(1),
        "{imp:?}: the cache node keeps what it fetched"
    );

    let z = nkeys::KeyPair::new_account();
    assert_refused(
        connect_once(&n2.url(), &setup.creds("z", &z)).await,
        &format!("{imp:?}: an account no node stores"),
    );

    // A newer A pushed to node 1 reaches the cache node, which stores A now.
    let sys = connect(&n1.url(), &setup.creds("sys", &setup.sys))
        .await
        .unwrap();
    let now = jwt::unix_now();
    let reply = push(&sys, &setup.jwt(&setup.a, now - 10, |_| {})).await;
    // Go's cache node may answer first ("jwt updated cache").
    assert_eq!(reply["data"]["code"], 200, "{imp:?}: {reply}");
    let deadline = tokio::time::Instant::now() + WAIT;
    while stored_iat(&cache_dir, &setup.a) != Some(now - 10) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{imp:?}: the cache node did not store the newer A ({:?})",
            stored_iat(&cache_dir, &setup.a)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_lookup_cache_node_fetches_ours() {
    cache_node(Impl::Liftbridge).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_lookup_cache_node_fetches_go_2_15() {
    cache_node(Impl::Go(go_nats_server_2_15())).await;
}

/// The digest a full resolver sends: the XOR of each stored JWT's SHA-256,
/// in hex.
fn digest_of<'a>(jwts: impl IntoIterator<Item = &'a str>) -> String {
    let mut acc = [0u8; 32];
    for j in jwts {
        let d = ring::digest::digest(&ring::digest::SHA256, j.as_bytes());
        for (x, y) in acc.iter_mut().zip(d.as_ref()) {
            *x ^= y;
        }
    }
    acc.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads routed messages until one on `subject` (others are kept in
/// `seen`); fails after `WAIT`.
async fn until_subject(peer: &mut RawPeer, subject: &str, seen: &mut Vec<Routed>) -> Routed {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let m = peer
            .next_rmsg(left)
            .await
            .unwrap_or_else(|| panic!("no {subject} routed; saw {seen:?}"));
        if m.subject == subject {
            return m;
        }
        seen.push(m);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_digest_and_lookups_over_a_route_ours() {
    let setup = Setup::new();
    let conf = setup
        .conf_full("d1", "", ", interval: \"1s\", timeout: \"10s\"")
        .display()
        .to_string();
    let node = NatsNode::start_with(&Impl::Liftbridge, "digest", &[], &["-c", &conf]).await;
    let sys = setup.sys.public_key();
    let (mut peer, _) = RawPeer::connect(node.cluster_port).await;
    peer.send(&route_connect("NRAWPEER", "digest")).await;
    peer.send(&route_info("NRAWPEER", "digest")).await;

    // The stored JWTs come first (catch-up), then a digest every second
    // that matches them.
    let mut seen = Vec::new();
    let digest = until_subject(&mut peer, "$SYS.REQ.CLAIMS.DIGEST", &mut seen).await;
    let stored: Vec<String> = seen
        .iter()
        .filter(|m| m.subject == "$SYS.REQ.CLAIMS.SYNC")
        .map(|m| String::from_utf8(m.payload.clone()).unwrap())
        .collect();
    assert_eq!(stored.len(), 2, "system account and A: {seen:?}");
    assert_eq!(digest.account, sys);
    assert_eq!(
        String::from_utf8(digest.payload.clone()).unwrap(),
        digest_of(stored.iter().map(String::as_str))
    );

    // A digest that differs is answered with the stored JWTs ...
    peer.send_rmsg(&sys, "$SYS.REQ.CLAIMS.DIGEST", None, &[b'0'; 64])
        .await;
    let mut seen = Vec::new();
    let sync_msg = until_subject(&mut peer, "$SYS.REQ.CLAIMS.SYNC", &mut seen).await;
    assert!(stored.contains(&String::from_utf8(sync_msg.payload).unwrap()));
    // ... a matching one is not: the next routed message is the next
    // digest.
    let mut seen = Vec::new();
    until_subject(&mut peer, "$SYS.REQ.CLAIMS.DIGEST", &mut seen).await;
    peer.send_rmsg(&sys, "$SYS.REQ.CLAIMS.DIGEST", None, &digest.payload)
        .await;
    let mut seen = Vec::new();
    until_subject(&mut peer, "$SYS.REQ.CLAIMS.DIGEST", &mut seen).await;
    assert!(
        seen.iter().all(|m| m.subject != "$SYS.REQ.CLAIMS.SYNC"),
        "a matching digest was answered: {seen:?}"
    );

    // Lookups from the peer: the JWT, or an empty message.
    let a_key = setup.a.public_key();
    let subject = format!("$SYS.REQ.ACCOUNT.{a_key}.CLAIMS.LOOKUP");
    peer.send_rmsg(&sys, &subject, Some("_R_.1"), b"").await;
    let got = until_subject(&mut peer, "_R_.1", &mut Vec::new()).await;
    let token = String::from_utf8(got.payload).unwrap();
    assert_eq!(jwt::decode_account(&token).unwrap().sub, a_key);
    let z = nkeys::KeyPair::new_account();
    let subject = format!("$SYS.REQ.ACCOUNT.{}.CLAIMS.LOOKUP", z.public_key());
    peer.send_rmsg(&sys, &subject, Some("_R_.2"), b"").await;
    let got = until_subject(&mut peer, "_R_.2", &mut Vec::new()).await;
    assert!(got.payload.is_empty(), "{got:?}");

    // A client of N, which the node does not store: the node asks the
    // peer, which answers with N's JWT; the client is admitted.
    let n_creds = setup.creds("n", &setup.n);
    let n_jwt = setup.jwt(&setup.n, jwt::unix_now() - 5, |_| {});
    let url = node.url();
    let client = tokio::spawn(async move { connect_once(&url, &n_creds).await });
    let lookup = format!("$SYS.REQ.ACCOUNT.{}.CLAIMS.LOOKUP", setup.n.public_key());
    let asked = until_subject(&mut peer, &lookup, &mut Vec::new()).await;
    let reply = asked.reply.expect("lookup with a reply subject");
    peer.send_rmsg(&sys, &reply, None, n_jwt.as_bytes()).await;
    let n = client
        .await
        .unwrap()
        .expect("N's user admitted after the lookup");
    n.flush().await.unwrap();

    // M: the peer does not store it either; refused.
    let m_creds = setup.creds("m", &setup.m);
    let url = node.url();
    let client = tokio::spawn(async move { connect_once(&url, &m_creds).await });
    let lookup = format!("$SYS.REQ.ACCOUNT.{}.CLAIMS.LOOKUP", setup.m.public_key());
    let asked = until_subject(&mut peer, &lookup, &mut Vec::new()).await;
    peer.send_rmsg(&sys, &asked.reply.unwrap(), None, b"").await;
    assert_refused(client.await.unwrap(), "M, stored nowhere");
}
