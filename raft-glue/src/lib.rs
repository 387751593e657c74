#![doc = include_str!("../README.md")]
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
