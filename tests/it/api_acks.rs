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

/// `n` PublishAsync requests to partition 0 of `stream`, values and
/// correlation ids `<tag><i>`.
fn requests(stream: &str, tag: &str, n: usize) -> Vec<proto::PublishRequest> {
    (0..n)
        .map(|i| proto::PublishRequest {
            value: format!("{tag}{i}").into_bytes().into(),
            stream: stream.into(),
            correlation_id: format!("{tag}{i}"),
            expected_offset: -1,
            ..Default::default()
        })
        .collect()
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
    let all = publish_async_all(&mut c, requests("acks", "s", 30)).await;
    assert_eq!(all.len(), 30);
    assert!(all.iter().all(|r| r.async_error.is_none()));
    assert_eq!(subscriptions(http).await, base, "after all acks");
    node.shutdown().await;
}

/// Acks of partitions led here are handed to the waiting API call inside
/// the node, but only while nothing else listens on the ack inbox: a NATS
/// client subscribed to the service's ack subjects still sees every ack
/// (Publish and PublishAsync), and once it leaves the acks keep coming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_reach_a_nats_subscriber_of_the_ack_inbox() {
    use futures::StreamExt;
    use liftbridge::wire::envelope;

    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "watched", "watched", 1).await;
    publish_acked(&mut c, "watched", 0, b"", b"before").await;

    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .unwrap();
    let mut seen = nc.subscribe("liftbridge-default.ack.>").await.unwrap();
    nc.flush().await.unwrap();

    let unary = publish_acked(&mut c, "watched", 0, b"", b"unary").await;
    let all = publish_async_all(&mut c, requests("watched", "a", 20)).await;
    assert_eq!(all.len(), 20);
    assert!(all.iter().all(|r| r.async_error.is_none()), "{all:?}");

    let mut watched = Vec::new();
    while watched.len() < 21 {
        let m = tokio::time::timeout(Duration::from_secs(5), seen.next())
            .await
            .expect("every ack seen on NATS in time")
            .expect("subscription open");
        let ack = envelope::decode_ack(&m.payload).expect("an ack envelope");
        assert_eq!(m.subject.as_str(), ack.ack_inbox, "published on its inbox");
        watched.push((ack.offset, ack.correlation_id));
    }
    assert_eq!(watched[0].0, unary.offset);
    let async_acks: Vec<(i64, String)> = all
        .iter()
        .map(|r| {
            let a = r.ack.as_ref().expect("an ack");
            (a.offset, a.correlation_id.clone())
        })
        .collect();
    assert_eq!(&watched[1..], &async_acks[..], "same acks, same order");
    assert_eq!(async_acks[0].0, unary.offset + 1);

    // The watcher leaves: acks still arrive.
    drop(seen);
    nc.flush().await.unwrap();
    let after = publish_acked(&mut c, "watched", 0, b"", b"after").await;
    assert_eq!(after.offset, unary.offset + 21);
    node.shutdown().await;
}
