//! Accounts, against real processes: the built `liftbridge nats-server`
//! and Go nats-server 2.15.1 run the same config file, and the same test
//! body (async-nats clients, raw sockets, HTTP monitoring) must pass
//! against both: isolation of subject spaces, a stream export/import with
//! a prefix, a service export/import with a request/reply round trip
//! (`_R_` reply mapping), `no_auth_user`, per-user permissions inside an
//! account, `/connz` account fields and `/accountz`. Then what only we can
//! be asked: bad account configs refused at start-up with nats-server's
//! text (checked against 2.15.1 too), and a
//! full node (`liftbridge -c`) whose stream records one account's subject
//! through `nats.account`.

use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::free_port;
use crate::support::procs::{go_nats_server_2_15, spawn_liftbridge, Proc};

/// The accounts used throughout: A exports a stream and a service, B
/// imports both (anonymous clients land in B through `no_auth_user`), C
/// has a restricted user.
fn accounts_conf(port: u16, http: u16) -> String {
    format!(
        r#"
listen: 127.0.0.1:{port}
http: 127.0.0.1:{http}
accounts {{
  A {{
    users: [ {{user: a, password: apw}} ]
    exports: [
      {{stream: "pub.>"}}
      {{service: "req.>"}}
      {{stream: "private.>", accounts: [C]}}
      {{stream: "map.>"}}
      {{service: "multi.>", response_type: stream}}
    ]
  }}
  B {{
    users: [ {{user: b, password: bpw}} ]
    imports: [
      {{stream: {{account: A, subject: "pub.>"}}, prefix: "froma"}}
      {{service: {{account: A, subject: "req.echo"}}, to: "local.echo"}}
      {{stream: {{account: A, subject: "map.>"}}, to: "mine.>"}}
      {{service: {{account: A, subject: "multi.x"}}}}
    ]
  }}
  C {{
    users: [
      {{user: c, password: cpw, permissions: {{publish: "ok.>", subscribe: "ok.>"}}}}
    ]
  }}
}}
no_auth_user: b
"#
    )
}

/// Which server runs the config.
#[derive(Clone, Copy, Debug)]
enum Server {
    Ours,
    Go,
}

/// Starts `server` on `conf` (written to a temp dir), not waiting.
fn spawn(server: Server, conf: &str) -> Proc {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("accounts.conf");
    std::fs::write(&path, conf).unwrap();
    let (program, mut args) = match server {
        Server::Ours => (
            std::path::PathBuf::from(env!("CARGO_BIN_EXE_liftbridge")),
            vec!["nats-server".to_string()],
        ),
        Server::Go => (go_nats_server_2_15(), Vec::new()),
    };
    args.extend(["-c".to_string(), path.display().to_string()]);
    Proc::spawn(&program, args, dir)
}

/// Starts `server` with `conf` and waits for its client and monitoring
/// ports.
async fn start(server: Server, conf: &str, ports: &[u16]) -> Proc {
    let mut p = spawn(server, conf);
    for &port in ports {
        if let Err(e) = p.try_wait_port(port).await {
            panic!("{server:?}: {e}");
        }
    }
    p
}

async fn connect_as(url: &str, user: &str, pass: &str) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .user_and_password(user.into(), pass.into())
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"))
}

/// The next message within 5 s.
async fn next(sub: &mut async_nats::Subscriber, what: &str) -> async_nats::Message {
    tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .unwrap_or_else(|_| panic!("no message for {what} within 5s"))
        .unwrap_or_else(|| panic!("subscription for {what} ended"))
}

/// A round trip through the server on `c`'s connection: everything `c`
/// sent before (SUB, PUB) has been processed when this returns. (A flush
/// only empties the client's buffer; another connection's later publish
/// could still be processed first.)
async fn sync(c: &async_nats::Client) {
    sync_via(c, &c.new_inbox()).await
}

/// [`sync`] over `subject` (for a user who may not use `_INBOX`).
async fn sync_via(c: &async_nats::Client, subject: &str) {
    let inbox = subject.to_string();
    let mut s = c.subscribe(inbox.clone()).await.unwrap();
    c.publish(inbox, "".into()).await.unwrap();
    next(&mut s, "sync").await;
}

/// GET `path` on the monitoring port as JSON.
async fn monitor(port: u16, path: &str) -> serde_json::Value {
    crate::support::http_json(port, path)
        .await
        .unwrap_or_else(|| panic!("no JSON from {path}"))
}

/// Raw-socket session: CONNECT as `user`, send `ops`, then PING; returns
/// everything received up to the PONG.
async fn raw_session(port: u16, user: &str, pass: &str, ops: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let connect = format!(
        "CONNECT {{\"verbose\":false,\"pedantic\":false,\"user\":\"{user}\",\"pass\":\"{pass}\",\"protocol\":1}}\r\n{ops}PING\r\n"
    );
    s.write_all(connect.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let read = async {
        loop {
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.windows(6).any(|w| w == b"PONG\r\n") {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("PONG within 5s");
    String::from_utf8_lossy(&buf).into_owned()
}

/// Publishes on `iso.x` in order, each publish processed before the next;
/// returns the next message of A's and of B's `iso.x` subscriptions (each
/// must be its own account's: a leak would arrive first).
async fn isolated(
    (a_iso, b_iso): (&mut async_nats::Subscriber, &mut async_nats::Subscriber),
    publishes: [(&async_nats::Client, &str); 2],
) -> [String; 2] {
    for (c, payload) in publishes {
        c.publish("iso.x", payload.to_string().into())
            .await
            .unwrap();
        sync(c).await;
    }
    let text = |m: async_nats::Message| String::from_utf8_lossy(&m.payload).into_owned();
    [
        text(next(a_iso, "A iso.x").await),
        text(next(b_iso, "B iso.x").await),
    ]
}

/// The behaviour shared by both servers.
async fn shared_body(server: Server, port: u16, http: u16) {
    let url = format!("nats://127.0.0.1:{port}");
    let a = connect_as(&url, "a", "apw").await;
    let b = connect_as(&url, "b", "bpw").await;
    let c = connect_as(&url, "c", "cpw").await;

    // Isolation: the same subject in A and B are two subjects. A publishes
    // first and its publish is processed (flush) before B's, so a leak
    // would reach B's subscriber before B's own message.
    let mut a_iso = a.subscribe("iso.x").await.unwrap();
    let mut b_iso = b.subscribe("iso.x").await.unwrap();
    sync(&a).await;
    sync(&b).await;
    let iso = (&mut a_iso, &mut b_iso);
    assert_eq!(
        isolated(iso, [(&a, "fromA"), (&b, "fromB")]).await,
        ["fromA", "fromB"],
        "{server:?}"
    );
    // And the other way round.
    let iso = (&mut a_iso, &mut b_iso);
    assert_eq!(
        isolated(iso, [(&b, "fromB2"), (&a, "fromA2")]).await,
        ["fromA2", "fromB2"],
        "{server:?}"
    );

    // Stream export/import with a prefix: A's pub.x reaches B as
    // froma.pub.x, and anonymous clients (no_auth_user b) are in B.
    let anon = async_nats::connect(&url).await.expect("anonymous connect");
    let mut b_stream = b.subscribe("froma.pub.>").await.unwrap();
    let mut anon_stream = anon.subscribe("froma.pub.>").await.unwrap();
    let mut c_pub = c.subscribe("ok.pub.x").await.unwrap();
    sync(&b).await;
    sync(&anon).await;
    sync_via(&c, "ok.sync").await;
    a.publish("pub.x", "streamed".into()).await.unwrap();
    sync(&a).await;
    let m = next(&mut b_stream, "B froma.pub.>").await;
    assert_eq!(
        (m.subject.as_str(), &m.payload[..]),
        ("froma.pub.x", &b"streamed"[..])
    );
    let m = next(&mut anon_stream, "anonymous froma.pub.>").await;
    assert_eq!(m.subject.as_str(), "froma.pub.x", "{server:?}");
    // The anonymous client publishes in B: B's subscriber gets it, A's
    // subscriber of the same subject does not (A's next message is the
    // sentinel published after it).
    anon.publish("iso.x", "anon".into()).await.unwrap();
    sync(&anon).await;
    a.publish("iso.x", "sentinel".into()).await.unwrap();
    sync(&a).await;
    assert_eq!(
        next(&mut b_iso, "B iso.x from anonymous").await.payload,
        "anon"
    );
    assert_eq!(
        next(&mut a_iso, "A iso.x sentinel").await.payload,
        "sentinel"
    );

    // Service export/import: B requests local.echo, A's responder sees
    // req.echo with a mapped _R_ reply, the answer reaches B's inbox.
    let mut responder = a.subscribe("req.echo").await.unwrap();
    sync(&a).await;
    let a2 = a.clone();
    let serve = tokio::spawn(async move {
        let m = next(&mut responder, "A req.echo").await;
        let reply = m.reply.clone().expect("request has a reply");
        a2.publish(
            reply.clone(),
            format!("echo:{}", String::from_utf8_lossy(&m.payload)).into(),
        )
        .await
        .unwrap();
        sync(&a2).await;
        reply.to_string()
    });
    let resp = tokio::time::timeout(
        Duration::from_secs(5),
        b.request("local.echo", "ping".into()),
    )
    .await
    .expect("reply within 5s")
    .expect("request answered");
    assert_eq!(resp.payload, "echo:ping", "{server:?}");
    let mapped = serve.await.unwrap();
    assert!(
        mapped.starts_with("_R_."),
        "{server:?}: reply seen by A: {mapped}"
    );
    // The mapped reply has two random tokens after _R_ (6 base62 each).
    let toks: Vec<&str> = mapped.split('.').collect();
    assert_eq!(toks.len(), 3, "{mapped}");
    assert!(toks[1..]
        .iter()
        .all(|t| t.len() == 6 && t.chars().all(|c| c.is_ascii_alphanumeric())));
    // A plain publish in B on the imported subject (no reply) reaches A too.
    let mut responder = a.subscribe("req.echo").await.unwrap();
    sync(&a).await;
    b.publish("local.echo", "oneway".into()).await.unwrap();
    sync(&b).await;
    let m = next(&mut responder, "A req.echo one-way").await;
    assert_eq!((m.payload, m.reply), ("oneway".into(), None));

    // A stream import remapped with `to`.
    let mut mine = b.subscribe("mine.>").await.unwrap();
    sync(&b).await;
    a.publish("map.q", "remapped".into()).await.unwrap();
    sync(&a).await;
    assert_eq!(next(&mut mine, "B mine.>").await.subject.as_str(), "mine.q");

    // Singleton responses: the mapping goes after the first answer, so a
    // second answer on the same reply never reaches the requester (the
    // requester's own sentinel, published after it, comes first).
    let mut responder = a.subscribe("req.echo").await.unwrap();
    let inbox = b.new_inbox();
    let mut answers = b.subscribe(inbox.clone()).await.unwrap();
    sync(&a).await;
    sync(&b).await;
    b.publish_with_reply("local.echo", inbox.clone(), "once".into())
        .await
        .unwrap();
    sync(&b).await;
    let req = next(&mut responder, "A req.echo singleton").await;
    let r = req.reply.expect("reply");
    a.publish(r.clone(), "first".into()).await.unwrap();
    a.publish(r.clone(), "second".into()).await.unwrap();
    sync(&a).await;
    b.publish(inbox.clone(), "sentinel".into()).await.unwrap();
    sync(&b).await;
    assert_eq!(next(&mut answers, "first answer").await.payload, "first");
    assert_eq!(
        next(&mut answers, "sentinel").await.payload,
        "sentinel",
        "{server:?}: a second singleton answer got through"
    );

    // Stream responses: every answer until an empty message ends it.
    let mut multi = a.subscribe("multi.x").await.unwrap();
    sync(&a).await;
    b.publish_with_reply("multi.x", inbox.clone(), "many".into())
        .await
        .unwrap();
    sync(&b).await;
    let req = next(&mut multi, "A multi.x").await;
    let r = req.reply.expect("reply");
    assert!(r.starts_with("_R_."), "{r}");
    for p in ["r1", "r2", "r3"] {
        a.publish(r.clone(), p.into()).await.unwrap();
    }
    a.publish(r.clone(), "".into()).await.unwrap();
    a.publish(r.clone(), "late".into()).await.unwrap();
    sync(&a).await;
    b.publish(inbox.clone(), "sentinel2".into()).await.unwrap();
    sync(&b).await;
    let mut got = Vec::new();
    loop {
        let m = next(&mut answers, "stream answers").await;
        if m.payload.is_empty() {
            continue; // the end marker itself may or may not be passed on
        }
        let p = String::from_utf8_lossy(&m.payload).into_owned();
        let end = p == "sentinel2";
        got.push(p);
        if end {
            break;
        }
    }
    assert_eq!(got, ["r1", "r2", "r3", "sentinel2"], "{server:?}");

    // Per-user permissions inside an account (raw socket: the exact -ERR).
    let out = raw_session(port, "c", "cpw", "PUB nope 2\r\nhi\r\nSUB nope 1\r\n").await;
    assert!(
        out.contains("-ERR 'Permissions Violation for Publish to \"nope\"'"),
        "{server:?}: {out}"
    );
    assert!(
        out.contains("-ERR 'Permissions Violation for Subscription to \"nope\"'"),
        "{server:?}: {out}"
    );
    // C's allowed subjects work, and A's stream (exported to C only as
    // private.>, not pub.>) never reaches C.
    c.publish("ok.pub.x", "c-self".into()).await.unwrap();
    sync_via(&c, "ok.sync").await;
    assert_eq!(next(&mut c_pub, "C ok.pub.x").await.payload, "c-self");

    // Monitoring: /connz?auth=1 names each connection's account (once
    // the server has seen the raw session above close).
    let mut connz = monitor(http, "/connz?auth=1").await;
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while connz["num_connections"].as_u64() != Some(4) && std::time::Instant::now() < end {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        connz = monitor(http, "/connz?auth=1").await;
    }
    let conns = connz["connections"].as_array().expect("connections");
    let acc_of = |user: &str| -> Vec<String> {
        conns
            .iter()
            .filter(|c| c["authorized_user"] == user)
            .map(|c| c["account"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(acc_of("a"), vec!["A".to_string()], "{server:?}: {connz}");
    assert_eq!(acc_of("c"), vec!["C".to_string()], "{server:?}: {connz}");
    // b and the anonymous client (bound to b).
    assert_eq!(acc_of("b"), vec!["B".to_string(); 2], "{server:?}: {connz}");
    // acc= filters by account.
    let only_a = monitor(http, "/connz?auth=1&acc=A").await;
    assert_eq!(
        only_a["connections"].as_array().map(Vec::len),
        Some(1),
        "{only_a}"
    );
    // /accountz lists the accounts; ?acc=A details one.
    let accz = monitor(http, "/accountz").await;
    let names: Vec<&str> = accz["accounts"]
        .as_array()
        .expect("accounts")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for want in ["A", "B", "C", "$G", "$SYS"] {
        assert!(
            names.contains(&want),
            "{server:?}: {want} missing from {accz}"
        );
    }
    assert_eq!(accz["system_account"], "$SYS", "{server:?}: {accz}");
    let acc_a = monitor(http, "/accountz?acc=A").await;
    let d = &acc_a["account_detail"];
    assert_eq!(d["account_name"], "A", "{acc_a}");
    assert_eq!(d["client_connections"], 1, "{server:?}: {acc_a}");
    let exported: Vec<&str> = d["exports"]
        .as_array()
        .expect("exports")
        .iter()
        .filter_map(|e| e["subject"].as_str())
        .collect();
    for want in ["pub.>", "req.>", "private.>", "map.>", "multi.>"] {
        assert!(exported.contains(&want), "{server:?}: {acc_a}");
    }
    let acc_b = monitor(http, "/accountz?acc=B").await;
    let imports = acc_b["account_detail"]["imports"]
        .as_array()
        .expect("imports");
    // nats-server adds imports from its system account; ours has none.
    let mut kinds: Vec<(String, String)> = imports
        .iter()
        .filter(|i| i["account"] != "$SYS")
        .map(|i| {
            (
                i["type"].as_str().unwrap_or("").to_string(),
                i["subject"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        vec![
            ("service".to_string(), "multi.x".to_string()),
            ("service".to_string(), "req.echo".to_string()),
            ("stream".to_string(), "map.>".to_string()),
            ("stream".to_string(), "pub.>".to_string())
        ],
        "{server:?}: {acc_b}"
    );
}

async fn run_shared(server: Server) {
    let (port, http) = (free_port(), free_port());
    let _p = start(server, &accounts_conf(port, http), &[port, http]).await;
    shared_body(server, port, http).await;
}

#[tokio::test]
async fn nats_accounts_ours() {
    run_shared(Server::Ours).await;
}

#[tokio::test]
async fn nats_accounts_go_2_15_same_body() {
    run_shared(Server::Go).await;
}

/// An account's `limits` (config mode), the same body against both
/// servers: one connection at a time (the second gets nats-server's
/// `-ERR`), two subscriptions per connection, 100-byte payloads; another
/// account is not limited.
async fn limits_body(server: Server) {
    let (port, http) = (free_port(), free_port());
    let conf = format!(
        r#"
listen: 127.0.0.1:{port}
http: 127.0.0.1:{http}
accounts {{
  L {{
    users: [ {{user: l, password: l}}, {{user: l2, password: l2}} ]
    limits {{ max_connections: 1, max_subscriptions: 2, max_payload: 100, max_leafnodes: -1 }}
  }}
  F {{ users: [ {{user: f, password: f}} ] }}
}}
"#
    );
    let _p = start(server, &conf, &[port, http]).await;
    let url = format!("nats://127.0.0.1:{port}");
    let first = connect_as(&url, "l", "l").await;
    sync(&first).await;
    let out = raw_session(port, "l2", "l2", "").await;
    assert!(
        out.contains("-ERR 'maximum account active connections exceeded'"),
        "{server:?}: {out:?}"
    );
    drop(first);
    // Once the first is gone the account has room again (the server sees
    // the close a moment later).
    let mut out = String::new();
    for _ in 0..50 {
        out = raw_session(
            port,
            "l",
            "l",
            &format!(
                "SUB s.1 1\r\nSUB s.2 2\r\nSUB s.3 3\r\nPUB s.1 200\r\n{}\r\n",
                "x".repeat(200)
            ),
        )
        .await;
        if !out.contains("connections exceeded") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        out.contains("-ERR 'maximum subscriptions exceeded'"),
        "{server:?}: {out:?}"
    );
    assert!(
        out.contains("-ERR 'Maximum Payload Violation'"),
        "{server:?}: {out:?}"
    );
    // Another account: no limits.
    let f1 = connect_as(&url, "f", "f").await;
    let f2 = connect_as(&url, "f", "f").await;
    let out = raw_session(port, "f", "f", "SUB s.1 1\r\nSUB s.2 2\r\nSUB s.3 3\r\n").await;
    assert!(!out.contains("-ERR"), "{server:?}: {out:?}");
    sync(&f1).await;
    sync(&f2).await;
}

/// A raw leaf connection to `port` as `user`: CONNECT and PING, then
/// the first answer line (`PONG`, or an `-ERR`), and the connection to
/// keep it open.
async fn raw_leaf(port: u16, user: &str) -> (String, tokio::net::TcpStream) {
    use tokio::io::AsyncBufReadExt;
    let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut r = tokio::io::BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("INFO "), "{line}");
    let connect = format!(
        "CONNECT {{\"user\":\"{user}\",\"pass\":\"{user}\",\"name\":\"{user}-raw\",\"headers\":true}}\r\nPING\r\n"
    );
    r.get_mut().write_all(connect.as_bytes()).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            line.clear();
            if r.read_line(&mut line).await.unwrap() == 0 {
                return "EOF".to_string();
            }
            let l = line.trim_end();
            if l == "PONG" || l.starts_with("-ERR") {
                return l.to_string();
            }
        }
    })
    .await
    .expect("an answer within 5s");
    (answer, r.into_inner())
}

/// An account's `max_leafnodes` caps the leaf connections bound to it:
/// the second gets nats-server's `-ERR` (in config mode an authorization
/// failure; an account JWT's limit is named, see nats_leaf_jwt_limits);
/// the same body on both servers.
async fn leaf_limit_body(server: Server) {
    let (port, http, leaf) = (free_port(), free_port(), free_port());
    let conf = format!(
        r#"
listen: 127.0.0.1:{port}
http: 127.0.0.1:{http}
accounts {{
  L {{ users: [ {{user: u, password: u}} ], limits {{ max_leafnodes: 1 }} }}
  F {{ users: [ {{user: f, password: f}} ] }}
}}
leafnodes {{
  listen: 127.0.0.1:{leaf}
  authorization {{ users: [ {{user: e, password: e, account: L}}, {{user: o, password: o, account: F}} ] }}
}}
"#
    );
    let _p = start(server, &conf, &[port, http, leaf]).await;
    let (first, _keep) = raw_leaf(leaf, "e").await;
    assert_eq!(first, "PONG", "{server:?}");
    let (second, _gone) = raw_leaf(leaf, "e").await;
    assert_eq!(second, "-ERR 'Authorization Violation'", "{server:?}");
    let (other, _keep_other) = raw_leaf(leaf, "o").await;
    assert_eq!(other, "PONG", "{server:?}: another account's leaf");
}

#[tokio::test]
async fn nats_accounts_leaf_limit_ours() {
    leaf_limit_body(Server::Ours).await;
}

#[tokio::test]
async fn nats_accounts_leaf_limit_go_2_15_same_body() {
    leaf_limit_body(Server::Go).await;
}

#[tokio::test]
async fn nats_accounts_limits_ours() {
    limits_body(Server::Ours).await;
}

#[tokio::test]
async fn nats_accounts_limits_go_2_15_same_body() {
    limits_body(Server::Go).await;
}

/// Starts `server` on `conf` and returns its combined output once it has
/// exited (it must refuse the config within 20 s).
async fn refused(server: Server, conf: &str) -> String {
    spawn(server, conf)
        .exit_log(Duration::from_secs(20), "the server to exit")
        .await
}

#[tokio::test]
async fn nats_accounts_bad_configs_are_refused_as_nats_server_does() {
    let port = free_port();
    let cases = [
        (
            "import of an account that does not exist",
            format!(
                "listen: 127.0.0.1:{port}\naccounts {{\n  B {{ users: [ {{user: b, password: b}} ]\n    imports: [ {{stream: {{account: NOPE, subject: \"x.>\"}}}} ] }}\n}}\n"
            ),
            "\"NOPE\" account not defined for stream import",
        ),
        (
            "import of an unexported subject",
            format!(
                "listen: 127.0.0.1:{port}\naccounts {{\n  A {{ users: [ {{user: a, password: a}} ]\n    exports: [ {{stream: \"public.>\"}} ] }}\n  B {{ users: [ {{user: b, password: b}} ]\n    imports: [ {{stream: {{account: A, subject: \"secret.>\"}}}} ] }}\n}}\n"
            ),
            "Error adding stream import \"secret.>\": stream import not authorized",
        ),
        (
            "service import of a subject exported as a stream only",
            format!(
                "listen: 127.0.0.1:{port}\naccounts {{\n  A {{ users: [ {{user: a, password: a}} ]\n    exports: [ {{stream: \"svc.>\"}} ] }}\n  B {{ users: [ {{user: b, password: b}} ]\n    imports: [ {{service: {{account: A, subject: \"svc.x\"}}}} ] }}\n}}\n"
            ),
            "Error adding service import \"svc.x\": service import not authorized",
        ),
        (
            "duplicate users across accounts",
            format!(
                "listen: 127.0.0.1:{port}\naccounts {{\n  A {{ users: [ {{user: same, password: a}} ] }}\n  B {{ users: [ {{user: same, password: b}} ] }}\n}}\n"
            ),
            "Duplicate user \"same\" detected",
        ),
        (
            "a user of authorization {} and of an account",
            format!(
                "listen: 127.0.0.1:{port}\nauthorization {{ users: [ {{user: same, password: x}} ] }}\naccounts {{\n  A {{ users: [ {{user: same, password: a}} ] }}\n}}\n"
            ),
            "Duplicate user \"same\" detected",
        ),
        (
            "the reserved global account",
            format!("listen: 127.0.0.1:{port}\naccounts {{\n  $G {{ users: [ {{user: g, password: g}} ] }}\n}}\n"),
            "\"$G\" is a Reserved Account",
        ),
    ];
    for (what, conf, want) in cases {
        for server in [Server::Ours, Server::Go] {
            let out = refused(server, &conf).await;
            assert!(
                out.contains(want),
                "{server:?}, {what}: expected {want:?} in:\n{out}"
            );
        }
    }
}

/// A full node (`liftbridge -c`) with `nats.account: A`: a stream on
/// `rec.x` records what account A's clients publish there, never what
/// account B's clients publish on the same subject.
#[tokio::test]
async fn nats_accounts_stream_records_the_configured_account() {
    use liftbridge::api::proto::{self, api_client::ApiClient};

    let (grpc, client_port, http) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("nats.conf");
    std::fs::write(
        &conf,
        "accounts {\n  A { users: [ {user: a, password: apw} ] }\n  B { users: [ {user: b, password: bpw} ] }\n}\n",
    )
    .unwrap();
    let yaml = format!(
        "listen: 127.0.0.1:{grpc}\ndata.dir: {data}\nclustering.raft.bootstrap.seed: true\nhttp.listen: 127.0.0.1:{http}\nnats:\n  listen: 127.0.0.1:{client_port}\n  embedded.config: {conf}\n  account: A\n",
        data = dir.path().join("data").display(),
        conf = conf.display(),
    );
    let mut node = spawn_liftbridge(&yaml, tempfile::tempdir().unwrap());
    for p in [client_port, grpc] {
        node.try_wait_port(p).await.unwrap();
    }
    // The API answers once the node is the controller; retry until then.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut api = loop {
        if let Ok(mut c) = ApiClient::connect(format!("http://127.0.0.1:{grpc}")).await {
            let created = c
                .create_stream(proto::CreateStreamRequest {
                    subject: "rec.x".into(),
                    name: "rec".into(),
                    partitions: 1,
                    ..Default::default()
                })
                .await;
            if created.is_ok() {
                break c;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "stream not created within 30s; log:\n{}",
            node.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let url = format!("nats://127.0.0.1:{client_port}");
    let a = connect_as(&url, "a", "apw").await;
    let b = connect_as(&url, "b", "bpw").await;
    // The recorder subscribes in A when the partition starts: wait until a
    // publish of A is recorded before the real sequence.
    crate::support::wait_until(Duration::from_secs(20), "the partition to record", || {
        let (a, mut api) = (a.clone(), api.clone());
        async move {
            a.publish("rec.x", "warmup".into()).await.unwrap();
            a.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            api.fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
                stream: "rec".into(),
                partition: 0,
            })
            .await
            .ok()
            .and_then(|r| r.into_inner().metadata)
            .is_some_and(|m| m.newest_offset >= 0)
        }
    })
    .await;
    for (c, payload) in [(&a, "a-1"), (&b, "b-1"), (&a, "a-2"), (&b, "b-2")] {
        c.publish("rec.x", payload.into()).await.unwrap();
        c.flush().await.unwrap();
    }
    let mut s = api
        .subscribe(proto::SubscribeRequest {
            stream: "rec".into(),
            partition: 0,
            start_position: proto::StartPosition::Earliest as i32,
            ..Default::default()
        })
        .await
        .expect("subscribe")
        .into_inner();
    let mut got = Vec::new();
    let read = async {
        while let Some(m) = s.next().await {
            let m = m.expect("message");
            if m == proto::Message::default() {
                continue; // the handshake
            }
            let v = String::from_utf8_lossy(&m.value).into_owned();
            if v == "warmup" {
                continue;
            }
            got.push(v);
            if got.len() == 2 {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("A's two messages recorded");
    assert_eq!(got, vec!["a-1".to_string(), "a-2".to_string()]);
    // Nothing of B's after a-2 either: the newest offset is a-2's.
    let md = api
        .fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
            stream: "rec".into(),
            partition: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .metadata
        .unwrap();
    let mut all = api
        .subscribe(proto::SubscribeRequest {
            stream: "rec".into(),
            partition: 0,
            start_position: proto::StartPosition::Earliest as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut values = Vec::new();
    let read_all = async {
        while let Some(Ok(m)) = all.next().await {
            if m == proto::Message::default() {
                continue;
            }
            let last = m.offset >= md.newest_offset;
            values.push(String::from_utf8_lossy(&m.value).into_owned());
            if last {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read_all)
        .await
        .expect("whole partition read");
    assert!(
        values.iter().all(|v| v == "warmup" || v.starts_with("a-")),
        "{values:?}"
    );

    // An unknown account is refused at start-up, naming the key.
    let dir2 = tempfile::tempdir().unwrap();
    let yaml2 = yaml.replace("account: A", "account: NOPE").replace(
        &dir.path().join("data").display().to_string(),
        &dir2.path().join("data").display().to_string(),
    );
    let log = spawn_liftbridge(&yaml2, dir2)
        .exit_log(Duration::from_secs(20), "the bad node to exit")
        .await;
    assert!(
        log.contains("nats.account") && log.contains("NOPE"),
        "{log}"
    );
}
