//! Regression (issue 9, bug 4): a last segment without its zero tail (cut at
//! the end of its data, as some copy or restore tools leave it) reopened,
//! but reads then failed with "file ends early" (the aligned end of data lay
//! past the file's end), and the next strict open failed with
//! `ShorterThanRecoveryPoint`. Recovery now accepts a file that lacks only
//! sync padding (after a scan shows every batch up to the recovery point is
//! there), restores the zero tail, and reports it.
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
use quorumlog_io::{CrashPlan, FileSystem, OpenMode};

#[test]
fn a_segment_cut_at_its_data_end_reopens_and_reads() {
    for close in [true, false] {
        for n in [1u64, 3, 17] {
            let (disk, fs) = sim(n);
            let mut log = open_log(&fs, Path::new(DIR), &multi_page_options()).unwrap();
            for o in 0..n {
                log.append_as_leader(Epoch(1), &[payload(o, 0, 90)])
                    .unwrap();
                if o % 2 == 0 {
                    log.flush().unwrap();
                }
            }
            if close {
                log.close().unwrap();
            } else {
                log.flush().unwrap();
                drop(log);
            }
            let disk = disk.crash_with(CrashPlan::KeepAll);
            let path = seg_path(Path::new(DIR), 0);
            let (_, data_end) = batch_range(&disk, &path, n - 1);
            let f = disk.open(&path, OpenMode::ReadWrite).unwrap();
            f.set_len(data_end).unwrap();
            f.sync_data().unwrap();
            drop(f);
            let fs = shared(&disk);
            let mut log = open_log(&fs, Path::new(DIR), &multi_page_options())
                .unwrap_or_else(|e| panic!("close {close} n {n}: {e}"));
            assert_eq!(
                log.recovery_report().active_segment_extended,
                Some((Offset(0), data_end))
            );
            let all = read_all(&log, Offset(0));
            assert_eq!(all.len() as u64, n);
            // Appends continue, and the next strict open works too.
            log.append_as_leader(Epoch(1), &[payload(n, 0, 90)])
                .unwrap();
            log.close().unwrap();
            let log = open_log(&fs, Path::new(DIR), &multi_page_options())
                .unwrap_or_else(|e| panic!("second open, close {close} n {n}: {e}"));
            let all = read_all(&log, Offset(0));
            assert_eq!(all.len() as u64, n + 1);
            for (o, _, r) in all {
                assert_eq!(r, payload(o, 0, 90));
            }
        }
    }
}
