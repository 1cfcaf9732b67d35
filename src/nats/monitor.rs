//! NATS monitoring data: the JSON bodies of `/varz`, `/connz`, `/subsz`
//! and `/healthz` (`/routez` is built in `route.rs`), with nats-server's field names (`spec/nats.md` §1.14).
//!
//! Pure snapshots of server state; the HTTP layer serves them. Query
//! strings use nats-server's argument names; a bad argument value is an
//! error string (served as HTTP 400), never a panic.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::client::{ClientKind, ClientShared};
use super::server::{NatsServer, SERVER_VERSION};

/// Default `limit` of `/connz` and `/subsz`.
pub const DEFAULT_LIMIT: usize = 1024;

fn query_pairs(q: &str) -> Vec<(String, String)> {
    q.trim_start_matches('?')
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (p.to_string(), String::new()),
        })
        .collect()
}

fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn get_usize(pairs: &[(String, String)], key: &str, default: usize) -> Result<usize, String> {
    match get(pairs, key) {
        None | Some("") => Ok(default),
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| format!("invalid value {v:?} for {key}")),
    }
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// Go-style uptime: `1d2h3m4s`.
fn uptime(d: chrono::Duration) -> String {
    let mut s = d.num_seconds().max(0);
    let days = s / 86400;
    s %= 86400;
    let h = s / 3600;
    s %= 3600;
    let m = s / 60;
    s %= 60;
    let mut out = String::new();
    if days > 0 {
        out.push_str(&format!("{days}d"));
    }
    if days > 0 || h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if days > 0 || h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&format!("{s}s"));
    out
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

impl NatsServer {
    /// `/varz`.
    pub fn varz_json(&self) -> Value {
        let i = &self.inner;
        let live = i.live();
        let o = &live.opts;
        let now = chrono::Utc::now();
        let (http_host, http_port) = i.opts.http.clone().unwrap_or_default();
        // As nats-server, count client connections only: the node's own
        // in-process clients are not connections.
        let conns = i
            .clients
            .lock()
            .values()
            .filter(|c| c.kind != ClientKind::Local)
            .count();
        let mut v = json!({
            "server_id": i.server_id,
            "server_name": i.server_name,
            "version": SERVER_VERSION,
            "proto": 1,
            "go": "rust",
            "host": o.host,
            "port": i.addr.port(),
            "auth_required": i.auth_required(),
            "tls_required": o.tls.is_some(),
            "tls_verify": o.tls.as_ref().is_some_and(|t| t.verify),
            "headers": true,
            "max_connections": o.max_connections,
            "ping_interval": o.ping_interval.as_nanos() as u64,
            "ping_max": o.ping_max,
            "http_host": http_host,
            "http_port": http_port,
            "auth_timeout": o.auth_timeout.as_secs_f64(),
            "max_control_line": o.max_control_line,
            "max_payload": o.max_payload,
            "max_pending": o.max_pending,
            "write_deadline": o.write_deadline.as_nanos() as u64,
            "tls_timeout": 2.0,
            "lame_duck_duration": o.lame_duck_duration.as_nanos() as u64,
            "lame_duck_grace_period": o.lame_duck_grace_period.as_nanos() as u64,
        });
        let mut runtime = json!({
            "start": rfc3339(i.start),
            "now": rfc3339(now),
            "uptime": uptime(now - i.start),
            "mem": rss_bytes(),
            "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
            "cpu": 0.0,
            "connections": conns,
            "total_connections": i.total_connections.load(Ordering::Relaxed),
            "routes": self.num_routes(),
            "remotes": self.num_remotes(),
            "leafnodes": self.num_leafs(),
            "in_msgs": i.stats.in_msgs.load(Ordering::Relaxed),
            "out_msgs": i.stats.out_msgs.load(Ordering::Relaxed),
            "in_bytes": i.stats.in_bytes.load(Ordering::Relaxed),
            "out_bytes": i.stats.out_bytes.load(Ordering::Relaxed),
            "slow_consumers": i.slow_consumers.load(Ordering::Relaxed),
            "subscriptions": i.accounts.num_subscriptions(),
            "slow_consumer_stats": {
                "clients": i.slow_consumers.load(Ordering::Relaxed),
                "routes": self.route_stats().map_or(0, |r| r.slow_routes.load(Ordering::Relaxed)),
                "gateways": 0,
                "leafs": self.leaf_stats().map_or(0, |l| l.slow_leafs.load(Ordering::Relaxed)),
            },
            "cluster": super::route::varz_cluster(i),
            "websocket": super::ws::varz_websocket(i),
            "leaf": super::leaf::varz_leaf(i),
            "http_req_stats": {},
            "config_load_time": rfc3339(i.start),
            // Ours (nats-server has no such field): the in-process
            // recorder queues and internal request drops.
            "liftbridge": self.varz_liftbridge(),
        });
        // External NATS mode: this server has no client listener (`port`
        // 0) and is only the node's in-process bus; the connection to the
        // external system is described here.
        if let (Some(b), Value::Object(m)) = (self.external(), &mut runtime) {
            m.insert("external".into(), b.varz_json());
        }
        if let (Value::Object(a), Value::Object(b)) = (&mut v, runtime) {
            a.extend(b);
        }
        v
    }

    /// The `liftbridge` object of `/varz`: each recorder queue's backlog
    /// and stall time, the limit, and the internal request drops.
    fn varz_liftbridge(&self) -> Value {
        let t = &self.inner.local_totals;
        let recorders: Vec<Value> = self
            .recorder_queues()
            .iter()
            .map(|q| {
                json!({
                    "subject": q.subject,
                    "pending_bytes": q.pending_bytes(),
                    "pending_msgs": q.pending_msgs(),
                    "pending_bytes_max": q.high_water_bytes(),
                    "stalls": q.stalls(),
                    "stall_seconds": q.stall_time().as_secs_f64(),
                })
            })
            .collect();
        json!({
            "recorder_max_pending": self.inner.opts.local_max_pending,
            "recorder_stall_seconds": std::time::Duration::from_micros(
                t.stall_us.load(Ordering::Relaxed)
            ).as_secs_f64(),
            "recorder_stalls": t.stalls.load(Ordering::Relaxed),
            "internal_dropped": t.dropped.load(Ordering::Relaxed),
            "recorders": recorders,
        })
    }

    /// `/connz` with nats-server's query arguments.
    pub fn connz_json(&self, query: &str) -> Result<Value, String> {
        let q = query_pairs(query);
        let offset = get_usize(&q, "offset", 0)?;
        let limit = get_usize(&q, "limit", DEFAULT_LIMIT)?;
        let (subs, detail) = match get(&q, "subs") {
            None | Some("") | Some("0") | Some("false") => (false, false),
            Some("1") | Some("true") => (true, false),
            Some("detail") => (true, true),
            Some(v) => return Err(format!("invalid value {v:?} for subs")),
        };
        let auth = matches!(get(&q, "auth"), Some("1") | Some("true"));
        // `internal=1` adds the node's in-process clients (stenographers,
        // API), listed with `"type": "internal"`.
        let internal = matches!(get(&q, "internal"), Some("1") | Some("true"));
        let cid_filter = match get(&q, "cid") {
            None | Some("") => None,
            Some(v) => Some(
                v.parse::<u64>()
                    .map_err(|_| format!("invalid value {v:?} for cid"))?,
            ),
        };
        let sort = get(&q, "sort").unwrap_or("cid").to_string();
        let now = chrono::Utc::now();
        let mut clients: Vec<Arc<ClientShared>> =
            self.inner.clients.lock().values().cloned().collect();
        if !internal {
            clients.retain(|c| c.kind != ClientKind::Local);
        }
        if let Some(cid) = cid_filter {
            clients.retain(|c| c.id == cid);
        }
        // `acc=NAME`: the connections of one account.
        if let Some(acc) = get(&q, "acc").filter(|a| !a.is_empty()) {
            clients.retain(|c| self.inner.account_of(c).name == acc);
        }
        let key = |c: &ClientShared| -> i128 {
            let s = &c.stats;
            match sort.as_str() {
                "subs" => c.subs.lock().len() as i128,
                "pending" => c.pending_bytes() as i128,
                "msgs_to" => c.out_counts().0 as i128,
                "msgs_from" => s.in_msgs.load(Ordering::Relaxed) as i128,
                "bytes_to" => c.out_counts().1 as i128,
                "bytes_from" => s.in_bytes.load(Ordering::Relaxed) as i128,
                "last" => c.last_activity().timestamp_nanos_opt().unwrap_or(0) as i128,
                "idle" => -(c.last_activity().timestamp_nanos_opt().unwrap_or(0) as i128),
                "uptime" => -(c.start.timestamp_nanos_opt().unwrap_or(0) as i128),
                _ => c.id as i128,
            }
        };
        match sort.as_str() {
            "cid" | "start" => clients.sort_by_key(|c| c.id),
            "subs" | "pending" | "msgs_to" | "msgs_from" | "bytes_to" | "bytes_from" | "last"
            | "idle" | "uptime" => clients.sort_by_key(|c| std::cmp::Reverse(key(c))),
            other => return Err(format!("invalid sorting option {other:?}")),
        }
        let total = clients.len();
        let page: Vec<Value> = clients
            .iter()
            .skip(offset)
            .take(limit)
            .map(|c| conn_info(c, now, subs, detail, auth))
            .collect();
        Ok(json!({
            "server_id": self.inner.server_id,
            "now": rfc3339(now),
            "num_connections": page.len(),
            "total": total,
            "offset": offset,
            "limit": limit,
            "connections": page,
        }))
    }

    /// `/subsz` (`subs=1` lists subscriptions; `test=<subject>` filters them).
    pub fn subsz_json(&self, query: &str) -> Result<Value, String> {
        let q = query_pairs(query);
        let offset = get_usize(&q, "offset", 0)?;
        let limit = get_usize(&q, "limit", DEFAULT_LIMIT)?;
        let list = matches!(get(&q, "subs"), Some("1") | Some("true") | Some("detail"));
        let test = get(&q, "test").filter(|t| !t.is_empty());
        if let Some(t) = test {
            if !super::subject::is_valid_literal_subject(t) {
                return Err(format!("invalid test subject {t:?}"));
            }
        }
        // `acc=NAME`: one account's subscriptions.
        let only = match get(&q, "acc").filter(|a| !a.is_empty()) {
            None => None,
            Some(name) => Some(
                self.inner
                    .accounts
                    .get(name)
                    .ok_or_else(|| format!("Account {name} does not exist"))?,
            ),
        };
        let stats = match &only {
            Some(a) => a.sublist.stats(),
            None => {
                let mut st = self.inner.accounts.global().sublist.stats();
                st.num_subscriptions = self.inner.accounts.num_subscriptions();
                st
            }
        };
        let mut v = serde_json::to_value(&stats).map_err(|e| e.to_string())?;
        if list {
            let accounts = match &only {
                Some(a) => vec![a.clone()],
                None => self.inner.accounts.all(),
            };
            let mut all: Vec<_> = accounts.iter().flat_map(|a| a.sublist.all()).collect();
            if let Some(t) = test {
                all.retain(|(s, _, _)| super::subject::matches(s, t));
            }
            all.sort_by(|a, b| (a.2.client_id(), &a.2.sid).cmp(&(b.2.client_id(), &b.2.sid)));
            let total = all.len();
            let page: Vec<Value> = all
                .iter()
                .skip(offset)
                .take(limit)
                .map(|(subject, queue, s)| sub_detail(subject, queue.as_deref(), s))
                .collect();
            if let Value::Object(m) = &mut v {
                m.insert("total".into(), json!(total));
                m.insert("offset".into(), json!(offset));
                m.insert("limit".into(), json!(limit));
                m.insert("subscriptions_list".into(), Value::Array(page));
            }
        }
        Ok(v)
    }

    /// `/accountz` (`acc=NAME` for one account's detail; `Err` = unknown
    /// account, served as 400).
    pub fn accountz_json(&self, query: &str) -> Result<Value, String> {
        super::account::accountz_json(&self.inner, query)
    }

    /// `/healthz`.
    pub fn healthz_json(&self) -> Value {
        // External mode: unhealthy while the external system is out of reach.
        if let Some(problem) = self.external().and_then(|b| b.problem()) {
            return json!({"status": "unavailable", "status_code": 503, "error": problem});
        }
        json!({"status": "ok"})
    }
}

/// The name of a connection's account (`$G` until it is bound).
fn account_name(c: &ClientShared) -> &str {
    c.account
        .get()
        .map_or(super::account::GLOBAL_ACCOUNT, |a| a.name.as_str())
}

fn sub_detail(subject: &str, queue: Option<&str>, s: &super::client::Subscription) -> Value {
    let mut m = Map::new();
    m.insert("account".into(), json!(account_name(&s.client)));
    m.insert("subject".into(), json!(subject));
    if let Some(q) = queue {
        m.insert("qgroup".into(), json!(q));
    }
    m.insert("sid".into(), json!(String::from_utf8_lossy(&s.sid)));
    m.insert("msgs".into(), json!(s.delivered()));
    if s.max() > 0 {
        m.insert("max".into(), json!(s.max()));
    }
    m.insert("cid".into(), json!(s.client_id()));
    Value::Object(m)
}

fn conn_info(
    c: &ClientShared,
    now: chrono::DateTime<chrono::Utc>,
    subs: bool,
    detail: bool,
    auth: bool,
) -> Value {
    let meta = c.meta.lock().clone();
    let s = &c.stats;
    let sub_list: Vec<Arc<super::client::Subscription>> = c.subs.lock().values().cloned().collect();
    let mut m = Map::new();
    m.insert("cid".into(), json!(c.id));
    m.insert("kind".into(), json!("Client"));
    m.insert(
        "type".into(),
        json!(if c.kind == ClientKind::Local {
            "internal"
        } else if meta.websocket {
            "websocket"
        } else {
            "nats"
        }),
    );
    if let Some(a) = c.addr {
        m.insert("ip".into(), json!(a.ip().to_string()));
        m.insert("port".into(), json!(a.port()));
    }
    m.insert("start".into(), json!(rfc3339(c.start)));
    m.insert("last_activity".into(), json!(rfc3339(c.last_activity())));
    if let Some(rtt) = meta.rtt {
        m.insert("rtt".into(), json!(format!("{rtt:?}")));
    }
    m.insert("uptime".into(), json!(uptime(now - c.start)));
    m.insert("idle".into(), json!(uptime(now - c.last_activity())));
    m.insert("pending_bytes".into(), json!(c.pending_bytes()));
    m.insert("in_msgs".into(), json!(s.in_msgs.load(Ordering::Relaxed)));
    let (out_msgs, out_bytes) = c.out_counts();
    m.insert("out_msgs".into(), json!(out_msgs));
    m.insert("in_bytes".into(), json!(s.in_bytes.load(Ordering::Relaxed)));
    m.insert("out_bytes".into(), json!(out_bytes));
    m.insert("subscriptions".into(), json!(sub_list.len()));
    if !meta.name.is_empty() {
        m.insert("name".into(), json!(meta.name));
    }
    if !meta.lang.is_empty() {
        m.insert("lang".into(), json!(meta.lang));
    }
    if !meta.version.is_empty() {
        m.insert("version".into(), json!(meta.version));
    }
    if !meta.tls_version.is_empty() {
        m.insert("tls_version".into(), json!(meta.tls_version));
        m.insert("tls_cipher_suite".into(), json!(meta.tls_cipher));
    }
    if auth && !meta.authorized_user.is_empty() {
        m.insert("authorized_user".into(), json!(meta.authorized_user));
        m.insert("account".into(), json!(account_name(c)));
    }
    if subs && !sub_list.is_empty() {
        if detail {
            let d: Vec<Value> = sub_list
                .iter()
                .map(|s| sub_detail(&s.subject, s.queue.as_deref(), s))
                .collect();
            m.insert("subscriptions_list_detail".into(), Value::Array(d));
        } else {
            let l: Vec<Value> = sub_list.iter().map(|s| json!(s.subject)).collect();
            m.insert("subscriptions_list".into(), Value::Array(l));
        }
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_format() {
        assert_eq!(uptime(chrono::Duration::seconds(5)), "5s");
        assert_eq!(uptime(chrono::Duration::seconds(3723)), "1h2m3s");
        assert_eq!(uptime(chrono::Duration::seconds(90061)), "1d1h1m1s");
    }

    #[test]
    fn queries() {
        let q = query_pairs("?subs=detail&limit=5&x");
        assert_eq!(get(&q, "subs"), Some("detail"));
        assert_eq!(get_usize(&q, "limit", 1).unwrap(), 5);
        assert_eq!(get_usize(&q, "offset", 1).unwrap(), 1);
        assert!(get_usize(&query_pairs("limit=x"), "limit", 1).is_err());
    }
}
