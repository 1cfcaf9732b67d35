//! `/metrics`: counters move by exactly what the test did (NATS, partition
//! appends, gRPC by method and code, HTTP by route), gauges match the log,
//! the content type is the Prometheus text one, and Debian's `promtool`
//! accepts the scraped text.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use liftbridge::api::proto;
use liftbridge::config::nats::AuthConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::api_common::{self, client, config, create, eventually, from_earliest, start, take};

/// A scraped exposition: samples by name with their labels.
struct Scrape {
    head: String,
    text: String,
    samples: Vec<(String, HashMap<String, String>, f64)>,
}

impl Scrape {
    /// The value of the sample `name` whose labels include all of `labels`;
    /// panics when there is not exactly one.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<f64> = self
            .samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| *v)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{name} {labels:?}: expected one sample, got {found:?}\n{}",
            self.text
        );
        found[0]
    }

    /// Like `get`, but 0 when the series does not exist yet.
    fn get_or_zero(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let any = self.samples.iter().any(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        });
        if any {
            self.get(name, labels)
        } else {
            0.0
        }
    }

    fn count(&self, name: &str) -> usize {
        self.samples.iter().filter(|(n, _, _)| n == name).count()
    }
}

/// Parses `name{k="v",…} value` lines (label values here never contain
/// quotes or commas).
fn parse(text: &str) -> Vec<(String, HashMap<String, String>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("sample line has a value");
            let value: f64 = value.parse().expect("numeric sample value");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => {
                    let inner = rest.strip_suffix('}').expect("closing brace");
                    let labels = inner
                        .split(',')
                        .filter(|kv| !kv.is_empty())
                        .map(|kv| {
                            let (k, v) = kv.split_once('=').expect("label k=v");
                            (k.to_string(), v.trim_matches('"').to_string())
                        })
                        .collect();
                    (n.to_string(), labels)
                }
                None => (series.to_string(), HashMap::new()),
            };
            (name, labels, value)
        })
        .collect()
}

async fn scrape(addr: std::net::SocketAddr) -> Scrape {
    let resp = api_common::http_get(addr, "/metrics").await;
    parse_response(&resp)
}

/// Scrapes asking for OpenMetrics, as Prometheus does.
async fn scrape_openmetrics(addr: std::net::SocketAddr) -> Scrape {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
          Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n",
    )
    .await
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    parse_response(&resp)
}

fn parse_response(resp: &str) -> Scrape {
    let (head, body) = resp.split_once("\r\n\r\n").expect("http response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    Scrape {
        head: head.to_ascii_lowercase(),
        text: body.to_string(),
        samples: parse(body),
    }
}

/// Runs `promtool check metrics` on `text`; the test fails if promtool is
/// missing (the test command installs Debian's `prometheus` package).
fn promtool_check(text: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("/usr/bin/promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("/usr/bin/promtool runs (apt-get install -y prometheus)");
    child
        .stdin
        .take()
        .expect("stdin piped")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool finishes");
    assert!(
        out.status.success(),
        "promtool check metrics failed ({}):\n{}{}\n--- text ---\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn metrics_count_nats_grpc_partitions_and_http() {
    const N: usize = 25;
    const M: usize = 15;
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let http = node.http_addr().expect("http enabled");
    let mut c = client(&node).await;
    create(&mut c, "mx", "mx.sub", 1).await;

    let before = scrape(http).await;
    assert!(
        before
            .head
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{}",
        before.head
    );
    let in0 = before.get("liftbridge_nats_in_messages_total", &[]);
    let out0 = before.get("liftbridge_nats_out_messages_total", &[]);
    let inb0 = before.get("liftbridge_nats_in_bytes_total", &[]);
    let part = [("stream", "mx"), ("partition", "0")];
    assert_eq!(
        before.get("liftbridge_partition_high_watermark", &part),
        -1.0
    );
    assert_eq!(
        before.get("liftbridge_partition_newest_offset", &part),
        -1.0
    );
    assert_eq!(before.get("liftbridge_nats_connections", &[]), 0.0);

    // N plain NATS publishes of 10 bytes each.
    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .expect("nats connect");
    for i in 0..N {
        nc.publish("mx.sub", format!("nats-{i:05}").into())
            .await
            .unwrap();
    }
    nc.flush().await.unwrap();

    // M gRPC publishes without an ack (no ack message goes through NATS).
    for i in 0..M {
        c.publish(proto::PublishRequest {
            value: format!("grpc-{i}").into_bytes().into(),
            stream: "mx".into(),
            ack_policy: proto::AckPolicy::None as i32,
            ..Default::default()
        })
        .await
        .expect("publish");
    }
    // One error: deleting a stream that does not exist is NOT_FOUND.
    let err = c
        .delete_stream(proto::DeleteStreamRequest {
            name: "no-such-stream".into(),
        })
        .await
        .expect_err("unknown stream");
    assert_eq!(err.code(), tonic::Code::NotFound);

    let total = (N + M) as f64;
    eventually("all messages appended", || async {
        scrape(http)
            .await
            .get("liftbridge_partition_log_end_offset", &part)
            == total
    })
    .await;

    // A live subscriber reads everything back.
    let mut sub = api_common::subscribe(&mut c, from_earliest("mx", 0)).await;
    let msgs = take(&mut sub, N + M).await;
    assert_eq!(msgs.last().map(|m| m.offset), Some((N + M - 1) as i64));

    let s = scrape(http).await;
    // NATS: N TCP publishes plus those of the M gRPC publishes that went
    // through NATS (a call is handed to the partition instead while
    // everything published before it is recorded), each delivered once,
    // to the stenographer.
    let nats_in = s.get("liftbridge_nats_in_messages_total", &[]) - in0;
    assert!(
        (N as f64..=total).contains(&nats_in),
        "{nats_in} messages into NATS"
    );
    assert_eq!(
        s.get("liftbridge_nats_out_messages_total", &[]) - out0,
        nats_in
    );
    assert!(s.get("liftbridge_nats_in_bytes_total", &[]) - inb0 >= (N * 10) as f64);
    assert_eq!(s.get("liftbridge_nats_connections", &[]), 1.0);
    assert_eq!(
        s.get("liftbridge_nats_connections_accepted_total", &[]),
        1.0
    );
    assert!(s.get("liftbridge_nats_subscriptions", &[]) >= 1.0);
    assert_eq!(s.get("liftbridge_nats_auth_failures_total", &[]), 0.0);

    // Partition: exactly N + M appended; offsets and counts agree.
    assert_eq!(
        s.get("liftbridge_partition_messages_appended_total", &part),
        total
    );
    assert!(s.get("liftbridge_partition_appended_bytes_total", &part) > total * 10.0);
    assert_eq!(
        s.get("liftbridge_partition_high_watermark", &part),
        total - 1.0
    );
    assert_eq!(s.get("liftbridge_partition_log_end_offset", &part), total);
    assert_eq!(
        s.get("liftbridge_partition_newest_offset", &part),
        total - 1.0
    );
    assert_eq!(s.get("liftbridge_partition_oldest_offset", &part), 0.0);
    assert_eq!(s.get("liftbridge_partition_messages", &part), total);
    assert!(s.get("liftbridge_partition_stored_bytes", &part) > 0.0);
    assert!(s.get("liftbridge_partition_disk_bytes", &part) > 0.0);
    assert_eq!(s.get("liftbridge_partition_subscribers", &part), 1.0);
    assert_eq!(s.get("liftbridge_partition_paused", &part), 0.0);
    assert_eq!(s.get("liftbridge_partition_readonly", &part), 0.0);
    assert_eq!(s.get("liftbridge_partition_isr_replicas", &part), 1.0);
    assert_eq!(s.get("liftbridge_partitions_led", &[]), 1.0);

    // gRPC by method and code.
    let grpc = |m: &'static str, code: &'static str| {
        s.get_or_zero(
            "liftbridge_grpc_requests_total",
            &[("method", m), ("code", code)],
        )
    };
    assert_eq!(grpc("Publish", "OK"), M as f64);
    assert_eq!(grpc("CreateStream", "OK"), 1.0);
    assert_eq!(grpc("DeleteStream", "NotFound"), 1.0);
    assert_eq!(grpc("DeleteStream", "OK"), 0.0);
    assert_eq!(
        s.get(
            "liftbridge_grpc_request_duration_seconds_count",
            &[("method", "Publish")]
        ),
        M as f64
    );

    // Store (process-wide, shared with tests running in parallel).
    assert!(s.get("liftbridge_store_commits_total", &[]) >= 1.0);
    assert!(s.get("liftbridge_store_append_batch_records_count", &[]) >= 1.0);
    assert!(s.get("liftbridge_store_append_duration_seconds_count", &[]) >= 1.0);
    assert!(s.get("liftbridge_store_fsync_duration_seconds_count", &[]) >= 1.0);
    assert!(s.get("liftbridge_store_disk_bytes", &[]) > 0.0);

    // Process.
    assert!(s.get("process_resident_memory_bytes", &[]) > 1e6);
    assert!(s.get("process_virtual_memory_bytes", &[]) > 1e6);
    assert!(s.get("process_open_fds", &[]) >= 3.0);
    assert!(s.get("process_max_fds", &[]) >= s.get("process_open_fds", &[]));
    assert!(s.get("process_cpu_seconds_total", &[]) > 0.0);
    assert!(s.get("process_start_time_seconds", &[]) > 1.6e9);
    assert!(s.get("liftbridge_uptime_seconds", &[]) > 0.0);
    // The allocator's view (glibc or jemalloc): the node's own heap is in use.
    assert!(s.get("liftbridge_allocator_in_use_bytes", &[]) > 1e5);
    let free = s.get("liftbridge_allocator_free_bytes", &[]);
    let mapped = s.get("liftbridge_allocator_mapped_bytes", &[]);
    assert!(free.is_finite() && mapped.is_finite(), "{free} {mapped}");
    s.get("liftbridge_allocator_trims_total", &[]);
    assert_eq!(
        s.get(
            "liftbridge_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    promtool_check(&s.text);

    // The subscriber going away is counted as a cancelled Subscribe.
    drop(sub);
    eventually("cancelled Subscribe counted", || async {
        scrape(http).await.get_or_zero(
            "liftbridge_grpc_requests_total",
            &[("method", "Subscribe"), ("code", "Cancelled")],
        ) == 1.0
    })
    .await;

    // HTTP by route and status.
    let _ = api_common::http_get(http, "/varz").await;
    let _ = api_common::http_get(http, "/no/such/page").await;
    let s = scrape(http).await;
    let route = |r: &str, st: &str| {
        s.get_or_zero(
            "liftbridge_http_requests_total",
            &[("route", r), ("status", st)],
        )
    };
    assert_eq!(route("/varz", "200"), 1.0);
    assert_eq!(route("unmatched", "404"), 1.0);
    assert!(route("/metrics", "200") >= 3.0);
    promtool_check(&s.text);

    nc.drain().await.ok();
    node.shutdown().await;
}

/// Parses `text` with Prometheus's OpenMetrics parser (promtool's
/// backfill reads OpenMetrics; it needs timestamps, so each sample gets one).
fn promtool_check_openmetrics(text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let stamped: String = text
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                format!("{l}\n")
            } else {
                format!("{l} 1700000000\n")
            }
        })
        .collect();
    let input = dir.path().join("scrape.om");
    std::fs::write(&input, stamped).unwrap();
    let out = std::process::Command::new("/usr/bin/promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&input)
        .arg(dir.path().join("blocks"))
        .output()
        .expect("/usr/bin/promtool runs (apt-get install -y prometheus)");
    assert!(
        out.status.success(),
        "promtool rejected the OpenMetrics text ({}):\n{}{}\n--- text ---\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn metrics_openmetrics_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let http = node.http_addr().expect("http enabled");
    let mut c = client(&node).await;
    create(&mut c, "om", "om", 2).await;
    // Stream names may contain quotes: label values must be escaped.
    create(&mut c, "q\"uote", "quote", 1).await;
    let s = scrape_openmetrics(http).await;
    assert!(
        s.head
            .contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{}",
        s.head
    );
    assert!(s.text.ends_with("# EOF\n"), "{}", s.text);
    assert!(s.text.contains(
        "# TYPE liftbridge_nats_in_bytes counter\n# UNIT liftbridge_nats_in_bytes bytes\n"
    ));
    assert_eq!(s.count("liftbridge_partition_high_watermark"), 3);
    assert!(
        s.text
            .contains(r#"liftbridge_partition_high_watermark{stream="q\"uote",partition="0"} -1"#),
        "{}",
        s.text
    );
    promtool_check_openmetrics(&s.text);
    // Without the Accept header: the Prometheus text format.
    let plain = scrape(http).await;
    assert!(plain
        .head
        .contains("content-type: text/plain; version=0.0.4"));
    assert!(!plain.text.contains("# EOF"));
    promtool_check(&plain.text);
    node.shutdown().await;
}

#[tokio::test]
async fn metrics_count_nats_auth_failures() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.nats.auth = AuthConfig {
        token: Some("s3cret".into()),
        ..Default::default()
    };
    let node = start(cfg).await;
    let http = node.http_addr().expect("http enabled");
    // A wrong token, a right one, and a PING before any CONNECT.
    for token in ["wrong", "s3cret", ""] {
        let mut s = tokio::net::TcpStream::connect(node.nats_addr())
            .await
            .unwrap();
        let hello = if token.is_empty() {
            "PING\r\n".to_string()
        } else {
            format!("CONNECT {{\"auth_token\":\"{token}\"}}\r\nPING\r\n")
        };
        s.write_all(hello.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = String::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !got.contains("PONG") && !got.contains("-ERR") && Instant::now() < deadline {
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .expect("reply in time")
                .unwrap();
            if n == 0 {
                break;
            }
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        if token == "s3cret" {
            assert!(got.contains("PONG"), "{got}");
        } else {
            assert!(got.contains("Authorization Violation"), "{got}");
        }
    }
    let s = scrape(http).await;
    assert_eq!(s.get("liftbridge_nats_auth_failures_total", &[]), 2.0);
    assert_eq!(
        s.get("liftbridge_nats_connections_accepted_total", &[]),
        3.0
    );
    node.shutdown().await;
}

/// A stream of many partitions: one series per partition, promtool accepts
/// the text, and the scrape cost is printed (time and bytes). 32 partitions
/// keep the test short (opening and closing each log fsyncs); the README
/// gives the cost measured for 100 with the binary.
#[tokio::test]
async fn metrics_scrape_many_partitions() {
    const PARTS: usize = 32;
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let http = node.http_addr().expect("http enabled");
    let mut c = client(&node).await;
    create(&mut c, "wide", "wide", PARTS as i32).await;
    eventually("all partitions running", || async {
        scrape(http)
            .await
            .count("liftbridge_partition_log_end_offset")
            == PARTS
    })
    .await;
    let rounds = 10;
    let t = Instant::now();
    let mut bytes = 0;
    for _ in 0..rounds {
        bytes = scrape(http).await.text.len();
    }
    let per = t.elapsed() / rounds;
    eprintln!("metrics scrape with {PARTS} partitions: {bytes} bytes, {per:?} per scrape (HTTP round trip)");
    let s = scrape(http).await;
    assert_eq!(s.count("liftbridge_partition_high_watermark"), PARTS);
    assert_eq!(s.count("liftbridge_partition_isr_replicas"), PARTS);
    let last = (PARTS - 1).to_string();
    assert_eq!(
        s.get(
            "liftbridge_partition_high_watermark",
            &[("stream", "wide"), ("partition", last.as_str())]
        ),
        -1.0
    );
    assert_eq!(s.get("liftbridge_partitions_led", &[]), PARTS as f64);
    promtool_check(&s.text);
    node.shutdown().await;
}

/// Retention and compaction passes are counted with the records they
/// removed (the store series are process-wide, so deltas are lower bounds
/// when other tests run alongside).
#[tokio::test]
async fn metrics_count_retention_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let http = node.http_addr().expect("http enabled");
    let mut c = client(&node).await;
    let before = scrape(http).await;
    let runs = |s: &Scrape, n: &str| s.get(n, &[]);
    for (name, retention, compact) in [("ret", Some(5), false), ("cmp", None, true)] {
        c.create_stream(proto::CreateStreamRequest {
            subject: name.into(),
            name: name.into(),
            partitions: 1,
            retention_max_messages: retention.map(|v| proto::NullableInt64 { value: v }),
            compact_enabled: Some(proto::NullableBool { value: compact }),
            cleaner_interval: Some(proto::NullableInt64 { value: 50 }),
            ..Default::default()
        })
        .await
        .expect("create stream");
        for i in 0..20 {
            api_common::publish_acked(&mut c, name, 0, b"same-key", format!("v{i}").as_bytes())
                .await;
        }
    }
    eventually("retention and compaction ran", || async {
        let s = scrape(http).await;
        s.get("liftbridge_partition_messages", &[("stream", "ret")]) == 5.0
            && s.get("liftbridge_partition_messages", &[("stream", "cmp")]) == 1.0
    })
    .await;
    let s = scrape(http).await;
    assert_eq!(
        s.get("liftbridge_partition_oldest_offset", &[("stream", "ret")]),
        15.0
    );
    assert_eq!(
        s.get(
            "liftbridge_partition_messages_appended_total",
            &[("stream", "ret")]
        ),
        20.0
    );
    for (runs_name, removed_name) in [
        (
            "liftbridge_store_retention_runs_total",
            "liftbridge_store_retention_removed_records_total",
        ),
        (
            "liftbridge_store_compaction_runs_total",
            "liftbridge_store_compaction_removed_records_total",
        ),
    ] {
        assert!(
            runs(&s, runs_name) > runs(&before, runs_name),
            "{runs_name}"
        );
        assert!(
            runs(&s, removed_name) - runs(&before, removed_name) >= 15.0,
            "{removed_name}"
        );
    }
    node.shutdown().await;
}
