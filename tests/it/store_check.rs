//! `liftbridge check` and `liftbridge repair` on a real node's data
//! directory damaged while the node is stopped: check names the damage and
//! the last good offset (exit 1; 0 when sound; 2 while a node holds the
//! directory), repair truncates the partition to its last good record and
//! keeps its log end, and the node started afterwards serves offsets
//! 0..=last good and appends after the old log end (no offset reused).

use std::path::Path;
use std::process::{Command, Output};

use crate::api_common::{
    client, config, create, from_earliest, partition_metadata, publish_acked, start, subscribe,
    take, Client,
};

fn cli(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_liftbridge"))
        .args(args)
        .arg(dir)
        .output()
        .expect("liftbridge runs")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n{}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `check --json`: the exit code and the report of `stream`'s partition 0.
fn check_json(dir: &Path, stream: &str) -> (Option<i32>, serde_json::Value) {
    let o = cli(&["check", "--json"], dir);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("check --json prints JSON ({e}): {}", text(&o));
    });
    let p = v["partitions"]
        .as_array()
        .and_then(|ps| {
            ps.iter()
                .find(|p| p["stream"] == stream && p["partition"] == "0")
                .cloned()
        })
        .unwrap_or_else(|| panic!("{stream} is listed: {v}"));
    (o.status.code(), p)
}

fn value(i: u64) -> Vec<u8> {
    format!("hurt-record-{i:04}-body").into_bytes()
}

/// A stopped node's directory with `n` records in `hurt` and 5 in `fine`.
async fn populated(dir: &Path, n: u64) {
    let node = start(config(dir)).await;
    let mut c = client(&node).await;
    create(&mut c, "hurt", "hurt", 1).await;
    create(&mut c, "fine", "fine", 1).await;
    for i in 0..n {
        let ack = publish_acked(&mut c, "hurt", 0, b"", &value(i)).await;
        assert_eq!(ack.offset, i as i64);
    }
    for _ in 0..5 {
        publish_acked(&mut c, "fine", 0, b"", b"fine").await;
    }
    // While the node runs, check and repair refuse the directory.
    let o = cli(&["check"], dir);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("locked"), "{}", text(&o));
    let o = cli(&["repair"], dir);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    node.shutdown().await;
    let o = cli(&["check"], dir);
    assert_eq!(
        o.status.code(),
        Some(0),
        "a clean stop checks clean: {}",
        text(&o)
    );
}

/// Restarts the node and checks that `hurt` serves exactly offsets
/// `0..good` with their values, then takes its next append at `next`.
async fn serves(dir: &Path, good: u64, next: i64) {
    let node = start(config(dir)).await;
    let mut c: Client = client(&node).await;
    let meta = partition_metadata(&mut c, "hurt", 0).await;
    assert_eq!(meta.newest_offset, good as i64 - 1);
    let mut sub = subscribe(&mut c, from_earliest("hurt", 0)).await;
    let got = take(&mut sub, good as usize).await;
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.offset, i as i64);
        assert_eq!(m.value, value(i as u64));
    }
    let ack = publish_acked(&mut c, "hurt", 0, b"", b"after repair").await;
    assert_eq!(ack.offset, next, "the next append never reuses an offset");
    let after = take(&mut sub, 1).await;
    assert_eq!(
        (after[0].offset, &after[0].value[..]),
        (next, &b"after repair"[..])
    );
    // The other stream was never touched.
    assert_eq!(partition_metadata(&mut c, "fine", 0).await.newest_offset, 4);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_check_flipped_bytes_are_found_and_repair_truncates_there() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path(), 30).await;
    // Flip a byte in every stored copy of record 20's value.
    let file = dir.path().join("streams/hurt/0/log.redb");
    let mark = value(20);
    let mut bytes = std::fs::read(&file).unwrap();
    let mut flipped = 0;
    for i in 0..bytes.len().saturating_sub(mark.len()) {
        if bytes[i..i + mark.len()] == mark[..] {
            bytes[i + 5] ^= 0x20;
            flipped += 1;
        }
    }
    assert!(flipped >= 1);
    std::fs::write(&file, &bytes).unwrap();

    let (code, hurt) = check_json(dir.path(), "hurt");
    assert_eq!(code, Some(1), "{hurt}");
    assert_eq!(hurt["last_good_offset"], 19, "{hurt}");
    assert_eq!(hurt["last_offset"], 29, "{hurt}");
    assert_eq!(hurt["next_offset"], 30, "{hurt}");
    let problems = hurt["problems"].to_string();
    assert!(
        problems.contains("offset 20") && problems.contains("checksum"),
        "{hurt}"
    );
    let (_, fine) = check_json(dir.path(), "fine");
    assert_eq!(fine["problems"], serde_json::json!([]), "{fine}");
    assert_eq!(fine["records"], 5);
    // The check wrote nothing.
    assert!(std::fs::read(&file).unwrap() == bytes);

    let o = cli(
        &["repair", "--stream", "hurt", "--partition", "0"],
        dir.path(),
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("REPAIRED"), "{out}");
    assert!(out.contains("REMOVED offsets 20..29"), "{out}");
    assert!(out.contains("next append gets offset 30"), "{out}");
    assert!(dir.path().join("streams/hurt/0/log.redb.damaged").exists());
    let o = cli(&["check"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // A second repair finds nothing to do.
    let o = cli(&["repair"], dir.path());
    assert!(text(&o).contains("hurt partition 0: sound"), "{}", text(&o));

    serves(dir.path(), 20, 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_check_garbage_journal_is_reported_and_cleared() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path(), 10).await;
    let journal = dir.path().join("streams/hurt/0/log.journal");
    let len = std::fs::metadata(&journal).unwrap().len() as usize;
    std::fs::write(&journal, vec![0x5Au8; len]).unwrap();

    let (code, hurt) = check_json(dir.path(), "hurt");
    assert_eq!(code, Some(1), "{hurt}");
    assert!(
        hurt["problems"].to_string().contains("log.journal"),
        "{hurt}"
    );
    assert_eq!(hurt["last_good_offset"], 9, "{hurt}");
    let o = cli(&["repair"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("hurt partition 0: REPAIRED"),
        "{}",
        text(&o)
    );
    let o = cli(&["check"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    serves(dir.path(), 10, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_check_truncated_log_is_reported_and_not_repaired_blindly() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path(), 10).await;
    let file = dir.path().join("streams/hurt/0/log.redb");
    let len = std::fs::metadata(&file).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(len / 3).unwrap();
    drop(f);
    let before = std::fs::read(&file).unwrap();

    let (code, hurt) = check_json(dir.path(), "hurt");
    assert_eq!(code, Some(1), "{hurt}");
    assert!(hurt["problems"].to_string().contains("truncated"), "{hurt}");
    assert_eq!(hurt["unreadable"], true);
    let o = cli(&["check"], dir.path());
    assert!(text(&o).contains("DAMAGED"), "{}", text(&o));

    let o = cli(&["repair", "--stream", "hurt"], dir.path());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("NOT REPAIRED") && out.contains("cannot repair"),
        "{out}"
    );
    assert!(
        std::fs::read(&file).unwrap() == before,
        "the file is left as it was"
    );
}
