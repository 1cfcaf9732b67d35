//! Contract: PublishAsync requests to a partition led here reach its log
//! without a NATS publish only while nobody could tell. A message handed
//! over is recorded exactly as the same message published into NATS
//! (key, value, headers, subject, offsets in order); a NATS subscriber of
//! the stream subject sees every envelope; and a subscriber arriving in
//! the middle of a session changes nothing in the session's order. A
//! handed-over message over the size limit is refused as a published one
//! is, and the messages around it are stored. Unary Publish calls are
//! handed over too, and one call never overtakes an earlier one that went
//! through NATS (AckPolicy NONE returns before its message is stored);
//! calls in flight together share their hand-overs (one append for many),
//! each still stored once at the offset its ack names.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use liftbridge::api::proto;
use liftbridge::wire::envelope;

use crate::api_common::{
    client, config, create, http_get, publish_async_all, start, subscribe, take,
};

/// A request to partition 0 of `stream` carrying key, headers and value
/// `<tag><i>`, correlation id `<tag><i>`, AckPolicy LEADER.
fn request(stream: &str, tag: &str, i: usize) -> proto::PublishRequest {
    proto::PublishRequest {
        key: format!("k{i}").into_bytes().into(),
        value: format!("{tag}{i}").into_bytes().into(),
        stream: stream.into(),
        headers: HashMap::from([
            ("h".to_string(), format!("v{i}").into_bytes().into()),
            ("z".to_string(), b"last".to_vec().into()),
        ]),
        correlation_id: format!("{tag}{i}"),
        ack_policy: proto::AckPolicy::Leader as i32,
        expected_offset: -1,
        ..Default::default()
    }
}

/// Returns once the server has taken every subscription `nc` made so far:
/// a message `nc` publishes to itself comes back after them.
async fn listening(nc: &async_nats::Client) {
    let probe = nc.new_inbox();
    let mut sub = nc.subscribe(probe.clone()).await.unwrap();
    nc.publish(probe, "probe".into()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("probe back in time")
        .expect("subscription open");
}

/// Reads every message of partition 0 of `stream` from the earliest.
async fn read_back(
    c: &mut crate::api_common::Client,
    stream: &str,
    n: usize,
) -> Vec<proto::Message> {
    let mut s = subscribe(
        c,
        proto::SubscribeRequest {
            stream: stream.into(),
            start_position: proto::StartPosition::Earliest as i32,
            ..Default::default()
        },
    )
    .await;
    take(&mut s, n).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_over_publishes_are_recorded_as_published_ones() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "ho", "ho", 1).await;

    // Nobody listens on "ho": handed over.
    let alone: Vec<_> = (0..10).map(|i| request("ho", "a", i)).collect();
    let acks = publish_async_all(&mut c, alone).await;
    let offsets: Vec<i64> = acks
        .iter()
        .map(|r| r.ack.as_ref().unwrap().offset)
        .collect();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>(), "{acks:?}");

    // A NATS client listens: it sees every envelope, in order.
    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .unwrap();
    let mut watcher = nc.subscribe("ho").await.unwrap();
    listening(&nc).await;
    let watched: Vec<_> = (0..10).map(|i| request("ho", "b", i)).collect();
    let acks = publish_async_all(&mut c, watched).await;
    let offsets: Vec<i64> = acks
        .iter()
        .map(|r| r.ack.as_ref().unwrap().offset)
        .collect();
    assert_eq!(offsets, (10..20).collect::<Vec<_>>(), "{acks:?}");
    for i in 0..10 {
        let m = tokio::time::timeout(Duration::from_secs(5), watcher.next())
            .await
            .expect("envelope seen in time")
            .expect("subscription open");
        let env = envelope::decode_message(&m.payload).expect("a publish envelope");
        assert_eq!(env.value, format!("b{i}").as_bytes());
        assert_eq!(env.correlation_id, format!("b{i}"));
    }

    // Both halves are recorded alike.
    let got = read_back(&mut c, "ho", 20).await;
    for (i, m) in got.iter().enumerate() {
        let (tag, n) = if i < 10 { ("a", i) } else { ("b", i - 10) };
        assert_eq!(m.offset, i as i64);
        assert_eq!(m.value, format!("{tag}{n}").as_bytes(), "offset {i}");
        assert_eq!(m.key, format!("k{n}").as_bytes(), "offset {i}");
        assert_eq!(m.subject, "ho", "offset {i}");
        assert_eq!(
            m.headers.get("h").map(|v| &v[..]),
            Some(format!("v{n}").as_bytes())
        );
        assert_eq!(m.headers.get("z").map(|v| &v[..]), Some(&b"last"[..]));
        assert!(m.timestamp > 0, "offset {i}");
    }
    let first = &got[0].headers;
    let other = &got[10].headers;
    let mut a: Vec<_> = first.keys().collect();
    let mut b: Vec<_> = other.keys().collect();
    a.sort();
    b.sort();
    assert_eq!(a, b, "same header names either way");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_arriving_mid_session_keeps_the_session_order() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "mid", "mid", 1).await;

    let (tx, rx) = tokio::sync::mpsc::channel::<proto::PublishRequest>(64);
    let mut responses = c
        .publish_async(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("publish_async")
        .into_inner();
    const N: usize = 2000;
    let nats_addr = node.nats_addr().to_string();
    let sender = tokio::spawn(async move {
        let mut watcher = None;
        for i in 0..N {
            if i == N / 4 {
                // Mid-session, with publishes in flight: a NATS client
                // starts listening on the stream subject.
                let nc = async_nats::connect(nats_addr.clone()).await.unwrap();
                let sub = nc.subscribe("mid").await.unwrap();
                listening(&nc).await;
                watcher = Some((nc, sub));
            }
            tx.send(request("mid", "m", i)).await.unwrap();
        }
        watcher
    });
    let mut acked = Vec::with_capacity(N);
    while acked.len() < N {
        let r = tokio::time::timeout(Duration::from_secs(10), responses.next())
            .await
            .expect("ack in time")
            .expect("stream open")
            .expect("response ok");
        assert!(r.async_error.is_none(), "{r:?}");
        let a = r.ack.expect("an ack");
        acked.push((a.correlation_id, a.offset));
    }
    let (_nc, mut sub) = sender.await.unwrap().expect("the watcher subscribed");

    // Every request acked once, at the offset of its place in the session.
    acked.sort_by_key(|(_, o)| *o);
    for (i, (corr, offset)) in acked.iter().enumerate() {
        assert_eq!(*offset, i as i64);
        assert_eq!(corr, &format!("m{i}"), "offset {i}");
    }
    let got = read_back(&mut c, "mid", N).await;
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.value, format!("m{i}").as_bytes(), "offset {i}");
    }

    // The watcher saw every publish sent after it subscribed, in order.
    let mut seen = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), sub.next()).await {
        let env = envelope::decode_message(&m.payload).expect("a publish envelope");
        seen.push(String::from_utf8(env.value.to_vec()).unwrap());
    }
    assert!(seen.len() >= N - N / 4, "saw {} envelopes", seen.len());
    let first: usize = seen[0][1..].parse().unwrap();
    let expect: Vec<String> = (first..N).map(|i| format!("m{i}")).collect();
    assert_eq!(seen, expect);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_message_over_the_limit_is_refused_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.partitions.max_message_bytes = 256;
    let node = start(cfg).await;
    let mut c = client(&node).await;
    create(&mut c, "lim", "lim", 1).await;
    let mut reqs: Vec<_> = (0..3).map(|i| request("lim", "s", i)).collect();
    reqs[1].value = vec![b'x'; 1000].into();
    let got = publish_async_all(&mut c, reqs).await;
    assert_eq!(got.len(), 3, "{got:?}");
    let by_corr = |corr: &str| got.iter().find(|r| r.correlation_id == corr).unwrap();
    let e = by_corr("s1").async_error.as_ref().expect("an error for s1");
    assert_eq!(e.code, proto::publish_async_error::Code::BadRequest as i32);
    assert_eq!(e.message, "message too large");
    assert_eq!(by_corr("s0").ack.as_ref().unwrap().offset, 0);
    assert_eq!(by_corr("s2").ack.as_ref().unwrap().offset, 1);
    let back = read_back(&mut c, "lim", 2).await;
    assert_eq!(back[0].value, &b"s0"[..]);
    assert_eq!(back[1].value, &b"s2"[..]);
    node.shutdown().await;
}

/// Messages the embedded NATS server has received, from `/varz`.
async fn nats_in_msgs(node: &liftbridge::node::NodeHandle) -> u64 {
    let r = http_get(node.http_addr().expect("http enabled"), "/varz").await;
    let body = &r[r.find("\r\n\r\n").expect("a response body") + 4..];
    let v: serde_json::Value = serde_json::from_str(body).expect("varz JSON");
    v["in_msgs"].as_u64().expect("in_msgs")
}

/// A unary Publish of `value` to partition 0 of `stream`; acked calls
/// carry a deadline, so they wait for the ack.
async fn publish_unary(
    c: &mut crate::api_common::Client,
    stream: &str,
    value: String,
    policy: proto::AckPolicy,
) -> Option<proto::Ack> {
    let mut req = tonic::Request::new(proto::PublishRequest {
        stream: stream.into(),
        value: value.into_bytes().into(),
        ack_policy: policy as i32,
        expected_offset: -1,
        ..Default::default()
    });
    req.set_timeout(Duration::from_secs(10));
    c.publish(req).await.expect("publish").into_inner().ack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_publishes_are_handed_over_when_nobody_listens() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "un", "un", 1).await;
    let before = nats_in_msgs(&node).await;
    for i in 0..50 {
        let ack = publish_unary(&mut c, "un", format!("u{i}"), proto::AckPolicy::Leader).await;
        assert_eq!(ack.expect("an ack").offset, i);
    }
    let after = nats_in_msgs(&node).await;
    // Neither the publishes nor their acks went through NATS.
    assert!(after - before < 10, "NATS took {} messages", after - before);
    let got = read_back(&mut c, "un", 50).await;
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.value, format!("u{i}").as_bytes(), "offset {i}");
        assert_eq!(m.subject, "un");
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_publishes_keep_their_order_whichever_way_they_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    // Each append waits for its fsync and the stenographer may queue
    // little at a time: messages wait in its subscription.
    cfg.partitions.sync = liftbridge::store::SyncPolicy::Always;
    cfg.nats.local_max_pending = 1 << 20;
    let node = start(cfg).await;
    let mut c = client(&node).await;
    create(&mut c, "uo", "uo", 1).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let nats_addr = node.nats_addr().to_string();

    // Plain NATS publishers keep the stenographer's queue busy.
    let noise = {
        let (stop, addr) = (stop.clone(), nats_addr.clone());
        tokio::spawn(async move {
            let nc = async_nats::connect(addr).await.unwrap();
            let mut n = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for _ in 0..20 {
                    let v = bytes::Bytes::from(vec![b'n'; 32 << 10]);
                    nc.publish("uo", v).await.unwrap();
                }
                nc.flush().await.unwrap();
                n += 20;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            n
        })
    };
    // A watcher comes and goes: while it listens, publishes go through
    // NATS; while it is away, they may be handed over.
    let watcher = {
        let (stop, addr) = (stop.clone(), nats_addr.clone());
        tokio::spawn(async move {
            let nc = async_nats::connect(addr).await.unwrap();
            let mut turns = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut sub = nc.subscribe("uo").await.unwrap();
                listening(&nc).await;
                tokio::time::sleep(Duration::from_millis(3)).await;
                sub.unsubscribe().await.unwrap();
                listening(&nc).await;
                tokio::time::sleep(Duration::from_millis(3)).await;
                turns += 1;
            }
            turns
        })
    };

    // One client's calls, one after the other: three without an ack, then
    // one that waits for its ack.
    const N: usize = 400;
    let mut offsets = Vec::new();
    for i in 0..N {
        let policy = if i % 4 == 3 {
            proto::AckPolicy::Leader
        } else {
            proto::AckPolicy::None
        };
        if let Some(a) = publish_unary(&mut c, "uo", format!("u{i}"), policy).await {
            offsets.push((i, a.offset));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let noise = noise.await.unwrap();
    let turns = watcher.await.unwrap();
    assert!(turns > 3, "the watcher came and went {turns} times");
    assert_eq!(offsets.len(), N / 4);
    assert!(offsets.windows(2).all(|w| w[0].1 < w[1].1), "{offsets:?}");

    // Every call's message is stored once, in the order of the calls.
    let got = read_back(&mut c, "uo", N + noise).await;
    let ours: Vec<&[u8]> = got
        .iter()
        .map(|m| &m.value[..])
        .filter(|v| v.starts_with(b"u"))
        .collect();
    let expect: Vec<String> = (0..N).map(|i| format!("u{i}")).collect();
    let expect: Vec<&[u8]> = expect.iter().map(|v| v.as_bytes()).collect();
    assert_eq!(ours.len(), N);
    let first_wrong = ours.iter().zip(&expect).position(|(a, b)| a != b);
    assert!(first_wrong.is_none(), "out of order from {first_wrong:?}");
    // Each ack names the offset its message is stored at.
    for (i, o) in offsets {
        assert_eq!(got[o as usize].offset, o);
        assert_eq!(
            got[o as usize].value,
            format!("u{i}").as_bytes(),
            "offset {o}"
        );
    }
    node.shutdown().await;
}

/// Appends the store made so far (all partitions), from `/metrics`.
async fn store_appends(node: &liftbridge::node::NodeHandle) -> u64 {
    let r = http_get(node.http_addr().expect("http enabled"), "/metrics").await;
    let line = r
        .lines()
        .find(|l| l.starts_with("liftbridge_store_append_batch_records_count "))
        .expect("the append batch histogram");
    line.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_unary_publishes_share_their_hand_overs() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "uc", "uc", 1).await;
    let (nats_before, appends_before) = (nats_in_msgs(&node).await, store_appends(&node).await);

    // 64 calls in flight on one connection, as a client with a window
    // keeps them.
    const N: usize = 2000;
    let acks: Vec<(usize, proto::Ack)> = futures::stream::iter(0..N)
        .map(|i| {
            let mut c = c.clone();
            async move {
                let ack = publish_unary(&mut c, "uc", format!("c{i}"), proto::AckPolicy::Leader)
                    .await
                    .expect("an ack");
                (i, ack)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;

    // Handed over, not published into NATS, and many calls to one append.
    let nats = nats_in_msgs(&node).await - nats_before;
    assert!(nats < 10, "NATS took {nats} messages");
    let appends = store_appends(&node).await - appends_before;
    assert!(appends <= N as u64 / 4, "{appends} appends for {N} calls");
    // Every call's message is stored once, at the offset its ack names.
    let got = read_back(&mut c, "uc", N).await;
    assert_eq!(got.len(), N);
    let mut offsets: Vec<i64> = acks.iter().map(|(_, a)| a.offset).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, (0..N as i64).collect::<Vec<_>>());
    for (i, a) in &acks {
        let m = &got[a.offset as usize];
        assert_eq!(m.offset, a.offset);
        assert_eq!(m.value, format!("c{i}").as_bytes(), "offset {}", a.offset);
    }
    node.shutdown().await;
}
