//! Stream lifecycle: validation and error codes, pause / auto-pause /
//! resume, readonly, deletion while subscribed, retention and compaction
//! seen through Subscribe, cursors.

use std::time::Duration;

use liftbridge::api::proto;

use crate::api_common::*;

fn create_req(name: &str, subject: &str) -> proto::CreateStreamRequest {
    proto::CreateStreamRequest {
        subject: subject.into(),
        name: name.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_error_codes() {
    use tonic::Code;
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "s", "s", 1).await;

    let code = |r: Result<tonic::Response<proto::CreateStreamResponse>, tonic::Status>| {
        r.unwrap_err().code()
    };
    assert_eq!(
        code(c.create_stream(create_req("s", "s")).await),
        Code::AlreadyExists
    );
    assert_eq!(
        code(c.create_stream(create_req("", "x")).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.create_stream(create_req("x", "")).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.create_stream(create_req("x", "a..b")).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.create_stream(create_req("x", "a b")).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.create_stream(create_req("__cursors", "x")).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.create_stream(create_req("__activity", "x")).await),
        Code::InvalidArgument
    );
    let mut r = create_req("x", "x");
    r.replication_factor = 2;
    assert_eq!(
        code(c.create_stream(r).await),
        Code::InvalidArgument,
        "RF above cluster size"
    );
    let mut r = create_req("x", "x");
    r.replication_factor = -2;
    assert_eq!(code(c.create_stream(r).await), Code::InvalidArgument);
    let mut r = create_req("x", "x");
    r.partitions = -1;
    assert_eq!(code(c.create_stream(r).await), Code::InvalidArgument);
    let mut r = create_req("x", "x");
    r.encryption = Some(proto::NullableBool { value: true });
    assert_eq!(code(c.create_stream(r).await), Code::FailedPrecondition);
    // RF -1 (all servers) is fine on one node.
    let mut r = create_req("all", "all");
    r.replication_factor = -1;
    c.create_stream(r).await.unwrap();

    let e = c
        .delete_stream(proto::DeleteStreamRequest {
            name: "ghost".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .delete_stream(proto::DeleteStreamRequest {
            name: "__cursors".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = c
        .pause_stream(proto::PauseStreamRequest {
            name: "ghost".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .set_stream_readonly(proto::SetStreamReadonlyRequest {
            name: "ghost".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .subscribe(proto::SubscribeRequest {
            stream: "s".into(),
            partition: 7,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::NotFound, "No such partition")
    );
    let e = c
        .fetch_partition_metadata(proto::FetchPartitionMetadataRequest {
            stream: "ghost".into(),
            partition: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .publish(proto::PublishRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "no stream");
    let e = c
        .publish(proto::PublishRequest {
            stream: "ghost".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .publish(proto::PublishRequest {
            stream: "s".into(),
            partition: 3,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .set_cursor(proto::SetCursorRequest {
            stream: "s".into(),
            cursor_id: "c".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::Internal, "Cursors stream does not exist")
    );
    let e = c
        .set_cursor(proto::SetCursorRequest {
            stream: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    // Deadline exceeded: a partition whose leader records nothing never
    // acks. A readonly partition rejects before publishing, so use a
    // subject no partition records through PublishToSubject.
    let mut r = tonic::Request::new(proto::PublishToSubjectRequest {
        subject: "nobody.listens".into(),
        ack_policy: proto::AckPolicy::Leader as i32,
        ..Default::default()
    });
    r.set_timeout(Duration::from_millis(200));
    assert_eq!(
        c.publish_to_subject(r).await.unwrap_err().code(),
        Code::DeadlineExceeded
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_pause_resume_and_auto_pause() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "pz", "pz", 2).await;
    let nc = async_nats::connect(node.nats_addr().to_string())
        .await
        .unwrap();

    c.pause_stream(proto::PauseStreamRequest {
        name: "pz".into(),
        partitions: vec![],
        resume_all: true,
    })
    .await
    .unwrap();
    let pm = |c: &mut Client| {
        let mut c = c.clone();
        async move {
            c.fetch_metadata(proto::FetchMetadataRequest {
                streams: vec!["pz".into()],
                groups: vec![],
            })
            .await
            .unwrap()
            .into_inner()
            .stream_metadata
            .remove(0)
        }
    };
    let md = pm(&mut c).await;
    assert!(md.partitions[&0].paused && md.partitions[&1].paused);
    assert!(md.partitions[&0].pause_timestamps.unwrap().latest_timestamp > 0);

    // Plain NATS publishes to a paused partition are not recorded.
    nc.publish("pz", "lost".into()).await.unwrap();
    nc.flush().await.unwrap();

    // Subscribing without resume fails; with resume it works.
    let e = c.subscribe(from_earliest("pz", 0)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);

    // A gRPC publish to partition 1 resumes everything (resumeAll).
    assert_eq!(publish_acked(&mut c, "pz", 1, b"", b"kept").await.offset, 0);
    let md = pm(&mut c).await;
    assert!(!md.partitions[&0].paused && !md.partitions[&1].paused);
    let mut s = subscribe(&mut c, from_earliest("pz", 0)).await;
    nc.publish("pz", "after".into()).await.unwrap();
    nc.flush().await.unwrap();
    let m = &take(&mut s, 1).await[0];
    assert_eq!(
        (m.offset, &m.value[..]),
        (0, &b"after"[..]),
        "the paused-time publish was not recorded"
    );

    // Pause only partition 0 (no resumeAll), resume by Subscribe(resume=true).
    drop(s);
    c.pause_stream(proto::PauseStreamRequest {
        name: "pz".into(),
        partitions: vec![0],
        resume_all: false,
    })
    .await
    .unwrap();
    let md = pm(&mut c).await;
    assert!(md.partitions[&0].paused && !md.partitions[&1].paused);
    let mut r = from_earliest("pz", 0);
    r.resume = true;
    let mut s = subscribe(&mut c, r).await;
    assert_eq!(take(&mut s, 1).await[0].value, &b"after"[..]);

    // Auto-pause after 300 ms without messages.
    let mut r = create_req("auto", "auto");
    r.auto_pause_time = Some(proto::NullableInt64 { value: 300 });
    c.create_stream(r).await.unwrap();
    publish_acked(&mut c, "auto", 0, b"", b"x").await;
    eventually("auto-pause", || {
        let mut c = c.clone();
        async move {
            c.fetch_metadata(proto::FetchMetadataRequest {
                streams: vec!["auto".into()],
                groups: vec![],
            })
            .await
            .unwrap()
            .into_inner()
            .stream_metadata[0]
                .partitions[&0]
                .paused
        }
    })
    .await;
    // Publishing resumes it, and the data is still there.
    assert_eq!(publish_acked(&mut c, "auto", 0, b"", b"y").await.offset, 1);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_readonly_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "ro", "ro", 1).await;
    for i in 0..3 {
        publish_acked(&mut c, "ro", 0, b"", format!("v{i}").as_bytes()).await;
    }
    // A live subscriber at the end is told when the partition turns readonly.
    let mut live = subscribe(&mut c, from_earliest("ro", 0)).await;
    take(&mut live, 3).await;
    c.set_stream_readonly(proto::SetStreamReadonlyRequest {
        name: "ro".into(),
        partitions: vec![],
        readonly: true,
    })
    .await
    .unwrap();
    let st = end_status(&mut live).await;
    assert_eq!(
        (st.code(), st.message()),
        (tonic::Code::ResourceExhausted, "End of readonly partition")
    );

    let mut s = subscribe(&mut c, from_earliest("ro", 0)).await;
    assert_eq!(take(&mut s, 3).await[2].value, &b"v2"[..]);
    assert_eq!(
        end_status(&mut s).await.code(),
        tonic::Code::ResourceExhausted
    );

    let mut r = tonic::Request::new(proto::PublishRequest {
        stream: "ro".into(),
        value: b"no".to_vec().into(),
        ..Default::default()
    });
    r.set_timeout(Duration::from_secs(2));
    assert_eq!(
        c.publish(r).await.unwrap_err().code(),
        tonic::Code::FailedPrecondition
    );
    let resp = c
        .publish_async(futures::stream::iter(vec![proto::PublishRequest {
            stream: "ro".into(),
            correlation_id: "r".into(),
            ..Default::default()
        }]))
        .await
        .unwrap()
        .into_inner();
    let all: Vec<_> = futures::StreamExt::collect::<Vec<_>>(resp).await;
    let e = all[0].as_ref().unwrap().async_error.clone().unwrap();
    assert_eq!(e.code, proto::publish_async_error::Code::Readonly as i32);

    let md = partition_metadata(&mut c, "ro", 0).await;
    assert!(md.readonly);
    assert!(md.readonly_timestamps.unwrap().first_timestamp > 0);

    // Back to writable.
    c.set_stream_readonly(proto::SetStreamReadonlyRequest {
        name: "ro".into(),
        partitions: vec![],
        readonly: false,
    })
    .await
    .unwrap();
    assert_eq!(publish_acked(&mut c, "ro", 0, b"", b"v3").await.offset, 3);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_delete_while_subscribed_frees_data() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "del", "del", 1).await;
    publish_acked(&mut c, "del", 0, b"", b"x").await;
    let stream_dir = dir.path().join("streams").join("del");
    assert!(stream_dir.exists());
    let mut s = subscribe(&mut c, from_earliest("del", 0)).await;
    take(&mut s, 1).await;
    c.delete_stream(proto::DeleteStreamRequest { name: "del".into() })
        .await
        .unwrap();
    assert_eq!(end_status(&mut s).await.code(), tonic::Code::NotFound);
    eventually("stream files removed", || {
        let p = stream_dir.clone();
        async move { !p.exists() }
    })
    .await;
    // The name can be reused; the new stream starts empty.
    create(&mut c, "del", "del", 1).await;
    assert_eq!(publish_acked(&mut c, "del", 0, b"", b"y").await.offset, 0);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_retention_and_compaction_visible_through_subscribe() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    let mut r = create_req("ret", "ret");
    r.retention_max_messages = Some(proto::NullableInt64 { value: 5 });
    r.cleaner_interval = Some(proto::NullableInt64 { value: 50 });
    c.create_stream(r).await.unwrap();
    let mut r = create_req("cmp", "cmp");
    r.compact_enabled = Some(proto::NullableBool { value: true });
    r.cleaner_interval = Some(proto::NullableInt64 { value: 50 });
    c.create_stream(r).await.unwrap();

    for i in 0..20 {
        publish_acked(&mut c, "ret", 0, b"", format!("v{i}").as_bytes()).await;
    }
    for (k, v) in [("a", "1"), ("b", "1"), ("a", "2"), ("b", "2"), ("a", "3")] {
        publish_acked(&mut c, "cmp", 0, k.as_bytes(), v.as_bytes()).await;
    }
    eventually("retention", || {
        let mut c = c.clone();
        async move {
            let mut s = subscribe(&mut c, from_earliest("ret", 0)).await;
            take(&mut s, 1).await[0].offset == 15
        }
    })
    .await;
    eventually("compaction", || {
        let mut c = c.clone();
        async move {
            let mut r = from_earliest("cmp", 0);
            r.stop_position = proto::StopPosition::StopLatest as i32;
            let mut s = subscribe(&mut c, r).await;
            let mut got = Vec::new();
            while let Some(Ok(m)) = futures::StreamExt::next(&mut s).await {
                got.push((
                    String::from_utf8(m.key.to_vec()).unwrap(),
                    String::from_utf8(m.value.to_vec()).unwrap(),
                ));
            }
            got == vec![
                ("b".to_string(), "2".to_string()),
                ("a".to_string(), "3".to_string()),
            ]
        }
    })
    .await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_cursors_set_fetch_and_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.cursor_partitions = 1;
    let node = start(cfg.clone()).await;
    let mut c = client(&node).await;
    create(&mut c, "s", "s", 1).await;
    let fetch = |c: &mut Client, id: &str| {
        let mut c = c.clone();
        let id = id.to_string();
        async move {
            c.fetch_cursor(proto::FetchCursorRequest {
                stream: "s".into(),
                partition: 0,
                cursor_id: id,
            })
            .await
            .unwrap()
            .into_inner()
            .offset
        }
    };
    assert_eq!(fetch(&mut c, "c1").await, -1);
    for off in [3, 7] {
        c.set_cursor(proto::SetCursorRequest {
            stream: "s".into(),
            partition: 0,
            cursor_id: "c1".into(),
            offset: off,
        })
        .await
        .unwrap();
    }
    assert_eq!(fetch(&mut c, "c1").await, 7);
    let md = c
        .fetch_metadata(proto::FetchMetadataRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(
        md.stream_metadata.iter().any(|s| s.name == "__cursors"),
        "internal stream listed"
    );
    drop(c);
    node.shutdown().await;

    let node = start(cfg).await;
    let mut c = client(&node).await;
    assert_eq!(
        fetch(&mut c, "c1").await,
        7,
        "read back from the cursors stream"
    );
    assert_eq!(fetch(&mut c, "c2").await, -1);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_consumer_groups_join_assign_fence_evict() {
    use tonic::Code;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    // Long enough that c1, which asks every 600 ms, stays a member on a
    // loaded machine; c2 stays silent for 1.2 s.
    cfg.consumer_timeout = Duration::from_millis(1000);
    let node = start(cfg).await;
    let mut c = client(&node).await;
    create(&mut c, "g", "g", 2).await;
    publish_acked(&mut c, "g", 0, b"", b"p0").await;
    publish_acked(&mut c, "g", 1, b"", b"p1").await;

    let join = |id: &str| proto::JoinConsumerGroupRequest {
        group_id: "grp".into(),
        consumer_id: id.into(),
        streams: vec!["g".into()],
    };
    let fetch = |id: &str, epoch: u64| proto::FetchConsumerGroupAssignmentsRequest {
        group_id: "grp".into(),
        consumer_id: id.into(),
        epoch,
    };
    let j1 = c
        .join_consumer_group(join("c1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(j1.coordinator, node.server_id());
    assert_eq!(j1.consumer_timeout, 1_000_000_000, "nanoseconds");
    // As Liftbridge (server/metadata.go JoinConsumerGroup): the join that
    // creates a group answers epoch 0, and the assignments come at 0.
    assert_eq!(j1.epoch, 0, "a new group starts at epoch 0");
    let a = c
        .fetch_consumer_group_assignments(fetch("c1", j1.epoch))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.assignments[0].partitions, vec![0, 1]);
    assert_eq!(a.epoch, 0);

    let j2 = c
        .join_consumer_group(join("c2"))
        .await
        .unwrap()
        .into_inner();
    assert!(j2.epoch > j1.epoch);
    let e = c
        .fetch_consumer_group_assignments(fetch("c1", j1.epoch))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "stale epoch");
    let a1 = c
        .fetch_consumer_group_assignments(fetch("c1", j2.epoch))
        .await
        .unwrap()
        .into_inner();
    // c2's last sign of life is no earlier than this.
    let c2_seen_after = std::time::Instant::now();
    let a2 = c
        .fetch_consumer_group_assignments(fetch("c2", j2.epoch))
        .await
        .unwrap()
        .into_inner();
    let (p1, p2) = (
        a1.assignments[0].partitions.clone(),
        a2.assignments[0].partitions.clone(),
    );
    assert_eq!((p1.len(), p2.len()), (1, 1));
    assert_ne!(p1, p2);

    // A member reads its own partition, not the other one.
    let sub = |id: &str, p: i32, epoch: u64| {
        let mut r = from_earliest("g", p);
        r.consumer = Some(proto::Consumer {
            group_id: "grp".into(),
            group_epoch: epoch,
            consumer_id: id.into(),
        });
        r
    };
    let mut s = subscribe(&mut c, sub("c1", p1[0], j2.epoch)).await;
    assert_eq!(
        take(&mut s, 1).await[0].value,
        format!("p{}", p1[0]).into_bytes()
    );
    // As in Liftbridge, Subscribe checks no assignment; a member of the
    // same group already subscribed with a newer epoch fences: c2 under
    // the older epoch is refused on c1's partition.
    let e = c.subscribe(sub("c2", p1[0], j1.epoch)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);

    let md = c
        .fetch_metadata(proto::FetchMetadataRequest {
            streams: vec![],
            groups: vec!["grp".into(), "nope".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(md.group_metadata[0].epoch, j2.epoch);
    assert_eq!(md.group_metadata[0].coordinator, node.server_id());
    assert_eq!(
        md.group_metadata[1].error,
        proto::consumer_group_metadata::Error::UnknownGroup as i32
    );

    // c2 goes silent: evicted after the consumer timeout, never before it;
    // c1 keeps fetching (so stays) and then gets everything. Polled: the
    // eviction is a metadata command, committed when the loaded machine
    // gets to it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let e = loop {
        match c
            .fetch_consumer_group_assignments(fetch("c1", j2.epoch))
            .await
        {
            Ok(_) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "c2 not evicted within 30 s"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => break e,
        }
    };
    assert_eq!(
        e.code(),
        Code::FailedPrecondition,
        "epoch moved by the eviction"
    );
    assert!(
        c2_seen_after.elapsed() >= Duration::from_millis(1000),
        "evicted before its timeout: {:?}",
        c2_seen_after.elapsed()
    );
    let epoch = c
        .fetch_metadata(proto::FetchMetadataRequest {
            streams: vec![],
            groups: vec!["grp".into()],
        })
        .await
        .unwrap()
        .into_inner()
        .group_metadata[0]
        .epoch;
    let a = c
        .fetch_consumer_group_assignments(fetch("c1", epoch))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.assignments[0].partitions, vec![0, 1]);
    let e = c
        .fetch_consumer_group_assignments(fetch("c2", epoch))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "evicted member");

    c.leave_consumer_group(proto::LeaveConsumerGroupRequest {
        group_id: "grp".into(),
        consumer_id: "c1".into(),
    })
    .await
    .unwrap();
    let e = c
        .fetch_consumer_group_assignments(fetch("c1", epoch))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "empty group is gone");
    let e = c
        .join_consumer_group(proto::JoinConsumerGroupRequest {
            group_id: "grp".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_auto_pause_waits_for_subscribers_to_leave() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    let mut r = create_req("subs", "subs");
    r.auto_pause_time = Some(proto::NullableInt64 { value: 200 });
    r.auto_pause_disable_if_subscribers = Some(proto::NullableBool { value: true });
    c.create_stream(r).await.unwrap();
    let paused = |c: &Client| {
        let mut c = c.clone();
        async move {
            c.fetch_metadata(proto::FetchMetadataRequest {
                streams: vec!["subs".into()],
                groups: vec![],
            })
            .await
            .unwrap()
            .into_inner()
            .stream_metadata[0]
                .partitions[&0]
                .paused
        }
    };
    let s = subscribe(&mut c, from_earliest("subs", 0)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !paused(&c).await,
        "a subscribed partition is not auto-paused"
    );
    drop(s);
    eventually("auto-pause once the subscriber left", || paused(&c)).await;
    node.shutdown().await;
}

/// A graceful stop ends an open PublishAsync session at once: the client
/// gets the acks it was owed, then UNAVAILABLE "server shutting down", and
/// the node does not wait out the gRPC port's 2 s grace for the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_a_stop_ends_open_publish_async_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "open", "open", 1).await;
    let (tx, rx) = tokio::sync::mpsc::channel::<proto::PublishRequest>(8);
    let mut responses = c
        .publish_async(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("publish_async")
        .into_inner();
    for i in 0..3 {
        tx.send(proto::PublishRequest {
            stream: "open".into(),
            value: format!("m{i}").into_bytes().into(),
            correlation_id: format!("m{i}"),
            ack_policy: proto::AckPolicy::Leader as i32,
            expected_offset: -1,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    for i in 0..3 {
        let r = tokio::time::timeout(Duration::from_secs(5), responses.message())
            .await
            .expect("ack in time")
            .expect("stream open")
            .expect("a response");
        assert_eq!(r.ack.expect("an ack").offset, i);
    }

    // The client keeps its request stream open.
    let t0 = std::time::Instant::now();
    node.shutdown().await;
    let stopped = t0.elapsed();
    let end = tokio::time::timeout(Duration::from_secs(5), responses.message())
        .await
        .expect("the stream ends with the node");
    let st = end.expect_err("the session ends with a status");
    assert_eq!(st.code(), tonic::Code::Unavailable, "{st:?}");
    assert!(st.message().contains("shutting down"), "{st:?}");
    assert!(
        stopped < Duration::from_millis(1500),
        "the node took {stopped:?} to stop with a session open"
    );
    drop(tx);
}
