//! `liftbridge bench leaf`: core NATS throughput through a leaf-node
//! connection, our servers against nats-servers connected the same way.
//!
//! For every target a hub and a leaf are started on loopback from config
//! files (the leaf's only remote is the hub's leaf port): this binary as
//! hub and leaf, every `--peer LABEL=PATH` (and `nats-server` from PATH)
//! as hub and leaf, and each mix of the two (our leaf role against theirs
//! under the same hub, and our hub role against theirs with the same leaf). One publisher on the
//! hub sends to one subscriber on the leaf (every message crosses the leaf
//! connection once), 128 B and 1 KiB. Each workload runs `--rounds` times
//! per target, interleaved; the medians are printed as a ratio table. All
//! clients are async-nats in this process, so only the servers differ.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use super::routes::{connect, http_json, ratio_table, timed_flow, wait_listening, Server};
use super::{find_on_path, free_port};

/// Arguments of `liftbridge bench leaf`.
#[derive(Debug, Clone, clap::Args)]
pub struct LeafBenchArgs {
    /// A nats-server binary to measure, as LABEL=PATH. Repeatable.
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
    /// `compression` of every hub's leaf listener and every leaf's remote
    /// (e.g. `s2_fast`; default: none set, each server's own default).
    #[arg(long)]
    pub compression: Option<String>,
}

/// A hub and its leaf.
struct Pair {
    hub: Server,
    leaf: Server,
    _dir: tempfile::TempDir,
}

/// A server binary: its path and the arguments before the flags.
struct Exe<'a> {
    path: &'a Path,
    pre: &'a [&'a str],
}

/// Starts `exe` from a config file `conf_body` (client and monitoring
/// ports are added) written into `dir`; waits for `extra_port` too.
fn spawn_conf(
    exe: &Exe<'_>,
    dir: &Path,
    name: &str,
    conf_body: &str,
    extra_port: Option<u16>,
) -> anyhow::Result<Server> {
    let (client, http) = (free_port()?, free_port()?);
    let conf = format!(
        "server_name: {name}\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{http}\n{conf_body}\n"
    );
    let path = dir.join(format!("{name}.conf"));
    std::fs::write(&path, conf).with_context(|| format!("writing {}", path.display()))?;
    let child = Command::new(exe.path)
        .args(exe.pre)
        .arg("-c")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", exe.path.display()))?;
    let server = Server {
        child,
        client_port: client,
        http_port: http,
    };
    let mut ports = vec![client, http];
    ports.extend(extra_port);
    wait_listening(exe.path, &ports)?;
    Ok(server)
}

/// `/leafz?subs=1` of `port` until `check` holds (up to 20 s).
async fn wait_leafz(
    port: u16,
    what: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> anyhow::Result<()> {
    let end = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = http_json(port, "/leafz?subs=1").await {
            if check(&v) {
                return Ok(());
            }
        }
        if std::time::Instant::now() > end {
            bail!("timed out waiting for {what} on :{port}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn start_pair(
    hub_exe: &Exe<'_>,
    leaf_exe: &Exe<'_>,
    compression: Option<&str>,
) -> anyhow::Result<Pair> {
    let dir = tempfile::tempdir().context("temp dir")?;
    let leaf_port = free_port()?;
    let comp = compression.map_or(String::new(), |c| format!(", compression: {c}"));
    let hub = spawn_conf(
        hub_exe,
        dir.path(),
        "hub",
        &format!("leafnodes {{ listen: 127.0.0.1:{leaf_port}{comp} }}"),
        Some(leaf_port),
    )?;
    let leaf = spawn_conf(
        leaf_exe,
        dir.path(),
        "leaf",
        &format!(
            "leafnodes {{ remotes [ {{ url: \"nats-leaf://127.0.0.1:{leaf_port}\"{comp} }} ] }}"
        ),
        None,
    )?;
    wait_leafz(hub.http_port, "the leaf connection", |v| {
        v["leafnodes"].as_u64() == Some(1)
    })
    .await?;
    Ok(Pair {
        hub,
        leaf,
        _dir: dir,
    })
}

/// One publisher on the hub, one subscriber on the leaf.
async fn leaf_run(pair: &Pair, size: usize, msgs: u64) -> anyhow::Result<f64> {
    let subject = format!("bench.leaf.{}", rand::random::<u32>());
    let sub_client = connect(pair.leaf.client_port).await?;
    let sub = sub_client.subscribe(subject.clone()).await?;
    sub_client.flush().await?;
    // The hub must know the leaf's interest before the clock runs.
    let s = subject.clone();
    wait_leafz(pair.hub.http_port, "the leaf's interest", move |v| {
        v["leafs"].as_array().is_some_and(|l| {
            l.iter().any(|c| {
                c["subscriptions_list"]
                    .as_array()
                    .is_some_and(|subs| subs.iter().any(|x| x.as_str() == Some(s.as_str())))
            })
        })
    })
    .await?;
    timed_flow(
        sub,
        pair.hub.client_port,
        &subject,
        size,
        msgs,
        "the leaf connection",
    )
    .await
}

/// Runs the benchmark and prints the table.
pub fn run(args: LeafBenchArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the benchmark runtime")?;
    rt.block_on(run_async(args))
}

async fn run_async(args: LeafBenchArgs) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("locating this binary")?;
    let ours = Exe {
        path: &me,
        pre: &["nats-server"],
    };
    let mut peers: Vec<(String, PathBuf)> = Vec::new();
    for p in &args.peers {
        let (label, path) = p
            .split_once('=')
            .with_context(|| format!("expected LABEL=PATH, got {p:?}"))?;
        peers.push((label.to_string(), PathBuf::from(path)));
    }
    if !args.no_path_peer {
        if let Some(path) = find_on_path("nats-server") {
            peers.push(("nats-server".into(), path));
        }
    }
    let comp = args.compression.as_deref();
    let mut pairs = vec![start_pair(&ours, &ours, comp).await?];
    let mut labels = vec!["liftbridge hub+leaf".to_string()];
    for (label, path) in &peers {
        let theirs = Exe { path, pre: &[] };
        pairs.push(start_pair(&theirs, &theirs, comp).await?);
        labels.push(format!("{label} hub+leaf"));
        pairs.push(start_pair(&theirs, &ours, comp).await?);
        labels.push(format!("{label} hub, liftbridge leaf"));
        pairs.push(start_pair(&ours, &theirs, comp).await?);
        labels.push(format!("liftbridge hub, {label} leaf"));
    }
    println!(
        "1 pub (hub) → 1 sub (leaf) across one leaf connection; {} msgs per run, \
         {} rounds (median)\n",
        args.msgs, args.rounds
    );
    let pairs = &pairs;
    ratio_table(&labels, &[128, 1024], args.rounds, |i, size| {
        leaf_run(&pairs[i], size, args.msgs)
    })
    .await
}
