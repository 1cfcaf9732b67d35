//! Contract: acked publishes through gRPC (Publish, PublishToSubject,
//! PublishAsync) wait on the service's ONE shared ack-inbox subscription,
//! never a subscription per request, so the node's NATS subscription count
//! does not move with the number of publishes waiting for acks, whether
//! they are answered or time out.

use std::time::Duration;

use crate::api_common::{
    client, config, create, http_get, publish_acked, publish_async_all, start,
};
use liftbridge::api::proto;

/// The NATS server's subscription count from `/varz`.
async fn subscriptions(http: std::net::SocketAddr) -> u64 {
    let resp = http_get(http, "/varz").await;
    let body = resp.split("\r\n\r\n").nth(1).expect("a body");
    let v: serde_json::Value = serde_json::from_str(body).expect("varz JSON");
    v["subscriptions"].as_u64().expect("subscriptions")
}

#[tokio::test]
async fn acked_publishes_share_one_ack_subscription() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let http = node.http_addr().expect("http enabled");
    let mut c = client(&node).await;
    create(&mut c, "acks", "acks", 1).await;
    // The first acked publish makes the shared subscription.
    publish_acked(&mut c, "acks", 0, b"", b"first").await;
    let base = subscriptions(http).await;

    // Publishes that wait (no stream records "void", so no ack comes until
    // the deadline): while they are all waiting, no subscription is added.
    let waiting: Vec<_> = (0..20)
        .map(|i| {
            let mut c = c.clone();
            tokio::spawn(async move {
                let mut req = tonic::Request::new(proto::PublishToSubjectRequest {
                    subject: "void".into(),
                    value: format!("w{i}").into_bytes().into(),
                    ack_policy: proto::AckPolicy::Leader as i32,
                    ..Default::default()
                });
                req.set_timeout(Duration::from_secs(3));
                c.publish_to_subject(req).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(subscriptions(http).await, base, "while 20 publishes wait");
    for w in waiting {
        let status = w.await.unwrap().expect_err("no ack can come");
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    }

    // Answered ones, concurrently, and a PublishAsync session.
    let answered: Vec<_> = (0..50)
        .map(|i| {
            let mut c = c.clone();
            tokio::spawn(async move {
                publish_acked(&mut c, "acks", 0, b"", format!("a{i}").as_bytes())
                    .await
                    .offset
            })
        })
        .collect();
    let mut offsets = Vec::new();
    for a in answered {
        offsets.push(a.await.unwrap());
    }
    offsets.sort_unstable();
    assert_eq!(offsets, (1..=50).collect::<Vec<i64>>());
    let reqs: Vec<proto::PublishRequest> = (0..30)
        .map(|i| proto::PublishRequest {
            value: format!("s{i}").into_bytes().into(),
            stream: "acks".into(),
            correlation_id: format!("s{i}"),
            expected_offset: -1,
            ..Default::default()
        })
        .collect();
    let all = publish_async_all(&mut c, reqs).await;
    assert_eq!(all.len(), 30);
    assert!(all.iter().all(|r| r.async_error.is_none()));
    assert_eq!(subscriptions(http).await, base, "after all acks");
    node.shutdown().await;
}
