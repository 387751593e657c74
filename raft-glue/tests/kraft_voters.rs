//! The `KRaft` wing's voter-set history and reassignment (issue 14), on a
//! group of a node. Invariants protected:
//! - a voter set is in force from the moment it is appended (latest), and
//!   committed once below the high watermark; a second change is refused
//!   while one is uncommitted, and a reassignment request on a non-leader
//!   is refused;
//! - a follower's history follows the leader's control batches, and a
//!   suffix truncation rolls it back;
//! - a prefix cut and a snapshot install keep the state in force at the
//!   log start (the snapshot carries it; a cut short of the snapshot's end
//!   records it first), across a reopen;
//! - reopen rebuilds the same history from the log's control entries, and
//!   a record the log lost in a crash is gone from it, whatever user
//!   entries fill its offset later;
//! - a crash at every I/O call of a reassignment (bootstrap, start, each
//!   promotion, the end, a shrink removing the leader) leaves, after
//!   recovery, the state after some prefix of the appended records, never
//!   before the last one acknowledged durable: a committed set or the
//!   uncommitted latest, never a mix.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{DirectoryId, Epoch, NodeId, Offset, SharedFs, Voter};
use quorumlog_io::SimFs;
use quorumlog_raft::kraft::voters::{ControlState, Step, VoterEntry, VoterError, VoterSet};
use quorumlog_raft::kraft::StateAt;
use quorumlog_raft::{kraft::KraftReplica, Error};
use quorumlog_snapshot::WriterOptions;
use quorumlog_testkit::{WingTest, CRASH_PLANS};

fn v(node: u64) -> Voter {
    Voter {
        node_id: NodeId(node),
        directory_id: DirectoryId(u128::from(node) + 1),
    }
}

fn set(nodes: &[u64]) -> VoterSet {
    VoterSet::new(
        nodes
            .iter()
            .map(|n| VoterEntry {
                voter: v(*n),
                endpoint: Some(format!("node-{n}")),
            })
            .collect(),
    )
    .unwrap()
}

fn nodes(s: Option<VoterSet>) -> Vec<u64> {
    s.map(|s| s.voters().map(|v| v.node_id.0).collect())
        .unwrap_or_default()
}

/// No background syncs: a test decides what is durable (a flusher racing
/// the test made an "unsynced" change survive on a loaded machine).
fn options() -> quorumlog_raft::NodeOptions {
    quorumlog_raft::NodeOptions {
        sync: quorumlog_log::SyncPolicy::Never,
        ..common::options()
    }
}

fn new_store(seed: u64) -> (SimFs, KraftReplica) {
    let disk = SimFs::new(seed);
    let fs: SharedFs = Arc::new(disk.clone());
    quorumlog_raft::Node::format(&fs, Path::new(common::DIR), common::meta(1), &options()).unwrap();
    let s = KraftReplica::open(
        &fs,
        Path::new(common::DIR),
        &quorumlog_raft::Identity::of(&common::meta(1)),
        &options(),
    )
    .unwrap()
    .0;
    (disk, s)
}

/// Leads a new epoch, appends four user entries durably (filling offsets
/// a crash freed), and cuts the power again; returns the disk and the
/// store reopened on it.
fn reuse_freed_offsets(disk: &SimFs, s: KraftReplica) -> (SimFs, KraftReplica) {
    let epoch = common::lead(&s);
    for i in 0..4u8 {
        s.append_as_leader(epoch, &[[b'u', i]]).unwrap();
    }
    s.wait_durable(s.extent().queued_end).unwrap();
    drop(s);
    let disk = disk.crash_with(quorumlog_io::CrashPlan::LoseUnsynced);
    let s = reopen(&disk);
    (disk, s)
}

fn reopen(disk: &SimFs) -> KraftReplica {
    let fs: SharedFs = Arc::new(disk.clone());
    KraftReplica::open(
        &fs,
        Path::new(common::DIR),
        &quorumlog_raft::Identity::of(&common::meta(1)),
        &options(),
    )
    .unwrap()
    .0
}

/// Commits everything appended so far (a one-voter quorum: the leader's
/// own flush).
fn commit(s: &KraftReplica) {
    let end = s.wait_durable(s.extent().queued_end).unwrap();
    s.set_high_watermark(end).unwrap();
}

#[test]
fn changes_are_used_at_once_committed_later_and_one_at_a_time() {
    let (_disk, s) = new_store(1);
    let epoch = common::lead(&s);
    assert_eq!(s.control_state(StateAt::Latest).voters, None);
    s.append_voter_set(epoch, set(&[1])).unwrap();
    assert_eq!(
        nodes(s.control_state(StateAt::Latest).voters),
        vec![1],
        "in force once appended"
    );
    assert_eq!(s.control_state(StateAt::Committed).voters, None);
    let refused = s.append_voter_set(epoch, set(&[1, 2]));
    assert!(matches!(
        refused,
        Err(Error::Voters(VoterError::ChangeInFlight(_)))
    ));
    commit(&s);
    assert_eq!(nodes(s.control_state(StateAt::Committed).voters), vec![1]);
    s.append_voter_set(epoch, set(&[1, 2])).unwrap();
    assert_eq!(nodes(s.control_state(StateAt::Latest).voters), vec![1, 2]);
    assert_eq!(nodes(s.control_state(StateAt::Committed).voters), vec![1]);
    assert_eq!(
        nodes(s.control_state(StateAt::At(Offset(0))).voters),
        vec![1]
    );
    // Not the leader: refused, nothing appended.
    let (_d2, f) = new_store(2);
    assert!(matches!(
        f.alter_voters(Epoch(1), Some(set(&[1])), 0),
        Err(Error::WrongRole { .. })
    ));
}

#[test]
fn a_follower_follows_control_batches_and_truncation_rolls_them_back() {
    let (_dl, l) = new_store(3);
    let epoch = common::lead(&l);
    l.append_as_leader(epoch, &[b"a"]).unwrap();
    l.append_voter_set(epoch, set(&[1, 2, 3])).unwrap();
    commit(&l);
    l.append_as_leader(epoch, &[b"b"]).unwrap();
    l.append_voter_set(epoch, set(&[1, 2, 3, 4])).unwrap();
    let (fdisk, f) = new_store(4);
    let end = l.wait_durable(l.extent().queued_end).unwrap();
    let entries = l
        .read_entries(
            Offset(0),
            end,
            u64::MAX,
            quorumlog_raft::Isolation::Uncommitted,
        )
        .unwrap();
    f.append_as_follower(&entries).unwrap();
    assert_eq!(
        nodes(f.control_state(StateAt::Latest).voters),
        vec![1, 2, 3, 4]
    );
    f.set_high_watermark(Offset(2)).unwrap();
    assert_eq!(
        nodes(f.control_state(StateAt::Committed).voters),
        vec![1, 2, 3]
    );
    // The uncommitted change is truncated away (a new leader diverged).
    f.truncate_to(Offset(3)).unwrap();
    assert_eq!(
        nodes(f.control_state(StateAt::Latest).voters),
        vec![1, 2, 3]
    );
    f.wait_durable(f.extent().queued_end).unwrap();
    drop(f);
    let f = reopen(&fdisk);
    assert_eq!(
        nodes(f.control_state(StateAt::Latest).voters),
        vec![1, 2, 3],
        "reopen agrees"
    );
}

#[test]
fn prefix_cuts_and_snapshot_installs_keep_the_set_at_the_start() {
    let (ldisk, l) = new_store(5);
    let epoch = common::lead(&l);
    l.append_voter_set(epoch, set(&[1, 2, 3])).unwrap();
    for i in 0..6u8 {
        l.append_as_leader(epoch, &[[i]]).unwrap();
    }
    commit(&l);
    let mut w = l
        .create_snapshot(Offset(5), epoch, b"user", WriterOptions::default())
        .unwrap();
    w.write(b"state").unwrap();
    let info = w.freeze().unwrap();
    // The snapshot carries the set; the user's metadata is intact.
    let stored = l.snapshot(info.id).unwrap().metadata().unwrap();
    let (state, user) = quorumlog_raft::kraft::snapshot_user_metadata(&stored);
    assert_eq!(user, b"user");
    assert_eq!(nodes(state.unwrap().voters), vec![1, 2, 3]);
    // A cut short of the snapshot's end: no snapshot ends at the new start,
    // so the state there is recorded first (a reopen cannot read it from
    // the deleted entries).
    l.clean_log_prefix(Offset(3)).unwrap();
    assert_eq!(l.extent().start, Offset(3));
    assert_eq!(
        nodes(l.control_state(StateAt::Latest).voters),
        vec![1, 2, 3],
        "kept past the cut"
    );
    l.close().unwrap();
    let l = reopen(&ldisk);
    assert_eq!(
        nodes(l.control_state(StateAt::Latest).voters),
        vec![1, 2, 3],
        "kept past the cut and a reopen"
    );
    l.clean_log_prefix(Offset(5)).unwrap();
    assert_eq!(l.extent().start, Offset(5));
    assert_eq!(
        nodes(l.control_state(StateAt::Latest).voters),
        vec![1, 2, 3],
        "kept past the cut"
    );
    // A fresh follower installs the snapshot: the log restarts at 5 with
    // the set the snapshot carries.
    let (fdisk, f) = new_store(6);
    let mut inst = f.install_snapshot(info.id, info.size_bytes).unwrap();
    while inst.install().position() < info.size_bytes {
        let at = inst.install().position();
        let chunk = l.snapshot(info.id).unwrap().read_chunk(at, 64).unwrap();
        inst.install().write_chunk(at, &chunk).unwrap();
    }
    inst.finish().unwrap();
    assert_eq!(f.extent().start, Offset(5));
    assert_eq!(
        nodes(f.control_state(StateAt::Latest).voters),
        vec![1, 2, 3]
    );
    drop(f);
    assert_eq!(
        nodes(reopen(&fdisk).control_state(StateAt::Latest).voters),
        vec![1, 2, 3]
    );
}

#[test]
fn reopen_rebuilds_the_history_from_the_log() {
    let (disk, s) = new_store(7);
    let epoch = common::lead(&s);
    for (i, n) in [vec![1], vec![1, 2], vec![1, 2, 3]].iter().enumerate() {
        s.append_as_leader(epoch, &[[u8::try_from(i).unwrap()]])
            .unwrap();
        s.append_voter_set(epoch, set(n)).unwrap();
        commit(&s);
    }
    s.append_as_leader(epoch, &[b"tail"]).unwrap();
    commit(&s);
    let want: Vec<Vec<u64>> = (0..7)
        .map(|o| nodes(s.control_state(StateAt::At(Offset(o))).voters))
        .collect();
    s.close().unwrap();
    let check = |s: &KraftReplica, what: &str| {
        let got: Vec<Vec<u64>> = (0..7)
            .map(|o| nodes(s.control_state(StateAt::At(Offset(o))).voters))
            .collect();
        assert_eq!(got, want, "{what}");
    };
    let s = reopen(&disk);
    check(&s, "after a clean close");
    // An unflushed change is lost in a crash: it is gone from the history.
    let epoch = common::lead(&s);
    assert!(epoch > Epoch(1));
    s.append_voter_set(epoch, set(&[1, 2, 3, 4])).unwrap();
    assert_eq!(
        nodes(s.control_state(StateAt::Latest).voters),
        vec![1, 2, 3, 4]
    );
    drop(s);
    let disk = disk.crash_with(quorumlog_io::CrashPlan::LoseUnsynced);
    let s = reopen(&disk);
    check(&s, "after losing an unsynced change");
    assert_eq!(
        nodes(s.control_state(StateAt::Latest).voters),
        vec![1, 2, 3]
    );
    // User entries now fill its offset, durably, and the power goes again.
    let (_disk, s) = reuse_freed_offsets(&disk, s);
    check(&s, "after the lost record's offset was reused");
    assert_eq!(
        nodes(s.control_state(StateAt::Latest).voters),
        vec![1, 2, 3]
    );
}

#[test]
fn a_reassignment_through_the_wing_resumes_after_a_reopen() {
    let (disk, s) = new_store(8);
    let epoch = common::lead(&s);
    s.append_voter_set(epoch, set(&[1, 2, 3])).unwrap();
    commit(&s);
    s.alter_voters(epoch, Some(set(&[1, 2, 3, 4])), 100)
        .unwrap();
    commit(&s);
    let st = list(&s, &BTreeMap::new(), 150).expect("in progress");
    assert_eq!(st.adding.len(), 1);
    assert!(!st.adding[0].promoted);
    assert_eq!(st.elapsed_ms, 50);
    let mut progress = BTreeMap::new();
    assert_eq!(
        s.drive_reassignment(epoch, v(1), &progress, 0).unwrap(),
        Step::CatchingUp(v(4))
    );
    s.wait_durable(s.extent().queued_end).unwrap();
    drop(s);
    let s = reopen(&disk);
    // The restarted leader (resigned by the reopen) leads a new epoch and
    // continues the reassignment from the log.
    let epoch = common::lead(&s);
    commit(&s); // a new leader's first commit covers its predecessor's entries
                // Every replica acknowledged the commit point (the voters too: a
                // voter set whose majority needs a replica that acknowledged nothing
                // is never entered).
    for n in [2, 3, 4] {
        progress.insert(v(n), s.extent().high_watermark.unwrap());
    }
    assert!(matches!(
        s.drive_reassignment(epoch, v(1), &progress, 0).unwrap(),
        Step::Append(_)
    ));
    assert_eq!(
        s.drive_reassignment(epoch, v(1), &progress, 0).unwrap(),
        Step::WaitForCommit
    );
    commit(&s);
    assert_eq!(
        s.drive_reassignment(epoch, v(1), &progress, 0).unwrap(),
        Step::Finish
    );
    commit(&s);
    assert!(list(&s, &progress, 0).is_none());
    assert_eq!(
        nodes(s.control_state(StateAt::Committed).voters),
        vec![1, 2, 3, 4]
    );
    assert!(matches!(
        s.alter_voters(epoch, None, 0),
        Err(Error::Voters(VoterError::NoReassignment))
    ));
}

/// The reassignment sequence for the crash test; `states` collects the
/// control state after each appended record, `acked` the number of them
/// acknowledged durable.
fn sequence(
    s: &KraftReplica,
    states: &mut Vec<ControlState>,
    acked: &mut usize,
) -> Result<(), String> {
    let e = |r: quorumlog_raft::Result<()>| r.map_err(|e| e.to_string());
    let epoch = s.election().become_candidate().map_err(|e| e.to_string())?;
    e(s.election().become_leader())?;
    let flush = |s: &KraftReplica, states: &Vec<ControlState>, acked: &mut usize| {
        let end = s
            .wait_durable(s.extent().queued_end)
            .map_err(|e| e.to_string())?;
        *acked = states.len();
        s.set_high_watermark(end).map_err(|e| e.to_string())
    };
    e(s.append_voter_set(epoch, set(&[1])).map(|_| ()))?;
    states.push(s.control_state(StateAt::Latest));
    flush(s, states, acked)?;
    e(s.alter_voters(epoch, Some(set(&[1, 2, 3])), 10).map(|_| ()))?;
    states.push(s.control_state(StateAt::Latest));
    flush(s, states, acked)?;
    let progress: BTreeMap<Voter, Offset> = [v(2), v(3)].map(|x| (x, s.extent().queued_end)).into();
    for round in 0..12 {
        let step = s
            .drive_reassignment(epoch, v(1), &progress, 64)
            .map_err(|e| e.to_string())?;
        match step {
            Step::Append(_) | Step::Finish => states.push(s.control_state(StateAt::Latest)),
            Step::Idle if round > 0 => break,
            _ => {}
        }
        flush(s, states, acked)?;
        if step == Step::Finish {
            break;
        }
    }
    // Shrink to {2, 3}: the leader removes itself, then resigns.
    e(s.alter_voters(epoch, Some(set(&[2, 3])), 20).map(|_| ()))?;
    states.push(s.control_state(StateAt::Latest));
    flush(s, states, acked)?;
    for _ in 0..6 {
        let step = s
            .drive_reassignment(epoch, v(1), &progress, 64)
            .map_err(|e| e.to_string())?;
        if matches!(step, Step::Append(_) | Step::Finish) {
            states.push(s.control_state(StateAt::Latest));
        }
        flush(s, states, acked)?;
        if step == Step::Resign {
            break;
        }
    }
    Ok(())
}

#[test]
fn a_crash_at_every_call_of_a_reassignment_recovers_a_whole_state() {
    let (total, full) = {
        let (disk, s) = new_store(0);
        let before = disk.calls();
        let (mut states, mut acked) = (Vec::new(), 0);
        sequence(&s, &mut states, &mut acked).unwrap();
        assert_eq!(nodes(s.control_state(StateAt::Latest).voters), vec![2, 3]);
        assert!(
            s.election().role() != quorumlog_raft::kraft::Role::Leader,
            "resigned"
        );
        (disk.calls() - before, states)
    };
    assert!(full.len() >= 8, "{} states", full.len());
    let mut crashes = 0;
    for point in 0..=total {
        for (p, plan) in CRASH_PLANS.into_iter().enumerate() {
            let seed = point * 10 + p as u64;
            let (disk, s) = new_store(seed);
            disk.set_page_tearing(seed % 2 == 1);
            disk.crash_after(point);
            let (mut states, mut acked) = (Vec::new(), 0);
            let _ = sequence(&s, &mut states, &mut acked);
            drop(s);
            let disk = disk.crash_with(plan);
            let what = format!("crash after {point}/{total} calls, {plan:?}");
            check_recovered(&disk, &full, &states, acked, &what);
            crashes += 1;
        }
    }
    eprintln!("reassignment crash states: {crashes}");
    assert!(crashes > 200, "{crashes}");
}

#[test]
fn votes_go_only_to_the_voter_addressed_by_its_directory() {
    let (_disk, s) = new_store(9);
    let me = s.me();
    assert_eq!((me.node_id, me.directory_id), (NodeId(1), DirectoryId(2)));
    let pos = quorumlog_raft::kraft::LogPosition {
        last_epoch: None,
        end_offset: Offset(0),
    };
    // Addressed to node 1's old directory (its disk was replaced): refused,
    // and the epoch is not adopted.
    let old = Voter {
        node_id: NodeId(1),
        directory_id: DirectoryId(77),
    };
    assert!(matches!(
        s.grant_vote_to(Epoch(5), v(2), old, pos),
        Err(Error::Voters(VoterError::NotAVoter(_)))
    ));
    assert_eq!(s.election().epoch(), Epoch(0));
    // Addressed right: granted, though the candidate is in no set this
    // node knows (its view may be stale).
    assert_eq!(
        s.grant_vote_to(Epoch(5), v(9), me, pos).unwrap(),
        quorumlog_raft::kraft::VoteDecision::Granted
    );
    // A replica that is not a voter of its latest set may not stand.
    let epoch = common::lead(&s);
    s.append_voter_set(epoch, set(&[2, 3])).unwrap();
    assert!(matches!(
        s.become_candidate(),
        Err(Error::Voters(VoterError::NotAVoter(_)))
    ));
}

/// After a crash: the recovered state is one the full run passed through,
/// not before the last one acknowledged durable; it survives user entries
/// filling the freed offsets and another power cut.
fn check_recovered(
    disk: &SimFs,
    full: &[ControlState],
    states: &[ControlState],
    acked: usize,
    what: &str,
) {
    let fs: SharedFs = Arc::new(disk.clone());
    let s = KraftReplica::open(
        &fs,
        Path::new(common::DIR),
        &quorumlog_raft::Identity::of(&common::meta(1)),
        &options(),
    )
    .unwrap_or_else(|e| panic!("{what}: the replica does not open: {e}"))
    .0;
    let got = s.control_state(StateAt::Latest);
    let at = if got == ControlState::default() {
        Some(0)
    } else {
        full.iter().position(|x| *x == got).map(|i| i + 1)
    };
    let at = at.unwrap_or_else(|| panic!("{what}: a state never written: {got:?}"));
    assert!(
        at >= acked && at <= states.len() + 1,
        "{what}: state {at} of {} appended (one more in flight), {acked} acknowledged",
        states.len()
    );
    // User entries fill whatever offsets the crash freed, then another
    // power cut: the state is unchanged.
    let (_disk, s) = reuse_freed_offsets(disk, s);
    assert_eq!(
        s.control_state(StateAt::Latest),
        got,
        "{what}: changed by user entries after a crash"
    );
}

/// The listing of the wing's reassignment (`voters::status` over its
/// latest control state and high watermark).
fn list(
    s: &KraftReplica,
    progress: &BTreeMap<Voter, Offset>,
    now_ms: u64,
) -> Option<quorumlog_raft::kraft::voters::ReassignmentStatus> {
    let hw = s.extent().high_watermark.unwrap_or(Offset(0));
    quorumlog_raft::kraft::voters::status(&s.control_state(StateAt::Latest), progress, hw, now_ms)
}
