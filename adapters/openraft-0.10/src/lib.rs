//! openraft 0.10 log storage over quorumlog: [`LogStore`] implements
//! `RaftLogStorage` and `RaftLogReader` over a node's group
//! ([`quorumlog_raft::Group`]: one group or many on one shared log).
//!
//! The guarantee: once an append's `IOFlushed` fires, its entries (and
//! every earlier append's) survive a power cut, and a saved vote is
//! durable when `save_vote` returns.
//!
//! 0.10 returns from `append` at once and takes the completion later
//! (`IOFlushed`): the entries are queued for the shared log's next sync
//! round (readable at once from the adapter's tail), and each append's
//! `IOFlushed` fires from the round that makes it durable, in submission
//! order. Leader ids map to store epochs for both of openraft's kinds
//! ([`mapping::EpochLeaderId`]): the standard one (`leader_id_std`, one
//! leader per term: the epoch is the term) and the advanced one
//! (`leader_id_adv`, the default: the epoch is `term << 32 | node id`).
//!
//! Snapshots are quorumlog snapshot files ([`snapshot`]): the state
//! machine's `SnapshotData` is a [`SnapshotData`]: a published file, sent
//! chunk by chunk, or a download received into the store's install
//! (durable per chunk, resumable, verified), published by the state
//! machine's install once openraft has made the leader's vote durable.
//!
//! Run openraft with `enable_leader_restore` off: 0.10 replicates entries a
//! leader has not made durable yet, so after a power cut a leader restored
//! in its old term can write different entries under log ids its
//! followers already hold (docs/decisions.md). Build the `Config` with
//! [`raft_config`], which turns it off, or refuses it on.
//!
//! **openraft's version.** This crate pins one exact 0.10 alpha
//! (`=0.10.0-alpha.37`): alphas change their API from one to the next, so
//! a range would let a program resolve one the adapter does not build
//! with. It re-exports it as [`openraft`]; depend on it through that. A
//! new minor version of this crate may move the pin to a later alpha; at
//! openraft 0.10.0 the pin becomes `^0.10`. The 0.9 adapter
//! (`quorumlog-openraft`) stays, frozen (fixes only), for users who stay
//! on openraft's stable line. Inside this repository openraft 0.10 is
//! named `openraft10`, so both lines build in one workspace.
//!
//! [`FileMachine`] is a state machine for an application state you write
//! ([`AppState`]), its snapshots the group's snapshot files;
//! [`LocalRouter`] is an in-process network for many groups on
//! openraft-multi's `GroupRouter` (re-exported as [`openraft_multi`]), for
//! tests and examples. `examples/cluster.rs` puts them together: three
//! nodes of two groups, restarted from their directories.
//!
//! [`recover`] is the offline voter-set rewrite for a group that lost its
//! majority (what `quorumlog recover-quorum` runs).
//!
//! A group of a node's shared log, written and read back through
//! openraft's traits (`Raft::new` takes the same `LogStore`):
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//!
//! use quorumlog_openraft10::openraft;
//! use openraft::entry::RaftEntry;
//! use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage};
//! use openraft::type_config::alias::{LogIdOf, OneshotOf};
//! use openraft::type_config::async_runtime::Oneshot;
//! use openraft::{impls::leader_id_adv::LeaderId, LogId, Vote};
//! use quorumlog_io::SimFs; // `quorumlog_raft::RealFs::new()` on a real disk
//! use quorumlog_openraft10::LogStore;
//! use quorumlog_raft::{ClusterId, DirectoryId, Identity, Meta, Node, NodeId, NodeOptions, Offset, SharedFs};
//!
//! openraft::declare_raft_types!(pub Config: D = String, R = String);
//! type Entry = <Config as openraft::RaftTypeConfig>::Entry;
//!
//! let fs: SharedFs = Arc::new(SimFs::new(1));
//! let meta = Meta::new(ClusterId(1), NodeId(1), DirectoryId(2));
//! Node::format(&fs, Path::new("/n1"), meta, &NodeOptions::default()).unwrap();
//! let (node, _) = Node::open(&fs, Path::new("/n1"), &Identity::of(&meta), &NodeOptions::default()).unwrap();
//! // openraft's first index is 0.
//! node.create_group(7, Offset(0)).unwrap();
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! rt.block_on(async {
//!     let mut log = LogStore::<Config>::new(Arc::new(node.group(7).unwrap()), 1).unwrap();
//!     log.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
//!     let id = |i| LogId::new(LeaderId { term: 1, node_id: 1 }, i);
//!     let (tx, rx) = OneshotOf::<Config>::channel();
//!     log.append([Entry::new_blank(id(0)), Entry::new_normal(id(1), "x=1".into())], IOFlushed::signal(tx))
//!         .await
//!         .unwrap();
//!     // Readable at once; durable when the completion fires.
//!     assert_eq!(log.try_get_log_entries(0..2).await.unwrap().len(), 2);
//!     rx.await.unwrap().unwrap();
//!     let last: Option<LogIdOf<Config>> = log.get_log_state().await.unwrap().last_log_id;
//!     assert_eq!(last, Some(id(1)));
//! });
//! ```

pub mod config;
pub mod local;
pub mod log_store;
pub mod machine;
pub mod mapping;
pub mod recover;
pub mod snapshot;

pub use config::{raft_config, ConfigRefused};
pub use local::LocalRouter;
pub use log_store::{LogStore, COMMIT_PERSIST_EVERY, READ_CACHE_ENTRIES};
pub use machine::{AppState, Applied, FileMachine};
pub use mapping::{EpochLeaderId, MappingError};
/// The openraft this adapter is built against, an exact 0.10 alpha: take
/// it from here (`use quorumlog_openraft10::openraft;`) so that a program
/// and the adapter cannot resolve two different alphas.
pub use openraft10 as openraft;
/// openraft's multi-Raft network adapters (`GroupRouter`,
/// `GroupNetworkAdapter`), the same alpha: a network carrying many groups
/// over one connection per peer implements its `GroupRouter`.
pub use openraft_multi;
pub use snapshot::{
    FileSnapshot, Receiver, SnapshotData, SnapshotFile, SnapshotFiles, CHUNK_BYTES,
};
