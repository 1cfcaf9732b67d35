//! Contract: `allow_responses` in a user's permissions works as in Go
//! nats-server, and the same config gives the same outcome on our server
//! and on Go 2.15.1.
//!
//! - A user with `allow_responses: true` and no publish allow list may
//!   publish nothing but one answer to each reply subject of a request
//!   delivered to it (within two minutes); a second answer, or any other
//!   publish, gets `-ERR 'Permissions Violation for Publish to "<s>"'` and
//!   is not delivered; the connection stays up.
//! - `{ max: 2, expires: "1s" }`: two answers, not three; none after the
//!   second has passed. With a publish allow list, the listed subjects
//!   stay allowed besides the answers.
//! - A leaf connecting to a hub as such a user may answer a request the hub
//!   sends it, once (the hub applies the user's permissions to the leaf);
//!   checked with a raw leaf connection, as the answer of a real leaf
//!   server needs interest the hub does not announce to it (Go's hub
//!   neither).
//!
//! Every "not delivered" check sends the denied message first and an
//! allowed one after it, then asserts that the allowed one is the first to
//! arrive.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::support::procs::{go_nats_server_2_15, ConfNode, Impl};
use crate::support::rawleaf::{closed_after, raw_leaf, read_line, read_until_err};
use crate::support::sync;
use crate::support::{drain, until_flowing};

const WAIT: Duration = Duration::from_secs(20);

const USERS: &str = r#"
authorization {
  users [
    { user: app, password: pw }
    { user: svc, password: pw, permissions: {
        subscribe: "svc.>", allow_responses: true } }
    { user: svc2, password: pw, permissions: {
        publish: "events.>", subscribe: "svc.>",
        allow_responses: { max: 2, expires: "1s" } } }
  ]
}
"#;

async fn connect(url: &str, user: &str) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password(user.into(), "pw".into())
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {user} to {url}: {e}"))
}

/// The next message on `sub`.
async fn next(sub: &mut async_nats::Subscriber, what: &str) -> async_nats::Message {
    tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing arrived"))
        .expect("subscription open")
}

/// `sub` belongs to a client that may not publish, so cannot make its own
/// round trip: `app`'s probes show its subscription is in place.
async fn until_subscribed(
    app: &async_nats::Client,
    sub: &mut async_nats::Subscriber,
    subject: &str,
) {
    until_flowing(app, sub, subject, "the responder's subscription").await;
    drain(sub).await;
}

/// A request from `app` on `subject` with reply `inbox`, delivered to
/// `svc_sub`; returns the reply subject the responder saw.
async fn request(
    app: &async_nats::Client,
    inbox: &str,
    svc_sub: &mut async_nats::Subscriber,
    subject: &str,
) -> String {
    app.publish_with_reply(subject.to_string(), inbox.to_string(), "q".into())
        .await
        .unwrap();
    app.flush().await.unwrap();
    let m = next(svc_sub, &format!("the request with reply {inbox}")).await;
    m.reply.expect("a reply subject").to_string()
}

/// `responder` publishes `denied` on `denied_subject`, then `ok` on
/// `ok_subject`; `sub` must get `ok` first.
async fn denied_then_ok(
    responder: &async_nats::Client,
    denied_subject: &str,
    ok_subject: &str,
    sub: &mut async_nats::Subscriber,
    what: &str,
) {
    responder
        .publish(denied_subject.to_string(), "denied".into())
        .await
        .unwrap();
    responder
        .publish(ok_subject.to_string(), "ok".into())
        .await
        .unwrap();
    responder.flush().await.unwrap();
    let m = next(sub, what).await;
    assert_eq!(m.payload, Bytes::from("ok"), "{what}: {:?}", m.subject);
}

async fn client_rules(imp: Impl, tag: &str) {
    let node = ConfNode::start_with(&imp, &format!("resp-{tag}"), false, None, USERS).await;
    let url = node.url();
    let app = connect(&url, "app").await;
    let svc = connect(&url, "svc").await;
    let svc2 = connect(&url, "svc2").await;
    let mut reqs = svc.subscribe("svc.a").await.unwrap();
    let mut reqs2 = svc2.subscribe("svc.b").await.unwrap();
    let mut inbox = app.subscribe("_INBOX.t.>").await.unwrap();
    let mut events = app.subscribe("events.>").await.unwrap();
    sync(&app).await;
    until_subscribed(&app, &mut reqs, "svc.a").await;
    until_subscribed(&app, &mut reqs2, "svc.b").await;

    // One answer to a delivered reply subject; nothing else.
    let r1 = request(&app, "_INBOX.t.1", &mut reqs, "svc.a").await;
    svc.publish(r1.clone(), "ok".into()).await.unwrap();
    svc.flush().await.unwrap();
    assert_eq!(next(&mut inbox, "first answer").await.payload, "ok");
    let r2 = request(&app, "_INBOX.t.2", &mut reqs, "svc.a").await;
    denied_then_ok(&svc, &r1, &r2, &mut inbox, "a second answer to one request").await;
    let r3 = request(&app, "_INBOX.t.3", &mut reqs, "svc.a").await;
    denied_then_ok(
        &svc,
        "_INBOX.t.never",
        &r3,
        &mut inbox,
        "an undelivered reply",
    )
    .await;
    let r4 = request(&app, "_INBOX.t.4", &mut reqs, "svc.a").await;
    denied_then_ok(&svc, "events.x", &r4, &mut inbox, "any other subject").await;

    // max 2, expires 1s, besides a publish allow list.
    let r = request(&app, "_INBOX.t.5", &mut reqs2, "svc.b").await;
    for n in 0..2 {
        svc2.publish(r.clone(), "ok".into()).await.unwrap();
        svc2.flush().await.unwrap();
        assert_eq!(next(&mut inbox, &format!("answer {n}")).await.payload, "ok");
    }
    let r6 = request(&app, "_INBOX.t.6", &mut reqs2, "svc.b").await;
    denied_then_ok(&svc2, &r, &r6, &mut inbox, "a third answer").await;
    denied_then_ok(
        &svc2,
        &r,
        "events.e",
        &mut events,
        "the allow list still holds",
    )
    .await;
    let late = request(&app, "_INBOX.t.7", &mut reqs2, "svc.b").await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let r8 = request(&app, "_INBOX.t.8", &mut reqs2, "svc.b").await;
    denied_then_ok(&svc2, &late, &r8, &mut inbox, "an answer after expiry").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_allow_responses_clients_ours() {
    client_rules(Impl::Liftbridge, "ours").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_allow_responses_clients_go_2_15() {
    client_rules(Impl::Go(go_nats_server_2_15()), "go").await;
}

/// A hub of `hub_imp` whose leaf user may publish only `events.>` but has
/// `allow_responses`, and a raw leaf connected as that user: it receives a
/// request from a hub client, its one answer reaches the requester and the
/// link stays up; a second answer to the same reply subject is refused
/// with nats-server's error and the leaf closed.
async fn leaf_answers(hub_imp: Impl, tag: &str) {
    let hub_users = r#"
authorization {
  users [
    { user: app, password: pw }
    { user: leaf, password: pw, permissions: {
        publish: "events.>", subscribe: "svc.>", allow_responses: true } }
  ]
}
"#;
    let hub = ConfNode::start_with(&hub_imp, &format!("hub-{tag}"), true, None, hub_users).await;
    let (_, mut r, mut w) = raw_leaf(&hub, "leaf", "pw").await;
    w.write_all(b"LS+ svc.leaf\r\nPING\r\n").await.unwrap();
    while !read_line(&mut r).await.starts_with("PONG") {}
    hub.wait_leaf_interest("svc.leaf").await;
    let app = connect(&hub.url(), "app").await;
    let mut inbox = app.subscribe("_INBOX.l.>").await.unwrap();
    sync(&app).await;
    app.publish_with_reply("svc.leaf", "_INBOX.l.1", "q".into())
        .await
        .unwrap();
    app.flush().await.unwrap();
    // `LMSG <subject> <reply> <size>`: the reply the leaf must answer.
    let reply = loop {
        let line = read_line(&mut r).await;
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.first() == Some(&"LMSG") && t.get(1) == Some(&"svc.leaf") {
            assert_eq!(t.len(), 4, "{line}");
            break t[2].to_string();
        }
    };
    let answer = format!("LMSG {reply} 6\r\nanswer\r\nPING\r\n");
    w.write_all(answer.as_bytes()).await.unwrap();
    loop {
        let line = read_line(&mut r).await;
        assert!(
            !line.starts_with("-ERR"),
            "{tag}: the answer was refused: {line}"
        );
        if line.starts_with("PONG") {
            break;
        }
    }
    let m = next(&mut inbox, "the leaf's answer").await;
    assert_eq!(m.payload, "answer");
    w.write_all(answer.as_bytes()).await.unwrap();
    assert_eq!(
        read_until_err(&mut r).await.as_deref(),
        Some(format!("-ERR 'Permissions Violation for Publish to \"{reply}\"'").as_str()),
        "{tag}"
    );
    closed_after(&mut r).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_allow_responses_leaf_ours() {
    leaf_answers(Impl::Liftbridge, "ours").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_allow_responses_leaf_go_2_15() {
    leaf_answers(Impl::Go(go_nats_server_2_15()), "go").await;
}
