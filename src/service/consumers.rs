//! Cursors and consumer groups.
//!
//! Cursors are records in the internal `__cursors` stream, keyed
//! `<cursor id>,<stream>,<partition>` and placed by a CRC-32 of that key;
//! this node serves the partitions it leads, with the latest offsets cached
//! in memory (filled by SetCursor and by a scan on the first FetchCursor).
//!
//! Consumer groups live in the metadata; this node, as a group's
//! coordinator, tracks when each member was last heard from (join and
//! FetchConsumerGroupAssignments) and evicts the silent ones: whenever the
//! group is used, and from a timer task ([`member_timers`]) that checks
//! every group coordinated here a few times per `groups.consumer.timeout`,
//! so a member expires even when no other member calls.

use std::time::Duration;

use prost::Message as _;

use super::publish::Publish;
use super::{Service, ServiceError, CURSORS_STREAM, START_WAIT};
use crate::cluster::{MetaCommand, StreamMeta};
use crate::wire::{AckError, AckPolicy, Cursor};

/// How long SetCursor waits for its ack.
const CURSOR_TIMEOUT: Duration = Duration::from_secs(5);

/// What a consumer learns when it joins a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupJoined {
    /// The coordinator's server id.
    pub coordinator: String,
    /// The group epoch after the join.
    pub epoch: u64,
    /// Members silent this long are evicted.
    pub consumer_timeout: Duration,
    /// How long a consumer waits for the coordinator.
    pub coordinator_timeout: Duration,
}

/// A member's assignments under a group epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupAssignments {
    /// The group epoch.
    pub epoch: u64,
    /// Partitions by stream.
    pub assignments: Vec<(String, Vec<i32>)>,
}

/// How often the member timers look for expired members: a quarter of the
/// consumer timeout, between 20 ms and 1 s, so a member is evicted at most
/// that long after its timeout.
fn timer_tick(consumer_timeout: Duration) -> Duration {
    (consumer_timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

/// The member timers of one service: evicts silent members of the groups
/// this node coordinates. Ends when the service is dropped.
pub(super) async fn member_timers(inner: std::sync::Weak<super::Inner>) {
    let tick = match inner.upgrade() {
        Some(i) => timer_tick(i.opts.consumer_timeout),
        None => return,
    };
    let mut every = tokio::time::interval(tick);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let svc = Service { inner };
        let me = svc.server_id().to_string();
        let groups: Vec<String> = svc
            .state()
            .groups
            .values()
            .filter(|g| g.coordinator == me)
            .map(|g| g.id.clone())
            .collect();
        for g in groups {
            if let Err(e) = svc.evict_expired(&g).await {
                tracing::warn!(group = %g, error = %e, "expiring consumer group members");
            }
        }
        // Forget members that left or moved away: the map stays bounded by
        // the members of groups coordinated here.
        let state = svc.state();
        svc.inner.group_seen.lock().retain(|(g, c), _| {
            state
                .group(g)
                .is_some_and(|g| g.coordinator == me && g.members.contains_key(c))
        });
    }
}

/// INVALID_ARGUMENT with `message` when `v` is empty.
fn require(v: &str, message: &str) -> Result<(), ServiceError> {
    if v.is_empty() {
        return Err(ServiceError::InvalidArgument(message.into()));
    }
    Ok(())
}

fn cursor_key(cursor_id: &str, stream: &str, partition: i32) -> String {
    format!("{cursor_id},{stream},{partition}")
}

impl Service {
    /// Stores a cursor (waits for the cursors partition's ack).
    pub async fn set_cursor(
        &self,
        stream: &str,
        partition: i32,
        cursor_id: &str,
        offset: i64,
    ) -> Result<(), ServiceError> {
        if stream.is_empty() {
            return Err(ServiceError::InvalidArgument("No stream provided".into()));
        }
        if cursor_id.is_empty() {
            return Err(ServiceError::InvalidArgument(
                "No cursor id provided".into(),
            ));
        }
        let key = cursor_key(cursor_id, stream, partition);
        let (_s, id, epoch) = self.cursor_partition(&key)?;
        let cursor = Cursor {
            stream: stream.to_string(),
            partition,
            cursor_id: cursor_id.to_string(),
            offset,
        };
        let req = Publish {
            key: key.clone().into_bytes().into(),
            value: cursor.encode_to_vec().into(),
            stream: CURSORS_STREAM.into(),
            partition: id,
            ack_policy: AckPolicy::All,
            expected_offset: -1,
            ..Default::default()
        };
        let ack = self.publish_one(req, Some(CURSOR_TIMEOUT)).await?;
        if ack.is_some_and(|a| a.ack_error != AckError::Ok as i32) {
            return Err(ServiceError::Internal("failed to store cursor".into()));
        }
        self.inner.cursors.lock().insert(key, (epoch, offset));
        Ok(())
    }

    /// The stored offset of a cursor, -1 when there is none.
    pub async fn fetch_cursor(
        &self,
        stream: &str,
        partition: i32,
        cursor_id: &str,
    ) -> Result<i64, ServiceError> {
        if stream.is_empty() {
            return Err(ServiceError::InvalidArgument("No stream provided".into()));
        }
        if cursor_id.is_empty() {
            return Err(ServiceError::InvalidArgument(
                "No cursor id provided".into(),
            ));
        }
        let key = cursor_key(cursor_id, stream, partition);
        let (s, id, epoch) = self.cursor_partition(&key)?;
        // A cached value is only good for the leader epoch it was seen in:
        // under another leader the partition may have moved on.
        let cached = self
            .inner
            .cursors
            .lock()
            .get(&key)
            .filter(|(e, _)| *e == epoch)
            .map(|(_, o)| *o);
        Ok(match cached {
            Some(o) => o,
            None => {
                let o = self.scan_cursor(&s, id, &key).await?;
                if o >= 0 {
                    self.inner.cursors.lock().insert(key, (epoch, o));
                }
                o
            }
        })
    }

    /// The `__cursors` partition holding `key`, checked to be led here,
    /// and its leader epoch.
    fn cursor_partition(&self, key: &str) -> Result<(StreamMeta, i32, u64), ServiceError> {
        let state = self.state();
        let s = state
            .stream(CURSORS_STREAM)
            .ok_or_else(|| ServiceError::Internal("Cursors stream does not exist".into()))?
            .clone();
        let n = s.partitions.len().max(1) as u32;
        let id = (crc32fast::hash(key.as_bytes()) % n) as i32;
        let (leader, epoch) = s
            .partition(id)
            .map(|p| (p.leader.clone(), p.leader_epoch))
            .unwrap_or_default();
        if leader != self.inner.parts.server_id() {
            return Err(ServiceError::FailedPrecondition(
                "Server not cursor partition leader".into(),
            ));
        }
        Ok((s, id, epoch))
    }

    /// Scans a cursors partition (its committed records) for the latest
    /// value of `key`.
    async fn scan_cursor(&self, s: &StreamMeta, id: i32, key: &str) -> Result<i64, ServiceError> {
        self.ensure_resumed(s, id).await?;
        let Some(p) = self.inner.parts.wait_for(&s.name, id, START_WAIT).await else {
            return Err(ServiceError::Internal(
                "cursors partition is not available".into(),
            ));
        };
        let log = p.log();
        // A new leader learns what is committed from its followers: wait
        // until everything it holds is, so no stored cursor is missed.
        let held = log.log_end_offset();
        let mut watch = p.committed_watch();
        let caught_up = tokio::time::timeout(CURSOR_TIMEOUT, watch.wait_for(|c| *c >= held))
            .await
            .is_ok_and(|r| r.is_ok());
        if !caught_up {
            return Err(ServiceError::Internal(
                "cursors partition is not caught up yet".into(),
            ));
        }
        let mut next = log.oldest_offset().unwrap_or(0);
        let end = p.committed_end();
        let mut found = -1;
        while next < end {
            let recs = log
                .read(next, 1024, 4 << 20)
                .await
                .map_err(|e| ServiceError::Internal(e.to_string()))?;
            let Some(last) = recs.last() else { break };
            next = last.offset + 1;
            for r in recs.into_iter().filter(|r| r.offset < end) {
                if r.key.as_deref() == Some(key.as_bytes()) {
                    if let Ok(c) = Cursor::decode(r.value.as_ref()) {
                        found = c.offset;
                    }
                }
            }
        }
        Ok(found)
    }

    /// Joins (or rejoins) a consumer group, with this node as coordinator
    /// of a new group.
    pub async fn join_consumer_group(
        &self,
        group_id: &str,
        consumer_id: &str,
        streams: Vec<String>,
    ) -> Result<GroupJoined, ServiceError> {
        require(group_id, "No groupId provided")?;
        require(consumer_id, "No consumerId provided")?;
        if streams.is_empty() {
            return Err(ServiceError::InvalidArgument("No streams provided".into()));
        }
        self.evict_expired(group_id).await?;
        // Liftbridge's join preconditions, all FAILED_PRECONDITION: joining
        // twice is refused, and so are streams that do not exist.
        let state = self.state();
        if state
            .group(group_id)
            .is_some_and(|g| g.members.contains_key(consumer_id))
        {
            return Err(ServiceError::FailedPrecondition(
                "consumer is already a member of the consumer group".into(),
            ));
        }
        if streams.iter().any(|s| state.stream(s).is_none()) {
            return Err(ServiceError::FailedPrecondition(
                "stream does not exist".into(),
            ));
        }
        self.propose(MetaCommand::JoinConsumerGroup {
            group_id: group_id.to_string(),
            consumer_id: consumer_id.to_string(),
            streams,
            coordinator: self.inner.parts.server_id().to_string(),
        })
        .await
        .map_err(|e| match e {
            // Deleted between the check and the apply.
            ServiceError::NotFound(m) => ServiceError::FailedPrecondition(m),
            e => e,
        })?;
        self.touch_member(group_id, consumer_id);
        let state = self.state();
        let g = state
            .group(group_id)
            .ok_or_else(|| ServiceError::Internal("group vanished after join".into()))?;
        Ok(GroupJoined {
            coordinator: g.coordinator.clone(),
            epoch: g.epoch,
            consumer_timeout: self.inner.opts.consumer_timeout,
            coordinator_timeout: self.inner.opts.coordinator_timeout,
        })
    }

    /// Leaves a consumer group.
    pub async fn leave_consumer_group(
        &self,
        group_id: &str,
        consumer_id: &str,
    ) -> Result<(), ServiceError> {
        require(group_id, "No groupId provided")?;
        require(consumer_id, "No consumerId provided")?;
        self.propose(MetaCommand::LeaveConsumerGroup {
            group_id: group_id.to_string(),
            consumer_id: consumer_id.to_string(),
            expired: false,
        })
        .await?;
        self.inner
            .group_seen
            .lock()
            .remove(&(group_id.to_string(), consumer_id.to_string()));
        Ok(())
    }

    /// A member's assignments, asked of the coordinator under `epoch`.
    pub async fn fetch_consumer_group_assignments(
        &self,
        group_id: &str,
        consumer_id: &str,
        epoch: u64,
    ) -> Result<GroupAssignments, ServiceError> {
        require(group_id, "No groupId provided")?;
        require(consumer_id, "No consumerId provided")?;
        self.evict_expired(group_id).await?;
        let state = self.state();
        let g = state
            .group(group_id)
            .ok_or_else(|| ServiceError::NotFound("No such consumer group".into()))?;
        if !g.members.contains_key(consumer_id) {
            return Err(ServiceError::FailedPrecondition(
                "Consumer is not a member of the group".into(),
            ));
        }
        if g.coordinator != self.inner.parts.server_id() {
            return Err(ServiceError::FailedPrecondition(
                "Server not group coordinator".into(),
            ));
        }
        if g.epoch != epoch {
            return Err(ServiceError::FailedPrecondition(format!(
                "Group epoch is {}, request was for {}",
                g.epoch, epoch
            )));
        }
        self.touch_member(group_id, consumer_id);
        let assignments = g
            .assignments(&state)
            .remove(consumer_id)
            .unwrap_or_default()
            .into_iter()
            .collect();
        Ok(GroupAssignments {
            epoch: g.epoch,
            assignments,
        })
    }

    /// A member reports its coordinator as unreachable: unless the report
    /// is stale it counts, and once a majority of the members reported the
    /// group moves to this node.
    pub async fn report_consumer_group_coordinator(
        &self,
        group_id: &str,
        consumer_id: &str,
        coordinator: &str,
        epoch: u64,
    ) -> Result<(), ServiceError> {
        require(group_id, "No groupId provided")?;
        require(consumer_id, "No consumerId provided")?;
        require(coordinator, "No coordinator provided")?;
        let state = self.state();
        let g = state.group(group_id).ok_or_else(|| {
            ServiceError::FailedPrecondition(format!("No such consumer group {group_id}"))
        })?;
        // A report about a coordinator or epoch that is no longer current
        // is refused, as Liftbridge refuses it.
        if g.coordinator != coordinator || g.epoch != epoch {
            return Err(ServiceError::FailedPrecondition(format!(
                "Coordinator generation mismatch, current coordinator: {} epoch: {}, got coordinator: {} epoch: {}",
                g.coordinator, g.epoch, coordinator, epoch
            )));
        }
        if !g.members.contains_key(consumer_id) {
            return Err(ServiceError::FailedPrecondition(format!(
                "Consumer {consumer_id} is not a member of consumer group {group_id}"
            )));
        }
        // The report counts toward a majority of the group's members
        // within `groups.coordinator.timeout`; the report that completes it
        // moves the group to this node (alive, and reachable by that
        // member), bumping the epoch so consumers refetch their assignments.
        let timeout_ms =
            i64::try_from(self.inner.opts.coordinator_timeout.as_millis()).unwrap_or(i64::MAX);
        self.propose(MetaCommand::ReportGroupCoordinator {
            group_id: group_id.to_string(),
            consumer_id: consumer_id.to_string(),
            coordinator: coordinator.to_string(),
            epoch,
            candidate: self.inner.parts.server_id().to_string(),
            at_ms: crate::time::now_ns() / 1_000_000,
            timeout_ms,
        })
        .await
    }

    /// Bumps the epoch of every group with a member reading `stream` (just
    /// deleted), as Liftbridge does, so members refetch assignments that no
    /// longer name it. The coordinator stays; a group whose epoch moved
    /// meanwhile already made its members refetch, so a stale-epoch refusal
    /// is fine. Best effort: a failure is logged, the deletion stands.
    pub(super) async fn bump_groups_consuming(&self, stream: &str) {
        let state = self.state();
        let groups: Vec<(String, String, u64)> = state
            .groups
            .values()
            .filter(|g| g.members.values().any(|ss| ss.iter().any(|s| s == stream)))
            .map(|g| (g.id.clone(), g.coordinator.clone(), g.epoch))
            .collect();
        for (group_id, coordinator, epoch) in groups {
            let r = self
                .propose(MetaCommand::ChangeGroupCoordinator {
                    group_id: group_id.clone(),
                    coordinator,
                    epoch,
                })
                .await;
            match r {
                Ok(())
                | Err(ServiceError::FailedPrecondition(_))
                | Err(ServiceError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(group = %group_id, stream, error = %e, "bumping the epoch of a group after a stream deletion");
                }
            }
        }
    }

    /// Evicts members of `group` this coordinator has not heard from within
    /// the consumer timeout.
    async fn evict_expired(&self, group: &str) -> Result<(), ServiceError> {
        let state = self.state();
        let Some(g) = state.group(group) else {
            return Ok(());
        };
        if g.coordinator != self.inner.parts.server_id() {
            return Ok(());
        }
        let now = tokio::time::Instant::now();
        let expired: Vec<String> = {
            let mut seen = self.inner.group_seen.lock();
            g.members
                .keys()
                .filter(|c| {
                    // A member never seen here (e.g. after a restart) starts
                    // its timeout now.
                    let t = *seen.entry((group.to_string(), (*c).clone())).or_insert(now);
                    now.duration_since(t) > self.inner.opts.consumer_timeout
                })
                .cloned()
                .collect()
        };
        for c in expired {
            self.inner
                .group_seen
                .lock()
                .remove(&(group.to_string(), c.clone()));
            match self
                .propose(MetaCommand::LeaveConsumerGroup {
                    group_id: group.to_string(),
                    consumer_id: c,
                    expired: true,
                })
                .await
            {
                Ok(())
                | Err(ServiceError::NotFound(_))
                | Err(ServiceError::FailedPrecondition(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn touch_member(&self, group: &str, consumer: &str) {
        self.inner.group_seen.lock().insert(
            (group.to_string(), consumer.to_string()),
            tokio::time::Instant::now(),
        );
    }
}
