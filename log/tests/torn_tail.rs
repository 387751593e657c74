//! Torn tail at every byte of the last batch (docs/design.md invariant 3): the
//! last batch, written after the recovery point, reaches the disk only up to
//! byte k (the rest zeros, or garbage). For every k, open succeeds, cuts the
//! batch (unless it is whole), keeps every earlier record byte-identical, and
//! reports the tear; it never reports corruption.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::{batch_range, open_log, payload, read_all, seg_path, shared, sim, small_options, DIR};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::{CrashPlan, SimFs, SimRng};

/// A log of 30 records (clean close), then one more batch of 3 records
/// written and synced after the recovery point, then a crash. Returns the
/// disk, the last batch's segment path and byte range.
fn setup() -> (SimFs, std::path::PathBuf, (u64, u64)) {
    let (disk, fs) = sim(1);
    let opts = small_options();
    let mut log = open_log(&fs, Path::new(DIR), &opts).unwrap();
    for b in 0..10u64 {
        let recs: Vec<Vec<u8>> = (0..3).map(|j| payload(b * 3 + j, 0, 50)).collect();
        log.append_as_leader(Epoch(1), &recs).unwrap();
    }
    log.close().unwrap();
    let mut log = open_log(&fs, Path::new(DIR), &opts).unwrap();
    let recs: Vec<Vec<u8>> = (30..33).map(|o| payload(o, 0, 50)).collect();
    log.append_as_leader(Epoch(2), &recs).unwrap();
    log.flush().unwrap();
    let last = *log.segment_bases().last().unwrap();
    drop(log);
    let disk = disk.crash_with(CrashPlan::KeepAll);
    let path = seg_path(Path::new(DIR), last.0);
    let range = batch_range(&disk, &path, 30);
    (disk, path, range)
}

#[test]
fn torn_at_every_byte_of_the_last_batch() {
    let (_, _, (start, end)) = setup();
    let len = end - start;
    let mut opened = 0;
    for garbage in [false, true] {
        for k in 0..=len {
            let (disk, path, _) = setup();
            let mut fill = vec![0u8; usize::try_from(len - k).unwrap()];
            if garbage {
                SimRng::new(k).fill(&mut fill);
            }
            disk.corrupt_durable(&path, start + k, &fill).unwrap();
            let log = open_log(&shared(&disk), Path::new(DIR), &small_options())
                .unwrap_or_else(|e| panic!("k {k} garbage {garbage}: {e}"));
            let report = log.recovery_report().clone();
            let got = read_all(&log, Offset(0));
            if k == len {
                assert_eq!(log.log_end_offset(), Offset(33));
                assert!(report.torn_tail.is_none());
            } else {
                assert_eq!(
                    log.log_end_offset(),
                    Offset(30),
                    "k {k}: the torn batch is cut"
                );
                let all_zero = !garbage || fill.iter().all(|&b| b == 0);
                if k > 0 || !all_zero {
                    let t = report
                        .torn_tail
                        .as_ref()
                        .unwrap_or_else(|| panic!("k {k}: tear not reported"));
                    assert_eq!((t.position, t.offset), (start, Offset(30)));
                }
            }
            for (o, _, r) in &got {
                assert_eq!(r, &payload(*o, 0, 50), "offset {o}");
            }
            // The cut is durable and the log continues cleanly.
            drop(log);
            let mut log = open_log(&shared(&disk), Path::new(DIR), &small_options()).unwrap();
            log.append_as_leader(Epoch(3), &[b"next"]).unwrap();
            assert_eq!(read_all(&log, Offset(0)).last().unwrap().2, b"next");
            opened += 1;
        }
    }
    eprintln!("torn-tail states checked: {opened}");
}
