//! `quorumlog-raft`: the Raft-facing facade over the storage crates.
//!
//! Built so far (issue 12 is in progress):
//! - [`store`]: [`Store`], one durable store per Raft group: format (with
//!   an initial offset), open with reconciliation of log, snapshots and
//!   election state, guarded leader appends, reads, fetch validation,
//!   truncation never below the high watermark;
//! - [`election`]: the election state, typed transitions each durable
//!   before they return, vote rules (Raft §5.4.1) and `KRaft`'s restart
//!   semantics;
//! - [`commit`]: the leader's progress tracker, committing from the
//!   voters' durable offsets (the leader's own sync off the commit path);
//! - [`fetch`]: a follower's fetch position validated with `KRaft`'s
//!   semantics (valid, diverging, or snapshot needed);
//! - [`compaction`]: the log prefix deleted only up to the end of a durable
//!   snapshot (docs/design.md invariant 7).
//!
//! Still to come: one store per Raft group opening and reconciling the data
//! directory, the log and the snapshots, with `KRaft`-style log operations;
//! the voter set with in-flight reassignment; adapters for openraft and
//! tikv/raft-rs. (The crash harness lives in the `quorumlog-testkit` crate.)
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
pub use store::{Entry, Isolation, OpenReport, Store, StoreInstall, StoreOptions, StoreWriter};
