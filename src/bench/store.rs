//! `liftbridge bench store`: load benchmark of the partition log, printed as
//! a markdown table next to the disk's own limit (sequential writes of the
//! same bytes with an fsync at the same cadence as the store's durable
//! commits, measured in the same run).
//!
//! Also holds the child process of the crash tests (`bench store-crash-child`,
//! hidden): it appends deterministic records until it is killed and prints
//! `ACK <first> <last>` for every append reported done.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use rand::{Rng, SeedableRng};

use crate::store::{
    LogConfig, NewRecord, Observer, PartitionLog, RetentionPolicy, StoreObserver, SyncPolicy,
};

/// Options of the store benchmark.
#[derive(Debug, Clone)]
pub struct StoreBenchOptions {
    /// Directory for the databases (a temporary one if `None`).
    pub dir: Option<PathBuf>,
    /// Seconds per append case.
    pub seconds: f64,
    /// Records in the big log (read, time lookup, retention, compaction).
    pub big_records: u64,
    /// Interval of the interval policy, ms.
    pub interval_ms: u64,
}

/// The record the crash-test child writes at `offset`: its content is a
/// function of the offset, so the parent can check every byte.
pub fn crash_record(offset: u64) -> NewRecord {
    let mut rng = rand::rngs::StdRng::seed_from_u64(offset);
    let len = rng.gen_range(0..600);
    let value: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
    NewRecord {
        timestamp_ns: 1_000_000 + offset as i64,
        key: (offset % 3 == 0).then(|| Bytes::from(format!("k{}", offset % 17))),
        headers: vec![("o".into(), Bytes::from(offset.to_string()))],
        value: Bytes::from(value),
        subject: format!("crash.{offset}"),
        reply: (offset % 2 == 0).then(|| "_INBOX.r".to_owned()),
    }
}

/// Test hook of the crash child: prints `DURABLE` after each durable redb
/// commit and `APPLIED` after each non-durable one (so the parent knows
/// checkpoints and tail applies happened between its kills) and,
/// when asked, aborts the process (no destructor, no final commit) once the
/// given number of journal frames has been written — counted from the
/// first switch of journal files if `armed` starts false.
struct ChildObserver {
    abort_after: Option<std::sync::atomic::AtomicU64>,
    armed: std::sync::atomic::AtomicBool,
}

impl StoreObserver for ChildObserver {
    fn journal_switched(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn journal_write(&self, _records: u64, _bytes: u64, _elapsed: Duration, _synced: bool) {
        if !self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        if let Some(left) = &self.abort_after {
            if left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) <= 1 {
                std::process::abort();
            }
        }
    }

    fn durable_commit(&self, _elapsed: Duration) {
        println!("DURABLE");
    }

    fn commit(&self, _appended: u64, _elapsed: Duration, durable: bool) {
        if !durable {
            println!("APPLIED");
        }
    }
}

/// Runs the crash-test child: appends batches of [`crash_record`]s forever,
/// printing `ACK first last` after each append completes.
pub fn crash_child(
    dir: &Path,
    sync: &str,
    seed: u64,
    abort_after_frames: Option<u64>,
    after_switch: bool,
) -> anyhow::Result<()> {
    let sync = match sync {
        "always" => SyncPolicy::Always,
        "interval" => SyncPolicy::Interval(Duration::from_millis(20)),
        // An interval long enough that a megabyte or more is journaled
        // between syncs: the syncs are checkpoints.
        "interval-checkpoints" => SyncPolicy::Interval(Duration::from_millis(150)),
        other => anyhow::bail!("unknown sync policy {other}"),
    };
    let observer = Observer::new(ChildObserver {
        abort_after: abort_after_frames.map(std::sync::atomic::AtomicU64::new),
        armed: std::sync::atomic::AtomicBool::new(!after_switch),
    });
    let cfg = LogConfig {
        sync,
        observer,
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let d = dir.to_owned();
        let log =
            tokio::task::spawn_blocking(move || PartitionLog::open(&d, "crash", cfg)).await??;
        println!("READY {}", log.log_end_offset());
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // Several appenders in flight so that group commits hold many batches.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, u64)>();
        let printer = tokio::spawn(async move {
            let mut out = std::io::stdout();
            while let Some((a, b)) = rx.recv().await {
                // A closed stdout means the parent is gone; stop quietly.
                if writeln!(out, "ACK {a} {b}")
                    .and_then(|_| out.flush())
                    .is_err()
                {
                    break;
                }
            }
        });
        let next = Arc::new(parking_lot::Mutex::new(log.log_end_offset()));
        let mut tasks = Vec::new();
        for t in 0..4u64 {
            let log = log.clone();
            let tx = tx.clone();
            let next = next.clone();
            let mut r = rand::rngs::StdRng::seed_from_u64(rng.gen::<u64>() ^ t);
            tasks.push(tokio::spawn(async move {
                loop {
                    let n = r.gen_range(1..40u64);
                    // `append` queues at call time, so holding the lock over
                    // "pick offsets, build records, queue" makes each record
                    // land at the offset its content was made for.
                    let fut = {
                        let mut next = next.lock();
                        let start = *next;
                        *next += n;
                        let recs = (start..start + n).map(crash_record).collect();
                        log.append_expecting(0, start, recs)
                    };
                    match fut.await {
                        Ok(res) => {
                            if tx.send((res.first_offset, res.last_offset)).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            eprintln!("append failed: {e}");
                            std::process::exit(3);
                        }
                    }
                }
            }));
        }
        drop(tx);
        for t in tasks {
            t.await?;
        }
        printer.await?;
        anyhow::Ok(())
    })
}

fn fmt_rate(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.2}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

fn record(size: usize, i: u64, key_space: u64) -> NewRecord {
    NewRecord {
        timestamp_ns: i as i64,
        key: (key_space > 0).then(|| Bytes::from(format!("key-{}", i % key_space))),
        headers: Vec::new(),
        value: Bytes::from(vec![b'x'; size]),
        subject: "bench.subject".into(),
        reply: None,
    }
}

struct AppendOutcome {
    records: u64,
    secs: f64,
    durable_commits: u64,
    commits: u64,
}

async fn open_log(dir: &Path, name: &str, cfg: LogConfig) -> anyhow::Result<PartitionLog> {
    let d = dir.to_owned();
    let n = name.to_owned();
    Ok(tokio::task::spawn_blocking(move || PartitionLog::open(&d, &n, cfg)).await??)
}

/// Appends from `inflight` concurrent producers per partition for `secs`.
async fn append_case(
    dir: &Path,
    sync: SyncPolicy,
    size: usize,
    batch: usize,
    partitions: usize,
    secs: f64,
) -> anyhow::Result<AppendOutcome> {
    const INFLIGHT: usize = 4;
    let cfg = LogConfig {
        sync,
        ..Default::default()
    };
    let mut logs = Vec::new();
    for p in 0..partitions {
        let name = format!("append-{size}-{batch}-{partitions}-{p}-{sync:?}")
            .replace([' ', '(', ')', ':', '.'], "_");
        PartitionLog::delete_files(dir, &name)?;
        logs.push(open_log(dir, &name, cfg.clone()).await?);
    }
    let payload = Bytes::from(vec![b'x'; size]);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for log in &logs {
        for _ in 0..INFLIGHT {
            let log = log.clone();
            let payload = payload.clone();
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    // Distinct, increasing timestamps: every record gets a
                    // time-index entry (the costly case).
                    let recs = (0..batch)
                        .map(|j| NewRecord {
                            timestamp_ns: (n + j as u64) as i64,
                            key: None,
                            headers: Vec::new(),
                            value: payload.clone(),
                            subject: "bench.subject".into(),
                            reply: None,
                        })
                        .collect();
                    log.append(0, recs).await?;
                    n += batch as u64;
                }
                anyhow::Ok(n)
            }));
        }
    }
    let mut records = 0;
    for t in tasks {
        records += t.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    let (mut durable_commits, mut commits) = (0, 0);
    for log in &logs {
        let s = log.commit_stats();
        durable_commits += s.durable_commits;
        commits += s.commits;
        log.close().await?;
        PartitionLog::delete_files(dir, log.partition_name())?;
    }
    Ok(AppendOutcome {
        records,
        secs,
        durable_commits,
        commits,
    })
}

/// The disk's own limit: `bytes_per_sync` written sequentially, then
/// fdatasync, repeated for `secs` across `files` files written in parallel.
fn disk_baseline(
    dir: &Path,
    bytes_per_sync: usize,
    files: usize,
    secs: f64,
) -> anyhow::Result<f64> {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let handles: Vec<_> = (0..files)
        .map(|i| {
            let path = dir.join(format!("baseline-{i}.bin"));
            std::thread::spawn(move || -> std::io::Result<u64> {
                let mut f = std::fs::File::create(&path)?;
                let buf = vec![0x5Au8; bytes_per_sync.max(1)];
                let mut total = 0u64;
                while Instant::now() < deadline {
                    f.write_all(&buf)?;
                    f.sync_data()?;
                    total += buf.len() as u64;
                }
                drop(f);
                std::fs::remove_file(&path)?;
                Ok(total)
            })
        })
        .collect();
    let mut total = 0u64;
    for h in handles {
        total += h
            .join()
            .map_err(|_| anyhow::anyhow!("baseline thread panicked"))??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// The storage engine's own ceiling on this machine: `batches` transactions
/// of 1000 raw inserts of `value_len`-byte values keyed by u64, without
/// fsync, without our encoding or time index (records/s).
fn engine_ceiling(dir: &Path, value_len: usize, batches: u64) -> anyhow::Result<f64> {
    const T: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("t");
    let path = dir.join("engine-ceiling.redb");
    let _ = std::fs::remove_file(&path);
    let db = redb::Database::builder().create(&path)?;
    let v = vec![7u8; value_len];
    let start = Instant::now();
    let mut k = 0u64;
    for _ in 0..batches {
        let mut tx = db.begin_write()?;
        tx.set_durability(redb::Durability::None);
        {
            let mut t = tx.open_table(T)?;
            for _ in 0..1000 {
                t.insert(k, v.as_slice())?;
                k += 1;
            }
        }
        tx.commit()?;
    }
    let rate = k as f64 / start.elapsed().as_secs_f64();
    drop(db);
    std::fs::remove_file(&path)?;
    Ok(rate)
}

/// Runs the whole benchmark and prints markdown tables.
pub fn run(opts: StoreBenchOptions) -> anyhow::Result<()> {
    let tmp;
    let dir = match &opts.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => {
            tmp = tempdir_in_cwd()?;
            tmp.0.clone()
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run_async(&dir, &opts))
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a leftover directory is only disk space.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir_in_cwd() -> anyhow::Result<TempDir> {
    let p = std::env::current_dir()?.join(format!(".bench-store-{}", std::process::id()));
    std::fs::create_dir_all(&p)?;
    Ok(TempDir(p))
}

async fn run_async(dir: &Path, opts: &StoreBenchOptions) -> anyhow::Result<()> {
    let interval = SyncPolicy::Interval(Duration::from_millis(opts.interval_ms));
    let d = dir.to_owned();
    let ceiling = tokio::task::spawn_blocking(move || engine_ceiling(&d, 160, 200)).await??;
    println!(
        "Engine ceiling on this machine now (redb, 1000 raw 160 B inserts per non-durable commit, no index): {} inserts/s\n",
        fmt_rate(ceiling)
    );
    println!(
        "## Append throughput ({} s per case, 4 appends in flight per partition)\n",
        opts.seconds
    );
    println!("| sync | record | batch | partitions | appends/s | MB/s payload | commits (durable) | disk limit MB/s at same fsync cadence | store / disk |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (sync_name, sync) in [("interval", interval), ("always", SyncPolicy::Always)] {
        for size in [128usize, 1024] {
            for batch in [1usize, 100, 1000] {
                for partitions in [1usize, 16] {
                    let o = append_case(dir, sync, size, batch, partitions, opts.seconds).await?;
                    let rate = o.records as f64 / o.secs;
                    let mbs = rate * size as f64 / 1e6;
                    let (disk, ratio) = if sync == SyncPolicy::Always && o.durable_commits > 0 {
                        let per_sync = (o.records as usize * size) / o.durable_commits as usize;
                        let per_file = per_sync.max(1);
                        let secs = opts.seconds.min(2.0);
                        let dir2 = dir.to_owned();
                        let d = tokio::task::spawn_blocking(move || {
                            disk_baseline(&dir2, per_file, partitions, secs)
                        })
                        .await??;
                        let d_mbs = d / 1e6;
                        (format!("{d_mbs:.1}"), format!("{:.2}", mbs / d_mbs))
                    } else {
                        ("–".into(), "–".into())
                    };
                    println!(
                        "| {sync_name} | {size} B | {batch} | {partitions} | {} | {mbs:.1} | {} ({}) | {disk} | {ratio} |",
                        fmt_rate(rate),
                        o.commits,
                        o.durable_commits
                    );
                }
            }
        }
    }

    // The big log: read, time lookups, file size, retention, compaction.
    let n = opts.big_records;
    println!("\n## Big log ({n} records of 128 B, 10 000 distinct keys)\n");
    println!("| operation | result |");
    println!("|---|---|");
    let name = "big";
    PartitionLog::delete_files(dir, name)?;
    let log = open_log(
        dir,
        name,
        LogConfig {
            sync: interval,
            ..Default::default()
        },
    )
    .await?;
    let t = Instant::now();
    let mut i = 0u64;
    while i < n {
        let k = 1000.min(n - i);
        let recs = (i..i + k).map(|j| record(128, j, 10_000)).collect();
        log.append(0, recs).await?;
        i += k;
    }
    log.sync().await?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "| build (batches of 1000, one appender) | {} appends/s |",
        fmt_rate(n as f64 / secs)
    );
    let payload = n * 128;
    println!(
        "| file size vs payload | {:.1} MiB file, {:.1} MiB payload, {:.1} MiB encoded ({:.2}× payload) |",
        log.disk_size() as f64 / 1048576.0,
        payload as f64 / 1048576.0,
        log.record_bytes() as f64 / 1048576.0,
        log.disk_size() as f64 / payload as f64
    );

    let t = Instant::now();
    let mut from = 0u64;
    let mut got = 0u64;
    let mut bytes = 0u64;
    loop {
        let recs = log.read(from, 1000, 1 << 20).await?;
        let Some(last) = recs.last() else { break };
        from = last.offset + 1;
        got += recs.len() as u64;
        bytes += recs.iter().map(|r| r.value.len() as u64).sum::<u64>();
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "| read from earliest (1000 per read) | {} records/s, {:.0} MB/s payload ({got} records) |",
        fmt_rate(got as f64 / secs),
        bytes as f64 / secs / 1e6
    );

    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut lat = Vec::new();
    for _ in 0..5000 {
        let ts = rng.gen_range(0..n as i64);
        let t = Instant::now();
        let o = log.offset_for_timestamp(ts).await?;
        lat.push(t.elapsed());
        anyhow::ensure!(o == Some(ts as u64), "offset_for_timestamp({ts}) = {o:?}");
    }
    lat.sort();
    println!(
        "| offset_for_timestamp latency (5000 random) | p50 {:.1} µs, p99 {:.1} µs |",
        lat[lat.len() / 2].as_secs_f64() * 1e6,
        lat[lat.len() * 99 / 100].as_secs_f64() * 1e6
    );

    // Compaction: 10 000 keys survive.
    let t = Instant::now();
    let c = log.compact().await?;
    println!(
        "| compaction ({} scanned) | {:.2} s, {} removed |",
        c.scanned_records,
        t.elapsed().as_secs_f64(),
        c.removed_records
    );

    // Rebuild to the full size for retention, then drop half while an
    // appender measures its latency.
    let log2_name = "big-retention";
    PartitionLog::delete_files(dir, log2_name)?;
    let log2 = open_log(
        dir,
        log2_name,
        LogConfig {
            sync: interval,
            ..Default::default()
        },
    )
    .await?;
    let mut i = 0u64;
    while i < n {
        let k = 1000.min(n - i);
        log2.append(0, (i..i + k).map(|j| record(128, j, 0)).collect())
            .await?;
        i += k;
    }
    log2.sync().await?;
    log2.update_config(LogConfig {
        sync: interval,
        retention: RetentionPolicy {
            max_messages: Some(n / 2),
            ..Default::default()
        },
        ..Default::default()
    });
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let log2 = log2.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut lats = Vec::new();
            let mut j = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                log2.append(0, vec![record(128, j, 0)]).await?;
                lats.push(t.elapsed());
                j += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            anyhow::Ok(lats)
        })
    };
    let t = Instant::now();
    let r = log2.enforce_retention().await?;
    let secs = t.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut lats = appender.await??;
    lats.sort();
    let max = lats.last().copied().unwrap_or_default();
    println!(
        "| retention (drop {} of {n}) | {secs:.2} s; concurrent 1-record appends: {} done, max latency {:.1} ms |",
        r.removed_records,
        lats.len(),
        max.as_secs_f64() * 1e3
    );
    log.close().await?;
    log2.close().await?;
    PartitionLog::delete_files(dir, name)?;
    PartitionLog::delete_files(dir, log2_name)?;
    Ok(())
}
