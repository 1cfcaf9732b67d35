//! `liftbridge bench cluster --quick` (the built binary: three liftbridge
//! node processes, three Go nats-server 2.15.1 processes with JetStream)
//! runs to the end with tiny message counts and one leader kill per
//! cluster, prints its throughput, ratio and failover tables and writes
//! its JSON: the benchmark cannot rot unnoticed.

use std::ffi::OsStr;

use serde_json::Value;

use crate::support::procs::{go_nats_server_2_15, run_liftbridge};

#[test]
fn bench_cluster_quick_prints_tables() {
    let nats_server = go_nats_server_2_15();
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("cluster.json");
    let args = ["bench", "cluster", "--quick", "--nats-server"]
        .map(OsStr::new)
        .into_iter()
        .chain([
            nats_server.as_os_str(),
            OsStr::new("--json"),
            json.as_os_str(),
        ]);
    let (stdout, _) = run_liftbridge(dir.path(), args);

    // The stated settings and the three tables.
    assert!(
        stdout.contains("clustering.replica.max.leader.timeout 1000ms"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| workload | target | msgs/s |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| workload | liftbridge | JetStream | ratio |"),
        "{stdout}"
    );
    assert!(stdout.contains("| failover (kill -9"), "{stdout}");

    let lb = [
        "liftbridge 3 nodes RF 3 minIsr 2 (sync=always)",
        "liftbridge 3 nodes RF 3 minIsr 2 (sync=interval)",
    ];
    let js = [
        "nats-server 2.15.1 JetStream R3 (sync=always)",
        "nats-server 2.15.1 JetStream R3 (sync=default)",
    ];
    // Every cell measured for every target (liftbridge through gRPC and
    // through NATS envelopes), and printed as a table row.
    let lb_targets: Vec<String> = lb
        .iter()
        .flat_map(|l| [format!("{l} PublishAsync"), format!("{l} NATS envelope")])
        .collect();
    for target in lb_targets.iter().map(String::as_str).chain(js) {
        for window in [1, 256] {
            for pubs in [1, 4] {
                let row = format!(
                    "| RF 3, acked publish ALL, window {window}, {pubs} publisher(s) | {target} |"
                );
                assert!(stdout.contains(&row), "no row {row:?} in\n{stdout}");
            }
        }
    }
    // Each liftbridge row is paired with the JetStream row of its
    // durability in the ratio table.
    for (l, j) in lb.iter().zip(js.iter()) {
        for via in ["PublishAsync", "NATS envelope"] {
            let pair = format!("| {l} {via} | {j} |");
            assert!(stdout.contains(&pair), "no ratio {pair:?} in\n{stdout}");
        }
    }

    let doc: Value = serde_json::from_slice(&std::fs::read(&json).expect("read the JSON"))
        .expect("the JSON parses");
    let rows = doc["throughput"].as_array().expect("throughput rows");
    // 6 targets × 2 windows × 2 publisher counts, and the disk row.
    assert_eq!(rows.len(), 25, "{doc:#}");
    for r in rows {
        let rate = r["msgs_per_sec"].as_f64().expect("a rate");
        assert!(rate.is_finite() && rate > 0.0, "{r}");
    }
    let failovers = doc["failover"].as_array().expect("failover rows");
    let targets: Vec<&str> = failovers
        .iter()
        .map(|f| f["target"].as_str().expect("a target"))
        .collect();
    assert_eq!(targets, [lb[0], lb[1], js[0], js[1]], "{doc:#}");
    for f in failovers {
        // One kill each; its time (or null: no ack within the limit).
        let kills = f["kills_ms"].as_array().expect("kills");
        assert_eq!(kills.len(), 1, "{f}");
        assert!(
            kills[0].is_null() || kills[0].as_f64().is_some_and(|v| v > 0.0),
            "{f}"
        );
    }
}
