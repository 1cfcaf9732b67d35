//! Authentication of the HTTP port: a bearer token and/or HTTP Basic
//! credentials from the configuration (`http.auth.*`).
//!
//! The check runs in the server before the request body is read and before
//! any handler, so no route can forget it. When neither a token nor a
//! username is configured everything is open. Otherwise every path needs
//! credentials except: `/metrics`, `/healthz` and `/api/v1/health` while
//! `open_metrics` is true (scrapers and load balancers), and GET/HEAD
//! requests when `open_reads` is true. A refusal is 401 with
//! `WWW-Authenticate` (Basic when a username is configured, so browsers
//! show their login prompt; Bearer otherwise).
//!
//! Cross-site requests: a browser attaches cached Basic credentials (and
//! reaches `localhost`) for pages of any site, so a request that changes
//! state (any method but GET/HEAD/OPTIONS) and carries an `Origin` other
//! than the `Host` it was sent to is refused with 403, with or without
//! auth ([`cross_origin_refusal`]). Clients that are not browsers send no
//! `Origin` and are not affected.
//!
//! Secrets are compared in constant time for a given secret length
//! ([`ct_eq`]); both the username and the password are always compared, so
//! the time does not tell which one was wrong. This module never logs a
//! credential.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hyper::{HeaderMap, Method};

use super::HttpResponse;

/// Paths that stay open while `open_metrics` is true.
pub const OPEN_METRICS_PATHS: &[&str] = &["/metrics", "/healthz", "/api/v1/health"];

/// Realm named in `WWW-Authenticate`.
const REALM: &str = "liftbridge";

/// Authentication settings of the HTTP port.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// `http.auth.token`: `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// `http.auth.username` (with `password`): HTTP Basic.
    pub username: Option<String>,
    /// `http.auth.password`.
    pub password: Option<String>,
    /// `http.auth.open_metrics` (default true): metrics and health stay open.
    pub open_metrics: bool,
    /// `http.auth.open_reads` (default false): GET and HEAD need nothing.
    pub open_reads: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            token: None,
            username: None,
            password: None,
            open_metrics: true,
            open_reads: false,
        }
    }
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets stay out of logs and panics.
        let hidden = |o: &Option<String>| o.as_ref().map(|_| "<hidden>");
        f.debug_struct("AuthConfig")
            .field("token", &hidden(&self.token))
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("open_metrics", &self.open_metrics)
            .field("open_reads", &self.open_reads)
            .finish()
    }
}

/// Configuration mistakes found by [`AuthConfig::validate`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthConfigError {
    /// Username without password or the reverse.
    #[error("http.auth.username and http.auth.password must be given together")]
    HalfBasic,
    /// An empty secret would accept an empty credential.
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// Basic credentials cannot carry a ':' in the username.
    #[error("http.auth.username must not contain ':'")]
    ColonInUsername,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization` header.
    Missing,
    /// Credentials given but wrong or malformed.
    Invalid,
}

impl AuthConfig {
    /// Whether any credential is configured (otherwise all is open).
    pub fn enabled(&self) -> bool {
        self.token.is_some() || self.username.is_some() || self.password.is_some()
    }

    /// Checks the settings are usable.
    pub fn validate(&self) -> Result<(), AuthConfigError> {
        if self.username.is_some() != self.password.is_some() {
            return Err(AuthConfigError::HalfBasic);
        }
        if self.token.as_deref() == Some("") {
            return Err(AuthConfigError::Empty("http.auth.token"));
        }
        if self.username.as_deref() == Some("") {
            return Err(AuthConfigError::Empty("http.auth.username"));
        }
        if self.password.as_deref() == Some("") {
            return Err(AuthConfigError::Empty("http.auth.password"));
        }
        if self.username.as_deref().is_some_and(|u| u.contains(':')) {
            return Err(AuthConfigError::ColonInUsername);
        }
        Ok(())
    }

    /// Whether this request may pass without credentials.
    fn is_open(&self, method: &Method, path: &str) -> bool {
        if !self.enabled() {
            return true;
        }
        let read = method == Method::GET || method == Method::HEAD;
        if self.open_reads && read {
            return true;
        }
        // The UI's static files hold no data, and a browser cannot attach a
        // bearer token to a page load: with token-only auth they stay open
        // and the page asks for the token. With Basic configured they stay
        // closed, so the browser's own login prompt appears.
        if read && self.username.is_none() && super::ui::is_static_path(path) {
            return true;
        }
        // The router accepts one trailing slash; so does this check.
        let p = path
            .strip_suffix('/')
            .filter(|p| !p.is_empty())
            .unwrap_or(path);
        self.open_metrics && OPEN_METRICS_PATHS.contains(&p)
    }

    /// Checks a request's credentials.
    pub fn check(&self, method: &Method, path: &str, headers: &HeaderMap) -> Result<(), Refusal> {
        if self.is_open(method, path) {
            return Ok(());
        }
        let Some(value) = headers.get(hyper::header::AUTHORIZATION) else {
            return Err(Refusal::Missing);
        };
        let value = value.to_str().map_err(|_| Refusal::Invalid)?.trim();
        let (scheme, cred) = value.split_once(' ').ok_or(Refusal::Invalid)?;
        let cred = cred.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            if let Some(token) = &self.token {
                if ct_eq(cred.as_bytes(), token.as_bytes()) {
                    return Ok(());
                }
            }
        } else if scheme.eq_ignore_ascii_case("basic") {
            if let (Some(user), Some(pass)) = (&self.username, &self.password) {
                let decoded = B64.decode(cred).map_err(|_| Refusal::Invalid)?;
                let colon = decoded
                    .iter()
                    .position(|b| *b == b':')
                    .ok_or(Refusal::Invalid)?;
                let (u, p) = (&decoded[..colon], &decoded[colon + 1..]);
                // Both compared, always: `&` not `&&`.
                if ct_eq(u, user.as_bytes()) & ct_eq(p, pass.as_bytes()) {
                    return Ok(());
                }
            }
        }
        Err(Refusal::Invalid)
    }

    /// The 401 answer for a refusal.
    pub fn refusal_response(&self, why: Refusal) -> HttpResponse {
        let msg = match why {
            Refusal::Missing => "authentication required",
            Refusal::Invalid => "invalid credentials",
        };
        let mut r = HttpResponse::error(401, msg);
        if self.username.is_some() {
            r.headers
                .push(("www-authenticate", format!("Basic realm=\"{REALM}\"")));
        }
        if self.token.is_some() {
            r.headers
                .push(("www-authenticate", format!("Bearer realm=\"{REALM}\"")));
        }
        r
    }
}

/// The 403 answer for a state-changing request from another site's page:
/// its `Origin` (scheme://host[:port]) names another authority than the
/// `Host` header. `None` lets the request through.
pub fn cross_origin_refusal(method: &Method, headers: &HeaderMap) -> Option<HttpResponse> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    let origin = headers.get(hyper::header::ORIGIN)?;
    let origin_authority = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, rest)| rest.trim_end_matches('/'));
    let host = headers
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok());
    match (origin_authority, host) {
        (Some(o), Some(h)) if o.eq_ignore_ascii_case(h.trim()) => None,
        _ => Some(HttpResponse::error(
            403,
            "cross-origin request refused: the Origin header does not match the Host",
        )),
    }
}

/// Compares a presented credential with a secret. The time depends on the
/// secret's length only, not on where the bytes differ.
pub fn ct_eq(presented: &[u8], secret: &[u8]) -> bool {
    let mut diff = u8::from(presented.len() != secret.len());
    for (i, s) in secret.iter().enumerate() {
        diff |= presented.get(i).copied().unwrap_or(0) ^ s;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(hyper::header::AUTHORIZATION, a.parse().unwrap());
        }
        h
    }

    fn basic(u: &str, p: &str) -> String {
        format!("Basic {}", B64.encode(format!("{u}:{p}")))
    }

    #[test]
    fn constant_time_compare() {
        assert!(ct_eq(b"secret", b"secret"));
        assert!(!ct_eq(b"secreT", b"secret"));
        assert!(!ct_eq(b"secret1", b"secret"));
        assert!(!ct_eq(b"secre", b"secret"));
        assert!(!ct_eq(b"", b"secret"));
        assert!(ct_eq(b"", b""));
    }

    #[test]
    fn token_and_basic() {
        let c = AuthConfig {
            token: Some("tok".into()),
            username: Some("admin".into()),
            password: Some("pw:with:colons".into()),
            ..Default::default()
        };
        c.validate().unwrap();
        let get = Method::GET;
        let p = "/api/v1/streams";
        assert_eq!(c.check(&get, p, &headers(None)), Err(Refusal::Missing));
        assert_eq!(c.check(&get, p, &headers(Some("Bearer tok"))), Ok(()));
        assert_eq!(c.check(&get, p, &headers(Some("bearer  tok "))), Ok(()));
        assert_eq!(
            c.check(&get, p, &headers(Some("Bearer tok2"))),
            Err(Refusal::Invalid)
        );
        assert_eq!(
            c.check(&get, p, &headers(Some(&basic("admin", "pw:with:colons")))),
            Ok(())
        );
        for bad in [
            basic("admin", "pw"),
            basic("root", "pw:with:colons"),
            "Basic !!!".into(),
            format!("Basic {}", B64.encode("nocolon")),
            "Bearer".into(),
            "Digest x".into(),
            "Basic dG9r".into(),
        ] {
            assert_eq!(
                c.check(&get, p, &headers(Some(&bad))),
                Err(Refusal::Invalid),
                "{bad}"
            );
        }
        // The token does not work as a Basic password and vice versa.
        assert_eq!(
            c.check(&get, p, &headers(Some(&basic("admin", "tok")))),
            Err(Refusal::Invalid)
        );
        let r = c.refusal_response(Refusal::Missing);
        assert_eq!(r.status, 401);
        assert!(r
            .headers
            .iter()
            .any(|(k, v)| *k == "www-authenticate" && v == "Basic realm=\"liftbridge\""));
    }

    #[test]
    fn open_paths_and_reads() {
        let mut c = AuthConfig {
            token: Some("t".into()),
            ..Default::default()
        };
        let none = headers(None);
        for p in ["/metrics", "/healthz", "/healthz/", "/api/v1/health"] {
            assert_eq!(c.check(&Method::GET, p, &none), Ok(()), "{p}");
        }
        for p in ["/varz", "/api/v1/info", "/metricsx", "/uix"] {
            assert_eq!(
                c.check(&Method::GET, p, &none),
                Err(Refusal::Missing),
                "{p}"
            );
        }
        // Token only: the UI's files load so the page can ask for the token;
        // only reads.
        for p in ["/", "/ui/app.js"] {
            assert_eq!(c.check(&Method::GET, p, &none), Ok(()), "{p}");
        }
        assert_eq!(c.check(&Method::POST, "/", &none), Err(Refusal::Missing));
        // With Basic they are closed: the browser's login prompt appears.
        let basic = AuthConfig {
            username: Some("u".into()),
            password: Some("p".into()),
            ..Default::default()
        };
        for p in ["/", "/ui/app.js"] {
            assert_eq!(
                basic.check(&Method::GET, p, &none),
                Err(Refusal::Missing),
                "{p}"
            );
        }
        c.open_metrics = false;
        assert_eq!(
            c.check(&Method::GET, "/metrics", &none),
            Err(Refusal::Missing)
        );
        c.open_reads = true;
        assert_eq!(c.check(&Method::GET, "/api/v1/info", &none), Ok(()));
        assert_eq!(c.check(&Method::HEAD, "/", &none), Ok(()));
        assert_eq!(
            c.check(&Method::POST, "/api/v1/streams", &none),
            Err(Refusal::Missing)
        );
        assert_eq!(
            c.check(&Method::DELETE, "/api/v1/streams/x", &none),
            Err(Refusal::Missing)
        );
        // Token only: the refusal asks for a bearer token.
        let r = c.refusal_response(Refusal::Invalid);
        assert_eq!(
            r.headers,
            vec![(
                "www-authenticate",
                "Bearer realm=\"liftbridge\"".to_string()
            )]
        );
        // Nothing configured: everything open.
        let open = AuthConfig::default();
        assert!(!open.enabled());
        assert_eq!(open.check(&Method::POST, "/api/v1/streams", &none), Ok(()));
    }

    #[test]
    fn cross_origin_mutations_are_refused() {
        let h = |origin: Option<&str>, host: Option<&str>| {
            let mut m = HeaderMap::new();
            if let Some(o) = origin {
                m.insert(hyper::header::ORIGIN, o.parse().unwrap());
            }
            if let Some(x) = host {
                m.insert(hyper::header::HOST, x.parse().unwrap());
            }
            m
        };
        let post = Method::POST;
        // Not a browser, or the same site: through.
        assert!(cross_origin_refusal(&post, &h(None, Some("a:8222"))).is_none());
        assert!(cross_origin_refusal(&post, &h(Some("http://a:8222"), Some("a:8222"))).is_none());
        assert!(cross_origin_refusal(&post, &h(Some("https://A:8222/"), Some("a:8222"))).is_none());
        // Reads are never refused.
        assert!(cross_origin_refusal(&Method::GET, &h(Some("http://evil"), Some("a"))).is_none());
        // Another site, a port change, an opaque origin, no host: 403.
        for (o, host) in [
            ("http://evil.example", Some("a:8222")),
            ("http://a:9999", Some("a:8222")),
            ("null", Some("a:8222")),
            ("http://a:8222", None),
        ] {
            let r = cross_origin_refusal(&Method::DELETE, &h(Some(o), host)).expect(o);
            assert_eq!(r.status, 403);
        }
    }

    #[test]
    fn validation() {
        let half = AuthConfig {
            username: Some("u".into()),
            ..Default::default()
        };
        assert_eq!(half.validate(), Err(AuthConfigError::HalfBasic));
        let empty = AuthConfig {
            token: Some(String::new()),
            ..Default::default()
        };
        assert!(empty.validate().is_err());
        let colon = AuthConfig {
            username: Some("a:b".into()),
            password: Some("p".into()),
            ..Default::default()
        };
        assert_eq!(colon.validate(), Err(AuthConfigError::ColonInUsername));
        assert!(!format!("{colon:?}").contains("\"p\""));
    }
}
