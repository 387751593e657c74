//! One poisoned state. Invariants protected: after an I/O failure of any
//! part (here a failed log sync, a failed election-state replace and a
//! full disk under a snapshot), every store call is refused with
//! `Error::Poisoned` naming the first failure — appends, reads, snapshots,
//! metadata, durability waits and callbacks, and election transitions —
//! so nothing is acknowledged on a disk in an unknown state; a refusal
//! (bad input, a rule) poisons nothing; a reopen recovers, with every
//! acknowledged entry.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};

use common::{lead, meta, options, DIR};
use quorumlog_checkpoint::{Epoch, NodeId, Offset, SharedFs};
use quorumlog_io::{CrashPlan, FaultKind, FaultOp, SimFs};
use quorumlog_raft::{Error, Isolation, KraftReplica};
use quorumlog_snapshot::WriterOptions;

fn store_on(sim: &SimFs) -> KraftReplica {
    let fs: SharedFs = Arc::new(sim.clone());
    quorumlog_raft::Store::format(&fs, Path::new(DIR), meta(1), None, &options()).unwrap();
    KraftReplica::open(
        &fs,
        Path::new(DIR),
        &quorumlog_raft::Identity::of(&meta(1)),
        &options(),
    )
    .unwrap()
    .0
}

/// Every kind of call is refused with `Poisoned`.
fn assert_all_refused(s: &KraftReplica, epoch: Epoch) {
    let poisoned = |r: Result<(), Error>, what: &str| {
        assert!(
            matches!(r, Err(Error::Poisoned(_))),
            "{what}: {r:?} (expected Poisoned)"
        );
    };
    assert!(s.poisoned().is_some());
    poisoned(
        s.append_as_leader(epoch, &[b"x"]).map(|_| ()),
        "leader append",
    );
    poisoned(
        s.append_durable(epoch, &[b"x"]).map(|_| ()),
        "durable append",
    );
    poisoned(s.append_as_follower(&[]).map(|_| ()), "follower append");
    poisoned(s.read(Offset(0), 100).map(|_| ()), "read");
    poisoned(
        s.read_entries(Offset(0), Offset(1), 100, Isolation::Uncommitted)
            .map(|_| ()),
        "read entries",
    );
    poisoned(
        s.validate_offset_and_epoch(Offset(0), epoch).map(|_| ()),
        "validation",
    );
    poisoned(s.truncate_to(s.log_end_offset()), "truncation");
    poisoned(s.set_high_watermark(Offset(0)), "high watermark");
    poisoned(s.write_app_metadata(b"m"), "app metadata");
    poisoned(s.wait_durable(Offset(1)).map(|_| ()), "wait durable");
    poisoned(
        s.create_snapshot(Offset(0), Epoch(0), b"", WriterOptions::default())
            .map(|_| ()),
        "snapshot",
    );
    poisoned(s.clean_log_prefix(Offset(1)).map(|_| ()), "cleaning");
    poisoned(s.election().become_candidate().map(|_| ()), "candidacy");
    poisoned(
        s.election()
            .grant_vote(Epoch(99), (NodeId(2), None), log_pos(), log_pos())
            .map(|_| ()),
        "vote",
    );
    let called = Arc::new(Mutex::new(None));
    let c = Arc::clone(&called);
    s.on_durable(
        Offset(u64::MAX),
        Box::new(move |r| *c.lock().unwrap() = Some(r.is_err())),
    );
    assert_eq!(
        *called.lock().unwrap(),
        Some(true),
        "completion told of the failure"
    );
}

fn log_pos() -> quorumlog_raft::LogPosition {
    quorumlog_raft::LogPosition {
        end_offset: Offset(u64::MAX),
        last_epoch: Some(Epoch(u64::MAX)),
    }
}

#[test]
fn a_failed_log_sync_poisons_the_whole_store() {
    let sim = SimFs::new(1);
    let s = store_on(&sim);
    let epoch = lead(&s);
    for _ in 0..3 {
        s.append_durable(epoch, &[b"acked"]).unwrap();
    }
    // A refusal first: it poisons nothing.
    assert!(matches!(
        s.append_as_leader(Epoch(epoch.0 + 5), &[b"x"]),
        Err(Error::WrongRole { .. })
    ));
    assert!(s.poisoned().is_none());
    sim.inject_fault(FaultOp::Sync, 1, FaultKind::Eio);
    sim.inject_fault(FaultOp::Write, 1, FaultKind::Eio);
    assert!(s.append_durable(epoch, &[b"lost"]).is_err());
    assert_all_refused(&s, epoch);
    // A reopen recovers, with the acknowledged entries.
    drop(s);
    let fs: SharedFs = Arc::new(sim.crash_with(CrashPlan::LoseUnsynced));
    let (s, _) = KraftReplica::open(
        &fs,
        Path::new(DIR),
        &quorumlog_raft::Identity::of(&meta(1)),
        &options(),
    )
    .unwrap();
    assert!(s.poisoned().is_none());
    let got = s
        .read_entries(Offset(0), Offset(3), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|e| e.bytes == b"acked"));
}

#[test]
fn a_failed_election_write_poisons_the_whole_store() {
    let sim = SimFs::new(2);
    let s = store_on(&sim);
    let epoch = lead(&s);
    s.append_durable(epoch, &[b"acked"]).unwrap();
    sim.inject_fault(FaultOp::Sync, 1, FaultKind::Eio);
    assert!(s.election().become_unattached(Epoch(epoch.0 + 1)).is_err());
    assert_all_refused(&s, epoch);
}

#[test]
fn a_full_disk_under_a_snapshot_poisons_the_whole_store() {
    let sim = SimFs::new(3);
    let s = store_on(&sim);
    let epoch = lead(&s);
    for _ in 0..4 {
        s.append_durable(epoch, &[b"acked"]).unwrap();
    }
    s.set_high_watermark(Offset(4)).unwrap();
    let mut w = s
        .create_snapshot(Offset(4), epoch, b"m", WriterOptions::default())
        .unwrap();
    sim.inject_fault(FaultOp::Write, 1, FaultKind::Enospc);
    sim.inject_fault(FaultOp::Allocate, 1, FaultKind::Enospc);
    let r = match w.write(&vec![7u8; 1 << 20]) {
        Ok(()) => w.freeze().map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(r.is_err());
    assert_all_refused(&s, epoch);
}
