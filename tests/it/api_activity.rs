//! The activity stream (`activity.stream.enabled`): one
//! `ActivityStreamEvent` per committed stream or group change on
//! `__activity`, read back with a Subscribe and decoded.

use std::time::Duration;

use futures::StreamExt;
use liftbridge::api::proto::{self, ActivityStreamOp as Op};
use liftbridge::service::activity::ActivityOptions;
use prost::Message as _;

use super::api_common::{client, config, create, publish_acked, start, Client};

fn options() -> ActivityOptions {
    ActivityOptions {
        publish_timeout: Duration::from_secs(5),
        ack_policy: liftbridge::wire::AckPolicy::All,
        subject: "liftbridge-default.activity".into(),
    }
}

/// Reads every event on `__activity` until `pred` holds for the list read
/// so far (failing after 20 s).
async fn events_until(
    c: &mut Client,
    pred: impl Fn(&[proto::ActivityStreamEvent]) -> bool,
) -> Vec<proto::ActivityStreamEvent> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // The stream is created by the metadata leader shortly after start.
    let mut s = loop {
        match c
            .subscribe(super::api_common::from_earliest("__activity", 0))
            .await
        {
            Ok(s) => break s.into_inner(),
            Err(st) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no __activity: {st:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let mut out = Vec::new();
    while !pred(&out) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let m = tokio::time::timeout(left, s.next())
            .await
            .unwrap_or_else(|_| panic!("events so far: {out:#?}"))
            .expect("stream open")
            .expect("message ok");
        if m == proto::Message::default() {
            continue; // the handshake
        }
        out.push(proto::ActivityStreamEvent::decode(m.value).expect("an ActivityStreamEvent"));
    }
    out
}

fn ops(events: &[proto::ActivityStreamEvent]) -> Vec<Op> {
    events
        .iter()
        .map(|e| Op::try_from(e.op).expect("known op"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_activity_events_for_every_committed_change() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.activity = Some(options());
    let node = start(cfg.clone()).await;
    let mut c = client(&node).await;

    create(&mut c, "foo", "foo", 2).await;
    c.pause_stream(proto::PauseStreamRequest {
        name: "foo".into(),
        partitions: vec![0],
        resume_all: true,
    })
    .await
    .unwrap();
    // A publish to the paused partition resumes it.
    publish_acked(&mut c, "foo", 0, b"", b"wake up").await;
    c.set_stream_readonly(proto::SetStreamReadonlyRequest {
        name: "foo".into(),
        partitions: vec![1],
        readonly: true,
    })
    .await
    .unwrap();
    c.join_consumer_group(proto::JoinConsumerGroupRequest {
        group_id: "g".into(),
        consumer_id: "c1".into(),
        streams: vec!["foo".into()],
    })
    .await
    .unwrap();
    c.leave_consumer_group(proto::LeaveConsumerGroupRequest {
        group_id: "g".into(),
        consumer_id: "c1".into(),
    })
    .await
    .unwrap();
    c.delete_stream(proto::DeleteStreamRequest { name: "foo".into() })
        .await
        .unwrap();

    let events = events_until(&mut c, |e| {
        e.last().is_some_and(|l| l.op == Op::DeleteStream as i32)
    })
    .await;
    // Ids are Raft indexes: strictly increasing.
    assert!(events.windows(2).all(|w| w[0].id < w[1].id), "{events:#?}");
    // The stream's own creation comes first.
    let first = events[0].create_stream_op.as_ref().expect("create op");
    assert_eq!(first.stream, "__activity");
    let ours: Vec<_> = events[1..].to_vec();
    assert_eq!(
        ops(&ours),
        vec![
            Op::CreateStream,
            Op::PauseStream,
            Op::ResumeStream,
            Op::SetStreamReadonly,
            Op::JoinConsumerGroup,
            Op::LeaveConsumerGroup,
            Op::DeleteStream
        ],
        "{ours:#?}"
    );
    let cr = ours[0].create_stream_op.as_ref().unwrap();
    assert_eq!(
        (cr.stream.as_str(), cr.partitions.clone()),
        ("foo", vec![0, 1])
    );
    let p = ours[1].pause_stream_op.as_ref().unwrap();
    assert_eq!(
        (p.stream.as_str(), p.partitions.clone(), p.resume_all),
        ("foo", vec![0], true)
    );
    let r = ours[2].resume_stream_op.as_ref().unwrap();
    assert_eq!(r.stream, "foo");
    let ro = ours[3].set_stream_readonly_op.as_ref().unwrap();
    assert_eq!((ro.partitions.clone(), ro.readonly), (vec![1], true));
    let j = ours[4].join_consumer_group_op.as_ref().unwrap();
    assert_eq!(
        (
            j.group_id.as_str(),
            j.consumer_id.as_str(),
            j.streams.clone()
        ),
        ("g", "c1", vec!["foo".to_string()])
    );
    let l = ours[5].leave_consumer_group_op.as_ref().unwrap();
    assert_eq!((l.consumer_id.as_str(), l.expired), ("c1", false));
    assert_eq!(ours[6].delete_stream_op.as_ref().unwrap().stream, "foo");
    node.shutdown().await;

    // After a restart the leader resumes after the newest event: the next
    // change is published once, nothing earlier again.
    let last_id = events.last().unwrap().id;
    let n = events.len();
    let node = start(cfg).await;
    let mut c = client(&node).await;
    create(&mut c, "bar", "bar", 1).await;
    let again = events_until(&mut c, |e| {
        e.iter().any(|x| {
            x.create_stream_op
                .as_ref()
                .is_some_and(|o| o.stream == "bar")
        })
    })
    .await;
    assert_eq!(again.len(), n + 1, "{again:#?}");
    assert!(again[n].id > last_id);
    node.shutdown().await;
}

#[test]
fn api_activity_config_keys() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("lb.yaml");
    std::fs::write(
        &yaml,
        "activity.stream.enabled: true\nactivity.stream.publish.timeout: 2s\n\
         activity.stream.publish.ack.policy: leader\nclustering.namespace: ns1\n",
    )
    .unwrap();
    let flags = liftbridge::config::liftbridge::LiftbridgeFlags {
        config: Some(yaml),
        ..Default::default()
    };
    let c = liftbridge::config::liftbridge::load_with_env(&flags, |_| None).unwrap();
    assert_eq!(liftbridge::config::audit::audit(&c).map(|_| ()), Ok(()));
    let n = liftbridge::node::NodeConfig::from_liftbridge(&c).unwrap();
    let a = n.activity.expect("activity on");
    assert_eq!(a.publish_timeout, Duration::from_secs(2));
    assert_eq!(a.ack_policy, liftbridge::wire::AckPolicy::Leader);
    assert_eq!(a.subject, "ns1.activity");
}
