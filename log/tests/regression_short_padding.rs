//! Regression (issue 9, bug 1): sync padding shorter than a batch header
//! was misread. After a sync the next batch starts on a fresh 4 KiB page;
//! when a batch ended 1–39 bytes before a page boundary, the read path took
//! a region for padding only if its first 4 bytes were zero and the recovery
//! scan only if a whole header's worth was zero, while the next batch's
//! magic sat inside that window. Reads failed with `BadMagic` at the padding
//! and a strict open after a crash refused with "invalid batch followed by
//! valid data". Fixed by one batch walker (`segment/walk.rs`) that every
//! reader uses: at an unaligned position, zeros up to the page boundary are
//! padding, whatever their length.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{format_dir, open_log, read_all, shared, sim, DIR};
use quorumlog_checkpoint::{DataDir, Epoch, Offset, OpenOptions, SharedFs};
use quorumlog_io::{CrashPlan, RealFs};
use quorumlog_log::{DurableLog, Log, LogOptions, RecoveryMode, SegmentPreparation, SyncPolicy};

/// Bytes of a batch header plus one record's length prefix.
const OVERHEAD: usize = 44;

/// Default options but a 1 MiB segment (the simulated disk keeps every
/// byte in memory) and inline segment preparation (deterministic I/O).
fn options() -> LogOptions {
    LogOptions {
        segment_size_bytes: 1 << 20,
        max_batch_bytes: 64 << 10,
        segment_preparation: SegmentPreparation::Inline,
        ..LogOptions::default()
    }
}

/// Appends a record that makes the first batch end `gap` bytes before the
/// page boundary at 8192, syncs, appends `b"second"`, syncs.
fn write_two(log: &mut Log, gap: usize) {
    log.append_as_leader(Epoch(1), &[vec![7u8; 4096 - OVERHEAD - gap]])
        .unwrap();
    log.flush().unwrap();
    log.append_as_leader(Epoch(1), &[b"second"]).unwrap();
    log.flush().unwrap();
}

fn check_two(log: &Log, gap: usize) {
    let all = read_all(log, Offset(0));
    assert!(all.len() >= 2, "gap {gap}");
    assert_eq!(all[0].2, vec![7u8; 4096 - OVERHEAD - gap]);
    assert_eq!(all[1].2, b"second");
    // Reading at offset 1 locates across the padding.
    let r = log.read(Offset(1), 1).unwrap();
    assert_eq!(r.iter().next().unwrap().to_vecs().unwrap()[0], b"second");
}

/// The read-path reproduction, exactly: default options on the real
/// file system, a 4,051-byte record (its batch spans [4096, 8191)), then
/// `b"second"`; `read(1)` must work, also after a clean reopen.
#[test]
fn one_byte_of_padding_reads_back_with_default_options() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let fs: SharedFs = Arc::new(RealFs::new());
    format_dir(&fs, &dir);
    let dd = Arc::new(DataDir::open(fs.clone(), &dir, &OpenOptions::default()).unwrap());
    let log = DurableLog::open(dd, LogOptions::default(), SyncPolicy::GroupCommit).unwrap();
    log.append_durable(Epoch(1), &[vec![1u8; 4051]]).unwrap();
    log.append_durable(Epoch(1), &[b"second"]).unwrap();
    let r = log.read(Offset(1), 1 << 20).unwrap();
    assert_eq!(r.iter().next().unwrap().to_vecs().unwrap()[0], b"second");
    // One read across the padding returns both batches.
    let r = log.read(Offset(0), 1 << 20).unwrap();
    assert_eq!(r.len(), 2);
    log.close().unwrap();
    let dd = Arc::new(DataDir::open(fs, &dir, &OpenOptions::default()).unwrap());
    let log = Log::open(dd, LogOptions::default()).unwrap();
    let r = log.read(Offset(1), 1 << 20).unwrap();
    assert_eq!(r.iter().next().unwrap().to_vecs().unwrap()[0], b"second");
}

/// Every padding length from none to more than a batch header, read while
/// open, after a clean reopen, and after a crash in strict mode (which must
/// open without reporting anything torn).
#[test]
fn every_short_padding_reads_and_recovers() {
    for gap in 0..=64 {
        let (disk, fs) = sim(u64::try_from(gap).unwrap());
        let mut log = open_log(&fs, Path::new(DIR), &options()).unwrap();
        write_two(&mut log, gap);
        check_two(&log, gap);
        log.close().unwrap();
        let mut log = open_log(&fs, Path::new(DIR), &options()).unwrap();
        check_two(&log, gap);
        // Crash after more syncs: the tail must be taken as it is.
        log.append_as_leader(Epoch(1), &[b"third"]).unwrap();
        log.flush().unwrap();
        drop(log);
        for plan in [CrashPlan::KeepAll, CrashPlan::LoseUnsynced] {
            let disk = disk.crash_with(plan);
            let log = open_log(&shared(&disk), Path::new(DIR), &options())
                .unwrap_or_else(|e| panic!("gap {gap}: strict open refused: {e}"));
            assert_eq!(log.log_end_offset(), Offset(3), "gap {gap}");
            assert!(log.recovery_report().torn_tail.is_none(), "gap {gap}");
            check_two(&log, gap);
        }
    }
}

/// The recovery-path reproduction: the first batch ends at byte
/// 8182, the log is dropped without `close`; strict open must succeed and
/// lenient open must keep offset 1.
#[test]
fn ten_bytes_of_padding_survive_an_unclean_open_in_both_modes() {
    for mode in [RecoveryMode::Strict, RecoveryMode::TruncateAtCorruption] {
        let (_, fs) = sim(5);
        let mut log = open_log(&fs, Path::new(DIR), &options()).unwrap();
        write_two(&mut log, 10);
        drop(log);
        let opts = LogOptions {
            recovery_mode: mode,
            ..options()
        };
        let log = open_log(&fs, Path::new(DIR), &opts).unwrap();
        assert_eq!(log.log_end_offset(), Offset(2), "{mode:?}");
        assert!(log.recovery_report().dropped.is_none());
        check_two(&log, 10);
    }
}
