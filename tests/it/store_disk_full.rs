//! A node whose data directory is on a full file system (a small tmpfs,
//! filled with a filler file): acked publishes fail at once with the OS
//! error, NATS publishers with an ack inbox get an error ack, stored data
//! stays readable, `/healthz`, `/api/v1/health` and `/metrics` report the
//! degraded partition, a stream created meanwhile is refused and rolled
//! back, and once the filler is deleted the log accepts writes again
//! without a restart, offsets continuing without a gap. A restart then
//! finds exactly what was acknowledged.
//!
//! Needs root (mount(8)); CI runs as root. A failed mount fails the test.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tonic::transport::Channel;

use liftbridge::api::proto::{self, api_client::ApiClient};
use liftbridge::store::{LogConfig, NewRecord, PartitionLog, SyncPolicy};
use liftbridge::wire::{envelope, AckError, AckPolicy, Message};

use crate::support::procs::Proc;
use crate::support::{free_port, wait_until};

type Client = ApiClient<Channel>;

/// Size of the file system: room for the metadata, one partition's files
/// and some data, small enough to fill in a moment.
const FS_SIZE: &str = "24m";
/// The publish deadline; a refusal must come well before it.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

/// A tmpfs mounted on a temp dir, unmounted on drop (also when the test
/// panics).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount(8)");
        assert!(
            out.status.success(),
            "mount -t tmpfs -o size={size} tmpfs {} failed ({}): {}; this test needs root to mount a small file system",
            dir.path().display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Still busy (a process being killed): detach it now.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// One node process with its data directory on `data`.
struct DiskNode {
    proc: Proc,
    grpc: u16,
    nats: u16,
    http: u16,
}

impl DiskNode {
    async fn start(data: &Path) -> DiskNode {
        let (grpc, nats, cluster, http) = (free_port(), free_port(), free_port(), free_port());
        let dir = tempfile::tempdir().expect("temp dir");
        let yaml = format!(
            "listen: 127.0.0.1:{grpc}\n\
             data.dir: {data}\n\
             clustering.raft.bootstrap.seed: true\n\
             http.listen: 127.0.0.1:{http}\n\
             nats:\n  listen: 127.0.0.1:{nats}\n  cluster:\n    name: diskfull\n    listen: 127.0.0.1:{cluster}\n",
            data = data.display(),
        );
        let cfg = dir.path().join("liftbridge.yaml");
        std::fs::write(&cfg, yaml).expect("write liftbridge.yaml");
        let proc = Proc::spawn(
            Path::new(env!("CARGO_BIN_EXE_liftbridge")),
            vec!["-c".into(), cfg.display().to_string()],
            dir,
        );
        let mut n = DiskNode {
            proc,
            grpc,
            nats,
            http,
        };
        n.ready().await;
        n
    }

    async fn ready(&mut self) {
        for p in [self.nats, self.http, self.grpc] {
            if let Err(e) = self.proc.try_wait_port(p).await {
                panic!("{e}");
            }
        }
    }

    async fn restart(&mut self) {
        self.proc.stop(Duration::from_secs(20)).await;
        self.proc.restart();
        self.ready().await;
    }

    async fn client(&self) -> Client {
        let url = format!("http://127.0.0.1:{}", self.grpc);
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            match Channel::from_shared(url.clone()).unwrap().connect().await {
                Ok(ch) => return ApiClient::new(ch),
                Err(e) => {
                    assert!(Instant::now() < end, "connect {url}: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// `GET path`: status code and body.
    async fn get(&self, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.http))
            .await
            .expect("connect http");
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let code = out
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
        (code, body)
    }

    async fn get_json(&self, path: &str) -> (u16, serde_json::Value) {
        let (code, body) = self.get(path).await;
        let v = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{path} is not JSON ({e}): {body}"));
        (code, v)
    }
}

async fn publish(
    c: &mut Client,
    stream: &str,
    value: Vec<u8>,
) -> Result<proto::Ack, tonic::Status> {
    let mut req = tonic::Request::new(proto::PublishRequest {
        value: value.into(),
        stream: stream.into(),
        partition: 0,
        ack_policy: proto::AckPolicy::Leader as i32,
        expected_offset: -1,
        ..Default::default()
    });
    req.set_timeout(PUBLISH_TIMEOUT);
    let r = c.publish(req).await?.into_inner();
    Ok(r.ack.expect("an acked publish returns its ack"))
}

async fn create(c: &mut Client, name: &str) -> Result<(), tonic::Status> {
    let mut req = tonic::Request::new(proto::CreateStreamRequest {
        subject: name.into(),
        name: name.into(),
        partitions: 1,
        ..Default::default()
    });
    req.set_timeout(Duration::from_secs(30));
    c.create_stream(req).await.map(|_| ())
}

/// Reads offsets `0..=last` of `stream` from the earliest, checking each
/// value against `value_of(offset)`.
async fn read_all(c: &mut Client, stream: &str, last: i64, value_of: impl Fn(i64) -> Vec<u8>) {
    let req = proto::SubscribeRequest {
        stream: stream.into(),
        partition: 0,
        start_position: proto::StartPosition::Earliest as i32,
        ..Default::default()
    };
    let mut s = c.subscribe(req).await.expect("subscribe").into_inner();
    let hs = tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("handshake in time")
        .expect("handshake present")
        .unwrap_or_else(|e| panic!("subscribing to {stream}: {e}"));
    assert_eq!(hs, proto::Message::default(), "the empty handshake first");
    let mut next = 0i64;
    while next <= last {
        let m = tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .unwrap_or_else(|_| panic!("offset {next} of {stream} in time"))
            .expect("the subscription stays open")
            .unwrap_or_else(|e| panic!("reading offset {next} of {stream}: {e}"));
        assert_eq!(m.offset, next, "offsets are dense");
        assert!(m.value == value_of(next), "value at offset {next}");
        next += 1;
    }
}

/// Fills the file system holding `dir` with one file, until it is full.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("create filler");
    let chunk = vec![0x5Au8; 64 << 10];
    loop {
        match f.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    // Also the last bytes a 64 KiB write could not take.
    let small = [0x5Au8; 512];
    while f.write_all(&small).is_ok() {}
    path
}

fn value(offset: i64, size: usize) -> Vec<u8> {
    let mut v = format!("m{offset}-").into_bytes();
    v.resize(size, b'a' + (offset % 26) as u8);
    v
}

/// Size of the messages published while the device is full: large, so
/// that a few of them need more space than redb has free in its file.
const BIG: usize = 64 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_refuses_writes_serves_reads_and_recovers() {
    let fs = Tmpfs::mount(FS_SIZE);
    let data = fs.path().join("data");
    let mut node = DiskNode::start(&data).await;
    let mut c = node.client().await;
    create(&mut c, "full").await.expect("create stream");

    // Some data before the device fills up.
    let size_of = |o: i64| if o < 3 { 100 } else { BIG };
    for o in 0..3 {
        let ack = publish(&mut c, "full", value(o, size_of(o)))
            .await
            .expect("publish");
        assert_eq!(ack.offset, o);
    }
    let (code, body) = node.get("/healthz").await;
    assert_eq!((code, body.contains("\"ok\"")), (200, true), "{body}");

    let filler = fill(fs.path());

    // Publish until the log refuses: acks that came back are stored (the
    // journal has room preallocated); the refusal comes at once.
    let mut last_ok = 2i64;
    let refusal = loop {
        let o = last_ok + 1;
        let started = Instant::now();
        match publish(&mut c, "full", value(o, size_of(o))).await {
            Ok(ack) => {
                assert_eq!(ack.offset, o, "offsets are dense");
                last_ok = o;
                assert!(o < 2000, "the log never refused a write on a full device");
            }
            Err(status) => break (status, started.elapsed()),
        }
    };
    let (status, took) = refusal;
    assert_eq!(
        status.code(),
        tonic::Code::ResourceExhausted,
        "a full device is RESOURCE_EXHAUSTED: {status:?}"
    );
    assert!(
        status
            .message()
            .to_lowercase()
            .contains("no space left on device"),
        "the OS error is in the message: {status:?}"
    );
    assert!(
        took < PUBLISH_TIMEOUT / 3,
        "the refusal came after {took:?}, not at once"
    );
    // And every later publish is refused at once too.
    let started = Instant::now();
    let again = publish(&mut c, "full", value(last_ok + 1, BIG))
        .await
        .expect_err("still full");
    assert_eq!(again.code(), tonic::Code::ResourceExhausted, "{again:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // A NATS publisher with an ack inbox gets an error ack, not silence.
    let nc = async_nats::connect(format!("nats://127.0.0.1:{}", node.nats))
        .await
        .expect("nats connect");
    let inbox = nc.new_inbox();
    let mut acks = nc.subscribe(inbox.clone()).await.expect("subscribe inbox");
    nc.flush().await.expect("flush");
    let msg = Message {
        value: value(last_ok + 1, BIG).into(),
        ack_inbox: inbox,
        correlation_id: "nats-1".into(),
        ack_policy: AckPolicy::Leader as i32,
        offset: -1,
        ..Default::default()
    };
    nc.publish("full", envelope::encode_message(&msg))
        .await
        .expect("nats publish");
    let got = tokio::time::timeout(Duration::from_secs(3), acks.next())
        .await
        .expect("an ack comes at once")
        .expect("inbox open");
    let ack = envelope::decode_ack(&got.payload).expect("an ack envelope");
    assert_eq!(ack.correlation_id, "nats-1");
    assert_eq!(ack.ack_error, AckError::Unknown as i32, "{ack:?}");

    // Everything acknowledged is readable while the device is full.
    read_all(&mut c, "full", last_ok, |o| value(o, size_of(o))).await;

    // Health and metrics say which partition cannot write, and why.
    let (code, hz) = node.get_json("/healthz").await;
    assert_eq!(code, 503, "{hz}");
    assert_eq!(hz["status"], "unavailable", "{hz}");
    assert_eq!(hz["status_code"], 503, "{hz}");
    assert_eq!(hz["errors"][0]["stream"], "full", "{hz}");
    assert!(
        hz["error"]
            .as_str()
            .unwrap_or("")
            .to_lowercase()
            .contains("no space left on device"),
        "{hz}"
    );
    let (code, h) = node.get_json("/api/v1/health").await;
    assert_eq!(code, 503, "{h}");
    assert_eq!(h["status"], "degraded", "{h}");
    assert_eq!(h["degraded"][0]["stream"], "full", "{h}");
    assert_eq!(h["degraded"][0]["partition"], 0, "{h}");
    assert_eq!(h["degraded"][0]["no_space"], true, "{h}");
    let (_, st) = node.get_json("/api/v1/streams/full").await;
    assert!(
        st["partitions"][0]["degraded"]
            .as_str()
            .is_some_and(|r| r.to_lowercase().contains("no space left on device")),
        "{st}"
    );
    let (_, metrics) = node.get("/metrics").await;
    assert!(
        metrics.contains("liftbridge_partition_degraded{stream=\"full\",partition=\"0\"} 1"),
        "degraded gauge:\n{}",
        metrics
            .lines()
            .filter(|l| l.contains("degraded"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // A stream created while the device is full is refused, and not left
    // behind in the metadata.
    let started = Instant::now();
    let refused = create(&mut c, "born-full")
        .await
        .expect_err("no room for its files");
    assert!(
        refused
            .message()
            .to_lowercase()
            .contains("no space left on device"),
        "{refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let listed = |c: &mut Client| {
        let mut c = c.clone();
        async move {
            c.fetch_metadata(proto::FetchMetadataRequest::default())
                .await
                .expect("metadata")
                .into_inner()
                .stream_metadata
                .into_iter()
                .map(|s| s.name)
                .collect::<Vec<_>>()
        }
    };
    let names = listed(&mut c).await;
    assert!(!names.iter().any(|n| n == "born-full"), "{names:?}");

    // Space comes back: writes resume without a restart, offsets continue.
    std::fs::remove_file(&filler).expect("remove filler");
    let next = last_ok + 1;
    let end = Instant::now() + Duration::from_secs(20);
    let ack = loop {
        match publish(&mut c, "full", value(next, 100)).await {
            Ok(ack) => break ack,
            Err(e) => {
                assert!(Instant::now() < end, "writes did not resume: {e:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(
        ack.offset, next,
        "no gap and no reused offset after recovery"
    );
    let ack = publish(&mut c, "full", value(next + 1, 100))
        .await
        .expect("publish");
    assert_eq!(ack.offset, next + 1);
    let size_after = move |o: i64| if o < 3 || o >= next { 100 } else { BIG };
    read_all(&mut c, "full", next + 1, |o| value(o, size_after(o))).await;
    wait_until(Duration::from_secs(10), "/healthz ok again", || async {
        node.get("/healthz").await.0 == 200
    })
    .await;
    let (code, h) = node.get_json("/api/v1/health").await;
    assert_eq!((code, &h["status"]), (200, &serde_json::json!("ok")), "{h}");

    // A restart finds exactly what was acknowledged, and no trace of the
    // refused stream.
    node.restart().await;
    let mut c = node.client().await;
    wait_until(
        Duration::from_secs(30),
        "the stream after the restart",
        || {
            let mut c = c.clone();
            async move {
                c.fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
                    stream: "full".into(),
                    partition: 0,
                })
                .await
                .is_ok_and(|m| {
                    m.into_inner()
                        .metadata
                        .is_some_and(|m| m.newest_offset == next + 1)
                })
            }
        },
    )
    .await;
    let names = listed(&mut c).await;
    assert!(!names.iter().any(|n| n == "born-full"), "{names:?}");
    read_all(&mut c, "full", next + 1, |o| value(o, size_after(o))).await;
    let ack = publish(&mut c, "full", value(next + 2, 100))
        .await
        .expect("publish");
    assert_eq!(ack.offset, next + 2);
    let (code, _) = node.get("/healthz").await;
    assert_eq!(code, 200);
    node.proc.stop(Duration::from_secs(20)).await;
}

/// The log alone on a full device, under `sync`: appends fail with the OS
/// error and are refused at once afterwards, everything acknowledged stays
/// readable, the fault is reported, and once space is freed appends
/// resume at the next offset without reopening; a reopen then finds
/// exactly what was acknowledged.
async fn log_on_a_full_device(sync: SyncPolicy) {
    let fs = Tmpfs::mount(FS_SIZE);
    let dir = fs.path().join("log");
    let cfg = LogConfig {
        sync,
        ..Default::default()
    };
    let open = {
        let (dir, cfg) = (dir.clone(), cfg.clone());
        move || PartitionLog::open(&dir, "p", cfg)
    };
    let log = tokio::task::spawn_blocking(open.clone())
        .await
        .unwrap()
        .expect("open");
    let rec = |o: i64, size: usize| NewRecord {
        value: value(o, size).into(),
        subject: "s".into(),
        ..Default::default()
    };
    for o in 0..3 {
        let a = log.append(0, vec![rec(o, 100)]).await.expect("append");
        assert_eq!(a.first_offset, o as u64);
    }
    let filler = fill(fs.path());
    let mut last_ok = 2i64;
    let err = loop {
        let o = last_ok + 1;
        match log.append(0, vec![rec(o, BIG)]).await {
            Ok(a) => {
                assert_eq!(a.first_offset, o as u64, "offsets are dense");
                last_ok = o;
                assert!(o < 2000, "the log never refused a write on a full device");
            }
            Err(e) => break e,
        }
    };
    assert!(err.is_no_space(), "{err}");
    let fault = log.fault().expect("the fault is reported");
    assert!(fault.no_space, "{fault:?}");
    assert!(
        fault
            .reason
            .to_lowercase()
            .contains("no space left on device"),
        "{fault:?}"
    );
    assert!(log.io_errors() >= 1);
    let started = Instant::now();
    let again = log
        .append(0, vec![rec(last_ok + 1, 100)])
        .await
        .expect_err("refused while full");
    assert!(again.is_no_space(), "{again}");
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(log.log_end_offset(), (last_ok + 1) as u64);

    let size_of = |o: i64| if o < 3 { 100 } else { BIG };
    let check = |recs: Vec<liftbridge::store::Record>, last: i64, size: &dyn Fn(i64) -> usize| {
        assert_eq!(recs.len() as i64, last + 1);
        for (i, r) in recs.iter().enumerate() {
            let o = i as i64;
            assert_eq!(r.offset, o as u64);
            assert!(r.value[..] == value(o, size(o))[..], "value at {o}");
        }
    };
    let recs = log
        .read(0, 100_000, usize::MAX)
        .await
        .expect("read while full");
    check(recs, last_ok, &size_of);

    std::fs::remove_file(&filler).expect("remove filler");
    let next = last_ok + 1;
    let end = Instant::now() + Duration::from_secs(20);
    let a = loop {
        match log.append(0, vec![rec(next, 100)]).await {
            Ok(a) => break a,
            Err(e) => {
                assert!(e.is_no_space(), "{e}");
                assert!(Instant::now() < end, "appends did not resume: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(a.first_offset, next as u64, "no gap, no reuse");
    assert!(log.fault().is_none());
    let size_after = move |o: i64| if o < 3 || o >= next { 100 } else { BIG };
    let recs = log.read(0, 100_000, usize::MAX).await.expect("read");
    check(recs, next, &size_after);

    log.close().await.expect("close");
    drop(log);
    let log = tokio::task::spawn_blocking(open)
        .await
        .unwrap()
        .expect("reopen");
    assert_eq!(log.log_end_offset(), (next + 1) as u64);
    let recs = log.read(0, 100_000, usize::MAX).await.expect("read");
    check(recs, next, &size_after);
    log.close().await.expect("close");
}

#[tokio::test]
async fn store_disk_full_sync_always() {
    log_on_a_full_device(SyncPolicy::Always).await;
}

#[tokio::test]
async fn store_disk_full_sync_interval() {
    log_on_a_full_device(SyncPolicy::Interval(Duration::from_millis(20))).await;
}
