//! Operator (decentralized JWT) mode against real processes: the built
//! `liftbridge nats-server` and Go nats-server 2.15.1 run the same config
//! (an operator JWT, a full directory resolver preloaded with account
//! JWTs), and the same test body must pass against both. Keys and JWTs are
//! generated here with our own encoder (`liftbridge::nats::jwt`) and
//! `nkeys`; creds files are written as `nsc` writes them.
//!
//! Checked on both: async-nats with `credentials_file` connects and
//! pub/subs; accounts are isolated; users signed by an account signing key
//! (`issuer_account`) are accepted; a creds file whose seed does not match
//! its JWT, an expired user, a revoked user, a user without a nonce
//! signature, a user of an unknown account and a malformed JWT are refused
//! with the same `-ERR`; bearer users need no signature; a user's
//! subscription and payload limits and an account's connection limit are
//! enforced with nats-server's texts; a user is disconnected at its
//! expiry; a claims update pushed by a system-account user raises a
//! connection limit live and revokes a connected user.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use liftbridge::nats::jwt::{self, AccountLimits, AccountNats, SigningKey};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::free_port;
use crate::support::jwt::{account_jwt, operator_jwt, user_jwt, write_creds};
use crate::support::procs::{go_nats_server_2_15, Proc};
use crate::support::sync;

const T: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug)]
enum Server {
    Ours,
    Go,
}

/// An account's keys and how its JWT is built.
struct Acc {
    kp: nkeys::KeyPair,
    /// A plain signing key listed in the account JWT.
    sk: nkeys::KeyPair,
}

impl Acc {
    fn new() -> Acc {
        Acc {
            kp: nkeys::KeyPair::new_account(),
            sk: nkeys::KeyPair::new_account(),
        }
    }

    fn key(&self) -> String {
        self.kp.public_key()
    }

    /// The account JWT signed by `op`, with `f` applied to its claims.
    fn jwt(&self, op: &nkeys::KeyPair, f: impl FnOnce(&mut AccountNats)) -> String {
        account_jwt(op, &self.key(), "acc", |nats| {
            nats.limits = AccountLimits::default();
            nats.signing_keys = vec![SigningKey::Plain(self.sk.public_key())];
            f(nats)
        })
    }
}

/// Everything a run needs: keys, JWTs, creds files, the config.
struct Setup {
    dir: tempfile::TempDir,
    op: nkeys::KeyPair,
    a: Acc,
    b: Acc,
    /// Connection limit 1 (raised by a pushed update).
    c: Acc,
    sys: Acc,
    /// Revoked in B's JWT.
    revoked: nkeys::KeyPair,
    /// A connected B user that a pushed update revokes.
    to_revoke: nkeys::KeyPair,
}

impl Setup {
    fn new() -> Setup {
        let op = nkeys::KeyPair::new_operator();
        Setup {
            dir: tempfile::tempdir().unwrap(),
            op,
            a: Acc::new(),
            b: Acc::new(),
            c: Acc::new(),
            sys: Acc::new(),
            revoked: nkeys::KeyPair::new_user(),
            to_revoke: nkeys::KeyPair::new_user(),
        }
    }

    fn operator_jwt(&self) -> String {
        operator_jwt(&self.op, &self.sys.key())
    }

    fn b_jwt(&self, revoke_too: bool) -> String {
        let now = jwt::unix_now();
        self.b.jwt(&self.op, |n| {
            n.revocations.insert(self.revoked.public_key(), now);
            if revoke_too {
                n.revocations.insert(self.to_revoke.public_key(), now);
            }
        })
    }

    fn c_jwt(&self, conn: i64) -> String {
        self.c.jwt(&self.op, |n| n.limits.conn = conn)
    }

    /// Writes the config (and a fresh resolver dir) for one server.
    fn conf(&self, name: &str, port: u16) -> std::path::PathBuf {
        let rdir = self.dir.path().join(format!("jwt-{name}"));
        std::fs::create_dir_all(&rdir).unwrap();
        let op_file = self.dir.path().join("op.jwt");
        std::fs::write(&op_file, self.operator_jwt()).unwrap();
        let conf = format!(
            "listen: 127.0.0.1:{port}\n\
             operator: \"{}\"\n\
             system_account: {}\n\
             resolver: {{ type: full, dir: \"{}\" }}\n\
             resolver_preload: {{\n  {}: {}\n  {}: {}\n  {}: {}\n  {}: {}\n}}\n",
            op_file.display(),
            self.sys.key(),
            rdir.display(),
            self.a.key(),
            self.a.jwt(&self.op, |_| {}),
            self.b.key(),
            self.b_jwt(false),
            self.c.key(),
            self.c_jwt(1),
            self.sys.key(),
            self.sys.jwt(&self.op, |_| {}),
        );
        let path = self.dir.path().join(format!("{name}.conf"));
        std::fs::write(&path, conf).unwrap();
        path
    }

    /// Writes a creds file for (`jwt`, `seed_of`) and returns its path.
    fn creds(&self, name: &str, jwt: &str, seed_of: &nkeys::KeyPair) -> std::path::PathBuf {
        let p = self.dir.path().join(format!("{name}.creds"));
        write_creds(&p, jwt, seed_of);
        p
    }
}

async fn start(server: Server, conf: &Path, port: u16) -> Proc {
    let (program, mut args) = match server {
        Server::Ours => (
            std::path::PathBuf::from(env!("CARGO_BIN_EXE_liftbridge")),
            vec!["nats-server".to_string()],
        ),
        Server::Go => (go_nats_server_2_15(), Vec::new()),
    };
    args.extend(["-c".to_string(), conf.display().to_string()]);
    let mut p = Proc::spawn(&program, args, tempfile::tempdir().unwrap());
    if let Err(e) = p.try_wait_port(port).await {
        panic!("{server:?}: {e}");
    }
    p
}

async fn connect_creds(url: &str, creds: &Path) -> Result<async_nats::Client, String> {
    async_nats::ConnectOptions::new()
        .credentials_file(creds)
        .await
        .map_err(|e| e.to_string())?
        .connect(url)
        .await
        .map_err(|e| e.to_string())
}

/// A raw connection authenticated with `jwt` (and the nonce signed by
/// `signer` when given).
struct RawConn {
    s: tokio::net::TcpStream,
    buf: Vec<u8>,
}

impl RawConn {
    async fn open(port: u16, jwt: &str, signer: Option<&nkeys::KeyPair>) -> RawConn {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let mut info = Vec::new();
        tokio::time::timeout(T, async {
            while !info.ends_with(b"\r\n") {
                let mut b = [0u8; 1];
                if s.read(&mut b).await.unwrap() == 0 {
                    break;
                }
                info.push(b[0]);
            }
        })
        .await
        .expect("INFO within 5s");
        let text = String::from_utf8_lossy(&info);
        let json: serde_json::Value =
            serde_json::from_str(text.trim().trim_start_matches("INFO ")).unwrap();
        let nonce = json["nonce"]
            .as_str()
            .expect("INFO has a nonce")
            .to_string();
        let sig = signer.map(|k| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(k.sign(nonce.as_bytes()).unwrap())
        });
        let mut connect = serde_json::json!({
            "verbose": false, "pedantic": false, "protocol": 1, "jwt": jwt,
        });
        if let Some(sig) = sig {
            connect["sig"] = sig.into();
        }
        s.write_all(format!("CONNECT {connect}\r\nPING\r\n").as_bytes())
            .await
            .unwrap();
        RawConn { s, buf: Vec::new() }
    }

    /// Reads until `want` appears, the connection closes, or 5 s (or
    /// `wait`) pass; returns everything read so far.
    async fn read_until(&mut self, want: &str, wait: Duration) -> String {
        let _ = tokio::time::timeout(wait, async {
            loop {
                if String::from_utf8_lossy(&self.buf).contains(want) {
                    return;
                }
                let mut chunk = [0u8; 4096];
                match self.s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        String::from_utf8_lossy(&self.buf).into_owned()
    }

    async fn send(&mut self, data: &str) {
        self.s.write_all(data.as_bytes()).await.unwrap();
    }
}

/// Opens a raw session and returns what the server answered to CONNECT +
/// PING (a PONG, or an `-ERR`).
async fn raw_answer(port: u16, jwt: &str, signer: Option<&nkeys::KeyPair>) -> String {
    let mut c = RawConn::open(port, jwt, signer).await;
    let out = c.read_until("PONG", T).await;
    if out.contains("-ERR") {
        // The error line only.
        out.lines()
            .find(|l| l.starts_with("-ERR"))
            .unwrap_or_default()
            .to_string()
    } else if out.contains("PONG") {
        "PONG".to_string()
    } else {
        format!("no answer: {out:?}")
    }
}

async fn body(server: Server, setup: &Setup, port: u16) {
    let url = format!("nats://127.0.0.1:{port}");
    let s = setup;
    let ua = nkeys::KeyPair::new_user();
    let a_creds = s.creds("a", &user_jwt(&s.a.kp, &ua, |_| {}), &ua);
    // A B user signed by B's signing key (issuer_account set).
    let ub = nkeys::KeyPair::new_user();
    let b_jwt = user_jwt(&s.b.sk, &ub, |c| {
        c.nats.issuer_account = s.b.key();
        c.nats.limits.subs = 2;
        c.nats.limits.payload = 100;
    });
    let b_creds = s.creds("b", &b_jwt, &ub);

    // Credentials files: connect, pub/sub within an account.
    let a = connect_creds(&url, &a_creds)
        .await
        .unwrap_or_else(|e| panic!("{server:?}: A creds: {e}"));
    let a2 = connect_creds(&url, &a_creds).await.unwrap();
    let b = connect_creds(&url, &b_creds)
        .await
        .unwrap_or_else(|e| panic!("{server:?}: B creds (signing key): {e}"));
    let mut a_sub = a.subscribe("iso.x").await.unwrap();
    let mut b_sub = b.subscribe("iso.x").await.unwrap();
    sync(&a).await;
    sync(&b).await;
    a2.publish("iso.x", "fromA".into()).await.unwrap();
    sync(&a2).await;
    b.publish("iso.x", "fromB".into()).await.unwrap();
    sync(&b).await;
    let m = tokio::time::timeout(T, a_sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload, "fromA", "{server:?}");
    // Isolation: B's first message is its own, not A's.
    let m = tokio::time::timeout(T, b_sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload, "fromB", "{server:?}: accounts not isolated");
    drop(b_sub);

    // Refusals, all with the same text on both servers.
    const VIOLATION: &str = "-ERR 'Authorization Violation'";
    let wrong_seed = nkeys::KeyPair::new_user();
    let bad_creds = s.creds("bad", &user_jwt(&s.a.kp, &ua, |_| {}), &wrong_seed);
    let e = connect_creds(&url, &bad_creds).await;
    assert!(e.is_err(), "{server:?}: creds with a wrong seed connected");
    assert_eq!(
        raw_answer(port, &user_jwt(&s.a.kp, &ua, |_| {}), Some(&wrong_seed)).await,
        VIOLATION,
        "{server:?}: wrong signature"
    );
    let expired = user_jwt(&s.a.kp, &ua, |c| c.exp = jwt::unix_now() - 5);
    assert_eq!(
        raw_answer(port, &expired, Some(&ua)).await,
        VIOLATION,
        "{server:?}: expired user"
    );
    let revoked = user_jwt(&s.b.kp, &s.revoked, |_| {});
    assert_eq!(
        raw_answer(port, &revoked, Some(&s.revoked)).await,
        VIOLATION,
        "{server:?}: revoked user"
    );
    assert_eq!(
        raw_answer(port, &user_jwt(&s.a.kp, &ua, |_| {}), None).await,
        VIOLATION,
        "{server:?}: user without a nonce signature"
    );
    let stranger = Acc::new();
    assert_eq!(
        raw_answer(port, &user_jwt(&stranger.kp, &ua, |_| {}), Some(&ua)).await,
        VIOLATION,
        "{server:?}: user of an unknown account"
    );
    // Signed by B's signing key but without issuer_account: the signing
    // key is no account.
    assert_eq!(
        raw_answer(port, &user_jwt(&s.b.sk, &ua, |_| {}), Some(&ua)).await,
        VIOLATION,
        "{server:?}: signing key without issuer_account"
    );
    assert_eq!(
        raw_answer(port, "eyJhbGciOi.not.a-jwt", Some(&ua)).await,
        VIOLATION,
        "{server:?}: malformed JWT"
    );
    // A bearer user needs no signature.
    let bearer = user_jwt(&s.a.kp, &ua, |c| c.nats.limits.bearer_token = true);
    assert_eq!(
        raw_answer(port, &bearer, None).await,
        "PONG",
        "{server:?}: bearer"
    );

    // User limits: 2 subscriptions, 100-byte payloads.
    let mut rb = RawConn::open(port, &b_jwt, Some(&ub)).await;
    assert!(rb.read_until("PONG", T).await.contains("PONG"));
    rb.send("SUB l.1 1\r\nSUB l.2 2\r\nSUB l.3 3\r\nPING\r\n")
        .await;
    let out = rb.read_until("PONG\r\nPONG", T).await;
    assert!(
        out.contains("-ERR 'maximum subscriptions exceeded'"),
        "{server:?}: {out:?}"
    );
    // The connection stays open: the PING after the refused SUB is
    // answered. (nats-server 2.15 also sends an INFO with the user's
    // max_payload after CONNECT.)
    assert!(
        out.contains("maximum subscriptions exceeded'\r\nPONG\r\n"),
        "{server:?}: still open after the sub limit: {out:?}"
    );
    rb.send(&format!("PUB l.1 200\r\n{}\r\n", "x".repeat(200)))
        .await;
    let out = rb.read_until("Payload", T).await;
    assert!(
        out.contains("-ERR 'Maximum Payload Violation'"),
        "{server:?}: {out:?}"
    );

    // Account connection limit (C: 1).
    let uc = nkeys::KeyPair::new_user();
    let c_user = user_jwt(&s.c.kp, &uc, |_| {});
    let mut c1 = RawConn::open(port, &c_user, Some(&uc)).await;
    assert!(
        c1.read_until("PONG", T).await.contains("PONG"),
        "{server:?}"
    );
    assert_eq!(
        raw_answer(port, &c_user, Some(&uc)).await,
        "-ERR 'maximum account active connections exceeded'",
        "{server:?}: account conn limit"
    );

    // Expiry while connected.
    let short = user_jwt(&s.a.kp, &ua, |c| c.exp = jwt::unix_now() + 3);
    let mut sc = RawConn::open(port, &short, Some(&ua)).await;
    assert!(
        sc.read_until("PONG", T).await.contains("PONG"),
        "{server:?}"
    );
    let out = sc.read_until("Expired", Duration::from_secs(15)).await;
    assert!(
        out.contains("-ERR 'User Authentication Expired'"),
        "{server:?}: {out:?}"
    );

    // `src`: the client's network must be listed (we dial 127.0.0.1).
    let local = user_jwt(&s.a.kp, &ua, |c| {
        c.nats.limits.src = serde_json::json!(["10.0.0.0/8", "127.0.0.0/8", "::1/128"]);
    });
    assert_eq!(
        raw_answer(port, &local, Some(&ua)).await,
        "PONG",
        "{server:?}: src allows"
    );
    let elsewhere = user_jwt(&s.a.kp, &ua, |c| {
        c.nats.limits.src = serde_json::json!(["10.0.0.0/8"]);
    });
    assert_eq!(
        raw_answer(port, &elsewhere, Some(&ua)).await,
        "-ERR 'Authorization Violation'",
        "{server:?}: src refuses"
    );
    // `times`: a window that does not contain now is refused; one that
    // ends in a few seconds lets the user in and closes it at its end.
    let clock = |t: i64| {
        let t = t.rem_euclid(86_400);
        format!("{:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
    };
    let window = |start: i64, end: i64| {
        let (start, end) = (clock(start), clock(end));
        user_jwt(&s.a.kp, &ua, move |c| {
            c.nats.limits.times = serde_json::json!([{"start": start, "end": end}]);
            c.nats.limits.times_location = "UTC".into();
        })
    };
    let now = jwt::unix_now();
    assert_eq!(
        raw_answer(port, &window(now + 3600, now + 7200), Some(&ua)).await,
        "-ERR 'Authorization Violation'",
        "{server:?}: outside connect times"
    );
    let mut wc = RawConn::open(port, &window(now - 60, now + 4), Some(&ua)).await;
    assert!(
        wc.read_until("PONG", T).await.contains("PONG"),
        "{server:?}: inside the connect window"
    );
    let out = wc.read_until("Expired", Duration::from_secs(15)).await;
    assert!(
        out.contains("-ERR 'User Authentication Expired'"),
        "{server:?}: closed at the window's end: {out:?}"
    );

    // Claims updates from a system-account user.
    let us = nkeys::KeyPair::new_user();
    let sys_creds = s.creds("sys", &user_jwt(&s.sys.kp, &us, |_| {}), &us);
    let sys = connect_creds(&url, &sys_creds)
        .await
        .unwrap_or_else(|e| panic!("{server:?}: SYS creds: {e}"));
    let reply = tokio::time::timeout(
        T,
        sys.request(
            format!("$SYS.REQ.ACCOUNT.{}.CLAIMS.UPDATE", s.c.key()),
            s.c_jwt(2).into(),
        ),
    )
    .await
    .expect("update reply within 5s")
    .expect("update reply");
    let v: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(v["data"]["code"], 200, "{server:?}: {v}");
    assert_eq!(v["data"]["message"], "jwt updated", "{server:?}: {v}");
    assert_eq!(v["data"]["account"], s.c.key().as_str(), "{server:?}: {v}");
    assert!(v["server"]["id"].is_string(), "{server:?}: {v}");
    // The raised limit lets a second C connection in.
    assert_eq!(
        raw_answer(port, &c_user, Some(&uc)).await,
        "PONG",
        "{server:?}: conn limit after the update"
    );
    // A mismatched subject is refused with an error reply.
    let reply = tokio::time::timeout(
        T,
        sys.request(
            format!("$SYS.REQ.ACCOUNT.{}.CLAIMS.UPDATE", s.a.key()),
            s.c_jwt(2).into(),
        ),
    )
    .await
    .expect("reply within 5s")
    .expect("reply");
    let v: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(v["error"]["code"], 500, "{server:?}: {v}");
    // Revoking a connected user disconnects it.
    let rv_jwt = user_jwt(&s.b.kp, &s.to_revoke, |_| {});
    let mut rv = RawConn::open(port, &rv_jwt, Some(&s.to_revoke)).await;
    assert!(
        rv.read_until("PONG", T).await.contains("PONG"),
        "{server:?}"
    );
    let reply = tokio::time::timeout(
        T,
        sys.request("$SYS.REQ.CLAIMS.UPDATE", s.b_jwt(true).into()),
    )
    .await
    .expect("reply within 5s")
    .expect("reply");
    let v: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(v["data"]["code"], 200, "{server:?}: {v}");
    let out = rv.read_until("Revoked", T).await;
    assert!(
        out.contains("-ERR 'User Authentication Revoked'"),
        "{server:?}: {out:?}"
    );
    // A user that was not revoked stays.
    sync(&b).await;
    drop(c1);
}

async fn run(server: Server) {
    let setup = Setup::new();
    let port = free_port();
    let conf = setup.conf(&format!("{server:?}"), port);
    let mut p = start(server, &conf, port).await;
    body(server, &setup, port).await;
    p.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn nats_jwt_operator_mode_ours() {
    run(Server::Ours).await;
}

#[tokio::test]
async fn nats_jwt_operator_mode_nats_server_2_15() {
    run(Server::Go).await;
}

/// The stored account files survive a restart: the pushed limit is the
/// one in force afterwards (ours; the file layout is `<key>.jwt`).
#[tokio::test]
async fn nats_jwt_full_resolver_keeps_pushed_claims() {
    let setup = Setup::new();
    let port = free_port();
    let conf = setup.conf("restart", port);
    let mut p = start(Server::Ours, &conf, port).await;
    let url = format!("nats://127.0.0.1:{port}");
    let us = nkeys::KeyPair::new_user();
    let sys_creds = setup.creds("sys2", &user_jwt(&setup.sys.kp, &us, |_| {}), &us);
    let sys = connect_creds(&url, &sys_creds).await.unwrap();
    let pushed = setup.c_jwt(2);
    let reply = tokio::time::timeout(
        T,
        sys.request("$SYS.REQ.CLAIMS.UPDATE", pushed.clone().into()),
    )
    .await
    .unwrap()
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(v["data"]["message"], "jwt updated", "{v}");
    let stored = setup
        .dir
        .path()
        .join("jwt-restart")
        .join(format!("{}.jwt", setup.c.key()));
    assert_eq!(std::fs::read_to_string(&stored).unwrap(), pushed);
    // Lookup answers the stored JWT.
    let reply = tokio::time::timeout(
        T,
        sys.request(
            format!("$SYS.REQ.ACCOUNT.{}.CLAIMS.LOOKUP", setup.c.key()),
            "".into(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        jwt::decode_account(std::str::from_utf8(&reply.payload).unwrap())
            .unwrap()
            .nats
            .limits
            .conn,
        2
    );
    drop(sys);
    p.stop(Duration::from_secs(5)).await;
    p.restart();
    p.try_wait_port(port).await.unwrap();
    let uc = nkeys::KeyPair::new_user();
    let c_user = user_jwt(&setup.c.kp, &uc, |_| {});
    // The stored limit (2), not the preloaded one (1): two connections
    // in, the third refused.
    let mut c1 = RawConn::open(port, &c_user, Some(&uc)).await;
    assert!(c1.read_until("PONG", T).await.contains("PONG"));
    let mut c2 = RawConn::open(port, &c_user, Some(&uc)).await;
    assert!(c2.read_until("PONG", T).await.contains("PONG"));
    assert_eq!(
        raw_answer(port, &c_user, Some(&uc)).await,
        "-ERR 'maximum account active connections exceeded'"
    );
    p.stop(Duration::from_secs(5)).await;
}

/// Bad operator-mode configs are refused at start-up naming the key.
#[tokio::test]
async fn nats_jwt_bad_configs_refused() {
    let setup = Setup::new();
    let op = setup.operator_jwt();
    for (text, want) in [
        (format!("operator: \"{op}\"\n"), "resolver"),
        (format!("operator: \"{op}\"\nresolver: URL(\"http://x\")\n"), "URL"),
        (format!("operator: \"{op}\"\nresolver: MEMORY\nauthorization {{ user: a, password: b }}\n"), "operator mode does not allow"),
        (format!("operator: \"{op}\"\nresolver: MEMORY\nresolver_preload: {{ {}: \"eyJ.bad.jwt\" }}\n", setup.a.key()), "invalid account JWT"),
        ("operator: \"eyJhbGciOi.x.y\"\nresolver: MEMORY\n".to_string(), "invalid operator JWT"),
        (format!("operator: \"{op}\"\nresolver: {{ type: cache, dir: \"/tmp/x\", allow_delete: true }}\n"), "allow_delete"),
        (format!("operator: \"{op}\"\nresolver: {{ type: cache, dir: \"/tmp/x\", interval: \"1m\" }}\n"), "CACHE does not accept sync"),
        (format!("operator: \"{op}\"\nresolver: {{ type: full, dir: \"/tmp/x\", timeout: \"0s\" }}\n"), "Fetch timeout 0s is too smal"),
        (format!("operator: \"{op}\"\nresolver: {{ type: full, dir: \"/tmp/x\", interval: \"soon\" }}\n"), "interval"),
        (format!("operator: \"{op}\"\nresolver: {{ type: full, dir: \"/tmp/x\", ttl: \"1m\" }}\n"), "FULL does not accept ttl"),
        (format!("operator: \"{op}\"\nresolver: {{ type: cache, dir: \"/tmp/x\", ttl: \"later\" }}\n"), "ttl"),
    ] {
        let err = crate::support::nats_config_refused(&text);
        assert!(err.contains(want), "{text}: {err}");
    }
}
