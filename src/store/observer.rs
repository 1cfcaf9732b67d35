//! What the store reports about itself, to whoever opened it.
//!
//! Role: the store measures (commit sizes and durations, journal writes and
//! fsyncs, append latency, cleaner runs) and hands the figures to the
//! [`StoreObserver`] given in [`LogConfig::observer`](super::LogConfig); it
//! knows nothing of metrics libraries or process-wide registries.
//!
//! Invariants: callbacks run on the store's writer, cleaner or caller
//! threads, in the middle of the write path, so an implementation must be
//! cheap (a few atomics), must not block, and must not call back into the
//! log. Must not: fail — a callback has no way to report an error.

use std::sync::Arc;
use std::time::Duration;

/// Receives the store's statistics. Every method has a no-op default.
pub trait StoreObserver: Send + Sync + 'static {
    /// A redb write transaction committed with `appended` records in it,
    /// `elapsed` from its start to the end of its commit; `durable` when it
    /// was fsynced.
    fn commit(&self, appended: u64, elapsed: Duration, durable: bool) {
        let _ = (appended, elapsed, durable);
    }

    /// The commit call of a durable redb transaction took `elapsed`.
    fn durable_commit(&self, elapsed: Duration) {
        let _ = elapsed;
    }

    /// One journal frame of `records` records and `bytes` bytes was written
    /// in `elapsed`, including its `fdatasync` when `synced`.
    fn journal_write(&self, records: u64, bytes: u64, elapsed: Duration, synced: bool) {
        let _ = (records, bytes, elapsed, synced);
    }

    /// Appends went over to the log's other journal file, while a
    /// checkpoint of the frames in the first one runs in the background.
    fn journal_switched(&self) {}

    /// A journal `fdatasync` took `elapsed`.
    fn journal_sync(&self, elapsed: Duration) {
        let _ = elapsed;
    }

    /// One append completed (queued, journaled and, under `always`, synced)
    /// in `elapsed`.
    fn append(&self, elapsed: Duration) {
        let _ = elapsed;
    }

    /// A retention pass removed `removed` records.
    fn retention(&self, removed: u64) {
        let _ = removed;
    }

    /// A compaction pass removed `removed` records.
    fn compaction(&self, removed: u64) {
        let _ = removed;
    }
}

/// Observer that ignores everything (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl StoreObserver for NoopObserver {}

/// A shared observer, as carried in a log configuration. Two handles always
/// compare equal: observers are not configuration values.
#[derive(Clone)]
pub struct Observer(pub Arc<dyn StoreObserver>);

impl Observer {
    /// Wraps an observer.
    pub fn new(o: impl StoreObserver) -> Self {
        Observer(Arc::new(o))
    }
}

impl Default for Observer {
    fn default() -> Self {
        Observer(Arc::new(NoopObserver))
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

impl PartialEq for Observer {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Observer {}

impl std::ops::Deref for Observer {
    type Target = dyn StoreObserver;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}
