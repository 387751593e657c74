//! `quorumlog-snapshot`: snapshot files.
//!
//! Will own (issue "Snapshots"): the snapshot writer with atomic publish, the
//! verifying reader, chunked transfer with resumable install, and retention.
//! Nothing is implemented yet.
#![forbid(unsafe_code)]
