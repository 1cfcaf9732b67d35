//! Storage metrics: group-commit batch sizes, commit, fsync and append
//! latencies, and cleaner (retention, compaction) runs.
//!
//! These are process-wide: the storage writer threads of every partition log
//! in the process report here through the `observe_*` functions, each a
//! handful of atomic operations, so the write path pays almost nothing and
//! needs no handle threaded through it. A node's registry exposes the same
//! shared series (several in-process nodes, as in tests, see the sum).
//!
//! Must not: take locks held by the writer, allocate per call, or do I/O.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// The process-wide storage metrics.
#[derive(Debug, Clone)]
pub struct StoreMetrics {
    batch_records: Histogram,
    commit_seconds: Histogram,
    fsync_seconds: Histogram,
    append_seconds: Histogram,
    commits: Counter,
    durable_commits: Counter,
    retention_runs: Counter,
    retention_removed: Counter,
    compaction_runs: Counter,
    compaction_removed: Counter,
}

/// Latency buckets: 50 µs to about 6.5 s, doubling.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_05, 2.0, 18)
}

static STORE: LazyLock<StoreMetrics> = LazyLock::new(|| StoreMetrics {
    // 1, 2, 4, … 8192 records per commit (the stenographer batches up to 4096).
    batch_records: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
    commit_seconds: Histogram::new(latency_buckets()),
    fsync_seconds: Histogram::new(latency_buckets()),
    append_seconds: Histogram::new(latency_buckets()),
    commits: Counter::default(),
    durable_commits: Counter::default(),
    retention_runs: Counter::default(),
    retention_removed: Counter::default(),
    compaction_runs: Counter::default(),
    compaction_removed: Counter::default(),
});

/// The shared instance.
pub fn store() -> &'static StoreMetrics {
    &STORE
}

/// A write transaction committed: `appended` records in it, `elapsed` from
/// its start to the end of its commit, `durable` when it was fsynced.
pub fn observe_commit(appended: u64, elapsed: Duration, durable: bool) {
    let s = store();
    s.commits.inc();
    if durable {
        s.durable_commits.inc();
    }
    if appended > 0 {
        s.batch_records.observe(appended as f64);
    }
    s.commit_seconds.observe(elapsed.as_secs_f64());
}

/// The commit call of a durable transaction (the page writes and the fsyncs
/// that make it durable) took `elapsed`.
pub fn observe_fsync(elapsed: Duration) {
    store().fsync_seconds.observe(elapsed.as_secs_f64());
}

/// One append call completed (queued, committed and, when the policy says
/// so, fsynced) in `elapsed`.
pub fn observe_append(elapsed: Duration) {
    store().append_seconds.observe(elapsed.as_secs_f64());
}

/// A retention pass ran and removed `removed` records.
pub fn retention_run(removed: u64) {
    let s = store();
    s.retention_runs.inc();
    s.retention_removed.inc_by(removed);
}

/// A compaction pass ran and removed `removed` records.
pub fn compaction_run(removed: u64) {
    let s = store();
    s.compaction_runs.inc();
    s.compaction_removed.inc_by(removed);
}

impl StoreMetrics {
    /// Registers the shared series with `reg` (clones share the values).
    pub fn register(&self, reg: &mut Registry) {
        reg.register(
            "liftbridge_store_append_batch_records",
            "Records appended per group commit",
            self.batch_records.clone(),
        );
        reg.register_with_unit(
            "liftbridge_store_commit_duration",
            "Duration of a storage write transaction, from its start to the end of its commit",
            Unit::Seconds,
            self.commit_seconds.clone(),
        );
        reg.register_with_unit(
            "liftbridge_store_fsync_duration",
            "Duration of the commit call of durable transactions (page writes and fsyncs)",
            Unit::Seconds,
            self.fsync_seconds.clone(),
        );
        reg.register_with_unit(
            "liftbridge_store_append_duration",
            "Duration of an append, from the call until it is committed (and fsynced under sync=always)",
            Unit::Seconds,
            self.append_seconds.clone(),
        );
        reg.register(
            "liftbridge_store_commits",
            "Storage write transactions committed",
            self.commits.clone(),
        );
        reg.register(
            "liftbridge_store_durable_commits",
            "Storage write transactions committed durably (fsynced)",
            self.durable_commits.clone(),
        );
        reg.register(
            "liftbridge_store_retention_runs",
            "Retention passes run",
            self.retention_runs.clone(),
        );
        reg.register(
            "liftbridge_store_retention_removed_records",
            "Records removed by retention",
            self.retention_removed.clone(),
        );
        reg.register(
            "liftbridge_store_compaction_runs",
            "Compaction passes run",
            self.compaction_runs.clone(),
        );
        reg.register(
            "liftbridge_store_compaction_removed_records",
            "Superseded records removed by compaction",
            self.compaction_removed.clone(),
        );
    }
}
