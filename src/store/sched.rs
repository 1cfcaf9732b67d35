//! Shared threads for every partition log of the process: a small pool of
//! writer threads, as many applier threads (redb applies of full tails
//! under `interval`, see [`background`]) and one maintenance thread.
//!
//! Role: run each open log's writer (group commit, apply, checkpoint) and its
//! cleaner (retention, compaction) without an OS thread per partition, so a
//! node holds thousands of partitions with a fixed number of threads.
//!
//! # Writer pool
//!
//! Each log owns a [`Slot`]: its request queue, its writer state and a flag
//! saying whether it is *scheduled* (in the ready queue or being run). A
//! request pushed to an unscheduled slot puts the slot at the back of the
//! pool's ready queue; a pool thread takes it, drains up to
//! `MAX_BATCH_BYTES` of requests and hands them to the log's batch function
//! (one group commit), then puts the slot back at the back of the queue if
//! more requests came meanwhile, or leaves it idle with the deadline its
//! writer asked for (apply an idle tail, checkpoint, interval sync). The pool
//! keeps those deadlines in one timer heap and schedules a slot when its
//! deadline passes without a request, exactly as the former per-partition
//! thread timed out of its receive.
//!
//! Invariants:
//! - a slot is run by at most one pool thread at a time (the scheduled flag
//!   is set under the slot's lock before it enters the ready queue and
//!   cleared only by the thread that ran it), so a partition's requests are
//!   processed one batch after another, in queue order;
//! - a slot with queued requests is always scheduled; a slot is requeued at
//!   the back, so one busy partition cannot starve the others;
//! - a closed slot refuses new requests, is run until its queue is empty,
//!   then runs its final step once and signals the closer.
//!
//! The ready queue holds at most one entry per open log and the timer heap at
//! most a few per log (a stale timer is dropped when it fires), so both are
//! bounded by the number of open logs.
//!
//! # A slot's request queue is bounded
//!
//! Each slot's queue has its own [`QueueLimit`] (bytes as counted by
//! [`SlotWork::op_bytes`], and a number of requests). Policy when full: a
//! *bounded* request ([`SlotWork::bounded`]: the data requests, appends and
//! replicated records) that would take the queue past either limit is
//! refused at once with [`Refused::Full`] and the request handed back, so
//! its caller answers its own client with an error (the log turns it into
//! `StoreError::Overloaded`, handed to the append's caller; a recorded
//! batch refused so would be answered with error acks, as a failed write
//! is). Nothing waits: callers include tokio tasks and the writer's own
//! reply callbacks, where blocking could deadlock the pool.
//! An empty queue takes any one request, so a request larger than the limit
//! is still possible. Control requests (sync, maintenance) are never
//! refused: each of their producers awaits its answer before it sends
//! another, so there are at most a few of them. The node's own appenders
//! stay under the limit by construction (the stenographer bounds its
//! batches in flight, replication and checked appends await each request);
//! the limit is what stops a producer that does not.
//!
//! Must not: block a pool thread on anything but the log's own file I/O —
//! the batch function and the callbacks it runs must be quick — or run on a
//! tokio worker. The one exception is [`Slot::claim_inline`] (and
//! [`Slot::send_inline`]): the sender's thread (possibly a tokio worker)
//! takes an idle slot's turn and runs its request itself, then what queued
//! behind it meanwhile, at most [`INLINE_ROUNDS`] batches, when the work
//! says they are cheap ([`SlotWork::try_inline`]; the log's writer accepts
//! only page-cache journal `write`s).
//!
//! # Maintenance thread
//!
//! One thread walks a timer heap of registered logs and runs each one's
//! maintenance step when its interval has passed, then asks the log for its
//! next due time. A log that is closed or dropped is skipped and forgotten.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// What a pool thread does with a slot's work. Implemented by the log's
/// writer.
pub(crate) trait SlotWork: Send + 'static {
    /// The request type queued to the slot.
    type Op: Send + 'static;
    /// Bytes a request counts for in one batch and in the queue's limit.
    fn op_bytes(op: &Self::Op) -> usize;
    /// Whether the request is subject to the queue's limit (data
    /// requests); others (control requests whose producers await each
    /// answer) are always queued.
    fn bounded(op: &Self::Op) -> bool;
    /// Processes one batch of requests (never empty), in order.
    fn batch(&mut self, ops: Vec<Self::Op>);
    /// No request came before the last deadline: do whatever is due.
    fn idle(&mut self);
    /// When the writer wants to run again without a request, if ever.
    fn deadline(&self) -> Option<Instant>;
    /// The slot is closed and its queue is empty: the last step (final
    /// durable commit).
    fn finish(&mut self);
    /// Processes `ops` (never empty, in order, as one batch) at once on the
    /// calling thread, if that is cheap enough (no fsync, no engine
    /// transaction); otherwise gives them back and they are queued for the
    /// pool. Called only by the thread that holds the slot's turn, with
    /// nothing queued before `ops`, so order is kept. Default: never inline.
    fn try_inline(&mut self, ops: Vec<Self::Op>) -> Result<(), Vec<Self::Op>> {
        Err(ops)
    }
}

/// Batches a thread that took an idle slot's turn ([`Slot::claim_inline`])
/// runs inline at most: its own request, then what queued behind it
/// meanwhile. Past that the pool takes over, so a sender's thread (a tokio
/// worker) is not kept writing for others for long.
const INLINE_ROUNDS: usize = 4;

/// How much one slot's request queue may hold (see the module
/// documentation for what happens past it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueLimit {
    /// Bytes of queued requests, as counted by [`SlotWork::op_bytes`].
    pub bytes: usize,
    /// Queued requests.
    pub ops: usize,
}

/// Why [`Slot::send`] gave a request back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused<O> {
    /// The slot is closed: no request is accepted any more.
    Closed(O),
    /// The queue is at its [`QueueLimit`]: the request was not queued.
    Full(O),
}

/// The queue side of a slot, under its lock.
struct SlotQueue<O> {
    ops: VecDeque<O>,
    /// Sum of [`SlotWork::op_bytes`] over `ops`.
    bytes: usize,
    /// In the ready queue or being run.
    scheduled: bool,
    /// No request is accepted any more.
    closing: bool,
    /// The final step ran: the writer is gone.
    done: bool,
    /// When the writer wants to run without a request.
    wanted: Option<Instant>,
    /// Earliest timer registered for this slot that has not fired yet.
    registered: Option<Instant>,
}

/// One log's place in the pool.
pub(crate) struct Slot<W: SlotWork> {
    queue: Mutex<SlotQueue<W::Op>>,
    finished: Condvar,
    /// Taken by the pool thread that runs the slot; `None` once finished.
    work: Mutex<Option<W>>,
    max_batch_bytes: usize,
    limit: QueueLimit,
}

/// A request that took an idle slot's turn ([`Slot::claim_inline`]): it
/// runs on the thread that drops this. Until then the slot runs nothing
/// else, so drop it soon, and never while waiting for the slot's answers.
#[must_use = "the request runs when this is dropped"]
pub(crate) struct Claimed<W: SlotWork> {
    slot: Arc<Slot<W>>,
    op: Option<W::Op>,
}

impl<W: SlotWork> Drop for Claimed<W> {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            self.slot.run_claimed(op);
        }
    }
}

/// A slot as the pool sees it.
trait Runnable: Send + Sync {
    fn run(self: Arc<Self>, pool: &Pool);
    /// A timer for `at` fired: schedule the slot if its wish is due.
    fn timer(self: Arc<Self>, at: Instant, pool: &Pool);
}

impl<W: SlotWork> Slot<W> {
    /// A new slot for `work`, idle; `max_batch_bytes` bounds one batch,
    /// `limit` the queue.
    pub(crate) fn new(work: W, max_batch_bytes: usize, limit: QueueLimit) -> Arc<Self> {
        let wanted = work.deadline();
        let slot = Arc::new(Slot {
            queue: Mutex::new(SlotQueue {
                ops: VecDeque::new(),
                bytes: 0,
                scheduled: false,
                closing: false,
                done: false,
                wanted,
                registered: wanted,
            }),
            finished: Condvar::new(),
            work: Mutex::new(Some(work)),
            max_batch_bytes,
            limit,
        });
        if let Some(at) = wanted {
            pool().add_timer(at, slot.clone());
        }
        slot
    }

    /// Queues a request; gives it back if the slot is closed, or if it is
    /// a bounded request and the queue is full (see the module
    /// documentation). Never blocks.
    pub(crate) fn send(self: &Arc<Self>, op: W::Op) -> Result<(), Refused<W::Op>> {
        let q = self.queue.lock();
        if q.closing {
            return Err(Refused::Closed(op));
        }
        self.enqueue(q, op)
    }

    /// Appends `op` to the open queue under its limit and hands the slot
    /// to the pool unless it is scheduled already.
    fn enqueue(
        self: &Arc<Self>,
        mut q: parking_lot::MutexGuard<'_, SlotQueue<W::Op>>,
        op: W::Op,
    ) -> Result<(), Refused<W::Op>> {
        let bytes = W::op_bytes(&op);
        if W::bounded(&op)
            && !q.ops.is_empty()
            && (q.bytes.saturating_add(bytes) > self.limit.bytes || q.ops.len() >= self.limit.ops)
        {
            return Err(Refused::Full(op));
        }
        q.bytes += bytes;
        q.ops.push_back(op);
        if !q.scheduled {
            q.scheduled = true;
            drop(q);
            pool().ready(self.clone());
        }
        Ok(())
    }

    /// Like [`send`](Self::send), but when the slot is idle (nothing
    /// queued, not scheduled, not closing) the work may process `op` right
    /// here, on the calling thread ([`SlotWork::try_inline`]): no wake-up of
    /// a pool thread, and whatever the work answers runs on the caller's
    /// thread. The slot is marked scheduled meanwhile, so no pool thread
    /// runs it at the same time and requests sent meanwhile queue behind
    /// `op`; they are handed to the pool afterwards.
    /// The queue's limit applies as in `send` whenever `op` is queued
    /// behind others.
    pub(crate) fn send_inline(self: &Arc<Self>, op: W::Op) -> Result<(), Refused<W::Op>> {
        self.claim_inline(op).map(drop)
    }

    /// The first half of [`send_inline`](Self::send_inline): takes `op`'s
    /// place in the slot's order now and, when the slot is idle, hands it
    /// back as a [`Claimed`] request to be run on this thread when that is
    /// dropped. Meanwhile the slot counts as scheduled, so requests sent
    /// in between queue behind `op`. A caller that orders its requests under
    /// a lock of its own drops the lock first, so that other senders queue
    /// behind `op` instead of waiting for its write.
    pub(crate) fn claim_inline(
        self: &Arc<Self>,
        op: W::Op,
    ) -> Result<Option<Claimed<W>>, Refused<W::Op>> {
        let mut q = self.queue.lock();
        if q.closing {
            return Err(Refused::Closed(op));
        }
        if q.scheduled || !q.ops.is_empty() {
            return self.enqueue(q, op).map(|()| None);
        }
        q.scheduled = true;
        Ok(Some(Claimed {
            slot: self.clone(),
            op: Some(op),
        }))
    }

    /// Runs a request claimed by [`claim_inline`](Self::claim_inline):
    /// inline if the work takes it, else first in the queue. Requests that
    /// queued behind it meanwhile are then taken inline too, as one batch,
    /// for up to [`INLINE_ROUNDS`] batches in all; whatever is left (or
    /// refused) goes to the pool.
    fn run_claimed(self: &Arc<Self>, op: W::Op) {
        let mut ops = vec![op];
        let mut rounds = 1;
        let q = loop {
            let mut guard = self.work.lock();
            let refused = match guard.as_mut() {
                Some(work) => work.try_inline(ops).err(),
                // Finished (cannot happen while not closing): queue it, the
                // run will find the work gone.
                None => Some(ops),
            };
            let wanted = guard.as_ref().and_then(|w| w.deadline());
            drop(guard);
            let mut q = self.queue.lock();
            q.wanted = wanted;
            match refused {
                Some(back) => {
                    // First in line: nothing ran since this thread took the
                    // slot's turn, and requests sent meanwhile were queued
                    // behind the slot's flag.
                    for op in back.into_iter().rev() {
                        q.bytes += W::op_bytes(&op);
                        q.ops.push_front(op);
                    }
                    break q;
                }
                None if rounds < INLINE_ROUNDS && !q.closing && !q.ops.is_empty() => {
                    ops = self.take_batch(&mut q);
                    rounds += 1;
                }
                None => break q,
            }
        };
        self.end_run(q, pool());
    }

    /// Ends a run of the slot (by a pool thread or by the thread holding
    /// its turn), with `q.wanted` up to date: back to the ready queue if
    /// requests came meanwhile or the slot is closing; otherwise idle, with
    /// a timer for the work's next deadline.
    fn end_run(
        self: &Arc<Self>,
        mut q: parking_lot::MutexGuard<'_, SlotQueue<W::Op>>,
        pool: &Pool,
    ) {
        if !q.ops.is_empty() || q.closing {
            drop(q);
            pool.ready(self.clone());
            return;
        }
        q.scheduled = false;
        if let Some(at) = q.wanted {
            if q.registered.is_none_or(|r| at < r) {
                q.registered = Some(at);
                drop(q);
                pool.add_timer(at, self.clone());
            }
        }
    }

    /// Takes the next batch off the queue: requests up to the slot's batch
    /// size in bytes (at least one if any is queued).
    fn take_batch(&self, q: &mut SlotQueue<W::Op>) -> Vec<W::Op> {
        let mut bytes = 0;
        let mut batch = Vec::new();
        while bytes < self.max_batch_bytes {
            let Some(op) = q.ops.pop_front() else { break };
            let b = W::op_bytes(&op);
            q.bytes = q.bytes.saturating_sub(b);
            bytes += b;
            batch.push(op);
        }
        batch
    }

    /// Refuses further requests and lets the writer drain and finish on
    /// the pool; returns at once.
    pub(crate) fn close(self: &Arc<Self>) {
        let mut q = self.queue.lock();
        if q.closing {
            return;
        }
        q.closing = true;
        if !q.scheduled && !q.done {
            q.scheduled = true;
            drop(q);
            pool().ready(self.clone());
        }
    }

    /// [`close`](Self::close), then waits until the writer has finished.
    /// Blocking: not on a pool thread or a tokio worker.
    pub(crate) fn close_and_wait(self: &Arc<Self>) {
        self.close();
        let mut q = self.queue.lock();
        while !q.done {
            self.finished.wait(&mut q);
        }
    }
}

impl<W: SlotWork> Runnable for Slot<W> {
    fn run(self: Arc<Self>, pool: &Pool) {
        let mut guard = self.work.lock();
        let Some(work) = guard.as_mut() else {
            // Finished already (a close raced with a timer): nothing to do.
            let mut q = self.queue.lock();
            q.scheduled = false;
            return;
        };
        let (batch, closing, due) = {
            let mut q = self.queue.lock();
            let batch = self.take_batch(&mut q);
            let due = q.wanted.is_some_and(|w| w <= Instant::now());
            (batch, q.closing, due)
        };
        if !batch.is_empty() {
            work.batch(batch);
        } else if closing {
            work.finish();
            *guard = None;
            drop(guard);
            let mut q = self.queue.lock();
            q.done = true;
            q.scheduled = false;
            q.wanted = None;
            self.finished.notify_all();
            return;
        } else if due {
            work.idle();
        }
        let wanted = work.deadline();
        drop(guard);
        let mut q = self.queue.lock();
        q.wanted = wanted;
        self.end_run(q, pool);
    }

    fn timer(self: Arc<Self>, at: Instant, pool: &Pool) {
        let mut q = self.queue.lock();
        if q.registered == Some(at) {
            q.registered = None;
        }
        if q.done {
            return;
        }
        match q.wanted {
            Some(w) if w <= Instant::now() && !q.scheduled => {
                q.scheduled = true;
                drop(q);
                pool.ready(self);
            }
            // Due, but already scheduled: the run sees the deadline.
            Some(w) if w <= Instant::now() => {}
            // Pushed back by requests since: wait for the new time.
            Some(w) if q.registered.is_none_or(|r| w < r) => {
                q.registered = Some(w);
                drop(q);
                pool.add_timer(w, self);
            }
            _ => {}
        }
    }
}

/// A timer of the pool: when, a tie-breaker, and the slot.
struct Timer {
    at: Instant,
    seq: u64,
    slot: Weak<dyn Runnable>,
}
impl PartialEq for Timer {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timer {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

struct PoolState {
    /// Slots to run, each at most once (see the scheduled flag).
    ready: VecDeque<Arc<dyn Runnable>>,
    timers: BinaryHeap<Reverse<Timer>>,
    seq: u64,
}

/// The writer pool.
pub(crate) struct Pool {
    state: Mutex<PoolState>,
    wake: Condvar,
    threads: usize,
}

/// Number of writer threads: the cores, at least 4 so that a few
/// partitions syncing under `always` overlap their fsyncs, at most 16.
fn pool_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .clamp(4, 16)
}

/// The process's writer pool (started on first use).
fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            state: Mutex::new(PoolState {
                ready: VecDeque::new(),
                timers: BinaryHeap::new(),
                seq: 0,
            }),
            wake: Condvar::new(),
            threads: pool_threads(),
        }));
        for i in 0..pool.threads {
            let spawned = std::thread::Builder::new()
                .name(format!("store-w-{i}"))
                .spawn(move || pool.work());
            if let Err(e) = spawned {
                // The other threads still serve every slot; with none at
                // all, no write would ever complete, which is worth a loud
                // line.
                tracing::error!(error = %e, "starting a storage writer thread");
            }
        }
        pool
    })
}

/// A job for the background appliers.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// The appliers: threads that run logs' redb applies (see the log's
/// `Writer::start_apply`) while their writers go on journaling. Each log
/// has at most one job here at a time, so the queue is bounded by the
/// number of open logs; a writer that needs its job's outcome waits for it
/// (on its own log's work, which this module allows).
struct Appliers {
    jobs: Mutex<VecDeque<Job>>,
    wake: Condvar,
}

/// Runs `job` on an applier thread (started on first use, as many as
/// the writer pool has), or on this thread if none could be started.
pub(crate) fn background(job: Job) {
    static APPLIERS: OnceLock<Option<&'static Appliers>> = OnceLock::new();
    let a = APPLIERS.get_or_init(|| {
        let mut started = 0;
        let a: &'static Appliers = Box::leak(Box::new(Appliers {
            jobs: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
        }));
        for i in 0..pool_threads() {
            let spawned = std::thread::Builder::new()
                .name(format!("store-apply-{i}"))
                .spawn(move || loop {
                    let job = {
                        let mut q = a.jobs.lock();
                        loop {
                            if let Some(j) = q.pop_front() {
                                break j;
                            }
                            a.wake.wait(&mut q);
                        }
                    };
                    job();
                });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => tracing::error!(error = %e, "starting a storage applier thread"),
            }
        }
        (started > 0).then_some(a)
    });
    let Some(a) = a else {
        return job();
    };
    a.jobs.lock().push_back(job);
    a.wake.notify_one();
}

/// Number of threads of the writer pool.
pub fn writer_threads() -> usize {
    pool().threads
}

impl Pool {
    fn ready(&self, slot: Arc<dyn Runnable>) {
        self.state.lock().ready.push_back(slot);
        self.wake.notify_one();
    }

    fn add_timer(&self, at: Instant, slot: Arc<dyn Runnable>) {
        let mut st = self.state.lock();
        st.seq += 1;
        let seq = st.seq;
        let earliest = st.timers.peek().is_none_or(|Reverse(t)| at < t.at);
        st.timers.push(Reverse(Timer {
            at,
            seq,
            slot: Arc::downgrade(&slot),
        }));
        drop(st);
        if earliest {
            // A thread asleep until a later timer must recompute its wait.
            self.wake.notify_one();
        }
    }

    fn work(&self) {
        let mut st = self.state.lock();
        loop {
            let now = Instant::now();
            let mut fired = Vec::new();
            while st.timers.peek().is_some_and(|Reverse(t)| t.at <= now) {
                if let Some(Reverse(t)) = st.timers.pop() {
                    fired.push(t);
                }
            }
            if !fired.is_empty() {
                drop(st);
                for t in fired {
                    if let Some(slot) = t.slot.upgrade() {
                        slot.timer(t.at, self);
                    }
                }
                st = self.state.lock();
                continue;
            }
            if let Some(slot) = st.ready.pop_front() {
                drop(st);
                slot.run(self);
                st = self.state.lock();
                continue;
            }
            match st.timers.peek().map(|Reverse(t)| t.at) {
                Some(at) => {
                    self.wake.wait_until(&mut st, at);
                }
                None => self.wake.wait(&mut st),
            }
        }
    }
}

/// What the maintenance thread does with a registered log.
pub(crate) trait Maintained: Send + Sync + 'static {
    /// Runs one retention/compaction pass if the configuration asks for
    /// one; returns the time until the next pass, or `None` once the log is
    /// closed.
    fn maintain(self: Arc<Self>) -> Option<Duration>;
}

struct MaintState {
    /// (due, id, generation): the entry is current only if its generation
    /// matches the registration's.
    heap: BinaryHeap<Reverse<(Instant, u64, u64)>>,
    logs: HashMap<u64, (Weak<dyn Maintained>, u64)>,
    next_id: u64,
}

struct Maintenance {
    state: Mutex<MaintState>,
    wake: Condvar,
}

fn maintenance() -> &'static Maintenance {
    static M: OnceLock<&'static Maintenance> = OnceLock::new();
    M.get_or_init(|| {
        let m: &'static Maintenance = Box::leak(Box::new(Maintenance {
            state: Mutex::new(MaintState {
                heap: BinaryHeap::new(),
                logs: HashMap::new(),
                next_id: 0,
            }),
            wake: Condvar::new(),
        }));
        if let Err(e) = std::thread::Builder::new()
            .name("store-maint".into())
            .spawn(move || m.work())
        {
            tracing::error!(error = %e, "starting the storage maintenance thread; retention and compaction will not run");
        }
        m
    })
}

/// Registers a log for periodic maintenance, first due after its interval;
/// returns its id for [`reschedule`] and [`unregister`].
pub(crate) fn register(log: Weak<dyn Maintained>, interval: Duration) -> u64 {
    let m = maintenance();
    let mut st = m.state.lock();
    st.next_id += 1;
    let id = st.next_id;
    st.logs.insert(id, (log, 0));
    st.heap.push(Reverse((Instant::now() + interval, id, 0)));
    drop(st);
    m.wake.notify_one();
    id
}

/// The next pass of `id` is due `interval` from now (the configuration
/// changed).
pub(crate) fn reschedule(id: u64, interval: Duration) {
    let m = maintenance();
    let mut st = m.state.lock();
    let Some(entry) = st.logs.get_mut(&id) else {
        return;
    };
    entry.1 += 1;
    let generation = entry.1;
    st.heap
        .push(Reverse((Instant::now() + interval, id, generation)));
    drop(st);
    m.wake.notify_one();
}

/// Forgets `id` (the log closed).
pub(crate) fn unregister(id: u64) {
    maintenance().state.lock().logs.remove(&id);
}

impl Maintenance {
    fn work(&self) {
        let mut st = self.state.lock();
        loop {
            let Some(Reverse((at, id, generation))) = st.heap.peek().copied() else {
                self.wake.wait(&mut st);
                continue;
            };
            if at > Instant::now() {
                self.wake.wait_until(&mut st, at);
                continue;
            }
            st.heap.pop();
            let log = match st.logs.get(&id) {
                Some((w, g)) if *g == generation => w.upgrade(),
                // Stale (rescheduled) or forgotten.
                _ => continue,
            };
            let Some(log) = log else {
                st.logs.remove(&id);
                continue;
            };
            drop(st);
            let next = log.maintain();
            st = self.state.lock();
            match next {
                Some(after) => {
                    if let Some(entry) = st.logs.get_mut(&id) {
                        entry.1 += 1;
                        let g = entry.1;
                        st.heap.push(Reverse((Instant::now() + after, id, g)));
                    }
                }
                None => {
                    st.logs.remove(&id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Records the order of its batches and how often it ran idle.
    struct Probe {
        seen: Arc<Mutex<Vec<u32>>>,
        idles: Arc<AtomicUsize>,
        finished: Arc<AtomicUsize>,
        wake_at: Option<Instant>,
        /// The batches run inline, as the sender's thread ran them.
        inlined: Arc<Mutex<Vec<InlineRun>>>,
    }

    /// A batch run inline and the thread that ran it.
    type InlineRun = (std::thread::ThreadId, Vec<u32>);

    type ProbeHandles = (Arc<Mutex<Vec<u32>>>, Arc<AtomicUsize>, Arc<AtomicUsize>);

    /// A slot over a new probe (batches of at most `max_batch` requests,
    /// a queue limit no test reaches) and the probe's records.
    fn probe_slot(max_batch: usize) -> (Arc<Slot<Probe>>, ProbeHandles) {
        let p = Probe {
            seen: Arc::default(),
            idles: Arc::default(),
            finished: Arc::default(),
            wake_at: None,
            inlined: Arc::default(),
        };
        let handles = (p.seen.clone(), p.idles.clone(), p.finished.clone());
        let limit = QueueLimit {
            bytes: 1 << 20,
            ops: 1 << 20,
        };
        (Slot::new(p, max_batch, limit), handles)
    }

    impl SlotWork for Probe {
        type Op = u32;
        fn op_bytes(_: &u32) -> usize {
            1
        }
        fn bounded(_: &u32) -> bool {
            true
        }
        fn batch(&mut self, ops: Vec<u32>) {
            self.seen.lock().extend(ops);
            self.wake_at = Some(Instant::now() + Duration::from_millis(5));
        }
        fn idle(&mut self) {
            self.idles.fetch_add(1, Ordering::SeqCst);
            self.wake_at = None;
        }
        fn deadline(&self) -> Option<Instant> {
            self.wake_at
        }
        fn finish(&mut self) {
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
        /// Batches of even requests are cheap: run on the sender's thread.
        fn try_inline(&mut self, ops: Vec<u32>) -> Result<(), Vec<u32>> {
            if ops.iter().all(|op| op % 2 == 0) {
                self.inlined
                    .lock()
                    .push((std::thread::current().id(), ops.clone()));
                self.seen.lock().extend(ops);
                self.wake_at = Some(Instant::now() + Duration::from_millis(5));
                Ok(())
            } else {
                Err(ops)
            }
        }
    }

    /// While a sender holds an idle slot's turn, other requests queue
    /// behind its own; when it lets go, its thread runs its request and
    /// then what queued, one batch per round, for at most `INLINE_ROUNDS`
    /// batches; the rest, and a batch the work refuses, go to the pool,
    /// still in order.
    #[test]
    fn a_claimed_turn_runs_what_queued_behind_it_inline_then_hands_over() {
        let (slot, (seen, _, _)) = probe_slot(2);
        let inlined = slot.work.lock().as_ref().unwrap().inlined.clone();
        let claimed = slot.claim_inline(0).unwrap().expect("an idle slot's turn");
        // Queued behind the claim: batches [2, 4], [6, 8], [10, 12], then
        // [14, 15], refused inline (odd), and [16] for the pool.
        for v in [2, 4, 6, 8, 10, 12, 14, 15, 16] {
            assert!(slot.claim_inline(v).unwrap().is_none(), "{v} queued");
        }
        assert!(
            seen.lock().is_empty(),
            "nothing runs while the turn is held"
        );
        drop(claimed);
        let me = std::thread::current().id();
        let ran: Vec<_> = inlined.lock().clone();
        assert_eq!(
            ran,
            vec![
                (me, vec![0]),
                (me, vec![2, 4]),
                (me, vec![6, 8]),
                (me, vec![10, 12]),
            ],
            "the claimer ran its request and {} batches in all",
            INLINE_ROUNDS
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen.lock().len() < 10 {
            assert!(Instant::now() < deadline, "the pool never ran the rest");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(*seen.lock(), vec![0, 2, 4, 6, 8, 10, 12, 14, 15, 16]);
        assert_eq!(inlined.lock().len(), 4, "the pool ran the rest itself");
        slot.close_and_wait();
    }

    /// Requests some of which run on the sender's thread and some on the
    /// pool, from several senders at once: each slot still sees them in the
    /// order they were sent, and the deadline left by an inline request
    /// still fires.
    #[test]
    fn inline_requests_keep_order_with_queued_ones() {
        let mut slots = Vec::new();
        for _ in 0..8 {
            slots.push(probe_slot(3));
        }
        let slots = Arc::new(slots);
        let senders: Vec<_> = (0..4u32)
            .map(|t| {
                let slots = slots.clone();
                std::thread::spawn(move || {
                    for i in 0..2000u32 {
                        for (s, _) in slots.iter() {
                            // Sender t sends the values ≡ t (mod 4): senders 0
                            // and 2 only inline ones, 1 and 3 only queued ones.
                            assert!(s.send_inline(i * 4 + t).is_ok());
                        }
                    }
                })
            })
            .collect();
        for h in senders {
            h.join().unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for (s, (seen, idles, finished)) in slots.iter() {
            while idles.load(Ordering::SeqCst) == 0 {
                assert!(Instant::now() < deadline, "idle step never ran");
                std::thread::sleep(Duration::from_millis(2));
            }
            s.close_and_wait();
            let seen = seen.lock();
            assert_eq!(seen.len(), 8000);
            for t in 0..4u32 {
                let mine: Vec<u32> = seen.iter().copied().filter(|v| v % 4 == t).collect();
                let sent: Vec<u32> = (0..2000).map(|i| i * 4 + t).collect();
                assert_eq!(mine, sent, "sender {t}'s requests out of order");
            }
            assert_eq!(finished.load(Ordering::SeqCst), 1);
            assert_eq!(
                s.send_inline(2),
                Err(Refused::Closed(2)),
                "a closed slot refuses requests"
            );
        }
    }

    #[test]
    fn requests_run_in_order_idle_deadlines_fire_and_close_finishes_once() {
        let mut slots = Vec::new();
        for _ in 0..50 {
            slots.push(probe_slot(7));
        }
        for i in 0..1000u32 {
            for (s, _) in &slots {
                assert!(s.send(i).is_ok());
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for (s, (seen, idles, finished)) in &slots {
            // Every batch leaves a 5 ms deadline: the idle step must run
            // once the requests stop.
            while idles.load(Ordering::SeqCst) == 0 {
                assert!(Instant::now() < deadline, "idle step never ran");
                std::thread::sleep(Duration::from_millis(2));
            }
            s.close_and_wait();
            assert_eq!(*seen.lock(), (0..1000).collect::<Vec<_>>());
            assert_eq!(finished.load(Ordering::SeqCst), 1);
            assert_eq!(
                s.send(1),
                Err(Refused::Closed(1)),
                "a closed slot refuses requests"
            );
        }
    }

    /// A request for [`Gated`]: id, bytes, bounded.
    type GatedOp = (u32, usize, bool);

    /// A writer whose every batch waits for a permit from the test, so
    /// that the test decides when the queue drains.
    struct Gated {
        permits: Arc<(Mutex<usize>, Condvar)>,
        started: Arc<AtomicUsize>,
        seen: Arc<Mutex<Vec<u32>>>,
    }

    impl SlotWork for Gated {
        type Op = GatedOp;
        fn op_bytes(op: &GatedOp) -> usize {
            op.1
        }
        fn bounded(op: &GatedOp) -> bool {
            op.2
        }
        fn batch(&mut self, ops: Vec<GatedOp>) {
            self.started.fetch_add(1, Ordering::SeqCst);
            let (lock, cv) = &*self.permits;
            let mut n = lock.lock();
            while *n == 0 {
                cv.wait(&mut n);
            }
            *n -= 1;
            drop(n);
            self.seen.lock().extend(ops.iter().map(|o| o.0));
        }
        fn idle(&mut self) {}
        fn deadline(&self) -> Option<Instant> {
            None
        }
        fn finish(&mut self) {}
    }

    #[test]
    fn a_full_queue_refuses_data_requests_at_once_and_accepts_them_once_drained() {
        let g = Gated {
            permits: Arc::new((Mutex::new(0), Condvar::new())),
            started: Arc::default(),
            seen: Arc::default(),
        };
        let (permits, started, seen) = (g.permits.clone(), g.started.clone(), g.seen.clone());
        let grant = |n: usize| {
            *permits.0.lock() += n;
            permits.1.notify_all();
        };
        let wait_started = |n: usize| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while started.load(Ordering::SeqCst) < n {
                assert!(Instant::now() < deadline, "batch {n} never started");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        // One request per batch (each counts at least one byte).
        let s = Slot::new(g, 1, QueueLimit { bytes: 100, ops: 3 });
        assert!(s.send((0, 1, true)).is_ok());
        wait_started(1);
        // The writer is busy with request 0 and the queue is empty: an
        // empty queue takes any one request, even one over the byte limit.
        assert!(s.send((1, 500, true)).is_ok());
        assert_eq!(s.send((2, 1, true)), Err(Refused::Full((2, 1, true))));
        grant(1);
        wait_started(2);
        // Request 1 is being written; the queue is empty again.
        assert!(s.send((3, 40, true)).is_ok());
        assert!(s.send((4, 40, true)).is_ok());
        assert_eq!(
            s.send((5, 40, true)),
            Err(Refused::Full((5, 40, true))),
            "120 bytes would pass the 100-byte limit"
        );
        assert!(s.send((6, 10, true)).is_ok(), "90 bytes fit");
        assert_eq!(
            s.send((7, 1, true)),
            Err(Refused::Full((7, 1, true))),
            "three requests queued: the count limit"
        );
        assert!(
            s.send((8, 0, false)).is_ok(),
            "a control request is queued even when the queue is full"
        );
        grant(usize::MAX / 2);
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen.lock().len() < 6 {
            assert!(Instant::now() < deadline, "the queue never drained");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            *seen.lock(),
            vec![0, 1, 3, 4, 6, 8],
            "refused requests were never run"
        );
        // Drained: data requests are accepted again.
        assert!(s.send((9, 40, true)).is_ok());
        s.close_and_wait();
        assert_eq!(seen.lock().last(), Some(&9));
    }

    struct Counted {
        passes: AtomicUsize,
    }

    impl Maintained for Counted {
        fn maintain(self: Arc<Self>) -> Option<Duration> {
            self.passes.fetch_add(1, Ordering::SeqCst);
            Some(Duration::from_millis(5))
        }
    }

    #[test]
    fn maintenance_runs_each_registered_log_until_it_is_dropped() {
        let logs: Vec<Arc<Counted>> = (0..20)
            .map(|_| {
                Arc::new(Counted {
                    passes: AtomicUsize::new(0),
                })
            })
            .collect();
        let ids: Vec<u64> = logs
            .iter()
            .map(|l| {
                let w: Weak<dyn Maintained> = Arc::downgrade(&(l.clone() as Arc<dyn Maintained>));
                register(w, Duration::from_millis(5))
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        for l in &logs {
            while l.passes.load(Ordering::SeqCst) < 3 {
                assert!(Instant::now() < deadline, "maintenance never ran");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        unregister(ids[0]);
        std::thread::sleep(Duration::from_millis(20));
        let before = logs[0].passes.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            logs[0].passes.load(Ordering::SeqCst) <= before + 1,
            "an unregistered log is not maintained any more"
        );
        for id in ids {
            unregister(id);
        }
    }
}
