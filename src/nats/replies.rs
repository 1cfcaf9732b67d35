//! `allow_responses`: the reply subjects a connection may answer although
//! its publish permissions do not cover them (`spec/nats-parity.md` §1,
//! nats-server's dynamic response permissions).
//!
//! When a message with a reply subject is delivered to a connection whose
//! user has `allow_responses`, the reply subject is remembered (unless the
//! user may publish there anyway). A later publish to it is allowed while
//! fewer than `max` answers went there and `expires` has not passed since
//! the delivery; the last allowed answer forgets the subject. A client
//! connection checks its own publishes; a leaf hub checks what the leaf
//! brings (the user's permissions swapped, see `leaf`).
//!
//! Bounded: at most [`MAX_TRACKED`] subjects per connection. When full,
//! expired and used-up subjects are dropped first, then the oldest ones;
//! a responder that answers a dropped subject gets the permissions
//! violation it would get after the expiry.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::auth::PermissionSet;
use crate::config::nats::ResponsePermission;

/// Most reply subjects one connection keeps.
pub const MAX_TRACKED: usize = 65_536;

/// One remembered reply subject.
#[derive(Debug, Clone, Copy)]
struct Tracked {
    at: Instant,
    answers: u32,
}

/// The reply subjects one connection may answer.
#[derive(Debug)]
pub(crate) struct ReplyTracker {
    perm: ResponsePermission,
    /// The permissions it belongs to (a subject they already allow is not
    /// tracked; a change of permissions starts a new tracker).
    perms: Arc<PermissionSet>,
    map: HashMap<Bytes, Tracked>,
    /// Subjects in the order they were remembered, with the time; entries
    /// whose subject is gone or was remembered again later are skipped.
    order: VecDeque<(Bytes, Instant)>,
}

impl ReplyTracker {
    /// A tracker for `perms`, or `None` when they have no
    /// `allow_responses`.
    pub(crate) fn new(perms: &Arc<PermissionSet>) -> Option<ReplyTracker> {
        Some(ReplyTracker {
            perm: perms.responses()?,
            perms: perms.clone(),
            map: HashMap::new(),
            order: VecDeque::new(),
        })
    }

    /// Whether this tracker serves `perms`.
    pub(crate) fn serves(&self, perms: &Arc<PermissionSet>) -> bool {
        Arc::ptr_eq(&self.perms, perms)
    }

    /// A message with reply subject `reply` was delivered. `leaf`: the
    /// permissions are a leaf hub's view, where what the leaf may bring
    /// is the subscribe side.
    pub(crate) fn track(&mut self, reply: &Bytes, now: Instant, leaf: bool) {
        let Ok(s) = std::str::from_utf8(reply) else {
            return;
        };
        let allowed = if leaf {
            self.perms.can_subscribe(s, None)
        } else {
            self.perms.can_publish(s)
        };
        if allowed {
            return;
        }
        if self.map.len() >= MAX_TRACKED {
            self.prune(now);
        }
        while self.map.len() >= MAX_TRACKED {
            let Some((subject, at)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&subject).is_some_and(|t| t.at == at) {
                self.map.remove(&subject);
            }
        }
        self.map.insert(
            reply.clone(),
            Tracked {
                at: now,
                answers: 0,
            },
        );
        self.order.push_back((reply.clone(), now));
        if self.order.len() > 2 * MAX_TRACKED {
            self.rebuild_order();
        }
    }

    /// Whether a publish to `subject` is an allowed answer; counts it.
    pub(crate) fn answer(&mut self, subject: &[u8], now: Instant) -> bool {
        let Some(t) = self.map.get_mut(subject) else {
            return false;
        };
        let expired = self
            .perm
            .expires
            .is_some_and(|e| now.saturating_duration_since(t.at) > e);
        if expired {
            self.map.remove(subject);
            return false;
        }
        t.answers += 1;
        if self.perm.max_msgs.is_some_and(|m| t.answers >= m) {
            self.map.remove(subject);
        }
        true
    }

    /// Number of subjects remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }

    fn prune(&mut self, now: Instant) {
        if let Some(e) = self.perm.expires {
            self.map
                .retain(|_, t| now.saturating_duration_since(t.at) <= e);
        }
        self.rebuild_order();
    }

    fn rebuild_order(&mut self) {
        let mut v: Vec<(Bytes, Instant)> =
            self.map.iter().map(|(s, t)| (s.clone(), t.at)).collect();
        v.sort_by_key(|(_, at)| *at);
        self.order = v.into();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::nats::{PermissionRules, Permissions};

    fn tracker(max: Option<u32>, expires: Option<Duration>) -> ReplyTracker {
        let p = Permissions {
            publish: PermissionRules {
                allow: vec!["ok.>".into()],
                deny: Vec::new(),
            },
            responses: Some(ResponsePermission {
                max_msgs: max,
                expires,
            }),
            ..Default::default()
        };
        ReplyTracker::new(&Arc::new(PermissionSet::new(&p).unwrap())).unwrap()
    }

    #[test]
    fn answers_are_counted_and_expire() {
        let now = Instant::now();
        let mut t = tracker(Some(2), Some(Duration::from_secs(10)));
        let r = Bytes::from_static(b"_INBOX.a");
        assert!(!t.answer(&r, now), "not delivered yet");
        t.track(&r, now, false);
        assert!(t.answer(&r, now));
        assert!(t.answer(&r, now));
        assert!(!t.answer(&r, now), "max 2");
        let r2 = Bytes::from_static(b"_INBOX.b");
        t.track(&r2, now, false);
        assert!(!t.answer(&r2, now + Duration::from_secs(11)), "expired");
        // A subject the user may publish to anyway is not remembered.
        t.track(&Bytes::from_static(b"ok.x"), now, false);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn the_oldest_go_first_when_full() {
        let now = Instant::now();
        let mut t = tracker(None, None);
        for i in 0..MAX_TRACKED + 10 {
            let at = now + Duration::from_micros(i as u64);
            t.track(&Bytes::from(format!("r.{i}")), at, false);
        }
        assert_eq!(t.len(), MAX_TRACKED);
        assert!(!t.answer(b"r.0", now));
        assert!(!t.answer(b"r.9", now));
        assert!(t.answer(b"r.10", now));
        assert!(t.answer(format!("r.{}", MAX_TRACKED + 9).as_bytes(), now));
        assert!(t.order.len() <= 2 * MAX_TRACKED);
    }
}
