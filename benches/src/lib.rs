//! `quorumlog-benches`: criterion benches and the side-by-side `compare`
//! binary (issue "Group-commit durability ... benchmark"). Peers appear only
//! as dependencies of this crate. Nothing is implemented yet.
#![forbid(unsafe_code)]
