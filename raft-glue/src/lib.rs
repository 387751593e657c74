//! `quorumlog-raft`: the Raft-facing facade over the storage crates.
//!
//! - [`store`]: [`Store`], one durable store per Raft group: format (with
//!   an initial offset), open with reconciliation of log, snapshots and
//!   election state, guarded leader appends, reads, fetch validation,
//!   truncation never below the high watermark, the voter-set history;
//! - [`election`]: the election state, typed transitions each durable
//!   before they return, vote rules (Raft §5.4.1) and `KRaft`'s restart
//!   semantics;
//! - [`commit`]: the leader's progress tracker, committing from the
//!   voters' durable offsets (the leader's own sync off the commit path);
//! - [`fetch`]: a follower's fetch position validated with `KRaft`'s
//!   semantics (valid, diverging, or snapshot needed);
//! - [`compaction`]: the log prefix deleted only up to the end of a durable
//!   snapshot (docs/design.md invariant 7), leader-coordinated, with
//!   retention caps;
//! - [`voters`]: voter sets and reassignments as control records, their
//!   history by offset, and the leader's reassignment state machine
//!   (`KIP-853` records, `KIP-455` semantics).
//!
//! The openraft adapter is the `quorumlog-openraft` crate; the crash
//! harness lives in `quorumlog-testkit`.
#![forbid(unsafe_code)]

pub mod commit;
pub mod compaction;
pub mod election;
mod error;
pub mod fetch;
pub mod store;
pub mod voters;

pub use commit::{CommitTracker, Progress};
pub use election::{Election, LogPosition, Role, VoteDecision};
pub use error::{Error, Result};
pub use fetch::{validate_offset_and_epoch, FetchPosition, LogView};
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
pub use quorumlog_log::{AppendInfo, Compression, LogOptions, SyncPolicy};
pub use quorumlog_snapshot::{Retention, SnapshotId, SnapshotInfo, WriterOptions};
