//! The partitioned key-value service: keys map to `P` partitions by a
//! stable hash ([`partition_of`]), each partition is its own Raft group
//! with its own replica set placed over the nodes ([`placement`]), and
//! each node is one process whose one data directory holds all its
//! partitions as groups of one shared log (`quorumlog_raft::Node`).
//!
//! - **Reads and writes** are linearizable per key: a partition's leader
//!   answers a read once a quorum of its voters confirmed it still leads
//!   and it applied everything committed when the read arrived (a read
//!   index, openraft's `ensure_linearizable`), as the single-group
//!   service does; writes are exactly-once per client and partition.
//! - **A controller group** (every node a voter) holds the cluster's
//!   nodes, each partition's replica set and the reassignments asked for
//!   ([`control`]): KIP-455's alter and list across partitions, accepted
//!   or refused as a whole, cancel as a rollback to the set before the
//!   first call.
//! - **Each partition's leader carries its target out** ([`reconcile`]):
//!   one voter change at a time through openraft's membership, adding
//!   replicas as learners first, under the node's [`throttle::Throttle`].
//! - [`admin`]: the listings, the status and the metrics; [`client`]: the
//!   client that routes each key to its partition's leader; [`host`]: the
//!   node process.

pub mod admin;
pub mod cli;
pub mod client;
pub mod control;
pub mod host;
pub mod liveness;
pub mod reconcile;
pub mod throttle;

use crate::proto::{NodeRequest, Refusal, Request, Response};

/// The controller group's partition number (its group id on the shared
/// log is [`CONTROLLER_GROUP`]).
pub const CONTROLLER: u32 = u32::MAX;

/// The controller's group id on each node's shared log.
pub const CONTROLLER_GROUP: u64 = u64::MAX;

/// The group id of incarnation `incarnation` of partition `partition` on
/// a node's shared log: a replica removed from a node is dropped there,
/// and a dropped group's id is never used again, so a replica added back
/// later is a new incarnation (an empty group).
pub fn group_id(partition: u32, incarnation: u32) -> u64 {
    u64::from(incarnation) << 32 | u64::from(partition)
}

/// The partition and incarnation of a group id (`None`: the controller).
pub fn partition_of_group(group: u64) -> Option<(u32, u32)> {
    if group == CONTROLLER_GROUP {
        return None;
    }
    let p = u32::try_from(group & 0xffff_ffff).unwrap_or(0);
    let inc = u32::try_from(group >> 32).unwrap_or(0);
    Some((p, inc))
}

/// Partitions by default.
pub const PARTITIONS: u32 = 64;

/// Replicas per partition by default.
pub const REPLICATION: usize = 3;

/// Nodes by default.
pub const NODES: u64 = 5;

/// The partition of `key` among `partitions`: FNV-1a (64-bit) of its
/// bytes, modulo the count. Stable across processes, versions and
/// platforms: the same key always lives in the same partition.
pub fn partition_of(key: &str, partitions: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    u32::try_from(h % u64::from(partitions.max(1))).unwrap_or(0)
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

/// Asks the node at `addr` to host partition `partition` (an adding
/// replica), waiting at most `wait`.
///
/// # Errors
/// The node cannot be reached or refuses.
pub async fn host_on(
    router: &crate::net::Router,
    addr: &str,
    partition: u32,
    wait: std::time::Duration,
) -> Result<(), Refusal> {
    match router
        .call_addr(addr, Request::Node(NodeRequest::Host { partition }), wait)
        .await
    {
        Ok(Response::Done(r)) => r,
        Ok(_) => Err(Refusal::Failed {
            reason: format!("{addr}: unexpected answer to host"),
        }),
        Err(e) => Err(Refusal::Failed {
            reason: format!("{addr}: {e}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: the key-to-partition map never changes (golden values)
    /// and spreads keys over every partition.
    #[test]
    fn the_partition_of_a_key_is_stable_and_spread() {
        assert_eq!(partition_of("", 64), (0xcbf2_9ce4_8422_2325u64 % 64) as u32);
        let golden: Vec<u32> = ["a", "key-1", "user/42"]
            .iter()
            .map(|k| partition_of(k, 64))
            .collect();
        // FNV-1a("a") = 0xaf63dc4c8601ec8c, the published test vector.
        assert_eq!(golden, vec![12, 38, 33]);
        let mut seen = [0u32; 64];
        for i in 0..64_000 {
            seen[partition_of(&format!("k{i}"), 64) as usize] += 1;
        }
        assert!(seen.iter().all(|n| (700..1300).contains(n)), "{seen:?}");
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
