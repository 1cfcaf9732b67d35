//! `liftbridge bench lb` (the built binary) with tiny message counts against
//! a Go nats-server 2.15.1 with JetStream: it runs to the end, prints the
//! rows of both servers, the like-for-like ratios and writes its JSON; and
//! the rounds of a cell alternate between the servers, so each liftbridge
//! round is measured next to a JetStream one rather than minutes apart.

use std::ffi::OsStr;

use serde_json::Value;

use crate::support::procs::{go_nats_server_2_15, run_liftbridge};

#[test]
fn bench_lb_alternates_rounds_between_servers_and_prints_ratios() {
    let nats_server = go_nats_server_2_15();
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("lb.json");
    let peer = format!("js={}", nats_server.display());
    let args = [
        "bench",
        "lb",
        "--no-path-peer",
        "--peer",
        &peer,
        "--sync",
        "interval",
        "--workloads",
        "publish,record,replay",
        "--windows",
        "1",
        "--window1-msgs",
        "40",
        "--replay-msgs",
        "300",
        "--acks",
        "leader",
        "--via",
        "envelope,async",
        "--publishers",
        "1",
        "--rounds",
        "2",
        "--json",
    ];
    let args = args.iter().map(OsStr::new).chain([json.as_os_str()]);
    let (stdout, stderr) = run_liftbridge(dir.path(), args);

    // One progress line per round and target, in the order measured.
    let order: Vec<&str> = stderr
        .lines()
        .filter_map(|l| {
            if l.contains("liftbridge (sync=interval) NATS envelope, LEADER, window 1") {
                Some("lb envelope")
            } else if l.contains("liftbridge (sync=interval) PublishAsync, LEADER, window 1") {
                Some("lb async")
            } else if l.contains("JetStream (sync=default), window 1") {
                Some("js default")
            } else if l.contains("JetStream (sync=always), window 1") {
                Some("js always")
            } else {
                None
            }
        })
        .collect();
    let round = ["lb async", "lb envelope", "js default", "js always"];
    assert_eq!(order, [round, round].concat(), "{stderr}");

    // The table rows and the ratios, like for like.
    for row in [
        "| acked publish LEADER, window 1, 1 publisher(s) | liftbridge (sync=interval) PublishAsync |",
        "| acked publish LEADER, window 1, 1 publisher(s) | liftbridge (sync=interval) NATS envelope |",
        "JetStream (sync=default) |",
        "JetStream (sync=always) |",
        "| recording of plain NATS publishes | liftbridge (sync=interval) |",
        "| replay from earliest, 300 msgs | liftbridge (sync=interval) |",
        "| disk: 4 KiB append + fdatasync |",
    ] {
        assert!(stdout.contains(row), "no row {row:?} in:\n{stdout}");
    }
    let ratios: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("| acked publish") && l.matches(" | ").count() == 3)
        .collect();
    assert_eq!(ratios.len(), 2, "{stdout}");
    assert!(
        ratios
            .iter()
            .all(|l| l.contains("(sync=interval)") && l.contains("JetStream (sync=default)")),
        "{stdout}"
    );

    // The JSON holds the same rows, each rate a measured one.
    let rows: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("read JSON")).expect("JSON");
    let rows = rows.as_array().expect("an array of rows");
    let rate = |workload: &str, target: &str| -> f64 {
        rows.iter()
            .find(|r| {
                r["workload"] == workload
                    && r["target"].as_str().is_some_and(|t| t.contains(target))
            })
            .and_then(|r| r["msgs_per_sec"].as_f64())
            .unwrap_or_else(|| panic!("no row {workload} / {target} in {rows:?}"))
    };
    let w1 = "acked publish LEADER, window 1, 1 publisher(s)";
    for target in [
        "liftbridge (sync=interval) PublishAsync",
        "liftbridge (sync=interval) NATS envelope",
        "JetStream (sync=default)",
        "JetStream (sync=always)",
    ] {
        assert!(rate(w1, target) > 0.0, "{target}: {rows:?}");
    }
    assert!(rate("replay from earliest, 300 msgs", "JetStream (sync=default)") > 0.0);
}
