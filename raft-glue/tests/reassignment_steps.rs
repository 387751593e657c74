//! The voter-set records and the reassignment state machine, step by step
//! (`quorumlog_raft::kraft::voters`). Invariants protected:
//! - a voter set is non-empty, names each node once, and its record
//!   decodes to exactly what was encoded (other control records, trailing
//!   bytes and non-canonical order are not taken for voter records);
//! - the history answers the state in force at any offset, the latest and
//!   the committed; suffix truncation rolls it back; a prefix cut keeps the
//!   state in force at the new start;
//! - a reassignment changes one voter at a time, each once the previous
//!   change is committed: replaced voters (same node, new directory)
//!   first, each adding replica only once caught up, then the removing
//!   voters with the leader last, then the end, then the leader resigns;
//! - refusals: empty target, duplicate node, no majority-keeping path,
//!   cancel or replace once removals began, cancel with none pending;
//! - cancel returns to exactly the set before the call; replacing a
//!   pending reassignment starts from the current set.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::too_many_lines,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::collections::BTreeMap;

use quorumlog_checkpoint::{DirectoryId, NodeId, Offset, Voter};
use quorumlog_raft::kraft::voters::{
    next_step, plan_cancel, plan_reassignment, status, ControlHistory, ControlRecord, ControlState,
    Reassignment, Step, StepInput, VoterEntry, VoterError, VoterSet,
};

fn v(node: u64) -> Voter {
    voter_dir(node, u128::from(node) + 100)
}

fn voter_dir(node: u64, dir: u128) -> Voter {
    Voter {
        node_id: NodeId(node),
        directory_id: DirectoryId(dir),
    }
}

fn set(voters: &[Voter]) -> VoterSet {
    VoterSet::new(
        voters
            .iter()
            .map(|v| VoterEntry {
                voter: *v,
                endpoint: Some(format!("127.0.0.1:{}", 7000 + v.node_id.0)),
            })
            .collect(),
    )
    .unwrap()
}

fn state(voters: &[Voter], r: Option<Reassignment>) -> ControlState {
    ControlState {
        voters: Some(set(voters)),
        reassignment: r,
    }
}

/// Every replica caught up to the high watermark 100.
fn caught_up(replicas: &[Voter]) -> BTreeMap<Voter, Offset> {
    replicas.iter().map(|r| (*r, Offset(100))).collect()
}

fn step(latest: &ControlState, leader: Voter, progress: &BTreeMap<Voter, Offset>) -> Step {
    next_step(&StepInput {
        latest,
        all_committed: true,
        leader,
        progress,
        high_watermark: Offset(100),
        max_lag: 10,
    })
}

/// Runs a reassignment to its end with every replica caught up (each
/// step committed at once); returns the voter sets it went through.
fn run(mut latest: ControlState, leader: Voter, replicas: &[Voter]) -> (Vec<Vec<u64>>, Step) {
    // The current voters acknowledged too (a voter set whose majority
    // needs a replica that acknowledged nothing is never entered).
    let mut all: Vec<Voter> = replicas.to_vec();
    all.extend(latest.voters.as_ref().unwrap().voters());
    if let Some(r) = &latest.reassignment {
        all.extend(r.original.voters());
    }
    let progress = caught_up(&all);
    let mut sets = Vec::new();
    for _ in 0..32 {
        match step(&latest, leader, &progress) {
            Step::Append(next) => {
                let before = latest.voters.as_ref().unwrap();
                let changed = before.voters().filter(|x| !next.contains(*x)).count()
                    + next.voters().filter(|x| !before.contains(*x)).count();
                assert_eq!(changed, 1, "one voter at a time");
                sets.push(next.voters().map(|x| x.node_id.0).collect());
                latest.voters = Some(next);
            }
            Step::Finish => latest.reassignment = None,
            other => return (sets, other),
        }
    }
    panic!("no end")
}

#[test]
fn voter_sets_refuse_empty_duplicate_and_oversized() {
    assert_eq!(VoterSet::new(vec![]), Err(VoterError::Empty));
    let dup = vec![VoterEntry::new(1, 1), VoterEntry::new(1, 2)];
    assert_eq!(
        VoterSet::new(dup),
        Err(VoterError::DuplicateNode(NodeId(1)))
    );
    let many = (0..1025).map(|n| VoterEntry::new(n, 1)).collect();
    assert_eq!(VoterSet::new(many), Err(VoterError::TooLarge));
    let mut long = VoterEntry::new(1, 1);
    long.endpoint = Some("x".repeat(1025));
    assert_eq!(VoterSet::new(vec![long]), Err(VoterError::TooLarge));
}

#[test]
fn records_round_trip_and_nothing_else_decodes_as_one() {
    let r = Reassignment {
        original: set(&[v(1), v(2), v(3)]),
        target: set(&[v(1), v(2), v(4)]),
        rollback: false,
        started_ms: 1234,
    };
    for rec in [
        ControlRecord::VoterSet(set(&[v(1), v(2)])),
        ControlRecord::Reassignment(Some(r.clone())),
        ControlRecord::Reassignment(None),
    ] {
        let bytes = rec.encode();
        assert_eq!(ControlRecord::decode(&bytes), Some(rec.clone()));
        // Trailing bytes, any truncation: not a record.
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(ControlRecord::decode(&longer), None);
        for cut in 0..bytes.len() {
            assert_eq!(ControlRecord::decode(&bytes[..cut]), None, "cut at {cut}");
        }
    }
    assert_eq!(ControlRecord::decode(b"leader-change"), None);
    // Out of node order: not canonical.
    let mut swapped = ControlRecord::VoterSet(set(&[v(1), v(2)])).encode();
    let body = 4 + 1 + 4;
    let entry = 8 + 16 + 2 + "127.0.0.1:7001".len();
    let (a, b) = swapped[body..].split_at_mut(entry);
    a.swap_with_slice(&mut b[..entry]);
    assert_eq!(ControlRecord::decode(&swapped), None);
    let st = state(&[v(1), v(2)], Some(r));
    assert_eq!(ControlState::decode(&st.encode()), Some(st));
}

#[test]
fn the_history_answers_any_offset_and_follows_truncations() {
    let mut h = ControlHistory::new(Offset(10), state(&[v(1)], None));
    h.record(Offset(12), ControlRecord::VoterSet(set(&[v(1), v(2)])));
    h.record(
        Offset(20),
        ControlRecord::VoterSet(set(&[v(1), v(2), v(3)])),
    );
    let voters = |s: ControlState| s.voters.unwrap().len();
    assert_eq!(voters(h.state_at(Offset(11))), 1);
    assert_eq!(
        voters(h.state_at(Offset(12))),
        2,
        "in force from its offset"
    );
    assert_eq!(voters(h.latest()), 3);
    assert_eq!(
        voters(h.committed(Offset(20))),
        2,
        "offset 20 not committed"
    );
    assert_eq!(voters(h.committed(Offset(21))), 3);
    assert_eq!(h.latest_voter_change(), Some(Offset(20)));
    h.truncate_to(Offset(20));
    assert_eq!(voters(h.latest()), 2, "truncation rolls back");
    h.cut_prefix(Offset(15));
    assert_eq!(h.base_offset(), Offset(15));
    assert_eq!(
        voters(h.state_at(Offset(15))),
        2,
        "the state at the start is kept"
    );
    assert_eq!(h.records().count(), 0);
}

#[test]
fn growing_three_to_five_promotes_each_once_caught_up() {
    let (l, cur) = (v(1), [v(1), v(2), v(3)]);
    let target = set(&[v(1), v(2), v(3), v(4), v(5)]);
    let r = plan_reassignment(&state(&cur, None), target, 0).unwrap();
    assert_eq!(r.adding().len(), 2);
    assert!(r.removing().is_empty());
    let latest = state(&cur, Some(r));
    // Not caught up: 4 has not fetched, then lags by more than 10.
    assert_eq!(step(&latest, l, &BTreeMap::new()), Step::CatchingUp(v(4)));
    let behind = BTreeMap::from([(v(4), Offset(80))]);
    assert_eq!(step(&latest, l, &behind), Step::CatchingUp(v(4)));
    let close = BTreeMap::from([(v(2), Offset(100)), (v(3), Offset(95)), (v(4), Offset(90))]);
    assert!(matches!(step(&latest, l, &close), Step::Append(s) if s.len() == 4));
    // An uncommitted change holds everything back.
    let held = next_step(&StepInput {
        latest: &latest,
        all_committed: false,
        leader: l,
        progress: &close,
        high_watermark: Offset(100),
        max_lag: 10,
    });
    assert_eq!(held, Step::WaitForCommit);
    let (sets, end) = run(latest, l, &[v(4), v(5)]);
    assert_eq!(sets, vec![vec![1, 2, 3, 4], vec![1, 2, 3, 4, 5]]);
    assert_eq!(end, Step::Idle);
}

#[test]
fn shrinking_removes_the_leader_last_then_it_resigns() {
    let (l, cur) = (v(1), [v(1), v(2), v(3), v(4), v(5)]);
    let r = plan_reassignment(&state(&cur, None), set(&[v(3), v(4), v(5)]), 0).unwrap();
    let (sets, end) = run(state(&cur, Some(r)), l, &[]);
    assert_eq!(sets, vec![vec![1, 3, 4, 5], vec![3, 4, 5]]);
    assert_eq!(end, Step::Resign);
}

#[test]
fn a_voter_that_lost_its_disk_is_removed_before_its_replacement_joins() {
    let (l, cur) = (v(1), [v(1), v(2), v(3)]);
    let new3 = voter_dir(3, 999);
    let r = plan_reassignment(&state(&cur, None), set(&[v(1), v(2), new3]), 0).unwrap();
    let latest = state(&cur, Some(r));
    let (sets, end) = run(latest.clone(), l, &[new3]);
    assert_eq!(sets, vec![vec![1, 2], vec![1, 2, 3]]);
    assert_eq!(end, Step::Idle);
    // The old voter of node 3 is gone, the new one is in.
    let mut s = latest;
    for _ in 0..2 {
        if let Step::Append(next) = step(&s, l, &caught_up(&[v(2), new3])) {
            s.voters = Some(next);
        }
    }
    let last = s.voters.unwrap();
    assert!(last.contains(new3) && !last.contains(v(3)));
    // Replacing two of three leaves no majority-keeping path.
    let two = set(&[v(1), voter_dir(2, 7), new3]);
    assert_eq!(
        plan_reassignment(&state(&cur, None), two, 0),
        Err(VoterError::NoMajorityPath {
            replaced: 2,
            current: 3
        })
    );
}

#[test]
fn cancel_before_removals_returns_to_exactly_the_original_set() {
    let (l, cur) = (v(1), [v(1), v(2), v(3)]);
    let target = set(&[v(2), v(3), v(4), v(5)]);
    let r = plan_reassignment(&state(&cur, None), target, 0).unwrap();
    let mut latest = state(&cur, Some(r));
    // The voters acknowledged, and the adding replicas.
    let progress = caught_up(&[v(2), v(3), v(4), v(5)]);
    // Cancel at each step before the first removal: 0, 1 and 2 promoted.
    for promoted in 0..=2 {
        let mut s = latest.clone();
        let rb = plan_cancel(&s, 10).unwrap();
        assert!(rb.rollback);
        assert_eq!(rb.target, set(&cur));
        s.reassignment = Some(rb);
        let (_, end) = run(s.clone(), l, &[]);
        assert_eq!(end, Step::Idle, "after {promoted} promoted");
        let mut t = s;
        while let Step::Append(next) = step(&t, l, &progress) {
            t.voters = Some(next);
        }
        assert!(
            t.voters.as_ref().unwrap().same_voters(&set(&cur)),
            "after {promoted} promoted: back to the original"
        );
        // A rollback cannot be cancelled or replaced.
        assert_eq!(plan_cancel(&t, 11), Err(VoterError::Completing));
        if promoted < 2 {
            let Step::Append(next) = step(&latest, l, &progress) else {
                panic!("a promotion")
            };
            assert_eq!(next.len(), 4 + promoted);
            latest.voters = Some(next);
        }
    }
    // Both promoted: the next step removes voter 1, after which cancel and
    // replacement are refused.
    let Step::Append(next) = step(&latest, l, &progress) else {
        panic!("a removal")
    };
    assert!(
        !next.contains(v(1)) && next.len() == 4,
        "voter 1 goes first"
    );
    latest.voters = Some(next);
    assert_eq!(plan_cancel(&latest, 12), Err(VoterError::Completing));
    assert_eq!(
        plan_reassignment(&latest, set(&[v(1), v(2), v(3)]), 12),
        Err(VoterError::Completing)
    );
    assert_eq!(
        plan_cancel(&state(&cur, None), 0),
        Err(VoterError::NoReassignment)
    );
}

#[test]
fn replacing_a_pending_reassignment_starts_from_the_current_set() {
    let (l, cur) = (v(1), [v(1), v(2), v(3)]);
    let r = plan_reassignment(&state(&cur, None), set(&[v(1), v(2), v(3), v(4)]), 0).unwrap();
    let mut latest = state(&cur, Some(r));
    let Step::Append(next) = step(&latest, l, &caught_up(&[v(2), v(3), v(4)])) else {
        panic!("promotion")
    };
    latest.voters = Some(next);
    let r2 = plan_reassignment(&latest, set(&[v(1), v(2), v(3), v(5)]), 5).unwrap();
    assert!(r2.original.same_voters(&set(&[v(1), v(2), v(3), v(4)])));
    assert_eq!(r2.removing(), vec![v(4)]);
    assert_eq!(r2.adding().len(), 1);
    latest.reassignment = Some(r2);
    let (sets, end) = run(latest, l, &[v(5)]);
    assert_eq!(sets, vec![vec![1, 2, 3, 4, 5], vec![1, 2, 3, 5]]);
    assert_eq!(end, Step::Idle);
}

#[test]
fn the_listing_shows_every_replica_with_progress() {
    let cur = [v(1), v(2), v(3)];
    let r = plan_reassignment(&state(&cur, None), set(&[v(1), v(2), v(4), v(5)]), 1_000).unwrap();
    let mut latest = state(&cur, Some(r));
    latest.voters = Some(set(&[v(1), v(2), v(3), v(4)]));
    let progress = BTreeMap::from([(v(4), Offset(100)), (v(5), Offset(60))]);
    let st = status(&latest, &progress, Offset(100), 4_000).unwrap();
    let nodes: Vec<u64> = st.replicas.iter().map(|e| e.voter.node_id.0).collect();
    assert_eq!(nodes, vec![1, 2, 3, 4, 5]);
    let adding: Vec<(u64, bool, Option<u64>)> = st
        .adding
        .iter()
        .map(|a| (a.entry.voter.node_id.0, a.promoted, a.lag))
        .collect();
    assert_eq!(adding, vec![(4, true, Some(0)), (5, false, Some(40))]);
    assert_eq!(st.removing, vec![v(3)]);
    assert_eq!(st.elapsed_ms, 3_000);
    assert!(!st.rollback);
    assert!(status(&state(&cur, None), &progress, Offset(100), 0).is_none());
}

#[test]
fn targets_are_checked_before_anything_starts() {
    let cur = state(&[v(1), v(2), v(3)], None);
    assert_eq!(
        VoterSet::new(vec![VoterEntry::new(4, 1), VoterEntry::new(4, 2)]),
        Err(VoterError::DuplicateNode(NodeId(4)))
    );
    assert_eq!(
        plan_reassignment(&ControlState::default(), set(&[v(1)]), 0),
        Err(VoterError::NoVoterSet)
    );
    // The same set: a reassignment that finishes at once.
    let same = plan_reassignment(&cur, set(&[v(1), v(2), v(3)]), 0).unwrap();
    let latest = state(&[v(1), v(2), v(3)], Some(same));
    assert_eq!(step(&latest, v(1), &BTreeMap::new()), Step::Finish);
}

/// The plan's property, for random reassignments, faults and progress
/// maps: no promotion without an acknowledged position within the lag of
/// the high watermark; no voter set entered whose majority needs a
/// replica that has not caught up (acknowledged within the lag; the
/// leader always); one voter at a time. Progress changes between steps:
/// replicas catch up, fall behind, and lose their acknowledgement (a
/// node down and back with nothing). A leader outside the voter set
/// changes it no more (openraft asserts a leader is a voter when it
/// changes membership). Fails on the plan before the rule
/// (it promoted and removed regardless of the other replicas: checked).
#[test]
fn no_step_promotes_or_enters_a_set_without_acknowledged_progress() {
    let mut checked = 0;
    for seed in 0..2_000u64 {
        let mut rng = quorumlog_io::SimRng::new(seed);
        let n = 1 + rng.index(5);
        let cur: Vec<Voter> = (1..=n as u64).map(v).collect();
        let leader = cur[rng.index(n)];
        // A target of 1..=5 nodes out of 1..=7, always keeping a majority path.
        let mut target: Vec<Voter> = (1..=7u64).filter(|_| rng.below(2) == 0).map(v).collect();
        if target.is_empty() {
            target.push(v(1 + rng.below(7)));
        }
        target.truncate(5);
        let Ok(r) = plan_reassignment(&state(&cur, None), set(&target), 0) else {
            continue;
        };
        let mut latest = state(&cur, Some(r));
        let hw = Offset(rng.below(200));
        let max_lag = 10;
        let mut progress: BTreeMap<Voter, Offset> = BTreeMap::new();
        for step_no in 0..40 {
            // Faults and catching up between steps.
            for node in 1..=7u64 {
                match rng.below(6) {
                    0 => {
                        progress.remove(&v(node));
                    }
                    1 => {
                        progress.insert(v(node), Offset(hw.0.saturating_sub(rng.below(40))));
                    }
                    2 | 3 => {
                        progress.insert(v(node), hw);
                    }
                    _ => {}
                }
            }
            let got = next_step(&StepInput {
                latest: &latest,
                all_committed: true,
                leader,
                progress: &progress,
                high_watermark: hw,
                max_lag,
            });
            let outside = !latest.voters.as_ref().unwrap().contains(leader);
            assert!(
                !(outside && matches!(got, Step::Append(_) | Step::CatchingUp(_))),
                "seed {seed}: a leader outside the voter set changes it: {got:?}"
            );
            let caught =
                |x: Voter| x == leader || progress.get(&x).is_some_and(|e| hw.0 - e.0 <= max_lag);
            match got {
                Step::Append(next) => {
                    let before = latest.voters.clone().unwrap();
                    for added in next.voters().filter(|x| !before.contains(*x)) {
                        assert!(
                            caught(added),
                            "seed {seed} step {step_no}: {added:?} promoted with progress {:?}",
                            progress.get(&added)
                        );
                    }
                    let changed = before.voters().filter(|x| !next.contains(*x)).count()
                        + next.voters().filter(|x| !before.contains(*x)).count();
                    assert_eq!(changed, 1, "seed {seed}: one voter at a time");
                    let k = next.voters().filter(|x| caught(*x)).count();
                    assert!(
                        k * 2 > next.len(),
                        "seed {seed} step {step_no}: entered {:?} with {k} caught up",
                        next.voters().map(|x| x.node_id.0).collect::<Vec<_>>()
                    );
                    latest.voters = Some(next);
                    checked += 1;
                }
                Step::Finish => latest.reassignment = None,
                Step::Idle | Step::Resign => break,
                Step::CatchingUp(_) | Step::WaitForCommit => {}
            }
        }
    }
    assert!(checked > 1_000, "only {checked} steps taken");
}
