//! The leader's view of its replicas: what each follower has, who is in
//! sync, the high watermark, and the ALL acks waiting for it.
//!
//! Rules (Liftbridge's, after Kafka's):
//! - a follower's fetch at offset `o` says it has every offset below `o`;
//! - the committed end (high watermark + 1) is the lowest log end among the
//!   ISR (the leader's own log end included), and does not move while the
//!   ISR has fewer than the minimum in-sync replicas;
//! - a follower is caught up when its log end reaches the leader's; an ISR
//!   follower that has not been caught up, or has not fetched at all, for
//!   `replica.max.lag.time` is lagging (the leader asks the controller to
//!   remove it; idle followers fetch every `replica.max.idle.wait`, which
//!   must be shorter); a replica out of the ISR whose log end reaches the
//!   committed end may join it again;
//! - ALL acks wait in offset order until the committed end passes them.
//!
//! Pure bookkeeping: times come in as arguments, nothing here does I/O;
//! `Partition` holds it behind a lock and acts on the answers.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Most ALL acks waiting per partition. Past it the oldest waiting ack is
/// dropped (its publisher times out, as it would while the ISR is below its
/// minimum): publishers are bounded by their own windows, so only a
/// partition that cannot commit for long fills it.
pub const MAX_WAITING_ACKS: usize = 65_536;

/// What the leader knows about one follower.
#[derive(Debug, Clone, Copy)]
struct Progress {
    /// The follower's log end, from its last fetch (0 before any).
    leo: u64,
    /// When its log end last reached the leader's.
    caught_up: Instant,
    /// When it last fetched.
    fetched: Instant,
    /// It was answered "nothing new" and waits for a notification.
    idle: bool,
}

/// The ISR bookkeeping of a partition led here.
#[derive(Debug)]
pub struct IsrState {
    me: String,
    replicas: Vec<String>,
    isr: Vec<String>,
    min_isr: usize,
    leader_leo: u64,
    followers: HashMap<String, Progress>,
}

/// What a fetch changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FetchOutcome {
    /// The follower is out of the ISR but has caught up: ask to add it.
    pub rejoin: bool,
}

impl IsrState {
    /// A new leadership: followers count as caught up from `now` (they get
    /// `replica.max.lag.time` to fetch before they are called lagging).
    pub fn new(
        me: &str,
        replicas: &[String],
        isr: &[String],
        min_isr: usize,
        leader_leo: u64,
        now: Instant,
    ) -> IsrState {
        let followers = replicas
            .iter()
            .filter(|r| *r != me)
            .map(|r| {
                (
                    r.clone(),
                    Progress {
                        leo: 0,
                        caught_up: now,
                        fetched: now,
                        idle: false,
                    },
                )
            })
            .collect();
        IsrState {
            me: me.to_string(),
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            min_isr,
            leader_leo,
            followers,
        }
    }

    /// Applies a metadata change of the ISR, replicas or minimum.
    pub fn set_membership(
        &mut self,
        replicas: &[String],
        isr: &[String],
        min_isr: usize,
        now: Instant,
    ) {
        for r in replicas.iter().filter(|r| **r != self.me) {
            self.followers.entry(r.clone()).or_insert(Progress {
                leo: 0,
                caught_up: now,
                fetched: now,
                idle: false,
            });
        }
        self.followers.retain(|r, _| replicas.contains(r));
        // A replica that (re)joins the ISR starts a fresh lag window.
        for r in isr {
            if !self.isr.contains(r) {
                if let Some(p) = self.followers.get_mut(r) {
                    p.caught_up = now;
                    p.fetched = now;
                }
            }
        }
        self.replicas = replicas.to_vec();
        self.isr = isr.to_vec();
        self.min_isr = min_isr;
    }

    /// The ISR as the metadata has it.
    pub fn isr(&self) -> &[String] {
        &self.isr
    }

    /// Whether the ISR is below the minimum (nothing commits).
    pub fn below_min_isr(&self) -> bool {
        self.isr.len() < self.min_isr
    }

    /// Whether some replica is out of the ISR, or the ISR below its minimum.
    pub fn under_replicated(&self) -> bool {
        self.isr.len() < self.replicas.len() || self.below_min_isr()
    }

    /// The leader's own log end (durable per the sync policy).
    pub fn leader_leo(&self) -> u64 {
        self.leader_leo
    }

    /// The leader appended up to `leo`.
    pub fn appended(&mut self, leo: u64) {
        if leo > self.leader_leo {
            self.leader_leo = leo;
        }
    }

    /// A follower fetched at `offset` (it has every offset below);
    /// `committed` is the partition's committed end now.
    pub fn fetched(
        &mut self,
        replica: &str,
        offset: u64,
        committed: u64,
        now: Instant,
    ) -> FetchOutcome {
        let leader_leo = self.leader_leo;
        let in_isr = self.isr.iter().any(|r| r == replica);
        let Some(p) = self.followers.get_mut(replica) else {
            return FetchOutcome::default();
        };
        p.leo = offset;
        p.fetched = now;
        p.idle = offset >= leader_leo;
        if offset >= leader_leo {
            p.caught_up = now;
        }
        FetchOutcome {
            rejoin: !in_isr && (offset >= committed || offset >= leader_leo),
        }
    }

    /// The leader holds a fetch of `replica` until there is news for it:
    /// the follower is not idle (no notification is due).
    pub fn hold(&mut self, replica: &str) {
        if let Some(p) = self.followers.get_mut(replica) {
            p.idle = false;
        }
    }

    /// The committed end the ISR allows: the lowest log end among its
    /// members; `None` while the ISR is below its minimum.
    pub fn committed_end(&self) -> Option<u64> {
        if self.below_min_isr() {
            return None;
        }
        let mut end = self.leader_leo;
        for r in &self.isr {
            if *r == self.me {
                continue;
            }
            let leo = self.followers.get(r).map_or(0, |p| p.leo);
            end = end.min(leo);
        }
        Some(end)
    }

    /// ISR followers not caught up, or silent, for longer than `max_lag`.
    pub fn lagging(&self, now: Instant, max_lag: Duration) -> Vec<String> {
        self.isr
            .iter()
            .filter(|r| **r != self.me)
            .filter(|r| {
                self.followers.get(*r).is_some_and(|p| {
                    let behind = p.leo < self.leader_leo
                        && now.saturating_duration_since(p.caught_up) > max_lag;
                    behind || now.saturating_duration_since(p.fetched) > max_lag
                })
            })
            .cloned()
            .collect()
    }

    /// Followers waiting for a notification, but `except`; they are no
    /// longer idle afterwards (the notification is sent once).
    pub fn take_idle_except(&mut self, except: Option<&str>) -> Vec<String> {
        self.followers
            .iter_mut()
            .filter(|(r, p)| p.idle && Some(r.as_str()) != except)
            .map(|(r, p)| {
                p.idle = false;
                r.clone()
            })
            .collect()
    }
}

/// A drained queue keeps room for this many entries; what a burst grew it
/// to beyond that goes back to the allocator (a staged flood of small
/// records left tens of MiB of empty capacity behind).
const IDLE_CAPACITY: usize = 1024;

/// Gives an empty queue's capacity beyond [`IDLE_CAPACITY`] back.
fn shrink_when_empty<T>(q: &mut VecDeque<T>) {
    if q.is_empty() && q.capacity() > IDLE_CAPACITY {
        q.shrink_to(IDLE_CAPACITY);
    }
}

/// Most bytes of records staged for followers before the leader's own
/// write completed. Past it, batches are not staged: followers get them
/// from the log once written (slower, nothing lost).
pub const MAX_STAGED_BYTES: usize = 16 << 20;

/// Records the leader has queued for its own log but not yet written
/// (fsynced under `always`): followers may copy them already, so the
/// leader's write and theirs overlap. Offsets are predicted: the leader is
/// the only writer and its appends get offsets in queue order. Whatever is
/// staged is contiguous from `start`; a batch that does not fit leaves a
/// gap, so staging restarts at the next batch once everything before it is
/// written.
#[derive(Debug, Default)]
pub struct Staged<T> {
    /// The offset the next queued batch gets.
    next: u64,
    /// Offset of the first staged record.
    start: u64,
    records: VecDeque<(u64, T, usize)>,
    bytes: usize,
}

impl<T: Clone> Staged<T> {
    /// Starts predicting at `leo`, nothing staged.
    pub fn new(leo: u64) -> Staged<T> {
        Staged {
            next: leo,
            start: leo,
            records: VecDeque::new(),
            bytes: 0,
        }
    }

    /// A batch of `n` records was queued; returns its first offset. The
    /// records (with their sizes) are staged when they follow what is
    /// staged and fit.
    pub fn queued(&mut self, n: usize, records: impl FnOnce(u64) -> Vec<(T, usize)>) -> u64 {
        let first = self.next;
        self.next += n as u64;
        if self.records.is_empty() {
            self.start = first;
        }
        if first != self.start + self.records.len() as u64 || self.bytes >= MAX_STAGED_BYTES {
            return first;
        }
        for (i, (r, size)) in records(first).into_iter().enumerate() {
            self.bytes += size;
            self.records.push_back((first + i as u64, r, size));
        }
        first
    }

    /// The leader's log now ends at `leo`: forget what it holds.
    pub fn written(&mut self, leo: u64) {
        while self.records.front().is_some_and(|(o, _, _)| *o < leo) {
            if let Some((_, _, size)) = self.records.pop_front() {
                self.bytes -= size;
            }
        }
        if self.records.is_empty() {
            self.start = self.next.min(leo.max(self.start));
            shrink_when_empty(&mut self.records);
        } else {
            self.start = self.records.front().map_or(leo, |(o, _, _)| *o);
        }
        if self.next < leo {
            self.next = leo;
        }
    }

    /// Staged records from `from` on, up to `max_bytes` (at least one).
    pub fn from(&self, from: u64, max_bytes: usize) -> Vec<(u64, T)> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for (o, r, size) in self.records.iter().skip_while(|(o, _, _)| *o < from) {
            if *o != from + out.len() as u64 {
                break;
            }
            if !out.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            out.push((*o, r.clone()));
        }
        out
    }

    /// The end of what is staged (where a follower can copy up to).
    pub fn end(&self) -> u64 {
        self.start + self.records.len() as u64
    }

    /// Bytes staged.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// ALL acks waiting for the committed end, in offset order.
#[derive(Debug)]
pub struct WaitingAcks<T> {
    queue: VecDeque<(u64, T)>,
    dropped: u64,
}

impl<T> Default for WaitingAcks<T> {
    fn default() -> Self {
        WaitingAcks {
            queue: VecDeque::new(),
            dropped: 0,
        }
    }
}

impl<T> WaitingAcks<T> {
    /// Queues the ack of `offset` (offsets arrive in increasing order). When
    /// full, the oldest is dropped.
    pub fn push(&mut self, offset: u64, ack: T) {
        if self.queue.len() >= MAX_WAITING_ACKS {
            self.queue.pop_front();
            self.dropped += 1;
        }
        self.queue.push_back((offset, ack));
    }

    /// Takes every ack below `end`.
    pub fn release(&mut self, end: u64) -> Vec<(u64, T)> {
        let n = self.queue.iter().take_while(|(o, _)| *o < end).count();
        let out = self.queue.drain(..n).collect();
        shrink_when_empty(&mut self.queue);
        out
    }

    /// Acks waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Acks dropped because the queue was full, since it was created.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch(s: &mut IsrState, r: &str, offset: u64, now: Instant) -> FetchOutcome {
        let c = s.committed_end().unwrap_or(0);
        s.fetched(r, offset, c, now)
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_committed_end_is_the_lowest_isr_log_end() {
        let t0 = Instant::now();
        let all = ids(&["a", "b", "c"]);
        let mut s = IsrState::new("a", &all, &all, 2, 0, t0);
        assert_eq!(s.committed_end(), Some(0));
        s.appended(10);
        assert_eq!(s.committed_end(), Some(0), "followers have nothing yet");
        fetch(&mut s, "b", 10, t0);
        assert_eq!(
            s.committed_end(),
            Some(0),
            "c is in the ISR and has nothing"
        );
        fetch(&mut s, "c", 7, t0);
        assert_eq!(s.committed_end(), Some(7));
        // c leaves the ISR: b and the leader decide.
        s.set_membership(&all, &ids(&["a", "b"]), 2, t0);
        assert_eq!(s.committed_end(), Some(10));
        // Below the minimum nothing commits.
        s.set_membership(&all, &ids(&["a"]), 2, t0);
        assert_eq!(s.committed_end(), None);
        assert!(s.under_replicated());
    }

    #[test]
    fn a_follower_lags_after_max_lag_without_catching_up_and_rejoins() {
        let t0 = Instant::now();
        let lag = Duration::from_secs(2);
        let all = ids(&["a", "b", "c"]);
        let mut s = IsrState::new("a", &all, &all, 1, 5, t0);
        fetch(&mut s, "b", 5, t0);
        fetch(&mut s, "c", 5, t0);
        let t1 = t0 + Duration::from_secs(1);
        s.appended(8);
        fetch(&mut s, "b", 8, t1);
        fetch(&mut s, "c", 6, t1);
        assert!(s.lagging(t1, lag).is_empty());
        let t3 = t0 + Duration::from_secs(3);
        assert_eq!(s.lagging(t3, lag), ids(&["c"]), "c last caught up at t0");
        // A caught-up follower that keeps fetching (idle) does not lag; one
        // that stops fetching does.
        fetch(&mut s, "b", 8, t3);
        assert!(!s.lagging(t3 + lag, lag).contains(&"b".to_string()));
        assert!(s.lagging(t3 + lag * 2, lag).contains(&"b".to_string()));
        s.set_membership(&all, &ids(&["a", "b"]), 1, t3);
        let o = fetch(&mut s, "c", 7, t3);
        assert!(!o.rejoin, "not caught up yet");
        let o = fetch(&mut s, "c", 8, t3);
        assert!(o.rejoin);
        s.set_membership(&all, &all, 1, t3);
        assert!(s.lagging(t3 + Duration::from_millis(1), lag).is_empty());
    }

    #[test]
    fn idle_followers_are_notified_once() {
        let t0 = Instant::now();
        let all = ids(&["a", "b"]);
        let mut s = IsrState::new("a", &all, &all, 1, 3, t0);
        fetch(&mut s, "b", 3, t0);
        assert_eq!(s.take_idle_except(None), ids(&["b"]));
        assert!(s.take_idle_except(None).is_empty());
        fetch(&mut s, "b", 1, t0);
        assert!(
            s.take_idle_except(None).is_empty(),
            "behind: it fetches again by itself"
        );
        fetch(&mut s, "b", 3, t0);
        assert!(s.take_idle_except(Some("b")).is_empty());
    }

    #[test]
    fn staged_records_follow_the_queue_and_leave_once_written() {
        let mut s: Staged<&str> = Staged::new(10);
        assert_eq!(
            s.queued(2, |f| {
                assert_eq!(f, 10);
                vec![("a", 1), ("b", 1)]
            }),
            10
        );
        assert_eq!(s.queued(1, |_| vec![("c", 1)]), 12);
        assert_eq!(s.end(), 13);
        assert_eq!(s.from(11, 100), vec![(11, "b"), (12, "c")]);
        assert_eq!(
            s.from(11, 1),
            vec![(11, "b")],
            "at least one, then the budget"
        );
        s.written(12);
        assert_eq!(
            s.from(10, 100),
            Vec::<(u64, &str)>::new(),
            "written ones come from the log"
        );
        assert_eq!(s.from(12, 100), vec![(12, "c")]);
        s.written(13);
        assert_eq!((s.bytes(), s.end()), (0, 13));
        // A batch that does not fit leaves a gap: nothing after it is
        // staged until the gap is written.
        s.bytes = MAX_STAGED_BYTES;
        s.records.push_back((13, "x", 0));
        assert_eq!(s.queued(1, |_| vec![("y", 1)]), 13);
        s.records.clear();
        s.bytes = 0;
        assert_eq!(s.queued(1, |_| vec![("z", 1)]), 14);
        assert_eq!(s.from(14, 100), vec![(14, "z")]);
    }

    #[test]
    fn waiting_acks_release_in_order_and_stay_bounded() {
        let mut w = WaitingAcks::default();
        for o in 0..5u64 {
            w.push(o, o * 10);
        }
        assert_eq!(w.release(3), vec![(0, 0), (1, 10), (2, 20)]);
        assert_eq!(w.len(), 2);
        assert!(w.release(3).is_empty());
        let mut w = WaitingAcks::default();
        for o in 0..(MAX_WAITING_ACKS as u64 + 2) {
            w.push(o, ());
        }
        assert_eq!((w.len(), w.dropped()), (MAX_WAITING_ACKS, 2));
        assert_eq!(w.release(3).len(), 1, "0 and 1 were dropped");
    }

    /// A burst grows the queues; once drained they give the room back,
    /// keeping a small working capacity.
    #[test]
    fn drained_queues_give_back_what_a_burst_grew() {
        let n = 100_000u64;
        let mut s: Staged<u64> = Staged::new(0);
        for o in 0..n {
            s.queued(1, |f| vec![(f, 1)]);
            assert_eq!(s.end(), o + 1);
        }
        assert!(s.records.capacity() >= n as usize);
        s.written(n / 2);
        assert!(s.records.capacity() >= n as usize / 2, "not drained yet");
        s.written(n);
        assert_eq!(s.bytes(), 0);
        assert!(
            s.records.capacity() <= IDLE_CAPACITY,
            "{}",
            s.records.capacity()
        );
        assert_eq!(s.queued(1, |f| vec![(f, 1)]), n, "still predicts offsets");

        let n = MAX_WAITING_ACKS as u64;
        let mut w = WaitingAcks::default();
        for o in 0..n {
            w.push(o, ());
        }
        assert!(w.queue.capacity() >= n as usize);
        assert_eq!(w.release(n - 1).len(), n as usize - 1);
        assert!(w.queue.capacity() >= n as usize, "one still waits");
        assert_eq!(w.release(n).len(), 1);
        assert!(
            w.queue.capacity() <= IDLE_CAPACITY,
            "{}",
            w.queue.capacity()
        );
    }
}
