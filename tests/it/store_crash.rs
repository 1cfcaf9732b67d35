//! Crash tests: a child process (`liftbridge bench store-crash-child`)
//! appends deterministic records and prints every acknowledged append; the
//! parent kills it with SIGKILL at random moments (or the child aborts
//! itself right after a journal write, before the redb apply), reopens the
//! log and checks it. Under both sync policies the same assertion holds: a
//! process crash loses no acknowledged append (the log ends at or past every
//! acknowledged offset, so no acknowledged offset is handed out again) and
//! the log is a prefix of what was appended: dense offsets from 0, each
//! record byte-identical to what the child wrote there.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use liftbridge::bench::store::crash_record;
use liftbridge::store::{LogConfig, PartitionLog};
use rand::{Rng, SeedableRng};

/// Runs one child until killed after `after`; returns the highest
/// acknowledged offset + 1 (0 if none) and how many records were acknowledged.
fn run_child(dir: &Path, sync: &str, seed: u64, after: Duration) -> Child {
    run_child_with(dir, sync, seed, Some(after), None, false)
}

/// What one child run reported.
struct Child {
    /// One past the highest acknowledged offset.
    acked_end: u64,
    /// Records acknowledged.
    acked: u64,
    /// Durable redb commits after the log was open.
    durable: u64,
    /// Non-durable redb commits (tail applies) after the log was open.
    applied: u64,
}

/// Runs one child until it is killed after `kill_after`, or until it aborts
/// itself after `abort_after_frames` journal frames (counted from its first
/// switch of journal files with `after_switch`).
fn run_child_with(
    dir: &Path,
    sync: &str,
    seed: u64,
    kill_after: Option<Duration>,
    abort_after_frames: Option<u64>,
    after_switch: bool,
) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_liftbridge"));
    cmd.args(["bench", "store-crash-child"])
        .arg(dir)
        .arg(sync)
        .arg(seed.to_string());
    if let Some(n) = abort_after_frames {
        cmd.arg("--abort-after-frames").arg(n.to_string());
        if after_switch {
            cmd.arg("--after-switch");
        }
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("piped stdout");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut acked_end = 0u64;
        let mut acked = 0u64;
        let mut durable = 0u64;
        let mut applied = 0u64;
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
                Some("DURABLE") if ready => durable += 1,
                Some("APPLIED") if ready => applied += 1,
                _ => {}
            }
        }
        (
            ready,
            Child {
                acked_end,
                acked,
                durable,
                applied,
            },
        )
    });
    // Start the clock once the child has opened the log (start-up time
    // varies with machine load); the kill then lands mid-append.
    let opened = ready_rx.recv_timeout(Duration::from_secs(60)).is_ok();
    let status = match kill_after {
        Some(after) => {
            std::thread::sleep(after);
            // Child::kill sends SIGKILL on Unix: no destructor, no final commit.
            child.kill().expect("kill child");
            child.wait().expect("wait child")
        }
        None => {
            // The child aborts by itself; bound the wait on a loaded machine.
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                if let Some(st) = child.try_wait().expect("wait child") {
                    break st;
                }
                if std::time::Instant::now() > deadline {
                    child.kill().expect("kill child");
                    panic!("child did not abort within 60 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert!(!status.success(), "child exited by itself: {status}");
    if kill_after.is_none() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(6), "child did not abort: {status}");
    }
    let (ready, run) = reader.join().expect("reader");
    assert!(ready && opened, "child never opened the log");
    run
}

/// Reopens the log and checks it is exactly offsets 0..LEO with the child's
/// content; returns the LEO.
async fn verify(dir: &Path) -> u64 {
    verify_replay(dir).await.0
}

/// Like [`verify`], also returning how many records the reopen replayed
/// from the journal.
async fn verify_replay(dir: &Path) -> (u64, u64) {
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
    let replayed = log.replayed_records();
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
    (leo, replayed)
}

/// Kills a child `rounds` times and checks every acknowledged record after
/// each; returns the durable and the non-durable commits the children made
/// in all.
async fn crash_loop(sync: &str, rounds: u32, seed: u64) -> (u64, u64) {
    crash_loop_within(sync, rounds, seed, 150..450).await
}

/// [`crash_loop`] with each kill `kill_ms` after the child opened the log.
async fn crash_loop_within(
    sync: &str,
    rounds: u32,
    seed: u64,
    kill_ms: std::ops::Range<u64>,
) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut total_acked = 0;
    let mut durable = 0;
    let mut applied = 0;
    let mut prev_leo = 0;
    for round in 0..rounds {
        let after = Duration::from_millis(rng.gen_range(kill_ms.clone()));
        let Child {
            acked_end,
            acked,
            durable: d,
            applied: a,
        } = run_child(dir.path(), sync, rng.gen(), after);
        total_acked += acked;
        durable += d;
        applied += a;
        // A log gets its database file (complete, renamed into place) with
        // its first record: a child killed before that leaves no file, and
        // then nothing may have been acknowledged.
        let leo = if !dir.path().join("crash.redb").exists() {
            assert_eq!(
                (acked_end, prev_leo),
                (0, 0),
                "{sync} round {round}: no database file after acknowledged appends"
            );
            0
        } else {
            verify(dir.path()).await
        };
        assert!(
            leo >= acked_end,
            "{sync} round {round}: acknowledged up to {acked_end} but log ends at {leo}"
        );
        assert!(leo >= prev_leo, "{sync} round {round}: records vanished");
        prev_leo = leo;
    }
    eprintln!(
        "{sync}: {rounds} kills, {total_acked} records acknowledged, {durable} durable commits, {applied} tail applies, final LEO {prev_leo}"
    );
    assert!(total_acked > 0, "no append was ever acknowledged");
    (durable, applied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_crash_sync_always_keeps_every_ack() {
    crash_loop("always", 12, 0xC0FFEE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_crash_sync_interval_keeps_every_ack() {
    crash_loop("interval", 12, 0xBEEF).await;
}

/// The same with children that live long enough to fill the in-memory tail
/// (4 MiB) several times: full tails are applied to redb on an applier
/// thread while appends go on, and kills land before, during and after
/// those applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_crash_sync_interval_background_applies_keep_every_ack() {
    let (_, applied) = crash_loop_within("interval", 5, 0xA991, 900..1500).await;
    assert!(applied > 0, "no tail was applied between the kills");
}

/// The same with an interval long enough that its syncs are checkpoints
/// (redb committed durably, the journal rewound) while records keep coming:
/// kills land before, during and after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_crash_sync_interval_checkpoints_keep_every_ack() {
    let (durable, _) = crash_loop("interval-checkpoints", 10, 0x5EED).await;
    assert!(durable > 0, "no checkpoint happened between the kills");
}

/// One child that aborts itself after `frames` journal frames (counted
/// from its first switch of journal files with `after_switch`), then the
/// reopen: the log must end past both the acknowledged appends and the
/// previous end `prev_leo` (the frame written last is kept too), with
/// records replayed. Returns the new end, the records replayed and the
/// frames each journal file held at the abort (first, second).
async fn abort_and_replay(
    dir: &Path,
    sync: &str,
    seed: u64,
    frames: u64,
    after_switch: bool,
    prev_leo: u64,
    round: u32,
) -> (u64, u64, [usize; 2]) {
    use liftbridge::store::journal;
    let acked_end = run_child_with(dir, sync, seed, None, Some(frames), after_switch).acked_end;
    let held = [
        journal::path(dir, "crash"),
        journal::spare_path(dir, "crash"),
    ]
    .map(|p| {
        let bytes = bytes::Bytes::from(std::fs::read(p).unwrap_or_default());
        journal::read_frames(&bytes).0.len()
    });
    let (leo, replayed) = verify_replay(dir).await;
    assert!(
        leo > acked_end.max(prev_leo),
        "{sync} round {round}: the last frame was written but the log ends at {leo} \
         (acknowledged up to {acked_end}, previous end {prev_leo}; frames per file {held:?})"
    );
    assert!(replayed > 0, "{sync} round {round}: nothing replayed");
    (leo, replayed, held)
}

/// The child aborts right after writing a journal frame (synced under
/// `always`), before answering it and before redb has it: the reopen must
/// replay the journal, keep every acknowledged append, and also keep the
/// frame that was written but never answered.
async fn abort_after_journal(sync: &str, rounds: u32, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut prev_leo = 0;
    let mut total_replayed = 0;
    for round in 0..rounds {
        let frames = rng.gen_range(5..200u64);
        let (leo, replayed, _) =
            abort_and_replay(dir.path(), sync, rng.gen(), frames, false, prev_leo, round).await;
        assert!(
            replayed <= leo - prev_leo,
            "{sync} round {round}: {replayed} records replayed, log grew {prev_leo}..{leo}"
        );
        total_replayed += replayed;
        prev_leo = leo;
    }
    eprintln!("{sync}: {rounds} aborts after a journal write, {total_replayed} records replayed, final LEO {prev_leo}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_crash_abort_after_journal_write_replays_always() {
    abort_after_journal("always", 6, 0xAB0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_crash_abort_after_journal_write_replays_interval() {
    abort_after_journal("interval", 6, 0xAB1).await;
}

/// Under an interval whose syncs are checkpoints, a busy log's checkpoint
/// runs in the background while appends go to its second journal file. The
/// child aborts a few frames after such a switch, before the checkpoint
/// is done or before the first file is emptied: frames are then in both
/// files. The reopen must replay both, keeping every acknowledged append
/// and the frame written last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_crash_abort_during_background_checkpoint_replays_both_journals() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xAB2);
    let (mut prev_leo, mut both, rounds) = (0, 0, 5);
    for round in 0..rounds {
        let frames = rng.gen_range(1..4u64);
        let sync = "interval-checkpoints";
        let (leo, _, held) =
            abort_and_replay(dir.path(), sync, rng.gen(), frames, true, prev_leo, round).await;
        if held.iter().all(|n| *n > 0) {
            both += 1;
        }
        prev_leo = leo;
    }
    eprintln!("{rounds} aborts after a switch of journal files, {both} with frames in both, final LEO {prev_leo}");
    assert!(both > 0, "no abort left frames in both journal files");
}
