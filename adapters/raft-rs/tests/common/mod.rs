//! The raft-rs adapter tests' nodes: a node directory on a file system,
//! its regions as groups of its shared log.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test binary uses part of it"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_raft::{
    ClusterId, DirectoryId, Identity, LogOptions, Meta, Node, NodeId, NodeOptions, Offset,
    SharedFs, SyncPolicy,
};
use quorumlog_raftrs::RegionStorage;
use raft::eraftpb::Entry;

pub fn meta(node: u64) -> Meta {
    Meta::new(
        ClusterId(1),
        NodeId(node),
        DirectoryId(u128::from(node) + 1),
    )
}

/// Small segments, so tests cross segment ends; the Ready loop leads
/// its rounds (`SyncPolicy::CallerLed`, the adapter's documented way).
pub fn options() -> NodeOptions {
    NodeOptions {
        sync: SyncPolicy::CallerLed,
        log: LogOptions {
            segment_size_bytes: 256 << 10,
            max_batch_bytes: 64 << 10,
            prefill_segments: 0,
            ..NodeOptions::default().log
        },
        ..NodeOptions::default()
    }
}

/// Formats node `node`'s directory `dir`.
pub fn format(fs: &SharedFs, dir: &Path, node: u64) {
    fs.create_dir_all(dir).unwrap();
    if let Some(parent) = dir.parent() {
        fs.sync_dir(parent).unwrap();
    }
    Node::format(fs, dir, meta(node), &options()).unwrap();
}

/// Opens node `node`'s directory `dir`.
pub fn open(fs: &SharedFs, dir: &Path, node: u64) -> Node {
    Node::open(fs, dir, &Identity::of(&meta(node)), &options())
        .unwrap()
        .0
}

/// Region `id`'s storage on `node`, its group created at `first` if new.
pub fn region(node: &Node, id: u64, first: u64) -> RegionStorage {
    region_with_cache(node, id, first, quorumlog_raftrs::CACHE_ENTRIES)
}

/// [`region`] keeping up to `cache` durable entries in memory.
pub fn region_with_cache(node: &Node, id: u64, first: u64, cache: usize) -> RegionStorage {
    if !node.groups().contains(&id) {
        node.create_group(id, Offset(first)).unwrap();
    }
    RegionStorage::with_cache(Arc::new(node.group(id).unwrap()), id, cache).unwrap()
}

pub fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        ..Entry::default()
    }
}
