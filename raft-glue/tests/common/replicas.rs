//! What the replica simulations share (`three_replicas.rs`,
//! `reassignment_sim.rs`): the options, a power-cut restart, a replica's
//! log position, a follower catching up from the leader (matching,
//! diverging truncation, snapshot install) and the committed-entry check.

use quorumlog_testkit::WingTest;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_log::SyncPolicy;
use quorumlog_raft::{
    kraft::FetchPosition, kraft::KraftReplica, kraft::LogPosition, Identity, Isolation, NodeOptions,
};
use quorumlog_snapshot::SnapshotId;

/// The simulations' options: no background syncs (the simulation decides
/// when each replica flushes).
pub(crate) fn sim_options() -> NodeOptions {
    NodeOptions {
        sync: SyncPolicy::Never,
        ..quorumlog_testkit::kraft_crash::crash_node_options()
    }
}

/// A fresh replica of node `node` with directory id `dir` on a new simulated
/// disk drawn from `disk_seed`: formatted, then opened.
pub(crate) fn fresh_store(disk_seed: u64, node: u64, dir: u128, at: &str) -> (SimFs, KraftReplica) {
    let disk = SimFs::new(disk_seed);
    let fs: SharedFs = Arc::new(disk.clone());
    let meta = Meta::new(ClusterId(7), NodeId(node), DirectoryId(dir));
    quorumlog_raft::Node::format(&fs, Path::new(at), meta, &sim_options()).unwrap();
    let store = KraftReplica::open(&fs, Path::new(at), &Identity::of(&meta), &sim_options())
        .unwrap()
        .0;
    (disk, store)
}

/// Power cut (unsynced writes lost), reboot, reopen.
pub(crate) fn power_cut(disk: &SimFs, store: KraftReplica, dir: &str) -> (SimFs, KraftReplica) {
    let expect = store.identity_in(ClusterId(7));
    drop(store);
    let disk = disk.crash_with(CrashPlan::LoseUnsynced);
    let fs: SharedFs = Arc::new(disk.clone());
    let store = KraftReplica::open(&fs, Path::new(dir), &expect, &sim_options())
        .unwrap()
        .0;
    (disk, store)
}

/// The epoch of a replica's last entry (its snapshot's for an empty log).
pub(crate) fn last_epoch(store: &KraftReplica) -> Epoch {
    store.log_position().last_epoch.unwrap_or(Epoch(0))
}

/// A replica's log position, for votes.
pub(crate) fn position(store: &KraftReplica) -> LogPosition {
    LogPosition {
        last_epoch: Some(last_epoch(store)),
        end_offset: store.extent().queued_end,
    }
}

/// What catching up did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CatchUp {
    /// The follower's log matches the leader's (and got what it lacked).
    pub(crate) matched: bool,
    /// Diverging suffixes truncated.
    pub(crate) truncations: u64,
    /// Snapshots installed.
    pub(crate) installs: u64,
}

/// Fetches as a follower would, up to eight rounds: a valid position gets
/// the leader's next batches (up to 4 KiB), a diverging one is truncated,
/// one below the leader's log start installs the snapshot.
pub(crate) fn catch_up(leader: &KraftReplica, follower: &KraftReplica, ctx: &str) -> CatchUp {
    let mut out = CatchUp::default();
    for _ in 0..8 {
        let (end, last) = (follower.extent().queued_end, last_epoch(follower));
        match leader.validate_offset_and_epoch(end, last).unwrap() {
            FetchPosition::Valid => {
                // What the leader has written is what a fetch can read.
                if end < leader.extent().end {
                    let entries = leader
                        .read_entries(end, Offset(u64::MAX), 4 << 10, Isolation::Uncommitted)
                        .unwrap();
                    follower.append_as_follower(&entries).unwrap();
                }
                out.matched = true;
                return out;
            }
            FetchPosition::Diverging { end_offset, epoch } => {
                out.truncations += 1;
                follower
                    .truncate_to_diverging(end_offset, epoch)
                    .unwrap_or_else(|e| panic!("{ctx}: follower truncation: {e}"));
            }
            FetchPosition::SnapshotNeeded(id) => {
                out.installs += 1;
                install(leader, follower, id);
            }
        }
    }
    out
}

/// Installs the leader's snapshot `id` through the wing (the finish makes
/// the log continue it) unless the follower has it already; the
/// follower's high watermark is at least its end.
pub(crate) fn install(leader: &KraftReplica, follower: &KraftReplica, id: SnapshotId) {
    if follower.snapshot(id).is_err() {
        let size = leader.snapshot(id).unwrap().info().size_bytes;
        let mut inst = follower.install_snapshot(id, size).unwrap();
        while inst.install().position() < size {
            let at = inst.install().position();
            let chunk = leader.snapshot(id).unwrap().read_chunk(at, 700).unwrap();
            inst.install().write_chunk(at, &chunk).unwrap();
        }
        inst.finish().unwrap();
    }
    let end = follower.extent().queued_end;
    if follower.extent().high_watermark.unwrap_or(Offset(0)) < end {
        follower.set_high_watermark(end).unwrap();
    }
}

/// Every entry a replica knows is committed (below its own high
/// watermark) is the one committed; above it, a replica may still hold
/// another epoch's uncommitted entries until it catches up.
pub(crate) fn check_committed<'a>(
    replicas: impl Iterator<Item = (u64, &'a KraftReplica)>,
    committed: &BTreeMap<u64, (Epoch, Vec<u8>)>,
    ctx: &str,
) {
    let committed_end = committed.keys().next_back().map_or(0, |o| o + 1);
    for (n, s) in replicas {
        let (start, end) = (s.extent().start.0, s.extent().queued_end.0);
        let hw = s.extent().high_watermark.map_or(0, |h| h.0);
        let to = end.min(committed_end).min(hw);
        if start >= to {
            continue;
        }
        let entries = s
            .read_entries(Offset(start), Offset(to), u64::MAX, Isolation::Uncommitted)
            .unwrap();
        for e in entries {
            if let Some((epoch, bytes)) = committed.get(&e.offset.0) {
                assert_eq!(
                    (e.epoch, &e.bytes),
                    (*epoch, bytes),
                    "{ctx}: node {n} disagrees at committed offset {}",
                    e.offset.0
                );
            }
        }
    }
}
