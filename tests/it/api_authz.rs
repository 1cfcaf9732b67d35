//! Authorization (`tls.client.authz.*`): clients identified by their mTLS
//! certificate's common name, a Casbin model and CSV policy, every RPC
//! allowed for a permitted client and PERMISSION_DENIED for another, and
//! the policy reloaded without a restart (SIGHUP, as Liftbridge).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use liftbridge::api::authz::AuthzFiles;
use liftbridge::api::proto::{self, api_client::ApiClient};
use liftbridge::node::GrpcTls;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::Code;

use super::api_common::{config, newest, start, Client};

/// Liftbridge's model (server/configs/authz/model.conf): exact match.
const MODEL: &str = "[request_definition]\nr = sub, obj, act\n\n[policy_definition]\n\
p = sub, obj, act\n\n[policy_effect]\ne = some(where (p.eft == allow))\n\n[matchers]\n\
m = r.sub == p.sub && r.obj == p.obj && r.act == p.act\n";

/// A CA, a server certificate for localhost and client certificates with
/// the given common names (`<cn>.pem`, `<cn>-key.pem`); `""` is a client
/// certificate without a common name.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(dir: &Path, clients: &[&str]) -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, DistinguishedName, DnType,
            ExtendedKeyUsagePurpose, IsCa, KeyPair,
        };
        std::fs::create_dir_all(dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "authz test CA");
        ca.distinguished_name = dn;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();

        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "localhost");
        p.distinguished_name = dn;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let c = p.signed_by(&key, &ca_cert, &ca_key).unwrap();
        std::fs::write(dir.join("server.pem"), c.pem()).unwrap();
        std::fs::write(dir.join("server-key.pem"), key.serialize_pem()).unwrap();

        for cn in clients {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            let mut dn = DistinguishedName::new();
            dn.push(DnType::OrganizationName, "authz test");
            if !cn.is_empty() {
                dn.push(DnType::CommonName, *cn);
            }
            p.distinguished_name = dn;
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            let c = p.signed_by(&key, &ca_cert, &ca_key).unwrap();
            let name = if cn.is_empty() { "nocn" } else { cn };
            std::fs::write(dir.join(format!("{name}.pem")), c.pem()).unwrap();
            std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).unwrap();
        }
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn grpc_tls(&self) -> GrpcTls {
        GrpcTls {
            cert: self.path("server.pem"),
            key: self.path("server-key.pem"),
            client_ca: Some(self.path("ca.pem")),
        }
    }

    /// A client presenting the certificate `name` (a common name, or
    /// `nocn`).
    async fn client(&self, port: u16, name: &str) -> Client {
        let ca = Certificate::from_pem(std::fs::read(self.path("ca.pem")).unwrap());
        let id = Identity::from_pem(
            std::fs::read(self.path(&format!("{name}.pem"))).unwrap(),
            std::fs::read(self.path(&format!("{name}-key.pem"))).unwrap(),
        );
        let tls = ClientTlsConfig::new()
            .ca_certificate(ca)
            .identity(id)
            .domain_name("localhost");
        let ch = Channel::from_shared(format!("https://localhost:{port}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .expect("TLS connect");
        ApiClient::new(ch)
    }
}

/// Writes the model and a policy; returns the files.
fn write_policy(dir: &Path, policy: &str) -> AuthzFiles {
    let files = AuthzFiles {
        model: dir.join("model.conf"),
        policy: dir.join("policy.csv"),
    };
    std::fs::write(&files.model, MODEL).unwrap();
    std::fs::write(&files.policy, policy).unwrap();
    files
}

/// Every action on stream `foo` (subject `foo.subj`) and group `g`.
fn all_of(client: &str) -> String {
    let mut p = format!("p, {client}, *, FetchMetadata\n");
    for act in [
        "CreateStream",
        "DeleteStream",
        "PauseStream",
        "SetStreamReadonly",
        "Subscribe",
        "FetchPartitionMetadata",
        "Publish",
        "SetCursor",
        "FetchCursor",
        "JoinConsumerGroup",
    ] {
        p.push_str(&format!("p, {client}, foo, {act}\n"));
    }
    p.push_str(&format!("p, {client}, foo.subj, PublishToSubject\n"));
    for act in [
        "LeaveConsumerGroup",
        "FetchConsumerGroupAssignments",
        "ReportConsumerGroupCoordinator",
    ] {
        p.push_str(&format!("p, {client}, g, {act}\n"));
    }
    p
}

fn denied<T: std::fmt::Debug>(what: &str, r: Result<T, tonic::Status>) {
    match r {
        Err(st) => {
            assert_eq!(st.code(), Code::PermissionDenied, "{what}: {st:?}");
            assert!(
                st.message().contains("not authorized"),
                "{what}: {}",
                st.message()
            );
        }
        Ok(v) => panic!("{what}: allowed for an unauthorized client: {v:?}"),
    }
}

fn publish_req(value: &[u8]) -> tonic::Request<proto::PublishRequest> {
    let mut r = tonic::Request::new(proto::PublishRequest {
        stream: "foo".into(),
        value: value.to_vec().into(),
        ack_policy: proto::AckPolicy::All as i32,
        ..Default::default()
    });
    r.set_timeout(Duration::from_secs(5));
    r
}

/// One PublishAsync message; returns the response.
async fn publish_async_one(c: &mut Client, value: &[u8]) -> proto::PublishResponse {
    let req = proto::PublishRequest {
        stream: "foo".into(),
        value: value.to_vec().into(),
        ack_policy: proto::AckPolicy::Leader as i32,
        correlation_id: "c1".into(),
        ..Default::default()
    };
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(req).await.unwrap();
    let mut out = c
        .publish_async(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("PublishAsync opens")
        .into_inner();
    let r = tokio::time::timeout(Duration::from_secs(10), out.next())
        .await
        .expect("response in time")
        .expect("a response")
        .expect("response ok");
    drop(tx);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_authz_every_rpc_allowed_and_denied() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"), &["alice", "bob"]);
    let files = write_policy(dir.path(), &all_of("alice"));
    let mut cfg = config(&dir.path().join("data"));
    cfg.tls = Some(pki.grpc_tls());
    cfg.authz = Some(files);
    cfg.cursor_partitions = 1;
    let node = start(cfg).await;
    let port = node.grpc_addr().port();
    let mut alice = pki.client(port, "alice").await;
    let mut bob = pki.client(port, "bob").await;

    // CreateStream: bob is denied and nothing is created; alice creates.
    let create = proto::CreateStreamRequest {
        name: "foo".into(),
        subject: "foo.subj".into(),
        ..Default::default()
    };
    denied("CreateStream", bob.create_stream(create.clone()).await);
    alice
        .create_stream(create)
        .await
        .expect("alice creates foo");
    // Per stream: alice may not create another stream.
    denied(
        "CreateStream bar",
        alice
            .create_stream(proto::CreateStreamRequest {
                name: "bar".into(),
                subject: "bar".into(),
                ..Default::default()
            })
            .await,
    );

    // FetchMetadata (object "*").
    denied(
        "FetchMetadata",
        bob.fetch_metadata(proto::FetchMetadataRequest::default())
            .await,
    );
    let md = alice
        .fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .expect("alice fetches metadata")
        .into_inner();
    assert!(md.stream_metadata.iter().any(|s| s.name == "foo"));

    // FetchPartitionMetadata.
    denied(
        "FetchPartitionMetadata",
        bob.fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
            stream: "foo".into(),
            partition: 0,
        })
        .await,
    );
    assert_eq!(newest(&mut alice, "foo").await, -1);

    // Publish: bob's message is not stored.
    denied("Publish", bob.publish(publish_req(b"bob")).await);
    let ack = alice
        .publish(publish_req(b"alice"))
        .await
        .expect("alice publishes")
        .into_inner()
        .ack
        .expect("ack");
    assert_eq!(ack.offset, 0);
    assert_eq!(newest(&mut alice, "foo").await, 0);

    // PublishAsync: a PERMISSION_DENIED async error, and (unlike
    // Liftbridge) the message is not published.
    let r = publish_async_one(&mut bob, b"bob async").await;
    let e = r.async_error.expect("an async error for bob");
    assert_eq!(
        e.code,
        proto::publish_async_error::Code::PermissionDenied as i32,
        "{e:?}"
    );
    assert_eq!(r.correlation_id, "c1");
    let r = publish_async_one(&mut alice, b"alice async").await;
    assert!(r.async_error.is_none(), "{r:?}");
    assert_eq!(r.ack.expect("ack").offset, 1);
    assert_eq!(newest(&mut alice, "foo").await, 1);

    // PublishToSubject (object: the subject).
    let pts = |v: &[u8]| {
        let mut r = tonic::Request::new(proto::PublishToSubjectRequest {
            subject: "foo.subj".into(),
            value: v.to_vec().into(),
            ack_policy: proto::AckPolicy::Leader as i32,
            ..Default::default()
        });
        r.set_timeout(Duration::from_secs(5));
        r
    };
    denied(
        "PublishToSubject",
        bob.publish_to_subject(pts(b"bob")).await,
    );
    alice
        .publish_to_subject(pts(b"alice subject"))
        .await
        .expect("alice publishes to the subject");
    super::api_common::eventually("3 messages", || {
        let mut a = alice.clone();
        async move { newest(&mut a, "foo").await == 2 }
    })
    .await;

    // Subscribe: bob is refused before the handshake; alice reads every
    // message, none of bob's among them.
    let sub = super::api_common::from_earliest("foo", 0);
    denied("Subscribe", bob.subscribe(sub.clone()).await.map(|_| ()));
    let mut s = super::api_common::subscribe(&mut alice, sub).await;
    let msgs = super::api_common::take(&mut s, 3).await;
    let values: Vec<&[u8]> = msgs.iter().map(|m| &m.value[..]).collect();
    assert_eq!(
        values,
        vec![&b"alice"[..], b"alice async", b"alice subject"]
    );
    drop(s);

    // Cursors.
    let set = proto::SetCursorRequest {
        stream: "foo".into(),
        partition: 0,
        cursor_id: "cur".into(),
        offset: 1,
    };
    denied("SetCursor", bob.set_cursor(set.clone()).await);
    alice.set_cursor(set).await.expect("alice sets a cursor");
    let fetch = proto::FetchCursorRequest {
        stream: "foo".into(),
        partition: 0,
        cursor_id: "cur".into(),
    };
    denied("FetchCursor", bob.fetch_cursor(fetch.clone()).await);
    assert_eq!(
        alice
            .fetch_cursor(fetch)
            .await
            .expect("alice fetches the cursor")
            .into_inner()
            .offset,
        1
    );

    // Consumer groups.
    let join = |consumer: &str| proto::JoinConsumerGroupRequest {
        group_id: "g".into(),
        consumer_id: consumer.into(),
        streams: vec!["foo".into()],
    };
    denied(
        "JoinConsumerGroup",
        bob.join_consumer_group(join("b")).await,
    );
    denied(
        "JoinConsumerGroup without streams",
        bob.join_consumer_group(proto::JoinConsumerGroupRequest {
            group_id: "g".into(),
            consumer_id: "b".into(),
            streams: vec![],
        })
        .await,
    );
    let j = alice
        .join_consumer_group(join("a"))
        .await
        .expect("alice joins")
        .into_inner();
    let fetch = proto::FetchConsumerGroupAssignmentsRequest {
        group_id: "g".into(),
        consumer_id: "a".into(),
        epoch: j.epoch,
    };
    denied(
        "FetchConsumerGroupAssignments",
        bob.fetch_consumer_group_assignments(fetch.clone()).await,
    );
    let a = alice
        .fetch_consumer_group_assignments(fetch)
        .await
        .expect("alice fetches assignments")
        .into_inner();
    assert_eq!(a.assignments.len(), 1);
    let report = proto::ReportConsumerGroupCoordinatorRequest {
        group_id: "g".into(),
        consumer_id: "a".into(),
        coordinator: j.coordinator.clone(),
        epoch: j.epoch,
    };
    denied(
        "ReportConsumerGroupCoordinator",
        bob.report_consumer_group_coordinator(report.clone()).await,
    );
    if let Err(st) = alice.report_consumer_group_coordinator(report).await {
        // A report of a healthy coordinator may be refused on its merits,
        // never for lack of permission.
        assert_ne!(st.code(), Code::PermissionDenied, "{st:?}");
    }
    let leave = proto::LeaveConsumerGroupRequest {
        group_id: "g".into(),
        consumer_id: "a".into(),
    };
    denied(
        "LeaveConsumerGroup",
        bob.leave_consumer_group(leave.clone()).await,
    );
    alice
        .leave_consumer_group(leave)
        .await
        .expect("alice leaves");

    // Pause, readonly, delete.
    let pause = proto::PauseStreamRequest {
        name: "foo".into(),
        ..Default::default()
    };
    denied("PauseStream", bob.pause_stream(pause.clone()).await);
    alice.pause_stream(pause).await.expect("alice pauses");
    let ro = proto::SetStreamReadonlyRequest {
        name: "foo".into(),
        readonly: true,
        ..Default::default()
    };
    denied(
        "SetStreamReadonly",
        bob.set_stream_readonly(ro.clone()).await,
    );
    alice
        .set_stream_readonly(ro)
        .await
        .expect("alice sets readonly");
    let del = proto::DeleteStreamRequest { name: "foo".into() };
    denied("DeleteStream", bob.delete_stream(del.clone()).await);
    alice.delete_stream(del).await.expect("alice deletes");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_authz_certificate_without_common_name_is_unauthenticated() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"), &[""]);
    let files = write_policy(dir.path(), "p, , *, FetchMetadata\n");
    let mut cfg = config(&dir.path().join("data"));
    cfg.tls = Some(pki.grpc_tls());
    cfg.authz = Some(files);
    let node = start(cfg).await;
    let mut c = pki.client(node.grpc_addr().port(), "nocn").await;
    let st = c
        .fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .unwrap_err();
    assert_eq!(st.code(), Code::Unauthenticated, "{st:?}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_authz_needs_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"), &[]);
    let files = write_policy(dir.path(), "");
    let mut cfg = config(&dir.path().join("data"));
    cfg.tls = Some(GrpcTls {
        client_ca: None,
        ..pki.grpc_tls()
    });
    cfg.authz = Some(files.clone());
    let e = liftbridge::node::Node::start(cfg)
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("tls.client.auth"), "{e}");

    // The same through the configuration keys.
    let yaml = dir.path().join("lb.yaml");
    std::fs::write(
        &yaml,
        format!(
            "tls.cert: {}\ntls.key: {}\ntls.client.authz.enabled: true\n\
             tls.client.authz.model: {}\ntls.client.authz.policy: {}\n",
            pki.path("server.pem").display(),
            pki.path("server-key.pem").display(),
            files.model.display(),
            files.policy.display()
        ),
    )
    .unwrap();
    let flags = liftbridge::config::liftbridge::LiftbridgeFlags {
        config: Some(yaml),
        ..Default::default()
    };
    let c = liftbridge::config::liftbridge::load_with_env(&flags, |_| None).unwrap();
    assert_eq!(liftbridge::config::audit::audit(&c).map(|_| ()), Ok(()));
    let e = liftbridge::node::NodeConfig::from_liftbridge(&c).unwrap_err();
    assert!(e.to_string().contains("tls.client.auth.enabled"), "{e}");

    // A missing policy file stops the start with its name.
    let mut cfg = config(&dir.path().join("data2"));
    cfg.tls = Some(pki.grpc_tls());
    cfg.authz = Some(AuthzFiles {
        policy: dir.path().join("missing.csv"),
        ..files
    });
    let e = liftbridge::node::Node::start(cfg)
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("missing.csv"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_authz_reload_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"), &["carol"]);
    let files = write_policy(dir.path(), "");
    let mut cfg = config(&dir.path().join("data"));
    cfg.tls = Some(pki.grpc_tls());
    cfg.authz = Some(files.clone());
    let node = start(cfg).await;
    let mut c = pki.client(node.grpc_addr().port(), "carol").await;
    denied(
        "FetchMetadata before",
        c.fetch_metadata(proto::FetchMetadataRequest::default())
            .await,
    );
    std::fs::write(&files.policy, "p, carol, *, FetchMetadata\n").unwrap();
    // The file alone changes nothing until the reload.
    denied(
        "FetchMetadata before reload",
        c.fetch_metadata(proto::FetchMetadataRequest::default())
            .await,
    );
    assert!(node.reload_authz().await.unwrap(), "authorization is on");
    c.fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .expect("allowed after reload");
    // A broken policy keeps the one in force.
    std::fs::remove_file(&files.policy).unwrap();
    assert!(node.reload_authz().await.is_err());
    c.fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .expect("still allowed");
    node.shutdown().await;
}

/// The binary, configured by Liftbridge's keys, reloads the policy on
/// SIGHUP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_authz_sighup_reloads_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"), &["dave"]);
    let files = write_policy(dir.path(), "p, dave, *, FetchMetadata\n");
    let yaml = format!(
        "tls:\n  cert: {}\n  key: {}\n  client.auth.enabled: true\n  client.auth.ca: {}\n  \
         client.authz.enabled: true\n  client.authz.model: {}\n  client.authz.policy: {}\n",
        pki.path("server.pem").display(),
        pki.path("server-key.pem").display(),
        pki.path("ca.pem").display(),
        files.model.display(),
        files.policy.display()
    );
    let node = super::support::procs::LiftbridgeNode::start("authz", &[], &yaml).await;
    let mut c = pki.client(node.grpc_port, "dave").await;
    c.fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .expect("allowed by the initial policy");
    let create = proto::CreateStreamRequest {
        name: "foo".into(),
        subject: "foo".into(),
        ..Default::default()
    };
    denied("CreateStream", c.create_stream(create.clone()).await);

    std::fs::write(
        &files.policy,
        "p, dave, *, FetchMetadata\np, dave, foo, CreateStream\n",
    )
    .unwrap();
    let pid = node.proc.pid().expect("running") as i32;
    // SAFETY: kill(2) with a pid of our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match c.create_stream(create.clone()).await {
            Ok(_) => break,
            Err(st) if st.code() == Code::PermissionDenied => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "policy not reloaded; log:\n{}",
                    node.proc.log_text()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(st) => panic!("unexpected: {st:?}"),
        }
    }
    assert!(node.proc.log_text().contains("reloaded authorization"));
}
