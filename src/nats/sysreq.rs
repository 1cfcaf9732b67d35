//! The system account's server requests, as nats-server answers them (the
//! `nats` CLI's `server list`, `server info`, `server report …`): clients
//! of the system account (`system_account`, a declared `$SYS` account, or
//! the operator's; without one the service does not run) request
//!
//! - `$SYS.REQ.SERVER.PING` (and `.PING.STATSZ`): every server answers
//!   `{"server": {…}, "statsz": {…}}` (connections, subscriptions,
//!   messages and bytes in and out, memory, routes, leaves);
//! - `$SYS.REQ.SERVER.PING.<KIND>` and `$SYS.REQ.SERVER.<id>.<KIND>` for
//!   `VARZ`, `CONNZ`, `SUBSZ`, `ROUTEZ`, `LEAFZ`, `ACCOUNTZ`, `HEALTHZ`,
//!   `STATSZ`, `IDZ`: `{"server": {…}, "data": <the monitoring body>}`,
//!   or `{"server": {…}, "error": {"code": 400, "description": …}}`.
//!
//! - `$SYS.REQ.SERVER.<id>.RELOAD`: reloads the configuration file, as
//!   SIGHUP does (`{"server": {…}, "data": null}`, or the error);
//! - `$SYS.REQ.ACCOUNT.<account>.<KIND>` for `SUBSZ`, `CONNZ`, `LEAFZ`
//!   (the monitoring body filtered to the account), `INFO` (its `/accountz`
//!   detail), `STATZ` (`account_statz`: connections, leaves,
//!   subscriptions, messages and bytes of its current connections; no
//!   answer for an account without connections unless `include_unused`),
//!   `CONNS` (nats-server's `account_connections` advisory) and `JSZ`
//!   (an error: no JetStream); `$SYS.REQ.ACCOUNT.PING.STATZ` for every
//!   account (or those in `accounts`).
//!
//! Clients of every other account get, as nats-server imports them into
//! each account: `$SYS.REQ.USER.INFO` (this server answers with the
//! requester's user, account and permissions), and
//! `$SYS.REQ.SERVER.PING.CONNZ`, `$SYS.REQ.ACCOUNT.PING.CONNZ` and
//! `$SYS.REQ.ACCOUNT.PING.STATZ`, which are asked in the system account as
//! `$SYS.REQ.ACCOUNT.<their account>.CONNZ`/`STATZ` (so every server of the
//! cluster answers about that account only) and whose answers are handed
//! back on the requester's reply subject.
//!
//! A request body may hold nats-server's filter (`server_name`/`name`,
//! `cluster`, `host`: a server that does not match stays silent) and the
//! monitoring options the CLI sends (`offset`, `limit`, `subscriptions`,
//! `account`). Only the system account's clients reach these subjects:
//! the subscriptions live in its subject space.
//!
//! Events: when a client connection completes its CONNECT, and when it
//! ends, `$SYS.ACCOUNT.<account>.CONNECT` / `.DISCONNECT` is published in
//! the system account with nats-server's advisory
//! (`io.nats.server.advisory.v1.client_connect` / `client_disconnect`:
//! `server`, `client` with its account, user, name, language and version;
//! a disconnect adds what was sent and received and the `reason`), and
//! `$SYS.ACCOUNT.<account>.SERVER.CONNS` with the account's
//! `account_connections` advisory.
//!
//! Bounded: each subscription is an in-process queue with the byte limit
//! and drop policy of internal request subjects (`nats::handle`); events
//! wait in a queue of [`EVENT_QUEUE`] for their publisher, and an event that
//! finds it full is dropped (logged at debug); so are imported requests
//! (same limit), and at most [`MAX_FORWARDED`] forwarded requests await
//! answers, each for [`FORWARD_TTL`] (the oldest is forgotten first).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use serde_json::{json, Value};

use super::client::{ClientKind, ClientShared};
use super::handle::{LocalClient, LocalSubscription};
use super::server::{NatsError, NatsServer, ServerInner, SERVER_VERSION};

/// The monitoring bodies a request may ask for.
const KINDS: [&str; 9] = [
    "STATSZ", "VARZ", "CONNZ", "SUBSZ", "ROUTEZ", "LEAFZ", "ACCOUNTZ", "HEALTHZ", "IDZ",
];

/// Events waiting for their publisher, at most.
const EVENT_QUEUE: usize = 1024;

/// The subjects nats-server imports from the system account into every
/// account, and the account request each one stands for (`None`: the
/// user info, answered here).
const IMPORTS: [(&str, Option<&str>); 4] = [
    ("$SYS.REQ.USER.INFO", None),
    ("$SYS.REQ.SERVER.PING.CONNZ", Some("CONNZ")),
    ("$SYS.REQ.ACCOUNT.PING.CONNZ", Some("CONNZ")),
    ("$SYS.REQ.ACCOUNT.PING.STATZ", Some("STATZ")),
];

/// Forwarded requests awaiting answers, at most.
const MAX_FORWARDED: usize = 1024;
/// How long answers to a forwarded request are handed back.
const FORWARD_TTL: std::time::Duration = std::time::Duration::from_secs(5);

/// A request a client of another account made on one of [`IMPORTS`].
pub(crate) struct ImportRequest {
    account: Arc<super::account::Account>,
    /// The account request it stands for (`None`: user info).
    target: Option<&'static str>,
    reply: String,
    payload: Bytes,
    /// The requester's user and permissions (for the user info).
    user: String,
    permissions: Value,
}

/// Takes a client's publish on one of [`IMPORTS`] (returns true: nothing
/// else is to be done with it) when the system service runs and the
/// client is not of the system account.
pub(crate) fn system_import(
    inner: &ServerInner,
    account: &Arc<super::account::Account>,
    client: &ClientShared,
    perms: Option<&super::auth::PermissionSet>,
    subject: &[u8],
    reply: Option<&Bytes>,
    payload: &Bytes,
) -> bool {
    let Some(tx) = inner.sys_imports.get() else {
        return false;
    };
    let Some((_, target)) = IMPORTS.iter().find(|(s, _)| s.as_bytes() == subject) else {
        return false;
    };
    if inner
        .system_account()
        .is_none_or(|sys| Arc::ptr_eq(&sys, account))
    {
        return false;
    }
    let Some(reply) = reply.and_then(|r| std::str::from_utf8(r).ok()) else {
        // A request nobody can be answered for.
        return true;
    };
    let permissions = perms.map_or(Value::Null, |p| {
        let l = p.lists();
        let rules = |r: &crate::config::nats::PermissionRules| {
            let mut m = serde_json::Map::new();
            if !r.allow.is_empty() {
                m.insert("allow".into(), json!(r.allow));
            }
            if !r.deny.is_empty() {
                m.insert("deny".into(), json!(r.deny));
            }
            Value::Object(m)
        };
        let mut v = json!({"publish": rules(&l.publish), "subscribe": rules(&l.subscribe)});
        if let Some(r) = l.responses {
            v["responses"] = json!({
                "max": r.max_msgs.unwrap_or(0),
                "ttl": r.expires.map_or(0, |d| d.as_nanos() as u64),
            });
        }
        v
    });
    let req = ImportRequest {
        account: account.clone(),
        target: *target,
        reply: reply.to_string(),
        payload: payload.clone(),
        user: client.meta.lock().authorized_user.clone(),
        permissions,
    };
    if tx.try_send(req).is_err() {
        tracing::debug!(cid = client.id, "system import queue full; request dropped");
    }
    true
}

/// Serves [`ImportRequest`]s: user info answered at once; account
/// requests asked in the system account with a reply subject of ours,
/// whose answers go back to the requester.
async fn serve_imports(
    inner: Weak<ServerInner>,
    mut requests: tokio::sync::mpsc::Receiver<ImportRequest>,
    forwarder: LocalClient,
    mut answers: LocalSubscription,
    prefix: String,
    seq: Arc<AtomicU64>,
    stop: tokio_util::sync::CancellationToken,
) {
    // One in-process client per requesting account, to publish answers
    // in it (bounded by the number of accounts).
    let mut repliers: std::collections::HashMap<String, LocalClient> = Default::default();
    let mut pending: std::collections::VecDeque<(
        u64,
        std::time::Instant,
        Arc<super::account::Account>,
        String,
    )> = Default::default();
    let mut next_id = 0u64;
    let mut reply_in =
        |inner: &Arc<ServerInner>, acc: &Arc<super::account::Account>, to: &str, body: Bytes| {
            let c = repliers.entry(acc.name.clone()).or_insert_with(|| {
                LocalClient::new_in(inner.clone(), "$SYS import replies", acc.clone())
            });
            let _ = c.publish(to, None, None, body);
        };
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            req = requests.recv() => {
                let Some(req) = req else { return };
                let Some(inner) = inner.upgrade() else { return };
                match req.target {
                    None => {
                        let mut data = json!({"user": req.user, "account": req.account.name});
                        if !req.permissions.is_null() {
                            data["permissions"] = req.permissions;
                        }
                        let body = json!({"server": server_block(&inner, &seq), "data": data});
                        reply_in(&inner, &req.account, &req.reply, Bytes::from(body.to_string()));
                    }
                    Some(kind) => {
                        let now = std::time::Instant::now();
                        while pending.front().is_some_and(|p| now.duration_since(p.1) > FORWARD_TTL)
                            || pending.len() >= MAX_FORWARDED
                        {
                            pending.pop_front();
                        }
                        next_id += 1;
                        pending.push_back((next_id, now, req.account.clone(), req.reply));
                        let subject = format!("$SYS.REQ.ACCOUNT.{}.{kind}", req.account.name);
                        let reply = format!("{prefix}{next_id}");
                        let _ = forwarder.publish(&subject, Some(&reply), None, req.payload);
                    }
                }
            }
            m = answers.next() => {
                let Some(m) = m else { return };
                let Some(inner) = inner.upgrade() else { return };
                let id = std::str::from_utf8(&m.subject)
                    .ok()
                    .and_then(|s| s.strip_prefix(prefix.as_str()))
                    .and_then(|n| n.parse::<u64>().ok());
                let Some((_, at, acc, to)) = id.and_then(|id| pending.iter().find(|p| p.0 == id)) else {
                    continue;
                };
                if at.elapsed() <= FORWARD_TTL {
                    reply_in(&inner, acc, to, m.payload.clone());
                }
            }
        }
    }
}

/// Starts the service in the system account, when one is configured
/// (`system_account`, an operator's, or a declared `$SYS` account): a
/// server without one has nobody who could ask.
pub(crate) fn spawn(inner: &Arc<ServerInner>) -> Result<(), NatsError> {
    let configured = inner.opts.auth.system_account.is_some()
        || inner
            .operator
            .as_ref()
            .is_some_and(|op| op.system_account().is_some())
        || inner
            .opts
            .auth
            .accounts
            .iter()
            .any(|a| a.name == super::account::SYSTEM_ACCOUNT);
    if !configured {
        return Ok(());
    }
    let Some(account) = inner.system_account() else {
        return Ok(());
    };
    let client = LocalClient::new_in(inner.clone(), "$SYS server requests", account.clone());
    let seq = Arc::new(AtomicU64::new(0));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(String, String)>(EVENT_QUEUE);
    if inner.events.set(tx).is_ok() {
        let publisher = client.clone();
        let stop = inner.listener_cancel();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    ev = rx.recv() => {
                        let Some((subject, body)) = ev else { return };
                        let _ = publisher.publish(&subject, None, None, Bytes::from(body));
                    }
                }
            }
        });
    }
    let (itx, irx) = tokio::sync::mpsc::channel::<ImportRequest>(EVENT_QUEUE);
    if inner.sys_imports.set(itx).is_ok() {
        let forwarder = LocalClient::new_in(inner.clone(), "$SYS imports", account.clone());
        let prefix = format!("$SYS._IMPORT.{}.", inner.server_id);
        let answers = forwarder.subscribe(&format!("{prefix}*"), None)?;
        tokio::spawn(serve_imports(
            Arc::downgrade(inner),
            irx,
            forwarder,
            answers,
            prefix,
            seq.clone(),
            inner.listener_cancel(),
        ));
    }
    let ping = "$SYS.REQ.SERVER.PING";
    let all = "$SYS.REQ.SERVER.PING.*";
    let ours = format!("$SYS.REQ.SERVER.{}.*", inner.server_id);
    let accounts = "$SYS.REQ.ACCOUNT.*.*";
    for s in [ping, all, ours.as_str(), accounts] {
        let sub = client.subscribe(s, None)?;
        tokio::spawn(serve(
            sub,
            client.clone(),
            Arc::downgrade(inner),
            seq.clone(),
        ));
    }
    Ok(())
}

async fn serve(
    mut sub: LocalSubscription,
    client: LocalClient,
    inner: Weak<ServerInner>,
    seq: Arc<AtomicU64>,
) {
    while let Some(m) = sub.next().await {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let Some(reply) = m.reply.as_ref() else {
            continue;
        };
        let subject = String::from_utf8_lossy(&m.subject);
        let kind = match subject.rsplit('.').next() {
            Some("PING") => "STATSZ",
            Some(k) => k,
            None => continue,
        };
        let opts: Value = if m.payload.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&m.payload).unwrap_or(Value::Null)
        };
        if !selected(&inner, &opts) {
            continue;
        }
        let account = subject
            .strip_prefix("$SYS.REQ.ACCOUNT.")
            .and_then(|rest| rest.split_once('.'))
            .map(|(acc, _)| acc.to_string());
        let body = match (account, kind) {
            (Some(acc), _) => match account_answer(&inner, &acc, kind, &opts, &seq) {
                Some(b) => b,
                None => continue,
            },
            (None, "RELOAD") if !subject.starts_with("$SYS.REQ.SERVER.PING") => {
                reload(&inner, &seq).await
            }
            (None, _) => answer(&inner, kind, &opts, &seq),
        };
        let reply = String::from_utf8_lossy(reply);
        let _ = client.publish(&reply, None, None, Bytes::from(body.to_string()));
    }
}

/// Whether nats-server's event filter in the request selects this server.
fn selected(inner: &ServerInner, opts: &Value) -> bool {
    let want = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| opts.get(*k).and_then(Value::as_str))
            .filter(|v| !v.is_empty())
    };
    let cluster = inner
        .routes
        .as_ref()
        .map(|r| r.cluster_name())
        .unwrap_or_default();
    want(&["server_name", "name"]).is_none_or(|n| n == inner.server_name)
        && want(&["cluster"]).is_none_or(|c| c == cluster)
        && want(&["host"]).is_none_or(|h| h == inner.opts.host)
}

/// The `server` block of an answer: the claims service's, with
/// `jetstream` and `cluster`.
fn server_block(inner: &ServerInner, seq: &AtomicU64) -> Value {
    let mut v = super::claims::server_block(inner, seq);
    v["jetstream"] = json!(false);
    if let Some(r) = inner.routes.as_ref() {
        v["cluster"] = json!(r.cluster_name());
    }
    v
}

/// The monitoring query string the request's options stand for
/// (nats-server's option names, as the `nats` CLI sends them).
fn query(opts: &Value) -> String {
    let mut q: Vec<String> = Vec::new();
    for (key, name) in [("offset", "offset"), ("limit", "limit"), ("cid", "cid")] {
        if let Some(n) = opts.get(key).and_then(Value::as_u64) {
            q.push(format!("{name}={n}"));
        }
    }
    for (key, name) in [
        ("subscriptions", "subs"),
        ("auth", "auth"),
        ("subscriptions_detail", "subs"),
    ] {
        if opts.get(key).and_then(Value::as_bool) == Some(true) {
            let v = if key == "subscriptions_detail" {
                "detail"
            } else {
                "1"
            };
            q.push(format!("{name}={v}"));
        }
    }
    for (key, name) in [
        ("account", "acc"),
        ("acc", "acc"),
        ("sort", "sort"),
        ("test", "test"),
    ] {
        if let Some(v) = opts
            .get(key)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
        {
            q.push(format!("{name}={v}"));
        }
    }
    q.join("&")
}

/// The answer to a request for `kind`.
fn answer(inner: &Arc<ServerInner>, kind: &str, opts: &Value, seq: &AtomicU64) -> Value {
    let server = NatsServer {
        inner: inner.clone(),
    };
    let q = query(opts);
    let data: Result<Value, String> = match kind {
        "STATSZ" => {
            return json!({
                "server": server_block(inner, seq),
                "statsz": statsz(&server),
            })
        }
        "VARZ" => Ok(server.varz_json()),
        "CONNZ" => server.connz_json(&q),
        "SUBSZ" => server.subsz_json(&q),
        "ROUTEZ" => Ok(server.routez_json(&q)),
        "LEAFZ" => Ok(server.leafz_json(&q)),
        "ACCOUNTZ" => server.accountz_json(&q),
        "HEALTHZ" => Ok(server.healthz_json()),
        "IDZ" => Ok(json!({"server_id": inner.server_id, "server_name": inner.server_name})),
        other => Err(format!(
            "unknown request {other:?} (one of {})",
            KINDS.join(", ")
        )),
    };
    match data {
        Ok(d) => json!({"server": server_block(inner, seq), "data": d}),
        Err(e) => json!({
            "server": server_block(inner, seq),
            "error": {"code": 400, "description": e},
        }),
    }
}

/// `$SYS.REQ.SERVER.<id>.RELOAD`: asks the process that owns the
/// configuration file to reload it (see [`NatsServer::reload_requests`]).
async fn reload(inner: &Arc<ServerInner>, seq: &AtomicU64) -> Value {
    let result = match inner.reload_requests.get() {
        None => {
            Err("can only reload config when a file is provided using -c or --config".to_string())
        }
        Some(tx) => {
            let (done, wait) = tokio::sync::oneshot::channel();
            match tx.try_send(done) {
                Err(_) => Err("a reload is already in progress".to_string()),
                Ok(()) => wait
                    .await
                    .unwrap_or_else(|_| Err("the server is shutting down".to_string())),
            }
        }
    };
    match result {
        Ok(()) => json!({"server": server_block(inner, seq), "data": null}),
        Err(e) => json!({
            "server": server_block(inner, seq),
            "error": {"code": 500, "description": e},
        }),
    }
}

/// The answer to `$SYS.REQ.ACCOUNT.<acc>.<kind>`; `None`: no answer (an
/// account without connections asked for its `STATZ`).
fn account_answer(
    inner: &Arc<ServerInner>,
    acc: &str,
    kind: &str,
    opts: &Value,
    seq: &AtomicU64,
) -> Option<Value> {
    let server = NatsServer {
        inner: inner.clone(),
    };
    let include_unused = opts.get("include_unused").and_then(Value::as_bool) == Some(true);
    let with = |extra: &str| {
        let q = query(opts);
        if q.is_empty() {
            extra.to_string()
        } else {
            format!("{q}&{extra}")
        }
    };
    let data: Result<Value, String> = match (acc, kind) {
        ("PING", "STATZ") => {
            let wanted: Option<Vec<&str>> = opts
                .get("accounts")
                .and_then(Value::as_array)
                .map(|l| l.iter().filter_map(Value::as_str).collect());
            let stats: Vec<Value> = inner
                .accounts
                .all()
                .iter()
                .filter(|a| wanted.as_ref().is_none_or(|w| w.contains(&a.name.as_str())))
                .map(|a| account_stat(inner, a))
                .filter(|v| include_unused || v["total_conns"].as_u64() > Some(0))
                .collect();
            if stats.is_empty() {
                return None;
            }
            Ok(account_statz(inner, stats))
        }
        (_, "STATZ") => {
            let a = inner.accounts.get(acc)?;
            let stat = account_stat(inner, &a);
            if !include_unused && stat["total_conns"].as_u64() == Some(0) {
                return None;
            }
            Ok(account_statz(inner, vec![stat]))
        }
        (_, "CONNS") => {
            let a = inner.accounts.get(acc)?;
            return Some(account_conns_event(inner, &a));
        }
        (_, "SUBSZ") => server.subsz_json(&with(&format!("subs=1&acc={acc}"))),
        (_, "CONNZ") => server.connz_json(&with(&format!("acc={acc}"))),
        (_, "LEAFZ") => Ok(server.leafz_json(&with(&format!("acc={acc}")))),
        (_, "INFO") => server
            .accountz_json(&format!("acc={acc}"))
            .map(|v| v.get("account_detail").cloned().unwrap_or(v)),
        (_, "JSZ") => Err("jetstream not enabled".to_string()),
        (_, other) => Err(format!(
            "unknown account request {other:?} (one of SUBSZ, CONNZ, LEAFZ, INFO, STATZ, CONNS, JSZ)"
        )),
    };
    Some(match data {
        Ok(d) => json!({"server": server_block(inner, seq), "data": d}),
        Err(e) => json!({
            "server": server_block(inner, seq),
            "error": {"code": 500, "description": e},
        }),
    })
}

/// nats-server's `AccountStatz` body.
fn account_statz(inner: &ServerInner, stats: Vec<Value>) -> Value {
    json!({
        "server_id": inner.server_id,
        "now": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        "account_statz": stats,
    })
}

/// nats-server's `AccountStat` of `acc`: its client and leaf connections
/// here, its subscriptions, and what its current connections sent and
/// received.
fn account_stat(inner: &ServerInner, acc: &Arc<super::account::Account>) -> Value {
    let mut conns = 0u64;
    let (mut in_msgs, mut in_bytes, mut out_msgs, mut out_bytes) = (0u64, 0u64, 0u64, 0u64);
    for c in inner.clients.lock().values() {
        if c.kind != ClientKind::Tcp || !Arc::ptr_eq(inner.account_of(c), acc) {
            continue;
        }
        conns += 1;
        let (m, b) = c.out_counts();
        out_msgs += m;
        out_bytes += b;
        in_msgs += c.stats.in_msgs.load(Ordering::Relaxed);
        in_bytes += c.stats.in_bytes.load(Ordering::Relaxed);
    }
    let leafs = inner
        .leafs
        .as_ref()
        .map(|l| {
            l.leafs()
                .iter()
                .filter(|x| Arc::ptr_eq(&x.account, acc))
                .count() as u64
        })
        .unwrap_or(0);
    json!({
        "acc": acc.name,
        "name": acc.name,
        "conns": conns,
        "leafnodes": leafs,
        "total_conns": conns + leafs,
        "num_subscriptions": acc.sublist.count(),
        "sent": {"msgs": out_msgs, "bytes": out_bytes},
        "received": {"msgs": in_msgs, "bytes": in_bytes},
        "slow_consumers": 0,
    })
}

/// nats-server's `account_connections` advisory for `acc`.
fn account_conns_event(inner: &ServerInner, acc: &Arc<super::account::Account>) -> Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let mut ev = account_stat(inner, acc);
    ev["type"] = json!("io.nats.server.advisory.v1.account_connections");
    ev["id"] = json!(super::server::new_nonce());
    ev["server"] = event_server(inner, &now);
    ev["timestamp"] = json!(now);
    ev
}

/// The `server` block of an advisory.
fn event_server(inner: &ServerInner, now: &str) -> Value {
    json!({
        "name": inner.server_name,
        "host": inner.opts.host,
        "id": inner.server_id,
        "ver": SERVER_VERSION,
        "time": now,
    })
}

/// The event queue, when an event of client `c` on `subject` is to be
/// sent: the service runs, `c` is a client, and someone listens (nothing
/// is built otherwise).
fn event_queue<'a>(
    inner: &'a ServerInner,
    c: &ClientShared,
    subject: &str,
) -> Option<&'a tokio::sync::mpsc::Sender<(String, String)>> {
    let tx = inner.events.get()?;
    let listened = c.kind == ClientKind::Tcp
        && inner
            .system_account()
            .is_some_and(|sys| !sys.sublist.match_subject(subject).is_empty());
    listened.then_some(tx)
}

/// nats-server's `statsz` body, from `/varz`.
fn statsz(server: &NatsServer) -> Value {
    let v = server.varz_json();
    let routes: Vec<Value> = server
        .routez_json("")
        .get("routes")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|r| {
                    json!({
                        "rid": r["rid"],
                        "name": r["remote_name"],
                        "sent": {"msgs": r["out_msgs"], "bytes": r["out_bytes"]},
                        "received": {"msgs": r["in_msgs"], "bytes": r["in_bytes"]},
                        "pending": r["pending_size"],
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "start": v["start"],
        "mem": v["mem"],
        "cores": v["cores"],
        "cpu": v["cpu"],
        "connections": v["connections"],
        "total_connections": v["total_connections"],
        "active_accounts": server.inner.accounts.all().len(),
        "subscriptions": v["subscriptions"],
        "sent": {"msgs": v["out_msgs"], "bytes": v["out_bytes"]},
        "received": {"msgs": v["in_msgs"], "bytes": v["in_bytes"]},
        "slow_consumers": v["slow_consumers"],
        "routes": routes,
        "active_servers": 1 + server.inner.routes.as_ref().map_or(0, |r| r.remote_ids().len()),
    })
}

/// Queues the connect (`connected`) or disconnect event of client `c`.
pub(crate) fn client_event(inner: &ServerInner, c: &ClientShared, connected: bool) {
    let account = inner.account_of(c).name.clone();
    let what = if connected { "CONNECT" } else { "DISCONNECT" };
    let subject = format!("$SYS.ACCOUNT.{account}.{what}");
    let Some(tx) = event_queue(inner, c, &subject) else {
        return;
    };
    let meta = c.meta.lock().clone();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let mut client = json!({
        "start": c.start.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        "host": c.addr.map(|a| a.ip().to_string()).unwrap_or_default(),
        "id": c.id,
        "acc": account,
        "user": meta.authorized_user,
        "name": meta.name,
        "lang": meta.lang,
        "ver": meta.version,
        "server": inner.server_name,
        "kind": "Client",
        "client_type": if meta.websocket { "websocket" } else { "nats" },
    });
    let kind = if connected {
        "client_connect"
    } else {
        client["stop"] = json!(now);
        "client_disconnect"
    };
    let mut ev = json!({
        "type": format!("io.nats.server.advisory.v1.{kind}"),
        "id": super::server::new_nonce(),
        "timestamp": now,
        "server": event_server(inner, &now),
        "client": client,
    });
    if !connected {
        let (out_msgs, out_bytes) = c.out_counts();
        ev["sent"] = json!({"msgs": out_msgs, "bytes": out_bytes});
        ev["received"] = json!({
            "msgs": c.stats.in_msgs.load(Ordering::Relaxed),
            "bytes": c.stats.in_bytes.load(Ordering::Relaxed),
        });
        ev["reason"] = json!(if meta.close_reason.is_empty() {
            "Client Closed".to_string()
        } else {
            meta.close_reason
        });
    }
    if tx.try_send((subject, ev.to_string())).is_err() {
        tracing::debug!(cid = c.id, "system event queue full; {what} event dropped");
    }
}

/// Queues the `$SYS.ACCOUNT.<account>.SERVER.CONNS` advisory of client
/// `c`'s account after it connected or disconnected (when anyone listens).
pub(crate) fn account_conns_changed(inner: &ServerInner, c: &ClientShared) {
    let acc = inner.account_of(c).clone();
    let subject = format!("$SYS.ACCOUNT.{}.SERVER.CONNS", acc.name);
    let Some(tx) = event_queue(inner, c, &subject) else {
        return;
    };
    let ev = account_conns_event(inner, &acc);
    if tx.try_send((subject, ev.to_string())).is_err() {
        tracing::debug!(
            cid = c.id,
            "system event queue full; account connections event dropped"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_options_become_monitoring_queries() {
        let q = query(
            &json!({"offset": 2, "limit": 5, "subscriptions": true, "account": "A", "sort": "bytes_to"}),
        );
        assert_eq!(q, "offset=2&limit=5&subs=1&acc=A&sort=bytes_to");
        assert_eq!(
            query(&json!({"subscriptions_detail": true, "cid": 7})),
            "cid=7&subs=detail"
        );
        assert_eq!(query(&Value::Null), "");
    }
}
