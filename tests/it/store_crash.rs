//! Crash tests: a child process (`liftbridge bench store-crash-child`)
//! appends deterministic records and prints every acknowledged append; the
//! parent kills it with SIGKILL at random moments, reopens the log and checks
//! it. With sync = always every acknowledged append must be there; with both
//! policies the log must be a prefix of what was appended: dense offsets from
//! 0, each record byte-identical to what the child wrote there.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use liftbridge::bench::store::crash_record;
use liftbridge::store::{LogConfig, PartitionLog};
use rand::{Rng, SeedableRng};

/// Runs one child until killed after `after`; returns the highest
/// acknowledged offset + 1 (0 if none) and how many records were acknowledged.
fn run_child(dir: &Path, sync: &str, seed: u64, after: Duration) -> (u64, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args(["bench", "store-crash-child"])
        .arg(dir)
        .arg(sync)
        .arg(seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("piped stdout");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut acked_end = 0u64;
        let mut acked = 0u64;
        let mut ready = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut parts = line.split_whitespace();
            match parts.next() {
                Some("READY") => {
                    ready = true;
                    let _ = ready_tx.send(());
                }
                Some("ACK") => {
                    let a: u64 = parts.next().unwrap().parse().unwrap();
                    let b: u64 = parts.next().unwrap().parse().unwrap();
                    acked += b - a + 1;
                    acked_end = acked_end.max(b + 1);
                }
                _ => {}
            }
        }
        (ready, acked_end, acked)
    });
    // Start the clock once the child has opened the log (start-up time
    // varies with machine load); the kill then lands mid-append.
    let opened = ready_rx.recv_timeout(Duration::from_secs(60)).is_ok();
    std::thread::sleep(after);
    // Child::kill sends SIGKILL on Unix: no destructor, no final commit.
    child.kill().expect("kill child");
    let status = child.wait().expect("wait child");
    assert!(!status.success(), "child exited by itself: {status}");
    let (ready, acked_end, acked) = reader.join().expect("reader");
    assert!(ready && opened, "child never opened the log");
    (acked_end, acked)
}

/// Reopens the log and checks it is exactly offsets 0..LEO with the child's
/// content; returns the LEO.
async fn verify(dir: &Path) -> u64 {
    let d = dir.to_owned();
    let t0 = std::time::Instant::now();
    let log = tokio::task::spawn_blocking(move || {
        PartitionLog::open_existing(&d, "crash", LogConfig::default())
    })
    .await
    .unwrap()
    .expect("reopen after crash");
    let open_time = t0.elapsed();
    assert!(
        open_time < Duration::from_secs(5),
        "slow reopen: {open_time:?}"
    );
    let leo = log.log_end_offset();
    assert_eq!(log.record_count(), leo, "holes: count differs from LEO");
    let mut next = 0u64;
    loop {
        let recs = log.read(next, 500, usize::MAX).await.expect("read");
        if recs.is_empty() {
            break;
        }
        for r in recs {
            assert_eq!(r.offset, next, "hole or duplicate at {next}");
            let want = crash_record(next);
            assert_eq!(r.value, want.value, "value differs at {next}");
            assert_eq!(r.key, want.key, "key differs at {next}");
            assert_eq!(r.headers, want.headers, "headers differ at {next}");
            assert_eq!(r.subject, want.subject, "subject differs at {next}");
            assert_eq!(r.reply, want.reply, "reply differs at {next}");
            assert_eq!(r.timestamp_ns, want.timestamp_ns);
            next += 1;
        }
    }
    assert_eq!(next, leo, "records end before the log end offset");
    log.close().await.unwrap();
    leo
}

async fn crash_loop(sync: &str, rounds: u32, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut total_acked = 0;
    let mut prev_leo = 0;
    for round in 0..rounds {
        let after = Duration::from_millis(rng.gen_range(150..450));
        let (acked_end, acked) = run_child(dir.path(), sync, rng.gen(), after);
        total_acked += acked;
        let leo = verify(dir.path()).await;
        if sync == "always" {
            assert!(
                leo >= acked_end,
                "round {round}: acknowledged up to {acked_end} but log ends at {leo}"
            );
            assert!(leo >= prev_leo, "round {round}: durable records vanished");
        }
        prev_leo = leo;
    }
    eprintln!("{sync}: {rounds} kills, {total_acked} records acknowledged, final LEO {prev_leo}");
    assert!(total_acked > 0, "no append was ever acknowledged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_crash_sync_always_keeps_every_ack() {
    crash_loop("always", 12, 0xC0FFEE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_crash_sync_interval_is_consistent_prefix() {
    crash_loop("interval", 8, 0xBEEF).await;
}
