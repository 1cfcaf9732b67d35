//! Metadata through Raft: commands, watch, linearizable existence checks,
//! restarts, snapshots with log purge.

use std::time::Duration;

use liftbridge::cluster::{
    ApplyError, MetaCommand, MetaError, MetaResponse, Metadata, MetadataOptions, NodeInfo,
    StreamConfig,
};

fn node(id: &str) -> NodeInfo {
    NodeInfo {
        id: id.into(),
        host: "127.0.0.1".into(),
        port: 9292,
        nats_addr: "127.0.0.1:4222".into(),
        http_addr: String::new(),
    }
}

fn create(name: &str, partitions: i32) -> MetaCommand {
    MetaCommand::CreateStream {
        name: name.into(),
        subject: format!("subj.{name}"),
        group: String::new(),
        replication_factor: 1,
        partitions,
        config: StreamConfig {
            retention_max_age_ms: Some(60_000),
            ..Default::default()
        },
        creation_timestamp_ns: 1_700_000_000_000_000_000,
    }
}

#[tokio::test]
async fn cluster_commands_through_raft() {
    let dir = tempfile::tempdir().unwrap();
    let md = Metadata::open(dir.path(), node("s1"), true).await.unwrap();
    assert!(md.is_leader());
    assert_eq!(md.leader_id().as_deref(), Some("s1"));
    assert_eq!(md.state().brokers.get("s1"), Some(&node("s1")));

    let mut watch = md.watch();
    watch.borrow_and_update();
    assert_eq!(md.propose(create("a", 3)).await.unwrap(), MetaResponse::Ok);
    assert!(watch.has_changed().unwrap());
    let seen = watch.borrow_and_update().clone();
    let a = seen.stream("a").expect("watch sees the new stream");
    assert_eq!(a.partitions.len(), 3);
    assert_eq!(a.partitions[2].leader, "s1");
    assert_eq!(a.partitions[2].isr, vec!["s1".to_string()]);
    assert_eq!(a.config.retention_max_age_ms, Some(60_000));

    assert_eq!(
        md.propose(create("a", 1)).await.unwrap(),
        MetaResponse::Rejected(ApplyError::AlreadyExists { name: "a".into() })
    );

    let r = md
        .propose(MetaCommand::PauseStream {
            name: "a".into(),
            partitions: vec![1],
            resume_all: true,
            timestamp_ns: 10,
        })
        .await
        .unwrap();
    assert_eq!(r, MetaResponse::Ok);
    let st = md.state();
    let a = st.stream("a").unwrap();
    assert!(a.partitions[1].paused && a.partitions[1].resume_all);
    assert!(!a.partitions[0].paused);
    assert_eq!(a.partitions[1].pause_timestamps.first_ns, 10);

    md.propose(MetaCommand::ResumeStream {
        name: "a".into(),
        partitions: vec![],
    })
    .await
    .unwrap()
    .into_result()
    .unwrap();
    assert!(md
        .state()
        .stream("a")
        .unwrap()
        .partitions
        .iter()
        .all(|p| !p.paused));

    md.propose(MetaCommand::SetStreamReadonly {
        name: "a".into(),
        partitions: vec![0, 2],
        readonly: true,
        timestamp_ns: 20,
    })
    .await
    .unwrap()
    .into_result()
    .unwrap();
    let ro: Vec<bool> = md
        .state()
        .stream("a")
        .unwrap()
        .partitions
        .iter()
        .map(|p| p.readonly)
        .collect();
    assert_eq!(ro, [true, false, true]);

    assert_eq!(
        md.propose(MetaCommand::PauseStream {
            name: "a".into(),
            partitions: vec![5],
            resume_all: false,
            timestamp_ns: 30,
        })
        .await
        .unwrap(),
        MetaResponse::Rejected(ApplyError::PartitionNotFound {
            name: "a".into(),
            partition: 5
        })
    );

    assert_eq!(
        md.propose(MetaCommand::DeleteStream { name: "a".into() })
            .await
            .unwrap(),
        MetaResponse::Ok
    );
    assert!(md.state().stream("a").is_none());
    assert_eq!(
        md.propose(MetaCommand::DeleteStream { name: "a".into() })
            .await
            .unwrap(),
        MetaResponse::Rejected(ApplyError::StreamNotFound { name: "a".into() })
    );
    md.shutdown().await.unwrap();
}

#[tokio::test]
async fn cluster_concurrent_creates_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let md = Metadata::open(dir.path(), node("s1"), true).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let md = md.clone();
        tasks.push(tokio::spawn(
            async move { md.propose(create("race", 1)).await },
        ));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap().unwrap() {
            MetaResponse::Ok => ok += 1,
            MetaResponse::Rejected(ApplyError::AlreadyExists { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(ok, 1);
    md.shutdown().await.unwrap();
}

#[tokio::test]
async fn cluster_restart_keeps_streams_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        // Empty id: a random server id is generated and persisted.
        let md = Metadata::open(dir.path(), node(""), true).await.unwrap();
        assert_eq!(md.node().id.len(), 22);
        md.propose(create("a", 2))
            .await
            .unwrap()
            .into_result()
            .unwrap();
        md.propose(create("b", 1))
            .await
            .unwrap()
            .into_result()
            .unwrap();
        md.propose(MetaCommand::PauseStream {
            name: "a".into(),
            partitions: vec![0],
            resume_all: false,
            timestamp_ns: 5,
        })
        .await
        .unwrap()
        .into_result()
        .unwrap();
        md.propose(MetaCommand::SetStreamReadonly {
            name: "b".into(),
            partitions: vec![],
            readonly: true,
            timestamp_ns: 6,
        })
        .await
        .unwrap()
        .into_result()
        .unwrap();
        let st = md.state();
        let id = md.node().id.clone();
        md.shutdown().await.unwrap();
        // A clone that outlives the shutdown must not keep the directory locked.
        (st, id, md.clone())
    };
    let md = Metadata::open(dir.path(), node(""), true).await.unwrap();
    let stale = before.2;
    assert!(
        stale.propose(create("zz", 1)).await.is_err(),
        "a shut down handle cannot write"
    );
    assert_eq!(md.node().id, before.1, "server id is reused");
    assert!(md.is_leader());
    let st = md.state();
    assert_eq!(st.streams, before.0.streams);
    assert!(st.stream("a").unwrap().partitions[0].paused);
    assert!(st.stream("b").unwrap().partitions[0].readonly);
    // Still writable after the restart.
    assert_eq!(
        md.propose(create("a", 1)).await.unwrap(),
        MetaResponse::Rejected(ApplyError::AlreadyExists { name: "a".into() })
    );
    md.propose(create("c", 1))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    md.shutdown().await.unwrap();
}

#[tokio::test]
async fn cluster_snapshot_purge_restart() {
    let dir = tempfile::tempdir().unwrap();
    let opts = MetadataOptions {
        snapshot_threshold: 1_000_000,
        ..Default::default()
    };
    let expected = {
        let md = Metadata::open_with(dir.path(), node("s1"), true, opts.clone())
            .await
            .unwrap();
        for i in 0..20 {
            md.propose(create(&format!("s{i}"), 1))
                .await
                .unwrap()
                .into_result()
                .unwrap();
        }
        let covered = md.compact().await.unwrap();
        assert!(covered >= 20, "snapshot covers the creates ({covered})");
        let m = md.raft().metrics().borrow().clone();
        assert_eq!(m.purged.map(|p| p.index), Some(covered));
        // Entries after the snapshot must be replayed from the log.
        md.propose(MetaCommand::DeleteStream { name: "s3".into() })
            .await
            .unwrap()
            .into_result()
            .unwrap();
        md.propose(create("late", 2))
            .await
            .unwrap()
            .into_result()
            .unwrap();
        let st = md.state();
        md.shutdown().await.unwrap();
        st
    };
    let md = Metadata::open_with(dir.path(), node("s1"), true, opts)
        .await
        .unwrap();
    let st = md.state();
    assert_eq!(st.streams, expected.streams);
    assert!(st.stream("s3").is_none());
    assert_eq!(st.stream("late").unwrap().partitions.len(), 2);
    assert_eq!(st.streams.len(), 20);
    md.shutdown().await.unwrap();
}

#[tokio::test]
async fn cluster_without_bootstrap_has_no_leader() {
    let dir = tempfile::tempdir().unwrap();
    let opts = MetadataOptions {
        leader_wait: Duration::from_millis(300),
        ..Default::default()
    };
    let md = Metadata::open_with(dir.path(), node("s1"), false, opts)
        .await
        .unwrap();
    assert!(!md.is_leader());
    let err = md.propose(create("a", 1)).await.unwrap_err();
    assert!(matches!(err, MetaError::NoLeader), "{err:?}");
    assert_eq!(err.to_string(), "no known metadata leader");
    md.shutdown().await.unwrap();
}

#[tokio::test]
async fn cluster_internal_streams_created_once() {
    use liftbridge::cluster::internal::{ensure_internal_streams, ACTIVITY_STREAM, CURSORS_STREAM};
    use liftbridge::config::liftbridge::{from_yaml_str, LiftbridgeConfig};

    let dir = tempfile::tempdir().unwrap();
    let md = Metadata::open(dir.path(), node("s1"), true).await.unwrap();
    // Defaults: neither stream is enabled.
    let created = ensure_internal_streams(&md, &LiftbridgeConfig::default())
        .await
        .unwrap();
    assert!(created.is_empty());

    let cfg = from_yaml_str(
        "clustering.namespace: ns1\ncursors:\n  stream.partitions: 2\nactivity.stream.enabled: true\n",
        std::path::Path::new("t.yaml"),
    )
    .unwrap();
    let mut created = ensure_internal_streams(&md, &cfg).await.unwrap();
    created.sort();
    assert_eq!(created, [ACTIVITY_STREAM, CURSORS_STREAM]);
    let st = md.state();
    let cursors = st.stream(CURSORS_STREAM).unwrap();
    assert_eq!(cursors.subject, "ns1.cursors");
    assert_eq!(cursors.partitions.len(), 2);
    assert_eq!(cursors.config.compact_enabled, Some(true));
    assert_eq!(cursors.config.auto_pause_time_ms, Some(60_000));
    assert_eq!(cursors.config.auto_pause_disable_if_subscribers, Some(true));
    assert_eq!(st.stream(ACTIVITY_STREAM).unwrap().subject, "ns1.activity");
    // Idempotent.
    assert!(ensure_internal_streams(&md, &cfg).await.unwrap().is_empty());
    // propose_ok turns a rejection into an error.
    let err = md
        .propose_ok(MetaCommand::DeleteStream {
            name: "nope".into(),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, MetaError::Rejected(ApplyError::StreamNotFound { .. })),
        "{err:?}"
    );
    md.shutdown().await.unwrap();
}

#[tokio::test]
async fn cluster_restart_with_new_server_id_and_ports() {
    let dir = tempfile::tempdir().unwrap();
    {
        let md = Metadata::open(dir.path(), node("first"), true)
            .await
            .unwrap();
        md.propose_ok(create("a", 2)).await.unwrap();
        md.shutdown().await.unwrap();
    }
    let mut renamed = node("second");
    renamed.port = 19999;
    let md = Metadata::open(dir.path(), renamed.clone(), true)
        .await
        .unwrap();
    assert!(md.is_leader());
    assert_eq!(md.node().id, "second");
    assert_eq!(
        md.leader_id().as_deref(),
        Some("second"),
        "membership carries the new identity"
    );
    let st = md.state();
    assert_eq!(st.brokers.keys().collect::<Vec<_>>(), ["second"]);
    assert_eq!(st.brokers["second"].port, 19999);
    for p in &st.stream("a").unwrap().partitions {
        assert_eq!(p.leader, "second");
        assert_eq!(p.isr, ["second"]);
    }
    md.shutdown().await.unwrap();
    // And the rename itself survives another restart (empty id = the stored one).
    let md = Metadata::open(dir.path(), node(""), true).await.unwrap();
    assert_eq!(md.node().id, "second");
    assert_eq!(
        md.state().stream("a").unwrap().partitions[0].leader,
        "second"
    );
    md.shutdown().await.unwrap();
}

#[tokio::test]
async fn cluster_consumer_groups_through_raft_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let md = Metadata::open(dir.path(), node("s1"), true).await.unwrap();
        md.propose_ok(create("a", 2)).await.unwrap();
        md.propose_ok(MetaCommand::JoinConsumerGroup {
            group_id: "g".into(),
            consumer_id: "c1".into(),
            streams: vec!["a".into()],
            coordinator: "s1".into(),
        })
        .await
        .unwrap();
        let err = md
            .propose_ok(MetaCommand::LeaveConsumerGroup {
                group_id: "g".into(),
                consumer_id: "zz".into(),
                expired: true,
            })
            .await
            .unwrap_err();
        assert!(
            matches!(err, MetaError::Rejected(ApplyError::NotMember { .. })),
            "{err:?}"
        );
        md.shutdown().await.unwrap();
    }
    let md = Metadata::open(dir.path(), node("s1"), true).await.unwrap();
    let st = md.state();
    let g = st.group("g").expect("group survives the restart");
    assert_eq!((g.coordinator.as_str(), g.epoch), ("s1", 0));
    assert_eq!(g.assignments(&st)["c1"]["a"], vec![0, 1]);
    md.shutdown().await.unwrap();
}
