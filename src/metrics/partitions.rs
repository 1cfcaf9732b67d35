//! Per-partition series (labels `stream` and `partition` only), read at
//! scrape time from the metadata and from the logs of the partitions this
//! node leads: messages and bytes appended since the log was opened here,
//! high watermark, log end, newest and oldest offsets, messages and bytes
//! stored, bytes on disk, paused, readonly, failed (the log could not be
//! opened here), degraded (the log refuses writes after an I/O failure)
//! and its I/O error count, ISR size and subscribers.
//!
//! Offsets follow Liftbridge's convention: -1 when there is none. Paused
//! partitions have no open log here, so only their metadata series
//! (paused, readonly, ISR size) appear. Consumer lag is not exported:
//! cursors are keyed by consumer id, an unbounded label set.
//!
//! Reads the file size of each partition database, so it must run on a
//! blocking thread (the scrape does).

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use crate::cluster::Metadata;
use crate::partition::{Partition, PartitionManager};

/// Collects the series of the partitions this node leads.
pub struct PartitionCollector {
    meta: Metadata,
    parts: PartitionManager,
}

impl std::fmt::Debug for PartitionCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionCollector")
            .field("node", &self.parts.server_id())
            .finish()
    }
}

impl PartitionCollector {
    /// A collector over the metadata and the running partitions.
    pub fn new(meta: Metadata, parts: PartitionManager) -> PartitionCollector {
        PartitionCollector { meta, parts }
    }
}

/// One partition's values, read once per scrape.
struct Row {
    labels: [(&'static str, String); 2],
    paused: bool,
    readonly: bool,
    /// The partition's log failed to open here (lost or corrupt files).
    failed: bool,
    isr: usize,
    under_replicated: bool,
    log: Option<LogRow>,
}

struct LogRow {
    appended: u64,
    appended_bytes: u64,
    hw: i64,
    leo: u64,
    newest: i64,
    oldest: i64,
    messages: u64,
    bytes: u64,
    disk: u64,
    subscribers: usize,
    /// The log refuses writes after an I/O failure (it retries).
    degraded: bool,
    io_errors: u64,
}

fn log_row(p: &Arc<Partition>) -> LogRow {
    let log = p.log();
    let stats = log.commit_stats();
    let leo = log.log_end_offset();
    LogRow {
        appended: stats.appended_records,
        appended_bytes: stats.appended_bytes,
        // The partition's own high watermark (on one node: the last offset
        // written).
        hw: p.high_watermark_or_minus_one(),
        leo,
        newest: log.newest_offset().map_or(-1, |o| o as i64),
        oldest: log.oldest_offset().map_or(-1, |o| o as i64),
        messages: log.record_count(),
        bytes: log.record_bytes(),
        disk: log.disk_size(),
        subscribers: p.subscriber_count(),
        degraded: log.fault().is_some(),
        io_errors: log.io_errors(),
    }
}

type Get<T> = fn(&Row) -> Option<T>;

fn family_gauge(
    enc: &mut DescriptorEncoder,
    rows: &[Row],
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    get: Get<i64>,
) -> std::fmt::Result {
    if !rows.iter().any(|r| get(r).is_some()) {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for r in rows {
        if let Some(v) = get(r) {
            ConstGauge::new(v).encode(m.encode_family(&r.labels)?)?;
        }
    }
    Ok(())
}

fn family_counter(
    enc: &mut DescriptorEncoder,
    rows: &[Row],
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    get: Get<u64>,
) -> std::fmt::Result {
    if !rows.iter().any(|r| get(r).is_some()) {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for r in rows {
        if let Some(v) = get(r) {
            ConstCounter::new(v).encode(m.encode_family(&r.labels)?)?;
        }
    }
    Ok(())
}

/// Escapes a label value for the text formats (the encoder writes values
/// verbatim, and stream names may contain `"`).
pub fn escape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Collector for PartitionCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let state = self.meta.state();
        let me = self.parts.server_id();
        let mut rows = Vec::new();
        for s in state.streams.values() {
            for p in s.partitions.iter().filter(|p| p.leader == me) {
                rows.push(Row {
                    labels: [
                        ("stream", escape_label_value(&s.name)),
                        ("partition", p.id.to_string()),
                    ],
                    paused: p.paused,
                    readonly: p.readonly,
                    failed: self
                        .parts
                        .failure(&s.name, p.id, s.creation_timestamp_ns)
                        .is_some(),
                    isr: p.isr.len(),
                    under_replicated: self.parts.defaults().under_replicated(s, p),
                    log: self.parts.get(&s.name, p.id).map(|p| log_row(&p)),
                });
            }
        }
        let disk_total: u64 = rows
            .iter()
            .filter_map(|r| r.log.as_ref())
            .map(|l| l.disk)
            .sum();
        let bytes = Unit::Bytes;
        let m = enc.encode_descriptor(
            "liftbridge_partitions_led",
            "Partitions this node leads (paused ones included).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(rows.len() as i64).encode(m)?;
        let m = enc.encode_descriptor(
            "liftbridge_store_disk",
            "Size of the database files of the partitions open on this node.",
            Some(&bytes),
            MetricType::Gauge,
        )?;
        ConstGauge::new(clamp(disk_total)).encode(m)?;
        family_counter(
            &mut enc,
            &rows,
            "liftbridge_partition_messages_appended",
            "Messages appended to the partition since its log was opened on this node.",
            None,
            |r| r.log.as_ref().map(|l| l.appended),
        )?;
        family_counter(
            &mut enc,
            &rows,
            "liftbridge_partition_appended",
            "Encoded bytes appended to the partition since its log was opened on this node.",
            Some(&bytes),
            |r| r.log.as_ref().map(|l| l.appended_bytes),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_high_watermark",
            "Offset of the last committed message (-1 when none).",
            None,
            |r| r.log.as_ref().map(|l| l.hw),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_log_end_offset",
            "Next offset to be assigned.",
            None,
            |r| r.log.as_ref().map(|l| clamp(l.leo)),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_newest_offset",
            "Newest offset stored (-1 when empty).",
            None,
            |r| r.log.as_ref().map(|l| l.newest),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_oldest_offset",
            "Oldest offset stored (-1 when empty).",
            None,
            |r| r.log.as_ref().map(|l| l.oldest),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_messages",
            "Messages stored (after retention and compaction).",
            None,
            |r| r.log.as_ref().map(|l| clamp(l.messages)),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_stored",
            "Encoded bytes of the messages stored.",
            Some(&bytes),
            |r| r.log.as_ref().map(|l| clamp(l.bytes)),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_disk",
            "Size of the partition's database file.",
            Some(&bytes),
            |r| r.log.as_ref().map(|l| clamp(l.disk)),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_subscribers",
            "Active Subscribe streams on the partition.",
            None,
            |r| r.log.as_ref().map(|l| l.subscribers as i64),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_paused",
            "1 when the partition is paused.",
            None,
            |r| Some(r.paused as i64),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_failed",
            "1 when the partition's log could not be opened here (lost or corrupt files); it is refused.",
            None,
            |r| Some(r.failed as i64),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_degraded",
            "1 while the partition's log refuses writes after an I/O failure (a full device, an I/O error); reads go on and writes are retried every second.",
            None,
            |r| r.log.as_ref().map(|l| l.degraded as i64),
        )?;
        family_counter(
            &mut enc,
            &rows,
            "liftbridge_partition_io_errors",
            "I/O failures of the partition's log writer (failed writes, commits or fsyncs) since the log was opened here.",
            None,
            |r| r.log.as_ref().map(|l| l.io_errors),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_readonly",
            "1 when the partition is readonly.",
            None,
            |r| Some(r.readonly as i64),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_isr_replicas",
            "Replicas in the partition's in-sync replica set.",
            None,
            |r| Some(r.isr as i64),
        )?;
        family_gauge(
            &mut enc,
            &rows,
            "liftbridge_partition_under_replicated",
            "1 when a replica is out of the in-sync set or the set is below its minimum (nothing commits then).",
            None,
            |r| Some(r.under_replicated as i64),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label_value("orders"), "orders");
        assert_eq!(escape_label_value(r#"a"b"#), r#"a\"b"#);
        assert_eq!(escape_label_value("a\\b\nc"), r#"a\\b\nc"#);
    }
}
