//! Client authentication and per-user permissions.
//!
//! Pure code (no I/O, no tokio): the NATS server builds one [`Authenticator`]
//! from [`AuthConfig`] at start-up and calls [`Authenticator::authenticate`]
//! with the fields of each client's CONNECT. The outcome is either a
//! rejection (the server answers `-ERR 'Authorization Violation'` and closes)
//! or the client's [`PermissionSet`] (`None` = no restrictions).
//!
//! Methods, as in nats-server 2.x (a client passes if any configured method
//! accepts it):
//! - users with passwords, plain text or bcrypt (`$2a$`, `$2b$`, `$2y$`);
//! - a single token (plain or bcrypt);
//! - nkey users: INFO carries a random nonce, the client signs it with its
//!   ed25519 user key and sends `nkey` + `sig` (base64url, padding optional,
//!   standard base64 also accepted as nats-server does);
//! - `no_auth_user`: a client sending no credentials at all is mapped to that
//!   user and gets its permissions.
//!
//! Invariants: secrets are compared in constant time (for equal lengths);
//! nothing here panics on client input. A bcrypt check costs real CPU time
//! (tens of milliseconds at cost 10–11); [`Authenticator::uses_bcrypt`] lets
//! the caller move the check off the I/O path when it matters.
//!
//! Permissions follow nats-server: deny always wins; an empty allow list
//! allows everything not denied. A subscription is allowed when its subject
//! is a subset of an allowed pattern (`foo.*` under `foo.>`) and is not a
//! subset of a denied one. A wildcard subscription that merely *overlaps* a
//! denied pattern (`foo.>` with `foo.secret` denied) is accepted, and the
//! messages on denied subjects are filtered at delivery
//! ([`PermissionSet::can_receive`]). Entries may carry a queue group after a
//! space (`"foo.> workers"`), which restricts queue subscriptions.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;

use crate::config::nats::{AuthConfig, PermissionRules, Permissions, ResponsePermission};
use crate::nats::subject::{intersects, is_subset, is_valid_subject, matches};

/// Errors of authentication and of building the authenticator.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// The client's credentials were rejected. The text is for the server
    /// log only; the client always sees `Authorization Violation`.
    #[error("authorization violation: {0}")]
    Violation(&'static str),
    /// `no_auth_user` names a user that is not configured.
    #[error("no_auth_user {0:?} is not a configured user")]
    UnknownNoAuthUser(String),
    /// A configured nkey is not a valid user public key.
    #[error("invalid user nkey {0:?}: {1}")]
    InvalidNkey(String, String),
    /// Two users share a name or nkey.
    #[error("duplicate user {0:?}")]
    DuplicateUser(String),
    /// A configured bcrypt hash is malformed.
    #[error("invalid bcrypt hash for {0:?}")]
    InvalidBcrypt(String),
    /// A permission entry is not a valid subject.
    #[error("invalid permission subject {0:?}")]
    InvalidPermission(String),
}

/// Credentials from a client's CONNECT.
#[derive(Debug, Clone, Copy, Default)]
pub struct Credentials<'a> {
    /// CONNECT `user`.
    pub user: Option<&'a str>,
    /// CONNECT `pass`.
    pub pass: Option<&'a str>,
    /// CONNECT `auth_token`.
    pub auth_token: Option<&'a str>,
    /// CONNECT `nkey` (public user key).
    pub nkey: Option<&'a str>,
    /// CONNECT `sig`: the INFO nonce signed with the nkey.
    pub sig: Option<&'a str>,
}

impl Credentials<'_> {
    fn is_empty(&self) -> bool {
        self.user.is_none()
            && self.pass.is_none()
            && self.auth_token.is_none()
            && self.nkey.is_none()
            && self.sig.is_none()
    }
}

/// A secret as configured: plain text or a bcrypt hash.
#[derive(Debug, Clone)]
enum Secret {
    Plain(String),
    Bcrypt(String),
}

impl Secret {
    fn parse(owner: &str, s: &str) -> Result<Secret, AuthError> {
        if is_bcrypt(s) {
            // Parse the structure now so a typo is a start-up error, not a
            // silent "nobody can log in".
            s.parse::<bcrypt::HashParts>()
                .map_err(|_| AuthError::InvalidBcrypt(owner.to_string()))?;
            Ok(Secret::Bcrypt(s.to_string()))
        } else {
            Ok(Secret::Plain(s.to_string()))
        }
    }

    fn check(&self, given: &str) -> bool {
        match self {
            Secret::Plain(p) => ct_eq(p.as_bytes(), given.as_bytes()),
            Secret::Bcrypt(h) => bcrypt::verify(given, h).unwrap_or(false),
        }
    }
}

fn is_bcrypt(s: &str) -> bool {
    s.starts_with("$2a$") || s.starts_with("$2b$") || s.starts_with("$2y$")
}

/// Constant-time equality for equal lengths (the length itself is not
/// hidden, as with Go's `subtle.ConstantTimeCompare`).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // Keep the optimiser from short-circuiting the loop.
    std::hint::black_box(diff) == 0
}

#[derive(Debug)]
struct PasswordUser {
    secret: Secret,
    perms: Option<Arc<PermissionSet>>,
    account: Option<String>,
}

#[derive(Debug)]
struct NkeyEntry {
    key: nkeys::KeyPair,
    perms: Option<Arc<PermissionSet>>,
    account: Option<String>,
}

/// Who a client authenticated as (for logs and `/connz?auth=1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// Authentication is not required.
    Anonymous,
    /// A user/password user, or the `no_auth_user`.
    User(String),
    /// The token.
    Token,
    /// An nkey user (public key).
    Nkey(String),
}

/// The result of a successful authentication.
#[derive(Debug, Clone)]
pub struct AuthOutcome {
    pub identity: Identity,
    /// `None` = no restrictions.
    pub permissions: Option<Arc<PermissionSet>>,
    /// The user's account; `None` = the global account `$G`.
    pub account: Option<String>,
}

/// Checks CONNECT credentials against the configured users. Cheap to share
/// (`Arc`) between connections; immutable after construction.
#[derive(Debug)]
pub struct Authenticator {
    users: HashMap<String, PasswordUser>,
    token: Option<Secret>,
    token_perms: Option<Arc<PermissionSet>>,
    nkeys: HashMap<String, NkeyEntry>,
    no_auth_user: Option<String>,
    uses_bcrypt: bool,
    /// Operator (JWT) mode: clients authenticate with user JWTs, checked
    /// by `resolver::OperatorState`; this authenticator only says that
    /// authentication (with a nonce) is required.
    operator: bool,
    /// `allowed_connection_types` by user name or nkey.
    connection_types: HashMap<String, Vec<String>>,
}

impl Authenticator {
    /// Builds the authenticator, validating the configuration (nkeys,
    /// bcrypt hashes, permission subjects, `no_auth_user`).
    pub fn new(cfg: &AuthConfig) -> Result<Authenticator, AuthError> {
        let mut users = HashMap::new();
        let mut uses_bcrypt = false;
        for u in &cfg.users {
            let secret = Secret::parse(&u.username, &u.password)?;
            uses_bcrypt |= matches!(secret, Secret::Bcrypt(_));
            let perms = build_perms(u.permissions.as_ref())?;
            if users
                .insert(
                    u.username.clone(),
                    PasswordUser {
                        secret,
                        perms,
                        account: u.account.clone(),
                    },
                )
                .is_some()
            {
                return Err(AuthError::DuplicateUser(u.username.clone()));
            }
        }
        let token = match &cfg.token {
            Some(t) => {
                let s = Secret::parse("token", t)?;
                uses_bcrypt |= matches!(s, Secret::Bcrypt(_));
                Some(s)
            }
            None => None,
        };
        let token_perms = build_perms(cfg.default_permissions.as_ref())?;
        let mut nkeys_map = HashMap::new();
        for n in &cfg.nkeys {
            let key = nkeys::KeyPair::from_public_key(&n.nkey)
                .map_err(|e| AuthError::InvalidNkey(n.nkey.clone(), e.to_string()))?;
            if !n.nkey.starts_with('U') {
                return Err(AuthError::InvalidNkey(
                    n.nkey.clone(),
                    "not a user key (must start with U)".to_string(),
                ));
            }
            let perms = build_perms(n.permissions.as_ref())?;
            if nkeys_map
                .insert(
                    n.nkey.clone(),
                    NkeyEntry {
                        key,
                        perms,
                        account: n.account.clone(),
                    },
                )
                .is_some()
            {
                return Err(AuthError::DuplicateUser(n.nkey.clone()));
            }
        }
        if let Some(name) = &cfg.no_auth_user {
            if !users.contains_key(name) && !nkeys_map.contains_key(name) {
                return Err(AuthError::UnknownNoAuthUser(name.clone()));
            }
        }
        Ok(Authenticator {
            users,
            token,
            token_perms,
            nkeys: nkeys_map,
            no_auth_user: cfg.no_auth_user.clone(),
            uses_bcrypt,
            operator: cfg.operator.is_some(),
            connection_types: cfg.connection_types.clone(),
        })
    }

    /// Whether clients must authenticate (`auth_required` in INFO).
    pub fn required(&self) -> bool {
        !self.users.is_empty() || self.token.is_some() || !self.nkeys.is_empty() || self.operator
    }

    /// Whether nkey users are configured (or operator mode is on), so INFO
    /// must carry a nonce.
    pub fn needs_nonce(&self) -> bool {
        !self.nkeys.is_empty() || self.operator
    }

    /// Whether `no_auth_user` is set (then a client may send ops before
    /// CONNECT, as nats-server allows).
    pub fn has_no_auth_user(&self) -> bool {
        self.no_auth_user.is_some()
    }

    /// Whether a user/password user of this name is configured.
    pub fn has_user(&self, name: &str) -> bool {
        self.users.contains_key(name)
    }

    /// Whether an nkey user with this public key is configured.
    pub fn has_nkey(&self, key: &str) -> bool {
        self.nkeys.contains_key(key)
    }

    /// Whether a token is configured.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Whether some secret is a bcrypt hash (checks then cost milliseconds).
    pub fn uses_bcrypt(&self) -> bool {
        self.uses_bcrypt
    }

    /// Checks a client's credentials. `nonce` is the nonce sent in this
    /// connection's INFO (needed for nkey users).
    ///
    /// `Ok(None)` = allowed with no restrictions; `Ok(Some(perms))` = allowed
    /// with these permissions.
    pub fn authenticate(
        &self,
        creds: &Credentials<'_>,
        nonce: Option<&str>,
    ) -> Result<Option<Arc<PermissionSet>>, AuthError> {
        self.authenticate_identity(creds, nonce, "STANDARD")
            .map(|o| o.permissions)
    }

    /// Like [`Authenticator::authenticate`], also telling who the client
    /// is; `kind`: how it connects (`STANDARD`, `WEBSOCKET`, `LEAFNODE`),
    /// checked against the user's `allowed_connection_types`.
    pub fn authenticate_identity(
        &self,
        creds: &Credentials<'_>,
        nonce: Option<&str>,
        kind: &str,
    ) -> Result<AuthOutcome, AuthError> {
        let outcome = self.check_credentials(creds, nonce)?;
        let id = match &outcome.identity {
            Identity::User(n) | Identity::Nkey(n) => n.as_str(),
            Identity::Token | Identity::Anonymous => return Ok(outcome),
        };
        match self.connection_types.get(id) {
            Some(types) if !types.iter().any(|t| t == kind) => {
                Err(AuthError::Violation("connection type not allowed"))
            }
            _ => Ok(outcome),
        }
    }

    fn check_credentials(
        &self,
        creds: &Credentials<'_>,
        nonce: Option<&str>,
    ) -> Result<AuthOutcome, AuthError> {
        if !self.required() {
            return Ok(AuthOutcome {
                identity: Identity::Anonymous,
                permissions: None,
                account: None,
            });
        }
        if creds.is_empty() {
            if let Some(name) = &self.no_auth_user {
                let (permissions, account) = match self.users.get(name) {
                    Some(u) => (u.perms.clone(), u.account.clone()),
                    None => self
                        .nkeys
                        .get(name)
                        .map(|n| (n.perms.clone(), n.account.clone()))
                        .unwrap_or_default(),
                };
                return Ok(AuthOutcome {
                    identity: Identity::User(name.clone()),
                    permissions,
                    account,
                });
            }
            return Err(AuthError::Violation("no credentials"));
        }
        if self.operator {
            // User JWTs are checked by the operator state, never here.
            return Err(AuthError::Violation("operator mode needs a user JWT"));
        }
        if let Some(nkey) = creds.nkey {
            return self.check_nkey(nkey, creds.sig, nonce);
        }
        if let Some(user) = creds.user {
            if let Some(u) = self.users.get(user) {
                if u.secret.check(creds.pass.unwrap_or("")) {
                    return Ok(AuthOutcome {
                        identity: Identity::User(user.to_string()),
                        permissions: u.perms.clone(),
                        account: u.account.clone(),
                    });
                }
                return Err(AuthError::Violation("bad password"));
            }
            // nats-server falls back to the token when the user is unknown
            // only if a token is configured; otherwise this is a violation.
            if self.token.is_none() {
                return Err(AuthError::Violation("unknown user"));
            }
        }
        if let Some(token) = &self.token {
            // Clients such as nats.py send a URL's `token@` part as
            // auth_token; some send the token as the user name.
            let given = creds.auth_token.or(creds.user);
            if let Some(given) = given {
                if token.check(given) {
                    return Ok(AuthOutcome {
                        identity: Identity::Token,
                        permissions: self.token_perms.clone(),
                        account: None,
                    });
                }
            }
            return Err(AuthError::Violation("bad token"));
        }
        Err(AuthError::Violation("no matching method"))
    }

    fn check_nkey(
        &self,
        nkey: &str,
        sig: Option<&str>,
        nonce: Option<&str>,
    ) -> Result<AuthOutcome, AuthError> {
        let entry = self
            .nkeys
            .get(nkey)
            .ok_or(AuthError::Violation("unknown nkey"))?;
        let nonce = nonce.ok_or(AuthError::Violation("no nonce for nkey"))?;
        let sig = sig.ok_or(AuthError::Violation("nkey without signature"))?;
        let raw = decode_signature(sig).ok_or(AuthError::Violation("malformed signature"))?;
        entry
            .key
            .verify(nonce.as_bytes(), &raw)
            .map_err(|_| AuthError::Violation("bad nkey signature"))?;
        Ok(AuthOutcome {
            identity: Identity::Nkey(nkey.to_string()),
            permissions: entry.perms.clone(),
            account: entry.account.clone(),
        })
    }
}

/// Decodes a nonce signature: base64url with or without padding, or
/// standard base64 (nats-server accepts both encodings).
pub(crate) fn decode_signature(sig: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let trimmed = sig.trim_end_matches('=');
    URL_SAFE_NO_PAD
        .decode(trimmed)
        .ok()
        .or_else(|| STANDARD.decode(sig).ok())
}

fn build_perms(p: Option<&Permissions>) -> Result<Option<Arc<PermissionSet>>, AuthError> {
    match p {
        None => Ok(None),
        Some(p) => Ok(Some(Arc::new(PermissionSet::new(p)?))),
    }
}

/// One permission entry: a subject pattern and, for subscribe rules, an
/// optional queue group (`"foo.> workers"`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    subject: String,
    queue: Option<String>,
}

impl Entry {
    fn parse(s: &str) -> Result<Entry, AuthError> {
        let mut parts = s.split_whitespace();
        let subject = parts
            .next()
            .ok_or_else(|| AuthError::InvalidPermission(s.to_string()))?;
        let queue = parts.next().map(str::to_string);
        if parts.next().is_some() || !is_valid_subject(subject) {
            return Err(AuthError::InvalidPermission(s.to_string()));
        }
        Ok(Entry {
            subject: subject.to_string(),
            queue,
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Rules {
    /// `None` = no allow list (everything not denied is allowed).
    allow: Option<Vec<Entry>>,
    deny: Vec<Entry>,
}

impl Rules {
    /// The allow and deny lists as configured (`"subject [queue]"`).
    fn lists(&self) -> PermissionRules {
        let text = |e: &Entry| match &e.queue {
            None => e.subject.clone(),
            Some(q) => format!("{} {q}", e.subject),
        };
        PermissionRules {
            allow: self
                .allow
                .as_ref()
                .map(|l| l.iter().map(text).collect())
                .unwrap_or_default(),
            deny: self.deny.iter().map(text).collect(),
        }
    }

    fn new(r: &PermissionRules) -> Result<Rules, AuthError> {
        let allow = if r.allow.is_empty() {
            None
        } else {
            Some(
                r.allow
                    .iter()
                    .map(|s| Entry::parse(s))
                    .collect::<Result<_, _>>()?,
            )
        };
        let deny = r
            .deny
            .iter()
            .map(|s| Entry::parse(s))
            .collect::<Result<_, _>>()?;
        Ok(Rules { allow, deny })
    }
}

/// The compiled permissions of one user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PermissionSet {
    publish: Rules,
    subscribe: Rules,
    responses: Option<ResponsePermission>,
}

impl PermissionSet {
    /// Compiles configured permissions, validating every subject. With
    /// `allow_responses` and no publish allow list, nothing but responses
    /// may be published (nats-server's rule).
    pub fn new(p: &Permissions) -> Result<PermissionSet, AuthError> {
        let mut publish = Rules::new(&p.publish)?;
        if p.responses.is_some() && publish.allow.is_none() {
            publish.allow = Some(Vec::new());
        }
        Ok(PermissionSet {
            publish,
            subscribe: Rules::new(&p.subscribe)?,
            responses: p.responses,
        })
    }

    /// The publish and subscribe lists as configured (for a leaf hub's
    /// INFO `export`/`import`).
    pub fn lists(&self) -> Permissions {
        Permissions {
            publish: self.publish.lists(),
            subscribe: self.subscribe.lists(),
            responses: self.responses,
        }
    }

    /// `allow_responses`, if given.
    pub fn responses(&self) -> Option<ResponsePermission> {
        self.responses
    }

    /// For a leaf hub's view (directions swapped, see `leaf`): the user's
    /// `allow_responses` applies to what the leaf may bring, which is then
    /// only responses when the user had no publish allow list.
    pub(crate) fn allow_leaf_responses(&mut self, responses: Option<ResponsePermission>) {
        if responses.is_some() && self.subscribe.allow.is_none() {
            self.subscribe.allow = Some(Vec::new());
        }
        self.responses = responses;
    }

    /// Whether a leaf connection may carry interest in `subject` (which
    /// may hold wildcards) under these subscribe rules. As nats-server
    /// treats leaf connections, a wildcard broader than an allowed pattern
    /// (`>` with `foo.*` allowed) passes too: what it would bring is
    /// filtered message by message.
    pub fn leaf_may_subscribe(&self, subject: &str) -> bool {
        if self.can_subscribe(subject, None) {
            return true;
        }
        let r = &self.subscribe;
        let Some(list) = &r.allow else {
            return false;
        };
        subject.split('.').any(|t| t == "*" || t == ">")
            && list
                .iter()
                .any(|e| e.queue.is_none() && is_subset(&e.subject, subject))
            && !r
                .deny
                .iter()
                .any(|e| e.queue.is_none() && is_subset(subject, &e.subject))
    }

    /// Whether the client may publish to `subject`.
    pub fn can_publish(&self, subject: &str) -> bool {
        let r = &self.publish;
        let allowed = match &r.allow {
            None => true,
            Some(list) => list.iter().any(|e| covers(&e.subject, subject)),
        };
        allowed && !r.deny.iter().any(|e| covers(&e.subject, subject))
    }

    /// Whether the client may subscribe to `subject` (optionally in a queue
    /// group). See the module docs for the subset/overlap rules.
    pub fn can_subscribe(&self, subject: &str, queue: Option<&str>) -> bool {
        let r = &self.subscribe;
        let mut allowed = true;
        if let Some(list) = &r.allow {
            let plain = list
                .iter()
                .any(|e| e.queue.is_none() && is_subset(subject, &e.subject));
            allowed = plain;
            if let Some(q) = queue {
                let mut queue_entries = list
                    .iter()
                    .filter(|e| e.queue.is_some() && is_subset(subject, &e.subject))
                    .peekable();
                if queue_entries.peek().is_some() {
                    allowed = queue_entries.any(|e| queue_matches(e.queue.as_deref(), q));
                }
            }
        }
        if allowed {
            let plain_denied = r
                .deny
                .iter()
                .any(|e| e.queue.is_none() && is_subset(subject, &e.subject));
            allowed = !plain_denied;
            if let Some(q) = queue {
                let mut queue_entries = r
                    .deny
                    .iter()
                    .filter(|e| e.queue.is_some() && is_subset(subject, &e.subject))
                    .peekable();
                if queue_entries.peek().is_some() {
                    allowed = !queue_entries.any(|e| queue_matches(e.queue.as_deref(), q));
                }
            }
        }
        allowed
    }

    /// Whether a message on the literal `subject` may be delivered to this
    /// client's (wildcard) subscription: false when a subscribe deny
    /// pattern matches it. Only needed for subscriptions accepted although
    /// they overlap a denied pattern (see [`PermissionSet::needs_delivery_filter`]).
    pub fn can_receive(&self, subject: &str) -> bool {
        !self
            .subscribe
            .deny
            .iter()
            .any(|e| e.queue.is_none() && matches(&e.subject, subject))
    }

    /// Whether a subscription on `subject` (which may hold wildcards) can
    /// receive messages on denied subjects, so that deliveries to it must be
    /// checked with [`PermissionSet::can_receive`].
    pub fn needs_delivery_filter(&self, subject: &str) -> bool {
        self.subscribe
            .deny
            .iter()
            .any(|e| e.queue.is_none() && intersects(subject, &e.subject))
    }
}

/// Whether publish-subject `subject` is covered by `pattern`. Publishing to
/// a wildcard subject is not possible in pedantic mode, but non-pedantic
/// clients can; such a subject is then covered only as a subset.
fn covers(pattern: &str, subject: &str) -> bool {
    matches(pattern, subject) || is_subset(subject, pattern)
}

fn queue_matches(pattern: Option<&str>, queue: &str) -> bool {
    match pattern {
        None => false,
        Some(p) => matches(p, queue),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::nats::{NkeyUser, User};

    fn rules(allow: &[&str], deny: &[&str]) -> PermissionRules {
        PermissionRules {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn creds<'a>(user: Option<&'a str>, pass: Option<&'a str>) -> Credentials<'a> {
        Credentials {
            user,
            pass,
            ..Default::default()
        }
    }

    #[test]
    fn no_auth_configured_allows_everyone() {
        let a = Authenticator::new(&AuthConfig::default()).unwrap();
        assert!(!a.required());
        assert!(!a.needs_nonce());
        assert!(a
            .authenticate(&Credentials::default(), None)
            .unwrap()
            .is_none());
        assert!(a
            .authenticate(&creds(Some("x"), Some("y")), None)
            .unwrap()
            .is_none());
    }

    #[test]
    fn plain_users() {
        let cfg = AuthConfig {
            users: vec![
                User {
                    account: None,
                    username: "derek".into(),
                    password: "s3cr3t".into(),
                    permissions: None,
                },
                User {
                    account: None,
                    username: "alice".into(),
                    password: "wonder".into(),
                    permissions: None,
                },
            ],
            ..Default::default()
        };
        let a = Authenticator::new(&cfg).unwrap();
        assert!(a.required());
        assert!(a
            .authenticate(&creds(Some("derek"), Some("s3cr3t")), None)
            .is_ok());
        assert!(a
            .authenticate(&creds(Some("alice"), Some("wonder")), None)
            .is_ok());
        assert!(a
            .authenticate(&creds(Some("alice"), Some("s3cr3t")), None)
            .is_err());
        assert!(a
            .authenticate(&creds(Some("derek"), Some("s3cr3t!")), None)
            .is_err());
        assert!(a
            .authenticate(&creds(Some("nobody"), Some("s3cr3t")), None)
            .is_err());
        assert!(a.authenticate(&creds(Some("derek"), None), None).is_err());
        assert_eq!(
            a.authenticate(&Credentials::default(), None).unwrap_err(),
            AuthError::Violation("no credentials")
        );
    }

    #[test]
    fn bcrypt_users_all_prefixes() {
        // Cost 4 keeps the test fast; the algorithm is the same.
        let h = bcrypt::hash("pw", 4).unwrap();
        assert!(h.starts_with("$2b$"));
        let hashes = [
            h.clone(),
            h.replacen("$2b$", "$2a$", 1),
            h.replacen("$2b$", "$2y$", 1),
        ];
        for hash in hashes {
            let cfg = AuthConfig {
                users: vec![User {
                    account: None,
                    username: "u".into(),
                    password: hash.clone(),
                    permissions: None,
                }],
                ..Default::default()
            };
            let a = Authenticator::new(&cfg).unwrap();
            assert!(a.uses_bcrypt());
            assert!(
                a.authenticate(&creds(Some("u"), Some("pw")), None).is_ok(),
                "{hash}"
            );
            assert!(a.authenticate(&creds(Some("u"), Some("px")), None).is_err());
            // The hash itself is not a password.
            assert!(a
                .authenticate(&creds(Some("u"), Some(&hash)), None)
                .is_err());
        }
        let bad = AuthConfig {
            users: vec![User {
                account: None,
                username: "u".into(),
                password: "$2a$xx$broken".into(),
                permissions: None,
            }],
            ..Default::default()
        };
        assert_eq!(
            Authenticator::new(&bad).unwrap_err(),
            AuthError::InvalidBcrypt("u".into())
        );
    }

    #[test]
    fn token_plain_and_bcrypt() {
        let cfg = AuthConfig {
            token: Some("s3cr3t".into()),
            ..Default::default()
        };
        let a = Authenticator::new(&cfg).unwrap();
        assert!(a.required());
        let ok = Credentials {
            auth_token: Some("s3cr3t"),
            ..Default::default()
        };
        let outcome = a.authenticate_identity(&ok, None, "STANDARD").unwrap();
        assert_eq!(outcome.identity, Identity::Token);
        let bad = Credentials {
            auth_token: Some("s3cr3"),
            ..Default::default()
        };
        assert!(a.authenticate(&bad, None).is_err());
        assert!(a.authenticate(&Credentials::default(), None).is_err());
        // Token given as the user name (URL form `nats://s3cr3t@host`).
        assert!(a.authenticate(&creds(Some("s3cr3t"), None), None).is_ok());

        let hashed = AuthConfig {
            token: Some(bcrypt::hash("tok", 4).unwrap()),
            ..Default::default()
        };
        let a = Authenticator::new(&hashed).unwrap();
        let ok = Credentials {
            auth_token: Some("tok"),
            ..Default::default()
        };
        assert!(a.authenticate(&ok, None).is_ok());
    }

    #[test]
    fn nkey_users_sign_the_nonce() {
        let kp = nkeys::KeyPair::new_user();
        let other = nkeys::KeyPair::new_user();
        let cfg = AuthConfig {
            nkeys: vec![NkeyUser {
                account: None,
                nkey: kp.public_key(),
                permissions: None,
            }],
            ..Default::default()
        };
        let a = Authenticator::new(&cfg).unwrap();
        assert!(a.required());
        assert!(a.needs_nonce());
        let nonce = "Nt3dEzWQvTnCYrPVPngb1A";
        let raw = kp.sign(nonce.as_bytes()).unwrap();
        use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
        let pk = kp.public_key();
        for sig in [
            URL_SAFE_NO_PAD.encode(&raw),
            URL_SAFE.encode(&raw),
            STANDARD.encode(&raw),
        ] {
            let c = Credentials {
                nkey: Some(&pk),
                sig: Some(&sig),
                ..Default::default()
            };
            let out = a
                .authenticate_identity(&c, Some(nonce), "STANDARD")
                .unwrap();
            assert_eq!(out.identity, Identity::Nkey(pk.clone()));
            // A different nonce (another connection) must fail.
            assert!(a.authenticate(&c, Some("other-nonce")).is_err());
            assert!(a.authenticate(&c, None).is_err());
        }
        // Signed by another key.
        let forged = URL_SAFE_NO_PAD.encode(other.sign(nonce.as_bytes()).unwrap());
        let c = Credentials {
            nkey: Some(&pk),
            sig: Some(&forged),
            ..Default::default()
        };
        assert!(a.authenticate(&c, Some(nonce)).is_err());
        // Unknown key with its own valid signature.
        let opk = other.public_key();
        let c = Credentials {
            nkey: Some(&opk),
            sig: Some(&forged),
            ..Default::default()
        };
        assert!(a.authenticate(&c, Some(nonce)).is_err());
        // Garbage signature, no signature.
        let c = Credentials {
            nkey: Some(&pk),
            sig: Some("!!!not base64!!!"),
            ..Default::default()
        };
        assert!(a.authenticate(&c, Some(nonce)).is_err());
        let c = Credentials {
            nkey: Some(&pk),
            ..Default::default()
        };
        assert!(a.authenticate(&c, Some(nonce)).is_err());
    }

    #[test]
    fn invalid_nkeys_rejected_at_start() {
        for bad in [
            "UNOTAKEY".to_string(),
            nkeys::KeyPair::new_account().public_key(),
        ] {
            let cfg = AuthConfig {
                nkeys: vec![NkeyUser {
                    account: None,
                    nkey: bad,
                    permissions: None,
                }],
                ..Default::default()
            };
            assert!(matches!(
                Authenticator::new(&cfg),
                Err(AuthError::InvalidNkey(..))
            ));
        }
    }

    #[test]
    fn no_auth_user_maps_anonymous_clients() {
        let perms = Permissions {
            publish: rules(&["public.>"], &[]),
            subscribe: PermissionRules::default(),
            responses: None,
        };
        let cfg = AuthConfig {
            users: vec![
                User {
                    account: None,
                    username: "guest".into(),
                    password: "g".into(),
                    permissions: Some(perms),
                },
                User {
                    account: None,
                    username: "admin".into(),
                    password: "a".into(),
                    permissions: None,
                },
            ],
            no_auth_user: Some("guest".into()),
            ..Default::default()
        };
        let a = Authenticator::new(&cfg).unwrap();
        assert!(a.has_no_auth_user());
        let out = a
            .authenticate_identity(&Credentials::default(), None, "STANDARD")
            .unwrap();
        assert_eq!(out.identity, Identity::User("guest".into()));
        let p = out.permissions.unwrap();
        assert!(p.can_publish("public.x"));
        assert!(!p.can_publish("private.x"));
        // Wrong credentials are not silently mapped to the no_auth_user.
        assert!(a
            .authenticate(&creds(Some("admin"), Some("x")), None)
            .is_err());
        assert!(a
            .authenticate(&creds(Some("admin"), Some("a")), None)
            .unwrap()
            .is_none());

        // A no_auth_user limited to WebSocket maps anonymous WebSocket
        // clients only.
        let mut ws_only = cfg.clone();
        ws_only
            .connection_types
            .insert("guest".into(), vec!["WEBSOCKET".into()]);
        let a = Authenticator::new(&ws_only).unwrap();
        assert!(a
            .authenticate_identity(&Credentials::default(), None, "STANDARD")
            .is_err());
        assert!(a
            .authenticate_identity(&Credentials::default(), None, "WEBSOCKET")
            .is_ok());
        assert!(a
            .authenticate_identity(&creds(Some("admin"), Some("a")), None, "LEAFNODE")
            .is_ok());

        let missing = AuthConfig {
            no_auth_user: Some("ghost".into()),
            users: cfg.users.clone(),
            ..Default::default()
        };
        assert_eq!(
            Authenticator::new(&missing).unwrap_err(),
            AuthError::UnknownNoAuthUser("ghost".into())
        );
    }

    #[test]
    fn publish_permissions() {
        let p = PermissionSet::new(&Permissions {
            publish: rules(&["foo.*", "bar.>"], &["foo.secret", "bar.x.>"]),
            subscribe: PermissionRules::default(),
            responses: None,
        })
        .unwrap();
        assert!(p.can_publish("foo.a"));
        assert!(!p.can_publish("foo.secret"));
        assert!(!p.can_publish("foo.a.b"));
        assert!(p.can_publish("bar.a.b"));
        assert!(!p.can_publish("bar.x.y"));
        assert!(!p.can_publish("baz"));
        // Subscribe is unrestricted.
        assert!(p.can_subscribe(">", None));

        // Deny only.
        let p = PermissionSet::new(&Permissions {
            publish: rules(&[], &["admin.>"]),
            subscribe: PermissionRules::default(),
            responses: None,
        })
        .unwrap();
        assert!(p.can_publish("anything"));
        assert!(!p.can_publish("admin.x"));
    }

    #[test]
    fn subscribe_permissions_subset_and_overlap() {
        let p = PermissionSet::new(&Permissions {
            publish: PermissionRules::default(),
            subscribe: rules(&["foo.>", "bar.*"], &["foo.secret", "foo.private.>"]),
            responses: None,
        })
        .unwrap();
        assert!(p.can_subscribe("foo.a", None));
        assert!(p.can_subscribe("foo.*", None));
        assert!(p.can_subscribe("bar.*", None));
        assert!(!p.can_subscribe("bar.>", None));
        assert!(!p.can_subscribe("bar.a.b", None));
        assert!(!p.can_subscribe(">", None));
        // Denied subjects (and subsets of denied patterns).
        assert!(!p.can_subscribe("foo.secret", None));
        assert!(!p.can_subscribe("foo.private.x", None));
        assert!(!p.can_subscribe("foo.private.>", None));
        // Overlapping a denied pattern: accepted, filtered at delivery.
        assert!(p.can_subscribe("foo.>", None));
        assert!(p.needs_delivery_filter("foo.>"));
        assert!(p.needs_delivery_filter("foo.*"));
        assert!(!p.needs_delivery_filter("foo.public"));
        assert!(!p.can_receive("foo.secret"));
        assert!(!p.can_receive("foo.private.a"));
        assert!(p.can_receive("foo.public"));
    }

    #[test]
    fn queue_group_permissions() {
        let p = PermissionSet::new(&Permissions {
            publish: PermissionRules::default(),
            subscribe: rules(&["jobs.> workers", "events.>"], &["events.x admins"]),
            responses: None,
        })
        .unwrap();
        assert!(p.can_subscribe("jobs.a", Some("workers")));
        assert!(!p.can_subscribe("jobs.a", Some("others")));
        assert!(!p.can_subscribe("jobs.a", None));
        assert!(p.can_subscribe("events.x", None));
        assert!(p.can_subscribe("events.x", Some("users")));
        assert!(!p.can_subscribe("events.x", Some("admins")));
        assert!(PermissionSet::new(&Permissions {
            publish: rules(&["foo..bar"], &[]),
            subscribe: PermissionRules::default(),
            responses: None,
        })
        .is_err());
    }

    #[test]
    fn user_permissions_are_returned() {
        let cfg = AuthConfig {
            users: vec![User {
                account: None,
                username: "u".into(),
                password: "p".into(),
                permissions: Some(Permissions {
                    publish: rules(&["a"], &[]),
                    subscribe: rules(&["b"], &[]),
                    responses: None,
                }),
            }],
            ..Default::default()
        };
        let a = Authenticator::new(&cfg).unwrap();
        let p = a
            .authenticate(&creds(Some("u"), Some("p")), None)
            .unwrap()
            .unwrap();
        assert!(p.can_publish("a") && !p.can_publish("b"));
        assert!(p.can_subscribe("b", None) && !p.can_subscribe("a", None));
    }

    #[test]
    fn constant_time_eq() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
        assert!(ct_eq(b"", b""));
    }
}
