//! Shared by the adapter's tests: their own small type config and state
//! machine (`machine.rs`, its snapshots kept with `SnapshotFiles`), and
//! store setup.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub,
    clippy::result_large_err,
    clippy::single_match_else,
    reason = "test code: a panic is a failed assertion; openraft's error type is large"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_openraft::LogStore;
use quorumlog_raft::{ClusterId, DirectoryId, Meta, NodeId, SharedFs};
use quorumlog_raft::{Group, Identity, Node, NodeOptions, Offset};

mod machine;

pub use machine::{Machine, Put, TypeConfig};

pub const DIR: &str = "/data";

/// Small segments (64 KiB), group commit.
pub fn options() -> NodeOptions {
    NodeOptions::with_segment_bytes(64 << 10)
}

pub fn meta(node: u64) -> Meta {
    Meta::new(
        ClusterId(1),
        NodeId(node),
        DirectoryId(u128::from(node) + 1),
    )
}

/// Formats (if `fresh`) and opens node `node`'s one-group node in `dir`
/// (group 1, at openraft's first index 0): its group's handle, which
/// keeps the node running.
pub fn open_store(fs: &SharedFs, dir: &Path, node: u64, fresh: bool) -> Arc<Group> {
    open_store_with(fs, dir, node, fresh, &options())
}

/// [`open_store`] with `options`.
pub fn open_store_with(
    fs: &SharedFs,
    dir: &Path,
    node: u64,
    fresh: bool,
    options: &NodeOptions,
) -> Arc<Group> {
    if fresh {
        Node::format(fs, dir, meta(node), options).unwrap();
    }
    let (n, _) = Node::open(fs, dir, &Identity::of(&meta(node)), options).unwrap();
    if fresh {
        n.create_group(1, Offset(0)).unwrap();
    }
    Arc::new(n.group(1).unwrap())
}

/// A log store and state machine for node `node` over `store`.
pub fn parts(store: &Arc<Group>, node: u64) -> (LogStore<TypeConfig>, Machine) {
    (
        LogStore::new(Arc::clone(store), node).unwrap(),
        Machine::open(Arc::clone(store)).unwrap(),
    )
}

/// Entry `index` of term 1, leader 1: a put of `k{index}`.
pub fn put_entry(index: u64) -> openraft::Entry<TypeConfig> {
    openraft::Entry {
        log_id: quorumlog_openraft::mapping::log_id(1, 1, index),
        payload: openraft::EntryPayload::Normal(Put {
            key: format!("k{index}"),
            value: "v".into(),
        }),
    }
}

/// The meta of a snapshot up to `last` (term 1, leader 1).
pub fn snapshot_meta(last: u64) -> openraft::SnapshotMeta<u64, openraft::BasicNode> {
    openraft::SnapshotMeta {
        last_log_id: Some(quorumlog_openraft::mapping::log_id(1, 1, last)),
        last_membership: openraft::StoredMembership::default(),
        snapshot_id: format!("s{last}"),
    }
}
