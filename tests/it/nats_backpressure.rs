//! Backpressure from the log to NATS publishers: a partition's recorder
//! queue is bounded in bytes, publishers that fill it are stalled (never
//! dropped, never disconnected), and the backlog is visible in `/varz` and
//! `/metrics`; internal request queues drop what does not fit, count it,
//! and the requester's retry succeeds.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use liftbridge::nats::NatsServer;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::api_common::{client, config, create, from_earliest, start, subscribe};
use crate::nats_support::{self, Raw};

/// The recorder queue limit the tests configure (the smallest the YAML
/// loader accepts).
const LIMIT: usize = 1024 * 1024;

async fn varz(addr: std::net::SocketAddr) -> Value {
    let resp = crate::api_common::http_get(addr, "/varz").await;
    let (_, body) = resp.split_once("\r\n\r\n").expect("http response");
    serde_json::from_str(body).expect("varz json")
}

/// The `/varz` entry of the recorder of `subject`, if running.
fn recorder<'a>(v: &'a Value, subject: &str) -> Option<&'a Value> {
    v["liftbridge"]["recorders"]
        .as_array()?
        .iter()
        .find(|r| r["subject"] == subject)
}

/// One raw-socket publisher: `n` messages `<id>:<seq>:<padding>` on
/// `subject`, written flat out in large chunks, then PING/PONG. Returns
/// whatever the server sent before the PONG (must hold no `-ERR`).
async fn publish_flat_out(
    addr: std::net::SocketAddr,
    subject: &str,
    id: usize,
    n: usize,
) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut info = [0u8; 4096];
    let k = s.read(&mut info).await.expect("INFO");
    assert!(k > 0);
    s.write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false}\r\n")
        .await
        .unwrap();
    let pad = "x".repeat(900);
    let mut chunk = Vec::with_capacity(256 * 1024);
    for seq in 0..n {
        let body = format!("{id}:{seq}:{pad}");
        chunk.extend_from_slice(format!("PUB {subject} {}\r\n", body.len()).as_bytes());
        chunk.extend_from_slice(body.as_bytes());
        chunk.extend_from_slice(b"\r\n");
        if chunk.len() >= 200 * 1024 {
            s.write_all(&chunk)
                .await
                .expect("publisher not disconnected");
            chunk.clear();
        }
    }
    chunk.extend_from_slice(b"PING\r\n");
    s.write_all(&chunk)
        .await
        .expect("publisher not disconnected");
    let mut out = Vec::new();
    let mut b = [0u8; 4096];
    while !out.ends_with(b"PONG\r\n") {
        let k = tokio::time::timeout(Duration::from_secs(120), s.read(&mut b))
            .await
            .expect("PONG in time")
            .expect("read");
        assert!(
            k > 0,
            "publisher {id} disconnected: {:?}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(&b[..k]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_backpressure_recorder_queue_bounded_publishers_paced_nothing_lost() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.nats.local_max_pending = LIMIT;
    let node = start(cfg).await;
    let http = node.http_addr().expect("http");
    let mut c = client(&node).await;
    create(&mut c, "bp", "bp.foo", 1).await;
    // The recorder is running once it shows in /varz.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while recorder(&varz(http).await, "bp.foo").is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "recorder never listed in /varz"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let addr = node.nats_addr();
    let (publishers, per) = (3usize, 6000usize);
    let total = publishers * per;

    // Watch the backlog while the publishers run.
    let stop = tokio_util::sync::CancellationToken::new();
    let watch = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut seen_max = 0u64;
            let mut samples = 0;
            while !stop.is_cancelled() {
                let v = varz(http).await;
                if let Some(r) = recorder(&v, "bp.foo") {
                    seen_max = seen_max.max(r["pending_bytes"].as_u64().unwrap());
                    samples += 1;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (seen_max, samples)
        })
    };
    let tasks: Vec<_> = (0..publishers)
        .map(|id| tokio::spawn(async move { publish_flat_out(addr, "bp.foo", id, per).await }))
        .collect();
    for t in tasks {
        let out = t.await.unwrap();
        assert!(!out.contains("-ERR"), "publisher got an error: {out}");
    }
    stop.cancel();
    let (seen_max, samples) = watch.await.unwrap();
    assert!(samples > 0, "the backlog was sampled");
    assert!(
        seen_max <= LIMIT as u64,
        "sampled backlog {seen_max} over {LIMIT}"
    );

    let v = varz(http).await;
    let r = recorder(&v, "bp.foo").expect("recorder in /varz").clone();
    let high = r["pending_bytes_max"].as_u64().unwrap();
    assert!(
        high <= LIMIT as u64,
        "backlog reached {high}, over the limit {LIMIT}: {r}"
    );
    // The queue did fill (the publishers outran the store) and they were
    // held back rather than cut off.
    assert!(high > (LIMIT / 2) as u64, "the queue never filled: {r}");
    assert!(
        r["stalls"].as_u64().unwrap() > 0,
        "publishers were never stalled: {r}"
    );
    assert!(r["stall_seconds"].as_f64().unwrap() > 0.0, "{r}");
    assert_eq!(v["slow_consumers"], 0, "{v}");
    assert_eq!(v["liftbridge"]["recorder_max_pending"], LIMIT, "{v}");

    // /metrics shows the same queue.
    let m = crate::api_common::http_get(http, "/metrics").await;
    let line = |name: &str| -> f64 {
        let prefix = format!("{name}{{subject=\"bp.foo\"}} ");
        let l = m
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in /metrics:\n{m}"));
        l[prefix.len()..].trim().parse().unwrap()
    };
    assert!(line("liftbridge_nats_recorder_pending_max_bytes") <= LIMIT as f64);
    assert_eq!(line("liftbridge_nats_recorder_limit_bytes"), LIMIT as f64);
    assert!(line("liftbridge_nats_recorder_stall_seconds_total") > 0.0);
    assert!(line("liftbridge_nats_recorder_pending_bytes") >= 0.0);

    // Every message is in the stream, once, in order per publisher.
    let mut sub = subscribe(&mut c, from_earliest("bp", 0)).await;
    let mut next_seq: HashMap<usize, usize> = HashMap::new();
    for i in 0..total {
        let m = tokio::time::timeout(Duration::from_secs(30), sub.next())
            .await
            .unwrap_or_else(|_| panic!("message {i} of {total} in time"))
            .expect("stream open")
            .expect("message ok");
        assert_eq!(m.offset, i as i64);
        let text = String::from_utf8_lossy(&m.value).into_owned();
        let mut parts = text.splitn(3, ':');
        let id: usize = parts.next().unwrap().parse().unwrap();
        let seq: usize = parts.next().unwrap().parse().unwrap();
        let want = next_seq.entry(id).or_insert(0);
        assert_eq!(
            seq, *want,
            "publisher {id}: out of order or duplicated at offset {i}"
        );
        *want += 1;
    }
    assert_eq!(next_seq.len(), publishers);
    assert!(next_seq.values().all(|&n| n == per), "{next_seq:?}");
    let extra = tokio::time::timeout(Duration::from_millis(300), sub.next()).await;
    assert!(extra.is_err(), "more than {total} messages recorded");
    // The backlog is gone once the store has caught up.
    let r = recorder(&varz(http).await, "bp.foo").unwrap().clone();
    assert_eq!(r["pending_bytes"], 0, "{r}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_backpressure_internal_request_queue_drops_when_full_and_retry_succeeds() {
    let mut opts = nats_support::test_opts();
    opts.local_max_pending = LIMIT;
    let srv: NatsServer = nats_support::start(opts).await;
    let local = srv.local_client("responder");
    // An internal request subscription whose consumer is not reading yet.
    let mut sub = local.subscribe("svc.req", None).unwrap();
    let nc = async_nats::connect(nats_support::url(&srv)).await.unwrap();
    // Fill the queue past its limit: 3 MiB of requests for a 1 MiB queue.
    let payload = Bytes::from(vec![b'r'; 16 * 1024]);
    for _ in 0..192 {
        nc.publish("svc.req", payload.clone()).await.unwrap();
    }
    nc.flush().await.unwrap();
    // The publisher was never stalled or cut off: a PING round trip of a
    // fresh raw connection and of this one work at once.
    let mut raw = Raw::connected(&srv).await;
    let out = raw.sync().await;
    assert!(out.is_empty(), "{:?}", String::from_utf8_lossy(&out));
    // Every request is either queued or counted as dropped (polled: the
    // server may still be reading the socket).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let dropped = loop {
        let v = srv.varz_json();
        let d = v["liftbridge"]["internal_dropped"].as_u64().unwrap();
        if d + sub.queue().pending_msgs() == 192 {
            break d;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "requests unaccounted for: {v}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(dropped > 0, "a 1 MiB queue cannot hold 3 MiB");
    assert!(
        sub.pending_bytes() <= LIMIT as u64,
        "{}",
        sub.pending_bytes()
    );
    assert!(sub.queue().dropped() == dropped);

    // A request while the queue is full is lost: the requester times out.
    let req = async_nats::Request::new()
        .payload(payload.clone())
        .timeout(Some(Duration::from_millis(300)));
    let first = nc.send_request("svc.req", req).await;
    assert!(first.is_err(), "a request into a full queue gets no answer");
    // The consumer catches up; the retry is answered.
    let responder = tokio::spawn(async move {
        let mut answered = 0;
        while let Some(m) = sub.next().await {
            if let Some(reply) = m.reply {
                let reply = std::str::from_utf8(&reply).unwrap().to_string();
                local
                    .publish(&reply, None, None, Bytes::from_static(b"ok"))
                    .unwrap();
                answered += 1;
            }
        }
        answered
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let answer = loop {
        let req = async_nats::Request::new()
            .payload(Bytes::from_static(b"again"))
            .timeout(Some(Duration::from_millis(500)));
        match nc.send_request("svc.req", req).await {
            Ok(m) => break m,
            Err(e) => assert!(
                tokio::time::Instant::now() < deadline,
                "retries kept failing: {e}"
            ),
        }
    };
    assert_eq!(answer.payload, "ok");
    let m = srv.varz_json();
    // The request sent into the full queue was counted as dropped too.
    assert!(
        m["liftbridge"]["internal_dropped"].as_u64().unwrap() > dropped,
        "{m}"
    );
    srv.shutdown().await;
    let _ = responder.await;
}
