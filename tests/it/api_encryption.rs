//! Encryption at rest (`encryption` on CreateStream, `streams.encryption`,
//! the master key of `LIFTBRIDGE_ENCRYPTION_KEY`): values are sealed before
//! they reach the store and opened on read.

use std::path::Path;
use std::sync::Arc;

use liftbridge::api::proto;
use liftbridge::crypt::MasterKey;
use tonic::Code;

use super::api_common::{
    client, config, end_status, from_earliest, publish_acked, publish_async_all, start, subscribe,
    take,
};

const KEY: &[u8; 32] = b"0123456789abcdef0123456789abcdef";

fn key(k: &[u8]) -> Option<Arc<MasterKey>> {
    Some(Arc::new(MasterKey::new(k).unwrap()))
}

/// Whether any file under `dir` contains `needle`.
fn on_disk(dir: &Path, needle: &[u8]) -> bool {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    return true;
                }
            }
        }
    }
    false
}

fn create_req(name: &str, encryption: Option<bool>) -> proto::CreateStreamRequest {
    proto::CreateStreamRequest {
        name: name.into(),
        subject: name.into(),
        encryption: encryption.map(|value| proto::NullableBool { value }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_encryption_values_are_sealed_on_disk_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut cfg = config(&data);
    cfg.partitions.master_key = key(KEY);
    let node = start(cfg.clone()).await;
    let mut c = client(&node).await;
    c.create_stream(create_req("secret", Some(true)))
        .await
        .unwrap();
    c.create_stream(create_req("clear", None)).await.unwrap();
    for i in 0..3 {
        let v = format!("top-secret-plaintext-{i}");
        assert_eq!(
            publish_acked(&mut c, "secret", 0, b"k", v.as_bytes())
                .await
                .offset,
            i
        );
    }
    // PublishAsync (its messages handed to the partition, not published
    // into NATS): sealed the same way.
    let reqs: Vec<_> = (3..6)
        .map(|i| proto::PublishRequest {
            key: b"k".to_vec().into(),
            value: format!("top-secret-plaintext-{i}").into_bytes().into(),
            stream: "secret".into(),
            ack_policy: proto::AckPolicy::Leader as i32,
            expected_offset: -1,
            ..Default::default()
        })
        .collect();
    let acks = publish_async_all(&mut c, reqs).await;
    let offsets: Vec<i64> = acks
        .iter()
        .map(|r| r.ack.as_ref().unwrap().offset)
        .collect();
    assert_eq!(offsets, vec![3, 4, 5], "{acks:?}");
    publish_acked(&mut c, "clear", 0, b"", b"visible-plaintext-marker").await;
    let mut s = subscribe(&mut c, from_earliest("secret", 0)).await;
    let got = take(&mut s, 6).await;
    for (i, m) in got.iter().enumerate() {
        assert_eq!(&m.value[..], format!("top-secret-plaintext-{i}").as_bytes());
        assert_eq!(&m.key[..], b"k");
        assert_eq!(m.offset, i as i64);
    }
    drop(s);
    node.shutdown().await;

    // The check can fail: the unencrypted stream's value is found.
    assert!(on_disk(&data, b"visible-plaintext-marker"));
    assert!(!on_disk(&data, b"top-secret-plaintext"));

    // Same key after a restart: readable.
    let node = start(cfg.clone()).await;
    let mut c = client(&node).await;
    let mut s = subscribe(&mut c, from_earliest("secret", 0)).await;
    let got = take(&mut s, 6).await;
    assert_eq!(&got[2].value[..], b"top-secret-plaintext-2");
    assert_eq!(&got[5].value[..], b"top-secret-plaintext-5");
    drop(s);
    node.shutdown().await;

    // Another key: the read fails rather than returning garbage.
    cfg.partitions.master_key = key(b"another key of sixteen..........");
    let node = start(cfg).await;
    let mut c = client(&node).await;
    let mut s = subscribe(&mut c, from_earliest("secret", 0)).await;
    let st = end_status(&mut s).await;
    assert_eq!(st.code(), Code::FailedPrecondition, "{st:?}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_encryption_needs_the_master_key() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    let st = c
        .create_stream(create_req("secret", Some(true)))
        .await
        .unwrap_err();
    assert_eq!(st.code(), Code::FailedPrecondition, "{st:?}");
    assert!(st.message().contains("LIFTBRIDGE_ENCRYPTION_KEY"), "{st:?}");
    // Nothing was created.
    let md = c
        .fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(md.stream_metadata.iter().all(|s| s.name != "secret"));
    node.shutdown().await;

    // streams.encryption without the key is refused at start, naming it.
    let yaml = dir.path().join("lb.yaml");
    std::fs::write(&yaml, "streams.encryption: true\n").unwrap();
    let flags = liftbridge::config::liftbridge::LiftbridgeFlags {
        config: Some(yaml),
        ..Default::default()
    };
    let c = liftbridge::config::liftbridge::load_with_env(&flags, |_| None).unwrap();
    assert_eq!(liftbridge::config::audit::audit(&c).map(|_| ()), Ok(()));
    if std::env::var_os("LIFTBRIDGE_ENCRYPTION_KEY").is_none() {
        let e = liftbridge::node::NodeConfig::from_liftbridge(&c).unwrap_err();
        assert!(e.to_string().contains("LIFTBRIDGE_ENCRYPTION_KEY"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_encryption_server_default_and_stream_override() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut cfg = config(&data);
    cfg.partitions.master_key = key(&KEY[..16]);
    cfg.partitions.encryption = true;
    let node = start(cfg).await;
    let mut c = client(&node).await;
    c.create_stream(create_req("by-default", None))
        .await
        .unwrap();
    c.create_stream(create_req("opted-out", Some(false)))
        .await
        .unwrap();
    publish_acked(&mut c, "by-default", 0, b"", b"default-sealed-marker").await;
    publish_acked(&mut c, "opted-out", 0, b"", b"opted-out-clear-marker").await;
    let mut s = subscribe(&mut c, from_earliest("by-default", 0)).await;
    assert_eq!(
        &take(&mut s, 1).await[0].value[..],
        b"default-sealed-marker"
    );
    drop(s);
    // The admin API shows the plaintext too.
    let body = super::api_common::http_get(
        node.http_addr().expect("http on"),
        "/api/v1/streams/by-default/partitions/0/messages",
    )
    .await;
    assert!(
        body.contains("\"value_utf8\":\"default-sealed-marker\""),
        "{body}"
    );
    node.shutdown().await;
    assert!(on_disk(&data, b"opted-out-clear-marker"));
    assert!(!on_disk(&data, b"default-sealed-marker"));
}
