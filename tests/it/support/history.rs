//! A history of publishes and a checker of replicated logs against it.
//!
//! **Recording.** [`History`] hands every publish attempt a unique payload
//! (never re-sent: a publish that timed out may still be committed later,
//! so a retry would make duplicates undetectable) and records when it was
//! sent, its ack (offset) or its error. [`Load`] runs several concurrent
//! publishers, each through a chosen node's Publish RPC with AckPolicy ALL,
//! moving on to another node when its node cannot be reached.
//!
//! **Checking.** [`check`] compares the history with every replica's log,
//! read offline from its data dir ([`read_replica`]) after the nodes are
//! stopped, and finds:
//! - an acknowledged message missing (lost ack) or present more than once;
//! - an acknowledged message stored at another offset than its ack said,
//!   acknowledged messages stored out of their acknowledged order, or a
//!   message stored before one whose ack the publisher had already received
//!   when it sent it (real-time order);
//! - a hole: offsets of a replica's log not dense from its first record;
//! - a leader epoch lower than the one of the record before it;
//! - ISR replicas whose logs differ in any (offset, leader epoch, value);
//! - an unacknowledged message present more than once, or a record whose
//!   payload no publisher sent.
//!
//! It counts attempts, acks, errors and unacknowledged messages present.
//!
//! Must not: treat a timed-out publish as lost or as committed (both are
//! allowed), or re-send a payload.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use liftbridge::api::proto::{self, api_client::ApiClient};
use liftbridge::store::{LogConfig, PartitionLog};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// What became of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Still waiting (or the publisher stopped first): unacknowledged.
    Pending,
    /// Acknowledged at this offset, at this time.
    Acked { offset: u64, at: Instant },
    /// The RPC failed or the ack carried an error: unacknowledged.
    Failed { error: String },
}

/// One publish attempt.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// Unique payload (`<run tag>-p<publisher>-<attempt>`).
    pub payload: Vec<u8>,
    /// The node whose Publish RPC it went through.
    pub via: String,
    /// When the RPC was sent.
    pub sent: Instant,
    pub outcome: Outcome,
}

/// The shared record of every attempt (append-only while publishers run).
#[derive(Default)]
pub struct History {
    attempts: Mutex<Vec<Attempt>>,
    tag: u64,
}

impl History {
    /// An empty history; payloads carry a random tag so that records of
    /// another run can never be mistaken for ours.
    pub fn new() -> Arc<History> {
        Arc::new(History {
            attempts: Mutex::new(Vec::new()),
            tag: rand::random(),
        })
    }

    /// Records a new attempt by `publisher` through `via`; returns its index
    /// and its (unique) payload.
    pub fn begin(&self, publisher: usize, via: &str) -> (usize, Vec<u8>) {
        let mut a = self.attempts.lock();
        let id = a.len();
        let payload = format!("{:016x}-p{publisher}-{id}", self.tag).into_bytes();
        a.push(Attempt {
            payload: payload.clone(),
            via: via.into(),
            sent: Instant::now(),
            outcome: Outcome::Pending,
        });
        (id, payload)
    }

    /// Attempt `id` was acknowledged at `offset`.
    pub fn ack(&self, id: usize, offset: u64) {
        self.attempts.lock()[id].outcome = Outcome::Acked {
            offset,
            at: Instant::now(),
        };
    }

    /// Attempt `id` failed with `error`.
    pub fn fail(&self, id: usize, error: String) {
        self.attempts.lock()[id].outcome = Outcome::Failed { error };
    }

    /// A copy of every attempt so far.
    pub fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().clone()
    }

    /// Number of acknowledged attempts so far.
    pub fn acked(&self) -> usize {
        self.attempts
            .lock()
            .iter()
            .filter(|a| matches!(a.outcome, Outcome::Acked { .. }))
            .count()
    }

    /// The first ack of a message sent after `t`, with the node it went
    /// through: after a leader died at `t`, such a message can only have
    /// been committed by a new leader (failover measurements).
    pub fn first_ack_sent_after(&self, t: Instant) -> Option<(Instant, String)> {
        self.first_ack_after(t, t)
    }

    /// The first ack received after `acked_after` of a message sent after
    /// `sent_after`: with `acked_after` the moment a gracefully stopped
    /// leader was gone, what it acked while stopping does not count.
    pub fn first_ack_after(
        &self,
        sent_after: Instant,
        acked_after: Instant,
    ) -> Option<(Instant, String)> {
        self.attempts
            .lock()
            .iter()
            .filter(|a| a.sent > sent_after)
            .filter_map(|a| match a.outcome {
                Outcome::Acked { at, .. } if at > acked_after => Some((at, a.via.clone())),
                _ => None,
            })
            .min_by_key(|(at, _)| *at)
    }

    /// Acknowledged attempts sent through `via` after `from` and acked
    /// before `to` (what an isolated node must not produce).
    pub fn acked_via_between(&self, via: &str, from: Instant, to: Instant) -> Vec<Attempt> {
        self.attempts
            .lock()
            .iter()
            .filter(|a| a.via == via && a.sent > from)
            .filter(|a| matches!(a.outcome, Outcome::Acked { at, .. } if at < to))
            .cloned()
            .collect()
    }
}

/// One stored record as the checker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub offset: u64,
    pub leader_epoch: u64,
    pub value: Vec<u8>,
}

/// One replica's log.
#[derive(Debug, Clone)]
pub struct ReplicaLog {
    /// Server id.
    pub node: String,
    /// Whether the replica was in the ISR at the end.
    pub in_isr: bool,
    pub records: Vec<Stored>,
}

/// Reads a replica's whole log offline (the node must be stopped). A
/// replica without a partition directory has an empty log.
pub async fn read_replica(partition_dir: &Path) -> Vec<Stored> {
    if !partition_dir.join("log.redb").exists() {
        return Vec::new();
    }
    let log = PartitionLog::open_existing(partition_dir, "log", LogConfig::default())
        .unwrap_or_else(|e| panic!("open {}: {e}", partition_dir.display()));
    let mut out = Vec::new();
    let mut next = log.oldest_offset().unwrap_or(0);
    while next < log.log_end_offset() {
        let batch = log
            .read(next, 1000, 16 << 20)
            .await
            .unwrap_or_else(|e| panic!("read {}: {e}", partition_dir.display()));
        let Some(last) = batch.last() else { break };
        next = last.offset + 1;
        out.extend(batch.into_iter().map(|r| Stored {
            offset: r.offset,
            leader_epoch: r.leader_epoch,
            value: r.value.to_vec(),
        }));
    }
    log.close()
        .await
        .unwrap_or_else(|e| panic!("close {}: {e}", partition_dir.display()));
    out
}

/// A broken promise found by [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// An acknowledged message is in no position of the reference log.
    LostAck { payload: String, acked_offset: u64 },
    /// A message (acknowledged or not) is stored more than once.
    Duplicate {
        payload: String,
        acked: bool,
        offsets: Vec<u64>,
    },
    /// An acknowledged message is stored at another offset than acked.
    OffsetMismatch {
        payload: String,
        acked_offset: u64,
        stored_offset: u64,
    },
    /// Acknowledged messages stored out of acknowledged order.
    Reorder {
        first: String,
        first_offset: u64,
        second: String,
        second_offset: u64,
    },
    /// A message was stored before one already acknowledged when it was
    /// sent.
    RealTimeOrder {
        acked_before: String,
        acked_offset: u64,
        later: String,
        later_offset: u64,
    },
    /// Offsets not dense in one replica's log.
    Hole {
        node: String,
        after: Option<u64>,
        next: u64,
    },
    /// Two ISR replicas differ.
    Divergent {
        node: String,
        reference: String,
        detail: String,
    },
    /// A record's leader epoch is lower than the one before it (epochs
    /// only grow along a log).
    EpochRegress {
        node: String,
        offset: u64,
        epoch: u64,
        previous: u64,
    },
    /// A record whose payload was never sent.
    Unknown { node: String, offset: u64 },
    /// No replica was in the ISR, so nothing could be checked.
    NoIsrReplica,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// Counts of one check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub attempted: usize,
    pub acked: usize,
    pub errors: usize,
    /// Neither acked nor failed when the history was taken.
    pub pending: usize,
    /// Unacknowledged (failed or pending) but stored once.
    pub unacked_present: usize,
    /// Records in the reference (ISR) log.
    pub stored: usize,
}

/// The result of [`check`].
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub counts: Counts,
    pub violations: Vec<Violation>,
}

impl Report {
    /// Panics with every violation (and the counts) unless there is none.
    pub fn assert_ok(&self, what: &str) {
        if self.violations.is_empty() {
            return;
        }
        let shown: Vec<String> = self
            .violations
            .iter()
            .take(30)
            .map(ToString::to_string)
            .collect();
        panic!(
            "{what}: {} violation(s) (counts {:?}):\n{}",
            self.violations.len(),
            self.counts,
            shown.join("\n")
        );
    }
}

fn text(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

/// Checks `replicas` against `attempts` (see the module docs).
pub fn check(attempts: &[Attempt], replicas: &[ReplicaLog]) -> Report {
    let mut v = Vec::new();
    let mut counts = Counts {
        attempted: attempts.len(),
        ..Counts::default()
    };
    for a in attempts {
        match a.outcome {
            Outcome::Acked { .. } => counts.acked += 1,
            Outcome::Failed { .. } => counts.errors += 1,
            Outcome::Pending => counts.pending += 1,
        }
    }
    let sent: HashMap<&[u8], &Attempt> =
        attempts.iter().map(|a| (a.payload.as_slice(), a)).collect();

    // Every replica: dense offsets, growing epochs, only payloads that
    // were sent.
    for r in replicas {
        let mut prev: Option<u64> = None;
        let mut epoch = 0;
        for s in &r.records {
            if s.leader_epoch < epoch {
                v.push(Violation::EpochRegress {
                    node: r.node.clone(),
                    offset: s.offset,
                    epoch: s.leader_epoch,
                    previous: epoch,
                });
            }
            epoch = epoch.max(s.leader_epoch);
            let expected = prev.map_or(s.offset, |p| p + 1);
            if s.offset != expected || (prev.is_none() && s.offset != 0) {
                v.push(Violation::Hole {
                    node: r.node.clone(),
                    after: prev,
                    next: s.offset,
                });
            }
            if !sent.contains_key(s.value.as_slice()) {
                v.push(Violation::Unknown {
                    node: r.node.clone(),
                    offset: s.offset,
                });
            }
            prev = Some(s.offset);
        }
    }

    // ISR replicas are identical; the first is the reference.
    let isr: Vec<&ReplicaLog> = replicas.iter().filter(|r| r.in_isr).collect();
    let Some(reference) = isr.first() else {
        v.push(Violation::NoIsrReplica);
        return Report {
            counts,
            violations: v,
        };
    };
    for other in &isr[1..] {
        if let Some(detail) = first_difference(&reference.records, &other.records) {
            v.push(Violation::Divergent {
                node: other.node.clone(),
                reference: reference.node.clone(),
                detail,
            });
        }
    }
    counts.stored = reference.records.len();

    // Where each payload is stored in the reference.
    let mut stored_at: HashMap<&[u8], Vec<u64>> = HashMap::new();
    for s in &reference.records {
        stored_at
            .entry(s.value.as_slice())
            .or_default()
            .push(s.offset);
    }
    // Acked: once, at the acked offset. Unacked: at most once.
    let mut acked: Vec<(u64, &Attempt, u64)> = Vec::new();
    for a in attempts {
        let offsets = stored_at.get(a.payload.as_slice());
        let n = offsets.map_or(0, Vec::len);
        let is_acked = matches!(a.outcome, Outcome::Acked { .. });
        if n > 1 {
            v.push(Violation::Duplicate {
                payload: text(&a.payload),
                acked: is_acked,
                offsets: offsets.cloned().unwrap_or_default(),
            });
        }
        match a.outcome {
            Outcome::Acked { offset, .. } => match offsets.and_then(|o| o.first()) {
                None => v.push(Violation::LostAck {
                    payload: text(&a.payload),
                    acked_offset: offset,
                }),
                Some(&at) => {
                    if at != offset {
                        v.push(Violation::OffsetMismatch {
                            payload: text(&a.payload),
                            acked_offset: offset,
                            stored_offset: at,
                        });
                    }
                    acked.push((offset, a, at));
                }
            },
            _ => {
                if n >= 1 {
                    counts.unacked_present += 1;
                }
            }
        }
    }
    // In acknowledged order.
    acked.sort_by_key(|(offset, _, _)| *offset);
    for w in acked.windows(2) {
        let ((_, a, at_a), (_, b, at_b)) = (w[0], w[1]);
        if at_a >= at_b {
            v.push(Violation::Reorder {
                first: text(&a.payload),
                first_offset: at_a,
                second: text(&b.payload),
                second_offset: at_b,
            });
        }
    }
    // Real-time order: a message sent after another's ack was received is
    // stored after it. Sweep sends and acks in time order, keeping the
    // highest stored offset among the acks received so far.
    enum Ev<'a> {
        Ack(u64, &'a Attempt),
        Send(&'a Attempt),
    }
    let mut events: Vec<(Instant, u8, Ev)> = Vec::new();
    for (_, a, at) in &acked {
        if let Outcome::Acked { at: t, .. } = a.outcome {
            events.push((t, 0, Ev::Ack(*at, a)));
        }
    }
    for a in attempts {
        events.push((a.sent, 1, Ev::Send(a)));
    }
    // At equal instants an ack counts as received after the send.
    events.sort_by_key(|(t, k, _)| (*t, std::cmp::Reverse(*k)));
    let mut highest: Option<(u64, &Attempt)> = None;
    for (_, _, ev) in &events {
        match ev {
            Ev::Ack(at, a) => {
                if highest.is_none_or(|(h, _)| *at > h) {
                    highest = Some((*at, a));
                }
            }
            Ev::Send(a) => {
                let (Some((h, before)), Some(offs)) =
                    (highest, stored_at.get(a.payload.as_slice()))
                else {
                    continue;
                };
                if let Some(&at) = offs.first() {
                    if at <= h {
                        v.push(Violation::RealTimeOrder {
                            acked_before: text(&before.payload),
                            acked_offset: h,
                            later: text(&a.payload),
                            later_offset: at,
                        });
                    }
                }
            }
        }
    }
    Report {
        counts,
        violations: v,
    }
}

/// The first (offset, epoch, value) difference of two logs, if any.
fn first_difference(a: &[Stored], b: &[Stored]) -> Option<String> {
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return Some(format!(
                "at offset {}: (epoch {}, {:?}) vs (offset {}, epoch {}, {:?})",
                x.offset,
                x.leader_epoch,
                text(&x.value),
                y.offset,
                y.leader_epoch,
                text(&y.value)
            ));
        }
    }
    (a.len() != b.len()).then(|| format!("{} records vs {}", a.len(), b.len()))
}

/// How publishers behave.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub stream: String,
    pub partition: i32,
    /// Publisher tasks; publisher `i` starts on node `i % nodes`.
    pub publishers: usize,
    /// The RPC deadline, which is also the server's ack timeout.
    pub ack_timeout: Duration,
    /// A prober besides the publishers: every `probe_every` it sends one
    /// publish without waiting for the previous (to the nodes in turn, at
    /// most [`MAX_PROBES`] in flight), so that the first ack after a fault
    /// is seen within that period even while every publisher is stuck
    /// waiting out an ack timeout.
    pub probe_every: Option<Duration>,
}

/// Probes in flight at most; a probe due while that many wait is skipped.
pub const MAX_PROBES: usize = 64;

/// Concurrent publishers feeding a [`History`]; stop with [`Load::stop`].
pub struct Load {
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    pub history: Arc<History>,
}

/// (server id, gRPC `host:port`) of a node publishers may use.
pub type Target = (String, String);

impl Load {
    /// Starts `opts.publishers` publishers over `targets`.
    pub fn start(targets: Vec<Target>, opts: LoadOptions) -> Load {
        let history = History::new();
        let stop = CancellationToken::new();
        let targets = Arc::new(targets);
        let tasks = (0..opts.publishers)
            .map(|i| {
                tokio::spawn(publisher(
                    i,
                    targets.clone(),
                    opts.clone(),
                    history.clone(),
                    stop.clone(),
                ))
            })
            .collect::<Vec<_>>();
        let mut tasks = tasks;
        if let Some(every) = opts.probe_every {
            tasks.push(tokio::spawn(prober(
                opts.publishers,
                every,
                targets,
                opts,
                history.clone(),
                stop.clone(),
            )));
        }
        Load {
            stop,
            tasks,
            history,
        }
    }

    /// Stops every publisher (an RPC in flight finishes or times out first).
    pub async fn stop(self) -> Arc<History> {
        self.stop.cancel();
        for t in self.tasks {
            t.await.expect("publisher task");
        }
        self.history
    }
}

async fn connect(addr: &str) -> Option<ApiClient<Channel>> {
    let ch = Channel::from_shared(format!("http://{addr}"))
        .ok()?
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await
        .ok()?;
    Some(ApiClient::new(ch))
}

/// One publisher: one message at a time (each attempt a new payload),
/// through its current node; on a transport error it moves to the next
/// node.
async fn publisher(
    i: usize,
    targets: Arc<Vec<Target>>,
    opts: LoadOptions,
    history: Arc<History>,
    stop: CancellationToken,
) {
    let mut at = i % targets.len();
    let mut client: Option<ApiClient<Channel>> = None;
    while !stop.is_cancelled() {
        let (id, addr) = &targets[at];
        let c = match client.as_mut() {
            Some(c) => c,
            None => match connect(addr).await {
                Some(c) => client.insert(c),
                None => {
                    at = (at + 1) % targets.len();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if !publish_one(c, i, id, &opts, &history).await {
            // As a client that fails over: any error (node down, ack
            // timeout, no leader yet) moves this publisher to the next
            // node, after a pause so a failing cluster is not flooded.
            client = None;
            at = (at + 1) % targets.len();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One attempt by `publisher` through `c` (node `via`), recorded; true
/// when acknowledged.
async fn publish_one(
    c: &mut ApiClient<Channel>,
    publisher: usize,
    via: &str,
    opts: &LoadOptions,
    history: &History,
) -> bool {
    let (n, payload) = history.begin(publisher, via);
    let mut req = tonic::Request::new(proto::PublishRequest {
        value: payload.into(),
        stream: opts.stream.clone(),
        partition: opts.partition,
        ack_policy: proto::AckPolicy::All as i32,
        expected_offset: -1,
        ..Default::default()
    });
    req.set_timeout(opts.ack_timeout);
    match c.publish(req).await {
        Ok(r) => match r.into_inner().ack {
            Some(ack) if ack.ack_error == 0 && ack.offset >= 0 => {
                history.ack(n, ack.offset as u64);
                return true;
            }
            Some(ack) => history.fail(n, format!("ack error {ack:?}")),
            None => history.fail(n, "no ack".into()),
        },
        Err(s) => history.fail(n, format!("{:?}: {}", s.code(), s.message())),
    }
    false
}

/// The prober of [`LoadOptions::probe_every`], recorded as publisher `me`.
async fn prober(
    me: usize,
    every: Duration,
    targets: Arc<Vec<Target>>,
    opts: LoadOptions,
    history: Arc<History>,
    stop: CancellationToken,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_PROBES));
    let opts = Arc::new(opts);
    let mut clients: Vec<Option<ApiClient<Channel>>> = vec![None; targets.len()];
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut at = 0;
    let mut inflight = tokio::task::JoinSet::new();
    while !stop.is_cancelled() {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        while inflight.try_join_next().is_some() {}
        at = (at + 1) % targets.len();
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let (id, addr) = &targets[at];
        if clients[at].is_none() {
            // Connecting to a node that is down fails within a second;
            // the next tick tries again.
            clients[at] = connect(addr).await;
        }
        let Some(c) = clients[at].clone() else {
            continue;
        };
        let (id, opts, history) = (id.clone(), opts.clone(), history.clone());
        inflight.spawn(async move {
            let mut c = c;
            publish_one(&mut c, me, &id, &opts, &history).await;
            drop(slot);
        });
    }
    while inflight.join_next().await.is_some() {}
}

/// Reads every replica of `stream`/`partition` from the data dirs in
/// `dirs` (server id → partition dir); `isr` names the ISR members.
pub async fn read_replicas(
    dirs: &BTreeMap<String, std::path::PathBuf>,
    isr: &[String],
) -> Vec<ReplicaLog> {
    let mut out = Vec::new();
    for (node, dir) in dirs {
        out.push(ReplicaLog {
            node: node.clone(),
            in_isr: isr.contains(node),
            records: read_replica(dir).await,
        });
    }
    // The reference is an ISR member; put them first, in id order.
    out.sort_by_key(|r| !r.in_isr);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A history: `(payload, acked offset)`, sent one after another, each
    /// acked before the next was sent when `sequential`.
    fn hist(msgs: &[(&str, Option<u64>)], sequential: bool) -> Vec<Attempt> {
        let t0 = Instant::now();
        msgs.iter()
            .enumerate()
            .map(|(i, (p, off))| {
                let ms = |k: u64| t0 + Duration::from_millis(k);
                let k = i as u64 * 10;
                Attempt {
                    payload: p.as_bytes().to_vec(),
                    via: "a".into(),
                    // Concurrent: all sent at once, acked later.
                    sent: if sequential { ms(k) } else { t0 },
                    outcome: match off {
                        Some(o) => Outcome::Acked {
                            offset: *o,
                            at: if sequential { ms(k + 5) } else { ms(1000 + k) },
                        },
                        None => Outcome::Failed {
                            error: "DeadlineExceeded".into(),
                        },
                    },
                }
            })
            .collect()
    }

    fn log(node: &str, in_isr: bool, recs: &[(u64, u64, &str)]) -> ReplicaLog {
        ReplicaLog {
            node: node.into(),
            in_isr,
            records: recs
                .iter()
                .map(|(o, e, v)| Stored {
                    offset: *o,
                    leader_epoch: *e,
                    value: v.as_bytes().to_vec(),
                })
                .collect(),
        }
    }

    fn three(recs: &[(u64, u64, &str)]) -> Vec<ReplicaLog> {
        vec![
            log("a", true, recs),
            log("b", true, recs),
            log("c", true, recs),
        ]
    }

    #[test]
    fn history_clean_passes_and_counts() {
        let h = hist(&[("m0", Some(0)), ("m1", None), ("m2", Some(2))], true);
        // m1 timed out but was committed anyway: allowed, counted.
        let r = check(&h, &three(&[(0, 1, "m0"), (1, 1, "m1"), (2, 2, "m2")]));
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(
            r.counts,
            Counts {
                attempted: 3,
                acked: 2,
                errors: 1,
                pending: 0,
                unacked_present: 1,
                stored: 3
            }
        );
        // A timed-out publish may also be lost.
        let h = hist(&[("m0", Some(0)), ("m1", None), ("m2", Some(1))], true);
        let r = check(&h, &three(&[(0, 1, "m0"), (1, 1, "m2")]));
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.counts.unacked_present, 0);
    }

    #[test]
    fn history_catches_a_lost_ack() {
        let h = hist(&[("m0", Some(0)), ("m1", Some(1))], true);
        let r = check(&h, &three(&[(0, 1, "m0")]));
        assert_eq!(
            r.violations,
            vec![Violation::LostAck {
                payload: "m1".into(),
                acked_offset: 1
            }]
        );
    }

    #[test]
    fn history_catches_duplicates() {
        let h = hist(&[("m0", Some(0)), ("m1", None)], true);
        let r = check(
            &h,
            &three(&[(0, 1, "m0"), (1, 1, "m0"), (2, 1, "m1"), (3, 1, "m1")]),
        );
        let dups: Vec<(String, bool)> = r
            .violations
            .iter()
            .filter_map(|v| match v {
                Violation::Duplicate { payload, acked, .. } => Some((payload.clone(), *acked)),
                _ => None,
            })
            .collect();
        assert_eq!(dups, vec![("m0".into(), true), ("m1".into(), false)]);
    }

    #[test]
    fn history_catches_a_reorder() {
        // Concurrent publishes acked at 0 and 1 but stored the other way.
        let h = hist(&[("m0", Some(0)), ("m1", Some(1))], false);
        let r = check(&h, &three(&[(0, 1, "m1"), (1, 1, "m0")]));
        assert!(
            r.violations
                .iter()
                .any(|v| matches!(v, Violation::Reorder { first, .. } if first == "m0")),
            "{:?}",
            r.violations
        );
        assert!(r
            .violations
            .iter()
            .any(|v| matches!(v, Violation::OffsetMismatch { .. })));
        // Sequential publishes whose acks carry the stored offsets but
        // were stored out of real-time order (m1 sent after m0's ack).
        let h = hist(&[("m0", Some(1)), ("m1", Some(0))], true);
        let r = check(&h, &three(&[(0, 1, "m1"), (1, 1, "m0")]));
        assert_eq!(
            r.violations,
            vec![Violation::RealTimeOrder {
                acked_before: "m0".into(),
                acked_offset: 1,
                later: "m1".into(),
                later_offset: 0
            }]
        );
    }

    #[test]
    fn history_catches_a_hole() {
        let h = hist(&[("m0", Some(0)), ("m1", Some(2))], true);
        let r = check(&h, &three(&[(0, 1, "m0"), (2, 1, "m1")]));
        let holes = r
            .violations
            .iter()
            .filter(|v| {
                matches!(
                    v,
                    Violation::Hole {
                        after: Some(0),
                        next: 2,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(holes, 3, "one per replica: {:?}", r.violations);
        // A log that does not start at 0.
        let h = hist(&[("m0", Some(1))], true);
        let r = check(&h, &three(&[(1, 1, "m0")]));
        assert!(r.violations.iter().any(|v| matches!(
            v,
            Violation::Hole {
                after: None,
                next: 1,
                ..
            }
        )));
    }

    #[test]
    fn history_catches_divergent_replicas() {
        let h = hist(&[("m0", Some(0)), ("m1", None), ("m2", None)], true);
        let good = [(0, 1, "m0"), (1, 1, "m1")];
        // Same values, other epoch.
        let mut logs = three(&good);
        logs[1] = log("b", true, &[(0, 1, "m0"), (1, 2, "m1")]);
        // Other value at the same offset.
        logs[2] = log("c", true, &[(0, 1, "m0"), (1, 1, "m2")]);
        let r = check(&h, &logs);
        let nodes: Vec<&str> = r
            .violations
            .iter()
            .filter_map(|v| match v {
                Violation::Divergent { node, .. } => Some(node.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(nodes, vec!["b", "c"], "{:?}", r.violations);
        // A shorter ISR replica diverges; one outside the ISR may lag.
        let mut logs = three(&good);
        logs[1] = log("b", true, &[(0, 1, "m0")]);
        logs[2] = log("c", false, &[]);
        let r = check(&h, &logs);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(matches!(&r.violations[0], Violation::Divergent { node, .. } if node == "b"));
    }

    #[test]
    fn history_catches_an_epoch_regress() {
        let h = hist(&[("m0", Some(0)), ("m1", Some(1)), ("m2", Some(2))], true);
        let r = check(&h, &three(&[(0, 2, "m0"), (1, 1, "m1"), (2, 3, "m2")]));
        assert_eq!(r.violations.len(), 3, "{:?}", r.violations);
        assert!(r.violations.iter().all(|v| matches!(
            v,
            Violation::EpochRegress {
                offset: 1,
                epoch: 1,
                previous: 2,
                ..
            }
        )));
    }

    #[test]
    fn history_catches_unknown_records_and_no_isr() {
        let h = hist(&[("m0", Some(0))], true);
        let r = check(&h, &three(&[(0, 1, "m0"), (1, 1, "stray")]));
        assert_eq!(r.violations.len(), 3, "{:?}", r.violations);
        assert!(r
            .violations
            .iter()
            .all(|v| matches!(v, Violation::Unknown { offset: 1, .. })));
        let r = check(&h, &[log("a", false, &[(0, 1, "m0")])]);
        assert_eq!(r.violations, vec![Violation::NoIsrReplica]);
    }

    #[test]
    fn history_payloads_are_unique() {
        let h = History::new();
        let (i0, p0) = h.begin(0, "a");
        let (i1, p1) = h.begin(1, "b");
        assert_ne!(p0, p1);
        h.ack(i0, 7);
        h.fail(i1, "x".into());
        assert_eq!(h.acked(), 1);
        let t = h.attempts()[0].sent;
        assert_eq!(h.first_ack_sent_after(t), None, "sent at t, not after");
        let before = t - Duration::from_millis(1);
        assert_eq!(
            h.first_ack_sent_after(before).map(|(_, via)| via),
            Some("a".into())
        );
        let Outcome::Acked { at, .. } = h.attempts()[0].outcome else {
            panic!("m0 acked");
        };
        assert_eq!(h.first_ack_after(before, at), None, "acked at, not after");
        assert_eq!(h.first_ack_after(before, before).map(|(t, _)| t), Some(at));
        let later = Instant::now() + Duration::from_secs(1);
        assert_eq!(h.acked_via_between("a", before, later).len(), 1);
        assert!(h.acked_via_between("b", before, later).is_empty());
    }
}
