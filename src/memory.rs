//! Giving freed heap memory back to the system after a load.
//!
//! glibc's allocator keeps memory freed by a burst (connection buffers,
//! subscriber batches, a flood of messages) inside its arenas: it returns
//! only the free top of the main heap on its own, so RSS stays at the
//! peak long after the load. [`start_trimmer`] runs one small thread that
//! looks at the allocator's free bytes once per [`TICK`] and, when at
//! least [`TRIM_GROWTH`] more became free since the last look that
//! trimmed, calls `malloc_trim(0)`, which hands every whole free page of
//! every arena back (`MADV_DONTNEED`). Under a steady load the free bytes
//! stay level and nothing is trimmed; after a burst ends they jump and the
//! pages go back within a tick or two.
//!
//! [`malloc_trim`](trim_now) walks each arena's free chunks but leaves the
//! free *top* of a thread arena's heap alone; glibc gives that back only
//! when a `free` leaves more than its trim threshold there, and it raises
//! that threshold (up to 64 MiB) and the mmap threshold (up to 32 MiB)
//! each time a large mapped block is freed. After a burst that freed a
//! few journal frames, a dozen arenas could each keep tens of MiB.
//! With `LIFTBRIDGE_MALLOC_TUNING=1`, [`start_trimmer`] fixes both
//! thresholds first ([`tune`]): blocks of [`MMAP_THRESHOLD`] or more get
//! their own mapping, unmapped when freed, and a heap's free top beyond
//! [`TRIM_THRESHOLD`] is returned at once. It is not the default: the
//! extra mappings and returns cost 12–24 % of the recording throughput of
//! plain NATS publishes (measured back to back on one build). An
//! operator's own setting of either (`GLIBC_TUNABLES`
//! `glibc.malloc.mmap_threshold` / `trim_threshold`, or
//! `MALLOC_MMAP_THRESHOLD_` / `MALLOC_TRIM_THRESHOLD_`) is kept.
//!
//! Invariants: it sets the allocator's thresholds once at start-up, then
//! only reads allocator statistics and asks the allocator to release free
//! pages; it never frees or touches live memory, takes no
//! lock of ours, and costs nothing on other allocators or platforms (it is
//! a no-op outside Linux with glibc).

use std::time::Duration;

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

/// Starts the trimming thread once per process; later calls do nothing.
pub fn start_trimmer() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
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

/// What the allocator holds (glibc's `mallinfo2`), for `/metrics`: after a
/// load, resident memory well above `in_use + mapped` is free memory the
/// allocator kept; close to it, live data holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Bytes in use in the arenas (allocated and not freed).
    pub in_use: usize,
    /// Bytes free in the arenas (resident or not).
    pub free: usize,
    /// Bytes in blocks mapped on their own (at least the mmap threshold).
    pub mapped: usize,
}

/// The allocator's statistics (glibc), `None` elsewhere.
pub fn allocator_stats() -> Option<AllocatorStats> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let mi = unsafe { libc::mallinfo2() };
        Some(AllocatorStats {
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

/// Trims done by the trimming thread since the process started.
pub fn trims() -> u64 {
    TRIMS.load(std::sync::atomic::Ordering::Relaxed)
}

static TRIMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bytes free inside the allocator's arenas (glibc), `None` elsewhere.
pub fn allocator_free_bytes() -> Option<usize> {
    allocator_stats().map(|a| a.free)
}

/// Returns whole free pages of every arena to the system now.
pub fn trim_now() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim releases only free memory of the allocator.
    unsafe {
        libc::malloc_trim(0);
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
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
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
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
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
}
