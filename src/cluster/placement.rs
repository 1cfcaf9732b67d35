//! Partition placement: which brokers hold a new stream's partitions, and
//! which of them leads.
//!
//! Pure and deterministic (the state machine calls it at apply time, so
//! every replica computes the same answer): no clock, no randomness, ties
//! broken by server id.
//!
//! Rule, for each new partition in turn:
//! 1. replicas: the `rf` brokers holding the fewest partition replicas
//!    (ties: fewest led, then server id);
//! 2. leader: among those replicas, the one leading the fewest partitions
//!    (ties: fewest replicas, then server id);
//! 3. the counts are updated before the next partition, so the partitions
//!    of one stream spread over the brokers.
//!
//! The in-sync replica set of a new partition is every replica: all are
//! empty, so all are in sync; a replica that falls behind leaves it
//! (`ShrinkIsr`) and joins again once caught up (`ExpandIsr`).

use std::collections::BTreeMap;

/// How many partitions a broker holds and leads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Partitions it is a replica of (leader included).
    pub replicas: usize,
    /// Partitions it leads.
    pub leads: usize,
}

/// Where one partition goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Server id of the leader (the first replica).
    pub leader: String,
    /// Server ids of the replicas, leader first, then by load.
    pub replicas: Vec<String>,
}

/// Places `partitions` partitions of `rf` replicas each on the brokers of
/// `load` (server id → current load). `rf` must be between 1 and the number
/// of brokers; a larger value is clamped, and no brokers gives no placement.
pub fn place(load: &BTreeMap<String, Load>, rf: usize, partitions: usize) -> Vec<Placement> {
    let mut load = load.clone();
    let rf = rf.clamp(1, load.len().max(1));
    let mut out = Vec::with_capacity(partitions);
    if load.is_empty() {
        return out;
    }
    for _ in 0..partitions {
        let mut order: Vec<(&String, &Load)> = load.iter().collect();
        order.sort_by(|a, b| (a.1.replicas, a.1.leads, a.0).cmp(&(b.1.replicas, b.1.leads, b.0)));
        let mut replicas: Vec<String> =
            order.iter().take(rf).map(|(id, _)| (*id).clone()).collect();
        let leader_pos = replicas
            .iter()
            .enumerate()
            .min_by_key(|(_, id)| {
                let l = load.get(*id).copied().unwrap_or_default();
                (l.leads, l.replicas, (*id).clone())
            })
            .map_or(0, |(i, _)| i);
        let leader = replicas.remove(leader_pos);
        replicas.insert(0, leader.clone());
        for r in &replicas {
            if let Some(l) = load.get_mut(r) {
                l.replicas += 1;
            }
        }
        if let Some(l) = load.get_mut(&leader) {
            l.leads += 1;
        }
        out.push(Placement { leader, replicas });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(ids: &[&str]) -> BTreeMap<String, Load> {
        ids.iter()
            .map(|id| (id.to_string(), Load::default()))
            .collect()
    }

    fn leaders(p: &[Placement]) -> Vec<&str> {
        p.iter().map(|p| p.leader.as_str()).collect()
    }

    #[test]
    fn single_replicas_rotate_over_brokers() {
        let p = place(&brokers(&["a", "b", "c"]), 1, 5);
        assert_eq!(leaders(&p), ["a", "b", "c", "a", "b"]);
        assert!(p.iter().all(|p| p.replicas == [p.leader.clone()]));
    }

    #[test]
    fn leaders_spread_when_every_broker_is_a_replica() {
        let p = place(&brokers(&["a", "b", "c"]), 3, 3);
        assert_eq!(leaders(&p), ["a", "b", "c"]);
        for pl in &p {
            assert_eq!(pl.replicas.len(), 3);
            assert_eq!(pl.replicas[0], pl.leader, "leader first");
            let mut sorted = pl.replicas.clone();
            sorted.sort();
            assert_eq!(sorted, ["a", "b", "c"]);
        }
    }

    #[test]
    fn existing_load_is_avoided() {
        let mut load = brokers(&["a", "b", "c"]);
        load.insert(
            "a".into(),
            Load {
                replicas: 4,
                leads: 4,
            },
        );
        load.insert(
            "b".into(),
            Load {
                replicas: 1,
                leads: 0,
            },
        );
        // rf 2 goes to the two least loaded, c (nothing) and b (one replica);
        // both lead nothing, and c holds fewer replicas, so c leads.
        let p = place(&load, 2, 1);
        assert_eq!(p[0].replicas, ["c", "b"]);
        // Leading counts break the tie between equally loaded replicas.
        let mut load = brokers(&["a", "b"]);
        load.insert(
            "a".into(),
            Load {
                replicas: 2,
                leads: 2,
            },
        );
        load.insert(
            "b".into(),
            Load {
                replicas: 2,
                leads: 0,
            },
        );
        let p = place(&load, 2, 2);
        assert_eq!(leaders(&p), ["b", "b"]);
        let p = place(&load, 2, 3);
        assert_eq!(leaders(&p), ["b", "b", "a"]);
    }

    #[test]
    fn out_of_range_factors_are_clamped_and_no_brokers_places_nothing() {
        assert_eq!(place(&brokers(&["a", "b"]), 9, 1)[0].replicas.len(), 2);
        assert_eq!(place(&brokers(&["a", "b"]), 0, 1)[0].replicas.len(), 1);
        assert!(place(&BTreeMap::new(), 1, 3).is_empty());
    }
}
