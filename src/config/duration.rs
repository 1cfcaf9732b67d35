//! The one Go-duration parser (`1h30m`, `1.5s`, `500ms`, `10µs`), shared by
//! the liftbridge.yaml loader and the NATS `.conf` parser.
//!
//! Syntax as Go's `time.ParseDuration`: a sequence of decimal numbers, each
//! with an optional fraction and a unit (`ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`,
//! `h`), an optional leading `+`. Arithmetic is exact (integer nanoseconds),
//! and anything beyond `u64` nanoseconds (~584 years) is out of range.
//! Negative durations are refused: no setting of ours means "before now".
//! The two surfaces differ only in what a bare number means ([`BareNumber`]).
//! Pure code: no I/O, never panics on input.

use std::time::Duration;

/// What a number without a unit means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BareNumber {
    /// Nanoseconds, as Go's `time.Duration(n)` cast reads numbers
    /// (Liftbridge's YAML loader).
    Nanoseconds,
    /// Refused, except `0` (NATS config: the caller reads bare numbers as
    /// seconds from the typed value instead).
    Refused,
}

/// Why a string is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing but whitespace.
    #[error("empty duration")]
    Empty,
    /// A leading `-`.
    #[error("duration cannot be negative")]
    Negative,
    /// Not Go duration syntax.
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A number without a known unit.
    #[error("missing or unknown unit in duration {0:?} (use ns, us, ms, s, m, h)")]
    Unit(String),
    /// More than `u64` nanoseconds.
    #[error("duration {0:?} out of range")]
    OutOfRange(String),
}

const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a Go duration string; `bare` says what a number without a unit
/// means.
pub fn parse_go_duration(s: &str, bare: BareNumber) -> Result<Duration, DurationError> {
    let s = s.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.starts_with('-') {
        return Err(DurationError::Negative);
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return match bare {
            BareNumber::Nanoseconds => s
                .parse::<u64>()
                .map(Duration::from_nanos)
                .map_err(|_| DurationError::OutOfRange(s.to_string())),
            BareNumber::Refused if s.bytes().all(|b| b == b'0') => Ok(Duration::ZERO),
            BareNumber::Refused => Err(DurationError::Unit(s.to_string())),
        };
    }
    let mut rest = s;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(r) = rest.strip_prefix('.') {
            let frac_len = r.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &r[..frac_len];
            rest = &r[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DurationError::Invalid(s.to_string()));
        }
        // Longest unit first among those sharing a prefix ("ms" before "m").
        let Some((unit, scale)) = UNITS
            .iter()
            .filter(|(u, _)| rest.starts_with(u))
            .max_by_key(|(u, _)| u.len())
        else {
            return Err(DurationError::Unit(s.to_string()));
        };
        rest = &rest[unit.len()..];
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse()
                .map_err(|_| DurationError::OutOfRange(s.to_string()))?
        };
        let mut value = int
            .checked_mul(*scale)
            .ok_or_else(|| DurationError::OutOfRange(s.to_string()))?;
        if !frac_part.is_empty() {
            // Keep at most 18 fractional digits: beyond a nanosecond of an hour.
            let digits = &frac_part[..frac_part.len().min(18)];
            let frac: u128 = digits
                .parse()
                .map_err(|_| DurationError::Invalid(s.to_string()))?;
            value += frac * scale / 10u128.pow(digits.len() as u32);
        }
        total = total
            .checked_add(value)
            .ok_or_else(|| DurationError::OutOfRange(s.to_string()))?;
    }
    let ns = u64::try_from(total).map_err(|_| DurationError::OutOfRange(s.to_string()))?;
    Ok(Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_numbers_follow_the_surface() {
        use BareNumber::*;
        assert_eq!(
            parse_go_duration("1500", Nanoseconds),
            Ok(Duration::from_nanos(1500))
        );
        assert_eq!(
            parse_go_duration("2", Refused),
            Err(DurationError::Unit("2".into()))
        );
        assert_eq!(parse_go_duration("0", Refused), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("0", Nanoseconds), Ok(Duration::ZERO));
    }

    #[test]
    fn syntax_is_shared() {
        for bare in [BareNumber::Nanoseconds, BareNumber::Refused] {
            let d = |s| parse_go_duration(s, bare);
            assert_eq!(d("1m30s"), Ok(Duration::from_secs(90)));
            assert_eq!(d("+1.5h"), Ok(Duration::from_secs(5400)));
            assert_eq!(d(" 300ms "), Ok(Duration::from_millis(300)));
            assert_eq!(d("10μs"), Ok(Duration::from_micros(10)));
            assert_eq!(d(""), Err(DurationError::Empty));
            assert_eq!(d("-1s"), Err(DurationError::Negative));
            assert!(matches!(d("3d"), Err(DurationError::Unit(_))));
            assert!(matches!(d(".s"), Err(DurationError::Invalid(_))));
            assert!(matches!(
                d("99999999999999999999h"),
                Err(DurationError::OutOfRange(_))
            ));
        }
    }

    proptest::proptest! {
        /// Any string parses or is refused, never a panic; a number of
        /// milliseconds written with a unit reads back exactly.
        #[test]
        fn never_panics(s in "\\PC{0,24}", ms in 0u64..1_000_000_000) {
            let _ = parse_go_duration(&s, BareNumber::Nanoseconds);
            let _ = parse_go_duration(&s, BareNumber::Refused);
            proptest::prop_assert_eq!(
                parse_go_duration(&format!("{ms}ms"), BareNumber::Refused),
                Ok(Duration::from_millis(ms))
            );
        }
    }
}
