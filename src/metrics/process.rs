//! Process metrics read from `/proc/self` at scrape time: resident and
//! virtual memory, CPU seconds, open and maximum file descriptors, start
//! time, plus the node's uptime and build information.
//!
//! The parsers are pure functions over the file contents (unit-tested
//! below); [`ProcessCollector`] does the reading and is only ever run from a
//! blocking thread (the scrape renders off the async workers). On systems
//! without `/proc` the process series are simply left out.

use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

/// Why a `/proc` file could not be understood.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProcError {
    /// `/proc/self/stat` lacks the `(comm)` field or enough fields after it.
    #[error("/proc/self/stat: {0}")]
    Stat(&'static str),
    /// `/proc/stat` has no `btime` line.
    #[error("/proc/stat: no btime line")]
    NoBootTime,
    /// `/proc/self/limits` has no usable "Max open files" line.
    #[error("/proc/self/limits: no Max open files line")]
    NoMaxFiles,
}

/// The fields of `/proc/self/stat` the metrics use (raw units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// User CPU time, clock ticks.
    pub utime: u64,
    /// System CPU time, clock ticks.
    pub stime: u64,
    /// Start time after boot, clock ticks.
    pub starttime: u64,
    /// Virtual memory size, bytes.
    pub vsize: u64,
    /// Resident set size, pages.
    pub rss_pages: u64,
}

/// Parses `/proc/<pid>/stat`. The command name may contain spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat(s: &str) -> Result<ProcStat, ProcError> {
    let close = s.rfind(')').ok_or(ProcError::Stat("no command field"))?;
    // Fields after the command start with field 3 (state): field n is at
    // index n - 3.
    let f: Vec<&str> = s[close + 1..].split_whitespace().collect();
    let num = |field: usize| -> Result<u64, ProcError> {
        f.get(field - 3)
            .ok_or(ProcError::Stat("too few fields"))?
            .parse::<u64>()
            .map_err(|_| ProcError::Stat("a numeric field is not a number"))
    };
    Ok(ProcStat {
        utime: num(14)?,
        stime: num(15)?,
        starttime: num(22)?,
        vsize: num(23)?,
        rss_pages: num(24)?,
    })
}

/// Boot time (Unix seconds) from the `btime` line of `/proc/stat`.
pub fn parse_boot_time(s: &str) -> Result<u64, ProcError> {
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or(ProcError::NoBootTime)
}

/// Soft limit of open files from `/proc/<pid>/limits` (`None` =
/// unlimited).
pub fn parse_max_fds(s: &str) -> Result<Option<u64>, ProcError> {
    let line = s
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .ok_or(ProcError::NoMaxFiles)?;
    let soft = line["Max open files".len()..]
        .split_whitespace()
        .next()
        .ok_or(ProcError::NoMaxFiles)?;
    if soft == "unlimited" {
        return Ok(None);
    }
    soft.parse().map(Some).map_err(|_| ProcError::NoMaxFiles)
}

fn sysconf(name: libc::c_int, fallback: u64) -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(name) };
    if v > 0 {
        v as u64
    } else {
        fallback
    }
}

/// A snapshot of the process values, in Prometheus units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessSnapshot {
    /// Resident memory, bytes.
    pub resident_bytes: u64,
    /// Virtual memory, bytes.
    pub virtual_bytes: u64,
    /// User + system CPU, seconds.
    pub cpu_seconds: f64,
    /// Process start, Unix seconds.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// Soft limit on file descriptors (`None` = unlimited).
    pub max_fds: Option<u64>,
}

/// Reads the snapshot from `/proc/self` (blocking file reads). `None` when
/// `/proc` is unavailable or unreadable.
pub fn read_snapshot() -> Option<ProcessSnapshot> {
    let stat = parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?).ok()?;
    let ticks = sysconf(libc::_SC_CLK_TCK, 100) as f64;
    let page = sysconf(libc::_SC_PAGESIZE, 4096);
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| parse_boot_time(&s).ok())
        .unwrap_or(0);
    let open_fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    let max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| parse_max_fds(&s).ok())
        .flatten();
    Some(ProcessSnapshot {
        resident_bytes: stat.rss_pages * page,
        virtual_bytes: stat.vsize,
        cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
        start_time_seconds: boot as f64 + stat.starttime as f64 / ticks,
        open_fds,
        max_fds,
    })
}

/// Process series (`process_*`), `liftbridge_uptime_seconds` and
/// `liftbridge_build_info`.
#[derive(Debug)]
pub struct ProcessCollector {
    started: Instant,
}

impl ProcessCollector {
    /// A collector whose uptime counts from now (node start).
    pub fn new() -> ProcessCollector {
        ProcessCollector {
            started: Instant::now(),
        }
    }
}

impl Default for ProcessCollector {
    fn default() -> Self {
        ProcessCollector::new()
    }
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: f64,
) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let b = Unit::Bytes;
        let s = Unit::Seconds;
        if let Some(p) = read_snapshot() {
            gauge(
                &mut enc,
                "process_resident_memory",
                "Resident memory size.",
                Some(&b),
                p.resident_bytes as f64,
            )?;
            gauge(
                &mut enc,
                "process_virtual_memory",
                "Virtual memory size.",
                Some(&b),
                p.virtual_bytes as f64,
            )?;
            let m = enc.encode_descriptor(
                "process_cpu",
                "Total user and system CPU time spent.",
                Some(&s),
                MetricType::Counter,
            )?;
            ConstCounter::new(p.cpu_seconds).encode(m)?;
            gauge(
                &mut enc,
                "process_open_fds",
                "Number of open file descriptors.",
                None,
                p.open_fds as f64,
            )?;
            if let Some(max) = p.max_fds {
                gauge(
                    &mut enc,
                    "process_max_fds",
                    "Maximum number of open file descriptors.",
                    None,
                    max as f64,
                )?;
            }
            gauge(
                &mut enc,
                "process_start_time",
                "Start time of the process since the Unix epoch.",
                Some(&s),
                p.start_time_seconds,
            )?;
        }
        if let Some(a) = crate::memory::allocator_stats() {
            gauge(
                &mut enc,
                "liftbridge_allocator_in_use",
                "Heap bytes allocated and not freed.",
                Some(&b),
                a.in_use as f64,
            )?;
            gauge(
                &mut enc,
                "liftbridge_allocator_free",
                if a.name == "jemalloc" {
                    "Heap bytes jemalloc holds resident beyond those in use (freed pages not yet returned, fragmentation, metadata)."
                } else {
                    "Heap bytes free inside glibc's arenas (resident or already returned)."
                },
                Some(&b),
                a.free as f64,
            )?;
            gauge(
                &mut enc,
                "liftbridge_allocator_mapped",
                if a.name == "jemalloc" {
                    "Bytes in jemalloc's active extents (pages holding allocations)."
                } else {
                    "Bytes of blocks glibc mapped on their own (at least the mmap threshold)."
                },
                Some(&b),
                a.mapped as f64,
            )?;
            let m = enc.encode_descriptor(
                "liftbridge_allocator_trims",
                "Times the mem-trim thread returned free heap pages to the system after a load (glibc; jemalloc returns them on its own).",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(crate::memory::trims()).encode(m)?;
        }
        gauge(
            &mut enc,
            "liftbridge_uptime",
            "Time since the node started.",
            Some(&s),
            self.started.elapsed().as_secs_f64(),
        )?;
        let mut m = enc.encode_descriptor(
            "liftbridge_build_info",
            "Build information; the value is always 1.",
            None,
            MetricType::Gauge,
        )?;
        let labels = [("version", env!("CARGO_PKG_VERSION"))];
        ConstGauge::new(1i64).encode(m.encode_family(&labels)?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    const STAT: &str = "4242 (liftbridge (x) y) S 1 4242 4242 0 -1 4194560 2135 0 0 0 \
        150 25 0 0 20 0 9 0 123456 987654321 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

    #[test]
    fn stat_fields_are_counted_after_the_last_paren() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(
            s,
            ProcStat {
                utime: 150,
                stime: 25,
                starttime: 123456,
                vsize: 987654321,
                rss_pages: 2048,
            }
        );
    }

    #[test]
    fn bad_stat_is_an_error_not_a_panic() {
        assert_eq!(
            parse_stat("12 nocomm S 1"),
            Err(ProcError::Stat("no command field"))
        );
        assert_eq!(
            parse_stat("12 (x) S 1 2"),
            Err(ProcError::Stat("too few fields"))
        );
        let bad = STAT.replace(" 150 ", " x ");
        assert_eq!(
            parse_stat(&bad),
            Err(ProcError::Stat("a numeric field is not a number"))
        );
    }

    #[test]
    fn boot_time_and_fd_limit() {
        let stat = "cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 5\nctxt 9\nbtime 1700000000\nprocesses 7\n";
        assert_eq!(parse_boot_time(stat), Ok(1_700_000_000));
        assert_eq!(parse_boot_time("cpu 1\n"), Err(ProcError::NoBootTime));
        let limits =
            "Limit                     Soft Limit           Hard Limit           Units     \n\
            Max cpu time              unlimited            unlimited            seconds   \n\
            Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Ok(Some(1024)));
        let unl = limits.replace(
            "1024                 524288",
            "unlimited            unlimited",
        );
        assert_eq!(parse_max_fds(&unl), Ok(None));
        assert_eq!(parse_max_fds("nothing"), Err(ProcError::NoMaxFiles));
    }

    #[test]
    fn live_snapshot_is_plausible() {
        let p = read_snapshot().expect("/proc is available on Linux");
        assert!(p.resident_bytes > 1 << 20, "{p:?}");
        assert!(p.virtual_bytes >= p.resident_bytes, "{p:?}");
        assert!(p.open_fds >= 3, "{p:?}");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            p.start_time_seconds > now - 3600.0 && p.start_time_seconds <= now + 1.0,
            "{p:?}"
        );
    }
}
