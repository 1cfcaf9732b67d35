//! The admin HTTP API (`/api/v1/…`) against an in-process node: every
//! endpoint, with good and bad input, and messages recorded from NATS and
//! from HTTP publishes read back through the messages endpoint.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use liftbridge::api::proto;
use liftbridge::wire::envelope;
use serde_json::{json, Value};
use std::net::SocketAddr;

use crate::admin_http::*;
use crate::api_common::{config, eventually, start};

fn http(node: &liftbridge::node::NodeHandle) -> SocketAddr {
    node.http_addr().expect("http enabled")
}

async fn create(addr: SocketAddr, body: Value) -> Value {
    let r = post(addr, "/api/v1/streams", &body).await;
    assert_eq!(
        r.status,
        201,
        "create {body}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_info_health_and_nats_views() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let a = http(&node);
    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .unwrap();
    let _sub = nc.subscribe("watch.me").await.unwrap();
    nc.publish("x", "hello".into()).await.unwrap();
    nc.flush().await.unwrap();
    create(a, json!({"name": "s1", "subject": "s1", "partitions": 3})).await;

    let r = get(a, "/api/v1/info").await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .contains("application/json"));
    let v = r.json();
    assert_eq!(v["server_id"], node.server_id());
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["grpc_addr"], node.grpc_addr().to_string());
    assert_eq!(v["nats_addr"], node.nats_addr().to_string());
    assert_eq!(v["http_addr"], a.to_string());
    assert_eq!(v["metadata_leader"], node.server_id());
    assert_eq!(v["is_metadata_leader"], true);
    // A lone node is the whole cluster, registered with its real addresses.
    assert_eq!(v["cluster"]["role"], "leader");
    assert_eq!(v["cluster"]["controller"], node.server_id());
    let members = v["cluster"]["nodes"].as_array().unwrap();
    assert_eq!(members.len(), 1, "{v}");
    assert_eq!(members[0]["voter"], true);
    assert_eq!(members[0]["registered"], true);
    assert_eq!(members[0]["port"], node.grpc_addr().port());
    assert_eq!(members[0]["http_addr"], a.to_string());
    assert_eq!(members[0]["nats_addr"], node.nats_addr().to_string());
    assert_eq!(v["streams"], 1);
    assert_eq!(v["partitions"], 3);
    assert!(v["start_time_ns"].as_i64().unwrap() > 1_600_000_000_000_000_000);
    assert!(v["uptime_ms"].as_i64().unwrap() >= 0);
    assert!(v["nats"]["connections"].as_u64().unwrap() >= 1);
    assert!(v["nats"]["total_connections"].as_u64().unwrap() >= 1);
    assert!(v["nats"]["in_msgs"].as_u64().unwrap() >= 1);
    assert!(v["nats"]["in_bytes"].as_u64().unwrap() >= 5);
    assert!(v["nats"]["subscriptions"].as_u64().unwrap() >= 1);
    assert!(v["nats"]["slow_consumers"].is_u64());
    assert!(v["nats"]["out_msgs"].is_u64() && v["nats"]["out_bytes"].is_u64());

    let r = get(a, "/api/v1/health").await;
    assert_eq!((r.status, r.json()["status"].clone()), (200, json!("ok")));

    // The client's connection and its subscription are listed.
    let v = get(a, "/api/v1/connections").await.json();
    let conns = v["connections"].as_array().unwrap();
    assert!(
        conns.iter().any(|c| c["subscriptions_list"]
            .as_array()
            .is_some_and(|l| l.iter().any(|s| s == "watch.me"))),
        "{v}"
    );
    // Query arguments pass through.
    let v = get(a, "/api/v1/connections?limit=0").await.json();
    assert_eq!(v["connections"].as_array().unwrap().len(), 0);
    assert_eq!(get(a, "/api/v1/connections?sort=bogus").await.status, 400);
    let v = get(a, "/api/v1/subscriptions").await.json();
    assert!(v["num_subscriptions"].as_u64().unwrap() >= 1, "{v}");
    assert!(
        v["subscriptions_list"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["subject"] == "watch.me"),
        "{v}"
    );

    // Wrong methods and unknown paths.
    let r = request(a, "DELETE", "/api/v1/info", &[], None).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET"));
    assert!(r.error().contains("DELETE"));
    let r = request(a, "PUT", "/api/v1/streams", &[], None).await;
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, POST")));
    assert_eq!(get(a, "/api/v1/nope").await.status, 404);
    assert_eq!(get(a, "/api/v1/streams/s1/bogus").await.status, 404);
    // Monitoring endpoints stay where they were.
    assert_eq!(get(a, "/varz").await.status, 200);
    assert_eq!(get(a, "/healthz").await.status, 200);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_stream_lifecycle_and_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let a = http(&node);

    let v = create(
        a,
        json!({"name": "zeta", "subject": "zeta.in", "group": "g", "partitions": 2,
               "retention_max_messages": 50, "retention_max_age_ms": 60000,
               "compact_enabled": true, "optimistic_concurrency_control": false}),
    )
    .await;
    assert_eq!(v["name"], "zeta");
    assert_eq!(v["subject"], "zeta.in");
    assert_eq!(v["group"], "g");
    assert!(v["creation_timestamp_ns"].as_i64().unwrap() > 0);
    let parts = v["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(p["id"], i);
        assert_eq!(p["leader"], node.server_id());
        assert_eq!(p["replicas"], json!([node.server_id()]));
        assert_eq!(p["isr"], json!([node.server_id()]));
        assert_eq!(p["paused"], false);
        assert_eq!(p["readonly"], false);
        assert_eq!(p["newest_offset"], -1);
        assert_eq!(p["high_watermark"], -1);
        assert_eq!(p["oldest_offset"], -1);
        assert_eq!(p["messages"], 0);
        assert_eq!(p["bytes"], 0);
    }
    create(a, json!({"name": "alpha", "subject": "alpha"})).await;

    // Sorted by name.
    let v = get(a, "/api/v1/streams").await.json();
    let names: Vec<&str> = v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "zeta"]);
    // Trailing slash and percent-encoding.
    assert_eq!(get(a, "/api/v1/streams/").await.status, 200);
    assert_eq!(
        get(a, "/api/v1/streams/%61lpha").await.json()["name"],
        "alpha"
    );

    // Creation errors: the gRPC validation's messages and codes.
    let r = post(
        a,
        "/api/v1/streams",
        &json!({"name": "zeta", "subject": "other"}),
    )
    .await;
    assert_eq!(r.status, 409);
    assert!(r.error().contains("already exists"), "{}", r.error());
    let r = post(
        a,
        "/api/v1/streams",
        &json!({"name": "bad", "subject": "a b"}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.error().contains("Invalid subject"), "{}", r.error());
    let r = post(a, "/api/v1/streams", &json!({"subject": "x"})).await;
    assert_eq!(
        (r.status, r.error()),
        (400, "No stream name provided".into())
    );
    let r = post(
        a,
        "/api/v1/streams",
        &json!({"name": "n", "subject": "n", "partitions": -2}),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = post(
        a,
        "/api/v1/streams",
        &json!({"name": "n", "subject": "n", "replication_factor": 5}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.error().contains("replication factor"), "{}", r.error());
    let r = post(
        a,
        "/api/v1/streams",
        &json!({"name": "n", "subject": "n", "partitons": 2}),
    )
    .await;
    assert_eq!(r.status, 400, "unknown fields are refused");
    assert!(r.error().contains("partitons"), "{}", r.error());
    let r = post(
        a,
        "/api/v1/streams",
        &json!({"name": "n", "subject": "n", "partitions": "2"}),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = request(
        a,
        "POST",
        "/api/v1/streams",
        &[("Content-Type", "application/json")],
        Some(b"{\"name\": \"n\", "),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.error().contains("invalid JSON"), "{}", r.error());
    let r = request(
        a,
        "POST",
        "/api/v1/streams",
        &[("Content-Type", "text/plain")],
        Some(b"name=n"),
    )
    .await;
    assert_eq!(r.status, 415);
    let r = request(a, "POST", "/api/v1/streams", &[], None).await;
    assert_eq!(r.status, 400);
    // A body over the limit.
    let big = vec![b' '; liftbridge::http::MAX_BODY + 10];
    let r = request(
        a,
        "POST",
        "/api/v1/streams",
        &[("Content-Type", "application/json")],
        Some(&big),
    )
    .await;
    assert_eq!(r.status, 413);
    assert_eq!(
        get(a, "/api/v1/streams").await.json()["streams"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Unknown stream and partition, bad partition id.
    assert_eq!(get(a, "/api/v1/streams/nope").await.status, 404);
    assert_eq!(
        get(a, "/api/v1/streams/nope/partitions/0").await.status,
        404
    );
    assert_eq!(
        get(a, "/api/v1/streams/zeta/partitions/2").await.status,
        404
    );
    assert_eq!(
        get(a, "/api/v1/streams/zeta/partitions/-1").await.status,
        404
    );
    assert_eq!(
        get(a, "/api/v1/streams/zeta/partitions/x").await.status,
        400
    );
    assert_eq!(
        get(a, "/api/v1/streams/zeta/partitions/99999999999")
            .await
            .status,
        400
    );
    assert_eq!(get(a, "/api/v1/streams/%zz").await.status, 400);
    assert_eq!(
        post(a, "/api/v1/streams/nope/pause", &json!({}))
            .await
            .status,
        404
    );
    assert_eq!(
        post(a, "/api/v1/streams/nope/resume", &json!({}))
            .await
            .status,
        404
    );
    assert_eq!(
        post(
            a,
            "/api/v1/streams/nope/readonly",
            &json!({"readonly": true})
        )
        .await
        .status,
        404
    );
    assert_eq!(
        post(a, "/api/v1/streams/zeta/pause", &json!({"partitions": [7]}))
            .await
            .status,
        404
    );
    assert_eq!(
        post(
            a,
            "/api/v1/streams/zeta/resume",
            &json!({"partitions": [7]})
        )
        .await
        .status,
        404
    );
    assert_eq!(
        post(a, "/api/v1/streams/zeta/readonly", &json!({}))
            .await
            .status,
        400
    );
    assert_eq!(get(a, "/api/v1/streams/zeta/pause").await.status, 405);

    // Partition detail: the effective configuration.
    let v = get(a, "/api/v1/streams/zeta/partitions/1").await.json();
    assert_eq!(v["stream"], "zeta");
    assert_eq!(v["id"], 1);
    assert_eq!(v["log_end_offset"], 0);
    assert_eq!(v["config"]["retention_max_messages"], 50);
    assert_eq!(v["config"]["retention_max_age_ms"], 60000);
    assert_eq!(v["config"]["compact_enabled"], true);
    assert_eq!(v["config"]["optimistic_concurrency_control"], false);
    assert_eq!(v["paused"], false);
    assert_eq!(v["paused_timestamp_ns"], 0);

    // Pause one partition, then all; resume; readonly.
    let v = post(a, "/api/v1/streams/zeta/pause", &json!({"partitions": [1]})).await;
    assert_eq!(v.status, 200);
    let v = v.json();
    assert_eq!(v["partitions"][0]["paused"], false);
    assert_eq!(v["partitions"][1]["paused"], true);
    assert_eq!(
        v["partitions"][1]["local"], false,
        "a paused partition is closed"
    );
    let d = get(a, "/api/v1/streams/zeta/partitions/1").await.json();
    assert!(d["paused_timestamp_ns"].as_i64().unwrap() > 0);
    let r = get(a, "/api/v1/streams/zeta/partitions/1/messages").await;
    assert_eq!(r.status, 409);
    assert!(r.error().contains("paused"));
    // An empty body pauses everything.
    let r = request(a, "POST", "/api/v1/streams/zeta/pause", &[], None).await;
    assert_eq!(r.status, 200);
    assert!(r.json()["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["paused"] == true));
    let v = post(
        a,
        "/api/v1/streams/zeta/resume",
        &json!({"partitions": [0]}),
    )
    .await
    .json();
    assert_eq!(v["partitions"][0]["paused"], false);
    assert_eq!(
        v["partitions"][0]["local"], true,
        "resumed partitions run at once"
    );
    assert_eq!(v["partitions"][1]["paused"], true);
    let v = post(a, "/api/v1/streams/zeta/resume", &json!({}))
        .await
        .json();
    assert!(v["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["paused"] == false && p["local"] == true));
    // Resumed partitions record again right away.
    let r = post(
        a,
        "/api/v1/streams/zeta/partitions/1/messages",
        &json!({"value": "after resume"}),
    )
    .await;
    assert_eq!((r.status, r.json()["offset"].clone()), (200, json!(0)));

    let v = post(
        a,
        "/api/v1/streams/zeta/readonly",
        &json!({"readonly": true, "partitions": [0]}),
    )
    .await
    .json();
    assert_eq!(v["partitions"][0]["readonly"], true);
    assert_eq!(v["partitions"][1]["readonly"], false);
    let r = post(
        a,
        "/api/v1/streams/zeta/partitions/0/messages",
        &json!({"value": "x"}),
    )
    .await;
    assert_eq!(r.status, 409, "readonly refuses publishes");
    assert!(r.error().contains("readonly"), "{}", r.error());
    let d = get(a, "/api/v1/streams/zeta/partitions/0").await.json();
    assert_eq!(d["readonly"], true);
    assert!(d["readonly_timestamp_ns"].as_i64().unwrap() > 0);
    let v = post(
        a,
        "/api/v1/streams/zeta/readonly",
        &json!({"readonly": false}),
    )
    .await
    .json();
    assert!(v["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["readonly"] == false));
    let r = post(
        a,
        "/api/v1/streams/zeta/partitions/0/messages",
        &json!({"value": "x"}),
    )
    .await;
    assert_eq!(r.status, 200);

    // Delete frees the name and the files.
    let stream_dir = dir.path().join("streams").join("zeta");
    assert!(stream_dir.exists());
    let r = request(a, "DELETE", "/api/v1/streams/zeta", &[], None).await;
    assert_eq!((r.status, r.json()), (200, json!({"deleted": "zeta"})));
    assert_eq!(get(a, "/api/v1/streams/zeta").await.status, 404);
    assert_eq!(
        request(a, "DELETE", "/api/v1/streams/zeta", &[], None)
            .await
            .status,
        404
    );
    eventually("stream files removed", || {
        let d = stream_dir.clone();
        async move { !d.exists() }
    })
    .await;
    let v = create(a, json!({"name": "zeta", "subject": "zeta.new"})).await;
    assert_eq!(v["subject"], "zeta.new");
    assert_eq!(
        v["partitions"][0]["newest_offset"], -1,
        "the recreated stream is empty"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_messages_from_nats_and_http() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let a = http(&node);
    create(a, json!({"name": "ev", "subject": "ev.*"})).await;

    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .unwrap();
    for i in 0..6 {
        nc.publish_with_reply(format!("ev.k{}", i % 2), "reply.to", format!("m{i}").into())
            .await
            .unwrap();
    }
    // An enveloped publish carries key and headers.
    let env = envelope::encode_message(&proto::Message {
        key: bytes::Bytes::from_static(b"key-6"),
        value: bytes::Bytes::from_static(b"m6"),
        headers: [("trace".to_string(), b"t-1".to_vec().into())]
            .into_iter()
            .collect(),
        ..Default::default()
    });
    nc.publish("ev.env", env).await.unwrap();
    nc.flush().await.unwrap();
    eventually("7 messages recorded", || async {
        get(a, "/api/v1/streams/ev").await.json()["partitions"][0]["messages"] == 7
    })
    .await;

    let base = "/api/v1/streams/ev/partitions/0/messages";
    let v = get(a, base).await.json();
    let msgs = v["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 7);
    for (i, m) in msgs.iter().enumerate().take(6) {
        assert_eq!(m["offset"], i);
        assert_eq!(m["value_utf8"], format!("m{i}"));
        assert_eq!(m["value_b64"], B64.encode(format!("m{i}")));
        assert_eq!(m["subject"], format!("ev.k{}", i % 2));
        assert_eq!(m["reply_subject"], "reply.to");
        assert_eq!(m["key_b64"], "");
        assert!(m["timestamp_ns"].as_i64().unwrap() > 1_600_000_000_000_000_000);
    }
    assert_eq!(msgs[6]["subject"], "ev.env");
    assert_eq!(msgs[6]["key_b64"], B64.encode("key-6"));
    assert_eq!(msgs[6]["headers"]["trace"], B64.encode("t-1"));
    assert_eq!(v["next_offset"], 7);
    assert_eq!(v["high_watermark"], 6);
    assert_eq!(v["oldest_offset"], 0);

    // Paging with limit and offset.
    let v = get(a, &format!("{base}?offset=2&limit=3")).await.json();
    let offs = offsets(&v);
    assert_eq!(offs, [2, 3, 4]);
    assert_eq!(v["next_offset"], 5);
    let v = get(a, &format!("{base}?offset=5&limit=1000")).await.json();
    assert_eq!(v["messages"].as_array().unwrap().len(), 2);
    // Past the end: empty, not an error; next_offset is the log end.
    let v = get(a, &format!("{base}?offset=100")).await.json();
    assert!(v["messages"].as_array().unwrap().is_empty());
    assert_eq!(v["next_offset"], 7);
    // The last messages.
    let v = get(a, &format!("{base}?from=latest&limit=2")).await.json();
    let offs = offsets(&v);
    assert_eq!(offs, [5, 6]);
    let v = get(a, &format!("{base}?from=latest&limit=50")).await.json();
    assert_eq!(v["messages"].as_array().unwrap().len(), 7);
    // By time: the first message at or after the timestamp of offset 3.
    let all = get(a, base).await.json();
    let t3 = all["messages"][3]["timestamp_ns"].as_i64().unwrap();
    let t2 = all["messages"][2]["timestamp_ns"].as_i64().unwrap();
    let v = get(a, &format!("{base}?since_ns={t3}&limit=1"))
        .await
        .json();
    let got = v["messages"][0]["offset"].as_i64().unwrap();
    // Messages may share a timestamp; the first at/after t3 is never after 3.
    assert!(
        got <= 3
            && all["messages"][got as usize]["timestamp_ns"]
                .as_i64()
                .unwrap()
                >= t3
    );
    if t2 < t3 {
        assert_eq!(got, 3);
    }
    let v = get(a, &format!("{base}?since_ns={}", i64::MAX))
        .await
        .json();
    assert!(v["messages"].as_array().unwrap().is_empty());
    let v = get(a, &format!("{base}?since_ns=0&limit=1")).await.json();
    assert_eq!(v["messages"][0]["offset"], 0);

    // Bad queries.
    for q in [
        "offset=-1",
        "offset=abc",
        "offset=1.5",
        "since_ns=-5",
        "since_ns=x",
        "limit=1001",
        "limit=0",
        "limit=-3",
        "limit=ten",
        "from=middle",
        "offset=1&since_ns=2",
        "offset=1&from=latest",
    ] {
        let r = get(a, &format!("{base}?{q}")).await;
        assert_eq!(r.status, 400, "{q}: {}", String::from_utf8_lossy(&r.body));
    }
    assert_eq!(
        get(a, "/api/v1/streams/ev/partitions/1/messages")
            .await
            .status,
        404
    );
    assert_eq!(
        get(a, "/api/v1/streams/none/partitions/0/messages")
            .await
            .status,
        404
    );
    assert_eq!(request(a, "DELETE", base, &[], None).await.status, 405);

    // Partition detail reflects the data.
    let d = get(a, "/api/v1/streams/ev/partitions/0").await.json();
    assert_eq!(d["newest_offset"], 6);
    assert_eq!(d["high_watermark"], 6);
    assert_eq!(d["oldest_offset"], 0);
    assert_eq!(d["log_end_offset"], 7);
    assert_eq!(d["messages"], 7);
    assert!(d["bytes"].as_u64().unwrap() > 0);
    assert!(d["disk_bytes"].as_u64().unwrap() > 0);
    assert_eq!(d["subscribers"], 0);
    let recv = &d["message_received_timestamp_ns"];
    let (first, latest) = (
        recv["first"].as_i64().unwrap(),
        recv["latest"].as_i64().unwrap(),
    );
    assert!(first > 0 && latest >= first);
    // A wildcard stream has no literal subject to publish to (as in gRPC).
    let r = post(a, base, &json!({"value": "x"})).await;
    assert_eq!(r.status, 400);
    assert!(r.error().contains("subject"), "{}", r.error());

    // NATS headers of a plain publish are shown with the message.
    create(a, json!({"name": "hdr", "subject": "hdr"})).await;
    let mut h = async_nats::HeaderMap::new();
    h.insert("Trace-Id", "abc-123");
    h.insert("subject", "forged");
    nc.publish_with_headers("hdr", h, "{\"a\":1}".into())
        .await
        .unwrap();
    nc.flush().await.unwrap();
    eventually("the header message recorded", || async {
        get(a, "/api/v1/streams/hdr").await.json()["partitions"][0]["messages"] == 1
    })
    .await;
    let v = get(a, "/api/v1/streams/hdr/partitions/0/messages")
        .await
        .json();
    let m = &v["messages"][0];
    assert_eq!(m["value_utf8"], "{\"a\":1}");
    assert_eq!(m["headers"]["Trace-Id"], B64.encode("abc-123"));
    assert_eq!(
        m["subject"], "hdr",
        "the stenographer's subject, not the forged header"
    );
    assert!(m["headers"].get("subject").is_none(), "{m}");

    // Publishing over HTTP: text, base64 and headers.
    create(a, json!({"name": "pub", "subject": "pub", "partitions": 2})).await;
    let pbase = "/api/v1/streams/pub/partitions/1/messages";
    let r = post(
        a,
        pbase,
        &json!({"value": "héllo", "key": "k1", "headers": {"h1": "v1"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let ack = r.json();
    assert_eq!(ack["offset"], 0);
    assert!(ack["timestamp_ns"].as_i64().unwrap() > 0);
    let r = post(
        a,
        pbase,
        &json!({"value_b64": B64.encode([0xff, 0x00, 0xfe]), "key_b64": B64.encode("k2")}),
    )
    .await;
    assert_eq!(r.json()["offset"], 1);
    let v = get(a, pbase).await.json();
    let m = &v["messages"][0];
    assert_eq!(m["value_utf8"], "héllo");
    assert_eq!(m["key_b64"], B64.encode("k1"));
    assert_eq!(m["headers"]["h1"], B64.encode("v1"));
    assert_eq!(
        m["subject"], "pub.1",
        "HTTP publishes go to the partition subject"
    );
    assert_eq!(m["timestamp_ns"], ack["timestamp_ns"]);
    let m = &v["messages"][1];
    assert!(m["value_utf8"].is_null());
    assert_eq!(m["value_b64"], B64.encode([0xff, 0x00, 0xfe]));
    assert_eq!(
        get(a, "/api/v1/streams/pub").await.json()["partitions"][0]["messages"],
        0
    );
    // Bad publishes.
    for body in [
        json!({"value": "a", "value_b64": "YQ=="}),
        json!({"value_b64": "not base64!"}),
        json!({"value": 5}),
        json!({"valu": "x"}),
        json!({"headers": {"h": 1}}),
    ] {
        let r = post(a, pbase, &body).await;
        assert_eq!(r.status, 400, "{body}");
    }
    let r = post(
        a,
        "/api/v1/streams/pub/partitions/3/messages",
        &json!({"value": "x"}),
    )
    .await;
    assert_eq!(r.status, 404);

    // Retention removed the head: an offset below the oldest starts there.
    create(
        a,
        json!({"name": "short", "subject": "short", "retention_max_messages": 2,
                     "cleaner_interval_ms": 50}),
    )
    .await;
    for i in 0..5 {
        let r = post(
            a,
            "/api/v1/streams/short/partitions/0/messages",
            &json!({"value": format!("v{i}")}),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    eventually("retention applied", || async {
        get(a, "/api/v1/streams/short/partitions/0").await.json()["oldest_offset"] == 3
    })
    .await;
    let v = get(a, "/api/v1/streams/short/partitions/0/messages?offset=0")
        .await
        .json();
    let offs = offsets(&v);
    assert_eq!(offs, [3, 4]);
    assert_eq!(v["oldest_offset"], 3);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_odd_requests_get_json_errors_and_the_server_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let a = http(&node);
    create(a, json!({"name": "s", "subject": "s"})).await;
    let m = "/api/v1/streams/s/partitions/0/messages";
    let long = "x".repeat(4000);
    let cases: Vec<(&str, String, u16)> = vec![
        ("GET", format!("/api/v1/streams/{long}"), 404),
        ("GET", "/api/v1/streams/%00".into(), 404),
        ("GET", "/api/v1/streams/..".into(), 404),
        ("GET", "/api/v1/streams/%C3%28".into(), 400),
        ("GET", "/api/v1/streams/s/partitions/".into(), 404),
        (
            "GET",
            "/api/v1/streams/s/partitions/0/messages/x".into(),
            404,
        ),
        ("GET", "/api/v1/streams/s/partitions/+0".into(), 200),
        ("GET", "/api/v1/streams/s/partitions/2147483648".into(), 400),
        ("GET", format!("{m}?offset=9223372036854775807"), 200),
        ("GET", format!("{m}?offset=18446744073709551615"), 400),
        ("GET", format!("{m}?limit=99999999999999999999999"), 400),
        ("GET", format!("{m}?from=latest&limit=1000"), 200),
        ("GET", format!("{m}?since_ns=9223372036854775807"), 200),
        ("GET", format!("{m}?offset=%31"), 200),
        ("GET", format!("{m}?offset=%zz"), 400),
        ("PATCH", "/api/v1/streams/s".into(), 405),
        ("OPTIONS", "/api/v1/streams".into(), 405),
        ("POST", "/api/v1/info".into(), 405),
        ("POST", "/api/v1/connections".into(), 405),
        ("GET", "/api/v1/".into(), 404),
    ];
    for (method, path, want) in cases {
        let r = request(a, method, &path, &[], None).await;
        assert_eq!(r.status, want, "{method} {}", &path[..path.len().min(80)]);
        let v = r.json();
        if want != 200 {
            assert_eq!(v["code"], want);
            assert!(v["error"].is_string());
        }
    }
    // JSON bodies of the wrong shape.
    for body in [
        "[]",
        "null",
        "\"x\"",
        "{\"name\": {}}",
        "{\"partitions\": 1e99}",
    ] {
        let r = request(
            a,
            "POST",
            "/api/v1/streams",
            &[("Content-Type", "application/json")],
            Some(body.as_bytes()),
        )
        .await;
        assert_eq!(r.status, 400, "{body}");
    }
    // Without auth too, another site's page cannot change anything (a
    // browser reaches localhost); reads stay possible.
    let r = request(
        a,
        "POST",
        "/api/v1/streams/s/pause",
        &[("Origin", "http://evil.example")],
        None,
    )
    .await;
    assert_eq!(r.status, 403);
    let r = request(
        a,
        "GET",
        "/api/v1/streams/s",
        &[("Origin", "http://evil.example")],
        None,
    )
    .await;
    assert_eq!(r.json()["partitions"][0]["paused"], false);
    assert_eq!(get(a, "/api/v1/health").await.status, 200);
    node.shutdown().await;
}

/// The offsets of a message page, in order.
fn offsets(page: &Value) -> Vec<i64> {
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["offset"].as_i64().unwrap())
        .collect()
}
