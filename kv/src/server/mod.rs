//! The node process: keys map to `P ≥ 1` partitions by a stable hash
//! ([`partition_of`]), each partition is its own Raft group with its own
//! replica set placed over the nodes ([`placement`]), and each node is
//! one process whose one data directory holds all its partitions as
//! groups of one shared log (`quorumlog_raft::Node`).
//!
//! - **Reads and writes** are linearizable per key: a partition's leader
//!   answers a read once a quorum of its voters confirmed it still leads
//!   and it applied everything committed when the read arrived (a read
//!   index, openraft's `ensure_linearizable`); writes are exactly-once
//!   per client and partition.
//! - **A controller group** (every node a voter) holds the cluster's
//!   nodes, each partition's replica set and the reassignments asked for
//!   (`machine::control`): KIP-455's alter and list across partitions,
//!   accepted or refused as a whole, cancel as a rollback to the set
//!   before the first call. It is the only way replicas move.
//! - **Each partition's leader carries its target out** ([`reconcile`]):
//!   one voter change at a time through openraft's membership, adding
//!   replicas as learners first, under the node's throttle
//!   (`net::throttle`).
//! - **Quiet partitions** ([`liveness`]): no Raft timer runs; nodes beat
//!   to each other once per pair, and a follower elects only when no live
//!   node claims its partition.
//! - [`admin`]: the listings, the status and the metrics; [`host`]: the
//!   node process; [`prom`]: the storage's metrics over HTTP.

pub mod admin;
pub mod host;
pub mod liveness;
pub mod prom;
pub mod reconcile;

pub use crate::machine::control::placement;
pub use crate::wire::{partition_of, CONTROLLER};

use crate::wire::{NodeRequest, Refusal, Request, Response};

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

/// Asks the node at `addr` to host partition `partition` (an adding
/// replica, or a voter: see [`NodeRequest::Host`]), waiting at most
/// `wait`.
///
/// # Errors
/// The node cannot be reached or refuses.
pub async fn host_on(
    router: &crate::net::Router,
    addr: &str,
    partition: u32,
    voter: bool,
    wait: std::time::Duration,
) -> Result<(), Refusal> {
    let req = Request::Node(NodeRequest::Host { partition, voter });
    match router.call_addr(addr, req, wait).await {
        Ok(Response::Done(r)) => r,
        Ok(_) => Err(Refusal::Failed {
            reason: format!("{addr}: unexpected answer to host"),
        }),
        Err(e) => Err(Refusal::Failed {
            reason: format!("{addr}: {e}"),
        }),
    }
}
