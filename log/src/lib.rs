//! `quorumlog-log`: the segmented append log.
//!
//! Will own (issue "Segmented log"): the batch format, segments named by base
//! offset, the sparse offset index, the epoch index, truncation and recovery
//! from the recovery point. Nothing is implemented yet.
#![forbid(unsafe_code)]
