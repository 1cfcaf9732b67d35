//! NATS server behaviour seen through a real client (async-nats).

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use super::nats_support::{start, test_opts, url, wait_subs, Raw};

const T: Duration = Duration::from_secs(5);

async fn next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(T, sub.next())
        .await
        .expect("message in time")
        .expect("subscription open")
}

async fn nothing_more(sub: &mut async_nats::Subscriber) {
    let r = tokio::time::timeout(Duration::from_millis(200), sub.next()).await;
    assert!(r.is_err(), "unexpected message: {:?}", r);
}

#[tokio::test]
async fn nats_pubsub_and_wildcards() {
    let srv = start(test_opts()).await;
    let c = async_nats::connect(url(&srv)).await.unwrap();
    let mut exact = c.subscribe("a.b.c").await.unwrap();
    let mut star = c.subscribe("a.*.c").await.unwrap();
    let mut gt = c.subscribe("a.>").await.unwrap();
    wait_subs(&srv, 3).await;
    let p = async_nats::connect(url(&srv)).await.unwrap();
    p.publish("a.b.c", "1".into()).await.unwrap();
    p.publish("a.x.c", "2".into()).await.unwrap();
    p.publish("a.b.c.d", "3".into()).await.unwrap();
    p.publish("a", "4".into()).await.unwrap();
    p.flush().await.unwrap();
    assert_eq!(next(&mut exact).await.payload, "1");
    assert_eq!(next(&mut star).await.payload, "1");
    assert_eq!(next(&mut star).await.payload, "2");
    for want in ["1", "2", "3"] {
        assert_eq!(next(&mut gt).await.payload, want);
    }
    nothing_more(&mut exact).await;
    nothing_more(&mut gt).await;
}

#[tokio::test]
async fn nats_queue_group_delivers_each_message_once() {
    let srv = start(test_opts()).await;
    let mut members = Vec::new();
    for _ in 0..3 {
        let c = async_nats::connect(url(&srv)).await.unwrap();
        let s = c.queue_subscribe("work", "q".into()).await.unwrap();
        c.flush().await.unwrap();
        members.push((c, s));
    }
    let watcher = async_nats::connect(url(&srv)).await.unwrap();
    let mut all = watcher.subscribe("work").await.unwrap();
    wait_subs(&srv, 4).await;
    let p = async_nats::connect(url(&srv)).await.unwrap();
    let n = 300;
    for i in 0..n {
        p.publish("work", Bytes::from(i.to_string())).await.unwrap();
    }
    p.flush().await.unwrap();
    for _ in 0..n {
        next(&mut all).await;
    }
    let mut seen = HashSet::new();
    let mut per_member = Vec::new();
    for (_, s) in members.iter_mut() {
        let mut count = 0;
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), s.next()).await {
            assert!(seen.insert(m.payload.clone()), "duplicate {:?}", m.payload);
            count += 1;
        }
        per_member.push(count);
    }
    assert_eq!(seen.len(), n, "every message exactly once across the group");
    assert!(
        per_member.iter().all(|&c| c > 30),
        "random distribution: {per_member:?}"
    );
}

#[tokio::test]
async fn nats_request_reply_and_no_responders() {
    let srv = start(test_opts()).await;
    let svc = async_nats::connect(url(&srv)).await.unwrap();
    let mut reqs = svc.subscribe("svc.echo").await.unwrap();
    wait_subs(&srv, 1).await;
    let svc2 = svc.clone();
    tokio::spawn(async move {
        while let Some(m) = reqs.next().await {
            if let Some(r) = m.reply {
                let mut v = b"re:".to_vec();
                v.extend_from_slice(&m.payload);
                svc2.publish(r, v.into()).await.unwrap();
            }
        }
    });
    let c = async_nats::connect(url(&srv)).await.unwrap();
    for i in 0..20 {
        let resp = c.request("svc.echo", format!("{i}").into()).await.unwrap();
        assert_eq!(resp.payload, format!("re:{i}"));
    }
    let err = c.request("nobody.home", "x".into()).await.unwrap_err();
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
}

#[tokio::test]
async fn nats_headers_roundtrip() {
    let srv = start(test_opts()).await;
    let c = async_nats::connect(url(&srv)).await.unwrap();
    let mut sub = c.subscribe("h").await.unwrap();
    c.flush().await.unwrap();
    let mut h = async_nats::HeaderMap::new();
    h.insert("X-Key", "value-1");
    c.publish_with_headers("h", h, "body".into()).await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(m.payload, "body");
    let hdrs = m.headers.expect("headers delivered");
    assert_eq!(hdrs.get("X-Key").map(|v| v.as_str()), Some("value-1"));
}

#[tokio::test]
async fn nats_unsub_after_max() {
    let srv = start(test_opts()).await;
    let c = async_nats::connect(url(&srv)).await.unwrap();
    let mut sub = c.subscribe("lim").await.unwrap();
    sub.unsubscribe_after(3).await.unwrap();
    c.flush().await.unwrap();
    wait_subs(&srv, 1).await;
    for i in 0..10 {
        c.publish("lim", Bytes::from(i.to_string())).await.unwrap();
    }
    c.flush().await.unwrap();
    for want in ["0", "1", "2"] {
        assert_eq!(next(&mut sub).await.payload, want);
    }
    let r = tokio::time::timeout(Duration::from_millis(300), sub.next()).await;
    assert!(matches!(r, Ok(None) | Err(_)), "no 4th message: {r:?}");
    let subsz = srv.subsz_json("").unwrap();
    assert_eq!(
        subsz["num_subscriptions"], 0,
        "auto-unsubscribed on the server"
    );
}

#[tokio::test]
async fn nats_echo_off() {
    let srv = start(test_opts()).await;
    let c = async_nats::ConnectOptions::new()
        .no_echo()
        .connect(url(&srv))
        .await
        .unwrap();
    let mut own = c.subscribe("e").await.unwrap();
    wait_subs(&srv, 1).await;
    let other = async_nats::connect(url(&srv)).await.unwrap();
    c.publish("e", "mine".into()).await.unwrap();
    c.flush().await.unwrap();
    other.publish("e", "theirs".into()).await.unwrap();
    other.flush().await.unwrap();
    assert_eq!(next(&mut own).await.payload, "theirs");
    nothing_more(&mut own).await;
}

#[tokio::test]
async fn nats_max_payload_enforced() {
    let mut opts = test_opts();
    opts.max_payload = 1024;
    let srv = start(opts).await;
    let c = async_nats::connect(url(&srv)).await.unwrap();
    assert_eq!(c.server_info().max_payload, 1024);
    // The client refuses to send it; a raw client is closed by the server.
    assert!(c.publish("big", vec![0u8; 2048].into()).await.is_err());
    let mut r = Raw::connected(&srv).await;
    r.send(b"PUB big 2048\r\n").await;
    let (out, closed) = r.read_for(Duration::from_millis(300)).await;
    assert_eq!(out, b"-ERR 'Maximum Payload Violation'\r\n");
    assert!(closed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_slow_consumer_closes_only_that_client() {
    let mut opts = test_opts();
    opts.max_pending = 4 * 1024 * 1024;
    let srv = start(opts).await;
    // A subscriber that never reads its socket.
    let mut slow = Raw::connected(&srv).await;
    slow.send(b"SUB flood 1\r\n").await;
    slow.sync().await;
    // The live subscriber reads on its own OS thread, so a busy test
    // runtime cannot starve it.
    let mut fast = std::net::TcpStream::connect(srv.client_addr()).unwrap();
    {
        use std::io::{BufRead, Write};
        let mut line = String::new();
        std::io::BufReader::new(fast.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        fast.write_all(b"CONNECT {\"verbose\":false}\r\nSUB flood 1\r\n")
            .unwrap();
    }
    wait_subs(&srv, 2).await;
    let p = async_nats::connect(url(&srv)).await.unwrap();
    let payload = Bytes::from(vec![b'x'; 16 * 1024]);
    let n = 2000;
    let frame = format!("MSG flood 1 {}\r\n", payload.len()).len() + payload.len() + 2;
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        fast.set_read_timeout(Some(T)).unwrap();
        let mut buf = vec![0u8; 256 * 1024];
        let mut got = 0usize;
        while got < n * frame {
            match fast.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => got += k,
            }
        }
        got / frame
    });
    for _ in 0..n {
        p.publish("flood", payload.clone()).await.unwrap();
    }
    p.flush().await.unwrap();
    let got = tokio::task::spawn_blocking(move || reader.join().unwrap())
        .await
        .unwrap();
    assert_eq!(got, n, "the live subscriber got everything");
    let varz = srv.varz_json();
    assert!(varz["slow_consumers"].as_u64().unwrap() >= 1, "{varz}");
    // The slow client was closed: its socket reaches EOF after the buffered data.
    let mut total = 0usize;
    let closed = loop {
        let (out, closed) = slow.read_for(Duration::from_secs(2)).await;
        total += out.len();
        if closed || out.is_empty() {
            break closed;
        }
    };
    assert!(closed, "slow consumer closed (read {total} bytes)");
    assert!(total < n * payload.len());
}

#[tokio::test]
async fn nats_lame_duck_mode() {
    let mut opts = test_opts();
    opts.lame_duck_grace_period = Duration::from_millis(200);
    opts.lame_duck_duration = Duration::from_millis(600);
    let srv = start(opts).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let c = async_nats::ConnectOptions::new()
        .event_callback(move |e| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(e.to_string());
            }
        })
        .connect(url(&srv))
        .await
        .unwrap();
    let mut raw = Raw::connected(&srv).await;
    raw.sync().await;
    srv.enter_lame_duck();
    let ev = tokio::time::timeout(T, async {
        loop {
            match rx.recv().await {
                Some(e) if e.contains("lame duck") => return e,
                Some(_) => continue,
                None => panic!("events ended"),
            }
        }
    })
    .await
    .expect("lame duck event");
    assert!(ev.contains("lame duck"));
    let got = raw.read_until(b" \r\n").await;
    assert!(std::str::from_utf8(&got).unwrap().contains("\"ldm\":true"));
    // New connections are refused, existing ones closed, server stops.
    tokio::time::timeout(T, srv.wait_stopped())
        .await
        .expect("server stopped");
    assert!(tokio::net::TcpStream::connect(srv.client_addr())
        .await
        .is_err());
    let (_, closed) = raw.read_for(Duration::from_secs(2)).await;
    assert!(closed);
    drop(c);
}

#[tokio::test]
async fn nats_local_client_interop() {
    let srv = start(test_opts()).await;
    let local = srv.local_client("steno");
    let mut lsub = local.subscribe("rec.>", None).unwrap();
    let c = async_nats::connect(url(&srv)).await.unwrap();
    let mut tsub = c.subscribe("from.local").await.unwrap();
    wait_subs(&srv, 2).await;
    // TCP → local, with headers kept.
    let mut h = async_nats::HeaderMap::new();
    h.insert("A", "b");
    c.publish_with_headers("rec.x", h, "tcp".into())
        .await
        .unwrap();
    c.flush().await.unwrap();
    let m = tokio::time::timeout(T, lsub.next()).await.unwrap().unwrap();
    assert_eq!(&m.subject[..], b"rec.x");
    assert_eq!(&m.payload[..], b"tcp");
    assert!(std::str::from_utf8(m.headers.as_ref().unwrap())
        .unwrap()
        .contains("A: b"));
    // local → TCP.
    local
        .publish("from.local", None, None, Bytes::from_static(b"hi"))
        .unwrap();
    assert_eq!(next(&mut tsub).await.payload, "hi");
    // Many messages, none lost, in order.
    for i in 0..5000u32 {
        c.publish("rec.n", Bytes::from(i.to_string()))
            .await
            .unwrap();
    }
    c.flush().await.unwrap();
    // In-process clients are not connections: /connz lists them only with
    // `internal=1`, and /varz does not count them.
    let q = format!("cid={}", local.client_id());
    assert_eq!(srv.connz_json(&q).unwrap()["num_connections"], 0);
    assert_eq!(srv.varz_json()["connections"], 1);
    // Queued bytes are visible in /connz for the in-process client.
    let q = format!("cid={}&internal=1", local.client_id());
    let mut pending = 0;
    for _ in 0..200 {
        pending = srv.connz_json(&q).unwrap()["connections"][0]["pending_bytes"]
            .as_u64()
            .unwrap();
        if pending > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(pending > 0);
    assert!(lsub.pending_bytes() >= pending);
    for i in 0..5000u32 {
        let m = tokio::time::timeout(T, lsub.next()).await.unwrap().unwrap();
        assert_eq!(m.payload, Bytes::from(i.to_string()));
    }
    assert!(lsub.try_next().is_none());
    assert_eq!(lsub.pending_bytes(), 0);
    // Requests both ways.
    let mut svc = local.subscribe("local.svc", Some("q")).unwrap();
    let l2 = local.clone();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            if let Some(r) = m.reply {
                l2.publish(
                    std::str::from_utf8(&r).unwrap(),
                    None,
                    None,
                    Bytes::from_static(b"pong"),
                )
                .unwrap();
            }
        }
    });
    let resp = c.request("local.svc", "ping".into()).await.unwrap();
    assert_eq!(resp.payload, "pong");
    let csvc = c.clone();
    let mut creq = c.subscribe("tcp.svc").await.unwrap();
    wait_subs(&srv, 5).await;
    tokio::spawn(async move {
        while let Some(m) = creq.next().await {
            csvc.publish(m.reply.unwrap(), "ok".into()).await.unwrap();
        }
    });
    let r = local
        .request("tcp.svc", Bytes::from_static(b"q"), T)
        .await
        .unwrap();
    assert_eq!(&r.payload[..], b"ok");
    assert!(matches!(
        local.request("no.one", Bytes::new(), T).await,
        Err(liftbridge::nats::NatsError::NoResponders)
    ));
    // Dropping the subscription unsubscribes; shutdown ends streams.
    drop(lsub);
    let mut ended = local.subscribe("end", None).unwrap();
    srv.shutdown().await;
    assert!(tokio::time::timeout(T, ended.next())
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn nats_monitoring_counters() {
    let srv = start(test_opts()).await;
    let c = async_nats::ConnectOptions::new()
        .name("counter")
        .connect(url(&srv))
        .await
        .unwrap();
    let mut sub = c.subscribe("cnt").await.unwrap();
    wait_subs(&srv, 1).await;
    for _ in 0..100 {
        c.publish("cnt", "x".into()).await.unwrap();
    }
    c.flush().await.unwrap();
    for _ in 0..100 {
        next(&mut sub).await;
    }
    let v = srv.varz_json();
    assert_eq!(v["in_msgs"], 100);
    assert_eq!(v["in_bytes"], 100);
    assert_eq!(v["out_msgs"], 100);
    assert_eq!(v["out_bytes"], 100);
    assert_eq!(v["connections"], 1);
    assert_eq!(v["subscriptions"], 1);
    let cz = srv.connz_json("subs=detail").unwrap();
    assert_eq!(cz["num_connections"], 1);
    assert_eq!(cz["limit"], 1024);
    let conn = &cz["connections"][0];
    assert_eq!(conn["name"], "counter");
    assert_eq!(conn["lang"], "rust");
    assert_eq!(conn["in_msgs"], 100);
    assert_eq!(conn["out_bytes"], 100);
    assert_eq!(conn["subscriptions"], 1);
    assert_eq!(conn["subscriptions_list_detail"][0]["subject"], "cnt");
    assert_eq!(conn["subscriptions_list_detail"][0]["msgs"], 100);
    let cid = conn["cid"].as_u64().unwrap();
    assert_eq!(
        srv.connz_json(&format!("cid={cid}&subs=1")).unwrap()["connections"][0]
            ["subscriptions_list"][0],
        "cnt"
    );
    assert_eq!(srv.connz_json("offset=1").unwrap()["num_connections"], 0);
    assert!(srv.connz_json("limit=abc").is_err());
    assert!(srv.connz_json("sort=nonsense").is_err());
    let sz = srv.subsz_json("subs=1&test=cnt").unwrap();
    assert_eq!(sz["num_subscriptions"], 1);
    assert_eq!(sz["subscriptions_list"][0]["subject"], "cnt");
    assert!(sz["num_matches"].as_u64().unwrap() >= 1);
    assert_eq!(srv.healthz_json()["status"], "ok");
}

#[tokio::test]
async fn nats_large_payloads_intact() {
    let srv = start(test_opts()).await;
    let c = async_nats::connect(url(&srv)).await.unwrap();
    let mut sub = c.subscribe("big").await.unwrap();
    wait_subs(&srv, 1).await;
    let p = async_nats::connect(url(&srv)).await.unwrap();
    let payloads: Vec<Bytes> = (0..3u8)
        .map(|i| {
            Bytes::from(
                (0..1_000_000u32)
                    .map(|j| (j as u8) ^ i)
                    .collect::<Vec<u8>>(),
            )
        })
        .collect();
    for pl in &payloads {
        p.publish("big", pl.clone()).await.unwrap();
    }
    p.flush().await.unwrap();
    for pl in &payloads {
        assert_eq!(&next(&mut sub).await.payload, pl);
    }
}

#[tokio::test]
async fn nats_lame_duck_without_clients_stops_at_once() {
    // Default grace period (10 s) must not apply when no client is connected;
    // in-process clients do not count.
    let srv = start(test_opts()).await;
    let _local = srv.local_client("internal");
    srv.enter_lame_duck();
    tokio::time::timeout(Duration::from_secs(2), srv.wait_stopped())
        .await
        .expect("stopped without waiting for the grace period");
    assert!(srv.is_lame_duck());
}

#[tokio::test]
async fn nats_local_concurrent_requests_share_one_reply_subscription() {
    let srv = start(test_opts()).await;
    let c = async_nats::connect(url(&srv)).await.unwrap();
    let mut reqs = c.subscribe("echo").await.unwrap();
    wait_subs(&srv, 1).await;
    let c2 = c.clone();
    tokio::spawn(async move {
        while let Some(m) = reqs.next().await {
            c2.publish(m.reply.unwrap(), m.payload).await.unwrap();
        }
    });
    let local = srv.local_client("rpc");
    let mut tasks = Vec::new();
    for i in 0..50u32 {
        let l = local.clone();
        tasks.push(tokio::spawn(async move {
            let r = l
                .request("echo", Bytes::from(i.to_string()), T)
                .await
                .unwrap();
            assert_eq!(r.payload, Bytes::from(i.to_string()));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // One reply subscription for all requests, besides the responder's.
    assert_eq!(srv.subsz_json("").unwrap()["num_subscriptions"], 2);
    assert!(matches!(
        local.request("nobody", Bytes::new(), T).await,
        Err(liftbridge::nats::NatsError::NoResponders)
    ));
}
