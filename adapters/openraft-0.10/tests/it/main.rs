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

mod committed;
mod config_everywhere;
mod crash_every_call;
mod examples;
mod first_offset;
mod flush_order;
mod mapping;
mod multi_group;
mod power_loss_groups;
mod reads;
mod recover;
mod snapshot;
mod suite;
mod suite_group;
