//! Internal NATS subjects of partition replication (Liftbridge's names):
//!
//! | subject | who listens | what |
//! |---|---|---|
//! | `<ns>.<stream>.<partition>.replicate` | the partition leader | follower fetches |
//! | `<ns>.<stream>.<partition>.offset` | the partition leader | leader-epoch end offsets |
//! | `<ns>.notify.<server id>` | that server | new data for its idle followers |
//!
//! A stream name that is not usable as subject tokens (wildcards, spaces,
//! empty tokens) is written as `x` + its hex bytes, so every stream has
//! subjects of its own and none matches another's.

/// The stream's part of a subject.
fn stream_token(stream: &str) -> String {
    let usable = !stream.is_empty()
        && stream.split('.').all(|t| {
            !t.is_empty()
                && t != "*"
                && t != ">"
                && !t
                    .bytes()
                    .any(|b| b.is_ascii_whitespace() || b == b'*' || b == b'>')
        });
    if usable {
        stream.to_string()
    } else {
        let hex: String = stream.bytes().map(|b| format!("{b:02x}")).collect();
        format!("x{hex}")
    }
}

/// Where followers fetch a partition.
pub fn replicate(ns: &str, stream: &str, partition: i32) -> String {
    format!("{ns}.{}.{partition}.replicate", stream_token(stream))
}

/// Where replicas ask a partition leader for leader-epoch end offsets.
pub fn offset(ns: &str, stream: &str, partition: i32) -> String {
    format!("{ns}.{}.{partition}.offset", stream_token(stream))
}

/// Where a server hears that its idle followers have something to fetch.
pub fn notify(ns: &str, server: &str) -> String {
    format!("{ns}.notify.{server}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_liftbridge_and_odd_streams_are_encoded() {
        assert_eq!(replicate("ns", "orders", 2), "ns.orders.2.replicate");
        assert_eq!(offset("ns", "a.b", 0), "ns.a.b.0.offset");
        assert_eq!(notify("ns", "srv1"), "ns.notify.srv1");
        assert_eq!(replicate("ns", "a*b", 0), "ns.x612a62.0.replicate");
        assert_eq!(replicate("ns", "a..b", 0), "ns.x612e2e62.0.replicate");
        assert_eq!(replicate("ns", ">", 0), "ns.x3e.0.replicate");
    }
}
