//! `quorumlog-raft`: the Raft-facing facade over the storage crates.
//!
//! Today it holds the log-cleaning path ([`compaction::clean_log_prefix`]):
//! the log prefix is deleted only up to the end of a durable snapshot
//! (docs/design.md invariant 7); and the model-checked crash tester
//! ([`harness`]) that drives a whole data directory (log, quorum state,
//! checkpoints, snapshots) on the simulated disk. Still to come (issue "Raft glue"): one store per
//! Raft group with KRaft-style operations, durable election-state
//! transitions, the voter set with in-flight reassignment, and adapters for
//! openraft and tikv/raft-rs.
#![forbid(unsafe_code)]

pub mod compaction;
pub mod harness;
