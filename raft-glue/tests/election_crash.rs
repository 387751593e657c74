//! Crash at every I/O call of a sequence of election transitions, with
//! every crash plan: the recovered state is the last acknowledged one or
//! the one in flight, never anything else. So no acknowledged vote is lost
//! or replaced (no second vote in an epoch), no epoch regresses, and no
//! leader changes within an epoch (invariant 5).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    format_with, ClusterId, DataDir, DirectoryId, Epoch, Meta, NodeId, Offset, OpenOptions,
    QuorumState, SharedFs,
};
use quorumlog_io::SimFs;
use quorumlog_raft::{kraft::Election, kraft::LogPosition};
use quorumlog_testkit::CRASH_PLANS;

const DIR: &str = "/data";

#[derive(Debug, Clone, Copy)]
enum Op {
    Vote(u64, u64),
    Candidate,
    Leader,
    Unattached(u64),
    Follower(u64, u64),
}

const OPS: [Op; 7] = [
    Op::Vote(2, 2),
    Op::Candidate,
    Op::Leader,
    Op::Unattached(5),
    Op::Vote(5, 3),
    Op::Follower(6, 2),
    Op::Candidate,
];

fn log_at(end: u64) -> LogPosition {
    LogPosition {
        last_epoch: Some(Epoch(1)),
        end_offset: Offset(end),
    }
}

fn apply(e: &mut Election, op: Op) -> bool {
    match op {
        Op::Vote(epoch, node) => e
            .grant_vote(Epoch(epoch), (NodeId(node), None), log_at(9), log_at(9))
            .is_ok(),
        Op::Candidate => e.become_candidate().is_ok(),
        Op::Leader => e.become_leader().is_ok(),
        Op::Unattached(epoch) => e.become_unattached(Epoch(epoch)).is_ok(),
        Op::Follower(epoch, leader) => e.become_follower(Epoch(epoch), NodeId(leader)).is_ok(),
    }
}

fn open(sim: &SimFs) -> Election {
    let fs: SharedFs = Arc::new(sim.clone());
    let dd = Arc::new(DataDir::open(fs, Path::new(DIR), &OpenOptions::default()).unwrap());
    Election::open(dd, None).unwrap()
}

fn formatted(seed: u64) -> SimFs {
    let sim = SimFs::new(seed);
    let fs: SharedFs = Arc::new(sim.clone());
    format_with(
        &fs,
        Path::new(DIR),
        Meta::new(ClusterId(1), NodeId(1), DirectoryId(11)),
    )
    .unwrap();
    sim
}

/// Runs the sequence (crashing after `crash_after` calls if given);
/// returns the disk, the states acknowledged (the initial one first), and
/// the state the op in flight would have made, if one failed.
fn run(seed: u64, crash_after: Option<u64>) -> (SimFs, Vec<QuorumState>, Option<QuorumState>, u64) {
    let sim = formatted(seed);
    let mut e = open(&sim);
    let start = sim.calls();
    if let Some(n) = crash_after {
        sim.crash_after(n);
    }
    let mut acked = vec![e.state().clone()];
    let mut in_flight = None;
    for (i, op) in OPS.into_iter().enumerate() {
        if apply(&mut e, op) {
            acked.push(e.state().clone());
        } else {
            // What the op would have made: from an uncrashed run.
            let clean = formatted(seed);
            let mut c = open(&clean);
            for op in OPS.iter().take(i + 1) {
                assert!(apply(&mut c, *op), "the sequence is valid without crashes");
            }
            in_flight = Some(c.state().clone());
            break;
        }
    }
    let calls = sim.calls() - start;
    drop(e);
    (sim, acked, in_flight, calls)
}

#[test]
fn a_crash_at_every_call_keeps_the_last_acknowledged_state_or_the_next() {
    let (_, acked, _, total) = run(0, None);
    assert_eq!(acked.len(), OPS.len() + 1);
    let mut states = 0;
    for point in 0..=total {
        for (p, plan) in CRASH_PLANS.into_iter().enumerate() {
            let seed = point * 10 + p as u64;
            let (sim, acked, in_flight, _) = run(seed, Some(point));
            let disk = sim.crash_with(plan);
            let recovered = open(&disk).state().clone();
            let last = acked.last().unwrap();
            let what = format!("crash after {point}/{total} calls, {plan:?}");
            assert!(
                &recovered == last || Some(&recovered) == in_flight.as_ref(),
                "{what}: recovered {recovered:?}, acknowledged {last:?}, in flight {in_flight:?}"
            );
            assert!(recovered.epoch >= last.epoch, "{what}: epoch regressed");
            if recovered.epoch == last.epoch {
                if let Some(v) = last.voted {
                    assert_eq!(recovered.voted, Some(v), "{what}: the vote changed");
                }
                if let Some(l) = last.leader {
                    assert_eq!(recovered.leader, Some(l), "{what}: the leader changed");
                }
            }
            states += 1;
        }
    }
    assert!(states > 40, "{states}");
}
