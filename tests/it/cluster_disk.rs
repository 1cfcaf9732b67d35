//! Bad disk states give errors, never panics.

use liftbridge::cluster::{MetaCommand, MetaError, Metadata, NodeInfo};

fn node() -> NodeInfo {
    NodeInfo {
        id: "s1".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn cluster_garbage_database_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("raft")).unwrap();
    std::fs::write(dir.path().join("raft/raft.redb"), vec![0xA5u8; 64 * 1024]).unwrap();
    let err = Metadata::open(dir.path(), node(), true)
        .await
        .err()
        .expect("garbage must not open");
    assert!(matches!(err, MetaError::Store(_)), "{err:?}");
}

#[tokio::test]
async fn cluster_corrupt_stored_values_are_errors() {
    let meta: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("raft_meta");
    for key in ["snapshot", "vote", "identity"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let md = Metadata::open(dir.path(), node(), true).await.unwrap();
            md.propose_ok(MetaCommand::DeleteStream { name: "x".into() })
                .await
                .unwrap_err();
            md.compact().await.unwrap();
            md.shutdown().await.unwrap();
        }
        let path = dir.path().join("raft/raft.redb");
        tokio::task::spawn_blocking(move || {
            let db = redb::Database::create(&path).unwrap();
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(meta).unwrap();
                t.insert(key, b"{not json".as_slice()).unwrap();
            }
            tx.commit().unwrap();
        })
        .await
        .unwrap();
        let res = Metadata::open(dir.path(), node(), true).await;
        assert!(res.is_err(), "corrupt {key} must be reported");
    }
}
