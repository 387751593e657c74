//! Helpers shared by the engine's scenario tests.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "helpers shared by the scenario tests; each test binary uses some"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    ClusterId, DataDir, DirectoryId, Epoch, Meta, NodeId, OpenOptions, SharedFs,
};
use quorumlog_io::SimFs;
use quorumlog_log::SyncPolicy;
use quorumlog_raft::{kraft::Election, kraft::KraftReplica, Identity, NodeOptions};

pub(crate) mod replicas;
use quorumlog_testkit::small_log_options;

pub(crate) const DIR: &str = "/data";

/// Small segments, group commit.
pub(crate) fn options() -> NodeOptions {
    NodeOptions {
        log: small_log_options(),
        sync: SyncPolicy::GroupCommit,
        ..NodeOptions::default()
    }
}

/// The identity of node `node` (directory id `node + 1`: never zero).
pub(crate) fn meta(node: u64) -> Meta {
    Meta::new(
        ClusterId(1),
        NodeId(node),
        DirectoryId(u128::from(node) + 1),
    )
}

/// A formatted and opened `KRaft` replica of node `node` (a one-group
/// node) on a fresh simulated disk.
pub(crate) fn replica(node: u64, seed: u64) -> KraftReplica {
    replica_on(&SimFs::new(seed), node)
}

/// The replica of node `node` on `disk`, opened again (a reopen).
pub(crate) fn reopen_replica(disk: &SimFs, node: u64) -> KraftReplica {
    let fs: SharedFs = Arc::new(disk.clone());
    KraftReplica::open(&fs, Path::new(DIR), &Identity::of(&meta(node)), &options())
        .unwrap()
        .0
}

/// A formatted and opened replica of node `node` on `disk`.
pub(crate) fn replica_on(disk: &SimFs, node: u64) -> KraftReplica {
    let fs: SharedFs = Arc::new(disk.clone());
    quorumlog_raft::Node::format(&fs, Path::new(DIR), meta(node), &options()).unwrap();
    KraftReplica::open(&fs, Path::new(DIR), &Identity::of(&meta(node)), &options())
        .unwrap()
        .0
}

/// Makes the replica's node leader of a new epoch; returns the epoch.
pub(crate) fn lead(s: &KraftReplica) -> Epoch {
    let mut e = s.election();
    let epoch = e.become_candidate().unwrap();
    e.become_leader().unwrap();
    epoch
}

/// The election state of a freshly formatted node 1 (directory id 11),
/// with its disk.
pub(crate) fn fresh_election() -> (SimFs, Election) {
    let sim = SimFs::new(1);
    let fs: SharedFs = Arc::new(sim.clone());
    quorumlog_checkpoint::format_with(
        &fs,
        Path::new(DIR),
        Meta::new(ClusterId(1), NodeId(1), DirectoryId(11)),
    )
    .unwrap();
    let dd = Arc::new(DataDir::open(fs, Path::new(DIR), &OpenOptions::default()).unwrap());
    (sim, Election::open(dd, None).unwrap())
}
