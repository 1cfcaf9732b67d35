//! Account JWTs pushed while the server runs (operator mode, full
//! resolver), against our server and Go nats-server 2.15.1 with the same
//! config and the same test body.
//!
//! Single server: an account first pushed at run time admits its users at
//! once (refused before the push); accounts stay isolated; exports and
//! imports added by later pushes carry a stream and a service between
//! accounts, and a push that drops the export stops the stream; a pushed
//! JWT replaces the stored one even when older, as nats-server does.
//!
//! Cluster of three: a push sent to one node reaches all of them (a new
//! account's users connect to any node, and its messages cross routes);
//! an import pushed while a subscriber of the importer is connected on
//! another node than the publisher starts the flow for that subscriber;
//! a node that was down during a push knows the account once it rejoins,
//! and its older copy of a JWT pushed meanwhile does not replace the newer
//! one anywhere.
//!
//! Account expiry: when an account JWT's `exp` passes, its connected users
//! get `-ERR 'Account Authentication Expired'` and are closed, new ones are
//! refused, other accounts are untouched. Account delete (`allow_delete`):
//! an operator-signed `$SYS.REQ.CLAIMS.DELETE` does the same to the
//! account and renames its file; one not self-signed is refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use liftbridge::nats::jwt::{self, AccountNats, Export, Import};

use crate::support::jwt::{account_jwt, operator_jwt, user_jwt, write_creds};
use crate::support::procs::{go_nats_server_2_15, Impl, NatsNode};
use crate::support::sync;
use crate::support::{drain, until_flowing};

const T: Duration = Duration::from_secs(5);
const WAIT: Duration = Duration::from_secs(20);

/// Keys, config and creds shared by every node of a run.
pub(crate) struct Setup {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) op: nkeys::KeyPair,
    pub(crate) sys: nkeys::KeyPair,
    /// Preloaded; exports a stream and a service once pushed so.
    pub(crate) a: nkeys::KeyPair,
    /// Pushed at run time; imports from A once pushed so.
    pub(crate) n: nkeys::KeyPair,
    /// Pushed while one node of the cluster is down.
    pub(crate) m: nkeys::KeyPair,
}

impl Setup {
    pub(crate) fn new() -> Setup {
        Setup {
            dir: tempfile::tempdir().unwrap(),
            op: nkeys::KeyPair::new_operator(),
            sys: nkeys::KeyPair::new_account(),
            a: nkeys::KeyPair::new_account(),
            n: nkeys::KeyPair::new_account(),
            m: nkeys::KeyPair::new_account(),
        }
    }

    pub(crate) fn jwt(
        &self,
        acc: &nkeys::KeyPair,
        iat: i64,
        f: impl FnOnce(&mut AccountNats),
    ) -> String {
        // `iat` orders the pushes: a store keeps the newest.
        let token = account_jwt(&self.op, &acc.public_key(), "acc", f);
        let mut claims = jwt::decode_account(&token).unwrap();
        claims.iat = iat;
        jwt::encode(&claims, &self.op).unwrap()
    }

    /// A's JWT exporting `feed.>` and the service `svc.>` (or nothing).
    fn a_jwt(&self, iat: i64, exports: bool) -> String {
        self.jwt(&self.a, iat, |n| {
            if exports {
                n.exports = vec![
                    Export {
                        subject: "feed.>".into(),
                        kind: "stream".into(),
                        ..Default::default()
                    },
                    Export {
                        subject: "svc.>".into(),
                        kind: "service".into(),
                        ..Default::default()
                    },
                ];
            }
        })
    }

    /// N's JWT importing A's `feed.>` and `svc.time` (or nothing).
    fn n_jwt(&self, iat: i64, imports: bool) -> String {
        self.jwt(&self.n, iat, |n| {
            n.limits.conn = 50;
            if imports {
                n.imports = vec![
                    Import {
                        subject: "feed.>".into(),
                        account: self.a.public_key(),
                        kind: "stream".into(),
                        ..Default::default()
                    },
                    Import {
                        subject: "svc.time".into(),
                        account: self.a.public_key(),
                        kind: "service".into(),
                        ..Default::default()
                    },
                ];
            }
        })
    }

    /// A config file for one node (its own resolver directory); only the
    /// system account and A are preloaded.
    fn conf(&self, name: &str) -> PathBuf {
        self.conf_with(name, "")
    }

    /// [`Setup::conf`] with `more` (`key: jwt` lines) preloaded too.
    fn conf_with(&self, name: &str, more: &str) -> PathBuf {
        self.conf_full(name, more, "")
    }

    /// [`Setup::conf_with`] with `resolver` fields added.
    pub(crate) fn conf_full(&self, name: &str, more: &str, resolver: &str) -> PathBuf {
        let a = format!(
            "  {}: {}\n{more}",
            self.a.public_key(),
            self.a_jwt(1, false)
        );
        self.conf_resolver(name, &format!("type: full {resolver}"), &a)
    }

    /// A config file for one node with a `cache` resolver (its own
    /// directory, `resolver` fields more) that preloads only the system
    /// account.
    pub(crate) fn conf_cache(&self, name: &str, resolver: &str) -> PathBuf {
        self.conf_resolver(name, &format!("type: cache {resolver}"), "")
    }

    /// A config file for one node: its own resolver directory with the
    /// `resolver` fields, the system account and `more` (`key: jwt`
    /// lines) preloaded.
    fn conf_resolver(&self, name: &str, resolver: &str, more: &str) -> PathBuf {
        let text = format!(
            "server_name: {name}\n{}",
            self.resolver_top(name, resolver, more)
        );
        let path = self.dir.path().join(format!("{name}.conf"));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The operator-mode part of [`Setup::conf_resolver`]'s file (the
    /// directory is `jwt-<name>`).
    pub(crate) fn resolver_top(&self, name: &str, resolver: &str, more: &str) -> String {
        let rdir = self.dir.path().join(format!("jwt-{name}"));
        std::fs::create_dir_all(&rdir).unwrap();
        format!(
            "operator: \"{}\"\n\
             system_account: {}\n\
             resolver: {{ dir: \"{}\", {resolver} }}\n\
             resolver_preload: {{\n  {}: {}\n{more}}}\n",
            operator_jwt(&self.op, &self.sys.public_key()),
            self.sys.public_key(),
            rdir.display(),
            self.sys.public_key(),
            self.jwt(&self.sys, 1, |_| {}),
        )
    }

    /// A creds file of a new user of `acc`.
    pub(crate) fn creds(&self, name: &str, acc: &nkeys::KeyPair) -> PathBuf {
        let user = nkeys::KeyPair::new_user();
        let token = user_jwt(acc, &user, |c| c.name = name.into());
        let p = self.dir.path().join(format!("{name}.creds"));
        write_creds(&p, &token, &user);
        p
    }
}

pub(crate) async fn connect(url: &str, creds: &Path) -> Result<async_nats::Client, String> {
    async_nats::ConnectOptions::new()
        .credentials_file(creds)
        .await
        .map_err(|e| e.to_string())?
        .connection_timeout(T)
        .connect(url)
        .await
        .map_err(|e| e.to_string())
}

/// Connects once, without retrying: `Err` when the server refuses.
pub(crate) async fn connect_once(url: &str, creds: &Path) -> Result<async_nats::Client, String> {
    let c = async_nats::ConnectOptions::new()
        .credentials_file(creds)
        .await
        .map_err(|e| e.to_string())?
        .connection_timeout(T);
    c.connect(url).await.map_err(|e| e.to_string())
}

/// Waits until a user of `creds` is admitted by the server at `url`.
pub(crate) async fn wait_admitted(url: &str, creds: &Path, what: &str) -> async_nats::Client {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match connect_once(url, creds).await {
            Ok(c) => return c,
            Err(e) if tokio::time::Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Pushes `token` on `$SYS.REQ.CLAIMS.UPDATE` and returns the first reply.
pub(crate) async fn push(sys: &async_nats::Client, token: &str) -> serde_json::Value {
    let reply = tokio::time::timeout(
        T,
        sys.request("$SYS.REQ.CLAIMS.UPDATE", token.to_string().into()),
    )
    .await
    .expect("push answered in time")
    .expect("push answered");
    serde_json::from_slice(&reply.payload).unwrap()
}

pub(crate) fn assert_updated(v: &serde_json::Value, what: &str) {
    assert_eq!(v["data"]["message"], "jwt updated", "{what}: {v}");
}

pub(crate) async fn next(sub: &mut async_nats::Subscriber, what: &str) -> async_nats::Message {
    tokio::time::timeout(T, sub.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing arrived"))
        .unwrap()
}

async fn assert_quiet(sub: &mut async_nats::Subscriber, what: &str) {
    if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(400), sub.next()).await {
        panic!("{what}: got {:?}", m.subject);
    }
}

/// Answers every request on `sub` with `tag`.
fn serve(c: async_nats::Client, mut sub: async_nats::Subscriber, tag: &'static str) {
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            if let Some(r) = m.reply {
                let _ = c.publish(r, tag.into()).await;
            }
        }
    });
}

async fn start(imp: &Impl, setup: &Setup, name: &str, routes: &[u16]) -> NatsNode {
    let conf = setup.conf(name);
    let conf = conf.display().to_string();
    NatsNode::start_with(imp, "push", routes, &["-c", &conf]).await
}

/// The single-server body (see the module doc).
async fn single(imp: Impl) {
    let setup = Setup::new();
    let node = start(&imp, &setup, "one", &[]).await;
    let url = node.url();
    let sys = connect(&url, &setup.creds("sys", &setup.sys))
        .await
        .unwrap();
    let n_creds = setup.creds("n", &setup.n);
    let err = connect_once(&url, &n_creds)
        .await
        .err()
        .unwrap_or_else(|| panic!("{imp:?}: a user of an unknown account was admitted"));
    assert!(
        err.to_lowercase().contains("authorization"),
        "{imp:?}: {err}"
    );

    // The new account: its users are admitted, its subjects its own.
    let now = jwt::unix_now();
    assert_updated(&push(&sys, &setup.n_jwt(now - 100, false)).await, "push N");
    let n = wait_admitted(&url, &n_creds, "N after its push").await;
    let a = connect(&url, &setup.creds("a", &setup.a)).await.unwrap();
    let mut n_x = n.subscribe("x.>").await.unwrap();
    let mut a_x = a.subscribe("x.>").await.unwrap();
    let mut n_feed = n.subscribe("feed.>").await.unwrap();
    sync(&n).await;
    sync(&a).await;
    n.publish("x.n", "in n".into()).await.unwrap();
    assert_eq!(next(&mut n_x, "N's own message").await.payload, "in n");
    assert_quiet(&mut a_x, "A sees nothing of N").await;

    // Exports and imports arrive by push; the subscriber made before
    // them gets the stream.
    assert_updated(&push(&sys, &setup.a_jwt(now - 90, true)).await, "A exports");
    assert_updated(&push(&sys, &setup.n_jwt(now - 80, true)).await, "N imports");
    until_flowing(&a, &mut n_feed, "feed.1", "A's feed into N").await;
    drain(&mut n_feed).await;
    serve(a.clone(), a.subscribe("svc.>").await.unwrap(), "from A");
    sync(&a).await;
    let r = tokio::time::timeout(T, n.request("svc.time", "now?".into()))
        .await
        .expect("service answered in time")
        .expect("service answered");
    assert_eq!(r.payload, "from A");

    // A drops its exports: the stream stops.
    assert_updated(
        &push(&sys, &setup.a_jwt(now - 70, false)).await,
        "A without exports",
    );
    assert_stops(
        &a,
        &mut n_feed,
        "feed.2",
        &format!("{imp:?}: without the export"),
    )
    .await;

    // A push replaces the stored JWT whatever its age (nats-server keeps
    // only the newest when servers catch up with each other, not on a
    // push): N's older JWT is the one looked up afterwards.
    assert_updated(&push(&sys, &setup.n_jwt(now - 500, false)).await, "older N");
    assert_eq!(
        lookup_iat(&sys, &setup.n).await,
        now - 500,
        "{imp:?}: the pushed JWT is stored"
    );
}

/// The `iat` of the JWT of `acc` the server of `sys` looks up.
pub(crate) async fn lookup_iat(sys: &async_nats::Client, acc: &nkeys::KeyPair) -> i64 {
    let looked = tokio::time::timeout(
        T,
        sys.request(
            format!("$SYS.REQ.ACCOUNT.{}.CLAIMS.LOOKUP", acc.public_key()),
            "".into(),
        ),
    )
    .await
    .expect("lookup answered in time")
    .expect("lookup answered");
    jwt::decode_account(std::str::from_utf8(&looked.payload).unwrap())
        .unwrap()
        .iat
}

/// Publishes on `subject` until `sub` stays quiet (a push takes effect a
/// moment later on other nodes).
async fn assert_stops(
    publisher: &async_nats::Client,
    sub: &mut async_nats::Subscriber,
    subject: &str,
    what: &str,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        publisher
            .publish(subject.to_string(), "gone?".into())
            .await
            .unwrap();
        publisher.flush().await.unwrap();
        match tokio::time::timeout(Duration::from_millis(400), sub.next()).await {
            Err(_) => return,
            Ok(_) => assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: still flowing"
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_push_new_account_and_imports_ours() {
    single(Impl::Liftbridge).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_push_new_account_and_imports_go_2_15() {
    single(Impl::Go(go_nats_server_2_15())).await;
}

/// The cluster body (see the module doc).
async fn cluster(imp: Impl) {
    let setup = Setup::new();
    let n1 = start(&imp, &setup, "c1", &[]).await;
    let n2 = start(&imp, &setup, "c2", &[n1.cluster_port]).await;
    let mut n3 = start(&imp, &setup, "c3", &[n1.cluster_port]).await;
    for n in [&n1, &n2, &n3] {
        n.wait_routes(2).await;
    }
    let sys = connect(&n1.url(), &setup.creds("sys", &setup.sys))
        .await
        .unwrap();
    let now = jwt::unix_now();
    assert_updated(&push(&sys, &setup.n_jwt(now - 100, false)).await, "push N");
    let n_creds = setup.creds("n", &setup.n);
    let on2 = wait_admitted(&n2.url(), &n_creds, "N on the second node").await;
    let on3 = wait_admitted(&n3.url(), &n_creds, "N on the third node").await;
    let mut x3 = on3.subscribe("x.>").await.unwrap();
    let mut feed3 = on3.subscribe("feed.>").await.unwrap();
    sync(&on3).await;
    until_flowing(&on2, &mut x3, "x.1", "N across the route").await;
    drain(&mut x3).await;

    // Exports and imports pushed to one node; the subscriber on the third
    // node (made before) gets A's stream published on the first.
    assert_updated(&push(&sys, &setup.a_jwt(now - 90, true)).await, "A exports");
    assert_updated(&push(&sys, &setup.n_jwt(now - 80, true)).await, "N imports");
    let a1 = connect(&n1.url(), &setup.creds("a", &setup.a))
        .await
        .unwrap();
    until_flowing(
        &a1,
        &mut feed3,
        "feed.1",
        "A's feed from node 1 into N on node 3",
    )
    .await;
    drain(&mut feed3).await;

    // A node down during a push learns it when it rejoins.
    n3.proc.stop(Duration::from_secs(5)).await;
    for n in [&n1, &n2] {
        n.wait_routes(1).await;
    }
    let m_jwt = setup.jwt(&setup.m, now - 60, |_| {});
    assert_updated(&push(&sys, &m_jwt).await, "push M");
    // A newer A while the node is down: its older A (with exports) must
    // not come back from it.
    assert_updated(&push(&sys, &setup.a_jwt(now - 50, false)).await, "newer A");
    n3.proc.restart();
    n3.wait_ready().await;
    n3.wait_routes(2).await;
    let m_creds = setup.creds("m", &setup.m);
    let m3 = wait_admitted(&n3.url(), &m_creds, "M on the rejoined node").await;
    let sys3 = connect(&n3.url(), &setup.creds("sys3", &setup.sys))
        .await
        .unwrap();
    for (c, node) in [(&sys, "node 1"), (&sys3, "node 3")] {
        let what = format!("{imp:?}: A's newest JWT on {node}");
        let mut iat = 0;
        // Up to 30 s: a loaded machine slows a rejoined Go node's catch-up.
        for _ in 0..300 {
            iat = lookup_iat(c, &setup.a).await;
            if iat == now - 50 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(iat, now - 50, "{what}");
    }
    let m1 = connect(&n1.url(), &m_creds).await.unwrap();
    let mut y1 = m1.subscribe("y").await.unwrap();
    sync(&m1).await;
    until_flowing(&m3, &mut y1, "y", "M from the rejoined node").await;
    drain(&mut y1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_push_reaches_every_node_ours() {
    cluster(Impl::Liftbridge).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_push_reaches_every_node_go_2_15() {
    cluster(Impl::Go(go_nats_server_2_15())).await;
}

/// Connects with `creds` (no reconnect) and passes on the server's errors.
async fn connect_watching(
    url: &str,
    creds: &Path,
) -> (
    async_nats::Client,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (tx, errors) = tokio::sync::mpsc::unbounded_channel();
    let c = async_nats::ConnectOptions::new()
        .credentials_file(creds)
        .await
        .unwrap()
        .max_reconnects(Some(0))
        .event_callback(move |e| {
            let tx = tx.clone();
            async move {
                if let async_nats::Event::ServerError(e) = e {
                    let _ = tx.send(e.to_string());
                }
            }
        })
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {} to {url}: {e}", creds.display()));
    (c, errors)
}

/// An account whose JWT expires while its users are connected: they get
/// `-ERR 'Account Authentication Expired'` and are closed, and a new user
/// of it is refused; other accounts are not touched.
async fn account_expiry(imp: Impl) {
    let setup = Setup::new();
    let exp = jwt::unix_now() + 4;
    let token = account_jwt(&setup.op, &setup.m.public_key(), "m", |_| {});
    let mut claims = jwt::decode_account(&token).unwrap();
    claims.exp = exp;
    let m_jwt = jwt::encode(&claims, &setup.op).unwrap();
    let conf = setup.conf_with("exp", &format!("  {}: {}\n", setup.m.public_key(), m_jwt));
    let conf = conf.display().to_string();
    let node = NatsNode::start_with(&imp, "exp", &[], &["-c", &conf]).await;
    let (m, mut errors) = connect_watching(&node.url(), &setup.creds("m", &setup.m)).await;
    let a = connect(&node.url(), &setup.creds("a", &setup.a))
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(15), errors.recv())
        .await
        .expect("an error at the account's expiry")
        .unwrap();
    assert!(
        err.to_lowercase()
            .contains("account authentication expired"),
        "{imp:?}: {err}"
    );
    assert!(jwt::unix_now() >= exp, "{imp:?}: closed before the expiry");
    drop(m);
    let refused = connect_once(&node.url(), &setup.creds("m2", &setup.m)).await;
    assert!(
        refused.is_err(),
        "{imp:?}: a user of the expired account got in"
    );
    // A's client is still served.
    let mut s = a.subscribe("still").await.unwrap();
    a.publish("still", "here".into()).await.unwrap();
    assert_eq!(next(&mut s, "A after M's expiry").await.payload, "here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_account_expiry_closes_its_users_ours() {
    account_expiry(Impl::Liftbridge).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_account_expiry_closes_its_users_go_2_15() {
    account_expiry(Impl::Go(go_nats_server_2_15())).await;
}

/// An operator's `$SYS.REQ.CLAIMS.DELETE` (`allow_delete: true`): the
/// account's connected user gets `-ERR 'Account Authentication Expired'`,
/// new users are refused, its file becomes `<key>.jwt.deleted`; a request
/// that is not self-signed by the operator is refused with nats-server's
/// reply.
async fn account_delete(imp: Impl) {
    let setup = Setup::new();
    let m_jwt = setup.jwt(&setup.m, jwt::unix_now() - 10, |_| {});
    let conf = setup.conf_full(
        "del",
        &format!("  {}: {}\n", setup.m.public_key(), m_jwt),
        ", allow_delete: true",
    );
    let conf = conf.display().to_string();
    let node = NatsNode::start_with(&imp, "del", &[], &["-c", &conf]).await;
    let sys = connect(&node.url(), &setup.creds("sys", &setup.sys))
        .await
        .unwrap();
    let (_m, mut errors) = connect_watching(&node.url(), &setup.creds("m", &setup.m)).await;
    let request = |sub: String, accounts: Vec<String>| {
        let claims = jwt::Claims {
            iss: setup.op.public_key(),
            sub,
            nats: serde_json::json!({ "accounts": accounts }),
            ..Default::default()
        };
        jwt::encode(&claims, &setup.op).unwrap()
    };
    let ask = |token: String| {
        let sys = sys.clone();
        async move {
            let r = tokio::time::timeout(T, sys.request("$SYS.REQ.CLAIMS.DELETE", token.into()))
                .await
                .expect("delete answered in time")
                .expect("delete answered");
            serde_json::from_slice::<serde_json::Value>(&r.payload).unwrap()
        }
    };
    let v = ask(request(setup.a.public_key(), vec![setup.m.public_key()])).await;
    assert_eq!(
        v["error"]["description"],
        format!(
            "delete accounts request by {} failed - not self signed",
            setup.a.public_key()
        ),
        "{imp:?}: {v}"
    );
    let v = ask(request(setup.op.public_key(), vec![setup.m.public_key()])).await;
    assert_eq!(v["data"]["message"], "deleted 1 accounts", "{imp:?}: {v}");
    let err = tokio::time::timeout(Duration::from_secs(10), errors.recv())
        .await
        .expect("an error for the deleted account's user")
        .unwrap();
    assert!(
        err.to_lowercase()
            .contains("account authentication expired"),
        "{imp:?}: {err}"
    );
    let refused = connect_once(&node.url(), &setup.creds("m2", &setup.m)).await;
    assert!(
        refused.is_err(),
        "{imp:?}: a user of the deleted account got in"
    );
    let rdir = setup.dir.path().join("jwt-del");
    let key = setup.m.public_key();
    assert!(rdir.join(format!("{key}.jwt.deleted")).exists(), "{imp:?}");
    assert!(!rdir.join(format!("{key}.jwt")).exists(), "{imp:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_account_delete_ours() {
    account_delete(Impl::Liftbridge).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jwt_account_delete_go_2_15() {
    account_delete(Impl::Go(go_nats_server_2_15())).await;
}
