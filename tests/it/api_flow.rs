//! End-to-end paths: plain NATS publishes recorded by the stenographer,
//! gRPC publishes with acks, replay through Subscribe, metadata, health.

use std::time::Duration;

use liftbridge::api::proto;
use liftbridge::wire::envelope;

use crate::api_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_plain_nats_publish_is_recorded_with_subject_headers() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "events", "events.*", 1).await;

    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .unwrap();
    for i in 0..5 {
        nc.publish(format!("events.k{}", i % 2), format!("m{i}").into())
            .await
            .unwrap();
    }
    // A subject the wildcard does not match is not recorded.
    nc.publish("other", "x".into()).await.unwrap();
    nc.flush().await.unwrap();

    let mut s = subscribe(&mut c, from_earliest("events", 0)).await;
    let msgs = take(&mut s, 5).await;
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(m.offset, i as i64);
        assert_eq!(m.value, format!("m{i}").into_bytes());
        assert_eq!(m.subject, format!("events.k{}", i % 2));
        assert_eq!(m.headers.get("subject").unwrap(), m.subject.as_bytes());
        assert!(m.headers.contains_key("reply"));
        assert_eq!(m.stream, "events");
        assert!(
            m.timestamp > 1_600_000_000_000_000_000,
            "timestamp is Unix ns"
        );
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_plain_nats_headers_are_stored_with_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "hdr", "hdr", 1).await;

    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .unwrap();
    let mut h = async_nats::HeaderMap::new();
    h.insert("Trace-Id", "abc-123");
    h.insert("Content-Type", "application/json");
    // A client cannot override the stenographer's own headers.
    h.insert("subject", "forged");
    nc.publish_with_headers("hdr", h, "{}".into())
        .await
        .unwrap();
    nc.publish("hdr", "plain".into()).await.unwrap();
    nc.flush().await.unwrap();

    let mut s = subscribe(&mut c, from_earliest("hdr", 0)).await;
    let msgs = take(&mut s, 2).await;
    let m = &msgs[0];
    assert_eq!(m.value, &b"{}"[..]);
    assert_eq!(m.headers.get("Trace-Id").unwrap(), &b"abc-123"[..]);
    assert_eq!(
        m.headers.get("Content-Type").unwrap(),
        &b"application/json"[..]
    );
    assert_eq!(m.headers.get("subject").unwrap(), &b"hdr"[..]);
    assert_eq!(m.headers.len(), 4, "{:?}", m.headers);
    // Without NATS headers only the stenographer's two are there.
    assert_eq!(msgs[1].value, &b"plain"[..]);
    assert_eq!(msgs[1].headers.len(), 2, "{:?}", msgs[1].headers);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_publish_with_deadline_acks_and_without_returns_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "s", "s", 2).await;

    let a0 = publish_acked(&mut c, "s", 1, b"k", b"v0").await;
    let a1 = publish_acked(&mut c, "s", 1, b"k", b"v1").await;
    assert_eq!((a0.offset, a1.offset), (0, 1));
    assert_eq!(a0.stream, "s");
    assert_eq!(a0.partition_subject, "s");
    assert_eq!(a0.msg_subject, "s.1");
    assert_eq!(a0.ack_policy, proto::AckPolicy::All as i32);
    assert!(a0.reception_timestamp > 0 && a0.commit_timestamp >= a0.reception_timestamp);

    // No deadline: fire and forget, empty response.
    let r = c
        .publish(proto::PublishRequest {
            value: b"v2".to_vec().into(),
            stream: "s".into(),
            partition: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r, proto::PublishResponse::default());
    // Ack policy NONE with a deadline: also no ack.
    let mut req = tonic::Request::new(proto::PublishRequest {
        value: b"v3".to_vec().into(),
        stream: "s".into(),
        partition: 1,
        ack_policy: proto::AckPolicy::None as i32,
        ..Default::default()
    });
    req.set_timeout(Duration::from_secs(5));
    assert!(c.publish(req).await.unwrap().into_inner().ack.is_none());

    let mut s = subscribe(&mut c, from_earliest("s", 1)).await;
    let msgs = take(&mut s, 4).await;
    let values: Vec<_> = msgs.iter().map(|m| m.value.clone()).collect();
    assert_eq!(
        values,
        vec![
            b"v0".to_vec(),
            b"v1".to_vec(),
            b"v2".to_vec(),
            b"v3".to_vec()
        ]
    );
    assert_eq!(msgs[0].key, &b"k"[..]);
    assert_eq!(msgs[0].partition, 1);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_enveloped_nats_publish_gets_ack_on_inbox() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "env", "env", 1).await;

    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .unwrap();
    let mut acks = nc.subscribe("my.acks").await.unwrap();
    nc.flush().await.unwrap();
    let msg = proto::Message {
        offset: -1,
        key: bytes::Bytes::from_static(b"key"),
        value: bytes::Bytes::from_static(b"hello"),
        headers: [("h".to_string(), b"1".to_vec().into())]
            .into_iter()
            .collect(),
        ack_inbox: "my.acks".into(),
        correlation_id: "c1".into(),
        ack_policy: proto::AckPolicy::Leader as i32,
        ..Default::default()
    };
    nc.publish("env", envelope::encode_message(&msg))
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), futures::StreamExt::next(&mut acks))
        .await
        .unwrap()
        .unwrap();
    let ack = envelope::decode_ack(&got.payload).unwrap();
    assert_eq!(ack.correlation_id, "c1");
    assert_eq!(ack.offset, 0);
    assert_eq!(ack.ack_error, proto::ack::Error::Ok as i32);

    let mut s = subscribe(&mut c, from_earliest("env", 0)).await;
    let m = &take(&mut s, 1).await[0];
    assert_eq!(m.key, &b"key"[..]);
    assert_eq!(m.value, &b"hello"[..]);
    assert_eq!(m.headers.get("h").unwrap(), &b"1"[..]);
    assert_eq!(m.headers.get("subject").unwrap(), &b"env"[..]);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_publish_async_acks_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    c.create_stream(proto::CreateStreamRequest {
        subject: "a".into(),
        name: "a".into(),
        optimistic_concurrency_control: Some(proto::NullableBool { value: true }),
        ..Default::default()
    })
    .await
    .unwrap();

    let mut reqs: Vec<proto::PublishRequest> = (0..100)
        .map(|i| proto::PublishRequest {
            value: format!("v{i}").into_bytes().into(),
            stream: "a".into(),
            correlation_id: format!("c{i}"),
            expected_offset: -1,
            ..Default::default()
        })
        .collect();
    // Wrong expected offset: INCORRECT_OFFSET async error.
    reqs.push(proto::PublishRequest {
        value: b"occ".to_vec().into(),
        stream: "a".into(),
        correlation_id: "occ".into(),
        expected_offset: 3,
        ..Default::default()
    });
    // Unknown stream: NOT_FOUND async error.
    reqs.push(proto::PublishRequest {
        stream: "nope".into(),
        correlation_id: "nf".into(),
        ..Default::default()
    });
    let all = publish_async_all(&mut c, reqs).await;
    assert_eq!(
        all.len(),
        102,
        "one response per message, stream closes after the acks"
    );
    let mut offsets: Vec<i64> = all
        .iter()
        .filter(|r| r.async_error.is_none())
        .map(|r| {
            let a = r.ack.as_ref().unwrap();
            assert_eq!(r.correlation_id, a.correlation_id);
            a.offset
        })
        .collect();
    offsets.sort();
    assert_eq!(offsets, (0..100).collect::<Vec<i64>>());
    let occ = all.iter().find(|r| r.correlation_id == "occ").unwrap();
    assert_eq!(
        occ.async_error.as_ref().unwrap().code,
        proto::publish_async_error::Code::IncorrectOffset as i32
    );
    let nf = all.iter().find(|r| r.correlation_id == "nf").unwrap();
    assert_eq!(
        nf.async_error.as_ref().unwrap().code,
        proto::publish_async_error::Code::NotFound as i32
    );
    node.shutdown().await;
}

/// Values larger than an HTTP/2 frame (the server takes frames of up to
/// 64 KiB) arrive whole through Publish and PublishAsync, next to small
/// ones in the same request stream, and replay byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_values_spanning_many_frames_arrive_whole() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "big", "big", 1).await;
    // Not a repeating pattern: a misplaced or lost frame changes the bytes.
    let value = |n: usize, seed: u64| -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    let sizes = [70_000usize, 3, 200_000, 65_536, 16_384, 900_000, 1];
    let mut sent = Vec::new();
    for (i, n) in sizes.iter().enumerate() {
        let v = value(*n, i as u64);
        let a = publish_acked(&mut c, "big", 0, b"", &v).await;
        assert_eq!(a.offset, i as i64);
        sent.push(v);
    }
    let reqs: Vec<proto::PublishRequest> = sizes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let v = value(*n, 100 + i as u64);
            sent.push(v.clone());
            proto::PublishRequest {
                value: v.into(),
                stream: "big".into(),
                correlation_id: format!("a{i}"),
                ack_policy: proto::AckPolicy::Leader as i32,
                expected_offset: -1,
                ..Default::default()
            }
        })
        .collect();
    let all = publish_async_all(&mut c, reqs).await;
    let offsets: Vec<i64> = all
        .iter()
        .map(|r| {
            assert!(r.async_error.is_none(), "{r:?}");
            r.ack.as_ref().unwrap().offset
        })
        .collect();
    let n = sizes.len() as i64;
    assert_eq!(offsets, (n..2 * n).collect::<Vec<i64>>());

    let mut s = subscribe(&mut c, from_earliest("big", 0)).await;
    let got = take(&mut s, sent.len()).await;
    for (i, (m, v)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(m.offset, i as i64);
        assert_eq!(m.value.len(), v.len(), "length of message {i}");
        assert!(m.value == v[..], "bytes of message {i}");
    }
    node.shutdown().await;
}

/// A PublishAsync client that does not read its responses is held back
/// by its session's window (the server does not queue its acks without
/// bound); once it reads, every message is acked once, in order. A client
/// that goes away mid-session leaves the server able to serve the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_publish_async_window_holds_back_a_client_that_does_not_read() {
    const N: usize = 60_000;
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    c.create_stream(proto::CreateStreamRequest {
        subject: "w".into(),
        name: "w".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let reqs = |n: usize, tag: &'static str| {
        futures::stream::iter((0..n).map(move |i| proto::PublishRequest {
            value: vec![b'x'; 100].into(),
            stream: "w".into(),
            correlation_id: format!("{tag}{i}"),
            ack_policy: proto::AckPolicy::Leader as i32,
            expected_offset: -1,
            ..Default::default()
        }))
    };
    let mut resp = c.publish_async(reqs(N, "c")).await.unwrap().into_inner();
    // Not reading: publishing stops at the window plus what HTTP/2 buffers
    // on the way to the client (hyper's client opens a 2 MiB stream window:
    // some 20,000 small acks).
    // Held: past the window and unchanged for a second.
    let (mut held, mut same) = (-1, 0);
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = newest(&mut c, "w").await;
        same = if now == held { same + 1 } else { 0 };
        held = now;
        if held + 1 >= 4096 && same >= 5 {
            break;
        }
    }
    assert!(
        held + 1 >= 4096 && held + 1 < 40_000,
        "recorded while the client did not read: {}",
        held + 1
    );
    let mut got = 0i64;
    while let Some(r) = futures::StreamExt::next(&mut resp).await {
        let r = r.unwrap();
        assert!(r.async_error.is_none(), "{r:?}");
        let a = r.ack.unwrap();
        assert_eq!(a.offset, got, "acks in order, once each");
        assert_eq!(r.correlation_id, format!("c{got}"));
        got += 1;
    }
    assert_eq!(got, N as i64);

    // A client gone mid-session (after ten responses) ...
    let mut gone = c
        .publish_async(reqs(5_000, "g"))
        .await
        .unwrap()
        .into_inner();
    for _ in 0..10 {
        futures::StreamExt::next(&mut gone).await.unwrap().unwrap();
    }
    drop(gone);
    // ... and the next session is served in full.
    let resp = c.publish_async(reqs(100, "n")).await.unwrap().into_inner();
    let all: Vec<_> = futures::StreamExt::collect::<Vec<_>>(resp).await;
    assert_eq!(all.len(), 100);
    assert!(all
        .iter()
        .all(|r| r.as_ref().unwrap().async_error.is_none()));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_publish_to_subject_and_occ() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    c.create_stream(proto::CreateStreamRequest {
        subject: "o".into(),
        name: "o".into(),
        optimistic_concurrency_control: Some(proto::NullableBool { value: true }),
        ..Default::default()
    })
    .await
    .unwrap();

    let mut req = tonic::Request::new(proto::PublishToSubjectRequest {
        value: b"x".to_vec().into(),
        subject: "o".into(),
        ..Default::default()
    });
    req.set_timeout(Duration::from_secs(5));
    let ack = c
        .publish_to_subject(req)
        .await
        .unwrap()
        .into_inner()
        .ack
        .unwrap();
    assert_eq!((ack.stream.as_str(), ack.offset), ("o", 0));

    let occ = |expected: i64, policy: proto::AckPolicy| {
        let mut r = tonic::Request::new(proto::PublishRequest {
            value: b"y".to_vec().into(),
            stream: "o".into(),
            ack_policy: policy as i32,
            expected_offset: expected,
            ..Default::default()
        });
        r.set_timeout(Duration::from_secs(5));
        r
    };
    assert_eq!(
        c.publish(occ(1, proto::AckPolicy::Leader))
            .await
            .unwrap()
            .into_inner()
            .ack
            .unwrap()
            .offset,
        1
    );
    let e = c
        .publish(occ(1, proto::AckPolicy::Leader))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        tonic::Code::Unknown,
        "INCORRECT_OFFSET has no explicit mapping"
    );
    let e = c.publish(occ(2, proto::AckPolicy::None)).await.unwrap_err();
    assert_eq!(
        e.code(),
        tonic::Code::InvalidArgument,
        "OCC with ack policy NONE is a bad request"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_metadata_brokers_streams_and_health() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "m", "m", 3).await;
    publish_acked(&mut c, "m", 2, b"", b"x").await;

    let md = c
        .fetch_metadata(proto::FetchMetadataRequest {
            streams: vec!["m".into(), "ghost".into()],
            groups: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(md.brokers.len(), 1);
    let b = &md.brokers[0];
    assert_eq!(b.host, "127.0.0.1");
    assert_eq!(b.port, i32::from(node.grpc_addr().port()));
    assert_eq!(b.id, node.server_id());
    assert_eq!((b.partition_count, b.leader_count), (3, 3));
    let m = &md.stream_metadata[0];
    assert_eq!(
        (m.name.as_str(), m.subject.as_str(), m.partitions.len()),
        ("m", "m", 3)
    );
    assert!(m.creation_timestamp > 0);
    assert_eq!(m.partitions[&2].leader, node.server_id());
    assert_eq!(m.partitions[&2].isr, vec![node.server_id()]);
    assert_eq!(md.stream_metadata[1].name, "ghost");
    assert_eq!(
        md.stream_metadata[1].error,
        proto::stream_metadata::Error::UnknownStream as i32
    );

    let pm = partition_metadata(&mut c, "m", 2).await;
    assert_eq!((pm.high_watermark, pm.newest_offset), (0, 0));
    assert!(pm.messages_received_timestamps.unwrap().latest_timestamp > 0);
    let empty = partition_metadata(&mut c, "m", 0).await;
    assert_eq!((empty.high_watermark, empty.newest_offset), (-1, -1));

    let ch = tonic::transport::Channel::from_shared(format!("http://{}", node.grpc_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    // A method or service the port does not have: Unimplemented.
    for path in ["/proto.API/NoSuchMethod", "/no.such.Service/Call"] {
        let mut g = tonic::client::Grpc::new(ch.clone());
        g.ready().await.unwrap();
        let codec = tonic::codec::ProstCodec::<
            proto::CreateStreamRequest,
            proto::CreateStreamResponse,
        >::default();
        let err = g
            .unary(
                tonic::Request::new(proto::CreateStreamRequest::default()),
                path.parse().unwrap(),
                codec,
            )
            .await
            .expect_err(path);
        assert_eq!(err.code(), tonic::Code::Unimplemented, "{path}: {err:?}");
    }
    let mut h = tonic_health::pb::health_client::HealthClient::new(ch);
    let st = h
        .check(tonic_health::pb::HealthCheckRequest {
            service: "proto.API".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        st.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    let http = node.http_addr().expect("http enabled");
    let varz = http_get(http, "/varz").await;
    assert!(
        varz.starts_with("HTTP/1.1 200") && varz.contains("server_id"),
        "{varz}"
    );
    let health = http_get(http, "/api/v1/health").await;
    assert!(
        health.starts_with("HTTP/1.1 200") && health.contains("\"ok\""),
        "{health}"
    );
    let streams = http_get(http, "/api/v1/streams").await;
    let body = streams.split("\r\n\r\n").nth(1).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(body).expect("JSON body");
    assert_eq!(v["streams"][0]["name"], "m", "{streams}");
    assert_eq!(
        v["streams"][0]["partitions"].as_array().map(Vec::len),
        Some(3)
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_restart_keeps_data_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let id = node.server_id();
    let mut c = client(&node).await;
    create(&mut c, "keep", "keep", 1).await;
    for i in 0..10 {
        publish_acked(&mut c, "keep", 0, b"", format!("v{i}").as_bytes()).await;
    }
    drop(c);
    node.shutdown().await;

    let node = start(config(dir.path())).await;
    assert_eq!(node.server_id(), id, "server id survives restart");
    let mut c = client(&node).await;
    let mut s = subscribe(&mut c, from_earliest("keep", 0)).await;
    let msgs = take(&mut s, 10).await;
    assert_eq!(msgs[9].value, &b"v9"[..]);
    // New messages continue the offsets.
    assert_eq!(
        publish_acked(&mut c, "keep", 0, b"", b"v10").await.offset,
        10
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_grpc_over_mutual_tls() {
    use tonic::transport::Channel;
    let dir = tempfile::tempdir().unwrap();
    let (node, certs) = start_mtls(dir.path()).await;

    // With a client certificate: works.
    let mut c = mtls_client(&node, &certs).await;
    create(&mut c, "tls", "tls", 1).await;
    assert_eq!(
        publish_acked(&mut c, "tls", 0, b"", b"secret").await.offset,
        0
    );

    // Without one: the handshake or the first call fails.
    let tls = mtls_config(&certs, false);
    let url = format!("https://localhost:{}", node.grpc_addr().port());
    let refused = match Channel::from_shared(url)
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
    {
        Err(_) => true,
        Ok(ch) => proto::api_client::ApiClient::new(ch)
            .fetch_metadata(proto::FetchMetadataRequest::default())
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate is refused");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_group_streams_share_a_subject() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    for name in ["ga", "gb"] {
        c.create_stream(proto::CreateStreamRequest {
            subject: "work".into(),
            name: name.into(),
            group: "workers".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    // A stream outside the group sees everything.
    create(&mut c, "all", "work", 1).await;
    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .unwrap();
    for i in 0..200 {
        nc.publish("work", format!("{i}").into()).await.unwrap();
    }
    nc.flush().await.unwrap();
    let mut s = subscribe(&mut c, from_earliest("all", 0)).await;
    take(&mut s, 200).await;
    let newest = |c: &Client, name: &str| {
        let mut c = c.clone();
        let name = name.to_string();
        async move { partition_metadata(&mut c, &name, 0).await.newest_offset + 1 }
    };
    eventually("group members recorded everything", || {
        let c = c.clone();
        async move { newest(&c, "ga").await + newest(&c, "gb").await >= 200 }
    })
    .await;
    let (a, b) = (newest(&c, "ga").await, newest(&c, "gb").await);
    assert_eq!(
        a + b,
        200,
        "each message recorded by exactly one group member"
    );
    assert!(a > 0 && b > 0, "the group splits the messages ({a}/{b})");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_message_over_replication_max_bytes_is_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    // clustering.replication.max.bytes below NATS max_payload.
    cfg.partitions.max_message_bytes = 256;
    let node = start(cfg).await;
    let mut c = client(&node).await;
    create(&mut c, "big", "big", 1).await;

    // Unary Publish: INVALID_ARGUMENT with BAD_REQUEST in the message.
    let mut req = tonic::Request::new(proto::PublishRequest {
        value: vec![b'x'; 1000].into(),
        stream: "big".into(),
        ack_policy: proto::AckPolicy::Leader as i32,
        expected_offset: -1,
        ..Default::default()
    });
    req.set_timeout(Duration::from_secs(5));
    let err = c.publish(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("too large"), "{err:?}");

    // Raw enveloped publish over NATS: the ack carries TOO_LARGE.
    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .unwrap();
    let inbox = nc.new_inbox();
    let mut acks = nc.subscribe(inbox.clone()).await.unwrap();
    let env = envelope::encode_message(&proto::Message {
        value: vec![b'y'; 1000].into(),
        ack_inbox: inbox,
        correlation_id: "c1".into(),
        ack_policy: proto::AckPolicy::Leader as i32,
        offset: -1,
        ..Default::default()
    });
    nc.publish("big", env).await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), futures::StreamExt::next(&mut acks))
        .await
        .expect("ack in time")
        .unwrap();
    let ack = envelope::decode_ack(&m.payload).unwrap();
    assert_eq!(ack.ack_error, proto::ack::Error::TooLarge as i32);
    assert_eq!(ack.correlation_id, "c1");

    // A message within the limit still goes in at offset 0: nothing of the
    // refused ones was stored.
    let ok = publish_acked(&mut c, "big", 0, b"", b"small").await;
    assert_eq!(ok.offset, 0);
    node.shutdown().await;
}
