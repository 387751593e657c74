//! `quorumlog-benches`: the workloads of the side-by-side comparison and the
//! systems they run on (quorumlog, raft-engine, okaywal, and the raw disk),
//! shared by the `compare` binary and the criterion benches.
//!
//! Every entry counts only once it is durable: quorumlog waits for its
//! group commit, raft-engine writes with `sync = true`, okaywal commits, and
//! the raw disk runs `pwrite` + `fdatasync` on a preallocated file.
#![forbid(unsafe_code)]

pub mod e1;
pub mod e2;
pub mod multi;
pub mod systems;
pub mod workloads;
