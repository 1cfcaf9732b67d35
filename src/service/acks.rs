//! One ack inbox per service: a single wildcard subscription
//! (`<namespace>.ack.<service-id>.*`) whose last token routes each ack to
//! the publish waiting for it.
//!
//! Why: with routes between nodes every subscription change is sent to
//! every peer, so a subscribe/unsubscribe per acked publish would cost
//! cluster-wide traffic per message. Here the subscription is made once (on
//! the first acked publish) and each ack is handed to its waiter where it
//! is delivered (an inline subscription: on the stenographer's task for a
//! partition led here, on the route reader's for a remote leader), with no
//! queue and no task in between. The acks of partitions led in this
//! process skip NATS altogether while the service's subscription is the
//! only interest in their inbox ([`AckRouter::local_acks`]): no encoding,
//! publishing or decoding; anyone else subscribed still gets them over
//! NATS.
//!
//! Bounds: the waiter map holds one entry per publish in flight; every
//! entry is removed by its guard ([`AckWait`], [`AckSession`]) when the
//! publish completes, times out or is cancelled (the guard is dropped), and
//! a new waiter is refused with RESOURCE_EXHAUSTED once [`MAX_WAITERS`] are
//! registered. A PublishAsync session hands each ack to its [`AckSink`],
//! which queues it for the client; the session bounds that queue (see
//! `api::service`: a permit per response, [`SESSION_WINDOW`] of them).
//! Acks whose token is unknown (late, after a timeout) are dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::ServiceError;
use crate::nats::handle::{LocalClient, SoleInterest};
use crate::wire::{envelope, Ack};

/// Most publishes waiting for an ack at once, per service.
pub const MAX_WAITERS: usize = 65_536;
/// Acks a PublishAsync session may have outstanding.
pub const SESSION_WINDOW: usize = 4096;

/// Takes a PublishAsync session's acks, in arrival order, where they are
/// delivered: it must not block or publish.
pub type AckSink = Arc<dyn Fn(Ack) + Send + Sync>;

enum Waiter {
    /// A single publish: the first ack ends the wait.
    Once(oneshot::Sender<Ack>),
    /// A PublishAsync session: every ack goes to its sink.
    Session(AckSink),
}

type Waiters = Arc<Mutex<HashMap<u64, Waiter>>>;

/// The ack inbox of one service.
pub(super) struct AckRouter {
    nats: LocalClient,
    /// `<namespace>.ack.<service-id>`; inboxes are `<prefix>.<token>`.
    prefix: String,
    next_token: AtomicU64,
    waiters: Waiters,
    /// Set once the wildcard subscription and its task run; dropping the
    /// router stops the task.
    started: Mutex<Option<DropGuard>>,
    /// Whether the wildcard subscription is alone on an inbox; set when it
    /// is made (see [`AckRouter::local_acks`]).
    sole: Arc<OnceLock<SoleInterest>>,
}

impl AckRouter {
    pub(super) fn new(nats: LocalClient, namespace: &str) -> AckRouter {
        let inbox = nats.new_inbox();
        // new_inbox() gives "_INBOX.<id>"; keep only the unique part.
        let id = inbox.rsplit('.').next().unwrap_or(&inbox).to_string();
        AckRouter {
            nats,
            prefix: format!("{namespace}.ack.{id}"),
            next_token: AtomicU64::new(1),
            waiters: Arc::default(),
            started: Mutex::new(None),
            sole: Arc::default(),
        }
    }

    /// Publishes waiting for an ack.
    pub(super) fn pending(&self) -> usize {
        self.waiters.lock().len()
    }

    /// Makes the inline wildcard subscription (and the task that releases
    /// the waiters when it ends) on first use.
    fn start(&self) -> Result<(), ServiceError> {
        let mut started = self.started.lock();
        if started.is_some() {
            return Ok(());
        }
        // Acks are routed where they are delivered (the partition's
        // stenographer, or a route's reader for a remote leader): a map
        // lookup and a queue push, no task hop.
        let route = {
            let waiters = self.waiters.clone();
            move |subject: &[u8], payload: &bytes::Bytes| route_ack(&waiters, subject, payload)
        };
        let mut sub = self
            .nats
            .subscribe_inline(&format!("{}.*", self.prefix), Arc::new(route))?;
        let _ = self.sole.set(sub.sole_interest());
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        let waiters = self.waiters.clone();
        tokio::spawn(async move {
            // The subscription yields nothing; it ends with the NATS server.
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = sub.next() => {}
            }
            // Waiters see their channel close: "server shutting down".
            waiters.lock().clear();
        });
        *started = Some(cancel.drop_guard());
        Ok(())
    }

    fn register(&self, w: Waiter) -> Result<(u64, String), ServiceError> {
        self.start()?;
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        {
            let mut map = self.waiters.lock();
            if map.len() >= MAX_WAITERS {
                return Err(ServiceError::ResourceExhausted(
                    "too many publishes waiting for acks".into(),
                ));
            }
            map.insert(token, w);
        }
        Ok((token, format!("{}.{token}", self.prefix)))
    }

    /// Delivers the acks of partitions led in this process straight to
    /// their waiter, without encoding, publishing and decoding them, when
    /// this router's subscription is the only interest in the inbox (see
    /// [`SoleInterest::holds`]); any other ack is given back to go over
    /// NATS.
    pub(super) fn local_acks(&self) -> crate::partition::LocalAcks {
        let waiters = self.waiters.clone();
        let sole = self.sole.clone();
        let prefix = format!("{}.", self.prefix);
        Arc::new(move |ack: Ack| {
            let token = ack
                .ack_inbox
                .strip_prefix(&prefix)
                .and_then(|t| t.parse::<u64>().ok());
            match token {
                Some(token) if sole.get().is_some_and(|s| s.holds(&ack.ack_inbox)) => {
                    hand_over(&waiters, token, ack);
                    None
                }
                _ => Some(ack),
            }
        })
    }

    /// Registers a single publish's wait; the inbox goes into its envelope.
    pub(super) fn wait_one(&self) -> Result<AckWait, ServiceError> {
        let (tx, rx) = oneshot::channel();
        let (token, inbox) = self.register(Waiter::Once(tx))?;
        Ok(AckWait {
            inbox,
            rx,
            _entry: Entry {
                waiters: self.waiters.clone(),
                token,
            },
        })
    }

    /// Registers a PublishAsync session: one inbox for all its requests,
    /// whose acks go to `sink`.
    pub(super) fn session(&self, sink: AckSink) -> Result<AckSession, ServiceError> {
        let (token, inbox) = self.register(Waiter::Session(sink))?;
        Ok(AckSession {
            inbox,
            _entry: Entry {
                waiters: self.waiters.clone(),
                token,
            },
        })
    }
}

/// Hands the ack on `subject` (`<prefix>.<token>`) to its waiter; acks
/// with an unknown token or that do not decode are dropped.
fn route_ack(waiters: &Waiters, subject: &[u8], payload: &bytes::Bytes) {
    let token = subject
        .rsplit(|&b| b == b'.')
        .next()
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.parse::<u64>().ok());
    let Some(token) = token else { return };
    let Ok(ack) = envelope::decode_ack(payload) else {
        return;
    };
    hand_over(waiters, token, ack);
}

/// Gives `ack` to the waiter of `token`; an unknown token's is dropped.
fn hand_over(waiters: &Waiters, token: u64, ack: Ack) {
    let mut w = waiters.lock();
    match w.get(&token) {
        Some(Waiter::Once(_)) => {
            if let Some(Waiter::Once(tx)) = w.remove(&token) {
                let _ = tx.send(ack);
            }
        }
        Some(Waiter::Session(sink)) => {
            // Outside the map's lock: the sink queues a response.
            let sink = sink.clone();
            drop(w);
            sink(ack);
        }
        None => {}
    }
}

/// Removes a waiter from the map when dropped (completion, timeout, or the
/// caller going away).
struct Entry {
    waiters: Waiters,
    token: u64,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.waiters.lock().remove(&self.token);
    }
}

/// One publish waiting for its ack.
pub struct AckWait {
    /// The inbox to put in the envelope.
    pub inbox: String,
    rx: oneshot::Receiver<Ack>,
    _entry: Entry,
}

impl AckWait {
    /// The ack, `None` if the service or the NATS server stopped first.
    pub async fn recv(self) -> Option<Ack> {
        self.rx.await.ok()
    }
}

/// A PublishAsync session's share of the ack inbox; unregisters (and
/// drops its sink) when dropped.
pub struct AckSession {
    /// The inbox every acked request of the session carries.
    pub inbox: String,
    _entry: Entry,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::nats::NatsServer;

    async fn server() -> NatsServer {
        NatsServer::start(crate::config::nats::NatsOptions {
            host: "127.0.0.1".into(),
            port: 0,
            ..Default::default()
        })
        .await
        .unwrap()
    }

    fn ack(corr: &str) -> bytes::Bytes {
        envelope::encode_ack(&Ack {
            correlation_id: corr.into(),
            ..Default::default()
        })
    }

    /// Every way a wait ends removes its entry: answered, timed out,
    /// cancelled; sessions too. Acks for unknown tokens are dropped.
    #[tokio::test]
    async fn waiters_never_leak() {
        let nats = server().await;
        let client = nats.local_client("test");
        let router = AckRouter::new(client.clone(), "ns");
        let subs_before = nats.varz_json()["subscriptions"].as_u64().unwrap();

        // Answered.
        let mut answered = Vec::new();
        for i in 0..100 {
            let w = router.wait_one().unwrap();
            assert!(w.inbox.starts_with("ns.ack."), "{}", w.inbox);
            answered.push((i, w));
        }
        assert_eq!(router.pending(), 100);
        for (i, w) in &answered {
            client
                .publish(&w.inbox, None, None, ack(&format!("c{i}")))
                .unwrap();
        }
        for (i, w) in answered {
            let a = tokio::time::timeout(Duration::from_secs(5), w.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(a.correlation_id, format!("c{i}"));
        }
        assert_eq!(router.pending(), 0);

        // Timed out, then its ack comes late and goes nowhere.
        let w = router.wait_one().unwrap();
        let inbox = w.inbox.clone();
        assert!(tokio::time::timeout(Duration::from_millis(20), w.recv())
            .await
            .is_err());
        assert_eq!(router.pending(), 0);
        client.publish(&inbox, None, None, ack("late")).unwrap();

        // Cancelled (the caller's future dropped mid-wait).
        let w = router.wait_one().unwrap();
        let task = tokio::spawn(w.recv());
        tokio::task::yield_now().await;
        task.abort();
        let _ = task.await;
        assert_eq!(router.pending(), 0);

        // A session: many acks on one inbox, in order, unregistered when
        // dropped.
        let (tx, mut q) = tokio::sync::mpsc::unbounded_channel();
        let session = router
            .session(Arc::new(move |a| {
                let _ = tx.send(a);
            }))
            .unwrap();
        for i in 0..10 {
            client
                .publish(&session.inbox, None, None, ack(&format!("s{i}")))
                .unwrap();
        }
        for i in 0..10 {
            let a = tokio::time::timeout(Duration::from_secs(5), q.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(a.correlation_id, format!("s{i}"));
        }
        assert_eq!(router.pending(), 1);
        drop(session);
        assert_eq!(router.pending(), 0);
        assert!(q.recv().await.is_none(), "the sink went with the session");

        // One subscription served all of it.
        let subs_after = nats.varz_json()["subscriptions"].as_u64().unwrap();
        assert_eq!(subs_after, subs_before + 1);
        nats.shutdown().await;
    }

    /// The in-process path takes an ack only for a waiter of this router
    /// and only while its subscription is the inbox's sole interest;
    /// otherwise the ack is given back, to go over NATS.
    #[tokio::test]
    async fn local_acks_step_aside_for_other_subscribers() {
        let nats = server().await;
        let client = nats.local_client("test");
        let router = AckRouter::new(client.clone(), "ns");
        let local = router.local_acks();
        let (tx, mut q) = tokio::sync::mpsc::unbounded_channel();
        let session = router
            .session(Arc::new(move |a| {
                let _ = tx.send(a);
            }))
            .unwrap();
        let mine = |corr: &str| Ack {
            ack_inbox: session.inbox.clone(),
            correlation_id: corr.into(),
            ..Default::default()
        };

        // Taken and delivered at once.
        assert!(local(mine("direct")).is_none());
        assert_eq!(q.try_recv().unwrap().correlation_id, "direct");

        // Someone else's inbox, or a token that is not a number: given back.
        for inbox in ["other.inbox", "ns.ack", &format!("{}x", session.inbox)] {
            let a = Ack {
                ack_inbox: inbox.to_string(),
                ..Default::default()
            };
            assert_eq!(local(a).unwrap().ack_inbox, inbox);
        }

        // Another subscriber of the inbox: given back while it listens.
        let watcher = nats.local_client("watcher");
        let sub = watcher.subscribe("ns.ack.>", None).unwrap();
        assert_eq!(local(mine("watched")).unwrap().correlation_id, "watched");
        assert!(q.try_recv().is_err(), "not delivered twice");
        drop(sub);
        assert!(local(mine("again")).is_none());
        assert_eq!(q.try_recv().unwrap().correlation_id, "again");

        // Another subscription of the router's own client (a publish that
        // waits on an inbox it chose) counts as another subscriber too.
        let own = client.subscribe(&session.inbox, None).unwrap();
        assert_eq!(local(mine("own")).unwrap().correlation_id, "own");
        assert!(q.try_recv().is_err(), "not delivered twice");
        drop(own);
        assert!(local(mine("last")).is_none());
        assert_eq!(q.try_recv().unwrap().correlation_id, "last");
        drop(session);
        nats.shutdown().await;
    }

    /// The map is bounded: past MAX_WAITERS a new wait is refused.
    #[tokio::test]
    async fn waiters_are_bounded() {
        let nats = server().await;
        let router = AckRouter::new(nats.local_client("test"), "ns");
        let held: Vec<AckWait> = (0..MAX_WAITERS)
            .map(|_| router.wait_one().unwrap())
            .collect();
        assert!(matches!(
            router.wait_one(),
            Err(ServiceError::ResourceExhausted(_))
        ));
        drop(held);
        assert_eq!(router.pending(), 0);
        assert!(router.wait_one().is_ok());
        nats.shutdown().await;
    }
}
