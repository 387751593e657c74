//! Commit from the voters' durable offsets (KIP-595 question 209): the high
//! watermark is the largest offset durable on a majority of the voters, the
//! leader counting only its flushed offset. Protected: a majority of
//! followers commits without the leader's sync; the watermark never moves
//! back; nothing commits by counting before an entry of the leader's epoch
//! is durable on a majority (Raft §5.4.2); observers never count.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use quorumlog_checkpoint::{NodeId, Offset};
use quorumlog_raft::kraft::CommitTracker;

fn three(epoch_start: u64) -> CommitTracker {
    CommitTracker::new(
        NodeId(1),
        Offset(epoch_start),
        [NodeId(1), NodeId(2), NodeId(3)],
        Offset(0),
    )
}

#[test]
fn two_durable_followers_commit_before_the_leader_syncs() {
    let mut t = three(0);
    // The leader has written up to 100 but flushed nothing yet.
    assert_eq!(t.report(NodeId(2), Offset(80)), None, "one of three");
    assert_eq!(t.report(NodeId(3), Offset(60)), Some(Offset(60)));
    assert_eq!(t.high_watermark(), Offset(60));
    assert_eq!(t.report(NodeId(3), Offset(90)), Some(Offset(80)));
    // The leader's own sync then adds nothing the majority had not.
    assert_eq!(t.leader_flushed(Offset(70)), None);
    assert_eq!(t.leader_flushed(Offset(100)), Some(Offset(90)));
}

#[test]
fn the_watermark_never_moves_back() {
    let mut t = three(0);
    t.report(NodeId(2), Offset(50));
    t.leader_flushed(Offset(50));
    assert_eq!(t.high_watermark(), Offset(50));
    // Stale reports (a reordered fetch) and a lower flush change nothing.
    assert_eq!(t.report(NodeId(2), Offset(10)), None);
    assert_eq!(t.leader_flushed(Offset(5)), None);
    assert_eq!(t.replicas()[&NodeId(2)].durable_end, Offset(50));
    assert_eq!(t.high_watermark(), Offset(50));
    // Starting from a known watermark: nothing below it is reported.
    let mut t = CommitTracker::new(NodeId(1), Offset(0), [NodeId(2), NodeId(3)], Offset(40));
    assert_eq!(t.report(NodeId(2), Offset(30)), None);
    assert_eq!(t.leader_flushed(Offset(30)), None);
    assert_eq!(t.high_watermark(), Offset(40));
}

#[test]
fn older_epochs_commit_only_with_an_entry_of_the_leaders_epoch() {
    // The leader's epoch starts at offset 100: entries below were written
    // in older epochs.
    let mut t = three(100);
    t.leader_flushed(Offset(100));
    assert_eq!(t.report(NodeId(2), Offset(100)), None, "only older entries");
    assert_eq!(t.high_watermark(), Offset(0));
    // One entry of the current epoch durable on a majority: everything up
    // to it commits.
    assert_eq!(
        t.report(NodeId(2), Offset(101)),
        None,
        "leader has not flushed it"
    );
    assert_eq!(t.leader_flushed(Offset(101)), Some(Offset(101)));
}

#[test]
fn observers_are_tracked_and_never_counted() {
    let mut t = three(0);
    assert_eq!(t.report(NodeId(9), Offset(500)), None);
    assert_eq!(t.report(NodeId(8), Offset(500)), None);
    assert!(!t.replicas()[&NodeId(9)].voter);
    assert_eq!(t.high_watermark(), Offset(0));
    assert_eq!(t.report(NodeId(2), Offset(7)), None);
    assert_eq!(t.leader_flushed(Offset(7)), Some(Offset(7)));
}

#[test]
fn five_voters_need_three() {
    let voters = [1, 2, 3, 4, 5].map(NodeId);
    let mut t = CommitTracker::new(NodeId(1), Offset(0), voters, Offset(0));
    assert_eq!(t.report(NodeId(2), Offset(10)), None);
    assert_eq!(t.report(NodeId(3), Offset(20)), None);
    assert_eq!(t.report(NodeId(4), Offset(30)), Some(Offset(10)));
    assert_eq!(t.report(NodeId(5), Offset(40)), Some(Offset(20)));
    assert_eq!(t.leader_flushed(Offset(50)), Some(Offset(30)));
}
