//! Browsing and publishing a partition's messages over HTTP.
//!
//! Reads go to the partition log this node serves: a start position
//! (`offset`, `since_ns` or `from=latest`, default the oldest offset) and
//! a page size (`limit`, 1..=[`MAX_LIMIT`]); a page also stops at
//! [`PAGE_BYTES`] of stored data, so a response stays bounded whatever the
//! message sizes, and `next_offset` says where the next page starts.
//! Publishes go through the service's publish (as gRPC `Publish` does) with ack policy LEADER, so
//! a readonly partition, a paused one (resumed by the publish) and OCC
//! behave as for any Liftbridge client.

use std::collections::HashMap;
use std::time::Duration;

use super::{off, parse_body, AdminContext, AdminError};
use crate::cluster::StreamMeta;
use crate::http::HttpRequest;
use crate::service::Publish;
use crate::store::Record;
use crate::wire::AckPolicy;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};

/// Messages per page when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 100;
/// Largest `limit` accepted.
pub const MAX_LIMIT: usize = 1000;
/// Stored bytes per page (soft: at least one message is returned).
pub const PAGE_BYTES: usize = 4 << 20;
/// How long a publish waits for the leader's ack.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// A record as JSON: bytes in base64, the value also as text when it is
/// UTF-8.
fn message_json(r: &Record) -> Value {
    let headers: serde_json::Map<String, Value> = r
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(B64.encode(v))))
        .collect();
    json!({
        "offset": r.offset,
        "timestamp_ns": r.timestamp_ns,
        "key_b64": r.key.as_ref().map(|k| B64.encode(k)).unwrap_or_default(),
        "value_b64": B64.encode(&r.value),
        "value_utf8": std::str::from_utf8(&r.value).ok(),
        "headers": headers,
        "subject": r.subject,
        "reply_subject": r.reply.clone().unwrap_or_default(),
    })
}

fn parse_i64(q: &HashMap<String, String>, name: &str) -> Result<Option<i64>, AdminError> {
    match q.get(name) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<i64>() {
            Ok(n) if n >= 0 => Ok(Some(n)),
            _ => Err(AdminError::BadRequest(format!(
                "{name} must be a non-negative integer, got {v:?}"
            ))),
        },
    }
}

/// `GET …/partitions/{id}/messages`.
pub(super) async fn read(
    ctx: &AdminContext,
    s: &StreamMeta,
    id: i32,
    req: &HttpRequest,
) -> Result<Value, AdminError> {
    let q = req.query_params();
    let limit = match q.get("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(AdminError::BadRequest(format!(
                    "limit must be an integer from 1 to {MAX_LIMIT}, got {v:?}"
                )))
            }
        },
    };
    let offset = parse_i64(&q, "offset")?;
    let since = parse_i64(&q, "since_ns")?;
    let from = q.get("from").map(String::as_str);
    let given = [offset.is_some(), since.is_some(), from.is_some()]
        .iter()
        .filter(|b| **b)
        .count();
    if given > 1 {
        return Err(AdminError::BadRequest(
            "give at most one of offset, since_ns and from".into(),
        ));
    }
    let part = local_partition(ctx, s, id)?;
    let log = part.log();
    let leo = log.log_end_offset();
    let oldest = log.oldest_offset();
    let first = oldest.unwrap_or(leo);
    let start = if let Some(o) = offset {
        // Below the oldest (removed by retention): start at the oldest.
        (o as u64).max(first)
    } else if let Some(t) = since {
        log.offset_for_timestamp(t).await?.unwrap_or(leo).max(first)
    } else {
        match from {
            None | Some("earliest") => first,
            Some("latest") => match log.newest_offset() {
                Some(n) => n.saturating_sub(limit as u64 - 1).max(first),
                None => leo,
            },
            Some(other) => {
                return Err(AdminError::BadRequest(format!(
                    "from must be latest or earliest, got {other:?}"
                )))
            }
        }
    };
    let mut records = match log.read(start, limit, PAGE_BYTES).await {
        Ok(r) => r,
        Err(e) => {
            // A damaged log fails the partition, as a subscriber's read does.
            if e.is_corruption() {
                part.mark_failed(e.to_string());
            }
            return Err(e.into());
        }
    };
    // Encrypted at rest: shown as the plaintext, as a subscriber gets it.
    if let Some(mk) = ctx.parts.defaults().encryption_key(s) {
        for r in &mut records {
            r.value = mk
                .open(&r.value)
                .map_err(|e| {
                    AdminError::Conflict(format!("message {} does not decrypt: {e}", r.offset))
                })?
                .into();
        }
    }
    let next = records
        .last()
        .map_or(start.min(leo), |r| r.offset.saturating_add(1));
    Ok(json!({
        "messages": records.iter().map(message_json).collect::<Vec<_>>(),
        "next_offset": next,
        "high_watermark": off(part.high_watermark()),
        "oldest_offset": off(log.oldest_offset()),
        "log_end_offset": log.log_end_offset(),
    }))
}

/// The partition's open log here, or why there is none (409).
fn local_partition(
    ctx: &AdminContext,
    s: &StreamMeta,
    id: i32,
) -> Result<std::sync::Arc<crate::partition::Partition>, AdminError> {
    if let Some(p) = ctx.local(s, id) {
        return Ok(p);
    }
    let pm = s.partition(id);
    if pm.is_some_and(|p| p.paused) {
        return Err(AdminError::Conflict(format!(
            "partition {}/{id} is paused; resume it to read its messages",
            s.name
        )));
    }
    // A partition whose files are lost or damaged never opens: say so
    // (409, as gRPC's FailedPrecondition), not that it is starting.
    if let Some(f) = ctx.parts.failure(&s.name, id, s.creation_timestamp_ns) {
        return Err(AdminError::Conflict(format!(
            "partition {}/{id} failed: {}",
            s.name, f.reason
        )));
    }
    let leader = pm.map(|p| p.leader.as_str()).unwrap_or_default();
    if leader != ctx.parts.server_id() {
        return Err(AdminError::Conflict(format!(
            "partition {}/{id} is led by server {leader:?}; read it there",
            s.name
        )));
    }
    Err(AdminError::Unavailable(format!(
        "partition {}/{id} is starting",
        s.name
    )))
}

/// Body of `POST …/messages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishBody {
    value_b64: Option<String>,
    value: Option<String>,
    key_b64: Option<String>,
    key: Option<String>,
    #[serde(default)]
    headers: HashMap<String, String>,
    /// Optimistic concurrency control: the offset the message must get.
    expected_offset: Option<i64>,
}

/// One of a base64 field and a text field, as bytes.
fn bytes_of(b64: Option<String>, text: Option<String>, what: &str) -> Result<Vec<u8>, AdminError> {
    match (b64, text) {
        (Some(_), Some(_)) => Err(AdminError::BadRequest(format!(
            "give either {what}_b64 or {what}, not both"
        ))),
        (Some(b), None) => B64
            .decode(b.as_bytes())
            .map_err(|e| AdminError::BadRequest(format!("{what}_b64 is not base64: {e}"))),
        (None, Some(t)) => Ok(t.into_bytes()),
        (None, None) => Ok(Vec::new()),
    }
}

/// `POST …/partitions/{id}/messages`: publish with ack policy LEADER.
pub(super) async fn publish(
    ctx: &AdminContext,
    s: &StreamMeta,
    id: i32,
    req: &HttpRequest,
) -> Result<Value, AdminError> {
    let b: PublishBody = parse_body(req, false)?;
    let value = bytes_of(b.value_b64, b.value, "value")?;
    let key = bytes_of(b.key_b64, b.key, "key")?;
    let r = Publish {
        key: key.into(),
        value: value.into(),
        stream: s.name.clone(),
        partition: id,
        headers: b
            .headers
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes().into()))
            .collect(),
        ack_policy: AckPolicy::Leader,
        expected_offset: b.expected_offset.unwrap_or(-1),
        ..Default::default()
    };
    let ack = ctx
        .service
        .publish(r, Some(PUBLISH_TIMEOUT))
        .await?
        .ok_or_else(|| AdminError::Internal("no acknowledgement".into()))?;
    Ok(json!({
        "offset": ack.offset,
        "timestamp_ns": ack.reception_timestamp,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn records_as_json() {
        let r = Record {
            offset: 3,
            timestamp_ns: 9,
            leader_epoch: 0,
            key: Some(Bytes::from_static(b"k")),
            headers: vec![("h".into(), Bytes::from_static(b"\xff"))],
            value: Bytes::from_static(b"hello"),
            subject: "a.b".into(),
            reply: None,
        };
        let v = message_json(&r);
        assert_eq!(v["offset"], 3);
        assert_eq!(v["key_b64"], "aw==");
        assert_eq!(v["value_b64"], "aGVsbG8=");
        assert_eq!(v["value_utf8"], "hello");
        assert_eq!(v["headers"]["h"], "/w==");
        assert_eq!(v["subject"], "a.b");
        assert_eq!(v["reply_subject"], "");
        let bin = Record {
            value: Bytes::from_static(b"\xff\xfe"),
            key: None,
            ..r
        };
        let v = message_json(&bin);
        assert!(v["value_utf8"].is_null());
        assert_eq!(v["key_b64"], "");
    }

    #[test]
    fn value_fields() {
        assert_eq!(bytes_of(Some("aGk=".into()), None, "value").unwrap(), b"hi");
        assert_eq!(bytes_of(None, Some("hi".into()), "value").unwrap(), b"hi");
        assert!(bytes_of(None, None, "value").unwrap().is_empty());
        assert!(bytes_of(Some("!!".into()), None, "value").is_err());
        assert!(bytes_of(Some("aGk=".into()), Some("hi".into()), "value").is_err());
    }
}
