//! Contract: with `accounts {}` and `cluster {}` both configured, routes
//! carry every account. A message published in account A on one node
//! reaches A's subscribers on every node and never B's; queue groups are
//! per account cluster-wide; a stream export/import and a service
//! export/import work when exporter, importer and responder sit on
//! different nodes (the service reply routes back to the requester's
//! node). The same holds when one of our servers is routed with Go
//! nats-server 2.15.1 or 2.9.10 running the same accounts config, in both
//! directions. A queue group of the importer spread over the nodes gets
//! each imported message once (ours and a Go 2.15.1 cluster alike). In
//! operator mode the accounts (preloaded JWTs) travel
//! under their public keys, and the system account stays local. With a
//! leaf node bound to one account hanging off a routed server, that
//! account's messages cross leaf and route hops in both directions and no
//! other account's do.
//!
//! Every server is a real process (`liftbridge nats-server -c`, or Go's
//! `nats-server -c`) on 127.0.0.1; clients are async-nats. Readiness is
//! polled on `/routez?subs=detail` (the `account subject` key of each
//! route's interest), which our server and Go's both serve.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::support::jwt::{account_jwt, operator_jwt, user_jwt, write_creds};
use crate::support::procs::{go_nats_server_2_15, go_nats_server_2_9, Proc};
use crate::support::sync;
use crate::support::{free_port, http_json, until_flowing, wait_until};

const WAIT: Duration = Duration::from_secs(20);

/// Which program runs a node.
#[derive(Clone, Debug)]
enum Srv {
    Ours,
    Go(PathBuf),
}

/// One server of the cluster.
struct Node {
    _proc: Proc,
    port: u16,
    cport: u16,
    http: u16,
}

impl Node {
    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

/// The accounts config every node runs: A exports a stream and services,
/// B imports them; both have a user.
fn conf(name: &str, port: u16, cport: u16, http: u16, seed: Option<u16>) -> String {
    let routes = seed.map_or(String::new(), |p| {
        format!("routes: [\"nats-route://127.0.0.1:{p}\"]")
    });
    format!(
        r#"
server_name: {name}
listen: 127.0.0.1:{port}
http: 127.0.0.1:{http}
cluster {{
  name: acc
  listen: 127.0.0.1:{cport}
  {routes}
}}
accounts {{
  A {{
    users: [ {{user: a, password: apw}} ]
    exports: [
      {{stream: "pub.>"}}
      {{service: "req.>"}}
    ]
  }}
  B {{
    users: [ {{user: b, password: bpw}} ]
    imports: [
      {{stream: {{account: A, subject: "pub.>"}}, prefix: "froma"}}
      {{service: {{account: A, subject: "req.echo"}}, to: "local.echo"}}
      {{service: {{account: A, subject: "req.other"}}, to: "local.other"}}
    ]
  }}
}}
"#
    )
}

/// Starts a node (retrying on fresh ports if one was taken meanwhile).
async fn start(srv: &Srv, name: &str, seed: Option<u16>) -> Node {
    start_with(srv, name, seed, "").await
}

/// [`start`] with `extra` appended to the config (e.g. a `leafnodes`
/// block).
async fn start_with(srv: &Srv, name: &str, seed: Option<u16>, extra: &str) -> Node {
    let mut last = String::new();
    for _ in 0..3 {
        let (port, cport, http) = (free_port(), free_port(), free_port());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.conf");
        let text = conf(name, port, cport, http, seed) + extra;
        std::fs::write(&path, text).unwrap();
        let (program, mut args) = match srv {
            Srv::Ours => (
                PathBuf::from(env!("CARGO_BIN_EXE_liftbridge")),
                vec!["nats-server".to_string()],
            ),
            Srv::Go(p) => (p.clone(), Vec::new()),
        };
        args.extend(["-c".to_string(), path.display().to_string()]);
        let mut proc = Proc::spawn(&program, args, dir);
        let mut ok = true;
        for p in [port, cport, http] {
            if let Err(e) = proc.try_wait_port(p).await {
                last = e;
                ok = false;
                break;
            }
        }
        if ok {
            return Node {
                _proc: proc,
                port,
                cport,
                http,
            };
        }
    }
    panic!("{srv:?} {name} did not start: {last}");
}

/// Number of distinct servers a node is routed to.
async fn routed_servers(http: u16) -> usize {
    let v = http_json(http, "/routez").await.unwrap_or_default();
    let mut ids: Vec<String> = v["routes"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|x| x["remote_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids.dedup();
    ids.len()
}

async fn wait_routed(n: &Node, want: usize) {
    let what = format!("routes to {want} servers on :{}", n.port);
    wait_until(WAIT, &what, || async {
        routed_servers(n.http).await == want
    })
    .await;
}

/// Routes of the node behind `http` that carry interest of `account` in
/// exactly `subject` (and `queue`, when given). Matched on the `sid`
/// (`account subject[ queue]`, `R `-prefixed by Go 2.10+): Go's detail has
/// no `account` field for route interest, only that key.
async fn routes_with(http: u16, account: &str, subject: &str, queue: Option<&str>) -> usize {
    let sid = match queue {
        Some(q) => format!("{account} {subject} {q}"),
        None => format!("{account} {subject}"),
    };
    let v = http_json(http, "/routez?subs=detail")
        .await
        .unwrap_or_default();
    v["routes"].as_array().map_or(0, |routes| {
        routes
            .iter()
            .filter(|r| {
                r["subscriptions_list_detail"].as_array().is_some_and(|l| {
                    // Go 2.10+ prefixes the key with the route's `R `.
                    l.iter().any(|s| {
                        let k = s["sid"].as_str().unwrap_or_default();
                        k == sid || k.strip_prefix("R ") == Some(sid.as_str())
                    })
                })
            })
            .count()
    })
}

/// Waits until `n` routes of the node carry the interest.
async fn wait_interest(node: &Node, account: &str, subject: &str, queue: Option<&str>, n: usize) {
    let what = format!(
        "{n} routes with interest of {account} in {subject} {queue:?} on :{}",
        node.port
    );
    wait_until(WAIT, &what, || async {
        routes_with(node.http, account, subject, queue).await == n
    })
    .await;
}

async fn connect(node: &Node, user: &str) -> async_nats::Client {
    let pass = format!("{user}pw");
    async_nats::ConnectOptions::new()
        .user_and_password(user.into(), pass)
        .connection_timeout(Duration::from_secs(5))
        .connect(node.url())
        .await
        .unwrap_or_else(|e| panic!("connect as {user} to {}: {e}", node.url()))
}

/// Receives `n` messages (or fails after `WAIT`).
async fn recv_n(
    sub: &mut async_nats::Subscriber,
    n: usize,
    what: &str,
) -> Vec<async_nats::Message> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match tokio::time::timeout(WAIT, sub.next()).await {
            Ok(Some(m)) => out.push(m),
            Ok(None) => panic!("{what}: subscription ended after {} of {n}", out.len()),
            Err(_) => panic!("{what}: only {} of {n} messages arrived", out.len()),
        }
    }
    out
}

/// Nothing arrives on `sub` within `wait`.
async fn assert_quiet(sub: &mut async_nats::Subscriber, wait: Duration, what: &str) {
    if let Ok(Some(m)) = tokio::time::timeout(wait, sub.next()).await {
        panic!(
            "{what}: unexpected message on {} {:?}",
            m.subject, m.payload
        );
    }
}

/// Messages spread over queue members: receives until `total` arrived
/// across `subs`, then checks none gets more. Returns the counts.
async fn recv_spread(subs: &mut [async_nats::Subscriber], total: usize, what: &str) -> Vec<usize> {
    let mut counts = vec![0usize; subs.len()];
    let end = tokio::time::Instant::now() + WAIT;
    while counts.iter().sum::<usize>() < total {
        assert!(
            tokio::time::Instant::now() < end,
            "{what}: only {counts:?} of {total} arrived"
        );
        for (i, s) in subs.iter_mut().enumerate() {
            if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(20), s.next()).await {
                counts[i] += 1;
            }
        }
    }
    for s in subs.iter_mut() {
        assert_quiet(s, Duration::from_millis(300), what).await;
    }
    counts
}

async fn publish_n(c: &async_nats::Client, subject: &str, n: usize) {
    for i in 0..n {
        c.publish(subject.to_string(), Bytes::from(i.to_string()))
            .await
            .unwrap();
    }
    c.flush().await.unwrap();
}

/// Answers requests on `subject` with `tag:payload` until dropped.
fn serve(c: async_nats::Client, mut sub: async_nats::Subscriber, tag: &'static str) {
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            if let Some(reply) = m.reply {
                let body = format!("{tag}:{}", String::from_utf8_lossy(&m.payload));
                let _ = c.publish(reply, Bytes::from(body)).await;
            }
        }
    });
}

async fn request(c: &async_nats::Client, subject: &str, body: &str) -> String {
    let r = tokio::time::timeout(
        WAIT,
        c.request(subject.to_string(), Bytes::from(body.to_string())),
    )
    .await
    .unwrap_or_else(|_| panic!("request on {subject} timed out"))
    .unwrap_or_else(|e| panic!("request on {subject}: {e}"));
    String::from_utf8_lossy(&r.payload).into_owned()
}

/// Three of our servers, meshed from the first.
async fn mesh3() -> Vec<Node> {
    let n1 = start(&Srv::Ours, "n1", None).await;
    let n2 = start(&Srv::Ours, "n2", Some(n1.cport)).await;
    let n3 = start(&Srv::Ours, "n3", Some(n1.cport)).await;
    let nodes = vec![n1, n2, n3];
    for n in &nodes {
        wait_routed(n, 2).await;
    }
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_accounts_isolation_and_queue_groups_across_three_nodes() {
    let nodes = mesh3().await;
    let (n1, n2, n3) = (&nodes[0], &nodes[1], &nodes[2]);
    let (a1, b1) = (connect(n1, "a").await, connect(n1, "b").await);
    let (a2, b2) = (connect(n2, "a").await, connect(n2, "b").await);
    let (a3, b3) = (connect(n3, "a").await, connect(n3, "b").await);

    // Plain subscribers of the same subject in both accounts on n2, n3.
    let mut sa2 = a2.subscribe("x.>").await.unwrap();
    let mut sb2 = b2.subscribe("x.>").await.unwrap();
    let mut sa3 = a3.subscribe("x.>").await.unwrap();
    let mut sb3 = b3.subscribe("x.>").await.unwrap();
    for c in [&a2, &b2, &a3, &b3] {
        sync(c).await;
    }
    wait_interest(n1, "A", "x.>", None, 2).await;
    wait_interest(n1, "B", "x.>", None, 2).await;

    publish_n(&a1, "x.a", 50).await;
    for (s, what) in [(&mut sa2, "A on n2"), (&mut sa3, "A on n3")] {
        let got = recv_n(s, 50, what).await;
        let ids: Vec<usize> = got
            .iter()
            .map(|m| std::str::from_utf8(&m.payload).unwrap().parse().unwrap())
            .collect();
        assert_eq!(ids, (0..50).collect::<Vec<_>>(), "{what}: in order, once");
        assert!(got.iter().all(|m| m.subject.as_str() == "x.a"));
    }
    publish_n(&b1, "x.b", 30).await;
    for (s, what) in [(&mut sb2, "B on n2"), (&mut sb3, "B on n3")] {
        let got = recv_n(s, 30, what).await;
        assert!(
            got.iter().all(|m| m.subject.as_str() == "x.b"),
            "{what}: only B's messages"
        );
    }
    for (s, what) in [
        (&mut sa2, "A on n2 after B's publish"),
        (&mut sa3, "A on n3 after B's publish"),
        (&mut sb2, "B on n2 (A's publish must not reach B)"),
        (&mut sb3, "B on n3"),
    ] {
        assert_quiet(s, Duration::from_millis(300), what).await;
    }

    // Queue groups of the same name in both accounts: one member per
    // message within the account, none in the other.
    let mut qa = vec![
        a2.queue_subscribe("job", "w".into()).await.unwrap(),
        a3.queue_subscribe("job", "w".into()).await.unwrap(),
    ];
    let mut qb = vec![
        b2.queue_subscribe("job", "w".into()).await.unwrap(),
        b3.queue_subscribe("job", "w".into()).await.unwrap(),
    ];
    for c in [&a2, &b2, &a3, &b3] {
        sync(c).await;
    }
    wait_interest(n1, "A", "job", Some("w"), 2).await;
    wait_interest(n1, "B", "job", Some("w"), 2).await;
    publish_n(&a1, "job", 100).await;
    let counts = recv_spread(&mut qa, 100, "A's queue group").await;
    assert_eq!(counts.iter().sum::<usize>(), 100, "{counts:?}");
    for s in qb.iter_mut() {
        assert_quiet(
            s,
            Duration::from_millis(200),
            "B's queue group during A's publish",
        )
        .await;
    }
    publish_n(&b1, "job", 40).await;
    let counts = recv_spread(&mut qb, 40, "B's queue group").await;
    assert_eq!(counts.iter().sum::<usize>(), 40, "{counts:?}");
    for s in qa.iter_mut() {
        assert_quiet(
            s,
            Duration::from_millis(200),
            "A's queue group during B's publish",
        )
        .await;
    }

    // /accountz is per node and unchanged by routes; the route's interest
    // is listed per account on /routez.
    let az = http_json(n1.http, "/accountz?acc=A").await.unwrap();
    assert_eq!(az["account_detail"]["account_name"], "A", "{az}");
    let rz = http_json(n1.http, "/routez?subs=detail").await.unwrap();
    let accounts: Vec<&str> = rz["routes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["subscriptions_list_detail"].as_array().unwrap().iter())
        .filter_map(|s| s["account"].as_str())
        .collect();
    assert!(accounts.contains(&"A") && accounts.contains(&"B"), "{rz}");
    assert!(
        !accounts.contains(&"$SYS"),
        "the system account stays local: {rz}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_accounts_stream_and_service_imports_across_nodes() {
    let nodes = mesh3().await;
    let (n1, n2, n3) = (&nodes[0], &nodes[1], &nodes[2]);
    let a1 = connect(n1, "a").await;
    let b1 = connect(n1, "b").await;
    let a2 = connect(n2, "a").await;
    let b3 = connect(n3, "b").await;

    // Stream: B on n3 imports A's pub.> with prefix froma; A publishes on
    // n1. n3 announces interest in A's pub.> for it.
    let mut imported = b3.subscribe("froma.pub.>").await.unwrap();
    sync(&b3).await;
    wait_interest(n1, "A", "pub.>", None, 1).await;
    publish_n(&a1, "pub.one", 20).await;
    let got = recv_n(&mut imported, 20, "B's import on n3").await;
    assert!(
        got.iter().all(|m| m.subject.as_str() == "froma.pub.one"),
        "mapped subject"
    );
    // B publishing on the exporter's subject is not A's stream.
    publish_n(&b1, "pub.one", 5).await;
    publish_n(&b1, "froma.pub.one", 1).await;
    let own = recv_n(&mut imported, 1, "B's own publish on froma.pub.one").await;
    assert_eq!(&own[0].payload[..], b"0");
    assert_quiet(
        &mut imported,
        Duration::from_millis(400),
        "B's import: no duplicates, nothing from B's pub.one",
    )
    .await;

    // Service: A's responder on n2; B requests on n3 and on n1; the reply
    // comes back over the route to the requester's node.
    let responder = a2.subscribe("req.echo").await.unwrap();
    sync(&a2).await;
    serve(a2.clone(), responder, "n2");
    wait_interest(n3, "A", "req.echo", None, 1).await;
    wait_interest(n1, "A", "req.echo", None, 1).await;
    for i in 0..10 {
        assert_eq!(
            request(&b3, "local.echo", &i.to_string()).await,
            format!("n2:{i}")
        );
        assert_eq!(
            request(&b1, "local.echo", &i.to_string()).await,
            format!("n2:{i}")
        );
    }
    // B cannot reach A's service on A's own subject.
    let err = b3
        .request("req.echo".to_string(), Bytes::from_static(b"x"))
        .await;
    assert!(err.is_err(), "B must not reach req.echo in A directly");
}

/// A queue group of B on every node subscribed to A's stream through B's
/// import: each message published in A reaches exactly one member of the
/// group cluster-wide, whichever node it is published on (the node of the
/// publisher picks the member, local or behind a route).
async fn imported_stream_queue_group(srvs: [Srv; 3]) {
    let n1 = start(&srvs[0], "q1", None).await;
    let n2 = start(&srvs[1], "q2", Some(n1.cport)).await;
    let n3 = start(&srvs[2], "q3", Some(n1.cport)).await;
    for n in [&n1, &n2, &n3] {
        wait_routed(n, 2).await;
    }
    let (mut clients, mut members) = (Vec::new(), Vec::new());
    for n in [&n1, &n2, &n3] {
        let b = connect(n, "b").await;
        members.push(
            b.queue_subscribe("froma.pub.>", "workers".into())
                .await
                .unwrap(),
        );
        sync(&b).await;
        clients.push(b);
    }
    for n in [&n1, &n2, &n3] {
        wait_interest(n, "B", "froma.pub.>", Some("workers"), 2).await;
    }
    for (i, n) in [&n1, &n2, &n3].into_iter().enumerate() {
        let a = connect(n, "a").await;
        publish_n(&a, "pub.q", 60).await;
        let what = format!("{srvs:?}: published on node {}", i + 1);
        let counts = recv_spread(&mut members, 60, &what).await;
        assert_eq!(counts.iter().sum::<usize>(), 60, "{what}: {counts:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_accounts_imported_stream_queue_group_gets_one_copy() {
    imported_stream_queue_group([Srv::Ours, Srv::Ours, Srv::Ours]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_accounts_imported_stream_queue_group_go_2_15() {
    let go = Srv::Go(go_nats_server_2_15());
    imported_stream_queue_group([go.clone(), go.clone(), go]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_accounts_imported_stream_queue_group_mixed_go_seed() {
    let go = Srv::Go(go_nats_server_2_15());
    imported_stream_queue_group([go.clone(), Srv::Ours, go]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_accounts_imported_stream_queue_group_mixed_our_seed() {
    let go = Srv::Go(go_nats_server_2_15());
    imported_stream_queue_group([Srv::Ours, go, Srv::Ours]).await;
}

/// One of ours routed with a Go server on the same accounts config:
/// isolation and delivery, stream and service imports, both ways.
async fn interop(go: PathBuf) {
    let g = start(&Srv::Go(go), "go", None).await;
    let r = start(&Srv::Ours, "ours", Some(g.cport)).await;
    wait_routed(&g, 1).await;
    wait_routed(&r, 1).await;
    let (ga, gb) = (connect(&g, "a").await, connect(&g, "b").await);
    let (ra, rb) = (connect(&r, "a").await, connect(&r, "b").await);

    let mut g_sa = ga.subscribe("x.>").await.unwrap();
    let mut g_sb = gb.subscribe("x.>").await.unwrap();
    let mut r_sa = ra.subscribe("x.>").await.unwrap();
    let mut r_sb = rb.subscribe("x.>").await.unwrap();
    for c in [&ga, &gb, &ra, &rb] {
        sync(c).await;
    }
    wait_interest(&r, "A", "x.>", None, 1).await;
    wait_interest(&r, "B", "x.>", None, 1).await;
    wait_interest(&g, "A", "x.>", None, 1).await;
    wait_interest(&g, "B", "x.>", None, 1).await;

    // Ours → Go in A; Go → ours in B.
    publish_n(&ra, "x.from.ours", 25).await;
    recv_n(&mut g_sa, 25, "A on Go from ours").await;
    recv_n(&mut r_sa, 25, "A on ours (local)").await;
    publish_n(&gb, "x.from.go", 15).await;
    recv_n(&mut r_sb, 15, "B on ours from Go").await;
    recv_n(&mut g_sb, 15, "B on Go (local)").await;
    for (s, what) in [
        (&mut g_sa, "A on Go"),
        (&mut g_sb, "B on Go: A's messages must not arrive"),
        (&mut r_sa, "A on ours: B's messages must not arrive"),
        (&mut r_sb, "B on ours"),
    ] {
        assert_quiet(s, Duration::from_millis(300), what).await;
    }

    // Stream import, importer on Go, exporter's publisher on ours.
    let mut g_imp = gb.subscribe("froma.pub.>").await.unwrap();
    sync(&gb).await;
    wait_interest(&r, "A", "pub.>", None, 1).await;
    publish_n(&ra, "pub.a", 10).await;
    let got = recv_n(&mut g_imp, 10, "import on Go from ours").await;
    assert!(got.iter().all(|m| m.subject.as_str() == "froma.pub.a"));
    assert_quiet(&mut g_imp, Duration::from_millis(300), "import on Go").await;
    drop(g_imp);
    // And the other way: importer on ours, publisher on Go.
    let mut r_imp = rb.subscribe("froma.pub.>").await.unwrap();
    sync(&rb).await;
    wait_interest(&g, "A", "pub.>", None, 1).await;
    publish_n(&ga, "pub.b", 10).await;
    let got = recv_n(&mut r_imp, 10, "import on ours from Go").await;
    assert!(got.iter().all(|m| m.subject.as_str() == "froma.pub.b"));
    assert_quiet(&mut r_imp, Duration::from_millis(300), "import on ours").await;

    // Service imports: responder on Go, requester on ours; and back.
    let on_go = ga.subscribe("req.echo").await.unwrap();
    sync(&ga).await;
    serve(ga.clone(), on_go, "go");
    let on_ours = ra.subscribe("req.other").await.unwrap();
    sync(&ra).await;
    serve(ra.clone(), on_ours, "ours");
    wait_interest(&r, "A", "req.echo", None, 1).await;
    wait_interest(&g, "A", "req.other", None, 1).await;
    for i in 0..5 {
        assert_eq!(
            request(&rb, "local.echo", &i.to_string()).await,
            format!("go:{i}")
        );
        assert_eq!(
            request(&gb, "local.other", &i.to_string()).await,
            format!("ours:{i}")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_accounts_interop_with_nats_server_2_15() {
    interop(go_nats_server_2_15()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_accounts_interop_with_nats_server_2_9() {
    interop(go_nats_server_2_9()).await;
}

/// Operator mode: account JWTs preloaded on every node (the same
/// operator); routes carry each account under its public key.
struct OperatorSetup {
    dir: tempfile::TempDir,
    op: nkeys::KeyPair,
    a: nkeys::KeyPair,
    b: nkeys::KeyPair,
    sys: nkeys::KeyPair,
}

impl OperatorSetup {
    fn new() -> OperatorSetup {
        OperatorSetup {
            dir: tempfile::tempdir().unwrap(),
            op: nkeys::KeyPair::new_operator(),
            a: nkeys::KeyPair::new_account(),
            b: nkeys::KeyPair::new_account(),
            sys: nkeys::KeyPair::new_account(),
        }
    }

    fn account_jwt(&self, acc: &nkeys::KeyPair) -> String {
        account_jwt(&self.op, &acc.public_key(), "acc", |_| {})
    }

    /// A creds file of a new user of `acc`.
    fn creds(&self, name: &str, acc: &nkeys::KeyPair) -> PathBuf {
        let user = nkeys::KeyPair::new_user();
        let token = user_jwt(acc, &user, |c| c.name = name.into());
        let p = self.dir.path().join(format!("{name}.creds"));
        write_creds(&p, &token, &user);
        p
    }

    fn conf(&self, name: &str, port: u16, cport: u16, http: u16, seed: Option<u16>) -> String {
        let op = operator_jwt(&self.op, &self.sys.public_key());
        let routes = seed.map_or(String::new(), |p| {
            format!("routes: [\"nats-route://127.0.0.1:{p}\"]")
        });
        format!(
            "server_name: {name}\nlisten: 127.0.0.1:{port}\nhttp: 127.0.0.1:{http}\n\
             cluster {{ name: jwt, listen: 127.0.0.1:{cport}\n {routes} }}\n\
             operator: \"{op}\"\nsystem_account: {}\nresolver: MEMORY\n\
             resolver_preload: {{\n  {}: {}\n  {}: {}\n  {}: {}\n}}\n",
            self.sys.public_key(),
            self.a.public_key(),
            self.account_jwt(&self.a),
            self.b.public_key(),
            self.account_jwt(&self.b),
            self.sys.public_key(),
            self.account_jwt(&self.sys),
        )
    }
}

async fn start_operator(setup: &OperatorSetup, name: &str, seed: Option<u16>) -> Node {
    let (port, cport, http) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.conf");
    std::fs::write(&path, setup.conf(name, port, cport, http, seed)).unwrap();
    let args = vec![
        "nats-server".to_string(),
        "-c".to_string(),
        path.display().to_string(),
    ];
    let mut proc = Proc::spawn(&PathBuf::from(env!("CARGO_BIN_EXE_liftbridge")), args, dir);
    for p in [port, cport, http] {
        if let Err(e) = proc.try_wait_port(p).await {
            panic!("{name}: {e}");
        }
    }
    Node {
        _proc: proc,
        port,
        cport,
        http,
    }
}

async fn connect_creds(node: &Node, creds: &std::path::Path) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .credentials_file(creds)
        .await
        .unwrap()
        .connect(node.url())
        .await
        .unwrap_or_else(|e| panic!("connect with {}: {e}", creds.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_accounts_operator_mode_carries_accounts_by_public_key() {
    let setup = OperatorSetup::new();
    let n1 = start_operator(&setup, "j1", None).await;
    let n2 = start_operator(&setup, "j2", Some(n1.cport)).await;
    wait_routed(&n1, 1).await;
    wait_routed(&n2, 1).await;
    let (ca, cb) = (setup.creds("ua", &setup.a), setup.creds("ub", &setup.b));
    let a1 = connect_creds(&n1, &ca).await;
    let b1 = connect_creds(&n1, &cb).await;
    let a2 = connect_creds(&n2, &ca).await;
    let b2 = connect_creds(&n2, &cb).await;
    let mut sa = a2.subscribe("x.>").await.unwrap();
    let mut sb = b2.subscribe("x.>").await.unwrap();
    sync(&a2).await;
    sync(&b2).await;
    wait_interest(&n1, &setup.a.public_key(), "x.>", None, 1).await;
    wait_interest(&n1, &setup.b.public_key(), "x.>", None, 1).await;
    publish_n(&a1, "x.a", 10).await;
    let got = recv_n(&mut sa, 10, "A on n2").await;
    assert!(got.iter().all(|m| m.subject.as_str() == "x.a"));
    publish_n(&b1, "x.b", 7).await;
    let got = recv_n(&mut sb, 7, "B on n2").await;
    assert!(got.iter().all(|m| m.subject.as_str() == "x.b"));
    assert_quiet(&mut sa, Duration::from_millis(300), "A: nothing of B").await;
    assert_quiet(&mut sb, Duration::from_millis(300), "B: nothing of A").await;
    // The system account's interest stays on its node.
    let rz = http_json(n1.http, "/routez?subs=detail").await.unwrap();
    let sys = setup.sys.public_key();
    let leaked = rz["routes"].as_array().unwrap().iter().any(|r| {
        r["subscriptions_list_detail"]
            .as_array()
            .is_some_and(|l| l.iter().any(|s| s["account"] == sys.as_str()))
    });
    assert!(!leaked, "system account interest crossed the route: {rz}");
}

/// Account A's messages from `from` (clients in A and B) reach A's
/// subscriber on `to` (30, in order) and B's never do: B's publishes
/// arrive at neither subscriber. Subjects are `<prefix>.probe|a|b`.
async fn a_only(
    (pub_a, pub_b): (&async_nats::Client, &async_nats::Client),
    (sub_a, sub_b): (&mut async_nats::Subscriber, &mut async_nats::Subscriber),
    prefix: &str,
    (from, to): (&str, &str),
) {
    let probe = format!("{prefix}.probe");
    until_flowing(pub_a, sub_a, &probe, &probe).await;
    publish_n(pub_a, &format!("{prefix}.a"), 30).await;
    recv_numbered(sub_a, 30, &format!("{from} A → {to} A")).await;
    publish_n(pub_b, &format!("{prefix}.b"), 10).await;
    assert_quiet(
        sub_b,
        Duration::from_millis(500),
        &format!("{to} B from the {from}"),
    )
    .await;
    assert_quiet(
        sub_a,
        Duration::from_millis(200),
        &format!("{to} A from the {from}'s B"),
    )
    .await;
}

/// Receives the `n` numbered messages `publish_n` sent, skipping probes.
async fn recv_numbered(sub: &mut async_nats::Subscriber, n: usize, what: &str) {
    let mut got = Vec::new();
    while got.len() < n {
        match tokio::time::timeout(WAIT, sub.next()).await {
            Ok(Some(m)) if &m.payload[..] == b"probe" => {}
            Ok(Some(m)) => got.push(String::from_utf8_lossy(&m.payload).into_owned()),
            _ => panic!("{what}: only {} of {n} arrived", got.len()),
        }
    }
    let want: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    assert_eq!(got, want, "{what}: in order, once each");
}

/// Routes, leaf nodes and accounts together: n1 and n2 are routed; n1 is
/// also the hub of a leaf L whose connection is bound to account A on
/// both ends (the remote's `account`, the hub's leaf user's `account`).
/// A's messages cross leaf → hub → route and route → hub → leaf; B's
/// stay on their own server, and nothing of A reaches B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_accounts_and_leaf_accounts_together() {
    let lport = free_port();
    let hub_leafs = format!(
        r#"
leafnodes {{
  listen: 127.0.0.1:{lport}
  authorization {{
    users: [ {{user: la, password: lapw, account: A}} ]
  }}
}}
"#
    );
    let n1 = start_with(&Srv::Ours, "n1", None, &hub_leafs).await;
    let n2 = start(&Srv::Ours, "n2", Some(n1.cport)).await;
    wait_routed(&n1, 1).await;
    wait_routed(&n2, 1).await;

    // The leaf: the same accounts, no cluster; its remote binds A.
    let (port, http) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leaf.conf");
    let leaf_conf = format!(
        r#"
server_name: leaf
listen: 127.0.0.1:{port}
http: 127.0.0.1:{http}
accounts {{
  A {{ users: [ {{user: a, password: apw}} ] }}
  B {{ users: [ {{user: b, password: bpw}} ] }}
}}
leafnodes {{
  remotes: [ {{ url: "nats-leaf://la:lapw@127.0.0.1:{lport}", account: A }} ]
}}
"#
    );
    std::fs::write(&path, leaf_conf).unwrap();
    let mut proc = Proc::spawn(
        &PathBuf::from(env!("CARGO_BIN_EXE_liftbridge")),
        vec![
            "nats-server".into(),
            "-c".into(),
            path.display().to_string(),
        ],
        dir,
    );
    proc.try_wait_port(port).await.expect("leaf node listens");
    let leaf = Node {
        _proc: proc,
        port,
        cport: 0,
        http,
    };
    wait_until(WAIT, "the leaf connected to n1 in account A", || async {
        http_json(n1.http, "/leafz")
            .await
            .and_then(|v| v["leafs"].as_array().cloned())
            .is_some_and(|l| l.iter().any(|x| x["account"] == "A"))
    })
    .await;

    // Leaf → hub → route: A on the leaf reaches A on n2, never B.
    let n2_a = connect(&n2, "a").await;
    let n2_b = connect(&n2, "b").await;
    let mut n2_a_sub = n2_a.subscribe("edge.>").await.unwrap();
    let mut n2_b_sub = n2_b.subscribe("edge.>").await.unwrap();
    sync(&n2_a).await;
    sync(&n2_b).await;
    let leaf_a = connect(&leaf, "a").await;
    let leaf_b = connect(&leaf, "b").await;
    a_only(
        (&leaf_a, &leaf_b),
        (&mut n2_a_sub, &mut n2_b_sub),
        "edge",
        ("leaf", "n2"),
    )
    .await;

    // Route → hub → leaf: A on n2 reaches A on the leaf, never B.
    let mut leaf_a_sub = leaf_a.subscribe("hub.>").await.unwrap();
    let mut leaf_b_sub = leaf_b.subscribe("hub.>").await.unwrap();
    sync(&leaf_a).await;
    sync(&leaf_b).await;
    a_only(
        (&n2_a, &n2_b),
        (&mut leaf_a_sub, &mut leaf_b_sub),
        "hub",
        ("n2", "leaf"),
    )
    .await;
}
