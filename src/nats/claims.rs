//! The system account's claims service in operator mode: account JWTs
//! pushed on `$SYS.REQ.CLAIMS.UPDATE`, `$SYS.REQ.ACCOUNT.<key>.CLAIMS.UPDATE`
//! (and the older `$SYS.ACCOUNT.<key>.CLAIMS.UPDATE`) update the resolver
//! and the live account; `$SYS.REQ.ACCOUNT.<key>.CLAIMS.LOOKUP` answers the
//! stored JWT or an empty message; with `allow_delete`, an operator-signed
//! `$SYS.REQ.CLAIMS.DELETE` removes accounts (`spec/nats-parity.md` §2.6).
//!
//! Only clients of the system account can reach these subjects: the
//! subscriptions live in its subject space. A stored update takes effect at
//! once: a new account's users can connect, and changed exports and
//! imports are rewired ([`ServerInner::update_accounts`]).
//!
//! In a cluster every node learns each push: a valid one is passed to the
//! route peers (as `RMSG <system account> <subject>`, before it is applied
//! here, so a peer knows the account before any interest in it arrives
//! from this node), and a full resolver sends its stored JWTs to each new
//! route peer on [`CLAIMS_SYNC`], which applies the ones newer than its
//! own — so a node that was down during a push catches up when it
//! rejoins. Forwarded pushes are
//! applied by the route's reader, not answered and not passed on.
//! A full resolver also speaks nats-server's pack exchange: to each new
//! route peer and then every `interval` (one minute by default) it sends
//! [`CLAIMS_PACK`] with the digest of its accounts (the XOR of each JWT's
//! SHA-256, 32 bytes) and a reply subject `$SYS._PACK.<server id>`; a full
//! resolver whose own digest differs answers with one `<key>|<jwt>`
//! message per stored account and then an empty message (a matching one
//! with the empty message only); the asker applies the JWTs newer than its
//! own. So stores that drifted apart while connected converge, with our
//! servers and nats-server's alike.
//!
//! A client or leaf whose user JWT names an account not stored here (a
//! cache resolver, or a full one that missed it) waits up to the
//! resolver's `timeout` (1.9 s) while the route peers are asked for it on
//! `$SYS.REQ.ACCOUNT.<key>.CLAIMS.LOOKUP` (the reply goes to
//! `$SYS._LOOKUP.<server id>.<n>` on the asking route): the first JWT
//! that validates is stored, as a push would be, and the connect goes on;
//! when every peer answered empty the connect is refused at once. The
//! lookup also goes over each leaf connection bound to the system account
//! (a leaf node asks its hub; the answer comes back into the system
//! account, where a subscription to our reply subjects takes it); there a
//! whole cluster may answer, so only a JWT or the timeout ends the wait. A
//! nats-server peer's lookup (its reply is not ours) gets an answer only
//! when the account is stored here: nats-server takes the first empty
//! answer of a server it does not count as "not found".
//!
//! The route peers learn the interest of this service in the system
//! account (`RS+` for the subjects served, the pack subject, and the reply
//! subjects of our lookups and packs), so a nats-server peer sends them
//! here as it does to its own kind; no other system-account interest
//! crosses routes.
//!
//! After an update changes a loaded account, its connected users are
//! re-checked: revoked ones get
//! `-ERR 'User Authentication Revoked'`, bearer users of an account that
//! now disallows bearer tokens `Authorization Violation`, and connections
//! over a lowered `conn` limit (newest first) `maximum account active
//! connections exceeded`.
//!
//! Bounded: each subscription is an in-process queue with the byte limit
//! and drop policy of internal request subjects (`nats::handle`); a
//! dropped update is never answered and the pusher retries. Must not: run
//! when operator mode or the system account is absent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::sync::oneshot;

use super::client::{ClientKind, ClientShared};
use super::handle::{LocalClient, LocalSubscription};
use super::proto::route::encode_rmsg;
use super::resolver::{OperatorState, UpdateSource};
use super::server::{NatsError, ServerInner, SERVER_VERSION};

/// The subject of account JWT pushes that name no account.
const CLAIMS_UPDATE: &str = "$SYS.REQ.CLAIMS.UPDATE";

/// The subject, between route peers only, of the stored JWTs a full
/// resolver sends a new peer (applied only when newer than the peer's).
pub(crate) const CLAIMS_SYNC: &str = "$SYS.REQ.CLAIMS.SYNC";

/// The subject of an operator's request to delete accounts.
const CLAIMS_DELETE: &str = "$SYS.REQ.CLAIMS.DELETE";

/// nats-server's subject of a full resolver's pack request (its digest;
/// see the module doc).
pub(crate) const CLAIMS_PACK: &str = "$SYS.REQ.CLAIMS.PACK";

/// The queue group nats-server's full resolvers answer pack requests in
/// (a routed request reaches a queue subscription only when it names the
/// group).
const PACK_QUEUE: &[u8] = b"responder";

/// Replies to our pack requests: `<prefix>.<server id>`.
const PACK_REPLY: &str = "$SYS._PACK";

/// Replies to our account lookups: `<prefix>.<server id>.<n>`.
const LOOKUP_REPLY: &str = "$SYS._LOOKUP";

/// Most account lookups in flight; a connect beyond them is not looked up
/// (and is refused when its account is not stored).
const MAX_LOOKUPS: usize = 1024;

/// Account lookups this node has sent its route peers, by reply subject.
/// Bounded by [`MAX_LOOKUPS`]; each entry is removed by the lookup that
/// made it, answered or timed out.
#[derive(Default)]
pub(crate) struct Lookups {
    next: AtomicU64,
    waits: parking_lot::Mutex<HashMap<String, LookupWait>>,
}

struct LookupWait {
    /// Taken by the answer that ends the wait.
    tx: Option<oneshot::Sender<Option<Bytes>>>,
    /// Peers that answered "not stored here".
    empty: usize,
    /// Peers asked; `None` until the request is sent.
    asked: Option<usize>,
}

impl LookupWait {
    /// Ends the wait with "not found" once every peer asked said so.
    fn settle(&mut self) {
        if self.asked.is_some_and(|n| self.empty >= n) {
            if let Some(tx) = self.tx.take() {
                let _ = tx.send(None);
            }
        }
    }
}

impl Lookups {
    /// A peer's answer to the lookup whose reply subject is `subject`.
    fn answer(&self, subject: &str, payload: &[u8]) {
        let mut waits = self.waits.lock();
        let Some(w) = waits.get_mut(subject) else {
            return;
        };
        if payload.is_empty() {
            w.empty += 1;
            w.settle();
        } else if let Some(tx) = w.tx.take() {
            let _ = tx.send(Some(Bytes::copy_from_slice(payload)));
        }
    }
}

/// Asks the route peers for the account `key`, which this node's
/// directory resolver does not store, and stores the JWT the first one
/// answers with (see the module doc); the caller then authenticates
/// against what is stored.
pub(crate) async fn fetch(inner: &Arc<ServerInner>, key: &str) {
    let Some(op) = &inner.operator else {
        return;
    };
    let (Some(timeout), Some(sys)) = (op.fetch_timeout(), op.system_account()) else {
        return;
    };
    let n = inner.lookups.next.fetch_add(1, Ordering::Relaxed);
    let reply = format!("{LOOKUP_REPLY}.{}.{n}", inner.server_id);
    let (tx, rx) = oneshot::channel();
    {
        let mut waits = inner.lookups.waits.lock();
        if waits.len() >= MAX_LOOKUPS {
            tracing::warn!(account = %key, "account lookup not sent: {MAX_LOOKUPS} in flight");
            return;
        }
        waits.insert(
            reply.clone(),
            LookupWait {
                tx: Some(tx),
                empty: 0,
                asked: None,
            },
        );
    }
    let subject = format!("$SYS.REQ.ACCOUNT.{key}.CLAIMS.LOOKUP");
    let asked = inner.routes.as_ref().map_or(0, |r| {
        r.forward_system(sys, &subject, Some(&reply), &[], &[])
    });
    // Over a leaf connection of the system account the answers may come
    // from a whole cluster behind it: empty ones do not end the wait.
    let via_leaves = inner
        .leafs
        .as_ref()
        .map_or(0, |l| l.forward_system(sys, &subject, Some(&reply), &[]));
    if asked + via_leaves == 0 {
        inner.lookups.waits.lock().remove(&reply);
        return;
    }
    if via_leaves == 0 {
        if let Some(w) = inner.lookups.waits.lock().get_mut(&reply) {
            w.asked = Some(asked);
            w.settle();
        }
    }
    let got = tokio::time::timeout(timeout, rx).await;
    inner.lookups.waits.lock().remove(&reply);
    match got {
        Ok(Ok(Some(token))) => {
            apply(inner, op, Some(key), &token, UpdateSource::Fetched);
        }
        Ok(_) => {
            tracing::debug!(account = %key, peers = asked, "account lookup: not found on any peer")
        }
        Err(_) => {
            tracing::debug!(account = %key, peers = asked + via_leaves, "account lookup timed out")
        }
    }
}

/// Appends, for one new route peer, a full resolver's stored JWTs as
/// [`CLAIMS_SYNC`] messages and its pack request (nothing for other
/// resolvers).
pub(crate) fn encode_sync(inner: &ServerInner, b: &mut BytesMut) {
    let Some(op) = &inner.operator else {
        return;
    };
    let (Some(sys), Some(_)) = (op.system_account(), op.sync_interval()) else {
        return;
    };
    for (_, jwt) in op.sync_jwts() {
        encode_rmsg(
            b,
            sys.as_bytes(),
            CLAIMS_SYNC.as_bytes(),
            None,
            &[],
            None,
            jwt.as_bytes(),
        );
    }
    encode_rmsg(
        b,
        sys.as_bytes(),
        CLAIMS_PACK.as_bytes(),
        Some(pack_reply(inner).as_bytes()),
        &[PACK_QUEUE],
        None,
        &op.digest(),
    );
}

fn pack_reply(inner: &ServerInner) -> String {
    format!("{PACK_REPLY}.{}", inner.server_id)
}

/// Whether `subject` is the reply subject of our pack requests.
fn is_pack_reply(inner: &ServerInner, subject: &str) -> bool {
    subject
        .strip_prefix(PACK_REPLY)
        .and_then(|r| r.strip_prefix('.'))
        == Some(inner.server_id.as_str())
}

/// The subjects answers to our lookups come on: `<prefix>.<server id>.*`.
fn lookup_replies(inner: &ServerInner) -> String {
    format!("{LOOKUP_REPLY}.{}.*", inner.server_id)
}

/// Answers a pack request whose digest is `theirs` on `reply`: one
/// `<key>|<jwt>` message per stored account unless the digests match,
/// then an empty message.
fn answer_pack(
    op: &OperatorState,
    sys: &str,
    route: &Arc<ClientShared>,
    reply: &[u8],
    theirs: &[u8],
) {
    let mut b = BytesMut::new();
    let send = |b: &mut BytesMut, body: &[u8]| {
        encode_rmsg(b, sys.as_bytes(), reply, None, &[], None, body);
    };
    if theirs != op.digest() {
        for (key, jwt) in op.sync_jwts() {
            send(&mut b, format!("{key}|{jwt}").as_bytes());
        }
    }
    send(&mut b, b"");
    route.send_now(&b);
}

/// Applies a pack message (`<key>|<jwt>` lines) from a route peer: the
/// JWTs newer than the stored ones.
fn merge_pack(inner: &ServerInner, op: &OperatorState, payload: &[u8]) {
    for line in payload.split(|&c| c == b'\n') {
        if line.is_empty() {
            continue;
        }
        let Some(bar) = line.iter().position(|&c| c == b'|') else {
            tracing::debug!("pack line without '|' ignored");
            continue;
        };
        let Ok(key) = std::str::from_utf8(&line[..bar]) else {
            continue;
        };
        apply(
            inner,
            op,
            Some(key),
            &line[bar + 1..],
            UpdateSource::PeerSync,
        );
    }
}

/// Tells the route peers what this service listens to in the system
/// account (see the module doc).
fn announce_interest(inner: &ServerInner, op: &OperatorState) {
    let (Some(routes), Some(sys)) = (&inner.routes, op.system_account()) else {
        return;
    };
    let mut subjects: Vec<String> = SUBJECTS.iter().map(|s| s.to_string()).collect();
    if op.fetch_timeout().is_some() {
        subjects.push(lookup_replies(inner));
    }
    if op.sync_interval().is_some() {
        subjects.push(CLAIMS_PACK.to_string());
        subjects.push(pack_reply(inner));
    }
    for s in subjects {
        routes.local_interest(sys, &s, None, 1);
    }
}

/// Runs `tick` every `every` (the first time after one period) while the
/// server lives and `tick` returns true.
fn spawn_every(
    inner: &Arc<ServerInner>,
    every: std::time::Duration,
    tick: impl Fn(&ServerInner) -> bool + Send + 'static,
) {
    let weak = Arc::downgrade(inner);
    tokio::spawn(async move {
        let mut timer = tokio::time::interval(every);
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        timer.tick().await;
        loop {
            timer.tick().await;
            let Some(inner) = weak.upgrade() else {
                return;
            };
            if !tick(&inner) {
                return;
            }
        }
    });
}

/// A full resolver's pack timer: every `interval`, a pack request with
/// the digest of its accounts goes to the route peers.
fn spawn_packs(inner: &Arc<ServerInner>, op: &Arc<OperatorState>) {
    let (Some(every), Some(_)) = (op.sync_interval(), &inner.routes) else {
        return;
    };
    let op = op.clone();
    spawn_every(inner, every, move |inner| {
        let (Some(routes), Some(sys)) = (&inner.routes, op.system_account()) else {
            return false;
        };
        let reply = pack_reply(inner);
        routes.forward_system(sys, CLAIMS_PACK, Some(&reply), &[PACK_QUEUE], &op.digest());
        true
    });
}

/// Whether a client or accepted leaf connection is bound to `account`
/// (a cache resolver keeps such accounts).
fn in_use(inner: &ServerInner, account: &str) -> bool {
    !account_conns(inner, account, true).is_empty()
}

/// A cache resolver's sweep timer: accounts unused for `ttl` (or whose JWT
/// expired) leave the cache, and the live accounts are rewired without
/// them.
fn spawn_cache_sweep(inner: &Arc<ServerInner>, op: &Arc<OperatorState>) {
    let Some(every) = op.cache_sweep_every() else {
        return;
    };
    let op = op.clone();
    spawn_every(inner, every, move |inner| {
        let dropped = op.sweep_cache(std::time::Instant::now(), &|k| in_use(inner, k));
        if !dropped.is_empty() {
            tracing::info!(accounts = ?dropped, "resolver: unused accounts left the cache");
            if let Err(e) = inner.update_accounts(&op.account_configs(), false) {
                tracing::warn!(error = %e, "resolver cache: accounts not rewired");
            }
        }
        true
    });
}

/// The subjects served.
const SUBJECTS: [&str; 5] = [
    CLAIMS_UPDATE,
    CLAIMS_DELETE,
    "$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE",
    "$SYS.ACCOUNT.*.CLAIMS.UPDATE",
    "$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP",
];

/// Longest sleep of the account-expiry watcher: an update that brings an
/// earlier expiry is noticed within this time.
const EXPIRY_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// In operator mode, closes the connections of an account when its JWT
/// expires, with `-ERR 'Account Authentication Expired'` (nats-server's
/// text): client connections and leaf connections bound to it. New
/// connections of an expired account are refused at authentication.
pub(crate) fn spawn_expiry(inner: &Arc<ServerInner>) {
    let Some(op) = inner.operator.clone() else {
        return;
    };
    let weak = Arc::downgrade(inner);
    tokio::spawn(async move {
        let mut done = super::jwt::unix_now();
        loop {
            let next = op.next_account_expiry(done);
            let now = std::time::SystemTime::now();
            let wait = next.as_ref().map_or(EXPIRY_RECHECK, |(at, _)| {
                let at = std::time::UNIX_EPOCH
                    + std::time::Duration::from_secs(u64::try_from(*at).unwrap_or(0));
                at.duration_since(now)
                    .unwrap_or_default()
                    .min(EXPIRY_RECHECK)
            });
            tokio::time::sleep(wait).await;
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let Some((at, keys)) = next else {
                continue;
            };
            let now = super::jwt::unix_now();
            if at > now {
                continue;
            }
            for key in &keys {
                // An update may have moved the expiry since.
                if op.account(key).is_some_and(|a| a.claims.exp == at) {
                    close_account(&inner, key, "Account Authentication Expired");
                }
            }
            done = at;
        }
    });
}

/// Closes the client and accepted leaf connections of `account` with
/// `-ERR '<text>'`.
fn close_account(inner: &ServerInner, account: &str, text: &str) {
    for c in account_conns(inner, account, true) {
        tracing::info!(cid = c.id, %account, "closing connection: {text}");
        c.close_with_err(Some(text));
    }
}

/// The open client connections bound to `account`, and with `leaves` the
/// leaf connections it accepted for it.
fn account_conns(inner: &ServerInner, account: &str, leaves: bool) -> Vec<Arc<ClientShared>> {
    inner
        .clients
        .lock()
        .values()
        .filter(|c| {
            c.kind == ClientKind::Tcp || leaves && c.kind == ClientKind::Leaf { spoke: false }
        })
        .filter(|c| !c.is_closed())
        .filter(|c| c.account.get().is_some_and(|a| a.name == account))
        .cloned()
        .collect()
}

/// Starts the service when operator mode has a system account.
pub(crate) fn spawn(inner: &Arc<ServerInner>) -> Result<(), NatsError> {
    let Some(op) = inner.operator.clone() else {
        return Ok(());
    };
    spawn_packs(inner, &op);
    spawn_cache_sweep(inner, &op);
    announce_interest(inner, &op);
    let Some(account) = op.system_account().and_then(|s| inner.accounts.get(s)) else {
        return Ok(());
    };
    let client = LocalClient::new_in(inner.clone(), "$SYS claims", account);
    if op.fetch_timeout().is_some() && inner.leafs.is_some() {
        // Answers to our lookups sent over leaf connections arrive in the
        // system account's subject space (over routes they come to
        // `from_route`); this subscription is announced to the leaf peers.
        let weak = Arc::downgrade(inner);
        let answers: super::client::InlineHandler = Arc::new(move |subject, payload| {
            if let (Some(inner), Ok(subject)) = (weak.upgrade(), std::str::from_utf8(subject)) {
                inner.lookups.answer(subject, payload);
            }
        });
        let mut sub = client.subscribe_inline(&lookup_replies(inner), answers)?;
        // Held until the server removes it (it yields nothing itself).
        tokio::spawn(async move { while sub.next().await.is_some() {} });
    }
    let seq = Arc::new(AtomicU64::new(0));
    for s in SUBJECTS {
        let sub = client.subscribe(s, None)?;
        tokio::spawn(serve(
            sub,
            client.clone(),
            Arc::downgrade(inner),
            op.clone(),
            seq.clone(),
        ));
    }
    Ok(())
}

async fn serve(
    mut sub: LocalSubscription,
    client: LocalClient,
    inner: std::sync::Weak<ServerInner>,
    op: Arc<OperatorState>,
    seq: Arc<AtomicU64>,
) {
    while let Some(m) = sub.next().await {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let subject = String::from_utf8_lossy(&m.subject).into_owned();
        let reply = m
            .reply
            .as_ref()
            .map(|r| String::from_utf8_lossy(r).into_owned());
        if let Some(key) = lookup_key(&subject) {
            if let Some(r) = reply {
                let body = op.lookup(key).unwrap_or_default();
                let _ = client.publish(&r, None, None, Bytes::from(body));
            }
            continue;
        }
        if subject == CLAIMS_DELETE {
            if let (Some(routes), Some(sys)) = (&inner.routes, op.system_account()) {
                routes.forward_system(sys, &subject, None, &[], &m.payload);
            }
            let outcome = delete(&inner, &op, &m.payload);
            if let Some(r) = reply {
                let body = super::resolver::delete_reply(server_block(&inner, &seq), &outcome);
                let _ = client.publish(&r, None, None, Bytes::from(body.to_string()));
            }
            continue;
        }
        let Some(key) = update_key(&subject) else {
            continue;
        };
        if let (Some(routes), Some(sys)) = (&inner.routes, op.system_account()) {
            if op.is_valid_update(key, &m.payload) {
                routes.forward_system(sys, &subject, None, &[], &m.payload);
            }
        }
        let outcome = apply(&inner, &op, key, &m.payload, UpdateSource::Push);
        if let Some(r) = reply {
            let body = super::resolver::update_reply(server_block(&inner, &seq), &outcome);
            let _ = client.publish(&r, None, None, Bytes::from(body.to_string()));
        }
    }
}

/// The `server` block of a reply.
pub(crate) fn server_block(inner: &ServerInner, seq: &AtomicU64) -> serde_json::Value {
    serde_json::json!({
        "name": inner.server_name,
        "host": inner.opts.host,
        "id": inner.server_id,
        "ver": SERVER_VERSION,
        "seq": seq.fetch_add(1, Ordering::Relaxed) + 1,
        "time": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
    })
}

/// Applies an account delete request: the deleted accounts' connections
/// are closed (`Account Authentication Expired`, as nats-server disables
/// them), their users refused from then on, and the accounts rewired
/// without them.
fn delete(inner: &ServerInner, op: &OperatorState, body: &[u8]) -> super::resolver::DeleteOutcome {
    let outcome = op.delete_accounts(body);
    match &outcome.result {
        Ok(msg) => tracing::info!(accounts = ?outcome.deleted, "claims delete: {msg}"),
        Err((msg, e)) => tracing::warn!("claims delete: {msg} - {e}"),
    }
    if !outcome.deleted.is_empty() {
        if let Err(e) = inner.update_accounts(&op.account_configs(), false) {
            tracing::warn!(error = %e, "claims delete: accounts not rewired");
        }
        for key in &outcome.deleted {
            close_account(inner, key, "Account Authentication Expired");
        }
    }
    outcome
}

/// The account a claims-update subject names (`Some(None)` for
/// `$SYS.REQ.CLAIMS.UPDATE`); `None` for other subjects.
fn update_key(subject: &str) -> Option<Option<&str>> {
    let tokens: Vec<&str> = subject.split('.').collect();
    match tokens.as_slice() {
        ["$SYS", "REQ", "CLAIMS", "UPDATE"] => Some(None),
        ["$SYS", "REQ", "ACCOUNT", k, "CLAIMS", "UPDATE"] => Some(Some(*k)),
        ["$SYS", "ACCOUNT", k, "CLAIMS", "UPDATE"] => Some(Some(*k)),
        _ => None,
    }
}

/// The account a claims-lookup subject names; `None` for other subjects.
fn lookup_key(subject: &str) -> Option<&str> {
    match subject.split('.').collect::<Vec<_>>().as_slice() {
        ["$SYS", "REQ", "ACCOUNT", k, "CLAIMS", "LOOKUP"] => Some(*k),
        _ => None,
    }
}

/// Applies a pushed account JWT: to the resolver, to the live accounts
/// (a new account, changed exports or imports) and to the connected users
/// of a changed account.
fn apply(
    inner: &ServerInner,
    op: &OperatorState,
    key: Option<&str>,
    body: &[u8],
    source: UpdateSource,
) -> super::resolver::UpdateOutcome {
    let outcome = op.apply_update(key, body, source, &|k| in_use(inner, k));
    match &outcome.result {
        // A peer's catch-up mostly repeats what is stored: quiet then.
        Ok(msg) if source == UpdateSource::PeerSync && !outcome.stored => {
            tracing::debug!(account = %outcome.account, "claims sync: {msg} (not newer)")
        }
        Ok(msg) => tracing::info!(account = %outcome.account, "claims update: {msg}"),
        Err((msg, e)) => {
            tracing::warn!(account = %outcome.account, "claims update: {msg} - {e}")
        }
    }
    if outcome.stored {
        if let Err(e) = inner.update_accounts(&op.account_configs(), false) {
            tracing::warn!(account = %outcome.account, error = %e, "claims update: accounts not rewired");
        }
    }
    if outcome.changed {
        enforce(inner, op, &outcome.account);
    }
    outcome
}

/// A message a route peer sent in the system account: a forwarded claims
/// update is applied (not answered, not passed on), a lookup answered to
/// that peer, an answer to our lookup handed to it, a digest that differs
/// from ours answered with our JWTs; anything else is ignored, as routes
/// carry no other system traffic.
pub(crate) fn from_route(
    inner: &ServerInner,
    route: &Arc<ClientShared>,
    subject: &[u8],
    reply: Option<&[u8]>,
    payload: &[u8],
) {
    let (Some(op), Ok(subject)) = (&inner.operator, std::str::from_utf8(subject)) else {
        return;
    };
    if subject == CLAIMS_SYNC {
        apply(inner, op, None, payload, UpdateSource::PeerSync);
        return;
    }
    if subject == CLAIMS_DELETE {
        delete(inner, op, payload);
        return;
    }
    if subject == CLAIMS_PACK {
        if let (Some(reply), Some(sys), Some(_)) = (reply, op.system_account(), op.sync_interval())
        {
            answer_pack(op, sys, route, reply, payload);
        }
        return;
    }
    if is_pack_reply(inner, subject) {
        merge_pack(inner, op, payload);
        return;
    }
    if subject
        .strip_prefix(LOOKUP_REPLY)
        .is_some_and(|r| r.starts_with('.'))
    {
        inner.lookups.answer(subject, payload);
        return;
    }
    if let Some(key) = lookup_key(subject) {
        if let (Some(reply), Some(sys)) = (reply, op.system_account()) {
            let body = op.lookup(key).unwrap_or_default();
            // Only our servers count empty answers (see the module doc).
            if body.is_empty() && !reply.starts_with(LOOKUP_REPLY.as_bytes()) {
                return;
            }
            let mut b = BytesMut::new();
            encode_rmsg(
                &mut b,
                sys.as_bytes(),
                reply,
                None,
                &[],
                None,
                body.as_bytes(),
            );
            route.send_now(&b);
        }
        return;
    }
    match update_key(subject) {
        Some(key) => {
            apply(inner, op, key, payload, UpdateSource::Push);
        }
        None => {
            tracing::debug!(%subject, "route message in the system account ignored");
        }
    }
}

/// Re-checks the connected users of `account` after its claims changed.
fn enforce(inner: &ServerInner, op: &OperatorState, account: &str) {
    let mut clients = account_conns(inner, account, false);
    for c in &clients {
        let jwt = c.auth.lock().as_ref().and_then(|a| a.jwt.clone());
        if let Some(text) = jwt.and_then(|j| op.recheck_user(account, &j)) {
            tracing::info!(cid = c.id, %account, "closing client after claims update: {text}");
            c.close_with_err(Some(text));
        }
    }
    clients.retain(|c| !c.is_closed());
    if let Some(max) = op.max_connections(account) {
        if clients.len() > max {
            // The newest connections (highest ids) go first.
            clients.sort_by_key(|c| c.id);
            for c in clients.iter().skip(max) {
                c.close_with_err(Some("maximum account active connections exceeded"));
            }
        }
    }
}
