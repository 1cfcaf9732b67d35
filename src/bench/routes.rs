//! `liftbridge bench routes`: routed core NATS throughput, three of our
//! servers against three nats-servers meshed the same way.
//!
//! For every target (this binary as `liftbridge nats-server`, every
//! `--peer LABEL=PATH`, and `nats-server` from PATH) three servers are
//! started on loopback: A, and B and C with A as their only seed route, so
//! B↔C comes from gossip. One publisher on A sends to one subscriber on B
//! (every message crosses the A→B route once), 128 B and 1 KiB. Each
//! workload runs `--rounds` times per target, interleaved, and the median
//! is printed as a ratio table. All clients are async-nats in this process,
//! so only the servers differ between columns.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use futures::StreamExt;

use super::{find_on_path, free_port};

/// Arguments of `liftbridge bench routes`.
#[derive(Debug, Clone, clap::Args)]
pub struct RoutesBenchArgs {
    /// A nats-server binary to mesh and measure, as LABEL=PATH. Repeatable.
    #[arg(long = "peer")]
    pub peers: Vec<String>,
    /// Do not add `nats-server` found on PATH as a peer.
    #[arg(long)]
    pub no_path_peer: bool,
    /// Messages per run.
    #[arg(long, default_value_t = 200_000)]
    pub msgs: u64,
    /// Repetitions of every workload per target (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Route connections per pair of servers, for every mesh
    /// (`cluster { pool_size }`; -1 = one unpooled connection). Without
    /// it each server runs its own default: ours one connection,
    /// nats-server 2.10+ a pool of three.
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(i64).range(-1..=32))]
    pub pool_size: Option<i64>,
    /// `cluster { compression }` of every server of every mesh (e.g.
    /// `s2_fast`). Without it each server runs its own default: ours
    /// `off`, nats-server 2.10+ `accept`.
    #[arg(long)]
    pub compression: Option<String>,
}

/// One server process (killed on drop).
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) client_port: u16,
    pub(crate) http_port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three meshed servers of one implementation.
struct Mesh {
    label: String,
    servers: Vec<Server>,
}

fn spawn(exe: &PathBuf, pre: &[&str], seed: Option<u16>) -> anyhow::Result<(Server, u16)> {
    let (client, cluster, http) = (free_port()?, free_port()?, free_port()?);
    let mut cmd = Command::new(exe);
    cmd.args(pre).args([
        "-a",
        "127.0.0.1",
        "-p",
        &client.to_string(),
        "-m",
        &http.to_string(),
        "--cluster",
        &format!("nats://127.0.0.1:{cluster}"),
        "--cluster_name",
        "bench",
    ]);
    if let Some(s) = seed {
        cmd.args(["--routes", &format!("nats://127.0.0.1:{s}")]);
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let server = Server {
        child,
        client_port: client,
        http_port: http,
    };
    wait_listening(exe, &[client, cluster, http])?;
    Ok((server, cluster))
}

/// Waits (up to 10 s) until every port of `ports` accepts connections.
pub(crate) fn wait_listening(exe: &std::path::Path, ports: &[u16]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    for &p in ports {
        while std::net::TcpStream::connect(("127.0.0.1", p)).is_err() {
            if Instant::now() > deadline {
                bail!("{} did not listen on port {p} within 10 s", exe.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}

/// GET `path` (HTTP/1.0) from a loopback port and parse the JSON body.
pub(crate) async fn http_json(port: u16, path: &str) -> Option<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    serde_json::from_str(text.split_once("\r\n\r\n")?.1).ok()
}

/// Waits (up to `within`) until `check` holds on the `/routez` of `port`.
async fn wait_routez(
    port: u16,
    within: Duration,
    what: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> anyhow::Result<()> {
    let end = Instant::now() + within;
    loop {
        if let Some(v) = http_json(port, "/routez?subs=1").await {
            if check(&v) {
                return Ok(());
            }
        }
        if Instant::now() > end {
            bail!("timed out waiting for {what} on :{port}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn remote_ids(v: &serde_json::Value) -> std::collections::HashSet<String> {
    v["routes"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|r| r["remote_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

async fn start_mesh(label: &str, exe: &PathBuf, pre: &[&str]) -> anyhow::Result<Mesh> {
    let (a, seed) = spawn(exe, pre, None)?;
    let (b, _) = spawn(exe, pre, Some(seed))?;
    let (c, _) = spawn(exe, pre, Some(seed))?;
    let servers = vec![a, b, c];
    for s in &servers {
        wait_routez(s.http_port, Duration::from_secs(20), "a full mesh", |v| {
            remote_ids(v).len() == 2
        })
        .await?;
    }
    Ok(Mesh {
        label: label.to_string(),
        servers,
    })
}

pub(crate) async fn connect(port: u16) -> anyhow::Result<async_nats::Client> {
    let url = format!("nats://127.0.0.1:{port}");
    async_nats::ConnectOptions::new()
        .subscription_capacity(1 << 20)
        .client_capacity(1 << 16)
        .connect(&url)
        .await
        .with_context(|| format!("connecting to {url}"))
}

/// One publisher on A, one subscriber on B: delivered messages per second.
async fn routed_run(mesh: &Mesh, size: usize, msgs: u64) -> anyhow::Result<f64> {
    let (a, b) = (&mesh.servers[0], &mesh.servers[1]);
    let subject = format!("bench.routes.{}", rand::random::<u32>());
    let sub_client = connect(b.client_port).await?;
    let sub = sub_client.subscribe(subject.clone()).await?;
    sub_client.flush().await?;
    // The publisher's server must know B's interest before the clock runs.
    let s = subject.clone();
    wait_routez(
        a.http_port,
        Duration::from_secs(10),
        "B's interest",
        move |v| {
            v["routes"].as_array().is_some_and(|l| {
                l.iter().any(|r| {
                    r["subscriptions_list"]
                        .as_array()
                        .is_some_and(|subs| subs.iter().any(|x| x.as_str() == Some(s.as_str())))
                })
            })
        },
    )
    .await?;
    timed_flow(sub, a.client_port, &subject, size, msgs, "the route").await
}

/// Publishes `msgs` messages of `size` bytes on `subject` from a client of
/// `pub_port` and waits until `sub` has them all: delivered messages per
/// second. `path` names what they cross, for the error.
pub(crate) async fn timed_flow(
    mut sub: async_nats::Subscriber,
    pub_port: u16,
    subject: &str,
    size: usize,
    msgs: u64,
    path: &str,
) -> anyhow::Result<f64> {
    let received = Arc::new(AtomicU64::new(0));
    let counter = received.clone();
    let reader = tokio::spawn(async move {
        while sub.next().await.is_some() {
            if counter.fetch_add(1, Ordering::Relaxed) + 1 == msgs {
                break;
            }
        }
    });
    let publisher = connect(pub_port).await?;
    let payload = Bytes::from(vec![b'x'; size]);
    let subject = subject.to_string();
    let start = Instant::now();
    for i in 0..msgs {
        publisher.publish(subject.clone(), payload.clone()).await?;
        if i % 10_000 == 9_999 {
            publisher.flush().await?;
        }
    }
    publisher.flush().await?;
    if tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .is_err()
    {
        bail!(
            "only {} of {msgs} messages crossed {path} within 60 s",
            received.load(Ordering::Relaxed)
        );
    }
    Ok(msgs as f64 / start.elapsed().as_secs_f64())
}

/// Runs `run(target index, size)` `rounds` times per target (one per
/// label) and size, targets interleaved, and prints the medians as a
/// table with ratios of the first target against each other one.
pub(crate) async fn ratio_table<F, Fut>(
    labels: &[String],
    sizes: &[usize],
    rounds: usize,
    mut run: F,
) -> anyhow::Result<()>
where
    F: FnMut(usize, usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<f64>>,
{
    let mut header = String::from("| payload |");
    let mut rule = String::from("|---|");
    for l in labels {
        header.push_str(&format!(" {l} msgs/s |"));
        rule.push_str("---:|");
    }
    for l in labels.iter().skip(1) {
        header.push_str(&format!(" ratio vs {l} |"));
        rule.push_str("---:|");
    }
    println!("{header}\n{rule}");
    for &size in sizes {
        let mut runs: Vec<Vec<f64>> = vec![Vec::new(); labels.len()];
        for round in 0..rounds.max(1) {
            for i in 0..labels.len() {
                let r = run(i, size)
                    .await
                    .with_context(|| format!("{size} B on {} (round {})", labels[i], round + 1))?;
                runs[i].push(r);
            }
        }
        let medians: Vec<f64> = runs.into_iter().map(super::median).collect();
        let mut line = format!("| {size} B |");
        for m in &medians {
            line.push_str(&format!(" {m:.0} |"));
        }
        for m in medians.iter().skip(1) {
            line.push_str(&format!(" {:.2} |", medians[0] / m));
        }
        println!("{line}");
    }
    Ok(())
}

/// Runs the benchmark and prints the table.
pub fn run(args: RoutesBenchArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the benchmark runtime")?;
    rt.block_on(run_async(args))
}

async fn run_async(args: RoutesBenchArgs) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("locating this binary")?;
    // `--pool-size` and `--compression`: one config file every server of
    // every mesh loads.
    let conf_dir = tempfile::tempdir().context("creating a temporary directory")?;
    let conf = conf_dir.path().join("cluster.conf");
    let mut cluster = Vec::new();
    if let Some(n) = args.pool_size {
        cluster.push(format!("pool_size: {n}"));
    }
    if let Some(c) = &args.compression {
        cluster.push(format!("compression: {c}"));
    }
    let pool_flags: Vec<String> = if cluster.is_empty() {
        Vec::new()
    } else {
        std::fs::write(&conf, format!("cluster {{ {} }}\n", cluster.join(", ")))
            .with_context(|| format!("writing {}", conf.display()))?;
        vec!["-c".into(), conf.display().to_string()]
    };
    let flags: Vec<&str> = pool_flags.iter().map(String::as_str).collect();
    let ours: Vec<&str> = std::iter::once("nats-server")
        .chain(flags.iter().copied())
        .collect();
    let mut meshes = vec![start_mesh("liftbridge", &me, &ours).await?];
    for p in &args.peers {
        let (label, path) = p
            .split_once('=')
            .with_context(|| format!("expected LABEL=PATH, got {p:?}"))?;
        meshes.push(start_mesh(label, &PathBuf::from(path), &flags).await?);
    }
    if !args.no_path_peer {
        if let Some(path) = find_on_path("nats-server") {
            meshes.push(start_mesh("nats-server", &path, &flags).await?);
        }
    }
    let pools = match args.pool_size {
        Some(n) => format!("pool_size {n} on every server"),
        None => "each server's default pool_size".into(),
    };
    let pools = match &args.compression {
        Some(c) => format!("{pools}, compression {c}"),
        None => pools,
    };
    println!(
        "routed 1 pub (server A) → 1 sub (server B), three servers meshed from one seed, {pools}; \
         {} msgs per run, {} rounds (median)\n",
        args.msgs, args.rounds
    );
    if args.compression.is_some() {
        for m in &meshes {
            let v = http_json(m.servers[0].http_port, "/routez").await;
            let mut modes: Vec<String> = v
                .as_ref()
                .and_then(|v| v["routes"].as_array())
                .map(|l| {
                    l.iter()
                        .map(|r| r["compression"].as_str().unwrap_or("none").to_string())
                        .collect()
                })
                .unwrap_or_default();
            modes.sort();
            modes.dedup();
            println!(
                "{}: server A's routes report compression {modes:?}",
                m.label
            );
        }
        println!();
    }
    let labels: Vec<String> = meshes.iter().map(|m| m.label.clone()).collect();
    let meshes = &meshes;
    ratio_table(&labels, &[128, 1024], args.rounds, |i, size| {
        routed_run(&meshes[i], size, args.msgs)
    })
    .await
}
