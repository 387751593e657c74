//! openraft (0.9, `storage-v2`) log storage over a group of a quorumlog
//! node (one group or many on one shared log):
//! [`LogStore`] implements `RaftLogStorage` and `RaftLogReader`, and
//! [`snapshot::SnapshotFiles`] keeps a state machine's snapshots as
//! quorumlog snapshot files (checksummed, durable before openraft purges
//! the log they cover).
//!
//! The guarantee: once `append`'s `LogFlushed` callback fires, its entries
//! (and every earlier append's) survive a power cut; a vote is durable
//! when `save_vote` returns, and one older than the vote on file is
//! refused.
//!
//! **Frozen.** This adapter stays for users on openraft's stable 0.9
//! line: it gets fixes, not features. New embedders take
//! `quorumlog-openraft10`, which pipelines appends through the shared log's
//! rounds and ships a state machine and a multi-group router.
//!
//! The openraft-specific mapping (entries, vote, last purged id) is in
//! [`mapping`]; see docs/design.md, "The openraft adapter".
//!
//! A one-group node, written and read back through openraft's
//! traits (`Raft::new` takes the same `LogStore`):
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//!
//! use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
//! use openraft::{Entry, EntryPayload, RaftLogReader, Vote};
//! use quorumlog_io::SimFs; // `quorumlog_raft::RealFs::new()` on a real disk
//! use quorumlog_openraft::{mapping::log_id, LogStore};
//! use quorumlog_raft::{ClusterId, DirectoryId, Identity, Meta, Node, NodeId, NodeOptions, Offset, SharedFs};
//!
//! // Snapshots as a stream of the store's snapshot file (the default is an
//! // in-memory `Cursor`).
//! openraft::declare_raft_types!(
//!     pub Config: D = String, R = String, SnapshotData = quorumlog_openraft::SnapshotStream
//! );
//!
//! let fs: SharedFs = Arc::new(SimFs::new(1));
//! let meta = Meta::new(ClusterId(1), NodeId(1), DirectoryId(2));
//! Node::format(&fs, Path::new("/n1"), meta, &NodeOptions::default()).unwrap();
//! let (node, _) = Node::open(&fs, Path::new("/n1"), &Identity::of(&meta), &NodeOptions::default()).unwrap();
//! // openraft's first index is 0.
//! node.create_group(1, Offset(0)).unwrap();
//! let group = node.group(1).unwrap();
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! rt.block_on(async {
//!     let mut log = LogStore::<Config>::new(Arc::new(group), 1).unwrap();
//!     log.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
//!     assert!(log.save_vote(&Vote::new(0, 2)).await.is_err(), "a vote never moves back");
//!     let entries = (0..3).map(|i| Entry::<Config> {
//!         log_id: log_id(1, 1, i),
//!         payload: EntryPayload::Normal(format!("x={i}")),
//!     });
//!     // Returns once the callback fired: durable.
//!     log.blocking_append(entries).await.unwrap();
//!     let back = log.try_get_log_entries(0..3).await.unwrap();
//!     assert_eq!(back[2].log_id, log_id(1, 1, 2));
//! });
//! ```

#![allow(
    clippy::result_large_err,
    reason = "openraft's storage traits return its `StorageError`; the helpers return the same"
)]

pub mod log_store;
pub mod mapping;
pub mod snapshot;
pub mod stream;

pub use log_store::{
    LogStore, PurgeMode, StoreError, COMMIT_PERSIST_EVERY, READ_AHEAD_BYTES, READ_AHEAD_ENTRIES,
};
pub use snapshot::SnapshotFiles;
pub use stream::SnapshotStream;
