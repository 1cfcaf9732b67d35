//! Sublist micro-benchmark: cached and uncached matches over a trie with
//! many literal and wildcard subscriptions, insert/remove churn, and the
//! literal-subject check that precedes every match.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use liftbridge::nats::sublist::Sublist;

fn populated() -> Sublist<u32> {
    let sl = Sublist::new();
    let mut id = 0;
    for a in 0..20 {
        for b in 0..50 {
            id += 1;
            sl.insert(&format!("svc.{a}.item.{b}"), None, Arc::new(id))
                .expect("valid");
        }
        id += 1;
        sl.insert(&format!("svc.{a}.*.>"), None, Arc::new(id))
            .expect("valid");
        id += 1;
        sl.insert(&format!("svc.{a}.item.*"), Some("workers"), Arc::new(id))
            .expect("valid");
    }
    sl.insert(">", None, Arc::new(0)).expect("valid");
    sl
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("nats_sublist");
    let sl = populated();
    let subjects: Vec<String> = (0..64)
        .map(|i| format!("svc.{}.item.{}", i % 20, i % 50))
        .collect();
    g.throughput(Throughput::Elements(subjects.len() as u64));
    g.bench_function("match_cached", |b| {
        b.iter(|| {
            subjects
                .iter()
                .map(|s| sl.match_subject(s).psubs.len())
                .sum::<usize>()
        })
    });
    let many: Vec<String> = (0..4096)
        .map(|i| format!("svc.{}.item.x{i}", i % 20))
        .collect();
    g.throughput(Throughput::Elements(many.len() as u64));
    g.bench_function("match_uncached", |b| {
        b.iter(|| {
            many.iter()
                .map(|s| sl.match_subject(s).psubs.len())
                .sum::<usize>()
        })
    });
    // What every publish and every ack pays before the match: the subject
    // (here an ack inbox of the shape the service uses) checked as literal.
    let inboxes: Vec<String> = (0..64)
        .map(|i| format!("_lb.ack.Wm3kq8ZxTQ4uB2aL9dVf1c.{}", 1_000_000 + i))
        .collect();
    g.throughput(Throughput::Elements(inboxes.len() as u64));
    g.bench_function("literal_subject_check", |b| {
        b.iter(|| {
            inboxes
                .iter()
                .filter(|s| liftbridge::nats::subject::is_valid_literal_subject(s))
                .count()
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("insert_remove", |b| {
        let item = Arc::new(99u32);
        b.iter(|| {
            sl.insert("svc.3.item.new", None, item.clone())
                .expect("valid");
            sl.remove("svc.3.item.new", None, &item)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
