//! openraft's own storage test suite against the redb log store and the
//! metadata state machine.

use liftbridge::cluster::store::{LogStore, RaftDb, StateMachine};
use liftbridge::cluster::TypeConfig;
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use openraft::StorageIOError;

struct RedbBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for RedbBuilder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<u64>> {
        let dir = scratch_dir().map_err(|e| StorageError::from(StorageIOError::write(&e)))?;
        let db = RaftDb::open(dir.path())
            .await
            .map_err(|e| StorageError::from(StorageIOError::write(&e)))?;
        let sm = StateMachine::open(db.clone())
            .await
            .map_err(|e| StorageError::from(StorageIOError::write(&e)))?;
        Ok((dir, LogStore::new(db), sm))
    }
}

/// Runs every test of `openraft::testing::Suite` (log, vote, purge,
/// truncate, apply, snapshot transfer). The suite makes its own runtimes, so
/// this is a plain test.
#[test]
fn cluster_openraft_storage_suite() {
    Suite::test_all(RedbBuilder).expect("openraft storage suite");
}

/// A temporary directory on tmpfs when there is one: the suite checks the
/// logic of the store, and fsync on a shared disk would make it slow.
fn scratch_dir() -> std::io::Result<tempfile::TempDir> {
    tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir())
}
