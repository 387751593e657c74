//! Regression (issue 9, bug 3): a strict open deleted a segment before
//! failing. With three records flushed and closed, one flipped bit in the
//! base-offset field of the first segment's header made open remove the
//! segment as an "interrupted roll", recreate it empty, and then fail with a
//! misleading "shorter than the recovery point"; a later lenient open
//! returned an empty log. Without the close the same flip made strict open
//! succeed with an empty log. A roll writes and syncs the header before the
//! rename that names the file, so an invalid header is damage: strict open
//! now refuses and changes nothing on disk (compared byte for byte), and the
//! lenient mode drops the segment and reports it.
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
    assert_refused_unchanged, open_log, payload, seg_path, shared, sim, small_options, DIR,
};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::CrashPlan;
use quorumlog_log::{Error, Location, LogOptions, RecoveryMode};

#[test]
fn a_flipped_header_bit_is_refused_without_touching_the_disk() {
    for close in [true, false] {
        // Every bit of the base-offset field (bytes 8..16 of the header).
        for bit in 64..128u64 {
            let (disk, fs) = sim(bit);
            let mut log = open_log(&fs, Path::new(DIR), &small_options()).unwrap();
            log.append_as_leader(
                Epoch(1),
                &[payload(0, 0, 10), payload(1, 0, 10), payload(2, 0, 10)],
            )
            .unwrap();
            if close {
                log.close().unwrap();
            } else {
                log.flush().unwrap();
                drop(log);
            }
            let disk = disk.crash_with(CrashPlan::KeepAll);
            disk.flip_bit(&seg_path(Path::new(DIR), 0), bit).unwrap();
            let fs = shared(&disk);
            let err = assert_refused_unchanged(&fs, Path::new(DIR), &small_options());
            assert!(
                matches!(
                    err,
                    Error::Corruption {
                        at: Location::Segment {
                            segment: Offset(0),
                            position: 0,
                            ..
                        },
                        ..
                    }
                ),
                "close {close} bit {bit}: {err:?}"
            );
            // Refused again: nothing was repaired in between.
            assert_refused_unchanged(&fs, Path::new(DIR), &small_options());
            let lenient = LogOptions {
                recovery_mode: RecoveryMode::TruncateAtCorruption,
                ..small_options()
            };
            let log = open_log(&fs, Path::new(DIR), &lenient).unwrap();
            let dropped = log.recovery_report().dropped.clone().unwrap();
            assert_eq!(
                dropped.segments_removed,
                vec![Offset(0)],
                "close {close} bit {bit}"
            );
        }
    }
}
