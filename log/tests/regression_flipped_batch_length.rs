//! Regression: a bit flip in the length field of a batch behind the
//! recovery point, making it reach past the end of the segment, made
//! `Log::read` return an *empty* result instead of an error — the reader
//! saw no data and no corruption. Found by the crash harness (seed 3978 with
//! a bit flip). Fixed: a first batch that does not fit is `Corruption`.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::{batch_range, open_log, payload, seg_path, shared, sim, small_options, DIR};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::CrashPlan;
use quorumlog_log::Error;

#[test]
fn a_batch_length_past_the_segment_end_is_reported() {
    let (disk, fs) = sim(1);
    let mut log = open_log(&fs, Path::new(DIR), &small_options()).unwrap();
    for o in 0..6u64 {
        log.append_as_leader(Epoch(1), &[payload(o, 0, 80)])
            .unwrap();
    }
    log.close().unwrap();
    let disk = disk.crash_with(CrashPlan::KeepAll);
    let path = seg_path(Path::new(DIR), 0);
    let (start, _) = batch_range(&disk, &path, 3);
    // Bit 30 of batch_len (bytes 8..12 of the batch): a huge length.
    disk.flip_bit(&path, (start + 11) * 8 + 6).unwrap();
    let log = open_log(&shared(&disk), Path::new(DIR), &small_options()).unwrap();
    for from in [Offset(3)] {
        match log.read(from, 1 << 16) {
            Err(Error::Corruption { at, .. }) => assert_eq!(at.position(), start),
            other => panic!("expected corruption, got {other:?}"),
        }
    }
}
