//! Recycled segment files (issue 11): a prefix or suffix truncation keeps
//! freed segment files in a pool, and a roll reuses one, its old bytes in
//! place. Invariants protected here:
//! - a stale batch (of the file's earlier life) is never returned, even
//!   when it sits exactly where the log expects its next batch, with the
//!   expected offset: the new life's salt makes it fail verification;
//! - a reopen after a crash anywhere in the appends into a recycled file is
//!   never refused because of stale bytes, and keeps every acknowledged
//!   record (crash at every I/O call, every crash plan).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::{open_log, payload, read_all, shared, sim, small_options, DIR};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::{CrashPlan, FileSystem, SimFs};
use quorumlog_log::{Log, LogOptions, Preallocation};
use quorumlog_testkit::CRASH_PLANS;

const RECORD: usize = 150;

fn options() -> LogOptions {
    LogOptions {
        // Written blocks, so retired files are full-size and recyclable in
        // either mode; each batch of 3 records is a flush and a page.
        preallocation: Preallocation::ZeroFill,
        // The pool holds only what truncation freed (the stale twins).
        prefill_segments: 0,
        ..small_options()
    }
}

/// Appends batches of 3 records of generation `gen` from the log end,
/// flushing each, until the log ends at `until`.
fn fill(log: &mut Log, until: u64, gen: u64) {
    while log.log_end_offset().0 < until {
        let b = log.log_end_offset().0;
        let n = (until - b).min(3);
        let recs: Vec<Vec<u8>> = (0..n).map(|j| payload(b + j, gen, RECORD)).collect();
        log.append_as_leader(Epoch(1), &recs).unwrap();
        log.flush().unwrap();
    }
}

fn pool_files(disk: &SimFs) -> usize {
    disk.list(&Path::new(DIR).join("log"))
        .unwrap()
        .iter()
        .filter(|e| e.name.starts_with("recycled-"))
        .count()
}

/// A log whose last segment went back to the pool through a suffix
/// truncation to `cut`, then refilled with generation-1 records up to that
/// segment's base: the next append rolls into that very file, and every
/// batch lands exactly where its stale twin lies (same offsets, same
/// sizes, same epoch; only the payload differs). Returns the disk, the
/// log, the old end, and the cut.
fn refilled_twin(seed: u64) -> (SimFs, Log, u64, u64) {
    let (disk, fs) = sim(seed);
    let mut log = open_log(&fs, Path::new(DIR), &options()).unwrap();
    fill(&mut log, 30, 0);
    let bases = log.segment_bases();
    assert!(bases.len() >= 3, "{bases:?}");
    let last = bases[bases.len() - 1].0;
    // Cut inside the segment before the last: the last one is retired.
    let cut = last - 3;
    log.truncate_to(Offset(cut)).unwrap();
    assert_eq!(pool_files(&disk), 1, "the cut's later segment is pooled");
    fill(&mut log, last, 1);
    assert_eq!(log.segments_recycled(), 0);
    (disk, log, 30, cut)
}

#[test]
fn a_stale_twin_at_the_expected_place_is_never_returned() {
    for plan in CRASH_PLANS {
        let (disk, mut log, old_end, cut) = refilled_twin(7);
        // The new life writes its batches in the recycled file without a
        // sync; the crash then keeps what `plan` says of them. Where a write
        // is lost, the page holds the stale twin: same offset, same place.
        let b = log.log_end_offset().0;
        let flushed = b;
        let recs: Vec<Vec<u8>> = (0..3).map(|j| payload(b + j, 1, RECORD)).collect();
        log.append_as_leader(Epoch(1), &recs).unwrap();
        assert_eq!(
            log.segments_recycled(),
            1,
            "the roll reused the pooled file"
        );
        assert_eq!(log.segment_bases().last(), Some(&Offset(b)));
        assert_eq!(pool_files(&disk), 0);
        drop(log);
        let disk = disk.crash_with(plan);
        let log = open_log(&shared(&disk), Path::new(DIR), &options())
            .unwrap_or_else(|e| panic!("{plan:?}: strict open refused: {e}"));
        let end = log.log_end_offset().0;
        assert!(end >= flushed && end <= b + 3, "{plan:?}: end {end}");
        if plan == CrashPlan::LoseUnsynced {
            // Every page the new life wrote is lost: only the twin is left.
            assert_eq!(end, flushed, "{plan:?}: the old life's batch came back");
        }
        assert!(end <= old_end);
        for (o, _, r) in read_all(&log, log.log_start_offset()) {
            let gen = u64::from(o >= cut);
            assert_eq!(r, payload(o, gen, RECORD), "{plan:?}: offset {o}");
        }
    }
}

#[test]
fn without_its_salt_the_stale_twin_would_verify() {
    // The test above can fail: the twin lies exactly where the log looks,
    // with the offset it expects. Show that by reading the file's pages:
    // after the crash, the page where the lost batch was holds a batch
    // header naming that offset.
    let (disk, mut log, _, _) = refilled_twin(8);
    let b = log.log_end_offset().0;
    let recs: Vec<Vec<u8>> = (0..3).map(|j| payload(b + j, 1, RECORD)).collect();
    log.append_as_leader(Epoch(1), &recs).unwrap();
    let seg = log.segment_bases().last().unwrap().0;
    assert_eq!(seg, b, "rolled into the recycled file");
    drop(log);
    let disk = disk.crash_with(CrashPlan::LoseUnsynced);
    let (start, end) = common::batch_range(&disk, &common::seg_path(Path::new(DIR), seg), b);
    assert!(end > start, "the stale twin of offset {b} is in the file");
    let log = open_log(&shared(&disk), Path::new(DIR), &options()).unwrap();
    assert_eq!(log.log_end_offset().0, b, "and it is not part of the log");
}

#[test]
fn a_crash_at_every_call_of_appends_into_a_recycled_file_reopens() {
    let mut states = 0;
    let total = {
        let (disk, mut log, _, _) = refilled_twin(0);
        let before = disk.calls();
        workload(&mut log);
        disk.calls() - before
    };
    for point in 0..=total {
        for (p, plan) in CRASH_PLANS.into_iter().enumerate() {
            let seed = point * 10 + p as u64;
            let (disk, mut log, _, cut) = refilled_twin(seed);
            disk.set_page_tearing(seed % 2 == 1);
            let acked = log.log_end_offset().0;
            disk.crash_after(point);
            let done = workload(&mut log);
            let acked = if done { 30 } else { acked };
            drop(log);
            let disk = disk.crash_with(plan);
            let what = format!("crash after {point}/{total} calls, {plan:?}");
            let log = open_log(&shared(&disk), Path::new(DIR), &options())
                .unwrap_or_else(|e| panic!("{what}: strict open refused: {e}"));
            let end = log.log_end_offset().0;
            assert!(end >= acked, "{what}: end {end} lost acknowledged {acked}");
            assert!(end <= 30, "{what}: end {end}");
            for (o, _, r) in read_all(&log, log.log_start_offset()) {
                let gen = u64::from(o >= cut);
                assert_eq!(r, payload(o, gen, RECORD), "{what}: offset {o}");
            }
            states += 1;
        }
    }
    assert!(states > 20, "{states}");
}

/// Appends (flushed) into the recycled file up to offset 30; returns
/// whether everything was acknowledged.
fn workload(log: &mut Log) -> bool {
    while log.log_end_offset().0 < 30 {
        let b = log.log_end_offset().0;
        let recs: Vec<Vec<u8>> = (0..3).map(|j| payload(b + j, 1, RECORD)).collect();
        if log.append_as_leader(Epoch(1), &recs).is_err() || log.flush().is_err() {
            return false;
        }
    }
    true
}

#[test]
fn a_new_log_prefills_the_pool_and_its_first_rolls_reuse_it() {
    let (disk, fs) = sim(3);
    let opts = LogOptions {
        preallocation: Preallocation::Fallocate,
        prefill_segments: 2,
        ..small_options()
    };
    let mut log = open_log(&fs, Path::new(DIR), &opts).unwrap();
    assert_eq!(pool_files(&disk), 2, "written ahead at creation");
    fill(&mut log, 9, 0); // three segments: two rolls
    assert_eq!(log.segments_recycled(), 2);
    assert_eq!(pool_files(&disk), 0);
    log.close().unwrap();
    // Only a new log is prefilled: a reopen writes nothing ahead.
    let log = open_log(&fs, Path::new(DIR), &opts).unwrap();
    assert_eq!(pool_files(&disk), 0);
    assert_eq!(read_all(&log, Offset(0)).len(), 9);
}
