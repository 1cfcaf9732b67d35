//! The subscription index: a trie of subject tokens with `*` and `>`
//! wildcards, queue groups, and a bounded match-result cache.
//!
//! Items are `Arc<T>` compared by pointer, so the same subscription can be
//! removed exactly. A match returns plain subscriptions and, per queue
//! group name, the group's members (groups of the same name found under
//! different patterns are merged, as in nats-server).
//!
//! Invariants: the cache never holds a result older than the trie. Every
//! insert/remove runs under the trie's write lock and drops the cache
//! entries whose subject the changed pattern matches; lookups fill the cache
//! while holding the trie's read lock, so a stale result can never be stored.
//! [`Sublist::genid`] changes on every modification, which lets connections
//! keep their own lock-free caches in front of this one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use thiserror::Error;

use super::subject::is_valid_subject;

/// Maximum number of cached match results.
pub const CACHE_MAX: usize = 1024;
/// How many entries are evicted at once when the cache is full.
const CACHE_SWEEP: usize = 256;

/// Errors of the subscription index.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SublistError {
    /// The subject is not a valid subscription subject.
    #[error("invalid subject")]
    InvalidSubject,
}

/// The result of matching a literal subject.
#[derive(Debug)]
pub struct MatchResult<T> {
    /// Plain subscriptions: each gets a copy.
    pub psubs: Vec<Arc<T>>,
    /// Queue groups: each group gets one copy, delivered to one member.
    pub qsubs: Vec<(String, Vec<Arc<T>>)>,
}

impl<T> MatchResult<T> {
    fn empty() -> Self {
        MatchResult {
            psubs: Vec::new(),
            qsubs: Vec::new(),
        }
    }

    /// Whether nothing matched.
    pub fn is_empty(&self) -> bool {
        self.psubs.is_empty() && self.qsubs.is_empty()
    }
}

struct Node<T> {
    psubs: Vec<Arc<T>>,
    qsubs: HashMap<String, Vec<Arc<T>>>,
    next: Option<Box<Level<T>>>,
}

impl<T> Node<T> {
    fn new() -> Self {
        Node {
            psubs: Vec::new(),
            qsubs: HashMap::new(),
            next: None,
        }
    }
    fn is_empty(&self) -> bool {
        self.psubs.is_empty()
            && self.qsubs.is_empty()
            && self.next.as_ref().is_none_or(|l| l.is_empty())
    }
}

struct Level<T> {
    nodes: HashMap<String, Node<T>>,
    pwc: Option<Box<Node<T>>>,
    fwc: Option<Box<Node<T>>>,
}

impl<T> Level<T> {
    fn new() -> Self {
        Level {
            nodes: HashMap::new(),
            pwc: None,
            fwc: None,
        }
    }
    fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.pwc.is_none() && self.fwc.is_none()
    }
}

/// Counters reported by `/subsz`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SublistStats {
    /// Subscriptions in the index.
    pub num_subscriptions: u64,
    /// Cached match results.
    pub num_cache: u64,
    /// Inserts since start.
    pub num_inserts: u64,
    /// Removals since start.
    pub num_removes: u64,
    /// Matches since start.
    pub num_matches: u64,
    /// Share of matches answered by the cache.
    pub cache_hit_rate: f64,
    /// Largest fan-out among cached results.
    pub max_fanout: u64,
    /// Average fan-out among cached results.
    pub avg_fanout: f64,
}

/// The subscription index. Shared by all connections of a server.
pub struct Sublist<T> {
    root: RwLock<Level<T>>,
    cache: Mutex<HashMap<String, Arc<MatchResult<T>>>>,
    genid: AtomicU64,
    count: AtomicU64,
    inserts: AtomicU64,
    removes: AtomicU64,
    matches: AtomicU64,
    cache_hits: AtomicU64,
}

impl<T> Default for Sublist<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Sublist<T> {
    /// An empty index.
    pub fn new() -> Self {
        Sublist {
            root: RwLock::new(Level::new()),
            cache: Mutex::new(HashMap::new()),
            genid: AtomicU64::new(0),
            count: AtomicU64::new(0),
            inserts: AtomicU64::new(0),
            removes: AtomicU64::new(0),
            matches: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
        }
    }

    /// Changes whenever the index is modified.
    #[inline]
    pub fn genid(&self) -> u64 {
        self.genid.load(Ordering::Acquire)
    }

    /// Number of subscriptions.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Adds `item` under `subject` (optionally in queue group `queue`).
    pub fn insert(
        &self,
        subject: &str,
        queue: Option<&str>,
        item: Arc<T>,
    ) -> Result<(), SublistError> {
        if !is_valid_subject(subject) {
            return Err(SublistError::InvalidSubject);
        }
        let mut root = self.root.write();
        let mut level: &mut Level<T> = &mut root;
        let mut tokens = subject.split('.').peekable();
        let node = loop {
            let Some(tok) = tokens.next() else {
                return Err(SublistError::InvalidSubject);
            };
            let node: &mut Node<T> = match tok {
                "*" => level.pwc.get_or_insert_with(|| Box::new(Node::new())),
                ">" => level.fwc.get_or_insert_with(|| Box::new(Node::new())),
                t => level.nodes.entry(t.to_string()).or_insert_with(Node::new),
            };
            if tokens.peek().is_none() {
                break node;
            }
            level = node.next.get_or_insert_with(|| Box::new(Level::new()));
        };
        match queue {
            None => node.psubs.push(item),
            Some(q) => node.qsubs.entry(q.to_string()).or_default().push(item),
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.inserts.fetch_add(1, Ordering::Relaxed);
        self.genid.fetch_add(1, Ordering::AcqRel);
        self.invalidate(subject);
        drop(root);
        Ok(())
    }

    /// Removes `item` from `subject`/`queue`. Returns whether it was there.
    pub fn remove(&self, subject: &str, queue: Option<&str>, item: &Arc<T>) -> bool {
        let mut root = self.root.write();
        let tokens: Vec<&str> = subject.split('.').collect();
        let removed = remove_rec(&mut root, &tokens, queue, item);
        if removed {
            self.count.fetch_sub(1, Ordering::Relaxed);
            self.removes.fetch_add(1, Ordering::Relaxed);
            self.genid.fetch_add(1, Ordering::AcqRel);
            self.invalidate(subject);
        }
        drop(root);
        removed
    }

    /// Drops cached results for subjects matched by `pattern`. Called with
    /// the trie's write lock held.
    fn invalidate(&self, pattern: &str) {
        let mut cache = self.cache.lock();
        if cache.is_empty() {
            return;
        }
        if !pattern.split('.').any(|t| t == "*" || t == ">") {
            cache.remove(pattern);
        } else {
            cache.retain(|k, _| !super::subject::matches(pattern, k));
        }
    }

    /// Matches a literal subject.
    pub fn match_subject(&self, subject: &str) -> Arc<MatchResult<T>> {
        self.matches.fetch_add(1, Ordering::Relaxed);
        if let Some(r) = self.cache.lock().get(subject) {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return r.clone();
        }
        let root = self.root.read();
        let mut result = MatchResult::empty();
        let tokens: Vec<&str> = subject.split('.').collect();
        if tokens.iter().all(|t| !t.is_empty()) {
            match_level(&root, &tokens, &mut result);
        }
        let result = Arc::new(result);
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_MAX {
            let victims: Vec<String> = cache.keys().take(CACHE_SWEEP).cloned().collect();
            for v in victims {
                cache.remove(&v);
            }
        }
        cache.insert(subject.to_string(), result.clone());
        drop(cache);
        drop(root);
        result
    }

    /// Every subscription with its subject and queue (for `/subsz`, `/connz`).
    pub fn all(&self) -> Vec<(String, Option<String>, Arc<T>)> {
        let root = self.root.read();
        let mut out = Vec::new();
        collect_level(&root, String::new(), &mut out);
        out
    }

    /// Statistics for `/subsz`.
    pub fn stats(&self) -> SublistStats {
        let matches = self.matches.load(Ordering::Relaxed);
        let hits = self.cache_hits.load(Ordering::Relaxed);
        let cache = self.cache.lock();
        let mut max_fanout = 0u64;
        let mut total_fanout = 0u64;
        for r in cache.values() {
            let f = (r.psubs.len() + r.qsubs.len()) as u64;
            max_fanout = max_fanout.max(f);
            total_fanout += f;
        }
        SublistStats {
            num_subscriptions: self.count(),
            num_cache: cache.len() as u64,
            num_inserts: self.inserts.load(Ordering::Relaxed),
            num_removes: self.removes.load(Ordering::Relaxed),
            num_matches: matches,
            cache_hit_rate: if matches == 0 {
                0.0
            } else {
                hits as f64 / matches as f64
            },
            max_fanout,
            avg_fanout: if cache.is_empty() {
                0.0
            } else {
                total_fanout as f64 / cache.len() as f64
            },
        }
    }
}

fn add_node<T>(node: &Node<T>, result: &mut MatchResult<T>) {
    result.psubs.extend(node.psubs.iter().cloned());
    for (q, members) in &node.qsubs {
        if members.is_empty() {
            continue;
        }
        if let Some((_, existing)) = result.qsubs.iter_mut().find(|(n, _)| n == q) {
            existing.extend(members.iter().cloned());
        } else {
            result.qsubs.push((q.clone(), members.clone()));
        }
    }
}

fn match_level<T>(level: &Level<T>, tokens: &[&str], result: &mut MatchResult<T>) {
    let Some((tok, rest)) = tokens.split_first() else {
        return;
    };
    if let Some(fwc) = &level.fwc {
        add_node(fwc, result);
    }
    if let Some(pwc) = &level.pwc {
        if rest.is_empty() {
            add_node(pwc, result);
        } else if let Some(next) = &pwc.next {
            match_level(next, rest, result);
        }
    }
    if let Some(node) = level.nodes.get(*tok) {
        if rest.is_empty() {
            add_node(node, result);
        } else if let Some(next) = &node.next {
            match_level(next, rest, result);
        }
    }
}

fn remove_rec<T>(
    level: &mut Level<T>,
    tokens: &[&str],
    queue: Option<&str>,
    item: &Arc<T>,
) -> bool {
    let Some((tok, rest)) = tokens.split_first() else {
        return false;
    };
    let node: &mut Node<T> = match *tok {
        "*" => match level.pwc.as_deref_mut() {
            Some(n) => n,
            None => return false,
        },
        ">" => match level.fwc.as_deref_mut() {
            Some(n) => n,
            None => return false,
        },
        t => match level.nodes.get_mut(t) {
            Some(n) => n,
            None => return false,
        },
    };
    let removed = if rest.is_empty() {
        match queue {
            None => remove_item(&mut node.psubs, item),
            Some(q) => match node.qsubs.get_mut(q) {
                Some(members) => {
                    let r = remove_item(members, item);
                    if members.is_empty() {
                        node.qsubs.remove(q);
                    }
                    r
                }
                None => false,
            },
        }
    } else {
        match node.next.as_deref_mut() {
            Some(next) => {
                let r = remove_rec(next, rest, queue, item);
                if next.is_empty() {
                    node.next = None;
                }
                r
            }
            None => false,
        }
    };
    if removed && node.is_empty() {
        match *tok {
            "*" => level.pwc = None,
            ">" => level.fwc = None,
            t => {
                level.nodes.remove(t);
            }
        }
    }
    removed
}

fn remove_item<T>(v: &mut Vec<Arc<T>>, item: &Arc<T>) -> bool {
    match v.iter().position(|x| Arc::ptr_eq(x, item)) {
        Some(i) => {
            v.swap_remove(i);
            true
        }
        None => false,
    }
}

fn collect_level<T>(
    level: &Level<T>,
    prefix: String,
    out: &mut Vec<(String, Option<String>, Arc<T>)>,
) {
    let join = |t: &str| {
        if prefix.is_empty() {
            t.to_string()
        } else {
            format!("{prefix}.{t}")
        }
    };
    let visit = |subject: String, node: &Node<T>, out: &mut Vec<_>| {
        for s in &node.psubs {
            out.push((subject.clone(), None, s.clone()));
        }
        for (q, members) in &node.qsubs {
            for s in members {
                out.push((subject.clone(), Some(q.clone()), s.clone()));
            }
        }
        if let Some(next) = &node.next {
            collect_level(next, subject, out);
        }
    };
    for (t, node) in &level.nodes {
        visit(join(t), node, out);
    }
    if let Some(n) = &level.pwc {
        visit(join("*"), n, out);
    }
    if let Some(n) = &level.fwc {
        visit(join(">"), n, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(r: &MatchResult<&'static str>) -> Vec<&'static str> {
        let mut v: Vec<_> = r.psubs.iter().map(|s| **s).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn wildcards_and_cache() {
        let sl: Sublist<&'static str> = Sublist::new();
        let a = Arc::new("a");
        let b = Arc::new("b");
        let c = Arc::new("c");
        let d = Arc::new("d");
        sl.insert("foo.bar", None, a.clone()).unwrap();
        sl.insert("foo.*", None, b.clone()).unwrap();
        sl.insert("foo.>", None, c.clone()).unwrap();
        sl.insert(">", None, d.clone()).unwrap();
        assert_eq!(
            names(&sl.match_subject("foo.bar")),
            vec!["a", "b", "c", "d"]
        );
        assert_eq!(names(&sl.match_subject("foo.baz")), vec!["b", "c", "d"]);
        assert_eq!(names(&sl.match_subject("foo.bar.baz")), vec!["c", "d"]);
        assert_eq!(names(&sl.match_subject("foo")), vec!["d"]);
        // cached, then invalidated by removal
        assert_eq!(
            names(&sl.match_subject("foo.bar")),
            vec!["a", "b", "c", "d"]
        );
        assert!(sl.stats().cache_hit_rate > 0.0);
        assert!(sl.remove("foo.*", None, &b));
        assert!(!sl.remove("foo.*", None, &b));
        assert_eq!(names(&sl.match_subject("foo.bar")), vec!["a", "c", "d"]);
        let e = Arc::new("e");
        sl.insert("*.bar", None, e.clone()).unwrap();
        assert_eq!(
            names(&sl.match_subject("foo.bar")),
            vec!["a", "c", "d", "e"]
        );
        assert_eq!(sl.count(), 4);
        assert_eq!(sl.all().len(), 4);
        for (s, x) in [("foo.bar", &a), ("foo.>", &c), (">", &d), ("*.bar", &e)] {
            assert!(sl.remove(s, None, x));
        }
        assert_eq!(sl.count(), 0);
        assert!(sl.match_subject("foo.bar").is_empty());
        assert_eq!(
            sl.insert("foo..bar", None, a.clone()),
            Err(SublistError::InvalidSubject)
        );
        assert_eq!(
            sl.insert("foo.>.bar", None, a),
            Err(SublistError::InvalidSubject)
        );
    }

    #[test]
    fn queue_groups_merge_by_name() {
        let sl: Sublist<&'static str> = Sublist::new();
        sl.insert("foo.bar", Some("q"), Arc::new("a")).unwrap();
        sl.insert("foo.*", Some("q"), Arc::new("b")).unwrap();
        sl.insert("foo.*", Some("r"), Arc::new("c")).unwrap();
        let r = sl.match_subject("foo.bar");
        assert!(r.psubs.is_empty());
        assert_eq!(r.qsubs.len(), 2);
        let q = r.qsubs.iter().find(|(n, _)| n == "q").unwrap();
        assert_eq!(q.1.len(), 2);
    }

    #[test]
    fn cache_is_bounded() {
        let sl: Sublist<u32> = Sublist::new();
        sl.insert(">", None, Arc::new(1)).unwrap();
        for i in 0..(CACHE_MAX * 3) {
            assert_eq!(sl.match_subject(&format!("s.{i}")).psubs.len(), 1);
        }
        assert!(sl.stats().num_cache <= CACHE_MAX as u64);
    }
}
