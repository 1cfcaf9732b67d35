//! Contract: in operator mode an account JWT's `limits.leaf` caps the leaf
//! connections bound to that account, as in nats-server 2.15.1: a leaf past
//! the limit gets `-ERR 'maximum account active connections exceeded'` and
//! is closed, the ones within the limit keep working, and a leaf of another
//! account is not counted. The same body runs against our hub and Go's.

use std::time::Duration;

use base64::Engine;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::support::jwt::{account_jwt, operator_jwt, user_jwt};
use crate::support::procs::{go_nats_server_2_15, ConfNode, Impl};

const WAIT: Duration = Duration::from_secs(20);

/// A raw leaf connection authenticated by a user JWT.
struct RawLeaf {
    r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: tokio::net::tcp::OwnedWriteHalf,
}

impl RawLeaf {
    /// Connects to the hub's leaf port, signs the INFO nonce with `user`'s
    /// key and sends CONNECT with `jwt` and a PING.
    async fn connect(hub: &ConfNode, name: &str, jwt: &str, user: &nkeys::KeyPair) -> RawLeaf {
        let port = hub.leaf_port.expect("hub leaf port");
        let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to the leaf port");
        let (r, mut w) = s.into_split();
        let mut r = BufReader::new(r);
        let info = read_line(&mut r).await.expect("INFO");
        let json: serde_json::Value =
            serde_json::from_str(info.trim().trim_start_matches("INFO ")).expect("INFO json");
        let nonce = json["nonce"].as_str().expect("INFO has a nonce");
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(user.sign(nonce.as_bytes()).expect("sign the nonce"));
        let connect = serde_json::json!({
            "jwt": jwt, "sig": sig, "name": name, "server_id": format!("N{name}"),
            "headers": true,
        });
        w.write_all(format!("CONNECT {connect}\r\nPING\r\n").as_bytes())
            .await
            .expect("send CONNECT");
        RawLeaf { r, w }
    }

    /// Reads lines until one starts with `want` (returned) or `-ERR`
    /// (returned too); `None` when the hub closes the connection first.
    async fn answer(&mut self, want: &str) -> Option<String> {
        loop {
            let line = read_line(&mut self.r).await?;
            if line.starts_with(want) || line.starts_with("-ERR") {
                return Some(line.trim_end().to_string());
            }
        }
    }

    /// The hub answers a PING with PONG: the connection is alive.
    async fn alive(&mut self) {
        self.w.write_all(b"PING\r\n").await.expect("send PING");
        assert_eq!(self.answer("PONG").await.as_deref(), Some("PONG"));
    }

    /// After an `-ERR`, the hub closes the connection.
    async fn closed(&mut self) {
        while read_line(&mut self.r).await.is_some() {}
    }
}

/// One line, `None` at the end of the connection; panics after [`WAIT`].
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Option<String> {
    let mut line = String::new();
    let n = tokio::time::timeout(WAIT, r.read_line(&mut line))
        .await
        .expect("a line in time")
        .ok()?;
    (n > 0).then_some(line)
}

async fn leaf_limit(hub_imp: &Impl, tag: &str) {
    let (op, a, b, sys) = (
        nkeys::KeyPair::new_operator(),
        nkeys::KeyPair::new_account(),
        nkeys::KeyPair::new_account(),
        nkeys::KeyPair::new_account(),
    );
    let dir = tempfile::tempdir().unwrap();
    let op_file = dir.path().join("op.jwt");
    std::fs::write(&op_file, operator_jwt(&op, &sys.public_key())).unwrap();
    let top = format!(
        "operator: \"{}\"\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n  {}: {}\n  {}: {}\n  {}: {}\n}}\n",
        op_file.display(),
        sys.public_key(),
        a.public_key(),
        account_jwt(&op, &a.public_key(), "A", |n| n.limits.leaf = 1),
        b.public_key(),
        account_jwt(&op, &b.public_key(), "B", |_| {}),
        sys.public_key(),
        account_jwt(&op, &sys.public_key(), "SYS", |_| {}),
    );
    let hub = ConfNode::start_with(hub_imp, &format!("limhub-{tag}"), true, Some(""), &top).await;
    let user_of = |account: &nkeys::KeyPair| {
        let u = nkeys::KeyPair::new_user();
        let jwt = user_jwt(account, &u, |c| c.name = "leaf".into());
        (u, jwt)
    };

    // The first leaf of A is within the limit.
    let (u1, j1) = user_of(&a);
    let mut first = RawLeaf::connect(&hub, "first", &j1, &u1).await;
    assert_eq!(first.answer("PONG").await.as_deref(), Some("PONG"));

    // A second leaf of A (another user of the account) is one too many.
    let (u2, j2) = user_of(&a);
    let mut second = RawLeaf::connect(&hub, "second", &j2, &u2).await;
    assert_eq!(
        second.answer("PONG").await.as_deref(),
        Some("-ERR 'maximum account active connections exceeded'"),
        "{tag}: a second leaf of an account limited to one"
    );
    second.closed().await;

    // The first one was not disturbed, and B (no limit) takes two leaves.
    first.alive().await;
    let (ub1, jb1) = user_of(&b);
    let (ub2, jb2) = user_of(&b);
    let mut b1 = RawLeaf::connect(&hub, "b1", &jb1, &ub1).await;
    let mut b2 = RawLeaf::connect(&hub, "b2", &jb2, &ub2).await;
    assert_eq!(b1.answer("PONG").await.as_deref(), Some("PONG"));
    assert_eq!(b2.answer("PONG").await.as_deref(), Some("PONG"));

    // Once the first leaf of A is gone, its place is free again.
    drop(first);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (u3, j3) = user_of(&a);
        let mut third = RawLeaf::connect(&hub, "third", &j3, &u3).await;
        match third.answer("PONG").await.as_deref() {
            Some("PONG") => break,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "{tag}: A's place was not freed: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_jwt_account_leaf_limit_ours() {
    leaf_limit(&Impl::Liftbridge, "ours").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_leaf_jwt_account_leaf_limit_go_2_15() {
    leaf_limit(&Impl::Go(go_nats_server_2_15()), "go").await;
}
