//! Security of the HTTP port: bearer token and HTTP Basic credentials
//! (`http.auth.*`), the open metrics/health paths and open reads, and HTTPS
//! (`http.tls.*`) with the certificates `liftbridge cert init` writes.

use std::net::SocketAddr;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use liftbridge::http::AuthConfig;
use liftbridge::node::{Node, NodeHandle};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::admin_http::*;
use crate::api_common::{config, start};

async fn node_with(dir: &std::path::Path, auth: AuthConfig) -> NodeHandle {
    let mut cfg = config(dir);
    cfg.http_auth = auth;
    start(cfg).await
}

fn basic(u: &str, p: &str) -> String {
    format!("Basic {}", B64.encode(format!("{u}:{p}")))
}

async fn get_as(a: SocketAddr, path: &str, auth: &str) -> Resp {
    request(a, "GET", path, &[("Authorization", auth)], None).await
}

async fn create_as(a: SocketAddr, name: &str, auth: Option<&str>) -> Resp {
    let body = serde_json::to_vec(&json!({"name": name, "subject": name})).unwrap();
    let mut h = vec![("Content-Type", "application/json")];
    if let Some(x) = auth {
        h.push(("Authorization", x));
    }
    request(a, "POST", "/api/v1/streams", &h, Some(&body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_auth_token_and_basic() {
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(
        dir.path(),
        AuthConfig {
            token: Some("t0ken".into()),
            username: Some("admin".into()),
            password: Some("pa55".into()),
            ..Default::default()
        },
    )
    .await;
    let a = node.http_addr().unwrap();
    let bearer = "Bearer t0ken";
    let good_basic = basic("admin", "pa55");

    // No credentials: 401 with the browser's Basic prompt.
    let r = get(a, "/api/v1/info").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.error(), "authentication required");
    let challenges: Vec<&str> = r
        .headers
        .iter()
        .filter(|(k, _)| k == "www-authenticate")
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(
        challenges.contains(&"Basic realm=\"liftbridge\""),
        "{challenges:?}"
    );
    // Wrong token, wrong password, wrong user, malformed: 401.
    for bad in [
        "Bearer t0kem".to_string(),
        "Bearer t0ken2".to_string(),
        "Bearer ".to_string(),
        basic("admin", "pa56"),
        basic("root", "pa55"),
        basic("admin", "t0ken"),
        "Basic ###".to_string(),
        "t0ken".to_string(),
    ] {
        let r = get_as(a, "/api/v1/info", &bad).await;
        assert_eq!(r.status, 401, "{bad}");
        assert_eq!(r.error(), "invalid credentials");
    }
    // The right ones.
    assert_eq!(get_as(a, "/api/v1/info", bearer).await.status, 200);
    let r = get_as(a, "/api/v1/info", &good_basic).await;
    assert_eq!(
        (r.status, r.json()["server_id"].clone()),
        (200, json!(node.server_id()))
    );

    // Mutations: refused without credentials, and nothing happens.
    assert_eq!(create_as(a, "s", None).await.status, 401);
    assert_eq!(create_as(a, "s", Some("Bearer nope")).await.status, 401);
    let v = get_as(a, "/api/v1/streams", bearer).await.json();
    assert!(v["streams"].as_array().unwrap().is_empty());
    assert_eq!(create_as(a, "s", Some(bearer)).await.status, 201);
    assert_eq!(create_as(a, "s2", Some(&good_basic)).await.status, 201);
    let r = request(a, "DELETE", "/api/v1/streams/s", &[], None).await;
    assert_eq!(r.status, 401);
    let r = request(
        a,
        "DELETE",
        "/api/v1/streams/s",
        &[("Authorization", bearer)],
        None,
    )
    .await;
    assert_eq!(r.status, 200);
    // A large body without credentials is refused before it is read.
    let big = vec![b'x'; liftbridge::http::MAX_BODY + 1];
    let r = request(a, "POST", "/api/v1/streams", &[], Some(&big)).await;
    assert_eq!(r.status, 401);

    // Monitoring JSON and unknown paths need credentials too (no probing).
    for p in [
        "/varz",
        "/connz",
        "/subsz",
        "/",
        "/api/v1/nope",
        "/ui/app.js",
    ] {
        assert_eq!(get(a, p).await.status, 401, "{p}");
    }
    assert_eq!(get_as(a, "/varz", bearer).await.status, 200);
    // The UI is served once the browser sends the credentials.
    let r = get_as(a, "/", &good_basic).await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    // open_metrics (default): health and metrics stay open.
    let r = get(a, "/healthz").await;
    assert_eq!(r.status, 200);
    assert_eq!(get(a, "/api/v1/health").await.status, 200);
    let r = get(a, "/metrics").await;
    assert_eq!(r.status, 200);
    // Refusals are counted, under a fixed label (not the probed path).
    let text = String::from_utf8_lossy(&r.body).into_owned();
    let refused = text
        .lines()
        .find(|l| {
            l.starts_with("liftbridge_http_requests_total{")
                && l.contains("route=\"unauthenticated\"")
                && l.contains("status=\"401\"")
        })
        .unwrap_or_else(|| panic!("no refusal counter in {text}"));
    let n: f64 = refused.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 15.0, "{refused}");
    assert!(!text.contains("/ui/app.js"), "probed paths are not labels");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_auth_closed_metrics_and_open_reads() {
    // Metrics closed: health needs the token too.
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(
        dir.path(),
        AuthConfig {
            token: Some("tk".into()),
            open_metrics: false,
            ..Default::default()
        },
    )
    .await;
    let a = node.http_addr().unwrap();
    for p in ["/healthz", "/api/v1/health", "/metrics"] {
        let r = get(a, p).await;
        assert_eq!(r.status, 401, "{p}");
        // Token only: the challenge asks for a bearer token, not a password.
        assert_eq!(
            r.header("www-authenticate"),
            Some("Bearer realm=\"liftbridge\"")
        );
    }
    assert_eq!(get_as(a, "/healthz", "Bearer tk").await.status, 200);
    assert_eq!(get_as(a, "/api/v1/health", "Bearer tk").await.status, 200);
    node.shutdown().await;

    // Open reads: GETs pass, mutations do not.
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(
        dir.path(),
        AuthConfig {
            token: Some("tk".into()),
            open_reads: true,
            ..Default::default()
        },
    )
    .await;
    let a = node.http_addr().unwrap();
    assert_eq!(get(a, "/api/v1/info").await.status, 200);
    assert_eq!(get(a, "/api/v1/streams").await.status, 200);
    assert_eq!(get(a, "/varz").await.status, 200);
    assert_eq!(
        request(a, "HEAD", "/api/v1/info", &[], None).await.status,
        200
    );
    assert_eq!(create_as(a, "s", None).await.status, 401);
    assert_eq!(create_as(a, "s", Some("Bearer tk")).await.status, 201);
    let r = request(a, "POST", "/api/v1/streams/s/pause", &[], None).await;
    assert_eq!(r.status, 401);
    let r = request(a, "DELETE", "/api/v1/streams/s", &[], None).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        get(a, "/api/v1/streams/s").await.json()["partitions"][0]["paused"],
        false
    );
    node.shutdown().await;
}

/// `liftbridge cert init` through the built binary.
fn cert_init(dir: &std::path::Path) -> std::path::PathBuf {
    let out_dir = dir.join("certs");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args(["cert", "init", "--dir"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    out_dir
}

async fn https(
    addr: SocketAddr,
    ca: &std::path::Path,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Resp> {
    let client = liftbridge::tls::client_config(ca, None).unwrap();
    let connector = tokio_rustls::TlsConnector::from(client);
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await?;
    Ok(request_on(tls, method, path, headers, None).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_https_with_cert_init_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let certs = cert_init(dir.path());
    // Configured the way an operator does it: the YAML keys.
    let yaml = format!(
        "listen: 127.0.0.1:0\ndata.dir: {}\nnats:\n  listen: 127.0.0.1:0\nhttp:\n  listen: 127.0.0.1:0\n  auth:\n    token: sekret\n  tls:\n    cert: {}\n    key: {}\n",
        dir.path().join("data").display(),
        certs.join("server.pem").display(),
        certs.join("server-key.pem").display(),
    );
    let cfg = liftbridge::config::liftbridge::from_yaml_str(&yaml, std::path::Path::new("t.yaml"))
        .unwrap();
    let node = Node::start_with(&cfg).await.expect("node starts");
    let a = node.http_addr().unwrap();
    let ca = certs.join("ca.pem");

    // HTTPS with a client trusting the dev CA.
    let r = https(
        a,
        &ca,
        "GET",
        "/api/v1/info",
        &[("Authorization", "Bearer sekret")],
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["http_addr"], a.to_string());
    let r = https(a, &ca, "GET", "/api/v1/info", &[]).await.unwrap();
    assert_eq!(r.status, 401, "auth applies over TLS too");
    assert_eq!(
        https(a, &ca, "GET", "/healthz", &[]).await.unwrap().status,
        200
    );

    // Plain HTTP to the TLS port gets no HTTP answer.
    let mut s = tokio::net::TcpStream::connect(a).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .expect("the server closes the connection");
    assert!(
        !buf.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&buf)
    );

    // A client trusting another CA refuses the server.
    let other = tempfile::tempdir().unwrap();
    let other_ca = cert_init(other.path()).join("ca.pem");
    assert!(https(a, &other_ca, "GET", "/healthz", &[]).await.is_err());
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_bad_http_security_config_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let load = |y: &str| {
        liftbridge::config::liftbridge::from_yaml_str(y, std::path::Path::new("t.yaml")).unwrap()
    };
    let half_tls = load("http.tls.cert: /nonexistent.pem\n");
    let e = liftbridge::node::NodeConfig::from_liftbridge(&half_tls).unwrap_err();
    assert!(e.to_string().contains("http.tls.key"), "{e}");
    let half_basic = load("http.auth.username: admin\n");
    let e = liftbridge::node::NodeConfig::from_liftbridge(&half_basic).unwrap_err();
    assert!(e.to_string().contains("http.auth.password"), "{e}");
    // Missing certificate files stop the start with a message naming them.
    let mut cfg = config(dir.path());
    cfg.http_tls = Some(liftbridge::node::HttpTls {
        cert: dir.path().join("missing.pem"),
        key: dir.path().join("missing-key.pem"),
    });
    let e = Node::start(cfg).await.err().expect("start fails");
    assert!(e.to_string().contains("missing.pem"), "{e}");
}
