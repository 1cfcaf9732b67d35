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
//! Invariants: it only reads allocator statistics and asks the allocator
//! to release free pages; it never frees or touches live memory, takes no
//! lock of ours, and costs nothing on other allocators or platforms (it is
//! a no-op outside Linux with glibc).

use std::time::Duration;

/// How often the allocator's free bytes are looked at.
pub const TICK: Duration = Duration::from_secs(1);
/// Newly free bytes that make a trim worth its cost (a walk over the
/// arenas' free chunks, holding each arena's lock briefly).
pub const TRIM_GROWTH: usize = 2 << 20;

/// Starts the trimming thread once per process; later calls do nothing.
pub fn start_trimmer() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
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

/// Bytes free inside the allocator's arenas (glibc), `None` elsewhere.
pub fn allocator_free_bytes() -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let mi = unsafe { libc::mallinfo2() };
        Some(mi.fordblks)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
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
            floor = free;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
