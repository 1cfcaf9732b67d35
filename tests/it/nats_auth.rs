//! Authentication, permissions and TLS of the NATS server, with async-nats
//! and raw sockets.

use std::time::Duration;

use futures::StreamExt;
use liftbridge::config::nats::{
    AuthConfig, NkeyUser, PermissionRules, Permissions, TlsFiles, User,
};

use super::nats_support::{s, start, test_opts, url, wait_subs, Raw};

const T: Duration = Duration::from_secs(5);

fn perms(pub_allow: &[&str], sub_allow: &[&str]) -> Option<Permissions> {
    Some(Permissions {
        publish: PermissionRules {
            allow: pub_allow.iter().map(|s| s.to_string()).collect(),
            deny: vec![],
        },
        subscribe: PermissionRules {
            allow: sub_allow.iter().map(|s| s.to_string()).collect(),
            deny: vec![],
        },
        responses: None,
    })
}

fn user(name: &str, pass: &str, p: Option<Permissions>) -> User {
    User {
        account: None,
        username: name.into(),
        password: pass.into(),
        permissions: p,
    }
}

/// `c` subscribes to `subject`, publishes `payload` there and receives it.
async fn echoes(c: &async_nats::Client, subject: &'static str, payload: &'static str) {
    let mut sub = c.subscribe(subject).await.unwrap();
    c.publish(subject, payload.into()).await.unwrap();
    let m = tokio::time::timeout(T, sub.next()).await.unwrap().unwrap();
    assert_eq!(m.payload, payload);
}

async fn connect_err(opts: async_nats::ConnectOptions, u: String) -> String {
    let r = tokio::time::timeout(T, opts.connect(u))
        .await
        .expect("answer in time");
    match r {
        Ok(_) => panic!("connection should be refused"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn nats_auth_user_password() {
    let mut opts = test_opts();
    opts.auth = AuthConfig {
        users: vec![user("alice", "s3cret", None)],
        ..AuthConfig::default()
    };
    let srv = start(opts).await;
    let c = async_nats::ConnectOptions::with_user_and_password("alice".into(), "s3cret".into())
        .connect(url(&srv))
        .await
        .unwrap();
    echoes(&c, "x", "1").await;
    let e = connect_err(
        async_nats::ConnectOptions::with_user_and_password("alice".into(), "wrong".into()),
        url(&srv),
    )
    .await;
    assert!(e.to_lowercase().contains("authorization"), "{e}");
    let e = connect_err(async_nats::ConnectOptions::new(), url(&srv)).await;
    assert!(e.to_lowercase().contains("authorization"), "{e}");
    let cz = srv.connz_json("auth=1").unwrap();
    assert_eq!(cz["connections"][0]["authorized_user"], "alice");
}

#[tokio::test]
async fn nats_auth_bcrypt_and_token() {
    let hash = bcrypt::hash("pw", 4).unwrap();
    let mut opts = test_opts();
    opts.auth = AuthConfig {
        users: vec![user("bob", &hash, None)],
        ..AuthConfig::default()
    };
    let srv = start(opts).await;
    async_nats::ConnectOptions::with_user_and_password("bob".into(), "pw".into())
        .connect(url(&srv))
        .await
        .unwrap();
    let e = connect_err(
        async_nats::ConnectOptions::with_user_and_password("bob".into(), "nope".into()),
        url(&srv),
    )
    .await;
    assert!(e.to_lowercase().contains("authorization"), "{e}");

    let mut opts = test_opts();
    opts.auth = AuthConfig {
        token: Some("tok".into()),
        ..AuthConfig::default()
    };
    let srv = start(opts).await;
    async_nats::ConnectOptions::with_token("tok".into())
        .connect(url(&srv))
        .await
        .unwrap();
    let e = connect_err(
        async_nats::ConnectOptions::with_token("bad".into()),
        url(&srv),
    )
    .await;
    assert!(e.to_lowercase().contains("authorization"), "{e}");
}

#[tokio::test]
async fn nats_auth_nkey() {
    let kp = nkeys::KeyPair::new_user();
    let seed = kp.seed().unwrap();
    let mut opts = test_opts();
    opts.auth = AuthConfig {
        nkeys: vec![NkeyUser {
            account: None,
            nkey: kp.public_key(),
            permissions: None,
        }],
        ..AuthConfig::default()
    };
    let srv = start(opts).await;
    let r = Raw::connect(&srv).await;
    assert!(r.info.contains("\"nonce\":\""), "{}", r.info);
    let c = async_nats::ConnectOptions::with_nkey(seed)
        .connect(url(&srv))
        .await
        .unwrap();
    c.flush().await.unwrap();
    let other = nkeys::KeyPair::new_user().seed().unwrap();
    let e = connect_err(async_nats::ConnectOptions::with_nkey(other), url(&srv)).await;
    assert!(e.to_lowercase().contains("authorization"), "{e}");
}

#[tokio::test]
async fn nats_auth_permissions_violations() {
    let mut opts = test_opts();
    opts.auth = AuthConfig {
        users: vec![
            user("limited", "p", perms(&["ok.>"], &["ok.>", "_INBOX.>"])),
            user("admin", "p", None),
        ],
        ..AuthConfig::default()
    };
    let srv = start(opts).await;
    let admin = async_nats::ConnectOptions::with_user_and_password("admin".into(), "p".into())
        .connect(url(&srv))
        .await
        .unwrap();
    let mut all = admin.subscribe(">").await.unwrap();
    wait_subs(&srv, 1).await;
    let mut r = Raw::connect(&srv).await;
    r.send(b"CONNECT {\"verbose\":false,\"user\":\"limited\",\"pass\":\"p\"}\r\n")
        .await;
    r.send(b"PUB denied.x 1\r\na\r\nSUB denied.y 1\r\nSUB ok.> q 2\r\nSUB denied.z q 3\r\nPUB ok.y 1\r\nb\r\n")
        .await;
    assert_eq!(
        s(&r.sync().await),
        "-ERR 'Permissions Violation for Publish to \"denied.x\"'\r\n\
         -ERR 'Permissions Violation for Subscription to \"denied.y\"'\r\n\
         -ERR 'Permissions Violation for Subscription to \"denied.z\" using queue \"q\"'\r\n\
         MSG ok.y 2 1\r\nb\r\n"
    );
    // Only the permitted message reached the admin.
    let m = tokio::time::timeout(T, all.next()).await.unwrap().unwrap();
    assert_eq!(m.subject.as_str(), "ok.y");
    assert!(tokio::time::timeout(Duration::from_millis(200), all.next())
        .await
        .is_err());
}

/// The client port's TLS with the development server certificate, no
/// client certificates.
fn server_tls(p: &liftbridge::tls::DevCertPaths) -> TlsFiles {
    TlsFiles {
        cert: p.server_cert.clone(),
        key: p.server_key.clone(),
        ca: None,
        verify: false,
        params: Default::default(),
        handshake_first: None,
    }
}

fn certs() -> (tempfile::TempDir, liftbridge::tls::DevCertPaths) {
    let dir = tempfile::tempdir().unwrap();
    let paths = liftbridge::tls::generate_dev_certs(dir.path(), &[]).unwrap();
    (dir, paths)
}

/// `tls { handshake_first }`: the TLS handshake comes before INFO.
/// Without a fallback a client that waits for INFO gets nothing in plain
/// text, and async-nats with `tls_first()` connects and works; with a
/// fallback (300 ms) a waiting client gets the plaintext INFO after it and
/// upgrades as usual, and a TLS-first client still connects.
#[tokio::test]
async fn nats_tls_handshake_first() {
    use tokio::io::AsyncReadExt;
    let (_dir, p) = certs();
    for fallback in [Duration::ZERO, Duration::from_millis(300)] {
        let mut opts = test_opts();
        opts.tls = Some(TlsFiles {
            handshake_first: Some(fallback),
            ..server_tls(&p)
        });
        let srv = start(opts).await;
        let first = async_nats::ConnectOptions::new()
            .add_root_certificates(p.ca_cert.clone())
            .tls_first()
            .connect(url(&srv))
            .await
            .unwrap();
        echoes(&first, "hf", "first").await;

        let mut waiting = tokio::net::TcpStream::connect(srv.client_addr())
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let got = tokio::time::timeout(Duration::from_millis(900), waiting.read(&mut buf)).await;
        if fallback.is_zero() {
            assert!(got.is_err(), "plaintext sent before the TLS handshake");
            continue;
        }
        let n = got.expect("INFO after the fallback delay").unwrap();
        assert!(buf[..n].starts_with(b"INFO {"), "{:?}", &buf[..n]);
        let c = async_nats::ConnectOptions::new()
            .add_root_certificates(p.ca_cert.clone())
            .require_tls(true)
            .connect(url(&srv))
            .await
            .unwrap();
        echoes(&c, "hf", "after INFO").await;
    }
}

#[tokio::test]
async fn nats_tls_and_mtls() {
    let (_dir, p) = certs();
    let mut opts = test_opts();
    opts.tls = Some(server_tls(&p));
    let srv = start(opts).await;
    let r = Raw::connect(&srv).await;
    assert!(r.info.contains("\"tls_required\":true"), "{}", r.info);
    assert!(!r.info.contains("tls_verify"));
    let c = async_nats::ConnectOptions::new()
        .add_root_certificates(p.ca_cert.clone())
        .require_tls(true)
        .connect(url(&srv))
        .await
        .unwrap();
    echoes(&c, "t", "secure").await;
    let cz = srv.connz_json("").unwrap();
    let conns = cz["connections"].as_array().unwrap();
    assert!(
        conns
            .iter()
            .any(|c| c["tls_version"].as_str().is_some_and(|v| v.contains("TLS"))),
        "{cz}"
    );

    // mTLS: a client certificate is required.
    let mut opts = test_opts();
    opts.tls = Some(TlsFiles {
        ca: Some(p.ca_cert.clone()),
        verify: true,
        ..server_tls(&p)
    });
    let srv = start(opts).await;
    let r = Raw::connect(&srv).await;
    assert!(r.info.contains("\"tls_verify\":true"), "{}", r.info);
    let c = async_nats::ConnectOptions::new()
        .add_root_certificates(p.ca_cert.clone())
        .add_client_certificate(p.client_cert.clone(), p.client_key.clone())
        .require_tls(true)
        .connect(url(&srv))
        .await
        .unwrap();
    echoes(&c, "m", "mutual").await;
    let no_cert = async_nats::ConnectOptions::new()
        .add_root_certificates(p.ca_cert.clone())
        .require_tls(true)
        .max_reconnects(1);
    let r = tokio::time::timeout(T, async {
        let c = no_cert.connect(url(&srv)).await?;
        c.flush()
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok::<_, Box<dyn std::error::Error>>(())
    })
    .await;
    assert!(
        !matches!(r, Ok(Ok(()))),
        "client without certificate must be refused"
    );
}
