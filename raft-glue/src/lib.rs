//! `quorumlog-raft`: the Raft-facing facade over the storage crates.
//!
//! - [`Store`]: one durable store per Raft group, the one door a Raft
//!   library's storage talks to: format (with an initial offset), open
//!   with the expected [`Identity`] checked first and the parts
//!   reconciled, appends at the library's offsets, reads of exactly a
//!   range, truncation never below the commit point, a high watermark
//!   that never moves back, the election state, snapshots of committed
//!   state and verified installs, application metadata, durability waits
//!   and completions; one poisoned state, one error type ([`Error`]).
//! - [`KraftReplica`] ([`kraft`]): a `KRaft`-style replica over one store:
//!   elections with typed transitions and restart rules, leader appends
//!   only in the epoch it leads, raw-batch follower appends, fetch
//!   validation, commit tracking, leader-coordinated cleaning, and the
//!   voter-set history with `KIP-455` reassignment. A store it does not
//!   own pays nothing for it.
//!
//! Every name an embedder needs is re-exported here. The openraft adapter
//! is the `quorumlog-openraft` crate; the crash harness lives in
//! `quorumlog-testkit`.
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//!
//! use quorumlog_io::SimFs; // `quorumlog_raft::RealFs::new()` on a real disk
//! use quorumlog_raft::{
//!     ClusterId, DirectoryId, Epoch, Identity, Isolation, Meta, NodeId, Offset, SharedFs,
//!     Store, StoreOptions,
//! };
//!
//! let fs: SharedFs = Arc::new(SimFs::new(1));
//! let dir = Path::new("/var/lib/group-1");
//! let meta = Meta::new(ClusterId(7), NodeId(1), DirectoryId(11));
//! Store::format(&fs, dir, meta, Some(Offset(1)), &StoreOptions::default()).unwrap();
//! let (store, _report) = Store::open(&fs, dir, &Identity::of(&meta), &StoreOptions::default()).unwrap();
//! // A Raft library appends at the index it assigned, in its term.
//! store.append_replicated(Offset(1), Epoch(1), &[b"set x=1"]).unwrap();
//! store.wait_durable(Offset(2)).unwrap();
//! store.set_high_watermark(Offset(2)).unwrap();
//! let e = store.read_entries(Offset(1), Offset(9), 1 << 20, Isolation::Committed).unwrap();
//! assert_eq!(e[0].bytes, b"set x=1");
//! // The commit point never moves back.
//! assert!(store.set_high_watermark(Offset(1)).is_err());
//! ```
#![forbid(unsafe_code)]

mod door;
mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod kraft;
mod node;
mod store;

pub use door::{RaftStorage, SnapshotInstall, SnapshotWrite};
pub use error::{Error, Result};
pub use kraft::commit::{CommitTracker, Progress};
pub use kraft::election::{Election, LogPosition, Role, VoteDecision};
pub use kraft::fetch::{validate_offset_and_epoch, FetchPosition, LogView};
pub use kraft::{voters, KraftReplica, QuorumRecovery};
pub use node::{
    describe_node_record, inspect_node, Group, GroupInstall, GroupSummary, GroupWriter,
    ImportReport, Node, NodeOpenReport, NodeOptions, NodeRecordInfo, NodeRepairReport, NodeStats,
    NodeSummary, SpaceUse, WriteBatch, NODE_BATCH_OVERHEAD, RUN_BYTES,
};
pub use store::{
    Entry, Identity, Isolation, OnDurable, OpenReport, Store, StoreInstall, StoreOptions,
    StoreWriter,
};

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
