//! Storage metrics: group-commit batch sizes, commit, fsync, journal and
//! append latencies, and cleaner (retention, compaction) runs.
//!
//! [`StoreMetrics`] implements the store's [`StoreObserver`]: the partition
//! manager passes [`observer`] in every log configuration, and the storage
//! writer threads report through it, each call a handful of atomic
//! operations. The series are process-wide; a node's registry exposes them
//! (several in-process nodes, as in tests, see the sum).
//!
//! Must not: take locks held by the writer, allocate per call, or do I/O.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::store::{Observer, StoreObserver};

/// The process-wide storage metrics.
#[derive(Debug, Clone)]
pub struct StoreMetrics {
    batch_records: Histogram,
    commit_seconds: Histogram,
    fsync_seconds: Histogram,
    append_seconds: Histogram,
    journal_write_seconds: Histogram,
    journal_sync_seconds: Histogram,
    journal_bytes: Counter,
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
    journal_write_seconds: Histogram::new(latency_buckets()),
    journal_sync_seconds: Histogram::new(latency_buckets()),
    journal_bytes: Counter::default(),
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

/// The observer to give every partition log: it reports into the shared
/// series.
pub fn observer() -> Observer {
    Observer::new(store().clone())
}

impl StoreObserver for StoreMetrics {
    fn commit(&self, _applied: u64, elapsed: Duration, durable: bool) {
        self.commits.inc();
        if durable {
            self.durable_commits.inc();
        }
        self.commit_seconds.observe(elapsed.as_secs_f64());
    }

    fn durable_commit(&self, elapsed: Duration) {
        self.fsync_seconds.observe(elapsed.as_secs_f64());
    }

    fn journal_write(&self, records: u64, bytes: u64, elapsed: Duration, synced: bool) {
        // A journal frame is the group commit of the appends in it.
        self.commits.inc();
        self.batch_records.observe(records as f64);
        self.journal_bytes.inc_by(bytes);
        self.journal_write_seconds.observe(elapsed.as_secs_f64());
        if synced {
            self.journal_sync_seconds.observe(elapsed.as_secs_f64());
            self.fsync_seconds.observe(elapsed.as_secs_f64());
        }
    }

    fn journal_sync(&self, elapsed: Duration) {
        self.journal_sync_seconds.observe(elapsed.as_secs_f64());
        self.fsync_seconds.observe(elapsed.as_secs_f64());
    }

    fn append(&self, elapsed: Duration) {
        self.append_seconds.observe(elapsed.as_secs_f64());
    }

    fn retention(&self, removed: u64) {
        self.retention_runs.inc();
        self.retention_removed.inc_by(removed);
    }

    fn compaction(&self, removed: u64) {
        self.compaction_runs.inc();
        self.compaction_removed.inc_by(removed);
    }
}

impl StoreMetrics {
    /// Registers the shared series with `reg` (clones share the values).
    pub fn register(&self, reg: &mut Registry) {
        reg.register(
            "liftbridge_store_append_batch_records",
            "Records appended per group commit (journal frame)",
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
            "Duration of the write path's fsyncs: journal fdatasyncs (with their write under sync=always) and the commit call of durable database transactions",
            Unit::Seconds,
            self.fsync_seconds.clone(),
        );
        reg.register_with_unit(
            "liftbridge_store_append_duration",
            "Duration of an append, from the call until it is committed (and fsynced under sync=always)",
            Unit::Seconds,
            self.append_seconds.clone(),
        );
        reg.register_with_unit(
            "liftbridge_store_journal_write_duration",
            "Duration of a journal frame write, including its fdatasync under sync=always",
            Unit::Seconds,
            self.journal_write_seconds.clone(),
        );
        reg.register_with_unit(
            "liftbridge_store_journal_sync_duration",
            "Duration of journal fdatasyncs (each frame under sync=always, once per interval otherwise)",
            Unit::Seconds,
            self.journal_sync_seconds.clone(),
        );
        reg.register(
            "liftbridge_store_journal_written_bytes",
            "Bytes of record frames written to partition journals",
            self.journal_bytes.clone(),
        );
        reg.register(
            "liftbridge_store_commits",
            "Group commits: journal frames written and database transactions committed",
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
