//! `quorumlog-raftrs`: tikv/raft-rs (`raft` 0.7) storage over the
//! quorumlog Raft store, for one region or many on one node's shared log.
//!
//! - [`RegionStorage`]: `raft::Storage` (what `RawNode` reads) and the
//!   writes a Ready loop makes: [`RegionStorage::append`] (a conflicting
//!   suffix truncated), [`RegionStorage::set_hard_state`],
//!   [`RegionStorage::set_conf_state`], [`RegionStorage::apply_snapshot`]
//!   (installed through the store, verified, then the log continues it),
//!   [`RegionStorage::compact`], [`RegionStorage::create_snapshot`]. A
//!   caller's mistake (a gap, a commit index moving back, a second vote in
//!   a term) is a typed [`Error`] and changes nothing.
//! - [`AsyncPersister`]: asynchronous persistence (`advance_append_async`
//!   and `on_persist_ready`) over the shared log's group commit: a
//!   Ready's entries are queued for the next round and readable at once,
//!   its `messages()` leave at once, its `persisted_messages()` only after
//!   the round is durable, reported per region in Ready order. A loop
//!   pass over many regions takes one [`Pass`] ([`AsyncPersister::pass`]):
//!   one completion for every Ready of the pass. The loop leads its
//!   rounds: open the node with `SyncPolicy::CallerLed` and call
//!   [`AsyncPersister::lead_round`] before the loop sleeps (a busy loop's
//!   rounds the persister leads at every other pass). Nothing hands a
//!   round to the log's flusher thread.
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//!
//! use quorumlog_io::SimFs; // `quorumlog_raft::RealFs::new()` on a real disk
//! use quorumlog_raft::{ClusterId, DirectoryId, Identity, Meta, Node, NodeId, NodeOptions, Offset, SharedFs, SyncPolicy};
//! use quorumlog_raftrs::RegionStorage;
//! use raft::eraftpb::{ConfState, Entry};
//! use raft::{GetEntriesContext, Storage};
//!
//! let fs: SharedFs = Arc::new(SimFs::new(1));
//! let meta = Meta::new(ClusterId(1), NodeId(1), DirectoryId(2));
//! // The Ready loop leads the shared log's rounds.
//! let options = NodeOptions { sync: SyncPolicy::CallerLed, ..NodeOptions::default() };
//! Node::format(&fs, Path::new("/n1"), meta, &options).unwrap();
//! let (node, _) = Node::open(&fs, Path::new("/n1"), &Identity::of(&meta), &options).unwrap();
//! // A region is a group of the node's log, starting at raft-rs's index 1.
//! node.create_group(7, Offset(1)).unwrap();
//! let storage = RegionStorage::open(Arc::new(node.group(7).unwrap()), 7).unwrap();
//! storage.initialize_with_conf_state(ConfState::from((vec![1, 2, 3], vec![]))).unwrap();
//! let mut e = Entry::default();
//! (e.index, e.term) = (1, 1);
//! storage.append(&[e]).unwrap();
//! // Readable at once, before its round is durable.
//! assert_eq!(storage.entries(1, 2, None, GetEntriesContext::empty(false)).unwrap().len(), 1);
//! assert_eq!(storage.term(1).unwrap(), 1);
//! ```
#![forbid(unsafe_code)]

mod error;
mod persist;
mod storage;

pub use error::{Error, Result};
pub use persist::{AsyncPersister, Event, Pass, Waker, Written};
pub use storage::{RegionStorage, CACHE_ENTRIES};
