//! Liftbridge's internal streams, `__cursors` and `__activity`, as metadata.
//!
//! They are ordinary streams created through the same Raft command as user
//! streams (one metadata path); only their names are reserved for clients.
//! The metadata leader calls `ensure_internal_streams` at start-up (and after
//! winning an election, once clustering exists): a stream that already
//! exists is left as is, so the call is idempotent.
//!
//! - `__cursors` (spec §1.7): created when `cursors.stream.partitions` > 0;
//!   subject `<namespace>.cursors`; compacted; replication factor
//!   `cursors.stream.replication.factor` (-1 = all servers); auto-pauses after
//!   `cursors.stream.auto.pause.time` idle, except while it has subscribers.
//! - `__activity` (spec §1.8): created when `activity.stream.enabled`; one
//!   partition on `<namespace>.activity`, replicated to all servers.

use crate::config::liftbridge::LiftbridgeConfig;

use super::{now_ns, ApplyError, MetaCommand, MetaError, MetaResponse, Metadata, StreamConfig};

/// Name of the cursors stream.
pub const CURSORS_STREAM: &str = "__cursors";
/// Name of the activity stream.
pub const ACTIVITY_STREAM: &str = "__activity";

/// Whether `name` is reserved for an internal stream (clients may not create
/// or delete it: INVALID_ARGUMENT).
pub fn is_reserved_stream_name(name: &str) -> bool {
    name == CURSORS_STREAM || name == ACTIVITY_STREAM
}

/// The command creating `__cursors`, or `None` when cursors are disabled.
pub fn cursors_stream_command(
    cfg: &LiftbridgeConfig,
    creation_timestamp_ns: i64,
) -> Option<MetaCommand> {
    if cfg.cursors.stream_partitions <= 0 {
        return None;
    }
    let auto_pause_ms =
        i64::try_from(cfg.cursors.stream_auto_pause_time.as_millis()).unwrap_or(i64::MAX);
    Some(MetaCommand::CreateStream {
        name: CURSORS_STREAM.into(),
        subject: format!("{}.cursors", cfg.clustering.namespace),
        group: String::new(),
        replication_factor: cfg.cursors.stream_replication_factor,
        partitions: cfg.cursors.stream_partitions,
        config: StreamConfig {
            compact_enabled: Some(true),
            auto_pause_time_ms: Some(auto_pause_ms),
            auto_pause_disable_if_subscribers: Some(true),
            ..Default::default()
        },
        creation_timestamp_ns,
    })
}

/// The command creating `__activity`, or `None` when the activity stream is off.
pub fn activity_stream_command(
    cfg: &LiftbridgeConfig,
    creation_timestamp_ns: i64,
) -> Option<MetaCommand> {
    if !cfg.activity.stream_enabled {
        return None;
    }
    Some(MetaCommand::CreateStream {
        name: ACTIVITY_STREAM.into(),
        subject: format!("{}.activity", cfg.clustering.namespace),
        group: String::new(),
        replication_factor: -1,
        partitions: 1,
        config: StreamConfig::default(),
        creation_timestamp_ns,
    })
}

/// Creates the enabled internal streams that do not exist yet. Returns the
/// names of the streams it created.
pub async fn ensure_internal_streams(
    md: &Metadata,
    cfg: &LiftbridgeConfig,
) -> Result<Vec<String>, MetaError> {
    let now = now_ns();
    let mut created = Vec::new();
    for cmd in [
        cursors_stream_command(cfg, now),
        activity_stream_command(cfg, now),
    ]
    .into_iter()
    .flatten()
    {
        let MetaCommand::CreateStream { name, .. } = &cmd else {
            continue;
        };
        if md.state().stream(name).is_some() {
            continue;
        }
        let name = name.clone();
        match md.propose(cmd).await? {
            MetaResponse::Ok => created.push(name),
            // Someone else created it meanwhile: fine.
            MetaResponse::Rejected(ApplyError::AlreadyExists { .. }) => {}
            MetaResponse::Rejected(e) => return Err(MetaError::Rejected(e)),
        }
    }
    Ok(created)
}
