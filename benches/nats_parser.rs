//! Parser micro-benchmark: a read buffer full of 128-byte PUB frames, and
//! MSG encoding, as the hot path sees them.

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use liftbridge::nats::proto::{encode_msg, ClientOp, Parsed, Parser};

fn frames(n: usize, size: usize) -> Vec<u8> {
    let payload = vec![b'x'; size];
    let mut v = Vec::new();
    for i in 0..n {
        v.extend_from_slice(format!("PUB bench.subject.{} reply.to {size}\r\n", i % 8).as_bytes());
        v.extend_from_slice(&payload);
        v.extend_from_slice(b"\r\n");
    }
    v
}

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("nats_parser");
    for size in [16usize, 128, 1024] {
        let input = frames(1000, size);
        g.throughput(Throughput::Elements(1000));
        g.bench_with_input(BenchmarkId::new("pub_frames", size), &input, |b, input| {
            b.iter(|| {
                let mut p = Parser::new(4096, 1024 * 1024);
                let mut buf = BytesMut::from(&input[..]);
                let mut n = 0;
                while let Ok(Parsed::Op(op)) = p.parse(&mut buf) {
                    if let ClientOp::Pub { payload, .. } = op {
                        n += payload.len();
                    }
                }
                n
            })
        });
    }
    g.throughput(Throughput::Elements(1000));
    g.bench_function("encode_msg_128", |b| {
        let payload = vec![b'x'; 128];
        let mut out = BytesMut::with_capacity(1 << 20);
        b.iter(|| {
            out.clear();
            for _ in 0..1000 {
                encode_msg(
                    &mut out,
                    b"bench.subject.1",
                    b"17",
                    Some(b"reply.to"),
                    &payload,
                );
            }
            out.len()
        })
    });
    g.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
