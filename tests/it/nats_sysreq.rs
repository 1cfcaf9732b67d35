//! Contract: the system account's server requests answer as nats-server's
//! (what the `nats` CLI's `server list`/`server info`/`server report` ask).
//! One config — accounts `SYS` (named by `system_account`) and `A` — runs
//! on our binary and on Go nats-server 2.15.1, and the same body passes on
//! both: `$SYS.REQ.SERVER.PING` answers `server` and `statsz`;
//! `$SYS.REQ.SERVER.PING.VARZ` and `$SYS.REQ.SERVER.<id>.CONNZ` answer
//! `server` and `data` (with the CLI's options: `subscriptions`); `HEALTHZ`
//! says ok; a filter naming another server gets no answer; a client of
//! another account cannot reach these subjects; and a client of account A
//! connecting and leaving publishes `$SYS.ACCOUNT.A.CONNECT` and
//! `.DISCONNECT` advisories (type, server, account, user, name, reason). In a cluster of two of
//! ours and a Go server, one ping is answered by all three.

use std::time::Duration;

use crate::support::procs::{go_nats_server_2_15, ConfNode, Impl};

const CONF: &str = r#"
accounts {
  SYS { users = [ { user: sys, password: sys } ] }
  A { users = [ { user: a, password: a } ] }
}
system_account: SYS
"#;

/// The JSON answer to `subject` with `body`, or the request's error.
async fn ask(
    c: &async_nats::Client,
    subject: &str,
    body: &str,
) -> Result<serde_json::Value, String> {
    let r = tokio::time::timeout(
        Duration::from_secs(2),
        c.request(subject.to_string(), body.to_string().into()),
    )
    .await
    .map_err(|_| "timed out".to_string())?
    .map_err(|e| e.to_string())?;
    serde_json::from_slice(&r.payload).map_err(|e| format!("not JSON: {e}"))
}

async fn body(imp: Impl, tag: &str) {
    let name = format!("sysreq-{tag}");
    let n = ConfNode::start_with(&imp, &name, false, None, CONF).await;
    let sys = n.connect_as("sys").await;
    let a = n.connect_as("a").await;
    a.flush().await.unwrap();

    let ping = ask(&sys, "$SYS.REQ.SERVER.PING", "").await.unwrap();
    assert_eq!(ping["server"]["name"], name.as_str(), "{tag}: {ping}");
    let id = ping["server"]["id"]
        .as_str()
        .expect("server id")
        .to_string();
    assert!(id.starts_with('N') && id.len() == 56, "{tag}: {ping}");
    assert!(ping["server"]["ver"].is_string(), "{tag}: {ping}");
    let st = &ping["statsz"];
    assert!(
        st["connections"].as_u64().unwrap_or(0) >= 2,
        "{tag}: {ping}"
    );
    for k in [
        "start",
        "mem",
        "subscriptions",
        "sent",
        "received",
        "total_connections",
    ] {
        assert!(!st[k].is_null(), "{tag}: statsz lacks {k}: {ping}");
    }

    let varz = ask(&sys, "$SYS.REQ.SERVER.PING.VARZ", "").await.unwrap();
    assert_eq!(varz["data"]["server_name"], name.as_str(), "{tag}: {varz}");
    assert_eq!(varz["data"]["server_id"], id.as_str(), "{tag}: {varz}");

    let connz = ask(
        &sys,
        &format!("$SYS.REQ.SERVER.{id}.CONNZ"),
        r#"{"subscriptions": true}"#,
    )
    .await
    .unwrap();
    assert_eq!(connz["server"]["id"], id.as_str(), "{tag}: {connz}");
    assert!(
        connz["data"]["num_connections"].as_u64().unwrap_or(0) >= 2,
        "{tag}: {connz}"
    );
    let health = ask(&sys, "$SYS.REQ.SERVER.PING.HEALTHZ", "").await.unwrap();
    assert_eq!(health["data"]["status"], "ok", "{tag}: {health}");

    // A filter for another server: nobody answers.
    let other = ask(
        &sys,
        "$SYS.REQ.SERVER.PING",
        r#"{"server_name": "elsewhere"}"#,
    )
    .await;
    assert!(other.is_err(), "{tag}: {other:?}");
    // Account A's `$SYS.REQ…` is its own subject: no responders there.
    let from_a = ask(&a, "$SYS.REQ.SERVER.PING", "").await;
    assert!(from_a.is_err(), "{tag}: {from_a:?}");

    // Connect and disconnect events of account A's clients.
    let mut events = sys.subscribe("$SYS.ACCOUNT.A.*").await.unwrap();
    // A round trip (a flush only empties the client's buffer): the server
    // has the subscription before the next client connects.
    let _ = ask(&sys, "$SYS.REQ.SERVER.PING.IDZ", "").await;
    let evt = async_nats::ConnectOptions::with_user_and_password("a".into(), "a".into())
        .name("evt")
        .connect(n.url())
        .await
        .unwrap();
    evt.flush().await.unwrap();
    let (subject, v) = next_event(&mut events).await;
    assert_eq!(subject, "$SYS.ACCOUNT.A.CONNECT", "{tag}: {v}");
    assert_eq!(
        v["type"], "io.nats.server.advisory.v1.client_connect",
        "{tag}: {v}"
    );
    assert_eq!(v["server"]["id"], id.as_str(), "{tag}: {v}");
    assert_eq!(v["client"]["acc"], "A", "{tag}: {v}");
    assert_eq!(v["client"]["user"], "a", "{tag}: {v}");
    assert_eq!(v["client"]["name"], "evt", "{tag}: {v}");
    drop(evt);
    let (subject, v) = next_event(&mut events).await;
    assert_eq!(subject, "$SYS.ACCOUNT.A.DISCONNECT", "{tag}: {v}");
    assert_eq!(
        v["type"], "io.nats.server.advisory.v1.client_disconnect",
        "{tag}: {v}"
    );
    assert_eq!(v["client"]["name"], "evt", "{tag}: {v}");
    assert_eq!(v["reason"], "Client Closed", "{tag}: {v}");
    assert!(
        v["sent"]["msgs"].is_u64() && v["received"]["bytes"].is_u64(),
        "{tag}: {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_sysreq_ours() {
    body(Impl::Liftbridge, "lb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_sysreq_go_2_15_same_body() {
    body(Impl::Go(go_nats_server_2_15()), "go").await;
}

/// A configured system account is carried over routes: a ping on one
/// server is answered by every server of the cluster — two of ours and a
/// Go 2.15.1 server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_sysreq_ping_reaches_the_cluster() {
    let (c1, c2, c3) = (
        crate::support::free_port(),
        crate::support::free_port(),
        crate::support::free_port(),
    );
    let cluster = |own: u16, seed: Option<u16>| {
        let routes = seed.map_or(String::new(), |p| {
            format!(", routes: [\"nats-route://127.0.0.1:{p}\"]")
        });
        format!("{CONF}\ncluster {{ name: sysc, listen: 127.0.0.1:{own}{routes} }}\n")
    };
    let a = ConfNode::start_with(&Impl::Liftbridge, "sys-a", false, None, &cluster(c1, None)).await;
    let _b = ConfNode::start_with(
        &Impl::Liftbridge,
        "sys-b",
        false,
        None,
        &cluster(c2, Some(c1)),
    )
    .await;
    let _c = ConfNode::start_with(
        &Impl::Go(go_nats_server_2_15()),
        "sys-c",
        false,
        None,
        &cluster(c3, Some(c1)),
    )
    .await;
    let want: std::collections::BTreeSet<String> = ["sys-a", "sys-b", "sys-c"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let sys = a.connect_as("sys").await;
    assert_eq!(answered_by(&sys, "$SYS.REQ.SERVER.PING").await, want);
    // The same for a client of account A asking about its own account:
    // the request crosses the cluster in the system account and every
    // answer comes back to A.
    let user = a.connect_as("a").await;
    assert_eq!(answered_by(&user, "$SYS.REQ.SERVER.PING.CONNZ").await, want);
}

/// The names of the servers that answer `subject` (asked again until all
/// three answered, for up to 20 s, while the routes form).
async fn answered_by(c: &async_nats::Client, subject: &str) -> std::collections::BTreeSet<String> {
    use futures::StreamExt;
    let inbox = c.new_inbox();
    let mut answers = c.subscribe(inbox.clone()).await.unwrap();
    let mut names = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while names.len() < 3 && tokio::time::Instant::now() < deadline {
        c.publish_with_reply(subject.to_string(), inbox.clone(), "".into())
            .await
            .unwrap();
        c.flush().await.unwrap();
        while let Ok(Some(m)) =
            tokio::time::timeout(Duration::from_millis(500), answers.next()).await
        {
            let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
            if let Some(n) = v["server"]["name"].as_str() {
                names.insert(n.to_string());
            }
        }
    }
    names
}

/// The next system event: its subject and JSON.
async fn next_event(events: &mut async_nats::Subscriber) -> (String, serde_json::Value) {
    let m = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(events))
        .await
        .expect("event in time")
        .expect("subscription open");
    let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    (m.subject.to_string(), v)
}

/// The account-level requests and events, the same body on our binary
/// and Go 2.15.1: `$SYS.REQ.ACCOUNT.A.{CONNZ,SUBSZ,LEAFZ,STATZ,INFO,CONNS}`
/// answer about account A only, `$SYS.REQ.ACCOUNT.PING.STATZ` lists the
/// accounts asked for, a new client of A publishes
/// `$SYS.ACCOUNT.A.SERVER.CONNS`, and `$SYS.REQ.SERVER.<id>.RELOAD`
/// reloads the file (an error answer when the new file is bad).
async fn account_body(imp: Impl, tag: &str) {
    let name = format!("sysacc-{tag}");
    let n = ConfNode::start_with(&imp, &name, false, None, CONF).await;
    let sys = n.connect_as("sys").await;
    let a = n.connect_as("a").await;
    let _s1 = a.subscribe("a.one").await.unwrap();
    let _s2 = a.subscribe("a.two").await.unwrap();
    // A round trip: the subscriptions are in place.
    let _ = a.request("nobody.here", "".into()).await;

    let connz = ask(&sys, "$SYS.REQ.ACCOUNT.A.CONNZ", "").await.unwrap();
    let conns = connz["data"]["connections"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // Only A's client (the system client is not listed).
    assert_eq!(conns.len(), 1, "{tag}: {connz}");
    assert_eq!(conns[0]["subscriptions"], 3, "{tag}: {connz}");

    // What every account imports: A's own client asks about itself.
    let me = ask(&a, "$SYS.REQ.USER.INFO", "").await.unwrap();
    assert_eq!(me["data"]["user"], "a", "{tag}: {me}");
    assert_eq!(me["data"]["account"], "A", "{tag}: {me}");
    assert_eq!(me["server"]["name"], name.as_str(), "{tag}: {me}");
    for subject in ["$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.CONNZ"] {
        let own = ask(&a, subject, "").await.unwrap();
        assert_eq!(own["data"]["total"], 1, "{tag}: {subject}: {own}");
        assert_eq!(own["server"]["name"], name.as_str(), "{tag}: {own}");
    }
    let own = ask(&a, "$SYS.REQ.ACCOUNT.PING.STATZ", "").await.unwrap();
    assert_eq!(own["data"]["account_statz"][0]["acc"], "A", "{tag}: {own}");
    // Other system subjects stay out of reach.
    assert!(
        ask(&a, "$SYS.REQ.SERVER.PING.VARZ", "").await.is_err(),
        "{tag}"
    );

    let subsz = ask(&sys, "$SYS.REQ.ACCOUNT.A.SUBSZ", "").await.unwrap();
    let subjects: Vec<&str> = subsz["data"]["subscriptions_list"]
        .as_array()
        .map(|l| l.iter().filter_map(|s| s["subject"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        subjects.contains(&"a.one") && subjects.contains(&"a.two"),
        "{tag}: {subsz}"
    );
    // Not the system account's (its service listens on this one).
    assert!(
        !subjects.contains(&"$SYS.REQ.SERVER.PING"),
        "{tag}: only A's subscriptions: {subsz}"
    );

    let leafz = ask(&sys, "$SYS.REQ.ACCOUNT.A.LEAFZ", "").await.unwrap();
    assert_eq!(leafz["data"]["leafnodes"], 0, "{tag}: {leafz}");

    let statz = ask(&sys, "$SYS.REQ.ACCOUNT.A.STATZ", "").await.unwrap();
    let st = &statz["data"]["account_statz"][0];
    assert_eq!(st["acc"], "A", "{tag}: {statz}");
    assert_eq!(st["conns"], 1, "{tag}: {statz}");
    assert_eq!(st["total_conns"], 1, "{tag}: {statz}");
    assert!(
        st["num_subscriptions"].as_u64() >= Some(2),
        "{tag}: {statz}"
    );
    let pinged = ask(
        &sys,
        "$SYS.REQ.ACCOUNT.PING.STATZ",
        r#"{"accounts": ["A"]}"#,
    )
    .await
    .unwrap();
    let listed = pinged["data"]["account_statz"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(listed.len(), 1, "{tag}: {pinged}");
    assert_eq!(listed[0]["acc"], "A", "{tag}: {pinged}");

    let info = ask(&sys, "$SYS.REQ.ACCOUNT.A.INFO", "").await.unwrap();
    assert_eq!(info["data"]["account_name"], "A", "{tag}: {info}");

    let c = ask(&sys, "$SYS.REQ.ACCOUNT.A.CONNS", "").await.unwrap();
    assert_eq!(
        c["type"], "io.nats.server.advisory.v1.account_connections",
        "{tag}: {c}"
    );
    assert_eq!(
        (c["acc"].as_str(), c["conns"].as_u64()),
        (Some("A"), Some(1)),
        "{tag}: {c}"
    );

    // A new client of A: the account's connection count is announced.
    let mut counts = sys.subscribe("$SYS.ACCOUNT.A.SERVER.CONNS").await.unwrap();
    let _ = ask(&sys, "$SYS.REQ.SERVER.PING.IDZ", "").await;
    let second = n.connect_as("a").await;
    second.flush().await.unwrap();
    let (subject, v) = next_event(&mut counts).await;
    assert_eq!(subject, "$SYS.ACCOUNT.A.SERVER.CONNS", "{tag}: {v}");
    assert_eq!(v["conns"], 2, "{tag}: {v}");
    assert_eq!(v["server"]["name"], name.as_str(), "{tag}: {v}");

    // RELOAD: the unchanged file reloads; a bad one is refused with an
    // error answer, and the server keeps running.
    let id = ask(&sys, "$SYS.REQ.SERVER.PING", "").await.unwrap()["server"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let ok = ask(&sys, &format!("$SYS.REQ.SERVER.{id}.RELOAD"), "")
        .await
        .unwrap();
    assert!(ok.get("error").is_none(), "{tag}: {ok}");
    let conf = n.proc.dir.path().join("server.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("{text}\nbogus_field: 1\n")).unwrap();
    let bad = ask(&sys, &format!("$SYS.REQ.SERVER.{id}.RELOAD"), "")
        .await
        .unwrap();
    assert!(
        bad["error"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("bogus_field")),
        "{tag}: {bad}"
    );
    let still = ask(&sys, "$SYS.REQ.SERVER.PING", "").await.unwrap();
    assert_eq!(still["server"]["id"], id.as_str(), "{tag}: {still}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_sysreq_account_requests_ours() {
    account_body(Impl::Liftbridge, "lb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_sysreq_account_requests_go_2_15_same_body() {
    account_body(Impl::Go(go_nats_server_2_15()), "go").await;
}
