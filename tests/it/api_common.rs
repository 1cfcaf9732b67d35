//! Shared helpers of the API tests: an in-process node on port 0 in a
//! temporary directory, and a tonic client to it.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use liftbridge::api::proto::{self, api_client::ApiClient};
use liftbridge::config::NatsOptions;
use liftbridge::node::{Node, NodeConfig, NodeHandle};
use tonic::transport::Channel;

pub type Client = ApiClient<Channel>;

/// A node configuration for tests: loopback, free ports, `dir` as data.
pub fn config(dir: &Path) -> NodeConfig {
    NodeConfig {
        data_dir: dir.to_path_buf(),
        listen_host: "127.0.0.1".into(),
        port: 0,
        nats: NatsOptions {
            host: "127.0.0.1".into(),
            port: 0,
            ..Default::default()
        },
        http: Some(("127.0.0.1".into(), 0)),
        ..Default::default()
    }
}

/// A plain HTTP/1.1 GET; returns the whole response text.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// Starts a node with `cfg`.
pub async fn start(cfg: NodeConfig) -> NodeHandle {
    Node::start(cfg).await.expect("node starts")
}

/// Starts a node whose gRPC port takes TLS clients with a certificate of
/// the returned development CA (mutual TLS), with its data under `dir`.
pub async fn start_mtls(dir: &Path) -> (NodeHandle, liftbridge::tls::DevCertPaths) {
    let certs = liftbridge::tls::generate_dev_certs(&dir.join("certs"), &[]).unwrap();
    let mut cfg = config(&dir.join("data"));
    cfg.tls = Some(liftbridge::node::GrpcTls {
        cert: certs.server_cert.clone(),
        key: certs.server_key.clone(),
        client_ca: Some(certs.ca_cert.clone()),
    });
    (start(cfg).await, certs)
}

/// A TLS configuration trusting the CA of `certs`, presenting its client
/// certificate when `with_cert`.
pub fn mtls_config(
    certs: &liftbridge::tls::DevCertPaths,
    with_cert: bool,
) -> tonic::transport::ClientTlsConfig {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let ca = Certificate::from_pem(std::fs::read(&certs.ca_cert).unwrap());
    let tls = ClientTlsConfig::new()
        .ca_certificate(ca)
        .domain_name("localhost");
    if !with_cert {
        return tls;
    }
    tls.identity(Identity::from_pem(
        std::fs::read(&certs.client_cert).unwrap(),
        std::fs::read(&certs.client_key).unwrap(),
    ))
}

/// Connects a TLS client with the client certificate of `certs`.
pub async fn mtls_client(node: &NodeHandle, certs: &liftbridge::tls::DevCertPaths) -> Client {
    let ch = Channel::from_shared(format!("https://localhost:{}", node.grpc_addr().port()))
        .unwrap()
        .tls_config(mtls_config(certs, true))
        .unwrap()
        .connect()
        .await
        .expect("connect over TLS");
    ApiClient::new(ch)
}

/// Connects a gRPC client to the node.
pub async fn client(node: &NodeHandle) -> Client {
    let ch = Channel::from_shared(format!("http://{}", node.grpc_addr()))
        .unwrap()
        .connect()
        .await
        .expect("connect");
    ApiClient::new(ch)
}

/// The newest offset of stream `name`'s partition 0.
pub async fn newest(c: &mut Client, name: &str) -> i64 {
    c.fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
        stream: name.into(),
        partition: 0,
    })
    .await
    .unwrap()
    .into_inner()
    .metadata
    .unwrap()
    .newest_offset
}

/// Creates a stream with `partitions` partitions on `subject`.
pub async fn create(c: &mut Client, name: &str, subject: &str, partitions: i32) {
    c.create_stream(proto::CreateStreamRequest {
        subject: subject.into(),
        name: name.into(),
        partitions,
        ..Default::default()
    })
    .await
    .expect("create stream");
}

/// The metadata of one partition (`FetchPartitionMetadata`, which must
/// succeed).
pub async fn partition_metadata(
    c: &mut Client,
    stream: &str,
    partition: i32,
) -> proto::PartitionMetadata {
    c.fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
        stream: stream.into(),
        partition,
    })
    .await
    .expect("fetch partition metadata")
    .into_inner()
    .metadata
    .expect("partition metadata")
}

/// Publishes `value` with an ack (the call has a deadline) and returns it.
pub async fn publish_acked(
    c: &mut Client,
    stream: &str,
    partition: i32,
    key: &[u8],
    value: &[u8],
) -> proto::Ack {
    let mut req = tonic::Request::new(proto::PublishRequest {
        key: key.to_vec().into(),
        value: value.to_vec().into(),
        stream: stream.into(),
        partition,
        ack_policy: proto::AckPolicy::All as i32,
        expected_offset: -1,
        ..Default::default()
    });
    // Long enough for a first record on a loaded machine (the log creates
    // its database file then), short enough to fail a hung publish.
    req.set_timeout(Duration::from_secs(20));
    c.publish(req)
        .await
        .expect("publish")
        .into_inner()
        .ack
        .expect("ack")
}

/// Sends `reqs` on one PublishAsync stream, half-closes it and returns
/// every response until the server ends the stream.
pub async fn publish_async_all(
    c: &mut Client,
    reqs: Vec<proto::PublishRequest>,
) -> Vec<proto::PublishResponse> {
    let resp = c
        .publish_async(futures::stream::iter(reqs))
        .await
        .expect("publish_async")
        .into_inner();
    resp.map(|r| r.expect("PublishAsync response"))
        .collect()
        .await
}

/// Subscribes and checks the handshake; returns the message stream.
pub async fn subscribe(
    c: &mut Client,
    req: proto::SubscribeRequest,
) -> tonic::Streaming<proto::Message> {
    let mut s = c.subscribe(req).await.expect("subscribe").into_inner();
    let hs = tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("handshake in time")
        .expect("handshake present")
        .expect("handshake ok");
    assert_eq!(
        hs,
        proto::Message::default(),
        "first message is the empty handshake"
    );
    s
}

/// Reads `n` messages (failing after 5 s).
pub async fn take(s: &mut tonic::Streaming<proto::Message>, n: usize) -> Vec<proto::Message> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let m = tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .expect("message in time")
            .expect("stream open")
            .expect("message ok");
        out.push(m);
    }
    out
}

/// The status that ends the stream (failing after 5 s).
pub async fn end_status(s: &mut tonic::Streaming<proto::Message>) -> tonic::Status {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .expect("end in time")
        {
            Some(Ok(_)) => continue,
            Some(Err(st)) => return st,
            None => panic!("stream ended without a status"),
        }
    }
}

/// A subscribe request from the earliest offset.
pub fn from_earliest(stream: &str, partition: i32) -> proto::SubscribeRequest {
    proto::SubscribeRequest {
        stream: stream.into(),
        partition,
        start_position: proto::StartPosition::Earliest as i32,
        ..Default::default()
    }
}

/// Waits until `f` holds (polling every 20 ms, up to 5 s).
pub async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
