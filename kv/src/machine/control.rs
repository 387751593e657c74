//! The controller's state: the partitioned service's nodes, each
//! partition's replica set, and the reassignments asked for (KIP-455's
//! `AlterPartitionReassignments` and `ListPartitionReassignments`).
//!
//! It is replicated as the controller group's commands
//! ([`Control`], applied by [`Controller::apply`]). An `Alter` is checked
//! whole when it is applied, on every replica alike: either every
//! partition it names takes its new target (one new generation for all
//! of them), or nothing changes and the reply names each refused
//! partition with its reason. A partition's leader carries the target out
//! ((`server::reconcile`)) and reports it finished (`Completed`).
//!
//! Cancelling is a rollback to the set before the first call: a pending
//! reassignment keeps its `origin` through every replacement, and a
//! cancel makes the origin its target.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::wire::admin::{AlterError, Control, NodeInfo, PartitionRecord, Pending, Replica};

/// Most replicas a target may name.
pub const MAX_REPLICAS: usize = 7;

/// The controller's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Controller {
    /// Every node.
    pub nodes: BTreeMap<u64, NodeInfo>,
    /// Every partition.
    pub partitions: BTreeMap<u32, PartitionRecord>,
    /// The latest generation given out.
    pub generation: u64,
}

impl Controller {
    /// Applies `c`: the generation it leaves (see [`Control`]).
    ///
    /// # Errors
    /// An `Alter` refused: each refused partition with its reason (and
    /// nothing changed).
    pub fn apply(&mut self, c: Control) -> Result<u64, Vec<(u32, AlterError)>> {
        match c {
            Control::Create { nodes, placement } => self.create(nodes, placement),
            Control::Register {
                node,
                addr,
                directory,
            } => {
                let first = self.nodes.get(&node).map_or(directory, |n| n.first);
                self.nodes.insert(
                    node,
                    NodeInfo {
                        addr,
                        directory,
                        first,
                    },
                );
            }
            Control::Alter { targets, now_ms } => return self.alter(targets, now_ms),
            Control::CancelAll => self.cancel_all(),
            Control::Completed {
                partition,
                generation,
                voters,
            } => {
                if let Some(rec) = self.partitions.get_mut(&partition) {
                    let done = rec
                        .pending
                        .as_ref()
                        .is_some_and(|p| p.generation == generation);
                    if done {
                        rec.pending = None;
                        rec.replicas = voters;
                    }
                }
            }
        }
        Ok(self.generation)
    }

    fn create(&mut self, nodes: Vec<(u64, String, u128)>, placement: Vec<Vec<u64>>) {
        if !self.nodes.is_empty() {
            return;
        }
        for (id, addr, directory) in nodes {
            let first = directory;
            self.nodes.insert(
                id,
                NodeInfo {
                    addr,
                    directory,
                    first,
                },
            );
        }
        for (p, set) in placement.into_iter().enumerate() {
            let replicas = set
                .into_iter()
                .map(|node| Replica {
                    node,
                    directory: self.nodes.get(&node).map_or(0, |n| n.directory),
                })
                .collect();
            let p = u32::try_from(p).unwrap_or(u32::MAX);
            self.partitions.insert(
                p,
                PartitionRecord {
                    replicas,
                    pending: None,
                },
            );
        }
    }

    fn alter(
        &mut self,
        targets: Vec<(u32, Vec<u64>)>,
        now_ms: u64,
    ) -> Result<u64, Vec<(u32, AlterError)>> {
        let refused = self.check(&targets);
        if !refused.is_empty() {
            return Err(refused);
        }
        self.generation += 1;
        let g = self.generation;
        for (p, target) in targets {
            let Some(rec) = self.partitions.get_mut(&p) else {
                continue;
            };
            let current = rec.nodes();
            rec.pending = match (rec.pending.take(), target.is_empty()) {
                (Some(mut pending), true) => {
                    pending.target = pending.origin.clone();
                    pending.cancelled = true;
                    pending.generation = g;
                    Some(pending)
                }
                (Some(mut pending), false) => {
                    pending.target = target;
                    pending.cancelled = false;
                    pending.generation = g;
                    Some(pending)
                }
                (None, _) => Some(Pending {
                    origin: current,
                    target,
                    cancelled: false,
                    started_ms: now_ms,
                    generation: g,
                }),
            };
        }
        Ok(g)
    }

    fn cancel_all(&mut self) {
        if self.partitions.values().all(|r| r.pending.is_none()) {
            return;
        }
        self.generation += 1;
        let g = self.generation;
        for pending in self
            .partitions
            .values_mut()
            .filter_map(|r| r.pending.as_mut())
        {
            pending.target = pending.origin.clone();
            pending.cancelled = true;
            pending.generation = g;
        }
    }

    /// Every refusal an `Alter` of `targets` gets (none: accepted).
    pub fn check(&self, targets: &[(u32, Vec<u64>)]) -> Vec<(u32, AlterError)> {
        let mut refused = Vec::new();
        let mut seen = BTreeSet::new();
        for (p, target) in targets {
            if !seen.insert(*p) {
                refused.push((*p, AlterError::DuplicatePartition));
                continue;
            }
            if let Err(e) = self.check_one(*p, target) {
                refused.push((*p, e));
            }
        }
        refused
    }

    fn check_one(&self, p: u32, target: &[u64]) -> Result<(), AlterError> {
        let rec = self
            .partitions
            .get(&p)
            .ok_or(AlterError::UnknownPartition)?;
        if target.is_empty() {
            return rec
                .pending
                .as_ref()
                .map(|_| ())
                .ok_or(AlterError::NoReassignment);
        }
        if target.len() > MAX_REPLICAS {
            return Err(AlterError::TooLarge(target.len()));
        }
        let mut nodes = BTreeSet::new();
        for n in target {
            if !self.nodes.contains_key(n) {
                return Err(AlterError::UnknownNode(*n));
            }
            if !nodes.insert(*n) {
                return Err(AlterError::DuplicateReplica(*n));
            }
        }
        let replaced = rec
            .replicas
            .iter()
            .filter(|r| nodes.contains(&r.node))
            .filter(|r| {
                self.nodes
                    .get(&r.node)
                    .is_some_and(|n| n.directory != r.directory)
            })
            .count();
        let current = rec.replicas.len();
        if (current - replaced) * 2 <= current {
            return Err(AlterError::NoMajorityPath { replaced, current });
        }
        Ok(())
    }

    /// The partitions with a reassignment in progress.
    pub fn reassigning(&self) -> impl Iterator<Item = (u32, &PartitionRecord, &Pending)> {
        self.partitions
            .iter()
            .filter_map(|(p, r)| r.pending.as_ref().map(|pending| (*p, r, pending)))
    }
}

/// The placement of `partitions` partitions of `replication` replicas
/// over nodes `1..=nodes`: partition `p`'s replicas are the nodes
/// `(p + i) mod nodes + 1` for `i < replication`, so every node holds
/// the same number of replicas (± 1) and leads about as many (the first
/// replica of each is its first leader).
pub fn placement(partitions: u32, nodes: u64, replication: usize) -> Vec<Vec<u64>> {
    let nodes = nodes.max(1);
    let rf = u64::try_from(replication).unwrap_or(1).clamp(1, nodes);
    (0..u64::from(partitions))
        .map(|p| (0..rf).map(|i| (p + i) % nodes + 1).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Controller {
        let mut c = Controller::default();
        let nodes = (1..=5)
            .map(|i| (i, format!("n{i}"), u128::from(i) * 10))
            .collect();
        let placement = placement(8, 5, 3);
        c.apply(Control::Create { nodes, placement }).unwrap();
        c
    }

    fn alter(c: &mut Controller, targets: &[(u32, &[u64])]) -> Result<u64, Vec<(u32, AlterError)>> {
        let targets = targets.iter().map(|(p, t)| (*p, t.to_vec())).collect();
        c.apply(Control::Alter { targets, now_ms: 5 })
    }

    /// Invariant: an alter with any refused partition changes nothing, and
    /// names every refused partition with its reason.
    #[test]
    fn an_alter_is_accepted_or_refused_whole() {
        let mut c = cluster();
        let before = c.clone();
        let r = alter(
            &mut c,
            &[
                (0, &[3, 4, 5]),
                (1, &[1, 1, 2]),
                (2, &[1, 9]),
                (99, &[1]),
                (3, &[]),
                (0, &[1, 2]),
            ],
        );
        let refused = r.unwrap_err();
        assert_eq!(
            refused,
            vec![
                (1, AlterError::DuplicateReplica(1)),
                (2, AlterError::UnknownNode(9)),
                (99, AlterError::UnknownPartition),
                (3, AlterError::NoReassignment),
                (0, AlterError::DuplicatePartition),
            ]
        );
        assert_eq!(c, before, "nothing changed");
        assert_eq!(alter(&mut c, &[(0, &[3, 4, 5]), (1, &[1, 2, 3])]), Ok(1));
        assert_eq!(c.reassigning().count(), 2);
    }

    /// Invariant: a cancel after any number of replacements returns to the
    /// set before the first call; a stale completion changes nothing.
    #[test]
    fn cancel_rolls_back_to_the_set_before_the_first_call() {
        let mut c = cluster();
        let origin = c.partitions[&0].nodes();
        alter(&mut c, &[(0, &[3, 4, 5])]).unwrap();
        let g2 = alter(&mut c, &[(0, &[2, 4, 5])]).unwrap();
        let p = c.partitions[&0].pending.clone().unwrap();
        assert_eq!(
            (
                p.origin.clone(),
                p.target.clone(),
                p.generation,
                p.started_ms
            ),
            (origin.clone(), vec![2, 4, 5], g2, 5)
        );
        // A completion of the replaced generation is stale.
        let stale = Control::Completed {
            partition: 0,
            generation: 1,
            voters: vec![],
        };
        c.apply(stale).unwrap();
        assert!(c.partitions[&0].pending.is_some());
        let g3 = alter(&mut c, &[(0, &[])]).unwrap();
        let p = c.partitions[&0].pending.clone().unwrap();
        assert!(p.cancelled);
        assert_eq!((p.target, p.generation), (origin.clone(), g3));
        // Done: the record takes the voters.
        let voters: Vec<Replica> = origin
            .iter()
            .map(|n| Replica {
                node: *n,
                directory: u128::from(*n) * 10,
            })
            .collect();
        c.apply(Control::Completed {
            partition: 0,
            generation: g3,
            voters: voters.clone(),
        })
        .unwrap();
        assert_eq!(c.partitions[&0].pending, None);
        assert_eq!(c.partitions[&0].replicas, voters);
    }

    /// Invariant: cancel-all turns every pending reassignment into a
    /// rollback, under one new generation.
    #[test]
    fn cancel_all_rolls_every_one_back() {
        let mut c = cluster();
        alter(&mut c, &[(0, &[3, 4, 5]), (4, &[2, 3, 4])]).unwrap();
        let g = c.apply(Control::CancelAll).unwrap();
        for (p, rec, pending) in c.reassigning() {
            assert!(pending.cancelled, "{p}");
            assert_eq!(pending.target, rec.nodes());
            assert_eq!(pending.generation, g);
        }
        assert_eq!(c.reassigning().count(), 2);
    }

    /// Invariant: a node's first directory is kept through every
    /// registration, so a node is `original` only while it never had
    /// another directory (a new node is original on its first one).
    #[test]
    fn a_registered_replacement_is_not_original() {
        let mut c = cluster();
        assert!(c.nodes.values().all(NodeInfo::original));
        let first = c.nodes[&2].directory;
        for directory in [999, 1000] {
            c.apply(Control::Register {
                node: 2,
                addr: String::new(),
                directory,
            })
            .unwrap();
            assert_eq!(c.nodes[&2].first, first);
            assert!(!c.nodes[&2].original());
        }
        c.apply(Control::Register {
            node: 9,
            addr: String::new(),
            directory: 77,
        })
        .unwrap();
        assert!(c.nodes[&9].original());
    }

    /// Invariant: a target that keeps replicas on replaced directories
    /// (lost disks) for a majority of the current set is refused.
    #[test]
    fn a_target_keeping_a_majority_of_lost_replicas_has_no_majority_path() {
        let mut c = cluster();
        let set = c.partitions[&0].nodes();
        for n in &set[..2] {
            c.apply(Control::Register {
                node: *n,
                addr: String::new(),
                directory: 999,
            })
            .unwrap();
        }
        let r = alter(&mut c, &[(0, &set)]).unwrap_err();
        assert_eq!(
            r,
            vec![(
                0,
                AlterError::NoMajorityPath {
                    replaced: 2,
                    current: 3
                }
            )]
        );
        // Dropping them is a path.
        let keep: Vec<u64> = vec![set[2], 4, 5];
        assert!(alter(&mut c, &[(0, &keep)]).is_ok());
    }

    /// Invariant: placement gives each partition `replication` distinct
    /// nodes and each node the same count (± 1) of replicas and of first
    /// replicas.
    #[test]
    #[allow(clippy::cast_possible_truncation, reason = "node ids below 6")]
    fn placement_is_even() {
        let p = placement(64, 5, 3);
        assert_eq!(p.len(), 64);
        let mut replicas = [0; 6];
        let mut first = [0; 6];
        for set in &p {
            let mut s = set.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), 3);
            for n in set {
                replicas[*n as usize] += 1;
            }
            first[set[0] as usize] += 1;
        }
        let (lo, hi) = (replicas[1..].iter().min(), replicas[1..].iter().max());
        assert!(hi.unwrap() - lo.unwrap() <= 1, "{replicas:?}");
        let (lo, hi) = (first[1..].iter().min(), first[1..].iter().max());
        assert!(hi.unwrap() - lo.unwrap() <= 1, "{first:?}");
        assert_eq!(
            placement(4, 2, 3)[0].len(),
            2,
            "never more replicas than nodes"
        );
    }
}
