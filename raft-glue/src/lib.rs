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
// Below `error` (whose `Voters` variant names its refusals), published as
// `kraft::voters`.
pub mod vote;
#[doc(hidden)]
pub mod voters;

pub use error::{Error, Result};
pub use node::{
    Encode, Extent, Group, GroupInstall, GroupSnapshot, GroupWriter, Node, NodeOpenReport,
    NodeOptions, Purge, Records, WatermarkDurability, WriteBatch,
};
pub use recent::RecentEntries;
pub use types::{Entry, Identity, Isolation, OnDurable};

// What an embedder names, from one crate: the identities and positions,
// the file system, the log's and snapshots' options.
pub use quorumlog_checkpoint::{
    ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, QuorumState, SharedFs, Vote, Voter,
};
pub use quorumlog_io::RealFs;
pub use quorumlog_log::{AppendInfo, LogOptions, SyncPolicy};
pub use quorumlog_snapshot::{SnapshotId, SnapshotInfo};

pub mod options {
    //! The options beside [`NodeOptions`](crate::NodeOptions) and
    //! [`LogOptions`](crate::LogOptions): compression, snapshot writing
    //! and retention.
    pub use quorumlog_log::{Compression, TailWrites};
    pub use quorumlog_snapshot::{Retention, WriterOptions};
}

pub mod stats {
    //! What a node counts: its log's appends, syncs and latencies, its
    //! groups' memory and its disk use.
    pub use crate::node::{NodeStats, SpaceUse};
    pub use quorumlog_log::{LatencyHistogram, LogStats, LATENCY_BUCKETS_SECONDS};
}

pub mod inspect {
    //! A node's directory read without opening it, and repaired: the
    //! operator's tools' view. Nothing here takes the lock or writes,
    //! except [`Node::repair_truncate_at_corruption`](crate::Node::repair_truncate_at_corruption)
    //! and [`Node::import_store`](crate::Node::import_store), whose reports
    //! these are.
    pub use crate::node::{
        describe_node_record, inspect_node, DamageCost, GroupSummary, ImportReport, NodeDamage,
        NodeFold, NodeRecordInfo, NodeRepairReport, NodeSummary, NODE_BATCH_OVERHEAD, RUN_BYTES,
    };
}
