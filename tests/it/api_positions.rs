//! Subscribe start and stop positions, and the statuses that end streams.

use std::time::Duration;

use liftbridge::api::proto::{self, StartPosition as Start, StopPosition as Stop};

use crate::api_common::*;

fn req(start: Start) -> proto::SubscribeRequest {
    proto::SubscribeRequest {
        stream: "p".into(),
        start_position: start as i32,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_start_positions() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "p", "p", 1).await;
    let mut acks = Vec::new();
    for i in 0..10 {
        acks.push(publish_acked(&mut c, "p", 0, b"", format!("v{i}").as_bytes()).await);
        if i == 4 {
            // A gap so that a timestamp falls between messages 4 and 5.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    let mut s = subscribe(&mut c, req(Start::Earliest)).await;
    assert_eq!(take(&mut s, 1).await[0].offset, 0);

    let mut s = subscribe(&mut c, req(Start::Latest)).await;
    assert_eq!(take(&mut s, 1).await[0].offset, 9);

    let mut r = req(Start::Offset);
    r.start_offset = 6;
    let mut s = subscribe(&mut c, r).await;
    assert_eq!(take(&mut s, 1).await[0].offset, 6);

    let mut r = req(Start::Timestamp);
    r.start_timestamp = acks[4].reception_timestamp + 1;
    let mut s = subscribe(&mut c, r).await;
    let m = &take(&mut s, 1).await[0];
    assert_eq!(m.offset, 5, "first message at or after the timestamp");

    // NEW_ONLY sees only what comes after the subscription.
    let mut s = subscribe(&mut c, req(Start::NewOnly)).await;
    publish_acked(&mut c, "p", 0, b"", b"new").await;
    let m = &take(&mut s, 1).await[0];
    assert_eq!((m.offset, &m.value[..]), (10, &b"new"[..]));

    // Many concurrent subscribers all get the live message.
    let mut subs = Vec::new();
    for _ in 0..8 {
        subs.push(subscribe(&mut c, req(Start::NewOnly)).await);
    }
    publish_acked(&mut c, "p", 0, b"", b"fanout").await;
    for s in &mut subs {
        assert_eq!(take(s, 1).await[0].offset, 11);
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_stop_positions() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(config(dir.path())).await;
    let mut c = client(&node).await;
    create(&mut c, "p", "p", 1).await;

    // Empty stream with STOP_LATEST.
    let mut r = req(Start::Earliest);
    r.stop_position = Stop::StopLatest as i32;
    let e = c
        .subscribe(r.clone())
        .await
        .err()
        .map(|s| (s.code(), s.message().to_string()));
    let e = match e {
        Some(e) => e,
        None => {
            let mut s = c.subscribe(r).await.unwrap().into_inner();
            let st = end_status(&mut s).await;
            (st.code(), st.message().to_string())
        }
    };
    assert_eq!(
        e,
        (
            tonic::Code::ResourceExhausted,
            "Stream is empty".to_string()
        )
    );

    let mut acks = Vec::new();
    for i in 0..10 {
        acks.push(publish_acked(&mut c, "p", 0, b"", format!("v{i}").as_bytes()).await);
    }

    let mut r = req(Start::Earliest);
    r.stop_position = Stop::StopOffset as i32;
    r.stop_offset = 3;
    let mut s = subscribe(&mut c, r).await;
    let got = take(&mut s, 4).await;
    assert_eq!(got.last().unwrap().offset, 3);
    let st = end_status(&mut s).await;
    assert_eq!(
        (st.code(), st.message()),
        (tonic::Code::ResourceExhausted, "Stop offset reached")
    );

    let mut r = req(Start::Offset);
    r.start_offset = 8;
    r.stop_position = Stop::StopLatest as i32;
    let mut s = subscribe(&mut c, r).await;
    assert_eq!(take(&mut s, 2).await[1].offset, 9);
    assert_eq!(
        end_status(&mut s).await.code(),
        tonic::Code::ResourceExhausted
    );

    let mut r = req(Start::Earliest);
    r.stop_position = Stop::StopTimestamp as i32;
    r.stop_timestamp = acks[5].reception_timestamp;
    let mut s = subscribe(&mut c, r).await;
    let got = take(&mut s, 6).await;
    assert_eq!(got[5].offset, 5);
    let st = end_status(&mut s).await;
    assert_eq!(st.message(), "Stop offset reached");

    // Stop before start.
    let mut r = req(Start::Offset);
    r.start_offset = 5;
    r.stop_position = Stop::StopOffset as i32;
    r.stop_offset = 2;
    assert_eq!(
        c.subscribe(r).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );

    // Reverse: newest to oldest.
    let mut r = req(Start::Latest);
    r.reverse = true;
    let mut s = subscribe(&mut c, r).await;
    let got = take(&mut s, 10).await;
    assert_eq!(
        got.iter().map(|m| m.offset).collect::<Vec<_>>(),
        (0..10).rev().collect::<Vec<_>>()
    );
    node.shutdown().await;
}
