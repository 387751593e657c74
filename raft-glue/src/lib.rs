//! `quorumlog-raft`: the Raft-facing facade over the storage crates.
//!
//! - [`Node`] and [`Group`]: the engine, for one Raft group or many. A
//!   node is one data directory with one shared log and one group commit;
//!   each group is a Raft log of its own on it, reached through its
//!   [`Group`] handle: the one door a Raft library's storage talks to
//!   (appends at the library's offsets, reads of exactly a range,
//!   truncation never below the commit point, purges never past the
//!   latest snapshot, a high watermark that never moves back, the election
//!   state, snapshots of committed state and verified installs,
//!   application metadata, durability waits and completions), with every
//!   rule checked once; one poisoned state, one error type ([`Error`]). A
//!   one-group deployment is a node with one group.
//! - [`KraftReplica`] ([`kraft`]): a `KRaft`-style replica: elections with
//!   typed transitions and restart rules, leader appends only in the epoch
//!   it leads, raw-batch follower appends, fetch validation, commit
//!   tracking, leader-coordinated cleaning, and the voter-set history with
//!   `KIP-455` reassignment, over one group it owns. A one-group directory
//!   of the previous layout is brought into a node by `quorumlog import`
//!   ([`Node::import_store`]).
//!
//! Every name an embedder needs is re-exported here. The openraft
//! adapters are the `quorumlog-openraft` (0.9) and `quorumlog-openraft10`
//! crates, raft-rs's is `quorumlog-raftrs`; the crash harness lives in
//! `quorumlog-testkit`.
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//!
//! use quorumlog_io::SimFs; // `quorumlog_raft::RealFs::new()` on a real disk
//! use quorumlog_raft::{
//!     ClusterId, DirectoryId, Epoch, Identity, Isolation, Meta, Node, NodeId, NodeOptions,
//!     Offset, SharedFs,
//! };
//!
//! let fs: SharedFs = Arc::new(SimFs::new(1));
//! let dir = Path::new("/var/lib/node-1");
//! let meta = Meta::new(ClusterId(7), NodeId(1), DirectoryId(11));
//! Node::format(&fs, dir, meta, &NodeOptions::default()).unwrap();
//! let (node, _report) = Node::open(&fs, dir, &Identity::of(&meta), &NodeOptions::default()).unwrap();
//! node.create_group(1, Offset(1)).unwrap();
//! let group = node.group(1).unwrap();
//! // A Raft library appends at the index it assigned, in its term: queued
//! // for the shared log's next round, durable once waited for.
//! group.append(Offset(1), Epoch(1), &[b"set x=1"]).unwrap();
//! group.wait_durable(Offset(2)).unwrap();
//! group.set_high_watermark(Offset(2)).unwrap();
//! let e = group.read_entries(Offset(1), Offset(9), 1 << 20, Isolation::Committed).unwrap();
//! assert_eq!(e[0].bytes, b"set x=1");
//! // The commit point never moves back.
//! assert!(group.set_high_watermark(Offset(1)).is_err());
//! drop(group);
//! node.close().unwrap();
//! ```
#![forbid(unsafe_code)]

mod error;
#[cfg(any(test, feature = "__fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod kraft;
mod node;
mod recent;
mod types;
mod vote;

pub use error::{Error, Result};
pub use kraft::commit::{CommitTracker, Progress};
pub use kraft::election::{Election, LogPosition, Role, VoteDecision};
pub use kraft::fetch::{validate_offset_and_epoch, FetchPosition, LogView};
pub use kraft::{voters, KraftInstall, KraftReplica, QuorumRecovery, KRAFT_GROUP};
pub use node::{
    describe_node_record, inspect_node, DamageCost, Encode, Extent, Group, GroupInstall,
    GroupSnapshot, GroupSummary, GroupWriter, ImportReport, Node, NodeDamage, NodeFold,
    NodeOpenReport, NodeOptions, NodeRecordInfo, NodeRepairReport, NodeStats, NodeSummary, Purge,
    Records, SpaceUse, WatermarkDurability, WriteBatch, NODE_BATCH_OVERHEAD, RUN_BYTES,
};
pub use recent::RecentEntries;
pub use types::{Entry, Identity, Isolation, OnDurable};
pub use vote::{library_vote, library_voter};

// What an embedder names, from one crate: the identities and positions,
// the file system, the log's and snapshots' options.
pub use quorumlog_checkpoint::{
    ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, QuorumState, SharedFs, Vote, Voter,
};
pub use quorumlog_io::{Failure, RealFs};
pub use quorumlog_log::{
    AppendInfo, Compression, LatencyHistogram, LogOptions, LogStats, SyncPolicy,
    LATENCY_BUCKETS_SECONDS,
};
pub use quorumlog_snapshot::{Retention, SnapshotId, SnapshotInfo, WriterOptions};
