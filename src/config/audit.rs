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
//!   (data that is not encrypted, say).
//!
//! The NATS client keys (`nats.servers`, `nats.user`, `nats.password`,
//! `nats.tls.*`) work in external NATS mode and have no effect (a notice)
//! with the embedded server; in external mode the keys of the embedded
//! server's listeners are refused (see `config::external`).
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
const CLIENT_ONLY: &str =
    "used only with an external NATS system (nats.embedded: false or nats.servers); the embedded NATS server is in use";

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
        "streams.segment.max.bytes" | "streams.segment.max.age" => NotApplicable(NO_SEGMENTS),
        "streams.compact.max.goroutines" => NotApplicable(
            "compaction runs on the partition's storage thread, one partition at a time",
        ),
        "clustering.raft.snapshot.retain" => {
            NotApplicable("the metadata keeps exactly one snapshot (the latest)")
        }
        "clustering.raft.cache.size" => {
            NotApplicable("the metadata log is read from its database, with no separate cache")
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
pub enum Refused {
    /// A feature that is missing here.
    #[error("config key {key} = {value} is not supported: {reason}")]
    Unsupported {
        /// The key.
        key: &'static str,
        /// The value as configured.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// External NATS settings that cannot work.
    #[error(transparent)]
    External(#[from] super::external::ExternalConfigError),
}

/// Checks the keys set in `c` (file, environment or flags): the first key
/// set to a value the server cannot honour is an error; keys that have no
/// effect come back as notices to log.
pub fn audit(c: &LiftbridgeConfig) -> Result<Vec<Notice>, Refused> {
    let mut notices = Vec::new();
    let external = super::external::from_liftbridge(c)?.is_some();
    for &key in &c.explicit_keys {
        if !external && super::external::CLIENT_KEYS.contains(&key) {
            notices.push(Notice {
                key,
                reason: CLIENT_ONLY,
            });
            continue;
        }
        match key_status(key) {
            Some(KeyStatus::Unsupported(reason)) => {
                if let Some(value) = unsupported_value(c, key) {
                    return Err(Refused::Unsupported { key, value, reason });
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
fn unsupported_value(_c: &LiftbridgeConfig, _key: &str) -> Option<String> {
    // Every key with an `Unsupported` status is listed here with the
    // values that ask for the missing feature (none at present).
    None
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
    fn nats_client_keys_work_in_external_mode_only() {
        let mut c = LiftbridgeConfig::default();
        c.explicit_keys.insert("nats.embedded");
        c.explicit_keys.insert("nats.user");
        c.nats.user = Some("u".into());
        let n = audit(&c).unwrap();
        assert_eq!(n.len(), 1, "embedded: the client key has no effect");
        assert_eq!(n[0].key, "nats.user");
        c.nats.embedded = false;
        assert_eq!(audit(&c), Ok(vec![]), "external: it works");
        c.explicit_keys.insert("nats.cluster.listen");
        let e = audit(&c).unwrap_err();
        assert!(e.to_string().contains("nats.cluster.listen"), "{e}");
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
