//! Election transitions: each durable before it returns, each refusal
//! typed. The leader-append guard refuses every epoch this node does not
//! durably lead.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::DIR;
use quorumlog_checkpoint::{path_of, DirectoryId, Epoch, NodeId, QuorumState, SmallFile};
use quorumlog_io::SimFs;
use quorumlog_raft::{kraft::Election, kraft::Role, Error};

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

#[test]
fn candidate_then_leader_is_durable_and_guards_appends() {
    let (sim, mut e) = fresh();
    assert_eq!((e.epoch(), e.role()), (Epoch(0), Role::Unattached));
    assert!(matches!(
        e.check_leader_append(Epoch(0)),
        Err(Error::WrongRole { .. })
    ));
    let epoch = e.become_candidate().unwrap();
    assert_eq!(epoch, Epoch(1));
    assert_eq!(e.role(), Role::Candidate);
    let vote = durable(&sim).voted.unwrap();
    assert_eq!(
        (vote.node_id, vote.directory_id),
        (NodeId(1), DirectoryId(11))
    );
    assert!(
        e.check_leader_append(epoch).is_err(),
        "a candidate is not a leader"
    );
    e.become_leader().unwrap();
    assert_eq!(e.role(), Role::Leader);
    e.check_leader_append(epoch).unwrap();
    assert!(e.check_leader_append(Epoch(0)).is_err(), "another epoch");
    assert_eq!(durable(&sim).leader, Some(NodeId(1)));
    // Resigned: no more leader appends in the epoch.
    e.resign();
    assert_eq!(e.role(), Role::Resigned);
    assert!(matches!(
        e.check_leader_append(epoch),
        Err(Error::WrongRole {
            role: "resigned",
            ..
        })
    ));
}

#[test]
fn become_leader_needs_candidacy() {
    let (_sim, mut e) = fresh();
    assert!(matches!(e.become_leader(), Err(Error::WrongRole { .. })));
    e.become_follower(Epoch(4), NodeId(2)).unwrap();
    assert!(matches!(e.become_leader(), Err(Error::WrongRole { .. })));
}

#[test]
fn followers_keep_one_leader_per_epoch() {
    let (sim, mut e) = fresh();
    e.become_follower(Epoch(2), NodeId(3)).unwrap();
    assert_eq!(e.role(), Role::Follower { leader: NodeId(3) });
    e.become_follower(Epoch(2), NodeId(3)).unwrap(); // the same: fine
    assert!(matches!(
        e.become_follower(Epoch(2), NodeId(4)),
        Err(Error::LeaderKnown {
            existing: NodeId(3),
            proposed: NodeId(4),
            ..
        })
    ));
    assert!(matches!(
        e.become_follower(Epoch(1), NodeId(4)),
        Err(Error::StaleEpoch { .. })
    ));
    assert!(matches!(
        e.become_follower(Epoch(3), NodeId(1)),
        Err(Error::WrongRole { .. })
    ));
    e.become_follower(Epoch(3), NodeId(4)).unwrap();
    let st = durable(&sim).clone();
    assert_eq!(
        (st.epoch, st.leader, st.voted),
        (Epoch(3), Some(NodeId(4)), None)
    );
}

#[test]
fn unattached_moves_only_forward() {
    let (sim, mut e) = fresh();
    e.become_unattached(Epoch(5)).unwrap();
    assert!(matches!(
        e.become_unattached(Epoch(5)),
        Err(Error::StaleEpoch { .. })
    ));
    assert_eq!(durable(&sim).epoch, Epoch(5));
    // A candidate moves on from there.
    assert_eq!(e.become_candidate().unwrap(), Epoch(6));
}
