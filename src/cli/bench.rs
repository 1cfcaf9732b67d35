//! `liftbridge bench`: run load benchmarks.
//!
//! A dispatcher: each target has its own arm and argument struct, defined
//! next to its load generator in `crate::bench`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Arguments of this subcommand.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// What to benchmark.
    #[command(subcommand)]
    pub target: BenchTarget,
}

/// Benchmark targets.
#[derive(Debug, Clone, Subcommand)]
pub enum BenchTarget {
    /// The partition log on disk: append, read, time lookup, retention,
    /// compaction, file size, next to the disk's own fsync limit.
    Store(StoreBenchArgs),
    /// Core NATS pub/sub against the embedded server, side by side with
    /// nats-server (from PATH and every `--peer`), as a ratio table.
    Nats(crate::bench::nats::NatsBenchArgs),
    /// Routed core NATS throughput (publisher on one server, subscriber on
    /// another) across three meshed servers, side by side with three
    /// nats-servers meshed the same way.
    Routes(crate::bench::routes::RoutesBenchArgs),
    /// Core NATS throughput through a leaf-node connection (publisher on
    /// the hub, subscriber on the leaf), side by side with nats-servers
    /// connected the same way.
    Leaf(crate::bench::leaf::LeafBenchArgs),
    /// Acked durable publish and replay end to end, side by side with
    /// JetStream (file storage, one replica).
    Lb(crate::bench::lb::LbBenchArgs),
    /// Replicated acked publish (RF 3, AckPolicy ALL) on three nodes and
    /// the failover time after `kill -9` of the partition leader, side by
    /// side with JetStream R3 on three routed nats-servers.
    Cluster(crate::bench::cluster::ClusterBenchArgs),
    /// Child process of the store crash tests: appends until killed and
    /// prints every acknowledged append on stdout.
    #[command(name = "store-crash-child", hide = true)]
    StoreCrashChild(CrashChildArgs),
}

/// Arguments of `bench store`.
#[derive(Debug, Clone, Args)]
pub struct StoreBenchArgs {
    /// Directory for the benchmark databases (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Seconds to run each append case.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Records in the retention/compaction/read log.
    #[arg(long, default_value_t = 1_000_000)]
    pub big_records: u64,
    /// Interval of the interval sync policy, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub interval_ms: u64,
}

/// Arguments of the crash-test child.
#[derive(Debug, Clone, Args)]
pub struct CrashChildArgs {
    /// Directory of the log.
    pub dir: PathBuf,
    /// `always` or `interval`.
    pub sync: String,
    /// Seed for batch sizes.
    pub seed: u64,
    /// Abort the process right after this many journal frames were
    /// written (and, under `always`, synced), before their appends are
    /// answered: a crash between the journal write and the redb apply.
    #[arg(long)]
    pub abort_after_frames: Option<u64>,
    /// Count those frames only from the first switch of journal files on
    /// (a checkpoint running in the background): the abort then lands
    /// while frames are in both files.
    #[arg(long, requires = "abort_after_frames")]
    pub after_switch: bool,
}

/// Runs the subcommand.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.target {
        BenchTarget::Store(a) => crate::bench::store::run(crate::bench::store::StoreBenchOptions {
            dir: a.dir,
            seconds: a.seconds,
            big_records: a.big_records,
            interval_ms: a.interval_ms,
        }),
        BenchTarget::StoreCrashChild(a) => crate::bench::store::crash_child(
            &a.dir,
            &a.sync,
            a.seed,
            a.abort_after_frames,
            a.after_switch,
        ),
        BenchTarget::Nats(a) => crate::bench::nats::run(a),
        BenchTarget::Lb(a) => crate::bench::lb::run(a),
        BenchTarget::Routes(a) => crate::bench::routes::run(a),
        BenchTarget::Leaf(a) => crate::bench::leaf::run(a),
        BenchTarget::Cluster(a) => crate::bench::cluster::run(a),
    }
}
