//! The global allocator, and giving freed heap memory back to the system
//! after a load.
//!
//! With the `jemalloc` feature (the default), jemalloc is the global
//! allocator, set up by [`MALLOC_CONF`]: a background thread returns pages freed by a burst
//! (connection buffers, subscriber batches, a flood of messages) to the
//! system within about two seconds (dirty pages are advised `MADV_FREE`
//! after [`JEMALLOC_DECAY_MS`], then `MADV_DONTNEED` after as long again),
//! with no threshold raised by earlier large blocks and no per-arena
//! "top" kept. Nothing else runs: [`start_trimmer`] does nothing. An
//! operator's own `_RJEM_MALLOC_CONF` in the environment overrides these
//! settings. Measured against glibc's malloc on one build (BENCHMARKS.md,
//! "Memory back near idle after the flood"): the same recording and core
//! NATS throughput, and a node back near its idle size seconds after a
//! flood or a benchmark, where glibc keeps tens of MiB.
//!
//! Without it (`--no-default-features`, glibc's malloc), the allocator keeps memory freed by a
//! burst inside its arenas: it returns only the free top of the main heap
//! on its own, so RSS stays at the peak long after the load.
//! [`start_trimmer`] runs one small thread that looks at the allocator's
//! free bytes once per [`TICK`] and, when at least [`TRIM_GROWTH`] more
//! became free since the last look that trimmed, calls `malloc_trim(0)`,
//! which hands every whole free page of every arena back
//! (`MADV_DONTNEED`). Under a steady load the free bytes stay level and
//! nothing is trimmed; after a burst ends they jump and the pages go back
//! within a tick or two.
//!
//! [`malloc_trim`](trim_now) walks each arena's free chunks but leaves the
//! free *top* of a thread arena's heap alone; glibc gives that back only
//! when a `free` leaves more than its trim threshold there, and it raises
//! that threshold (up to 64 MiB) and the mmap threshold (up to 32 MiB)
//! each time a large mapped block is freed. After a burst that freed a
//! few journal frames, a dozen arenas could each keep tens of MiB.
//! With `LIFTBRIDGE_MALLOC_TUNING=1`, [`start_trimmer`] fixes both
//! thresholds first (`tune`): blocks of [`MMAP_THRESHOLD`] or more get
//! their own mapping, unmapped when freed, and a heap's free top beyond
//! [`TRIM_THRESHOLD`] is returned at once. It is not the default there:
//! the extra mappings and returns cost 12–24 % of the recording
//! throughput of plain NATS publishes (measured back to back on one
//! build). An operator's own setting of either (`GLIBC_TUNABLES`
//! `glibc.malloc.mmap_threshold` / `trim_threshold`, or
//! `MALLOC_MMAP_THRESHOLD_` / `MALLOC_TRIM_THRESHOLD_`) is kept.
//!
//! Invariants: the allocator's settings are fixed once at start-up; after
//! that this module only reads allocator statistics and asks the allocator
//! to release free pages; it never frees or touches live memory, takes no
//! lock of ours, and costs nothing where neither allocator applies (glibc
//! code is a no-op outside Linux with glibc).

use std::time::Duration;

#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Whether jemalloc serves this process's allocations (the `jemalloc`
/// feature, on by default).
pub fn using_jemalloc() -> bool {
    cfg!(feature = "jemalloc")
}

/// How long jemalloc keeps freed pages before advising the kernel, in
/// each of its two steps (dirty → `MADV_FREE`, then → `MADV_DONTNEED`):
/// long enough that a steady load reuses its pages instead of faulting
/// them in again, short enough that a node is back near idle seconds
/// after a burst.
pub const JEMALLOC_DECAY_MS: u32 = 1000;

/// jemalloc's options, read by jemalloc when it starts (before `main`):
/// a background thread purges freed pages on the [`JEMALLOC_DECAY_MS`]
/// schedule, so no allocating thread pays for it and an idle node still
/// returns them. jemalloc looks the symbol up by name (its prefixed
/// `malloc_conf`).
#[cfg(feature = "jemalloc")]
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: Option<&'static std::ffi::c_char> = {
    const CONF: &std::ffi::CStr = c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000";
    // SAFETY: a NUL-terminated string literal, alive for the whole run.
    Some(unsafe { &*CONF.as_ptr() })
};

/// How often the allocator's free bytes are looked at.
pub const TICK: Duration = Duration::from_secs(1);
/// Newly free bytes that make a trim worth its cost (a walk over the
/// arenas' free chunks, holding each arena's lock briefly).
pub const TRIM_GROWTH: usize = 2 << 20;
/// Blocks at least this large are mapped on their own and unmapped when
/// freed (journal frames, large batches, grown vectors). Below it the
/// arenas serve: the NATS read chunks (64 KiB) and message buffers stay
/// cheap to allocate.
pub const MMAP_THRESHOLD: usize = 1 << 20;
/// A heap's free top larger than this goes back to the system when a
/// `free` leaves it there (glibc's default is 128 KiB, raised with the
/// mmap threshold; fixed here so it is never raised).
pub const TRIM_THRESHOLD: usize = 4 << 20;

/// Starts the trimming thread once per process (glibc); later calls, and
/// any call with jemalloc, do nothing.
pub fn start_trimmer() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            if using_jemalloc() {
                return;
            }
            tune();
            let spawned = std::thread::Builder::new()
                .name("mem-trim".into())
                .stack_size(64 << 10)
                .spawn(trim_loop);
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the memory trimmer; freed memory stays with the allocator");
            }
        }
    });
}

/// Fixes glibc's mmap and trim thresholds (see the module documentation)
/// when `LIFTBRIDGE_MALLOC_TUNING=1`, except those the operator set.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune() {
    let env = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
    if env("LIFTBRIDGE_MALLOC_TUNING").as_deref() != Some("1") {
        return;
    }
    let tunables = env("GLIBC_TUNABLES").unwrap_or_default();
    let set = [
        (
            libc::M_MMAP_THRESHOLD,
            MMAP_THRESHOLD,
            "glibc.malloc.mmap_threshold",
            "MALLOC_MMAP_THRESHOLD_",
        ),
        (
            libc::M_TRIM_THRESHOLD,
            TRIM_THRESHOLD,
            "glibc.malloc.trim_threshold",
            "MALLOC_TRIM_THRESHOLD_",
        ),
    ];
    for (param, value, tunable, var) in set {
        if tunables.contains(tunable) || env(var).is_some() {
            continue;
        }
        let value = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes the allocator's parameters; both
        // values are within glibc's accepted range.
        if unsafe { libc::mallopt(param, value) } != 1 {
            tracing::warn!(param, value, "mallopt refused an allocator setting");
        }
    }
}

/// What the allocator holds, for `/metrics`: after a load, resident
/// memory well above `in_use + mapped` (glibc) or `in_use + free`
/// (jemalloc) is memory held outside the heap's books; `free` far above
/// zero long after a load is memory the allocator kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Which allocator: `"glibc"` or `"jemalloc"`.
    pub name: &'static str,
    /// Bytes allocated and not freed.
    pub in_use: usize,
    /// Bytes the allocator holds beyond `in_use` (glibc: free inside its
    /// arenas, resident or already returned; jemalloc: resident minus
    /// allocated — freed pages not yet purged, fragmentation, metadata).
    pub free: usize,
    /// glibc: bytes in blocks mapped on their own (at least the mmap
    /// threshold); jemalloc: bytes in its mapped extents (`stats.mapped`).
    pub mapped: usize,
}

/// The allocator's statistics (glibc's `mallinfo2`, jemalloc's `stats.*`),
/// `None` for another allocator.
pub fn allocator_stats() -> Option<AllocatorStats> {
    #[cfg(feature = "jemalloc")]
    {
        if using_jemalloc() {
            return jemalloc_stats();
        }
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let mi = unsafe { libc::mallinfo2() };
        Some(AllocatorStats {
            name: "glibc",
            in_use: mi.uordblks,
            free: mi.fordblks,
            mapped: mi.hblkhd,
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// jemalloc's statistics (a snapshot taken when its epoch advances).
#[cfg(feature = "jemalloc")]
fn jemalloc_stats() -> Option<AllocatorStats> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().ok()?;
    let in_use = stats::allocated::read().ok()?;
    let resident = stats::resident::read().ok()?;
    Some(AllocatorStats {
        name: "jemalloc",
        in_use,
        free: resident.saturating_sub(in_use),
        mapped: stats::mapped::read().ok()?,
    })
}

/// Trims done by the trimming thread since the process started.
pub fn trims() -> u64 {
    TRIMS.load(std::sync::atomic::Ordering::Relaxed)
}

static TRIMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bytes the allocator holds beyond those in use ([`AllocatorStats::free`]),
/// `None` for another allocator.
pub fn allocator_free_bytes() -> Option<usize> {
    allocator_stats().map(|a| a.free)
}

/// Returns whole free pages of every arena to the system now (glibc; with
/// jemalloc its background thread does this on its own schedule).
pub fn trim_now() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if !using_jemalloc() {
            // SAFETY: malloc_trim releases only free memory of the allocator.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_loop() {
    // The free bytes after the last trim (or the lowest seen since): a
    // trim is due when this many more are free again.
    let mut floor = allocator_free_bytes().unwrap_or(0);
    loop {
        std::thread::sleep(TICK);
        let free = allocator_free_bytes().unwrap_or(0);
        if free < floor {
            // Free memory was reused: what is freed next counts from here.
            floor = free;
        } else if free - floor >= TRIM_GROWTH {
            trim_now();
            TRIMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            floor = free;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the thresholds fixed, a block over [`MMAP_THRESHOLD`] is mapped
    /// on its own (and unmapped when freed) even after a larger block was
    /// freed — which, untuned, raises glibc's threshold past it so that it
    /// would stay in an arena. Runs in a child process of its own: the
    /// allocator's counters are process-wide and other tests allocate.
    #[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
    #[test]
    fn tuned_thresholds_keep_large_blocks_mapped() {
        const NAME: &str = "memory::tests::tuned_thresholds_keep_large_blocks_mapped";
        if std::env::var_os("LB_MEMORY_TEST_CHILD").is_none() {
            let exe = std::env::current_exe().expect("test binary");
            let out = std::process::Command::new(exe)
                .args(["--exact", NAME, "--test-threads", "1"])
                .env("LB_MEMORY_TEST_CHILD", "1")
                .env_remove("GLIBC_TUNABLES")
                .env_remove("MALLOC_MMAP_THRESHOLD_")
                .env_remove("MALLOC_TRIM_THRESHOLD_")
                .env("LIFTBRIDGE_MALLOC_TUNING", "1")
                .output()
                .expect("run the child");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "child: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        tune();
        let big = std::hint::black_box(vec![1u8; 24 << 20]);
        drop(big);
        let stats = || allocator_stats().expect("glibc statistics");
        let before = stats().mapped;
        let block = std::hint::black_box(vec![2u8; 2 << 20]);
        let during = stats().mapped;
        assert!(
            during >= before + (2 << 20),
            "a 2 MiB block is mapped on its own: {before} -> {during}"
        );
        drop(block);
        let after = stats().mapped;
        assert!(
            after + (2 << 20) <= during,
            "and unmapped when freed: {during} -> {after}"
        );
    }

    /// A freed burst is counted as free by the allocator, and trimming
    /// leaves the allocator working.
    #[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
    #[test]
    fn a_freed_burst_shows_as_free_bytes_and_trims() {
        let before = allocator_free_bytes().expect("glibc statistics");
        // Many small blocks (below the mmap threshold, so they come from
        // the arenas), then free all but the last to leave a hole.
        let mut blocks: Vec<Vec<u8>> = (0..4096).map(|i| vec![i as u8; 4000]).collect();
        let keep = blocks.pop().expect("a block");
        drop(blocks);
        let after = allocator_free_bytes().expect("glibc statistics");
        assert!(
            after >= before + (8 << 20),
            "16 MB freed should be free in the arenas: {before} -> {after}"
        );
        trim_now();
        let v = vec![7u8; 1 << 16];
        assert_eq!(v.iter().map(|&b| b as usize).sum::<usize>(), 7 << 16);
        assert_eq!(keep[0], 255);
    }

    /// jemalloc runs with the options of [`MALLOC_CONF`]: the symbol is
    /// linked in and read.
    #[cfg(feature = "jemalloc")]
    #[test]
    fn jemalloc_runs_with_background_purging() {
        if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return; // the operator's settings win, by design
        }
        assert!(tikv_jemalloc_ctl::opt::background_thread::read().expect("opt.background_thread"));
        for key in [&b"opt.dirty_decay_ms\0"[..], &b"opt.muzzy_decay_ms\0"[..]] {
            // SAFETY: both options are ssize_t.
            let ms: isize = unsafe { tikv_jemalloc_ctl::raw::read(key) }.expect("decay option");
            assert_eq!(
                ms,
                JEMALLOC_DECAY_MS as isize,
                "{}",
                String::from_utf8_lossy(key)
            );
        }
        let a = allocator_stats().expect("jemalloc statistics");
        assert_eq!(a.name, "jemalloc");
        assert!(a.in_use > 0 && a.mapped >= a.in_use, "{a:?}");
    }

    /// A freed burst goes back to the system within seconds with nothing
    /// but jemalloc's background thread. Runs in a child process of its
    /// own: resident memory is process-wide and other tests allocate.
    #[cfg(all(feature = "jemalloc", target_os = "linux"))]
    #[test]
    fn jemalloc_returns_a_freed_burst() {
        const NAME: &str = "memory::tests::jemalloc_returns_a_freed_burst";
        if std::env::var_os("LB_MEMORY_TEST_CHILD").is_none() {
            let exe = std::env::current_exe().expect("test binary");
            let out = std::process::Command::new(exe)
                .args(["--exact", NAME, "--test-threads", "1"])
                .env("LB_MEMORY_TEST_CHILD", "1")
                .env_remove("_RJEM_MALLOC_CONF")
                .output()
                .expect("run the child");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "child: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        // The process's RSS as the kernel counts it (pages only advised
        // `MADV_FREE` still count there).
        let resident = || {
            let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
            let pages: usize = statm
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse().ok())
                .expect("resident pages");
            // SAFETY: sysconf only reads a system constant.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            pages * usize::try_from(page).unwrap_or(4096)
        };
        // 64 MiB in blocks of 4000 bytes, every page touched, then freed.
        let blocks: Vec<Vec<u8>> = (0..16_384).map(|i| vec![i as u8; 4000]).collect();
        let peak = resident();
        assert!(peak >= 60 << 20, "the burst is resident: {peak}");
        drop(std::hint::black_box(blocks));
        // Two decay periods, plus slack for a loaded machine.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut now = resident();
        while now > peak - (48 << 20) {
            assert!(
                std::time::Instant::now() < deadline,
                "freed pages still resident (RSS) after 30 s: {peak} -> {now}"
            );
            std::thread::sleep(Duration::from_millis(200));
            now = resident();
        }
    }
}
