//! Property test: random sequences of append / read / truncate / retention /
//! compaction / time lookup / reopen give exactly the answers of an in-memory
//! model of the log.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use liftbridge::store::{LogConfig, NewRecord, PartitionLog, RetentionPolicy, SyncPolicy};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Append {
        bump_epoch: bool,
        recs: Vec<(i64, Option<u8>, usize)>,
    },
    Read {
        from: u64,
        max_records: usize,
        max_bytes: usize,
    },
    /// Truncate to a point between the oldest record and the end, chosen by
    /// this fraction.
    Truncate(f64),
    RetainMessages(u64),
    RetainBytes(u64),
    RetainAge(i64),
    Compact(Option<u64>),
    TimeLookup(i64),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), proptest::collection::vec((0i64..300, proptest::option::of(0u8..4), 0usize..40), 1..8))
            .prop_map(|(b, recs)| Op::Append { bump_epoch: b, recs }),
        2 => (0u64..60, 1usize..20, 1usize..600)
            .prop_map(|(from, max_records, max_bytes)| Op::Read { from, max_records, max_bytes }),
        1 => (0.0f64..1.0).prop_map(Op::Truncate),
        1 => (0u64..30).prop_map(Op::RetainMessages),
        1 => (0u64..3000).prop_map(Op::RetainBytes),
        1 => (0i64..300).prop_map(Op::RetainAge),
        1 => proptest::option::of(0u64..60).prop_map(Op::Compact),
        2 => (-5i64..320).prop_map(Op::TimeLookup),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Default)]
struct Model {
    present: BTreeMap<u64, (NewRecord, u64)>,
    /// Running maximum timestamp of every offset still in the history
    /// (present or removed by retention/compaction, not truncated).
    rmax: BTreeMap<u64, i64>,
    leo: u64,
    epochs: Vec<(u64, u64)>,
}

impl Model {
    fn size(r: &NewRecord) -> u64 {
        r.encoded_len() as u64
    }
    fn bytes(&self) -> u64 {
        self.present.values().map(|(r, _)| Self::size(r)).sum()
    }
    fn append(&mut self, epoch: u64, recs: &[NewRecord]) {
        if self.epochs.last().is_none_or(|&(e, _)| epoch > e) {
            self.epochs.push((epoch, self.leo));
        }
        for r in recs {
            let prev = self.rmax.values().next_back().copied();
            let m = prev.map_or(r.timestamp_ns, |p| p.max(r.timestamp_ns));
            self.rmax.insert(self.leo, m);
            self.present.insert(self.leo, (r.clone(), epoch));
            self.leo += 1;
        }
    }
    fn truncate(&mut self, to: u64) {
        if to >= self.leo {
            return;
        }
        self.present.retain(|&o, _| o < to);
        self.rmax.retain(|&o, _| o < to);
        self.epochs.retain(|&(_, s)| s < to);
        self.leo = to;
    }
    fn remove_below(&mut self, cut: u64) {
        self.present.retain(|&o, _| o >= cut);
    }
    fn time_lookup(&self, ts: i64) -> Option<u64> {
        self.present
            .keys()
            .copied()
            .find(|o| self.rmax.get(o).is_some_and(|&m| m >= ts))
    }
    fn compact(&mut self, limit: u64) {
        let mut latest: HashMap<Bytes, u64> = HashMap::new();
        for (&o, (r, _)) in self.present.range(..limit) {
            if let Some(k) = &r.key {
                latest.insert(k.clone(), o);
            }
        }
        self.present.retain(|&o, (r, _)| {
            o >= limit
                || match &r.key {
                    Some(k) => latest.get(k) == Some(&o),
                    None => true,
                }
        });
    }
}

fn cfg() -> LogConfig {
    LogConfig {
        // Durable commits are covered by the crash tests; here they would
        // only slow the search down. Close still commits durably.
        sync: SyncPolicy::Interval(Duration::from_secs(3600)),
        ..Default::default()
    }
}

fn open(dir: &Path) -> PartitionLog {
    PartitionLog::open(dir, "model", cfg()).expect("open")
}

async fn check_state(log: &PartitionLog, m: &Model) {
    assert_eq!(log.log_end_offset(), m.leo, "leo");
    assert_eq!(
        log.oldest_offset(),
        m.present.keys().next().copied(),
        "oldest"
    );
    assert_eq!(
        log.newest_offset(),
        m.present.keys().next_back().copied(),
        "newest"
    );
    assert_eq!(log.record_count(), m.present.len() as u64, "count");
    assert_eq!(log.record_bytes(), m.bytes(), "bytes");
    assert_eq!(log.leader_epochs(), m.epochs, "epochs");
    let all = log.read(0, usize::MAX, usize::MAX).await.unwrap();
    let got: Vec<u64> = all.iter().map(|r| r.offset).collect();
    let want: Vec<u64> = m.present.keys().copied().collect();
    assert_eq!(got, want, "offsets present");
    for r in &all {
        let (w, epoch) = &m.present[&r.offset];
        assert_eq!(r.value, w.value);
        assert_eq!(r.key, w.key);
        assert_eq!(r.timestamp_ns, w.timestamp_ns);
        assert_eq!(r.leader_epoch, *epoch);
    }
}

async fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    let mut m = Model::default();
    let mut seq = 0u64;
    // The replication limit set by the last compaction (reopen clears it):
    // retention and compaction stop below it.
    let mut limit_set = u64::MAX;
    for op in ops {
        match op {
            Op::Append { bump_epoch, recs } => {
                let epoch = m.epochs.last().map_or(0, |e| e.0) + u64::from(bump_epoch);
                let recs: Vec<NewRecord> = recs
                    .into_iter()
                    .map(|(ts, key, len)| {
                        seq += 1;
                        NewRecord {
                            timestamp_ns: ts,
                            key: key.map(|k| Bytes::from(vec![k])),
                            headers: vec![],
                            value: Bytes::from(vec![(seq % 251) as u8; len]),
                            subject: "s".into(),
                            reply: None,
                        }
                    })
                    .collect();
                let res = log.append(epoch, recs.clone()).await.unwrap();
                assert_eq!(res.first_offset, m.leo);
                m.append(epoch, &recs);
                assert_eq!(res.last_offset + 1, m.leo);
            }
            Op::Read {
                from,
                max_records,
                max_bytes,
            } => {
                let got = log.read(from, max_records, max_bytes).await.unwrap();
                let mut want = Vec::new();
                let mut used = 0u64;
                for (&o, (r, _)) in m.present.range(from..) {
                    let s = Model::size(r);
                    if !want.is_empty() && used + s > max_bytes as u64 {
                        break;
                    }
                    used += s;
                    want.push(o);
                    if want.len() >= max_records {
                        break;
                    }
                }
                let got: Vec<u64> = got.iter().map(|r| r.offset).collect();
                assert_eq!(got, want, "read({from}, {max_records}, {max_bytes})");
            }
            Op::Truncate(f) => {
                // Replication truncates above the oldest record.
                let low = m.present.keys().next().map_or(m.leo, |o| o + 1);
                let to = low + ((m.leo.saturating_sub(low)) as f64 * f) as u64;
                log.truncate(to).await.unwrap();
                m.truncate(to);
            }
            Op::RetainMessages(n) => {
                log.update_config(LogConfig {
                    retention: RetentionPolicy {
                        max_messages: Some(n),
                        ..Default::default()
                    },
                    ..cfg()
                });
                log.enforce_retention().await.unwrap();
                let excess = (m.present.len() as u64).saturating_sub(n) as usize;
                let cut = m.present.keys().nth(excess).copied().unwrap_or(m.leo);
                m.remove_below(cut.min(limit_set));
            }
            Op::RetainBytes(b) => {
                log.update_config(LogConfig {
                    retention: RetentionPolicy {
                        max_bytes: Some(b),
                        ..Default::default()
                    },
                    ..cfg()
                });
                log.enforce_retention().await.unwrap();
                let need = m.bytes().saturating_sub(b);
                let mut removed = 0;
                let mut cut = m.leo;
                for (&o, (r, _)) in &m.present {
                    if removed >= need {
                        cut = o;
                        break;
                    }
                    removed += Model::size(r);
                }
                m.remove_below(cut.min(limit_set));
            }
            Op::RetainAge(limit) => {
                log.update_config(LogConfig {
                    retention: RetentionPolicy {
                        max_age: Some(Duration::from_secs(1)),
                        ..Default::default()
                    },
                    ..cfg()
                });
                log.enforce_retention_at(limit + 1_000_000_000)
                    .await
                    .unwrap();
                let cut = m.time_lookup(limit).unwrap_or(m.leo);
                m.remove_below(cut.min(limit_set));
            }
            Op::Compact(limit) => {
                let limit = limit.unwrap_or(u64::MAX);
                log.set_compaction_limit(limit);
                limit_set = limit;
                log.compact().await.unwrap();
                m.compact(limit.min(m.leo));
            }
            Op::TimeLookup(ts) => {
                let got = log.offset_for_timestamp(ts).await.unwrap();
                assert_eq!(got, m.time_lookup(ts), "offset_for_timestamp({ts})");
            }
            Op::Reopen => {
                log.close().await.unwrap();
                drop(log);
                let d = dir.path().to_owned();
                log = tokio::task::spawn_blocking(move || open(&d)).await.unwrap();
                limit_set = u64::MAX;
            }
        }
        check_state(&log, &m).await;
    }
    log.close().await.unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn store_model_random_operation_sequences(ops in proptest::collection::vec(op(), 1..30)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run(ops));
    }
}
