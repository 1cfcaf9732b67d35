//! What each Liftbridge configuration key does here, and the start-up check
//! that no key is silently ignored.
//!
//! Every key of `liftbridge::KEYS` has a [`KeyStatus`]:
//! - `Works`: it takes effect as in Liftbridge;
//! - `NotApplicable`: it has no meaning for this server's design (e.g.
//!   segment sizes: the log is not split into segment files). A file that
//!   sets it still loads — Liftbridge configs must keep working — and the
//!   node logs a notice naming the key and the reason;
//! - `Unsupported`: the feature is not available yet. Setting the key to
//!   anything but its default is refused at start-up with an error naming the
//!   key, because running without the feature would be unsafe or misleading
//!   (authorization that is not enforced, data that is not encrypted, an
//!   external NATS system that is not used).
//!
//! `audit` applies this to a loaded configuration; `README.md` carries the
//! same table for users. A unit test keeps the table complete: a key added
//! to `KEYS` without a status fails it.

use super::liftbridge::{LiftbridgeConfig, KEYS};

/// What a configuration key does on this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStatus {
    /// Takes effect as in Liftbridge.
    Works,
    /// Accepted with a logged notice: it has no meaning here, for this reason.
    NotApplicable(&'static str),
    /// Refused when set to a non-default value: the feature is missing.
    Unsupported(&'static str),
}

const NO_SEGMENTS: &str =
    "the log is one redb database per partition, not segment files; retention and compaction work per record";
const GROUP_COMMIT: &str =
    "appends that arrive together share one storage commit (group commit) without an added wait";
const EMBEDDED_ONLY: &str =
    "the node always embeds its NATS server and reaches it in process; external NATS servers are not supported yet";

/// The status of `key` (one of `KEYS`), `None` for an unknown key.
pub fn key_status(key: &str) -> Option<KeyStatus> {
    use KeyStatus::*;
    let s = match key {
        "metadata.cache.max.age" => NotApplicable(
            "metadata is read from the node's own replicated state, never from a cache",
        ),
        "batch.max.messages" | "batch.max.time" => NotApplicable(GROUP_COMMIT),
        "logging.recovery" => NotApplicable(
            "recovery does not replay messages one by one; the log reopens at its last commit",
        ),
        "tls.client.authz.enabled" => Unsupported(
            "authorization of gRPC clients is not available; refusing to start rather than serve every client unchecked",
        ),
        "tls.client.authz.model" | "tls.client.authz.policy" => {
            NotApplicable("used only with tls.client.authz.enabled, which is not available")
        }
        "nats.embedded" => Unsupported(EMBEDDED_ONLY),
        "nats.servers" | "nats.user" | "nats.password" | "nats.tls.cert" | "nats.tls.key"
        | "nats.tls.ca" => NotApplicable(EMBEDDED_ONLY),
        "streams.segment.max.bytes" | "streams.segment.max.age" => NotApplicable(NO_SEGMENTS),
        "streams.compact.max.goroutines" => NotApplicable(
            "compaction runs on the partition's storage thread, one partition at a time",
        ),
        "streams.encryption" => Unsupported(
            "encryption at rest is not available; refusing to store data in the clear that was meant to be encrypted",
        ),
        "clustering.raft.snapshot.retain" => {
            NotApplicable("the metadata keeps exactly one snapshot (the latest)")
        }
        "clustering.raft.cache.size" => {
            NotApplicable("the metadata log is read from its database, with no separate cache")
        }
        "activity.stream.enabled" => Unsupported(
            "activity events are not published yet; the __activity stream would stay empty",
        ),
        "activity.stream.publish.timeout" | "activity.stream.publish.ack.policy" => {
            NotApplicable("used only with activity.stream.enabled, which is not available")
        }
        "telemetry.enabled" | "telemetry.interval.seconds" => {
            NotApplicable("this server never sends telemetry")
        }
        k if KEYS.contains(&k) => Works,
        _ => return None,
    };
    Some(s)
}

/// A key that was set but has no effect here, with the reason (to be logged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The key.
    pub key: &'static str,
    /// Why it has no effect.
    pub reason: &'static str,
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "config key {} has no effect: {}", self.key, self.reason)
    }
}

/// A key set to a value this server cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config key {key} = {value} is not supported: {reason}")]
pub struct Refused {
    /// The key.
    pub key: &'static str,
    /// The value as configured.
    pub value: String,
    /// Why.
    pub reason: &'static str,
}

/// Checks the keys set in `c` (file, environment or flags): the first key
/// set to a value the server cannot honour is an error; keys that have no
/// effect come back as notices to log.
pub fn audit(c: &LiftbridgeConfig) -> Result<Vec<Notice>, Refused> {
    let mut notices = Vec::new();
    for &key in &c.explicit_keys {
        match key_status(key) {
            Some(KeyStatus::Unsupported(reason)) => {
                if let Some(value) = unsupported_value(c, key) {
                    return Err(Refused { key, value, reason });
                }
            }
            Some(KeyStatus::NotApplicable(reason)) => notices.push(Notice { key, reason }),
            Some(KeyStatus::Works) | None => {}
        }
    }
    Ok(notices)
}

/// The configured value of an `Unsupported` key when it asks for the missing
/// feature; `None` when it keeps the default (which works).
fn unsupported_value(c: &LiftbridgeConfig, key: &str) -> Option<String> {
    let on = |b: bool| b.then(|| "true".to_string());
    match key {
        "tls.client.authz.enabled" => on(c.tls.client_authz_enabled),
        "streams.encryption" => on(c.streams.encryption),
        "activity.stream.enabled" => on(c.activity.stream_enabled),
        "nats.embedded" => (!c.nats.embedded).then(|| "false".to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_a_status() {
        for k in KEYS {
            assert!(key_status(k).is_some(), "{k}");
        }
        assert_eq!(key_status("no.such.key"), None);
    }

    #[test]
    fn unsupported_keys_are_refused_only_when_they_ask_for_the_feature() {
        let mut c = LiftbridgeConfig::default();
        c.explicit_keys.insert("tls.client.authz.enabled");
        assert_eq!(audit(&c), Ok(vec![]), "false is the default and works");
        c.tls.client_authz_enabled = true;
        let e = audit(&c).unwrap_err();
        assert_eq!(e.key, "tls.client.authz.enabled");
        assert!(
            e.to_string().contains("tls.client.authz.enabled = true"),
            "{e}"
        );
    }

    #[test]
    fn not_applicable_keys_are_notices() {
        let mut c = LiftbridgeConfig::default();
        c.explicit_keys.insert("streams.segment.max.bytes");
        c.explicit_keys.insert("port");
        let n = audit(&c).unwrap();
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].key, "streams.segment.max.bytes");
        assert!(n[0].to_string().contains("has no effect"));
    }
}
