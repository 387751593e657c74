//! Vote rules (Raft §5.4.1, KRaft): one vote per epoch, granted only to a
//! candidate whose log is at least as up-to-date, never by a node that knows
//! (or was) the epoch's leader; a newer epoch is adopted durably whatever
//! the answer; a stale epoch is a typed refusal. Every decision is checked
//! against the simulated disk's durable image (nothing may be pending when
//! a transition returns), and a reopened node keeps refusing.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::DIR;
use quorumlog_checkpoint::{
    path_of, DataDir, DirectoryId, Epoch, NodeId, Offset, OpenOptions, QuorumState, SharedFs,
    SmallFile,
};
use quorumlog_io::SimFs;
use quorumlog_raft::{
    kraft::Election, kraft::LogPosition, kraft::Role, kraft::VoteDecision, Error,
};

fn fresh() -> (SimFs, Election) {
    common::fresh_election()
}

/// The election state on the simulated disk's durable image (what a crash
/// right now would leave); nothing may be pending.
fn durable(sim: &SimFs) -> QuorumState {
    assert!(
        !sim.has_unsynced(),
        "a transition returned before it was durable"
    );
    let path = path_of::<QuorumState>(Path::new(DIR));
    QuorumState::decode(&sim.durable_contents(&path).unwrap()).unwrap()
}

fn at(epoch: u64, end: u64) -> LogPosition {
    LogPosition {
        last_epoch: Some(Epoch(epoch)),
        end_offset: Offset(end),
    }
}

#[test]
fn a_vote_is_granted_once_per_epoch_and_durably() {
    let (sim, mut e) = fresh();
    let d = e
        .grant_vote(Epoch(3), (NodeId(2), None), at(2, 10), at(2, 10))
        .unwrap();
    assert_eq!(d, VoteDecision::Granted);
    assert_eq!(
        e.role(),
        Role::Voted {
            candidate: NodeId(2)
        }
    );
    // The same candidate again: granted again (a retried request).
    let d = e
        .grant_vote(Epoch(3), (NodeId(2), None), at(2, 10), at(2, 10))
        .unwrap();
    assert_eq!(d, VoteDecision::Granted);
    // Another candidate in the same epoch: refused, whoever's log is better.
    let d = e
        .grant_vote(Epoch(3), (NodeId(3), None), at(3, 99), at(2, 10))
        .unwrap();
    assert_eq!(
        d,
        VoteDecision::AlreadyVoted {
            for_node: NodeId(2)
        }
    );
    // Durable: a reopened node still refuses the second candidate.
    assert_eq!(durable(&sim).voted.unwrap().node_id, NodeId(2));
    drop(e);
    let fs: SharedFs = Arc::new(sim.clone());
    let dd = Arc::new(DataDir::open(fs, Path::new(DIR), &OpenOptions::default()).unwrap());
    let mut again = Election::open(dd, None).unwrap();
    assert_eq!(again.epoch(), Epoch(3));
    assert_eq!(
        again.role(),
        Role::Voted {
            candidate: NodeId(2)
        }
    );
    let d = again
        .grant_vote(Epoch(3), (NodeId(3), None), at(3, 99), at(2, 10))
        .unwrap();
    assert_eq!(
        d,
        VoteDecision::AlreadyVoted {
            for_node: NodeId(2)
        }
    );
}

#[test]
fn a_candidate_whose_log_is_behind_is_refused_but_its_epoch_is_adopted() {
    let (sim, mut e) = fresh();
    // Older last epoch, longer log: behind (the epoch decides first).
    let d = e
        .grant_vote(Epoch(5), (NodeId(2), None), at(2, 500), at(3, 10))
        .unwrap();
    assert_eq!(d, VoteDecision::LogBehind { ours: at(3, 10) });
    // Same last epoch, shorter log: behind.
    let d = e
        .grant_vote(Epoch(5), (NodeId(3), None), at(3, 9), at(3, 10))
        .unwrap();
    assert!(matches!(d, VoteDecision::LogBehind { .. }));
    assert_eq!(e.role(), Role::Unattached);
    assert_eq!(durable(&sim).epoch, Epoch(5), "the new epoch is durable");
    // An empty log is behind any log with a record.
    let empty = LogPosition {
        last_epoch: None,
        end_offset: Offset(0),
    };
    let d = e
        .grant_vote(Epoch(5), (NodeId(4), None), empty, at(1, 1))
        .unwrap();
    assert!(matches!(d, VoteDecision::LogBehind { .. }));
    // Equal logs: granted.
    let d = e
        .grant_vote(
            Epoch(5),
            (NodeId(4), Some(DirectoryId(44))),
            at(3, 10),
            at(3, 10),
        )
        .unwrap();
    assert_eq!(d, VoteDecision::Granted);
    let vote = durable(&sim).voted.unwrap();
    assert_eq!(
        (vote.node_id, vote.directory_id),
        (NodeId(4), DirectoryId(44))
    );
}

#[test]
fn a_stale_epoch_is_a_typed_refusal_and_changes_nothing() {
    let (sim, mut e) = fresh();
    e.become_unattached(Epoch(7)).unwrap();
    let r = e.grant_vote(Epoch(6), (NodeId(2), None), at(9, 99), at(1, 1));
    assert!(matches!(
        r,
        Err(Error::StaleEpoch {
            current: Epoch(7),
            proposed: Epoch(6)
        })
    ));
    assert_eq!(durable(&sim).voted, None);
}

#[test]
fn a_node_that_knows_the_leader_or_led_does_not_vote_in_that_epoch() {
    let (_sim, mut e) = fresh();
    e.become_follower(Epoch(2), NodeId(3)).unwrap();
    let d = e
        .grant_vote(Epoch(2), (NodeId(2), None), at(2, 9), at(1, 1))
        .unwrap();
    assert_eq!(d, VoteDecision::LeaderKnown);
    // A candidate of this node, then leader: no vote for anyone else.
    let epoch = e.become_candidate().unwrap();
    e.become_leader().unwrap();
    let d = e
        .grant_vote(epoch, (NodeId(2), None), at(9, 9), at(1, 1))
        .unwrap();
    assert_eq!(d, VoteDecision::LeaderKnown);
    // Resigned (memory only): still no vote in that epoch; a newer one is
    // fine.
    e.resign();
    let d = e
        .grant_vote(epoch, (NodeId(2), None), at(9, 9), at(1, 1))
        .unwrap();
    assert_eq!(d, VoteDecision::LeaderKnown);
    let d = e
        .grant_vote(Epoch(epoch.0 + 1), (NodeId(2), None), at(9, 9), at(1, 1))
        .unwrap();
    assert_eq!(d, VoteDecision::Granted);
}
