//! Contract: permissions on leaf-node connections behave as in Go
//! nats-server, and the same configuration gives the same outcome whether
//! the hub (or the leaf) is ours or Go's.
//!
//! - A hub user with permissions (a config user, or a user JWT in
//!   operator mode) may connect as a leaf: its `publish`
//!   permissions bound what the leaf brings into the hub, its `subscribe`
//!   permissions what the hub sends the leaf; the hub's INFO after CONNECT
//!   carries them as `export`/`import`. A raw leaf that announces a
//!   literal subject it may not receive, or sends a message it may not
//!   publish, gets nats-server's `Permissions Violation` error and is
//!   closed.
//! - A remote's `deny_imports` (hub → leaf) and `deny_exports` (leaf →
//!   hub) stop those subjects in their direction, and denied imports are
//!   not announced to the hub.
//!
//! Every "not delivered" check publishes the denied message first and an
//! allowed one after it, then asserts the first message that arrives is the
//! allowed one: it cannot pass without traffic flowing.

use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncWriteExt, BufReader};

use crate::support::procs::{go_nats_server_2_15, go_nats_server_2_9, ConfNode, Impl};
use crate::support::rawleaf::{closed_after, raw_leaf, read_line, read_until_err};
use crate::support::{http_json, sync};

const WAIT: Duration = Duration::from_secs(20);

/// Top-level users of the hubs in the permission tests: `leaf` (the leaf
/// connection's user, restricted) and `app` (the hub's own clients).
const HUB_USERS: &str = r#"
authorization {
  users [
    { user: leaf, password: pw, permissions: {
        publish: { allow: ["up.>"], deny: ["up.secret"] },
        subscribe: { allow: ["down.>"], deny: ["down.secret"] } } }
    { user: app, password: pw }
  ]
}
"#;

async fn connect(url: &str) -> async_nats::Client {
    async_nats::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// The first message on `sub` whose subject is an application subject
/// (servers may carry their own `$…`/`_…` traffic on a `>` subscription).
async fn first_app_msg(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    loop {
        let m = tokio::time::timeout(WAIT, sub.next())
            .await
            .expect("a message in time")
            .expect("subscription open");
        if !m.subject.starts_with('$') && !m.subject.starts_with('_') {
            return m;
        }
    }
}

/// Whether a leaf connection of `node` carries interest in `subject`.
async fn has_leaf_interest(node: &ConfNode, subject: &str) -> bool {
    node.leafz().await["leafs"].as_array().is_some_and(|l| {
        l.iter().any(|leaf| {
            leaf["subscriptions_list"]
                .as_array()
                .is_some_and(|s| s.iter().any(|x| x.as_str() == Some(subject)))
        })
    })
}

/// Subscribes `on` to `>` and waits until `peer` (the other end of the
/// link) has the interest.
async fn sub_all(on: &async_nats::Client, peer: &ConfNode) -> async_nats::Subscriber {
    let s = on.subscribe(">").await.unwrap();
    on.flush().await.unwrap();
    peer.wait_leaf_interest(">").await;
    s
}

/// Publishes every subject of `denied`, then `allowed`, from `from`, and
/// asserts `sub` receives `allowed` first.
async fn only_allowed_arrives(
    from: &async_nats::Client,
    sub: &mut async_nats::Subscriber,
    denied: &[&str],
    allowed: &str,
    what: &str,
) {
    for d in denied {
        from.publish(d.to_string(), "denied".into()).await.unwrap();
    }
    from.publish(allowed.to_string(), "allowed".into())
        .await
        .unwrap();
    from.flush().await.unwrap();
    let m = first_app_msg(sub).await;
    assert_eq!(
        m.subject.as_str(),
        allowed,
        "{what}: a denied subject crossed the link"
    );
}

/// A hub of `hub_imp` whose leaf user has permissions, with a leaf of
/// `leaf_imp` connecting as that user: allowed subjects flow both ways,
/// denied ones in neither direction, and the link stays up.
async fn hub_user_permissions(hub_imp: &Impl, leaf_imp: &Impl, tag: &str) {
    let hub = ConfNode::start_with(hub_imp, &format!("hub-{tag}"), true, None, HUB_USERS).await;
    let port = hub.leaf_port.expect("hub leaf port");
    let remote = format!("remotes [ {{ url: \"nats-leaf://leaf:pw@127.0.0.1:{port}\" }} ]");
    let leaf = ConfNode::start(leaf_imp, &format!("leaf-{tag}"), false, Some(&remote)).await;
    // Without echo: each client both subscribes to `>` and publishes, and
    // must see only what crossed the link.
    let hub_client = async_nats::ConnectOptions::with_user_and_password("app".into(), "pw".into())
        .no_echo()
        .connect(hub.url())
        .await
        .expect("connect to the hub as app");
    restricted_link(&hub, &leaf, hub_client).await;
}

/// The flows over a link whose leaf user may publish `up.>` but not
/// `up.secret` and receive `down.>` but not `down.secret`; `hub_client` is
/// an unrestricted client of the hub's account, without echo.
async fn restricted_link(hub: &ConfNode, leaf: &ConfNode, hub_client: async_nats::Client) {
    hub.wait_leafs(1).await;
    leaf.wait_leafs(1).await;
    let leaf_client = async_nats::ConnectOptions::new()
        .no_echo()
        .connect(leaf.url())
        .await
        .expect("connect to the leaf");

    // Hub -> leaf: only what the leaf user may subscribe to.
    let mut on_leaf = sub_all(&leaf_client, hub).await;
    only_allowed_arrives(
        &hub_client,
        &mut on_leaf,
        &["down.secret", "other.x", "up.a"],
        "down.ok",
        "hub to leaf",
    )
    .await;

    // Leaf -> hub: only what the leaf user may publish.
    let mut on_hub = sub_all(&hub_client, leaf).await;
    only_allowed_arrives(
        &leaf_client,
        &mut on_hub,
        &["up.secret", "other.y", "down.b"],
        "up.ok",
        "leaf to hub",
    )
    .await;

    // A well-behaved leaf never broke a rule: the link is still the first
    // one, and a second round still flows.
    assert_eq!(hub.leafz().await["leafnodes"].as_u64(), Some(1));
    only_allowed_arrives(
        &hub_client,
        &mut on_leaf,
        &["down.secret"],
        "down.again",
        "again",
    )
    .await;
    only_allowed_arrives(
        &leaf_client,
        &mut on_hub,
        &["up.secret"],
        "up.again",
        "again",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_hub_user_ours_hub_ours_leaf() {
    hub_user_permissions(&Impl::Liftbridge, &Impl::Liftbridge, "oo").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_hub_user_ours_hub_go_2_15_leaf() {
    hub_user_permissions(&Impl::Liftbridge, &Impl::Go(go_nats_server_2_15()), "og").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_hub_user_go_2_15_hub_ours_leaf() {
    hub_user_permissions(&Impl::Go(go_nats_server_2_15()), &Impl::Liftbridge, "go").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_hub_user_go_2_15_hub_go_2_15_leaf() {
    let go = Impl::Go(go_nats_server_2_15());
    hub_user_permissions(&go, &go, "gg").await;
}

/// As [`hub_user_permissions`] with the permissions in a user JWT: the hub
/// runs in operator mode and the leaf connects with a creds file.
async fn jwt_user_permissions(hub_imp: &Impl, leaf_imp: &Impl, tag: &str) {
    use crate::support::jwt::{account_jwt, operator_jwt, user_jwt, write_creds};
    let dir = tempfile::tempdir().unwrap();
    let (op, acc, sys) = (
        nkeys::KeyPair::new_operator(),
        nkeys::KeyPair::new_account(),
        nkeys::KeyPair::new_account(),
    );
    let op_file = dir.path().join("op.jwt");
    std::fs::write(&op_file, operator_jwt(&op, &sys.public_key())).unwrap();
    let top = format!(
        "operator: \"{}\"\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n  {}: {}\n  {}: {}\n}}\n",
        op_file.display(),
        sys.public_key(),
        acc.public_key(),
        account_jwt(&op, &acc.public_key(), "A", |_| {}),
        sys.public_key(),
        account_jwt(&op, &sys.public_key(), "SYS", |_| {}),
    );
    let creds = |name: &str, restricted: bool| {
        let user = nkeys::KeyPair::new_user();
        let token = user_jwt(&acc, &user, |c| {
            c.name = name.into();
            if restricted {
                let l = &mut c.nats.limits;
                l.publish.allow = vec!["up.>".into()];
                l.publish.deny = vec!["up.secret".into()];
                l.subscribe.allow = vec!["down.>".into()];
                l.subscribe.deny = vec!["down.secret".into()];
            }
        });
        let p = dir.path().join(format!("{name}.creds"));
        write_creds(&p, &token, &user);
        p
    };
    let hub = ConfNode::start_with(hub_imp, &format!("ophub-{tag}"), true, Some(""), &top).await;
    let remote = format!(
        "remotes [ {{ url: \"{}\", credentials: \"{}\" }} ]",
        hub.leaf_url(),
        creds("leaf", true).display()
    );
    let leaf = ConfNode::start(leaf_imp, &format!("opleaf-{tag}"), false, Some(&remote)).await;
    let hub_client = async_nats::ConnectOptions::with_credentials_file(creds("app", false))
        .await
        .expect("app creds")
        .no_echo()
        .connect(hub.url())
        .await
        .expect("connect to the hub with app creds");
    restricted_link(&hub, &leaf, hub_client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_jwt_user_ours_hub_ours_leaf() {
    jwt_user_permissions(&Impl::Liftbridge, &Impl::Liftbridge, "joo").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_jwt_user_ours_hub_go_2_15_leaf() {
    jwt_user_permissions(&Impl::Liftbridge, &Impl::Go(go_nats_server_2_15()), "jog").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_jwt_user_go_2_15_hub_ours_leaf() {
    jwt_user_permissions(&Impl::Go(go_nats_server_2_15()), &Impl::Liftbridge, "jgo").await;
}

/// A leaf of `leaf_imp` under a hub of `hub_imp` (no authentication) with
/// `deny_imports`/`deny_exports`: the denied subjects stop in their
/// direction, and a denied import is not announced to the hub.
async fn remote_deny_lists(hub_imp: &Impl, leaf_imp: &Impl, tag: &str) {
    let hub = ConfNode::start(hub_imp, &format!("hub-{tag}"), true, None).await;
    let remote = format!(
        "remotes [ {{ url: \"{}\", deny_imports: [\"in.secret\", \"in.hidden.>\"], deny_exports: [\"out.secret\"] }} ]",
        hub.leaf_url()
    );
    let leaf = ConfNode::start(leaf_imp, &format!("leaf-{tag}"), false, Some(&remote)).await;
    hub.wait_leafs(1).await;
    leaf.wait_leafs(1).await;
    let hub_client = connect(&hub.url()).await;
    let leaf_client = connect(&leaf.url()).await;

    // Interest in a denied import stays local: `in.secret` is subscribed
    // before `in.visible`, so once the hub has the latter it would have
    // had the former.
    let _secret = leaf_client.subscribe("in.secret").await.unwrap();
    let _visible = leaf_client.subscribe("in.visible").await.unwrap();
    leaf_client.flush().await.unwrap();
    hub.wait_leaf_interest("in.visible").await;
    assert!(
        !has_leaf_interest(&hub, "in.secret").await,
        "interest in a denied import reached the hub: {}",
        hub.leafz().await
    );

    // Hub -> leaf: deny_imports.
    let mut on_leaf = sub_all(&leaf_client, &hub).await;
    only_allowed_arrives(
        &hub_client,
        &mut on_leaf,
        &["in.secret", "in.hidden.a"],
        "in.ok",
        "hub to leaf",
    )
    .await;

    // Leaf -> hub: deny_exports.
    let mut on_hub = sub_all(&hub_client, &leaf).await;
    only_allowed_arrives(
        &leaf_client,
        &mut on_hub,
        &["out.secret"],
        "out.ok",
        "leaf to hub",
    )
    .await;

    // The leaf's own clients still see its local traffic on denied
    // subjects: the lists bound the link only.
    let mut local = leaf_client.subscribe("out.secret").await.unwrap();
    leaf_client.flush().await.unwrap();
    leaf_client
        .publish("out.secret", "local".into())
        .await
        .unwrap();
    leaf_client.flush().await.unwrap();
    let m = tokio::time::timeout(WAIT, local.next())
        .await
        .expect("local delivery in time")
        .expect("subscription open");
    assert_eq!(&m.payload[..], b"local");
    assert_eq!(hub.leafz().await["leafnodes"].as_u64(), Some(1));
    // `/varz` shows the lists as nats-server does.
    let varz = http_json(leaf.http_port, "/varz").await.expect("/varz");
    assert_eq!(
        varz["leaf"]["remotes"][0]["deny"],
        serde_json::json!({"exports": ["out.secret"], "imports": ["in.secret", "in.hidden.>"]}),
        "{varz}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_deny_lists_ours_leaf_go_2_15_hub() {
    remote_deny_lists(&Impl::Go(go_nats_server_2_15()), &Impl::Liftbridge, "d15").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_deny_lists_ours_leaf_go_2_9_hub() {
    remote_deny_lists(&Impl::Go(go_nats_server_2_9()), &Impl::Liftbridge, "d29").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_deny_lists_ours_leaf_ours_hub() {
    remote_deny_lists(&Impl::Liftbridge, &Impl::Liftbridge, "doo").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_deny_lists_go_2_15_leaf_ours_hub() {
    remote_deny_lists(&Impl::Liftbridge, &Impl::Go(go_nats_server_2_15()), "dgo").await;
}

/// The hub's side of the protocol, seen by a raw leaf: the `connect_info`
/// INFO carries the user's permissions as `import`/`export`; a literal
/// `LS+` the user may not receive and an `LMSG` it may not publish are
/// refused with nats-server's texts and the connection closed; a wildcard
/// `LS+` is accepted.
async fn hub_protocol(hub_imp: &Impl, tag: &str) {
    let hub = ConfNode::start_with(hub_imp, &format!("hub-{tag}"), true, None, HUB_USERS).await;
    let app = async_nats::ConnectOptions::with_user_and_password("app".into(), "pw".into())
        .connect(hub.url())
        .await
        .expect("connect to the hub as app");
    // Interest present when the leaf connects: only what the leaf user may
    // publish is announced to it.
    let _z1 = app.subscribe("other.z").await.unwrap();
    let _z2 = app.subscribe("up.z").await.unwrap();
    sync(&app).await;

    let (info, mut r, mut w) = raw_leaf(&hub, "leaf", "pw").await;
    assert_eq!(
        info["import"],
        serde_json::json!({"allow": ["down.>"], "deny": ["down.secret"]}),
        "{info}"
    );
    assert_eq!(
        info["export"],
        serde_json::json!({"allow": ["up.>"], "deny": ["up.secret"]}),
        "{info}"
    );
    assert_eq!(info["remote_account"], serde_json::json!("$G"), "{info}");
    // Allowed interest (wildcard broader than the allow list, and a
    // literal) and an allowed message: answered by PONG, no error.
    w.write_all(b"LS+ >\r\nLS+ down.x\r\nLMSG up.x 2\r\nhi\r\nPING\r\n")
        .await
        .unwrap();
    let mut announced = Vec::new();
    loop {
        let line = read_line(&mut r).await;
        assert!(!line.starts_with("-ERR"), "refused: {line}");
        if let Some(s) = line.strip_prefix("LS+ ") {
            announced.push(s.trim_end().to_string());
        }
        if line.starts_with("PONG") {
            break;
        }
    }
    assert!(announced.iter().any(|s| s == "up.z"), "{announced:?}");
    assert!(!announced.iter().any(|s| s == "other.z"), "{announced:?}");
    // Messages the leaf user may not receive are not forwarded, although
    // the leaf's `>` covers them.
    app.publish("down.secret", "no".into()).await.unwrap();
    app.publish("other.q", "no".into()).await.unwrap();
    app.publish("down.ok", "yes".into()).await.unwrap();
    app.flush().await.unwrap();
    loop {
        let line = read_line(&mut r).await;
        assert!(!line.starts_with("-ERR"), "refused: {line}");
        if line.starts_with("LMSG ") {
            assert!(line.starts_with("LMSG down.ok "), "first message: {line}");
            break;
        }
    }
    w.write_all(b"LS+ nope\r\n").await.unwrap();
    assert_eq!(
        read_until_err(&mut r).await.as_deref(),
        Some("-ERR 'Permissions Violation for Subscription to \"nope\"'")
    );
    closed_after(&mut r).await;

    let (_, mut r, mut w) = raw_leaf(&hub, "leaf", "pw").await;
    w.write_all(b"LMSG up.secret 2\r\nhi\r\n").await.unwrap();
    assert_eq!(
        read_until_err(&mut r).await.as_deref(),
        Some("-ERR 'Permissions Violation for Publish to \"up.secret\"'")
    );
    closed_after(&mut r).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_hub_protocol_ours() {
    hub_protocol(&Impl::Liftbridge, "po").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_hub_protocol_go_2_15() {
    hub_protocol(&Impl::Go(go_nats_server_2_15()), "pg").await;
}

/// A reload that widens the leaf user's subscribe permissions closes the
/// leaf connection; the leaf reconnects and gets the new permissions from
/// the hub's INFO, after which the newly allowed subject flows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_reload_changes_leaf_permissions() {
    let hub = ConfNode::start_with(&Impl::Liftbridge, "hub-rl", true, None, HUB_USERS).await;
    let port = hub.leaf_port.expect("hub leaf port");
    let remote = format!("remotes [ {{ url: \"nats-leaf://leaf:pw@127.0.0.1:{port}\" }} ]");
    let leaf = ConfNode::start(&Impl::Liftbridge, "leaf-rl", false, Some(&remote)).await;
    hub.wait_leafs(1).await;
    leaf.wait_leafs(1).await;
    let hub_client = async_nats::ConnectOptions::with_user_and_password("app".into(), "pw".into())
        .connect(hub.url())
        .await
        .expect("connect to the hub as app");
    let leaf_client = connect(&leaf.url()).await;
    let mut on_leaf = sub_all(&leaf_client, &hub).await;
    only_allowed_arrives(&hub_client, &mut on_leaf, &["other.x"], "down.ok", "before").await;

    let path = hub.proc.dir.path().join("server.conf");
    let conf = std::fs::read_to_string(&path).unwrap();
    let widened = conf.replace(
        r#"subscribe: { allow: ["down.>"]"#,
        r#"subscribe: { allow: ["down.>", "other.>"]"#,
    );
    assert_ne!(conf, widened, "the test edits the leaf user's permissions");
    std::fs::write(&path, widened).unwrap();
    let pid = hub.proc.pid().expect("hub running");
    // SAFETY: a plain signal to our own child process.
    unsafe { libc::kill(pid as i32, libc::SIGHUP) };

    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "other.x never reached the leaf after the reload"
        );
        hub_client.publish("other.x", "after".into()).await.unwrap();
        hub_client.flush().await.unwrap();
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), on_leaf.next()).await
        {
            if m.subject.as_str() == "other.x" {
                break;
            }
        }
    }
    assert!(
        hub.proc
            .log_text()
            .contains("leafnode authentication error"),
        "the reload closed the leaf: {}",
        hub.proc.log_text()
    );
}

/// Our leaf under a raw hub that sends permissions the way nats-server
/// does: the leaf waits for the `connect_info` INFO before announcing
/// interest (a literal subject it may not receive is never announced), sends
/// its `deny_imports` as `deny_pub`, drops messages it may not receive and
/// sends only what it may publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_ours_leaf_applies_the_hub_info() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let remote = format!(
        "remotes [ {{ url: \"nats-leaf://127.0.0.1:{port}\", deny_imports: [\"down.secret\"] }} ]"
    );
    let leaf = ConfNode::start(&Impl::Liftbridge, "leaf-raw", false, Some(&remote)).await;
    let client = async_nats::ConnectOptions::new()
        .no_echo()
        .connect(leaf.url())
        .await
        .expect("connect to the leaf");
    let _lit_ok = client.subscribe("down.lit").await.unwrap();
    let _lit_no = client.subscribe("other.lit").await.unwrap();
    let mut all = client.subscribe(">").await.unwrap();
    client.flush().await.unwrap();
    // A flush only writes the SUBs out; a message another client publishes
    // arriving on `>` shows the leaf node holds them.
    let other = connect(&leaf.url()).await;
    other.publish("sync.x", "s".into()).await.unwrap();
    other.flush().await.unwrap();
    assert_eq!(first_app_msg(&mut all).await.subject.as_str(), "sync.x");

    // The leaf dialled at start and waits (5 s) for our INFO; its interest
    // goes out only after the `connect_info` INFO below, so the
    // subscriptions above are all in it.
    let (s, _) = tokio::time::timeout(WAIT, listener.accept())
        .await
        .expect("the leaf connects")
        .unwrap();
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    w.write_all(
        b"INFO {\"server_id\":\"NRAWHUB\",\"server_name\":\"rawhub\",\"version\":\"2.15.1\",\"proto\":3,\"headers\":true,\"max_payload\":1048576,\"client_id\":7,\"nonce\":\"abc\",\"info_on_connect\":true,\"leafnode_urls\":[]}\r\n",
    )
    .await
    .unwrap();
    let connect = read_line(&mut r).await;
    let json: serde_json::Value = serde_json::from_str(
        connect
            .strip_prefix("CONNECT ")
            .unwrap_or_else(|| panic!("CONNECT expected: {connect}"))
            .trim(),
    )
    .unwrap();
    assert_eq!(
        json["deny_pub"],
        serde_json::json!(["down.secret"]),
        "{json}"
    );
    w.write_all(
        b"INFO {\"server_id\":\"NRAWHUB\",\"client_id\":7,\"connect_info\":true,\"remote_account\":\"$G\",\"import\":{\"allow\":[\"down.\\u003e\"]},\"export\":{\"allow\":[\"up.\\u003e\"]},\"leafnode_urls\":[]}\r\nLS+ >\r\nPING\r\n",
    )
    .await
    .unwrap();
    let mut announced = Vec::new();
    loop {
        let line = read_line(&mut r).await;
        if let Some(s) = line.strip_prefix("LS+ ") {
            announced.push(s.trim_end().to_string());
        }
        if line.starts_with("PONG") {
            break;
        }
    }
    assert!(announced.iter().any(|s| s == "down.lit"), "{announced:?}");
    assert!(announced.iter().any(|s| s == ">"), "{announced:?}");
    assert!(!announced.iter().any(|s| s == "other.lit"), "{announced:?}");

    // Hub -> leaf: not-imported and deny_imports subjects are dropped.
    w.write_all(b"LMSG other.x 2\r\nno\r\nLMSG down.secret 2\r\nno\r\nLMSG down.ok 3\r\nyes\r\n")
        .await
        .unwrap();
    let m = first_app_msg(&mut all).await;
    assert_eq!(m.subject.as_str(), "down.ok");

    // Leaf -> hub: only exported subjects go out.
    client.publish("other.y", "no".into()).await.unwrap();
    client.publish("up.ok", "yes".into()).await.unwrap();
    client.flush().await.unwrap();
    loop {
        let line = read_line(&mut r).await;
        if line.starts_with("LMSG ") {
            assert!(line.starts_with("LMSG up.ok "), "first message: {line}");
            break;
        }
    }
}

/// Hub users limited by `allowed_connection_types`: `edge` only as a leaf,
/// `app` only as a client.
const TYPED_USERS: &str = r#"
authorization {
  users [
    { user: edge, password: pw, allowed_connection_types: [LEAFNODE] }
    { user: app, password: pw, allowed_connection_types: ["STANDARD"] }
  ]
}
"#;

/// The same file on a hub of `hub_imp`: a leaf connecting as `edge` is
/// accepted and carries traffic, one connecting as `app` is refused; a
/// client connecting as `edge` is refused, as `app` accepted.
async fn connection_types(hub_imp: &Impl, tag: &str) {
    let hub = ConfNode::start_with(
        hub_imp,
        &format!("hub-types-{tag}"),
        true,
        None,
        TYPED_USERS,
    )
    .await;
    let port = hub.leaf_port.expect("hub leaf port");
    let leaf_as =
        |user: &str| format!("remotes [ {{ url: \"nats-leaf://{user}:pw@127.0.0.1:{port}\" }} ]");
    let ours = Impl::Liftbridge;
    let refused = ConfNode::start(
        &ours,
        &format!("leaf-app-{tag}"),
        false,
        Some(&leaf_as("app")),
    )
    .await;
    let leaf = ConfNode::start(
        &ours,
        &format!("leaf-edge-{tag}"),
        false,
        Some(&leaf_as("edge")),
    )
    .await;
    hub.wait_leafs(1).await;
    // The refused leaf keeps retrying and never gets in.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(hub.leafz().await["leafnodes"].as_u64(), Some(1));
    assert_eq!(refused.leafz().await["leafnodes"].as_u64(), Some(0));
    let as_user = |user: &'static str| {
        async_nats::ConnectOptions::with_user_and_password(user.into(), "pw".into())
            .max_reconnects(1)
            .connect(hub.url())
    };
    let e = as_user("edge").await.expect_err("edge is a leaf-only user");
    assert!(
        e.to_string().to_lowercase().contains("authorization"),
        "{e}"
    );
    let app = as_user("app").await.expect("app may connect as a client");
    // And the accepted leaf carries traffic.
    let on_leaf = connect(&leaf.url()).await;
    let mut sub = on_leaf.subscribe("typed.x").await.unwrap();
    on_leaf.flush().await.unwrap();
    hub.wait_leaf_interest("typed.x").await;
    app.publish("typed.x", "over the leaf".into())
        .await
        .unwrap();
    app.flush().await.unwrap();
    let m = first_app_msg(&mut sub).await;
    assert_eq!(&m.payload[..], b"over the leaf");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_connection_types_ours_hub() {
    connection_types(&Impl::Liftbridge, "ours").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_perms_connection_types_go_2_15_hub() {
    connection_types(&Impl::Go(go_nats_server_2_15()), "go").await;
}
