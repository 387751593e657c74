//! Each damaged or interrupted state recovery can find has a defined
//! outcome (see the decision table in `quorumlog_log::recovery`): a missing
//! segment in the middle, segments left by an interrupted truncation, a
//! segment shorter than the recovery point, stale or missing index files,
//! an interrupted roll, a log start past the data, a high watermark past the
//! data. Also: a clean open verifies nothing; an unclean one verifies only
//! what follows the recovery point.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::{
    assert_refused_unchanged, open_dd, open_log, payload, read_all, seg_path, shared, sim,
    small_options, DIR,
};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::{CrashPlan, FileSystem, OpenMode, SimFs};
use quorumlog_log::{
    CorruptionKind, Error, IndexProblem, Location, LogOptions, RecoveryMode, ScanStart,
    WriteAlignment,
};

/// 60 records of 70 bytes in batches of 3, several segments, clean close.
fn setup() -> (SimFs, Vec<Offset>) {
    let (disk, fs) = sim(3);
    let mut log = open_log(&fs, Path::new(DIR), &opts()).unwrap();
    for b in 0..20u64 {
        let recs: Vec<Vec<u8>> = (0..3).map(|j| payload(b * 3 + j, 0, 70)).collect();
        log.append_as_leader(Epoch(1 + b / 7), &recs).unwrap();
    }
    let bases = log.segment_bases();
    assert!(bases.len() >= 4, "{bases:?}");
    log.close().unwrap();
    (disk.crash_with(CrashPlan::KeepAll), bases)
}

/// Segments of five batches.
fn opts() -> LogOptions {
    LogOptions {
        segment_size_bytes: 1536,
        max_batch_bytes: 1024,
        write_alignment: WriteAlignment::Packed,
        ..small_options()
    }
}

fn lenient() -> LogOptions {
    LogOptions {
        recovery_mode: RecoveryMode::TruncateAtCorruption,
        ..opts()
    }
}

fn index_path(base: Offset) -> std::path::PathBuf {
    Path::new(DIR)
        .join("log")
        .join(format!("{:020}.index", base.0))
}

fn check_records(log: &quorumlog_log::Log, end: u64) {
    let all = read_all(log, Offset(0));
    assert_eq!(all.len() as u64, end);
    for (o, _, r) in all {
        assert_eq!(r, payload(o, 0, 70));
    }
}

#[test]
fn clean_open_verifies_nothing_and_crash_open_only_the_tail() {
    let (disk, _) = setup();
    let log = open_log(&shared(&disk), Path::new(DIR), &opts()).unwrap();
    let r = log.recovery_report();
    assert!(r.clean && r.bytes_scanned == 0, "{r:?}");
    // Append after the recovery point, sync, crash: only the new batches
    // are verified.
    let mut log = log;
    for i in 60..66u64 {
        log.append_as_leader(Epoch(5), &[payload(i, 0, 70)])
            .unwrap();
    }
    log.flush().unwrap();
    drop(log);
    let disk = disk.crash_with(CrashPlan::KeepAll);
    let log = open_log(&shared(&disk), Path::new(DIR), &opts()).unwrap();
    let r = log.recovery_report();
    assert!(!r.clean);
    let ScanStart::RecoveryPoint { offset, .. } = r.scan_start else {
        panic!("{r:?}");
    };
    // Only the batches after the recovery point (the clean close's, or the
    // roll's if the appends rolled) were read: one record of 70 B each.
    assert!(offset >= Offset(60));
    assert_eq!(r.bytes_scanned, (66 - offset.0) * (40 + 4 + 70), "{r:?}");
    check_records(&log, 66);
}

#[test]
fn missing_segment_in_the_middle_is_a_gap() {
    let (disk, bases) = setup();
    disk.remove_file(&seg_path(Path::new(DIR), bases[1].0))
        .unwrap();
    match open_log(&shared(&disk), Path::new(DIR), &opts()) {
        Err(Error::Corruption {
            kind: CorruptionKind::Gap { end, next_base },
            at: Location::Segment { segment, .. },
            ..
        }) => {
            assert_eq!((segment, end, next_base), (bases[0], bases[1], bases[2]));
        }
        other => panic!("expected a gap, got {other:?}"),
    }
    let log = open_log(&shared(&disk), Path::new(DIR), &lenient()).unwrap();
    assert_eq!(log.log_end_offset(), bases[1], "cut at the gap");
    let d = log.recovery_report().dropped.clone().unwrap();
    assert_eq!(d.from_offset, bases[1]);
    assert!(d.segments_removed.contains(&bases[2]));
    check_records(&log, bases[1].0);
}

#[test]
fn segments_left_below_the_log_start_are_removed() {
    // An interrupted prefix truncation: the log start offset is durable,
    // the segments below it were not deleted yet.
    let (disk, bases) = setup();
    let dd = open_dd(&shared(&disk), Path::new(DIR));
    dd.write_log_start_offset(bases[2], None).unwrap();
    drop(dd);
    let log = open_log(&shared(&disk), Path::new(DIR), &opts()).unwrap();
    assert_eq!(log.log_start_offset(), bases[2]);
    assert_eq!(log.segment_bases()[0], bases[2]);
    let removed: Vec<Offset> = log
        .recovery_report()
        .segments_removed
        .iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(removed, vec![bases[0], bases[1]]);
    assert!(!disk.exists(&seg_path(Path::new(DIR), bases[0].0)).unwrap());
    assert_eq!(read_all(&log, bases[2]).len() as u64, 60 - bases[2].0);
}

#[test]
fn log_start_past_the_data_restarts_the_log_there() {
    let (disk, _) = setup();
    let dd = open_dd(&shared(&disk), Path::new(DIR));
    dd.write_log_start_offset(Offset(500), None).unwrap();
    drop(dd);
    let log = open_log(&shared(&disk), Path::new(DIR), &opts()).unwrap();
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (Offset(500), Offset(500))
    );
}

#[test]
fn segment_shorter_than_the_recovery_point() {
    let (disk, bases) = setup();
    let last = seg_path(Path::new(DIR), bases.last().unwrap().0);
    let f = disk.open(&last, OpenMode::ReadWrite).unwrap();
    f.set_len(100).unwrap();
    f.sync_data().unwrap();
    match open_log(&shared(&disk), Path::new(DIR), &opts()) {
        Err(Error::Corruption {
            kind: CorruptionKind::ShorterThanRecoveryPoint { len: 100, .. },
            ..
        }) => {}
        other => panic!("expected ShorterThanRecoveryPoint, got {other:?}"),
    }
    // Lenient: full scan, keeps what is intact.
    let log = open_log(&shared(&disk), Path::new(DIR), &lenient()).unwrap();
    assert!(matches!(
        log.recovery_report().scan_start,
        ScanStart::FullScan { .. }
    ));
    assert!(log.log_end_offset() >= *bases.last().unwrap());
    check_records(&log, log.log_end_offset().0);
}

#[test]
fn missing_corrupt_or_stale_index_files_are_rebuilt() {
    for case in ["missing", "corrupt", "stale", "active-missing"] {
        let (disk, bases) = setup();
        let target = if case == "active-missing" {
            *bases.last().unwrap()
        } else {
            bases[1]
        };
        let path = index_path(target);
        match case {
            "missing" | "active-missing" => disk.remove_file(&path).unwrap(),
            "corrupt" => disk.flip_bit(&path, 8 * 45).unwrap(),
            _ => {
                // Another segment's (valid) index in its place.
                let other = disk.open(&index_path(bases[0]), OpenMode::Read).unwrap();
                let bytes = other.read_to_end().unwrap();
                let f = disk.open(&path, OpenMode::CreateOrTruncate).unwrap();
                f.write_all_at(&bytes, 0).unwrap();
                f.sync_data().unwrap();
            }
        }
        let log = open_log(&shared(&disk), Path::new(DIR), &opts()).unwrap();
        let r = log.recovery_report().clone();
        let want = match case {
            "missing" => Some(IndexProblem::Missing),
            "corrupt" => Some(IndexProblem::Corrupt(CorruptionKind::ChecksumMismatch {
                stored: 0,
                computed: 0,
            })),
            "stale" => Some(IndexProblem::Stale),
            _ => None,
        };
        match want {
            Some(IndexProblem::Corrupt(_)) => assert!(
                matches!(r.indexes_rebuilt.as_slice(), [(b, IndexProblem::Corrupt(_))] if *b == target),
                "{case}: {r:?}"
            ),
            Some(p) => assert_eq!(r.indexes_rebuilt, vec![(target, p)], "{case}"),
            None => assert!(r.bytes_scanned > 0, "the active segment was re-verified"),
        }
        check_records(&log, 60);
        drop(log);
        // Rewritten: the next open trusts it again.
        let log = open_log(&shared(&disk), Path::new(DIR), &opts()).unwrap();
        assert!(log.recovery_report().indexes_rebuilt.is_empty(), "{case}");
        check_records(&log, 60);
    }
}

/// A segment file without a valid header can only be damage: a roll writes
/// and syncs the header of the prepared file before the rename that gives it
/// a segment name. (Before issue 9 this was taken for an interrupted roll
/// and the file deleted, even in strict mode.)
#[test]
fn a_headerless_segment_is_damage_strict_refuses_lenient_drops_it() {
    let (disk, bases) = setup();
    let next = Offset(60);
    let f = disk
        .open(&seg_path(Path::new(DIR), next.0), OpenMode::CreateNew)
        .unwrap();
    f.write_all_at(&[0u8; 64], 0).unwrap();
    f.sync_data().unwrap();
    disk.sync_dir(&Path::new(DIR).join("log")).unwrap();
    let err = assert_refused_unchanged(&shared(&disk), Path::new(DIR), &opts());
    assert!(
        matches!(err, Error::Corruption { at: Location::Segment { segment, position: 0, .. }, .. } if segment == next),
        "{err:?}"
    );
    let lenient = LogOptions {
        recovery_mode: RecoveryMode::TruncateAtCorruption,
        ..opts()
    };
    let log = open_log(&shared(&disk), Path::new(DIR), &lenient).unwrap();
    assert_eq!(log.segment_bases(), bases);
    let dropped = log.recovery_report().dropped.clone().unwrap();
    assert_eq!(dropped.segments_removed, vec![next]);
    check_records(&log, 60);
}

#[test]
fn high_watermark_past_the_data_is_clamped_and_unknown_files_left_alone() {
    let (disk, _) = setup();
    let dd = open_dd(&shared(&disk), Path::new(DIR));
    dd.write_high_watermark(Offset(999)).unwrap();
    drop(dd);
    let f = disk
        .open(&Path::new(DIR).join("log/notes.txt"), OpenMode::CreateNew)
        .unwrap();
    f.sync_data().unwrap();
    let log = open_log(&shared(&disk), Path::new(DIR), &opts()).unwrap();
    assert_eq!(log.high_watermark(), Some(Offset(60)));
    let r = log.recovery_report();
    assert_eq!(r.high_watermark_clamped, Some((Offset(999), Offset(60))));
    assert_eq!(r.unknown_files, vec!["notes.txt".to_string()]);
    assert!(disk.exists(&Path::new(DIR).join("log/notes.txt")).unwrap());
}

#[test]
fn lost_recovery_point_or_epoch_map_means_a_full_scan_that_rebuilds_epochs() {
    for file in ["recovery-point", "epoch-map"] {
        let (disk, _) = setup();
        disk.remove_file(&Path::new(DIR).join("checkpoints").join(file))
            .unwrap();
        let log = open_log(&shared(&disk), Path::new(DIR), &opts()).unwrap();
        let r = log.recovery_report();
        assert!(matches!(r.scan_start, ScanStart::FullScan { .. }), "{file}");
        assert_eq!(r.checkpoints_degraded.len(), 1);
        assert!(r.bytes_scanned >= 60 * 74, "{file}: {}", r.bytes_scanned);
        let epochs: Vec<(u64, u64)> = log
            .epochs()
            .entries()
            .iter()
            .map(|e| (e.epoch.0, e.start_offset.0))
            .collect();
        assert_eq!(epochs, vec![(1, 0), (2, 21), (3, 42)]);
        check_records(&log, 60);
    }
}
