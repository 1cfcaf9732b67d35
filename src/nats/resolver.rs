//! Operator mode: the trusted operators, the account resolver (MEMORY with
//! `resolver_preload`, or a `full`/`cache` directory of `<key>.jwt`
//! files), user-JWT authentication, and account-JWT updates pushed by the
//! system account (`spec/nats-parity.md` §2.4–2.6).
//!
//! [`OperatorState`] is built once at start-up and shared; the account
//! claims it holds change at run time: a pushed update replaces an
//! account's limits, signing keys and revocations at once (under a write
//! lock held only for the map operation), and a full resolver stores
//! accounts it did not know. The server then rewires
//! [`super::account::Accounts`] from [`OperatorState::account_configs`],
//! so a new account's users can connect and changed exports/imports apply
//! without a restart (`claims`). The same JWT pushed again is acknowledged
//! and not applied; a route peer's catch-up applies only JWTs newer than
//! the stored ones (nats-server's `saveIfNewer`), a push any JWT.
//!
//! Authentication order follows nats-server's (user JWT valid and in its
//! time window → account known and trusted → issuer is the account or one
//! of its signing keys (a scoped key's user may set no permissions or
//! limits: it gets the key's template) → bearer or nonce signature → not
//! revoked → connection type allowed). Every failure is one typed
//! [`JwtAuthError`]; the client only ever sees `Authorization Violation`.
//!
//! Bounded memory: the account map holds at most the stored accounts
//! (`limit` for a directory resolver, the preload list for MEMORY).
//! A full resolver refuses a new account beyond `limit` with an error
//! reply; a cache resolver (default limit 1,000, as nats-server) makes
//! room by evicting the least recently used account that no connection
//! uses (never the system account), and drops accounts unused for `ttl`
//! (or, without `ttl`, whose JWT expired) — a user of a dropped account
//! is admitted after a new lookup. Must not: accept
//! an account JWT whose issuer is not a trusted operator key, or a user
//! whose issuer is not its account or one of the account's signing keys.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use super::auth::PermissionSet;
use super::jwt::{self, AccountClaims, JwtError, SigningKey};
use super::restrict;
use crate::config::nats::{
    AccountConfig, ExportConfig, ExportKind, ImportConfig, OperatorConfig, PermissionRules,
    Permissions, ResolverConfig, ResponsePermission, ResponseType, DEFAULT_RESPONSE_THRESHOLD,
};

/// Errors of setting up operator mode (start-up only).
#[derive(Debug, thiserror::Error)]
pub enum ResolverError {
    /// An operator JWT does not decode or verify.
    #[error("operator JWT: {0}")]
    Operator(JwtError),
    /// Neither an operator JWT nor trusted keys.
    #[error("operator mode needs at least one operator JWT or trusted key")]
    NoOperator,
    /// A trusted key is not an operator public key.
    #[error("trusted key {0:?} is not an operator public key")]
    TrustedKey(String),
    /// `system_account` is not an account public key.
    #[error("system_account {0:?} is not an account public key")]
    SystemAccount(String),
    /// A preloaded account JWT is invalid.
    #[error("resolver_preload: invalid account JWT for {key}: {reason}")]
    Preload {
        /// The map key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The resolver directory cannot be created or read.
    #[error("resolver dir {dir:?}: {source}")]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Why a user (or an account update) was refused. The client sees only
/// `Authorization Violation`; this text goes to the debug log.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum JwtAuthError {
    /// CONNECT carried no `jwt`.
    #[error("operator mode: CONNECT without a user JWT")]
    NoJwt,
    /// The user JWT is malformed, badly signed, expired or not yet valid.
    #[error("user JWT: {0}")]
    Jwt(#[from] JwtError),
    /// The account is not known to the resolver.
    #[error("account {0} not found")]
    UnknownAccount(String),
    /// The account JWT has expired.
    #[error("account {0} expired")]
    AccountExpired(String),
    /// The user's issuer is neither the account nor one of its signing keys.
    #[error("user issuer {0} is not the account or one of its signing keys")]
    Issuer(String),
    /// A user of a scoped signing key that sets permissions or limits of
    /// its own (nats-io/jwt's "scoped users require no permissions or
    /// limits set": the template is the only source of them).
    #[error("scoped user {0} must not set permissions or limits")]
    ScopedUserLimits(String),
    /// A bearer token in an account with `disallow_bearer`.
    #[error("bearer tokens are not allowed in account {0}")]
    BearerDisallowed(String),
    /// No nonce signature, or a wrong one.
    #[error("nonce signature missing or invalid")]
    Signature,
    /// The account revoked this user.
    #[error("user {0} is revoked")]
    Revoked(String),
    /// `allowed_connection_types` excludes this connection.
    #[error("connection type {0} not allowed")]
    ConnectionType(&'static str),
    /// The client's address is outside the user's `src` networks
    /// (nats-server logs "Bad src Ip").
    #[error("bad src IP {}", .0.map_or_else(|| "(unknown)".to_string(), |ip| ip.to_string()))]
    BadSrc(Option<std::net::IpAddr>),
    /// Now is outside the user's `times` windows.
    #[error("outside connect times")]
    OutsideTimes,
    /// A permission subject of the JWT is invalid.
    #[error("invalid permission in user JWT: {0}")]
    Permission(String),
}

/// One account as the resolver holds it.
#[derive(Debug, Clone)]
pub struct AccountEntry {
    /// The JWT as received (answered to lookups, written to the store).
    pub jwt: String,
    pub claims: AccountClaims,
}

/// An authenticated JWT user.
#[derive(Debug, Clone)]
pub struct JwtUser {
    /// The user's public key.
    pub user: String,
    /// The account's public key.
    pub account: String,
    /// `None` = no restrictions.
    pub permissions: Option<Arc<PermissionSet>>,
    /// Effective limits (user or scope template, lowered by the account);
    /// `None` = unlimited.
    pub max_subs: Option<usize>,
    pub max_payload: Option<usize>,
    /// Unix seconds when the user JWT expires.
    pub expires: Option<i64>,
    /// The user JWT's `iat` (revocations compare against it).
    pub issued_at: i64,
}

/// Where account JWTs are kept.
#[derive(Debug)]
enum Store {
    Memory,
    Dir {
        full: bool,
        dir: PathBuf,
        limit: Option<usize>,
        /// Cache: how long an unused account stays (`None` = until its
        /// JWT expires).
        ttl: Option<Duration>,
        /// `allow_delete`: `Some(hard_delete)`.
        delete: Option<bool>,
        /// How often a full resolver compares its accounts with its peers'.
        interval: Duration,
        /// How long a lookup of an account not stored here waits.
        timeout: Duration,
    },
}

/// nats-server's default `limit` of a cache resolver.
const DEFAULT_CACHE_LIMIT: usize = 1_000;
/// Longest time between two sweeps of a cache resolver (nats-server's
/// expiry check); with a `ttl`, half of it when that is shorter.
const CACHE_SWEEP_MAX: Duration = Duration::from_secs(60);
/// nats-server's default `interval` of a full resolver.
const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_secs(60);
/// nats-server's default `timeout` of an account lookup.
const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_millis(1900);

/// Where an account JWT handed to [`OperatorState::apply_update`] comes
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateSource {
    /// Pushed on a claims-update subject (here, or forwarded by a route
    /// peer): replaces the stored JWT whatever its age.
    Push,
    /// A route peer's stored JWTs (catch-up): applied only when newer.
    PeerSync,
    /// A peer's answer to our lookup of an account not stored here: stored
    /// by a cache resolver too.
    Fetched,
}

/// The outcome of a pushed account JWT, for the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateOutcome {
    /// The account key (from the subject or the JWT; empty if neither).
    pub account: String,
    /// `Ok(message)` or `Err((message, error))` as nats-server words them.
    pub result: Result<&'static str, (&'static str, String)>,
    /// Whether live account claims changed (connected users must be
    /// re-checked).
    pub changed: bool,
    /// Whether the resolver's set of accounts changed (a new account, or a
    /// new JWT for a known one): the live accounts are rewired.
    pub stored: bool,
}

/// Operator-mode state shared by the server (see the module doc).
#[derive(Debug)]
pub struct OperatorState {
    /// Operator identity keys, their signing keys and `trusted` keys.
    trusted: HashSet<String>,
    /// Operator identity keys of operators with strict signing key usage:
    /// accounts signed by these are refused.
    strict_identities: HashSet<String>,
    /// The system account's key, if any.
    system_account: Option<String>,
    store: Store,
    accounts: RwLock<HashMap<String, Arc<AccountEntry>>>,
    /// Serialises pushed updates (a local push and one forwarded by a
    /// route may race; the newest must win).
    updates: parking_lot::Mutex<()>,
    /// Accounts deleted since start-up (bounded by the accounts there
    /// were).
    deleted: parking_lot::Mutex<HashSet<String>>,
    /// A cache resolver's record of when each stored account was last
    /// stored or authenticated a user (at most the stored accounts).
    last_used: parking_lot::Mutex<HashMap<String, Instant>>,
}

/// The outcome of an account delete request, for the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// `Ok(message)` or `Err((message, error))` as nats-server words them.
    pub result: Result<String, (String, String)>,
    /// The accounts that were loaded and are gone now.
    pub deleted: Vec<String>,
}

impl OperatorState {
    /// Reads the operators and loads the resolver's accounts.
    pub fn load(cfg: &OperatorConfig) -> Result<OperatorState, ResolverError> {
        let mut trusted = HashSet::new();
        let mut strict_identities = HashSet::new();
        let mut system_account = cfg.system_account.clone();
        for token in &cfg.operators {
            let op = jwt::decode_operator(token).map_err(ResolverError::Operator)?;
            trusted.insert(op.sub.clone());
            trusted.insert(op.iss.clone());
            trusted.extend(op.nats.signing_keys.iter().cloned());
            if op.nats.strict_signing_key_usage {
                strict_identities.insert(op.sub.clone());
            }
            if system_account.is_none() && !op.nats.system_account.is_empty() {
                system_account = Some(op.nats.system_account.clone());
            }
        }
        for k in &cfg.trusted_keys {
            if !k.starts_with('O') || nkeys::KeyPair::from_public_key(k).is_err() {
                return Err(ResolverError::TrustedKey(k.clone()));
            }
            trusted.insert(k.clone());
        }
        if trusted.is_empty() {
            return Err(ResolverError::NoOperator);
        }
        if let Some(s) = &system_account {
            if !s.starts_with('A') || nkeys::KeyPair::from_public_key(s).is_err() {
                return Err(ResolverError::SystemAccount(s.clone()));
            }
        }
        let mut state = OperatorState {
            trusted,
            strict_identities,
            system_account,
            store: Store::Memory,
            accounts: RwLock::new(HashMap::new()),
            updates: parking_lot::Mutex::new(()),
            deleted: parking_lot::Mutex::new(HashSet::new()),
            last_used: parking_lot::Mutex::new(HashMap::new()),
        };
        match &cfg.resolver {
            ResolverConfig::Memory { preload } => state.preload(preload, false)?,
            ResolverConfig::Dir {
                full,
                dir,
                limit,
                ttl,
                preload,
                allow_delete,
                hard_delete,
                interval,
                timeout,
            } => {
                std::fs::create_dir_all(dir).map_err(|source| ResolverError::Dir {
                    dir: dir.clone(),
                    source,
                })?;
                state.store = Store::Dir {
                    full: *full,
                    dir: dir.clone(),
                    limit: if *full {
                        *limit
                    } else {
                        Some(limit.unwrap_or(DEFAULT_CACHE_LIMIT))
                    },
                    ttl: *ttl,
                    delete: allow_delete.then_some(*hard_delete),
                    interval: interval.unwrap_or(DEFAULT_SYNC_INTERVAL),
                    timeout: timeout.unwrap_or(DEFAULT_FETCH_TIMEOUT),
                };
                state.load_dir(dir)?;
                state.preload(preload, true)?;
                if !*full {
                    let now = Instant::now();
                    let keys = state.accounts.read().keys().cloned().collect::<Vec<_>>();
                    state
                        .last_used
                        .get_mut()
                        .extend(keys.into_iter().map(|k| (k, now)));
                }
            }
        }
        Ok(state)
    }

    fn preload(&mut self, preload: &[(String, String)], store: bool) -> Result<(), ResolverError> {
        for (key, token) in preload {
            let claims = self
                .validate_account(token, jwt::unix_now())
                .map_err(|reason| ResolverError::Preload {
                    key: key.clone(),
                    reason,
                })?;
            if &claims.sub != key {
                return Err(ResolverError::Preload {
                    key: key.clone(),
                    reason: format!("the JWT is for account {}", claims.sub),
                });
            }
            let have = self.accounts.read().contains_key(key);
            if have && store {
                // A stored JWT (possibly a newer push) wins over the preload.
                continue;
            }
            if store {
                if let Store::Dir { dir, .. } = &self.store {
                    write_jwt(dir, key, token).map_err(|source| ResolverError::Dir {
                        dir: dir.clone(),
                        source,
                    })?;
                }
            }
            self.accounts.write().insert(
                key.clone(),
                Arc::new(AccountEntry {
                    jwt: token.clone(),
                    claims,
                }),
            );
        }
        Ok(())
    }

    /// Loads `<dir>/<key>.jwt`; files that do not validate are skipped with
    /// a warning (one bad file must not keep the other accounts out).
    fn load_dir(&mut self, dir: &Path) -> Result<(), ResolverError> {
        let rd = std::fs::read_dir(dir).map_err(|source| ResolverError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let now = jwt::unix_now();
        let mut map = HashMap::new();
        for ent in rd.flatten() {
            let path = ent.path();
            let Some(key) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".jwt"))
                .map(str::to_string)
            else {
                continue;
            };
            let token = match std::fs::read_to_string(&path) {
                Ok(t) => t.trim().to_string(),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "resolver: cannot read account JWT; skipped");
                    continue;
                }
            };
            match self.validate_account(&token, now) {
                Ok(claims) if claims.sub == key => {
                    map.insert(key, Arc::new(AccountEntry { jwt: token, claims }));
                }
                Ok(claims) => {
                    tracing::warn!(file = %path.display(), account = %claims.sub, "resolver: file name does not match the account; skipped");
                }
                Err(reason) => {
                    tracing::warn!(file = %path.display(), %reason, "resolver: invalid account JWT; skipped");
                }
            }
        }
        *self.accounts.write() = map;
        Ok(())
    }

    /// Decodes an account JWT and checks it is signed by a trusted key
    /// and within its time window.
    fn validate_account(&self, token: &str, now: i64) -> Result<AccountClaims, String> {
        let claims = jwt::decode_account(token).map_err(|e| e.to_string())?;
        if !self.trusted.contains(&claims.iss) {
            return Err(format!(
                "issuer {} is not a trusted operator key",
                claims.iss
            ));
        }
        if self.strict_identities.contains(&claims.iss) {
            return Err("operator requires issuer to be a signing key".into());
        }
        claims.check_times(now).map_err(|e| e.to_string())?;
        Ok(claims)
    }

    /// The system account's key.
    pub fn system_account(&self) -> Option<&str> {
        self.system_account.as_deref()
    }

    /// The account `key` as currently known.
    pub fn account(&self, key: &str) -> Option<Arc<AccountEntry>> {
        self.accounts.read().get(key).cloned()
    }

    /// The account's connection limit (`None` = unlimited).
    pub fn max_connections(&self, key: &str) -> Option<usize> {
        let a = self.account(key)?;
        limit(a.claims.nats.limits.conn)
    }

    /// The account's leaf-node connection limit (`None` = unlimited).
    pub fn max_leafnodes(&self, key: &str) -> Option<usize> {
        let a = self.account(key)?;
        limit(a.claims.nats.limits.leaf)
    }

    /// The accounts to wire at start-up (their exports and imports), the
    /// system account included even without a JWT.
    pub fn account_configs(&self) -> Vec<AccountConfig> {
        let accounts = self.accounts.read();
        let mut keys: Vec<&String> = accounts.keys().collect();
        keys.sort();
        let exports_of = |key: &str| -> Vec<ExportConfig> {
            accounts.get(key).map_or_else(Vec::new, |a| {
                a.claims
                    .nats
                    .exports
                    .iter()
                    .filter(|e| !e.token_req)
                    .filter_map(export_config)
                    .collect()
            })
        };
        let mut out = Vec::new();
        for key in keys {
            let a = &accounts[key];
            let mut imports = Vec::new();
            for i in &a.claims.nats.imports {
                let Some(imp) = import_config(i) else {
                    continue;
                };
                // Only imports the exporter's JWT covers with a public
                // export; others (private exports needing activation
                // tokens, unknown exporters) are left out, as nats-server
                // marks them invalid instead of refusing the account.
                let covered = imp.account != *key
                    && exports_of(&imp.account).iter().any(|e| {
                        e.kind == imp.kind && super::subject::is_subset(&imp.subject, &e.subject)
                    });
                if covered {
                    imports.push(imp);
                } else {
                    tracing::warn!(account = %key, subject = %i.subject, exporter = %i.account, "operator mode: import not covered by a public export; ignored");
                }
            }
            let mappings = a
                .claims
                .nats
                .mappings
                .iter()
                .map(|(src, dests)| crate::config::nats::MappingConfig {
                    src: src.clone(),
                    dests: dests
                        .iter()
                        .map(|d| crate::config::nats::MapDest {
                            subject: d.subject.clone(),
                            weight: d.weight,
                            cluster: (!d.cluster.is_empty()).then(|| d.cluster.clone()),
                        })
                        .collect(),
                })
                .collect();
            out.push(AccountConfig {
                name: key.clone(),
                exports: exports_of(key),
                imports,
                mappings,
                // Operator mode's limits come from the account JWT.
                limits: Default::default(),
            });
        }
        if let Some(sys) = &self.system_account {
            if !out.iter().any(|a| &a.name == sys) {
                out.push(AccountConfig {
                    name: sys.clone(),
                    ..Default::default()
                });
            }
        }
        out
    }

    /// Authenticates a CONNECT carrying a user JWT. `sig` is the nonce
    /// signature (base64url or standard base64), `websocket` the
    /// connection type, `ip` the client's address, `now` unix seconds.
    pub fn authenticate(
        &self,
        token: &str,
        sig: Option<&str>,
        nonce: Option<&str>,
        websocket: bool,
        ip: Option<std::net::IpAddr>,
        now: i64,
    ) -> Result<JwtUser, JwtAuthError> {
        let kind = if websocket { "WEBSOCKET" } else { "STANDARD" };
        self.authenticate_as(token, sig, nonce, kind, ip, now)
    }

    /// [`OperatorState::authenticate`] for a connection of type `kind`
    /// (`STANDARD`, `WEBSOCKET`, `LEAFNODE`), checked against the user's
    /// `allowed_connection_types`.
    pub fn authenticate_as(
        &self,
        token: &str,
        sig: Option<&str>,
        nonce: Option<&str>,
        kind: &'static str,
        ip: Option<std::net::IpAddr>,
        now: i64,
    ) -> Result<JwtUser, JwtAuthError> {
        let uc = jwt::decode_user(token)?;
        uc.check_times(now)?;
        let account_key = if uc.nats.issuer_account.is_empty() {
            uc.iss.clone()
        } else {
            uc.nats.issuer_account.clone()
        };
        let acc = self
            .account(&account_key)
            .ok_or_else(|| JwtAuthError::UnknownAccount(account_key.clone()))?;
        self.touch(&account_key);
        // From its `exp` second on, as the expiry watcher closes the
        // account's connections then (nats-server's account timer).
        let exp = acc.claims.exp;
        if acc.claims.check_times(now).is_err() || exp > 0 && now >= exp {
            return Err(JwtAuthError::AccountExpired(account_key));
        }
        let mut limits = &uc.nats.limits;
        if uc.iss != account_key {
            match acc.claims.nats.signing_key(&uc.iss) {
                None => return Err(JwtAuthError::Issuer(uc.iss.clone())),
                // A scoped key's template is the user's permissions and
                // limits; a user that brings its own is refused, as
                // nats-server does, rather than silently overridden.
                Some(SigningKey::Scoped(s)) => {
                    if *limits != jwt::UserPermissionLimits::default() {
                        return Err(JwtAuthError::ScopedUserLimits(uc.sub.clone()));
                    }
                    limits = &s.template
                }
                Some(SigningKey::Plain(_)) => {}
            }
        }
        if limits.bearer_token {
            if acc.claims.nats.limits.disallow_bearer {
                return Err(JwtAuthError::BearerDisallowed(account_key));
            }
        } else {
            let (Some(sig), Some(nonce)) = (sig, nonce) else {
                return Err(JwtAuthError::Signature);
            };
            let raw = super::auth::decode_signature(sig).ok_or(JwtAuthError::Signature)?;
            let key =
                nkeys::KeyPair::from_public_key(&uc.sub).map_err(|_| JwtAuthError::Signature)?;
            key.verify(nonce.as_bytes(), &raw)
                .map_err(|_| JwtAuthError::Signature)?;
        }
        if acc.claims.nats.is_revoked(&uc.sub, uc.iat) {
            return Err(JwtAuthError::Revoked(uc.sub.clone()));
        }
        if !limits.allowed_connection_types.is_empty()
            && !limits
                .allowed_connection_types
                .iter()
                .any(|t| t.eq_ignore_ascii_case(kind))
        {
            return Err(JwtAuthError::ConnectionType(kind));
        }
        if !restrict::src_allows(&limits.src, ip) {
            return Err(JwtAuthError::BadSrc(ip));
        }
        let window_end = match restrict::times_window(
            &limits.times,
            &limits.times_location,
            jiff::Timestamp::from_second(now).unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        ) {
            restrict::Window::Always => None,
            restrict::Window::Until(end) => Some(end.as_second()),
            restrict::Window::Outside => return Err(JwtAuthError::OutsideTimes),
        };
        let (publish, subscribe) = if limits.publish == jwt::Permission::default()
            && limits.subscribe == jwt::Permission::default()
        {
            match &acc.claims.nats.default_permissions {
                Some(d) => (d.publish.clone(), d.subscribe.clone()),
                None => (limits.publish.clone(), limits.subscribe.clone()),
            }
        } else {
            (limits.publish.clone(), limits.subscribe.clone())
        };
        // `resp` as nats-server reads it: 0 = the default, negative = none.
        let responses = limits
            .resp
            .as_ref()
            .map(|r| ResponsePermission::from_limits(r.max, r.ttl));
        let permissions = if publish == jwt::Permission::default()
            && subscribe == jwt::Permission::default()
            && responses.is_none()
        {
            None
        } else {
            let p = Permissions {
                publish: PermissionRules {
                    allow: publish.allow,
                    deny: publish.deny,
                },
                subscribe: PermissionRules {
                    allow: subscribe.allow,
                    deny: subscribe.deny,
                },
                responses,
            };
            Some(Arc::new(
                PermissionSet::new(&p).map_err(|e| JwtAuthError::Permission(e.to_string()))?,
            ))
        };
        let al = &acc.claims.nats.limits;
        Ok(JwtUser {
            user: uc.sub.clone(),
            account: account_key,
            permissions,
            max_subs: min_limit(limits.subs, al.subs),
            max_payload: min_limit(limits.payload, al.payload),
            // Closed at the JWT's expiry or the end of its connect window,
            // whichever comes first.
            expires: [(uc.exp > 0).then_some(uc.exp), window_end]
                .into_iter()
                .flatten()
                .min(),
            issued_at: uc.iat,
        })
    }

    /// Whether a connected user (key, `iat`) must now be disconnected from
    /// `account`: revoked, or a bearer user where bearer tokens became
    /// disallowed. `Some(text)` is the `-ERR` to send.
    pub fn recheck_user(&self, account: &str, user_jwt: &str) -> Option<&'static str> {
        let acc = self.account(account)?;
        let Ok(uc) = jwt::decode_user(user_jwt) else {
            return None;
        };
        if acc.claims.nats.is_revoked(&uc.sub, uc.iat) {
            return Some("User Authentication Revoked");
        }
        if uc.nats.limits.bearer_token && acc.claims.nats.limits.disallow_bearer {
            return Some("Authorization Violation");
        }
        None
    }

    /// Applies an account JWT pushed on a claims-update subject.
    /// `subject_key` is the account named by the subject
    /// (`$SYS.REQ.ACCOUNT.<key>.CLAIMS.UPDATE`), `None` for
    /// `$SYS.REQ.CLAIMS.UPDATE`. `newer_only`: a JWT issued before the
    /// stored one is not applied (a route peer's catch-up).
    pub fn apply_update(
        &self,
        subject_key: Option<&str>,
        body: &[u8],
        source: UpdateSource,
        in_use: &dyn Fn(&str) -> bool,
    ) -> UpdateOutcome {
        let newer_only = source != UpdateSource::Push;
        let _one = self.updates.lock();
        let mut out = UpdateOutcome {
            account: subject_key.unwrap_or_default().to_string(),
            result: Ok(""),
            changed: false,
            stored: false,
        };
        let token = String::from_utf8_lossy(body).trim().to_string();
        if token.is_empty() {
            out.result = Err(("jwt update error", "request body is empty".into()));
            return out;
        }
        let claims = match self.validate_account(&token, jwt::unix_now()) {
            Ok(c) => c,
            Err(e) => {
                out.result = Err(("jwt validation failed", e));
                return out;
            }
        };
        if let Some(k) = subject_key {
            if k != claims.sub {
                out.result = Err((
                    "jwt update resulted in error",
                    "subject does not match jwt content".into(),
                ));
                return out;
            }
        }
        out.account = claims.sub.clone();
        let key = claims.sub.clone();
        let existing = self.account(&key);
        let known = existing.is_some();
        if newer_only && !known && self.tombstoned(&key) {
            // Deleted here: a peer's catch-up does not bring it back (a
            // push does).
            out.result = Ok("jwt update skipped");
            return out;
        }
        // As nats-server's store: the same JWT again is acknowledged and
        // not applied; so is, when only newer ones count (nodes catching
        // up with each other), one issued before the stored one. A push
        // replaces the stored JWT whatever its age.
        let stale = existing.is_some_and(|e| {
            e.claims.jti == claims.jti && !claims.jti.is_empty()
                || newer_only && e.claims.iat > claims.iat
        });
        let message = match &self.store {
            Store::Memory => {
                if !known {
                    out.result = Ok("jwt update skipped");
                    return out;
                }
                "jwt updated"
            }
            Store::Dir {
                full, dir, limit, ..
            } => {
                if !*full && !known && source != UpdateSource::Fetched {
                    out.result = Ok("jwt update cache skipped");
                    return out;
                }
                if !known && limit.is_some_and(|l| self.accounts.read().len() >= l) {
                    match (!*full).then(|| self.least_recently_used(in_use)).flatten() {
                        Some(victim) => {
                            if let Err(e) = remove_jwt(dir, &victim) {
                                out.result = Err(("jwt update resulted in error", e.to_string()));
                                return out;
                            }
                            self.forget(&victim);
                            tracing::info!(account = %victim, "resolver: cache full, least recently used account evicted");
                        }
                        None => {
                            out.result = Err((
                                "jwt update resulted in error",
                                "resolver limit of stored accounts reached".into(),
                            ));
                            return out;
                        }
                    }
                }
                let message = if *full {
                    "jwt updated"
                } else {
                    "jwt updated cache"
                };
                if stale {
                    out.result = Ok(message);
                    return out;
                }
                if let Err(e) = write_jwt(dir, &key, &token) {
                    out.result = Err(("jwt update resulted in error", e.to_string()));
                    return out;
                }
                message
            }
        };
        if stale {
            out.result = Ok(message);
            return out;
        }
        self.touch(&key);
        self.accounts
            .write()
            .insert(key, Arc::new(AccountEntry { jwt: token, claims }));
        out.changed = known;
        out.stored = true;
        out.result = Ok(message);
        out
    }

    /// The accounts whose JWT expires after `after` (unix seconds): the
    /// earliest such expiry and every account expiring then.
    pub fn next_account_expiry(&self, after: i64) -> Option<(i64, Vec<String>)> {
        let accounts = self.accounts.read();
        let next = accounts
            .values()
            .map(|a| a.claims.exp)
            .filter(|&e| e > after)
            .min()?;
        let keys = accounts
            .iter()
            .filter(|(_, a)| a.claims.exp == next)
            .map(|(k, _)| k.clone())
            .collect();
        Some((next, keys))
    }

    /// Whether `key` was deleted here and stays so (`<key>.jwt.deleted`,
    /// or a hard delete since start-up).
    fn tombstoned(&self, key: &str) -> bool {
        match &self.store {
            Store::Dir { dir, .. } => {
                self.deleted.lock().contains(key) || dir.join(format!("{key}.jwt.deleted")).exists()
            }
            Store::Memory => false,
        }
    }

    /// Applies an operator's `$SYS.REQ.CLAIMS.DELETE` request: generic
    /// claims self-signed by a trusted operator key whose `nats.accounts`
    /// lists the accounts to delete (nats-server's checks and texts).
    /// Deleted accounts leave the map and the directory (renamed to
    /// `<key>.jwt.deleted` unless `hard_delete`).
    pub fn delete_accounts(&self, body: &[u8]) -> DeleteOutcome {
        let _one = self.updates.lock();
        let token = String::from_utf8_lossy(body).trim().to_string();
        let mut out = DeleteOutcome {
            result: Ok(String::new()),
            deleted: Vec::new(),
        };
        let claims = match jwt::decode_generic(&token) {
            Ok(c) => c,
            Err(e) => {
                out.result = Err(("delete accounts request by  failed".into(), e.to_string()));
                return out;
            }
        };
        let sub = claims["sub"].as_str().unwrap_or_default().to_string();
        let iss = claims["iss"].as_str().unwrap_or_default();
        let fail = |why: &str| {
            Err((
                format!("delete accounts request by {sub} failed"),
                why.to_string(),
            ))
        };
        let Store::Dir {
            dir,
            delete: Some(hard),
            ..
        } = &self.store
        else {
            out.result = fail("delete must be enabled in server config");
            return out;
        };
        if sub != iss {
            out.result = fail("not self signed");
            return out;
        }
        if !self.trusted.contains(iss) {
            out.result = fail("not trusted");
            return out;
        }
        let Some(list) = claims["nats"]["accounts"].as_array() else {
            out.result = fail("malformed request");
            return out;
        };
        let mut keys = Vec::new();
        for entry in list {
            let Some(k) = entry
                .as_str()
                .filter(|k| k.starts_with('A') && nkeys::KeyPair::from_public_key(k).is_ok())
            else {
                out.result = fail("malformed request");
                return out;
            };
            if self.system_account.as_deref() == Some(k) {
                out.result = fail("not allowed to delete system account");
                return out;
            }
            keys.push(k.to_string());
        }
        let mut errors = Vec::new();
        for k in &keys {
            let path = dir.join(format!("{k}.jwt"));
            let gone = if *hard {
                std::fs::remove_file(&path)
            } else {
                std::fs::rename(&path, dir.join(format!("{k}.jwt.deleted")))
            };
            match gone {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    errors.push(e.to_string());
                    continue;
                }
                _ => {}
            }
            self.deleted.lock().insert(k.clone());
            if self.accounts.write().remove(k).is_some() {
                out.deleted.push(k.clone());
            }
        }
        let passed = keys.len() - errors.len();
        out.result = if errors.is_empty() {
            Ok(format!("deleted {passed} accounts"))
        } else {
            Err((
                format!("deleted {passed} accounts, failed for {}", errors.len()),
                errors.join("\n"),
            ))
        };
        out
    }

    /// Whether `body` is an account JWT this server would accept on a
    /// claims-update subject naming `subject_key` (so it is worth passing
    /// on to route peers).
    pub fn is_valid_update(&self, subject_key: Option<&str>, body: &[u8]) -> bool {
        let token = String::from_utf8_lossy(body);
        self.validate_account(token.trim(), jwt::unix_now())
            .is_ok_and(|c| subject_key.is_none_or(|k| k == c.sub))
    }

    /// The stored accounts (key, JWT) a full resolver offers its route
    /// peers (nats-server's full resolvers keep each other in step); none
    /// for other resolvers.
    pub fn sync_jwts(&self) -> Vec<(String, String)> {
        match &self.store {
            Store::Dir { full: true, .. } => self
                .accounts
                .read()
                .iter()
                .map(|(k, a)| (k.clone(), a.jwt.clone()))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The stored JWT of `key` (lookup requests); `None` = not found.
    pub fn lookup(&self, key: &str) -> Option<String> {
        self.account(key).map(|a| a.jwt.clone())
    }

    /// How often a full resolver compares its accounts with its route
    /// peers'; `None` for other resolvers.
    pub fn sync_interval(&self) -> Option<Duration> {
        match &self.store {
            Store::Dir {
                full: true,
                interval,
                ..
            } => Some(*interval),
            _ => None,
        }
    }

    /// How long a lookup of an account not stored here waits for the
    /// route peers; `None` for MEMORY, which never looks accounts up.
    pub fn fetch_timeout(&self) -> Option<Duration> {
        match &self.store {
            Store::Dir { timeout, .. } => Some(*timeout),
            Store::Memory => None,
        }
    }

    /// The account of a user JWT when it is worth looking up from the
    /// route and leaf peers: a directory resolver that does not store it
    /// (and did not delete it), or a cache whose copy expired. `None` for
    /// a JWT that does not decode, a known live account, or MEMORY.
    pub fn account_to_fetch(&self, user_jwt: &str) -> Option<String> {
        self.fetch_timeout()?;
        let uc = jwt::decode_user(user_jwt).ok()?;
        let key = if uc.nats.issuer_account.is_empty() {
            uc.iss
        } else {
            uc.nats.issuer_account
        };
        let stale = match self.account(&key) {
            None => true,
            // A cache asks again for an account whose JWT expired: the
            // peers may hold a renewed one.
            Some(a) => self.is_cache() && a.claims.exp > 0 && jwt::unix_now() >= a.claims.exp,
        };
        (stale && !self.tombstoned(&key)).then_some(key)
    }

    fn is_cache(&self) -> bool {
        matches!(self.store, Store::Dir { full: false, .. })
    }

    /// Notes that `key` was used (cache resolver only).
    fn touch(&self, key: &str) {
        if self.is_cache() {
            self.last_used
                .lock()
                .insert(key.to_string(), Instant::now());
        }
    }

    /// Drops `key` from the map and the cache's record.
    fn forget(&self, key: &str) {
        self.accounts.write().remove(key);
        self.last_used.lock().remove(key);
    }

    /// The cache's least recently used account that `in_use` says no
    /// connection uses, other than the system account.
    fn least_recently_used(&self, in_use: &dyn Fn(&str) -> bool) -> Option<String> {
        let mut by_age: Vec<(Instant, String)> = {
            let used = self.last_used.lock();
            self.accounts
                .read()
                .keys()
                .filter(|k| self.system_account.as_deref() != Some(k.as_str()))
                .map(|k| (used.get(k).copied().unwrap_or_else(Instant::now), k.clone()))
                .collect()
        };
        by_age.sort();
        by_age.into_iter().map(|(_, k)| k).find(|k| !in_use(k))
    }

    /// How often a cache resolver looks for accounts to drop (`None` for
    /// other resolvers): half its `ttl`, at most a minute.
    pub fn cache_sweep_every(&self) -> Option<Duration> {
        match &self.store {
            Store::Dir {
                full: false, ttl, ..
            } => Some(ttl.map_or(CACHE_SWEEP_MAX, |t| (t / 2).min(CACHE_SWEEP_MAX))),
            _ => None,
        }
    }

    /// A cache resolver's sweep: drops the accounts unused for `ttl` (or,
    /// without one, whose JWT expired) from the map and the directory.
    /// An account `in_use` says a connection uses stays, as used now.
    /// Returns the dropped accounts.
    pub fn sweep_cache(&self, now: Instant, in_use: &dyn Fn(&str) -> bool) -> Vec<String> {
        let Store::Dir {
            full: false,
            ttl,
            dir,
            ..
        } = &self.store
        else {
            return Vec::new();
        };
        let _one = self.updates.lock();
        let unix_now = jwt::unix_now();
        let due: Vec<String> = {
            let used = self.last_used.lock();
            self.accounts
                .read()
                .iter()
                .filter(|(k, _)| self.system_account.as_deref() != Some(k.as_str()))
                .filter(|(k, a)| match ttl {
                    Some(t) => used.get(*k).is_none_or(|u| now.duration_since(*u) >= *t),
                    None => a.claims.exp > 0 && unix_now >= a.claims.exp,
                })
                .map(|(k, _)| k.clone())
                .collect()
        };
        let mut dropped = Vec::new();
        for k in due {
            if in_use(&k) {
                self.last_used.lock().insert(k, now);
                continue;
            }
            if let Err(e) = remove_jwt(dir, &k) {
                tracing::warn!(account = %k, error = %e, "resolver: cannot remove a cached account JWT");
                continue;
            }
            self.forget(&k);
            dropped.push(k);
        }
        dropped
    }

    /// A digest of the stored accounts (a full resolver's): the XOR of
    /// each JWT's SHA-256, so it does not depend on order — nats-server's
    /// store hash. Two nodes with the same JWTs have the same digest.
    pub fn digest(&self) -> [u8; 32] {
        let mut acc = [0u8; 32];
        for a in self.accounts.read().values() {
            let d = ring::digest::digest(&ring::digest::SHA256, a.jwt.as_bytes());
            for (x, y) in acc.iter_mut().zip(d.as_ref()) {
                *x ^= y;
            }
        }
        acc
    }
}

/// `-1` (or any negative) = unlimited.
fn limit(v: i64) -> Option<usize> {
    usize::try_from(v).ok()
}

/// The tighter of a user and an account limit (`-1` = none), as
/// nats-server's `minLimit`.
fn min_limit(user: i64, account: i64) -> Option<usize> {
    match (limit(user), limit(account)) {
        (Some(u), Some(a)) => Some(u.min(a)),
        (u, a) => u.or(a),
    }
}

fn export_config(e: &jwt::Export) -> Option<ExportConfig> {
    let kind = match e.kind.as_str() {
        "stream" => ExportKind::Stream,
        "service" => ExportKind::Service,
        _ => return None,
    };
    if !super::subject::is_valid_subject(&e.subject) {
        return None;
    }
    let response_type = match e.response_type.as_str() {
        "Stream" => ResponseType::Stream,
        "Chunked" => ResponseType::Chunked,
        _ => ResponseType::Singleton,
    };
    let response_threshold = u64::try_from(e.response_threshold)
        .ok()
        .filter(|&n| n > 0)
        .map_or(DEFAULT_RESPONSE_THRESHOLD, Duration::from_nanos);
    Some(ExportConfig {
        kind,
        subject: e.subject.clone(),
        accounts: Vec::new(),
        response_type,
        response_threshold,
    })
}

fn import_config(i: &jwt::Import) -> Option<ImportConfig> {
    if !i.token.is_empty() {
        return None;
    }
    let kind = match i.kind.as_str() {
        "stream" => ExportKind::Stream,
        "service" => ExportKind::Service,
        _ => return None,
    };
    let (prefix, to) = match kind {
        // v2 `local_subject` remaps; the deprecated `to` was a prefix.
        ExportKind::Stream if !i.local_subject.is_empty() => (None, Some(i.local_subject.clone())),
        ExportKind::Stream if !i.to.is_empty() => (Some(i.to.clone()), None),
        ExportKind::Stream => (None, None),
        ExportKind::Service if !i.local_subject.is_empty() => (None, Some(i.local_subject.clone())),
        ExportKind::Service if !i.to.is_empty() => (None, Some(i.to.clone())),
        ExportKind::Service => (None, None),
    };
    let valid = super::subject::is_valid_subject(&i.subject)
        && prefix
            .as_deref()
            .is_none_or(super::subject::is_valid_literal_subject)
        && to.as_deref().is_none_or(super::subject::is_valid_subject);
    valid.then(|| ImportConfig {
        kind,
        account: i.account.clone(),
        subject: i.subject.clone(),
        prefix,
        to,
    })
}

/// Writes `<dir>/<key>.jwt` atomically (temporary file, then rename), so a
/// crash never leaves a half-written account.
fn write_jwt(dir: &Path, key: &str, token: &str) -> std::io::Result<()> {
    if !key.starts_with('A') || !key.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not an account key",
        ));
    }
    let tmp = dir.join(format!(".{key}.jwt.tmp"));
    std::fs::write(&tmp, token)?;
    std::fs::rename(&tmp, dir.join(format!("{key}.jwt")))
}

/// Removes `<dir>/<key>.jwt`; one already gone is fine.
fn remove_jwt(dir: &Path, key: &str) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(format!("{key}.jwt"))) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The JSON reply to a delete request (the shape of [`update_reply`],
/// with an empty account).
pub fn delete_reply(server: serde_json::Value, o: &DeleteOutcome) -> serde_json::Value {
    match &o.result {
        Ok(message) => serde_json::json!({
            "server": server,
            "data": {"account": "", "code": 200, "message": message},
        }),
        Err((message, err)) => serde_json::json!({
            "server": server,
            "error": {"account": "", "code": 500, "description": format!("{message} - {err}")},
        }),
    }
}

/// The JSON reply to a claims update (nats-server's shape: `data` on
/// success, `error` with code 500 otherwise), with the server block.
pub fn update_reply(server: serde_json::Value, o: &UpdateOutcome) -> serde_json::Value {
    match &o.result {
        Ok(message) => serde_json::json!({
            "server": server,
            "data": {"account": o.account, "code": 200, "message": message},
        }),
        Err((message, err)) => serde_json::json!({
            "server": server,
            "error": {"account": o.account, "code": 500, "description": format!("{message} - {err}")},
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nats::jwt::{AccountNats, Claims, OperatorNats, UserNats};

    struct Keys {
        op: nkeys::KeyPair,
        op_jwt: String,
        acc: nkeys::KeyPair,
    }

    fn keys() -> Keys {
        let op = nkeys::KeyPair::new_operator();
        let op_jwt = jwt::encode(
            &Claims {
                iss: op.public_key(),
                sub: op.public_key(),
                nats: OperatorNats {
                    kind: "operator".into(),
                    version: 2,
                    ..Default::default()
                },
                ..Default::default()
            },
            &op,
        )
        .unwrap();
        Keys {
            op,
            op_jwt,
            acc: nkeys::KeyPair::new_account(),
        }
    }

    fn account_jwt(k: &Keys, f: impl FnOnce(&mut AccountNats)) -> String {
        let mut nats = AccountNats {
            kind: "account".into(),
            version: 2,
            limits: jwt::AccountLimits::default(),
            ..Default::default()
        };
        f(&mut nats);
        jwt::encode(
            &Claims {
                iss: k.op.public_key(),
                sub: k.acc.public_key(),
                nats,
                ..Default::default()
            },
            &k.op,
        )
        .unwrap()
    }

    fn user_jwt(
        signer: &nkeys::KeyPair,
        user: &nkeys::KeyPair,
        f: impl FnOnce(&mut UserNats),
    ) -> String {
        let mut nats = UserNats {
            kind: "user".into(),
            version: 2,
            ..Default::default()
        };
        nats.limits.subs = -1;
        nats.limits.payload = -1;
        nats.limits.data = -1;
        f(&mut nats);
        jwt::encode(
            &Claims {
                iss: signer.public_key(),
                sub: user.public_key(),
                iat: jwt::unix_now() - 10,
                nats,
                ..Default::default()
            },
            signer,
        )
        .unwrap()
    }

    fn state(k: &Keys, acc_jwt: String) -> OperatorState {
        OperatorState::load(&OperatorConfig {
            operators: vec![k.op_jwt.clone()],
            resolver: ResolverConfig::Memory {
                preload: vec![(k.acc.public_key(), acc_jwt)],
            },
            ..Default::default()
        })
        .unwrap()
    }

    fn sign(user: &nkeys::KeyPair, nonce: &str) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(user.sign(nonce.as_bytes()).unwrap())
    }

    #[test]
    fn user_signed_by_account_with_nonce() {
        let k = keys();
        let st = state(&k, account_jwt(&k, |_| {}));
        let user = nkeys::KeyPair::new_user();
        let tok = user_jwt(&k.acc, &user, |_| {});
        let now = jwt::unix_now();
        let u = st
            .authenticate(
                &tok,
                Some(&sign(&user, "abc")),
                Some("abc"),
                false,
                None,
                now,
            )
            .unwrap();
        assert_eq!(u.account, k.acc.public_key());
        assert_eq!(u.max_subs, None);
        assert!(u.permissions.is_none());
        // `resp` gives `allow_responses` (0 = nats-server's defaults), and
        // with no publish allow list, only responses may be published.
        let tok_resp = user_jwt(&k.acc, &user, |n| {
            n.limits.resp = Some(jwt::ResponsePermission { max: 0, ttl: 0 })
        });
        let u = st
            .authenticate(
                &tok_resp,
                Some(&sign(&user, "n")),
                Some("n"),
                false,
                None,
                now,
            )
            .unwrap();
        let p = u.permissions.expect("response permissions");
        assert_eq!(p.responses(), Some(ResponsePermission::default()));
        assert!(!p.can_publish("any.subject"));
        // Wrong nonce, no signature, other key: refused.
        assert_eq!(
            st.authenticate(
                &tok,
                Some(&sign(&user, "abc")),
                Some("xyz"),
                false,
                None,
                now
            )
            .unwrap_err(),
            JwtAuthError::Signature
        );
        assert_eq!(
            st.authenticate(&tok, None, Some("abc"), false, None, now)
                .unwrap_err(),
            JwtAuthError::Signature
        );
        let other = nkeys::KeyPair::new_user();
        assert_eq!(
            st.authenticate(
                &tok,
                Some(&sign(&other, "abc")),
                Some("abc"),
                false,
                None,
                now
            )
            .unwrap_err(),
            JwtAuthError::Signature
        );
    }

    #[test]
    fn signing_keys_revocations_bearer_limits() {
        let k = keys();
        let sk = nkeys::KeyPair::new_account();
        let revoked = nkeys::KeyPair::new_user();
        let st = state(
            &k,
            account_jwt(&k, |n| {
                n.signing_keys.push(SigningKey::Plain(sk.public_key()));
                n.revocations.insert(revoked.public_key(), jwt::unix_now());
                n.limits.subs = 5;
                n.limits.disallow_bearer = false;
            }),
        );
        let now = jwt::unix_now();
        let user = nkeys::KeyPair::new_user();
        // Signed by the signing key with issuer_account: accepted.
        let tok = user_jwt(&sk, &user, |n| {
            n.issuer_account = k.acc.public_key();
            n.limits.subs = 10;
            n.limits.bearer_token = true;
        });
        let u = st.authenticate(&tok, None, None, false, None, now).unwrap();
        assert_eq!(u.max_subs, Some(5));
        // Signed by the signing key without issuer_account: unknown account.
        let tok = user_jwt(&sk, &user, |_| {});
        assert!(matches!(
            st.authenticate(&tok, None, None, false, None, now),
            Err(JwtAuthError::UnknownAccount(_))
        ));
        // Signed by a key the account does not list.
        let stranger = nkeys::KeyPair::new_account();
        let tok = user_jwt(&stranger, &user, |n| n.issuer_account = k.acc.public_key());
        assert!(matches!(
            st.authenticate(&tok, None, None, false, None, now),
            Err(JwtAuthError::Issuer(_))
        ));
        // Revoked user.
        let tok = user_jwt(&k.acc, &revoked, |_| {});
        assert!(matches!(
            st.authenticate(
                &tok,
                Some(&sign(&revoked, "n")),
                Some("n"),
                false,
                None,
                now
            ),
            Err(JwtAuthError::Revoked(_))
        ));
        // Connection types.
        let tok = user_jwt(&k.acc, &user, |n| {
            n.limits.allowed_connection_types = vec!["WEBSOCKET".into()];
        });
        assert!(matches!(
            st.authenticate(&tok, Some(&sign(&user, "n")), Some("n"), false, None, now),
            Err(JwtAuthError::ConnectionType("STANDARD"))
        ));
        assert!(st
            .authenticate(&tok, Some(&sign(&user, "n")), Some("n"), true, None, now)
            .is_ok());
    }

    #[test]
    fn scoped_signing_key_template() {
        let k = keys();
        let scoped = nkeys::KeyPair::new_account();
        let mut template = jwt::UserPermissionLimits {
            subs: 3,
            payload: -1,
            data: -1,
            ..Default::default()
        };
        template.publish.allow = vec!["scoped.>".into()];
        let st = state(
            &k,
            account_jwt(&k, |n| {
                n.signing_keys
                    .push(SigningKey::Scoped(Box::new(jwt::ScopedSigningKey {
                        kind: "user_scope".into(),
                        key: scoped.public_key(),
                        role: "r".into(),
                        template,
                    })));
            }),
        );
        let now = jwt::unix_now();
        let user = nkeys::KeyPair::new_user();
        let auth =
            |tok: &str| st.authenticate(tok, Some(&sign(&user, "n")), Some("n"), false, None, now);
        // No permissions or limits of its own: the template applies.
        let tok = user_jwt(&scoped, &user, |n| {
            n.issuer_account = k.acc.public_key();
            n.limits = Default::default();
        });
        let u = auth(&tok).unwrap();
        assert_eq!(u.max_subs, Some(3));
        let p = u.permissions.expect("template permissions");
        assert!(p.can_publish("scoped.x"));
        assert!(!p.can_publish("other"));
        // Its own permissions, or its own limits (even unlimited): refused.
        let tok = user_jwt(&scoped, &user, |n| {
            n.issuer_account = k.acc.public_key();
            n.limits = Default::default();
            n.limits.publish.allow = vec![">".into()];
        });
        assert!(matches!(auth(&tok), Err(JwtAuthError::ScopedUserLimits(_))));
        let tok = user_jwt(&scoped, &user, |n| n.issuer_account = k.acc.public_key());
        assert!(matches!(auth(&tok), Err(JwtAuthError::ScopedUserLimits(_))));
    }

    #[test]
    fn untrusted_account_and_updates() {
        let k = keys();
        let rogue = nkeys::KeyPair::new_operator();
        let bad = jwt::encode(
            &Claims {
                iss: rogue.public_key(),
                sub: k.acc.public_key(),
                nats: AccountNats {
                    kind: "account".into(),
                    version: 2,
                    ..Default::default()
                },
                ..Default::default()
            },
            &rogue,
        )
        .unwrap();
        let err = OperatorState::load(&OperatorConfig {
            operators: vec![k.op_jwt.clone()],
            resolver: ResolverConfig::Memory {
                preload: vec![(k.acc.public_key(), bad.clone())],
            },
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("not a trusted operator key"),
            "{err}"
        );

        let dir = tempfile::tempdir().unwrap();
        let load = || {
            OperatorState::load(&OperatorConfig {
                operators: vec![k.op_jwt.clone()],
                resolver: ResolverConfig::Dir {
                    full: true,
                    dir: dir.path().to_path_buf(),
                    allow_delete: false,
                    hard_delete: false,
                    limit: None,
                    ttl: None,
                    interval: None,
                    timeout: None,
                    preload: Vec::new(),
                },
                ..Default::default()
            })
            .unwrap()
        };
        let st = load();
        assert!(st.account(&k.acc.public_key()).is_none());
        let good = account_jwt(&k, |n| n.limits.conn = 1);
        let o = st.apply_update(None, good.as_bytes(), UpdateSource::Push, &|_| false);
        assert_eq!(o.result, Ok("jwt updated"));
        assert!(!o.changed);
        assert_eq!(st.max_connections(&k.acc.public_key()), Some(1));
        assert!(dir
            .path()
            .join(format!("{}.jwt", k.acc.public_key()))
            .exists());
        let o = st.apply_update(Some("AXXX"), good.as_bytes(), UpdateSource::Push, &|_| {
            false
        });
        assert!(o.result.is_err());
        let o = st.apply_update(None, bad.as_bytes(), UpdateSource::Push, &|_| false);
        assert_eq!(o.result.unwrap_err().0, "jwt validation failed");
        let o = st.apply_update(None, b"", UpdateSource::Push, &|_| false);
        assert_eq!(o.result.unwrap_err().0, "jwt update error");
        let newer = account_jwt(&k, |n| n.limits.conn = 3);
        let o = st.apply_update(
            Some(&k.acc.public_key()),
            newer.as_bytes(),
            UpdateSource::Push,
            &|_| false,
        );
        assert!(o.changed);
        assert_eq!(st.max_connections(&k.acc.public_key()), Some(3));
        // A restart reads the stored file.
        let again = load();
        assert_eq!(again.max_connections(&k.acc.public_key()), Some(3));

        // Issued earlier than the stored one: a catch-up leaves it, a push
        // applies it; the same JWT again changes nothing.
        let dated = |iat: i64, conn: i64| {
            let mut c = jwt::decode_account(&account_jwt(&k, |n| n.limits.conn = conn)).unwrap();
            c.iat = iat;
            jwt::encode(&c, &k.op).unwrap()
        };
        let now = jwt::unix_now();
        let (late, early) = (dated(now + 2_000, 5), dated(now + 1_000, 6));
        assert!(
            st.apply_update(None, late.as_bytes(), UpdateSource::PeerSync, &|_| false)
                .stored
        );
        let o = st.apply_update(None, early.as_bytes(), UpdateSource::PeerSync, &|_| false);
        assert_eq!((o.result, o.stored), (Ok("jwt updated"), false));
        assert_eq!(st.max_connections(&k.acc.public_key()), Some(5));
        assert!(
            st.apply_update(None, early.as_bytes(), UpdateSource::Push, &|_| false)
                .stored
        );
        assert_eq!(st.max_connections(&k.acc.public_key()), Some(6));
        assert!(
            !st.apply_update(None, early.as_bytes(), UpdateSource::Push, &|_| false)
                .stored
        );
        assert_eq!(st.sync_jwts(), vec![(k.acc.public_key(), early.clone())]);
    }

    #[test]
    fn min_limits() {
        assert_eq!(min_limit(-1, -1), None);
        assert_eq!(min_limit(-1, 4), Some(4));
        assert_eq!(min_limit(7, -1), Some(7));
        assert_eq!(min_limit(7, 4), Some(4));
        assert_eq!(min_limit(0, -1), Some(0));
    }
}
