//! The advertised host as Liftbridge has it (server/config.go
//! `GetConnectionAddress`): with neither `listen` nor `host` configured a
//! node advertises `localhost` in its broker entry, and listens on both
//! address families, so a client that follows the metadata reaches it
//! whether `localhost` resolves to `::1` or to `127.0.0.1`. Checked with
//! our tonic client through the advertised `localhost:port`, `127.0.0.1`
//! and `[::1]`.

use liftbridge::api::proto;
use liftbridge::api::proto::api_client::ApiClient;
use tonic::transport::Channel;

use crate::api_common::*;

async fn connect(url: &str) -> Client {
    let ch = Channel::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e:?}"));
    ApiClient::new(ch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_listener_advertises_localhost_and_serves_both_families() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    // Neither `listen` nor `host` configured.
    cfg.listen_host = String::new();
    let node = start(cfg).await;
    let addr = node.grpc_addr();
    let port = addr.port();
    // Where this machine has IPv6, the listener is `[::]`; elsewhere it
    // falls back to `0.0.0.0`.
    let has_v6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    assert!(addr.ip().is_unspecified(), "{addr}");
    assert_eq!(addr.is_ipv6(), has_v6, "{addr}");

    let mut c = connect(&format!("http://127.0.0.1:{port}")).await;
    create(&mut c, "lh", "lh", 1).await;
    let md = c
        .fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .unwrap()
        .into_inner();
    let b = &md.brokers[0];
    assert_eq!((b.host.as_str(), b.port), ("localhost", i32::from(port)));

    // A client that follows the metadata.
    let mut lc = connect(&format!("http://{}:{}", b.host, b.port)).await;
    let ack = publish_acked(&mut lc, "lh", 0, b"", b"via-localhost").await;
    assert_eq!(ack.offset, 0);

    // Both families, whatever `localhost` resolves to here.
    if has_v6 {
        let mut v6 = connect(&format!("http://[::1]:{port}")).await;
        let ack = publish_acked(&mut v6, "lh", 0, b"", b"via-v6").await;
        assert_eq!(ack.offset, 1);
    }
    let pm = partition_metadata(&mut c, "lh", 0).await;
    assert_eq!(pm.newest_offset, if has_v6 { 1 } else { 0 });
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_listen_host_is_bound_and_advertised_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    assert_eq!(node.grpc_addr().ip().to_string(), "127.0.0.1");
    let mut c = client(&node).await;
    let md = c
        .fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(md.brokers[0].host, "127.0.0.1");
    node.shutdown().await;
}
