//! The web UI served by a real node over its HTTP port: `/` is the UI's
//! page (not the monitoring list), every file `index.html` references exists
//! with the right content type and cache policy, and unknown files are 404.

use std::net::SocketAddr;

use crate::api_common::{config, start};

/// A raw HTTP/1.1 exchange: (status, lower-cased head, body bytes).
async fn fetch(addr: SocketAddr, method: &str, path: &str) -> (u16, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response has a head");
    let head = String::from_utf8_lossy(&buf[..split]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head, buf[split + 4..].to_vec())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|r| r.strip_prefix(':'))
            .map(str::trim)
    })
}

/// Every `src="…"` and `href="…"` value in `html` that names a local file.
fn local_refs(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["src=\"", "href=\""] {
        let mut rest = html;
        while let Some(i) = rest.find(attr) {
            rest = &rest[i + attr.len()..];
            let end = rest.find('"').unwrap();
            let v = &rest[..end];
            if v.starts_with('/') {
                out.push(v.to_string());
            }
            rest = &rest[end..];
        }
    }
    out
}

#[tokio::test]
async fn ui_index_and_assets_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let addr = node.http_addr().expect("http enabled");

    let (st, head, body) = fetch(addr, "GET", "/").await;
    assert_eq!(st, 200);
    assert_eq!(
        header(&head, "content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(header(&head, "cache-control"), Some("no-cache"));
    assert!(header(&head, "content-security-policy")
        .unwrap()
        .contains("script-src 'self'"));
    let html = String::from_utf8(body).unwrap();
    assert!(html.contains("data-testid=\"view\""), "not the UI page");
    assert!(!html.contains("{{v}}"));
    assert!(!html.contains("http://") && !html.contains("https://"));

    let refs = local_refs(&html);
    for want in ["/ui/app.js", "/ui/style.css", "/ui/favicon.svg"] {
        assert!(
            refs.iter().any(|r| r.split('?').next() == Some(want)),
            "index.html does not reference {want}: {refs:?}"
        );
    }
    for r in &refs {
        let (st, head, body) = fetch(addr, "GET", r).await;
        assert_eq!(st, 200, "{r} is referenced by index.html but not served");
        assert!(!body.is_empty(), "{r} is empty");
        let want = match r.split('?').next().unwrap().rsplit('.').next() {
            Some("js") => "text/javascript; charset=utf-8",
            Some("css") => "text/css; charset=utf-8",
            Some("svg") => "image/svg+xml",
            other => panic!("unexpected asset type {other:?} in {r}"),
        };
        assert_eq!(header(&head, "content-type"), Some(want), "{r}");
        assert_eq!(header(&head, "x-content-type-options"), Some("nosniff"));
        // Referenced with the current asset hash: cacheable for a long time.
        assert!(
            header(&head, "cache-control")
                .unwrap()
                .contains("immutable"),
            "{r}: {head}"
        );
        assert_eq!(
            header(&head, "content-length").map(|l| l.parse::<usize>().unwrap()),
            Some(body.len())
        );
    }

    // The same file without the hash must be revalidated.
    let (st, head, body) = fetch(addr, "GET", "/ui/app.js").await;
    assert_eq!(st, 200);
    assert_eq!(header(&head, "cache-control"), Some("no-cache"));
    assert!(String::from_utf8(body).unwrap().contains("/api/v1/info"));

    let (st, head, _) = fetch(addr, "GET", "/ui/missing.js").await;
    assert_eq!(st, 404);
    assert!(header(&head, "content-type")
        .unwrap()
        .contains("application/json"));
    let (st, _, _) = fetch(addr, "GET", "/ui/../Cargo.toml").await;
    assert_eq!(st, 404);
    let (st, head, _) = fetch(addr, "POST", "/").await;
    assert_eq!(st, 405);
    assert_eq!(header(&head, "allow"), Some("get, head"));
    let (st, _, body) = fetch(addr, "HEAD", "/ui/style.css").await;
    assert_eq!(st, 200);
    assert!(body.is_empty());

    // The monitoring endpoints still answer next to the UI.
    let (st, _, body) = fetch(addr, "GET", "/varz").await;
    assert_eq!(st, 200);
    assert!(String::from_utf8(body).unwrap().contains("server_id"));

    node.shutdown().await;
}

/// With token-only auth the UI's files load without credentials (a browser
/// cannot send a bearer token with a page load) while the API stays closed;
/// with HTTP Basic the page itself is closed so the browser prompts.
#[tokio::test]
async fn ui_files_open_under_token_auth_closed_under_basic() {
    use liftbridge::http::AuthConfig;

    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.http_auth = AuthConfig {
        token: Some("s3cret".into()),
        ..Default::default()
    };
    let node = start(cfg).await;
    let addr = node.http_addr().expect("http enabled");
    for path in ["/", "/index.html", "/ui/app.js", "/ui/style.css"] {
        let (st, _, _) = fetch(addr, "GET", path).await;
        assert_eq!(st, 200, "{path} under token auth");
    }
    let (st, head, _) = fetch(addr, "GET", "/api/v1/streams").await;
    assert_eq!(st, 401);
    assert!(header(&head, "www-authenticate")
        .unwrap()
        .starts_with("bearer"));
    // Only reads of the files are open.
    let (st, _, _) = fetch(addr, "POST", "/ui/app.js").await;
    assert_eq!(st, 401);
    node.shutdown().await;

    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.http_auth = AuthConfig {
        username: Some("admin".into()),
        password: Some("pw".into()),
        ..Default::default()
    };
    let node = start(cfg).await;
    let addr = node.http_addr().expect("http enabled");
    let (st, head, _) = fetch(addr, "GET", "/").await;
    assert_eq!(st, 401);
    assert!(header(&head, "www-authenticate")
        .unwrap()
        .starts_with("basic realm="));
    node.shutdown().await;
}
