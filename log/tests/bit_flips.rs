//! A flipped bit in every batch of a small log (docs/design.md invariant 2 and
//! 3): always reported as `Corruption` with its segment and position, never
//! returned as data, and in Strict mode never silently truncated. The
//! opt-in `TruncateAtCorruption` mode cuts there and reports what it dropped.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::{Path, PathBuf};

use common::{batch_range, open_log, payload, read_all, seg_path, shared, sim, small_options, DIR};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_log::{CorruptionKind, Error, Location, LogOptions, RecoveryMode};

const RECORDS: u64 = 45;

/// 15 batches of 3 records over several segments. With `clean`, closed
/// cleanly (everything behind the recovery point); otherwise crashed with
/// everything synced but the recovery point at the last roll.
fn setup(clean: bool) -> (SimFs, Vec<(u64, PathBuf, u64, u64)>) {
    let (disk, fs) = sim(2);
    let opts = small_options();
    let mut log = open_log(&fs, Path::new(DIR), &opts).unwrap();
    for b in 0..RECORDS / 3 {
        let recs: Vec<Vec<u8>> = (0..3).map(|j| payload(b * 3 + j, 0, 70)).collect();
        log.append_as_leader(Epoch(1), &recs).unwrap();
    }
    let bases = log.segment_bases();
    if clean {
        log.close().unwrap();
    } else {
        log.flush().unwrap();
        drop(log);
    }
    let disk = disk.crash_with(CrashPlan::KeepAll);
    let mut batches = Vec::new();
    for b in 0..RECORDS / 3 {
        let o = b * 3;
        let base = bases.iter().rev().find(|s| s.0 <= o).unwrap().0;
        let path = seg_path(Path::new(DIR), base);
        let (start, end) = batch_range(&disk, &path, o);
        batches.push((o, path, start, end));
    }
    (disk, batches)
}

fn strict() -> LogOptions {
    small_options()
}

fn lenient() -> LogOptions {
    LogOptions {
        recovery_mode: RecoveryMode::TruncateAtCorruption,
        ..small_options()
    }
}

#[test]
fn flipped_bit_behind_the_recovery_point_is_reported_on_read_never_returned() {
    let (_, batches) = setup(true);
    for (i, (o, _, start, end)) in batches.iter().enumerate() {
        for bit_in in [8 * 20 + 3, (end - start) * 4, (end - start) * 8 - 1] {
            let (disk, batches) = setup(true);
            let (_, path, ..) = &batches[i];
            disk.flip_bit(path, start * 8 + bit_in).unwrap();
            let log = open_log(&shared(&disk), Path::new(DIR), &strict()).unwrap();
            assert_eq!(log.log_end_offset(), Offset(RECORDS), "never truncated");
            let mut reported = false;
            let mut at = Offset(0);
            while at < log.log_end_offset() {
                match log.read(at, 1 << 16) {
                    Ok(r) => {
                        for b in r.iter() {
                            assert!(
                                b.base_offset().0 + u64::from(b.record_count()) <= *o
                                    || b.base_offset().0 > *o,
                                "corrupt batch {o} returned"
                            );
                            for (j, rec) in b.to_vecs().unwrap().iter().enumerate() {
                                assert_eq!(rec, &payload(b.base_offset().0 + j as u64, 0, 70));
                            }
                        }
                        at = r.next_offset().unwrap();
                    }
                    Err(Error::Corruption { at: where_, .. }) => {
                        let position = where_.position();
                        assert!(
                            position <= *start,
                            "named position {position}, batch at {start}"
                        );
                        reported = true;
                        at = Offset(o + 3);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            assert!(reported, "flip in batch {o} bit {bit_in} not reported");
        }
    }
}

#[test]
fn flipped_bit_after_the_recovery_point_fails_strict_open() {
    let (_, batches) = setup(false);
    let last_seg = batches.last().unwrap().1.clone();
    let mut checked = 0;
    for (i, (o, path, start, end)) in batches.iter().enumerate() {
        // Batches of the active segment followed by another batch.
        if *path != last_seg || i + 1 == batches.len() {
            continue;
        }
        let (disk, _) = setup(false);
        disk.flip_bit(path, (start + (end - start) / 2) * 8)
            .unwrap();
        match open_log(&shared(&disk), Path::new(DIR), &strict()) {
            Err(Error::Corruption {
                at: Location::Segment {
                    position, offset, ..
                },
                kind,
                ..
            }) => {
                assert_eq!((position, offset), (*start, Offset(*o)));
                assert!(
                    matches!(kind, CorruptionKind::ValidDataFollows { .. }),
                    "{kind}"
                );
            }
            other => panic!("batch {o}: strict open must fail, got {other:?}"),
        }
        // Opt-in: cut there, report exactly what was dropped.
        let (disk, _) = setup(false);
        disk.flip_bit(path, (start + (end - start) / 2) * 8)
            .unwrap();
        let log = open_log(&shared(&disk), Path::new(DIR), &lenient()).unwrap();
        let d = log.recovery_report().dropped.clone().unwrap();
        assert_eq!((d.position, d.from_offset), (*start, Offset(*o)));
        assert_eq!(log.log_end_offset(), Offset(*o));
        assert_eq!(read_all(&log, Offset(0)).len() as u64, *o);
        checked += 1;
    }
    assert!(checked >= 2, "checked {checked}");
}

#[test]
fn flipped_bit_in_a_sealed_segment_without_index_fails_strict_open() {
    let (_, batches) = setup(true);
    let (o, path, start, end) = batches[1].clone();
    let (disk, _) = setup(true);
    let index = path.with_extension("index");
    quorumlog_io::FileSystem::remove_file(&disk, &index).unwrap();
    disk.flip_bit(&path, (start + (end - start) / 2) * 8)
        .unwrap();
    match open_log(&shared(&disk), Path::new(DIR), &strict()) {
        Err(Error::Corruption {
            at: Location::Segment {
                position, offset, ..
            },
            ..
        }) => {
            assert_eq!((position, offset), (start, Offset(o)));
        }
        other => panic!("strict open must fail, got {other:?}"),
    }
}

#[test]
fn a_batch_copied_to_another_position_is_detected() {
    // Batches of equal size: batch 2's bytes copied over batch 5's.
    let (_, batches) = setup(true);
    let (_, p2, s2, e2) = batches[2].clone();
    let (o5, p5, s5, e5) = batches[5].clone();
    assert_eq!(p2, p5, "same segment");
    assert_eq!(e2 - s2, e5 - s5);
    let copy = |disk: &SimFs| {
        let f = quorumlog_io::FileSystem::open(disk, &p2, quorumlog_io::OpenMode::Read).unwrap();
        let mut buf = vec![0u8; usize::try_from(e2 - s2).unwrap()];
        f.read_exact_at(&mut buf, s2).unwrap();
        disk.corrupt_durable(&p5, s5, &buf).unwrap();
    };
    // Behind the recovery point: the read names the misplaced batch.
    let (disk, _) = setup(true);
    copy(&disk);
    let log = open_log(&shared(&disk), Path::new(DIR), &strict()).unwrap();
    match log.read(Offset(o5), 1) {
        Err(Error::Corruption { kind, at, .. }) => {
            assert!(matches!(kind, CorruptionKind::Misplaced { .. }), "{kind}");
            assert_eq!(at.position(), s5);
        }
        other => panic!("misplaced batch returned: {other:?}"),
    }
    // After the recovery point: open refuses it (an intact batch in the
    // wrong place is never a torn tail).
    let (disk, batches) = setup(false);
    let (_, pl, sl, el) = batches.last().unwrap().clone();
    let (_, pp, sp, _) = batches[batches.len() - 2].clone();
    assert_eq!(pl, pp);
    let f = quorumlog_io::FileSystem::open(&disk, &pp, quorumlog_io::OpenMode::Read).unwrap();
    let mut buf = vec![0u8; usize::try_from(el - sl).unwrap()];
    f.read_exact_at(&mut buf, sp).unwrap();
    disk.corrupt_durable(&pl, sl, &buf).unwrap();
    assert!(matches!(
        open_log(&shared(&disk), Path::new(DIR), &strict()),
        Err(Error::Corruption {
            kind: CorruptionKind::Misplaced { .. },
            ..
        })
    ));
}
