//! `quorumlog-raft`: the Raft-facing facade over the storage crates.
//!
//! Today it holds the log-cleaning path ([`compaction::clean_log_prefix`]):
//! the log prefix is deleted only up to the end of a durable snapshot
//! (docs/design.md invariant 7). Still to come: one store per Raft group
//! with KRaft-style operations, durable election-state transitions, the
//! voter set with in-flight reassignment, and adapters for openraft and
//! tikv/raft-rs. (The crash harness lives in the `quorumlog-testkit`
//! crate.)
#![forbid(unsafe_code)]

pub mod compaction;
