//! Accounts: isolated subject spaces, and the stream and service
//! imports/exports that connect them (`spec/nats-parity.md` §1).
//!
//! Model. Every account owns one subscription index ([`Account::sublist`]);
//! a client belongs to exactly one account (the one of the user it
//! authenticated as, `$G` when accounts are not used) and its publishes are
//! matched against that account's index only. Messages cross accounts in
//! three ways, wired at start-up from the configuration, and again when
//! operator mode learns of a new or changed account JWT
//! ([`Accounts::update`]):
//!
//! - **stream import**: B imports `sub.>` from A (with `prefix: p` or
//!   `to`); a message published in A on `sub.x` is also delivered to B's
//!   subscribers of `p.sub.x`. Kept on the exporter as [`StreamOut`].
//! - **service import**: B imports service `req.x` from A as `local.x`; a
//!   publish in B on `local.x` is delivered to A's subscribers of `req.x`
//!   with the reply replaced by `_R_.<acc>.<rand>` (6 base62 characters
//!   each), remembered in A's response map. Kept on the importer as
//!   [`ServiceIn`].
//! - **response**: a publish in A on a remembered `_R_…` subject goes to
//!   B's subscribers of the original reply. A singleton mapping goes after
//!   the first response; a stream/chunked one when an empty message
//!   arrives; every mapping when its export's threshold (2 min by default)
//!   passes, or when the requester had no responder at all.
//!
//! Across routes (Go's model, so mixed clusters agree): imports are
//! applied on the node of the subscriber. A subscription in B covered by a
//! stream import announces interest in the exporter A on the exporter-side
//! subject ([`Account::import_interest`]); a message published in A
//! travels the route in A and the receiving node hands it to its own B
//! subscribers ([`deliver_in`]). A stream import's delivery to plain
//! subscribers therefore never leaves the node. A queue member of B joins
//! A's queue group of the same name (nats-server's shadow subscription,
//! [`Shadow`]): its node announces interest in A with the group's name, and
//! the node where the message is published picks one member of the merged
//! group cluster-wide — a local member, or a node, which gets the message
//! in A naming the group and picks one of its own members. A service
//! request travels in the exporter's
//! account with its `_R_` reply; every account that answers imported
//! services announces interest in its own `_R_.<prefix>.>`, so a reply
//! from a responder on another node comes back to the node holding the
//! mapping.
//!
//! One hop only: a message that arrived through an import is not passed
//! on through the importer's own exports (nats-server allows chains; we do
//! not build them).
//!
//! Bounded memory: each account keeps at most [`MAX_RESPONSES`] reply
//! mappings. When the map is full, expired mappings are dropped first, then
//! the oldest one (its requester times out, as it would had the responder
//! been slow). Nothing here blocks or awaits; locks are held only for map
//! operations.
//!
//! Must not: deliver a message of one account to another without an
//! import that covers it; carry the system account over routes; let a
//! leaf connection carry subjects of any account but the one it is bound
//! to (see `leaf`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::client::{
    self, ClientKind, ClientShared, FlushList, MsgRef, Origin, Shadow, Subscription,
};
use super::mapping::{Mapped, Mappings};
use super::server::ServerInner;
use super::subject::{intersects, is_subset, is_valid_literal_subject, is_valid_subject, matches};
use super::sublist::MatchResult;
use super::sublist::Sublist;
use crate::config::nats::{
    AccountConfig, AccountLimitsConfig, AuthConfig, ExportKind, MappingConfig, ResponseType,
};

/// The global account: every client when no accounts are configured, and
/// every user not declared inside an account.
pub const GLOBAL_ACCOUNT: &str = "$G";

/// The system account's name when the configuration names none.
pub const SYSTEM_ACCOUNT: &str = "$SYS";

/// Most reply mappings one account keeps (see the module doc for what
/// happens when it is full).
pub const MAX_RESPONSES: usize = 100_000;

/// Prefix of the reply subjects of service imports.
const RESPONSE_PREFIX: &str = "_R_.";

/// Errors of wiring accounts (nats-server's texts where it has one).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AccountError {
    /// An import or export names an account that is not configured.
    #[error("{account:?} account not defined for {what}")]
    NotDefined {
        /// The missing account.
        account: String,
        /// `stream export`, `service import`, …
        what: &'static str,
    },
    /// An import is not covered by an export of the exporter (or the
    /// export is private to other accounts).
    #[error("Error adding {what} import {subject:?}: {what} import not authorized")]
    NotAuthorized {
        /// `stream` or `service`.
        what: &'static str,
        /// The imported subject.
        subject: String,
    },
    /// A stream import prefix with wildcards.
    #[error(
        "Error adding stream import {0:?}: stream import prefix can not contain wildcard tokens"
    )]
    BadPrefix(String),
    /// An export or import subject (or `to`/`prefix`) is not a valid subject.
    #[error("Error adding {what} {subject:?}: invalid subject")]
    BadSubject {
        /// `stream export`, `service import`, …
        what: &'static str,
        /// The subject.
        subject: String,
    },
    /// `to` does not keep the wildcards of the imported subject.
    #[error("Error adding {what} import {subject:?}: {to:?} must have the same wildcards, in the same order, as {subject:?}")]
    BadMapping {
        /// `stream` or `service`.
        what: &'static str,
        /// The imported subject.
        subject: String,
        /// The local subject.
        to: String,
    },
    /// An account imports from itself.
    #[error("account {0:?} cannot import from itself")]
    SelfImport(String),
    /// A user names an account that is not configured.
    #[error("user {user:?}: account {account:?} is not configured")]
    UnknownUserAccount {
        /// The user name or nkey.
        user: String,
        /// Its account.
        account: String,
    },
    /// The in-process clients' account (`nats.account`) is not configured.
    #[error("nats.account: account {0:?} is not configured")]
    UnknownLocalAccount(String),
    /// A subject mapping that cannot be built.
    #[error("account {account:?}: {error}")]
    Mapping {
        /// The account (`$G` for the top-level `mappings`).
        account: String,
        error: super::mapping::MappingError,
    },
}

/// How an imported subject becomes the local one (or back).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mapping {
    /// The same subject.
    Identity,
    /// `prefix.` + subject.
    Prefix(String),
    /// The subject without a leading `prefix.` (the reverse of `Prefix`).
    Strip(String),
    /// Wildcard-positional rewrite: the tokens matched by the source
    /// pattern's wildcards fill the destination pattern's wildcards, in
    /// order.
    Transform { from: String, to: String },
}

impl Mapping {
    fn new(from: &str, to: &str) -> Mapping {
        if from == to {
            Mapping::Identity
        } else {
            Mapping::Transform {
                from: from.to_string(),
                to: to.to_string(),
            }
        }
    }

    /// Maps a literal `subject` (which matches the source pattern).
    fn apply(&self, subject: &str) -> String {
        match self {
            Mapping::Identity => subject.to_string(),
            Mapping::Prefix(p) => format!("{p}{subject}"),
            Mapping::Strip(p) => subject
                .strip_prefix(p.as_str())
                .unwrap_or(subject)
                .to_string(),
            Mapping::Transform { from, to } => {
                let mut caught: Vec<String> = Vec::new();
                let mut toks = subject.split('.');
                for f in from.split('.') {
                    match f {
                        "*" => caught.push(toks.next().unwrap_or("").to_string()),
                        ">" => {
                            let rest: Vec<&str> = toks.by_ref().collect();
                            caught.push(rest.join("."));
                        }
                        _ => {
                            toks.next();
                        }
                    }
                }
                let mut caught = caught.into_iter();
                to.split('.')
                    .map(|t| match t {
                        "*" | ">" => caught.next().unwrap_or_default(),
                        lit => lit.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(".")
            }
        }
    }
}

/// Whether `to` keeps the wildcards of `from` (same kinds, same order), so
/// a positional rewrite is defined.
fn same_wildcards(from: &str, to: &str) -> bool {
    fn wc(s: &str) -> Vec<&str> {
        s.split('.').filter(|t| *t == "*" || *t == ">").collect()
    }
    wc(from) == wc(to)
}

/// A stream another account imports from this one.
#[derive(Debug)]
struct StreamOut {
    /// The exporter-side subject pattern imported.
    subject: String,
    /// Index of the importing account.
    target: usize,
    /// Exporter subject → importer subject.
    map: Mapping,
}

/// A stream this account imports (kept on the importer too, for the
/// interest its subscriptions announce in the exporter over routes).
#[derive(Debug, PartialEq, Eq)]
struct StreamIn {
    /// Index of the exporting account.
    exporter: usize,
    /// The exporter-side subject pattern imported.
    from: String,
    /// The local subject pattern it arrives on.
    local: String,
    /// Local subject → exporter subject.
    back: Mapping,
}

/// A service this account imports.
#[derive(Debug)]
struct ServiceIn {
    /// The local subject pattern clients of this account publish to.
    local: String,
    /// Index of the exporting account.
    target: usize,
    /// Local subject → exporter subject.
    map: Mapping,
    response_type: ResponseType,
    threshold: Duration,
}

/// A pending reply of a service import, kept by the exporting account.
#[derive(Debug)]
struct Pending {
    /// Index of the requesting account.
    requester: usize,
    /// The requester's own reply subject.
    reply: Bytes,
    response_type: ResponseType,
    threshold: Duration,
    expires: Instant,
}

/// The reply mappings of one exporting account, with their ages in order.
#[derive(Debug, Default)]
struct Responses {
    map: HashMap<String, Pending>,
    /// Insertion order (subject, expiry at insertion); entries whose
    /// mapping is already gone or was refreshed are skipped when swept.
    order: VecDeque<(String, Instant)>,
}

impl Responses {
    /// Drops expired mappings from the front of `order`. A refreshed
    /// mapping (stream responses) is queued again with its new expiry;
    /// records of mappings already gone are dropped.
    fn sweep(&mut self, now: Instant) {
        while self.order.front().is_some_and(|(_, at)| *at <= now) {
            let Some((s, _)) = self.order.pop_front() else {
                break;
            };
            match self.map.get(&s) {
                Some(p) if p.expires <= now => {
                    self.map.remove(&s);
                }
                Some(p) => {
                    let at = p.expires;
                    self.order.push_back((s, at));
                }
                None => {}
            }
        }
        // Answered singletons leave their record behind until it expires;
        // under a high request rate that would be thousands per second
        // for the whole threshold. Keep `order` proportional to the map
        // (amortised: the retain runs after at least 1024 pushes).
        if self.order.len() > 2 * self.map.len() + 1024 {
            let map = &self.map;
            self.order
                .retain(|(s, at)| map.get(s).is_some_and(|p| p.expires == *at));
            // Refreshed mappings lost their record above: requeue them.
            let queued: std::collections::HashSet<&String> =
                self.order.iter().map(|(s, _)| s).collect();
            let missing: Vec<(String, Instant)> = self
                .map
                .iter()
                .filter(|(s, _)| !queued.contains(s))
                .map(|(s, p)| (s.clone(), p.expires))
                .collect();
            self.order.extend(missing);
        }
    }

    fn insert(&mut self, subject: String, p: Pending) {
        let now = Instant::now();
        self.sweep(now);
        while self.map.len() >= MAX_RESPONSES {
            match self.order.pop_front() {
                Some((s, _)) => {
                    self.map.remove(&s);
                }
                None => break,
            }
        }
        self.order.push_back((subject.clone(), p.expires));
        self.map.insert(subject, p);
    }
}

/// What connects one account to the others: its exports and imports as
/// configured, and the routes they imply. Replaced as a whole when the
/// accounts change at run time, so a publish sees either the old wiring or
/// the new one, never a mix.
#[derive(Debug, Default)]
struct Wiring {
    /// The configuration (exports and imports), for `/accountz`.
    config: AccountConfig,
    streams_out: Vec<StreamOut>,
    streams_in: Vec<StreamIn>,
    services_in: Vec<ServiceIn>,
    /// Another account imports a service of this one (its replies may
    /// come back over routes).
    serves_imports: bool,
}

impl Wiring {
    fn empty(name: &str) -> Wiring {
        Wiring {
            config: AccountConfig {
                name: name.to_string(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Whether a publish in this account may have to cross to another.
    fn has_routes(&self) -> bool {
        !self.streams_out.is_empty() || !self.services_in.is_empty()
    }

    /// The local subjects of the services this account imports.
    fn service_subjects(&self) -> Vec<String> {
        self.services_in.iter().map(|s| s.local.clone()).collect()
    }
}

/// One account.
pub struct Account {
    /// The account name (`$G` for the global account).
    pub name: String,
    /// Index in the server's account list (never reused: accounts are
    /// added at run time, not removed).
    pub(crate) idx: usize,
    /// The account's subscriptions.
    pub(crate) sublist: Sublist<Subscription>,
    wiring: ArcSwap<Wiring>,
    /// Its subject mappings; `mapped` says whether there are any (checked
    /// on every publish before the mappings are loaded).
    mappings: ArcSwap<Mappings>,
    mapped: AtomicBool,
    /// Its configured `limits` (operator mode takes them from the JWT).
    limits: Mutex<AccountLimitsConfig>,
    /// `_R_.<6 base62>.`: this account's reply prefix for service requests
    /// it answers.
    resp_prefix: String,
    responses: Mutex<Responses>,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account").field("name", &self.name).finish()
    }
}

impl Account {
    /// Whether a publish on `subject` in this account may reach another
    /// account (a stream export, a service import, or a reply to one).
    pub(crate) fn may_cross(&self, subject: &str) -> bool {
        subject.starts_with(RESPONSE_PREFIX) || self.wiring.load().has_routes()
    }

    fn new(idx: usize, name: &str) -> Account {
        Account {
            name: name.to_string(),
            idx,
            sublist: Sublist::new(),
            wiring: ArcSwap::from_pointee(Wiring::empty(name)),
            mappings: ArcSwap::from_pointee(Mappings::default()),
            mapped: AtomicBool::new(false),
            limits: Mutex::new(AccountLimitsConfig::default()),
            resp_prefix: format!("{RESPONSE_PREFIX}{}.", base62(6)),
            responses: Mutex::new(Responses::default()),
        }
    }

    /// Whether this is the global account.
    pub fn is_global(&self) -> bool {
        self.idx == 0
    }

    /// What this account's mappings do to a publish on `subject` (a
    /// client's or a leaf's) on `server`; `None` when none applies.
    pub(crate) fn map_subject(&self, server: &ServerInner, subject: &[u8]) -> Option<Mapped> {
        if !self.mapped.load(Ordering::Relaxed) {
            return None;
        }
        let subject = std::str::from_utf8(subject).ok()?;
        self.mappings
            .load()
            .select(subject, || server.routes.as_ref().map(|r| r.cluster_name()))
    }

    /// Its configured limits.
    pub(crate) fn limits(&self) -> AccountLimitsConfig {
        *self.limits.lock()
    }

    /// The sources of its mappings (announced to its leaves, which then
    /// send us what is published on them).
    pub(crate) fn mapping_sources(&self) -> Vec<String> {
        if !self.mapped.load(Ordering::Relaxed) {
            return Vec::new();
        }
        self.mappings.load().sources()
    }

    /// Puts `m` in force; returns the sources before and after.
    fn set_mappings(&self, m: Mappings) -> (Vec<String>, Vec<String>) {
        let new = m.sources();
        self.mapped.store(!m.is_empty(), Ordering::Relaxed);
        let old = self.mappings.swap(Arc::new(m));
        (old.sources(), new)
    }

    /// The interest a subscription of this account on `subject` implies
    /// in exporters' accounts through stream imports: (exporter index,
    /// exporter-side subject). A subject inside an import's local pattern
    /// maps back exactly; a wider or overlapping one asks for the whole
    /// import (more than needed is harmless: the receiving node matches
    /// its own subscribers).
    pub(crate) fn import_interest(&self, subject: &str) -> Vec<ImportInterest> {
        import_interest(&self.wiring.load(), subject)
    }

    /// The subject of the interest this account announces for replies of
    /// services others import (`None` when nobody imports one).
    pub(crate) fn response_interest(&self) -> Option<String> {
        response_interest(&self.resp_prefix, &self.wiring.load())
    }

    /// The local subjects of the services this account imports: a leaf
    /// connection bound to it is told of interest in them, so requests on
    /// them come over the leaf to be served here.
    pub(crate) fn service_import_subjects(&self) -> Vec<String> {
        self.wiring.load().service_subjects()
    }

    /// Number of reply mappings kept (for `/accountz`).
    pub fn num_responses(&self) -> usize {
        self.responses.lock().map.len()
    }
}

/// See [`Account::import_interest`].
fn import_interest(w: &Wiring, subject: &str) -> Vec<ImportInterest> {
    let mut out = Vec::new();
    for s in &w.streams_in {
        if subject == s.local || is_subset(&s.local, subject) {
            out.push((s.exporter, s.from.clone()));
        } else if is_subset(subject, &s.local) {
            out.push((s.exporter, s.back.apply(subject)));
        } else if intersects(subject, &s.local) {
            out.push((s.exporter, s.from.clone()));
        }
    }
    out
}

fn response_interest(resp_prefix: &str, w: &Wiring) -> Option<String> {
    w.serves_imports.then(|| format!("{resp_prefix}>"))
}

/// `n` random base62 characters.
fn base62(n: usize) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..n)
        .map(|_| ALPHABET[rand::random::<usize>() % ALPHABET.len()] as char)
        .collect()
}

/// Every account of a server: `$G` first (index 0), the system account,
/// then the configured ones in file order; accounts learnt at run time
/// (operator mode, a reloaded configuration) are appended. A slot is never
/// reused, so an index stays valid; a removed account only leaves the
/// name index.
pub struct Accounts {
    global: Arc<Account>,
    table: ArcSwap<Table>,
    /// Whether the configuration declares accounts (`$SYS` alone does not
    /// count).
    configured: bool,
    /// Serialises [`Accounts::update`].
    update: Mutex<()>,
}

/// The account list and its name index, replaced as a whole.
#[derive(Default)]
struct Table {
    list: Vec<Arc<Account>>,
    by_name: HashMap<String, usize>,
}

impl Table {
    /// Whether `a` is an account of the table, not one removed.
    fn live(&self, a: &Account) -> bool {
        self.by_name.get(&a.name) == Some(&a.idx)
    }

    fn push(&mut self, name: &str) {
        let idx = self.list.len();
        self.by_name.insert(name.to_string(), idx);
        self.list.push(Arc::new(Account::new(idx, name)));
    }
}

/// Interest a subscription implies in an exporter's account through a
/// stream import: (exporter index, exporter-side subject).
pub(crate) type ImportInterest = (usize, String);

/// An account whose mappings changed in [`Accounts::update`], with their
/// sources before and after.
pub(crate) type Remapped = (Arc<Account>, Vec<String>, Vec<String>);

/// An account whose imports changed in [`Accounts::update`], with its
/// wiring before and after (to move the interest it announces).
pub(crate) struct Rewired {
    pub(crate) account: Arc<Account>,
    old: Arc<Wiring>,
    new: Arc<Wiring>,
}

impl Rewired {
    /// The exporter-side interest of a subscription on `subject` under
    /// the old and the new imports.
    pub(crate) fn import_interest(
        &self,
        subject: &str,
    ) -> (Vec<ImportInterest>, Vec<ImportInterest>) {
        (
            import_interest(&self.old, subject),
            import_interest(&self.new, subject),
        )
    }

    /// The service import subjects before and after.
    pub(crate) fn service_subjects(&self) -> (Vec<String>, Vec<String>) {
        (self.old.service_subjects(), self.new.service_subjects())
    }

    /// The reply interest before and after.
    pub(crate) fn response_interest(&self) -> (Option<String>, Option<String>) {
        let p = &self.account.resp_prefix;
        (
            response_interest(p, &self.old),
            response_interest(p, &self.new),
        )
    }
}

impl Accounts {
    /// Builds the accounts of `auth` and wires their imports and exports.
    pub fn new(auth: &AuthConfig) -> Result<Accounts, AccountError> {
        check(&auth.accounts)?;
        let mut table = Table::default();
        table.push(GLOBAL_ACCOUNT);
        // As nats-server, a system account exists even when not declared
        // (it has no users then, and we publish no system events in it).
        if !auth.accounts.iter().any(|a| a.name == SYSTEM_ACCOUNT) {
            table.push(SYSTEM_ACCOUNT);
        }
        for a in &auth.accounts {
            table.push(&a.name);
        }
        for (user, account) in auth
            .users
            .iter()
            .map(|u| (&u.username, &u.account))
            .chain(auth.nkeys.iter().map(|u| (&u.nkey, &u.account)))
        {
            if let Some(a) = account {
                if !table.by_name.contains_key(a) {
                    return Err(AccountError::UnknownUserAccount {
                        user: user.clone(),
                        account: a.clone(),
                    });
                }
            }
        }
        for (acc, w) in table.list.iter().zip(wire(&table, &auth.accounts)) {
            acc.wiring.store(Arc::new(w));
        }
        table.list[0].set_mappings(compile_mappings(GLOBAL_ACCOUNT, &auth.mappings)?);
        for (name, m) in account_mappings(&auth.accounts)? {
            if let Some(&i) = table.by_name.get(&name) {
                table.list[i].set_mappings(m);
            }
        }
        for c in &auth.accounts {
            if let Some(&i) = table.by_name.get(&c.name) {
                *table.list[i].limits.lock() = c.limits;
            }
        }
        Ok(Accounts {
            global: table.list[0].clone(),
            table: ArcSwap::from_pointee(table),
            configured: !auth.accounts.is_empty(),
            update: Mutex::new(()),
        })
    }

    /// Replaces the accounts' exports and imports with `accounts` (every
    /// account but `$G`), adding the accounts not known yet. An account
    /// left out loses its exports and imports; with `remove_missing` (a
    /// reloaded configuration, which lists every account) it is also
    /// removed: no longer found by name (connections, routes and leaves
    /// naming it are refused or ignored as for any unknown account) nor
    /// listed. Its slot stays, empty of exports and imports, so indexes
    /// held elsewhere stay valid; a later account of the same name gets a
    /// new slot. `$G` and `$SYS` are never removed. Returns the accounts
    /// whose imports or served exports changed, and those whose mappings'
    /// sources changed; the caller moves the interest they announce over
    /// routes and leaves.
    pub(crate) fn update(
        &self,
        accounts: &[AccountConfig],
        remove_missing: bool,
    ) -> Result<(Vec<Rewired>, Vec<Remapped>), AccountError> {
        check(accounts)?;
        let mut mappings = account_mappings(accounts)?;
        let _one = self.update.lock();
        let old = self.table.load_full();
        let mut table = Table {
            list: old.list.clone(),
            by_name: old.by_name.clone(),
        };
        for a in accounts {
            if !table.by_name.contains_key(&a.name) {
                tracing::info!(account = %a.name, "account added");
                table.push(&a.name);
            }
        }
        if remove_missing {
            table.by_name.retain(|name, _| {
                let keep = name == GLOBAL_ACCOUNT
                    || name == SYSTEM_ACCOUNT
                    || accounts.iter().any(|a| &a.name == name);
                if !keep {
                    tracing::info!(account = %name, "account removed");
                }
                keep
            });
        }
        let wirings = wire(&table, accounts);
        let list = table.list.clone();
        // The new accounts must be reachable by index before any wiring
        // names them.
        self.table.store(Arc::new(table));
        let mut out = Vec::new();
        let mut remapped = Vec::new();
        for (acc, w) in list.into_iter().zip(wirings) {
            if !acc.is_global() {
                *acc.limits.lock() = accounts
                    .iter()
                    .find(|c| c.name == acc.name)
                    .map(|c| c.limits)
                    .unwrap_or_default();
                let (old, new) = acc.set_mappings(mappings.remove(&acc.name).unwrap_or_default());
                if old != new {
                    remapped.push((acc.clone(), old, new));
                }
            }
            let new = Arc::new(w);
            let old = acc.wiring.swap(new.clone());
            if old.streams_in != new.streams_in
                || old.serves_imports != new.serves_imports
                || old.service_subjects() != new.service_subjects()
            {
                out.push(Rewired {
                    account: acc,
                    old,
                    new,
                });
            }
        }
        Ok((out, remapped))
    }

    /// The global account.
    pub fn global(&self) -> &Arc<Account> {
        &self.global
    }

    /// Replaces the global account's mappings (the top-level `mappings`).
    /// Returns the mappings' sources before and after.
    pub(crate) fn set_global_mappings(
        &self,
        m: &[MappingConfig],
    ) -> Result<(Vec<String>, Vec<String>), AccountError> {
        Ok(self
            .global
            .set_mappings(compile_mappings(GLOBAL_ACCOUNT, m)?))
    }

    /// The account called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Account>> {
        let t = self.table.load();
        t.by_name.get(name).map(|&i| t.list[i].clone())
    }

    /// Every account, `$G` first (removed ones left out).
    pub fn all(&self) -> Vec<Arc<Account>> {
        let t = self.table.load();
        t.list.iter().filter(|a| t.live(a)).cloned().collect()
    }

    /// Whether accounts other than `$G` are configured.
    pub fn configured(&self) -> bool {
        self.configured
    }

    /// Subscriptions of every account.
    pub fn num_subscriptions(&self) -> u64 {
        let t = self.table.load();
        t.list
            .iter()
            .filter(|a| t.live(a))
            .map(|a| a.sublist.count())
            .sum()
    }

    pub(crate) fn at(&self, idx: usize) -> Option<Arc<Account>> {
        self.table.load().list.get(idx).cloned()
    }
}

/// The wiring of every account of `table` from `configs` (accounts
/// without a config get none): a stream import lives on the exporter (it
/// fans out from there) and on the importer (for the interest its
/// subscriptions announce), a service import on the importer. `configs`
/// passed [`check`].
fn compile_mappings(account: &str, m: &[MappingConfig]) -> Result<Mappings, AccountError> {
    Mappings::new(m).map_err(|error| AccountError::Mapping {
        account: account.to_string(),
        error,
    })
}

/// Each account's compiled mappings, by name.
fn account_mappings(configs: &[AccountConfig]) -> Result<HashMap<String, Mappings>, AccountError> {
    configs
        .iter()
        .map(|c| Ok((c.name.clone(), compile_mappings(&c.name, &c.mappings)?)))
        .collect()
}

fn wire(table: &Table, configs: &[AccountConfig]) -> Vec<Wiring> {
    let mut out: Vec<Wiring> = table
        .list
        .iter()
        .map(|a| {
            configs.iter().find(|c| c.name == a.name).map_or_else(
                || Wiring::empty(&a.name),
                |c| Wiring {
                    config: c.clone(),
                    ..Default::default()
                },
            )
        })
        .collect();
    for importer in 1..out.len() {
        let imports = out[importer].config.imports.clone();
        for imp in imports {
            let Some(&exporter) = table.by_name.get(&imp.account) else {
                continue; // `check` reported it already
            };
            match imp.kind {
                ExportKind::Stream => {
                    let (map, local, back) = match (&imp.prefix, &imp.to) {
                        (Some(p), _) => {
                            let p = format!("{}.", p.trim_end_matches('.'));
                            let local = format!("{p}{}", imp.subject);
                            (Mapping::Prefix(p.clone()), local, Mapping::Strip(p))
                        }
                        (None, Some(to)) => (
                            Mapping::new(&imp.subject, to),
                            to.clone(),
                            Mapping::new(to, &imp.subject),
                        ),
                        (None, None) => (Mapping::Identity, imp.subject.clone(), Mapping::Identity),
                    };
                    out[importer].streams_in.push(StreamIn {
                        exporter,
                        from: imp.subject.clone(),
                        local,
                        back,
                    });
                    out[exporter].streams_out.push(StreamOut {
                        subject: imp.subject.clone(),
                        target: importer,
                        map,
                    });
                }
                ExportKind::Service => {
                    let local = imp.to.clone().unwrap_or_else(|| imp.subject.clone());
                    let export = out[exporter].config.exports.iter().find(|e| {
                        e.kind == ExportKind::Service && is_subset(&imp.subject, &e.subject)
                    });
                    let (response_type, threshold) = export.map_or(
                        (
                            ResponseType::Singleton,
                            crate::config::nats::DEFAULT_RESPONSE_THRESHOLD,
                        ),
                        |e| (e.response_type, e.response_threshold),
                    );
                    let map = Mapping::new(&local, &imp.subject);
                    out[exporter].serves_imports = true;
                    out[importer].services_in.push(ServiceIn {
                        local,
                        target: exporter,
                        map,
                        response_type,
                        threshold,
                    });
                }
            }
        }
    }
    out
}

/// Checks the wiring of configured accounts: every named account exists,
/// subjects are valid, and every import is covered by an export of its
/// exporter that allows the importer (nats-server's messages).
pub fn check(accounts: &[AccountConfig]) -> Result<(), AccountError> {
    let known = |n: &str| accounts.iter().any(|a| a.name == n);
    for a in accounts {
        for e in &a.exports {
            let what = match e.kind {
                ExportKind::Stream => "stream export",
                ExportKind::Service => "service export",
            };
            if !is_valid_subject(&e.subject) {
                return Err(AccountError::BadSubject {
                    what,
                    subject: e.subject.clone(),
                });
            }
            if let Some(missing) = e.accounts.iter().find(|n| !known(n)) {
                return Err(AccountError::NotDefined {
                    account: missing.clone(),
                    what,
                });
            }
        }
    }
    for a in accounts {
        for imp in &a.imports {
            let (what, import_what) = match imp.kind {
                ExportKind::Stream => ("stream", "stream import"),
                ExportKind::Service => ("service", "service import"),
            };
            let Some(exporter) = accounts.iter().find(|x| x.name == imp.account) else {
                return Err(AccountError::NotDefined {
                    account: imp.account.clone(),
                    what: import_what,
                });
            };
            if exporter.name == a.name {
                return Err(AccountError::SelfImport(a.name.clone()));
            }
            if !is_valid_subject(&imp.subject) {
                return Err(AccountError::BadSubject {
                    what: import_what,
                    subject: imp.subject.clone(),
                });
            }
            if let Some(p) = &imp.prefix {
                let p = p.trim_end_matches('.');
                if !is_valid_subject(p) {
                    return Err(AccountError::BadSubject {
                        what: import_what,
                        subject: p.to_string(),
                    });
                }
                if !is_valid_literal_subject(p) {
                    return Err(AccountError::BadPrefix(imp.subject.clone()));
                }
            }
            if let Some(to) = &imp.to {
                if !is_valid_subject(to) {
                    return Err(AccountError::BadSubject {
                        what: import_what,
                        subject: to.clone(),
                    });
                }
                if !same_wildcards(&imp.subject, to) {
                    return Err(AccountError::BadMapping {
                        what,
                        subject: imp.subject.clone(),
                        to: to.clone(),
                    });
                }
            }
            let authorized = exporter.exports.iter().any(|e| {
                e.kind == imp.kind
                    && is_subset(&imp.subject, &e.subject)
                    && (e.accounts.is_empty() || e.accounts.contains(&a.name))
            });
            if !authorized {
                return Err(AccountError::NotAuthorized {
                    what,
                    subject: imp.subject.clone(),
                });
            }
        }
    }
    Ok(())
}

/// One stream import a message feeds: the subject it has in the
/// importing account and the importer's subscriptions on it.
pub(crate) struct StreamMatch {
    subject: Bytes,
    result: Arc<MatchResult<Subscription>>,
}

/// The stream imports (of `wiring`, an account's) a message on `subject`
/// feeds.
fn stream_matches(server: &ServerInner, wiring: &Wiring, subject: &str) -> Vec<StreamMatch> {
    wiring
        .streams_out
        .iter()
        .filter(|s| matches(&s.subject, subject))
        .filter_map(|s| {
            let target = server.accounts.at(s.target)?;
            let mapped = s.map.apply(subject);
            let result = target.sublist.match_subject(&mapped);
            Some(StreamMatch {
                subject: Bytes::from(mapped),
                result,
            })
        })
        .collect()
}

/// The importers' queue members the stream imports feed (see
/// [`Shadow`]): local clients and leaf connections; a member behind a
/// route is reached through its node's interest in the exporter.
fn shadows(streams: &[StreamMatch]) -> Vec<Shadow> {
    let mut out = Vec::new();
    for m in streams {
        for (queue, members) in &m.result.qsubs {
            for sub in members {
                if sub.client.kind != ClientKind::Route {
                    out.push(Shadow {
                        queue: queue.clone(),
                        sub: sub.clone(),
                        subject: m.subject.clone(),
                    });
                }
            }
        }
    }
    out
}

/// Delivers a message of `acc` to the account's own subscribers
/// (`result`, as [`client::deliver`] with `origin`) and to the other
/// accounts it reaches through imports (see the module doc): the
/// importers' queue members join the account's queue groups of the same
/// name. Returns how many subscriptions received it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn deliver_in(
    server: &ServerInner,
    acc: &Account,
    publisher: &Arc<ClientShared>,
    echo: bool,
    msg: &MsgRef<'_>,
    result: &MatchResult<Subscription>,
    flush: &mut FlushList,
    origin: Origin<'_>,
) -> usize {
    // The wiring is loaded and the subject checked once per message; an
    // account without imports or exports (and not a reply to one) costs
    // nothing more than the plain delivery.
    let wiring = acc.wiring.load();
    let resp = msg.subject.starts_with(RESPONSE_PREFIX.as_bytes());
    let subject = if resp || wiring.has_routes() {
        std::str::from_utf8(msg.subject).ok()
    } else {
        None
    };
    let Some(subject) = subject else {
        return client::deliver(server, publisher, echo, msg, result, flush, origin, &[]);
    };
    let streams = stream_matches(server, &wiring, subject);
    let shadows = shadows(&streams);
    let n = client::deliver(
        server, publisher, echo, msg, result, flush, origin, &shadows,
    );
    let imports = Imports {
        wiring: &wiring,
        subject,
        resp,
        from_peer: matches!(origin, Origin::Route(_)),
        streams: &streams,
    };
    n + deliver_imports(server, acc, publisher, msg, flush, &imports)
}

/// What [`deliver_in`] learnt of a message for [`deliver_imports`].
struct Imports<'a> {
    /// The publishing account's wiring.
    wiring: &'a Wiring,
    /// The message's subject (valid UTF-8).
    subject: &'a str,
    /// The subject is a reply to a service import.
    resp: bool,
    /// The message arrived over a route.
    from_peer: bool,
    /// The stream imports it feeds.
    streams: &'a [StreamMatch],
}

/// The imports' share of [`deliver_in`]: the plain subscribers of the
/// stream imports, and, unless the message arrived over a route, the
/// service imports; replies to this node's service requests either way.
/// A service import is applied by the node of the requester, which
/// already sent the request on in the exporter's account.
fn deliver_imports(
    server: &ServerInner,
    acc: &Account,
    publisher: &Arc<ClientShared>,
    msg: &MsgRef<'_>,
    flush: &mut FlushList,
    imp: &Imports<'_>,
) -> usize {
    let Imports {
        wiring,
        subject,
        resp,
        from_peer,
        streams,
    } = *imp;
    let mut n = 0;
    if resp {
        n += deliver_response(server, acc, publisher, subject, msg, flush);
    }
    for s in streams {
        let m = MsgRef {
            subject: &s.subject,
            reply: msg.reply,
            headers: msg.headers,
            payload: msg.payload,
        };
        n += client::deliver(
            server,
            publisher,
            true,
            &m,
            &s.result,
            flush,
            Origin::Import,
            &[],
        );
    }
    if from_peer {
        return n;
    }
    // A subject reaches at most one service (the first import that
    // covers it), as one request must get one set of answers.
    if let Some(s) = wiring
        .services_in
        .iter()
        .find(|s| matches(&s.local, subject))
    {
        if let Some(target) = server.accounts.at(s.target) {
            let mapped = s.map.apply(subject);
            // As nats-server, the exporter's own mappings apply to the
            // request's subject in its account.
            let mapped = match target.map_subject(server, mapped.as_bytes()) {
                None => mapped,
                Some(Mapped::To(m)) => m,
                Some(Mapped::Dropped) => return n,
            };
            let result = target.sublist.match_subject(&mapped);
            let mapped = Bytes::from(mapped);
            let reply = msg.reply.map(|r| {
                let new = new_reply(&target, acc.idx, r, s.response_type, s.threshold);
                (new.clone(), Bytes::from(new))
            });
            let m = MsgRef {
                subject: &mapped,
                reply: reply.as_ref().map(|(_, b)| b),
                headers: msg.headers,
                payload: msg.payload,
            };
            let got = deliver_mapped(server, publisher, &m, &result, flush);
            if got == 0 {
                // Nobody to answer: forget the mapping now rather than at
                // its threshold.
                if let Some((key, _)) = &reply {
                    target.responses.lock().map.remove(key);
                }
            }
            n += got;
        }
    }
    n
}

/// Remembers a reply mapping in the exporting account `target` and
/// returns the new reply subject.
fn new_reply(
    target: &Account,
    requester: usize,
    reply: &Bytes,
    response_type: ResponseType,
    threshold: Duration,
) -> String {
    let mut r = target.responses.lock();
    let mut subject = format!("{}{}", target.resp_prefix, base62(6));
    // 62^6 possibilities: a clash is rare, but must not merge two requests.
    while r.map.contains_key(&subject) {
        subject = format!("{}{}", target.resp_prefix, base62(6));
    }
    r.insert(
        subject.clone(),
        Pending {
            requester,
            reply: reply.clone(),
            response_type,
            threshold,
            expires: Instant::now() + threshold,
        },
    );
    subject
}

/// A publish in `acc` on an `_R_…` subject: the answer to a request that
/// came through a service import.
fn deliver_response(
    server: &ServerInner,
    acc: &Account,
    publisher: &Arc<ClientShared>,
    subject: &str,
    msg: &MsgRef<'_>,
    flush: &mut FlushList,
) -> usize {
    let now = Instant::now();
    let (requester, reply) = {
        let mut r = acc.responses.lock();
        let Some(p) = r.map.get_mut(subject) else {
            return 0;
        };
        if p.expires <= now {
            r.map.remove(subject);
            return 0;
        }
        let out = (p.requester, p.reply.clone());
        let done = match p.response_type {
            ResponseType::Singleton => true,
            ResponseType::Stream | ResponseType::Chunked => {
                let empty = msg.payload.is_empty()
                    && msg
                        .headers
                        .is_none_or(|h| h.len() <= b"NATS/1.0\r\n\r\n".len());
                if !empty {
                    // Requeued by the next sweep that meets its old record.
                    p.expires = now + p.threshold;
                }
                empty
            }
        };
        if done {
            r.map.remove(subject);
        }
        out
    };
    let Some(target) = server.accounts.at(requester) else {
        return 0;
    };
    let Ok(reply_s) = std::str::from_utf8(&reply) else {
        return 0;
    };
    let result = target.sublist.match_subject(reply_s);
    let m = MsgRef {
        subject: &reply,
        reply: msg.reply,
        headers: msg.headers,
        payload: msg.payload,
    };
    deliver_mapped(server, publisher, &m, &result, flush)
}

/// Delivers a message mapped into another account (a service request or
/// its response) to that account's subscribers, as a client's publish.
fn deliver_mapped(
    server: &ServerInner,
    publisher: &Arc<ClientShared>,
    m: &MsgRef<'_>,
    result: &MatchResult<Subscription>,
    flush: &mut FlushList,
) -> usize {
    client::deliver(
        server,
        publisher,
        true,
        m,
        result,
        flush,
        Origin::Client,
        &[],
    )
}

/// `/accountz`: the account names, or with `acc=NAME` that account's
/// detail (nats-server's fields; `Err` = unknown account, HTTP 400).
pub(crate) fn accountz_json(server: &ServerInner, query: &str) -> Result<Value, String> {
    let acc = query
        .trim_start_matches('?')
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == "acc")
        .map(|(_, v)| v.to_string())
        .filter(|v| !v.is_empty());
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let mut out = json!({
        "server_id": server.server_id,
        "now": now,
        "system_account": SYSTEM_ACCOUNT,
    });
    let Some(name) = acc else {
        let names: Vec<String> = server
            .accounts
            .all()
            .iter()
            .map(|a| a.name.clone())
            .collect();
        out["accounts"] = json!(names);
        return Ok(out);
    };
    let Some(a) = server.accounts.get(&name) else {
        return Err(format!("Account {name} does not exist"));
    };
    let clients = server
        .clients
        .lock()
        .values()
        .filter(|c| !c.kind.is_peer() && c.kind != client::ClientKind::Local)
        .filter(|c| Arc::ptr_eq(server.account_of(c), &a))
        .count();
    let wiring = a.wiring.load();
    let exports: Vec<Value> = wiring
        .config
        .exports
        .iter()
        .map(|e| {
            let mut v = json!({
                "subject": e.subject,
                "type": kind_name(e.kind),
                "approved_accounts": e.accounts,
            });
            if e.kind == ExportKind::Service {
                v["response_type"] = json!(match e.response_type {
                    ResponseType::Singleton => "Singleton",
                    ResponseType::Stream => "Stream",
                    ResponseType::Chunked => "Chunked",
                });
                v["response_threshold"] = json!(e.response_threshold.as_nanos() as u64);
            }
            v
        })
        .collect();
    let imports: Vec<Value> = wiring
        .config
        .imports
        .iter()
        .map(|i| {
            let local = match (i.kind, &i.prefix, &i.to) {
                (ExportKind::Stream, Some(p), _) => {
                    format!("{}.{}", p.trim_end_matches('.'), i.subject)
                }
                (_, None, Some(to)) => to.clone(),
                _ => i.subject.clone(),
            };
            let mut v = json!({
                "subject": i.subject,
                "account": i.account,
                "local_subject": local,
                "type": kind_name(i.kind),
                "invalid": false,
                "share": false,
                "tracking": false,
            });
            if i.kind == ExportKind::Service {
                // The deprecated jwt.Import field nats-server still fills.
                v["to"] = json!(local);
            }
            v
        })
        .collect();
    let stats = a.sublist.stats();
    out["account_detail"] = json!({
        "account_name": a.name,
        "is_system": a.name == SYSTEM_ACCOUNT,
        "update_time": server.start.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        "expired": false,
        "complete": true,
        "jetstream_enabled": false,
        "leafnode_connections": 0,
        "client_connections": clients,
        "subscriptions": a.sublist.count(),
        "exports": exports,
        "imports": imports,
        "sublist_stats": stats,
        "responses_pending": a.num_responses(),
    });
    Ok(out)
}

fn kind_name(k: ExportKind) -> &'static str {
    match k {
        ExportKind::Stream => "stream",
        ExportKind::Service => "service",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::nats::{ExportConfig, ImportConfig, DEFAULT_RESPONSE_THRESHOLD};

    fn export(kind: ExportKind, subject: &str, accounts: &[&str]) -> ExportConfig {
        ExportConfig {
            kind,
            subject: subject.into(),
            accounts: accounts.iter().map(|s| s.to_string()).collect(),
            response_type: ResponseType::Singleton,
            response_threshold: DEFAULT_RESPONSE_THRESHOLD,
        }
    }

    fn import(kind: ExportKind, account: &str, subject: &str) -> ImportConfig {
        ImportConfig {
            kind,
            account: account.into(),
            subject: subject.into(),
            prefix: None,
            to: None,
        }
    }

    fn acc(name: &str, exports: Vec<ExportConfig>, imports: Vec<ImportConfig>) -> AccountConfig {
        AccountConfig {
            name: name.into(),
            exports,
            imports,
            mappings: Vec::new(),
            limits: Default::default(),
        }
    }

    #[test]
    fn imports_must_be_covered_by_an_export() {
        let a = acc(
            "A",
            vec![
                export(ExportKind::Stream, "pub.>", &[]),
                export(ExportKind::Service, "req.*", &["B"]),
            ],
            vec![],
        );
        let ok = acc(
            "B",
            vec![],
            vec![
                import(ExportKind::Stream, "A", "pub.x.>"),
                import(ExportKind::Service, "A", "req.one"),
            ],
        );
        assert_eq!(check(&[a.clone(), ok]), Ok(()));
        // A stream import of a subject only exported as a service.
        let bad = acc(
            "B",
            vec![],
            vec![import(ExportKind::Stream, "A", "req.one")],
        );
        assert_eq!(
            check(&[a.clone(), bad]).unwrap_err().to_string(),
            "Error adding stream import \"req.one\": stream import not authorized"
        );
        // A private export the importer is not listed in.
        let c = acc("C", vec![], vec![import(ExportKind::Service, "A", "req.x")]);
        assert_eq!(
            check(&[a.clone(), acc("B", vec![], vec![]), c])
                .unwrap_err()
                .to_string(),
            "Error adding service import \"req.x\": service import not authorized"
        );
        let missing = acc("B", vec![], vec![import(ExportKind::Stream, "Z", "x")]);
        let a = acc("A", vec![export(ExportKind::Stream, "pub.>", &[])], vec![]);
        assert_eq!(
            check(&[a, missing]).unwrap_err().to_string(),
            "\"Z\" account not defined for stream import"
        );
    }

    #[test]
    fn prefix_and_to_are_validated() {
        let a = acc("A", vec![export(ExportKind::Stream, ">", &[])], vec![]);
        let mut i = import(ExportKind::Stream, "A", "x.>");
        i.prefix = Some("p.*".into());
        let e = check(&[a.clone(), acc("B", vec![], vec![i])]).unwrap_err();
        assert!(matches!(e, AccountError::BadPrefix(_)), "{e}");
        let mut i = import(ExportKind::Stream, "A", "x.*");
        i.to = Some("y.>".into());
        let e = check(&[a, acc("B", vec![], vec![i])]).unwrap_err();
        assert!(matches!(e, AccountError::BadMapping { .. }), "{e}");
    }

    #[test]
    fn mappings_rewrite_wildcards_in_order() {
        assert_eq!(Mapping::Prefix("p.".into()).apply("a.b"), "p.a.b");
        let m = Mapping::new("req.*.x.>", "local.*.>");
        assert_eq!(m.apply("req.one.x.two.three"), "local.one.two.three");
        assert_eq!(Mapping::new("a.b", "c").apply("a.b"), "c");
        assert_eq!(Mapping::Identity.apply("a.b"), "a.b");
    }

    #[test]
    fn responses_are_bounded_and_expire() {
        let mut r = Responses::default();
        let past = Instant::now() - Duration::from_secs(1);
        for i in 0..10 {
            r.insert(
                format!("_R_.x.{i}"),
                Pending {
                    requester: 1,
                    reply: Bytes::from_static(b"inbox"),
                    response_type: ResponseType::Singleton,
                    threshold: Duration::ZERO,
                    expires: past,
                },
            );
        }
        // The next insert sweeps every expired mapping.
        r.insert(
            "_R_.x.live".into(),
            Pending {
                requester: 1,
                reply: Bytes::from_static(b"inbox"),
                response_type: ResponseType::Singleton,
                threshold: Duration::from_secs(60),
                expires: Instant::now() + Duration::from_secs(60),
            },
        );
        assert_eq!(r.map.len(), 1);
        assert!(r.map.contains_key("_R_.x.live"));
        // At the bound, the oldest live mapping makes room.
        for i in 0..MAX_RESPONSES {
            r.insert(
                format!("_R_.y.{i}"),
                Pending {
                    requester: 1,
                    reply: Bytes::from_static(b"inbox"),
                    response_type: ResponseType::Singleton,
                    threshold: Duration::from_secs(60),
                    expires: Instant::now() + Duration::from_secs(60),
                },
            );
        }
        assert_eq!(r.map.len(), MAX_RESPONSES);
        assert!(!r.map.contains_key("_R_.x.live"));
    }

    #[test]
    fn answered_mappings_do_not_pile_up_in_the_order_queue() {
        let mut r = Responses::default();
        for i in 0..10_000 {
            let key = format!("_R_.x.{i}");
            r.insert(
                key.clone(),
                Pending {
                    requester: 1,
                    reply: Bytes::from_static(b"inbox"),
                    response_type: ResponseType::Singleton,
                    threshold: Duration::from_secs(120),
                    expires: Instant::now() + Duration::from_secs(120),
                },
            );
            // Answered at once, as a singleton is.
            r.map.remove(&key);
        }
        assert!(r.map.is_empty());
        assert!(r.order.len() <= 1024 + 1, "{}", r.order.len());
    }

    #[test]
    fn subscriptions_under_a_stream_import_ask_the_exporter_over_routes() {
        let a = acc("A", vec![export(ExportKind::Stream, "pub.>", &[])], vec![]);
        let mut prefixed = import(ExportKind::Stream, "A", "pub.>");
        prefixed.prefix = Some("froma".into());
        let mut mapped = import(ExportKind::Stream, "A", "pub.*.x");
        mapped.to = Some("mine.*".into());
        let b = acc("B", vec![], vec![prefixed, mapped]);
        let auth = AuthConfig {
            accounts: vec![a, b],
            ..Default::default()
        };
        let accounts = Accounts::new(&auth).unwrap();
        let ia = accounts.get("A").unwrap().idx;
        let b = accounts.get("B").unwrap();
        let want = |v: &[&str]| -> Vec<(usize, String)> {
            v.iter().map(|s| (ia, s.to_string())).collect()
        };
        // Inside the prefixed import: mapped back exactly.
        assert_eq!(b.import_interest("froma.pub.x"), want(&["pub.x"]));
        // The import's own pattern, or wider: the whole import.
        assert_eq!(b.import_interest("froma.pub.>"), want(&["pub.>"]));
        assert_eq!(b.import_interest(">"), want(&["pub.>", "pub.*.x"]));
        // Through a `to` rewrite, back to the exporter's subject.
        assert_eq!(b.import_interest("mine.k"), want(&["pub.k.x"]));
        // Unrelated subjects ask nothing of A.
        assert!(b.import_interest("other.x").is_empty());
        assert!(b.import_interest("pub.x").is_empty());
        // A exports nothing it answers for: no reply interest; B imports
        // no service either.
        assert_eq!(accounts.get("A").unwrap().response_interest(), None);
    }

    #[test]
    fn users_must_name_configured_accounts() {
        let mut auth = AuthConfig::default();
        auth.users.push(crate::config::nats::User {
            username: "u".into(),
            password: "p".into(),
            permissions: None,
            account: Some("NOPE".into()),
        });
        let e = Accounts::new(&auth).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("user \"u\": account \"NOPE\" is not configured")
        );
    }
}
