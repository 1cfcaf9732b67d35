//! `liftbridge bench nats`: core NATS load, side by side with nats-server.
//!
//! Every target is driven by the same async-nats clients from this process,
//! so the only thing that differs between two columns of the table is the
//! server. Targets are our own binary (started as `liftbridge nats-server` on
//! a free loopback port), every `--peer` binary and `nats-server` from PATH
//! (started the same way), and any `--url` of a server that already runs.
//!
//! Workloads (issue "Embedded NATS server", item 8):
//! (a) 1 publisher → 1 subscriber, 128 B; (b) 1 → 4 subscribers, 1 KiB;
//! (c) 4 publishers → 1 subscriber, 128 B; (d) a queue group of 4, 128 B;
//! (e) request/reply round trips, p50/p99/p99.9; plus server RSS idle and
//! after the runs. Each workload runs `--rounds` times per target,
//! interleaved between targets, and the median is reported.
//!
//! With `--websocket`, every started server gets a config file with
//! `websocket { no_tls: true }` on a free port and the clients connect over
//! `ws://` (async-nats's WebSocket transport) instead of TCP.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::Notify;

use super::{find_on_path, free_port};

/// Arguments of `liftbridge bench nats`.
#[derive(Debug, Clone, clap::Args)]
pub struct NatsBenchArgs {
    /// A server that already runs, as LABEL=URL (e.g. `mine=nats://127.0.0.1:4222`). Repeatable.
    #[arg(long = "url")]
    pub urls: Vec<String>,
    /// A nats-server binary to start and measure, as LABEL=PATH. Repeatable.
    #[arg(long = "peer")]
    pub peers: Vec<String>,
    /// Do not add `nats-server` found on PATH as a peer.
    #[arg(long)]
    pub no_path_peer: bool,
    /// Do not start this binary's own server.
    #[arg(long)]
    pub no_self: bool,
    /// Messages per throughput workload.
    #[arg(long, default_value_t = 200_000)]
    pub msgs: u64,
    /// Round trips in the request/reply workload.
    #[arg(long, default_value_t = 20_000)]
    pub requests: u64,
    /// Repetitions of every workload per target (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Connect over WebSocket (`ws://`) to the servers this command starts.
    #[arg(long)]
    pub websocket: bool,
}

/// One server under test.
struct Target {
    label: String,
    url: String,
    child: Option<Child>,
    version: String,
    /// Holds the started server's config file (`--websocket`).
    _conf: Option<tempfile::TempDir>,
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Target {
    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

/// A workload's result on one target.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
struct Measure {
    /// Published messages per second (throughput workloads).
    msgs_per_sec: f64,
    /// Delivered messages per second, summed over subscribers.
    delivered_per_sec: f64,
    /// Round-trip percentiles in microseconds (request/reply).
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
}

#[derive(Debug, Clone, Copy)]
enum Workload {
    PubSub {
        pubs: usize,
        subs: usize,
        size: usize,
        queue: bool,
    },
    RequestReply {
        size: usize,
    },
}

impl Workload {
    fn name(&self) -> String {
        match *self {
            Workload::PubSub {
                pubs,
                subs,
                size,
                queue: false,
            } => format!("{pubs} pub → {subs} sub, {size} B"),
            Workload::PubSub {
                pubs, subs, size, ..
            } => format!("{pubs} pub → queue group of {subs}, {size} B"),
            Workload::RequestReply { size } => format!("request/reply, {size} B"),
        }
    }
}

const WORKLOADS: [Workload; 5] = [
    Workload::PubSub {
        pubs: 1,
        subs: 1,
        size: 128,
        queue: false,
    },
    Workload::PubSub {
        pubs: 1,
        subs: 4,
        size: 1024,
        queue: false,
    },
    Workload::PubSub {
        pubs: 4,
        subs: 1,
        size: 128,
        queue: false,
    },
    Workload::PubSub {
        pubs: 1,
        subs: 4,
        size: 128,
        queue: true,
    },
    Workload::RequestReply { size: 128 },
];

/// Runs the benchmark and prints the table.
pub fn run(args: NatsBenchArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the benchmark runtime")?;
    rt.block_on(run_async(args))
}

async fn run_async(args: NatsBenchArgs) -> anyhow::Result<()> {
    let mut targets = start_targets(&args)?;
    if targets.is_empty() {
        bail!("no target: give --url or --peer, or drop --no-self");
    }
    for t in targets.iter_mut() {
        let client = connect(&t.url).await?;
        t.version = client.server_info().version.clone();
        drop(client);
    }
    let idle_rss: Vec<Option<u64>> = targets.iter().map(|t| t.pid().and_then(rss_kib)).collect();

    let mut results: Vec<Vec<Measure>> = vec![Vec::new(); WORKLOADS.len()];
    for (wi, w) in WORKLOADS.iter().enumerate() {
        let mut per_target: Vec<Vec<Measure>> = vec![Vec::new(); targets.len()];
        for round in 0..args.rounds.max(1) {
            for (ti, t) in targets.iter().enumerate() {
                let m = run_workload(&t.url, *w, &args).await.with_context(|| {
                    format!("{} on {} (round {})", w.name(), t.label, round + 1)
                })?;
                per_target[ti].push(m);
            }
        }
        results[wi] = per_target.iter().map(|v| median_measure(v)).collect();
    }
    let busy_rss: Vec<Option<u64>> = targets.iter().map(|t| t.pid().and_then(rss_kib)).collect();

    print_table(&targets, &results, &idle_rss, &busy_rss, &args);
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "targets": targets.iter().map(|t| serde_json::json!({"label": t.label, "version": t.version})).collect::<Vec<_>>(),
            "workloads": WORKLOADS.iter().enumerate().map(|(i, w)| serde_json::json!({"name": w.name(), "results": results[i]})).collect::<Vec<_>>(),
            "rss_idle_kib": idle_rss,
            "rss_after_kib": busy_rss,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn start_targets(args: &NatsBenchArgs) -> anyhow::Result<Vec<Target>> {
    let mut targets = Vec::new();
    if !args.no_self {
        let exe = std::env::current_exe().context("locating this binary")?;
        targets.push(spawn_server(
            "liftbridge",
            &exe,
            &["nats-server"],
            args.websocket,
        )?);
    }
    for peer in &args.peers {
        let (label, path) = split_label(peer)?;
        targets.push(spawn_server(
            label,
            &PathBuf::from(path),
            &[],
            args.websocket,
        )?);
    }
    if !args.no_path_peer {
        if let Some(path) = find_on_path("nats-server") {
            targets.push(spawn_server("nats-server", &path, &[], args.websocket)?);
        }
    }
    for url in &args.urls {
        let (label, url) = split_label(url)?;
        targets.push(Target {
            label: label.to_string(),
            url: url.to_string(),
            child: None,
            version: String::new(),
            _conf: None,
        });
    }
    Ok(targets)
}

fn split_label(s: &str) -> anyhow::Result<(&str, &str)> {
    s.split_once('=')
        .ok_or_else(|| anyhow!("expected LABEL=VALUE, got {s:?}"))
}

fn spawn_server(
    label: &str,
    exe: &PathBuf,
    pre: &[&str],
    websocket: bool,
) -> anyhow::Result<Target> {
    let port = free_port()?;
    let mut cmd = Command::new(exe);
    cmd.args(pre)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()]);
    let (mut url, mut wait_port) = (format!("nats://127.0.0.1:{port}"), port);
    let mut conf_dir = None;
    if websocket {
        let ws_port = free_port()?;
        let dir = tempfile::tempdir().context("config dir")?;
        let conf = dir.path().join("ws.conf");
        std::fs::write(
            &conf,
            format!("websocket {{\n  listen: \"127.0.0.1:{ws_port}\"\n  no_tls: true\n}}\n"),
        )
        .context("writing the websocket config")?;
        cmd.arg("-c").arg(&conf);
        url = format!("ws://127.0.0.1:{ws_port}");
        wait_port = ws_port;
        conf_dir = Some(dir);
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", wait_port)).is_err() {
        if Instant::now() > deadline {
            bail!("{} did not listen on {url} within 10 s", exe.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Target {
        label: label.to_string(),
        url,
        child: Some(child),
        version: String::new(),
        _conf: conf_dir,
    })
}

async fn connect(url: &str) -> anyhow::Result<async_nats::Client> {
    async_nats::ConnectOptions::new()
        .subscription_capacity(1 << 20)
        .client_capacity(1 << 16)
        .connect(url)
        .await
        .with_context(|| format!("connecting to {url}"))
}

async fn run_workload(url: &str, w: Workload, args: &NatsBenchArgs) -> anyhow::Result<Measure> {
    match w {
        Workload::PubSub {
            pubs,
            subs,
            size,
            queue,
        } => pub_sub(url, pubs, subs, size, queue, args.msgs).await,
        Workload::RequestReply { size } => request_reply(url, size, args.requests).await,
    }
}

async fn pub_sub(
    url: &str,
    pubs: usize,
    subs: usize,
    size: usize,
    queue: bool,
    msgs: u64,
) -> anyhow::Result<Measure> {
    let subject = format!("bench.{}", rand::random::<u32>());
    let per_pub = msgs / pubs as u64;
    let total = per_pub * pubs as u64;
    let expected = if queue { total } else { total * subs as u64 };
    let received = Arc::new(AtomicU64::new(0));
    let done = Arc::new(Notify::new());

    let mut sub_tasks = Vec::new();
    let mut sub_clients = Vec::new();
    for _ in 0..subs {
        let client = connect(url).await?;
        let mut sub = if queue {
            client.queue_subscribe(subject.clone(), "q".into()).await?
        } else {
            client.subscribe(subject.clone()).await?
        };
        client.flush().await?;
        let received = received.clone();
        let done = done.clone();
        sub_tasks.push(tokio::spawn(async move {
            while sub.next().await.is_some() {
                if received.fetch_add(1, Ordering::Relaxed) + 1 == expected {
                    done.notify_one();
                }
            }
        }));
        sub_clients.push(client);
    }

    let payload = Bytes::from(vec![b'x'; size]);
    let mut pub_clients = Vec::new();
    for _ in 0..pubs {
        pub_clients.push(connect(url).await?);
    }
    let start = Instant::now();
    let mut pub_tasks = Vec::new();
    for client in &pub_clients {
        let client = client.clone();
        let subject = subject.clone();
        let payload = payload.clone();
        pub_tasks.push(tokio::spawn(async move {
            for i in 0..per_pub {
                client.publish(subject.clone(), payload.clone()).await?;
                // A round trip now and then keeps the publisher from running
                // arbitrarily far ahead of the server, as on a real network.
                if i % 10_000 == 9_999 {
                    client.flush().await?;
                }
            }
            client.flush().await?;
            anyhow::Ok(())
        }));
    }
    for t in pub_tasks {
        t.await??;
    }
    let published = start.elapsed();
    let wait = tokio::time::timeout(Duration::from_secs(60), async {
        while received.load(Ordering::Relaxed) < expected {
            tokio::select! {
                _ = done.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        }
    })
    .await;
    let elapsed = start.elapsed();
    for t in &sub_tasks {
        t.abort();
    }
    if wait.is_err() {
        bail!(
            "only {} of {} messages delivered within 60 s",
            received.load(Ordering::Relaxed),
            expected
        );
    }
    Ok(Measure {
        msgs_per_sec: total as f64 / published.as_secs_f64().max(elapsed.as_secs_f64()),
        delivered_per_sec: expected as f64 / elapsed.as_secs_f64(),
        ..Measure::default()
    })
}

async fn request_reply(url: &str, size: usize, n: u64) -> anyhow::Result<Measure> {
    let subject = format!("bench.rr.{}", rand::random::<u32>());
    let responder = connect(url).await?;
    let mut sub = responder.subscribe(subject.clone()).await?;
    responder.flush().await?;
    let r = responder.clone();
    let serve = tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Some(reply) = msg.reply {
                if r.publish(reply, msg.payload).await.is_err() {
                    break;
                }
            }
        }
    });
    let requester = connect(url).await?;
    let payload = Bytes::from(vec![b'r'; size]);
    let mut lat = Vec::with_capacity(n as usize);
    // Warm up the inbox subscription and the connection.
    for _ in 0..100 {
        requester.request(subject.clone(), payload.clone()).await?;
    }
    for _ in 0..n {
        let t = Instant::now();
        requester.request(subject.clone(), payload.clone()).await?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    serve.abort();
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    Ok(Measure {
        msgs_per_sec: n as f64 / (lat.iter().sum::<f64>() / 1e6),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        p999_us: pct(0.999),
        ..Measure::default()
    })
}

/// Each figure's median over the rounds.
fn median_measure(v: &[Measure]) -> Measure {
    let pick = |f: fn(&Measure) -> f64| super::median(v.iter().map(f).collect());
    Measure {
        msgs_per_sec: pick(|m| m.msgs_per_sec),
        delivered_per_sec: pick(|m| m.delivered_per_sec),
        p50_us: pick(|m| m.p50_us),
        p99_us: pick(|m| m.p99_us),
        p999_us: pick(|m| m.p999_us),
    }
}

/// Resident set size of a process in KiB, from /proc.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// One printed metric: its name, how to read it from a measure, and
/// whether a higher value is better.
type Metric = (&'static str, fn(&Measure) -> f64, bool);

fn print_table(
    targets: &[Target],
    results: &[Vec<Measure>],
    idle: &[Option<u64>],
    busy: &[Option<u64>],
    args: &NatsBenchArgs,
) {
    let heads: Vec<String> = targets
        .iter()
        .map(|t| format!("{} {}", t.label, t.version))
        .collect();
    println!(
        "msgs per workload: {}, request/reply round trips: {}, rounds: {} (median)\n",
        args.msgs, args.requests, args.rounds
    );
    let mut header = String::from("| workload | metric |");
    let mut rule = String::from("|---|---|");
    for h in &heads {
        header.push_str(&format!(" {h} |"));
        rule.push_str("---:|");
    }
    for h in heads.iter().skip(1) {
        header.push_str(&format!(" ratio vs {h} |"));
        rule.push_str("---:|");
    }
    println!("{header}\n{rule}");
    for (wi, w) in WORKLOADS.iter().enumerate() {
        let rows: Vec<Metric> = match w {
            Workload::PubSub { .. } => vec![
                ("published msgs/s", |m| m.msgs_per_sec, true),
                ("delivered msgs/s", |m| m.delivered_per_sec, true),
            ],
            Workload::RequestReply { .. } => vec![
                ("round trips/s", |m| m.msgs_per_sec, true),
                ("p50 µs", |m| m.p50_us, false),
                ("p99 µs", |m| m.p99_us, false),
                ("p99.9 µs", |m| m.p999_us, false),
            ],
        };
        for (metric, f, higher_better) in rows {
            let mut line = format!("| {} | {metric} |", w.name());
            for m in &results[wi] {
                line.push_str(&format!(" {:.0} |", f(m)));
            }
            let ours = f(&results[wi][0]);
            for m in results[wi].iter().skip(1) {
                let theirs = f(m);
                // Ratios read "higher is better for us": throughput ours/theirs,
                // latency theirs/ours.
                let ratio = if higher_better {
                    ours / theirs
                } else {
                    theirs / ours
                };
                line.push_str(&format!(" {ratio:.2} |"));
            }
            println!("{line}");
        }
    }
    let fmt = |v: &Option<u64>| {
        v.map_or("n/a".to_string(), |k| {
            format!("{:.1} MiB", k as f64 / 1024.0)
        })
    };
    let mut line = String::from("| server RSS | idle |");
    for v in idle {
        line.push_str(&format!(" {} |", fmt(v)));
    }
    println!("{line}");
    let mut line = String::from("| server RSS | after the runs |");
    for v in busy {
        line.push_str(&format!(" {} |", fmt(v)));
    }
    println!("{line}");
}
