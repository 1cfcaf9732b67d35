//! Stream names become directory names: a name the file system cannot
//! store is refused with INVALID_ARGUMENT (HTTP 400) before anything is
//! committed, through gRPC and the admin HTTP API alike, so nothing is left
//! listed; the longest name that fits works end to end and survives a
//! restart.

use liftbridge::api::proto;
use liftbridge::service::MAX_STREAM_NAME_BYTES;
use serde_json::json;

use crate::admin_http::{get, post};
use crate::api_common::*;

/// Stream names listed by FetchMetadata and by the admin API.
async fn listed(c: &mut Client, http: std::net::SocketAddr) -> (Vec<String>, Vec<String>) {
    let grpc = c
        .fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .unwrap()
        .into_inner()
        .stream_metadata
        .into_iter()
        .map(|s| s.name)
        .collect();
    let admin = get(http, "/api/v1/streams").await.json()["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    (grpc, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_cannot_be_directories_are_refused_before_commit() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let http = node.http_addr().unwrap();
    let mut c = client(&node).await;

    let long = "n".repeat(10_000);
    let too_long_utf8 = "é".repeat(128); // 256 bytes
    for name in [long.as_str(), too_long_utf8.as_str(), "a/b", ".."] {
        let e = c
            .create_stream(proto::CreateStreamRequest {
                name: name.into(),
                subject: "names".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(
            e.message().len() < 300,
            "the message does not echo a huge name"
        );
        let r = post(
            http,
            "/api/v1/streams",
            &json!({"name": name, "subject": "names"}),
        )
        .await;
        assert_eq!(r.status, 400, "{}", r.error());
        assert!(r.error().contains("name"), "{}", r.error());
    }
    let e = c
        .create_stream(proto::CreateStreamRequest {
            name: long.clone(),
            subject: "names".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(e.message().contains("255"), "{e:?}");
    // Nothing was committed: no stream is listed, none is wedged.
    assert_eq!(listed(&mut c, http).await, (vec![], vec![]));

    // The longest name that fits is a working stream, also after a restart.
    let max = "m".repeat(MAX_STREAM_NAME_BYTES);
    create(&mut c, &max, "max", 1).await;
    publish_acked(&mut c, &max, 0, b"", b"kept").await;
    node.shutdown().await;
    let node = start(config(dir.path())).await;
    let http = node.http_addr().unwrap();
    let mut c = client(&node).await;
    assert_eq!(
        listed(&mut c, http).await,
        (vec![max.clone()], vec![max.clone()])
    );
    let mut s = subscribe(&mut c, from_earliest(&max, 0)).await;
    assert_eq!(take(&mut s, 1).await[0].value, &b"kept"[..]);
    node.shutdown().await;
}
