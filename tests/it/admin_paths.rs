//! The admin HTTP API under arbitrary requests (proptest-generated paths,
//! query strings, methods and bodies): every request gets a complete HTTP
//! response with a status below 500, and the node keeps answering —
//! never a panic, a dropped connection or an internal error.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use crate::admin_http::request;
use crate::api_common::{client, config, create, start};

/// A path segment: a route word, an encoded or malformed escape, or
/// arbitrary URL-safe text.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(vec![
            "streams",
            "partitions",
            "messages",
            "cursors",
            "groups",
            "info",
            "health",
            "brokers",
            "known",
            "0",
            "1",
            "-1",
            "99999999999999999999",
            "",
            ".",
            "..",
            "%2F",
            "%zz",
            "%",
            "%ff",
            "%00",
            "a%2Eb",
        ])
        .prop_map(str::to_string),
        "[A-Za-z0-9._~!$&'()*+,;=:@-]{0,12}",
        proptest::collection::vec(any::<u8>(), 0..6)
            .prop_map(|b| b.iter().map(|x| format!("%{x:02X}")).collect()),
    ]
}

fn query() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        (
            proptest::sample::select(vec![
                "offset",
                "count",
                "max",
                "start",
                "since",
                "limit",
                "partition",
                "x",
                "",
            ]),
            prop_oneof![
                "[A-Za-z0-9%._-]{0,10}",
                any::<i64>().prop_map(|n| n.to_string()),
                Just("%zz".to_string()),
            ],
        ),
        0..4,
    )
    .prop_map(|kv| {
        if kv.is_empty() {
            String::new()
        } else {
            let q: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("?{}", q.join("&"))
        }
    })
}

fn body() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        Just(None),
        Just(Some(b"{}".to_vec())),
        Just(Some(br#"{"name":"p","subject":"p"}"#.to_vec())),
        Just(Some(br#"{"value":"aGk=","key":null}"#.to_vec())),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Some),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_paths_arbitrary_requests_get_a_status() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    // A stream to hit, so that deeper routes are reached too.
    create(&mut c, "known", "known", 2).await;
    let addr = node.http_addr().expect("http enabled");

    let strategy = (
        proptest::sample::select(vec![
            "GET", "HEAD", "POST", "DELETE", "PUT", "PATCH", "OPTIONS",
        ]),
        proptest::collection::vec(segment(), 0..6),
        query(),
        body(),
    );
    let mut runner = TestRunner::deterministic();
    for _ in 0..300 {
        let (method, segs, q, body) = strategy.new_tree(&mut runner).expect("a case").current();
        let path = format!("/api/v1/{}{q}", segs.join("/"));
        let r = request(addr, method, &path, &[], body.as_deref()).await;
        assert!(
            (200..500).contains(&r.status),
            "{method} {path}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    // Still serving.
    let r = request(addr, "GET", "/api/v1/health", &[], None).await;
    assert_eq!(r.status, 200);
    node.shutdown().await;
}
