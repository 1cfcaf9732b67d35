//! The built-in web admin UI: static files embedded in the binary.
//!
//! `web-ui/` holds plain HTML, CSS and JavaScript (no build step); this
//! module embeds them with `include_str!`/`include_bytes!` so an installed
//! binary serves its UI with nothing else on disk. Routes: `/` (and `/ui`,
//! `/ui/`) answer `index.html`; `/ui/<file>` answers one embedded asset with
//! its content type; anything else under `/ui/` is a 404. The UI itself talks
//! only to the admin JSON API (`/api/v1/…`).
//!
//! Caching: `index.html` is always revalidated (`no-cache`), and it names
//! each asset as `/ui/<file>?v=<hash of every asset>`. A request carrying
//! the current hash may be cached for a year (`immutable`): a binary with
//! different assets has a different hash, so browsers never mix an old
//! script with a new page. Requests without it (or with a stale one) get
//! `no-cache`.
//!
//! Authentication: when only `http.auth.token` is configured these static
//! files are served without credentials ([`is_static_path`]), because a
//! browser cannot send a bearer token with a page load; the page then asks
//! for the token when the API answers 401 and sends it on every API call.
//! With HTTP Basic configured they need credentials like everything else,
//! so the browser shows its own login prompt and reuses the credentials for
//! the API calls.
//!
//! Invariants: only the fixed table of embedded files is served (the
//! request path is looked up by exact name, never joined onto a directory),
//! so no request can reach the file system. Only GET and HEAD are
//! answered; other methods get 405. This module must not call the admin
//! API or hold any state beyond the embedded bytes.

use std::sync::LazyLock;

use super::{HttpRequest, HttpResponse, Router};

/// One embedded file of the UI.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// File name under `/ui/`.
    pub name: &'static str,
    /// The `Content-Type` it is served with.
    pub content_type: &'static str,
    /// The file's bytes.
    pub body: &'static [u8],
}

/// Every file served under `/ui/`.
pub const ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web-ui/app.js"),
    },
    Asset {
        name: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../web-ui/style.css"),
    },
    Asset {
        name: "favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../../web-ui/favicon.svg"),
    },
];

/// `index.html` as written: `{{v}}` marks where the asset hash goes.
const INDEX_TEMPLATE: &str = include_str!("../../web-ui/index.html");

/// The placeholder replaced by [`asset_version`] in `index.html`.
const VERSION_MARK: &str = "{{v}}";

const INDEX_TYPE: &str = "text/html; charset=utf-8";

/// Cache policy of responses that must be revalidated every time.
const NO_CACHE: &str = "no-cache";

/// Cache policy of an asset requested with the current hash.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// What the page may load: only this origin, no inline script or style
/// (the UI draws its charts as SVG elements, which need neither).
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
form-action 'self'; frame-ancestors 'none'";

static VERSION: LazyLock<String> = LazyLock::new(|| {
    // FNV-1a over every asset's name and bytes: stable across runs of one
    // binary, different whenever an asset changes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for a in ASSETS {
        for b in a.name.bytes().chain([0]).chain(a.body.iter().copied()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
});

static INDEX: LazyLock<String> =
    LazyLock::new(|| INDEX_TEMPLATE.replace(VERSION_MARK, asset_version()));

/// The hash of all embedded assets, as used in `?v=` of asset URLs.
pub fn asset_version() -> &'static str {
    VERSION.as_str()
}

/// `index.html` with the asset hash filled in.
pub fn index_html() -> &'static str {
    INDEX.as_str()
}

/// Whether `path` is one of the UI's static files (not the API). With
/// token-only auth these are served without credentials (see
/// `http::auth`): they contain no data, and the page itself asks for the
/// token when the API answers 401.
pub fn is_static_path(path: &str) -> bool {
    matches!(path, "/" | "/index.html" | "/ui") || path.starts_with("/ui/")
}

/// The embedded asset called `name`, if any.
pub fn asset(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

/// The UI's routes. Merge them last into the HTTP router so `/` serves
/// the UI rather than the monitoring endpoint list.
pub fn routes() -> Router {
    Router::new()
        .route_sync("/", serve_index)
        .route_sync("/index.html", serve_index)
        .route_sync("/ui", serve_index)
        .prefix("/ui/", |r| async move { serve_asset(&r) })
}

/// 405 unless the method only reads.
fn check_method(r: &HttpRequest) -> Option<HttpResponse> {
    if r.method == hyper::Method::GET || r.method == hyper::Method::HEAD {
        return None;
    }
    let mut resp = HttpResponse::error(405, &format!("method {} not allowed", r.method));
    resp.headers.push(("allow", "GET, HEAD".to_string()));
    Some(resp)
}

fn serve_index(r: &HttpRequest) -> HttpResponse {
    if let Some(resp) = check_method(r) {
        return resp;
    }
    let mut resp = HttpResponse::bytes(200, INDEX_TYPE, index_html().as_bytes());
    resp.headers.extend([
        ("cache-control", NO_CACHE.to_string()),
        ("content-security-policy", CSP.to_string()),
        ("x-content-type-options", "nosniff".to_string()),
        ("referrer-policy", "no-referrer".to_string()),
        ("x-frame-options", "DENY".to_string()),
    ]);
    resp
}

fn serve_asset(r: &HttpRequest) -> HttpResponse {
    if let Some(resp) = check_method(r) {
        return resp;
    }
    // The router only sends paths starting with `/ui/` here.
    let name = r.path.strip_prefix("/ui/").unwrap_or_default();
    if name.is_empty() {
        return serve_index(r);
    }
    let Some(a) = asset(name) else {
        return HttpResponse::error(404, &format!("no such UI file: {}", r.path));
    };
    let current = r.query_params().get("v").map(String::as_str) == Some(asset_version());
    let mut resp = HttpResponse::bytes(200, a.content_type, a.body);
    resp.headers.extend([
        (
            "cache-control",
            if current { IMMUTABLE } else { NO_CACHE }.to_string(),
        ),
        ("x-content-type-options", "nosniff".to_string()),
    ]);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: hyper::Method, path: &str, query: &str) -> HttpRequest {
        HttpRequest::new(method, path, query)
    }

    fn header<'a>(r: &'a HttpResponse, name: &str) -> Option<&'a str> {
        r.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    #[tokio::test]
    async fn index_and_assets() {
        let router = routes();
        let r = router.dispatch(req(hyper::Method::GET, "/", "")).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.content_type, INDEX_TYPE);
        let body = std::str::from_utf8(&r.body).unwrap();
        assert!(!body.contains(VERSION_MARK), "placeholder left in index");
        assert!(body.contains(&format!("/ui/app.js?v={}", asset_version())));
        assert_eq!(header(&r, "cache-control"), Some(NO_CACHE));
        assert!(header(&r, "content-security-policy").is_some());

        let r = router
            .dispatch(req(
                hyper::Method::GET,
                "/ui/style.css",
                &format!("v={}", asset_version()),
            ))
            .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.content_type, "text/css; charset=utf-8");
        assert_eq!(header(&r, "cache-control"), Some(IMMUTABLE));
        let r = router
            .dispatch(req(hyper::Method::GET, "/ui/style.css", "v=old"))
            .await;
        assert_eq!(header(&r, "cache-control"), Some(NO_CACHE));

        let r = router
            .dispatch(req(hyper::Method::GET, "/ui/../Cargo.toml", ""))
            .await;
        assert_eq!(r.status, 404);
        let r = router
            .dispatch(req(hyper::Method::GET, "/ui/nope.js", ""))
            .await;
        assert_eq!(r.status, 404);
        let r = router
            .dispatch(req(hyper::Method::POST, "/ui/app.js", ""))
            .await;
        assert_eq!(r.status, 405);
        assert_eq!(header(&r, "allow"), Some("GET, HEAD"));
        let r = router.dispatch(req(hyper::Method::DELETE, "/", "")).await;
        assert_eq!(r.status, 405);
        let r = router.dispatch(req(hyper::Method::GET, "/ui/", "")).await;
        assert_eq!(r.content_type, INDEX_TYPE);
    }

    #[test]
    fn version_is_stable_hex() {
        assert_eq!(asset_version().len(), 16);
        assert!(asset_version().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(asset_version(), asset_version());
    }
}
