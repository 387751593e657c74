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
use quorumlog_raft::{LogOptions, SyncPolicy};
use quorumlog_raft::{Store, StoreOptions};

mod machine;

pub use machine::{Machine, Put, TypeConfig};

pub const DIR: &str = "/data";

pub fn options() -> StoreOptions {
    StoreOptions {
        log: LogOptions {
            segment_size_bytes: 64 << 10,
            max_batch_bytes: 32 << 10,
            prefill_segments: 0,
            ..LogOptions::default()
        },
        sync: SyncPolicy::GroupCommit,
    }
}

pub fn meta(node: u64) -> Meta {
    Meta::new(
        ClusterId(1),
        NodeId(node),
        DirectoryId(u128::from(node) + 1),
    )
}

/// Formats (if `fresh`) and opens node `node`'s store in `dir`.
pub fn open_store(fs: &SharedFs, dir: &Path, node: u64, fresh: bool) -> Arc<Store> {
    if fresh {
        Store::format(fs, dir, meta(node), None, &options()).unwrap();
    }
    Arc::new(
        Store::open(
            fs,
            dir,
            &quorumlog_raft::Identity::of(&meta(node)),
            &options(),
        )
        .unwrap()
        .0,
    )
}

/// A log store and state machine for node `node` over `store`.
pub fn parts(store: &Arc<Store>, node: u64) -> (LogStore<TypeConfig>, Machine) {
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
