//! Load generators and side-by-side benchmarks.

pub mod cluster;
pub mod lb;
pub mod leaf;
pub mod nats;
pub mod routes;
pub mod store;

use std::path::PathBuf;

/// The first file called `name` in a directory of `PATH`.
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The median of `values` (the upper one of an even count; 0 for none):
/// what a benchmark that repeats a measurement reports.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// A loopback port that was free a moment ago, for servers started by a
/// benchmark or a test. Taken from 10000–31999, below the kernel's
/// ephemeral range (32768–60999), where any outgoing connection could take
/// it as its source port before the server binds it; each port is handed
/// out once per process (a counter from a per-process offset).
pub fn free_port() -> anyhow::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 10_000;
    const SPAN: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static OFFSET: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let offset = *OFFSET.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        std::process::id().wrapping_mul(7919).wrapping_add(nanos) % SPAN
    });
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (offset + n) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free loopback port in {LOW}..{}", LOW + SPAN)
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_is_the_middle_value() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![5.0]), 5.0);
        assert_eq!(median(vec![4.0, 1.0]), 4.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
