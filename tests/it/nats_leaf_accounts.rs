//! Contract: a leaf connection is bound to one account on each side, and
//! only that account's subjects cross it — in both roles, with our server
//! and Go nats-server (2.15.1 and Debian's 2.9.10) on the other end.
//!
//! Each test links a leaf server with two local accounts (LA, LB) to a hub
//! with two accounts (A, B) over two remotes, LA ↔ A and LB ↔ B, and checks
//! with async-nats clients: messages cross both ways within the linked
//! accounts; a message published in LB on the leaf never reaches an A
//! subscriber on the hub, and one published in B on the hub never reaches
//! an LA subscriber on the leaf; `/leafz` names each connection's account.
//! The hub binds leaves through its client users (URL `user:pass@`),
//! through `leafnodes { authorization { users [ {…, account} ] } }`, or in
//! operator mode through user JWTs (remote `credentials`). Bad input: a
//! creds file whose seed does not sign for its JWT is refused by the hub
//! with `Authorization Violation`, our leaf logs it and retries, and the
//! other remote of the same leaf keeps working; an unreadable creds file
//! or an unknown account is a start-up error naming it. A loop within one
//! account is reported with that account's name.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::support::jwt::{account_jwt, operator_jwt, user_jwt, write_creds};
use crate::support::procs::{
    go_nats_server_2_15, go_nats_server_2_9, ConfNode, Impl, Proc, START_TIMEOUT,
};
use crate::support::{free_port, wait_until};

const WAIT: Duration = Duration::from_secs(20);

async fn next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("message in time")
        .expect("subscription open")
}

async fn connect_user(node: &ConfNode, user: &str) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password(user.into(), user.into())
        .connect(node.url())
        .await
        .unwrap_or_else(|e| panic!("connect {} as {user}: {e}", node.url()))
}

async fn connect_creds(node: &ConfNode, creds: &Path) -> async_nats::Client {
    async_nats::ConnectOptions::with_credentials_file(creds)
        .await
        .unwrap_or_else(|e| panic!("read {}: {e}", creds.display()))
        .connect(node.url())
        .await
        .unwrap_or_else(|e| panic!("connect {} with creds: {e}", node.url()))
}

/// The accounts `/leafz` reports, sorted.
async fn leaf_accounts(node: &ConfNode) -> Vec<String> {
    let z = node.leafz().await;
    let mut v: Vec<String> = z["leafs"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|x| x["account"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Waits until the leaf connection of `node` bound to `account` carries
/// the peer's interest in `subject`.
async fn wait_interest(node: &ConfNode, account: &str, subject: &str) {
    let what = format!(
        "leaf interest in {subject} on the {account} connection of :{}",
        node.client_port
    );
    wait_until(START_TIMEOUT, &what, || async {
        node.leafz().await["leafs"].as_array().is_some_and(|l| {
            l.iter().any(|leaf| {
                leaf["account"].as_str() == Some(account)
                    && leaf["subscriptions_list"]
                        .as_array()
                        .is_some_and(|s| s.iter().any(|x| x.as_str() == Some(subject)))
            })
        })
    })
    .await;
}

/// Subscribes `c` to `subject` and waits until `peer`'s connection bound
/// to `peer_account` has the interest.
async fn sub_seen(
    c: &async_nats::Client,
    subject: &str,
    peer: &ConfNode,
    peer_account: &str,
) -> async_nats::Subscriber {
    let s = c.subscribe(subject.to_string()).await.unwrap();
    c.flush().await.unwrap();
    wait_interest(peer, peer_account, subject).await;
    s
}

async fn publish_n(c: &async_nats::Client, subject: &str, tag: &str, n: usize) {
    for i in 0..n {
        c.publish(subject.to_string(), Bytes::from(format!("{tag}{i}")))
            .await
            .unwrap();
    }
    c.flush().await.unwrap();
}

async fn expect_n(s: &mut async_nats::Subscriber, tag: &str, n: usize) {
    for i in 0..n {
        assert_eq!(
            next(s).await.payload,
            Bytes::from(format!("{tag}{i}")),
            "{tag} #{i}"
        );
    }
}

/// The clients of one side: one per account.
struct Side<'a> {
    node: &'a ConfNode,
    /// Clients in the first (A or LA) and second (B or LB) account.
    a: async_nats::Client,
    b: async_nats::Client,
    /// The accounts' names as this side's `/leafz` shows them.
    acc_a: String,
    acc_b: String,
}

/// Across the two links between `hub` and `leaf`: each account reaches its
/// peer account both ways, and never the other one.
async fn check_isolation(hub: &Side<'_>, leaf: &Side<'_>) {
    // Both sides see two connections, one per account.
    let mut want = vec![hub.acc_a.clone(), hub.acc_b.clone()];
    want.sort();
    wait_until(START_TIMEOUT, "the hub binds both accounts", || async {
        leaf_accounts(hub.node).await == want
    })
    .await;
    let mut want = vec![leaf.acc_a.clone(), leaf.acc_b.clone()];
    want.sort();
    wait_until(START_TIMEOUT, "the leaf binds both accounts", || async {
        leaf_accounts(leaf.node).await == want
    })
    .await;

    // Leaf → hub, A: an A subscriber on the hub gets LA's messages.
    let mut up_a = sub_seen(&hub.a, "iso.up", leaf.node, &leaf.acc_a).await;
    let mut up_b = sub_seen(&hub.b, "iso.up", leaf.node, &leaf.acc_b).await;
    // LB publishes first: B on the hub gets all of it...
    publish_n(&leaf.b, "iso.up", "from-lb-", 20).await;
    expect_n(&mut up_b, "from-lb-", 20).await;
    // ...and then LA: the A subscriber's first message is LA's, so none
    // of LB's (delivered before, over the other link) reached it.
    publish_n(&leaf.a, "iso.up", "from-la-", 20).await;
    expect_n(&mut up_a, "from-la-", 20).await;
    // Nor did LA's reach B.
    publish_n(&leaf.b, "iso.up", "again-lb-", 1).await;
    expect_n(&mut up_b, "again-lb-", 1).await;

    // Hub → leaf, the same the other way round.
    let mut down_a = sub_seen(&leaf.a, "iso.down", hub.node, &hub.acc_a).await;
    let mut down_b = sub_seen(&leaf.b, "iso.down", hub.node, &hub.acc_b).await;
    publish_n(&hub.b, "iso.down", "from-b-", 20).await;
    expect_n(&mut down_b, "from-b-", 20).await;
    publish_n(&hub.a, "iso.down", "from-a-", 20).await;
    expect_n(&mut down_a, "from-a-", 20).await;
    publish_n(&hub.b, "iso.down", "again-b-", 1).await;
    expect_n(&mut down_b, "again-b-", 1).await;

    // Request/reply within an account, both ways (reply inboxes cross).
    let mut svc = sub_seen(&hub.a, "svc.a", leaf.node, &leaf.acc_a).await;
    let responder = hub.a.clone();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            if let Some(r) = m.reply {
                let _ = responder.publish(r, m.payload).await;
                let _ = responder.flush().await;
            }
        }
    });
    for i in 0..3 {
        let r = tokio::time::timeout(WAIT, leaf.a.request("svc.a", format!("q{i}").into()))
            .await
            .expect("reply in time")
            .expect("reply through the A link");
        assert_eq!(r.payload, Bytes::from(format!("q{i}")));
    }
    // The service exists in A only: LB gets no responders.
    let r = tokio::time::timeout(WAIT, leaf.b.request("svc.a", "x".into()))
        .await
        .expect("an answer in time");
    assert!(r.is_err(), "a request in LB must not reach A's service");
}

const HUB_ACCOUNTS: &str = "accounts {\n  A { users [ {user: a, password: a}, {user: ea, password: ea} ] }\n  B { users [ {user: b, password: b}, {user: eb, password: eb} ] }\n}\n";
const LEAF_ACCOUNTS: &str = "accounts {\n  LA { users [ {user: la, password: la} ] }\n  LB { users [ {user: lb, password: lb} ] }\n}\n";

/// How the hub authenticates and binds the two remotes.
#[derive(Clone, Copy)]
enum HubAuth {
    /// The hub's client users (`a`/`b` in the remote URLs).
    ClientUsers,
    /// `leafnodes { authorization { users [ {user, password, account} ] } }`.
    LeafUsers,
}

/// A hub with accounts A and B, a leaf with LA and LB, two remotes.
async fn user_pair(hub_imp: &Impl, leaf_imp: &Impl, auth: HubAuth, tag: &str) {
    let hub_leaf_body = match auth {
        HubAuth::ClientUsers => "",
        HubAuth::LeafUsers => {
            "authorization { users [ {user: edge-a, password: pa, account: A}, {user: edge-b, password: pb, account: B} ] }"
        }
    };
    let hub = ConfNode::start_with(
        hub_imp,
        &format!("hub-{tag}"),
        true,
        Some(hub_leaf_body),
        HUB_ACCOUNTS,
    )
    .await;
    let port = hub.leaf_port.unwrap();
    let (ua, ub) = match auth {
        HubAuth::ClientUsers => ("a:a", "b:b"),
        HubAuth::LeafUsers => ("edge-a:pa", "edge-b:pb"),
    };
    // No `reconnect` here: nats-server 2.9 reads it as whole seconds only.
    let remotes = format!(
        "remotes [\n  {{ url: \"nats-leaf://{ua}@127.0.0.1:{port}\", account: LA }}\n  {{ url: \"nats-leaf://{ub}@127.0.0.1:{port}\", local: LB }}\n]"
    );
    let leaf = ConfNode::start_with(
        leaf_imp,
        &format!("leaf-{tag}"),
        false,
        Some(&remotes),
        LEAF_ACCOUNTS,
    )
    .await;
    let hub_side = Side {
        node: &hub,
        a: connect_user(&hub, "a").await,
        b: connect_user(&hub, "b").await,
        acc_a: "A".into(),
        acc_b: "B".into(),
    };
    let leaf_side = Side {
        node: &leaf,
        a: connect_user(&leaf, "la").await,
        b: connect_user(&leaf, "lb").await,
        acc_a: "LA".into(),
        acc_b: "LB".into(),
    };
    check_isolation(&hub_side, &leaf_side).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_ours_on_both_ends() {
    user_pair(
        &Impl::Liftbridge,
        &Impl::Liftbridge,
        HubAuth::ClientUsers,
        "lb",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_ours_hub_leaf_users() {
    user_pair(
        &Impl::Liftbridge,
        &Impl::Liftbridge,
        HubAuth::LeafUsers,
        "lu",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_ours_as_leaf_of_go_2_15() {
    let go = Impl::Go(go_nats_server_2_15());
    user_pair(&go, &Impl::Liftbridge, HubAuth::ClientUsers, "g15").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_ours_as_leaf_of_go_2_9() {
    let go = Impl::Go(go_nats_server_2_9());
    user_pair(&go, &Impl::Liftbridge, HubAuth::LeafUsers, "g9").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_go_2_15_leaf_of_ours() {
    let go = Impl::Go(go_nats_server_2_15());
    user_pair(&Impl::Liftbridge, &go, HubAuth::LeafUsers, "l15").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_go_2_9_leaf_of_ours() {
    let go = Impl::Go(go_nats_server_2_9());
    user_pair(&Impl::Liftbridge, &go, HubAuth::ClientUsers, "l9").await;
}

/// Operator-mode keys for a hub: an operator, accounts A, B and SYS, and
/// the creds files of users in them.
struct Operator {
    dir: tempfile::TempDir,
    op: nkeys::KeyPair,
    a: nkeys::KeyPair,
    b: nkeys::KeyPair,
    sys: nkeys::KeyPair,
}

impl Operator {
    fn new() -> Operator {
        Operator {
            dir: tempfile::tempdir().unwrap(),
            op: nkeys::KeyPair::new_operator(),
            a: nkeys::KeyPair::new_account(),
            b: nkeys::KeyPair::new_account(),
            sys: nkeys::KeyPair::new_account(),
        }
    }

    fn account_jwt(&self, acc: &nkeys::KeyPair, name: &str) -> String {
        account_jwt(&self.op, &acc.public_key(), name, |_| {})
    }

    /// The top-level config of a hub in operator mode (MEMORY resolver).
    fn hub_conf(&self) -> String {
        let op_jwt = operator_jwt(&self.op, &self.sys.public_key());
        let op_file = self.dir.path().join("op.jwt");
        std::fs::write(&op_file, op_jwt).unwrap();
        format!(
            "operator: \"{}\"\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n  {}: {}\n  {}: {}\n  {}: {}\n}}\n",
            op_file.display(),
            self.sys.public_key(),
            self.a.public_key(),
            self.account_jwt(&self.a, "A"),
            self.b.public_key(),
            self.account_jwt(&self.b, "B"),
            self.sys.public_key(),
            self.account_jwt(&self.sys, "SYS"),
        )
    }

    /// A creds file for a new user of `acc`; `seed_of` signs instead of the
    /// user's own key when given (a creds file with a wrong signature).
    fn creds(&self, acc: &nkeys::KeyPair, name: &str, wrong_seed: bool) -> PathBuf {
        let user = nkeys::KeyPair::new_user();
        let token = user_jwt(acc, &user, |c| c.name = name.into());
        let signer = if wrong_seed {
            nkeys::KeyPair::new_user()
        } else {
            user
        };
        let p = self.dir.path().join(format!("{name}.creds"));
        write_creds(&p, &token, &signer);
        p
    }
}

/// A hub in operator mode with accounts A and B; the leaf binds LA and LB
/// with the creds of a user in A and one in B.
async fn creds_pair(hub_imp: &Impl, leaf_imp: &Impl, tag: &str) {
    let op = Operator::new();
    let hub = ConfNode::start_with(
        hub_imp,
        &format!("ophub-{tag}"),
        true,
        Some(""),
        &op.hub_conf(),
    )
    .await;
    let port = hub.leaf_port.unwrap();
    let (la, lb) = (
        op.creds(&op.a, "leaf-a", false),
        op.creds(&op.b, "leaf-b", false),
    );
    // No `reconnect` here: nats-server 2.9 reads it as whole seconds only.
    let remotes = format!(
        "remotes [\n  {{ url: \"nats-leaf://127.0.0.1:{port}\", account: LA, credentials: \"{}\" }}\n  {{ url: \"nats-leaf://127.0.0.1:{port}\", account: LB, credentials: \"{}\" }}\n]",
        la.display(),
        lb.display()
    );
    let leaf = ConfNode::start_with(
        leaf_imp,
        &format!("opleaf-{tag}"),
        false,
        Some(&remotes),
        LEAF_ACCOUNTS,
    )
    .await;
    let (ca, cb) = (
        op.creds(&op.a, "client-a", false),
        op.creds(&op.b, "client-b", false),
    );
    let hub_side = Side {
        node: &hub,
        a: connect_creds(&hub, &ca).await,
        b: connect_creds(&hub, &cb).await,
        acc_a: op.a.public_key(),
        acc_b: op.b.public_key(),
    };
    let leaf_side = Side {
        node: &leaf,
        a: connect_user(&leaf, "la").await,
        b: connect_user(&leaf, "lb").await,
        acc_a: "LA".into(),
        acc_b: "LB".into(),
    };
    check_isolation(&hub_side, &leaf_side).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_creds_ours_on_both_ends() {
    creds_pair(&Impl::Liftbridge, &Impl::Liftbridge, "lb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_creds_ours_as_leaf_of_go_2_15() {
    creds_pair(&Impl::Go(go_nats_server_2_15()), &Impl::Liftbridge, "g15").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_creds_ours_as_leaf_of_go_2_9() {
    creds_pair(&Impl::Go(go_nats_server_2_9()), &Impl::Liftbridge, "g9").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_creds_go_2_15_leaf_of_ours() {
    creds_pair(&Impl::Liftbridge, &Impl::Go(go_nats_server_2_15()), "l15").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_creds_go_2_9_leaf_of_ours() {
    creds_pair(&Impl::Liftbridge, &Impl::Go(go_nats_server_2_9()), "l9").await;
}

/// A remote whose creds file has a seed that does not match its JWT: the
/// hub (Go 2.15.1 or ours) refuses it with `Authorization Violation`; our
/// leaf logs the refusal and keeps retrying; its other remote (good creds)
/// stays up and carries traffic, and local clients are unaffected.
async fn wrong_signature(hub_imp: &Impl, tag: &str) {
    let op = Operator::new();
    let hub = ConfNode::start_with(
        hub_imp,
        &format!("badhub-{tag}"),
        true,
        Some(""),
        &op.hub_conf(),
    )
    .await;
    let port = hub.leaf_port.unwrap();
    let good = op.creds(&op.a, "good", false);
    let bad = op.creds(&op.b, "bad", true);
    let remotes = format!(
        "reconnect: 200ms\nremotes [\n  {{ url: \"nats-leaf://127.0.0.1:{port}\", account: LA, credentials: \"{}\" }}\n  {{ url: \"nats-leaf://127.0.0.1:{port}\", account: LB, credentials: \"{}\" }}\n]",
        good.display(),
        bad.display()
    );
    let leaf = ConfNode::start_with(
        &Impl::Liftbridge,
        &format!("badleaf-{tag}"),
        false,
        Some(&remotes),
        LEAF_ACCOUNTS,
    )
    .await;
    wait_until(
        START_TIMEOUT,
        "the refusal is logged on every retry",
        || async {
            leaf.proc
                .log_text()
                .matches("Authorization Violation")
                .count()
                >= 3
        },
    )
    .await;
    // The good remote is up, alone.
    wait_until(START_TIMEOUT, "the good remote is up", || async {
        leaf_accounts(&leaf).await == vec!["LA".to_string()]
    })
    .await;
    assert_eq!(leaf_accounts(&hub).await, vec![op.a.public_key()]);
    let ha = connect_creds(&hub, &op.creds(&op.a, "client-a", false)).await;
    let la = connect_user(&leaf, "la").await;
    let mut s = sub_seen(&ha, "still.up", &leaf, "LA").await;
    publish_n(&la, "still.up", "ok-", 5).await;
    expect_n(&mut s, "ok-", 5).await;
    // LB's local clients work on the leaf.
    let lb = connect_user(&leaf, "lb").await;
    let mut local = lb.subscribe("local.b").await.unwrap();
    lb.flush().await.unwrap();
    publish_n(&lb, "local.b", "lb-", 3).await;
    expect_n(&mut local, "lb-", 3).await;
    let log = leaf.proc.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_wrong_signature_refused_by_go_2_15() {
    wrong_signature(&Impl::Go(go_nats_server_2_15()), "g15").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_wrong_signature_refused_by_ours() {
    wrong_signature(&Impl::Liftbridge, "lb").await;
}

/// Runs our server on `conf` (top-level text plus a `leafnodes` block)
/// and returns its log once it has exited, refusing the file.
async fn refused(conf: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.conf");
    std::fs::write(&path, conf).unwrap();
    let args = vec![
        "nats-server".to_string(),
        "-c".to_string(),
        path.display().to_string(),
    ];
    let mut p = Proc::spawn(Path::new(env!("CARGO_BIN_EXE_liftbridge")), args, dir);
    p.exit_log(START_TIMEOUT, "the server refuses its config")
        .await
}

/// Start-up errors name what is wrong: an unreadable or malformed creds
/// file, an unknown local account, operator mode without account keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_bad_config_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.creds");
    std::fs::write(&garbage, "not a creds file at all\n").unwrap();
    let missing = dir.path().join("missing.creds");
    let port = free_port();
    let base = format!("listen: 127.0.0.1:{port}\n{LEAF_ACCOUNTS}");
    let remote = |extra: &str| {
        format!(
            "{base}leafnodes {{ remotes [ {{ url: \"nats-leaf://127.0.0.1:1\", {extra} }} ] }}\n"
        )
    };
    for (conf, want) in [
        (
            remote(&format!("credentials: \"{}\"", garbage.display())),
            "credentials",
        ),
        (
            remote(&format!("credentials: \"{}\"", missing.display())),
            "missing.creds",
        ),
        (
            remote("account: NOPE"),
            "cannot find local account \"NOPE\" specified in leafnode remote",
        ),
        (
            format!("{base}leafnodes {{ port: -1, authorization {{ users [ {{user: x, password: y, account: NOPE}} ] }} }}\n"),
            "cannot find local account \"NOPE\" specified in leafnode authorization",
        ),
    ] {
        let log = refused(&conf).await;
        assert!(log.contains(want), "expected {want:?} in:\n{log}");
    }
    let op = Operator::new();
    let log = refused(&format!(
        "listen: 127.0.0.1:{port}\n{}leafnodes {{ remotes [ {{ url: \"nats-leaf://127.0.0.1:1\" }} ] }}\n",
        op.hub_conf()
    ))
    .await;
    assert!(
        log.contains("operator mode requires account nkeys in remotes"),
        "{log}"
    );
}

/// Two of our servers that are each other's remote within account A form
/// a loop; it is reported with the account's name. Traffic in the other
/// account is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_accounts_loop_names_the_account() {
    let (pa, pb) = (free_port(), free_port());
    let accounts = "accounts {\n  A { users [ {user: a, password: a} ] }\n  B { users [ {user: b, password: b} ] }\n}\n";
    let body = |listen: u16, to: u16| {
        format!(
            "listen: 127.0.0.1:{listen}\nremotes [ {{ url: \"nats-leaf://a:a@127.0.0.1:{to}\", account: A }} ]"
        )
    };
    let x = ConfNode::start_with(
        &Impl::Liftbridge,
        "loop-x",
        false,
        Some(&body(pa, pb)),
        accounts,
    )
    .await;
    let y = ConfNode::start_with(
        &Impl::Liftbridge,
        "loop-y",
        false,
        Some(&body(pb, pa)),
        accounts,
    )
    .await;
    let want = "Loop detected for leafnode account=\"A\". Delaying attempt to reconnect for 30s";
    wait_until(START_TIMEOUT, "the loop is reported for A", || async {
        x.proc.log_text().contains(want) || y.proc.log_text().contains(want)
    })
    .await;
    for n in [&x, &y] {
        let c = connect_user(n, "b").await;
        let mut s = c.subscribe("still.here").await.unwrap();
        c.publish("still.here", "yes".into()).await.unwrap();
        c.flush().await.unwrap();
        assert_eq!(next(&mut s).await.payload, Bytes::from("yes"));
    }
    let seen: HashSet<String> = leaf_accounts(&x).await.into_iter().collect();
    assert!(!seen.contains("B"), "no connection is bound to B: {seen:?}");
}
