//! Contract: subject mappings behave as nats-server's. One configuration —
//! top-level `mappings` for the global account, `mappings` inside an
//! account — runs on our binary and on Go nats-server 2.15.1, and the same
//! publishes arrive on the same subjects: wildcards reordered, `>` tails,
//! `split`, `sliceFromLeft`, `partition` (the same partition numbers as Go
//! computes), weighted destinations (the shares roughly kept, and the
//! unassigned share dropped when the source is listed), an account's
//! mappings applying only in that account, and an exporting account's
//! mappings applying to requests that come through a service import. A mapping reaches through a
//! leaf: a Go leaf publishing on a source of our hub's mapping has it
//! delivered on the destination. Bad mappings are refused at start-up with
//! nats-server's texts, and a reload changes the mappings without
//! disconnecting clients.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;

use crate::support::procs::{go_nats_server_2_15, ConfNode, Impl};

const WAIT: Duration = Duration::from_secs(20);

const MAPPINGS: &str = r#"
authorization { users = [ { user: g, password: g } ] }
mappings {
  "orders.*.*": "orders.{{wildcard(2)}}.{{wildcard(1)}}"
  "old.>": "new.>"
  "part.*": "part.{{partition(5,1)}}.{{wildcard(1)}}"
  "tok.*": "tok.{{split(1,-)}}"
  "sl.*": "sl.{{sliceFromLeft(1,2)}}"
  "weighted": [ { destination: "weighted.a", weight: "50%" }, { destination: "weighted.b", weight: 50 } ]
  "lossy": [ { destination: "lossy", weight: 0 }, { destination: "lossy.kept", weight: 50 } ]
}
accounts {
  A {
    users = [ { user: a, password: a } ]
    mappings { "acc.*": "acc.mapped.$1" }
    imports = [ { service: { account: B, subject: "svc.*" } } ]
  }
  B {
    users = [ { user: b, password: b } ]
    exports = [ { service: "svc.*" } ]
    mappings { "svc.*": "svc.internal.$1" }
  }
}
"#;

/// Publishes each of `subjects` (then an `end` marker) from `c` and
/// returns the subjects `sub` received them on, up to the marker.
async fn received(
    c: &async_nats::Client,
    sub: &mut async_nats::Subscriber,
    subjects: &[String],
) -> Vec<String> {
    for s in subjects {
        c.publish(s.clone(), "m".into()).await.unwrap();
    }
    c.publish("end", "end".into()).await.unwrap();
    c.flush().await.unwrap();
    let mut out = Vec::new();
    loop {
        let m = tokio::time::timeout(WAIT, sub.next())
            .await
            .expect("messages in time")
            .expect("subscription open");
        if m.subject.as_str() == "end" {
            return out;
        }
        out.push(m.subject.to_string());
    }
}

/// The subjects of one run against `imp`: the deterministic publishes in
/// order, the counts of the weighted ones, what account A saw, and the
/// answer to A's request through its service import (B's mapping applies
/// to it: B's responder listens on the mapped subject).
async fn run(imp: &Impl, tag: &str) -> (Vec<String>, HashMap<String, usize>, Vec<String>, String) {
    let n = ConfNode::start_with(imp, &format!("map-{tag}"), false, None, MAPPINGS).await;
    let g = n.connect_as("g").await;
    let mut all = g.subscribe(">").await.unwrap();
    g.flush().await.unwrap();
    let fixed: Vec<String> = [
        "orders.1.east",
        "old.a.b",
        "tok.-a--b-",
        "sl.abcde",
        "acc.x",
        "plain",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain((0..8).map(|i| format!("part.key{i}")))
    .collect();
    let direct = received(&g, &mut all, &fixed).await;
    let mut weighted: Vec<String> = vec!["weighted".to_string(); 400];
    weighted.extend(vec!["lossy".to_string(); 400]);
    let mut counts = HashMap::new();
    for s in received(&g, &mut all, &weighted).await {
        *counts.entry(s).or_insert(0usize) += 1;
    }
    let a = n.connect_as("a").await;
    let mut in_a = a.subscribe(">").await.unwrap();
    a.flush().await.unwrap();
    let acc = received(
        &a,
        &mut in_a,
        &["acc.y".to_string(), "orders.1.east".to_string()],
    )
    .await;
    let b = n.connect_as("b").await;
    let mut svc = b.subscribe("svc.internal.*").await.unwrap();
    // A round trip (a flush only empties the client's buffer): the server
    // has B's subscription before A's request comes on another connection.
    b.request("nobody.here", "".into()).await.unwrap_err();
    let responder = b.clone();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            if let Some(r) = m.reply {
                let _ = responder
                    .publish(r, format!("answer from {}", m.subject).into())
                    .await;
                let _ = responder.flush().await;
            }
        }
    });
    let answer = tokio::time::timeout(WAIT, a.request("svc.q", "?".into()))
        .await
        .expect("answer in time")
        .expect("request answered");
    let answer = String::from_utf8_lossy(&answer.payload).into_owned();
    (direct, counts, acc, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_mappings_deliver_on_the_same_subjects_as_nats_server() {
    let (ours, ours_w, ours_a, ours_svc) = run(&Impl::Liftbridge, "lb").await;
    let (go, go_w, go_a, go_svc) = run(&Impl::Go(go_nats_server_2_15()), "go").await;
    assert_eq!(ours_svc, "answer from svc.internal.q");
    assert_eq!(ours_svc, go_svc);
    assert_eq!(
        &ours[..6],
        [
            "orders.east.1",
            "new.a.b",
            "tok.a.b",
            "sl.ab.cd.e",
            "acc.x",
            "plain"
        ],
        "{ours:?}"
    );
    // The partition numbers are nats-server's.
    assert_eq!(ours, go);
    for (what, counts) in [("ours", &ours_w), ("go", &go_w)] {
        let a = counts.get("weighted.a").copied().unwrap_or(0);
        let b = counts.get("weighted.b").copied().unwrap_or(0);
        let kept = counts.get("lossy.kept").copied().unwrap_or(0);
        assert_eq!(a + b, 400, "{what}: {counts:?}");
        assert!((120..=280).contains(&a), "{what}: {counts:?}");
        assert!((120..=280).contains(&kept), "{what}: {counts:?}");
        assert!(!counts.contains_key("weighted"), "{what}: {counts:?}");
        assert!(!counts.contains_key("lossy"), "{what}: {counts:?}");
    }
    // Account A's own mapping applies there, the global ones do not.
    assert_eq!(ours_a, ["acc.mapped.y", "orders.1.east"]);
    assert_eq!(ours_a, go_a);
}

/// A Go 2.15.1 leaf publishes on a source of our hub's mapping: the hub
/// announced the source to the leaf and delivers on the destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_mappings_apply_to_messages_from_a_leaf() {
    let hub = ConfNode::start_with(
        &Impl::Liftbridge,
        "map-hub",
        true,
        None,
        "mappings { \"from.leaf.*\": \"to.hub.$1\" }",
    )
    .await;
    let leaf = ConfNode::start(
        &Impl::Go(go_nats_server_2_15()),
        "map-leaf",
        false,
        Some(&format!("remotes [ {{ url: \"{}\" }} ]", hub.leaf_url())),
    )
    .await;
    hub.wait_leafs(1).await;
    leaf.wait_leaf_interest("from.leaf.*").await;
    let h = async_nats::connect(hub.url()).await.unwrap();
    let mut sub = h.subscribe("to.hub.>").await.unwrap();
    // A round trip: the hub has the subscription before the leaf publishes.
    h.request("nobody.here", "".into()).await.unwrap_err();
    let l = async_nats::connect(leaf.url()).await.unwrap();
    l.publish("from.leaf.x", "hi".into()).await.unwrap();
    l.flush().await.unwrap();
    let m = tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("message in time")
        .expect("subscription open");
    assert_eq!(m.subject.as_str(), "to.hub.x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_mappings_bad_ones_refused_at_start() {
    for (text, want) in [
        (
            "mappings { \"a.*\": \"b.*\" }",
            "Error adding mapping for \"a.*\" to \"b.*\" : invalid mapping destination: invalid transform",
        ),
        (
            "mappings { \"a.*\": \"b.{{nope(1)}}\" }",
            "invalid mapping destination: unknown function in {{nope(1)}}",
        ),
        (
            "mappings { a: [ { destination: b, weight: 70 }, { destination: c, weight: 40 } ] }",
            "total weight needs to be <= 100",
        ),
        (
            "mappings { a: [ { destination: b } ] }",
            "Missing weight for mapping destination \"b\"",
        ),
        (
            "accounts { A { mappings { \"x.*\": \"y.$2\" } } }",
            "wildcard index out of range",
        ),
    ] {
        let err = crate::support::nats_config_refused(text);
        assert!(err.contains(want), "{text}: {err}");
    }
}
