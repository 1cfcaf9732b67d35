//! Contract: with `pool_size: 3` our nodes keep a pool of three route
//! connections per peer and spread accounts over it by the hash of their
//! names (`A` on slot 0, `C` on 1, `ACC1` on 2): each account's interest
//! travels on one connection per peer, a message reaches each subscriber
//! once and only in its account, a queue group spread over the cluster gets
//! each message once, a killed node's pool fills again after its restart,
//! and a peer whose INFO breaks the pool rules is refused with nats-server's
//! `-ERR` text while the pools keep working.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::cluster_routes::publish_each_once;
use crate::support::procs::{Impl, NatsNode};
use crate::support::rawroute::{route_connect, RawPeer};
use crate::support::{http_json, wait_until};

const WAIT: Duration = Duration::from_secs(20);

/// Accounts whose names hash to the three slots of a pool of three.
const ACCOUNTS: [&str; 3] = ["A", "C", "ACC1"];

fn pool_conf(dir: &tempfile::TempDir) -> Vec<String> {
    pool_conf_pinning(dir, &[])
}

/// As [`pool_conf`], with `pinned` accounts (`cluster { accounts }`).
fn pool_conf_pinning(dir: &tempfile::TempDir, pinned: &[&str]) -> Vec<String> {
    let conf = dir.path().join(format!("pool{}.conf", pinned.len()));
    let accounts: Vec<String> = ACCOUNTS
        .iter()
        .map(|a| {
            let u = a.to_lowercase();
            format!("{a}: {{ users: [{{ user: {u}, password: {u} }}] }}")
        })
        .collect();
    std::fs::write(
        &conf,
        format!(
            "accounts {{\n{}\n}}\ncluster {{ pool_size: 3, accounts: [{}] }}\n",
            accounts.join("\n"),
            pinned.join(", ")
        ),
    )
    .unwrap();
    vec!["-c".into(), conf.display().to_string()]
}

async fn start(name: &str, seeds: &[u16], flags: &[String]) -> NatsNode {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    NatsNode::start_with(&Impl::Liftbridge, name, seeds, &flags).await
}

async fn connect(n: &NatsNode, account: &str) -> async_nats::Client {
    let u = account.to_lowercase();
    async_nats::ConnectOptions::with_user_and_password(u.clone(), u)
        .connect(n.url())
        .await
        .unwrap_or_else(|e| panic!("connect to {} as {account}: {e}", n.url()))
}

async fn server_id(n: &NatsNode) -> String {
    http_json(n.http_port, "/varz").await.unwrap()["server_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Route connections per remote server id.
async fn pools(n: &NatsNode) -> HashMap<String, usize> {
    let rz = n.routez().await;
    let mut m = HashMap::new();
    for r in rz["routes"].as_array().into_iter().flatten() {
        *m.entry(r["remote_id"].as_str().unwrap_or("").to_string())
            .or_insert(0) += 1;
    }
    m
}

async fn wait_full_pools(nodes: &[&NatsNode]) {
    for n in nodes {
        wait_until(WAIT, "full pools of three", || async {
            let p = pools(n).await;
            p.len() == nodes.len() - 1 && p.values().all(|c| *c == 3)
        })
        .await;
    }
}

/// The connections (rid) of `n` towards `peer` that carry interest of
/// `account` in `subject`.
async fn carriers(n: &NatsNode, peer: &str, account: &str, subject: &str) -> Vec<u64> {
    let rz = http_json(n.http_port, "/routez?subs=detail").await.unwrap();
    rz["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["remote_id"] == peer)
        .filter(|r| {
            r["subscriptions_list_detail"]
                .as_array()
                .into_iter()
                .flatten()
                // nats-server names no account on a pinned connection,
                // and on a pool connection only in the sid (`A r.3`, or
                // `R A r.3` from another nats-server).
                .any(|s| {
                    let in_sid = s["sid"]
                        .as_str()
                        .map(|sid| sid.strip_prefix("R ").unwrap_or(sid))
                        .is_some_and(|sid| sid.split(' ').next() == Some(account));
                    (s["account"] == account
                        || s["account"].is_null() && (r["account"] == account || in_sid))
                        && s["subject"] == subject
                })
        })
        .map(|r| r["rid"].as_u64().unwrap())
        .collect()
}

async fn next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("message in time")
        .expect("subscription open")
}

/// A queue group of account `C` with a member on each node: once every
/// node knows the other two members (one connection per peer carries the
/// interest), 100 messages from each node reach the group once each.
async fn queue_group_of_c(nodes: [&NatsNode; 3], subject: &str) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut clients = Vec::new();
    for n in nodes {
        let cl = connect(n, "C").await;
        let mut s = cl
            .queue_subscribe(subject.to_string(), "w".into())
            .await
            .unwrap();
        cl.flush().await.unwrap();
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(m) = s.next().await {
                let _ = tx.send(String::from_utf8_lossy(&m.payload).into_owned());
            }
        });
        clients.push(cl);
    }
    for n in nodes {
        for p in pools(n).await.into_keys() {
            let what = format!("queue interest of C from {p} on :{}", n.http_port);
            wait_until(WAIT, &what, || async {
                carriers(n, &p, "C", subject).await.len() == 1
            })
            .await;
        }
    }
    let labelled: Vec<(&str, &async_nats::Client)> =
        ["a", "b", "c"].into_iter().zip(clients.iter()).collect();
    publish_each_once(&labelled, subject, &mut rx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_nodes_spread_accounts_over_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let flags = pool_conf(&dir);
    let a = start("pool3", &[], &flags).await;
    let b = start("pool3", &[a.cluster_port], &flags).await;
    let mut c = start("pool3", &[a.cluster_port], &flags).await;
    wait_full_pools(&[&a, &b, &c]).await;
    let varz = http_json(a.http_port, "/varz").await.unwrap();
    assert_eq!(
        (varz["routes"].as_u64(), varz["remotes"].as_u64()),
        (Some(6), Some(2))
    );
    assert_eq!(varz["cluster"]["pool_size"], 3, "{varz}");
    let b_id = server_id(&b).await;

    // One subscriber per account on B, on the same subject.
    let mut subs = Vec::new();
    let mut clients = Vec::new();
    for acc in ACCOUNTS {
        let cl = connect(&b, acc).await;
        subs.push(cl.subscribe("pool.x").await.unwrap());
        cl.flush().await.unwrap();
        clients.push(cl);
    }
    // On A, each account's interest sits on exactly one connection to B,
    // and the three accounts use the three different connections.
    let mut rids = HashSet::new();
    for acc in ACCOUNTS {
        let what = format!("interest of {acc} on one connection");
        wait_until(WAIT, &what, || async {
            carriers(&a, &b_id, acc, "pool.x").await.len() == 1
        })
        .await;
        rids.insert(carriers(&a, &b_id, acc, "pool.x").await[0]);
    }
    assert_eq!(rids.len(), 3, "accounts share a connection: {rids:?}");

    // Publishers in each account on A and C: each subscriber gets its own
    // account's messages once, in order, and nothing else.
    for (i, acc) in ACCOUNTS.iter().enumerate() {
        let pa = connect(&a, acc).await;
        let pc = connect(&c, acc).await;
        wait_until(WAIT, "interest on C", || async {
            !carriers(&c, &b_id, acc, "pool.x").await.is_empty()
        })
        .await;
        for k in 0..50 {
            pa.publish("pool.x", Bytes::from(format!("{acc}-a{k}")))
                .await
                .unwrap();
        }
        pa.flush().await.unwrap();
        for k in 0..50 {
            pc.publish("pool.x", Bytes::from(format!("{acc}-c{k}")))
                .await
                .unwrap();
        }
        pc.flush().await.unwrap();
        let mut got = Vec::new();
        for _ in 0..100 {
            got.push(String::from_utf8_lossy(&next(&mut subs[i]).await.payload).into_owned());
        }
        let from_a: Vec<&String> = got.iter().filter(|m| m.contains("-a")).collect();
        let expect_a: Vec<String> = (0..50).map(|k| format!("{acc}-a{k}")).collect();
        assert_eq!(from_a, expect_a.iter().collect::<Vec<_>>(), "order from A");
        assert!(
            got.iter().all(|m| m.starts_with(&format!("{acc}-"))),
            "{got:?}"
        );
        assert_eq!(got.iter().collect::<HashSet<_>>().len(), 100, "duplicates");
    }
    for s in &mut subs {
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), s.next()).await {
            panic!("extra message {:?}", m.payload);
        }
    }

    // A queue group of account C with members on all three nodes.
    queue_group_of_c([&a, &b, &c], "pool.q").await;

    // kill -9 of C and a restart on the same ports: the pools fill again
    // and traffic flows through them.
    c.crash_and_restart().await;
    wait_full_pools(&[&a, &b, &c]).await;
    let pc = connect(&c, "ACC1").await;
    let what = "ACC1 interest back on C";
    wait_until(WAIT, what, || async {
        carriers(&c, &b_id, "ACC1", "pool.x").await.len() == 1
    })
    .await;
    pc.publish("pool.x", Bytes::from_static(b"after restart"))
        .await
        .unwrap();
    pc.flush().await.unwrap();
    assert_eq!(&next(&mut subs[2]).await.payload[..], b"after restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_breaking_the_pool_rules_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let flags = pool_conf(&dir);
    let a = start("poolbad", &[], &flags).await;
    let b = start("poolbad", &[a.cluster_port], &flags).await;
    wait_full_pools(&[&a, &b]).await;
    // Our INFO announces the pool.
    let (mut peer, info) = RawPeer::connect(a.cluster_port).await;
    assert!(info.contains("\"route_pool_size\":3"), "{info}");
    // A pool slot beyond the pool.
    let info = |extra: &str| {
        format!(
            "INFO {{\"server_id\":\"NBADPOOL\",\"server_name\":\"badpool\",\"host\":\"127.0.0.1\",\"port\":1,\"cluster\":\"poolbad\",\"headers\":true,{extra}}}\r\n"
        )
    };
    peer.send(&route_connect("NBADPOOL", "poolbad")).await;
    peer.send(&info("\"route_pool_size\":3,\"route_pool_idx\":7"))
        .await;
    let out = peer.read_to_close().await;
    assert!(
        out.contains("-ERR 'Invalid route pool index: 7 - pool size is 3'"),
        "{out}"
    );
    // A pool too large to keep.
    let (mut peer, _) = RawPeer::connect(a.cluster_port).await;
    peer.send(&route_connect("NBADPOOL", "poolbad")).await;
    peer.send(&info("\"route_pool_size\":100000")).await;
    let out = peer.read_to_close().await;
    assert!(
        out.contains("-ERR 'Invalid route pool size: 100000"),
        "{out}"
    );
    // The real pool is untouched and carries traffic.
    assert_eq!(
        pools(&a).await.values().copied().collect::<Vec<_>>(),
        vec![3]
    );
    let sb = connect(&b, "C").await;
    let mut s = sb.subscribe("pool.ok").await.unwrap();
    sb.flush().await.unwrap();
    let b_id = server_id(&b).await;
    wait_until(WAIT, "interest on A", || async {
        carriers(&a, &b_id, "C", "pool.ok").await.len() == 1
    })
    .await;
    let pa = connect(&a, "C").await;
    pa.publish("pool.ok", Bytes::from_static(b"fine"))
        .await
        .unwrap();
    pa.flush().await.unwrap();
    assert_eq!(&next(&mut s).await.payload[..], b"fine");
}

/// A pooled node and one without a pool keep one connection, which
/// carries every account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_node_and_an_unpooled_one_share_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let pooled = pool_conf(&dir);
    let plain_conf = dir.path().join("plain.conf");
    let conf = std::fs::read_to_string(&pooled[1]).unwrap();
    std::fs::write(&plain_conf, conf.replace("pool_size: 3", "pool_size: -1")).unwrap();
    let plain = vec!["-c".to_string(), plain_conf.display().to_string()];
    let a = start("poolmix", &[], &pooled).await;
    let b = start("poolmix", &[a.cluster_port], &plain).await;
    for n in [&a, &b] {
        wait_until(WAIT, "one route connection", || async {
            pools(n).await.values().copied().collect::<Vec<_>>() == vec![1]
        })
        .await;
    }
    let info = RawPeer::connect(b.cluster_port).await.1;
    assert!(!info.contains("route_pool_size"), "{info}");
    let b_id = server_id(&b).await;
    let a_id = server_id(&a).await;
    for acc in ACCOUNTS {
        let sb = connect(&b, acc).await;
        let mut s = sb.subscribe("mix.x").await.unwrap();
        sb.flush().await.unwrap();
        let sa = connect(&a, acc).await;
        let mut back = sa.subscribe("mix.y").await.unwrap();
        sa.flush().await.unwrap();
        wait_until(WAIT, "interest on A", || async {
            carriers(&a, &b_id, acc, "mix.x").await.len() == 1
        })
        .await;
        wait_until(WAIT, "interest on B", || async {
            carriers(&b, &a_id, acc, "mix.y").await.len() == 1
        })
        .await;
        sa.publish("mix.x", Bytes::from(acc)).await.unwrap();
        sa.flush().await.unwrap();
        assert_eq!(&next(&mut s).await.payload[..], acc.as_bytes());
        sb.publish("mix.y", Bytes::from(acc)).await.unwrap();
        sb.flush().await.unwrap();
        assert_eq!(&next(&mut back).await.payload[..], acc.as_bytes());
    }
}

/// The connections (rid) of `n` towards `peer` pinned to `account`.
async fn pinned_conns(n: &NatsNode, peer: &str, account: &str) -> Vec<u64> {
    let rz = n.routez().await;
    rz["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["remote_id"] == peer && r["account"] == account)
        .map(|r| r["rid"].as_u64().unwrap())
        .collect()
}

/// `cluster { pool_size: 3, accounts: [C] }` on a node of ours (the seed)
/// and two of `others`: `C` gets a connection of its own to each peer, its
/// interest and messages travel there and nowhere else, the other accounts
/// use the pool, a queue group of `C` over the three nodes gets each
/// message once, and the pinned connection comes back after a restart.
async fn pinned_account(others: &Impl, tag: &str) {
    let dir = tempfile::tempdir().unwrap();
    let flags = pool_conf_pinning(&dir, &["C"]);
    let flags_ref: Vec<&str> = flags.iter().map(String::as_str).collect();
    let name = format!("pin-{tag}");
    let mut a = start(&name, &[], &flags).await;
    let b = NatsNode::start_with(others, &name, &[a.cluster_port], &flags_ref).await;
    let c = NatsNode::start_with(others, &name, &[a.cluster_port], &flags_ref).await;
    for n in [&a, &b, &c] {
        n.wait_routes(2).await;
    }
    let (a_id, b_id) = (server_id(&a).await, server_id(&b).await);
    wait_until(WAIT, "a connection pinned to C from A to B", || async {
        pinned_conns(&a, &b_id, "C").await.len() == 1
    })
    .await;
    wait_until(WAIT, "a connection pinned to C from B to A", || async {
        pinned_conns(&b, &a_id, "C").await.len() == 1
    })
    .await;
    // C's interest arrives on the pinned connection, A's on the pool.
    let sb_c = connect(&b, "C").await;
    let mut on_b_c = sb_c.subscribe("pin.x").await.unwrap();
    sb_c.flush().await.unwrap();
    let sb_a = connect(&b, "A").await;
    let mut on_b_a = sb_a.subscribe("pin.x").await.unwrap();
    sb_a.flush().await.unwrap();
    let pinned_rid = pinned_conns(&a, &b_id, "C").await[0];
    wait_until(WAIT, "C's interest on the pinned connection", || async {
        carriers(&a, &b_id, "C", "pin.x").await == vec![pinned_rid]
    })
    .await;
    wait_until(WAIT, "A's interest on a pool connection", || async {
        let c = carriers(&a, &b_id, "A", "pin.x").await;
        c.len() == 1 && c[0] != pinned_rid
    })
    .await;
    // Messages both ways, once, each in its own account.
    let pa_c = connect(&a, "C").await;
    let pa_a = connect(&a, "A").await;
    for i in 0..50 {
        pa_c.publish("pin.x", Bytes::from(format!("c{i}")))
            .await
            .unwrap();
        pa_a.publish("pin.x", Bytes::from(format!("a{i}")))
            .await
            .unwrap();
    }
    pa_c.flush().await.unwrap();
    pa_a.flush().await.unwrap();
    for i in 0..50 {
        assert_eq!(next(&mut on_b_c).await.payload, format!("c{i}").as_bytes());
        assert_eq!(next(&mut on_b_a).await.payload, format!("a{i}").as_bytes());
    }
    let mut back = pa_c.subscribe("pin.back").await.unwrap();
    pa_c.flush().await.unwrap();
    wait_until(WAIT, "interest back from A", || async {
        carriers(&b, &a_id, "C", "pin.back").await.len() == 1
    })
    .await;
    sb_c.publish("pin.back", Bytes::from_static(b"from b"))
        .await
        .unwrap();
    sb_c.flush().await.unwrap();
    assert_eq!(&next(&mut back).await.payload[..], b"from b");
    for s in [&mut on_b_c, &mut on_b_a] {
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), s.next()).await {
            panic!("extra message {:?}", m.payload);
        }
    }
    // A queue group of C on the three nodes.
    queue_group_of_c([&a, &b, &c], "pin.q").await;
    // kill -9 of our node: the pinned connections come back.
    a.crash_and_restart().await;
    let a_id = server_id(&a).await;
    wait_until(WAIT, "the pinned connection back", || async {
        pinned_conns(&b, &a_id, "C").await.len() == 1
    })
    .await;
    let pa_c = connect(&a, "C").await;
    wait_until(WAIT, "C's interest again on A", || async {
        carriers(&a, &b_id, "C", "pin.x").await.len() == 1
    })
    .await;
    pa_c.publish("pin.x", Bytes::from_static(b"after restart"))
        .await
        .unwrap();
    pa_c.flush().await.unwrap();
    assert_eq!(&next(&mut on_b_c).await.payload[..], b"after restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_account_between_our_nodes() {
    pinned_account(&Impl::Liftbridge, "ours").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_account_with_go_nats_server_2_15() {
    pinned_account(
        &Impl::Go(crate::support::procs::go_nats_server_2_15()),
        "go215",
    )
    .await;
}

/// Sends SIGHUP (reload the configuration) to each node.
fn hup(nodes: &[&NatsNode]) {
    for n in nodes {
        let pid = n.proc.pid().expect("node running");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(pid as i32, libc::SIGHUP) };
    }
}

/// Reloads the peers first, then (once they settled) our seed, as a
/// rolling change goes.
async fn reload_all(all: &[&NatsNode; 3]) {
    hup(&all[1..]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    hup(&all[..1]);
}

/// `(rid, account)` of every connection of `n` pinned to an account.
async fn all_pinned(n: &NatsNode) -> Vec<(u64, String)> {
    let rz = n.routez().await;
    let mut v: Vec<(u64, String)> = rz["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let acc = r["account"].as_str().filter(|a| !a.is_empty())?;
            Some((r["rid"].as_u64()?, acc.to_string()))
        })
        .collect();
    v.sort();
    v
}

/// The rids of `n`'s pool connections (not pinned to an account).
async fn pool_rids(n: &NatsNode) -> Vec<u64> {
    let rz = n.routez().await;
    let mut v: Vec<u64> = rz["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["account"].as_str().unwrap_or("").is_empty())
        .filter_map(|r| r["rid"].as_u64())
        .collect();
    v.sort_unstable();
    v
}

/// Connections per peer that are not pinned to an account.
async fn pool_conns(n: &NatsNode) -> HashMap<String, usize> {
    let rz = n.routez().await;
    let mut m = HashMap::new();
    for r in rz["routes"].as_array().into_iter().flatten() {
        if r["account"].as_str().unwrap_or("").is_empty() {
            *m.entry(r["remote_id"].as_str().unwrap_or("").to_string())
                .or_insert(0) += 1;
        }
    }
    m
}

/// Each of 20 messages of `account` published on `from` reaches a
/// subscriber on `to` once.
async fn flows(from: &NatsNode, to: &NatsNode, account: &str, subject: &str) {
    let sub_client = connect(to, account).await;
    let mut sub = sub_client.subscribe(subject.to_string()).await.unwrap();
    sub_client.flush().await.unwrap();
    let to_id = server_id(to).await;
    let what = format!("interest of {account} in {subject} across");
    wait_until(WAIT, &what, || async {
        carriers(from, &to_id, account, subject).await.len() == 1
    })
    .await;
    let pub_client = connect(from, account).await;
    for i in 0..20 {
        pub_client
            .publish(subject.to_string(), Bytes::from(format!("{i}")))
            .await
            .unwrap();
    }
    pub_client.flush().await.unwrap();
    for i in 0..20 {
        assert_eq!(next(&mut sub).await.payload, format!("{i}").as_bytes());
    }
    if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), sub.next()).await {
        panic!("extra message {:?}", m.payload);
    }
}

/// A reload of `pool_size` and `accounts` on our seed and two `others`
/// (which reload the same file): the pools re-form at the new size, a
/// newly pinned account gets its connection (and its interest moves
/// there) with the pool connections kept, a new pool size keeps the
/// pinned connections up, an unpinned account goes back to the pool (the
/// pool connections kept), and messages of every account keep reaching
/// their subscribers once.
async fn pools_change_on_reload(others: &Impl, tag: &str) {
    let dir = tempfile::tempdir().unwrap();
    let flags = pool_conf(&dir);
    let conf = std::path::PathBuf::from(&flags[1]);
    let rewrite = |pool: usize, pinned: &[&str]| {
        let text = std::fs::read_to_string(&conf).unwrap();
        let (head, _) = text.split_once("cluster {").unwrap();
        std::fs::write(
            &conf,
            format!(
                "{head}cluster {{ pool_size: {pool}, accounts: [{}] }}\n",
                pinned.join(", ")
            ),
        )
        .unwrap();
    };
    let flags_ref: Vec<&str> = flags.iter().map(String::as_str).collect();
    let name = format!("reload-{tag}");
    let a = start(&name, &[], &flags).await;
    let b = NatsNode::start_with(others, &name, &[a.cluster_port], &flags_ref).await;
    let c = NatsNode::start_with(others, &name, &[a.cluster_port], &flags_ref).await;
    let all = [&a, &b, &c];
    let (a_id, b_id) = (server_id(&a).await, server_id(&b).await);
    let pools_of = |size: usize| async move {
        for n in all {
            wait_until(WAIT, &format!("pools of {size}"), || async {
                let p = pool_conns(n).await;
                p.len() == 2 && p.values().all(|c| *c == size)
            })
            .await;
        }
    };
    pools_of(3).await;
    flows(&a, &b, "A", "r.1").await;

    rewrite(4, &[]);
    reload_all(&all).await;
    pools_of(4).await;
    for acc in ACCOUNTS {
        flows(&a, &b, acc, "r.2").await;
        flows(&b, &a, acc, "r.3").await;
    }

    // Pinning alone keeps the pool connections.
    let pool_before = pool_rids(&a).await;
    rewrite(4, &["C"]);
    reload_all(&all).await;
    wait_until(WAIT, "a connection pinned to C from A to B", || async {
        pinned_conns(&a, &b_id, "C").await.len() == 1
    })
    .await;
    wait_until(WAIT, "a connection pinned to C from B to A", || async {
        pinned_conns(&b, &a_id, "C").await.len() == 1
    })
    .await;
    pools_of(4).await;
    // nats-server announced C to our node (its peers reloaded first) and
    // got the answer it waits for.
    for n in [&b, &c] {
        let log = std::fs::read_to_string(&n.proc.log).unwrap_or_default();
        assert!(!log.contains("Timed out waiting for confirmation"), "{log}");
    }
    flows(&a, &b, "C", "r.4").await;
    flows(&b, &a, "C", "r.5").await;
    let pinned = pinned_conns(&a, &b_id, "C").await;
    assert_eq!(carriers(&a, &b_id, "C", "r.4").await, Vec::<u64>::new());
    let on_b = connect(&b, "C").await;
    let _s = on_b.subscribe("r.6").await.unwrap();
    on_b.flush().await.unwrap();
    wait_until(WAIT, "C's interest on the pinned connection", || async {
        carriers(&a, &b_id, "C", "r.6").await == pinned
    })
    .await;
    flows(&a, &b, "A", "r.7").await;
    assert_eq!(pool_rids(&a).await, pool_before);

    // A new pool size alone: the pools re-form at 5 and every pinned
    // connection (C's, and a nats-server peer's `$SYS`) stays up.
    let pinned_before = all_pinned(&a).await;
    assert!(pinned_before.len() >= 2, "{pinned_before:?}");
    rewrite(5, &["C"]);
    reload_all(&all).await;
    pools_of(5).await;
    assert_eq!(all_pinned(&a).await, pinned_before);
    for acc in ACCOUNTS {
        flows(&a, &b, acc, "r.p5").await;
        flows(&b, &a, acc, "r.p5b").await;
    }
    assert_eq!(all_pinned(&a).await, pinned_before);

    // Unpinning alone keeps the pool connections too; C's interest and
    // messages go back to the pool.
    let pool_before = pool_rids(&a).await;
    rewrite(5, &[]);
    reload_all(&all).await;
    wait_until(WAIT, "no connection pinned to C", || async {
        pinned_conns(&a, &b_id, "C").await.is_empty()
            && pinned_conns(&b, &a_id, "C").await.is_empty()
    })
    .await;
    for acc in ACCOUNTS {
        flows(&a, &b, acc, "r.u").await;
        flows(&b, &a, acc, "r.ub").await;
    }
    assert_eq!(pool_rids(&a).await, pool_before);

    rewrite(3, &[]);
    reload_all(&all).await;
    pools_of(3).await;
    wait_until(WAIT, "no connection pinned to C", || async {
        pinned_conns(&a, &b_id, "C").await.is_empty()
            && pinned_conns(&b, &a_id, "C").await.is_empty()
    })
    .await;
    for acc in ACCOUNTS {
        flows(&a, &b, acc, "r.8").await;
        flows(&b, &a, acc, "r.9").await;
    }
    queue_group_of_c([&a, &b, &c], "r.q").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_change_on_reload_between_our_nodes() {
    pools_change_on_reload(&Impl::Liftbridge, "ours").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_change_on_reload_with_go_nats_server_2_15() {
    pools_change_on_reload(
        &Impl::Go(crate::support::procs::go_nats_server_2_15()),
        "go215",
    )
    .await;
}

/// Only our node pins `C` by a reload (the nats-server peers keep their
/// configuration): announced as nats-server announces an account a
/// reload pinned, the pinned connections we dial are accepted and `C`'s
/// messages keep flowing between all three servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_on_reload_with_go_peers_that_do_not_pin() {
    let dir = tempfile::tempdir().unwrap();
    let go_flags = pool_conf(&dir);
    let go_ref: Vec<&str> = go_flags.iter().map(String::as_str).collect();
    let ours_dir = tempfile::tempdir().unwrap();
    let flags = pool_conf(&ours_dir);
    let conf = std::path::PathBuf::from(&flags[1]);
    let go = Impl::Go(crate::support::procs::go_nats_server_2_15());
    let a = start("pin-asym", &[], &flags).await;
    let b = NatsNode::start_with(&go, "pin-asym", &[a.cluster_port], &go_ref).await;
    let c = NatsNode::start_with(&go, "pin-asym", &[a.cluster_port], &go_ref).await;
    for n in [&a, &b, &c] {
        n.wait_routes(2).await;
    }
    let b_id = server_id(&b).await;
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, text.replace("accounts: []", "accounts: [C]")).unwrap();
    hup(&[&a]);
    wait_until(WAIT, "a connection pinned to C from A to B", || async {
        pinned_conns(&a, &b_id, "C").await.len() == 1
    })
    .await;
    flows(&a, &b, "C", "asym.1").await;
    flows(&c, &a, "C", "asym.2").await;
    flows(&b, &c, "C", "asym.3").await;
    flows(&a, &b, "A", "asym.4").await;
    // No dial loop against the peers' `-ERR 'No route for account'` while
    // they learned the account: every pinned connection took a few tries.
    let rid_max = a.routez().await["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["rid"].as_u64())
        .max()
        .unwrap();
    assert!(rid_max < 100, "{rid_max} connections so far");
}

/// The nats-server peers pin `C` by a reload while our node keeps its
/// configuration: they announce it, our node drops the interest in `C`
/// their pool connections carried (it comes again on the pinned
/// connections they dial), so each message of `C` still reaches them once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_peers_pinning_on_reload_reach_our_node_once() {
    let dir = tempfile::tempdir().unwrap();
    let go_flags = pool_conf(&dir);
    let go_conf = std::path::PathBuf::from(&go_flags[1]);
    let go_ref: Vec<&str> = go_flags.iter().map(String::as_str).collect();
    let ours_dir = tempfile::tempdir().unwrap();
    let flags = pool_conf(&ours_dir);
    let go = Impl::Go(crate::support::procs::go_nats_server_2_15());
    let a = start("pin-go-reload", &[], &flags).await;
    let b = NatsNode::start_with(&go, "pin-go-reload", &[a.cluster_port], &go_ref).await;
    let c = NatsNode::start_with(&go, "pin-go-reload", &[a.cluster_port], &go_ref).await;
    for n in [&a, &b, &c] {
        n.wait_routes(2).await;
    }
    // Interest of C on b before the change, carried by a pool connection.
    let on_b = connect(&b, "C").await;
    let mut sub = on_b.subscribe("gp.x").await.unwrap();
    on_b.flush().await.unwrap();
    let b_id = server_id(&b).await;
    wait_until(WAIT, "C's interest from b on a pool connection", || async {
        carriers(&a, &b_id, "C", "gp.x").await.len() == 1
    })
    .await;
    let text = std::fs::read_to_string(&go_conf).unwrap();
    std::fs::write(&go_conf, text.replace("accounts: []", "accounts: [C]")).unwrap();
    hup(&[&b, &c]);
    wait_until(WAIT, "a connection pinned to C from b to a", || async {
        pinned_conns(&a, &b_id, "C").await.len() == 1
    })
    .await;
    let pinned = pinned_conns(&a, &b_id, "C").await;
    wait_until(
        WAIT,
        "C's interest from b only on its pinned connection",
        || async { carriers(&a, &b_id, "C", "gp.x").await == pinned },
    )
    .await;
    let pa = connect(&a, "C").await;
    for i in 0..20 {
        pa.publish("gp.x", Bytes::from(format!("{i}")))
            .await
            .unwrap();
    }
    pa.flush().await.unwrap();
    for i in 0..20 {
        assert_eq!(next(&mut sub).await.payload, format!("{i}").as_bytes());
    }
    if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), sub.next()).await {
        panic!("message delivered twice: {:?}", m.payload);
    }
    flows(&c, &a, "C", "gp.y").await;
    for n in [&b, &c] {
        let log = std::fs::read_to_string(&n.proc.log).unwrap_or_default();
        assert!(!log.contains("Timed out waiting for confirmation"), "{log}");
    }
}
