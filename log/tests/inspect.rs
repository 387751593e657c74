//! The read-only walk inspectors use (`quorumlog_log::inspect`). Invariants:
//! on an intact log it finds exactly the batches a read returns, across
//! segments; a torn tail or stale bytes after the data are the end, never
//! a problem; damage inside the data (in a batch, or the last batches of a
//! sealed segment) is a problem with its file, position and offset, and a
//! raw walk goes on past it to every later batch.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::{batch_range, open_log, payload, seg_path, sim, small_options, DIR};
use quorumlog_checkpoint::{CorruptionKind, Epoch, Offset};
use quorumlog_io::{CrashPlan, SimFs, Tear};
use quorumlog_log::inspect::{inspect_log_dir, SegmentReport, Walk};

/// 15 batches of 3 records over several segments, each synced, closed
/// cleanly (`clean`) or left with 4 more unsynced batches and cut.
fn log(clean: bool, plan: CrashPlan) -> SimFs {
    let (disk, fs) = sim(4);
    // Each batch is synced alone, so each takes a page: 6 pages to a
    // segment.
    let options = quorumlog_log::LogOptions {
        segment_size_bytes: 7 * 4096,
        ..small_options()
    };
    let mut log = open_log(&fs, Path::new(DIR), &options).unwrap();
    for b in 0..15u64 {
        let recs: Vec<Vec<u8>> = (0..3).map(|j| payload(b * 3 + j, 0, 70)).collect();
        log.append_as_leader(Epoch(1), &recs).unwrap();
        log.flush().unwrap();
    }
    if clean {
        log.close().unwrap();
        return disk.crash_with(CrashPlan::KeepAll);
    }
    for b in 15..19u64 {
        let recs: Vec<Vec<u8>> = (0..3).map(|j| payload(b * 3 + j, 0, 70)).collect();
        log.append_as_leader(Epoch(1), &recs).unwrap();
    }
    drop(log);
    disk.crash_with(plan)
}

fn walk(disk: &SimFs, how: Walk) -> Vec<SegmentReport> {
    inspect_log_dir(disk, &Path::new(DIR).join("log"), how).unwrap()
}

fn offsets(reports: &[SegmentReport]) -> Vec<u64> {
    reports
        .iter()
        .flat_map(|r| r.batches.iter().map(|b| b.base_offset.0))
        .collect()
}

#[test]
fn an_intact_log_walks_to_every_batch_across_segments() {
    let disk = log(true, CrashPlan::KeepAll);
    let r = walk(&disk, Walk::Stop);
    assert!(r.len() > 2, "several segments: {}", r.len());
    assert_eq!(offsets(&r), (0..15).map(|b| b * 3).collect::<Vec<_>>());
    assert!(r.iter().all(|s| s.problems.is_empty()), "{r:#?}");
    for w in r.windows(2) {
        assert_eq!(w[0].end_offset, w[1].base_offset, "segments continue");
    }
    assert!(r
        .iter()
        .flat_map(|s| &s.batches)
        .all(|b| b.epoch == Epoch(1) && b.record_count == 3));
}

#[test]
fn a_torn_tail_is_the_end_of_the_data_not_a_problem() {
    for plan in [
        CrashPlan::LoseUnsynced,
        CrashPlan::Torn(Tear::Garbage),
        CrashPlan::Torn(Tear::Zeros),
        CrashPlan::Random,
    ] {
        let disk = log(false, plan);
        let r = walk(&disk, Walk::Raw);
        assert!(r.iter().all(|s| s.problems.is_empty()), "{plan:?}: {r:#?}");
        let found = offsets(&r);
        assert!(found.len() >= 15, "{plan:?}: the synced batches: {found:?}");
        assert_eq!(found[..15], (0..15).map(|b| b * 3).collect::<Vec<_>>()[..]);
    }
}

#[test]
fn damage_inside_the_data_is_reported_and_raw_walks_past_it() {
    let disk = log(true, CrashPlan::KeepAll);
    let intact = walk(&disk, Walk::Stop);
    // A batch with a later one in its segment: damage, not a tail.
    let (seg, victim) = intact
        .iter()
        .find_map(|s| (s.batches.len() >= 2).then(|| (s.file.clone(), s.batches[0].clone())))
        .unwrap();
    let (start, _) = batch_range(&disk, &seg, victim.base_offset.0);
    assert_eq!(start, victim.position);
    disk.flip_bit(&seg, (start + 50) * 8).unwrap();

    let stop = walk(&disk, Walk::Stop);
    let p: Vec<_> = stop.iter().flat_map(|s| &s.problems).collect();
    assert_eq!(p.len(), 1, "{stop:#?}");
    assert_eq!((p[0].file.as_path(), p[0].position), (seg.as_path(), start));
    assert_eq!(p[0].offset, Some(victim.base_offset));
    assert!(
        matches!(p[0].kind, CorruptionKind::ChecksumMismatch { .. }),
        "{:?}",
        p[0].kind
    );
    let raw = walk(&disk, Walk::Raw);
    let mut expected: Vec<u64> = (0..15).map(|b| b * 3).collect();
    expected.retain(|o| *o != victim.base_offset.0);
    assert_eq!(offsets(&raw), expected, "every batch but the damaged one");
}

#[test]
fn a_sealed_segment_whose_last_batch_is_damaged_is_reported() {
    let disk = log(true, CrashPlan::KeepAll);
    let intact = walk(&disk, Walk::Stop);
    let sealed = &intact[0];
    let last = sealed.batches.last().unwrap().clone();
    let path = seg_path(Path::new(DIR), sealed.base_offset.0);
    disk.flip_bit(&path, (last.position + 50) * 8).unwrap();
    let r = walk(&disk, Walk::Raw);
    let p = &r[0].problems;
    assert_eq!(p.len(), 1, "{r:#?}");
    assert_eq!(p[0].offset, Some(last.base_offset));
    assert_eq!(r[0].end_offset, last.base_offset);
    assert_eq!(Offset(r[1].base_offset.0), sealed.end_offset);
}
