//! The crate's examples run as tests, so CI runs what the guide shows:
//! `examples/first_steps.rs` (docs/embedding.md §1) and `examples/kraft.rs`
//! (§4b). Invariant of the first: entries
//! appended and reported durable read back, byte for byte, after a clean
//! close and a reopen (the example returns an error otherwise).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed assertion"
)]

#[path = "../examples/first_steps.rs"]
#[allow(
    unreachable_pub,
    reason = "an example's items, public where it runs alone"
)]
mod first_steps;

#[test]
fn the_guides_first_steps_read_back_what_they_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    first_steps::run(&tmp.path().join("node")).unwrap();
}

#[path = "../examples/kraft.rs"]
#[allow(
    unreachable_pub,
    reason = "an example's items, public where it runs alone"
)]
mod kraft;

/// Invariant: a follower that appends what the leader's read returned ends
/// where the leader's durable end is; a leader append outside the epoch
/// the replica leads is refused.
#[test]
fn the_guides_kraft_leader_and_follower_agree() {
    let tmp = tempfile::tempdir().unwrap();
    kraft::run(tmp.path()).unwrap();
}
