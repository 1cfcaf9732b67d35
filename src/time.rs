//! The node's one wall clock reading: Unix time in nanoseconds.
//!
//! Timestamps stamped on records, carried in metadata commands and shown by
//! the admin API all come from [`now_ns`], so they are comparable with each
//! other. Pure and cheap; it must not grow a cache or a second rule.

use std::time::{SystemTime, UNIX_EPOCH};

/// Current time in Unix nanoseconds: 0 for a clock before 1970, `i64::MAX`
/// past the year 2262 (never a panic).
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn now_is_after_2020_and_moves_forward() {
        let a = super::now_ns();
        assert!(a > 1_577_836_800_000_000_000, "{a}");
        let b = super::now_ns();
        assert!(b >= a);
    }
}
