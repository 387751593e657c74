//! Regression (issue 9, bug 2): the last flushed batch could vanish without
//! a report. With offsets 0 and 1 appended and flushed separately (so the
//! second starts on the next page), the log dropped without `close`, and one
//! bit of the second batch flipped, a strict open returned Ok with the log
//! ending at 1 and nothing in the recovery report: the scanner took the
//! zeros before the page boundary for the end of the data and never looked
//! at the damaged batch behind them. Fixed by the one batch walker (padding
//! leads to the next page, where the damaged batch is seen) and by the rule
//! that every byte a cut drops is named in the report
//! (`TornTail { position, dropped_until }`).
//!
//! Without a durable marker per sync, damage to the last synced batch is
//! indistinguishable from a write torn by a power cut, so it is cut as a torn
//! tail, and reported. A page zeroed by the device leaves nothing to report
//! (it looks like a page never written); a file cut there is reported as an
//! active segment whose zero tail was restored.
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
    batch_range, multi_page_options, open_log, payload, read_all, seg_path, shared, sim, DIR,
};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::{CrashPlan, FileSystem, OpenMode, SimFs};
use quorumlog_log::CorruptionKind;

/// Offsets 0 and 1 flushed separately, dropped without close; returns the
/// crashed disk and the second batch's byte range.
fn setup() -> (SimFs, (u64, u64)) {
    let (disk, fs) = sim(2);
    let mut log = open_log(&fs, Path::new(DIR), &multi_page_options()).unwrap();
    for o in 0..2u64 {
        log.append_as_leader(Epoch(1), &[payload(o, 0, 100)])
            .unwrap();
        log.flush().unwrap();
    }
    drop(log);
    let disk = disk.crash_with(CrashPlan::KeepAll);
    let range = batch_range(&disk, &seg_path(Path::new(DIR), 0), 1);
    (disk, range)
}

#[test]
fn a_flipped_bit_in_the_last_synced_batch_is_cut_and_reported() {
    let (_, (start, end)) = setup();
    assert_eq!(start % 4096, 0, "the second batch starts on a fresh page");
    // Every bit of the second batch.
    for bit in 0..(end - start) * 8 {
        let (disk, _) = setup();
        disk.flip_bit(&seg_path(Path::new(DIR), 0), start * 8 + bit)
            .unwrap();
        let log = open_log(&shared(&disk), Path::new(DIR), &multi_page_options())
            .unwrap_or_else(|e| panic!("bit {bit}: {e}"));
        assert_eq!(log.log_end_offset(), Offset(1), "bit {bit}");
        let torn = log
            .recovery_report()
            .torn_tail
            .clone()
            .unwrap_or_else(|| panic!("bit {bit}: the dropped batch is not reported"));
        assert_eq!(torn.offset, Offset(1));
        assert!(torn.position < start, "the cut is at the end of offset 0");
        assert!(
            torn.dropped_until > start && torn.dropped_until <= end,
            "bit {bit}: {torn:?}"
        );
        assert_eq!(read_all(&log, Offset(0))[0].2, payload(0, 0, 100));
    }
}

#[test]
fn garbage_after_the_data_is_reported_when_cut() {
    let (disk, (start, _)) = setup();
    // Bytes where nothing was written (after the second batch's page start,
    // past its end): not a batch, nothing valid after.
    disk.corrupt_durable(&seg_path(Path::new(DIR), 0), start + 2000, &[0xAB; 3])
        .unwrap();
    let log = open_log(&shared(&disk), Path::new(DIR), &multi_page_options()).unwrap();
    assert_eq!(log.log_end_offset(), Offset(2));
    let torn = log.recovery_report().torn_tail.clone().unwrap();
    assert_eq!(torn.offset, Offset(2));
    assert_eq!(torn.dropped_until, start + 2003);
    assert!(matches!(torn.kind, CorruptionKind::Malformed(_)));
}

#[test]
fn a_file_cut_at_the_last_batch_is_reported_and_reopens() {
    let (disk, (start, _)) = setup();
    let f = disk
        .open(&seg_path(Path::new(DIR), 0), OpenMode::ReadWrite)
        .unwrap();
    f.set_len(start).unwrap();
    f.sync_data().unwrap();
    drop(f);
    let log = open_log(&shared(&disk), Path::new(DIR), &multi_page_options()).unwrap();
    assert_eq!(log.log_end_offset(), Offset(1));
    assert_eq!(
        log.recovery_report().active_segment_extended,
        Some((Offset(0), start))
    );
    log.close().unwrap();
    let log = open_log(&shared(&disk), Path::new(DIR), &multi_page_options()).unwrap();
    assert_eq!(read_all(&log, Offset(0)).len(), 1);
}
