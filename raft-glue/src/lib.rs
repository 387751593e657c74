//! `quorumlog-raft`: the Raft-facing facade over the storage crates.
//!
//! Will own: one store per Raft group with KRaft-style operations, durable
//! election-state transitions, the voter set with in-flight reassignment, and
//! adapters for openraft and tikv/raft-rs. Nothing is implemented yet.
#![forbid(unsafe_code)]
