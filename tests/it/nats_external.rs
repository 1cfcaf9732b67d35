//! Contract: external NATS mode. A liftbridge node started with
//! `nats.servers: [a Go nats-server]` opens no NATS port of its own and
//! makes that server's subjects durable: plain messages published by a
//! client of the *external* server on a stream's subject are recorded in
//! order and read back through gRPC Subscribe; acked gRPC publishes
//! (LEADER, ALL) are acked; an enveloped publish with an AckInbox on the
//! external server gets its ack there; `nats.user`/`nats.password` work
//! against a server that requires them, and a wrong password stops the
//! start with an error naming the problem; when the external server is
//! killed and started again on the same port, `/healthz` and
//! `/api/v1/health` answer 503 naming "nats: disconnected from <url>"
//! (metric `liftbridge_nats_external_connected` 0), then 200 again once
//! the node has reconnected, and what is published after the restart is
//! recorded. Against Debian's nats-server 2.9.10 and nats-server 2.15.1.
//! Also: `nats.tls.*` against a server that verifies client certificates,
//! and two nodes sharing one external server as a cluster (Raft metadata,
//! RF 2 replication and acks over the external system).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use liftbridge::api::proto;
use liftbridge::api::proto::api_client::ApiClient;
use liftbridge::wire::envelope;
use tonic::transport::Channel;

use crate::support::free_port;
use crate::support::procs::{go_nats_server_2_15, go_nats_server_2_9, spawn_liftbridge, Proc};

const WAIT: Duration = Duration::from_secs(30);

/// A Go nats-server on 127.0.0.1 (optionally requiring user/password).
struct GoNats {
    proc: Proc,
    port: u16,
}

impl GoNats {
    async fn start(bin: &Path, auth: Option<(&str, &str)>) -> GoNats {
        let extra: Vec<String> = match auth {
            Some((u, p)) => vec!["--user".into(), u.into(), "--pass".into(), p.into()],
            None => Vec::new(),
        };
        GoNats::start_with(bin, extra).await
    }

    /// A server with `extra` flags (TLS, say).
    async fn start_with(bin: &Path, extra: Vec<String>) -> GoNats {
        let port = free_port();
        let mut args = vec![
            "-a".to_string(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
        ];
        args.extend(extra);
        let mut proc = Proc::spawn(bin, args, tempfile::tempdir().unwrap());
        proc.try_wait_port(port).await.unwrap();
        GoNats { proc, port }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// `kill -9`, then the same server again on the same port.
    async fn restart(&mut self) {
        self.proc.restart();
        self.proc.try_wait_port(self.port).await.unwrap();
    }
}

/// A liftbridge node process in external NATS mode.
struct Node {
    proc: Proc,
    grpc: u16,
    http: u16,
}

/// A lone node: Raft bootstrapped as a one-node group.
const SEED: &str = "clustering.raft.bootstrap.seed: true\n";

/// Writes the node's liftbridge.yaml and starts it (not waiting):
/// `clustering` is top-level YAML, `extra_yaml` continues the `nats:` block.
fn spawn_node(nats_url: &str, clustering: &str, extra_yaml: &str) -> Node {
    let (grpc, http) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "listen: 127.0.0.1:{grpc}\n\
         data.dir: {data}\n\
         http.listen: 127.0.0.1:{http}\n\
         {clustering}\
         nats:\n  servers:\n    - {nats_url}\n{extra_yaml}",
        data = dir.path().join("data").display(),
    );
    Node {
        proc: spawn_liftbridge(&yaml, dir),
        grpc,
        http,
    }
}

async fn start_node(nats_url: &str, clustering: &str, extra_yaml: &str) -> Node {
    let mut n = spawn_node(nats_url, clustering, extra_yaml);
    n.proc.try_wait_port(n.grpc).await.unwrap();
    n.proc.try_wait_port(n.http).await.unwrap();
    n
}

impl Node {
    async fn client(&self) -> ApiClient<Channel> {
        let ch = Channel::from_shared(format!("http://127.0.0.1:{}", self.grpc))
            .unwrap()
            .timeout(Duration::from_secs(15))
            .connect()
            .await
            .expect("gRPC connects");
        ApiClient::new(ch)
    }

    /// Status code and body of `GET path` on the HTTP port.
    async fn get(&self, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.http))
            .await
            .unwrap();
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        let text = String::from_utf8_lossy(&buf).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, body.to_string())
    }

    /// `GET path` as JSON (status 200).
    async fn get_json(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
    }

    /// `/varz`'s `external` object, checked to say connected to `url`
    /// after `reconnects` reconnections.
    async fn varz_connected(&self, url: &str, reconnects: u64) -> serde_json::Value {
        let ext = self.get_json("/varz").await["external"].clone();
        assert_eq!(
            (&ext["connected"], &ext["connected_url"], &ext["reconnects"]),
            (
                &serde_json::json!(true),
                &serde_json::json!(url),
                &serde_json::json!(reconnects)
            ),
            "{ext}"
        );
        ext
    }

    /// Waits until both health endpoints answer `status`; returns the
    /// `/healthz` and `/api/v1/health` bodies.
    async fn wait_health(&self, status: u16) -> (String, String) {
        let end = tokio::time::Instant::now() + WAIT;
        loop {
            let a = self.get("/healthz").await;
            let b = self.get("/api/v1/health").await;
            if a.0 == status && b.0 == status {
                return (a.1, b.1);
            }
            assert!(
                tokio::time::Instant::now() < end,
                "health never {status}: {a:?} {b:?}\nlog:\n{}",
                self.proc.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn metric(&self, name: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics").await;
        body.lines()
            .find(|l| l.split(' ').next() == Some(name))
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|v| v.parse().ok())
    }
}

/// Creates a stream once the node has a metadata leader.
async fn create_stream(c: &mut ApiClient<Channel>, name: &str, subject: &str) {
    create_stream_rf(c, name, subject, 1).await
}

/// [`create_stream`] with a replication factor.
async fn create_stream_rf(c: &mut ApiClient<Channel>, name: &str, subject: &str, rf: i32) {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let r = c
            .create_stream(proto::CreateStreamRequest {
                subject: subject.into(),
                name: name.into(),
                partitions: 1,
                replication_factor: rf,
                ..Default::default()
            })
            .await;
        match r {
            Ok(_) => return,
            Err(e) if e.code() == tonic::Code::AlreadyExists => return,
            Err(e) => {
                assert!(tokio::time::Instant::now() < end, "create stream: {e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// An enveloped publish with an AckInbox on the external server, repeated
/// until its ack arrives there (the first ones may precede the node's
/// subscription on that server). Returns the ack.
async fn enveloped_until_acked(nc: &async_nats::Client, subject: &str, tag: &str) -> proto::Ack {
    let inbox = nc.new_inbox();
    let mut acks = nc.subscribe(inbox.clone()).await.unwrap();
    nc.flush().await.unwrap();
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let env = envelope::encode_message(&proto::Message {
            value: tag.as_bytes().to_vec().into(),
            ack_inbox: inbox.clone(),
            correlation_id: tag.into(),
            ack_policy: proto::AckPolicy::Leader as i32,
            offset: -1,
            ..Default::default()
        });
        nc.publish(subject.to_string(), env).await.unwrap();
        nc.flush().await.unwrap();
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), acks.next()).await {
            let ack = envelope::decode_ack(&m.payload).expect("an ack envelope");
            assert_eq!(ack.correlation_id, tag);
            return ack;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "no ack on the external server for {tag}"
        );
    }
}

/// Reads the partition from the earliest offset until `done` holds for the
/// values read so far; returns them with their offsets.
async fn read_until(
    c: &mut ApiClient<Channel>,
    stream: &str,
    done: impl Fn(&[(i64, Vec<u8>)]) -> bool,
) -> Vec<(i64, Vec<u8>)> {
    read_from(c, stream, false, done).await
}

/// [`read_until`], from an ISR replica when `replica`.
async fn read_from(
    c: &mut ApiClient<Channel>,
    stream: &str,
    replica: bool,
    done: impl Fn(&[(i64, Vec<u8>)]) -> bool,
) -> Vec<(i64, Vec<u8>)> {
    let mut s = c
        .subscribe(proto::SubscribeRequest {
            stream: stream.into(),
            partition: 0,
            start_position: proto::StartPosition::Earliest as i32,
            read_isr_replica: replica,
            ..Default::default()
        })
        .await
        .expect("subscribe")
        .into_inner();
    let mut got: Vec<(i64, Vec<u8>)> = Vec::new();
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let m = tokio::time::timeout_at(end, s.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "timed out reading {stream}; got {:?}",
                    got.iter()
                        .map(|(o, v)| (o, String::from_utf8_lossy(v).into_owned()))
                        .collect::<Vec<_>>()
                )
            })
            .expect("stream open")
            .expect("message ok");
        if m == proto::Message::default() {
            continue; // the handshake
        }
        got.push((m.offset, m.value.to_vec()));
        if done(&got) {
            return got;
        }
    }
}

/// The values with `prefix`, in log order, as strings.
fn with_prefix(got: &[(i64, Vec<u8>)], prefix: &str) -> Vec<String> {
    got.iter()
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .filter(|v| v.starts_with(prefix))
        .collect()
}

async fn recording_through_external(go: PathBuf) {
    let mut nats = GoNats::start(&go, None).await;
    let node = start_node(&nats.url(), SEED, "").await;
    let (healthz, health) = node.wait_health(200).await;
    let banner = format!(
        "serving gRPC on 127.0.0.1:{}, external NATS {}",
        node.grpc,
        nats.url()
    );
    assert!(
        node.proc.log_text().contains(&banner),
        "{}",
        node.proc.log_text()
    );
    assert!(
        healthz.contains("ok") && health.contains("ok"),
        "{healthz} {health}"
    );
    assert_eq!(
        node.metric("liftbridge_nats_external_connected").await,
        Some(1.0)
    );
    // Monitoring names the external system: `/api/v1/info` has its URL
    // where the NATS listener would be, `/varz` (the in-process bus, no
    // client port) an `external` section about the connection.
    let info = node.get_json("/api/v1/info").await;
    assert_eq!(info["nats_addr"], nats.url());
    assert_eq!(info["nats"]["external"]["connected"], true);
    let varz = node.get_json("/varz").await;
    assert_eq!(varz["port"], 0, "no NATS listener of its own");
    let ext = node.varz_connected(&nats.url(), 0).await;
    assert_eq!(ext["servers"], serde_json::json!([nats.url()]));
    assert!(
        ext["server_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{ext}"
    );
    let mut c = node.client().await;
    create_stream(&mut c, "ext", "ext.rec").await;
    // FetchMetadata lists this node's gRPC address as its broker.
    let md = c
        .fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(md.brokers.len(), 1);
    assert_eq!(
        (md.brokers[0].host.as_str(), md.brokers[0].port),
        ("127.0.0.1", i32::from(node.grpc))
    );

    let nc = async_nats::connect(nats.url()).await.unwrap();
    // Enveloped publish with an AckInbox on the external server: the ack
    // comes back on the external server.
    let ack = enveloped_until_acked(&nc, "ext.rec", "probe").await;
    assert_eq!(ack.stream, "ext");
    assert!(ack.offset >= 0);

    // Plain messages from a client of the external server.
    for i in 0..20 {
        nc.publish("ext.rec", format!("m{i:02}").into())
            .await
            .unwrap();
    }
    nc.flush().await.unwrap();

    // Acked publishes through gRPC.
    for (i, policy) in [proto::AckPolicy::Leader, proto::AckPolicy::All]
        .into_iter()
        .enumerate()
    {
        let mut req = tonic::Request::new(proto::PublishRequest {
            value: format!("g{i}").into_bytes().into(),
            stream: "ext".into(),
            ack_policy: policy as i32,
            expected_offset: -1,
            ..Default::default()
        });
        req.set_timeout(Duration::from_secs(10));
        let ack = c
            .publish(req)
            .await
            .expect("acked publish")
            .into_inner()
            .ack
            .expect("an ack");
        assert_eq!(ack.stream, "ext");
        assert!(ack.offset > 0, "{ack:?}");
    }

    // The plain messages and the gRPC ones take different paths to the
    // recorder (the client's connection, our bridge): wait for both.
    let got = read_until(&mut c, "ext", |g| {
        with_prefix(g, "g").len() == 2 && with_prefix(g, "m").len() >= 20
    })
    .await;
    let plain = with_prefix(&got, "m");
    let want: Vec<String> = (0..20).map(|i| format!("m{i:02}")).collect();
    assert_eq!(plain, want, "plain messages recorded once each, in order");
    assert_eq!(with_prefix(&got, "g"), ["g0", "g1"]);
    let last_before = got.last().unwrap().0;

    // Recording while the external server goes away and comes back: a
    // publisher on the external server keeps going (its client reconnects).
    let live = {
        let url = nats.url();
        tokio::spawn(async move {
            let p = async_nats::ConnectOptions::new()
                .max_reconnects(None)
                .retry_on_initial_connect()
                .connect(url)
                .await
                .unwrap();
            for i in 0u32.. {
                let _ = p.publish("ext.rec", format!("live{i:06}").into()).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    nats.proc.kill9();
    let (healthz, health) = node.wait_health(503).await;
    let want = format!("nats: disconnected from {}", nats.url());
    assert!(healthz.contains(&want), "{healthz}");
    assert!(health.contains(&want), "{health}");
    assert_eq!(
        node.metric("liftbridge_nats_external_connected").await,
        Some(0.0)
    );
    let ext = node.get_json("/varz").await["external"].clone();
    assert_eq!(ext["connected"], false, "{ext}");
    assert!(ext["connected_url"].is_null(), "{ext}");
    // Reads keep being served while disconnected.
    let during = read_until(&mut c, "ext", |g| g.len() as i64 > last_before).await;
    assert!(during.len() as i64 > last_before);

    nats.restart().await;
    node.wait_health(200).await;
    assert_eq!(
        node.metric("liftbridge_nats_external_connected").await,
        Some(1.0)
    );
    assert_eq!(
        node.metric("liftbridge_nats_external_reconnects_total")
            .await,
        Some(1.0)
    );
    node.varz_connected(&nats.url(), 1).await;
    let nc = async_nats::connect(nats.url()).await.unwrap();
    enveloped_until_acked(&nc, "ext.rec", "probe-after").await;
    for i in 0..20 {
        nc.publish("ext.rec", format!("after{i:02}").into())
            .await
            .unwrap();
    }
    nc.flush().await.unwrap();
    let got = read_until(&mut c, "ext", |g| with_prefix(g, "after").len() == 20).await;
    live.abort();
    let want: Vec<String> = (0..20).map(|i| format!("after{i:02}")).collect();
    assert_eq!(with_prefix(&got, "after"), want);
    // The live publisher's messages: each once, in publish order (those
    // sent while the server was down may be lost, as with any NATS
    // subscriber), and some recorded after the restart.
    let live_vals = with_prefix(&got, "live");
    assert!(!live_vals.is_empty(), "live messages recorded");
    assert!(
        live_vals.windows(2).all(|w| w[0] < w[1]),
        "live messages in order, no duplicates"
    );
    let after_restart = got
        .iter()
        .position(|(_, v)| v == b"probe-after")
        .expect("probe-after recorded");
    let offsets: Vec<i64> = got.iter().map(|(o, _)| *o).collect();
    assert!(
        offsets.windows(2).all(|w| w[1] == w[0] + 1),
        "no gaps in offsets"
    );
    assert!(after_restart > 0);
}

async fn credentials(go: PathBuf) {
    let nats = GoNats::start(&go, Some(("lb", "s3cret"))).await;
    // The right password: the node records through the protected server.
    let node = start_node(&nats.url(), SEED, "  user: lb\n  password: s3cret\n").await;
    node.wait_health(200).await;
    let mut c = node.client().await;
    create_stream(&mut c, "auth", "auth.rec").await;
    let nc = async_nats::ConnectOptions::with_user_and_password("lb".into(), "s3cret".into())
        .connect(nats.url())
        .await
        .unwrap();
    let ack = enveloped_until_acked(&nc, "auth.rec", "authorized").await;
    assert_eq!(ack.stream, "auth");

    // A wrong password: the start fails, saying why.
    let mut bad = spawn_node(&nats.url(), SEED, "  user: lb\n  password: wrong\n");
    let log = bad
        .proc
        .exit_log(WAIT, "the node with a wrong password to exit")
        .await;
    assert!(
        log.contains(&nats.url()) && log.to_lowercase().contains("authorization"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_through_go_nats_server_2_9() {
    recording_through_external(go_nats_server_2_9()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_through_go_nats_server_2_15() {
    recording_through_external(go_nats_server_2_15()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_against_go_nats_server_2_9() {
    credentials(go_nats_server_2_9()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_against_go_nats_server_2_15() {
    credentials(go_nats_server_2_15()).await;
}

/// Two nodes that share one external nats-server form a cluster: Raft
/// metadata, replication (RF 2, ISR of both) and acked publishes through
/// either node all ride the external system.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_cluster_over_one_external_server() {
    let nats = GoNats::start(&go_nats_server_2_9(), None).await;
    let clustering = |id: &str| {
        format!("clustering:\n  server.id: {id}\n  raft.bootstrap.peers: [ext-a, ext-b]\n")
    };
    let a = start_node(&nats.url(), &clustering("ext-a"), "").await;
    let b = start_node(&nats.url(), &clustering("ext-b"), "").await;
    a.wait_health(200).await;
    b.wait_health(200).await;
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    create_stream_rf(&mut ca, "rep", "rep.rec", 2).await;

    // Both nodes see the stream with both replicas in sync.
    let deadline = tokio::time::Instant::now() + WAIT;
    let leader = loop {
        let mut views = Vec::new();
        for c in [&mut ca, &mut cb] {
            let Ok(md) = c
                .fetch_metadata(proto::FetchMetadataRequest::default())
                .await
            else {
                continue;
            };
            let md = md.into_inner();
            let p = md
                .stream_metadata
                .iter()
                .find(|s| s.name == "rep")
                .and_then(|s| s.partitions.get(&0).cloned());
            if let Some(p) = p {
                if p.isr.len() == 2 && md.brokers.len() == 2 {
                    views.push(p.leader);
                }
            }
        }
        if views.len() == 2 && views[0] == views[1] && !views[0].is_empty() {
            break views[0].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no ISR of both nodes on both nodes\na:\n{}\nb:\n{}",
            a.proc.log_text(),
            b.proc.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // Acked (ALL) publishes through both nodes: whichever leads, the other
    // reaches it through the external server.
    for i in 0..4 {
        let c = if i % 2 == 0 { &mut ca } else { &mut cb };
        let mut req = tonic::Request::new(proto::PublishRequest {
            value: format!("r{i}").into_bytes().into(),
            stream: "rep".into(),
            ack_policy: proto::AckPolicy::All as i32,
            expected_offset: -1,
            ..Default::default()
        });
        req.set_timeout(Duration::from_secs(10));
        let ack = c
            .publish(req)
            .await
            .expect("acked publish")
            .into_inner()
            .ack
            .expect("an ack");
        assert_eq!(ack.offset, i as i64, "{ack:?}");
    }
    // And a plain message from a client of the external server.
    let nc = async_nats::connect(nats.url()).await.unwrap();
    nc.publish("rep.rec", "plain".into()).await.unwrap();
    nc.flush().await.unwrap();

    let want = ["r0", "r1", "r2", "r3", "plain"];
    let values = |g: &[(i64, Vec<u8>)]| -> Vec<String> {
        g.iter()
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect()
    };
    let (lead, follow) = if leader == "ext-a" {
        (&mut ca, &mut cb)
    } else {
        (&mut cb, &mut ca)
    };
    let got = read_from(lead, "rep", false, |g| g.len() == want.len()).await;
    assert_eq!(values(&got), want);
    // The follower has the same log (replicated over the external server).
    let got = read_from(follow, "rep", true, |g| g.len() == want.len()).await;
    assert_eq!(values(&got), want);
}

/// `nats.tls.{cert,key,ca}`: the node reaches a server that requires TLS
/// and verifies client certificates; without its client certificate the
/// start fails naming the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_client_certificate_against_go_nats_server_2_9() {
    let certs = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args(["cert", "init", "--dir"])
        .arg(certs.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let f = |n: &str| certs.path().join(n).display().to_string();
    let nats = GoNats::start_with(
        &go_nats_server_2_9(),
        vec![
            "--tlsverify".into(),
            "--tlscert".into(),
            f("server.pem"),
            "--tlskey".into(),
            f("server-key.pem"),
            "--tlscacert".into(),
            f("ca.pem"),
        ],
    )
    .await;
    let tls_yaml = format!(
        "  tls:\n    cert: {}\n    key: {}\n    ca: {}\n",
        f("client.pem"),
        f("client-key.pem"),
        f("ca.pem")
    );
    let node = start_node(&nats.url(), SEED, &tls_yaml).await;
    node.wait_health(200).await;
    let mut c = node.client().await;
    create_stream(&mut c, "tls", "tls.rec").await;
    let nc = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(certs.path().join("ca.pem"))
        .add_client_certificate(
            certs.path().join("client.pem"),
            certs.path().join("client-key.pem"),
        )
        .connect(nats.url())
        .await
        .unwrap();
    let ack = enveloped_until_acked(&nc, "tls.rec", "over-tls").await;
    assert_eq!(ack.stream, "tls");

    // Only the CA: the server wants a client certificate.
    let mut bad = spawn_node(&nats.url(), SEED, &format!("  tls.ca: {}\n", f("ca.pem")));
    let log = bad
        .proc
        .exit_log(WAIT, "the node without a client certificate to exit")
        .await;
    assert!(
        log.contains(&nats.url()) && log.contains("external NATS"),
        "{log}"
    );
}
