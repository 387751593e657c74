//! The model-checked crash tester (see `quorumlog_raft::harness`): random
//! workloads over a whole data directory, crashed at random I/O calls (and
//! again during recovery), with injected EIO/ENOSPC and bit flips, checked
//! against the model of every invariant of DESIGN.md section 4; and the
//! exhaustive mode over small canonical workloads.
//!
//! `QUORUMLOG_HARNESS_SEEDS=N` runs N seeds (default 1,500: over 2,000
//! crash/reopen cycles); `QUORUMLOG_HARNESS_SEED=S` replays one seed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use quorumlog_raft::harness::{run_exhaustive, run_seed, Op};

#[test]
fn random_crash_cycles() {
    let seeds: u64 = std::env::var("QUORUMLOG_HARNESS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    let (mut cycles, mut records, mut corruption, mut installed) = (0, 0, 0, 0);
    for seed in 0..seeds {
        let c = run_seed(seed).unwrap_or_else(|e| panic!("{e}"));
        cycles += c.reopens;
        records += c.records;
        corruption += u64::from(c.corruption_reported);
        installed += c.installed_snapshots;
    }
    eprintln!(
        "harness: {seeds} seeds, {cycles} crash/reopen cycles, {records} records verified, \
         {corruption} bit flips reported as corruption, {installed} installed snapshots verified"
    );
    assert!(cycles >= seeds);
}

#[test]
fn replay() {
    if let Some(seed) = std::env::var("QUORUMLOG_HARNESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        let c = run_seed(seed).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("seed {seed}: {c:?}");
    }
}

#[test]
fn exhaustive_small_workloads() {
    let append = Op::Append {
        n: 2,
        size: 100,
        bump: false,
    };
    let workloads: Vec<Vec<Op>> = vec![
        vec![append, Op::Flush],
        vec![append, Op::Flush, Op::Truncate(1)],
        vec![append, Op::Flush, Op::SnapshotAndClean],
        vec![Op::Vote(1), append, Op::Flush, Op::Reopen],
    ];
    let mut total = 0;
    for w in &workloads {
        let states = run_exhaustive(w).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{w:?}: {states} crash states");
        total += states;
    }
    eprintln!("exhaustive: {total} crash states");
    assert!(total > 100);
}
