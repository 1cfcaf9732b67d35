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
//! A cache node drops what it fetched: with `ttl`, an account unused that
//! long leaves its directory and a user of it is admitted again (both
//! servers); ours keeps an account a connection uses, and at `limit`
//! evicts the least recently used account no connection uses.
//!
//! Mixed with Go 2.15.1 (one node of each): a Go cache node looks accounts
//! up on our full node and ours on a Go full node; two full nodes exchange
//! packs (each ends up with the other's accounts) and a push to the Go
//! node reaches ours.
//!
//! At the protocol level (a raw route peer): a full resolver announces
//! its system-account interest, sends a new peer its JWTs and a pack
//! request with their digest, then one every second (`interval: 1s`);
//! the peer's pack answer is merged; a peer's pack request whose digest
//! differs is answered with every stored account and a matching one with
//! the end marker only; lookups are answered with the JWT or, to our kind
//! of server only, an empty message; and a client of an account the node
//! does not store is admitted once the peer answers the node's lookup,
//! refused when it answers empty.

use std::path::Path;
use std::time::Duration;

use liftbridge::nats::jwt;

use crate::nats_jwt_push::{connect, connect_once, push, Setup};
use crate::support::procs::{go_nats_server_2_15, ConfNode, Impl, NatsNode};
use crate::support::rawroute::{route_connect, route_info, RawPeer, Routed};
use crate::support::sync;
use crate::support::{drain, http_json, until_flowing, wait_until};

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
    let cache = setup.conf_cache("cache", "").display().to_string();
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

/// The digest a full resolver sends: the XOR of each stored JWT's SHA-256.
fn digest_of<'a>(jwts: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut acc = [0u8; 32];
    for j in jwts {
        let d = ring::digest::digest(&ring::digest::SHA256, j.as_bytes());
        for (x, y) in acc.iter_mut().zip(d.as_ref()) {
            *x ^= y;
        }
    }
    acc.to_vec()
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
async fn nats_jwt_packs_and_lookups_over_a_route_ours() {
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

    // The stored JWTs come first (catch-up), then a pack request carrying
    // their digest.
    let mut seen = Vec::new();
    let pack = until_subject(&mut peer, "$SYS.REQ.CLAIMS.PACK", &mut seen).await;
    let mut stored: Vec<String> = seen
        .iter()
        .filter(|m| m.subject == "$SYS.REQ.CLAIMS.SYNC")
        .map(|m| String::from_utf8(m.payload.clone()).unwrap())
        .collect();
    assert_eq!(stored.len(), 2, "system account and A: {seen:?}");
    assert_eq!(pack.account, sys);
    assert_eq!(pack.payload, digest_of(stored.iter().map(String::as_str)));
    let pack_reply = pack.reply.clone().expect("a pack request with a reply");
    // The peer answers with an account the node does not store: kept.
    let p = nkeys::KeyPair::new_account();
    let p_jwt = setup.jwt(&p, jwt::unix_now() - 5, |_| {});
    let line = format!("{}|{p_jwt}", p.public_key());
    peer.send_rmsg(&sys, &pack_reply, None, line.as_bytes())
        .await;
    peer.send_rmsg(&sys, &pack_reply, None, b"").await;
    stored.push(p_jwt.clone());

    // A pack request whose digest differs is answered with every stored
    // account as `<key>|<jwt>`, then an empty message ...
    let deadline = tokio::time::Instant::now() + WAIT;
    let answers = loop {
        peer.send_rmsg(&sys, "$SYS.REQ.CLAIMS.PACK", Some("_P_.1"), &[0; 32])
            .await;
        let mut got = Vec::new();
        loop {
            let m = until_subject(&mut peer, "_P_.1", &mut Vec::new()).await;
            if m.payload.is_empty() {
                break;
            }
            got.push(String::from_utf8(m.payload).unwrap());
        }
        if got.len() == 3 {
            break got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "P not in the node's pack: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut keys = Vec::new();
    for a in &answers {
        let (key, token) = a.split_once('|').expect("<key>|<jwt>");
        assert!(stored.iter().any(|s| s == token), "{a}");
        assert_eq!(jwt::decode_account(token).unwrap().sub, key);
        keys.push(key.to_string());
    }
    keys.sort();
    let mut want = vec![setup.a.public_key(), p.public_key(), sys.clone()];
    want.sort();
    assert_eq!(keys, want);
    // ... a matching one with the empty message only.
    let digest = digest_of(stored.iter().map(String::as_str));
    peer.send_rmsg(&sys, "$SYS.REQ.CLAIMS.PACK", Some("_P_.2"), &digest)
        .await;
    let m = until_subject(&mut peer, "_P_.2", &mut Vec::new()).await;
    assert!(
        m.payload.is_empty(),
        "a matching digest was answered: {m:?}"
    );
    // Every second, a pack request with the digest of what is stored.
    let again = until_subject(&mut peer, "$SYS.REQ.CLAIMS.PACK", &mut Vec::new()).await;
    assert_eq!(again.payload, digest);

    // The interest (announced after the catch-up) the peer needs to send requests and answers here.
    for s in [
        "$SYS.REQ.CLAIMS.PACK",
        "$SYS.REQ.CLAIMS.UPDATE",
        "$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE",
        "$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP",
        &pack_reply,
    ] {
        let line = format!("RS+ {sys} {s}");
        assert!(
            peer.interest.contains(&line),
            "no {line:?} in {:?}",
            peer.interest
        );
    }

    // Lookups from the peer: the JWT; for an account not stored, an empty
    // message to our kind of server (reply `$SYS._LOOKUP.…`) and nothing
    // to others (nats-server would take it for "not found").
    let a_key = setup.a.public_key();
    let subject = format!("$SYS.REQ.ACCOUNT.{a_key}.CLAIMS.LOOKUP");
    peer.send_rmsg(&sys, &subject, Some("_R_.1"), b"").await;
    let got = until_subject(&mut peer, "_R_.1", &mut Vec::new()).await;
    let token = String::from_utf8(got.payload).unwrap();
    assert_eq!(jwt::decode_account(&token).unwrap().sub, a_key);
    let z = nkeys::KeyPair::new_account();
    let z_subject = format!("$SYS.REQ.ACCOUNT.{}.CLAIMS.LOOKUP", z.public_key());
    peer.send_rmsg(&sys, &z_subject, Some("$SYS._LOOKUP.NRAWPEER.2"), b"")
        .await;
    let got = until_subject(&mut peer, "$SYS._LOOKUP.NRAWPEER.2", &mut Vec::new()).await;
    assert!(got.payload.is_empty(), "{got:?}");
    peer.send_rmsg(&sys, &z_subject, Some("_R_.3"), b"").await;
    peer.send_rmsg(&sys, &subject, Some("_R_.4"), b"").await;
    let mut seen = Vec::new();
    until_subject(&mut peer, "_R_.4", &mut seen).await;
    assert!(
        seen.iter().all(|m| m.subject != "_R_.3"),
        "answered a foreign lookup of an account not stored: {seen:?}"
    );

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

/// Whether `<dir>/<key>.jwt` exists.
fn cached(dir: &Path, acc: &nkeys::KeyPair) -> bool {
    dir.join(format!("{}.jwt", acc.public_key())).exists()
}

/// Waits until the node counts `n` client connections (`/connz`).
async fn wait_conns(node: &NatsNode, n: u64) {
    wait_until(WAIT, &format!("{n} connections"), || async {
        http_json(node.http_port, "/connz")
            .await
            .is_some_and(|v| v["num_connections"] == n)
    })
    .await;
}

/// A full node storing A, N and M, and a cache node routed to it with the
/// given resolver fields.
async fn full_and_cache(imp: &Impl, setup: &Setup, cache_fields: &str) -> (NatsNode, NatsNode) {
    let more = format!(
        "  {}: {}\n  {}: {}\n",
        setup.n.public_key(),
        setup.jwt(&setup.n, 1, |_| {}),
        setup.m.public_key(),
        setup.jwt(&setup.m, 1, |_| {}),
    );
    let full = setup.conf_full("full", &more, "").display().to_string();
    let cache = setup.conf_cache("cache", cache_fields);
    let cache = cache.display().to_string();
    let n1 = NatsNode::start_with(imp, "cache", &[], &["-c", &full]).await;
    let n2 = NatsNode::start_with(imp, "cache", &[n1.cluster_port], &["-c", &cache]).await;
    n1.wait_routes(1).await;
    n2.wait_routes(1).await;
    (n1, n2)
}

/// `ttl`: an account fetched and then unused for a second leaves the cache
/// directory; its user is admitted again afterwards. Ours keeps it while
/// its user is connected.
async fn cache_ttl(imp: Impl) {
    let setup = Setup::new();
    let (_n1, n2) = full_and_cache(&imp, &setup, ", ttl: \"1s\"").await;
    let dir = setup.dir.path().join("jwt-cache");
    let creds = setup.creds("a", &setup.a);
    let c = connect_once(&n2.url(), &creds)
        .await
        .unwrap_or_else(|e| panic!("{imp:?}: A's user: {e}"));
    c.flush().await.unwrap();
    assert!(cached(&dir, &setup.a), "{imp:?}: A fetched and kept");
    if matches!(imp, Impl::Liftbridge) {
        // Ours keeps an account while a connection uses it.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(cached(&dir, &setup.a), "A left the cache while in use");
    }
    drop(c);
    wait_conns(&n2, 0).await;
    wait_until(WAIT, "A's JWT to leave the cache", || async {
        !cached(&dir, &setup.a)
    })
    .await;
    let c = connect_once(&n2.url(), &creds)
        .await
        .unwrap_or_else(|e| panic!("{imp:?}: A's user after the ttl: {e}"));
    c.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_cache_ttl_ours() {
    cache_ttl(Impl::Liftbridge).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_cache_ttl_go_2_15() {
    cache_ttl(Impl::Go(go_nats_server_2_15())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_cache_full_evicts_the_least_recently_used_idle_account_ours() {
    let setup = Setup::new();
    let (_n1, n2) = full_and_cache(&Impl::Liftbridge, &setup, ", limit: 3").await;
    let dir = setup.dir.path().join("jwt-cache");
    let url = n2.url();
    let (a, n, m) = (
        setup.creds("a", &setup.a),
        setup.creds("n", &setup.n),
        setup.creds("m", &setup.m),
    );

    let a_user = connect_once(&url, &a).await.expect("A's user");
    a_user.flush().await.unwrap();

    // The system account, A and N fill the cache (limit 3); M's user
    // evicts N, the least recently used account nobody uses, not A.
    let n_user = connect_once(&url, &n).await.expect("N's user");
    n_user.flush().await.unwrap();
    drop(n_user);
    wait_conns(&n2, 1).await;
    let m_user = connect_once(&url, &m).await.expect("M's user");
    m_user.flush().await.unwrap();
    assert!(cached(&dir, &setup.a), "A evicted while in use");
    assert!(cached(&dir, &setup.m), "M not stored");
    assert!(!cached(&dir, &setup.n), "N not evicted");
    assert!(
        cached(&dir, &setup.sys),
        "the system account left the cache"
    );

    // A's user leaves: N's user is admitted again, and A, now the least
    // recently used idle account, makes room.
    drop(a_user);
    wait_conns(&n2, 1).await;
    let n_user = connect_once(&url, &n).await.expect("N's user again");
    n_user.flush().await.unwrap();
    assert!(!cached(&dir, &setup.a), "A not evicted");
    assert!(cached(&dir, &setup.n) && cached(&dir, &setup.m));
}

/// A cluster of one of our nodes and one Go 2.15.1 node: `ours_conf` and
/// `go_conf` are their config files; ours is the seed.
async fn mixed(ours_conf: &Path, go_conf: &Path) -> (NatsNode, NatsNode) {
    let ours = ours_conf.display().to_string();
    let go = go_conf.display().to_string();
    let n1 = NatsNode::start_with(&Impl::Liftbridge, "mixed", &[], &["-c", &ours]).await;
    let n2 = NatsNode::start_with(
        &Impl::Go(go_nats_server_2_15()),
        "mixed",
        &[n1.cluster_port],
        &["-c", &go],
    )
    .await;
    n1.wait_routes(1).await;
    n2.wait_routes(1).await;
    (n1, n2)
}

/// A user of A connects to `at` (which does not store A) at the first
/// attempt, and its messages reach a subscriber on `other`.
async fn fetched_and_flowing(setup: &Setup, at: &NatsNode, other: &NatsNode, what: &str) {
    let creds = setup.creds("a", &setup.a);
    let here = connect_once(&at.url(), &creds)
        .await
        .unwrap_or_else(|e| panic!("{what}: A's user: {e}"));
    let there = connect(&other.url(), &creds).await.unwrap();
    let mut sub = there.subscribe("x.>").await.unwrap();
    sync(&there).await;
    until_flowing(&here, &mut sub, "x.1", what).await;
}

/// One of our nodes and one Go node, one with a full resolver storing A
/// and the other a cache resolver (`ours_cache`: ours is the cache): A's
/// user is admitted on the cache node at the first attempt, its messages
/// reach the full node, and the cache node keeps A's JWT.
async fn mixed_cache_looks_up(ours_cache: bool) {
    let setup = Setup::new();
    let (full, cache) = (
        setup.conf_full("full", "", ""),
        setup.conf_cache("cache", ""),
    );
    let (ours, go) = if ours_cache {
        mixed(&cache, &full).await
    } else {
        mixed(&full, &cache).await
    };
    let (at, other, what) = if ours_cache {
        (&ours, &go, "our cache node, Go full node")
    } else {
        (&go, &ours, "Go cache node, our full node")
    };
    fetched_and_flowing(&setup, at, other, what).await;
    assert_eq!(
        stored_iat(&setup.dir.path().join("jwt-cache"), &setup.a),
        Some(1),
        "{what}: the cache node keeps what the full node answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_mixed_go_cache_node_looks_up_our_full_node() {
    mixed_cache_looks_up(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_mixed_our_cache_node_looks_up_a_go_full_node() {
    mixed_cache_looks_up(true).await;
}

/// Our full node stores N, the Go one M (both A): the pack exchange brings
/// each the other's account; a newer A pushed to the Go node reaches ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_mixed_full_nodes_exchange_packs_and_pushes() {
    let setup = Setup::new();
    let preload =
        |acc: &nkeys::KeyPair| format!("  {}: {}\n", acc.public_key(), setup.jwt(acc, 1, |_| {}));
    let fields = ", interval: \"1s\"";
    let ours_conf = setup.conf_full("ours", &preload(&setup.n), fields);
    let go_conf = setup.conf_full("go", &preload(&setup.m), fields);
    let (ours, go) = mixed(&ours_conf, &go_conf).await;
    let (ours_dir, go_dir) = (
        setup.dir.path().join("jwt-ours"),
        setup.dir.path().join("jwt-go"),
    );
    wait_until(WAIT, "our node to store M, the Go node's", || async {
        cached(&ours_dir, &setup.m)
    })
    .await;
    wait_until(WAIT, "the Go node to store N, ours", || async {
        cached(&go_dir, &setup.n)
    })
    .await;

    let sys = connect(&go.url(), &setup.creds("sys", &setup.sys))
        .await
        .unwrap();
    let iat = jwt::unix_now() - 10;
    let reply = push(&sys, &setup.jwt(&setup.a, iat, |_| {})).await;
    assert_eq!(reply["data"]["code"], 200, "{reply}");
    wait_until(WAIT, "our node to store the newer A", || async {
        stored_iat(&ours_dir, &setup.a) == Some(iat)
    })
    .await;
    // The account pushed on the Go node admits users on ours.
    let m_user = connect_once(&ours.url(), &setup.creds("m", &setup.m)).await;
    assert!(m_user.is_ok(), "M's user on our node: {m_user:?}");
}

/// A hub with a full resolver storing A, and a leaf with a cache resolver
/// whose one remote binds the system account (a system user's creds): a
/// user of A connects to the leaf at the first attempt (the leaf asks the
/// hub over that connection) and the leaf keeps A's JWT.
async fn leaf_looks_up_its_hub(hub_imp: Impl, leaf_imp: Impl) {
    let what = format!("hub {hub_imp:?}, leaf {leaf_imp:?}");
    let setup = Setup::new();
    let a_line = format!(
        "  {}: {}\n",
        setup.a.public_key(),
        setup.jwt(&setup.a, 1, |_| {})
    );
    let hub_top = setup.resolver_top("hub", "type: full", &a_line);
    let hub = ConfNode::start_with(&hub_imp, "hub", true, Some(""), &hub_top).await;
    let remotes = format!(
        "remotes [ {{ url: \"nats-leaf://127.0.0.1:{}\", account: {}, credentials: \"{}\" }} ]",
        hub.leaf_port.unwrap(),
        setup.sys.public_key(),
        setup.creds("sys-leaf", &setup.sys).display()
    );
    let leaf_top = setup.resolver_top("leaf", "type: cache", "");
    let leaf = ConfNode::start_with(&leaf_imp, "leaf", false, Some(&remotes), &leaf_top).await;
    hub.wait_leafs(1).await;
    leaf.wait_leafs(1).await;
    let creds = setup.creds("a", &setup.a);
    // The hub's interest in lookups reaches the leaf just after the
    // connection registers: the first connect may come before it.
    let deadline = tokio::time::Instant::now() + WAIT;
    let client = loop {
        match connect_once(&leaf.url(), &creds).await {
            Ok(c) => break c,
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{what}: A's user on the leaf: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    client.flush().await.unwrap();
    assert_eq!(
        stored_iat(&setup.dir.path().join("jwt-leaf"), &setup.a),
        Some(1),
        "{what}: the leaf keeps what the hub answered"
    );
    assert_refused(
        connect_once(
            &leaf.url(),
            &setup.creds("z", &nkeys::KeyPair::new_account()),
        )
        .await,
        &format!("{what}: an account the hub does not store"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_leaf_looks_up_its_hub_ours() {
    leaf_looks_up_its_hub(Impl::Liftbridge, Impl::Liftbridge).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_leaf_looks_up_its_hub_our_leaf_go_2_15_hub() {
    leaf_looks_up_its_hub(Impl::Go(go_nats_server_2_15()), Impl::Liftbridge).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_leaf_looks_up_its_hub_go_2_15_leaf_our_hub() {
    leaf_looks_up_its_hub(Impl::Liftbridge, Impl::Go(go_nats_server_2_15())).await;
}
