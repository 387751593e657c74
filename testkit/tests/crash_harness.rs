//! The model-checked crash tester (see `quorumlog_raft::harness`): random
//! workloads over a whole data directory, crashed at random I/O calls (and
//! again during recovery), with injected EIO/ENOSPC and bit flips, checked
//! against the model of every invariant of docs/design.md section 4; and the
//! exhaustive mode over small canonical workloads, including every sync
//! padding length.
//!
//! Each run draws a fresh base seed (printed with its replay command), so
//! every CI run explores new states; `PINNED_SEEDS` (seeds of past failures)
//! run every time. `QUORUMLOG_HARNESS_SEEDS=N` runs N fresh seeds (default
//! 1,500); `QUORUMLOG_HARNESS_BASE=B` fixes the base; `QUORUMLOG_HARNESS_SEED=S`
//! replays one seed.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use quorumlog_testkit::fresh_seed;
use quorumlog_testkit::harness::{run_exhaustive, run_seed, Op};

/// Seeds that found bugs, run on every run:
/// - 0, 3, 23: a strict open refused after a plain crash ("invalid batch
///   followed by valid data" behind 1–39 bytes of sync padding; issue 9),
///   found by the page-end generator run against the code before the fix;
/// - 1769910629981938687: a refused open (flipped bit) after redoing a
///   truncation intent, which refined the evidence rule (only the intent's
///   own removals happen before a refusal). Found with 32 KiB segments; the
///   workload it draws now differs.
/// - 1792945832150392719: with recycled segment files (issue 11), a strict
///   open refused after a plain crash: a sealed segment's scan went on past
///   its complete data into a stale batch of the file's earlier life and
///   called it corruption.
/// - 1783864291802860789: the first failure of the harness driving the
///   Raft store (issue 12): a follower whose log started exactly at its own
///   snapshot's end kept its log when it installed the leader's snapshot
///   ending there in a newer epoch (its entries had diverged).
/// - 1788097385809151734: the store's open scanned the whole log for voter
///   records (issue 14) and was refused at a flipped bit in an old batch
///   that the log's lazy recovery had not met, after recovery had already
///   rebuilt an index: a refused open that changed the directory. The scan
///   now stops at unreadable data instead of refusing the open.
/// - 1767311051543929907: a false alarm of the harness itself (found by
///   the `crash_recovery` fuzz target and then one CI-sized run in 70):
///   the crash-in-recovery cycle repeats the workload on a second disk,
///   which under a background flusher need not do the first one's I/O;
///   the bit flip found a sealed segment only there, and the first disk's
///   "nothing flipped" made the damage count as a recovery failure. Fails
///   about one run in six on the old harness (the flusher decides).
const PINNED_SEEDS: &[u64] = &[
    0,
    3,
    23,
    1_769_910_629_981_938_687,
    1_792_945_832_150_392_719,
    1_783_864_291_802_860_789,
    1_788_097_385_809_151_734,
    1_767_311_051_543_929_907,
];

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

#[test]
fn random_crash_cycles() {
    let seeds = env("QUORUMLOG_HARNESS_SEEDS").unwrap_or(1500);
    let base = env("QUORUMLOG_HARNESS_BASE").unwrap_or_else(fresh_seed);
    eprintln!(
        "harness: base seed {base} (replay: QUORUMLOG_HARNESS_BASE={base} \
         QUORUMLOG_HARNESS_SEEDS={seeds} cargo test -p quorumlog-testkit --test crash_harness \
         random_crash_cycles)"
    );
    let (mut cycles, mut records, mut corruption, mut installed) = (0, 0, 0, 0);
    let fresh = (0..seeds).map(|i| base.wrapping_add(i));
    let all: Vec<u64> = PINNED_SEEDS.iter().copied().chain(fresh).collect();
    for &seed in &all {
        let c = run_seed(seed).unwrap_or_else(|e| panic!("{e}"));
        cycles += c.reopens;
        records += c.records;
        corruption += u64::from(c.corruption_reported);
        installed += c.installed_snapshots;
    }
    eprintln!(
        "harness: {} seeds, {cycles} crash/reopen cycles, {records} records verified, \
         {corruption} bit flips reported as corruption, {installed} installed snapshots verified",
        all.len()
    );
    assert!(cycles >= all.len() as u64);
    assert!(
        installed > 0,
        "the harness never verified an installed snapshot"
    );
    let recycled = quorumlog_testkit::harness::recycled_rolls();
    eprintln!("harness: {recycled} rolls into recycled segment files");
    assert!(
        recycled > 0,
        "the workloads never rolled into a recycled file"
    );
}

#[test]
fn replay() {
    if let Some(seed) = env("QUORUMLOG_HARNESS_SEED") {
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
    let mut workloads: Vec<Vec<Op>> = vec![
        vec![append, Op::Flush],
        vec![append, Op::Flush, Op::Truncate(1)],
        vec![append, Op::Flush, Op::SnapshotAndClean],
        vec![Op::Vote(1), append, Op::Flush, Op::Reopen],
    ];
    // Every sync padding length from none to more than a batch header,
    // followed by a synced batch on the next page and an unsynced one.
    for gap in 0..=48 {
        workloads.push(vec![
            Op::PageEnd { gap, pages: 1 },
            append,
            Op::Flush,
            append,
        ]);
    }
    let mut total = 0;
    for w in &workloads {
        let states = run_exhaustive(w).unwrap_or_else(|e| panic!("{e}"));
        total += states;
    }
    eprintln!(
        "exhaustive: {} workloads, {total} crash states",
        workloads.len()
    );
    assert!(total > 100);
}
