//! Every integration test of the crate in one binary: each file below is
//! a module (see its own doc for what it protects), `common` their
//! shared cluster and machine. One binary links and instantiates
//! openraft for the tests' types once, not once per file.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

mod bounded_purge;
mod crash;
mod mapping;
mod one_door;
mod reopen;
mod suite;
mod suite_group;
mod tail_cache;
