//! `liftbridge bench lb`: acked durable publish and replay, side by side
//! with JetStream.
//!
//! Targets: this binary started as a single-node server (its own data
//! directory in a temp dir, `store.sync` as given) and every nats-server
//! binary (`--peer LABEL=PATH`, plus `nats-server` from PATH) started with
//! JetStream (file storage, one replica) twice: with its default sync (`-js
//! -sd DIR`) and with `jetstream { sync_interval: always }` (skipped with a
//! note where the version does not accept it). The disk's own rate of
//! durable 4 KiB appends (write + fdatasync) in the temp directory is
//! measured in the same run, and a ratio table compares `store.sync:
//! always` with JetStream `always` and `interval` with JetStream's default.
//!
//! All servers run for the whole run. Each round of a publish cell (window
//! and publisher count) measures every server in turn, seconds apart, so
//! a machine whose speed drifts over minutes moves them alike; a row is
//! the median of its rounds.
//!
//! Workloads (issue "Liftbridge streams on one node", item 9), 1 KiB values:
//! - acked publish, ack policy LEADER and ALL, windows of 1 and 256
//!   outstanding, 1 and 4 publishers, through gRPC `PublishAsync` and
//!   through enveloped NATS publishes; JetStream: async publish with acks in
//!   the same windows;
//! - recording rate of plain NATS publishes (the stenographer) with no loss;
//! - replay from earliest through `Subscribe`; JetStream: an ordered
//!   consumer.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use prost::Message as _;

use super::{find_on_path, free_port, median};
use crate::api::proto;
use crate::api::proto::api_client::ApiClient;

/// Arguments of `liftbridge bench lb`.
#[derive(Debug, Clone, clap::Args)]
pub struct LbBenchArgs {
    /// A nats-server binary to start with JetStream and measure, as LABEL=PATH. Repeatable.
    #[arg(long = "peer")]
    pub peers: Vec<String>,
    /// Do not add `nats-server` found on PATH as a peer.
    #[arg(long)]
    pub no_path_peer: bool,
    /// Messages per publish workload with a window of 256.
    #[arg(long, default_value_t = 50_000)]
    pub msgs: u64,
    /// Messages per publish workload with a window of 256 under an fsync
    /// before every ack (`store.sync: always`, JetStream `sync_interval:
    /// always`), which runs far slower; `--msgs` if not given. With it a
    /// run can time the fast cells over seconds, not a fraction of one,
    /// without the slow ones taking many minutes.
    #[arg(long)]
    pub always_msgs: Option<u64>,
    /// Messages per publish workload with a window of 1 (one round trip,
    /// and with `store.sync: always` one fsync, per message).
    #[arg(long, default_value_t = 2_000)]
    pub window1_msgs: u64,
    /// Messages recorded and then replayed in the replay workload.
    #[arg(long, default_value_t = 1_000_000)]
    pub replay_msgs: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// `store.sync` policies of the liftbridge server under test, each run
    /// in turn: `always`, `interval`, or `interval:DURATION` (also sets
    /// `store.sync.interval`, e.g. `interval:2m`, JetStream's default).
    #[arg(long, value_delimiter = ',', default_value = "always,interval")]
    pub sync: Vec<String>,
    /// Workloads to run: `publish` (acked publish), `record` (plain NATS
    /// publishes recorded), `replay` (Subscribe from earliest; needs
    /// `record`, which fills the stream it replays).
    #[arg(long, value_delimiter = ',', default_value = "publish,record,replay")]
    pub workloads: Vec<String>,
    /// Windows (messages outstanding per publisher) of the publish workloads.
    #[arg(long, value_delimiter = ',', default_value = "1,256")]
    pub windows: Vec<usize>,
    /// Paths of the liftbridge publish workloads: `async` (gRPC
    /// PublishAsync), `publish` (unary gRPC Publish calls, `window` of them
    /// in flight per publisher on one connection), `envelope` (enveloped
    /// NATS publishes).
    #[arg(long, value_delimiter = ',', default_value = "async,publish,envelope")]
    pub via: Vec<String>,
    /// Publisher counts of the publish workloads.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub publishers: Vec<usize>,
    /// Ack policies of the liftbridge publish workloads: `leader`, `all`.
    #[arg(long, value_delimiter = ',', default_value = "leader,all")]
    pub acks: Vec<String>,
    /// Another liftbridge binary to measure as well, as LABEL=PATH
    /// (repeatable): it runs the same workloads with the same client, so
    /// two builds compare in one run.
    #[arg(long = "lb")]
    pub other_lbs: Vec<String>,
    /// Repetitions of every publish measurement (each on a fresh stream);
    /// the median is reported. A round measures every server in turn
    /// before the next round starts. Record and replay run once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub rounds: u32,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl LbBenchArgs {
    /// Messages of one publish cell: by its window, and whether an fsync
    /// precedes every ack.
    fn cell_msgs(&self, window: usize, always: bool) -> u64 {
        if window == 1 {
            self.window1_msgs
        } else if always {
            self.always_msgs.unwrap_or(self.msgs)
        } else {
            self.msgs
        }
    }
}

struct Proc {
    child: Child,
    /// The server's data directory, removed when the server is.
    dir: tempfile::TempDir,
}

impl Proc {
    fn disk(&self) -> DiskMeter {
        DiskMeter::of(self.dir.path())
    }
}

/// A liftbridge server the publish cells run on, with its label in the
/// table (`NAME (sync=POLICY)`).
struct LbTarget {
    label: String,
    /// `store.sync: always`: its window-256 cells take `--always-msgs`.
    always: bool,
    proc_: Proc,
    grpc: String,
    nats: String,
}

impl LbTarget {
    /// One round of a publish cell through `via`, on a fresh stream that is
    /// deleted afterwards: the rate and the bytes written per message.
    async fn publish(
        &self,
        via: &str,
        policy: proto::AckPolicy,
        window: usize,
        pubs: usize,
        msgs: u64,
        payload: &Bytes,
    ) -> anyhow::Result<(f64, Option<f64>)> {
        let (grpc, stream) = (&self.grpc, format!("b{}", rand::random::<u32>()));
        create_stream(grpc, &stream).await?;
        let work = async {
            match via {
                "PublishAsync" => {
                    lb_publish_async(grpc, &stream, policy, window, pubs, msgs, payload).await
                }
                "Publish" => {
                    lb_publish_unary(grpc, &stream, policy, window, pubs, msgs, payload).await
                }
                _ => {
                    lb_publish_envelope(&self.nats, &stream, policy, window, pubs, msgs, payload)
                        .await
                }
            }
        };
        let r = self.proc_.disk().per_msg(msgs, work).await?;
        // As JetStream's streams are: the next round starts without this
        // one's data in the page cache.
        delete_stream(grpc, &stream).await?;
        Ok(r)
    }
}

/// A nats-server with JetStream the publish cells run on, labelled
/// `LABEL VERSION JetStream (sync=default|always)`.
struct JsTarget {
    label: String,
    /// `sync_interval: always`.
    always: bool,
    proc_: Proc,
    url: String,
}

/// The rounds measured for each row of the publish table, kept in the
/// order the rows were added.
#[derive(Default)]
struct Cells {
    rows: Vec<(String, String, Vec<f64>, Vec<f64>)>,
}

impl Cells {
    fn add(&mut self, workload: String, target: String) {
        self.rows.push((workload, target, Vec::new(), Vec::new()));
    }

    /// Records one round of the row `workload` × `target`.
    fn push(&mut self, workload: &str, target: &str, rate: f64, bytes: Option<f64>) {
        if let Some((_, _, rates, disk)) = self
            .rows
            .iter_mut()
            .find(|(w, t, _, _)| w == workload && t == target)
        {
            rates.push(rate);
            disk.extend(bytes);
        }
    }

    /// The rows, each with the median of its rounds.
    fn rows(self) -> impl Iterator<Item = Row> {
        self.rows
            .into_iter()
            .filter(|(_, _, rates, _)| !rates.is_empty())
            .map(|(workload, target, rates, disk)| Row {
                disk_bytes_per_msg: (!disk.is_empty()).then(|| median(disk)),
                ..Row::new(workload, target, median(rates))
            })
    }
}

/// Bytes written to the block device that holds a server's data
/// directory, from the device's sysfs `stat` (sectors written): what
/// reached the disk, so a server that rewrites a page still in the page
/// cache is not charged twice, and one whose data is synced and then
/// written again is. Writes done after the acks (redb applies, JetStream's
/// write-behind) belong to the workload that caused them, so a reading
/// follows a `sync` and waits until the count settles. Servers run one at
/// a time, but the count includes any other writer on the device
/// meanwhile. The process's own `write_bytes` (`/proc/PID/io`) is not
/// used: where the page cache holds large folios (ext4 on Linux 6.x), it
/// charges the whole folio each time a synced one is dirtied again, about
/// 1.1 MB per message for an fsync per 1 KiB message while the device
/// wrote 7–8 KB.
#[derive(Debug, Clone)]
pub(super) struct DiskMeter(Option<PathBuf>);

impl DiskMeter {
    /// The meter of the device holding `dir` (no reading where the
    /// directory has no block device, e.g. on tmpfs).
    fn of(dir: &std::path::Path) -> Self {
        use std::os::unix::fs::MetadataExt;
        let stat = std::fs::metadata(dir).ok().map(|m| {
            let (major, minor) = (libc::major(m.dev()), libc::minor(m.dev()));
            PathBuf::from(format!("/sys/dev/block/{major}:{minor}/stat"))
        });
        DiskMeter(stat.filter(|p| p.exists()))
    }

    fn read(&self) -> Option<u64> {
        let stat = std::fs::read_to_string(self.0.as_ref()?).ok()?;
        let sectors: u64 = stat.split_whitespace().nth(6)?.parse().ok()?;
        Some(sectors * 512)
    }

    /// The count once it has not moved for 500 ms (at most 3 s);
    /// `None` where the kernel does not report it.
    async fn settled(&self) -> Option<u64> {
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut last = self.read()?;
        let mut still = Instant::now();
        while Instant::now() < deadline && still.elapsed() < Duration::from_millis(500) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.read()?;
            if now != last {
                last = now;
                still = Instant::now();
            }
        }
        Some(last)
    }

    /// Runs `work` (which sends `msgs` messages) and returns its result
    /// with the bytes written per message.
    async fn per_msg<T>(
        &self,
        msgs: u64,
        work: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<(T, Option<f64>)> {
        // Synced before each reading: what earlier work left dirty is not
        // charged to this one, and this one's write-behind is.
        clean_page_cache().await;
        let before = self.settled().await;
        let r = work.await?;
        clean_page_cache().await;
        let after = self.settled().await;
        let per = match (before, after) {
            (Some(b), Some(a)) if msgs > 0 => Some(a.saturating_sub(b) as f64 / msgs as f64),
            _ => None,
        };
        Ok((r, per))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the benchmark and prints the table.
pub fn run(args: LbBenchArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the benchmark runtime")?;
    rt.block_on(run_async(args))
}

/// One measured rate: a workload on a target.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Row {
    pub(super) workload: String,
    pub(super) target: String,
    pub(super) msgs_per_sec: f64,
    /// Bytes the server wrote to storage per message (see [`DiskMeter`]),
    /// where measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) disk_bytes_per_msg: Option<f64>,
}

impl Row {
    pub(super) fn new(workload: String, target: String, msgs_per_sec: f64) -> Self {
        Row {
            workload,
            target,
            msgs_per_sec,
            disk_bytes_per_msg: None,
        }
    }
}

async fn run_async(args: LbBenchArgs) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let payload = Bytes::from(vec![b'v'; args.size]);

    let wants = |w: &str| args.workloads.iter().any(|x| x == w);
    let (publish, record, replay) = (wants("publish"), wants("record"), wants("replay"));
    if replay && !record {
        bail!("the replay workload replays what the record workload wrote: add `record`");
    }
    for sync in &args.sync {
        sync_config(sync)?;
    }
    if let Some(a) = args
        .acks
        .iter()
        .find(|a| !a.eq_ignore_ascii_case("leader") && !a.eq_ignore_ascii_case("all"))
    {
        bail!("--acks: unknown ack policy {a:?} (leader, all)");
    }
    let windows: &[usize] = if publish { &args.windows } else { &[] };
    if let Some(v) = args
        .via
        .iter()
        .find(|v| !["async", "publish", "envelope"].contains(&v.as_str()))
    {
        bail!("--via: unknown path {v:?} (async, publish, envelope)");
    }
    let vias: Vec<&str> = [
        ("async", "PublishAsync"),
        ("publish", "Publish"),
        ("envelope", "NATS envelope"),
    ]
    .into_iter()
    .filter(|(k, _)| args.via.iter().any(|v| v == k))
    .map(|(_, name)| name)
    .collect();
    let mut servers = vec![("liftbridge".to_string(), std::env::current_exe()?)];
    for l in &args.other_lbs {
        let (l, path) = l
            .split_once('=')
            .ok_or_else(|| anyhow!("expected LABEL=PATH, got {l:?}"))?;
        servers.push((l.to_string(), PathBuf::from(path)));
    }
    let mut peers: Vec<(String, PathBuf)> = Vec::new();
    for p in &args.peers {
        let (l, path) = p
            .split_once('=')
            .ok_or_else(|| anyhow!("expected LABEL=PATH, got {p:?}"))?;
        peers.push((l.to_string(), PathBuf::from(path)));
    }
    if !args.no_path_peer {
        if let Some(p) = find_on_path("nats-server") {
            peers.push(("nats-server".into(), p));
        }
    }

    // Every server runs for the whole run, so each round of a cell measures
    // them one after the other, seconds apart: a machine whose speed drifts
    // over minutes moves all of them alike, and the ratios stay fair.
    let mut lbs = Vec::new();
    for sync in &args.sync {
        for (server, exe) in &servers {
            let (proc_, grpc, nats) = start_liftbridge(exe, sync)?;
            lbs.push(LbTarget {
                label: format!("{server} (sync={sync})"),
                always: sync == "always",
                proc_,
                grpc,
                nats,
            });
        }
    }
    let mut jss = Vec::new();
    for (label, path) in &peers {
        // Each peer twice: its default (acks before any fsync; a sync every
        // 2 minutes) and `jetstream { sync_interval: always }` (fsync before
        // every ack), the counterparts of `store.sync: interval` and `always`.
        for (js_sync, always) in [("default", false), ("always", true)] {
            let (proc_, url) = match start_jetstream(path, always) {
                Ok(p) => p,
                Err(e) if always => {
                    println!("note: {label} with sync_interval: always not measured: {e:#}");
                    continue;
                }
                Err(e) => return Err(e),
            };
            let version = async_nats::connect(&url)
                .await?
                .server_info()
                .version
                .clone();
            jss.push(JsTarget {
                label: format!("{label} {version} JetStream (sync={js_sync})"),
                always,
                proc_,
                url,
            });
        }
    }

    let policies: Vec<(proto::AckPolicy, &str)> = [
        (proto::AckPolicy::Leader, "LEADER"),
        (proto::AckPolicy::All, "ALL"),
    ]
    .into_iter()
    .filter(|(_, name)| args.acks.iter().any(|a| a.eq_ignore_ascii_case(name)))
    .collect();
    let workload = |pname: &str, window: usize, pubs: usize| {
        format!("acked publish {pname}, window {window}, {pubs} publisher(s)")
    };
    // The rows in the order of the table: each liftbridge server's cells,
    // then each JetStream's (which measures one cell for both ack policies).
    let mut cells = Cells::default();
    for lb in &lbs {
        for (_, pname) in &policies {
            for &window in windows {
                for &pubs in &args.publishers {
                    for via in &vias {
                        cells.add(workload(pname, window, pubs), format!("{} {via}", lb.label));
                    }
                }
            }
        }
    }
    for js in &jss {
        for &window in windows {
            for &pubs in &args.publishers {
                for (_, pname) in &policies {
                    cells.add(workload(pname, window, pubs), js.label.clone());
                }
            }
        }
    }
    for &window in windows {
        for &pubs in &args.publishers {
            for _ in 0..args.rounds {
                for lb in &lbs {
                    let msgs = args.cell_msgs(window, lb.always);
                    for &(policy, pname) in &policies {
                        for &via in &vias {
                            let (rate, bytes) = lb
                                .publish(via, policy, window, pubs, msgs, &payload)
                                .await?;
                            eprintln!(
                                "  {} {via}, {pname}, window {window}, {pubs} publisher(s): {rate:.0} msgs/s",
                                lb.label
                            );
                            let target = format!("{} {via}", lb.label);
                            cells.push(&workload(pname, window, pubs), &target, rate, bytes);
                        }
                    }
                }
                for js in &jss {
                    let msgs = args.cell_msgs(window, js.always);
                    let (rate, bytes) =
                        js_publish(&js.url, js.proc_.disk(), window, pubs, msgs, &payload).await?;
                    eprintln!(
                        "  {}, window {window}, {pubs} publisher(s): {rate:.0} msgs/s",
                        js.label
                    );
                    for (_, pname) in &policies {
                        cells.push(&workload(pname, window, pubs), &js.label, rate, bytes);
                    }
                }
            }
        }
    }
    rows.extend(cells.rows());

    if record {
        for lb in &lbs {
            let stream = format!("r{}", rand::random::<u32>());
            create_stream(&lb.grpc, &stream).await?;
            let (rec, disk) = lb
                .proc_
                .disk()
                .per_msg(
                    args.replay_msgs,
                    lb_record_plain(&lb.grpc, &lb.nats, &stream, args.replay_msgs, &payload),
                )
                .await?;
            rows.push(Row {
                disk_bytes_per_msg: disk,
                ..Row::new(
                    "recording of plain NATS publishes".into(),
                    lb.label.clone(),
                    rec,
                )
            });
            if replay {
                let rep = lb_replay(&lb.grpc, &stream, args.replay_msgs).await?;
                rows.push(Row::new(
                    format!("replay from earliest, {} msgs", args.replay_msgs),
                    lb.label.clone(),
                    rep,
                ));
            }
        }
    }
    if replay {
        for js in jss.iter().filter(|js| !js.always) {
            let rep = js_replay(&js.url, args.replay_msgs, &payload).await?;
            rows.push(Row::new(
                format!("replay from earliest, {} msgs", args.replay_msgs),
                js.label.clone(),
                rep,
            ));
        }
    }
    // The servers stop before the disk is measured on its own.
    drop(lbs);
    drop(jss);

    // The disk's own limits, measured where the servers keep their data.
    let dir = std::env::temp_dir();
    let disk = format!("disk ({})", dir.display());
    let (fsync_rate, fsync_us) = disk_fsync_rate(&dir, 2000)?;
    println!(
        "disk: 2000 x (4 KiB append + fdatasync) in {}: {fsync_rate:.0} fsyncs/s ({fsync_us:.0} us each)",
        dir.display()
    );
    rows.push(Row::new(
        "disk: 4 KiB append + fdatasync".into(),
        disk.clone(),
        fsync_rate,
    ));
    let mbps = disk_write_rate(&dir, 256)?;
    println!(
        "disk: 256 MiB written in 1 MiB writes + fdatasync in {}: {mbps:.0} MB/s",
        dir.display()
    );
    rows.push(Row::new("disk: sequential write, MB/s".into(), disk, mbps));

    print_rows(&rows);
    print_ratios(&rows);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn wait_port(port: u16, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("{what} did not listen on port {port} within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The `store.sync` lines of a `--sync` value: `always`, `interval`, or
/// `interval:DURATION` (with `store.sync.interval`).
fn sync_config(sync: &str) -> anyhow::Result<String> {
    match sync.split_once(':') {
        None if sync == "always" || sync == "interval" => Ok(format!("store.sync: {sync}\n")),
        Some(("interval", every)) if !every.is_empty() => Ok(format!(
            "store.sync: interval\nstore.sync.interval: {every}\n"
        )),
        _ => bail!("--sync: expected always, interval or interval:DURATION, got {sync:?}"),
    }
}

fn start_liftbridge(exe: &Path, sync: &str) -> anyhow::Result<(Proc, String, String)> {
    let dir = tempfile::tempdir()?;
    let cfg = dir.path().join("liftbridge.yaml");
    let (grpc, nats) = (free_port()?, free_port()?);
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:{grpc}\nnats.listen: 127.0.0.1:{nats}\nhttp.listen: 127.0.0.1:0\n{}",
            sync_config(sync)?
        ),
    )?;
    let child = Command::new(exe)
        .arg("-c")
        .arg(&cfg)
        .arg("-d")
        .arg(dir.path().join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting liftbridge")?;
    let p = Proc { child, dir };
    wait_port(grpc, "liftbridge gRPC")?;
    wait_port(nats, "liftbridge NATS")?;
    Ok((
        p,
        format!("http://127.0.0.1:{grpc}"),
        format!("nats://127.0.0.1:{nats}"),
    ))
}

/// Starts nats-server with JetStream (file storage in a temp dir); with
/// `sync_always`, through a config file with `sync_interval: always`.
fn start_jetstream(exe: &Path, sync_always: bool) -> anyhow::Result<(Proc, String)> {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let mut cmd = Command::new(exe);
    cmd.args(["-a", "127.0.0.1", "-p", &port.to_string()]);
    if sync_always {
        let conf = dir.path().join("js.conf");
        std::fs::write(
            &conf,
            format!(
                "jetstream {{\n  store_dir: {:?}\n  sync_interval: always\n}}\n",
                dir.path().join("js").display().to_string()
            ),
        )?;
        cmd.arg("-c").arg(&conf);
    } else {
        cmd.args(["-js", "-sd"]).arg(dir.path());
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let mut p = Proc { child, dir };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(st) = p.child.try_wait()? {
            bail!("{} exited at start-up ({st})", exe.display());
        }
        if Instant::now() > deadline {
            bail!("nats-server did not listen on port {port} within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((p, format!("nats://127.0.0.1:{port}")))
}

/// The disk's own durable-append rate: `n` times a 4 KiB append followed by
/// `fdatasync`, in a new file under `dir`. Returns (fsyncs per second, mean
/// µs per append + fdatasync).
pub fn disk_fsync_rate(dir: &Path, n: usize) -> anyhow::Result<(f64, f64)> {
    use std::io::Write;
    let tmp = tempfile::tempdir_in(dir)?;
    let mut f = std::fs::File::create(tmp.path().join("fsync-probe"))?;
    let block = vec![0x5au8; 4096];
    let start = Instant::now();
    for _ in 0..n {
        f.write_all(&block)?;
        f.sync_data()?;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((n as f64 / secs, secs * 1e6 / n as f64))
}

/// Writes every dirty page of the machine back (`sync(2)`), so that a
/// measurement does not start behind the write-behind of the one before it:
/// once the page cache holds more dirty data than the kernel allows, every
/// writer is throttled to the disk's rate, whoever dirtied the pages.
async fn clean_page_cache() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    let _ = tokio::task::spawn_blocking(|| unsafe { libc::sync() }).await;
}

/// The disk's sequential write rate in MB/s: `mib` MiB written in 1 MiB
/// writes to a new file in `dir`, then one `fdatasync`. A server that
/// writes more bytes per message than this rate allows is bounded by it
/// once the page cache's dirty limit is reached.
pub fn disk_write_rate(dir: &Path, mib: usize) -> anyhow::Result<f64> {
    use std::io::Write;
    let tmp = tempfile::tempdir_in(dir)?;
    let mut f = std::fs::File::create(tmp.path().join("write-probe"))?;
    let block = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    for _ in 0..mib {
        f.write_all(&block)?;
    }
    f.sync_data()?;
    Ok((mib << 20) as f64 / 1e6 / start.elapsed().as_secs_f64())
}

/// Ratios of each liftbridge row to the JetStream rows of the matching
/// durability: `sync=always` against `sync_interval: always`, and
/// `sync=interval` against JetStream's default.
pub(super) fn print_ratios(rows: &[Row]) {
    println!();
    println!("| workload | liftbridge | JetStream | ratio |");
    println!("|---|---|---|---:|");
    for lb in rows
        .iter()
        .filter(|r| r.target.contains("(sync=") && !r.target.contains("JetStream"))
    {
        let js_sync = if lb.target.contains("(sync=always)") {
            "(sync=always)"
        } else {
            "(sync=default)"
        };
        for js in rows.iter().filter(|r| {
            r.workload == lb.workload
                && r.target.contains("JetStream")
                && r.target.contains(js_sync)
        }) {
            if js.msgs_per_sec > 0.0 {
                println!(
                    "| {} | {} | {} | {:.2} |",
                    lb.workload,
                    lb.target,
                    js.target,
                    lb.msgs_per_sec / js.msgs_per_sec
                );
            }
        }
    }
}

/// Deletes a stream measured on, with its data.
pub(super) async fn delete_stream(grpc: &str, name: &str) -> anyhow::Result<()> {
    grpc_client(grpc)
        .await?
        .delete_stream(proto::DeleteStreamRequest {
            name: name.to_string(),
        })
        .await
        .with_context(|| format!("deleting stream {name}"))?;
    Ok(())
}

async fn create_stream(grpc: &str, name: &str) -> anyhow::Result<()> {
    let mut c = grpc_client(grpc).await?;
    c.create_stream(proto::CreateStreamRequest {
        subject: name.to_string(),
        name: name.to_string(),
        ..Default::default()
    })
    .await?;
    // Wait until the partition has a leader that records.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let md = c
            .fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
                stream: name.to_string(),
                partition: 0,
            })
            .await;
        if md.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("stream {name} has no partition leader after 10 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A gRPC client whose HTTP/2 receive windows fit a stream of many 1 KiB
/// messages (as grpc-go's dynamic window does; h2's default is 64 KiB), so
/// replay measures the server rather than flow-control round trips.
pub(super) async fn grpc_client(url: &str) -> anyhow::Result<ApiClient<tonic::transport::Channel>> {
    let ch = tonic::transport::Endpoint::from_shared(url.to_string())?
        .tcp_nodelay(true)
        .initial_stream_window_size(4 << 20)
        .initial_connection_window_size(16 << 20)
        .connect()
        .await?;
    Ok(ApiClient::new(ch))
}

/// Runs `pubs` publishers, each sending `msgs / pubs` messages through the
/// future `publisher(index, count, start)` makes, and returns the overall
/// rate in messages per second. Each publisher connects first and then
/// calls [`Start::ready`]: the clock starts once all are connected, so the
/// rate is of publishing alone.
async fn timed_publishers<F, Fut>(pubs: usize, msgs: u64, publisher: F) -> anyhow::Result<f64>
where
    F: Fn(usize, u64, Start) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let per = msgs / pubs as u64;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(pubs.max(1));
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let tasks: Vec<_> = (0..pubs)
        .map(|p| {
            let start = Start {
                ready: ready_tx.clone(),
                go: go_rx.clone(),
            };
            tokio::spawn(publisher(p, per, start))
        })
        .collect();
    drop(ready_tx);
    // All ready, or one failed before it was (its error comes below).
    for _ in 0..pubs {
        if ready_rx.recv().await.is_none() {
            break;
        }
    }
    let start = Instant::now();
    let _ = go_tx.send(true);
    for t in tasks {
        t.await??;
    }
    Ok((per * pubs as u64) as f64 / start.elapsed().as_secs_f64())
}

/// A publisher's start line (see [`timed_publishers`]).
struct Start {
    ready: tokio::sync::mpsc::Sender<()>,
    go: tokio::sync::watch::Receiver<bool>,
}

impl Start {
    /// Reports this publisher connected and waits for the others.
    async fn ready(mut self) {
        let _ = self.ready.send(()).await;
        let _ = self.go.wait_for(|go| *go).await;
    }
}

pub(super) async fn lb_publish_async(
    grpc: &str,
    stream: &str,
    policy: proto::AckPolicy,
    window: usize,
    pubs: usize,
    msgs: u64,
    payload: &Bytes,
) -> anyhow::Result<f64> {
    timed_publishers(pubs, msgs, |p, per, start| {
        let grpc = grpc.to_string();
        let stream = stream.to_string();
        let payload = payload.clone();
        async move {
            let mut c = grpc_client(&grpc).await?;
            let window = window.max(1);
            // The channel holds at most `window` requests: no more are in
            // flight, so a send never waits.
            let (tx, rx) = tokio::sync::mpsc::channel::<proto::PublishRequest>(window);
            let mut responses = c
                .publish_async(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await?
                .into_inner();
            start.ready().await;
            // One task sends and takes the acks, as the JetStream publisher
            // does: a request goes out whenever fewer than `window` await
            // their acks.
            let (mut sent, mut acked) = (0u64, 0u64);
            while acked < per {
                while sent < per && sent - acked < window as u64 {
                    tx.try_send(request(&stream, &payload, format!("{p}-{sent}"), policy))
                        .map_err(|_| anyhow!("publish stream closed"))?;
                    sent += 1;
                }
                match responses.next().await {
                    Some(Ok(r)) => {
                        if let Some(e) = r.async_error {
                            bail!("publish failed: {}", e.message);
                        }
                        acked += 1;
                    }
                    Some(Err(e)) => return Err(e.into()),
                    None => bail!("ack stream ended after {acked} acks"),
                }
            }
            drop(tx);
            anyhow::Ok(())
        }
    })
    .await
}

/// `pubs` publishers, each with its own connection, send `msgs` messages
/// in all as unary `Publish` calls with a deadline (so each waits for its
/// ack), each keeping `window` calls in flight; returns messages per
/// second.
pub(super) async fn lb_publish_unary(
    grpc: &str,
    stream: &str,
    policy: proto::AckPolicy,
    window: usize,
    pubs: usize,
    msgs: u64,
    payload: &Bytes,
) -> anyhow::Result<f64> {
    timed_publishers(pubs, msgs, |_, per, start| {
        let grpc = grpc.to_string();
        let stream = stream.to_string();
        let payload = payload.clone();
        async move {
            let c = grpc_client(&grpc).await?;
            start.ready().await;
            let mut in_flight = futures::stream::FuturesUnordered::new();
            let mut acked = 0u64;
            for i in 0..per {
                if in_flight.len() >= window.max(1) {
                    unary_acked(in_flight.next().await)?;
                    acked += 1;
                }
                let mut c = c.clone();
                // A call without a deadline is not acknowledged (Liftbridge's rule).
                let mut r = tonic::Request::new(request(&stream, &payload, i.to_string(), policy));
                r.set_timeout(Duration::from_secs(30));
                in_flight.push(async move { c.publish(r).await });
            }
            while acked < per {
                unary_acked(in_flight.next().await)?;
                acked += 1;
            }
            anyhow::Ok(())
        }
    })
    .await
}

/// A benchmark publish of `value` to partition 0 of `stream`.
fn request(
    stream: &str,
    value: &Bytes,
    correlation_id: String,
    policy: proto::AckPolicy,
) -> proto::PublishRequest {
    proto::PublishRequest {
        value: value.clone(),
        stream: stream.to_string(),
        correlation_id,
        ack_policy: policy as i32,
        expected_offset: -1,
        ..Default::default()
    }
}

/// Checks that a unary `Publish` call was acknowledged.
fn unary_acked(
    r: Option<Result<tonic::Response<proto::PublishResponse>, tonic::Status>>,
) -> anyhow::Result<()> {
    let r = r.ok_or_else(|| anyhow!("no publish call in flight"))??;
    if r.into_inner().ack.is_none() {
        bail!("publish answered without an ack");
    }
    Ok(())
}

/// Builds a Liftbridge envelope (magic, version 0, header length 8, no CRC)
/// around a protobuf payload.
fn envelope(msg_type: u8, body: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(8 + body.len());
    b.put_slice(&[0xB9, 0x0E, 0x43, 0xB4, 0, 8, 0, msg_type]);
    b.put_slice(body);
    b.freeze()
}

pub(super) async fn lb_publish_envelope(
    nats: &str,
    stream: &str,
    policy: proto::AckPolicy,
    window: usize,
    pubs: usize,
    msgs: u64,
    payload: &Bytes,
) -> anyhow::Result<f64> {
    timed_publishers(pubs, msgs, |_, per, start| {
        let nats = nats.to_string();
        let subject = stream.to_string();
        let payload = payload.clone();
        async move {
            let client = async_nats::ConnectOptions::new()
                .subscription_capacity(1 << 16)
                .connect(&nats)
                .await?;
            let inbox = client.new_inbox();
            let mut acks = client.subscribe(inbox.clone()).await?;
            client.flush().await?;
            start.ready().await;
            // One task publishes and takes the acks, as the JetStream
            // publisher does.
            let window = window.max(1) as u64;
            let (mut sent, mut acked) = (0u64, 0u64);
            while acked < per {
                while sent < per && sent - acked < window {
                    let m = proto::Message {
                        offset: -1,
                        value: payload.clone(),
                        ack_inbox: inbox.clone(),
                        correlation_id: sent.to_string(),
                        ack_policy: policy as i32,
                        ..Default::default()
                    };
                    client
                        .publish(subject.clone(), envelope(0, &m.encode_to_vec()))
                        .await?;
                    sent += 1;
                }
                let m = tokio::time::timeout(Duration::from_secs(30), acks.next())
                    .await
                    .map_err(|_| anyhow!("no ack within 30 s after {acked} acks"))?
                    .ok_or_else(|| anyhow!("ack subscription closed"))?;
                if m.payload.len() < 8 || m.payload[..4] != [0xB9, 0x0E, 0x43, 0xB4] {
                    bail!("ack is not an envelope");
                }
                acked += 1;
            }
            anyhow::Ok(())
        }
    })
    .await
}

/// The partition's high watermark: the last offset a subscription with
/// STOP_LATEST delivers (the newest offset may be ahead of it until the
/// record is committed).
async fn high_watermark(
    c: &mut ApiClient<tonic::transport::Channel>,
    stream: &str,
) -> anyhow::Result<i64> {
    let md = c
        .fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
            stream: stream.to_string(),
            partition: 0,
        })
        .await?
        .into_inner();
    Ok(md.metadata.map_or(-1, |m| m.high_watermark))
}

async fn lb_record_plain(
    grpc: &str,
    nats: &str,
    stream: &str,
    msgs: u64,
    payload: &Bytes,
) -> anyhow::Result<f64> {
    let client = async_nats::connect(nats).await?;
    let mut c = grpc_client(grpc).await?;
    let start = Instant::now();
    for i in 0..msgs {
        client.publish(stream.to_string(), payload.clone()).await?;
        if i % 10_000 == 9_999 {
            client.flush().await?;
        }
    }
    client.flush().await?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while high_watermark(&mut c, stream).await? + 1 < msgs as i64 {
        if Instant::now() > deadline {
            bail!("not every plain publish was recorded within 300 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(msgs as f64 / start.elapsed().as_secs_f64())
}

async fn lb_replay(grpc: &str, stream: &str, msgs: u64) -> anyhow::Result<f64> {
    let mut c = grpc_client(grpc).await?.max_decoding_message_size(64 << 20);
    let start = Instant::now();
    let mut s = c
        .subscribe(proto::SubscribeRequest {
            stream: stream.to_string(),
            start_position: proto::StartPosition::Earliest as i32,
            stop_position: proto::StopPosition::StopLatest as i32,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut n = 0u64;
    let mut handshake = true;
    while let Some(m) = s.next().await {
        match m {
            Ok(_) if handshake => handshake = false,
            Ok(_) => n += 1,
            Err(st) if st.code() == tonic::Code::ResourceExhausted => break,
            Err(st) => return Err(st.into()),
        }
    }
    if n != msgs {
        bail!("replayed {n} messages, expected {msgs}");
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Creates a JetStream stream on the subject of the same name: file
/// storage, `replicas` replicas (one in the single-node comparison).
pub(super) async fn js_file_stream(
    js: &async_nats::jetstream::Context,
    name: &str,
    replicas: usize,
) -> anyhow::Result<async_nats::jetstream::stream::Stream> {
    Ok(js
        .create_stream(async_nats::jetstream::stream::Config {
            name: name.to_string(),
            subjects: vec![name.to_string()],
            storage: async_nats::jetstream::stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        })
        .await?)
}

/// Publishes `n` messages keeping at most `window` acks outstanding, and
/// waits for every ack.
async fn js_publish_window(
    js: &async_nats::jetstream::Context,
    subject: &str,
    n: u64,
    window: usize,
    payload: &Bytes,
) -> anyhow::Result<()> {
    let mut pending = std::collections::VecDeque::with_capacity(window);
    for _ in 0..n {
        if pending.len() == window {
            if let Some(f) = pending.pop_front() {
                let f: async_nats::jetstream::context::PublishAckFuture = f;
                f.await?;
            }
        }
        pending.push_back(js.publish(subject.to_string(), payload.clone()).await?);
    }
    for f in pending {
        f.await?;
    }
    Ok(())
}

/// One publish measurement on a fresh stream of the JetStream server at
/// `url`; the rate and the bytes `disk` saw written per message.
async fn js_publish(
    url: &str,
    disk: DiskMeter,
    window: usize,
    pubs: usize,
    msgs: u64,
    payload: &Bytes,
) -> anyhow::Result<(f64, Option<f64>)> {
    let js = async_nats::jetstream::new(async_nats::connect(url).await?);
    let name = format!("B{}", rand::random::<u32>());
    js_file_stream(&js, &name, 1).await?;
    let r = disk
        .per_msg(msgs, js_publish_to(url, &name, window, pubs, msgs, payload))
        .await?;
    js.delete_stream(&name).await?;
    Ok(r)
}

/// `pubs` JetStream publishers, each with its own connection to `url`,
/// send `msgs` messages in all to `subject` keeping `window` acks
/// outstanding each; returns messages per second.
pub(super) async fn js_publish_to(
    url: &str,
    subject: &str,
    window: usize,
    pubs: usize,
    msgs: u64,
    payload: &Bytes,
) -> anyhow::Result<f64> {
    timed_publishers(pubs, msgs, |_, per, start| {
        let url = url.to_string();
        let subject = subject.to_string();
        let payload = payload.clone();
        async move {
            let js = async_nats::jetstream::new(async_nats::connect(&url).await?);
            start.ready().await;
            js_publish_window(&js, &subject, per, window, &payload).await
        }
    })
    .await
}

async fn js_replay(url: &str, msgs: u64, payload: &Bytes) -> anyhow::Result<f64> {
    let js = async_nats::jetstream::new(async_nats::connect(url).await?);
    let name = format!("R{}", rand::random::<u32>());
    let stream = js_file_stream(&js, &name, 1).await?;
    js_publish_window(&js, &name, msgs, 512, payload).await?;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await?;
    let start = Instant::now();
    let mut messages = consumer.messages().await?;
    let mut n = 0u64;
    while n < msgs {
        match tokio::time::timeout(Duration::from_secs(30), messages.next()).await {
            Ok(Some(Ok(_))) => n += 1,
            Ok(Some(Err(e))) => bail!("ordered consumer failed: {e}"),
            Ok(None) => bail!("ordered consumer ended after {n} messages"),
            Err(_) => bail!("ordered consumer stalled after {n} messages"),
        }
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    js.delete_stream(&name).await?;
    Ok(rate)
}

pub(super) fn print_rows(rows: &[Row]) {
    let mut workloads: Vec<&str> = Vec::new();
    let mut targets: Vec<&str> = Vec::new();
    for r in rows {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
        if !targets.contains(&r.target.as_str()) {
            targets.push(&r.target);
        }
    }
    println!("| workload | target | msgs/s | MB/s (1 KiB) | written to storage per msg |");
    println!("|---|---|---:|---:|---:|");
    for w in &workloads {
        for r in rows.iter().filter(|r| r.workload == *w) {
            let disk = r
                .disk_bytes_per_msg
                .map_or_else(|| "–".to_string(), |b| format!("{b:.0} B"));
            println!(
                "| {} | {} | {:.0} | {:.1} | {disk} |",
                r.workload,
                r.target,
                r.msgs_per_sec,
                r.msgs_per_sec * 1024.0 / 1e6
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: LbBenchArgs,
    }

    fn args(line: &[&str]) -> LbBenchArgs {
        Cli::try_parse_from(std::iter::once("lb").chain(line.iter().copied()))
            .unwrap()
            .args
    }

    /// `--always-msgs` sets the window-256 cells under an fsync per ack
    /// only; without it they take `--msgs`, and window 1 always takes
    /// `--window1-msgs`.
    #[test]
    fn cells_under_fsync_per_ack_take_their_own_count() {
        let a = args(&[
            "--msgs",
            "1000000",
            "--always-msgs",
            "200000",
            "--window1-msgs",
            "8000",
        ]);
        assert_eq!(a.cell_msgs(256, false), 1_000_000);
        assert_eq!(a.cell_msgs(256, true), 200_000);
        assert_eq!(a.cell_msgs(1, true), 8_000);
        assert_eq!(a.cell_msgs(1, false), 8_000);
        let a = args(&["--msgs", "300000"]);
        assert_eq!(a.cell_msgs(256, true), 300_000);
        assert_eq!(a.cell_msgs(256, false), 300_000);
        assert!(Cli::try_parse_from(["lb", "--always-msgs", "many"]).is_err());
    }
}
