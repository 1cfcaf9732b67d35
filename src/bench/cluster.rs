//! `liftbridge bench cluster`: replicated acked publish and leader failover
//! on three nodes, side by side with JetStream R3 on three routed Go
//! nats-servers.
//!
//! Targets, each started fresh per `store.sync` policy on loopback with
//! free ports and its own temp dir:
//! - three processes of this binary meshed by NATS routes, one metadata
//!   group (`clustering.raft.bootstrap.peers`), `store.sync` as given, the
//!   replica timings of the flags (a fast-failover setting);
//! - three `nats-server` processes (2.15.1 from `.venv/bin/nats-server` by
//!   default) routed as one cluster with JetStream, once with its default
//!   sync (acks before any fsync) and once with `jetstream { sync_interval:
//!   always }`: the like-for-like counterparts of `store.sync: interval`
//!   and `always`.
//!
//! Throughput: a fresh stream per measurement, replication factor 3
//! (liftbridge: `minIsr` as given, AckPolicy ALL through gRPC
//! `PublishAsync` and through enveloped NATS publishes, as `bench lb`;
//! JetStream: R3 file storage, publish acks), 1 KiB values, windows of
//! outstanding acks per publisher and publisher counts as given. Publishers
//! connect to the node that leads the partition (liftbridge) or the stream
//! (JetStream), as clients that follow metadata do.
//!
//! Failover: one publisher sends with a window of 1 (a unique value per
//! attempt, every attempt with a short ack timeout) through a node that
//! does not lead; after it has been acked for a while the leader is killed
//! with SIGKILL. The time reported is from the kill to the first ack of a
//! publish sent after the killed process was reaped, i.e. one the new
//! leader committed. Whether the killed liftbridge node was also the
//! controller (metadata leader) is shown: then a metadata election comes
//! first. Before the next kill the killed node is restarted on
//! its data and all three replicas must be back in sync.
//!
//! The benchmark only reads metadata and measures; it does not check what
//! the logs contain (the fault-injection tests do).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use tokio::sync::mpsc;

use super::lb::{self, Row};
use super::{free_port, median};
use crate::api::proto;
use crate::api::proto::api_client::ApiClient;

/// Arguments of `liftbridge bench cluster`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterBenchArgs {
    /// The Go nats-server to run JetStream R3 on (default:
    /// `.venv/bin/nats-server` in the current directory).
    #[arg(long)]
    pub nats_server: Option<PathBuf>,
    /// Systems to measure: `liftbridge`, `jetstream`.
    #[arg(long, value_delimiter = ',', default_value = "liftbridge,jetstream")]
    pub targets: Vec<String>,
    /// Messages per publish workload with a window above 1.
    #[arg(long, default_value_t = 20_000)]
    pub msgs: u64,
    /// Messages per publish workload with a window of 1.
    #[arg(long, default_value_t = 1_000)]
    pub window1_msgs: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// `store.sync` policies, each run on a fresh cluster: `always` (against
    /// JetStream `sync_interval: always`), `interval` (against JetStream's
    /// default).
    #[arg(long, value_delimiter = ',', default_value = "always,interval")]
    pub sync: Vec<String>,
    /// Windows (acks outstanding per publisher).
    #[arg(long, value_delimiter = ',', default_value = "1,256")]
    pub windows: Vec<usize>,
    /// Publisher counts.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub publishers: Vec<usize>,
    /// Repetitions of every publish measurement (each on a fresh stream of
    /// the same cluster); the median is reported.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub rounds: u32,
    /// `minIsr` of the liftbridge streams.
    #[arg(long, default_value_t = 2)]
    pub min_isr: i32,
    /// Leader kills per cluster for the failover time (0: none).
    #[arg(long, default_value_t = 5)]
    pub kills: usize,
    /// Which liftbridge node each kill takes: `leader` (the partition
    /// leader, whether or not it also runs the metadata controller),
    /// `controller` (a partition leader that is also the controller) or
    /// `partition` (a partition leader that is not the controller). For the
    /// last two, streams are created before each kill until one is placed
    /// as wanted.
    #[arg(long, default_value = "leader", value_parser = ["leader", "controller", "partition"])]
    pub failover_kill: String,
    /// `clustering.replica.max.leader.timeout` of the liftbridge nodes.
    #[arg(long, default_value = "1s", value_parser = go_duration)]
    pub replica_max_leader_timeout: Duration,
    /// `clustering.replica.fetch.timeout` of the liftbridge nodes.
    #[arg(long, default_value = "500ms", value_parser = go_duration)]
    pub replica_fetch_timeout: Duration,
    /// `clustering.replica.max.idle.wait` of the liftbridge nodes.
    #[arg(long, default_value = "500ms", value_parser = go_duration)]
    pub replica_max_idle_wait: Duration,
    /// `clustering.replica.max.lag.time` of the liftbridge nodes.
    #[arg(long, default_value = "5s", value_parser = go_duration)]
    pub replica_max_lag_time: Duration,
    /// Ack timeout of each publish of the failover publisher (the
    /// resolution of the failover time).
    #[arg(long, default_value = "250ms", value_parser = go_duration)]
    pub failover_ack_timeout: Duration,
    /// How long after a kill to wait for an ack before the kill counts as
    /// not recovered.
    #[arg(long, default_value = "60s", value_parser = go_duration)]
    pub failover_limit: Duration,
    /// Tiny message counts, one kill with a limit of at most 20 s: checks
    /// that everything runs.
    #[arg(long)]
    pub quick: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

fn go_duration(s: &str) -> Result<Duration, String> {
    crate::config::liftbridge::parse_go_duration(s)
}

/// How long a cluster may take to form, elect, create a stream or bring a
/// restarted replica back in sync on a loaded 2-core machine.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);

/// Successful acks the failover publisher collects before the kill.
const WARM_ACKS: usize = 20;

/// Runs the benchmark and prints the tables.
pub fn run(args: ClusterBenchArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the benchmark runtime")?;
    rt.block_on(run_async(args))
}

/// Kill → first ack from the new leader, for one cluster.
#[derive(Debug, Clone, serde::Serialize)]
struct Failover {
    target: String,
    /// One entry per kill: milliseconds, or `None` when no publish was
    /// acked within the limit.
    kills_ms: Vec<Option<f64>>,
    /// Per kill (liftbridge only; empty for JetStream): whether the killed
    /// node was also the controller, so a metadata election came first.
    killed_controller: Vec<bool>,
}

impl Failover {
    fn summary(&self) -> (usize, Option<f64>, Option<f64>) {
        let mut ok: Vec<f64> = self.kills_ms.iter().flatten().copied().collect();
        ok.sort_by(f64::total_cmp);
        let median = (!ok.is_empty()).then(|| ok[ok.len() / 2]);
        (ok.len(), median, ok.last().copied())
    }
}

async fn run_async(mut args: ClusterBenchArgs) -> anyhow::Result<()> {
    if args.quick {
        args.msgs = args.msgs.min(400);
        args.window1_msgs = args.window1_msgs.min(40);
        args.kills = args.kills.min(1);
        args.failover_limit = args.failover_limit.min(Duration::from_secs(20));
    }
    for t in &args.targets {
        if t != "liftbridge" && t != "jetstream" {
            bail!("unknown target {t:?} (expected liftbridge, jetstream)");
        }
    }
    for s in &args.sync {
        if s != "always" && s != "interval" {
            bail!("unknown store.sync {s:?} (expected always, interval)");
        }
    }
    if args.windows.contains(&0) || args.publishers.contains(&0) {
        bail!("windows and publisher counts must be at least 1");
    }
    let wants = |t: &str| args.targets.iter().any(|x| x == t);
    let nats_server = if wants("jetstream") {
        let p = args
            .nats_server
            .clone()
            .unwrap_or_else(|| PathBuf::from(".venv/bin/nats-server"));
        if !p.is_file() {
            bail!(
                "{} not found: pass --nats-server PATH (a nats-server with JetStream clustering)",
                p.display()
            );
        }
        Some(p)
    } else {
        None
    };

    let settings = settings_line(&args);
    println!("{settings}\n");
    let payload = Bytes::from(vec![b'v'; args.size]);
    let mut rows = Vec::new();
    let mut failovers = Vec::new();
    // The smallest ISR a new liftbridge stream had.
    let mut lb_isr = 3;

    if wants("liftbridge") {
        let exe = std::env::current_exe().context("locating this binary")?;
        for sync in &args.sync {
            let label = format!(
                "liftbridge 3 nodes RF 3 minIsr {} (sync={sync})",
                args.min_isr
            );
            println!("{label}: starting");
            let mut cluster = LbCluster::start(&exe, sync, &args).await?;
            for &window in &args.windows {
                for &pubs in &args.publishers {
                    for via in ["PublishAsync", "NATS envelope"] {
                        let what = format!("window {window}, {pubs} publisher(s), {via}");
                        let mut rates = Vec::new();
                        for _ in 0..args.rounds {
                            // A fresh stream per measurement.
                            let stream = format!("b{}", rand::random::<u32>());
                            let (leader, isr) =
                                cluster.create_stream(&stream, args.min_isr).await?;
                            lb_isr = lb_isr.min(isr);
                            let (msgs, all) = (count(&args, window), proto::AckPolicy::All);
                            let r = if via == "PublishAsync" {
                                let url = cluster.nodes[leader].grpc_url();
                                within_limit(lb::lb_publish_async(
                                    &url, &stream, all, window, pubs, msgs, &payload,
                                ))
                                .await
                            } else {
                                let url = format!("nats://127.0.0.1:{}", cluster.ports[leader][1]);
                                within_limit(lb::lb_publish_envelope(
                                    &url, &stream, all, window, pubs, msgs, &payload,
                                ))
                                .await
                            };
                            let r = r.with_context(|| format!("{label}, {what}"))?;
                            // As JetStream's streams are: the next round
                            // starts without this one's data in the page
                            // cache.
                            lb::delete_stream(&cluster.nodes[leader].grpc_url(), &stream).await?;
                            println!("  {what}: {r:.0} msgs/s");
                            rates.push(r);
                        }
                        rows.push(Row::new(
                            workload(window, pubs),
                            format!("{label} {via}"),
                            median(rates),
                        ));
                    }
                }
            }
            if args.kills > 0 {
                let f = cluster.failover(&label, &args).await?;
                failovers.push(f);
            }
        }
    }

    if let Some(exe) = &nats_server {
        for sync in &args.sync {
            let always = sync == "always";
            let mut cluster = JsCluster::start(exe, always).await?;
            let label = format!(
                "nats-server {} JetStream R3 (sync={})",
                cluster.version,
                if always { "always" } else { "default" }
            );
            println!("{label}: started");
            for &window in &args.windows {
                for &pubs in &args.publishers {
                    let mut rates = Vec::new();
                    for _ in 0..args.rounds {
                        let name = format!("B{}", rand::random::<u32>());
                        let leader = cluster.create_stream(&name).await?;
                        let url = cluster.nodes[leader].nats_url();
                        let msgs = count(&args, window);
                        let r = within_limit(lb::js_publish_to(
                            &url, &name, window, pubs, msgs, &payload,
                        ))
                        .await
                        .with_context(|| {
                            format!("{label}, window {window}, {pubs} publisher(s)")
                        })?;
                        cluster.delete_stream(&name).await?;
                        println!("  window {window}, {pubs} publisher(s): {r:.0} msgs/s");
                        rates.push(r);
                    }
                    rows.push(Row::new(
                        workload(window, pubs),
                        label.clone(),
                        median(rates),
                    ));
                }
            }
            if args.kills > 0 {
                let f = cluster.failover(&label, &args).await?;
                failovers.push(f);
            }
        }
    }

    // The disk's own limit, where the nodes keep their data.
    let probes = if args.quick { 50 } else { 2000 };
    let (fsync_rate, fsync_us) = lb::disk_fsync_rate(&std::env::temp_dir(), probes)?;
    rows.push(Row::new(
        "disk: 4 KiB append + fdatasync".into(),
        format!("disk ({})", std::env::temp_dir().display()),
        fsync_rate,
    ));

    println!();
    println!("{settings}");
    println!(
        "disk: {probes} x (4 KiB append + fdatasync) in {}: {fsync_rate:.0} fsyncs/s ({fsync_us:.0} us each)\n",
        std::env::temp_dir().display()
    );
    lb::print_rows(&rows);
    lb::print_ratios(&rows);
    print_failovers(&failovers);
    let isr_note = (wants("liftbridge") && lb_isr < 3).then(|| {
        format!(
            "note: a new liftbridge stream had only {lb_isr} of its 3 replicas in sync: \
             this build does not replicate, so its figures are not RF 3 figures"
        )
    });
    if let Some(n) = &isr_note {
        println!("\n{n}");
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "settings": settings,
            "throughput": rows,
            "failover": failovers,
            "note": isr_note,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn count(args: &ClusterBenchArgs, window: usize) -> u64 {
    if window == 1 {
        args.window1_msgs
    } else {
        args.msgs
    }
}

/// The workload label both systems share, so the ratio table pairs them.
fn workload(window: usize, pubs: usize) -> String {
    format!("RF 3, acked publish ALL, window {window}, {pubs} publisher(s)")
}

/// A measurement that does not finish in 10 minutes is an error rather
/// than a hung benchmark.
async fn within_limit<F: Future<Output = anyhow::Result<f64>>>(f: F) -> anyhow::Result<f64> {
    tokio::time::timeout(Duration::from_secs(600), f)
        .await
        .map_err(|_| anyhow!("did not finish within 600 s"))?
}

fn settings_line(args: &ClusterBenchArgs) -> String {
    format!(
        "liftbridge replica timings: clustering.replica.max.leader.timeout {}ms, \
         replica.fetch.timeout {}ms, replica.max.idle.wait {}ms, replica.max.lag.time {}ms \
         (raft heartbeat 150ms, election timeout 1s: defaults); minIsr {}; \
         JetStream: nats-server defaults; {} B values; failover publisher: window 1, \
         ack timeout {}ms, {} kill(s) per cluster{}{}",
        args.replica_max_leader_timeout.as_millis(),
        args.replica_fetch_timeout.as_millis(),
        args.replica_max_idle_wait.as_millis(),
        args.replica_max_lag_time.as_millis(),
        args.min_isr,
        args.size,
        args.failover_ack_timeout.as_millis(),
        args.kills,
        match args.failover_kill.as_str() {
            "controller" => {
                " (liftbridge: each kill takes a partition leader that is also the controller)"
            }
            "partition" =>
                " (liftbridge: each kill takes a partition leader that is not the controller)",
            _ => "",
        },
        if args.rounds > 1 {
            format!("; medians of {} rounds per cell", args.rounds)
        } else {
            String::new()
        },
    )
}

fn print_failovers(failovers: &[Failover]) {
    if failovers.is_empty() {
        return;
    }
    println!();
    println!("| failover (kill -9 of the leader → first ack from the new leader) | kills | recovered | median ms | max ms | each ms |");
    println!("|---|---:|---:|---:|---:|---|");
    for f in failovers {
        let (ok, median, max) = f.summary();
        let ms = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.0}"));
        let each: Vec<String> = f
            .kills_ms
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let t = k.map_or("none".to_string(), |v| format!("{v:.0}"));
                match f.killed_controller.get(i) {
                    Some(true) => format!("{t} (controller)"),
                    _ => t,
                }
            })
            .collect();
        println!(
            "| {} | {} | {ok} | {} | {} | {} |",
            f.target,
            f.kills_ms.len(),
            ms(median),
            ms(max),
            each.join(", ")
        );
    }
}

/// One server process that can be killed (SIGKILL) and started again with
/// the same arguments, ports and data. Killed on drop.
struct Node {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    /// Ports it listens on once started (waited for).
    ports: Vec<u16>,
    /// Ports clients use: gRPC (liftbridge) or NATS (JetStream) first.
    client_port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL, and wait until the process is gone.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let end = Instant::now() + CLUSTER_TIMEOUT;
        for &port in &self.ports {
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                if let Some(c) = self.child.as_mut() {
                    if let Some(st) = c.try_wait()? {
                        bail!(
                            "{} exited at start-up ({st}); log {}:\n{}",
                            self.name,
                            self.log.display(),
                            log_tail(&self.log)
                        );
                    }
                }
                if Instant::now() > end {
                    bail!("{} did not listen on port {port} in time", self.name);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn nats_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Ports of the three nodes of a cluster: (client, route) each, plus the
/// liftbridge nodes' gRPC and HTTP ports.
fn ports3(n: usize) -> anyhow::Result<Vec<Vec<u16>>> {
    (0..3)
        .map(|_| (0..n).map(|_| free_port()).collect())
        .collect()
}

/// One publish attempt of the failover publisher.
struct Attempt {
    sent: Instant,
    done: Instant,
    acked: bool,
}

/// Publishes one message at a time until the returned flag is set,
/// reporting every attempt. `publish_once(i)` sends attempt `i` (a unique
/// value) and tells whether it was acked. After a failed attempt it pauses
/// 5 ms, so an error answered at once does not spin.
fn spawn_publisher<F, Fut>(mut publish_once: F) -> (mpsc::Receiver<Attempt>, Arc<AtomicBool>)
where
    F: FnMut(u64) -> Fut + Send + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    // Bounded: the publisher waits when the measuring side lags (at most
    // one attempt is in flight anyway).
    let (tx, rx) = mpsc::channel(1024);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        let mut i = 0u64;
        while !flag.load(Ordering::Relaxed) {
            let sent = Instant::now();
            let acked = publish_once(i).await;
            let a = Attempt {
                sent,
                done: Instant::now(),
                acked,
            };
            if tx.send(a).await.is_err() {
                break;
            }
            if !acked {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            i += 1;
        }
    });
    (rx, stop)
}

/// A failover value: `tag`-`i` padded to `size` bytes.
fn unique_value(tag: &str, i: u64, size: usize) -> Vec<u8> {
    let mut v = format!("{tag}-{i}-").into_bytes();
    v.resize(size.max(v.len()), b'.');
    v
}

/// Waits for [`WARM_ACKS`] acks, kills with `kill`, and returns the time
/// from the kill to the ack of the first publish sent after `kill`
/// returned (`None` if none within `limit`).
async fn time_one_kill(
    attempts: &mut mpsc::Receiver<Attempt>,
    kill: impl FnOnce(),
    limit: Duration,
) -> anyhow::Result<Option<Duration>> {
    let mut warm = 0;
    let end = Instant::now() + CLUSTER_TIMEOUT;
    while warm < WARM_ACKS {
        let a = tokio::time::timeout_at(end.into(), attempts.recv())
            .await
            .map_err(|_| anyhow!("the failover publisher got {warm} acks before the kill"))?
            .ok_or_else(|| anyhow!("the failover publisher stopped"))?;
        if a.acked {
            warm += 1;
        }
    }
    let killed_at = Instant::now();
    kill();
    let dead_at = Instant::now();
    let end = killed_at + limit;
    loop {
        match tokio::time::timeout_at(end.into(), attempts.recv()).await {
            Err(_) => return Ok(None),
            Ok(None) => bail!("the failover publisher stopped"),
            Ok(Some(a)) if a.acked && a.sent >= dead_at => {
                return Ok(Some(a.done - killed_at));
            }
            Ok(Some(_)) => {}
        }
    }
}

/// One kill of `node` (see [`time_one_kill`]): stops the publisher,
/// prints the time and, unless it is the `last`, starts the node again on
/// its data. Returns the time in milliseconds.
async fn one_kill(
    node: &mut Node,
    mut attempts: mpsc::Receiver<Attempt>,
    stop: Arc<AtomicBool>,
    limit: Duration,
    what: &str,
    last: bool,
) -> anyhow::Result<Option<f64>> {
    let t = time_one_kill(&mut attempts, || node.kill9(), limit).await;
    stop.store(true, Ordering::Relaxed);
    drop(attempts);
    let t = t.with_context(|| what.to_string())?;
    let shown = t.map_or("no ack".to_string(), |d| format!("{} ms", d.as_millis()));
    println!("  {what} ({}): {shown}", node.name);
    if !last {
        node.spawn()?;
        node.wait_ready().await?;
    }
    Ok(t.map(|d| d.as_secs_f64() * 1e3))
}

/// Polls `check` every 100 ms until it gives a value or `CLUSTER_TIMEOUT`
/// passes.
async fn poll_for<T, F, Fut>(mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + CLUSTER_TIMEOUT;
    while Instant::now() < end {
        if let Some(v) = check().await {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Three liftbridge nodes.
struct LbCluster {
    nodes: Vec<Node>,
    /// Server ids, by node index.
    ids: Vec<String>,
    /// gRPC, NATS, route and HTTP port, by node index.
    ports: Vec<Vec<u16>>,
    _dir: tempfile::TempDir,
}

impl LbCluster {
    async fn start(exe: &Path, sync: &str, args: &ClusterBenchArgs) -> anyhow::Result<LbCluster> {
        let dir = tempfile::tempdir()?;
        // grpc, client, cluster, http
        let ports = ports3(4)?;
        let ids: Vec<String> = (1..=3).map(|i| format!("n{i}")).collect();
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let mut nodes = Vec::new();
        for i in 0..3 {
            let p = &ports[i];
            let routes: String = (0..3)
                .filter(|&j| j != i)
                .map(|j| format!("      - nats-route://127.0.0.1:{}\n", ports[j][2]))
                .collect();
            let home = dir.path().join(&ids[i]);
            std::fs::create_dir_all(&home)?;
            let yaml = format!(
                "listen: 127.0.0.1:{grpc}\n\
                 data.dir: {data}\n\
                 http.listen: 127.0.0.1:{http}\n\
                 store.sync: {sync}\n\
                 clustering:\n  server.id: {id}\n  raft.bootstrap.peers: [n1, n2, n3]\n  \
                 replica.max.leader.timeout: {leader}\n  replica.fetch.timeout: {fetch}\n  \
                 replica.max.idle.wait: {idle}\n  replica.max.lag.time: {lag}\n\
                 nats:\n  listen: 127.0.0.1:{client}\n  cluster:\n    name: lbbench\n    \
                 listen: 127.0.0.1:{cluster}\n    routes:\n{routes}",
                grpc = p[0],
                client = p[1],
                cluster = p[2],
                http = p[3],
                data = home.join("data").display(),
                id = ids[i],
                leader = ms(args.replica_max_leader_timeout),
                fetch = ms(args.replica_fetch_timeout),
                idle = ms(args.replica_max_idle_wait),
                lag = ms(args.replica_max_lag_time),
            );
            let cfg = home.join("liftbridge.yaml");
            std::fs::write(&cfg, yaml)?;
            let mut node = Node {
                name: format!("liftbridge {}", ids[i]),
                program: exe.to_path_buf(),
                args: vec!["-c".into(), cfg.display().to_string()],
                ports: p.clone(),
                client_port: p[0],
                log: home.join("out.log"),
                child: None,
            };
            node.spawn()?;
            nodes.push(node);
        }
        for n in &mut nodes {
            n.wait_ready().await?;
        }
        let cluster = LbCluster {
            nodes,
            ids,
            ports,
            _dir: dir,
        };
        let url = &cluster.nodes[0].grpc_url();
        let formed = poll_for(move || async move {
            let mut c = lb::grpc_client(url).await.ok()?;
            let md = c
                .fetch_metadata(proto::FetchMetadataRequest::default())
                .await
                .ok()?;
            (md.into_inner().brokers.len() == 3).then_some(())
        })
        .await;
        if formed.is_none() {
            bail!("the three liftbridge nodes did not list each other as brokers in time");
        }
        Ok(cluster)
    }

    /// The leader and ISR size of partition 0 of `stream`, as node `via`
    /// sees them.
    async fn partition_state(&self, via: usize, stream: &str) -> Option<(usize, usize)> {
        let mut c = lb::grpc_client(&self.nodes[via].grpc_url()).await.ok()?;
        let md = c
            .fetch_metadata(proto::FetchMetadataRequest {
                streams: vec![stream.to_string()],
                ..Default::default()
            })
            .await
            .ok()?
            .into_inner();
        let p = md
            .stream_metadata
            .iter()
            .find(|s| s.name == stream)?
            .partitions
            .get(&0)?;
        let leader = self.ids.iter().position(|id| *id == p.leader)?;
        Some((leader, p.isr.len()))
    }

    /// Creates `stream` (RF 3) and waits until its partition has a leader
    /// that serves it; returns the leader's index and the ISR size then (3
    /// where replicas are in sync from the start, as the replication
    /// contract says; 1 in a build that does not replicate).
    async fn create_stream(&self, stream: &str, min_isr: i32) -> anyhow::Result<(usize, usize)> {
        let url = &self.nodes[0].grpc_url();
        let created = poll_for(move || async move {
            let mut c = lb::grpc_client(url).await.ok()?;
            let r = c
                .create_stream(proto::CreateStreamRequest {
                    subject: stream.to_string(),
                    name: stream.to_string(),
                    replication_factor: 3,
                    min_isr: Some(proto::NullableInt32 { value: min_isr }),
                    ..Default::default()
                })
                .await;
            // A retry after an answer that was lost finds it created.
            let done = match &r {
                Ok(_) => true,
                Err(s) => s.code() == tonic::Code::AlreadyExists,
            };
            done.then_some(())
        })
        .await;
        if created.is_none() {
            bail!("could not create stream {stream} in time");
        }
        self.wait_led(0, stream, 1)
            .await
            .ok_or_else(|| anyhow!("stream {stream}: no serving leader in time"))
    }

    /// Waits until the partition has a leader serving it and an ISR of at
    /// least `isr` (as node `via` sees it); returns the leader's index and
    /// the ISR size.
    async fn wait_led(&self, via: usize, stream: &str, isr: usize) -> Option<(usize, usize)> {
        let (this, need) = (self, isr);
        poll_for(move || async move {
            let (l, isr) = this.partition_state(via, stream).await?;
            if isr < need {
                return None;
            }
            let mut c = lb::grpc_client(&this.nodes[l].grpc_url()).await.ok()?;
            c.fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
                stream: stream.to_string(),
                partition: 0,
            })
            .await
            .ok()?;
            Some((l, isr))
        })
        .await
    }

    /// The metadata controller's node index, as node `via` reports it.
    async fn controller(&self, via: usize) -> Option<usize> {
        let info = super::routes::http_json(self.ports[via][3], "/api/v1/info").await?;
        let id = info["metadata_leader"].as_str()?;
        self.ids.iter().position(|i| i == id)
    }

    /// `stream` (led by `leader`) if its leader is (`on_controller`) or is
    /// not the controller, else a new stream placed that way (created until
    /// one lands there).
    async fn stream_placed(
        &self,
        stream: String,
        leader: usize,
        on_controller: bool,
        args: &ClusterBenchArgs,
    ) -> anyhow::Result<(String, usize)> {
        let via = (leader + 1) % 3;
        let Some(controller) = poll_for(|| self.controller(via)).await else {
            bail!("no metadata controller known");
        };
        if (controller == leader) == on_controller {
            return Ok((stream, leader));
        }
        for _ in 0..12 {
            let name = format!("f{}", rand::random::<u32>());
            let (l, _) = self.create_stream(&name, args.min_isr).await?;
            if (l == controller) == on_controller {
                // Replicas in sync before the kill, as for every kill.
                let (l, _) = self
                    .wait_led(via, &name, 3)
                    .await
                    .ok_or_else(|| anyhow!("stream {name}: ISR not full in time"))?;
                return Ok((name, l));
            }
        }
        bail!(
            "no new stream was placed {} the controller (n{})",
            if on_controller { "on" } else { "off" },
            controller + 1
        )
    }

    async fn failover(&mut self, label: &str, args: &ClusterBenchArgs) -> anyhow::Result<Failover> {
        let mut stream = format!("f{}", rand::random::<u32>());
        let (mut leader, _) = self.create_stream(&stream, args.min_isr).await?;
        let (mut kills_ms, mut killed_controller) = (Vec::new(), Vec::new());
        for k in 0..args.kills {
            if args.failover_kill != "leader" {
                let on_controller = args.failover_kill == "controller";
                (stream, leader) = self
                    .stream_placed(stream, leader, on_controller, args)
                    .await?;
            }
            let via = (leader + 1) % 3;
            let controller = super::routes::http_json(self.ports[via][3], "/api/v1/info")
                .await
                .and_then(|v| v["metadata_leader"].as_str().map(str::to_string));
            let also_controller = controller.as_deref() == Some(self.ids[leader].as_str());
            let client = lb::grpc_client(&self.nodes[via].grpc_url()).await?;
            let (stream_, size, timeout) = (stream.clone(), args.size, args.failover_ack_timeout);
            let tag = format!("kill{k}");
            let (attempts, stop) = spawn_publisher(move |i| {
                let mut c: ApiClient<_> = client.clone();
                let mut req = tonic::Request::new(proto::PublishRequest {
                    value: unique_value(&tag, i, size).into(),
                    stream: stream_.clone(),
                    ack_policy: proto::AckPolicy::All as i32,
                    expected_offset: -1,
                    ..Default::default()
                });
                req.set_timeout(timeout);
                async move {
                    // The server answers DEADLINE_EXCEEDED a little before
                    // the deadline; the client-side limit only guards
                    // against a node that does not answer at all.
                    let r = tokio::time::timeout(timeout * 2, c.publish(req)).await;
                    matches!(r, Ok(Ok(resp)) if resp.get_ref().ack.is_some())
                }
            });
            let last = k + 1 == args.kills;
            let note = if also_controller {
                ", also the controller"
            } else {
                ""
            };
            let what = format!("{label}: kill {}{note}", k + 1);
            let node = &mut self.nodes[leader];
            kills_ms.push(one_kill(node, attempts, stop, args.failover_limit, &what, last).await?);
            killed_controller.push(also_controller);
            if last {
                break;
            }
            match self.wait_led(via, &stream, 3).await {
                Some((l, _)) => leader = l,
                None => {
                    println!("  the restarted node did not rejoin the ISR in time; stopping kills");
                    break;
                }
            }
        }
        Ok(Failover {
            target: label.to_string(),
            kills_ms,
            killed_controller,
        })
    }
}

/// Three routed nats-servers with JetStream.
struct JsCluster {
    nodes: Vec<Node>,
    /// `server_name`s, by node index.
    names: Vec<String>,
    version: String,
    _dir: tempfile::TempDir,
}

impl JsCluster {
    async fn start(exe: &Path, sync_always: bool) -> anyhow::Result<JsCluster> {
        let dir = tempfile::tempdir()?;
        // client, cluster
        let ports = ports3(2)?;
        let names: Vec<String> = (1..=3).map(|i| format!("js{i}")).collect();
        let mut nodes = Vec::new();
        for i in 0..3 {
            let p = &ports[i];
            let routes: Vec<String> = (0..3)
                .filter(|&j| j != i)
                .map(|j| format!("nats-route://127.0.0.1:{}", ports[j][1]))
                .collect();
            let home = dir.path().join(&names[i]);
            std::fs::create_dir_all(&home)?;
            let conf = format!(
                "server_name: {name}\nlisten: 127.0.0.1:{client}\n\
                 jetstream {{\n  store_dir: {store:?}\n{sync}}}\n\
                 cluster {{\n  name: jsbench\n  listen: 127.0.0.1:{cluster}\n  routes: [{routes}]\n}}\n",
                name = names[i],
                client = p[0],
                cluster = p[1],
                store = home.join("js").display().to_string(),
                sync = if sync_always {
                    "  sync_interval: always\n"
                } else {
                    ""
                },
                routes = routes.join(", "),
            );
            let cfg = home.join("js.conf");
            std::fs::write(&cfg, conf)?;
            let mut node = Node {
                name: format!("nats-server {}", names[i]),
                program: exe.to_path_buf(),
                args: vec!["-c".into(), cfg.display().to_string()],
                ports: p.clone(),
                client_port: p[0],
                log: home.join("out.log"),
                child: None,
            };
            node.spawn()?;
            nodes.push(node);
        }
        for n in &mut nodes {
            n.wait_ready().await?;
        }
        let client = async_nats::connect(nodes[0].nats_url()).await?;
        let version = client.server_info().version;
        Ok(JsCluster {
            nodes,
            names,
            version,
            _dir: dir,
        })
    }

    async fn context(&self, node: usize) -> anyhow::Result<async_nats::jetstream::Context> {
        let url = self.nodes[node].nats_url();
        let client = async_nats::connect(&url)
            .await
            .with_context(|| format!("connecting to {url}"))?;
        Ok(async_nats::jetstream::new(client))
    }

    /// The stream leader's index when it has a leader and both followers
    /// are current, as node `via` sees it.
    async fn in_sync_leader(
        &self,
        js: &async_nats::jetstream::Context,
        name: &str,
    ) -> Option<usize> {
        let mut s = js.get_stream(name).await.ok()?;
        let info = s.info().await.ok()?;
        let c = info.cluster.as_ref()?;
        let leader = self
            .names
            .iter()
            .position(|n| Some(n) == c.leader.as_ref())?;
        let current = c.replicas.len() == 2 && c.replicas.iter().all(|r| r.current && !r.offline);
        current.then_some(leader)
    }

    /// Creates an R3 file stream (retrying while the meta group forms) and
    /// waits until it has a leader and both followers are current; returns
    /// the leader's index.
    async fn create_stream(&self, name: &str) -> anyhow::Result<usize> {
        let js = &self.context(0).await?;
        let created = poll_for(move || async move {
            let r = lb::js_file_stream(js, name, 3).await;
            (r.is_ok() || js.get_stream(name).await.is_ok()).then_some(())
        })
        .await;
        if created.is_none() {
            bail!("could not create JetStream stream {name} in time");
        }
        let this = self;
        poll_for(move || this.in_sync_leader(js, name))
            .await
            .ok_or_else(|| anyhow!("stream {name}: no leader with current replicas in time"))
    }

    async fn delete_stream(&self, name: &str) -> anyhow::Result<()> {
        self.context(0).await?.delete_stream(name).await?;
        Ok(())
    }

    async fn failover(&mut self, label: &str, args: &ClusterBenchArgs) -> anyhow::Result<Failover> {
        let name = format!("F{}", rand::random::<u32>());
        let mut leader = self.create_stream(&name).await?;
        let mut kills_ms = Vec::new();
        for k in 0..args.kills {
            let via = (leader + 1) % 3;
            let mut js = self.context(via).await?;
            js.set_timeout(args.failover_ack_timeout);
            let (subject, size) = (name.clone(), args.size);
            let tag = format!("kill{k}");
            let (attempts, stop) = spawn_publisher(move |i| {
                let js = js.clone();
                let subject = subject.clone();
                let value = Bytes::from(unique_value(&tag, i, size));
                async move {
                    match js.publish(subject, value).await {
                        Ok(ack) => ack.await.is_ok(),
                        Err(_) => false,
                    }
                }
            });
            let last = k + 1 == args.kills;
            let (node, what) = (&mut self.nodes[leader], format!("{label}: kill {}", k + 1));
            kills_ms.push(one_kill(node, attempts, stop, args.failover_limit, &what, last).await?);
            if last {
                break;
            }
            let js = &self.context(via).await?;
            let (this, name) = (&*self, name.as_str());
            match poll_for(move || this.in_sync_leader(js, name)).await {
                Some(l) => leader = l,
                None => {
                    println!("  the restarted server did not catch up in time; stopping kills");
                    break;
                }
            }
        }
        Ok(Failover {
            target: label.to_string(),
            kills_ms,
            killed_controller: Vec::new(),
        })
    }
}
