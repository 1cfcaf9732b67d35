//! A user JWT's connect restrictions: `src` (the networks a client may
//! connect from) and `times` (daily windows in which it may be connected),
//! checked as nats-server checks them (`spec/nats-parity.md` §2.4).
//!
//! - `src` is a list of CIDRs, as a JSON array or one comma-separated
//!   string. A client is let in when one of them contains its IP address;
//!   an entry that is not a CIDR (a bare address included) matches nothing,
//!   so a malformed list refuses rather than opens.
//! - `times` is a list of `{"start": "HH:MM:SS", "end": "HH:MM:SS"}` on the
//!   clock of `times_location` (an IANA zone name; empty = the server's
//!   local zone). Each window is taken on today's date in that zone; a
//!   window whose start is after its end spans midnight. A client inside a
//!   window is let in until the window's end (the caller closes it then
//!   with `User Authentication Expired`, as for an expired JWT); outside
//!   every window, or with a zone or time that does not parse, it is
//!   refused.
//!
//! Must not: panic on any claim content; let a client in when a restriction
//! cannot be evaluated.

use std::net::IpAddr;

use jiff::civil::Time;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ZonedDateTime as Zoned};

/// Whether `v` (a claim's `src` or `times`) restricts nothing.
pub fn is_unrestricted(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::String(s) => s.trim().is_empty(),
        serde_json::Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Whether a client at `ip` may connect under the `src` claim `src`.
pub fn src_allows(src: &serde_json::Value, ip: Option<IpAddr>) -> bool {
    if is_unrestricted(src) {
        return true;
    }
    let Some(ip) = ip.map(|ip| ip.to_canonical()) else {
        return false;
    };
    let entries: Vec<&str> = match src {
        serde_json::Value::String(s) => s.split(',').map(str::trim).collect(),
        serde_json::Value::Array(a) => a.iter().map(|e| e.as_str().map_or("", str::trim)).collect(),
        _ => return false,
    };
    entries
        .iter()
        .any(|e| parse_cidr(e).is_some_and(|(net, bits)| contains(net, bits, ip)))
}

/// `a.b.c.d/n` or `x::y/n`.
fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, bits) = s.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    let bits: u8 = bits.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((addr.to_canonical(), bits))
}

fn contains(net: IpAddr, bits: u8, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(n) & mask == u32::from(i) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(i)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(n) & mask == u128::from(i) & mask
        }
        _ => false,
    }
}

/// The outcome of the `times` check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// No `times` restriction.
    Always,
    /// Inside a window that ends at this instant (the latest-ending window
    /// when several contain `now`).
    Until(Timestamp),
    /// Outside every window, or the claim cannot be evaluated.
    Outside,
}

/// Checks `times`/`times_location` at `now`.
pub fn times_window(times: &serde_json::Value, location: &str, now: Timestamp) -> Window {
    if is_unrestricted(times) {
        return Window::Always;
    }
    let tz = if location.is_empty() {
        TimeZone::system()
    } else {
        match TimeZone::get(location) {
            Ok(tz) => tz,
            Err(_) => return Window::Outside,
        }
    };
    let Some(ranges) = times.as_array() else {
        return Window::Outside;
    };
    let now = now.to_zoned_datetime(tz);
    let mut best: Option<Timestamp> = None;
    for r in ranges {
        let (Some(start), Some(end)) = (
            r.get("start")
                .and_then(|v| v.as_str())
                .and_then(parse_clock),
            r.get("end").and_then(|v| v.as_str()).and_then(parse_clock),
        ) else {
            return Window::Outside;
        };
        let (Some(start), Some(end)) = (on_day(&now, start), on_day(&now, end)) else {
            return Window::Outside;
        };
        if let Some(until) = range_end(&start, &end, &now) {
            if best.is_none_or(|b| until > b) {
                best = Some(until);
            }
        }
    }
    best.map_or(Window::Outside, Window::Until)
}

/// `HH:MM:SS` (one-digit hours accepted, as Go's layout `15:04:05` does).
fn parse_clock(s: &str) -> Option<Time> {
    let mut it = s.split(':');
    let (h, m, sec) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() || m.len() != 2 || sec.len() != 2 || h.is_empty() || h.len() > 2 {
        return None;
    }
    let num = |v: &str| -> Option<i8> {
        v.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| v.parse().ok())
            .flatten()
    };
    Time::new(num(h)?, num(m)?, num(sec)?, 0).ok()
}

/// `clock` on `now`'s date in `now`'s zone.
fn on_day(now: &Zoned, clock: Time) -> Option<Zoned> {
    now.date()
        .to_datetime(clock)
        .to_zoned_datetime(now.time_zone().clone())
        .ok()
}

/// nats-server's `validateTimeRangeAt`: the end of the window that
/// contains `now` (bounds exclusive), if any.
fn range_end(start: &Zoned, end: &Zoned, now: &Zoned) -> Option<Timestamp> {
    if start < now && end > now {
        return Some(end.timestamp());
    }
    if start > end {
        if end > now {
            return Some(end.timestamp());
        }
        let next = end.tomorrow().ok()?;
        if start < now && &next > now {
            return Some(next.timestamp());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn src_lists() {
        let v4 = json!(["10.0.0.0/8", "192.168.1.0/24"]);
        assert!(src_allows(&v4, ip("10.2.3.4")));
        assert!(src_allows(&v4, ip("192.168.1.77")));
        assert!(!src_allows(&v4, ip("192.168.2.1")));
        assert!(!src_allows(&v4, None));
        // An IPv4 client seen on a dual-stack socket.
        assert!(src_allows(&v4, ip("::ffff:10.9.9.9")));
        let s = json!("127.0.0.1/32, ::1/128");
        assert!(src_allows(&s, ip("127.0.0.1")));
        assert!(src_allows(&s, ip("::1")));
        assert!(!src_allows(&s, ip("127.0.0.2")));
        assert!(src_allows(&json!(["0.0.0.0/0"]), ip("8.8.8.8")));
        assert!(!src_allows(&json!(["0.0.0.0/0"]), ip("2001:db8::1")));
        // Not CIDRs: match nothing.
        assert!(!src_allows(&json!(["127.0.0.1"]), ip("127.0.0.1")));
        assert!(!src_allows(&json!(["10.0.0.0/33"]), ip("10.0.0.1")));
        assert!(!src_allows(&json!([5]), ip("10.0.0.1")));
        assert!(!src_allows(&json!({"a": 1}), ip("10.0.0.1")));
        assert!(src_allows(&json!(null), None));
        assert!(src_allows(&json!(""), None));
        assert!(src_allows(&json!([]), None));
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn range(start: &str, end: &str) -> serde_json::Value {
        json!([{"start": start, "end": end}])
    }

    #[test]
    fn windows_in_a_zone() {
        let day = range("08:00:00", "17:00:00");
        assert_eq!(
            times_window(&day, "UTC", at("2026-12-01T12:00:00Z")),
            Window::Until(at("2026-12-01T17:00:00Z"))
        );
        assert_eq!(
            times_window(&day, "UTC", at("2026-12-01T07:59:59Z")),
            Window::Outside
        );
        assert_eq!(
            times_window(&day, "UTC", at("2026-12-01T17:00:00Z")),
            Window::Outside
        );
        // 12:00 UTC is 13:00 in Berlin (winter): inside; 16:30 UTC is 17:30 there.
        assert_eq!(
            times_window(&day, "Europe/Berlin", at("2026-12-01T12:00:00Z")),
            Window::Until(at("2026-12-01T16:00:00Z"))
        );
        assert_eq!(
            times_window(&day, "Europe/Berlin", at("2026-12-01T16:30:00Z")),
            Window::Outside
        );
        assert_eq!(
            times_window(&day, "Nowhere/Atlantis", at("2026-12-01T12:00:00Z")),
            Window::Outside
        );
        assert_eq!(
            times_window(&json!([]), "", at("2026-12-01T12:00:00Z")),
            Window::Always
        );
    }

    #[test]
    fn windows_across_midnight_and_several() {
        let night = range("22:00:00", "06:00:00");
        assert_eq!(
            times_window(&night, "UTC", at("2026-12-01T23:30:00Z")),
            Window::Until(at("2026-12-02T06:00:00Z"))
        );
        assert_eq!(
            times_window(&night, "UTC", at("2026-12-01T05:00:00Z")),
            Window::Until(at("2026-12-01T06:00:00Z"))
        );
        assert_eq!(
            times_window(&night, "UTC", at("2026-12-01T12:00:00Z")),
            Window::Outside
        );
        let two = json!([
            {"start": "09:00:00", "end": "12:00:00"},
            {"start": "10:00:00", "end": "15:00:00"},
        ]);
        assert_eq!(
            times_window(&two, "UTC", at("2026-12-01T11:00:00Z")),
            Window::Until(at("2026-12-01T15:00:00Z"))
        );
    }

    #[test]
    fn malformed_times_refuse() {
        let now = at("2026-12-01T12:00:00Z");
        for bad in [
            range("8:00", "17:00:00"),
            range("08:00:00", "25:00:00"),
            range("08:00:00", "17:0:00"),
            range("aa:00:00", "17:00:00"),
            json!([{"start": "08:00:00"}]),
            json!("08:00:00-17:00:00"),
            json!([1, 2]),
        ] {
            assert_eq!(times_window(&bad, "UTC", now), Window::Outside, "{bad}");
        }
        // One-digit hours parse, as in Go.
        assert_eq!(
            times_window(&range("8:00:00", "17:00:00"), "UTC", now),
            Window::Until(at("2026-12-01T17:00:00Z"))
        );
    }
}
