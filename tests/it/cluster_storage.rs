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
        let dir = tempfile::tempdir().map_err(|e| StorageError::from(StorageIOError::write(&e)))?;
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
