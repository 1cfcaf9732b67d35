//! Criterion micro-benchmarks of the partition log: record codec, group
//! commit append (both sync policies), batched reads and time lookups.
//! End-to-end load with the disk baseline is `liftbridge bench store`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use liftbridge::store::codec::{self, RecordRef};
use liftbridge::store::{LogConfig, NewRecord, PartitionLog, SyncPolicy};

fn record(size: usize, ts: i64) -> NewRecord {
    NewRecord {
        timestamp_ns: ts,
        key: Some(Bytes::from_static(b"key-1")),
        headers: vec![("h".into(), Bytes::from_static(b"v"))],
        value: Bytes::from(vec![b'x'; size]),
        subject: "bench.subject".into(),
        reply: None,
    }
}

fn codec_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("codec");
    for size in [128usize, 1024] {
        let r = record(size, 1);
        let rr = RecordRef::from_new(&r, 3);
        let len = codec::encoded_len(&rr);
        let mut buf = vec![0u8; len];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::new("encode", size), &size, |b, _| {
            b.iter(|| codec::encode_into(&rr, &mut buf))
        });
        let enc = Bytes::from(codec::encode(&rr).expect("small record encodes"));
        g.bench_with_input(BenchmarkId::new("decode", size), &size, |b, _| {
            b.iter(|| codec::decode(7, enc.clone()).expect("valid record"))
        });
    }
    g.finish();
}

fn append_bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut g = c.benchmark_group("append");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    for (name, sync) in [
        ("interval", SyncPolicy::Interval(Duration::from_millis(100))),
        ("always", SyncPolicy::Always),
    ] {
        for batch in [1usize, 100, 1000] {
            let log = PartitionLog::open(
                dir.path(),
                &format!("a-{name}-{batch}"),
                LogConfig {
                    sync,
                    ..Default::default()
                },
            )
            .expect("open");
            g.throughput(Throughput::Elements(batch as u64));
            g.bench_function(BenchmarkId::new(format!("128B-{name}"), batch), |b| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let start = Instant::now();
                        for i in 0..iters {
                            let recs = (0..batch).map(|_| record(128, i as i64)).collect();
                            log.append(0, recs).await.expect("append");
                        }
                        start.elapsed()
                    })
                })
            });
            rt.block_on(log.close()).expect("close");
        }
    }
    g.finish();
}

fn read_bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = PartitionLog::open(
        dir.path(),
        "r",
        LogConfig {
            sync: SyncPolicy::Interval(Duration::from_secs(1)),
            ..Default::default()
        },
    )
    .expect("open");
    let n = 100_000u64;
    rt.block_on(async {
        for start in (0..n).step_by(1000) {
            let recs = (start..start + 1000)
                .map(|i| record(128, i as i64))
                .collect();
            log.append(0, recs).await.expect("append");
        }
    });
    let mut g = c.benchmark_group("read");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1000));
    let mut from = 0u64;
    g.bench_function("1000x128B", |b| {
        b.iter(|| {
            let recs = rt.block_on(log.read(from, 1000, usize::MAX)).expect("read");
            from = (from + 1000) % n;
            recs
        })
    });
    g.throughput(Throughput::Elements(1));
    let mut ts = 0i64;
    g.bench_function("offset_for_timestamp", |b| {
        b.iter(|| {
            ts = (ts + 7919) % n as i64;
            rt.block_on(log.offset_for_timestamp(ts)).expect("lookup")
        })
    });
    g.finish();
}

criterion_group!(benches, codec_bench, append_bench, read_bench);
criterion_main!(benches);
